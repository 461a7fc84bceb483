"""Issue #18: no wrong number that looks right, no lost run.

Bad profile values, output folders that cannot be written, compare on
binary files, a machine too large for the PFN space, core panics, relative
paths, stopping runs in threads and on SIGTERM, the Python API's input
checks, recording programs that close their stderr, `--json` meaning one
JSON document, and a replay that says whether it reached its end."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import foliosim
from conftest import REPO, TINY, TINY_DICT, one_json, run_cli, stderr_lines
from foliosim import _core, cli
from foliosim import result as result_mod
from foliosim import sweep as sw


def one_line_error(proc, *needles: str, code: int = 2) -> str:
    lines = stderr_lines(proc)
    assert proc.returncode == code, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "PanicException" not in proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def line_no(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


LONG = TINY.replace("duration_s = 0.05", "duration_s = 1000.0")


# ------------------------------------------------------ 3: profile values --
GENERIC = (REPO / "profiles" / "generic-x86.toml").read_text()


@pytest.mark.parametrize("old,new,key", [
    ("trap_ns =", "trap_ns = -250.0", "cost.trap_ns"),
    ("fault_base_ns =", "fault_base_ns = nan", "cost.fault_base_ns"),
    ("zero_bw_gbps =", "zero_bw_gbps = inf", "nodes[0].zero_bw_gbps"),
    ("stlb_hit_ns =", "stlb_hit_ns = -1", "tlb.stlb_hit_ns"),
    ("swapin_4k_ns =", "swapin_4k_ns = 1e30", "host.swapin_4k_ns"),
])
def test_bad_profile_value_is_one_line_naming_file_line_and_key(tmp_path, old, new, key):
    line = next(ln for ln in GENERIC.splitlines() if ln.lstrip().startswith(old))
    text = GENERIC.replace(line, new, 1)
    prof = tmp_path / "bad-profile.toml"
    prof.write_text(text)
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY.replace('profile = "generic-x86"', f'profile = "{prof.name}"'))
    err = one_line_error(run_cli("run", str(cfg), "--out", str(tmp_path / "o")), key)
    assert f"{prof}:{line_no(text, new)}: {key}:" in err


def test_builtin_profiles_pass_the_value_checks():
    for p in foliosim.catalog()["profiles"]:
        cfg = dict(TINY_DICT, machine={"profile": p["name"]})
        foliosim.load_config(cfg)


# --------------------------------------------- 9: PFN space and panics --
def test_a_16_tib_machine_is_refused_with_one_line(tmp_path):
    cfg = tmp_path / "big.toml"
    cfg.write_text(TINY.replace('profile = "generic-x86"', 'profile = "generic-x86"\nnode_mem_mib = [8388608, 8388608]'))
    one_line_error(run_cli("run", str(cfg), "--out", str(tmp_path / "o")), str(cfg), "16 TiB")
    with pytest.raises(foliosim.ConfigError, match="PFN"):
        foliosim.load_config(cfg)


def test_the_largest_admitted_machine_runs(tmp_path):
    cfg = dict(TINY_DICT, machine={"profile": "cxl-1tb", "node_mem_mib": [8388608, 8388607]},
               run={"warmup_s": 0.0, "duration_s": 0.001})
    r = foliosim.run(cfg)
    assert r.raw["vmstat"]["nr_free_pages"] > 0 and not r.interrupted


def test_a_core_panic_is_an_internal_error_not_a_base_exception():
    assert issubclass(foliosim.InternalError, Exception)
    with pytest.raises(foliosim.InternalError, match="boom"):
        _core._panic_for_tests("boom")
    try:
        _core._panic_for_tests("boom")
    except Exception as e:  # what `except Exception` code would write
        assert "panicked" in str(e) and "trace_procs" not in str(e)


def test_a_core_panic_in_the_cli_is_one_line(tiny_config, monkeypatch, capsys):
    monkeypatch.setattr(cli._core, "run_json", lambda *a: _core._panic_for_tests("boom"))
    rc = cli.main(["run", str(tiny_config), "--out", str(tiny_config.parent / "o")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 1 and len(err) == 1 and "internal error" in err[0] and "boom" in err[0], err


# ------------------------------------------------------------ 10: paths --
@pytest.fixture
def tree(tmp_path):
    """cfgs/run.toml naming ../profiles/mine.toml and ../traces/t.fstrace."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.toml").write_text(GENERIC.replace('name = "generic-x86"', 'name = "mine"'))
    (tmp_path / "traces").mkdir()
    shutil.copy(REPO / "fuzz" / "seeds" / "tree-v2.fstrace", tmp_path / "traces" / "t.fstrace")
    (tmp_path / "cfgs").mkdir()
    cfg = tmp_path / "cfgs" / "run.toml"
    cfg.write_text('seed = 3\n[machine]\nprofile = "../profiles/mine.toml"\n[workload]\nname = "trace"\n'
                   'path = "../traces/t.fstrace"\n[run]\nwarmup_s = 0.0\nduration_s = 0.05\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return tmp_path, cfg, elsewhere


def test_paths_are_relative_to_the_config_file(tree):
    root, cfg, elsewhere = tree
    proc = run_cli("run", str(cfg.relative_to(root)), "--json", "--out", str(root / "o"), cwd=root)
    assert proc.returncode == 0, proc.stderr
    res = one_json(proc.stdout)
    assert res["config"]["machine"]["profile"] == str((root / "profiles" / "mine.toml").resolve())
    assert res["config"]["workload"]["path"] == str((root / "traces" / "t.fstrace").resolve())
    # The stored config reruns from anywhere.
    rerun = elsewhere / "rerun.json"
    rerun.write_text(json.dumps(res["config"]))
    script = "import json, sys, foliosim; print(foliosim.run(json.load(open(sys.argv[1]))).summary['ops_total'])"
    p = subprocess.run([sys.executable, "-c", script, str(rerun)], cwd=elsewhere, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) == res["summary"]["ops_total"]


def test_a_missing_path_names_the_file_and_line(tree):
    root, cfg, _ = tree
    text = cfg.read_text()
    cfg.write_text(text.replace("../traces/t.fstrace", "../traces/nope.fstrace"))
    err = one_line_error(run_cli("run", str(cfg), "--out", str(root / "o")), "workload.path", "nope.fstrace")
    assert f"{cfg}:{line_no(text, 'path =')}:" in err
    cfg.write_text(text.replace("../profiles/mine.toml", "mine.toml"))
    err = one_line_error(run_cli("run", str(cfg), "--out", str(root / "o")), "machine.profile",
                         str(root / "cfgs" / "mine.toml"))
    assert f"{cfg}:{line_no(text, 'profile =')}:" in err


def test_set_and_sweep_base_resolve_against_their_own_files(tree):
    root, cfg, elsewhere = tree
    proc = run_cli("run", str(cfg), "--set", "seed=4", "--json", "--out", str(root / "o"), cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    (root / "sweeps").mkdir()
    spec = root / "sweeps" / "s.toml"
    spec.write_text('base = "../cfgs/run.toml"\n[grid]\nseed = [1, 2]\n')
    s = sw.load_spec(spec)
    assert all(json.loads(p.cfg_json)["workload"]["path"] == str((root / "traces" / "t.fstrace").resolve())
               for p in s.points)
    # A path in the spec itself is the spec's.
    (root / "sweeps" / "mine2.toml").write_text(GENERIC)
    spec.write_text('base = "../cfgs/run.toml"\n[config]\nmachine.profile = "mine2.toml"\n[grid]\nseed = [1]\n')
    s = sw.load_spec(spec)
    assert json.loads(s.points[0].cfg_json)["machine"]["profile"] == str((root / "sweeps" / "mine2.toml").resolve())


def test_golden_files_hold_no_path_of_this_machine():
    for f in (REPO / "tests" / "golden" / "expected").glob("*.json"):
        text = f.read_text()
        assert str(REPO.resolve()) not in text and "/work/" not in text and "/home/" not in text, f


# ---------------------------------------------------- 12: the Python API --
@pytest.mark.parametrize("overrides,needle", [
    ("workload.tasks=3", "one string"),
    ({"workload.tasks": 3}, "dict"),
    ([None], "[0]"),
    (["workload.tasks=3", 7], "[1]"),
])
def test_bad_overrides_are_config_errors(overrides, needle):
    for call in (foliosim.load_config, foliosim.run):
        with pytest.raises(foliosim.ConfigError) as e:
            call(TINY_DICT, overrides=overrides)
        assert needle in str(e.value) and "overrides" in str(e.value)
    with pytest.raises(foliosim.ConfigError, match="overrides"):
        foliosim.load_config(TINY, overrides=overrides)


@pytest.mark.parametrize("where,value,key", [
    (("workload", "tasks"), None, "workload.tasks"),
    (("run", "duration_s"), float("nan"), "run.duration_s"),
    (("run", "warmup_s"), float("inf"), "run.warmup_s"),
])
def test_none_and_nan_name_their_key(where, value, key):
    cfg = json.loads(json.dumps(TINY_DICT))
    cfg[where[0]][where[1]] = value
    with pytest.raises(foliosim.ConfigError) as e:
        foliosim.run(cfg)
    assert f": {key}: " in str(e.value) and "JSON" not in str(e.value), str(e.value)


def test_core_names_the_key_of_a_null():
    with pytest.raises(foliosim.ConfigError, match=r"machine\.node_mem_mib\[0\]: null"):
        _core.load_json('{"machine": {"node_mem_mib": [null]}, "workload": {"name": "page_fault1"}}')


def test_a_failed_ray_connection_leaves_nothing(tmp_path, monkeypatch):
    import types

    calls = []

    def init(**kw):
        calls.append(kw)
        raise ConnectionError("could not reach 127.0.0.1:1")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    spec = tmp_path / "s.toml"
    spec.write_text('[config]\nworkload.name = "page_fault1"\n[grid]\nseed = [1, 2]\n')
    out = tmp_path / "out"
    with pytest.raises(sw.SweepError, match="cannot connect"):
        sw.run_sweep(spec, out, ray="127.0.0.1:1")
    assert calls and not out.exists()
    out.mkdir()
    rc = cli.main(["sweep", str(spec), "--out", str(out), "--ray", "127.0.0.1:1", "--quiet"])
    assert rc == 2 and os.listdir(out) == []
