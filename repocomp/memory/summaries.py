"""MemGPT's recursive summary, written by the model off the request path (`[memory] summaries`).

MemGPT folds the events it evicts, together with the summary it already has, into a new summary that heads the
queue. Here the events are edit hunks: when the session is idle, the settled hunks not yet folded (every hunk but
the one changed last, which is the one being typed: SCM's flash memory) go to the model with the previous summary,
and what it writes replaces it. The prompt shows that summary where it would show a folded hunk's one-line template
(a long hunk, or one evicted from the prompt under memory pressure) and, as the head of MemGPT's queue, whenever
the session is consulted and the summary folds a hunk the other entries do not show in full; once per prompt.

Everything here is bounded: one call folds at most `MAX_INPUT_CHARS` of hunks (the oldest first; the rest wait for
the next idle moment), writes at most `SUMMARY_TOKENS` tokens and `MAX_SUMMARY_CHARS` characters, and is given
`TIME_LIMIT_S`; a request or an edit cancels it (the caller cancels the task) and nothing half-written is kept.
A hunk changed after it was folded is pending again.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from repocomp.memory.hunks import Hunk

__all__ = ["SessionSummary", "SummaryBatch", "write_summary"]

log = logging.getLogger(__name__)

SUMMARY_TOKENS = 48  # new tokens of one summary
MAX_SUMMARY_CHARS = 300  # of the summary kept (a model that rambles is cut)
MAX_INPUT_CHARS = 3_000  # hunk text folded by one call (about 1,000 tokens)
MAX_LINES_PER_HUNK = 12  # lines of one hunk shown to the model
TIME_LIMIT_S = 20.0  # one call, prefill included
LEAD = "the developer"  # the summary's first words, given: the model writes the rest of the sentence


@dataclass(frozen=True)
class SummaryBatch:
    """One call's work: the model's input and the hunks (id -> their `last_time`) it folds."""

    prompt: str
    folds: dict[int, float]


class SessionSummary:
    """The recursive summary of one session and the hunks it covers."""

    def __init__(self) -> None:
        self.text = ""
        self._covered: dict[int, float] = {}  # hunk id -> its last_time when folded
        self.calls = 0  # summaries written
        self.answered = 0  # calls the model answered, whether what it wrote was kept or not
        self.cancelled = 0

    def pending(self, hunks: Sequence[Hunk]) -> list[Hunk]:
        """Settled hunks not folded yet (or changed since), oldest first; never the hunk changed last."""
        if len(hunks) < 2:
            return []
        newest = max(hunks, key=lambda h: (h.last_time, h.id))
        todo = [h for h in hunks if h is not newest and self._covered.get(h.id) != h.last_time
                and (h.inserted or h.removed)]
        return sorted(todo, key=lambda h: (h.last_time, h.id))

    def batch(self, hunks: Sequence[Hunk]) -> SummaryBatch | None:
        """The next call's input, or None when nothing is pending."""
        live = {h.id for h in hunks}  # a hunk gone from the queue is never asked about again: forget it
        self._covered = {k: v for k, v in self._covered.items() if k in live}
        todo = self.pending(hunks)
        if not todo:
            return None
        parts: list[str] = []
        folds: dict[int, float] = {}
        size = 0
        for h in todo:
            part = _render(h)
            if parts and size + len(part) > MAX_INPUT_CHARS:
                break
            parts.append(part[:MAX_INPUT_CHARS])
            folds[h.id] = h.last_time
            size += len(part)
        before = f"# Earlier: {self.text}\n#\n" if self.text else ""
        prompt = ("# The edits a developer made in this repository, oldest first ('-' a line removed, '+' added).\n"
                  + before + "".join(parts) + "#\n# In one sentence, what the developer did and why: " + LEAD)
        return SummaryBatch(prompt, folds)

    def take(self, batch: SummaryBatch, written: str) -> bool:
        """Keep what the model wrote for `batch` (its first sentence, cut); False (nothing kept) when it wrote none."""
        line = written.split("\n", 1)[0].strip()
        line = re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0]
        if not line.strip(" .#"):
            return False
        text = f"{LEAD.capitalize()} {line}"
        self.text = text if len(text) <= MAX_SUMMARY_CHARS else text[:MAX_SUMMARY_CHARS - 3] + "..."
        self._covered.update(batch.folds)
        self.calls += 1
        return True

    def covers(self, hunk: Hunk) -> bool:
        """Whether the summary folds `hunk` as it is now."""
        return bool(self.text) and self._covered.get(hunk.id) == hunk.last_time

    def forget(self) -> None:
        self.text = ""
        self._covered.clear()


def _render(h: Hunk) -> str:
    lines = [f"# {h.path}, line {h.start_line + 1}:\n"]
    shown = [f"#   - {s.rstrip()}" for s in h.removed[:MAX_LINES_PER_HUNK // 2]]
    shown += [f"#   + {s.rstrip()}" for s in h.inserted[:MAX_LINES_PER_HUNK - len(shown)]]
    lines += [s[:200] + "\n" for s in shown]
    return "".join(lines)


async def write_summary(summary: SessionSummary, hunks: Sequence[Hunk], backend: Any,
                        time_limit_s: float = TIME_LIMIT_S) -> bool:
    """Fold the pending hunks into `summary` with one call to `backend` (a model that writes); False when nothing
    was pending, the backend failed or copies instead of writing, or the time ran out. Cancelling the awaiting
    task cancels the generation and keeps nothing."""
    from repocomp.backends import GenerationRequest

    if backend is None or not backend.capabilities.writes:
        return False
    batch = summary.batch(hunks)
    if batch is None:
        return False
    request = GenerationRequest(prompt=batch.prompt, prefix="", suffix="", candidates=(),
                                max_new_tokens=SUMMARY_TOKENS, stop=("\n",),
                                deadline=time.monotonic() + time_limit_s)
    try:
        answer = await asyncio.wait_for(backend.agenerate(request), time_limit_s)
    except asyncio.CancelledError:
        summary.cancelled += 1
        raise
    except Exception as exc:  # noqa: BLE001 - a summary is never worth an error: the template stays
        log.info("no session summary: %s", exc)
        return False
    summary.answered += 1
    if answer.fell_back or answer.copied:
        return False
    return summary.take(batch, answer.text)
