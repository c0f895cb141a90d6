"""The editing session of each workspace folder: what the editor reports, turned into the engine's memory events.

The engine's session memory (`repocomp.memory`) takes plain events and knows nothing of LSP. Here an LSP change
(a range in the editor's position encoding, or a whole new text) becomes a `TextEdit` on the text as it was, a
completion shown becomes `completion_shown`, and acceptance is recorded when the editor runs the inline item's
`repocomp.accept` command or, for editors that do not run it, when the next change inserts the text that was shown.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types

from lsp_server import convert

if TYPE_CHECKING:
    from repocomp.config.schema import Config
    from repocomp.memory.events import TextEdit
    from repocomp.memory.session import SessionMemory

logger = logging.getLogger(__name__)

ACCEPT_COMMAND = "repocomp.accept"


def text_edit(path: str, old: str, change: types.TextDocumentContentChangeEvent, encoding: str,
              now: float) -> TextEdit | None:
    """The change as an edit of `old` (line breaks normalized to \\n); None when it changes nothing."""
    from repocomp.memory.events import TextEdit

    lines = convert.split_lines(old)
    if isinstance(change, types.TextDocumentContentChangePartial):
        start, end = change.range.start, change.range.end
        if start.line >= len(lines) or end.line >= len(lines):  # pygls clamps; the removed text is what it had
            end = types.Position(line=len(lines) - 1, character=len(lines[-1]))
            start = start if start.line < len(lines) else end
        sl, el = start.line, end.line
        sc = convert.client_col_to_index(lines[sl], start.character, encoding)
        ec = convert.client_col_to_index(lines[el], end.character, encoding)
        removed = "\n".join([lines[sl][sc:]] + lines[sl + 1:el] + [lines[el][:ec]]) if el > sl \
            else lines[sl][sc:ec]
        inserted = "\n".join(convert.split_lines(change.text))
    else:  # the whole text: the edit is what lies between the common head and tail
        new = convert.split_lines(change.text)
        old_text, new_text = "\n".join(lines), "\n".join(new)
        # whole equal lines first (compared in C: a full-sync editor sends the whole buffer at every keystroke),
        # then characters within the first and last lines that differ
        same = 0
        while same < min(len(lines), len(new)) and lines[same] == new[same]:
            same += 1
        limit = min(len(old_text), len(new_text))
        head = min(sum(len(line) + 1 for line in lines[:same]), limit)
        while head < limit and old_text[head] == new_text[head]:
            head += 1
        same_tail = 0
        while same_tail < min(len(lines), len(new)) - same and lines[-1 - same_tail] == new[-1 - same_tail]:
            same_tail += 1
        tail = min(sum(len(line) + 1 for line in lines[len(lines) - same_tail:]), limit - head)
        while tail < limit - head and old_text[-1 - tail] == new_text[-1 - tail]:
            tail += 1
        removed, inserted = old_text[head:len(old_text) - tail], new_text[head:len(new_text) - tail]
        sl, sc = _line_col(old_text, head)
        el, ec = _line_col(old_text, len(old_text) - tail)
    if removed == inserted:
        return None
    return TextEdit(path, sl, sc, el, ec, removed, inserted, now)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset)
    return line, offset - (text.rfind("\n", 0, offset) + 1)


@dataclass
class _Shown:
    """The last completion shown in a document: accepted if the next change inserts it."""

    path: str
    line: int
    text: str


class Sessions:
    """The session memory of each folder (created on first use, saved to the user's cache on shutdown)."""

    def __init__(self) -> None:
        self._memories: dict[Path, SessionMemory] = {}
        self._shown: dict[str, _Shown] = {}  # by document key

    def memory(self, root: Path, config: Config) -> SessionMemory | None:
        """The folder's memory; None when `[memory] enabled` is off."""
        if not config.memory.enabled:
            return None
        memory = self._memories.get(root)
        if memory is None:
            from repocomp.memory.session import SessionMemory
            from repocomp.memory.store import RecallStore

            store = RecallStore(root, config.memory.store_max_bytes) if config.memory.persist else None
            memory = self._memories[root] = SessionMemory(root, config.memory, store)
        return memory

    def opened(self, memory: SessionMemory, path: str, text: str) -> None:
        memory.opened(path, text, time.time())

    def changed(self, memory: SessionMemory, key: str, edit: TextEdit) -> None:
        shown = self._shown.pop(key, None)
        memory.edited(edit)
        if shown is not None and edit.inserted and edit.path == shown.path and edit.start_line == shown.line \
                and edit.inserted.strip() == shown.text.strip():  # an editor that does not run the command
            self._accept(memory, shown)

    def shown(self, memory: SessionMemory, key: str, path: str, line: int, text: str) -> None:
        memory.completion_shown(path, line, text, time.time())
        self._shown[key] = _Shown(path, line, text)

    def accept(self, memory: SessionMemory, key: str, path: str, line: int, text: str) -> None:
        """The editor ran the inline item's command: the completion was accepted (its insertion follows)."""
        self._shown.pop(key, None)
        self._accept(memory, _Shown(path, line, text))

    def _accept(self, memory: SessionMemory, shown: _Shown) -> None:
        memory.completion_accepted(shown.path, shown.line, shown.text, time.time())

    def closed(self, key: str) -> None:
        self._shown.pop(key, None)

    def save_all(self) -> None:
        for root, memory in self._memories.items():
            try:
                memory.save()
            except Exception:  # noqa: BLE001 - the session is lost, not the server
                logger.warning("could not save the session memory of %s", root, exc_info=True)

    def stats(self) -> dict[str, int]:
        """The folders' memory counters added up (edits, hunks, thoughts, shown and accepted completions)."""
        out: dict[str, int] = {}
        for memory in self._memories.values():
            for name, value in memory.stats().items():
                out[name] = out.get(name, 0) + value
        return out
