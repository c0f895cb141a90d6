"""Cross-file call resolution: call sites -> the definitions they invoke.

Python is resolved through its imports (`import x`, `import x.y as z`, `from x import y`, relative imports,
re-exports through `__init__` files, `self.method`/`cls.method`, `Class.method`, class instantiation).
TypeScript/JavaScript, Java, Go and Rust go through their imports, packages, modules and typed receivers
(`graph.resolve_langs`, whose docstring states the fallback rule). C and C++ resolve by name: the file's own definitions first, then a definition whose name is unique among
the repository's files of that language; `this.m()`/`self.m()` go to the enclosing class.

Each resolution records the *keys* it consulted (module names, global names), so that when a file changes only
the files that consulted one of its keys are resolved again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from graph.facts import family
from graph.languages import CLASS_KINDS
from graph.parsing import Import, ParsedFile
from graph.resolve_langs import LangResolver, index_symbols, lang_keys

_MAX_REEXPORT_DEPTH = 4


@dataclass(slots=True)  # one per file: no dict of attributes each (a monorepo has 25,740)
class FileSymbols:
    path: str
    parse: ParsedFile | Callable[[], ParsedFile]  # its parse, or what makes it when read (a loaded index's file)
    module: tuple[str, ...]  # dotted module path from the repository root ("a/b/__init__.py" -> ("a", "b"))
    is_package: bool
    top: dict[str, int] = field(default_factory=dict)  # top-level definition name -> local node
    methods: dict[int, dict[str, int]] = field(default_factory=dict)  # class node -> method name -> node
    bindings: dict[str, Import] = field(default_factory=dict)  # import bindings (local name -> import)
    # the other languages' tables (graph.resolve_langs)
    stars: list[Import] = field(default_factory=list)  # glob imports / `export *` re-exports
    vars: dict[tuple[int, str], str] = field(default_factory=dict)  # (scope node, name) -> type info
    fields: dict[str, str] = field(default_factory=dict)  # Go/Rust "Type.field" -> type info
    type_methods: dict[str, dict[str, int]] = field(default_factory=dict)  # Go/Rust type -> method -> node
    trait_impl: set[int] = field(default_factory=set)  # Rust methods of `impl Trait for Type` blocks
    package: str = ""  # Java package, Go package name
    default: str = ""  # TypeScript: the name `export default` exports

    @property
    def parsed(self) -> ParsedFile:
        return self.parse if isinstance(self.parse, ParsedFile) else self.parse()

    def keys(self) -> set[str]:
        """The keys other files consult when they resolve into this one."""
        if self.parsed.language == "python":
            return {"mod:" + ".".join(self.module[i:]) for i in range(len(self.module))}
        if family(self.parsed.language) is not None:
            return lang_keys(self)
        lang = self.parsed.language
        return {f"name:{lang}:{name}" for _, name, _ in self.parsed.defs}


def module_path(path: str) -> tuple[tuple[str, ...], bool]:
    parts = path.split("/")
    stem = parts[-1].rsplit(".", 1)[0]
    if stem == "__init__":
        return tuple(parts[:-1]), True
    return tuple(parts[:-1]) + (stem,), False


def make_symbols(path: str, parsed: ParsedFile, stored: Callable[[], ParsedFile] | None = None) -> FileSymbols:
    """A file's symbols from its parse; `stored`: what they keep instead of it (a loaded file's, made again when
    read)."""
    module, is_package = module_path(path)
    sym = FileSymbols(path, stored or parsed, module, is_package)
    for node, name, cls in parsed.defs:
        if cls >= 0:
            sym.methods.setdefault(cls, {})[name] = node
        elif parsed.parent[node] == 0 or parsed.language != "python":
            sym.top.setdefault(name, node)
    for imp in parsed.imports:
        if parsed.language == "python":
            sym.bindings[imp.local] = imp
        elif imp.local != "*":  # globs are `stars` (index_symbols)
            sym.bindings.setdefault(imp.local, imp)
    if family(parsed.language) is not None:
        index_symbols(sym)
    return sym


# where a name leads: a definition (path, local node) or a module
_Target = tuple[Literal["def"], str, int] | tuple[Literal["mod"], FileSymbols]


class Resolver:
    """Holds every file's symbols and answers: which global definitions does this file's call sites reach?"""

    def __init__(self) -> None:
        self.files: dict[str, FileSymbols] = {}
        self._modules: dict[str, list[str]] = defaultdict(list)  # dotted suffix -> paths
        self._names: dict[str, list[str]] = defaultdict(list)  # "name:lang:n" -> paths
        # path -> keys its resolution looked at (a tuple: only read whole; a set of a few keys takes several times
        # the memory, 15 MB for a 7.6-million-line monorepo's files)
        self.consulted: dict[str, tuple[str, ...]] = {}
        self._readers: dict[str, set[str]] = defaultdict(set)  # key -> paths that consulted it
        self.changes = 0  # bumped whenever `files` changes: its readers' caches need one look, not a pass over it
        # the paths set or removed, in order, from change `changes_from` on: a reader brings its cache up to date
        # from the paths changed since it last looked (a keystroke: one path, not the 27k of a repository)
        self.changed_paths: list[str] = []
        self.changes_from = 0

    # -- maintenance -------------------------------------------------------------------------------------------
    def set_file(self, sym: FileSymbols) -> None:
        self.remove_file(sym.path)
        self.files[sym.path] = sym
        self._changed(sym.path)
        for key in sym.keys():
            (self._modules if key.startswith("mod:") else self._names)[key].append(sym.path)

    def _changed(self, path: str) -> None:
        self.changes += 1
        self.changed_paths.append(path)
        if len(self.changed_paths) > 2 * len(self.files) + 1024:  # a long session: the log stays within the files'
            self.changes_from = self.changes  # size (a reader that looked before this makes its cache again)
            self.changed_paths = []

    def changed_since(self, changes: int) -> list[str] | None:
        """The paths set or removed since change `changes`, each once; None when the log no longer reaches back
        that far."""
        if changes < self.changes_from:
            return None
        return list(dict.fromkeys(self.changed_paths[changes - self.changes_from:]))

    def remove_file(self, path: str) -> None:
        for key in self.consulted.pop(path, ()):  # what it looked at: a removed file is nobody's reader
            self._readers[key].discard(path)
        old = self.files.pop(path, None)
        if old is None:
            return
        self._changed(path)
        for key in old.keys():
            table = self._modules if key.startswith("mod:") else self._names
            table[key].remove(path)
            if not table[key]:
                del table[key]

    def readers_of(self, keys: set[str]) -> set[str]:
        out: set[str] = set()
        for key in keys:
            out |= self._readers.get(key, set())
        return out

    # -- resolution --------------------------------------------------------------------------------------------
    def resolve(self, path: str) -> list[tuple[int, str, int]]:
        """Call edges of one file: (local calling node, target file, target local node)."""
        for key in self.consulted.pop(path, ()):
            self._readers[key].discard(path)
        sym = self.files[path]
        consulted: set[str] = set()
        edges: list[tuple[int, str, int]] = []
        seen: set[tuple[int, str, int]] = set()
        python = sym.parsed.language == "python"
        lang = LangResolver(self, consulted) if family(sym.parsed.language) is not None else None
        for node, parts in sym.parsed.calls:
            if python:
                target = self._resolve_python(sym, node, parts, consulted)
            elif lang is not None:
                target = lang.call(sym, node, parts)
            else:
                target = self._resolve_by_name(sym, node, parts, consulted)
            if target is not None and (target[0] != path or target[1] != node):
                edge = (node, target[0], target[1])
                if edge not in seen:
                    seen.add(edge)
                    edges.append(edge)
        self.consulted[path] = tuple(consulted)
        for key in consulted:
            self._readers[key].add(path)
        return edges

    def _enclosing_class(self, sym: FileSymbols, node: int) -> int:
        parsed = sym.parsed
        while node > 0:
            if parsed.kinds[node] in CLASS_KINDS:
                return node
            node = int(parsed.parent[node])
        return -1

    def _resolve_by_name(self, sym: FileSymbols, node: int, parts: tuple[str, ...], consulted: set[str]):
        name = parts[-1]
        if len(parts) > 1 and parts[0] in ("this", "self"):
            cls = self._enclosing_class(sym, node)
            method = sym.methods.get(cls, {}).get(name)
            return (sym.path, method) if method is not None else None
        for _, def_name, _ in sym.parsed.defs:
            if def_name == name:
                return sym.path, sym.top.get(name, _find_def(sym, name))
        key = f"name:{sym.parsed.language}:{name}"
        consulted.add(key)
        paths = self._names.get(key, [])
        if len(paths) == 1:
            other = self.files[paths[0]]
            return other.path, other.top.get(name, _find_def(other, name))
        return None

    def _module_file(self, dotted: str, consulted: set[str]) -> FileSymbols | None:
        key = "mod:" + dotted
        consulted.add(key)
        paths = self._modules.get(key, [])
        return self.files[paths[0]] if len(paths) == 1 else None

    def _absolute(self, sym: FileSymbols, module: str) -> str:
        """`module` as written in an import of `sym`, made absolute (relative imports start with dots)."""
        if not module.startswith("."):
            return module
        dots = len(module) - len(module.lstrip("."))
        package = list(sym.module if sym.is_package else sym.module[:-1])
        package = package[: len(package) - (dots - 1)] if dots > 1 else package
        rest = module[dots:]
        return ".".join(package + ([rest] if rest else []))

    def _symbol(self, mod: FileSymbols, name: str, consulted: set[str], depth: int = 0) -> _Target | None:
        """Definition of `name` as seen from module `mod`: its own, re-exported, or a submodule."""
        if name in mod.top:
            return ("def", mod.path, mod.top[name])
        if depth >= _MAX_REEXPORT_DEPTH:
            return None
        imp = mod.bindings.get(name)
        if imp is not None:
            return self._binding(mod, imp, consulted, depth + 1)
        if mod.is_package:
            sub = self._module_file(".".join(mod.module + (name,)), consulted)
            if sub is not None:
                return ("mod", sub)
        return None

    def _binding(self, sym: FileSymbols, imp: Import, consulted: set[str], depth: int = 0) -> _Target | None:
        absolute = self._absolute(sym, imp.module)
        if imp.name is None:  # import a.b [as c]
            mod = self._module_file(absolute, consulted)
            return ("mod", mod) if mod is not None else None
        mod = self._module_file(absolute, consulted)
        if mod is not None:
            found = self._symbol(mod, imp.name, consulted, depth)
            if found is not None:
                return found
        sub = self._module_file(f"{absolute}.{imp.name}" if absolute else imp.name, consulted)
        return ("mod", sub) if sub is not None else None

    def _resolve_python(self, sym: FileSymbols, node: int, parts: tuple[str, ...], consulted: set[str]):
        head, rest = parts[0], parts[1:]
        if head in ("self", "cls") and len(rest) == 1:
            cls = self._enclosing_class(sym, node)
            method = sym.methods.get(cls, {}).get(rest[0])
            return (sym.path, method) if method is not None else None
        target: _Target | None
        if head in sym.top:
            target = ("def", sym.path, sym.top[head])
        elif head in sym.bindings:
            target = self._binding(sym, sym.bindings[head], consulted)
        else:
            return None
        for attr in rest:
            if target is None:
                return None
            if target[0] == "mod":
                target = self._symbol(target[1], attr, consulted)
            else:  # Class.method
                owner = self.files[target[1]]
                method = owner.methods.get(target[2], {}).get(attr)
                target = ("def", owner.path, method) if method is not None else None
        if target is None or target[0] != "def":
            return None
        return target[1], target[2]


def _find_def(sym: FileSymbols, name: str) -> int:
    return next(node for node, def_name, _ in sym.parsed.defs if def_name == name)
