"""Shared helpers. Tests are written against the documented contracts of
`foliosim._core` (crates/foliosim/src/api.rs), never against particular
simulated numbers, and use tiny configs so the suite takes seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The experiments that replay a recording too large to commit (a kernel
# build) replay its committed excerpt here, as in CI, which cannot record
# one (foliosim.programs; test_programs.py checks both modes).
os.environ.setdefault("FOLIOSIM_TRACES", "small")

TINY = """\
seed = 7

[machine]
profile = "generic-x86"

[workload]
name = "page_fault1"
mode = "processes"
tasks = 2
size_mib = 4

[run]
warmup_s = 0.0
duration_s = 0.05
check = false
"""

TINY_DICT = {
    "seed": 7,
    "machine": {"profile": "generic-x86"},
    "workload": {"name": "page_fault1", "mode": "processes", "tasks": 2, "size_mib": 4},
    "run": {"warmup_s": 0.0, "duration_s": 0.05, "check": False},
}

RESULT_KEYS = {"config", "interrupted", "sim_time_s", "host_time_s", "summary", "vmstat",
               "time_ns", "per_task", "timeseries", "locks", "checker"}


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """`foliosim ARGS` in a subprocess (stdin closed, stderr not a tty)."""
    e = dict(os.environ)
    e.pop("FOLIOSIM_DEBUG", None)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "foliosim", *args], cwd=cwd, env=e,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p


def stderr_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.strip()]


def one_json(stdout: str):
    """stdout must be exactly one JSON value (json.loads rejects trailing data)."""
    return json.loads(stdout)


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The run failed as bad input must: exit 2, one line on stderr holding
    every needle, no traceback or panic. Returns the line."""
    lines = stderr_lines(proc)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "PanicException" not in proc.stderr and "panicked" not in proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line of `text` holding `needle`."""
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def tiny_runs(d: Path, tasks: dict[str, int]) -> None:
    """Run TINY once per entry into `d/<name>`, with that many tasks."""
    cfg = d / "tiny.toml"
    cfg.write_text(TINY)
    for name, n in tasks.items():
        proc = run_cli("run", str(cfg), "--out", str(d / name), "--set", f"workload.tasks={n}", "--quiet")
        assert proc.returncode == 0, proc.stderr
