"""Settings from TOML values or editors' options: each converted to its field's type and its section checked by its
`validate()` rules; a `ConfigError` names where a value is wrong."""

from __future__ import annotations

import dataclasses
import math
import reprlib
import types
import typing
from typing import Any

from repocomp.errors import ConfigError


def coerce_setting(tp: Any, value: Any, where: str) -> Any:
    """`value` as a setting of type `tp` (a ConfigError naming `where` otherwise): the one converter of settings
    from TOML files and from editors' options."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):  # `X | None`: None, or an X
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else coerce_setting(inner, value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {shown(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {shown(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {shown(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {shown(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {shown(value)}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a section's own sub-section ([backend.vllm])
        if isinstance(value, tp):
            value = dataclasses.asdict(value)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {shown(value)}")
        return build_section(tp, value, where)
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {shown(value)}")
        (item_tp, _) = typing.get_args(tp)
        return tuple(coerce_setting(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    raise ConfigError(f"{where}: unsupported type {tp}")  # pragma: no cover - schema bug


def build_section(cls: type, data: dict[str, Any], where: str) -> Any:
    """A settings dataclass from a table of its fields, converted and checked by its `validate()` rules."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        moved = getattr(cls, "MOVED", {})
        hint = "".join(f"; {k} is now in [{where}.{moved[k]}]" for k in unknown if k in moved)
        raise ConfigError(f"unknown key(s) in [{where}]: {name_list(unknown)} (known: {', '.join(sorted(names))})"
                          + hint)
    values = {k: coerce_setting(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    obj = cls(**values)
    try:
        obj.validate()
    except ValueError as exc:
        raise ConfigError(f"bad value in [{where}]: {exc}") from None
    return obj


def shown(value: Any) -> str:
    """`value` for a one-line message: depth and length bounded (a repository's value may be nested thousands
    deep or megabytes long; a plain repr of it raised RecursionError or filled the terminal)."""
    shown = reprlib.Repr()
    shown.maxlevel, shown.maxstring, shown.maxother, shown.maxlist, shown.maxdict = 3, 80, 80, 6, 6
    return shown.repr(value)


def name_list(names: list[str], limit: int = 10) -> str:
    """A bounded list of names for a message (a file may hold thousands of unknown keys)."""
    more = f" and {len(names) - limit:,} more" if len(names) > limit else ""
    return ", ".join(shown(n) if not n.isidentifier() else n for n in names[:limit]) + more
