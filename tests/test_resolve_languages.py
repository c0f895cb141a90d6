"""Call resolution for TypeScript, Java, Go and Rust (import-aware, graph.resolve_langs) and C and C++ (by name,
the file's own first; `this->m()` in the enclosing class), on small real parses."""

from __future__ import annotations

from graph.languages import language_for
from graph.parsing import parse_source
from graph.resolve import Resolver, make_symbols


def _resolver(files: dict[str, str]) -> Resolver:
    resolver = Resolver()
    for path, text in files.items():
        language = language_for(path)
        assert language is not None
        resolver.set_file(make_symbols(path, parse_source(text, language)))
    return resolver


def _edges(resolver: Resolver, path: str) -> dict[tuple[int, str], tuple[str, str]]:
    """(line of the call, callee as written) -> (target file, target name) for the calls of `path` that resolve."""
    sym = resolver.files[path]
    calls: dict[int, list[str]] = {}
    for node, parts in sym.parsed.calls:
        calls.setdefault(node, []).append(".".join(parts))
    out = {}
    for node, dst, dst_node in resolver.resolve(path):
        target = resolver.files[dst]
        name = next(n for d, n, _ in target.parsed.defs if d == dst_node)
        line = int(sym.parsed.start_line[node]) + 1
        for callee in calls[node]:
            out[(line, callee)] = (dst, name)
    return out


def _targets(resolver: Resolver, path: str) -> set[tuple[str, str]]:
    return set(_edges(resolver, path).values())


# ----------------------------------------------------------------------------------------------- TypeScript

TS = {
    "src/util.ts": "export function helper() { return 1; }\nexport class Builder { push(x) { return x; } }\n",
    "src/other.ts": "export function helper() { return 2; }\n",
    "src/lib/index.ts": "export * from './impl';\nexport { helper as aliased } from '../util';\n",
    "src/lib/impl.ts": "export function deep() { return 3; }\nexport default class Impl { run() {} }\n",
    "src/main.ts": (
        "import { helper as h } from './util';\n"
        "import * as lib from './lib';\n"
        "import Impl from './lib/impl.js';\n"
        "import { Thing } from 'external-pkg';\n"
        "class Service {\n"
        "  private impl: Impl;\n"
        "  constructor(private builder: Builder2) {}\n"
        "  go() {\n"
        "    h();\n"
        "    lib.deep();\n"
        "    lib.aliased();\n"
        "    this.impl.run();\n"
        "    const params = [];\n"
        "    params.push(1);\n"
        "    Thing.is(params);\n"
        "    const i = new Impl();\n"
        "    i.run();\n"
        "  }\n"
        "}\n"
    ),
}


def test_typescript_imports_reexports_and_typed_fields():
    resolver = _resolver(TS)
    edges = _edges(resolver, "src/main.ts")
    assert edges[(9, "h")] == ("src/util.ts", "helper")  # aliased import, not other.ts's helper
    assert edges[(10, "lib.deep")] == ("src/lib/impl.ts", "deep")  # index.ts + export *
    assert edges[(11, "lib.aliased")] == ("src/util.ts", "helper")  # export {a as b} from
    assert edges[(12, "this.impl.run")] == ("src/lib/impl.ts", "run")  # default import, typed field
    assert edges[(16, "Impl")] == ("src/lib/impl.ts", "Impl")
    assert edges[(17, "i.run")] == ("src/lib/impl.ts", "run")
    assert (14, "params.push") not in edges  # a local array: not Builder.push
    assert (15, "Thing.is") not in edges  # an import from outside the repository


def test_typescript_functions_held_by_constants_resolve_in_and_across_files():
    resolver = _resolver({
        "src/math.ts": ("export const add = (a: number, b: number): number => a + b;\n"
                        "export const twice = function (x: number) {\n  return add(x, x);\n};\n"),
        "src/main.ts": ("import { add, twice as double } from './math';\n"
                        "export function go() {\n  const n = add(1, 2);\n  return double(n);\n}\n"),
    })
    assert _edges(resolver, "src/math.ts") == {(3, "add"): ("src/math.ts", "add")}
    assert _edges(resolver, "src/main.ts") == {(3, "add"): ("src/math.ts", "add"),
                                               (4, "double"): ("src/math.ts", "twice")}


def test_typescript_unknown_receiver_resolves_only_to_a_unique_method():
    resolver = _resolver({
        "a.ts": "export class A { only() {} push() {} }\nexport class B { push() {} }\n",
        "b.ts": "function f(x) { x.only(); x.push(); }\n",
    })
    assert _targets(resolver, "b.ts") == {("a.ts", "only")}


def test_typescript_incremental_update_of_an_exported_name():
    resolver = _resolver(TS)
    assert _edges(resolver, "src/main.ts")[(9, "h")] == ("src/util.ts", "helper")
    keys = resolver.files["src/util.ts"].keys()
    new_text = "export function helper2() { return 1; }\nexport class Builder { push(x) { return x; } }\n"
    resolver.set_file(make_symbols("src/util.ts", parse_source(new_text, "typescript")))
    readers = resolver.readers_of(keys | resolver.files["src/util.ts"].keys())
    assert "src/main.ts" in readers
    assert (9, "h") not in _edges(resolver, "src/main.ts")
    resolver.set_file(make_symbols("src/util.ts", parse_source(TS["src/util.ts"], "typescript")))
    assert "src/main.ts" in resolver.readers_of(resolver.files["src/util.ts"].keys())
    assert _edges(resolver, "src/main.ts")[(9, "h")] == ("src/util.ts", "helper")


# ----------------------------------------------------------------------------------------------------- Java

JAVA = {
    "src/com/x/util/Foo.java": "package com.x.util;\npublic class Foo {\n  public void bar() {}\n"
                               "  public static Foo make() { return new Foo(); }\n}\n",
    "src/com/x/other/Foo.java": "package com.x.other;\npublic class Foo {\n  public void bar() {}\n}\n",
    "src/com/x/util/Helper.java": "package com.x.util;\npublic class Helper {\n  public static void help() {}\n}\n",
    "src/com/x/util/Statics.java": "package com.x.util;\npublic class Statics {\n  public static void st() {}\n}\n",
    "src/com/x/app/Main.java": (
        "package com.x.app;\n"
        "import com.x.util.Foo;\n"
        "import com.x.util.*;\n"
        "import static com.x.util.Statics.st;\n"
        "import java.util.List;\n"
        "public class Main {\n"
        "  private final Foo foo;\n"
        "  void run(Foo param, List<String> names) {\n"
        "    foo.bar();\n"
        "    this.foo.bar();\n"
        "    Foo local = Foo.make();\n"
        "    local.bar();\n"
        "    Helper.help();\n"
        "    st();\n"
        "    names.add(\"x\");\n"
        "    param.bar();\n"
        "    new Foo();\n"
        "    go();\n"
        "  }\n"
        "  void go() {}\n"
        "}\n"
    ),
}


def test_java_imports_fields_statics_and_wildcards():
    edges = _edges(_resolver(JAVA), "src/com/x/app/Main.java")
    foo = "src/com/x/util/Foo.java"
    assert edges[(9, "foo.bar")] == (foo, "bar")  # typed field; not com.x.other.Foo
    assert edges[(10, "this.foo.bar")] == (foo, "bar")
    assert edges[(11, "Foo.make")] == (foo, "make")
    assert edges[(12, "local.bar")] == (foo, "bar")
    assert edges[(13, "Helper.help")] == ("src/com/x/util/Helper.java", "help")  # wildcard import
    assert edges[(14, "st")] == ("src/com/x/util/Statics.java", "st")  # static import
    assert (15, "names.add") not in edges  # java.util.List
    assert edges[(16, "param.bar")] == (foo, "bar")
    assert edges[(17, "Foo")] == (foo, "Foo")
    assert edges[(18, "go")] == ("src/com/x/app/Main.java", "go")


def test_java_same_package_is_visible_without_import():
    resolver = _resolver({**JAVA, "src/com/x/util/User.java":
                          "package com.x.util;\nclass User {\n  void u() { Helper.help(); }\n}\n"})
    assert _targets(resolver, "src/com/x/util/User.java") == {("src/com/x/util/Helper.java", "help")}


# ------------------------------------------------------------------------------------------------------- Go

GO = {
    "go.mod": "",
    "command.go": (
        "package cobra\n"
        "import (\n  \"fmt\"\n  u \"github.com/spf13/cobra/internal/util\"\n)\n"
        "type Command struct {\n  parent *Command\n  flags *Flags\n}\n"
        "type Runner interface {\n  Run()\n}\n"
        "func (c *Command) Execute() error {\n"
        "  c.Validate()\n"
        "  c.parent.Validate()\n"
        "  c.flags.Parse()\n"
        "  u.Trim()\n"
        "  fmt.Println()\n"
        "  hidden()\n"
        "  x := NewFlags()\n"
        "  x.Parse()\n"
        "  var y Command\n"
        "  y.Validate()\n"
        "  return nil\n"
        "}\n"
    ),
    "validate.go": "package cobra\nfunc (c *Command) Validate() {}\n",
    "flags.go": "package cobra\ntype Flags struct{}\nfunc NewFlags() *Flags { return &Flags{} }\n"
                "func (f *Flags) Parse() {}\n",
    "hidden_linux.go": "//go:build linux\npackage cobra\nfunc hidden() {}\n",
    "hidden_windows.go": "//go:build windows\npackage cobra\nfunc hidden() {}\n",
    "internal/util/trim.go": "package util\nfunc Trim() {}\n",
    "other/trim.go": "package other\nfunc Trim() {}\nfunc (o *Other) Parse() {}\ntype Other struct{}\n",
}


def test_go_packages_receivers_fields_and_build_tags():
    resolver = _resolver({p: t for p, t in GO.items() if p.endswith(".go")})
    edges = _edges(resolver, "command.go")
    assert edges[(14, "c.Validate")] == ("validate.go", "Validate")  # receiver type, another file
    assert edges[(15, "c.parent.Validate")] == ("validate.go", "Validate")  # struct field
    assert edges[(16, "c.flags.Parse")] == ("flags.go", "Parse")  # not other.Other.Parse
    assert edges[(17, "u.Trim")] == ("internal/util/trim.go", "Trim")  # aliased import
    assert edges[(19, "hidden")][1] == "hidden"  # defined per platform: either file
    assert edges[(19, "hidden")][0] in ("hidden_linux.go", "hidden_windows.go")
    assert edges[(21, "x.Parse")] == ("flags.go", "Parse")  # x := NewFlags()
    assert edges[(23, "y.Validate")] == ("validate.go", "Validate")
    assert (18, "fmt.Println") not in edges


def test_go_struct_and_interface_types_are_definitions():
    resolver = _resolver({p: t for p, t in GO.items() if p.endswith(".go")})
    names = {n for _, n, _ in resolver.files["command.go"].parsed.defs}
    assert {"Command", "Runner", "Execute"} <= names
    assert "Execute" in resolver.files["command.go"].type_methods["Command"]
    assert "Execute" not in resolver.files["command.go"].top


# ----------------------------------------------------------------------------------------------------- Rust

RUST = {
    "src/lib.rs": "mod value;\nmod de;\npub mod error;\npub use crate::value::Value as Val;\n",
    "src/value/mod.rs": (
        "pub struct Value { inner: Inner }\n"
        "pub struct Inner;\n"
        "impl Inner { pub fn poke(&self) {} }\n"
        "impl Value {\n"
        "    pub fn new() -> Self { Value { inner: Inner } }\n"
        "    pub fn send(&self) {}\n"
        "    pub fn touch(&self) {\n        self.send();\n        Self::new();\n        self.inner.poke();\n    }\n"
        "}\n"
    ),
    "src/error.rs": "pub struct Error;\nimpl Clone for Error {\n    fn clone(&self) -> Self { Error }\n}\n"
                    "pub fn make() -> Error { Error }\n",
    "src/de.rs": (
        "use crate::Val as V;\n"
        "use super::error::{self, make as build};\n"
        "use std::sync::mpsc;\n"
        "fn run(v: &V, s: String) {\n"
        "    v.send();\n"
        "    build();\n"
        "    error::make();\n"
        "    let (tx, rx) = mpsc::channel();\n"
        "    tx.send(1);\n"
        "    s.clone();\n"
        "    let w = V::new();\n"
        "    w.touch();\n"
        "    Vec::new();\n"
        "}\n"
    ),
}


def test_rust_use_trees_reexports_and_impl_methods():
    resolver = _resolver(RUST)
    edges = _edges(resolver, "src/de.rs")
    assert edges[(5, "v.send")] == ("src/value/mod.rs", "send")  # pub use ... as, parameter type
    assert edges[(6, "build")] == ("src/error.rs", "make")  # use {a as b}
    assert edges[(7, "error.make")] == ("src/error.rs", "make")  # use super::error::{self}
    assert (9, "tx.send") not in edges  # a std channel
    assert (10, "s.clone") not in edges  # not `impl Clone for Error`
    assert edges[(11, "V.new")] == ("src/value/mod.rs", "new")
    assert edges[(12, "w.touch")] == ("src/value/mod.rs", "touch")  # let w = V::new()
    assert (13, "Vec.new") not in edges
    inner = _edges(resolver, "src/value/mod.rs")
    assert inner[(8, "self.send")] == ("src/value/mod.rs", "send")
    assert inner[(9, "Self.new")] == ("src/value/mod.rs", "new")
    assert inner[(10, "self.inner.poke")] == ("src/value/mod.rs", "poke")


def test_rust_unknown_receiver_skips_external_trait_methods():
    resolver = _resolver({**RUST, "src/x.rs": "fn f(a: impl Sized) { let b = a; b.clone(); b.touch(); }\n"})
    assert _targets(resolver, "src/x.rs") == {("src/value/mod.rs", "touch")}


def test_rust_trait_default_methods_and_object_methods():
    resolver = _resolver({
        "src/math.rs": "pub trait Math {\n    fn limbs(&self);\n    fn imul(&mut self) { self.limbs(); }\n}\n"
                       "pub struct Big;\nimpl Math for Big {\n    fn limbs(&self) {}\n}\n",
        "src/use.rs": "use crate::math::Big;\nfn f() {\n    let b = Big::new();\n    b.imul();\n}\n",
    })
    assert _edges(resolver, "src/use.rs")[(4, "b.imul")] == ("src/math.rs", "imul")
    java = _resolver({"A.java": "class A {\n  public String toString() { return \"\"; }\n}\n",
                      "B.java": "class B {\n  void f(Object o, Thing t) {\n    t.x().toString();\n  }\n}\n"})
    assert _targets(java, "B.java") == set()


# ------------------------------------------------------------------------------------ through the index


def _index_targets(index, path: str) -> set[tuple[str, str]]:
    graph = index.graph
    out = set()
    for _src, dst in graph.files[path].call_edges.tolist():
        owner = graph.owner[dst]
        local = dst - int(index.files[owner].node_ids[0])
        out.add((owner, next(n for d, n, _ in index.files[owner].parsed.defs if d == local)))
    return out


def test_index_updates_an_importers_edges_and_round_trips_the_facts(tmp_path):
    from repocomp.config.schema import Config
    from repocomp.index import Index

    for rel, text in {**TS, **{p: t for p, t in GO.items() if p.endswith(".go")}}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    index = Index.build(tmp_path, Config())
    assert ("src/util.ts", "helper") in _index_targets(index, "src/main.ts")
    index.update_file("src/util.ts", text=TS["src/util.ts"].replace("helper", "helper2"))
    assert ("src/util.ts", "helper") not in _index_targets(index, "src/main.ts")
    assert not any(name.startswith("helper") for _, name in _index_targets(index, "src/main.ts"))
    index.update_file("src/util.ts", text=TS["src/util.ts"])
    assert ("src/util.ts", "helper") in _index_targets(index, "src/main.ts")

    index.save()
    loaded = Index.load(tmp_path, Config())
    assert loaded.files["command.go"].parsed.facts == index.files["command.go"].parsed.facts
    for path in ("src/main.ts", "command.go"):
        assert loaded.resolver.resolve(path) == index.resolver.resolve(path)
    assert ("validate.go", "Validate") in _index_targets(loaded, "command.go")


def test_typescript_package_subpath_import():
    resolver = _resolver({**TS, "src/v4/core/index.ts": "export function parse() {}\n",
                          "test/a.test.ts": "import * as core from 'zod/v4/core';\nimport * as x from 'other';\n"
                                            "core.parse();\nx.helper();\n"})
    assert _targets(resolver, "test/a.test.ts") == {("src/v4/core/index.ts", "parse")}


# ------------------------------------------------------------------------------------------------- C and C++

C = {
    "include/shapes.h": "#ifndef SHAPES_H\n#define SHAPES_H\nint area(int width, int height);\n"
                        "int perimeter(int width, int height);\n#endif\n",
    "src/shapes.c": '#include "shapes.h"\n\nint area(int width, int height) {\n    return width * height;\n}\n\n'
                    "int perimeter(int width, int height) {\n    return 2 * (width + height);\n}\n",
    "src/log_a.c": "void log_line(const char *s) {}\n",
    "src/log_b.c": "void log_line(const char *s) {}\n",
    "src/other.c": "static int twice(int x) {\n    return x + x;\n}\n",
    "src/main.c": (
        "#include <stdio.h>\n"
        '#include "shapes.h"\n'
        "\n"
        "static int twice(int x) {\n"
        "    return 2 * x;\n"
        "}\n"
        "\n"
        "int main(void) {\n"
        "    int a = area(2, 3);\n"
        '    log_line("x");\n'
        '    printf("%d\\n", twice(a));\n'
        "    return perimeter(a, 1);\n"
        "}\n"
    ),
}


def test_c_calls_resolve_to_the_definition_in_another_file_not_the_headers_prototype():
    resolver = _resolver(C)
    assert resolver.files["include/shapes.h"].parsed.defs == []  # a prototype declares, it defines nothing
    targets = _targets(resolver, "src/main.c")
    assert {("src/shapes.c", "area"), ("src/shapes.c", "perimeter")} <= targets  # declared in the header
    assert ("src/main.c", "twice") in targets and ("src/other.c", "twice") not in targets  # the file's own first
    assert not any(name == "log_line" for _, name in targets)  # defined in two files: no edge
    assert {path for path, _ in targets} == {"src/shapes.c", "src/main.c"}


def test_c_calls_resolve_through_the_index(tmp_path):
    from repocomp.config.schema import Config
    from repocomp.index import Index

    for rel, text in C.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    index = Index.build(tmp_path, Config())
    assert _index_targets(index, "src/main.c") == {("src/shapes.c", "area"), ("src/shapes.c", "perimeter"),
                                                   ("src/main.c", "twice")}


CPP = {
    "src/shape.hpp": "#pragma once\nclass Rectangle {\npublic:\n    Rectangle(int w, int h);\n    int area() const;\n"
                     "    int scaled(int k) const;\nprivate:\n    int w_, h_;\n};\n",
    "src/shape.cpp": '#include "shape.hpp"\n\nRectangle::Rectangle(int w, int h) : w_(w), h_(h) {}\n\n'
                     "int Rectangle::area() const {\n    return w_ * h_;\n}\n\n"
                     "int Rectangle::scaled(int k) const {\n    return k * area();\n}\n",
    "src/counter.hpp": "#pragma once\nclass Counter {\npublic:\n    void increment() { count_ += 1; }\n"
                       "    void reset() { this->clear(); }\n    void clear() { count_ = 0; }\n    int count_ = 0;\n};\n",
    "src/timer.hpp": "#pragma once\nclass Timer {\npublic:\n    void clear() {}\n};\n",
    "src/main.cpp": (
        '#include "shape.hpp"\n'
        '#include "counter.hpp"\n'
        "\n"
        "int main() {\n"
        "    Counter c;\n"
        "    c.increment();\n"
        "    Rectangle* p = new Rectangle(4, 5);\n"
        "    return p->scaled(2);\n"
        "}\n"
    ),
}


def test_cpp_calls_resolve_to_class_methods_defined_in_another_file():
    resolver = _resolver(CPP)
    assert _targets(resolver, "src/main.cpp") == {
        ("src/counter.hpp", "increment"),  # defined in the class body, in a header
        ("src/shape.cpp", "Rectangle"),  # `new Rectangle(...)`: the constructor, defined out of line
        ("src/shape.cpp", "scaled"),  # `p->scaled()`: `int Rectangle::scaled(...)` in the .cpp
    }
    assert _targets(resolver, "src/shape.cpp") == {("src/shape.cpp", "area")}  # the class's own method


def test_cpp_this_call_goes_to_the_enclosing_class_not_another_with_the_name():
    resolver = _resolver(CPP)
    edges = _edges(resolver, "src/counter.hpp")
    assert edges == {(5, "this.clear"): ("src/counter.hpp", "clear")}  # Timer::clear has the name too
