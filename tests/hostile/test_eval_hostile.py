"""Issue 9, item 3 and the eval cases of the one-line-error list, and issue 8, item 5: `repocomp eval` stays
inside --repos, rejects malformed tasks with their line number, reports a task it cannot run as an error (never
a score), and survives a stalled backend, retrying only the failed tasks on a rerun.

The stalled-backend run is a subprocess (its wait is bounded); the rest run the CLI in process (fast).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_run import TcpSink, assert_one_line, cli, repocomp

LINES = [f"value_{i} = {i}" for i in range(12)]


def _task(fpath: Any, line_no: Any = 6, **extra: Any) -> dict[str, Any]:
    md = {"task_id": f"t{line_no}", "ground_truth": LINES[6], "fpath_tuple": fpath, "context_start_lineno": 0,
          "line_no": line_no}
    prompt = extra.pop("prompt", "\n".join(LINES[:6]) + "\n")
    return {"prompt": prompt, "metadata": md | extra}


@pytest.fixture
def repos(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "repos" / "r").mkdir(parents=True)
    (tmp_path / "repos" / "r" / "values.py").write_text("\n".join(LINES) + "\n")
    return tmp_path / "repos"


def _write(path: Path, tasks: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


def test_eval_task_paths_cannot_leave_repos(repos: Path, tmp_path: Path, capsys) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.py").write_text("\n".join(LINES) + "\n")
    (repos / "link").symlink_to(outside)  # a repository folder that is a symlink out of --repos
    (repos / "r" / "leak.py").symlink_to(outside / "x.py")  # a file that is a symlink out of its repository
    escapes = [[str(outside), "x.py"], ["..", "outside", "x.py"], ["r", "..", "..", "outside", "x.py"],
               ["r", "/", "x.py"], ["link", "x.py"], ["r", "leak.py"]]
    for fpath in escapes:
        tasks = _write(tmp_path / "tasks.jsonl", [_task(["r", "values.py"]), _task(fpath)])
        status, _, err = cli(capsys, "eval", str(tasks), "--repos", str(repos), "--backend", "extractive")
        assert_one_line(status, err, "tasks.jsonl:2")
        assert not (outside / ".repocomp").exists(), fpath
    assert not (repos / "r" / ".repocomp").exists()  # rejected before anything ran


@pytest.mark.parametrize("task, needle", [
    (_task(["r", "values.py"], line_no="six"), "line_no"),
    (_task(["r", "values.py"], line_no=-1), "line_no"),
    (_task(5), "fpath_tuple"),
    (_task(["r"]), "fpath_tuple"),
    (_task(["r", "values.py"], prompt=None), "prompt"),
    (_task(["r", "values.py"], api_definitions="values.py:3"), "api_definitions"),
    (_task(["r", "values.py"], api_definitions=[{"path": "values.py", "line_no": "3"}]), "api_definitions"),
    (_task(["r", "values.py"], context_start_lineno=9), "context_start_lineno"),
    ({"prompt": "x", "metadata": 3}, "prompt and metadata"),
    ([1, 2], "prompt and metadata"),
])
def test_malformed_eval_tasks_give_one_line_errors_with_line_numbers(repos: Path, tmp_path: Path, capsys,
                                                                     task: Any, needle: str) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", [_task(["r", "values.py"]), task])
    status, _, err = cli(capsys, "eval", str(tasks), "--repos", str(repos))
    assert_one_line(status, err, "tasks.jsonl:2", needle)


def test_eval_arguments_that_cannot_work_are_rejected_in_one_line(repos: Path, tmp_path: Path, capsys) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", [_task(["r", "values.py"], line_no=n) for n in range(6, 11)])
    base = ["eval", str(tasks), "--repos", str(repos)]
    assert_one_line(*cli(capsys, *base, "--limit", "-1")[::2], "--limit")
    assert_one_line(*cli(capsys, *base, "--out", str(tmp_path / "missing" / "r.jsonl"))[::2], "--out", "missing")
    assert_one_line(*cli(capsys, *base, "--summary-json", str(tmp_path / "missing" / "s.json"))[::2],
                    "--summary-json")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(tasks.read_bytes().replace(b"value_6", "caf\xe9".encode("latin-1")))
    assert_one_line(*cli(capsys, "eval", str(latin), "--repos", str(repos))[::2], "latin.jsonl", "not UTF-8")
    assert not (repos / "r" / ".repocomp").exists()


def test_eval_task_whose_file_is_missing_is_an_error_not_a_score(repos: Path, tmp_path: Path, capsys) -> None:
    # an empty ground truth against an empty prediction would score EM 1.0 if the task were scored
    tasks = _write(tmp_path / "tasks.jsonl", [_task(["r", "values.py"]),
                                              _task(["r", "gone.py"], 0, ground_truth="", prompt="")])
    out = tmp_path / "results.jsonl"
    status, stdout, err = cli(capsys, "eval", str(tasks), "--repos", str(repos), "--backend", "extractive",
                              "--mode", "vanilla", "--out", str(out))
    assert status == 1 and "1 task(s) failed" in err
    summary = json.loads(stdout)
    assert summary["tasks"] == 1 and summary["failed"] == 1
    records = {r["task_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records["t0"]["em"] is None and "gone.py" in records["t0"]["error"]
    assert "error" not in records["t6"]

    # a rerun retries only the failed task: here its file exists now
    (repos / "r" / "gone.py").write_text("\n")
    status, stdout, _ = cli(capsys, "eval", str(tasks), "--repos", str(repos), "--backend", "extractive",
                            "--mode", "vanilla", "--out", str(out))
    assert status == 0 and json.loads(stdout)["failed"] == 0
    lines = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [r["task_id"] for r in lines] == ["t6", "t0"] and all("error" not in r for r in lines)


def test_eval_survives_a_stalled_backend_and_a_rerun_retries_the_failed_tasks(repos: Path, tmp_path: Path) -> None:
    sink = TcpSink()  # accepts, never answers
    try:
        config = tmp_path / "slow.toml"
        config.write_text(f'[backend]\nmodel = "m"\ntimeout_s = 1\nfallback = ""\n'
                          f'[backend.vllm]\nendpoints = ["{sink.url}"]\nconnect_timeout_s = 1\nretries = 0\n')
        tasks = _write(tmp_path / "tasks.jsonl", [_task(["r", "values.py"], line_no=n) for n in (6, 9)])
        out = tmp_path / "results.jsonl"
        args = ["eval", str(tasks), "--repos", str(repos), "--backend", "vllm", "--mode", "vanilla",
                "--config", str(config), "--out", str(out), "--no-progress"]
        first = repocomp(tmp_path, *args)
        assert first.returncode == 1 and "Traceback" not in first.stderr, first.stderr
        assert json.loads(first.stdout.strip().splitlines()[-1])["failed"] == 2
        records = [json.loads(ln) for ln in out.read_text().splitlines()]
        assert [r["task_id"] for r in records] == ["t6", "t9"] and all(r["error"] for r in records)
        asked = sink.connections
        assert asked >= 2

        second = repocomp(tmp_path, *args)  # the same command again: both failed tasks are tried again
        assert second.returncode == 1 and sink.connections >= asked + 2, second.stderr
        assert [json.loads(ln)["task_id"] for ln in out.read_text().splitlines()] == ["t6", "t9"]
    finally:
        sink.close()
