"""Issue #31, point 3: the reliability leftovers found when foliosim was
tried as a new user would. Every argument is checked before anything long
or side-effecting runs; a full disk ends a command like `run` does;
interrupted writes leave nothing behind for good; contradictory or
impossible settings are one line naming where; a config that never ends
and a grid too large to run are refused; `compare` shows what it cannot
compute as such and speaks LKP's and mmtests' formats; text-mode
`reproduce` shows what its JSON flags."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from conftest import one_line_error, run_cli
from foliosim import cli

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


# ------------------------------------------ validate checks its arguments --
@pytest.fixture
def no_host_work(monkeypatch, tmp_path):
    """validate as if on a host whose THP knobs can be changed, where
    calibrating, building the harness or writing a knob fails the test:
    an argument error must come before any of them."""
    import foliosim.calibrate as calibrate
    import foliosim.validate as validate

    done: list[str] = []

    def forbidden(what: str):
        def f(*_a, **_k):
            done.append(what)
            raise AssertionError(f"{what} before the arguments were checked")
        return f

    monkeypatch.setattr(validate, "knobs_available", lambda: None)
    monkeypatch.setattr(calibrate, "calibrate", forbidden("calibrate"))
    monkeypatch.setattr(validate, "build_validation", forbidden("build validation/"))
    monkeypatch.setattr(validate, "thp_settings", forbidden("THP knobs written"))
    monkeypatch.setattr(validate, "measure_reals", forbidden("real runs"))
    monkeypatch.chdir(tmp_path)
    return done


@pytest.mark.parametrize("args,needle", [
    (["--repeats", "0"], "--repeats"),
    (["--repeats", "101"], "--repeats"),
    (["--tmpdir", "/nonexistent/folder"], "--tmpdir /nonexistent/folder: no such folder"),
    (["--tmpdir", "/etc/hostname"], "is not a folder"),
    (["--settings", "4K,3K"], "--settings"),
    (["--threads", "1"], "--threads"),
    (["--profile", "missing.toml"], "--profile missing.toml"),
    (["--real", "missing.json"], "--real missing.json"),
    (["--out", ""], "--out: an empty path"),
])
def test_validate_checks_its_arguments_before_it_measures(no_host_work, tmp_path, capsys, args, needle):
    rc = cli.main(["validate", *args])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert (rc, no_host_work) == (2, []), err
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "results").exists(), "nothing written before the arguments are checked"


def test_every_path_argument_refuses_an_empty_path():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    paths = [(name, a.dest, a.type) for name, p in sub.choices.items() for a in p._actions
             if a.metavar in ("DIR", "FILE", "FILE.json", "REPORT.json", "CONFIG.toml", "SPEC.toml", "A", "B")]
    assert len(paths) >= 14
    assert [(n, d) for n, d, t in paths if t is not cli._path] == []
    for args in (["run", "", "--out", "x"], ["run", "c.toml", "--out", ""], ["reproduce", "x", "--report", ""],
                 ["sweep", ""], ["compare", "", "b"], ["record", "--out", "", "--", "true"]):
        proc = run_cli(*args, timeout=60)
        one_line_error(proc, "an empty path")


# ------------------------------------ contradictions and impossible values --
KNOBS = '\n[knobs]\n'


@pytest.mark.parametrize("knobs,key,why", [
    ('"anon_folio.mode" = "off"\n"kernel/mm/transparent_hugepage/hugepages-64kB/enabled" = "always"\n',
     "knobs.kernel/mm/transparent_hugepage/hugepages-64kB/enabled", 'anon_folio.mode = "off"'),
    ('"anon_folio.mode" = "rfc-v2"\n"kernel/mm/transparent_hugepage/hugepages-16kB/enabled" = "madvise"\n',
     "knobs.kernel/mm/transparent_hugepage/hugepages-16kB/enabled", "only \"upstream\" reads"),
    ('"kernel/mm/transparent_hugepage/hugepages-2048kB/enabled" = "always"\n',
     "knobs.kernel/mm/transparent_hugepage/hugepages-2048kB/enabled", "PMD THPs follow"),
    ('"vm.percpu_pagelist_high_fraction" = 1\n', "knobs.vm.percpu_pagelist_high_fraction", "minimum of 8"),
    ('"vm.percpu_pagelist_high_fraction" = 7\n', "knobs.vm.percpu_pagelist_high_fraction", "minimum of 8"),
    ('"kernel.numa_balancing_scan_period_min_ms" = 120000\n',
     "knobs.kernel.numa_balancing_scan_period_min_ms", "above the longest"),
    ('"kernel.numa_balancing_scan_period_max_ms" = 10\n',
     "knobs.kernel.numa_balancing_scan_period_max_ms", "above the longest"),
    ('"luf.v11_hooks" = true\n', "knobs.luf.v11_hooks", "without luf.enabled = true"),
    ('"luf.granularity" = "zone"\n', "knobs.luf.granularity", "without luf.enabled = true"),
    ('"kernel/mm/numa/pagecache_promotion_enabled" = true\n',
     "knobs.kernel/mm/numa/pagecache_promotion_enabled", "kernel.numa_balancing = 0"),
    ('"vm.min_free_kbytes" = 1000000000000\n', "knobs.vm.min_free_kbytes", "out of range"),
    ('"vm.min_free_kbytes" = 2000000000\n', "knobs.vm.min_free_kbytes", "not below the machine's memory"),
])
def test_contradictions_and_impossible_knobs_are_one_line(tmp_path, knobs, key, why):
    from conftest import TINY, line_of

    text = TINY + KNOBS + knobs
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    err = one_line_error(run_cli("run", str(cfg), "--out", str(tmp_path / "o"), timeout=60), why)
    first = knobs.split("\n")[-2].split(" = ")[0]  # the knob the rule names is the last one written
    assert err.startswith(f"foliosim: error: {cfg}:{line_of(text, first)}: {key}: "), err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("knobs", [
    '"anon_folio.mode" = "off"\n"kernel/mm/transparent_hugepage/hugepages-64kB/enabled" = "never"\n',
    '"kernel/mm/transparent_hugepage/enabled" = "always"\n"kernel/mm/transparent_hugepage/hugepages-2048kB/enabled" = "always"\n',
    '"kernel/mm/transparent_hugepage/hugepages-64kB/enabled" = "always"\n',  # selects upstream
    '"luf.enabled" = true\n"luf.v11_hooks" = true\n',
    '"luf.granularity" = "global"\n',
    '"vm.percpu_pagelist_high_fraction" = 8\n',
    '"vm.percpu_pagelist_high_fraction" = 0\n',
    '"kernel.numa_balancing_scan_period_min_ms" = 5000\n"kernel.numa_balancing_scan_period_max_ms" = 5000\n',
])
def test_consistent_knobs_still_load(knobs):
    import foliosim
    from conftest import TINY

    foliosim.load_config(TINY + KNOBS + knobs)


def test_kbuild_needs_a_job(tmp_path):
    from conftest import line_of

    text = "[workload]\nname = \"kbuild\"\ntasks = 2\njobs = 0\n"
    cfg = tmp_path / "k.toml"
    cfg.write_text(text)
    one_line_error(run_cli("run", str(cfg), "--out", str(tmp_path / "o"), timeout=60),
                   f"{cfg}:{line_of(text, 'jobs')}: workload.jobs: must be between 1 and")


@pytest.mark.parametrize("value,needle", [
    ("threads", "'threads' is not a TOML literal (a string is quoted: workload.mode='\"threads\"')"),
    ("", "'' is not a TOML literal"),
    ("[1, ", "not a TOML literal"),
])
def test_a_set_value_must_be_a_toml_literal(tiny_config, value, needle):
    one_line_error(run_cli("run", str(tiny_config), "--set", f"workload.mode={value}", timeout=60),
                   "--set: workload.mode: ", needle)


def test_experiments_folder_that_is_missing_is_one_line(tmp_path):
    env = {"FOLIOSIM_EXPERIMENTS": str(tmp_path / "nope")}
    for args in (["reproduce", "all"], ["list", "experiments"], ["reproduce", "x"]):
        one_line_error(run_cli(*args, env=env, timeout=60), f"FOLIOSIM_EXPERIMENTS: {tmp_path / 'nope'}: no such folder")


# ------------------------------------------------- full disk on --report --


def _enospc_on(name: str, monkeypatch):
    """Opening a file whose name holds `name` for writing fails as on a full
    disk (the files written before it are there)."""
    import builtins
    import errno

    real = builtins.open

    def fake_open(file, mode="r", *a, **k):
        if isinstance(file, (str, os.PathLike)) and name in os.fspath(file) and any(c in mode for c in "wxa"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(file))
        return real(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)


def _left(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("existing", [False, True])
def test_reproduce_report_on_a_full_disk_ends_like_run(tmp_path, monkeypatch, capsys, existing):
    monkeypatch.setenv("FOLIOSIM_EXPERIMENTS", str(EXPERIMENTS))
    rep = tmp_path / "rep"
    if existing:
        rep.mkdir()
        (rep / "report.html").write_text("the old report")
    before = _left(tmp_path)
    _enospc_on("report.html", monkeypatch)
    rc = cli.main(["reproduce", "pf1-tasks", "--quiet", "--report", str(rep), "--out", str(tmp_path / "json")])
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, err
    assert "pf1-tasks" in out and "page_fault1 ops/s" in out, "the rows are shown first"
    assert len(lines) == 1 and lines[0].startswith(f"foliosim: error: --report {rep}: ") and \
        "No space left on device" in lines[0] and "nothing was written there" in lines[0], lines
    after = [p for p in _left(tmp_path) if not p.startswith("json")]
    assert after == before, "no half-written report, no staging folder"
    if existing:
        assert (rep / "report.html").read_text() == "the old report"


# ------------------------------------------- what killed writers left --
def _dead_pid() -> int:
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid  # reaped: no process has it (until the PID space wraps)


def test_staging_left_by_killed_writers_is_removed_by_the_next_write(tiny_config, tmp_path):
    import time

    out = tmp_path / "out"
    out.mkdir()
    (out / "result.json").write_text("{}")
    dead = _dead_pid()
    stale = [tmp_path / f".out.{dead}.0123abcd.tmp", out / f".out.{dead}.89abcdef.tmp",
             tmp_path / f".part-x.parquet.{dead}.00ff00ff.tmp"]
    stale[0].mkdir()
    (stale[0] / "result.json").write_text("half")
    stale[1].mkdir()
    stale[2].write_text("half")
    # A live writer's staging (this test's own process) stays, and so does
    # one whose PID now belongs to a process started after it was made.
    live = tmp_path / f".out.{os.getpid()}.0000beef.tmp"
    live.mkdir()
    reused = tmp_path / f".out.{os.getppid()}.0000cafe.tmp"
    reused.mkdir()
    old = time.time() - 10 * 365 * 86400
    os.utime(reused, (old, old))  # made "before" the parent process started
    proc = run_cli("run", str(tiny_config), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert [p for p in stale if p.exists()] == [], "stale staging removed"
    assert live.is_dir(), "a live writer's staging is left alone"
    assert not reused.exists(), "a PID reused by a later process does not keep a stale name"
    assert sorted(p.name for p in out.iterdir()) == ["result.json", "timeseries.parquet", "vmstat.parquet"]


def test_a_run_killed_while_writing_leaves_nothing_after_the_next_run(tiny_config, tmp_path):
    # Kill the writer for real, in the middle of its write: the process
    # dies with its staging folder in place; the next run removes it.
    import signal
    import subprocess
    import sys
    import textwrap

    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import os, signal
        import foliosim
        from foliosim import result
        real = result._write_synced
        def write(path, w):
            real(path, w)
            if path.name == "vmstat.parquet":
                os.kill(os.getpid(), signal.SIGKILL)
        result._write_synced = write
        foliosim.run({str(tiny_config)!r}).save({str(out)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    assert len(left) == 1 and not out.exists(), left
    proc = run_cli("run", str(tiny_config), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_calibrate_and_validate_write_through_the_same_staging(tmp_path):
    from foliosim import _host
    from foliosim import result as result_mod

    # Their leftovers follow the one pattern that the next write removes.
    assert _host.write_text_atomic is result_mod.write_text_atomic
    stale = tmp_path / f".validate.json.{_dead_pid()}.0badf00d.tmp"
    stale.write_text("half")
    _host.write_text_atomic(tmp_path / "validate.json", "{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["validate.json"]


# ----------------------------------------------------- sweep grids --
def test_a_grid_beyond_the_limit_is_refused_before_it_is_expanded(tmp_path):
    import time

    from foliosim import sweep

    spec = tmp_path / "big.toml"
    values = ", ".join(str(i) for i in range(1, 101))
    spec.write_text(f'base = "{REPO_CONFIGS / "default.toml"}"\n\n[grid]\nseed = [{values}]\n'
                    f'"run.duration_s" = [{", ".join(str(i / 1000) for i in range(1, 101))}]\n'
                    f'"workload.size_mib" = [{values}]\n')
    t0 = time.monotonic()
    proc = run_cli("sweep", str(spec), "--out", str(tmp_path / "o"), timeout=60)
    one_line_error(proc, f"{spec}:3: grid: 1,000,000 points, more than the {sweep.MAX_POINTS:,}", "--yes")
    assert time.monotonic() - t0 < 30, "refused from the count, not after making a million configs"
    assert not (tmp_path / "o").exists()
    with pytest.raises(sweep.SweepError):
        sweep.load_spec(spec, max_points=sweep.MAX_POINTS)


def test_a_sweep_says_how_many_points_it_will_run_first(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(f'base = "{REPO_CONFIGS / "default.toml"}"\n[config]\nrun.warmup_s = 0.0\n'
                    'run.duration_s = 0.002\nworkload.size_mib = 1\n[grid]\n"workload.tasks" = [1, 2, 1]\n')
    proc = run_cli("sweep", str(spec), "--out", str(tmp_path / "o"), "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first == f"foliosim sweep: 2 points (1 duplicate dropped), 0 already in {tmp_path / 'o'}/, 2 to run", first
    proc = run_cli("sweep", str(spec), "--out", str(tmp_path / "o"), "--jobs", "1")
    assert proc.stderr.splitlines()[0].endswith(", 2 already in " + f"{tmp_path / 'o'}/, 0 to run")


# ------------------------------------------------------------- compare --
def test_compare_says_nan_gone_and_reads_numbers_stored_as_strings(tmp_path, capsys):
    import json
    import math

    from foliosim import compare

    a = {"vmstat": {"pgfault": "1000", "nr_free_pages": 50, "pgmajfault": 7, "thp_fault_alloc": 3},
         "summary": {"ops_per_s": 10.0}}
    b = {"vmstat": {"pgfault": 1500, "nr_free_pages": float("nan"), "thp_fault_alloc": 3},
         "summary": {"ops_per_s": "12.5"}}
    for name, obj in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(obj))
    A, B = compare.load(tmp_path / "a"), compare.load(tmp_path / "b")
    assert A.values["vmstat.pgfault"] == 1000.0 and B.values["summary.ops_per_s"] == 12.5
    lines = {ln.name: ln for ln in compare.diff(A, B)}
    assert lines["vmstat.pgfault"].pct == 50.0, "a string counter is a number, not a new counter"
    assert lines["summary.ops_per_s"].pct == 25.0
    assert lines["vmstat.nr_free_pages"].status == "nan" and lines["vmstat.nr_free_pages"].pct is None
    assert lines["vmstat.pgmajfault"].status == "gone" and lines["vmstat.pgmajfault"].pct is None
    assert "vmstat.thp_fault_alloc" not in lines
    text = compare.format_diff(A, B, compare.diff(A, B), None)
    row = {ln.split()[-1]: ln.split()[0] for ln in text.splitlines() if not ln.startswith("#")}
    assert row == {"vmstat.nr_free_pages": "NaN", "vmstat.pgmajfault": "gone", "vmstat.pgfault": "+50.00%",
                   "summary.ops_per_s": "+25.00%"}, text
    assert "nan%" not in text and "-100" not in text
    # --json stays JSON (no NaN literal) and says why a line has no percentage.
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    by = {ln["name"]: ln for ln in obj["lines"]}
    assert by["vmstat.nr_free_pages"] == {"name": "vmstat.nr_free_pages", "a": 50.0, "b": None, "delta": None,
                                          "pct": None, "status": "nan"}
    assert by["vmstat.pgmajfault"]["status"] == "gone" and not math.isnan(by["vmstat.pgmajfault"]["delta"])


def test_compare_reads_a_sweep_column_of_numbers_stored_as_strings():
    import pandas as pd

    from foliosim import compare

    df = pd.DataFrame({"point": ["p", "q"], "summary.ops_per_s": ["10", "20"], "vmstat.pgfault": [1, 3],
                       "summary.name": ["x", "y"]})
    rs = compare._from_sweep_rows("s", df)
    assert rs.values == {"summary.ops_per_s": 15.0, "vmstat.pgfault": 2.0}


# ----------------------------------------- text-mode reproduce flags --
def test_text_reproduce_shows_the_window_flag_and_every_row_note(tmp_path):
    import json

    # The tutorial's experiment with a window too short for one whole
    # iteration before it opens (test_experiments.py has it in JSON).
    src = (EXPERIMENTS / "demo" / "pf1-tasks.toml").read_text()
    text = src.replace("run.warmup_s = 0.005", "run.warmup_s = 0.0001")
    assert text != src
    (tmp_path / "exps" / "demo").mkdir(parents=True)
    (tmp_path / "exps" / "demo" / "pf1-tasks.toml").write_text(text)
    env = {"FOLIOSIM_EXPERIMENTS": str(tmp_path / "exps")}
    proc = run_cli("reproduce", "pf1-tasks", "--quiet", "--out", str(tmp_path / "o"), env=env)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((tmp_path / "o" / "pf1-tasks.json").read_text())
    out = proc.stdout.splitlines()
    table = out[2:2 + len(rep["rows"])]
    for i, (line, row) in enumerate(zip(table, rep["rows"], strict=True), 1):
        assert row["label"] in line and row["metric"] in line
        assert line.endswith(f"[{i}] {cli.WINDOW_FLAG}"), line
        assert f"[{i}] {' '.join(row['note'].split())}" in out, "the row's note, in full"
    warn = [ln for ln in out if ln.startswith("warning: the measured window was too short in 2 runs")]
    assert len(warn) == 1 and "1 task, 2 tasks" in warn[0]


# ---------------------------------------- LKP and mmtests formats --
def _pair():
    from foliosim import compare

    a = compare.ResultSet("results/base", "sweep", 3, {"summary.ops_per_s": 1000.0, "vmstat.pgfault": 262144.0,
                                                       "vmstat.nr_free_pages": 5e8, "vmstat.pgmajfault": 3.0},
                          {"summary.ops_per_s": [900.0, 1000.0, 1100.0], "vmstat.pgfault": [262144.0] * 3})
    b = compare.ResultSet("results/head", "sweep", 3, {"summary.ops_per_s": 1500.0, "vmstat.pgfault": 131072.0,
                                                       "vmstat.nr_free_pages": 5e8 + 1, "vmstat.thp_fault_alloc": 64.0},
                          {"summary.ops_per_s": [1490.0, 1500.0, 1510.0], "vmstat.pgfault": [131072.0] * 3})
    return a, b, compare.diff(a, b)


def test_compare_prints_lkps_change_table():
    from foliosim import compare

    a, b, lines = _pair()
    text = compare.format_lkp(a, b, lines, None).splitlines()
    # As the kernel test robot's reports lay it out (lkp-tests lib/compare.rb).
    assert text[:8] == ["result: ", "  results/base", "  results/head", "",
                        "            base                        head ", "---------------- --------------------------- ",
                        "         %stddev     %change         %stddev", "             \\          |                \\  "]
    rows = {ln[44:].strip(): ln for ln in text[8:]}
    assert rows["summary.ops_per_s"] == "      1000 ±  8%     +50.0%       1500        summary.ops_per_s", \
        "population stddev of 900/1000/1100 is 8.2% of the mean; 0.7% is below LKP's 2% and left blank"
    assert rows["proc-vmstat.pgfault"] == "    262144           -50.0%     131072        proc-vmstat.pgfault"
    assert rows["proc-vmstat.nr_free_pages"] == "     5e+08            +0.0%      5e+08        proc-vmstat.nr_free_pages"
    assert rows["proc-vmstat.thp_fault_alloc"] == "      0.00             new       64.00        proc-vmstat.thp_fault_alloc"
    assert rows["proc-vmstat.pgmajfault"] == "      3.00            gone        0.00        proc-vmstat.pgmajfault"


def test_compare_prints_mmtests_hmean_rows(tmp_path, capsys):
    from foliosim import compare

    a, b, lines = _pair()
    text = compare.format_mmtests(a, b, lines, None).splitlines()
    w = max(len(ln.name) for ln in lines)
    assert text[0] == " " * (10 + w) + f"{'base':>23}{'head':>23}"
    rows = {ln.split()[1]: ln for ln in text[1:]}
    # The harmonic means of the runs; asterisks: the runs differ beyond their spread.
    ha, hb = 3 / (1 / 900 + 1 / 1000 + 1 / 1100), 3 / (1 / 1490 + 1 / 1500 + 1 / 1510)
    assert rows["summary.ops_per_s"] == \
        f"Hmean     {'summary.ops_per_s':<{w}}{ha:12.2f} (   0.00%){hb:12.2f} *{100 * (hb - ha) / ha:7.2f}%*"
    assert rows["vmstat.pgfault"] == f"Amean     {'vmstat.pgfault':<{w}}   262144.00 (   0.00%)   131072.00 * -50.00%*", \
        "no spread on either side: any difference is beyond it"
    assert rows["vmstat.nr_free_pages"].endswith("(   0.00%)"), "one run a side: no spread known, parentheses"
    assert rows["vmstat.thp_fault_alloc"].endswith("       64.00 (     new)")
    # From the command line, on two runs.
    for name, ops in (("a", 10.0), ("b", 12.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(f'{{"vmstat": {{"pgfault": 7}}, "summary": {{"ops_per_s": {ops}}}}}')
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "mmtests"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "Hmean     summary.ops_per_s       10.00 (   0.00%)       12.50 (  25.00%)", out
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "lkp"]) == 0
    assert capsys.readouterr().out.splitlines()[8] == "     10.00           +25.0%      12.50        summary.ops_per_s"


# ------------------------------------------------- what the seed varies --
EBIZZY = """\
[machine]
profile = "generic-x86"
[workload]
name = "ebizzy"
threads = 4
chunk_kib = 512
[run]
warmup_s = 0.001
duration_s = 0.004
"""


def _without_config(raw):
    import json

    from foliosim.result import deterministic_view

    r = deterministic_view(raw)
    r.pop("config")
    return json.dumps(r, sort_keys=True)


def test_the_seed_moves_aslrs_mmap_base_and_so_ebizzys_figures():
    import foliosim

    def result(seed, aslr=2):
        return _without_config(foliosim.run(f"seed = {seed}\n{EBIZZY}[knobs]\n\"kernel.randomize_va_space\" = {aslr}\n").raw)

    # ebizzy's 512 KiB chunks are placed page-aligned below the mmap base:
    # where ASLR puts it decides which chunks straddle a PTE table.
    assert len({result(s) for s in (1, 2, 3)}) == 3, "each seed places ebizzy elsewhere"
    assert len({result(s, aslr=0) for s in (1, 2, 3)}) == 1, "with ASLR off the seed cannot"


def test_the_seeds_of_the_shipped_pf1_sweep_give_different_rows():
    import tomllib

    import foliosim

    spec = tomllib.loads((REPO_CONFIGS / "sweeps" / "pf1-scaling.toml").read_text())
    seeds = spec["grid"]["seed"]
    cfg = {"machine": {"profile": "generic-x86"}, "workload": {"name": "page_fault1", "tasks": 2, "size_mib": 16},
           "run": {"warmup_s": 0.01, "duration_s": 0.02}}
    rows = {_without_config(foliosim.run(dict(cfg, seed=s)).raw) for s in seeds}
    assert len(rows) > 1, "page_fault1's process image lands elsewhere: its page tables differ"
    assert "### What the seed varies" in (REPO_CONFIGS.parent / "docs" / "tutorial.md").read_text()
