"""Property: any sequence of edits, creations, deletions, renames and ignored-path changes applied through the
incremental path, then `refresh_relations`, gives the index a fresh build gives (issue 10).

Fragment ids differ between the two (an update appends, a build numbers from zero), so everything is compared by
content: a fragment is its text (unique among live fragments) with its locations."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repocomp.config.schema import Config
from repocomp.context.retrieval import Retriever
from repocomp.index import Index

BASE = {
    ".gitignore": "gen/\n",
    "pkg/__init__.py": "",
    "pkg/core.py": "def scale(x):\n    return x * 2\n\n\ndef shift(x):\n    return x + 1\n",
    "pkg/use.py": "from pkg.core import scale, shift\n\n\ndef both(x):\n    return scale(shift(x))\n",
    "main.py": "from pkg.use import both\n\n\ndef run():\n    value = both(3)\n    return value\n",
}
NAMES = ("pkg/core.py", "pkg/use.py", "main.py", "pkg/extra.py", "tools/t.py")
BODIES = (
    "from pkg.core import scale\n\n\ndef helper(v):\n    return scale(v) - 1\n",
    "def scale(x):\n    return x * 3\n",
    "from pkg.use import both\n\nTOTAL = both(1) + both(2)\n",
    "import pkg.core as core\n\n\nclass Box:\n    def grow(self, v):\n        return core.shift(v)\n",
    "def shift(x):\n    return x - 1\n\n\ndef scale(x):\n    return shift(x) * 2\n",
)
CONFIG = Config().replace("fragments", window=4, stride=2).replace("relations", top_k=4)

op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(NAMES), st.integers(0, len(BODIES) - 1)),
    st.tuples(st.just("delete"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("rename"), st.sampled_from(NAMES), st.integers(0, len(NAMES) - 1)),
    st.tuples(st.just("ignored"), st.just("gen/made.py"), st.integers(0, len(BODIES) - 1)),
    st.tuples(st.just("edit"), st.sampled_from(NAMES), st.integers(0, 7)),  # one line of a buffer, as typed
    st.tuples(st.just("compact"), st.just(""), st.just(0)),
)


def _apply(root: Path, index: Index, kind: str, path: str, arg: int) -> None:
    target = root / path
    if kind == "compact":
        index.compact()
        return
    if kind == "edit":  # the language server's buffer sync: relation rows left to the background refresh
        if path in index.files:
            lines = index.files[path].text.split("\n")
            lines[arg % len(lines)] += f"  # typed {arg}"
            target.write_text("\n".join(lines))
            index.update_files({path: "\n".join(lines)}, defer_relations=True)
        return
    if kind in ("write", "ignored"):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(BODIES[arg])
        if arg % 2:  # half as an editor sends a saved buffer, half as a watcher reports a path
            index.update_file(path, text=BODIES[arg])
        else:
            index.update_files({path: None})
    elif kind == "delete":
        target.unlink(missing_ok=True)
        index.update_file(path)
    else:  # rename, one batch as a watcher reports it
        new = NAMES[arg]
        if not target.exists() or new == path:
            return
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        target.replace(root / new)
        index.update_files({path: None, new: None})


def _fragments(index: Index) -> dict[str, list]:
    return {f.text: sorted(f.locations) for f in index.fragments if f is not None}


def _relations(index: Index) -> dict[tuple[str, str], float]:
    w = index.relations.tocoo()
    text = [f.text if f is not None else None for f in index.fragments]
    return {(text[i], text[j]): float(v) for i, j, v in zip(w.row, w.col, w.data) if v}


def _scores(index: Index, query: str) -> dict[str, float]:
    s = index.term_index.score(query)
    return {f.text: float(s[f.id]) for f in index.fragments if f is not None}


def _hits(index: Index, query: str) -> list[tuple[str, float]]:
    res = Retriever(index, CONFIG.replace("retrieval", alpha=0.5, query_relations=0.25)).retrieve(
        query, path="main.py", prompt_start_line=0, cursor_line=3)
    return [(index.fragments[h.fragment_id].text, round(h.s_rel, 5)) for h in res.hits]


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=6))
def test_incremental_updates_then_refresh_equal_a_fresh_build(ops: list[tuple[str, str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        for rel, text in BASE.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        index = Index.build(root, CONFIG)
        for kind, path, arg in ops:
            _apply(root, index, kind, path, arg)
        # counted before W is made from its patched rows, removed fragments' columns dropped
        assert index.upkeep.relation_count() == index.relations.nnz
        index.refresh_relations()
        assert not index.relations_stale
        fresh = Index.build(root, CONFIG)

        assert {p: e.text for p, e in index.files.items()} == {p: e.text for p, e in fresh.files.items()}
        assert "gen/made.py" not in index.files
        assert _fragments(index) == _fragments(fresh)
        assert _relations(index) == _relations(fresh)
        for query in ("return scale(shift(x))", "def grow(self, v):", "TOTAL = both(1)"):
            assert _scores(index, query) == _scores(fresh, query)
            assert _hits(index, query) == _hits(fresh, query)
        shutil.rmtree(root)


def test_ids_stay_bounded_over_many_edits_and_compaction_keeps_the_index(tmp_path: Path, monkeypatch) -> None:
    import repocomp.index.index as index_module

    monkeypatch.setattr(index_module, "_MIN_DEAD_IDS", 64)  # compact early, as a large repository would
    root = tmp_path / "repo"
    for rel, text in BASE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    index = Index.build(root, CONFIG)
    nodes, frags = index.graph.n_alive, len(index.fragments)
    text = BASE["main.py"]
    for i in range(300):  # a session typing in one file
        text = text.rstrip("\n") + ("\n" if i % 7 == 0 else "") + "x"
        index.update_files({"main.py": text}, defer_relations=i % 2 == 0)
        assert index.graph.n_ids <= 2 * index.graph.n_alive + 64 + 40
        assert len(index.fragments) <= 2 * index.summary.fragments + 64 + 20
    assert index.epoch > 0
    assert all(f.id == i for i, f in enumerate(index.fragments) if f is not None)
    index.refresh_relations()
    (root / "main.py").write_text(text)
    fresh = Index.build(root, CONFIG)
    assert _fragments(index) == _fragments(fresh) and _relations(index) == _relations(fresh)
    for query in ("return scale(shift(x))", "value = both(3)"):
        assert _scores(index, query) == _scores(fresh, query) and _hits(index, query) == _hits(fresh, query)
    assert index.graph.n_alive == fresh.graph.n_alive and nodes > 0 and frags > 0


def test_preparing_an_update_changes_nothing_and_applying_it_is_the_update(tmp_path: Path) -> None:
    """The language server prepares an update while requests read the index (`Index.prepare_update`): the index
    reads the same until the update is applied, which then equals `update_files`."""
    roots = []
    for name in ("a", "b"):
        root = tmp_path / name
        for rel, text in BASE.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        roots.append(root)
    prepared_index, updated = Index.build(roots[0], CONFIG), Index.build(roots[1], CONFIG)
    queries = ("return scale(shift(x))", "def shift(x):")
    before = (_fragments(prepared_index), _relations(prepared_index), [_hits(prepared_index, q) for q in queries])
    changes = {"pkg/core.py": BODIES[4], "pkg/extra.py": BODIES[0]}
    prepared = prepared_index.prepare_update(changes)
    assert prepared is not None and prepared_index.prepare_update({"main.py": BASE["main.py"]}) is None
    assert (_fragments(prepared_index), _relations(prepared_index),
            [_hits(prepared_index, q) for q in queries]) == before
    assert prepared_index.apply_update(prepared, defer_relations=True)
    assert updated.update_files(changes, defer_relations=True)
    for index in (prepared_index, updated):
        index.refresh_relations()
    assert _fragments(prepared_index) == _fragments(updated) != before[0]
    assert _relations(prepared_index) == _relations(updated)
    assert [_hits(prepared_index, q) for q in queries] == [_hits(updated, q) for q in queries]
