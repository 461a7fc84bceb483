"""Issue #31, point 3: the reliability leftovers found when foliosim was
tried as a new user would. Every argument is checked before anything long
or side-effecting runs; a full disk ends a command like `run` does;
interrupted writes leave nothing behind for good; contradictory or
impossible settings are one line naming where; a config that never ends
and a grid too large to run are refused; `compare` shows what it cannot
compute as such and speaks LKP's and mmtests' formats; text-mode
`reproduce` shows what its JSON flags."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import one_line_error, run_cli

EXPERIMENTS = Path(__file__).resolve().parent / "data" / "experiments"
REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"


# ---------------------------------------------- inputs that never end --
@pytest.mark.parametrize("make", ["fifo", "/dev/zero", "folder"])
def test_a_config_that_is_not_a_regular_file_is_one_line(tmp_path, make):
    if make == "fifo":
        path = tmp_path / "c.toml"
        os.mkfifo(path)  # no writer: opening it to read would wait forever
    elif make == "folder":
        path = tmp_path
    else:
        path = Path(make)
    one_line_error(run_cli("run", str(path), "--out", str(tmp_path / "o"), timeout=30), str(path), "not a regular file")
    spec = tmp_path / "s.toml"
    spec.write_text(f'base = "{path}"\n[grid]\nseed = [1]\n')
    one_line_error(run_cli("sweep", str(spec), "--out", str(tmp_path / "o"), timeout=30), "not a regular file")


@pytest.mark.parametrize("where", ["machine.profile", "workload.path"])
def test_a_profile_or_trace_that_is_a_fifo_is_one_line(tmp_path, where):
    from conftest import TINY

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    if where == "machine.profile":
        text = TINY.replace('profile = "generic-x86"', f'profile = "{fifo}"')
    else:
        text = TINY.replace('name = "page_fault1"', f'name = "trace"\npath = "{fifo}"').replace(
            'mode = "processes"\ntasks = 2\nsize_mib = 4\n', "")
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    one_line_error(run_cli("run", str(cfg), "--out", str(tmp_path / "o"), timeout=30), where, "is a FIFO, not a regular file")


def test_a_config_larger_than_any_config_is_refused(tmp_path):
    from foliosim import config

    big = tmp_path / "big.toml"
    with open(big, "wb") as f:
        f.truncate(config.MAX_CONFIG_BYTES + 1)
    one_line_error(run_cli("run", str(big), "--out", str(tmp_path / "o"), timeout=30), "larger than a config can be")
