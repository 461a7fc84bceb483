"""The `foliosim` command line (console script `foliosim = foliosim.cli:main`).

Bad input is one line on stderr, `foliosim: error: FILE:LINE: KEY: REASON`,
exit code 2; an unexpected internal error is one line too, exit 1 (set
FOLIOSIM_DEBUG=1 for the traceback). Ctrl-C during a run keeps what was
computed: the partial result is written, a note printed, exit code 130.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import _core
from . import config as _config
from ._core import Cancelled, ConfigError, Error, InternalError
from .progress import ProgressBar
from .reproduce.spec import ExperimentError
from .result import Result, write_text_atomic
from .sweep import MAX_POINTS

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

# name, JSON key, target description, pass test
BENCH_TARGETS: list[tuple[str, str, str, Callable[[float], bool]]] = [
    # Counted under callgrind: the same on any machine, at any load.
    ("anon_fault_instructions", "instructions_per_anon_fault", "<= 2,000 instructions per 4 KiB anon fault", lambda v: v <= 2000),
    ("tlb_hit_instructions", "instructions_per_tlb_hit", "<= 200 instructions per TLB-hit access", lambda v: v <= 200),
    ("anon_faults", "anon_faults_per_host_s", ">= 5 M anon faults per host s", lambda v: v >= 5e6),
    ("tlb_hits", "tlb_hit_accesses_per_host_s", ">= 50 M TLB-hit accesses per host s", lambda v: v >= 50e6),
    ("pf1_threads64", "pf1_threads64_host_s", "page_fault1, 64 threads, 5 sim s: < 30 host s", lambda v: v < 30.0),
    ("big_machine", "peak_rss_1tib_gib", "peak RSS, 1 TiB machine, 128 GiB page cache: < 6 GiB", lambda v: v < 6.0),
    ("fpr_overhead", "fpr_overhead_host_s", "reproduce fpr-overhead: < 60 host s", lambda v: v < 60.0),
]

# Benchmarks that time a whole experiment (experiments/*/NAME.toml).
REPRODUCTION_BENCHES = {"fpr_overhead", "mthp_will_it_scale", "mthp_memory", "mthp_kernel_build", "luf_xsbench", "luf_llama"}

# Whole reproductions, run with `foliosim bench --slow` (minutes in all).
SLOW_BENCH_TARGETS: list[tuple[str, str, str, Callable[[float], bool]]] = [
    ("mthp_will_it_scale", "mthp_will_it_scale_host_s", "reproduce mthp-will-it-scale: < 60 host s", lambda v: v < 60.0),
    ("mthp_memory", "mthp_memory_host_s", "reproduce mthp-memory: < 60 host s", lambda v: v < 60.0),
    ("mthp_kernel_build", "mthp_kernel_build_host_s", "reproduce mthp-kernel-build (-j8 and -j160): < 180 host s", lambda v: v < 180.0),
    ("luf_xsbench", "luf_xsbench_host_s", "reproduce luf-xsbench (off, on, reverted): < 600 host s", lambda v: v < 600.0),
    ("luf_llama", "luf_llama_host_s", "reproduce luf-llama (off, on): < 600 host s", lambda v: v < 600.0),
    # Issue #33's scale: one run in its own process, read twice.
    ("cloud_scale", "cloud_scale_host_s", "1 TiB host, 16 guests of 64 GiB, 60 sim s: <= 600 host s", lambda v: v <= 600.0),
    ("cloud_scale_rss", "peak_rss_cloud_scale_gib", "the same run's peak RSS: <= 8 GiB", lambda v: v <= 8.0),
]

# Benchmarks run in a child process of their own, whose peak RSS is the
# child's alone (foliosim._bench_big NAME).
CHILD_BENCHES = {"big_machine": "big_machine", "cloud_scale": "cloud_scale", "cloud_scale_rss": "cloud_scale"}


def _one_line(s: object) -> str:
    return " ".join(str(s).split())


def _err(msg: str) -> None:
    print(f"foliosim: error: {_one_line(msg)}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (exit 2)."""

    def error(self, message: str) -> NoReturn:
        _err(f"{message} (see `{self.prog} --help`)")
        raise SystemExit(EXIT_USAGE)


def _path(s: str) -> str:
    """A path argument: an empty one is refused (it would otherwise read as
    "not given" and quietly mean the default)."""
    if not s.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return s


def _show_progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


# --------------------------------------------------------------------- run --
def _fmt_int(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isfinite(v) and abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.4g}"
    return str(v)


def _plural(n: Any, word: str, words: str = "") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {words or word + 's'}"


def _time_rows(tn: dict[str, Any]) -> list[tuple[str, float]]:
    """`time_ns` as (label, ns) rows: user, sys, then the kernel entries
    indented under sys (they are parts of it, not additions to it), and the
    sys time no entry accounts for (kernel threads, page reporting)."""
    nums = {k: float(v) for k, v in tn.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    user, sys_ns = nums.pop("user", 0.0), nums.pop("sys", 0.0)
    rows = [("user", user), ("sys", sys_ns)] + [(f"  {k}", v) for k, v in nums.items()]
    other = sys_ns - sum(nums.values())
    if other > 0:
        rows.append(("  other kernel time", other))
    return rows


def _trace_lacks(path: str) -> str:
    """Which recorder made the trace at `path` and what it lacks, from its
    head ("" when unknown)."""
    try:
        meta = json.loads(_core.trace_meta(path) or "{}")
    except (ValueError, OSError):
        return ""
    if not isinstance(meta, dict) or "lacks" not in meta:
        return ""
    return f"recorded with {meta.get('mode', '?')}: {meta['lacks']}"


_HOST_COUNTERS = ("pgfault", "pgpromote_success", "pgdemote_kswapd", "numa_hint_faults", "pswpout", "pswpin")


def _guests_lines(raw: dict[str, Any]) -> list[str]:
    """A run of several guests: one line a guest and the host kernel's
    counters; the rest of the summary is guest 0's."""
    guests = raw.get("guests") or []
    if len(guests) < 2:
        return []
    lines = [f"{'guest':<6} {'workload':<14} {'ops/s':>14} {'pgfault':>12} {'host RSS MiB':>13} "
             f"{'host faults':>12} {'remote flushes':>15}"]
    for g in guests:
        vm, summ = g.get("vmstat") or {}, g.get("summary") or {}
        lines.append(f"{g.get('guest', '?')!s:<6} {summ.get('workload', '?')!s:<14} "
                     f"{_fmt_int(round(summ.get('ops_per_s', 0))):>14} "
                     f"{_fmt_int(vm.get('pgfault', 0)):>12} {vm.get('foliosim_host_rss_pages', 0) / 256:>13,.1f} "
                     f"{_fmt_int(vm.get('foliosim_host_faults', 0)):>12} "
                     f"{_fmt_int(vm.get('foliosim_kvm_remote_tlb_flush', 0)):>15}")
    host = raw.get("host") or {}
    hv = host.get("vmstat") or {}
    if hv:
        shown = ", ".join(f"{k} {_fmt_int(hv.get(k, 0))}" for k in _HOST_COUNTERS)
        lines.append(f"host kernel: {shown}")
    lines.append("(what follows is guest 0's)")
    lines.append("")
    return lines


def format_summary(r: Result, out_dir: Path | None = None, all_rows: bool = False) -> str:
    """The human summary of a run. Rows that are zero are left out (one line
    says how many) unless `all_rows`; time shares are of user + sys."""
    raw, cfg = r.raw, r.config
    wl, run = cfg.get("workload") or {}, cfg.get("run") or {}
    lines: list[str] = []
    head = [str(wl.get("name", "?"))]
    if "mode" in wl:
        head.append(str(wl["mode"]))
    if "tasks" in wl:
        head.append(_plural(wl["tasks"], "task"))
    head.append(str((cfg.get("machine") or {}).get("profile", "?")))
    if "seed" in cfg:
        head.append(f"seed {cfg['seed']}")
    lines.append("foliosim: " + ", ".join(head))
    warm = f" (warmup {run['warmup_s']:g} s)" if isinstance(run.get("warmup_s"), (int, float)) else ""
    status = "  [INTERRUPTED]" if r.interrupted else ""
    lines.append(f"simulated {r.sim_time_s:.3f} s{warm} in {r.host_time_s:.2f} host s{status}")
    summ = r.summary
    done = summ.pop("workload_finished_s", None)
    if wl.get("name") == "trace":
        lines.append(f"trace: replayed to its end at {done:.6f} simulated s" if done is not None else
                     f"trace: NOT replayed to its end: cut at {r.sim_time_s:.3f} simulated s "
                     "(a longer run.duration_s replays more)")
        lacks = _trace_lacks(str(wl.get("path", "")))
        if lacks:
            lines.append(f"trace: {lacks}")
    elif done is not None:
        lines.append(f"every task exited at {done:.6f} simulated s")
    lines.append("")

    lines += _guests_lines(raw)

    w = 28
    order = ["ops_per_s", "ops_total", "tasks"] + [k for k in summ if k not in ("ops_per_s", "ops_total", "tasks")]
    for k in order:
        if k in summ and not isinstance(summ[k], (dict, list)):
            lines.append(f"{k.replace('_per_s', '/s'):<{w}} {_fmt_int(summ[k]):>18}")
    lines.append("")

    left_out: list[str] = []

    def shown(rows: list[tuple[str, Any]], *what: str) -> list[tuple[str, Any]]:
        keep = rows if all_rows else [(k, v) for k, v in rows if v]
        if len(keep) < len(rows):
            left_out.append(_plural(len(rows) - len(keep), *what))
        return keep

    vm = shown(list(r.vmstat.items()), "counter")
    if vm:
        lines.append(f"{'counter (/proc/vmstat)':<{w}} {'value':>18}")
        for k, v in vm:
            lines.append(f"{k:<{w}} {_fmt_int(v):>18}")
        lines.append("")

    rows = _time_rows(raw.get("time_ns") or {})
    total = sum(v for k, v in rows if k in ("user", "sys"))
    rows = rows[:2] + shown(rows[2:], "kernel entry", "kernel entries")  # user and sys always
    if rows:
        lines.append(f"{'time (share of user + sys)':<{w}} {'sim s':>18} {'share':>7}")
        for k, v in rows:
            share = f"{100.0 * v / total:6.1f}%" if total else "      -"
            lines.append(f"{k:<{w}} {v / 1e9:>18.6f} {share}")
        lines.append("")

    locks = shown(list((raw.get("locks") or {}).items()), "lock figure")
    for k, v in locks:
        lines.append(f"{k:<{w}} {_fmt_int(v):>18}")
    if locks:
        lines.append("")
    if left_out:
        lines.append(f"(zero and left out: {', '.join(left_out)}; --all shows them, result.json has all)")
        lines.append("")

    chk = raw.get("checker") or {}
    if chk.get("enabled"):
        viol = chk.get("violations") or []
        lines.append(f"checker: {_plural(chk.get('audits', 0), 'audit')}, {_plural(len(viol), 'violation')}")
        for v in viol[:10]:
            lines.append(f"  {_one_line(v)}")
    else:
        lines.append("checker: off (--check turns it on)")
    if out_dir is not None:
        lines.append(f"results: {out_dir}/")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    overrides = list(args.overrides or [])
    if args.check:
        overrides.append("run.check=true")
    cfg_json = _config.load_file(args.config, overrides)
    out = Path(args.out) if args.out else Path("results") / (Path(args.config).stem or "run")
    check_out_dir("--out", out)
    label = json.loads(cfg_json).get("workload", {}).get("name", "run")
    with ProgressBar(str(label), enabled=_show_progress(args)) as bar:
        raw = _core.run_json(cfg_json, bar, _signals.cancel)
    result = Result(raw)
    write_error: OSError | None = None
    try:
        with _signals.held():
            result.save(out)
    except OSError as e:
        write_error = e
    if args.json:
        sys.stdout.write(json.dumps(result.raw) + "\n")
    else:
        print(format_summary(result, None if write_error else out, all_rows=args.all))
    sys.stdout.flush()
    if write_error is not None:
        _err(f"--out {out}: the results could not be written ({_os_reason(write_error)}); nothing was written there")
        return EXIT_USAGE
    if result.interrupted:
        print(f"foliosim: {_signals.what()} at {result.sim_time_s:.3f} simulated s; partial results written to {out}/",
              file=sys.stderr)
        return _signals.exit_code()
    viol = (result.raw.get("checker") or {}).get("violations") or []
    if viol:
        print(f"foliosim: checker: {len(viol)} invariant violation(s), first: {_one_line(viol[0])}", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK


# ------------------------------------------------------ outputs and signals --
class UsageError(Exception):
    """Bad arguments or environment found by the CLI itself: one line, exit 2."""


def _os_reason(e: OSError) -> str:
    where = f"{e.filename}: " if e.filename else ""
    return f"{where}{e.strerror or e}"


def _nearest_existing(p: Path) -> Path:
    p = p.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe_writable(flag: str, path: Path, folder: Path) -> None:
    if not folder.is_dir():
        raise UsageError(f"{flag} {path}: {folder} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".foliosim-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write in {folder}: {e.strerror or e}") from None


def check_out_dir(flag: str, path: Path) -> None:
    """Before anything runs: the output folder `path` is a folder or can be
    made one (missing parents are created), and it can be written."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path}: exists and is not a folder")
    _probe_writable(flag, path, path if path.is_dir() else _nearest_existing(path.parent))


def check_out_file(flag: str, path: Path) -> None:
    """Before anything runs: the output file `path` can be written."""
    try:
        is_dir = path.is_dir()
    except OSError as e:  # a folder on the way we may not enter
        raise UsageError(f"{flag} {path}: {e.strerror}") from None
    if is_dir:
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    _probe_writable(flag, path, _nearest_existing(path.parent))


def check_in_file(flag: str, path: Path) -> None:
    """Before anything runs: the input file `path` exists, is a regular file
    (a FIFO or a device may never end) and can be read."""
    try:
        st = path.stat()
    except OSError as e:
        raise UsageError(f"{flag} {path}: {e.strerror or e}") from None
    why = _config.not_a_file(st)
    if why:
        raise UsageError(f"{flag} {path}: {why}")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{flag} {path}: cannot be read (permission denied)")


def check_work_dir(flag: str, path: Path) -> None:
    """Before anything runs: `path` is an existing folder that can be written
    (a program will make its files there; nothing creates it)."""
    if not path.exists():
        raise UsageError(f"{flag} {path}: no such folder")
    _probe_writable(flag, path, path)


class _Signals:
    """SIGINT and SIGTERM while a command runs: the runs the CLI started stop
    (their Cancel handle is set; it reaches a run in any thread) and
    KeyboardInterrupt is raised in the main thread, so the partial results
    are written either way. While results are written (`held`) the
    KeyboardInterrupt waits: a finished run is never lost half-saved."""

    def __init__(self) -> None:
        self.cancel = _core.Cancel()
        self.signum: int | None = None
        self._held = 0
        self._pending = False

    def handler(self, signum: int, _frame: Any) -> None:
        self.signum = signum
        self.cancel.cancel()
        if self._held:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        sigs = (signal.SIGINT, signal.SIGTERM)
        try:
            previous = {s: signal.signal(s, self.handler) for s in sigs}
        except ValueError:  # not the main thread: leave signals alone
            yield
            return
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def what(self) -> str:
        return "terminated (SIGTERM)" if self.signum == signal.SIGTERM else "interrupted"

    def exit_code(self) -> int:
        return 128 + self.signum if self.signum else EXIT_INTERRUPTED


_signals = _Signals()


# -------------------------------------------------------------------- list --
LIST_SECTIONS = ("config", "workloads", "profiles", "knobs", "policies", "counters", "probes", "experiments")


def _matches(pattern: str | None, name: str) -> bool:
    """PATTERN: a glob (`*`, `?`, `[...]`) or else a substring; either way
    without regard to case."""
    if not pattern:
        return True
    p, n = pattern.lower(), name.lower()
    return fnmatch.fnmatchcase(n, p) if any(c in p for c in "*?[") else p in n


def _shared_params(workloads: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[str]]:
    """Parameters that several workloads have alike (name, default, help):
    printed once rather than under each."""
    users: dict[tuple[str, str, str], list[str]] = {}
    for w in workloads:
        for p in w.get("params", []):
            users.setdefault((str(p.get("name")), str(p.get("default")), str(p.get("help", ""))), []).append(str(w.get("name")))
    return {k: v for k, v in users.items() if len(v) > 1}


def _fmt_default(v: Any) -> str:
    return "(the profile's)" if v is None else json.dumps(v) if isinstance(v, (str, bool)) else _fmt_int(v)


def format_catalog(cat: dict[str, Any], sections: Sequence[str], pattern: str | None) -> list[str]:
    out: list[str] = []

    def section(title: str, body: list[str]) -> None:
        if body:
            out.extend([title, *body, ""])

    if "config" in sections:
        body, table = [], None
        for k in cat.get("config", []):
            full = f"{k['table']}.{k['key']}" if k.get("table") else str(k["key"])
            if not _matches(pattern, full):
                continue
            if k.get("table") != table:
                table = k.get("table")
                body.append(f"  [{table}]" if table else "  (top level)")
            rng = k.get("range")
            r = f"  [{_fmt_int(rng[0])}..{_fmt_int(rng[1])}]" if rng and k["key"] != "seed" else ""
            body.append(f"    {k['key']} = {_fmt_default(k.get('default'))}{r}  {_one_line(k.get('help', ''))}")
        section("Config keys (`foliosim list config`; [workload] and [knobs] are listed below):", body)
    if "workloads" in sections:
        wls = [w for w in cat.get("workloads", []) if _matches(pattern, str(w.get("name")))]
        shared = _shared_params(cat.get("workloads", []))
        body = []
        common = [(k, v) for k, v in shared.items() if any(w.get("name") in v for w in wls)]
        if common:
            body.append("  parameters several workloads share (named under each):")
            for (name, default, hlp), users in common:
                who = ", ".join(users) if len(users) <= 4 else f"{len(users)} workloads"
                body.append(f"      {name} = {default}  {_one_line(hlp)} ({who})")
        for w in wls:
            body.append(f"  {w.get('name')}: {_one_line(w.get('help', ''))}")
            own, common_names = [], []
            for p in w.get("params", []):
                key = (str(p.get("name")), str(p.get("default")), str(p.get("help", "")))
                if key in shared:
                    common_names.append(key[0])
                else:
                    own.append(f"      {p.get('name')} = {p.get('default')}  {_one_line(p.get('help', ''))}")
            body.extend(own)
            if common_names:
                body.append(f"      (and the shared {', '.join(common_names)})")
        section("Workloads ([workload] name = ..., parameters in the same table):", body)
    if "profiles" in sections:
        body = [f"  {p.get('name')}: {p.get('nr_cpus')} CPUs, {p.get('mem_mib')} MiB. {_one_line(p.get('description', ''))}"
                for p in cat.get("profiles", []) if _matches(pattern, str(p.get("name")))]
        section("Machine profiles ([machine] profile = NAME, or the path of a profile file such as "
                "`foliosim calibrate` writes):", body)
    if "knobs" in sections:
        body = []
        for k in cat.get("knobs", []):
            if _matches(pattern, str(k.get("key"))):
                vals = k.get("values")
                vs = f"  [{', '.join(map(str, vals))}]" if vals else ""
                body.append(f"  {k.get('key')} = {k.get('default')}{vs}  {_one_line(k.get('help', ''))}")
        section('Knobs ([knobs] "KEY" = VALUE, quoted: the names have dots and slashes; default shown):', body)
    if "policies" in sections:
        body = []
        selector = None
        for p in cat.get("policies", []):
            if not (_matches(pattern, str(p.get("name"))) or _matches(pattern, str(p.get("selector")))):
                continue
            if p.get("selector") != selector:
                selector = p.get("selector")
                body.append(f'  "{selector}": {_one_line(p.get("kind", ""))}')
            default = "  (default)" if p.get("default") else ""
            body.append(f"    {p.get('name')}{default}  {_one_line(p.get('help', ''))}")
            for k in p.get("knobs", []):
                body.append(f"        {k.get('key')} = {k.get('default')}  {_one_line(k.get('help', ''))}")
        section('Policies ([knobs] "SELECTOR" = NAME; a policy\'s own knobs count only when it is selected):', body)
    if "counters" in sections:
        body = [f"  {c.get('name')}{' (gauge)' if c.get('gauge') else ''}: {_one_line(c.get('help', ''))}"
                for c in cat.get("counters", []) if _matches(pattern, str(c.get("name")))]
        section("Counters (/proc/vmstat names):", body)
    if "probes" in sections:
        body = [f"  {t.get('name')}: {_one_line(t.get('help', ''))}"
                for t in cat.get("probes", []) if _matches(pattern, str(t.get("name")))]
        section("Tracepoints ([run] probes = [NAME, ...], probes_record for every event; Linux's names):", body)
    if "experiments" in sections:
        exps = [e for e in cat.get("experiments", []) if _matches(pattern, str(e.get("name")))]
        body = [f"  {e.get('name')}: {_one_line(e.get('help', ''))}" for e in exps]
        if not cat.get("experiments") and not pattern:
            body = ["  (none registered yet)"]
        section("Experiments (foliosim reproduce NAME; experiments/MECHANISM/NAME.toml):", body)
    return out


def _repro_catalog() -> list[dict[str, Any]]:
    from . import reproduce as _repro

    return _repro.catalog()


def format_explain(data: dict[str, Any]) -> list[str]:
    """`foliosim list profiles NAME --explain`: every value of a profile and
    where it comes from (docs/profiles.md); public sources as numbered notes
    under the table."""
    vals = data["values"]
    head = [f"{data['name']}: {data['description']}"]
    if data.get("host"):
        head.append(f"derived from the public figures of this machine and the costs measured on the host "
                    f"{data['host']}, by the rule of docs/profiles.md")
    counts: dict[str, int] = {}
    for v in vals:
        counts[v["kind"]] = counts.get(v["kind"], 0) + 1
    head.append(", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])) + f" of {len(vals)} values")
    cites: list[str] = []
    width = max((len(v["path"]) for v in vals), default=0)
    out = [*head, ""]
    for v in vals:
        val = v["value"]
        shown = f"{val:.6g}" if isinstance(val, float) else json.dumps(val)
        what = v["what"]
        if v["kind"] == "public" and what:
            refs = []
            for c in what.split("; "):
                if c not in cites:
                    cites.append(c)
                refs.append(f"[{cites.index(c) + 1}]")
            what = " ".join(refs)
        src = v["kind"] + (f" {what}" if v["kind"] == "public" else (f" ({what})" if what else ""))
        out.append(f"  {v['path']:<{width}}  {shown:>12}  {src}")
        if v["note"]:
            out.append(f"  {'':<{width}}  {'':>12}  {v['note']}")
    if cites:
        out += ["", "sources:", *(f"  [{i + 1}] {c}" for i, c in enumerate(cites))]
    return out


def cmd_list(args: argparse.Namespace) -> int:
    words = list(args.what or [])
    sections: Sequence[str] = LIST_SECTIONS
    if words and words[0] in LIST_SECTIONS:
        sections = [words.pop(0)]
    if len(words) > 1:
        raise UsageError(f"list: one SECTION and one PATTERN at most, got {' '.join(args.what)!r} "
                         f"(sections: {', '.join(LIST_SECTIONS)})")
    pattern = words[0] if words else None
    if args.explain:
        if list(sections) != ["profiles"] or pattern is None:
            raise UsageError("list: --explain explains one profile: foliosim list profiles NAME --explain "
                             "(NAME a built-in profile or a profile file)")
        data = json.loads(_core.profile_explain_json(pattern, os.getcwd()))
        if args.json:
            sys.stdout.write(json.dumps(data) + "\n")
        else:
            print("\n".join(format_explain(data)))
        return EXIT_OK
    cat = json.loads(_core.catalog_json())
    if args.json:
        if "experiments" in sections:
            cat["experiments"] = _repro_catalog()
        key_of = {"config": "key", "knobs": "key"}
        obj = {s: [x for x in cat.get(s, []) if _matches(pattern, str(x.get(key_of.get(s, "name")) if s != "config"
                    else (f"{x['table']}.{x['key']}" if x.get("table") else x["key"])))] for s in sections}
        sys.stdout.write(json.dumps(obj) + "\n")
        return EXIT_OK
    if "experiments" in sections:
        cat["experiments"] = _repro_catalog()
    out = format_catalog(cat, sections, pattern)
    if not out and pattern:
        raise UsageError(f"list: nothing {'in ' + sections[0] + ' ' if len(sections) == 1 else ''}matches {pattern!r} "
                         f"(sections: {', '.join(LIST_SECTIONS)})")
    print("\n".join(out).rstrip("\n"))
    return EXIT_OK


# --------------------------------------------------------------- reproduce --
def version_string() -> str:
    """The package version, plus the git commit when run from a checkout
    (so that a report names exactly what made it)."""
    v = str(_core.__version__)
    src = Path(__file__).resolve().parent
    try:
        proc = subprocess.run(["git", "-C", str(src), "describe", "--always", "--dirty", "--abbrev=12"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return v
    commit = proc.stdout.strip()
    return f"{v} (git {commit})" if proc.returncode == 0 and commit else v



WINDOW_FLAG = "WINDOW TOO SHORT"


def format_reproduction(rep: dict[str, Any]) -> str:
    """An experiment's rows as a table, as the JSON has them: a row's note
    is a numbered footnote under the table, a row whose measured window was
    too short (the JSON's "window") says so in its notes column, and a
    warning line counts the runs whose window was too short; then how many
    rows are within 25% of their published figure."""
    from .verdict import count_within, noise, verdict

    rows = rep.get("rows", [])
    cols = ["label", "metric", "unit", "published", "simulated", "verdict", "notes"]
    footnotes: list[str] = []

    def cell(r: dict[str, Any], c: str) -> str:
        if c == "verdict":
            return verdict(r)
        v = r.get("published", r.get("seed")) if c == "published" else r.get(c)
        if c in ("published", "simulated"):
            shown = "—" if v is None else _fmt_int(v)
            return shown + (f" ± {_fmt_int(noise(r))}" if c == "published" and v is not None and noise(r) else "")
        if c == "notes":
            flags = []
            if r.get("note"):
                footnotes.append(_one_line(r["note"]))
                flags.append(f"[{len(footnotes)}]")
            if r.get("window"):
                flags.append(WINDOW_FLAG)
            return " ".join(flags)
        return str(v if v is not None else "")

    cells = [[cell(r, c) for c in cols] for r in rows]
    if not any(row[-1] for row in cells):
        cols, cells = cols[:-1], [row[:-1] for row in cells]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    lines = [f"{rep.get('name')}: {rep.get('title', '')}".rstrip(": ")]
    lines.append("  ".join(c.ljust(wd) for c, wd in zip(cols, widths, strict=False)).rstrip())
    for row in cells:
        lines.append("  ".join(v.ljust(wd) for v, wd in zip(row, widths, strict=False)).rstrip())
    lines.extend(f"[{i}] {n}" for i, n in enumerate(footnotes, 1))
    short = [w for w in rep.get("windows") or [] if not w.get("ok", True)]
    if short:
        runs = ", ".join(str(w.get("label") or w.get("run")) for w in short)
        lines.append(f"warning: the measured window was too short in {_plural(len(short), 'run')} ({runs}): "
                     f"the rows marked {WINDOW_FLAG} are not steady state (their notes say why)")
    near, judged = count_within(rows)
    if judged:
        lines.append(f"{near} of {judged} rows with a published figure within 25% of it")
    for n in rep.get("notes", []) or []:
        lines.append(f"note: {_one_line(n)}")
    return "\n".join(lines)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from . import reproduce as _repro

    if args.small_traces:
        from .programs import ENV_MODE

        os.environ[ENV_MODE] = "small"
    known = _repro.find()
    if args.name == "all":
        names = list(known)
        if not names:
            if args.json:
                sys.stdout.write("[]\n")
            else:
                print(f"foliosim: no experiments found in {_repro.default_dir()}")
            return EXIT_OK
    elif args.name in known:
        names = [args.name]
    else:
        _err(f"unknown experiment {args.name!r} (known: {', '.join(known) or 'none'})")
        return EXIT_USAGE
    if args.jobs is not None and args.jobs < 1:
        _err("--jobs: must be at least 1")
        return EXIT_USAGE
    out_dir = Path(args.out) if args.out else Path("results") / "reproduce"
    for flag, d in (("--out", out_dir), ("--report", Path(args.report) if args.report else None)):
        if d is not None:
            check_out_dir(flag, d)
    try:
        exps = _repro.load_all(names)
    except (_repro.ExperimentError, ConfigError) as e:
        _err(str(e))
        return EXIT_USAGE
    reports: list[dict[str, Any]] = []
    interrupted = False
    label = args.name if args.name != "all" else f"{len(names)} experiments"
    try:
        with ProgressBar(label, enabled=_show_progress(args), unit="runs") as bar:
            def status(st: Any) -> None:
                bar.detail = ", ".join(f"{run} at {sim:.1f} of {end:.0f} sim s" for run, sim, end in st.running)
                bar(st.done, st.total)

            for rep in _repro.run_experiments(exps, jobs=args.jobs, status=status):
                reports.append(rep)
                if not args.json:
                    print(format_reproduction(rep))
                    print()
                try:
                    with _signals.held():
                        write_text_atomic(out_dir / f"{rep['name']}.json", json.dumps(rep, indent=1) + "\n")
                except OSError as e:
                    if args.json:
                        sys.stdout.write(json.dumps(reports if args.name == "all" else reports[0]) + "\n")
                    sys.stdout.flush()
                    _err(f"--out {out_dir}: {rep['name']}.json could not be written ({_os_reason(e)})")
                    return EXIT_USAGE
                if rep.get("interrupted"):
                    interrupted = True
                    break
    except KeyboardInterrupt:
        interrupted = True
    except _repro.ExperimentError as e:
        _err(str(e))
        return EXIT_USAGE
    if args.json:
        sys.stdout.write(json.dumps(reports if args.name == "all" else (reports[0] if reports else {})) + "\n")
    if args.report and reports:
        from . import report as _report

        profiles = {p.get("name"): p for p in json.loads(_core.catalog_json()).get("profiles", [])}
        try:
            with _signals.held():
                page = _report.write_report(reports, Path(args.report), version=version_string(), profiles=profiles,
                                            command=f"foliosim reproduce {args.name} --report {args.report}")
        except OSError as e:
            sys.stdout.flush()
            _err(f"--report {args.report}: the report could not be written ({_os_reason(e)}); nothing was written "
                 f"there (the rows are in {out_dir}/)")
            return EXIT_USAGE
        print(f"foliosim: report written to {page}", file=sys.stderr if args.json else sys.stdout)
    if interrupted:
        print(f"foliosim: {_signals.what()}; partial results written to {out_dir}/", file=sys.stderr)
        return _signals.exit_code()
    return EXIT_OK


# ------------------------------------------------------------------- sweep --
def cmd_sweep(args: argparse.Namespace) -> int:
    from . import sweep as _sweep

    if args.jobs is not None and args.jobs < 1:
        _err(f"--jobs {args.jobs}: must be at least 1")
        return EXIT_USAGE
    out = Path(args.out) if args.out else Path("results") / "sweeps" / (Path(args.spec).stem or "sweep")
    check_out_dir("--out", out)
    say = not args.quiet

    def counted(n: int) -> None:
        if say and n > 1000:
            print(f"foliosim sweep: {n:,} points; checking their configs ...", file=sys.stderr, flush=True)

    spec = _sweep.load_spec(args.spec, max_points=None if args.yes else _sweep.MAX_POINTS, on_count=counted)
    if say:
        done = len({p.id for p in spec.points} & _sweep.done_points(out))
        dup = f" ({spec.duplicates:,} duplicate{'s' if spec.duplicates != 1 else ''} dropped)" if spec.duplicates else ""
        print(f"foliosim sweep: {len(spec.points):,} points{dup}, {done:,} already in {out}/, "
              f"{len(spec.points) - done:,} to run", file=sys.stderr, flush=True)
    try:
        with ProgressBar(Path(args.spec).stem, enabled=_show_progress(args), unit="points") as bar:
            s = _sweep.run_sweep(spec, out, jobs=args.jobs, ray=args.ray, progress=bar)
    except OSError as e:
        _err(f"--out {out}: {_os_reason(e)} (the points written so far are kept; run again to resume)")
        return EXIT_USAGE
    if args.json:
        sys.stdout.write(json.dumps(s.as_dict()) + "\n")
    else:
        dup = f" ({s.duplicates} duplicate{'s' if s.duplicates != 1 else ''} dropped)" if s.duplicates else ""
        print(f"foliosim sweep: {s.points} points{dup}: {s.already_done} already done, {s.ran} run "
              f"on {s.runner} in {s.host_s:.1f} host s")
        print(f"results: {s.out}/ (one Parquet row per run; pandas.read_parquet({str(s.out)!r}))")
    sys.stdout.flush()
    if s.interrupted:
        print(f"foliosim: {_signals.what()}; {s.already_done + s.ran} of {s.points} points are in {s.out}/; "
              "run the same command again to resume", file=sys.stderr)
        return _signals.exit_code()
    if s.failed:
        more = f" (and {len(s.failed) - 1} more)" if len(s.failed) > 1 else ""
        _err(f"{args.spec}: {s.failed[0]}{more}")
        return EXIT_USAGE
    return EXIT_OK


# ----------------------------------------------------------------- compare --
def cmd_compare(args: argparse.Namespace) -> int:
    from . import compare as _compare

    a, b = _compare.load(args.a), _compare.load(args.b)
    lines = _compare.diff(a, b, all_lines=args.all)
    if args.json:
        obj = {"a": a.describe(), "b": b.describe(), "lines": [ln.as_dict() for ln in lines]}
        sys.stdout.write(json.dumps(obj) + "\n")
    else:
        fmt = {"perf": _compare.format_diff, "lkp": _compare.format_lkp, "mmtests": _compare.format_mmtests}[args.format]
        print(fmt(a, b, lines, args.limit))
    return EXIT_OK


# ------------------------------------------------------------------- bench --
def _figure(data: dict[str, Any], key: str) -> float | None:
    if isinstance(data.get(key), (int, float)):
        return float(data[key])
    nums = [v for v in data.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return float(nums[0]) if len(nums) == 1 else None


def _bench_big(name: str = "big_machine") -> tuple[dict[str, Any], float]:
    """Runs benchmark `name` in a child process; returns its JSON and the
    child's own peak RSS (GiB, from its wait4 rusage)."""
    # stderr goes to a file, so that a child writing much there cannot
    # block on a pipe nobody reads until its stdout closes.
    with tempfile.TemporaryFile("w+") as errf:
        proc = subprocess.Popen([sys.executable, "-m", "foliosim._bench_big", name], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=errf, text=True)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        errf.seek(0)
        err = errf.read()
    # ru_maxrss: this child's largest RSS, in KiB on Linux.
    peak_gib = usage.ru_maxrss / (1024.0 * 1024.0)
    if proc.returncode != 0:
        last = (err.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise RuntimeError(f"{name} subprocess failed: {last}")
    return json.loads(out), peak_gib


def _bench_reproduction(name: str) -> dict[str, Any]:
    """Host seconds of one experiment, run as `foliosim reproduce` runs it
    (two processes)."""
    import time

    from . import reproduce as _repro

    exp_name = name.replace("_", "-")
    t0 = time.monotonic()
    reps = list(_repro.run_experiments(_repro.load_all([exp_name])))
    return {f"{name}_host_s": time.monotonic() - t0, "rows": len(reps[0]["rows"]) if reps else 0}


def _count_child() -> list[str]:
    """The command `_core.bench_instructions_json` runs under callgrind: this
    interpreter on the compiled module alone (see _bench_count.py)."""
    script = Path(__file__).with_name("_bench_count.py")
    return [sys.executable, "-P", "-S", "-s", str(script), str(_core.__file__)]


def cmd_bench_paired(args: argparse.Namespace) -> int:
    from . import paired as _paired

    workloads = [w for w in args.workloads.split(",") if w] if args.workloads else list(_paired.WORKLOADS)
    try:
        return _paired.main_paired(args.paired, args.pairs, workloads, args.json, not args.quiet)
    except _paired.PairedError as e:
        _err(str(e))
        return EXIT_USAGE


def cmd_bench(args: argparse.Namespace) -> int:
    if args.record:
        if args.repeats < 1:
            raise UsageError(f"--repeats {args.repeats}: must be at least 1")
        return _host_cmd("record_bench")(args)
    if args.paired is not None:
        return cmd_bench_paired(args)
    results: dict[str, Any] = {}
    details: dict[str, Any] = {}
    verdicts: dict[str, bool | None] = {}
    errors: dict[str, str] = {}
    targets = BENCH_TARGETS + (SLOW_BENCH_TARGETS if args.slow else [])
    child_runs: dict[str, tuple[dict[str, Any], float]] = {}
    for name, key, target, ok in targets:
        if _show_progress(args):
            print(f"foliosim bench: {name} ...", file=sys.stderr, flush=True)
        try:
            value: float | None
            if name in CHILD_BENCHES:
                child = CHILD_BENCHES[name]
                if child not in child_runs:
                    child_runs[child] = _bench_big(child)
                data, peak = child_runs[child]
                value = _figure(data, key) if key in data else peak
            elif name in REPRODUCTION_BENCHES:
                data = _bench_reproduction(name)
                value = _figure(data, key)
            elif name.endswith("_instructions"):
                data = json.loads(_core.bench_instructions_json(name, _count_child()))
                value = _figure(data, key)
            else:
                data = json.loads(_core.bench_json(name))
                value = _figure(data, key)
                if name == "pf1_threads64" and data.get("pf1_threads64_host_s"):
                    # The run's rate, beside anon_faults' (the target is its time).
                    data["pf1_threads64_faults_per_host_s"] = data["faults"] / data["pf1_threads64_host_s"]
            details[name] = data
        except (RuntimeError, ValueError) as e:
            errors[name] = _one_line(e)
            value = None
        results[key] = value
        verdicts[key] = None if value is None else bool(ok(value))
        if not args.json:
            shown = "error" if value is None else (f"{value:,.3f}" if value < 1000 else f"{value:,.0f}")
            verdict = "ERROR" if value is None else ("PASS" if verdicts[key] else "FAIL")
            print(f"{key:<30} {shown:>16}  {verdict:<5}  target {target}")
            if name in errors:
                print(f"    {errors[name]}")
            sys.stdout.flush()
    all_pass = all(v is True for v in verdicts.values())
    if args.json:
        obj = dict(results)
        obj["targets"] = {key: target for _, key, target, _ in BENCH_TARGETS}
        obj["pass"] = verdicts
        obj["all_pass"] = all_pass
        obj["errors"] = errors
        obj["details"] = details
        sys.stdout.write(json.dumps(obj) + "\n")
    else:
        print("all targets met" if all_pass else "some targets not met")
    if errors:
        return EXIT_INTERNAL
    if args.strict and not all_pass:
        return EXIT_INTERNAL
    return EXIT_OK


# -------------------------------------------------------------------- main --
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="foliosim", description="Deterministic simulator of the Linux memory-management subsystem.")
    p.add_argument("--version", action="version", version=f"foliosim {_core.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    r = sub.add_parser("run", help="run one simulation and print a vmstat-like summary")
    r.add_argument("config", metavar="CONFIG.toml", type=_path, help="the config file")
    r.add_argument("--json", action="store_true", help="print the result as one JSON object")
    r.add_argument("--check", action="store_true", help="turn on the invariant checker (run.check = true)")
    r.add_argument("--out", metavar="DIR", type=_path, help="where to write result.json and the Parquet files "
                   "(default results/<config stem>/)")
    r.add_argument("--all", action="store_true", help="also print the counters, times and lock figures that are zero")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    r.add_argument("--set", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
                   help="override a config key, VALUE a TOML literal, e.g. --set workload.tasks=8 "
                        "--set 'knobs.\"vm.min_free_kbytes\"=131072' (repeatable)")
    r.set_defaults(func=cmd_run)

    li = sub.add_parser("list", help="config keys, workloads, profiles, knobs, policies, counters and experiments",
                        description="What a config may say. `foliosim list SECTION` prints one section "
                                    f"({', '.join(LIST_SECTIONS)}); a PATTERN (a substring, or a glob with * ? [...]) "
                                    "keeps the names that match, e.g. `foliosim list knobs 'vm.*'`.")
    li.add_argument("what", nargs="*", metavar="[SECTION] [PATTERN]", help=f"SECTION: {'|'.join(LIST_SECTIONS)}")
    li.add_argument("--json", action="store_true", help="print the catalog (or the sections asked for) as one JSON object")
    li.add_argument("--explain", action="store_true",
                    help="with `profiles NAME`: every value of that profile and where it comes from: measured here (by which "
                         "program), a public figure (its source), derived by the rule of docs/profiles.md (its arithmetic) "
                         "or assumed (why)")
    li.set_defaults(func=cmd_list)

    rp = sub.add_parser("reproduce", help="rerun an experiment (experiments/*/NAME.toml) beside its published figures")
    rp.add_argument("name", metavar="NAME|all")
    rp.add_argument("--json", action="store_true", help="print JSON (a list for `all`)")
    rp.add_argument("--out", metavar="DIR", type=_path, help="where to write NAME.json (default results/reproduce/)")
    rp.add_argument("--report", metavar="DIR", type=_path, help="also write DIR/report.html (one self-contained page: "
                    "tables, plots, configs, profile, version, seed), a DIR/NAME.png plot per experiment and "
                    "its configs as DIR/NAME/LABEL.toml")
    rp.add_argument("--jobs", "-j", type=int, metavar="N", help="runs at a time, each in its own process, "
                    "sensitivity variants included (default: $FOLIOSIM_JOBS, else the CPUs); the rows do not depend on it")
    rp.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    rp.add_argument("--small-traces", action="store_true", help="replay the committed excerpts of recordings too large "
                    "to commit (what CI runs) instead of the recordings `make traces` makes; the result says so")
    rp.set_defaults(func=cmd_reproduce)

    sw = sub.add_parser("sweep", help="run a grid of configs (local process pool, or Ray with --ray)")
    sw.add_argument("spec", metavar="SPEC.toml", type=_path, help="the sweep spec: base config, [grid] and [[zip]] "
                    "(see docs/tutorial.md)")
    sw.add_argument("--out", metavar="DIR", type=_path, help="the Parquet dataset, one row per run; a rerun resumes "
                    "(default results/sweeps/<spec stem>/)")
    sw.add_argument("--jobs", "-j", type=int, metavar="N", help="local pool size (default: CPUs; 1 runs in "
                    "this process)")
    sw.add_argument("--ray", metavar="ADDRESS", help="run on a Ray cluster (`local` starts one here, `auto` "
                    "finds a running one); needs pip install 'foliosim[ray]'")
    sw.add_argument("--yes", action="store_true", help=f"run a grid of more than the {MAX_POINTS:,} points a "
                    "sweep otherwise refuses")
    sw.add_argument("--json", action="store_true", help="print a JSON summary")
    sw.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    sw.set_defaults(func=cmd_sweep)

    c = sub.add_parser("compare", help="two result sets side by side, most changed counters first")
    c.add_argument("a", metavar="A", type=_path, help="a run folder or result.json, a sweep folder, or a reproduction JSON")
    c.add_argument("b", metavar="B", type=_path, help="the same, compared with A")
    c.add_argument("--limit", "-n", type=int, default=30, metavar="N", help="lines shown (default 30; 0: all)")
    c.add_argument("--all", action="store_true", help="also list unchanged counters")
    c.add_argument("--format", choices=("perf", "lkp", "mmtests"), default="perf",
                   help="perf: like perf diff (default); lkp: the kernel test robot's %%change table (base, "
                        "%%stddev, %%change, head, %%stddev, metric); mmtests: compare-kernels.sh rows (Hmean for "
                        "ops/s, Amean for the rest), to paste into a list thread")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_compare)

    b = sub.add_parser("bench", help="speed benchmarks of the simulator against its targets",
                       description="Speed benchmarks of the simulator against its targets. The "
                                   "instruction counts come from valgrind's callgrind (docs/performance.md); "
                                   "the two throughputs are the median of 5 runs; --json lists every run's rate.")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    b.add_argument("--strict", action="store_true", help="exit 1 if a target is not met")
    b.add_argument("--slow", action="store_true", help="also time whole reproductions (mthp-will-it-scale, mthp-memory, mthp-kernel-build, luf-xsbench, luf-llama)")
    b.add_argument("--record", action="store_true",
                   help="instead: what recording with perf costs (root): a kernel build, xz -9, python3, sqlite3 run natively "
                        "and under `foliosim record`, interleaved; trace sizes, replay speeds")
    b.add_argument("--scale", choices=("small", "full"), default="full",
                   help="with --record: full (the programs of docs/performance.md) or small (a check of the tooling)")
    b.add_argument("--repeats", type=int, default=3, metavar="N", help="with --record: interleaved runs of each (default 3)")
    b.add_argument("--only", metavar="LIST", help="with --record: a subset of kernel,xz,python3,sqlite3")
    b.add_argument("--out", metavar="DIR", type=_path, help="with --record: where the report and traces go (default results/bench-record)")
    b.add_argument("--cache", metavar="DIR", type=_path, help="with --record: the kernel tree and inputs (default $FOLIOSIM_CACHE or results/cache)")
    b.add_argument("--paired", metavar="REF", help="instead: build git REF and the working tree, run them interleaved "
                   "(--pairs pairs, the order alternating) and print each workload's throughput ratio, "
                   "candidate/ref: median [IQR] (min-max) of the per-pair ratios (docs/performance.md)")
    b.add_argument("--pairs", type=int, default=5, metavar="N", help="with --paired: pairs of runs per workload (default 5)")
    b.add_argument("--workloads", metavar="W,...", help="with --paired: pf1_1task, pf1_threads64, tlb_hits (default: all)")
    b.set_defaults(func=cmd_bench)

    _add_host_commands(sub)
    return p


# ------------------------------------------- calibrate / validate / record --
def _host_cmd(name: str) -> Callable[[argparse.Namespace], int]:
    """Dispatch to foliosim.{calibrate,validate,record}; HostError -> one line, exit 2."""
    def run(args: argparse.Namespace) -> int:
        import importlib

        from ._host import HostError
        mod = importlib.import_module(f"foliosim.{name}")
        # Before minutes of measuring or recording, or any knob written.
        out = getattr(args, "out", None)
        if out:
            (check_out_dir if name in ("validate", "record_bench") else check_out_file)("--out", Path(out))
        for flag, dest in (("--profile", "profile"), ("--real", "real"), ("--from", "from_json")):
            if getattr(args, dest, None):
                check_in_file(flag, Path(getattr(args, dest)))
        if getattr(args, "tmpdir", None):
            check_work_dir("--tmpdir", Path(args.tmpdir))
        try:
            return int(getattr(mod, f"cmd_{name}")(args))
        except HostError as e:
            _err(str(e))
            return EXIT_USAGE
        except OSError as e:
            _err(f"{name}: {e}")
            return EXIT_USAGE
    return run


def _validate(args: argparse.Namespace) -> int:
    """`validate --public` runs only the model (validation/public/); plain
    `validate` measures this host's kernel as well."""
    if args.public:
        from . import public

        for flag in ("real", "profile", "settings", "tmpdir", "repeats"):
            if getattr(args, flag, None) is not None:
                _err(f"--{flag}: not with --public (it compares stored public results, not this host)")
                return EXIT_USAGE
        if args.out:
            check_out_dir("--out", Path(args.out))
        return public.cmd_public(args)
    if args.points is not None:
        _err("--points: only with --public")
        return EXIT_USAGE
    return _host_cmd("validate")(args)


def _add_host_commands(sub: Any) -> None:
    c = sub.add_parser("calibrate", help="measure this host and write a machine profile")
    c.add_argument("--out", default="results/calibrate/host.toml", metavar="FILE", type=_path,
                   help="profile to write (default results/calibrate/host.toml, where validate, record --validate and "
                        "bench --record look for it)")
    c.add_argument("--name", help="profile name (default: the file's stem)")
    c.add_argument("--json", action="store_true", help="print the measurements, fits and derived values as one JSON document")
    c.add_argument("--rounds", type=int, default=5, metavar="N",
                   help="interleaved rounds of every fault-path case (default 5; the medians are used)")
    c.add_argument("--from", dest="from_json", metavar="FILE.json", type=_path,
                   help="derive the profile from the measurements an earlier run kept in OUT.measurements.json "
                        "(or printed with --json); no measuring")
    c.add_argument("--quiet", "-q", action="store_true")
    c.set_defaults(func=_host_cmd("calibrate"))

    v = sub.add_parser("validate", help="compare the model with this kernel under several THP settings (root)")
    v.add_argument("--json", action="store_true", help='print the report (rows, headline, fit and held-out errors) as one JSON document, or {"skipped": reason}')
    v.add_argument("--quick", action="store_true", help="short runs, 2 repeats (CI; not for the headline)")
    v.add_argument("--repeats", type=int, metavar="N", help="interleaved repeats of every real run (default 5; the medians are compared)")
    v.add_argument("--profile", metavar="FILE", type=_path, help="calibrated profile (default results/calibrate/host.toml, measured if missing)")
    v.add_argument("--out", metavar="DIR", type=_path, help="where to write validate.json and validate.md (default results/validate/)")
    v.add_argument("--tmpdir", metavar="DIR", type=_path, help="where the file-backed tests keep their files (default /dev/shm if tmpfs, else /tmp)")
    v.add_argument("--settings", metavar="LIST", help="comma-separated subset of 4K,16K,32K,64K,2M,64K+2M (4K is always included)")
    v.add_argument("--threads", type=int, default=2, metavar="N",
                   help="threads of the threads-mode rows (page_fault1/2/3, mmap1 under 4K, 64K, 2M; default 2, 0 = none)")
    v.add_argument("--real", metavar="REPORT.json", type=_path,
                   help="reuse the real runs of an earlier validate.json (its medians and spreads) and rerun only the model")
    v.add_argument("--programs", action="store_true",
                   help="instead: real programs (make -jN of a C project, xz, python3, sqlite3, sort, awk) recorded, run natively "
                        "and replayed under 4K, 64K and 2M; faults, peak RSS, sys time and its change compared (root, perf)")
    v.add_argument("--only", metavar="LIST", help="with --programs: a subset of make,xz,python3,sqlite3,sort,awk")
    v.add_argument("--scale", choices=("full", "small"), default="full",
                   help="with --programs: full (seconds a program) or small (a check of the tooling)")
    v.add_argument("--cache", metavar="DIR", type=_path, help="with --programs: the programs' inputs (default $FOLIOSIM_CACHE or results/cache)")
    v.add_argument("--public", action="store_true",
                   help="instead: predict the public real-kernel results of other machines in validation/public/ "
                        "(no root; docs/validation-public.md)")
    v.add_argument("--points", metavar="ID,...", help="with --public: only these points")
    v.add_argument("--jobs", type=int, default=2, metavar="N", help="with --public: runs at once (default 2)")
    v.add_argument("--quiet", "-q", action="store_true")
    v.set_defaults(func=_validate)

    r = sub.add_parser("record", help="record a program's memory behaviour into a trace: foliosim record -- CMD ARGS")
    r.add_argument("--out", "-o", metavar="FILE", type=_path, help="trace file (default CMD.fstrace)")
    r.add_argument("--mode", choices=("perf", "valgrind"), default="perf",
                   help="perf (default): natively, the page faults, memory calls, file I/O, processes and CPU time the kernel sees "
                        "(root); valgrind: every memory access, thousands of times slower")
    r.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="kill the recorded command (every process of it) after this long; no trace is written")
    r.add_argument("--validate", action="store_true", help="then compare native minor faults and RSS with the replay")
    r.add_argument("--profile", metavar="FILE", type=_path, help="profile for --validate (default results/calibrate/host.toml)")
    r.add_argument("--json", action="store_true")
    r.add_argument("--quiet", "-q", action="store_true")
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")
    r.set_defaults(func=_host_cmd("record"))


def main(argv: Sequence[str] | None = None) -> int:
    global _signals
    _signals = _Signals()
    debug = os.environ.get("FOLIOSIM_DEBUG", "") not in ("", "0")
    try:
        with _signals.installed():
            args = build_parser().parse_args(argv)
            return int(args.func(args))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
    except (UsageError, ExperimentError) as e:
        if debug:
            raise
        _err(str(e))
        return EXIT_USAGE
    except InternalError as e:
        if debug:
            raise
        print(f"foliosim: internal error: {_one_line(e)} (a bug: please report it; FOLIOSIM_DEBUG=1 shows the backtrace)",
              file=sys.stderr)
        return e.exit_code
    except Cancelled:
        # Stopped in the warm-up, by a signal: as for any other stop.
        print(f"foliosim: {_signals.what()}", file=sys.stderr)
        return _signals.exit_code()
    except Error as e:
        if debug:
            raise
        _err(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        print(f"foliosim: {_signals.what()}", file=sys.stderr)
        return _signals.exit_code()
    except BrokenPipeError:
        # `foliosim list | head`: not an error. Silence the final flush too.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return EXIT_OK
    except BaseException as e:
        if debug:
            raise
        msg = _one_line(e) or type(e).__name__
        print(f"foliosim: internal error: {type(e).__name__}: {msg} (FOLIOSIM_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    raise SystemExit(main())
