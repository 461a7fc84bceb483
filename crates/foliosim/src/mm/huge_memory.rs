//! Large anonymous folios (multi-size THP), docs/mechanisms/large-anon-folios.md: the order policy
//! (RFC v2 or upstream 6.8+ mTHP, behind `AnonOrderPolicy`), the fault paths
//! that allocate and map a naturally aligned folio of 2^k pages (path A:
//! write to an empty PTE, `alloc_anon_folio` / `do_anonymous_page`; path B:
//! write to a zero-page PTE, the RFC's large `wp_page_copy`), range reuse of
//! a folio only this mapping references (path D, `wp_can_reuse_anon_folio`
//! over a range), rmap range removal with the deferred-split trigger, the
//! deferred-split queue with its `split_queue_lock`, and the TLB entry size a
//! page walk may fill (arm64 contpte, HPA order-2 coalescing, PMD).
//!
//! Conventions:
//! - Refcount (the RFC's and upstream's convention, I-1): every PTE mapping any
//!   page of a folio holds one reference on the head page, plus transient
//!   references (the per-CPU LRU batch, the page cache).
//! - A PMD-mapped THP is modelled as 512 PTEs of one order-9 folio, each
//!   carrying `Pte::HUGE`; a walk over one fills a 2 MiB TLB entry; a partial
//!   unmap clears the bits (split_huge_pmd). PTE/rmap costs of a PMD mapping
//!   are charged once, as for one PMD entry.
//! - Order 1 is never allocated (THP metadata needs three struct pages).
//!
//! Not modelled yet (issue #3 remainders): the deferred-split shrinker (queued folios stay whole until freed), memcg
//! charge failures, contpte fold/unfold costs.

use super::huge_mm::{AnonFaultCtx, AnonOrders, PTE_ORDERS};
use super::mem_map::pg;
use super::page_alloc::MigrateType;
use super::pgtable::{pte_index, Pte, PMD_SHIFT};
use super::vma::vm;
use super::vmstat::Stat;
use super::{Pfn, PMD_ORDER};
use crate::kernel::knobs::Mutant;
use crate::kernel::Kernel;
use crate::mm::memory::Fault;
use crate::mm::memory::LufExit;
use crate::mm::mm_types_task::VmFault;
use crate::sim::Ns;

const PMD_SIZE: u64 = 1 << PMD_SHIFT;

/// Outcome of the install step under the PTL.
enum Install {
    Done(Ns),
    /// A PTE of the block was no longer as expected: the folio was freed.
    Race(Ns),
}

impl Kernel {
    /// Ask the order policy about the fault `vmf`.
    fn anon_orders(&self, vmf: &VmFault) -> AnonOrders {
        let ctx = AnonFaultCtx {
            vma: vmf.vma,
            addr: vmf.address,
            expect: vmf.orig_pte,
            ptes: self.mms[vmf.mm as usize].pt.table(vmf.address),
            nid: self.cpus[vmf.cpu as usize].node,
            pa: &self.pa,
            knobs: &self.knobs,
        };
        self.anon_policy.orders(&ctx)
    }

    /// The highest order in `mask` whose naturally aligned block around
    /// the fault's address lies inside the VMA and has every PTE `none`,
    /// except the faulting slot, which must equal orig_pte
    /// (calc_anon_folio_order_alloc, with its first_bad shortcut; runs
    /// without the PTL). 0 if none.
    pub(crate) fn anon_fault_order(&self, vmf: &VmFault, mask: u32) -> u32 {
        let (mm, vma, addr, expect) = (vmf.mm, vmf.vma, vmf.address, vmf.orig_pte);
        if mask & PTE_ORDERS == 0 && mask & (1 << PMD_ORDER) == 0 {
            // No order to try (every 4 KiB-only fault): skip the table lookup.
            return 0;
        }
        let Some(tbl) = self.mms[mm as usize].pt.table(addr) else { return 0 };
        let skip_bound = self.knobs.mutant == Mutant::MthpSkipVmaBound;
        let skip_scan = self.knobs.mutant == Mutant::MthpSkipPteRecheck;
        let mut first_bad: Option<u64> = None;
        for order in (2..=PMD_ORDER).rev() {
            if mask & (1 << order) == 0 {
                continue;
            }
            let size = 4096u64 << order;
            let base = addr & !(size - 1);
            let end = base + size;
            if !skip_bound && (base < vma.start || end > vma.end) {
                continue;
            }
            if let Some(fb) = first_bad {
                if end <= fb {
                    return order; // seen good by the larger scan
                }
                if fb >= base {
                    continue; // contains the bad slot
                }
            }
            if skip_scan {
                return order;
            }
            let mut va = base;
            let mut ok = true;
            while va < end {
                let slot = tbl.ptes[pte_index(va)];
                let good = if va == addr { slot == expect } else { slot.is_none() };
                if !good {
                    first_bad = Some(va);
                    ok = false;
                    break;
                }
                va += 4096;
            }
            if ok {
                return order;
            }
        }
        0
    }

    /// Paths A (expect = none) and B (expect = the zero-page PTE) for large
    /// folios: PMD THP first where allowed, then the largest allowed order
    /// with an all-none aligned block, falling back order by order on
    /// allocation failure. `Err(t)`: use the order-0 path from `t`.
    #[inline]
    pub(crate) fn do_anonymous_large(&mut self, t: Ns, vmf: &VmFault) -> Result<(Fault, Ns), Ns> {
        let zero = vmf.orig_pte.present();
        if self.anon_order0_only || zero && !self.anon_paths.zero_page_large {
            return Err(t);
        }
        let AnonOrders { pte: mask, pmd } = self.anon_orders(vmf);
        if (!pmd || zero) && mask & PTE_ORDERS == 0 {
            // No large order allowed (every fault with mTHP off): the order-0
            // path, without entering the large-folio machinery below.
            return Err(t);
        }
        self.do_anonymous_large_orders(t, vmf, mask, pmd)
    }

    #[inline(never)]
    fn do_anonymous_large_orders(&mut self, t: Ns, vmf: &VmFault, mask: u32, pmd: bool) -> Result<(Fault, Ns), Ns> {
        let (cpu, mm, vma, addr, expect) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address, vmf.orig_pte);
        let zero = expect.present();
        let mut mask = mask;
        let nid = self.cpus[cpu as usize].node;
        let mut t = t;
        // do_huge_pmd_anonymous_page: unchanged, tried first (as in the RFC).
        if pmd && !zero {
            let base = addr & !(PMD_SIZE - 1);
            if base >= vma.start && base + PMD_SIZE <= vma.end && self.anon_fault_order(vmf, 1 << PMD_ORDER) == PMD_ORDER {
                match self.pa.alloc_pages(t, cpu, PMD_ORDER, nid, MigrateType::Movable, &mut self.stat) {
                    Some(a) => {
                        let pfn = a.pfn;
                        let done = self.post_alloc_hook(a.done, cpu, pfn, PMD_ORDER, a.nid, LufExit::Alloc(a.ugen), "THP");
                        match self.anon_folio_install(done, vmf, pfn, PMD_ORDER, true) {
                            Install::Done(t) => return Ok((Fault::Done, t)),
                            Install::Race(t) => return Ok((Fault::Done, t)),
                        }
                    }
                    None => {
                        self.stat.inc(Stat::ThpFaultFallback);
                        self.mthp.anon_fault_fallback[PMD_ORDER as usize] += 1;
                    }
                }
            }
        }
        mask &= PTE_ORDERS;
        loop {
            let order = self.anon_fault_order(vmf, mask);
            if order == 0 {
                return Err(t);
            }
            let (got, t2) = self.alloc_large_folio(t, cpu, nid, order, mask);
            t = t2;
            let Some((pfn, t1, k)) = got else { return Err(t) };
            match self.anon_folio_install(t1, vmf, pfn, k, false) {
                Install::Done(t) => return Ok((Fault::Done, t)),
                Install::Race(t2) => {
                    t = t2;
                    let still = self.mms[mm as usize].pt.pte(addr) == expect;
                    if !(self.anon_paths.retry_lower_on_race && still) {
                        return Ok((Fault::Done, t)); // refault, or someone served it
                    }
                    mask &= (1 << k) - 1;
                }
            }
        }
    }

    /// Allocate a fresh anonymous folio of the largest order <= `order`
    /// allowed by `mask` (orders >= 2), one attempt per order without
    /// reclaim (GFP_HIGHUSER_MOVABLE | __GFP_NORETRY), counting each
    /// fallback; the folio is prepared. Returns ((pfn, done, order) or
    /// None, time spent).
    fn alloc_large_folio(&mut self, t: Ns, cpu: u32, nid: u32, order: u32, mask: u32) -> (Option<(Pfn, Ns, u32)>, Ns) {
        let mut t = t;
        for k in (2..=order).rev().filter(|k| mask & (1 << k) != 0) {
            match self.pa.alloc_pages(t, cpu, k, nid, MigrateType::Movable, &mut self.stat) {
                Some(a) => {
                    let done = self.post_alloc_hook(a.done, cpu, a.pfn, k, a.nid, LufExit::Alloc(a.ugen), "mTHP");
                    return (Some((a.pfn, done, k)), t);
                }
                None => {
                    t += self.c.buddy_op;
                    self.mthp.anon_fault_fallback[k as usize] += 1;
                    self.stat.inc(Stat::MthpFaultFallback);
                }
            }
        }
        (None, t)
    }

    /// Zero, charge, and map folio `pfn` of `order` at its aligned block
    /// around `addr` under the PTL, after re-checking the block.
    fn anon_folio_install(&mut self, t: Ns, vmf: &VmFault, pfn: Pfn, order: u32, pmd: bool) -> Install {
        let (cpu, mm, vma, addr, expect) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address, vmf.orig_pte);
        let n = 1u64 << order;
        let base = addr & !((4096 << order) - 1);
        let pnid = self.mem_map.get(pfn).nid as usize;
        // The faulting sub-page is cleared last (folio_zero_user): no extra cost.
        let t = self.clear_folio(t + self.c.alloc_anon_folio, cpu, pnid, order) + self.c.memcg;
        self.check_guest_write(pfn, order, "cleared");
        let (av, prep) = self.anon_vma_prepare(mm, vma);
        let t = t + prep;
        // set_ptes is one batch of n PTEs, and folio_add_new_anon_rmap sets
        // every page's mapcount and AnonExclusive; a PMD mapping is one
        // entry and one rmap call, with no per-page work.
        let hold = if pmd { self.c.pte_set + self.c.rmap } else { (self.c.pte_set + self.c.rmap_page) * n + self.c.rmap };
        let lc = self.lc;
        let recheck = self.knobs.mutant != Mutant::MthpSkipPteRecheck;
        let whole_block = self.knobs.mutant != Mutant::MthpRecheckFaultPteOnly;
        let tbl = self.mms[mm as usize].pt.table_mut(addr).expect("pte table exists");
        let (_, t) = tbl.ptl.lock_span(t, cpu, hold, &lc);
        if recheck {
            // The block was scanned without the PTL; another CPU may have
            // populated any PTE of it since (pte_range_none under the PTL).
            let ok = (0..n).all(|i| {
                let va = base + i * 4096;
                let slot = tbl.ptes[pte_index(va)];
                if va == addr {
                    slot == expect
                } else {
                    slot.is_none() || !whole_block
                }
            });
            if !ok {
                self.stat.inc(Stat::MthpRaceRetry);
                let t = self.release_folios(t, cpu, &[pfn]);
                return Install::Race(t);
            }
        }
        // Cheap checker rules at the commit point (I-5, I-7, I-8, I-9 in
        // docs/mechanisms/large-anon-folios.md#rules-it-implements).
        if self.check.enabled {
            if base < vma.start || base + n * 4096 > vma.end {
                self.check.report(format!(
                    "mm {mm} va {base:#x}: order-{order} folio mapped across the VMA boundary [{:#x}, {:#x}) (I-5)",
                    vma.start, vma.end
                ));
            }
            if order == 1 || pfn & (n as Pfn - 1) != 0 || base & (n * 4096 - 1) != 0 {
                self.check.report(format!(
                    "mm {mm} va {base:#x}: folio of order {order} at pfn {pfn} is not naturally aligned or has an illegal order (I-8/I-9)"
                ));
            }
            let tbl = self.mms[mm as usize].pt.table(addr).unwrap();
            for i in 0..n {
                let va = base + i * 4096;
                let slot = tbl.ptes[pte_index(va)];
                if !(slot.is_none() || (va == addr && slot == expect)) {
                    self.check
                        .report(format!("mm {mm} va {va:#x}: fresh order-{order} folio overwrote a populated PTE {:#x} (I-7)", slot.0));
                    break;
                }
            }
        }
        // Commit: flags on every page, one reference per PTE, rmap, PTEs.
        for i in 0..n as Pfn {
            let p = self.mem_map.get_mut(pfn + i);
            p.flags |= pg::ANON | pg::SWAPBACKED | pg::ANON_EXCLUSIVE | pg::UPTODATE;
            p.mapping = av;
            let va = (base + i as u64 * 4096).max(vma.start); // clamped: only a broken variant maps outside
            p.index = vma.linear_page_index(va);
        }
        self.mem_map.get_mut(pfn).refcount += n as i32 - 1;
        let bits =
            Pte::WRITE | Pte::DIRTY | Pte::YOUNG | if vma.flags & vm::EXEC != 0 { Pte::EXEC } else { 0 } | if pmd { Pte::HUGE } else { 0 };
        let mut old_zero = false;
        for i in 0..n {
            let va = base + i * 4096;
            let tbl = self.mms[mm as usize].pt.table_mut(addr).unwrap();
            let slot = &mut tbl.ptes[pte_index(va)];
            let old = *slot;
            *slot = Pte::new(pfn + i as Pfn, bits);
            if !old.present() {
                tbl.nr_present += 1;
            } else if old.special() {
                old_zero = true;
            }
            self.page_add_rmap(mm, pfn + i as Pfn, true);
        }
        self.stat.add(Stat::NrAnonLarge, n as i64);
        self.stat.add(Stat::FaultAnonPages, n as i64);
        self.stat.add(Stat::ZeroedBytes, (n * 4096) as i64);
        let mut t = t;
        if expect.present() {
            // Path B: the zero-page translation must go (ptep_clear_flush).
            self.mthp.path_b[order as usize] += 1;
            self.stat.inc(Stat::FaultCow);
            t = self.flush_tlb_page(t, cpu, mm, addr);
        } else {
            self.mthp.path_a[order as usize] += 1;
            self.stat.inc(Stat::FaultAnon);
        }
        if old_zero {
            self.stat.add(Stat::NrZeroPageMapped, -1);
        }
        if pmd {
            self.stat.inc(Stat::ThpFaultAlloc);
        } else {
            self.stat.inc(Stat::MthpFaultAlloc);
        }
        self.mthp.anon_fault_alloc[order as usize] += 1;
        let t = self.folio_add_lru(t, cpu, pfn);
        Install::Done(t)
    }

    /// Path D (RFC patches 9-10): reuse the contiguous run R of read-only
    /// PTEs around the fault's address that map consecutive pages of the faulting page's
    /// folio (within the folio, the VMA and the PMD), when every page in R
    /// is exclusive or the folio's references are exactly R's PTEs. None:
    /// cannot reuse, copy instead.
    pub(crate) fn wp_reuse_range(&mut self, t: Ns, vmf: &VmFault) -> Option<(Fault, Ns)> {
        let (cpu, mm, vma, addr, pte) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address, vmf.orig_pte);
        let pfn = pte.pfn();
        let head = self.mem_map.folio_head(pfn);
        let order = self.mem_map.get(pfn).order as u32;
        let off = (pfn - head) as u64;
        let fstart = addr.saturating_sub(off * 4096);
        let fend = fstart.saturating_add(4096 << order);
        let pmd_lo = addr & !(PMD_SIZE - 1);
        let lo = fstart.max(vma.start).max(pmd_lo);
        let hi = fend.min(vma.end).min(pmd_lo + PMD_SIZE);
        let tbl = self.mms[mm as usize].pt.table(addr)?;
        let fits = |va: u64| {
            let p = tbl.ptes[pte_index(va)];
            let want = (pfn as i64 + ((va as i64 - addr as i64) >> 12)) as Pfn;
            p.present() && !p.write() && !p.special() && p.0 & Pte::PROTNONE == 0 && p.pfn() == want
        };
        let mut s = addr;
        while s >= lo + 4096 && fits(s - 4096) {
            s -= 4096;
        }
        let mut e = addr;
        while e < hi && fits(e) {
            e += 4096;
        }
        let r = ((e - s) >> 12) as i32;
        let first = (pfn as i64 - ((addr - s) >> 12) as i64) as Pfn;
        let exclusive = (0..r as Pfn).all(|i| self.mem_map.get(first + i).flags & pg::ANON_EXCLUSIVE != 0);
        let mut t = t;
        if exclusive && self.knobs.mutant == Mutant::MthpCowExclusive {
            return None;
        }
        if !exclusive {
            if self.mem_map.get(head).refcount > r + 1 {
                return None;
            }
            if self.mem_map.get(head).flags & pg::LRU == 0 {
                t = self.lru_add_drain_cpu(t, cpu);
            }
            if self.mem_map.get(head).refcount != r {
                return None;
            }
            // folio_move_anon_rmap_range: all references are R's PTEs.
            let (av, prep) = self.anon_vma_prepare(mm, vma);
            t += prep;
            self.mem_map.get_mut(head).mapping = av;
            for i in 0..r as Pfn {
                let p = self.mem_map.get_mut(first + i);
                p.flags |= pg::ANON_EXCLUSIVE;
                p.mapping = av;
            }
        }
        let lc = self.lc;
        let tbl = self.mms[mm as usize].pt.table_mut(addr).unwrap();
        let t = tbl.ptl.lock_for(t, cpu, self.c.pte_set * r as Ns, &lc);
        let mut va = s;
        while va < e {
            let slot = &mut tbl.ptes[pte_index(va)];
            *slot = slot.with(Pte::WRITE | Pte::DIRTY | Pte::YOUNG);
            va += 4096;
        }
        // A permission upgrade needs no flush: a stale read-only entry only
        // causes a spurious fault that re-walks.
        self.stat.add(Stat::Pgreuse, r as i64);
        self.mthp.path_d_pages[(31 - (r as u32).leading_zeros()).min(9) as usize] += 1;
        Some((Fault::Done, t))
    }

    /// The rmap side of unmapping `n` PTEs of one folio (folio_remove_rmap_ptes
    /// or, without batching, n calls of the one-page version), then the
    /// deferred-split trigger (RFC v2 patch 7): a large anon folio left partly
    /// mapped (batched) or that lost a page's last mapping (one-page 6.3
    /// logic) is queued.
    pub(crate) fn folio_remove_rmap_ptes(&mut self, t: Ns, cpu: u32, mm: u32, first: Pfn, n: u32, batched: bool) -> Ns {
        // Folios below order 2 never go on the deferred-split queue (the
        // order is the same on every page of a folio): skip the mapcount
        // and head lookups below. Every munmap'd order-0 page comes here.
        if self.mem_map.get(first).order < 2 {
            for i in 0..n {
                self.page_remove_rmap(mm, first + i);
            }
            return t;
        }
        let mut dropped_last = false;
        for i in 0..n {
            self.page_remove_rmap(mm, first + i);
            if self.mem_map.get(first + i).mapcount == 0 {
                dropped_last = true;
            }
        }
        let head = self.mem_map.folio_head(first);
        let hp = self.mem_map.get(head);
        if hp.order < 2 || hp.flags & pg::ANON == 0 {
            return t;
        }
        let queue = if batched {
            let nr = 1u32 << hp.order;
            let mapped = (0..nr).filter(|&i| self.mem_map.get(head + i).mapcount > 0).count() as u32;
            mapped > 0 && mapped < nr
        } else {
            dropped_last
        };
        if queue {
            self.deferred_split_folio(t, cpu, head)
        } else {
            t
        }
    }

    /// deferred_split_folio: queue a partly unmapped large anon folio.
    pub(crate) fn deferred_split_folio(&mut self, t: Ns, cpu: u32, head: Pfn) -> Ns {
        let p = self.mem_map.get(head);
        if p.flags & pg::DEFERRED_SPLIT != 0 {
            return t; // the lockless list_empty check
        }
        let (nid, order) = (p.nid as usize, p.order as usize);
        let lc = self.lc;
        let t = self.split_queues[nid].lock.lock_for(t, cpu, self.c.split_queue, &lc);
        self.split_queues[nid].list.insert(head);
        self.mem_map.get_mut(head).flags |= pg::DEFERRED_SPLIT;
        self.stat.inc(Stat::ThpDeferredSplitPage);
        self.stat.inc(Stat::SplitQueueLen);
        self.mthp.split_deferred[order] += 1;
        t
    }

    /// On the free of a large folio: take it off the deferred-split queue
    /// (6.3 free_transhuge_page takes the lock on every large-folio free;
    /// 6.12 folio_unqueue_deferred_split only when it is queued).
    pub(crate) fn free_large_folio(&mut self, t: Ns, cpu: u32, head: Pfn) -> Ns {
        let p = self.mem_map.get(head);
        if p.order < 2 || p.flags & pg::ANON == 0 {
            return t;
        }
        let (nid, order) = (p.nid as usize, p.order as u32);
        let t = t + self.c.free_large_folio;
        self.stat.add(Stat::NrAnonLarge, -(1i64 << order));
        let queued = p.flags & pg::DEFERRED_SPLIT != 0;
        if !queued && !self.anon_paths.free_always_locks_split_queue {
            return t;
        }
        if queued && self.knobs.mutant == Mutant::MthpSkipUnqueue {
            return t;
        }
        let lc = self.lc;
        let hold = if queued { self.c.split_queue } else { 0 };
        let t = self.split_queues[nid].lock.lock_for(t, cpu, hold, &lc);
        if queued {
            self.split_queues[nid].list.remove(&head);
            self.mem_map.get_mut(head).flags &= !pg::DEFERRED_SPLIT;
            self.stat.add(Stat::SplitQueueLen, -1);
        }
        t
    }

    /// Path C (RFC patches 11-14, with the exclusivity check added after
    /// review): copy the naturally aligned block around `addr` of the
    /// largest order <= min(source order, max) whose source PTEs are all
    /// present, read-only, contiguous from the faulting page, inside the
    /// source folio and the VMA, and maybe-shared. None: copy one page.
    pub(crate) fn wp_page_copy_large(&mut self, t: Ns, vmf: &VmFault) -> Option<(Fault, Ns)> {
        let (cpu, mm, vma, addr) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address);
        let old = vmf.orig_pte.pfn();
        let ohead = self.mem_map.folio_head(old);
        let oorder = self.mem_map.get(ohead).order as u32;
        let pte_mask = self.anon_orders(vmf).pte;
        let cap = oorder.min(31 - pte_mask.max(1).leading_zeros());
        if cap < 2 {
            return None;
        }
        let off = (old - ohead) as u64;
        let fva = addr.saturating_sub(off * 4096); // clamp instead of wrapping (after mremap the folio's head may lie below the VMA)
        let fstart = fva.max(vma.start);
        let fend = fva.saturating_add(4096 << oorder).min(vma.end);
        let check_exclusive = self.knobs.mutant != Mutant::MthpCowExclusive;
        let block_ok = |k: &Kernel, order: u32| -> bool {
            let size = 4096u64 << order;
            let base = addr & !(size - 1);
            if base < fstart || base + size > fend {
                return false;
            }
            let Some(tbl) = k.mms[mm as usize].pt.table(addr) else { return false };
            (0..1u64 << order).all(|i| {
                let va = base + i * 4096;
                let p = tbl.ptes[pte_index(va)];
                let want = (old as i64 + ((va as i64 - addr as i64) >> 12)) as Pfn;
                p.present()
                    && !p.write()
                    && !p.special()
                    && p.0 & Pte::PROTNONE == 0
                    && p.pfn() == want
                    && (!check_exclusive || k.mem_map.get(want).flags & pg::ANON_EXCLUSIVE == 0)
            })
        };
        let order = (2..=cap).rev().filter(|k| pte_mask & (1 << k) != 0).find(|&k| block_ok(self, k))?;
        let nid = self.cpus[cpu as usize].node;
        let (pfn, t1, k) = self.alloc_large_folio(t, cpu, nid, order, pte_mask).0?;
        let n = 1u64 << k;
        let base = addr & !((4096 << k) - 1);
        let first_old = (old as i64 - ((addr - base) >> 12) as i64) as Pfn;
        let snid = self.mem_map.get(old).nid as usize;
        let t = self.copy_pages(t1, cpu, snid, nid as usize, n, self.nodes[snid].copy_4k * n) + self.c.memcg;
        self.check_guest_write(pfn, k, "copied into");
        let (av, prep) = self.anon_vma_prepare(mm, vma);
        let t = t + prep;
        // Re-check under the PTL; a lost race falls back to the one-page copy.
        if !block_ok(self, k) {
            self.stat.inc(Stat::MthpRaceRetry);
            let t = self.release_folios(t, cpu, &[pfn]);
            return Some((Fault::Done, t));
        }
        let lc = self.lc;
        let hold = (self.c.pte_set + self.c.pte_clear) * n + 2 * self.c.rmap;
        let tbl = self.mms[mm as usize].pt.table_mut(addr).unwrap();
        let mut t = tbl.ptl.lock_for(t, cpu, hold, &lc);
        for i in 0..n as Pfn {
            let p = self.mem_map.get_mut(pfn + i);
            p.flags |= pg::ANON | pg::SWAPBACKED | pg::ANON_EXCLUSIVE | pg::UPTODATE;
            p.mapping = av;
            p.index = vma.linear_page_index(base + i as u64 * 4096);
        }
        self.mem_map.get_mut(pfn).refcount += n as i32 - 1;
        let bits = Pte::WRITE | Pte::DIRTY | Pte::YOUNG | if vma.flags & vm::EXEC != 0 { Pte::EXEC } else { 0 };
        for i in 0..n {
            let va = base + i * 4096;
            let o = first_old + i as Pfn;
            let f = self.mem_map.get(o).flags;
            if self.check.enabled && f & pg::ANON_EXCLUSIVE != 0 {
                self.check.report(format!("mm {mm} va {va:#x}: CoW copy replaces page {o}, which is still AnonExclusive (I-12)"));
            }
            let tbl = self.mms[mm as usize].pt.table_mut(addr).unwrap();
            tbl.ptes[pte_index(va)] = Pte::new(pfn + i as Pfn, bits);
            // ptep_clear_flush per page: RFC v2 has no batched clear-and-flush.
            t = self.flush_tlb_page(t, cpu, mm, va);
            self.page_add_rmap(mm, pfn + i as Pfn, true);
        }
        self.stat.add(Stat::NrAnonLarge, n as i64);
        self.stat.inc(Stat::FaultCow);
        self.stat.inc(Stat::MthpFaultAlloc);
        self.mthp.anon_fault_alloc[k as usize] += 1;
        self.mthp.path_c[k as usize] += 1;
        let mut t = self.folio_add_lru(t, cpu, pfn);
        t = self.folio_remove_rmap_ptes(t, cpu, mm, first_old, n as u32, true);
        let refs = vec![ohead; n as usize];
        t = self.release_folios(t, cpu, &refs);
        Some((Fault::Done, t))
    }

    /// deferred_split_scan (the shrinker, run from reclaim): split up to
    /// `nr` queued folios to order 0; their unmapped pages are freed. A
    /// folio with references beyond its PTEs (a pin, an LRU batch) is left
    /// queued, as split_folio fails on it. Returns (pages freed, time).
    pub fn deferred_split_scan(&mut self, t: Ns, cpu: u32, nr: usize) -> (u64, Ns) {
        let mut t = t;
        let mut freed = 0u64;
        let lc = self.lc;
        for nid in 0..self.split_queues.len() {
            if self.split_queues[nid].list.is_empty() {
                continue;
            }
            // Take a batch off the queue under the lock (the private list).
            let batch: Vec<Pfn> = self.split_queues[nid].list.iter().copied().take(nr).collect();
            t = self.split_queues[nid].lock.lock_for(t, cpu, self.c.split_queue * batch.len() as Ns, &lc);
            for &head in &batch {
                let p = self.mem_map.get(head);
                let order = p.order as u32;
                let n = 1u32 << order;
                let maps: i32 = (0..n).map(|i| self.mem_map.get(head + i).mapcount).sum();
                if p.refcount != maps {
                    self.stat.inc(Stat::ThpSplitPageFailed);
                    continue;
                }
                self.split_queues[nid].list.remove(&head);
                self.mem_map.get_mut(head).flags &= !pg::DEFERRED_SPLIT;
                self.stat.add(Stat::SplitQueueLen, -1);
                // __split_huge_page: off the LRU as one folio, back as 4 KiB ones.
                let on_lru = self.mem_map.get(head).flags & pg::LRU != 0;
                t = self.lru_lock_folios(t, cpu, nid, 1 + n as usize);
                if on_lru {
                    self.lruvec_del_folio(head);
                }
                let keep =
                    pg::ALLOCATED | pg::ANON | pg::SWAPBACKED | pg::UPTODATE | pg::ANON_EXCLUSIVE | pg::ACTIVE | pg::REFERENCED | pg::DIRTY;
                let hflags = self.mem_map.get(head).flags;
                let mut dead = Vec::new();
                for i in 0..n {
                    let pg_ = self.mem_map.get_mut(head + i);
                    let own_excl = pg_.flags & pg::ANON_EXCLUSIVE;
                    pg_.flags = (hflags & keep & !pg::ANON_EXCLUSIVE) | own_excl | pg::HEAD;
                    pg_.order = 0;
                    pg_.refcount = pg_.mapcount; // one reference per PTE
                    pg_.lru_prev = 0;
                    pg_.lru_next = 0;
                    if pg_.mapcount == 0 {
                        pg_.refcount = 0;
                        dead.push(head + i);
                    } else if on_lru {
                        self.lruvec_add_folio(head + i);
                    }
                }
                // Per-page struct page fix-ups (__split_huge_page_tail).
                t += self.c.rmap * n as Ns;
                self.stat.add(Stat::NrAnonLarge, -(n as i64));
                self.stat.inc(Stat::ThpSplitPage);
                self.mthp.split[order as usize] += 1;
                for pfn in dead {
                    t = self.free_folio(t, cpu, pfn);
                    freed += 1;
                }
            }
        }
        (freed, t)
    }

    /// The size code of the TLB entry a walk that found `pte` at `va` fills:
    /// 2 MiB for a PMD-mapped THP, 64 KiB when the profile honours contpte and
    /// the aligned 16 PTEs map one naturally aligned folio of order >= 4 with
    /// the same permissions (arm64 contpte, Linux 6.9), 16 KiB for HPA coalescing of
    /// an aligned, physically contiguous group of 4 PTEs, else 4 KiB.
    pub fn tlb_fill_size(&mut self, mm: u32, va: u64, pte: Pte) -> u8 {
        use crate::hw::tlb::size;
        if pte.special() {
            return size::PTE;
        }
        let pfn = pte.pfn();
        let vpn = va >> 12;
        let order = self.mem_map.get(pfn).order as u32;
        // In a guest on a host kernel the entry is no larger than the
        // host's mapping of the frame: a guest THP over 4 KiB host pages
        // fills 4 KiB entries.
        if pte.0 & Pte::HUGE != 0
            && order == PMD_ORDER
            && (vpn & 511) == (pfn as u64 & 511)
            && !self.host.as_ref().is_some_and(|h| h.maps_4k(pfn))
        {
            self.stat.inc(Stat::TlbFillPmd);
            return size::PMD;
        }
        let perms = |p: Pte| p.0 & (Pte::PRESENT | Pte::WRITE | Pte::EXEC | Pte::SPECIAL | Pte::PROTNONE);
        let Some(tbl) = self.mms[mm as usize].pt.table(va) else { return size::PTE };
        let group_ok = |n: u64, same_folio: bool, mem_map: &super::mem_map::MemMap| -> bool {
            if (vpn & (n - 1)) != (pfn as u64 & (n - 1)) {
                return false;
            }
            let bva = va & !((n << 12) - 1);
            let bpfn = pfn & !(n as Pfn - 1);
            let head = mem_map.folio_head(pfn);
            (0..n).all(|i| {
                let p = tbl.ptes[pte_index(bva + (i << 12))];
                perms(p) == perms(pte) && p.pfn() == bpfn + i as Pfn && (!same_folio || mem_map.folio_head(p.pfn()) == head)
            })
        };
        if self.prof.tlb.contpte && order >= 4 && group_ok(16, true, &self.mem_map) {
            self.stat.inc(Stat::TlbFillContpte);
            return size::CONTPTE;
        }
        if self.prof.tlb.coalesce_order == 2 && group_ok(4, false, &self.mem_map) {
            self.stat.inc(Stat::TlbFillHpa);
            return size::HPA;
        }
        size::PTE
    }

    /// split_huge_pmd for a zap or a protection change that covers part of a
    /// PMD-mapped THP: the remaining PTEs of the block lose `Pte::HUGE`.
    pub(crate) fn split_huge_pmd_at(&mut self, mm: u32, va: u64) {
        let base = va & !(PMD_SIZE - 1);
        if let Some(tbl) = self.mms[mm as usize].pt.table_mut(base) {
            for p in tbl.ptes.iter_mut() {
                *p = p.without(Pte::HUGE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::task::Task;
    use crate::mm::mm_types_task::fault_flag;
    use crate::workload::{map, prot, Access, Op, Ret};

    /// Two threads of one mm (tasks 0 and 1 on CPUs 0 and 1), 64 KiB anon
    /// folios on, and a 128 KiB region at 0x10000000 whose first 64 KiB
    /// block task 0 has faulted in (the anon_vma and PTE table exist).
    fn setup(mutant: &str) -> Kernel {
        let toml = format!(
            "[machine]\nprofile = \"generic-x86\"\nnode_mem_mib = [256, 256]\nnr_cpus = 4\n[workload]\nname = \"mmap1\"\n[knobs]\n\
             \"anon_folio.mode\" = \"upstream\"\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"\n\"debug.mutant\" = \"{mutant}\"\n"
        );
        let cfg = crate::config::from_toml(&toml, "<test>").unwrap();
        let mut k = Kernel::boot(cfg.profile.clone(), cfg.knobs.clone(), true, 1).unwrap();
        let mm = k.new_mm();
        k.tasks.push(Task::new(0, mm, 0, 0));
        k.tasks.push(Task::new(1, mm, 1, 0));
        k.mms[mm as usize].users = 2;
        let op = Op::Mmap {
            addr: REGION,
            len: 32 << 12,
            prot: prot::READ | prot::WRITE,
            flags: map::PRIVATE | map::ANONYMOUS | map::FIXED,
            fd: -1,
            off: 0,
        };
        assert_eq!(k.exec(0, op), Some(Ret::Val(REGION as i64)));
        assert_eq!(k.exec(0, Op::Access { addr: REGION, kind: Access::Store }), Some(Ret::Val(0)));
        k
    }

    const REGION: u64 = 0x1000_0000;
    const BLOCK: u64 = REGION + (16 << 12);

    /// Two faults race over one 64 KiB block: task 0 chooses order 4 and
    /// allocates its folio (outside the PTL), then task 1 read-faults the
    /// zero page into another PTE of the block, then task 0 takes the PTL
    /// to install. Returns the kernel and task 0's install outcome.
    fn race(mutant: &str) -> (Kernel, Install, Pfn) {
        let mut k = setup(mutant);
        let (cpu, mm, addr) = (0, k.tasks[0].mm, BLOCK + 0x2000);
        let vma = k.mms[mm as usize].vma_lookup(addr).unwrap().clone();
        let vmf = VmFault { tid: 0, mm, cpu, vma: &vma, address: addr, kind: Access::Store, flags: fault_flag::USER, orig_pte: Pte::NONE };
        let order = k.anon_fault_order(&vmf, 1 << 4);
        assert_eq!(order, 4, "the block is empty: task 0 chooses 64 KiB");
        let t = k.tasks[0].clock;
        let (got, _) = k.alloc_large_folio(t, cpu, 0, order, 1 << 4);
        let (pfn, t, order) = got.expect("a 64 KiB block is free");
        // Task 1, after task 0's choice and before its PTL.
        k.tasks[1].clock = t;
        assert_eq!(k.exec(1, Op::Access { addr: BLOCK + 0x9000, kind: Access::Load }), Some(Ret::Val(0)));
        assert!(k.mms[mm as usize].pt.pte(BLOCK + 0x9000).present(), "task 1's read fault mapped a page");
        let how = k.anon_folio_install(t, &vmf, pfn, order, false);
        (k, how, pfn)
    }

    #[test]
    fn a_large_folio_fault_that_loses_the_race_frees_its_folio() {
        let (k, how, pfn) = race("none");
        assert!(matches!(how, Install::Race(_)), "the re-check under the PTL sees task 1's PTE");
        assert_eq!(k.stat.get(Stat::MthpRaceRetry), 1);
        let mm = k.tasks[0].mm as usize;
        assert!(k.mms[mm].pt.pte(BLOCK + 0x2000).is_none(), "nothing installed at the faulting address");
        assert!(k.mms[mm].pt.pte(BLOCK + 0x9000).present(), "task 1's PTE is kept");
        assert_eq!(k.mem_map.get(pfn).refcount, 0, "the losing folio went back to the allocator");
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    #[test]
    fn checker_catches_a_recheck_of_the_faulting_pte_only() {
        let (k, how, _) = race("mthp_recheck_fault_pte_only");
        assert!(matches!(how, Install::Done(_)), "the broken re-check misses task 1's PTE");
        assert!(k.check.violations.iter().any(|v| v.contains("I-7")), "{:?}", k.check.violations);
    }
}
