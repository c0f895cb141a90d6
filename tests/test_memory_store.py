"""RecallStore: restart keeps the history; corrupt and crafted files are set aside with one warning; bounds."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from test_memory_hunks import CART

from repocomp.config.schema import MemoryConfig
from repocomp.memory.events import TextEdit
from repocomp.memory.hunks import Hunk
from repocomp.memory.session import SessionMemory
from repocomp.memory.store import RecallStore
from repocomp.memory.thoughts import Thought


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "shop-repo"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "cart.py").write_text(CART)
    return root


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "repocomp" / "memory"


def _hunk(i: int, t: float = 1000.0) -> Hunk:
    return Hunk(i, "shop/cart.py", 10 + i, [f"    amount = {i}"], [f"    subtotal = {i}"], t + i, t + i + 1)


def _thought() -> Thought:
    return Thought("rename", "rename:amount->subtotal", "renamed `amount` to `subtotal` (shop/cart.py)",
                   ("shop/cart.py",), (1,), 1002.0, 1)


def test_the_file_is_in_the_users_cache_named_by_folder_and_hash(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    store = RecallStore(repo)
    assert store.path.parent == tmp_path / "xdg" / "repocomp" / "memory"
    assert store.path.name.startswith("shop-repo-") and store.path.suffix == ".json"
    assert not store.path.resolve().is_relative_to(repo.resolve())
    other = RecallStore(tmp_path / "elsewhere" / "shop-repo")
    assert other.path != store.path  # same folder name, another root


def test_never_inside_the_repository(repo, caplog):
    with caplog.at_level(logging.WARNING):
        store = RecallStore(repo, cache_dir=repo / ".cache")
    assert "inside the repository" in caplog.text
    store.save([_hunk(1)], [])
    assert not (repo / ".cache").exists()
    assert store.load() == ([], [])


def test_save_and_load_round_trip_atomically(repo, cache):
    store = RecallStore(repo, cache_dir=cache)
    hunks = [_hunk(i) for i in range(1, 6)]
    store.save(hunks, [_thought()])
    assert [p.name for p in cache.iterdir()] == [store.path.name]  # no temporary file left behind
    got_h, got_t = store.load()
    assert got_h == hunks and got_t == [_thought()]
    doc = json.loads(store.path.read_text())
    assert set(doc) == {"version", "root", "hunks", "thoughts"}  # plain data
    store.clear()
    assert not store.path.exists() and store.load() == ([], [])


def test_bounded_the_oldest_hunks_leave(repo, cache):
    store = RecallStore(repo, max_bytes=5_000, cache_dir=cache)
    store.save([_hunk(i) for i in range(1, 500)], [_thought()])
    assert store.path.stat().st_size <= 5_000
    hunks, thoughts = store.load()
    assert 10 < len(hunks) < 499 and thoughts == [_thought()]
    assert [h.id for h in hunks] == list(range(500 - len(hunks), 500))  # the newest kept


def test_restart_keeps_recall_storage(repo, cache):
    cfg = MemoryConfig(enabled=True)
    mem = SessionMemory(repo, cfg, RecallStore(repo, cache_dir=cache))
    mem.opened("shop/cart.py", CART, 1000.0)
    mem.edited(TextEdit("shop/cart.py", 11, 4, 11, 10, "amount", "subtotal", 1001.0))
    mem.edited(TextEdit("shop/cart.py", 13, 8, 13, 14, "amount", "subtotal", 1002.0))
    assert len(mem.hunks()) == 1 and [t.key for t in mem.thoughts()] == ["rename:amount->subtotal"]
    mem.save()

    again = SessionMemory(repo, cfg, RecallStore(repo, cache_dir=cache))  # a new server over the same store
    assert again.hunks() == []  # the queue starts empty: the old hunks are in recall storage
    assert again.stats()["recall_hunks"] == 1
    assert [t.key for t in again.thoughts()] == ["rename:amount->subtotal"]
    d = again.select("shop/orders.py", 5, ["def checkout(cart):", "    subtotal = cart.amount"], 200, len)
    assert d.consulted and any("subtotal" in e.text for e in d.entries)
    # new hunks after the restart get new ids (no clash with the stored ones)
    again.opened("shop/cart.py", CART, 2000.0)
    again.edited(TextEdit("shop/cart.py", 0, 0, 0, 0, "", "import math\n", 2001.0))
    assert again.hunks()[0].id > mem.hunks()[0].id


def _rejected(repo: Path, cache: Path, data: bytes, caplog) -> tuple[RecallStore, list, list]:
    store = RecallStore(repo, cache_dir=cache)
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_bytes(data)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        hunks, thoughts = store.load()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert str(store.path) in warnings[0].getMessage() and "empty memory" in warnings[0].getMessage()
    assert not store.path.exists() and store.path.with_name(store.path.name + ".rejected").exists()
    return store, hunks, thoughts


def _doc(repo: Path, hunks=None, thoughts=None, **extra) -> bytes:
    doc = {"version": 1, "root": str(repo.resolve()),
           "hunks": hunks if hunks is not None else [], "thoughts": thoughts if thoughts is not None else []}
    doc.update(extra)
    return json.dumps(doc).encode()


GOOD_HUNK = {"id": 1, "path": "shop/cart.py", "start_line": 3, "removed": ["a"], "inserted": ["b"],
             "first_time": 1.0, "last_time": 2.0, "source": "typed"}


@pytest.mark.parametrize("data", [
    b"{not json",
    b"\xff\xfe garbage",
    b"",
    b"[" * 100_000 + b"]" * 100_000,  # nested junk, deeper than the parser goes
    b'{"version": 1, "root": "x", "hunks": [], "thoughts": [], "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}",
], ids=["not-json", "not-utf8", "empty", "nested-deep", "nested-field"])
def test_a_corrupt_file_is_set_aside_with_one_warning(repo, cache, caplog, data):
    store, hunks, thoughts = _rejected(repo, cache, data, caplog)
    assert hunks == [] and thoughts == []
    store.save([_hunk(1)], [])  # and the memory goes on
    assert store.load()[0] == [_hunk(1)]


@pytest.mark.parametrize("change", [
    {"id": "1"},  # wrong type
    {"id": True},
    {"id": 10 ** 30},  # huge numbers
    {"start_line": -1},
    {"start_line": 10 ** 12},
    {"first_time": 1e300},
    {"last_time": 0.5},  # before first_time
    {"path": "/etc/passwd"},  # leads out of the folder
    {"path": "../../secret.py"},
    {"removed": "a"},
    {"removed": [1, 2]},
    {"inserted": [["nested", ["junk"]]]},
    {"source": "exec"},
    {"__class__": "Hunk"},  # an extra field
], ids=lambda c: next(iter(c)))
def test_a_crafted_hunk_is_set_aside(repo, cache, caplog, change):
    _, hunks, thoughts = _rejected(repo, cache, _doc(repo, [GOOD_HUNK | change]), caplog)
    assert hunks == [] and thoughts == []


@pytest.mark.parametrize("data", [
    lambda repo: _doc(repo, version=2),
    lambda repo: _doc(repo, root="/somewhere/else"),
    lambda repo: _doc(repo, hunks={"1": GOOD_HUNK}),
    lambda repo: _doc(repo, hunks=[GOOD_HUNK, GOOD_HUNK]),  # duplicate ids
    lambda repo: _doc(repo, thoughts=[{"kind": "rename", "key": "rename:a->b", "text": "x\ny", "paths": ["a.py"],
                                       "hunk_ids": [1], "time": 1.0, "count": 1}]),
    lambda repo: _doc(repo, thoughts=[{"kind": "eval", "key": "eval:x", "text": "x", "paths": ["a.py"],
                                       "hunk_ids": [1], "time": 1.0, "count": 1}]),
    lambda repo: _doc(repo, thoughts=[{"kind": "rename", "key": "rename:a->b", "text": "x", "paths": ["a.py"],
                                       "hunk_ids": [1], "time": 1.0, "count": 10 ** 40}]),
    lambda repo: b'{"version": 1, "root": "r", "hunks": [], "thoughts": [], "n": NaN}',
    lambda repo: b'{"version": 1, "n": ' + b"9" * 5000 + b"}",  # an integer of too many digits
    lambda repo: b"[]",
], ids=["version", "root", "hunks-dict", "dup-ids", "thought-two-lines", "thought-kind", "thought-count",
        "nan", "huge-int", "array"])
def test_a_crafted_document_is_set_aside(repo, cache, caplog, data):
    _, hunks, thoughts = _rejected(repo, cache, data(repo), caplog)
    assert hunks == [] and thoughts == []


def test_an_oversized_file_is_not_read(repo, cache, caplog):
    store = RecallStore(repo, max_bytes=1_000, cache_dir=cache)
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(_doc(repo, [GOOD_HUNK | {"inserted": ["x" * 5_000]}]))
    with caplog.at_level(logging.WARNING):
        assert store.load() == ([], [])
    assert "larger than" in caplog.text and store.path.with_name(store.path.name + ".rejected").exists()


def test_a_session_over_a_crafted_store_starts_empty(repo, cache, caplog):
    store = RecallStore(repo, cache_dir=cache)
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(_doc(repo, [GOOD_HUNK | {"start_line": "3"}]))
    with caplog.at_level(logging.WARNING):
        mem = SessionMemory(repo, MemoryConfig(enabled=True), store)
    assert mem.stats()["recall_hunks"] == 0 and mem.thoughts() == []
    assert caplog.text.count("set aside") == 1
