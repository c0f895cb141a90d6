"""A long write's checkpoints (`repocomp.index.yielding`): they call the wait set on their own thread only, and a
save reaches one at least every few files and every block it writes."""

from __future__ import annotations

import threading
from pathlib import Path

from repocomp.config.schema import Config
from repocomp.index import Index
from repocomp.index.yielding import EVERY, checkpoint, paced, yielding_to

FIXTURE = Path(__file__).parent.parent / "fixtures" / "content_repo"


def test_checkpoints_call_the_wait_of_their_own_thread_until_the_block_ends():
    calls: list[str] = []
    checkpoint()  # no wait set: nothing happens
    with yielding_to(lambda: calls.append("outer")):
        checkpoint()
        with yielding_to(lambda: calls.append("inner")):
            checkpoint()
            other = threading.Thread(target=checkpoint)  # another thread's checkpoints wait on nothing
            other.start()
            other.join(5)
        checkpoint()
    checkpoint()
    assert calls == ["outer", "inner", "outer"]


def test_paced_items_come_whole_with_a_checkpoint_before_every_nth():
    calls: list[int] = []
    seen: list[int] = []
    with yielding_to(lambda: calls.append(len(seen))):
        for item in paced(range(10), every=4):
            seen.append(item)
    assert seen == list(range(10)) and calls == [0, 4, 8]
    assert EVERY >= 1


def test_a_save_reaches_a_checkpoint_every_few_files_and_writes_the_same_index(tmp_path):
    import shutil

    root = tmp_path / "repo"
    shutil.copytree(FIXTURE, root)
    index = Index.build(root, Config())
    waits: list[int] = []
    with yielding_to(lambda: waits.append(1)):
        index.save()
    plain = Index.load(root, Config())
    # each loop over the files waits once per EVERY of them; each table written, each block of a matrix
    assert len(waits) >= 40 + 8 * (len(index.files) // EVERY)
    assert sorted(plain.files) == sorted(index.files)
    assert [f.text for f in plain.fragments if f] == [f.text for f in index.fragments if f]


def test_what_a_save_held_for_its_tables_is_let_go_a_slice_at_a_time():
    from repocomp.index.codec import let_go

    parses = list(range(1000))
    held = [parses, list(range(10))]
    sizes: list[int] = []
    with yielding_to(lambda: sizes.append(len(parses))):
        let_go(held, every=256)
    assert held == [] and parses == []
    assert sizes == [744, 488, 232, 0, 0]  # a wait after each slice freed


def test_a_save_beside_readers_reads_back_a_term_index_ready_for_queries(tmp_path):
    """The common terms' flags of the term index read back are made before the switch, beside the readers: not in
    the first request after it (80-150 ms on a monorepo), nor in a build's saves (no readers)."""
    import contextlib
    import shutil

    root = tmp_path / "repo"
    shutil.copytree(FIXTURE, root)
    index = Index.build(root, Config())
    index.save()
    assert index.term_index._flags is None
    index.save(while_written=contextlib.nullcontext)
    flags = index.term_index._flags
    assert flags is not None and flags.postings is index.term_index._base and len(flags.flags) > 0
