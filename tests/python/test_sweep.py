"""`foliosim sweep`: spec expansion, stable point keys, the Parquet dataset
written run by run, resuming, the local pool, and a real local Ray instance
giving the same rows."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import one_json, run_cli, stderr_lines
from foliosim import cli
from foliosim import sweep as sw

BASE = """\
[config]
machine.profile = "generic-x86"
workload.mode = "processes"
run.warmup_s = 0.0
run.duration_s = 0.003
"""

# 2 x 10 x 5 = 100 tiny points
SPEC100 = BASE + """
[grid]
"workload.tasks" = [1, 2]
seed = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]

[[zip]]
"workload.name" = ["page_fault1", "page_fault1", "mmap1", "mmap1", "page_fault2"]
"workload.size_mib" = [1, 2, 1, 2, 1]
"""


def write(tmp: Path, text: str, name: str = "spec.toml") -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    """Rows without the host-time columns, in point order."""
    drop = [c for c in df.columns if c == "host_time_s" or c.startswith("host_")]
    return df.drop(columns=drop).sort_values("index").reset_index(drop=True)


@pytest.fixture(scope="module")
def local100(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep100")
    spec = write(d, SPEC100)
    s = sw.run_sweep(spec, d / "out", jobs=2)
    return spec, d / "out", s


# -------------------------------------------------------------- expansion --
def test_expansion_order_and_params(tmp_path):
    spec = sw.load_spec(write(tmp_path, BASE + """
[grid]
seed = [1, 2]
workload.tasks = [1, 2, 3]
knobs."vm.watermark_scale_factor" = [10, 20]
[[zip]]
"workload.name" = ["page_fault1", "mmap1"]
"workload.size_mib" = [1, 2]
"""))
    assert len(spec.points) == 2 * 3 * 2 * 2
    first, second, last = spec.points[0], spec.points[1], spec.points[-1]
    assert [(sw.key_name(k), v) for k, v in first.params] == [
        ("seed", 1), ("workload.tasks", 1), ('knobs."vm.watermark_scale_factor"', 10),
        ("workload.name", "page_fault1"), ("workload.size_mib", 1)]
    # the last axis (the zip group) varies fastest, both keys together
    assert dict((sw.key_name(k), v) for k, v in second.params)["workload.name"] == "mmap1"
    assert dict((sw.key_name(k), v) for k, v in second.params)["workload.size_mib"] == 2
    assert first.config["knobs"]["vm.watermark_scale_factor"] == 10
    assert last.config["seed"] == 2 and last.config["workload"]["tasks"] == 3
    assert [p.index for p in spec.points] == list(range(24))


def test_point_id_is_stable_and_normalised(tmp_path):
    a = sw.load_spec(write(tmp_path, BASE + '[grid]\n"workload.tasks" = [2]\n"workload.name" = ["page_fault1"]\n', "a.toml"))
    # same config, other key order, and a default spelled out
    b = sw.load_spec(write(tmp_path, '[grid]\n"workload.name" = ["page_fault1"]\n"workload.tasks" = [2]\n'
                           '"run.check" = [false]\n' + BASE, "b.toml"))
    assert a.points[0].id == b.points[0].id
    assert len(a.points[0].id) == 16
    c = sw.load_spec(write(tmp_path, BASE + '[grid]\n"workload.tasks" = [3]\n"workload.name" = ["page_fault1"]\n', "c.toml"))
    assert c.points[0].id != a.points[0].id
    # duplicates (seed listed twice) are one point
    d = sw.load_spec(write(tmp_path, BASE + '[grid]\n"workload.name" = ["page_fault1"]\nseed = [1, 1, 2]\n', "d.toml"))
    assert len(d.points) == 2 and d.duplicates == 1


@pytest.mark.parametrize("body, where, what", [
    ('[[zip]]\n"workload.tasks" = [1, 2]\n"seed" = [1]\n', ":9:", "equal lengths"),
    ('[grid]\n"workload.tasks" = 3\n', ":8:", "expected a list"),
    ('[grid]\n"workload.tasks" = []\n', ":8:", "empty list"),
    ('[grid]\nknobs."vm.no_such_knob" = [1]\n"workload.name" = ["page_fault1"]\n', ":8:", "vm.no_such_knob"),
    ('[grids]\nseed = [1]\n', ":7:", "unknown key"),
    ('[grid\n', ":7", "(syntax)"),
])
def test_bad_spec_is_one_line_exit_2(tmp_path, body, where, what):
    spec = write(tmp_path, BASE + "\n" + body)
    proc = run_cli("sweep", str(spec), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    lines = stderr_lines(proc)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"foliosim: error: {spec}{where}") and what in lines[0], lines[0]
    assert not any((tmp_path / "out").glob("part-*"))


# --------------------------------------------------------- local, resume --
def test_100_points_local_pool(local100):
    spec, out, s = local100
    assert (s.points, s.ran, s.already_done, s.failed, s.interrupted) == (100, 100, 0, [], False)
    df = sw.read_results(out)
    assert len(df) == 100 and df["point"].is_unique
    assert list(df["index"]) == list(range(100))
    assert set(df["workload.name"]) == {"page_fault1", "mmap1", "page_fault2"}
    assert df["workload.tasks"].dtype.kind == "i" and df["seed"].dtype.kind == "i"
    assert (df["summary.ops_total"] > 0).all()
    pf1 = df[df["workload.name"] == "page_fault1"]
    assert (pf1["vmstat.pgfault"] > 0).all()
    # pandas reads the folder as one dataset as well
    assert len(pd.read_parquet(out)) == 100
    # every row's config is the normalised config of its point
    by_id = {p.id: p for p in sw.load_spec(spec).points}
    for _, row in df.head(5).iterrows():
        assert sw.point_id(row["config"]) == row["point"]
        assert json.loads(row["config"]) == json.loads(by_id[row["point"]].cfg_json)


def test_rerun_never_runs_a_finished_point(local100, tmp_path):
    spec, out, _ = local100
    copy = tmp_path / "out"
    subprocess.run(["cp", "-a", str(out), str(copy)], check=True)
    before = {p.name: p.stat().st_mtime_ns for p in copy.glob("part-*.parquet")}
    removed = sorted(before)[:7]
    for name in removed:
        (copy / name).unlink()
    ran = []
    s = sw.run_sweep(spec, copy, jobs=1, on_point=lambda pt, raw: ran.append(pt.id))
    assert s.already_done == 93 and s.ran == 7
    assert sorted(f"part-{i}.parquet" for i in ran) == removed
    after = {p.name: p.stat().st_mtime_ns for p in copy.glob("part-*.parquet")}
    assert all(after[n] == t for n, t in before.items() if n not in removed)
    # the rerun points give the same rows as the first time (deterministic)
    pd.testing.assert_frame_equal(comparable(sw.read_results(copy)), comparable(sw.read_results(out)))
    s = sw.run_sweep(spec, copy, jobs=2)
    assert (s.already_done, s.ran) == (100, 0)


def test_in_process_equals_pool(local100, tmp_path):
    _spec, out, _ = local100
    small = write(tmp_path, SPEC100.replace("seed = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", "seed = [3]"))
    s = sw.run_sweep(small, tmp_path / "o", jobs=1)
    assert s.ran == 10
    mine = comparable(sw.read_results(tmp_path / "o")).drop(columns=["index"])
    theirs = sw.read_results(out)
    theirs = comparable(theirs[theirs["point"].isin(set(mine["point"]))]).drop(columns=["index"])
    pd.testing.assert_frame_equal(mine, theirs)


def test_interrupted_sweep_resumes(tmp_path):
    """SIGINT mid-sweep: exit 130, finished rows kept, nothing half-written;
    the same command then runs only the rest."""
    spec = write(tmp_path, BASE.replace("0.003", "3.0") + '[grid]\n"workload.name" = ["page_fault1"]\n'
                 '"workload.size_mib" = [4]\nseed = [1, 2, 3, 4, 5, 6, 7, 8]\n')
    out = tmp_path / "out"
    args = [sys.executable, "-m", "foliosim", "sweep", str(spec), "--out", str(out), "--jobs", "1"]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(out.glob("part-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    done = len(list(out.glob("part-*.parquet")))
    if proc.returncode == 0:
        pytest.skip("the sweep finished before SIGINT arrived (host too fast)")
    assert proc.returncode == 130, err
    assert "resume" in err and 1 <= done < 8
    assert not list(out.glob(".*tmp"))
    proc = run_cli("sweep", str(spec), "--out", str(out), "--json", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    s = one_json(proc.stdout)
    assert (s["already_done"], s["ran"], s["points"]) == (done, 8 - done, 8)
    assert len(sw.read_results(out)) == 8


# --------------------------------------------------------------------- ray --
def test_ray_local_instance_same_rows(local100, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'foliosim[ray]'; `make test` installs it)")
    spec, out, _ = local100
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        address = ray.get_runtime_context().gcs_address
        rc = cli.main(["sweep", str(spec), "--out", str(tmp_path / "ray"), "--ray", address, "--quiet"])
        assert rc == 0
    finally:
        ray.shutdown()
    mine = sw.read_results(tmp_path / "ray")
    assert len(mine) == 100
    pd.testing.assert_frame_equal(comparable(mine), comparable(sw.read_results(out)))
