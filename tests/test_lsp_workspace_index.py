"""Unit tests of lsp_server.workspace_index and its parts: coalescing bursts, noise filtering, the reader-writer lock,
the watchdog adapter's events."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from lsp_server.folder_index import FolderIndex, FolderRegistry, RWLock
from lsp_server.fs_watcher import FsWatcher
from lsp_server.workspace_index import WorkspaceIndexes
from repocomp.config.schema import Config


class RecordingIndex:
    relations_stale = False

    def __init__(self) -> None:
        self.calls: list[dict[str, str | None]] = []
        self.saves = 0

    def prepare_update(self, changes: dict[str, str | None]) -> dict[str, str | None] | None:
        """The changes to apply (None: a text named `same` is what it holds already, all of them)."""
        self.calls.append(dict(changes))
        return changes if any(text != "same" for text in changes.values()) else None

    def apply_update(self, prepared: dict[str, str | None], defer_relations: bool = False) -> bool:
        return True

    def settle(self) -> None:
        self.settled = getattr(self, "settled", 0) + 1

    def save(self, while_written=None) -> None:
        self.saves += 1


def _ready_folder(indexes: WorkspaceIndexes, root: Path) -> RecordingIndex:
    folder = indexes.add_folder(root, Config())
    index = RecordingIndex()
    folder.index, folder.state = index, "ready"  # type: ignore[assignment]
    return index


def _built_folder(tmp_path: Path, save_after_s: float) -> tuple[WorkspaceIndexes, FolderIndex, Path]:
    """The content fixture copied and indexed for real, as the folder of a running worker."""
    import shutil

    from repocomp.index import Index

    root = tmp_path / "repo"
    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "content_repo", root)
    indexes = WorkspaceIndexes(debounce_s=0.01, save_after_s=save_after_s)
    folder = indexes.add_folder(root, Config())
    folder.index, folder.state = Index.build(root, folder.config), "ready"
    return indexes, folder, root


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
        assert indexes.folders[tmp_path.resolve()].version == 11 and index.settled == 11  # after each chunk
    finally:
        indexes.close()


def test_a_batch_that_changes_nothing_is_no_new_version(tmp_path: Path) -> None:
    """A buffer opened or closed as the index holds it changes nothing: no new version, so the folder still counts
    as quiet for its save."""
    indexes = WorkspaceIndexes(debounce_s=0.01)
    try:
        _ready_folder(indexes, tmp_path)
        folder = indexes.folders[tmp_path.resolve()]
        indexes.file_changed(tmp_path / "a.py", "same")
        assert indexes.wait_idle(5) and folder.version == 0
        indexes.file_changed(tmp_path / "a.py", "a = 2\n")
        assert indexes.wait_idle(5) and folder.version == 1
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


def test_a_request_cancelled_while_its_model_generates_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    """The read lock is handed back while the model generates; a writer takes it meanwhile. Cancelled then
    (`$/cancelRequest`), the request ends at once instead of waiting for the writer's batch, and holds nothing
    after; one that finishes normally waits and holds the lock again for what it reads after."""
    indexes = WorkspaceIndexes()
    try:
        _ready_folder(indexes, tmp_path)
        folder = indexes.folders[tmp_path.resolve()]
        writer_in = threading.Event()

        async def request(hold_again: list[bool]) -> None:
            async with folder.reading():
                async with folder.released():
                    threading.Thread(target=lambda: (folder.lock.acquire_write(), writer_in.set())).start()
                    await asyncio.get_running_loop().run_in_executor(None, writer_in.wait, 5)
                    await asyncio.sleep(10)  # the model generating
                hold_again.append(True)

        async def main() -> tuple[float, list[bool]]:
            held: list[bool] = []
            task = asyncio.ensure_future(request(held))
            while not writer_in.is_set():
                await asyncio.sleep(0.01)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            return loop.time() - t0, held

        took, held = asyncio.run(main())
        assert took < 1.0 and not held  # the writer still holds the lock: nothing waited for it
        assert folder.lock._readers == 0  # and the request holds nothing
        folder.lock.release_write()

        async def finishing() -> int:
            async with folder.reading():
                async with folder.released():
                    pass
                return folder.lock._readers

        assert asyncio.run(finishing()) == 1 and folder.lock._readers == 0
    finally:
        indexes.close()


def test_a_request_without_the_index_hands_back_nothing_while_its_model_generates(tmp_path: Path) -> None:
    """While a build's batch is being written the request goes in-file without the lock: its model's generation
    leaves the lock alone (the writer keeps it, no reader is counted)."""
    indexes = WorkspaceIndexes()
    try:
        _ready_folder(indexes, tmp_path)
        folder = indexes.folders[tmp_path.resolve()]
        folder.state = "partial"
        folder.lock.acquire_write()

        async def main() -> object:
            async with folder.reading() as index:
                async with folder.released():
                    pass
                return index

        assert asyncio.run(main()) is None
        assert folder.lock._writer and folder.lock._readers == 0
        folder.lock.release_write()
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


def test_the_watcher_turns_moves_and_directory_events_into_file_changes(tmp_path: Path) -> None:
    registry = FolderRegistry()
    folder = registry.add_folder(tmp_path, Config())
    known = {"pkg/a.py": None, "pkg/sub/b.py": None, "top.py": None}
    folder.index = SimpleNamespace(files=known)  # type: ignore[assignment]
    (tmp_path / "new" / "deep").mkdir(parents=True)
    (tmp_path / "new" / "deep" / "c.py").write_text("c = 1\n")
    seen: list[tuple[str, Path]] = []
    watcher = FsWatcher(registry, changed=lambda p: seen.append(("changed", p)),
                        deleted=lambda p: seen.append(("deleted", p)))

    def event(kind: str, src: Path, dest: Path | None = None, is_dir: bool = False) -> None:
        watcher._on_fs_event(SimpleNamespace(event_type=kind, src_path=bytes(src), is_directory=is_dir,
                                             dest_path=str(dest) if dest else ""))

    event("moved", tmp_path / "x.py", tmp_path / "y.py")
    assert seen == [("deleted", tmp_path / "x.py"), ("changed", tmp_path / "y.py")]
    seen.clear()
    event("moved", tmp_path / "pkg", tmp_path / "new", is_dir=True)  # every known file under it goes, the new come
    assert seen == [("deleted", folder.root / "pkg/a.py"), ("deleted", folder.root / "pkg/sub/b.py"),
                    ("changed", tmp_path / "new" / "deep" / "c.py")]
    seen.clear()
    event("modified", tmp_path / "new", is_dir=True)  # a directory's own modification says nothing
    event("closed", tmp_path / "top.py")
    event("deleted", tmp_path / "top.py")
    assert seen == [("changed", tmp_path / "top.py"), ("deleted", tmp_path / "top.py")]


def _relations_by_text(index) -> dict[tuple[str, str], float]:
    """The relation matrix keyed by fragment text (unique among live fragments), so two indexes whose ids differ
    (an updated one and a fresh build) compare exactly."""
    w = index.relations.tocoo()
    texts = [f.text if f is not None else None for f in index.fragments]
    return {(texts[i], texts[j]): float(v) for i, j, v in zip(w.row, w.col, w.data) if v}


def test_stale_relations_are_refreshed_in_the_background_and_a_changed_index_is_saved(tmp_path: Path) -> None:
    from repocomp.index import Index

    indexes, folder, root = _built_folder(tmp_path, save_after_s=0.3)
    config = folder.config
    try:
        index = folder.index
        edited = (root / "ledger" / "refunds.py").read_text().replace("subtotal", "sub_total")
        index.update_file("ledger/refunds.py", text=edited)  # a request's buffer sync: rows left stale
        assert index.relations_stale
        for _ in range(200):  # the worker refreshes between changes, without being asked
            if not index.relations_stale:
                break
            threading.Event().wait(0.05)
        assert not index.relations_stale

        (root / "ledger" / "refunds.py").write_text(edited)  # the same text saved: a rebuild sees it
        fresh = Index.build(root, config)
        assert _relations_by_text(index) == _relations_by_text(fresh)

        indexes.file_changed(root / "ledger" / "notes.py", "NOTE = 1\n")
        assert indexes.wait_idle(10)
        for _ in range(200):  # saved once the folder has been quiet for save_after_s
            if folder.saved_version == folder.version:
                break
            threading.Event().wait(0.05)
        assert folder.saved_version == folder.version == 1
        assert "ledger/notes.py" in Index.load(root, config).files
    finally:
        indexes.close()


def test_rwlock_downgrade_lets_readers_in_and_keeps_writers_out() -> None:
    lock = RWLock()
    lock.acquire_write()
    assert not lock.try_acquire_read()
    lock.downgrade()
    assert lock.try_acquire_read()  # a reader beside the downgraded writer
    lock.release_read()
    wrote = threading.Event()
    writer = threading.Thread(target=lambda: (lock.acquire_write(), wrote.set(), lock.release_write()))
    writer.start()
    assert not wrote.wait(0.2)  # a writer waits for the downgraded one
    lock.release_read()
    writer.join(2)
    assert wrote.is_set()


def _change_and_wait_for_the_save(indexes: WorkspaceIndexes, folder, root: Path) -> None:
    """The folder's index built, one file changed, and the change worker's save of it waited for."""
    from repocomp.index import Index

    folder.index, folder.state = Index.build(root, Config()), "ready"
    indexes.file_changed(root / "ledger" / "notes.py", "NOTE = 1\n")
    assert indexes.wait_idle(10)
    for _ in range(200):
        if folder.saved_version == folder.version:
            break
        threading.Event().wait(0.05)
    assert folder.saved_version == folder.version == 1


def test_a_save_lets_requests_read_while_the_index_file_is_written(tmp_path: Path, monkeypatch) -> None:
    """The change worker's save makes what it writes under the write lock, then writes the file while requests
    read on (a read lock taken from another thread succeeds mid-write), then holds the write lock again."""
    import shutil

    from repocomp.index import Index, persistence

    root = tmp_path / "repo"
    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "content_repo", root)
    indexes = WorkspaceIndexes(debounce_s=0.01, save_after_s=0.1)
    read_mid_write: list[bool] = []
    write_mapped = persistence.write_mapped

    def spying(*args, **kwargs):
        got: list[bool] = []
        request = threading.Thread(target=lambda: got.append(folder.lock.try_acquire_read()))
        request.start()
        request.join(5)
        if got == [True]:
            folder.lock.release_read()
        read_mid_write.append(got == [True] and not folder.lock._writer)
        return write_mapped(*args, **kwargs)

    monkeypatch.setattr(persistence, "write_mapped", spying)
    try:
        folder = indexes.add_folder(root, Config())
        _change_and_wait_for_the_save(indexes, folder, root)
        assert read_mid_write == [True]
        assert folder.lock.try_acquire_read()  # nothing held after the save
        folder.lock.release_read()
        assert "ledger/notes.py" in Index.load(root, Config()).files
    finally:
        indexes.close()



def test_a_save_waits_at_its_checkpoints_while_a_request_is_answered(tmp_path: Path, monkeypatch) -> None:
    """The change worker's save waits between its slices while the server answers a request
    (`FOREGROUND.serving()`), goes on once it is answered, and writes the change."""
    import shutil
    import time

    from lsp_server.foreground import FOREGROUND
    from repocomp.index import Index

    root = tmp_path / "repo"
    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "content_repo", root)
    indexes = WorkspaceIndexes(debounce_s=0.01, save_after_s=0.1)
    inside, waited, answered_at = threading.Event(), [], []
    original = FOREGROUND.wait_quiet

    def request() -> None:
        with FOREGROUND.serving():
            inside.set()
            time.sleep(0.4)
            answered_at.append(time.monotonic())

    def checkpoint_wait() -> None:
        if not waited:  # the save's first checkpoint: a request comes, answered in 0.4 s
            threading.Thread(target=request).start()
            assert inside.wait(5)
        began = time.monotonic()
        original()
        waited.append((began, time.monotonic()))

    monkeypatch.setattr(FOREGROUND, "wait_quiet", checkpoint_wait)
    try:
        folder = indexes.add_folder(root, Config())
        _change_and_wait_for_the_save(indexes, folder, root)
        assert len(waited) > 10
        first_began, first_ended = waited[0]
        assert answered_at and first_ended >= answered_at[0] and first_ended - first_began >= 0.3
        assert "ledger/notes.py" in Index.load(root, Config()).files
    finally:
        indexes.close()


def test_an_update_goes_after_the_request_being_answered_and_settles_the_index_for_the_next(tmp_path: Path) -> None:
    """The worker takes the write lock once the request in flight is answered (its wait on the model included),
    and makes the graph's cost matrix current off the next request's path."""
    from lsp_server.foreground import FOREGROUND

    indexes, folder, root = _built_folder(tmp_path, save_after_s=60)
    try:
        index = folder.index
        index.graph.cost_matrix()
        text = (root / "ledger" / "refunds.py").read_text() + "\n\ndef added():\n    return 1\n"
        answered = threading.Event()

        def request() -> None:  # a request waiting on its model for 0.4 s, its read lock handed back
            with FOREGROUND.serving(), FOREGROUND.waiting():
                answered.set()
                time.sleep(0.4)

        thread = threading.Thread(target=request)
        thread.start()
        assert answered.wait(5)
        began = time.monotonic()
        indexes.file_changed(root / "ledger" / "refunds.py", text)
        while folder.version == 0 and time.monotonic() - began < 10:
            time.sleep(0.01)
        applied_after = time.monotonic() - began
        thread.join(5)
        assert folder.version == 1 and 0.25 <= applied_after < 5, applied_after
        assert indexes.wait_idle(10)
        for _ in range(200):  # settled: the next request reads the matrix as it is
            if not index.graph._touched:
                break
            time.sleep(0.02)
        assert not index.graph._touched
    finally:
        indexes.close()
