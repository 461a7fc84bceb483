"""The human summary of `foliosim run`: time shares of user + sys, zero rows
left out (and counted), `--all`, singular and plural."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import run_cli
from foliosim.cli import format_summary
from foliosim.result import Result


def raw_result(tasks: int = 4) -> dict:
    return {
        "config": {"seed": 1, "machine": {"profile": "generic-x86"},
                   "workload": {"name": "page_fault1", "mode": "processes", "tasks": tasks},
                   "run": {"warmup_s": 0.0}},
        "interrupted": False, "sim_time_s": 1.0, "host_time_s": 0.1,
        "summary": {"ops_per_s": 10.0, "ops_total": 10, "tasks": tasks},
        "vmstat": {"pgfault": 5, "pgfree": 0},
        # sys is the kernel entries' sum plus 0.5 s no entry accounts for.
        "time_ns": {"user": 1_000_000_000, "sys": 9_000_000_000, "fault": 6_000_000_000,
                    "munmap": 2_500_000_000, "mprotect": 0, "brk": 0},
        "locks": {"zone_lock_wait_ns": 7, "lru_lock_wait_ns": 0, "mmap_lock_sleeps": 0},
        "checker": {"enabled": True, "audits": 1, "violations": []},
    }


def shares(text: str) -> dict[str, float]:
    out = {}
    for ln in text.splitlines():
        m = re.match(r"^(\s*\S.*?)\s+[\d.]+\s+([\d.]+)%$", ln)
        if m:
            out[m.group(1).strip()] = float(m.group(2))
    return out


def test_time_shares_are_of_user_plus_sys():
    s = shares(format_summary(Result(raw_result())))
    assert s["user"] == 10.0 and s["sys"] == 90.0
    assert s["fault"] == 60.0 and s["munmap"] == 25.0
    assert s["other kernel time"] == 5.0  # sys no entry accounts for
    assert s["user"] + s["sys"] == 100.0
    assert abs(sum(v for k, v in s.items() if k not in ("user", "sys")) - s["sys"]) < 1e-9


def test_real_run_shares_add_up(tiny_config, tmp_path):
    proc = run_cli("run", str(tiny_config), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    s = shares(proc.stdout)
    assert abs(s["user"] + s["sys"] - 100.0) <= 0.1, s
    parts = sum(v for k, v in s.items() if k not in ("user", "sys"))
    assert abs(parts - s["sys"]) <= 0.05 * len(s), s
    assert s["fault"] > 50.0, s  # page_fault1 is mostly faults


def test_zero_rows_are_left_out_and_counted():
    text = format_summary(Result(raw_result()))
    for zero in ("pgfree", "mprotect", "brk", "lru_lock_wait_ns", "mmap_lock_sleeps"):
        assert zero not in text
    for kept in ("pgfault", "fault", "munmap", "zone_lock_wait_ns"):
        assert kept in text
    left = [ln for ln in text.splitlines() if "left out" in ln]
    assert len(left) == 1, text
    assert "1 counter," in left[0] and "2 kernel entries" in left[0] and "2 lock figures" in left[0]
    assert "--all" in left[0]
    full = format_summary(Result(raw_result()), all_rows=True)
    for zero in ("pgfree", "mprotect", "brk", "lru_lock_wait_ns", "mmap_lock_sleeps"):
        assert zero in full
    assert "left out" not in full


def test_all_flag(tiny_config, tmp_path):
    short = run_cli("run", str(tiny_config), "--out", str(tmp_path / "a"))
    full = run_cli("run", str(tiny_config), "--out", str(tmp_path / "b"), "--all")
    assert short.returncode == full.returncode == 0, short.stderr + full.stderr
    assert "left out" in short.stdout and "left out" not in full.stdout
    assert "  mremap" not in short.stdout and "  mremap" in full.stdout


def test_singular():
    text = format_summary(Result(raw_result(tasks=1)))
    assert "1 task," in text and "1 tasks" not in text
    assert "1 audit," in text and "0 violations" in text
    assert "4 tasks" in format_summary(Result(raw_result(tasks=4)))


def test_a_run_of_several_guests_lists_each_guest_and_the_host():
    raw = raw_result()
    raw["guests"] = [
        {"guest": g, "summary": {"workload": w, "ops_per_s": 100.0 * (g + 1)},
         "vmstat": {"pgfault": 7 + g, "foliosim_host_rss_pages": 512, "foliosim_host_faults": 3,
                    "foliosim_kvm_remote_tlb_flush": g}}
        for g, w in enumerate(["memhog", "page_fault1"])
    ]
    raw["host"] = {"vmstat": {"pgfault": 11, "pgpromote_success": 5, "pgdemote_kswapd": 6}}
    text = format_summary(Result(raw))
    rows = [ln.split() for ln in text.splitlines() if re.match(r"^[01] ", ln)]
    assert rows == [["0", "memhog", "100", "7", "2.0", "3", "0"], ["1", "page_fault1", "200", "8", "2.0", "3", "1"]]
    assert "host kernel: pgfault 11, pgpromote_success 5, pgdemote_kswapd 6, numa_hint_faults 0" in text
    assert "guest 0's" in text
    assert "host kernel" not in format_summary(Result(raw_result())), "a single kernel has no guest table"


def test_the_cloud_host_example_runs_its_guests_mix(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    proc = run_cli("run", str(repo / "configs" / "cloud-host.toml"), "--set", "run.duration_s=0.2", "--out", str(tmp_path / "c"))
    assert proc.returncode == 0, proc.stderr
    names = [ln.split()[1] for ln in proc.stdout.splitlines() if re.match(r"^[0-3] ", ln)]
    assert names == ["memhog", "page_fault1", "memhog", "page_fault1"], proc.stdout
