"""`foliosim bench --paired REF` (python/foliosim/paired.py): the schedule,
the pairing and the ratios, checked with stand-in runners whose rates are
known, so nothing here depends on the host's speed."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

import pytest

from conftest import one_line_error, run_cli
from foliosim import paired as P


def test_schedule_alternates_the_order_and_runs_each_side_once_per_pair():
    s = P.schedule(4, ["a", "b"])
    assert [(i, w) for i, w, _ in s] == [(0, "a"), (0, "b"), (1, "a"), (1, "b"), (2, "a"), (2, "b"), (3, "a"), (3, "b")]
    assert [o for _, _, o in s] == [(P.REF, P.CAND)] * 2 + [(P.CAND, P.REF)] * 2 + [(P.REF, P.CAND)] * 2 + [(P.CAND, P.REF)] * 2


def fake_runners(rate_of):
    """Runners whose k-th call (over both sides) gives rate_of(side, k),
    recording the calls in order."""
    calls: list[tuple[str, str]] = []

    def runner(side):
        def run(w):
            k = len(calls)
            calls.append((side, w))
            return P.Run(events=1_000_000, host_s=1_000_000 / rate_of(side, k))
        return run

    return {P.REF: runner(P.REF), P.CAND: runner(P.CAND)}, calls


def test_each_ratio_divides_the_candidate_by_the_ref_of_the_same_pair():
    # The box slows down over time (the load drifts: each call is 10% slower
    # than the one before) and the candidate is 1.5x as fast. The ratio of
    # the two runs of a pair must see the speed-up, not the drift between pairs.
    def rate(side, k):
        return (1.5 if side == P.CAND else 1.0) * 1e6 * 0.9**k

    runners, calls = fake_runners(rate)
    runs = P.run_pairs(runners, 4, ["pf1_1task"])
    assert calls == [(P.REF, "pf1_1task"), (P.CAND, "pf1_1task"), (P.CAND, "pf1_1task"), (P.REF, "pf1_1task")] * 2
    s = P.summarize(runs)["pf1_1task"]
    # Ref first: the candidate ran one call later (x0.9); candidate first: x1/0.9.
    expect = [1.5 * 0.9, 1.5 / 0.9, 1.5 * 0.9, 1.5 / 0.9]
    assert s["ratios"] == pytest.approx(expect, rel=1e-12)
    assert s["ratio"]["median"] == pytest.approx(statistics.median(expect), rel=1e-12)
    assert s["ratio"]["min"] == pytest.approx(1.35) and s["ratio"]["max"] == pytest.approx(1.5 / 0.9)
    assert s["pairs"] == 4
    # Each side's own rates are those it was given, in pair order.
    assert s[P.REF]["rates"] == pytest.approx([rate(P.REF, k) for k in (0, 3, 4, 7)])
    assert s[P.CAND]["rates"] == pytest.approx([rate(P.CAND, k) for k in (1, 2, 5, 6)])


def test_workloads_are_paired_separately():
    # Two workloads with different speed-ups: their ratios must not mix.
    def rate(side, k):
        w = calls[k][1]
        return {("a", P.REF): 1.0, ("a", P.CAND): 2.0, ("b", P.REF): 4.0, ("b", P.CAND): 1.0}[(w, side)]

    runners, calls = fake_runners(rate)
    s = P.summarize(P.run_pairs(runners, 3, ["a", "b"]))
    assert s["a"]["ratios"] == [2.0, 2.0, 2.0]
    assert s["b"]["ratios"] == [0.25, 0.25, 0.25]


@pytest.mark.parametrize("xs", [[1.0, 2.0, 3.0, 4.0, 5.0], [3.0, 1.0, 2.0, 10.0], [7.0, 7.5], [0.9, 1.1, 1.0, 1.3, 0.7, 1.05]])
def test_quartiles_are_the_inclusive_ones(xs):
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    s = P.spread(xs)
    assert (s["q1"], s["median"], s["q3"]) == pytest.approx((q1, q2, q3))
    assert (s["min"], s["max"]) == (min(xs), max(xs))


def test_one_value_is_its_own_spread():
    assert P.spread([1.25]) == {"median": 1.25, "q1": 1.25, "q3": 1.25, "min": 1.25, "max": 1.25}


def test_driver_output_is_parsed_or_refused():
    r = P.parse_driver_output("1234567 0.5\n")
    assert (r.events, r.host_s, r.rate) == (1234567, 0.5, 2469134.0)
    for bad in ["", "12", "12 abc", "12 0", "12 0.5 7", "thread 'main' panicked"]:
        with pytest.raises(P.PairedError, match="not 'EVENTS HOST_S'"):
            P.parse_driver_output(bad)


def test_no_pairs_is_an_error():
    with pytest.raises(P.PairedError, match="at least 1"):
        P.run_pairs({}, 0, ["pf1_1task"])


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_the_ref_is_built_from_its_commit_not_the_working_tree(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "f.txt").write_text("committed\n")
    git(repo, "add", "f.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    sha = P.resolve(repo, "HEAD")
    assert sha == git(repo, "rev-parse", "HEAD")
    (repo / "f.txt").write_text("changed\n")
    (repo / "untracked.txt").write_text("x\n")
    src = tmp_path / "out" / "src"
    P.extract_ref(repo, sha, src)
    assert (src / "f.txt").read_text() == "committed\n"
    assert not (src / "untracked.txt").exists()
    with pytest.raises(P.PairedError, match="no-such-ref: no such commit"):
        P.resolve(repo, "no-such-ref")


def test_cli_bad_ref_is_one_line(tmp_path):
    root = Path(__file__).resolve().parents[2]
    one_line_error(run_cli("bench", "--paired", "no-such-ref-xyz", "--quiet", cwd=root), "no-such-ref-xyz", "no such commit")
    one_line_error(run_cli("bench", "--paired", "HEAD", "--workloads", "pf1_bogus", "--quiet", cwd=root), "pf1_bogus", "unknown")
    one_line_error(run_cli("bench", "--paired", "HEAD", "--pairs", "0", "--quiet", cwd=root), "--pairs 0")


def test_the_driver_reads_a_pre_accessor_refs_counters_as_a_field():
    driver = (Path(__file__).resolve().parents[2] / P.DRIVER_SRC).read_text()
    assert "out.kernel.stat()" in driver
    old = P.driver_for_ref(driver, "pub struct Kernel {\n    pub stat: VmStat,\n")
    assert "&out.kernel.stat;" in old and "stat()" not in old
    assert P.driver_for_ref(driver, "pub struct Kernel {\n    pub(crate) stat: VmStat,\n") == driver
