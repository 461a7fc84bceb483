"""`foliosim record` and the replay of a recorded program tree (issue #29:
the recorder at native speed, the tree replay, bad input; issue #31: every
child of a recording dies with it).

The committed traces (tests/data/traces/, `make record-test-traces`) replay
everywhere. The tests that record need root and a working `perf record`
(Debian's linux-perf), or valgrind for `--mode valgrind`; without them they
skip and say why."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import foliosim
from foliosim._host import HostError

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"


def cli(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foliosim", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=kw.pop("cwd", ROOT), **kw)


def _perf_why() -> str | None:
    """Why perf cannot record here (None: it can)."""
    if os.geteuid() != 0:
        return "recording with perf needs root"
    from foliosim.record import perf_ready
    try:
        perf = perf_ready()
    except HostError as e:
        return str(e)
    r = subprocess.run([perf, "record", "-q", "-e", "exceptions:page_fault_user", "-o", "/dev/null", "--", "true"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"`perf record` does not work here: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


PERF_WHY = _perf_why()
needs_perf = pytest.mark.skipif(PERF_WHY is not None, reason=str(PERF_WHY))
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed (apt-get install valgrind)")


def replay(trace: Path, cpus: int = 8, **params) -> dict:
    cfg = {"seed": 1, "machine": {"profile": "generic-x86", "nr_cpus": cpus},
           "workload": {"name": "trace", "path": str(trace), **params}, "run": {"warmup_s": 0.0, "duration_s": 60.0}}
    return foliosim.run(cfg).raw


# ------------------------------------------------------- committed traces --
def test_a_recorded_make_replays_its_processes_and_reruns_at_other_jobs():
    """make -j2 of three C files: make, its shells, gcc, cc1, as, ld."""
    t = TRACES / "make-j2.fstrace"
    info = json.loads(foliosim._core.trace_info(str(t)))
    assert info["meta"]["mode"] == "perf" and info["meta"]["argv"][:3] == ["make", "-s", "-j2"], info["meta"]
    as_recorded = replay(t)
    vm = as_recorded["vmstat"]
    assert as_recorded["summary"]["workload_finished_s"] is not None, "replayed to its end"
    assert as_recorded["summary"]["ops_total"] == info["accesses"]
    # Every process but the root was started by a fork or a vfork, and
    # every image by an exec (make, the compiler driver, cc1, as, ld...).
    assert vm["foliosim_exec"] >= 10 and vm["foliosim_wait_reaped"] >= 3, vm
    assert as_recorded["summary"]["tasks"] == info["processes"] + info["threads"]
    # The recorded CPU time is replayed: user time near the recording's.
    assert as_recorded["time_ns"]["user"] > 0.5 * info["user_ns"], (as_recorded["time_ns"]["user"], info["user_ns"])
    # One job slot: the compiles one after the other; four: all at once.
    j1, j4 = replay(t, jobs=1), replay(t, jobs=4)
    f1, f4 = j1["summary"]["workload_finished_s"], j4["summary"]["workload_finished_s"]
    assert f1 > 1.3 * f4, (f1, f4)
    assert j1["summary"]["ops_total"] == j4["summary"]["ops_total"] == info["accesses"]
    # jobs = "cpus": as make -j$(nproc) on the simulated machine, here -j4.
    cpus4 = replay(t, cpus=4, jobs="cpus")
    assert cpus4["summary"]["workload_finished_s"] == replay(t, cpus=4, jobs=4)["summary"]["workload_finished_s"]


def test_a_bad_jobs_value_is_one_line(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[workload]\nname = "trace"\npath = "{TRACES / "make-j2.fstrace"}"\njobs = "many"\n[run]\nduration_s = 1.0\n')
    r = cli("run", str(cfg), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert 'jobs: expected a number of job slots or "cpus"' in r.stderr, r.stderr


def test_threads_of_a_recorded_program_share_its_address_space():
    t = TRACES / "threads.fstrace"
    info = json.loads(foliosim._core.trace_info(str(t)))
    assert info["threads"] == 3, info
    r = replay(t, cpus=4)
    tasks = [x for x in r["per_task"] if not x["kthread"]]
    assert len(tasks) == 4 and len({x["mm"] for x in tasks}) == 1, tasks
    assert len({x["cpu"] for x in tasks}) == 4, "each thread on a CPU of its own"
    # The 4 MiB heap, one fault per page: its pages are faults in the trace.
    assert r["vmstat"]["foliosim_fault_anon"] >= 1024, r["vmstat"]["foliosim_fault_anon"]


def test_a_replay_says_which_recorder_made_the_trace_and_what_it_lacks(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[workload]\nname = "trace"\npath = "{TRACES / "threads.fstrace"}"\n[run]\nduration_s = 10.0\n')
    r = cli("run", str(cfg), "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "recorded with" in ln)
    assert "recorded with perf" in line and "no TLB hits" in line and "LRU" in line, line


# -------------------------------------------------------------- recording --
@needs_perf
def test_record_with_perf_and_replay(tmp_path):
    out = tmp_path / "sh.fstrace"
    r = cli("record", "-o", str(out), "--json", "--", "sh", "-c", "cat /etc/hostname >/dev/null; ls / >/dev/null")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    info = st["info"]
    assert st["mode"] == "perf" and info["meta"]["mode"] == "perf"
    assert info["processes"] == 3 and info["accesses"] > 100, info
    assert info["summary"]["exit"] == 0 and info["summary"]["rusage"]["minflt"] > 0
    # Every fault the kernel counted is in the trace (rusage counts the same),
    # but those of the wrapper's child before it exec'd the command (a few dozen).
    minflt = info["summary"]["rusage"]["minflt"]
    assert 0 <= minflt - info["accesses"] < 0.1 * minflt + 50, (info["accesses"], minflt)
    assert "recorded with perf" in r.stderr and "TLB hits" in r.stderr
    res = replay(out)
    assert res["summary"]["workload_finished_s"] is not None
    assert res["vmstat"]["foliosim_exec"] == 3 and res["vmstat"]["foliosim_wait_reaped"] == 2


BAD = [
    ("missing", [], ["no-such-program-xyz"], ["not found", "127"]),
    ("status", [], ["sh", "-c", "echo oops >&2; exit 3"], ["status 3", "oops"]),
    ("killed", [], ["sh", "-c", "echo dying >&2; kill -SEGV $$"], ["SIGSEGV", "dying"]),
    ("timeout", ["--timeout", "1"], ["sh", "-c", "echo slow >&2; sleep 30"], ["past the limit of 1 s", "slow"]),
]


@needs_perf
@pytest.mark.parametrize("case,opts,cmd,needles", BAD, ids=[b[0] for b in BAD])
def test_a_command_that_fails_leaves_one_line_and_no_trace(tmp_path, case, opts, cmd, needles):
    out = tmp_path / "t.fstrace"
    r = cli("record", *opts, "-o", str(out), "--", *cmd, timeout=120)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2, r.stderr
    assert last.startswith("foliosim: error: ") and "no trace written" in last, last
    for n in needles:
        assert n in last, (n, last)
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == [], "no partial trace"


def _procs_with(marker: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if marker in (d / "cmdline").read_bytes().decode(errors="replace") and (d / "stat").read_text().split()[2] != "Z":
                    out.append(int(d.name))
            except OSError:
                pass
    return out


@pytest.mark.parametrize("mode", ["perf", "valgrind"])
def test_sigterm_to_a_recording_kills_every_process_of_it(tmp_path, mode):
    """Issue #31: SIGTERM to `foliosim record` left valgrind's child running."""
    if mode == "perf" and PERF_WHY is not None:
        pytest.skip(PERF_WHY)
    if mode == "valgrind" and shutil.which("valgrind") is None:
        pytest.skip("valgrind not installed")
    marker = f"{random.randint(100000, 999999)}.5"
    out = tmp_path / "t.fstrace"
    # sh and two children; one of them in a session of its own (it leaves
    # the process group: only a walk of the tree finds it).
    script = f"sleep {marker} & setsid sleep {marker} & wait"
    p = subprocess.Popen([sys.executable, "-m", "foliosim", "record", "--mode", mode, "-o", str(out), "--", "sh", "-c", script],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while len(_procs_with(marker)) < 4 and time.monotonic() < deadline:  # foliosim, sh, two sleeps
            time.sleep(0.2)
        assert len(_procs_with(marker)) >= 4, "the recorded tree did not start"
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "no trace written" in err, err
    deadline = time.monotonic() + 10
    while _procs_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _procs_with(marker)
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert left == [], "processes of the recording outlived it"
    assert list(tmp_path.iterdir()) == [], "no partial trace"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to run as nobody")
def test_recording_without_perfs_rights_says_which_right(tmp_path):
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="foliosim-nobody-", dir="/tmp"))
    d.chmod(0o777)
    out = d / "t.fstrace"
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                        sys.executable, "-m", "foliosim", "record", "-o", str(out), "--", "true"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HOME": str(d)}, timeout=120)
    shutil.rmtree(d, ignore_errors=True)
    if "Permission denied" in r.stderr and "foliosim" not in r.stderr:
        pytest.skip(f"nobody cannot run this checkout's Python: {r.stderr.strip()[-200:]}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "root" in lines[0] and ("tracepoint" in lines[0] or "CAP_PERFMON" in lines[0]), lines[0]
