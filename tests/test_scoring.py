"""FragRel Eqs. 9-10 against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from repocomp.context.scoring import environment_scores, fragrel_scores
from repocomp.index.relation_upkeep import _symmetric_blocks

# 4 fragments: 0 relates to 1 (0.5) and 2 (0.25); 1 relates to 0 (0.5); 2 to 0 (0.25); 3 has no relations.
W = sp.csr_matrix(np.array([
    [0.0, 0.5, 0.25, 0.0],
    [0.5, 0.0, 0.0, 0.0],
    [0.25, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0],
], np.float32))
S_IND = np.array([0.2, 0.6, 0.9, 0.4], np.float32)


def test_environment_score_eq9() -> None:
    env = environment_scores(W, S_IND)
    # s_env_0 = (0.5*0.6 + 0.25*0.9) / 0.75 = 0.7; s_env_1 = 0.2; s_env_2 = 0.2; s_env_3 = 0 (no relations)
    np.testing.assert_allclose(env, [0.7, 0.2, 0.2, 0.0], rtol=1e-6)


def test_relation_score_eq10() -> None:
    r = fragrel_scores(S_IND, W, alpha=0.5)
    np.testing.assert_allclose(r.s_rel, [0.2 + 0.35, 0.6 + 0.1, 0.9 + 0.1, 0.4], rtol=1e-6)
    np.testing.assert_allclose(r.s_ind, S_IND)
    # alpha 0 switches FragRel off: s_rel == s_ind
    off = fragrel_scores(S_IND, W, alpha=0.0)
    np.testing.assert_allclose(off.s_rel, S_IND)
    np.testing.assert_allclose(off.s_env, 0.0)


def test_diagonal_is_ignored() -> None:
    with_diag = W + sp.identity(4, np.float32, format="csr")
    np.testing.assert_allclose(environment_scores(with_diag, S_IND), [0.7, 0.2, 0.2, 0.0], rtol=1e-6)


def test_unavailable_fragments_neither_lend_nor_dilute() -> None:
    avail = np.array([True, True, False, True])  # fragment 2 is excluded (leak rule) for this request
    r = fragrel_scores(S_IND, W, alpha=0.5, available=avail)
    # s_env_0 = 0.5*0.6 / 0.5 = 0.6 (2 dropped from numerator and denominator); 2 is zeroed
    np.testing.assert_allclose(r.s_env, [0.6, 0.2, 0.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(r.s_rel, [0.2 + 0.3, 0.6 + 0.1, 0.0, 0.4], rtol=1e-6)


def test_extra_term_and_size_mismatch() -> None:
    extra = np.array([0.0, 0.0, 0.0, 1.0], np.float32)
    r = fragrel_scores(S_IND, W, alpha=0.5, extra=extra)
    assert r.s_rel[3] == np.float32(1.4)
    # a term index one row longer than W (a fragment added before W was patched): no relations for it
    longer = np.append(S_IND, np.float32(0.3))
    r = fragrel_scores(longer, W, alpha=0.5)
    np.testing.assert_allclose(r.s_rel, [0.55, 0.7, 1.0, 0.4, 0.3], rtol=1e-6)


def test_lenders_lend_through_their_own_rows_but_are_not_ranked() -> None:
    # fragment 2 is the hole's file's window before the cursor: excluded from showing, but its score counts
    avail = np.array([True, True, False, True])
    r = fragrel_scores(S_IND, W, alpha=0.5, available=avail, lenders=np.array([2]))
    # s_env_0 = (0.5*0.6 + 0.25*0.9) / (0.5 + 0.25) = 0.7 with w_02 taken from row 2 (w_20 = 0.25)
    np.testing.assert_allclose(r.s_env, [0.7, 0.2, 0.0, 0.0], rtol=1e-6)
    assert r.s_rel[2] == 0.0 and r.s_ind[2] == 0.0
    # a lender's own row is what counts: with row 2 emptied it lends nothing
    w = W.tolil()
    w[2, 0] = 0.0
    r = fragrel_scores(S_IND, w.tocsr(), alpha=0.5, available=avail, lenders=np.array([2]))
    np.testing.assert_allclose(r.s_env[0], 0.6, rtol=1e-6)


def test_eq9_matches_a_dense_reference_after_updates(tmp_path) -> None:
    """On a real index whose per-row top-k cut makes the stored relations asymmetric, after incremental edits and
    the refresh: Eq. 9 with lenders equals a dense computation that reads one symmetric W for everything."""
    import shutil
    from pathlib import Path

    from repocomp.config.schema import Config
    from repocomp.index import Index

    repo = tmp_path / "repo"
    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "content_repo", repo)
    index = Index.build(repo, Config().replace("relations", top_k=2).replace("fragments", window=4, stride=2))
    refunds = (repo / "ledger" / "refunds.py").read_text()
    index.update_file("ledger/refunds.py", text=refunds.replace("subtotal", "sub_total"))
    index.update_file("ledger/notes.py", text="from ledger import currency\n\n\ndef note(x):\n"
                                              "    return currency.quaxify_amount_cents(x, 'EUR')\n")
    index.refresh_relations()

    stored = index.relations.toarray()
    assert (stored != stored.T).any()  # the top-k cut made it asymmetric: the case this is about
    w = index.symmetric_relations.toarray()
    np.testing.assert_array_equal(w, np.maximum(stored, stored.T))

    n = w.shape[0]
    rng = np.random.default_rng(0)
    s_ind = rng.random(n).astype(np.float32)
    available = rng.random(n) < 0.6
    lenders = np.flatnonzero(~available)[::2]
    got = environment_scores(index.symmetric_relations, s_ind, available, lenders=lenders)
    heard = available.copy()
    heard[lenders] = True
    ref = np.zeros(n)
    for i in range(n):
        js = [j for j in range(n) if j != i and heard[j]]
        den = w[i, js].sum()
        ref[i] = (w[i, js] * s_ind[js]).sum() / den if den > 1e-12 else 0.0
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    # the stored matrix would read w_ij for neighbours but w_ji for lenders: not Eq. 9 of any one W
    asym = environment_scores(index.relations, s_ind, available, lenders=lenders)
    assert not np.allclose(asym, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows_per_block", [1, 7, 64])
def test_the_symmetric_w_made_a_block_of_rows_at_a_time_is_scipys_maximum_of_w_and_its_transpose(
        rows_per_block: int) -> None:
    rng = np.random.default_rng(rows_per_block)
    w = sp.random(50, 50, density=0.1, format="csr", random_state=rng, dtype=np.float32)
    got, want = sp.vstack(list(_symmetric_blocks(w, rows_per_block)), format="csr"), w.maximum(w.T.tocsr()).tocsr()
    assert got.dtype == want.dtype and got.shape == want.shape and got.has_sorted_indices
    assert all(np.array_equal(getattr(got, a), getattr(want, a)) for a in ("indptr", "indices", "data"))
