"""foliosim: a deterministic simulator of the Linux memory-management subsystem.

    >>> import foliosim
    >>> r = foliosim.run("configs/default.toml")
    >>> r.counters          # pandas DataFrame: name, value (/proc/vmstat names)
    >>> r.timeseries        # pandas DataFrame: one row per simulated second
    >>> r.summary["ops_per_s"]

Configs are a TOML file path, a TOML string or a plain dict. Every failure
is a :class:`foliosim.Error`, one class per cause: bad input raises
:class:`ConfigError` (a ValueError) whose message names the file, line and
key; a workload that cannot run as asked :class:`WorkloadError` (a
ValueError); a simulated machine too small for the run
:class:`OutOfMemoryError`; a run stopped in its warm-up :class:`Cancelled`;
a bug in the core :class:`InternalError` (a RuntimeError). Each class's
``exit_code`` is the CLI's: 2 for what the user can fix, 1 for a bug.

Runs started from threads are stopped with a :class:`Cancel` handle
(Ctrl-C reaches only the main thread)::

    with foliosim.stop_on_signals() as stop:     # Ctrl-C / SIGTERM -> stop.cancel()
        with ThreadPoolExecutor() as ex:
            results = list(ex.map(lambda c: foliosim.run(c, cancel=stop), configs))
    # each result that was cut short has result.interrupted set
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import _core
from ._core import Cancel, Cancelled, ConfigError, Error, InternalError, OutOfMemoryError, WorkloadError
from .config import ConfigLike
from .config import load as _load
from .result import Result

__version__ = _core.__version__

__all__ = ["Cancel", "Cancelled", "ConfigError", "Error", "InternalError", "OutOfMemoryError", "Result",
           "WorkloadError", "__version__", "catalog", "experiments", "load_config", "run", "stop_on_signals"]


def load_config(config: ConfigLike, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """Validate a config (path, TOML string or dict, plus `KEY=VALUE`
    overrides) and return it normalised, with every default filled in."""
    return json.loads(_load(config, overrides))


def run(config: ConfigLike, *, overrides: Iterable[str] = (),
        progress: Callable[[float, float], bool | None] | None = None,
        cancel: Cancel | None = None) -> Result:
    """Run one simulation and return its :class:`Result`.

    `overrides`: ``KEY=VALUE`` strings, as ``foliosim run --set``.
    `progress(sim_s, sim_total_s)` is called about every 100 ms; returning
    False stops the run early. ``cancel.cancel()`` (from any thread) stops
    it too, and so does Ctrl-C for a run in the main thread: the partial
    result comes back with ``result.interrupted`` set.
    """
    cfg_json = _load(config, overrides)
    return Result(_core.run_json(cfg_json, progress, cancel))


@contextlib.contextmanager
def stop_on_signals(*signals: int, cancel: Cancel | None = None) -> Iterator[Cancel]:
    """Within the block, the signals (default SIGINT and SIGTERM) cancel
    `cancel` (a new :class:`Cancel` if not given, which is yielded) instead
    of raising KeyboardInterrupt or ending the process: every run given that
    handle, in any thread, stops with its partial result. The previous
    handlers come back at the end. Call from the main thread."""
    stop = cancel if cancel is not None else Cancel()
    sigs = signals or (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda _s, _f: stop.cancel()) for s in sigs}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def catalog() -> dict[str, Any]:
    """Workloads, profiles, knobs, counters and experiments (what `foliosim list` shows)."""
    return json.loads(_core.catalog_json())


def experiments() -> list[tuple[str, str]]:
    """The experiments (`experiments/*/*.toml`) as (name, title); run them
    with :mod:`foliosim.reproduce`."""
    from . import reproduce

    return [(e["name"], e["help"]) for e in reproduce.catalog()]
