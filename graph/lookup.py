"""Query-side symbol lookup: a dotted name as written at some line of a file -> the repository definitions it names.

`graph.resolve` turns a file's *call sites* into call edges when the file is indexed. Completing code needs more
of the same machinery at request time, for any name in the code before the cursor: `np`/`m`/`pkg.mod.f`
(imports, aliased module imports, re-exports), `self.x`/`cls.x` (the enclosing class and its bases), `Class.method`,
a module constant (`from cfg import SCALE`), the members of a class or module that start with a prefix, and a
method name that only one class of the repository defines. Python goes through its imports; TypeScript/JavaScript,
Java, Go and Rust through `graph.resolve_langs` (imports, packages, modules, typed variables at that line, methods
keyed by their type), with the same fallback rule as their call edges; C and C++ by name.

Everything is read from the resolver's per-file symbols (kept current by the index on every edit); module
constants and class headers need the file's lines, which the caller provides.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from graph.facts import family
from graph.languages import CLASS_KINDS
from graph.resolve import FileSymbols, Resolver
from graph.resolve_langs import TYPE_KINDS, Def, Inst, LangResolver, Mod, go_rank, rust_module

__all__ = ["DefRef", "ModRef", "Resolution", "SymbolLookup", "Target"]

_MAX_DEPTH = 4  # re-export hops and base-class levels followed
_IDENT = re.compile(r"[A-Za-z_]\w*")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*")


@dataclass(frozen=True, order=True)
class DefRef:
    """A definition in the repository: `node` is a local node of `path` (a definition or, for a constant, the
    statement that assigns it)."""

    path: str
    node: int
    name: str
    kind: str  # "function", "class", "method" or "constant"


@dataclass(frozen=True)
class ModRef:
    """A module of the repository (`path` is its file)."""

    path: str


Target = DefRef | ModRef


@dataclass(frozen=True)
class Resolution:
    """The targets along a dotted name, and whether its last part resolved (`complete`)."""

    targets: tuple[Target, ...]
    complete: bool
    settled: bool = False  # the head is known (a repository target or outside it): no by-name guess for the rest

    @property
    def last(self) -> Target | None:
        return self.targets[-1] if self.complete and self.targets else None
LinesOf = Callable[[str], list[str] | None]


T = TypeVar("T")
_CONSTANT = re.compile(r"^([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")  # `NAME = ...`, `NAME: type = ...`


class SymbolLookup:
    """Resolves names against a `Resolver`'s symbols; `lines_of(path)` gives a file's current lines."""

    def __init__(self, resolver: Resolver, lines_of: LinesOf) -> None:
        self.resolver = resolver
        self.lines_of = lines_of
        self._methods_of: dict[str, FileSymbols] = {}  # path -> the symbols the table holds (held, not id()s)
        self._methods: dict[str, dict[str, list[DefRef]]] = {}  # method name -> path -> its methods of that name
        self._def_info: dict[str, tuple[Any, dict[int, tuple[str, int]]]] = {}  # path -> (sym, node -> info)
        self._constants: dict[str, tuple[Any, dict[str, int]]] = {}  # path -> (sym, constant name -> node)
        self._bases: dict[tuple[DefRef, int], list[DefRef]] = {}
        self.generation = 0  # bumped when some file's symbols changed
        self._seen_changes = -1  # the resolver's `changes` the table was last brought up to

    def refresh(self) -> None:
        """Call once per request: brings the method-name table up to date with the files whose symbols changed
        (theirs only: a repository's table is large, and `forward` has thousands of methods in it)."""
        if self.resolver.changes == self._seen_changes:  # a repository's 27k files: no pass over them
            return
        files, held = self.resolver.files, self._methods_of
        paths = self.resolver.changed_since(self._seen_changes) if self._seen_changes >= 0 else None
        self._seen_changes = self.resolver.changes
        # Identity, not id(): a freed FileSymbols' address can be reused by its replacement.
        if paths is None:  # the first look, or the resolver's log no longer reaches back: a pass over the files
            gone = {p for p, sym in held.items() if files.get(p) is not sym}
            new = [sym for p, sym in files.items() if held.get(p) is not sym]
        else:
            gone = {p for p in paths if p in held and files.get(p) is not held[p]}
            new = [files[p] for p in paths if p in files and held.get(p) is not files[p]]
        if not gone and not new:
            return
        table = self._methods
        for name in {m for p in gone for cls_methods in held[p].methods.values() for m in cls_methods}:
            owners = table[name]
            for p in gone:
                owners.pop(p, None)
            if not owners:
                del table[name]
        for p in gone:
            del held[p]
            self._def_info.pop(p, None)  # what was read of its old parse
            self._constants.pop(p, None)
        for sym in new:
            for cls_methods in sym.methods.values():
                for method, node in cls_methods.items():
                    table.setdefault(method, {}).setdefault(sym.path, []).append(
                        DefRef(sym.path, node, method, "method"))
            held[sym.path] = sym
        self.generation += 1

    @staticmethod
    def _of_parse(table: dict[str, tuple[Any, T]], sym: FileSymbols, make: Callable[[FileSymbols], T]) -> T:
        """`make(sym)`, kept in `table` until the file's symbols are replaced (a file's text and nodes are large:
        read once per parse, not per lookup)."""
        cached = table.get(sym.path)
        if cached is None or cached[0] is not sym:  # identity: a replaced file's symbols are a new object
            cached = table[sym.path] = (sym, make(sym))
        return cached[1]

    # -- single definitions --------------------------------------------------------------------------------------
    def _def(self, sym: FileSymbols, node: int) -> DefRef:
        parsed = sym.parsed
        info = self._of_parse(self._def_info, sym, lambda s: {d: (n, c) for d, n, c in s.parsed.defs})
        name, cls = info.get(node, ("", -1))
        node_kind = parsed.kinds[node]
        kind = "class" if node_kind in CLASS_KINDS or node_kind in TYPE_KINDS else \
            "method" if cls >= 0 or any(node in m.values() for m in sym.type_methods.values()) else "function"
        return DefRef(sym.path, node, name, kind)

    # -- TypeScript/JavaScript, Java, Go, Rust ------------------------------------------------------------------
    def _lang_target(self, found: object) -> Target | None:
        if isinstance(found, (Def, Inst)):
            sym = self.resolver.files.get(found.path)
            return self._def(sym, found.node) if sym is not None else None
        if isinstance(found, Mod) and found.paths:
            return ModRef(found.paths[0])
        return None

    def _node_at(self, sym: FileSymbols, line: int) -> int:
        owner = sym.parsed.line_owner
        return int(owner[min(max(line, 0), len(owner) - 1)]) if len(owner) else 0

    def _resolve_lang(self, sym: FileSymbols, parts: tuple[str, ...], line: int) -> Resolution:
        lang = LangResolver(self.resolver, set())
        chain = lang.chain(sym, self._node_at(sym, line), parts)
        targets: list[Target] = []
        for found in chain:
            target = self._lang_target(found)
            if target is None:
                break
            targets.append(target)
        if not targets and len(parts) == 1 and chain and chain[0] is None:
            by_name = self._by_name(sym, parts[0])
            if by_name is not None:
                targets.append(by_name)
        return Resolution(tuple(targets), len(targets) == len(parts), settled=bool(chain) and chain[0] is not None)

    def unique_method_in(self, path: str, name: str) -> DefRef | None:
        """What `obj.name(...)` calls in `path` when the type of `obj` is unknown: Python's `unique_method`;
        the other languages' rule of `graph.resolve_langs` (one method of that name, not an override of a
        method every value has, not an implementation of a foreign trait)."""
        sym = self.resolver.files.get(path)
        if sym is None or family(sym.parsed.language) is None:
            return self.unique_method(name)
        found = LangResolver(self.resolver, set()).unique_method(sym, name)
        return self._def(self.resolver.files[found[0]], found[1]) if found is not None else None

    def _type_methods(self, ref: DefRef) -> Iterator[tuple[FileSymbols, str, int]]:
        """Go/Rust: the methods keyed by the type `ref` (its package's files, its crate's impl blocks)."""
        sym = self.resolver.files.get(ref.path)
        if sym is None:
            return
        lang = sym.parsed.language
        if lang == "go":
            folder = ref.path.rpartition("/")[0]
            files = sorted(self.resolver._names.get("godir:" + folder, []), key=go_rank)
        elif lang == "rust":
            files = sorted(self.resolver._names.get(f"rsimpl:{rust_module(ref.path)[0]}|{ref.name}", []))
        else:
            return
        for path in files:
            other = self.resolver.files[path]
            for name, node in other.type_methods.get(ref.name, {}).items():
                yield other, name, node

    def _target(self, found: object) -> Target | None:
        """A resolver answer (("def", path, node) or ("mod", FileSymbols)) as a Target."""
        if not isinstance(found, tuple):
            return None
        if found[0] == "def":
            return self._def(self.resolver.files[found[1]], found[2])
        return ModRef(found[1].path)

    def constant(self, sym: FileSymbols, name: str) -> DefRef | None:
        """A top-level assignment `name = ...` of the module (its statement node)."""
        node = self._of_parse(self._constants, sym, self._find_constants).get(name)
        return DefRef(sym.path, node, name, "constant") if node is not None else None

    def _find_constants(self, sym: FileSymbols) -> dict[str, int]:
        parsed = sym.parsed
        lines = self.lines_of(sym.path) if parsed.language == "python" else None
        if lines is None:
            return {}
        found: dict[str, int] = {}
        for node in np.flatnonzero(np.asarray(parsed.parent) == 0).tolist():
            line = int(parsed.start_line[node])
            if parsed.kinds[node] == "expression_statement" and line < len(lines):
                m = _CONSTANT.match(lines[line])
                if m is not None:
                    found.setdefault(m.group(1), node)  # the first assignment, as a scan from the top finds
        return found

    # -- members -------------------------------------------------------------------------------------------------
    def class_bases(self, ref: DefRef) -> list[DefRef]:
        """The classes `ref` derives from, as its header names them (resolved in its own file); cached until
        some file's symbols change (`refresh`)."""
        key = (ref, self.generation)
        if key not in self._bases:
            if len(self._bases) > 4096:
                self._bases.clear()
            self._bases[key] = self._class_bases(ref)
        return self._bases[key]

    def _class_bases(self, ref: DefRef) -> list[DefRef]:
        sym = self.resolver.files.get(ref.path)
        lines = self.lines_of(ref.path)
        if sym is None or lines is None or ref.kind != "class":
            return []
        start = int(sym.parsed.start_line[ref.node])
        header = " ".join(lines[start:min(start + 8, int(sym.parsed.end_line[ref.node]))])
        open_ = header.find("(")
        if open_ < 0 or header.find(":") < open_:
            return []
        depth = 0
        args: list[str] = []
        current: list[str] = []
        for ch in header[open_ + 1:]:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                if depth == 0:
                    args.append("".join(current))
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                args.append("".join(current))
                current = []
                continue
            current.append(ch)
        out = []
        for arg in args:
            arg = arg.strip()
            if not arg or "=" in arg or not _DOTTED.fullmatch(arg):
                continue  # metaclass=..., Generic[T], calls
            parts = tuple(p.strip() for p in arg.split("."))
            last = self.resolve(ref.path, parts).last
            if isinstance(last, DefRef) and last.kind == "class" and last != ref:
                out.append(last)
        return out

    def class_member(self, ref: DefRef, name: str) -> DefRef | None:
        """Method `name` of class `ref` or of one of its bases (nearest first)."""
        sym = self.resolver.files.get(ref.path)
        if sym is not None and family(sym.parsed.language) is not None:
            found = LangResolver(self.resolver, set()).member(Def(ref.path, ref.node), name)
            target = self._lang_target(found)
            return target if isinstance(target, DefRef) else None
        for cls in self._class_and_bases(ref):
            sym = self.resolver.files.get(cls.path)
            node = sym.methods.get(cls.node, {}).get(name) if sym is not None else None
            if node is not None:
                return DefRef(cls.path, node, name, "method")
        return None

    def members(self, target: Target, prefix: str = "") -> Iterator[DefRef]:
        """Definitions reachable as `target.<name>` whose name starts with `prefix` (bases' methods included)."""
        if isinstance(target, ModRef):
            sym = self.resolver.files.get(target.path)
            if sym is None:
                return
            files = [sym]
            if sym.parsed.language == "go":  # a package: every file of its folder
                folder = sym.path.rpartition("/")[0]
                files = [self.resolver.files[p] for p in sorted(self.resolver._names.get("godir:" + folder, []),
                                                                  key=go_rank)]
            for each in files:
                for name, node in each.top.items():
                    if name.startswith(prefix):
                        yield self._def(each, node)
            return
        if target.kind != "class":
            return
        for other, name, node in self._type_methods(target):
            if name.startswith(prefix):
                yield DefRef(other.path, node, name, "method")
        for cls in self._class_and_bases(target):
            sym = self.resolver.files.get(cls.path)
            for name, node in (sym.methods.get(cls.node, {}) if sym is not None else {}).items():
                if name.startswith(prefix):
                    yield DefRef(cls.path, node, name, "method")

    def _class_and_bases(self, ref: DefRef) -> Iterator[DefRef]:
        """`ref`, then its bases to _MAX_DEPTH levels, depth first in header order, each class once: a
        repository's class lattice (many bases, each with many bases) costs its size, not bases ** depth."""
        seen: set[DefRef] = set()
        stack: list[tuple[DefRef, int]] = [(ref, 0)]
        while stack:
            cls, depth = stack.pop()
            if cls in seen:
                continue
            seen.add(cls)
            yield cls
            if depth < _MAX_DEPTH:
                stack.extend((base, depth + 1) for base in reversed(self.class_bases(cls)))

    def unique_method(self, name: str) -> DefRef | None:
        """The method `name` when exactly one class of the repository defines it: what `obj.name(...)` calls when
        the type of `obj` is unknown (as of the last `refresh`)."""
        owners = self._methods.get(name, {})
        only = next(iter(owners.values())) if len(owners) == 1 else ()
        return only[0] if len(only) == 1 else None

    # -- names in a file -----------------------------------------------------------------------------------------
    def enclosing_class(self, path: str, line: int) -> DefRef | None:
        """The innermost class whose body holds `line` of `path`."""
        sym = self.resolver.files.get(path)
        if sym is None:
            return None
        parsed = sym.parsed
        best = None
        for node, _, _ in parsed.defs:
            if parsed.kinds[node] in CLASS_KINDS and parsed.start_line[node] < line < parsed.end_line[node] + 1:
                if best is None or parsed.start_line[node] >= parsed.start_line[best]:
                    best = node
        return self._def(sym, best) if best is not None else None

    def head(self, path: str, name: str, line: int, bindings: set[str] | None = None) -> Target | None:
        """What the bare `name` means at `line` of `path`: a definition of the file, an import, the class of
        `self`/`cls`. `bindings`, when given, are the import names usable there (those imported above)."""
        sym = self.resolver.files.get(path)
        if sym is None:
            return None
        if name in ("self", "cls") or (name == "this" and sym.parsed.language != "python"):
            return self.enclosing_class(path, line)
        if family(sym.parsed.language) is not None:
            return self._resolve_lang(sym, (name,), line).last
        if sym.parsed.language != "python":
            return self._by_name(sym, name)
        if name in sym.top:
            return self._def(sym, sym.top[name])
        imp = sym.bindings.get(name)
        if imp is not None and (bindings is None or name in bindings):
            found = self._target(self.resolver._binding(sym, imp, set()))
            if found is None and imp.name is not None:  # `from mod import CONSTANT`
                mod = self.resolver._module_file(self.resolver._absolute(sym, imp.module), set())
                if mod is not None:
                    found = self._member(ModRef(mod.path), imp.name)
            return found
        return None

    def _by_name(self, sym: FileSymbols, name: str) -> DefRef | None:
        """Other languages: the file's own definition, else the repository's only one of that name."""
        if name in sym.top:
            return self._def(sym, sym.top[name])
        paths = self.resolver._names.get(f"name:{sym.parsed.language}:{name}", [])
        if len(paths) == 1:
            other = self.resolver.files[paths[0]]
            node = other.top.get(name)
            if node is not None:
                return self._def(other, node)
        return None

    def _member(self, target: Target, name: str) -> Target | None:
        if isinstance(target, ModRef):
            sym = self.resolver.files.get(target.path)
            if sym is None:
                return None
            found = self._target(self.resolver._symbol(sym, name, set()))
            return found if found is not None else self.constant(sym, name)
        if target.kind == "class":
            return self.class_member(target, name)
        return None

    def resolve(self, path: str, parts: tuple[str, ...], line: int = 0,
                bindings: set[str] | None = None, types: dict[str, DefRef] | None = None) -> Resolution:
        """Every target along the dotted name `parts` written at `line` of `path`: `m.Encoder.forward` ->
        [module m, class Encoder, method forward]; stops where a link does not resolve. `types` maps a variable
        (`enc`, `self.enc`) to the class it was assigned an instance of."""
        if not parts:
            return Resolution((), False)
        sym = self.resolver.files.get(path)
        if sym is not None and family(sym.parsed.language) is not None:
            return self._resolve_lang(sym, parts, line)  # variables' types come from the parse
        chain: list[Target] = []
        current: Target | None = None
        rest = parts[1:]
        if types and len(parts) >= 2 and f"{parts[0]}.{parts[1]}" in types:  # self.enc -> Encoder
            current, rest = types[f"{parts[0]}.{parts[1]}"], parts[2:]
        elif types and parts[0] in types:
            current = types[parts[0]]
        else:
            current = self.head(path, parts[0], line, bindings)
        while current is not None:
            chain.append(current)
            if not rest:
                return Resolution(tuple(chain), True)
            current, rest = self._member(current, rest[0]), rest[1:]
        return Resolution(tuple(chain), False)
