"""A repository definition as a compact block: what a caller needs to use it, in a few of its own lines.

- function / method: its decorators, its signature (all its lines) and the first paragraph of its docstring;
  a method also shows its class's header line;
- class: a skeleton: decorators and header, docstring head, class attributes, `__init__`'s signature, then the
  other methods' signatures (public first) while lines are left;
- module constant: its assignment (first lines).

Every line shown is a line of the file, unchanged, so a block knows exactly which lines it shows (`runs`): the
prompt puts an elision mark between runs, and the evaluation counts only those lines. Other languages get
signatures and skeletons read off their syntax trees (repocomp.context.skeleton: doc comment heads, fields, variants,
interface and trait members, method signatures); where the tree does not hold the definition, its header lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graph.languages import CLASS_KINDS
from graph.lookup import DefRef
from graph.parsing import ParsedFile
from repocomp.config.schema import DefinitionsConfig
from repocomp.context.skeleton import skeleton_lines
from repocomp.prompt.layout import DefinitionSource

if TYPE_CHECKING:
    from repocomp.context.definitions import RankedDefinition
    from repocomp.index import Index

__all__ = ["DefinitionRenderer", "RenderedDefinition", "render_definition", "runs_of"]

_SIGNATURE_CAP = 12  # lines of one signature (a long parameter list is rare past this)
_QUOTES = ('"""', "'''", '"', "'")


@dataclass(frozen=True)
class RenderedDefinition:
    path: str
    lines: tuple[tuple[int, str], ...]  # (0-based line number, the line's text), increasing line numbers

    @property
    def runs(self) -> tuple[tuple[int, int], ...]:
        return runs_of([n for n, _ in self.lines])


def runs_of(numbers: list[int]) -> tuple[tuple[int, int], ...]:
    """Sorted line numbers -> half-open runs of consecutive lines."""
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and runs[-1][1] == n:
            runs[-1] = (runs[-1][0], n + 1)
        else:
            runs.append((n, n + 1))
    return tuple(runs)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _code_part(line: str) -> str:
    """The line without a trailing `#` comment (strings are not parsed: good enough for headers)."""
    cut = line.find("#")
    return line[:cut] if cut >= 0 and line.count('"', 0, cut) % 2 == 0 and line.count("'", 0, cut) % 2 == 0 else line


def _signature(parsed: ParsedFile, lines: list[str], node: int) -> list[int]:
    """Line numbers of a definition's header: from its first line to the `:` (Python) or `{`/`;` that ends it."""
    start, end = int(parsed.start_line[node]), min(int(parsed.end_line[node]), len(lines))
    python = parsed.language == "python"
    depth = 0
    out = []
    for i in range(start, min(end, start + _SIGNATURE_CAP)):
        code = _code_part(lines[i]).rstrip()
        out.append(i)
        depth += sum(code.count(c) for c in "([") - sum(code.count(c) for c in ")]")
        if python and depth <= 0 and code.endswith(":"):
            break
        if not python and depth <= 0 and ("{" in code or code.endswith(";") or code.endswith("=>")):
            break
    return out


def _decorators(parsed: ParsedFile, lines: list[str], node: int) -> list[int]:
    """Lines of the decorators right above a Python definition (multi-line ones included)."""
    if parsed.language != "python":
        return []
    start = int(parsed.start_line[node])
    if start >= len(lines):
        return []
    ind = _indent(lines[start])
    top = start
    i = start - 1
    while i >= 0:
        text = lines[i]
        stripped = text.strip()
        if not stripped:
            break
        if _indent(text) == ind and stripped.startswith("@"):
            top = i
        elif not (_indent(text) > ind or stripped[0] in ")]}"):
            break  # neither a decorator nor the continuation of one
        i -= 1
    return list(range(top, start))


def _docstring(parsed: ParsedFile, lines: list[str], after: int, limit: int, max_lines: int) -> list[int]:
    """The first paragraph of the docstring starting on the first non-blank line after `after` (Python)."""
    if parsed.language != "python" or max_lines <= 0:
        return []
    i = after + 1
    while i < limit and not lines[i].strip():
        i += 1
    if i >= limit:
        return []
    first = lines[i].strip().lstrip("rRuUbBfF")
    quote = next((q for q in _QUOTES if first.startswith(q)), None)
    if quote is None:
        return []
    out = [i]
    if first.count(quote) >= 2 or (len(quote) == 1 and first.endswith(quote) and len(first) > 1):
        return out  # one-line docstring
    j = i + 1
    while j < limit and len(out) < max_lines:
        text = lines[j].strip()
        if not text:
            break  # end of the first paragraph
        out.append(j)
        if quote in text:
            break
        j += 1
    return out


def _class_header_line(parsed: ParsedFile, node: int) -> list[int]:
    """The header line of the class holding a method."""
    par = int(parsed.parent[node])
    while par > 0 and parsed.kinds[par] not in CLASS_KINDS:
        par = int(parsed.parent[par])
    return [int(parsed.start_line[par])] if par > 0 else []


def _function(ref: DefRef, parsed: ParsedFile, lines: list[str], max_lines: int, doc_lines: int) -> list[int]:
    sig = _signature(parsed, lines, ref.node)
    end = min(int(parsed.end_line[ref.node]), len(lines))
    shown = _decorators(parsed, lines, ref.node) + sig + _docstring(parsed, lines, sig[-1], end, doc_lines)
    if ref.kind == "method":
        shown = _class_header_line(parsed, ref.node) + shown
    return shown[:max_lines]


def _class(ref: DefRef, parsed: ParsedFile, lines: list[str], max_lines: int, doc_lines: int) -> list[int]:
    sig = _signature(parsed, lines, ref.node)
    end = min(int(parsed.end_line[ref.node]), len(lines))
    head = _decorators(parsed, lines, ref.node) + sig
    doc = _docstring(parsed, lines, sig[-1], end, doc_lines)
    children = [n for n in range(ref.node + 1, parsed.n_nodes) if parsed.parent[n] == ref.node]
    attrs = []
    for n in children:
        if parsed.kinds[n] == "expression_statement" and parsed.language == "python":
            line = int(parsed.start_line[n])
            code = lines[line].strip() if line < len(lines) else ""
            head_ = code.split("=", 1)[0]
            if "=" in code and "(" not in head_ and "." not in head_ and not code.startswith(_QUOTES):
                attrs.append(line)
    names = _def_nodes(parsed)
    methods = [n for n in children if n in names]

    def method_lines(n: int) -> list[int]:
        return _decorators(parsed, lines, n) + _signature(parsed, lines, n)

    init = [n for n in methods if names[n] == "__init__"]
    public = [n for n in methods if not names[n].startswith("_")]
    dunder = [n for n in methods if names[n].startswith("__") and names[n] != "__init__"]
    private = [n for n in methods if names[n].startswith("_") and not names[n].startswith("__")]
    # priority: who it is, what it is, how to build it, then what it offers (a member is shown whole or not)
    groups = [head, doc, *([a] for a in attrs[:4]), *(method_lines(n) for n in init + public + dunder + private)]
    chosen: list[int] = []
    for group in groups:
        if len(chosen) + len(group) <= max_lines:
            chosen += group
        elif not chosen:
            chosen = group[:max_lines]
    return sorted(set(chosen))


def _constant(ref: DefRef, parsed: ParsedFile, lines: list[str], max_lines: int, doc_lines: int) -> list[int]:
    start, end = int(parsed.start_line[ref.node]), min(int(parsed.end_line[ref.node]), len(lines))
    return list(range(start, min(end, start + max(1, max_lines // 4))))


def _def_nodes(parsed: ParsedFile) -> dict[int, str]:
    return {node: name for node, name, _ in parsed.defs}


_RENDERERS: dict[str, Callable[[DefRef, ParsedFile, list[str], int, int], list[int]]] = {
    "function": _function,
    "method": _function,
    "class": _class,
    "constant": _constant,
}


def render_definition(ref: DefRef, parsed: ParsedFile, lines: list[str], max_lines: int = 12,
                      docstring_lines: int = 3) -> RenderedDefinition:
    """The compact block of `ref` (a definition of the file whose parse and lines are given)."""
    numbers = None
    if parsed.language != "python" and 0 <= ref.node < parsed.n_nodes:
        numbers = skeleton_lines(parsed.language, lines, ref.kind, parsed.kinds[ref.node],
                                 int(parsed.start_line[ref.node]), ref.name, max_lines, docstring_lines)
    if numbers is None:
        numbers = _RENDERERS[ref.kind](ref, parsed, lines, max_lines, docstring_lines)
    numbers = sorted({n for n in numbers if 0 <= n < len(lines)})
    return RenderedDefinition(ref.path, tuple((n, lines[n]) for n in numbers))


class DefinitionRenderer:
    """Ranked definitions as the prompt may show them, with the renderings and the files' lines they come from
    kept between requests: a file's parse is replaced, never changed, when it is edited, so an entry is good
    while the parse (or file entry) it came from is the file's (held and compared by identity; an id() could be
    reused after a free)."""

    def __init__(self, index: Index, config: DefinitionsConfig) -> None:
        self.index = index
        self.config = config
        self._rendered: dict[DefRef, tuple[ParsedFile, RenderedDefinition]] = {}
        self._lines: dict[str, tuple[object, list[str]]] = {}

    def sources(self, ranked: list[RankedDefinition], path: str, line: int) -> list[DefinitionSource]:
        """The best candidates rendered; none of the cursor's own file that reaches the cursor line (the code
        from the cursor on is never used; code above it in view is deduplicated by the prompt)."""
        out: list[DefinitionSource] = []
        for cand in ranked:
            if len(out) >= 3 * self.config.max_definitions:  # room for those the prompt finds already visible
                break
            entry = self.index.files.get(cand.ref.path)
            if entry is None or (cand.ref.path == path and int(entry.parsed.start_line[cand.ref.node]) >= line):
                continue  # gone, or one of the cursor's file starting on or after its line: not rendered at all
            shown = self._render(cand.ref, entry.parsed)
            if not shown.lines or (cand.ref.path == path and shown.lines[-1][0] >= line):
                continue
            out.append(DefinitionSource(cand.ref.name, cand.ref.path, shown.lines, cand.score, cand.reasons))
        return out

    def _render(self, ref: DefRef, parsed: ParsedFile) -> RenderedDefinition:
        cached = self._rendered.get(ref)
        if cached is not None and cached[0] is parsed:
            return cached[1]
        if len(self._rendered) > 4096:
            self._rendered.clear()
        shown = render_definition(ref, parsed, self.lines(ref.path), self.config.max_lines,
                                  self.config.docstring_lines)
        self._rendered[ref] = (parsed, shown)
        return shown

    def lines(self, path: str) -> list[str]:
        """The indexed file's lines ([] when it is not indexed)."""
        entry = self.index.files.get(path)
        if entry is None:
            return []
        hit = self._lines.get(path)
        if hit is None or hit[0] is not entry:
            if len(self._lines) > 256:
                self._lines.clear()
            hit = self._lines[path] = (entry, entry.text.split("\n"))
        return hit[1]
