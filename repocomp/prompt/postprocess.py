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

Brace languages (Java, JavaScript/TypeScript, Go, Rust, C/C++; `language` names one, Python is the default and
keeps the rules above unchanged):
- the scanner skips `//` and `/* */` comments and the language's strings (backticks in JS/TS and Go, Rust's raw
  strings `r"..."`/`r#"..."#` and char literals, Java's text blocks);
- a cursor line that ends in `{` (`if (x) {`, `func f() {`) is complete: `auto` resolves to `line`, which offers
  the next statement at a line end, as after Python's `:`;
- `statement` skips comment-only lines before the statement (the statement is code, not prose), and a completion
  never ends inside a block comment: one left open is cut off where it starts;
- `function`: the enclosing function is the nearest header above the cursor (`func`, `fn`, `function`, an arrow
  `=> {`, or a `(...) {` line that is no `if`/`for`/`while`/...) whose brace is still open; the completion stops
  before the line that closes it (the code after the cursor has that brace). A completion that writes a function
  itself ends with the line that closes it. Without a header, before the line that closes the cursor's block;
- a suffix line of closing brackets only (`}`) is not taken for a repeat of the suffix (such lines are
  everywhere).

Then text duplicating the suffix is dropped: the rest of the cursor line when the completion ends with it
(e.g. auto-inserted closing brackets), and from the first completion line that repeats the suffix's first
non-blank line onwards (the model re-writing code that already follows).
"""

from __future__ import annotations

import logging
import re

from repocomp.prompt.languages import PYTHON, LexicalRules, rules_for

__all__ = ["KINDS", "choose_kind", "drop_cut_word", "is_finished", "postprocess", "open_brackets"]

log = logging.getLogger(__name__)

KINDS = ("line", "statement", "function", "auto")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}
_DEF = re.compile(r"^\s*(async\s+)?def\s")
_DEF_START = re.compile(r"^\s*(@|(async\s+)?def\s|class\s)")


def _indent(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())


_RUST_CHAR = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]{1,6}\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")
_RUST_RAW = re.compile(r"b?r(#*)\"")
_MULTILINE_QUOTES = ('"""', "'''", "`")  # strings that go on past a line break


class _Scanner:
    """Bracket depth across text, skipping strings (incl. triple-quoted) and comments of one language."""

    def __init__(self, depth: int = 0, rules: LexicalRules = PYTHON) -> None:
        self.depth = depth
        self.rules = rules
        self.quote = ""  # the open string's delimiter, "" when not inside a string
        self.raw = False  # the open string has no escapes (Rust raw strings, Go backticks)
        self.in_comment = False  # inside a block comment
        self.fed = 0  # characters fed so far
        self.comment_at = -1  # where the open block comment started (counted in characters fed)
        self.code = 0  # characters of code seen (outside comments, spaces not counted)

    def feed(self, text: str) -> None:
        i, n = 0, len(text)
        while i < n:
            i = self._step(text, i)
        self.fed += n

    def _step(self, text: str, i: int) -> int:
        c = text[i]
        rules = self.rules
        if self.in_comment:
            end = text.find(rules.block_comment[1], i) if rules.block_comment else -1
            if end < 0:
                return len(text)
            self.in_comment = False
            return end + len(rules.block_comment[1]) if rules.block_comment else end
        if self.quote:
            if c == "\\" and not self.raw:
                return i + 2
            if text.startswith(self.quote, i):
                i += len(self.quote)
                self.quote = ""
                return i
            if c == "\n" and self.quote not in _MULTILINE_QUOTES and not self.raw:
                self.quote = ""  # an unterminated one-line string ends with its line
            return i + 1
        if text.startswith(rules.line_comment, i):
            nl = text.find("\n", i)
            return len(text) if nl < 0 else nl
        if rules.block_comment is not None and text.startswith(rules.block_comment[0], i):
            self.in_comment, self.comment_at = True, self.fed + i
            return i + len(rules.block_comment[0])
        if not c.isspace():
            self.code += 1
        if rules.raw_strings and c in "rb":
            m = _RUST_RAW.match(text, i)
            if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                self.quote, self.raw = '"' + m.group(1), True
                return m.end()
        if rules.lifetimes and c == "'":
            m = _RUST_CHAR.match(text, i)
            return m.end() if m else i + 1  # a char literal, else a lifetime (`'a`)
        for q in rules.quotes:
            if text.startswith(q, i):
                self.quote, self.raw = q, q in rules.raw_quotes
                return i + len(q)
        if c in _OPEN:
            self.depth += 1
        elif c in _CLOSE:
            self.depth -= 1
        return i + 1


def open_brackets(line_prefix: str, language: str | None = None) -> int:
    """Brackets the text left open (never negative)."""
    return _scanned(line_prefix, rules_for(language)).depth


def _scanned(line_prefix: str, rules: LexicalRules) -> _Scanner:
    """A scanner that has read `line_prefix`: the brackets it left open (never negative) and the string or
    comment it is inside, so that a completion is read from where the cursor is (`parser.add_argument("--` leaves a
    string open: the completion's first quote closes it)."""
    sc = _Scanner(rules=rules)
    sc.feed(line_prefix)
    sc.depth, sc.fed, sc.code = max(sc.depth, 0), 0, 0
    return sc


_CONTROL = r"(?:if|for|while|switch|catch|else|do|try|finally|synchronized|return|foreach|using|lock|with|match|loop" \
           r"|unsafe|select|defer|go|case|default|class|interface|struct|enum|impl|trait|mod|namespace)\b"
_BRACE_FUNC = re.compile(r"\b(?:func|fn|function)\b[^;]*\{\s*$|=>\s*\{\s*$|^(?!\s*(?:" + _CONTROL +
                         r"|\}))[^=;{}]*\)[^;(){}]*\{\s*$")
_TRAILING_LINE_COMMENT = re.compile(r"\s*//[^\"'`]*$")


def _is_brace_function_header(line: str) -> bool:
    return bool(_BRACE_FUNC.search(_TRAILING_LINE_COMMENT.sub("", line)))


def _only_closing(line: str) -> bool:
    s = line.strip()
    return bool(s) and s[0] in _CLOSE and not s.strip("}]);,")


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


def _cut_line(text: str, line_prefix: str, rules: LexicalRules = PYTHON) -> str:
    following = _next_line(text, line_prefix)
    if following is not None:
        statement = _cut_statement(following, "", rules)
        return "\n" + statement if statement.strip() else ""
    if not line_prefix.strip():
        text = _skip_blank_lines(text)
    return text.split("\n", 1)[0]


def _cut_statement(text: str, line_prefix: str, rules: LexicalRules = PYTHON) -> str:
    sc = _scanned(line_prefix, rules)
    lines = text.split("\n")
    out: list[str] = []
    prose = rules.braces  # comment lines before the statement's code do not end it (brace languages)
    for i, line in enumerate(lines):
        out.append(line)
        code = sc.code
        sc.feed(line + ("\n" if i < len(lines) - 1 else ""))
        if not line.strip() and not "".join(out).strip():
            continue  # blank lines before the statement starts do not end it
        if prose and sc.code == code == 0:
            continue  # nothing but comments so far
        if sc.depth <= 0 and not sc.quote and not sc.in_comment and not line.rstrip().endswith("\\"):
            break
    return "\n".join(out)


def _close_comment(text: str, line_prefix: str, rules: LexicalRules) -> str:
    """`text` cut where a block comment it leaves open starts (a completion never ends inside a comment)."""
    if rules.block_comment is None:
        return text
    sc = _Scanner(0, rules)
    sc.feed(line_prefix)
    if sc.in_comment:
        return text  # the cursor is inside a comment already: its prose is what the user writes
    base = sc.fed
    sc.feed(text)
    return text[: sc.comment_at - base].rstrip(" \t") if sc.in_comment else text


def _depths(text: str, rules: LexicalRules) -> tuple[list[int], int]:
    """The bracket depth at the start of each line of `text`, and at its end."""
    sc = _Scanner(0, rules)
    starts = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        starts.append(sc.depth)
        sc.feed(line + ("\n" if i < len(lines) - 1 else ""))
    return starts, sc.depth


def _cut_brace_function(text: str, prefix: str, rules: LexicalRules) -> str:
    head_lines = prefix.split("\n")
    starts, depth = _depths(prefix, rules)
    lines = text.split("\n")
    first_full = head_lines[-1] + lines[0]
    writes_one = _is_brace_function_header(first_full) or (
        not lines[0].strip() and _is_brace_function_header(next((ln for ln in lines if ln.strip()), "")))
    stop_at: int | None = None  # the depth at which the block the completion belongs to is closed
    if writes_one:
        stop_at = depth
    else:
        low = depth
        for i in range(len(head_lines) - 1, -1, -1):
            if starts[i] < low and _is_brace_function_header(head_lines[i]):
                stop_at = starts[i]
                break
            low = min(low, starts[i])
        if stop_at is None:
            stop_at = depth - 1
    sc = _Scanner(depth, rules)
    out: list[str] = []
    opened = False
    for i, line in enumerate(lines):
        sc.feed(line + ("\n" if i < len(lines) - 1 else ""))
        opened = opened or sc.depth > stop_at
        if sc.depth <= stop_at and (opened or not writes_one) and not sc.quote and not sc.in_comment:
            if writes_one or not line.strip().startswith(tuple(_CLOSE)):
                out.append(line)  # the closing line of a function it writes; a line of code that closes one
            break
        out.append(line)
    while len(out) > 1 and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def _cut_function(text: str, prefix: str, rules: LexicalRules = PYTHON) -> str:
    if rules.braces:
        return _cut_brace_function(text, prefix, rules)
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


def choose_kind(prefix: str, text: str = "", language: str | None = None) -> str:
    """The kind `auto` resolves to (see the module docstring)."""
    rules = rules_for(language)
    if rules.braces:
        return _choose_brace_kind(prefix, text, rules)
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


def _choose_brace_kind(prefix: str, text: str, rules: LexicalRules) -> str:
    head, _, line_prefix = prefix.rpartition("\n")
    code = _TRAILING_LINE_COMMENT.sub("", line_prefix).rstrip()
    if code.strip():
        if code.endswith("{"):
            return "line"  # a complete line: the next statement at its end
        return "statement" if open_brackets(line_prefix, rules.name) > 0 else "line"
    first = next((ln for ln in text.split("\n") if ln.strip()), "")
    if _is_brace_function_header(first):
        return "function"
    prev = next((ln for ln in reversed(head.split("\n")) if ln.strip()), "")
    if _is_brace_function_header(prev):
        return "function"
    return "statement"


def _strip_suffix_duplicate(text: str, suffix: str, rules: LexicalRules = PYTHON) -> str:
    rest_of_line = suffix.split("\n", 1)[0].strip()
    if "\n" not in text and rest_of_line and text.rstrip().endswith(rest_of_line):
        return text.rstrip()[: -len(rest_of_line)]
    nxt = next((ln.strip() for ln in suffix.split("\n")[1:] if ln.strip()), "")
    if not suffix.split("\n", 1)[0].strip():
        nxt = next((ln.strip() for ln in suffix.split("\n") if ln.strip()), "")
    if nxt and not (rules.braces and _only_closing(nxt)):
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


def _cut(text: str, kind: str, prefix: str, rules: LexicalRules = PYTHON, close: bool = True) -> str:
    """`text` cut for `kind`; with `close`, a block comment left open is cut off where it starts (is_finished
    asks without: more text may still close the comment)."""
    if kind not in KINDS:
        raise ValueError(f"unknown completion kind {kind!r}: use one of {', '.join(KINDS)}")
    if kind == "auto":
        kind = choose_kind(prefix, text, rules.name)
    line_prefix = prefix.rpartition("\n")[2]
    if kind == "line":
        out = _cut_line(text, line_prefix, rules)
    elif kind == "statement":
        out = _cut_statement(text, line_prefix, rules)
    else:
        out = _cut_function(text, prefix, rules)
    return _close_comment(out, line_prefix, rules) if rules.braces and close else out


def is_finished(text: str, kind: str, prefix: str, language: str | None = None) -> bool:
    """Whether generating more after `text` can no longer change what `postprocess` keeps (so a backend may stop).

    True once the cut is decided by text *after* it: a line break after a complete line or statement, or a
    non-blank line that ends a function. A continuation with nothing but blanks so far is never finished.
    """
    rules = rules_for(language)
    if kind == "auto":
        kind = choose_kind(prefix, text, rules.name)
    line_prefix = prefix.rpartition("\n")[2]
    if kind == "line" and line_prefix.strip():
        following = _next_line(text, line_prefix)
        if following is not None:  # the line was complete: done once the next statement is
            return is_finished(following, "statement", "", rules.name)
        return "\n" in text  # the cursor line has code: it ends at its first line break
    cut = _cut(text, kind, prefix, rules, close=False)
    if not cut.strip():
        return False
    rest = text[text.find(cut) + len(cut):]
    return bool(rest.strip()) or (kind != "function" and "\n" in rest)


def postprocess(text: str, kind: str, prefix: str, suffix: str, language: str | None = None) -> str:
    """The part of `text` (the raw continuation of `prefix`) to insert before `suffix`, cut for `kind`;
    `language` (graph.languages' names, Python by default) picks the comment, string and block rules."""
    rules = rules_for(language)
    out = _strip_suffix_duplicate(_cut(text, kind, prefix, rules), suffix, rules)
    out = out.rstrip() if "\n" not in out else out.rstrip(" \t\n")
    if prefix[-1:] in (" ", "\t"):
        # after a blank (the space after `=`, an empty line's indentation) blanks the answer starts with would be
        # doubled: a model that reads the indentation as a token often begins with the space its own token carries.
        # Dropped here, so that what every caller gets is what the editor inserts, and typing the answer's first
        # character continues it (the language server serves typed characters from the answer)
        first, sep, rest = out.partition("\n")
        out = first.lstrip(" \t") + sep + rest
    return out


def drop_cut_word(text: str) -> str:
    """`text` without its last word when that word reaches the end: the text was cut by a time limit, and a word
    running into the cut may be an identifier cut in half (`def test_param_with_space_`); a whole line stays whole
    only if it ends in something other than a word character."""
    cut = len(text)
    while cut > 0 and (text[cut - 1].isalnum() or text[cut - 1] == "_"):
        cut -= 1
    return text[:cut].rstrip(" \t") if cut < len(text) else text
