"""What a repository may set. A repository is untrusted input (README, "Security model"): its own `repocomp.toml` /
`pyproject.toml` may not send code off the machine, make repocomp write outside the repository or raise its memory
budget: `[backend.vllm] endpoints` other than loopback, an `[index] dir` outside the root and an
`[index] max_memory_mb` above the default are dropped with a warning naming the file and key. No setting a repository may set points
outside it: its path-valued ones (`[prompt] tokenizer`, `[backend] model`) are taken from its root and dropped with a
warning when they lead out; its `[index] exclude` holds at most `MAX_REPOSITORY_EXCLUDES` patterns."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from repocomp.config.coerce import shown
from repocomp.config.paths import user_config_file
from repocomp.config.schema import MAX_REPOSITORY_EXCLUDES, IndexConfig, is_loopback, valid_endpoint

log = logging.getLogger(__name__)

_warned: set[tuple[str, str]] = set()


def warn_once(path: Path, key: str, message: str) -> None:
    if (str(path), key) not in _warned:
        _warned.add((str(path), key))
        log.warning("%s", message)


def _inside(value: str, root: Path, names_ok: bool) -> str | None:
    """A path-valued setting of a repository: as an absolute path inside `root` (a relative one is taken from the
    root, not the process's folder), or unchanged when `names_ok` and it is a name (`org/model`) with no such
    path in the repository; None when it points elsewhere (absolute, `~`, `..` leading out, a link out)."""
    if value == "":
        return value
    if value.startswith("~"):
        return None
    parts = Path(value).parts
    if names_ok and not Path(value).is_absolute() and not {".", ".."} & set(parts) \
            and not os.path.lexists(root / value):
        return value
    try:
        full = (root / value).resolve()
    except (OSError, RuntimeError):
        return None
    return str(full) if full.is_relative_to(root) else None


def distrust(table: Any, path: Path, repo_root: Path) -> Any:
    """A repository's own table without the settings it may not choose; says so once per file and key."""
    if not isinstance(table, dict):
        return table
    dropped: list[tuple[str, str]] = []
    backend = table.get("backend")
    vllm = backend.get("vllm") if isinstance(backend, dict) else None
    if isinstance(vllm, dict) and isinstance(vllm.get("endpoints"), (list, tuple)):
        remote = [e for e in vllm["endpoints"] if isinstance(e, str) and valid_endpoint(e) and not is_loopback(e)]
        if remote:
            dropped.append(("backend.vllm.endpoints", f"{shown(remote[0])} is not a loopback address; a repository "
                            "may only name endpoints on this machine"))
    root = Path(repo_root).resolve()
    index = table.get("index")
    if isinstance(index, dict) and isinstance(index.get("dir"), str):
        if not (root / index["dir"]).resolve().is_relative_to(root):
            dropped.append(("index.dir", f"{shown(index['dir'])} is outside the repository"))
    budget = index.get("max_memory_mb") if isinstance(index, dict) else None
    if isinstance(budget, int) and budget > IndexConfig.max_memory_mb:  # a repository may lower it, not raise it
        dropped.append(("index.max_memory_mb", f"{budget:,} is above the default {IndexConfig.max_memory_mb:,}"))
    if isinstance(index, dict) and isinstance(index.get("exclude"), (list, tuple)) \
            and len(index["exclude"]) > MAX_REPOSITORY_EXCLUDES:  # each is matched against every path
        dropped.append(("index.exclude", f"{len(index['exclude']):,} patterns, at most "
                        f"{MAX_REPOSITORY_EXCLUDES:,} from a repository"))
    # path-valued settings: read from the repository only, anchored at its root
    anchored: dict[str, str] = {}
    for key, names_ok in (("prompt.tokenizer", False), ("backend.model", True)):
        section, name = key.split(".")
        value = table.get(section, {}).get(name) if isinstance(table.get(section), dict) else None
        if isinstance(value, str):
            inside = _inside(value, root, names_ok)
            if inside is None:
                dropped.append((key, f"{shown(value)} is outside the repository"))
            elif inside != value:
                anchored[key] = inside
    if not dropped and not anchored:
        return table
    table = _copied(table)
    for key, value in anchored.items():
        *sections, name = key.split(".")
        _table_at(table, sections)[name] = value
    for key, why in dropped:
        *sections, name = key.split(".")
        del _table_at(table, sections)[name]
        warn_once(path, key, f"{path}: [{'.'.join(sections)}] {name} ignored: {why}; set it in {user_config_file()}, "
                  "with --config or in the editor's settings")
    return table


def _copied(table: dict[str, Any]) -> dict[str, Any]:
    return {k: _copied(v) if isinstance(v, dict) else v for k, v in table.items()}


def _table_at(table: dict[str, Any], sections: list[str]) -> dict[str, Any]:
    for section in sections:
        table = table[section]
    return table
