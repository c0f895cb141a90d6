"""When edited and closed buffers reach the index: once the editor (any document) has been quiet, a closed one's
file after a longer rest."""

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


def _syncs(tmp_path: Path, delay_s: float, revert_delay_s: float
           ) -> tuple[BufferSyncs, QueuedChanges, dict[str, str], DocumentRef, DocumentRef]:
    queued, texts = QueuedChanges(), {}
    syncs = BufferSyncs(lambda: queued, texts.get, delay_s, revert_delay_s)  # type: ignore[arg-type, return-value]
    a, b = DocumentRef.of((tmp_path / "a.py").as_uri()), DocumentRef.of((tmp_path / "b.py").as_uri())
    return syncs, queued, texts, a, b


async def test_a_key_in_any_document_delays_every_waiting_buffer(tmp_path: Path) -> None:
    syncs, queued, texts, a, b = _syncs(tmp_path, 0.2, 0.2)
    texts[a.key], texts[b.key] = "x = 1\n", "y = 2\n"
    syncs.schedule(a)
    for _ in range(12):  # typing in b for longer than the pause, a key every 20 ms: a's buffer waits too
        await asyncio.sleep(0.02)
        syncs.schedule(b)
        assert queued.changes == [] and syncs.pending() == 2
    await asyncio.sleep(0.4)
    assert sorted(queued.changes) == sorted([(a.path, "x = 1\n"), (b.path, "y = 2\n")])
    assert syncs.pending() == 0


async def test_a_closed_buffer_goes_back_to_the_file_after_a_longer_rest(tmp_path: Path) -> None:
    syncs, queued, texts, a, b = _syncs(tmp_path, 0.05, 0.4)
    texts[b.key] = "y = 2\n"
    syncs.drop(a)  # closed (no text any more), then b typed in
    syncs.schedule(b)
    await asyncio.sleep(0.2)
    assert queued.changes == [(b.path, "y = 2\n")] and syncs.pending() == 1  # b at the pause, a not yet
    syncs.schedule(b)  # a key restarts a's rest too
    await asyncio.sleep(0.3)
    assert queued.changes == [(b.path, "y = 2\n")] * 2
    await asyncio.sleep(0.4)
    assert queued.changes == [(b.path, "y = 2\n")] * 2 + [(a.path, None)] and syncs.pending() == 0


async def test_a_buffer_reopened_before_the_rest_is_indexed_as_open(tmp_path: Path) -> None:
    syncs, queued, texts, a, _ = _syncs(tmp_path, 0.02, 5.0)
    syncs.drop(a)
    texts[a.key] = "z = 3\n"  # opened again with new text
    syncs.schedule(a)
    await asyncio.sleep(0.1)
    assert queued.changes == [(a.path, "z = 3\n")] and syncs.pending() == 0


async def test_flush_queues_what_waits_at_once(tmp_path: Path) -> None:
    syncs, queued, texts, a, b = _syncs(tmp_path, 0.05, 5.0)
    texts[b.key] = "y = 2\n"
    syncs.drop(a)
    syncs.schedule(b)
    syncs.flush()
    assert sorted(queued.changes, key=str) == sorted([(a.path, None), (b.path, "y = 2\n")], key=str)
    assert syncs.pending() == 0
    await asyncio.sleep(0.2)  # the cancelled timer never queues them again
    assert len(queued.changes) == 2
