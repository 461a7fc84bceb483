"""Where every value of every machine profile a reproduction or a public
point runs on comes from (docs/profiles.md, "Where each value comes from"):
the check `make test` runs so that the README's "nothing is fitted to a
published number" stays true.

- Every value has a source of an allowed kind: measured here by a program
  of validation/, a public figure with its citation, derived by the rule,
  or assumed (with why).
- A message whose results a reproduction (or a public point) compares
  against may give its machine's facts (CPUs, sockets, clock, core, the
  memory's nodes and sizes) and nothing else: no cost, latency or
  bandwidth cites it, directly or through the rule's arithmetic.
- The constants that once were worked back from compared figures stay
  derived by the rule, and the LUF workloads' pacing stays unset.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest

from conftest import REPO
from foliosim import _core
from foliosim import public as P
from foliosim.reproduce import load_all

ALLOWED = {"measured", "public", "derived", "assumed"}

# What a machine is, which the message reporting its results may state.
FACTS = re.compile(r"^(cpu\.(nr_cpus|sockets|freq_ghz|core|threads_per_core)|nodes\[\d+\]\.(kind|mem_mib|has_cpus))$")


@cache
def explain(profile: str, base: str) -> list[dict[str, Any]]:
    return list(json.loads(_core.profile_explain_json(profile, base))["values"])


def source_keys(s: dict[str, Any]) -> list[str]:
    """How a profile's citation would name a source of an experiment: its
    Message-ID, commit or URL, or its subject without the [PATCH] prefix."""
    keys = [str(s[k]) for k in ("message_id", "commit", "url") if s.get(k)]
    subject = re.split(r" \(|, ", str(s.get("title", "")))[0]
    subject = re.sub(r"^(\[[^\]]*\]\s*)+", "", subject).strip()
    if len(subject) >= 12:
        keys.append(subject)
    return keys


def citing(values: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """The values that cite one of `keys` for anything but a fact: their
    own citation (`what`) or, for a derived one, the sources its arithmetic
    names (`note`: the host's value, the rule's figures)."""
    bad = []
    for v in values:
        text = (v["what"] + " " + (v["note"] if v["kind"] == "derived" else "")).lower()
        hit = next((k for k in keys if k.lower() in text), None)
        if hit and not (v["kind"] == "public" and FACTS.match(v["path"])):
            bad.append(f"{v['path']} ({v['kind']}) cites {hit!r}")
    return bad


EXPERIMENTS = load_all()
PROFILES = sorted({(json.loads(r.cfg_json)["machine"]["profile"], str(e.path.parent)) for e in EXPERIMENTS
                   for r in e.runs.values()})


@pytest.mark.parametrize("profile,base", PROFILES, ids=[p for p, _ in PROFILES])
def test_every_value_has_a_source_of_an_allowed_kind(profile, base):
    for v in explain(profile, base):
        assert v["kind"] in ALLOWED, f"{profile}: {v['path']}: {v['kind']}"
        if v["kind"] == "measured":
            prog = v["what"].split()[0]
            assert prog.startswith("validation/") and (REPO / prog).is_file(), f"{profile}: {v['path']}: {prog}"
        if v["kind"] == "public":
            assert v["what"], f"{profile}: {v['path']}: a public figure names its source"


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=[e.name for e in EXPERIMENTS])
def test_no_value_comes_from_a_message_the_experiment_compares_against(exp):
    compared = {f.get("source") for f in exp.published.values()}
    keys = [k for sid in compared for k in source_keys(exp.sources.get(sid, {}))]
    profiles = {json.loads(r.cfg_json)["machine"]["profile"] for r in exp.runs.values()}
    for p in sorted(profiles):
        assert not citing(explain(p, str(exp.path.parent)), keys), \
            f"{exp.name}: profile {p}: a value is taken from a message whose results the rows compare against"


def test_no_value_of_a_public_machine_comes_from_its_reports(tmp_path):
    machines, points = P.load()
    for m in sorted({p.machine for p in points}):
        profile, kind = P.profile_for(machines[m], tmp_path)
        if kind != "rule":
            continue  # a stand-in, which every row run on it says it is
        keys = [k for p in points if p.machine == m for k in source_keys(p.source)]
        values = explain(profile, "")
        assert all(v["kind"] in ALLOWED for v in values), m
        assert not citing(values, keys), f"{m}: a value is taken from a report the public points compare against"


def test_the_check_finds_a_value_taken_from_a_compared_message():
    """The check itself: a bandwidth citing the promotion letter, whose
    table promo-table compares against, is caught; its memory size is a
    fact and is not."""
    exp = next(e for e in EXPERIMENTS if e.name == "promo-table")
    keys = source_keys(exp.sources["rfc-v3"])
    letter = "Gregory Price, \"[RFC v3 PATCH 0/5] Promotion of Unmapped Page Cache Folios\", linux-mm, 2025-01-07"
    values = [{"path": "nodes[1].copy_bw_gbps", "kind": "public", "what": letter, "note": ""},
              {"path": "nodes[1].mem_mib", "kind": "public", "what": letter, "note": ""},
              {"path": "nodes[0].read_bw_gbps", "kind": "derived", "what": "x", "note": "from " + letter}]
    assert [b.split()[0] for b in citing(values, keys)] == ["nodes[1].copy_bw_gbps", "nodes[0].read_bw_gbps"]


# The values the issue named as worked back from compared figures, and
# what they were worked back from: each is the rule's now.
ONCE_WORKED_BACK = {
    "cxl-1tb": ["nodes[0].copy_bw_gbps", "nodes[1].copy_bw_gbps", "nodes[1].read_bw_gbps"],  # promo-table's DRAM/CXL Base
    "e5-2630v3-guest-32g": ["nodes[0].zero_bw_gbps", "nodes[0].copy_bw_gbps"],  # fpr-overhead's 1-task rows
}


@pytest.mark.parametrize("profile", sorted(ONCE_WORKED_BACK))
def test_the_values_once_worked_back_are_derived_by_the_rule(profile):
    kinds = {v["path"]: v["kind"] for v in explain(profile, "")}
    for path in ONCE_WORKED_BACK[profile]:
        assert kinds[path] == "derived", f"{profile}: {path} is {kinds[path]}, not the rule's"


# Workload parameters that pace a program by a time per operation: set from
# a published rate, they make the rate a reproduction compares an input.
PACING = {"llama": "page_compute_ns", "xsbench": "compute_ns"}


@pytest.mark.parametrize("exp", [e for e in EXPERIMENTS if e.mechanism == "lazy-unmap-flush"], ids=lambda e: e.name)
def test_the_luf_workloads_are_not_paced(exp):
    for r in exp.runs.values():
        w = json.loads(r.cfg_json)["workload"]
        if w["name"] in PACING:
            assert not w.get(PACING[w["name"]]), f"{exp.name}: run {r.name}: {PACING[w['name']]} = {w[PACING[w['name']]]}"
