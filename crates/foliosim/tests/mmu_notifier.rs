//! mmu notifiers (mm/mmu_notifier.rs): the kernel's own paths drop a
//! secondary MMU's translations where they change the mm's, and reclaim's
//! aging reads its accessed bits.

mod common;

use common::{H, PAGES};
use foliosim::mm::mmu_notifier::SecondaryMmu;
use foliosim::mm::pgtable::Pte;
use foliosim::workload::{Advice, Op};

/// A process with PAGES anonymous pages written, and a secondary MMU that
/// maps all of them (accessed bits as given). Returns (harness, task, base).
fn subscribed(knobs: &str, accessed: bool) -> (H, u32, u64) {
    let mut h = H::boot(knobs, 1);
    let p = h.process(0);
    let (base, _) = h.anon(p, 0, true);
    let mut s = SecondaryMmu::new(base, PAGES, 5_000);
    for i in 0..PAGES {
        s.present.set(i);
        if accessed {
            s.accessed.set(i);
        }
    }
    let mm = h.k.tasks()[p as usize].mm;
    h.k.mm_mut(mm).mmu_notifier_register(s);
    (h, p, base)
}

fn secondary(h: &H, p: u32) -> &SecondaryMmu {
    h.k.mms()[h.k.tasks()[p as usize].mm as usize].notifier().unwrap()
}

#[test]
fn a_zap_drops_the_range_and_owes_one_flush() {
    let (mut h, p, base) = subscribed("", false);
    let t = h.k.tasks()[p as usize].clock;
    let (_, t1) = h.val(p, t + 10, Op::Madvise { addr: base + (8 << 12), len: 8 << 12, advice: Advice::DontNeed });
    let s = secondary(&h, p);
    assert_eq!(s.present.count(), PAGES - 8);
    assert!(!s.present.get(8) && s.present.get(16));
    assert_eq!(s.nr_flushes, 1);
    assert!(s.flush_owed.is_some_and(|at| at > t && at < t1), "owed from the zap's time");
    assert!(t1 >= t + 10 + 5_000, "the caller paid the subscriber's flush");
}

#[test]
fn swap_out_drops_the_translations_of_what_it_swaps() {
    let (mut h, p, _) = subscribed("\"swap.size_mib\" = 64", false);
    let c = h.process(3);
    let t = h.k.tasks()[p as usize].clock;
    h.reclaim(c, t + 1000, PAGES);
    let out = h.stat("pswpout") as u64;
    assert!(out > 0);
    assert_eq!(secondary(&h, p).present.count(), PAGES - out, "exactly the pages swapped out lost their translations");
}

/// One direct-reclaim call over the subscribed pages with their PTEs' young
/// bits cleared. Returns (pages swapped out, folios scanned, accessed bits
/// the aging found).
fn one_reclaim_round(accessed: bool) -> (i64, i64, u64) {
    let (mut h, p, _) = subscribed("\"swap.size_mib\" = 64", accessed);
    let mm = h.k.tasks()[p as usize].mm as usize;
    let keys: Vec<u64> = h.k.mms()[mm].pt().pte_tables.keys().copied().collect();
    for k in keys {
        for pte in h.k.mm_mut(mm as u32).pt_mut().pte_tables.get_mut(&k).unwrap().ptes.iter_mut() {
            *pte = pte.without(Pte::YOUNG);
        }
    }
    let c = h.process(3);
    let t = h.k.tasks()[p as usize].clock;
    h.k.cpu_mut(3).curr = c;
    h.k.lru_add_drain_cpu(t, 0);
    h.k.try_to_free_pages(t + 1000, 3, 8);
    (h.stat("pswpout"), h.stat("pgscan_direct"), secondary(&h, p).nr_young)
}

#[test]
fn aging_reads_the_secondary_accessed_bits() {
    let (out, scan_cold, young) = one_reclaim_round(false);
    assert!(out > 0 && young == 0, "cold pages go: {out} out");
    // Used pages get a second trip around the list (PG_referenced) first.
    let (out, scan_used, young) = one_reclaim_round(true);
    assert_eq!(young, PAGES, "every page was found used");
    assert!(out > 0 && scan_used > scan_cold, "the used pages cost a second pass: {scan_used} scanned against {scan_cold}");
}

/// Swap-out of the subscribed pages, then the full audit. Returns the
/// violations it found.
fn swap_out_then_audit(knobs: &str) -> Vec<String> {
    let (mut h, p, _) = subscribed(&format!("\"swap.size_mib\" = 64\n{knobs}"), false);
    let c = h.process(3);
    let t = h.k.tasks()[p as usize].clock;
    h.reclaim(c, t + 1000, PAGES);
    assert!(h.stat("pswpout") > 0);
    foliosim::check::audit(&mut h.k);
    h.violations()
}

#[test]
fn the_audit_finds_a_translation_kept_past_its_pte() {
    let v = swap_out_then_audit("");
    assert!(v.is_empty(), "{v:?}");
    let v = swap_out_then_audit("\"debug.mutant\" = \"mmu_notifier_skip_unmap\"");
    assert!(v.iter().any(|m| m.contains("the secondary MMU maps a page whose PTE")), "{:?}", &v[..v.len().min(5)]);
}
