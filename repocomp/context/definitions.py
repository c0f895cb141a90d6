"""Rationale context: the repository definitions the code before the cursor can reach, ranked, with reasons.

Candidates (each source below is one entry of `SOURCES`; a candidate keeps every piece of evidence found):
- imports: names imported from the repository above the cursor (`from x import y`, `import pkg.mod as m`);
- references: every dotted name in the last `scan_lines` lines before the cursor (their last `SCAN_CHARS`
  characters), resolved through the code
  graph's symbols (`m.f`, `Class.method`, `self.method`/`cls.method`, a constant), through the classes that
  variables were assigned instances of (`self.enc = Encoder(...)` then `self.enc.forward`), `super().m`, and a
  called method name that only one class of the repository defines;
- enclosing class: the bases of the class the cursor is in;
- prefix: the identifier being typed at the cursor (`self.lay` -> `layernorm`), among what its owner offers;
- similar: what the best similar fragments shown to the model call (their resolved call edges): FragRel's
  relations applied to definitions.

Ranking (weights in `[definitions]`, chosen a priori, never fitted to evaluation sets):

    score = w_near * 1 / (1 + distance / distance_scale)   (lines from the last reference to the cursor)
          + w_imported * [imported above, not referenced yet]
          + w_prefix * [name matches the identifier at the cursor]
          + w_relation * strongest max-product path from the cursor region to the definition
          + w_similar * (share of the top similar fragments that call it)

Nothing at or after the cursor is read: the buffer is scanned up to the cursor, imports below it are ignored,
and the pipeline drops any definition of the cursor's own file that reaches the cursor line.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from graph.facts import family
from graph.languages import CLASS_KINDS
from graph.lookup import DefRef, Resolution, SymbolLookup
from graph.maxproduct import max_product_strengths
from graph.stored_rows import CodedView
from repocomp.config.schema import DefinitionsConfig

if TYPE_CHECKING:
    from repocomp.index import Index

__all__ = ["CHAIN", "Candidate", "DefinitionFinder", "Evidence", "RankedDefinition", "SOURCES", "BufferState"]

# a dotted name (`a.b.c`) not preceded by a word character or a dot
CHAIN = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_TYPED = re.compile(r"^\s*((?:self\.)?[A-Za-z_]\w*)\s*(?::[^=]*)?=\s*([A-Za-z_][\w.]*)\s*\(")
_SUPER = re.compile(r"super\(\s*\)\.([A-Za-z_]\w*)")
_AT_CURSOR = re.compile(r"([A-Za-z_][\w.]*)$")
_IMPORT_FROM = re.compile(r"^\s*from\s+\S+\s+import\s+(.*)$", re.S)
_IMPORT = re.compile(r"^\s*import\s+(.*)$", re.S)
_SKIP = frozenset(keyword.kwlist) | {"self", "cls", "super", "print", "len", "range", "isinstance"}
_MAX_PREFIX_MATCHES = 12  # members offered for one prefix (a bare `.` can offer a whole class)


@dataclass(frozen=True)
class Evidence:
    source: str  # "import", "reference", "base", "prefix", "similar", "unique-method"
    line: int | None  # 0-based line of the buffer it was seen on (None: not from the buffer)
    note: str = ""

    def describe(self) -> str:
        where = f" at line {self.line + 1}" if self.line is not None else ""
        return {
            "import": f"imported{where}",
            "reference": f"referenced{where}",
            "base": f"base of the enclosing class{where}",
            "prefix": f"prefix match{where}",
            "similar": "called by similar code",
            "unique-method": f"the only method of that name{where}",
        }.get(self.source, self.source) + (f" ({self.note})" if self.note else "")


@dataclass
class Candidate:
    ref: DefRef
    evidence: list[Evidence] = field(default_factory=list)
    last_reference: int | None = None  # 0-based line of the nearest use before the cursor
    imported_at: int | None = None
    prefix: bool = False
    similar_calls: int = 0
    relation: float = 0.0


@dataclass(frozen=True)
class RankedDefinition:
    ref: DefRef
    score: float
    features: dict[str, float]
    reasons: tuple[str, ...]


def _no_strength() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0)


@dataclass
class BufferState:
    """What one request's buffer yields, computed once and reused by every RepoCoder round."""

    path: str
    lines: list[str]  # the buffer's lines up to the cursor; the cursor line cut at the cursor
    cursor_line: int
    language: str = "python"
    candidates: dict[DefRef, Candidate] = field(default_factory=dict)
    bindings: dict[str, int] = field(default_factory=dict)  # import name -> line, imports above the cursor
    types: dict[str, DefRef] = field(default_factory=dict)  # variable -> class of the instance assigned to it
    # (reached global nodes, strengths): paths from the nodes of the lines just above the cursor
    strength: tuple[np.ndarray, np.ndarray] = field(default_factory=lambda: _no_strength())
    code: dict[int, str] = field(default_factory=dict)  # scanned line -> its code (no strings, no comment)
    lookup: SymbolLookup | None = None
    memo: dict[tuple[Any, ...], Resolution] = field(default_factory=dict)
    class_spans: list[tuple[int, int, DefRef]] = field(default_factory=list)  # classes of the file: (start, end)
    generation: int = -1  # the lookup's generation its references belong to (DefRef nodes index those parses)
    epoch: int = -1  # the index's compactions when made (`strength` holds graph node ids)

    def class_at(self, line: int) -> DefRef | None:
        """The innermost class of the file holding `line` (spans are sorted by start)."""
        best = None
        for start, end, ref in self.class_spans:
            if start > line:
                break
            if start < line < end + 1:
                best = ref
        return best

    def add(self, ref: DefRef, evidence: Evidence) -> Candidate:
        cand = self.candidates.get(ref)
        if cand is None:
            cand = self.candidates[ref] = Candidate(ref)
        if len(cand.evidence) < 8 and evidence not in cand.evidence:
            cand.evidence.append(evidence)
        line = evidence.line
        if evidence.source in ("reference", "base", "unique-method") and line is not None:
            cand.last_reference = line if cand.last_reference is None else max(cand.last_reference, line)
        elif evidence.source == "import" and line is not None:
            cand.imported_at = line if cand.imported_at is None else min(cand.imported_at, line)
        elif evidence.source == "prefix":
            cand.prefix = True
        return cand

    def resolve(self, parts: tuple[str, ...], line: int) -> Resolution:
        """`lookup.resolve` at `line`, memoized (`self`/`cls` mean the class holding that line)."""
        assert self.lookup is not None
        if self.language != "python":  # what a name means depends on the scope of the line (its variables)
            sym = self.lookup.resolver.files.get(self.path)
            scope = int(sym.parsed.line_owner[line]) if sym is not None and line < sym.parsed.n_lines else -1
            key_: tuple[Any, ...] = (parts, scope)
            if key_ not in self.memo:
                self.memo[key_] = self.lookup.resolve(self.path, parts, line)
            return self.memo[key_]
        owner = self.class_at(line) if parts[0] in ("self", "cls") else None
        key = (parts, owner)
        if key not in self.memo:
            types = self.types
            if owner is not None:
                types = {**self.types, parts[0]: owner}
            self.memo[key] = self.lookup.resolve(self.path, parts, line, set(self.bindings), types)
        return self.memo[key]


# ------------------------------------------------------------------------------------------------- sources


def _import_names(text: str) -> list[str]:
    """Local names bound by one import statement's text."""
    m = _IMPORT_FROM.match(text)
    names: list[str] = []
    if m is not None:
        for item in m.group(1).replace("(", " ").replace(")", " ").replace("\\", " ").split(","):
            words = item.split()
            if words and words[0] != "*":
                names.append(words[-1] if len(words) >= 3 and words[-2] == "as" else words[0])
        return names
    m = _IMPORT.match(text)
    if m is not None:
        for item in m.group(1).replace("\\", " ").split(","):
            words = item.split()
            if words:
                names.append(words[-1] if len(words) >= 3 and words[-2] == "as" else words[0].split(".")[0])
    return names


_IMPORT_KINDS = frozenset({"import_statement", "import_from_statement"})


def _import_nodes(kinds: Sequence[str]) -> list[int]:
    """The Python import statements among a parse's nodes (a monorepo's large file: 100,000 nodes, read by code
    where the index was loaded, not node by node)."""
    if isinstance(kinds, CodedView):
        wanted = [code for code, kind in enumerate(kinds.table) if kind in _IMPORT_KINDS]
        return np.flatnonzero(np.isin(kinds.codes, wanted)).tolist()
    return [node for node, kind in enumerate(kinds) if kind in _IMPORT_KINDS]


def _source_imports(state: BufferState, index: Any, cfg: DefinitionsConfig) -> None:
    entry = index.files.get(state.path)
    if entry is None:
        return
    parsed = entry.parsed
    if family(parsed.language) is not None:  # TypeScript, Java, Go, Rust: the import facts of the parse
        for kind, node, local, _ in parsed.facts:
            if kind == "import" and local != "*" and int(parsed.end_line[node]) <= state.cursor_line:
                state.bindings.setdefault(local, int(parsed.start_line[node]))
        for name, line in state.bindings.items():
            target = state.lookup.head(state.path, name, line) if state.lookup else None
            if isinstance(target, DefRef):
                state.add(target, Evidence("import", line))
        return
    if parsed.language != "python":
        return
    for node in _import_nodes(parsed.kinds):
        start, end = int(parsed.start_line[node]), int(parsed.end_line[node])
        if end > state.cursor_line:
            continue  # an import at or below the cursor is not there yet
        for name in _import_names(" ".join(state.lines[start:end])):
            state.bindings.setdefault(name, start)
    for name, line in state.bindings.items():
        target = state.lookup.head(state.path, name, line, set(state.bindings)) if state.lookup else None
        if isinstance(target, DefRef):
            state.add(target, Evidence("import", line))


def _scan_range(state: BufferState, cfg: DefinitionsConfig) -> range:
    return range(max(0, state.cursor_line - cfg.scan_lines), min(state.cursor_line + 1, len(state.lines)))


# characters scanned at most, the last of the range: more than the prompt shows of the code before the cursor
# (a few thousand tokens); a 990 kB minified line took seconds of Python per request
SCAN_CHARS = 1 << 16
_NOT_NAME = re.compile(r"[^\w.]")
_STRINGS = re.compile(r"(\"[^\"\n]*\"|'[^'\n]*')")
_COMMENT = re.compile(r"#[^\n]*")
_SLASH_COMMENT = re.compile(r"//[^\n]*")


def _code_lines(state: BufferState, cfg: DefinitionsConfig) -> dict[int, str]:
    """The scanned lines without string literals and comments (roughly: names in them are not references),
    one regex pass over the whole range."""
    if not state.code:
        span = _scan_range(state, cfg)
        text = "\n".join(state.lines[span.start:span.stop])
        first = span.start
        if len(text) > SCAN_CHARS:  # the end of the range only, from a name's start (a minified file's one line)
            boundary = _NOT_NAME.search(text, len(text) - SCAN_CHARS)
            cut = boundary.end() if boundary else len(text)
            first += text.count("\n", 0, cut)
            text = text[cut:]
        comment = _COMMENT if state.language == "python" else _SLASH_COMMENT
        text = comment.sub("", _STRINGS.sub('""', text))
        if state.language == "rust":
            text = text.replace("::", ".")  # `Type::new` is a dotted name like `m.f`
        state.code = dict(zip(range(first, span.stop), text.split("\n")))
    return state.code


def _source_types(state: BufferState, index: Any, cfg: DefinitionsConfig) -> None:
    """`x = Cls(...)` / `self.x = Cls(...)` above the cursor: x holds a Cls (for `x.method`). (The other
    languages' variables are typed by the parse: `graph.facts`.)"""
    if state.language != "python":
        return
    for i, code in _code_lines(state, cfg).items():
        if "=" not in code or "(" not in code:
            continue
        m = _TYPED.match(code)
        if m is None:
            continue
        parts = tuple(m.group(2).split("."))
        last = state.resolve(parts, i).last  # `cls(...)` is the enclosing class, `self.make(...)` a method
        if isinstance(last, DefRef) and last.kind == "class":
            state.types[m.group(1)] = last
            state.memo.clear()  # earlier resolutions did not know this variable's class


def _code(line: str) -> str:
    """A line without its comment and string literals (roughly: names inside strings are not references)."""
    out = re.sub(r"(\"[^\"]*\"|'[^']*')", '""', line)
    cut = out.find("#")
    return out[:cut] if cut >= 0 else out


def _add_unique_method(state: BufferState, name: str, line: int, written: str) -> None:
    assert state.lookup is not None
    found = state.lookup.unique_method_in(state.path, name)
    if found is not None:
        state.add(found, Evidence("unique-method", line, written))


def _source_references(state: BufferState, index: Any, cfg: DefinitionsConfig) -> None:
    assert state.lookup is not None
    import_lines = set(state.bindings.values())
    enclosing = state.class_at(state.cursor_line)
    sym = state.lookup.resolver.files.get(state.path)
    # names that can start a chain worth resolving (a local variable or a library module resolves to nothing)
    known = set(state.bindings) | set(sym.top if sym else ()) | {"self", "cls"} | {t.split(".")[0] for t in state.types}
    if state.language != "python" and sym is not None:  # variables, fields and parameters; this, Self, crate
        known |= {name for _, name in sym.vars} | {"this", "Self", "crate", "super"}
    for i, text in _code_lines(state, cfg).items():
        if i in import_lines:
            continue
        if i == state.cursor_line:  # the identifier being typed is the prefix source's
            m = _AT_CURSOR.search(text)
            text = text[: m.start()] if m else text
        for m in CHAIN.finditer(text):
            parts = tuple(m.group(0).split("."))
            called = text[m.end():m.end() + 1] == "("
            typed = state.language != "python" and parts[0][:1].isupper()  # a type or class name: resolvable
            if parts[0] not in known and not typed:
                if called and len(parts) >= 2 and parts[0] not in _SKIP:  # `obj.step(...)`, obj of unknown type
                    _add_unique_method(state, parts[-1], i, m.group(0))
                continue
            found = state.resolve(parts, i)
            own = 1 if parts[0] in ("self", "cls") and ".".join(parts[:2]) not in state.types else 0
            for target in found.targets[own:]:  # the enclosing class itself is not news
                if isinstance(target, DefRef):
                    state.add(target, Evidence("reference", i, m.group(0)))
            if called and len(parts) >= 2 and not found.complete and not found.settled:
                _add_unique_method(state, parts[-1], i, m.group(0))
        if enclosing is not None and "super(" in text:
            for m in _SUPER.finditer(text):
                for base in state.lookup.class_bases(enclosing):
                    member = state.lookup.class_member(base, m.group(1))
                    if member is not None:
                        state.add(member, Evidence("reference", i, f"super().{m.group(1)}"))
                        break


def _source_bases(state: BufferState, index: Any, cfg: DefinitionsConfig) -> None:
    assert state.lookup is not None
    enclosing = state.class_at(state.cursor_line)
    if enclosing is None:
        return
    entry = index.files.get(state.path)
    line = int(entry.parsed.start_line[enclosing.node]) if entry is not None else None
    for base in state.lookup.class_bases(enclosing):
        state.add(base, Evidence("base", line, f"class {enclosing.name}"))


def _source_prefix(state: BufferState, index: Any, cfg: DefinitionsConfig) -> None:
    assert state.lookup is not None
    if state.cursor_line >= len(state.lines):
        return
    m = _AT_CURSOR.search(_code(state.lines[state.cursor_line]))
    if m is None:
        return
    parts = m.group(1).split(".")
    prefix, owner = parts[-1], tuple(parts[:-1])
    found: Iterable[DefRef]
    if owner:
        owner_target = state.resolve(owner, state.cursor_line).last
        if owner_target is None:
            return
        found = state.lookup.members(owner_target, prefix)
    else:
        if not prefix:
            return
        sym = state.lookup.resolver.files.get(state.path)
        names = [n for n in (*state.bindings, *(sym.top if sym else ())) if n.startswith(prefix)]
        found = (t for n in names if isinstance(t := state.lookup.head(state.path, n, state.cursor_line,
                                                                      set(state.bindings)), DefRef))
    for k, ref in enumerate(found):
        if k >= _MAX_PREFIX_MATCHES:
            break
        state.add(ref, Evidence("prefix", state.cursor_line, f"{m.group(1)} -> {ref.name}"))


# A source adds evidence to the request's candidates; order matters only in that types come before references.
SOURCES: tuple[tuple[str, Callable[[BufferState, Any, DefinitionsConfig], None]], ...] = (
    ("imports", _source_imports),
    ("types", _source_types),
    ("references", _source_references),
    ("bases", _source_bases),
    ("prefix", _source_prefix),
)


# ------------------------------------------------------------------------------------------------- finder


class DefinitionFinder:
    """Finds and ranks definitions for a cursor in an `Index` (needs its resolver, files, graph and symbol lookup)."""

    def __init__(self, index: Index, config: DefinitionsConfig, window: int = 20,
                 cutoff: float = 0.1, max_reach: int = 256) -> None:
        self.index = index
        self.config = config
        self.window = window
        self.cutoff = cutoff
        self.max_reach = max_reach
        self.lookup: SymbolLookup = index.lookup  # the index's, shared by every finder over it

    @staticmethod
    def supports(index: Any) -> bool:
        return all(hasattr(index, a) for a in ("resolver", "files", "graph", "lookup"))

    def buffer_state(self, path: str, lines: Sequence[str], cursor_line: int, col: int) -> BufferState:
        """Candidates from the buffer before (line, col); the index must already hold this buffer."""
        self.lookup.refresh()
        cut = list(lines[: cursor_line + 1])
        if cursor_line < len(cut):
            cut[cursor_line] = cut[cursor_line][:col]
        entry = self.index.files.get(path)
        state = BufferState(path, cut, cursor_line, language=entry.parsed.language if entry else "python",
                            lookup=self.lookup, generation=self.lookup.generation, epoch=self.index.epoch)
        sym = self.lookup.resolver.files.get(path)
        if path not in self.index.files or sym is None:
            return state
        parsed = sym.parsed
        state.class_spans = sorted((int(parsed.start_line[n]), int(parsed.end_line[n]), self.lookup._def(sym, n))
                                   for n, _, _ in parsed.defs if parsed.kinds[n] in CLASS_KINDS)
        for _, source in SOURCES:
            source(state, self.index, self.config)
        state.strength = self._region_strength(path, cursor_line)
        return state

    def is_current(self, state: BufferState) -> bool:
        """False once some file's symbols were replaced after `state` was made (another request synced a buffer
        while this one awaited the model): its references would point into parses that are gone; or once the
        index renumbered its nodes."""
        self.lookup.refresh()
        return state.generation == self.lookup.generation and state.epoch == self.index.epoch

    def _region_strength(self, path: str, cursor_line: int) -> tuple[np.ndarray, np.ndarray]:
        """Global node -> strongest max-product path from a node of the lines just above the cursor."""
        if self.config.w_relation <= 0:
            return _no_strength()
        entry = self.index.files[path]
        parsed = entry.parsed
        start, end = max(0, cursor_line - self.window), min(cursor_line, parsed.n_lines)
        if start >= end:
            return _no_strength()
        keep = parsed.line_len[start:end] > 0
        sources = np.unique(entry.node_ids[parsed.line_owner[start:end][keep]])
        if len(sources) == 0:
            return _no_strength()
        strengths = max_product_strengths(self.index.graph.cost_matrix(), sources, self.cutoff, self.max_reach)
        return strengths.indices, strengths.data  # reached node, strength (a node may appear once per source)

    def _global_node(self, ref: DefRef) -> int | None:
        entry = self.index.files.get(ref.path)
        return int(entry.node_ids[ref.node]) if entry is not None and ref.node < len(entry.node_ids) else None

    def similar_calls(self, spans: Iterable[tuple[str, int, int]]) -> dict[DefRef, int]:
        """How many of the given shown spans (path, start, end) call each definition (resolved call edges)."""
        graph = self.index.graph
        counts: dict[DefRef, int] = {}
        for path, start, end in spans:
            entry, nodes = self.index.files.get(path), graph.files.get(path)
            if entry is None or nodes is None or len(nodes.call_edges) == 0:
                continue
            owned = entry.node_ids[np.unique(entry.parsed.line_owner[start:end])]
            calls = nodes.call_edges[np.isin(nodes.call_edges[:, 0], owned)]
            seen: set[DefRef] = set()
            for dst in np.unique(calls[:, 1]).tolist():
                owner = graph.owner[dst]
                target = self.index.files.get(owner)
                sym = self.lookup.resolver.files.get(owner)
                if target is None or sym is None:
                    continue
                local = dst - int(target.node_ids[0])
                ref = self.lookup._def(sym, local)
                if ref.name and ref not in seen:
                    seen.add(ref)
                    counts[ref] = counts.get(ref, 0) + 1
        return counts

    def rank(self, state: BufferState, similar: Sequence[tuple[str, int, int]] = ()) -> list[RankedDefinition]:
        """Candidates of `state` plus what the top similar spans call, best first."""
        cfg = self.config
        top = list(similar)[: cfg.similar_fragments]
        calls = self.similar_calls(top) if top and cfg.w_similar > 0 else {}
        pool = dict(state.candidates)
        for ref, _n in calls.items():
            if ref not in pool:
                pool[ref] = Candidate(ref)
        nodes = {ref: self._global_node(ref) for ref in pool}
        reached, strengths = state.strength
        hit = np.isin(reached, np.fromiter((n for n in nodes.values() if n is not None), np.int64))
        relation_of: dict[int, float] = {}
        for node, value in zip(reached[hit].tolist(), strengths[hit].tolist()):
            relation_of[node] = max(value, relation_of.get(node, 0.0))
        ranked = []
        for ref, cand in pool.items():
            n_calls = calls.get(ref, 0)
            ref_node = nodes[ref]
            relation = relation_of.get(ref_node, 0.0) if ref_node is not None else 0.0
            distance = None if cand.last_reference is None else max(0, state.cursor_line - cand.last_reference)
            features = {
                "near": 0.0 if distance is None else 1.0 / (1.0 + distance / cfg.distance_scale),
                "imported": 1.0 if cand.imported_at is not None and cand.last_reference is None else 0.0,
                "prefix": 1.0 if cand.prefix else 0.0,
                "relation": float(relation),
                "similar": n_calls / max(1, len(top)),
            }
            score = (cfg.w_near * features["near"] + cfg.w_imported * features["imported"]
                     + cfg.w_prefix * features["prefix"] + cfg.w_relation * features["relation"]
                     + cfg.w_similar * features["similar"])
            reasons = [e.describe() for e in sorted(cand.evidence, key=lambda e: -(e.line or -1))[:4]]
            if n_calls:
                reasons.append(f"called by {n_calls} of the top {len(top)} similar fragments")
            if relation > 0:
                reasons.append(f"graph path {relation:.2f} from the cursor region")
            ranked.append(RankedDefinition(ref, round(score, 6), features, tuple(reasons)))
        ranked.sort(key=lambda r: (-r.score, -(pool[r.ref].last_reference or -1), r.ref))
        return ranked
