"""Max-product strengths against networkx, Eq. 8 by hand, cutoff, top-k, Eq. 7."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from graph import csr_rows, maxproduct, relations
from graph.csr_rows import PatchedRows, replace_rows
from graph.maxproduct import max_product_strengths, reached_nodes
from graph.relations import context_rows, structure_rows, top_k_rows


def _costs(n: int, edges: list[tuple[int, int, float]]) -> sp.csr_matrix:
    """Symmetric cost CSR (-log w), built by hand so weight-1 edges (cost 0) are kept."""
    rows, cols, vals = [], [], []
    for a, b, w in edges:
        rows += [a, b]
        cols += [b, a]
        vals += [-math.log(w)] * 2
    order = np.lexsort((cols, rows))
    rows, cols, vals = np.array(rows)[order], np.array(cols)[order], np.array(vals)[order]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return sp.csr_matrix((vals, cols, indptr), shape=(n, n))


def test_strengths_equal_networkx_dijkstra_reference():
    rng = np.random.default_rng(0)
    n = 60
    g = nx.gnm_random_graph(n, 150, seed=1)
    edges = [(a, b, float(rng.choice([0.3, 0.5, 0.8, 1.0]))) for a, b in g.edges()]
    for a, b, w in edges:
        g[a][b]["cost"] = -math.log(w)
    cutoff = 0.05
    got = max_product_strengths(_costs(n, edges), np.arange(n), cutoff).toarray()
    for s in range(n):
        lengths = nx.single_source_dijkstra_path_length(g, s, weight="cost")
        expected = np.zeros(n)
        for t, d in lengths.items():
            if math.exp(-d) >= cutoff:
                expected[t] = math.exp(-d)
        np.testing.assert_allclose(got[s], expected, rtol=1e-9, atol=1e-12)


def test_cutoff_bounds_the_neighbourhood():
    # a path 0 - 1 - 2 - 3 with weight 0.5 per edge: strengths 1, .5, .25, .125
    costs = _costs(4, [(0, 1, 0.5), (1, 2, 0.5), (2, 3, 0.5)])
    np.testing.assert_allclose(max_product_strengths(costs, np.array([0]), 0.2).toarray(), [[1, 0.5, 0.25, 0]])
    np.testing.assert_allclose(max_product_strengths(costs, np.array([0]), 0.1).toarray(), [[1, 0.5, 0.25, 0.125]])


def test_eq8_on_a_hand_computed_two_fragment_example():
    # nodes a=0, b=1, c=2; edges a-b 0.5, b-c 0.8 -> Dis(a,c) = 0.4
    costs = _costs(3, [(0, 1, 0.5), (1, 2, 0.8)])
    # fragment 0 owns a (len 2) and b (len 1); fragment 1 owns c (len 3)
    frag_nodes = sp.csr_matrix(np.array([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0]]))
    rel = structure_rows(np.array([0, 1]), frag_nodes, None, costs, cutoff=0.01).toarray()
    # rel(0,1) = (2*3*0.4 + 1*3*0.8) / (2*3 + 1*3) = (2.4 + 2.4) / 9
    assert rel[0, 1] == pytest.approx(4.8 / 9)
    assert rel[1, 0] == pytest.approx(4.8 / 9)
    # self relation: (4*1 + 2*2*0.5 + 1*1) / 9 = 7/9
    assert rel[0, 0] == pytest.approx(7 / 9)


def test_top_k_keeps_the_largest_per_row():
    m = sp.csr_matrix(np.array([[0.1, 0.5, 0.3, 0.0, 0.4], [0.2, 0.0, 0.0, 0.0, 0.0]]))
    out = top_k_rows(m.copy(), 2).toarray()
    np.testing.assert_allclose(out, [[0, 0.5, 0, 0, 0.4], [0.2, 0, 0, 0, 0]])


def test_top_k_breaks_ties_by_the_lowest_column_as_a_stable_sort_does():
    rng = np.random.default_rng(7)
    dense = rng.choice([0.0, 0.1, 0.2, 0.3, 0.5], size=(60, 40))  # many ties, some straddling the k-th place
    for k in (1, 3, 8, 39):
        out = top_k_rows(sp.csr_matrix(dense), k).toarray()
        want = np.zeros_like(dense)
        for r, row in enumerate(dense):
            cols = np.flatnonzero(row)
            best = cols[np.argsort(-row[cols], kind="stable")[:k]]
            want[r, best] = row[best]
        np.testing.assert_array_equal(out, want)


def test_context_relation_eq7_within_a_file():
    # one file with 5 windows (fragments 0..4): w_rel ** |i - j|, cut below the cutoff
    positions = {2: [("f.py", 2)]}
    rows = context_rows(np.array([2]), positions, {"f.py": np.arange(5)}, 5, weight=0.5, cutoff=0.2).toarray()
    np.testing.assert_allclose(rows, [[0.25, 0.5, 0.0, 0.5, 0.25]])


def test_max_reach_keeps_the_strongest_nodes_per_source():
    # a star: centre 0 with leaves of falling weight; a cap of 3 keeps the centre and its two strongest leaves
    costs = _costs(5, [(0, 1, 0.9), (0, 2, 0.5), (0, 3, 0.8), (0, 4, 0.3)])
    capped = max_product_strengths(costs, np.array([0]), 0.01, max_reach=3).toarray()
    np.testing.assert_allclose(capped, [[1, 0.9, 0, 0.8, 0]])
    np.testing.assert_allclose(max_product_strengths(costs, np.array([0]), 0.01).toarray(), [[1, 0.9, 0.5, 0.8, 0.3]])


def _random_csr(rng: np.random.Generator, n_rows: int, n_cols: int, density: float) -> sp.csr_matrix:
    m = sp.random(n_rows, n_cols, density=density, format="csr", random_state=rng, dtype=np.float64)
    m.data[rng.random(m.nnz) < 0.2] = 0.0  # explicit zeros (weight-1 edges) are entries too
    m.sort_indices()
    return m


def test_patched_rows_read_as_the_matrix_they_stand_for_and_leave_earlier_versions_unchanged():
    rng = np.random.default_rng(3)
    base = _random_csr(rng, 50, 40, 0.2)
    whole, m = base.copy(), PatchedRows(base)
    versions = []
    for step in range(6):  # the matrix grows in both directions, rows are replaced again, some left empty
        shape = (50 + 3 * step, 40 + 2 * step)
        rows = np.unique(rng.integers(0, shape[0], 7))
        new = _random_csr(rng, len(rows), shape[1], 0.3)
        whole = replace_rows(whole, rows, new, shape)
        versions.append((m, m.merged().toarray()))
        m = m.replace(rows, new, shape)
        assert m.shape == shape and len(m.ids) and m.base is base  # patched, not copied
        expected = whole.toarray()
        np.testing.assert_array_equal(m.merged().toarray(), expected)
        assert m.merged().nnz == whole.nnz  # explicit zeros kept
        ids = rng.permutation(shape[0])[:20]
        np.testing.assert_array_equal(m.rows(ids).toarray(), expected[ids])
        merged = m.merged()
        for rows_per_block in (1, 7, 64):  # what a save writes: the merged matrix, entry for entry
            blocks = sp.vstack(list(m.row_blocks(rows_per_block)), format="csr")
            assert blocks.shape == shape and blocks.dtype == merged.dtype
            assert all(np.array_equal(getattr(blocks, a), getattr(merged, a)) for a in ("indptr", "indices", "data"))
    for old, seen in versions:
        np.testing.assert_array_equal(old.merged().toarray(), seen)


def test_patched_rows_are_made_whole_once_their_patch_outgrows_an_eighth_of_the_base(monkeypatch):
    monkeypatch.setattr(csr_rows, "_MERGE_ENTRIES", 10)
    rng = np.random.default_rng(4)
    base = _random_csr(rng, 40, 40, 0.25)
    few = PatchedRows(base).replace(np.array([3]), _random_csr(rng, 1, 40, 0.3), base.shape)
    assert few.base is base and few.ids.tolist() == [3]
    many = few.replace(np.arange(10, 30), _random_csr(rng, 20, 40, 0.5), base.shape)
    assert many.base is not base and len(many.ids) == 0
    np.testing.assert_array_equal(many.rows(np.array([3])).toarray(), few.rows(np.array([3])).toarray())


def test_kernels_read_patched_rows_as_the_whole_matrix_hubs_included(monkeypatch):
    # a hub (node 0, linked to every other node) patched with fewer and other edges, read through its window
    monkeypatch.setattr(maxproduct, "HUB_DEGREE", 8)
    monkeypatch.setattr(maxproduct, "HUB_WINDOW", 2)
    monkeypatch.setattr(relations, "FANOUT_HUB", 4)
    monkeypatch.setattr(relations, "FANOUT_WINDOW", 2)
    rng = np.random.default_rng(5)
    n = 30
    edges = [(0, i, 0.9) for i in range(1, n)] + [(i, i + 1, 0.5) for i in range(1, n - 1)]
    costs = PatchedRows(_costs(n, edges))
    changed = [(0, i, 0.8) for i in range(2, n, 2)] + [(i, i + 1, 0.5) for i in range(1, n - 1)] + [(1, 7, 1.0)]
    redone = _costs(n, changed)
    rows = np.unique([0, 1, 7] + list(range(3, n, 2)))  # the rows whose edges changed
    costs = costs.replace(rows, redone[rows], (n, n))
    assert len(costs.ids) and costs.base.nnz != redone.nnz
    sources = np.arange(n)
    got = max_product_strengths(costs, sources, 0.05, max_reach=6)
    want = max_product_strengths(costs.merged(), sources, 0.05, max_reach=6)
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    f = PatchedRows(sp.csr_matrix(rng.integers(0, 3, (12, n)).astype(np.float64)))
    f = f.replace(np.array([2, 5]), sp.csr_matrix(rng.integers(0, 4, (2, n)).astype(np.float64)), (12, n))
    t = PatchedRows(f.merged().T.tocsr())
    t = t.replace(np.array([0]), sp.csr_matrix(2 * f.merged().T.tocsr()[[0]]), (n, 12))  # a patched hub row
    got = structure_rows(np.arange(12), f, t, costs, 0.05, max_reach=6).toarray()
    want = structure_rows(np.arange(12), f.merged(), t.merged(), costs.merged(), 0.05, max_reach=6).toarray()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got.any()


def test_rows_computed_give_the_nodes_their_nodes_reach_as_reached_nodes_does(monkeypatch):
    monkeypatch.setattr(maxproduct, "SOURCE_CHUNK", 4)  # several chunks of sources per block of rows
    rng = np.random.default_rng(3)
    n = 40
    g = nx.gnm_random_graph(n, 60, seed=2)
    costs = _costs(n, [(a, b, float(rng.choice([0.2, 0.5, 0.9]))) for a, b in g.edges()])
    f = sp.csr_matrix((rng.random((10, n)) < 0.1).astype(np.float64))
    rows = np.array([1, 4, 7])
    reached: list[np.ndarray] = []
    got = structure_rows(rows, f, None, costs, 0.1, max_reach=5, reached=reached)
    assert len(reached) >= 2
    want = reached_nodes(costs, np.unique(f[rows].indices), 0.1, max_reach=5)
    np.testing.assert_array_equal(np.unique(np.concatenate(reached)), want)
    np.testing.assert_array_equal(got.toarray(), structure_rows(rows, f, None, costs, 0.1, max_reach=5).toarray())


def test_the_search_leaves_its_work_arrays_as_it_found_them_and_they_may_be_given_back():
    rng = np.random.default_rng(4)
    n = 50
    g = nx.gnm_random_graph(n, 120, seed=3)
    costs = _costs(n, [(a, b, float(rng.choice([0.3, 0.6, 1.0]))) for a, b in g.edges()])
    first = max_product_strengths(costs, np.arange(n), 0.05).toarray()
    dist, came, _ = maxproduct._spare[0]
    assert len(came) >= n and not came.any() and dist[:n].any()  # every node unreached again; distances as left
    maxproduct.release_work_pages()
    assert not dist.any() and maxproduct._spare[0][0] is dist  # kept, its pages given back (zeros)
    np.testing.assert_array_equal(max_product_strengths(costs, np.arange(n), 0.05).toarray(), first)
