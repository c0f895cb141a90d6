"""A loaded file's parsed tables read from stored columns behave as the lists a parse gives."""

from __future__ import annotations

import numpy as np
import pytest

from graph.stored_rows import NO_ROWS, CodedView, Rows, checked_table, split


def coded_views(table: list[str], codes: np.ndarray, lengths: np.ndarray) -> list[CodedView[str]]:
    """Each file's views into the shared table, as a loaded index makes them (`repocomp.index.stored_parse`)."""
    checked_table(table, codes)
    return [CodedView(table, part) for part in split(codes, lengths)]


def test_coded_views_read_each_files_items_through_the_shared_table() -> None:
    table = ["module", "call", "identifier"]
    codes = np.array([0, 2, 2, 1, 0, 1], np.int32)
    first, empty, second = coded_views(table, codes, np.array([3, 0, 3]))
    assert list(first) == ["module", "identifier", "identifier"] and list(second) == ["call", "module", "call"]
    assert first == ["module", "identifier", "identifier"] and ["call", "module", "call"] == second
    assert first != ["module"] and first != "mii" and len(empty) == 0 and empty == []
    assert first[-1] == "identifier" and first[1:] == ["identifier", "identifier"] and "call" not in first
    assert second.index("module") == 1 and second.count("call") == 2
    with pytest.raises(IndexError):
        first[3]


@pytest.mark.parametrize(("codes", "lengths"), [([0, 3], [2]), ([-1, 0], [2]), ([0, 1], [1]), ([0, 1], [3, -1])])
def test_a_code_out_of_the_table_or_lengths_that_do_not_add_up_are_value_errors(codes, lengths) -> None:
    with pytest.raises(ValueError):
        coded_views(["a", "b", "c"], np.array(codes, np.int32), np.array(lengths))


def test_rows_are_tuples_across_columns_with_ints_for_arrays() -> None:
    names = CodedView(["area", "Shape"], np.array([1, 0, 0], np.int32))
    defs = Rows(np.array([4, 9, 12], np.int32), names, np.array([-1, 4, -1], np.int32))
    expected = [(4, "Shape", -1), (9, "area", 4), (12, "area", -1)]
    assert list(defs) == expected and defs == expected and len(defs) == 3
    assert defs[1] == (9, "area", 4) and defs[-1] == expected[-1] and defs[:2] == expected[:2]
    assert all(type(v) is int for v in defs[0][::2]) and {n: c for n, _, c in defs} == {4: -1, 9: 4, 12: -1}
    assert defs != expected[:2] and defs != [(4, "Shape", 0), *expected[1:]]
    assert NO_ROWS == [] and list(NO_ROWS) == [] and len(NO_ROWS) == 0
