"""Where a fill-in-the-middle prompt reads the code after the cursor (`[prompt] fim_at`).

An editor sends the whole buffer. On an empty line where the developer is starting a new line, the code below
is usually the parent's next statement, not the continuation of the line being written: a model that reads it
bridges to it (closes a call, repeats a line that stands below) instead of writing the line. Measured on editing
sessions with the code after the cursor (docs/evaluation.md, "The code after the cursor"), reading it cost exact
lines wherever the cursor was on an empty line, even where the lines below looked like the line's continuation.
So:
- `"inline"` (the default): the suffix is read only where the cursor is inside a line (text after it on its
  line: the rest of the line is the completion's end);
- `"continues"`: also where the lines below look like they continue the cursor's line: the next non-blank line
  is indented deeper than the cursor's line will be (the line being written opens the block whose body is
  below), or it closes a bracket that the code before the cursor left open;
- `"always"`: wherever there is code after the cursor.
Elsewhere the prompt is the prefix only, token for token what `fim = "none"` gives. With no code after the
cursor at all the FIM format stays (nothing to read either way; the left-context tasks measured it so).
"""

from __future__ import annotations

__all__ = ["continues_below", "expected_indent", "reads_suffix", "suffix_lines"]

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


def reads_suffix(fim_at: str, prefix: str, suffix: str) -> bool:
    """Whether a FIM prompt reads `suffix` under `fim_at` (the module's docstring)."""
    if fim_at == "always" or suffix.split("\n", 1)[0].strip():
        return True
    return fim_at == "continues" and continues_below(prefix, suffix)


def continues_below(prefix: str, suffix: str) -> bool:
    """Whether the lines below the cursor's (its own line's rest is blank) continue the line being written."""
    lines = suffix.split("\n")
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
