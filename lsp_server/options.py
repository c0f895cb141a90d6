"""Server options from `initializationOptions` and `workspace/didChangeConfiguration`.

One schema: the engine options are the config's own sections (`repocomp.config.schema`: their fields, types and rules),
so an editor may set any key of `[backend]` (its backends' sections too: `{"backend": {"vllm": {...}}}`),
`[retrieval]`, `[prompt]` and `[memory]`, read by the config's converter and checked by the config's rules; only
the server's own knobs (`ServerOptions`) are declared here. Keys may be camelCase (editor convention) or snake_case.
An unknown key or a value of the wrong type is reported when the options arrive, a value the config's rules reject
when it is applied to a folder's config (`apply_options`); each is reported once (the caller shows it via
window/showMessage) and replaced by the folder's value, never fatal.
Engine options left out keep what the workspace's own repocomp.toml / pyproject.toml says.

Example (JSON, as an editor sends it)::

    {"enable": true,
     "backend": {"name": "vllm", "model": "codellama/CodeLlama-7b-hf", "maxNewTokens": 64, "timeoutS": 10,
                 "vllm": {"endpoints": ["http://127.0.0.1:8000"], "retries": 1}},
     "retrieval": {"alpha": 0.5, "iterations": 2},
     "prompt": {"maxTokens": 2048, "fim": "codellama"},
     "server": {"requestTimeoutMs": 5000, "maxDocumentBytes": 1000000, "watchFiles": true}}
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from repocomp.config.coerce import build_section, coerce_setting
from repocomp.config.schema import Config, check_setting
from repocomp.errors import ConfigError

ENGINE_SECTIONS = ("backend", "retrieval", "prompt", "memory")  # the config sections an editor may set


@dataclass(frozen=True)
class ServerOptions:
    """The server's own knobs (not part of the engine config)."""

    # each request's deadline, from when it arrives (the fallback's answer or nothing past it); None: the backend's
    # timeout_s
    request_timeout_ms: int | None = None
    max_document_bytes: int = 1_000_000  # larger documents are not kept nor completed
    watch_files: bool = True  # watchdog observer for changes made outside the editor
    debounce_ms: int = 15  # quiet time that closes a batch of file changes (bursts are capped at 300 ms)
    save_after_ms: int = 30_000  # a changed index is written to disk once its folder has been quiet this long

    def validate(self) -> None:
        check_setting(self.request_timeout_ms is None or 0 < self.request_timeout_ms <= 86_400_000,
                      "request_timeout_ms must be in 1..86400000")
        check_setting(0 < self.max_document_bytes <= 1 << 30, "max_document_bytes must be in 1..1073741824 (1 GiB)")
        check_setting(0 <= self.debounce_ms <= 60_000, "debounce_ms must be in 0..60000")
        check_setting(0 <= self.save_after_ms <= 86_400_000, "save_after_ms must be in 0..86400000")


@dataclass(frozen=True)
class Options:
    enable: bool = True
    # per engine section, the settings the editor gave (snake_case names, values of the config's types)
    engine: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    server: ServerOptions = field(default_factory=ServerOptions)


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _object(data: Any, where: str, errors: list[str]) -> dict[str, Any]:
    """`data` as an object with snake_case keys; anything else is reported and read as empty."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        errors.append(f"{where}: expected an object, got {data!r}; using defaults")
        return {}
    return {_snake(str(key)): value for key, value in data.items()}


def _settings(cls: type, data: dict[str, Any], where: str, errors: list[str]) -> dict[str, Any]:
    """The keys of `data` that name a field of `cls`, converted to its types by the config's converter."""
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    out: dict[str, Any] = {}
    for name, raw in data.items():
        path = f"{where}.{name}"
        if name not in hints:
            errors.append(f"unknown option {path!r} ignored (known: {', '.join(_camel(n) for n in known)})")
            continue
        if dataclasses.is_dataclass(hints[name]):  # a backend's own sub-section: the keys given, applied over
            given = _settings(hints[name], _object(raw, path, errors), path, errors)  # the folder's (Config.replace)
            if given:
                out[name] = given
            continue
        if typing.get_origin(hints[name]) is tuple and isinstance(raw, str):
            raw = [raw]  # one endpoint given as a plain string
        try:
            out[name] = coerce_setting(hints[name], raw, path)
        except ConfigError as exc:
            errors.append(f"option {exc}; using the default")
    return out


def parse_options(data: Any) -> tuple[Options, list[str]]:
    """Options from the client's JSON (`{"repocomp": {...}}` or the bare object) plus one message per problem."""
    errors: list[str] = []
    if isinstance(data, dict) and isinstance(data.get("repocomp"), dict):
        data = data["repocomp"]
    top = _object(data, "options", errors)
    enable = True
    if "enable" in top:
        if isinstance(top["enable"], bool):
            enable = top["enable"]
        else:
            errors.append(f"option 'enable': expected true/false, got {top['enable']!r}; using the default")
    engine: dict[str, Mapping[str, Any]] = {}
    sections = typing.get_type_hints(Config)
    for section in ENGINE_SECTIONS:
        given = _settings(sections[section], _object(top.get(section), section, errors), section, errors)
        if given:
            engine[section] = MappingProxyType(given)
    server_values: dict[str, Any] = {}
    for name, value in _settings(ServerOptions, _object(top.get("server"), "server", errors), "server",
                                 errors).items():
        try:  # key by key: a rejected value leaves the others
            build_section(ServerOptions, server_values | {name: value}, "server")
            server_values[name] = value
        except ConfigError as exc:
            errors.append(f"option 'server.{name}' = {value!r} rejected: {exc}; using the default")
    server = build_section(ServerOptions, server_values, "server")
    for key in sorted(set(top) - {"enable", "server", *ENGINE_SECTIONS}):
        errors.append(f"unknown option {key!r} ignored (known: enable, {', '.join(ENGINE_SECTIONS)}, server)")
    return Options(enable, MappingProxyType(engine), server), errors


def apply_options(config: Config, options: Options) -> tuple[Config, list[str]]:
    """`config` with the engine options applied; a value the config's rules reject is reported and dropped."""
    errors: list[str] = []
    for section, given in options.engine.items():
        changes = dict(given)
        if section == "prompt" and "max_tokens" in changes and "context_tokens" not in changes \
                and config.prompt.context_tokens > changes["max_tokens"]:
            changes["context_tokens"] = max(1, changes["max_tokens"] // 2)
        try:
            config = config.replace(section, **changes)
        except ConfigError:
            for key, value in changes.items():  # find the culprit(s); keep the rest
                try:
                    config = config.replace(section, **{key: value})
                except ConfigError as exc:
                    errors.append(f"option '{section}.{key}' = {value!r} rejected: {exc}; using the default")
    return config, errors
