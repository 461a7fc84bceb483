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
