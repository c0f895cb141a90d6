"""Thoughts from real diffs: rename, signature change, repeated line shape; merge on repeat, forget on revert."""

from __future__ import annotations

from test_memory_hunks import CART, Editor

from repocomp.memory.hunks import Hunk, HunkTracker
from repocomp.memory.thoughts import line_shape, think, visible

ORDERS = '''\
from shop.cart import total


def checkout(cart, user):
    amount = total(cart.items)
    if user.is_member:
        amount *= 0.9
    return amount
'''


def _thoughts_of(tr: HunkTracker, changed: list[Hunk], previous):
    for h in changed:
        previous = think(h, previous)
    return previous


class Session:
    """Editors over a tracker, thinking after every keystroke as the session memory does."""

    def __init__(self) -> None:
        self.tr = HunkTracker()
        self.thoughts = []
        self.eds = {}

    def open(self, path: str, text: str) -> Editor:
        ed = Editor(self.tr, path, text)
        orig = ed.replace

        def replace(*a, **k):
            changed = orig(*a, **k)
            self.thoughts = _thoughts_of(self.tr, changed, self.thoughts)
            return changed

        ed.replace = replace
        self.eds[path] = ed
        return ed

    def keys(self) -> dict[str, int]:
        return {t.key: t.count for t in self.thoughts if visible(t)}


def _retype(ed: Editor, line: int, col: int, old: str, new: str) -> None:
    """Select `old` at (line, col), delete it, type `new` keystroke by keystroke (as a user renames by hand)."""
    ed.replace(line, col, line, col + len(old), "")
    ed.type(line, col, new)


def test_a_rename_typed_by_hand_is_one_rename_thought():
    s = Session()
    ed = s.open("shop/cart.py", CART)
    # `amount` -> `subtotal` on the four lines of total(), each retyped by hand
    for line, col in ((11, 4), (13, 8), (14, 11)):
        _retype(ed, line, col, "amount", "subtotal")
    assert "    subtotal += item.price * item.quantity" in ed.text
    assert s.keys() == {"rename:amount->subtotal": 1}  # the half-typed names (`s`, `sub`, ...) left no thought
    (t,) = [t for t in s.thoughts if visible(t)]
    assert t.kind == "rename" and t.text == "renamed `amount` to `subtotal` (shop/cart.py)"
    assert t.paths == ("shop/cart.py",) and len(t.hunk_ids) == 1


def test_the_same_rename_in_another_file_merges_count_up():
    s = Session()
    cart = s.open("shop/cart.py", CART)
    orders = s.open("shop/orders.py", ORDERS)
    cart.replace(10, 4, 10, 9, "cart_total")  # def total( -> def cart_total(
    orders.replace(0, 22, 0, 27, "cart_total")  # the import
    orders.replace(4, 13, 4, 18, "cart_total", dt=200)  # the call, minutes later: its own hunk
    assert s.keys() == {"rename:total->cart_total": 3}
    (t,) = [t for t in s.thoughts if visible(t)]
    assert t.text == "renamed `total` to `cart_total` in 3 places (shop/cart.py, shop/orders.py)"
    assert t.paths == ("shop/cart.py", "shop/orders.py")


def test_reverting_a_rename_forgets_it():
    s = Session()
    ed = s.open("shop/cart.py", CART)
    _retype(ed, 11, 4, "amount", "subtotal")
    assert s.keys() == {"rename:amount->subtotal": 1}
    _retype(ed, 11, 4, "subtotal", "amount")  # typed back: the hunk is undone, the thought forgotten
    assert s.tr.hunks() == [] and s.thoughts == []


def test_undoing_one_place_of_a_rename_counts_down():
    s = Session()
    cart = s.open("shop/cart.py", CART)
    orders = s.open("shop/orders.py", ORDERS)
    cart.replace(10, 4, 10, 9, "cart_total")
    orders.replace(4, 13, 4, 18, "cart_total", dt=5)
    assert s.keys() == {"rename:total->cart_total": 2}
    cart.replace(10, 4, 10, 14, "total", dt=100)  # back in cart.py: that hunk is undone
    assert s.keys() == {"rename:total->cart_total": 1}
    (t,) = s.thoughts
    assert t.count == 1 and t.text.startswith("renamed `total` to `cart_total` (")  # no longer "in 2 places"


def test_a_reverse_rename_elsewhere_forgets_the_contradicted_thought():
    s = Session()
    cart = s.open("shop/cart.py", CART)
    legacy = s.open("shop/legacy.py", "from shop.cart import cart_total\n\nX = cart_total([])\n")
    cart.replace(10, 4, 10, 9, "cart_total")
    assert s.keys() == {"rename:total->cart_total": 1}
    legacy.replace(2, 4, 2, 14, "total", dt=100)  # elsewhere, `cart_total` becomes `total`: TiM's contradiction
    assert s.keys() == {"rename:cart_total->total": 1}


def test_a_parameter_added_is_a_signature_thought_in_python_javascript_and_go():
    s = Session()
    py = s.open("shop/cart.py", CART)
    py.type(10, 15, ", tax=0.0")  # def total(items, tax=0.0):
    assert "def total(items, tax=0.0):" in py.text
    assert s.keys() == {"signature:total": 1}
    (t,) = [t for t in s.thoughts if t.kind == "signature"]
    assert t.text == "parameter `tax` added to `total`: calls of `total` change (shop/cart.py)"

    js = s.open("web/cart.js", "export function total(items) {\n  return items.reduce((a, i) => a + i.price, 0);\n}\n")
    js.type(0, 27, ", currency")
    go = s.open("cart/cart.go", "package cart\n\nfunc (c *Cart) Total(items []Item, tax float64) float64 {\n"
                "\treturn 0\n}\n")
    go.replace(2, 31, 2, 44, "", dt=1)  # `, tax float64` deleted
    texts = {t.key: t.text for t in s.thoughts if visible(t)}
    assert texts["signature:total"].startswith("parameter `currency` added to `total`")
    assert texts["signature:Total"] == "parameter `tax` removed from `Total`: calls of `Total` change (cart/cart.go)"


def test_a_changed_parameter_list_says_both_and_undo_forgets_it():
    s = Session()
    ed = s.open("shop/cart.py", CART)
    ed.replace(10, 10, 10, 15, "cart, *, member=False", dt=1)  # def total(cart, *, member=False):
    (t,) = [t for t in s.thoughts if visible(t)]
    assert t.key == "signature:total"
    assert t.text.startswith("`total(items)` became `total(cart, member)`")
    ed.replace(10, 10, 10, 31, "items", dt=1)
    assert s.thoughts == [] and s.tr.hunks() == []


def test_the_same_shaped_line_added_in_several_places_is_a_repeated_thought():
    s = Session()
    ed = s.open("shop/cart.py", CART)
    # a logging line added at the top of both functions (different names, same shape)
    ed.type(11, 0, '    log.debug("total of %d items", len(items))\n')
    assert s.keys() == {}  # one place: latent
    ed.type(19, 0, '    log.debug("describe %d lines", len(lines))\n', dt=2)
    keys = s.keys()
    assert len(keys) == 1
    (key,) = keys
    assert key.startswith("repeated:") and keys[key] == 2
    (t,) = [t for t in s.thoughts if visible(t)]
    assert t.text == 'added lines like `log.debug("total of %d items", len(items))` in 2 places (shop/cart.py)'
    # the second one removed again: back to one place, not shown
    ed.replace(19, 0, 20, 0, "", dt=1)
    assert s.keys() == {}


def test_line_shape_normalizes_identifiers_and_literals():
    assert line_shape('    log.info("a %s", user.name, 3)') == line_shape("log.warn('x', order.id, 42)")
    assert line_shape("return total") == ("return", "_")
    assert line_shape("x = f(1)") != line_shape("x = f[1]")


def test_think_is_deterministic_and_leaves_previous_alone():
    h = Hunk(1, "a.py", 3, ["    amount = 0"], ["    subtotal = 0"], 1.0, 2.0)
    first = think(h, [])
    again = think(h, [])
    assert first == again and len(first) == 1
    before = [dict(vars(t)) for t in first]
    h2 = Hunk(2, "b.py", 7, ["x = amount + 1"], ["x = subtotal + 1"], 3.0, 3.0)
    merged = think(h2, first)
    assert [dict(vars(t)) for t in first] == before  # not modified
    assert merged[0].count == 2 and merged[0].hunk_ids == (1, 2)
    # an undone hunk (its tombstone: nothing removed, nothing inserted) takes its support away
    assert think(Hunk(2, "b.py", 7, [], [], 3.0, 4.0), merged)[0].count == 1
    assert think(Hunk(1, "a.py", 3, [], [], 1.0, 4.0), think(Hunk(2, "b.py", 7, [], [], 3.0, 4.0), merged)) == []
