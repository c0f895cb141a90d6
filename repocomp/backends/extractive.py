"""The model-free backend: copy the continuation out of the best retrieved fragment.

Rules, in order (candidates are tried best-first; the first that yields text wins):
1. The cursor line has text before the cursor (stripped: `cur`): find a candidate line whose stripped text starts
   with `cur` and is longer; propose the rest of that line and the lines after it. Failing that, a candidate line
   that contains `cur` anywhere with text after it.
2. The cursor line is complete (a candidate line equals it, and none continues it): propose a line break and the
   lines after that candidate line, re-indented to the buffer's indentation (the next line, at a line end).
3. Otherwise (or when rules 1 and 2 find nothing): find the previous non-blank line of the buffer in a candidate (same
   stripped text) and propose the lines after it, re-indented to the buffer's indentation. When the cursor line
   already has text, the proposal must start with it, and only the rest is proposed.
4. Nothing matches: empty text.

Comment-only lines of the candidates (`#` in Python; `//`, `/* ... */` and a block comment's `*` lines in the
brace languages: `repocomp.prompt.languages`) are dropped before matching, and the buffer's previous line is its last
non-blank line of code: the proposal is code, never comment prose copied from elsewhere.

The proposal is capped at about `max_new_tokens` code tokens and cut at the first stop sequence; callers cut it
to the completion kind with `repocomp.prompt.postprocess`.

Work is bounded on long lines (minified or generated code): the cursor line's key is its last `KEY_CHARS`
characters at most, at most `MAX_KEYS` of its tails are tried (the shortest, nearest the cursor), and only the
first `SCAN_CHARS` characters of a candidate line are searched. A request then costs O(MAX_KEYS x SCAN_CHARS) per
candidate line whatever the line lengths (keeping every tail of a 990 kB cursor line took 16 GB); lines of
ordinary code are under every cap, so their proposals are unchanged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from repocomp.backends.base import Capabilities, Generation, GenerationRequest, apply_stops
from repocomp.backends.profile import ModelProfile, served_profile
from repocomp.config.schema import BackendConfig
from repocomp.prompt.languages import PYTHON, LexicalRules, rules_for

log = logging.getLogger(__name__)

_TOKEN = re.compile(r"\w+|[^\w\s]|\n")
MIN_KEY_CHARS = 4  # shorter line tails match almost anywhere and propose noise
KEY_CHARS = 256  # the cursor line's key ends at the cursor and is at most this long (from a token start)
MAX_KEYS = 64  # tails of the key tried after the key itself (a 120-character line has fewer)
SCAN_CHARS = 1024  # a candidate line is searched in its first this many characters


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _cap_tokens(text: str, max_tokens: int) -> str:
    """Cut `text` after `max_tokens` code tokens (words, punctuation, newlines)."""
    for i, m in enumerate(_TOKEN.finditer(text)):
        if i == max_tokens:
            return text[: m.start()].rstrip(" \t")
    return text


def _key(typed: str) -> str:
    """The cursor line's text to match: stripped, and cut to its last `KEY_CHARS` characters at a token start."""
    cur = typed.strip()
    if len(cur) <= KEY_CHARS:
        return cur
    m = _TOKEN.search(cur, len(cur) - KEY_CHARS)
    return cur[m.start() :] if m else cur[-KEY_CHARS:]


def _keys(cur: str) -> list[str]:
    """`cur`, then its shorter tails starting at a token (`total = f(` -> `= f(`, `f(`), longest first; of many,
    the `MAX_KEYS` shortest."""
    tails: list[str] = []
    for m in _TOKEN.finditer(cur):
        tail = cur[m.start() :].strip()
        if m.start() and len(tail) >= MIN_KEY_CHARS and re.search(r"\w", tail):
            tails.append(tail)
    return [cur, *tails[-MAX_KEYS:]]


def _code_lines(text: str, rules: LexicalRules) -> list[str]:
    """The lines of `text` that are not comment-only (nor inside a block comment)."""
    out: list[str] = []
    opened = False  # inside a block comment
    start, close = rules.block_comment or ("", "")
    for line in text.split("\n"):
        s = line.strip()
        if opened:
            opened = close not in s
        elif rules.is_comment_line(line):
            opened = bool(start) and s.startswith(start) and close not in s[len(start):]
        else:
            out.append(line)
    return out


def _split(candidates: tuple[str, ...], rules: LexicalRules = PYTHON) -> list[list[str]]:
    """Each candidate's lines of code, each cut to its first `SCAN_CHARS` characters (split once per request)."""
    return [[line[:SCAN_CHARS] for line in _code_lines(cand, rules)] for cand in candidates]


def _after_line_prefix(cur: str, candidates: list[list[str]]) -> str | None:
    found = _match_line_prefix(cur, candidates)
    if found is None:
        # The exact line is nowhere: its tail may be (`total = compute(` vs `result = compute(`).
        for key in _keys(cur)[1:]:
            found = _match_line_prefix(key, candidates)
            if found is not None:
                break
    return found


def _match_line_prefix(cur: str, candidates: list[list[str]]) -> str | None:
    for aligned in (True, False):  # line-start matches beat matches anywhere in a line
        for lines in candidates:
            for i, line in enumerate(lines):
                if aligned:
                    body = line.lstrip()
                    if not body.startswith(cur) or len(body.rstrip()) == len(cur):
                        continue
                    rest = body[len(cur) :]
                else:
                    pos = line.find(cur)
                    if pos < 0 or not line[pos + len(cur) :].strip():
                        continue
                    rest = line[pos + len(cur) :]
                return "\n".join([rest.rstrip(), *lines[i + 1 :]]).rstrip()
    return None


def _after_previous_line(prev: str, prev_indent: int, typed: str, candidates: list[list[str]]) -> str | None:
    """Lines after the candidate line equal to `prev`, re-indented to the buffer; `typed` = cursor line so far."""
    key = prev.strip()[:SCAN_CHARS]
    for lines in candidates:
        for i, line in enumerate(lines[:-1]):
            if line.strip() != key:
                continue
            following = lines[i + 1 :]
            while following and not following[0].strip():
                following = following[1:]
            if not following:
                continue
            shift = prev_indent - _indent(line)  # move the candidate's block to the buffer's indentation
            out = []
            for fl in following:
                if fl.strip():
                    pad = "\t" if prev[:1] == "\t" or (prev[:1] != " " and fl[:1] == "\t") else " "  # Go: tabs
                    out.append(pad * max(0, _indent(fl) + shift) + fl.lstrip(" \t"))
                else:
                    out.append("")
            first = out[0]
            if typed.strip():
                if not first.strip().startswith(typed.strip()) or first.strip() == typed.strip():
                    continue
                out[0] = first.lstrip()[len(typed.strip()) :]
            else:
                # Whitespace already typed on the cursor line is not proposed again.
                out[0] = first[min(len(typed), _indent(first)) :]
            return "\n".join(out).rstrip()
    return None


def _previous_line(head: str, rules: LexicalRules = PYTHON) -> str:
    """The last non-blank line of `head` that is not a comment, found from the end (the whole buffer is never
    split)."""
    end = len(head)
    while end > 0:
        start = head.rfind("\n", 0, end) + 1
        if head[start:end].strip() and not rules.is_comment_line(head[start:end]):
            return head[start:end]
        end = start - 1
    return ""


def extract_continuation(prefix: str, candidates: tuple[str, ...], language: str | None = None) -> str:
    """The extractive proposal for the cursor at the end of `prefix` (see the module docstring)."""
    rules = rules_for(language)
    head, _, typed = prefix.rpartition("\n")
    cur = _key(typed)
    lines = _split(candidates, rules)
    if cur:
        found = _after_line_prefix(cur, lines)
        if found is not None:
            return found
        found = _after_previous_line(typed, _indent(typed), "", lines)
        if found is not None:
            return "\n" + found
    prev = _previous_line(head, rules)
    if prev:
        found = _after_previous_line(prev, _indent(prev), typed, lines)
        if found is not None:
            return found
    return ""


class ExtractiveBackend:
    """No model at all; always available, so it is the default and the fallback."""

    name = "extractive"
    capabilities = Capabilities(writes=False, in_process=False)  # copies retrieved code; nothing to load

    @classmethod
    def profile(cls, config: BackendConfig) -> ModelProfile:
        """The reference's (a served model's): retrieval measured with the extractive backend is what a user with
        Code Llama gets."""
        return served_profile(config.max_new_tokens)

    @classmethod
    def from_config(cls, config: BackendConfig) -> ExtractiveBackend:
        return cls()

    async def agenerate(self, request: GenerationRequest) -> Generation:
        text = extract_continuation(request.prefix, request.candidates, request.language)
        text = _cap_tokens(text, request.max_new_tokens)
        text, _ = apply_stops(text, request.stop)
        log.debug("extractive proposal: %r", text[:80])
        return Generation(text=text, backend=self.name, copied=True)

    async def astream(self, request: GenerationRequest) -> AsyncIterator[str]:
        """One piece: the whole proposal (there is nothing to wait for)."""
        yield (await self.agenerate(request)).text

    async def aload(self) -> None:
        pass  # nothing to load

    async def aclose(self) -> None:
        return None

    def stats(self) -> dict[str, Any]:
        return {}  # no counters
