"""The server's counters for `repocomp/stats` (what `repocomp bench lsp` and the tests read): recent completion
timings and what became of requests, and the process's resident memory."""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from repocomp.pipeline import CompletionResult

STATS_METHOD = "repocomp/stats"  # the custom request: timings, RSS and index state


@dataclasses.dataclass
class RequestStats:
    """Server-side timings of recent completion requests, for `repocomp/stats`."""

    completed_ms: deque[float] = dataclasses.field(default_factory=lambda: deque(maxlen=2000))
    # each of those requests' stages (the pipeline's timings, ms): where a slow one's time went
    completed_stages: deque[dict[str, float]] = dataclasses.field(default_factory=lambda: deque(maxlen=2000))
    superseded: int = 0
    cancelled: int = 0
    failed: int = 0
    cut_by_time: int = 0  # answers the generation time limit shortened or the deadline emptied
    memory_consulted: int = 0  # requests whose prompt the session memory's controller gave recent edits
    memory_skipped: int = 0  # requests it judged the session unrelated to (or had nothing)
    retrieval_skipped: int = 0  # requests whose prompt showed no retrieved code (`[retrieval] selective`)

    def answered(self, result: CompletionResult, shown: str, elapsed_s: float, deadline_s: float) -> bool:
        """Count an answer (`shown`: the part of `result` the request shows); whether the deadline emptied it."""
        if result.memory is not None:
            if result.memory.consulted:
                self.memory_consulted += 1
            else:
                self.memory_skipped += 1
        if result.retrieval is not None and not result.retrieval.retrieve:
            self.retrieval_skipped += 1
        emptied = not shown.strip() and elapsed_s >= deadline_s
        if result.cut_by_time or emptied:
            self.cut_by_time += 1
        self.completed_ms.append(elapsed_s * 1000)
        self.completed_stages.append({k: round(v, 2) for k, v in result.timings_ms.items()})
        return emptied


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def file_rss_bytes() -> int:
    """The part of the resident set that is pages of mapped files (an index read in place: pages as the file
    holds them, which the kernel takes back under memory pressure) (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/status") as fh:
            kib = next((line.split()[1] for line in fh if line.startswith("RssFile:")), "0")
        return int(kib) * 1024
    except (OSError, ValueError, IndexError):
        return 0
