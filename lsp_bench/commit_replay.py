"""`repocomp bench replay TASKS --repos DIR`: editing sessions replayed through the language server, as an editor
sends them, scored against what the developer wrote.

The tasks are editing-session tasks (`repocomp eval make-tasks --kind session`): each names a commit, the edits
typed before its hole and the buffer at the hole. Per commit, `repocomp serve` (`python -m lsp_server`) starts on
a copy of the parent's tree with a new user's settings (an empty config folder; `--options` adds
`initializationOptions`), waits for its index, and gets the commit's session over LSP: each file opened
(`didOpen`), each hunk typed as one `didChange` of the range it replaces, and at each hole the buffer as the
editor has it then: the hunk's lines above typed, an empty line at the hole (the developer pressed Enter), the
parent's code below. An inline completion at the hole's column 0 is the answer.

A record per hole (`--out`, JSONL, resumable): the answer (`prediction`), `em` and `es` of its first line against
the developer's line (RepoEval's EM and ES), `whole_right` (every line of the answer is the developer's next line,
as written: a multi-line answer accepted as is), `answer_lines`, `latency_ms` (request to answer, client side).
Records of two runs pair by `task_id`: `repocomp eval compare A.jsonl B.jsonl` gives the paired intervals.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsp_bench.bench import Session, pct, report
from lsp_server.convert import index_to_client_col
from repocomp.errors import RepocompError
from repocomp.eval.metrics import edit_similarity, exact_match
from repocomp.eval.records import read_results
from repocomp.eval.session_tasks import (
    _git,
    event_states,
    find_history,
    materialize,
    open_history,
    session_buffer,
)
from repocomp.eval.tasks import SESSION_KIND, Task, load_tasks

READY_S = 600.0  # the server's first index of the parent tree
SYNC_S = 0.4  # after an edit: past the server's 0.3 s buffer-sync delay, as a developer's pause would be
REQUEST_S = 120.0  # one inline completion; the server's own limit is raised to `timeout_s` below
GENERATION_S = 30  # the backend's limit in the replay: a loaded machine must not cut an answer short


@dataclass
class CommitReplayResult:
    tasks: int
    answered: int
    em: float  # first line right, of the holes replayed
    whole_right: float  # the whole answer right as written
    multi_line: int  # answers of more than one non-blank line
    latency_p50_ms: float
    latency_p95_ms: float
    options: dict[str, Any]


def _position(text: str, offset: int) -> tuple[int, int]:
    """(line, UTF-16 character) of `offset` in `text`, as the server counts columns."""
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    return line, index_to_client_col(text[start:offset], offset - start)


def text_edit(old: str, new: str) -> tuple[tuple[int, int], tuple[int, int], str] | None:
    """The one range of `old` that an editor replaces to make `new` (its start, end and new text; None: equal)."""
    if old == new:
        return None
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old -= 1
        end_new -= 1
    return _position(old, start), _position(old, end_old), new[start:end_new]


class _Editor:
    """The client's buffers, kept equal to the server's: files opened once, each change sent as one range."""

    def __init__(self, session: Session, root: Path) -> None:
        self.session = session
        self.root = root
        self.buffers: dict[str, str] = {}

    def show(self, path: str, text: str) -> None:
        uri = (self.root / path).as_uri()
        if path not in self.buffers:
            self.session.open(uri, text)
        else:
            edit = text_edit(self.buffers[path], text)
            if edit is None:
                return
            (sl, sc), (el, ec), inserted = edit
            self.session.replace_range(uri, sl, sc, el, ec, inserted)
        self.buffers[path] = text


def _common(a: list[Any], b: list[Any]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def score(prediction: str, ground_truth: str, developer_lines: list[str]) -> dict[str, Any]:
    """The first line against the developer's line; the whole answer against their next lines as written."""
    answer = [ln.strip() for ln in prediction.split("\n") if ln.strip()]
    following = [ln.strip() for ln in developer_lines if ln.strip()]
    return {"em": float(exact_match(prediction, ground_truth)), "es": edit_similarity(prediction, ground_truth),
            "answer_lines": len(answer), "whole_right": bool(answer) and answer == following[: len(answer)]}


async def _replay_commit(tasks: list[Task], root: Path, final_text: Callable[[str], str], options: dict[str, Any],
                         on_record: Callable[[dict[str, Any]], None]) -> None:
    def parent_text(rel: str) -> str:
        path = root / rel
        return path.read_text(encoding="utf-8") if path.is_file() else ""

    session = Session(root, [])
    await session.start(options)
    try:
        await session.wait_ready(READY_S)
        editor = _Editor(session, root)
        sent: list[dict[str, Any]] = []
        for task in tasks:
            meta = task.metadata["session"]
            events = meta["events"]
            common = _common(sent, events)
            for state in list(event_states(task, parent_text))[common:]:  # each hunk typed, as the developer did
                for path, text in state.items():
                    editor.show(path, text)
                await asyncio.sleep(SYNC_S)
            sent = events
            editor.show(task.path, session_buffer(meta))  # Enter pressed at the hole: an empty line there
            await asyncio.sleep(SYNC_S)
            t0 = time.perf_counter()
            error = ""
            try:
                prediction = await asyncio.wait_for(session.inline((root / task.path).as_uri(), task.line_no, 0),
                                                    REQUEST_S)
            except Exception as exc:  # a failed or timed-out request is recorded, the replay goes on
                prediction, error = "", f"{type(exc).__name__}: {exc}"
            latency = (time.perf_counter() - t0) * 1e3
            developer = final_text(task.path).split("\n")[task.line_no:]
            on_record({"task_id": task.task_id, "repo": task.repo, "path": task.path, "kind": SESSION_KIND,
                       "variant": "editor", "prediction": prediction, **score(prediction, task.ground_truth, developer),
                       "latency_ms": round(latency, 1), **({"error": error} if error else {})})
    finally:
        await session.stop()


def run_commit_replay(tasks: list[Task], repos_dir: Path, out: Path, options: dict[str, Any] | None = None,
                      trees_dir: Path | None = None) -> CommitReplayResult:
    """Replay `tasks` (session tasks) commit by commit; records appended to `out` (those already there skipped)."""
    options = dict(options or {})
    options["backend"] = {"timeoutS": GENERATION_S, **options.get("backend", {})}
    done = {r["task_id"]: r for r in read_results(out) if not r.get("error")}
    if out.exists():  # a failed hole is tried again: its record gives way to the new one
        out.write_text("".join(json.dumps(r) + "\n" for r in done.values()), encoding="utf-8")
    groups: dict[tuple[str, str], list[Task]] = {}
    for task in tasks:
        if task.kind != SESSION_KIND or "session" not in task.metadata:
            raise RepocompError(f"{task.task_id}: not an editing-session task (repocomp eval make-tasks --kind session)")
        meta = task.metadata["session"]
        groups.setdefault((task.repo, meta["commit"]), []).append(task)
    records = [done[t.task_id] for t in tasks if t.task_id in done]

    def on_record(record: dict[str, Any]) -> None:
        records.append(record)
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    with tempfile.TemporaryDirectory(prefix="repocomp-replay-") as tmp, _new_user_config(Path(tmp) / "config"):
        for (repo, commit), group in groups.items():
            todo = sorted((t for t in group if t.task_id not in done),
                          key=lambda t: (t.metadata["session"]["hunk"], t.line_no))
            if not todo:
                continue
            history = find_history(repos_dir, repo)
            git_dir, _ = open_history(history)
            parent = todo[0].metadata["session"]["parent"]
            tree = materialize(history, repo, parent, trees_dir)
            root = Path(tmp) / repo
            shutil.copytree(tree, root, ignore=shutil.ignore_patterns(".repocomp", ".git"))

            def final_text(path: str, commit: str = commit, git_dir: Path = git_dir) -> str:
                return _git(git_dir, "show", f"{commit}:{path}").decode("utf-8", errors="replace")

            try:
                asyncio.run(_replay_commit(todo, root, final_text, options, on_record))
            finally:
                shutil.rmtree(root, ignore_errors=True)
    return summarize(records, options)


@contextlib.contextmanager
def _new_user_config(folder: Path) -> Iterator[None]:
    """The servers started inside read a new user's settings (none), as the replay's newcomer has."""
    before = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("XDG_CONFIG_HOME", None)
        else:
            os.environ["XDG_CONFIG_HOME"] = before


def summarize(records: list[dict[str, Any]], options: dict[str, Any]) -> CommitReplayResult:
    answered = [r for r in records if r.get("prediction")]
    latencies = [r["latency_ms"] for r in records if "latency_ms" in r and not r.get("error")]
    n = len(records) or 1
    return CommitReplayResult(
        tasks=len(records), answered=len(answered), em=sum(r["em"] for r in records) / n,
        whole_right=sum(bool(r["whole_right"]) for r in records) / n,
        multi_line=sum(r["answer_lines"] > 1 for r in records),
        latency_p50_ms=statistics.median(latencies) if latencies else float("nan"),
        latency_p95_ms=pct(latencies, 0.95), options=options)


def format_table(r: CommitReplayResult) -> str:
    rows = [("holes replayed", f"{r.tasks}"), ("answered", f"{r.answered}"),
            ("first line exact", f"{100 * r.em:.1f}%"), ("whole answer exact as written", f"{100 * r.whole_right:.1f}%"),
            ("answers of several lines", f"{r.multi_line}"),
            ("request to answer p50 / p95", f"{r.latency_p50_ms:.0f} / {r.latency_p95_ms:.0f} ms"),
            ("initializationOptions", json.dumps(r.options))]
    width = max(len(a) for a, _ in rows)
    return "\n".join(["repocomp bench replay (editing sessions through the language server)"] +
                     [f"{a:<{width}}  {b}" for a, b in rows])


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("replay", help="editing sessions replayed through the language server, scored per hole")
    p.add_argument("tasks", type=Path, help="session tasks (repocomp eval make-tasks --kind session)")
    p.add_argument("--repos", type=Path, required=True, help="the histories (NAME.git, NAME or NAME.git.tar.gz)")
    p.add_argument("--out", type=Path, required=True, help="records JSONL (appended; a rerun skips holes done)")
    p.add_argument("--options", type=json.loads, default={}, metavar="JSON",
                   help="initializationOptions beside a new user's defaults, e.g. '{\"prompt\": {\"fim\": \"none\"}}'")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    p.add_argument("--json", type=Path, metavar="F", help="also write the figures as JSON")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    tasks = load_tasks(args.tasks, kind=SESSION_KIND)[: args.limit]
    result = run_commit_replay(tasks, args.repos, args.out, args.options)
    return report(result, format_table(result), args.json)
