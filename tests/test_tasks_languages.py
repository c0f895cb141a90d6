"""The task maker beyond Python: line and API holes in TypeScript, Java, Go and Rust files (real tree-sitter
parsing of small repositories), `--language`, determinism, and a Go task through the real engine without leakage."""

import re
from pathlib import Path

import pytest

from repocomp.config.schema import Config
from repocomp.eval.tasks import load_tasks, make_tasks, pick_languages, write_tasks

PLANT = "zqxplanted"

# per language: files of a small repository; every file has comments, multi-line strings or comments, lone
# closing brackets, and one line holding a token found nowhere else (`<PLANT>_<lang>`)
REPOS: dict[str, dict[str, str]] = {
    "typescript": {
        "src/util.ts": """\
// Helpers shared by the app.
export function formatName(first: string, last: string): string {
  const full = `${first} ${last}`;
  return full.trim();
}

/**
 * Sums a list.
 */
export function total(values: number[]): number {
  let sum = 0;
  for (const v of values) {
    sum += v;
  }
  return sum;
}
""",
        "src/main.ts": """\
import { formatName, total } from "./util";

export function greet(user: { first: string; last: string }): string {
  // build the greeting
  const name = formatName(user.first, user.last);
  const banner = `Hello,
    dear ${name}
  `;
  const zqxplanted_typescript = total([1, 2, 3]);
  return banner + String(zqxplanted_typescript);
}

export const handlers = [1, 2].map((x) => {
  return x * 2;
});
""",
    },
    "java": {
        "src/main/java/app/Helper.java": """\
package app;

/** Arithmetic helpers. */
public final class Helper {
  private Helper() {}

  /**
   * Triples a number.
   */
  public static int triple(int x) {
    int y = x * 3;
    return y;
  }
}
""",
        "src/main/java/app/App.java": """\
package app;

import java.util.List;

public class App {
  // the entry point
  public static void main(String[] args) {
    int base = args.length;
    int zqxplanted_java = Helper.triple(base);
    String text = \"\"\"
        multi-line
        text block
        \"\"\";
    System.out.println(text + zqxplanted_java);
  }
}
""",
    },
    "go": {
        "util.go": """\
package demo

// Add adds two numbers.
func Add(a, b int) int {
	sum := a + b
	return sum
}
""",
        "main.go": """\
package demo

import "fmt"

/* Run prints
   a sum. */
func Run() {
	x := 1
	zqxplanted_go := Add(x, 2) // call into util.go
	usage := `first
second`
	fmt.Println(usage, zqxplanted_go)
}
""",
    },
    "rust": {
        "src/lib.rs": """\
//! The crate root.
pub mod other;

/// Doubles a number.
pub fn double(x: i32) -> i32 {
    let y = x * 2;
    y
}
""",
        "src/other.rs": """\
use crate::double;

/* block
   comment */
pub fn run() -> i32 {
    let a = 3;
    let zqxplanted_rust = double(a);
    let s = r#"raw
string"#;
    zqxplanted_rust + s.len() as i32
}

pub fn tail(v: i32) -> i32 {
    double(v + 1)
}
""",
    },
}
CALLS = {  # an API hole: (file, ground truth, definition file, 0-indexed line of the definition)
    "java": ("src/main/java/app/App.java", "    int zqxplanted_java = Helper.triple(base);",
             "src/main/java/app/Helper.java", 9),
    "go": ("main.go", "\tzqxplanted_go := Add(x, 2) // call into util.go", "util.go", 3),
    "typescript": ("src/main.ts", "  const name = formatName(user.first, user.last);", "src/util.ts", 1),
    "rust": ("src/other.rs", "    let zqxplanted_rust = double(a);", "src/lib.rs", 4),
    "rust-tail": ("src/other.rs", "    double(v + 1)", "src/lib.rs", 4),  # a tail expression: its line
}


def _repo(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture(params=sorted(REPOS))
def lang_repo(request, tmp_path):
    return request.param, _repo(tmp_path / f"{request.param}_repo", REPOS[request.param])


# lines of the fixtures that are no code: inside multi-line strings and comments (the generic checks below
# catch comment openers, blank lines and brackets alone)
NEVER = {
    "typescript": {"dear ${name}", "`;", "*/"},
    "java": {"multi-line", "text block", '""";', "*/", "* Triples a number."},
    "go": {"a sum. */", "second`"},
    "rust": {"comment */", 'string"#;'},
}


def test_line_holes_are_code_lines_in_every_language(lang_repo):
    lang, repo = lang_repo
    tasks = make_tasks(repo, "line", n=1000, seed=0)
    assert tasks and {t.language for t in tasks} == {lang}
    chosen = set()
    for t in tasks:
        lines = (repo / t.path).read_text().splitlines()
        assert t.ground_truth == lines[t.line_no]  # one whole line
        s = t.ground_truth.strip()
        assert s not in NEVER[lang], (t.path, s)
        assert s and not s.startswith(("//", "/*", "*")) and re.search(r"\w", s)
        assert s not in ("}", "});", ")", "]") and lines[t.line_no - 1].strip()  # Python's rule: after a code line
        chosen.add((t.path, s))
    planted = next(p for p, text in REPOS[lang].items() if PLANT in text)
    planted_line = next(ln.strip() for ln in REPOS[lang][planted].splitlines() if PLANT in ln and "=" in ln)
    assert (planted, planted_line) in chosen


def test_line_holes_never_leak(lang_repo):
    lang, repo = lang_repo
    planted = False
    for t in make_tasks(repo, "line", n=1000, seed=0, prompt_tokens=10_000):
        lines = (repo / t.path).read_text().splitlines()
        assert t.prompt == "\n".join(lines[t.context_start_lineno:t.line_no])  # ends before the hole
        if sum(1 for ln in lines if ln.strip() == t.ground_truth.strip()) == 1:  # a unique line: nowhere in it
            assert t.ground_truth.strip() not in [ln.strip() for ln in t.prompt.splitlines()]
        if PLANT in t.ground_truth and PLANT not in "\n".join(lines[:t.line_no]):  # the token's first line
            assert PLANT not in t.prompt
            planted = True
    assert planted


@pytest.mark.parametrize("lang", sorted(CALLS))
def test_api_hole_for_a_call_into_another_file(tmp_path, lang):
    repo = _repo(tmp_path / "repo", REPOS[lang.split("-")[0]])
    path, gt, def_path, def_line = CALLS[lang]
    tasks = {(t.path, t.ground_truth): t for t in make_tasks(repo, "api", n=100, seed=0)}
    task = tasks[(path, gt)]
    assert task.kind == "api" and task.language == lang.split("-")[0]
    assert task.api_definitions == [{"path": def_path, "line_no": def_line}]
    lines = (repo / path).read_text().splitlines()
    assert task.prompt == "\n".join(lines[task.context_start_lineno:task.line_no])
    if PLANT in gt:
        assert PLANT not in task.prompt
    for t in tasks.values():  # every API hole names definitions of another file
        assert t.api_definitions and all(d["path"] != t.path for d in t.api_definitions)


def test_language_filters_and_defaults_to_the_dominant_one(tmp_path):
    repo = _repo(tmp_path / "mixed", {**REPOS["go"], **{f"b/{k}": v for k, v in REPOS["typescript"].items()},
                                      "b/extra.ts": "export const one = 1;\nexport const two = one + 1;\n"})
    assert pick_languages(repo, None) == ("typescript",)  # three TypeScript files, two Go ones
    assert {t.language for t in make_tasks(repo, "line", n=1000)} == {"typescript"}
    assert {t.language for t in make_tasks(repo, "line", n=1000, language="go")} == {"go"}
    assert {t.path for t in make_tasks(repo, "line", n=1000, language="go")} <= {"main.go", "util.go"}
    assert {t.language for t in make_tasks(repo, "line", n=1000, language="all")} == {"go", "typescript"}
    assert make_tasks(repo, "line", n=10, language="rust") == []
    with pytest.raises(Exception, match="unknown language"):
        make_tasks(repo, "line", language="cobol")


def test_cli_language_option_and_the_language_field(tmp_path, capsys):
    from repocomp.cli import main

    repo = _repo(tmp_path / "mixed", {**REPOS["go"], **REPOS["rust"]})
    out = tmp_path / "t.jsonl"
    assert main(["eval", "make-tasks", str(repo), "--kind", "line", "--language", "rust", "--out", str(out)]) == 0
    assert "rust:" in capsys.readouterr().out
    tasks = load_tasks(out)
    assert tasks and {t.language for t in tasks} == {"rust"} and all(t.path.endswith(".rs") for t in tasks)
    # a task file without `language` (made before it existed) is read, its language taken from the path
    old = tmp_path / "old.jsonl"
    old.write_text(out.read_text().replace(', "language": "rust"', ""))
    assert '"language"' not in old.read_text()
    assert [t.language for t in load_tasks(old)] == [t.language for t in tasks]


@pytest.mark.parametrize("kind", ["line", "api"])
def test_same_seed_same_tasks(tmp_path, kind):
    repo = _repo(tmp_path / "repo", {**REPOS["go"], **{f"more/{k}": v for k, v in REPOS["go"].items()}})
    a = [t.to_json() for t in make_tasks(repo, kind, n=3, seed=5)]
    b = [t.to_json() for t in make_tasks(repo, kind, n=3, seed=5)]
    assert a == b and a
    write_tasks(make_tasks(repo, kind, n=3, seed=5), tmp_path / "x.jsonl")
    assert [t.to_json() for t in load_tasks(tmp_path / "x.jsonl")] == a
    if kind == "line":
        assert [t.to_json() for t in make_tasks(repo, kind, n=3, seed=6)] != a


def test_go_task_through_the_real_engine_never_leaks(tmp_path):
    """A Go API task evaluated retrieval-only by the real engine: the planted token of its hole line reaches
    neither the prompt, nor a context fragment, nor the index while the task runs; the definition is checked."""
    from repocomp.eval.records import read_results
    from repocomp.eval.runner import EvalOptions, open_engine, run_eval

    repos = tmp_path / "repos"
    repo = _repo(repos / "demo", REPOS["go"])
    path, gt, _, _ = CALLS["go"]
    task = next(t for t in make_tasks(repo, "api", n=100, seed=0) if t.ground_truth == gt)
    seen = {}

    def factory(root, config, options):
        index, completer = open_engine(root, config, options)
        real = completer.acomplete

        async def spy(*args, **kw):
            seen["fragments"] = [f.text for f in index.fragments if f is not None]
            seen["result"] = await real(*args, **kw)
            return seen["result"]

        completer.acomplete = spy
        return index, completer

    summary = run_eval([task], repos, EvalOptions(mode="repocoder", backend="none"), Config(),
                       out=tmp_path / "out.jsonl", progress=False, engine_factory=factory)
    assert summary["failed"] == 0 and summary["tasks"] == 1
    result = seen["result"]
    assert PLANT not in result.prompt and all(PLANT not in b.text for b in result.context)
    assert not any(PLANT in t for t in seen["fragments"])
    rec = read_results(tmp_path / "out.jsonl")[0]
    assert rec["kind"] == "api" and rec["def_hit"] is not None and "error" not in rec
