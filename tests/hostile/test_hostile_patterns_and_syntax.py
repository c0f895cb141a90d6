"""Hostile patterns and syntax (round two, items 2 and 6): what a repository writes is bounded in time and memory.

- `.gitignore` / `[index] exclude` patterns: no exponential backtracking (`*a*a*...*b` next to a long name froze
  the indexer while holding the interpreter lock), a bounded number of them (350,000 excludes made indexing
  quadratic), git's semantics kept (`repocomp.index.ignore`, checked against pathspec on random patterns).
- Syntax: 150,000 nested calls `f(f(...))` made the call query run for minutes; now the graph is flattened below
  `graph.parsing.MAX_DEPTH` levels and the summary names the file.
- Folders: `[index] max_files` / `max_total_bytes` and an entry budget index a folder partially, with a warning;
  the walk stays on the root's file system (`/` as a folder never walks `/proc`).

The CLI runs as a subprocess (`cli_run`), under a wrapper that reports the peak RSS of the command; the server runs
over stdio (pytest-lsp). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pathspec
import pytest
from cli_run import REPO_ROOT, TIMEOUT_S, assert_one_line_error, python, repocomp, user_env
from lsp_helpers import capabilities, end_of, inline, open_doc, stats, warnings
from lsprotocol import types
from pytest_lsp import LanguageClient

from repocomp.index.ignore import MAX_PATTERNS_PER_SOURCE, PatternSet, parse_line

# docs/security.md's figures ("Bounds on hostile input", the hostile-repository cases) and the bounds here
INDEX_BOUND_S = 10.0  # CPU s: the `.gitignore` case's target (its figure: 4.6 s), used for every CLI case here
WALL_BOUND_S = 60.0  # the same run in wall time: loose, for 2 cores shared with other work (a hang still fails)
RSS_BOUND_KB = 3 * 276_000  # three times the `.gitignore` case's 276 MB peak RSS, for every CLI case here
NESTED_BOUND_S = 3 * 1.9  # CPU s: three times the 150,000 nested calls' 1.7-1.9 s
ANSWER_BOUND_S = 1.0  # a request on another folder's document while one indexes: its figure is 0.22 s
BACKTRACKING = "*a*a*a*a*a*a*a*a*a*a*a*a*b"
LONG_NAME = "a" * 200 + ".py"
# wraps a command: runs it, then prints the CPU seconds and peak RSS of it (and its children) last on stderr
_MEASURED = ("import resource, subprocess, sys\n"
             "code = subprocess.run(sys.argv[1:]).returncode\n"
             "use = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
             "print(f'CPU_S {use.ru_utime + use.ru_stime} MAXRSS_KB {use.ru_maxrss}', file=sys.stderr)\n"
             "sys.exit(code)\n")


def measured_index(home: Path, *args: str, cpu_bound_s: float = INDEX_BOUND_S,
                   ) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """`repocomp index --json ARGS`: the process, its CPU time (s) and its peak RSS (KB); fails past the bounds.

    CPU time, not wall time, is held to the bound: the test machine's cores are shared, and what the issue saw (a
    matcher or query that never ends) burns CPU all the same."""
    proc = repocomp(home, "index", "--json", *args, timeout=WALL_BOUND_S, prefix=(sys.executable, "-c", _MEASURED))
    assert "Traceback" not in proc.stderr, proc.stderr
    _, cpu_s, _, rss_kb = proc.stderr.strip().splitlines()[-1].split()
    cpu_s, rss_kb = float(cpu_s), int(rss_kb)
    assert cpu_s < cpu_bound_s, f"indexing took {cpu_s:.1f} CPU seconds"
    assert rss_kb < RSS_BOUND_KB, f"peak RSS {rss_kb / 1e3:.0f} MB"
    return proc, cpu_s, rss_kb


def summary_of(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def backtracking_repo(root: Path) -> Path:
    """Patterns that backtrack exponentially in a regex engine, next to names that make them try every split."""
    root.mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".gitignore").write_text("\n".join([
        BACKTRACKING, "!" + BACKTRACKING + "c", "**/" + BACKTRACKING + "/**", "[a]*[a]*[a]*[a]*[a]*[a]*[a]*[a]*[a]*b",
        "a*/**/a*/**/a*/**/a*/**/a*/**/a*/**/b", "?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*b/", "ignored_*.py"]) + "\n")
    (root / LONG_NAME).write_text("def long_name():\n    return 1\n")
    deep = root.joinpath(*["a" * 40] * 30)  # 30 folders: the `**` runs try every folder
    deep.mkdir(parents=True)
    (deep / LONG_NAME).write_text("def deep():\n    return 2\n")
    (root / "ignored_x.py").write_text("x = 1\n")
    (root / "shapes.py").write_text("def area(width, height):\n    return width * height\n")
    return root


def test_backtracking_gitignore_patterns_next_to_long_names_index_in_seconds(tmp_path: Path, record_property) -> None:
    root = backtracking_repo(tmp_path / "repo")
    proc, elapsed, rss_kb = measured_index(tmp_path / "home", str(root))
    record_property("backtracking_gitignore_index_cpu_s", round(elapsed, 2))
    record_property("backtracking_gitignore_rss_mb", rss_kb // 1000)
    # git's answers: the long names are kept (no pattern ends them with `b`), ignored_x.py is ignored
    assert summary_of(proc)["files"] == 3


def test_the_matcher_agrees_with_pathspec_on_random_patterns() -> None:
    """Against pathspec (a regex translation) where pathspec follows git: no negated classes (pathspec lets them
    match `/`), no trailing `**` (pathspec also matches the folder itself)."""
    rng = random.Random(7)
    atoms = ["a", "b", "ab", ".py", "*", "**", "?", "[ab]", "[a-c]", "x", "\\*", "1"]
    names = ["a", "b", "ab", "a.py", "x", "1", "aa", "ba", "*", "c", "abc.py", "xa1"]
    compared = 0
    for trial in range(1500):
        negations = trial % 2 == 1
        lines = []
        for _ in range(rng.randint(1, 4)):
            line = "/".join("".join(rng.choice(atoms) for _ in range(rng.randint(1, 3)))
                            for _ in range(rng.randint(1, 3)))
            line = ("/" if rng.random() < 0.2 else "") + line + ("/" if rng.random() < 0.2 else "")
            if line.rstrip("/").endswith("**"):
                continue
            lines.append(("!" if negations and rng.random() < 0.3 else "") + line)
        ours = PatternSet([p for p in map(parse_line, lines) if p is not None])
        theirs = pathspec.GitIgnoreSpec.from_lines(lines)
        for _ in range(15):
            path = "/".join(rng.choice(names) for _ in range(rng.randint(1, 1 if negations else 4)))
            is_dir = rng.random() < 0.3
            parts = path.split("/")  # pathspec also matches through a parent folder: the walk prunes those
            got = any(ours.ignores("/".join(parts[:i]), True) for i in range(1, len(parts))) \
                or ours.ignores(path, is_dir)
            assert got == theirs.match_file(path + ("/" if is_dir else "")), (lines, path, is_dir)
            compared += 1
    assert compared > 10_000


@pytest.mark.parametrize(("lines", "path", "is_dir", "ignored"), [
    (["*.py", "!keep.py"], "keep.py", False, False),  # the last matching pattern decides
    (["!keep.py", "*.py"], "keep.py", False, True),
    (["/top.py"], "sub/top.py", False, False),  # a leading slash anchors
    (["top.py"], "sub/top.py", False, True),  # no slash: a name at any depth
    (["sub/*.py"], "x/sub/a.py", False, False),  # a middle slash anchors too
    (["build/"], "build", False, False),  # a trailing slash: folders only
    (["build/"], "build", True, True),
    (["a/**/b"], "a/b", False, True),  # zero or more folders
    (["a/**/b"], "a/x/y/b", False, True),
    (["a/**"], "a/x/y", False, True),
    (["**/c"], "x/y/c", True, True),
    (["a**b"], "a/b", False, False),  # `**` inside a name is a `*`: never crosses `/`
    (["\\#x", "\\!y"], "#x", False, True),  # escapes
    (["# comment", "", "  "], "# comment", False, False),
    (["name\\ "], "name ", False, True),  # an escaped trailing space is kept
    (["[!a]x"], "/x", False, False),
    (["x[[:digit:]]"], "x7", False, True),
    ([BACKTRACKING], LONG_NAME[:-3] + "b", False, True),
])
def test_gitignore_semantics(lines: list[str], path: str, is_dir: bool, ignored: bool) -> None:
    ours = PatternSet([p for p in map(parse_line, lines) if p is not None])
    assert ours.ignores(path, is_dir) is ignored


def test_a_huge_gitignore_is_read_up_to_its_limit_with_one_warning(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / ".gitignore").write_text("".join(f"{BACKTRACKING}{i}\n" for i in range(350_000)))  # 10 MB
    for i in range(200):
        (root / f"{'a' * 150}{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    summary = summary_of(measured_index(tmp_path / "home", str(root))[0])
    assert summary["files"] == 200
    assert any(w.startswith(".gitignore: ") and "past the limit" in w for w in summary["warnings"]), summary


def test_350k_exclude_patterns_in_the_repository_config_index_in_bounded_time(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "repocomp.toml").write_text(
        "[index]\nexclude = [" + ",".join(f'"gen{i}/"' for i in range(350_000)) + ', "skip.py"]\n')
    for i in range(100):
        (root / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    (root / "skip.py").write_text("x = 1\n")
    proc, _, _ = measured_index(tmp_path / "home", str(root))
    assert summary_of(proc)["files"] >= 100  # a config over the limits is cut or set aside, never a hang


def test_350k_exclude_patterns_keep_the_first_ones_with_one_warning(tmp_path: Path) -> None:
    """The user's own (trusted) exclude list, 350,000 long: the first MAX_PATTERNS_PER_SOURCE are used."""
    root = tmp_path / "repo"
    root.mkdir()
    for i in range(300):
        (root / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    code = (
        "import json, time\nfrom pathlib import Path\n"
        "from repocomp.config.loading import config_from_dict\nfrom repocomp.index.walk import walk_repository\n"
        "excludes = ['m0.py'] + [f'*a*a*a*a*a*a*a*a*b{i}/' for i in range(350_000)] + ['m1.py']\n"
        "config = config_from_dict({'index': {'exclude': excludes}})\n"
        f"started = time.process_time()\nwalked = walk_repository(Path({str(root)!r}), config)\n"
        "print(json.dumps({'s': time.process_time() - started, 'files': sorted(f.path for f in walked.files),"
        " 'warnings': walked.warnings}))\n")
    proc = python(tmp_path / "home", code, timeout=WALL_BOUND_S)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["s"] < INDEX_BOUND_S
    assert "m0.py" not in out["files"] and "m1.py" in out["files"] and len(out["files"]) == 299
    assert out["warnings"] == [f"[index] exclude: {350_002 - MAX_PATTERNS_PER_SOURCE} pattern(s) past the limit "
                               f"({MAX_PATTERNS_PER_SOURCE} per file, 16000 and 256 KiB in all) ignored"]


@pytest.mark.parametrize(("name", "text"), [
    ("deep.py", "x = " + "f(" * 150_000 + "1" + ")" * 150_000 + "\n"),
    ("deep.js", "let x = " + "f(" * 150_000 + "1" + ")" * 150_000 + ";\n"),
    ("deep.c", "int g(void) { return " + "-(" * 150_000 + "1" + ")" * 150_000 + "; }\n"),
    ("chain.py", "x = f" + "()" * 150_000 + "\n"),  # each callee holds the rest of the chain
])
def test_150k_nested_expressions_index_in_bounded_time_and_the_summary_names_the_file(
        tmp_path: Path, name: str, text: str, record_property) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / name).write_text(text)
    (root / "shapes.py").write_text("def area(width, height):\n    return width * height\n")
    proc, elapsed, rss_kb = measured_index(tmp_path / "home", str(root), cpu_bound_s=NESTED_BOUND_S)
    record_property(f"nested_{name}_index_cpu_s", round(elapsed, 2))
    summary = summary_of(proc)
    assert summary["skipped"].get("too_deep") == 1, summary
    assert any(note.startswith(f"{name}: too deep") for note in summary["notes"]), summary["notes"]
    assert "nest deeper than" in proc.stderr  # one warning line on the terminal
    assert summary["files"] == 2  # still indexed: its code is retrieved


def test_a_folder_over_max_files_is_indexed_partially_with_a_warning(tmp_path: Path) -> None:
    root = tmp_path / "big"
    for d in range(10):
        (root / f"d{d}").mkdir(parents=True)
        for i in range(30):
            (root / f"d{d}" / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    config = tmp_path / "small.toml"
    config.write_text("[index]\nmax_files = 50\n")
    proc, _, _ = measured_index(tmp_path / "home", str(root), "--config", str(config))
    summary = summary_of(proc)
    assert summary["files"] == 50
    assert any("indexed partially" in w and "max_files" in w for w in summary["warnings"]), summary
    assert "WARNING" in proc.stderr and "indexed partially" in proc.stderr

    config.write_text("[index]\nmax_total_bytes = 2000\n")  # each file is 23 to 25 characters
    summary = summary_of(measured_index(tmp_path / "home", str(root), "--config", str(config))[0])
    assert 2000 // 25 <= summary["files"] <= 2000 // 23 and any("max_total_bytes" in w for w in summary["warnings"])


def test_a_folder_just_over_its_memory_budget_is_indexed_partially_and_says_where(tmp_path: Path) -> None:
    """`[index] max_memory_mb` admits the source text a build can hold in that memory (INDEX_BYTES_PER_SOURCE_CHAR
    per character, measured by `repocomp bench index`): a folder just under it is indexed whole, one file more is
    indexed partially, said once in the log, in the summary with the first file left out, and by `complete
    --explain` for a file left out."""
    from repocomp.config.schema import INDEX_BYTES_PER_SOURCE_CHAR

    budget = (1 << 20) // INDEX_BYTES_PER_SOURCE_CHAR  # characters that max_memory_mb = 1 admits
    root = tmp_path / "big"
    root.mkdir()
    (root / ".git").mkdir()
    body = "".join(f"value_{i:04d} = compute({i:04d}, 0)\n" for i in range(100))
    assert len(body) == 3000
    fits = budget // 3000
    for i in range(fits):
        (root / f"m{i:03d}.py").write_text(body.replace("value_", f"va{i:03d}_"))  # distinct, same length
    config = tmp_path / "small.toml"
    config.write_text("[index]\nmax_memory_mb = 1\n")
    summary = summary_of(measured_index(tmp_path / "home", str(root), "--config", str(config))[0])
    assert summary["files"] == fits and summary["warnings"] == [], summary  # just under: whole, nothing said

    (root / f"m{fits:03d}.py").write_text(body.replace("value_", "lastv_"))  # just over
    proc, _, _ = measured_index(tmp_path / "home", str(root), "--config", str(config))
    summary = summary_of(proc)
    assert summary["files"] == fits
    [warning] = [w for w in summary["warnings"] if "indexed partially" in w and "max_memory_mb 1" in w]
    assert f"from m{fits:03d}.py on" in warning
    assert proc.stderr.count("indexed partially") == 1
    text = repocomp(tmp_path / "home", "index", str(root), "--config", str(config))
    assert f"left out           {warning}" in text.stdout
    explained = repocomp(tmp_path / "home", "complete", f"{root}/m{fits:03d}.py:2", "--explain", "--backend",
                         "extractive", "--config", str(config))
    assert f"m{fits:03d}.py is not in the index: {warning}" in explained.stdout, explained.stdout
    explained = repocomp(tmp_path / "home", "complete", f"{root}/m000.py:2", "--explain", "--backend",
                         "extractive", "--config", str(config))
    assert "is not in the index" not in explained.stdout


def test_a_folder_of_many_entries_stops_the_walk_at_its_entry_budget(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    root.mkdir()
    for i in range(3000):  # no source file among them: only the entry budget stops the walk
        (root / f"n{i:05}.txt").write_text("")
    (root / "zz").mkdir()
    (root / "zz" / "late.py").write_text("x = 1\n")
    config = tmp_path / "small.toml"
    config.write_text("[index]\nmax_files = 10\n")  # 20 entries per file: 200 entries
    summary = summary_of(measured_index(tmp_path / "home", str(root), "--config", str(config))[0])
    assert summary["files"] == 0
    assert any("indexed partially" in w and "entries" in w for w in summary["warnings"]), summary


def _walk_root(home: Path, config: dict) -> dict:
    code = ("import json, time\nfrom pathlib import Path\nfrom repocomp.config.loading import config_from_dict\n"
            "from repocomp.index.walk import walk_repository\nstarted = time.process_time()\n"
            f"walked = walk_repository(Path('/'), config_from_dict({config!r}))\n"
            "print(json.dumps({'s': time.process_time() - started, 'files': [f.path for f in walked.files],"
            " 'skipped': walked.skipped, 'warnings': walked.warnings}))\n")
    proc = python(home, code, timeout=WALL_BOUND_S)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs /proc")
def test_the_root_folder_is_walked_within_its_limits_and_never_into_proc(tmp_path: Path) -> None:
    out = _walk_root(tmp_path / "home", {"index": {"max_files": 200, "allow_broad_root": True}})
    assert out["s"] < INDEX_BOUND_S and len(out["files"]) <= 200
    assert not any(p.startswith(("proc/", "sys/")) for p in out["files"])
    # only /proc left to walk: another file system, not entered (its cwd links lead back into the disk)
    out = _walk_root(tmp_path / "home", {"index": {"exclude": ["/*", "!/proc/"], "allow_broad_root": True}})
    assert out["s"] < INDEX_BOUND_S
    assert out["files"] == [] and out["skipped"].get("other_filesystem") == 1, out


def test_the_root_or_home_folder_without_a_repository_is_refused_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert_one_line_error(repocomp(home, "index", "/"), "/ is the file system's root, not a repository",
                          "allow_broad_root")

    def index_home(*args: str) -> subprocess.CompletedProcess[str]:  # HOME is the folder indexed
        return subprocess.run([sys.executable, "-m", "repocomp", "index", *args, str(home)], capture_output=True,
                              text=True, timeout=TIMEOUT_S, cwd=REPO_ROOT, env={**user_env(home), "HOME": str(home)})

    assert_one_line_error(index_home(), "is your home folder, not a repository")
    (home / "proj.py").write_text("x = 1\n")
    (home / "pyproject.toml").write_text("")  # a home that is a project is one
    proc = index_home("--json")
    assert proc.returncode == 0 and summary_of(proc)["files"] == 1, proc.stderr


# ----------------------------------------------------------------------------------------------- the server


async def _initialize(client: LanguageClient, folders: list[Path], options: dict) -> None:
    await client.initialize_session(types.InitializeParams(
        capabilities=capabilities(), root_uri=folders[0].as_uri(), initialization_options=options,
        workspace_folders=[types.WorkspaceFolder(uri=f.as_uri(), name=f.name) for f in folders]))


async def _states(client: LanguageClient, bound_s: float = 30.0) -> dict[str, str]:
    payload = await asyncio.wait_for(stats(client), bound_s)
    return {Path(f["root"]).name: f["state"] for f in payload["folders"]}


async def _wait_ready(client: LanguageClient, name: str, bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while (await _states(client)).get(name) != "ready":
        assert time.monotonic() < deadline, f"{name} not ready within {bound_s} s"
        await asyncio.sleep(0.1)


async def test_the_server_answers_within_a_second_while_a_backtracking_folder_indexes(
        client: LanguageClient, tmp_path: Path, record_property) -> None:
    calm = tmp_path / "calm"
    calm.mkdir()
    (calm / "shapes.py").write_text("def area(width, height):\n    return width * height\n")
    hostile = backtracking_repo(tmp_path / "hostile")
    for i in range(150):  # enough to keep it indexing for a while
        (hostile / f"{'a' * 150}{i}.py").write_text("".join(f"def f{i}_{j}(x):\n    return x + {j}\n"
                                                           for j in range(40)))
    await _initialize(client, [calm], {"backend": {"name": "extractive"}})
    text = "from shapes import area\n\n\ntotal = "
    uri = open_doc(client, calm / "main.py", text)
    await _wait_ready(client, "calm")
    await asyncio.wait_for(inline(client, uri, end_of(text)), 30)  # the first answer warms the engine up

    client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(added=[types.WorkspaceFolder(uri=hostile.as_uri(), name="hostile")],
                                                removed=[])))
    slowest, answered_while_building, deadline = 0.0, 0, time.monotonic() + 60
    while True:
        started = time.monotonic()
        await asyncio.wait_for(inline(client, uri, end_of(text)), ANSWER_BOUND_S)
        slowest = max(slowest, time.monotonic() - started)
        state = (await _states(client)).get("hostile")
        if state == "ready":
            break
        answered_while_building += state == "building"
        assert time.monotonic() < deadline, f"the hostile folder did not get ready: {state}"
        await asyncio.sleep(0.05)
    record_property("answer_while_indexing_max_s", round(slowest, 3))
    assert slowest < ANSWER_BOUND_S
    assert answered_while_building > 0  # the requests did overlap the indexing


@pytest.mark.parametrize("limit", ["max_files = 20", "max_memory_mb = 1"])
async def test_the_server_says_once_that_a_folder_over_its_limits_is_indexed_partially(
        client: LanguageClient, tmp_path: Path, limit: str) -> None:
    big = tmp_path / "big"
    big.mkdir()
    for i in range(60):  # 60 files of 3,000 characters: past 20 files, and past what 1 MB of memory admits
        (big / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n" + f"# {i:04d}{'.' * 90}\n" * 30)
    (big / "repocomp.toml").write_text(f"[index]\n{limit}\n")  # a folder may lower its own limits
    await _initialize(client, [big], {"backend": {"name": "extractive"}})
    await _wait_ready(client, "big")
    deadline = time.monotonic() + 5
    while not any("indexed partially" in m for m in warnings(client)):
        assert time.monotonic() < deadline, warnings(client)
        await asyncio.sleep(0.05)
    assert sum("indexed partially" in m for m in warnings(client)) == 1
