"""`make docs-tables`: the docs' seed-vs-simulated tables come from
`foliosim reproduce --json`."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO
from foliosim import doctables

REPS = [{"name": "luf-shootdowns", "title": "t", "rows": [
    {"label": "llama", "metric": "TLB shootdowns", "unit": "/s", "seed": 1000, "simulated": 1250}]},
    {"name": "core-x", "title": "c", "rows": [{"label": "1 task", "metric": "ops", "unit": "", "seed": None, "simulated": 5}]}]


def test_fill_replaces_between_markers():
    text = "intro\n<!-- reproduce: luf-* -->\nold table\n<!-- /reproduce -->\nafter\n"
    out = doctables.fill(text, REPS)
    assert out.startswith("intro\n<!-- reproduce: luf-* -->\n| experiment |")
    assert "`luf-shootdowns` | llama | TLB shootdowns | 1,000 /s | 1,250 /s | 250 (+25.0%) |" in out
    assert "core-x" not in out and "old table" not in out and out.endswith("<!-- /reproduce -->\nafter\n")
    assert doctables.fill(out, REPS) == out  # idempotent
    empty = doctables.fill(text.replace("luf-*", "spf-*"), REPS)
    assert "No experiment registered yet" in empty and "`spf-*`" in empty


def test_cli_rewrites_files_and_rejects_unclosed(tmp_path):
    j = tmp_path / "all.json"
    j.write_text(json.dumps(REPS))
    md = tmp_path / "page.md"
    md.write_text("<!-- reproduce: * -->\n<!-- /reproduce -->\n")
    def run(*a):
        return subprocess.run([sys.executable, "-m", "foliosim.doctables", *a], capture_output=True, text=True)
    p = run(str(j), str(md))
    assert p.returncode == 0, p.stderr
    assert "`core-x` | 1 task | ops | — | 5 | — |" in md.read_text()
    bad = tmp_path / "bad.md"
    bad.write_text("a\n<!-- reproduce: x -->\n")
    p = run(str(j), str(bad))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and f"{bad}:2" in p.stderr


def test_every_mechanism_page_has_a_table_marker():
    pages = sorted((REPO / "docs" / "mechanisms").glob("*.md"))
    assert len(pages) >= 5
    for p in pages:
        t = p.read_text()
        assert doctables.BEGIN.search(t) and doctables.END in t, p
