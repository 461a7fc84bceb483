"""The derivation rule checked on a host we can measure (issue #30).

A profile for a machine nobody here has is derived by the rule of
docs/profiles.md: the software costs measured on the development host
(profiles/generic-x86.toml) scaled by kappa = (f_host x ppc_host) /
(f x ppc), the memory side from the machine's latency and bandwidth. The
public results check that rule only through everything else that differs
on those machines. On a host that differs from the development host in
core and clock and can be measured, it can be checked alone:

1. `derive`: the facts of this host that a derived profile is given
   (`foliosim calibrate`'s measured clock, CPUs, caches, DRAM latency, one
   core's read bandwidth and the core-to-core transfer of a line; the core
   named by the caller) go into a
   profile with `[derive] host = "generic-x86"`; everything else is the
   rule's, as for the machines of validation/public/.
2. The model is rerun on the real figures of this host's `foliosim
   validate` report, once with that derived profile (where nothing is
   fitted on this host: every row is held out from the rule) and once as
   the report was, with the profile calibrated here.
3. The costs both hosts measured are set side by side: the rule's value
   against the one `foliosim calibrate` measured here.

    python -m foliosim.rule_check run --core golden-cove
    python -m foliosim.rule_check doc results/validate/rule/rule.json docs/validation.md

`make validate-rule` does both (after `make docs-validation`)."""

from __future__ import annotations

import argparse
import json
import os
import tomllib
from pathlib import Path
from typing import Any

from ._host import HostError, fill_marked, tool_main, write_text_atomic
from .tomlout import _value

MARK = "<!-- validate-rule -->"
END_MARK = "<!-- /validate-rule -->"
HOST = "generic-x86"

#: The facts of this host a derived profile is given (the rule's "facts of
#: the machine"), as `foliosim calibrate` measured them.
CPU_FACTS = ("nr_cpus", "sockets", "freq_ghz", "threads_per_core", "l2_kib", "llc_kib")
NODE_FACTS = ("kind", "mem_mib", "has_cpus", "latency_ns", "read_bw_gbps")
#: Facts in [cost], given where calibrate measured them (validation/c2c.c).
COST_FACTS = ("cacheline_same_socket_ns",)


def derived_profile(calibrated: Path, core: str) -> str:
    """The text of this host's profile derived by the rule from HOST."""
    try:
        cal = tomllib.loads(calibrated.read_text())
    except OSError as e:
        raise HostError(f"{calibrated}: {e.strerror or e} (run `foliosim calibrate` first)") from None
    except tomllib.TOMLDecodeError as e:
        raise HostError(f"{calibrated}: not a profile ({e})") from None
    tag = "[measured: validation/calibrate.c] as `foliosim calibrate` measured it on this host"
    L = ["# This host, derived by the rule of docs/profiles.md from the costs measured on",
         f"# {HOST}: only the facts below are this host's (python -m foliosim.rule_check).",
         'name = "rule-check"',
         f'description = "This host derived by the rule from {HOST}"', "",
         "[derive]", f'host = "{HOST}"', "", "[cpu]"]
    for k in CPU_FACTS:
        if k not in cal.get("cpu", {}):
            raise HostError(f"{calibrated}: no cpu.{k}")
        L.append(f"{k} = {_value(cal['cpu'][k])}  # {tag}")
    L.append(f"core = {json.dumps(core)}  # [assumed] named by the caller (python -m foliosim.rule_check run --core)")
    for node in cal.get("nodes", []):
        L += ["", "[[nodes]]"]
        L += [f"{k} = {_value(node[k])}  # {tag}" for k in NODE_FACTS if k in node]
    measured = {k for k, v in _explain(str(calibrated)).items() if v["kind"] == "measured"}
    costs = [k for k in COST_FACTS if f"cost.{k}" in measured]
    if costs:
        L += ["", "[cost]"] + [f"{k} = {_value(cal['cost'][k])}  # {tag}" for k in costs]
    return "\n".join(L) + "\n"


def _explain(profile: str) -> dict[str, dict[str, Any]]:
    from . import _core
    data = json.loads(_core.profile_explain_json(profile, os.getcwd()))
    return {v["path"]: v for v in data["values"]}


def cost_pairs(derived: str, calibrated: str) -> list[dict[str, Any]]:
    """The values the rule derives that both HOST and this host measured:
    the rule's value against this host's."""
    d, c, h = _explain(derived), _explain(calibrated), _explain(HOST)
    out = []
    for path, v in sorted(d.items()):
        if v["kind"] != "derived" or c.get(path, {}).get("kind") != "measured" or h.get(path, {}).get("kind") != "measured":
            continue
        rule, here = float(v["value"]), float(c[path]["value"])
        out.append({"path": path, "host": float(h[path]["value"]), "rule": rule, "here": here,
                    "ratio": rule / here if here else None, "how": v["note"]})
    return out


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Over every row but the controls: nothing of the derived profile was
    fitted on this host, so the rows calibration fits are held out too."""
    from .validate import rel_errors
    out = {}
    for m in ("ops_per_s", "ops_ratio"):
        e = rel_errors(rows, m, {"fit", "held-out"})
        out[m] = {"rows": len(e), "max": max(e) if e else None, "mean": sum(e) / len(e) if e else None,
                  "within_15": sum(1 for x in e if x <= 0.15)}
    return out


def run(report: Path, calibrated: Path, core: str, out: Path, progress: bool = True) -> dict[str, Any]:
    from .validate import validate
    try:
        measured = json.loads(report.read_text())
    except OSError as e:
        raise HostError(f"{report}: {e.strerror or e} (run `make docs-validation` first)") from None
    out.mkdir(parents=True, exist_ok=True)
    prof = out / "derived.toml"
    write_text_atomic(prof, derived_profile(calibrated, core))
    d = _explain(str(prof))
    given = sorted(p for p, v in d.items() if v["kind"] == "measured")
    # The rule's arithmetic, as --explain prints it for any software cost:
    # "... kappa = (host F x CORE P) / (F x CORE P) = K; per clock: ...".
    note = d["cost.fault_base_ns"]["note"]
    kappa_note = note[note.index("kappa"):].split(f"; host {HOST}'s value", 1)[0] if "kappa" in note else note
    rep = validate(str(prof), quick=False, progress=progress, real_from=str(report))
    keep = ("setting", "workload", "mode", "role", "baseline", "real", "predicted", "rel_error", "noisy")
    cal_rows = {(r["setting"], r["workload"], r["mode"]): r for r in measured["rows"]}
    rows = []
    for r in rep["rows"]:
        if not r.get("predicted"):
            continue
        c = cal_rows.get((r["setting"], r["workload"], r["mode"])) or {}
        rows.append({**{k: r.get(k) for k in keep}, "calibrated": {k: c.get(k) for k in ("predicted", "rel_error")}})
    result = {
        "core": core, "host": HOST, "report": str(report), "calibrated": str(calibrated), "profile": str(prof),
        "machine": (measured.get("host") or {}).get("before") or {},
        "freq_ghz": d["cpu.freq_ghz"]["value"], "host_freq_ghz": _explain(HOST)["cpu.freq_ghz"]["value"],
        "kappa_note": kappa_note,
        "given": given,
        "rows": rows,
        "rule": _summary(rows),
        "here": _summary([{**r, "rel_error": (r["calibrated"] or {}).get("rel_error")} for r in rows]),
        "costs": cost_pairs(str(prof), str(calibrated)),
    }
    write_text_atomic(out / "rule.json", json.dumps(result, indent=1, sort_keys=True))
    return result


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _signed(pred: float | None, real: float) -> str:
    return "—" if pred is None or not real else f"{100 * (pred / real - 1):+.1f}%"


def _g(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def render(res: dict[str, Any]) -> str:
    m = res["machine"]
    L = [f"Measured {m.get('date', '?')} on {m.get('cpu', '?')} ({m.get('nr_cpus', '?')} CPUs, Linux {m.get('kernel', '?')}): "
         f"the real figures of `{Path(res['report']).name}` above, the model rerun on `{Path(res['profile']).name}`: "
         f"this host's clock ({res['freq_ghz']:.2f} GHz) and the other facts `foliosim calibrate` measured here "
         f"({', '.join(f'`{p}`' for p in res.get('given', []) if p != 'cpu.freq_ghz')}), "
         f"core `{res['core']}`, and everything else derived from {res['host']} ({res['host_freq_ghz']:.2f} GHz) by the rule. "
         f"Software time scales by {res['kappa_note']}.", ""]
    L += ["| profile | ops/s rows | within 15% | max error | mean error | ops ratio rows | within 15% | max error | mean error |",
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, s in (("derived by the rule", res["rule"]), ("calibrated on this host", res["here"])):
        a, b = s["ops_per_s"], s["ops_ratio"]
        L.append(f"| {name} | {a['rows']} | {a['within_15']} | {_pct(a['max'])} | {_pct(a['mean'])} "
                 f"| {b['rows']} | {b['within_15']} | {_pct(b['max'])} | {_pct(b['mean'])} |")
    L += ["", "Per row (ops/s, the rows calibration fitted on included: none is fitted for the derived profile; noisy rows left out):", "",
          "| setting | workload | mode | real | derived | err | calibrated here | err |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in res["rows"]:
        if r["role"] not in ("fit", "held-out") or "ops_per_s" in r.get("noisy", []):
            continue
        real, pred = r["real"]["ops_per_s"], r["predicted"]["ops_per_s"]
        cal = (r["calibrated"].get("predicted") or {}).get("ops_per_s")
        L.append(f"| {r['setting']} | {r['workload']} | {r['mode']} | {_g(real)} | {_g(pred)} | {_signed(pred, real)} "
                 f"| {_g(cal) if cal is not None else '—'} | {_signed(cal, real)} |")
    costs = res["costs"]
    if costs:
        L += ["", f"The {len(costs)} values the rule derives that both hosts measured ({res['host']}'s by its own calibration, "
              "this host's by `foliosim calibrate`; where the two calibrations split a path into terms differently the terms "
              "differ more than the path):", "",
              f"| value | {res['host']} | rule | measured here | rule / here |", "| --- | ---: | ---: | ---: | ---: |"]
        for c in costs:
            ratio = "—" if c["ratio"] is None else f"{c['ratio']:.2f}"
            L.append(f"| `{c['path']}` | {_g(c['host'])} | {_g(c['rule'])} | {_g(c['here'])} | {ratio} |")
    return "\n".join(L)


def fill_doc(result: Path, doc: Path) -> None:
    fill_marked(doc, MARK, END_MARK, render(json.loads(result.read_text())))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m foliosim.rule_check")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="derive this host by the rule and rerun the model on validate's real figures")
    r.add_argument("--core", required=True, help="this host's core, a key of profiles/rule.toml")
    r.add_argument("--report", default="results/validate/report.json",
                   help="a `foliosim validate --json` report of this host (make docs-validation writes this one)")
    r.add_argument("--calibrated", default="results/calibrate/host.toml")
    r.add_argument("--out", default="results/validate/rule")
    d = sub.add_parser("doc", help="fill the validate-rule section of a page from rule.json")
    d.add_argument("result")
    d.add_argument("doc")
    a = p.parse_args(argv)
    if a.cmd == "run":
        return tool_main(lambda: print(render(run(Path(a.report), Path(a.calibrated), a.core, Path(a.out)))))
    return tool_main(lambda: fill_doc(Path(a.result), Path(a.doc)))


if __name__ == "__main__":
    raise SystemExit(main())
