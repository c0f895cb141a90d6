"""What of the code after the cursor a fill-in-the-middle prompt carries.

An editor sends the whole buffer. On an empty line where the developer is starting a new line, the code below
is usually the parent's next statement, not the continuation of the line being written: a model that reads it
bridges to it (closes a call, repeats a line that stands below) instead of writing the line. So with
`[prompt] fim_at = "rule"` the suffix is read only where it continues the cursor's line:
- the cursor is inside a line (text after it on its line);
- the next non-blank line is indented deeper than the cursor's line will be (the line being written opens the
  block whose body is below);
- the next non-blank line starts with a bracket that closes one the code before the cursor left open (the
  cursor is inside a call, a literal or a block that the code below ends).
Elsewhere the prompt is the prefix only. `[prompt] suffix_lines` bounds what is read (it is prefilled again after
every keystroke).
"""

from __future__ import annotations

__all__ = ["continues_below", "expected_indent", "suffix_lines"]

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}
_BRACKET_SCAN_CHARS = 8192  # the end of the prefix scanned for open brackets: a statement rarely spans more


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def expected_indent(prefix: str) -> int:
    """The indentation of the cursor's line: what is typed of it, or (an empty line at column 0) what an editor's
    auto-indent gives it: the last non-blank line's, one level deeper after a line that opens a block."""
    lines = prefix.split("\n")
    partial = lines[-1]
    if partial:
        return _indent(partial) if partial.strip() else len(partial)
    for line in reversed(lines[:-1]):
        if line.strip():
            deeper = line.rstrip().endswith((":", "{", "(", "["))
            return _indent(line) + (4 if deeper else 0)
    return 0


def _open_brackets(prefix: str) -> list[str]:
    """The brackets the end of `prefix` leaves open, innermost last (strings and comments skipped roughly: a quote
    opens a string to its closing quote on the same line, `#` and `//` end the line)."""
    stack: list[str] = []
    for line in prefix[-_BRACKET_SCAN_CHARS:].split("\n"):
        quote = ""
        i = 0
        while i < len(line):
            ch = line[i]
            if quote:
                if ch == "\\":
                    i += 1
                elif ch == quote:
                    quote = ""
            elif ch in "\"'`":
                quote = ch
            elif ch == "#" or line.startswith("//", i):
                break
            elif ch in _OPENERS:
                stack.append(ch)
            elif ch in _CLOSERS:
                if stack and stack[-1] == _CLOSERS[ch]:
                    stack.pop()
                else:
                    stack.clear()  # unbalanced as scanned (the scan started mid-statement): forget what is open
            i += 1
        # a quote left open at a line's end (a triple quote, an apostrophe in prose) ends with the line
    return stack


def continues_below(prefix: str, suffix: str) -> bool:
    """Whether the code after the cursor continues the line being written (the module's rule)."""
    lines = suffix.split("\n")
    if lines[0].strip():
        return True
    below = next((ln for ln in lines[1:] if ln.strip()), None)
    if below is None:
        return False
    if _indent(below) > expected_indent(prefix):
        return True
    first = below.lstrip()[0]
    if first in _CLOSERS:
        open_ = _open_brackets(prefix)
        return bool(open_) and open_[-1] == _CLOSERS[first]
    return False


def suffix_lines(suffix: str, max_lines: int) -> str:
    """The cursor's line's rest and at most `max_lines` lines after it (0: no bound)."""
    if max_lines <= 0:
        return suffix
    return "\n".join(suffix.split("\n")[: max_lines + 1])
