"""`repocomp bench typing` (lsp_bench/replay.py): the plan, the settings file for a replay with the local model, and
the prefix reuse read from the server's stats. The replay itself runs Neovim (tests/editor covers the driver)."""

from __future__ import annotations

import random
import tomllib
from pathlib import Path

import pytest

from lsp_bench import replay
from repocomp.config.schema import Config
from repocomp.errors import RepocompError

TEXT = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"


def test_the_local_replay_waits_for_any_ghost_text_and_keeps_what_was_right() -> None:
    _, slow = replay.typing_plan(TEXT, len(TEXT), 8.0, random.Random(0), pause_every=10)
    _, local = replay.typing_plan(TEXT, len(TEXT), 8.0, random.Random(0), pause_every=10,
                                  ghost_ms=replay.GHOST_WAIT_LOCAL_MS, expect=False)
    slow_ghosts = [s for s in slow if "ghost" in s]
    local_ghosts = [s for s in local if "ghost" in s]
    assert slow_ghosts and all(s["expect"] == s["want"] for s in slow_ghosts)
    assert [s["want"] for s in local_ghosts] == [s["want"] for s in slow_ghosts]
    assert all("expect" not in s and s["ghost"] == replay.GHOST_WAIT_LOCAL_MS for s in local_ghosts)
    assert replay._is_right("h)\n", "h)") and not replay._is_right("w)", "h)") and not replay._is_right("", "")


def test_prefix_reuse_is_summed_over_the_servers_models() -> None:
    stats = {"prefix_cache": [
        {"backend": "transformers", "model": "/m", "dtype": "float32", "requests": 10, "hits": 6,
         "reused_tokens": 5000, "prefilled_tokens": 900, "hit_rate": 0.6, "entries": 2, "tokens": 3000},
        {"backend": "transformers", "model": "/m", "dtype": "bfloat16", "requests": 2, "hits": 0,
         "reused_tokens": 0, "prefilled_tokens": 800, "hit_rate": 0.0, "entries": 1, "tokens": 900}]}
    assert replay._prefix_cache(stats) == {"requests": 12, "hits": 6, "reused_tokens": 5000,
                                           "prefilled_tokens": 1700, "hit_rate": 0.5}
    assert replay._prefix_cache({"prefix_cache": []}) == {} == replay._prefix_cache({})


def test_the_local_replays_settings_keep_the_users_and_name_the_prepared_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from repocomp.backends import model_defaults
    user = tmp_path / "f32.toml"
    user.write_text('[backend]\nmax_new_tokens = 32\n[backend.transformers]\ndtype = "float32"\n'
                    '[prompt]\nmax_tokens = 768\n[index]\nexclude = ["a b", "c\\"d"]\n')

    def resolve(config: Config) -> Config:
        return config.replace("backend", model=str(tmp_path / "model"))

    monkeypatch.setattr(model_defaults, "resolve_backend", resolve)
    written = tomllib.loads(replay._local_user_config(user))
    assert written == {"backend": {"max_new_tokens": 32, "transformers": {"dtype": "float32"}, "name": "transformers",
                                   "model": str(tmp_path / "model")},
                       "prompt": {"max_tokens": 768}, "index": {"exclude": ["a b", 'c"d']}}
    monkeypatch.setattr(model_defaults, "resolve_backend", lambda config: config.replace("backend", name="extractive"))
    with pytest.raises(RepocompError, match="no local model"):
        replay._local_user_config(None)
