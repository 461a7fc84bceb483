"""`make docs-tables`: the docs' seed-vs-simulated tables come from
`foliosim reproduce --json`."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO
from foliosim import doctables
from foliosim.verdict import count_within

REPS = [{"name": "luf-shootdowns", "title": "t", "rows": [
    {"label": "llama", "metric": "TLB shootdowns", "unit": "/s", "seed": 1000, "simulated": 1250}]},
    {"name": "core-x", "title": "c", "rows": [{"label": "1 task", "metric": "ops", "unit": "", "seed": None, "simulated": 5}]}]


def test_fill_replaces_between_markers():
    text = "intro\n<!-- reproduce: luf-* -->\nold table\n<!-- /reproduce -->\nafter\n"
    out = doctables.fill(text, REPS)
    assert out.startswith("intro\n<!-- reproduce: luf-* -->\n| experiment |")
    assert "| experiment | label | metric | published | simulated | difference | verdict | note |" in out
    assert "`luf-shootdowns` | llama | TLB shootdowns | 1,000 /s | 1,250 /s | 250 (+25.0%) | close |" in out
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
    assert "`core-x` | 1 task | ops | — | 5 | — | model only |" in md.read_text()
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


def _row(label, metric, unit, pub, sim, **kw):
    return {"label": label, "metric": metric, "unit": unit, "published": pub, "simulated": sim, **kw}


def test_headline_rule_and_marker():
    rows = [_row("a", "ops/s", "ops/s", 100.0, 90.0), _row("b", "change", "%", 40.0, 30.0),
            _row("c", "ratio", "x", 2.0, 2.0), _row("d", "other", "s", None, 5.0)]
    # no marker: the first published row in % or x, else the first published
    # row, else the last row
    assert doctables.headline({"rows": rows})["label"] == "b"
    assert doctables.headline({"rows": rows[:1] + rows[3:]})["label"] == "a"
    assert doctables.headline({"rows": [_row("e", "m", "%", None, 1.0), _row("f", "m", "x", None, 2.0)]})["label"] == "f"
    assert doctables.headline({"rows": []}) is None
    # the experiment's marker takes over, in each of its forms
    assert doctables.headline({"rows": [*rows[:2], {**rows[2], "headline": True}, rows[3]]})["label"] == "c"
    assert doctables.headline({"rows": rows, "headline": 3})["label"] == "d"
    assert doctables.headline({"rows": rows, "headline": "ratio"})["label"] == "c"
    assert doctables.headline({"rows": rows, "headline": "a | ops/s"})["label"] == "a"
    assert doctables.headline({"rows": rows, "headline": {"label": "d", "metric": "other"}})["label"] == "d"
    # the old key of the published figure still reads
    old = [{**{k: v for k, v in r.items() if k != "published"}, "seed": r["published"]} for r in rows]
    assert doctables.headline({"rows": old})["label"] == "b"


def test_verdict_words():
    v = doctables.verdict
    assert v(_row("", "", "x", 2.0, 2.1)) == "matches"       # 5%
    assert v(_row("", "", "x", 2.0, 2.4)) == "close"         # 20%
    assert v(_row("", "", "x", 2.0, 3.0)) == "off"           # 50%
    assert v(_row("", "", "%", 410.0, 367.0)) == "close"     # 10.5% of 410
    assert v(_row("", "", "%", -12.0, 8.0)) == "opposite"
    assert v(_row("", "", "%", -8.4, 0.0)) == "off"          # 8.4 points of 8.4
    assert v(_row("", "", "s", None, 3.0)) == "model only"
    assert v(_row("", "", "s", 3.0, None)) == "no value"
    assert v(_row("", "", "", 0.0, 0.0)) == "matches"


def test_a_change_of_the_other_sign_never_matches():
    # fpr-overhead's headline before: -1.70% published, +1.41% simulated
    # was "matches" under a blanket 5-point floor.
    v = doctables.verdict
    assert v(_row("", "", "%", -1.70, 1.41)) == "opposite"
    assert v(_row("", "", "%", 1.1, -2.0)) == "opposite"
    # however wide a band the source states
    assert v(_row("", "", "%", -1.70, 1.41, noise=5.0)) == "opposite"
    assert v(_row("", "", "%", -0.01, 0.01, noise=1.0)) == "opposite"
    # zero has no sign: a change the model does not make is "off", not opposite
    assert v(_row("", "", "%", -1.70, 0.0)) == "off"


def test_a_noise_band_counts_only_where_stated_and_only_that_wide():
    v = doctables.verdict
    # no band stated: a small published change is judged relative to itself
    assert v(_row("", "", "%", -0.45, -0.9)) == "off"
    assert v(_row("", "", "%", 0.83, 0.0)) == "off"
    # a stated band: within it matches ...
    assert v(_row("", "", "%", -0.45, -0.9, noise=0.53)) == "matches"
    assert v(_row("", "", "%", 0.83, 0.0, noise=3.66)) == "matches"
    # ... and only that wide: beyond it, the difference relative to the figure
    assert v(_row("", "", "%", -1.70, -3.2, noise=1.31)) == "off"
    assert v(_row("", "", "%", -10.0, -12.2, noise=1.0)) == "close"
    # a band in the figure's own unit, on an absolute row
    assert v(_row("", "", "ops/s", 1000.0, 1040.0, noise=50.0)) == "matches"
    assert v(_row("", "", "ops/s", 1000.0, 1300.0, noise=50.0)) == "off"


def test_rows_within_25_percent_are_counted():
    rows = [_row("a", "", "x", 2.0, 2.1), _row("b", "", "x", 2.0, 2.4), _row("c", "", "x", 2.0, 3.0),
            _row("d", "", "%", -1.0, 1.0), _row("e", "", "s", None, 1.0), _row("f", "", "s", 3.0, None)]
    # matches and close count; off, opposite and a published row the model
    # gave no value for count against; a model-only row not at all
    assert count_within(rows) == (2, 5)
    assert doctables.within_cell(rows) == "2 of 5"
    assert doctables.within_cell([rows[4]]) == "—"


def test_headline_table_in_a_readme(tmp_path):
    (tmp_path / "docs" / "mechanisms").mkdir(parents=True)
    (tmp_path / "docs" / "mechanisms" / "luf.md").write_text("<!-- reproduce: luf-* -->\n<!-- /reproduce -->\n")
    noted = {"name": "luf-noted", "rows": [{"label": "x", "metric": "y", "unit": "x", "seed": 2.0, "simulated": 1.0,
                                             "note": "half: " + "a clause; " * 30}]}
    reps = [*REPS, noted, {"name": "empty", "rows": []}]
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- headline: * -->\nold\n<!-- /headline -->\nend\n")
    j = tmp_path / "all.json"
    j.write_text(json.dumps(reps))
    p = subprocess.run([sys.executable, "-m", "foliosim.doctables", str(j), str(readme)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    text = readme.read_text()
    assert "old" not in text and text.endswith("<!-- /headline -->\nend\n")
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert lines[0] == "| experiment | headline figure | published | simulated | verdict | rows within 25% | why it differs |"
    assert lines[2] == "| [`luf-shootdowns`](docs/mechanisms/luf.md) | llama: TLB shootdowns | 1,000 /s | 1,250 /s | close | 1 of 1 | |"
    assert lines[3] == "| `core-x` | 1 task: ops | — | 5 | model only | — | |"
    # a long note is cut after its last whole clause within 200 characters
    assert lines[4].startswith("| [`luf-noted`](docs/mechanisms/luf.md) | x: y | 2 x | 1 x | off | 0 of 1 | half: a clause; a clause;")
    why = lines[4].split(" | ")[-1].removesuffix(" |")
    assert why.endswith("a clause …") and len(why) <= 202
    assert lines[5] == "| `empty` | — | — | — | no rows | — | |"
    # a first sentence too short to say why is not all that is shown
    opening = doctables.short_note("below the published ratio. " + "the reason goes on " * 20)
    assert opening.startswith("below the published ratio. the reason goes on") and opening.endswith(" …")
    bad = tmp_path / "bad.md"
    bad.write_text("a\n\n<!-- headline: * -->\n")
    p = subprocess.run([sys.executable, "-m", "foliosim.doctables", str(j), str(bad)], capture_output=True, text=True)
    assert p.returncode == 2 and f"{bad}:3" in p.stderr and len(p.stderr.strip().splitlines()) == 1
