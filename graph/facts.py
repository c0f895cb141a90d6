"""What one TypeScript/JavaScript, Java, Go or Rust file says about names, for `graph.resolve_langs`.

`extract(language, source, root, index_of, kinds, max_depth)` returns the file's imports (as `graph.parsing.Import`: `local` name ->
`module` as written, `name` imported from it; `name` None binds the module itself, `"*"` re-exports or imports
everything) and its *facts*, `(kind, node, a, b)` tuples with `node` a local graph node:

- `("package", 0, name, "")`: Java `package p.q;`, Go `package cobra`;
- `("owner", node, Type, Trait)`: the type whose methods the definitions under `node` are (a Rust `impl [Trait
  for] Type` block; a Go method declaration and its receiver type);
- `("var", scope, name, info)`: a variable, parameter or field visible in the definition `scope` (0: the file),
  `info` its type as far as the syntax says: `"T:Foo"` declared or constructed (`Foo x`, `x: Foo`, `new Foo()`,
  `&Foo{}`, `Foo {..}`), `"C:a.b"` the result of calling `a.b` (resolved later), `"X:"` a literal or a built-in
  type (never a repository type), `""` unknown;
- `("field", 0, "Type.name", info)`: a field of a Go or Rust struct (Java and TypeScript fields are `var`s of
  their class);
- `("mod", node, name, "")`: a Rust `mod name;` declaration (a module file);
- `("import", node, local, "")`: the statement `node` binds `local` (the definitions section reads imports above
  the cursor);
- `("default", 0, name, "")`: TypeScript `export default name` / `export default class name`.

Only tree-sitter queries find the nodes (matching runs in C); Python walks up from each match to its scope.
"""

from __future__ import annotations

from functools import cache

from tree_sitter import Node, Query, QueryCursor

from graph.languages import spec

Fact = tuple[str, int, str, str]

_QUERIES = {
    "ts": """
        (import_statement) @import
        (export_statement) @export
        (variable_declarator) @var
        (required_parameter) @param
        (optional_parameter) @param
        (public_field_definition) @field
    """,
    "java": """
        (package_declaration) @package
        (import_declaration) @import
        (local_variable_declaration) @var
        (field_declaration) @var
        (formal_parameter) @param
    """,
    "go": """
        (package_clause) @package
        (import_spec) @import
        (method_declaration) @method
        (parameter_declaration) @param
        (var_spec) @var
        (short_var_declaration) @short
        (field_declaration) @field
    """,
    "rust": """
        (use_declaration) @use
        (mod_item) @mod
        (impl_item) @impl
        (let_declaration) @let
        (parameter) @param
        (field_declaration) @field
    """,
}
_FAMILY = {"typescript": "ts", "tsx": "ts", "javascript": "ts", "java": "java", "go": "go", "rust": "rust"}
SCOPE_KINDS = frozenset({
    "function_declaration", "method_definition", "class_declaration", "abstract_class_declaration",
    "interface_declaration", "method_declaration", "constructor_declaration", "enum_declaration",
    "record_declaration", "function_item", "impl_item", "trait_item", "generator_function_declaration",
})
_LITERALS = frozenset({
    "array", "string", "number", "template_string", "object", "true", "false", "null", "regex",
    "string_literal", "decimal_integer_literal", "array_creation_expression", "array_initializer",
    "character_literal", "interpreted_string_literal", "raw_string_literal", "int_literal", "float_literal",
    "integer_literal", "boolean_literal", "array_expression", "tuple_expression",
    "macro_invocation", "func_literal", "arrow_function", "function_expression", "lambda_expression",
    "slice_expression", "rune_literal", "char_literal",
})
FUNCTION_VALUES = frozenset({"arrow_function", "function_expression", "function", "generator_function"})
_BUILTIN_TYPES = frozenset({"string", "number", "boolean", "any", "unknown", "void", "object", "String", "Object",
                            "Vec", "HashMap", "HashSet", "Option", "Result", "Box", "Rc", "Arc", "List", "Map",
                            "Set", "Array", "Promise", "Record", "Integer", "Long", "Boolean"})


def family(language: str) -> str | None:
    return _FAMILY.get(language)


@cache
def _query(language: str) -> Query:
    fam = _FAMILY[language]
    src = _QUERIES[fam]
    if language == "javascript":  # no type annotations, no parameter properties
        src = "\n".join(line for line in src.splitlines() if "parameter" not in line and "public_field" not in line)
    return Query(spec(language).language, src)


def _text(src: bytes, node: Node | None) -> str:
    """The source of `node` (sliced: `node.text` re-reads a tree parsed from pieces)."""
    return src[node.start_byte:node.end_byte].decode("utf-8", "replace") if node is not None else ""


def _unquote(src: bytes, node: Node | None) -> str:
    return _text(src, node).strip().strip("\"'`")


def type_info(src: bytes, node: Node | None) -> str:
    """A type node as `"T:Name"` (a named type, generics, pointers and references dropped) or `"X:"`."""
    for _ in range(8):
        if node is None:
            return ""
        kind = node.type
        if kind in ("type_annotation", "pointer_type", "reference_type", "generic_type", "qualified_type",
                    "parenthesized_type", "mutable_specifier"):
            named = [c for c in node.named_children if c.type not in ("type_arguments", "mutable_specifier",
                                                                       "lifetime")]
            if kind == "qualified_type" or kind == "generic_type" and node.child_by_field_name("type") is None:
                txt = _text(src, node).split("<")[0]
                return _named(txt.replace("::", "."))
            node = node.child_by_field_name("type") or (named[-1] if kind != "generic_type" else named[0]) \
                if named else None
            continue
        if kind in ("type_identifier", "identifier", "scoped_type_identifier", "scoped_identifier",
                    "nested_type_identifier"):
            return _named(_text(src, node).replace("::", "."))
        return "X:"
    return ""


def _named(name: str) -> str:
    name = name.strip()
    if not name or name.split(".")[-1] in _BUILTIN_TYPES:
        return "X:"
    return "T:" + name


def value_info(src: bytes, node: Node | None) -> str:
    """What an initializer says about the variable's type."""
    for _ in range(4):
        if node is None:
            return ""
        kind = node.type
        if kind in ("unary_expression", "reference_expression", "await_expression", "parenthesized_expression",
                    "try_expression", "non_null_expression", "as_expression"):
            if kind == "as_expression":
                return type_info(src, node.named_children[-1] if node.named_children else None)
            inner = node.child_by_field_name("operand") or node.child_by_field_name("value") or \
                (node.named_children[0] if node.named_children else None)
            node = inner
            continue
        if kind in ("new_expression", "object_creation_expression"):
            return _named(_text(src, node.child_by_field_name("constructor") or node.child_by_field_name("type"))
                          .split("<")[0])
        if kind == "composite_literal":
            return type_info(src, node.child_by_field_name("type"))
        if kind == "struct_expression":
            return _named(_text(src, node.child_by_field_name("name")).split("<")[0].replace("::", "."))
        if kind in ("call_expression",):
            callee = node.child_by_field_name("function")
            txt = _text(src, callee)
            if callee is not None and len(txt) < 200 and "(" not in txt and "\n" not in txt:
                return "C:" + txt.replace("::", ".").replace(" ", "")
            return ""
        if kind in _LITERALS:
            return "X:"
        return ""
    return ""


class _Scopes:
    def __init__(self, index_of: dict[int, int], kinds: list[str]) -> None:
        self.index_of = index_of
        self.kinds = kinds

    def node(self, ts: Node) -> int:
        """The graph node of `ts` itself or its nearest ancestor that is one."""
        at: Node | None = ts
        while at is not None:
            idx = self.index_of.get(at.id)
            if idx is not None:
                return idx
            at = at.parent
        return 0

    def scope(self, ts: Node) -> int:
        at = ts.parent
        while at is not None:
            idx = self.index_of.get(at.id)
            if idx is not None and self.kinds[idx] in SCOPE_KINDS:
                return idx
            at = at.parent
        return 0


def extract(language: str, source: bytes, root: Node, index_of: dict[int, int], kinds: list[str],
            max_depth: int) -> tuple[list[tuple[str, str, str | None]], list[Fact]]:
    """(imports as (local, module, name), facts) of one parsed file (see the module docstring)."""

    cursor = QueryCursor(_query(language))
    cursor.set_max_start_depth(max_depth)
    caps = cursor.captures(root)
    scopes = _Scopes(index_of, kinds)
    imports: list[tuple[str, str, str | None]] = []
    facts: list[Fact] = []
    fam = _FAMILY[language]
    handler = {"ts": _ts, "java": _java, "go": _go, "rust": _rust}[fam]
    handler(caps, scopes, imports, facts, source)
    return imports, facts


def _add_import(imports: list, facts: list[Fact], node: int, local: str, module: str, name: str | None) -> None:
    if local and module:
        imports.append((local, module, name))
        facts.append(("import", node, local, ""))


# -- TypeScript / JavaScript -----------------------------------------------------------------------------------
def _add_specifiers(imports: list, facts: list[Fact], node: int, clause, kind: str, src: bytes, module: str) -> None:
    """`{a, b as c}` of an import or a re-export: each name bound under its alias, if any."""
    for spec_ in clause.named_children:
        if spec_.type == kind:
            name = _text(src, spec_.child_by_field_name("name"))
            alias = spec_.child_by_field_name("alias")
            _add_import(imports, facts, node, _text(src, alias) if alias else name, module, name)


def _ts(caps, scopes: _Scopes, imports: list, facts: list[Fact], src: bytes) -> None:
    for stmt in caps.get("import", []):
        module = _unquote(src, stmt.child_by_field_name("source"))
        node = scopes.node(stmt)
        clause = next((c for c in stmt.named_children if c.type == "import_clause"), None)
        if clause is None:
            continue
        for part in clause.named_children:
            if part.type == "identifier":
                _add_import(imports, facts, node, _text(src, part), module, "default")
            elif part.type == "namespace_import":
                ident = next((c for c in part.named_children if c.type == "identifier"), None)
                _add_import(imports, facts, node, _text(src, ident), module, None)
            elif part.type == "named_imports":
                _add_specifiers(imports, facts, node, part, "import_specifier", src, module)
    for stmt in caps.get("export", []):
        source = stmt.child_by_field_name("source")
        node = scopes.node(stmt)
        if source is None:
            value = stmt.child_by_field_name("value") or stmt.child_by_field_name("declaration")
            if any(c.type == "default" for c in stmt.children) and value is not None:
                name = value.child_by_field_name("name") if value.type != "identifier" else value
                if name is not None:
                    facts.append(("default", 0, _text(src, name), ""))
            continue
        module = _unquote(src, source)
        clause = next((c for c in stmt.named_children if c.type == "export_clause"), None)
        if clause is None:
            ns = next((c for c in stmt.named_children if c.type == "namespace_export"), None)
            if ns is not None:  # export * as m from './x'
                ident = next((c for c in ns.named_children if c.type == "identifier"), None)
                _add_import(imports, facts, node, _text(src, ident), module, None)
            else:
                _add_import(imports, facts, node, "*", module, "*")
            continue
        _add_specifiers(imports, facts, node, clause, "export_specifier", src, module)
    for decl in caps.get("var", []):
        name, value = decl.child_by_field_name("name"), decl.child_by_field_name("value")
        if name is None or name.type != "identifier" or (value is not None and value.type in FUNCTION_VALUES):
            continue  # `const f = () => ...` is a definition (graph.parsing), its calls go to it
        info = type_info(src, decl.child_by_field_name("type")) or value_info(src, value)
        facts.append(("var", scopes.scope(decl), _text(src, name), info))
    for param in caps.get("param", []):
        pattern = param.child_by_field_name("pattern")
        if pattern is None or pattern.type != "identifier":
            continue
        info = type_info(src, param.child_by_field_name("type"))
        scope = scopes.scope(param)
        facts.append(("var", scope, _text(src, pattern), info))
        if any(c.type == "accessibility_modifier" for c in param.children):  # constructor(private foo: Foo)
            facts.append(("var", _class_of(scopes, param), _text(src, pattern), info))
    for fld in caps.get("field", []):
        name = fld.child_by_field_name("name")
        info = type_info(src, fld.child_by_field_name("type")) or value_info(src, fld.child_by_field_name("value"))
        facts.append(("var", scopes.scope(fld), _text(src, name), info))


def _class_of(scopes: _Scopes, ts: Node) -> int:
    at = ts.parent
    while at is not None:
        idx = scopes.index_of.get(at.id)
        if idx is not None and scopes.kinds[idx] in ("class_declaration", "abstract_class_declaration"):
            return idx
        at = at.parent
    return 0


# -- Java ------------------------------------------------------------------------------------------------------
def _java(caps, scopes: _Scopes, imports: list, facts: list[Fact], src: bytes) -> None:
    for pkg in caps.get("package", []):
        name = next((c for c in pkg.named_children if c.type in ("scoped_identifier", "identifier")), None)
        facts.append(("package", 0, _text(src, name).replace(" ", ""), ""))
    for imp in caps.get("import", []):
        path = next((c for c in imp.named_children if c.type in ("scoped_identifier", "identifier")), None)
        if path is None:
            continue
        dotted = _text(src, path).replace(" ", "")
        node = scopes.node(imp)
        if any(c.type == "asterisk" for c in imp.children):
            _add_import(imports, facts, node, "*", dotted, "*")
        else:
            module, _, name = dotted.rpartition(".")
            _add_import(imports, facts, node, name, module, name)
    for decl in caps.get("var", []):
        info = type_info(src, decl.child_by_field_name("type"))
        scope = scopes.scope(decl)
        for d in decl.children_by_field_name("declarator"):
            name = d.child_by_field_name("name")
            value_ = value_info(src, d.child_by_field_name("value"))
            facts.append(("var", scope, _text(src, name), info if info.startswith("T:") or not value_ else value_))
    for param in caps.get("param", []):
        facts.append(("var", scopes.scope(param), _text(src, param.child_by_field_name("name")),
                      type_info(src, param.child_by_field_name("type"))))


# -- Go --------------------------------------------------------------------------------------------------------
def _go(caps, scopes: _Scopes, imports: list, facts: list[Fact], src: bytes) -> None:
    for pkg in caps.get("package", []):
        name = next((c for c in pkg.named_children if c.type == "package_identifier"), None)
        facts.append(("package", 0, _text(src, name), ""))
    for imp in caps.get("import", []):
        path = _unquote(src, imp.child_by_field_name("path"))
        alias = imp.child_by_field_name("name")
        local = _text(src, alias) if alias is not None else path.rsplit("/", 1)[-1].split(".")[0]
        if local == "_" or not local:
            continue
        if local == ".":
            _add_import(imports, facts, scopes.node(imp), "*", path, "*")
        else:
            _add_import(imports, facts, scopes.node(imp), local, path, None)
    for meth in caps.get("method", []):
        receiver = meth.child_by_field_name("receiver")
        param = next((c for c in receiver.named_children if c.type == "parameter_declaration"), None) \
            if receiver is not None else None
        if param is None:
            continue
        info = type_info(src, param.child_by_field_name("type"))
        node = scopes.node(meth)
        if info.startswith("T:"):
            facts.append(("owner", node, info[2:], ""))
            rname = param.child_by_field_name("name")
            if rname is not None:
                facts.append(("var", node, _text(src, rname), info))
    for param in caps.get("param", []):
        info = type_info(src, param.child_by_field_name("type"))
        scope = scopes.scope(param)
        parent = param.parent
        if parent is not None and parent.parent is not None and parent.parent.type == "method_declaration" \
                and parent.parent.child_by_field_name("receiver") == parent:
            continue
        for name in param.children_by_field_name("name"):
            facts.append(("var", scope, _text(src, name), info))
    for var in caps.get("var", []):
        info = type_info(src, var.child_by_field_name("type"))
        values = var.child_by_field_name("value")
        vals = values.named_children if values is not None else []
        scope = scopes.scope(var)
        for i, name in enumerate(var.children_by_field_name("name")):
            facts.append(("var", scope, _text(src, name), info or (value_info(src, vals[i]) if i < len(vals) else "")))
    for short in caps.get("short", []):
        left, right = short.child_by_field_name("left"), short.child_by_field_name("right")
        names = left.named_children if left is not None else []
        vals = right.named_children if right is not None else []
        scope = scopes.scope(short)
        for i, name in enumerate(names):
            if name.type == "identifier":
                info = value_info(src, vals[i]) if len(vals) == len(names) else \
                    (value_info(src, vals[0]) if len(vals) == 1 and i == 0 else "")
                facts.append(("var", scope, _text(src, name), info))
    _struct_fields(caps, facts, src)


def _struct_fields(caps, facts: list[Fact], src: bytes) -> None:
    """Go `type T struct { f *Foo }`, Rust `struct T { f: Foo }`: ("field", 0, "T.f", info)."""
    for fld in caps.get("field", []):
        owner = fld.parent.parent if fld.parent is not None else None  # field_declaration_list -> struct
        if owner is not None and owner.type == "struct_type":
            owner = owner.parent
        if owner is None or owner.type not in ("type_spec", "struct_item"):
            continue
        tname = _text(src, owner.child_by_field_name("name"))
        info = type_info(src, fld.child_by_field_name("type"))
        for name in fld.children_by_field_name("name"):
            facts.append(("field", 0, f"{tname}.{_text(src, name)}", info))


# -- Rust ------------------------------------------------------------------------------------------------------
def _rust(caps, scopes: _Scopes, imports: list, facts: list[Fact], src: bytes) -> None:
    for use in caps.get("use", []):
        node = scopes.node(use)
        stack: list[tuple[str, Node]] = [("", use.child_by_field_name("argument"))]
        while stack:
            prefix, arg = stack.pop()
            if arg is None:
                continue
            kind = arg.type
            if kind in ("scoped_identifier", "identifier", "crate", "self", "super"):
                full = _join(prefix, _text(src, arg).replace(" ", ""))
                module, _, name = full.rpartition("::")
                if name == "self":
                    module, _, name = module.rpartition("::")
                _add_import(imports, facts, node, name, module or name, name if module else None)
            elif kind == "use_as_clause":
                full = _join(prefix, _text(src, arg.child_by_field_name("path")).replace(" ", ""))
                module, _, name = full.rpartition("::")
                _add_import(imports, facts, node, _text(src, arg.child_by_field_name("alias")), module or name,
                            name if module else None)
            elif kind == "use_wildcard":
                path = next((c for c in arg.named_children), None)
                _add_import(imports, facts, node, "*", _join(prefix, _text(src, path).replace(" ", "")), "*")
            elif kind == "scoped_use_list":
                sub = _join(prefix, _text(src, arg.child_by_field_name("path")).replace(" ", ""))
                lst = arg.child_by_field_name("list")
                stack.extend((sub, c) for c in (lst.named_children if lst is not None else []))
            elif kind == "use_list":
                stack.extend((prefix, c) for c in arg.named_children)
    for mod in caps.get("mod", []):
        if mod.child_by_field_name("body") is None:
            facts.append(("mod", scopes.node(mod), _text(src, mod.child_by_field_name("name")), ""))
    for impl in caps.get("impl", []):
        info = type_info(src, impl.child_by_field_name("type"))
        trait = impl.child_by_field_name("trait")
        if info.startswith("T:"):
            facts.append(("owner", scopes.node(impl), info[2:].split(".")[-1],
                          _text(src, trait).split("<")[0].split("::")[-1] if trait is not None else ""))
    for let in caps.get("let", []):
        info = type_info(src, let.child_by_field_name("type")) or value_info(src, let.child_by_field_name("value"))
        pattern = let.child_by_field_name("pattern")
        if pattern is None:
            continue
        names = [pattern] if pattern.type == "identifier" else \
            [c for c in pattern.named_children if c.type == "identifier"] if pattern.type == "tuple_pattern" else \
            [c for c in pattern.named_children if c.type == "identifier"] if pattern.type == "mut_pattern" else []
        scope = scopes.scope(let)
        for name in names:
            facts.append(("var", scope, _text(src, name), info))
    for param in caps.get("param", []):
        pattern = param.child_by_field_name("pattern")
        if pattern is not None and pattern.type == "mut_pattern":
            pattern = next((c for c in pattern.named_children if c.type == "identifier"), None)
        if pattern is not None and pattern.type == "identifier":
            facts.append(("var", scopes.scope(param), _text(src, pattern), type_info(src, param.child_by_field_name("type"))))
    _struct_fields(caps, facts, src)


def _join(prefix: str, path: str) -> str:
    return f"{prefix}::{path}" if prefix and path else prefix or path
