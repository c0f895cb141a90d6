"""A long write's checkpoints (`repocomp.index.yielding`): they call the wait set on their own thread only, and a
save reaches one at least every few files and every block it writes."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from repocomp.config.schema import Config
from repocomp.index import Index
from repocomp.index.term_index import check_compressed
from repocomp.index.yielding import EVERY, SPAN, checkpoint, paced, spans, yielding_to

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


def test_spans_cover_the_range_with_a_checkpoint_between_two():
    calls: list[int] = []
    covered: list[int] = []
    with yielding_to(lambda: calls.append(len(covered))):
        for part in spans(10, size=4):
            covered.extend(range(10)[part])
        assert list(spans(0)) == []
    assert covered == list(range(10)) and calls == [4, 8]


def test_a_compressed_table_is_checked_a_span_at_a_time_and_a_fault_past_the_first_span_is_found():
    """A stored table read back by a save: each span's ids and pointers checked, with a checkpoint between
    (a monorepo's took 33 ms of one slice checked at once)."""
    n = 2 * SPAN + 5  # entries: three spans of pointers and of ids
    indptr = np.arange(n + 1, dtype=np.int32)
    ids = np.arange(n, dtype=np.int32) % 7
    waits: list[int] = []
    with yielding_to(lambda: waits.append(1)):
        assert check_compressed(indptr, n, ids, 7)
    assert len(waits) == 4  # two between the pointers' three spans, two between the ids'
    bad_id = ids.copy()
    bad_id[SPAN + 3] = 7  # out of range, in the second span
    falling = indptr.copy()
    falling[2 * SPAN + 1] = 0  # a pointer falls in the last span
    bad_end = indptr.copy()
    bad_end[-1] = n - 1
    assert not check_compressed(indptr, n, bad_id, 7)
    assert not check_compressed(falling, n, ids, 7)
    assert not check_compressed(bad_end, n, ids, 7)
    assert not check_compressed(indptr[:-1], n, ids, 7)
    assert not check_compressed(indptr, n, ids - 1, 7)  # a negative id
    assert check_compressed(np.zeros(4, np.int32), 3, ids[:0], 0)  # three empty entries


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
