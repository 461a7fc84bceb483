//! Each per-page cost term is charged where Linux does the work, as often
//! as Linux does it: a fault, zap or free is timed with the term at 0 and
//! at a known value, and the difference must be exactly that many charges.
//! (What the terms are worth is `foliosim calibrate`'s job; these tests
//! only count.)

mod common;

use common::H;
use foliosim::config;
use foliosim::hw::profile::Profile;
use foliosim::kernel::Kernel;
use foliosim::mm::vmstat::Entry;
use foliosim::sim::Ns;
use foliosim::workload::{map, prot, Access, Op};

const UPSTREAM: &str = "\"anon_folio.mode\" = \"upstream\"";
const MTHP_64K: &str = "\"anon_folio.mode\" = \"upstream\"\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"";
const THP_2M: &str = "\"anon_folio.mode\" = \"upstream\"\n\"kernel/mm/transparent_hugepage/enabled\" = \"always\"";
const MIB: u64 = 1 << 20;

fn boot(knobs: &str, tweak: &dyn Fn(&mut Profile)) -> H {
    let text = format!(
        "seed = 1\n[machine]\nprofile = \"generic-x86\"\nnr_cpus = 2\nnode_mem_mib = [512, 64]\n[workload]\nname = \"mmap1\"\n[run]\nduration_s = 0.01\ncheck = true\n[knobs]\n{knobs}\n"
    );
    let mut c = config::from_toml(&text, "costs-test").unwrap();
    tweak(&mut c.profile);
    H { k: Kernel::boot(c.profile, c.knobs, true, 1).unwrap(), rng: 1, arena: Default::default() }
}

fn entry(h: &H, tid: u32, e: Entry) -> Ns {
    h.k.tasks()[tid as usize].entry_ns[e as usize]
}

fn mmap(h: &mut H, tid: u32, len: u64) -> u64 {
    let (a, _) =
        h.val(tid, 0, Op::Mmap { addr: 0, len, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 });
    a as u64
}

/// Time of the fault a store to `addr` takes.
fn fault(h: &mut H, tid: u32, addr: u64) -> Ns {
    access_fault(h, tid, addr, Access::Store)
}

/// Time of the fault an access of `kind` to `addr` takes.
fn access_fault(h: &mut H, tid: u32, addr: u64, kind: Access) -> Ns {
    let f0 = entry(h, tid, Entry::Fault);
    h.run(tid, 0, Op::Access { addr, kind });
    entry(h, tid, Entry::Fault) - f0
}

fn munmap(h: &mut H, tid: u32, addr: u64, len: u64) -> Ns {
    let u0 = entry(h, tid, Entry::Munmap);
    h.val(tid, 0, Op::Munmap { addr, len });
    entry(h, tid, Entry::Munmap) - u0
}

/// The first fault in a fresh 4 MiB mapping (PMD-aligned: a PMD multiple)
/// and the munmap of it, with the profile tweaked.
fn fault_and_unmap(knobs: &str, tweak: &dyn Fn(&mut Profile)) -> (Ns, Ns) {
    let mut h = boot(knobs, tweak);
    let t = h.process(0);
    let a = mmap(&mut h, t, 4 * MIB);
    let f = fault(&mut h, t, a + 4096);
    let u = munmap(&mut h, t, a, 4 * MIB);
    assert!(h.k.check().violations.is_empty(), "{:?}", h.k.check().violations);
    (f, u)
}

/// (fault, munmap) time added by raising one term by `by`.
fn added(knobs: &str, tweak: fn(&mut Profile, f64), by: f64) -> (i64, i64) {
    let (f0, u0) = fault_and_unmap(knobs, &|p| tweak(p, 0.0));
    let (f1, u1) = fault_and_unmap(knobs, &|p| tweak(p, by));
    (f1 as i64 - f0 as i64, u1 as i64 - u0 as i64)
}

#[test]
fn a_large_folio_fault_prepares_every_tail_page() {
    let tail = |p: &mut Profile, v: f64| p.cost.prep_tail_ns = v;
    assert_eq!(added(UPSTREAM, tail, 100.0).0, 0, "an order-0 folio has no tail");
    assert_eq!(added(MTHP_64K, tail, 100.0).0, 15 * 100, "a 64 KiB folio has 15 tail pages");
    assert_eq!(added(THP_2M, tail, 100.0).0, 511 * 100, "a PMD THP has 511");
}

#[test]
fn per_page_rmap_work_is_charged_for_pte_mapped_large_folios_only() {
    let rmap = |p: &mut Profile, v: f64| p.cost.rmap_page_ns = v;
    assert_eq!(added(UPSTREAM, rmap, 100.0), (0, 0), "an order-0 page: rmap_ns covers it");
    // folio_add_new_anon_rmap and folio_remove_rmap_ptes touch every page.
    assert_eq!(added(MTHP_64K, rmap, 100.0), (16 * 100, 16 * 100));
    // A PMD mapping updates the entire mapcount only.
    assert_eq!(added(THP_2M, rmap, 100.0), (0, 0));
}

#[test]
fn every_pte_is_set_and_cleared_and_a_pmd_is_one_entry() {
    let set = |p: &mut Profile, v: f64| p.cost.pte_set_ns = v;
    let clear = |p: &mut Profile, v: f64| p.cost.pte_clear_ns = v;
    assert_eq!(added(MTHP_64K, set, 100.0).0, 16 * 100);
    assert_eq!(added(MTHP_64K, clear, 100.0).1, 16 * 100);
    assert_eq!(added(THP_2M, set, 100.0).0, 100);
    assert_eq!(added(THP_2M, clear, 100.0).1, 100, "zap_huge_pmd clears one entry");
}

#[test]
fn freeing_a_large_folio_checks_every_tail_page() {
    let free = |p: &mut Profile, v: f64| p.cost.free_tail_ns = v;
    assert_eq!(added(UPSTREAM, free, 100.0).1, 0);
    assert_eq!(added(MTHP_64K, free, 100.0).1, 15 * 100);
    assert_eq!(added(THP_2M, free, 100.0).1, 511 * 100);
}

/// Orders above PAGE_ALLOC_COSTLY_ORDER (3) but below PMD_ORDER skip the
/// per-CPU lists: their free takes zone->lock and merges in the buddy.
#[test]
fn an_order_4_free_takes_the_zone_lock_and_smaller_orders_do_not() {
    for (knobs, locks) in [
        (MTHP_64K, true),
        ("\"anon_folio.mode\" = \"upstream\"\n\"kernel/mm/transparent_hugepage/hugepages-32kB/enabled\" = \"always\"", false),
    ] {
        let mut h = boot(knobs, &|_| {});
        let t = h.process(0);
        let a = mmap(&mut h, t, 4 * MIB);
        fault(&mut h, t, a);
        let before = h.k.pa().zone_lock_stats(0).acquisitions;
        munmap(&mut h, t, a, 4 * MIB);
        let after = h.k.pa().zone_lock_stats(0).acquisitions;
        assert_eq!(after > before, locks, "{knobs}: zone lock taken {} times by the free", after - before);
    }
}

/// A page reused while what this CPU brought into its caches since its
/// last write (its clear) fits in them (cpu.l2_kib + cpu.llc_kib) clears at
/// the cache bandwidth; a page fresh from the allocator, one another CPU
/// wrote, and one reused after the cache turned over, at the node's; and
/// each of those cold folios pays alloc_cold_ns once, a warm one not. What
/// counts is the write, not the free: pages freed in the order they were
/// written come back last-written first, and the k-th page reused has 2k
/// pages brought in since its write (the k written after it, the k reused
/// before it), so half the cache's worth is warm; a page written long
/// before its free is cold however soon it is reused.
#[test]
fn a_page_clears_at_the_warm_bandwidth_only_while_this_cpus_cache_holds_it() {
    // The times of the refaults of `n` pages faulted on CPU 0, then
    // `between` more pages elsewhere, then the `n` zapped, refaulted on
    // CPU `second`, with a 64-page cache.
    fn refaults(warm_bw: f64, cold: f64, second: u32, n: u64, between: u64) -> Vec<Ns> {
        let mut h = boot(UPSTREAM, &|p| {
            p.cost.zero_warm_bw_gbps = warm_bw;
            p.cpu.l2_kib = 0;
            p.cpu.llc_kib = 64 * 4;
            p.cost.alloc_cold_ns = cold;
        });
        let t0 = h.process(0);
        let t1 = h.process(1);
        let a = mmap(&mut h, t0, 4 * MIB);
        let b = mmap(&mut h, t1, 4 * MIB);
        let c = mmap(&mut h, t0, 4 * MIB);
        // Page tables of all first, so the refaults allocate data pages only.
        fault(&mut h, t1, b + 2 * MIB);
        fault(&mut h, t0, c);
        for i in 0..n {
            fault(&mut h, t0, a + i * 4096);
        }
        for i in 0..between {
            fault(&mut h, t0, c + (i + 1) * 4096);
        }
        // MADV_DONTNEED frees them on CPU 0 (to its per-CPU list, which
        // hands them back last-freed first).
        h.val(t0, 0, Op::Madvise { addr: a, len: n * 4096, advice: foliosim::workload::Advice::DontNeed });
        let (tid, at) = if second == 0 { (t0, a) } else { (t1, b) };
        let f = (0..n).map(|i| fault(&mut h, tid, at + i * 4096)).collect();
        assert!(h.k.check().violations.is_empty(), "{:?}", h.k.check().violations);
        f
    }
    let clear = |gbps: f64| (4096.0 / gbps).round() as i64;
    let diff = |a: &[Ns], b: &[Ns]| -> Vec<i64> { a.iter().zip(b).map(|(x, y)| *x as i64 - *y as i64).collect() };
    // Reused on the same CPU: the first 32 (half the cache: each has
    // twice that brought in since its write) at the warm bandwidth,
    // exactly; the rest as if cold.
    let d = diff(&refaults(10.0, 0.0, 0, 100, 0), &refaults(40.0, 0.0, 0, 100, 0));
    assert!(d[..32].iter().all(|&x| x == clear(10.0) - clear(40.0)), "{d:?}");
    assert!(d[32..].iter().all(|&x| x == 0), "{d:?}");
    // Written, then a cache's worth written elsewhere, then freed: cold
    // from the first reuse on, though freed just before it.
    assert_eq!(refaults(10.0, 0.0, 0, 16, 64), refaults(40.0, 0.0, 0, 16, 64));
    // 48 pages between: the k-th reuse has 48 + 2k + 1 since its write,
    // so the 8 last written of the 16 are warm.
    let d = diff(&refaults(10.0, 0.0, 0, 16, 48), &refaults(40.0, 0.0, 0, 16, 48));
    assert_eq!(d.iter().filter(|&&x| x != 0).count(), 8, "{d:?}");
    // Reused on another CPU: all cold.
    assert_eq!(refaults(10.0, 0.0, 1, 100, 0), refaults(40.0, 0.0, 1, 100, 0));
    // The metadata misses: none for the 32 warm refaults, one charge for
    // each cold one, on this CPU after the cache turned over and on another.
    let more = |second: u32| -> Vec<i64> { diff(&refaults(40.0, 100.0, second, 100, 0), &refaults(40.0, 0.0, second, 100, 0)) };
    let d = more(0);
    assert!(d[..32].iter().all(|&x| x == 0) && d[32..].iter().all(|&x| x == 100), "{d:?}");
    // (The first refault on CPU 1 also allocates the PTE table of b's
    // first 2 MiB: a cold page too.)
    let d1 = more(1);
    assert!(d1[0] == 200 && d1[1..].iter().all(|&x| x == 100), "{d1:?}");
    // The first touch of fresh memory is cold.
    let first = |bw: f64| fault_and_unmap(UPSTREAM, &|p| p.cost.zero_warm_bw_gbps = bw).0;
    assert_eq!(first(10.0), first(40.0));
}

/// A TLB miss walks: at walk_cached_ns into the PTE table this CPU walked
/// last, at walk_ns into another one.
#[test]
fn a_walk_into_the_last_walked_table_is_cheaper() {
    let user = |walk: f64, cached: f64, stride: u64| -> Ns {
        let mut h = boot(UPSTREAM, &|p| {
            p.tlb.walk_ns = walk;
            p.tlb.walk_cached_ns = cached;
        });
        let t = h.process(0);
        let a = mmap(&mut h, t, 64 * MIB);
        for i in 0..8 {
            fault(&mut h, t, a + i * stride);
        }
        // Re-touch the populated pages: every access misses the TLB
        // (flushed), none faults.
        h.k.cpu_mut(0).tlb.flush_all();
        let u0 = h.k.tasks()[t as usize].user_ns;
        for i in 0..8 {
            h.run(t, 0, Op::Access { addr: a + i * stride, kind: Access::Store });
        }
        h.k.tasks()[t as usize].user_ns - u0
    };
    // Consecutive pages share one PTE table: one walk that is not cached
    // (the table of the last fault's re-walk is the same: all cached).
    assert_eq!(user(1000.0, 0.0, 4096), user(0.0, 0.0, 4096));
    assert_eq!(user(0.0, 10.0, 4096) - user(0.0, 0.0, 4096), 8 * 10);
    // Pages 2 MiB apart are each in another table: every walk random.
    assert_eq!(user(100.0, 0.0, 2 * MIB) - user(0.0, 0.0, 2 * MIB), 8 * 100);
}

/// A cold folio's metadata misses are once per folio, whatever its order:
/// the first fault of fresh memory pays them for its folio and for each
/// page-table page it allocates, the same at 4 KiB and at 64 KiB.
#[test]
fn a_cold_folio_pays_its_metadata_misses_once() {
    let cold = |p: &mut Profile, v: f64| p.cost.alloc_cold_ns = v;
    let (f4, u4) = added(UPSTREAM, cold, 100.0);
    assert!(f4 >= 100 && f4 % 100 == 0 && u4 == 0, "{f4} {u4}");
    assert_eq!(added(MTHP_64K, cold, 100.0), (f4, 0));
}

/// A cold large folio pays alloc_cold_large_ns once besides alloc_cold_ns
/// (its fields past the head page); an order-0 page (a 4 KiB folio, a
/// page-table page) never.
#[test]
fn a_cold_large_folio_pays_its_extra_misses_once() {
    let large = |p: &mut Profile, v: f64| p.cost.alloc_cold_large_ns = v;
    assert_eq!(added(UPSTREAM, large, 100.0), (0, 0));
    assert_eq!(added(MTHP_64K, large, 100.0), (100, 0));
    assert_eq!(added(THP_2M, large, 100.0), (100, 0));
    // Zapped and faulted again at once on the same CPU: the same folio,
    // still in its caches, pays neither (nor the clear at the node's
    // bandwidth: a slower node changes nothing).
    let refault = |large: f64, cold: f64, zero_bw: f64| -> Ns {
        let mut h = boot(MTHP_64K, &|p| {
            p.cost.alloc_cold_large_ns = large;
            p.cost.alloc_cold_ns = cold;
            p.nodes[0].zero_bw_gbps = zero_bw;
        });
        let t = h.process(0);
        let a = mmap(&mut h, t, 4 * MIB);
        fault(&mut h, t, a);
        h.val(t, 0, Op::Madvise { addr: a, len: 64 * 1024, advice: foliosim::workload::Advice::DontNeed });
        fault(&mut h, t, a)
    };
    let base = refault(0.0, 0.0, 10.0);
    assert_eq!((refault(100.0, 0.0, 10.0), refault(0.0, 100.0, 10.0), refault(0.0, 0.0, 1.0)), (base, base, base));
}

#[test]
fn a_large_folio_fault_and_free_pay_their_fixed_extra_once() {
    let alloc = |p: &mut Profile, v: f64| p.cost.alloc_anon_folio_ns = v;
    let free = |p: &mut Profile, v: f64| p.cost.free_large_folio_ns = v;
    assert_eq!(added(UPSTREAM, alloc, 100.0), (0, 0));
    assert_eq!(added(MTHP_64K, alloc, 100.0), (100, 0));
    assert_eq!(added(THP_2M, alloc, 100.0), (100, 0));
    assert_eq!(added(UPSTREAM, free, 100.0), (0, 0));
    assert_eq!(added(MTHP_64K, free, 100.0), (0, 100));
    assert_eq!(added(THP_2M, free, 100.0), (0, 100));
}

/// The per-folio free work is the same whichever path a freed block leaves
/// by: an order-0 page, a page-table page and a PMD THP through a pcp list
/// (each pays the list add too), a 64 KiB folio (order 4, no pcp list)
/// straight to the buddy lists (it pays the free work, not the list add).
#[test]
fn every_block_freed_pays_the_free_work_once_whichever_list_takes_it() {
    let free = |p: &mut Profile, v: f64| p.cost.free_folio_ns = v;
    let pcp = |p: &mut Profile, v: f64| p.cost.free_pcp_ns = v;
    let (_, u4) = added(UPSTREAM, free, 100.0);
    assert!(u4 >= 100, "{u4}");
    assert_eq!(added(UPSTREAM, free, 100.0), added(UPSTREAM, pcp, 100.0));
    assert_eq!(added(THP_2M, free, 100.0), added(THP_2M, pcp, 100.0));
    let (f, u) = added(MTHP_64K, free, 100.0);
    let (_, u_pcp) = added(MTHP_64K, pcp, 100.0);
    assert_eq!((f, u - u_pcp), (0, 100), "the 64 KiB folio pays it once, by the buddy path");
}

// ---------------------------------------------------------------- placement --

const GLIBC: &foliosim::mm::exec::ProcessImage = &foliosim::mm::exec::GLIBC_2_36_X86_64;

/// A process with the glibc image mapped (not touched).
fn imaged(knobs: &str) -> (H, u32) {
    let mut h = boot(knobs, &|_| {});
    let t = h.process(0);
    let mm = h.k.tasks()[t as usize].mm;
    let f = h.file(GLIBC.file_bytes() >> 12);
    h.k.map_process_image(mm, f, GLIBC).unwrap();
    (h, t)
}

fn rule(r: &str) -> String {
    format!("{UPSTREAM}\n\"anon_folio.thp_get_unmapped_area\" = \"{r}\"")
}

/// Where an unhinted anonymous mmap lands: each era's PMD alignment rule,
/// below a glibc process image (so that the mmap area's top is not aligned).
#[test]
fn each_alignment_rule_aligns_the_lengths_its_kernel_aligns() {
    let lands = |r: &str, len: u64| mmap(&mut imaged(&rule(r)).0, 0, len);
    let pmd = |a: u64| a.is_multiple_of(2 * MIB);
    for (r, aligned) in [
        ("none", [false, false, false]),
        ("len_ge_pmd_bottom", [false, true, true]),
        ("len_ge_pmd", [false, true, true]),
        ("len_pmd_aligned", [false, false, true]),
    ] {
        let got = [pmd(lands(r, MIB)), pmd(lands(r, 2 * MIB + 4096)), pmd(lands(r, 4 * MIB))];
        assert_eq!(got, aligned, "{r}: 1 MiB, 2 MiB + 4 KiB, 4 MiB");
    }
}

/// The addresses, worked by hand from an empty mmap area (top 0x7ffff7fff000):
/// unaligned, a length lands at the top minus itself; aligned,
/// thp_get_unmapped_area finds len + 2 MiB at top - len - 2 MiB and rounds
/// that up to the next 2 MiB boundary.
#[test]
fn each_alignment_rule_puts_2_mib_plus_4_kib_where_its_kernel_does() {
    let at = |r: &str, len: u64| {
        let mut h = boot(&rule(r), &|_| {});
        let t = h.process(0);
        mmap(&mut h, t, len)
    };
    // 0x7ffff7fff000 - 0x201000 = 0x7ffff7dfe000;
    // 0x7ffff7fff000 - 0x401000 = 0x7ffff7bfe000, rounded up: 0x7ffff7c00000.
    assert_eq!(at("none", 2 * MIB + 4096), 0x7fff_f7df_e000);
    assert_eq!(at("len_ge_pmd", 2 * MIB + 4096), 0x7fff_f7c0_0000);
    assert_eq!(at("len_pmd_aligned", 2 * MIB + 4096), 0x7fff_f7df_e000);
    // 2 MiB: 0x7ffff7dff000 unaligned; 0x7ffff7bff000 rounded up: 0x7ffff7c00000.
    assert_eq!(at("none", 2 * MIB), 0x7fff_f7df_f000);
    assert_eq!(at("len_ge_pmd", 2 * MIB), 0x7fff_f7c0_0000);
    assert_eq!(at("len_pmd_aligned", 2 * MIB), 0x7fff_f7c0_0000);
}

/// Top-down, two 4 MiB mappings in a row: since 96204e15310c (6.8) the
/// second lands right below the first and they merge into one VMA;
/// before it (6.7, and 6.1-rc's f35b5d7d676e) the PMD of padding stays
/// between them (mm_get_unmapped_area found 6 MiB ending at the first's
/// aligned start: its own start is aligned and is kept).
#[test]
fn before_the_topdown_fix_an_aligned_mapping_keeps_its_padding_above_it() {
    let pair = |r: &str| {
        let mut h = boot(&rule(r), &|_| {});
        let t = h.process(0);
        let (a, b) = (mmap(&mut h, t, 4 * MIB), mmap(&mut h, t, 4 * MIB));
        let mm = h.k.tasks()[t as usize].mm as usize;
        (a, b, h.k.mms()[mm].vma_lookup(a).map(|v| v.start))
    };
    let (a, b, start) = pair("len_ge_pmd");
    assert_eq!((b + 4 * MIB, start), (a, Some(b)), "6.8-6.11: adjacent, one VMA");
    let (a, b, start) = pair("len_ge_pmd_bottom");
    assert!(a.is_multiple_of(2 * MIB) && b.is_multiple_of(2 * MIB));
    assert_eq!((b + 6 * MIB, start), (a, Some(a)), "6.7: a 2 MiB gap, two VMAs");
}

/// thp_get_unmapped_area needs a gap of len + 2 MiB: the 2 MiB hole an
/// aligned 2 MiB mapping leaves is not reused by the next one. Addresses
/// as the development host (Linux 6.18) gave them under `setarch -R` below
/// a glibc image: a at 0x7ffff7a00000, b at 0x7ffff7800000, and after
/// munmap(a) the next 2 MiB at 0x7ffff7600000.
#[test]
fn an_aligned_mapping_needs_its_padding_in_the_gap() {
    let (mut h, t) = imaged(UPSTREAM);
    let a = mmap(&mut h, t, 2 * MIB);
    let b = mmap(&mut h, t, 2 * MIB);
    assert_eq!((a, b), (0x7fff_f7a0_0000, 0x7fff_f780_0000));
    munmap(&mut h, t, a, 2 * MIB);
    assert_eq!(mmap(&mut h, t, 2 * MIB), 0x7fff_f760_0000);
}

/// A shared anonymous mapping is shmem's (shmem_get_unmapped_area, with
/// shmem_enabled = never: not aligned), whatever the anonymous rule says.
#[test]
fn a_shared_anonymous_mapping_is_not_thp_aligned() {
    let mut h = boot(&rule("len_pmd_aligned"), &|_| {});
    let t = h.process(0);
    let (a, _) = h.val(
        t,
        0,
        Op::Mmap { addr: 0, len: 2 * MIB, prot: prot::READ | prot::WRITE, flags: map::SHARED | map::ANONYMOUS, fd: -1, off: 0 },
    );
    assert_eq!(a as u64, 0x7fff_f7df_f000);
}

/// The glibc image puts tlb_flush2's 1 MiB where the development host's
/// tlb_flush2 had it under `setarch -R` (0x7ffff7cd2000, 8 KiB past a 64 KiB
/// boundary): with only 64K folios, 15 whole blocks and 16 order-0 pages
/// per pass, 1 + 31/256 faults per op, as the real run counts.
#[test]
fn a_process_image_puts_the_mapping_where_linux_does() {
    let (mut h, t) = imaged(MTHP_64K);
    let a = mmap(&mut h, t, MIB);
    assert_eq!(a, 0x7fff_f7cd_2000);
    let faults = |h: &H| h.k.stat().get(foliosim::mm::vmstat::Stat::Pgfault);
    let f0 = faults(&h);
    for i in 0..256 {
        h.run(t, 0, Op::Access { addr: a + i * 4096, kind: Access::Store });
    }
    assert_eq!(faults(&h) - f0, 15 + 16);
}

/// A will-it-scale process starts its loop with the image's mappings
/// (binary at ELF_ET_DYN_BASE, the brk heap after its bss, the stack under
/// STACK_TOP, libc and ld.so in the mmap area) and their resident pages:
/// its RSS before the loop is the image's, 2196 KiB (the sum of the
/// resident sizes; the real harness's baseline was 2188 KiB).
#[test]
fn a_will_it_scale_process_starts_with_its_image_resident() {
    let cfg = r#"{"seed": 1, "machine": {"profile": "generic-x86", "nr_cpus": 2}, "workload": {"name": "tlb_flush2"},
                  "run": {"warmup_s": 0.0, "duration_s": 0.0001, "check": true}}"#;
    let out: serde_json::Value = serde_json::from_str(&foliosim::api::run_json(cfg, &mut |_| true).unwrap()).unwrap();
    assert_eq!(out["memory"]["base_rss_kib"], 2196);
    assert_eq!(out["checker"]["violations"].as_array().map(|v| v.len()), Some(0));
    let none = cfg.replace(r#""tlb_flush2"}"#, r#""tlb_flush2", "process_image": "none"}"#);
    let out: serde_json::Value = serde_json::from_str(&foliosim::api::run_json(&none, &mut |_| true).unwrap()).unwrap();
    assert_eq!(out["memory"]["base_rss_kib"], 0);

    let (mut h, t) = imaged(UPSTREAM);
    let mm = h.k.tasks()[t as usize].mm as usize;
    h.k.touch_process_image(t, GLIBC).unwrap();
    let m = &h.k.mms()[mm];
    let vma = |a: u64| m.vma_lookup(a).map(|v| (v.start, v.end, v.flags, v.is_anon()));
    use foliosim::mm::vma::vm;
    assert_eq!(vma(0x5555_5555_4000).map(|v| v.0), Some(0x5555_5555_4000), "binary");
    assert_eq!(
        vma(0x5555_5557_5000),
        Some((0x5555_5557_5000, 0x5555_5559_6000, vm::READ | vm::WRITE | vm::MAYWRITE | vm::BRK, true)),
        "heap"
    );
    assert_eq!(m.brk(), (0x5555_5557_5000, 0x5555_5559_6000));
    assert_eq!(
        vma(0x7fff_ffff_e000),
        Some((0x7fff_fffd_e000, 0x7fff_ffff_f000, vm::READ | vm::WRITE | vm::MAYWRITE | vm::GROWSDOWN, true)),
        "stack"
    );
    assert_eq!(vma(0x7fff_f7dd_5000).map(|v| (v.0, v.3)), Some((0x7fff_f7dd_5000, false)), "libc's first segment");
    assert!(vma(0x7fff_f7fb_7000).is_none(), "ld.so's hole");
    assert_eq!(m.rss() * 4, 2196);
}

/// A fault pays `fault_after_syscall_ns` when the CPU's last kernel entry
/// was a system call (the mmap before the first store, tlb_flush2's
/// madvise before its load), never when it was another fault.
#[test]
fn a_fault_right_after_a_system_call_pays_for_its_cold_path() {
    let run = |v: f64| {
        let mut h = boot(UPSTREAM, &|p| p.cost.fault_after_syscall_ns = v);
        let t = h.process(0);
        let a = mmap(&mut h, t, 4 * MIB);
        let first = fault(&mut h, t, a);
        let second = fault(&mut h, t, a + 4096);
        h.val(t, 0, Op::Madvise { addr: a, len: 4096, advice: foliosim::workload::Advice::DontNeed });
        let after_madvise = access_fault(&mut h, t, a, Access::Load);
        assert!(h.k.check().violations.is_empty(), "{:?}", h.k.check().violations);
        [first, second, after_madvise]
    };
    let (base, more) = (run(0.0), run(500.0));
    let added: Vec<i64> = base.iter().zip(&more).map(|(b, m)| *m as i64 - *b as i64).collect();
    assert_eq!(added, [500, 0, 500], "after mmap, after a fault, after madvise");
}

/// A folio freed on a CPU leaves its next fault `fault_after_free_ns` to
/// pay (tlb_flush2's load after the madvise that freed the page it wrote)
/// and its next folio allocation `alloc_after_free_ns` (the store after
/// that load), each once; a madvise that frees nothing leaves both alone.
#[test]
fn the_fault_and_the_allocation_after_a_free_pay_once_for_what_it_displaced() {
    let run = |f: f64, a: f64| {
        let mut h = boot(UPSTREAM, &|p| {
            p.cost.fault_after_free_ns = f;
            p.cost.alloc_after_free_ns = a;
        });
        let t = h.process(0);
        let m = mmap(&mut h, t, 4 * MIB);
        let load = |h: &mut H, addr: u64| access_fault(h, t, addr, Access::Load);
        let dontneed = |h: &mut H, addr: u64| h.val(t, 0, Op::Madvise { addr, len: 4096, advice: foliosim::workload::Advice::DontNeed });
        let first = fault(&mut h, t, m);
        let second = fault(&mut h, t, m + 4096);
        dontneed(&mut h, m);
        let load_after_free = load(&mut h, m);
        let store_after_it = fault(&mut h, t, m + 2 * 4096);
        let next_store = fault(&mut h, t, m + 3 * 4096);
        dontneed(&mut h, m + 4 * 4096);
        let load_after_empty = load(&mut h, m + 4 * 4096);
        assert!(h.k.check().violations.is_empty(), "{:?}", h.k.check().violations);
        [first, second, load_after_free, store_after_it, next_store, load_after_empty]
    };
    let (base, more) = (run(0.0, 0.0), run(300.0, 700.0));
    let added: Vec<i64> = base.iter().zip(&more).map(|(b, m)| *m as i64 - *b as i64).collect();
    assert_eq!(
        added,
        [0, 0, 300, 700, 0, 0],
        "stores, the load after the free, the store after it, the next, the load after an empty madvise"
    );
}

/// A fresh read-only mapping by task `t` of a tmpfs file whose every page
/// is cached and uptodate (read through an earlier mapping, since
/// unmapped), none of them mapped yet: (address, time).
fn cached_file_mapping(h: &mut H, t: u32) -> (u64, Ns) {
    // tmpfs: its pages are uptodate from their first fault (a disk file's
    // wait for their read to complete).
    let ino = h.k.new_inode(foliosim::workload::FsKind::Tmpfs, common::PAGES << 12);
    let (a, at) = h.map_file(t, 0, ino, prot::READ);
    let at = h.read_all(t, at, a);
    let (_, at) = h.val(t, at, Op::Munmap { addr: a, len: common::PAGES << 12 });
    h.map_file(t, at, ino, prot::READ)
}

/// Fault-around (filemap_map_pages) walks the page cache once: the
/// window's first folio costs a lookup, each next one a step of the walk
/// (priced as read()'s per-folio batch step), never a whole lookup each.
#[test]
fn fault_around_looks_up_the_page_cache_once_per_window() {
    let run = |lookup: f64, step: f64| {
        let mut h = boot(UPSTREAM, &|p| {
            p.cost.pagecache_lookup_ns = lookup;
            p.cost.pagecache_read_ns = step;
        });
        let t = h.process(0);
        let (a, at) = cached_file_mapping(&mut h, t);
        // The first 64 KiB-aligned window wholly inside the mapping.
        let w = (a + 0xffff) & !0xffff;
        let (f0, n0) = (entry(&h, t, Entry::Fault), h.k.stat().get(foliosim::mm::vmstat::Stat::FaultAroundPages));
        h.run(t, at, Op::Access { addr: w, kind: Access::Load });
        let f = entry(&h, t, Entry::Fault) - f0;
        assert_eq!(h.k.stat().get(foliosim::mm::vmstat::Stat::FaultAroundPages) - n0, 15, "the fault mapped its 64 KiB window");
        assert!(h.k.check().violations.is_empty(), "{:?}", h.k.check().violations);
        f as i64
    };
    let base = run(0.0, 0.0);
    assert_eq!(run(1000.0, 0.0) - base, 1000, "one lookup for the 16-page window");
    assert_eq!(run(0.0, 1000.0) - base, 15_000, "a walk step for each of the 15 other folios");
}

/// A VMA that starts inside a 64 KiB-aligned window gets a whole window
/// from its start (do_fault_around's from_pte + nr_pages, Linux 6.4 on, and
/// start_pgoff + nr_pages before it), not the rest of the aligned one.
#[test]
fn fault_around_maps_a_whole_window_from_the_vma_start() {
    let mut h = boot(UPSTREAM, &|_| {});
    let t = h.process(0);
    let (a, at) = cached_file_mapping(&mut h, t);
    // Cut the mapping's head so that it starts 5 pages into a 64 KiB
    // window whose next 16 pages stay inside one PTE table.
    let mut w = (a + 0xffff) & !0xffff;
    if w % (2 << 20) + 21 * 4096 > 2 << 20 {
        w += 0x10000;
    }
    let start = w + 5 * 4096;
    let (_, at) = h.val(t, at, Op::Munmap { addr: a, len: start - a });
    let n0 = h.k.stat().get(foliosim::mm::vmstat::Stat::FaultAroundPages);
    h.run(t, at, Op::Access { addr: start, kind: Access::Load });
    assert_eq!(h.k.stat().get(foliosim::mm::vmstat::Stat::FaultAroundPages) - n0, 15, "16 pages from the VMA's start, not 11");
    assert!(h.k.check().violations.is_empty(), "{:?}", h.k.check().violations);
}

/// munmap of a shared file mapping pays `zap_file_pte_ns` once per
/// page-cache PTE it clears (zap_present_folio_ptes' folio_mark_dirty and
/// folio_mark_accessed), and never for an anonymous page.
#[test]
fn a_zap_pays_the_page_cache_folio_work_once_per_file_pte() {
    let unmap = |v: f64, file: bool| {
        let mut h = boot(UPSTREAM, &|p| p.cost.zap_file_pte_ns = v);
        let t = h.process(0);
        let (a, at) = if file {
            let ino = h.k.new_inode(foliosim::workload::FsKind::Tmpfs, common::PAGES << 12);
            let (a, at) = h.map_file(t, 0, ino, prot::READ | prot::WRITE);
            let (_, at) = h.run(t, at, Op::AccessRange { addr: a, stride: 4096, count: common::PAGES, kind: Access::Store });
            (a, at)
        } else {
            h.anon(t, 0, true)
        };
        let u0 = entry(&h, t, Entry::Munmap);
        h.val(t, at, Op::Munmap { addr: a, len: common::PAGES << 12 });
        assert!(h.k.check().violations.is_empty(), "{:?}", h.k.check().violations);
        (entry(&h, t, Entry::Munmap) - u0) as i64
    };
    assert_eq!(unmap(1000.0, true) - unmap(0.0, true), 1000 * common::PAGES as i64, "each written tmpfs page");
    assert_eq!(unmap(1000.0, false), unmap(0.0, false), "anonymous pages");
}

/// A VMA's first anonymous fault makes its anon_vma (anon_vma_prepare_ns,
/// once, whatever the folio size); its next faults find it there.
#[test]
fn the_first_anonymous_fault_in_a_vma_makes_its_anon_vma_once() {
    let prep = |p: &mut Profile, v: f64| p.cost.anon_vma_prepare_ns = v;
    for knobs in [UPSTREAM, MTHP_64K, THP_2M] {
        assert_eq!(added(knobs, prep, 1000.0).0, 1000, "{knobs}");
    }
    let second = |v: f64| {
        let mut h = boot(UPSTREAM, &|p| p.cost.anon_vma_prepare_ns = v);
        let t = h.process(0);
        let a = mmap(&mut h, t, 4 * MIB);
        fault(&mut h, t, a);
        fault(&mut h, t, a + 3 * MIB)
    };
    assert_eq!(second(1000.0), second(0.0), "the second fault, in another PTE table of the same VMA");
}

/// munmap's walks (the zap's and free_pgtables') each step over every
/// empty PMD entry of the region: a 4 MiB region with one page written
/// has one PMD entry without a PTE table.
#[test]
fn munmap_steps_over_each_empty_pmd_entry_in_both_walks() {
    let none = |p: &mut Profile, v: f64| p.cost.pgtable_none_ns = v;
    assert_eq!(added(UPSTREAM, none, 1000.0), (0, 2000));
}

/// folios_put_refs frees the mmu_gather's folios in batches of up to 31
/// and pays its once-per-batch work (the memcg uncharge batch, the pcp
/// round) for each batch that frees a folio: none for an untouched
/// region, one for 1-31 folios, two for 32-62.
#[test]
fn each_batch_of_folios_freed_pays_the_batch_work_once() {
    let batch = |p: &mut Profile, v: f64| p.cost.folios_put_batch_ns = v;
    let added = |written: u64| unmap_added(batch, written);
    assert_eq!([added(0), added(1), added(31), added(32), added(62)], [0, 1000, 1000, 2000, 2000]);
}

/// The munmap time of a fresh 4 MiB region whose first `written` pages
/// were written, added by raising one term from 0 to 1000 ns.
fn unmap_added(tweak: fn(&mut Profile, f64), written: u64) -> i64 {
    let unmap_after = |v: f64| {
        let mut h = boot(UPSTREAM, &|p| tweak(p, v));
        let t = h.process(0);
        let a = mmap(&mut h, t, 4 * MIB);
        for i in 0..written {
            fault(&mut h, t, a + i * 4096);
        }
        munmap(&mut h, t, a, 4 * MIB) as i64
    };
    unmap_after(1000.0) - unmap_after(0.0)
}

/// mremap moving a region steps over its empty entries three times:
/// move_page_tables' walk, then the old range's unmap (the zap's walk and
/// free_pgtables'). The 4 MiB region with one page written has one PMD
/// entry without a PTE table; a one-page mapping above it keeps the
/// region from growing in place.
#[test]
fn mremap_steps_over_each_empty_pmd_entry_in_its_three_walks() {
    let moved = |v: f64| {
        let mut h = boot(UPSTREAM, &|p| p.cost.pgtable_none_ns = v);
        let t = h.process(0);
        let a = mmap(&mut h, t, 4 * MIB);
        fault(&mut h, t, a);
        h.val(
            t,
            0,
            Op::Mmap { addr: a + 4 * MIB, len: 4096, prot: prot::READ, flags: map::PRIVATE | map::ANONYMOUS | map::FIXED, fd: -1, off: 0 },
        );
        let m0 = entry(&h, t, Entry::Mremap);
        let (new, _) = h.val(t, 0, Op::Mremap { addr: a, old_len: 4 * MIB, new_len: 8 * MIB, may_move: true });
        assert_ne!(new as u64, a, "the region moved");
        (entry(&h, t, Entry::Mremap) - m0) as i64
    };
    assert_eq!(moved(1000.0) - moved(0.0), 3000);
}

/// A zap pays tlb_finish_mmu's once-per-zap work when it gathered a page,
/// whether or not it frees one: an munmap of an untouched region none,
/// of 1 or 40 written pages once; MADV_DONTNEED of one page of a 64 KiB
/// folio (which stays, in part) once.
#[test]
fn a_zap_that_gathered_a_page_pays_the_gather_work_once() {
    let gather = |p: &mut Profile, v: f64| p.cost.tlb_gather_ns = v;
    let added = |written: u64| unmap_added(gather, written);
    assert_eq!([added(0), added(1), added(40)], [0, 1000, 1000]);
    let dontneed = |v: f64| {
        let mut h = boot(MTHP_64K, &|p| p.cost.tlb_gather_ns = v);
        let t = h.process(0);
        let a = mmap(&mut h, t, 4 * MIB);
        fault(&mut h, t, a);
        let m0 = entry(&h, t, Entry::Madvise);
        let freed = h.k.stat().get(foliosim::mm::vmstat::Stat::Pgfree);
        h.val(t, 0, Op::Madvise { addr: a, len: 4096, advice: foliosim::workload::Advice::DontNeed });
        assert_eq!(h.k.stat().get(foliosim::mm::vmstat::Stat::Pgfree), freed, "the folio stays");
        (entry(&h, t, Entry::Madvise) - m0) as i64
    };
    assert_eq!(dontneed(1000.0) - dontneed(0.0), 1000);
}
