"""The fragment store: every distinct window text once, by id, with the places it occurs.

Identical windows (licence headers, boilerplate) share one fragment, so retrieval never ranks two copies of the
same text. An id stays put while any location keeps it, and a fragment that lost its last location keeps its id
until `release`, so that an edit that re-adds the same window (most windows of an edited file are unchanged) gets
the old id back: ids do not churn with every keystroke. `compact` renumbers densely when dead ids pile up.

Texts are found by their hash, not held as dictionary keys: a fragment's text is a slice of its file's text
(`Fragment`), and a key would be a copy of every window.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np

from repocomp.index.fragments import Fragment, Location


class FragmentStore(Sequence[Fragment | None]):
    """Fragments by id (None once released); a read-only sequence to its readers."""

    def __init__(self, fragments: Iterable[Fragment | None] = ()) -> None:
        self._items: list[Fragment | None] = list(fragments)
        self._alive = np.fromiter((f is not None for f in self._items), dtype=bool, count=len(self._items))
        self._hashed: dict[int, int] | None = None  # made when first needed: a loaded index that only answers
        self._collided: dict[str, int] = {}  # texts whose hash another live text has (never seen in practice)

    @property
    def _by_hash(self) -> dict[int, int]:
        """Live fragment ids by their text's hash, made on first use (reading every text once): retrieval never
        needs it, an update does."""
        if self._hashed is None:
            self._hashed, self._collided = {}, {}
            for frag in self._items:
                if frag is not None:
                    self._remember(frag.text, frag.id)
        return self._hashed

    def _remember(self, text: str, frag_id: int) -> None:
        if self._by_hash.setdefault(hash(text), frag_id) != frag_id:
            self._collided[text] = frag_id

    def find(self, text: str) -> int | None:
        """The id of the live fragment with this text, if any."""
        by_hash = self._by_hash
        if self._collided and text in self._collided:
            return self._collided[text]
        frag_id = by_hash.get(hash(text))
        if frag_id is None:
            return None
        frag = self._items[frag_id]
        return frag_id if frag is not None and frag.text == text else None

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> Fragment | None: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Fragment | None]: ...

    def __getitem__(self, i):
        return self._items[i]

    def __iter__(self) -> Iterator[Fragment | None]:
        return iter(self._items)

    def add(self, text: str, loc: Location) -> int:
        """Record that `text` occurs at `loc`; returns its fragment id (an existing one for a known text)."""
        return self.add_slice(text, 0, len(text), loc)

    def add_slice(self, source: str, start: int, end: int, loc: Location) -> int:
        """Record that `source[start:end]` (a window of a file's text) occurs at `loc`; returns its fragment id.
        The fragment reads its text from `source` from now on."""
        text = source[start:end]
        frag_id = self.find(text)
        if frag_id is None:
            frag_id = len(self._items)
            self._items.append(Fragment(frag_id, source, [], start, end))
            if frag_id == len(self._alive):  # grown by doubling: appends stay O(1)
                self._alive = np.concatenate([self._alive, np.zeros(max(16, frag_id), bool)])
            self._alive[frag_id] = True
            self._remember(text, frag_id)
        frag = self._items[frag_id]
        assert frag is not None  # `find` gives live fragments only
        frag.point_at(source, start, end)
        frag.locations.append(loc)
        return frag_id

    def forget_path(self, frag_ids: Iterable[int], path: str, text: str | np.ndarray | None = None) -> None:
        """Drop the locations in `path` of these fragments (they stay, possibly empty, until `release`); those
        that read their text from `text` (the file's text being dropped) take a copy of it (the bytes of a loaded
        index stay where they are: nothing to copy)."""
        for frag_id in frag_ids:
            frag = self._items[frag_id]
            assert frag is not None  # a file's fragments are released only after it forgets them
            frag.locations = [loc for loc in frag.locations if loc.path != path]
            if text is not None:
                frag.detach(text)

    def release(self, frag_ids: Iterable[int]) -> list[int]:
        """Remove those of `frag_ids` that have no location left; returns their ids, sorted."""
        dead = [i for i in sorted(frag_ids) if (f := self._items[i]) is not None and not f.locations]
        for frag_id in dead:
            frag = self._items[frag_id]
            assert frag is not None  # chosen above for being present
            text = frag.text
            if self._collided.get(text) == frag_id:
                del self._collided[text]
            elif self._by_hash.get(hash(text)) == frag_id:
                del self._by_hash[hash(text)]
            self._items[frag_id] = None
            self._alive[frag_id] = False
        return dead

    def alive_mask(self) -> np.ndarray:
        """Per id: still present (False for ids whose windows all went away)."""
        return self._alive[:len(self._items)].copy()

    def compact(self) -> np.ndarray:
        """Renumber the live fragments densely, in id order; returns the old ids kept (new id = position)."""
        keep = np.flatnonzero(self.alive_mask())
        self._items = [self._items[i] for i in keep.tolist()]
        self._alive = np.ones(len(self._items), bool)
        for new_id, frag in enumerate(self._items):
            assert frag is not None  # `keep` holds the live ids
            frag.id = new_id
        self._hashed = None
        return keep
