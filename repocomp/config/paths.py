"""Where the user's own files are: the cache (the local model, session memories, indexes kept aside) and the
trusted settings file."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """repocomp's folder in the user's cache (`$XDG_CACHE_HOME/repocomp`, by default ~/.cache/repocomp): the local
    model, indexes of repositories that cannot be written, session memories, evaluation trees."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "repocomp"


def user_config_file() -> Path:
    """The user's own settings (trusted): `$XDG_CONFIG_HOME/repocomp/config.toml`, by default under ~/.config."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "repocomp" / "config.toml"
