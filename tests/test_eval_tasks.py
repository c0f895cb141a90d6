"""RepoEval format loading (both line-number keys) and the task maker."""

import json
from pathlib import Path

import pytest

from repocomp.errors import RepocompError
from repocomp.eval.tasks import load_tasks, make_tasks, write_tasks

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "eval_repo"


def _write(path: Path, objs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


def test_load_line_level_format(tmp_path):
    f = _write(tmp_path / "line.jsonl", [
        {"prompt": "import os\n", "metadata": {"task_id": "shop/0", "ground_truth": "x = 1",
                                               "fpath_tuple": ["eval_repo", "shop", "cart.py"],
                                               "context_start_lineno": 3, "line_no": 12}}])
    (task,) = load_tasks(f)
    assert (task.task_id, task.repo, task.path, task.line_no, task.context_start_lineno, task.kind) == \
        ("shop/0", "eval_repo", "shop/cart.py", 12, 3, "line")


def test_load_function_level_format_with_colliding_ids(tmp_path):
    md = {"task_id": "owner--repo/idx", "ground_truth": "    return 1\n", "fpath_tuple": ["r", "a.py"],
          "context_start_lineno": 0, "lineno": 4, "function_name": "f"}
    f = _write(tmp_path / "function.jsonl", [{"prompt": "def f():", "metadata": dict(md)},
                                             {"prompt": "def g():", "metadata": dict(md, lineno=9)},
                                             {"prompt": "x", "metadata": dict(md, task_id="unique")}])
    tasks = load_tasks(f)
    assert [t.task_id for t in tasks] == ["owner--repo/idx#0", "owner--repo/idx#1", "unique"]
    assert [t.line_no for t in tasks] == [4, 9, 4]
    assert all(t.kind == "function" for t in tasks)
    assert tasks[0].metadata["function_name"] == "f"


def test_load_rejects_a_non_repoeval_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "x", "metadata": {"task_id": "a"}}\n')
    with pytest.raises(RepocompError, match="bad.jsonl:1"):
        load_tasks(f)


def test_made_tasks_round_trip_through_the_file_format(tmp_path):
    tasks = make_tasks(FIXTURE, "api", n=4, seed=0)
    assert write_tasks(tasks, tmp_path / "api.jsonl") == len(tasks) == 4
    loaded = load_tasks(tmp_path / "api.jsonl")
    assert [(t.task_id, t.path, t.line_no, t.ground_truth, t.api_definitions, t.kind) for t in loaded] == \
        [(t.task_id, t.path, t.line_no, t.ground_truth, t.api_definitions, t.kind) for t in tasks]


@pytest.mark.parametrize("kind", ["line", "api", "function"])
def test_make_tasks_is_deterministic_with_a_seed(kind):
    a = [t.to_json() for t in make_tasks(FIXTURE, kind, n=6, seed=3)]
    b = [t.to_json() for t in make_tasks(FIXTURE, kind, n=6, seed=3)]
    c = [t.to_json() for t in make_tasks(FIXTURE, kind, n=6, seed=4)]
    assert a == b and len(a) == 6
    assert a != c


@pytest.mark.parametrize("kind", ["line", "api", "function"])
def test_made_tasks_match_the_files(kind):
    for task in make_tasks(FIXTURE, kind, n=50, seed=0):
        lines = (FIXTURE / task.path).read_text().splitlines()
        assert task.prompt == "\n".join(lines[task.context_start_lineno:task.line_no])
        gt_lines = task.ground_truth.rstrip("\n").split("\n")
        assert lines[task.line_no:task.line_no + len(gt_lines)] == gt_lines


def test_line_tasks_follow_a_non_blank_line_and_are_unique():
    tasks = make_tasks(FIXTURE, "line", n=1000, seed=0)
    stripped = [t.ground_truth.strip() for t in tasks]
    assert len(stripped) == len(set(stripped)) > 20
    for t in tasks:
        lines = (FIXTURE / t.path).read_text().splitlines()
        assert lines[t.line_no - 1].strip() and not stripped[0].startswith("#")
        assert '"""' not in t.ground_truth  # no docstring lines


def test_api_tasks_name_definitions_in_other_files():
    tasks = {(t.path, t.ground_truth.strip()): t.api_definitions for t in make_tasks(FIXTURE, "api", n=100)}
    # `from shop.pricing import ... compute_discount` in cart.py
    assert tasks[("shop/cart.py", "discounted = compute_discount(subtotal, discount_rate)")] == \
        [{"path": "shop/pricing.py", "line_no": 5}]
    # relative import `from .cart import Cart` in report.py; a class call points at the class line
    assert tasks[("shop/report.py", "cart = Cart(table)")] == [{"path": "shop/cart.py", "line_no": 5}]
    for (path, _), defs in tasks.items():
        assert defs and all(d["path"] != path for d in defs)


def test_function_tasks_start_after_the_docstring_and_have_three_lines():
    tasks = make_tasks(FIXTURE, "function", n=100)
    by_name = {t.metadata["function_name"]: t for t in tasks}
    cd = by_name["compute_discount"]
    assert cd.ground_truth.startswith("    if rate < 0 or rate > 1:\n") and cd.ground_truth.endswith("\n")
    assert "apply_tax" not in by_name  # two-line body
    assert all(sum(1 for ln in t.ground_truth.splitlines() if ln.strip()) >= 3 for t in tasks)


def test_make_tasks_rejects_unknown_kind_and_missing_repo(tmp_path):
    with pytest.raises(RepocompError):
        make_tasks(FIXTURE, "block")
    with pytest.raises(RepocompError):
        make_tasks(tmp_path / "nope", "line")


def test_make_tasks_says_why_a_repository_gives_none(tmp_path, capsys):
    """A repository with nothing to make tasks from used to give "0 line tasks written" and exit 0: now one line
    saying why (no source file at all; function tasks from a Go project; a language the repository lacks)."""
    from repocomp.cli import main

    repo = tmp_path / "gorepo"
    repo.mkdir()
    (repo / "go.mod").write_text("module example.com/x\n")
    out = tmp_path / "t.jsonl"
    assert main(["eval", "make-tasks", str(repo), "--kind", "line", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no line tasks" in err and "no file of a language" in err
    (repo / "main.go").write_text("package main\n\nfunc main() {\n\tprintln(1)\n}\n")
    assert main(["eval", "make-tasks", str(repo), "--kind", "function", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no function tasks" in err and "Python files only" in err
    assert main(["eval", "make-tasks", str(repo), "--kind", "line", "--language", "rust", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no line tasks" in err and "no rust file" in err
    assert not out.exists()
    assert main(["eval", "make-tasks", str(repo), "--kind", "line", "--out", str(out)]) == 0
    assert [t.ground_truth for t in load_tasks(out)] == ["\tprintln(1)"]


def test_api_tasks_follow_the_engines_resolver(tmp_path):
    """The task maker resolves calls with graph.lookup, as the engine does: methods inherited from a class of
    another file (`self.m()`), `Class.method`, re-exports through a package, an aliased module import, and a method
    that only one class defines; a library call or a name defined in the same file is not an API task.
    `helper` and `build` are defined by two classes, so only the class hierarchy tells which one is called."""
    pkg = tmp_path / "repo" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.base import Base\n")
    (pkg / "base.py").write_text(
        "class Base:\n"
        "    def helper(self, x):\n"
        "        return x + 1\n"
        "\n"
        "    @classmethod\n"
        "    def build(cls):\n"
        "        return cls()\n"
        "\n"
        "\n"
        "def scale(v):\n"
        "    return v * 2\n"
        "\n"
        "\n"
        "class Meter:\n"
        "    def reading_in_volts(self):\n"
        "        return 0.0\n")
    (pkg / "other.py").write_text(
        "class Other:\n"
        "    def helper(self, x):\n"
        "        return x\n"
        "\n"
        "    def build(self):\n"
        "        return self\n")
    (pkg / "child.py").write_text(
        "import os\n"
        "import pkg.base as b\n"
        "from pkg import Base\n"
        "\n"
        "\n"
        "def local(v):\n"
        "    return v\n"
        "\n"
        "\n"
        "class Child(Base):\n"
        "    def run(self, meter):\n"
        "        y = self.helper(3)\n"
        "        made = Base.build()\n"
        "        z = b.scale(y)\n"
        "        v = meter.reading_in_volts()\n"
        "        w = local(os.getcwd())\n"
        "        return y, made, z, v, w\n")
    tasks = {t.ground_truth.strip(): t.api_definitions for t in make_tasks(tmp_path / "repo", "api", n=100)}
    assert tasks == {
        "y = self.helper(3)": [{"path": "pkg/base.py", "line_no": 1}],
        "made = Base.build()": [{"path": "pkg/base.py", "line_no": 5}],
        "z = b.scale(y)": [{"path": "pkg/base.py", "line_no": 9}],
        "v = meter.reading_in_volts()": [{"path": "pkg/base.py", "line_no": 14}],
    }
