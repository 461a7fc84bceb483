//! Lazy unmap flush: the scenarios of docs/mechanisms/lazy-unmap-flush.md#scenarios driven
//! directly on a kernel, with interleavings placed in simulated time, and
//! the mutants (#mutants there) each caught by the deferred-flush ground truth (check/luf.rs).
//!
//! A scenario is a list of steps, each a task doing something at a chosen
//! simulated time; seeds vary which CPUs take part and the delays between
//! steps. LUF as specified must pass every scenario under every seed; each
//! mutant must be caught under at least one seed.

mod common;

use common::{caught, readers_then_reclaim, H, LUF, LUF11, PAGES, SEEDS};
use foliosim::workload::{map, prot, Access, Op};

/// Scenario 1: basic reuse. D allocates the reclaimed frames and writes
/// them; then A's threads read through whatever they still cache.
fn scenario_basic(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, t, ds) = readers_then_reclaim(knobs, seed, &[3]);
    let d = ds[0];
    let r = h.rand(2000);
    let t = h.alloc_write(d, t + r, 2 * PAGES);
    for &tid in &a {
        let r = h.rand(3000);
        h.read_all(tid, t + r, base);
    }
    h
}

/// Scenario 2: the reclaimer's pcp list drains to buddy; another CPU
/// allocates from buddy.
fn scenario_drain(knobs: &str, seed: u64) -> H {
    let cpu = 4 + (seed % 4) as u32;
    let (mut h, a, base, t, ds) = readers_then_reclaim(knobs, seed, &[cpu]);
    let t = h.k.pa_mut().drain_pages(t, 3);
    let d = ds[0];
    let r = h.rand(2000);
    let t = h.alloc_write(d, t + r, 4 * PAGES);
    for &tid in &a {
        let r = h.rand(3000);
        h.read_all(tid, t + r, base);
    }
    h
}

/// 64 KiB anonymous folios (mTHP) for every anonymous fault.
const MTHP64: &str = "\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"";

/// Scenario 2 with large folios: D, on CPU 4..7, faults 64 KiB folios
/// (alloc_large_folio). Its first folio is taken before the reclaim, so
/// its page tables exist and the frames the drain merged back into buddy
/// with a pending generation leave the allocator only as D's large folios.
fn scenario_drain_large(knobs: &str, seed: u64) -> H {
    let mut h = H::boot(knobs, seed);
    let d = h.allocator(4 + (seed % 4) as u32);
    let t = h.alloc_write(d, 0, 16);
    let f = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let a2 = h.thread(a0, 2);
    let c = h.process(3);
    let (base, mut t) = h.map_file(a0, t, f, prot::READ);
    for &tid in &[a0, a1, a2] {
        let r = h.rand(1000);
        t = h.read_all(tid, t + r, base);
    }
    let (freed, t) = h.reclaim(c, t + 1000, PAGES);
    assert!(freed >= PAGES, "reclaim freed {freed}");
    let t = h.k.pa_mut().drain_pages(t, 3);
    let r = h.rand(2000);
    let t = h.alloc_write(d, t + r, 4 * PAGES);
    for &tid in &[a0, a1, a2] {
        let r = h.rand(3000);
        h.read_all(tid, t + r, base);
    }
    h
}

/// LUF with large folios: the frames reclaim freed with a pending
/// generation come back as 64 KiB folios, and that allocation flushes
/// first. Skipping the flush there only (order-0 allocations still flush)
/// is caught, as is skipping it everywhere.
#[test]
fn large_folio_allocations_flush_pending_generations() {
    let knobs = format!("{LUF}\n{MTHP64}");
    let mut met = 0;
    for s in 1..=SEEDS {
        let h = scenario_drain_large(&knobs, s);
        assert!(h.violations().is_empty(), "seed {s}: {:?}", h.violations());
        assert_eq!(h.stat("foliosim_mthp_fault_alloc"), 4 * PAGES as i64 / 16 + 1, "seed {s}: D's faults took 64 KiB folios");
        met += h.stat("foliosim_luf_alloc_pending");
    }
    assert!(met > 0, "no large-folio allocation met a pending generation");
    assert!(caught("luf_large_skip_alloc_flush", &knobs, scenario_drain_large));
    assert!(caught("luf_skip_alloc_flush", &knobs, scenario_drain_large));
}

/// Scenario 3: two generations in buddy next to each other. File 1 and
/// file 2 are read alternately, so their frames interleave; epoch 1
/// (file 1) is reclaimed, drained and flushed; epoch 2 (file 2) stays
/// pending; draining it merges every epoch-2 frame with an epoch-1 buddy.
fn scenario_merge(knobs: &str, seed: u64) -> H {
    let mut h = H::boot(knobs, seed);
    let c = h.process(3);
    let d = h.allocator(4 + (seed % 4) as u32);
    let f1 = h.file(PAGES);
    let f2 = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let (b1, t) = h.map_file(a0, 0, f1, prot::READ);
    let (b2, mut t) = h.map_file(a0, t, f2, prot::READ);
    for &tid in &[a0, a1] {
        for i in 0..PAGES {
            t = h.run(tid, t, Op::Access { addr: b1 + (i << 12), kind: Access::Load }).1;
            t = h.run(tid, t, Op::Access { addr: b2 + (i << 12), kind: Access::Load }).1;
        }
    }
    let mm = h.k.tasks()[a0 as usize].mm;
    age(&mut h, mm, b1);
    age(&mut h, mm, b2);
    for cpu in 0..h.k.nr_cpus() {
        t = h.k.lru_add_drain_cpu(t, cpu);
    }
    let p1: Vec<u32> = (0..PAGES).map(|i| *h.k.inodes()[f1 as usize].pages.get(&i).unwrap()).collect();
    let p2: Vec<u32> = (0..PAGES).map(|i| *h.k.inodes()[f2 as usize].pages.get(&i).unwrap()).collect();
    h.k.cpu_mut(3).curr = c;
    let (_, _, t, _) = h.k.shrink_folio_list(t + 100, 3, 0, &p1);
    let t = h.k.pa_mut().drain_pages(t, 3);
    let t = h.k.luf_flush(t, 3, c, foliosim::mm::luf::ForcedBy::MemoryFailure);
    // That full flush dropped every entry of A: read file 2 again.
    let mut t = t + 10_000;
    for &tid in &[a0, a1] {
        t = h.read_all(tid, t, b2);
    }
    age(&mut h, mm, b2);
    let (_, _, t, _) = h.k.shrink_folio_list(t + 100, 3, 0, &p2);
    let t = h.k.pa_mut().drain_pages(t, 3);
    let r = h.rand(1000);
    let t = h.alloc_write(d, t + r, 8 * PAGES);
    for &tid in &[a0, a1] {
        let r = h.rand(1000);
        h.read_all(tid, t + r, b2);
    }
    h
}

/// Scenarios 4, 5 and 8: two allocators meet pending frames at nearly
/// the same time: the first starts the LUF flush, the second must wait
/// for it. The frames sit in buddy (split race), on the refiller's pcp
/// list (refill race), or on two reclaimers' pcp lists (concurrent flush).
fn scenario_race(knobs: &str, seed: u64, variant: u32) -> H {
    let mut h = H::boot(knobs, seed);
    let (cpu1, cpu2) = match variant {
        4 => (4, 5),
        5 => (5, 5),
        _ => (3, 7),
    };
    let d1 = h.allocator(cpu1);
    let d2 = h.allocator(cpu2);
    let f = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let a2 = h.thread(a0, 2);
    let c = h.process(3);
    let c2 = h.process(7);
    let (base, mut t) = h.map_file(a0, 0, f, prot::READ);
    for &tid in &[a0, a1, a2] {
        t = h.read_all(tid, t, base);
    }
    let t = match variant {
        // Split race: everything in buddy.
        4 => {
            let (_, t) = h.reclaim(c, t + 100, PAGES);
            h.k.pa_mut().drain_pages(t, 3)
        }
        // pcp refill: in buddy, then a refill by CPU 5 pulls them onto its list.
        5 => {
            let (_, t) = h.reclaim(c, t + 100, PAGES);
            h.k.pa_mut().drain_pages(t, 3)
        }
        // Two reclaimers, same epoch, frames on two pcp lists.
        _ => {
            let (_, t) = h.reclaim(c, t + 100, PAGES / 2);
            let (_, t) = h.reclaim(c2, t + 10, PAGES / 2);
            t
        }
    };
    let t0 = t + 1000;
    let d = h.rand(200) + 1;
    if variant == 5 {
        // d2's page tables exist already: its allocations in the race are quick.
        let _ = h.alloc_write(d2, 0, 1);
        // The refiller allocates until its refill meets the pending frames
        // and it starts the LUF flush; the other task on that CPU (an
        // interrupt, in the kernel's terms) allocates during that flush.
        let mut t1 = t0;
        for _ in 0..4 * PAGES {
            let f0 = h.stat("foliosim_luf_flush");
            let start = t1;
            t1 = h.alloc_write(d1, t1, 1);
            if h.stat("foliosim_luf_flush") > f0 {
                let r = h.rand(100);
                let mut t2 = start + r;
                for _ in 0..PAGES {
                    t2 = h.alloc_write(d2, t2, 1);
                }
                break;
            }
        }
        for &tid in &[a0, a1, a2] {
            let r = h.rand(1000);
            h.read_all(tid, t1 + 100_000 + r, base);
        }
        return h;
    }
    let mut t1 = h.alloc_write(d1, t0, 1);
    let mut t2 = h.alloc_write(d2, t0 + d, 1);
    for _ in 0..2 * PAGES {
        t1 = h.alloc_write(d1, t1, 1);
        t2 = h.alloc_write(d2, t2, 1);
    }
    let end = t1.max(t2);
    for &tid in &[a0, a1, a2] {
        let r = h.rand(1000);
        h.read_all(tid, end + r, base);
    }
    h
}

/// Clean a file's folios and PTEs (as writeback would), keeping the
/// PTEs writable: reclaim may then take them, through the ordinary batch.
fn writeback(h: &mut H, ino: u32, mm: u32, base: u64) {
    let pfns: Vec<u32> = h.k.inodes()[ino as usize].pages.values().copied().collect();
    for pfn in pfns {
        h.k.mem_map_mut().get_mut(pfn).flags &= !foliosim::mm::mem_map::pg::DIRTY;
    }
    for i in 0..PAGES {
        let va = base + (i << 12);
        if let Some(tbl) = h.k.mm_mut(mm).pt_mut().table_mut(va) {
            let s = &mut tbl.ptes[((va >> 12) & 511) as usize];
            *s = s.without(foliosim::mm::pgtable::Pte::DIRTY);
        }
    }
}

/// Clear the young bits of `tid`'s PTEs over `base` (an aging pass).
fn age(h: &mut H, mm: u32, base: u64) {
    for i in 0..PAGES {
        let va = base + (i << 12);
        if let Some(tbl) = h.k.mm_mut(mm).pt_mut().table_mut(va) {
            let s = &mut tbl.ptes[((va >> 12) & 511) as usize];
            *s = s.without(foliosim::mm::pgtable::Pte::YOUNG);
        }
    }
}

/// Scenario 7: C's ordinary batched flush (A's writable PTEs) is in
/// flight when C2's reclaim of B's read-only pages defers; C's end must
/// not retire the CPUs C2 added.
fn scenario_ordinary_flush(knobs: &str, seed: u64) -> H {
    let mut h = H::boot(knobs, seed);
    let fa = h.file(PAGES);
    let fb = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let b0 = h.process(0);
    let b1 = h.thread(b0, 1);
    let c = h.process(3);
    let c2 = h.process(4);
    let d1 = h.allocator(5);
    let (ba, t) = h.map_file(a0, 0, fa, prot::READ | prot::WRITE);
    let (bb, mut t) = h.map_file(b0, t, fb, prot::READ);
    for &tid in &[a0, a1] {
        t = h.run(tid, t, Op::AccessRange { addr: ba, stride: 4096, count: PAGES, kind: Access::Store }).1;
    }
    let (mm_a, mm_b) = (h.k.tasks()[a0 as usize].mm, h.k.tasks()[b0 as usize].mm);
    writeback(&mut h, fa, mm_a, ba);
    for &tid in &[b0, b1] {
        t = h.read_all(tid, t, bb);
    }
    age(&mut h, mm_a, ba);
    age(&mut h, mm_b, bb);
    for cpu in 0..h.k.nr_cpus() {
        t = h.k.lru_add_drain_cpu(t, cpu);
    }
    let pa: Vec<u32> = (0..32).map(|i| *h.k.inodes()[fa as usize].pages.get(&i).unwrap()).collect();
    let pb: Vec<u32> = (0..32).map(|i| *h.k.inodes()[fb as usize].pages.get(&i).unwrap()).collect();
    // C shrinks A's folios (ordinary flush); C2 B's, a little later.
    let t0 = t + 100;
    h.k.cpu_mut(3).curr = c;
    let (_, _, t1, _) = h.k.shrink_folio_list(t0, 3, 0, &pa);
    let d = h.rand(300) + 1;
    h.k.cpu_mut(4).curr = c2;
    let (_, _, t2, _) = h.k.shrink_folio_list(t0 + d, 4, 0, &pb);
    let t3 = h.alloc_write(d1, t1.max(t2) + 10, 4 * PAGES);
    for &tid in &[b0, b1] {
        let r = h.rand(1000);
        h.read_all(tid, t3 + r, bb);
    }
    h
}

/// Scenarios 9/10: the same file mapped read-only (ptr1) and read-write
/// (ptr2); ptr1 is read on two CPUs, the page is LUF'd, a third CPU
/// writes through ptr2 (a fresh page-cache page, a writable PTE), then
/// ptr1 is read again through the stale entries.
fn scenario_rw_alias(knobs: &str, seed: u64) -> H {
    let mut h = H::boot(knobs, seed);
    let f = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    // On the other node: its page-cache allocations never meet a LUF'd
    // frame, so only the write hooks can flush for it.
    let w = h.process(8);
    let c = h.process(3);
    let (p1, t) = h.map_file(a0, 0, f, prot::READ);
    let (p2, mut t) = h.map_file(w, t, f, prot::READ | prot::WRITE);
    for &tid in &[a0, a1] {
        t = h.read_all(tid, t, p1);
    }
    let (_, t) = h.reclaim(c, t + 100, PAGES);
    let (_, t) = h.run(w, t, Op::AccessRange { addr: p2, stride: 4096, count: PAGES, kind: Access::Store });
    for &tid in &[a0, a1] {
        let r = h.rand(1000);
        h.read_all(tid, t + r, p1);
    }
    h
}

/// Scenario 14: a write-protect flush is still pending (uffd-wp style)
/// when reclaim finds the PTEs read-only; CPUs still hold W=1 entries.
fn scenario_wp_pending(knobs: &str, seed: u64) -> H {
    let mut h = H::boot(knobs, seed);
    let f = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let c = h.process(3);
    let (p, mut t) = h.map_file(a0, 0, f, prot::READ | prot::WRITE);
    for &tid in &[a0, a1] {
        // Writable, dirty entries on both CPUs.
        t = h.run(tid, t, Op::AccessRange { addr: p, stride: 4096, count: PAGES, kind: Access::Store }).1;
    }
    let mm = h.k.tasks()[a0 as usize].mm;
    h.k.wp_range_deferred(mm, p, p + (PAGES << 12));
    writeback(&mut h, f, mm, p);
    let (_, t) = h.reclaim(c, t + 100, PAGES);
    let _ = h.k.wp_range_flush(t, 0, mm, p, p + (PAGES << 12));
    h
}

/// Scenario 16: init_on_free zeroes frames as they are freed.
fn scenario_init_on_free(knobs: &str, seed: u64) -> H {
    let (h, _, _, _, _) = readers_then_reclaim(&format!("{knobs}\n\"init_on_free\" = true"), seed, &[]);
    h
}

/// Scenario 18: the pending generation is the first past a signed 16-bit
/// wrap (as after 32,768 LUF flushes; the counters are set there directly).
fn scenario_wrap(knobs: &str, seed: u64) -> H {
    let mut h = H::boot(knobs, seed);
    let d = h.allocator(3);
    *h.k.luf_mut() = foliosim::mm::luf::Luf::at_generation(0x7fff);
    let f = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let c = h.process(3);
    let (base, mut t) = h.map_file(a0, 0, f, prot::READ);
    for &tid in &[a0, a1] {
        t = h.read_all(tid, t, base);
    }
    let (_, t) = h.reclaim(c, t + 100, PAGES);
    let t = h.alloc_write(d, t + 100, 2 * PAGES);
    for &tid in &[a0, a1] {
        h.read_all(tid, t + 100, base);
    }
    h
}

/// Scenario 6 (page reporting exit): LUF'd frames drain to buddy, merge
/// into reportable blocks, and the free-page-reporting worker isolates
/// them and hands them to the host, which discards their contents.
fn scenario_reporting(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, t, _) = readers_then_reclaim(
        &format!("{knobs}\n\"page_reporting.enabled\" = true\n\"page_reporting.page_reporting_order\" = 5"),
        seed,
        &[],
    );
    let worker = h.k.prdev().expect("reporting device").tid();
    let t = h.k.pa_mut().drain_pages(t, 3);
    let c = h.k.tasks()[a[0] as usize].cpu;
    let _ = c;
    // A free reached the reporting order: the request, then the worker runs.
    if h.k.pa_mut().take_page_reporting_notify() {
        h.k.task_mut(worker).clock = t;
    }
    let r = h.rand(1000);
    let w = h.k.task_mut(worker);
    w.clock = w.clock.max(t + r);
    for _ in 0..8 {
        h.k.cpu_mut(h.k.tasks()[worker as usize].cpu).curr = worker;
        h.k.kthread_step(worker);
    }
    let t = h.k.tasks()[worker as usize].clock;
    for &tid in &a {
        h.read_all(tid, t + 10, base);
    }
    h
}

/// Scenario 11: after the LUF, another process write()s the file; A
/// reads again through its stale entries.
fn scenario_file_write(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, t, ds) = readers_then_reclaim(knobs, seed, &[8]);
    let w = ds[0];
    let (fd, t) = h.val(w, t + 100, Op::Open { file: 0 });
    let (_, t) = h.val(w, t, Op::Write { fd: fd as i32, len: PAGES << 12, buf: 0 });
    for &tid in &a {
        let r = h.rand(1000);
        h.read_all(tid, t + r, base);
    }
    h
}

/// Scenario 12: munmap then mmap(MAP_FIXED) of another file at the same
/// address: the PTE table is still there, so munmap's zap flushes the mm
/// (flush_tlb_batched_pending) before the new mapping is read.
fn scenario_map_fixed(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, t, _) = readers_then_reclaim(knobs, seed, &[]);
    let g = h.file(PAGES);
    let (_, t) = h.val(a[0], t + 100, Op::Munmap { addr: base, len: PAGES << 12 });
    let (fd, t) = h.val(a[0], t, Op::Open { file: g });
    let (_, t) =
        h.val(a[0], t, Op::Mmap { addr: base, len: PAGES << 12, prot: prot::READ, flags: map::SHARED | map::FIXED, fd: fd as i32, off: 0 });
    for &tid in &a {
        let r = h.rand(1000);
        h.read_all(tid, t + r, base);
    }
    h
}

/// Scenario 13: mprotect(PROT_WRITE) over the LUF'd range, then stores.
fn scenario_mprotect_write(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, t, _) = readers_then_reclaim(knobs, seed, &[]);
    let (_, t) = h.val(a[0], t + 100, Op::Mprotect { addr: base, len: PAGES << 12, prot: prot::READ | prot::WRITE });
    let (_, t) = h.run(a[0], t, Op::AccessRange { addr: base, stride: 4096, count: PAGES, kind: Access::Store });
    for &tid in &a[1..] {
        let r = h.rand(1000);
        h.read_all(tid, t + r, base);
    }
    h
}

/// Scenario 21: the reading process exits while its flushes are pending;
/// the next process gets the frames.
fn scenario_exit_reuse(knobs: &str, seed: u64) -> H {
    let (mut h, a, _, t, ds) = readers_then_reclaim(knobs, seed, &[3]);
    let mut t = t + 100;
    for &tid in a.iter().rev() {
        t = h.run(tid, t, Op::Exit).1;
    }
    let _ = h.alloc_write(ds[0], t + 100, 2 * PAGES);
    h
}

/// Scenario 17: an allocation with IRQs disabled on the reclaimer's CPU,
/// whose pcp list holds the LUF'd frames.
fn scenario_atomic(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, t, _) = readers_then_reclaim(knobs, seed, &[]);
    let r = h.rand(1000);
    let got = h.k.alloc_page_atomic(t + r, 3, 0);
    let t = got.map_or(t + r, |(_, t)| t);
    for &tid in &a {
        h.read_all(tid, t + 10, base);
    }
    h
}

fn all_scenarios(knobs: &str, seed: u64) -> Vec<(&'static str, H)> {
    vec![
        ("basic", scenario_basic(knobs, seed)),
        ("drain", scenario_drain(knobs, seed)),
        ("merge", scenario_merge(knobs, seed)),
        ("split race", scenario_race(knobs, seed, 4)),
        ("refill race", scenario_race(knobs, seed, 5)),
        ("concurrent flush", scenario_race(knobs, seed, 8)),
        ("ordinary flush", scenario_ordinary_flush(knobs, seed)),
        ("rw alias", scenario_rw_alias(knobs, seed)),
        ("wp pending", scenario_wp_pending(knobs, seed)),
        ("wrap", scenario_wrap(knobs, seed)),
        ("map fixed", scenario_map_fixed(knobs, seed)),
        ("mprotect write", scenario_mprotect_write(knobs, seed)),
        ("exit and reuse", scenario_exit_reuse(knobs, seed)),
    ]
}

#[test]
fn luf_as_specified_passes_every_scenario() {
    for seed in 1..=SEEDS {
        for (name, h) in all_scenarios(LUF11, seed) {
            assert!(h.violations().is_empty(), "seed {seed}, scenario {name}: {:?}", h.violations());
        }
        let h = scenario_init_on_free(LUF11, seed);
        assert!(h.violations().is_empty(), "seed {seed}, init_on_free: {:?}", h.violations());
        let h = scenario_file_write(LUF11, seed);
        assert!(h.violations().is_empty(), "seed {seed}, write(): {:?}", h.violations());
        let h = scenario_atomic(LUF, seed);
        assert!(h.violations().is_empty(), "seed {seed}, atomic allocation: {:?}", h.violations());
        let h = scenario_reporting(LUF, seed);
        assert!(h.violations().is_empty(), "seed {seed}, page reporting: {:?}", h.violations());
        assert!(h.stat("foliosim_page_reporting_reported_pages") > 0, "the worker reported blocks");
    }
}

#[test]
fn baseline_passes_every_scenario() {
    for seed in 1..=4 {
        for (name, h) in all_scenarios("", seed) {
            assert!(h.violations().is_empty(), "seed {seed}, scenario {name}: {:?}", h.violations());
            assert_eq!(h.stat("foliosim_luf_deferred"), 0);
        }
    }
}

#[test]
fn luf_defers_and_one_flush_retires_an_epoch() {
    let h = scenario_basic(LUF, 1);
    assert!(h.violations().is_empty(), "{:?}", h.violations());
    assert_eq!(h.stat("foliosim_luf_deferred"), PAGES as i64, "every read-only order-0 folio is LUF'd");
    assert!(h.stat("foliosim_luf_flush") >= 1);
    assert!(h.stat("foliosim_luf_alloc_pending") >= 1);
    // Without LUF the same reclaim flushes at unmap time instead.
    let b = scenario_basic("", 1);
    assert!(b.stat("foliosim_tlb_batched_flush") >= 1);
    assert_eq!(b.stat("foliosim_luf_flush"), 0);
}

/// v10 has no hook for a fault that installs a writable PTE: the checker
/// finds Dave Hansen's ptr1/ptr2 problem; v11's hook closes it.
#[test]
fn v10_misses_the_rw_alias_and_v11_catches_it() {
    let caught = (1..=4).any(|s| scenario_rw_alias(LUF, s).violations().iter().any(|v| v.starts_with("I6")));
    assert!(caught, "v10 leaves ptr1 reading stale data after ptr2 writes");
    for s in 1..=4 {
        let h = scenario_rw_alias(LUF11, s);
        assert!(h.violations().is_empty(), "{:?}", h.violations());
    }
}

/// Scenario 11 under v10: no hook on write(), so the stale readers see the
/// old data (I6b); v11's file_end_write hook closes it.
#[test]
fn v10_misses_a_file_write_and_v11_catches_it() {
    assert!((1..=4).any(|s| scenario_file_write(LUF, s).violations().iter().any(|v| v.starts_with("I6b"))));
}

#[test]
fn m1_skip_alloc_flush_is_caught() {
    assert!(caught("luf_skip_alloc_flush", LUF, scenario_basic));
}

#[test]
fn m2_d1_order_as_generation_is_caught() {
    assert!(caught("luf_d1_order_as_ugen", LUF, scenario_drain));
}

#[test]
fn m3_merge_keeps_older_is_caught() {
    assert!(caught("luf_merge_keeps_older", LUF, scenario_merge));
}

#[test]
fn m4_d2_split_drops_generation_is_caught() {
    assert!(caught("luf_d2_split_drops", LUF, |k, s| scenario_race(k, s, 4)));
}

#[test]
fn m5_d3_refill_drops_generation_is_caught() {
    assert!(caught("luf_d3_refill_drops", LUF, |k, s| scenario_race(k, s, 5)));
}

#[test]
fn m6_skip_isolation_check_is_caught() {
    assert!(caught("luf_skip_isolation_check", LUF, scenario_reporting));
}

#[test]
fn d5_irq_off_flush_is_caught() {
    assert!(caught("luf_d5_irq_off_flush", LUF, scenario_atomic));
}

#[test]
fn m7_no_on_flushing_refusal_is_caught() {
    assert!(caught("luf_no_on_flushing_refusal", LUF, scenario_ordinary_flush));
}

#[test]
fn m8_no_wait_is_caught() {
    assert!(caught("luf_no_wait", LUF, |k, s| scenario_race(k, s, 8)));
}

#[test]
fn m9_early_done_is_caught() {
    assert!(caught("luf_early_done", LUF, |k, s| scenario_race(k, s, 8)));
}

#[test]
fn m10_defer_writable_is_caught() {
    assert!(caught("luf_defer_writable", LUF, scenario_wp_pending) || caught("luf_defer_writable", LUF, scenario_ordinary_flush));
}

#[test]
fn m11_d6_no_wp_pending_check_is_caught() {
    assert!(caught("luf_d6_no_wp_pending_check", LUF, scenario_wp_pending));
}

#[test]
fn m12_no_write_hooks_is_caught() {
    assert!(caught("luf_no_wp_hooks", LUF11, scenario_rw_alias));
}

#[test]
fn m13_poison_pending_is_caught() {
    assert!(caught("luf_poison_pending", LUF11, scenario_init_on_free));
}

#[test]
fn m14_signed_compare_is_caught() {
    assert!(caught("luf_signed_compare", LUF, scenario_wrap));
}

#[test]
fn scenarios_are_deterministic() {
    let a = scenario_race(LUF, 3, 8);
    let b = scenario_race(LUF, 3, 8);
    let sa: Vec<_> = a.k.stat().iter().collect();
    let sb: Vec<_> = b.k.stat().iter().collect();
    assert_eq!(sa, sb);
}
