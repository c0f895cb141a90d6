"""The definitions section's candidates for TypeScript, Java, Go and Rust buffers (graph.resolve_langs through
graph.lookup): imports, references through typed variables, prefixes, and no false unique-method matches."""

from __future__ import annotations

from pathlib import Path

from repocomp.config.schema import Config, DefinitionsConfig
from repocomp.context.definitions import DefinitionFinder
from repocomp.index import Index

FILES = {
    "web/mod.ts": "export function foo() { return 1; }\nexport function other() { return 2; }\n"
                  "export class Builder { push(x) { return x; } }\n",
    "web/app.ts": "import * as m from './mod';\nimport { other as o } from './mod';\n\nfunction run() {\n"
                  "  const params = [];\n  params.push(1);\n  m.foo(\n",
    "java/com/x/Foo.java": "package com.x;\npublic class Foo {\n  public void bar() {}\n  public void baz() {}\n}\n",
    "java/com/x/Main.java": "package com.x;\nclass Main {\n  private Foo foo;\n  void run() {\n    foo.bar(\n",
    "go/pkg/cmd.go": "package pkg\ntype Command struct{}\nfunc (c *Command) Execute() {}\nfunc (c *Command) Exit() {}\n",
    "go/pkg/use.go": "package pkg\nfunc run(c *Command) {\n  c.Ex\n",
    "rs/src/lib.rs": "pub mod value;\n",
    "rs/src/value.rs": "pub struct Value;\nimpl Value {\n    pub fn new() -> Self { Value }\n"
                       "    pub fn send(&self) {}\n}\n",
    "rs/src/main.rs": "use crate::value::Value;\nuse std::sync::mpsc;\nfn main() {\n"
                      "    let (tx, rx) = mpsc::channel();\n    tx.send(1);\n    let v = Value::new();\n    v.\n",
}


def _candidates(tmp_path: Path, path: str) -> dict[str, list[str]]:
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    index = Index.build(tmp_path, Config())
    lines = FILES[path].split("\n")
    line = len(lines) - 2
    finder = DefinitionFinder(index, DefinitionsConfig())
    state = finder.buffer_state(path, lines, line, len(lines[line]))
    return {f"{ref.path}:{ref.name}": [e.source for e in cand.evidence] for ref, cand in state.candidates.items()}


def test_typescript_namespace_import_and_no_false_push(tmp_path: Path) -> None:
    found = _candidates(tmp_path, "web/app.ts")
    assert "reference" in found["web/mod.ts:foo"]  # m.foo( after import * as m
    assert "import" in found["web/mod.ts:other"]  # aliased named import
    assert "web/mod.ts:push" not in found  # params is a local array


def test_java_field_typed_method(tmp_path: Path) -> None:
    found = _candidates(tmp_path, "java/com/x/Main.java")
    assert "reference" in found["java/com/x/Foo.java:bar"]


def test_go_receiver_prefix(tmp_path: Path) -> None:
    found = _candidates(tmp_path, "go/pkg/use.go")
    assert set(found) >= {"go/pkg/cmd.go:Execute", "go/pkg/cmd.go:Exit"}
    assert all("prefix" in found[k] for k in ("go/pkg/cmd.go:Execute", "go/pkg/cmd.go:Exit"))


def test_rust_typed_local_and_std_channel(tmp_path: Path) -> None:
    found = _candidates(tmp_path, "rs/src/main.rs")
    assert "import" in found["rs/src/value.rs:Value"]
    assert "reference" in found["rs/src/value.rs:new"]  # Value::new
    assert "prefix" in found["rs/src/value.rs:send"]  # v. -> the methods of Value
    assert "reference" not in found["rs/src/value.rs:send"]  # tx.send is the std channel's
