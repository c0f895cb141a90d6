"""Block order between keystrokes: consecutive prompts of one document share their longest prefix.

A backend that reuses the computed prefix of a document's previous prompt (the in-process model, vLLM's prefix
caching) computes less when the prompt starts as the previous one did. When the previous request of the document
was on the same line or the next, the similar-code blocks both prompts show keep their previous order; what the
prompt shows is unchanged, only its order, and the best block always stays last, nearest the code (RepoCoder's
order: a model copies most from what is nearest).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from repocomp.prompt.layout import Prompt, PromptBlock

__all__ = ["BlockOrders", "stable_order"]

_ORDER_ENTRIES = 128  # (document, round) pairs whose last block order is remembered: 64 documents of 2 rounds
_ORDER_LINES = 1  # a request at most this many lines from the document's previous one keeps its block order


def _block_key(block: PromptBlock) -> tuple[str, int, int]:
    return block.source.paths[0], block.source.start_line, block.source.end_line


def stable_order(blocks: tuple[PromptBlock, ...], previous: tuple[tuple[str, int, int], ...],
                 ) -> tuple[PromptBlock, ...]:
    """`blocks` (prompt order, best last) laid so that the longest run of them starts the section as the previous
    prompt of the document started it (`previous`: its blocks' keys, in prompt order): those first, in their
    previous order, then the others in rank order. The best block always stays last, nearest the code
    (RepoCoder's order: a model copies most from what is nearest), so only the less similar blocks ever move."""
    if len(blocks) < 3 or not previous:
        return blocks  # with two blocks the best-last rule leaves one order
    movable = {_block_key(b): b for b in blocks[:-1]}
    kept: list[PromptBlock] = []
    for key in previous:
        block = movable.pop(key, None)
        if block is None:  # the previous prompt had another block here: the shared prefix ends anyway
            break
        kept.append(block)
    if not kept:
        return blocks
    taken = {id(b) for b in kept}
    return (*kept, *(b for b in blocks if id(b) not in taken))


def _reordered(prompt: Prompt, blocks: tuple[PromptBlock, ...]) -> Prompt:
    """`prompt` with its similar-code blocks laid in the order `blocks` (the same blocks): every other character
    stays where it was (the blocks' rendered texts are one run of the prompt's text, found before the in-file
    context)."""
    old, new = "".join(b.rendered for b in prompt.blocks), "".join(b.rendered for b in blocks)
    at = prompt.text.find(old)
    if at < 0 or old == new:
        return prompt
    index = {id(b): i for i, b in enumerate(blocks)}
    moved = {i: index[id(b)] for i, b in enumerate(prompt.blocks)}
    shown = tuple(replace(run, block=moved[run.block]) if run.kind == "similar" else run for run in prompt.shown)
    defs = tuple(run for run in shown if run.kind != "similar")
    similar = tuple(sorted((run for run in shown if run.kind == "similar"), key=lambda run: run.block))
    return replace(prompt, text=prompt.text[:at] + new + prompt.text[at + len(old):], blocks=blocks,
                   shown=defs + similar)


@dataclass(frozen=True)
class _Order:
    """The similar-code blocks of a document's last prompt (per round), and the cursor line it was for."""

    line: int
    keys: tuple[tuple[str, int, int], ...]


class BlockOrders:
    """The last block order of each (document, round), bounded to the most recent `_ORDER_ENTRIES`."""

    def __init__(self) -> None:
        self._orders: OrderedDict[tuple[str, int], _Order] = OrderedDict()

    def keep(self, slot: tuple[str, int], line: int, prompt: Prompt) -> Prompt:
        """`prompt` (for `line` of the slot's document) reordered after the slot's previous prompt, remembered."""
        previous = self._orders.get(slot)
        if previous is not None and abs(previous.line - line) <= _ORDER_LINES:
            prompt = _reordered(prompt, stable_order(prompt.blocks, previous.keys))
        self._orders[slot] = _Order(line, tuple(_block_key(b) for b in prompt.blocks))
        self._orders.move_to_end(slot)
        while len(self._orders) > _ORDER_ENTRIES:
            self._orders.popitem(last=False)
        return prompt
