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
import contextlib
import json
import os
import shutil
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
# execs; `-d` prints each instance's startup memory layout (the ELF image and
# ld.so valgrind's loader mapped) on stderr; one log per instance.
VALGRIND_ARGS = ["--tool=lackey", "--trace-mem=yes", "--trace-syscalls=yes", "--trace-children=yes",
                 "--child-silent-after-fork=yes", "--vgdb=no", "-d"]


def record(cmd: list[str], out: Path, quiet: bool = False) -> dict[str, Any]:
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
        debug = os.path.join(td, "debug.log")
        proc = subprocess.Popen([vg, *VALGRIND_ARGS, f"--log-file={td}/log.%p.%n", *cmd], stderr=subprocess.PIPE)
        th = threading.Thread(target=_split_stderr, args=(proc.stderr, debug), daemon=True)
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
            raise HostError(f"{' '.join(cmd)} exited with status {rc} while recording; no trace written")
        try:
            stats = json.loads(_core.trace_from_valgrind_logs(td, debug, str(tmp_out), meta, proc.pid))
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


def _split_stderr(pipe: Any, debug: str) -> None:
    """valgrind's `-d` lines (`--PID:LEVEL: ...`) to the debug log, the
    program's own stderr through."""
    with open(debug, "wb") as d:
        for line in pipe:
            if line.startswith(b"--") and line[2:3].isdigit():
                d.write(line)
            else:
                sys.stderr.buffer.write(line)
                sys.stderr.buffer.flush()


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
    st = record(cmd, out, quiet=args.quiet)
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
                      f"peak RSS KiB real {r['real']['peak_rss_kib']:.0f} predicted {p['peak_rss_kib']} ({100 * e['rss']:.1f}%)")
            else:
                print(f"{r['setting']:<4} minor faults real {r['real']['minflt']:.0f} predicted —, peak RSS KiB real {r['real']['peak_rss_kib']:.0f} predicted —  ({r['note']})")
        if args.json:
            sys.stdout.write(json.dumps({"record": st, "rows": rows}) + "\n")
    elif args.json:
        sys.stdout.write(json.dumps(st) + "\n")
    return 0
