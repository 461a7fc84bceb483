//! The invariant checker. Cheap checks run on every event they concern
//! (a TLB hit, an allocation); `audit` walks the whole state: page tables
//! against VMAs, mapcounts and refcounts against the mappings that exist,
//! free lists against allocated frames. Violations are recorded, not
//! panicked on, so a test can assert that a broken variant is caught.

use crate::hw::tlb::TlbEntry;
use crate::kernel::Kernel;
use crate::mm::mem_map::{pg, MemMap};
use crate::mm::mmap::Mm;
use crate::mm::page_alloc::PageAlloc;
use crate::mm::pgtable::PMD_SHIFT;
use crate::mm::Pfn;
use crate::workload::Access;
use rustc_hash::FxHashMap;

/// Keep the first violations only: one broken rule tends to repeat.
const MAX_VIOLATIONS: usize = 32;

#[derive(Default)]
pub struct Checker {
    pub enabled: bool,
    pub violations: Vec<String>,
    pub audits: u64,
    pub tlb_checks: u64,
}

impl Checker {
    pub fn new(enabled: bool) -> Self {
        Checker { enabled, ..Default::default() }
    }

    pub fn report(&mut self, v: String) {
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(v);
        }
    }

    /// A user access hit a TLB entry: it must still agree with the page
    /// table, or at least not reach a frame reallocated since it was filled
    /// and not write through a translation that lost its write permission.
    pub fn on_tlb_hit(&mut self, mm: &Mm, mem_map: &MemMap, cpu: u32, va: u64, e: &TlbEntry, kind: Access) {
        self.tlb_checks += 1;
        let pte = mm.pt.pte(va);
        let pfn = e.pfn_of(va);
        let current = pte.present() && pte.pfn() == pfn;
        if current && (kind != Access::Store || pte.write()) {
            return;
        }
        if mem_map.get(pfn).alloc_epoch != e.epoch {
            self.report(format!(
                "cpu {cpu} mm {} va {va:#x}: {kind:?} through a stale TLB entry reached frame {pfn}, reallocated since the entry was filled (missing TLB flush)",
                mm.id
            ));
        } else if kind == Access::Store && e.writable() {
            self.report(format!("cpu {cpu} mm {} va {va:#x}: store through a stale writable TLB entry (PTE now {:#x})", mm.id, pte.0));
        }
    }

    pub fn on_alloc(&mut self, mem_map: &MemMap, pa: &PageAlloc, pfn: Pfn, order: u32) {
        if !self.enabled {
            return;
        }
        for i in 0..(1u32 << order) {
            if pa.is_free(pfn + i) {
                self.report(format!("frame {} handed out while still on a free list", pfn + i));
                return;
            }
        }
        let _ = mem_map;
    }

    pub fn on_free(&mut self, _pfn: Pfn, _order: u32) {}
}

/// Full audit of the kernel state; records every violation found.
pub fn audit(k: &mut Kernel) {
    let mut found: Vec<String> = Vec::new();
    if let Err(e) = k.pa.check() {
        found.push(format!("page allocator: {e}"));
    }
    // Mappings per frame, from the page tables.
    let mut maps: FxHashMap<Pfn, i32> = FxHashMap::default();
    let mut zero_ptes: i64 = 0;
    for mm in k.mms.iter().filter(|m| m.alive) {
        let mut keys: Vec<u64> = mm.pt.pte_tables.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let tbl = &mm.pt.pte_tables[&key];
            let mut present = 0u16;
            for (i, pte) in tbl.ptes.iter().enumerate() {
                if !pte.present() {
                    continue;
                }
                present += 1;
                let va = (key << PMD_SHIFT) | ((i as u64) << 12);
                match mm.vma_lookup(va) {
                    None => found.push(format!("mm {} va {va:#x}: PTE outside any VMA", mm.id)),
                    Some(v) if pte.write() && v.flags & crate::mm::mmap::vm::WRITE == 0 => {
                        found.push(format!("mm {} va {va:#x}: writable PTE in a read-only VMA", mm.id))
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
                *maps.entry(pfn).or_default() += 1;
            }
            if present != tbl.nr_present {
                found.push(format!("mm {} table {key:#x}: nr_present {} but {present} PTEs present", mm.id, tbl.nr_present));
            }
        }
    }
    // Per-CPU LRU batches hold a reference each.
    let mut batch_refs: FxHashMap<Pfn, i32> = FxHashMap::default();
    for c in &k.cpus {
        for &p in &c.lru_add {
            *batch_refs.entry(p).or_default() += 1;
        }
    }
    // Folios isolated on a promotion list hold the isolation reference.
    for l in &k.tier.promo {
        for &p in &l.folios {
            *batch_refs.entry(p).or_default() += 1;
        }
    }
    let mut cached: FxHashMap<Pfn, ()> = FxHashMap::default();
    for ino in &k.inodes {
        for &p in ino.pages.values() {
            cached.insert(p, ());
        }
    }
    let mut anon = 0i64;
    let mut mapped_file = 0i64;
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
            let expect = m + batch_refs.get(&pfn).copied().unwrap_or(0) + cached.contains_key(&pfn) as i32;
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
    use crate::mm::vmstat::Stat;
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
    k.tier_audit(&mut found);
    k.check.audits += 1;
    for f in found {
        k.check.report(f);
    }
}
