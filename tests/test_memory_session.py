"""SessionMemory.select: SCM's controller (consult or not, how many tokens, full or thought), MemGPT's eviction into
summaries, FragRel relations, what is visible already; bounds of a whole session."""

from __future__ import annotations

import random

import pytest
from test_memory_hunks import CART
from test_memory_thoughts import ORDERS

from repocomp.backends.local_model import LocalModel
from repocomp.bench.memory import memory_bench
from repocomp.config.schema import MemoryConfig, PromptConfig
from repocomp.memory.controller import prompt_form
from repocomp.memory.events import TextEdit
from repocomp.memory.session import SessionMemory
from repocomp.tokenize import code_tokens

STRINGS = '''\
def pad_left(text, width, fill=" "):
    """Pad `text` on the left to `width` characters."""
    return fill * max(0, width - len(text)) + text


def slugify(title):
    return "-".join(word.lower() for word in title.split())
'''


def count(text: str) -> int:
    return len(code_tokens(text))


def _session(**cfg) -> SessionMemory:
    """A session over three open files, FragRel over it on (the tests give it their own relation callbacks)."""
    mem = SessionMemory(None, MemoryConfig(**({"enabled": True, "persist": False, "relations": True} | cfg)))
    for p, text in (("shop/cart.py", CART), ("shop/orders.py", ORDERS), ("util/strings.py", STRINGS)):
        mem.opened(p, text, 1000.0)
    return mem


def _add_tax(mem: SessionMemory, t: float = 1001.0) -> None:
    """The user adds a `tax_rate` parameter to total() and uses it (two hunks in cart.py)."""
    mem.edited(TextEdit("shop/cart.py", 10, 15, 10, 15, "", ", tax_rate=0.0", t))
    mem.edited(TextEdit("shop/cart.py", 14, 17, 14, 17, "", " * (1 + tax_rate)", t + 1))


def test_nothing_edited_or_memory_off_is_not_consulted():
    mem = _session()
    d = mem.select("shop/orders.py", 4, ORDERS.split("\n")[:4], 200, count)
    assert not d.consulted and d.entries == () and d.budget_tokens == 0 and "nothing edited" in d.reason
    off = SessionMemory(None, MemoryConfig(enabled=False, persist=False))
    off.opened("shop/cart.py", CART, 1.0)
    off.edited(TextEdit("shop/cart.py", 0, 0, 0, 0, "", "import os\n", 2.0))
    d = off.select("shop/cart.py", 3, [], 200, count)
    assert not d.consulted and "off" in d.reason and off.hunks() == []


def test_the_controller_skips_memory_when_nothing_relates():
    mem = _session(min_score=0.05)  # the threshold's setting (off by default)
    _add_tax(mem)
    assert len(mem.hunks()) == 2  # the signature and the return line, four lines apart
    # typing in util/strings.py, about padding: no shared identifier, another file, no graph relation
    d = mem.select("util/strings.py", 6, STRINGS.split("\n")[:6], 300, count,
                   relation=lambda p1, l1, p2, l2: 0.0)
    assert not d.consulted and d.entries == () and d.budget_tokens == 0
    assert "nothing in the session relates to this cursor" in d.reason and "min_score" in d.reason


def test_a_related_cursor_gets_the_hunk_and_its_thought():
    mem = _session()
    _add_tax(mem)
    prefix = ORDERS.split("\n")[:4] + ["    amount = total(cart.items, tax_rate="]
    d = mem.select("shop/orders.py", 4, prefix, 300, count)
    assert d.consulted
    kinds = [e.kind for e in d.entries]
    assert "hunk" in kinds
    hunk = next(e for e in d.entries if e.kind == "hunk")
    assert hunk.path == "shop/cart.py" and hunk.start_line == 10
    assert hunk.lines[0] == "was: def total(items):" and "def total(items, tax_rate=0.0):" in hunk.lines
    assert any(r.startswith("overlap ") for r in hunk.reasons) and "recent" in hunk.reasons
    thought = next(e for e in d.entries if e.kind == "thought")
    assert thought.start_line == -1 and thought.text.startswith("parameter `tax_rate` added to `total`")
    assert d.budget_tokens == sum(count(prompt_form(e)) for e in d.entries) <= 300


def test_a_file_closed_unsaved_takes_its_hunks_and_thoughts_with_it():
    """Edits abandoned by closing without saving are not offered later; other files' edits stay."""
    mem = _session()
    _add_tax(mem)
    mem.edited(TextEdit("shop/orders.py", 0, 0, 0, 0, "", "import decimal\n", 1003.0))
    assert {h.path for h in mem.hunks()} == {"shop/cart.py", "shop/orders.py"} and mem.thoughts()
    mem.discarded("shop/cart.py")
    assert {h.path for h in mem.hunks()} == {"shop/orders.py"}
    assert not any("tax_rate" in t.text for t in mem.thoughts())
    prefix = ORDERS.split("\n")[:4] + ["    amount = total(cart.items, tax_rate="]
    assert all(e.path != "shop/cart.py" for e in mem.select("shop/orders.py", 4, prefix, 300, count).entries)


def test_a_hunk_visible_in_the_context_already_is_never_returned():
    mem = _session()
    _add_tax(mem)
    cart_now = mem.tracker.text("shop/cart.py").split("\n")
    d = mem.select("shop/cart.py", 16, cart_now[:16], 300, count)  # the edited lines are in the prefix
    assert all(e.kind != "hunk" for e in d.entries)


def test_graph_relation_brings_an_entry_without_shared_tokens():
    mem = _session(min_score=0.05)
    mem.edited(TextEdit("util/strings.py", 6, 0, 6, 0, "", "@cache\n", 1001.0))
    prefix = ORDERS.split("\n")[:4]
    none = mem.select("shop/orders.py", 4, prefix, 300, count, relation=lambda *a: 0.0)
    assert not none.consulted

    def relation(p1, l1, p2, l2):
        return 0.8 if {p1, p2} == {"util/strings.py", "shop/orders.py"} else 0.0

    d = mem.select("shop/orders.py", 4, prefix, 300, count, relation=relation)
    assert d.consulted and d.entries[0].path == "util/strings.py"
    assert "related 0.80" in d.entries[0].reasons
    # FragRel: s_rel = s_ind + alpha * s_env; here s_ind is 0 and s_env 0.8 (one relation, to the cursor)
    assert d.entries[0].score == pytest.approx(0.5 * 0.8 * (0.5 + 0.5), rel=1e-6)
    failing = mem.select("shop/orders.py", 4, prefix, 300, count, relation=lambda *a: 1 / 0)
    assert not failing.consulted  # a failing graph is no relation, not a failed completion


def _many_related(mem: SessionMemory, n: int) -> None:
    """n separate hunks in orders.py's checkout style, each a few lines (far apart, minutes apart)."""
    text = mem.tracker.text("shop/orders.py")
    t = 1100.0
    for k in range(n):
        end = len(text.split("\n")) - 1
        block = (f"\n\ndef checkout_{k}(cart, user):\n    amount = total(cart.items)\n"
                 f"    amount -= user.credit_{k}\n    return amount\n")
        mem.edited(TextEdit("shop/orders.py", end, 0, end, 0, "", block, t))
        text = mem.tracker.text("shop/orders.py")
        t += 120.0


@pytest.mark.parametrize("budget", [12, 40, 80, 200, 1000])
def test_the_budget_is_respected(budget):
    mem = _session(max_entries=6)
    _add_tax(mem)
    _many_related(mem, 8)
    prefix = ["def refund(cart, user):", "    amount = total(cart.items)"]
    d = mem.select("shop/payments.py", 2, prefix, budget, count)
    used = sum(count(prompt_form(e)) for e in d.entries)
    assert used == d.budget_tokens <= budget
    assert sum(count(e.text) for e in d.entries) <= budget
    if budget >= 40:
        assert d.consulted and len(d.entries) >= 1
    if budget == 1000:  # plenty: the best entries in full, fewer tokens than offered (few qualify)
        assert sum(e.kind == "hunk" for e in d.entries) >= 3 and d.budget_tokens < budget
    if budget == 40:  # pressure: hunks over a third of the budget are shown as one line each
        assert all(e.kind == "thought" for e in d.entries)


def test_under_pressure_the_oldest_full_hunks_become_summaries():
    mem = _session(max_entries=4)
    _many_related(mem, 4)
    assert len(mem.hunks()) == 4
    prefix = ["def refund(cart, user):", "    amount = total(cart.items)"]
    roomy = mem.select("shop/payments.py", 2, prefix, 2000, count)
    # the block's repeated shape once (its three line shapes are one block: nothing shown twice), then hunks
    assert [e.kind for e in roomy.entries] == ["thought", "hunk", "hunk", "hunk"]
    assert roomy.entries[0].text.startswith("added lines like `amount = total(cart.items)` in 4 places")
    hunks = [e for e in roomy.entries if e.kind == "hunk"]
    assert hunks[0].lines[0] == "def checkout_3(cart, user):"  # the latest first; no blank lines at the ends
    oldest = min(hunks, key=lambda e: e.start_line)  # each block was appended below the previous
    tight = mem.select("shop/payments.py", 2, prefix, roomy.budget_tokens - 1, count)
    assert tight.consulted and tight.budget_tokens <= roomy.budget_tokens - 1
    summaries = [e for e in tight.entries if "summary" in e.reasons]
    assert len(summaries) == 1 and summaries[0].kind == "thought"
    assert summaries[0].text == (f"edited shop/orders.py line {oldest.start_line + 1}: "
                                 f"`{oldest.lines[0]}` (+6 -0 lines)")
    assert [e.kind for e in tight.entries].count("hunk") == 2


def test_a_long_hunk_is_shown_as_its_thought_or_its_summary():
    mem = _session()
    body = "".join(f"    step_{i} = amount * {i}\n" for i in range(30))
    mem.edited(TextEdit("shop/cart.py", 16, 0, 16, 0, "", "def audit(amount):\n" + body + "\n", 1001.0))
    (h,) = mem.hunks()
    prefix = ["    report = audit(amount)", "    check(step_1, step_2)"]
    d = mem.select("shop/orders.py", 4, prefix, 60, count)
    assert d.consulted and d.budget_tokens <= 60
    (e,) = d.entries
    assert e.kind == "thought" and "summary" in e.reasons  # a 32-line hunk is over a third of 60 tokens
    assert e.text == f"edited shop/cart.py line {h.start_line + 1}: `def audit(amount):` (+32 -0 lines)"
    roomy = mem.select("shop/orders.py", 4, prefix, 2000, count)
    assert roomy.entries[0].kind == "hunk" and "    step_29 = amount * 29" in roomy.entries[0].lines

    # a file holding such a function renamed at once (find and replace in a selection): a long hunk with a thought
    mem = _session()
    mem.opened("shop/audit.py", "def audit(amount):\n" + body, 1400.0)
    renamed = body.replace("amount", "subtotal")
    mem.edited(TextEdit("shop/audit.py", 1, 0, 31, 0, body, renamed, 1500.0))
    assert len(mem.hunks()) == 1 and len(mem.hunks()[0].removed) == 30
    assert [t.key for t in mem.thoughts()] == ["rename:amount->subtotal"]
    d = mem.select("shop/orders.py", 4, ["    check(step_1, step_2, subtotal)"], 60, count)
    texts = [e.text for e in d.entries]
    assert "renamed `amount` to `subtotal` (shop/audit.py)" in texts
    assert not any("step_29" in t for t in texts) and d.budget_tokens <= 60


def test_accepted_completion_marks_its_hunk():
    mem = _session()
    mem.completion_shown("shop/orders.py", 7, "    log.info(amount)", 1200.0)
    mem.completion_accepted("shop/orders.py", 7, "    log.info(amount)", 1200.5)
    mem.edited(TextEdit("shop/orders.py", 7, 0, 7, 0, "", "    log.info(amount)\n", 1200.6))
    (h,) = mem.hunks()
    assert h.source == "accepted"
    mem.edited(TextEdit("shop/cart.py", 0, 0, 0, 0, "", "import math\n", 1300.0))
    mem.completion_accepted("shop/cart.py", 0, "import math", 1300.2)  # the edit first, then the accept
    assert {h.path: h.source for h in mem.hunks()} == {"shop/orders.py": "accepted", "shop/cart.py": "accepted"}
    assert mem.stats()["shown"] == 1 and mem.stats()["accepted"] == 2


def test_ten_thousand_edits_keep_the_session_under_its_caps():
    rng = random.Random(3)
    cfg = {"max_hunks": 40, "max_bytes": 8_000, "store_max_bytes": 30_000}
    mem = _session(**cfg)
    texts = {p: mem.tracker.text(p) for p in ("shop/cart.py", "shop/orders.py", "util/strings.py")}
    t = 2000.0
    for k in range(10_000):
        p = rng.choice(list(texts))
        lines = texts[p].split("\n")
        ln = rng.randrange(len(lines))
        col = rng.randint(0, len(lines[ln]))
        new = rng.choice(["x", "total", "\n", "    amount += 1\n", "def f(a, b):\n"])
        t += rng.uniform(0.05, 90.0)
        mem.edited(TextEdit(p, ln, col, ln, col, "", new, t))
        texts[p] = mem.tracker.text(p)
        if k % 500 == 0:
            s = mem.stats()
            assert s["hunks"] <= 40 and s["hunk_bytes"] <= 8_000 and s["recall_bytes"] <= 30_000
    s = mem.stats()
    assert s["hunks"] <= 40 and s["hunk_bytes"] <= 8_000 and s["recall_bytes"] <= 30_000
    assert s["recall_hunks"] > 0 and s["edits"] == 10_000
    assert len(mem.all_thoughts) <= 256
    d = mem.select("shop/orders.py", 3, ["def checkout(cart, user):", "    amount = total("], 200, count)
    assert d.budget_tokens <= 200


@pytest.mark.local_model
def test_the_budget_is_respected_with_the_models_tokenizer(local_model: LocalModel):
    """With the prepared default model's own tokenizer (what budgets count with once it is prepared); without a
    prepared model the `local_model` fixture fails the test saying how to prepare it."""
    from repocomp.prompt.layout import estimate_tokens, make_token_counter

    where = local_model.path
    assert (where / "tokenizer.json").is_file(), f"the prepared model at {where} has no tokenizer.json: prepare it " \
        "again (`repocomp model prepare`)"
    counter = make_token_counter(PromptConfig(tokenizer=str(where)))
    assert counter is not estimate_tokens
    mem = _session(max_entries=6)
    _add_tax(mem)
    _many_related(mem, 8)
    prefix = ["def refund(cart, user):", "    amount = total(cart.items)"]
    for budget in (20, 50, 120, 400):
        d = mem.select("shop/payments.py", 2, prefix, budget, counter)
        assert sum(counter(prompt_form(e)) for e in d.entries) == d.budget_tokens <= budget
        assert d.consulted == bool(d.entries)
    assert mem.select("shop/payments.py", 2, prefix, 400, counter).consulted


def test_memory_bench_reports_percentiles():
    r = memory_bench(n_hunks=120, requests=20, max_hunks=50)
    assert r["queue_hunks"] == 50 and r["recall_hunks"] + r["queue_hunks"] == 120
    assert 0 < r["p50_ms"] <= r["p95_ms"] <= r["max_ms"] and r["cpu_p50_ms"] > 0


def test_clear_forgets_everything():
    mem = _session()
    _add_tax(mem)
    mem.clear()
    assert mem.hunks() == [] and mem.thoughts() == [] and mem.stats()["recall_hunks"] == 0
    assert not mem.select("shop/orders.py", 4, ["amount = total(cart.items, tax_rate="], 300, count).consulted
    mem.edited(TextEdit("shop/cart.py", 0, 0, 0, 0, "", "import math\n", 3000.0))  # the open files go on
    assert len(mem.hunks()) == 1


AREA = ["def area(shape):",
        "    if shape.kind == 'circle':",
        "        return 3.14 * shape.r ** 2",
        "    if shape.kind == 'square':",
        "        return shape.side ** 2",
        "    raise ValueError(shape.kind)"]
TYPED = ["def area(shape, unit=1):",
         "    if shape.kind == 'circle':",
         "        return math.pi * shape.r ** 2 * unit"]


def _rewriting_area(mem: SessionMemory) -> None:
    """The developer selects area()'s body in geo.py, deletes it and has typed three new lines so far."""
    mem.opened("geo.py", "import math\n\n\n" + "\n".join(AREA) + "\n", 1000.0)
    mem.edited(TextEdit("geo.py", 3, 0, 9, 0, "\n".join(AREA) + "\n", "\n".join(TYPED) + "\n", 1001.0))


def test_the_code_replaced_at_the_cursor_comes_first_from_the_line_being_rewritten():
    mem = _session()
    _rewriting_area(mem)
    prefix = ["import math", "", ""] + TYPED
    d = mem.select("geo.py", 6, prefix, 300, count, relation=lambda p1, l1, p2, l2: 0.0)
    assert d.consulted and "the code replaced at the cursor" in d.reason
    first = d.entries[0]
    # the last typed line rewrites AREA[2]: the window starts two lines above its successor, AREA[3]
    assert first.kind == "replaced" and first.path == "geo.py" and first.start_line == 3
    assert first.lines == AREA[1:] and first.reasons == ("replaced at the cursor",)
    assert prompt_form(first).startswith("# geo.py (line 4), before the edit at the cursor:\n#     if shape.kind")
    assert d.budget_tokens == sum(count(prompt_form(e)) for e in d.entries) <= 300
    # a budget for the title and two lines: the window is cut from its end, never past the budget
    small = count(prompt_form(first)) - count("# " + AREA[-1] + "\n") - count("# " + AREA[-2] + "\n") - \
        count("# " + AREA[-3] + "\n")
    d = mem.select("geo.py", 6, prefix, small, count, relation=lambda p1, l1, p2, l2: 0.0)
    assert d.entries[0].lines == AREA[1:3] and d.budget_tokens <= small
    # elsewhere in the file (above the hunk) nothing was replaced: the session is not consulted for it
    d = mem.select("geo.py", 1, ["import math"], 300, count, relation=lambda p1, l1, p2, l2: 0.0)
    assert all(e.kind != "replaced" for e in d.entries)


def test_replaced_code_with_nothing_typed_yet_is_shown_whole():
    mem = _session()
    mem.opened("geo.py", "import math\n\n\n" + "\n".join(AREA) + "\n", 1000.0)
    mem.edited(TextEdit("geo.py", 3, 0, 9, 0, "\n".join(AREA) + "\n", "", 1001.0))  # a deletion so far
    d = mem.select("geo.py", 3, ["import math", "", ""], 300, count)
    # the code line above the hunk comes first: what the cursor follows, the anchor to copy after
    assert d.consulted and d.entries[0].kind == "replaced" and d.entries[0].lines == ["import math"] + AREA


GREET = 'def greet(name):\n    print("Hello %s!" % name)\n'


def test_the_same_edit_made_elsewhere_before_is_shown_in_full():
    mem = _session()
    for p in ("docs/one.py", "docs/two.py"):
        mem.opened(p, GREET, 1000.0)
    mem.edited(TextEdit("docs/one.py", 1, 0, 2, 0, '    print("Hello %s!" % name)\n',
                        '    print(f"Hello {name}!")\n', 1001.0))
    # in two.py the same line is deleted, about to be retyped
    mem.edited(TextEdit("docs/two.py", 1, 0, 2, 0, '    print("Hello %s!" % name)\n', "", 1010.0))
    d = mem.select("docs/two.py", 1, ["def greet(name):"], 120, count, relation=lambda p1, l1, p2, l2: 0.0)
    assert [e.kind for e in d.entries][:2] == ["replaced", "hunk"]
    analog = d.entries[1]
    assert analog.path == "docs/one.py" and "replaced like the cursor's code 1.00" in analog.reasons
    assert analog.lines == ['was: print("Hello %s!" % name)', '    print(f"Hello {name}!")']
    assert d.budget_tokens <= 120
    # the cursor elsewhere, nothing replaced there: the hunk is no analog
    d = mem.select("util/strings.py", 6, STRINGS.split("\n")[:6], 120, count)
    assert all("replaced like" not in r for e in d.entries for r in e.reasons)


def test_renames_made_elsewhere_are_applied_to_the_replaced_code():
    mem = _session()
    old = "def perimeter(shape):\n    return 2 * shape.r\n"
    mem.opened("calc.py", old, 1000.0)
    mem.edited(TextEdit("calc.py", 0, 0, 2, 0, old, old.replace("shape", "figure"), 1000.5))
    assert "rename:shape->figure" in [t.key for t in mem.thoughts()]
    _rewriting_area(mem)
    d = mem.select("geo.py", 6, ["import math", "", ""] + TYPED, 300, count, relation=lambda p1, l1, p2, l2: 0.0)
    first = d.entries[0]
    assert first.kind == "replaced" and "renamed as before: `shape` -> `figure`" in first.reasons
    assert first.lines == [ln.replace("shape", "figure") for ln in AREA[1:]]
    # a thought of the cursor's own hunk is not applied to it: typing `figure` over `shape` in place
    mem2 = _session()
    mem2.opened("calc.py", old, 1000.0)
    mem2.edited(TextEdit("calc.py", 0, 0, 1, 0, "def perimeter(shape):\n", "def perimeter(figure):\n", 1000.5))
    assert "rename:shape->figure" in [t.key for t in mem2.thoughts()]
    d = mem2.select("calc.py", 1, ["def perimeter(figure):"], 300, count)
    assert d.entries[0].kind == "replaced" and d.entries[0].lines == ["def perimeter(shape):"]
