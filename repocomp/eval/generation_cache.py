"""Generations kept across evaluation runs (`repocomp eval --generation-cache FILE`), keyed by everything that decides
them: the model, the prompt and the generation's settings.

Greedy decoding is deterministic, so an ablation whose prompt is the baseline's, token for token, would only decode
the baseline's answer again: with the baseline's run and the ablation's sharing one cache file, the ablation decodes
only where its prompt differs. Only greedy answers a model finished are kept (no sampling, no time limit reached, no
fallback). Records say how many of a task's generations came from the file (`generations_cached` of
`generations`), since their timings are then not the model's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from repocomp.backends.base import Backend, Capabilities, Generation, GenerationRequest
from repocomp.errors import RepocompError

__all__ = ["CachedGenerations", "counting", "counts_fields", "eval_backend"]

# per evaluated task: [generations, of them from the cache]; None outside `counting()`
_COUNTS: ContextVar[list[int] | None] = ContextVar("generation_cache_counts", default=None)


@contextmanager
def counting() -> Iterator[list[int]]:
    """Counts the generations of the task run inside it (asyncio tasks started inside get their own copy)."""
    counts = [0, 0]
    token = _COUNTS.set(counts)
    try:
        yield counts
    finally:
        _COUNTS.reset(token)


def counts_fields(counts: list[int]) -> dict[str, int]:
    return {"generations": counts[0], "generations_cached": counts[1]}


def eval_backend(config: Any, cache: str) -> Backend:
    """The run's backend (`config` a resolved BackendConfig), its greedy answers kept in `cache` when one is named
    and a model writes them (the extractive backend's copies cost nothing to make again)."""
    from repocomp.backends import make_backend

    backend = make_backend(config)
    if not cache or not backend.capabilities.writes:
        return backend
    settings = {"name": config.name, "model": config.model, "device": config.device,
                "max_new_tokens": config.max_new_tokens, "transformers": dataclasses.asdict(config.transformers)}
    return CachedGenerations(backend, cache, settings)


class CachedGenerations:
    """`backend` answered from `path` (SQLite) where the same model already answered the same request greedily;
    it is its backend to its callers (name, capabilities, stats)."""

    def __init__(self, backend: Backend, path: str | Path, settings: dict[str, Any]) -> None:
        self.backend = backend
        self.name = backend.name
        self._settings = settings  # the configuration that decides the model's answers (its model, dtype, device)
        self._identity: str | None = None
        try:
            self._db = sqlite3.connect(str(path))  # used on the event loop's thread only
            self._db.execute("CREATE TABLE IF NOT EXISTS generations (key TEXT PRIMARY KEY, text TEXT NOT NULL)")
            self._db.commit()
        except sqlite3.Error as exc:
            raise RepocompError(f"--generation-cache {path}: not a usable cache file ({exc})") from exc

    @property
    def capabilities(self) -> Capabilities:
        return self.backend.capabilities

    def _key(self, request: GenerationRequest) -> str:
        if self._identity is None:  # after loading: the model the backend names and its dtype
            stats = self.backend.stats()
            self._identity = json.dumps([self.name, stats.get("model"), stats.get("dtype"), stats.get("runtime"),
                                         self._settings], sort_keys=True, default=str)
        fields = {f.name: getattr(request, f.name) for f in dataclasses.fields(request)
                  if f.name not in ("finished", "deadline", "cache_key")}
        blob = json.dumps([self._identity, fields], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()

    async def agenerate(self, request: GenerationRequest) -> Generation:
        counts = _COUNTS.get()
        if counts is not None:
            counts[0] += 1
        greedy = request.temperature == 0.0
        key = self._key(request) if greedy else ""
        if greedy:
            row = self._db.execute("SELECT text FROM generations WHERE key = ?", (key,)).fetchone()
            if row is not None:
                if counts is not None:
                    counts[1] += 1
                return Generation(text=row[0], backend=self.name)
        answer = await self.backend.agenerate(request)
        if greedy and not (answer.fell_back or answer.error or answer.at_time_limit):
            self._db.execute("INSERT OR REPLACE INTO generations VALUES (?, ?)", (key, answer.text))
            self._db.commit()
        return answer

    async def aload(self) -> None:
        await self.backend.aload()

    async def aclose(self) -> None:
        try:
            await self.backend.aclose()
        finally:
            self._db.close()

    def stats(self) -> dict[str, Any]:
        return self.backend.stats()
