"""Languages the indexer parses: file extensions, tree-sitter grammars (per-language wheels, offline) and the
node kinds that become graph nodes.

A graph node is a *statement or definition* (kinds ending in `_statement`, `_definition`, `_declaration`,
`_item`, minus pure blocks), never a token or an expression: this keeps the graph about as large as the number of
code lines while keeping the paper's syntax-tree structure (statement -> enclosing statement/definition).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

from tree_sitter import Language, Parser, Query

# extension -> language name
EXTENSIONS: dict[str, str] = {
    ".py": "python", ".pyi": "python",
    ".java": "java",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp",
}

# language -> (grammar module, function returning the language pointer)
_GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "java": ("tree_sitter_java", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}

_NODE_SUFFIXES = ("_statement", "_definition", "_declaration", "_item")
# Blocks and wrappers that would only add depth, and tiny declarations inside expressions.
_NOT_NODES = {
    "compound_statement", "block_statement", "empty_statement", "decorated_definition",
    "parameter_declaration", "optional_parameter_declaration", "variadic_parameter_declaration",
    "field_declaration_list", "declaration_list", "type_item", "enum_item_list", "attribute_item",
    "inner_attribute_item", "use_list_item",
}
# call-site node kinds and the field holding the callee expression
_CALLS: dict[str, tuple[tuple[str, str], ...]] = {
    "python": (("call", "function"),),
    "java": (("method_invocation", "name"), ("object_creation_expression", "type")),
    "javascript": (("call_expression", "function"), ("new_expression", "constructor")),
    "typescript": (("call_expression", "function"), ("new_expression", "constructor")),
    "tsx": (("call_expression", "function"), ("new_expression", "constructor")),
    "go": (("call_expression", "function"),),
    "rust": (("call_expression", "function"), ("macro_invocation", "macro")),
    "c": (("call_expression", "function"),),
    "cpp": (("call_expression", "function"), ("new_expression", "type")),
}
# kinds whose `name` (C/C++: declarator) is a definition others can call
DEFINITION_KINDS = {
    "function_definition", "class_definition", "function_declaration", "class_declaration",
    "method_declaration", "method_definition", "interface_declaration", "constructor_declaration",
    "function_item", "struct_item", "enum_item", "trait_item", "type_declaration", "struct_specifier",
    "abstract_class_declaration", "enum_declaration", "record_declaration",
}
CLASS_KINDS = {"class_definition", "class_declaration", "struct_item", "interface_declaration",
               "abstract_class_declaration", "struct_specifier", "impl_item", "class_specifier"}


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    language: Language
    node_query: Query  # captures @node for every graph-node kind
    call_query: Query  # captures @callee: the callee expression of every call site


# languages whose code reads alike (a TypeScript file imports JavaScript; C++ includes C headers)
_FAMILIES = {"javascript": "js", "typescript": "js", "tsx": "js", "c": "c", "cpp": "c"}


def language_for(path: str) -> str | None:
    dot = path.rfind(".")
    return EXTENSIONS.get(path[dot:].lower()) if dot >= 0 else None


def family_for(path: str) -> str | None:
    """The language family of `path` (`js` for JavaScript and TypeScript, `c` for C and C++), None if unknown."""
    language = language_for(path)
    return _FAMILIES.get(language, language) if language is not None else None


@cache
def spec(name: str) -> LanguageSpec:
    module_name, func = _GRAMMARS[name]
    language = Language(getattr(importlib.import_module(module_name), func)())
    named: set[str] = set()
    for i in range(language.node_kind_count):
        if language.node_kind_is_named(i) and language.node_kind_is_visible(i):
            kind = language.node_kind_for_id(i)
            assert kind is not None  # every id below node_kind_count has a name
            named.add(kind)
    kinds = sorted(named)
    node_kinds = [k for k in kinds if k.endswith(_NODE_SUFFIXES) and k not in _NOT_NODES]
    if name in ("cpp",):
        node_kinds.append("class_specifier")
    node_query = Query(language, "[" + " ".join(f"({k})" for k in node_kinds) + "] @node")
    call_src = " ".join(f"({kind} {field}: (_) @callee)" for kind, field in _CALLS[name] if kind in kinds)
    call_query = Query(language, call_src)
    return LanguageSpec(name, language, node_query, call_query)


def parser_for(name: str) -> Parser:
    return Parser(spec(name).language)


def available() -> tuple[str, ...]:
    return tuple(_GRAMMARS)
