//! get_user_pages for one page (mm/gup.rs), as KVM takes a guest frame's
//! host page: the walk when the PTE allows the access, else the fault the
//! access would take, on the task's behalf; a write through it dirties the
//! folio, so MADV_FREE's lazy discard must keep it.

mod common;

use common::{H, PAGES};
use foliosim::mm::gup::Gup;
use foliosim::mm::memory::Fault;
use foliosim::workload::{Access, Advice, Op};

/// A process with an anonymous read-write mapping of PAGES pages, none
/// touched. Returns (harness, task, base, time).
fn mapped() -> (H, u32, u64, u64) {
    let mut h = H::boot("", 1);
    let p = h.process(0);
    let (base, t) = h.anon(p, 0, false);
    (h, p, base, t)
}

#[test]
fn a_missing_page_is_faulted_in_once_and_then_walked() {
    let (mut h, p, base, t) = mapped();
    let faults = h.stat("pgfault");
    let sys = h.k.tasks()[p as usize].sys_ns;
    let (g, t1) = h.k.get_user_page(p, base + 4096, true, t);
    let Gup::Page(pte) = g else { panic!("{g:?}") };
    assert!(pte.present() && pte.write());
    assert_eq!(h.stat("pgfault"), faults + 1, "the slow path took one fault");
    assert!(t1 > t && h.k.tasks()[p as usize].sys_ns > sys, "the task paid for it");
    // Present and writable now: the walk alone, no time, no fault.
    let (g2, t2) = h.k.get_user_page(p, base + 4096, true, t1);
    assert_eq!((g2, t2), (Gup::Page(pte), t1));
    assert_eq!(h.stat("pgfault"), faults + 1);
    assert!(h.violations().is_empty(), "{:?}", h.violations());
}

#[test]
fn outside_any_vma_it_fails() {
    let (mut h, p, base, t) = mapped();
    let (g, _) = h.k.get_user_page(p, base + (PAGES << 12) + (1 << 30), false, t);
    assert_eq!(g, Gup::Failed(Fault::Segv));
}

#[test]
fn a_write_through_it_keeps_a_lazily_freed_page_from_reclaim() {
    let (mut h, p, base, t) = mapped();
    let len = PAGES << 12;
    let (_, t) = h.run(p, t, Op::AccessRange { addr: base, stride: 4096, count: PAGES, kind: Access::Store });
    let (_, t) = h.val(p, t, Op::Madvise { addr: base, len, advice: Advice::Free });
    // The PTE is present but clean and writable: gup_fast's walk serves it,
    // and the writer (as KVM through the EPT) sets the folio dirty itself.
    let (g, t) = h.k.get_user_page(p, base + (5 << 12), true, t);
    let Gup::Page(pte) = g else { panic!("{g:?}") };
    h.k.unpin_user_page_dirty(pte);
    let c = h.process(3);
    h.reclaim(c, t + 1000, PAGES);
    let mm = h.k.tasks()[p as usize].mm as usize;
    assert!(h.k.mms()[mm].pt().pte(base + (5 << 12)).present(), "the page written through gup is kept");
    assert!(h.k.mms()[mm].pt().pte(base + (6 << 12)).is_none(), "a clean one is dropped");
    assert_eq!(h.stat("pglazyfreed"), PAGES as i64 - 1);
}
