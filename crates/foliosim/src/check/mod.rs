//! The invariant checker. Cheap checks run on every event they concern
//! (a TLB hit, an allocation; the Checker in check/checker.rs, which
//! struct Kernel holds); `audit` walks the whole state: page tables
//! against VMAs, mapcounts and refcounts against the mappings that exist,
//! free lists against allocated frames. Violations are recorded, not
//! panicked on, so a test can assert that a broken variant is caught.

use crate::kernel::Kernel;
use crate::mm::mem_map::pg;
use crate::mm::pgtable::PMD_SHIFT;
use crate::mm::vma::MmCounter;
use crate::mm::vmstat::Stat;
use crate::mm::Pfn;
use rustc_hash::FxHashMap;

pub mod checker;
pub mod luf;

pub use checker::{Checker, Ident, StaleRec};

/// Free page reporting and the host (part of `audit`).
fn audit_page_reporting(k: &Kernel, found: &mut Vec<String>) {
    let reported = k.pa.reported_blocks();
    let mut flagged = 0u64;
    for &(pfn, order) in &reported {
        flagged += 1 << order;
        if let Some(pr) = &k.prdev {
            if order < pr.order() {
                found.push(format!("block {pfn} of order {order} is PG_reported below page_reporting_order {}", pr.order()));
            }
        } else {
            found.push(format!("block {pfn} is PG_reported but no reporting device is registered"));
        }
        // Reported => handed to the host and untouched since: the host
        // must not be holding a live page for any of it.
        if let Some(h) = &k.host {
            if !h.range_given_back(pfn, 1 << order) {
                found.push(format!(
                    "block {pfn} of order {order} is PG_reported but the host backs it (flag kept across an allocation or a merge)"
                ));
            }
        }
    }
    let nids = k.pa.nids();
    let zone_reported: u64 = nids.iter().map(|&n| k.pa.zone_reported_pages(n)).sum();
    if zone_reported != flagged {
        found.push(format!("reported_pages {zone_reported} but {flagged} pages are flagged"));
    }
    let isolated: u64 = nids.iter().map(|&n| k.pa.zone_isolated_pages(n)).sum();
    let in_sg: u64 = k.prdev.as_ref().map_or(0, |p| p.isolated_pages());
    if isolated != in_sg {
        found.push(format!("{isolated} pages isolated from the free lists but the reporting scatterlist holds {in_sg}"));
    }
    if let Some(pr) = &k.prdev {
        if pr.sg().len() > crate::mm::page_reporting::PAGE_REPORTING_CAPACITY {
            found.push(format!("scatterlist holds {} blocks", pr.sg().len()));
        }
        for b in pr.sg() {
            if k.pa.is_free(b.pfn) || k.pa.free_block(b.pfn).is_some() {
                found.push(format!("block {} is both isolated for reporting and on a free list", b.pfn));
            }
        }
    }
}

/// Secondary MMUs (part of `audit`): each translation a subscriber keeps
/// is of a page its mm maps there, accessible: whatever took the mm's PTE
/// away (zap, swap-out, migration, NUMA hinting) told the subscriber first.
fn audit_secondary_mmus(k: &Kernel, found: &mut Vec<String>) {
    for mm in k.mms.iter().filter(|m| m.alive) {
        let Some(s) = mm.notifier.as_deref() else { continue };
        for i in s.present.iter_set() {
            let va = s.start + (i << 12);
            let pte = mm.pt.pte(va);
            if !pte.present() || pte.0 & crate::mm::pgtable::Pte::PROTNONE != 0 {
                found.push(format!(
                    "mm {} va {va:#x}: the secondary MMU maps a page whose PTE is {:#x} (an invalidation skipped)",
                    mm.id, pte.0
                ));
            } else if let Some(old) = s.pfns.as_ref().map(|p| p[i as usize]).filter(|&p| p != pte.pfn()) {
                found.push(format!(
                    "mm {} va {va:#x}: the secondary MMU maps frame {old}, the PTE frame {} (a migration skipped the invalidation)",
                    mm.id,
                    pte.pfn()
                ));
            }
        }
    }
}

/// Full audit of the kernel state; records every violation found.
pub fn audit(k: &mut Kernel) {
    let mut found: Vec<String> = Vec::new();
    if let Err(e) = k.pa.check() {
        found.push(format!("page allocator: {e}"));
    }
    audit_page_reporting(k, &mut found);
    audit_secondary_mmus(k, &mut found);
    let (maps, zero_ptes) = audit_page_tables(k, &mut found);
    let (anon, mapped_file, flagged) = audit_frames(k, &maps, &mut found);
    audit_split_queues(k, flagged, &mut found);
    audit_gauges(k, anon, mapped_file, zero_ptes, &mut found);
    k.tier_audit(&mut found);
    k.check.audits += 1;
    for f in found {
        k.check.report(f);
    }
}

/// The page tables of every live mm: each present PTE against its VMA, its
/// frame and the host; each table's present count. Returns the mappings
/// per frame and the zero-page PTEs.
fn audit_page_tables(k: &Kernel, found: &mut Vec<String>) -> (FxHashMap<Pfn, i32>, i64) {
    let mut maps: FxHashMap<Pfn, i32> = FxHashMap::default();
    let mut zero_ptes: i64 = 0;
    // Swap PTEs per slot, against the device's counts.
    let mut swap_refs: FxHashMap<u32, u32> = FxHashMap::default();
    for mm in k.mms.iter().filter(|m| m.alive) {
        let mut keys: Vec<u64> = mm.pt.pte_tables.keys().copied().collect();
        keys.sort_unstable();
        let mut swap_ents = 0i64;
        for key in keys {
            let tbl = &mm.pt.pte_tables[&key];
            let mut present = 0u16;
            for (i, pte) in tbl.ptes.iter().enumerate() {
                let va = (key << PMD_SHIFT) | ((i as u64) << 12);
                if pte.is_swap() {
                    present += 1;
                    swap_ents += 1;
                    *swap_refs.entry(pte.swp_offset()).or_default() += 1;
                    if mm.vma_lookup(va).is_none_or(|v| v.anon_vma == 0) {
                        found.push(format!("mm {} va {va:#x}: swap PTE outside an anonymous VMA", mm.id));
                    }
                    continue;
                }
                if !pte.present() {
                    continue;
                }
                present += 1;
                if pte.0 & crate::mm::pgtable::Pte::PROTNONE != 0 && (pte.write() || pte.special()) {
                    found.push(format!("mm {} va {va:#x}: PROT_NONE hinting PTE {:#x} is writable or maps the zero page", mm.id, pte.0));
                }
                match mm.vma_lookup(va) {
                    None => found.push(format!("mm {} va {va:#x}: PTE outside any VMA", mm.id)),
                    Some(v) if pte.write() && v.flags & crate::mm::vma::vm::WRITE == 0 => {
                        found.push(format!("mm {} va {va:#x}: writable PTE in a read-only VMA", mm.id))
                    }
                    Some(v)
                        if pte.write() && !pte.special() && v.flags & crate::mm::vma::vm::SHARED == 0 && {
                            let f = k.mem_map.get(pte.pfn()).flags;
                            f & pg::ANON != 0 && f & pg::ANON_EXCLUSIVE == 0
                        } =>
                    {
                        found.push(format!(
                            "mm {} va {va:#x}: writable PTE maps anon page {} that is not AnonExclusive (I-11)",
                            mm.id,
                            pte.pfn()
                        ))
                    }
                    _ => {}
                }
                if pte.special() {
                    zero_ptes += 1;
                    continue;
                }
                let pfn = pte.pfn();
                if k.pa.is_free(pfn) {
                    found.push(format!("mm {} va {va:#x}: maps frame {pfn}, which is free", mm.id));
                }
                if k.mem_map.get(pfn).flags & pg::ALLOCATED == 0 {
                    found.push(format!("mm {} va {va:#x}: maps frame {pfn}, which is not allocated", mm.id));
                }
                // A mapped guest frame holds data the host must keep:
                // backed, or swapped out by the host (read back on access).
                if k.host.as_ref().is_some_and(|h| !h.holds(pfn)) {
                    found.push(format!("mm {} va {va:#x}: maps frame {pfn}, which the host gave away (host fault path skipped)", mm.id));
                }
                *maps.entry(pfn).or_default() += 1;
            }
            if present != tbl.nr_present {
                found.push(format!("mm {} table {key:#x}: nr_present {} but {present} PTEs present or swapped", mm.id, tbl.nr_present));
            }
        }
        let counted = mm.get_mm_counter(MmCounter::SwapEnts);
        if swap_ents != counted {
            found.push(format!("mm {}: MM_SWAPENTS {counted} but {swap_ents} swap PTEs", mm.id));
        }
    }
    let mut inuse = 0;
    for (slot, c) in k.swap.counts() {
        let refs = swap_refs.get(&slot).copied().unwrap_or(0);
        if c as u32 != refs {
            found.push(format!("swap slot {slot}: swap_map counts {c} but {refs} swap PTEs name it"));
        }
        inuse += (c > 0) as u64;
    }
    if inuse != k.swap.inuse {
        found.push(format!("swap device: {} slots in use but {inuse} counted", k.swap.inuse));
    }
    (maps, zero_ptes)
}

/// The references to a folio other than its mappings: a per-CPU LRU batch's,
/// a speculative fault's prepared page, a promotion list's isolation (per
/// folio), and the page cache's (the folios cached).
fn audit_other_refs(k: &Kernel) -> (FxHashMap<Pfn, i32>, FxHashMap<Pfn, ()>) {
    // Per-CPU LRU batches hold a reference each.
    let mut batch_refs: FxHashMap<Pfn, i32> = FxHashMap::default();
    for c in &k.cpus {
        for &p in &c.lru_add {
            *batch_refs.entry(p).or_default() += 1;
        }
    }
    // A speculative fault between its steps holds its prepared page.
    for tk in &k.tasks {
        if let Some(p) = tk.fault_cont.as_ref().and_then(|c| c.page) {
            *batch_refs.entry(p).or_default() += 1;
        }
    }
    // Folios isolated on a promotion list hold the isolation reference.
    for p in k.tier.promo_folios() {
        *batch_refs.entry(p).or_default() += 1;
    }
    let mut cached: FxHashMap<Pfn, ()> = FxHashMap::default();
    for ino in &k.inodes {
        for &p in ino.pages.values() {
            cached.insert(p, ());
        }
    }
    (batch_refs, cached)
}

/// Every allocated frame's mapcount against the PTEs mapping it, every
/// folio's refcount against the references that exist (I-1), a partly
/// mapped large anon folio on the deferred-split queue (I-16). Returns the
/// anonymous and file pages mapped and the folios flagged for deferred
/// split.
fn audit_frames(k: &Kernel, maps: &FxHashMap<Pfn, i32>, found: &mut Vec<String>) -> (i64, i64, i64) {
    let (batch_refs, cached) = audit_other_refs(k);
    // One folio reference per PTE mapping any of its pages (I-1),
    // and per-folio mapped-page counts for the deferred-split rules.
    let mut folio_maps: FxHashMap<Pfn, i32> = FxHashMap::default();
    let mut folio_mapped_pages: FxHashMap<Pfn, u32> = FxHashMap::default();
    for (&pfn, &m) in maps {
        let head = k.mem_map.folio_head(pfn);
        *folio_maps.entry(head).or_default() += m;
        if m > 0 {
            *folio_mapped_pages.entry(head).or_default() += 1;
        }
    }
    let mut anon = 0i64;
    let mut mapped_file = 0i64;
    let mut flagged = 0i64;
    k.mem_map.for_each_present(|pfn, p| {
        if p.flags & pg::ALLOCATED == 0 {
            if p.mapcount != 0 {
                found.push(format!("frame {pfn}: free but mapcount {}", p.mapcount));
            }
            return;
        }
        if p.flags & (pg::ZERO_PAGE | pg::PGTABLE) != 0 {
            return;
        }
        let m = maps.get(&pfn).copied().unwrap_or(0);
        if p.mapcount != m {
            found.push(format!("frame {pfn}: mapcount {} but {m} PTEs map it", p.mapcount));
        }
        if p.flags & pg::HEAD != 0 {
            let fm = folio_maps.get(&pfn).copied().unwrap_or(0);
            if p.flags & pg::DEFERRED_SPLIT != 0 {
                flagged += 1;
            }
            let nr = 1u32 << p.order;
            let mapped = folio_mapped_pages.get(&pfn).copied().unwrap_or(0);
            if p.order >= 2 && p.flags & pg::ANON != 0 && mapped > 0 && mapped < nr && p.flags & pg::DEFERRED_SPLIT == 0 {
                found.push(format!(
                    "folio {pfn} (order {}): {mapped} of {nr} pages mapped but not on the deferred-split queue (I-16)",
                    p.order
                ));
            }
            let expect = fm + batch_refs.get(&pfn).copied().unwrap_or(0) + cached.contains_key(&pfn) as i32;
            if p.refcount != expect {
                found.push(format!("frame {pfn}: refcount {} but {expect} references exist (mappings, cache, LRU batch)", p.refcount));
            }
        }
        if m > 0 {
            if p.flags & pg::ANON != 0 {
                anon += 1;
            } else {
                mapped_file += 1;
            }
        }
    });
    (anon, mapped_file, flagged)
}

/// The deferred-split queues (I-15): each queued folio flagged, large,
/// anonymous and on its node's queue; the count against the flags and
/// split_queue_len.
fn audit_split_queues(k: &Kernel, flagged: i64, found: &mut Vec<String>) {
    // Deferred-split queues (I-15, docs/mechanisms/large-anon-folios.md#rules-it-implements).
    let mut queued = 0i64;
    for (nid, q) in k.split_queues.iter().enumerate() {
        for &h in &q.list {
            queued += 1;
            let p = k.mem_map.get(h);
            if p.flags & pg::ALLOCATED == 0 || p.flags & pg::HEAD == 0 {
                found.push(format!("split queue {nid}: folio {h} is queued but free (I-15)"));
            } else if p.flags & pg::DEFERRED_SPLIT == 0 || p.order < 2 || p.flags & pg::ANON == 0 || p.nid as usize != nid {
                found.push(format!(
                    "split queue {nid}: folio {h} (order {}, flags {:#x}) should not be on this queue (I-15)",
                    p.order, p.flags
                ));
            }
        }
    }
    if queued != flagged || k.stat.get(Stat::SplitQueueLen) != queued {
        found.push(format!(
            "deferred split: {queued} folios queued, {flagged} flagged, split_queue_len {} (I-15)",
            k.stat.get(Stat::SplitQueueLen)
        ));
    }
}

/// The mapping and free-page gauges against what the audit counted.
fn audit_gauges(k: &Kernel, anon: i64, mapped_file: i64, zero_ptes: i64, found: &mut Vec<String>) {
    if k.stat.get(Stat::NrAnonPages) != anon {
        found.push(format!("nr_anon_pages {} but {anon} anonymous pages are mapped", k.stat.get(Stat::NrAnonPages)));
    }
    if k.stat.get(Stat::NrMapped) != mapped_file {
        found.push(format!("nr_mapped {} but {mapped_file} file pages are mapped", k.stat.get(Stat::NrMapped)));
    }
    if k.stat.get(Stat::NrZeroPageMapped) != zero_ptes {
        found.push(format!("zero-page PTE count {} but {zero_ptes} exist", k.stat.get(Stat::NrZeroPageMapped)));
    }
    if k.stat.get(Stat::NrFreePages) as u64 != k.pa.nr_free() {
        found.push(format!("nr_free_pages {} but the allocator holds {}", k.stat.get(Stat::NrFreePages), k.pa.nr_free()));
    }
}
