"""The README and docs/ stay true to the code: editor snippets equal their files, result tables equal what
`repocomp eval report` prints from the results files, every doc is reachable from the README, and no wording of a
lab notebook (issue numbers, "earlier runs") creeps back in."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [README, *DOCS]

SNIPPET = re.compile(r"^<!-- snippet: (?P<path>\S+) -->\n```[\w-]*\n(?P<body>.*?)^```$", re.M | re.S)
REPORT = re.compile(r"^<!-- report: (?P<command>repocomp eval (?:report|compare) [^\n]*?) -->\n(?P<body>.*?)^<!-- /report -->$",
                    re.M | re.S)
BANNED = (re.compile(r"\bissue \d+", re.I), re.compile(r"\bstop \d+", re.I), re.compile(r"[Ee]arlier runs"))


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _snippets() -> list[tuple[str, str, str]]:
    return [(_rel(page), m["path"], m["body"]) for page in PAGES for m in SNIPPET.finditer(page.read_text())]


def _reports() -> list[tuple[str, str, str]]:
    return [(_rel(page), m["command"], m["body"]) for page in PAGES for m in REPORT.finditer(page.read_text())]


def test_readme_is_short() -> None:
    lines = README.read_text().count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move detail to docs/"


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    head = README.read_text().splitlines()
    assert head[0] == "# repocomp" and head[2] == "```bash" and head[5] == "```"
    setup, tests = head[3], head[4]
    assert "repocomp model prepare" in setup and "repocomp complete" in setup
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()[-1]


def test_every_doc_is_linked_from_the_readme() -> None:
    text = README.read_text()
    missing = [_rel(d) for d in DOCS if f"]({_rel(d)})" not in text]
    assert not missing, f"not linked from README.md: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_resolve(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{_rel(page)} links to {target}, which does not exist"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_lab_notebook_wording(page: Path) -> None:
    text = page.read_text()
    found = [m.group(0) for pattern in BANNED for m in pattern.finditer(text)]
    assert not found, f"{_rel(page)}: {found}"


def test_the_editor_snippets_are_shown() -> None:
    shown = {path for _, path, _ in _snippets()}
    files = {f"lsp_bench/editors/{p.name}" for p in (ROOT / "lsp_bench" / "editors").iterdir() if p.is_file()}
    assert files <= shown, f"snippet files shown nowhere: {sorted(files - shown)}"


@pytest.mark.parametrize(("page", "path", "body"), _snippets(), ids=lambda v: v if "\n" not in v else "")
def test_snippet_equals_its_file(page: str, path: str, body: str) -> None:
    assert body == (ROOT / path).read_text(), f"{page}: the block marked `snippet: {path}` differs from the file"


def test_result_tables_are_marked() -> None:
    assert len(_reports()) >= 3


@pytest.mark.parametrize(("page", "command", "body"), _reports(), ids=lambda v: v if "\n" not in v else "")
def test_result_table_is_what_the_command_prints(page: str, command: str, body: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from repocomp.cli import main

    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(shlex.split(command)[1:]) == 0
    assert body == out.getvalue(), f"{page}: regenerate the table under `{command}` (run it, paste its output)"
