"""The batch run: every task completed by the engine as if its file were being typed, scored, written as JSONL.

No leakage: before a task, the hole's file is replaced in the index (term index, graph, relations) by its lines
before the hole, with the index's incremental `update_file`; after the last task of that file it is restored from
disk. Other files are as on disk. With `workers > 1` several files are evaluated at once, each held at its own
hole: a file being evaluated by another worker is then seen truncated at that worker's hole (less context, never
more), so no task can see a ground truth.

The records themselves (their fields, reading, writing, the summary) are `repocomp.eval.records`'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from repocomp.backends.model_defaults import resolve_config
from repocomp.config.schema import EVAL_BACKENDS, MODES, Config
from repocomp.errors import RepocompError
from repocomp.eval.generation_cache import counting, counts_fields, eval_backend
from repocomp.eval.records import (
    append_record,
    check_same_run,
    error_record,
    gt_line_attainable,
    make_record,
    read_results,
    rewrite_clean,
    summarize,
)
from repocomp.eval.session_tasks import cursor_inside, run_session_tasks
from repocomp.eval.tasks import COMPLETION_KIND, SESSION_KIND, Task, check_paths
from repocomp.index.walk import decode_source, read_regular

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class EvalOptions:
    mode: str = "repocoder"
    plain: bool = False  # plain RepoCoder: no relations and, unless `definitions` says so, no definitions
    alpha: float | None = None  # FragRel's weight (Eq. 10); None = the config's value
    query_relations: float | None = None  # None = the config's value
    definitions: bool | None = None  # the definitions section; None = on with FragRel, off for plain RepoCoder
    backend: str = "none"
    workers: int = 1
    memory: bool = True  # session tasks: replay the session into a SessionMemory (False: --no-memory)
    editor: bool = False  # the buffer as an editor sends it: the code after the hole too (`--editor`)
    # session tasks: the cursor inside the hole's line (`--mid-line`, `cursor_inside`): "word" or "bracket"
    mid_line: str = ""
    generation_cache: str = ""  # a file keeping greedy generations across runs (`--generation-cache`)

    @property
    def variant(self) -> str:
        """What the engine was given, in the records: the code before the hole ("left") or the editor's buffer,
        and where inside the hole's line the cursor was ("-mid-line" after its first word, "-in-brackets")."""
        inside = {"": "", "word": "-mid-line", "bracket": "-in-brackets"}[self.mid_line]
        return ("editor" if self.editor else "left") + inside

    def validate(self) -> None:
        if self.mode not in MODES:
            raise RepocompError(f"unknown mode {self.mode!r}; use one of {', '.join(MODES)}")
        if self.backend not in EVAL_BACKENDS:
            raise RepocompError(f"unknown backend {self.backend!r}; use one of {', '.join(EVAL_BACKENDS)}")
        if self.workers < 1:
            raise RepocompError("--workers must be >= 1")
        if self.mid_line not in ("", "word", "bracket"):
            raise RepocompError(f"unknown --mid-line {self.mid_line!r}; use word or bracket")
        if self.mid_line == "bracket" and not self.editor:
            raise RepocompError("--mid-line bracket puts the closer after the cursor: it needs --editor")


def eval_config(config: Config, options: EvalOptions) -> Config:
    """The engine configuration of one run: vanilla = one round, FragRel off = no relations at all."""
    if options.mode == "vanilla":
        config = config.replace("retrieval", iterations=1)
    if options.alpha is not None:
        config = config.replace("retrieval", alpha=float(options.alpha))
    if options.query_relations is not None:
        config = config.replace("retrieval", query_relations=float(options.query_relations))
    if options.plain:
        config = config.plain_repocoder()
    if options.definitions is not None:
        config = config.replace("definitions", enabled=options.definitions)
    if options.backend != "none":
        config = config.replace("backend", name=options.backend)
    return config


# ------------------------------------------------------------------------------------------- per-task pieces


def task_buffer(task: Task, disk_lines: list[str] | None) -> tuple[str, int]:
    """The hole's file as typed up to the hole, and the hole's line in it.

    The task's prompt is the in-file context [context_start_lineno, hole); the lines above it come from disk.
    """
    prompt = task.prompt[:-1] if task.prompt.endswith("\n") else task.prompt
    prompt_lines = prompt.split("\n") if prompt else []
    start = task.context_start_lineno
    above = list(disk_lines[:start]) if disk_lines is not None else [""] * start
    above += [""] * (start - len(above))
    lines = above + prompt_lines
    text = "\n".join(lines) + "\n" if lines else ""
    return text, len(lines)


def editor_buffer(task: Task, disk_lines: list[str]) -> tuple[str, int]:
    """The hole's file as an editor has it when the developer is about to write the hole: `task_buffer`'s lines,
    the hole's lines emptied into one empty line, then the rest of the file as it stood."""
    text, line = task_buffer(task, disk_lines)
    after = disk_lines[task.line_no + task.ground_truth.count("\n") + 1:]
    return text + "\n".join([""] + after) if after else text, line


def lines_outside(task: Task, n_lines: int) -> str:
    """Why the task's line numbers do not fit a file of `n_lines` lines ("" when they do). The lines above the
    in-file context come from the file: a context starting past its end (line 10**12) would be padded with that
    many empty lines, a MemoryError that ended the whole run."""
    if task.context_start_lineno > n_lines:
        return (f"context_start_lineno {task.context_start_lineno} is past the end of the file ({n_lines} lines); "
                "the task does not match the repository")
    if task.line_no > n_lines:
        return f"line_no {task.line_no} is past the end of the file ({n_lines} lines); the task does not match it"
    return ""


# ------------------------------------------------------------------------------------------------- the run


class RepoEvaluator:
    """Runs the tasks of one repository against one index and completer, without leakage."""

    def __init__(self, index: Any, completer: Any, options: EvalOptions):
        self.index = index
        self.completer = completer
        self.options = options
        # files done, to restore from disk with the next update (one relation update for both)
        self._pending_restore: set[str] = set()

    async def run(self, tasks: list[Task], on_record: Callable[[dict[str, Any]], None]) -> None:
        groups: dict[str, list[Task]] = defaultdict(list)
        for task in tasks:
            groups[task.path].append(task)
        queue: asyncio.Queue[tuple[str, list[Task]]] = asyncio.Queue()
        for path in sorted(groups, key=lambda p: -len(groups[p])):  # big files first: better balance
            queue.put_nowait((path, sorted(groups[path], key=lambda t: (t.line_no, t.task_id))))

        async def worker() -> None:
            while not queue.empty():
                path, group = queue.get_nowait()
                await self._run_file(path, group, on_record)

        try:
            await asyncio.gather(*(worker() for _ in range(min(self.options.workers, len(groups)) or 1)))
        finally:
            self._flush_restores()

    async def _run_file(self, path: str, group: list[Task], on_record: Callable[[dict[str, Any]], None]) -> None:
        from repocomp.pipeline import CompletionOptions  # loaded with the completer

        disk, why = _read_disk_lines(Path(self.index.root) / path)
        if disk is None:  # nothing to complete against: an error, never a score
            for task in group:
                on_record(error_record(task, self.options, f"{task.repo}/{path}: {why}"))
            return
        current: str | None = None
        try:
            for task in group:
                outside = lines_outside(task, len(disk))
                if outside:  # the task does not fit this file: an error, and the buffer is never padded to it
                    on_record(error_record(task, self.options, f"{task.repo}/{path}: {outside}"))
                    continue
                t0 = time.perf_counter()
                text, line = editor_buffer(task, disk) if self.options.editor else task_buffer(task, disk)
                if text != current:
                    self._update(path, text)  # the index sees the file only up to the hole
                    current = text
                t1 = time.perf_counter()
                try:
                    with counting() as counts:
                        result = await self.completer.acomplete(path, text, line, 0, CompletionOptions(
                            mode=self.options.mode,
                            oracle_text=task.ground_truth if self.options.mode == "oracle" else None,
                            kind=COMPLETION_KIND.get(task.kind, "auto"),
                            context_start_line=task.context_start_lineno, trace=True))
                except RepocompError as exc:  # a slow or dead backend fails this task, not the run
                    log.warning("%s: %s", task.task_id, exc)
                    on_record(error_record(task, self.options, str(exc)))
                    continue
                t2 = time.perf_counter()
                attainable = gt_line_attainable(task.ground_truth, self.index, path, task.context_start_lineno)
                record = make_record(task, result, self.options, {"no_leak_update": round((t1 - t0) * 1e3, 3),
                                                                  "task_total": round((t2 - t0) * 1e3, 3)}, attainable)
                on_record({**record, **(counts_fields(counts) if self.options.generation_cache else {})})
        finally:
            self._pending_restore.add(path)  # back to the file on disk, together with the next change

    def _update(self, path: str, text: str) -> None:
        changes: dict[str, str | None] = {p: None for p in self._pending_restore if p != path}
        self._pending_restore.clear()
        changes[path] = text
        if len(changes) > 1 and hasattr(self.index, "update_files"):
            self.index.update_files(changes)  # one incremental relation update for the batch
        else:
            for p, t in changes.items():
                self.index.update_file(p, text=t)

    def _flush_restores(self) -> None:
        for p in sorted(self._pending_restore):
            self.index.update_file(p)
        self._pending_restore.clear()


def _read_disk_lines(path: Path) -> tuple[list[str] | None, str]:
    """The file's lines as the indexer reads them, or (None, why not)."""
    data, reason = read_regular(path, 1 << 30)
    if data is None:
        return None, {"unreadable": "file missing or unreadable", "not_regular": "not a regular file",
                      "too_large": "file too large"}.get(reason or "", str(reason))
    return decode_source(data)[0].splitlines(), ""


def open_engine(root: Path, config: Config, options: EvalOptions) -> tuple[Any, Any]:
    """The index of one repository (built or loaded) and a completer with the run's backend."""
    from repocomp.index import Index
    from repocomp.pipeline import Completer

    index = Index.open(root, config)  # a read-only repository's index goes to the user's cache
    backend = None
    if options.backend != "none":
        backend = eval_backend(config.backend, options.generation_cache)
    return index, Completer(index, config, backend=backend)


def mid_line_tasks(tasks: list[Task], where: str) -> list[Task]:
    """The session tasks whose hole's line has the place `where` names (`cursor_inside`); the others are left out,
    with a count in the log."""
    if any(t.kind != SESSION_KIND for t in tasks):
        raise RepocompError("--mid-line is for session tasks (repocomp eval make-tasks --kind session)")
    kept = [t for t in tasks if cursor_inside(t.ground_truth, where) is not None]
    if len(kept) < len(tasks):
        log.info("--mid-line %s: %d of %d holes left out (the line has no such place)", where,
                 len(tasks) - len(kept), len(tasks))
    return kept


def run_eval(tasks: list[Task], repos_dir: str | os.PathLike[str], options: EvalOptions, config: Config, *,
             out: str | os.PathLike[str] | None = None, summary_json: str | os.PathLike[str] | None = None,
             progress: bool = True,
             engine_factory: Callable[[Path, Config, EvalOptions], tuple[Any, Any]] | None = None,
             ) -> dict[str, Any]:
    """Evaluate `tasks`, appending one record per task to `out` (skipping tasks already there); the summary."""
    options.validate()
    if options.mid_line:
        tasks = mid_line_tasks(tasks, options.mid_line)
    # resolved once for the run; records say what ran (the definitions after the model's budget rule)
    config = resolve_config(eval_config(config, options), reads_prompt=options.backend != "none")
    options = replace(options, alpha=config.retrieval.alpha, query_relations=config.retrieval.query_relations,
                      definitions=config.definitions.enabled)
    repos_dir = Path(repos_dir)
    engine_factory = engine_factory or open_engine
    for target, flag in ((out, "--out"), (summary_json, "--summary-json")):
        if target is not None and not Path(target).parent.is_dir():
            raise RepocompError(f"{flag} {target}: the folder {Path(target).parent} does not exist; create it first")
    existing = read_results(out) if out else []
    if out:
        check_same_run(existing, options, out)
    kept = [r for r in existing if not r.get("error")]  # failed tasks are run again
    if out and existing:
        rewrite_clean(Path(out), kept)
    done = {r["task_id"] for r in kept}
    todo = [t for t in tasks if t.task_id not in done]
    wanted = {t.task_id for t in tasks}
    records = [r for r in kept if r["task_id"] in wanted]

    # session tasks replay a commit on its parent's tree, read from --repos' histories (session_tasks)
    sessions = [t for t in todo if t.kind == SESSION_KIND]
    todo = [t for t in todo if t.kind != SESSION_KIND]
    by_repo: dict[str, list[Task]] = defaultdict(list)
    for t in todo:
        by_repo[t.repo].append(t)
    for repo in by_repo:
        if not (repos_dir / repo).is_dir():
            raise RepocompError(f"repository folder {repos_dir / repo} not found; --repos must hold the folders "
                                "named by fpath_tuple[0]")
    check_paths(todo, repos_dir)  # nothing is indexed or written outside --repos

    out_fh = open(out, "a", encoding="utf-8") if out else None
    bar = _Progress(len(tasks), len(tasks) - len(todo), enabled=progress)

    def on_record(record: dict[str, Any]) -> None:
        records.append(record)
        if out_fh is not None:
            append_record(out_fh, record)
        bar.advance()

    try:
        with bar:
            for repo in sorted(by_repo):
                index, completer = engine_factory(repos_dir / repo, config, options)
                try:
                    asyncio.run(RepoEvaluator(index, completer, options).run(by_repo[repo], on_record))
                finally:
                    close = getattr(index, "close", None)
                    if callable(close):
                        close()
            if sessions:
                run_session_tasks(sessions, repos_dir, options, config, on_record,
                                  engine_factory=None if engine_factory is open_engine else engine_factory)
    finally:
        if out_fh is not None:
            out_fh.close()
    summary = summarize(records)
    if summary_json:
        Path(summary_json).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


class _Progress:
    """A rich progress bar with ETA, or nothing."""

    def __init__(self, total: int, completed: int, enabled: bool):
        self.enabled = enabled
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                      TextColumn("ETA"), TimeRemainingColumn())
            self._task = self._progress.add_task("eval", total=total, completed=completed)

    def __enter__(self) -> _Progress:
        if self.enabled:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._progress.stop()

    def advance(self) -> None:
        if self.enabled:
            self._progress.advance(self._task)


__all__ = ["EvalOptions", "RepoEvaluator", "eval_config", "lines_outside", "open_engine", "run_eval", "task_buffer"]
