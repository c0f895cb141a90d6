"""One file -> its syntax nodes (statements and definitions), line ownership, definitions, imports and call sites.

Everything here is local to the file (node indices are 0..n-1, 0 being the file's syntax root); cross-file
resolution happens in `graph.resolve`. Tree-sitter queries do the matching in C, so Python only touches the
nodes that become graph nodes and the call sites, not every token.

A file is repository input, so its syntax is bounded: the queries start no match deeper than `MAX_DEPTH`
levels (150,000 nested calls `f(f(...))` made the call query run for minutes while holding the interpreter
lock), and a file whose tree is deeper is flattened there (`ParsedFile.too_deep`; the index summary names it):
what lies deeper belongs to the nearest statement above it. Real code nests far less (the deepest file of the
benchmark repositories, 1,309 files in 8 languages, is 70 levels; the median 16). A source over `_DIRECT_BYTES`
is handed to the parser in `_CHUNK`-byte pieces, so that other threads get the interpreter lock between them
(tree-sitter's `parse` holds it for the whole parse otherwise: about 0.2 s for a 1 MB file; `_parse` says why
smaller ones are not). Nothing here recurses in Python.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tree_sitter import Node, Query, QueryCursor, Tree

from graph import facts as _facts
from graph.languages import CLASS_KINDS, DEFINITION_KINDS, parser_for, spec

MAX_DEPTH = 1_000  # syntax tree levels the graph looks at; a deeper part is flattened into its level-1000 node
_CHUNK = 16 * 1024  # bytes handed to the parser at a time (the lock can change hands between pieces)
_DIRECT_BYTES = 256 * 1024  # a source up to this size is parsed whole (see `_parse`)
_MAX_CALLEE_CHARS = 200  # a longer callee expression is not a name a call edge can resolve
_DOTTED = re.compile(r"^[A-Za-z_$][\w$]*(?:\s*(?:\.|::|->)\s*[A-Za-z_$][\w$]*)*$")
_SEP = re.compile(r"\s*(?:\.|::|->)\s*")


@dataclass(frozen=True, slots=True)  # slots: 56 bytes, not 96 (a 7.6-million-line monorepo has 500,000 imports)
class Import:
    """A binding made by an import: `local` name -> `module` as written and the optional `name` imported from it.

    Python: `module` keeps the dots of a relative import ("a.b", ".c", ".."); `name` None for `import module`.
    TypeScript/JavaScript: `module` is the specifier ("./x"); `name` "default", None for `* as m`, "*" for
    `export * from`. Java: `module` the package or class ("p.q"), `name` the class or static member, "*".
    Go: `module` the import path, `name` None ("*" for a dot import). Rust: `module` the path before the last
    segment ("crate::a"), `name` the last segment, "*" for a glob. See `graph.facts`."""

    local: str
    module: str
    name: str | None


@dataclass
class ParsedFile:
    language: str
    n_lines: int
    # a loaded index's files read the lists below from its columns: `graph.stored_rows`
    kinds: Sequence[str]  # per local node; 0 is the root
    start_line: np.ndarray  # int32, per node, first line
    end_line: np.ndarray  # int32, per node, one past the last line
    parent: np.ndarray  # int32, per node, -1 for the root
    line_owner: np.ndarray  # int32, per line: innermost node covering it
    line_len: np.ndarray  # int32, per line: length of the stripped text (what a node "owns")
    defs: Sequence[tuple[int, str, int]] = field(default_factory=list)  # (node, name, enclosing class node or -1)
    # call sites: the calling node of each (int32) and its callee's parts, a tuple shared by equal callees (a pair
    # object per call: 138 MB for the 1.8 million calls of a loaded 7.6-million-line monorepo index)
    call_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    call_parts: Sequence[tuple[str, ...]] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)
    facts: Sequence[tuple[str, int, str, str]] = field(default_factory=list)  # see graph.facts (not Python)
    has_errors: bool = False
    too_deep: bool = False  # the tree nests deeper than MAX_DEPTH: the graph keeps its first MAX_DEPTH levels

    @property
    def n_nodes(self) -> int:
        return len(self.kinds)

    @property
    def calls(self) -> list[tuple[int, tuple[str, ...]]]:
        """(calling node, callee parts) per call site, in source order."""
        return list(zip(self.call_nodes.tolist(), self.call_parts))

    def node_lengths(self) -> np.ndarray:
        """Text length owned by each node (sum of its owned lines' stripped lengths)."""
        return np.bincount(self.line_owner, weights=self.line_len, minlength=self.n_nodes).astype(np.float64)


def _text(src: bytes, node: Node) -> str:
    """The source of `node` (sliced: `node.text` re-reads a tree parsed from pieces, slowly)."""
    return src[node.start_byte:node.end_byte].decode("utf-8", "replace")


def _field(node: Node, name: str) -> Node:
    """A field the grammar always fills (where the source lacks it, tree-sitter puts a MISSING node there)."""
    child = node.child_by_field_name(name)
    assert child is not None, (node.type, name)
    return child


_JS_LANGUAGES = frozenset({"javascript", "typescript", "tsx"})
_JS_VARIABLES = frozenset({"lexical_declaration", "variable_declaration"})


def _function_variable(src: bytes, node: Node) -> str | None:
    """`const f = (x) => ...`, `let g = function () {...}`: the one variable a TypeScript or JavaScript declaration
    binds to a function, a definition as `function f` is; None for anything else."""
    declarators = [c for c in node.named_children if c.type == "variable_declarator"]
    if len(declarators) != 1:
        return None
    name, value = declarators[0].child_by_field_name("name"), declarators[0].child_by_field_name("value")
    if name is None or value is None or name.type != "identifier" or value.type not in _facts.FUNCTION_VALUES:
        return None
    return _text(src, name)


def _def_name(src: bytes, node: Node) -> str | None:
    name = node.child_by_field_name("name")
    if name is not None:
        return _text(src, name)
    decl = node.child_by_field_name("declarator")  # C/C++: int *f(int x) -> declarator chain to the identifier
    for _ in range(MAX_DEPTH):  # `int ****...f` nests as deep as it is long
        if decl is None:
            break
        if decl.type in ("identifier", "field_identifier", "qualified_identifier"):
            return _text(src, decl).split("::")[-1]
        decl = decl.child_by_field_name("declarator")
    return None


def _python_imports(src: bytes, node: Node) -> list[Import]:
    out: list[Import] = []
    if node.type == "import_statement":
        for child in node.children_by_field_name("name"):
            if child.type == "aliased_import":
                module = _text(src, _field(child, "name"))
                out.append(Import(_text(src, _field(child, "alias")), module, None))
            else:
                module = _text(src, child)
                out.append(Import(module.split(".")[0], module.split(".")[0], None))
    elif node.type == "import_from_statement":
        module_node = node.child_by_field_name("module_name")
        module = _text(src, module_node).replace(" ", "") if module_node is not None else ""
        if any(c.type == "wildcard_import" for c in node.children):
            out.append(Import("*", module, "*"))
        for child in node.children_by_field_name("name"):
            if child.type == "aliased_import":
                out.append(Import(_text(src, _field(child, "alias")), module, _text(src, _field(child, "name"))))
            else:
                out.append(Import(_text(src, child), module, _text(src, child)))
    return out


def _java_callee(src: bytes, name: Node) -> Node:
    """Java's `method_invocation` holds the method's name and its object apart: the callee is the whole call up
    to the arguments (`foo.bar`, `this.x.m`); a call on a computed object keeps its name (`a().b()` -> `b`)."""
    call = name.parent
    if call is None or call.type != "method_invocation" or call.child_by_field_name("object") is None:
        return name
    obj = call.child_by_field_name("object")
    assert obj is not None
    if obj.type in ("identifier", "this", "field_access", "scoped_identifier", "super") and \
            _DOTTED.match(_text(src, obj)) is not None:
        return call  # its text is "obj.name(args)": cut below
    return name


def _parse(language: str, source: bytes) -> Tree:
    """The syntax tree. A large source is read in pieces: between two, another thread may take the interpreter
    lock (the language server answers while it parses).

    Pieces cost memory: py-tree-sitter (0.26) keeps a reference to every object the read callback returns and never
    drops it, and the parser may still read the previous piece after asking for the next, so they cannot share one
    buffer either. So up to `_DIRECT_BYTES` (about 50 ms of holding the lock) the source is parsed whole, and only
    larger files (0.2% of the files of a 7.6M-line repository, 7% of its source) are read in pieces."""
    if len(source) <= _DIRECT_BYTES:
        return parser_for(language).parse(source)
    view = memoryview(source)

    def read(offset: int, _point: tuple[int, int]) -> bytes:
        return bytes(view[offset:offset + _CHUNK])

    return parser_for(language).parse(read)


def _deeper_than(root: Node, limit: int) -> bool:
    """Does the tree nest more than `limit` levels? Looks only inside subtrees that could: a node with `n`
    descendants reaches at most `n` levels below it, so ordinary code costs a few steps per large subtree,
    and a deep chain stops the walk at `limit`."""
    cursor = root.walk()
    depth = 0
    while True:
        if depth > limit:
            return True
        node = cursor.node
        assert node is not None  # a cursor made from a node is always on one
        if depth + node.descendant_count - 1 > limit and cursor.goto_first_child():
            depth += 1
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return False
            depth -= 1


def _captures(query: Query, root: Node, name: str) -> list[Node]:
    """`query`'s `name` captures that start within MAX_DEPTH levels (deeper subtrees are skipped, in C)."""
    cursor = QueryCursor(query)
    cursor.set_max_start_depth(MAX_DEPTH)
    return cursor.captures(root).get(name, [])


def parse_source(text: str, language: str) -> ParsedFile:
    lang = spec(language)
    source = text.encode("utf-8", "surrogatepass")
    tree = _parse(language, source)
    lines = text.split("\n")
    n_lines = len(lines)

    found = _captures(lang.node_query, tree.root_node, "node")
    spans = sorted(((n.start_byte, -n.end_byte, n) for n in found), key=lambda t: (t[0], t[1]))
    kinds = ["root"]
    starts = [0]
    ends = [n_lines]
    parents = [-1]
    stack: list[tuple[int, int]] = [(1 << 62, 0)]  # (end_byte, node index)
    node_objs: list[Node | None] = [None]
    for _start_byte, neg_end, node in spans:
        end_byte = -neg_end
        while stack[-1][0] < end_byte or (stack[-1][0] == end_byte and len(stack) > 1 and
                                           starts[stack[-1][1]] > node.start_point[0]):
            stack.pop()
        idx = len(kinds)
        kinds.append(sys.intern(node.type))  # one string per kind, not per node
        starts.append(node.start_point[0])
        ends.append(node.end_point[0] + 1)
        parents.append(stack[-1][1])
        node_objs.append(node)
        stack.append((end_byte, idx))

    start_line = np.asarray(starts, dtype=np.int32)
    end_line = np.minimum(np.asarray(ends, dtype=np.int32), n_lines)
    owner = np.zeros(n_lines, dtype=np.int32)
    for idx in range(1, len(kinds)):  # parents come before children: children overwrite
        owner[start_line[idx]:end_line[idx]] = idx
    line_len = np.fromiter((len(s.strip()) for s in lines), dtype=np.int32, count=n_lines)

    parsed = ParsedFile(language, n_lines, kinds, start_line, end_line, np.asarray(parents, dtype=np.int32),
                        owner, line_len, has_errors=tree.root_node.has_error,
                        too_deep=_deeper_than(tree.root_node, MAX_DEPTH))

    defs: list[tuple[int, str, int]] = []
    for idx in range(1, len(kinds)):
        kind = kinds[idx]
        obj = node_objs[idx]
        assert obj is not None  # only the root (index 0) has no node
        if kind in DEFINITION_KINDS:
            par = parents[idx]
            cls = par if kinds[par] in CLASS_KINDS else -1
            if kind == "type_declaration" and language == "go":  # `type (A struct{}; B = int)`: names in specs
                for spec_ in obj.named_children:
                    if spec_.type in ("type_spec", "type_alias") and (name_node := spec_.child_by_field_name("name")):
                        defs.append((idx, _text(source, name_node), -1))
                continue
            name = _def_name(source, obj)
            if name:
                defs.append((idx, name, cls))
        elif kind in _JS_VARIABLES and language in _JS_LANGUAGES:
            if name := _function_variable(source, obj):
                defs.append((idx, name, -1))
        elif language == "python" and kind in ("import_statement", "import_from_statement"):
            parsed.imports.extend(_python_imports(source, obj))

    parsed.defs = defs
    if _facts.family(language) is not None:
        index_of = {obj.id: i for i, obj in enumerate(node_objs) if obj is not None}
        index_of[tree.root_node.id] = 0
        triples, parsed.facts = _facts.extract(language, source, tree.root_node, index_of, kinds, MAX_DEPTH)
        parsed.imports = [Import(*t) for t in triples]

    # in source order: the query cursor's order of captures varies from run to run, and the index should not
    callees = sorted(_captures(lang.call_query, tree.root_node, "callee"), key=lambda n: (n.start_byte, n.end_byte))
    call_nodes: list[int] = []
    call_parts: list[tuple[str, ...]] = []
    shared: dict[tuple[str, ...], tuple[str, ...]] = {}
    for callee in callees:
        end = callee.end_byte
        if language == "java":
            callee = _java_callee(source, callee)
            if callee.type == "method_invocation":  # the callee is the call up to its arguments
                args = callee.child_by_field_name("arguments")
                end = args.start_byte if args is not None else callee.end_byte
        if end - callee.start_byte > 4 * _MAX_CALLEE_CHARS:  # `f()()()...`: each holds the rest
            continue
        text_ = source[callee.start_byte:end].decode("utf-8", "replace")
        if callee.type == "method_invocation":
            text_ = re.sub(r"\s+", "", text_)
        if len(text_) > _MAX_CALLEE_CHARS or not _DOTTED.match(text_):
            continue
        line = callee.start_point[0]
        if line < n_lines:
            parts = tuple(map(sys.intern, _SEP.split(text_)))
            call_nodes.append(int(owner[line]))
            call_parts.append(shared.setdefault(parts, parts))
    parsed.call_nodes, parsed.call_parts = np.asarray(call_nodes, np.int32), call_parts
    return parsed
