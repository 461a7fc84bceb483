"""Fill the published-vs-simulated tables of the docs from
docs/reproductions.json (or `foliosim reproduce all --json` output), so that
they never drift from what the simulator gives.

    python -m foliosim.doctables REPRODUCE.json FILE.md...   (`make docs-tables`)

In each FILE, the text between ``<!-- reproduce: GLOB[, GLOB...] -->`` and
``<!-- /reproduce -->`` is replaced by a Markdown table of every row of the
experiments whose name matches a GLOB (fnmatch; ``*`` for all). A row's
``note``, when present, goes in the last column. A file is
rewritten (atomically) only if its text changes. Exit 2 with one line on bad
input (unreadable JSON, an unclosed marker).
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

__all__ = ["fill", "main", "table"]

BEGIN = re.compile(r"<!-- reproduce:\s*([^>]*?)\s*-->")
END = "<!-- /reproduce -->"


def table(reps: Sequence[dict[str, Any]], globs: Sequence[str]) -> str:
    chosen = [r for r in reps if any(fnmatch.fnmatchcase(str(r.get("name", "")), g) for g in globs)]
    if not chosen:
        return ("_No experiment registered yet: filled by `foliosim reproduce` "
                f"(`make docs-tables`) from experiments named {', '.join(f'`{g}`' for g in globs)}._")
    out = ["| experiment | label | metric | published | simulated | difference | note |", "| --- | --- | --- | ---: | ---: | ---: | --- |"]
    for rep in chosen:
        for r in rep.get("rows") or []:
            published = r.get("published", r.get("seed"))
            d, p = difference(published, r.get("simulated"))
            diff = "—" if d is None else (f"{fmt(d)} ({p:+.1f}%)" if p is not None else fmt(d))
            unit = f" {r.get('unit')}" if r.get("unit") else ""
            seed = "—" if published is None else f"{fmt(published)}{unit}"
            note = str(r.get("note") or "").replace("|", "/").replace("\n", " ")
            out.append(f"| `{rep.get('name')}` | {r.get('label', '')} | {r.get('metric', '')} | {seed} | "
                       f"{fmt(r.get('simulated'))}{unit} | {diff} | {note} |")
    return "\n".join(out)


def fill(text: str, reps: Sequence[dict[str, Any]], where: str = "<text>") -> str:
    out: list[str] = []
    pos = 0
    for m in BEGIN.finditer(text):
        if m.start() < pos:
            continue
        end = text.find(END, m.end())
        if end < 0:
            line = text[: m.start()].count("\n") + 1
            raise ValueError(f"{where}:{line}: {m.group(0)}: no closing {END}")
        globs = [g.strip() for g in m.group(1).split(",") if g.strip()] or ["*"]
        out.append(text[pos:m.end()])
        out.append("\n" + table(reps, globs) + "\n")
        pos = end
    out.append(text[pos:])
    return "".join(out)


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
            if new != text:
                write_text_atomic(f, new)
                print(f"updated {f}")
    except (OSError, ValueError) as e:
        print(f"foliosim: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
