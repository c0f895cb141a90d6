"""Editing-session tasks (commit replay): made from a tiny git history built here, deterministic, holes are added
lines of later hunks, nothing typed at or after a hole reaches a task, and the runner replays and scores them."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from repocomp.config.schema import Config
from repocomp.errors import RepocompError
from repocomp.eval.metrics import edit_similarity
from repocomp.eval.records import memory_gt_hit, read_results
from repocomp.eval.runner import EvalOptions, run_eval
from repocomp.eval.session_tasks import (
    SessionEvaluator,
    apply_edit,
    commit_changes,
    cursor_inside,
    hole_line_ok,
    make_session_tasks,
    materialize,
    open_history,
    session_buffer,
    typed_texts,
)
from repocomp.eval.tasks import load_tasks, write_tasks

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
       "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def _git(repo: Path, *args: str, date: int = 0) -> str:
    stamp = f"{1_600_000_000 + date} +0000"
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **ENV, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}).stdout


def _commit(repo: Path, files: dict[str, str | None], message: str, date: int, renames=()) -> str:
    for old, new in renames:
        _git(repo, "mv", old, new)
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            _git(repo, "rm", "-q", rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        _git(repo, "add", rel)
    _git(repo, "commit", "-q", "-m", message, date=date)
    return _git(repo, "rev-parse", "HEAD").strip()


SHAPES = '''"""Shapes."""

import math


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def area(self):
        return math.pi * self.radius ** 2


class Square:
    def __init__(self, side):
        self.side = side

    def area(self):
        return self.side ** 2


def total_area(shapes):
    result = 0
    for shape in shapes:
        result += shape.area()
    return result
'''

UTIL = '''def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    return sum(values) / len(values)
'''


def _planted(text: str, counter: list[int]) -> str:
    """Numbered tokens TOKnnn in the lines marked @@, numbered in typing order (a file's lines top to bottom)."""
    def number(_):
        counter[0] += 1
        return f"TOK{counter[0]:03d}"
    return re.sub("@@", number, text)


def build_history(root: Path) -> Path:
    repo = root / "tiny"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, {"geo/shapes.py": SHAPES, "geo/util.py": UTIL, "README.md": "# tiny\n"}, "initial", 0)
    # several hunks in two files, with renames of a name inside (perimeter added, radius clamped)
    shapes2 = SHAPES.replace(
        "        self.radius = radius\n",
        "        self.radius = clamp(radius, 0, 1000)\n        self.label = 'circle'\n").replace(
        "        return math.pi * self.radius ** 2\n",
        "        return math.pi * self.radius ** 2\n\n    def perimeter(self):\n"
        "        return 2 * math.pi * self.radius\n").replace(
        "        self.side = side\n", "        self.side = clamp(side, 0, 1000)\n        self.label = 'square'\n")
    shapes2 = shapes2.replace("import math\n", "import math\n\nfrom geo.util import clamp\n")
    util2 = UTIL + "\n\ndef spread(values):\n    low, high = min(values), max(values)\n    return high - low\n"
    _commit(repo, {"geo/shapes.py": shapes2, "geo/util.py": util2}, "perimeter, clamp", 10)
    # a rename with edits: util.py -> numbers.py, and its importers follow
    numbers = util2.replace("def mean(values):\n", "def mean(values):\n    if not values:\n"
                            "        raise ValueError('mean of nothing')\n")
    shapes3 = shapes2.replace("from geo.util import clamp", "from geo.numbers import clamp")
    shapes3 = shapes3.replace("    result = 0\n", "    result = 0.0\n    counted = 0\n").replace(
        "        result += shape.area()\n", "        result += shape.area()\n        counted += 1\n")
    _commit(repo, {"geo/numbers.py": numbers, "geo/shapes.py": shapes3}, "rename util", 20,
            renames=[("geo/util.py", "geo/numbers.py")])
    # only adds a file: never used
    _commit(repo, {"geo/extra.py": "def extra_value(x):\n    return x * 2 + 1\n"}, "add only", 30)
    # planted tokens: every added line carries one, numbered in typing order
    counter = [0]
    numbers_lines = numbers.splitlines(keepends=True)
    numbers_lines.insert(1, _planted("    checked_@@ = int(value) + 1\n", counter))
    numbers_lines.insert(8, _planted("    # see @@\n    result_@@ = value * 2\n", counter))
    numbers4 = "".join(numbers_lines)
    numbers4 += _planted("\n\ndef median(values):\n    ordered_@@ = sorted(values)\n"
                         "    middle_@@ = len(ordered_@@) // 2\n    return ordered_@@[middle_@@]\n", counter)
    shapes_lines = shapes3.splitlines(keepends=True)
    shapes_lines.insert(12, _planted("        self.kind_@@ = 'round'\n", counter))
    shapes4 = "".join(shapes_lines) + _planted("\n\ndef largest(shapes):\n"
                                               "    best_@@ = max(shapes, key=lambda s: s.area())\n"
                                               "    return best_@@.area() if best_@@ else 0\n", counter)
    _commit(repo, {"geo/numbers.py": numbers4, "geo/shapes.py": shapes4}, "planted", 40)
    # a vendored-only commit: never used
    _commit(repo, {"vendor/lib.py": "def vendored_thing():\n    return 1\n    # x\n"}, "vendored", 50)
    return repo


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    return build_history(tmp_path_factory.mktemp("hist"))


def _material(task) -> str:
    s = task.metadata["session"]
    return "\n".join([task.prompt, s["before_hole"], s["after_hole"], json.dumps(s["files"]),
                      json.dumps(s["events"])])


def test_commit_filter(history):
    git_dir, name = open_history(history)
    assert name == "tiny" and git_dir.name == ".git"
    # newest first: vendored, planted, add only, rename, perimeter, initial
    commits = _git(history, "rev-list", "HEAD").split()
    tasks = make_session_tasks(history, n=1000, seed=0, per_commit=1000, min_chars=1)
    used = {t.metadata["session"]["commit"] for t in tasks}
    # initial (no parent), add-only, vendored-only: never; the three editing commits: yes
    assert used == {commits[1], commits[3], commits[4]}
    renamed = commit_changes(git_dir, commits[4], commits[3])
    assert [(c.status, c.src, c.path) for c in renamed] == [("R", "geo/util.py", "geo/numbers.py"),
                                                            ("M", "geo/shapes.py", "geo/shapes.py")]
    assert commit_changes(git_dir, commits[3], commits[2]) is None  # add only
    assert commit_changes(git_dir, commits[1], commits[0]) is None  # vendored only


def test_deterministic(history, tmp_path):
    a = make_session_tasks(history, n=6, seed=3, per_commit=3)
    b = make_session_tasks(history, n=6, seed=3, per_commit=3)
    assert [t.to_json() for t in a] == [t.to_json() for t in b] and len(a) == 6
    assert len({t.task_id for t in a}) == 6
    assert max(sum(1 for t in a if t.metadata["session"]["commit"] == c)
               for c in {t.metadata["session"]["commit"] for t in a}) <= 3
    everything = make_session_tasks(history, n=1000, seed=3, per_commit=1000)
    other = make_session_tasks(history, n=1000, seed=4, per_commit=1000)
    assert sorted(t.task_id for t in everything) == sorted(t.task_id for t in other)  # same pool, other order
    # the JSONL round trip keeps everything
    write_tasks(a, tmp_path / "t.jsonl")
    loaded = load_tasks(tmp_path / "t.jsonl")
    assert [t.to_json() for t in loaded] == [t.to_json() for t in a]
    assert {t.kind for t in loaded} == {"session"}


def test_holes_are_added_lines_of_later_hunks(history):
    git_dir, _ = open_history(history)
    tasks = make_session_tasks(history, n=1000, seed=0, per_commit=1000, min_chars=8)
    assert len(tasks) >= 10
    for t in tasks:
        s = t.metadata["session"]
        changes = commit_changes(git_dir, s["parent"], s["commit"])
        steps = [(fc, h) for fc in changes for h in fc.hunks]
        assert s["hunks"] == len(steps) and s["hunk"] >= 1  # never the first hunk
        fc, h = steps[s["hunk"]]
        assert fc.path == t.path
        j = t.line_no - h.new_start
        assert 0 <= j < len(h.inserted) and h.inserted[j].rstrip("\n") == t.ground_truth  # an added line
        final = fc.new_text.splitlines()
        assert final[t.line_no] == t.ground_truth
        assert hole_line_ok(final, t.line_no, set(), 8)
        assert len(t.ground_truth.strip()) >= 8 and not t.ground_truth.strip().startswith("#")
        # the buffer before the hole is the commit's file up to the hole (earlier hunks typed, this one partly)
        assert s["before_hole"] == "".join(fc.new_text.splitlines(keepends=True)[:t.line_no])
        # the events applied to the parent's files give the typed files; the first event opens a file
        def parent(rel, sha=s["parent"]):
            return _git(history, "show", f"{sha}:{rel}")
        texts = typed_texts(t, parent)
        assert texts[t.path].startswith(s["before_hole"])
        assert s["events"][0]["type"] == "opened"
        assert [f["path"] for f in s["files"]] == [e["path"] for e in s["events"] if e["type"] == "opened"]
        for f in s["files"]:
            if f["path"] != t.path:  # other files opened before the hole are typed in full
                done = next(c for c in changes if c.path == f["path"])
                assert texts[f["path"]] == done.new_text
    # the rename: the new name starts from the old file's text
    renamed = [t for t in tasks if any(f["status"] == "R" for f in t.metadata["session"]["files"])]
    assert renamed and all(f["from"] == "geo/util.py" for t in renamed for f in t.metadata["session"]["files"]
                           if f["path"] == "geo/numbers.py")


def test_nothing_after_the_hole_leaks(history):
    tasks = [t for t in make_session_tasks(history, n=1000, seed=0, per_commit=1000, min_chars=1)
             if "TOK" in t.ground_truth]
    assert len(tasks) >= 6
    for t in tasks:
        k = min(int(m) for m in re.findall(r"TOK(\d{3})", t.ground_truth))
        material = _material(t)
        seen = {int(m) for m in re.findall(r"TOK(\d{3})", material)}
        assert all(m < k for m in seen), (t.task_id, k, sorted(seen))  # nothing typed at or after the hole
        assert seen == set(range(1, k))  # and everything typed before it is there
        events = json.dumps(t.metadata["session"]["events"])
        assert {int(m) for m in re.findall(r"TOK(\d{3})", events)} == seen  # the memory's share too


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_after_hole_is_the_buffer_below_the_hole(history, seed):
    """The code after the cursor a session task carries is the buffer's below the hole at that moment: the typed
    file is exactly `before_hole` + `after_hole`, the editor's buffer has an empty line at the hole, and no line
    the developer typed at or after the hole is in it (the planted tokens are all added lines)."""
    tasks = make_session_tasks(history, n=1000, seed=seed, per_commit=1000, min_chars=1)
    assert sum(t.metadata["session"]["hunk"] > 0 for t in tasks) >= 10
    for t in tasks:
        s = t.metadata["session"]

        def parent(rel, sha=s["parent"]):
            return _git(history, "show", f"{sha}:{rel}")
        assert typed_texts(t, parent)[t.path] == s["before_hole"] + s["after_hole"]
        lines = session_buffer(s).split("\n")
        assert lines[t.line_no] == "" and "\n".join(lines[:t.line_no]) + "\n" == s["before_hole"]
        assert "\n".join(lines[t.line_no + 1:]) == s["after_hole"]
        assert "TOK" not in s["after_hole"]  # nothing typed later; what was typed earlier is above the hole
        src = next(f["from"] for f in s["files"] if f["path"] == t.path)
        assert (parent(src) if src else "").endswith(s["after_hole"])  # the parent's code: later hunks not typed


def test_a_cursor_after_the_first_word_of_the_line():
    assert cursor_inside("        import msvcrt", "word") == ("        import", "")
    assert cursor_inside("    self.items = []", "word") == ("    self", "")
    assert cursor_inside('@app.route("/")', "word") == ("@app", "")
    assert cursor_inside("    )", "word") is None and cursor_inside("    pass", "word") is None
    s = {"before_hole": "def f():\n", "after_hole": "    return 1\n"}
    assert session_buffer(s, "    x") == "def f():\n    x\n    return 1\n"


def test_a_cursor_inside_the_brackets_an_editor_paired():
    """Typed up to the line's first opening bracket, its closer after the cursor, where that closer ends the line
    and something stands between (brackets inside strings are not brackets)."""
    assert cursor_inside('    log = get("a(b")', "bracket") == ("    log = get(", ")")
    assert cursor_inside("    rv = [self.options_metavar]", "bracket") == ("    rv = [", "]")
    assert cursor_inside("    f(a)[0]", "bracket") is None  # the first bracket closes before the line ends
    assert cursor_inside("    f(),", "bracket") is None and cursor_inside("    f()", "bracket") is None
    assert cursor_inside("    x = 1  # (note)", "bracket") is None and cursor_inside('    s = "(x)"', "bracket") is None


def test_session_buffer_needs_after_hole():
    with pytest.raises(Exception, match="make-tasks"):
        session_buffer({"before_hole": "x = 1\n"})


def test_apply_edit_checks_the_text():
    ev = {"path": "a.py", "start_line": 1, "start_col": 0, "end_line": 2, "end_col": 0, "removed": "b\n",
          "inserted": "B\nC\n"}
    assert apply_edit("a\nb\nc", ev) == "a\nB\nC\nc"
    with pytest.raises(Exception, match="does not apply"):
        apply_edit("a\nx\nc", ev)
    end = {"path": "a.py", "start_line": 2, "start_col": 0, "end_line": 2, "end_col": 1, "removed": "c",
           "inserted": "c\nd\n"}
    assert apply_edit("a\nb\nc", end) == "a\nb\nc\nd\n"


class _Memory:
    def __init__(self):
        self.events = []

    def opened(self, path, text, time):
        self.events.append(("opened", path, len(text), time))

    def edited(self, edit):
        self.events.append(("edited", edit.path, edit.start_line, edit.inserted, edit.time))


def test_runner_replays_state_and_memory(history, tmp_path, monkeypatch):
    """A scripted engine: at each hole the index holds the typed files, the memory got the events before it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tasks = make_session_tasks(history, n=1000, seed=0, per_commit=1000)
    seen = []

    class Index:
        def __init__(self, root):
            self.root, self.state, self.removed = root, {}, set()

        def update_files(self, changes):
            for p, t in changes.items():
                self.state[p] = t
                self.removed.discard(p)

        def remove_file(self, p):
            self.removed.add(p)

    class Completer:
        memory = None

        def __init__(self, index):
            self.index = index

        async def acomplete(self, path, text, line, col, options):
            seen.append((path, text, line, dict(self.index.state), set(self.index.removed), self.memory))
            from types import SimpleNamespace
            return SimpleNamespace(text=text.splitlines()[-1] if text else "", context=[], prompt_tokens=1,
                                   timings_ms={})

    def factory(root, config, options):
        index = Index(root)
        return index, Completer(index)

    records = []
    by_parent = {}
    for t in tasks:
        by_parent.setdefault(t.metadata["session"]["parent"], []).append(t)
    git_dir, _ = open_history(history)
    for parent, group in by_parent.items():
        root = materialize(git_dir, "tiny", parent)
        assert root.is_relative_to(tmp_path / "cache") and (root / "geo" / "shapes.py").is_file()
        index, completer = factory(root, None, None)
        import asyncio
        asyncio.run(SessionEvaluator(root, index, completer, EvalOptions(backend="extractive"), _Memory)
                    .run(group, records.append))
        assert index.state == {} or all(v is None for v in index.state.values())  # back to the parent's files
        assert not index.removed
    assert len(records) == len(tasks) == len(seen) and not any(r.get("error") for r in records)
    by_id = {t.task_id: t for t in tasks}
    for r, (path, text, line, state, removed, memory) in zip(records, seen):
        t = by_id[r["task_id"]]
        s = t.metadata["session"]
        assert text == s["before_hole"] and line == t.line_no and state[path] == s["before_hole"]
        assert memory is not None and len(memory.events) == len(s["events"]) == r["memory_events"]
        assert r["memory"] is True and r["commit"] == s["commit"]
        assert all(tok not in json.dumps(state) for tok in re.findall(r"TOK\d{3}", t.ground_truth))
        if any(f["status"] == "R" for f in s["files"]):
            assert removed == {"geo/util.py"}


def test_eval_end_to_end_extractive(history, tmp_path, monkeypatch):
    """`repocomp eval` on session tasks with the extractive backend: records with EM/ES, memory on and off."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repos = tmp_path / "repos"
    repos.mkdir()
    _git(tmp_path, "clone", "-q", "--bare", str(history), str(repos / "tiny.git"))
    tasks = make_session_tasks(repos / "tiny.git", n=4, seed=1, per_commit=2)
    assert {t.repo for t in tasks} == {"tiny"}
    write_tasks(tasks, tmp_path / "tasks.jsonl")
    loaded = load_tasks(tmp_path / "tasks.jsonl")
    by_id = {t.task_id: t for t in loaded}
    for memory in (True, False):
        out = tmp_path / f"out-{memory}.jsonl"
        summary = run_eval(loaded, repos, EvalOptions(backend="extractive", memory=memory), Config(), out=out,
                           progress=False)
        records = read_results(out)
        assert summary["tasks"] == len(records) == 4 and summary["failed"] == 0
        for r in records:
            assert r["kind"] == "session" and 0.0 <= r["es"] <= 1.0 and r["em"] in (0.0, 1.0)
            assert r["memory_requested"] is memory and isinstance(r["prediction"], str)
            assert r["es"] == pytest.approx(edit_similarity(r["prediction"], by_id[r["task_id"]].ground_truth))
            # memory off: nothing replayed
            assert r["memory"] is memory and (r["memory_events"] > 0) is memory
            if not memory:
                assert r["memory_consulted"] is False and r["memory_entries"] == 0 and r["memory_gt_hit"] is False
        with pytest.raises(Exception, match="another run"):
            run_eval(loaded, repos, EvalOptions(backend="extractive", memory=not memory), Config(), out=out,
                     progress=False)
    # the editor's buffer (the code after the hole too): its own run, its records say so
    out = tmp_path / "out-editor.jsonl"
    summary = run_eval(loaded, repos, EvalOptions(backend="extractive", editor=True), Config(), out=out, progress=False)
    records = read_results(out)
    assert summary["failed"] == 0 and len(records) == 4 and {r["variant"] for r in records} == {"editor"}
    with pytest.raises(Exception, match="variant=editor"):
        run_eval(loaded, repos, EvalOptions(backend="extractive"), Config(), out=out, progress=False)
    # inside the hole's line: the answer scored with what was typed before the cursor and what stood after it;
    # holes without such a place left out
    for where, variant in (("word", "editor-mid-line"), ("bracket", "editor-in-brackets")):
        out = tmp_path / f"out-{where}.jsonl"
        summary = run_eval(loaded, repos, EvalOptions(backend="extractive", editor=True, mid_line=where), Config(),
                           out=out, progress=False)
        records = read_results(out)
        asked = [t for t in loaded if cursor_inside(t.ground_truth, where) is not None]
        assert summary["failed"] == 0 and len(records) == len(asked)
        assert {r["variant"] for r in records} <= {variant}
        for r in records:
            truth = by_id[r["task_id"]].ground_truth
            typed, after = cursor_inside(truth, where)
            assert r["prediction"].startswith(typed) and r["prediction"].endswith(after)
            assert r["em"] == float(r["prediction"].strip() == truth.strip())
    assert len(read_results(tmp_path / "out-word.jsonl")) >= 1
    with pytest.raises(RepocompError, match="needs --editor"):
        run_eval(loaded, repos, EvalOptions(backend="extractive", mid_line="bracket"), Config(), progress=False)
    trees = list((tmp_path / "cache" / "repocomp" / "eval" / "trees" / "tiny").iterdir())
    assert len(trees) == len({t.metadata["session"]["parent"] for t in tasks})  # one tree per parent


def test_memory_gt_hit_reads_the_entries_shown():
    from repocomp.memory.controller import MemoryDecision, MemoryEntry

    def decision(consulted, *lines):
        entry = MemoryEntry("hunk", "a.py", 3, list(lines), "\n".join(lines), 1.0, ())
        return MemoryDecision(consulted, "", 10, (entry,))

    assert memory_gt_hit("    x = f(1)\n", decision(True, "was: x = f(1)", "    y = 2"))  # a replaced line counts
    assert memory_gt_hit("x = f(1)", decision(True, "    x = f(1)"))
    assert not memory_gt_hit("x = f(1)", decision(True, "x = f(2)"))
    assert not memory_gt_hit("x = f(1)", decision(False, "x = f(1)")) and not memory_gt_hit("x = f(1)", None)


def test_generation_cache_answers_what_the_same_model_answered(history, tiny_model_dir, tmp_path, monkeypatch):
    """`--generation-cache`: a rerun decodes nothing and answers the same; an ablation decodes only where its prompt
    differs, and what it takes from the file is what the model answers without it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repos = tmp_path / "repos"
    repos.mkdir()
    _git(tmp_path, "clone", "-q", "--bare", str(history), str(repos / "tiny.git"))
    write_tasks(make_session_tasks(repos / "tiny.git", n=4, seed=1, per_commit=2), tmp_path / "tasks.jsonl")
    loaded = load_tasks(tmp_path / "tasks.jsonl")
    config = Config().replace("backend", name="transformers", model=str(tiny_model_dir), max_new_tokens=6,
                              fallback="")
    cached = EvalOptions(backend="transformers", generation_cache=str(tmp_path / "generations.sqlite"))

    def run(options: EvalOptions, name: str) -> list[dict]:
        summary = run_eval(loaded, repos, options, config, out=tmp_path / name, progress=False)
        assert summary["failed"] == 0
        return sorted(read_results(tmp_path / name), key=lambda r: r["task_id"])

    first, again = run(cached, "first.jsonl"), run(cached, "again.jsonl")
    assert all(r["generations"] >= 1 and r["generations_cached"] == 0 for r in first)
    assert all(r["generations_cached"] == r["generations"] for r in again)
    assert [r["prediction"] for r in again] == [r["prediction"] for r in first]
    # no memory: the prompts the memory changed are decoded, the others answered from the file
    ablated = run(EvalOptions(backend="transformers", generation_cache=cached.generation_cache, memory=False),
                  "ablated.jsonl")
    fresh = run(EvalOptions(backend="transformers", memory=False), "fresh.jsonl")
    assert "generations" not in fresh[0]
    assert any(r["generations_cached"] < r["generations"] for r in ablated)
    assert [r["prediction"] for r in ablated] == [r["prediction"] for r in fresh]


def test_a_generation_cache_that_is_not_one_is_refused(tmp_path):
    from repocomp.backends.extractive import ExtractiveBackend
    from repocomp.eval.generation_cache import CachedGenerations

    bad = tmp_path / "cache.sqlite"
    bad.write_bytes(b"not a database, some other file " * 64)
    with pytest.raises(RepocompError, match="not a usable cache file"):
        CachedGenerations(ExtractiveBackend(), bad, {})
    assert bad.read_bytes().startswith(b"not a database")  # left as it was
