"""Typed stub of the compiled module ``foliosim._core`` (crates/foliosim-py).

Everything passes JSON text across; ``foliosim`` (the Python package) parses it.
Runs release the GIL. A progress callback is called as
``progress(sim_s, sim_total_s)`` about every 100 ms of host time; returning
``False`` (or Ctrl-C, which the binding checks for at the same pace) stops
the run, which then returns its partial result with ``"interrupted": true``.
"""

from collections.abc import Callable
from typing import ClassVar, final

__version__: str
__all__ = [
    "Cancel",
    "Cancelled",
    "ConfigError",
    "Error",
    "InternalError",
    "OutOfMemoryError",
    "ValgrindListener",
    "WorkloadError",
    "__version__",
    "_panic_for_tests",
    "bench_events",
    "bench_instructions_json",
    "bench_json",
    "catalog_json",
    "load_json",
    "load_toml",
    "process_image_json",
    "profile_explain_json",
    "resolve_paths",
    "run_json",
    "trace_from_perf",
    "trace_from_valgrind_log",
    "trace_from_valgrind_logs",
    "trace_info",
    "trace_meta",
]

_ProgressCallback = Callable[[float, float], bool | None]

class Error(Exception):
    """Any failure foliosim reports; ``exit_code`` is the CLI's exit code for
    it (2: the user can fix it, 1: a bug)."""

    exit_code: ClassVar[int]

class ConfigError(Error, ValueError):
    """Bad input. ``str(err)`` is the one-line ``FILE:LINE: KEY: REASON``."""

    file: str
    line: int | None
    key: str
    reason: str

class WorkloadError(Error, ValueError):
    """The workload cannot be set up or run as asked (a trace that cannot be
    read or converted, parameters this machine cannot honour)."""

class OutOfMemoryError(Error):
    """The simulated machine ran out of memory where the run cannot go on."""

class Cancelled(Error):
    """The run was stopped before its measured window began."""

class InternalError(Error, RuntimeError):
    """A bug in the core (a broken invariant or a Rust panic); ``str(err)``
    says where."""

@final
class Cancel:
    """A stop flag: ``cancel()`` (from any thread or a signal handler) stops
    every run given this handle at its next progress check."""

    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...

@final
class ValgrindListener:
    """A listener for the logs valgrind streams with ``--log-socket``:
    ``port`` to give valgrind, ``convert`` to run in a thread (it returns
    once ``stop`` was called and every connection is read)."""

    def __init__(self) -> None: ...
    @property
    def port(self) -> int: ...
    def stop(self) -> None: ...
    def convert(self, out_path: str, meta_json: str, root: int) -> str: ...

def load_toml(text: str, filename: str = "<string>") -> str:
    """Validate and normalise a TOML config; the normalised config as JSON.
    Relative paths in it start at the folder of `filename`.

    Raises ConfigError.
    """

def load_json(text: str, origin: str = "<dict>", base_dir: str = "") -> str:
    """Same as load_toml for a config given as JSON text; its relative paths
    start at `base_dir` (default: the current directory). Raises ConfigError."""

def resolve_paths(text: str, origin: str, base_dir: str) -> str:
    """A config as JSON (not normalised) with its relative paths (machine.profile,
    workload paths) made absolute from `base_dir`. Raises ConfigError."""

def run_json(config_json: str, progress: _ProgressCallback | None = None, cancel: Cancel | None = None) -> str:
    """Run one simulation; the result as a JSON object string.

    Keys: config, interrupted, sim_time_s, host_time_s, summary, vmstat,
    time_ns, per_task, timeseries, locks, checker. Raises ConfigError,
    WorkloadError, OutOfMemoryError, Cancelled (stopped in the warm-up) or
    InternalError.
    """

def catalog_json() -> str:
    """Workloads, profiles (with their TOML), knobs, counters and tracepoints as JSON."""

def process_image_json() -> str:
    """The model's will-it-scale process image as JSON: its mapped pieces
    ({"start", "len", "kind", "write", "resident": [[first, end], ...],
    "what"}), in the order of their addresses' groups."""

def profile_explain_json(name: str, base_dir: str = "") -> str:
    """Each value of a machine profile (a built-in name or a path relative to
    `base_dir`) with its source: measured, public, derived (with the rule's
    arithmetic) or assumed; JSON. Raises ConfigError."""

def bench_json(which: str) -> str:
    """One speed benchmark ("anon_faults", "tlb_hits", "pf1_threads64",
    "big_machine", ...); JSON with the figures measured. Raises WorkloadError."""

def bench_instructions_json(which: str, child: list[str]) -> str:
    """An instruction count ("anon_fault_instructions", "tlb_hit_instructions"):
    the command ``child`` (which calls bench_events and prints its result) runs
    under valgrind's callgrind for two simulated lengths, given as its last two
    arguments. JSON, e.g. {"instructions_per_anon_fault": f, ...}. Needs
    valgrind. Raises WorkloadError."""

def bench_events(workload: str, sim_s: float) -> int:
    """One run of "anon_faults" or "tlb_hits" for ``sim_s`` simulated seconds;
    the events (faults, TLB hits) it counted. Raises WorkloadError."""

def trace_from_valgrind_log(log_path: str, out_path: str, meta_json: str) -> str:
    """Convert a valgrind lackey+syscall log (file or FIFO) into a foliosim trace
    at ``out_path``; statistics as JSON. Raises WorkloadError."""

def trace_from_valgrind_logs(dir: str, out_path: str, meta_json: str, root: int) -> str:
    """Convert the valgrind logs of a recorded process tree (``DIR/log.PID.N``;
    ``root`` the first process's pid) into a trace at ``out_path``; statistics
    as JSON. Raises WorkloadError."""

def trace_info(path: str) -> str:
    """Read and check a whole trace; {"records", "accesses", "files", "regions",
    "meta"} as JSON. Raises WorkloadError."""

def trace_from_perf(input_path: str, out_path: str, meta_json: str, status_path: str, tracefs: str) -> str:
    """Convert perf's pipe stream read from ``input_path`` into a trace at
    ``out_path`` (tracepoint formats from ``tracefs``; the recorder's status
    file read when the stream ends); statistics as JSON. Raises WorkloadError."""

def trace_meta(path: str) -> str:
    """The Meta JSON at the head of a trace ("" if none). Raises WorkloadError."""

def _panic_for_tests(message: str) -> None:
    """Panics inside the core's guard, as a bug would (tests of the panic ->
    InternalError mapping). Raises InternalError."""
