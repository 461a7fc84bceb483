"""The Python API: foliosim.run with a path, a TOML string or a dict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pandas as pd
import pytest

import foliosim
from conftest import RESULT_KEYS, TINY, TINY_DICT
from foliosim.result import deterministic_view


def test_run_dict_returns_dataframes():
    r = foliosim.run(TINY_DICT)
    assert isinstance(r, foliosim.Result)
    assert set(r.raw) >= RESULT_KEYS
    assert isinstance(r.counters, pd.DataFrame)
    assert list(r.counters.columns) == ["name", "value"]
    assert "pgfault" in set(r.counters["name"])
    assert isinstance(r.timeseries, pd.DataFrame)
    assert "t_s" in r.timeseries.columns and len(r.timeseries) >= 1
    assert isinstance(r.summary, dict) and "ops_per_s" in r.summary
    assert json.loads(r.to_json()) == r.raw
    assert not r.interrupted


def test_path_string_and_dict_agree(tiny_config):
    views = [deterministic_view(foliosim.run(c).raw) for c in (tiny_config, str(tiny_config), TINY, TINY_DICT)]
    assert all(v == views[0] for v in views)


def test_overrides():
    r = foliosim.run(TINY_DICT, overrides=["workload.tasks=1"])
    assert r.config["workload"]["tasks"] == 1


def test_load_config_fills_defaults():
    cfg = foliosim.load_config({"workload": {"name": "page_fault1"}})
    assert {"seed", "machine", "workload", "run", "knobs"} <= set(cfg)


def test_save(tmp_path):
    r = foliosim.run(TINY_DICT)
    d = r.save(tmp_path / "x")
    assert sorted(os.listdir(d)) == ["result.json", "timeseries.parquet", "vmstat.parquet"]
    assert json.loads((d / "result.json").read_text()) == r.raw
    pd.testing.assert_frame_equal(pd.read_parquet(d / "vmstat.parquet"), r.counters)


@pytest.mark.parametrize("bad", [
    {"workload": {"name": "no_such_workload"}},
    {"workload": {"name": "page_fault1", "tasks": "two"}},
    {"workload": {"name": "page_fault1"}, "knobs": {"vm.no_such_knob": 1}},
    {"workload": {"name": "page_fault1"}, "bogus_key": 1},
    "seed = = 1\n",
])
def test_config_error(bad):
    with pytest.raises(foliosim.ConfigError) as ei:
        foliosim.run(bad)
    assert isinstance(ei.value, ValueError)
    msg = str(ei.value)
    assert msg and "\n" not in msg
    assert ei.value.key and ei.value.file


def test_missing_file_is_config_error(tmp_path):
    with pytest.raises(foliosim.ConfigError, match=r"nope\.toml"):
        foliosim.run(tmp_path / "nope.toml")


def test_progress_callback_and_stop():
    calls = []

    def stop_at_once(sim_s, total_s):
        calls.append((sim_s, total_s))
        return False

    cfg = dict(TINY_DICT, run={"warmup_s": 0.0, "duration_s": 1000.0})
    r = foliosim.run(cfg, progress=stop_at_once)
    assert calls and r.interrupted
    assert r.sim_time_s < 1000.0
    assert set(r.raw) >= RESULT_KEYS


def test_progress_exception_propagates():
    def boom(sim_s, total_s):
        raise RuntimeError("from the callback")

    cfg = dict(TINY_DICT, run={"warmup_s": 0.0, "duration_s": 1000.0})
    with pytest.raises(RuntimeError, match="from the callback"):
        foliosim.run(cfg, progress=boom)


def test_runs_in_threads_are_deterministic():
    """Runs release the GIL; concurrent runs give the same results as one."""
    ref = deterministic_view(foliosim.run(TINY_DICT).raw)
    out = [None, None]

    def work(i):
        out[i] = deterministic_view(foliosim.run(TINY_DICT).raw)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out[0] == ref and out[1] == ref


CTRL_C_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import foliosim.cli as cli

    class SigintOnFirstCall:
        def __init__(self, *a, **k): self.sent = False
        def __enter__(self): return self
        def __exit__(self, *a): pass
        def __call__(self, sim_s, total_s):
            if not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGINT)
            return True

    cli.ProgressBar = SigintOnFirstCall
    sys.exit(cli.main(sys.argv[1:]))
""")


def test_ctrl_c_keeps_partial_results(tmp_path):
    cfg = tmp_path / "long.toml"
    cfg.write_text(TINY.replace("duration_s = 0.05", "duration_s = 1000.0"))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", CTRL_C_SCRIPT, "run", str(cfg), "--out", str(out)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0], proc.stderr
    raw = json.loads((out / "result.json").read_text())
    assert raw["interrupted"] is True
    assert raw["sim_time_s"] < 1000.0


# ------------------------------------------------------- typed errors --
def test_every_error_is_a_foliosim_error_with_the_cli_exit_code():
    user = [foliosim.ConfigError, foliosim.WorkloadError, foliosim.OutOfMemoryError, foliosim.Cancelled]
    for cls in [*user, foliosim.InternalError]:
        assert issubclass(cls, foliosim.Error) and cls.__module__ == "foliosim"
    assert all(cls.exit_code == 2 for cls in user)
    assert foliosim.InternalError.exit_code == 1
    # The builtin bases they had before the hierarchy stay.
    assert issubclass(foliosim.ConfigError, ValueError) and issubclass(foliosim.WorkloadError, ValueError)
    assert issubclass(foliosim.InternalError, RuntimeError)
    assert not issubclass(foliosim.WorkloadError, foliosim.ConfigError)


def test_an_unreadable_trace_is_a_workload_error(tmp_path):
    with pytest.raises(foliosim.WorkloadError, match=r"nope\.fstrace"):
        foliosim._core.trace_info(str(tmp_path / "nope.fstrace"))


def test_a_run_stopped_in_its_warm_up_is_cancelled_and_one_stopped_later_is_partial():
    cfg = dict(TINY_DICT, run={"warmup_s": 1000.0, "duration_s": 1.0})
    with pytest.raises(foliosim.Cancelled):
        foliosim.run(cfg, progress=lambda sim_s, total_s: False)
    cfg = dict(TINY_DICT, run={"warmup_s": 0.0, "duration_s": 1000.0})
    assert foliosim.run(cfg, progress=lambda sim_s, total_s: False).interrupted


def test_a_workload_that_does_not_fit_is_out_of_memory_not_a_workload_error():
    # A populated page cache the machine cannot hold (127 MiB of 128: the
    # config's estimate lets it through): the same workload on a bigger
    # machine runs, so the type says "out of memory" (exit code 2).
    cfg = dict(TINY_DICT, machine={"profile": "generic-x86", "node_mem_mib": [64, 64]},
               workload={"name": "file_reader", "fs": "tmpfs", "file_mib": 127, "populate": True})
    with pytest.raises(foliosim.OutOfMemoryError, match="page cache") as e:
        foliosim.run(cfg)
    assert not isinstance(e.value, foliosim.WorkloadError) and e.value.exit_code == 2
