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
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._core import ConfigError

__all__ = ["FORMATS", "ResultSet", "diff", "format_diff", "format_lkp", "format_mmtests", "load"]

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
    # Every run's value of a name, where there are several (a sweep's
    # runs): the spread LKP's %stddev and mmtests' significance read.
    samples: dict[str, list[float]] = field(default_factory=dict)

    def runs_of(self, name: str) -> list[float]:
        v = self.values.get(name)
        return self.samples.get(name) or ([] if v is None else [v])

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
    samples: dict[str, list[float]] = {}
    import pandas as pd

    for c in cols:
        s = df[c]
        if s.dtype.kind == "O":  # strings: numbers if every one spells a number
            num = pd.to_numeric(s.map(lambda v: _number(v) if v is not None else None), errors="coerce")
            if num.notna().sum() == s.notna().sum():
                s = num
        if s.dtype.kind in "iuf":
            values[c] = float(s.mean())
            samples[c] = [float(x) for x in s.dropna()]
    return ResultSet(name, "sweep", len(df), values, samples)


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


# ------------------------------------------------- the community's formats --
#: `foliosim compare --format`: perf diff's layout (the default), LKP's
#: %change table, mmtests' compare-kernels rows.
FORMATS = ("perf", "lkp", "mmtests")

_MARK = {"nan": "NaN", "gone": "gone", "new": "new"}


def _side_name(rs: ResultSet) -> str:
    return Path(rs.path).name or rs.path


def _lkp_name(name: str) -> str:
    """LKP calls /proc/vmstat's fields proc-vmstat.NAME."""
    return "proc-vmstat." + name[len("vmstat."):] if name.startswith("vmstat.") else name


def _lkp_value(avg: float) -> str:
    # lkp-tests lib/compare.rb, show_perf_change: 10 wide; two decimals
    # below 1000, %g beyond 1e8, an integer between.
    if not math.isfinite(avg):
        return f"{'NaN' if math.isnan(avg) else avg:>10}"
    if abs(avg) < 1000:
        return f"{avg:10.2f}"
    if abs(avg) > 100_000_000:
        return f"{avg:10.4g}"
    return f"{int(avg):10d}"


def _lkp_stddev(runs: list[float], avg: float) -> str:
    """` ±NN%` (population standard deviation over the runs, as a percentage
    of their mean) where it is above 2%, else blank; blank for one run."""
    if len(runs) < 2 or not all(map(math.isfinite, runs)):
        return " " * 6
    sd = statistics.pstdev(runs)
    pct = 100 * sd / avg if avg != 0 else sd
    return f" ±{int(pct):3d}%" if pct > 2 else " " * 6


def format_lkp(a: ResultSet, b: ResultSet, lines: list[Line], limit: int | None) -> str:
    """The lines as the kernel test robot (LKP) reports a change: the base
    value and its %stddev, %change, the head value and its %stddev, the
    metric; /proc/vmstat fields named proc-vmstat.NAME as LKP names them.
    A line without a percentage says why in the %change column (new, gone,
    NaN)."""
    shown = lines if limit is None or limit <= 0 else lines[:limit]
    out = ["result: ", f"  {a.path}", f"  {b.path}", "",
           f"{_side_name(a)[:16]:>16} {_side_name(b)[:27]:>27} ", f"{'-' * 16} {'-' * 27} ",
           "         %stddev     %change         %stddev", "             \\          |                \\  "]
    for ln in shown:
        ra, rb = a.runs_of(ln.name), b.runs_of(ln.name)
        va, vb = (ln.a if ln.a is not None else 0.0), (ln.b if ln.b is not None else 0.0)
        if ln.pct is None:
            change = f"{_MARK.get(ln.status, 'new'):>10}  "
        else:
            fmt = ".1f" if abs(ln.pct) < 100_000 else ".2g"
            change = f"{ln.pct:+10{fmt}}% "
        out.append(f"{_lkp_value(va)}{_lkp_stddev(ra, va)}{change}{_lkp_value(vb)}{_lkp_stddev(rb, vb)}  "
                   f"{_lkp_name(ln.name)}")
    if len(shown) < len(lines):
        out.append(f"# {len(lines) - len(shown)} more changed (--limit 0 shows all)")
    return "\n".join(out)


def _is_rate(name: str) -> bool:
    return name.endswith(("_per_s", "/s")) or "ops/s" in name


def _hmean(runs: list[float]) -> float | None:
    """The harmonic mean, mmtests' summary of a rate; None where it does not
    apply (a value not above zero)."""
    return statistics.harmonic_mean(runs) if runs and all(x > 0 for x in runs) else None


def _significant(ra: list[float], rb: list[float]) -> bool:
    """Whether two sides' runs differ beyond their noise (Welch's t above 2,
    about 95%); never for single runs (a simulation has no noise to test)."""
    if len(ra) < 2 or len(rb) < 2:
        return False
    se = math.sqrt(statistics.variance(ra) / len(ra) + statistics.variance(rb) / len(rb))
    d = abs(statistics.fmean(rb) - statistics.fmean(ra))
    return d > 0 if se == 0 else d / se > 2


def format_mmtests(a: ResultSet, b: ResultSet, lines: list[Line], limit: int | None) -> str:
    """The lines as mmtests' compare-kernels.sh prints a comparison: a rate
    (ops/s) as an `Hmean` row (the harmonic mean of the runs), anything else
    as an `Amean` row, each value `%12.2f` with its difference from A
    (`%7.2f%%`) in parentheses, or between asterisks where the runs of the
    two sides differ beyond their spread. A line without a percentage says
    why in its place (new, gone, NaN)."""
    shown = lines if limit is None or limit <= 0 else lines[:limit]
    label_w = max([len(ln.name) for ln in shown] + [1])
    opw = 9  # compare-kernels' widest summary name (BAmean-99): Hmean rows line up with its other rows
    out = [f"{'':<{opw + 1 + label_w}}{_side_name(a):>23}{_side_name(b):>23}"]
    for ln in shown:
        ra, rb = a.runs_of(ln.name), b.runs_of(ln.name)
        op, ma, mb = "Amean", ln.a, ln.b
        if _is_rate(ln.name) and _hmean(ra) is not None and _hmean(rb) is not None:
            op, ma, mb = "Hmean", _hmean(ra), _hmean(rb)
        va, vb = (ma if ma is not None else 0.0), (mb if mb is not None else 0.0)
        if ln.pct is None:
            cmp = f" ({_MARK.get(ln.status, 'new'):>8})"
        else:
            pct = 100.0 * (vb - va) / abs(va) if va else ln.pct
            cmp = f" *{pct:7.2f}%*" if _significant(ra, rb) else f" ({pct:7.2f}%)"
        out.append(f"{op:<{opw}} {ln.name:<{label_w}}{va:12.2f} ({0.0:7.2f}%){vb:12.2f}{cmp}")
    if len(shown) < len(lines):
        out.append(f"# {len(lines) - len(shown)} more changed (--limit 0 shows all)")
    return "\n".join(out)
