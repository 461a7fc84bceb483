"""Fill the published-vs-simulated tables of the docs from
docs/reproductions.json (or `foliosim reproduce all --json` output), so that
they never drift from what the simulator gives.

    python -m foliosim.doctables REPRODUCE.json FILE.md...   (`make docs-tables`)

In each FILE, the text between ``<!-- reproduce: GLOB[, GLOB...] -->`` and
``<!-- /reproduce -->`` is replaced by a Markdown table of every row of the
experiments whose name matches a GLOB (fnmatch; ``*`` for all). A row's
``note``, when present, goes in the last column. The text between
``<!-- headline: GLOB[, GLOB...] -->`` and ``<!-- /headline -->`` (the
README's) becomes one row per matching experiment: its headline row's
published figure, the simulated one, a one-word verdict (see `headline`
and `foliosim.verdict`), how many of the experiment's rows are within 25%
of their published figure ("8 of 11") and, where the two differ, the
row's note (`short_note`), the experiment linked to the mechanism page (a
``docs/mechanisms/*.md`` beside FILE whose reproduce marker matches it). A
file is rewritten (atomically) only if its text changes. Exit 2 with one
line on bad input (unreadable JSON, an unclosed marker).
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .report import difference, fmt
from .result import write_text_atomic
from .verdict import count_within, noise, published, verdict

__all__ = ["fill", "fill_headlines", "headline", "headline_table", "main", "published_cell", "short_note", "table",
           "verdict", "within_cell"]

BEGIN = re.compile(r"<!-- reproduce:\s*([^>]*?)\s*-->")
END = "<!-- /reproduce -->"
HEADLINE_BEGIN = re.compile(r"<!-- headline:\s*([^>]*?)\s*-->")
HEADLINE_END = "<!-- /headline -->"


def table(reps: Sequence[dict[str, Any]], globs: Sequence[str]) -> str:
    chosen = [r for r in reps if any(fnmatch.fnmatchcase(str(r.get("name", "")), g) for g in globs)]
    if not chosen:
        return ("_No experiment registered yet: filled by `foliosim reproduce` "
                f"(`make docs-tables`) from experiments named {', '.join(f'`{g}`' for g in globs)}._")
    out = ["| experiment | label | metric | published | simulated | difference | verdict | note |",
           "| --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
    for rep in chosen:
        for r in rep.get("rows") or []:
            d, p = difference(published(r), r.get("simulated"))
            diff = "—" if d is None else (f"{fmt(d)} ({p:+.1f}%)" if p is not None else fmt(d))
            unit = f" {r.get('unit')}" if r.get("unit") else ""
            note = str(r.get("note") or "").replace("|", "/").replace("\n", " ")
            out.append(f"| `{rep.get('name')}` | {r.get('label', '')} | {r.get('metric', '')} | {published_cell(r)} | "
                       f"{fmt(r.get('simulated'))}{unit} | {diff} | {verdict(r)} | {note} |")
    return "\n".join(out)


def published_cell(r: dict[str, Any]) -> str:
    """A row's published figure with its unit, and the noise band its source
    states (\u00b1 half-width) where it states one."""
    pub = published(r)
    if pub is None:
        return "—"
    unit = f" {r.get('unit')}" if r.get("unit") else ""
    band = f" ± {fmt(noise(r))}" if noise(r) else ""
    return f"{fmt(pub)}{band}{unit}"


def within_cell(rows: Sequence[dict[str, Any]]) -> str:
    """"N of M": the rows within 25% of their published figure (and of its
    sign) among those with one; "—" when none has one."""
    n, m = count_within(rows)
    return f"{n} of {m}" if m else "—"


def headline(rep: dict[str, Any]) -> dict[str, Any] | None:
    """The row that stands for an experiment in the README.

    The experiment names it: a row with ``"headline": true``, or the
    experiment's ``"headline"`` (a row index, a metric, "LABEL | METRIC", or
    ``{"label", "metric"}``). Without that marker: the first row with a
    published figure in % or x (a change or a ratio: what a paper's headline
    states), else the first row with a published figure, else the last row
    (an experiment of the model's own has its far end of the sweep last)."""
    rows = [r for r in rep.get("rows") or [] if isinstance(r, dict)]
    if not rows:
        return None
    marked = [r for r in rows if r.get("headline") is True]
    if marked:
        return marked[0]
    h = rep.get("headline")
    if isinstance(h, int) and not isinstance(h, bool) and 0 <= h < len(rows):
        return rows[h]
    if isinstance(h, dict):
        h = f"{h.get('label', '')} | {h.get('metric', '')}"
    if isinstance(h, str) and h:
        for r in rows:
            if h in (str(r.get("metric")), f"{r.get('label')} | {r.get('metric')}"):
                return r
    with_pub = [r for r in rows if published(r) is not None]
    ratios = [r for r in with_pub if r.get("unit") in ("%", "x")]
    return (ratios or with_pub or [rows[-1]])[0]


def _page_for(name: str, pages: dict[str, list[str]]) -> str | None:
    for page, globs in pages.items():
        if any(fnmatch.fnmatchcase(name, g) for g in globs):
            return page
    return None


def headline_table(reps: Sequence[dict[str, Any]], globs: Sequence[str],
                   pages: dict[str, list[str]] | None = None) -> str:
    """One row per experiment matching a GLOB: its headline row, published
    vs simulated and the verdict. `pages` maps a link target to the globs
    of its reproduce marker."""
    chosen = [r for r in reps if any(fnmatch.fnmatchcase(str(r.get("name", "")), g) for g in globs)]
    if not chosen:
        return "_No experiment registered yet._"
    out = ["| experiment | headline figure | published | simulated | verdict | rows within 25% | why it differs |",
           "| --- | --- | ---: | ---: | --- | ---: | --- |"]
    for rep in chosen:
        name = str(rep.get("name", ""))
        r = headline(rep)
        page = _page_for(name, pages or {})
        shown = f"[`{name}`]({page})" if page else f"`{name}`"
        if r is None:
            out.append(f"| {shown} | — | — | — | no rows | — | |")
            continue
        unit = f" {r.get('unit')}" if r.get("unit") else ""
        what = f"{r.get('label', '')}: {r.get('metric', '')}".replace("|", "/").replace("\n", " ")
        sim = "—" if r.get("simulated") is None else f"{fmt(r.get('simulated'))}{unit}"
        v = verdict(r)
        why = short_note(str(r.get("note") or "")) if v in ("close", "off", "opposite") else ""
        out.append(f"| {shown} | {what} | {published_cell(r)} | {sim} | {v} | {within_cell(rep.get('rows') or [])} | {why} |"
                   .replace("|  |", "| |"))
    return "\n".join(out)


def short_note(note: str, limit: int = 200) -> str:
    """A row's note for the README: whole if short, else cut after the last
    whole clause (at "; " or ". ") within `limit` characters, or after the
    last word when that clause would leave less than half of it (a note
    that opens with "below the published ratio." says why after that),
    marked with an ellipsis; the mechanism page has it whole."""
    note = " ".join(note.replace("|", "/").split())
    if len(note) <= limit:
        return note
    cut = max(note.rfind("; ", 0, limit), note.rfind(". ", 0, limit))
    if cut < limit // 2:
        cut = note.rfind(" ", 0, limit)
    return note[:cut].rstrip(" .;,") + " …"


def _fill_markers(text: str, begin: re.Pattern[str], end_marker: str, where: str, make: Any) -> str:
    out: list[str] = []
    pos = 0
    for m in begin.finditer(text):
        if m.start() < pos:
            continue
        end = text.find(end_marker, m.end())
        if end < 0:
            line = text[: m.start()].count("\n") + 1
            raise ValueError(f"{where}:{line}: {m.group(0)}: no closing {end_marker}")
        globs = [g.strip() for g in m.group(1).split(",") if g.strip()] or ["*"]
        out.append(text[pos:m.end()])
        out.append("\n" + make(globs) + "\n")
        pos = end
    out.append(text[pos:])
    return "".join(out)


def fill(text: str, reps: Sequence[dict[str, Any]], where: str = "<text>") -> str:
    return _fill_markers(text, BEGIN, END, where, lambda globs: table(reps, globs))


def fill_headlines(text: str, reps: Sequence[dict[str, Any]], where: str = "<text>",
                   pages: dict[str, list[str]] | None = None) -> str:
    return _fill_markers(text, HEADLINE_BEGIN, HEADLINE_END, where,
                         lambda globs: headline_table(reps, globs, pages))


def mechanism_pages(md: Path) -> dict[str, list[str]]:
    """The mechanism pages beside `md` (docs/mechanisms/*.md under its
    folder), each as a link relative to `md` with its reproduce globs."""
    pages: dict[str, list[str]] = {}
    for page in sorted((md.parent / "docs" / "mechanisms").glob("*.md")):
        for m in BEGIN.finditer(page.read_text(encoding="utf-8")):
            globs = [g.strip() for g in m.group(1).split(",") if g.strip()]
            pages.setdefault(page.relative_to(md.parent).as_posix(), []).extend(globs)
    return pages


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print("usage: python -m foliosim.doctables REPRODUCE.json FILE.md...", file=sys.stderr)
        return 2
    try:
        reps = json.loads(Path(args[0]).read_text(encoding="utf-8"))
        if isinstance(reps, dict):
            reps = reps.get("experiments", [reps])
        if not isinstance(reps, list):
            raise ValueError(f"{args[0]}: expected the JSON of `foliosim reproduce all --json`")
        for f in args[1:]:
            text = Path(f).read_text(encoding="utf-8")
            new = fill(text, reps, f)
            if HEADLINE_BEGIN.search(new):
                new = fill_headlines(new, reps, f, mechanism_pages(Path(f)))
            if new != text:
                write_text_atomic(f, new)
                print(f"updated {f}")
    except (OSError, ValueError) as e:
        print(f"foliosim: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
