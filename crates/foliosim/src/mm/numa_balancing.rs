//! NUMA balancing in memory-tiering mode for mapped memory
//! (`kernel.numa_balancing` = 2, NUMA_BALANCING_MEMORY_TIERING).
//!
//! Hotness of mapped pages is found through page tables only:
//!
//! * `task_numa_work` (kernel/sched/fair.c), run as task work when a
//!   thread of the mm returns to user space and the mm's scan is due,
//!   walks the mm's VMAs from `numa_scan_offset` for up to
//!   `kernel.numa_balancing_scan_size_mb` of PTEs changed (8x that of
//!   address space walked) and calls `change_prot_numa` (mm/mempolicy.c ->
//!   change_pte_range's prot_numa branch in mm/mprotect.c) on each chunk:
//!   present PTEs of pages on a lower tier become PROT_NONE hinting PTEs
//!   (write bit cleared, as pte_modify(PAGE_NONE) does) and the folio
//!   records the scan time (folio_xchg_access_time; foliosim keeps it in
//!   `private` in ms modulo 2^16, the encoding page-cache promotion uses).
//!   The changed range is flushed at once (tlb_finish_mmu), which is why
//!   promotion later needs no flush.
//! * The next access through such a PTE faults (the TLB never caches it):
//!   `do_numa_page` (mm/memory.c) counts the hint, asks
//!   `should_numa_migrate_memory`'s tiering branch (memory_tiers.rs
//!   `should_promote`: hot threshold, promotion rate limit) and, for a hot
//!   page, `migrate_misplaced_folio` (mm/migrate.c) moves it to the
//!   faulting CPU's (top-tier) node. The migration entry is made from the
//!   PROT_NONE PTE, which has no write bit, so the page comes back mapped
//!   read-only (docs/mechanisms/numa-balancing.md); a later write takes do_wp_page's reuse path.
//!   Otherwise the PTE is made accessible again (numa_rebuild_single_mapping
//!   / numa_rebuild_large_mapping).
//!
//! * The scan period is each task's own (p->numa_scan_period), sized by
//!   the mm's RSS in scan windows of scan_size MB (task_nr_scan_windows):
//!   it starts at task_scan_start = task_scan_min (scan_period_min /
//!   windows, but never more than MAX_SCAN_WINDOW MB/s), and
//!   update_task_scan_period adapts it once per full pass over the mm
//!   (numa_scan_seq), from the hint faults task_numa_fault recorded since:
//!   with no local and no shared fault it doubles, up to task_scan_max
//!   (scan_period_max / windows). In tiering mode task_numa_fault records
//!   only faults whose page ends on a top-tier node, i.e. promotions, all
//!   "private" (the slow page's cpupid field holds its scan time) and
//!   remote (it was on the slow node): so the period of a task that
//!   promotes doubles every pass until it reaches task_scan_max.
//!
//! Not modelled: per-VMA scan delays and PID-activity filters
//! (numab_state), task_tick_numa's runtime-based trigger (a thread scans
//! on its return to user space once the mm's scan is due) and its 3 % cap,
//! numa_migrate_retry's delay of placement, NUMA_BALANCING_NORMAL placement
//! (mode 1: the scanner does not run; in mode 3 top-tier pages are scanned
//! but a hint fault on them only restores the PTE), preferred nodes and
//! numa groups, and PMD-mapped THPs (their PTEs are skipped by the
//! scanner).

use super::mem_map::pg;
use super::memory::Fault;
use super::memory_tiers::{NUMA_BALANCING_MEMORY_TIERING, NUMA_BALANCING_NORMAL};
use super::mm_types_task::VmFault;
use super::pgtable::{pte_index, Pte, PMD_SHIFT};
use super::vma::{vm, Vma};
use super::vmstat::Stat;
use crate::kernel::knobs::Mutant;
use crate::kernel::Kernel;
use crate::sim::Ns;

const HPAGE_SIZE: u64 = 1 << PMD_SHIFT;
/// kernel/sched/fair.c: never scan more PTEs than this many MB a second.
const MAX_SCAN_WINDOW: u64 = 2560;
/// update_task_scan_period's ratios are in tenths; at or above 7 the
/// period grows.
const NUMA_PERIOD_SLOTS: u64 = 10;
const NUMA_PERIOD_THRESHOLD: u64 = 7;

impl Kernel {
    /// task_tick_numa + task_numa_work for user task `tid`, on its return
    /// to user space: scan its mm if the scan is due (once per
    /// scan_period_min per mm, whichever thread gets there first), charged
    /// to the task.
    pub fn task_numa_work(&mut self, tid: u32) {
        if self.knobs.numa_balancing & NUMA_BALANCING_MEMORY_TIERING == 0 {
            return;
        }
        let (mm, cpu, now, kthread, exited) = {
            let tk = &self.tasks[tid as usize];
            (tk.mm, tk.cpu, tk.clock, tk.kthread.is_some(), tk.exited)
        };
        if kthread || exited || !self.mms[mm as usize].alive {
            return;
        }
        let delay_ms = self.knobs.numa_scan_delay_ms;
        let m = &mut self.mms[mm as usize];
        if m.numa_next_scan == 0 {
            m.numa_next_scan = now + delay_ms * 1_000_000;
        }
        if now < m.numa_next_scan {
            return;
        }
        if !self.tasks[tid as usize].numa.ticked {
            let (start, max) = (self.task_scan_min(mm), self.task_scan_max(mm));
            let n = &mut self.tasks[tid as usize].numa;
            n.ticked = true;
            n.scan_period_ms = start;
            n.scan_period_max_ms = max;
        }
        self.mms[mm as usize].numa_next_scan = now + self.tasks[tid as usize].numa.scan_period_ms * 1_000_000;
        let lc = self.lc;
        let Some(mut t) = self.mms[mm as usize].mmap_lock.down_read_trylock(now, cpu, &lc) else { return };
        let mut pages = (self.knobs.numa_scan_size_mb << (20 - 12)) as i64;
        let mut virtpages = pages * 8;
        let mut start = self.mms[mm as usize].numa_scan_offset;
        let collect = |k: &Kernel, from: u64| -> Vec<Vma> { k.mms[mm as usize].vmas.values().filter(|v| v.end > from).cloned().collect() };
        let mut vmas = collect(self, start);
        if vmas.is_empty() {
            self.reset_ptenuma_scan(mm);
            start = 0;
            vmas = collect(self, 0);
        }
        let mut stopped_in_vma = false;
        'vmas: for v in &vmas {
            // Shared-library-like read-only file mappings and inaccessible
            // VMAs are not scanned (NUMAB_SKIP_SHARED_RO, _INACCESSIBLE).
            if v.file != 0 && v.flags & (vm::READ | vm::WRITE) == vm::READ {
                continue;
            }
            if v.flags & (vm::READ | vm::WRITE | vm::EXEC) == 0 {
                continue;
            }
            loop {
                start = start.max(v.start);
                let end = (start + ((pages as u64) << 12)).next_multiple_of(HPAGE_SIZE).min(v.end);
                let (n, t1) = self.change_prot_numa(t, cpu, mm, v, start, end);
                t = t1;
                if n > 0 {
                    pages -= ((end - start) >> 12) as i64;
                }
                virtpages -= ((end - start) >> 12) as i64;
                start = end;
                if pages <= 0 || virtpages <= 0 {
                    stopped_in_vma = true;
                    break 'vmas;
                }
                if end == v.end {
                    break;
                }
            }
        }
        if stopped_in_vma {
            self.mms[mm as usize].numa_scan_offset = start;
        } else {
            self.reset_ptenuma_scan(mm);
        }
        let t = self.mms[mm as usize].mmap_lock.up_read(t, cpu, &lc);
        let tk = &mut self.tasks[tid as usize];
        tk.sys_ns += t - now;
        tk.clock = t;
    }

    /// task_nr_scan_windows: the mm's RSS in scan_size windows (at least 1).
    fn task_nr_scan_windows(&self, mm: u32) -> u64 {
        let m = &self.mms[mm as usize];
        let scan_pages = self.knobs.numa_scan_size_mb << (20 - 12);
        let rss = m.rss().max(0) as u64;
        rss.max(1).div_ceil(scan_pages)
    }

    /// task_scan_min, ms: scan_period_min over the windows, but no faster
    /// than MAX_SCAN_WINDOW MB/s.
    fn task_scan_min(&self, mm: u32) -> u64 {
        let size = self.knobs.numa_scan_size_mb;
        let windows = if size < MAX_SCAN_WINDOW { MAX_SCAN_WINDOW / size } else { 1 };
        (1000 / windows).max(self.knobs.numa_scan_period_min_ms / self.task_nr_scan_windows(mm))
    }

    /// task_scan_max, ms (no numa group: no scaling for shared faults).
    fn task_scan_max(&self, mm: u32) -> u64 {
        (self.knobs.numa_scan_period_max_ms / self.task_nr_scan_windows(mm)).max(self.task_scan_min(mm))
    }

    /// task_numa_fault for a hint fault of task `tid` whose page ends on a
    /// top-tier node (the only ones recorded in tiering mode: promotions,
    /// and in mode 3 faults on top-tier pages):
    /// task_numa_placement first (once per pass over the mm), then the
    /// fault's pages counted as private (the slow page's cpupid held its
    /// scan time) and remote or `local`.
    fn task_numa_fault(&mut self, tid: u32, t: Ns, pages: u64, local: bool) {
        let mm = self.tasks[tid as usize].mm;
        let seq = self.mms[mm as usize].numa_scan_seq;
        // A thread that faults before it ever scanned (another thread of
        // the mm scans) still has init_numa_balancing's period: the scan
        // delay. Doubling from 0 would make the mm's scan due at once.
        let delay_ms = self.knobs.numa_scan_delay_ms;
        let n = &mut self.tasks[tid as usize].numa;
        if n.scan_period_ms == 0 {
            n.scan_period_ms = delay_ms;
        }
        if self.tasks[tid as usize].numa.scan_seq != seq {
            let max = self.task_scan_max(mm);
            let n = &mut self.tasks[tid as usize].numa;
            n.scan_seq = seq;
            n.scan_period_max_ms = max;
            let [shared, private] = std::mem::take(&mut n.faults_buf);
            self.update_task_scan_period(tid, t, shared, private);
        }
        let n = &mut self.tasks[tid as usize].numa;
        n.faults_buf[1] += pages;
        n.faults_locality[local as usize] += pages;
    }

    /// update_task_scan_period: scan slower when no fault was local or
    /// shared (doubling; Linux tests local + shared, not local + remote) or
    /// a migration failed; otherwise step the period by the private and
    /// local shares of the faults.
    fn update_task_scan_period(&mut self, tid: u32, t: Ns, shared: u64, private: u64) {
        let mm = self.tasks[tid as usize].mm;
        let (min, max) = (self.task_scan_min(mm), self.task_scan_max(mm));
        let n = &mut self.tasks[tid as usize].numa;
        let [remote, local, failed] = std::mem::take(&mut n.faults_locality);
        if local + shared == 0 || failed != 0 {
            n.scan_period_ms = n.scan_period_max_ms.min(n.scan_period_ms << 1);
            let next = t + n.scan_period_ms * 1_000_000;
            self.mms[mm as usize].numa_next_scan = next;
            return;
        }
        let period = n.scan_period_ms as i64;
        let slot = n.scan_period_ms.div_ceil(NUMA_PERIOD_SLOTS) as i64;
        let lr = (local * NUMA_PERIOD_SLOTS / (local + remote)) as i64;
        let ps = (private * NUMA_PERIOD_SLOTS / (private + shared)) as i64;
        let th = NUMA_PERIOD_THRESHOLD as i64;
        let diff = if ps >= th {
            (ps - th).max(1) * slot
        } else if lr >= th {
            (lr - th).max(1) * slot
        } else {
            -(th - lr.max(ps)) * slot
        };
        n.scan_period_ms = (period + diff).clamp(min as i64, max as i64) as u64;
    }

    /// reset_ptenuma_scan: the next scan starts over at the bottom.
    fn reset_ptenuma_scan(&mut self, mm: u32) {
        let m = &mut self.mms[mm as usize];
        m.numa_scan_seq = m.numa_scan_seq.wrapping_add(1);
        m.numa_scan_offset = 0;
    }

    /// change_prot_numa over [start, end) of `vma`: the prot_numa branch of
    /// change_pte_range, then tlb_finish_mmu's flush of the changed range.
    /// Returns (PTEs updated, time).
    pub fn change_prot_numa(&mut self, t: Ns, cpu: u32, mm: u32, vma: &Vma, start: u64, end: u64) -> (u64, Ns) {
        let mut t = self.flush_tlb_batched_pending(t, cpu, mm);
        let now_ms = (t / 1_000_000) as u16;
        let normal = self.knobs.numa_balancing & NUMA_BALANCING_NORMAL != 0;
        let cow = vma.flags & vm::SHARED == 0 && vma.flags & vm::MAYWRITE != 0;
        // A single-threaded process leaves pages on its own node alone.
        let target_node = (vma.flags & vm::SHARED == 0 && self.mms[mm as usize].users == 1).then(|| self.cpus[cpu as usize].node);
        let lc = self.lc;
        let mut updated = 0u64;
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let mut va = start;
        let mut changes: Vec<(u64, Pte)> = Vec::new();
        while va < end {
            let stop = (((va >> PMD_SHIFT) + 1) << PMD_SHIFT).min(end);
            let Some(tbl) = self.mms[mm as usize].pt.table(va) else {
                va = stop;
                continue;
            };
            if tbl.nr_present == 0 {
                va = stop;
                continue;
            }
            changes.clear();
            // PTEs whose folio the walk looks up: each costs the lookup and
            // its tests whether it is changed or not.
            let mut seen = 0u64;
            let mut a = va;
            while a < stop {
                let pte = tbl.ptes[pte_index(a)];
                a += 4096;
                // Already a hinting PTE (avoid the flush), the zero page
                // (no normal folio), or part of a PMD mapping.
                if !pte.present() || pte.0 & (Pte::PROTNONE | Pte::SPECIAL | Pte::HUGE) != 0 {
                    continue;
                }
                seen += 1;
                let pfn = pte.pfn();
                let head = self.mem_map.folio_head(pfn);
                let p = self.mem_map.get(head);
                // Shared copy-on-write pages are skipped.
                if cow && self.mem_map.get(pfn).mapcount > 1 {
                    continue;
                }
                // Async migration cannot move dirty file folios.
                if p.flags & pg::ANON == 0 && p.flags & pg::DIRTY != 0 {
                    continue;
                }
                let nid = p.nid as u32;
                if target_node == Some(nid) {
                    continue;
                }
                let toptier = self.tier.node_is_toptier(nid);
                if !normal && toptier {
                    continue;
                }
                changes.push((a - 4096, pte));
                if !toptier {
                    // folio_use_access_time: folio_xchg_access_time(now).
                    self.mem_map.get_mut(head).private = now_ms;
                }
            }
            // The walk holds the table's PTL (pte_offset_map_lock) whether
            // or not it changes anything.
            let hold = self.c.change_pte_scan * seen as Ns + self.c.pte_set * changes.len() as Ns;
            if hold > 0 {
                let tbl = self.mms[mm as usize].pt.table_mut(va).expect("table seen above");
                t = tbl.ptl.lock_for(t, cpu, hold, &lc);
            }
            if !changes.is_empty() {
                // change_pmd_range: one notifier call per PMD range it changes.
                if self.knobs.mutant != Mutant::NumaHintSkipNotifier {
                    t += self.mms[mm as usize].mmu_notifier_invalidate(va, stop, t);
                }
                let tbl = self.mms[mm as usize].pt.table_mut(va).expect("table seen above");
                for &(a, pte) in &changes {
                    // pte_modify(PAGE_NONE): inaccessible, and the write bit goes.
                    tbl.ptes[pte_index(a)] = pte.with(Pte::PROTNONE).without(Pte::WRITE);
                    lo = lo.min(a);
                    hi = hi.max(a + 4096);
                }
                updated += changes.len() as u64;
            }
            va = stop;
        }
        if updated > 0 {
            self.stat.add(Stat::NumaPteUpdates, updated as i64);
            t = self.flush_tlb_mm_range(t, cpu, mm, lo, hi, false);
        }
        (updated, t)
    }

    /// do_numa_page: an access hit the PROT_NONE hinting PTE vmf.orig_pte.
    pub(crate) fn do_numa_page(&mut self, t: Ns, vmf: &VmFault) -> (Fault, Ns) {
        let (cpu, mm, vma, addr, pte) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address, vmf.orig_pte);
        let mut t = t + self.c.numa_migrate_check;
        let pfn = pte.pfn();
        let head = self.mem_map.folio_head(pfn);
        let (nid, order, flags) = {
            let p = self.mem_map.get(head);
            (p.nid as u32, p.order as u32, p.flags)
        };
        let anon = flags & pg::ANON != 0;
        // The write bit a restored PTE may get back: pte_modify with
        // vm_page_prot never grants it here (private mappings copy on
        // write, shared file mappings are write-notified), so it comes from
        // can_change_pte_writable: an exclusive anon page of a writable
        // private VMA, or a dirty PTE of a writable shared one.
        let writable = vma.flags & vm::WRITE != 0
            && if vma.is_shared() { pte.dirty() } else { anon && self.mem_map.get(pfn).flags & pg::ANON_EXCLUSIVE != 0 };
        // numa_migrate_check.
        let here = self.cpus[cpu as usize].node;
        self.stat.inc(Stat::NumaHintFaults);
        if nid == here {
            self.stat.inc(Stat::NumaHintFaultsLocal);
        }
        let nr = 1u64 << order;
        // mpol_misplaced with the default (MPOL_F_MORON) policy: the target
        // is this CPU's node if should_numa_migrate_memory agrees. Only the
        // tiering branch is modelled: lower-tier pages, top-tier target.
        let tiering = self.knobs.numa_balancing & NUMA_BALANCING_MEMORY_TIERING != 0;
        let target = tiering
            && nid != here
            && !self.tier.node_is_toptier(nid)
            && self.tier.node_is_toptier(here)
            && self.should_promote(t, head, here, nr);
        if target {
            // migrate_misplaced_folio_prepare.
            let prepared = if !anon && flags & pg::DIRTY != 0 {
                false
            } else if !self.migrate_balanced_pgdat(here, nr) {
                self.wakeup_kswapd(t, here);
                false
            } else {
                // folio_isolate_lru fails for a folio off the LRU (isolated
                // by someone else, or still in a per-CPU add batch).
                flags & pg::LRU != 0 && flags & pg::ISOLATED == 0
            };
            if prepared {
                t = self.lru_lock_folios(t, cpu, nid as usize, 1);
                self.folio_isolate_lru(head);
                // migrate_misplaced_folio: the PTE is inaccessible, so the
                // unmap batches no flush (rmap.rs pte_accessible) and the
                // migration entry, built without a write bit, restores a
                // read-only PTE.
                let (moved, t1) = self.migrate_misplaced_folio_batch(t, cpu, &[head], here);
                t = t1;
                if moved > 0 {
                    self.task_numa_fault(self.current_tid(cpu), t, nr, false);
                    return (Fault::Done, t);
                }
            }
        }
        // task_numa_fault records a fault that leaves its page on a
        // top-tier node (mode 3's scans of the top tier), local or remote.
        if self.tier.node_is_toptier(nid) {
            self.task_numa_fault(self.current_tid(cpu), t, nr, nid == here);
        }
        // out_map: make the PTE(s) accessible again, unless it changed
        // under us (a failed migration already restored it).
        if self.mms[mm as usize].pt.pte(addr) != pte {
            return (Fault::Done, t);
        }
        let restore = |p: Pte, w: bool| -> Pte { p.without(Pte::PROTNONE).with(Pte::YOUNG | if w { Pte::WRITE } else { 0 }) };
        if order == 0 {
            let (_, t) = self.set_pte_locked(t, cpu, mm, addr, pte, restore(pte, writable), self.c.pte_set);
            return (Fault::Done, t);
        }
        // numa_rebuild_large_mapping: every hinting PTE of this folio in
        // this VMA and page table.
        let off = (pfn - head) as u64;
        let pt_start = addr & !(HPAGE_SIZE - 1);
        let lo = addr.saturating_sub(off << 12).max(pt_start).max(vma.start);
        let hi = (addr - (off << 12) + (nr << 12)).min(pt_start + HPAGE_SIZE).min(vma.end);
        let lc = self.lc;
        let mut fixed = 0;
        let excl = |k: &Kernel, p: Pte| {
            vma.flags & vm::WRITE != 0
                && if vma.is_shared() { p.dirty() } else { anon && k.mem_map.get(p.pfn()).flags & pg::ANON_EXCLUSIVE != 0 }
        };
        let mut a = lo;
        let mut new = Vec::new();
        while a < hi {
            let p = self.mms[mm as usize].pt.pte(a);
            if p.present() && p.0 & Pte::PROTNONE != 0 && self.mem_map.folio_head(p.pfn()) == head {
                new.push((a, restore(p, excl(self, p))));
                fixed += 1;
            }
            a += 4096;
        }
        let tbl = self.mms[mm as usize].pt.table_mut(addr).expect("faulting PTE's table");
        let t = tbl.ptl.lock_for(t, cpu, self.c.pte_set * fixed, &lc);
        for (a, p) in new {
            tbl.ptes[pte_index(a)] = p;
        }
        (Fault::Done, t)
    }
}
