"""95% bootstrap intervals for the reported metrics, and paired intervals for differences between runs.

The reported figure is RepoCoder's: the mean per repository, then the mean over repositories. The bootstrap
resamples tasks within each repository (stratified), so an interval is that figure's; a difference between two
runs is computed on the tasks both ran, resampling task pairs, so what the runs share (the task's difficulty)
cancels out. A difference whose interval contains 0 is no difference at this sample size.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Interval", "metric_interval", "paired_difference"]

RESAMPLES = 4000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float
    tasks: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0


def _stratified(values_by_repo: dict[str, np.ndarray], seed: int) -> Interval:
    rng = np.random.default_rng(seed)
    repos = [v for v in values_by_repo.values() if len(v)]
    point = float(np.mean([v.mean() for v in repos]))
    boot = np.zeros(RESAMPLES)
    for v in repos:
        boot += v[rng.integers(0, len(v), size=(RESAMPLES, len(v)))].mean(axis=1)
    boot /= len(repos)
    tail = (1.0 - LEVEL) / 2
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    return Interval(point, float(low), float(high), sum(len(v) for v in repos))


def metric_interval(records: list[dict[str, Any]], key: str, seed: int = 0) -> Interval | None:
    """The run's figure for `key` (mean over repositories) with its 95% interval; None without values."""
    by_repo: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.get(key) is not None:
            by_repo[r["repo"]].append(float(r[key]))
    if not by_repo:
        return None
    return _stratified({repo: np.asarray(v) for repo, v in by_repo.items()}, seed)


def paired_difference(run: list[dict[str, Any]], baseline: list[dict[str, Any]], key: str,
                      seed: int = 0) -> Interval | None:
    """`run - baseline` for `key` on the tasks both have a value for, with its paired 95% interval."""
    base = {r["task_id"]: r for r in baseline if r.get(key) is not None}
    by_repo: dict[str, list[float]] = defaultdict(list)
    for r in run:
        other = base.get(r["task_id"])
        if other is not None and r.get(key) is not None:
            by_repo[r["repo"]].append(float(r[key]) - float(other[key]))
    if not by_repo:
        return None
    return _stratified({repo: np.asarray(v) for repo, v in by_repo.items()}, seed)
