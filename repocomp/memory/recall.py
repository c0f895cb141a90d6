"""Recall by hashing (TiM's two-stage retrieval, with sparse token vectors standing in for embeddings).

An entry's vector is the set of identifiers in its text (the project's `code_tokens`, keywords dropped). The first
stage is a locality-sensitive hash of that set: MinHash, one value per band, each band a hash table; a query's
candidates are the entries sharing a bucket with it in any band (the chance grows with their Jaccard similarity:
1 - (1 - J)^bands). The second stage ranks the candidates by the exact similarity (the caller's scoring).
"""

from __future__ import annotations

import keyword
import random
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

import numpy as np

from repocomp.tokenize import code_tokens

__all__ = ["KEYWORDS", "MinHashIndex", "jaccard", "memory_tokens"]

KEYWORDS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(
    ["function", "func", "return", "var", "let", "const", "new", "this", "class", "interface", "type", "struct", "fn", "pub", "impl", "mut", "void", "int", "long", "float", "double", "char", "bool", "boolean", "string", "public", "private", "protected", "static", "final", "package", "import", "export", "from", "extends", "implements", "throws", "throw", "try", "catch", "finally", "if", "else", "elif", "for", "while", "do", "switch", "case", "default", "break", "continue", "goto", "go", "defer", "chan", "map", "range", "select", "true", "false", "null", "nil", "none", "True", "False", "None", "self", "cls"])

_PRIME = (1 << 31) - 1
K = TypeVar("K", bound=Hashable)  # an entry's key
_MAX_TOKENS = 512  # tokens of one entry that are hashed (a large paste is sampled by its first ones)


def memory_tokens(text: str) -> frozenset[str]:
    """The sparse vector of a text: its identifiers (longer than one character), keywords left out."""
    return frozenset(t for t in code_tokens(text)
                     if len(t) > 1 and (t[0].isalpha() or t[0] == "_") and t not in KEYWORDS)


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b) if len(a) < len(b) else len(b & a)
    return inter / (len(a) + len(b) - inter)


class MinHashIndex(Generic[K]):
    """Entries by key, bucketed by the MinHash of their token sets (one row per band)."""

    def __init__(self, bands: int = 32, seed: int = 20240501) -> None:
        rng = random.Random(seed)  # fixed permutations: the same text always lands in the same buckets
        self.bands = bands
        self._a = np.array([rng.randrange(1, _PRIME) for _ in range(bands)], dtype=np.int64)[:, None]
        self._b = np.array([rng.randrange(0, _PRIME) for _ in range(bands)], dtype=np.int64)[:, None]
        self._sigs: dict[K, tuple[int, ...]] = {}
        self._buckets: list[dict[int, set[K]]] = [{} for _ in range(bands)]

    def __len__(self) -> int:
        return len(self._sigs)

    def __contains__(self, key: object) -> bool:
        return key in self._sigs

    def signature(self, tokens: Iterable[str]) -> tuple[int, ...] | None:
        toks = list(tokens)[:_MAX_TOKENS]
        if not toks:
            return None
        # Python's str hash is salted per process: fine, the index lives in memory and is rebuilt on load
        x = np.fromiter((hash(t) & 0x7FFFFFFF for t in toks), dtype=np.int64, count=len(toks))[None, :]
        return tuple(((self._a * x + self._b) % _PRIME).min(axis=1).tolist())

    def add(self, key: K, tokens: Iterable[str]) -> None:
        self.remove(key)
        sig = self.signature(tokens)
        if sig is None:
            return
        self._sigs[key] = sig
        for band, value in zip(self._buckets, sig):
            band.setdefault(value, set()).add(key)

    def remove(self, key: K) -> None:
        sig = self._sigs.pop(key, None)
        if sig is None:
            return
        for band, value in zip(self._buckets, sig):
            bucket = band.get(value)
            if bucket is not None:
                bucket.discard(key)
                if not bucket:
                    del band[value]

    def candidates(self, tokens: Iterable[str], limit: int = 2048) -> set[K]:
        """Keys sharing a bucket with `tokens` in some band (at most `limit`, the bands taken in order)."""
        sig = self.signature(tokens)
        out: set[K] = set()
        if sig is None:
            return out
        for band, value in zip(self._buckets, sig):
            bucket = band.get(value)
            if bucket:
                out |= bucket
                if len(out) >= limit:
                    break
        return out

    def clear(self) -> None:
        self._sigs.clear()
        for band in self._buckets:
            band.clear()
