"""A build in batches: the same index as one at once, saved between batches, resumed after an interruption, and
read by the language server while it grows."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from test_index_store import EXACT, FIXTURE, _assert_same

from graph import csr_rows, parse_pool
from lsp_server.folder_index import FolderIndex
from repocomp.cli import main
from repocomp.errors import IndexCorruptError
from repocomp.index import Index, heap, relation_upkeep, term_index
from repocomp.index.store import file_map, read_state, write_state
from repocomp.index.vocabulary import StoredVocabulary
from repocomp.index.walk import walk_repository

BATCHED = EXACT.replace("index", batch_bytes=200)  # the fixture's files are 50 to 400 bytes: several batches


class Interrupted(Exception):
    pass


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "index_repo"
    shutil.copytree(FIXTURE, root)
    return root


def test_a_build_in_batches_is_the_build_at_once(repo):
    seen: list[tuple[int, int]] = []
    batched = Index.build(repo, BATCHED, checkpoint=lambda i: seen.append((len(i.files), i.summary.pending_files)))
    at_once = Index.build(repo, EXACT)
    _assert_same(batched, at_once)
    assert list(batched.files) == list(at_once.files)  # in the walk's order: the same ids
    total = len(at_once.files)
    assert len(seen) >= 3 and all(files + pending == total for files, pending in seen)
    assert [f for f, _ in seen] == sorted({f for f, _ in seen})  # each checkpoint sees more files
    assert batched.summary.pending_files == 0 and "batches" in batched.summary.phases_s
    assert "batches" not in at_once.summary.phases_s  # a folder within one batch is built at once


def test_a_batch_is_reached_from_once_its_rows_are_computed_the_refresh_from_the_other_seeds_only(repo, monkeypatch):
    seeds: list[np.ndarray] = []
    computed: list[np.ndarray] = []
    Upkeep = relation_upkeep.RelationUpkeep
    reach, note_update = Upkeep.reach, Upkeep.note_update
    monkeypatch.setattr(Upkeep, "reach", lambda self, costs, s: seeds.append(np.asarray(s)) or reach(self, costs, s))
    monkeypatch.setattr(Upkeep, "note_update", lambda self, touched, *a: computed.append(touched) or
                        note_update(self, touched, *a))
    index = Index.build(repo, BATCHED)
    alive = index.alive_mask()
    batch_nodes = np.unique(index.upkeep.fragment_nodes.rows(computed[-1][alive[computed[-1]]]).indices)
    assert len(batch_nodes) and seeds
    assert not np.isin(seeds[-1], batch_nodes).any()  # the last refresh's reach: none of the last batch's nodes
    _assert_same(index, Index.build(repo, EXACT))


def test_the_walk_of_a_build_in_batches_holds_the_first_batch_of_text_and_counts_the_rest(repo):
    whole = walk_repository(repo, BATCHED)
    walked = walk_repository(repo, BATCHED, keep_chars=BATCHED.index.batch_bytes)
    assert [f.path for f in walked.files] + [p for p, _ in walked.later] == [f.path for f in whole.files]
    first = [f.text for f in walked.files]
    assert first == [f.text for f in whole.files[:len(first)]] and walked.later
    assert sum(map(len, first)) <= BATCHED.index.batch_bytes or len(first) == 1
    assert sum(map(len, first)) + len(whole.files[len(first)].text) > BATCHED.index.batch_bytes
    assert [chars for _, chars in walked.later] == [len(f.text) for f in whole.files[len(first):]]


def test_a_build_saved_between_batches_tokenizes_into_a_dict_until_its_last_save(repo):
    kinds: list[type] = []

    def saved(index: Index) -> None:
        index.save()
        kinds.append(type(index.term_index.vocab))

    batched = Index.build(repo, BATCHED, checkpoint=saved)
    assert len(kinds) >= 2 and set(kinds) == {dict}  # batches to come: the dict the next one adds to
    batched.save()
    assert isinstance(batched.term_index.vocab, StoredVocabulary)  # done: read from the file, as a load does
    _assert_same(batched, Index.build(repo, EXACT))


def test_a_build_saved_between_batches_leaves_each_batch_beside_its_tables_for_the_save(repo, monkeypatch):
    """Folding a batch into W, the term index, F and the graph's cost matrix copies them whole; the save that
    follows writes them folded in anyway, so a build saved between batches leaves that to it. One that is not
    folds as an update does."""
    monkeypatch.setattr(term_index, "_MAX_DELTA_ROWS", 0)  # any change folds, unless a save follows
    monkeypatch.setattr(term_index, "_DELTA_SHARE", 1 << 30)
    monkeypatch.setattr(relation_upkeep, "_PATCHED_ENTRIES", 0)
    monkeypatch.setattr(csr_rows, "_MERGE_ENTRIES", 0)
    monkeypatch.setattr(csr_rows, "_MERGE_SHARE", 1 << 30)
    beside: list[tuple[int, ...]] = []

    def saved(index: Index) -> None:
        costs = index.graph._csr
        beside.append((len(index.term_index._changed), len(index.upkeep._patched_rows),
                       len(index.upkeep.fragment_nodes.ids), len(costs.ids) if costs is not None else 0))
        index.save()

    batched = Index.build(repo, BATCHED, checkpoint=saved)
    assert len(beside) >= 3 and all(all(held) for held in beside[1:])
    assert len(batched.upkeep._patched_rows)  # the summary counted W's entries without making W
    assert batched.summary.relation_nonzeros == batched.relations.nnz
    assert batched.term_index._changed and not batched.term_index.folds_deferred  # the last batch's, for the save
    assert not batched.term_index._delta_made  # their postings wait for the save too
    _assert_same(batched, Index.build(repo, EXACT))  # unless a query comes first: it makes them
    assert batched.term_index._delta_made
    batched.save()
    _assert_same(batched, Index.build(repo, EXACT))
    unsaved = Index.build(repo, BATCHED)
    assert not unsaved.term_index._changed and not len(unsaved.upkeep._patched_rows)
    assert not len(unsaved.upkeep.fragment_nodes.ids) and not len(unsaved.graph.cost_matrix().ids)
    _assert_same(unsaved, batched)


def test_an_interrupted_build_leaves_a_usable_partial_index_and_resumes(repo):
    calls = [0]

    def crash(index: Index) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        Index.open(repo, BATCHED, checkpoint=crash)
    partial = Index.load(repo, BATCHED)  # saved before the checkpoint that failed: loadable, never corrupt
    total = len(Index.build(repo, EXACT).files)
    assert 0 < len(partial.files) < total and partial.summary.pending_files == total - len(partial.files)
    assert partial.term_index.score("def", "jaccard").shape[0] == len(partial.fragments)

    built_again: list[int] = []
    resumed = Index.open(repo, BATCHED, checkpoint=lambda i: built_again.append(len(i.files)))
    assert built_again and built_again[0] >= len(partial.files)  # it went on from the partial index
    _assert_same(resumed, Index.build(repo, EXACT))
    assert Index.load(repo, BATCHED).summary.pending_files == 0  # saved whole at the end


def test_the_index_command_resumes_an_interrupted_build(repo, capsys):
    config = repo / "batched.toml"
    config.write_text('[index]\nbatch_bytes = 200\n')
    calls = [0]

    def crash(index: Index) -> None:
        index.save()
        calls[0] += 1
        if calls[0] == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        Index.build(repo, BATCHED.replace("relations", top_k=32, context_weight=0.0), checkpoint=crash)
    assert main(["index", str(repo), "--config", str(config), "--json"]) == 0
    loaded = Index.load(repo, EXACT.replace("index", batch_bytes=200, threads=3).replace("relations", top_k=32,
                                                                              context_weight=0.0))
    assert loaded.summary.pending_files == 0 and len(loaded.files) == len(Index.build(repo, EXACT).files)


def test_the_server_reads_a_partial_index_without_waiting_for_a_batch(repo):
    folder = FolderIndex(root=repo, config=BATCHED)
    index = Index.build(repo, BATCHED)
    folder.index, folder.state = index, "partial"

    async def read() -> object:
        async with folder.reading() as got:
            return got

    assert asyncio.run(read()) is index  # between batches: the part indexed
    held, release = threading.Event(), threading.Event()

    def batch() -> None:
        with folder.writing():
            held.set()
            release.wait(10)

    writer = threading.Thread(target=batch)
    writer.start()
    held.wait(10)
    try:
        assert asyncio.run(asyncio.wait_for(read(), 1.0)) is None  # a batch is being added: in-file, at once
    finally:
        release.set()
        writer.join(10)
    folder.state = "ready"
    assert asyncio.run(read()) is index


def test_a_build_on_several_cores_is_the_build_on_one(repo, monkeypatch):
    # relation rows in several threads, files parsed in worker processes
    monkeypatch.setattr(relation_upkeep, "_ROWS_PER_BLOCK", 2)  # the fixture's rows in many blocks
    monkeypatch.setattr(parse_pool, "POOL_CHARS", 1)  # and its files in chunks of a few, parsed by workers
    monkeypatch.setattr(parse_pool, "CHUNK_CHARS", 500)
    workers: list[object] = []
    popen = subprocess.Popen
    monkeypatch.setattr(parse_pool.subprocess, "Popen", lambda *a, **k: workers.append(a) or popen(*a, **k))
    ran_in: list[str] = []
    block = relation_upkeep.RelationUpkeep._block
    monkeypatch.setattr(relation_upkeep.RelationUpkeep, "_block",
                        lambda self, *a: ran_in.append(threading.current_thread().name) or block(self, *a))
    threaded = Index.build(repo, EXACT.replace("index", threads=3))
    assert len(ran_in) > 3 and all(name.startswith("relations") for name in ran_in)  # the pool's threads
    assert len(workers) == 3
    ran_in.clear()
    one = Index.build(repo, EXACT.replace("index", threads=1))
    assert len(workers) == 3 and ran_in and threading.main_thread().name in ran_in
    assert not any(n.startswith("relations") for n in ran_in)
    _assert_same(threaded, one)
    threaded.save()
    _assert_same(Index.load(repo, EXACT.replace("index", threads=1)), one)  # how many threads: not a rebuild


def test_the_batch_size_is_not_a_reason_to_rebuild(repo):
    Index.build(repo, EXACT).save()
    loaded = Index.load(repo, BATCHED)  # another batch size: the same index
    _assert_same(loaded, Index.build(repo, EXACT))


def test_a_partial_index_whose_files_are_all_there_is_whole_again(repo):
    index = Index.build(repo, EXACT)
    index.summary.pending_files = 3  # interrupted after its last batch was added: nothing left to add
    index.save()
    assert Index.open(repo, EXACT).summary.pending_files == 0
    assert Index.load(repo, EXACT).summary.pending_files == 0


def test_the_server_publishes_the_index_after_its_first_batch(repo):
    from lsp_server.index_builder import IndexBuilder

    folder = FolderIndex(root=repo.resolve(), config=BATCHED)
    seen: list[tuple[str, int]] = []

    def progress(f: FolderIndex, done: int, total: int, phase: str) -> None:
        if phase == "batch":  # a batch was just added: completions could read what was indexed before it
            seen.append((f.state, len(f.index.files) if f.index is not None else -1))

    IndexBuilder(replay=lambda path: None, on_progress=progress).start(folder).join(60)
    total = len(Index.build(repo, EXACT).files)
    assert seen and all(state == "partial" for state, _ in seen)
    assert seen[0][1] < total  # the index it published first held part of the folder
    assert folder.state == "ready" and len(folder.index.files) == total


def test_the_server_makes_a_loaded_index_ready_for_its_first_update_and_request(repo):
    """A loaded index finds texts by hash once it has hashed them all: the server does that once the index is
    ready, not within the first saved edit. The graph's cost matrix and F's transpose (the first completion's and
    update's) are read in place from the file."""
    from lsp_server.index_builder import IndexBuilder

    built = Index.build(repo, EXACT)
    built.save()
    loaded = Index.load(repo, EXACT)
    assert loaded.fragments._hashed is None
    for stored, made in ((loaded.graph._csr, built.graph.cost_matrix()),
                         (loaded.upkeep._fragment_nodes_t, built.upkeep.node_fragments)):
        assert stored is not None and file_map(stored.base.data) is not None
        assert all(np.array_equal(getattr(stored.base, a), getattr(made.merged(), a)) for a in ("indptr", "indices", "data"))
    folder = FolderIndex(root=repo.resolve(), config=EXACT)
    IndexBuilder(replay=lambda path: None).start(folder).join(60)
    assert folder.state == "ready" and folder.index.fragments._hashed is not None


def test_the_index_command_reads_only_the_header_of_a_complete_index(repo, monkeypatch, capsys):
    assert main(["index", str(repo), "--json"]) == 0

    def no_load(*args, **kwargs):
        raise AssertionError("a complete stored index is rebuilt, never loaded first")

    monkeypatch.setattr(Index, "load", no_load)
    assert main(["index", str(repo), "--json"]) == 0


def test_a_build_in_batches_runs_under_the_heaps_build_threshold_and_a_build_at_once_does_not(repo):
    """The heap's build threshold (blocks given back when freed: what bounds a batched build's peak, measured by
    `repocomp bench index`) is on while a batched build runs; a folder built at once is spared its cost in time."""
    def building(config) -> set[int]:
        seen: set[int] = set()
        Index.build(repo, config, progress=lambda *_: seen.add(heap._building))
        return seen

    assert building(BATCHED) == {1} and building(EXACT) == {0} and heap._building == 0


def test_rows_later_batches_leave_stale_are_kept_by_the_partial_saves_and_recomputed_after_the_last_batch(
        repo, monkeypatch):
    events: list[tuple[str, int]] = []  # ("saved", rows stale) at each batch's save, ("refreshed", rows) per refresh
    refresh = relation_upkeep.RelationUpkeep.refresh

    def counted(self, *a):
        rows = refresh(self, *a)
        events.append(("refreshed", rows))
        return rows

    monkeypatch.setattr(relation_upkeep.RelationUpkeep, "refresh", counted)
    kept: list[np.ndarray] = []

    def checkpoint(index: Index) -> None:
        index.save()  # a partial index: saved with its stale rows listed, not recomputed
        kept.append(index.upkeep.pending_rows.copy())
        events.append(("saved", len(kept[-1])))
        loaded = Index.load(repo, BATCHED)
        assert np.array_equal(loaded.upkeep.pending_rows, kept[-1]) and loaded.relations_stale == bool(len(kept[-1]))

    index = Index.build(repo, BATCHED, checkpoint=checkpoint)
    assert len(kept) >= 3 and any(len(rows) for rows in kept)  # batches reach the rows of earlier ones ...
    last_save = max(i for i, (what, _) in enumerate(events) if what == "saved")
    work = [(i, rows) for i, (what, rows) in enumerate(events) if what == "refreshed" and rows]
    assert len(work) == 1 and work[0][0] > last_save  # ... recomputed once, after the last batch's save,
    assert work[0][1] >= max(map(len, kept))  # every row any save listed
    assert not index.relations_stale
    _assert_same(index, Index.build(repo, EXACT))


def test_stale_rows_out_of_range_are_a_corrupt_index(repo):
    Index.build(repo, BATCHED).save()
    meta, arrays = read_state(repo / ".repocomp")
    write_state(repo / ".repocomp", meta, arrays | {"stale_rows": np.array([0, len(arrays["fragment_alive"])])})
    with pytest.raises(IndexCorruptError, match="stale relation rows"):
        Index.load(repo, BATCHED)
