"""Issue 9, items 2 and 4 and the file cases of the one-line-error list: nothing outside the repository is read,
a repository's config cannot send code elsewhere or write outside it, FIFOs never hang, odd files are handled.

The real CLI runs as a subprocess on small repositories in tmp_path, each wait bounded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cli_run import TcpSink, assert_one_line_error, python, repocomp

from repocomp.index.store import INDEX_FILE


def test_symlink_to_a_file_outside_the_repository_is_never_indexed(repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere" / "credentials.py"
    secret.parent.mkdir()
    secret.write_text("API_TOKEN = 'tok_9f8e7d6c5b4a'\n")
    (repo / "settings.py").symlink_to(secret)

    indexed = repocomp(tmp_path, "index", str(repo), "--json")
    assert indexed.returncode == 0, indexed.stderr
    summary = json.loads(indexed.stdout)
    assert summary["files"] == 1 and summary["skipped"] == {"symlink_outside": 1}
    assert b"tok_9f8e7d6c5b4a" not in (repo / ".repocomp" / INDEX_FILE).read_bytes()
    done = repocomp(tmp_path, "complete", f"{repo / 'shapes.py'}:5", "--backend", "extractive", "--json")
    assert done.returncode == 0 and "tok_9f8e7d6c5b4a" not in done.stdout, done.stderr


def test_repository_config_cannot_send_code_off_the_machine_or_write_outside(repo: Path, tmp_path: Path) -> None:
    user_sink, repo_sink = TcpSink(), TcpSink()
    try:
        # the user's own config picks the endpoint; the repository tries another one and an index dir outside
        (tmp_path / "config" / "repocomp").mkdir(parents=True)
        (tmp_path / "config" / "repocomp" / "config.toml").write_text(
            f'[backend]\nmodel = "m"\ntimeout_s = 5\n[backend.vllm]\nendpoints = ["{user_sink.url}"]\nretries = 0\n')
        (repo / "repocomp.toml").write_text(
            '[backend.vllm]\nendpoints = ["http://192.0.2.7:8000"]\nconnect_timeout_s = 1\n[index]\ndir = "../outside"\n')
        done = repocomp(tmp_path, "complete", f"{repo / 'shapes.py'}:5", "--backend", "vllm")
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr  # answered by the fallback
        assert user_sink.connections >= 1  # the user's endpoint was asked, not the repository's
        assert not (tmp_path / "outside").exists() and (repo / ".repocomp" / INDEX_FILE).is_file()
        warnings = [ln for ln in done.stderr.splitlines() if "repocomp.toml" in ln and "ignored" in ln]
        assert len(warnings) == 2 and any("endpoints" in w for w in warnings) and any("dir" in w for w in warnings)

        # a loopback endpoint is the repository's to choose (a model served on this machine)
        (repo / "repocomp.toml").write_text(f'[backend.vllm]\nendpoints = ["{repo_sink.url}"]\n')
        done = repocomp(tmp_path, "complete", f"{repo / 'shapes.py'}:5", "--backend", "vllm")
        assert done.returncode == 0 and repo_sink.connections >= 1 and "ignored" not in done.stderr, done.stderr
    finally:
        user_sink.close()
        repo_sink.close()


def test_fifo_in_repository_never_hangs_index_or_complete(repo: Path, tmp_path: Path) -> None:
    os.mkfifo(repo / "pipe.py")  # opening it for reading would block until a writer came: forever
    indexed = repocomp(tmp_path, "index", str(repo), "--json")
    assert indexed.returncode == 0, indexed.stderr
    assert json.loads(indexed.stdout)["skipped"] == {"not_regular": 1}
    assert_one_line_error(repocomp(tmp_path, "complete", f"{repo / 'pipe.py'}:1", "--backend", "extractive"),
                          "pipe.py")
    updated = python(tmp_path, "from repocomp.index import Index\n"
                               f"index = Index.open({str(repo)!r})\nindex.update_file('pipe.py')\n"
                               "print(sorted(index.files))")
    assert updated.returncode == 0 and updated.stdout.strip() == "['shapes.py']", updated.stderr


def test_file_name_with_a_newline_is_skipped_and_counted(repo: Path, tmp_path: Path) -> None:
    (repo / "two\nlines.py").write_text("x = 1\n")
    indexed = repocomp(tmp_path, "index", str(repo), "--json")
    assert indexed.returncode == 0, indexed.stderr
    summary = json.loads(indexed.stdout)
    assert summary["files"] == 1 and summary["skipped"] == {"bad_name": 1}
    assert summary["notes"] == ["'two\\nlines.py': bad name"]  # shown escaped, on one line


def test_complete_accepts_a_non_utf8_file_the_indexer_accepts(repo: Path, tmp_path: Path) -> None:
    (repo / "menu.py").write_bytes("dish = 'caf\xe9'\nprice = 3\nlabel = dish\n".encode("latin-1"))
    done = repocomp(tmp_path, "complete", f"{repo / 'menu.py'}:3", "--backend", "extractive", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["backend"] == "extractive"
