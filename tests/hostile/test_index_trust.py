"""Round two, item 3: a stored index is used only when it is the repository's own.

`.repocomp/index.bin` must be a regular file (not a symbolic link) in the repository's own index folder (not a
`.repocomp` link leading out), written for this root, every stored path plain, relative and inside the root.
Anything else is set aside (`index.bin.rejected`; a link is renamed, what it points to is never opened nor
touched) and rebuilt, with one warning line in the CLI and one window/showMessage in the server, whose folder
becomes ready. The CLI runs as a real subprocess under an audit hook (`sys.addaudithook`) that records every file
it opens and its peak RSS: no file of the other project is opened, memory stays bounded. Planted indexes are real
ones built for the repository, their paths edited through the codec (`index_codec.encode`, `store.write_state`).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_run import TIMEOUT_S, repocomp, user_env
from lsp_helpers import end_of, initialize, inline, open_doc, wait_ready
from pytest_lsp import LanguageClient

from repocomp.errors import IndexUntrustedError
from repocomp.index import Index
from repocomp.index import codec as index_codec
from repocomp.index.store import INDEX_FILE, REJECTED_SUFFIX, write_state

MAIN = "from shapes import area\n\n\ntotal = "
# The other project's code: what a completion must never hold once its index is planted here.
OTHER = "def leak_from_other_project(n):\n    return n\n\n\ntotal = leak_from_other_project(7)\n"
MAX_RSS_BYTES = 3 * 250 << 20  # three times docs/security.md's 250 MB peak RSS for `complete` with a planted index
READY_BOUND_S = 30.0  # a small folder until ready: a hang fails, no figure is claimed

# Runs `repocomp.cli.main(ARGS)` as `python -m repocomp` would, recording every path opened (the audit hook sees
# open() and os.open()) and the peak RSS, written as JSON to REPORT when the CLI returns. The peak is VmHWM, this
# process's own: getrusage's ru_maxrss keeps the parent's peak across fork and exec (a test process that had loaded
# the local model made every child report 1.4 GB).
_AUDITED = """
import json, os, resource, sys
def peak_rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
opened = []
def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes)):
        opened.append(os.fsdecode(args[0]))
sys.addaudithook(hook)
from repocomp.cli import main
status = main(sys.argv[2:])
report = {"opened": opened, "max_rss_bytes": peak_rss()}
with open(sys.argv[1], "w") as fh:
    json.dump(report, fh)
sys.exit(status)
"""


def audited(home: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The real CLI in a subprocess: (its result, {"opened": paths, "max_rss_bytes": peak RSS})."""
    report = home / "audit.json"
    done = subprocess.run([sys.executable, "-c", _AUDITED, str(report), *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=user_env(home))
    assert "Traceback" not in done.stderr, done.stderr
    return done, json.loads(report.read_text())


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """The user folders of this test, shared by the subprocesses (`user_env`) and the library in process."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


@pytest.fixture
def repo(repo: Path) -> Path:
    (repo / "main.py").write_text(MAIN)
    return repo


@pytest.fixture
def other(tmp_path: Path, home: Path) -> Path:
    """Another project, indexed by the real CLI: its `.repocomp/index.bin` is a genuine, valid index."""
    root = tmp_path / "other"
    (root / ".git").mkdir(parents=True)
    (root / "shapes.py").write_text(OTHER)
    (root / "main.py").write_text(MAIN)
    done = repocomp(home, "index", str(root))
    assert done.returncode == 0, done.stderr
    assert (root / ".repocomp" / INDEX_FILE).is_file()
    return root


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def _complete(home: Path, repo: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    return audited(home, "complete", f"{repo / 'main.py'}:4", "--backend", "extractive")


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("WARNING")]


def _assert_nothing_opened_in(opened: list[str], folder: Path) -> None:
    inside = [p for p in opened if Path(p).resolve().is_relative_to(folder.resolve()) or str(folder) in p]
    assert not inside, inside


# ------------------------------------------------------------------------------------------------ symbolic links


def test_index_file_linked_to_another_projects_index_is_set_aside_never_followed(
        repo: Path, other: Path, home: Path, record_property) -> None:
    other_index = other / ".repocomp"
    before = _snapshot(other_index)
    (repo / ".repocomp").mkdir()
    link = repo / ".repocomp" / INDEX_FILE
    link.symlink_to(other_index / INDEX_FILE)

    done, audit = _complete(home, repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "area(2, 3)", done.stdout
    assert "leak_from_other_project" not in done.stdout
    (warning,) = _warnings(done.stderr)
    assert "symbolic link" in warning and "set aside" in warning and str(link) in warning, warning
    _assert_nothing_opened_in(audit["opened"], other)
    assert audit["max_rss_bytes"] < MAX_RSS_BYTES
    record_property("symlinked_index_complete_max_rss_mb", round(audit["max_rss_bytes"] / 2**20))

    assert _snapshot(other_index) == before  # the other project's index: not written, not moved
    aside = link.with_name(INDEX_FILE + REJECTED_SUFFIX)
    assert aside.is_symlink() and aside.readlink() == other_index / INDEX_FILE  # the link itself, kept
    assert link.is_file() and not link.is_symlink()
    rebuilt = Index.load(repo)
    assert set(rebuilt.files) == {"main.py", "shapes.py"}
    assert all("leak_from_other_project" not in e.text for e in rebuilt.files.values())

    again, _ = _complete(home, repo)  # the repository's own index now: quiet
    assert again.stdout.strip() == "area(2, 3)" and not _warnings(again.stderr), again.stderr


def test_index_folder_linked_to_another_projects_folder_is_never_read(
        repo: Path, other: Path, home: Path) -> None:
    before = _snapshot(other / ".repocomp")
    (repo / ".repocomp").symlink_to(other / ".repocomp")

    done, audit = _complete(home, repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "area(2, 3)", done.stdout
    (warning,) = _warnings(done.stderr)  # where the index went instead
    assert "leads outside the repository" in warning and str(home / "cache") in warning, warning
    _assert_nothing_opened_in(audit["opened"], other)
    assert audit["max_rss_bytes"] < MAX_RSS_BYTES
    assert _snapshot(other / ".repocomp") == before
    assert set(Index.load(repo).files) == {"main.py", "shapes.py"}  # from the user's cache


def test_library_names_a_linked_index_untrusted_and_opens_nothing_through_it(repo: Path, other: Path) -> None:
    (repo / ".repocomp").mkdir()
    (repo / ".repocomp" / INDEX_FILE).symlink_to(other / ".repocomp" / INDEX_FILE)
    with pytest.raises(IndexUntrustedError, match="symbolic link"):
        Index.load(repo)
    with pytest.raises(IndexUntrustedError):
        Index.open(repo, build=False)
    assert (repo / ".repocomp" / INDEX_FILE).is_symlink()  # build=False sets nothing aside
    index = Index.open(repo)
    assert "leak_from_other_project" not in "".join(e.text for e in index.files.values())
    assert len(index.notices) == 1 and "set aside" in index.notices[0]


# ------------------------------------------------------------------------------------------------ planted paths


def _plant(repo: Path, edit) -> Path:
    """Build the repository's real index, edit its stored header through the codec, write it where it belongs."""
    index = Index.build(repo)
    meta, arrays = index_codec.encode(index)
    edit(meta)
    return write_state(repo / ".repocomp", meta, arrays)


def _path_of(target: str):
    def edit(meta: dict[str, Any]) -> None:
        (rec,) = [r for r in meta["files"] if r["path"] == "shapes.py"]
        rec["path"] = target
        meta["consulted"][target] = meta["consulted"].pop("shapes.py")
    return edit


def _root_of(meta: dict[str, Any]) -> None:
    meta["root"] = "/somewhere/else"


def _dir_of(meta: dict[str, Any]) -> None:
    meta["graph"]["dirs"].append(["../up", 0, 1])


PLANTED = pytest.mark.parametrize("edit, needle", [
    (_path_of("../outside.py"), "'../outside.py'"),
    (_path_of("/etc/x"), "'/etc/x'"),
    (_path_of("pkg/../../x.py"), "'pkg/../../x.py'"),
    (_path_of("./shapes.py"), "'./shapes.py'"),
    (_path_of("a//shapes.py"), "'a//shapes.py'"),
    (_path_of("bad\nname.py"), "'bad\\nname.py'"),
    (_path_of("escape/shapes.py"), "symbolic link"),  # `escape` is a link to a folder outside (below)
    (_root_of, "another folder"),
    (_dir_of, "'../up'"),
], ids=["dotdot", "absolute", "inner-dotdot", "dot", "empty-part", "newline", "through-link", "root", "graph-dir"])


@pytest.fixture
def escape(repo: Path, tmp_path: Path) -> Path:
    """`repo/escape` -> a folder outside holding a `shapes.py`: a stored path through it leaves the root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shapes.py").write_text("SECRET = 'outside the repository'\n")
    (repo / "escape").symlink_to(outside)
    return outside


@PLANTED
def test_planted_paths_are_untrusted_not_a_key_error(repo: Path, home: Path, escape: Path, edit, needle) -> None:
    target = _plant(repo, edit)
    with pytest.raises(IndexUntrustedError) as caught:
        Index.load(repo)
    message = str(caught.value)
    assert needle in message and str(target) in message and "\n" not in message, message
    index = Index.open(repo)
    assert set(index.files) == {"main.py", "shapes.py"}
    index.update_file("main.py", MAIN + "area(1, 1)\n")  # what crashed with KeyError: '..'
    assert target.with_name(INDEX_FILE + REJECTED_SUFFIX).is_file()
    assert set(Index.load(repo).files) == {"main.py", "shapes.py"}


@PLANTED
def test_cli_completes_from_a_rebuilt_index_when_the_planted_one_points_outside(
        repo: Path, home: Path, escape: Path, edit, needle, record_property) -> None:
    target = _plant(repo, edit)
    done, audit = _complete(home, repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "area(2, 3)", done.stdout
    (warning,) = _warnings(done.stderr)
    assert str(target) in warning and "set aside as index.bin.rejected and rebuilt" in warning, warning
    _assert_nothing_opened_in(audit["opened"], escape)
    assert not [p for p in audit["opened"] if p.startswith("/etc/x") or p.endswith("outside.py")]
    assert audit["max_rss_bytes"] < MAX_RSS_BYTES
    record_property("planted_index_complete_max_rss_mb", round(audit["max_rss_bytes"] / 2**20))


# ------------------------------------------------------------------------------------------------ the real server


async def _shown(client: LanguageClient, needle: str, timeout: float = 5.0) -> list[str]:
    """The window/showMessage texts once one holds `needle` (bounded wait: it follows the ready state)."""
    deadline = time.monotonic() + timeout
    while not any(needle in m.message for m in client.messages) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return [m.message for m in client.messages]


@pytest.mark.parametrize("plant", ["symlink", "dotdot", "absolute"])
async def test_server_folder_with_an_untrusted_index_becomes_ready_and_says_so_once(
        client: LanguageClient, repo: Path, tmp_path: Path, plant: str) -> None:
    if plant == "symlink":
        other = tmp_path / "other"
        (other / ".git").mkdir(parents=True)
        (other / "shapes.py").write_text(OTHER)
        Index.build(other).save()
        (repo / ".repocomp").mkdir()
        (repo / ".repocomp" / INDEX_FILE).symlink_to(other / ".repocomp" / INDEX_FILE)
    else:
        _plant(repo, _path_of("../outside.py" if plant == "dotdot" else "/etc/x"))
    await initialize(client, repo, {"backend": {"name": "extractive"}})
    payload = await wait_ready(client, timeout=READY_BOUND_S)
    assert [f["state"] for f in payload["folders"]] == ["ready"], payload
    shown = await _shown(client, "set aside")
    assert len([m for m in shown if "set aside" in m]) == 1, shown
    uri = open_doc(client, repo / "main.py", MAIN)
    answer = await asyncio.wait_for(inline(client, uri, end_of(MAIN)), 10.0)
    assert "area(2, 3)" in answer and "leak_from_other_project" not in answer, answer
    assert (repo / ".repocomp" / (INDEX_FILE + REJECTED_SUFFIX)).exists() or \
        (repo / ".repocomp" / (INDEX_FILE + REJECTED_SUFFIX)).is_symlink()
