"""HunkTracker: keystrokes coalesced into hunks (typing, deleting, undo, multi-cursor), line bookkeeping, bounds."""

from __future__ import annotations

import random

from repocomp.memory.events import TextEdit
from repocomp.memory.hunks import HunkTracker, hunk_bytes

CART = '''\
from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 1


def total(items):
    amount = 0.0
    for item in items:
        amount += item.price * item.quantity
    return amount


def describe(items):
    lines = [f"{item.name}: {item.price:.2f}" for item in items]
    return "\\n".join(lines)
'''


class Editor:
    """Types into one file like an editor: each keystroke a TextEdit on the text as it is."""

    def __init__(self, tracker: HunkTracker, path: str, text: str, t0: float = 1000.0) -> None:
        self.tracker, self.path, self.text, self.t = tracker, path, text, t0
        tracker.opened(path, text)

    def _offset(self, line: int, col: int) -> int:
        lines = self.text.split("\n")
        return sum(len(x) + 1 for x in lines[:line]) + col

    def replace(self, line: int, col: int, end_line: int, end_col: int, new: str, dt: float = 0.1):
        a, b = self._offset(line, col), self._offset(end_line, end_col)
        removed = self.text[a:b]
        self.t += dt
        self.text = self.text[:a] + new + self.text[b:]
        return self.tracker.apply(TextEdit(self.path, line, col, end_line, end_col, removed, new, self.t))

    def type(self, line: int, col: int, text: str, dt: float = 0.1) -> None:
        for ch in text:  # one keystroke at a time; a newline moves to the next line
            self.replace(line, col, line, col, ch, dt)
            if ch == "\n":
                line, col = line + 1, 0
            else:
                col += 1

    def backspace(self, line: int, col: int, n: int, dt: float = 0.1) -> None:
        for _ in range(n):
            self.replace(line, col - 1, line, col, "", dt)
            col -= 1


def test_typing_in_one_place_is_one_hunk():
    tr = HunkTracker()
    ed = Editor(tr, "shop/cart.py", CART)
    # a discount parameter typed into the loop body, keystroke by keystroke, then a new line after it
    ed.type(13, 0, "        amount -= item.discount\n")
    hunks = tr.hunks()
    assert len(hunks) == 1
    h = hunks[0]
    assert (h.path, h.start_line, h.removed, h.inserted) == ("shop/cart.py", 13, [], ["        amount -= item.discount"])
    assert h.first_time < h.last_time and h.source == "typed"
    assert h.end_line == 14
    assert tr.text("shop/cart.py") == ed.text


def test_replacing_inside_a_line_keeps_the_original_line():
    tr = HunkTracker()
    ed = Editor(tr, "shop/cart.py", CART)
    ed.replace(11, 4, 11, 10, "")  # delete `amount`
    ed.type(11, 4, "subtotal")
    (h,) = tr.hunks()
    assert h.removed == ["    amount = 0.0"] and h.inserted == ["    subtotal = 0.0"] and h.start_line == 11


def test_deleting_lines_is_a_hunk_with_nothing_inserted():
    tr = HunkTracker()
    ed = Editor(tr, "shop/cart.py", CART)
    ed.replace(18, 0, 20, 0, "")  # the two lines of describe's body
    (h,) = tr.hunks()
    assert h.start_line == 18 and h.inserted == []
    assert h.removed == ['    lines = [f"{item.name}: {item.price:.2f}" for item in items]', '    return "\\n".join(lines)']


def test_typing_then_deleting_it_drops_the_hunk():
    tr = HunkTracker()
    ed = Editor(tr, "shop/cart.py", CART)
    ed.type(12, 22, "  # each item")
    assert len(tr.hunks()) == 1
    ed.backspace(12, 22 + len("  # each item"), len("  # each item"))
    assert tr.hunks() == []
    assert ed.text == CART


def test_undo_of_a_multi_line_edit_drops_the_hunk_and_returns_its_tombstone():
    tr = HunkTracker()
    ed = Editor(tr, "shop/cart.py", CART)
    ed.replace(10, 0, 15, 0, "def total(items, tax=0.0):\n    return sum(i.price for i in items) * (1 + tax)\n")
    (h,) = tr.hunks()
    assert h.removed[0] == "def total(items):" and len(h.inserted) == 2
    # the editor's undo: the whole range back as it was
    changed = ed.replace(10, 0, 12, 0, "\n".join(CART.split("\n")[10:15]) + "\n")
    assert ed.text == CART
    assert tr.hunks() == []
    assert [(c.id, c.removed, c.inserted) for c in changed] == [(h.id, [], [])]


def test_multi_cursor_distant_edits_are_separate_hunks_close_ones_merge():
    tr = HunkTracker()
    ed = Editor(tr, "shop/cart.py", CART)
    # one change event, three cursors: lines 6 and 7 (close) and 19 (far), each typing ` # x`
    t = ed.t + 1
    for line in (6, 7, 19):
        col = len(ed.text.split("\n")[line])
        ed.t = t - 0.1
        ed.replace(line, col, line, col, "  # checked", dt=0.1)
    hunks = sorted(tr.hunks(), key=lambda h: h.start_line)
    assert [(h.start_line, len(h.inserted)) for h in hunks] == [(6, 2), (19, 1)]
    assert hunks[0].inserted == ["    price: float  # checked", "    quantity: int = 1  # checked"]


def test_an_edit_above_shifts_the_hunks_below():
    tr = HunkTracker()
    ed = Editor(tr, "shop/cart.py", CART)
    ed.type(19, 4, "# joined\n    ")
    (h,) = tr.hunks()
    assert h.start_line == 19
    ed.replace(0, 0, 0, 0, "import math\nimport sys\n", dt=120)  # far above, later: its own hunk
    by_line = sorted(tr.hunks(), key=lambda h: h.start_line)
    assert [x.start_line for x in by_line] == [0, 21]
    assert by_line[1].inserted == ed.text.split("\n")[21:21 + len(by_line[1].inserted)]
    ed.replace(0, 0, 2, 0, "", dt=1)  # the imports deleted again: that hunk is undone, the other moves back
    (h2,) = tr.hunks()
    assert h2.id == h.id and h2.start_line == 19


def test_nearby_edit_merges_only_while_fresh():
    tr = HunkTracker(merge_gap_lines=2, merge_gap_s=60.0)
    ed = Editor(tr, "shop/cart.py", CART)
    ed.type(11, 16, "  # start")
    ed.type(13, 46, "  # add", dt=1.0)  # two lines below, seconds later: same hunk
    assert len(tr.hunks()) == 1 and len(tr.hunks()[0].inserted) == 3
    ed.type(15, 17, "  # done", dt=300.0)  # two lines below, five minutes later: a new hunk
    assert len(tr.hunks()) == 2


def test_ten_thousand_edits_keep_entries_and_bytes_under_the_caps():
    rng = random.Random(7)
    tr = HunkTracker(max_hunks=50, max_bytes=20_000)
    files = {f"pkg/m{i}.py": CART * 20 for i in range(5)}
    eds = {p: Editor(tr, p, text) for p, text in files.items()}
    evicted = 0
    for _k in range(10_000):
        ed = eds[rng.choice(list(eds))]
        lines = ed.text.split("\n")
        line = rng.randrange(len(lines) - 1)
        op = rng.random()
        if op < 0.6:
            col = rng.randint(0, len(lines[line]))
            ed.replace(line, col, line, col, rng.choice(["x", "total", " ", "\n", "item.price * 2"]), dt=0.5)
        elif op < 0.9 and lines[line]:
            col = rng.randrange(len(lines[line]))
            ed.replace(line, col, line, col + 1, "", dt=0.5)
        else:
            ed.replace(line, 0, line + 1, 0, "", dt=0.5)
        evicted += len(tr.take_evicted())
        assert len(tr.hunks()) <= 50 and tr.bytes <= 20_000
    assert tr.bytes == sum(hunk_bytes(h) for h in tr.hunks())
    assert evicted > 100  # the bounds were reached, and the oldest left
    for p, ed in eds.items():  # the tracker's copy of every file is the editor's
        assert tr.text(p) == ed.text
    # every hunk's inserted lines are where it says they are
    for h in tr.hunks():
        assert tr.text(h.path).split("\n")[h.start_line:h.end_line] == h.inserted


def test_edits_of_a_file_not_open_are_ignored_and_a_reopen_with_other_text_retires_its_hunks():
    tr = HunkTracker()
    assert tr.apply(TextEdit("x.py", 0, 0, 0, 0, "", "a", 1.0)) == []
    ed = Editor(tr, "shop/cart.py", CART)
    ed.type(0, 0, "# header\n")
    tr.closed("shop/cart.py")
    tr.opened("shop/cart.py", ed.text)  # same text: the hunk stays
    assert len(tr.hunks()) == 1
    tr.closed("shop/cart.py")
    tr.opened("shop/cart.py", CART)  # changed on disk meanwhile: the hunk's lines say nothing any more
    assert tr.hunks() == [] and len(tr.take_evicted()) == 1
