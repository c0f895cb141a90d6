"""Server options from `initializationOptions` and `workspace/didChangeConfiguration`.

Nested frozen dataclasses read by one converter (`parse_options`). Keys may be camelCase (editor convention)
or snake_case. An invalid value or unknown key is reported (the caller shows it via window/showMessage) and
replaced by its default, never fatal. Engine settings are `None` by default, meaning "keep what the
workspace's own repocomp.toml / pyproject.toml says"; `apply_options` maps the ones given onto a
`repocomp.config.Config` through `Config.replace`.

Example (JSON, as an editor sends it)::

    {"enable": true,
     "backend": {"name": "vllm", "endpoints": ["http://127.0.0.1:8000"], "model": "codellama/CodeLlama-7b-hf",
                 "maxNewTokens": 64, "timeoutS": 10},
     "retrieval": {"alpha": 0.5, "iterations": 2},
     "prompt": {"maxTokens": 2048, "fim": "codellama"},
     "server": {"requestTimeoutMs": 5000, "maxDocumentBytes": 1000000, "watchFiles": true}}
"""

from __future__ import annotations

import dataclasses
import re
import types as pytypes
import typing
from dataclasses import dataclass, field
from typing import Any

from repocomp.config import BACKEND_NAMES, FIM_FORMATS, Config
from repocomp.errors import ConfigError


@dataclass(frozen=True)
class BackendOptions:
    """-> [backend]: which LLM backend, where it is served, which model, how many tokens it may write."""

    name: str | None = None  # "auto", "extractive", "vllm" or "transformers"
    endpoints: tuple[str, ...] | None = None
    model: str | None = None
    max_new_tokens: int | None = None
    max_time_s: float | None = None  # time after the first token, then the text so far is the answer; 0: the model's
    timeout_s: float | None = None


@dataclass(frozen=True)
class RetrievalOptions:
    """-> [retrieval]: FragRel alpha (0 turns FragRel off) and RepoCoder iterations (1 = vanilla, 0 = the
    model's)."""

    alpha: float | None = None
    iterations: int | None = None


@dataclass(frozen=True)
class PromptOptions:
    """-> [prompt]: the prompt's token budget and fill-in-the-middle format."""

    max_tokens: int | None = None
    fim: str | None = None  # "none", "codellama" or "starcoder"


@dataclass(frozen=True)
class ServerOptions:
    """The server's own knobs (not part of the engine config)."""

    # a completion slower than this returns empty ("backend slow"); None: the backend's own deadline (timeout_s)
    request_timeout_ms: int | None = None
    max_document_bytes: int = 1_000_000  # larger documents are not completed
    watch_files: bool = True  # watchdog observer for changes made outside the editor
    debounce_ms: int = 15  # quiet time that closes a batch of file changes (bursts are capped at 300 ms)


@dataclass(frozen=True)
class Options:
    enable: bool = True
    backend: BackendOptions = field(default_factory=BackendOptions)
    retrieval: RetrievalOptions = field(default_factory=RetrievalOptions)
    prompt: PromptOptions = field(default_factory=PromptOptions)
    server: ServerOptions = field(default_factory=ServerOptions)


_CHECKS: dict[str, typing.Callable[[Any], bool]] = {
    "backend.name": lambda v: v in BACKEND_NAMES,
    "backend.endpoints": lambda v: len(v) > 0 and all(e.startswith(("http://", "https://")) for e in v),
    "backend.max_new_tokens": lambda v: v > 0,
    "backend.max_time_s": lambda v: v >= 0,  # 0: the model's
    "backend.timeout_s": lambda v: v > 0,
    "retrieval.alpha": lambda v: v >= 0,
    "retrieval.iterations": lambda v: v >= 0,  # 0: the model's
    "prompt.max_tokens": lambda v: v >= 0,  # 0: the model's budget
    "prompt.fim": lambda v: v in FIM_FORMATS,
    "server.request_timeout_ms": lambda v: v > 0,
    "server.max_document_bytes": lambda v: v > 0,
    "server.debounce_ms": lambda v: v >= 0,
}


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _coerce(tp: Any, value: Any) -> Any:
    """`value` as type `tp`, or raise TypeError. Optional[X] takes None or an X."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, pytypes.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise TypeError("expected true/false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError("expected an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise TypeError("expected a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise TypeError("expected a string")
    if origin is tuple:
        if isinstance(value, str):
            value = [value]  # one endpoint given as a plain string
        if not isinstance(value, (list, tuple)):
            raise TypeError("expected a list")
        (item_tp, _) = typing.get_args(tp)
        return tuple(_coerce(item_tp, v) for v in value)
    raise TypeError(f"unsupported type {tp}")  # pragma: no cover - schema bug


def _structure(cls: type, data: Any, where: str, errors: list[str]) -> Any:
    if data is None:
        return cls()
    if not isinstance(data, dict):
        errors.append(f"{where or 'options'}: expected an object, got {data!r}; using defaults")
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, raw in data.items():
        name = _snake(key)
        path = f"{where}.{name}" if where else name
        if name not in fields:
            known = ", ".join(_camel(n) for n in fields)
            errors.append(f"unknown option {path!r} ignored (known: {known})")
            continue
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            values[name] = _structure(tp, raw, path, errors)
            continue
        try:
            value = _coerce(tp, raw)
        except TypeError as exc:
            errors.append(f"option {path!r}: {exc}, got {raw!r}; using the default")
            continue
        check = _CHECKS.get(path)
        if value is not None and check is not None and not check(value):
            errors.append(f"option {path!r}: invalid value {raw!r}; using the default")
            continue
        values[name] = value
    return cls(**values)


def parse_options(data: Any) -> tuple[Options, list[str]]:
    """Options from the client's JSON (`{"repocomp": {...}}` or the bare object) plus one message per problem."""
    errors: list[str] = []
    if isinstance(data, dict) and isinstance(data.get("repocomp"), dict):
        data = data["repocomp"]
    return _structure(Options, data, "", errors), errors


def _section_changes(section: Any) -> dict[str, Any]:
    return {f.name: getattr(section, f.name) for f in dataclasses.fields(section) if getattr(section, f.name) is not None}


def apply_options(config: Config, options: Options) -> tuple[Config, list[str]]:
    """`config` with the engine options that are set applied; a change the config rejects is reported and dropped."""
    errors: list[str] = []
    for section in ("backend", "retrieval", "prompt"):
        changes = _section_changes(getattr(options, section))
        if section == "prompt" and "max_tokens" in changes and config.prompt.context_tokens > changes["max_tokens"]:
            changes["context_tokens"] = max(1, changes["max_tokens"] // 2)
        if not changes:
            continue
        try:
            config = config.replace(section, **changes)
        except ConfigError:
            for key, value in changes.items():  # find the culprit(s); keep the rest
                try:
                    config = config.replace(section, **{key: value})
                except ConfigError as exc:
                    errors.append(f"option '{section}.{key}' = {value!r} rejected: {exc}; using the default")
    return config, errors
