"""Cut a raw model continuation to the completion the editor should insert.

Kinds:
- `line`: up to the end of the cursor's line. When the cursor line is still empty, leading blank lines of the
  completion are skipped first (a model often starts by finishing the previous line's newline). When the cursor
  line has code and the model ends it right away (its continuation starts with a line break), the line is
  complete: the next statement is offered instead, as a line break plus that statement as the model indented it
  (at the end of a line an editor would otherwise get nothing).
- `statement`: up to the end of the first line where brackets balance, counting the brackets the cursor line's
  prefix left open (strings and comments are skipped; a line ending in `\\` continues).
- `function`: indentation-based: find the enclosing `def` (the nearest one above the cursor indented less than
  the cursor's code, or a `def` the completion itself starts); stop before the first later non-blank line
  indented at or left of it. Without a `def`, the block ends at the first line indented left of the cursor's.
- `auto`:
    * code before the cursor on its line: `statement` when that code leaves a bracket open, else `line`;
    * an empty cursor line right under a `def`/`async def` header, or a completion that starts a `def`:
      `function`;
    * otherwise `statement` (one statement, multi-line only when its brackets say so).

Then text duplicating the suffix is dropped: the rest of the cursor line when the completion ends with it
(e.g. auto-inserted closing brackets), and from the first completion line that repeats the suffix's first
non-blank line onwards (the model re-writing code that already follows).
"""

from __future__ import annotations

import logging
import re

__all__ = ["KINDS", "choose_kind", "drop_cut_word", "is_finished", "postprocess", "open_brackets"]

log = logging.getLogger(__name__)

KINDS = ("line", "statement", "function", "auto")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}
_DEF = re.compile(r"^\s*(async\s+)?def\s")
_DEF_START = re.compile(r"^\s*(@|(async\s+)?def\s|class\s)")


def _indent(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())


class _Scanner:
    """Bracket depth across text, skipping strings (incl. triple-quoted) and comments."""

    def __init__(self, depth: int = 0) -> None:
        self.depth = depth
        self.quote = ""  # the open string's delimiter, "" when not inside a string

    def feed(self, text: str) -> None:
        i, n = 0, len(text)
        while i < n:
            i = self._step(text, i)

    def _step(self, text: str, i: int) -> int:
        c = text[i]
        if self.quote:
            if c == "\\":
                return i + 2
            if text.startswith(self.quote, i):
                i += len(self.quote)
                self.quote = ""
                return i
            if c == "\n" and len(self.quote) == 1:
                self.quote = ""  # an unterminated one-line string ends with its line
            return i + 1
        if c == "#":
            nl = text.find("\n", i)
            return len(text) if nl < 0 else nl
        if c in "'\"":
            triple = text[i : i + 3]
            self.quote = triple if triple in ('"""', "'''") else c
            return i + len(self.quote)
        if c in _OPEN:
            self.depth += 1
        elif c in _CLOSE:
            self.depth -= 1
        return i + 1


def open_brackets(line_prefix: str) -> int:
    """Brackets the text left open (never negative)."""
    sc = _Scanner()
    sc.feed(line_prefix)
    return max(sc.depth, 0)


def _skip_blank_lines(text: str) -> str:
    while "\n" in text and not text.split("\n", 1)[0].strip():
        text = text.split("\n", 1)[1]
    return text


def _next_line(text: str, line_prefix: str) -> str | None:
    """After a complete cursor line (code before the cursor, and the model starts with a line break): the text
    from the first non-blank line on; None when the model continues the cursor line itself."""
    first, newline, rest = text.partition("\n")
    if not line_prefix.strip() or not newline or first.strip():
        return None
    return _skip_blank_lines(rest)


def _cut_line(text: str, line_prefix: str) -> str:
    following = _next_line(text, line_prefix)
    if following is not None:
        statement = _cut_statement(following, "")
        return "\n" + statement if statement.strip() else ""
    if not line_prefix.strip():
        text = _skip_blank_lines(text)
    return text.split("\n", 1)[0]


def _cut_statement(text: str, line_prefix: str) -> str:
    sc = _Scanner(open_brackets(line_prefix))
    lines = text.split("\n")
    out: list[str] = []
    for i, line in enumerate(lines):
        out.append(line)
        sc.feed(line + ("\n" if i < len(lines) - 1 else ""))
        if not line.strip() and not "".join(out).strip():
            continue  # blank lines before the statement starts do not end it
        if sc.depth <= 0 and not sc.quote and not line.rstrip().endswith("\\"):
            break
    return "\n".join(out)


def _cut_function(text: str, prefix: str) -> str:
    head, _, line_prefix = prefix.rpartition("\n")
    lines = text.split("\n")
    first_full = line_prefix + lines[0]  # the cursor line as it will read
    if lines[0].strip():
        cursor_indent = _indent(first_full)
    else:
        nxt = next((ln for ln in lines[1:] if ln.strip()), "")
        cursor_indent = _indent(nxt) if nxt else _indent(line_prefix)

    def_indent: int | None = None
    if _DEF_START.match(first_full) and first_full.strip():
        def_indent = _indent(first_full)  # the completion writes the def itself
    else:
        for ln in reversed(head.split("\n")):
            if ln.strip() and _DEF.match(ln) and _indent(ln) < cursor_indent:
                def_indent = _indent(ln)
                break
    out = [lines[0]]
    seen_body = bool(lines[0].strip())
    for ln in lines[1:]:
        if ln.strip():
            ind = _indent(ln)
            limit_hit = ind <= def_indent if def_indent is not None else ind < cursor_indent
            if limit_hit and seen_body:
                break
            seen_body = True
        out.append(ln)
    while len(out) > 1 and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def choose_kind(prefix: str, text: str = "") -> str:
    """The kind `auto` resolves to (see the module docstring)."""
    head, _, line_prefix = prefix.rpartition("\n")
    if line_prefix.strip():
        return "statement" if open_brackets(line_prefix) > 0 else "line"
    first = next((ln for ln in text.split("\n") if ln.strip()), "")
    if _DEF_START.match(first) and not first.lstrip().startswith("@"):
        return "function"
    prev = next((ln for ln in reversed(head.split("\n")) if ln.strip()), "")
    if _DEF.match(prev) and prev.rstrip().endswith(":"):
        return "function"
    return "statement"


def _strip_suffix_duplicate(text: str, suffix: str) -> str:
    rest_of_line = suffix.split("\n", 1)[0].strip()
    if "\n" not in text and rest_of_line and text.rstrip().endswith(rest_of_line):
        return text.rstrip()[: -len(rest_of_line)]
    nxt = next((ln.strip() for ln in suffix.split("\n")[1:] if ln.strip()), "")
    if not suffix.split("\n", 1)[0].strip():
        nxt = next((ln.strip() for ln in suffix.split("\n") if ln.strip()), "")
    if nxt:
        lines = text.split("\n")
        for i in range(1, len(lines)):
            if lines[i].strip() == nxt:
                text = "\n".join(lines[:i]).rstrip("\n")
                break
    if rest_of_line:
        lines = text.split("\n")
        if lines[-1].rstrip().endswith(rest_of_line):
            lines[-1] = lines[-1].rstrip()[: -len(rest_of_line)]
            text = "\n".join(lines)
    return text


def _cut(text: str, kind: str, prefix: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown completion kind {kind!r}: use one of {', '.join(KINDS)}")
    if kind == "auto":
        kind = choose_kind(prefix, text)
    line_prefix = prefix.rpartition("\n")[2]
    if kind == "line":
        return _cut_line(text, line_prefix)
    if kind == "statement":
        return _cut_statement(text, line_prefix)
    return _cut_function(text, prefix)


def is_finished(text: str, kind: str, prefix: str) -> bool:
    """Whether generating more after `text` can no longer change what `postprocess` keeps (so a backend may stop).

    True once the cut is decided by text *after* it: a line break after a complete line or statement, or a
    non-blank line that ends a function. A continuation with nothing but blanks so far is never finished.
    """
    if kind == "auto":
        kind = choose_kind(prefix, text)
    line_prefix = prefix.rpartition("\n")[2]
    if kind == "line" and line_prefix.strip():
        following = _next_line(text, line_prefix)
        if following is not None:  # the line was complete: done once the next statement is
            return is_finished(following, "statement", "")
        return "\n" in text  # the cursor line has code: it ends at its first line break
    cut = _cut(text, kind, prefix)
    if not cut.strip():
        return False
    rest = text[text.find(cut) + len(cut):]
    return bool(rest.strip()) or (kind != "function" and "\n" in rest)


def postprocess(text: str, kind: str, prefix: str, suffix: str) -> str:
    """The part of `text` (the raw continuation of `prefix`) to insert before `suffix`, cut for `kind`."""
    out = _strip_suffix_duplicate(_cut(text, kind, prefix), suffix)
    return out.rstrip() if "\n" not in out else out.rstrip(" \t\n")


def drop_cut_word(text: str) -> str:
    """`text` without its last word when that word reaches the end: the text was cut by a time limit, and a word
    running into the cut may be an identifier cut in half (`def test_param_with_space_`); a whole line stays whole
    only if it ends in something other than a word character."""
    cut = len(text)
    while cut > 0 and (text[cut - 1].isalnum() or text[cut - 1] == "_"):
        cut -= 1
    return text[:cut].rstrip(" \t") if cut < len(text) else text
