"""`foliosim compare A B`: perf-diff-like comparison of two result sets."""

from __future__ import annotations

import json

import pytest

from conftest import one_json, run_cli, stderr_lines, tiny_runs
from foliosim import compare


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    tiny_runs(d, {"a": 2, "b": 4})
    return d / "a", d / "b"


def test_compare_json_lines(two_runs):
    a, b = two_runs
    proc = run_cli("compare", str(a), str(b / "result.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    obj = one_json(proc.stdout)
    lines = {ln["name"]: ln for ln in obj["lines"]}
    ra = json.loads((a / "result.json").read_text())
    rb = json.loads((b / "result.json").read_text())
    t = lines["summary.tasks"]
    assert (t["a"], t["b"], t["delta"], t["pct"]) == (2.0, 4.0, 2.0, 100.0)
    pg = lines["vmstat.pgfault"]
    assert pg["a"] == ra["vmstat"]["pgfault"] and pg["b"] == rb["vmstat"]["pgfault"]
    assert pg["pct"] == pytest.approx(100.0 * (pg["b"] - pg["a"]) / pg["a"])
    # most changed first; unchanged counters left out
    pcts = [abs(ln["pct"]) for ln in obj["lines"] if ln["pct"] is not None]
    assert pcts == sorted(pcts, reverse=True)
    assert all(ln["delta"] != 0 for ln in obj["lines"])
    assert "host_time_s" not in lines


def test_compare_text_like_perf_diff(two_runs):
    a, b = two_runs
    proc = run_cli("compare", str(a), str(b), "--limit", "5")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0].startswith("# A: ") and out[1].startswith("# B: ")
    assert "Delta %" in out[3] and "Counter" in out[3]
    body = [ln for ln in out[4:] if not ln.startswith("#")]
    assert len(body) == 5 and all(ln.strip().endswith(tuple("abcdefghijklmnopqrstuvwxyz_")) for ln in body)
    assert "more changed" in out[-1]


def test_compare_same_is_empty(two_runs):
    a, _ = two_runs
    proc = run_cli("compare", str(a), str(a))
    assert proc.returncode == 0 and "no differences" in proc.stdout


def test_compare_new_counter_first():
    a = compare.ResultSet("a", "run", 1, {"x": 10.0, "y": 0.0, "z": 100.0})
    b = compare.ResultSet("b", "run", 1, {"x": 11.0, "y": 5.0, "z": 50.0})
    names = [ln.name for ln in compare.diff(a, b)]
    assert names == ["y", "z", "x"]  # from zero, then -50%, then +10%
    text = compare.format_diff(a, b, compare.diff(a, b), None)
    assert "new" in text and "-50.00%" in text and "+10.00%" in text


def test_compare_bad_input(tmp_path, two_runs):
    a, _ = two_runs
    (tmp_path / "junk.json").write_text("{not json")
    for bad in (str(tmp_path / "missing"), str(tmp_path / "junk.json"), str(tmp_path)):
        proc = run_cli("compare", str(a), bad)
        assert proc.returncode == 2
        lines = stderr_lines(proc)
        assert len(lines) == 1 and bad in lines[0], lines
