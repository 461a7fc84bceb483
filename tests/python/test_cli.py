"""The CLI: list, run (JSON, results on disk, determinism, --set, --check),
reproduce, bench (its reporting, with the benchmarks themselves stubbed)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

import foliosim
from conftest import RESULT_KEYS, one_json, run_cli, stderr_lines
from foliosim import _core, cli
from foliosim.result import deterministic_view


def test_console_script_installed():
    script = Path(sys.executable).parent / "foliosim"
    assert script.exists(), "pip/maturin should install the console script next to python"


def test_list_human():
    proc = run_cli("list")
    assert proc.returncode == 0, proc.stderr
    for section in ("Workloads", "Machine profiles", "Knobs", "Counters", "Experiments"):
        assert section in proc.stdout


def test_list_json():
    proc = run_cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    cat = one_json(proc.stdout)
    assert {"workloads", "profiles", "knobs", "counters", "experiments"} <= set(cat)
    names = {w["name"] for w in cat["workloads"]}
    assert "page_fault1" in names
    assert any(p["name"] == "generic-x86" for p in cat["profiles"])
    for k in cat["knobs"]:
        assert {"key", "default", "help"} <= set(k)
    for c in cat["counters"]:
        assert {"name", "help", "gauge"} <= set(c)


def test_list_profile_explain_names_every_values_source(tmp_path):
    proc = run_cli("list", "profiles", "skl-2s-72", "--explain", "--json")
    assert proc.returncode == 0, proc.stderr
    data = one_json(proc.stdout)
    assert data["name"] == "skl-2s-72" and data["host"] == "generic-x86"
    kinds = {v["path"]: v["kind"] for v in data["values"]}
    assert kinds["cpu.nr_cpus"] == "public"
    assert kinds["cost.fault_base_ns"] == "derived"
    assert set(kinds.values()) <= {"measured", "public", "derived", "assumed"}
    fault = next(v for v in data["values"] if v["path"] == "cost.fault_base_ns")
    assert "kappa" in fault["note"] and " x " in fault["what"]
    human = run_cli("list", "profiles", "skl-2s-72", "--explain")
    assert human.returncode == 0 and "sources:" in human.stdout and "derived" in human.stdout
    # A profile file of one's own, derived from a built-in host, relative to the working directory.
    (tmp_path / "box.toml").write_text('name = "box"\ndescription = "d"\n[derive]\nhost = "generic-x86"\n'
                                       '[cpu]\nfreq_ghz = 1.8  # [assumed] a test\ncore = "zen4"  # [assumed] a test\n')
    mine = run_cli("list", "profiles", "box.toml", "--explain", "--json", cwd=tmp_path)
    assert mine.returncode == 0, mine.stderr
    vals = {v["path"]: v for v in one_json(mine.stdout)["values"]}
    assert vals["cpu.freq_ghz"]["kind"] == "assumed" and vals["cost.trap_ns"]["kind"] == "derived"
    assert vals["cost.trap_ns"]["value"] == pytest.approx(250.0 * 3.6 / 1.8)
    bad = run_cli("list", "profiles", "no-such-box", "--explain")
    assert bad.returncode == 2 and len(stderr_lines(bad)) == 1, bad.stderr
    assert run_cli("list", "knobs", "--explain").returncode == 2


def run_json(config: Path, *extra: str, cwd: Path | None = None) -> dict:
    proc = run_cli("run", str(config), "--json", *extra, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return one_json(proc.stdout)


def test_run_json_shape(tiny_config, tmp_path):
    res = run_json(tiny_config, "--out", str(tmp_path / "out"))
    assert set(res) >= RESULT_KEYS
    assert res["interrupted"] is False
    assert res["sim_time_s"] > 0
    assert {"ops_per_s", "ops_total", "tasks"} <= set(res["summary"])
    assert "pgfault" in res["vmstat"]
    assert isinstance(res["per_task"], list) and res["per_task"]
    assert {"task", "cpu", "ops", "user_ns", "sys_ns"} <= set(res["per_task"][0])
    assert "t_s" in res["timeseries"]
    assert {"enabled", "audits", "violations"} <= set(res["checker"])
    assert res["checker"]["enabled"] is False
    assert res["config"]["workload"]["name"] == "page_fault1"


def test_run_human_summary(tiny_config, tmp_path):
    proc = run_cli("run", str(tiny_config), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert "ops/s" in proc.stdout and "pgfault" in proc.stdout
    assert "time (share of user + sys)" in proc.stdout
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal


def test_determinism(tiny_config, tmp_path):
    a = run_json(tiny_config, "--out", str(tmp_path / "a"))
    b = run_json(tiny_config, "--out", str(tmp_path / "b"))
    def dump(r):
        return json.dumps(deterministic_view(r), sort_keys=True)
    assert dump(a) == dump(b)
    fa = json.loads((tmp_path / "a" / "result.json").read_text())
    fb = json.loads((tmp_path / "b" / "result.json").read_text())
    assert dump(fa) == dump(fb) == dump(a)
    for name in ("vmstat.parquet", "timeseries.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a" / name), pd.read_parquet(tmp_path / "b" / name))


def test_seed_is_part_of_the_config(tiny_config, tmp_path):
    res = run_json(tiny_config, "--set", "seed=8", "--out", str(tmp_path / "s"))
    assert res["config"]["seed"] == 8


def test_results_written_atomically(tiny_config, tmp_path):
    out = tmp_path / "out"
    for _ in range(2):  # the second run replaces the first's files
        run_json(tiny_config, "--out", str(out))
        assert sorted(os.listdir(out)) == ["result.json", "timeseries.parquet", "vmstat.parquet"]
    raw = json.loads((out / "result.json").read_text())
    assert set(raw) >= RESULT_KEYS
    vm = pd.read_parquet(out / "vmstat.parquet")
    assert list(vm.columns) == ["name", "value"]
    assert set(vm["name"]) == set(raw["vmstat"])
    ts = pd.read_parquet(out / "timeseries.parquet")
    assert "t_s" in ts.columns and len(ts) == len(raw["timeseries"]["t_s"])


def test_default_out_dir(tiny_config, tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    run_json(tiny_config, cwd=cwd)
    assert (cwd / "results" / "tiny" / "result.json").exists()


def test_set_overrides(tiny_config, tmp_path):
    res = run_json(tiny_config, "--set", "workload.tasks=3",
                   "--set", 'knobs."kernel/mm/transparent_hugepage/enabled"="never"',
                   "--out", str(tmp_path / "o"))
    assert res["config"]["workload"]["tasks"] == 3
    assert res["summary"]["tasks"] == 3
    assert res["config"]["knobs"]["kernel/mm/transparent_hugepage/enabled"] == "never"


def test_check_flag(tiny_config, tmp_path):
    proc = run_cli("run", str(tiny_config), "--json", "--check", "--out", str(tmp_path / "o"))
    assert proc.returncode in (0, 1), proc.stderr  # 1 = the checker found a violation
    res = one_json(proc.stdout)
    assert res["config"]["run"]["check"] is True
    assert res["checker"]["enabled"] is True


def test_reproduce_unknown_name():
    proc = run_cli("reproduce", "no-such-experiment")
    assert proc.returncode == 2
    lines = stderr_lines(proc)
    assert len(lines) == 1 and "no-such-experiment" in lines[0]


def test_reproduce_all_empty_folder(tmp_path):
    # An experiments folder with nothing in it: says so, or prints [] with
    # --json, and writes nothing.
    env = {"FOLIOSIM_EXPERIMENTS": str(tmp_path / "exps")}
    (tmp_path / "exps").mkdir()
    out = tmp_path / "out"
    proc = run_cli("reproduce", "all", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "no experiments" in proc.stdout
    proc = run_cli("reproduce", "all", "--json", "--out", str(out), env=env)
    assert proc.returncode == 0
    assert one_json(proc.stdout) == []
    assert not out.exists()


def test_reproduce_bad_experiment_file_is_one_line(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "broken.toml").write_text('title = "x"\n[config]\nworkload.name = "nope"\n[runs.a]\n')
    proc = run_cli("reproduce", "broken", env={"FOLIOSIM_EXPERIMENTS": str(tmp_path)})
    assert proc.returncode == 2
    lines = stderr_lines(proc)
    assert len(lines) == 1 and "broken.toml" in lines[0] and "workload" in lines[0], lines


def test_bench_reporting(monkeypatch, capsys):
    """The real benchmarks take minutes; here they are stubbed to check the
    report: keys, targets, PASS/FAIL."""
    figures = {"anon_faults": {"anon_faults_per_host_s": 6e6},
               "tlb_hits": {"tlb_hit_accesses_per_host_s": 1e7},
               "pf1_threads64": {"pf1_threads64_host_s": 12.0, "faults": 24_000_000},
               "fpr_overhead": {"fpr_overhead_host_s": 40.0},
               "anon_fault_instructions": {"instructions_per_anon_fault": 1631.0, "events": [2, 1]},
               "tlb_hit_instructions": {"instructions_per_tlb_hit": 201.0, "events": [2, 1]}}
    monkeypatch.setattr(cli._core, "bench_json", lambda which: json.dumps(figures[which]))
    monkeypatch.setattr(cli._core, "bench_instructions_json", lambda which, child: json.dumps(figures[which]))
    monkeypatch.setattr(cli, "_bench_big", lambda name="big_machine": ({"host_s": 1.0}, 2.5))
    monkeypatch.setattr(cli, "_bench_reproduction", lambda which: figures[which])
    assert cli.main(["bench", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    for k in ("instructions_per_anon_fault", "instructions_per_tlb_hit", "anon_faults_per_host_s", "tlb_hit_accesses_per_host_s",
              "pf1_threads64_host_s", "peak_rss_1tib_gib", "fpr_overhead_host_s"):
        assert isinstance(obj[k], float)
    assert obj["pass"] == {"instructions_per_anon_fault": True, "instructions_per_tlb_hit": False,
                           "anon_faults_per_host_s": True, "tlb_hit_accesses_per_host_s": False,
                           "pf1_threads64_host_s": True, "peak_rss_1tib_gib": True, "fpr_overhead_host_s": True}
    # The 64-thread run's rate, beside its time: faults over host seconds.
    assert obj["details"]["pf1_threads64"]["pf1_threads64_faults_per_host_s"] == 2e6
    assert cli.main(["bench", "--strict"]) == 1
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" in out


def test_bench_count_child_runs_the_workload():
    """The command the instruction counts run under callgrind: the
    interpreter on the compiled module alone, printing the events of one
    run, the same as counted in this process; a longer run counts more."""
    import subprocess

    child = cli._count_child()
    assert child[0] == sys.executable and Path(child[-1]).samefile(_core.__file__)
    counts = []
    for sim_s in ("0.001", "0.002"):
        proc = subprocess.run([*child, "anon_faults", sim_s], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONHASHSEED": "0"})
        assert proc.returncode == 0, proc.stderr
        counts.append(int(proc.stdout))
        assert counts[-1] == _core.bench_events("anon_faults", float(sim_s))
    assert 0 < counts[0] < counts[1]
    # pandas stays out of it (its import would dominate the count's time).
    # 1 ms: past the process's start-up (its image) and the first pass.
    proc = subprocess.run([child[0], "-X", "importtime", *child[1:], "tlb_hits", "0.001"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 0 and "pandas" not in proc.stderr
    with pytest.raises(foliosim.WorkloadError, match="unknown counted workload"):
        _core.bench_events("pf1_threads64", 0.1)


def test_bench_big_measures_child_rss(monkeypatch):
    """A memory benchmark's figure is the peak RSS of its own child process:
    a child that held more before it does not count (wait4's rusage)."""
    import subprocess

    real_popen = subprocess.Popen
    seen = []

    def child_holding(mib):
        def fake_popen(cmd, **kw):
            seen.append(cmd[1:])
            # a child that holds `mib` MiB and prints JSON, as _bench_big does
            code = f"b = bytearray({mib} << 20); b[::4096] = b'x' * len(b[::4096]); print('{{\"ok\": 1}}')"
            return real_popen([sys.executable, "-c", code], **kw)
        return fake_popen

    # Sizes well above this process's own RSS, which a forked child shares
    # (and counts) until it execs.
    monkeypatch.setattr(cli.subprocess, "Popen", child_holding(1024))
    _, big = cli._bench_big()
    monkeypatch.setattr(cli.subprocess, "Popen", child_holding(512))
    data, small = cli._bench_big("cloud_scale")
    assert seen == [["-m", "foliosim._bench_big", "big_machine"], ["-m", "foliosim._bench_big", "cloud_scale"]]
    assert data == {"ok": 1}
    assert 1.0 < big < 6 and 0.5 < small < big - 0.3, (big, small)


def test_list_policies_shows_the_registry_with_each_policys_own_knobs():
    proc = run_cli("list", "policies")
    assert proc.returncode == 0, proc.stderr
    for selector, name in (("anon_folio.mode", "only-order"), ("host.discard", "pressure"),
                           ("promotion_list_order", "order0"), ("fault_locking", "per_vma")):
        assert f'"{selector}"' in proc.stdout and f"    {name}" in proc.stdout, name
    one = run_cli("list", "policies", "rfc-v2").stdout
    assert "anon_folio.max_order" in one and "anon_folio.batch_zap" in one and "only-order" not in one
    cat = one_json(run_cli("list", "--json", "policies").stdout)
    rfc = next(p for p in cat["policies"] if p["name"] == "rfc-v2")
    assert rfc["selector"] == "anon_folio.mode" and rfc["help"] and len(rfc["knobs"]) == 7
    assert sum(p["default"] for p in cat["policies"] if p["selector"] == "anon_folio.mode") == 1
