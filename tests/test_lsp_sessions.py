"""LSP changes turned into the session memory's edits (lsp_server.sessions.text_edit)."""

from __future__ import annotations

from lsprotocol import types

from lsp_server.sessions import text_edit

OLD = "def f(x):\n    return x + 1\n\nprint(f(2))  # 🙂 done\n"


def partial(sl: int, sc: int, el: int, ec: int, text: str) -> types.TextDocumentContentChangePartial:
    return types.TextDocumentContentChangePartial(
        range=types.Range(start=types.Position(line=sl, character=sc), end=types.Position(line=el, character=ec)),
        text=text)


def test_a_keystroke_is_an_insertion_at_its_place() -> None:
    edit = text_edit("a.py", OLD, partial(1, 16, 1, 16, "0"), "utf-16", 5.0)
    assert (edit.path, edit.start_line, edit.start_col, edit.end_line, edit.end_col) == ("a.py", 1, 16, 1, 16)
    assert (edit.removed, edit.inserted, edit.time) == ("", "0", 5.0)


def test_a_replacement_across_lines_carries_the_removed_text() -> None:
    edit = text_edit("a.py", OLD, partial(0, 4, 1, 12, "g(y):\r\n    return y"), "utf-16", 0.0)
    assert edit.removed == "f(x):\n    return x" and edit.inserted == "g(y):\n    return y"
    assert (edit.start_line, edit.start_col, edit.end_line, edit.end_col) == (0, 4, 1, 12)


def test_columns_are_converted_from_the_editors_encoding() -> None:
    # after the emoji (two UTF-16 units, one str character): " done" is removed, not "done"
    line = OLD.split("\n")[3]
    start = len(line[: line.index("🙂") + 1].encode("utf-16-le")) // 2
    edit = text_edit("a.py", OLD, partial(3, start, 3, start + 5, ""), "utf-16", 0.0)
    assert edit.removed == " done" and edit.start_col == line.index("🙂") + 1


def test_a_whole_text_change_is_what_differs_between_the_common_head_and_tail() -> None:
    new = OLD.replace("    return x + 1\n", "    y = x + 1\n    return y\n")
    edit = text_edit("a.py", OLD, types.TextDocumentContentChangeWholeDocument(text=new), "utf-16", 0.0)
    lines = OLD.split("\n")
    applied = "\n".join(lines[:edit.start_line] + [lines[edit.start_line][:edit.start_col] + edit.inserted
                                                    + lines[edit.end_line][edit.end_col:]] + lines[edit.end_line + 1:])
    assert applied == new and edit.removed in OLD
    assert text_edit("a.py", OLD, types.TextDocumentContentChangeWholeDocument(text=OLD), "utf-16", 0.0) is None
    appended = text_edit("a.py", "a\nb", types.TextDocumentContentChangeWholeDocument(text="a\nb\nc"), "utf-16", 0)
    assert (appended.start_line, appended.start_col, appended.removed, appended.inserted) == (1, 1, "", "\nc")


def test_whole_text_changes_give_edits_that_rebuild_the_new_text() -> None:
    """Random insertions, deletions and in-line edits sent as whole texts (full-sync editors): applying the edit to
    the old text gives the new one."""
    import random

    rng = random.Random(0)
    lines = [f"line_{i} = value_{i} * {rng.randint(0, 99)}" for i in range(300)]
    old = "\n".join(lines)
    for _ in range(200):
        new_lines = list(lines)
        i, j, kind = rng.randrange(len(lines)), rng.randrange(20), rng.random()
        if kind < 0.3:
            new_lines[i] = new_lines[i][:j] + "X" + new_lines[i][j:]
        elif kind < 0.6:
            del new_lines[i]
        else:
            new_lines.insert(i, f"inserted({j})")
        new = "\n".join(new_lines)
        e = text_edit("a.py", old, types.TextDocumentContentChangeWholeDocument(text=new), "utf-16", 0.0)
        rebuilt = "\n".join(lines[:e.start_line] + [lines[e.start_line][:e.start_col] + e.inserted
                                                    + lines[e.end_line][e.end_col:]] + lines[e.end_line + 1:])
        assert rebuilt == new and e.removed in old
