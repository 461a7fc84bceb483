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
from conftest import REPO, TINY, TINY_DICT, line_of, one_json, one_line_error, run_cli, stderr_lines, tiny_runs
from foliosim import _core, cli
from foliosim import result as result_mod
from foliosim import sweep as sw

LONG = TINY.replace("duration_s = 0.05", "duration_s = 1000.0")


# ------------------------------------------------------ 3: profile values --
GENERIC = (REPO / "profiles" / "generic-x86.toml").read_text()


@pytest.mark.parametrize("old,new,key", [
    ("trap_ns =", "trap_ns = -250.0", "cost.trap_ns"),
    ("fault_base_ns =", "fault_base_ns = nan", "cost.fault_base_ns"),
    ("zero_bw_gbps =", "zero_bw_gbps = inf", "nodes[0].zero_bw_gbps"),
    ("stlb_hit_ns =", "stlb_hit_ns = -1", "tlb.stlb_hit_ns"),
    ("vq_roundtrip_ns =", "vq_roundtrip_ns = 1e30", "host.vq_roundtrip_ns"),
])
def test_bad_profile_value_is_one_line_naming_file_line_and_key(tmp_path, old, new, key):
    line = next(ln for ln in GENERIC.splitlines() if ln.lstrip().startswith(old))
    text = GENERIC.replace(line, new, 1)
    prof = tmp_path / "bad-profile.toml"
    prof.write_text(text)
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY.replace('profile = "generic-x86"', f'profile = "{prof.name}"'))
    err = one_line_error(run_cli("run", str(cfg), "--out", str(tmp_path / "o")), key)
    assert f"{prof}:{line_of(text, new)}: {key}:" in err


def test_builtin_profiles_pass_the_value_checks():
    for p in foliosim.catalog()["profiles"]:
        cfg = dict(TINY_DICT, machine={"profile": p["name"]})
        foliosim.load_config(cfg)


# --------------------------------------------- 7: outputs and write errors --
def test_out_that_is_a_file_is_refused_before_the_run(tmp_path):
    cfg = tmp_path / "long.toml"
    cfg.write_text(LONG)  # 1000 simulated s: the check must come first
    f = tmp_path / "file"
    f.write_text("x")
    one_line_error(run_cli("run", str(cfg), "--out", str(f), timeout=30), "--out", "not a folder")
    one_line_error(run_cli("run", str(cfg), "--out", str(f / "sub"), timeout=30), "--out", "not a folder")
    assert f.read_text() == "x"


def test_out_with_missing_parents_is_made(tiny_config, tmp_path):
    out = tmp_path / "a" / "b" / "c"
    proc = run_cli("run", str(tiny_config), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(out)) == sorted(result_mod.RESULT_FILES)


@contextlib.contextmanager
def tmpfs(path: Path, *opts: str):
    """A small tmpfs at `path` (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(opts), "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_read_only_out_is_refused_before_the_run(tmp_path):
    cfg = tmp_path / "long.toml"
    cfg.write_text(LONG)
    with tmpfs(tmp_path / "ro", "size=64k", "ro") as ro:
        one_line_error(run_cli("run", str(cfg), "--out", str(ro / "out"), timeout=30), "--out", "cannot write")
        one_line_error(run_cli("run", str(cfg), "--out", str(ro), timeout=30), "--out", "cannot write")


def test_full_disk_prints_the_summary_then_one_line_and_leaves_nothing(tiny_config, tmp_path):
    with tmpfs(tmp_path / "full", "size=16k") as full:
        proc = run_cli("run", str(tiny_config), "--out", str(full / "out"))
        one_line_error(proc, "--out", "could not be written", "No space left")
        assert "ops/s" in proc.stdout and "pgfault" in proc.stdout  # the summary came first
        assert "results:" not in proc.stdout
        assert os.listdir(full) == [], os.listdir(full)  # no half folder, no hidden staging


class Enospc:
    """`_write_synced` that fails on one file, as a full disk would."""

    def __init__(self, fail_on: str):
        self.fail_on, self.real = fail_on, result_mod._write_synced

    def __call__(self, path, write):
        if Path(path).name == self.fail_on:
            with open(path, "xb") as f:
                f.write(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return self.real(path, write)


def small_result() -> foliosim.Result:
    return foliosim.run(TINY_DICT)


def test_failed_save_leaves_no_folder_and_no_staging(tmp_path, monkeypatch):
    r = small_result()
    monkeypatch.setattr(result_mod, "_write_synced", Enospc("timeseries.parquet"))
    with pytest.raises(OSError):
        r.save(tmp_path / "new")
    assert os.listdir(tmp_path) == []


def test_failed_save_over_an_old_result_keeps_it_whole(tmp_path, monkeypatch):
    r = small_result()
    out = r.save(tmp_path / "old")
    (out / "notes.txt").write_text("mine")
    before = {n: (out / n).read_bytes() for n in os.listdir(out)}
    monkeypatch.setattr(result_mod, "_write_synced", Enospc("vmstat.parquet"))
    with pytest.raises(OSError):
        r.save(out)
    assert {n: (out / n).read_bytes() for n in os.listdir(out)} == before


def test_write_error_after_a_run_prints_the_summary_then_one_line(tiny_config, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(result_mod, "_write_synced", Enospc("result.json"))
    rc = cli.main(["run", str(tiny_config), "--out", str(tmp_path / "out")])
    cap = capsys.readouterr()
    assert rc == 2
    assert "ops/s" in cap.out
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "could not be written" in lines[0], cap.err
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path) == ["tiny.toml"]


def test_reproduce_and_sweep_check_out_first(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    one_line_error(run_cli("reproduce", "all", "--out", str(f), timeout=30), "--out")
    spec = tmp_path / "s.toml"
    spec.write_text('[config]\nworkload.name = "page_fault1"\n[grid]\nseed = [1, 2]\n')
    one_line_error(run_cli("sweep", str(spec), "--out", str(f), timeout=30), "--out")


# --------------------------------------------------------------- 8: compare --
@pytest.fixture(scope="module")
def runs_and_sweep(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp8")
    tiny_runs(d, {"a": 2, "b": 3})
    spec = d / "s.toml"
    spec.write_text('base = "tiny.toml"\n[grid]\nseed = [1, 2]\n')
    proc = run_cli("sweep", str(spec), "--out", str(d / "sw"), "--jobs", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return d


def test_compare_reads_a_sweep_part_and_a_vmstat_parquet(runs_and_sweep):
    d = runs_and_sweep
    part = sorted((d / "sw").glob("part-*.parquet"))[0]
    proc = run_cli("compare", str(part), str(d / "sw"), "--json", "--all")
    assert proc.returncode == 0, proc.stderr
    obj = one_json(proc.stdout)
    assert any(ln["name"] == "vmstat.pgfault" for ln in obj["lines"])
    proc = run_cli("compare", str(d / "a" / "vmstat.parquet"), str(d / "b" / "result.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    lines = {ln["name"]: ln for ln in one_json(proc.stdout)["lines"]}
    a = json.loads((d / "a" / "result.json").read_text())
    assert lines["vmstat.pgfault"]["a"] == a["vmstat"]["pgfault"]


def test_compare_other_binary_files_is_one_line(runs_and_sweep, tmp_path):
    d = runs_and_sweep
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) * 8)
    one_line_error(run_cli("compare", str(blob), str(d / "a")), str(blob), "binary")
    one_line_error(run_cli("compare", str(d / "a" / "timeseries.parquet"), str(d / "a")), "timeseries.parquet", "Parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1" + b"\0" * 64)
    one_line_error(run_cli("compare", str(bad), str(d / "a")), str(bad), "Parquet")


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
    shutil.copy(REPO / "tests" / "data" / "traces" / "threads.fstrace", tmp_path / "traces" / "t.fstrace")
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
    assert f"{cfg}:{line_of(text, 'path =')}:" in err
    cfg.write_text(text.replace("../profiles/mine.toml", "mine.toml"))
    err = one_line_error(run_cli("run", str(cfg), "--out", str(root / "o")), "machine.profile",
                         str(root / "cfgs" / "mine.toml"))
    assert f"{cfg}:{line_of(text, 'profile =')}:" in err


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


# ----------------------------------------------------- 11: stopping runs --
def test_cancel_stops_a_run_in_a_thread():
    cancel = foliosim.Cancel()
    out: dict = {}
    long = dict(TINY_DICT, run={"warmup_s": 0.0, "duration_s": 1000.0})
    t = threading.Thread(target=lambda: out.setdefault("r", foliosim.run(long, cancel=cancel)))
    t.start()
    time.sleep(0.5)
    assert t.is_alive()
    cancel.cancel()
    t.join(timeout=20)
    assert not t.is_alive(), "the run did not stop"
    assert out["r"].interrupted and out["r"].sim_time_s < 1000.0
    assert cancel.cancelled


def test_stop_on_signals_stops_runs_in_threads():
    long = dict(TINY_DICT, run={"warmup_s": 0.0, "duration_s": 1000.0})
    before = signal.getsignal(signal.SIGINT)
    results: list = []
    with foliosim.stop_on_signals() as stop:
        ts = [threading.Thread(target=lambda: results.append(foliosim.run(long, cancel=stop))) for _ in range(2)]
        for t in ts:
            t.start()
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 20
        while any(t.is_alive() for t in ts) and time.monotonic() < deadline:
            time.sleep(0.05)  # the main thread runs the handler here
    assert not any(t.is_alive() for t in ts)
    assert len(results) == 2 and all(r.interrupted for r in results)
    assert signal.getsignal(signal.SIGINT) is before


SIGNAL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import foliosim.cli as cli

    class SignalOnFirstCall:
        def __init__(self, *a, **k): self.sent = False
        def __enter__(self): return self
        def __exit__(self, *a): pass
        def __call__(self, sim_s, total_s):
            if not self.sent:
                self.sent = True
                os.kill(os.getpid(), getattr(signal, os.environ["SIG"]))
            return True

    cli.ProgressBar = SignalOnFirstCall
    sys.exit(cli.main(sys.argv[1:]))
""")


@pytest.mark.parametrize("sig,code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_keeps_partial_results(tmp_path, sig, code):
    cfg = tmp_path / "long.toml"
    cfg.write_text(LONG)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", SIGNAL_SCRIPT, "run", str(cfg), "--out", str(out)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, SIG=sig))
    assert proc.returncode == code, proc.stderr
    assert "partial results written" in proc.stderr
    raw = json.loads((out / "result.json").read_text())
    assert raw["interrupted"] is True and raw["sim_time_s"] < 1000.0


def test_sigterm_from_outside_keeps_partial_results(tmp_path):
    cfg = tmp_path / "long.toml"
    cfg.write_text(LONG)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "foliosim", "run", str(cfg), "--out", str(out)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # importing and booting; the run itself would take minutes
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert json.loads((out / "result.json").read_text())["interrupted"] is True


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


# ------------------------------------------------------------ 13: record --
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("gcc") is None,
                                    reason="valgrind and gcc are needed (Debian: apt-get install valgrind gcc)")

FCLOSE_STDERR = r"""
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    char *p = malloc(1 << 20);
    for (int i = 0; i < (1 << 20); i += 4096) p[i] = 1;
    fputs("to stderr\n", stderr);
    printf("to stdout\n");
    /* as xz and mawk do at exit: a failed close of stderr is an error */
    if (fclose(stderr) != 0) return 1;
    return 0;
}
"""


@pytest.fixture(scope="module")
def fclose_prog(tmp_path_factory):
    d = tmp_path_factory.mktemp("fcl")
    (d / "fcl.c").write_text(FCLOSE_STDERR)
    r = subprocess.run(["gcc", "-O", "-o", str(d / "fcl"), str(d / "fcl.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return d / "fcl"


@needs_valgrind
def test_record_a_program_that_checks_the_close_of_stderr(fclose_prog, tmp_path):
    out = tmp_path / "fcl.fstrace"
    proc = run_cli("record", "--mode", "valgrind", "-o", str(out), "--json", "--", str(fclose_prog), timeout=300)
    assert proc.returncode == 0, proc.stderr
    st = one_json(proc.stdout)  # 14: stdout is the JSON alone
    assert "to stdout" in proc.stderr and "to stderr" in proc.stderr
    assert out.exists() and st["info"]["accesses"] > 0
    # Its image was laid out from the loader's objects: replayed over files.
    assert st["info"]["files"] >= 2
    r = foliosim.run({"workload": {"name": "trace", "path": str(out)}, "run": {"warmup_s": 0.0, "duration_s": 60.0}})
    assert r.summary["workload_finished_s"] is not None
    # Every access replays in a mapping: libc's mmap, whose result valgrind
    # printed after its own messages, was recorded.
    assert r.vmstat.get("foliosim_segv", 0) == 0, r.vmstat.get("foliosim_segv")


@needs_valgrind
def test_a_failing_recorded_program_shows_its_status_and_stderr(tmp_path):
    out = tmp_path / "t.fstrace"
    # (What it prints is computed: the error's quote of the command cannot hold it.)
    proc = run_cli("record", "--mode", "valgrind", "-o", str(out), "--", "sh", "-c", "echo first >&2; echo disk $((6*7)) on fire >&2; exit 3",
                   timeout=300)
    err = stderr_lines(proc)[-1]
    assert proc.returncode == 2, proc.stderr
    assert "status 3" in err and "disk 42 on fire" in err, err
    assert not out.exists()


# ------------------------------------------------------------- 14: --json --
def test_calibrate_json_is_one_document(tmp_path, monkeypatch, capsys):
    from foliosim import calibrate
    from test_calibrate_fit import synthetic  # a host made of known costs

    micro, series = synthetic()
    monkeypatch.setattr(calibrate, "measure_micro", lambda: micro)
    monkeypatch.setattr(calibrate, "measure_series", lambda rounds, **k: series)
    rc = cli.main(["calibrate", "--out", str(tmp_path / "h.toml"), "--json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    doc = json.loads(cap.out)
    assert doc["profile"] == str(tmp_path / "h.toml") and doc["series"] == series
    assert "wrote" in cap.err and "fit:" in cap.err


def test_calibrate_keeps_its_measurements_when_deriving_fails(tmp_path, monkeypatch, capsys):
    from foliosim import calibrate
    from test_calibrate_fit import synthetic

    micro, series = synthetic()
    monkeypatch.setattr(calibrate, "measure_micro", lambda: micro)
    monkeypatch.setattr(calibrate, "measure_series", lambda rounds, **k: series)
    real_derivation = calibrate.Derivation

    def broken(*a, **k):
        raise calibrate.HostError("the series do not fit")

    monkeypatch.setattr(calibrate, "Derivation", broken)
    out = tmp_path / "h.toml"
    assert cli.main(["calibrate", "--out", str(out), "--json", "--rounds", "3"]) == 2
    cap = capsys.readouterr()
    saved = tmp_path / "h.measurements.json"
    assert cap.out == "" and str(saved) in cap.err and "do not fit" in cap.err
    # (The mocked rounds time no system call and no process image.)
    assert json.loads(saved.read_text()) == {"rounds": 3, "micro": micro, "series": series, "syscalls": {}, "image": []}
    # ... and the profile can be derived from them later without measuring.
    monkeypatch.setattr(calibrate, "Derivation", real_derivation)
    monkeypatch.setattr(calibrate, "measure_series", lambda rounds, **k: pytest.fail("measured again"))
    assert cli.main(["calibrate", "--out", str(out), "--from", str(saved)]) == 0
    assert out.exists()


def test_json_commands_print_one_document(tiny_config, tmp_path):
    for args in (["list", "--json"], ["run", str(tiny_config), "--json", "--out", str(tmp_path / "a")],
                 ["run", str(tiny_config), "--json", "--out", str(tmp_path / "b")],
                 ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]):
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        one_json(proc.stdout)


# ------------------------------------------------------ 15: replay's end --
def test_a_replay_says_whether_the_trace_ran_to_its_end(tmp_path):
    trace = REPO / "tests" / "data" / "traces" / "threads.fstrace"
    base = {"seed": 1, "workload": {"name": "trace", "path": str(trace)}}
    full = foliosim.run(dict(base, run={"warmup_s": 0.0, "duration_s": 600.0}))
    end = full.summary["workload_finished_s"]
    assert end is not None and 0 < end < 600.0
    assert full.sim_time_s == 600.0  # the cap; the field says what happened
    cut = foliosim.run(dict(base, run={"warmup_s": 0.0, "duration_s": end / 2}))
    assert cut.summary["workload_finished_s"] is None
    assert "replayed to its end" in cli.format_summary(full)
    assert "NOT replayed to its end" in cli.format_summary(cut)
    forever = foliosim.run(TINY_DICT)
    assert forever.summary["workload_finished_s"] is None
    assert "replayed" not in cli.format_summary(forever) and "exited" not in cli.format_summary(forever)


# -------------------------------------------------------------- 17: list --
def test_list_has_sections_and_patterns():
    full = run_cli("list")
    assert full.returncode == 0, full.stderr
    for sect, must, must_not in (("knobs", "vm.min_free_kbytes", "pgfault"), ("counters", "pgfault", "vm.min_free_kbytes"),
                                 ("profiles", "generic-x86", "pgfault"), ("workloads", "page_fault1", "pgfault"),
                                 ("config", "sample_ms", "pgfault")):
        proc = run_cli("list", sect)
        assert proc.returncode == 0, proc.stderr
        assert must in proc.stdout and must_not not in proc.stdout, sect
        assert len(proc.stdout.splitlines()) < len(full.stdout.splitlines())
    proc = run_cli("list", "knobs", "vm.*")
    keys = [ln.split()[0] for ln in proc.stdout.splitlines()[1:] if ln.startswith("  ")]
    assert keys and all(k.startswith("vm.") for k in keys), keys
    proc = run_cli("list", "page_fault")  # a pattern alone: every section
    assert "page_fault1" in proc.stdout and "vm.min_free_kbytes" not in proc.stdout
    one_line_error(run_cli("list", "knobs", "no-such-thing-at-all"), "no-such-thing-at-all")
    one_line_error(run_cli("list", "knobs", "a", "b"), "SECTION")


def test_list_prints_shared_workload_parameters_once():
    out = run_cli("list", "workloads").stdout
    cat = foliosim.catalog()
    for name in ("tmp_fs", "pin"):
        help_text = next(p["help"] for w in cat["workloads"] for p in w["params"] if p["name"] == name)
        assert out.count(" ".join(help_text.split())) == 1, name
    assert len(out.splitlines()) < 300


def test_list_config_documents_every_machine_and_run_key():
    cat = foliosim.catalog()
    keys = {f"{k['table']}.{k['key']}" if k["table"] else k["key"] for k in cat["config"]}
    assert {"seed", "machine.profile", "machine.nr_cpus", "machine.node_mem_mib", "machine.guests", "machine.tlb_contpte",
            "machine.tlb_coalesce_order", "machine.guest_stagger_ms", "run.warmup_s", "run.duration_s", "run.check",
            "run.sample_ms", "run.audit_interval_ms"} <= keys
    out = run_cli("list", "config").stdout
    assert "calibrate" in out  # a profile may be a file calibrate wrote
    for k in cat["config"]:
        assert f"    {k['key']} = " in out, k
    # Each default listed is the default a config gets.
    norm = foliosim.load_config({"workload": {"name": "page_fault1"}})
    for k in cat["config"]:
        # (run.fault_runs, a debug switch of the same result, is in the
        # normalised config only when off.)
        if k["default"] is not None and not k["key"].startswith("guest") and k["key"] != "fault_runs":
            got = norm[k["table"]][k["key"]] if k["table"] else norm[k["key"]]
            assert got == k["default"], k


def test_an_unquoted_knob_in_set_gets_a_hint(tiny_config):
    err = one_line_error(run_cli("run", str(tiny_config), "--set", "knobs.vm.min_free_kbytes=131072"), "knobs.vm")
    assert """knobs."vm.min_free_kbytes\"""" in err and "quote" in err
