"""The LUF scaffolding (docs/mechanisms/lazy-unmap-flush.md) as the CLI and the Python API see it:
the llama and xsbench workloads, the two LUF profiles and the luf-*
experiments come from the Rust registries."""

from __future__ import annotations

import pytest

import foliosim
from conftest import one_json, run_cli


def test_list_shows_luf_workloads_profiles_and_experiments():
    proc = run_cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    cat = one_json(proc.stdout)
    assert {"llama", "xsbench"} <= {w["name"] for w in cat["workloads"]}
    assert {"luf-llama-tiered", "luf-xsbench-qemu"} <= {p["name"] for p in cat["profiles"]}
    assert {"luf-llama", "luf-xsbench"} <= {e["name"] for e in cat["experiments"]}


def test_xsbench_runs_from_python():
    cfg = {
        "machine": {"profile": "luf-xsbench-qemu", "node_mem_mib": [64, 128]},
        "workload": {"name": "xsbench", "threads": 2, "gridpoints": 16, "lookups": 100},
        "run": {"warmup_s": 0.0, "duration_s": 1.0},
    }
    a = foliosim.run(cfg)
    assert a.summary["ops_total"] == 100
    b = foliosim.run(cfg)
    assert a.raw["vmstat"] == b.raw["vmstat"]


@pytest.mark.parametrize("workload,key", [
    ({"name": "llama", "threads": 0}, "workload.threads"),
    ({"name": "llama", "loads_per_page": 3}, "workload.loads_per_page"),
    ({"name": "xsbench", "gridpoints": 0}, "workload.gridpoints"),
])
def test_bad_luf_workload_parameters_name_the_key(workload, key):
    with pytest.raises(foliosim.ConfigError) as e:
        foliosim.run({"workload": workload})
    assert key in str(e.value)
