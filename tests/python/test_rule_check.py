"""The derivation rule checked on a measurable host (foliosim.rule_check):
the derived profile carries only the host's facts, the software costs are
the rule's, and the comparison and its page come from the numbers."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from foliosim import rule_check as rc
from foliosim import validate as v
from foliosim import validation_doc
from foliosim._host import HostError

ROOT = Path(__file__).resolve().parents[2]
GENERIC = ROOT / "profiles" / "generic-x86.toml"
# profiles/rule.toml: Zen 4 is 1.13 x 1.19 x 1.0 of Skylake per clock.
ZEN4_PER_CLOCK = 1.13 * 1.19


def calibrated(tmp_path: Path, freq: float = 3.6) -> Path:
    """A calibrated profile as `foliosim calibrate` writes one: generic-x86's
    values at another measured clock."""
    text = re.sub(r"(?m)^freq_ghz = 3\.6 ", f"freq_ghz = {freq} ", GENERIC.read_text())
    p = tmp_path / "host.toml"
    p.write_text(text)
    return p


def test_the_derived_profile_holds_the_hosts_facts_and_nothing_else(tmp_path):
    text = rc.derived_profile(calibrated(tmp_path, 1.8), "zen4")
    prof = tomllib.loads(text)
    assert prof["derive"] == {"host": "generic-x86"}
    assert set(prof) == {"name", "description", "derive", "cpu", "nodes"}
    assert set(prof["cpu"]) == {*rc.CPU_FACTS, "core"} and prof["cpu"]["freq_ghz"] == 1.8 and prof["cpu"]["core"] == "zen4"
    assert all(set(n) <= set(rc.NODE_FACTS) for n in prof["nodes"]) and prof["nodes"][0]["latency_ns"] == 90.0
    assert "cost" not in prof and "tlb" not in prof
    # A core-to-core transfer calibrate measured (validation/c2c.c) is a
    # fact too; generic-x86's assumed one above was not given.
    cal = calibrated(tmp_path, 1.8)
    cal.write_text(re.sub(r"(?m)^cacheline_same_socket_ns = 60\.0 +# \[assumed\]",
                          "cacheline_same_socket_ns = 140.0 # [measured: validation/c2c.c]", cal.read_text()))
    prof = tomllib.loads(rc.derived_profile(cal, "zen4"))
    assert prof["cost"] == {"cacheline_same_socket_ns": 140.0}


def test_software_time_is_the_rule_kappa_times_the_host(tmp_path):
    host = rc._explain("generic-x86")
    for core, freq, kappa in (("zen4", 3.6, 1.0), ("zen4", 1.8, 2.0), ("skylake", 3.6, ZEN4_PER_CLOCK)):
        d = tmp_path / f"{core}-{freq}.toml"
        d.write_text(rc.derived_profile(calibrated(tmp_path, freq), core))
        got = rc._explain(str(d))
        for path in ("cost.fault_base_ns", "cost.mmap_ns", "cost.tlb_gather_ns"):
            assert got[path]["kind"] == "derived"
            assert got[path]["value"] == pytest.approx(host[path]["value"] * kappa, rel=1e-3), (core, freq, path)


def test_costs_compared_are_those_both_hosts_measured(tmp_path):
    cal = calibrated(tmp_path, 1.8)
    d = tmp_path / "d.toml"
    d.write_text(rc.derived_profile(cal, "zen4"))
    pairs = {c["path"]: c for c in rc.cost_pairs(str(d), str(cal))}
    # Measured on both (generic-x86's tags, copied): the rule's value is
    # twice the host's at half its clock.
    assert pairs["cost.fault_base_ns"]["ratio"] == pytest.approx(2.0, rel=1e-3)
    assert pairs["cost.fault_base_ns"]["host"] == 300.0
    # Assumed on the host (mmap_ns) or a fact given (latency): not compared.
    assert "cost.mmap_ns" not in pairs and "nodes[0].latency_ns" not in pairs
    assert all(c["path"] != "cpu.freq_ghz" for c in pairs.values())


def row(setting: str, workload: str, real: float, pred: float, cal: float, mode: str = "processes", noisy=()) -> dict:
    r = {"setting": setting, "workload": workload, "mode": mode, "tasks": 1, "mechanism": "m",
         "role": v.role_of(setting, workload, mode), "baseline": v.is_baseline(setting),
         "real": {"ops_per_s": real, "ops_ratio": 1.0}, "noisy": list(noisy),
         "predicted": {"ops_per_s": pred, "ops_ratio": 1.0}}
    r["rel_error"] = {"ops_per_s": abs(pred / real - 1), "ops_ratio": 0.0}
    c = {**r, "predicted": {"ops_per_s": cal, "ops_ratio": 1.0}, "rel_error": {"ops_per_s": abs(cal / real - 1), "ops_ratio": 0.0}}
    return r, c


def test_run_reruns_the_model_on_the_reports_real_figures(tmp_path, monkeypatch):
    pairs = [row("4K", "page_fault1", 1e6, 1.3e6, 1.02e6),            # fit for the calibration, held out from the rule
             row("64K", "page_fault1", 4e6, 4.4e6, 4.1e6),            # held out
             row("64K", "page_fault2", 1e6, 2e6, 1e6),                # a control: left out
             row("32K", "tlb_flush2", 1e6, 5e6, 1e6, noisy=["ops_per_s"])]  # noisy: left out
    report = tmp_path / "validate.json"
    report.write_text(json.dumps({"rows": [c for _, c in pairs], "host": {"before": {"date": "D", "cpu": "C", "nr_cpus": 2}}}))
    seen = {}

    def fake_validate(profile, quick, progress, real_from=None, **kw):
        seen.update(profile=profile, real_from=real_from)
        return {"rows": [r for r, _ in pairs]}
    monkeypatch.setattr(v, "validate", fake_validate)
    res = rc.run(report, calibrated(tmp_path, 1.8), "zen4", tmp_path / "out", progress=False)
    assert seen == {"profile": str(tmp_path / "out" / "derived.toml"), "real_from": str(report)}
    assert res["rule"]["ops_per_s"]["rows"] == 2 and res["rule"]["ops_per_s"]["max"] == pytest.approx(0.3)
    assert res["rule"]["ops_per_s"]["within_15"] == 1
    assert res["here"]["ops_per_s"]["max"] == pytest.approx(0.025) and res["here"]["ops_per_s"]["within_15"] == 2
    assert "kappa = (host 3.6 GHz x zen4" in res["kappa_note"] and "/ (1.8 GHz x zen4" in res["kappa_note"]
    assert json.loads((tmp_path / "out" / "rule.json").read_text())["core"] == "zen4"
    # The page: both profiles' figures and every judged row, from the result.
    text = rc.render(res)
    assert "| derived by the rule | 2 | 1 | 30.0% |" in text and "| calibrated on this host | 2 | 2 | 2.5% |" in text
    assert "| 4K | page_fault1 | processes | 1,000,000 | 1,300,000 | +30.0% | 1,020,000 | +2.0% |" in text
    assert "page_fault2" not in text and "tlb_flush2" not in text
    assert "clock (1.80 GHz)" in text and "`nodes[0].latency_ns`" in text and "cost.fault_base_ns" in text


def test_the_page_keeps_the_rules_block_and_fills_it(tmp_path):
    page = tmp_path / "validation.md"
    rep = {"rows": [], "repeats": 1, **v.summarise([])}
    src = tmp_path / "r.json"
    src.write_text(json.dumps(rep))
    assert validation_doc.main([str(src), str(page)]) == 0
    assert "Not checked yet: `make validate-rule`" in page.read_text()
    res = tmp_path / "rule.json"
    res.write_text(json.dumps({"machine": {}, "report": "x", "profile": "d.toml", "freq_ghz": 3.0, "core": "zen4",
                               "host": "generic-x86", "host_freq_ghz": 3.6, "kappa_note": "K", "given": [],
                               "rows": [], "costs": [], "rule": rc._summary([]), "here": rc._summary([])}))
    rc.fill_doc(res, page)
    assert "Not checked yet" not in page.read_text() and "core `zen4`" in page.read_text()
    # Regenerating the page from a new report keeps the block as it was.
    assert validation_doc.main([str(src), str(page)]) == 0
    assert page.read_text().count(rc.MARK) == 1 and "core `zen4`" in page.read_text()


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(HostError, match="run `foliosim calibrate` first"):
        rc.derived_profile(tmp_path / "missing.toml", "zen4")
    assert rc.main(["run", "--core", "zen4", "--report", str(tmp_path / "none.json"),
                    "--calibrated", str(calibrated(tmp_path)), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "make docs-validation" in err


def test_the_committed_page_has_the_section():
    text = (ROOT / "docs" / "validation.md").read_text()
    assert text.count(rc.MARK) == 1 and text.count(rc.END_MARK) == 1
