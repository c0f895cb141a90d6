"""The prompt per language: the cursor file's line comment on every fixed and quoted line (Python's `#` kept
byte for byte), the budget still counted exactly, and a definition already in the in-file context not repeated."""

from __future__ import annotations

from configs import prompt_config

from repocomp.prompt.layout import (
    BlockSource,
    DefinitionSource,
    DefinitionsSection,
    Place,
    RecentSection,
    RecentSource,
    build_prompt,
    estimate_tokens,
)

GO_BLOCK = BlockSource(4, ("pkg/util.go",), 10, 12, "func Add(a, b int) int {\n\treturn a + b")
GO_PREFIX = "package main\n\nfunc main() {\n\ty := "
CFG = prompt_config(max_tokens=2000, context_tokens=400)


def test_go_prompt_uses_line_comment_everywhere() -> None:
    d = DefinitionSource("Point", "pkg/geom.go", ((2, "type Point struct {"), (3, "\tX, Y int"), (8, "}")))
    r = RecentSource("hunk", "main.go", 0, ("package main",))
    p = build_prompt([GO_BLOCK], GO_PREFIX, "", CFG, definitions=DefinitionsSection([d], share=0.5), place=Place("main.go", 3),
                     recent=RecentSection([r], 100))
    assert p.text == (
        "// Here are definitions from the repo that the code below uses:\n"
        "// --------------------------------------------------\n"
        "// pkg/geom.go\n"
        "// type Point struct {\n"
        "// \tX, Y int\n"
        "// ...\n"
        "// }\n"
        "// --------------------------------------------------\n"
        "// Here are some relevant code fragments from other files of the repo:\n"
        "// --------------------------------------------------\n"
        "// the below code fragment can be found in:\n"
        "// pkg/util.go\n"
        "// --------------------------------------------------\n"
        "// func Add(a, b int) int {\n"
        "// \treturn a + b\n"
        "// --------------------------------------------------\n"
        "\n" + GO_PREFIX
    )  # the hunk is in view (line 0 of main.go): not shown
    assert "#" not in p.text
    assert p.tokens == estimate_tokens(p.text)


def test_recent_section_and_language_argument() -> None:
    r = RecentSource("hunk", "src/lib.rs", 40, ("    let total = sum(&items);",))
    t = RecentSource("thought", "src/lib.rs", -1, ("renamed count -> total",))
    p = build_prompt([], "fn main() {\n    ", "", CFG, recent=RecentSection([r, t], 100), place=Place(language="rust"))
    assert p.text.startswith(
        "// Recent edits in this session:\n"
        "// --------------------------------------------------\n")
    assert "// src/lib.rs (line 41):\n//     let total = sum(&items);\n" in p.text
    assert "// - renamed count -> total\n" in p.text
    assert p.tokens == estimate_tokens(p.text)


def test_languages_by_extension() -> None:
    for path, mark in (("a.ts", "//"), ("A.java", "//"), ("a.js", "//"), ("a.cpp", "//"), ("a.py", "#"),
                       ("README", "#")):
        p = build_prompt([GO_BLOCK], "x = ", "", CFG, place=Place(path, 0))
        assert p.text.startswith(f"{mark} Here are some relevant code fragments"), path
        assert f"{mark} the below code fragment can be found in:" in p.text


def test_python_prompt_unchanged_with_explicit_language() -> None:
    block = BlockSource(7, ("pkg/util.py",), 10, 12, "def add(a, b):\n    return a + b")
    assert build_prompt([block], "y = ", "", CFG, place=Place(language="python")).text == \
        build_prompt([block], "y = ", "", CFG).text


def _own_file_case(path: str, lines: list[str], def_lines: tuple[int, ...], cursor: int) -> tuple[str, str]:
    d = DefinitionSource("T", path, tuple((n, lines[n]) for n in def_lines))
    other = DefinitionSource("U", "other" + path[path.rfind("."):], ((0, "U_HEADER_LINE"),))
    prefix = "\n".join(lines[:cursor] + ["    "])
    p = build_prompt([], prefix, "", prompt_config(max_tokens=2000, context_tokens=60), definitions=DefinitionsSection([d, other], share=0.9), place=Place(path, cursor))
    return p.text, p.context


def test_definition_in_view_is_not_repeated_python() -> None:
    lines = ["import os", "", "class Box:", "    '''A box.'''", "    size = 3", "", "    def grow(self):",
             "        return 1", "", "", "def main():"]
    text, context = _own_file_case("m.py", lines, (2, 3, 4, 6), 11)
    assert "class Box:" in context  # in view
    assert "# class Box:" not in text and "size = 3\n" not in text.split("\n\n")[0]
    assert "# U_HEADER_LINE" in text  # other definitions still shown


def test_definition_partly_in_view_is_not_repeated_go() -> None:
    # the window shows the struct's fields but not its header: the header alone is not shown either
    lines = ["package m", "", "type Box struct {"] + [f"\tF{i} int" for i in range(30)] + ["}", "", "func f() {"]
    text, context = _own_file_case("m.go", lines, (2, 31, 32), len(lines))
    assert "type Box struct {" not in context and "F29" in context
    assert "// type Box struct {" not in text
    assert "// U_HEADER_LINE" in text
