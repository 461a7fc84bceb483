"""Writing a config (a JSON-like dict) back as TOML, so that a normalised
config in a report or a sweep can be saved and rerun with `foliosim run`."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["dumps"]

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k, ensure_ascii=False)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_key(str(k))} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"{type(v).__name__} cannot be written as TOML")


def dumps(cfg: Mapping[str, Any]) -> str:
    """TOML text for `cfg`: scalars first, then one [table] per nested dict
    (dotted headers for deeper levels). Key order is kept."""
    out: list[str] = []
    _table(cfg, [], out)
    return "\n".join(out).strip() + "\n"


def _table(t: Mapping[str, Any], path: list[str], out: list[str]) -> None:
    scalars = [(k, v) for k, v in t.items() if not isinstance(v, Mapping)]
    tables = [(k, v) for k, v in t.items() if isinstance(v, Mapping)]
    if path and (scalars or not tables):
        out.append("")
        out.append("[" + ".".join(_key(p) for p in path) + "]")
    for k, v in scalars:
        out.append(f"{_key(str(k))} = {_value(v)}")
    for k, v in tables:
        _table(v, [*path, str(k)], out)
