"""The public real-kernel results of validation/public/ and `foliosim
validate --public`: the data set's shape and its checks, the comparison
rules, a run of two points, and docs/validation-public.md as the rendering
of its JSON."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import REPO, run_cli
from foliosim import public as P

DATA = REPO / "validation" / "public"


@pytest.fixture(scope="module")
def data():
    return P.load()


def test_the_data_set_has_its_size_and_spread(data):
    machines, points = data
    assert len(points) >= 20
    used = {p.machine for p in points}
    assert len(used) >= 5
    assert len({machines[m].vendor for m in used}) >= 2
    assert len({machines[m].microarchitecture for m in used}) >= 5
    kinds = {p.kind for p in points}
    assert kinds == {"per_task_ops", "change"}
    # every point is cited exactly and has a role
    for p in points:
        assert p.source["message_id"] and p.source["url"].startswith("https://"), p.id
        assert p.role in ("held-out", "fit"), p.id


def _copy(tmp_path):
    root = tmp_path / "public"
    shutil.copytree(DATA, root)
    return root


def _first_report(root):
    return sorted((root / "reports").glob("*.toml"))[0]


@pytest.mark.parametrize("old, new, key", [
    # a figure that is not in its quote is not the source's
    ("value = 2696\n", "value = 2697\n", "points[0].quote"),
    # a machine the data does not describe
    ('machine = "lkp-skl-fpga01"\n', 'machine = "nowhere"\n', "points[0].machine"),
    # more tasks than the machine has threads
    ("tasks = [52]\n", "tasks = [520]\n", "points[0].tasks"),
    # a message named without its id
    ('message_id = "202212151657.5d11a672-yujie.liu@intel.com"\n', "", "message_id"),
])
def test_bad_data_is_one_line_naming_file_and_key(tmp_path, old, new, key):
    root = _copy(tmp_path)
    f = _first_report(root)
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new, 1))
    with pytest.raises(P.PublicError) as e:
        P.load(root)
    assert str(e.value).startswith(str(f)) and key in str(e.value), e.value
    assert "\n" not in str(e.value)


def test_a_machine_is_checked_against_its_printed_description(tmp_path):
    root = _copy(tmp_path)
    m = root / "machines.toml"
    m.write_text(m.read_text().replace("threads = 104\n", "threads = 108\n", 1))
    with pytest.raises(P.PublicError, match=r"lkp-skl-fpga01\.printed"):
        P.load(root)


def test_every_machine_has_a_profile_the_rule_derives(data):
    machines, _ = data
    for m in machines.values():
        path = DATA / "profiles" / f"{m.profile}.toml"
        assert path.is_file(), m.id
        P.check_profile(path, m)


@pytest.mark.parametrize("old, new, key", [
    # not derived: a profile of values chosen by hand
    ('[derive]\nhost = "generic-x86"\n', "", "derive"),
    # a value with no source
    ("l2_kib = 1024            # [public: intel-orm]", "l2_kib = 1024            #", "cpu.l2_kib"),
    # a source the file does not cite
    ("# [public: intel-orm]", "# [public: nowhere]", "cpu.l2_kib"),
    # a figure chosen for this machine only: the rule makes latencies
    ("has_cpus = true          # [public: lkp] socket 0\n",
     "has_cpus = true          # [public: lkp] socket 0\nlatency_ns = 90.0 # [assumed] a guess\n", "nodes[0].latency_ns"),
    # a cost: the rule scales the host's
    ("\n[[nodes]]", "\n[cost]\nfault_base_ns = 100.0  # [assumed] a guess\n\n[[nodes]]", "cost"),
    # another machine's threads
    ("nr_cpus = 104", "nr_cpus = 112", "cpu.nr_cpus"),
])
def test_a_bad_profile_is_one_line_naming_file_and_key(tmp_path, old, new, key):
    root = _copy(tmp_path)
    f = root / "profiles" / "lkp-skl-fpga01.toml"
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new, 1))
    with pytest.raises(P.PublicError) as e:
        P.load(root)
    assert str(e.value).startswith(str(f)) and f": {key}:" in str(e.value), e.value
    assert "\n" not in str(e.value)


def test_profiles_run_only_where_the_engine_derives(data, tmp_path, monkeypatch):
    machines, _ = data
    m = machines["lkp-skl-fpga01"]
    monkeypatch.setattr(P, "engine_derives", lambda: True)
    path, kind = P.profile_for(m, tmp_path)
    assert kind == "rule" and path.endswith("validation/public/profiles/lkp-skl-fpga01.toml")
    assert P._shown_path(path) == "validation/public/profiles/lkp-skl-fpga01.toml"
    monkeypatch.setattr(P, "engine_derives", lambda: False)
    path, kind = P.profile_for(m, tmp_path)
    assert kind == "stand-in" and path.startswith(str(tmp_path))


def test_a_change_is_judged_by_its_target_and_its_sign(data):
    machines, points = data
    p = next(x for x in points if x.id == "skl-mmap1-t52-change")
    assert p.value == -21.1 and p.stddev_pct == [0.0, 3.0]
    # LKP's +-3% of the head figure, carried to the change
    assert p.noise_points() == pytest.approx(3.0 * (1 - 0.211))

    def judge(pred_base, pred_head):
        runs = {"base": [P.Run("b", {}, 1)], "head": [P.Run("h", {}, 1)]}
        res = {"b": {"summary": {"ops_per_s": pred_base}, "config": {"workload": {}}, "time_ns": {}, "locks": {}},
               "h": {"summary": {"ops_per_s": pred_head}, "config": {"workload": {}}, "time_ns": {}, "locks": {}}}
        win = {"b": {"ok": True}, "h": {"ok": True}}
        return P._row(p, machines[p.machine], "rule", runs, res, win)

    # 15% of 21.1 points is 3.2 points: -18.5% is within, -17% is not
    assert judge(100.0, 81.5)["ok"] and not judge(100.0, 83.0)["ok"]
    # the other sign never meets the target, however close
    row = judge(100.0, 101.0)
    assert row["opposite"] and not row["ok"] and "other sign" in row["note"]


def test_two_points_run_through_the_model(tmp_path):
    proc = run_cli("validate", "--public", "--points", "skl-pf3-p16-change,skl-pf3-p16-base", "--jobs", "1",
                   "--quick", "--quiet", "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((tmp_path / "public.json").read_text())
    rows = {r["id"]: r for r in rep["points"]}
    assert set(rows) == {"skl-pf3-p16-change", "skl-pf3-p16-base"}
    base = rows["skl-pf3-p16-base"]
    assert base["predicted"] > 0 and base["error"] == pytest.approx(base["predicted"] / base["published"] - 1)
    assert base["ok"] == (abs(base["error"]) <= P.TARGET_ABSOLUTE)
    ch = rows["skl-pf3-p16-change"]
    # the change comes from the same base runs as the absolute point
    assert ch["per_task"]["base"] == pytest.approx(base["predicted"])
    assert ch["error"] == pytest.approx(ch["predicted"] - ch["published"])
    md = (tmp_path / "public.md").read_text()
    assert md.count("| [`skl-pf3-p16-") == 2 and "## The data" in md
    for r in rows.values():
        assert r["ok"] or r["note"], r  # a missed point says why


def test_validation_public_md_is_the_rendering_of_its_json(data):
    doc = REPO / "docs" / "validation-public.json"
    if not doc.exists():
        pytest.skip("docs/validation-public.json not generated yet (make validation-public)")
    rep = json.loads(doc.read_text())
    assert (REPO / "docs" / "validation-public.md").read_text() == P.render_markdown(rep), \
        "stale: run `python -m foliosim.public --render` (or make validation-public)"
    _, points = data
    assert sorted(r["id"] for r in rep["points"]) == sorted(p.id for p in points), \
        "validation/public/ changed since docs/validation-public.json was made: run make validation-public"
