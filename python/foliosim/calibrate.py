"""`foliosim calibrate`: measure this host and write a machine profile.

The fault-path costs are measured through the real kernel's own paths
(validation/faultcost.c, one case per run: anonymous write faults at every
folio size the host offers, under its per-size THP knob; the zero-page read
fault; tmpfs file faults, shared and private; munmap and MADV_DONTNEED of
what they mapped; a sequential re-touch; the mprotect scan). Each case runs
in every round, the rounds interleaved (a slow spell of a shared machine
hits every case alike), and every figure used is the median over the rounds,
with its min-max spread. Fixed and per-page costs are fitted by least
squares, each fit printed with its residual. Every other kernel entry the
workloads make (mmap and munmap with their page-table teardown, brk,
mprotect with its splits and merges, MADV_DONTNEED, read and write of a
cached file, fork and exit) is timed by validation/syscost.c in the same
rounds and each of its terms fitted on the model (syscost.py). The rest
(the null syscall, bandwidths, the random page walk, the cache-resident
clear and copy) comes from validation/calibrate.c. The process image every
will-it-scale task starts with is measured by validation/image_layout.c
and set against the model's, piece by piece (procimage.py). What cannot be measured
is copied from generic-x86 and says so in its comment; every measured value
says how.

The profile's terms are those the model charges (docs/DEVELOPING.md, "The
time model"), so the derivation below follows what the model adds up for
each measured case; `verify` then runs the model on the same cases with the
written profile and prints model against host, case by case."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import procimage, syscost
from ._host import (
    THP,
    HostError,
    build_validation,
    knobs_available,
    knobs_changed,
    knobs_for,
    mthp_sizes_kib,
    read_knob,
    thp_settings,
    tmp_fs_kind,
    why_failed,
    write_text_atomic,
)
from .tomlout import _value

try:
    import tomllib
except ImportError:  # pragma: no cover
    tomllib = None  # type: ignore

GENERIC = "generic-x86"
PMD_KIB = 2048
# Regions: "cold" is far beyond the caches, "warm" is reused within them.
COLD_MIB, WARM_MIB = 128, 2
# The region sweep that sizes the cache (cpu.llc_kib, with cpu.l2_kib), PMD THP.
SWEEP_MIB = (2, 8, 16, 32, 64, COLD_MIB)
DEFAULT_ROUNDS = 5
# Folio sizes left out of every fit, so that `foliosim validate` tests the
# model on sizes calibration never saw (its held-out rows).
HELD_OUT_KIB = (32, 64)


#: No core runs faster: an add chain timed above it was not one add a cycle
#: (calibrate.c's measurements of an older build on a core that folds
#: add-immediate chains at rename gave 15.4 GHz).
MAX_CLOCK_GHZ = 6.5


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def generic_profile() -> dict[str, Any]:
    from ._host import repo_root
    p = repo_root() / "profiles" / f"{GENERIC}.toml"
    with open(p, "rb") as f:
        return tomllib.loads(f.read().decode())


# ---------------------------------------------------------------- measure --
def run_benchmark() -> dict[str, Any]:
    """validation/bin/calibrate (user-space microbenchmarks); PMD THP on for
    madvised memory during the run if we may change the knobs. validate
    reruns it to see how far the host drifted from its calibration."""
    binary = build_validation() / "calibrate"
    want: dict[Path, str] = {}
    if knobs_available() is None and (read_knob(THP / "enabled") == "never" or read_knob(THP / "hugepages-2048kB" / "enabled") == "never"):
        want = {THP / "hugepages-2048kB" / "enabled": "madvise"}
        if read_knob(THP / "enabled") == "never":
            want[THP / "enabled"] = "madvise"
    with thp_settings(want):
        r = subprocess.run([str(binary)], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise HostError(f"calibrate benchmark failed: {why_failed(r)}")
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def measure_micro() -> dict[str, Any]:
    """The microbenchmarks (run_benchmark), membw and c2c."""
    micro = run_benchmark()
    micro.update(measure_membw())
    micro.update(measure_c2c())
    return micro


def measure_c2c(rounds: int = 5) -> dict[str, Any]:
    """validation/bin/c2c: one cache line handed between CPUs 0 and 1 by
    compare-and-swap, the time per transfer (median of `rounds`); nothing
    on a host with one CPU."""
    if (os.cpu_count() or 1) < 2:
        return {}
    r = subprocess.run([str(build_validation() / "c2c"), str(rounds)], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise HostError(f"c2c failed: {why_failed(r)}")
    out = json.loads(r.stdout)
    return {"c2c_transfer_ns": out["transfer_ns"], "c2c_min_ns": out["min"], "c2c_max_ns": out["max"], "c2c_rounds": out["rounds"]}


def measure_membw(rounds: int = 5, mib: int = 256) -> dict[str, Any]:
    """validation/bin/membw: one CPU clearing `mib` MiB, then every CPU of
    the host at once (rep stosb, medians of interleaved rounds): what the
    node's memory sustains when they all ask (its shared bandwidth)."""
    r = subprocess.run([str(build_validation() / "membw"), "-r", str(rounds), "-m", str(mib)], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise HostError(f"membw failed: {why_failed(r)}")
    clear = {row["threads"]: row["gbps_per_thread"] for row in json.loads(r.stdout)["stream"] if row["kind"] == "clear"}
    n = max(clear)
    return {"membw_threads": n, "membw_clear_1_gbps": clear[1], "membw_clear_n_gbps": clear[n], "membw_rounds": rounds,
            "membw_mib": mib}


def shared_bw(m: dict[str, Any]) -> tuple[float, str] | None:
    """The node's shared bandwidth from membw: the CPUs' sum when all of
    them clearing at once got less each than one alone (the node
    saturated; 10% is beyond membw's round-to-round spread on a quiet
    host), else None (it did not saturate: what it sustains is more than
    this host's CPUs can ask for)."""
    if "membw_threads" not in m or m["membw_threads"] < 2:
        return None
    n, one, each = m["membw_threads"], m["membw_clear_1_gbps"], m["membw_clear_n_gbps"]
    if each >= 0.9 * one:
        return None
    return n * each, (f"validation/membw.c, median of {m['membw_rounds']} interleaved rounds: {n} CPUs clearing {m.get('membw_mib', 256)} MiB each "
                      f"at once, {each:.1f} GB/s each against {one:.1f} alone: their sum")


def plan(sizes_kib: list[int]) -> list[tuple[int, list[tuple[str, int]]]]:
    """(folio size in KiB, [(case, MiB)]) per setting, in run order."""
    out: list[tuple[int, list[tuple[str, int]]]] = [(4, [
        ("anon", COLD_MIB), ("anon", WARM_MIB), ("zero", COLD_MIB), ("shmem-shared", COLD_MIB),
        ("shmem-private", COLD_MIB), ("retouch", COLD_MIB), ("mprotect", COLD_MIB), ("anon-dontneed", COLD_MIB)])]
    for s in sizes_kib:
        if 4 < s < PMD_KIB and s not in HELD_OUT_KIB:
            out.append((s, [("anon", COLD_MIB), ("anon", WARM_MIB)]))
    if PMD_KIB in sizes_kib:
        out.append((PMD_KIB, [("anon", m) for m in SWEEP_MIB] + [("retouch", COLD_MIB)]))
    return out


def key(size_kib: int, case: str, mib: int) -> str:
    return f"{size_kib}K:{case}:{mib}"


def run_faultcost(binary: Path, case: str, mib: int, passes: int, tmpdir: str) -> dict[str, Any]:
    r = subprocess.run([str(binary), case, "-m", str(mib), "-p", str(passes), "-d", tmpdir],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise HostError(f"faultcost {case} failed: {why_failed(r)}")
    return json.loads(r.stdout)


def measure_series(rounds: int, passes: int = 3, quiet: bool = True, tmpdir: str | None = None,
                   syscalls: dict[str, list[dict[str, Any]]] | None = None,
                   image: list[dict[str, Any]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every case of `plan` in every round, rounds interleaved, and with
    `syscalls` every case of validation/syscost.c too (into it, at 4 KiB
    folios, in the same rounds); with `image`, the process image once
    (into it, at 4 KiB folios: the image's pages are faulted in folios of
    whatever size the knobs allow). Needs the THP knobs (root): a host
    without them is measured at 4 KiB only."""
    binary = build_validation() / "faultcost"
    tmpdir = tmpdir or ("/dev/shm" if tmp_fs_kind("/dev/shm") == "tmpfs" else "/tmp")
    can_knob = knobs_available() is None
    sizes = mthp_sizes_kib() if can_knob else []
    series: dict[str, list[dict[str, Any]]] = {}
    for rnd in range(rounds):
        for size, cases in plan(sizes):
            want = knobs_for([] if size == 4 else [size]) if can_knob else {}
            with thp_settings(want):
                for case, mib in cases:
                    _say(f"foliosim calibrate: round {rnd + 1}/{rounds}: {size} KiB folios, {case}, {mib} MiB", quiet)
                    rec = run_faultcost(binary, case, mib, passes, tmpdir)
                    changed = knobs_changed(want)
                    if changed:
                        raise HostError(f"THP knobs changed by another process during calibration: {changed[0]}; rerun when it is done")
                    series.setdefault(key(size, case, mib), []).append(rec)
                if size == 4 and image is not None and not image:
                    _say("foliosim calibrate: the process image (validation/image_layout.c)", quiet)
                    image.extend(procimage.measure())
                if syscalls is not None and (size == 4 or size in syscost.CASE_KIB.values()):
                    syscost.measure_round(syscalls, passes, tmpdir,
                                          lambda what, r=rnd: _say(f"foliosim calibrate: round {r + 1}/{rounds}: system calls, {what}", quiet),
                                          kib=size)
                    changed = knobs_changed(want)
                    if changed:
                        raise HostError(f"THP knobs changed by another process during calibration: {changed[0]}; rerun when it is done")
    return series


# -------------------------------------------------------------------- fit --
def med(series: dict[str, list[dict[str, Any]]], k: str, field: str = "ns_per_page") -> float:
    return statistics.median(r[field] for r in series[k])


def spread(series: dict[str, list[dict[str, Any]]], k: str, field: str = "ns_per_page") -> tuple[float, float]:
    v = [r[field] for r in series[k]]
    return min(v), max(v)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x: (a, b, root-mean-square residual)."""
    n = len(xs)
    if n < 2:
        raise ValueError("a line needs two points")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a line needs two distinct x")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    rms = (sum((a + b * x - y) ** 2 for x, y in zip(xs, ys, strict=True)) / n) ** 0.5
    return a, b, rms


def warm_share(k_mib: float, r_mib: float) -> float:
    """The share of a region of R MiB, written in order, freed, and
    written again, that the model finds still in caches of K MiB: a frame
    is warm while what the CPU brought in since its last write fits
    (hw/cache.rs), and the region is reused last-written first, so the
    k-th page reused has 2k pages brought in since its write (the k
    written after it, the k reused before it): min(1, K / 2R)."""
    return min(1.0, k_mib / (2 * r_mib))


def fit_warm_cache(regions_mib: list[float], per_page: list[float], warm: float) -> tuple[float, float, float]:
    """Per page p(R) = warm + (cold - warm) * (1 - warm_share(K, R)) over
    the regions R: least squares over K (a 1/8 MiB grid) and cold:
    (K MiB, cold, rms)."""
    best: tuple[float, float, float] | None = None
    for i in range(1, 8 * 512 + 1):
        k = i / 8
        xs = [1 - warm_share(k, r) for r in regions_mib]
        sxx = sum(x * x for x in xs)
        if sxx == 0:
            continue
        # p - warm = (cold - warm) x: slope through the origin.
        d = sum(x * (p - warm) for x, p in zip(xs, per_page, strict=True)) / sxx
        rms = (sum((warm + d * x - p) ** 2 for x, p in zip(xs, per_page, strict=True)) / len(xs)) ** 0.5
        if best is None or rms < best[2] - 1e-9:
            best = (k, warm + d, rms)
    if best is None:
        raise ValueError("no cache size fits")
    return best


def per_fault(series: dict[str, list[dict[str, Any]]], size: int, mib: int) -> tuple[float, float]:
    """(pages per fault, ns per fault) of the anonymous write faults."""
    k = key(size, "anon", mib)
    fpp = med(series, k, "faults_per_page")
    return 1 / fpp, med(series, k) / fpp


class Derivation:
    """Profile values from the measurements, each with how it was measured,
    and the fits' lines (value, residual) for the report."""

    def __init__(self, micro: dict[str, Any], series: dict[str, list[dict[str, Any]]], rounds: int,
                 model_over: tuple[float, float] = (0.0, 0.0)):
        self.m, self.s, self.rounds = micro, series, rounds
        # What the model charges on the 4 KiB faults and their munmap beyond
        # the terms derive() accounts for (the pcp refills and drains
        # through the buddy lists, the page-table pages, the LRU batches),
        # model minus host; found by running it (fit_on_model).
        self.model_over = model_over
        # validation/syscost.c's series, and the model against them once
        # the system calls' terms are fitted (calibrate()).
        self.syscalls: dict[str, list[dict[str, Any]]] = {}
        self.sys_rows: list[dict[str, Any]] = []
        # validation/image_layout.c's mappings, and the model's image
        # against them (procimage.compare).
        self.image_host: list[dict[str, Any]] = []
        self.image: dict[str, Any] | None = None
        self.g = generic_profile()
        self.vals: dict[str, tuple[float, str]] = {}
        self.fits: list[str] = []
        self.derive()

    def put(self, k: str, v: float, how: str, floor: float = 0.0) -> float:
        if v < floor:
            how = f"{how}; the measurement gives {v:.1f}, below the floor {floor:g} used"
            v = floor
        self.vals[k] = (v, how)
        return v

    def sp(self, k: str, field: str = "ns_per_page") -> str:
        lo, hi = spread(self.s, k, field)
        return f"{lo:.0f}-{hi:.0f}"

    def derive(self) -> None:
        s, m, gc = self.s, self.m, self.g["cost"]
        src = f"validation/faultcost.c, median of {self.rounds} interleaved rounds"
        sizes = sorted({int(k.split("K:")[0]) for k in s})
        mthp = [x for x in sizes if 4 < x < PMD_KIB]
        have_pmd = PMD_KIB in sizes
        # The cache size: the PMD THP region sweep (a cleared 2 MiB folio is
        # the cleanest clearing signal); without PMD THP, the generic value.
        if have_pmd:
            regions = [r for r in SWEEP_MIB if key(PMD_KIB, "anon", r) in s]
            pp = [med(s, key(PMD_KIB, "anon", r)) for r in regions]
            k_mib, cold_pp, rms = fit_warm_cache([float(r) for r in regions], pp, pp[0])
            self.fits.append(f"warm cache: PMD THP faults per 4 KiB page over {'/'.join(map(str, regions))} MiB regions "
                             f"= {' / '.join(f'{x:.0f}' for x in pp)} ns; fit warm {pp[0]:.0f} + (cold {cold_pp:.0f} - warm) * "
                             f"max(0, 1 - K/2R): K = {k_mib:g} MiB, residual {rms:.1f} ns rms")
            l2_kib = float(m.get("l2_kib") or self.g["cpu"]["l2_kib"])
            self.put("cpu.llc_kib", max(k_mib * 1024 - l2_kib, 0.0),
                     f"{src}: what one CPU finds still in cache, less its {l2_kib:.0f} KiB L2: PMD THP write faults over {'/'.join(map(str, regions))} MiB regions reused last-freed first, per page "
                     f"{' / '.join(f'{x:.0f}' for x in pp)} ns, least squares of warm + (cold - warm) * max(0, 1 - K/2R) "
                     "(reused last-written first, the k-th page reused has 2k pages brought in since its write): "
                     f"K = {k_mib:g} MiB (residual {rms:.1f} ns rms)")
        else:
            k_mib = (self.g["cpu"]["l2_kib"] + self.g["cpu"]["llc_kib"]) / 1024
        f_cold = warm_share(k_mib, COLD_MIB)
        # The 4 KiB faults and the zero-page read fault.
        a_c_meas, a_w = med(s, key(4, "anon", COLD_MIB)), med(s, key(4, "anon", WARM_MIB))
        a_c = (a_c_meas - f_cold * a_w) / (1 - f_cold)
        zero = med(s, key(4, "zero", COLD_MIB))
        clear_w = m["clear_warm_ns"]
        fc: float | None = None
        fw: float | None = None
        sc: float | None = None
        sw: float | None = None
        # Large folios: time per fault = fixed + per-page x pages, fitted as
        # time per page = per-page + fixed / pages (every size weighs alike).
        if len(mthp) >= 2:
            xc, yc = zip(*(per_fault(s, x, COLD_MIB) for x in mthp), strict=True)
            xw, yw = zip(*(per_fault(s, x, WARM_MIB) for x in mthp), strict=True)
            sc_meas, fc_meas, rc = fit_line([1 / x for x in xc], [y / x for x, y in zip(xc, yc, strict=True)])
            sw, fw, rw = fit_line([1 / x for x in xw], [y / x for x, y in zip(xw, yw, strict=True)])
            sc = (sc_meas - f_cold * sw) / (1 - f_cold)
            fc = (fc_meas - f_cold * fw) / (1 - f_cold)
            for lab, xs, ys, a, b, r in (("cold", xc, yc, fc_meas, sc_meas, rc), ("warm", xw, yw, fw, sw, rw)):
                self.fits.append(f"anon fault, {lab} ({COLD_MIB if lab == 'cold' else WARM_MIB} MiB regions), sizes "
                                 f"{'/'.join(f'{x}K' for x in mthp)}: per fault = {a:.0f} + {b:.1f} ns x pages "
                                 f"(residual {r:.1f} ns per page rms over {len(xs)} sizes; pages:ns per fault "
                                 + ", ".join(f"{x:.0f}:{y:.0f}" for x, y in zip(xs, ys, strict=True)) + ")")
            self.fits.append(f"cold fit without the warm share ({100 * f_cold:.1f}% of a {COLD_MIB} MiB region): {fc:.0f} + {sc:.1f} ns x pages")
        self.put("zero_warm_bw_gbps", 4096 / clear_w, "validation/calibrate.c: rep stosb (clear_page_erms' instruction) of 4 KiB pages "
                 f"over a 1 MiB working set, {clear_w:.1f} ns per page")
        if m.get("copy_warm_ns"):
            self.put("copy_warm_bw_gbps", 4096 / m["copy_warm_ns"], "validation/calibrate.c: rep movsb (copy_user_generic's instruction) "
                     f"of the 4 KiB pages of a 512 KiB working set into a 4 KiB buffer, {m['copy_warm_ns']:.1f} ns per page")
        # PMD THP faults: per page a clear and a tail preparation, nothing per
        # PTE. Warm, they give the tail; cold, the cold clear.
        if have_pmd and fc is not None and fw is not None:
            n, t_pmd_w = per_fault(s, PMD_KIB, WARM_MIB)
            s_pmd_w = (t_pmd_w - fw) / n
            tail = self.put("prep_tail_ns", s_pmd_w - clear_w,
                            f"{src}: a PMD THP fault over a {WARM_MIB} MiB region, {t_pmd_w:.0f} ns ({self.sp(key(PMD_KIB, 'anon', WARM_MIB))} ns/page), "
                            f"is {s_pmd_w:.1f} ns per page beyond the warm mTHP fit's fixed part ({fw:.0f} ns); minus the warm clear", floor=0.0)
            n, t_pmd_c = per_fault(s, PMD_KIB, COLD_MIB)
            s_pmd_c = ((t_pmd_c - f_cold * t_pmd_w) / (1 - f_cold) - fc) / n
            clear_c = s_pmd_c - tail
            self.fits.append(f"PMD THP: warm {s_pmd_w:.1f} ns per page = clear {clear_w:.1f} + tail {tail:.1f}; cold {s_pmd_c:.1f} "
                             f"(without the warm share) = tail + clear {clear_c:.1f} ns per cold 4 KiB page")
            self.put("node.zero_bw_gbps", 4096 / max(clear_c, clear_w),
                     f"{src}: PMD THP write faults over {COLD_MIB} MiB, {s_pmd_c:.0f} ns per page beyond the cold mTHP fit's fixed part "
                     f"({fc:.0f} ns), minus prep_tail_ns: {clear_c:.0f} ns per cold 4 KiB page")
        else:
            clear_c = clear_w + (a_c - a_w)
            tail = self.put("prep_tail_ns", gc["prep_tail_ns"], "[generic-x86] no PMD THP on this host to measure it")
            self.fits.append(f"clearing (no PMD THP): warm {clear_w:.1f} + the 4 KiB faults' cold-warm difference {a_c - a_w:.1f} = cold {clear_c:.1f} ns")
            self.put("node.zero_bw_gbps", 4096 / max(clear_c, clear_w),
                     f"{src}: the warm clear ({clear_w:.1f} ns) + the difference of 4 KiB write faults over {COLD_MIB} MiB and {WARM_MIB} MiB")
        # A cold 4 KiB fault misses on more than the page it clears (its
        # struct page, the free-list links): what its cold-warm difference
        # has beyond the clears' is charged once per cold folio.
        cold_folio = self.put("alloc_cold_ns", a_c - a_w - (clear_c - clear_w),
                              f"{src}: 4 KiB write faults over {COLD_MIB} MiB (cold, without the warm share) and {WARM_MIB} MiB (warm) regions "
                              f"differ by {a_c - a_w:.1f} ns, the clears by {clear_c - clear_w:.1f} ns: the misses of a cold folio beyond its clear",
                              floor=0.0)
        self.fits.append(f"cold folio: the 4 KiB faults' cold-warm difference {a_c - a_w:.1f} ns minus the clears' {clear_c - clear_w:.1f} = "
                         f"{a_c - a_w - (clear_c - clear_w):.1f} ns per cold folio"
                         + (f"; check: the mTHP fits' fixed parts differ by {fc - fw:.1f} ns (residual {fc - fw - cold_folio:+.1f} ns)"
                            if fc is not None and fw is not None else ""))
        # Zap and free per folio: munmap of what the faults mapped. Per page
        # of a PTE-mapped large folio: pte_clear + rmap_page + free_tail;
        # of a PMD THP: free_tail.
        u1 = med(s, key(4, "anon", COLD_MIB), "unmap_ns_per_page")
        if len(mthp) >= 2 and have_pmd:
            pages = [1 / med(s, key(x, "anon", COLD_MIB), "faults_per_page") for x in mthp]
            per_folio = [med(s, key(x, "anon", COLD_MIB), "unmap_ns_per_page") * n for x, n in zip(mthp, pages, strict=True)]
            zp, z0, zr = fit_line([1 / x for x in pages], [y / x for x, y in zip(pages, per_folio, strict=True)])
            n = 1 / med(s, key(PMD_KIB, "anon", COLD_MIB), "faults_per_page")
            u_pmd = med(s, key(PMD_KIB, "anon", COLD_MIB), "unmap_ns_per_page") * n
            z_pmd = max((u_pmd - z0) / n, 0.0)
            self.fits.append(f"munmap per folio, sizes {'/'.join(f'{x}K' for x in mthp)}: {z0:.0f} + {zp:.1f} ns x pages "
                             f"(residual {zr:.1f} ns per page rms); PMD THP: {u_pmd:.0f} ns per folio = {z_pmd:.1f} ns per page beyond that fixed part")
            free_tail = self.put("free_tail_ns", z_pmd, f"{src}: munmap of {COLD_MIB} MiB of PMD THPs, {u_pmd:.0f} ns per folio, per page beyond "
                                 f"the fixed part of the mTHP munmap fit ({z0:.0f} ns)")
            per = max(zp - free_tail, 1.0) / 2
            half = (f"{src}: the mTHP munmap fit's {zp:.1f} ns per page minus free_tail_ns; [assumed] half of it: only the sum of "
                    "zap_pte_range's PTE clear and folio_remove_rmap_ptes' per-page mapcount drop is measured")
            self.put("pte_clear_ns", per, half)
            rmap_page = self.put("rmap_page_ns", per, half)
        else:
            for k in ("free_tail_ns", "pte_clear_ns", "rmap_page_ns"):
                self.put(k, gc[k], "[generic-x86] no large folios on this host to measure it")
            rmap_page = gc["rmap_page_ns"]
        # What a PTE-mapped large folio's fault costs per page beyond a PMD
        # THP's: set_ptes and the per-page rmap updates.
        if have_pmd and sc is not None and fc is not None:
            per_pte = sc - s_pmd_c
            self.put("pte_set_ns", per_pte - rmap_page,
                     f"{src}: the cold mTHP fit's {sc:.1f} ns per page minus the cold PMD THP's {s_pmd_c:.1f} (set_ptes and the per-page "
                     "rmap updates of a PTE-mapped folio), minus rmap_page_ns", floor=0.5)
            if sw is not None:
                warm_model = clear_w + tail + self.vals["pte_set_ns"][0] + rmap_page
                self.fits.append(f"mTHP warm check: {sw:.1f} ns per page measured, {warm_model:.1f} modelled (residual {sw - warm_model:+.1f} ns: "
                                 "the PTE and rmap work is taken from the cold faults)")
        else:
            self.put("pte_set_ns", gc["pte_set_ns"], "[generic-x86] no large folios on this host to measure it")
        # The 4 KiB fault: the zero-page read fault gives the common path.
        walk_c = max(med(s, key(4, "retouch", COLD_MIB)) - med(s, key(PMD_KIB, "retouch", COLD_MIB)), 0.5) if have_pmd else None
        if walk_c is not None:
            self.put("walk_cached_ns", walk_c, f"{src}: a store to each populated 4 KiB page of {COLD_MIB} MiB in order "
                     f"({med(s, key(4, 'retouch', COLD_MIB)):.1f} ns) minus the same over PMD THPs ({med(s, key(PMD_KIB, 'retouch', COLD_MIB)):.1f} ns): "
                     "the TLB miss and walk into a cached PTE table")
        walk_cached = walk_c if walk_c is not None else self.g["tlb"]["walk_cached_ns"]
        pte_set = self.vals["pte_set_ns"][0]
        fixed = gc["trap_ns"] + gc["vma_lookup_ns"] + pte_set + 2 * walk_cached + gc["user_access_ns"]
        self.put("fault_base_ns", zero - fixed,
                 f"{src}: the zero-page read fault, {zero:.0f} ns ({self.sp(key(4, 'zero', COLD_MIB))}), minus [generic-x86] trap_ns, vma_lookup_ns, "
                 "user_access_ns, pte_set_ns and the two walks (before and after the fault)", floor=10.0)
        parts = ["alloc_pcp_ns", "rmap_ns", "memcg_charge_ns", "lru_add_ns"]
        # lru_lock_per_folio_ns stays generic (the model charges it per
        # folio of a batch drain): the parts are scaled on what it leaves.
        lock_share = gc["lru_lock_per_folio_ns"] / gc["lru_batch"]
        gen_extra = sum(gc[k] for k in parts)
        over_f, over_u = self.model_over
        extra = a_c - zero - clear_c - cold_folio - over_f
        scale = max(extra - lock_share, 0.1 * gen_extra) / gen_extra
        self.fits.append(f"4 KiB anon write fault: cold {a_c:.0f} ns (measured {a_c_meas:.0f}, {self.sp(key(4, 'anon', COLD_MIB))}, without the warm share), "
                         f"warm {a_w:.0f}; minus the zero-page fault {zero:.0f}, the cold clear {clear_c:.0f}, alloc_cold_ns {cold_folio:.0f}"
                         + (f" and what else the model charges there ({over_f:+.0f} ns, its 4 KiB faults minus the host's before this fit)"
                            if over_f else "")
                         + f": {extra:.0f} ns of allocation, charge, rmap and LRU = generic split x {scale:.3f} (with [generic-x86] "
                         f"lru_lock_per_folio_ns / lru_batch, {lock_share:.1f} ns, unscaled); warm check: "
                         f"{a_w - zero - clear_w - over_f:.0f} ns (residual {a_w - zero - clear_w - over_f - extra:+.0f} ns)")
        for k in parts:
            self.put(k, gc[k] * scale, f"[generic-x86] {gc[k]} x {scale:.3f}: the generic split scaled so that the modelled 4 KiB anonymous "
                     f"write fault totals the measured {a_c:.0f} ns cold, {a_w:.0f} ns warm ({src})"
                     + (f", with what else the model charges there ({over_f:+.0f} ns, model minus host before this fit)" if over_f else ""))
        rmap = self.vals["rmap_ns"][0]
        # The order-0 zap: pte_clear + rmap + the LRU removal + the folio's
        # free. What the free costs beyond the pcp list add is the same for
        # a folio of any order (a large one leaving by the buddy path does
        # it too): it goes to free_folio_ns, not to free_pcp_ns.
        self.put("free_pcp_ns", gc["free_pcp_ns"], "[generic-x86] the pcp list add alone: a 4 KiB munmap cannot tell it from the "
                 "per-folio free work (free_folio_ns)")
        self.put("free_folio_ns", u1 - self.vals["pte_clear_ns"][0] - rmap - gc["lru_lock_per_folio_ns"] - gc["free_pcp_ns"] - over_u,
                 f"{src}: munmap of {COLD_MIB} MiB of 4 KiB pages, {u1:.0f} ns per page ({self.sp(key(4, 'anon', COLD_MIB), 'unmap_ns_per_page')}), "
                 "minus pte_clear_ns, rmap_ns and [generic-x86] lru_lock_per_folio_ns and free_pcp_ns (the pcp list add)"
                 + (f" and what else the model charges there ({over_u:+.1f} ns per page, model minus host before this fit)" if over_u else ""),
                 floor=0.0)
        # tmpfs file faults.
        sh, pr = med(s, key(4, "shmem-shared", COLD_MIB)), med(s, key(4, "shmem-private", COLD_MIB))
        self.put("pagecache_lookup_ns", sh - zero - rmap,
                 f"{src}: the shared tmpfs write fault on a cached page, {sh:.0f} ns ({self.sp(key(4, 'shmem-shared', COLD_MIB))}), minus the "
                 "zero-page fault and rmap_ns", floor=5.0)
        alloc = (sum(self.vals[k][0] for k in ("alloc_pcp_ns", "memcg_charge_ns", "lru_add_ns")) + gc["lru_lock_per_folio_ns"] / gc["lru_batch"]
                 + cold_folio)
        copy = pr - sh - alloc
        self.put("node.copy_bw_gbps", 4096 / max(copy, 1.0),
                 f"{src}: the private tmpfs write fault (copy of a cached page), {pr:.0f} ns ({self.sp(key(4, 'shmem-private', COLD_MIB))}), minus the "
                 f"shared one and the allocation (a cold folio), charge and LRU work: {copy:.0f} ns per 4 KiB copied")
        # The mprotect scan (issue #18 point 6).
        mp = med(s, key(4, "mprotect", COLD_MIB))
        self.put("change_pte_scan_ns", mp - pte_set,
                 f"{src}: mprotect(PROT_READ) of {COLD_MIB} MiB of populated 4 KiB pages, {mp:.1f} ns per page ({self.sp(key(4, 'mprotect', COLD_MIB))}), "
                 "minus pte_set_ns: the NUMA scan's skip path reads the same PTEs and folios but writes none", floor=1.0)
        if "c2c_transfer_ns" in m:
            self.put("cacheline_same_socket_ns", m["c2c_transfer_ns"],
                     f"validation/c2c.c: one line handed between CPUs 0 and 1 by compare-and-swap, median of {m['c2c_rounds']} rounds "
                     f"({m['c2c_min_ns']:.0f}-{m['c2c_max_ns']:.0f} ns a transfer)")
        # From calibrate.c.
        syscall = m["syscall_ns"]
        self.put("syscall_ns", syscall, "validation/calibrate.c: getppid() loop")
        if "read_fault_alone_after_getppid_ns" in m:
            # Each fault timed alone: after a getppid() and back to back.
            # (Timing the pairs' loop and taking the call off leaves the
            # difference of three noisy figures: 0-102 ns on one host.)
            fs, fr = m["read_fault_alone_after_getppid_ns"], m["read_fault_alone_ns"]
            self.put("fault_after_syscall_ns", fs - fr,
                     f"validation/calibrate.c: a zero-page read fault timed alone right after a getppid() ({fs:.0f} ns) minus one "
                     f"right after another fault ({fr:.0f} ns)")
        elif "zero_fault_after_syscall_ns" in m:
            # Both loops of the same zero-page read faults: the fault alone
            # and the fault after a getppid(), its syscall_ns taken off.
            fs, fr = m["zero_fault_after_syscall_ns"], m["zero_page_read_fault_ns"]
            self.put("fault_after_syscall_ns", fs - syscall - fr,
                     f"validation/calibrate.c: zero-page read faults each right after a getppid() ({fs:.0f} ns per pair) minus syscall_ns "
                     f"and the same faults back to back ({fr:.0f} ns)")
        if "read_fault_after_free_ns" in m:
            # Faults each timed alone right after a madvise(MADV_DONTNEED) of
            # a page elsewhere: one just written (zapped, freed, flushed)
            # against one never touched (nothing to do).
            r0, r1 = m["read_fault_after_madvise_ns"], m["read_fault_after_free_ns"]
            w0, w1 = m["write_fault_after_madvise_ns"], m["write_fault_after_free_ns"]
            self.put("fault_after_free_ns", r1 - r0,
                     f"validation/calibrate.c: a zero-page read fault right after a madvise(MADV_DONTNEED) that freed a page elsewhere ({r1:.0f} ns) "
                     f"minus one right after a madvise of an empty page ({r0:.0f} ns)", floor=0.0)
            self.put("alloc_after_free_ns", (w1 - w0) - (r1 - r0),
                     f"validation/calibrate.c: the same pair of anonymous write faults ({w1:.0f} and {w0:.0f} ns) differ by "
                     f"{w1 - w0:.0f} ns, the read faults' {r1 - r0:.0f} ns of it taken off", floor=0.0)
        self.put("mmap_ns", m["mmap_ns"] - syscall, f"validation/calibrate.c: mmap of 128 MiB anonymous ({m['mmap_ns']:.0f} ns) minus syscall_ns", floor=10.0)
        self.put("munmap_ns", m["munmap_ns"] - syscall, f"validation/calibrate.c: munmap of an untouched 128 MiB mapping ({m['munmap_ns']:.0f} ns) minus syscall_ns", floor=10.0)
        dn1 = med(s, key(4, "anon-dontneed", COLD_MIB), "unmap_ns_per_page")
        self.put("madvise_ns", m["dontneed_one_page_call_ns"] - syscall - dn1 - gc["tlb_flush_one_ns"],
                 f"validation/calibrate.c: a one-page MADV_DONTNEED call ({m['dontneed_one_page_call_ns']:.0f} ns) minus syscall_ns, the per-page "
                 f"zap ({dn1:.0f} ns, {src}) and [generic-x86] tlb_flush_one_ns", floor=10.0)


def _cpu_topology() -> tuple[int, int, float | None]:
    n = os.cpu_count() or 1
    pkgs = set()
    for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/physical_package_id"):
        with contextlib.suppress(OSError):
            pkgs.add(p.read_text().strip())
    sockets = max(1, len(pkgs))
    if n % sockets:
        sockets = 1
    mhz = None
    try:
        m = re.search(r"^cpu MHz\s*:\s*([0-9.]+)", Path("/proc/cpuinfo").read_text(), re.M)
        mhz = float(m.group(1)) if m else None
    except OSError:
        pass
    return n, sockets, mhz


def _nodes() -> list[tuple[int, bool]]:
    """(MiB, has_cpus) per NUMA node."""
    out = []
    for d in sorted(Path("/sys/devices/system/node").glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        try:
            m = re.search(r"MemTotal:\s+(\d+) kB", (d / "meminfo").read_text())
            cpus = (d / "cpulist").read_text().strip()
        except OSError:
            continue
        if m:
            out.append((int(m.group(1)) // 1024, bool(cpus)))
    if len(out) == 1:
        # One node: /proc/meminfo also counts hot-plugged memory sysfs may miss.
        m = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
        if m:
            out = [(max(out[0][0], int(m.group(1)) // 1024), True)]
    if not out:
        m = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
        out = [(int(m.group(1)) // 1024 if m else 4096, True)]
    return out


def _threads_per_core() -> int:
    try:
        sib = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list").read_text().strip()
    except OSError:
        return 1
    n = 0
    for part in sib.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return max(n, 1)


def _copied(why: str = "not measured here") -> str:
    """The tag of a value taken from generic-x86 (docs/profiles.md)."""
    return f"[assumed] copied from generic-x86: {why}"


def _tag(how: str) -> str:
    """A derivation's `how` as a tagged comment (hw/provenance.rs): the
    program that measured it, or generic-x86's value."""
    if how.startswith("[generic-x86]"):
        return _copied(how[len("[generic-x86]"):].strip() or "not measured here")
    for prog in ("validation/syscost.c", "validation/faultcost.c", "validation/calibrate.c", "validation/membw.c", "validation/c2c.c"):
        if prog in how:
            return f"[measured: {prog}] {how}"
    return f"[assumed] {how}"


def _f(v: float) -> str:
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3f}"


def make_profile(d: Derivation, name: str = "host") -> str:
    g, m, vals = d.g, d.m, d.vals
    gc, gt = g["cost"], g["tlb"]
    ncpu, sockets, mhz = _cpu_topology()
    nodes = _nodes()
    huge_ok = m.get("huge_fraction", 0) >= 0.9
    walk = m["latency_4k_ns"] - m["latency_2m_ns"]
    L: list[str] = []
    L.append(f"# Machine profile measured on this host by `foliosim calibrate` (validation/faultcost.c and validation/calibrate.c; {d.rounds} interleaved rounds).")
    L.append("# Values tagged [assumed] copied from generic-x86 could not be measured and come from profiles/generic-x86.toml.")
    for line in d.fits:
        L.append(f"# fit: {line}")
    L.append(f"# Raw microbenchmarks: {json.dumps(m, sort_keys=True)}")
    L.append(f'name = "{name}"')
    L.append(f'description = "This host as measured by foliosim calibrate: {ncpu} CPUs, {sum(n for n, _ in nodes)} MiB"')
    L.append("")
    gcpu = g["cpu"]
    L.append("[cpu]")
    L.append(f"nr_cpus = {ncpu}            # [assumed] os.cpu_count() of this host")
    L.append(f"sockets = {sockets}            # [assumed] distinct physical_package_id in /sys/devices/system/cpu")
    L.append("page_size_kib = 4       # [assumed] the x86-64 and arm64 base page")
    clock = m.get("clock_ghz")
    if clock and clock <= MAX_CLOCK_GHZ:
        L.append(f"freq_ghz = {clock:.3f}      # [measured: validation/calibrate.c] a chain of dependent adds, one per cycle"
                 + (f" (/proc/cpuinfo says {mhz / 1000:.3f})" if mhz else ""))
    elif mhz:
        why = f" (the add chain ran at {clock:.1f} GHz: not a clock, a core that retires more than one a cycle)" if clock else ""
        L.append(f"freq_ghz = {mhz / 1000:.3f}      # [assumed] /proc/cpuinfo cpu MHz{why}")
    else:
        L.append(f"freq_ghz = {gcpu['freq_ghz']}      # {_copied('/proc/cpuinfo has no cpu MHz')}")
    model = m.get("cpu_model", "")
    L.append(f'core = ""              # [assumed] unknown ({model or "no model name"}): name this core (a key of profiles/rule.toml) '
             "to derive other machines from this host (docs/profiles.md)")
    L.append(f"threads_per_core = {_threads_per_core()}    # [assumed] CPUs of /sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
    L.append(f"smt_throughput_ratio = {gcpu['smt_throughput_ratio']}    # {_copied()}")
    if m.get("l2_kib"):
        L.append(f"l2_kib = {int(m['l2_kib'])}    # [measured: validation/calibrate.c] sysconf(_SC_LEVEL2_CACHE_SIZE)")
    else:
        L.append(f"l2_kib = {gcpu['l2_kib']}    # {_copied('the C library reports no L2 size')}")
    if "cpu.llc_kib" in vals:
        v, how = vals["cpu.llc_kib"]
        L.append(f"llc_kib = {round(v)}    # {_tag(how)}")
    else:
        L.append(f"llc_kib = {gcpu['llc_kib']}    # {_copied('no PMD THP on this host to size the cache')}")
    L.append(f"interconnect_bw_gbps = {gcpu['interconnect_bw_gbps']}    # {_copied()}")
    for mib, has_cpus in nodes:
        L.append("")
        L.append("[[nodes]]")
        L.append('kind = "dram"')
        L.append(f"mem_mib = {mib}        # MemTotal of this node (/sys/devices/system/node)")
        L.append(f"has_cpus = {'true' if has_cpus else 'false'}")
        if huge_ok:
            L.append(f"latency_ns = {_f(m['latency_2m_ns'])}    # [measured: validation/calibrate.c] dependent loads over 1 GiB with 2 MiB pages "
                     "(no TLB misses), one line per 4 KiB")
        else:
            L.append(f"latency_ns = {_f(m['latency_4k_ns'] - gt['walk_ns'])}    # [measured: validation/calibrate.c] dependent loads over 1 GiB with "
                     "4 KiB pages minus generic-x86's walk_ns (2 MiB pages unavailable)")
        L.append(f"read_bw_gbps = {_f(m['read_bw_gbps'])}    # [measured: validation/calibrate.c] one core summing 256 MiB sequentially")
        zb, zhow = vals["node.zero_bw_gbps"]
        L.append(f"zero_bw_gbps = {_f(zb)}    # {_tag(zhow)}")
        L.append("zero_call_ns = 0.0    # [assumed] clear_page (rep stosb) per 4 KiB page: the per-page overheads are prep_tail_ns, no per-call warm-up")
        cb, chow = vals["node.copy_bw_gbps"]
        L.append(f"copy_bw_gbps = {_f(cb)}    # {_tag(chow)}")
        written_node = {"kind", "mem_mib", "has_cpus", "latency_ns", "read_bw_gbps", "zero_bw_gbps", "zero_call_ns", "copy_bw_gbps"}
        sb = shared_bw(m)
        if sb is not None:
            L.append(f"shared_bw_gbps = {_f(sb[0])}    # {_tag(sb[1])}")
            written_node.add("shared_bw_gbps")
        for k, v in g["nodes"][0].items():
            if k not in written_node:
                L.append(f"{k} = {_value(v)}    # {_copied()}")
    L.append("")
    L.append("[tlb]")
    L.append("# Geometry: generic-x86's (cpuid leaf 0x18 is not parsed).")
    for k in ["l1d_entries", "l1d_ways", "l1i_entries", "l1i_ways", "l1d_2m_entries", "l1d_2m_ways", "stlb_entries", "stlb_ways"]:
        L.append(f"{k} = {gt[k]}    # {_copied()}")
    L.append(f"stlb_holds_2m = {'true' if gt['stlb_holds_2m'] else 'false'}    # {_copied()}")
    L.append(f"stlb_hit_ns = {gt['stlb_hit_ns']}    # {_copied()}")
    if huge_ok and walk > 0:
        L.append(f"walk_ns = {_f(walk)}    # [measured: validation/calibrate.c] a random pointer chase over 1 GiB, one line per page: latency with 4 KiB "
                 f"pages ({_f(m['latency_4k_ns'])} ns) minus with 2 MiB pages ({_f(m['latency_2m_ns'])} ns)")
    else:
        L.append(f"walk_ns = {gt['walk_ns']}    # {_copied('2 MiB pages unavailable or no measurable difference')}")
    if "walk_cached_ns" in vals:
        v, how = vals["walk_cached_ns"]
        L.append(f"walk_cached_ns = {_f(v)}    # {_tag(how)}")
    else:
        L.append(f"walk_cached_ns = {gt['walk_cached_ns']}    # {_copied('no PMD THP to compare with')}")
    L.append(f"contpte = {'true' if gt.get('contpte') else 'false'}    # {_copied()}")
    L.append(f"coalesce_order = {gt.get('coalesce_order', 0)}    # {_copied()}")
    written_tlb = {"l1d_entries", "l1d_ways", "l1i_entries", "l1i_ways", "l1d_2m_entries", "l1d_2m_ways", "stlb_entries",
                   "stlb_ways", "stlb_holds_2m", "stlb_hit_ns", "walk_ns", "walk_cached_ns", "contpte", "coalesce_order"}
    for k, v in gt.items():
        if k not in written_tlb:
            L.append(f"{k} = {_value(v)}    # {_copied()}")
    L.append("")
    L.append("[cost]")
    for k, v in gc.items():
        if k in vals:
            val, why = vals[k]
            L.append(f"{k} = {round(val) if isinstance(v, int) and not isinstance(v, bool) else _f(val)}    # {_tag(why)}")
        elif isinstance(v, bool):
            L.append(f"{k} = {'true' if v else 'false'}    # {_copied()}")
        else:
            L.append(f"{k} = {v}    # {_copied()}")
    L.append("")
    # Sections this command does not measure (e.g. the hypervisor host's
    # costs) come over whole from generic-x86, so the profile always loads.
    for sec, tbl in g.items():
        if sec in ("name", "description", "cpu", "nodes", "tlb", "cost") or not isinstance(tbl, dict):
            continue
        L.append(f"[{sec}]")
        for k, v in tbl.items():
            L.append(f"{k} = {_value(v)}    # {_copied()}")
        L.append("")
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------- verify --
def verify(profile: str, series: dict[str, list[dict[str, Any]]], sizes: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
    """The model on the measured anonymous-fault cases (page_fault1 over the
    same region, the same folio size): fault time per fault and munmap time
    per page, model against host."""
    from . import run as _run
    rows = []
    for k in sorted(series, key=lambda x: (int(x.split("K:")[0]), x)):
        size, case, mib = k.split(":")
        if case != "anon":
            continue
        kib, mib_i = int(size[:-1]), int(mib)
        if sizes is not None and kib not in sizes:
            continue
        knobs = {"anon_folio.mode": "upstream"}
        if kib == PMD_KIB:
            knobs["kernel/mm/transparent_hugepage/enabled"] = "always"
        elif kib > 4:
            knobs[f"kernel/mm/transparent_hugepage/hugepages-{kib}kB/enabled"] = "always"
        cfg = {"seed": 1, "machine": {"profile": profile}, "workload": {"name": "page_fault1", "size_mib": mib_i},
               "knobs": knobs, "run": {"warmup_s": 0.05, "duration_s": 0.1}}
        raw = _run(cfg).raw
        faults = raw["vmstat"].get("pgfault", 0)
        ops = raw["summary"]["ops_total"]
        # The pages the run's munmaps took down: whole regions. Not `ops`,
        # which counts the faults of a region the run ended in before its
        # munmap (one region of 128 MiB is a third of the run).
        unmapped = raw["vmstat"].get("foliosim_munmap", 0) * mib_i * 256
        t = raw.get("time_ns", {})
        if not faults or not ops or not unmapped:
            continue
        real_fault = med(series, k) / med(series, k, "faults_per_page")
        rows.append({"case": k, "pages_per_fault": ops / faults,
                     "fault_ns": (t.get("fault", 0) / faults, real_fault),
                     "unmap_ns_per_page": (t.get("munmap", 0) / unmapped, med(series, k, "unmap_ns_per_page"))})
    return rows


def format_verify(rows: list[dict[str, Any]]) -> list[str]:
    out = ["model against this host on the measured cases (page_fault1, same region and folio size):",
           f"  {'case':<22} {'pages/fault':>11} {'fault ns model':>15} {'host':>8} {'err':>7} {'munmap ns/page model':>21} {'host':>7} {'err':>7}"]
    for r in rows:
        (fm, fh), (um, uh) = r["fault_ns"], r["unmap_ns_per_page"]
        out.append(f"  {r['case']:<22} {r['pages_per_fault']:>11.1f} {fm:>15.0f} {fh:>8.0f} {100 * (fm - fh) / fh:>+6.1f}% "
                   f"{um:>21.1f} {uh:>7.1f} {100 * (um - uh) / uh:>+6.1f}%")
    return out


def fit_4k_on_model(d: Derivation, out: Path, name: str) -> Derivation:
    """The 4 KiB split as the model charges it: derive() accounts for the
    terms it names, but the model also charges, on the same faults and
    munmaps, work those terms leave out (pcp refills and drains through the
    buddy lists, page-table pages, LRU batches). Run the model on the
    measured 4 KiB cases and derive again with its excess, model minus host,
    taken off the split (faults, both regions) and off free_folio_ns (munmap):
    both are charged once per 4 KiB fault and per page unmapped, so one
    pass lands on the host up to the model's own nonlinearity."""
    for k in ("alloc_anon_folio_ns", "free_large_folio_ns", "alloc_cold_large_ns"):
        d.vals.setdefault(k, (0.0, "fitting"))
    write_text_atomic(out, make_profile(d, name=name))
    rows = verify(str(out.resolve()), d.s, sizes=(4,))
    if not rows:
        return d
    over_f = sum(r["fault_ns"][0] - r["fault_ns"][1] for r in rows) / len(rows)
    cold = [r for r in rows if r["case"].endswith(f":{COLD_MIB}")]
    over_u = sum(r["unmap_ns_per_page"][0] - r["unmap_ns_per_page"][1] for r in cold) / len(cold) if cold else 0.0
    return Derivation(d.m, d.s, d.rounds, model_over=(over_f, over_u))


def fit_file_zap_on_model(d: Derivation, out: Path, name: str) -> None:
    """zap_file_pte_ns: what the host's munmap of a written MAP_SHARED tmpfs
    mapping (faultcost's shmem-shared case) takes per page beyond everything
    else the model charges that munmap, run as page_fault3 over the same
    region with the term at 0. Writes the profile."""
    from . import run as _run
    k = key(4, "shmem-shared", COLD_MIB)
    if not d.s.get(k) or med(d.s, k, "unmap_ns_per_page") <= 0:
        return  # an older measurements file: generic-x86's value stays
    d.vals["zap_file_pte_ns"] = (0.0, "fitting")
    write_text_atomic(out, make_profile(d, name=name))
    cfg = {"seed": 1, "machine": {"profile": str(out.resolve())}, "workload": {"name": "page_fault3", "size_mib": COLD_MIB},
           "run": {"warmup_s": 0.05, "duration_s": 0.1}}
    raw = _run(cfg).raw
    unmapped = raw["vmstat"].get("foliosim_munmap", 0) * COLD_MIB * 256
    if not unmapped:
        raise HostError(f"calibrate: the model's page_fault3 over {COLD_MIB} MiB unmapped nothing in 0.1 s: cannot fit zap_file_pte_ns")
    model = raw.get("time_ns", {}).get("munmap", 0) / unmapped
    host = med(d.s, k, "unmap_ns_per_page")
    d.put("zap_file_pte_ns", host - model,
          f"validation/faultcost.c, median of {d.rounds} interleaved rounds: munmap of {COLD_MIB} MiB of a MAP_SHARED tmpfs file whose every "
          f"page was written, {host:.1f} ns per page ({d.sp(k, 'unmap_ns_per_page')}), minus what the model charges the same munmap "
          f"(page_fault3) with this term at 0, {model:.1f} ns", floor=0.0)
    d.fits.append(f"page-cache PTE zap beyond the rest of the model: {host - model:.0f} ns per page (host {host:.1f}, model {model:.1f})")
    write_text_atomic(out, make_profile(d, name=name))


def _weighted_fit(rows: list[dict[str, Any]], diff: Any, count: Any = None) -> float:
    """Least squares of diff(r) = x * count(r) (count 1: a weighted mean)
    over `rows`, each weighted per page (1 / pages^2): every size weighs
    alike, as in the per-page fits."""
    w = [1 / r["pages_per_fault"] ** 2 for r in rows]
    c = [count(r) if count else 1.0 for r in rows]
    den = sum(x * y * y for x, y in zip(w, c, strict=True))
    return sum(x * y * diff(r) for x, y, r in zip(w, c, rows, strict=True)) / den if den else 0.0


def fit_on_model(d: Derivation, out: Path, name: str) -> list[dict[str, Any]]:
    """The per-folio terms of large folios, each what the host's mTHP
    faults or munmaps take beyond everything else the model charges there,
    the model run on the measured cases with the term at 0:
    alloc_anon_folio_ns (the software work of every large folio) on the
    warm cases, where no miss is left to it; alloc_cold_large_ns (a cold
    large folio's misses beyond alloc_cold_ns) on the cold ones, over how
    many cold large folios the model allocates per fault there (a run with
    the term at syscost.PROBE tells); free_large_folio_ns on the cold
    munmaps.
    Writes the profile and returns the verification with the fitted
    values."""
    for k in ("alloc_anon_folio_ns", "free_large_folio_ns", "alloc_cold_large_ns"):
        d.vals[k] = (0.0, "fitting")
    write_text_atomic(out, make_profile(d, name=name))
    rows = [r for r in verify(str(out.resolve()), d.s) if 4 < int(r["case"].split("K:")[0]) < PMD_KIB]
    src = f"validation/faultcost.c, median of {d.rounds} interleaved rounds"
    cold = [r for r in rows if r["case"].endswith(f":{COLD_MIB}")]
    warm = [r for r in rows if r["case"].endswith(f":{WARM_MIB}")]
    if cold and warm:
        sizes = "/".join(r["case"].split(":")[0] for r in cold)
        host_minus_model = lambda r: r["fault_ns"][1] - r["fault_ns"][0]  # noqa: E731
        unmap_minus_model = lambda r: (r["unmap_ns_per_page"][1] - r["unmap_ns_per_page"][0]) * r["pages_per_fault"]  # noqa: E731
        a = _weighted_fit(warm, host_minus_model)
        f = _weighted_fit(cold, unmap_minus_model)
        d.fits.append(f"large-folio fault beyond the rest of the model, warm: {a:.0f} ns (host minus model per fault over {sizes}, "
                      f"{WARM_MIB} MiB: " + ", ".join(f"{host_minus_model(r):.0f}" for r in warm) + ")")
        d.fits.append(f"large-folio free beyond the rest of the model: {f:.0f} ns (host minus model munmap per folio over {sizes}, "
                      f"{COLD_MIB} MiB: " + ", ".join(f"{unmap_minus_model(r):.0f}" for r in cold) + ")")
        how = (f"{src}: least squares on the model: host minus model time per {{}} over the {{}} mTHP cases ({sizes}) "
               "with this term at 0, weighted per page (charged once per {})")
        d.put("alloc_anon_folio_ns", a, how.format("fault", f"{len(warm)} warm ({WARM_MIB} MiB)", "large folio"), floor=0.0)
        d.put("free_large_folio_ns", f, how.format("folio unmapped", f"{len(cold)} cold ({COLD_MIB} MiB)", "large folio"), floor=0.0)
        # The cold cases with alloc_anon_folio_ns in, the term at 0 and at
        # syscost.PROBE: what is left, over the cold large folios per fault.
        mthp = tuple(int(r["case"].split("K:")[0]) for r in cold)
        names = {r["case"] for r in cold}

        def cold_rows() -> dict[str, dict[str, Any]]:
            write_text_atomic(out, make_profile(d, name=name))
            return {r["case"]: r for r in verify(str(out.resolve()), d.s, sizes=mthp) if r["case"] in names}
        at0 = cold_rows()
        d.vals["alloc_cold_large_ns"] = (syscost.PROBE, "fitting")
        at1 = cold_rows()
        per_fault = {k: (at1[k]["fault_ns"][0] - r["fault_ns"][0]) / syscost.PROBE for k, r in at0.items() if k in at1}
        cold0 = [r for k, r in at0.items() if k in per_fault]
        c = _weighted_fit(cold0, host_minus_model, lambda r: per_fault[r["case"]])
        d.fits.append(f"cold large folio beyond alloc_cold_ns: {c:.0f} ns (host minus model per fault over {sizes}, {COLD_MIB} MiB: "
                      + ", ".join(f"{host_minus_model(r):.0f} over {per_fault[r['case']]:.2f} cold folios" for r in cold0) + ")")
        d.put("alloc_cold_large_ns", c, how.format("fault", f"{len(cold0)} cold ({COLD_MIB} MiB)", "large folio allocated cold")
              + f" and alloc_anon_folio_ns in, over the cold large folios per fault (a run with the term at {syscost.PROBE:.0f} ns)", floor=0.0)
    else:
        gc = d.g["cost"]
        for k in ("alloc_anon_folio_ns", "free_large_folio_ns", "alloc_cold_large_ns"):
            d.put(k, gc[k], "[generic-x86] no mTHP sizes on this host to fit it")
    write_text_atomic(out, make_profile(d, name=name))
    return verify(str(out.resolve()), d.s)


def measurements_path(out: Path) -> Path:
    """Where calibrate keeps the raw measurements of the profile `out`."""
    return out.with_name(out.stem + ".measurements.json")


def calibrate(out: Path, rounds: int, name: str, quiet: bool = True,
              saved: dict[str, Any] | None = None) -> tuple[Derivation, list[dict[str, Any]]]:
    """Measure (or take `saved`, an earlier --json document), derive, write
    the profile to `out`, fit the per-folio terms and then the system
    calls' on the model, verify (the syscalls' verification in `d.sys_rows`)."""
    image: list[dict[str, Any]] = []
    if saved is not None:
        micro, series, rounds = saved["micro"], saved["series"], saved["rounds"]
        syscalls = saved.get("syscalls") or {}
        image = saved.get("image") or []
    else:
        _say("foliosim calibrate: measuring this host (a few minutes) ...", quiet)
        micro = measure_micro()
        syscalls = {}
        series = measure_series(rounds, quiet=quiet, syscalls=syscalls, image=image)
        # Minutes of measuring: keep them before deriving, which may fail
        # (a host whose series do not fit); `--from` derives from this file.
        raw = measurements_path(out)
        write_text_atomic(raw, json.dumps({"rounds": rounds, "micro": micro, "series": series, "syscalls": syscalls,
                                           "image": image}) + "\n")
        print(f"foliosim calibrate: measurements written to {raw} (re-derive with --from {raw})", file=sys.stderr)
    d = Derivation(micro, series, rounds)
    d.syscalls = syscalls
    # The file must load as a profile: check through the core.
    from . import _core
    cfg = json.dumps({"machine": {"profile": str(out.resolve())}, "workload": {"name": "mmap1"}})
    write_text_atomic(out, make_profile(d, name=name))
    try:
        _core.load_json(cfg, "<calibrate>")
    except Exception as e:
        raise HostError(f"{out}: the written profile does not load: {e}") from e
    d = fit_4k_on_model(d, out, name)
    d.syscalls = syscalls
    rows = fit_on_model(d, out, name)
    fit_file_zap_on_model(d, out, name)
    if syscalls:
        vals, lines = syscost.fit_all(str(out.resolve()), syscalls, {}, rounds,
                                      lambda what: _say(f"foliosim calibrate: {what}", quiet))
        d.vals.update(vals)
        d.fits += lines
        write_text_atomic(out, make_profile(d, name=name))
        d.sys_rows = syscost.verify(str(out.resolve()), syscalls)
    d.image_host = image
    if image:
        d.image = procimage.compare(image, procimage.model_image())
    return d, rows


def cmd_calibrate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    quiet = getattr(args, "quiet", False) or not sys.stderr.isatty()
    rounds = args.rounds
    if rounds < 1 or rounds > 100:
        raise HostError(f"--rounds: {rounds}: must be 1..100")
    saved = None
    if args.from_json:
        # Re-derive from the measurements of an earlier `calibrate --json`.
        try:
            saved = json.loads(Path(args.from_json).read_text())
            _ = saved["micro"], saved["series"], saved["rounds"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise HostError(f"--from {args.from_json}: not the output of `foliosim calibrate --json` ({e})") from e
    d, rows = calibrate(out, rounds, args.name or out.stem, quiet, saved)
    for line in d.fits:
        print(f"foliosim calibrate: fit: {line}", file=sys.stderr)
    for line in format_verify(rows):
        print(f"foliosim calibrate: {line}", file=sys.stderr)
    if d.sys_rows:
        for line in syscost.format_verify(d.sys_rows):
            print(f"foliosim calibrate: {line}", file=sys.stderr)
    if d.image:
        for line in procimage.format_compare(d.image):
            print(f"foliosim calibrate: {line}", file=sys.stderr)
    print(f"foliosim calibrate: wrote {out}", file=sys.stderr if args.json else sys.stdout)  # --json: stdout is the JSON
    if args.json:
        sys.stdout.write(json.dumps({"profile": str(out), "rounds": d.rounds, "micro": d.m, "series": d.s, "syscalls": d.syscalls,
                                     "image": d.image_host, "fits": d.fits, "values": {k: {"value": v, "how": h} for k, (v, h) in d.vals.items()},
                                     "verify": rows, "verify_syscalls": d.sys_rows,
                                     "verify_image": d.image}) + "\n")
    return 0
