//! Reverse mapping and the batched unmap flush (mm/rmap.c).
//!
//! Reclaim and async migration unmap a folio from every address space
//! that maps it (`try_to_unmap`, `try_to_migrate`). With TTU_BATCH_FLUSH
//! and an mm live on other CPUs, the TLB flush is not done per PTE: the
//! mm's CPUs are gathered in the task's `tlbflush_unmap_batch` and one IPI
//! round (`try_to_unmap_flush`) retires the whole batch before the folios
//! are freed or written back.
//!
//! Lazy unmap flush (docs/mechanisms/lazy-unmap-flush.md, mm/luf.rs) splits that batch in three: PTEs
//! that were writable go to `ubc` as before; read-only ones of the current
//! folio collect in `ro` and, if the whole folio qualified, move to `luf`,
//! whose flush may wait until the frames leave the allocator again.
//!
//! The i_mmap interval tree and the anon_vma chains are not modelled: the
//! walk visits the VMAs of every live address space that map the folio's
//! file or anon_vma. Workloads that reclaim mapped memory have few.

use super::mem_map::pg;
use super::pgtable::{pte_index, Pte};
use super::vma::MmCounter;
use super::Pfn;
use crate::kernel::knobs::{LufMutant, Mutant};
use crate::kernel::Kernel;
use crate::sim::Ns;

/// What an unmapped PTE becomes.
#[derive(Clone, Copy)]
enum Replace<'a> {
    /// Nothing (pte_clear).
    None,
    /// A migration entry to the folio, keeping its permissions.
    Migration,
    /// The swap entry of the page's slot (page i of the folio: slots[i]).
    Swap(&'a [u32]),
}

/// One mapping of a page found by the rmap walk.
#[derive(Clone, Copy, Debug)]
pub struct Mapping {
    pub mm: u32,
    pub va: u64,
    pub pfn: Pfn,
}

impl Kernel {
    /// rmap_walk: every PTE that maps a page of the folio at `head`
    /// (present, PROT_NONE hinting, or a migration entry).
    pub fn rmap_walk(&self, head: Pfn, out: &mut Vec<Mapping>) {
        out.clear();
        let (flags, mapping, index, order) = {
            let p = self.mem_map.get(head);
            (p.flags, p.mapping, p.index, p.order)
        };
        if mapping == 0 || self.mem_map.get(head).mapcount == 0 && order == 0 {
            return;
        }
        self.for_each_folio_pte(head, (flags, mapping, index, order), |mp, pte| {
            if (pte.present() || pte.0 & Pte::MIGRATION != 0) && pte.pfn() == mp.pfn && !pte.special() {
                out.push(mp);
            }
        });
    }

    /// Every PTE slot where a page of the folio at `head` would be mapped:
    /// the VMAs of every live mm that map its file or anon_vma, at the
    /// address its index gives. `(flags, mapping, index, order)` is the
    /// folio's identity, passed in since a folio under migration has
    /// already lost its mapcount.
    fn for_each_folio_pte(&self, head: Pfn, (flags, mapping, index, order): (u32, u32, u64, u8), mut f: impl FnMut(Mapping, Pte)) {
        if mapping == 0 {
            return;
        }
        let anon = flags & pg::ANON != 0;
        let nr = 1u64 << order;
        for m in self.mms.iter().filter(|m| m.alive) {
            for v in m.vmas.values() {
                let ours = if anon { v.anon_vma == mapping } else { v.file == mapping };
                if !ours {
                    continue;
                }
                let vpages = (v.end - v.start) >> 12;
                for i in 0..nr {
                    let idx = index + i;
                    if idx < v.pgoff || idx >= v.pgoff + vpages {
                        continue;
                    }
                    let va = v.start + ((idx - v.pgoff) << 12);
                    f(Mapping { mm: m.id, va, pfn: head + i as Pfn }, m.pt.pte(va));
                }
            }
        }
    }

    /// pte_accessible: a PROT_NONE hinting PTE cannot be in any TLB unless
    /// a flush of that mm is still pending.
    fn pte_accessible(&self, mm: u32, pte: Pte) -> bool {
        pte.present() && (pte.0 & Pte::PROTNONE == 0 || self.mms[mm as usize].mm_tlb_flush_pending())
    }

    /// arch_tlbbatch_should_defer (x86): batch only if another CPU may
    /// cache this mm.
    fn should_defer_flush(&self, mm: u32, cpu: u32) -> bool {
        self.mms[mm as usize].cpumask_iter().any(|c| c != cpu)
    }

    /// set_tlb_ubc_flush_pending, with LUF's split of read-only PTEs.
    pub fn set_tlb_ubc_flush_pending(&mut self, tid: u32, mm: u32, pte: Pte) {
        if !self.pte_accessible(mm, pte) {
            return;
        }
        let m = &self.mms[mm as usize];
        let luf = self.knobs.luf.enabled;
        let defer_writable = self.knobs.mutant == Mutant::Luf(LufMutant::DeferWritable);
        let u = &mut self.tasks[tid as usize].ubc;
        let b = if luf && (!pte.write() || defer_writable) {
            &mut u.ro
        } else {
            u.can_luf = false;
            &mut u.ubc
        };
        b.add_mm(m);
        if pte.dirty() {
            b.writable = true;
        }
        let nr_cpus = self.cpus.len();
        let m = &mut self.mms[mm as usize];
        m.set_tlb_batched_pending();
        // inc_mm_tlb_gen: every CPU of the mm now owes it a full flush.
        m.tlb_gen += 1;
        if m.cpu_tlb_gen.len() < nr_cpus {
            m.cpu_tlb_gen.resize(nr_cpus, 0);
        }
    }

    /// Clear one PTE on the batched path (the body of try_to_unmap_one /
    /// try_to_migrate_one): defer the flush if the mm is live elsewhere,
    /// else flush now. Returns the old PTE.
    fn ttu_clear_pte(&mut self, t: &mut Ns, cpu: u32, tid: u32, mp: Mapping, batch: bool, replace: Pte) -> Pte {
        let lc = self.lc;
        let hold = self.c.pte_clear + self.c.rmap;
        let Some(tbl) = self.mms[mp.mm as usize].pt.table_mut(mp.va) else { return Pte::NONE };
        *t = tbl.ptl.lock_for(*t, cpu, hold, &lc);
        let slot = &mut tbl.ptes[pte_index(mp.va)];
        let old = *slot;
        *slot = replace;
        if replace.is_none() && old.present() {
            tbl.nr_present -= 1;
        }
        if self.check.enabled {
            self.check_record_stale(*t, mp, old);
        }
        if batch && self.should_defer_flush(mp.mm, cpu) {
            self.set_tlb_ubc_flush_pending(tid, mp.mm, old);
        } else if self.pte_accessible(mp.mm, old) {
            *t = self.flush_tlb_page(*t, cpu, mp.mm, mp.va);
            self.tasks[tid as usize].ubc.can_luf = false;
        }
        old
    }

    /// Start a folio's rmap walk (LUF: assume it qualifies until a writable PTE shows up).
    fn ttu_begin(&mut self, tid: u32) {
        self.tasks[tid as usize].ubc.can_luf = true;
    }

    /// End a folio's walk: its read-only CPUs go to the LUF batch if the
    /// folio may be lazily flushed (order 0, every PTE read-only, no
    /// write-protect flush pending), else to the ordinary batch. Returns
    /// whether the folio was LUF'd.
    fn ttu_end(&mut self, tid: u32, head: Pfn, wp_pending: bool) -> bool {
        let small = self.mem_map.get(head).order == 0;
        let d6 = self.knobs.mutant == Mutant::Luf(LufMutant::D6NoWpPendingCheck);
        let u = &mut self.tasks[tid as usize].ubc;
        if small && u.can_luf && u.ro.flush_required && (!wp_pending || d6) {
            u.luf.fold(&mut u.ro);
            true
        } else {
            u.ubc.fold(&mut u.ro);
            false
        }
    }

    /// try_to_unmap with TTU_BATCH_FLUSH when `batch`: clear every PTE of
    /// the folio, moving dirty bits to the folio. Returns (folio now
    /// unmapped, LUF-able, time).
    pub fn try_to_unmap(&mut self, t: Ns, cpu: u32, tid: u32, head: Pfn, batch: bool) -> (bool, bool, Ns) {
        self.ttu_folio(t, cpu, tid, head, batch, Replace::None)
    }

    /// try_to_unmap of an anonymous folio going to swap: every PTE of page
    /// `i` becomes the swap entry of `slots[i]`, which counts it. Returns
    /// as `try_to_unmap`.
    pub fn try_to_unmap_swap(&mut self, t: Ns, cpu: u32, tid: u32, head: Pfn, batch: bool, slots: &[u32]) -> (bool, bool, Ns) {
        self.ttu_folio(t, cpu, tid, head, batch, Replace::Swap(slots))
    }

    /// try_to_migrate with TTU_BATCH_FLUSH when `batch` (async mode):
    /// every PTE becomes a migration entry to `head`, remembering whether
    /// it was writable. Returns (all replaced, LUF-able, time).
    pub fn try_to_migrate(&mut self, t: Ns, cpu: u32, tid: u32, head: Pfn, batch: bool) -> (bool, bool, Ns) {
        self.ttu_folio(t, cpu, tid, head, batch, Replace::Migration)
    }

    /// The rmap walk both share: each present PTE of the folio is cleared
    /// (or, for migration, replaced by a migration entry), its dirty bit
    /// goes to the folio, its rmap and reference are dropped.
    fn ttu_folio(&mut self, t: Ns, cpu: u32, tid: u32, head: Pfn, batch: bool, with: Replace) -> (bool, bool, Ns) {
        let mut maps = Vec::new();
        self.rmap_walk(head, &mut maps);
        let mut t = t + self.c.rmap;
        self.ttu_begin(tid);
        let mut wp_pending = false;
        let flags = self.mem_map.get(head).flags;
        let lazyfree = matches!(with, Replace::None) && flags & (pg::ANON | pg::SWAPBACKED) == pg::ANON;
        // The range of the folio in each mm, for one notifier call per mm
        // (try_to_unmap_one's mmu_notifier_range covers the folio).
        let mut notify: Option<(u32, u64, u64)> = None;
        let notifies = self.knobs.mutant != Mutant::MmuNotifierSkipUnmap;
        for &mp in &maps {
            let cur = self.mms[mp.mm as usize].pt.pte(mp.va);
            if !cur.present() {
                continue;
            }
            if lazyfree
                && (cur.dirty() || self.mem_map.get(head).flags & pg::DIRTY != 0)
                && self.knobs.mutant != Mutant::LazyfreeDiscardRedirtied
            {
                // MADV_FREE page check: written again, so it cannot be
                // discarded; the PTEs already cleared were clean.
                self.mem_map.get_mut(head).flags |= pg::SWAPBACKED;
                break;
            }
            wp_pending |= self.mms[mp.mm as usize].mm_tlb_flush_pending();
            // make_readable/writable_migration_entry: a PROT_NONE hinting
            // PTE has no write bit, so the page comes back read-only.
            let replace = match with {
                Replace::None => Pte::NONE,
                Replace::Migration => Pte((cur.0 & !0xfff) | cur.0 & (Pte::WRITE | Pte::EXEC | Pte::DIRTY) | Pte::MIGRATION),
                Replace::Swap(slots) => {
                    let slot = slots[(mp.pfn - head) as usize];
                    if !self.swap.swap_duplicate(slot) {
                        continue; // the page stays mapped here: the unmap fails
                    }
                    self.mms[mp.mm as usize].add_mm_counter(MmCounter::SwapEnts, 1);
                    Pte::swp_entry(slot)
                }
            };
            notify = match notify {
                Some((m, lo, hi)) if m == mp.mm => Some((m, lo.min(mp.va), hi.max(mp.va + 4096))),
                Some((m, lo, hi)) => {
                    if notifies {
                        t += self.mms[m as usize].mmu_notifier_invalidate(lo, hi, t);
                    }
                    Some((mp.mm, mp.va, mp.va + 4096))
                }
                None => Some((mp.mm, mp.va, mp.va + 4096)),
            };
            let old = self.ttu_clear_pte(&mut t, cpu, tid, mp, batch, replace);
            if old.dirty() {
                self.folio_mark_dirty(head);
            }
            self.page_remove_rmap(mp.mm, mp.pfn);
            // The mapping's reference.
            self.mem_map.get_mut(head).refcount -= 1;
        }
        if let Some((m, lo, hi)) = notify.filter(|_| notifies) {
            t += self.mms[m as usize].mmu_notifier_invalidate(lo, hi, t);
        }
        let luf = self.ttu_end(tid, head, wp_pending);
        (self.folio_mapcount(head) == 0, luf, t)
    }

    /// remove_migration_ptes: point the migration entries of `src` at
    /// `dst` (or back at `src` when the move failed), with the permissions
    /// each entry kept.
    pub fn remove_migration_ptes(&mut self, t: Ns, cpu: u32, src: Pfn, dst: Pfn) -> Ns {
        let p = self.mem_map.get(src);
        let id = (p.flags, p.mapping, p.index, p.order);
        let anon = p.flags & pg::ANON != 0;
        let mut t = t;
        let lc = self.lc;
        let mut found = Vec::new();
        self.for_each_folio_pte(src, id, |mp, pte| {
            if pte.0 & Pte::MIGRATION != 0 && pte.pfn() == mp.pfn {
                found.push((mp.mm, mp.va, mp.pfn - src, pte));
            }
        });
        for (mm, va, i, entry) in found {
            let bits = entry.0 & (Pte::WRITE | Pte::EXEC | Pte::DIRTY) | Pte::YOUNG;
            let pte = Pte::new(dst + i, bits);
            let hold = self.c.pte_set + self.c.rmap;
            let tbl = self.mms[mm as usize].pt.table_mut(va).expect("migration entry in a table");
            t = tbl.ptl.lock_for(t, cpu, hold, &lc);
            tbl.ptes[pte_index(va)] = pte;
            self.page_add_rmap(mm, dst + i, anon);
            self.mem_map.get_mut(dst).refcount += 1;
        }
        t
    }

    /// change_protection write-protecting [start, end) of `mm` with its TLB
    /// flush deferred (uffd-wp, or an mmu_gather that flushes after several
    /// tables): the PTEs are read-only while CPUs may still hold writable
    /// entries, and mm->tlb_flush_pending says so until
    /// `wp_range_flush` runs.
    pub fn wp_range_deferred(&mut self, mm: u32, start: u64, end: u64) {
        self.mms[mm as usize].inc_tlb_flush_pending();
        let mut va = start;
        while va < end {
            if let Some(tbl) = self.mms[mm as usize].pt.table_mut(va) {
                let slot = &mut tbl.ptes[pte_index(va)];
                if slot.present() {
                    *slot = slot.without(Pte::WRITE);
                }
            }
            va += 4096;
        }
    }

    /// The deferred flush of `wp_range_deferred`.
    pub fn wp_range_flush(&mut self, t: Ns, cpu: u32, mm: u32, start: u64, end: u64) -> Ns {
        let t = self.flush_tlb_mm_range(t, cpu, mm, start, end, false);
        self.mms[mm as usize].dec_tlb_flush_pending();
        t
    }

    /// Pages of the folio still mapped (folio_mapcount).
    pub fn folio_mapcount(&self, head: Pfn) -> i32 {
        let order = self.mem_map.get(head).order;
        (0..(1u32 << order)).map(|i| self.mem_map.get(head + i).mapcount).sum()
    }

    /// try_to_unmap_flush: one IPI round for everything this task batched,
    /// LUF'd CPUs it has not handed over included. CPUs it flushed leave
    /// the global LUF set (luf.rs).
    pub fn try_to_unmap_flush(&mut self, t: Ns, cpu: u32, tid: u32) -> Ns {
        let u = &mut self.tasks[tid as usize].ubc;
        let mut b = std::mem::take(&mut u.ubc);
        b.fold(&mut u.luf);
        if !b.flush_required {
            self.tasks[tid as usize].ubc.ubc = b;
            return t;
        }
        let start = t;
        let end = self.arch_tlbbatch_flush(t, cpu, &b);
        if self.knobs.luf.enabled {
            self.luf_retire_flushed(start, end, &b.cpus);
        }
        b.clear();
        self.tasks[tid as usize].ubc.ubc = b;
        end
    }

    /// try_to_unmap_flush_dirty: before writeback IO, flush if any batch
    /// (the LUF one included) saw a dirty PTE.
    pub fn try_to_unmap_flush_dirty(&mut self, t: Ns, cpu: u32, tid: u32) -> Ns {
        let u = &self.tasks[tid as usize].ubc;
        if u.ubc.writable || u.luf.writable {
            return self.try_to_unmap_flush(t, cpu, tid);
        }
        t
    }

    /// flush_tlb_batched_pending: reclaim batched unmaps in this mm since
    /// the last check, so a zap or mprotect flushes the whole mm first.
    pub fn flush_tlb_batched_pending(&mut self, t: Ns, cpu: u32, mm: u32) -> Ns {
        if !self.mms[mm as usize].take_tlb_batched_pending() {
            return t;
        }
        self.flush_tlb_mm_range(t, cpu, mm, 0, u64::MAX, false)
    }

    /// Invalidate a stale-entry record set for the checker: which CPUs
    /// still cache the PTE just cleared (ground truth, independent of the
    /// batches above).
    fn check_record_stale(&mut self, t: Ns, mp: Mapping, old: Pte) {
        if !old.present() {
            return;
        }
        let cpus: Vec<u32> = self.mms[mp.mm as usize].cpumask_iter().collect();
        for c in cpus {
            if let Some(w) = self.tlb_live_entry_w(c, mp.mm, mp.va, mp.pfn, t) {
                let ident = self.page_ident(mp.pfn);
                let rec = crate::check::checker::StaleRec { cpu: c, mm: mp.mm, va: mp.va, since: t, ident, ver: 0, writable: w };
                self.check.luf_record_stale(mp.pfn, rec);
            }
        }
    }
}
