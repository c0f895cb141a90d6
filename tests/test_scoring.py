"""FragRel Eqs. 9-10 against hand-computed values."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from repocomp.scoring import environment_scores, fragrel_scores

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
