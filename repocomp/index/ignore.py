"""Gitignore-style patterns (`.gitignore` files, `[index] exclude`) as a matcher whose cost is bounded.

Git's rules (gitignore(5)): blank lines and `#` comments are skipped; trailing spaces are dropped unless escaped
with `\\`; `!` negates (the last pattern that matches decides); a `/` at the start or in the middle anchors the
pattern to its folder, otherwise it matches a name at any depth; a trailing `/` matches folders only; `**` as a
whole component matches any number of folders (`**/x`, `x/**`, `x/**/y`), elsewhere it is a plain `*`; `*` and `?`
never match `/`; `[...]` is a class (`!` or `^` negates it, ranges, `[:alpha:]` and the other POSIX names).

Why not a plain regular expression (what pathspec compiles to): Python's `re` backtracks, and `*a*a*a...*b`
against a long name of `a`s tries every way to split it, which never ends. Here the pieces between two stars
have a fixed width, and each is matched at its leftmost place and never tried again (atomic groups): for a glob
that is exact, since a later place for one piece leaves less room for the rest and never helps. `**` runs are
matched the same way one level up, on whole path components. One pattern costs at most O(path length x pattern
length), never more.

A repository writes these patterns, so how many are read is bounded too (`Limits`): patterns past the limits
are ignored, and the caller says so once.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field

# Per source (one .gitignore file, or the `[index] exclude` list): the patterns read; the rest are ignored.
MAX_PATTERNS_PER_SOURCE = 4_000
# A longer pattern is ignored (no path a pattern is meant for is this long; its regex would be too).
MAX_PATTERN_CHARS = 1_024
# Patterns in one compiled chunk: a match call holds the interpreter lock for one chunk at a time.
_CHUNK_PATTERNS = 128

_FILE, _DIR = "\x00", "\x01"  # the subject is `path/` + one of these: no name holds a NUL, none ends with `/`
_ANY_COMPONENTS = "(?:[^/]*+/)"
_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "blank": " \t", "cntrl": "\x00-\x1f\x7f", "digit": "0-9",
    "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "".join(re.escape(c) for c in string.punctuation),
    "space": " \t\n\r\f\v", "upper": "A-Z", "xdigit": "0-9A-Fa-f",
}


@dataclass(frozen=True)
class Pattern:
    regex: str  # matches the subject `path/` + file-or-folder marker (the last name only when `basename`)
    negated: bool
    basename: bool  # no `/` in the pattern: it matches a name at any depth


def parse_line(line: str) -> Pattern | None:
    """One gitignore line as a `Pattern`; None for a blank line, a comment or a pattern that names nothing."""
    if not line or line.startswith("#"):
        return None
    line = _strip_trailing_spaces(line)
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    dir_only = line.endswith("/") and not line.endswith("\\/")
    if dir_only:
        line = line.rstrip("/")
    anchored = "/" in line
    components = [c for c in line.split("/") if c]
    if not components:
        return None
    return Pattern(_pattern_regex(components, dir_only), negated, basename=not anchored)


def _strip_trailing_spaces(line: str) -> str:
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        if end > 1 and line[end - 2] == "\\":  # an escaped space is kept (the escape is read later)
            break
        end -= 1
    return line[:end]


def _pattern_regex(components: list[str], dir_only: bool) -> str:
    """`components` (with `**` for any number of folders) as a regex over `path/` + marker.

    Runs of components between two `**` are each matched at their leftmost place, atomically; the last run is
    tried at every place (it must end the path)."""
    runs: list[list[str]] = [[]]
    for comp in components:
        if comp == "**":
            if runs[-1] or len(runs) == 1:
                runs.append([])
        else:
            runs[-1].append(_component_regex(comp))
    out = "".join(c + "/" for c in runs[0])
    for run in runs[1:-1]:
        out += f"(?>{_ANY_COMPONENTS}*?" + "".join(c + "/" for c in run) + ")"
    if len(runs) > 1:
        last = runs[-1]
        out += f"{_ANY_COMPONENTS}*?" + "".join(c + "/" for c in last) if last else f"{_ANY_COMPONENTS}+"
    return out + (_DIR if dir_only else f"[{_FILE}{_DIR}]") + r"\Z"


def _component_regex(glob: str) -> str:
    """One path component's glob: fixed-width pieces between stars; the middle ones at their leftmost place."""
    pieces: list[str] = [""]
    i = 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            while i < len(glob) and glob[i] == "*":
                i += 1
            pieces.append("")
            continue
        if c == "?":
            pieces[-1] += "[^/]"
        elif c == "[":
            cls, i = _char_class(glob, i)
            pieces[-1] += cls
            continue
        elif c == "\\" and i + 1 < len(glob):
            i += 1
            pieces[-1] += re.escape(glob[i])
        else:
            pieces[-1] += re.escape(c)
        i += 1
    if len(pieces) == 1:
        return pieces[0]
    middle = "".join(f"(?>[^/]*?{p})" for p in pieces[1:-1] if p)
    # the last star is greedy inside the atomic group: it ends the piece at the component's end when it can
    return f"(?>{pieces[0]}{middle}[^/]*{pieces[-1]})"


def _char_class(glob: str, start: int) -> tuple[str, int]:
    """The class at `glob[start] == '['` as a regex, and the index after it; an unclosed `[` is a literal."""
    i = start + 1
    negate = i < len(glob) and glob[i] in "!^"
    if negate:
        i += 1
    items: list[str] = []
    first = True
    while i < len(glob) and (glob[i] != "]" or first):
        first = False
        if glob.startswith("[:", i):
            end = glob.find(":]", i + 2)
            if end > 0:
                items.append(_POSIX_CLASSES.get(glob[i + 2:end], ""))
                i = end + 2
                continue
        c = glob[i]
        if c == "\\" and i + 1 < len(glob):
            i += 1
            c = glob[i]
        if i + 2 < len(glob) and glob[i + 1] == "-" and glob[i + 2] != "]":
            hi = glob[i + 2]
            if hi == "\\" and i + 3 < len(glob):
                hi, i = glob[i + 3], i + 1
            if c <= hi:  # a reversed range matches nothing
                items.append(f"{re.escape(c)}-{re.escape(hi)}")
            i += 3
            continue
        items.append(re.escape(c))
        i += 1
    if i >= len(glob):  # no closing bracket
        return re.escape("["), start + 1
    body = "".join(items)
    if negate:
        return f"[^/{body}]", i + 1
    return (f"(?!/)[{body}]" if body else "(?!)"), i + 1


@dataclass
class Limits:
    """What one walk reads from the repository's patterns, across every source (a `FileRule` holds one)."""

    max_patterns: int = 16_000  # all sources together; a source past it is not read
    max_chars: int = 256 * 1024  # pattern text, all sources together (compiling and matching cost follow it)
    patterns: int = 0
    chars: int = 0
    warnings: list[str] = field(default_factory=list)

    def take(self, where: str, lines: list[str]) -> list[Pattern]:
        """The patterns of one source within the limits; one warning for what is left out."""
        out: list[Pattern] = []
        too_long = over = 0
        for line in lines:
            if len(line) > MAX_PATTERN_CHARS:
                too_long += line.strip() != ""
                continue
            if len(out) >= MAX_PATTERNS_PER_SOURCE or self.patterns >= self.max_patterns \
                    or self.chars + len(line) > self.max_chars:
                over += line.strip() != "" and not line.startswith("#")
                continue
            pattern = parse_line(line)
            if pattern is not None:
                out.append(pattern)
                self.patterns += 1
                self.chars += len(line)
        if too_long or over:
            parts = []
            if over:
                parts.append(f"{over} pattern(s) past the limit ({MAX_PATTERNS_PER_SOURCE} per file, "
                             f"{self.max_patterns} and {self.max_chars // 1024} KiB in all)")
            if too_long:
                parts.append(f"{too_long} pattern(s) longer than {MAX_PATTERN_CHARS} characters")
            self.warnings.append(f"{where}: {' and '.join(parts)} ignored")
        return out


class PatternSet:
    """One source's patterns: `ignores(rel, is_dir)` says whether the last pattern matching `rel` ignores it."""

    def __init__(self, patterns: list[Pattern]) -> None:
        # chunks from the last pattern back, each an alternation of its patterns in reverse order (the first
        # alternative that matches is the last pattern); one group per pattern says whether it negates. A chunk
        # holds patterns of one kind: name patterns look at the last name only, never the whole path.
        self._chunks: list[tuple[re.Pattern[str], list[bool], bool]] = []
        chunk: list[Pattern] = []
        for p in reversed(patterns):
            if chunk and (len(chunk) == _CHUNK_PATTERNS or p.basename != chunk[0].basename):
                self._add_chunk(chunk)
                chunk = []
            chunk.append(p)
        if chunk:
            self._add_chunk(chunk)

    def _add_chunk(self, chunk: list[Pattern]) -> None:
        try:
            regex = re.compile("|".join(f"({p.regex})" for p in chunk))
        except re.error:  # not expected (every piece is escaped); a pattern that still fails is left out
            chunk = [p for p in chunk if _compiles(p.regex)]
            if not chunk:
                return
            regex = re.compile("|".join(f"({p.regex})" for p in chunk))
        self._chunks.append((regex, [p.negated for p in chunk], chunk[0].basename))

    def __bool__(self) -> bool:
        return bool(self._chunks)

    def ignores(self, rel: str, is_dir: bool) -> bool:
        marker = "/" + (_DIR if is_dir else _FILE)
        subject, name = rel + marker, rel.rpartition("/")[2] + marker
        for regex, negated, basename in self._chunks:
            m = regex.match(name if basename else subject)
            if m is not None:
                assert m.lastindex is not None  # the regex is an alternation of groups: a match is one of them
                return not negated[m.lastindex - 1]
        return False


def _compiles(regex: str) -> bool:
    try:
        re.compile(regex)
    except re.error:
        return False
    return True
