"""Round two, item 4: a repository's configuration is read only as a regular file inside its root, bounded in size
and nesting; no setting it may set points outside it; settings whose product is the cost are bounded together.

One-line cases call the CLI's entry point in process (`cli_run.cli`: an uncaught exception fails the test); where
memory or outside reads are at stake the real CLI runs as a subprocess under an audit hook (`test_index_trust.
audited`: every opened path and the peak RSS); the server case runs the real server over stdio (pytest-lsp).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import pytest
from cli_run import assert_one_line, cli
from lsp_helpers import end_of, initialize, inline, open_doc, wait_ready
from pytest_lsp import LanguageClient
from test_index_trust import audited

from repocomp.config.loading import load_config
from repocomp.config.schema import MAX_CONFIG_BYTES, MAX_FRAGMENTS_PER_LINE, MAX_REACH_X_TOP_K, MAX_REPOSITORY_EXCLUDES

# docs/security.md's figures ("Bounds on hostile input") and the bounds here, about three and five times them
MAX_RSS_BYTES = 3 * 271 << 20  # a sparse 1.5 GiB repocomp.toml: 271 MB peak RSS for `index` (the excludes' too)
EXCLUDES_BOUND_S = 5 * 2.3  # 350,000 exclude patterns in a repository's settings: `index` in 2.3 s (wall time)

NESTED = {  # each is a one-line error naming the file, never a RecursionError or a parse of minutes
    "array": "a = " + "[" * 100_000 + "\n",
    "inline-table": "a = " + "{b = " * 100_000 + "\n",
    "dotted-key": "index.dir." + ".".join(["a"] * 100_000) + " = 1\n",  # quadratic in tomllib: minutes
}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "shapes.py").write_text("def area(w, h):\n    return w * h\n\n\ntotal = area(2, 3)\n")
    return root


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("repocomp.config")]


# ------------------------------------------------------------------------------------------------ the file


@pytest.mark.parametrize("kind", list(NESTED))
@pytest.mark.parametrize("file", ["repocomp.toml", "pyproject.toml"])
def test_deeply_nested_config_is_one_line_error_quickly(repo: Path, capsys, kind: str, file: str) -> None:
    text = NESTED[kind]
    (repo / file).write_text(text if file == "repocomp.toml" else "[tool.repocomp]\n" + text)
    started = time.monotonic()
    last = assert_one_line(*cli(capsys, "index", str(repo))[::2], file, "nested too deeply")
    assert time.monotonic() - started < 10.0
    assert len(last) < 400, last


def test_config_over_the_size_cap_is_ignored_with_one_warning_and_never_read_whole(
        repo: Path, tmp_path: Path, record_property) -> None:
    config = repo / "repocomp.toml"
    with config.open("wb") as fh:  # sparse: 1.5 GiB that a whole read would hold in memory
        fh.write(b"[fragments]\nwindow = 4\nstride = 2\n")
        fh.truncate(3 << 29)
    done, audit = audited(tmp_path, "index", str(repo))
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "larger than 1,048,576 bytes" in warnings[0] and str(config) in warnings[0]
    assert audit["max_rss_bytes"] < MAX_RSS_BYTES
    record_property("oversized_config_index_max_rss_mb", round(audit["max_rss_bytes"] / 2**20))
    assert load_config(repo).fragments.window == 20  # ignored: the defaults
    config.write_bytes(b"[fragments]\nwindow = 4\nstride = 2\n" + b"#" * (MAX_CONFIG_BYTES - 40) + b"\n")
    assert load_config(repo).fragments.window == 4  # just under the cap: read


def test_config_linked_outside_is_not_read_and_one_linked_inside_is(repo: Path, tmp_path: Path, caplog) -> None:
    outside = tmp_path / "outside.toml"
    outside.write_text("[fragments]\nwindow = 4\nstride = 2\n")
    (repo / "repocomp.toml").symlink_to(outside)
    done, audit = audited(tmp_path, "index", str(repo))
    assert done.returncode == 0, done.stderr
    assert str(outside) not in audit["opened"], [p for p in audit["opened"] if "outside" in p]
    (warning,) = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert "symbolic link leading outside the repository" in warning, warning
    with caplog.at_level(logging.WARNING):
        assert load_config(repo).fragments.window == 20

    (repo / "repocomp.toml").unlink()
    (repo / "config").mkdir()
    (repo / "config" / "repocomp.toml").write_text("[fragments]\nwindow = 4\nstride = 2\n")
    (repo / "repocomp.toml").symlink_to(Path("config") / "repocomp.toml")
    assert load_config(repo).fragments.window == 4


def test_a_fifo_named_like_the_config_is_never_opened(repo: Path) -> None:
    os.mkfifo(repo / "repocomp.toml")  # opening it for reading would block until a writer comes
    (repo / "pyproject.toml").write_text("[tool.repocomp.fragments]\nwindow = 4\nstride = 2\n")
    assert load_config(repo).fragments.window == 4


# ------------------------------------------------------------------------------------------------ paths


@pytest.fixture
def tokenizer_outside(tmp_path: Path) -> Path:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    return folder


@pytest.mark.parametrize("key, value", [
    ("prompt.tokenizer", "{outside}"),
    ("prompt.tokenizer", "../tok"),
    ("prompt.tokenizer", "~/tok"),
    ("prompt.tokenizer", "link"),  # a link in the repository to the folder outside
    ("backend.model", "{outside}"),
    ("backend.model", "../tok"),
    ("backend.model", "~/models/x"),
    ("backend.model", "link"),
])
def test_a_repositorys_path_setting_leading_out_is_ignored_with_one_warning(
        repo: Path, tokenizer_outside: Path, caplog, key: str, value: str) -> None:
    (repo / "link").symlink_to(tokenizer_outside)
    section, name = key.split(".")
    value = value.format(outside=tokenizer_outside)
    (repo / "repocomp.toml").write_text(f'[{section}]\n{name} = "{value}"\n')
    with caplog.at_level(logging.WARNING):
        config = load_config(repo)
        load_config(repo)  # once per file and key
    assert getattr(getattr(config, section), name) == ""  # the default, not the repository's
    (warning,) = [w for w in _warnings(caplog) if name in w]
    assert "outside the repository" in warning and "ignored" in warning, warning
    # the user's own value is honoured (trusted), whatever the repository says
    user = Path(os.environ["XDG_CONFIG_HOME"]) / "repocomp" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(f'[{section}]\n{name} = "{tokenizer_outside}"\n')
    assert getattr(getattr(load_config(repo), section), name) == str(tokenizer_outside)


def test_a_repositorys_path_settings_inside_are_taken_from_its_root(repo: Path, caplog) -> None:
    (repo / "tok").mkdir()
    (repo / "models" / "small").mkdir(parents=True)
    (repo / "repocomp.toml").write_text('[prompt]\ntokenizer = "tok"\n[backend]\nmodel = "models/small"\n')
    with caplog.at_level(logging.WARNING):
        config = load_config(repo)
    assert config.prompt.tokenizer == str(repo.resolve() / "tok")  # not the process's folder's `tok`
    assert config.backend.model == str(repo.resolve() / "models" / "small")
    (repo / "repocomp.toml").write_text('[backend]\nmodel = "codellama/CodeLlama-7b-hf"\n')  # a served name
    assert load_config(repo).backend.model == "codellama/CodeLlama-7b-hf"
    assert not _warnings(caplog)


# ------------------------------------------------------------------------------------------------ joint bounds


@pytest.mark.parametrize("section, values, needles", [
    ("fragments", "window = 10000\nstride = 1", ("window / stride", str(MAX_FRAGMENTS_PER_LINE), "10000")),
    ("fragments", "window = 40\nstride = 2", ("window / stride", "got 20")),
    ("relations", "cutoff = 1e-9\nmax_reach = 10000000\ntop_k = 100000", ("max_reach x top_k", f"{MAX_REACH_X_TOP_K:,}")),
    ("relations", "cutoff = 1e-9\nmax_reach = 0\ntop_k = 100000", ("max_reach = 0", "cutoff >= 0.1")),
    ("relations", "cutoff = 1e-300\ncontext_weight = 0.9999", ("context_weight", "1024")),
])
def test_settings_whose_product_is_the_cost_are_rejected_together_in_one_line(
        repo: Path, capsys, section: str, values: str, needles: tuple[str, ...]) -> None:
    (repo / "repocomp.toml").write_text(f"[{section}]\n{values}\n")
    assert_one_line(*cli(capsys, "index", str(repo))[::2], "repocomp.toml", *needles)


@pytest.mark.parametrize("section, values", [
    ("fragments", "window = 32\nstride = 2"),  # 16 fragments a line: the bound itself
    ("relations", "top_k = 10000\ncontext_weight = 0.5"),  # max_reach 256 x 10,000
    ("relations", "max_reach = 0"),  # no bound at the default cutoff 0.1
])
def test_settings_within_the_joint_bounds_index(repo: Path, capsys, section: str, values: str) -> None:
    (repo / "repocomp.toml").write_text(f"[{section}]\n{values}\n")
    status, _, err = cli(capsys, "index", str(repo))
    assert status == 0, err


@pytest.mark.parametrize("count, needle", [
    (350_000, "larger than 1,048,576 bytes"),  # the list: over the size cap, never parsed
    (MAX_REPOSITORY_EXCLUDES * 20, f"exclude ignored: 20,000 patterns, at most {MAX_REPOSITORY_EXCLUDES:,}"),
])
def test_a_repositorys_huge_exclude_list_is_ignored_with_one_warning_and_indexing_stays_fast(
        repo: Path, tmp_path: Path, record_property, count: int, needle: str) -> None:
    patterns = ", ".join(f'"g{i}/*"' for i in range(count))
    (repo / "pyproject.toml").write_text(f"[tool.repocomp.index]\nexclude = [{patterns}]\n")
    started = time.monotonic()
    done, audit = audited(tmp_path, "index", str(repo))
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert needle in warning, warning
    assert elapsed < EXCLUDES_BOUND_S and audit["max_rss_bytes"] < MAX_RSS_BYTES, (elapsed, audit["max_rss_bytes"])
    record_property(f"exclude_{count}_index_s", round(elapsed, 2))
    (repo / "pyproject.toml").write_text('[tool.repocomp.index]\nexclude = ["shapes.py"]\n')
    assert load_config(repo).index.exclude == ("shapes.py",)


def test_a_repository_may_lower_its_memory_budget_but_not_raise_it(repo: Path, caplog) -> None:
    (repo / "repocomp.toml").write_text("[index]\nmax_memory_mb = 100000\n")
    with caplog.at_level("WARNING"):
        assert load_config(repo).index.max_memory_mb == 4096
    assert any("max_memory_mb ignored: 100,000 is above the default 4,096" in r.message for r in caplog.records)
    (repo / "repocomp.toml").write_text("[index]\nmax_memory_mb = 512\n")
    assert load_config(repo).index.max_memory_mb == 512


# ------------------------------------------------------------------------------------------------ the real server


@pytest.mark.parametrize("text", [NESTED["array"], "[fragments]\nwindow = 10000\nstride = 1\n"],
                         ids=["nested", "window-stride"])
async def test_server_folder_with_a_bad_config_registers_and_indexes_with_defaults(
        client: LanguageClient, repo: Path, text: str) -> None:
    (repo / "repocomp.toml").write_text(text)
    (repo / "main.py").write_text("from shapes import area\n\n\ntotal = ")
    await initialize(client, repo, {"backend": {"name": "extractive"}})
    payload = await wait_ready(client, timeout=30.0)
    assert [f["state"] for f in payload["folders"]] == ["ready"], payload
    deadline = time.monotonic() + 5.0
    while not client.messages and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    shown = [m.message for m in client.messages if "repocomp.toml" in m.message]
    assert len(shown) == 1 and "using defaults" in shown[0], [m.message for m in client.messages]
    main = "from shapes import area\n\n\ntotal = "
    uri = open_doc(client, repo / "main.py", main)
    assert "area(2, 3)" in await asyncio.wait_for(inline(client, uri, end_of(main)), 10.0)
