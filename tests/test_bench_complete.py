"""`repocomp bench complete --editor`: a line emptied, asked at, then typed; keystrokes the shown suggestion
continues with are served from it (no model call), one that departs from it asks again; `--lines N`: the lines
below written on the same way, the code below them kept."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from repocomp.bench.complete import _type_lines, _Typing
from repocomp.pipeline import CompletionOptions

FILE = "def bill(price, qty):\n    total = price * qty\n    return total\n"


@dataclass
class _Answer:
    text: str
    prompt: str


@dataclass
class ScriptedCompleter:
    """Answers each request with the next of `answers`; records (buffer's cursor line, col, kind) per request."""

    answers: list[str]
    asked: list[tuple[str, int, str]] = field(default_factory=list)

    async def acomplete(self, path: str, text: str, line: int, col: int, options: CompletionOptions) -> _Answer:
        self.asked.append((text.split("\n")[line], col, options.kind))
        assert options.cache_key == path  # as the language server asks: the document's prompts may share a prefix
        before = "".join(f"{t}\n" for t in text.split("\n")[:line]) + text.split("\n")[line][:col]
        return _Answer(self.answers[len(self.asked) - 1], prompt=before)


def _type(answers: list[str], typing: int = 0, lines: int = 1, text: str = FILE,
          ) -> tuple[_Typing, ScriptedCompleter, _Answer]:
    completer, typed = ScriptedCompleter(answers), _Typing()
    first = asyncio.run(_type_lines(completer, "bill.py", text, 1, lines, typing, len, typed))
    return typed, completer, first


def test_a_suggestion_serves_the_keys_it_continues_with_and_a_departing_key_asks_again() -> None:
    typed, completer, first = _type(["total = price + tax", " qty"])
    # asked at the emptied line (the line being started), then after `total = price *` departed from `+ tax`;
    # both for the cursor's line, as the language server asks
    assert completer.asked == [("    ", 4, "line"), ("    total = price *", 19, "line")]
    assert first.text == "total = price + tax" and typed.right == [False]
    # 19 keys: `total = price ` (14) and then ` qty` (4) served, `*` asked
    assert (typed.keys, typed.through, len(typed.requests)) == (19, 18, 1)
    assert typed.requests[0].answer == " qty"


def test_a_right_first_suggestion_serves_the_whole_line() -> None:
    typed, completer, _ = _type(["total = price * qty"])
    assert len(completer.asked) == 1 and typed.right == [True] and (typed.keys, typed.through) == (19, 19)


def test_typing_k_types_only_the_lines_first_k_characters() -> None:
    typed, completer, _ = _type(["x", "y", "z", "w"], typing=3)
    assert typed.keys == 3 and typed.through == 0
    assert [line for line, _, _ in completer.asked[1:]] == ["    t", "    to", "    tot"]


def test_lines_writes_the_lines_below_one_after_another_and_keeps_the_code_below_them() -> None:
    text = "def bill(price, qty):\n    total = price * qty\n\n    total += 1\n    return total\n"
    seen: list[str] = []

    class Recording(ScriptedCompleter):
        async def acomplete(self, path: str, text: str, line: int, col: int, options: CompletionOptions) -> _Answer:
            seen.append(text)
            return await super().acomplete(path, text, line, col, options)

    completer, typed = Recording(["total = price * qty", "total -= 1", "= 1"]), _Typing()
    first = asyncio.run(_type_lines(completer, "bill.py", text, 1, 3, 0, len, typed))
    # line 1 right at once; the blank line 2 is passed over; line 3 asked, wrong at `+`, asked again there
    assert first.text == "total = price * qty" and typed.right == [True, False]
    assert completer.asked == [("    ", 4, "line"), ("    ", 4, "line"), ("    total +", 11, "line")]
    assert len(typed.next_lines) == 1 and len(typed.requests) == 1
    # the buffer: the lines written so far, the cursor's line, then the code below the N lines (never those)
    assert seen[0] == "def bill(price, qty):\n    \n    return total\n"
    assert seen[1] == "def bill(price, qty):\n    total = price * qty\n\n    \n    return total\n"


def test_prefetch_asks_first_at_the_end_of_the_line_above_with_the_line_not_yet_written() -> None:
    seen: list[tuple[str, bool]] = []

    class Recording(ScriptedCompleter):
        async def acomplete(self, path: str, text: str, line: int, col: int, options: CompletionOptions) -> _Answer:
            seen.append((text, options.prefill))
            return await super().acomplete(path, text, line, col, options)

    completer, typed = Recording(["", "total = price * qty"]), _Typing()
    first = asyncio.run(_type_lines(completer, "bill.py", FILE, 1, 1, 0, len, typed, prefetch=True))
    # the developer rests at the end of line 0 while line 1 is not there yet; then line 1 is opened and asked at
    assert completer.asked[0] == ("def bill(price, qty):", len("def bill(price, qty):"), "line")
    assert seen[0] == ("def bill(price, qty):\n    return total\n", True) and seen[1][1] is False
    assert first.text == "total = price * qty" and typed.right == [True] and len(typed.prefetches) == 1
