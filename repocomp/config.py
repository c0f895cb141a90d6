"""All settings in one place: `[tool.repocomp]` in pyproject.toml or a repocomp.toml, validated on load.

Every section is a frozen dataclass; `load_config` fills them from TOML, naming unknown keys and bad values.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repocomp.errors import ConfigError


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True)
class IndexConfig:
    dir: str = ".repocomp"  # relative to the repository root, or absolute
    max_file_bytes: int = 1_000_000
    exclude: tuple[str, ...] = ()  # extra gitignore-style patterns
    languages: tuple[str, ...] = ("python", "java", "javascript", "typescript", "tsx", "go", "rust", "c", "cpp")

    def validate(self) -> None:
        _check(self.max_file_bytes > 0, "max_file_bytes must be > 0")


@dataclass(frozen=True)
class FragmentConfig:
    window: int = 20  # lines per fragment (RepoCoder)
    stride: int = 10  # a new fragment every `stride` lines

    def validate(self) -> None:
        _check(self.window > 0, "window must be > 0")
        _check(0 < self.stride <= self.window, "stride must be in 1..window")


@dataclass(frozen=True)
class GraphConfig:
    # FragRel Appendix A edge weights, each in (0, 1].
    syntax: float = 0.5
    directory: float = 0.3
    file: float = 1.0
    call: float = 0.8

    def validate(self) -> None:
        for name in ("syntax", "directory", "file", "call"):
            v = getattr(self, name)
            _check(0.0 < v <= 1.0, f"{name} weight must be in (0, 1], got {v}")


@dataclass(frozen=True)
class RelationConfig:
    cutoff: float = 0.1  # node pairs whose max-product path strength is below this are unrelated
    top_k: int = 32  # relations kept per fragment row
    max_reach: int = 256  # strongest nodes kept per node (bounds hubs); 0 = no bound
    context_weight: float = 0.0  # Eq. 7 w_rel for fragments of one file; 0 turns it off
    context_combine: str = "max"  # how Eq. 7 joins Eq. 8: "max" or "sum"

    def validate(self) -> None:
        _check(0.0 < self.cutoff < 1.0, "cutoff must be in (0, 1)")
        _check(self.top_k > 0, "top_k must be > 0")
        _check(self.max_reach >= 0, "max_reach must be >= 0")
        _check(0.0 <= self.context_weight < 1.0, "context_weight must be in [0, 1)")
        _check(self.context_combine in ("max", "sum"), "context_combine must be 'max' or 'sum'")


@dataclass(frozen=True)
class RetrievalConfig:
    similarity: str = "jaccard"  # "jaccard" (RepoCoder) or "bm25"
    alpha: float = 0.5  # FragRel Eq. 10; 0 turns FragRel off
    query_relations: float = 0.25  # weight of cursor-region-to-candidate path strength (beyond the paper); 0 = off
    top_k: int = 10
    iterations: int = 2  # RepoCoder rounds; 1 = vanilla retrieve-then-generate

    def validate(self) -> None:
        _check(self.similarity in ("jaccard", "bm25"), "similarity must be 'jaccard' or 'bm25'")
        _check(self.alpha >= 0.0, "alpha must be >= 0")
        _check(self.query_relations >= 0.0, "query_relations must be >= 0")
        _check(self.top_k > 0, "top_k must be > 0")
        _check(self.iterations >= 1, "iterations must be >= 1")


@dataclass(frozen=True)
class PromptConfig:
    max_tokens: int = 2048  # budget for retrieved blocks + in-file context
    context_tokens: int = 1024  # share of the budget kept for the in-file context
    max_blocks: int = 10
    fim: str = "none"  # "none", "codellama" or "starcoder"
    tokenizer: str = ""  # local tokenizer dir; empty = the model's when local, else a code-aware estimate

    def validate(self) -> None:
        _check(self.max_tokens > 0, "max_tokens must be > 0")
        _check(0 < self.context_tokens <= self.max_tokens, "context_tokens must be in 1..max_tokens")
        _check(self.max_blocks >= 0, "max_blocks must be >= 0")
        _check(self.fim in ("none", "codellama", "starcoder"), "fim must be 'none', 'codellama' or 'starcoder'")


BACKEND_NAMES = ("auto", "extractive", "vllm", "transformers")


@dataclass(frozen=True)
class BackendConfig:
    # "auto": the local model in process when one is prepared (`repocomp model prepare`), else "extractive"
    name: str = "auto"  # "auto", "extractive", "vllm" or "transformers"
    model: str = ""  # vllm: the served name ("" = ask the server); transformers: a folder ("" = the local model)
    endpoints: tuple[str, ...] = ("http://127.0.0.1:8000",)
    timeout_s: float = 30.0
    connect_timeout_s: float = 3.0
    retries: int = 2
    max_new_tokens: int = 128
    temperature: float = 0.0
    fallback: str = "extractive"  # backend used when the configured one fails; "" = none
    device: str = "cpu"  # transformers backend
    dtype: str = "auto"  # transformers backend: "auto" (the checkpoint's), "float32" or "bfloat16"

    def validate(self) -> None:
        _check(self.name in BACKEND_NAMES, f"name must be one of {', '.join(BACKEND_NAMES)}")
        _check(self.dtype in ("auto", "float32", "bfloat16"), "dtype must be 'auto', 'float32' or 'bfloat16'")
        _check(self.fallback in ("", "extractive"), "fallback must be 'extractive' or ''")
        _check(self.timeout_s > 0 and self.connect_timeout_s > 0, "timeouts must be > 0")
        _check(self.retries >= 0, "retries must be >= 0")
        _check(self.max_new_tokens > 0, "max_new_tokens must be > 0")
        _check(len(self.endpoints) > 0, "endpoints must not be empty")


@dataclass(frozen=True)
class Config:
    index: IndexConfig = field(default_factory=IndexConfig)
    fragments: FragmentConfig = field(default_factory=FragmentConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    relations: RelationConfig = field(default_factory=RelationConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)

    def replace(self, section: str, **changes: Any) -> "Config":
        """A copy with some keys of one section changed (validated)."""
        merged = dataclasses.asdict(getattr(self, section)) | changes
        return dataclasses.replace(self, **{section: _build(type(getattr(self, section)), merged, section)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item_tp, _) = typing.get_args(tp)
        return tuple(_coerce(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    raise ConfigError(f"{where}: unsupported type {tp}")  # pragma: no cover - schema bug


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown key(s) in [{where}]: {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    values = {k: _coerce(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    obj = cls(**values)
    try:
        obj.validate()
    except ValueError as exc:
        raise ConfigError(f"bad value in [{where}]: {exc}") from None
    return obj


def config_from_dict(data: dict[str, Any], where: str = "tool.repocomp") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"[{where}] must be a table")
    sections = {f.name: f for f in dataclasses.fields(Config)}
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(f"unknown section(s) in [{where}]: {', '.join(unknown)} (known: {', '.join(sections)})")
    built = {}
    for name, value in data.items():
        if not isinstance(value, dict):
            raise ConfigError(f"[{where}.{name}] must be a table, got {value!r}")
        built[name] = _build(typing.get_type_hints(Config)[name], value, f"{where}.{name}")
    return Config(**built)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path} is not valid TOML: {exc}") from None


def load_config(repo_root: Path | None = None, config_file: Path | None = None) -> Config:
    """Explicit file > repocomp.toml > [tool.repocomp] in pyproject.toml > defaults.

    A repocomp.toml (or an explicit file) holds the sections at top level, or under [tool.repocomp].
    """
    own = Path(config_file) if config_file is not None else None
    if own is None and repo_root is not None and (Path(repo_root) / "repocomp.toml").is_file():
        own = Path(repo_root) / "repocomp.toml"
    if own is not None:
        data = _read_toml(own)
        return config_from_dict(data.get("tool", {}).get("repocomp", data) if "tool" in data else data, str(own))
    if repo_root is not None:
        pyproject = Path(repo_root) / "pyproject.toml"
        if pyproject.is_file():
            table = _read_toml(pyproject).get("tool", {}).get("repocomp")
            if table is not None:
                return config_from_dict(table, f"{pyproject}: tool.repocomp")
    return Config()


