"""`foliosim validate --programs`: the replay's times checked on real
programs (issue #29 point 3).

Each program is recorded once with `foliosim record` (perf), then, in
interleaved repeats (every repeat runs every program under every setting),
run natively under each THP setting (4 KiB pages only, 64 KiB mTHP, 2 MiB
THP; the sysfs knobs set and restored by `_host.thp_settings`, which holds
the knob lock) and replayed on the calibrated profile under the same
setting. Compared, from the real run: the tree's faults (wait4's rusage,
minor + major, which counts every reaped descendant), its peak RSS (the
largest ru_maxrss of any one process: the replay's largest mm), its system
time (rusage children's ru_stime), and the change of that system time from
4 KiB to each large-folio setting; /proc/vmstat deltas over each real run
(pgfault, thp_fault_alloc, the mTHP sizes' anon_fault_alloc) are kept
beside them. Real figures are medians of REPEATS interleaved repeats with
their interquartile range, and a figure whose range is wider than its
target gets no verdict (docs/validation.md: why rusage's sys time, and not
a sampled one). Targets: faults and peak RSS within 5%, system time within
15%, its change within 15% of the real change or 3 points.
validation/bin/tpcost measures what recording costs a system call beside
them (`tracepoint_cost`), validation/bin/fprcost what the host's free page
reporting costs a first touch (`reporting_cost`), and
validation/bin/coldentry what a kernel entry costs after a program's own
work (`entry_cost`).

None of the programs is one `foliosim calibrate` measures (its fit comes
from page_fault1 at 16K and 2M). The programs (`--scale small` shrinks
their inputs to check the tooling in a minute):

- make: `make -jN` (N: the host's CPUs) of a C project generated here (48
  files of table-driven functions; small: 6), after `make clean` (untimed);
- xz -3 -T1 of 4 MiB of seeded words (small: 2 MiB; its 4 MiB dictionary
  and match finder are some 30 MiB of heap);
- python3: a dict built, sorted and written as JSON (record_bench's
  program; 2 M entries, small: 50 k);
- sqlite3: rows inserted in a transaction into a file database, indexed
  and aggregated (record_bench's script; 600 k rows, small: 10 k);
- sort: `LC_ALL=C sort` of 64 MiB of short lines (small: 2 MiB);
- awk: the distinct lines of sort's input counted in an associative array
  (mawk here).

The full sizes give most rows a few hundred milliseconds of sys time (some
hundred scheduler ticks: rusage's resolution) and the whole run some five
minutes on a quiet 2-CPU host.

Results: OUT/programs.json and OUT/programs.md; `python -m
foliosim.validate_programs doc OUT/programs.json docs/validation.md` fills
the table between the `<!-- validate-programs -->` markers
(`make validate-programs` does both)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._host import HostError, bench_cache, fill_marked, tool_main, write_report
from .record_bench import Program

#: The settings compared: label, anonymous folio sizes in KiB.
SETTINGS: list[tuple[str, list[int]]] = [("4K", []), ("64K", [64]), ("2M", [2048])]
NAMES = ("make", "xz", "python3", "sqlite3", "sort", "awk")
#: Relative error allowed per metric; the change of sys time also passes
#: within CHANGE_POINTS percentage points.
TARGETS = {"faults": 0.05, "rss": 0.05, "sys": 0.15, "sys_change": 0.15}
CHANGE_POINTS = 3.0
#: Interleaved repeats by default: enough for a median and its quartiles.
REPEATS = 5
MARK = "<!-- validate-programs -->"
END_MARK = "<!-- /validate-programs -->"
#: The recording's figures kept with each program (trace_perf's PerfStats).
CONVERTER_KEYS = ("syscalls", "syscall_ns", "sys_ns", "user_ns", "tracepoint_ns", "probe_calls", "tracepoint_removed_ns")
#: /proc/vmstat counters kept for each real run (deltas).
VMSTAT_KEYS = ("pgfault", "pgmajfault", "thp_fault_alloc", "thp_fault_fallback")


# --------------------------------------------------------------- programs --
def _c_project(d: Path, files: int) -> None:
    """A C project of `files` sources, each a table and functions over it,
    and a Makefile that compiles them and links one program."""
    d.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(29)
    for i in range(files):
        funcs = []
        for j in range(12):
            a, b = rnd.randint(3, 97), rnd.randint(1, 31)
            funcs.append(
                f"long f{i}_{j}(long x) {{\n  long s = 0;\n  for (int k = 0; k < 256; k++)\n"
                f"    s += tab{i}[(x + k * {a}) & 1023] ^ (x >> {b});\n  return s + (x % {a} ? f{i}_{j}_h(x) : 0);\n}}\n")
        helpers = "".join(f"static long f{i}_{j}_h(long x) {{ return x * {rnd.randint(2, 99)} + {j}; }}\n" for j in range(12))
        table = ", ".join(str(rnd.randint(0, 1 << 20)) for _ in range(1024))
        (d / f"m{i}.c").write_text(f"static const long tab{i}[1024] = {{{table}}};\n{helpers}{''.join(funcs)}"
                                   f"long m{i}(long x) {{ return " + " + ".join(f"f{i}_{j}(x)" for j in range(12)) + "; }\n")
    decls = "".join(f"long m{i}(long);\n" for i in range(files))
    calls = "".join(f"  s += m{i}(s + {i});\n" for i in range(files))
    (d / "main.c").write_text(f"#include <stdio.h>\n{decls}int main(void) {{\n  long s = 1;\n{calls}"
                              "  printf(\"%ld\\n\", s);\n  return 0;\n}\n")
    objs = " ".join(f"m{i}.o" for i in range(files))
    (d / "Makefile").write_text(f"OBJS = main.o {objs}\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n"
                                "%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\nclean:\n\trm -f prog *.o\n")


def _lines(path: Path, mib: int, seed: int = 31) -> None:
    rnd = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    out, size = [], 0
    while size < mib << 20:
        line = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(8, 40)))
        out.append(line)
        size += len(line) + 1
    path.write_text("\n".join(out) + "\n")


AWK_PROGRAM = "{ c[$0]++ } END { n = 0; for (w in c) n++; print n }"


def programs(cache: Path, scale: str, only: list[str] | None = None) -> list[Program]:
    """The programs, their inputs made in `cache` (kept between runs)."""
    from .record_bench import PY_PROGRAM, _python3, _sqlite_script, _words
    small = scale == "small"
    cache.mkdir(parents=True, exist_ok=True)
    want = only or list(NAMES)
    mib = 2 if small else 64
    # xz -3 compresses some 1 MiB a second here: 4 MiB keeps its runs a few
    # seconds (its heap, so its faults, are its dictionary's, not the input's).
    xz_mib = 2 if small else 4
    words = cache / f"words-{xz_mib}m.txt"
    lines = cache / f"lines-{mib}m.txt"
    if "xz" in want and not words.exists():
        _words(words, xz_mib)
    if any(n in want for n in ("sort", "awk")) and not lines.exists():
        _lines(lines, mib)
    out: list[Program] = []
    for name in want:
        if name == "make":
            files = 6 if small else 48
            d = cache / f"cproj-{files}"
            if not (d / "Makefile").exists():
                _c_project(d, files)
            jobs = os.cpu_count() or 1
            out.append(Program("make", ["make", "-s", f"-j{jobs}", "prog"], d, [["make", "-s", "clean"]],
                               what=f"make -j{jobs} of a generated C project ({files + 1} files, gcc -O2)"))
        elif name == "xz":
            out.append(Program("xz", ["xz", "-3", "-T1", "-k", "-f", str(words)], cache, what=f"xz -3 -T1 of {xz_mib} MiB of words"))
        elif name == "python3":
            n = 50_000 if small else 2_000_000
            prog = cache / "validate.py"
            prog.write_text(PY_PROGRAM)
            out.append(Program("python3", [_python3(), str(prog), str(n), str(cache / "validate-py.json")], cache,
                               what=f"python3: a dict of {n:,} entries built, sorted, written as JSON"))
        elif name == "sqlite3":
            rows = 10_000 if small else 600_000
            script = cache / f"validate-{rows}.sql"
            script.write_text(_sqlite_script(rows))
            db = cache / "validate.db"
            out.append(Program("sqlite3", ["sqlite3", "-init", str(script), str(db), ".quit"], cache,
                               [["rm", "-f", str(db), f"{db}-wal", f"{db}-shm"]],
                               what=f"sqlite3: {rows:,} rows inserted, indexed, aggregated (file database)"))
        elif name == "sort":
            out.append(Program("sort", ["env", "LC_ALL=C", "sort", "-o", str(cache / "sorted.txt"), str(lines)], cache,
                               what=f"sort (LC_ALL=C) of {mib} MiB of lines"))
        elif name == "awk":
            out.append(Program("awk", ["awk", AWK_PROGRAM, str(lines)], cache, what=f"awk: the distinct lines of {mib} MiB counted"))
        else:
            raise HostError(f"--only: unknown program {name!r} (known: {', '.join(NAMES)})")
    return out


# ---------------------------------------------------------- measurements --
def _vmstat() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            k, _, v = line.partition(" ")
            if k in VMSTAT_KEYS:
                out[k] = int(v)
    except (OSError, ValueError):
        pass
    from ._host import THP, mthp_sizes_kib
    for s in mthp_sizes_kib():
        with contextlib.suppress(OSError, ValueError):
            out[f"mthp_{s}kB_anon_fault_alloc"] = int((THP / f"hugepages-{s}kB" / "stats" / "anon_fault_alloc").read_text())
    return out


def _before(p: Program) -> None:
    from .record_bench import _check
    _check(p.before, p.cwd)


def run_real(p: Program, runstat: Path) -> dict[str, Any]:
    """One native run: rusage of the tree (validation/bin/runstat), wall
    time and the /proc/vmstat deltas over it."""
    _before(p)
    v0, t0 = _vmstat(), time.monotonic()
    r = subprocess.run([str(runstat), *p.cmd], cwd=p.cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       start_new_session=True)
    wall, v1 = time.monotonic() - t0, _vmstat()
    try:
        d = json.loads(r.stdout)
    except ValueError:
        d = {}
    if r.returncode != 0 or d.get("exit", 1) != 0:
        raise HostError(f"{' '.join(p.cmd)} (in {p.cwd}) exited with status {d.get('exit', r.returncode)} when run natively")
    return {"faults": d["minflt"] + d["majflt"], "majflt": d["majflt"], "peak_rss_kib": d["peak_rss_kib"],
            "sys_s": d["stime_s"], "user_s": d["utime_s"], "wall_s": wall,
            "vmstat": {k: v1[k] - v0[k] for k in v1 if k in v0}}


def tracepoint_cost(out: Path, calls: int = 200_000) -> dict[str, Any]:
    """What the recorder's tracepoints cost a system call, measured by
    validation/bin/tpcost natively (median of 3) and recorded: getppid's
    extra time is its two events, a one-byte pread's beyond getppid's is
    the one page-cache event inside it; beside them, the cost the
    converter took out per event (the median of its probe calls' recorded
    times, trace_perf's `tracepoint_ns`)."""
    from ._host import build_validation
    from .record import record
    tp = build_validation() / "tpcost"
    nat = []
    for _ in range(3):
        r = subprocess.run([str(tp), str(calls)], capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise HostError(f"validation/bin/tpcost exited with status {r.returncode}")
        nat.append(json.loads(r.stdout))
    native = {k: statistics.median(float(x[k]) for x in nat) for k in ("getppid_ns", "pread_ns")}
    with tempfile.TemporaryFile("w+") as f:
        st = record([str(tp), str(calls)], out / "tpcost.fstrace", quiet=True, program_stdout=f.fileno())
        f.seek(0)
        recorded = json.loads(f.read())
    (out / "tpcost.fstrace").unlink(missing_ok=True)
    two = recorded["getppid_ns"] - native["getppid_ns"]
    return {"calls": calls, "native": native, "recorded": {k: recorded[k] for k in native},
            "event_ns": two / 2, "inner_event_ns": recorded["pread_ns"] - native["pread_ns"] - two,
            "probe_ns": st.get("tracepoint_ns", 0)}


def reporting_cost(mib: int = 512, wait_s: int = 5, rounds: int = 3) -> dict[str, Any] | None:
    """What this host's free page reporting (a VM guest's virtio-balloon
    reporting free blocks to its hypervisor, which discards them) costs the
    next first touch, measured by validation/bin/fprcost under THP
    `madvise` for its 2 MiB passes: CPU ns per 4 KiB written into a fresh
    mapping right after a free and after `wait_s` seconds idle, for 2 MiB
    THPs and 4 KiB pages. None on a host that does not report."""
    from ._host import build_validation, knobs_for, thp_settings, why_failed
    if not Path("/sys/module/page_reporting/parameters/page_reporting_order").exists():
        return None
    tool = build_validation() / "fprcost"
    with thp_settings(knobs_for([2048])):
        r = subprocess.run([str(tool), "-m", str(mib), "-w", str(wait_s), "-r", str(rounds)], capture_output=True, text=True,
                           check=False)
    if r.returncode != 0:
        raise HostError(f"validation/bin/fprcost failed: {why_failed(r)}")
    d: dict[str, Any] = json.loads(r.stdout)
    return d if d.get("page_reporting_order", -1) >= 0 else None


def replay(trace: Path, profile: str, knobs: dict[str, str]) -> dict[str, Any]:
    from . import run as _run
    cfg = {"seed": 1, "machine": {"profile": profile}, "workload": {"name": "trace", "path": str(trace)},
           "run": {"warmup_s": 0.0, "duration_s": 3600.0, "sample_ms": 1000.0}, "knobs": knobs}
    r = _run(cfg).raw
    vm = r["vmstat"]
    return {"faults": vm.get("pgfault", 0), "peak_rss_kib": r.get("memory", {}).get("peak_rss_kib", 0),
            "sys_s": r["time_ns"]["sys"] / 1e9, "user_s": r["time_ns"]["user"] / 1e9,
            "thp_fault_alloc": vm.get("thp_fault_alloc", 0), "mthp_fault_alloc": vm.get("foliosim_mthp_fault_alloc", 0),
            "finished_s": r["summary"].get("workload_finished_s"), "host_s": r.get("host_time_s")}


# ------------------------------------------------------------ comparison --
def spread(v: list[float]) -> list[float]:
    """The interquartile range [q1, q3] of the repeats (inclusive
    quartiles; one repeat: itself)."""
    if len(v) < 2:
        return [v[0], v[0]] if v else [0.0, 0.0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return [q[0], q[2]]


def rel(pred: float, real: float) -> float | None:
    """Relative error of `pred` against `real`: 0 when both are 0, None
    when only the real figure is 0 (no relative error exists: a miss)."""
    if real == 0:
        return 0.0 if pred == 0 else None
    return abs(pred - real) / abs(real)


def _pct(e: float | None) -> str:
    return "n/a (real 0)" if e is None else f"{100 * e:.1f}%"


def noisy(m: str, real: dict[str, Any]) -> bool:
    """The repeats spread wider than the target: their interquartile
    range is more than the target's share of the median (sys_change: more
    than the points the target allows at that median)."""
    lo, hi = real["spread"]
    med = real["median"]
    if m == "sys_change":
        return hi - lo > max(CHANGE_POINTS, TARGETS[m] * abs(med))
    return med != 0 and (hi - lo) / abs(med) > TARGETS[m]


def compare(runs: dict[str, list[dict[str, Any]]], preds: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for one program: `runs[setting]` its real runs in repeat order
    (every setting has one run per repeat), `preds[setting]` the replay.
    Each real figure is the median of the repeats with its interquartile
    range; the change of sys time is taken per repeat against the 4K run of
    the same repeat, then its median. `met[m]` is None where the repeats
    spread wider than the target (no verdict)."""
    base = runs.get("4K") or []
    rows = []
    for label, rr in runs.items():
        pred = preds[label]
        row: dict[str, Any] = {"setting": label, "repeats": len(rr), "real": {}, "pred": {}, "err": {}, "met": {}}
        for m, key in (("faults", "faults"), ("rss", "peak_rss_kib"), ("sys", "sys_s")):
            vals = [float(r[key]) for r in rr]
            row["real"][m] = {"median": statistics.median(vals), "spread": spread(vals), "range": [min(vals), max(vals)]}
            row["pred"][m] = float(pred[key])
            e = rel(pred[key], row["real"][m]["median"])
            row["err"][m] = e
            row["met"][m] = None if noisy(m, row["real"][m]) else e is not None and e <= TARGETS[m]
        if label != "4K" and base and "4K" in preds:
            changes = [100 * (r["sys_s"] / b["sys_s"] - 1) for r, b in zip(rr, base, strict=False) if b["sys_s"] > 0]
            p4 = preds["4K"]["sys_s"]
            pc = 100 * (pred["sys_s"] / p4 - 1) if p4 > 0 else 0.0
            if changes:
                real_c = statistics.median(changes)
                points = abs(pc - real_c)
                row["real"]["sys_change"] = {"median": real_c, "spread": spread(changes), "range": [min(changes), max(changes)]}
                row["pred"]["sys_change"] = pc
                row["err"]["sys_change"] = points
                e = rel(pc, real_c)
                row["met"]["sys_change"] = (None if noisy("sys_change", row["real"]["sys_change"]) else
                                            points <= CHANGE_POINTS or (e is not None and e <= TARGETS["sys_change"]))
        row["vmstat"] = {k: statistics.median([r["vmstat"].get(k, 0) for r in rr]) for k in (rr[0]["vmstat"] if rr else {})}
        rows.append(row)
    return rows


def entry_cost(table_mib: int = 256) -> dict[str, Any]:
    """What a kernel entry (a 4 KiB write fault, brk() growing the heap by
    132 KiB, getppid()) costs right after the program's own work, measured
    by validation/bin/coldentry: the median per entry back to back (as
    calibrate's loops time it), after amounts of dependent random reads of
    a `table_mib` MiB table, after arithmetic as long as each of those
    (the time alone: it touches no memory) and after reads streaming
    through stretches of the table."""
    from ._host import build_validation, why_failed
    tool = build_validation() / "coldentry"
    r = subprocess.run([str(tool), "-m", str(table_mib)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise HostError(f"validation/bin/coldentry failed: {why_failed(r)}")
    d: dict[str, Any] = json.loads(r.stdout)
    return d


def user_gap_us(prog: dict[str, Any]) -> float | None:
    """The program's mean user time between two of its kernel entries (a
    recorded fault or system call), from its trace's replay under 4K."""
    pred = (prog.get("preds") or {}).get("4K") or {}
    entries = prog.get("recorded_faults", 0) + (prog.get("converter") or {}).get("syscalls", 0)
    if not entries or "user_s" not in pred:
        return None
    return float(pred["user_s"]) * 1e6 / entries


def verdict(row: dict[str, Any], reporting: dict[str, Any] | None = None, gap_us: float | None = None) -> str:
    """'met', which metrics miss their target, and which the repeats
    spread too wide to judge. Where a row's real sys time is above the
    replay's, the miss points at what the replay leaves out: on a host that
    reports free pages to its hypervisor, a THP row's THPs taken from
    discarded blocks (`reporting_cost`); otherwise entries made colder by
    the program's own work between them (`entry_cost`, `gap_us` apart)."""
    missed = [m for m, ok in row["met"].items() if ok is False]
    wide = [m for m, ok in row["met"].items() if ok is None]
    parts = (["misses " + ", ".join(missed)] if missed else []) + (["too noisy to judge " + ", ".join(wide)] if wide else [])
    if "sys" in missed and row["real"]["sys"]["median"] > row["pred"]["sys"]:
        if reporting and row["setting"] == "2M":
            parts.append("real sys above the replay's: THPs taken from blocks the host's free page reporting discarded "
                         "(the line under the table)")
        elif gap_us is not None:
            parts.append(f"real sys above the replay's: the program's kernel entries come {gap_us:,.1f} us of its own work "
                         "apart, colder than calibrate's back-to-back loops (the line under the table)")
    return "; ".join(parts) or "met"


# ------------------------------------------------------------- the table --
def _g(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3g}"


def _cell(real: dict[str, Any], scale: float = 1.0) -> str:
    lo, hi = real["spread"]
    return f"{_g(real['median'] * scale)} [{_g(lo * scale)}-{_g(hi * scale)}]"


def render(rep: dict[str, Any]) -> str:
    """The Markdown table of a report (every figure from it)."""
    h = rep.get("host", {})
    lines = [
        f"Measured {rep.get('date', '?')} at scale `{rep.get('scale', '?')}` on {h.get('cpu', '?')} ({h.get('cpus', '?')} CPUs, "
        f"Linux {h.get('kernel', '?')}; load average {h.get('loadavg_before', '?')} before, {h.get('loadavg_after', '?')} after), "
        f"profile `{rep.get('profile_shown', rep.get('profile', '?'))}`. Real figures: median of {rep.get('repeats', '?')} "
        "interleaved repeats [interquartile range] (every repeat runs every program under every setting); the change of sys "
        "time is taken against the 4K run of the same repeat. Real sys time: rusage's (ru_stime of the reaped tree), which the "
        "kernel splits from the tree's exact CPU time in the ratio of its scheduler ticks in each mode. Targets: faults and "
        "peak RSS within "
        f"{100 * TARGETS['faults']:.0f}%, sys time within {100 * TARGETS['sys']:.0f}%, its change from 4K within "
        f"{100 * TARGETS['sys_change']:.0f}% of the real change or {CHANGE_POINTS:g} points. A real figure whose "
        "interquartile range is wider than its target is marked (noisy) and gets no verdict.",
        "",
        "| program | setting | faults real | pred | err | peak RSS KiB real | pred | err | sys ms real | pred | err "
        "| sys change real | pred | err (points) | verdict |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for prog in rep["programs"]:
        for r in prog["rows"]:
            real, pred, err = r["real"], r["pred"], r["err"]
            mark = {m: " (noisy)" if ok is None else "" for m, ok in r["met"].items()}
            if "sys_change" in real:
                change = (f"{real['sys_change']['median']:+.1f}% [{real['sys_change']['spread'][0]:+.1f}-"
                          f"{real['sys_change']['spread'][1]:+.1f}]{mark.get('sys_change', '')} | {pred['sys_change']:+.1f}% "
                          f"| {err['sys_change']:.1f}")
            else:
                change = "— | — | —"
            lines.append(
                f"| {prog['name']} | {r['setting']} | {_cell(real['faults'])}{mark['faults']} | {_g(pred['faults'])} "
                f"| {_pct(err['faults'])} | {_cell(real['rss'])}{mark['rss']} | {_g(pred['rss'])} | {_pct(err['rss'])} "
                f"| {_cell(real['sys'], 1e3)}{mark['sys']} | {_g(pred['sys'] * 1e3)} | {_pct(err['sys'])} | {change} | "
                f"{verdict(r, rep.get('reporting_cost'), user_gap_us(prog) if rep.get('entry_cost') else None)} |")
    lines += ["", "The programs:", ""]
    lines += [f"- {p['name']}: {p['what']}; trace {p['trace_bytes']:,} bytes, {p['recorded_faults']:,} faults recorded"
              + _gap(p) + _other(p) for p in rep["programs"]]
    tpc = rep.get("tracepoint_cost")
    if tpc:
        n, r = tpc["native"], tpc["recorded"]
        lines += ["", f"What recording costs a system call (validation/bin/tpcost, {tpc['calls']:,} calls each): getppid() "
                  f"{n['getppid_ns']:.0f} ns natively, {r['getppid_ns']:.0f} ns recorded, so {tpc['event_ns']:.0f} ns for each of its "
                  f"two events; a one-byte pread() of a cached page {n['pread_ns']:.0f} ns natively, {r['pread_ns']:.0f} ns recorded, "
                  f"{tpc['inner_event_ns']:.0f} ns for the page-cache event inside it. The converter took out "
                  f"{tpc['probe_ns']:,} ns an event in that recording (the median recorded time of its probe's getppid() calls)."]
    fpr = rep.get("reporting_cost")
    if fpr:
        def ns(k: str) -> str:
            return f"{fpr[k][0]:,.0f} ns [{fpr[k][1]:,.0f}-{fpr[k][2]:,.0f}]"
        lines += ["", f"What this host's free page reporting (page_reporting_order {fpr['page_reporting_order']}) costs a first touch "
                  f"(validation/bin/fprcost, {fpr['mib']} MiB written into a fresh mapping, median of {fpr['rounds']} rounds [range], "
                  f"CPU time per 4 KiB): 2 MiB THPs {ns('thp_at_once_ns_per_4k')} right after a free of the same size, "
                  f"{ns('thp_after_idle_ns_per_4k')} after {fpr['wait_s']} s idle, when the freed blocks have been reported and "
                  f"discarded; 4 KiB pages {ns('small_at_once_ns_per_4k')} and {ns('small_after_idle_ns_per_4k')}. The replay "
                  "models a kernel on bare metal: a THP row's real sys time holds as many of the discarded blocks' host faults as "
                  "its program took THPs from them."]
    ec = rep.get("entry_cost")
    if ec:
        lines += ["", *_entry_lines(ec)]
    s = summary(rep)
    lines += ["", f"{s['met']} of {s['rows']} rows meet every target"
              + (f"; missed: {'; '.join(s['missed'])}" if s["missed"] else "")
              + (f"; not judged (repeats wider than the target): {'; '.join(s['unjudged'])}" if s["unjudged"] else "") + "."]
    return "\n".join(lines)


def _gap(p: dict[str, Any]) -> str:
    g = user_gap_us(p)
    return "" if g is None else f"; {g:,.1f} us of its own work between two kernel entries, on average"


def _entry_lines(ec: dict[str, Any]) -> list[str]:
    """The table under the programs' from validation/bin/coldentry's figures."""
    out = [f"What a kernel entry costs after the program's own work (validation/bin/coldentry: each entry timed alone right "
           f"after the work, the median of each line's entries; the reads are of a {ec['table_mib']} MiB table). calibrate "
           "times each path back to back (the first line), so the replay charges every entry of a program that cost. After "
           "work, an entry pays for what the work evicted of the kernel's code, data and page-walk entries, and, as the "
           "arithmetic lines show (they touch no memory), for the time alone: on this host something else evicts them while "
           "the program computes. The trace records how long the program worked between entries, not what that work "
           "touched.", "",
           "| work before each entry | entries | user us | 4 KiB write fault ns | brk() +132 KiB ns | getppid() ns |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    what = {"none": lambda n: "none (back to back)", "random": lambda n: f"{n:,} dependent random reads",
            "arithmetic": lambda n: "arithmetic, as long as the reads above", "stream": lambda n: f"{n:,} KiB read in a stream"}
    for x in ec["rows"]:
        out.append(f"| {what[x['work']](x['amount'])} | {x['entries']:,} | {x['user_us']:,.1f} | {x['fault_ns']:,.0f} "
                   f"| {x['brk_ns']:,.0f} | {x['getppid_ns']:,.0f} |")
    return out


def _other(p: dict[str, Any]) -> str:
    """What the replay's `other` system time is (the recorded calls the
    model does not run) and what the recording's tracepoints cost them."""
    c = p.get("converter") or {}
    if not c.get("tracepoint_ns"):
        return ""
    return (f"; recorded time of the calls the model does not run {c['sys_ns'] / 1e6:.1f} ms after "
            f"{c['tracepoint_removed_ns'] / 1e6:.1f} ms of tracing taken out ({c['tracepoint_ns']:,} ns an event, the median "
            f"of the recording's {c['probe_calls']:,} probe calls)")


def summary(rep: dict[str, Any]) -> dict[str, Any]:
    rows = [(p["name"], r) for p in rep["programs"] for r in p["rows"]]
    missed = [f"{n} {r['setting']} ({verdict(r)})" for n, r in rows if any(ok is False for ok in r["met"].values())]
    unjudged = [f"{n} {r['setting']} ({', '.join(m for m, ok in r['met'].items() if ok is None)})" for n, r in rows
                if any(ok is None for ok in r["met"].values()) and not any(ok is False for ok in r["met"].values())]
    met = sum(1 for _, r in rows if all(ok is True for ok in r["met"].values()))
    return {"rows": len(rows), "met": met, "missed": missed, "unjudged": unjudged}


def fill_doc(report: Path, doc: Path) -> None:
    """Replace the table between the validate-programs markers of `doc`."""
    fill_marked(doc, MARK, END_MARK, render(json.loads(report.read_text())))


# ------------------------------------------------------------- the runs --
def check_args(args: argparse.Namespace) -> tuple[list[str] | None, list[tuple[str, list[int]]], int]:
    """What --programs takes, checked before any run: (--only, settings, repeats)."""
    if args.real or args.quick or args.tmpdir:
        raise HostError("--programs: --real, --quick and --tmpdir are for the microbenchmark rows; use --scale small for a quick check")
    only = [x.strip() for x in args.only.split(",") if x.strip()] if args.only else None
    for x in only or []:
        if x not in NAMES:
            raise HostError(f"--only: unknown program {x!r} (known: {', '.join(NAMES)})")
    known = dict(SETTINGS)
    labels = [x.strip() for x in args.settings.split(",")] if args.settings else [lab for lab, _ in SETTINGS]
    for x in labels:
        if x not in known:
            raise HostError(f"--settings: with --programs one of {', '.join(known)}, got {x!r}")
    if "4K" not in labels:
        labels.insert(0, "4K")  # the base of every change of sys time
    repeats = args.repeats if args.repeats is not None else REPEATS
    if not 1 <= repeats <= 100:
        raise HostError(f"--repeats: {repeats}: must be 1..100")
    return only, [(lab, known[lab]) for lab in labels], repeats


def validate_programs(progs: list[Program], settings: list[tuple[str, list[int]]], repeats: int, profile: str,
                      out: Path, quiet: bool = False) -> dict[str, Any]:
    from ._host import build_validation, knobs_for, thp_settings
    from .record import record
    from .validate import sim_knobs
    runstat = build_validation() / "runstat"
    say = (lambda m: None) if quiet else (lambda m: print(f"validate --programs: {m}", file=sys.stderr, flush=True))
    load0 = os.getloadavg()
    traces: dict[str, dict[str, Any]] = {}
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for p in progs:
            _before(p)
            say(f"recording {p.name} ...")
            traces[p.name] = record(p.cmd, out / f"{p.name}.fstrace", quiet=True, cwd=p.cwd, program_stdout=devnull)
    finally:
        os.close(devnull)
    say("measuring what recording costs a system call (validation/bin/tpcost) ...")
    tpc = tracepoint_cost(out)
    say("measuring what the host's free page reporting costs a first touch (validation/bin/fprcost, about a minute) ...")
    fpr = reporting_cost()
    say("measuring what a kernel entry costs after a program's own work (validation/bin/coldentry) ...")
    ec = entry_cost()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {p.name: {lab: [] for lab, _ in settings} for p in progs}
    for i in range(repeats):
        # The settings' order turns each repeat: a drift of the host's load
        # falls on every setting alike.
        order = settings[i % len(settings):] + settings[:i % len(settings)]
        for lab, sizes in order:
            with thp_settings(knobs_for(sizes)):
                for p in progs:
                    r = run_real(p, runstat)
                    runs[p.name][lab].append(r)
                    say(f"repeat {i + 1}/{repeats} {lab:>3} {p.name}: {r['faults']:,} faults, sys {1e3 * r['sys_s']:.0f} ms")
    # The 4K runs' list holds one run per repeat whatever the order; the
    # change of sys time pairs runs of the same repeat.
    out_progs = []
    for p in progs:
        preds = {}
        for lab, sizes in settings:
            say(f"replaying {p.name} under {lab} ...")
            preds[lab] = replay(out / f"{p.name}.fstrace", profile, sim_knobs(sizes))
        st = traces[p.name]
        out_progs.append({"name": p.name, "what": p.what, "cmd": p.cmd, "trace_bytes": st["bytes"],
                          "recorded_faults": st["info"]["accesses"], "runs": runs[p.name], "preds": preds,
                          "converter": {k: st.get(k, 0) for k in CONVERTER_KEYS},
                          "rows": compare(runs[p.name], preds)})
    from ._host import repo_root
    from .record import _cpu_model
    try:
        shown = str(Path(profile).resolve().relative_to(repo_root()))
    except ValueError:
        shown = Path(profile).name
    import platform
    return {"programs": out_progs, "repeats": repeats, "tracepoint_cost": tpc, "reporting_cost": fpr, "entry_cost": ec, "settings": [lab for lab, _ in settings], "profile": profile,
            "profile_shown": shown, "targets": TARGETS, "change_points": CHANGE_POINTS, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "host": {"kernel": platform.release(), "cpu": _cpu_model(), "cpus": os.cpu_count(),
                     "loadavg_before": " ".join(f"{x:.2f}" for x in load0),
                     "loadavg_after": " ".join(f"{x:.2f}" for x in os.getloadavg())}}


def cmd_programs(args: argparse.Namespace) -> int:
    """`foliosim validate --programs`."""
    from ._host import knobs_available
    from .record import perf_ready
    from .validate import ensure_profile
    only, settings, repeats = check_args(args)
    why = knobs_available()
    if why:
        raise HostError(f"validate --programs needs the THP knobs: {why}")
    perf_ready()
    profile = ensure_profile(args.profile)
    out = Path(args.out or "results/validate-programs").resolve()
    out.mkdir(parents=True, exist_ok=True)
    cache = bench_cache(args.cache)
    progs = programs(cache, args.scale, only)
    rep = validate_programs(progs, settings, repeats, profile, out, quiet=args.quiet)
    rep["scale"] = args.scale
    write_report(out, "programs", rep, render(rep))
    if args.json:
        sys.stdout.write(json.dumps(rep) + "\n")
    else:
        print(render(rep))
    print(f"wrote {out / 'programs.json'} and {out / 'programs.md'}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m foliosim.validate_programs")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("doc", help="fill the validate-programs table of a page from a report")
    d.add_argument("report")
    d.add_argument("doc")
    a = p.parse_args(argv)
    return tool_main(lambda: fill_doc(Path(a.report), Path(a.doc)))


if __name__ == "__main__":
    raise SystemExit(main())
