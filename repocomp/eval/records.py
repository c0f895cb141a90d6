"""The evaluation record: one JSON object per task, as `repocomp eval` writes it to `--out` (a JSONL file).

Built here (`make_record`, `error_record`, and the session tasks' extra fields), read back (`read_results`, a
rerun's check that `--out` holds this run's records), written (`append_record`, `rewrite_clean`) and averaged
(`summarize`). Running the tasks is `repocomp.eval.runner`'s (line tasks) and `repocomp.eval.session_tasks`'s.

A record: the run's fields (`task_id`, `repo`, `path`, `kind`, `mode`, `fragrel`, `backend`, `query_relations`,
`definitions`); then either `error` with no scores (a rerun retries it) or `prediction`, `em`, `es`, `context`
(one entry per run of lines the prompt showed), `prompt_tokens`, `timings_ms`, `gt_line_hit`, `def_hit`, for line
tasks `gt_line_attainable`, and with `[retrieval] selective` `retrieved`, `sim_in_file`, `sim_repository`; session
tasks add `memory_requested`, `memory`, `memory_events`, `commit`, `hunk` and, when completed, `memory_consulted`,
`memory_entries`, `memory_summaries` (entries shown as a summary: the template or the model's), `memory_gt_hit`.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from repocomp.errors import RepocompError
from repocomp.eval.metrics import clean_lines, edit_similarity, exact_match
from repocomp.eval.tasks import Task

if TYPE_CHECKING:
    from repocomp.eval.runner import EvalOptions
    from repocomp.memory.controller import MemoryDecision

log = logging.getLogger(__name__)

_LABEL = re.compile(r"^(was|deleted): ")  # how the memory labels the lines a hunk removed


# ------------------------------------------------------------------------------------------ the record's fields


def first_gt_line(ground_truth: str) -> str | None:
    lines = clean_lines(ground_truth)
    return lines[0] if lines else None


def gt_line_hit(ground_truth: str, blocks: Iterable[Any]) -> bool:
    """Does the stripped first ground-truth line occur, as a stripped line, in a fragment of the prompt?"""
    first = first_gt_line(ground_truth)
    if first is None:
        return False
    return any(first == line.strip() for b in blocks for line in b.text.splitlines())


def gt_line_attainable(ground_truth: str, index: Any, path: str, prompt_start_line: int) -> bool:
    """Could retrieval show the hole's line at all: does its stripped first line occur, as a stripped line, in a
    fragment that the leak rule leaves? The bound on `gt_line_hit` that the repository itself sets."""
    first = first_gt_line(ground_truth)
    if first is None:
        return False
    for f in index.fragments:
        if f is None or first not in f.text:  # a substring test first: most fragments fail it
            continue
        if f.locations and not all(loc.path == path and loc.end_line > prompt_start_line for loc in f.locations) \
                and any(line.strip() == first for line in f.text.splitlines()):
            return True  # outside the leak rule's exclusion (retrieval.Retriever.leaked), the line as a line
    return False


def def_hit(definitions: list[dict[str, Any]], blocks: Iterable[Any]) -> bool | None:
    """Does a fragment of the prompt cover one of the definition lines? None when the task names none."""
    if not definitions:
        return None
    blocks = list(blocks)
    return any(b.path == d["path"] and b.start_line <= int(d["line_no"]) < b.end_line
               for d in definitions for b in blocks)


def memory_gt_hit(ground_truth: str, decision: MemoryDecision | None) -> bool:
    """Does the hole's stripped first line occur, as a stripped line, among the memory entries the prompt was
    given (a replaced line without its `was:` label)? What `gt_line_hit` is for retrieval, for the session."""
    first = first_gt_line(ground_truth)
    if first is None or decision is None or not getattr(decision, "consulted", False):
        return False
    return any(first == _LABEL.sub("", line.strip()) for e in decision.entries for line in e.lines)


# ------------------------------------------------------------------------------------------------ the records


def _run_fields(task: Task, options: EvalOptions) -> dict[str, Any]:
    return {"task_id": task.task_id, "repo": task.repo, "path": task.path, "kind": task.kind, "mode": options.mode,
            "fragrel": bool(options.alpha), "backend": options.backend, "query_relations": options.query_relations,
            "definitions": options.definitions, "variant": options.variant}


def error_record(task: Task, options: EvalOptions, error: str) -> dict[str, Any]:
    """A task that could not be completed: no scores; a rerun with the same --out retries it."""
    return {**_run_fields(task, options), "error": error, "prediction": None, "em": None, "es": None,
            "gt_line_hit": None, "def_hit": None}


def make_record(task: Task, result: Any, options: EvalOptions, extra_timings: dict[str, float],
                attainable: bool | None = None) -> dict[str, Any]:
    scored = options.backend != "none"
    late_or_failed = getattr(result, "cut_by_time", False) or getattr(result, "error", "")
    if scored and (getattr(result, "fell_back", False) or (not result.text and late_or_failed)):
        # the deadline or a failing backend left it empty or to the fallback: not the model's answer, a failure a
        # rerun retries
        return error_record(task, options, f"no answer: {getattr(result, 'error', '') or 'the deadline passed'}")
    prediction = result.text if scored else ""
    return {
        **_run_fields(task, options),
        "prediction": prediction,
        "em": float(exact_match(prediction, task.ground_truth)) if scored else None,
        "es": edit_similarity(prediction, task.ground_truth) if scored else None,
        # one entry per contiguous run of lines the prompt showed (a class skeleton gives several)
        "context": [{"path": b.path, "start_line": b.start_line, "end_line": b.end_line,
                     "kind": getattr(b, "kind", "similar"), "s_ind": float(b.s_ind), "s_env": float(b.s_env),
                     "s_rel": float(b.s_rel), **({"name": b.name} if getattr(b, "kind", "") == "definition" else {})}
                    for b in result.context],
        "prompt_tokens": int(result.prompt_tokens),
        "timings_ms": {**{k: round(float(v), 3) for k, v in result.timings_ms.items()}, **extra_timings},
        "gt_line_hit": gt_line_hit(task.ground_truth, result.context),
        "def_hit": def_hit(task.api_definitions, result.context),
        **({} if attainable is None else {"gt_line_attainable": attainable}),
        **retrieval_fields(getattr(result, "retrieval", None)),
    }


def retrieval_fields(decision: Any) -> dict[str, Any]:
    """With `[retrieval] selective`: whether the prompt showed the retrieved code, and the two similarities."""
    if decision is None:
        return {}
    return {"retrieved": decision.retrieve, "sim_in_file": decision.in_file, "sim_repository": decision.repository}


def session_fields(task: Task, options: EvalOptions, memory: bool, n_events: int) -> dict[str, Any]:
    """What a session task's record adds to every record, an error's too: the memory asked for and given, the
    events replayed into it, the commit and hunk of the hole."""
    session = task.metadata.get("session") or {}
    return {"memory_requested": bool(options.memory), "memory": memory, "memory_events": n_events,
            "commit": session.get("commit"),
            "hunk": session.get("hunk")}


def memory_fields(ground_truth: str, decision: MemoryDecision | None) -> dict[str, Any]:
    """What a completed session task's record adds: the memory controller's choice (None: the engine said none)."""
    entries = getattr(decision, "entries", ()) or ()
    return {"memory_consulted": bool(getattr(decision, "consulted", False)),
            "memory_entries": len(entries),
            "memory_summaries": sum(1 for e in entries if any(r.startswith("summary") for r in e.reasons)),
            "memory_gt_hit": memory_gt_hit(ground_truth, decision)}


# ------------------------------------------------------------------------------------------------ reading them


def read_results(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Records of a results file (`.jsonl`, or `.jsonl.gz` as the published results are); a torn last line (an
    interrupted run) is dropped."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    records = []
    for i, line in enumerate(data.decode("utf-8", errors="replace").splitlines()):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict) and "task_id" in record and "repo" in record:
            records.append(record)
        else:
            log.warning("%s:%d: unreadable record skipped (interrupted run?)", path, i + 1)
    return records


def check_same_run(records: list[dict[str, Any]], options: EvalOptions, out: str | os.PathLike[str]) -> None:
    """Raise unless every record of `out` was written by a run like this one (a rerun resumes only its own)."""
    for r in records:
        recorded = (r.get("mode"), r.get("fragrel"), r.get("backend"), r.get("definitions", options.definitions),
                    r.get("memory_requested", options.memory), r.get("variant", "left"))
        if recorded != (options.mode, bool(options.alpha), options.backend, options.definitions, options.memory,
                        options.variant):
            raise RepocompError(
                f"{out} holds results of another run (mode={r.get('mode')}, fragrel={r.get('fragrel')}, "
                f"backend={r.get('backend')}, definitions={r.get('definitions')}, "
                f"memory={r.get('memory_requested', options.memory)}, variant={r.get('variant', 'left')}); "
                "give this run its own --out")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Averages per repository, then the mean over repositories (RepoCoder's reporting).

    Failed tasks (records with an `error`) are counted in `failed` and left out of every average."""
    by_repo: dict[str, list[dict[str, Any]]] = defaultdict(list)
    failed: dict[str, int] = defaultdict(int)
    for r in records:
        if r.get("error"):
            failed[r["repo"]] += 1
        else:
            by_repo[r["repo"]].append(r)
    per_repo: dict[str, dict[str, Any]] = {}
    for repo in sorted(by_repo.keys() | failed.keys()):
        rs = by_repo[repo]
        per_repo[repo] = {
            "tasks": len(rs),
            "failed": failed[repo],
            "em": _mean([r["em"] for r in rs if r.get("em") is not None]),
            "es": _mean([r["es"] for r in rs if r.get("es") is not None]),
            "gt_line_recall": _mean([float(r["gt_line_hit"]) for r in rs]),
            "def_hit": _mean([float(r["def_hit"]) for r in rs if r.get("def_hit") is not None]),
            "gt_line_attainable": _mean([float(r["gt_line_attainable"]) for r in rs
                                         if r.get("gt_line_attainable") is not None]),
        }
    summary: dict[str, Any] = {"tasks": len(records) - sum(failed.values()), "failed": sum(failed.values())}
    for key in ("em", "es", "gt_line_recall", "def_hit", "gt_line_attainable"):
        summary[key] = _mean([v[key] for v in per_repo.values() if v[key] is not None])
    summary["per_repo"] = per_repo
    return summary


# ------------------------------------------------------------------------------------------------ writing them


def append_record(fh: IO[str], record: dict[str, Any]) -> None:
    """One record as one line of an open results file, flushed (an interrupted run keeps every record written)."""
    fh.write(json.dumps(record) + "\n")
    fh.flush()


def rewrite_clean(path: Path, records: list[dict[str, Any]]) -> None:
    """`path` holding exactly `records` (a rerun drops failed and torn lines before appending), when it does not."""
    raw = path.read_text(encoding="utf-8")
    if raw and not raw.endswith("\n") or len(records) != sum(1 for ln in raw.splitlines() if ln.strip()):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        tmp.replace(path)


__all__ = ["append_record", "check_same_run", "def_hit", "error_record", "first_gt_line", "gt_line_attainable",
           "gt_line_hit", "make_record", "memory_fields", "memory_gt_hit", "read_results", "rewrite_clean",
           "session_fields", "summarize"]
