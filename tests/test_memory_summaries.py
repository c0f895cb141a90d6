"""MemGPT's recursive summary by the model: what is folded, its bounds, the prompt showing it, cancellation, and
the language server's idle writer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from test_memory_hunks import CART
from test_memory_session import _add_tax, _session, count
from test_memory_thoughts import ORDERS

from lsp_server.summaries import SummaryWriter
from repocomp.backends import Capabilities, Generation, GenerationRequest
from repocomp.backends.extractive import ExtractiveBackend
from repocomp.backends.hf import TransformersBackend
from repocomp.memory.events import TextEdit
from repocomp.memory.hunks import Hunk
from repocomp.memory.summaries import (
    MAX_INPUT_CHARS,
    MAX_SUMMARY_CHARS,
    SUMMARY_TOKENS,
    SessionSummary,
    write_summary,
)


def hunk(i: int, t: float, lines: int = 1, path: str = "a.py") -> Hunk:
    return Hunk(i, path, 10 * i, [f"old_{i} = {i}"], [f"new_{i}_{k} = {k}" for k in range(lines)], t, t)


class Scripted:
    """A backend that answers with a fixed text, after `delay_s` (a model's timing without a model's cost)."""

    name = "scripted"
    capabilities = Capabilities(writes=True, in_process=True)

    def __init__(self, text: str, delay_s: float = 0.0) -> None:
        self.text, self.delay_s = text, delay_s
        self.prompts: list[str] = []
        self.cancelled = 0

    async def agenerate(self, request: GenerationRequest) -> Generation:
        self.prompts.append(request.prompt)
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Generation(self.text, self.name)


def test_settled_hunks_fold_oldest_first_and_never_the_one_being_typed() -> None:
    s = SessionSummary()
    hunks = [hunk(2, 20.0), hunk(1, 10.0), hunk(3, 30.0)]
    batch = s.batch(hunks)
    assert batch is not None and list(batch.folds) == [1, 2]  # 3 changed last: it is being typed
    assert batch.prompt.index("new_1_0") < batch.prompt.index("new_2_0") and "new_3_0" not in batch.prompt
    assert s.batch([hunk(1, 1.0)]) is None  # one hunk: it is the one being typed


def test_the_summary_is_recursive_and_a_changed_hunk_is_folded_again() -> None:
    s = SessionSummary()
    hunks = [hunk(1, 10.0), hunk(2, 20.0), hunk(3, 30.0)]
    first = s.batch(hunks)
    assert first is not None and "Earlier" not in first.prompt
    assert s.take(first, " renamed old_1 to new_1. Then more text\nand a second line")
    assert s.text == "The developer renamed old_1 to new_1."  # its first sentence, on the words it was given
    assert s.covers(hunks[0]) and s.covers(hunks[1]) and not s.covers(hunks[2])
    assert s.batch(hunks) is None  # nothing new settled
    hunks[1] = hunk(2, 25.0)  # typed into again: pending again, and no longer covered
    second = s.batch(hunks)
    assert second is not None and list(second.folds) == [2]
    assert "# Earlier: The developer renamed old_1 to new_1." in second.prompt  # the previous summary folded in
    assert not s.covers(hunks[1])


def test_what_is_folded_and_kept_is_bounded() -> None:
    s = SessionSummary()
    big = [hunk(i, float(i), lines=12) for i in range(1, 40)]
    batch = s.batch(big)
    assert batch is not None and 1 < len(batch.folds) < 38
    assert len(batch.prompt) < MAX_INPUT_CHARS + 1_000  # the hunks plus the instructions
    assert s.take(batch, " " + "x" * 2 * MAX_SUMMARY_CHARS)
    assert len(s.text) == MAX_SUMMARY_CHARS and s.text.endswith("...")
    assert not s.take(batch, "  \n renamed") and not s.take(batch, " .")  # nothing written: nothing kept
    assert s.batch(big) is not None  # the rest wait for the next call


def test_the_prompt_shows_the_models_summary_once_where_the_template_was() -> None:
    mem = _session(summaries=True)
    _add_tax(mem)
    mem.edited(TextEdit("shop/orders.py", 0, 0, 0, 0, "", "import decimal\n", 1010.0))
    prefix = ORDERS.split("\n")[:4] + ["    amount = total(cart.items, tax_rate="]
    batch = mem.summary.batch(mem.hunks())
    assert batch is not None and set(batch.folds) == {h.id for h in mem.hunks() if h.path == "shop/cart.py"}
    assert mem.summary.take(batch, " added a tax_rate parameter to total.")
    roomy = mem.select("shop/orders.py", 4, prefix, 300, count)
    assert not any("summary by the model" in e.reasons for e in roomy.entries)  # it folds only what is shown
    for budget in (80, 40):  # the first cart hunk gives way to a summary: the model's, once
        d = mem.select("shop/orders.py", 4, prefix, budget, count)
        shown = [e for e in d.entries if "summary by the model" in e.reasons]
        assert [e.text for e in shown] == ["The developer added a tax_rate parameter to total."]
        assert not any(e.text.startswith("edited shop/cart.py") for e in d.entries)  # no template beside it
        assert d.budget_tokens <= budget
    assert mem.stats()["summaries"] == 1


def test_the_summary_heads_the_session_when_it_folds_what_is_not_shown() -> None:
    mem = _session(summaries=True)
    _add_tax(mem)
    mem.edited(TextEdit("util/strings.py", 6, 0, 6, 0, "", "@cache\n", 1005.0))  # nothing to do with the cursor
    mem.edited(TextEdit("shop/orders.py", 0, 0, 0, 0, "", "import decimal\n", 1010.0))
    prefix = ORDERS.split("\n")[:4] + ["    amount = total(cart.items, tax_rate="]
    assert not any(e.path == "util/strings.py" for e in mem.select("shop/orders.py", 4, prefix, 300, count).entries)
    batch = mem.summary.batch(mem.hunks())
    assert batch is not None and mem.summary.take(batch, " added tax_rate to total and cached slugify.")
    d = mem.select("shop/orders.py", 4, prefix, 300, count)
    assert d.entries[-1].reasons == ("summary by the model",)  # last: the first to leave under pressure
    assert d.entries[-1].text == "The developer added tax_rate to total and cached slugify."
    assert sum("summary by the model" in e.reasons for e in d.entries) == 1


def test_without_summaries_the_template_stands_for_a_long_hunk() -> None:
    mem = _session()
    assert mem.summary is None
    body = "".join(f"    value_{k} = compute(tax_rate, {k})\n" for k in range(30))
    mem.edited(TextEdit("shop/cart.py", 15, 0, 15, 0, "", body, 1001.0))
    d = mem.select("shop/orders.py", 4, ORDERS.split("\n")[:4] + ["    x = compute(tax_rate, 3"], 120, count)
    assert any(e.text.startswith("edited shop/cart.py line 16") and "summary" in e.reasons for e in d.entries)


def test_write_summary_keeps_the_models_sentence_and_bounds_its_time() -> None:
    s = SessionSummary()
    hunks = [hunk(1, 1.0), hunk(2, 2.0)]
    backend = Scripted(" moved old_1 out of the loop.")
    assert asyncio.run(write_summary(s, hunks, backend))
    assert s.text == "The developer moved old_1 out of the loop." and len(backend.prompts) == 1
    assert (s.calls, s.answered) == (1, 1)
    dot = SessionSummary()  # answered with no sentence: counted as answered, nothing kept, still pending
    assert not asyncio.run(write_summary(dot, hunks, Scripted(" . more")))
    assert (dot.calls, dot.answered, dot.text) == (0, 1, "") and dot.batch(hunks) is not None
    slow = Scripted(" never seen.", delay_s=30.0)
    t0 = time.monotonic()
    assert not asyncio.run(write_summary(SessionSummary(), hunks, slow, time_limit_s=0.2))
    assert time.monotonic() - t0 < 5.0 and slow.cancelled == 1
    assert not asyncio.run(write_summary(SessionSummary(), hunks, ExtractiveBackend()))  # copies: no summary
    assert not asyncio.run(write_summary(SessionSummary(), [hunk(1, 1.0)], backend))  # nothing settled


def test_cancelling_the_writer_keeps_nothing() -> None:
    s = SessionSummary()
    slow = Scripted(" never kept.", delay_s=30.0)

    async def run() -> None:
        task = asyncio.create_task(write_summary(s, [hunk(1, 1.0), hunk(2, 2.0)], slow))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert s.text == "" and s.cancelled == 1 and slow.cancelled == 1 and s.batch([hunk(1, 1.0), hunk(2, 2.0)])


def test_the_real_model_writes_a_bounded_summary(tiny_model_dir: Path) -> None:
    s = SessionSummary()
    backend = TransformersBackend(model=str(tiny_model_dir), device="cpu")
    written = asyncio.run(write_summary(s, [hunk(1, 1.0), hunk(2, 2.0)], backend))
    # a random model may write nothing but a newline; whatever it writes is one bounded sentence
    assert written == bool(s.text) and s.answered == 1
    if written:
        assert s.text.startswith("The developer ") and "\n" not in s.text and len(s.text) <= MAX_SUMMARY_CHARS
        assert len(s.text.split()) <= SUMMARY_TOKENS + 2


def test_the_server_writes_when_idle_and_any_activity_cancels() -> None:
    mem = _session(summaries=True)
    _add_tax(mem)
    mem.edited(TextEdit("shop/orders.py", 0, 0, 0, 0, "", "import decimal\n", 1010.0))
    quick = Scripted(" added tax_rate.")
    slow = Scripted(" never kept.", delay_s=30.0)

    async def run() -> None:
        writer = SummaryWriter()
        writer.activity(mem, lambda: slow, idle_s=0.05)
        await asyncio.sleep(0.3)  # idle: the summary is being written
        assert slow.prompts and writer.busy() == 1
        t0 = time.monotonic()
        writer.activity(mem, lambda: quick, idle_s=0.05)  # an edit: returns at once, the slow one stops
        assert time.monotonic() - t0 < 0.05
        await asyncio.sleep(0.01)
        assert slow.cancelled == 1 and mem.summary.text == ""
        await asyncio.sleep(0.3)
        assert mem.summary.text == "The developer added tax_rate." and writer.written == 1 and writer.busy() == 0
        writer.activity(mem, lambda: quick, idle_s=10.0)
        await writer.close()
        assert writer.busy() == 0 and len(quick.prompts) == 1  # closed before its idle time: nothing written

    asyncio.run(run())
    assert CART  # the session's files are the shared fixtures


def test_hunks_gone_from_the_queue_are_forgotten() -> None:
    s = SessionSummary()
    first = [hunk(i, float(i)) for i in range(1, 6)]
    batch = s.batch(first)
    assert batch is not None and s.take(batch, " edited five places.")
    later = [hunk(i, float(i)) for i in range(10, 13)]  # the queue moved on: 1-5 went to recall storage
    s.batch(later)
    assert not any(s.covers(h) for h in first) and len(s._covered) == 0  # bounded by the queue, not the session
