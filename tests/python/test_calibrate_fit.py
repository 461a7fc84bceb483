"""`foliosim calibrate`'s fits on synthetic measurements with known answers
(no host needed): the least-squares line, the cache-size fit, and the whole
derivation of profile terms from a series made by the model's own cost
structure with chosen values."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from foliosim import _core
from foliosim import calibrate as cal

# The truth the synthetic host is made of.
K_MIB = 8.0
CLEAR_W, CLEAR_C, TAIL = 47.0, 330.0, 32.0
RMAP_PAGE = PTE_CLEAR = 8.0
FREE_TAIL, PTE_SET = 9.0, 40.0
FIXED = 1700.0  # a large-folio fault beyond its per-page work
ZERO, EXTRA = 820.0, 560.0  # the zero-page fault; alloc + charge + rmap + LRU
Z0 = 400.0  # a large folio's munmap beyond its per-page work
COLD = 120.0  # the misses of a cold folio beyond its clear, once per folio
SIZES = [16, 128, 256, 512, 1024]


def rec(ns_per_page: float, faults_per_page: float = 1.0, unmap: float = 30.0) -> dict:
    return {"ns_per_page": ns_per_page, "faults_per_page": faults_per_page, "unmap_ns_per_page": unmap}


def synthetic(rounds: int = 3) -> tuple[dict, dict]:
    f = K_MIB / (2 * cal.COLD_MIB)  # the warm share of a cold region, as the model has it (last-written first)
    cold_pte = CLEAR_C + TAIL + PTE_SET + RMAP_PAGE
    warm_pte = CLEAR_W + TAIL + PTE_SET + RMAP_PAGE
    s: dict[str, list[dict]] = {}

    def put(size: int, case: str, mib: int, r: dict) -> None:
        s[cal.key(size, case, mib)] = [dict(r) for _ in range(rounds)]

    a_c, a_w = ZERO + CLEAR_C + EXTRA + COLD, ZERO + CLEAR_W + EXTRA
    put(4, "anon", cal.COLD_MIB, rec((1 - f) * a_c + f * a_w, unmap=250.0))
    put(4, "anon", cal.WARM_MIB, rec(a_w, unmap=200.0))
    put(4, "zero", cal.COLD_MIB, rec(ZERO))
    put(4, "shmem-shared", cal.COLD_MIB, rec(1300.0))
    put(4, "shmem-private", cal.COLD_MIB, rec(2200.0))
    put(4, "retouch", cal.COLD_MIB, rec(16.0))
    put(4, "mprotect", cal.COLD_MIB, rec(90.0))
    put(4, "anon-dontneed", cal.COLD_MIB, rec(a_c, unmap=260.0))
    for kib in SIZES:
        n = kib / 4
        cold = (1 - f) * (FIXED + COLD + cold_pte * n) + f * (FIXED + warm_pte * n)
        unmap = (Z0 + (PTE_CLEAR + RMAP_PAGE + FREE_TAIL) * n) / n
        put(kib, "anon", cal.COLD_MIB, rec(cold / n, 1 / n, unmap))
        put(kib, "anon", cal.WARM_MIB, rec((FIXED + warm_pte * n) / n, 1 / n, unmap))
    n = 512
    pmd_w, pmd_c = FIXED + (CLEAR_W + TAIL) * n, FIXED + COLD + (CLEAR_C + TAIL) * n
    for r in cal.SWEEP_MIB:
        warm = min(1.0, K_MIB / (2 * r))
        per = (warm * pmd_w + (1 - warm) * pmd_c) / n
        put(cal.PMD_KIB, "anon", r, rec(per, 1 / n, (Z0 + FREE_TAIL * n) / n))
    put(cal.PMD_KIB, "retouch", cal.COLD_MIB, rec(12.0))
    micro = {"clear_warm_ns": CLEAR_W, "syscall_ns": 100.0, "mmap_ns": 1500.0, "munmap_ns": 1300.0,
             "dontneed_one_page_call_ns": 900.0, "latency_4k_ns": 180.0, "latency_2m_ns": 100.0,
             "huge_fraction": 1.0, "read_bw_gbps": 20.0}
    return micro, s


def test_fit_line_recovers_a_line_and_reports_the_residual():
    a, b, r = cal.fit_line([1, 2, 3, 4], [5, 7, 9, 11])
    assert (a, b, r) == pytest.approx((3, 2, 0))
    a, b, r = cal.fit_line([1, 2, 3, 4], [5, 8, 9, 11])
    assert r > 0.3 and b == pytest.approx(1.9)
    with pytest.raises(ValueError):
        cal.fit_line([1, 1], [2, 3])


def test_fit_warm_cache_recovers_the_cache_size():
    # Caches of 24 MiB: a region reused last-written first is warm for its
    # first 12 MiB (each page reused has twice as much brought in since its
    # write as was reused before it).
    regions = [2.0, 8.0, 16.0, 32.0, 64.0, 128.0]
    per = [80 + 260 * max(0.0, 1 - 12 / r) for r in regions]
    k, cold, rms = cal.fit_warm_cache(regions, per, per[0])
    assert (k, cold, rms) == pytest.approx((24, 340, 0), abs=1e-6)
    assert cal.warm_share(24, 128) == pytest.approx(12 / 128)
    assert cal.warm_share(24, 8) == 1.0


def test_derivation_recovers_every_term_of_a_synthetic_host():
    micro, series = synthetic()
    d = cal.Derivation(micro, series, 3)
    v = {k: x for k, (x, _) in d.vals.items()}
    assert v["cpu.llc_kib"] == pytest.approx(K_MIB * 1024 - d.g["cpu"]["l2_kib"])
    assert v["zero_warm_bw_gbps"] == pytest.approx(4096 / CLEAR_W)
    assert v["node.zero_bw_gbps"] == pytest.approx(4096 / CLEAR_C)
    assert v["prep_tail_ns"] == pytest.approx(TAIL)
    assert v["free_tail_ns"] == pytest.approx(FREE_TAIL)
    assert v["pte_clear_ns"] == pytest.approx(PTE_CLEAR)
    assert v["rmap_page_ns"] == pytest.approx(RMAP_PAGE)
    assert v["pte_set_ns"] == pytest.approx(PTE_SET)
    assert v["walk_cached_ns"] == pytest.approx(4.0)
    # The cold folio's misses beyond its clear, and the 4 KiB split scaled
    # by what is left of the fault: warm, it is all of EXTRA.
    assert v["alloc_cold_ns"] == pytest.approx(COLD)
    gc = d.g["cost"]
    parts = ("alloc_pcp_ns", "rmap_ns", "memcg_charge_ns", "lru_add_ns")
    assert sum(v[k] for k in parts) + gc["lru_lock_per_folio_ns"] / gc["lru_batch"] == pytest.approx(EXTRA)
    check = next(f for f in d.fits if f.startswith("cold folio"))
    assert "residual +0.0 ns" in check, check
    # The 4 KiB munmap: what its free costs beyond the PTE clear, the rmap
    # call, the LRU removal and the pcp list add is the per-folio free work
    # (any order); the pcp list add stays generic-x86's.
    assert v["free_pcp_ns"] == gc["free_pcp_ns"]
    assert v["free_folio_ns"] == pytest.approx(250.0 - PTE_CLEAR - v["rmap_ns"] - gc["lru_lock_per_folio_ns"] - gc["free_pcp_ns"])
    # The mprotect scan: the measured per-page time minus the PTE write.
    assert v["change_pte_scan_ns"] == pytest.approx(90.0 - PTE_SET)
    # Every value says how it was measured, and every fit has a residual.
    assert all(how for _, how in d.vals.values())
    assert all("residual" in f for f in d.fits if f.startswith(("anon fault", "munmap", "warm cache")))


def test_a_broken_host_series_shows_in_the_residuals():
    micro, series = synthetic()
    # One size 20% off its line: the fit's residual says so.
    k = cal.key(128, "anon", cal.COLD_MIB)
    for r in series[k]:
        r["ns_per_page"] *= 1.2
    d = cal.Derivation(micro, series, 3)
    line = next(f for f in d.fits if f.startswith("anon fault, cold"))
    assert "residual 0.0 ns" not in line


def test_the_derived_profile_loads(tmp_path):
    micro, series = synthetic()
    d = cal.Derivation(micro, series, 3)
    d.vals["alloc_anon_folio_ns"] = (200.0, "test")
    d.vals["free_large_folio_ns"] = (100.0, "test")
    p = tmp_path / "host.toml"
    p.write_text(cal.make_profile(d, "host"))
    _core.load_json(json.dumps({"machine": {"profile": str(p)}, "workload": {"name": "mmap1"}}), "<test>")
    text = p.read_text()
    for k in ("alloc_cold_ns", "prep_tail_ns", "rmap_page_ns", "free_tail_ns", "zero_warm_bw_gbps", "llc_kib", "walk_cached_ns", "change_pte_scan_ns"):
        line = next(ln for ln in text.splitlines() if ln.startswith(k + " "))
        assert "[measured: validation/faultcost.c]" in line or "[measured: validation/calibrate.c]" in line, line


def test_the_model_s_own_4k_charges_come_off_the_split():
    micro, series = synthetic()
    base = cal.Derivation(micro, series, 3)
    over = cal.Derivation(micro, series, 3, model_over=(50.0, 10.0))
    parts = ("alloc_pcp_ns", "rmap_ns", "memcg_charge_ns", "lru_add_ns")
    gc = base.g["cost"]
    # The split loses exactly the model's excess (spread over it as the
    # generic split weighs its parts); free_folio_ns loses the munmap
    # excess and what rmap_ns lost.
    assert sum(base.vals[k][0] - over.vals[k][0] for k in parts) == pytest.approx(50.0)
    d_rmap = base.vals["rmap_ns"][0] - over.vals["rmap_ns"][0]
    assert d_rmap == pytest.approx(50.0 * gc["rmap_ns"] / sum(gc[k] for k in parts))
    assert over.vals["free_folio_ns"][0] == pytest.approx(base.vals["free_folio_ns"][0] - 10.0 + d_rmap)
    assert "+50 ns" in next(f for f in over.fits if f.startswith("4 KiB anon"))


def test_fitting_the_4k_split_on_the_model_lands_its_4k_faults_on_the_host(tmp_path):
    micro, series = synthetic()
    out = tmp_path / "host.toml"

    def residual(d: cal.Derivation) -> float:
        d.vals.setdefault("alloc_anon_folio_ns", (0.0, "test"))
        d.vals.setdefault("free_large_folio_ns", (0.0, "test"))
        out.write_text(cal.make_profile(d, "host"))
        rows = cal.verify(str(out), series, sizes=(4,))
        assert len(rows) == 2
        return sum(r["fault_ns"][0] - r["fault_ns"][1] for r in rows) / len(rows)
    before = residual(cal.Derivation(micro, series, 3))
    after = residual(cal.fit_4k_on_model(cal.Derivation(micro, series, 3), out, "host"))
    # The derivation alone leaves out what else the model charges (pcp
    # refills, page tables, LRU batches): one pass on the model takes it off.
    assert abs(before) > 10.0 and abs(after) < 0.1 * abs(before), (before, after)


def test_the_large_folio_terms_come_apart_warm_and_cold(tmp_path):
    """A host made of the model with a large folio's software work A on
    every large folio and its extra misses C on the cold ones: fit_on_model
    finds A on the warm cases alone and C on the cold ones, over the cold
    folios per fault (not a constant charged warm or cold)."""
    micro, series = synthetic()
    out = tmp_path / "host.toml"
    three = ("alloc_anon_folio_ns", "alloc_cold_large_ns", "free_large_folio_ns")
    truth = cal.Derivation(micro, series, 3)
    truth.vals.update({"alloc_anon_folio_ns": (60.0, "truth"), "alloc_cold_large_ns": (300.0, "truth"), "free_large_folio_ns": (0.0, "truth")})
    out.write_text(cal.make_profile(truth, "host"))
    host = dict(series)
    for r in cal.verify(str(out), series):
        if 4 < int(r["case"].split("K:")[0]) < cal.PMD_KIB:
            fpp = 1 / r["pages_per_fault"]
            host[r["case"]] = [dict(x, ns_per_page=r["fault_ns"][0] * fpp, faults_per_page=fpp) for x in series[r["case"]]]
    d = cal.Derivation(micro, host, 3)
    d.vals.update({k: v for k, v in truth.vals.items() if k not in three})
    cal.fit_on_model(d, out, "host")
    assert d.vals["alloc_anon_folio_ns"][0] == pytest.approx(60.0, abs=6.0)
    assert d.vals["alloc_cold_large_ns"][0] == pytest.approx(300.0, rel=0.05)
    assert "warm (2 MiB)" in d.vals["alloc_anon_folio_ns"][1] and "cold (128 MiB)" in d.vals["alloc_cold_large_ns"][1]
    # Every placeholder of the notes filled: each says what it is charged on.
    assert "charged once per large folio)" in d.vals["alloc_anon_folio_ns"][1]
    assert "charged once per large folio allocated cold)" in d.vals["alloc_cold_large_ns"][1]
    assert not any("{}" in d.vals[k][1] for k in ("alloc_anon_folio_ns", "free_large_folio_ns", "alloc_cold_large_ns"))


# ---------------------------------------------------------- system calls --
SYS_TRUTH = {"mmap_ns": 1700.0, "munmap_ns": 1400.0, "pgtable_none_ns": 9.0, "pgtable_alloc_ns": 700.0, "anon_vma_prepare_ns": 400.0, "pgtable_free_ns": 210.0,
             "unlink_anon_vma_ns": 1150.0, "madvise_ns": 350.0, "folios_put_batch_ns": 420.0, "tlb_gather_ns": 280.0,
             "file_op_ns": 260.0, "pagecache_read_ns": 150.0, "pagecache_write_ns": 210.0,
             "fork_base_ns": 30000.0, "copy_pte_ns": 75.0, "exit_base_ns": 24000.0}


def sys_host(monkeypatch, truth: dict) -> dict:
    """A host whose system calls take what the model charges with `truth`
    (validation/syscost.c's cases, three rounds alike), on a smaller plan."""
    from foliosim import syscost
    monkeypatch.setattr(syscost, "PLAN", [("mmap", [1, 8], []), ("munmap", [1, 4], []), ("munmap-empty", [1, 32], []), ("madvise", [0, 1, 8, 32], []), ("madvise-mthp", [1, 3], []),
                                          ("read", [2, 8], []), ("write", [1, 8], []), ("fork", [1, 64], [])])
    monkeypatch.setattr(syscost, "FITS", [f for f in syscost.FITS if set(f.terms) & set(truth)])
    series = {}
    for case, sizes, _ in syscost.PLAN:
        for x in sizes:
            m = syscost.sim_case("generic-x86", case, x, truth)
            series[syscost.key(case, x)] = [dict(m) for _ in range(3)]
    return series


def test_every_system_call_term_is_recovered_from_a_host_made_of_the_model(monkeypatch):
    from foliosim import syscost
    series = sys_host(monkeypatch, SYS_TRUTH)
    vals, lines = syscost.fit_all("generic-x86", series, {}, 3)
    # Fork's time in the model is not quite linear in its terms: with them
    # at 0 or at the probe the run makes another number of forks, and the
    # page tables each allocates find other frames warm (hw/cache.rs).
    fork_terms = {"fork_base_ns", "copy_pte_ns"}
    # pagecache_read_ns is also fault-around's per-folio step since eb19199:
    # the image's text faults charge it too, and the fit then recovers it to
    # 0.21% (149.69 for 150); where that part stops being linear in the
    # term is not traced yet.
    # anon_vma_prepare_ns, once per region of the munmap case whose frees
    # pay folios_put_batch_ns since that term came: recovered to 0.21%
    # (400.84 for 400); where it stops being linear is not traced yet.
    tol = {**dict.fromkeys(fork_terms, 5e-2), "pagecache_read_ns": 3e-3, "anon_vma_prepare_ns": 3e-3}
    assert {k: v for k, (v, _) in vals.items()} == {k: pytest.approx(v, rel=tol.get(k, 2e-3))
                                                     for k, v in SYS_TRUTH.items()}
    # Two and three terms fitted together (the call and its per-page work);
    # every fit says its residual, 0.0% of the host's times here (a ns or
    # two where a case's run makes another number of calls; fork's within
    # a few %).
    assert all("0.0% of the host's times" in x for x in lines if not x.startswith("fork")), lines
    assert all("validation/syscost.c" in how for _, how in vals.values())


def test_a_system_call_the_model_gets_wrong_shows_in_its_residual(monkeypatch):
    from foliosim import syscost
    series = sys_host(monkeypatch, SYS_TRUTH)
    for r in series[syscost.key("madvise", 32)]:
        r["ns"] += 2000.0  # 32 pages zapped: the host takes 2 us more than the model can say
    _, lines = syscost.fit_all("generic-x86", series, {}, 3)
    madv = next(x for x in lines if x.startswith("MADV_DONTNEED"))
    assert "residual 0 ns rms" not in madv and "madvise ns x=32" in madv, madv


def test_put_terms_writes_the_fitted_terms_into_a_profile_with_their_source():
    from foliosim import syscost
    vals = {"mmap_ns": (1718.5, "validation/syscost.c, median of 5 interleaved rounds: mmap ..., residual 10 ns rms (0.5%)"),
            "munmap_ns": (1414.5, "validation/syscost.c, median of 5 interleaved rounds: munmap ...")}
    target = "\n".join(["[cpu]", "mmap_ns = 1.0    # not a cost", "[cost]", "mmap_ns = 1200.0    # [assumed] literature",
                        "munmap_ns = 1000.0    # [assumed] literature", "syscall_ns = 150.0    # [assumed] lmbench"])
    text, changed = syscost.put_terms(target, vals, "the development host")
    assert changed == ["mmap_ns", "munmap_ns"]
    lines = text.splitlines()
    assert lines[1] == "mmap_ns = 1.0    # not a cost"  # another table's key is left alone
    assert lines[3].startswith("mmap_ns = 1718.5    # [measured: validation/syscost.c] on the development host, fitted on this profile's ")
    assert "residual 10 ns rms" in lines[3]
    assert lines[5] == "syscall_ns = 150.0    # [assumed] lmbench"  # not fitted


def test_adopt_fits_a_profile_on_its_own_other_terms(monkeypatch, tmp_path):
    from foliosim import _host, syscost
    truth = {"mmap_ns": 1700.0, "munmap_ns": 1400.0}
    series = sys_host(monkeypatch, truth)
    monkeypatch.setattr(syscost, "PLAN", [("mmap", [1, 8], []), ("munmap-empty", [1, 32], [])])
    prof = tmp_path / "p.toml"
    prof.write_text((_host.repo_root() / "profiles" / "generic-x86.toml").read_text())
    meas = tmp_path / "m.json"
    meas.write_text(json.dumps({"rounds": 3, "syscalls": {k: v for k, v in series.items() if k.split(":")[0] in ("mmap", "munmap-empty")}}))
    lines, rows = syscost.adopt(meas, prof, "a host")
    assert [x.split(":")[0] for x in lines] == ["mmap of an untouched anonymous region (do_mmap's VMA work)",
                                               next(f.what for f in syscost.FITS if "munmap_ns" in f.terms)]
    text = prof.read_text()
    assert "mmap_ns = 1700.0    # [measured: validation/syscost.c] on a host" in text
    assert "munmap_ns = 1400.0    # [measured: validation/syscost.c] on a host" in text
    assert all(abs(r["model"] - r["host"]) < 1 for r in rows), rows


def test_a_saturated_node_gives_the_shared_bandwidth_and_an_unsaturated_one_does_not(tmp_path):
    """#30: the node's shared bandwidth is measured (membw: every CPU
    clearing at once) where the host's CPUs saturate it, never assumed."""
    micro, series = synthetic()
    micro.update({"membw_threads": 2, "membw_clear_1_gbps": 24.4, "membw_clear_n_gbps": 15.8, "membw_rounds": 5})
    d = cal.Derivation(micro, series, 3)
    d.vals["alloc_anon_folio_ns"] = (200.0, "test")
    d.vals["free_large_folio_ns"] = (100.0, "test")
    p = tmp_path / "host.toml"
    p.write_text(cal.make_profile(d, "host"))
    line = next(ln for ln in p.read_text().splitlines() if ln.startswith("shared_bw_gbps "))
    assert line.startswith("shared_bw_gbps = 31.6 ") and "[measured: validation/membw.c]" in line, line
    _core.load_json(json.dumps({"machine": {"profile": str(p)}, "workload": {"name": "mmap1"}}), "<test>")
    # Two CPUs that each keep 95% of one's rate did not saturate it.
    micro["membw_clear_n_gbps"] = 0.95 * 24.4
    d = cal.Derivation(micro, series, 3)
    d.vals.update({"alloc_anon_folio_ns": (200.0, "test"), "free_large_folio_ns": (100.0, "test")})
    line = next(ln for ln in cal.make_profile(d, "host").splitlines() if ln.startswith("shared_bw_gbps "))
    assert "[measured" not in line, line


def test_a_fault_after_a_system_call_is_its_pair_less_the_call_and_the_fault_alone(tmp_path):
    micro, series = synthetic()
    # Without the pair measured (an older measurements file), generic-x86's value stays.
    assert "fault_after_syscall_ns" not in cal.Derivation(micro, series, 3).vals
    micro["zero_page_read_fault_ns"] = 600.0
    micro["zero_fault_after_syscall_ns"] = 820.0
    v, how = cal.Derivation(micro, series, 3).vals["fault_after_syscall_ns"]
    assert v == pytest.approx(820.0 - 100.0 - 600.0)
    assert "getppid" in how
    # Each fault timed alone, where measured, is used instead.
    micro.update({"read_fault_alone_ns": 610.0, "read_fault_alone_after_getppid_ns": 650.0})
    v, how = cal.Derivation(micro, series, 3).vals["fault_after_syscall_ns"]
    assert v == pytest.approx(40.0) and "timed alone" in how


def test_the_page_cache_zap_term_lands_the_models_shared_file_munmap_on_the_host(tmp_path):
    from foliosim import run
    micro, series = synthetic()
    for r in series[cal.key(4, "shmem-shared", cal.COLD_MIB)]:
        r["unmap_ns_per_page"] = 300.0
    d = cal.Derivation(micro, series, 3)
    d.vals.update({"alloc_anon_folio_ns": (0.0, "test"), "free_large_folio_ns": (0.0, "test")})
    out = tmp_path / "host.toml"
    cal.fit_file_zap_on_model(d, out, "host")
    v, how = d.vals["zap_file_pte_ns"]
    assert v > 0 and "page_fault3" in how
    raw = run({"machine": {"profile": str(out)}, "workload": {"name": "page_fault3", "size_mib": cal.COLD_MIB},
               "run": {"warmup_s": 0.05, "duration_s": 0.1}}).raw
    per_page = raw["time_ns"]["munmap"] / (raw["vmstat"]["foliosim_munmap"] * cal.COLD_MIB * 256)
    assert per_page == pytest.approx(300.0, abs=2.0)


def test_the_fault_and_allocation_after_a_free_are_the_pairs_differences(tmp_path):
    micro, series = synthetic()
    # Without the pairs measured (an older measurements file), generic-x86's values stay.
    assert "fault_after_free_ns" not in cal.Derivation(micro, series, 3).vals
    micro.update({"read_fault_after_madvise_ns": 620.0, "read_fault_after_free_ns": 740.0,
                  "write_fault_after_madvise_ns": 1260.0, "write_fault_after_free_ns": 1440.0})
    vals = cal.Derivation(micro, series, 3).vals
    assert vals["fault_after_free_ns"][0] == pytest.approx(120.0)
    assert vals["alloc_after_free_ns"][0] == pytest.approx(180.0 - 120.0)
    # A free that leaves the next fault faster than an empty madvise does is held at 0.
    micro["read_fault_after_free_ns"] = 600.0
    v, how = cal.Derivation(micro, series, 3).vals["fault_after_free_ns"]
    assert v == 0.0 and "below the floor" in how


def test_a_term_the_fit_drives_below_zero_is_held_there_and_the_others_refitted(monkeypatch):
    from foliosim import syscost
    series = sys_host(monkeypatch, SYS_TRUTH)
    for x in (8, 32):  # many pages freed, cheaper than the model says: the batch term goes negative
        for r in series[syscost.key("madvise", x)]:
            r["ns"] -= 700.0 * x / 8
    vals, _ = syscost.fit_all("generic-x86", series, {}, 3)
    v, how = vals["folios_put_batch_ns"]
    assert v == 0.0 and "held at 0" in how, (v, how)
    # The call's and the gather's terms come from the fit without it: no
    # longer the truth, but no term is left below 0.
    assert vals["tlb_gather_ns"][0] > 0.0 and vals["madvise_ns"][0] > 0.0, vals
    assert "held at 0" not in vals["tlb_gather_ns"][1]


def test_verify_divides_munmap_time_by_the_pages_the_munmaps_took_down(monkeypatch):
    # A run that ends inside its third 2 MiB region: its faults count as
    # ops, but only two regions were unmapped.
    import foliosim
    pages = 2 * 256

    raw = {"vmstat": {"pgfault": 2.5 * pages, "foliosim_munmap": 2}, "summary": {"ops_total": 2.5 * pages},
           "time_ns": {"fault": 1000.0 * 2.5 * pages, "munmap": 300.0 * 2 * pages}}
    monkeypatch.setattr(foliosim, "run", lambda cfg: type("Result", (), {"raw": raw})())
    series = {"4K:anon:2": [{"ns_per_page": 1000.0, "faults_per_page": 1.0, "unmap_ns_per_page": 300.0}]}
    rows = cal.verify("generic-x86", series, sizes=(4,))
    assert rows[0]["unmap_ns_per_page"][0] == pytest.approx(300.0) and rows[0]["fault_ns"][0] == pytest.approx(1000.0), rows


def test_an_add_chain_faster_than_any_clock_is_not_taken_for_the_clock():
    """A core that folds add-immediate chains at rename ran calibrate.c's old
    chain at four a cycle: a clock above MAX_CLOCK_GHZ falls back to
    /proc/cpuinfo's, assumed, and says why."""
    micro, series = synthetic()

    def freq_line(clock: float) -> str:
        micro["clock_ghz"] = clock
        d = cal.Derivation(micro, series, 3)
        d.vals.update({"alloc_anon_folio_ns": (200.0, "test"), "free_large_folio_ns": (100.0, "test")})
        return next(ln for ln in cal.make_profile(d, "host").splitlines() if ln.startswith("freq_ghz "))
    assert freq_line(3.781).startswith("freq_ghz = 3.781 ") and "[measured: validation/calibrate.c]" in freq_line(3.781)
    bogus = freq_line(15.395)
    if "cpu MHz" in bogus:  # a host whose /proc/cpuinfo gives a clock
        assert "[assumed]" in bogus and "15.4 GHz" in bogus and "15.395" not in bogus.split("#")[0], bogus
    else:
        assert "15.395" not in bogus.split("#")[0], bogus


def test_the_read_and_write_cases_copy_from_where_copy_warm_bw_is_measured():
    """The model charges a cached page's copy at copy_warm_bw_gbps, which
    validation/calibrate.c measures over a working set that stays in L2;
    the pread/pwrite cases' file must be that size, or the fitted per-folio
    terms take in the copy from a farther cache level (a 4 MiB file put
    three quarters of pagecache_read_ns there on a Granite Rapids host)."""
    from foliosim import syscost
    src = (Path(__file__).resolve().parents[2] / "validation" / "calibrate.c").read_text()
    body = src[src.index("static double copy_warm_ns(void)"):]
    m = re.search(r"size_t ws = (\d+) \* 1024", body[:body.index("\n}")])
    assert m, "copy_warm_ns's working set"
    assert int(m.group(1)) == syscost.FILE_KIB
    for case, _, extra in syscost.PLAN:
        if case in ("read", "write"):
            assert extra == ["-f", str(syscost.FILE_KIB)], case


def test_the_core_to_core_transfer_is_measured_where_two_cpus_can_hand_a_line_over():
    micro, series = synthetic()

    def line_of(m: dict) -> str:
        d = cal.Derivation(m, series, 3)
        d.vals.update({"alloc_anon_folio_ns": (200.0, "test"), "free_large_folio_ns": (100.0, "test")})
        return next(ln for ln in cal.make_profile(d, "host").splitlines() if ln.startswith("cacheline_same_socket_ns "))
    # Without validation/c2c.c's figure (one CPU, or an older measurements
    # file): generic-x86's, assumed.
    assert "[assumed]" in line_of(micro)
    micro.update({"c2c_transfer_ns": 109.53, "c2c_min_ns": 106.25, "c2c_max_ns": 112.32, "c2c_rounds": 5})
    line = line_of(micro)
    assert line.startswith("cacheline_same_socket_ns = 109.5 ") and "[measured: validation/c2c.c]" in line, line
    assert "106-112 ns" in line


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="c2c hands a line between CPUs 0 and 1")
def test_c2c_reports_one_transfer_and_refuses_bad_arguments():
    import subprocess

    from foliosim._host import build_validation
    binary = build_validation() / "c2c"
    out = json.loads(subprocess.run([str(binary), "3", "2000"], capture_output=True, text=True, check=True).stdout)
    assert out["rounds"] == 3 and out["trips"] == 2000
    assert 1.0 < out["min"] <= out["transfer_ns"] <= out["max"] < 1e5
    bad = subprocess.run([str(binary), "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
