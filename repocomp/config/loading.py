"""Reading the settings: `[tool.repocomp]` in pyproject.toml or a repocomp.toml, layered and built into a `Config`.

The user's own config file (`$XDG_CONFIG_HOME/repocomp/config.toml`), an explicit file the user names (`--config`),
CLI flags and LSP initialization options may set anything; a repository's own file is untrusted and loses what
`repocomp.config.trust` says it may not set. A repository's file is read only when it is a regular file inside the
root (a symlink leading out is not read), of at most `MAX_CONFIG_BYTES`; one nested too deeply for the parser is a
`ConfigError`, never a traceback. Unknown keys and bad values are named (`repocomp.config.coerce`)."""

from __future__ import annotations

import dataclasses
import os
import stat
import tomllib
import typing
from pathlib import Path
from typing import Any

from repocomp.config.coerce import build_section, name_list, shown
from repocomp.config.paths import user_config_file
from repocomp.config.schema import MAX_CONFIG_BYTES, MAX_DOTS_PER_LINE, Config
from repocomp.config.trust import distrust, warn_once
from repocomp.errors import ConfigError


def config_from_dict(data: dict[str, Any], where: str = "tool.repocomp") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"[{where}] must be a table")
    sections = {f.name: f for f in dataclasses.fields(Config)}
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(f"unknown section(s) in [{where}]: {name_list(unknown)} (known: {', '.join(sections)})")
    built = {}
    for name, value in data.items():
        if not isinstance(value, dict):
            raise ConfigError(f"[{where}.{name}] must be a table, got {shown(value)}")
        built[name] = build_section(typing.get_type_hints(Config)[name], value, f"{where}.{name}")
    return Config(**built)


def _read_toml(path: Path, repository: Path | None = None) -> dict[str, Any] | None:
    """The TOML document of a config file: a regular file of at most `MAX_CONFIG_BYTES`, parsed whatever its
    nesting (a RecursionError of the parser is a `ConfigError`).

    `repository`: the file is the repository's own (untrusted): a symbolic link is followed only to a file inside
    that root, and a file that is not regular, leads out or is too large is ignored with a warning (None)."""
    where = path
    if repository is not None:
        root = repository.resolve()
        resolved: Path | None
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            resolved = None
        if resolved is None or not resolved.is_relative_to(root):
            warn_once(path, "file", f"{path} is a symbolic link leading outside the repository; not read")
            return None
        where = resolved
    try:
        # O_NONBLOCK: a FIFO swapped in after the check neither blocks the open nor is read (fstat below)
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                     | (os.O_NOFOLLOW if repository is not None else 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"config {path} is not a regular file")
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except ConfigError:
        if repository is None:
            raise
        warn_once(path, "file", f"{path} is not a regular file; not read")
        return None
    if len(data) > MAX_CONFIG_BYTES:
        too_big = f"{path} is larger than {MAX_CONFIG_BYTES:,} bytes; not read"
        if repository is None:
            raise ConfigError(f"config {too_big}")
        warn_once(path, "file", f"{too_big}: using the other settings")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config {path} is not UTF-8 text; TOML files must be UTF-8") from None
    if max(line.count(".") for line in text.split("\n")) > MAX_DOTS_PER_LINE:
        raise ConfigError(f"config {path} is nested too deeply to read (a line with more than {MAX_DOTS_PER_LINE} "
                          "dots); flatten its keys")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path} is not valid TOML: {exc}") from None
    except (RecursionError, MemoryError):  # `a = [[[[...` thousands deep: the parser recurses per level
        raise ConfigError(f"config {path} is nested too deeply to read; flatten its arrays and tables") from None


def _tool_table(data: dict[str, Any], path: Path, required: bool) -> dict[str, Any] | None:
    """`[tool.repocomp]` of a TOML document; with `required=False`, the whole document when it has no `tool`."""
    if "tool" not in data:
        return None if required else data
    tool = data["tool"]
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table (holding [tool.repocomp]), got {shown(tool)}")
    if "repocomp" not in tool:
        return None if required else data
    return tool["repocomp"]


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Table by table, at every depth: `top`'s keys over `base`'s (`[backend.vllm] retries` in one file keeps the
    `endpoints` another gave)."""
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_config(repo_root: Path | None = None, config_file: Path | None = None) -> Config:
    """The user's config file, overlaid with an explicit `config_file` or else the repository's own settings.

    Repository settings: `repocomp.toml` (sections at top level or under [tool.repocomp]), else
    `[tool.repocomp]` in pyproject.toml; they are untrusted (see the module doc). `config_file` is trusted:
    pass only a file the user named (the CLI's --config). A repocomp.toml or explicit file holds the sections at
    top level, or under [tool.repocomp].
    """
    layers: list[tuple[str, Any]] = []
    user = user_config_file()
    if user.is_file():
        layers.append((str(user), _tool_table(_read_toml(user) or {}, user, required=False)))
    if config_file is not None:
        own = Path(config_file)
        layers.append((str(own), _tool_table(_read_toml(own) or {}, own, required=False)))
    elif repo_root is not None:
        local, pyproject = Path(repo_root) / "repocomp.toml", Path(repo_root) / "pyproject.toml"
        # a link is judged by `_read_toml` (inside the root or not read); a FIFO or folder is passed over unopened
        source = next((f for f in (local, pyproject) if f.is_symlink() or f.is_file()), None)
        document = _read_toml(source, Path(repo_root)) if source is not None else None
        if source is not None and document is not None:
            table = _tool_table(document, source, required=source is pyproject)
            if table is not None:
                label = str(source) if source is local else f"{source}: tool.repocomp"
                layers.append((label, distrust(table, source, Path(repo_root))))
    if not layers:
        return Config()
    for where, table in layers:
        if not isinstance(table, dict):
            raise ConfigError(f"[{where}] must be a table, got {shown(table)}")
    merged: dict[str, Any] = {}
    for _, table in layers:
        merged = _merge(merged, table)
    return config_from_dict(merged, " + ".join(where for where, _ in layers))
