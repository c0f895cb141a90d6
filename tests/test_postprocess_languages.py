"""Post-processing for brace languages (Go, Java, TypeScript/JavaScript, Rust): comments and string forms skipped
by the bracket scanner, a line ending in `{` is complete, `function` ends where braces balance, and a completion
never ends inside a block comment. Python's rules are in test_postprocess.py, unchanged."""

from __future__ import annotations

import pytest

from repocomp.prompt.postprocess import choose_kind, is_finished, open_brackets, postprocess

GO_PREFIX = "package m\n\nfunc Sum(xs []int) int {\n\ttotal := 0\n\t"
GO_RAW = "for _, x := range xs {\n\t\ttotal += x // add }\n\t}\n\treturn total\n}\n\nfunc Other() {\n}"


@pytest.mark.parametrize(("language", "line", "depth"), [
    ("go", "s := `{(` + \"}\" + string('{'); f(", 1),
    ("go", "x := 1 // f(", 0),
    ("java", "String s = \"{\"; char c = '('; /* { */ foo(", 1),
    ("java", "String t = \"\"\"\n  {(\n  \"\"\"; foo(", 1),
    ("typescript", "const s = `${a}{`; f(", 1),
    ("javascript", "const re = '/*'; g(", 1),
    ("rust", "let c = '{'; let s = r#\"{\"#; let b = b'('; fn f<'a>(x: &'a str) {", 1),
    ("rust", "let s = r\"\\\"; g(", 1),  # a raw string has no escapes
])
def test_scanner_skips_each_languages_comments_and_strings(language: str, line: str, depth: int) -> None:
    assert open_brackets(line, language) == depth


def test_python_rules_are_the_default() -> None:
    assert open_brackets("x = f(  # )") == 1 == open_brackets("x = f(  # )", "python")
    assert open_brackets("x = f(  // )", "go") == 1 and open_brackets("x = '//' + f(", "python") == 1


def test_go_function_ends_where_its_braces_balance() -> None:
    # the `}` in the comment does not count; the function's own `}` is in the code after the cursor
    assert postprocess(GO_RAW, "function", GO_PREFIX, "\n}\n", "go") == \
        "for _, x := range xs {\n\t\ttotal += x // add }\n\t}\n\treturn total"
    assert postprocess(GO_RAW, "statement", GO_PREFIX, "\n}\n", "go") == \
        "for _, x := range xs {\n\t\ttotal += x // add }\n\t}"


def test_a_line_ending_in_an_open_brace_offers_the_next_statement() -> None:
    prefix = "func f(x bool) int {"
    assert choose_kind(prefix, "", "go") == "line"
    assert choose_kind("if (x) {", "", "java") == "line"
    # the suffix's `}` is not taken for a repeat of the nested block's `}`
    assert postprocess("\n\tif x {\n\t\treturn 1\n\t}\n\treturn 0\n}", "auto", prefix, "\n}\n", "go") == \
        "\n\tif x {\n\t\treturn 1\n\t}"
    assert is_finished("\n\tif x {\n\t\treturn 1\n\t}\n", "auto", prefix, "go")
    assert not is_finished("\n\tif x {\n\t\treturn 1\n", "auto", prefix, "go")
    # the model continues the cursor line itself: that line
    assert postprocess(" return 1 }\nfoo()", "auto", "if (x) {", "", "java") == " return 1 }"


def test_comment_prose_alone_is_never_the_statement() -> None:
    raw = "\n\t// compute the total\n\t/* more\n\tprose */\n\ttotal := sum(xs)\n\treturn total"
    assert postprocess(raw, "auto", "func f(xs []int) int {", "\n}\n", "go") == \
        "\n\t// compute the total\n\t/* more\n\tprose */\n\ttotal := sum(xs)"


def test_never_ends_inside_a_block_comment() -> None:
    assert postprocess("\n  const y = 1; /* start of a", "line", "function f() {", "", "typescript") == \
        "\n  const y = 1;"
    assert postprocess("x + 1; /* half", "line", "  return ", "", "java") == "x + 1;"
    # inside a comment already: its prose is what the user writes
    assert postprocess("the end */\nx", "line", "  /* comment to", "", "java") == "the end */"


def test_typescript_function_body_under_a_header() -> None:
    prefix = "export function add(a: number, b: number): number {\n"
    raw = "  return a + b;\n}\n\nexport function g() {"
    assert choose_kind(prefix, raw, "typescript") == "function"
    assert postprocess(raw, "auto", prefix, "\n}", "typescript") == "  return a + b;"


def test_java_method_written_by_the_completion_ends_with_its_brace() -> None:
    raw = "public int size() {\n    return n;\n}\n\npublic void clear() {"
    assert choose_kind("class A {\n    ", raw, "java") == "function"
    assert postprocess(raw, "auto", "class A {\n    ", "\n}", "java") == "public int size() {\n    return n;\n}"


def test_java_method_in_a_class_body_stops_at_the_methods_brace() -> None:
    prefix = "class A {\n    int size() {\n        if (n > 0) {\n            "
    raw = "return n;\n        }\n        return 0;\n    }\n\n    void clear() {"
    assert postprocess(raw, "function", prefix, "\n    }\n}", "java") == "return n;\n        }\n        return 0;"


def test_rust_function_with_lifetimes_and_chars() -> None:
    prefix = "fn first<'a>(s: &'a str) -> char {\n"
    raw = "    let c = s.chars().next().unwrap_or('}');\n    c\n}\n\nfn other() {}"
    assert postprocess(raw, "auto", prefix, "\n", "rust") == "    let c = s.chars().next().unwrap_or('}');\n    c"


def test_a_block_comment_inside_a_statement_does_not_extend_it() -> None:
    raw = "foo(a, /* the\n   b */ b)\nnext()"
    assert postprocess(raw, "statement", "\t", "", "go") == "foo(a, /* the\n   b */ b)"
    raw = "/* why */ x := 1\ny := 2"
    assert postprocess(raw, "statement", "\t", "", "go") == "/* why */ x := 1"


def test_an_open_block_comment_is_not_finished_while_streaming() -> None:
    assert not is_finished("x := f(a, /* b", "statement", "\t", "go")
    assert not is_finished("x := 1 /* start\n more", "statement", "\t", "go")
    assert is_finished("x := 1 /* start\n more */\ny", "statement", "\t", "go")
    assert postprocess("x := 1 /* start\n more */\ny", "statement", "\t", "", "go") == "x := 1 /* start\n more */"
