"""The system calls of `foliosim calibrate`: validation/syscost.c on the
host, the `syscost` workload (the same calls) in the model, and the fit of
each term the model charges for them.

Every case runs at several sizes (`PLAN`), in every round, the rounds
interleaved with the fault cases; every figure used is the median over
the rounds. A term is fitted on the model, as calibrate's large-folio
terms are: the model runs each measured case with the term at 0 and at
`PROBE` ns, which tells how many times it charges the term per call (its
count), and the term is the least-squares value of (host - model at 0) /
count over the case's sizes (each weighted by the inverse square of the
host's time, so that relative errors weigh alike), printed with its
residual. The terms of one
`Fit` are fitted together (their counts differ across the sizes), the
fits one after another in `FITS`' order, each on the model with every
term fitted before it: what a later case also charges (mmap_ns in the
munmap case's mappings, vma_split_ns in brk's lowering) is known by then.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._host import HostError, build_validation, why_failed

# The file size of the read and write cases, KiB: the working set over
# which validation/calibrate.c measures copy_warm_bw_gbps (it stays in
# L2), so that the fitted per-folio terms are the kernel's own work and
# not the difference between that copy and one from a farther cache level
# (the model charges every copy of a cached page at copy_warm_bw_gbps).
# On a Granite Rapids host, whose L3 is far slower than its L2, a 4 MiB
# file gave pagecache_read_ns 285 ns and this one 80: the rest was the
# copy from L3, and read1 (a 1 MiB file, in L2 there) ran 1.8x the model.
FILE_KIB = 512

# (case, sizes, extra arguments). Sizes avoid the will-it-scale cases that
# validate checks (mmap1's 128 MiB, read1's one page of a 1 MiB file) so
# that those stay held out: the lines are fitted around them.
PLAN: list[tuple[str, list[int], list[str]]] = [
    # From 2 MiB: syscost is no forked child, so a smaller mapping, placed
    # against the static TLS block, merges with it (its anon_vma chain is
    # singular); a will-it-scale child's never does (exec.rs). Lengths of
    # whole PMDs are padded and aligned by thp_get_unmapped_area instead.
    ("mmap", [2, 8, 64, 512], []),
    ("munmap", [1, 4, 16, 64], []),
    # Not 64: malloc1's and mmap1's 128 MiB regions step over 63-64.
    ("munmap-empty", [1, 8, 32, 256], []),
    ("brk", [1, 16, 256], []),
    ("mprotect", [1, 16, 256], []),
    ("mprotect-split", [1, 16, 256], []),
    # x = 1 of a 32-page range, not tlb_flush2's one-page range between
    # faults: a zap's fixed work apart from its pages.
    ("madvise", [0, 1, 2, 8, 32], []),
    # Under 16 KiB mTHP (CASE_KIB): part of a folio zapped, nothing freed.
    ("madvise-mthp", [1, 3], []),
    ("read", [2, 4, 8, 16], ["-f", str(FILE_KIB)]),
    ("write", [1, 2, 4, 8, 16], ["-f", str(FILE_KIB)]),
    ("fork", [1, 64, 512, 2048], []),
]
FIELDS = ("ns", "undo_ns", "prep_ns")
# The folio size (KiB) a case runs under, where not 4: calibrate measures
# it with that size's mTHP knobs set, the model runs it with the same.
CASE_KIB = {"madvise-mthp": 16}
PROBE = 1000.0
# Simulated seconds per model run: enough calls for a steady mean.
SIM_S = {"fork": 0.05, "munmap": 0.02, "munmap-empty": 0.02}
SIM_S_DEFAULT = 0.01


def key(case: str, x: int) -> str:
    return f"{case}:{x}"


def run_case(binary: Path, case: str, x: int, extra: list[str], passes: int, tmpdir: str) -> dict[str, Any]:
    r = subprocess.run([str(binary), case, "-x", str(x), "-p", str(passes), "-d", tmpdir, *extra],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise HostError(f"syscost {case} -x {x} failed: {why_failed(r)}")
    return json.loads(r.stdout)


def measure_round(series: dict[str, list[dict[str, Any]]], passes: int, tmpdir: str, say: Any = None, kib: int = 4) -> None:
    """One round of every case at every size, appended to `series`: the
    cases of folio size `kib` (CASE_KIB), run under its knobs."""
    binary = build_validation() / "syscost"
    for case, sizes, extra in PLAN:
        if CASE_KIB.get(case, 4) != kib:
            continue
        for x in sizes:
            if say:
                say(f"{case} -x {x}")
            series.setdefault(key(case, x), []).append(run_case(binary, case, x, extra, passes, tmpdir))


def host(series: dict[str, list[dict[str, Any]]], case: str, x: int, field: str) -> float:
    return statistics.median(r[field] for r in series[key(case, x)])


def host_spread(series: dict[str, list[dict[str, Any]]], case: str, x: int, field: str) -> tuple[float, float]:
    v = [r[field] for r in series[key(case, x)]]
    return min(v), max(v)


# ------------------------------------------------------------------ model --
# The entries each case's calls are charged to (their probes give each
# call's time), and whether the undoing is the same entry as the call.
ENTRIES = {"mmap": ("mmap", "munmap"), "munmap": ("munmap", None), "munmap-empty": ("munmap", None), "brk": ("brk", "brk"),
           "mprotect": ("mprotect", "mprotect"), "mprotect-split": ("mprotect", "mprotect"),
           "madvise": ("madvise", None), "madvise-mthp": ("madvise", None), "read": ("read", None), "write": ("write", None)}
# Calls the workload makes on the call's entry before its repetitions:
# brk's query and first raise, the two guard pages' mprotect.
SETUP_CALLS = {"brk": 2, "mprotect": 2, "mprotect-split": 2}


def sim_case(profile: str, case: str, x: int, costs: dict[str, float] | None = None,
             knobs: dict[str, str] | None = None) -> dict[str, float]:
    """The model's time per call of one case (as syscost.c reports it: ns,
    undo_ns, prep_ns), with profile numbers replaced by `costs`."""
    from . import run as _run
    from .validate import sim_knobs
    ent = ENTRIES.get(case)
    probes = sorted({f"syscalls:sys_{w}_{e}" for e in (ent or ()) if e for w in ("enter", "exit")})
    machine: dict[str, Any] = {"profile": profile}
    if costs:
        machine["costs"] = dict(costs)
    params: dict[str, Any] = {"name": "syscost", "case": case, "x": x}
    if case in ("read", "write"):
        params["file_kib"] = FILE_KIB
    kib = CASE_KIB.get(case, 4)
    cfg = {"seed": 1, "machine": machine, "workload": params, "knobs": knobs or sim_knobs([] if kib == 4 else [kib]),
           "run": {"warmup_s": 0.0, "duration_s": SIM_S.get(case, SIM_S_DEFAULT), "probes_record": probes}}
    raw = _run(cfg).raw
    main = raw["per_task"][0]
    ops = main["ops"]
    if ops < 2:
        raise HostError(f"the model ran {ops} calls of syscost {case} -x {x}")
    if case == "fork":
        children = [t for t in raw["per_task"][1:] if t.get("exited")]
        return {"ns": main["time_ns"]["fork"] / ops, "undo_ns": sum(t["time_ns"]["exit"] for t in children) / max(len(children), 1),
                "prep_ns": 0.0}
    syscall = _syscall_ns(raw, profile, costs)
    call, undo = ent or (None, None)

    def durations(entry: str) -> list[float]:
        p = raw["probes"]
        enter = p[f"syscalls:sys_enter_{entry}"]["events"]
        leave = p[f"syscalls:sys_exit_{entry}"]["events"]
        return [b[0] - a[0] + syscall for a, b in zip(enter, leave, strict=False)]
    out = {"ns": 0.0, "undo_ns": 0.0, "prep_ns": 0.0}
    assert call is not None, case
    # The repetitions' calls: after the setup's, `ops` of them whole (a last
    # one the run's end cut short is left out).
    first = SETUP_CALLS.get(case, 0)
    if undo is None or undo != call:
        calls = durations(call)[first:first + ops]
        out["ns"] = sum(calls) / len(calls)
        if undo:
            u = durations(undo)[:ops]
            out["undo_ns"] = sum(u) / len(u)
    else:
        # The call and its undoing alternate on one entry.
        d = durations(call)[first:first + 2 * ops]
        out["ns"] = sum(d[0::2]) / len(d[0::2])
        out["undo_ns"] = sum(d[1::2]) / len(d[1::2])
    if case == "munmap":
        out["prep_ns"] = main["time_ns"]["fault"] / (ops * x)
    return out


def _syscall_ns(raw: dict[str, Any], profile: str, costs: dict[str, float] | None) -> float:
    """syscall_ns of the run: both halves around the probes' body."""
    if costs and "syscall_ns" in costs:
        return costs["syscall_ns"]
    return _profile_cost(profile, "syscall_ns")


def _profile_cost(profile: str, k: str) -> float:
    """A [cost] number of a profile file or of a built-in profile."""
    import tomllib

    from ._host import repo_root
    path = Path(profile) if Path(profile).is_file() else repo_root() / "profiles" / f"{profile}.toml"
    return float(tomllib.loads(path.read_text())["cost"][k])


# -------------------------------------------------------------------- fit --
@dataclass(frozen=True)
class Fit:
    terms: tuple[str, ...]
    points: tuple[tuple[str, str], ...]  # (case, field) at every size of the case
    what: str


FITS: list[Fit] = [
    Fit(("mmap_ns",), (("mmap", "ns"),), "mmap of an untouched anonymous region (do_mmap's VMA work)"),
    # Together: the mmap case's munmaps step over an empty PGD entry in
    # each walk too (nothing else maps in its 512 GiB).
    Fit(("munmap_ns", "pgtable_none_ns"), (("mmap", "undo_ns"), ("munmap-empty", "ns")),
        "munmap of an untouched region (the VMA's detach and free), and of one of 1-256 PMD entries in a PMD table that "
        "stays (unmap_page_range's and free_pgtables' walks, each stepping over every empty entry)"),
    # The call only: its per-page work is the zap's (pte_clear_ns, rmap_ns,
    # the frees, fitted on the fault cases' munmap) and the INVLPG
    # (tlb_flush_one_ns). Fitted here, tlb_flush_one_ns took whatever the
    # zap terms left (29 ns on this host's profile, 191 on generic-x86's,
    # below 0 in another round) and every shootdown with it: what the
    # zap terms leave shows in this fit's residual instead.
    # madvise x = 0 gathers and frees nothing; x = 1-31 is one gather and
    # one free batch, x = 32 one gather and two batches; madvise-mthp
    # gathers and frees nothing. Together they tell what a zap costs once
    # it gathered a page (tlb_gather_ns) from what freeing costs per batch
    # (folios_put_batch_ns): on the development host a partial zap of a
    # 16 KiB folio costs what a one-page zap that frees does.
    Fit(("madvise_ns", "folios_put_batch_ns", "tlb_gather_ns"), (("madvise", "ns"), ("madvise-mthp", "ns")),
        "MADV_DONTNEED of 32 pages, 0-32 of them written, and of 1-3 pages of a 16 KiB folio (the call; per zap that gathered "
        "a page: tlb_finish_mmu's flush and release pass; per batch of up to 31 folios freed: folios_put_refs' uncharge and "
        "pcp round; the zap's per-page terms are the fault cases')"),
    Fit(("pgtable_alloc_ns", "anon_vma_prepare_ns"), (("munmap", "prep_ns"),),
        "a write fault that allocates its PTE table (pte_alloc_one; per fault), the first in its region its anon_vma "
        "(__anon_vma_prepare; once per region)"),
    Fit(("pgtable_free_ns", "unlink_anon_vma_ns"), (("munmap", "ns"),),
        "munmap of a region with one written page per PTE table (free_pgtables: per table; its VMA's anon_vma unlinked, once)"),
    Fit(("mprotect_ns",), (("mprotect", "ns"), ("mprotect", "undo_ns")), "mprotect of a whole untouched VMA (mprotect_fixup)"),
    Fit(("vma_split_ns",), (("mprotect-split", "ns"),), "mprotect of a VMA's middle (two __split_vma)"),
    Fit(("vma_merge_ns",), (("mprotect-split", "undo_ns"),), "mprotect of the middle back (the merge of three VMAs)"),
    Fit(("brk_ns",), (("brk", "ns"),), "brk raising the break (do_brk_flags)"),
    Fit(("file_op_ns", "pagecache_read_ns", "pagecache_write_ns"), (("read", "ns"), ("write", "ns")),
        f"pread/pwrite of 1-16 pages of a cached {FILE_KIB} KiB tmpfs file (the call; per folio read; per folio written)"),
    # The child's exit first: what it frees changes what the parent's next
    # fork finds in its caches (its page tables' clears), not the reverse.
    Fit(("exit_base_ns",), (("fork", "undo_ns"),), "the child's exit (and teardown of its copy of the mm)"),
    Fit(("fork_base_ns", "copy_pte_ns"), (("fork", "ns"),), "fork of a small process with 1-2048 written pages (the call; per PTE copied)"),
]
# Terms a fit may not drive below these (a negative time is no cost).
FLOOR = 0.0


def _solve(a: list[list[float]], b: list[float], w: list[float] | None = None) -> list[float]:
    """Weighted least squares a x = b by the normal equations (a few
    unknowns; weights `w`, 1 by default)."""
    n = len(a[0])
    w = w or [1.0] * len(b)
    m = [[sum(wi * r[i] * r[j] for r, wi in zip(a, w, strict=True)) for j in range(n)]
         + [sum(wi * r[i] * y for r, y, wi in zip(a, b, w, strict=True))] for i in range(n)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-12:
            raise ValueError("the cases do not tell these terms apart")
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def sizes_of(case: str) -> list[int]:
    """The case's sizes ([] for a case the plan leaves out: a fit whose
    other cases cannot tell its terms apart then leaves them as they were)."""
    return next((s for c, s, _ in PLAN if c == case), [])


def fit_all(profile: str, series: dict[str, list[dict[str, Any]]], fitted: dict[str, float],
            rounds: int, say: Any = None) -> tuple[dict[str, tuple[float, str]], list[str]]:
    """Every `Fit` in turn on the model (profile with `fitted` and the terms
    fitted so far): ({term: (value, how)}, [fit lines with residuals])."""
    vals: dict[str, tuple[float, str]] = {}
    lines: list[str] = []
    known = dict(fitted)
    src = f"validation/syscost.c, median of {rounds} interleaved rounds"
    for f in FITS:
        pts = [(c, fld, x) for c, fld in f.points for x in sizes_of(c) if key(c, x) in series]
        if not pts:
            continue
        if say:
            say(f"fitting {', '.join(f.terms)} on the model")
        zero = {**known, **{t: 0.0 for t in f.terms}}
        # One model run per case and size serves all its fields.
        runs = {costs_t: {(c, x): sim_case(profile, c, x, dict(costs_t)) for c, _, x in pts}
                for costs_t in [tuple(sorted(zero.items()))] + [tuple(sorted({**zero, t: PROBE}.items())) for t in f.terms]}
        keys = list(runs)
        m0 = [runs[keys[0]][(c, x)][fld] for c, fld, x in pts]
        counts = [[(runs[k][(c, x)][fld] - m) / PROBE for (c, fld, x), m in zip(pts, m0, strict=True)] for k in keys[1:]]
        h = [host(series, c, x, fld) for c, fld, x in pts]
        a = [[counts[j][i] for j in range(len(f.terms))] for i in range(len(pts))]
        w = [1 / hh ** 2 for hh in h]
        y = [hh - m for hh, m in zip(h, m0, strict=True)]
        low: list[int] = []
        try:
            # Relative errors weigh alike: a fixed cost is not lost in the
            # per-page work of the largest sizes.
            v = _solve(a, y, w)
            # A term the fit drives below the floor is held there and the
            # others fitted again without it (no time below 0 is a cost).
            low = [j for j, x in enumerate(v) if x < FLOOR]
            if low and len(low) < len(v):
                free = [j for j in range(len(v)) if j not in low]
                y2 = [yy - sum(row[j] * FLOOR for j in low) for yy, row in zip(y, a, strict=True)]
                v2 = _solve([[row[j] for j in free] for row in a], y2, w)
                v = [FLOOR if j in low else v2[free.index(j)] for j in range(len(v))]
        except ValueError:
            lines.append(f"{f.what}: the model charges {', '.join(f.terms)} alike in every case; left as they were")
            continue
        held = {f.terms[j] for j in low}
        resid = [hh - m - sum(c * x for c, x in zip(row, v, strict=True)) for hh, m, row in zip(h, m0, a, strict=True)]
        rms = (sum(r * r for r in resid) / len(resid)) ** 0.5
        rel = (sum((r / hh) ** 2 for r, hh in zip(resid, h, strict=True)) / len(resid)) ** 0.5
        pts_txt = ", ".join(f"{c} {fld} x={x}: {hh:.0f} ns ({r:+.0f})" for (c, fld, x), hh, r in zip(pts, h, resid, strict=True))
        lines.append(f"{f.what}: " + ", ".join(f"{t} = {x:.1f}" for t, x in zip(f.terms, v, strict=True))
                     + f" ns (residual {rms:.0f} ns rms, {100 * rel:.1f}% of the host's times, over {len(pts)} cases: {pts_txt})")
        for t, x in zip(f.terms, v, strict=True):
            how = (f"{src}: {f.what}; least squares on the model (host minus model with the term at 0, over the count the model "
                   f"charges it per call; relative) over {len(pts)} cases, residual {rms:.0f} ns rms ({100 * rel:.1f}%)")
            if t in held:
                how += "; the fit drives it below 0: held at 0, the other terms fitted again without it"
            elif x < FLOOR:
                how += f"; the fit gives {x:.1f}, below 0: 0 used"
                x = FLOOR
            vals[t] = (x, how)
            known[t] = x
    return vals, lines


def verify(profile: str, series: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The model on every measured case with the written profile: time per
    call (and per undoing, per fault before it), model against host."""
    rows = []
    for case, sizes, _ in PLAN:
        for x in sizes:
            if key(case, x) not in series:
                continue
            m = sim_case(profile, case, x)
            for fld in FIELDS:
                hv = host(series, case, x, fld)
                if hv <= 0:
                    continue
                rows.append({"case": f"{case} x={x}", "field": fld, "model": m[fld], "host": hv,
                             "spread": host_spread(series, case, x, fld)})
    return rows


def format_verify(rows: list[dict[str, Any]]) -> list[str]:
    what = {"ns": "the call", "undo_ns": "its undoing", "prep_ns": "per fault before it"}
    out = ["model against this host on the system calls (validation/syscost.c, ns per call):",
           f"  {'case':<20} {'':<20} {'model':>9} {'host':>9} {'err':>7}  host min-max"]
    for r in rows:
        lo, hi = r["spread"]
        out.append(f"  {r['case']:<20} {what[r['field']]:<20} {r['model']:>9.0f} {r['host']:>9.0f} "
                   f"{100 * (r['model'] - r['host']) / r['host']:>+6.1f}%  {lo:.0f}-{hi:.0f}")
    return out


COST_LINE = re.compile(r"^(\w+)\s*=\s*(\S+)\s*#\s*(.*)$")


def put_terms(target_text: str, vals: dict[str, tuple[float, str]], host_desc: str) -> tuple[str, list[str]]:
    """`target_text` (a profile's TOML) with the [cost] line of every term
    of `vals` ({term: (value, how)}, as fit_all gives) replaced, tagged as
    measured by validation/syscost.c on `host_desc` with the fit's own
    account: (the new text, the terms changed)."""
    out, changed, section = [], [], ""
    for line in target_text.split("\n"):
        if line.startswith("["):
            section = line.strip()
        m = COST_LINE.match(line)
        if section == "[cost]" and m and m.group(1) in vals:
            value, how = vals[m.group(1)]
            line = (f"{m.group(1)} = {value:.1f}    # [measured: validation/syscost.c] on {host_desc}, fitted on this profile's other "
                    f"terms (python -m foliosim.syscost adopt): {how}")
            changed.append(m.group(1))
        out.append(line)
    return "\n".join(out), changed


def adopt(measurements: Path, target: Path, host_desc: str, say: Any = None) -> tuple[list[str], list[dict[str, Any]]]:
    """Fit every system-call term of profile `target` on the system calls of
    `measurements` (calibrate's measurements file or its --json output),
    on the model with the profile's own other terms, and write them into
    it: (the fit lines, the model against the host with the new profile)."""
    try:
        saved = json.loads(measurements.read_text())
        series, rounds = saved["syscalls"], saved["rounds"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise HostError(f"{measurements}: not calibrate's measurements ({e})") from e
    if not series:
        raise HostError(f"{measurements}: no system calls measured (a calibration before validation/syscost.c)")
    vals, lines = fit_all(str(target.resolve()), series, {}, rounds, say)
    text, changed = put_terms(target.read_text(), vals, host_desc)
    missing = sorted(set(vals) - set(changed))
    if missing:
        raise HostError(f"{target}: no [cost] line for {', '.join(missing)}")
    target.write_text(text)
    return lines, verify(str(target.resolve()), series)


def main() -> int:  # pragma: no cover - hand tools
    """python -m foliosim.syscost PROFILE CASE X: one case on the model;
    python -m foliosim.syscost adopt MEASUREMENTS.json PROFILE.toml 'HOST':
    the system-call terms fitted into a profile (e.g. generic-x86, the
    development host's) on the model with that profile's other terms."""
    if sys.argv[1:2] == ["adopt"]:
        if len(sys.argv) != 5:
            print("usage: python -m foliosim.syscost adopt MEASUREMENTS.json PROFILE.toml 'description of the host'", file=sys.stderr)
            return 2
        try:
            lines, rows = adopt(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], lambda w: print(w, file=sys.stderr))
        except HostError as e:
            print(f"foliosim.syscost adopt: {e}", file=sys.stderr)
            return 2
        for line in lines + format_verify(rows):
            print(line)
        return 0
    profile, case, x = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print(json.dumps(sim_case(profile, case, x)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
