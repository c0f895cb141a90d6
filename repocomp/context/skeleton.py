"""Which lines of a definition show it, in the tree-sitter languages other than Python (Java, JavaScript/TypeScript,
Go, Rust; C/C++ where their nodes match): signatures and skeletons read off the definition's syntax tree.

- function / method: its doc comment's head and attributes right above it, then its signature: from its first line
  to the line where its body's `{` opens (all of a declaration without a body); a method also shows the header
  line of its class, interface, trait or impl;
- class, interface, struct, enum, trait, impl (a container): its doc head and header (up to its `{`), then its
  members while lines are left: fields, properties and variants whole (data first, at most 3 lines each), then
  constructors, then methods' signatures (public first); the closing line when every member is shown;
- a TypeScript type alias: its lines (first ones).

Line numbers only: context/render.py shows each line as the file has it.
"""

from __future__ import annotations

from functools import lru_cache

from tree_sitter import Node, Tree

from graph.languages import parser_for

__all__ = ["skeleton_lines"]

_SIGNATURE_CAP = 12
_MEMBER_CAP = 3  # lines of a field, property or variant shown
_BLOCKS = {"statement_block", "block", "constructor_body", "compound_statement", "function_body"}
_CONTAINER_BODIES = {"class_body", "interface_body", "enum_body", "field_declaration_list", "declaration_list",
                     "enum_variant_list", "object_type", "enum_class_body", "annotation_type_body"}
_CONTAINERS = {"class_declaration", "abstract_class_declaration", "interface_declaration", "enum_declaration",
               "record_declaration", "impl_item", "trait_item", "struct_item", "enum_item", "class_specifier",
               "struct_specifier", "class", "type_declaration"}
_ABOVE = {"comment", "line_comment", "block_comment", "attribute_item", "decorator"}
_CONSTRUCTORS = {"constructor_declaration", "compact_constructor_declaration"}


@lru_cache(maxsize=8)
def _parse(language: str, text: str) -> Tree:
    return parser_for(language).parse(text.encode("utf-8", "replace"))


def _find(root: Node, kind: str, row: int) -> Node | None:
    """The outermost node of `kind` starting on `row`."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == kind and node.start_point[0] == row:
            return node
        stack.extend(c for c in reversed(node.named_children) if c.start_point[0] <= row <= c.end_point[0])
    return None


def _rows(start: int, end: int, cap: int) -> list[int]:
    return list(range(start, min(end, start + cap - 1) + 1))


def _signature(node: Node) -> list[int]:
    """From the node's first line to where its block body opens; a node without one: its lines (capped)."""
    body = node.child_by_field_name("body")
    if body is None and node.type in ("lexical_declaration", "variable_declaration"):  # `const f = (x) => {`
        value = next((d.child_by_field_name("value") for d in node.named_children if d.type == "variable_declarator"),
                     None)
        body = value.child_by_field_name("body") if value is not None else None
    start = node.start_point[0]
    if body is not None and (body.type in _BLOCKS or body.type in _CONTAINER_BODIES):
        return _rows(start, body.start_point[0], _SIGNATURE_CAP)
    return _rows(start, node.end_point[0], _SIGNATURE_CAP)


def _above(node: Node, doc_lines: int) -> list[int]:
    """Attribute lines and the head of the doc comment right above the node (no blank line between)."""
    anchor = node.parent if node.parent is not None and node.parent.type == "export_statement" else node
    top = anchor.start_point[0]
    comments: list[int] = []
    attrs: list[int] = []
    sib = anchor.prev_named_sibling
    while sib is not None and sib.type in _ABOVE and sib.end_point[0] >= top - 1:
        end = sib.end_point[0] - (1 if sib.end_point[1] == 0 else 0)  # a line comment may end at the next row
        if end < top - 1:
            break
        rows = list(range(sib.start_point[0], end + 1))
        (attrs if sib.type in ("attribute_item", "decorator") else comments)[:0] = rows
        top = sib.start_point[0]
        sib = sib.prev_named_sibling
    return attrs[:3] + comments[:max(doc_lines, 0)]


def _container_body(node: Node, name: str) -> tuple[Node | None, Node]:
    """The node holding a container's members, and the node whose header shows it (a Go `type` spec's own)."""
    if node.type == "type_declaration":  # Go: `type X struct {...}`, `type ( A ...; B ... )`
        specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
        spec = next((c for c in specs if (n := c.child_by_field_name("name")) is not None
                     and n.text is not None and n.text.decode("utf-8", "replace") == name), specs[0] if specs else None)
        if spec is None:
            return None, node
        typ = spec.child_by_field_name("type")
        if typ is None:
            return None, spec
        if typ.type == "struct_type":
            return next((c for c in typ.named_children if c.type == "field_declaration_list"), None), spec
        if typ.type == "interface_type":
            return typ, spec
        return None, spec
    body = node.child_by_field_name("body")
    return (body if body is not None and body.type in _CONTAINER_BODIES else None), node


def _is_data(member: Node) -> bool:
    body = member.child_by_field_name("body")
    return not (body is not None and body.type in _BLOCKS) and "method" not in member.type \
        and "function" not in member.type and member.type not in _CONSTRUCTORS


def _is_private(member: Node) -> bool:
    text = member.text.decode("utf-8", "replace").lstrip() if member.text is not None else ""
    name = member.child_by_field_name("name")
    ident = name.text.decode("utf-8", "replace") if name is not None and name.text is not None else ""
    return text.startswith(("private", "protected", "#")) or ident.startswith(("_", "#"))


def _container(node: Node, name: str, max_lines: int, doc_lines: int) -> list[int]:
    body, header_node = _container_body(node, name)
    start = node.start_point[0]
    if body is not None:
        head = _rows(start, body.start_point[0], _SIGNATURE_CAP)
    else:
        head = _rows(start, header_node.end_point[0], max_lines)
    head = _above(node, doc_lines) + head
    members = [m for m in body.named_children if m.type not in _ABOVE] if body is not None else []
    data = [m for m in members if _is_data(m)]
    ctors = [m for m in members if m.type in _CONSTRUCTORS]
    methods = [m for m in members if m not in data and m not in ctors]
    ordered = data + ctors + [m for m in methods if not _is_private(m)] + [m for m in methods if _is_private(m)]
    groups = [head]
    for m in ordered:
        groups.append(_rows(m.start_point[0], m.end_point[0], _MEMBER_CAP) if m in data else _signature(m))
    chosen: list[int] = []
    shown = 0
    for group in groups:
        new = [n for n in group if n not in chosen]
        if len(chosen) + len(new) <= max_lines:
            chosen += new
            shown += 1
        elif not chosen:
            chosen = group[:max_lines]
    end = (body or node).end_point[0]
    if body is not None and shown == len(groups) and len(chosen) < max_lines and end not in chosen:
        chosen.append(end)  # the whole skeleton: closed as in the file
    return chosen


def _enclosing_header(node: Node) -> list[int]:
    """The header of the class, interface, trait or impl holding a method (first two lines)."""
    par = node.parent
    while par is not None and par.type not in _CONTAINERS:
        par = par.parent
    return _signature(par)[:2] if par is not None else []


def skeleton_lines(language: str, lines: list[str], kind: str, node_kind: str, start_line: int, name: str,
                   max_lines: int, doc_lines: int) -> list[int] | None:
    """Line numbers that show the definition `node_kind` starting at `start_line` (None: not found in the tree)."""
    tree = _parse(language, "\n".join(lines))
    node = _find(tree.root_node, node_kind, start_line)
    if node is None:
        return None
    if kind == "class" or node.type in _CONTAINERS:
        return _container(node, name, max_lines, doc_lines)
    if node.type == "type_alias_declaration":
        return (_above(node, doc_lines) + _rows(start_line, node.end_point[0], max_lines))[:max_lines]
    return (_enclosing_header(node) + _above(node, doc_lines) + _signature(node))[:max_lines]
