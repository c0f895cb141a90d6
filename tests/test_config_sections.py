"""Each backend's own settings section (`[backend.vllm]`, `[backend.transformers]`): read from files layered key by
key, set by editors over the folder's, distrusted in a repository's file, and named when written in the old place."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.engines import Engines
from lsp_server.options import apply_options, parse_options
from lsp_server.sessions import Sessions
from repocomp.backends import make_backend
from repocomp.config.loading import load_config
from repocomp.config.schema import Config
from repocomp.errors import ConfigError


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "config" / "repocomp").mkdir(parents=True)
    return tmp_path / "config" / "repocomp"


def test_a_backends_section_is_layered_key_by_key(user_dir: Path, tmp_path: Path) -> None:
    (user_dir / "config.toml").write_text('[backend]\nname = "vllm"\n[backend.vllm]\n'
                                          'endpoints = ["http://127.0.0.1:8011"]\nretries = 5\n')
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "repocomp.toml").write_text("[backend.vllm]\nretries = 1\n[backend.transformers]\ndtype = \"float32\"\n")
    config = load_config(repo)
    # the repository's retries over the user's, the user's endpoints kept
    assert config.backend.vllm.endpoints == ("http://127.0.0.1:8011",) and config.backend.vllm.retries == 1
    assert config.backend.name == "vllm" and config.backend.transformers.dtype == "float32"
    backend = make_backend(config.backend).primary  # behind the extractive fallback
    assert [e.url for e in backend.endpoints] == ["http://127.0.0.1:8011"] and backend.retries == 1


def test_a_repositorys_remote_endpoint_is_dropped_from_its_section(user_dir: Path, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "repocomp.toml").write_text('[backend.vllm]\nendpoints = ["http://192.0.2.7:8000"]\nretries = 3\n')
    config = load_config(repo)
    assert config.backend.vllm.endpoints == Config().backend.vllm.endpoints and config.backend.vllm.retries == 3
    assert any("[backend.vllm] endpoints ignored" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("key, value, section", [("endpoints", '["http://127.0.0.1:8000"]', "vllm"),
                                                 ("retries", "0", "vllm"), ("dtype", '"float32"', "transformers")])
def test_a_key_written_under_backend_itself_names_the_section_it_moved_to(
        tmp_path: Path, key: str, value: str, section: str) -> None:
    own = tmp_path / "mine.toml"
    own.write_text(f"[backend]\n{key} = {value}\n")
    with pytest.raises(ConfigError, match=rf"{key} is now in \[.*backend\.{section}\]"):
        load_config(config_file=own)


def test_editor_options_set_a_backends_keys_over_the_folders() -> None:
    folder = Config().replace("backend", name="vllm", vllm={"endpoints": ("http://127.0.0.1:8011",), "retries": 4})
    options, errors = parse_options({"backend": {"vllm": {"connectTimeoutS": 1.5, "retries": 0},
                                                 "transformers": {"fastOutputHead": False, "colour": 1}}})
    assert len(errors) == 1 and "backend.transformers.colour" in errors[0], errors
    config, errs = apply_options(folder, options)
    assert errs == []
    assert config.backend.vllm.endpoints == ("http://127.0.0.1:8011",)  # not given: the folder's
    assert (config.backend.vllm.connect_timeout_s, config.backend.vllm.retries) == (1.5, 0)
    assert config.backend.transformers.fast_output_head is False and config.backend.transformers.dtype == "auto"
    # a value the section's rules reject is named and the folder's kept
    bad, _ = parse_options({"backend": {"vllm": {"retries": 1000}}})
    config, errs = apply_options(folder, bad)
    assert config.backend.vllm.retries == 4 and len(errs) == 1 and "retries must be in 0..100" in errs[0], errs


def test_the_openvino_section_sets_the_precision_its_backend_loads_with(tmp_path: Path) -> None:
    own = tmp_path / "mine.toml"
    own.write_text('[backend]\nname = "openvino"\nfallback = ""\n[backend.openvino]\nprecision = "bf16"\n')
    backend = make_backend(load_config(config_file=own).backend)
    assert backend.name == "openvino" and backend.precision == "bf16"
    own.write_text('[backend.openvino]\nprecision = "f16"\n')
    with pytest.raises(ConfigError, match=r"backend\.openvino.*precision must be 'f32' or 'bf16'"):
        load_config(config_file=own)


def test_the_language_servers_files_outside_a_folder_follow_the_users_settings(user_dir: Path,
                                                                               tmp_path: Path) -> None:
    """Before a folder's settings are read, and for files outside any, the user's file holds: with the defaults
    there, a user's other backend settings loaded a second model (two pipelines: 2.9 GB in Neovim)."""
    (user_dir / "config.toml").write_text('[backend.openvino]\nprecision = "bf16"\n[retrieval]\ntop_k = 3\n')
    warned: list[str] = []
    engines = Engines(Sessions(), lambda key, message: warned.append(message))
    folder = tmp_path / "repo"
    folder.mkdir()
    for root in (None, folder):  # the folder's settings not read yet, then read (it has none of its own)
        assert engines.config_for(root).backend.openvino.precision == "bf16"
        assert engines.config_for(root).retrieval.top_k == 3
        engines.load_folder(folder)
    assert warned == []
