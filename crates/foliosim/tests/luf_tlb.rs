//! TLB-side scenarios of lazy unmap flush (docs/mechanisms/lazy-unmap-flush.md#scenarios): 20 (ASID
//! reuse), 15 (dirty read-only PTE reclaimed with writeback) and 11's
//! remote-invalidation half, plus the per-CPU shootdown counters. The
//! harness is tests/common's, shared with tests/luf.rs.

mod common;

use common::{readers_then_reclaim, H, LUF, LUF11, PAGES, SEEDS};
use foliosim::workload::{map, prot, Access, Op};

const BASE: &str = "";

fn clean_under_every_seed(knobs: &str, name: &str, f: impl Fn(&str, u64) -> H) {
    for seed in 1..=SEEDS {
        let h = f(knobs, seed);
        assert!(h.violations().is_empty(), "{name}, knobs {knobs:?}, seed {seed}: {:?}", h.violations());
    }
}

// ---- scenario 20: ASID reuse ---------------------------------------------------

/// Scenario 20: A's stale entries (LUF'd, pending) stay on CPU x after A
/// exits, in A's dead ASID. Five new processes take the other slots of
/// CPU x; the sixth gets A's slot round-robin, maps another file at the same
/// address and reads it. On odd seeds the LUF'd frames are reallocated
/// and written first. x86 flushes the slot on reassignment, so the sixth
/// must miss and walk its own page table.
fn scenario_asid_reuse(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, t, ds) = readers_then_reclaim(knobs, seed, &[3]);
    let x = (seed % 3) as u32;
    let mut t = t + 100;
    for &tid in a.iter().rev() {
        t = h.run(tid, t, Op::Exit).1;
    }
    if seed % 2 == 1 {
        t = h.alloc_write(ds[0], t + 100, 2 * PAGES);
    }
    let g = h.file(PAGES);
    for i in 0..6 {
        let y = h.process(x);
        let (fd, t1) = h.val(y, t + 10, Op::Open { file: g });
        let (_, t1) = h.val(
            y,
            t1,
            Op::Mmap { addr: base, len: PAGES << 12, prot: prot::READ, flags: map::SHARED | map::FIXED, fd: fd as i32, off: 0 },
        );
        // The first five touch one page (enough to load their ASID); the
        // sixth, holding A's old slot, reads everything.
        let n = if i == 5 { PAGES } else { 1 };
        t = h.run(y, t1, Op::AccessRange { addr: base, stride: 4096, count: n, kind: Access::Load }).1;
    }
    h
}

#[test]
fn asid_slots_are_recycled_and_flushed() {
    let h = scenario_asid_reuse(LUF11, 1);
    // The sixth new mm on CPU x took A's slot: one reassignment there
    // (the reclaimer and allocator CPUs run at most two mms).
    assert_eq!(h.stat("foliosim_asid_reuse"), 1);
    let x = 1usize;
    let st = &h.k.cpus()[x].tlbstate;
    assert_eq!(st.next_asid, 2, "slots 1..5, 0, then 1 again");
}

#[test]
fn asid_reuse_scenario_passes_with_luf_and_baseline() {
    clean_under_every_seed(LUF11, "asid reuse", scenario_asid_reuse);
    clean_under_every_seed(LUF, "asid reuse", scenario_asid_reuse);
    clean_under_every_seed(BASE, "asid reuse", scenario_asid_reuse);
}

#[test]
fn asid_no_flush_on_reuse_is_caught() {
    let knobs = format!("{LUF11}\n\"debug.mutant\" = \"asid_no_flush_on_reuse\"");
    let mut kinds = std::collections::BTreeSet::new();
    for s in 1..=SEEDS {
        for v in scenario_asid_reuse(&knobs, s).violations() {
            kinds.insert(if v.starts_with("I6a") {
                "I6a"
            } else if v.contains("reallocated since") {
                "I2"
            } else {
                "other"
            });
        }
    }
    // Frames still free: the new mm reads A's old file through A's entry
    // (I6a); frames reallocated: it reads the new owner's data (I2).
    assert!(kinds.contains("I6a") && kinds.contains("I2"), "{kinds:?}");
}

// ---- scenario 15: dirty PTE, writeback before free ----------------------------

/// Scenario 15, the three ways reclaim meets a dirty PTE of a shared file
/// page mapped by A (threads on CPUs 0 and 1, reclaimer C on CPU 3):
/// - variant 0: the PTE is writable and dirty (W=1 D=1 entries cached);
/// - variant 1: written, then mprotect(PROT_READ), then read again: the
///   PTE is read-only and dirty, the entries W=0 D=1 (LUF may take it, and
///   the dirty flush must cover its CPUs);
/// - variant 2: read-only and dirty with the write-protect flush still
///   pending (uffd-wp style): CPUs still hold W=1 D=1 entries.
///
/// Reclaim unmaps, flushes what is dirty, writes the folio back (pageout)
/// and frees it; then an allocator takes the frames and A's threads store
/// and load through whatever they still cache.
fn scenario_dirty_writeback(knobs: &str, seed: u64, variant: u32) -> H {
    let mut h = H::boot(knobs, seed);
    let d = h.allocator(3 + (seed % 2) as u32);
    let f = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let c = h.process(3);
    let (p, mut t) = h.map_file(a0, 0, f, prot::READ | prot::WRITE);
    for &tid in &[a0, a1] {
        let r = h.rand(500);
        t = h.run(tid, t + r, Op::AccessRange { addr: p, stride: 4096, count: PAGES, kind: Access::Store }).1;
    }
    let mm = h.k.tasks()[a0 as usize].mm;
    match variant {
        1 => {
            t = h.val(a0, t + 10, Op::Mprotect { addr: p, len: PAGES << 12, prot: prot::READ }).1;
            for &tid in &[a0, a1] {
                t = h.read_all(tid, t + 10, p);
            }
        }
        2 => h.k.wp_range_deferred(mm, p, p + (PAGES << 12)),
        _ => {}
    }
    let (freed, t) = h.reclaim(c, t + 100, PAGES);
    assert!(freed >= PAGES, "variant {variant}: reclaim freed {freed}");
    let t = if variant == 2 { h.k.wp_range_flush(t, 0, mm, p, p + (PAGES << 12)) } else { t };
    let r = h.rand(1000);
    let t = h.alloc_write(d, t + r, 2 * PAGES);
    let kind = if variant == 0 { Access::Store } else { Access::Load };
    for &tid in &[a0, a1] {
        let r = h.rand(1000);
        h.run(tid, t + r, Op::AccessRange { addr: p, stride: 4096, count: PAGES, kind });
    }
    h
}

#[test]
fn dirty_writeback_passes_with_luf_and_baseline() {
    for v in 0..3 {
        let f = |k: &str, s: u64| scenario_dirty_writeback(k, s, v);
        clean_under_every_seed(LUF11, "dirty writeback", f);
        clean_under_every_seed(LUF, "dirty writeback", f);
        clean_under_every_seed(BASE, "dirty writeback", f);
    }
    // Every folio went through pageout (it was dirty) before it was freed.
    let h = scenario_dirty_writeback(LUF11, 1, 1);
    assert!(h.stat("foliosim_pageout") >= PAGES as i64, "pageout {}", h.stat("foliosim_pageout"));
}

/// Variant 1 under LUF: the read-only dirty PTEs make the folios LUF-able,
/// but try_to_unmap_flush_dirty flushes the LUF batch too (it carries the
/// dirty flag), so nothing is left deferred for them.
#[test]
fn dirty_flush_covers_the_luf_batch() {
    let h = scenario_dirty_writeback(LUF11, 1, 1);
    assert_eq!(h.stat("foliosim_luf_deferred"), 0);
    assert!(h.stat("foliosim_tlb_batched_flush") >= 1);
}

#[test]
fn reclaim_skip_dirty_flush_is_caught() {
    for (base, v) in [(BASE, 0), (LUF11, 0), (LUF11, 2)] {
        let knobs = format!("{base}\n\"debug.mutant\" = \"reclaim_skip_dirty_flush\"");
        let any = (1..=SEEDS).any(|s| scenario_dirty_writeback(&knobs, s, v).violations().iter().any(|m| m.starts_with("I1w")));
        assert!(any, "knobs {base:?} variant {v}: writeback started under live W=1 D=1 entries, not caught");
    }
    // With only W=0 entries left (variant 1: mprotect flushed), skipping
    // the dirty flush loses nothing on x86: a store through a read-only
    // entry re-walks and faults. The checker must not cry wolf.
    let knobs = format!("{LUF11}\n\"debug.mutant\" = \"reclaim_skip_dirty_flush\"");
    for s in 1..=4 {
        let h = scenario_dirty_writeback(&knobs, s, 1);
        assert!(!h.violations().iter().any(|m| m.starts_with("I1w")), "{:?}", h.violations());
    }
}

// ---- scenario 11: remote invalidation ------------------------------------------

/// Scenario 11, remote half: after A's pages were LUF'd, the file changes
/// on the server (NFS) or in the FUSE daemon and the client runs
/// invalidate_inode_pages2. Half the file is re-read first by another
/// process on the other node, whose page-cache allocations never meet a
/// LUF'd frame (cached and mapped again at invalidation time: those are
/// unmapped with a flush). Then A's threads read again.
fn scenario_remote_invalidate(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, t, _) = readers_then_reclaim(knobs, seed, &[]);
    let b = h.process(8);
    let (pb, t) = h.map_file(b, t + 100, 0, prot::READ);
    let t = h.run(b, t, Op::AccessRange { addr: pb, stride: 4096, count: PAGES / 2, kind: Access::Load }).1;
    let r = h.rand(1000);
    let t = h.k.invalidate_inode_pages2(t + r, 8, b, 0);
    for &tid in &a {
        let r = h.rand(1000);
        h.read_all(tid, t + r, base);
    }
    h.read_all(b, t + 10, pb);
    h
}

const LUF11_INVAL: &str = "\"luf.enabled\" = true\n\"luf.v11_hooks\" = true\n\"luf.invalidate_hook\" = true";

/// v10 and v11 miss it: the reclaimed pages are no longer in the page
/// cache, so the invalidation finds nothing to unmap or flush, and A's
/// stale entries keep showing the old contents (I6b). The hook closes it;
/// the baseline never had the hole.
#[test]
fn remote_invalidation_is_a_hole_in_v10_v11_and_the_hook_closes_it() {
    for knobs in [LUF, LUF11] {
        let hole = (1..=4).any(|s| scenario_remote_invalidate(knobs, s).violations().iter().any(|v| v.starts_with("I6b")));
        assert!(hole, "{knobs:?}: stale readers after a remote change not seen");
    }
    clean_under_every_seed(LUF11_INVAL, "remote invalidation", scenario_remote_invalidate);
    clean_under_every_seed(BASE, "remote invalidation", scenario_remote_invalidate);
    let h = scenario_remote_invalidate(LUF11_INVAL, 1);
    assert!(h.stat("foliosim_luf_forced_invalidate") >= 1);
    assert!(h.stat("foliosim_invalidate_inode_pages") >= (PAGES / 2) as i64);
}

// ---- per-CPU shootdown counts --------------------------------------------------

/// The shootdowns each CPU took (tlb:tlb_flush with reason
/// TLB_REMOTE_SHOOTDOWN, /proc/interrupts' irq_tlb_count) add up to
/// nr_tlb_remote_flush_received, and only CPUs that ran the flushed mms
/// receive any.
#[test]
fn per_cpu_shootdowns_add_up() {
    for knobs in [BASE, LUF11] {
        let h = scenario_dirty_writeback(knobs, 3, 0);
        let probes = h.k.trace().to_json();
        let per: Vec<u64> = probes["tlb:tlb_flush"]["by_reason"]["TLB_REMOTE_SHOOTDOWN"]["per_cpu"]
            .as_array()
            .expect("tlb:tlb_flush counted")
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        for v in 0..3 {
            let h = scenario_dirty_writeback(knobs, 3, v);
            assert!(h.stat("foliosim_pageout") >= PAGES as i64, "variant {v}: pageout {}", h.stat("foliosim_pageout"));
        }
        assert_eq!(per.iter().sum::<u64>() as i64, h.stat("nr_tlb_remote_flush_received"), "{per:?}");
        assert!(per[0] + per[1] > 0);
        assert!(per[6..].iter().all(|&n| n == 0), "{per:?}");
    }
}
