"""`bench --record`'s report (issue #29): --only measures some programs
again and keeps the rest of the earlier report."""

import json

from foliosim.record_bench import _merged, render


def _row(name, ratio, measured=None):
    r = {"program": name, "what": name, "repeats": 3, "native_s": 1.0, "recorded_s": ratio, "ratio": ratio,
         "ratio_runs": [ratio], "recorded_inside_s": 1.0, "trace_bytes": 1000, "faults": 10,
         "replay": {"faults_per_host_s": 1e6, "profile": "generic-x86"}}
    if measured:
        r["measured"], r["loadavg_1m_at_end"] = measured, 0.5
    return r


def _rep(rows, date="2026-11-29"):
    return {"rows": rows, "target_ratio": 1.5, "date": date, "scale": "full",
            "host": {"cpu": "AMD EPYC", "cpus": 2, "kernel": "6.12", "loadavg_1m_at_end": 1.0}}


def test_only_replaces_its_rows_and_keeps_the_others_in_order(tmp_path):
    earlier = tmp_path / "record-bench.json"
    earlier.write_text(json.dumps(_rep([_row("kernel build", 1.4), _row("xz -9", 1.2), _row("sqlite3", 2.8)])))
    rep = _merged(earlier, _rep([_row("sqlite3", 1.3, "2026-11-30 10:00 UTC")], "2026-11-30"))
    assert [r["program"] for r in rep["rows"]] == ["kernel build", "xz -9", "sqlite3"]
    assert [r["ratio"] for r in rep["rows"]] == [1.4, 1.2, 1.3]
    assert rep["rows"][0]["measured"] == "2026-11-29"
    text = render(rep)
    assert "separate runs" in text and "sqlite3 2026-11-30 10:00 UTC" in text


def test_only_does_not_mix_another_scale(tmp_path):
    earlier = tmp_path / "record-bench.json"
    earlier.write_text(json.dumps({**_rep([_row("kernel build", 1.4)]), "scale": "small"}))
    rep = _merged(earlier, _rep([_row("sqlite3", 1.3, "2026-11-30 10:00 UTC")]))
    assert [r["program"] for r in rep["rows"]] == ["sqlite3"]
    assert "separate runs" not in render(rep)
