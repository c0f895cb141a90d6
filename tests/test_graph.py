"""Code graph: edge types and weights, call resolution, syntax errors, other languages, networkx reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from graph.code_graph import EDGE_TYPES
from repocomp.config.loading import config_from_dict
from repocomp.config.schema import Config
from repocomp.index import Index

FIXTURE = Path(__file__).parent.parent / "fixtures" / "index_repo"


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Index:
    root = tmp_path_factory.mktemp("repo") / "index_repo"
    shutil.copytree(FIXTURE, root)
    return Index.build(root, Config())


def _node(index: Index, path: str, kind: str, line: int) -> int:
    entry = index.files[path]
    parsed = entry.parsed
    for local in range(parsed.n_nodes):
        if parsed.kinds[local] == kind and parsed.start_line[local] == line:
            return int(entry.node_ids[local])
    raise AssertionError(f"no {kind} at {path}:{line}")


def _call_targets(index: Index, path: str) -> set[tuple[str, str, int]]:
    """(target file, target kind, target first line) of every call edge leaving `path`."""
    g = index.graph
    out = set()
    for _src, dst in g.files[path].call_edges.tolist():
        out.add((g.owner[dst], g.kind[dst], _line_of(index, dst)))
    return out


def _line_of(index: Index, node: int) -> int:
    entry = index.files[index.graph.owner[node]]
    local = int(np.flatnonzero(entry.node_ids == node)[0])
    return int(entry.parsed.start_line[local])


def test_every_edge_type_present_with_its_configured_weight(index):
    nxg = index.to_networkx()
    weights = Config().graph
    by_type: dict[str, set[float]] = {}
    for _, _, data in nxg.edges(data=True):
        by_type.setdefault(data["type"], set()).add(data["weight"])
    assert set(by_type) == set(EDGE_TYPES)
    for name in EDGE_TYPES:
        assert by_type[name] == {getattr(weights, name)}
    counts = index.graph.edge_counts()
    assert all(counts[name] > 0 for name in EDGE_TYPES)


def test_weights_come_from_configuration(tmp_path):
    root = tmp_path / "r"
    shutil.copytree(FIXTURE, root)
    config = config_from_dict({"graph": {"call": 0.9, "syntax": 0.4}})
    nxg = Index.build(root, config).to_networkx()
    types = {(d["type"], d["weight"]) for _, _, d in nxg.edges(data=True)}
    assert ("call", 0.9) in types and ("syntax", 0.4) in types


def test_python_calls_resolve_across_files(index):
    targets = _call_targets(index, "app.py")
    # from pkg import Engine (re-exported by pkg/__init__.py): class instantiation
    assert ("pkg/core.py", "class_definition", 7) in targets
    # from pkg.util import normalize
    assert ("pkg/util.py", "function_definition", 0) in targets
    # import pkg.core as core; core.helper(...)
    assert ("pkg/core.py", "function_definition", 3) in targets


def test_relative_import_and_self_method_calls(index):
    assert ("pkg/util.py", "function_definition", 5) in _call_targets(index, "pkg/sub/mod.py")
    core = _call_targets(index, "pkg/core.py")
    assert ("pkg/core.py", "function_definition", 16) in core  # self.scale(...)
    assert ("pkg/core.py", "function_definition", 3) in core  # helper(...) in-file


def test_syntax_error_file_still_has_nodes(index):
    entry = index.files["broken.py"]
    assert entry.parsed.has_errors
    kinds = set(entry.parsed.kinds)
    assert "function_definition" in kinds and "class_definition" in kinds
    assert index.summary.parse_errors == 1


def test_java_and_typescript_are_parsed_and_windowed(index):
    for path, kind in (("java/Main.java", "method_declaration"), ("web/app.ts", "function_declaration")):
        entry = index.files[path]
        assert kind in entry.parsed.kinds
        assert len(entry.windows), path
        assert any(loc.path == path for loc in index.fragments[entry.windows[0]].locations)
    assert ("web/greet.ts", "function_declaration", 0) in _call_targets(index, "web/app.ts")
    assert ("java/Main.java", "method_declaration", 1) in _call_targets(index, "java/Main.java")


def test_gitignored_files_are_not_indexed(tmp_path):
    root = tmp_path / "r"
    shutil.copytree(FIXTURE, root)
    (root / "ignored_dir").mkdir()
    (root / "ignored_dir" / "x.py").write_text("x = 1\n")
    (root / "generated.py").write_text("y = 2\n")
    index = Index.build(root)
    assert "generated.py" not in index.files and "ignored_dir/x.py" not in index.files
    assert "app.py" in index.files


def test_networkx_export_matches_graph_size(index):
    nxg = index.to_networkx()
    assert nxg.number_of_nodes() == int(index.graph.alive.sum())
    assert isinstance(nxg, nx.Graph)
    # directory tree: the file node of pkg/sub/mod.py reaches the repository root folder through folders
    root_dir = index.graph.dirs[""]
    file_node = index.graph.files["pkg/sub/mod.py"].file_node
    path = nx.shortest_path(nxg, file_node, root_dir)
    assert [nxg.nodes[n]["kind"] for n in path] == ["file", "directory", "directory", "directory"]


def test_parsing_holds_no_memory_after_it_returns() -> None:
    """The parser keeps a reference to every piece its read callback returns (py-tree-sitter 0.26): ten more
    parses of a 55 kB file must not hold the pieces (they held ~60 kB each when every file was read in pieces)."""
    import gc
    import tracemalloc

    from graph.parsing import parse_source

    text = "".join(f"def f{i}(x):\n    return g{i}(x) + {i}\n\n\n" for i in range(1500))
    tracemalloc.start()
    try:
        # first uses: grammar and queries set up, names interned (kept alive, so the interpreter's table of
        # interned names does not grow in what is measured)
        kept = parse_source(text, "python")
        gc.collect()
        before, _ = tracemalloc.get_traced_memory()
        for _ in range(10):
            parse_source(text, "python")
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 100_000
    assert kept.n_nodes > 1500


def test_call_sites_are_kept_compactly_with_one_tuple_per_callee() -> None:
    from graph.parsing import parse_source

    parsed = parse_source("def f(x):\n    os.path.join(x)\n    g(x)\n    os.path.join(x, x)\n", "python")
    assert [parts for _, parts in parsed.calls] == [("os", "path", "join"), ("g",), ("os", "path", "join")]
    assert parsed.call_parts[0] is parsed.call_parts[2]  # equal callees share one tuple
    assert parsed.call_nodes.dtype == np.int32 and [n for n, _ in parsed.calls] == parsed.call_nodes.tolist()
    assert all(0 < n < parsed.n_nodes for n in parsed.call_nodes)


def test_two_builds_store_the_same_index(tmp_path) -> None:
    """Builds are reproducible: the parser's call sites come in source order, not the query cursor's."""
    from repocomp.index import codec
    from repocomp.index.store import whole

    root = tmp_path / "index_repo"
    shutil.copytree(FIXTURE, root)
    first, second = (codec.encode(Index.build(root, Config())) for _ in range(2))
    assert first[1].keys() == second[1].keys()
    for name, array in first[1].items():
        assert np.array_equal(whole(array), whole(second[1][name])), name
    for meta in (first[0], second[0]):
        meta["summary"].pop("phases_s")
    assert first[0] == second[0]


def test_the_cost_matrix_patched_after_each_update_equals_a_rebuild(tmp_path) -> None:
    """Edits, new files in new folders, removals: the rows the update touched are made again, and the matrix is
    the one a rebuild gives, entry for entry (weight-1 edges are explicit zeros); so are F's transpose and sums."""
    import random

    root = tmp_path / "index_repo"
    shutil.copytree(FIXTURE, root)
    index = Index.build(root, Config())
    rng = random.Random(7)
    files = sorted(index.files)
    inserts = ["x = clamp(1, 2, 3)", "def added():\n    return normalize([1])", "", "import os", "    pass"]
    for step in range(30):
        path = rng.choice(files)
        roll = rng.random()
        if roll < 0.5 and path in index.files:
            lines = index.files[path].text.split("\n")
            lines.insert(rng.randrange(len(lines)), rng.choice(inserts))
            index.update_file(path, text="\n".join(lines))
        elif roll < 0.7 and path in index.files:
            (root / path).unlink()
            index.remove_file(path)
        else:
            new = f"new{rng.randrange(3)}/sub{rng.randrange(2)}/m{step}.py"
            (root / new).parent.mkdir(parents=True, exist_ok=True)
            (root / new).write_text(f"from pkg.util import clamp\n\n\ndef f{step}():\n    return clamp({step}, 0, 9)\n")
            index.update_file(new)
            files.append(new)
        upkeep = index.upkeep  # F, its transpose and its row sums are patched the same way
        transposed = upkeep.fragment_nodes.merged().T.tocsr()
        node_fragments = upkeep.node_fragments.merged()
        assert (node_fragments != transposed).nnz == 0 and node_fragments.shape == transposed.shape
        np.testing.assert_array_equal(upkeep._sizes, np.asarray(upkeep.fragment_nodes.merged().sum(axis=1)).ravel())
        graph = index.graph
        patched = graph.cost_matrix().merged().copy()
        assert not graph._touched
        graph._csr = None
        rebuilt = graph.cost_matrix().merged()
        for m in (patched, rebuilt):
            m.sort_indices()
        assert patched.shape == rebuilt.shape, step
        assert np.array_equal(patched.indptr, rebuilt.indptr) and np.array_equal(patched.indices, rebuilt.indices)
        assert np.array_equal(patched.data, rebuilt.data), step


def test_threads_that_read_the_cost_matrix_after_an_update_patch_it_once_as_a_rebuild_would(tmp_path) -> None:
    """The server's update worker settles the matrix while requests may ask for it: each gets the patched one."""
    import threading
    import time

    root = tmp_path / "index_repo"
    shutil.copytree(FIXTURE, root)
    index = Index.build(root, Config())
    path = sorted(index.files)[0]
    # as the server's worker applies it: the relation rows later, so nothing has read the matrix yet
    index.update_files({path: index.files[path].text + "\n\ndef added():\n    return 1\n"}, defer_relations=True)
    graph = index.graph
    assert graph._touched
    patches = []
    patched = graph._patched
    # a slow patch: the other threads ask meanwhile
    graph._patched = lambda old: patches.append(1) or time.sleep(0.1) or patched(old)  # type: ignore[method-assign]
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(graph.cost_matrix())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 4 and len({id(m) for m in seen}) == 1 and patches == [1] and not graph._touched
    matrix = seen[0].merged().copy()
    graph._csr = None
    rebuilt = graph.cost_matrix().merged()
    matrix.sort_indices()
    rebuilt.sort_indices()
    assert (matrix != rebuilt).nnz == 0


def test_coded_strings_read_as_the_list_they_stand_for_through_growth_and_compaction() -> None:
    from graph.coded_strings import CodedStrings

    coded, plain = CodedStrings(), []
    for n in range(1, 400, 37):  # past the first capacity, several doublings
        values = [f"kind{(n * k) % 7}" for k in range(n)]
        coded.extend(values)
        coded.repeat(f"path{n}", n)
        plain += values + [f"path{n}"] * n
    assert len(coded) == len(plain) and list(coded) == plain
    assert [coded[i] for i in (0, 5, -1, len(plain) - 1)] == [plain[i] for i in (0, 5, -1, len(plain) - 1)]
    assert len(coded.table) == len(set(plain)) and coded.codes.dtype == np.int32
    keep = np.array([3, 0, len(plain) - 1])
    assert list(coded.take(keep)) == [plain[i] for i in keep]
    with pytest.raises(IndexError):
        coded[len(plain)]
    stored = CodedStrings(coded.table, coded.codes.copy())  # as a load reads it
    assert list(stored) == plain
    ids = np.array([0, 5, 5, len(plain) - 1])
    assert coded.values_at(ids) == {plain[i] for i in ids.tolist()}
    wanted = {plain[0], "never seen"}
    assert coded.is_in(ids, wanted).tolist() == [plain[i] in wanted for i in ids.tolist()]
    with pytest.raises(ValueError, match="code out of range"):
        CodedStrings(["a"], np.array([0, 1], np.int32))
