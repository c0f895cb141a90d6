"""A loaded file's parsed tables as the index file holds them: read-only sequences over its columns.

A parse gives each file lists (node kinds, definitions as (node, name, class) tuples, call sites' callees, the
syntax facts); a loaded index reads the same values from stored columns instead, made into Python objects one at a
time as they are read. As lists they took a pointer per item and an object per row: the 7.6-million-line
monorepo's loaded index (3 million node kinds, 640,000 definitions, 500,000 facts with their strings) held 58 MiB
less without them (`repocomp bench index PATH --loaded`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar, overload

import numpy as np

T = TypeVar("T")


class CodedView(Sequence[T]):
    """Items given as codes into a table shared by every file (kinds and names repeat a lot)."""

    __slots__ = ("table", "codes")

    def __init__(self, table: list[T], codes: np.ndarray) -> None:
        self.table, self.codes = table, codes  # the codes' range is checked once for all files (`checked_table`)

    def __len__(self) -> int:
        return len(self.codes)

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return list(map(self.table.__getitem__, self.codes[i].tolist()))
        return self.table[self.codes[i]]

    def __iter__(self) -> Iterator[T]:
        return map(self.table.__getitem__, self.codes.tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # compared by value, as the list it stands for


class Rows(Sequence[tuple[Any, ...]]):
    """Tuples across columns of equal length: integer arrays (their items as ints) or `CodedView`s."""

    __slots__ = ("columns",)

    def __init__(self, *columns: np.ndarray | CodedView[Any]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    @overload
    def __getitem__(self, i: int) -> tuple[Any, ...]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[Any, ...]]: ...
    def __getitem__(self, i: int | slice) -> tuple[Any, ...] | list[tuple[Any, ...]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return tuple(int(c[i]) if isinstance(c, np.ndarray) else c[i] for c in self.columns)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return zip(*(c.tolist() if isinstance(c, np.ndarray) else c for c in self.columns))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


NO_ROWS = Rows()  # shared by the many files without definitions or facts


def split(flat: Any, lengths: np.ndarray) -> list[Any]:
    """Consecutive slices of `flat` (an array or a list) of the given lengths (views for arrays): each file's part of
    a stored table; `ValueError` if the lengths do not add up to it."""
    if (lengths < 0).any() or int(lengths.sum()) != len(flat):
        raise ValueError("lengths do not add up")
    ends = np.cumsum(lengths).tolist()
    return [flat[end - n:end] for end, n in zip(ends, lengths.tolist())]


def checked_table(table: list[T], codes: np.ndarray) -> list[T]:
    """`table`, checked to be one that every code indexes (`ValueError` otherwise): checked once for all files, so
    that their `CodedView`s need no check."""
    if len(codes) and (codes.min() < 0 or codes.max() >= len(table)):
        raise ValueError("code out of range")
    return table
