"""Issue 9, item 7's config numbers and the config cases of the one-line-error list: every bad config value is
rejected at load in one line naming the file and key, never a traceback, never an endless timeout; a malformed
endpoint is a one-line warning when the fallback can answer instead.

These run the CLI in process (`repocomp.cli.main`): nothing here can hang or run code, and it keeps them fast.
The fallback case runs the CLI as a subprocess, where its warning reaches stderr as a user sees it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import assert_one_line, cli, repocomp


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "shapes.py").write_text("def area(w, h):\n    return w * h\n")
    return root


@pytest.mark.parametrize("section, key, value", [
    ("backend", "timeout_s", "inf"),
    ("backend", "timeout_s", "nan"),
    ("backend.vllm", "connect_timeout_s", "-inf"),
    ("retrieval", "alpha", "inf"),
    ("graph", "call", "nan"),
    ("backend", "timeout_s", "1e12"),
    ("backend", "max_new_tokens", "1000000000"),
    ("index", "max_file_bytes", "1000000000000000"),
    ("retrieval", "iterations", "100000"),
])
def test_non_finite_or_absurd_numbers_in_config_are_rejected_naming_the_key(
        repo: Path, capsys, section: str, key: str, value: str) -> None:
    (repo / "repocomp.toml").write_text(f"[{section}]\n{key} = {value}\n")
    assert_one_line(*cli(capsys, "index", str(repo))[::2], "repocomp.toml", key)


@pytest.mark.parametrize("file, text, needle", [
    ("repocomp.toml", b"tool = 1\n", "`tool` must be a table"),
    ("pyproject.toml", b'tool = "x"\n', "`tool` must be a table"),
    ("pyproject.toml", b"[tool]\nrepocomp = 3\n", "must be a table"),
    ("repocomp.toml", "[index]\nexclude = ['caf\xe9']\n".encode("latin-1"), "not UTF-8"),
])
def test_malformed_config_files_give_one_line_errors(repo: Path, capsys, file: str, text: bytes, needle: str) -> None:
    (repo / file).write_bytes(text)
    assert_one_line(*cli(capsys, "index", str(repo))[::2], file, needle)


MALFORMED_ENDPOINTS = pytest.mark.parametrize("endpoint, needle", [("http://[::1", "not a valid URL"),
                                                                   ("http://127.0.0.1:99999", "not a valid URL"),
                                                                   ("ftp://127.0.0.1:8000", "http(s)")])


@MALFORMED_ENDPOINTS
def test_malformed_endpoint_is_a_one_line_warning_and_the_fallback_completes(
        repo: Path, tmp_path: Path, endpoint: str, needle: str) -> None:
    # a subprocess: the warning goes through the CLI's own logging setup to stderr (in process, pytest owns logging)
    (repo / "shapes.py").write_text("def area(w, h):\n    return w * h\n\n\ntotal = area(2, 3)\n")
    (repo / "main.py").write_text("from shapes import area\n\n\ntotal = ")
    args = ["complete", f"{repo / 'main.py'}:4", "--backend", "vllm"]
    mine = tmp_path / "mine.toml"
    for config, extra in ((repo / "repocomp.toml", []), (mine, ["--config", str(mine)])):  # the repo's, the user's
        config.write_text(f'[backend.vllm]\nendpoints = ["{endpoint}"]\n')  # fallback: the default, "extractive"
        done = repocomp(tmp_path, *args, *extra)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert done.stdout.strip() == "area(2, 3)", done.stdout
        (warning,) = [line for line in done.stderr.splitlines() if "not used" in line]
        assert repr(endpoint) in warning and needle in warning, warning
        assert "completed by the extractive backend" in done.stderr, done.stderr


@MALFORMED_ENDPOINTS
def test_malformed_endpoint_without_fallback_is_a_one_line_error_at_config_load(
        repo: Path, tmp_path: Path, capsys, endpoint: str, needle: str) -> None:
    args = ["complete", f"{repo / 'shapes.py'}:2", "--backend", "vllm"]
    mine = tmp_path / "mine.toml"
    for config, extra in ((repo / "repocomp.toml", []), (mine, ["--config", str(mine)])):  # the repo's, the user's
        config.write_text(f'[backend]\nfallback = ""\n[backend.vllm]\nendpoints = ["{endpoint}"]\n')
        last = assert_one_line(*cli(capsys, *args, *extra)[::2], "endpoint", needle)
        assert str(config) in last
