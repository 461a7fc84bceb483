"""`foliosim sweep SPEC.toml`: a grid of runs, one Parquet row per run.

A spec is TOML::

    base = "../configs/default.toml"   # optional: a config file (relative to the spec)
    [config]                           # optional: config keys laid over `base`
    run.duration_s = 0.2

    [grid]                             # Cartesian product: every value of every key
    "workload.tasks" = [1, 2, 4, 8]    # keys are TOML dotted keys into the config,
    seed = [1, 2, 3]                   # as for `foliosim run --set`
    knobs."kernel/mm/transparent_hugepage/enabled" = ["always", "never"]

    [[zip]]                            # zipped: the lists advance together
    "workload.name" = ["page_fault1", "mmap1"]
    "workload.size_mib" = [16, 4]

Points are the product of the grid's keys (in file order, the last varying
fastest) and of each [[zip]] group. Each point is keyed by a stable hash of
its *normalised* config (every default filled in, keys sorted), so two
spellings of one config are one point, and a point already in the output
folder is never run again: an interrupted sweep resumes where it stopped.

Output (default ``results/sweeps/<spec stem>/``): a Parquet dataset, one file
``part-<point>.parquet`` per finished run, each written atomically the moment
its run ends; ``pandas.read_parquet(DIR)`` or :func:`read_results` reads it
(one row per run). Columns: ``index``, ``point``, one column per swept key
(named by its dotted key), ``config`` (the normalised config, JSON), and the
result flattened: ``summary.*``, ``vmstat.*``, ``time_ns.*``, ``locks.*``,
``memory.*``, ``sim_time_s``, ``host_time_s``, ``checker.*``.
``_sweep.json`` describes the points.

Runs go to a local process pool (``jobs`` processes) or, with ``ray``, to a
Ray cluster (``pip install 'foliosim[ray]'``); both give identical rows but
for ``host_time_s``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import signal
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _core
from . import config as _config
from ._core import ConfigError
from .result import atomic_write, write_text_atomic

__all__ = [
    "MAX_POINTS",
    "Point",
    "Spec",
    "SweepError",
    "SweepSummary",
    "count_points",
    "flatten_result",
    "load_spec",
    "point_id",
    "read_results",
    "run_sweep",
]

PART_PREFIX = "part-"
MANIFEST = "_sweep.json"


class SweepError(ConfigError):
    """Bad sweep spec or a failed point; str() is one line naming where."""


def _one_line(s: object) -> str:
    return " ".join(str(s).split())


@dataclass
class Point:
    index: int
    params: list[tuple[tuple[str, ...], Any]]
    config: dict[str, Any]
    cfg_json: str = ""
    id: str = ""

    def describe(self) -> str:
        return ", ".join(f"{key_name(p)}={json.dumps(v)}" for p, v in self.params) or "(base config)"


@dataclass
class Spec:
    path: str
    text: str
    base: dict[str, Any]
    axes: list[list[list[tuple[tuple[str, ...], Any]]]]
    keys: list[tuple[str, ...]]
    points: list[Point] = field(default_factory=list)
    duplicates: int = 0


@dataclass
class SweepSummary:
    out: Path
    points: int
    duplicates: int
    already_done: int
    ran: int
    failed: list[str]
    interrupted: bool
    host_s: float
    runner: str

    def as_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "points": self.points, "duplicates": self.duplicates,
                "already_done": self.already_done, "ran": self.ran, "failed": self.failed,
                "interrupted": self.interrupted, "host_s": self.host_s, "runner": self.runner}


# ------------------------------------------------------------------- keys --
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def key_name(path: Iterable[str]) -> str:
    """A key path as a TOML dotted key: ("knobs", "vm.x") -> 'knobs."vm.x"'."""
    return ".".join(p if _BARE.match(p) else json.dumps(p) for p in path)


def _parse_key(spec: str, text: str, table: str, key: str) -> tuple[str, ...]:
    try:
        d = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError:
        raise _err(spec, text, table, key, "not a valid TOML dotted key") from None
    path: list[str] = []
    while isinstance(d, dict):
        (k, d), = d.items()
        path.append(k)
    return tuple(path)


def _line_of(text: str, key: str) -> int | None:
    last = key.split(".")[-1].strip('"\'')
    for i, line in enumerate(text.splitlines()):
        if last and last in line.split("=")[0]:
            return i + 1
    return None


def _err(spec: str, text: str, table: str, key: str, reason: str) -> SweepError:
    full = f"{table}.{key}" if table and key else (table or key)
    line = _line_of(text, key) if key else None
    where = f"{spec}:{line}" if line else spec
    e = SweepError(f"{where}: {full}: {reason}")
    e.file, e.line, e.key, e.reason = spec, line, full, reason
    return e


def _leaves(spec: str, text: str, table: str, t: dict[str, Any]) -> list[tuple[tuple[str, ...], list[Any]]]:
    """[grid] or a [[zip]] entry -> [(key path, values)] in file order."""
    out: list[tuple[tuple[str, ...], list[Any]]] = []

    def walk(prefix: tuple[str, ...], v: Any, shown: str) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk((*prefix, k), x, key_name((*prefix, k)))
        elif isinstance(v, list):
            if not v:
                raise _err(spec, text, table, shown, "empty list of values")
            out.append((prefix, v))
        else:
            raise _err(spec, text, table, shown, f"expected a list of values, got {type(v).__name__}")

    for k, v in t.items():
        walk(_parse_key(spec, text, table, k) if "." in k or '"' in k else (k,), v, k)
    return out


# ------------------------------------------------------------------- spec --
def _set(cfg: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    d = cfg
    for p in path[:-1]:
        nxt = d.get(p)
        if not isinstance(nxt, dict):
            nxt = d[p] = {}
        d = nxt
    d[path[-1]] = value


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def point_id(normalised: dict[str, Any] | str) -> str:
    """The stable key of a point: SHA-256 of its normalised config as
    canonical JSON (keys sorted), first 16 hex digits."""
    cfg = json.loads(normalised) if isinstance(normalised, str) else normalised
    return hashlib.sha256(_canonical(cfg).encode("utf-8")).hexdigest()[:16]


#: The most points `foliosim sweep` runs without `--yes`: a grid larger than
#: this is more likely a mistake (a list typed where a range was meant) than
#: a plan, and its points alone take minutes to check and memory to hold.
MAX_POINTS = 10_000


def count_points(axes: list[list[Any]]) -> int:
    """Points of a grid: the product of its axes' lengths (duplicates too)."""
    return math.prod(len(a) for a in axes)


def _grid_line(text: str) -> int | None:
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith(("[grid]", "[[zip]]")):
            return i
    return None


def load_spec(path: str | os.PathLike, *, max_points: int | None = None,
              on_count: Callable[[int], Any] | None = None) -> Spec:
    """Read and expand a spec; every point is validated (SweepError /
    ConfigError naming the spec, line and key) before anything runs. The
    points are counted first: `on_count` hears how many, and more than
    `max_points` (None: no limit) is a SweepError before any is made."""
    name = os.fspath(path)
    text = _config.read_text(name)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _config._tomllib_error(name, e) from None
    known = {"base", "config", "grid", "zip"}
    for k in doc:
        if k not in known:
            raise _err(name, text, "", k, f"unknown key (expected {', '.join(sorted(known))})")
    base: dict[str, Any] = {}
    if "base" in doc:
        if not isinstance(doc["base"], str):
            raise _err(name, text, "", "base", "expected a path to a config file")
        bpath = Path(name).parent / doc["base"]
        btext = _config.read_text(bpath)
        _core.load_toml(btext, str(bpath))  # its own errors name its own lines
        # Its paths are relative to it, not to the spec: made absolute here.
        base = json.loads(_core.resolve_paths(_config._dumps(tomllib.loads(btext), str(bpath)), str(bpath),
                                              _config.base_dir_of(str(bpath))))
    inline = doc.get("config", {})
    if not isinstance(inline, dict):
        raise _err(name, text, "", "config", "expected a table")
    _config._merge(base, inline, "")
    axes: list[list[list[tuple[tuple[str, ...], Any]]]] = []
    keys: list[tuple[str, ...]] = []
    grid = doc.get("grid", {})
    if not isinstance(grid, dict):
        raise _err(name, text, "", "grid", "expected a table")
    for kp, values in _leaves(name, text, "grid", grid):
        axes.append([[(kp, v)] for v in values])
        keys.append(kp)
    zips = doc.get("zip", [])
    if not isinstance(zips, list) or not all(isinstance(z, dict) for z in zips):
        raise _err(name, text, "", "zip", "expected [[zip]] tables")
    for zi, z in enumerate(zips):
        leaves = _leaves(name, text, f"zip[{zi}]", z)
        if not leaves:
            raise _err(name, text, f"zip[{zi}]", "", "no keys")
        n = len(leaves[0][1])
        for kp, values in leaves:
            if len(values) != n:
                raise _err(name, text, f"zip[{zi}]", key_name(kp),
                           f"{len(values)} values where {key_name(leaves[0][0])} has {n}: zipped lists must have equal lengths")
        axes.append([[(kp, values[i]) for kp, values in leaves] for i in range(n)])
        keys.extend(kp for kp, _ in leaves)
    seen: set[tuple[str, ...]] = set()
    for kp in keys:
        if kp in seen:
            raise _err(name, text, "grid", key_name(kp), "swept twice (in [grid] and/or [[zip]])")
        seen.add(kp)
    n = count_points(axes)
    if max_points is not None and n > max_points:
        line = _grid_line(text)
        where = f"{name}:{line}" if line else name
        err = SweepError(f"{where}: grid: {n:,} points, more than the {max_points:,} a sweep runs without --yes "
                         "(--yes runs them all)")
        err.file, err.line, err.key, err.reason = name, line, "grid", f"{n:,} points"
        raise err
    if on_count is not None:
        on_count(n)
    spec = Spec(name, text, base, axes, keys)
    ids: set[str] = set()
    for i, combo in enumerate(itertools.product(*axes)):
        params = [kv for group in combo for kv in group]
        cfg = json.loads(json.dumps(base))
        for kp, v in params:
            _set(cfg, kp, v)
        pt = Point(i, params, cfg)
        try:
            pt.cfg_json = _core.load_json(_config._dumps(cfg, name), f"{name} point {i}", _config.base_dir_of(name))
        except ConfigError as e:
            key = getattr(e, "key", "") or ""
            swept = next((kp for kp in keys if key == key_name(kp) or key == ".".join(kp)), None)
            line = _line_of(text, key_name(swept)) if swept is not None else None
            loc = f"{name}:{line}" if line else name
            raise SweepError(f"{loc}: {key or '(config)'}: point {i} ({pt.describe()}): "
                             f"{getattr(e, 'reason', None) or e}") from None
        pt.id = point_id(pt.cfg_json)
        if pt.id in ids:
            spec.duplicates += 1
            continue
        ids.add(pt.id)
        spec.points.append(pt)
    return spec


# ---------------------------------------------------------------- results --
def flatten_result(raw: dict[str, Any]) -> dict[str, Any]:
    """A run's result as flat columns (summary.*, vmstat.*, time_ns.*, ...)."""
    row: dict[str, Any] = {}
    for k in ("sim_time_s", "host_time_s", "interrupted"):
        if k in raw:
            row[k] = raw[k]
    for sect in ("summary", "vmstat", "time_ns", "locks", "memory"):
        for k, v in (raw.get(sect) or {}).items():
            if isinstance(v, (int, float, str, bool)):
                row[f"{sect}.{k}"] = v
    chk = raw.get("checker") or {}
    if chk:
        row["checker.enabled"] = bool(chk.get("enabled"))
        row["checker.violations"] = len(chk.get("violations") or [])
    return row


def _column_kinds(spec: Spec) -> dict[tuple[str, ...], str]:
    """Each swept key's column type, fixed by all of its values so that every
    part file of the dataset has the same schema."""
    kinds: dict[tuple[str, ...], set[type]] = {}
    for axis in spec.axes:
        for group in axis:
            for kp, v in group:
                kinds.setdefault(kp, set()).add(bool if isinstance(v, bool) else type(v))
    out: dict[tuple[str, ...], str] = {}
    for kp, ts in kinds.items():
        if ts == {bool}:
            out[kp] = "bool"
        elif ts == {int}:
            out[kp] = "int"
        elif ts <= {int, float}:
            out[kp] = "float"
        else:
            out[kp] = "str"
    return out


def _param_value(v: Any, kind: str) -> Any:
    if kind == "float":
        return float(v)
    if kind == "str":
        return v if isinstance(v, str) else json.dumps(v)
    return v


def _row(spec: Spec, kinds: dict[tuple[str, ...], str], pt: Point, raw: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"index": pt.index, "point": pt.id}
    for kp, v in pt.params:
        row[key_name(kp)] = _param_value(v, kinds[kp])
    row.update(flatten_result(raw))
    row["config"] = _canonical(json.loads(pt.cfg_json))
    return row


def _write_part(out: Path, row: dict[str, Any]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([row])
    with atomic_write(out / f"{PART_PREFIX}{row['point']}.parquet") as tmp:
        pq.write_table(table, tmp)


def done_points(out: Path) -> set[str]:
    """Ids of the points whose rows are in `out`."""
    if not out.is_dir():
        return set()
    return {p.name[len(PART_PREFIX):-len(".parquet")] for p in out.glob(f"{PART_PREFIX}*.parquet")}


def read_results(out: str | os.PathLike) -> Any:
    """The dataset as one pandas DataFrame, sorted by point index."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(Path(out).glob(f"{PART_PREFIX}*.parquet"))
    if not files:
        return pd.DataFrame()
    tables = [pq.read_table(f) for f in files]
    df = pa.concat_tables(tables, promote_options="default").to_pandas()
    return df.sort_values(["index", "point"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------- runners --
def _worker_run(cfg_json: str) -> str:
    """Runs in a pool process or a Ray worker: one simulation, JSON out."""
    from foliosim import _core as core

    return core.run_json(cfg_json, None)


def _worker_indexed(item: tuple[int, str]) -> tuple[int, str | None, str | None]:
    i, cfg_json = item
    try:
        return i, _worker_run(cfg_json), None
    except Exception as e:
        return i, None, _one_line(getattr(e, "reason", None) or e) or type(e).__name__


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


Done = Callable[[Point, str | None, str | None], None]


def _run_inline(pending: list[Point], done: Done) -> None:
    for pt in pending:
        _i, raw, err = _worker_indexed((pt.index, pt.cfg_json))
        done(pt, raw, err)
        if raw is not None and json.loads(raw).get("interrupted"):
            raise KeyboardInterrupt


def _run_pool(pending: list[Point], done: Done, jobs: int) -> None:
    import multiprocessing as mp

    by_index = {pt.index: pt for pt in pending}
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(processes=jobs, initializer=_ignore_sigint)
    try:
        for i, raw, err in pool.imap_unordered(_worker_indexed, [(p.index, p.cfg_json) for p in pending]):
            done(by_index[i], raw, err)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def _ray_connect(address: str) -> tuple[Any, bool]:
    """Ray, connected (or started: `local`); and whether this call did it."""
    try:
        import ray
    except ImportError:
        raise SweepError("--ray: Ray is not installed (pip install 'foliosim[ray]')") from None
    if ray.is_initialized():
        return ray, False
    import logging

    addr = None if address in ("", "local") else address
    try:
        ray.init(address=addr, include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=False, configure_logging=True)
    except (ConnectionError, ValueError, RuntimeError, OSError, TimeoutError) as e:
        raise SweepError(f"--ray {address}: cannot connect: {_one_line(e)}") from None
    return ray, True


def _run_ray(pending: list[Point], done: Done, ray: Any) -> None:
    remote = ray.remote(num_cpus=1, max_retries=0)(_worker_indexed)
    refs = {remote.remote((p.index, p.cfg_json)): p for p in pending}
    try:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for r in ready:
                pt = refs.pop(r)
                _, raw, err = ray.get(r)
                done(pt, raw, err)
    except BaseException:
        for r in refs:
            with contextlib.suppress(Exception):
                ray.cancel(r, force=True)
        raise


def run_sweep(spec: Spec | str | os.PathLike, out: str | os.PathLike | None = None, *,
              jobs: int | None = None, ray: str | None = None,
              progress: Callable[[float, float], Any] | None = None,
              on_point: Callable[[Point, dict[str, Any]], None] | None = None) -> SweepSummary:
    """Run every point of `spec` not already in `out`. `ray`: a Ray address
    ("local" starts a local instance; if Ray is already initialised in this
    process, that instance is used). `jobs`: local pool size (default: CPUs;
    1 runs in this process). Ctrl-C stops the sweep: finished rows stay, the
    summary says ``interrupted`` and a rerun resumes."""
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    out = Path(out) if out is not None else Path("results") / "sweeps" / (Path(spec.path).stem or "sweep")
    if out.exists() and not out.is_dir():
        raise SweepError(f"{out}: exists and is not a directory")
    # Connect first: a cluster that cannot be reached leaves nothing behind.
    finished = done_points(out)
    todo = any(p.id not in finished for p in spec.points)
    connected = _ray_connect(ray) if ray is not None and todo else None
    try:
        return _run_points(spec, out, jobs, ray, connected, progress, on_point)
    finally:
        if connected is not None and connected[1]:
            connected[0].shutdown()


def _run_points(spec: Spec, out: Path, jobs: int | None, ray: str | None, connected: tuple[Any, bool] | None,
                progress: Callable[[float, float], Any] | None,
                on_point: Callable[[Point, dict[str, Any]], None] | None) -> SweepSummary:
    out.mkdir(parents=True, exist_ok=True)
    kinds = _column_kinds(spec)
    manifest = {
        "spec": spec.path, "spec_text": spec.text, "foliosim": _core.__version__,
        "columns": {key_name(k): v for k, v in kinds.items()},
        "points": [{"index": p.index, "point": p.id, "params": {key_name(k): v for k, v in p.params}}
                   for p in spec.points],
    }
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    finished = done_points(out)
    pending = [p for p in spec.points if p.id not in finished]
    already = len(spec.points) - len(pending)
    failed: list[str] = []
    ran = 0
    t0 = time.monotonic()

    def done(pt: Point, raw_json: str | None, err: str | None) -> None:
        nonlocal ran
        if err is not None:
            failed.append(f"point {pt.index} ({pt.describe()}): {err}")
        else:
            raw = json.loads(raw_json or "{}")
            if raw.get("interrupted"):
                return  # not finished: never recorded, rerun on resume
            _write_part(out, _row(spec, kinds, pt, raw))
            ran += 1
            if on_point is not None:
                on_point(pt, raw)
        if progress is not None:
            progress(float(already + ran + len(failed)), float(len(spec.points)))

    runner = f"ray ({ray})" if ray is not None else "local"
    interrupted = False
    try:
        if not pending:
            pass
        elif connected is not None:
            _run_ray(pending, done, connected[0])
        else:
            n = jobs if jobs is not None else (os.cpu_count() or 1)
            n = max(1, min(n, len(pending)))
            runner = f"local pool ({n} process{'es' if n > 1 else ''})" if n > 1 else "local (in process)"
            if n == 1:
                _run_inline(pending, done)
            else:
                _run_pool(pending, done, n)
    except KeyboardInterrupt:
        interrupted = True
    return SweepSummary(out, len(spec.points), spec.duplicates, already, ran, failed, interrupted,
                        time.monotonic() - t0, runner)
