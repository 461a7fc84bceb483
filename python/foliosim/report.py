"""Plots and the HTML report of `foliosim reproduce --report DIR`.

Input: reproduction objects (`{"name", "title", "rows": [{"label", "metric",
"unit", "published", "simulated", "note"}], "notes"}` plus the optional
"series" (`[{"name", "x", "y", "xlabel", "ylabel"}]`, each may carry a
"published" list beside "y"), "seed" (the RNG seed), "profile" and
"configs"), as `foliosim reproduce --json` prints them. A row's published
figure may still be named "seed", as it was before; it is read for one
release. Output, into DIR:

- ``NAME.png``: one plot per experiment, its panels in a grid of two
  columns: the series as curves (one panel per y label) with the published
  figures as open diamonds on them, and published-vs-simulated bars for the
  rows the curves do not show (one panel per unit; without series, every
  row). A zero is a mark on the axis with its value, a missing figure is
  written out ("not published", "no value"), so neither reads as the other;
- ``NAME/LABEL.toml``: every config the experiment ran, rerunnable with
  ``foliosim run``;
- ``report.html``: one self-contained page (plots embedded as base64, no
  external file, script or font): per experiment the published figures
  beside the simulated ones with the difference, the plot, the configs, the
  machine profile, the foliosim version and RNG seed.

Everything written is a function of the inputs: the same reproductions give
byte-identical files.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from . import tomlout
from .result import staged_folder, write_synced
from .verdict import NEAR, count_within, noise, published, verdict

__all__ = ["difference", "place_published", "plot_figure", "plot_png", "published", "render_html", "slug",
           "write_report"]


def slug(s: str) -> str:
    """A file-name-safe form of a label ("8 tasks" -> "8-tasks")."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(s)).strip("-") or "x"


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def difference(published: Any, simulated: Any) -> tuple[float | None, float | None]:
    """(simulated - published, that as a percentage of |published|); None
    where it cannot be computed (no published figure, or a zero one for the
    percentage)."""
    s, m = _num(published), _num(simulated)
    if s is None or m is None:
        return None, None
    d = m - s
    return d, (100.0 * d / abs(s) if s != 0 else None)


def fmt(v: Any) -> str:
    """A number for a table: thousands separators for large values, four
    significant digits otherwise; "—" for a missing one."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.4g}"
    return str(v)


def _fmt_pct(p: float | None) -> str:
    return "—" if p is None else f"{p:+.1f}%"


# -------------------------------------------------------------------- plots --
PUBLISHED_COLOR = "#8c8c8c"
SIMULATED_COLOR = "#2a6fb0"
FIG_WIDTH_IN = 11.0     # two panels side by side; 1,210 px at DPI, shown at page width
DPI = 110


def _matplotlib():
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - depends on the install
        raise RuntimeError("plots need matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "foliosim", "font.size": 8.5, "axes.titlesize": 9,
                         "axes.titleweight": "bold"})
    return plt


def _group(items: Iterable[dict[str, Any]], key: str) -> list[tuple[str, list[dict[str, Any]]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for it in items:
        groups.setdefault(str(it.get(key, "") or ""), []).append(it)
    return list(groups.items())


def short(v: float) -> str:
    """A value short enough to print at the end of a bar: 3 significant
    digits with k/M/G for large magnitudes."""
    a = abs(v)
    for at, div, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if a >= at:
            return f"{v / div:.3g}{suffix}"
    if a >= 100 or v == int(v):
        return f"{v:,.0f}" if a >= 100 else f"{int(v)}"
    return f"{v:.3g}"


def _series_list(rep: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in rep.get("series") or [] if isinstance(s, dict) and isinstance(s.get("x"), list)]


def place_published(series: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]
                    ) -> tuple[dict[tuple[int, int], float], set[int]]:
    """Which published figures go on the curves: ({(series index, point
    index): published value}, {indices of the rows drawn that way}).

    A series may carry its own ``"published"`` list beside ``"y"`` (None
    where there is no figure). Otherwise a row with a published figure is
    drawn at the one point of the series whose y is exactly the row's
    simulated value (the experiment computed both from the same run), among
    the series that plot the row's quantity (its unit or its metric is in
    the series' y label); a row whose value is 0 or matches no point or
    several is left to the bars. A series that is itself the published
    curve (named "published", or "seed" as before) already shows the figure
    of a row matched to a point beside it: that row gets no diamond."""
    pts: dict[tuple[int, int], float] = {}
    curves = {str(s.get("ylabel", "")): [_num(y) for y in s.get("y") or []] for s in series if is_published_curve(s)}
    for si, s in enumerate(series):
        explicit = s.get("published")
        if isinstance(explicit, list):
            for i, v in enumerate(explicit):
                if _num(v) is not None:
                    pts[(si, i)] = float(v)
    ys = [[_num(y) for y in s.get("y") or []] for s in series]
    placed: set[int] = set()
    for ri, r in enumerate(rows):
        p, m = _num(published(r)), _num(r.get("simulated"))
        if p is None or m is None or m == 0:
            continue
        hits = [(si, i) for si, yy in enumerate(ys) if _plots_quantity(series[si], r)
                and not is_published_curve(series[si]) for i, y in enumerate(yy) if y == m]
        shown = [(si, i) for si, i in hits
                 if (curve := curves.get(str(series[si].get("ylabel", "")))) and i < len(curve) and curve[i] == p]
        # Shown on a published curve already, or a diamond at its one point.
        if shown or (len(hits) == 1 and pts.setdefault(hits[0], p) == p):
            placed.add(ri)
    return pts, placed


def is_published_curve(s: dict[str, Any]) -> bool:
    """A series that plots the published figures themselves."""
    return str(s.get("name", "")).strip().lower() in ("published", "seed")


def _plots_quantity(s: dict[str, Any], row: dict[str, Any]) -> bool:
    """Whether series `s` plots the quantity of `row`: the row's metric is
    in the y label (or the label in it), or its unit is a word of it."""
    ylabel = str(s.get("ylabel", "")).lower()
    metric, unit = str(row.get("metric", "")).lower(), str(row.get("unit", "")).lower()
    if metric and (metric in ylabel or (ylabel and ylabel in metric)):
        return True
    return bool(unit) and unit in re.findall(r"[^\s()]+", ylabel)


class _Panel:
    """One axes of an experiment's plot: curves of the series sharing a y
    label, or published-vs-simulated bars of the rows sharing a unit."""

    def __init__(self, kind: str, title: str, items: list[Any], height: float):
        self.kind, self.title, self.items, self.height = kind, title, items, height


def _wrap(s: str, width: int) -> str:
    return "\n".join(textwrap.wrap(s, width, break_long_words=True, break_on_hyphens=False)) or s


def _panels(rep: dict[str, Any]) -> list[_Panel]:
    series = _series_list(rep)
    rows = [r for r in rep.get("rows") or [] if isinstance(r, dict)]
    pts, placed = place_published(series, rows)
    out: list[_Panel] = []
    for ylabel, members in _group(({**s, "_i": i} for i, s in enumerate(series)), "ylabel"):
        out.append(_Panel("line", ylabel, [(s, {i: p for (si, i), p in pts.items() if si == s["_i"]})
                                           for s in members], 3.3))
    # Without curves every row is a bar; beside curves only the published
    # figures the curves do not show (the rest is in the table).
    bar_rows = [r for i, r in enumerate(rows)
                if not series or (i not in placed and _num(published(r)) is not None)]
    bars = []
    for unit, rs in _group(bar_rows, "unit"):
        lines = sum(len(_bar_label(r, rs).split("\n")) for r in rs)
        bars.append(_Panel("bar", unit, rs, 0.9 + 0.2 * lines + 0.12 * len(rs)))
    return out + sorted(bars, key=lambda p: -p.height)


def _bar_label(r: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    one_metric = len({str(x.get("metric", "")) for x in rows}) == 1
    text = str(r.get("label", "")) if one_metric else f"{r.get('label', '')} · {r.get('metric', '')}"
    return _wrap(text, 34)


def _draw_line(ax: Any, panel: _Panel) -> None:
    from matplotlib.lines import Line2D

    values: list[float] = []
    any_published = any_missing = False
    for s, pub in panel.items:
        xs = list(s.get("x") or [])
        ys = [_num(y) for y in s.get("y") or []][: len(xs)]
        many = len(xs) > 40
        if is_published_curve(s):
            ax.plot(xs[: len(ys)], [math.nan if y is None else y for y in ys], ls="--", lw=1.2,
                    color=PUBLISHED_COLOR, marker=None if many else "D", ms=5.5, mfc="white", mew=1.4,
                    label="published")
            values += [y for y in ys if y is not None]
            continue
        (line,) = ax.plot(xs[: len(ys)], [math.nan if y is None else y for y in ys],
                          marker=None if many else "o", ms=3.5, lw=1.4, label=str(s.get("name", "")) or None)
        values += [y for y in ys if y is not None]
        missing = [x for x, y in zip(xs, ys, strict=False) if y is None]
        if missing:
            any_missing = True
            ax.plot(missing, [0.0] * len(missing), ls="none", marker="x", ms=6, color="#b03030")
        if pub:
            any_published = True
            idx = sorted(i for i in pub if i < len(xs))
            ax.plot([xs[i] for i in idx], [pub[i] for i in idx], ls="none", marker="D", ms=6.5,
                    color=line.get_color(), mfc="white", mew=1.6, zorder=5)
            values += [pub[i] for i in idx]
    first = panel.items[0][0]
    ax.set_xlabel(str(first.get("xlabel", "")))
    ax.set_ylabel(_wrap(panel.title, 40))
    ax.grid(True, alpha=0.3)
    if values and max(abs(v) for v in values) >= 1e4:
        ax.yaxis.set_major_formatter(_axis_formatter())
    if values and min(values) >= 0:
        ax.set_ylim(bottom=0)
    if values and min(values) < 0 < max(values):
        ax.axhline(0, color="#444", lw=0.8)
    handles, labels = ax.get_legend_handles_labels()
    if any_published:
        handles.append(Line2D([], [], ls="none", marker="D", ms=6.5, mfc="white", mec="#333", mew=1.6))
        labels.append("published figure (same colour)")
    if any_missing:
        handles.append(Line2D([], [], ls="none", marker="x", ms=6, color="#b03030"))
        labels.append("no simulated value")
    if handles:
        ax.legend(handles, labels, fontsize=7, loc="best", framealpha=0.85)


def _draw_bars(ax: Any, panel: _Panel) -> None:
    rows = panel.items
    metrics = {str(r.get("metric", "")) for r in rows}
    unit = panel.title
    if len(metrics) == 1:
        metric = next(iter(metrics))
        title = f"{metric} ({unit})" if unit and unit != metric else metric
    else:
        title = unit or "(no unit)"
    pub = [_num(published(r)) for r in rows]
    sim = [_num(r.get("simulated")) for r in rows]
    any_published = any(v is not None for v in pub)
    ax.set_title(_wrap(title + ("" if any_published else ": none published"), 60), loc="left")
    vals = [v for v in pub + sim if v is not None] + [0.0]
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    words_right = hi > 0 or lo == 0
    bars = [(pub, PUBLISHED_COLOR, "not published")] if any_published else []
    bars.append((sim, SIMULATED_COLOR, "no value"))
    h = 0.76 / len(bars)
    for k, (vs, color, missing) in enumerate(bars):
        y = [i + (k - (len(bars) - 1) / 2) * h for i in range(len(rows))]
        ax.barh(y, [0.0 if v is None else v for v in vs], h, color=color)
        for yi, v in zip(y, vs, strict=True):
            if v is None:
                # Missing is a word, never an empty slot that reads as zero.
                ax.text(0, yi, f" {missing} ", va="center", ha="left" if words_right else "right",
                        fontsize=6.5, style="italic", color="#666")
                continue
            if v == 0:
                # A zero draws no bar: mark the spot so it is not read as missing.
                ax.plot([0], [yi], marker="|", ms=9, mew=2, color=color)
            right = v > 0 or (v == 0 and words_right)
            ax.text(v, yi, f" {short(v)} ", va="center", ha="left" if right else "right", fontsize=6.5,
                    color="#222")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_bar_label(r, rows) for r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.45, -0.8)
    ax.axvline(0, color="#444", lw=0.8)
    if lo == hi == 0:
        ax.set_xlim(-0.05, 1.0)
    else:  # room at both ends for the value labels
        ax.set_xlim(lo - (0.16 * span if lo < 0 else 0.0), hi + (0.2 * span if hi > 0 else 0.02 * span))
    ax.grid(True, axis="x", alpha=0.3)
    ax.tick_params(axis="x", labelsize=7)
    ax.xaxis.set_major_formatter(_axis_formatter())


def _axis_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: short(v) if v else "0")


def plot_figure(rep: dict[str, Any]) -> Any:
    """The experiment's plot as a matplotlib figure: its panels in two
    columns, each panel going to the column that is shorter so far (curves
    first, in order, then bars, tallest first), so that neither a strip of
    panels nor a tall panel beside a short one wastes the page."""
    plt = _matplotlib()
    panels = _panels(rep)
    ncols = 2 if len(panels) > 1 else 1
    width = FIG_WIDTH_IN if ncols == 2 else FIG_WIDTH_IN * 0.62
    columns: list[list[_Panel]] = [[] for _ in range(ncols)]
    for panel in panels:
        min(columns, key=lambda col: sum(p.height for p in col)).append(panel)
    col_heights = [sum(p.height for p in col) for col in columns]
    height = max(col_heights, default=0.0) or 2.0
    title = _wrap(str(rep.get("title") or rep.get("name") or ""), int(width * 10.5))
    fig = plt.figure(figsize=(width, height + 0.3 + 0.2 * title.count("\n")), layout="constrained")
    subfigs = fig.subfigures(1, ncols, squeeze=False)[0] if ncols > 1 else [fig]
    for sub, col, h in zip(subfigs, columns, col_heights, strict=True):
        spare = height - h
        ratios = [p.height for p in col] + ([spare] if spare > 0.05 else [])
        gs = sub.add_gridspec(len(ratios) or 1, 1, height_ratios=ratios or [1.0])
        for i, panel in enumerate(col):
            (_draw_line if panel.kind == "line" else _draw_bars)(sub.add_subplot(gs[i, 0]), panel)
    if not panels:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no rows", ha="center", va="center")
        ax.set_axis_off()
    fig.suptitle(title, fontsize=10, fontweight="bold")
    bar_rows = [r for p in panels if p.kind == "bar" for r in p.items]
    if bar_rows:
        from matplotlib.patches import Patch

        handles = [Patch(color=SIMULATED_COLOR, label="simulated")]
        if any(_num(published(r)) is not None for r in bar_rows):
            handles.insert(0, Patch(color=PUBLISHED_COLOR, label="published"))
        fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=7.5, frameon=False)
    return fig


def plot_png(rep: dict[str, Any]) -> bytes:
    """The experiment's plot as PNG bytes (deterministic)."""
    plt = _matplotlib()
    fig = plot_figure(rep)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


# --------------------------------------------------------------------- html --
_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 72em;
       padding: 0 1em; color: #1d1d1d; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 2.2em; border-bottom: 1px solid #ccc; }
h1, h2, p, td, summary { overflow-wrap: anywhere; }
.scroll { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #c8c8c8; padding: 0.25em 0.6em; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f1f1f1; } th.group { text-align: center; }
.published { background: #f7f7f7; } .bad { color: #a11; } .meta td:first-child { font-weight: 600; }
img.plot { max-width: 100%; height: auto; box-sizing: border-box; border: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 0.7em; overflow-x: auto; font-size: 0.85em; }
details { margin: 0.5em 0; } summary { cursor: pointer; }
.note { color: #444; }
"""


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _rows_table(rep: dict[str, Any]) -> str:
    rows = rep.get("rows") or []
    out = ['<div class="scroll"><table class="results">',
           '<thead><tr><th rowspan="2">label</th><th rowspan="2">metric</th><th rowspan="2">unit</th>'
           '<th class="group">published</th><th class="group">simulated</th>'
           '<th class="group" colspan="2">difference</th><th rowspan="2">verdict</th></tr>',
           '<tr><th class="num">value</th><th class="num">value</th>'
           '<th class="num">simulated - published</th><th class="num">%</th></tr></thead>', "<tbody>"]
    for r in rows:
        pub = published(r)
        d, p = difference(pub, r.get("simulated"))
        v = verdict(r)
        cls = ' class="num bad"' if v not in NEAR and pub is not None else ' class="num"'
        shown = fmt(pub) if pub is not None else "— (not published)"
        if pub is not None and noise(r):
            shown += f" ± {fmt(noise(r))}"
        out.append(
            f"<tr><td>{_e(r.get('label', ''))}</td><td>{_e(r.get('metric', ''))}</td><td>{_e(r.get('unit', ''))}</td>"
            f'<td class="num published">{_e(shown)}</td><td class="num">{_e(fmt(r.get("simulated")))}</td>'
            f'<td class="num">{_e(fmt(d))}</td><td{cls}>{_e(_fmt_pct(p))}</td><td>{_e(v)}</td></tr>')
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _profile_name(rep: dict[str, Any]) -> str | None:
    prof = rep.get("profile")
    if isinstance(prof, dict) and prof.get("name"):
        return str(prof["name"])
    if isinstance(prof, str):
        return prof
    names = {str(((c.get("config") or {}).get("machine") or {}).get("profile"))
             for c in rep.get("configs") or [] if isinstance(c, dict)}
    names.discard("None")
    return ", ".join(sorted(names)) or None


def _experiment_html(rep: dict[str, Any], png: bytes, version: str,
                     profiles: dict[str, dict[str, Any]]) -> str:
    name = str(rep.get("name", ""))
    out = [f'<section class="experiment" id="{_e(slug(name))}">',
           f"<h2>{_e(name)}: {_e(rep.get('title', ''))}</h2>"]
    if rep.get("interrupted"):
        out.append('<p class="bad"><strong>Interrupted:</strong> the figures below are partial.</p>')
    pname = _profile_name(rep)
    meta = [("rerun", f"foliosim reproduce {name}"), ("foliosim version", version),
            ("RNG seed", rep.get("seed", "—")), ("machine profile", pname or "—"),
            ("configs", f"{len(rep.get('configs') or [])} (below; each also in {slug(name)}/LABEL.toml)")]
    out.append('<table class="meta">' + "".join(
        f"<tr><td>{_e(k)}</td><td><code>{_e(v)}</code></td></tr>" if k == "rerun" else
        f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in meta) + "</table>")
    out.append(_rows_table(rep))
    for n in rep.get("notes") or []:
        out.append(f'<p class="note">Note: {_e(n)}</p>')
    b64 = base64.b64encode(png).decode("ascii")
    out.append(f'<p><img class="plot" alt="plot of {_e(name)}" src="data:image/png;base64,{b64}"></p>')
    for c in rep.get("configs") or []:
        if not isinstance(c, dict):
            continue
        label = str(c.get("label", ""))
        text = tomlout.dumps(c.get("config") or {})
        out.append(f"<details><summary>config: {_e(label)} "
                   f"(<code>foliosim run {_e(slug(name))}/{_e(slug(label))}.toml</code>)</summary>"
                   f"<pre>{_e(text)}</pre></details>")
    prof = rep.get("profile") if isinstance(rep.get("profile"), dict) else {}
    ptext = prof.get("toml") if prof else None
    if pname:
        if ptext:
            out.append(f"<details><summary>machine profile: {_e(pname)}</summary><pre>{_e(ptext)}</pre></details>")
        else:
            for pn in pname.split(", "):
                p = profiles.get(pn)
                if p:
                    out.append(f"<p>machine profile {_e(pn)}: {_e(p.get('nr_cpus'))} CPUs, "
                               f"{_e(p.get('mem_mib'))} MiB. {_e(p.get('description', ''))}</p>")
    out.append("</section>")
    return "\n".join(out)


def render_html(reps: Sequence[dict[str, Any]], pngs: Sequence[bytes], *, version: str,
                profiles: dict[str, dict[str, Any]] | None = None, command: str = "") -> str:
    """The whole report as one HTML document."""
    profiles = profiles or {}
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>foliosim reproductions ({_e(len(reps))})</title>",
           f"<style>{_CSS}</style></head><body>",
           "<h1>foliosim: published figures beside simulated ones</h1>",
           f"<p>foliosim {_e(version)}. Each section shows the published figure, the simulated one and "
           "their difference (simulated - published, and as a percentage of the published figure; over 25% "
           "in red), the plot, every config run and the machine profile. A dash in the published column: "
           "the source published no figure for that row. In the plots, open diamonds are published figures "
           "on the simulated curves; grey bars are published, blue simulated; a zero is a mark on the axis "
           "and a missing figure is written out.</p>"]
    if command:
        out.append(f"<p>Made by <code>{_e(command)}</code>.</p>")
    out.append('<div class="scroll"><table class="index"><thead><tr><th>experiment</th><th>title</th><th class="num">rows</th>'
               '<th class="num">within 25%</th><th class="num">largest |difference|</th></tr></thead><tbody>')
    for rep in reps:
        pcts = [abs(p) for r in rep.get("rows") or [] for p in [difference(published(r), r.get("simulated"))[1]]
                if p is not None]
        worst = f"{max(pcts):.1f}%" if pcts else "—"
        near, judged = count_within(rep.get("rows") or [])
        name = str(rep.get("name", ""))
        out.append(f'<tr><td><a href="#{_e(slug(name))}">{_e(name)}</a></td><td>{_e(rep.get("title", ""))}</td>'
                   f'<td class="num">{len(rep.get("rows") or [])}</td><td class="num">{f"{near} of {judged}" if judged else "—"}</td>'
                   f'<td class="num">{worst}</td></tr>')
    out.append("</tbody></table></div>")
    for rep, png in zip(reps, pngs, strict=False):
        out.append(_experiment_html(rep, png, version, profiles))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(reps: Sequence[dict[str, Any]], out_dir: str | Path, *, version: str,
                 profiles: dict[str, dict[str, Any]] | None = None, command: str = "") -> Path:
    """Write NAME.png, NAME/LABEL.toml and report.html into `out_dir`, all
    or nothing (`staged_folder`: a full disk leaves `out_dir` as it was);
    returns the path of report.html."""
    d = Path(out_dir)
    pngs = [plot_png(rep) for rep in reps]
    page = render_html(reps, pngs, version=version, profiles=profiles, command=command)
    with staged_folder(d) as stage:
        for rep, png in zip(reps, pngs, strict=True):
            name = slug(str(rep.get("name", "experiment")))
            write_synced(stage / f"{name}.png", png)
            for c in rep.get("configs") or []:
                if isinstance(c, dict) and isinstance(c.get("config"), dict):
                    (stage / name).mkdir(exist_ok=True)
                    write_synced(stage / name / f"{slug(str(c.get('label', 'config')))}.toml",
                                 tomlout.dumps(c["config"]).encode("utf-8"))
        write_synced(stage / "report.html", page.encode("utf-8"))
    return d / "report.html"
