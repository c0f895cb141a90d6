"""While a line is typed, the context its prompt shows stands, and on the next few lines too where configured.

A request after each typed character asks again at the same line with one more character before the cursor.
Retrieved anew, the repository context (similar code, definitions, the session's edits) can change with that
character, and a prompt that changes near its start makes the model compute it all again: on 2 cores a 1,000-token
prompt is about 5 s, where a prompt that only grew at its end costs the new tokens (`repocomp bench complete
--editor`: docs/performance.md). So each round's context of a document's last request is kept and shown again,
laid as it was (`prompt.layout.Layout`: the in-file context from the same first line, the sections in the same
budget), while the requests stay on its line, or on one of the `[retrieval] keep_lines` lines below it, and the text
before the cursor extends the one it was made for by at most `_TYPED_CHARS` (the user types on, presses Enter and
goes on, or deletes what they typed since), and the index took in no change but to this file (the buffer itself,
synced as it is typed). A request that types on runs only the last round kept: the rounds before it only drafted
the query of the round after, whose context stands (on a 7.6-million-line monorepo a retrieval is 10-20 ms a round:
`repocomp bench lsp`). A request further away, one after a deletion reaching back past that text or a paste, one
after another file changed (a save: what was retrieved may be stale), or one after the index was compacted (its
fragment ids renumbered) makes its own. Requests without a document key (the CLI, the evaluation) never keep one.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from repocomp.context.retrieval import RetrievalIndex
    from repocomp.context.retrieval_decision import RetrievalDecision
    from repocomp.memory.controller import MemoryDecision
    from repocomp.prompt.cursor import Hole
    from repocomp.prompt.layout import Layout

__all__ = ["LineContext", "LineContexts", "RoundContext"]

_ENTRIES = 64  # documents whose last line context is kept
_TYPED_CHARS = 256  # past this much text typed since (a paste, or lines on), the context is made anew


@dataclass(frozen=True)
class RoundContext:
    """One round's context: its query, the similar code retrieved (the pipeline's ContextBlocks: their texts are
    copies, an edit elsewhere leaves them whole) and what the prompt showed of it (the paths they occur at, as the
    index had them), the prompt's layout (its in-file context's first line and its sections' budget), whether the
    retrieved code was shown, and the definitions ranked and shown."""

    query: str
    blocks: list[Any]
    block_sources: list[Any]
    layout: Layout | None
    retrieval: RetrievalDecision | None
    ranked: list[Any]
    def_sources: list[Any]

    def at_lines_on(self, lines_on: int) -> RoundContext:
        """Shown `lines_on` lines below where it was made: the in-file context from the same first line."""
        if not lines_on or self.layout is None:
            return self
        return dataclasses.replace(self, layout=dataclasses.replace(
            self.layout, lines_above=self.layout.lines_above + lines_on))


@dataclass(frozen=True)
class LineContext:
    """The context of a request's rounds so far (the first at least), the definitions' BufferState (None without
    definitions) and the session memory's decision."""

    rounds: tuple[RoundContext, ...]
    state: Any
    memory: MemoryDecision | None
    serial: int = 0  # which `put` kept it: a later round is added to the context it was made with only


@dataclass(frozen=True)
class _Kept:
    """A line context and where it was made: the file, the line, the text before the cursor, the index then."""

    path: str
    line: int
    before: str
    epoch: int  # the index's compactions
    revision: int  # the index's updates
    context: LineContext


class LineContexts:
    """The last line context of each document key, the most recent `_ENTRIES` kept; shown again on its line and the
    `keep_lines` lines below it."""

    def __init__(self, keep_lines: int = 0) -> None:
        self._last: OrderedDict[str, _Kept] = OrderedDict()
        self.keep_lines = keep_lines
        self._serial = 0

    def get(self, key: str | None, hole: Hole, index: RetrievalIndex) -> LineContext | None:
        """The context to show again: the key's last one when this request types on from it, and the index took
        in no change but to this file since; on a later line, its layouts' in-file context from the same line."""
        kept = self._last.get(key) if key is not None else None
        if kept is None or (kept.path, kept.epoch) != (hole.path, index.epoch) \
                or not 0 <= hole.line - kept.line <= self.keep_lines:
            return None
        if index.revisions.changed_elsewhere_since(kept.revision, hole.path):
            return None
        before = hole.prefix
        if len(before) - len(kept.before) > _TYPED_CHARS or not before.startswith(kept.before):
            return None
        lines_on = hole.line - kept.line
        return dataclasses.replace(kept.context, rounds=tuple(rc.at_lines_on(lines_on) for rc in kept.context.rounds))

    def put(self, key: str | None, hole: Hole, index: RetrievalIndex, context: LineContext) -> LineContext:
        """Keep `context` (a request's first round) for `key`; the context as kept, to `extend`."""
        if key is None:
            return context
        self._serial += 1
        context = dataclasses.replace(context, serial=self._serial)
        self._last[key] = _Kept(hole.path, hole.line, hole.prefix, index.epoch, index.revisions.now, context)
        self._last.move_to_end(key)
        while len(self._last) > _ENTRIES:
            self._last.popitem(last=False)
        return context

    def extend(self, key: str | None, hole: Hole, made: LineContext, round_context: RoundContext) -> LineContext:
        """`made` with one more round, kept in its place while it is still the key's context and the request is on
        its line (a round made lines below has its own layout)."""
        grown = dataclasses.replace(made, rounds=(*made.rounds, round_context))
        kept = self._last.get(key) if key is not None else None
        if key is not None and kept is not None and kept.context.serial == made.serial and kept.line == hole.line:
            self._last[key] = dataclasses.replace(kept, context=grown)
        return grown
