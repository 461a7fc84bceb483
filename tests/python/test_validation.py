"""calibrate / validate / record / trace replay (issue #8).

The real-kernel parts need root and the mTHP knobs (validate), valgrind
(record); without them those tests skip and say why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import foliosim
from foliosim import _core, _host

ROOT = Path(__file__).resolve().parents[2]
FOLIOSIM = [sys.executable, "-m", "foliosim"]


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*FOLIOSIM, *args], capture_output=True, text=True, cwd=kw.pop("cwd", ROOT), **kw)


def knob_snapshot() -> dict[str, str]:
    thp = Path("/sys/kernel/mm/transparent_hugepage")
    return {str(p): p.read_text() for p in [thp / "enabled", *thp.glob("hugepages-*kB/enabled")] if p.exists()}


# ------------------------------------------------------------ knob restore --
def test_thp_settings_restores_knobs_on_error(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("always [madvise] never\n")
    b.write_text("always inherit madvise [never]\n")
    with pytest.raises(RuntimeError), _host.thp_settings({a: "never", b: "always"}):
        assert a.read_text() == "never" and b.read_text() == "always"
        raise RuntimeError("boom")
    assert (_host.read_knob(a), _host.read_knob(b)) == ("madvise", "never")


def test_thp_settings_restores_knobs_on_ctrl_c(tmp_path):
    a = tmp_path / "a"
    a.write_text("[always] never\n")
    with pytest.raises(KeyboardInterrupt), _host.thp_settings({a: "never"}):
        raise KeyboardInterrupt
    assert _host.read_knob(a) == "always"


# -------------------------------------------------------------- calibrate --
@pytest.fixture(scope="session")
def host_profile(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "host.toml"
    r = cli("calibrate", "--out", str(out), "--json", "--rounds", "2")
    assert r.returncode == 0, r.stderr
    # --json: stdout is one JSON document (progress and fits go to stderr).
    doc = json.loads(r.stdout)
    assert doc["profile"] == str(out) and doc["fits"] and doc["values"]
    return out


def test_calibrate_writes_a_loadable_measured_profile(host_profile):
    text = host_profile.read_text()
    import tomllib
    prof = tomllib.loads(text)
    gen = tomllib.loads((ROOT / "profiles" / "generic-x86.toml").read_text())
    # Measured keys name the program that measured them; copied ones say so
    # (docs/profiles.md), and `list profiles --explain` reads both.
    explain = {v["path"]: v for v in json.loads(_core.profile_explain_json(str(host_profile)))["values"]}
    for key in ("syscall_ns", "fault_base_ns", "mmap_ns", "munmap_ns", "madvise_ns"):
        line = next(ln for ln in text.splitlines() if ln.startswith(key + " "))
        assert "# [measured: validation/" in line, line
        assert explain[f"cost.{key}"]["kind"] == "measured"
    assert "copied from generic-x86" in next(ln for ln in text.splitlines() if ln.startswith("ipi_ack_ns"))
    assert explain["cost.ipi_ack_ns"]["kind"] == "assumed" and explain["cpu.freq_ghz"]["kind"] == "measured"
    assert prof["cpu"]["nr_cpus"] == os.cpu_count()
    assert prof["cost"]["syscall_ns"] != gen["cost"]["syscall_ns"]
    assert prof["nodes"][0]["zero_bw_gbps"] > 0
    # It runs.
    r = foliosim.run({"machine": {"profile": str(host_profile)}, "workload": {"name": "page_fault1", "size_mib": 4},
                      "run": {"warmup_s": 0.0, "duration_s": 0.01}})
    assert r.summary["ops_total"] > 0


# ------------------------------------------------- harness: threads mode --
def _harness_bin() -> Path:
    if not (shutil.which("make") and (shutil.which("gcc") or shutil.which("cc"))):
        pytest.skip("the validation/ harness needs make and a C compiler")
    return _host.build_validation()


def _harness(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(_harness_bin() / name), "-s", "0.3", "-w", "0.1", "-d", "/tmp", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("flags", [("-T",), ("-m", "threads")])
def test_harness_threads_mode_runs_threads_of_one_process(flags):
    r = _harness("page_fault1", "-t", "2", *flags)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["mode"] == "threads" and out["tasks"] == 2
    # Per-thread getrusage(RUSAGE_THREAD) snapshots: every op of page_fault1
    # touches a new page, so there are faults, and system time was spent.
    assert out["ops"] > 0 and out["minflt"] > 0 and out["stime_s"] > 0
    assert 0 < out["faults_per_op"] <= 1.0001
    # One process: its RSS baseline is taken once, the testcase adds memory.
    assert out["base_rss_kib"] > 0 and out["rss_kib"] > 0


def test_harness_threads_mode_per_thread_files_and_mmap_lock():
    # page_fault2/3 keep one file per task: per thread in threads mode.
    for name in ("page_fault2", "page_fault3", "mmap1"):
        r = _harness(name, "-t", "2", "-T")
        assert r.returncode == 0, (name, r.stderr)
        out = json.loads(r.stdout)
        assert (out["mode"], out["tasks"]) == ("threads", 2) and out["ops"] > 0, out
    out = json.loads(_harness("mmap1", "-t", "2", "-T").stdout)
    assert out["minflt"] == 0  # mmap1 never touches its mapping


def test_harness_processes_mode_is_the_default():
    r = _harness("mmap1", "-t", "2")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["mode"], out["tasks"]) == ("processes", 2) and out["ops"] > 0
    r = _harness("mmap1", "-t", "2", "-m", "processes")
    assert json.loads(r.stdout)["mode"] == "processes"


@pytest.mark.parametrize("args", [("-m", "fibers"), ("-t", "0"), ("-T", "-t", "3000"), ("-x",)])
def test_harness_bad_input_one_line_exit_2(args):
    r = _harness("mmap1", *args)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_validate_threads_rows_and_their_notes():
    from foliosim import validate as v
    jobs = v.jobs_for("4K", 2)
    thr = [(w, mode, n) for w, _, _, mode, n in jobs if mode == "threads"]
    assert thr == [(w, "threads", 2) for w in ("page_fault1", "page_fault2", "page_fault3", "mmap1")]
    assert all(mode == "processes" and n == 1 for _, _, _, mode, n in jobs[:len(v.WORKLOADS)])
    assert not [j for j in v.jobs_for("16K", 2) if j[3] == "threads"]
    assert not [j for j in v.jobs_for("64K", 0) if j[3] == "threads"]
    # A threads row whose real peak RSS is below the lockstep prediction says
    # why and by how much; an ops-ratio miss names the threads run.
    row = {"setting": "64K", "workload": "page_fault2", "mode": "threads", "tasks": 2, "mechanism": v.THREAD_MECH["page_fault2"],
           "real": {"faults_per_op": 1.0, "rss": 209560.0, "ops_per_s": 1e6, "ops_ratio": 0.8},
           "predicted": {"faults_per_op": 1.0, "rss": 262144.0, "ops_per_s": 1.05e6, "ops_ratio": 1.0}}
    row["rel_error"] = {m: v.rel_err(row["predicted"][m], row["real"][m], m) for m in v.METRICS}
    note = "; ".join(v._mech_note(row))
    assert "rss off by +25.1%" in note and "lockstep" in note, note
    assert "ops_ratio off by +25.0%" in note and "page_fault2 threads x2" in note, note
    assert "faults_per_op" not in note
    rep = {"rows": [dict(row, note=note)], "max_rel_error": {m: row["rel_error"][m] for m in v.METRICS},
           "mean_rel_error": {m: row["rel_error"][m] for m in v.METRICS}}
    table = v.format_table(rep)
    assert "threads x2" in table.splitlines()[1] and "MISSED" in table


@pytest.mark.parametrize("bad", ["1", "-2", "99999", "two"])
def test_validate_bad_threads_one_line_exit_2(bad):
    r = cli("validate", "--threads", bad)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--threads" in r.stderr


def test_validate_bad_setting_one_line_exit_2_before_measuring():
    r = cli("validate", "--settings", "4K,3K", timeout=30)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "3K" in r.stderr, r.stderr


def test_knob_lock_is_reentrant_and_released(tmp_path, monkeypatch):
    import fcntl
    monkeypatch.setattr(_host, "KNOB_LOCK", tmp_path / "lock")
    a = tmp_path / "a"
    a.write_text("always [never]\n")
    with _host.thp_settings({a: "always"}):
        with _host.thp_settings({a: "always"}):
            f = open(tmp_path / "lock")  # noqa: SIM115 -- used after the block, to see the lock released
            with pytest.raises(BlockingIOError):  # held by the outer block
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert _host.knobs_changed({a: "always"}) == []
        a.write_text("never")  # someone else writes the knob
        assert _host.knobs_changed({a: "always"}) and "never" in _host.knobs_changed({a: "always"})[0]
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released
    f.close()


# --------------------------------------------------------------- validate --
def test_validate_quick_bounds_on_what_the_model_covers(host_profile):
    why = _host.knobs_available()
    if why:
        r = cli("validate", "--json")
        assert r.returncode == 0 and json.loads(r.stdout) == {"skipped": why}
        pytest.skip(f"validate needs the THP knobs: {why}")
    # Snapshots under the knob lock: another foliosim run on this machine
    # (which holds the lock while it changes the knobs) has restored them.
    with _host.knob_lock():
        before = knob_snapshot()
    # Three repeats, not quick's two: the page_fault3 threads row below is
    # judged against the range of its repeats, and with two, runs whose
    # real threads drifted out of phase in both repeats left the prediction
    # just outside it (stop 40's CI, and again in a CI run of 19f470a).
    r = cli("validate", "--quick", "--repeats", "3", "--json", "--profile", str(host_profile), "--out", str(host_profile.parent / "val"))
    with _host.knob_lock():
        after = knob_snapshot()
    assert after == before, "validate must restore every knob"
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    rows = rep["rows"]
    base = [x for x in rows if x["setting"] == "4K" and x["mode"] == "processes"]
    assert {x["workload"] for x in base} >= {"page_fault1", "page_fault2", "page_fault3", "malloc1", "mmap1", "tlb_flush2", "read1", "sparse_touch"}
    for x in base:
        assert x["predicted"] is not None, x
        e = x["rel_error"]
        assert e["faults_per_op"] <= 0.05, (x["workload"], x["real"], x["predicted"], x["note"])
        assert e["rss"] <= 0.05, (x["workload"], x["real"], x["predicted"], x["note"])
        assert x["real"]["ops_ratio"] == 1 and x["predicted"]["ops_ratio"] == 1
    for x in rows:
        if x["setting"] != "4K" and x["real"] is not None and x["predicted"] is None:
            assert "mTHP not modelled yet" in x["note"]
    # The real kernel did what each setting asks: 64 KiB folios cut pf1's faults 16x.
    pf1 = {x["setting"]: x["real"]["faults_per_op"] for x in rows if x["workload"] == "page_fault1" and x["real"]}
    if "64K" in pf1:
        assert pf1["64K"] < pf1["4K"] / 8
    # Rows of the large-folio settings: within the 5% target, or validate says
    # which mechanism is off and by how much (issue #8), and never far off.
    for x in rows:
        if x["setting"] == "4K" or x["predicted"] is None or x["real"] is None:
            continue
        e = x["rel_error"]["faults_per_op"]
        assert e <= 0.10, (x["setting"], x["workload"], x["real"], x["predicted"], x["note"])
        if e > 0.05:
            assert "faults_per_op off by" in x["note"] and ":" in x["note"], x["note"]
    assert rep["max_rel_error"]["faults_per_op"] <= 0.10
    # Threads mode (one mm, 2 threads): rows for page_fault1/2/3 and mmap1
    # under 4K, 64K and 2M, simulated with mode = "threads" and the same knobs.
    thr = {(x["setting"], x["workload"]): x for x in rows if x["mode"] == "threads"}
    assert set(thr) == {(s, w) for s in ("4K", "64K", "2M") for w in ("page_fault1", "page_fault2", "page_fault3", "mmap1")}
    for (setting, w), x in thr.items():
        assert x["tasks"] == 2 and x["predicted"] is not None and x["real"]["ops_per_s"] > 0, x
        # Faults per op are exact counts: within the target in threads mode too.
        assert x["rel_error"]["faults_per_op"] <= 0.05, (setting, w, x["real"], x["predicted"], x["note"])
        for m, target in (("rss", 0.05), ("ops_ratio", 0.15)):
            if x["rel_error"][m] > target:  # a miss names the mechanism and by how much
                assert f"{m} off by" in x["note"] and ":" in x["note"], x["note"]
    # The real threads ran with 64 KiB folios: 16x fewer faults than 4K.
    assert thr[("64K", "page_fault1")]["real"]["faults_per_op"] < thr[("4K", "page_fault1")]["real"]["faults_per_op"] / 8
    # The CI-asserted threads row: page_fault3 (shared file write faults of two
    # threads into one mm) within every target. Its peak RSS is the most
    # stable of the threads rows, yet still depends on how far the two real
    # threads drift out of phase: where the repeats themselves spread beyond
    # the target (validate marks the row noisy), the prediction must lie
    # inside the repeats' range widened by the target instead.
    x = thr[("4K", "page_fault3")]
    e = x["rel_error"]
    for m, target in (("faults_per_op", 0.05), ("rss", 0.05), ("ops_ratio", 0.15)):
        if m in x["noisy"]:
            lo, hi = x["real_range"][m]
            assert lo * (1 - target) <= x["predicted"][m] <= hi * (1 + target), (m, x["real_repeats"], x["predicted"], x["note"])
            assert "noisy" in x["note"] and m in x["note"], x["note"]
        else:
            assert e[m] <= target, (m, x["real"], x["predicted"], x["note"])


# ----------------------------------------------------------- trace replay --
def write_trace(path: Path, version: int = 3, truncate: int = 0) -> None:
    """A small valid trace written by the core's converter from a fake valgrind log."""
    log = path.with_suffix(".log")
    log.write_text(
        "SYSCALL[7,1](12) sys_brk ( 0x0 ) --> [pre-success] Success(0x4035000) \n"
        "SYSCALL[7,1](9) sys_mmap ( 0x0, 65536, 3, 34, 4294967295, 0 ) --> [pre-success] Success(0x4900000) \n"
        + "".join(f" S {0x4900000 + i * 4096:08x},8\n L {0x4900000 + i * 4096:08x},8\n" for i in range(16))
        + "SYSCALL[7,1](11) sys_munmap ( 0x4900000, 65536 )[sync] --> Success(0x0) \n")
    from foliosim import _core
    _core.trace_from_valgrind_log(str(log), str(path), "{}")
    data = bytearray(path.read_bytes())
    data[8:10] = version.to_bytes(2, "little")
    if truncate:
        data = data[:-truncate]
    path.write_bytes(bytes(data))


def replay_cfg(path: Path) -> dict:
    return {"machine": {"profile": "generic-x86"}, "workload": {"name": "trace", "path": str(path)},
            "run": {"warmup_s": 0.0, "duration_s": 1.0}}


def test_trace_replay_faults_and_rss(tmp_path):
    t = tmp_path / "t.fstrace"
    write_trace(t)
    r = foliosim.run(replay_cfg(t))
    # 16 first-touch stores: 16 anonymous faults, 64 KiB peak RSS.
    assert r.raw["vmstat"]["foliosim_fault_anon"] == 16
    assert r.raw["memory"]["peak_rss_kib"] == 64
    assert r.summary["ops_total"] == 32


@pytest.mark.parametrize("kind,needle", [("truncated", "truncated"), ("newer", "newer"), ("garbage", "bad magic"),
                                         ("corrupt", "corrupt"), ("older", "version 2 is older"),
                                         ("machine", "another kind of machine (aarch64, 64 KiB pages)")])
def test_bad_traces_are_one_line_errors(tmp_path, kind, needle):
    t = tmp_path / "bad.fstrace"
    if kind == "truncated":
        write_trace(t, truncate=7)
    elif kind == "newer":
        write_trace(t, version=99)
    elif kind == "older":
        write_trace(t, version=2)
    elif kind == "machine":
        write_trace(t)
        data = bytearray(t.read_bytes())
        data[11], data[12:14] = 16, (183).to_bytes(2, "little")
        t.write_bytes(bytes(data))
    elif kind == "corrupt":
        write_trace(t)
        data = bytearray(t.read_bytes())
        for i in range(14, len(data) - 4, 3):
            data[i] ^= 0xA5
        t.write_bytes(bytes(data))
    else:
        t.write_bytes(b"hello world")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[workload]\nname = "trace"\npath = "{t}"\n[run]\nduration_s = 0.1\n')
    r = cli("run", str(cfg), "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")


@needs_valgrind
def test_record_failing_program_leaves_no_trace(tmp_path):
    out = tmp_path / "f.fstrace"
    r = cli("record", "--mode", "valgrind", "-o", str(out), "--", "sh", "-c", "exit 3")
    assert r.returncode == 2 and "status 3" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir())
    r = cli("record", "--mode", "valgrind", "-o", str(out), "--", "no-such-program-xyz")
    assert r.returncode == 2 and "not found" in r.stderr and not out.exists()


@needs_valgrind
def test_record_failing_child_tree_leaves_no_trace(tmp_path):
    """A process tree whose command exits non-zero after a child ran."""
    out = tmp_path / "f.fstrace"
    r = cli("record", "--mode", "valgrind", "-o", str(out), "--", "sh", "-c", "cat /etc/hostname >/dev/null; exit 4")
    assert r.returncode == 2 and "status 4" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not list(tmp_path.iterdir())


@needs_valgrind
# Known flaky (2 of 8 runs on 2026-11-29; 0 of 22 later the same day, 12
# under valgrind alone and 10 through `foliosim record`, all beside a full
# `make reproductions`): the failing replay reaped no child, and its trace
# had 66 mm system calls against 67 (RecordStats.syscalls counts mmap,
# munmap, mprotect, madvise, brk and mremap, not wait4), so more than the
# reap went missing. In every log kept, dash's blocking wait4 (recorded at
# its call) is there. Not strict: a pass is reported (XPASS) and the
# assertions still run; a failure prints the trace's statistics.
@pytest.mark.xfail(strict=False, reason="the recorded sh -c tree sometimes replays without its reap (see the comment)")
def test_record_a_process_tree_and_replay_it(tmp_path):
    """sh forks cat: two processes, cat's image and ld.so as files shared
    with sh's (one page cache), cat's records replayed in a forked child."""
    out = tmp_path / "sh.fstrace"
    r = cli("record", "--mode", "valgrind", "-o", str(out), "--json", "--", "sh", "-c", "cat /etc/hostname >/dev/null; true")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])["info"]
    assert info["version"] == 3 and info["processes"] == 2 and info["meta"]["mode"] == "valgrind", info
    from foliosim import _core  # noqa: F401
    res = foliosim.run(replay_cfg(out) | {"run": {"warmup_s": 0.0, "duration_s": 60.0}})
    vm = res.raw["vmstat"]
    assert vm["foliosim_fork"] == 1 and vm["foliosim_exec"] == 2 and vm["foliosim_wait_reaped"] == 1, (vm, info)
    # Text and ld.so are file mappings: read faults with fault-around.
    assert vm["foliosim_fault_file_read"] > 10 and vm["foliosim_fault_around_pages"] > 0, vm


@needs_valgrind
@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="sqlite3 not installed")
def test_record_sqlite3_and_replay_against_native(tmp_path, host_profile):
    out = tmp_path / "sq.fstrace"
    cmd = ["sqlite3", ":memory:", "create table t(a); insert into t values(1),(2); select sum(a) from t;"]
    r = cli("record", "--mode", "valgrind", "-o", str(out), "--validate", "--profile", str(host_profile), "--json", "--", *cmd)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    info = rep["record"]["info"]
    assert info["accesses"] > 100_000 and info["syscalls"] > 10 and info["meta"]["argv"] == cmd
    row = next(x for x in rep["rows"] if x["setting"] == "4K")
    # The replay predicts the native run's minor faults and peak RSS within
    # the recorder's known gaps (ELF image replayed as anonymous memory).
    assert row["rel_error"]["minflt"] < 0.5, row
    assert row["rel_error"]["rss"] < 0.5, row


# ------------------------------------------------- host facts in the report --
def test_mm_activity_names_damon_schemes_and_free_page_reporting(tmp_path):
    from foliosim.validate import mm_activity

    def put(rel: str, text: str) -> None:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")

    assert mm_activity(tmp_path) == []
    kd = "kernel/mm/damon/admin/kdamonds/0"
    put(f"{kd}/state", "on")
    put(f"{kd}/contexts/0/operations", "paddr")
    put(f"{kd}/contexts/0/schemes/0/action", "pageout")
    put("module/page_reporting/parameters/page_reporting_order", "9")
    put("bus/virtio/devices/virtio0/device", "0x0005")
    put("bus/virtio/devices/virtio0/features", "0000010000")  # bit 5: REPORTING
    assert mm_activity(tmp_path) == ["DAMON kdamond 0 on paddr, schemes: pageout",
                                     "virtio-balloon free page reporting (page_reporting_order 9)"]
    put(f"{kd}/state", "off")
    put("bus/virtio/devices/virtio0/features", "0000000000")  # reporting not negotiated
    assert mm_activity(tmp_path) == []
