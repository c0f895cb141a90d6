"""Call resolution for TypeScript/JavaScript, Java, Go and Rust: through imports, packages, modules and types.

What each language resolves (the syntax facts come from `graph.facts`):

- TypeScript/JavaScript: relative ES imports (`import {a as b}`, default, `* as m`), a package's imports of its
  own subpaths (`zod/v4/core`: the one module whose path ends with `v4/core`), re-exports (`export {a} from`,
  `export * from`, followed up to `_MAX_HOPS` files), specifiers tried as `.ts .tsx .js .mjs .jsx .cjs .d.ts`,
  then `index.*`; `this.m()`, `this.field.m()`, `x.m()` where `x` is typed (`x: Foo`, `new Foo()`, a parameter
  property, a class field); `Class.staticMethod()`.
- Java: `package`, single-type, wildcard and static imports, same-package classes; methods through typed fields,
  locals and parameters (`Foo f; f.bar()`), `this.x.m()`, `Class.staticMethod()`, `new Foo()`, nested classes;
  a bare `m()` looks in the enclosing classes first.
- Go: the package of a file is its folder (every file of it sees the others' names); `import alias "path"` maps to
  the repository folder that ends the path (the longest such suffix; the repository root only when the path has a
  host part and the root package's name ends it); methods are keyed by their receiver type (`func (c *Command)
  Foo()`), found through receivers, parameters, `var c T`, `c := &T{}`, `c := NewT()` and struct fields.
  A name defined in several files of one folder (build tags: `x_linux.go`, `x_windows.go`) resolves to the file
  without a GOOS/GOARCH suffix, else the first by path.
- Rust: modules from file paths (`src/a/b.rs` and `src/a/b/mod.rs` are `crate::a::b`), `use` trees with aliases
  and globs, `crate::`/`super::`/`self::`, `pub use` re-exports; methods keyed by the `impl`'s type (inherent
  impls first, then trait impls), reached by `Type::m()`, `Self::m()`, `self.m()`, `self.field.m()` and typed
  locals (`let x: T`, `let x = T::new()`, `T { .. }`).

When a name cannot be resolved this way, the rule is (the same for the four languages):

- a bare call `f()` falls back to today's by-name rule (the file's own definition, else the one definition of
  that name in the repository's files of the language), unless `f` is imported from outside the repository;
- a call on a receiver, `x.m()`, follows what is known of `x`. When `x` is an import from outside the repository,
  a variable whose declared or constructed type is not a repository type (`const params = []`, `let v: Vec<u8>`,
  `let (tx, rx) = mpsc::channel()`), or a capitalized name that no repository file defines (`Object.keys`,
  `Vec::new`), the call is *external* and gets no edge. When `x` is known and lacks `m`, no edge either.
- Only when nothing is known of `x` (an untyped parameter, a chained expression, a variable the syntax does not
  declare) may the call resolve by name, and only to a *method* that is the one definition named `m` in the
  repository's files of that language. A method implementing a trait that is not the repository's own
  (`impl Clone for Error { fn clone }`) never qualifies: every type outside the repository has that method too;
  nor does one overriding a method the language gives every value (`toString`, `equals`, Go's `Error`).

No list of "common" method names is used: `push`, `clone`, `send`, `is` are excluded by what the code says about
the receiver, not by their spelling.

Every table lookup goes through `Resolver._lookup`, which records the key it consulted, so the incremental
update re-resolves exactly the files that looked at a changed file's keys (`FileSymbols.keys`).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graph.facts import family

if TYPE_CHECKING:
    from graph.resolve import FileSymbols, Resolver

_MAX_SUBPATH = 3  # segments of a bare specifier's subpath matched against the repository's module paths
_MAX_HOPS = 6  # re-export hops, field and type steps followed
_TS_EXTS = (".ts", ".tsx", ".js", ".mjs", ".jsx", ".cjs", ".mts", ".cts")
_GO_PLATFORMS = frozenset(
    "aix android darwin dragonfly freebsd hurd illumos ios js linux nacl netbsd openbsd plan9 solaris wasip1 "
    "windows zos 386 amd64 arm arm64 loong64 mips mipsle mips64 mips64le ppc64 ppc64le riscv64 s390x wasm "
    "unix".split())


class External:
    """Marks a name known to lie outside the repository (no edge, no by-name fallback)."""


EXTERNAL = External()


@dataclass(frozen=True)
class Def:
    path: str
    node: int


@dataclass(frozen=True)
class Inst:
    """A value whose type is the repository type defined at (path, node) and named `name`."""

    path: str
    node: int
    name: str


@dataclass(frozen=True)
class Mod:
    """A module: TypeScript/Rust one file, Go a folder (its files), Java a package."""

    paths: tuple[str, ...]
    lang: str
    name: str = ""  # Java package name


Target = Def | Inst | Mod | External | None


# -- what a file provides -----------------------------------------------------------------------------------------
def ts_stems(path: str) -> list[str]:
    stem = path
    if stem.endswith(".d.ts"):
        stem = stem[:-5]
    else:
        stem = stem.rsplit(".", 1)[0] if "." in stem.rsplit("/", 1)[-1] else stem
    out = [stem]
    if stem.rsplit("/", 1)[-1] == "index":
        out.append(stem.rpartition("/")[0])
    return out


def rust_module(path: str) -> tuple[str, tuple[str, ...]]:
    """(crate root folder, module path) of a Rust file: `a/src/x/y.rs` -> ("a/src", ("x", "y"))."""
    parts = path.split("/")
    dirs, stem = parts[:-1], parts[-1].rsplit(".", 1)[0]
    if "src" in dirs:
        i = len(dirs) - 1 - dirs[::-1].index("src")
        root, mods = "/".join(dirs[: i + 1]), dirs[i + 1:]
    else:
        root, mods = "/".join(dirs), []
    if stem not in ("mod", "lib", "main") or (not mods and stem == "mod"):
        mods = mods + [stem] if stem not in ("lib", "main") else mods
    return root, tuple(mods)


def go_rank(path: str) -> tuple[int, str]:
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    tokens = stem.split("_")[1:]
    return (1 if tokens and (tokens[-1] in _GO_PLATFORMS or tokens[-1] == "test") else 0, path)


def lang_keys(sym: FileSymbols) -> set[str]:
    parsed = sym.parsed
    lang = parsed.language
    fam = family(lang)
    keys = {f"name:{lang}:{name}" for _, name, _ in parsed.defs}
    if fam == "ts":
        stems = ts_stems(sym.path)
        keys |= {"ts:" + s for s in stems}
        for stem in stems:  # a package's own subpath imports (`zod/v4/core`) end with these
            segs = stem.split("/")
            keys |= {"tssub:" + "/".join(segs[-k:]) for k in range(1, min(_MAX_SUBPATH, len(segs)) + 1)}
    elif fam == "java":
        keys.add("jpkg:" + sym.package)
        for name in sym.top:
            keys.add(f"jcls:{sym.package}.{name}" if sym.package else f"jcls:{name}")
    elif fam == "go":
        keys.add("godir:" + sym.path.rpartition("/")[0])
    elif fam == "rust":
        root, mods = rust_module(sym.path)
        keys.add(f"rsmod:{root}|{'::'.join(mods)}")
        keys |= {f"rsimpl:{root}|{t}" for t in sym.type_methods}
    return keys


def index_symbols(sym: FileSymbols) -> None:
    """Fill the language tables of `sym` from its parse (defs, facts)."""
    parsed = sym.parsed
    owners: dict[int, tuple[str, str]] = {}
    for kind, node, a, b in parsed.facts:
        if kind == "owner":
            owners[node] = (a, b)
        elif kind == "var":
            sym.vars.setdefault((node, a), b)
        elif kind == "field":
            sym.fields.setdefault(a, b)
        elif kind == "package":
            sym.package = a
        elif kind == "default":
            sym.default = a
    for imp in parsed.imports:
        if imp.local == "*":
            sym.stars.append(imp)
    for node, name, cls in parsed.defs:
        if cls >= 0 and cls in owners:  # Rust impl block
            sym.type_methods.setdefault(owners[cls][0], {}).setdefault(name, node)
            if owners[cls][1]:
                sym.trait_impl.add(node)
        elif cls < 0 and node in owners:  # Go method
            sym.type_methods.setdefault(owners[node][0], {}).setdefault(name, node)
            if sym.top.get(name) == node:
                del sym.top[name]
    if parsed.language == "rust":  # a trait's own (default) methods: keyed by the trait
        for node, name, cls in parsed.defs:
            parent = int(parsed.parent[node])
            if cls < 0 and parent > 0 and parsed.kinds[parent] == "trait_item":
                trait = _name_of(sym, parent)
                sym.type_methods.setdefault(trait, {}).setdefault(name, node)
                if sym.top.get(name) == node:
                    del sym.top[name]
    if family(parsed.language) == "go":
        for node, name, cls in parsed.defs:
            if node not in owners and cls < 0:
                sym.top.setdefault(name, node)


# -- resolution ---------------------------------------------------------------------------------------------------
class LangModules:
    """Where a module or package named in an import is, per language (TypeScript paths and package subpaths, Java
    packages, Go import paths and package folders, Rust module paths), from the resolver's name tables; each key
    looked up is recorded in `consulted` (what an update must re-resolve when it changes)."""

    def __init__(self, resolver: Resolver, consulted: set[str]) -> None:
        self.r = resolver
        self.consulted = consulted
        self._sorted: dict[str, list[str]] = {}  # godir key -> its files, preferred first

    def paths(self, key: str) -> list[str]:
        self.consulted.add(key)
        return self.r._names.get(key, [])

    def files(self, key: str) -> list[FileSymbols]:
        return [self.r.files[p] for p in self.paths(key)]

    def ts_module(self, sym: FileSymbols, spec: str) -> Mod | None:
        if not spec.startswith("."):
            return self.ts_package_module(spec)
        target = posixpath.normpath(posixpath.join(posixpath.dirname(sym.path), spec))
        for ext in (*_TS_EXTS, ".d.ts"):
            if target.endswith(ext) and ext != ".d.ts":
                target = target[: -len(ext)]
                break
        paths = self.paths("ts:" + target)
        if not paths:
            return None
        best = min(paths, key=_ts_rank)
        return Mod((best,), "ts")

    def ts_package_module(self, spec: str) -> Mod | None:
        """A bare specifier with a subpath, `pkg/a/b` (`@scope/pkg/a/b`): the one module of the repository whose
        path ends with `a/b` (a package importing itself by name, a monorepo's sibling package); a bare package
        name, or a subpath that several modules end with, is not resolved."""
        segs = spec.split("/")
        sub = segs[2 if spec.startswith("@") else 1:]
        if not sub or len(sub) > _MAX_SUBPATH or any(s in ("", ".", "..") for s in sub):
            return None
        last = sub[-1]
        for ext in _TS_EXTS:
            if last.endswith(ext):
                sub[-1] = last[: -len(ext)]
                break
        paths = self.paths("tssub:" + "/".join(sub))
        if not paths or len({ts_stems(p)[0].removesuffix("/index") for p in paths}) != 1:
            return None
        return Mod((min(paths, key=_ts_rank),), "ts")

    def java_package(self, name: str) -> Mod | None:
        paths = self.paths("jpkg:" + name)
        return Mod(tuple(paths), "java", name) if paths else None

    def go_import(self, path: str) -> Target:
        segs = path.split("/")
        for k in range(1, len(segs)):
            folder = "/".join(segs[k:])
            paths = self.paths("godir:" + folder)
            if paths and "." in segs[0]:
                return Mod(tuple(sorted(paths, key=go_rank)), "go")
        if len(segs) > 1 and "." in segs[0]:
            paths = self.paths("godir:")
            if paths and any(self.r.files[p].package == segs[-1] for p in paths):
                return Mod(tuple(sorted(paths, key=go_rank)), "go")
        return None

    def go_files(self, folder: str) -> list[str]:
        """The files of a Go package, those without a platform suffix first (memoized per resolver)."""
        key = "godir:" + folder
        if key not in self._sorted:
            self._sorted[key] = sorted(self.paths(key), key=go_rank)
        return self._sorted[key]

    def go_package_name(self, sym: FileSymbols, name: str) -> Target:
        return self.go_in_package(sym.path.rpartition("/")[0], name, exclude=sym.path)

    def go_in_package(self, folder: str, name: str, exclude: str = "") -> Target:
        paths = self.go_files(folder)
        return self.go_in_package_paths(tuple(p for p in paths if p != exclude), name)

    def go_in_package_paths(self, paths: tuple[str, ...], name: str) -> Target:
        for path in paths:
            sym = self.r.files.get(path)
            if sym is not None and name in sym.top:
                return Def(path, sym.top[name])
        return None

    def rust_mod(self, root: str, mods: tuple[str, ...]) -> Mod | None:
        paths = self.paths(f"rsmod:{root}|{'::'.join(mods)}")
        return Mod((sorted(paths)[0],), "rust") if paths else None



class LangResolver:
    """Resolution for one call or dotted name of a file (holds the keys consulted)."""

    def __init__(self, resolver: Resolver, consulted: set[str]) -> None:
        self.r = resolver
        self.consulted = consulted  # shared by everything this instance answers (and its memo)
        self.modules = LangModules(resolver, consulted)
        self._depth = 0  # variable types being resolved now (`x := x.Next()` would loop)
        self._memo: dict[tuple[str, int, str], Target] = {}
        self._bound: dict[tuple[str, object], Target] = {}  # (file, import) -> where it leads

    # -- entry points ------------------------------------------------------------------------------------------
    def call(self, sym: FileSymbols, node: int, parts: tuple[str, ...]) -> tuple[str, int] | None:
        chain = self.chain(sym, node, parts)
        last = chain[-1] if len(chain) == len(parts) else None
        if isinstance(last, Def):
            return last.path, last.node
        if len(chain) == len(parts) or any(isinstance(t, External) for t in chain):
            return None
        if chain and chain[0] is not None:
            return None  # the receiver is known and lacks the name
        if len(parts) == 1:
            return self.by_name(sym, parts[0])
        return self.unique_method(sym, parts[-1])

    def chain(self, sym: FileSymbols, node: int, parts: tuple[str, ...]) -> list[Target]:
        """The targets along `parts` as far as they resolve (a None or EXTERNAL ends the list)."""
        out: list[Target] = []
        target = self.head(sym, node, parts[0], called=len(parts) == 1)
        out.append(target)
        for attr in parts[1:]:
            if target is None or isinstance(target, External):
                break
            target = self.member(target, attr)
            out.append(target)
        while out and out[-1] is None and len(out) > 1:
            out.pop()
        return out

    # -- heads ---------------------------------------------------------------------------------------------------
    def head(self, sym: FileSymbols, node: int, name: str, called: bool = False) -> Target:
        fam = family(sym.parsed.language)
        parsed = sym.parsed
        if name in ("this", "self", "Self"):
            return self._self_type(sym, node, instance=name != "Self")
        if fam == "java" and called:  # a bare m(): the enclosing classes' methods first
            at = node
            while at > 0:
                if at in sym.methods and name in sym.methods[at]:
                    return Def(sym.path, sym.methods[at][name])
                at = int(parsed.parent[at])
        info = self._var(sym, node, name)
        if info is not None:
            return self._info_target(sym, node, info)
        if name in sym.top:
            return Def(sym.path, sym.top[name])
        if fam == "java":
            nested = self._nested_class(sym, node, name)
            if nested is not None:
                return nested
        imp = sym.bindings.get(name)
        if imp is not None:
            found = self.binding(sym, imp)
            return found if found is not None else EXTERNAL
        if fam == "go":
            found = self.modules.go_package_name(sym, name)
            if found is not None:
                return found
        elif fam == "java":
            found = self._java_visible(sym, name)
            if found is not None:
                return found
        elif fam == "rust":
            root, mods = rust_module(sym.path)
            if name == "crate":
                return self.modules.rust_mod(root, ())
            if name == "super":
                return self.modules.rust_mod(root, mods[:-1])
            child = self.modules.rust_mod(root, mods + (name,))
            if child is not None:
                return child
            for star in sym.stars:
                mod = self.binding(sym, star)
                if isinstance(mod, Mod):
                    found = self.member(mod, name)
                    if isinstance(found, Def):
                        return found
        if name[:1].isupper() and not called:  # a type name: the repository's only one, or outside it
            paths = self.modules.paths(f"name:{sym.parsed.language}:{name}")
            if not paths:
                return EXTERNAL
            tops = [(p, self.r.files[p].top[name]) for p in paths if name in self.r.files[p].top]
            if fam == "go":
                tops.sort(key=lambda t: go_rank(t[0]))
                if tops and len({p.rpartition("/")[0] for p, _ in tops}) == 1:
                    tops = tops[:1]
            if len(tops) == 1:
                return Def(*tops[0])
        return None

    def _self_type(self, sym: FileSymbols, node: int, instance: bool) -> Target:
        parsed = sym.parsed
        at = node
        while at > 0:
            kind = parsed.kinds[at]
            if kind == "impl_item":
                owner = next((a for k, n, a, _ in parsed.facts if k == "owner" and n == at), None)
                if owner is None:
                    return None
                found = self.head(sym, at, owner)
                if isinstance(found, Def):
                    return Inst(found.path, found.node, owner)  # the impl's own spelling
                return EXTERNAL if isinstance(found, External) else None
            if kind in ("class_declaration", "abstract_class_declaration", "enum_declaration",
                        "record_declaration", "interface_declaration", "trait_item"):
                name = next((n for d, n, _ in parsed.defs if d == at), "")
                return Inst(sym.path, at, name)
            at = int(parsed.parent[at])
        return None

    def _var(self, sym: FileSymbols, node: int, name: str) -> str | None:
        if not sym.vars:
            return None
        at = node
        parent = sym.parsed.parent
        while at > 0:
            info = sym.vars.get((at, name))
            if info is not None:
                return info
            at = int(parent[at])
        return sym.vars.get((0, name))

    def _info_target(self, sym: FileSymbols, node: int, info: str, depth: int = 0) -> Target:
        if info.startswith("X:") or not info:
            return EXTERNAL if info else None
        key = (sym.path, node, info)
        if key in self._memo:
            return self._memo[key]
        if self._depth >= _MAX_HOPS:
            return None
        self._memo[key] = None  # a cycle back here means: unknown
        self._depth += 1
        try:
            found = self._info_target_uncached(sym, node, info, depth)
        finally:
            self._depth -= 1
        self._memo[key] = found
        return found

    def _info_target_uncached(self, sym: FileSymbols, node: int, info: str, depth: int) -> Target:
        if info.startswith("T:"):
            return self._type(sym, node, info[2:], depth)
        if info.startswith("C:") and depth < _MAX_HOPS:
            parts = tuple(p for p in info[2:].split(".") if p)
            if not parts:
                return None
            chain = self.chain(sym, node, parts)
            if any(isinstance(t, External) for t in chain):
                return EXTERNAL
            last = chain[-1] if len(chain) == len(parts) else None
            if isinstance(last, Def):
                return self._constructed(sym, last, parts, chain)
        return None

    def _constructed(self, sym: FileSymbols, last: Def, parts: tuple[str, ...], chain: list[Target]) -> Target:
        """The value of a call to `last`: a class or struct itself, `T::new()`-style associated functions
        (Rust: `Type::f()` where Type is a repository type), `NewT()` in Go."""
        owner = self.r.files[last.path]
        kind = owner.parsed.kinds[last.node]
        name = parts[-1]
        if kind in TYPE_KINDS:
            return self._inst(last)
        prev = chain[-2] if len(chain) >= 2 else None
        if owner.parsed.language == "rust" and isinstance(prev, Def) and \
                (name in ("new", "default") or name.startswith(("new_", "with_", "from"))):
            return self._inst(prev)
        if owner.parsed.language == "go" and name.startswith("New") and len(name) > 3:
            found = self.modules.go_in_package(owner.path.rpartition("/")[0], name[3:])
            if isinstance(found, Def):
                return self._inst(found)
        return None

    def _type(self, sym: FileSymbols, node: int, dotted: str, depth: int = 0) -> Target:
        parts = tuple(p for p in dotted.split(".") if p)
        if not parts or depth >= _MAX_HOPS:
            return None
        chain = self.chain(sym, node, parts)
        if any(isinstance(t, External) for t in chain):
            return EXTERNAL
        last = chain[-1] if len(chain) == len(parts) else None
        if isinstance(last, Def):
            return self._inst(last)
        if isinstance(last, Inst):
            return last
        return EXTERNAL if len(chain) == len(parts) or chain[0] is not None else None

    def _inst(self, target: Def) -> Inst:
        """A value of the type defined at `target` (its own name, not an alias it was imported as)."""
        owner = self.r.files[target.path]
        return Inst(target.path, target.node, _name_of(owner, target.node))

    # -- members -------------------------------------------------------------------------------------------------
    def member(self, target: Target, attr: str) -> Target:
        if isinstance(target, Mod):
            return self._module_member(target, attr, 0)
        if isinstance(target, (Def, Inst)):
            owner = self.r.files.get(target.path)
            if owner is None:
                return None
            kind = owner.parsed.kinds[target.node]
            if kind not in TYPE_KINDS:
                return None
            name = target.name if isinstance(target, Inst) else _name_of(owner, target.node)
            return self._type_member(owner, target.node, name, attr, isinstance(target, Inst))
        return None

    def _type_member(self, owner: FileSymbols, node: int, name: str, attr: str, instance: bool) -> Target:
        fam = family(owner.parsed.language)
        if fam in ("java", "ts"):
            method = owner.methods.get(node, {}).get(attr)
            if method is not None:
                return Def(owner.path, method)
            info = owner.vars.get((node, attr))
            if info is not None:
                return self._info_target(owner, node, info)
            return None
        if fam == "go":
            folder = owner.path.rpartition("/")[0]
            files = [self.r.files[p] for p in self.modules.go_files(folder)]
            for f in files:
                method = f.type_methods.get(name, {}).get(attr)
                if method is not None:
                    return Def(f.path, method)
            info = owner.fields.get(f"{name}.{attr}")
            if info is not None:
                return self._info_target(owner, node, info)
            return None
        if fam == "rust":
            root, _ = rust_module(owner.path)
            files = self.modules.files(f"rsimpl:{root}|{name}")
            found = [(m in f.trait_impl, f.path != owner.path, f.path, m) for f in files
                     if (m := f.type_methods.get(name, {}).get(attr)) is not None]
            if found:
                _, _, path, method = min(found)
                return Def(path, method)
            for trait in sorted({b for f in files for k, n, a, b in f.parsed.facts if k == "owner" and a == name
                                 and b}):  # a default method of a trait the type implements
                for f in self.modules.files(f"rsimpl:{root}|{trait}"):
                    method = f.type_methods.get(trait, {}).get(attr)
                    if method is not None and f.parsed.kinds[int(f.parsed.parent[method])] == "trait_item":
                        return Def(f.path, method)
            info = owner.fields.get(f"{name}.{attr}")
            if info is not None and instance:
                return self._info_target(owner, node, info)
        return None

    def _module_member(self, mod: Mod, name: str, depth: int) -> Target:
        if mod.lang == "go":
            return self.modules.go_in_package_paths(mod.paths, name)
        if mod.lang == "java":
            return self._java_class(f"{mod.name}.{name}")
        for path in mod.paths:
            sym = self.r.files.get(path)
            if sym is None:
                continue
            found = self.symbol(sym, name, depth)
            if found is not None:
                return found
        return None

    def symbol(self, sym: FileSymbols, name: str, depth: int = 0) -> Target:
        """`name` as a module file exports it: its own definition, an import or re-export, a glob re-export."""
        fam = family(sym.parsed.language)
        if fam == "ts" and name == "default" and sym.default:
            name = sym.default
        if name in sym.top:
            return Def(sym.path, sym.top[name])
        if depth >= _MAX_HOPS:
            return None
        imp = sym.bindings.get(name)
        if imp is not None:
            found = self.binding(sym, imp, depth + 1)
            return found if found is not None else None
        if fam == "rust":
            root, mods = rust_module(sym.path)
            child = self.modules.rust_mod(root, mods + (name,))
            if child is not None:
                return child
        for star in sym.stars:
            mod = self.binding(sym, star, depth + 1)
            if isinstance(mod, Mod):
                found = self._module_member(mod, name, depth + 1)
                if found is not None and not isinstance(found, External):
                    return found
        return None

    # -- imports -------------------------------------------------------------------------------------------------
    def binding(self, sym: FileSymbols, imp, depth: int = 0) -> Target:
        """Where an import of `sym` leads (None: outside the repository or not found); memoized."""
        key = (sym.path, imp)
        if key not in self._bound:
            self._bound[key] = None  # an import cycle means: not found
            self._bound[key] = self._binding(sym, imp, depth)
        return self._bound[key]

    def _binding(self, sym: FileSymbols, imp, depth: int) -> Target:
        fam = family(sym.parsed.language)
        if fam == "ts":
            mod = self.modules.ts_module(sym, imp.module)
            if mod is None:
                return None
            if imp.name is None or imp.name == "*":
                return mod
            return self._module_member(mod, imp.name, depth)
        if fam == "java":
            cls = self._java_class(f"{imp.module}.{imp.name}") if imp.name != "*" else None
            if cls is not None:
                return cls
            if imp.name == "*":
                return self.modules.java_package(imp.module) or self._java_class(imp.module)
            outer = self._java_class(imp.module)  # static import or nested class
            return self.member(outer, imp.name) if outer is not None else None
        if fam == "go":
            return self.modules.go_import(imp.module)
        if fam == "rust":
            base = self._rust_path(sym, imp.module.split("::"), depth)
            if base is None or imp.name is None or imp.name == "*":
                return base
            return self.member(base, imp.name) if not isinstance(base, External) else None
        return None

    def _java_class(self, dotted: str) -> Target:
        paths = self.modules.paths("jcls:" + dotted)
        if paths:
            owner = self.r.files[paths[0]]
            name = dotted.rsplit(".", 1)[-1]
            return Def(owner.path, owner.top[name]) if name in owner.top else None
        outer, _, name = dotted.rpartition(".")
        if outer and "." in outer:
            paths = self.modules.paths("jcls:" + outer)
            if paths:
                return self.member(self._java_class(outer), name)
        return None

    def _java_visible(self, sym: FileSymbols, name: str) -> Target:
        found = self._java_class(f"{sym.package}.{name}" if sym.package else name)
        if found is not None:
            return found
        for star in sym.stars:
            found = self._java_class(f"{star.module}.{name}")
            if found is not None:
                return found
        return None

    def _nested_class(self, sym: FileSymbols, node: int, name: str) -> Target:
        at = node
        while at > 0:
            inner = sym.methods.get(at, {}).get(name)
            if inner is not None and sym.parsed.kinds[inner] in TYPE_KINDS:
                return Def(sym.path, inner)
            at = int(sym.parsed.parent[at])
        return None

    def _rust_path(self, sym: FileSymbols, segs: list[str], depth: int) -> Target:
        """A `use` path's module part, from `sym`'s module."""
        root, mods = rust_module(sym.path)
        first, rest = segs[0], segs[1:]
        base: tuple[str, ...] | None = None
        if first == "crate":
            base = ()
        elif first == "self":
            base = mods
        elif first == "super":
            up = 1
            while rest and rest[0] == "super":
                up, rest = up + 1, rest[1:]
            base = mods[: max(0, len(mods) - up)]
        target: Target = None
        if base is not None:
            for k in range(len(rest), -1, -1):  # the longest module path that is a file, then its members
                target = self.modules.rust_mod(root, base + tuple(rest[:k]))
                if target is not None:
                    rest = rest[k:]
                    break
            if target is None:
                return None
        else:
            target = self.modules.rust_mod(root, mods + (first,))
            if target is None and first in sym.top:
                target = Def(sym.path, sym.top[first])
            if target is None and depth < _MAX_HOPS and first in sym.bindings:
                target = self.binding(sym, sym.bindings[first], depth + 1)
            if target is None:
                target = self.modules.rust_mod(root, (first,))  # 2015-style path from the crate root
            if target is None:
                return EXTERNAL  # another crate (std, a dependency)
        for seg in rest:
            if target is None or isinstance(target, External):
                return target
            target = self.member(target, seg)
        return target

    # -- fallbacks -----------------------------------------------------------------------------------------------
    def by_name(self, sym: FileSymbols, name: str) -> tuple[str, int] | None:
        for node, def_name, _ in sym.parsed.defs:
            if def_name == name:
                return sym.path, sym.top.get(name, node)
        paths = self.modules.paths(f"name:{sym.parsed.language}:{name}")
        if family(sym.parsed.language) == "go" and len(paths) > 1 and \
                len({p.rpartition("/")[0] for p in paths}) == 1:
            paths = sorted(paths, key=go_rank)[:1]
        if len(paths) == 1:
            other = self.r.files[paths[0]]
            found = other.top.get(name)
            return other.path, found if found is not None else next(n for n, d, _ in other.parsed.defs if d == name)
        return None

    def unique_method(self, sym: FileSymbols, name: str) -> tuple[str, int] | None:
        paths = self.modules.paths(f"name:{sym.parsed.language}:{name}")
        if len(paths) != 1:
            return None
        other = self.r.files[paths[0]]
        nodes = [(n, c) for n, d, c in other.parsed.defs if d == name]
        if len(nodes) != 1:
            return None
        node, cls = nodes[0]
        is_method = cls >= 0 or any(node in m.values() for m in other.type_methods.values())
        if not is_method or other.parsed.kinds[node] in TYPE_KINDS:
            return None
        if name in _EVERY_VALUE_HAS.get(family(sym.parsed.language) or "", ()):
            return None  # overrides a method every value of the language has
        if node in other.trait_impl:
            trait = next((b for k, n, _, b in other.parsed.facts if k == "owner" and n == cls), "")
            if not self.modules.paths(f"name:{sym.parsed.language}:{trait}"):
                return None  # implements a trait from outside the repository
        return other.path, node


# The methods the language gives every value (Java's java.lang.Object, JavaScript's Object.prototype, Go's
# built-in `error` interface): a repository method of that name overrides one that every receiver has.
_EVERY_VALUE_HAS = {
    "java": frozenset({"toString", "equals", "hashCode", "getClass", "clone", "finalize", "notify", "notifyAll",
                       "wait"}),
    "ts": frozenset({"toString", "toLocaleString", "valueOf", "hasOwnProperty", "isPrototypeOf",
                     "propertyIsEnumerable", "constructor"}),
    "go": frozenset({"Error"}),
}

TYPE_KINDS = frozenset({"class_declaration", "abstract_class_declaration", "interface_declaration",
                         "enum_declaration", "record_declaration", "struct_item", "enum_item", "trait_item",
                         "type_declaration", "class_definition"})


def _name_of(sym: FileSymbols, node: int) -> str:
    return next((n for d, n, _ in sym.parsed.defs if d == node), "")


def _ts_rank(path: str) -> tuple[int, int, str]:
    index = 1 if ts_stems(path)[0].endswith("/index") else 0
    if path.endswith(".d.ts"):
        ext = len(_TS_EXTS)
    else:
        suffix = "." + path.rsplit(".", 1)[-1]
        ext = _TS_EXTS.index(suffix) if suffix in _TS_EXTS else len(_TS_EXTS) + 1
    return index, ext, path
