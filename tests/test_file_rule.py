"""One rule for which files are indexed: the build, incremental updates, the language server's watcher and the
task maker agree (issue 10, item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.workspace_index import WorkspaceIndexes
from repocomp.config.schema import Config
from repocomp.errors import RepocompError
from repocomp.eval.tasks import iter_python_files
from repocomp.index import Index

IGNORED = ("gen/x.py", "skip_me.py", "pkg/local.py", "pkg/deep/build_cache.py")


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg" / "deep").mkdir(parents=True)
    (root / "gen").mkdir()
    (root / ".gitignore").write_text("gen/\n")
    (root / "pkg" / ".gitignore").write_text("local.py\ndeep/build_*.py\n")  # nested, relative to pkg/
    (root / "main.py").write_text("from pkg.core import f\n\n\ndef main():\n    return f()\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "core.py").write_text("def f():\n    return 1\n")
    for rel in IGNORED:
        (root / rel).write_text("def hidden():\n    return 2\n")
    return root


def _config() -> Config:
    return Config().replace("index", exclude=("skip_*.py",))


def test_updates_leave_out_what_the_build_leaves_out(repo: Path) -> None:
    index = Index.build(repo, _config())
    assert set(index.files) == {"main.py", "pkg/__init__.py", "pkg/core.py"}
    index.update_files({rel: None for rel in IGNORED})  # as a watcher reports them (read from disk)
    index.update_file("gen/x.py", text="def edited():\n    return 3\n")  # as an editor's save sends it
    index.update_file("pkg/new.py", text="X = 1\n")  # not ignored: indexed
    assert set(index.files) == {"main.py", "pkg/__init__.py", "pkg/core.py", "pkg/new.py"}
    (repo / "pkg" / "new.py").write_text("X = 1\n")
    assert set(index.files) == set(Index.build(repo, _config()).files)


def test_a_file_that_becomes_ignored_leaves_the_index_on_its_next_update(repo: Path) -> None:
    index = Index.build(repo, _config())
    (repo / ".gitignore").write_text("gen/\npkg/core.py\n")
    index.update_file("pkg/core.py")
    assert "pkg/core.py" not in index.files


def test_the_watcher_drops_ignored_paths(repo: Path) -> None:
    indexes = WorkspaceIndexes(debounce_s=0.01)
    try:
        folder = indexes.add_folder(repo, _config())
        folder.index, folder.state = Index.build(repo, _config()), "ready"
        for rel in IGNORED:
            indexes.file_changed(repo / rel)
        indexes.file_changed(repo / "pkg" / "core.py", "def f():\n    return 5\n")
        assert indexes.wait_idle(10)
        assert set(folder.index.files) == {"main.py", "pkg/__init__.py", "pkg/core.py"}
        assert "return 5" in folder.index.files["pkg/core.py"].text
    finally:
        indexes.close()


def test_tasks_are_made_only_from_indexed_files(repo: Path) -> None:
    (repo / ".gitignore").write_text("gen/\nskip_me.py\n")  # the task maker reads the repository's own rules
    assert list(iter_python_files(repo)) == ["main.py", "pkg/__init__.py", "pkg/core.py"]


def test_an_update_of_a_symlink_out_of_the_repository_leaves_it_out_like_a_build(repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'tok_31337'\n")
    (repo / "pkg" / "link.py").symlink_to(secret)  # named inside the repository, real path outside
    index = Index.build(repo, _config())
    index.update_file(repo / "pkg" / "link.py")  # a watcher's event: not an error, not indexed
    index.update_file("pkg/link.py", text="TOKEN = 'tok_31337'\n")  # an editor's save through the link
    assert "pkg/link.py" not in index.files
    assert set(index.files) == set(Index.build(repo, _config()).files)
    with pytest.raises(RepocompError, match="outside the indexed repository"):
        index.update_file(secret)


def test_a_buffer_holds_to_the_file_rules_of_its_file(repo: Path) -> None:
    index = Index.build(repo, _config().replace("index", max_file_bytes=64))
    index.update_file("pkg/big.py", text="x = 1\n" * 20)  # 120 bytes: over the limit, as on disk
    index.update_file("pkg/nul.py", text="x = '\x00'\n")
    index.update_file("pkg/ok.py", text="x = 1\n")
    assert {"pkg/big.py", "pkg/nul.py"}.isdisjoint(index.files) and "pkg/ok.py" in index.files
