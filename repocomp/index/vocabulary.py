"""The term index's vocabulary (token -> term id) as a stored index keeps it: arrays read in place, not a dict.

A 7.6-million-line monorepo's 762,000 distinct tokens took 105 MB as a dict of strings once loaded. Stored, they
are the tokens' UTF-8 bytes one after another ('\n' between them: a token holds no whitespace), where each ends,
and an open-addressing table of ids by CRC-32 (zlib's: the stored slots depend on it), at most half full, filled
and probed by compiled loops. Tokens met after the load (an edit's new names) go to a dict beside it. A build keeps a plain dict
(its tokenizing loop is dict work) until its last batch is saved; `vocabulary_arrays` makes the arrays for a save.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping

import numba
import numpy as np

__all__ = ["StoredVocabulary", "term_ids", "vocabulary_arrays"]

_SEP = 10  # b"\n"
_KNOWN_KEPT = 1 << 16  # tokens remembered once found (a few MB)


def _crc_table() -> np.ndarray:
    table = np.zeros(256, np.int64)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (0xEDB88320 ^ (c >> 1)) if c & 1 else c >> 1
        table[i] = c
    return table


_CRC_TABLE = _crc_table()


@numba.njit(cache=True)
def _crc32(buf, start, stop, table):  # pragma: no cover - compiled
    """zlib's CRC-32 of buf[start:stop]."""
    c = 0xFFFFFFFF
    for j in range(start, stop):
        c = table[(c ^ buf[j]) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


@numba.njit(cache=True)
def _fill_slots(blob: np.ndarray, ends: np.ndarray, table: np.ndarray, slots: np.ndarray) -> None:  # pragma: no cover
    """Put each token's id in its CRC-32's slot or the next free one (`slots` all -1, at least twice the tokens)."""
    mask = len(slots) - 1
    start = 0
    for i in range(len(ends)):
        s = _crc32(blob, start, ends[i], table) & mask
        while slots[s] >= 0:
            s = (s + 1) & mask
        slots[s] = i
        start = ends[i] + 1


@numba.njit(cache=True)
def _probe_many(blob, ends, slots, table, keys, key_ends, out):  # pragma: no cover - compiled
    """out[k] = the id of the k-th '\\n'-separated token of `keys` in the stored table, or -1."""
    mask = len(slots) - 1
    start = 0
    for k in range(len(key_ends)):
        stop = key_ends[k]
        s = _crc32(keys, start, stop, table) & mask
        out[k] = -1
        while slots[s] >= 0:  # at most half full (checked at load): a free slot ends every probe
            i = slots[s]
            lo = ends[i - 1] + 1 if i else 0
            if ends[i] - lo == stop - start:
                same = True
                for j in range(stop - start):
                    if blob[lo + j] != keys[start + j]:
                        same = False
                        break
                if same:
                    out[k] = i
                    break
            s = (s + 1) & mask
        start = stop + 1


def _slots_for(blob: np.ndarray, ends: np.ndarray) -> np.ndarray:
    size = 16
    while size < 2 * len(ends):
        size *= 2
    slots = np.full(size, -1, np.int32)
    _fill_slots(blob, ends, _CRC_TABLE, slots)
    return slots


def vocabulary_arrays(vocab: Mapping[str, int]) -> dict[str, np.ndarray]:
    """`bytes`, `ends`, `slots` of a vocabulary whose ids are 0..n-1 (a dict, or a stored one)."""
    if isinstance(vocab, StoredVocabulary):
        return vocab.arrays()
    tokens = list(vocab)
    if not np.array_equal(np.fromiter(vocab.values(), np.int64, len(vocab)), np.arange(len(vocab))):
        tokens.sort(key=vocab.__getitem__)  # not in id order (never so far: ids are given in order)
    # writable, as a loaded file's (a private map): one compiled specialization of the lookup for both
    blob = np.frombuffer(bytearray("\n".join(tokens).encode("utf-8", "surrogatepass")), np.uint8)
    return _arrays(blob, len(tokens))


def _token_ends(blob: np.ndarray, n: int) -> np.ndarray:
    """Where each of the `n` '\\n'-separated tokens of `blob` ends."""
    ends = np.flatnonzero(blob == _SEP)
    return np.append(ends, len(blob)).astype(np.int64) if n else ends.astype(np.int64)


def _arrays(blob: np.ndarray, n: int) -> dict[str, np.ndarray]:
    ends = _token_ends(blob, n)
    return {"bytes": blob, "ends": ends, "slots": _slots_for(blob, ends)}


def term_ids(vocab: Mapping[str, int], tokens: list[str]) -> np.ndarray:
    """Each token's id in `vocab` (a dict or a stored one), -1 for one it does not hold."""
    if isinstance(vocab, StoredVocabulary):
        return vocab.find_many(tokens)
    return np.fromiter((vocab.get(t, -1) for t in tokens), np.int64, len(tokens))


class StoredVocabulary(Mapping[str, int]):
    """The vocabulary as stored (see the module's docstring), with the tokens added since; a Mapping, plus `ids`,
    which adds the tokens it does not know."""

    def __init__(self, blob: np.ndarray, ends: np.ndarray, slots: np.ndarray) -> None:
        """`ValueError` when the arrays do not fit together (a damaged file)."""
        n = len(ends)
        if blob.dtype != np.uint8 or ends.dtype.kind != "i" or slots.dtype.kind != "i" \
                or blob.ndim != 1 or ends.ndim != 1 or slots.ndim != 1:
            raise ValueError("vocabulary tables of another type")
        starts = np.concatenate(([0], ends[:-1] + 1)) if n else ends
        if n and (ends[-1] != len(blob) or (ends < starts).any() or (blob[ends[:-1]] != _SEP).any()):
            raise ValueError("vocabulary tokens inconsistent")
        if not len(slots) or len(slots) & (len(slots) - 1) or 2 * int((slots < 0).sum()) < len(slots) \
                or not -1 <= slots.min() <= slots.max() < n:  # a power of two, at least half free: probes end
            raise ValueError("vocabulary table inconsistent")
        self._blob, self._ends, self._slots, self._n = blob, ends, slots, n
        self._added: dict[str, int] = {}
        # tokens an edit found lately (stored or added; `ids`): an edit looks up each token of its windows (twice:
        # windows overlap), and the next keystroke the same ones again; a probe costs microseconds, a dict hit a few
        # nanoseconds
        self._known: dict[str, int] = {}

    def get(self, token: str, default: int | None = None) -> int | None:  # type: ignore[override]
        """The token's id; not remembered (a query's tokens, a 150k-character line's among them, are not kept)."""
        found = self._known.get(token)
        if found is None:
            found = int(self.find_many([token])[0])
        return default if found < 0 else found

    def find_many(self, tokens: list[str]) -> np.ndarray:
        """Each token's id, -1 for one not in the vocabulary (not remembered): the tokens added since the load, or
        the stored table probed in one compiled call (a 990 kB minified line's query has 116,000 distinct tokens:
        probed one by one in Python, 1.8 s)."""
        out = np.empty(len(tokens), np.int64)
        if not tokens:
            return out
        keys = np.frombuffer("\n".join(tokens).encode("utf-8", "surrogatepass"), np.uint8)
        _probe_many(self._blob, self._ends, self._slots, _CRC_TABLE, keys, _token_ends(keys, len(tokens)), out)
        if self._added:
            for k in np.flatnonzero(out < 0).tolist():
                out[k] = self._added.get(tokens[k], -1)
        return out

    def ids(self, tokens: list[str]) -> list[int]:
        """Each token's id, a new one (the next free) for a token not in the vocabulary: what
        `[vocab.setdefault(t, len(vocab)) for t in tokens]` gives, each distinct token looked up once."""
        known = self._known
        distinct = dict.fromkeys(tokens)
        missing = [t for t in distinct if t not in known]
        if len(known) + len(missing) > _KNOWN_KEPT:
            known.clear()
            missing = list(distinct)
        for token, found in zip(missing, self.find_many(missing).tolist()):  # distinct: none is added twice
            if found < 0:
                self._added[token] = found = len(self)
            known[token] = found
        return list(map(known.__getitem__, tokens))

    def __getitem__(self, token: str) -> int:
        found = self.get(token)
        if found is None:
            raise KeyError(token)
        return found

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self.get(token) is not None

    def __len__(self) -> int:
        return self._n + len(self._added)

    def arrays(self) -> dict[str, np.ndarray]:
        """What `vocabulary_arrays` gives: the stored arrays, or new ones when tokens were added since (`ids` gave
        them the ids that follow the stored ones, in order)."""
        if not self._added:
            return {"bytes": self._blob, "ends": self._ends, "slots": self._slots}
        added = "\n".join(self._added).encode("utf-8", "surrogatepass")
        blob = np.concatenate((self._blob, np.frombuffer(b"\n" + added if self._n else added, np.uint8)))
        return _arrays(blob, len(self))

    def items(self) -> Iterator[tuple[str, int]]:  # type: ignore[override]
        """(token, id), without looking each token up."""
        return itertools.chain(zip(self._stored(), range(self._n)), self._added.items())

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self._stored(), self._added)

    def _stored(self) -> list[str]:
        """The stored tokens in id order, decoded (for a compaction, not per request)."""
        return self._blob.tobytes().decode("utf-8", "surrogatepass").split("\n") if self._n else []
