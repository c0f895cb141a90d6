"""Unit tests of lsp_server.workspace_index: coalescing bursts, noise filtering, the reader-writer lock."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from lsp_server.workspace_index import RWLock, WorkspaceIndexes
from repocomp.config import Config


class RecordingIndex:
    def __init__(self) -> None:
        self.calls: list[dict[str, str | None]] = []

    def update_files(self, changes: dict[str, str | None]) -> None:
        self.calls.append(dict(changes))


def _ready_folder(indexes: WorkspaceIndexes, root: Path) -> RecordingIndex:
    folder = indexes.add_folder(root, Config())
    index = RecordingIndex()
    folder.index, folder.state = index, "ready"  # type: ignore[assignment]
    return index


def test_a_burst_of_500_changes_is_one_batch_in_chunks(tmp_path: Path) -> None:
    indexes = WorkspaceIndexes(debounce_s=0.05, max_delay_s=2.0)
    try:
        index = _ready_folder(indexes, tmp_path)
        for i in range(500):
            indexes.file_changed(tmp_path / "pkg" / f"m{i}.py")
        indexes.file_changed(tmp_path / "pkg" / "m0.py", "x = 1\n")  # the latest change of a path wins
        indexes.file_deleted(tmp_path / "gone.py")
        indexes.file_changed(tmp_path / ".git" / "index")  # noise
        indexes.file_changed(tmp_path / ".repocomp" / "index.bin")  # the index itself
        indexes.file_changed(tmp_path.parent / "elsewhere.py")  # outside every folder
        assert indexes.wait_idle(10)
        seen: dict[str, str | None] = {}
        for call in index.calls:
            assert len(call) <= 50
            seen.update(call)
        assert len(index.calls) == 11  # 501 paths in chunks of 50, one batch
        assert set(seen) == {f"pkg/m{i}.py" for i in range(500)} | {"gone.py"}
        assert seen["pkg/m0.py"] == "x = 1\n" and seen["gone.py"] is None and seen["pkg/m7.py"] is None
        assert indexes.folders[tmp_path.resolve()].version == 11
    finally:
        indexes.close()


def test_changes_during_the_build_are_replayed_from_disk(tmp_path: Path) -> None:
    indexes = WorkspaceIndexes(debounce_s=0.01)
    try:
        folder = indexes.add_folder(tmp_path, Config())
        folder.state = "building"
        indexes.file_changed(tmp_path / "a.py", "a = 1\n")
        assert indexes.wait_idle(5)
        assert folder._deferred == {tmp_path / "a.py"}
    finally:
        indexes.close()


def test_reading_waits_for_a_writer_without_blocking_the_loop(tmp_path: Path) -> None:
    indexes = WorkspaceIndexes()
    try:
        _ready_folder(indexes, tmp_path)
        folder = indexes.folders[tmp_path.resolve()]
        folder.lock.acquire_write()
        released = threading.Timer(0.2, folder.lock.release_write)

        async def main() -> float:
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            t = asyncio.ensure_future(ticker())
            released.start()
            async with folder.reading() as index:
                assert index is folder.index
            t.cancel()
            return ticks

        assert asyncio.run(main()) >= 5  # the loop kept running while the reader waited
        assert folder.lock.try_acquire_read()
        folder.lock.release_read()
    finally:
        indexes.close()


def test_rwlock_prefers_writers() -> None:
    lock = RWLock()
    assert lock.try_acquire_read()
    got = threading.Event()
    writer = threading.Thread(target=lambda: (lock.acquire_write(), got.set(), lock.release_write()))
    writer.start()
    for _ in range(100):
        if lock._waiting_writers:
            break
        threading.Event().wait(0.01)
    assert not lock.try_acquire_read()  # a waiting writer blocks new readers
    lock.release_read()
    writer.join(2)
    assert got.is_set()
