"""Running experiments: every config through the ordinary run path
(`_core.run_json`, as `foliosim run` does), on a pool of local processes,
then the rules that turn the results into rows.

Configs are run once per invocation even when several experiments share
them (the page-cache promotion experiments do). The output does not depend
on the number of processes: each run is deterministic and the rules see the
results by name, whatever order the runs finished in.
"""

from __future__ import annotations

import json
import math
import os
import queue
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from .. import _core
from .expr import Expr, ExprError, Template, evaluate
from .spec import Experiment, ExperimentError, RowSpec, SeriesSpec, variant

__all__ = ["Status", "default_jobs", "evaluate_experiment", "run_experiments"]

Progress = Callable[[float, float], Any]


class _Published(Mapping[str, Any]):
    """`pub`: the published figures by id; remembers which were read."""

    def __init__(self, figures: dict[str, dict[str, Any]]):
        self.figures = figures
        self.touched: list[str] = []

    def __getitem__(self, key: str) -> Any:
        if key not in self.figures:
            raise KeyError(key)
        if key not in self.touched:
            self.touched.append(key)
        return self.figures[key]["value"]

    def __iter__(self) -> Iterator[str]:
        return iter(self.figures)

    def __len__(self) -> int:
        return len(self.figures)


def _number(v: Any, where: str, exp: Experiment) -> Any:
    if v is None:
        return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    raise exp.err(where, f"a row's value must be a number or None, got {type(v).__name__} {v!r}")


def _loop_envs(loops: list[tuple[str, Any]], env: dict[str, Any], exp: Experiment, where: str) -> Iterator[dict[str, Any]]:
    if not loops:
        yield env
        return
    (name, values), rest = loops[0], loops[1:]
    if isinstance(values, Expr):
        try:
            values = evaluate(values, env)
        except ExprError as e:
            raise exp.err(f"{where}.for.{name}", str(e)) from None
    for v in values:
        yield from _loop_envs(rest, {**env, name: v}, exp, where)


def window(run: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Whether a run measured what its rows read (spec.RunSpec.window), from
    its result: the iterations (Workload::iterations) of the workload's
    tasks before and inside the measured window, and whether they exited."""
    user = [t for t in run.get("per_task") or [] if not t.get("kthread")]
    loops = [t for t in user if t.get("iterations") is not None]
    warm_ns = float(((run.get("config") or {}).get("run") or {}).get("warmup_s", 0.0)) * 1e9
    # Tasks done before the window opened (memhog_then's memhog) are not in it.
    live = [t for t in loops if not (t.get("exited") and t.get("clock_ns", 0) <= warm_ns)]
    before = [t["iterations"] - t["iterations_measured"] for t in live]
    inside = [t["iterations_measured"] for t in live]
    ops = sum(t.get("ops_measured", 0) for t in live)
    out: dict[str, Any] = {
        "kind": kind,
        "tasks": len(live),
        "iterations_before_min": min(before) if before else None,
        "iterations_measured_min": min(inside) if inside else None,
        "iterations_measured": sum(inside) if inside else None,
        "ops_per_iteration": ops / sum(inside) if inside and sum(inside) > 0 else None,
    }
    reason = ""
    if kind == "steady":
        if loops and not live:
            reason = "every task had finished before the measured window opened"
        elif not live:
            reason = "its workload counts no iterations, so the window cannot be checked"
        elif min(before) < 1:
            short = sum(1 for b in before if b < 1)
            reason = f"{short} of {len(live)} tasks had not completed one whole iteration when the measured window opened"
        elif min(inside) < 1:
            short = sum(1 for n in inside if n < 1)
            reason = f"{short} of {len(live)} tasks completed no whole iteration inside the measured window"
    elif kind == "finished":
        running = sum(1 for t in user if not t.get("exited"))
        if running:
            reason = f"{running} of {len(user)} tasks had not finished when the run ended"
    elif kind == "iterated":
        short = sum(1 for t in loops if (t.get("iterations") or 0) < 1)
        if not loops:
            reason = "its workload counts no iterations"
        elif short:
            reason = f"{short} of {len(loops)} tasks completed no whole iteration"
    out["ok"] = not reason
    out["reason"] = reason
    return out


class _Reads:
    """The runs the rule being evaluated has read, directly (a key of a
    _RunResult) or through a `let` value (whose own reads `deps` keeps): a
    row that reads a run whose window is short says so."""

    def __init__(self) -> None:
        self.deps: dict[str, set[str]] = {}
        self.now: set[str] = set()

    def __call__(self, name: str) -> None:
        self.now.update(self.deps.get(name, ()))


class _RunResult(dict):
    """A run's result as the rules see it: reading a key marks the run read."""

    def __getitem__(self, key: Any) -> Any:
        if _READS is not None:
            _READS.now.add(dict.__getitem__(self, "name"))
        return dict.__getitem__(self, key)


class _Missing(Exception):
    """A rule read a run that did not finish (interrupted)."""


_READS: _Reads | None = None


def _ev(e: Expr, env: Mapping[str, Any], exp: Experiment, where: str, partial: bool) -> Any:
    try:
        return evaluate(e, env, _READS)
    except ExprError as err:
        if partial:
            raise _Missing() from None
        raise exp.err(where, str(err)) from None


def _render(t: Template, env: Mapping[str, Any], exp: Experiment, where: str, partial: bool) -> str:
    try:
        return t.render(env, _READS)
    except ExprError as err:
        if partial:
            raise _Missing() from None
        raise exp.err(where, str(err)) from None


def _rows(exp: Experiment, spec: RowSpec, env: dict[str, Any], partial: bool,
          windows: Mapping[str, dict[str, Any]]) -> Iterator[tuple[str | None, dict[str, Any]]]:
    where = f"rows[{spec.index}]"
    f = spec.fields
    for e in _loop_envs(spec.loops, env, exp, where):
        if _READS is not None:
            _READS.now = set()
        try:
            if spec.when is not None and not _ev(spec.when, e, exp, f"{where}.when", partial):
                continue
            pub = _Published(exp.published)
            published = None
            if "published" in f:
                published = _number(_ev(f["published"], {**e, "pub": pub}, exp, f"{where}.published", partial), f"{where}.published", exp)
                if published is not None and not pub.touched:
                    raise exp.err(f"{where}.published", "a published figure comes from [published] (pub.ID), with its source")
            noise = None
            if "noise" in f and published is not None:
                read = list(pub.touched)
                pub.touched.clear()
                noise = _number(_ev(f["noise"], {**e, "pub": pub}, exp, f"{where}.noise", partial), f"{where}.noise", exp)
                if noise is not None and not pub.touched:
                    raise exp.err(f"{where}.noise", "a noise band is one the source states: read it from [published] (pub.ID)")
                if noise is not None and noise < 0:
                    raise exp.err(f"{where}.noise", f"a noise band is a half-width, not negative ({noise!r})")
                pub.touched[:0] = [k for k in read if k not in pub.touched]
            row: dict[str, Any] = {
                "label": _render(f["label"], e, exp, f"{where}.label", partial),
                "metric": _render(f["metric"], e, exp, f"{where}.metric", partial),
                "unit": _render(f["unit"], e, exp, f"{where}.unit", partial) if "unit" in f else "",
                "published": published,
                "seed": published,
                "simulated": _number(_ev(f["simulated"], e, exp, f"{where}.simulated", partial), f"{where}.simulated", exp),
            }
            if noise is not None:
                row["noise"] = noise
            row["_reads"] = sorted(_READS.now if _READS else ())
            short = [windows[n] for n in row["_reads"] if n in windows and not windows[n]["ok"]]
            row["note"] = ""
            if "note" in f:
                ne = {**e, "this": row}
                if "note_when" not in f or _ev(f["note_when"], ne, exp, f"{where}.note_when", partial):
                    row["note"] = _render(f["note"], ne, exp, f"{where}.note", partial)
            if pub.touched:
                row["sources"] = [{"figure": k, "source": exp.published[k]["source"], "where": exp.published[k]["where"],
                                   "quote": exp.published[k]["quote"]} for k in pub.touched]
            h = f.get("headline")
            if isinstance(h, Expr):
                h = _ev(h, e, exp, f"{where}.headline", partial)
            if h:
                row["headline"] = True
            if short:
                # A figure from a window that did not hold what it reports.
                row["window"] = "; ".join(f"{w['label']}: {w['reason']}" for w in short)
                row["note"] = f"Window too short ({row['window']})." + (f" {row['note']}" if row["note"] else "")
        except _Missing:
            continue
        yield f.get("id"), row


def _series(exp: Experiment, spec: SeriesSpec, env: dict[str, Any], partial: bool) -> Iterator[dict[str, Any]]:
    where = f"series[{spec.index}]"
    f = spec.fields
    for e in _loop_envs(spec.loops, env, exp, where):
        try:
            if spec.when is not None and not _ev(spec.when, e, exp, f"{where}.when", partial):
                continue
            s = {"name": _render(f["name"], e, exp, f"{where}.name", partial),
                 "x": _ev(f["x"], e, exp, f"{where}.x", partial), "y": _ev(f["y"], e, exp, f"{where}.y", partial),
                 "xlabel": _render(f["xlabel"], e, exp, f"{where}.xlabel", partial),
                 "ylabel": _render(f["ylabel"], e, exp, f"{where}.ylabel", partial)}
        except _Missing:
            continue
        for k in ("x", "y"):
            if not isinstance(s[k], list):
                raise exp.err(f"{where}.{k}", f"expected a list, got {type(s[k]).__name__}")
            s[k] = [None if isinstance(v, float) and not math.isfinite(v) else v for v in s[k]]
        yield s


def _profile_values(name: str) -> dict[str, Any]:
    """`profile` in the rules: the experiment's machine profile as loaded (a
    derived one completed by the rule of docs/profiles.md), so that a note
    can name a cost and where it comes from without typing it: `value` and
    `source` (measured, public, derived, assumed) by path, as `foliosim list
    profiles NAME --explain` prints them (`nodes[0].read_bw_gbps`), and the
    same of its `host` (empty unless the profile is derived)."""
    def load(n: str) -> dict[str, Any]:
        j = json.loads(_core.profile_explain_json(n))
        return {"name": j["name"], "host_name": j.get("host"),
                "value": {v["path"]: v["value"] for v in j["values"]},
                "source": {v["path"]: v["kind"] for v in j["values"]}}
    try:
        out = load(name)
        out["host"] = load(out["host_name"]) if out["host_name"] else {}
    except (_core.ConfigError, OSError):
        return {}
    return out


def _profile(name: str, profiles: Mapping[str, Any]) -> dict[str, Any]:
    text = (profiles.get(name) or {}).get("toml")
    if text is None and os.path.isfile(name):
        try:
            with open(name, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            text = None
    return {"name": name, "toml": text}


def evaluate_experiment(exp: Experiment, results: Mapping[str, dict[str, Any]], *, interrupted: bool = False,
                        profiles: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The row contract of `exp` from its runs' results (by run id). With
    `interrupted`, runs may be missing: the rows that read them are left out."""
    global _READS
    partial = interrupted or any(r.id not in results for r in exp.runs.values())
    env: dict[str, Any] = {"experiment": {"name": exp.name, "title": exp.title}, "config": exp.base}
    runs: dict[str, Any] = {}
    windows: dict[str, dict[str, Any]] = {}
    for r in exp.runs.values():
        if r.id in results:
            runs[r.name] = _RunResult({**results[r.id], "name": r.name, "label": r.label, "params": r.params})
            windows[r.name] = {"run": r.name, "label": r.label, **window(results[r.id], r.window)}
    env["runs"] = runs
    env.update(runs)
    for s, names in exp.sweeps.items():
        env[s] = [runs[n] for n in names if n in runs]
    env["pub"] = _Published(exp.published)
    env["profile"] = _profile_values(exp.profile)
    _READS = reads = _Reads()
    try:
        for name, rule in exp.lets:
            reads.now = set()
            try:
                env[name] = _ev(rule, env, exp, f"let.{name}", partial)
            except _Missing:
                continue
            reads.deps[name] = set(reads.now)
        rows: list[dict[str, Any]] = []
        by_id: dict[str, Any] = {}
        for spec in exp.rows:
            for rid, row in _rows(exp, spec, env, partial, windows):
                rows.append(row)
                if rid:
                    by_id[rid] = row
    finally:
        _READS = None
    if not partial and sum(1 for r in rows if r.get("headline")) > 1:
        raise exp.err("headline", "more than one row came out as the headline")
    env["row"] = by_id
    notes: list[str] = []
    for n in exp.notes:
        for e in _loop_envs(n.loops, env, exp, f"notes[{n.index}]"):
            try:
                if n.when is not None and not _ev(n.when, e, exp, f"notes[{n.index}].when", partial):
                    continue
                notes.append(_render(n.text, e, exp, f"notes[{n.index}]", partial))
            except _Missing:
                continue
    if exp.traces:
        notes.append(_trace_note(exp.traces))
    series = [s for spec in exp.series for s in _series(exp, spec, env, partial)]
    row_reads: list[list[str]] = [r.pop("_reads", []) for r in rows]
    if exp.sensitivity and not partial and _SENSITIVITY_ON:
        _sensitivity(exp, results, rows, row_reads)
    out: dict[str, Any] = {
        "name": exp.name,
        "title": exp.title,
        "mechanism": exp.mechanism,
        "rows": rows,
        "notes": notes,
    }
    if series:
        out["series"] = series
    if exp.sensitivity:
        from .spec import profile_number

        cfgs = [json.loads(r.cfg_json) for r in exp.runs.values()]
        # Each cost's profile value, when every run has the same (else None).
        values = {c: {profile_number(cfg, c) for cfg in cfgs} for c in exp.sensitivity}
        out["sensitivity"] = {"costs": {c: v.pop() if len(v) == 1 else None for c, v in values.items()}, "factors": exp.factors}
    out["seed"] = exp.seed
    out["profile"] = _profile(exp.profile, profiles or {})
    out["configs"] = [{"label": r.label, "config": json.loads(r.cfg_json)} for r in exp.runs.values() if r.id in results]
    out["windows"] = list(windows.values())
    out["sources"] = exp.sources
    out["interrupted"] = bool(partial)
    return out


def _trace_note(traces: Mapping[str, tuple[str, bool]]) -> str:
    """Which recordings the runs replayed (`workload.path = "@NAME"`)."""
    from ..programs import TRACES, parse_ref

    full: list[str] = []
    small: list[str] = []
    chosen: list[str] = []
    for name, (path, is_small) in sorted(traces.items()):
        p = Path(path)
        size = p.stat().st_size / 2**20 if p.exists() else 0.0
        base, excerpt = parse_ref(name)
        what = f"@{name}: {TRACES[base].what} ({p.name}, {size:.2f} MiB)"
        (chosen if excerpt else small if is_small else full).append(what)
    out = []
    if full:
        out.append("Recordings replayed (perf, `make traces`): " + "; ".join(full) + ".")
    if chosen:
        out.append("Committed excerpts replayed as the experiment asks (a few files of the recorded program, "
                   "not the whole of it): " + "; ".join(chosen) + ".")
    if small:
        out.append("Replayed the committed excerpts, not the recordings (a check that the experiment runs, not its "
                   "result; `make traces` records them): " + "; ".join(small) + ".")
    return " ".join(out)


# ----------------------------------------------------------- sensitivity --
# Off while the variants' own rows are evaluated (no variants of variants).
_SENSITIVITY_ON = True


def _sensitivity(exp: Experiment, results: Mapping[str, dict[str, Any]], rows: list[dict[str, Any]],
                 reads: list[list[str]]) -> None:
    """Rerun the runs the published rows read with each [sensitivity] cost
    at each factor, and give each such row its value there
    (`row["sensitivity"]`: cost, factor, value of the cost, simulated)."""
    global _SENSITIVITY_ON
    shown = [i for i, r in enumerate(rows) if r.get("published") is not None and r.get("simulated") is not None]
    if not shown:
        return
    names = sorted({n for i in shown for n in reads[i] if n in exp.runs})
    todo = [(c, f, variant(exp, exp.runs[n], c, f)) for c in exp.sensitivity for f in exp.factors for n in names]
    items = {v.id: (v.id, v.cfg_json, f"{exp.name} {v.name} ({c} x{f:g})") for c, f, v in todo}
    pool = _POOL if _POOL is not None else _Pool(default_jobs())
    try:
        got = {rid: json.loads(raw) for rid, raw, err in pool.run(list(items.values())) if raw is not None and err is None}
    finally:
        if pool is not _POOL:
            pool.close()
    for i in shown:
        rows[i]["sensitivity"] = []
    _SENSITIVITY_ON = False
    try:
        for c in exp.sensitivity:
            for f in exp.factors:
                over = {exp.runs[v.name].id: got[v.id] for cc, ff, v in todo if cc == c and ff == f and v.id in got}
                if len(over) != len(names):
                    raise ExperimentError(str(exp.path), f"sensitivity.costs.{c}", f"a run at x{f:g} failed")
                alt = evaluate_experiment(exp, {**results, **over})["rows"]
                cfg = json.loads(next(v for cc, ff, v in todo if cc == c and ff == f).cfg_json)
                for i in shown:
                    rows[i]["sensitivity"].append({"cost": c, "factor": f, "value": cfg["machine"]["costs"][c],
                                                   "simulated": alt[i]["simulated"] if i < len(alt) else None})
    finally:
        _SENSITIVITY_ON = True


# ------------------------------------------------------------------ runs --
class Status(NamedTuple):
    """Where a batch of runs is, for a progress line: runs finished and
    known (a sensitivity variant counts once its experiment asks for it),
    each run in progress as (label, simulated s, the run's end in simulated
    s), host seconds since the first run started."""

    done: int
    total: int
    running: list[tuple[str, float, float]]
    elapsed_s: float

    def text(self) -> str:
        """`12/154 runs, 3m05s; now mthp-memory kbuild_baseline at 8.2 of 600 sim s, ...`"""
        from ..progress import fmt_s

        now = ", ".join(f"{label} at {sim:.1f} of {end:.0f} sim s" for label, sim, end in self.running)
        return f"{self.done}/{self.total} runs, {fmt_s(self.elapsed_s)}" + (f"; now {now}" if now else "")


StatusFn = Callable[[Status], Any]

# A worker's slot in the pool's shared array: the run it is on (-1: none),
# that run's simulated time and its end, as its progress callback reports.
_SLOTS: Any = None
_SLOT = -1


def default_jobs() -> int:
    """Runs at a time: $FOLIOSIM_JOBS, else the host's CPUs. Each run is a
    process of its own (a replayed build holds a few GiB), so a shared
    host caps it (`FOLIOSIM_JOBS=2 make reproductions`)."""
    env = os.environ.get("FOLIOSIM_JOBS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ExperimentError("FOLIOSIM_JOBS", env, "expected a whole number of runs at a time, at least 1")
        return int(env)
    return os.cpu_count() or 1


def _init_worker(slots: Any, claimed: Any) -> None:
    global _SLOTS, _SLOT
    _ignore_sigint()
    with claimed.get_lock():
        _SLOT = claimed.value
        claimed.value += 1
    _SLOTS = slots


def _run_one(item: tuple[int, str]) -> tuple[int, str | None, str | None]:
    seq, cfg_json = item
    slots, base = _SLOTS, 3 * _SLOT
    report = None
    if slots is not None and 0 <= base < len(slots):
        slots[base], slots[base + 1], slots[base + 2] = seq, 0.0, 0.0

        def report(sim_s: float, end_s: float) -> bool:
            slots[base + 1], slots[base + 2] = sim_s, end_s
            if _TICK is not None:
                _TICK()
            return True
    try:
        return seq, _core.run_json(cfg_json, report), None
    except Exception as e:
        return seq, None, " ".join(str(getattr(e, "reason", None) or e).split()) or type(e).__name__
    finally:
        if report is not None:
            slots[base] = -1.0


# In a run made in this process (one job), the pool's status line.
_TICK: Callable[[], None] | None = None


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Pool:
    """At most `jobs` runs at a time, each in a process of its own (one job:
    in this process), shared by the experiments' runs and the sensitivity
    variants their rules ask for, which go before the runs still waiting
    (the rules wait for them). `status` hears where the runs are about once
    a second and when one finishes."""

    def __init__(self, jobs: int, status: StatusFn | None = None):
        self.jobs = max(1, jobs)
        self.status = status
        self.labels: list[str] = []
        self.pending: deque[tuple[int, str]] = deque()
        self.finished: dict[int, tuple[str | None, str | None]] = {}
        self.inflight = 0
        self.done = 0
        self.results: queue.SimpleQueue[tuple[int, str | None, str | None]] = queue.SimpleQueue()
        self.pool: Any = None
        self.slots: Any = [-1.0, 0.0, 0.0] if self.jobs == 1 else None
        self.start = time.monotonic()
        self.shown = 0.0
        self.every_s = 1.0

    def add(self, items: Sequence[tuple[str, str, str]], first: bool = False) -> list[int]:
        """Queue runs (id, config JSON, label); their sequence numbers."""
        seqs = list(range(len(self.labels), len(self.labels) + len(items)))
        self.labels += [label for _, _, label in items]
        entries = [(n, cfg) for n, (_, cfg, _) in zip(seqs, items, strict=True)]
        if first:
            self.pending.extendleft(reversed(entries))
        else:
            self.pending.extend(entries)
        return seqs

    def run(self, items: Sequence[tuple[str, str, str]]) -> list[tuple[str, str | None, str | None]]:
        """Run `items` before anything queued and return (id, result, error)
        for each, in order."""
        seqs = self.add(items, first=True)
        out: dict[int, tuple[str | None, str | None]] = {}
        want = set(seqs)
        while want:
            n, raw, err = self.next(want)
            want.discard(n)
            out[n] = (raw, err)
        return [(rid, *out[n]) for n, (rid, _, _) in zip(seqs, items, strict=True)]

    def next(self, among: set[int]) -> tuple[int, str | None, str | None]:
        """The next run of `among` to finish (the others that finish
        meanwhile are kept for a later call)."""
        while True:
            for n in among:
                if n in self.finished:
                    return (n, *self.finished.pop(n))
            self._fill()
            if self.inflight == 0:
                raise RuntimeError("foliosim: internal: waiting for runs that were never queued")
            try:
                n, raw, err = self.results.get(timeout=1.0)
            except queue.Empty:
                self._tick()
                continue
            self.inflight -= 1
            self.done += 1
            self.finished[n] = (raw, err)
            self._tick(force=True)

    def _fill(self) -> None:
        global _SLOTS, _SLOT, _TICK
        if self.jobs == 1:
            if self.pending and self.inflight == 0:
                _SLOTS, _SLOT, _TICK = self.slots, 0, self._tick
                try:
                    self.results.put(_run_one(self.pending.popleft()))
                finally:
                    _SLOTS, _SLOT, _TICK = None, -1, None
                self.inflight += 1
            return
        while self.pending and self.inflight < self.jobs:
            if self.pool is None:
                import multiprocessing as mp

                ctx = mp.get_context("spawn")
                self.slots = ctx.Array("d", [-1.0, 0.0, 0.0] * self.jobs, lock=False)
                claimed = ctx.Value("i", 0)
                self.pool = ctx.Pool(processes=self.jobs, initializer=_init_worker, initargs=(self.slots, claimed))
            item = self.pending.popleft()
            self.pool.apply_async(_run_one, (item,), callback=self.results.put,
                                  error_callback=lambda e, n=item[0]: self.results.put((n, None, str(e) or type(e).__name__)))
            self.inflight += 1

    def _tick(self, force: bool = False) -> None:
        if self.status is None:
            return
        now = time.monotonic()
        if not force and now - self.shown < self.every_s:
            return
        self.shown = now
        running = []
        slots = self.slots
        if slots is not None:
            for base in range(0, len(slots), 3):
                n = int(slots[base])
                if 0 <= n < len(self.labels):
                    running.append((self.labels[n], float(slots[base + 1]), float(slots[base + 2])))
        self.status(Status(self.done, len(self.labels), running, now - self.start))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None


# The pool of the run_experiments in progress (its experiments' sensitivity
# variants go to it).
_POOL: _Pool | None = None


def _profiles() -> dict[str, Any]:
    return {p.get("name"): p for p in json.loads(_core.catalog_json()).get("profiles", [])}


def run_experiments(exps: Sequence[Experiment], *, jobs: int | None = None, progress: Progress | None = None,
                    status: StatusFn | None = None) -> Iterator[dict[str, Any]]:
    """Run `exps` and yield each one's result, in order, as soon as its runs
    and those of the experiments before it are done. At most `jobs` runs at
    a time (default_jobs()), sensitivity variants included; `progress(done,
    total)` hears each finished run, `status` where the runs are (Status)
    about once a second. Ctrl-C stops the runs: the experiment being waited
    for comes out with ``interrupted`` and the rows its finished runs give,
    and nothing after it. A run that fails is an ExperimentError naming the
    experiment and the run."""
    global _POOL
    profiles = _profiles()
    order: list[tuple[str, str, str]] = []
    users: dict[str, int] = {}
    owner: dict[str, tuple[Experiment, str]] = {}
    for exp in exps:
        for r in exp.runs.values():
            if r.id not in users:
                order.append((r.id, r.cfg_json, f"{exp.name} {r.name}"))
                owner[r.id] = (exp, r.name)
            users[r.id] = users.get(r.id, 0) + 1
    results: dict[str, dict[str, Any]] = {}
    pool = _Pool(jobs if jobs is not None else default_jobs(), status)
    seqs = pool.add(order)
    rid_of = {n: rid for n, (rid, _, _) in zip(seqs, order, strict=True)}
    waiting = set(seqs)
    next_exp = 0

    def ready(exp: Experiment) -> bool:
        return all(r.id in results for r in exp.runs.values())

    def release(exp: Experiment) -> None:
        for r in exp.runs.values():
            users[r.id] -= 1
            if users[r.id] == 0:
                results.pop(r.id, None)

    def take(rid: str, raw: str | None, err: str | None) -> None:
        if err is not None or raw is None:
            exp, name = owner[rid]
            raise ExperimentError(str(exp.path), f"runs.{name}", f"the run failed: {err}")
        results[rid] = json.loads(raw)
        if progress is not None:
            progress(float(len(seqs) - len(waiting)), float(len(seqs)))

    outer, _POOL = _POOL, pool
    try:
        while waiting:
            n, raw, err = pool.next(waiting)
            waiting.discard(n)
            take(rid_of[n], raw, err)
            while next_exp < len(exps) and ready(exps[next_exp]):
                exp = exps[next_exp]
                out = evaluate_experiment(exp, results, profiles=profiles)
                release(exp)
                next_exp += 1
                yield out
        while next_exp < len(exps):  # experiments with no run left to wait for
            exp = exps[next_exp]
            out = evaluate_experiment(exp, results, profiles=profiles)
            release(exp)
            next_exp += 1
            yield out
    except KeyboardInterrupt:
        pool.close()
        if next_exp < len(exps):
            yield evaluate_experiment(exps[next_exp], results, interrupted=True, profiles=profiles)
    finally:
        _POOL = outer
        pool.close()


def _results(order: list[tuple[str, str]], jobs: int) -> Iterator[tuple[str, str | None, str | None]]:
    """(id, result JSON, error) of each run of `order` (id, config JSON) as
    it finishes, at most `jobs` at a time."""
    pool = _Pool(jobs)
    try:
        seqs = pool.add([(rid, cfg, rid) for rid, cfg in order])
        rid_of = {n: rid for n, (rid, _) in zip(seqs, order, strict=True)}
        waiting = set(seqs)
        while waiting:
            n, raw, err = pool.next(waiting)
            waiting.discard(n)
            yield rid_of[n], raw, err
    finally:
        pool.close()
