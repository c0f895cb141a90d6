"""A long sequence of strings with few distinct values (each graph node's kind, its owner's path): a table of the
distinct ones and an int32 code per item, in an array grown by an eighth at a time (`room_for`, as the graph's
other per-node arrays grow). A Python list holds a pointer per item: 30 MB per list for the 3.7 million nodes of a
7.6-million-line monorepo; the codes also read in place from the index file."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from graph.stored_rows import checked_table


def room_for(a: np.ndarray, size: int) -> np.ndarray:
    """`a`, or a copy (zeros after it) with room for at least `size` entries when it has less: an eighth more than
    `a` at least, so that appends stay amortized O(1) and a loaded index's first edit does not double arrays of the
    graph's size."""
    if len(a) >= size:
        return a
    grown = np.zeros(max(size, len(a) + len(a) // 8, 1024), a.dtype)
    grown[:len(a)] = a
    return grown


class CodedStrings:
    def __init__(self, table: Iterable[str] = (), codes: np.ndarray | None = None, n: int | None = None) -> None:
        """`codes`' first `n` (all by default) are the items; any after them, room to append in place."""
        self.table = list(table)
        self._code_of = {value: i for i, value in enumerate(self.table)}
        self._codes = np.zeros(0, np.int32) if codes is None else codes
        self._n = len(self._codes) if n is None else n
        if self._n > len(self._codes):
            raise ValueError("fewer codes than items")
        checked_table(self.table, self.codes)

    @property
    def codes(self) -> np.ndarray:
        return self._codes[:self._n]

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> str:
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self.table[self._codes[i % self._n]]

    def __iter__(self) -> Iterator[str]:
        table = self.table
        return (table[c] for c in self.codes.tolist())

    def values_at(self, ids: np.ndarray) -> set[str]:
        """The distinct values of the items at `ids`."""
        return {self.table[c] for c in np.unique(self.codes[ids]).tolist()}

    def is_in(self, ids: np.ndarray, values: Iterable[str]) -> np.ndarray:
        """Per item at `ids`: whether its value is one of `values`."""
        return np.isin(self.codes[ids], [self._code_of[v] for v in values if v in self._code_of])

    def extend(self, values: Iterable[str]) -> None:
        self._append(np.array([self._code(v) for v in values], np.int32))

    def repeat(self, value: str, n: int) -> None:
        """`value` appended `n` times."""
        self._append(np.full(n, self._code(value), np.int32))

    def take(self, keep: np.ndarray) -> CodedStrings:
        """The items at `keep`, in that order (the table as it is)."""
        return CodedStrings(self.table, self.codes[keep])

    def _code(self, value: str) -> int:
        code = self._code_of.get(value)
        if code is None:
            code = self._code_of[value] = len(self.table)
            self.table.append(value)
        return code

    def _append(self, codes: np.ndarray) -> None:
        end = self._n + len(codes)
        self._codes = room_for(self._codes, end)
        self._codes[self._n:end] = codes
        self._n = end
