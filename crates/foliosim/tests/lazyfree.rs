//! MADV_FREE (mm/madvise.rs): lazily freed anonymous folios are dropped by
//! reclaim without being written, unless written again after the madvise.

mod common;

use common::{H, PAGES};
use foliosim::mm::pgtable::Pte;
use foliosim::workload::{Access, Advice, Op};

/// A process writes PAGES anonymous pages, MADV_FREEs them, writes page
/// `again` once more, then reclaim runs. Returns the harness and the base.
fn free_write_reclaim(knobs: &str, again: u64) -> (H, u64) {
    let mut h = H::boot(knobs, 1);
    let p = h.process(0);
    let len = PAGES << 12;
    let (base, t) = h.anon(p, 0, true);
    let (_, t) = h.val(p, t, Op::Madvise { addr: base, len, advice: Advice::Free });
    assert_eq!(h.stat("pglazyfree"), PAGES as i64, "every page marked lazily freed");
    let mm = h.k.tasks()[p as usize].mm;
    assert!(!h.k.mms()[mm as usize].pt().pte(base).dirty(), "the PTEs are clean after MADV_FREE");
    let (_, t) = h.run(p, t, Op::Access { addr: base + (again << 12), kind: Access::Store });
    let c = h.process(3);
    h.reclaim(c, t + 1000, PAGES);
    (h, base)
}

fn pte(h: &H, va: u64) -> Pte {
    h.k.mms()[h.k.tasks()[0].mm as usize].pt().pte(va)
}

#[test]
fn clean_lazyfree_pages_go_without_io_and_a_rewritten_one_stays() {
    let (h, base) = free_write_reclaim("", 5);
    assert!(pte(&h, base + (5 << 12)).present(), "the page written again is kept");
    assert!(pte(&h, base).is_none() && pte(&h, base + (6 << 12)).is_none(), "clean pages are dropped");
    assert_eq!(h.stat("pglazyfreed"), PAGES as i64 - 1);
    assert_eq!(h.stat("pswpout") + h.stat("pgpageout"), 0, "nothing written");
    // Lazily freed folios sit on the file LRUs (folio_is_file_lru).
    assert_eq!(h.stat("pgsteal_file"), PAGES as i64 - 1);
    assert_eq!(h.stat("pgsteal_anon"), 0);
    assert!(h.violations().is_empty(), "{:?}", h.violations());
}

#[test]
fn a_reclaim_that_discards_a_rewritten_page_loses_the_write() {
    let (h, base) = free_write_reclaim("\"debug.mutant\" = \"lazyfree_discard_redirtied\"", 5);
    assert!(!pte(&h, base + (5 << 12)).present(), "the mutant drops the page written after MADV_FREE");
}
