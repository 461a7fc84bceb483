"""`foliosim record -- CMD ARGS`: record a program tree's memory behaviour
into a trace (docs/trace-format.md) that the `trace` workload replays.

Two recorders:

- `perf` (the default): the program runs natively under `perf record`
  (Debian's linux-perf), which traces what the kernel sees: user page
  faults, the memory system calls, the page-cache reads and writes,
  fork/vfork/clone/exec/exit and when each task runs, for every process and
  thread of the tree. Its stream goes straight from perf's stdout into the
  converter in foliosim's core (trace_perf); nothing is parsed in Python.
  The tree runs under validation/bin/recordwrap, which disables THP for it
  (so every 4 KiB page's first touch is a fault) and reports its rusage;
  fault-around is set to one page meanwhile (so every file page's first
  touch is a fault too), under the knob lock, and restored.
- `valgrind`: every memory access (lackey), thousands of times slower;
  for what needs every access (TLB hits and misses, LRU ageing). Each
  process image's log streams over a socket of its own into the core's
  converter (trace_procs), nothing goes to disk but the trace.

The trace is written to a temporary file next to the output and renamed
into place only when the program exited 0 and the whole trace reads back.
Whatever ends a recording (SIGTERM, Ctrl-C, `--timeout`) kills every
process of the recorded tree with it. `--validate` then runs the program
natively and compares its minor faults (the whole process tree: wait4's
rusage counts reaped descendants) and peak RSS (the largest of any one
process, as ru_maxrss gives it) with the replay's."""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._host import HostError, knob_lock

MODES = ("perf", "valgrind")

#: What a trace of each recorder cannot show; `record` and a replay say it.
LACKS = {
    "perf": "it holds page faults, not every access: a replay has no TLB hits, no TLB misses after a page's first "
            "touch and no LRU re-references (reclaim's ageing); record with --mode valgrind for those",
    "valgrind": "it has no CPU time between accesses (a replay runs them back to back), replays vfork as fork, "
                "and merges threads into their process",
}

TRACEFS = Path("/sys/kernel/tracing")
DEBUGFS = Path("/sys/kernel/debug")
FAULT_AROUND = DEBUGFS / "fault_around_bytes"

#: The tracepoints the perf recorder enables (trace_perf.rs reads them).
PERF_EVENTS = [
    "exceptions:page_fault_user",
    "exceptions:page_fault_kernel",
    "raw_syscalls:sys_enter",
    "raw_syscalls:sys_exit",
    "sched:sched_process_exec",
    "sched:sched_process_exit",
    "task:task_newtask",
    "filemap:mm_filemap_get_pages",
    "filemap:mm_filemap_add_to_page_cache",
    "writeback:writeback_dirty_folio",
    "filemap:mm_filemap_map_pages",
]
#: perf's ring buffers, all CPUs together: a burst of faults while perf or
#: the converter waits for a CPU must not overflow them (on this 2-CPU host,
#: under load, 16 MiB per CPU lost 63,180 events of a kernel build's 1.9 M).
PERF_BUFFER_BUDGET = 512 << 20


def perf_mmap_size(cpus: int) -> str:
    """perf's -m: the budget over the CPUs, a power of two from 4 to 128 MiB."""
    per = max(4 << 20, min(128 << 20, PERF_BUFFER_BUDGET // max(cpus, 1)))
    return f"{1 << (per.bit_length() - 1) >> 20}M"

# Every process of the tree under valgrind; a forked child is silent until it
# execs; one log per instance (a connection of its own to --log-socket). `-v -v` names in each log the ELF image and
# ld.so valgrind's loader mapped, with their load addresses (the converter
# reads their segments from the files). Not `-d`: it keeps fd 2 for valgrind,
# and a program that closes its stderr and checks the result (xz, mawk)
# fails. The program's own file descriptors are left as they are.
VALGRIND_ARGS = ["--tool=lackey", "--trace-mem=yes", "--trace-syscalls=yes", "--trace-children=yes",
                 "--child-silent-after-fork=yes", "--vgdb=no", "-v", "-v"]

#: Lines of the program's stderr an error quotes when it fails.
STDERR_TAIL = 5


F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, from Python 3.10 on Linux; named here for mypy


class _Timeout(Exception):
    """The recorded command ran past --timeout; `tail` is its stderr's end."""

    def __init__(self, tail: collections.deque[bytes]) -> None:
        super().__init__("timeout")
        self.tail = tail


def _valgrind() -> str:
    v = shutil.which("valgrind")
    if not v:
        raise HostError("valgrind not found: install it (Debian: apt-get install valgrind)")
    return v


def perf_ready() -> str:
    """perf's path, or HostError naming the right or the package missing."""
    perf = shutil.which("perf")
    if not perf:
        raise HostError("perf not found: install it (Debian: apt-get install linux-perf), or record with --mode valgrind")
    probe = TRACEFS / "events" / "exceptions" / "page_fault_user" / "format"
    try:
        probe.read_text()
    except PermissionError:
        raise HostError(f"recording needs to read the kernel's tracepoints in {TRACEFS} (root's only): run it as root "
                        "(sudo foliosim record ...)") from None
    except OSError as e:
        if not os.path.isdir(TRACEFS / "events"):
            raise HostError(f"{TRACEFS} is not mounted: as root, mount it (mount -t tracefs nodev {TRACEFS}) "
                            "for perf to read the kernel's tracepoints") from None
        raise HostError(f"this kernel has no tracepoint exceptions:page_fault_user ({e.strerror}): it cannot be recorded with perf; "
                        "use --mode valgrind") from None
    if os.geteuid() != 0 and not _has_cap(38):
        paranoid = _read_int(Path("/proc/sys/kernel/perf_event_paranoid"))
        if paranoid is None or paranoid > -1:
            raise HostError(f"recording needs the right to trace kernel tracepoints: CAP_PERFMON (or root), or "
                            f"kernel.perf_event_paranoid = -1 (it is {paranoid}): run it as root, or "
                            "`sudo sysctl kernel.perf_event_paranoid=-1`")
    return perf


def _has_cap(bit: int) -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError):
        pass
    return False


def _read_int(p: Path) -> int | None:
    try:
        return int(p.read_text().strip())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def fault_around_one_page() -> Iterator[int | None]:
    """fault_around_bytes at 4096 (one page: every file page's first touch
    is a fault of its own) meanwhile, under the knob lock; restored on every
    way out. Yields the value the recording ran with (None: unknown).
    debugfs is mounted for it if it is not, and unmounted after."""
    mounted = False
    with knob_lock():
        if not FAULT_AROUND.exists() and os.geteuid() == 0 and DEBUGFS.is_dir():
            mounted = subprocess.run(["mount", "-t", "debugfs", "debugfs", str(DEBUGFS)], capture_output=True).returncode == 0
        old = _read_int(FAULT_AROUND)
        try:
            if old is not None and old != 4096:
                with contextlib.suppress(OSError):
                    FAULT_AROUND.write_text("4096")
            yield _read_int(FAULT_AROUND)
        finally:
            if old is not None and _read_int(FAULT_AROUND) != old:
                try:
                    FAULT_AROUND.write_text(str(old))
                except OSError as e:
                    print(f"foliosim: warning: could not restore {FAULT_AROUND} to {old}: {e}", file=sys.stderr)
            if mounted:
                subprocess.run(["umount", str(DEBUGFS)], capture_output=True)


def _descendants(root: int) -> list[int]:
    """Live descendants of `root`, from /proc (children before their own)."""
    kids: dict[int, list[int]] = collections.defaultdict(list)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if rest and rest[0] != "Z":
            kids[int(rest[1])].append(int(d.name))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process below it, also those that left its
    process group (setsid): the tree is first frozen with SIGSTOP, walked
    again until nothing new appears (a stopped process neither forks nor
    exits, so none is missed or reparented meanwhile), then killed."""
    frozen: list[int] = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGSTOP)
    for _ in range(100):
        new = [p for p in _descendants(pid) if p not in frozen]
        if not new:
            break
        for p in new:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGSTOP)
        frozen += new
    for p in [pid, *frozen]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _run_tree(argv: list[str], timeout: float | None, stdout_to_stderr: bool, pass_fds: tuple[int, ...] = (),
              stdout: int | None = None, on_started: Any = None, cwd: Path | None = None) -> tuple[int, collections.deque[bytes]]:
    """Run `argv` in a session of its own, its stderr passed through (its
    last lines kept). Returns (exit status, stderr tail). On a timeout,
    SIGTERM or Ctrl-C every process of its tree is killed before the
    exception goes on."""
    tail: collections.deque[bytes] = collections.deque(maxlen=STDERR_TAIL)
    out = stdout if stdout is not None else (sys.stderr.fileno() if stdout_to_stderr else None)
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=out, pass_fds=pass_fds, start_new_session=True, cwd=cwd)
    th = threading.Thread(target=_tee_stderr, args=(proc.stderr, tail), daemon=True)
    th.start()
    if on_started is not None:
        on_started(proc)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() > deadline:
                    raise _Timeout(tail) from None
    except BaseException:
        kill_tree(proc.pid)
        proc.wait()
        th.join(timeout=5)
        raise
    th.join()
    return rc, tail


def record(cmd: list[str], out: Path, mode: str = "perf", timeout: float | None = None, quiet: bool = False,
           stdout_to_stderr: bool = False, cwd: Path | None = None, program_stdout: int | None = None) -> dict[str, Any]:
    """Record `cmd`, run in `cwd` (default ours), into the trace `out`.
    Its stderr passes through (the last lines are kept for the error if it
    fails); `stdout_to_stderr` sends its stdout there too (for `--json`,
    whose stdout is the JSON); `program_stdout`, a file descriptor, takes
    it instead (perf mode)."""
    if not cmd:
        raise HostError("nothing to record: give a command after `--`")
    if mode not in MODES:
        raise HostError(f"--mode {mode}: expected one of {', '.join(MODES)}")
    if shutil.which(str(cwd / cmd[0]) if cwd is not None and "/" in cmd[0] else cmd[0]) is None:
        raise HostError(f"{cmd[0]}: command not found (exit status 127); no trace written")
    if timeout is not None and not timeout > 0:
        raise HostError(f"--timeout {timeout:g}: must be a positive number of seconds")
    tool = perf_ready() if mode == "perf" else _valgrind()
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(out)
    tmp_out = out.with_name(f".{out.name}.tmp.{os.getpid()}")
    try:
        stats = (_record_perf(tool, cmd, tmp_out, timeout, stdout_to_stderr, quiet, cwd, program_stdout) if mode == "perf"
                 else _record_valgrind(tool, cmd, tmp_out, timeout, stdout_to_stderr, cwd))
        # Check the whole file before it gets its final name.
        try:
            info = json.loads(_core().trace_info(str(tmp_out)))
        except ValueError as e:
            raise HostError(f"recording produced a bad trace: {e}") from e
        os.replace(tmp_out, out)
    except _Timeout as e:
        raise HostError(f"{' '.join(cmd)} ran past the limit of {timeout:g} s (--timeout) and was killed (SIGKILL, with every "
                        f"process of it); no trace written{_quote(e.tail)}") from None
    except KeyboardInterrupt:
        print("foliosim: recording stopped: every process of the recorded command was killed; no trace written", file=sys.stderr)
        raise
    finally:
        _rm(tmp_out)
    return {"trace": str(out), "bytes": out.stat().st_size, "mode": mode, **stats, "info": info}


def _core() -> Any:
    from . import _core as core
    return core


def _meta(cmd: list[str], mode: str, extra: dict[str, Any], cwd: Path | None = None) -> str:
    return json.dumps({"argv": cmd, "cwd": str(cwd.resolve()) if cwd else os.getcwd(), "mode": mode, "lacks": LACKS[mode], "kernel": platform.release(),
                       "machine": platform.machine(), "cpu": _cpu_model(), "page_size": os.sysconf("SC_PAGE_SIZE"), **extra})


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def _record_perf(perf: str, cmd: list[str], tmp_out: Path, timeout: float | None, stdout_to_stderr: bool,
                 quiet: bool = False, cwd: Path | None = None, program_stdout: int | None = None) -> dict[str, Any]:
    from ._host import build_validation
    wrap = build_validation() / "recordwrap"
    version = subprocess.run([perf, "--version"], capture_output=True, text=True).stdout.strip()
    events = [a for e in PERF_EVENTS for a in ("-e", e)]
    with tempfile.TemporaryDirectory(prefix="foliosim-record-") as td, fault_around_one_page() as fab:
        status = Path(td) / "status.json"
        # --no-bpf-event: perf otherwise writes a record for every BPF
        # program loaded in the kernel before it starts the command (0.9 s
        # of a recording's start here), which the converter has no use for.
        argv_perf = [perf, "record", "-q", "--no-buildid", "--no-buildid-cache", "--no-bpf-event", *events, "--switch-events",
                     "--data", "-m", perf_mmap_size(os.cpu_count() or 1), "-o", "-", "--"]
        around = "off (fault_around_bytes = 4096)" if fab == 4096 else \
            "on: the pages it mapped were recovered from the tracepoint filemap:mm_filemap_map_pages"
        if fab != 4096 and not quiet:
            why = "debugfs is locked down" if os.geteuid() == 0 else "not root"
            print(f"foliosim: note: fault-around could not be turned off ({FAULT_AROUND}: {why}); the file pages it maps "
                  "are recovered from filemap:mm_filemap_map_pages", file=sys.stderr)
        meta = _meta(cmd, "perf", {
            "recorder": " ".join(argv_perf[1:]), "perf": version, "fault_around": around,
            "thp": "disabled for the recorded tree (prctl PR_SET_THP_DISABLE)",
        }, cwd)
        # The program's stdout: ours (perf's own stdout is the trace stream).
        outfd = os.dup(program_stdout if program_stdout is not None else
                       sys.stderr.fileno() if stdout_to_stderr else sys.stdout.fileno())
        rfd, wfd = os.pipe()
        with contextlib.suppress(OSError):  # the largest pipe allowed: slack for perf while we wait for a CPU
            fcntl.fcntl(wfd, F_SETPIPE_SZ, _read_int(Path("/proc/sys/fs/pipe-max-size")) or 1 << 20)
        result: dict[str, Any] = {}

        def convert() -> None:
            # A little ahead of the recorded program for the CPU (root may):
            # perf blocks on a full pipe and its buffers overflow meanwhile.
            with contextlib.suppress(OSError, AttributeError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -5)
            try:
                result["stats"] = json.loads(_core().trace_from_perf(f"/proc/self/fd/{rfd}", str(tmp_out), meta, str(status),
                                                                     str(TRACEFS)))
            except BaseException as e:  # handed to the main thread
                result["error"] = e
            finally:
                os.close(rfd)

        th = threading.Thread(target=convert, daemon=True)
        th.start()
        try:
            rc, tail = _run_tree([*argv_perf, str(wrap), str(status), str(outfd), *cmd], timeout, stdout_to_stderr,
                                 pass_fds=(outfd,), stdout=wfd, cwd=cwd)
        finally:
            os.close(outfd)
            os.close(wfd)
            th.join()
        st = _read_status(status)
        if st is None:
            raise HostError(f"perf {_status(rc)} before the program ran; no trace written{_quote(tail)}")
        code, sig = st.get("exit", -1), st.get("signal", 0)
        if sig or code != 0:
            what = _status(-sig if sig else code)
            raise HostError(f"{' '.join(cmd)} {what} while recording; no trace written{_quote(tail)}")
        if rc != 0:
            raise HostError(f"perf {_status(rc)} while recording; no trace written{_quote(tail)}")
        stats = _converted(result)
        if stats.get("lost_events"):
            print(f"foliosim: warning: perf lost {stats['lost_events']:,} of {stats['perf_records']:,} events (its buffers "
                  "overflowed while it or the converter waited for a CPU): the trace misses them; record on a quieter host",
                  file=sys.stderr)
        return {"rusage": st.get("rusage", {}), "wall_s": st.get("wall_ns", 0) / 1e9, **stats}


def _read_status(p: Path) -> dict[str, Any] | None:
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def _record_valgrind(vg: str, cmd: list[str], tmp_out: Path, timeout: float | None, stdout_to_stderr: bool,
                     cwd: Path | None = None) -> dict[str, Any]:
    vgver = subprocess.run([vg, "--version"], capture_output=True, text=True).stdout.strip()
    meta = _meta(cmd, "valgrind", {"recorder": "valgrind " + " ".join(VALGRIND_ARGS), "valgrind": vgver}, cwd)
    # Each process image's log comes on a connection of its own to the
    # core's listener, which converts it as it arrives (about 15 bytes a
    # memory access that never reach the disk).
    listener = _core().ValgrindListener()
    result: dict[str, Any] = {}

    def convert(root: int) -> None:
        try:
            result["stats"] = json.loads(listener.convert(str(tmp_out), meta, root))
        except BaseException as e:  # handed to the main thread
            result["error"] = e

    th = threading.Thread(target=lambda: None)

    def started(p: subprocess.Popen[bytes]) -> None:
        nonlocal th
        th = threading.Thread(target=convert, args=(p.pid,), daemon=True)
        th.start()

    try:
        rc, tail = _run_tree([vg, *VALGRIND_ARGS, f"--log-socket=127.0.0.1:{listener.port}", *cmd], timeout, stdout_to_stderr,
                             on_started=started, cwd=cwd)
    finally:
        listener.stop()
        if th.is_alive():
            th.join()
    if rc != 0:
        raise HostError(f"{' '.join(cmd)} {_status(rc)} while recording; no trace written{_quote(tail)}")
    return _converted(result)


def _converted(result: dict[str, Any]) -> dict[str, Any]:
    """The converter thread's statistics, or its error as one line."""
    if "error" in result:
        e = result["error"]
        raise HostError(f"recording failed: {' '.join(str(e).split())}") from e
    stats: dict[str, Any] = result["stats"]
    return stats


def _remove_stale(out: Path) -> None:
    """Temporary traces of recordings that were killed (SIGKILL) before they
    could remove them: `.NAME.tmp.PID` whose PID is gone."""
    for p in out.parent.glob(f".{out.name}.tmp.*"):
        pid = p.name.rsplit(".", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _rm(p)


def _tee_stderr(pipe: Any, tail: collections.deque[bytes]) -> None:
    """The program's stderr through to ours, its last lines kept in `tail`."""
    for line in pipe:
        tail.append(line)
        with contextlib.suppress(OSError):
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()


def _status(rc: int) -> str:
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    if rc > 128 and rc - 128 in {s.value for s in signal.Signals}:
        return f"exited with status {rc} (killed by {signal.Signals(rc - 128).name}?)"
    return f"exited with status {rc}"


def _quote(tail: collections.deque[bytes]) -> str:
    lines = [ln.decode("utf-8", "replace").strip() for ln in tail]
    lines = [ln for ln in lines if ln]
    if not lines:
        return " (it wrote nothing on stderr)"
    return f"; its stderr ended with: {' | '.join(lines[-STDERR_TAIL:])}"


def _rm(p: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        p.unlink()


def run_native(cmd: list[str], runs: int = 3) -> dict[str, Any]:
    """Minor faults and peak RSS of the program run natively, median of `runs`
    (validation/bin/runstat: fork, reset the peak RSS, exec, wait4)."""
    from ._host import build_validation
    runstat = build_validation() / "runstat"
    flts, rss = [], []
    for _ in range(runs):
        r = subprocess.run([str(runstat), *cmd], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if r.returncode != 0:
            raise HostError(f"{' '.join(cmd)} exited with status {r.returncode}")
        d = json.loads(r.stdout)
        flts.append(d["minflt"])
        rss.append(d["peak_rss_kib"])
    return {"minflt": statistics.median(flts), "peak_rss_kib": statistics.median(rss), "runs": runs}


def replay(trace: str, profile: str, knobs: dict[str, str] | None = None) -> dict[str, Any]:
    from . import run as _run
    cfg = {"seed": 1, "machine": {"profile": profile}, "workload": {"name": "trace", "path": str(Path(trace).resolve())},
           "run": {"warmup_s": 0.0, "duration_s": 600.0}, "knobs": knobs or {}}
    r = _run(cfg).raw
    return {"pgfault": r["vmstat"].get("pgfault", 0), "peak_rss_kib": r.get("memory", {}).get("peak_rss_kib", 0),
            "ops": r["summary"]["ops_total"], "sim_s": r.get("sim_time_s"), "host_s": r.get("host_time_s")}


def compare(cmd: list[str], trace: str, profile: str) -> list[dict[str, Any]]:
    """Rows for 4 KiB (predicted) and 64 KiB mTHP (real; predicted only if modelled)."""
    from . import catalog
    from ._host import knobs_available, knobs_for, thp_settings
    from .validate import model_can_express, sim_knobs
    rows = []
    settings: list[tuple[str, list[int]]] = [("4K", [])]
    if knobs_available() is None:
        settings.append(("64K", [64]))
    for label, sizes in settings:
        with thp_settings(knobs_for(sizes)) if knobs_available() is None else contextlib.nullcontext():
            real = run_native(cmd)
        knobs = sim_knobs(sizes)
        why = model_can_express(knobs, catalog())
        pred = None if why else replay(trace, profile, knobs)
        row: dict[str, Any] = {"program": " ".join(cmd), "setting": label, "real": real, "predicted": pred, "note": why or ""}
        if pred:
            row["rel_error"] = {"minflt": abs(pred["pgfault"] - real["minflt"]) / max(real["minflt"], 1),
                                "rss": abs(pred["peak_rss_kib"] - real["peak_rss_kib"]) / max(real["peak_rss_kib"], 1)}
        rows.append(row)
    return rows


def describe(st: dict[str, Any]) -> str:
    """One line for a person: what was recorded, and what the trace lacks."""
    info = st["info"]
    mode = st.get("mode", "perf")
    what = "faults" if mode == "perf" else "accesses"
    return (f"foliosim record: {st['trace']}: {info['accesses']:,} {what} in {info['access_records']:,} records, "
            f"{info['syscalls']:,} system calls, {info.get('processes', 1)} processes, {info.get('threads', 0)} threads, "
            f"{info['files']} files, {st['bytes']:,} bytes; recorded with {mode}: {LACKS[mode]}")


def cmd_record(args: argparse.Namespace) -> int:
    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    out = Path(args.out) if args.out else Path(f"{Path(cmd[0]).name if cmd else 'trace'}.fstrace")
    st = record(cmd, out, mode=args.mode, timeout=args.timeout, quiet=args.quiet, stdout_to_stderr=args.json)
    # With --json, stdout is the one JSON document: every line for a person goes to stderr.
    human = sys.stderr if args.json else sys.stdout
    print(describe(st), file=sys.stderr)
    if args.validate:
        from .validate import ensure_profile
        profile = ensure_profile(args.profile)
        rows = compare(cmd, str(out), profile)
        for r in rows:
            p = r["predicted"]
            if p:
                e = r["rel_error"]
                print(f"{r['setting']:<4} minor faults real {r['real']['minflt']:.0f} predicted {p['pgfault']} ({100 * e['minflt']:.1f}%), "
                      f"peak RSS KiB real {r['real']['peak_rss_kib']:.0f} predicted {p['peak_rss_kib']} ({100 * e['rss']:.1f}%)", file=human)
            else:
                print(f"{r['setting']:<4} minor faults real {r['real']['minflt']:.0f} predicted —, peak RSS KiB real {r['real']['peak_rss_kib']:.0f} predicted —  ({r['note']})",
                      file=human)
        if args.json:
            sys.stdout.write(json.dumps({"record": st, "rows": rows}) + "\n")
    elif args.json:
        sys.stdout.write(json.dumps(st) + "\n")
    return 0
