"""`foliosim compare A B`: two result sets side by side, like `perf diff`.

A result set is any of: a `foliosim run` output folder (or its result.json,
or its vmstat.parquet: the counters alone), a sweep output folder (Parquet
dataset; its runs are averaged) or one of its part-*.parquet files, or a
reproduction JSON (NAME.json of `foliosim reproduce`; its rows' simulated
values). Any other file is a one-line error. Numbers are flattened to names such as ``vmstat.pgfault``,
``summary.ops_per_s``, ``time_ns.fault``; the lines are ordered by how much
they changed (relative change; a counter that appears from zero first).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._core import ConfigError

__all__ = ["ResultSet", "diff", "format_diff", "load"]

# Columns of a sweep dataset that are not measurements.
_NOT_MEASURED = {"index", "point", "config", "interrupted", "host_time_s", "checker.enabled"}


def _error(path: str, reason: str) -> ConfigError:
    e = ConfigError(f"{path}: result set: {reason}")
    e.file, e.line, e.key, e.reason = path, None, "result set", reason
    return e


@dataclass
class ResultSet:
    path: str
    kind: str  # "run", "sweep", "reproduce"
    runs: int
    values: dict[str, float]

    def describe(self) -> str:
        n = f"{self.runs} run{'s' if self.runs != 1 else ''}"
        return f"{self.path} ({self.kind}, {n}{', mean' if self.runs > 1 else ''})"


def _number(v: Any) -> float | None:
    """A measurement as a float: a number, or a string that spells one (a
    result written by another tool may store counters as strings); None
    for anything else (a flag, a name, a list)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip().replace("_", ""))
        except ValueError:
            return None
    return None


def _flat_numbers(raw: dict[str, Any]) -> dict[str, float]:
    from .sweep import flatten_result

    out: dict[str, float] = {}
    for k, v in flatten_result(raw).items():
        x = _number(v)
        if k not in _NOT_MEASURED and x is not None:
            out[k] = x
    return out


def _from_reproduction(rep: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rep.get("rows") or []:
        v = _number(r.get("simulated"))
        if v is not None:
            out[f"{r.get('label', '')}: {r.get('metric', '')}"] = v
    return out


def _from_sweep_rows(name: str, df: Any) -> ResultSet:
    cols = [c for c in df.columns if (c not in _NOT_MEASURED and "." in c
            and c.split(".", 1)[0] in ("summary", "vmstat", "time_ns", "locks", "memory", "checker"))
            or c == "sim_time_s"]
    values: dict[str, float] = {}
    import pandas as pd

    for c in cols:
        s = df[c]
        if s.dtype.kind == "O":  # strings: numbers if every one spells a number
            num = pd.to_numeric(s.map(lambda v: _number(v) if v is not None else None), errors="coerce")
            if num.notna().sum() == s.notna().sum():
                s = num
        if s.dtype.kind in "iuf":
            values[c] = float(s.mean())
    return ResultSet(name, "sweep", len(df), values)


def _from_parquet(name: str, p: Path) -> ResultSet:
    """A sweep's part file (its rows) or a run's vmstat.parquet (counters)."""
    import pandas as pd

    try:
        df = pd.read_parquet(p)
    except Exception as e:
        raise _error(name, f"unreadable Parquet file: {' '.join(str(e).split())}") from None
    cols = set(df.columns)
    if cols == {"name", "value"}:
        return ResultSet(name, "run", 1, {f"vmstat.{n}": float(v) for n, v in zip(df["name"], df["value"], strict=True)})
    if "point" in cols and any(c.startswith("summary.") for c in cols):
        return _from_sweep_rows(name, df)
    shown = ", ".join(sorted(map(str, cols))[:6])
    raise _error(name, f"a Parquet file that is neither a sweep's part nor a run's vmstat.parquet (columns: {shown})")


def load(path: str | os.PathLike) -> ResultSet:
    """Read a result set (see the module doc); ConfigError if it is none."""
    p = Path(path)
    name = os.fspath(path)
    if p.is_dir():
        if (p / "result.json").is_file():
            p = p / "result.json"
        elif any(p.glob("part-*.parquet")):
            from .sweep import read_results

            try:
                df = read_results(p)
            except Exception as e:
                raise _error(name, f"unreadable sweep dataset: {' '.join(str(e).split())}") from None
            return _from_sweep_rows(name, df)
        else:
            raise _error(name, "no result.json and no part-*.parquet in this folder")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise _error(name, e.strerror or str(e)) from None
    if data[:4] == b"PAR1":
        return _from_parquet(name, p)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _error(name, "a binary file: neither JSON nor Parquet") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise _error(f"{name}:{e.lineno}", f"not JSON: {e.msg}") from None
    if isinstance(obj, dict) and "vmstat" in obj:
        return ResultSet(name, "run", 1, _flat_numbers(obj))
    if isinstance(obj, dict) and "rows" in obj:
        return ResultSet(name, "reproduce", 1, _from_reproduction(obj))
    if isinstance(obj, list) and all(isinstance(x, dict) and "rows" in x for x in obj):
        vals: dict[str, float] = {}
        for rep in obj:
            vals.update({f"{rep.get('name')}: {k}": v for k, v in _from_reproduction(rep).items()})
        return ResultSet(name, "reproduce", len(obj), vals)
    raise _error(name, "neither a run result (vmstat), a reproduction (rows) nor a sweep folder")


@dataclass
class Line:
    name: str
    a: float | None  # None: not in A
    b: float | None  # None: not in B
    delta: float
    pct: float | None  # None: no percentage (see status)
    # "changed" (pct holds it), "new" (not in A, or from zero), "gone" (not
    # in B), "nan" (A or B is not a number: nothing can be said of it).
    status: str = "changed"

    def as_dict(self) -> dict[str, Any]:
        def finite(v: float | None) -> float | None:  # JSON has no NaN
            return v if v is None or math.isfinite(v) else None

        return {"name": self.name, "a": finite(self.a), "b": finite(self.b), "delta": finite(self.delta),
                "pct": finite(self.pct), "status": self.status}


def diff(a: ResultSet, b: ResultSet, *, all_lines: bool = False) -> list[Line]:
    """Lines for every name in either set, most changed first: those
    without a percentage (not a number, gone from B, new in B or from
    zero), then by |relative change|, then by name. Unchanged ones only
    with `all_lines`."""
    out: list[Line] = []
    for name in sorted(set(a.values) | set(b.values)):
        va, vb = a.values.get(name), b.values.get(name)
        if (va is not None and math.isnan(va)) or (vb is not None and math.isnan(vb)):
            out.append(Line(name, va, vb, math.nan, None, "nan"))
            continue
        if vb is None:
            if va or all_lines:
                out.append(Line(name, va, None, -(va or 0.0), None, "gone"))
            continue
        x = va or 0.0
        d = vb - x
        if d == 0 and not all_lines:
            continue
        if x != 0:
            out.append(Line(name, va, vb, d, 100.0 * d / abs(x)))
        else:
            out.append(Line(name, va, vb, d, 0.0) if d == 0 else Line(name, va, vb, d, None, "new"))

    order = {"nan": 0, "gone": 1, "new": 2, "changed": 3}

    def key(ln: Line) -> tuple[int, float, str]:
        size = abs(ln.pct) if ln.pct is not None else (abs(ln.delta) if math.isfinite(ln.delta) else 0.0)
        return (order[ln.status], -size, ln.name)

    return sorted(out, key=key)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if math.isnan(v):
        return "NaN"
    if math.isfinite(v) and v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def format_diff(a: ResultSet, b: ResultSet, lines: list[Line], limit: int | None) -> str:
    shown = lines if limit is None or limit <= 0 else lines[:limit]
    out = [f"# A: {a.describe()}", f"# B: {b.describe()}", "#"]
    if not lines:
        out.append("# no differences")
        return "\n".join(out)
    wa = max([len("A")] + [len(_fmt(ln.a)) for ln in shown])
    wb = max([len("B")] + [len(_fmt(ln.b)) for ln in shown])
    out.append(f"# {'Delta %':>9}  {'A':>{wa}}  {'B':>{wb}}  Counter")
    for ln in shown:
        pct = {"nan": "NaN", "gone": "gone", "new": "new"}.get(ln.status) or f"{ln.pct:+.2f}%"
        out.append(f"  {pct:>9}  {_fmt(ln.a):>{wa}}  {_fmt(ln.b):>{wb}}  {ln.name}")
    if len(shown) < len(lines):
        out.append(f"# {len(lines) - len(shown)} more changed (--limit 0 shows all)")
    return "\n".join(out)

