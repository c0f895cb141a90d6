"""Definitions rendered from their syntax trees in TypeScript, Java, Go and Rust: signatures and skeletons made
only of the file's own lines (so `runs` are exact)."""

from __future__ import annotations

import pytest

from graph.languages import CLASS_KINDS
from graph.lookup import DefRef
from graph.parsing import parse_source
from repocomp.context.render import RenderedDefinition, render_definition
from repocomp.prompt.layout import render_definition_block

TS = 'import { Base } from "./base";\n\n/** A point on the plane. */\nexport interface Point {\n  x: number;\n  y: number;\n  move(dx: number, dy: number): Point;\n}\n\nexport type Id = string | number;\n\nexport class Box<T> extends Base {\n  private size: number = 0;\n  label: string;\n\n  constructor(public value: T) {\n    super();\n  }\n\n  get(): T {\n    return this.value;\n  }\n\n  private grow(by: number): void {\n    this.size += by;\n  }\n}\n\nexport function add(a: number,\n    b: number): number {\n  return a + b;\n}\n'

GO = 'package store\n\n// Item is one stored value.\ntype Item struct {\n\tKey   string\n\tValue []byte\n}\n\n// Getter reads items.\ntype Getter interface {\n\tGet(key string) (Item, bool)\n\tLen() int\n}\n\n// Get returns the item stored under key.\nfunc (s *Store) Get(key string) (Item, bool) {\n\titem, ok := s.items[key]\n\treturn item, ok\n}\n\nfunc New(size int) *Store {\n\treturn &Store{items: make(map[string]Item, size)}\n}\n'

RUST = 'use std::fmt;\n\n/// A point on the plane.\n/// Both coordinates are integers.\n#[derive(Debug, Clone)]\npub struct Point {\n    pub x: i32,\n    pub y: i32,\n}\n\n/// Shapes we draw.\npub enum Shape {\n    Circle { r: f64 },\n    Square(f64),\n    Empty,\n}\n\npub trait Area {\n    fn area(&self) -> f64;\n    fn name(&self) -> String {\n        String::from("shape")\n    }\n}\n\nimpl Point {\n    /// A new point.\n    pub fn new(x: i32, y: i32) -> Self {\n        Point { x, y }\n    }\n\n    fn norm(&self) -> i32 {\n        self.x.abs() + self.y.abs()\n    }\n}\n'

JAVA = 'package demo;\n\n/**\n * A counter of events.\n * Thread-safe.\n */\npublic class Counter {\n    private final String name;\n    private int count = 0;\n\n    public Counter(String name) {\n        this.name = name;\n    }\n\n    /** Adds one. */\n    public void increment() {\n        count++;\n    }\n\n    public int get() {\n        return count;\n    }\n}\n\ninterface Source {\n    int next();\n}\n'


def render(language: str, src: str, name: str, nth: int = 0, max_lines: int = 12) -> RenderedDefinition:
    parsed = parse_source(src, language)
    node, _, cls = [d for d in parsed.defs if d[1] == name][nth]
    kind = "class" if parsed.kinds[node] in CLASS_KINDS else "method" if cls >= 0 else "function"
    shown = render_definition(DefRef("f", node, name, kind), parsed, src.split("\n"), max_lines)
    assert all(text == src.split("\n")[n] for n, text in shown.lines)  # every line the file's own
    return shown


def texts(shown: RenderedDefinition) -> list[str]:
    return [t for _, t in shown.lines]


def test_typescript_interface_class_function() -> None:
    assert texts(render("typescript", TS, "Point")) == [
        "/** A point on the plane. */", "export interface Point {", "  x: number;", "  y: number;",
        "  move(dx: number, dy: number): Point;", "}"]
    box = render("typescript", TS, "Box")
    assert texts(box) == [
        "export class Box<T> extends Base {", "  private size: number = 0;", "  label: string;",
        "  constructor(public value: T) {", "  get(): T {", "  private grow(by: number): void {", "}"]
    assert box.runs == ((11, 14), (15, 16), (19, 20), (23, 24), (26, 27))
    assert texts(render("typescript", TS, "get")) == ["export class Box<T> extends Base {", "  get(): T {"]
    assert texts(render("typescript", TS, "add")) == ["export function add(a: number,", "    b: number): number {"]


def test_typescript_functions_held_by_constants_are_definitions_shown_to_their_body() -> None:
    src = ("export const twice = async (x: number,\n    y = 2): Promise<number> => {\n  return x * y;\n};\n"
           "const inc = function (n) {\n  return n + 1;\n};\nexport const sq = (n: number) => n * n;\n"
           "const limit = 3, other = () => 1;\n")
    parsed = parse_source(src, "typescript")
    assert [name for _, name, _ in parsed.defs] == ["twice", "inc", "sq"]  # not `limit` nor a shared declaration
    assert texts(render("typescript", src, "twice")) == ["export const twice = async (x: number,",
                                                         "    y = 2): Promise<number> => {"]
    assert texts(render("typescript", src, "inc")) == ["const inc = function (n) {"]
    assert texts(render("typescript", src, "sq")) == ["export const sq = (n: number) => n * n;"]


def test_typescript_class_members_within_max_lines_public_first() -> None:
    assert texts(render("typescript", TS, "Box", max_lines=5)) == [
        "export class Box<T> extends Base {", "  private size: number = 0;", "  label: string;",
        "  constructor(public value: T) {", "  get(): T {"]


def test_go_struct_interface_and_funcs_with_receivers() -> None:
    assert texts(render("go", GO, "Item")) == [
        "// Item is one stored value.", "type Item struct {", "\tKey   string", "\tValue []byte", "}"]
    assert texts(render("go", GO, "Getter")) == [
        "// Getter reads items.", "type Getter interface {", "\tGet(key string) (Item, bool)", "\tLen() int", "}"]
    assert texts(render("go", GO, "Get")) == [
        "// Get returns the item stored under key.", "func (s *Store) Get(key string) (Item, bool) {"]
    assert texts(render("go", GO, "New")) == ["func New(size int) *Store {"]


def test_rust_struct_enum_trait_impl() -> None:
    assert texts(render("rust", RUST, "Point")) == [
        "/// A point on the plane.", "/// Both coordinates are integers.", "#[derive(Debug, Clone)]",
        "pub struct Point {", "    pub x: i32,", "    pub y: i32,", "}"]
    assert texts(render("rust", RUST, "Shape")) == [
        "/// Shapes we draw.", "pub enum Shape {", "    Circle { r: f64 },", "    Square(f64),", "    Empty,", "}"]
    assert texts(render("rust", RUST, "Area")) == [
        "pub trait Area {", "    fn area(&self) -> f64;", "    fn name(&self) -> String {", "}"]
    assert texts(render("rust", RUST, "new")) == [
        "impl Point {", "    /// A new point.", "    pub fn new(x: i32, y: i32) -> Self {"]
    assert texts(render("rust", RUST, "norm")) == ["impl Point {", "    fn norm(&self) -> i32 {"]


def test_rust_doc_head_follows_docstring_lines() -> None:
    parsed = parse_source(RUST, "rust")
    node = next(n for n, name, _ in parsed.defs if name == "Point")
    shown = render_definition(DefRef("f", node, "Point", "class"), parsed, RUST.split("\n"), 12, docstring_lines=1)
    assert texts(shown)[:3] == ["/// A point on the plane.", "#[derive(Debug, Clone)]", "pub struct Point {"]


def test_java_class_constructor_methods_fields() -> None:
    assert texts(render("java", JAVA, "Counter")) == [
        "/**", " * A counter of events.", " * Thread-safe.", "public class Counter {",
        "    private final String name;", "    private int count = 0;", "    public Counter(String name) {",
        "    public void increment() {", "    public int get() {", "}"]
    assert texts(render("java", JAVA, "increment")) == [
        "public class Counter {", "    /** Adds one. */", "    public void increment() {"]
    assert texts(render("java", JAVA, "Counter", nth=1)) == ["public class Counter {", "    public Counter(String name) {"]
    assert texts(render("java", JAVA, "Source")) == ["interface Source {", "    int next();", "}"]


@pytest.mark.parametrize(("language", "src", "name"), [("typescript", TS, "Box"), ("java", JAVA, "Counter")])
def test_elision_marks_between_runs_in_the_prompt(language: str, src: str, name: str) -> None:
    shown = render(language, src, name)
    block = render_definition_block("f", shown.lines)
    assert block.count("...") == len(shown.runs) - 1


def test_typescript_type_alias_lines() -> None:
    from repocomp.context.skeleton import skeleton_lines

    src = "/** Ids. */\nexport type Id =\n  | string\n  | number;\nconst x = 1;"
    assert skeleton_lines("typescript", src.split("\n"), "class", "type_alias_declaration", 1, "Id", 12, 3) == \
        [0, 1, 2, 3]
    assert skeleton_lines("typescript", src.split("\n"), "class", "type_alias_declaration", 4, "Id", 12, 3) is None
