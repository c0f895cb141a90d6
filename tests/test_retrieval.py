"""Retriever: ranking by s_rel, leak rule, removed fragments, query-side relations (on a small stand-in index)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from repocomp.config.schema import Config
from repocomp.context.retrieval import FileWindows, RetrievalIndex, Retriever
from repocomp.index.fragment_store import FragmentStore
from repocomp.index.fragments import Fragment, Location, window_spans
from repocomp.index.revisions import Revisions
from repocomp.index.term_index import TermIndex


class Windows:
    def __init__(self, windows: list[int]) -> None:
        self.windows = windows


class FakeIndex:
    """A `RetrievalIndex` (what the engine reads of `repocomp.index.Index`) over in-memory files, windows as
    RepoCoder's."""

    def __init__(self, files: dict[str, str], config: Config | None = None,
                 relations: dict[tuple[int, int], float] | None = None) -> None:
        self.root = Path("/nonexistent-repo")
        self.epoch = 0  # never compacted
        self.revisions = Revisions()
        self.config = config or Config()
        self._files = {p: t.split("\n") for p, t in files.items()}
        self.fragments = FragmentStore()
        for path in sorted(self._files):
            self._add_windows(path)
        self.term_index = TermIndex.build([f.text if f else None for f in self.fragments])
        self._rel_pairs = relations or {}
        self._rebuild_w()
        self.region_calls: list[tuple[str, int, int]] = []
        self.region_values: np.ndarray | None = None
        self.updates: list[str] = []

    def _add_windows(self, path: str) -> None:
        lines = self._files[path]
        fc = self.config.fragments
        for s, e in window_spans(len(lines), fc.window, fc.stride):
            self.fragments.add("\n".join(lines[s:e]), Location(path, s, e))

    def _rebuild_w(self) -> None:
        n = len(self.fragments)
        w = sp.lil_matrix((n, n), dtype=np.float32)
        for (i, j), v in self._rel_pairs.items():
            w[i, j] = v
        self.relations = w.tocsr()

    @property
    def files(self) -> dict[str, Windows]:
        out: dict[str, Windows] = {}
        for f in self.fragments:
            for loc in (f.locations if f is not None else ()):
                out.setdefault(loc.path, Windows([])).windows.append(f.id)
        return out

    @property
    def symmetric_relations(self) -> sp.csr_matrix:
        return self.relations.maximum(self.relations.T).tocsr()

    def file_lines(self, path: str) -> list[str] | None:
        return self._files.get(path)

    def window_text(self, path: str, start: int, end: int) -> str | None:
        lines, fc = self._files.get(path), self.config.fragments
        spans = window_spans(len(lines), fc.window, fc.stride) if lines is not None else []
        return "\n".join(lines[start:end]) if lines is not None and (start, end) in spans else None

    def alive_mask(self) -> np.ndarray:
        return np.array([f is not None for f in self.fragments], bool)

    def remove_fragment(self, fid: int) -> None:
        for path in {loc.path for loc in self.fragments[fid].locations}:
            self.fragments.forget_path([fid], path)
        self.fragments.release([fid])
        self.term_index.set_rows([fid], [None])

    def update_file(self, path: str, text: str | None = None) -> None:
        self.updates.append(path)
        self.revisions.note([path])
        live = [f.id for f in self.fragments if f is not None]
        self.fragments.forget_path(live, path)  # fragments left without a location are removed
        gone = self.fragments.release(live)
        self._files[path] = (text or "").split("\n")
        n_before = len(self.fragments)
        self._add_windows(path)
        new = list(range(n_before, len(self.fragments)))
        self.term_index.set_rows(gone + new, [None] * len(gone) + [self.fragments[i].text for i in new])  # type: ignore[union-attr]
        self._rebuild_w()

    def region_strength(self, path: str, start_line: int, end_line: int) -> np.ndarray:
        self.region_calls.append((path, start_line, end_line))
        if self.region_values is None:
            return np.zeros(len(self.fragments), np.float32)
        return self.region_values

    def relation_edge_types(self, i: int, j: int) -> list[str]:
        return ["call"] if (i, j) in self._rel_pairs or (j, i) in self._rel_pairs else []


def small_config(window: int = 4, stride: int = 2, **retrieval: object) -> Config:
    cfg = Config().replace("fragments", window=window, stride=stride)
    return cfg.replace("retrieval", **retrieval) if retrieval else cfg


def _lines(prefix: str, n: int) -> str:
    return "\n".join(f"{prefix}_{i} = compute_{prefix}({i})" for i in range(n))


def test_leak_rule_and_the_cursor_fragment() -> None:
    idx = FakeIndex({})
    idx.fragments = [
        Fragment(0, "a", [Location("hole.py", 0, 4)]),  # wholly above prompt start 4: allowed
        Fragment(1, "b", [Location("hole.py", 2, 6)]),  # reaches past 4: excluded
        Fragment(2, "c", [Location("hole.py", 4, 8), Location("other.py", 0, 4)]),  # also elsewhere: allowed
        Fragment(3, "d", [Location("other.py", 4, 8)]),
        None,
        Fragment(5, "e", [Location("hole.py", 6, 10), Location("hole.py", 10, 14)]),  # all past: excluded
    ]
    r = Retriever(idx)
    assert r.leaked("hole.py", 4).tolist() == [1, 5]
    assert r.leaked("hole.py", 0).tolist() == [0, 1, 5]
    assert r.leaked("nothere.py", 0).tolist() == []
    assert r.covering("hole.py", 7) == 5  # [6, 10) starts later than [4, 8)
    assert r.covering("hole.py", 3) == 1


def protocol_members(proto: type) -> set[str]:
    """The members a Protocol class declares (properties, methods, annotated attributes), its bases' too.
    `typing.get_protocol_members` from Python 3.13; before, the same read off the classes' namespaces (a Protocol
    of properties has no `__annotations__`, so those alone say nothing)."""
    get = getattr(typing, "get_protocol_members", None)
    if get is not None:
        return set(get(proto))
    members: set[str] = set()
    for klass in proto.__mro__:
        if klass in (object, typing.Protocol, typing.Generic):
            continue
        members |= {n for n in vars(klass) if not n.startswith("_")} | set(vars(klass).get("__annotations__", {}))
    return members


def _parameters(fn: Callable[..., object]) -> list[str]:
    return list(inspect.signature(fn).parameters)


def seam_mismatches(proto: type, impl: object) -> list[str]:
    """How `impl` (an instance) fails `proto`: a member missing, a method where the Protocol has a property or an
    attribute, or a method whose parameter names differ from the Protocol's."""
    out = []
    for name in sorted(protocol_members(proto)):
        declared = inspect.getattr_static(proto, name, None)
        if not hasattr(impl, name):
            out.append(f"{name}: missing")
        elif inspect.isfunction(declared):
            got = getattr(impl, name)
            if not callable(got):
                out.append(f"{name}: not a method")
            elif _parameters(got) != _parameters(declared)[1:]:  # the Protocol's own `self` left out
                out.append(f"{name}: parameters {_parameters(got)}, the Protocol's {_parameters(declared)[1:]}")
        elif inspect.ismethod(getattr(impl, name)):
            out.append(f"{name}: a method, the Protocol's is a value")
    return out


def test_the_seam_check_reads_every_member_of_the_protocol() -> None:
    members = protocol_members(RetrievalIndex)
    assert {"config", "fragments", "files", "term_index", "epoch", "symmetric_relations", "region_strength"} <= members
    assert protocol_members(FileWindows) == {"windows"}


def test_the_seam_check_catches_a_stand_in_that_drifted() -> None:
    class Drifted:
        fragments: list[Fragment | None] = []
        term_index = None
        epoch = 0
        revisions = None
        symmetric_relations = None

        def files(self) -> dict[str, Windows]:  # a method where the index has a value
            return {}

        def region_strength(self, path: str, start: int, end: int) -> np.ndarray:  # parameters renamed
            return np.zeros(0)

    assert seam_mismatches(RetrievalIndex, Drifted()) == [
        "config: missing", "files: a method, the Protocol's is a value",
        "region_strength: parameters ['path', 'start', 'end'], the Protocol's ['path', 'start_line', 'end_line']"]


def test_the_index_and_the_stand_in_both_implement_the_retrieval_seam(tmp_path: Path) -> None:
    from repocomp.index import Index

    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    real, fake = Index.build(tmp_path, Config()), FakeIndex({"a.py": "x = 1"})
    for index in (real, fake):
        assert seam_mismatches(RetrievalIndex, index) == [], type(index)
        assert all(seam_mismatches(FileWindows, w) == [] for w in index.files.values()), type(index)
    # what else the completer reads of an index (`file_lines`, `update_file`, ...): the same parameters as the real
    for name, _ in inspect.getmembers(FakeIndex, inspect.isfunction):
        if not name.startswith("_") and hasattr(real, name):
            assert _parameters(getattr(fake, name)) == _parameters(getattr(real, name)), name


def test_retrieve_ranks_by_jaccard_and_applies_leak_rule() -> None:
    files = {
        "a.py": _lines("alpha", 8),
        "b.py": _lines("beta", 8),
        "hole.py": _lines("alpha", 4) + "\n" + _lines("gamma", 4),
    }
    idx = FakeIndex(files, small_config(window=4, stride=2, alpha=0.0))
    r = Retriever(idx)
    query = _lines("alpha", 4)
    # hole.py windows: [0,4) (same text as a.py [0,4): shared fragment), [2,6), [4,8)
    res = r.retrieve(query, path="hole.py", prompt_start_line=0, top_k=3)
    ids = [h.fragment_id for h in res.hits]
    frag_a0 = next(f.id for f in idx.fragments if f and Location("a.py", 0, 4) in f.locations)
    assert ids[0] == frag_a0
    assert res.hits[0].s_ind == 1.0
    assert res.hits[0].location == Location("a.py", 0, 4)  # the hole-file location is not the one shown
    for h in res.hits:
        assert not all(loc.path == "hole.py" for loc in h.locations)
    excluded = {f.id for f in idx.fragments if f and all(loc.path == "hole.py" for loc in f.locations)}
    assert set(res.excluded.tolist()) == excluded and excluded
    # the same request without a hole path may return the hole-file-only windows
    res2 = r.retrieve(query, top_k=20)
    assert excluded <= {h.fragment_id for h in res2.hits}


def test_windows_wholly_above_prompt_start_are_allowed() -> None:
    files = {"hole.py": _lines("delta", 12)}
    idx = FakeIndex(files, small_config(window=4, stride=2))
    r = Retriever(idx)
    res = r.retrieve(_lines("delta", 4), path="hole.py", prompt_start_line=6, top_k=20)
    shown = sorted((h.location.start_line, h.location.end_line) for h in res.hits)
    assert shown == [(0, 4), (2, 6)]  # [4,8) and later reach past line 6


def test_removed_fragments_never_returned() -> None:
    idx = FakeIndex({"a.py": _lines("alpha", 8)}, small_config())
    r = Retriever(idx)
    top = r.retrieve(_lines("alpha", 4), top_k=1).hits[0].fragment_id
    idx.remove_fragment(top)
    assert top not in [h.fragment_id for h in r.retrieve(_lines("alpha", 4), top_k=10).hits]


def test_fragrel_lifts_related_fragment() -> None:
    files = {"a.py": "import torch\nx = torch.zeros(3)", "b.py": "def helper(y):\n    return y + 1",
             "c.py": "z = torch.ones(2)\nprint(z)"}
    cfg = small_config(window=2, stride=2, alpha=0.5)
    idx = FakeIndex(files, cfg)
    ids = {f.locations[0].path: f.id for f in idx.fragments if f}
    # b is unrelated textually, but strongly related to a (e.g. a calls it)
    idx._rel_pairs = {(ids["b.py"], ids["a.py"]): 1.0, (ids["a.py"], ids["b.py"]): 1.0}
    idx._rebuild_w()
    r = Retriever(idx)
    q = "x = torch.zeros(3)"
    plain = r.retrieve(q, alpha=0.0, top_k=3)
    rel = r.retrieve(q, alpha=0.5, top_k=3)
    s = {h.fragment_id: h for h in rel.hits}
    hb = s[ids["b.py"]]
    ha = s[ids["a.py"]]
    # Jaccard by hand: query set {x, =, torch, ., zeros, (, 3, )} (8)
    # a: + {import} -> 8/9; c: {z,=,torch,.,ones,(,2,),print} -> 5/12; b: {def,helper,(,y,),:,return,+,1} -> 2/15
    np.testing.assert_allclose([ha.s_ind, s[ids["c.py"]].s_ind, hb.s_ind], [8 / 9, 5 / 12, 2 / 15], rtol=1e-6)
    np.testing.assert_allclose(hb.s_env, 8 / 9, rtol=1e-6)  # its only neighbour is a
    np.testing.assert_allclose(hb.s_rel, 2 / 15 + 0.5 * 8 / 9, rtol=1e-6)
    np.testing.assert_allclose(ha.s_rel, 8 / 9 + 0.5 * 2 / 15, rtol=1e-6)
    assert [h.fragment_id for h in plain.hits] == [ids["a.py"], ids["c.py"], ids["b.py"]]
    assert [h.fragment_id for h in rel.hits] == [ids["a.py"], ids["b.py"], ids["c.py"]]  # b lifted by FragRel


def test_query_relations_add_weighted_region_strength() -> None:
    files = {"a.py": _lines("alpha", 4), "b.py": _lines("beta", 4), "hole.py": _lines("gamma", 30)}
    idx = FakeIndex(files, small_config(window=4, stride=2, alpha=0.0))
    n = len(idx.fragments)
    boost = np.zeros(n, np.float32)
    b_id = next(f.id for f in idx.fragments if f and f.locations[0].path == "b.py")
    boost[b_id] = 0.8
    idx.region_values = boost
    r = Retriever(idx)
    q = _lines("alpha", 4)
    off = {h.fragment_id: h.s_rel for h in r.retrieve(q, path="hole.py", cursor_line=25, query_relations=0.0).hits}
    assert idx.region_calls == []  # off: the graph is not consulted
    on = {h.fragment_id: h.s_rel for h in r.retrieve(q, path="hole.py", cursor_line=25, query_relations=0.5).hits}
    assert idx.region_calls == [("hole.py", 21, 25)]  # [cursor - window, cursor): nothing from the cursor on
    np.testing.assert_allclose(on[b_id], off.get(b_id, 0.0) + 0.4, rtol=1e-6)
    r.retrieve(q, path="hole.py", cursor_line=2, query_relations=0.5)
    assert idx.region_calls[-1] == ("hole.py", 0, 2)


def test_hole_file_windows_before_the_cursor_lend_but_are_not_shown() -> None:
    # hole.py: windows [0,2) [2,4) [4,6); the cursor is on line 4, the prompt starts at 0 (all excluded)
    files = {"hole.py": "x = torch.zeros(3)\ny = 1\nw = 2\nv = 3\nafter = torch.zeros(3)\nu = 4",
             "b.py": "def helper(y):\n    return y + 1"}
    idx = FakeIndex(files, small_config(window=2, stride=2, alpha=0.5))
    wid = {(loc.path, loc.start_line): f.id for f in idx.fragments if f for loc in f.locations}
    before, after, b = wid[("hole.py", 0)], wid[("hole.py", 4)], wid[("b.py", 0)]
    # relations live in the lenders' own rows (the rows an incremental update of hole.py recomputes)
    idx._rel_pairs = {(before, b): 1.0, (after, b): 1.0}
    idx._rebuild_w()
    r = Retriever(idx)
    q = "x = torch.zeros(3)"
    hits = {h.fragment_id: h for h in r.retrieve(q, path="hole.py", prompt_start_line=0, cursor_line=4).hits}
    assert set(hits) == {b}  # the hole's file is never shown
    # only `before` lends (Jaccard 8/10 with the query); `after` is past the cursor
    np.testing.assert_allclose(hits[b].s_env, 0.8, rtol=1e-6)
    # with the cursor on line 2, `before` ([0,2)) still lends; with the cursor on line 1 it is not written yet
    np.testing.assert_allclose(r.retrieve(q, path="hole.py", cursor_line=2).hits[0].s_env, 0.8, rtol=1e-6)
    assert all(h.s_env == 0.0 for h in r.retrieve(q, path="hole.py", prompt_start_line=0, cursor_line=1).hits)


def test_similar_code_of_another_language_is_not_retrieved() -> None:
    """A TypeScript hole in a repository that also holds Go: the Go window that says the same thing is never a
    hit, the JavaScript one is (one family), and a file of no known language is not filtered."""
    same = "\n".join(f"const total_{i} = compute(items, {i});" for i in range(4))
    files = {"svc/total.go": same, "web/total.js": same + "\n// js", "notes/total.txt": same + "\n# txt",
             "web/other.ts": _lines("beta", 4), "web/hole.ts": _lines("gamma", 4)}
    idx = FakeIndex(files, small_config(window=4, stride=2, alpha=0.0))
    hits = Retriever(idx).retrieve(same, path="web/hole.ts", prompt_start_line=0, top_k=3).hits
    paths = {loc.path for h in hits for loc in h.locations}
    assert "svc/total.go" not in paths and {"web/total.js", "notes/total.txt"} <= paths
    # a Go hole gets the Go window first (all three hold the same text: one fragment, its Go location shown)
    go_hits = Retriever(idx).retrieve(same, path="svc/hole.go", prompt_start_line=0, top_k=3).hits
    assert go_hits[0].location.path == "svc/total.go"
    assert all(loc.path != "web/total.js" for h in go_hits for loc in h.locations)


def test_the_best_scores_are_found_by_score_then_id_whatever_the_ties() -> None:
    from repocomp.context.retrieval import _best

    rng = np.random.default_rng(7)
    for n, levels, pool in ((5, 3, 10), (300, 4, 10), (100_000, 50, 10), (100_000, 3, 40), (100_000, 1000, 1)):
        # few distinct levels: ties straddle the pool's boundary; -inf marks fragments that may not be shown
        ranked = rng.integers(0, levels, n).astype(np.float32) / levels
        ranked[rng.random(n) < 0.3] = -np.inf
        finite = np.flatnonzero(np.isfinite(ranked))
        expected = finite[np.lexsort((finite, -ranked[finite]))][:pool]
        np.testing.assert_array_equal(_best(ranked, pool), expected)
    assert len(_best(np.full(100_000, -np.inf, np.float32), 10)) == 0
