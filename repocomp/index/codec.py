"""The index's explicit on-disk schema: an `Index`'s parts as plain arrays plus JSON, and back.

No live object is serialized: every dataclass (files, parsed files, fragments, graph, resolver, summary) is
written as plain fields and rebuilt on load. The large tables are used as the file holds them (views of it:
`store`): the file texts, the fragments' locations, W and Eq. 9's symmetric W, F, the term index's rows and
postings; so what a loaded index would otherwise derive whole is stored too. What is cheap to derive is not:
fragment texts are their first location's bytes of the file texts, the resolver's symbol tables come from the
parsed files. Counts are taken from array lengths, so a crafted file cannot make the loader allocate more than the
file holds; ids are range-checked.

`encode(index) -> (meta, arrays)`, `decode(index, meta, arrays)` fills an empty `Index`; any inconsistency
raises `ValueError` (the caller reports the file as corrupt), another `SCHEMA` or another version of a part's state
(the term index's) raises `OtherVersionError`, a `ValueError` too (the caller rebuilds quietly).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Hashable, Iterator, Sequence
from functools import partial
from sys import intern  # JSON gives each occurrence of a name its own string: resolutions repeat names a lot
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np
import scipy.sparse as sp

from graph.code_graph import CodeGraph, FileNodes
from graph.coded_strings import CodedStrings, room_for
from graph.csr_rows import PatchedRows, patched
from graph.resolve import Resolver, make_symbols
from graph.stored_rows import split
from repocomp.index import heap
from repocomp.index.fragment_store import FragmentStore, StoredFragments
from repocomp.index.records import FileEntry, IndexSummary
from repocomp.index.store import Chunks, Stored, file_map, page_out
from repocomp.index.stored_parse import StoredParses
from repocomp.index.term_index import StateVersionError, TermIndex, check_compressed
from repocomp.index.yielding import checkpoint, paced

if TYPE_CHECKING:
    from repocomp.index.index import Index

_H = TypeVar("_H", bound=Hashable)

_SCAN = 1 << 24  # the texts are searched for newlines this many bytes at a time (a mask of all would be their size)
SCHEMA = 9  # bump with any change below or in what parsing stores (the store's FORMAT_VERSION covers the container)


class OtherVersionError(ValueError):
    """The stored data is of another schema version (this codec's or a part's): written by another repocomp."""


def plain(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists): compare stored and live configs with it."""
    return json.loads(json.dumps(value))


# ------------------------------------------------------------------------------------------------ helpers


BLOCK_ROWS = 1 << 16  # a matrix's rows made at a time for the write
SLICE_ROWS = 1 << 13  # the same beside a language server's requests (65,536 at a time: 100-440 ms of W's)
_CODES_SLICE = 1 << 16  # values per C loop below: each holds the interpreter's lock (a language server's requests
# wait meanwhile), a monorepo's millions at once 100-260 ms; a slice ~3 ms


def _codes(values: Sequence[_H]) -> tuple[list[_H], np.ndarray]:
    """A table of distinct values and each value's index in it (kinds, names and paths repeat a lot)."""
    slices = [values[i:i + _CODES_SLICE] for i in range(0, len(values), _CODES_SLICE)]
    first: dict[_H, None] = {}
    for part in slices:  # in order of first appearance; C loops, not a Python one per value
        checkpoint()
        first.update(dict.fromkeys(part))
    table, code_of = list(first), dict[_H, int]()
    for at in range(0, len(table), _CODES_SLICE):  # (a monorepo's million names at once: 80-110 ms)
        checkpoint()
        code_of.update(zip(table[at:at + _CODES_SLICE], range(at, at + _CODES_SLICE)))
    codes = np.empty(len(values), np.int32)
    for i, part in enumerate(slices):
        checkpoint()
        codes[i * _CODES_SLICE:i * _CODES_SLICE + len(part)] = np.fromiter(map(code_of.__getitem__, part), np.int32,
                                                                           len(part))
    return table, codes


def _cat(parts: list[np.ndarray], dtype: Any, width: int = 0) -> np.ndarray:
    if not parts:
        return np.zeros((0, width) if width else 0, dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


def _encoded(t: str | np.ndarray) -> bytes | np.ndarray:
    return t.encode("utf-8", "surrogatepass") if isinstance(t, str) else t  # buffers may hold lone surrogates


def _text_lengths(sources: list[str | np.ndarray]) -> np.ndarray:
    """Each text's length in UTF-8 bytes (a text still held as the bytes it was loaded from: as it is)."""
    return np.fromiter((len(t) if not isinstance(t, str) or t.isascii() else len(_encoded(t)) for t in sources),
                       np.int64, len(sources))


def _paged(chunks: Chunks, index: Index, every: int = 1 << 26) -> Chunks:
    """`chunks` whose pieces give back the pages of the index file they read, every `every` bytes and at the end."""
    def pieces() -> Iterator[bytes | np.ndarray]:
        since = 0
        for piece in chunks.pieces():
            checkpoint()
            yield piece
            since += len(piece) if isinstance(piece, bytes) else piece.nbytes
            if since >= every:
                page_out(index.mapped)
                since = 0
        page_out(index.mapped)
    return Chunks(chunks.dtype, lambda: chunks.length, pieces)  # (a length still to count is counted when written)


def _csr_blocks(shape: tuple[int, int], dtype: Any, blocks: Callable[[], Iterator[sp.csr_matrix]]
                ) -> dict[str, Stored]:
    """The parts of a CSR matrix written from its blocks of rows (`blocks()` gives them in order, made afresh on
    each call) instead of made whole: a pass counts the rows' entries, one writes the values, one the columns. Its
    index dtype is scipy's for the whole matrix, so that it reads back in place."""
    counted: list[np.ndarray] = []

    def indptr() -> np.ndarray:
        if not counted:
            ptr = np.zeros(shape[0] + 1, np.int64)
            np.cumsum(np.concatenate([np.diff(b.indptr) for b in paced(blocks(), 1)] or [np.zeros(0, np.int64)]),
                      out=ptr[1:])
            counted.append(ptr.astype(np.int32) if max(*shape, ptr[-1]) <= np.iinfo(np.int32).max else ptr)
        return counted[0]

    def parts(name: str) -> Iterator[np.ndarray]:
        for block in blocks():
            checkpoint()
            yield getattr(block, name)

    def count() -> int:
        return int(indptr()[-1])

    return {"data": Chunks(dtype, count, lambda: parts("data")),
            "indices": Chunks(np.int32 if max(shape) <= np.iinfo(np.int32).max else np.int64, count,
                              lambda: parts("indices")),
            "indptr": indptr}


def _line_bounds(blob: np.ndarray, lengths: np.ndarray, line_counts: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each file's text starts in `blob`, where its first newline is among all of them, and the newlines'
    offsets; `ValueError` unless each file has its `line_counts` lines. The pages of the index file the scan read
    go back to the kernel as it goes (the texts are the largest table: 289 MB in a 7.6-million-line monorepo)."""
    ends = np.cumsum(lengths)
    starts = ends - lengths
    mapped, parts = file_map(blob), [np.zeros(0, np.int64)]
    for at in range(0, len(blob), _SCAN):
        checkpoint()
        parts.append(np.flatnonzero(blob[at:at + _SCAN] == ord("\n")) + at)
        if at % (16 * _SCAN) == 15 * _SCAN:
            page_out(mapped)
    checkpoint()
    newlines = np.concatenate(parts)
    checkpoint()
    first = np.searchsorted(newlines, starts)
    checkpoint()
    if not np.array_equal(np.searchsorted(newlines, ends) - first, line_counts - 1):
        raise ValueError("line counts differ from the texts")
    return starts, first, newlines


# ------------------------------------------------------------------------------------------------ encode


def let_go(held: list[list[Any]], every: int = 256) -> None:
    """Empty `held`'s lists a slice at a time: a monorepo's 27k parses freed at once held the interpreter's lock
    for 60 ms of a save."""
    for items in held:
        while items:
            del items[-every:]
            checkpoint()
    held.clear()


def encode(index: Index, rows: int = BLOCK_ROWS, held: list[list[Any]] | None = None,
           ) -> tuple[dict[str, Any], dict[str, Stored]]:
    """The index as the header's plain data and its named tables. The large tables are made as the write reaches
    them and let go after (see `store.Stored`), so that a save holds one at a time beside the index, with the
    pages of the index file it read for each given back; a matrix `rows` rows at a time. `held` gets the list of
    the parses decoded for the tables, for the caller to let go of in slices once they are written (`let_go`)."""
    entries = list(index.files.values())
    graph, arrays = index.graph, dict[str, Stored]()
    paths = [e.path for e in entries]
    file_of = {p: i for i, p in enumerate(paths)}

    sources = [e.source for e in entries]
    arrays["text_len"] = lengths = _text_lengths(sources)
    arrays["text"] = _paged(Chunks(np.uint8, int(lengths.sum()), lambda: map(_encoded, sources)), index)
    parsed = [e.parsed for e in paced(entries)]  # each file's decoded from the file read: slices
    if held is not None:
        held.append(parsed)
    kinds_table, arrays["node_kind"] = _codes([k for p in paced(parsed) for k in p.kinds])
    arrays["node_count"] = np.array([p.n_nodes for p in parsed], np.int64)
    arrays["line_count"] = np.array([p.n_lines for p in parsed], np.int64)
    for name in ("start_line", "end_line", "parent"):
        arrays[f"node_{name}"] = partial(lambda n: _cat([getattr(p, n) for p in parsed], np.int32), name)
    arrays["node_id"] = lambda: _cat([e.node_ids for e in entries], np.int64)
    arrays["line_owner"] = lambda: _cat([p.line_owner for p in parsed], np.int32)
    arrays["line_len"] = lambda: _cat([p.line_len for p in parsed], np.int32)
    def_names, arrays["def_name"] = _codes([name for p in paced(parsed) for _, name, _ in p.defs])
    arrays["def_node"] = np.array([n for p in paced(parsed) for n, _, _ in p.defs], np.int32)
    arrays["def_class"] = np.array([c for p in paced(parsed) for _, _, c in p.defs], np.int32)
    arrays["def_count"] = np.array([len(p.defs) for p in parsed], np.int64)
    call_parts, arrays["call_parts"] = _codes([parts for p in paced(parsed) for parts in p.call_parts])
    arrays["call_node"] = lambda: _cat([p.call_nodes for p in parsed], np.int32)
    arrays["call_count"] = np.array([len(p.call_parts) for p in parsed], np.int64)
    facts = [f for p in paced(parsed) for f in p.facts]
    fact_strings, fact_codes = _codes([v for k, _, a, b in facts for v in (k, a, b)])
    arrays["fact_codes"] = fact_codes.reshape(-1, 3)  # kind, a, b of each fact
    arrays["fact_node"] = np.array([n for _, n, _, _ in facts], np.int32)
    arrays["fact_count"] = np.array([len(p.facts) for p in parsed], np.int64)
    del facts
    imports = [(i.local, i.module, i.name) for p in paced(parsed) for i in p.imports]
    import_strings, arrays["import_codes"] = _codes([v for row in imports for v in row])  # name None: JSON's null
    arrays["import_count"] = np.array([len(p.imports) for p in parsed], np.int64)
    del imports
    arrays["window_frag"] = lambda: _cat([e.windows for e in entries], np.int64)
    arrays["window_count"] = np.array([len(e.windows) for e in entries], np.int64)

    checkpoint()
    nodes = [graph.files[p] for p in paths]
    arrays["file_node"] = np.array([n.file_node for n in nodes], np.int64)
    arrays["syntax_edges"] = lambda: _cat([n.syntax_edges for n in nodes], np.int64, 2)
    arrays["syntax_count"] = np.array([len(n.syntax_edges) for n in nodes], np.int64)
    arrays["call_edges"] = lambda: _cat([n.call_edges.reshape(-1, 2) for n in nodes], np.int64, 2)
    arrays["call_edge_count"] = np.array([len(n.call_edges) for n in nodes], np.int64)
    # each node's kind, owner, liveness and length, stored with the room an edit's growth would give them (zeros
    # after them, `room_for`): a loaded index's edits add their nodes in place, in the file's private map, where the
    # first edit grew the four tables into copies (56 MB for a 7.6-million-line monorepo's 3 million nodes)
    def with_room(a: np.ndarray) -> np.ndarray:
        return room_for(a, len(a) + 1)

    graph_kinds, arrays["graph_kind"] = graph.kind.table, lambda: with_room(graph.kind.codes)
    owners, arrays["graph_owner"] = graph.owner.table, lambda: with_room(graph.owner.codes)
    arrays["graph_alive"] = lambda: with_room(graph.alive.astype(bool, copy=False))
    arrays["graph_length"] = lambda: with_room(graph.length.astype(np.float64, copy=False))

    arrays["locations"] = lambda: index.fragments.location_table(file_of)
    arrays["fragment_alive"] = index.alive_mask()
    arrays["stale_rows"] = index.upkeep.stale_rows()  # a partial build's: what its end recomputes (see `save`)

    term = index.term_index.state_pieces()
    for key in TermIndex.STATE_ARRAYS:
        arrays[f"term_{key}"] = _paged(term[key], index) if isinstance(term[key], Chunks) else term[key]
    # F, its transpose, W, Eq. 9's symmetric W and the graph's cost matrix as scipy holds them (its index dtypes):
    # read back in place, not converted (F's transpose and the cost matrix are stored so that a loaded index holds
    # no copy of them: 190 MB in a 7.6-million-line monorepo), each a block of rows at a time. The symmetric W only
    # where retrieval reads it (FragRel on; otherwise it is made if ever read): it needs W's transpose, which a
    # save would hold beside W made whole (with a build's last batch, its peak)
    f, n, costs = index.upkeep.fragment_nodes, len(index.fragments), graph.cost_matrix()
    matrices = [("frag_nodes", _csr_blocks(f.shape, f.dtype, lambda: f.row_blocks(rows))),
                ("node_frags", _csr_blocks(f.shape[::-1], f.dtype,
                                           lambda: index.upkeep.node_fragments.row_blocks(rows))),
                ("costs", _csr_blocks(costs.shape, costs.dtype, lambda: costs.row_blocks(rows))),
                ("rel", _csr_blocks((n, n), np.float32, lambda: index.upkeep.relation_blocks(rows)))]
    symmetric = index.config.retrieval.alpha != 0.0
    if symmetric:
        matrices.append(("sym", _csr_blocks((n, n), np.float32, lambda: index.upkeep.symmetric_blocks(rows))))
    for name, parts in matrices:
        arrays |= {f"{name}_{part}": _paged(v, index) if isinstance(v, Chunks) else v for part, v in parts.items()}
    checkpoint()

    meta = {
        "schema": SCHEMA,
        "root": str(index.root),
        "config": plain(index.config.to_dict()),
        "files": [{"path": e.path, "language": e.language, "has_errors": p.has_errors}
                  for e, p in paced(zip(entries, parsed, strict=True), 1024)],
        "kinds": kinds_table, "def_names": def_names, "call_parts": [list(p) for p in paced(call_parts, 1 << 15)],
        "fact_strings": fact_strings, "import_strings": import_strings,
        "graph": {"weights": graph.weights, "kinds": graph_kinds, "owners": owners,
                  "dirs": [[folder, node, graph._dir_files[folder]] for folder, node in graph.dirs.items()],
                  "nodes": graph.n_ids},
        "consulted": {p: sorted(keys) for p, keys in paced(index.resolver.consulted.items(), 1024)},
        "term_index": {"version": TermIndex.STATE_VERSION},
        "symmetric": symmetric,
        "summary": plain(index.summary.to_dict()),
    }
    return meta, arrays


# ------------------------------------------------------------------------------------------------ decode


def decode(index: Index, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Fill the empty `index` from `meta` and `arrays`; `ValueError`/`KeyError`/`TypeError` when inconsistent."""

    if meta.get("schema") != SCHEMA:
        raise OtherVersionError(f"schema {meta.get('schema')!r}, expected {SCHEMA}")
    try:  # before any of the part's tables is read: another version may lay them out otherwise
        TermIndex.check_state_version(meta["term_index"])
    except StateVersionError as exc:  # the term index's own versioning, translated where it enters
        raise OtherVersionError(str(exc)) from None
    a = arrays
    files = meta["files"]
    n_files = len(files)
    for name in ("text_len", "node_count", "line_count", "def_count", "call_count", "fact_count", "import_count",
                 "window_count", "file_node", "syntax_count", "call_edge_count"):
        if len(a[name]) != n_files:
            raise ValueError(f"{name}: one per file expected")
    line_counts = a["line_count"]
    blob = a["text"]
    if blob.dtype != np.uint8 or blob.ndim != 1 or (a["text_len"] < 0).any() or a["text_len"].sum() != len(blob):
        raise ValueError("texts")
    text_start, first_newline, newlines = _line_bounds(blob, a["text_len"], line_counts)
    # each check reads a table whole: its pages go back to the kernel after it, so that reading a large index
    # never holds the whole file resident at once
    mapped = file_map(blob)
    page_out(mapped)
    sources = split(blob, a["text_len"])
    t = _file_arrays(a)  # per table, each file's slice of it
    parses = StoredParses(meta, a)

    graph = CodeGraph(meta["graph"]["weights"])
    n_ids = int(meta["graph"]["nodes"])
    if not len(a["graph_kind"]) == len(a["graph_owner"]) == len(a["graph_alive"]) == len(a["graph_length"]) \
            >= n_ids >= 0:
        raise ValueError("graph node tables differ in length")
    graph.kind = CodedStrings(map(str, meta["graph"]["kinds"]), a["graph_kind"], n_ids)
    graph.owner = CodedStrings(map(str, meta["graph"]["owners"]), a["graph_owner"], n_ids)
    graph.alive = a["graph_alive"].astype(bool, copy=False)  # read (and grown) in place
    graph.length = a["graph_length"].astype(np.float64, copy=False)
    for folder, node, count in meta["graph"]["dirs"]:
        graph.dirs[str(folder)], graph._dir_files[str(folder)] = _node(node, n_ids), int(count)

    resolver = Resolver()
    for i, rec in enumerate(files):
        path, ref = str(rec["path"]), parses.ref(i)  # the file's parse, made when read: the symbols' from it now
        node_ids = _nodes(t["id"][i], n_ids)
        index.files[path] = FileEntry(path, parses.languages[i], sources[i], ref, t["windows"][i], node_ids)
        graph.files[path] = FileNodes(path, _node(a["file_node"][i], n_ids), node_ids, _nodes(t["syntax"][i], n_ids),
                                      _nodes(t["calls"][i], n_ids))
        resolver.set_file(make_symbols(path, ref(), ref))
    for path, keys in meta["consulted"].items():
        keys = [intern(str(key)) for key in keys]
        resolver.consulted[path] = tuple(keys)
        for key in keys:
            resolver._readers[key].add(path)
    index.graph, index.resolver = graph, resolver
    page_out(mapped)

    alive = a["fragment_alive"].astype(bool)
    n_frags = len(alive)
    entries: list[FileEntry] = list(index.files.values())
    if len(a["window_frag"]) and not 0 <= a["window_frag"].min() <= a["window_frag"].max() < n_frags:
        raise ValueError("window fragment out of range")
    index.fragments = FragmentStore(stored=_stored_fragments(a, entries, (text_start, first_newline, newlines)))
    _take_matrices(index, _matrices(meta, a, n_frags, n_ids))
    stale = a.get("stale_rows", np.zeros(0, np.int64))  # (a file written before partial builds kept them: none)
    if stale.ndim != 1 or stale.dtype.kind != "i" or (len(stale) and not (
            0 <= stale[0] and stale[-1] < n_frags and (np.diff(stale) > 0).all())):
        raise ValueError("stale relation rows out of range")
    index.upkeep.pending_rows = stale.astype(np.int64)
    term = meta["term_index"] | {k: a[f"term_{k}"] for k in TermIndex.STATE_ARRAYS}
    if len(term["alive"]) != n_frags:
        raise ValueError("term index rows are not the fragments")
    index.term_index = TermIndex.from_state(term)  # its version was checked above, its tables are checked there
    page_out(mapped)
    known = {f.name for f in dataclasses.fields(IndexSummary)}
    index.summary = IndexSummary(**{k: v for k, v in meta["summary"].items() if k in known})


def _file_arrays(a: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    """Each file's slices of its windows, node ids and graph edges (views; its parse tables: `StoredParses`)."""
    tables = {"id": (a["node_id"], a["node_count"]), "windows": (a["window_frag"], a["window_count"]),
              "syntax": (a["syntax_edges"].reshape(-1, 2), a["syntax_count"]),
              "calls": (a["call_edges"].reshape(-1, 2), a["call_edge_count"])}
    out: dict[str, list[np.ndarray]] = {}
    for name, (values, counts) in tables.items():  # a table's views of a monorepo's 26,799 files: ~70 ms
        checkpoint()
        out[name] = split(values, counts)
    return out


def read_back(index: Index, meta: dict[str, Any], a: dict[str, np.ndarray], readers: bool = False
              ) -> Callable[[], None]:
    """The large tables of `index` read from `meta` and `a`, what `encode(index)` gave and was just written
    (`store.write_mapped`): the same values, read in place instead of the copies that building and updating made in
    memory (files' texts, syntax tables, definitions and windows, their graph nodes and edges included: a build's
    batches otherwise kept them all). The function it returns switches the index to what it read.

    With `readers` (requests read the index meanwhile) this changes only what reads the same after (each file's
    views of its tables), and the switch is three assignments (the moment a writer's lock holds), the checks of a
    large index taking seconds; without, the files' copies go first, so that the checks' tables never add to them
    (a build's peak)."""
    entries = list(index.files.values())
    t = _file_arrays(a)  # per table, each file's slice of it
    checkpoint()
    parses = StoredParses(meta, a)
    checkpoint()
    texts = split(a["text"], a["text_len"])

    # per file, what it takes (looked up now: the switch below is assignments only)
    taken = [(entry, index.graph.files[entry.path], index.resolver.files[entry.path], parses.ref(i), source,
              t["windows"][i], t["id"][i], t["syntax"][i], t["calls"][i])
             for i, (entry, source) in enumerate(paced(zip(entries, texts), 256))]

    def take_files() -> None:
        for entry, nodes, symbols, parse, source, windows, ids, syntax, calls in paced(taken, 256):
            entry.source, entry.windows, entry.parse = source, windows, parse
            symbols.parse = parse
            entry.node_ids = nodes.node_ids = ids
            nodes.syntax_edges, nodes.call_edges = syntax, calls

    if not readers:
        take_files()
        heap.trim(every_s=0)  # the texts just let go, and the copies the write was made from
    bounds = _line_bounds(a["text"], a["text_len"], a["line_count"])
    page_out(file_map(a["text"]))
    checkpoint()
    stored = FragmentStore(stored=_stored_fragments(a, entries, bounds))
    checkpoint()
    stored.keep_text_index(index.fragments)
    checkpoint()
    matrices = _matrices(meta, a, len(stored), index.graph.n_ids)
    checkpoint()
    # the vocabulary as written (the tokens added since a load among them), but for a build with batches to come:
    # it keeps the dict its next batch adds to (a dict's lookups are what tokenizing a batch costs)
    vocab = index.term_index.vocab
    batches_to_come = isinstance(vocab, dict) and index.summary.pending_files > 0
    term = {"version": TermIndex.STATE_VERSION} | ({"vocab": vocab} if batches_to_come else {})
    term_index = TermIndex.from_state(term | {k: a[f"term_{k}"] for k in TermIndex.STATE_ARRAYS})
    page_out(file_map(a["text"]))
    checkpoint()
    if readers:  # the same values read from the new file: a request reading meanwhile sees a file's old views or
        take_files()  # its new ones, equal (26,799 files' assignments held a writer's lock for 30-60 ms)
        term_index.prepare()  # what the first request after the switch would make (80-150 ms), beside them

    def switch() -> None:
        index.fragments, index.term_index = stored, term_index
        _take_matrices(index, matrices)

    return switch


def _stored_fragments(a: dict[str, np.ndarray], entries: list[FileEntry],
                      bounds: tuple[np.ndarray, np.ndarray, np.ndarray]) -> StoredFragments:
    """The fragments as stored, their locations checked, each one's text found in the file texts."""
    alive, line_counts, text_start, first_newline, newlines = a["fragment_alive"], a["line_count"], *bounds
    n_frags, n_files = len(alive), len(entries)
    locations = a["locations"].reshape(-1, 4)
    frag_col, file_col, start_col, end_col = locations.T
    if len(locations) and not (0 <= frag_col.min() and frag_col.max() < n_frags and 0 <= file_col.min()
                               and file_col.max() < n_files and 0 <= start_col.min()):
        raise ValueError("location out of range")
    checkpoint()
    if len(locations) and not ((start_col < end_col).all() and (end_col <= line_counts[file_col]).all()):
        raise ValueError("location out of range")
    checkpoint()  # (beside the language server's requests each step below is a slice: ~20-40 ms each)
    if (np.diff(frag_col) < 0).any():
        raise ValueError("locations out of order")
    loc_ptr = np.zeros(n_frags + 1, np.int64)
    np.cumsum(np.bincount(frag_col, minlength=n_frags), out=loc_ptr[1:])
    if not np.array_equal(np.diff(loc_ptr) > 0, alive):
        raise ValueError("a fragment without location, or a location of none")
    checkpoint()
    # a fragment reads its text where it is first located: lines [start, end) of a file are the bytes from the
    # start of `start` (the file's start, or after a newline) to the end of `end - 1` (a newline, or the file's end)
    first = loc_ptr[:-1][alive]
    f_file, f_start, f_end = file_col[first], start_col[first], end_col[first]
    newline_at, newlines = first_newline[f_file], np.append(newlines, 0)  # (a last one that is never chosen)
    checkpoint()
    start, end = np.zeros(n_frags, np.int64), np.zeros(n_frags, np.int64)
    start[alive] = np.where(f_start > 0, newlines[np.maximum(newline_at + f_start - 1, 0)] + 1, text_start[f_file])
    checkpoint()
    end[alive] = np.where(f_end == line_counts[f_file], text_start[f_file] + a["text_len"][f_file],
                          newlines[np.minimum(newline_at + f_end - 1, len(newlines) - 1)])
    return StoredFragments(a["text"], start, end, loc_ptr, locations, [e.path for e in entries])


class _Matrices(NamedTuple):
    relations: sp.csr_matrix  # W
    symmetric: sp.csr_matrix | None  # its symmetric, where stored
    fragment_nodes: sp.csr_matrix  # F
    fragment_sizes: np.ndarray  # F's row sums
    node_fragments: PatchedRows  # F's transpose
    costs: PatchedRows  # the graph's cost matrix


def _matrices(meta: dict[str, Any], a: dict[str, np.ndarray], n_frags: int, n_ids: int) -> _Matrices:
    """W, its symmetric (where stored), F, its transpose and the graph's cost matrix, as stored, checked."""
    relations = _csr(a, "rel", (n_frags, n_frags))
    checkpoint()  # (each matrix checked is a slice beside the language server's requests)
    symmetric = _csr(a, "sym", (n_frags, n_frags)) if meta["symmetric"] is True else None
    if symmetric is not None and symmetric.nnz < relations.nnz:
        raise ValueError("the symmetric relations hold less than the relations")
    checkpoint()
    f = _csr(a, "frag_nodes", (n_frags, n_ids))
    checkpoint()
    f_t = _csr(a, "node_frags", (n_ids, n_frags))
    if f.nnz != f_t.nnz:
        raise ValueError("F's transpose differs from F")
    checkpoint()
    # what taking them derives, made here: their rows checked sorted, F's sums (a large index's: 130 ms)
    sizes = np.asarray(f.sum(axis=1)).ravel()
    checkpoint()
    f_t = patched(f_t)
    checkpoint()
    costs = _csr(a, "costs", (n_ids, n_ids))
    checkpoint()
    return _Matrices(relations, symmetric, f, sizes, f_t, patched(costs))


def _take_matrices(index: Index, m: _Matrices) -> None:
    index.upkeep.relations = m.relations
    if m.symmetric is not None:
        index.upkeep.keep_symmetric(m.symmetric)
    index.upkeep.set_fragment_nodes(m.fragment_nodes, m.node_fragments, m.fragment_sizes)
    index.graph.keep_cost_matrix(m.costs)


def _csr(a: dict[str, np.ndarray], name: str, shape: tuple[int, int]) -> sp.csr_matrix:
    """The matrix stored as `name`_data/_indices/_indptr, checked whole (ids in range, pointers rising)."""
    if a[f"{name}_data"].dtype.kind != "f":
        raise ValueError(f"{name}: values of another type")
    data, indices, indptr = a[f"{name}_data"], a[f"{name}_indices"], a[f"{name}_indptr"]
    if data.ndim != 1 or len(data) != len(indices) or not check_compressed(indptr, shape[0], indices, shape[1]):
        raise ValueError(f"{name}: the stored matrix is inconsistent")
    m = sp.csr_matrix((data, indices, indptr), shape=shape)
    m.check_format(full_check=False)  # its index types (the ids and pointers checked above, a span at a time)
    page_out(file_map(m.data))  # what the check read
    return m


def _node(value: Any, n_ids: int) -> int:
    node = int(value)
    if not 0 <= node < n_ids:
        raise ValueError("node id out of range")
    return node


def _nodes(ids: np.ndarray, n_ids: int) -> np.ndarray:
    if ids.size and (ids.min() < 0 or ids.max() >= n_ids):
        raise ValueError("node id out of range")
    return ids.astype(np.int64, copy=False)
