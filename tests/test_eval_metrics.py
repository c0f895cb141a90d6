"""EM/ES exactly as RepoCoder's compute_score.py, on hand-made cases."""

import random

import pytest

from repocomp.eval.metrics import clean_lines, edit_similarity, exact_match, levenshtein


def _dp(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
        prev = cur
    return prev[-1]


@pytest.mark.parametrize("a,b,d", [("", "", 0), ("abc", "", 3), ("", "ab", 2), ("kitten", "sitting", 3),
                                   ("flaw", "lawn", 2), ("same", "same", 0), ("a\nb", "a\nc", 1)])
def test_levenshtein_known_values(a, b, d):
    assert levenshtein(a, b) == d
    assert levenshtein(b, a) == d


def test_levenshtein_matches_dynamic_programming_on_random_strings():
    rng = random.Random(7)
    for _ in range(500):
        a = "".join(rng.choice("ab c\n") for _ in range(rng.randint(0, 90)))
        b = "".join(rng.choice("ab c\n") for _ in range(rng.randint(0, 90)))
        assert levenshtein(a, b) == _dp(a, b)


def test_clean_lines_strips_and_drops_blank_lines():
    assert clean_lines("  x = 1  \n\n   \n\ty = 2\n") == ["x = 1", "y = 2"]


def test_exact_match_ignores_indentation_and_blank_lines():
    assert exact_match("    x = f(a)\n\n", "x = f(a)")
    assert exact_match("\n\n  return y\n", "        return y\n")
    assert not exact_match("x = f(b)", "x = f(a)")


def test_exact_match_cuts_extra_predicted_lines_to_the_target_length():
    assert exact_match("x = 1\ny = 2\nz = 3\n", "x = 1\n")
    assert exact_match("x = 1\n\n\ny = 2\nmore()", "x = 1\ny = 2")
    assert not exact_match("x = 1", "x = 1\ny = 2")  # too few predicted lines


def test_both_empty_is_a_match_and_similarity_one():
    assert exact_match("", "")
    assert exact_match("\n  \n", "")
    assert edit_similarity("", "") == 1.0
    assert edit_similarity("  \n", "\n") == 1.0


def test_empty_prediction_against_a_target():
    assert not exact_match("", "x = 1")
    assert edit_similarity("", "x = 1") == 0.0


def test_edit_similarity_on_cleaned_joined_strings():
    # target "x = 1\ny = 2" (11 chars); prediction cleaned and cut to two lines: "x = 1\ny = 3" -> 1 edit
    assert edit_similarity("    x = 1\n\n    y = 3\n    z = 4", "x = 1\ny = 2\n") == pytest.approx(1 - 1 / 11)
    # "abcd" vs "abxd": 1 substitution over 4 characters
    assert edit_similarity("abcd", "abxd") == pytest.approx(0.75)
    # different lengths: max length is the denominator
    assert edit_similarity("ab", "abcd") == pytest.approx(0.5)
