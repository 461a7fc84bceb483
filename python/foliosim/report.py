"""Plots and the HTML report of `foliosim reproduce --report DIR`.

Input: reproduction objects as `_core.reproduce_json` returns them
(`{"name","title","rows":[{"label","metric","unit","seed","simulated"}],
"notes"}` plus the optional "series", "seed", "profile" and "configs"; see
crates/foliosim/src/reproduce.rs). Output, into DIR:

- ``NAME.png``: one plot per experiment: its ``series`` as curves when it has
  them (one panel per y label), otherwise seed vs simulated bars per row (one
  panel per unit);
- ``NAME/LABEL.toml``: every config the experiment ran, rerunnable with
  ``foliosim run``;
- ``report.html``: one self-contained page (plots embedded as base64, no
  external file, script or font): per experiment the seed's table beside the
  simulated one with the difference, the plot, the configs, the machine
  profile, the foliosim version and seed.

Everything written is a function of the inputs: the same reproductions give
byte-identical files.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from . import tomlout
from .result import atomic_write, write_text_atomic

__all__ = ["difference", "plot_png", "render_html", "slug", "write_report"]


def slug(s: str) -> str:
    """A file-name-safe form of a label ("8 tasks" -> "8-tasks")."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(s)).strip("-") or "x"


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def difference(seed: Any, simulated: Any) -> tuple[float | None, float | None]:
    """(simulated - seed, that as a percentage of |seed|); None where it
    cannot be computed (no seed figure, or a zero seed for the percentage)."""
    s, m = _num(seed), _num(simulated)
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
def _matplotlib():
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - depends on the install
        raise RuntimeError("plots need matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "foliosim", "font.size": 9})
    return plt


def _group(items: Iterable[dict[str, Any]], key: str) -> list[tuple[str, list[dict[str, Any]]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for it in items:
        groups.setdefault(str(it.get(key, "") or ""), []).append(it)
    return list(groups.items())


def plot_png(rep: dict[str, Any]) -> bytes:
    """The experiment's plot as PNG bytes (deterministic)."""
    plt = _matplotlib()
    series = [s for s in rep.get("series") or [] if isinstance(s, dict) and s.get("x") is not None]
    panels = _group(series, "ylabel") if series else _group(rep.get("rows") or [], "unit")
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 3.6), squeeze=False)
    if series:
        for ax, (ylabel, ss) in zip(axes[0], panels, strict=False):
            for s in ss:
                ax.plot(list(s.get("x") or []), list(s.get("y") or []), marker="o", label=str(s.get("name", "")))
            ax.set_xlabel(str(ss[0].get("xlabel", "")))
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            ax.set_ylim(bottom=0)
            if any(s.get("name") for s in ss):
                ax.legend(fontsize=8)
    elif panels:
        for ax, (unit, rows) in zip(axes[0], panels, strict=False):
            labels = [f"{r.get('label', '')}\n{r.get('metric', '')}" for r in rows]
            xs = list(range(len(rows)))
            w = 0.38
            seed = [_num(r.get("seed")) for r in rows]
            sim = [_num(r.get("simulated")) for r in rows]
            ax.bar([x - w / 2 for x in xs], [v if v is not None else 0.0 for v in seed], w,
                   label="seed (published)", color="#7a7a7a")
            ax.bar([x + w / 2 for x in xs], [v if v is not None else 0.0 for v in sim], w,
                   label="simulated", color="#2a6fb0")
            for x, v in zip(xs, seed, strict=False):
                if v is None:
                    ax.annotate("no seed\nfigure", (x - w / 2, 0), ha="center", va="bottom", fontsize=7, color="#7a7a7a")
            ax.set_xticks(xs)
            ax.set_xticklabels(labels, fontsize=7)
            ax.set_ylabel(unit)
            ax.grid(True, axis="y", alpha=0.3)
            ax.legend(fontsize=8)
    else:
        axes[0][0].text(0.5, 0.5, "no rows", ha="center", va="center")
        axes[0][0].set_axis_off()
    fig.suptitle(str(rep.get("title") or rep.get("name") or ""), fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


# --------------------------------------------------------------------- html --
_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 72em;
       padding: 0 1em; color: #1d1d1d; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 2.2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #c8c8c8; padding: 0.25em 0.6em; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f1f1f1; } th.group { text-align: center; }
.seed { background: #f7f7f7; } .bad { color: #a11; } .meta td:first-child { font-weight: 600; }
img.plot { max-width: 100%; height: auto; border: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 0.7em; overflow-x: auto; font-size: 0.85em; }
details { margin: 0.5em 0; } summary { cursor: pointer; }
.note { color: #444; }
"""


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _rows_table(rep: dict[str, Any]) -> str:
    rows = rep.get("rows") or []
    out = ['<table class="results">',
           '<thead><tr><th rowspan="2">label</th><th rowspan="2">metric</th><th rowspan="2">unit</th>'
           '<th class="group">seed (published)</th><th class="group">simulated</th>'
           '<th class="group" colspan="2">difference</th></tr>',
           '<tr><th class="num">value</th><th class="num">value</th>'
           '<th class="num">simulated - seed</th><th class="num">%</th></tr></thead>', "<tbody>"]
    for r in rows:
        d, p = difference(r.get("seed"), r.get("simulated"))
        cls = ' class="num bad"' if p is not None and abs(p) > 25 else ' class="num"'
        seed = fmt(r.get("seed")) if r.get("seed") is not None else "— (no seed figure)"
        out.append(
            f"<tr><td>{_e(r.get('label', ''))}</td><td>{_e(r.get('metric', ''))}</td><td>{_e(r.get('unit', ''))}</td>"
            f'<td class="num seed">{_e(seed)}</td><td class="num">{_e(fmt(r.get("simulated")))}</td>'
            f'<td class="num">{_e(fmt(d))}</td><td{cls}>{_e(_fmt_pct(p))}</td></tr>')
    out.append("</tbody></table>")
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
            ("seed", rep.get("seed", "—")), ("machine profile", pname or "—"),
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
           "<h1>foliosim: seed figures beside simulated ones</h1>",
           f"<p>foliosim {_e(version)}. Each section shows the seed's published figure, the simulated one and "
           "their difference (simulated - seed, and as a percentage of the seed; over 25% in red), the plot, "
           "every config run and the machine profile. A dash in the seed column: the seed published no "
           "figure for that row.</p>"]
    if command:
        out.append(f"<p>Made by <code>{_e(command)}</code>.</p>")
    out.append('<table class="index"><thead><tr><th>experiment</th><th>title</th><th class="num">rows</th>'
               '<th class="num">largest |difference|</th></tr></thead><tbody>')
    for rep in reps:
        pcts = [abs(p) for r in rep.get("rows") or [] for p in [difference(r.get("seed"), r.get("simulated"))[1]]
                if p is not None]
        worst = f"{max(pcts):.1f}%" if pcts else "—"
        name = str(rep.get("name", ""))
        out.append(f'<tr><td><a href="#{_e(slug(name))}">{_e(name)}</a></td><td>{_e(rep.get("title", ""))}</td>'
                   f'<td class="num">{len(rep.get("rows") or [])}</td><td class="num">{worst}</td></tr>')
    out.append("</tbody></table>")
    for rep, png in zip(reps, pngs, strict=False):
        out.append(_experiment_html(rep, png, version, profiles))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(reps: Sequence[dict[str, Any]], out_dir: str | Path, *, version: str,
                 profiles: dict[str, dict[str, Any]] | None = None, command: str = "") -> Path:
    """Write NAME.png, NAME/LABEL.toml and report.html into `out_dir`
    (each atomically); returns the path of report.html."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    pngs: list[bytes] = []
    for rep in reps:
        name = slug(str(rep.get("name", "experiment")))
        png = plot_png(rep)
        pngs.append(png)
        with atomic_write(d / f"{name}.png") as tmp:
            Path(tmp).write_bytes(png)
        for c in rep.get("configs") or []:
            if isinstance(c, dict) and isinstance(c.get("config"), dict):
                write_text_atomic(d / name / f"{slug(str(c.get('label', 'config')))}.toml",
                                  tomlout.dumps(c["config"]))
    page = d / "report.html"
    write_text_atomic(page, render_html(reps, pngs, version=version, profiles=profiles, command=command))
    return page
