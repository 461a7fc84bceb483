"""`foliosim bench --record`: what recording with perf costs (issue #29).

For each program, medians of interleaved repeats (native, recorded,
native, recorded, ...) of its wall time run natively and under `foliosim
record` (the whole command, from its start to the trace renamed into
place), their ratio (target: at most 1.5x), the trace's size, and how fast
the trace replays (simulated faults per host second). The programs:

- a Linux kernel build: Debian's linux-source-6.12 (apt-get install
  linux-source-6.12; GPL-2.0), unpacked into the cache folder, `make
  tinyconfig`, then `make -jN vmlinux` with N the host's CPUs, after `make
  clean` (not timed): the build the kernel-build experiments replay
  (foliosim.programs). Not defconfig: its vmlinux takes tens of minutes a
  run on two CPUs, and six runs a program would keep the host busy for
  hours without measuring anything the tinyconfig build (some 10 k tasks:
  make, sh, gcc, cc1, as, ld) does not;
- `xz -9 -T1` of a 64 MiB file (`--scale small`: 2 MiB) of seeded
  pseudo-random words (about 3:1 compressible);
- a python3 program: a dict of 2 M entries (small: 100 k) built, sorted
  and written as JSON;
- an sqlite3 workload: 4 M rows (small: 20 k) inserted in one transaction
  into a file database, indexed and aggregated.

`--scale small` checks the tooling in a minute or two: its kernel build is
`make -jN lib/` of the tinyconfig tree after `make prepare` (untimed). The
numbers that count come from `--scale full` (`make bench-record`) on a quiet
host. Results: OUT/record-bench.json and OUT/record-bench.md; `python -m
foliosim.record_bench doc OUT/record-bench.json FILE...` fills the tables
between `<!-- record-bench -->` markers of the docs from them."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from ._host import HostError, bench_cache, fill_marked, tool_main, write_report

KERNEL_TAR = Path("/usr/src/linux-source-6.12.tar.xz")
TARGET_RATIO = 1.5
MARK = "<!-- record-bench -->"
END_MARK = "<!-- /record-bench -->"


def _python3() -> str:
    # The system's interpreter: a pyenv shim is a shell script whose
    # recording would be the shim's.
    return "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def _words(path: Path, mib: int, seed: int = 29) -> None:
    rnd = random.Random(seed)
    vocab = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 10))) for _ in range(4096)]
    out = bytearray()
    while len(out) < mib << 20:
        out += (" ".join(rnd.choice(vocab) for _ in range(4096)) + "\n").encode()
    path.write_bytes(bytes(out[: mib << 20]))


PY_PROGRAM = """
import json, sys
n = int(sys.argv[1])
d = {f"key{i * 7919 % n}": [i, str(i), i * 0.5] for i in range(n)}
s = sorted(d.items(), key=lambda kv: kv[1][0] % 1000)
with open(sys.argv[2], "w") as f:
    json.dump(dict(s[: n // 4]), f)
"""


def _sqlite_script(rows: int) -> str:
    return (
        "PRAGMA journal_mode=WAL;\n"
        "CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);\n"
        "BEGIN;\n"
        f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows}) "
        "INSERT INTO t(k, v) SELECT (x * 7919) % 1000, printf('%08d-%s', x, hex(randomblob(16))) FROM c;\n"
        "COMMIT;\n"
        "CREATE INDEX tk ON t(k);\n"
        "SELECT k, count(*), max(v) FROM t GROUP BY k ORDER BY k LIMIT 5;\n"
        "SELECT count(*) FROM t WHERE v LIKE '%AB%';\n"
    )


class Program:
    """A program to time: `setup` once, `before` (untimed) before every run."""

    def __init__(self, name: str, cmd: list[str], cwd: Path, before: list[list[str]] | None = None,
                 what: str = "") -> None:
        self.name, self.cmd, self.cwd, self.before, self.what = name, cmd, cwd, before or [], what


def _kernel(cache: Path, scale: str, jobs: int) -> Program:
    if not KERNEL_TAR.exists():
        raise HostError(f"{KERNEL_TAR} is missing: apt-get install linux-source-6.12 (the kernel build's source)")
    src = cache / "linux-source-6.12"
    config = "tinyconfig"
    stamp = cache / f".configured-{config}"
    if not stamp.exists():
        print(f"bench --record: unpacking {KERNEL_TAR} into {cache} and `make {config}` ...", file=sys.stderr, flush=True)
        shutil.rmtree(src, ignore_errors=True)
        with tarfile.open(KERNEL_TAR) as t:
            t.extractall(cache, filter="data")
        _check([["make", "-s", config]], src)
        if scale != "full":
            _check([["make", "-s", f"-j{jobs}", "prepare"]], src)
        for s in cache.glob(".configured-*"):
            s.unlink()
        stamp.write_text("")
    if scale == "full":
        return Program("kernel build", ["make", "-s", f"-j{jobs}", "vmlinux"], src, [["make", "-s", "clean"]],
                       f"Linux 6.12 (Debian linux-source-6.12), tinyconfig, make -j{jobs} vmlinux (after make clean)")
    clean = ["find", "lib", "-name", "*.o", "-delete"]
    return Program("kernel build", ["make", "-s", f"-j{jobs}", "lib/"], src, [clean],
                   f"Linux 6.12 (Debian linux-source-6.12), tinyconfig, make -j{jobs} lib/ (after make prepare)")


def programs(cache: Path, scale: str, only: list[str] | None = None) -> list[Program]:
    cache.mkdir(parents=True, exist_ok=True)
    jobs = os.cpu_count() or 1
    small = scale != "full"
    out: list[Program] = []
    want = set(only or ["kernel", "xz", "python3", "sqlite3"])
    if "kernel" in want:
        out.append(_kernel(cache, scale, jobs))
    if "xz" in want:
        mib = 2 if small else 64
        data = cache / f"words-{mib}m.txt"
        if not data.exists():
            _words(data, mib)
        out.append(Program("xz -9", ["xz", "-9", "-T1", "-c", "-k", str(data)], cache, what=f"xz -9 -T1 of {mib} MiB of words"))
    if "python3" in want:
        n = 100_000 if small else 2_000_000
        prog = cache / "bench.py"
        prog.write_text(PY_PROGRAM)
        out.append(Program("python3", [_python3(), str(prog), str(n), str(cache / "py-out.json")], cache,
                           what=f"python3: a dict of {n:,} entries built, sorted, written as JSON"))
    if "sqlite3" in want:
        rows = 20_000 if small else 4_000_000
        script = cache / "bench.sql"
        script.write_text(_sqlite_script(rows))
        db = cache / "bench.db"
        out.append(Program("sqlite3", ["sqlite3", "-init", str(script), str(db), ".quit"], cache,
                           [["rm", "-f", str(db), f"{db}-wal", f"{db}-shm"]],
                           what=f"sqlite3: {rows:,} rows inserted in a transaction, indexed, aggregated (file database)"))
    return out


def _check(cmds: list[list[str]], cwd: Path) -> None:
    for c in cmds:
        r = subprocess.run(c, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["?"])[-1]
            raise HostError(f"{' '.join(c)} (in {cwd}) exited with status {r.returncode}: {tail}")


def _timed(cmd: list[str], cwd: Path) -> float:
    # In a session of its own, as `foliosim record` runs its command: with
    # the scheduler's autogroups (kernel.sched_autogroup_enabled) a session
    # is a group with its own share of the CPUs, and on a loaded host a
    # native run in ours would get less than a recorded one.
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       start_new_session=True)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        tail = (r.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        raise HostError(f"{' '.join(cmd)} (in {cwd}) exited with status {r.returncode}: {tail}")
    return dt


def _replay_speed(trace: Path, profile: str) -> dict[str, Any]:
    from . import run as _run
    cfg = {"seed": 1, "machine": {"profile": profile}, "workload": {"name": "trace", "path": str(trace)},
           "run": {"warmup_s": 0.0, "duration_s": 3600.0, "sample_ms": 1000.0}}
    r = _run(cfg).raw
    faults = r["vmstat"].get("pgfault", 0)
    host = r.get("host_time_s") or 0.0
    return {"pgfault": faults, "host_s": host, "faults_per_host_s": faults / host if host > 0 else None,
            "sim_s": (r["summary"].get("workload_finished_s")), "profile": profile}


def measure(progs: list[Program], repeats: int, out: Path, profile: str, quiet: bool = False) -> dict[str, Any]:
    from . import _core
    foliosim = [sys.executable, "-m", "foliosim"]
    rows = []
    for p in progs:
        native, recorded, inside = [], [], []
        trace = out / f"{p.name.split()[0]}.fstrace"
        info: dict[str, Any] = {}
        for i in range(repeats):
            # Interleaved, the order alternating: a trend of the host's load
            # falls on both alike.
            order = ("native", "recorded") if i % 2 == 0 else ("recorded", "native")
            for kind in order:
                _check(p.before, p.cwd)
                if kind == "native":
                    native.append(_timed(p.cmd, p.cwd))
                else:
                    recorded.append(_timed([*foliosim, "record", "--quiet", "-o", str(trace), "--", *p.cmd], p.cwd))
                    info = json.loads(_core.trace_info(str(trace)))
                    inside.append(info.get("summary", {}).get("wall_ns", 0) / 1e9)
                if not quiet:
                    last = native[-1] if kind == "native" else recorded[-1]
                    print(f"bench --record: {p.name} {kind} run {i + 1}/{repeats}: {last:.2f} s", file=sys.stderr, flush=True)
        n, r = statistics.median(native), statistics.median(recorded)
        replay = _replay_speed(trace, profile)
        rows.append({
            "program": p.name, "what": p.what, "cmd": p.cmd, "repeats": repeats,
            "native_s": n, "native_runs_s": native, "recorded_s": r, "recorded_runs_s": recorded,
            "recorded_inside_s": statistics.median(inside) if inside else None,
            "ratio": r / n if n > 0 else None, "ratio_runs": [b / a for a, b in zip(native, recorded, strict=True) if a > 0],
            "trace_bytes": trace.stat().st_size, "faults": info.get("accesses"), "records": info.get("records"),
            "processes": info.get("processes"), "threads": info.get("threads"),
            "lost_events": (info.get("summary") or {}).get("converter", {}).get("lost_events"),
            "replay": replay, "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "loadavg_1m_at_end": os.getloadavg()[0],
        })
    return {"rows": rows, "target_ratio": TARGET_RATIO, "host": _host_facts(), "date": time.strftime("%Y-%m-%d")}


def _host_facts() -> dict[str, Any]:
    import platform

    from .record import _cpu_model
    load = os.getloadavg()
    return {"kernel": platform.release(), "cpu": _cpu_model(), "cpus": os.cpu_count(), "loadavg_1m_at_end": load[0]}


def render(rep: dict[str, Any]) -> str:
    """The Markdown table of a report."""
    h = rep["host"]
    lines = [
        f"Measured {rep['date']} at scale `{rep.get('scale', '?')}` on {h['cpu']} ({h['cpus']} CPUs, Linux {h['kernel']}; "
        f"load average {h['loadavg_1m_at_end']:.1f} "
        f"at the end), median of {rep['rows'][0]['repeats'] if rep['rows'] else 0} interleaved runs each; "
        f"target: recording at most {rep['target_ratio']:g}x the native wall time.",
        "",
        "| program | native (s) | recorded (s) | ratio [min-max] | under perf (s) | trace | faults | replay (faults / host s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rep["rows"]:
        runs = r["ratio_runs"] or [0.0]
        speed = r["replay"].get("faults_per_host_s")
        inside = r.get("recorded_inside_s")
        lines.append(
            f"| {r['what'] or r['program']} | {r['native_s']:.2f} | {r['recorded_s']:.2f} | "
            f"{r['ratio']:.2f}x [{min(runs):.2f}-{max(runs):.2f}] | {f'{inside:.2f}' if inside else '—'} | "
            f"{r['trace_bytes'] / 1e6:.2f} MB | {(r['faults'] or 0):,} | {f'{speed:,.0f}' if speed else '—'} |")
    profile = rep["rows"][0]["replay"]["profile"] if rep["rows"] else "?"
    if rep.get("merged"):
        lines += ["", "Rows measured in separate runs (`--only`): " + "; ".join(
            f"{r['program']} {r.get('measured', rep['date'])}, load {r.get('loadavg_1m_at_end', h['loadavg_1m_at_end']):.1f}"
            for r in rep["rows"]) + "."]
    lines += ["", "`recorded` is the whole `foliosim record -- CMD`: Python's start, perf's, the command under perf "
              "(`under perf`: from its fork to its exit, as the recorder's wrapper timed it), the end of the conversion and the "
              f"check of the trace. The replay ran on the profile `{profile}`."]
    return "\n".join(lines)


def fill_docs(report: Path, files: list[Path]) -> None:
    """Replace what lies between the record-bench markers of each file."""
    table = render(json.loads(report.read_text()))
    for f in files:
        fill_marked(f, MARK, END_MARK, table)


def cmd_record_bench(args: argparse.Namespace) -> int:
    from .record import perf_ready
    from .validate import ensure_profile
    perf_ready()
    out = Path(args.out or "results/bench-record")
    out.mkdir(parents=True, exist_ok=True)
    cache = bench_cache(args.cache)
    profile = ensure_profile(None, measure=False) if Path("results/calibrate/host.toml").is_file() else "generic-x86"
    progs = programs(cache, args.scale, args.only.split(",") if args.only else None)
    rep = measure(progs, args.repeats, out.resolve(), profile, quiet=args.quiet)
    rep["scale"] = args.scale
    if args.only:
        rep = _merged(out / "record-bench.json", rep)
    write_report(out, "record-bench", rep, render(rep))
    print(render(rep))
    print(f"\nwrote {out / 'record-bench.json'} and {out / 'record-bench.md'}", file=sys.stderr)
    return 0


def _merged(earlier: Path, rep: dict[str, Any]) -> dict[str, Any]:
    """`--only` measures some programs again: the other rows of an earlier
    report of the same scale on the same host are kept, in its order, each
    with the time it was measured."""
    try:
        old = json.loads(earlier.read_text())
    except (OSError, ValueError):
        return rep
    if old.get("scale") != rep["scale"] or old.get("host", {}).get("cpu") != rep["host"]["cpu"]:
        return rep
    new = {r["program"]: r for r in rep["rows"]}
    rows = [new.pop(r["program"], r) for r in old.get("rows", [])] + list(new.values())
    for r in rows:
        r.setdefault("measured", old.get("date", "?"))
        r.setdefault("loadavg_1m_at_end", old.get("host", {}).get("loadavg_1m_at_end", 0.0))
    return {**rep, "rows": rows, "merged": True}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m foliosim.record_bench")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("doc", help="fill the record-bench tables of docs from a report")
    d.add_argument("report")
    d.add_argument("files", nargs="+")
    a = p.parse_args(argv)
    return tool_main(lambda: fill_docs(Path(a.report), [Path(f) for f in a.files]))


if __name__ == "__main__":
    raise SystemExit(main())
