"""FragRel scoring (Eqs. 9-10) as sparse matrix-vector work, plus the query-side relation term.

    s_env_i = sum_j w_ij * s_ind_j / sum_j w_ij        (Eq. 9, over the other fragments j; 0 without relations)
    s_rel_i = s_ind_i + alpha * s_env_i                (Eq. 10)

w_ij is W's structural relation (Eq. 8), plus, with `SemanticSums`, the weighted semantic one (Eq. 6) among the
fragments most similar to the query (repocomp/context/semantic.py).

Fragments that are not in the memory for this request (removed, or excluded by the leak rule) are dropped from
both sums: they must neither lend their score to their neighbours (that would leak the hole's own code through
the relation graph) nor dilute the neighbours' averages. The one exception is `lenders`: the hole's file's
windows wholly before the cursor. They are not shown (the in-file context has them) but they are the code being
written, the strongest evidence of which definitions it needs, so they lend their s_ind through their own rows
of W (their rows are the ones an incremental update recomputes first). That reads w_ji where the sum over
available neighbours reads w_ij: W must be symmetric (`Index.symmetric_relations`: an entry is kept when either
fragment's top-k keeps it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["FragRelScores", "SemanticSums", "fragrel_scores", "environment_scores"]


@dataclass(frozen=True)
class FragRelScores:
    s_ind: np.ndarray  # float32 per fragment id (0 where not available)
    s_env: np.ndarray
    s_rel: np.ndarray


def _fit(v: np.ndarray, n: int) -> np.ndarray:
    """Pad with zeros or cut `v` to length n (W and the term index may briefly differ in size during updates)."""
    if len(v) == n:
        return v
    if len(v) > n:
        return v[:n]
    out = np.zeros(n, v.dtype)
    out[: len(v)] = v
    return out


@dataclass(frozen=True)
class SemanticSums:
    """Eq. 9's sums over the semantic relation (Eq. 6) for some fragment ids, and its weight beside W."""

    ids: np.ndarray
    numerator: np.ndarray  # sum_j w_ij * s_ind_j
    denominator: np.ndarray  # sum_j w_ij
    weight: float


def environment_scores(w: sp.csr_matrix, s_ind: np.ndarray, available: np.ndarray | None = None,
                       drop_diagonal: bool = True, lenders: np.ndarray | None = None,
                       semantic: SemanticSums | None = None) -> np.ndarray:
    """Eq. 9 for every row of W: weighted mean of the available neighbours' (and `lenders'`) independent scores.

    One sparse product with two right-hand columns computes numerator and denominator together. A stored
    diagonal is subtracted (Eq. 9 is over the *other* fragments) unless the caller knows W has none.
    `lenders` (ids, not available themselves) add w_ji * s_ind_j from their own rows j. `semantic` adds its
    weighted sums to both (the relation strength is the sum of the structural and the weighted semantic one).
    """
    n = w.shape[0]
    s = _fit(np.asarray(s_ind, np.float32), w.shape[1])
    avail = np.ones(w.shape[1], np.float32) if available is None else _fit(available.astype(np.float32), w.shape[1])
    rhs = np.column_stack([s * avail, avail])
    prod = np.asarray(w @ rhs, dtype=np.float64)
    if drop_diagonal and w.shape[0] == w.shape[1]:
        prod -= w.diagonal().astype(np.float64)[:, None] * rhs[:n]
    if lenders is not None and len(lenders):
        # a lender's own entry (w_jj) lands on the lender itself, which is not available: no need to drop it
        lenders = lenders[lenders < min(n, len(s))]
        lend = np.column_stack([s[lenders], np.ones(len(lenders), np.float32)])
        prod += np.asarray(w[lenders].T @ lend, dtype=np.float64)[:n]
    num, den = prod[:, 0], prod[:, 1]
    if semantic is not None:
        keep = semantic.ids < n
        num[semantic.ids[keep]] += semantic.weight * semantic.numerator[keep]
        den[semantic.ids[keep]] += semantic.weight * semantic.denominator[keep]
    out = np.zeros(n, np.float32)
    np.divide(num, den, out=out, where=den > 1e-12, casting="unsafe")
    return out


def fragrel_scores(s_ind: np.ndarray, w: sp.csr_matrix | None, alpha: float,
                   available: np.ndarray | None = None, extra: np.ndarray | None = None,
                   drop_diagonal: bool = True, lenders: np.ndarray | None = None,
                   semantic: SemanticSums | None = None) -> FragRelScores:
    """s_ind, s_env and s_rel (+ `extra`, e.g. the query-side relation term) over all fragment ids.

    Unavailable fragments get s_ind = s_env = s_rel = 0 and must be skipped by the caller when ranking.
    """
    n = len(s_ind)
    s_raw = np.asarray(s_ind, np.float32)
    avail = None if available is None else _fit(available, n)
    # each pass over the scores is ~0.4 ms in a 748k-fragment monorepo: FragRel off (the default), s_rel is s_ind
    s_ind = s_raw if avail is None else np.where(avail, s_raw, np.float32(0.0))
    if semantic is not None and w is None:
        w = sp.csr_matrix((n, n), dtype=np.float32)
    if w is None or alpha == 0.0 or (w.nnz == 0 and semantic is None):
        s_env, s_rel = np.zeros(n, np.float32), s_ind
    else:  # environment_scores masks by `available` itself; lenders need their raw scores
        s_env = _fit(environment_scores(w, s_raw, avail, drop_diagonal, lenders, semantic), n)
        if avail is not None:
            s_env = np.where(avail, s_env, np.float32(0.0))
        s_rel = s_ind + np.float32(alpha) * s_env
    if extra is not None:
        s_rel = s_rel + _fit(np.asarray(extra, np.float32), n)
        if avail is not None:
            s_rel = np.where(avail, s_rel, np.float32(0.0))
    return FragRelScores(s_ind=s_ind, s_env=s_env, s_rel=s_rel.astype(np.float32, copy=False))
