"""While a line is typed, the context its prompt shows stands, and on the next few lines too where configured.

A request after each typed character asks again at the same line with one more character before the cursor.
Retrieved anew, the repository context (similar code, definitions, the session's edits) can change with that
character, and a prompt that changes near its start makes the model compute it all again: on 2 cores a 1,000-token
prompt is about 5 s, where a prompt that only grew at its end costs the new tokens (`repocomp bench complete
--editor`: docs/performance.md). So the first round's context of a document's last request is kept and shown again,
laid as it was (`prompt.layout.Layout`: the in-file context from the same first line, the sections in the same
budget), while the requests stay on its line, or on one of the `[retrieval] keep_lines` lines below it, and the text
before the cursor extends the one it was made for by at most `_TYPED_CHARS` (the user types on, presses Enter and
goes on, or deletes what they typed since), and the index took in no change but to this file (the buffer itself,
synced as it is typed). A request further away, one after a deletion reaching back past that text or a paste, one
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

__all__ = ["LineContext", "LineContexts"]

_ENTRIES = 64  # documents whose last line context is kept
_TYPED_CHARS = 256  # past this much text typed since (a paste, or lines on), the context is made anew


@dataclass(frozen=True)
class LineContext:
    """The first round's context of a request."""

    query: str
    blocks: list[Any]  # the pipeline's ContextBlocks (their texts are copies: an edit elsewhere leaves them whole)
    block_sources: list[Any]  # what the prompt showed of them (the paths they occur at, as the index had them)
    layout: Layout | None  # the prompt's: its in-file context's first line and its sections' budget
    retrieval: RetrievalDecision | None
    state: Any  # the definitions' BufferState (None without definitions)
    ranked: list[Any]
    def_sources: list[Any]
    memory: MemoryDecision | None


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

    def get(self, key: str | None, hole: Hole, index: RetrievalIndex) -> LineContext | None:
        """The context to show again: the key's last one when this request types on from it, and the index took
        in no change but to this file since; on a later line, its layout's in-file context from the same line."""
        kept = self._last.get(key) if key is not None else None
        if kept is None or (kept.path, kept.epoch) != (hole.path, index.epoch) \
                or not 0 <= hole.line - kept.line <= self.keep_lines:
            return None
        if index.revisions.changed_elsewhere_since(kept.revision, hole.path):
            return None
        before = hole.prefix
        if len(before) - len(kept.before) > _TYPED_CHARS or not before.startswith(kept.before):
            return None
        lines_on, context = hole.line - kept.line, kept.context
        if lines_on and context.layout is not None:
            layout = dataclasses.replace(context.layout, lines_above=context.layout.lines_above + lines_on)
            context = dataclasses.replace(context, layout=layout)
        return context

    def put(self, key: str | None, hole: Hole, index: RetrievalIndex, context: LineContext) -> None:
        if key is None:
            return
        self._last[key] = _Kept(hole.path, hole.line, hole.prefix, index.epoch, index.revisions.now, context)
        self._last.move_to_end(key)
        while len(self._last) > _ENTRIES:
            self._last.popitem(last=False)
