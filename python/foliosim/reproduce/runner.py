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
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import _core
from .expr import Expr, ExprError, Template, evaluate
from .spec import Experiment, ExperimentError, RowSpec, SeriesSpec, variant

__all__ = ["evaluate_experiment", "run_experiments"]

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
    from ..programs import TRACES

    full: list[str] = []
    small: list[str] = []
    for name, (path, is_small) in sorted(traces.items()):
        p = Path(path)
        size = p.stat().st_size / 2**20 if p.exists() else 0.0
        (small if is_small else full).append(f"@{name}: {TRACES[name].what} ({p.name}, {size:.2f} MiB)")
    out = []
    if full:
        out.append("Recordings replayed (perf, `make traces`): " + "; ".join(full) + ".")
    if small:
        out.append("Replayed the committed excerpts, not the recordings (a check that the experiment runs, not its "
                   "result; `make traces` records them): " + "; ".join(small) + ".")
    return " ".join(out)


# ----------------------------------------------------------- sensitivity --
# Off while the variants' own rows are evaluated (no variants of variants).
_SENSITIVITY_ON = True
_JOBS = 2


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
    got = {rid: json.loads(raw) for rid, raw, err in _results(list({v.id: (v.id, v.cfg_json) for _, _, v in todo}.values()), _JOBS)
           if raw is not None and err is None}
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
def _run_one(item: tuple[str, str]) -> tuple[str, str | None, str | None]:
    rid, cfg_json = item
    try:
        return rid, _core.run_json(cfg_json, None), None
    except Exception as e:
        return rid, None, " ".join(str(getattr(e, "reason", None) or e).split()) or type(e).__name__


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _profiles() -> dict[str, Any]:
    return {p.get("name"): p for p in json.loads(_core.catalog_json()).get("profiles", [])}


def run_experiments(exps: Sequence[Experiment], *, jobs: int = 2, progress: Progress | None = None) -> Iterator[dict[str, Any]]:
    """Run `exps` and yield each one's result, in order, as soon as its runs
    and those of the experiments before it are done. Ctrl-C stops the runs:
    the experiment being waited for comes out with ``interrupted`` and the
    rows its finished runs give, and nothing after it. A run that fails is
    an ExperimentError naming the experiment and the run."""
    global _JOBS
    _JOBS = jobs
    profiles = _profiles()
    order: list[tuple[str, str]] = []
    users: dict[str, int] = {}
    owner: dict[str, tuple[Experiment, str]] = {}
    for exp in exps:
        for r in exp.runs.values():
            if r.id not in users:
                order.append((r.id, r.cfg_json))
                owner[r.id] = (exp, r.name)
            users[r.id] = users.get(r.id, 0) + 1
    results: dict[str, dict[str, Any]] = {}
    total = len(order)
    done = 0
    next_exp = 0

    def ready(exp: Experiment) -> bool:
        return all(r.id in results for r in exp.runs.values())

    def release(exp: Experiment) -> None:
        for r in exp.runs.values():
            users[r.id] -= 1
            if users[r.id] == 0:
                results.pop(r.id, None)

    def take(rid: str, raw: str | None, err: str | None) -> None:
        nonlocal done
        if err is not None or raw is None:
            exp, name = owner[rid]
            raise ExperimentError(str(exp.path), f"runs.{name}", f"the run failed: {err}")
        results[rid] = json.loads(raw)
        done += 1
        if progress is not None:
            progress(float(done), float(total))

    it = _results(order, jobs)
    try:
        for rid, raw, err in it:
            take(rid, raw, err)
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
        it.close()
        if next_exp < len(exps):
            yield evaluate_experiment(exps[next_exp], results, interrupted=True, profiles=profiles)
    finally:
        it.close()


def _results(order: list[tuple[str, str]], jobs: int) -> Generator[tuple[str, str | None, str | None], None, None]:
    if not order:
        return
    jobs = max(1, min(jobs, len(order)))
    if jobs == 1:
        for item in order:
            yield _run_one(item)
        return
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    pool = ctx.Pool(processes=jobs, initializer=_ignore_sigint)
    try:
        yield from pool.imap_unordered(_run_one, order, chunksize=1)
        pool.close()
    finally:
        pool.terminate()
        pool.join()
