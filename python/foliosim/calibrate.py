"""`foliosim calibrate`: measure this host and write a machine profile.

The measurements are validation/calibrate.c (see its comments); this module
turns them into a profile in the schema of profiles/generic-x86.toml. What it
cannot measure is copied from generic-x86 and says so in its comment."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from ._host import THP, HostError, build_validation, knobs_available, read_knob, thp_settings, write_text_atomic
from .tomlout import _value

try:
    import tomllib
except ImportError:  # pragma: no cover
    tomllib = None  # type: ignore

GENERIC = "generic-x86"


def generic_profile() -> dict[str, Any]:
    from ._host import repo_root
    p = repo_root() / "profiles" / f"{GENERIC}.toml"
    with open(p, "rb") as f:
        return tomllib.loads(f.read().decode())


def measure(quiet: bool = True) -> dict[str, Any]:
    """Run validation/bin/calibrate; if PMD THP is off for madvised memory
    and we may change the knobs, turn it on (madvise) for the run."""
    binary = build_validation() / "calibrate"
    want: dict[Path, str] = {}
    if knobs_available() is None and (read_knob(THP / "enabled") == "never" or read_knob(THP / "hugepages-2048kB" / "enabled") == "never"):
        want = {THP / "hugepages-2048kB" / "enabled": "madvise"}
        if read_knob(THP / "enabled") == "never":
            want[THP / "enabled"] = "madvise"
    with thp_settings(want):
        r = subprocess.run([str(binary)], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise HostError(f"calibrate benchmark failed: {(r.stderr.strip().splitlines() or ['exit ' + str(r.returncode)])[-1]}")
    return json.loads(r.stdout)


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


def _f(v: float) -> str:
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3f}"


def make_profile(m: dict[str, Any], name: str = "host") -> str:
    g = generic_profile()
    gc, gt = g["cost"], g["tlb"]
    ncpu, sockets, mhz = _cpu_topology()
    nodes = _nodes()
    zero_4k = 4096.0 / m["zero_bw_gbps"]
    walk = m["latency_4k_ns"] - m["latency_2m_ns"]
    huge_ok = m.get("huge_fraction", 0) >= 0.9
    # The modelled zero-page read fault is trap + fault_base + vma_lookup +
    # pte_set (+ the TLB walk of the retried access): fault_base absorbs the
    # measured total beyond the generic trap, lookup and PTE figures.
    fault_base = m["zero_page_read_fault_ns"] - gc["trap_ns"] - gc["vma_lookup_ns"] - gc["pte_set_ns"] - (walk if huge_ok else gt["walk_ns"])
    fault_base = max(fault_base, 10.0)
    # The anonymous write fault adds allocation, clearing, rmap, memcg and LRU
    # work to that: the generic split of the non-clearing part is scaled to
    # the measured difference.
    parts = ["alloc_pcp_ns", "rmap_ns", "memcg_charge_ns", "lru_add_ns"]
    gen_extra = sum(gc[k] for k in parts) + gc["lru_lock_per_folio_ns"] / gc["lru_batch"]
    extra = m["anon_write_fault_ns"] - m["zero_page_read_fault_ns"] - zero_4k
    scale = max(extra, 0.1 * gen_extra) / gen_extra
    syscall = m["syscall_ns"]
    dn_page = m["dontneed_per_page_ns"]
    # zap of one page = pte_clear + rmap + free_pcp in the model
    free_pcp = max(dn_page - gc["pte_clear_ns"] - gc["rmap_ns"] * scale, 5.0)
    madvise = max(m["dontneed_one_page_call_ns"] - syscall - dn_page - gc["tlb_flush_one_ns"], 10.0)
    src = "validation/calibrate.c"
    L: list[str] = []
    L.append(f"# Machine profile measured on this host by `foliosim calibrate` ({src}, median of {m.get('reps', 5)} runs).")
    L.append("# Values marked [generic-x86] could not be measured and are copied from profiles/generic-x86.toml.")
    L.append(f"# Raw measurements: {json.dumps(m, sort_keys=True)}")
    L.append(f'name = "{name}"')
    L.append(f'description = "This host as measured by foliosim calibrate: {ncpu} CPUs, {sum(n for n, _ in nodes)} MiB"')
    L.append("")
    L.append("[cpu]")
    L.append(f"nr_cpus = {ncpu}            # os.cpu_count()")
    L.append(f"sockets = {sockets}            # distinct physical_package_id in /sys/devices/system/cpu")
    L.append("page_size_kib = 4")
    if mhz:
        L.append(f"freq_ghz = {mhz / 1000:.3f}      # /proc/cpuinfo cpu MHz")
    else:
        L.append(f"freq_ghz = {g['cpu']['freq_ghz']}      # [generic-x86] /proc/cpuinfo has no cpu MHz")
    for mib, has_cpus in nodes:
        L.append("")
        L.append("[[nodes]]")
        L.append('kind = "dram"')
        L.append(f"mem_mib = {mib}        # MemTotal of this node (/sys/devices/system/node)")
        L.append(f"has_cpus = {'true' if has_cpus else 'false'}")
        if huge_ok:
            L.append(f"latency_ns = {_f(m['latency_2m_ns'])}    # dependent loads over 1 GiB with 2 MiB pages (no TLB misses), one line per 4 KiB")
        else:
            L.append(f"latency_ns = {_f(m['latency_4k_ns'] - gt['walk_ns'])}    # dependent loads over 1 GiB with 4 KiB pages minus the [generic-x86] walk_ns (2 MiB pages unavailable)")
        L.append(f"read_bw_gbps = {_f(m['read_bw_gbps'])}    # one core summing 256 MiB sequentially")
        L.append(f"zero_bw_gbps = {_f(m['zero_bw_gbps'])}    # memset of 256 MiB in 4 KiB chunks (clear_page stand-in)")
        L.append(f"copy_bw_gbps = {_f(m['copy_bw_gbps'])}    # memcpy of 256 MiB in 4 KiB chunks (copy_page stand-in)")
        written_node = {"kind", "mem_mib", "has_cpus", "latency_ns", "read_bw_gbps", "zero_bw_gbps", "copy_bw_gbps"}
        for k, v in g["nodes"][0].items():
            if k not in written_node:
                L.append(f"{k} = {_value(v)}    # [generic-x86]")
    L.append("")
    L.append("[tlb]")
    L.append("# Geometry: [generic-x86] (cpuid leaf 0x18 is not parsed).")
    for k in ["l1d_entries", "l1d_ways", "l1i_entries", "l1i_ways", "l1d_2m_entries", "l1d_2m_ways", "stlb_entries", "stlb_ways"]:
        L.append(f"{k} = {gt[k]}")
    L.append(f"stlb_holds_2m = {'true' if gt['stlb_holds_2m'] else 'false'}")
    L.append(f"stlb_hit_ns = {gt['stlb_hit_ns']}    # [generic-x86]")
    if huge_ok and walk > 0:
        L.append(f"walk_ns = {_f(walk)}    # TLB miss cost: latency with 4 KiB pages ({_f(m['latency_4k_ns'])} ns) minus with 2 MiB pages ({_f(m['latency_2m_ns'])} ns)")
    else:
        L.append(f"walk_ns = {gt['walk_ns']}    # [generic-x86] 2 MiB pages unavailable or no measurable difference")
    L.append(f"contpte = {'true' if gt.get('contpte') else 'false'}")
    L.append(f"coalesce_order = {gt.get('coalesce_order', 0)}")
    written_tlb = {"l1d_entries", "l1d_ways", "l1i_entries", "l1i_ways", "l1d_2m_entries", "l1d_2m_ways", "stlb_entries",
                   "stlb_ways", "stlb_holds_2m", "stlb_hit_ns", "walk_ns", "contpte", "coalesce_order"}
    for k, v in gt.items():
        if k not in written_tlb:
            L.append(f"{k} = {_value(v)}    # [generic-x86]")
    L.append("")
    L.append("[cost]")
    measured = {
        "syscall_ns": (syscall, "getppid() loop"),
        "fault_base_ns": (fault_base, f"read fault mapping the zero page ({_f(m['zero_page_read_fault_ns'])} ns, 4 KiB pages) minus [generic-x86] trap, vma_lookup, pte_set and the walk"),
        "mmap_ns": (max(m["mmap_ns"] - syscall, 10.0), f"mmap of 128 MiB anonymous ({_f(m['mmap_ns'])} ns) minus syscall_ns"),
        "munmap_ns": (max(m["munmap_ns"] - syscall, 10.0), f"munmap of an untouched 128 MiB mapping ({_f(m['munmap_ns'])} ns) minus syscall_ns"),
        "free_pcp_ns": (free_pcp, f"MADV_DONTNEED of 128 MiB: {_f(dn_page)} ns per page, minus the modelled pte_clear and rmap"),
        "madvise_ns": (madvise, f"one-page MADV_DONTNEED call ({_f(m['dontneed_one_page_call_ns'])} ns) minus syscall_ns, the per-page zap and tlb_flush_one_ns"),
    }
    for k in parts:
        measured[k] = (gc[k] * scale, f"[generic-x86] {gc[k]} x {scale:.3f}: generic split scaled so that the modelled 4 KiB anon write fault totals the measured {_f(m['anon_write_fault_ns'])} ns")
    for k, v in gc.items():
        if k in measured:
            val, why = measured[k]
            L.append(f"{k} = {_f(val)}    # {why}")
        elif isinstance(v, bool):
            L.append(f"{k} = {'true' if v else 'false'}    # [generic-x86]")
        elif isinstance(v, int):
            L.append(f"{k} = {v}    # [generic-x86]")
        else:
            L.append(f"{k} = {v}    # [generic-x86]")
    L.append("")
    # Sections this command does not measure (e.g. the hypervisor host's
    # costs) come over whole from generic-x86, so the profile always loads.
    for sec, tbl in g.items():
        if sec in ("name", "description", "cpu", "nodes", "tlb", "cost") or not isinstance(tbl, dict):
            continue
        L.append(f"[{sec}]")
        for k, v in tbl.items():
            L.append(f"{k} = {_value(v)}    # [generic-x86]")
        L.append("")
    return "\n".join(L) + "\n"


def cmd_calibrate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if sys.stderr.isatty() and not getattr(args, "quiet", False):
        print("foliosim calibrate: measuring this host (about 30 s) ...", file=sys.stderr, flush=True)
    m = measure()
    text = make_profile(m, name=args.name or out.stem)
    # The file must load as a profile: check through the core.
    from . import _core
    cfg = json.dumps({"machine": {"profile": str(out.resolve())}, "workload": {"name": "mmap1"}})
    write_text_atomic(out, text)
    try:
        _core.load_json(cfg, "<calibrate>")
    except Exception as e:
        raise HostError(f"{out}: the written profile does not load: {e}") from e
    print(f"foliosim calibrate: wrote {out}", file=sys.stderr if args.json else sys.stdout)  # --json: stdout is the JSON
    if args.json:
        sys.stdout.write(json.dumps({"profile": str(out), "measurements": m}) + "\n")
    return 0
