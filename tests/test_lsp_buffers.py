"""When edited and closed buffers reach the index: once the editor (any document) has been quiet."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsp_server.buffers import BufferSyncs
from lsp_server.request import DocumentRef


class QueuedChanges:
    """Stands in for the server's workspace indexes: the changes the buffers queue, in order."""

    def __init__(self) -> None:
        self.changes: list[tuple[Path, str | None]] = []

    def file_changed(self, path: Path, text: str | None = None) -> None:
        self.changes.append((path, text))


def _syncs(tmp_path: Path) -> tuple[BufferSyncs, QueuedChanges, dict[str, str], DocumentRef, DocumentRef]:
    queued, texts = QueuedChanges(), {}
    syncs = BufferSyncs(lambda: queued, texts.get)  # type: ignore[arg-type, return-value]
    a, b = DocumentRef.of((tmp_path / "a.py").as_uri()), DocumentRef.of((tmp_path / "b.py").as_uri())
    return syncs, queued, texts, a, b


async def test_a_key_in_any_document_delays_every_waiting_buffer(tmp_path: Path) -> None:
    syncs, queued, texts, a, b = _syncs(tmp_path)
    texts[a.key], texts[b.key] = "x = 1\n", "y = 2\n"
    syncs.schedule(a, delay_s=0.2)
    for _ in range(12):  # typing in b for longer than the pause, a key every 20 ms: a's buffer waits too
        await asyncio.sleep(0.02)
        syncs.schedule(b, delay_s=0.2)
        assert queued.changes == [] and syncs.pending() == 2
    await asyncio.sleep(0.4)
    assert sorted(queued.changes) == sorted([(a.path, "x = 1\n"), (b.path, "y = 2\n")])
    assert syncs.pending() == 0


async def test_a_closed_buffer_goes_back_to_the_file_at_the_pause(tmp_path: Path) -> None:
    syncs, queued, texts, a, b = _syncs(tmp_path)
    texts[b.key] = "y = 2\n"
    syncs.drop(a)  # closed (not open: no text) while b is typed in
    syncs.schedule(b, delay_s=0.05)
    assert queued.changes == []
    await asyncio.sleep(0.1)
    assert sorted(queued.changes, key=str) == sorted([(a.path, None), (b.path, "y = 2\n")], key=str)


async def test_a_buffer_reopened_before_the_pause_is_indexed_as_open(tmp_path: Path) -> None:
    syncs, queued, texts, a, _ = _syncs(tmp_path)
    syncs.drop(a)
    texts[a.key] = "z = 3\n"  # opened again with new text
    syncs.schedule(a, delay_s=0.02)
    await asyncio.sleep(0.08)
    assert queued.changes == [(a.path, "z = 3\n")]


async def test_flush_queues_what_waits_at_once(tmp_path: Path) -> None:
    syncs, queued, texts, a, _ = _syncs(tmp_path)
    syncs.drop(a)
    syncs.flush()
    assert queued.changes == [(a.path, None)] and syncs.pending() == 0
    await asyncio.sleep(0.4)  # the cancelled timer never queues it again
    assert queued.changes == [(a.path, None)]
