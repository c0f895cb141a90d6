"""Index round trip, incremental updates equal a full rebuild, crash safety, corrupt/old index, bad inputs."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import numpy.lib.format
import pytest

from graph.parsing import ParsedFile, parse_source
from repocomp.cli import main
from repocomp.config.loading import config_from_dict, load_config
from repocomp.errors import ConfigError, IndexCorruptError, IndexStaleError, RepocompError
from repocomp.index import Index, fragment_store, stored_parse
from repocomp.index import codec as index_codec
from repocomp.index.store import INDEX_FILE, Chunks, file_map, read_state, whole, write_state
from repocomp.index.vocabulary import StoredVocabulary

FIXTURE = Path(__file__).parent.parent / "fixtures" / "index_repo"
# no truncation and context relations on, so the comparison covers Eq. 7 as well
EXACT = config_from_dict({"relations": {"top_k": 10_000, "context_weight": 0.5}})


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "index_repo"
    shutil.copytree(FIXTURE, root)
    return root


def _relations_by_location(index: Index) -> dict:
    """Relations keyed by fragment text (ids differ between an updated and a rebuilt index)."""
    w = index.relations.tocoo()
    out = {}
    for i, j, v in zip(w.row, w.col, w.data):
        out[(index.fragments[i].text, index.fragments[j].text)] = float(v)
    return out


def _assert_same(a: Index, b: Index) -> None:
    ra, rb = _relations_by_location(a), _relations_by_location(b)
    assert ra.keys() == rb.keys()
    for key in ra:
        assert ra[key] == pytest.approx(rb[key], rel=1e-5), key
    texts_a = sorted(f.text for f in a.fragments if f)
    assert texts_a == sorted(f.text for f in b.fragments if f)
    query = "engine = Engine(3)\nengine.start()"
    sa = dict(zip((f.text for f in a.fragments if f), a.term_index.score(query, "bm25")[a.alive_mask()]))
    sb = dict(zip((f.text for f in b.fragments if f), b.term_index.score(query, "bm25")[b.alive_mask()]))
    assert sa == pytest.approx(sb)


def test_round_trip(repo):
    built = Index.build(repo, EXACT)
    built.save()
    assert isinstance(built.term_index.vocab, StoredVocabulary)  # read back from what was written, as a load does
    loaded = Index.load(repo, EXACT)
    _assert_same(built, loaded)
    assert loaded.summary.files == built.summary.files
    assert all(loaded.files[p].parsed.calls == e.parsed.calls for p, e in built.files.items())
    assert sum(len(e.parsed.calls) for e in built.files.values()) > 5
    assert loaded.file_lines("app.py") == (repo / "app.py").read_text().split("\n")
    assert isinstance(loaded.term_index.vocab, StoredVocabulary) and len(loaded.term_index.vocab) == len(
        built.term_index.vocab)


def test_a_windows_lines_are_read_from_its_fragment_built_loaded_and_edited(repo):
    from repocomp.index.fragments import window_spans

    built = Index.build(repo, EXACT)
    built.save()
    loaded = Index.load(repo, EXACT)
    loaded.update_file("app.py", text=(repo / "app.py").read_text() + "\nextra = 1\n" * 12)
    fc = EXACT.fragments
    for index in (built, loaded):
        checked = 0
        for path in index.files:
            lines = index.file_lines(path)
            spans = window_spans(len(lines), fc.window, fc.stride)
            for start, end in spans:
                assert index.window_text(path, start, end) == "\n".join(lines[start:end])
                checked += 1
            # lines that are no window: read from the file by the caller
            assert index.window_text(path, 1, 1 + fc.window) is None
            if spans[-1][1] - spans[-1][0] < fc.window:  # the last window, cut at the file's end
                assert index.window_text(path, spans[-1][0], spans[-1][0] + fc.window) is None
        assert checked >= 10
    assert loaded.window_text("missing.py", 0, fc.window) is None


def _cached_share(path: Path) -> float:
    """The share of `path`'s pages in the kernel's page cache (mincore on a map of it)."""
    import ctypes
    import mmap

    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:  # (never written)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        vec = ctypes.create_string_buffer(pages)
        start = ctypes.c_char.from_buffer(mapped)
        assert libc.mincore(ctypes.addressof(start), size, vec) == 0, ctypes.get_errno()
        del start  # (the map closes only once nothing points into it)
    return sum(b & 1 for b in vec.raw) / pages


def test_prepare_leaves_the_index_file_in_the_kernels_cache(repo):
    Index.build(repo, EXACT).save()
    loaded = Index.load(repo, EXACT)
    stored = loaded.index_dir / INDEX_FILE
    fd = os.open(stored, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the pages the load left mapped stay
    finally:
        os.close(fd)
    before = _cached_share(stored)
    if before > 0.5:
        pytest.skip(f"this file system keeps {before:.0%} of the file cached whatever it is told (tmpfs?)")
    loaded.prepare()
    deadline = time.monotonic() + 10  # the kernel reads it asynchronously
    while _cached_share(stored) < 0.95 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _cached_share(stored) >= 0.95


def test_loaded_and_saved_files_read_their_parsed_tables_from_the_file_as_parsed(repo):
    # node kinds, definitions, callees, syntax facts and imports: stored columns read as the lists a parse gives
    built = Index.build(repo, EXACT)
    parsed_now = {p: parse_source(e.text, e.language) for p, e in built.files.items()}
    built.save()  # read back in place, as a load reads
    loaded = Index.load(repo, EXACT)
    names = ("kinds", "defs", "call_parts", "facts", "imports")
    for index in (built, loaded):
        for path, fresh in parsed_now.items():
            parsed = index.files[path].parsed
            for name in names:
                assert list(getattr(parsed, name)) == getattr(fresh, name), (path, name)
                assert getattr(parsed, name) == getattr(fresh, name)
            assert [parsed.kinds[n] for n in range(parsed.n_nodes)] == fresh.kinds
            assert [parsed.defs[i] for i in range(len(parsed.defs))] == fresh.defs
            assert parsed.defs[1:3] == fresh.defs[1:3] and parsed.kinds[-2:] == fresh.kinds[-2:]
    assert any(i.name is None for e in loaded.files.values() for i in e.parsed.imports)  # `import module`
    languages = {e.language for p, e in loaded.files.items() if e.parsed.facts and e.parsed.defs}
    assert len(languages) >= 2, languages  # the fixture has facts and definitions in more than one language
    assert all(type(e.parsed.kinds) is not list for e in loaded.files.values())


def test_a_loaded_vocabulary_takes_new_tokens_and_stores_them(repo):
    """A loaded index's vocabulary is the stored one (arrays read in place); an edit's new token is found, saved
    and found again after the next load, as in a fresh build."""
    Index.build(repo, EXACT).save()
    loaded = Index.load(repo, EXACT)
    (repo / "app.py").write_text("def zebra_quokka_total(x):\n    return x\n")
    loaded.update_file("app.py")
    query = "zebra_quokka_total"
    hit = loaded.term_index.score(query, "jaccard")
    assert hit.max() > 0 and loaded.fragments[int(hit.argmax())].text.startswith("def zebra_quokka_total")
    loaded.save()  # read back from what it wrote: the token is among the stored ones now
    assert query not in loaded.term_index.vocab._added and query in loaded.term_index.vocab  # type: ignore[union-attr]
    again = Index.load(repo, EXACT)
    assert isinstance(again.term_index.vocab, StoredVocabulary) and query in again.term_index.vocab
    np.testing.assert_array_equal(again.term_index.score(query, "bm25"), loaded.term_index.score(query, "bm25"))
    loaded.refresh_relations()
    _assert_same(again, Index.build(repo, EXACT))


def test_a_loaded_index_reads_its_arrays_and_texts_in_place_from_the_file(repo):
    """The stored arrays are views of a map of the index file (resident only where touched), the texts its bytes:
    what a loaded index answers equals the built one, texts with multi-byte characters, lone surrogates (an editor
    buffer's), a file without a final newline and an empty file included."""
    (repo / "unicode.py").write_text("# café ∑\nname = 'naïve'\n\ndef f():\n    return name\n", encoding="utf-8")
    (repo / "empty.py").write_text("")
    built = Index.build(repo, EXACT)
    built.update_file("pkg/extra.py", text="s = '\udc80'\nt = 'é'")  # a buffer: a lone surrogate, no final newline
    built.save()
    for path, entry in built.files.items():  # a save reads what it wrote back in place: the build's copies go
        nodes, parsed = built.graph.files[path], entry.parsed
        for table in (entry.windows, entry.node_ids, parsed.start_line, parsed.end_line, parsed.parent,
                      parsed.line_owner, parsed.line_len, nodes.syntax_edges):
            assert file_map(table) is not None and entry.node_ids is nodes.node_ids, path
    meta, arrays = read_state(repo / ".repocomp")
    mapped = [a for a in arrays.values() if a.size and file_map(a) is not None]
    assert len(mapped) == sum(1 for a in arrays.values() if a.size) and all(a.flags.aligned for a in mapped)
    loaded = Index.load(repo, EXACT)
    _assert_same(built, loaded)
    assert (loaded.symmetric_relations != built.symmetric_relations).nnz == 0
    for path, entry in built.files.items():
        assert not isinstance(loaded.files[path].source, str) and loaded.files[path].text == entry.text, path
    assert loaded.file_lines("pkg/extra.py") == ["s = '\udc80'", "t = 'é'"] and loaded.file_lines("empty.py") == [""]
    for frag in built.fragments:  # found by text, hashed from the file's bytes without making the fragments
        if frag is not None:
            found = loaded.fragments.find(frag.text)
            assert found is not None and loaded.fragments[found].text == frag.text
    assert loaded.fragments.find("no window has this text") is None


def test_a_loaded_or_saved_index_makes_a_files_parse_when_read_and_keeps_only_the_last_few(repo, monkeypatch):
    """Neither a file's record nor its symbols hold its parse once it is in the file: made from the stored columns
    when read, the same as the parser's, at most `KEPT` of them kept."""
    monkeypatch.setattr(stored_parse, "KEPT", 2)
    parsed = {}
    for path in sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*.py")):
        parsed[path] = parse_source((repo / path).read_text(), "python")
    built = Index.build(repo, EXACT)
    assert all(isinstance(e.parse, ParsedFile) for e in built.files.values())  # a build's own, until saved
    built.save()
    loaded = Index.load(repo, EXACT)
    for index in (built, loaded):
        assert not any(isinstance(e.parse, ParsedFile) for e in index.files.values())
        assert not any(isinstance(s.parse, ParsedFile) for s in index.resolver.files.values())
    gc.unfreeze()  # (a save and a load keep what lives on out of the collector's view: counted here too)
    gc.collect()
    # the parser's above, and the two the load made last (of the saved index's none is read since the save)
    assert sum(type(o) is ParsedFile for o in gc.get_objects()) == len(parsed) + 2  # (isinstance warns on some)
    for path, want in parsed.items():
        got = loaded.files[path].parsed
        assert got is loaded.resolver.files[path].parsed  # the kept one, while it is among the last read
        assert (got.language, got.n_lines, list(got.kinds), got.has_errors) == (
            want.language, want.n_lines, list(want.kinds), want.has_errors), path
        for table in ("start_line", "end_line", "parent", "line_owner", "line_len", "call_nodes"):
            assert np.array_equal(getattr(got, table), getattr(want, table)), (path, table)
        assert list(got.defs) == list(want.defs) and list(got.call_parts) == list(want.call_parts), path
        assert got.imports == want.imports and list(got.facts) == list(want.facts), path


def test_updating_a_loaded_index_copies_what_it_writes_never_the_file(repo):
    """An update writes into arrays read in place (copy-on-write): the loaded index then equals a rebuild, and the
    file it was read from is unchanged until a save replaces it."""
    Index.build(repo, EXACT).save()
    stored = (repo / ".repocomp" / INDEX_FILE).read_bytes()
    loaded = Index.load(repo, EXACT)
    (repo / "pkg/util.py").write_text((repo / "pkg/util.py").read_text().replace("def clamp(", "def limit("))
    loaded.update_file("pkg/util.py")
    loaded.remove_file("pkg/core.py")
    (repo / "pkg/core.py").unlink()
    loaded.refresh_relations()
    assert file_map(loaded.upkeep._made.data) is not None  # the edits' rows of W wait beside it: W not copied
    graph = loaded.graph  # the edit's nodes went into the room stored after the graph's node tables: not copied
    assert all(file_map(t) is not None for t in (graph._alive, graph._length, graph.kind._codes, graph.owner._codes))
    # what a save stores of the locations: the fragments read from the file and those the edits changed, by id
    file_of = {p: i for i, p in enumerate(sorted(loaded.files))}
    by_object = [(f.id, file_of[loc.path], loc.start_line, loc.end_line)
                 for f in loaded.fragments if f is not None for loc in f.locations]
    assert loaded.fragments.location_table(file_of).tolist() == [list(row) for row in by_object]
    assert (repo / ".repocomp" / INDEX_FILE).read_bytes() == stored
    _assert_same(loaded, Index.build(repo, EXACT))
    loaded.save()
    _assert_same(Index.load(repo, EXACT), Index.build(repo, EXACT))
    # saving reads the index back in place from the file written: none of the updates' copies stay in memory,
    # and it goes on updating from there
    assert all(file_map(m.data) is not None for m in (loaded.relations, loaded.upkeep.fragment_nodes.base)) \
        and file_map(loaded.term_index.state()["post_rows"]) is not None
    assert not any(isinstance(e.source, str) for e in loaded.files.values())
    (repo / "pkg/extra.py").write_text("from pkg.util import limit\n\n\ndef go():\n    return limit(1, 0, 2)\n")
    loaded.update_file("pkg/extra.py")
    loaded.refresh_relations()
    _assert_same(loaded, Index.build(repo, EXACT))


def test_update_file_equals_full_rebuild(repo):
    index = Index.build(repo, EXACT)
    # change a definition other files call, so cross-file call edges and neighbour rows must change too
    new_util = (repo / "pkg/util.py").read_text().replace("def clamp(value, low, high):", "def limit(value, low, high):")
    (repo / "pkg/util.py").write_text(new_util)
    index.update_file("pkg/util.py")
    (repo / "pkg/extra.py").write_text("from pkg.util import normalize\n\n\ndef go():\n    return normalize([1])\n")
    index.update_file("pkg/extra.py")
    index.refresh_relations()
    _assert_same(index, Index.build(repo, EXACT))


def test_texts_that_share_a_hash_are_told_apart_by_the_fragment_table(repo, monkeypatch):
    """Every text given one hash: fragments are still found by their text, in a built index (a dictionary) and a
    loaded one (the stored ones' sorted arrays), through updates that add, re-add and release texts."""
    monkeypatch.setattr(fragment_store, "_bytes_key", lambda text: 7)
    (repo / "copy_a.py").write_text("\n".join(f"a_{i} = {i}" for i in range(50)))
    built = Index.build(repo, EXACT)
    built.save()
    indexes = (built, Index.load(repo, EXACT))
    for index in indexes:
        assert len({f.text for f in index.fragments if f}) == sum(f is not None for f in index.fragments) > 10
        assert all(index.fragments.find(f.text) == f.id for f in index.fragments if f is not None)
    (repo / "copy_a.py").write_text("\n".join(f"a_{i} = {i}" for i in range(5, 55)))  # every window shifts
    rebuilt = Index.build(repo, EXACT)
    app = (repo / "app.py").read_text()
    for index in indexes:
        index.update_file("app.py", text=app + "\nextra = 1\n")  # a new text, then the old ones found again
        index.update_file("app.py", text=app)
        index.update_file("copy_a.py")
        index.refresh_relations()
        _assert_same(index, rebuilt)
        assert sum(f is not None for f in index.fragments) == sum(f is not None for f in rebuilt.fragments)


def test_updates_add_files_within_the_text_budget_counted_as_files_come_and_go(repo):
    """A new file past `max_total_bytes` is left out of an update; the count (characters, not UTF-8 bytes) follows
    every added, changed and removed file, in a built index and a loaded one (counted from its stored bytes)."""
    (repo / "uni.py").write_text("name = 'café ünï'\n" * 5)
    total = sum(len(e.text) for e in Index.build(repo, EXACT).files.values())
    config = config_from_dict({"index": {"max_total_bytes": total + 100}})
    Index.build(repo, config).save()
    for index in (Index.build(repo, config), Index.load(repo, config)):
        assert index._text_size() == total
        index.update_file("new1.py", text="x" * 60)
        index.update_file("new2.py", text="y" * 60)  # 120 more than the 100 left
        assert "new1.py" in index.files and "new2.py" not in index.files
        index.update_file("uni.py", text="z = 1\n")  # 84 characters fewer (102 bytes)
        index.update_file("new2.py", text="y" * 60)
        index.remove_file("new1.py")
        assert "new2.py" in index.files and "new1.py" not in index.files
        assert index._text_size() == sum(len(e.text) for e in index.files.values()) == total + 60 - 84


def test_fragment_texts_follow_their_files_through_updates(repo):
    """A fragment reads its text from a file's text: after one of two identical files changes, the windows they
    shared keep their text (read from the other file), and the changed file's windows read its new text."""
    shared = "\n".join(f"value_{i} = compute({i})" for i in range(45))
    (repo / "copy_a.py").write_text(shared)
    (repo / "copy_b.py").write_text(shared)
    index = Index.build(repo, EXACT)
    index.update_file("copy_a.py", text="head = 1\n" + shared)
    index.update_file("copy_b.py", text=shared.replace("value_40", "renamed_40"))

    def window(path, loc):
        return "\n".join(index.files[path].lines[loc.start_line:loc.end_line])

    for frag in index.fragments:
        for loc in frag.locations if frag else ():
            assert frag.text == window(loc.path, loc), (frag.id, loc)
    loaded_texts = sorted(f.text for f in index.fragments if f)
    index.save()
    assert sorted(f.text for f in Index.load(repo, EXACT).fragments if f) == loaded_texts


def test_update_from_buffer_text_and_remove_file(repo):
    index = Index.build(repo, EXACT)
    buffer = (repo / "app.py").read_text() + "\n\ndef unsaved():\n    return Engine(1).start()\n"
    assert not index.update_files({"app.py": (repo / "app.py").read_text()})  # the text it holds: no change
    assert index.update_files({"app.py": buffer})
    assert not index.update_files({"app.py": buffer})
    assert index.file_lines("app.py")[-2] == "    return Engine(1).start()"
    index.remove_file("pkg/core.py")
    index.refresh_relations()
    (repo / "app.py").write_text(buffer)
    (repo / "pkg/core.py").unlink()
    _assert_same(index, Index.build(repo, EXACT))
    assert all(loc.path != "pkg/core.py" for f in index.fragments if f for loc in f.locations)


def test_deleted_file_on_disk_is_removed_by_update(repo):
    index = Index.build(repo, EXACT)
    (repo / "pkg/util.py").unlink()
    index.update_file("pkg/util.py")
    assert "pkg/util.py" not in index.files


def test_crash_mid_write_leaves_previous_index_loadable(repo, monkeypatch):
    index = Index.build(repo, EXACT)
    index.save()
    before = (repo / ".repocomp" / INDEX_FILE).read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk died mid-write")

    monkeypatch.setattr(numpy.lib.format, "write_array_header_1_0", crash)
    index.update_file("app.py", text="x = 1\n")
    with pytest.raises(RepocompError, match="disk died"):
        index.save()
    monkeypatch.undo()
    assert (repo / ".repocomp" / INDEX_FILE).read_bytes() == before
    assert [p.name for p in (repo / ".repocomp").iterdir()] == [INDEX_FILE]  # no temp file left behind
    assert "def main():" in "\n".join(Index.load(repo, EXACT).file_lines("app.py"))


def test_eq9s_symmetric_w_is_stored_where_fragrel_reads_it_and_made_when_read_otherwise(repo):
    """Without FragRel nothing reads the symmetric W: a save neither stores it nor makes W whole for it (its
    transpose, beside a build's last batch, was the build's peak); a loaded index makes it if ever read. With
    FragRel it is stored and read in place."""
    fragrel = EXACT.replace("retrieval", alpha=0.5)
    built = Index.build(repo, EXACT)
    built.update_file("app.py", text="x = compute(1)\n")
    meta, arrays = index_codec.encode(built)
    assert meta["symmetric"] is False and not any(name.startswith("sym_") for name in arrays)
    built.save()
    assert built.upkeep._symmetric is None  # neither made nor read back
    loaded = Index.load(repo, EXACT)
    assert loaded.upkeep._symmetric is None
    want = built.relations.maximum(built.relations.T).tocsr()
    assert (loaded.symmetric_relations != want).nnz == 0  # made when first read
    built = Index.build(repo, fragrel)
    built.save()
    meta, arrays = read_state(repo / ".repocomp")
    assert meta["symmetric"] is True and "sym_data" in arrays
    loaded = Index.load(repo, fragrel)
    want = built.relations.maximum(built.relations.T).tocsr()
    assert file_map(loaded.symmetric_relations.data) is not None and (loaded.symmetric_relations != want).nnz == 0


def test_a_save_makes_each_large_table_as_it_is_written_and_leaves_the_index_as_it_was(repo, monkeypatch):
    """A save holds one large table at a time: the texts go piece by piece, the others are made when the write
    reaches them (the term index's rows folded into copies, W's patched rows written in block by block, the index
    itself unchanged); pieces that do not add up are an error that leaves the previous file."""
    index = Index.build(repo, EXACT.replace("retrieval", alpha=0.5))
    index.save()
    index.update_file("app.py", text="x = compute(1)\n")
    index.remove_file("pkg/core.py")  # removed fragments: W's columns dropped as it is written
    held = len(index.term_index._changed)
    meta, arrays = index_codec.encode(index)
    assert index.upkeep._changed_since_made() and len(index.upkeep._dead)  # W is not made for the write
    rel = {part: whole(arrays[f"rel_{part}"]) for part in ("data", "indices", "indptr")}
    assert index.upkeep._changed_since_made()
    assert isinstance(arrays["text"], Chunks) and isinstance(arrays["term_post_rows"], Chunks)
    assert isinstance(arrays["rel_data"], Chunks)
    assert b"x = compute(1)" in arrays["text"].whole().tobytes()
    state = {k: whole(arrays[f"term_{k}"]) for k in ("terms", "post_rows")}
    assert len(index.term_index._changed) == held > 0  # folded into the copies only
    folded = index.term_index.to_csr()  # folds in place
    assert np.array_equal(state["terms"], folded.indices) and np.array_equal(state["post_rows"], folded.tocsc().indices)
    # F (rows patched by the edit) and the symmetric W (stale since the edit) a block of rows at a time: the
    # matrices made whole, part for part and dtype for dtype, and the symmetric W not kept
    assert len(index.upkeep.fragment_nodes.ids) and isinstance(arrays["sym_data"], Chunks)
    written = {(name, part): whole(arrays[f"{name}_{part}"]) for name in ("frag_nodes", "sym")
               for part in ("data", "indices", "indptr")} | {("rel", part): got for part, got in rel.items()}
    assert index.upkeep._made_symmetric(index.relations) is None
    for name, matrix in (("frag_nodes", index.upkeep.fragment_nodes.merged()), ("rel", index.relations),
                         ("sym", index.symmetric_relations)):
        for part in ("data", "indices", "indptr"):
            got, want = written[name, part], getattr(matrix, part)
            assert got.dtype == want.dtype and np.array_equal(got, want), (name, part)
    before = (repo / ".repocomp" / INDEX_FILE).read_bytes()
    arrays["text"] = Chunks(np.uint8, arrays["text"].length + 1, arrays["text"].pieces)
    with pytest.raises(ValueError, match="pieces"):
        write_state(repo / ".repocomp", meta, arrays)
    assert (repo / ".repocomp" / INDEX_FILE).read_bytes() == before
    assert [p.name for p in (repo / ".repocomp").iterdir()] == [INDEX_FILE]
    index.save()
    _assert_same(Index.load(repo, EXACT), index)


def test_a_save_reads_the_written_file_back_while_readers_read_on_and_switches_to_it_after(repo, monkeypatch):
    """The read-back's checks run inside `while_written` (where the language server lets requests read) and leave
    the index's tables as they were, but for each file's views, replaced there by equal ones read from the file;
    the switch to the written tables comes after it and answers the same."""
    index = Index.build(repo, EXACT.replace("retrieval", alpha=0.5))
    index.save()
    index.update_file("app.py", text="x = compute(1)\n")
    index.remove_file("pkg/core.py")

    def tables():
        return index.fragments, index.term_index, index.relations, index.upkeep.fragment_nodes

    def file_views():
        return index.graph.files["app.py"].node_ids, index.files["app.py"].source

    seen = {"checked": []}
    csr = index_codec._csr
    monkeypatch.setattr(index_codec, "_csr", lambda *a: seen["checked"].append(seen.get("inside")) or csr(*a))

    @contextlib.contextmanager
    def while_written():
        before, views, lines = tables(), file_views(), index.file_lines("app.py")
        seen["inside"] = True
        yield
        seen["inside"] = False
        seen["unchanged"] = all(a is b for a, b in zip(before, tables()))
        seen["views"] = [a is not b for a, b in zip(views, file_views())]
        seen["equal"] = np.array_equal(views[0], file_views()[0]) and index.file_lines("app.py") == lines
        seen["before"] = before

    read_before, retired = index.mapped, []
    index.save(while_written=while_written, retired=retired)
    assert retired == [read_before] and index.mapped is not read_before  # for the caller to let go, lock let go
    assert seen["unchanged"] and seen["checked"] == [True] * 5  # W, its symmetric, F, F^T, the costs
    assert seen["views"] == [True, True] and seen["equal"]  # read from the file while readers read: equal values
    assert not any(a is b for a, b in zip(seen["before"], tables()))  # each table now read from the file
    assert isinstance(index.files["app.py"].source, np.ndarray)  # read in place
    assert index.file_lines("app.py") == ["x = compute(1)", ""]
    _assert_same(Index.load(repo, EXACT), index)


def test_the_index_header_is_encoded_in_slices_as_one_call_would():
    from repocomp.index.store import _json_pieces

    value = {"files": [{"path": f"p{i}.py", "n": i, "x": [i, 1.5, None]} for i in range(50)],
             "consulted": {f"p{i}.py": ["mod:a", "é"] for i in range(30)}, "empty": {}, "none": [], "n": 3}
    for slice_len in (1, 7, 1024):
        assert "".join(_json_pieces(value, slice_len)) == json.dumps(value, separators=(",", ":"))


def test_a_save_leaves_no_reference_cycles_behind(repo):
    """The language server saves with the cyclic collector off and keeps what the save made out of its later passes
    (`heap.uncollected`): so a save, and the index tables it replaces, must be freed by their counts alone."""
    index = Index.build(repo, EXACT.replace("retrieval", alpha=0.5))
    index.save()
    found = []
    for text in ("x = compute(1)\n", "x = compute(2)\n"):
        index.update_file("app.py", text=text)
        [e.parsed for e in index.files.values()]  # parses made and kept by the tables the save replaces
        gc.collect()
        gc.disable()
        try:
            index.save()
            found.append(gc.collect())
        finally:
            gc.enable()
    # the second save's: the first may load a numba kernel, whose ctypes types hold a cycle once per process
    assert found[-1] == 0


def test_a_load_leaves_the_collector_on_and_no_garbage_kept_from_its_passes(repo):
    """A load runs with the cyclic collector off (`heap.uncollected`), collects the few cycles it made (numpy's
    header parser) once, and keeps the rest out of later passes: nothing frozen is garbage."""
    Index.build(repo, EXACT).save()
    gc.unfreeze()  # (what earlier saves and loads froze: not this load's)
    gc.collect()
    assert gc.isenabled()
    index = Index.load(repo, EXACT)
    assert gc.isenabled() and index.files
    gc.unfreeze()  # what the load froze, back under the collector's eyes
    assert gc.collect() == 0


@pytest.mark.parametrize("damage", ["garbage", "truncate", "old_version"])
def test_corrupt_or_old_index_gives_clear_error_and_is_rebuilt(repo, damage):
    Index.build(repo).save()
    path = repo / ".repocomp" / INDEX_FILE
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"\x00garbage" * 10)
    elif damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        magic, _, rest = data.split(b"\n", 2)
        path.write_bytes(magic + b"\n1\n" + rest)
    with pytest.raises(IndexStaleError if damage == "old_version" else IndexCorruptError, match="rebuild"):
        Index.load(repo)
    reopened = Index.open(repo)
    assert "app.py" in reopened.files
    Index.load(repo)  # the rebuilt index was saved


def test_changed_structural_config_triggers_rebuild(repo):
    Index.build(repo).save()
    other = config_from_dict({"fragments": {"window": 10, "stride": 5}})
    with pytest.raises(IndexStaleError, match="other \\[fragments\\] settings"):
        Index.load(repo, other)
    assert Index.open(repo, other).config.fragments.window == 10


def test_bad_inputs_are_skipped_and_reported(repo):
    (repo / "binary.py").write_bytes(b"x = 1\n\x00\x01\x02")
    (repo / "latin1.py").write_bytes("name = 'caf\xe9'\n".encode("latin-1"))
    (repo / "huge.py").write_text("x = 1\n" * 300_000)  # 1.8 MB > default 1 MB
    (repo / "dangling.py").symlink_to(repo / "missing_target.py")
    (repo / "loop").symlink_to(repo)
    (repo / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    index = Index.build(repo)
    skipped = index.summary.skipped
    assert skipped["binary"] == 1
    assert skipped["too_large"] == 1
    assert skipped["unreadable"] == 1
    assert skipped["symlink_loop"] == 1
    assert skipped["non_utf8_replaced"] == 1
    assert "latin1.py" in index.files and "\ufffd" in index.files["latin1.py"].text  # indexed with replacement
    assert not {"binary.py", "huge.py", "dangling.py"} & set(index.files)
    assert not any(p.startswith("loop/") for p in index.files)
    assert "app.py" in index.files


def test_size_limit_is_configurable(repo):
    (repo / "big.py").write_text("x = 1\n" * 100)
    index = Index.build(repo, config_from_dict({"index": {"max_file_bytes": 100}}))
    assert "big.py" not in index.files and index.summary.skipped["too_large"] >= 1


def test_config_from_pyproject_and_errors(repo):
    (repo / "pyproject.toml").write_text("[tool.repocomp.relations]\ntop_k = 5\n")
    assert load_config(repo).relations.top_k == 5
    (repo / "pyproject.toml").write_text("[tool.repocomp.relations]\ntopk = 5\n")
    with pytest.raises(ConfigError, match="unknown key.*topk"):
        load_config(repo)
    (repo / "repocomp.toml").write_text("[graph]\ncall = 1.5\n")
    with pytest.raises(ConfigError, match="call weight must be in"):
        load_config(repo)


def test_path_outside_repository_is_an_error(repo, tmp_path):
    index = Index.build(repo)
    with pytest.raises(RepocompError, match="outside the indexed repository"):
        index.update_file(tmp_path / "elsewhere.py")


def test_cli_errors_and_empty_repository(tmp_path, capsys):
    assert main(["index", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "f.py").write_text("x = 1\n")
    assert main(["index", str(tmp_path / "f.py")]) == 2
    assert "is a file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["index", str(empty)]) == 0
    assert "no source files found" in capsys.readouterr().out


def test_cli_json_summary(repo, capsys):
    import json

    assert main(["index", str(repo), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["files"] == 10
    assert set(summary["edges"]) == {"syntax", "directory", "file", "call"}
    assert summary["relation_nonzeros"] > 0 and summary["index_bytes"] > 0
    assert set(summary["phases_s"]) >= {"walk", "parse", "graph", "relations", "term_index", "write"}
    assert os.path.exists(summary["index_dir"])


def _line_nodes(index: Index, path: str, start: int, end: int) -> set[int]:
    entry = index.files[path]
    parsed = entry.parsed
    return {int(entry.node_ids[parsed.line_owner[i]]) for i in range(start, min(end, parsed.n_lines))
            if parsed.line_len[i] > 0}


def test_region_strength_is_the_strongest_path_to_any_node_of_a_fragment(repo):
    """Query-side relation: per fragment, the max-product path from the region's nodes to its nodes (networkx)."""
    import math

    import networkx as nx

    cfg = config_from_dict({"fragments": {"window": 4, "stride": 2}, "relations": {"cutoff": 0.05}})
    index = Index.build(repo, cfg)
    got = index.region_strength("app.py", 6, 8)  # `engine = Engine(3)`, `engine.start()`
    g = index.to_networkx()
    for _, _, d in g.edges(data=True):
        d["cost"] = -math.log(d["weight"])
    best: dict[int, float] = {}
    for s in _line_nodes(index, "app.py", 6, 8):
        for t, cost in nx.single_source_dijkstra_path_length(g, s, weight="cost").items():
            best[t] = max(best.get(t, 0.0), math.exp(-cost))
    expected = np.zeros(len(index.fragments))
    for f in index.fragments:
        if f is not None:
            nodes = set().union(*(_line_nodes(index, loc.path, loc.start_line, loc.end_line) for loc in f.locations))
            expected[f.id] = max((best.get(n, 0.0) for n in nodes), default=0.0)
    expected[expected < 0.05] = 0.0
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    # the call `Engine(3)` reaches the class definition in pkg/core.py through one call edge
    engine_def = next(f.id for f in index.fragments if f and any(
        loc.path == "pkg/core.py" and loc.start_line <= 7 < loc.end_line for loc in f.locations))
    assert got[engine_def] >= cfg.graph.call - 1e-6
    assert not index.region_strength("app.py", 8, 8).any()  # an empty region relates to nothing


def test_a_stored_transpose_of_f_that_is_not_fs_is_corrupt(repo):
    meta, arrays = index_codec.encode(Index.build(repo, EXACT))
    tables = {name: whole(value) for name, value in arrays.items()}
    nnz = len(tables["node_frags_data"]) - 1  # one entry of F's transpose dropped: a well-formed matrix, not F's
    tables["node_frags_data"], tables["node_frags_indices"] = (tables[f"node_frags_{p}"][:nnz] for p in ("data", "indices"))
    tables["node_frags_indptr"] = np.minimum(tables["node_frags_indptr"], nnz)
    write_state(repo / ".repocomp", meta, tables)
    with pytest.raises(IndexCorruptError, match="transpose"):
        Index.load(repo, EXACT)


def test_pages_of_an_index_file_read_are_given_back_except_where_they_are_kept(tmp_path):
    """`page_out` gives the kernel back the pages of a map read; inside `pages_kept()` (a save beside the language
    server's requests, which read them) it gives back nothing."""
    import mmap

    from lsp_server.stats import file_rss_bytes
    from repocomp.index.store import page_out, pages_kept

    path = tmp_path / "data.bin"
    size = 64 << 20
    path.write_bytes(np.arange(size // 8, dtype=np.int64).tobytes())
    with path.open("rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    view = np.frombuffer(mapped, np.int64)
    before = file_rss_bytes()
    assert int(view.sum()) == (size // 8) * (size // 8 - 1) // 2  # every page read
    read = file_rss_bytes() - before
    assert read >= 0.9 * size
    with pages_kept():
        page_out(mapped)
    assert file_rss_bytes() - before >= 0.9 * read
    page_out(mapped)
    assert file_rss_bytes() - before <= 0.5 * read
    del view
    mapped.close()


def test_a_write_lets_requests_go_first_every_few_megabytes_of_a_table(tmp_path):
    from repocomp.index.yielding import yielding_to

    big = np.arange(3 << 20, dtype=np.int64)  # 24 MB
    arrays = {"whole": big.reshape(-1, 4), "pieces": Chunks(np.int32, len(big), lambda: [big[:5], big[5:]]),
              "bytes": Chunks(np.uint8, 9 << 20, lambda: [bytes(9 << 20)])}
    waits: list[int] = []
    with yielding_to(lambda: waits.append(1)):
        write_state(tmp_path, {"v": 1}, arrays)
    # 24 MB, 12 MB as int32 and 9 MB at 4 MB a time: 5 + 2 + 2 checkpoints inside the tables, one before each
    assert len(waits) >= 9 + 3
    _, back = read_state(tmp_path)
    assert np.array_equal(back["whole"], big.reshape(-1, 4)) and np.array_equal(back["pieces"], big.astype(np.int32))
    assert len(back["bytes"]) == 9 << 20 and not back["bytes"].any()
