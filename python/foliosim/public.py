"""`foliosim validate --public`: the model against public real-kernel results
of machines nobody here has.

The results are data, in the repository (docs/validation-public.md describes
the format):

- ``validation/public/machines.toml``: each test machine as its source
  prints it ("224 threads 4 sockets ... (Cooper Lake) with 192G memory")
  and the name of the profile the derivation rule makes for it;
- ``validation/public/reports/*.toml``: one file per message (a kernel test
  robot report, a mail with a table), its message id and URL, the test and
  its parameters, the kernels it compares with the foliosim knobs that stand
  for each, and its points, each quoted exactly from the message.

A point is either the per-task throughput one kernel reached (``per_task_ops``:
will-it-scale's per_process_ops or per_thread_ops, LKP's mean over its task
counts of each count's ops per task and second) or the change between two
kernels (``change``, in %). Every point is run through the ordinary run path
on the machine's profile with the knobs of its kernel, and compared: per-task
throughput within 25%, a change within 15% of it (or 3 points where the
noise the source states for it is wider than that), never of the other sign.

Points have a role: ``held-out`` (the default: nothing was shaped on them)
or ``fit`` (a point the derivation rule was shaped on, reported apart; a
point is never both).

    python -m foliosim.public [--out DIR] [--points ID,...] [--jobs N] [--quick]
    foliosim validate --public ...          (the same)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _core
from .reproduce.runner import _results as run_configs
from .reproduce.runner import window
from .reproduce.spec import quote_problem
from .result import write_text_atomic
from .tomlout import dumps as toml_dumps

__all__ = ["Machine", "Point", "PublicError", "load", "main", "predict", "render_markdown"]

# Targets (issue 30): per-task throughput within 25% of the published one; a
# change within 15% of it, or within 3 points where the source's stated
# noise is wider than 15% of the change.
TARGET_ABSOLUTE = 0.25
TARGET_CHANGE = 0.15
NOISY_CHANGE_POINTS = 3.0
# Regions of will-it-scale's tests are 128 MiB a task; all tasks together are
# scaled down to this much simulated memory (time is not scaled).
REGION_BUDGET_MIB = 6144
KINDS = ("per_task_ops", "change")
ROLES = ("held-out", "fit")
MODES = {"process": "processes", "thread": "threads"}
TESTS = ("page_fault1", "page_fault2", "page_fault3", "malloc1", "mmap1", "mmap2", "tlb_flush1", "tlb_flush2",
         "tlb_flush3", "read1", "read2")


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def default_dir() -> Path:
    return repo_root() / "validation" / "public"


class PublicError(ValueError):
    """A bad data file: one line naming the file and the key."""

    def __init__(self, file: str, key: str, reason: str):
        self.file, self.key, self.reason = file, key, reason
        super().__init__(f"{file}: {key}: {' '.join(str(reason).split())}")


@dataclass
class Machine:
    id: str
    printed: str
    source: str
    vendor: str
    microarchitecture: str
    cpu: str
    threads: int
    sockets: int
    memory_gib: int
    profile: str


@dataclass
class Kernel:
    name: str
    commit: str
    subject: str
    knobs: dict[str, Any]
    why: str


@dataclass
class Point:
    id: str
    kind: str
    value: float
    quote: str
    file: str
    source: dict[str, str]
    machine: str
    test: str
    mode: str
    nr_task: str
    tasks: list[int]
    tmp_fs: str
    kernels: dict[str, Kernel]
    kernel: str | None = None
    role: str = "held-out"
    # %stddev the source prints: of the figure (per_task_ops), or of the
    # base and head figures (change); 0 where it prints none.
    stddev_pct: list[float] = field(default_factory=list)

    def noise_points(self) -> float:
        """The change's noise band the source states, in points (the two
        figures' relative standard deviations, root-sum-square, carried to
        the ratio); 0 where it states none."""
        if self.kind != "change" or not any(self.stddev_pct):
            return 0.0
        sb, sh = [*self.stddev_pct, 0.0, 0.0][:2]
        return math.hypot(sb, sh) * (1 + self.value / 100)


# ------------------------------------------------------------------ load --
def _need(t: Mapping[str, Any], key: str, kind: type | tuple[type, ...], file: str, where: str) -> Any:
    v = t.get(key)
    if v is None:
        raise PublicError(file, f"{where}{key}", "missing")
    if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
        raise PublicError(file, f"{where}{key}", f"expected {getattr(kind, '__name__', kind)}, got {type(v).__name__}")
    return v


def load_machines(root: Path) -> dict[str, Machine]:
    path = root / "machines.toml"
    file = str(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PublicError(file, "(file)", str(e)) from None
    out: dict[str, Machine] = {}
    for mid, t in doc.items():
        if not isinstance(t, dict):
            raise PublicError(file, mid, "expected a table")
        m = Machine(mid, _need(t, "printed", str, file, f"{mid}."), _need(t, "source", str, file, f"{mid}."),
                    _need(t, "vendor", str, file, f"{mid}."), _need(t, "microarchitecture", str, file, f"{mid}."),
                    str(t.get("cpu", "")), _need(t, "threads", int, file, f"{mid}."), _need(t, "sockets", int, file, f"{mid}."),
                    _need(t, "memory_gib", int, file, f"{mid}."), _need(t, "profile", str, file, f"{mid}."))
        problem = quote_problem([m.threads, m.sockets, m.memory_gib], m.printed)
        if problem:
            raise PublicError(file, f"{mid}.printed", f"threads, sockets and memory as printed: {problem}")
        if m.threads < 1 or m.sockets < 1 or m.threads % m.sockets:
            raise PublicError(file, f"{mid}.threads", "a whole number of threads per socket")
        own = root / "profiles" / f"{m.profile}.toml"
        if own.is_file():
            check_profile(own, m)
        out[mid] = m
    return out


# What a public machine's profile gives, the same for every machine: what its
# report prints and what the vendor specifies for the SKU; the derivation
# rule makes every other value (docs/profiles.md). Giving more (a latency, a
# cost) would be a value chosen per machine, which is what the rule is for.
PROFILE_GIVES = {
    "derive": {"host", "dram_channels", "dram_mts"},
    "cpu": {"nr_cpus", "sockets", "freq_ghz", "core", "threads_per_core", "l2_kib", "llc_kib"},
    "nodes": {"kind", "mem_mib", "has_cpus"},
}
_TAG = re.compile(r"^\[(?:public: (?P<keys>[\w.-]+(?:, [\w.-]+)*)\]|assumed\] \S)")


def check_profile(path: Path, m: Machine) -> None:
    """A public machine's profile: a derived one (a [derive] table), of that
    machine (its name, threads, sockets and memory), giving exactly the
    figures of PROFILE_GIVES, each with its source ([public: KEY] citing its
    [sources], or [assumed] and why). A PublicError otherwise."""
    file = str(path)
    text = path.read_text(encoding="utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PublicError(file, "(file)", str(e)) from None
    if not isinstance(doc.get("derive"), dict) or not doc["derive"].get("host"):
        raise PublicError(file, "derive", "a public machine's profile is derived by the rule: it needs a [derive] table naming its host")
    if doc.get("name") != m.profile:
        raise PublicError(file, "name", f"expected {m.profile!r}, the machine's profile in machines.toml")
    extra = set(doc) - {"name", "description", "sources", *PROFILE_GIVES}
    if extra:
        raise PublicError(file, sorted(extra)[0], "the rule makes these values: a public machine's profile gives only "
                          + ", ".join(f"{t}.{{{','.join(sorted(k))}}}" for t, k in PROFILE_GIVES.items()))
    nodes = doc.get("nodes", [])
    for table, keys in PROFILE_GIVES.items():
        for i, t in enumerate(nodes if table == "nodes" else [doc.get(table, {})]):
            where = f"nodes[{i}]" if table == "nodes" else table
            if set(t) != keys:
                odd = sorted(set(t) ^ keys)[0]
                raise PublicError(file, f"{where}.{odd}", "every public machine's profile gives exactly "
                                  + ", ".join(sorted(keys)) + f" in {table}")
    cpu = doc["cpu"]
    if cpu["nr_cpus"] != m.threads or cpu["sockets"] != m.sockets:
        raise PublicError(file, "cpu.nr_cpus", f"{cpu['nr_cpus']} CPUs on {cpu['sockets']} sockets; the report prints "
                          f"{m.threads} threads on {m.sockets}")
    if len(nodes) != m.sockets or sum(n["mem_mib"] for n in nodes) != m.memory_gib * 1024:
        raise PublicError(file, "nodes", f"one node a socket, {m.memory_gib} GiB in all, as the report prints")
    cites = set(doc.get("sources", {}))
    table = ""
    for n, line in enumerate(text.splitlines(), 1):
        head = re.match(r"^\s*\[\[?([\w.]+)\]\]?", line)
        if head:
            table = head.group(1)
            continue
        kv = re.match(r"^\s*([\w-]+)\s*=[^#]*(?:#\s*(.*))?$", line)
        if not kv or table in ("", "sources") or (table, kv.group(1)) == ("derive", "host"):
            continue
        tag = _TAG.match(kv.group(2) or "")
        if not tag:
            raise PublicError(file, f"{table}.{kv.group(1)}", f"line {n}: no source: its comment opens with "
                              "[public: KEY] or [assumed] why")
        missing = [k for k in (tag.group("keys") or "").split(", ") if k and k not in cites]
        if missing:
            raise PublicError(file, f"{table}.{kv.group(1)}", f"line {n}: {missing[0]!r} is not in [sources]")


REPORT_KEYS = {"title", "message_id", "url", "date", "from", "machine", "test", "kernels", "points"}
POINT_KEYS = {"id", "kind", "kernel", "value", "quote", "stddev_pct", "role", "machine", "test", "mode", "nr_task", "tasks"}


def _kernel(name: str, t: Any, file: str) -> Kernel:
    if not isinstance(t, dict):
        raise PublicError(file, f"kernels.{name}", "expected a table")
    knobs = _need(t, "knobs", dict, file, f"kernels.{name}.")
    return Kernel(name, _need(t, "commit", str, file, f"kernels.{name}."), _need(t, "subject", str, file, f"kernels.{name}."),
                  dict(knobs), _need(t, "why", str, file, f"kernels.{name}."))


def load_report(path: Path, machines: Mapping[str, Machine]) -> list[Point]:
    file = str(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PublicError(file, "(file)", str(e)) from None
    for k in doc:
        if k not in REPORT_KEYS:
            raise PublicError(file, k, f"unknown key (expected {', '.join(sorted(REPORT_KEYS))})")
    source = {k: str(doc[k]) for k in ("title", "message_id", "url", "date", "from") if doc.get(k)}
    for k in ("title", "message_id", "url", "date"):
        if k not in source:
            raise PublicError(file, k, "missing: a public result names its message exactly (title, message id, URL, date)")
    test = _need(doc, "test", dict, file, "")
    kernels = {name: _kernel(name, t, file) for name, t in (_need(doc, "kernels", dict, file, "")).items()}
    quote = _need(test, "quote", str, file, "test.")
    points: list[Point] = []
    for i, p in enumerate(_need(doc, "points", list, file, "")):
        where = f"points[{i}]."
        extra = set(p) - POINT_KEYS
        if extra:
            raise PublicError(file, f"{where}{sorted(extra)[0]}", f"unknown key (expected {', '.join(sorted(POINT_KEYS))})")
        kind = _need(p, "kind", str, file, where)
        if kind not in KINDS:
            raise PublicError(file, f"{where}kind", f"expected one of {', '.join(KINDS)}")
        value = _need(p, "value", (int, float), file, where)
        q = _need(p, "quote", str, file, where)
        problem = quote_problem(value, q)
        if problem:
            raise PublicError(file, f"{where}quote", problem)
        sd = p.get("stddev_pct", [])
        sd = [float(sd)] if isinstance(sd, (int, float)) else [float(x) for x in sd]
        if sd and any(x for x in sd):
            problem = quote_problem([x for x in sd if x], q)
            if problem:
                raise PublicError(file, f"{where}stddev_pct", f"a stated deviation is quoted too: {problem}")
        mid = str(p.get("machine", doc.get("machine", "")))
        if mid not in machines:
            raise PublicError(file, f"{where}machine", f"{mid!r} is not in machines.toml")
        pt = Point(id=_need(p, "id", str, file, where), kind=kind, value=float(value), quote=q, file=file, source=source,
                   machine=mid, test=str(p.get("test", test.get("test", ""))), mode=str(p.get("mode", test.get("mode", ""))),
                   nr_task=str(p.get("nr_task", test.get("nr_task", ""))),
                   tasks=[int(x) for x in p.get("tasks", test.get("tasks", []))], tmp_fs=str(test.get("tmp_fs", "tmpfs")),
                   kernels=kernels, kernel=p.get("kernel"), role=str(p.get("role", "held-out")), stddev_pct=sd)
        if pt.test not in TESTS:
            raise PublicError(file, f"{where}test", f"{pt.test!r}: a will-it-scale test the model runs ({', '.join(TESTS)})")
        if pt.mode not in MODES:
            raise PublicError(file, f"{where}mode", f"expected one of {', '.join(MODES)}")
        if not pt.tasks or any(n < 1 or n > machines[mid].threads for n in pt.tasks):
            raise PublicError(file, f"{where}tasks", f"task counts from 1 to the machine's {machines[mid].threads} threads")
        if pt.role not in ROLES:
            raise PublicError(file, f"{where}role", f"expected one of {', '.join(ROLES)}")
        if kind == "per_task_ops" and pt.kernel not in kernels:
            raise PublicError(file, f"{where}kernel", f"{pt.kernel!r} is not one of [kernels] ({', '.join(kernels)})")
        if kind == "change" and not {"base", "head"} <= set(kernels):
            raise PublicError(file, f"{where}kind", "a change needs [kernels.base] and [kernels.head]")
        if pt.nr_task not in quote and pt.nr_task not in q:
            raise PublicError(file, f"{where}nr_task", f"{pt.nr_task!r} is not in the quoted parameters")
        points.append(pt)
    return points


def load(root: str | Path | None = None) -> tuple[dict[str, Machine], list[Point]]:
    """Every machine and point, checked (a bad file is a PublicError)."""
    base = Path(root) if root is not None else default_dir()
    machines = load_machines(base)
    points: list[Point] = []
    for f in sorted((base / "reports").glob("*.toml")):
        points += load_report(f, machines)
    seen: set[str] = set()
    for p in points:
        if p.id in seen:
            raise PublicError(p.file, "points.id", f"{p.id!r} is used twice")
        seen.add(p.id)
    return machines, points


# -------------------------------------------------------------- profiles --
def _catalog() -> dict[str, dict[str, Any]]:
    return {p.get("name"): p for p in json.loads(_core.catalog_json()).get("profiles", [])}


def engine_derives() -> bool:
    """Whether this build of the engine has the derivation rule (a profile
    file with a [derive] table; docs/profiles.md). Until it has, every
    machine runs on a stand-in."""
    return hasattr(_core, "profile_explain_json")


def _shown_path(profile: str) -> str:
    """A profile as the report shows it: a built-in name, a path in the
    repository relative to its root, else the path as it is."""
    path = Path(profile)
    if not path.is_absolute():
        return profile
    try:
        return str(path.resolve().relative_to(repo_root().resolve()))
    except ValueError:
        return profile


def profile_for(m: Machine, cache: Path) -> tuple[str, str]:
    """(the profile a run names, what it is): the rule's profile of the
    machine where there is one (built in, or validation/public/profiles/
    when the engine has the rule), else a stand-in written to `cache`:
    generic-x86 with the machine's
    threads, sockets and one node per socket. A stand-in is no prediction
    of the rule; every row run on one says so."""
    cat = _catalog()
    if m.profile in cat:
        return m.profile, "rule"
    own = default_dir() / "profiles" / f"{m.profile}.toml"
    if own.is_file():
        # A profile here is one the rule derives: public figures in a
        # [derive] table, the rest the rule's (docs/profiles.md).
        if "derive" not in tomllib.loads(own.read_text(encoding="utf-8")):
            raise PublicError(str(own), "derive", "a public machine's profile is derived by the rule: it needs a [derive] table")
        if engine_derives():
            return str(own), "rule"
    doc = tomllib.loads(cat["generic-x86"]["toml"])
    node = dict(doc["nodes"][0])
    node["mem_mib"] = 1024
    doc["name"] = f"standin-{m.id}"
    doc["description"] = f"stand-in for {m.id} ({m.printed}): generic-x86 with its threads and sockets"
    doc["cpu"]["nr_cpus"] = m.threads
    doc["cpu"]["sockets"] = m.sockets
    doc["nodes"] = [dict(node) for _ in range(m.sockets)]
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"standin-{m.id}.toml"
    write_text_atomic(path, toml_dumps(doc))
    return str(path), "stand-in"


# ------------------------------------------------------------------- runs --
@dataclass
class Run:
    key: str
    config: dict[str, Any]
    tasks: int


def _config(p: Point, m: Machine, kernel: Kernel, tasks: int, profile: str, scale: float) -> dict[str, Any]:
    size = 128
    while size > 8 and tasks * size > REGION_BUDGET_MIB:
        size //= 2
    node_mib = max(2048, math.ceil(3 * tasks * size / m.sockets / 256) * 256)
    workload: dict[str, Any] = {"name": p.test, "mode": MODES[p.mode], "tasks": tasks, "tmp_fs": p.tmp_fs}
    if p.test not in ("tlb_flush2", "read1", "read2"):
        workload["size_mib"] = size
    return {
        "seed": 1,
        "machine": {"profile": profile, "node_mem_mib": [node_mib] * m.sockets},
        "workload": workload,
        "run": {"warmup_s": round(0.02 * scale, 6), "duration_s": round(0.04 * scale, 6)},
        "knobs": dict(kernel.knobs),
    }


def _runs_of(p: Point, m: Machine, profile: str, scale: float) -> dict[str, list[Run]]:
    names = [p.kernel] if p.kind == "per_task_ops" and p.kernel else ["base", "head"]
    out: dict[str, list[Run]] = {}
    for k in names:
        runs = []
        for n in p.tasks:
            cfg = _config(p, m, p.kernels[k], n, profile, scale)
            runs.append(Run(json.dumps(cfg, sort_keys=True), cfg, n))
        out[k] = runs
    return out


Progress = Callable[[int, int], Any]


def _run_all(configs: dict[str, dict[str, Any]], jobs: int, progress: Progress | None) -> dict[str, dict[str, Any]]:
    order = []
    for key, cfg in configs.items():
        try:
            order.append((key, _core.load_json(json.dumps(cfg), "validate --public")))
        except _core.ConfigError as e:
            raise PublicError("validation/public", key, getattr(e, "reason", None) or str(e)) from None
    out: dict[str, dict[str, Any]] = {}
    for rid, raw, err in run_configs(order, jobs):
        if err is not None or raw is None:
            raise PublicError("validation/public", rid[:80], f"the run failed: {err}")
        out[rid] = json.loads(raw)
        if progress:
            progress(len(out), len(order))
    return out


def _ops_per_iteration(workload: Mapping[str, Any]) -> float:
    """Operations in one iteration of a will-it-scale test's loop: a page
    each of its region (page_faultN, tlb_flush1/3), of its 1 MiB region
    (tlb_flush2) or file (read1/2, a read of 4 KiB each); one mmap or malloc."""
    test = workload["name"]
    if test.startswith("page_fault") or test in ("tlb_flush1", "tlb_flush3"):
        return float(workload.get("size_mib", 128) * 256)
    if test in ("tlb_flush2", "read1", "read2"):
        return 256.0
    return 1.0


def _per_task(result: Mapping[str, Any], tasks: int) -> float:
    return float(result["summary"]["ops_per_s"]) / tasks


def _where_time_goes(result: Mapping[str, Any]) -> str:
    """The model's time by kernel entry and its lock waits, the largest
    first: what a missed point's note says the prediction came from."""
    # `sys` is the sum of the kernel entries; the entries and `user` add up.
    tn = {k: float(v) for k, v in (result.get("time_ns") or {}).items()
          if k != "sys" and isinstance(v, (int, float)) and v > 0}
    total = sum(tn.values())
    parts = [f"{k} {100 * v / total:.0f}%" for k, v in sorted(tn.items(), key=lambda kv: -kv[1])[:3]] if total else []
    waits = {k.removesuffix("_wait_ns"): float(v) for k, v in (result.get("locks") or {}).items()
             if k.endswith("_wait_ns") and isinstance(v, (int, float)) and v > 0}
    if waits and total:
        k, v = max(waits.items(), key=lambda kv: kv[1])
        parts.append(f"waiting on {k} {100 * v / total:.0f}%")
    return ", ".join(parts)


def predict(points: Sequence[Point], machines: Mapping[str, Machine], *, jobs: int = 2, cache: Path | None = None,
            progress: Progress | None = None, quick: bool = False) -> dict[str, Any]:
    """Run every point's kernels on its machine's profile and compare."""
    cache = cache or repo_root() / "results" / "public" / "profiles"
    profiles = {mid: profile_for(machines[mid], cache) for mid in sorted({p.machine for p in points})}
    scale = 0.5 if quick else 1.0
    plan = {p.id: _runs_of(p, machines[p.machine], profiles[p.machine][0], scale) for p in points}
    results: dict[str, dict[str, Any]] = {}
    windows: dict[str, dict[str, Any]] = {}
    # A run whose measured window does not hold a whole iteration of every
    # task before it and inside it is run again, with a window made from what
    # the short run measured (an iteration's operations over a task's rate,
    # with room to spare), then four times longer if that still falls short:
    # the same config and seed give the same result, so this is deterministic.
    pending = {r.key: r for runs in plan.values() for rs in runs.values() for r in rs}
    for _round in range(4):
        got = _run_all({k: r.config for k, r in pending.items()}, jobs, progress)
        again: dict[str, Run] = {}
        for key, res in got.items():
            w = window(res, "steady")
            results[key], windows[key] = res, w
            if w["ok"] or _round == 3:
                continue
            r = pending[key]
            longer = json.loads(json.dumps(r.config))
            run = longer["run"]
            rate = _per_task(res, r.tasks)
            per_iter = w.get("ops_per_iteration") or _ops_per_iteration(r.config["workload"])
            if _round == 0 and rate > 0 and per_iter > 0:
                iteration_s = per_iter / rate
                run["warmup_s"] = max(run["warmup_s"], round(2.0 * iteration_s, 6))
                run["duration_s"] = max(run["duration_s"], round(2.5 * iteration_s, 6))
            else:
                run["warmup_s"] *= 4
                run["duration_s"] *= 4
            again[key] = Run(key, longer, r.tasks)
        pending = again
        if not pending:
            break
    rows = [_row(p, machines[p.machine], profiles[p.machine][1], plan[p.id], results, windows) for p in points]
    return {"points": rows, "summary": summarize(rows),
            "profiles": {k: {"profile": _shown_path(v[0]), "kind": v[1]} for k, v in profiles.items()},
            "engine_derives": engine_derives(),
            "targets": {"per_task_ops": TARGET_ABSOLUTE, "change": TARGET_CHANGE, "noisy_change_points": NOISY_CHANGE_POINTS},
            "quick": quick}


def _row(p: Point, m: Machine, profile_kind: str, runs: dict[str, list[Run]], results: Mapping[str, dict[str, Any]],
         windows: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    per = {k: statistics.fmean(_per_task(results[r.key], r.tasks) for r in rs) for k, rs in runs.items()}
    short = [windows[r.key]["reason"] for rs in runs.values() for r in rs if not windows[r.key]["ok"]]
    scaled = sorted({results[r.key]["config"]["workload"].get("size_mib") for rs in runs.values() for r in rs} - {None, 128})
    row: dict[str, Any] = {
        "id": p.id, "kind": p.kind, "role": p.role, "machine": m.id, "machine_printed": m.printed, "vendor": m.vendor,
        "microarchitecture": m.microarchitecture, "test": p.test, "mode": p.mode, "nr_task": p.nr_task, "tasks": p.tasks,
        "kernels": {k: {"commit": p.kernels[k].commit, "subject": p.kernels[k].subject, "knobs": p.kernels[k].knobs}
                    for k in runs},
        "published": p.value, "quote": p.quote, "source": p.source, "file": Path(p.file).name, "profile": profile_kind,
        "stddev_pct": p.stddev_pct,
    }
    if p.kind == "per_task_ops":
        pred = per[p.kernel or "base"]
        err = pred / p.value - 1 if p.value else math.inf
        allowed = TARGET_ABSOLUTE
        row.update(predicted=pred, error=err, allowed=allowed, ok=abs(err) <= allowed)
        main = results[runs[p.kernel or "base"][-1].key]
    else:
        pred = (per["head"] / per["base"] - 1) * 100 if per["base"] > 0 else math.inf
        allowed = TARGET_CHANGE * abs(p.value)
        if p.noise_points() > allowed:
            allowed = max(allowed, NOISY_CHANGE_POINTS)
        err = pred - p.value
        # A change under a hundredth of a point is none, not one of a sign.
        opposite = round(pred, 2) * p.value < 0
        row.update(predicted=pred, error=err, allowed=allowed, ok=abs(err) <= allowed and not opposite, opposite=opposite,
                   noise_points=p.noise_points(), per_task={k: v for k, v in per.items()})
        main = results[runs["base"][-1].key]
    notes = []
    if not row["ok"]:
        if p.kind == "per_task_ops":
            notes.append(f"predicted x{pred / p.value:.2f} of the published figure; the model's time: {_where_time_goes(main)}")
        else:
            what = "of the other sign" if row.get("opposite") else f"{err:+.1f} points off (allowed {allowed:.1f})"
            notes.append(f"{what}: per task {per['base']:,.0f} -> {per['head']:,.0f} ops/s in the model; its base kernel's time: "
                         f"{_where_time_goes(main)}")
    if profile_kind != "rule":
        notes.append("stand-in profile (generic-x86 with the machine's threads and sockets), not one the derivation rule made")
    if scaled:
        notes.append(f"regions of {', '.join(str(s) for s in scaled)} MiB a task instead of 128 (memory scaled, time not)")
    if short:
        notes.append("window too short: " + "; ".join(sorted(set(short))))
    row["note"] = "; ".join(notes)
    return row


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per role and kind: how many points meet their target, the median and
    largest |error|, and the machines."""
    out: dict[str, Any] = {}
    for role in ROLES:
        for kind in KINDS:
            sel = [r for r in rows if r["role"] == role and r["kind"] == kind]
            if not sel:
                continue
            errs = [abs(r["error"]) for r in sel]
            out[f"{role}/{kind}"] = {"points": len(sel), "within": sum(1 for r in sel if r["ok"]),
                                     "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
                                     "machines": sorted({r["machine"] for r in sel}),
                                     "missed": [r["id"] for r in sel if not r["ok"]]}
    out["machines"] = sorted({r["machine"] for r in rows})
    out["vendors"] = sorted({r["vendor"] for r in rows})
    out["points"] = len(rows)
    out["stand_in"] = sorted({r["machine"] for r in rows if r["profile"] != "rule"})
    return out


# -------------------------------------------------------------- rendering --
def _err_cell(r: Mapping[str, Any]) -> str:
    if r["kind"] == "per_task_ops":
        return f"{100 * r['error']:+.1f}%"
    return f"{r['error']:+.1f} pts"


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


ABOUT = """\
## The data

Everything is in `validation/public/`, in the repository:

- `machines.toml`: each test machine as the message that reports on it
  prints it (its threads, sockets and memory are checked against that
  text), its vendor and microarchitecture, and `profile`, the name of the
  machine profile the derivation rule makes for it.
- `profiles/NAME.toml`: that profile, a derived one (docs/profiles.md): a
  `[derive]` table naming the host whose measured costs the rule scales,
  and the same few public figures for every machine, each tagged with its
  source: the threads, sockets and memory the report prints; the clock it
  prints (the base clock: no all-core clock under the test's load is
  published for these boxes, so every machine gets its base clock, decided
  before any was run); the core (a key of `profiles/rule.toml`); L2 per
  core and L3 per socket, DRAM channels and speed from the vendor's
  specification of the SKU. Everything else (memory latency, core-to-core
  transfers, TLBs, every software cost) is the rule's: scaled from the host
  or, where nothing is published, the host's own, marked assumed
  (`foliosim list profiles validation/public/profiles/NAME.toml --explain`).
  Where no such profile exists, or the engine has no derivation rule yet,
  the point runs on a *stand-in*, generic-x86 with the machine's threads
  and sockets, and its row says so: such a row checks the pipeline, not
  the rule.
- `reports/*.toml`: one file per message (a kernel test robot report, a
  mail with a table): its title, message id, URL and date; the test
  (will-it-scale's test, `mode`, `nr_task` and the task counts it means on
  the machine; `quote`, the parameters as printed); `[kernels.base]` and
  `[kernels.head]`, the commits compared, each with the foliosim knobs that
  stand for that kernel and why (fault locking by kernel version, the THP
  setting of the kernel config, the THP alignment of anonymous mmaps); and
  `[[points]]`, each with its `quote`, the line of the message that prints
  it (checked: the value must be one of its numbers).

A point is `per_task_ops`, the per-task throughput one kernel reached
(will-it-scale's per_process_ops or per_thread_ops: LKP's mean over the task
counts of the run of each count's operations per task and second), or
`change`, the change in % between the base and the head kernel. Each is run
through the ordinary run path on its machine's profile, every task count of
it, with the knobs of its kernel; a run is lengthened until every task has
done a whole iteration of the test before the measured window and inside it.
Regions of will-it-scale's 128 MiB a task are scaled down where many tasks
run (memory is scaled, time is not); the note says where.

`role` says whether the derivation rule was shaped on a point (`fit`) or not
(`held-out`, the default); a point is never both, and the two are reported
apart. Every point here is held-out: the rule's own figures
(`profiles/rule.toml`: published per-clock comparisons, SMT throughput and
STREAM efficiency) and each machine's (its report's and its vendor's
specification) were chosen without any result of `validation/public/reports/`,
and no value was changed after one was run. A point that ever shapes the
rule (a constant of `rule.toml` or of the host worked back from it) must be
marked `role = "fit"` and is then reported apart, never as a check.

A change's noise band is the one the message prints (LKP's %stddev of each
figure, carried to the change); a figure printed without one has none.

Run it (no root, about a minute a point on two cores):
`foliosim validate --public [--points ID,...] [--jobs N] [--out DIR]`;
`make validation-public` reruns every point and rewrites this page and
`docs/validation-public.json`.
"""


def render_markdown(rep: Mapping[str, Any], command: str = "make validation-public") -> str:
    s = rep["summary"]
    out = ["# Validation against public results of other machines", "",
           f"Generated by `{command}` (`foliosim validate --public`) from `validation/public/`; do not edit by "
           "hand. How the points are kept and run: [The data](#the-data).", "",
           f"{s['points']} points on {len(s['machines'])} machines ({', '.join(s['vendors'])}): per-task throughput "
           f"(will-it-scale's per_process_ops or per_thread_ops) and the change a commit made, each quoted from the "
           f"message that reports it. Targets: per-task throughput within {100 * TARGET_ABSOLUTE:.0f}%, a change within "
           f"{100 * TARGET_CHANGE:.0f}% of it (or {NOISY_CHANGE_POINTS:.0f} points where the noise the source states for it "
           "is wider) and never of the other sign.", ""]
    if s.get("stand_in") and rep.get("engine_derives") is False:
        out += ["**No derivation rule in this engine** (issue 30, points 1 and 2): every machine ran on a stand-in, "
                "whatever `validation/public/profiles/` holds.", ""]
    if s.get("stand_in"):
        out += [f"**Stand-in profiles**: {', '.join(s['stand_in'])} ran on generic-x86 with the machine's threads and "
                "sockets, not on a profile the derivation rule made: their rows check the pipeline, not the rule.", ""]
    if rep.get("quick"):
        out += ["**Quick run** (`--quick`: half-length windows): not the documented prediction.", ""]
    out += ["## Summary", "", "| role | kind | points | within target | median /error/ | largest /error/ | machines |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for key, v in s.items():
        if "/" not in key:
            continue
        role, kind = key.split("/")
        unit = (lambda x: f"{100 * x:.1f}%") if kind == "per_task_ops" else (lambda x: f"{x:.1f} pts")
        out.append(f"| {role} | {kind} | {v['points']} | {v['within']} | {unit(v['median_abs_error'])} | "
                   f"{unit(v['max_abs_error'])} | {len(v['machines'])} |")
    for role in ROLES:
        sel = [r for r in rep["points"] if r["role"] == role]
        if not sel:
            continue
        out += ["", f"## {'Held-out points' if role == 'held-out' else 'Points the rule was shaped on'}", "",
                "| point | machine | test | kernel | published | predicted | error | target | why it differs |",
                "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
        for r in sel:
            kern = (r["kernels"][next(iter(r["kernels"]))]["commit"] if r["kind"] == "per_task_ops"
                    else f"{r['kernels']['base']['commit']} -> {r['kernels']['head']['commit']}")
            test = f"{r['test']} {r['mode']} x{'/'.join(str(n) for n in r['tasks'])}"
            pub = _num(r["published"]) + (" %" if r["kind"] == "change" else "")
            pred = _num(r["predicted"]) + (" %" if r["kind"] == "change" else "")
            ok = "met" if r["ok"] else "**missed**"
            out.append(f"| [`{r['id']}`]({r['source']['url']}) | {r['machine']} | {test} | {kern} | {pub} | {pred} | "
                       f"{_err_cell(r)} | {ok} | {r['note'].replace('|', '/')} |")
    out += ["", "## Machines", "", "| machine | as printed | profile |", "| --- | --- | --- |"]
    for mid, v in sorted(rep["profiles"].items()):
        printed = next(r["machine_printed"] for r in rep["points"] if r["machine"] == mid)
        shown = f"`{v['profile']}` (derived by the rule)" if v["kind"] == "rule" else "stand-in (generic-x86 resized)"
        out.append(f"| {mid} | {printed} | {shown} |")
    out += ["", "## Sources", ""]
    for src in sorted({json.dumps(r["source"], sort_keys=True) for r in rep["points"]}):
        d = json.loads(src)
        out.append(f"- {d['title']} ({d.get('from', '')}, {d['date']}): <{d['url']}>, message-id `{d['message_id']}`")
    out += ["", ABOUT.rstrip()]
    return "\n".join(out) + "\n"


# -------------------------------------------------------------------- CLI --
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--points", metavar="ID,...", help="only these points (default: all)")
    p.add_argument("--jobs", type=int, default=2, metavar="N", help="runs at once (default 2)")


def cmd_public(args: argparse.Namespace) -> int:
    try:
        machines, points = load()
        if getattr(args, "points", None):
            want = [x.strip() for x in args.points.split(",") if x.strip()]
            unknown = [w for w in want if w not in {p.id for p in points}]
            if unknown:
                raise PublicError("--points", unknown[0], "no such point")
            points = [p for p in points if p.id in want]
        jobs = int(getattr(args, "jobs", 2) or 2)
        if jobs < 1:
            raise PublicError("--jobs", str(jobs), "at least 1")
        show = sys.stderr.isatty() and not getattr(args, "quiet", False)

        def bar(done: int, total: int) -> None:
            if show:
                print(f"\rfoliosim validate --public: {done}/{total} runs", end="", file=sys.stderr, flush=True)

        out = Path(args.out) if getattr(args, "out", None) else repo_root() / "results" / "public"
        rep = predict(points, machines, jobs=jobs, progress=bar, quick=bool(getattr(args, "quick", False)),
                      cache=out / "profiles")
        if show:
            print(file=sys.stderr)
    except PublicError as e:
        print(f"foliosim: error: {e}", file=sys.stderr)
        return 2
    write_text_atomic(out / "public.json", json.dumps(rep, indent=1) + "\n")
    write_text_atomic(out / "public.md", render_markdown(rep, "foliosim validate --public"))
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(rep) + "\n")
    else:
        for key, v in rep["summary"].items():
            if "/" in key:
                print(f"{key:<26} {v['within']:>3} of {v['points']:<3} within target; missed: {', '.join(v['missed']) or 'none'}")
        print(f"wrote {out / 'public.md'}")
    return 0


DOC_JSON = Path("docs") / "validation-public.json"
DOC_MD = Path("docs") / "validation-public.md"


def write_docs(rep: Mapping[str, Any], root: Path | None = None) -> None:
    """docs/validation-public.{json,md} (`make validation-public`)."""
    root = root or repo_root()
    write_text_atomic(root / DOC_JSON, json.dumps(rep, indent=1, ensure_ascii=False) + "\n")
    write_text_atomic(root / DOC_MD, render_markdown(rep))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m foliosim.public", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", metavar="DIR", help="where to write public.json and public.md (default results/public/)")
    p.add_argument("--quick", action="store_true", help="half-length windows (CI)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", "-q", action="store_true")
    p.add_argument("--docs", action="store_true", help="then write docs/validation-public.{json,md} (make validation-public)")
    p.add_argument("--render", action="store_true", help="only rewrite docs/validation-public.md from its JSON")
    add_arguments(p)
    args = p.parse_args(argv)
    if args.render:
        write_text_atomic(repo_root() / DOC_MD, render_markdown(json.loads((repo_root() / DOC_JSON).read_text(encoding="utf-8"))))
        return 0
    rc = cmd_public(args)
    if rc == 0 and args.docs:
        out = Path(args.out) if args.out else repo_root() / "results" / "public"
        write_docs(json.loads((out / "public.json").read_text(encoding="utf-8")))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
