"""EM and ES exactly as RepoCoder's `compute_score.py`, plus a fast Levenshtein distance.

RepoCoder cleans both strings the same way: strip every line, drop blank lines, and cut the prediction to the
target's number of lines. EM compares the two line lists; ES is `1 - editdistance / max(len)` over the cleaned
lines joined with newlines (RepoCoder divides by zero when both are empty; here that case scores 1).
"""

from __future__ import annotations


def clean_lines(text: str) -> list[str]:
    """Stripped, non-blank lines of `text`."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _cleaned_pair(prediction: str, target: str) -> tuple[list[str], list[str]]:
    target_lines = clean_lines(target)
    return clean_lines(prediction)[: len(target_lines)], target_lines


def exact_match(prediction: str, target: str) -> bool:
    pred_lines, target_lines = _cleaned_pair(prediction, target)
    return pred_lines == target_lines


def edit_similarity(prediction: str, target: str) -> float:
    pred_lines, target_lines = _cleaned_pair(prediction, target)
    a, b = "\n".join(pred_lines), "\n".join(target_lines)
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    return 1.0 - levenshtein(a, b) / longest


def levenshtein(a: str, b: str) -> int:
    """Unit-cost edit distance (insert, delete, substitute), as `editdistance.eval`.

    Myers' bit-parallel algorithm (Hyyro's formulation for edit distance) with Python integers as bit vectors
    of any width: one pass over the longer string, a few big-integer operations per character.
    """
    if a == b:
        return 0
    if len(a) < len(b):
        a, b = b, a
    m = len(b)
    if m == 0:
        return len(a)
    peq: dict[str, int] = {}
    for i, ch in enumerate(b):
        peq[ch] = peq.get(ch, 0) | (1 << i)
    mask = (1 << m) - 1
    high = 1 << (m - 1)
    pv, mv, score = mask, 0, m
    for ch in a:
        eq = peq.get(ch, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | ~(xh | pv)
        mh = pv & xh
        if ph & high:
            score += 1
        elif mh & high:
            score -= 1
        ph = (ph << 1) | 1
        mh <<= 1
        pv = (mh | ~(xv | ph)) & mask
        mv = ph & xv & mask
    return score
