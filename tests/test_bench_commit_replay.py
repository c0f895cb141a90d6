"""`repocomp bench replay`: a tiny history's editing sessions replayed through the real language server, against an
oracle endpoint that knows the developer's files but one line, scored to known numbers."""

import json

import pytest

from lsp_bench.commit_replay import run_commit_replay, score, text_edit
from lsp_bench.slow_backend import SlowBackend
from repocomp.eval.records import read_results
from repocomp.eval.session_tasks import make_session_tasks
from tests.test_eval_session import _git, build_history


def test_text_edit_is_the_one_changed_range():
    assert text_edit("a\nb\nc\n", "a\nb\nc\n") is None
    assert text_edit("a\nb\nc\n", "a\nb\n\nc\n") == ((2, 0), (2, 0), "\n")  # Enter pressed on line 2
    assert text_edit("a\nxyz\n", "a\nx\n") == ((1, 1), (1, 3), "")
    assert text_edit("é𝄞a\n", "é𝄞b\n") == ((0, 3), (0, 4), "b")  # UTF-16 columns: 𝄞 is two units


def test_score_first_line_and_whole_answer():
    following = ["    b = 2", "", "    c = 3", "    d = 4"]
    assert score("    b = 2", "    b = 2", following) == {"em": 1.0, "es": 1.0, "answer_lines": 1, "whole_right": True}
    two = score("    b = 2\n    c = 3", "    b = 2", following)
    assert two["em"] == 1.0 and two["answer_lines"] == 2 and two["whole_right"]  # blank lines skipped
    wrong_second = score("    b = 2\n    c = 4", "    b = 2", following)
    assert wrong_second["em"] == 1.0 and not wrong_second["whole_right"]  # the first line right, the rest not
    assert score("", "    b = 2", following)["whole_right"] is False


@pytest.mark.slow
def test_replay_scores_a_tiny_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    history = build_history(tmp_path)
    repos = tmp_path / "repos"
    repos.mkdir()
    _git(tmp_path, "clone", "-q", "--bare", str(history), str(repos / "tiny.git"))
    tasks = make_session_tasks(repos / "tiny.git", n=1000, seed=0, per_commit=2, min_chars=8)
    assert len(tasks) == 6 and len({t.metadata["session"]["commit"] for t in tasks}) == 3
    finals = {(t.metadata["session"]["commit"], t.path) for t in tasks}
    source = "".join(_git(history, "show", f"{c}:{p}") for c, p in sorted(finals))
    wrong = next(t for t in tasks if "'circle'" in t.ground_truth)
    source = source.replace(wrong.ground_truth, wrong.ground_truth.replace("circle", "oval"))
    backend = SlowBackend(source, latency_s=0.05)
    options = {"backend": {"name": "vllm", "vllm": {"endpoints": [backend.start()]}, "model": "slow"}}
    out = tmp_path / "out.jsonl"
    try:
        result = run_commit_replay(tasks, repos, out, options)
    finally:
        backend.stop()
    records = {r["task_id"]: r for r in read_results(out)}
    assert result.tasks == 6 and result.answered == 6 and result.em == pytest.approx(5 / 6)
    assert result.whole_right == pytest.approx(5 / 6) and result.multi_line == 0
    assert records[wrong.task_id]["em"] == 0.0 and "'oval'" in records[wrong.task_id]["prediction"]
    assert all(r["em"] == 1.0 and r["prediction"] == by.ground_truth for by in tasks if by is not wrong
               for r in [records[by.task_id]])
    assert result.latency_p50_ms > 0 and json.loads(json.dumps(result.options))["backend"]["timeoutS"] == 30
    # a rerun skips the holes done
    again = run_commit_replay(tasks, repos, out, options)
    assert again.tasks == 6 and len(read_results(out)) == 6
