//! madvise(2) (mm/madvise.c): MADV_DONTNEED zaps and MADV_FREE marks
//! anonymous folios lazily freed, both under the read lock;
//! MADV_HUGEPAGE/NOHUGEPAGE change the VMA flags under the write lock.
//!
//! MADV_FREE (madvise_free_pte_range): each present PTE of an exclusively
//! mapped anonymous folio is made clean and old, the folio's dirty flag
//! cleared, and the folio moved to the inactive file list without
//! PG_swapbacked (folio_mark_lazyfree, `pglazyfree`); swap entries in the
//! range are freed. Reclaim then drops such a folio without writing it
//! (`pglazyfreed`) unless it was written again (a dirty PTE, or PG_dirty
//! set by a get_user_pages writer such as KVM): then it is swap-backed
//! again and stays. A large folio only partly inside the range is left
//! alone (the kernel splits it first).

use super::mem_map::pg;
use super::mmu_gather::MmuGather;
use super::pgtable::{pte_index, Pte, PMD_SHIFT};
use super::vma::vm;
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::workload::{errno, Advice, Ret};

impl Kernel {
    pub(crate) fn do_madvise(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, len: u64, advice: Advice) -> (Ret, Ns) {
        if !addr.is_multiple_of(4096) {
            return (Ret::Err(errno::EINVAL), t);
        }
        let end = addr + len.div_ceil(4096) * 4096;
        let lc = self.lc;
        match advice {
            Advice::DontNeed | Advice::Free => {
                // Both under mmap_lock for read.
                let t = self.mms[mm as usize].mmap_lock.down_read(t, cpu, &lc, &self.sc);
                let mut t = t + self.c.madvise;
                let ranges: Vec<(u64, u64)> = self.mms[mm as usize]
                    .vmas
                    .values()
                    .filter(|v| v.end > addr && v.start < end)
                    .map(|v| (v.start.max(addr), v.end.min(end)))
                    .collect();
                if ranges.iter().map(|r| r.1 - r.0).sum::<u64>() != end - addr {
                    let t = self.mms[mm as usize].mmap_lock.up_read(t, cpu, &lc);
                    return (Ret::Err(errno::ENOMEM), t);
                }
                t = self.lru_add_drain_cpu(t, cpu);
                // SPF: unmap_page_range opens each zapped VMA's vm_sequence
                // section (a new value; no write cycle under the read lock).
                for &(s, _) in &ranges {
                    let m = &mut self.mms[mm as usize];
                    if let Some(k) = m.vma_lookup(s).map(|v| v.start) {
                        let seq = m.fresh_seq();
                        m.vmas.get_mut(&k).unwrap().seq = seq;
                        m.seq_bumps_read_side += 1;
                    }
                }
                let mut tlb = MmuGather::new(mm, false);
                for (s, e) in ranges {
                    t = if advice == Advice::Free && self.mms[mm as usize].vma_lookup(s).is_some_and(|v| v.is_anon() && !v.is_shared()) {
                        self.madvise_free_range(t, cpu, mm, s, e, &mut tlb)
                    } else {
                        // MADV_FREE of anything but private anonymous
                        // memory is refused (EINVAL) by the kernel; the
                        // model zaps it as MADV_DONTNEED, as it always did.
                        self.zap_page_range(t, cpu, mm, s, e, &mut tlb)
                    };
                }
                t = self.tlb_finish_mmu(t, cpu, tlb);
                let t = self.mms[mm as usize].mmap_lock.up_read(t, cpu, &lc);
                (Ret::Val(0), t)
            }
            Advice::HugePage | Advice::NoHugePage => {
                let t = self.mmap_write_lock(t, cpu, mm);
                let t = self.vma_start_write_range(t, cpu, mm, addr, end);
                let m = &mut self.mms[mm as usize];
                let splits = m.split_at(addr) as u32 + m.split_at(end) as u32;
                for v in m.vmas.range_mut(addr..end).map(|(_, v)| v) {
                    if advice == Advice::HugePage {
                        v.flags = (v.flags | vm::HUGEPAGE) & !vm::NOHUGEPAGE;
                    } else {
                        v.flags = (v.flags | vm::NOHUGEPAGE) & !vm::HUGEPAGE;
                    }
                }
                let keys: Vec<u64> = m.vmas.range(addr..end).map(|(&k, _)| k).collect();
                for k in keys {
                    m.vma_mark_modified(k);
                }
                let t = t + self.c.madvise + self.c.vma_split * splits as Ns;
                let t = self.mmap_write_unlock(t, cpu, mm);
                (Ret::Val(0), t)
            }
            Advice::WillNeed | Advice::Cold | Advice::PageOut => (Ret::Val(0), t + self.c.madvise),
        }
    }
}

impl Kernel {
    /// madvise_free_pte_range over [start, end) of `mm` (private anonymous
    /// memory): see the file's comment. The cleaned PTEs' translations go
    /// on `tlb`'s range: a TLB entry still cached dirty would let a write
    /// through without setting the PTE's dirty bit again.
    fn madvise_free_range(&mut self, t: Ns, cpu: u32, mm: u32, start: u64, end: u64, tlb: &mut MmuGather) -> Ns {
        let mut t = t + self.mms[mm as usize].mmu_notifier_invalidate(start, end, t);
        let lc = self.lc;
        let mut va = start;
        while va < end {
            let stop = (((va >> PMD_SHIFT) + 1) << PMD_SHIFT).min(end);
            let Some(tbl) = self.mms[mm as usize].pt.table(va) else {
                va = stop;
                continue;
            };
            // The folios to mark (heads, in address order), the PTEs of
            // theirs to clean and the swap entries to free.
            let (mut lazy, mut ptes, mut slots): (Vec<Pfn>, Vec<u64>, Vec<(u64, u32)>) = Default::default();
            let mut a = va;
            while a < stop {
                let pte = tbl.ptes[pte_index(a)];
                if pte.is_swap() {
                    slots.push((a, pte.swp_offset()));
                } else if pte.present() && !pte.special() {
                    let head = self.mem_map.folio_head(pte.pfn());
                    let p = self.mem_map.get(head);
                    let fva = a - ((pte.pfn() - head) as u64) * 4096;
                    // Only a folio this mapping holds alone, wholly inside the range.
                    let whole = fva >= start && fva + (4096 << p.order) <= end;
                    if p.flags & pg::ANON != 0 && whole && self.folio_single_mapped(head) {
                        if lazy.last() != Some(&head) {
                            lazy.push(head);
                        }
                        ptes.push(a);
                    }
                }
                a += 4096;
            }
            // Under the PTL: clean and age the PTEs, clear the swap entries.
            let tbl = self.mms[mm as usize].pt.table_mut(va).expect("table seen above");
            for &a in &ptes {
                let slot = &mut tbl.ptes[pte_index(a)];
                if slot.0 & (Pte::DIRTY | Pte::YOUNG) != 0 {
                    *slot = slot.without(Pte::DIRTY | Pte::YOUNG);
                    tlb.add_range(a);
                }
            }
            for &(a, _) in &slots {
                tbl.ptes[pte_index(a)] = Pte::NONE;
            }
            tbl.nr_present -= slots.len() as u16;
            t = tbl.ptl.lock_for(t, cpu, self.c.pte_clear * (ptes.len() + slots.len()) as Ns, &lc);
            for (_, s) in slots {
                self.swap_entry_free(mm, s);
            }
            for head in lazy {
                t = self.folio_mark_lazyfree(t, cpu, head);
            }
            va = stop;
        }
        t
    }

    /// Whether every mapped page of the folio at `head` is mapped once.
    fn folio_single_mapped(&self, head: Pfn) -> bool {
        let n = 1u32 << self.mem_map.get(head).order;
        (0..n).all(|i| self.mem_map.get(head + i).mapcount <= 1)
    }

    /// folio_mark_lazyfree (lru_lazyfree_fn): a swap-backed anonymous
    /// folio loses PG_dirty, PG_active, PG_referenced and PG_swapbacked
    /// and goes to the inactive file list.
    fn folio_mark_lazyfree(&mut self, t: Ns, cpu: u32, head: Pfn) -> Ns {
        let p = self.mem_map.get(head);
        if p.flags & (pg::SWAPBACKED | pg::LRU | pg::UNEVICTABLE) != pg::SWAPBACKED | pg::LRU {
            // Already lazily freed, or off its list (isolated, in a batch).
            return t;
        }
        let (nid, n) = (p.nid as usize, 1i64 << p.order);
        let t = self.lru_lock_folios(t, cpu, nid, 1);
        self.lruvec_del_folio(head);
        self.mem_map.get_mut(head).flags &= !(pg::DIRTY | pg::ACTIVE | pg::REFERENCED | pg::SWAPBACKED);
        self.lruvec_add_folio(head);
        self.stat.add(Stat::Pglazyfree, n);
        t
    }
}
