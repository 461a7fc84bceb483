"""Typed stub of the compiled module ``foliosim._core`` (crates/foliosim-py).

Everything passes JSON text across; ``foliosim`` (the Python package) parses it.
Runs release the GIL. A progress callback is called as
``progress(sim_s, sim_total_s)`` about every 100 ms of host time; returning
``False`` (or Ctrl-C, which the binding checks for at the same pace) stops
the run, which then returns its partial result with ``"interrupted": true``.
"""

from collections.abc import Callable

__version__: str

ProgressCallback = Callable[[float, float], bool | None]

class ConfigError(ValueError):
    """Bad input. ``str(err)`` is the one-line ``FILE:LINE: KEY: REASON``."""

    file: str
    line: int | None
    key: str
    reason: str

def load_toml(text: str, filename: str = "<string>") -> str:
    """Validate and normalise a TOML config; the normalised config as JSON.

    Raises ConfigError.
    """

def load_json(text: str, origin: str = "<dict>") -> str:
    """Same as load_toml for a config given as JSON text. Raises ConfigError."""

def run_json(config_json: str, progress: ProgressCallback | None = None) -> str:
    """Run one simulation; the result as a JSON object string.

    Keys: config, interrupted, sim_time_s, host_time_s, summary, vmstat,
    time_ns, per_task, timeseries, locks, checker. Raises ConfigError.
    """

def catalog_json() -> str:
    """Workloads, profiles (with their TOML), knobs, counters and tracepoints as JSON."""

def bench_json(which: str) -> str:
    """One speed benchmark ("anon_faults", "tlb_hits", "pf1_threads64",
    "big_machine"); JSON with the figures measured. Raises RuntimeError."""
