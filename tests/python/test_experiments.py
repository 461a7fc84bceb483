"""Experiments as data (`experiments/*/*.toml`, `foliosim.reproduce`): the
rule language, the note rule, the file format's checks, and a small
experiment run end to end through the ordinary run path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from foliosim import reproduce as R
from foliosim.reproduce.expr import ExprError, Template, TemplateError, check_note_text, evaluate

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data" / "experiments"
TINY = DATA / "demo" / "pf1-tasks.toml"


# ------------------------------------------------------------ rule language --
def test_rules_read_results_and_compute():
    env = {"a": {"summary": {"ops_per_s": 100.0}}, "b": {"summary": {"ops_per_s": 150.0}},
           "xs": [{"ops": 1, "kthread": False}, {"ops": 5, "kthread": True}, {"ops": 2, "kthread": False}]}
    assert evaluate("b.summary.ops_per_s / a.summary.ops_per_s - 1", env) == pytest.approx(0.5)
    assert evaluate("sum([x.ops for x in xs if not x.kthread])", env) == 3
    assert evaluate("{k: v * 2 for k, v in zip(['p', 'q'], [1, 2])}", env) == {"p": 2, "q": 4}
    assert evaluate("median([4, 1, 3, 2])", env) == 2.5
    assert evaluate("a['summary']['ops_per_s'] if 1 < 2 <= 2 else 0", env) == 100.0
    assert evaluate("f'{len(xs)} tasks'", env) == "3 tasks"
    assert evaluate("first([x for x in [1, 2, 3] if x > 5], None)", env) is None
    assert evaluate("spans([0, 1, 1, 0, 1, 0, 1], 0.5)", env) == [1.0, 0.5], "a run still going at the end is left out"


def test_sum_is_a_plain_left_fold():
    # Python 3.12's sum() of floats is compensated; the rules must give
    # what a sequential sum (the Rust experiments') gave.
    xs = [1e16, 1.0, -1e16, 1.0]
    acc = 0.0
    for x in xs:
        acc += x
    assert evaluate("sum(xs, 0.0)", {"xs": xs}) == acc


@pytest.mark.parametrize("bad", [
    "__import__('os')", "x.__class__", "x._private", "lambda: 1", "open('/etc/passwd')", "(1).real",
    "[].append(1)", "x.keys()", "2 ** 10 ** 10", "'a' * 10 ** 9", "{**x}", "(y := 1)", "x if",
])
def test_rules_refuse_what_is_not_the_language(bad):
    with pytest.raises(ExprError):
        evaluate(bad, {"x": {"a": 1}})


def test_rule_errors_name_the_missing_key():
    with pytest.raises(ExprError, match="no key 'nope'"):
        evaluate("r.vmstat.nope", {"r": {"vmstat": {"pgfault": 1}}})
    with pytest.raises(ExprError, match="unknown name"):
        evaluate("missing + 1", {})
    with pytest.raises(ExprError, match="division by zero"):
        evaluate("1 / x", {"x": 0})


def test_templates_format_from_values():
    t = Template("SPF loses {pct:+.1f}% here against {pub:.1f}% published, {{braces}} kept")
    assert t.render({"pct": -28.04, "pub": -12.0}) == "SPF loses -28.0% here against -12.0% published, {braces} kept"
    assert Template("{n} ops, {x}").render({"n": 1234567, "x": 0.01234}) == "1,234,567 ops, 0.0123"
    assert Template("{'a:b' if ok else 'c'}").render({"ok": True}) == "a:b"
    for bad in ["{unclosed", "single } brace", "{x.__class__}"]:
        with pytest.raises(TemplateError):
            Template(bad)


# --------------------------------------------------------------- note rule --
@pytest.mark.parametrize("text", [
    "page_fault2 and page_fault3 on x86 with -j160, v12 and E5-2630v3, order-4 folios",
    "4 KiB pages and 2 MiB THPs, 64KiB folios",
    "the knob `mmap_lock.rwsem_semantics = \"5.1\"` and commit 7e12beb8ca2a",
    "SPF loses {row.pf2.simulated:+.1f}% against {pub.lkp:.1f}%",
])
def test_notes_may_name_things(text):
    assert check_note_text(text) == []


@pytest.mark.parametrize("text, figure", [
    ("the model gives -1% to +1%", "-1%"),
    ("-0.5% / 0.0% agree in size", "-0.5%"),
    ("ops are ~3.3x the seed's", "3.3x"),
    ("2.18x at 8 KiB", "2.18x"),
    ("0.05% against 0.007%", "0.05%"),
    ("settles in 30 s", "30"),
    ("Linux 6.4 added them", "6.4"),
    ("order 4 folios", "4"),
])
def test_notes_may_not_type_figures(text, figure):
    assert any(figure in b for b in check_note_text(text)), check_note_text(text)


# ------------------------------------------------------------- file format --
def _write(tmp: Path, text: str) -> Path:
    d = tmp / "mech"
    d.mkdir(parents=True, exist_ok=True)
    p = d / "x.toml"
    p.write_text(text)
    return p


BASE = """title = "t"
[config]
workload.name = "page_fault1"
workload.size_mib = 1
run.warmup_s = 0.0
run.duration_s = 0.001
[runs.a]
label = "a"
"""


@pytest.mark.parametrize("extra, where", [
    ("bogus = 1\n", "bogus: unknown key"),
    ('[[rows]]\nlabel = "x"\nmetric = "m"\nsimulated = "a.summary.ops_per_s"\nwat = 1\n', "rows[0].wat: unknown key"),
    ('[[rows]]\nlabel = "x"\nmetric = "m"\n', "rows[0].simulated: missing"),
    ('[[rows]]\nlabel = "x"\nmetric = "m"\nsimulated = "a.__dict__"\n', "rows[0].simulated"),
    ('[published.p]\nvalue = 1.0\nsource = "nowhere"\nwhere = "w"\nquote = "1.0"\n', "published.p.source"),
    ('[sources.s]\ntitle = "a thread"\n', "sources.s"),
])
def test_bad_files_name_file_and_key(tmp_path, extra, where):
    text = BASE if extra.startswith("[") else extra + BASE
    if extra.startswith("["):
        text = BASE + extra
    p = _write(tmp_path, text)
    with pytest.raises(R.ExperimentError) as e:
        R.load(p)
    assert str(e.value).startswith(str(p)), e.value
    assert where in str(e.value), e.value


def test_a_bad_config_key_is_reported_before_anything_runs(tmp_path):
    p = _write(tmp_path, BASE + 'workload.tasks = 0\n[[rows]]\nlabel = "x"\nmetric = "m"\nsimulated = "1"\n')
    with pytest.raises(R.ExperimentError) as e:
        R.load(p)
    msg = str(e.value)
    assert "runs.a" in msg and "workload" in msg, msg


@pytest.mark.parametrize("lets, where", [
    ('x = "y + 1"\ny = "2"\n', "let.x: unknown name 'y' (a let defined below it"),
    ('x = "f\'{nowhere:.1f}\'"\n', "let.x: unknown name 'nowhere'"),
])
def test_a_let_reading_an_unknown_name_is_refused_before_anything_runs(tmp_path, lets, where):
    p = _write(tmp_path, BASE + "[let]\n" + lets + '[[rows]]\nlabel = "x"\nmetric = "m"\nsimulated = "1"\n')
    with pytest.raises(R.ExperimentError) as e:
        R.load(p)
    assert where in str(e.value), e.value
    # Comprehension targets, runs, earlier lets and functions are known.
    ok = 'y = "2"\nx = "sum([r.summary.ops_per_s * y for r in runs]) + max(a.summary.ops_per_s, 1)"\n'
    R.load(_write(tmp_path, BASE + "[let]\n" + ok + '[[rows]]\nlabel = "x"\nmetric = "m"\nsimulated = "x"\n'))


def test_a_published_value_needs_its_figure(tmp_path):
    p = _write(tmp_path, BASE + '[[rows]]\nlabel = "x"\nmetric = "m"\npublished = "42.0"\nsimulated = "1"\n')
    exp = R.load(p)
    with pytest.raises(R.ExperimentError, match="published figure comes from"):
        R.evaluate_experiment(exp, {exp.runs["a"].id: {"summary": {}}})


PUB = '[sources.s]\ntitle = "a thread"\nurl = "https://example.org/t"\n'


@pytest.mark.parametrize("value, quote, ok", [
    ("-33.3", '"| sys-time  |          510.7 |          340.9 |         -33.3% |"', True),
    ("8827457.25", '"16    8827457.25  0.09%"', True),
    ("11846569", '"11,846,569      faults"', True),
    ("683.0", '"| data abort           |     683B |"', True),
    ("[316.0, 76.0]", '["| data abort | 683B | 316B |", "| instruction abort | 93B | 76B |"]', True),
    # arithmetic is not a printed figure: a sum, a ratio, a conversion
    ("776.0", '"| data abort | 683B |  | instruction abort | 93B |"', False),
    ("1.708", '"24 CPUs x86	5492.69		9383.07		70.83%"', False),
    ("1024", '"too small DRAM(1GB)"', False),
    # the sign is the source's: "8.1% improvement" is not -8.1
    ("-8.1", '"Above shows 8.1% improvement in real time execution"', False),
    # a hyphen joining a name or a range is no minus sign
    ("7.0", '"5-7 seconds"', True),
    # a list's numbers in the quote's order
    ("[76.0, 316.0]", '["| data abort | 683B | 316B |", "| instruction abort | 93B | 76B |"]', False),
])
def test_a_published_figure_is_one_its_source_prints(tmp_path, value, quote, ok):
    text = BASE + PUB + f'[published.p]\nvalue = {value}\nsource = "s"\nwhere = "w"\nquote = {quote}\n' + \
        '[[rows]]\nlabel = "x"\nmetric = "m"\npublished = "pub.p"\nsimulated = "1"\n'
    p = _write(tmp_path, text)
    if ok:
        R.load(p)
    else:
        with pytest.raises(R.ExperimentError, match=r"published\.p\.quote"):
            R.load(p)


def test_a_published_figure_without_its_quote_is_refused(tmp_path):
    p = _write(tmp_path, BASE + PUB + '[published.p]\nvalue = 4.0\nsource = "s"\nwhere = "w"\n'
               '[[rows]]\nlabel = "x"\nmetric = "m"\npublished = "pub.p"\nsimulated = "1"\n')
    with pytest.raises(R.ExperimentError, match=r"published\.p\.quote: missing"):
        R.load(p)


NOISY = BASE + PUB + """[published.p]
value = -1.70
source = "s"
where = "w"
quote = "-1.70%"
[published.sd]
value = 1.31
source = "s"
where = "w"
quote = "stdev 1.31%"
"""


def test_a_note_reads_the_loaded_profile_and_its_host(tmp_path):
    # cxl-1tb is derived: its node 0 read bandwidth is the rule's, not a
    # number of its file, and the host's is generic-x86's with its source.
    from foliosim import _core

    def values(name):
        return {v["path"]: (v["value"], v["kind"]) for v in json.loads(_core.profile_explain_json(name))["values"]}

    derived, host = values("cxl-1tb"), values("generic-x86")
    key = "nodes[0].read_bw_gbps"
    exp = R.load(_write(tmp_path, BASE.replace("[config]", '[config]\nmachine.profile = "cxl-1tb"')
                        + '[[rows]]\nlabel = "x"\nmetric = "m"\nsimulated = "1"\n[[notes]]\n'
                        + f"text = \"{{profile.value['{key}']:.6f}} {{profile.source['{key}']}} "
                        + f"{{profile.host.value['{key}']:.6f}} {{profile.host.source['{key}']}} {{profile.host_name}}\"\n"))
    (note,) = R.evaluate_experiment(exp, {exp.runs["a"].id: {"summary": {}}})["notes"]
    assert derived[key][1] == "derived" and derived[key][0] != host[key][0]
    assert note == f"{derived[key][0]:.6f} derived {host[key][0]:.6f} {host[key][1]} generic-x86"


def test_a_row_noise_band_is_read_from_the_source(tmp_path):
    exp = R.load(_write(tmp_path, NOISY + '[[rows]]\nlabel = "x"\nmetric = "m"\nunit = "%"\npublished = "pub.p"\n'
                        'noise = "pub.sd"\nsimulated = "1.41"\n'))
    (row,) = R.evaluate_experiment(exp, {exp.runs["a"].id: {"summary": {}}})["rows"]
    assert row["noise"] == 1.31 and [s["figure"] for s in row["sources"]] == ["p", "sd"]
    # a band typed into the file is not one the source states
    exp = R.load(_write(tmp_path, NOISY + '[[rows]]\nlabel = "x"\nmetric = "m"\npublished = "pub.p"\nnoise = "5.0"\nsimulated = "1"\n'))
    with pytest.raises(R.ExperimentError, match="noise band is one the source states"):
        R.evaluate_experiment(exp, {exp.runs["a"].id: {"summary": {}}})
    # a row without a published figure has no band to state
    with pytest.raises(R.ExperimentError, match=r"rows\[0\]\.noise"):
        R.load(_write(tmp_path, NOISY + '[[rows]]\nlabel = "x"\nmetric = "m"\nnoise = "pub.sd"\nsimulated = "1"\n'))
    # without `noise` a row has none
    exp = R.load(_write(tmp_path, NOISY + '[[rows]]\nlabel = "x"\nmetric = "m"\npublished = "pub.p"\nsimulated = "1"\n'))
    (row,) = R.evaluate_experiment(exp, {exp.runs["a"].id: {"summary": {}}})["rows"]
    assert "noise" not in row


def test_every_shipped_experiment_loads():
    files = R.find()
    assert len(files) >= 20, files
    mechanisms = {p.stem for p in (REPO / "docs" / "mechanisms").glob("*.md")}
    for name, path in files.items():
        exp = R.load(path)
        assert exp.mechanism in mechanisms, f"{path}: folder must name a docs/mechanisms page"
        assert exp.rows and exp.runs, name
        for f in exp.published.values():
            assert f["source"] in exp.sources
            # a figure's source is named exactly: its message, or its page
            src = exp.sources[f["source"]]
            assert src.get("message_id") or src.get("url") or src.get("commit"), (name, f["source"])


# ----------------------------------------------------------------- running --
def test_tiny_experiment_runs_through_the_ordinary_run_path():
    (exp,) = [R.load(TINY)]
    reps = list(R.run_experiments([exp], jobs=1))
    assert len(reps) == 1
    rep = reps[0]
    assert rep["name"] == "pf1-tasks" and rep["mechanism"] == "demo" and not rep["interrupted"]
    rows = {(r["label"], r["metric"]): r for r in rep["rows"]}
    one = rows[("1 task", "page_fault1 ops/s")]["simulated"]
    two = rows[("2 tasks", "page_fault1 ops/s")]["simulated"]
    head = rows[("2 tasks", "ops/s, 2 tasks / 1 task")]
    assert head["simulated"] == two / one and head["headline"]
    assert head["published"] == head["seed"] == 2.0, "the deprecated 'seed' key mirrors 'published'"
    assert head["sources"] == [{"figure": "two_over_one", "source": "example", "where": "what perfect scaling would give",
                                "quote": "twice the ops/s with 2 processes"}]
    assert head["note"] == f"{two / one:.2f}x where perfect scaling gives 2x"
    # The same simulated figures as `foliosim run` of the configs gives.
    import foliosim

    cfg = next(c["config"] for c in rep["configs"] if c["label"] == "1 task")
    assert foliosim.run(cfg).summary["ops_per_s"] == one
    assert rep["profile"]["name"] == "generic-x86" and "[cpu]" in (rep["profile"]["toml"] or "")


def test_a_window_that_cuts_the_workload_short_is_said(tmp_path):
    # The tutorial's experiment with a window too short for a whole
    # iteration (a 4 MiB region faulted in and unmapped) before it opens:
    # every row that reads those runs says so, the windows list says why.
    text = TINY.read_text().replace("run.warmup_s = 0.005", "run.warmup_s = 0.0001")
    assert text != TINY.read_text()
    (tmp_path / "demo").mkdir()
    short = tmp_path / "demo" / "pf1-tasks.toml"
    short.write_text(text)
    (rep,) = list(R.run_experiments([R.load(short)], jobs=1))
    assert [w["ok"] for w in rep["windows"]] == [False, False], rep["windows"]
    assert all("whole iteration when the measured window opened" in w["reason"] for w in rep["windows"])
    for r in rep["rows"]:
        assert r["note"].startswith("Window too short ("), r
        assert "1 task" in r["window"] or "2 tasks" in r["window"]
    head = next(r for r in rep["rows"] if r.get("headline"))
    assert "1 task:" in head["window"] and "2 tasks:" in head["window"], "the ratio reads both runs"
    # The shipped window holds: no row says so.
    (ok,) = list(R.run_experiments([R.load(TINY)], jobs=1))
    assert all(w["ok"] for w in ok["windows"]) and not any("window" in r for r in ok["rows"])
    assert all(w["iterations_before_min"] >= 1 and w["iterations_measured_min"] >= 1 for w in ok["windows"])


def test_window_kinds_read_the_result():
    from foliosim.reproduce.runner import window

    def run(tasks, warmup=0.001):
        return {"config": {"run": {"warmup_s": warmup}}, "per_task": tasks}

    t = {"kthread": False, "exited": False, "clock_ns": 5_000_000, "ops_measured": 10}
    assert window(run([{**t, "iterations": 3, "iterations_measured": 1}]), "steady")["ok"]
    assert not window(run([{**t, "iterations": 1, "iterations_measured": 1}]), "steady")["ok"], "none before the window"
    assert not window(run([{**t, "iterations": 2, "iterations_measured": 0}]), "steady")["ok"], "none inside it"
    assert not window(run([{**t, "iterations": None, "iterations_measured": None}]), "steady")["ok"], "nothing counted"
    assert not window(run([{**t, "iterations": 5, "iterations_measured": 5}]), "finished")["ok"], "still running"
    assert window(run([{**t, "exited": True, "iterations": 5, "iterations_measured": 5}]), "finished")["ok"]
    assert not window(run([{**t, "iterations": 0, "iterations_measured": 0}]), "iterated")["ok"]
    assert window(run([{**t, "iterations": 1, "iterations_measured": 1}]), "iterated")["ok"]
    # A task that ended before the window opened (memhog_then's memhog) is not in it.
    gone = {**t, "exited": True, "clock_ns": 500_000, "iterations": 1, "iterations_measured": 0}
    assert window(run([gone, {**t, "iterations": 3, "iterations_measured": 1}]), "steady")["ok"]
    # Every task done before the window: nothing in it, and it says so.
    assert window(run([gone]), "steady")["reason"] == "every task had finished before the measured window opened"


def test_output_does_not_depend_on_the_number_of_processes():
    exp = R.load(TINY)
    a = list(R.run_experiments([exp], jobs=1))
    b = list(R.run_experiments([exp], jobs=2))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_cli_runs_an_experiment_from_a_user_folder(tmp_path):
    root = tmp_path / "exps"
    shutil.copytree(DATA, root)
    env = dict(os.environ, FOLIOSIM_EXPERIMENTS=str(root))
    proc = subprocess.run([sys.executable, "-m", "foliosim", "reproduce", "pf1-tasks", "--json", "--quiet",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["name"] == "pf1-tasks" and len(rep["rows"]) == 3
    assert (tmp_path / "out" / "pf1-tasks.json").is_file()
    listing = subprocess.run([sys.executable, "-m", "foliosim", "list"], capture_output=True, text=True, env=env,
                             stdin=subprocess.DEVNULL)
    assert "pf1-tasks: page_fault1: two processes against one" in listing.stdout


def test_the_tutorial_shows_the_tested_experiment():
    text = (REPO / "docs" / "tutorial.md").read_text()
    assert "```toml\n" + TINY.read_text() + "```" in text, "docs/tutorial.md must show tests/python/data/experiments/demo/pf1-tasks.toml as it is"


def test_no_note_of_a_shipped_experiment_types_a_figure():
    bad = {}
    for name, path in R.find().items():
        exp = R.load(path)
        lets = dict(exp.lets)
        for where, t in exp.templates():
            figures = check_note_text(t, lets)
            if figures:
                bad[f"{name} {where}"] = figures
    assert not bad, bad


def test_experiments_cite_public_sources_not_working_notes():
    # Titles, labels, notes and sources name what a reader can find (a
    # thread, a commit, a mechanism page), never a document outside the
    # repository.
    for path in R.find().values():
        text = path.read_text()
        for needle in ("spec/", "§", "seeds/"):
            assert needle not in text, f"{path}: {needle!r}"


# ------------------------------------------------------------- sensitivity --
def test_sensitivity_reruns_the_published_rows_with_each_cost_scaled(tmp_path):
    # The tutorial's experiment with one uncertain cost: the published row
    # (which reads both runs) comes back at half and double that cost, each
    # value the row's rule applied to runs made with the cost overridden,
    # and docs/reproductions.md shows them beside the row.
    import foliosim
    from foliosim.reproduce.docs import render

    text = TINY.read_text() + '\n[sensitivity]\ncosts = ["fault_base_ns"]\n'
    (tmp_path / "demo").mkdir()
    p = tmp_path / "demo" / "pf1-tasks.toml"
    p.write_text(text)
    (rep,) = list(R.run_experiments([R.load(p)], jobs=1))
    base = foliosim.run(next(c["config"] for c in rep["configs"] if c["label"] == "1 task"))
    assert rep["sensitivity"] == {"costs": {"fault_base_ns": 300.0}, "factors": [0.5, 2.0]}
    head = next(r for r in rep["rows"] if r.get("headline"))
    assert [(s["cost"], s["factor"], s["value"]) for s in head["sensitivity"]] == [
        ("fault_base_ns", 0.5, 150.0), ("fault_base_ns", 2.0, 600.0)]
    ratios = {}
    for f, v in ((0.5, 150.0), (2.0, 600.0)):
        ops = []
        for c in rep["configs"]:
            cfg = json.loads(json.dumps(c["config"]))
            cfg["machine"]["costs"] = {"fault_base_ns": v}
            ops.append(foliosim.run(cfg).summary["ops_per_s"])
        ratios[f] = ops[1] / ops[0]
    assert [s["simulated"] for s in head["sensitivity"]] == [ratios[0.5], ratios[2.0]]
    assert head["sensitivity"][0]["simulated"] != head["simulated"]
    # Rows without a published figure are not rerun.
    assert not any("sensitivity" in r for r in rep["rows"] if not r.get("published"))
    assert base.summary["ops_per_s"] == next(r for r in rep["rows"] if r["label"] == "1 task")["simulated"]
    md = render({"experiments": [{**rep, "file": "demo/pf1-tasks.toml"}]})
    line = next(x for x in md.splitlines() if x.startswith("| 2 tasks: ops/s, 2 tasks / 1 task |"))
    assert "/" in line and line.count("|") == 4, line
    assert "`fault_base_ns` = 300: x0.5 / x2" in md


@pytest.mark.parametrize("block, where", [
    ('[sensitivity]\ncosts = ["cacheline_bogus_ns"]\n', "sensitivity.costs.cacheline_bogus_ns"),
    ('[sensitivity]\ncosts = []\n', "sensitivity.costs"),
    ('[sensitivity]\ncosts = ["trap_ns"]\nfactors = [1]\n', "sensitivity.factors"),
    ('[sensitivity]\ncosts = ["trap_ns"]\nwat = 1\n', "sensitivity.wat"),
])
def test_a_bad_sensitivity_block_names_file_and_key(tmp_path, block, where):
    p = _write(tmp_path, BASE + '[[rows]]\nlabel = "x"\nmetric = "m"\nsimulated = "1"\n' + block)
    with pytest.raises(R.ExperimentError) as e:
        R.load(p)
    assert str(e.value).startswith(str(p)) and where in str(e.value), e.value


def test_figures_are_credited_to_the_message_that_prints_them():
    # Cases a review found wrong: the -j160 table is in the RFC's cover
    # letter, not in the reply of 2023-04-17; the host MemFree figures are in
    # Alexander Duyck's reply to Andrew Morton, named by its message id.
    kb = R.load(R.find()["mthp-kernel-build"])
    for fid in ("j160_real", "j160_user", "j160_sys", "sys_j160_base"):
        src = kb.sources[kb.published[fid]["source"]]
        assert src["message_id"] == "20230414130303.2345383-1-ryan.roberts@arm.com", fid
        assert "reply" not in kb.published[fid]["where"], fid
    hm = R.load(R.find()["fpr-host-memory"])
    for fid in ("memfree_on", "memfree_off", "settle_s"):
        src = hm.sources[hm.published[fid]["source"]]
        assert src["message_id"] == "c45a6e8ab6af089da1001c0db28783dcea6bebd5.camel@linux.intel.com", fid


def test_arithmetic_on_a_published_figure_is_not_published():
    # The cover letter states a 16x multiplier for memory touched every
    # 64 KiB; what a 64 MiB region maps at either order is the model's.
    mem = R.load(R.find()["mthp-memory"])
    rows = {r.fields["metric"].source: r for r in mem.rows if not r.loops}
    assert "published" not in rows["anon memory, order 0"].fields
    assert "published" not in rows["anon memory, order 4"].fields
    assert "published" in rows["memory multiplier"].fields


# -------------------------------------------------------- runs at a time --
def test_sensitivity_variants_go_first_in_the_same_pool(monkeypatch):
    # One pool serves an experiment's runs and the variants its rules ask
    # for (so `jobs` caps both), the variants before the runs still queued;
    # the status line hears each run's simulated time against its end.
    from foliosim.reproduce import runner

    ran: list[str] = []

    def fake_run(cfg, progress=None, cancel=None):
        ran.append(cfg)
        if progress is not None:
            progress(1.5, 4.0)
        return json.dumps({"cfg": cfg})

    monkeypatch.setattr(runner._core, "run_json", fake_run)
    seen: list[runner.Status] = []
    pool = runner._Pool(1, status=seen.append)
    pool.every_s = 0.0
    a, b = pool.add([("a", "A", "exp a"), ("b", "B", "exp b")])
    assert pool.next({a}) == (a, json.dumps({"cfg": "A"}), None)
    assert pool.run([("s", "S", "exp s (cost x2)")]) == [("s", json.dumps({"cfg": "S"}), None)]
    assert pool.next({b})[0] == b
    assert ran == ["A", "S", "B"]
    assert (1, 3, [("exp s (cost x2)", 1.5, 4.0)]) in [st[:3] for st in seen]
    assert seen[-1][:3] == (3, 3, [])
    assert runner.Status(4, 9, [("x r", 1.25, 600.0)], 65).text() == "4/9 runs, 1m05s; now x r at 1.2 of 600 sim s"


def test_an_experiment_and_its_sensitivity_share_one_pool(tmp_path, monkeypatch):
    from foliosim.reproduce import runner

    (tmp_path / "demo").mkdir()
    p = tmp_path / "demo" / "pf1-tasks.toml"
    p.write_text(TINY.read_text() + '\n[sensitivity]\ncosts = ["fault_base_ns"]\n')
    pools: list[runner._Pool] = []
    real_init = runner._Pool.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        pools.append(self)

    monkeypatch.setattr(runner._Pool, "__init__", init)
    (two,) = list(R.run_experiments([R.load(p)], jobs=2))
    assert len(pools) == 1 and pools[0].jobs == 2
    assert pools[0].done == len(pools[0].labels) > 2  # the variants ran in it
    (one,) = list(R.run_experiments([R.load(p)], jobs=1))
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)


def test_runs_at_a_time_default_to_the_cpus_or_foliosim_jobs(monkeypatch):
    from foliosim.reproduce import runner
    from foliosim.reproduce.docs import main

    monkeypatch.delenv("FOLIOSIM_JOBS", raising=False)
    assert runner.default_jobs() == (os.cpu_count() or 1)
    monkeypatch.setenv("FOLIOSIM_JOBS", "3")
    assert runner.default_jobs() == 3
    monkeypatch.setenv("FOLIOSIM_JOBS", "two")
    with pytest.raises(R.ExperimentError, match="FOLIOSIM_JOBS"):
        runner.default_jobs()
    assert main(["-j", "0", "write"]) == 2
