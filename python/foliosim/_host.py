"""Helpers for the commands that touch the real host (calibrate, validate,
record): locating and building validation/, the THP knobs under
/sys/kernel/mm/transparent_hugepage/ (always restored), small utilities."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

# calibrate's and validate's outputs are staged and renamed as a run's are
# (and what a killed writer left is removed by the next write).
from .result import write_text_atomic as write_text_atomic

THP = Path("/sys/kernel/mm/transparent_hugepage")


class HostError(Exception):
    """A one-line, user-facing error (exit 2)."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def validation_dir() -> Path:
    d = repo_root() / "validation"
    if not (d / "Makefile").is_file():
        raise HostError(f"{d}: validation sources not found (run from a foliosim checkout)")
    return d


def build_validation(quiet: bool = True) -> Path:
    """`make -C validation` (incremental); returns the bin/ directory."""
    d = validation_dir()
    r = subprocess.run(["make", "-s", "-C", str(d)], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["make failed"])[-1]
        raise HostError(f"building validation/ failed: {last}")
    return d / "bin"


def read_knob(path: Path) -> str:
    """The selected value of a sysfs knob: `always [madvise] never` -> madvise."""
    text = path.read_text().strip()
    for tok in text.split():
        if tok.startswith("[") and tok.endswith("]"):
            return tok[1:-1]
    return text


def mthp_sizes_kib() -> list[int]:
    out = []
    for d in THP.glob("hugepages-*kB"):
        if not (d / "enabled").exists():
            continue  # e.g. hugepages-8kB on x86 (no anonymous knob)
        with suppress(ValueError):
            out.append(int(d.name[len("hugepages-"):-2]))
    return sorted(out)


def knobs_available() -> str | None:
    """None if the mTHP knobs can be changed here, else the reason."""
    if not (THP / "enabled").exists():
        return f"{THP}/enabled is missing (kernel without THP)"
    if not mthp_sizes_kib():
        return f"{THP}/hugepages-*kB/ is missing (kernel without multi-size THP, < 6.8)"
    if os.geteuid() != 0:
        return "not root: changing the THP knobs needs root"
    if not os.access(THP / "enabled", os.W_OK):
        return f"{THP}/enabled is not writable"
    return None


def knobs_for(sizes_kib: list[int]) -> dict[Path, str]:
    """sysfs writes that enable exactly `sizes_kib` for anonymous memory
    (always), every other size and the top-level knob never."""
    pmd = 2048
    want: dict[Path, str] = {THP / "enabled": "always" if pmd in sizes_kib else "never"}
    for s in mthp_sizes_kib():
        want[THP / f"hugepages-{s}kB" / "enabled"] = "always" if s in sizes_kib else "never"
    return want


KNOB_LOCK = Path("/run/lock" if Path("/run/lock").is_dir() else "/tmp") / "foliosim-thp-knobs.lock"
_lock_depth = 0
_lock_file = None


@contextmanager
def knob_lock() -> Iterator[None]:
    """Serialise foliosim commands that change the (system-wide) THP knobs:
    two at once would measure under each other's settings, and the second to
    finish would "restore" the first one's values. Re-entrant in a process."""
    global _lock_depth, _lock_file
    import fcntl
    if _lock_depth == 0:
        try:
            f = open(KNOB_LOCK, "a")  # noqa: SIM115 -- held open (locked) until the outermost block ends
        except OSError:
            f = None  # no lock file possible here: run unserialised
        if f is not None:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"foliosim: waiting for another foliosim run that holds the THP knobs ({KNOB_LOCK}) ...", file=sys.stderr, flush=True)
                fcntl.flock(f, fcntl.LOCK_EX)
        _lock_file = f
    _lock_depth += 1
    try:
        yield
    finally:
        _lock_depth -= 1
        if _lock_depth == 0 and _lock_file is not None:
            _lock_file.close()  # releases the flock
            _lock_file = None


def knobs_changed(want: dict[Path, str]) -> list[str]:
    """Knobs in `want` that no longer have that value (someone else wrote them)."""
    out = []
    for path, value in want.items():
        try:
            cur = read_knob(path)
        except OSError:
            cur = "?"
        if cur != value:
            out.append(f"{path} = {cur} (set {value})")
    return out


@contextmanager
def thp_settings(want: dict[Path, str]) -> Iterator[None]:
    """Apply knob values; restore every one changed on exit, also on error,
    Ctrl-C or SIGTERM. Holds knob_lock() meanwhile."""
    with knob_lock(), _thp_settings(want):
        yield


@contextmanager
def _thp_settings(want: dict[Path, str]) -> Iterator[None]:
    saved: list[tuple[Path, str]] = []

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, on_term) if _main_thread() else None
    try:
        for path, value in want.items():
            cur = read_knob(path)
            if cur != value:
                saved.append((path, cur))
                path.write_text(value)
        yield
    finally:
        errors = []
        for path, value in reversed(saved):
            try:
                path.write_text(value)
            except OSError as e:  # keep restoring the others
                errors.append(f"{path}: {e}")
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        if errors:
            print(f"foliosim: warning: could not restore {'; '.join(errors)}", file=sys.stderr)


def _main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


def tmp_fs_kind(path: str) -> str:
    """'tmpfs' if `path` lives on tmpfs/shmem, else 'disk'."""
    best, fstype = "", "unknown"
    real = os.path.realpath(path)
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    mnt = parts[1]
                    if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                        best, fstype = mnt, parts[2]
    except OSError:
        pass
    return "tmpfs" if fstype in ("tmpfs", "shmem") else "disk"


def tool_main(work: Callable[[], object]) -> int:
    """The exit of a `python -m foliosim.X` tool: 0, or 2 with one line
    for what a host, a file or a report got wrong."""
    try:
        work()
    except (HostError, OSError, ValueError, KeyError) as e:
        print(f"foliosim: error: {e}", file=sys.stderr)
        return 2
    return 0


def fill_marked(path: Path, mark: str, end_mark: str, text: str) -> None:
    """Replace what lies between `mark` and `end_mark` in the page `path`
    (a generated table in a hand-written page)."""
    page = path.read_text()
    if mark not in page or end_mark not in page:
        raise HostError(f"{path}: no {mark} ... {end_mark} markers")
    head, rest = page.split(mark, 1)
    _, tail = rest.split(end_mark, 1)
    write_text_atomic(path, f"{head}{mark}\n{text}\n{end_mark}{tail}")


def bench_cache(arg: str | None) -> Path:
    """Where `bench --record` and `validate --programs` unpack sources and
    make their inputs: --cache, else $FOLIOSIM_CACHE, else results/cache."""
    return Path(arg or os.environ.get("FOLIOSIM_CACHE", "results/cache")).resolve()


def write_report(out: Path, stem: str, rep: dict[str, Any], text: str) -> None:
    """OUT/STEM.json (every figure) and OUT/STEM.md (its table), each
    written whole or not at all."""
    write_text_atomic(out / f"{stem}.json", json.dumps(rep, indent=1) + "\n")
    write_text_atomic(out / f"{stem}.md", text + "\n")


def why_failed(r: subprocess.CompletedProcess[str]) -> str:
    """A failed probe in one line: the last line of its stderr, else its
    exit status."""
    return (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
