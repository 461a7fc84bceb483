"""The recorded real programs the experiments replay (foliosim.programs):
`@NAME` in an experiment resolves to a committed trace, to the cached
recording `make traces` makes, or (small mode, CI) to its committed
excerpt; a recording that is not here is a one-line error naming the make
target; the programs build from a source folder or a git repository."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from foliosim import _core
from foliosim import programs as P
from foliosim import reproduce as R
from foliosim.reproduce import docs as D
from foliosim.reproduce.spec import ExperimentError

# The experiments that replay a recording instead of a stand-in.
USERS = ("mthp-kernel-build", "mthp-memory", "mthp-patches", "spf-kernbench", "spf-ebizzy")


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FOLIOSIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(P.ENV_MODE, raising=False)
    return tmp_path / "cache"


def test_every_committed_trace_is_a_real_recording():
    for t in P.TRACES.values():
        info = json.loads(_core.trace_info(str(t.committed())))
        argv = info["meta"]["argv"]
        assert info["meta"]["mode"] == "perf", t.name
        assert info["summary"]["exit"] == 0, t.name
        assert info["accesses"] > 1000, t.name
        want = "ebizzy" if t.name.startswith("ebizzy") else "make"
        assert want in argv[0], (t.name, argv)
        if t.name.startswith("ebizzy-t"):
            assert argv[1:3] == ["-mTt", t.name.removeprefix("ebizzy-t")], argv
            assert info["threads"] == int(t.name.removeprefix("ebizzy-t")), info["threads"]
        else:
            assert info["processes"] > 3, info["processes"]


def test_a_missing_recording_names_the_make_target(empty_cache):
    with pytest.raises(P.TraceMissing, match=r"make traces TRACES=linux-tinyconfig"):
        P.resolve("@linux-tinyconfig")
    with pytest.raises(P.TraceMissing, match=r"no such recorded program"):
        P.resolve("@nope")
    # An experiment that names it says where, in one line.
    with pytest.raises(ExperimentError, match=r"workload\.path.*make traces TRACES=linux-tinyconfig") as e:
        R.load_all(["mthp-kernel-build"])
    assert "\n" not in str(e.value)


def test_small_mode_replays_the_committed_excerpt(empty_cache, monkeypatch):
    assert P.resolve("@linux-tinyconfig", small=True).name == "linux-tinyconfig.small.fstrace"
    # Committed whole: the same file either way.
    assert P.resolve("@ebizzy-t24") == P.resolve("@ebizzy-t24", small=True)
    monkeypatch.setenv(P.ENV_MODE, "small")
    (exp,) = R.load_all(["mthp-kernel-build"])
    assert exp.traces == {"linux-tinyconfig": (str(P.TRACES["linux-tinyconfig"].committed()), True)}


def test_an_experiment_may_ask_for_the_excerpt_in_a_guest_mix(empty_cache):
    # `@NAME.small`: the committed excerpt whatever the mode, also in a
    # [[guest]] entry's workload (the cloud study replays a piece of the build).
    assert P.resolve("@linux-tinyconfig.small").name == "linux-tinyconfig.small.fstrace"
    assert P.identity("@linux-tinyconfig.small") == P.identity("@linux-tinyconfig")
    (exp,) = R.load_all(["cloud-mechanisms"])
    paths = {g["workload"].get("path") for r in exp.runs.values() for g in r.config["guest"]}
    assert paths == {None, str(P.TRACES["linux-tinyconfig"].committed())}
    assert exp.traces == {"linux-tinyconfig.small": (str(P.TRACES["linux-tinyconfig"].committed()), True)}
    with pytest.raises(P.TraceMissing, match=r"no such recorded program"):
        P.resolve("@nope.small")
    from foliosim.reproduce.runner import _trace_note
    note = _trace_note(exp.traces)
    assert note.startswith("Committed excerpts replayed as the experiment asks") and "@linux-tinyconfig.small" in note


def test_a_recording_in_the_cache_is_found_by_its_inputs_hash(empty_cache):
    t = P.TRACES["linux-tinyconfig"]
    p = t.cached()
    assert t.key() in p.name
    p.parent.mkdir(parents=True)
    shutil.copy(t.committed(), p)
    assert P.resolve("@linux-tinyconfig") == p
    # Another recipe is another file: the old recording is not taken for it.
    t.recipe["jobs"] = 99
    try:
        assert t.cached() != p
        with pytest.raises(P.TraceMissing):
            P.resolve("@linux-tinyconfig")
    finally:
        t.recipe["jobs"] = P.KBUILD_JOBS


def test_the_inputs_hash_follows_the_recordings(monkeypatch):
    f = R.find()["spf-ebizzy"]
    before = D.inputs_hash(f)
    monkeypatch.setattr(P, "identity", lambda ref: "another recording")
    assert D.inputs_hash(f) != before
    assert D._traces('path = "@ebizzy-t{threads}"') == ["ebizzy-t1", "ebizzy-t12", "ebizzy-t24", "ebizzy-t4", "ebizzy-t48"]


@pytest.mark.parametrize("name", USERS)
def test_the_experiments_replay_recordings(name, monkeypatch):
    monkeypatch.setenv(P.ENV_MODE, "small")
    (exp,) = R.load_all([name])
    assert exp.traces, name
    workloads = {r.name: json.loads(r.cfg_json)["workload"]["name"] for r in exp.runs.values()}
    assert "trace" in workloads.values(), workloads
    # No stand-in for the program is left beside the recording.
    assert not {"kbuild", "ebizzy", "page_fault1"} & set(workloads.values()), workloads


def test_a_kernel_build_experiment_runs_on_the_excerpt(monkeypatch):
    monkeypatch.setenv(P.ENV_MODE, "small")
    (rep,) = R.run_experiments(R.load_all(["mthp-patches"]))
    assert not rep["interrupted"]
    assert all(isinstance(r["simulated"], float) for r in rep["rows"]), rep["rows"]
    assert any("committed excerpts" in n and "@linux-tinyconfig" in n for n in rep["notes"]), rep["notes"]
    assert all(w["ok"] for w in rep["windows"]), rep["windows"]


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("git") is None, reason="needs gcc and git")
def test_a_program_builds_from_a_git_repository(tmp_path, monkeypatch):
    repo = tmp_path / "ltp"
    src = repo / "utils" / "benchmark" / "ebizzy-0.3"
    src.mkdir(parents=True)
    (src / "ebizzy.c").write_text('#include <stdio.h>\nint main(void) { puts("42 records/s"); return 0; }\n')
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    monkeypatch.setenv("FOLIOSIM_CACHE", str(tmp_path / "cache"))
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    for where in (bare, repo, src):
        monkeypatch.setenv("EBIZZY_SRC", str(where))
        exe = P.PROGRAMS["ebizzy"].make()
        assert subprocess.run([str(exe)], capture_output=True, text=True).stdout == "42 records/s\n"
    monkeypatch.setenv("EBIZZY_SRC", str(tmp_path))
    with pytest.raises(P.HostError, match=r"EBIZZY_SRC=.*neither ebizzy\.c"):
        P.PROGRAMS["ebizzy"].make()
    monkeypatch.delenv("EBIZZY_SRC")
    with pytest.raises(P.HostError, match=r"set EBIZZY_SRC"):
        P.PROGRAMS["ebizzy"].make()
