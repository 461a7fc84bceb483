"""`foliosim record -- CMD ARGS`: record a program's memory behaviour into a
trace (docs/trace-format.md) that the `trace` workload replays.

valgrind (Debian package `valgrind`) runs the program and every child that
execs under lackey with `--trace-mem=yes --trace-syscalls=yes`, one log per
process image; the converter in foliosim's core (trace_procs) puts them into
one trace, written to a temporary file renamed into place only when the
program exited 0 and the trace is complete. `--validate` then runs the
program natively and compares its minor faults (the whole process tree:
wait4's rusage counts reaped descendants) and peak RSS (the largest of any
one process, as ru_maxrss gives it) with the replay's."""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ._host import HostError


def _valgrind() -> str:
    v = shutil.which("valgrind")
    if not v:
        raise HostError("valgrind not found: install it (Debian: apt-get install valgrind)")
    return v


# Every process of the tree under valgrind; a forked child is silent until it
# execs; one log per instance. `-v -v` names in each log the ELF image and
# ld.so valgrind's loader mapped, with their load addresses (the converter
# reads their segments from the files). Not `-d`: it keeps fd 2 for valgrind,
# and a program that closes its stderr and checks the result (xz, mawk)
# fails. The program's own file descriptors are left as they are.
VALGRIND_ARGS = ["--tool=lackey", "--trace-mem=yes", "--trace-syscalls=yes", "--trace-children=yes",
                 "--child-silent-after-fork=yes", "--vgdb=no", "-v", "-v"]

#: Lines of the program's stderr an error quotes when it fails.
STDERR_TAIL = 5


def record(cmd: list[str], out: Path, quiet: bool = False, stdout_to_stderr: bool = False) -> dict[str, Any]:
    """Record `cmd` into the trace `out`. Its stderr passes through (the
    last lines are kept for the error if it fails); `stdout_to_stderr`
    sends its stdout there too (for `--json`, whose stdout is the JSON)."""
    from . import _core
    if not cmd:
        raise HostError("nothing to record: give a command after `--`")
    if shutil.which(cmd[0]) is None:
        raise HostError(f"{cmd[0]}: command not found")
    vg = _valgrind()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(f".{out.name}.tmp.{os.getpid()}")
    vgver = subprocess.run([vg, "--version"], capture_output=True, text=True).stdout.strip()
    meta = json.dumps({"argv": cmd, "cwd": os.getcwd(), "recorder": "valgrind " + " ".join(VALGRIND_ARGS),
                       "valgrind": vgver, "page_size": os.sysconf("SC_PAGE_SIZE")})
    # The logs can be large (about 15 bytes per memory access): they go to a
    # temporary directory removed on every way out.
    with tempfile.TemporaryDirectory(prefix="foliosim-record-") as td:
        tail: collections.deque[bytes] = collections.deque(maxlen=STDERR_TAIL)
        proc = subprocess.Popen([vg, *VALGRIND_ARGS, f"--log-file={td}/log.%p.%n", *cmd], stderr=subprocess.PIPE,
                                stdout=sys.stderr.fileno() if stdout_to_stderr else None)
        th = threading.Thread(target=_tee_stderr, args=(proc.stderr, tail), daemon=True)
        th.start()
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            proc.kill()
            proc.wait()
            th.join()
            _rm(tmp_out)
            raise
        th.join()
        if rc != 0:
            raise HostError(f"{' '.join(cmd)} {_status(rc)} while recording; no trace written{_quote(tail)}")
        try:
            stats = json.loads(_core.trace_from_valgrind_logs(td, str(tmp_out), meta, proc.pid))
        except BaseException as e:
            _rm(tmp_out)
            raise HostError(f"recording failed: {' '.join(str(e).split())}") from e
    # Check the whole file before it gets its final name.
    try:
        info = json.loads(_core.trace_info(str(tmp_out)))
    except ValueError as e:
        _rm(tmp_out)
        raise HostError(f"recording produced a bad trace: {e}") from e
    os.replace(tmp_out, out)
    return {"trace": str(out), "bytes": out.stat().st_size, **stats, "info": info}


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
        with thp_settings(knobs_for(sizes)) if knobs_available() is None else _null():
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


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


def cmd_record(args: argparse.Namespace) -> int:
    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    out = Path(args.out) if args.out else Path(f"{Path(cmd[0]).name if cmd else 'trace'}.fstrace")
    st = record(cmd, out, quiet=args.quiet, stdout_to_stderr=args.json)
    # With --json, stdout is the one JSON document: every line for a person goes to stderr.
    human = sys.stderr if args.json else sys.stdout
    info = st["info"]
    print(f"foliosim record: {st['trace']}: {info['accesses']:,} accesses in {st['access_records']:,} page runs, "
          f"{info['syscalls']} memory syscalls, {info.get('processes', 1)} processes, {info['files']} files, {info['regions']} implicit regions, {st['bytes']:,} bytes",
          file=sys.stderr)
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
