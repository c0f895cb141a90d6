"""A loaded index's parse tables (node kinds and lines, definitions, call sites, imports, syntax facts) as its file
holds them, in columns of all files together: a file's `ParsedFile` is made from views of them when it is read, and
the last `KEPT` made are kept.

Made once per file at load (the resolver's symbols are made from it) and let go: a `ParsedFile` of views per file
held for good took 4 kB a file, 100 MB for a 7.6-million-line monorepo's 25,740 files (`repocomp bench index PATH
--loaded`). Every id and code is checked here once for all files, so a file's tables are made without checks."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from sys import intern
from typing import Any

import numpy as np

from graph.parsing import Import, ParsedFile
from graph.stored_rows import NO_ROWS, CodedView, Rows, checked_table
from repocomp.index.yielding import checkpoint

KEPT = 1024  # files' parses kept once made (an update reads its files and their neighbours' a few times each)
_COUNTS = ("node_count", "line_count", "def_count", "call_count", "fact_count", "import_count")


def _strings(values: list[Any], of: Callable[[Any], Any] = str, slice_len: int = 1 << 15) -> list[Any]:
    """`of(v)` of each of `values` (strings, or tuples of them), a slice at a time (a monorepo's million definition
    names at once: 50-100 ms of the interpreter)."""
    out: list[Any] = []
    for at in range(0, len(values), slice_len):
        checkpoint()
        out += map(of, values[at:at + slice_len])
    return out


def _str_tuple(value: Any) -> tuple[str, ...]:
    return tuple(map(str, value))


class StoredParses:
    """Every file's parse tables as stored (views of the index file), a file's made into its `ParsedFile` by
    `parsed(i)`; `ValueError` at construction when they do not fit together."""

    def __init__(self, meta: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        files = meta["files"]
        self.languages = [intern(str(f["language"])) for f in files]
        self.has_errors = [bool(f["has_errors"]) for f in files]
        counts = {name: a[name] for name in _COUNTS}
        self._ends = {name: np.cumsum(c) for name, c in counts.items()}  # arrays: a list of ints took 11 MB
        self._starts = {name: self._ends[name] - c for name, c in counts.items()}
        checkpoint()
        self.kinds = checked_table([str(v) for v in meta["kinds"]], a["node_kind"])
        checkpoint()  # (each table checked is a slice beside the language server's requests)
        self.def_names = checked_table(_strings(meta["def_names"]), a["def_name"])
        checkpoint()
        self.callees = checked_table(_strings(meta["call_parts"], _str_tuple), a["call_parts"])
        checkpoint()
        fact_strings = [str(v) for v in meta["fact_strings"]]
        self.fact_codes = [np.ascontiguousarray(c) for c in a["fact_codes"].reshape(-1, 3).T]
        for codes in self.fact_codes:
            checkpoint()
            checked_table(fact_strings, codes)
        self.fact_strings = fact_strings
        # imports become objects when a file's parse is made (the resolver's bindings hold them); names interned
        self.import_strings = [None if v is None else intern(str(v)) for v in meta["import_strings"]]
        self.import_codes = a["import_codes"].reshape(-1, 3)
        checkpoint()
        checked_table(self.import_strings, self.import_codes.ravel())
        if None in self.import_strings and (self.import_codes[:, :2] == self.import_strings.index(None)).any():
            raise ValueError("an import without a local name or module")
        self.columns = {name: a[name] for name in ("node_kind", "node_start_line", "node_end_line", "node_parent",
                                                   "line_owner", "line_len", "def_node", "def_name", "def_class",
                                                   "call_parts", "fact_node")}
        self.columns["call_node"] = a["call_node"].astype(np.int32, copy=False)
        for name, count in (("node_kind", "node_count"), ("node_start_line", "node_count"),
                            ("node_end_line", "node_count"), ("node_parent", "node_count"),
                            ("line_owner", "line_count"), ("line_len", "line_count"), ("def_node", "def_count"),
                            ("def_name", "def_count"), ("def_class", "def_count"), ("call_node", "call_count"),
                            ("call_parts", "call_count"), ("fact_node", "fact_count")):
            checkpoint()  # (a save reads them back beside the language server's requests: each check a slice)
            if len(self.columns[name]) != int(counts[count].sum()) or (counts[count] < 0).any():
                raise ValueError(f"{name}: lengths do not add up")
        if len(self.import_codes) != int(counts["import_count"].sum()) or len(self.fact_codes[0]) != int(
                counts["fact_count"].sum()):
            raise ValueError("imports or facts: lengths do not add up")
        nodes = counts["node_count"]
        for name, count, low in (("node_parent", "node_count", None), ("line_owner", "line_count", None),
                                 ("call_node", "call_count", 0), ("def_node", "def_count", 0),
                                 ("fact_node", "fact_count", 0)):
            checkpoint()
            of_file = np.repeat(nodes, counts[count])  # each entry's file's node count
            checkpoint()  # (a monorepo's 7.8 million lines: each step here 20-30 ms)
            values, has_nodes = self.columns[name], of_file > 0
            if ((values >= of_file) & has_nodes).any():
                raise ValueError(f"{name}: a node that is not its file's")
            checkpoint()
            if low is not None and (values < low).any():
                raise ValueError(f"{name}: a node that is not its file's")
            if low is not None and len(values) and (~has_nodes).any():
                raise ValueError(f"{name}: a node of a file without nodes")
        # the last parses made, oldest first: kept here, not by a cache of a bound method (whose cycle with this
        # object left a replaced index's tables for the collector's full pass)
        self._kept: OrderedDict[int, ParsedFile] = OrderedDict()
        self._keep, self._kept_lock = KEPT, threading.Lock()

    def parsed(self, i: int) -> ParsedFile:
        """File i's parse: the one kept, or made now (and kept)."""
        with self._kept_lock:
            got = self._kept.get(i)
            if got is not None:
                self._kept.move_to_end(i)
                return got
        got = self._parsed(i)
        with self._kept_lock:
            self._kept[i] = got = self._kept.get(i, got)  # made meanwhile by another thread: that one
            if len(self._kept) > self._keep:
                self._kept.popitem(last=False)
        return got

    def _span(self, count: str, i: int) -> slice:
        return slice(int(self._starts[count][i]), int(self._ends[count][i]))

    def _parsed(self, i: int) -> ParsedFile:
        c, (kind, first, second) = self.columns, self.fact_codes
        nodes, lines, defs, calls, facts, imports = (self._span(name, i) for name in _COUNTS)
        codes = self.import_codes[imports].tolist()
        return ParsedFile(
            self.languages[i], lines.stop - lines.start, CodedView(self.kinds, c["node_kind"][nodes]),
            c["node_start_line"][nodes], c["node_end_line"][nodes], c["node_parent"][nodes], c["line_owner"][lines],
            c["line_len"][lines],
            defs=Rows(c["def_node"][defs], CodedView(self.def_names, c["def_name"][defs]), c["def_class"][defs])
            if defs.stop > defs.start else NO_ROWS,
            call_nodes=c["call_node"][calls], call_parts=CodedView(self.callees, c["call_parts"][calls]),
            imports=[Import(*(self.import_strings[k] for k in row)) for row in codes],
            facts=Rows(CodedView(self.fact_strings, kind[facts]), c["fact_node"][facts],
                       CodedView(self.fact_strings, first[facts]), CodedView(self.fact_strings, second[facts]))
            if facts.stop > facts.start else NO_ROWS,
            has_errors=self.has_errors[i])

    def ref(self, i: int) -> Callable[[], ParsedFile]:
        """What a file's records hold instead of its parse: makes it (or gives the one kept) when called."""
        return functools.partial(self.parsed, i)
