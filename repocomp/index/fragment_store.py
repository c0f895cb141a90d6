"""The fragment store: every distinct window text once, by id, with the places it occurs.

Identical windows (licence headers, boilerplate) share one fragment, so retrieval never ranks two copies of the
same text. An id stays put while any location keeps it, and a fragment that lost its last location keeps its id
until `release`, so that an edit that re-adds the same window (most windows of an edited file are unchanged) gets
the old id back: ids do not churn with every keystroke. `compact` renumbers densely when dead ids pile up.

Texts are found by their hash, not held as dictionary keys: a fragment's text is a slice of its file's text
(`Fragment`), and a key would be a copy of every window.

A loaded index's fragments stay in the index file's tables (`StoredFragments`, read in place) until an update
changes one: reading one makes a `Fragment` for the reader, changing one keeps it here. So a loaded index holds
objects only for the fragments its updates touched, not one per window of the repository.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from repocomp.index.fragments import Fragment, Location
from repocomp.index.store import file_map, page_out
from repocomp.index.yielding import checkpoint


@dataclass(frozen=True)
class StoredFragments:
    """Fragments as an index file holds them: row r's text is `blob[start[r]:end[r]]` (UTF-8, its first location),
    its locations are rows `loc_ptr[r]:loc_ptr[r + 1]` of `locations` (fragment, file number, start line, end
    line), file numbers index `paths`."""

    blob: np.ndarray
    start: np.ndarray
    end: np.ndarray
    loc_ptr: np.ndarray
    locations: np.ndarray
    paths: list[str]

    def fragment(self, frag_id: int, row: int) -> Fragment:
        lo, hi = self.loc_ptr[row], self.loc_ptr[row + 1]
        locations = [Location(self.paths[f], s, e) for _, f, s, e in self.locations[lo:hi].tolist()]
        return Fragment(frag_id, self.blob, locations, int(self.start[row]), int(self.end[row]))


class FragmentStore(Sequence[Fragment | None]):
    """Fragments by id (None once released); a read-only sequence to its readers."""

    def __init__(self, fragments: Iterable[Fragment | None] = (), stored: StoredFragments | None = None) -> None:
        """`fragments` by id; or, for a loaded index, the `stored` ones (id = row; alive while located)."""
        self._items: list[Fragment | None] = list(fragments)
        self._stored = stored
        if stored is not None:
            self._alive = np.diff(stored.loc_ptr) > 0
            self._items = [None] * len(self._alive)
            self._row = np.where(self._alive, np.arange(len(self._alive)), -1)  # per id: its stored row, -1: none
        else:
            self._alive = np.fromiter((f is not None for f in self._items), dtype=bool, count=len(self._items))
            self._row = np.full(len(self._items), -1, np.int64)
        self._hashed: _TextTable | None = None  # made when first needed: a loaded index that only answers
        # requests never needs it, an update does

    @property
    def _texts(self) -> _TextTable:
        """Live fragment ids by the hash of their text's UTF-8 bytes, made on first use. A stored fragment is hashed
        from the index file's bytes, never made into an object (a monorepo's 727k fragments: 5 s as objects), and
        kept in two arrays, not a dictionary (83 MB more for those fragments as one)."""
        if self._hashed is None:
            stored, rows = self._stored, self._row.tolist()
            keys, ids = [], []
            if stored is not None:
                view, starts, ends = stored.blob.data, stored.start.tolist(), stored.end.tolist()
                for frag_id, frag in enumerate(self._items):
                    if frag is None and (row := rows[frag_id]) >= 0:
                        keys.append(_bytes_key(bytes(view[starts[row]:ends[row]])))
                        ids.append(frag_id)
                page_out(file_map(stored.blob))  # every text was read once: not needed again
            table = _TextTable(np.array(keys, np.int64), np.array(ids, np.int64))
            for frag_id, frag in enumerate(self._items):
                if frag is not None:
                    table.add(frag.text, frag_id)
            self._hashed = table
        return self._hashed

    def index_texts(self) -> None:
        """Make the table of texts by hash now, ahead of the first update that needs it."""
        self._texts  # noqa: B018 - the property makes it

    def keep_text_index(self, other: FragmentStore) -> None:
        """Find texts through `other`'s table (a store of the same fragments, by the same ids): not made again."""
        self._hashed = None if other._hashed is None else other._hashed.packed()

    def find(self, text: str) -> int | None:
        """The id of the live fragment with this text, if any."""
        for frag_id in self._texts.candidates(_key(text)):
            frag = self[frag_id]
            if frag is not None and frag.text == text:
                return frag_id
        return None

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> Fragment | None: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Fragment | None]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        frag = self._items[i]
        if frag is None and self._stored is not None and self._row[i] >= 0:
            return self._stored.fragment(i % len(self), int(self._row[i]))
        return frag

    def __iter__(self) -> Iterator[Fragment | None]:
        return (self[i] for i in range(len(self)))

    def _own(self, frag_id: int) -> Fragment:
        """The live fragment `frag_id`, kept here from now on (one about to change)."""
        frag = self[frag_id]
        assert frag is not None  # callers name live fragments only
        self._items[frag_id], self._row[frag_id] = frag, -1
        return frag

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
            if frag_id == len(self._alive):  # grown by an eighth: appends stay amortized O(1)
                grow = max(16, frag_id // 8)
                self._alive = np.concatenate([self._alive, np.zeros(grow, bool)])
                self._row = np.concatenate([self._row, np.full(grow, -1, np.int64)])
            self._alive[frag_id] = True
            self._texts.add(text, frag_id)
        frag = self._own(frag_id)
        frag.point_at(source, start, end)
        frag.locations.append(loc)
        return frag_id

    def forget_path(self, frag_ids: Iterable[int], path: str, text: str | np.ndarray | None = None) -> None:
        """Drop the locations in `path` of these fragments (they stay, possibly empty, until `release`); those
        that read their text from `text` (the file's text being dropped) take a copy of it (the bytes of a loaded
        index stay where they are: nothing to copy)."""
        for frag_id in frag_ids:
            frag = self._own(frag_id)  # a file's fragments are released only after it forgets them
            frag.locations = [loc for loc in frag.locations if loc.path != path]
            if text is not None:
                frag.detach(text)

    def release(self, frag_ids: Iterable[int]) -> list[int]:
        """Remove those of `frag_ids` that have no location left; returns their ids, sorted."""
        dead = [i for i in sorted(frag_ids) if (f := self[i]) is not None and not f.locations]
        for frag_id in dead:
            self._texts.remove(self._own(frag_id).text, frag_id)
            self._items[frag_id] = None
            self._alive[frag_id] = False
        return dead

    def location_table(self, file_of: dict[str, int]) -> np.ndarray:
        """Every live fragment's locations as rows (id, file number in `file_of`, start line, end line), by id, each
        fragment's in its order: the stored fragments' rows taken from the stored table, renumbered, not made into
        objects (a save of a loaded monorepo's index made 727k of them: 4 s)."""
        parts = [np.array([(f.id, file_of[loc.path], loc.start_line, loc.end_line)
                           for f in self._items if f is not None for loc in f.locations], np.int64).reshape(-1, 4)]
        stored = self._stored
        if stored is not None:
            checkpoint()  # (a save beside the language server's requests: each step a slice, 10-40 ms of 770k rows)
            ids = np.flatnonzero(self._row[:len(self._items)] >= 0)  # read from the stored table, never changed
            rows = self._row[ids]
            first, counts = stored.loc_ptr[rows], np.diff(stored.loc_ptr)[rows]
            out_first = np.cumsum(counts) - counts  # where each fragment's rows start in the table
            checkpoint()
            table = stored.locations[np.repeat(first - out_first, counts) + np.arange(int(counts.sum()))]
            checkpoint()
            table[:, 0] = np.repeat(ids, counts)
            checkpoint()
            numbers = np.array([file_of.get(p, -1) for p in stored.paths], np.int64)
            table[:, 1] = numbers[table[:, 1]]
            if (table[:, 1] < 0).any():  # a stored fragment is made an object before its file goes
                raise ValueError("a stored fragment is located in a file the index no longer has")
            parts.append(table)
        checkpoint()
        out = np.concatenate(parts)
        checkpoint()
        order = np.argsort(out[:, 0], kind="stable")
        checkpoint()
        return out[order]

    def alive_mask(self) -> np.ndarray:
        """Per id: still present (False for ids whose windows all went away)."""
        return self._alive[:len(self._items)].copy()

    def n_alive(self) -> int:
        """The ids still present (no copy of the mask: an update counts them)."""
        return int(np.count_nonzero(self._alive[:len(self._items)]))

    def compact(self) -> np.ndarray:
        """Renumber the live fragments densely, in id order; returns the old ids kept (new id = position)."""
        keep = np.flatnonzero(self.alive_mask())
        self._items = [self._items[i] for i in keep.tolist()]
        self._row = self._row[keep]
        self._alive = np.ones(len(self._items), bool)
        for new_id, frag in enumerate(self._items):
            if frag is not None:  # (a stored one takes its new id when read)
                frag.id = new_id
        self._hashed = None
        return keep


class _TextTable:
    """Fragment ids by the hash of their text's UTF-8 bytes: the stored fragments' in sorted arrays, those added
    since in a dictionary (two texts of one hash there: a list beside it). A key names candidates only: a finder
    compares their texts and liveness (a released stored fragment's key stays in the arrays), so texts that share
    a hash are all found."""

    def __init__(self, keys: np.ndarray, ids: np.ndarray) -> None:
        order = np.argsort(keys, kind="stable")
        self._keys, self._ids = keys[order], ids[order]
        self._added: dict[int, int] = {}
        self._clashes: dict[int, list[int]] = {}  # further ids of an added key

    def candidates(self, key: int) -> Iterator[int]:
        """The ids of this key: those added since first, the stored ones only when asked for (a build finds every
        window it adds in the dictionary)."""
        if (first := self._added.get(key)) is not None:
            yield first
            yield from self._clashes.get(key, ())
        if len(self._keys):
            lo, hi = np.searchsorted(self._keys, key, "left"), np.searchsorted(self._keys, key, "right")
            yield from self._ids[lo:hi].tolist()

    def add(self, text: str, frag_id: int) -> None:
        key = _key(text)
        if self._added.setdefault(key, frag_id) != frag_id:
            self._clashes.setdefault(key, []).append(frag_id)

    def remove(self, text: str, frag_id: int) -> None:
        """Forget `frag_id` where it was added since (a stored one stays, found dead by the finder)."""
        key = _key(text)
        more = self._clashes.get(key, [])
        if frag_id in more:
            more.remove(frag_id)
        elif self._added.get(key) == frag_id:
            if more:
                self._added[key] = more.pop(0)
            else:
                del self._added[key]
        if not more:
            self._clashes.pop(key, None)

    def packed(self) -> _TextTable:
        """The same table all in arrays (for a store whose fragments are now all stored: its file read back)."""
        keys = [self._keys, np.fromiter(self._added, np.int64, len(self._added))]
        ids = [self._ids, np.fromiter(self._added.values(), np.int64, len(self._added))]
        for key, more in self._clashes.items():
            keys.append(np.full(len(more), key, np.int64))
            ids.append(np.array(more, np.int64))
        return _TextTable(np.concatenate(keys), np.concatenate(ids))


def _key(text: str) -> int:
    """The table's key for a text: the key of its UTF-8 bytes (as a stored fragment's are keyed)."""
    return _bytes_key(text.encode("utf-8", "surrogatepass"))


_bytes_key = hash
