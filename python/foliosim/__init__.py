"""foliosim: a deterministic simulator of the Linux memory-management subsystem.

    >>> import foliosim
    >>> r = foliosim.run("configs/default.toml")
    >>> r.counters          # pandas DataFrame: name, value (/proc/vmstat names)
    >>> r.timeseries        # pandas DataFrame: one row per simulated second
    >>> r.summary["ops_per_s"]

Configs are a TOML file path, a TOML string or a plain dict; bad input raises
:class:`ConfigError` (a ValueError) whose message names the file, line and key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from . import _core
from ._core import ConfigError
from .config import ConfigLike
from .config import load as _load
from .result import Result

__version__ = _core.__version__

__all__ = ["ConfigError", "Result", "__version__", "catalog", "experiments", "load_config", "run"]


def load_config(config: ConfigLike, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """Validate a config (path, TOML string or dict, plus `KEY=VALUE`
    overrides) and return it normalised, with every default filled in."""
    return json.loads(_load(config, overrides))


def run(config: ConfigLike, *, overrides: Iterable[str] = (),
        progress: Callable[[float, float], bool | None] | None = None) -> Result:
    """Run one simulation and return its :class:`Result`.

    `progress(sim_s, sim_total_s)` is called about every 100 ms; returning
    False stops the run early. Ctrl-C also stops it: the partial result comes
    back with ``result.interrupted`` set.
    """
    cfg_json = _load(config, overrides)
    return Result(_core.run_json(cfg_json, progress))


def catalog() -> dict[str, Any]:
    """Workloads, profiles, knobs, counters and experiments (what `foliosim list` shows)."""
    return json.loads(_core.catalog_json())


def experiments() -> list[tuple[str, str]]:
    """The experiments (`experiments/*/*.toml`) as (name, title); run them
    with :mod:`foliosim.reproduce`."""
    from . import reproduce

    return [(e["name"], e["help"]) for e in reproduce.catalog()]
