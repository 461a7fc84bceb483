"""docs/reproductions.{md,json} are generated (`make reproductions`) and must
still come from the code: the Markdown is the rendering of the JSON, every
experiment's inputs (its file, the engine, the runner, the profiles) hash to
what the JSON recorded, and the cheap experiments, rerun here, give the
committed rows exactly. `make check-reproductions` reruns all of them."""

from __future__ import annotations

import json

import pytest

from foliosim import doctables as T
from foliosim import reproduce as R
from foliosim.reproduce import docs as D

ROOT = D.repo_root()
STALE = "stale: run `make reproductions` and commit docs/reproductions.{json,md}"


@pytest.fixture(scope="module")
def committed():
    return json.loads((ROOT / "docs" / "reproductions.json").read_text(encoding="utf-8"))


def test_markdown_is_the_rendering_of_the_json(committed):
    assert (ROOT / "docs" / "reproductions.md").read_text(encoding="utf-8") == D.render(committed), STALE


def test_every_experiment_is_there_once(committed):
    names = [e["name"] for e in committed["experiments"]]
    assert names == list(R.find()), STALE


def test_inputs_have_not_changed(committed):
    files = R.find()
    stale = [e["name"] for e in committed["experiments"] if D.inputs_hash(files[e["name"]]) != e["inputs_sha256"]]
    assert not stale, f"{STALE} ({', '.join(stale)}: inputs changed)"


def test_inputs_hash_reads_a_profiles_values_not_its_comments(tmp_path):
    (tmp_path / "profiles").mkdir()
    prof = tmp_path / "profiles" / "box.toml"
    exp = tmp_path / "exp.toml"
    exp.write_text('title = "x"\n')
    prof.write_text("[cost]\ntrap_ns = 100.0  # measured\n")
    before = D.inputs_hash(exp, tmp_path)
    prof.write_text("# source: a datasheet\n[cost]\ntrap_ns = 100.0  # assumed\n")
    assert D.inputs_hash(exp, tmp_path) == before
    prof.write_text("[cost]\ntrap_ns = 101.0\n")
    assert D.inputs_hash(exp, tmp_path) != before


def test_write_of_some_refuses_other_stale_rows_before_running(tmp_path, monkeypatch):
    # The check comes first: a long run is never thrown away by it.
    (tmp_path / "docs").mkdir()
    exp = tmp_path / "exp.toml"
    exp.write_text('title = "x"\n')
    rows = {"experiments": [{"name": "other", "file": "exp.toml", "inputs_sha256": "stale"}]}
    (tmp_path / "docs" / "reproductions.json").write_text(json.dumps(rows))

    def run_all(*_args, **_kw):
        raise AssertionError("ran before checking the other experiments' inputs")

    monkeypatch.setattr(D, "_run_all", run_all)
    with pytest.raises(SystemExit, match="other: inputs changed too"):
        D.write(tmp_path, progress=False, names=["mine"])


def test_an_experiment_that_cannot_run_is_one_line_and_exit_2(monkeypatch, capsys):
    # e.g. a recorded trace missing on this machine: no traceback.
    def write(*_args, **_kw):
        raise R.ExperimentError("exp.toml", "workload.path", "@trace is not recorded here", 3)

    monkeypatch.setattr(D, "write", write)
    assert D.main(["write"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("foliosim: ") and "workload.path" in err[0] and "not recorded" in err[0]


def test_every_row_far_from_its_published_figure_says_why(committed):
    # A reader who sees "off" or "opposite" beside a row finds the reason in
    # the row itself, not only somewhere in the notes under the table.
    silent = [
        f"{e['name']}: {r['label']} / {r['metric']}"
        for e in committed["experiments"]
        for r in e["rows"]
        if T.verdict(r) in ("off", "opposite") and not r["note"].strip()
    ]
    assert not silent, "rows far from the published figure with no note: " + "; ".join(silent)


def test_every_experiment_has_one_headline_row(committed):
    for e in committed["experiments"]:
        heads = [r for r in e["rows"] if r.get("headline")]
        assert len(heads) == 1, (e["name"], len(heads))


def test_a_headline_row_is_a_published_figure_the_model_gives(committed):
    # The headline stands for the experiment: the series' own leading figure
    # (docs/experiments.md), never a model-only row or one the model gives no
    # value for, while the experiment has published figures.
    for e in committed["experiments"]:
        head = next(r for r in e["rows"] if r.get("headline"))
        if any(r.get("published") is not None for r in e["rows"]):
            assert head.get("published") is not None and head.get("simulated") is not None, e["name"]


@pytest.mark.parametrize("name", D.CHEAP)
def test_cheap_experiments_give_the_committed_rows(committed, name):
    old = next(e for e in committed["experiments"] if e["name"] == name)
    (rep,) = R.run_experiments(R.load_all([name]))
    assert D.compare_rows(old, rep) == [], STALE
