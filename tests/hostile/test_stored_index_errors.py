"""Issue 10, item 5: a stored index that cannot be used is named for what it is and rebuilt, never a raw error.

`Index.load` raises `IndexMissingError` (none yet), `IndexStaleError` (another version of the file, of the codec's
schema or of the term index's state; other settings) or `IndexCorruptError` (damaged), all `IndexUnusableError`s.
The CLI (a real subprocess) and the language server's folder build rebuild on each: quietly when missing or stale,
with a one-line warning naming the file when corrupt; no traceback, no folder failed for good. Every index here is
a real one written to disk by `Index.save` in tmp_path, then altered in the file itself.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_run import repocomp

from lsp_server.workspace_index import WorkspaceIndexes
from repocomp.config.loading import config_from_dict
from repocomp.config.schema import Config
from repocomp.errors import IndexCorruptError, IndexMissingError, IndexStaleError, IndexUnusableError
from repocomp.index import Index
from repocomp.index import codec as index_codec
from repocomp.index.store import ALIGN, INDEX_FILE, MAGIC, whole, write_state


@pytest.fixture(autouse=True)
def _user_folders(tmp_path: Path, monkeypatch) -> None:
    """The same user folders as the CLI subprocesses get (`cli_run.user_env(tmp_path)`): one config for both."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def _saved(repo: Path) -> Path:
    Index.build(repo).save()
    return repo / ".repocomp" / INDEX_FILE


def _edit_header(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the stored file's JSON header through `edit(meta)`, the arrays after it untouched (padded with
    spaces so that they stay aligned as stored)."""
    data = path.read_bytes()
    assert data.startswith(MAGIC)
    version, length, rest = data[len(MAGIC):].split(b"\n", 2)
    header = json.loads(rest[: int(length)])
    edit(header["meta"])
    new = json.dumps(header, separators=(",", ":")).encode()
    head = MAGIC + version + b"\n" + str(len(new)).encode() + b"\n" + new
    while len(head) % ALIGN != (len(data) - len(rest) + int(length)) % ALIGN:
        new += b" "
        head = MAGIC + version + b"\n" + str(len(new)).encode() + b"\n" + new
    path.write_bytes(head + rest[int(length):])


def _term_index_of_another_version(meta: dict[str, Any]) -> None:
    assert meta["term_index"]["version"] == 3
    meta["term_index"]["version"] = 99


def _codec_schema_of_another_version(meta: dict[str, Any]) -> None:
    meta["schema"] = 99


def _infinite_count(meta: dict[str, Any]) -> None:
    """A damaged header whose value no int holds (JSON's `Infinity`): OverflowError deep in the codec."""
    meta["graph"]["dirs"][0][2] = float("inf")


def _nodes_past_the_tables(meta: dict[str, Any]) -> None:
    """More graph nodes than the node tables hold (they hold the nodes and room for more)."""
    meta["graph"]["nodes"] = 10**9


def _negative_nodes(meta: dict[str, Any]) -> None:
    meta["graph"]["nodes"] = -1


def _complete(home: Path, repo: Path):
    return repocomp(home, "complete", f"{repo / 'shapes.py'}:5", "--backend", "extractive")


def _assert_answered(done) -> None:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "completed by the extractive backend" in done.stderr, done.stderr


# ------------------------------------------------------------------------------------------------ the library


@pytest.mark.parametrize("edit", [_term_index_of_another_version, _codec_schema_of_another_version])
def test_a_part_of_another_version_is_stale_not_a_value_error(repo: Path, edit) -> None:
    path = _saved(repo)
    _edit_header(path, edit)
    with pytest.raises(IndexStaleError, match=str(path)) as caught:
        Index.load(repo)
    assert not isinstance(caught.value, (ValueError, IndexCorruptError))
    assert "\n" not in str(caught.value)
    with pytest.raises(IndexStaleError):
        Index.open(repo, build=False)
    assert "shapes.py" in Index.open(repo).files  # rebuilt and saved in the current version
    Index.load(repo)


def test_another_format_version_and_other_settings_are_stale(repo: Path) -> None:
    path = _saved(repo)
    data = path.read_bytes()
    path.write_bytes(MAGIC + b"7\n" + data[len(MAGIC) + 2:])
    with pytest.raises(IndexStaleError, match="format version 7"):
        Index.load(repo)
    _saved(repo)
    other = config_from_dict({"fragments": {"window": 10, "stride": 5}})
    with pytest.raises(IndexStaleError, match=r"other \[fragments\] settings"):
        Index.load(repo, other)


def test_no_index_yet_is_missing_not_corrupt(repo: Path) -> None:
    with pytest.raises(IndexMissingError, match="no index") as caught:
        Index.load(repo)
    assert not isinstance(caught.value, IndexCorruptError)
    with pytest.raises(IndexMissingError):
        Index.open(repo, build=False)


def _past_its_table(repo: Path, what: str) -> None:
    """Well-formed arrays, a wrong value: a call site or definition whose node is not one of its file's nodes, a
    node kind's or an import's code past its table, an import whose local name is None."""
    if what.startswith("import"):
        (repo / "use.py").write_text("import shapes\n")  # its name is None: JSON's null in the table
    meta, arrays = index_codec.encode(Index.build(repo))
    if what == "kind_code":
        name, at, value = "node_kind", 0, len(meta["kinds"])
    elif what.startswith("import"):  # past the table, or a local name that is the table's None
        table = meta["import_strings"]
        name, at, value = "import_codes", 0, len(table) if what == "import_code" else table.index(None)
    else:
        name, count = {"call_site": ("call_node", "call_count"), "definition": ("def_node", "def_count")}[what]
        first = int(np.flatnonzero(arrays[count])[0])  # the first file with one
        at, value = int(arrays[count][:first].sum()), arrays["node_count"][first]
    arrays[name] = whole(arrays[name]).copy()
    arrays[name][at] = value
    write_state(repo / ".repocomp", meta, arrays)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "bad_version_line", "infinite_count", "nodes_past",
                                    "negative_nodes", "call_site", "definition", "kind_code", "import_code",
                                    "import_without_name"])
def test_a_damaged_file_is_corrupt_and_named(repo: Path, damage: str) -> None:
    path = _saved(repo)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) * 2 // 3])
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage" * 10)
    elif damage == "bad_version_line":
        path.write_bytes(MAGIC + b"two\n" + data[len(MAGIC) + 2:])
    elif damage == "infinite_count":
        _edit_header(path, _infinite_count)
    elif damage in ("nodes_past", "negative_nodes"):
        _edit_header(path, _nodes_past_the_tables if damage == "nodes_past" else _negative_nodes)
    else:
        _past_its_table(repo, damage)
    with pytest.raises(IndexCorruptError, match=str(path)) as caught:
        Index.load(repo)
    assert isinstance(caught.value, IndexUnusableError) and "\n" not in str(caught.value)
    assert "shapes.py" in Index.open(repo).files
    Index.load(repo)


# ------------------------------------------------------------------------------------------------ the CLI


def test_cli_rebuilds_a_stale_term_index_quietly_and_answers(repo: Path, tmp_path: Path) -> None:
    path = _saved(repo)
    _edit_header(path, _term_index_of_another_version)
    done = _complete(tmp_path, repo)
    _assert_answered(done)
    assert "WARNING" not in done.stderr and "corrupt" not in done.stderr, done.stderr  # expected, not an error
    Index.load(repo)  # saved again in this version


@pytest.mark.parametrize("damage", ["truncate", "infinite_count"])
def test_cli_rebuilds_a_corrupt_index_with_one_warning_and_answers(repo: Path, tmp_path: Path, damage: str) -> None:
    path = _saved(repo)
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:200])
    else:
        _edit_header(path, _infinite_count)
    done = _complete(tmp_path, repo)
    _assert_answered(done)
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and str(path) in warnings[0] and "corrupt" in warnings[0], done.stderr
    Index.load(repo)


# ------------------------------------------------------------------------------------------------ the language server


@pytest.mark.parametrize("edit", [_term_index_of_another_version, _infinite_count])
def test_language_server_folder_with_an_unusable_index_becomes_ready(repo: Path, edit) -> None:
    _edit_header(_saved(repo), edit)
    states: list[str] = []
    settled = threading.Event()

    def on_state(folder) -> None:
        states.append(folder.state)
        settled.set()

    indexes = WorkspaceIndexes(on_state=on_state)
    try:
        folder = indexes.add_folder(repo, Config())
        indexes.start(folder).join(60)
        assert settled.wait(5)
        assert folder.state == "ready" and not folder.error, (folder.state, folder.error)
        assert states == ["ready"]
    finally:
        indexes.close()
