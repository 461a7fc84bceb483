"""`foliosim validate`'s report on made-up rows (no host needed): roles,
the held-out headline, noisy rows, and docs/validation.md's generator."""

from __future__ import annotations

import json

from foliosim import validate as v
from foliosim import validation_doc


def row(setting: str, workload: str, real_ratio: list[float], pred_ratio: float, mode: str = "processes") -> dict:
    med = sorted(real_ratio)[len(real_ratio) // 2]
    r = {"setting": setting, "workload": workload, "mode": mode, "tasks": 1 if mode == "processes" else 2,
         "mechanism": "m", "role": v.role_of(setting, workload, mode), "repeats": len(real_ratio),
         "real": {"faults_per_op": 1.0, "rss": 1000.0, "ops_per_s": 1e6, "ops_ratio": med},
         "real_range": {"faults_per_op": [1.0, 1.0], "rss": [1000.0, 1000.0], "ops_per_s": [1e6, 1e6],
                        "ops_ratio": [min(real_ratio), max(real_ratio)]},
         "noisy": ["ops_ratio"] if v.spread(real_ratio) > v.TARGETS["ops_ratio"] else [],
         "predicted": {"faults_per_op": 1.0, "rss": 1000.0, "ops_per_s": 1e6, "ops_ratio": pred_ratio}, "note": "n"}
    r["rel_error"] = {m: v.rel_err(r["predicted"][m], r["real"][m], m) for m in v.METRICS}
    return r


def report() -> dict:
    rows = [row("4K", "page_fault1", [1, 1, 1], 1.0),
            row("16K", "page_fault1", [2.0, 2.1, 2.05], 2.05),          # fit, exact
            row("64K", "page_fault1", [4.0, 4.1, 4.05], 4.455),         # held-out, +10%
            row("64K", "sparse_touch", [0.25, 0.26, 0.255], 0.2652),    # held-out, +4%
            row("64K", "tlb_flush2", [1.0, 2.0, 1.5], 3.0)]             # held-out, noisy, +100%
    return {"rows": rows, "repeats": 3, "seconds_per_run": 1.0, "profile": "host.toml", **v.summarise(rows)}


def test_roles_follow_what_calibration_measured():
    assert v.role_of("4K", "page_fault1", "processes") == "baseline"
    assert v.role_of("16K", "page_fault1", "processes") == "fit"
    assert v.role_of("2M", "page_fault1", "processes") == "fit"
    assert v.role_of("32K", "page_fault1", "processes") == "held-out"
    assert v.role_of("64K", "page_fault1", "processes") == "held-out"
    assert v.role_of("16K", "page_fault1", "threads") == "held-out"
    assert v.role_of("2M", "sparse_touch", "processes") == "held-out"


def test_the_headline_is_the_held_out_rows_without_the_noisy_ones():
    rep = report()
    h = rep["headline"]["ops_ratio"]
    # 64K page_fault1 (+10%) and sparse_touch (+4%): the noisy tlb_flush2
    # row (+100%, real spread 67%) is counted apart, the fit row not at all.
    assert h["rows"] == 2
    assert abs(h["max"] - 0.10) < 1e-9 and abs(h["mean"] - 0.07) < 1e-9
    assert rep["fit"]["ops_ratio"]["rows"] == 1 and rep["fit"]["ops_ratio"]["max"] < 1e-9
    assert rep["noisy_rows"]["ops_ratio"] == 1
    lines = "\n".join(v.headline_lines(rep))
    assert "ops_ratio      max error   10.0%  mean    7.0% over 2 held-out rows" in lines, lines
    assert "MISSED" not in lines.splitlines()[0]  # 10% <= 15% and 7.0% <= 7%
    assert "noisy rows" in lines


def test_a_held_out_miss_fails_the_headline():
    rep = report()
    rep["rows"][3] = row("64K", "sparse_touch", [0.25, 0.26, 0.255], 0.33)  # +29%
    rep.update(v.summarise(rep["rows"]))
    assert "MISSED" in v.headline_lines(rep)[0]


def test_real_cells_show_the_median_and_the_range():
    table = v.format_table(report())
    assert "4.05 [4-4.1]" in table and "1.5 [1-2] (noisy)" in table
    assert table.splitlines()[0].startswith("role")


def test_validation_doc_is_generated_from_the_report(tmp_path):
    src, out = tmp_path / "validate.json", tmp_path / "validation.md"
    src.write_text(json.dumps(report()))
    assert validation_doc.main([str(src), str(out)]) == 0
    text = out.read_text()
    assert "## Headline" in text and "## Held-out rows" in text and "## Rows calibration fitted on" in text
    assert "10.0%" in text and "over 2 held-out rows" in text
    held = text.split("## Held-out rows")[1].split("##")[0]
    assert "sparse_touch" in held and "| fit |" not in held
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert validation_doc.main([str(bad), str(out)]) == 2


def test_one_outlying_repeat_does_not_make_a_row_noisy():
    assert v.spread([2.0, 2.02, 2.04, 2.06, 3.5]) < v.TARGETS["ops_ratio"]
    assert v.spread([1.0, 1.5, 2.0, 2.5, 3.0]) > v.TARGETS["ops_ratio"]
    assert v.spread([1.0, 2.0]) == 1.0 / 1.5 and v.spread([4.0]) == 0.0
