//! Page faults and unmapping (mm/memory.c): handle_mm_fault and its paths
//! for 4 KiB pages — do_anonymous_page (zero page on read), do_read_fault
//! with fault-around, do_cow_fault, do_shared_fault, do_wp_page (reuse,
//! wp_page_copy, wp_page_shared) — and zap_pte_range.

pub(crate) use super::luf::LufExit;
use super::mem_map::{pg, Page};
use super::mm_types_task::VmFault;
use super::mmu_gather::MmuGather;
use super::page_alloc::MigrateType;
use super::pgtable::{pte_index, Pte, PteTable, PGDIR_SHIFT, PMD_SHIFT, PUD_SHIFT};
use super::vma::{vm, MmCounter, Vma};
use super::vmstat::Stat;
use super::Pfn;
use crate::hw::cache::CacheStamp;
use crate::kernel::knobs::{LufMutant, Mutant};
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::workload::{Access, FsKind};

pub use super::mm_types_task::Fault;

/// mm/internal.h: reclaim rounds without progress before the allocator gives up.
pub(crate) const MAX_RECLAIM_RETRIES: u32 = 16;

impl Kernel {
    /// Allocate and prepare a folio (folio_alloc + prep_new_page). On
    /// failure, reclaims (direct reclaim) and retries; None = OOM.
    /// Always inlined (three callers): on the fault path it is a thin
    /// layer around alloc_pages, cheaper without the call.
    #[inline(always)]
    pub fn alloc_folio(&mut self, t: Ns, cpu: u32, order: u32, nid: u32, mt: MigrateType) -> Option<(Pfn, Ns)> {
        match self.pa.alloc_pages(t, cpu, order, nid, mt, &mut self.stat) {
            Some(a) => Some(self.alloc_folio_prep(a, cpu, order, nid)),
            None => self.alloc_folio_slow(t, cpu, order, nid, mt),
        }
    }

    /// The rest of `alloc_folio` once the allocator handed out `a`.
    #[inline(always)]
    fn alloc_folio_prep(&mut self, a: crate::mm::page_alloc::Alloc, cpu: u32, order: u32, nid: u32) -> (Pfn, Ns) {
        let t = self.post_alloc_hook(a.done, cpu, a.pfn, order, a.nid, LufExit::Alloc(a.ugen), "alloc_pages");
        if a.slow {
            self.wake_all_kswapds(t, nid);
        }
        (a.pfn, t)
    }

    /// post_alloc_hook + prep_new_page: what every block leaving the
    /// allocator for a new owner goes through, whichever path took it
    /// (alloc_pages, a THP or mTHP fault, a migration target, compaction,
    /// alloc_contig_range, an atomic allocation): the LUF check of the
    /// generation it carried, the fresh per-page state, and, in a guest,
    /// the host fault for whatever the host gave up (reported, swapped)
    /// — the caller's clearing, copy or fill that follows is the guest's
    /// first touch of these frames, so a real host faults there. Returns
    /// when the new owner may use the block.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn post_alloc_hook(&mut self, t: Ns, cpu: u32, pfn: Pfn, order: u32, nid: u32, luf: LufExit, what: &'static str) -> Ns {
        let mut t = match luf {
            LufExit::Alloc(ugen) => {
                self.check_free_generations(t);
                if ugen != 0 && order >= 2 && self.knobs.mutant == Mutant::Luf(LufMutant::LargeSkipAllocFlush) {
                    t
                } else {
                    self.luf_alloc_exit(t, cpu, nid, ugen)
                }
            }
            LufExit::Isolation(ugen) => self.luf_isolation_exit(t, cpu, nid, ugen),
            LufExit::Checked => t,
        };
        self.check_alloc_exit(t, pfn, order, what);
        t += self.prep_new_folio_on(cpu, pfn, order, nid);
        self.check.on_alloc(&self.mem_map, &self.pa, pfn, order);
        if self.host.is_some() {
            t += self.guest_alloc_touch(t, cpu, pfn, order);
        }
        t
    }

    /// A guest's new block: the host backs it again before the first touch
    /// (EPT violation and host fault for each frame it had discarded or
    /// swapped out). Returns the time the vCPU spends in the host.
    #[inline(never)]
    fn guest_alloc_touch(&mut self, t: Ns, cpu: u32, pfn: Pfn, order: u32) -> Ns {
        let Some(h) = self.host.as_mut() else { return 0 };
        let t = if self.knobs.mutant == Mutant::FprSkipHostFault { 0 } else { h.touch(cpu, pfn, 1 << order, t, &mut self.stat) };
        self.kvm_remote_flush();
        if self.check.enabled {
            self.check.on_guest_handout(&self.pa, pfn, order);
        }
        t
    }

    /// The guest writes frames [pfn, pfn + 2^order) (clears, copies or
    /// fills them): the host must back every one of them by now.
    #[inline(always)]
    pub(crate) fn check_guest_write(&mut self, pfn: Pfn, order: u32, what: &str) {
        if self.check.enabled {
            if let Some(h) = &self.host {
                self.check.on_guest_use(h, pfn, 1 << order, what);
            }
        }
    }

    /// `alloc_folio` after its first attempt failed at `t`: reclaim and
    /// retry. Out of line, so that the common case carries no reclaim state.
    #[cold]
    #[inline(never)]
    fn alloc_folio_slow(&mut self, t: Ns, cpu: u32, order: u32, nid: u32, mt: MigrateType) -> Option<(Pfn, Ns)> {
        let t0 = t;
        let r = self.alloc_folio_reclaim(t, cpu, order, nid, mt);
        // delayacct_freepages_start/end around the reclaim, charged to
        // the task the CPU runs.
        let tid = self.cpus[cpu as usize].curr;
        if tid != u32::MAX {
            let end = r.map_or(t0, |(_, t)| t);
            self.tasks[tid as usize].freepages_delay_ns += end.saturating_sub(t0);
        }
        r
    }

    /// The slow path's rounds of direct reclaim and retries.
    fn alloc_folio_reclaim(&mut self, t: Ns, cpu: u32, order: u32, nid: u32, mt: MigrateType) -> Option<(Pfn, Ns)> {
        let mut t = t;
        let mut tries = 0;
        let mut rounds = 0;
        // The slow path wakes the kswapds before it reclaims directly.
        self.wake_all_kswapds(t, nid);
        loop {
            // should_reclaim_retry: give up after MAX_RECLAIM_RETRIES
            // rounds of reclaim that freed nothing.
            rounds += 1;
            if tries >= MAX_RECLAIM_RETRIES || rounds > 4 * MAX_RECLAIM_RETRIES {
                self.stat.inc(Stat::Oom);
                return None;
            }
            self.stat.inc(Stat::AllocstallNormal);
            let (freed, t1) = self.try_to_free_pages(t, cpu, 32 << order);
            t = t1;
            tries += if freed == 0 { 1 } else { 0 };
            if freed == 0 {
                // Flush per-CPU lists that might hold what we need.
                t = self.pa.drain_all_pages(t);
            }
            if let Some(a) = self.pa.alloc_pages(t, cpu, order, nid, mt, &mut self.stat) {
                return Some(self.alloc_folio_prep(a, cpu, order, nid));
            }
        }
    }

    /// prep_new_page on `cpu`, the allocating CPU: `prep_new_folio`, and
    /// whether the folio is still in this CPU's caches (hw/cache.rs: the
    /// stamp of their last touch its frames carry decides how fast it
    /// clears). Its clear or copy, which follows, touches every frame now.
    /// Returns the time of the tail pages' preparation and, for a cold
    /// folio, of the misses on its metadata (alloc_cold_ns, and for a large
    /// one alloc_cold_large_ns).
    #[inline(always)]
    pub(crate) fn prep_new_folio_on(&mut self, cpu: u32, pfn: Pfn, order: u32, nid: u32) -> Ns {
        let stamp = self.mem_map.get(pfn).cached;
        let warm = self.llc.on_alloc(cpu, stamp, 1 << order);
        let cache = &mut self.cpus[cpu as usize].cache;
        cache.alloc_warm = warm;
        let after_free = if std::mem::take(&mut cache.freed_since_alloc) { self.c.alloc_after_free } else { 0 };
        self.prep_new_folio(pfn, order, nid, self.llc.stamp(cpu));
        let cold = match (warm, order) {
            (true, _) => 0,
            (false, 0) => self.c.alloc_cold,
            (false, _) => self.c.alloc_cold + self.c.alloc_cold_large,
        };
        self.c.prep_tail * ((1 << order) - 1) + cold + after_free
    }

    /// Clearing a 2^order-page folio just allocated on `cpu` on node `nid`
    /// (clear_page, folio_zero_user), from `t`; returns when it is done. One
    /// clear call plus its bytes: at the cache bandwidth when the allocation
    /// found the folio still in the caches (hw/cache.rs), else at the
    /// node's, through the memory bandwidth the node's other users share
    /// (`mem_traffic`).
    #[inline(always)]
    pub(crate) fn clear_folio(&mut self, t: Ns, cpu: u32, nid: usize, order: u32) -> Ns {
        let n = &self.nodes[nid];
        let t = t + n.zero_call;
        if self.cpus[cpu as usize].cache.alloc_warm {
            return t + (self.c.zero_warm_4k << order);
        }
        let solo = (n.zero_4k - n.zero_call) << order;
        self.mem_traffic(t, cpu, nid, 4096 << order, solo)
    }

    /// `bytes` moved between `cpu` and node `nid`'s memory from `t`, in
    /// `solo` ns when nothing else uses it: through the node's bandwidth
    /// and, for a node of another socket, the link between them, each
    /// shared with every transfer in flight (sim/bw.rs). Returns the end.
    #[inline(always)]
    pub(crate) fn mem_traffic(&mut self, t: Ns, cpu: u32, nid: usize, bytes: u64, solo: Ns) -> Ns {
        let end = self.nodes[nid].bw.transfer(t, bytes, solo);
        let home = self.cpus[cpu as usize].node;
        match self.nodes[nid].home {
            Some(h) if h != home => end.max(self.nodes[home as usize].link.transfer(t, bytes, solo)),
            _ => end,
        }
    }

    /// copy_page of `pages` pages from node `snid` into node `dnid` on
    /// `cpu`, from `t`, in `solo` ns alone: the reads from one node and the
    /// writes to the other share their bandwidths (`mem_traffic`).
    pub(crate) fn copy_pages(&mut self, t: Ns, cpu: u32, snid: usize, dnid: usize, pages: u64, solo: Ns) -> Ns {
        let bytes = pages << 12;
        if snid == dnid {
            return self.mem_traffic(t, cpu, snid, 2 * bytes, solo);
        }
        self.mem_traffic(t, cpu, snid, bytes, solo).max(self.mem_traffic(t, cpu, dnid, bytes, solo))
    }

    /// prep_new_page: per-page state of a fresh folio (HEAD/TAIL, order on
    /// every page, the allocation's reference on the head), and `cached`,
    /// the stamp of the clear or copy about to fill it.
    pub(crate) fn prep_new_folio(&mut self, pfn: Pfn, order: u32, nid: u32, cached: CacheStamp) {
        for i in 0..(1u32 << order) {
            let p = self.mem_map.get_mut(pfn + i);
            p.flags = pg::ALLOCATED | if i == 0 { pg::HEAD } else { pg::TAIL };
            p.order = order as u8;
            p.nid = nid as u8;
            p.refcount = if i == 0 { 1 } else { 0 };
            p.mapcount = 0;
            p.mapping = 0;
            p.index = 0;
            p.private = 0;
            p.lru_prev = 0;
            p.lru_next = 0;
            p.alloc_epoch = p.alloc_epoch.wrapping_add(1);
            p.cached = cached;
        }
    }

    /// Make sure the page-table levels above `va` exist (for mremap).
    pub(crate) fn pte_alloc_pub(&mut self, t: Ns, cpu: u32, mm: u32, va: u64) -> Option<Ns> {
        self.pte_alloc(t, cpu, mm, va)
    }

    /// Make sure the page-table levels above `va` exist, allocating them.
    /// Inlined: the table is almost always there already (one lookup).
    #[inline(always)]
    fn pte_alloc(&mut self, t: Ns, cpu: u32, mm: u32, va: u64) -> Option<Ns> {
        if self.mms[mm as usize].pt.pte_tables.contains_key(&(va >> PMD_SHIFT)) {
            return Some(t);
        }
        self.pte_alloc_levels(t, cpu, mm, va)
    }

    /// `pte_alloc` when the PTE table is missing (and maybe more levels).
    #[inline(never)]
    fn pte_alloc_levels(&mut self, t: Ns, cpu: u32, mm: u32, va: u64) -> Option<Ns> {
        let (pud, pmd, pte) = self.mms[mm as usize].pt.missing(va);
        if !(pud || pmd || pte) {
            return Some(t);
        }
        let mut t = t;
        let nid = self.cpus[cpu as usize].node;
        for (need, level) in [(pud, 0), (pmd, 1), (pte, 2)] {
            if !need {
                continue;
            }
            let (pfn, t1) = self.alloc_folio(t, cpu, 0, nid, MigrateType::Unmovable)?;
            t = t1 + self.c.pgtable_alloc;
            self.mem_map.get_mut(pfn).flags |= pg::PGTABLE;
            self.stat.inc(Stat::NrPageTablePages);
            let pt = &mut self.mms[mm as usize].pt;
            match level {
                0 => {
                    pt.pud_tables.insert(va >> PGDIR_SHIFT, (pfn, 0));
                }
                1 => {
                    pt.pmd_tables.insert(va >> PUD_SHIFT, (pfn, 0));
                    pt.pud_tables.get_mut(&(va >> PGDIR_SHIFT)).unwrap().1 += 1;
                }
                _ => {
                    pt.pte_tables.insert(
                        va >> PMD_SHIFT,
                        Box::new(PteTable { ptes: [Pte::NONE; 512], nr_present: 0, pfn, ptl: Default::default() }),
                    );
                    pt.pmd_tables.get_mut(&(va >> PUD_SHIFT)).unwrap().1 += 1;
                }
            }
        }
        Some(t)
    }

    /// handle_mm_fault: the fault of `vmf` under the lock its way in took
    /// (mmap_lock, the VMA's lock), from `t`. Always inlined: the ways in
    /// that call it (classic, per-VMA) are the hot ones.
    #[inline(always)]
    pub(crate) fn handle_mm_fault(&mut self, t: Ns, vmf: &VmFault) -> (Fault, Ns) {
        self.handle_pte_fault(t + self.c.fault_base, vmf)
    }

    /// handle_pte_fault: the fault on one PTE, the VMA found and allowing
    /// the access. Always inlined: the fault paths that call it (classic,
    /// per-VMA, speculative) are the hot ones, and each gets one copy.
    #[inline(always)]
    pub(crate) fn handle_pte_fault(&mut self, t: Ns, vmf: &VmFault) -> (Fault, Ns) {
        let (cpu, mm, addr) = (vmf.cpu, vmf.mm, vmf.address);
        // pte_alloc, then the PTE: one table lookup when the table exists,
        // as it almost always does.
        let (pte, t) = match self.mms[mm as usize].pt.table(addr) {
            Some(tbl) => (tbl.ptes[pte_index(addr)], t),
            None => match self.pte_alloc_levels(t, cpu, mm, addr) {
                Some(t) => (self.mms[mm as usize].pt.pte(addr), t),
                None => return (Fault::Oom, t),
            },
        };
        let vmf = &VmFault { orig_pte: pte, ..*vmf };
        let (vma, write) = (vmf.vma, vmf.write());
        if pte.is_none() {
            return if vma.is_anon() {
                self.do_anonymous_page(t, vmf)
            } else if !write {
                self.do_read_fault(t, vmf)
            } else if !vma.is_shared() {
                self.do_cow_fault(t, vmf)
            } else {
                self.do_shared_fault(t, vmf)
            };
        }
        if pte.is_swap() {
            return self.do_swap_page(t, vmf);
        }
        if pte.present() && pte.0 & Pte::PROTNONE != 0 {
            // A NUMA hinting PTE (mm/numa_balancing.rs): the VMA allows the
            // access, the PTE does not.
            return self.do_numa_page(t, vmf);
        }
        if write && !pte.write() {
            return self.do_wp_page(t, vmf);
        }
        // Another CPU fixed it, or only young/dirty needed setting.
        self.stat.inc(Stat::FaultSpurious);
        let bits = Pte::YOUNG | if write { Pte::DIRTY } else { 0 };
        let tbl = self.mms[mm as usize].pt.table_mut(addr).unwrap();
        tbl.ptes[pte_index(addr)] = pte.with(bits);
        (Fault::Done, t)
    }

    /// Install `pte` at `addr` under the table's PTL, holding it for `hold`.
    /// Returns false (and installs nothing) if the slot is no longer `expect`.
    /// Always inlined: the anonymous write fault is its hot caller.
    #[inline(always)]
    pub(crate) fn set_pte_locked(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, expect: Pte, pte: Pte, hold: Ns) -> (bool, Ns) {
        // LUF v11: a fault installing a writable PTE flushes every deferral.
        let t = if pte.write() && self.knobs.luf.v11_hooks && self.luf_hooks_on() {
            self.luf_flush(t, cpu, self.cpus[cpu as usize].curr, crate::mm::luf::ForcedBy::FaultWritable)
        } else {
            t
        };
        let lc = &self.lc;
        let tbl = self.mms[mm as usize].pt.table_mut(addr).expect("pte table exists");
        let (_, end) = tbl.ptl.lock_span(t, cpu, hold, lc);
        let slot = &mut tbl.ptes[pte_index(addr)];
        if *slot != expect {
            return (false, end);
        }
        if expect.is_none() && !pte.is_none() {
            tbl.nr_present += 1;
        }
        *slot = pte;
        (true, end)
    }

    /// Account a new mapping of page `pfn` (rmap add). Small: always inlined.
    #[inline(always)]
    pub(crate) fn page_add_rmap(&mut self, mm: u32, pfn: Pfn, anon: bool) {
        let p = self.mem_map.get_mut(pfn);
        p.mapcount += 1;
        if p.mapcount == 1 {
            self.stat.inc(if anon { Stat::NrAnonPages } else { Stat::NrMapped });
        }
        let m = &mut self.mms[mm as usize];
        m.add_mm_counter(if anon { MmCounter::AnonPages } else { MmCounter::FilePages }, 1);
        m.update_hiwater_rss();
    }

    /// Account the removal of a mapping (folio_remove_rmap_pte).
    #[inline]
    pub(crate) fn page_remove_rmap(&mut self, mm: u32, pfn: Pfn) {
        let mut d = RmapDelta::default();
        self.page_remove_rmap_delta(pfn, &mut d);
        self.rmap_delta_apply(mm, &d);
    }

    /// `page_remove_rmap`'s mapcount drop, its counter changes summed in
    /// `d` for `rmap_delta_apply` (a zap's pages add them once per table).
    #[inline(always)]
    fn page_remove_rmap_delta(&mut self, pfn: Pfn, d: &mut RmapDelta) {
        if self.knobs.mutant != Mutant::LeakMapcount {
            d.remove(self.mem_map.get_mut(pfn));
        }
    }

    /// The counters of the mappings `page_remove_rmap_delta` removed: the
    /// mm's rss, NR_ANON_MAPPED and NR_FILE_MAPPED.
    #[inline(always)]
    fn rmap_delta_apply(&mut self, mm: u32, d: &RmapDelta) {
        let m = &mut self.mms[mm as usize];
        m.add_mm_counter(MmCounter::AnonPages, -d.anon);
        m.add_mm_counter(MmCounter::FilePages, -d.file);
        self.stat.add(Stat::NrAnonPages, -d.anon_unmapped);
        self.stat.add(Stat::NrMapped, -d.file_unmapped);
    }

    /// free_pgtables' unlinking of VMAs going away (`gone`, already out of
    /// mm's tree) from their anon_vma (unlink_anon_vmas); a file's i_mmap
    /// is not kept (the rmap walk visits every live mm's VMAs), so
    /// unlink_file_vma has nothing to undo. An anon_vma is freed with the last
    /// VMA that uses it, and that (put_anon_vma, with the chain's lock and
    /// tree work) is what an unmap pays for it: a split-off part, whose
    /// anon_vma the part left keeps, or a VMA never faulted anonymously,
    /// frees none. The time.
    pub(crate) fn unlink_vmas(&mut self, mm: u32, gone: &[Vma]) -> Ns {
        let mut freed: Vec<u32> = gone.iter().map(|v| v.anon_vma).filter(|&a| a != 0).collect();
        if freed.is_empty() {
            return 0;
        }
        freed.sort_unstable();
        freed.dedup();
        let left = &self.mms[mm as usize].vmas;
        freed.retain(|&a| !left.values().any(|v| v.anon_vma == a));
        freed.len() as Ns * self.c.unlink_anon_vma
    }

    /// The VMA's anon_vma, made on its first anonymous fault
    /// (vmf_anon_prepare -> __anon_vma_prepare: the anon_vma and its chain
    /// allocated and linked under the anon_vma's lock and the mm's
    /// page_table_lock): its id, and the time of making it (0 if it was
    /// there).
    pub(crate) fn anon_vma_prepare(&mut self, mm: u32, vma: &Vma) -> (u32, Ns) {
        if vma.anon_vma != 0 {
            return (vma.anon_vma, 0);
        }
        let id = self.next_anon_vma;
        self.next_anon_vma += 1;
        if let Some(v) = self.mms[mm as usize].vmas.get_mut(&vma.start) {
            v.anon_vma = id;
        }
        (id, self.c.anon_vma_prepare)
    }

    /// A fresh anonymous folio for `addr`, zeroed, charged, rmap'd as new.
    /// Always inlined (the anonymous write fault's allocation).
    #[inline(always)]
    pub(crate) fn alloc_anon_page(&mut self, t: Ns, vmf: &VmFault, zero: bool) -> Option<(Pfn, Ns)> {
        let (cpu, mm, vma, addr) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address);
        let nid = self.cpus[cpu as usize].node;
        let (pfn, t) = self.alloc_folio(t, cpu, 0, nid, MigrateType::Movable)?;
        let (av, prep) = self.anon_vma_prepare(mm, vma);
        let t = t + prep;
        // One frame lookup for the page's node and its anon state.
        let p = self.mem_map.get_mut(pfn);
        let pnid = p.nid as usize;
        p.flags |= pg::ANON | pg::SWAPBACKED | pg::ANON_EXCLUSIVE | pg::UPTODATE;
        p.mapping = av;
        p.index = vma.linear_page_index(addr);
        let t = if zero { self.clear_folio(t, cpu, pnid, 0) } else { t } + self.c.memcg;
        self.check_guest_write(pfn, 0, if zero { "cleared" } else { "copied into" });
        // The allocation reference becomes the mapping's reference.
        Some((pfn, t))
    }

    /// do_anonymous_page: a read maps the shared zero page; a write
    /// allocates and zeroes a page (path A of the large-folio series).
    fn do_anonymous_page(&mut self, t: Ns, vmf: &VmFault) -> (Fault, Ns) {
        let (cpu, mm, vma, addr) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address);
        if !vmf.write() {
            let pte = Pte::new(self.zero_pfn, Pte::SPECIAL | Pte::YOUNG | exec_bit(vma));
            let (ok, t) = self.set_pte_locked(t, cpu, mm, addr, Pte::NONE, pte, self.c.pte_set);
            if ok {
                self.stat.inc(Stat::FaultZeroPage);
                self.stat.inc(Stat::NrZeroPageMapped);
            }
            return (Fault::Done, t);
        }
        // Large folios (path A, docs/mechanisms/large-anon-folios.md#rules-it-implements); Err: order 0 from here.
        let t = match self.do_anonymous_large(t, vmf) {
            Ok(r) => return r,
            Err(t) => t,
        };
        let Some((pfn, t)) = self.alloc_anon_page(t, vmf, true) else {
            return (Fault::Oom, t);
        };
        let pte = Pte::new(pfn, Pte::WRITE | Pte::DIRTY | Pte::YOUNG | exec_bit(vma));
        let hold = self.c.pte_set + self.c.rmap;
        let (ok, t) = self.set_pte_locked(t, cpu, mm, addr, Pte::NONE, pte, hold);
        if !ok {
            // Lost a race: give the page back.
            let t = self.release_folios(t, cpu, &[pfn]);
            return (Fault::Done, t);
        }
        self.page_add_rmap(mm, pfn, true);
        self.stat.inc(Stat::FaultAnon);
        self.stat.inc(Stat::FaultAnonPages);
        self.stat.add(Stat::ZeroedBytes, 4096);
        self.mthp.path_a[0] += 1;
        let t = self.folio_add_lru(t, cpu, pfn);
        (Fault::Done, t)
    }

    /// do_swap_page: the page a swap entry names is read back into a fresh
    /// order-0 folio on the faulting CPU's node (a major fault: the task
    /// waits for the read) and mapped; the slot loses this PTE's
    /// reference. When no other PTE names the slot the folio is exclusive
    /// and, in a writable VMA, mapped writable (dirty for a write), as
    /// 6.12 maps a folio it did not expose to the swap cache; otherwise it
    /// is mapped read-only and a write copies it. There is no swap cache
    /// (mm/swapfile.rs): a swap-in never finds the page in memory.
    #[cold]
    #[inline(never)]
    fn do_swap_page(&mut self, t: Ns, vmf: &VmFault) -> (Fault, Ns) {
        let (cpu, mm, vma, addr, entry) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address, vmf.orig_pte);
        let slot = entry.swp_offset();
        let Some((pfn, t)) = self.alloc_anon_page(t, vmf, false) else {
            return (Fault::Oom, t);
        };
        let t = t + self.c.swap_read_4k;
        let exclusive = self.swap.count(slot) == 1;
        let mut bits = Pte::YOUNG | exec_bit(vma);
        if exclusive && vma.flags & vm::WRITE != 0 {
            bits |= Pte::WRITE | if vmf.write() { Pte::DIRTY } else { 0 };
        }
        let (ok, t) = self.set_pte_locked(t, cpu, mm, addr, entry, Pte::new(pfn, bits), self.c.pte_set + self.c.rmap);
        if !ok {
            // Another fault read it back first.
            let t = self.release_folios(t, cpu, &[pfn]);
            return (Fault::Done, t);
        }
        if !exclusive {
            self.mem_map.get_mut(pfn).flags &= !pg::ANON_EXCLUSIVE;
        }
        self.swap_entry_free(mm, slot);
        self.stat.inc(Stat::Pgmajfault);
        self.stat.inc(Stat::Pswpin);
        self.page_add_rmap(mm, pfn, true);
        let t = self.folio_add_lru(t, cpu, pfn);
        (Fault::Done, t)
    }

    /// A swap PTE of `mm` naming `slot` is gone (a swap-in, a zap):
    /// swap_free, and the mm's and the device's counts.
    pub(crate) fn swap_entry_free(&mut self, mm: u32, slot: u32) {
        self.swap.swap_free(slot);
        self.mms[mm as usize].add_mm_counter(MmCounter::SwapEnts, -1);
        self.stat.v[Stat::SwapUsed as usize] = self.swap.inuse as i64;
    }

    /// The page-cache folio backing file VMA `vma` at `addr`.
    fn file_folio(&mut self, t: Ns, vmf: &VmFault) -> Option<(Pfn, Ns)> {
        let (cpu, vma, addr) = (vmf.cpu, vmf.vma, vmf.address);
        let ino = vma.file - 1;
        let idx = vma.linear_page_index(addr);
        let (hit, t) = self.filemap_get_folio(t, cpu, ino, idx)?;
        let pfn = match hit {
            super::filemap::CacheHit::Hit(p) | super::filemap::CacheHit::Filled(p) => p,
        };
        Some((pfn, t))
    }

    fn beyond_eof(&self, vma: &Vma, addr: u64) -> bool {
        let ino = &self.inodes[(vma.file - 1) as usize];
        vma.linear_page_index(addr) >= ino.size.div_ceil(4096)
    }

    /// do_read_fault: map the cached page read-only, plus up to
    /// fault_around_bytes of neighbours already in the cache (do_fault_around).
    fn do_read_fault(&mut self, t: Ns, vmf: &VmFault) -> (Fault, Ns) {
        let (cpu, mm, vma, addr) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address);
        if self.beyond_eof(vma, addr) {
            return (Fault::Segv, t); // SIGBUS in Linux
        }
        self.stat.inc(Stat::FaultFileRead);
        let mut t = t;
        let around = self.knobs.fault_around_bytes;
        if around > 4096 {
            t = self.do_fault_around(t, vmf, around);
            if !self.mms[mm as usize].pt.pte(addr).is_none() {
                return (Fault::Done, t);
            }
        }
        let Some((pfn, t)) = self.file_folio(t, vmf) else {
            return (Fault::Oom, t);
        };
        let pte = Pte::new(pfn, Pte::YOUNG | exec_bit(vma));
        let (ok, t) = self.set_pte_locked(t, cpu, mm, addr, Pte::NONE, pte, self.c.pte_set + self.c.rmap);
        if ok {
            self.mem_map.get_mut(pfn).refcount += 1;
            self.page_add_rmap(mm, pfn, false);
        }
        (Fault::Done, t)
    }

    /// filemap_map_pages over the window around `addr`: maps cached,
    /// uptodate pages into empty PTEs of the same table, without I/O. The
    /// window starts at the fault_around_bytes-aligned address below `addr`,
    /// or at the VMA's or the PTE table's start if that is later, and runs
    /// fault_around_bytes from there, to the VMA's or the table's end at
    /// most (do_fault_around's from_pte and to_pte: a VMA that starts inside
    /// an aligned window gets a whole window from its start).
    fn do_fault_around(&mut self, t: Ns, vmf: &VmFault, bytes: u64) -> Ns {
        let (cpu, mm, vma, addr) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address);
        let start = (addr & !(bytes - 1)).max(vma.start).max(addr & !((1 << PMD_SHIFT) - 1));
        let end = (start + bytes).min(vma.end).min((addr | ((1 << PMD_SHIFT) - 1)) + 1);
        let ino = (vma.file - 1) as usize;
        let eof = self.inodes[ino].size.div_ceil(4096);
        let mut mapped = Vec::new();
        let mut va = start;
        while va < end {
            let idx = vma.linear_page_index(va);
            if idx < eof && self.mms[mm as usize].pt.pte(va).is_none() {
                if let Some(&pfn) = self.inodes[ino].pages.get(&idx) {
                    if self.mem_map.get(pfn).flags & pg::UPTODATE != 0 {
                        mapped.push((va, pfn));
                    }
                }
            }
            va += 4096;
        }
        if mapped.is_empty() {
            return t + self.c.pc_lookup;
        }
        // One lookup finds the window's first folio (xas_find); each next
        // one is a step of the same walk, priced as read()'s batch walk
        // per folio (pagecache_read_ns: filemap_get_read_batch's step and
        // reference, the nearest measured analogue of next_uptodate_folio);
        // every page mapped sets its PTE and rmap.
        let lc = self.lc;
        let n = mapped.len() as Ns;
        let hold = self.c.pc_lookup + self.c.pc_read * (n - 1) + (self.c.pte_set + self.c.rmap) * n;
        let tbl = self.mms[mm as usize].pt.table_mut(addr).unwrap();
        let (s, _) = tbl.ptl.lock_span(t, cpu, hold, &lc);
        let x = exec_bit(vma);
        for &(va, pfn) in &mapped {
            let tbl = self.mms[mm as usize].pt.table_mut(addr).unwrap();
            tbl.ptes[pte_index(va)] = Pte::new(pfn, x);
            tbl.nr_present += 1;
            self.mem_map.get_mut(pfn).refcount += 1;
            self.page_add_rmap(mm, pfn, false);
        }
        let n = mapped.iter().filter(|(va, _)| *va != addr).count();
        self.stat.add(Stat::FaultAroundPages, n as i64);
        s + hold
    }

    /// do_cow_fault: write to a private file mapping with no PTE: copy the
    /// cached page into a new anonymous page.
    fn do_cow_fault(&mut self, t: Ns, vmf: &VmFault) -> (Fault, Ns) {
        let (cpu, mm, vma, addr) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address);
        if self.beyond_eof(vma, addr) {
            return (Fault::Segv, t);
        }
        let Some((src, t)) = self.file_folio(t, vmf) else {
            return (Fault::Oom, t);
        };
        let Some((pfn, t)) = self.alloc_anon_page(t, vmf, false) else {
            return (Fault::Oom, t);
        };
        let (snid, dnid) = (self.mem_map.get(src).nid as usize, self.mem_map.get(pfn).nid as usize);
        let t = self.copy_pages(t, cpu, snid, dnid, 1, self.nodes[snid].copy_4k);
        self.check_guest_write(pfn, 0, "copied into");
        self.stat.inc(Stat::FaultCow);
        let pte = Pte::new(pfn, Pte::WRITE | Pte::DIRTY | Pte::YOUNG | exec_bit(vma));
        let (ok, t) = self.set_pte_locked(t, cpu, mm, addr, Pte::NONE, pte, self.c.pte_set + self.c.rmap);
        if !ok {
            let t = self.release_folios(t, cpu, &[pfn]);
            return (Fault::Done, t);
        }
        self.page_add_rmap(mm, pfn, true);
        let t = self.folio_add_lru(t, cpu, pfn);
        (Fault::Done, t)
    }

    /// do_shared_fault: write to a shared file mapping with no PTE: map the
    /// cached page writable and dirty it (page_mkwrite on a disk fs).
    fn do_shared_fault(&mut self, t: Ns, vmf: &VmFault) -> (Fault, Ns) {
        let (cpu, mm, vma, addr) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address);
        if self.beyond_eof(vma, addr) {
            return (Fault::Segv, t);
        }
        let Some((pfn, mut t)) = self.file_folio(t, vmf) else {
            return (Fault::Oom, t);
        };
        if self.inodes[(vma.file - 1) as usize].fs == FsKind::Disk {
            t += self.c.page_mkwrite;
        }
        self.stat.inc(Stat::FaultFileShared);
        let pte = Pte::new(pfn, Pte::WRITE | Pte::DIRTY | Pte::YOUNG | exec_bit(vma));
        let (ok, t) = self.set_pte_locked(t, cpu, mm, addr, Pte::NONE, pte, self.c.pte_set + self.c.rmap);
        if ok {
            self.mem_map.get_mut(pfn).refcount += 1;
            self.page_add_rmap(mm, pfn, false);
            self.folio_mark_dirty(pfn);
            let ino = (vma.file - 1) as usize;
            let idx = vma.linear_page_index(addr);
            self.inodes[ino].data_pages = self.inodes[ino].data_pages.max(idx + 1);
        }
        (Fault::Done, t)
    }

    /// do_wp_page: a write to a present, read-only PTE.
    fn do_wp_page(&mut self, t: Ns, vmf: &VmFault) -> (Fault, Ns) {
        let (cpu, mm, vma, addr, pte) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address, vmf.orig_pte);
        let pte = if pte.0 & Pte::HUGE != 0 {
            // A write to a read-only PMD-mapped THP: split the PMD mapping
            // and continue at PTE level (do_huge_pmd_wp_page's fallback).
            self.split_huge_pmd_at(mm, addr);
            pte.without(Pte::HUGE)
        } else {
            pte
        };
        let vmf = &VmFault { orig_pte: pte, ..*vmf };
        // LUF v10: a write fault on a folio gives up every deferral first
        // (the folio may be one a stale entry still shows).
        let t = if !pte.special() && self.luf_hooks_on() {
            self.luf_flush(t, cpu, self.cpus[cpu as usize].curr, crate::mm::luf::ForcedBy::WpFault)
        } else {
            t
        };
        if pte.special() {
            // The zero page: copy = allocate a zeroed page (wp_page_copy);
            // large under the RFC's patch 15 (path B).
            let t = match self.do_anonymous_large(t, vmf) {
                Ok(r) => return r,
                Err(t) => t,
            };
            self.mthp.path_b[0] += 1;
            let Some((pfn, t)) = self.alloc_anon_page(t, vmf, true) else {
                return (Fault::Oom, t);
            };
            return self.wp_replace(t, vmf, pfn, None);
        }
        let old = pte.pfn();
        let flags = self.mem_map.get(old).flags;
        if vma.is_shared() {
            // wp_page_shared: page_mkwrite, then make it writable and dirty.
            let mut t = t;
            if vma.file != 0 && self.inodes[(vma.file - 1) as usize].fs == FsKind::Disk {
                t += self.c.page_mkwrite;
            }
            let new = pte.with(Pte::WRITE | Pte::DIRTY | Pte::YOUNG);
            let (ok, t) = self.set_pte_locked(t, cpu, mm, addr, pte, new, self.c.pte_set);
            if ok {
                // A permission upgrade needs no flush: a stale read-only
                // entry only causes a spurious fault that re-walks.
                self.folio_mark_dirty(old);
                self.stat.inc(Stat::FaultFileShared);
            }
            return (Fault::Done, t);
        }
        if flags & pg::ANON != 0 {
            let head = self.mem_map.folio_head(old);
            if self.mem_map.get(head).order > 0 && self.anon_paths.reuse_range {
                // RFC patches 9-10: reuse the whole contiguous run (path D).
                if let Some(r) = self.wp_reuse_range(t, vmf) {
                    return r;
                }
            }
            // wp_can_reuse_anon_folio: exclusive, or the only reference left.
            let p = self.mem_map.get(old);
            let mut t = t;
            if self.mem_map.get(head).refcount > p.mapcount {
                // A per-CPU LRU batch may hold the extra reference: drain it, as the kernel does.
                t = self.lru_add_drain_cpu(t, cpu);
            }
            let p = self.mem_map.get(old);
            // 6.12 never reuses a non-exclusive page of a large folio
            // (wp_can_reuse_anon_folio); 6.3 (and the RFC) test the refcount.
            let large_no_reuse = self.mem_map.get(head).order > 0 && !self.anon_paths.reuse_large_by_refcount;
            let only_ref = !large_no_reuse && p.mapcount == 1 && self.mem_map.get(head).refcount == 1;
            let exclusive = p.flags & pg::ANON_EXCLUSIVE != 0 && self.knobs.mutant != Mutant::MthpCowExclusive;
            if exclusive || only_ref {
                self.mem_map.get_mut(old).flags |= pg::ANON_EXCLUSIVE;
                let new = pte.with(Pte::WRITE | Pte::DIRTY | Pte::YOUNG);
                let (ok, t) = self.set_pte_locked(t, cpu, mm, addr, pte, new, self.c.pte_set);
                if ok {
                    self.stat.inc(Stat::Pgreuse);
                    self.mthp.path_d_pages[0] += 1;
                }
                return (Fault::Done, t);
            }
            // Path C (RFC patches 11-14): a large copy where the block allows.
            if self.mem_map.get(head).order >= 2 && self.anon_paths.cow_copy_large {
                if let Some(r) = self.wp_page_copy_large(t, vmf) {
                    return r;
                }
            }
            let Some((pfn, t)) = self.alloc_anon_page(t, vmf, false) else {
                return (Fault::Oom, t);
            };
            let (snid, dnid) = (self.mem_map.get(old).nid as usize, self.mem_map.get(pfn).nid as usize);
            let t = self.copy_pages(t, vmf.cpu, snid, dnid, 1, self.nodes[snid].copy_4k);
            self.check_guest_write(pfn, 0, "copied into");
            return self.wp_replace(t, vmf, pfn, Some(old));
        }
        // A file page in a private mapping: copy it.
        let Some((pfn, t)) = self.alloc_anon_page(t, vmf, false) else {
            return (Fault::Oom, t);
        };
        let (snid, dnid) = (self.mem_map.get(old).nid as usize, self.mem_map.get(pfn).nid as usize);
        let t = self.copy_pages(t, vmf.cpu, snid, dnid, 1, self.nodes[snid].copy_4k);
        self.check_guest_write(pfn, 0, "copied into");
        self.wp_replace(t, vmf, pfn, Some(old))
    }

    /// Second half of wp_page_copy: swap the PTE to the new page, flush the
    /// old translation, drop the old page's mapping.
    fn wp_replace(&mut self, t: Ns, vmf: &VmFault, pfn: Pfn, old: Option<Pfn>) -> (Fault, Ns) {
        let (cpu, mm, vma, addr, old_pte) = (vmf.cpu, vmf.mm, vmf.vma, vmf.address, vmf.orig_pte);
        let pte = Pte::new(pfn, Pte::WRITE | Pte::DIRTY | Pte::YOUNG | exec_bit(vma));
        if let Some(o) = old {
            // I-12 (docs/mechanisms/large-anon-folios.md#rules-it-implements): never CoW-replace a page still marked exclusive.
            let f = self.mem_map.get(o).flags;
            if self.check.enabled && f & pg::ANON != 0 && f & pg::ANON_EXCLUSIVE != 0 {
                self.check.report(format!("mm {mm} va {addr:#x}: CoW copy replaces page {o}, which is still AnonExclusive (I-12)"));
            }
        }
        if old_pte.0 & Pte::HUGE != 0 {
            self.split_huge_pmd_at(mm, addr);
        }
        let old_pte = self.mms[mm as usize].pt.pte(addr);
        let (ok, t) = self.set_pte_locked(t, cpu, mm, addr, old_pte, pte, self.c.pte_set + 2 * self.c.rmap);
        if !ok {
            let t = self.release_folios(t, cpu, &[pfn]);
            return (Fault::Done, t);
        }
        // ptep_clear_flush: the old translation must leave every TLB before
        // the old page can be freed or written by someone else.
        let t = self.flush_tlb_page(t, cpu, mm, addr);
        self.page_add_rmap(mm, pfn, true);
        self.stat.inc(Stat::FaultCow);
        let mut t = self.folio_add_lru(t, cpu, pfn);
        match old {
            Some(o) => {
                t = self.folio_remove_rmap_ptes(t, cpu, mm, o, 1, true);
                let head = self.mem_map.folio_head(o);
                t = self.release_folios(t, cpu, &[head]);
            }
            None => self.stat.add(Stat::NrZeroPageMapped, -1),
        }
        (Fault::Done, t)
    }

    /// zap_pte_range over [start, end) of `mm`: clear PTEs, drop rmap and
    /// rss, and queue the pages on the gather for freeing after the flush.
    pub fn zap_page_range(&mut self, t: Ns, cpu: u32, mm: u32, start: u64, end: u64, tlb: &mut MmuGather) -> Ns {
        let mut t = t + self.mms[mm as usize].mmu_notifier_invalidate(start, end, t);
        let none = self.mms[mm as usize].pt.none_entries(start, end);
        tlb.none_entries += none;
        t += self.c.pgtable_none * none;
        let mut va = start;
        let lc = self.lc;
        while va < end {
            let tbl_end = ((va >> PMD_SHIFT) + 1) << PMD_SHIFT;
            let stop = tbl_end.min(end);
            // zap_pte_range flushes reclaim's batched unmaps of this mm
            // first, whenever the table exists, even if its PTEs are all
            // none by now (they may be none because reclaim cleared them).
            let m = &self.mms[mm as usize];
            let skip_empty = self.knobs.mutant == Mutant::Luf(crate::kernel::knobs::LufMutant::ZapSkipsEmptyTable)
                && m.pt.table(va).is_some_and(|tb| tb.nr_present == 0);
            if m.tlb_batched_pending() && m.pt.table(va).is_some() && !skip_empty {
                t = self.flush_tlb_batched_pending(t, cpu, mm);
            }
            let Some(tbl) = self.mms[mm as usize].pt.table_mut(va) else {
                va = stop;
                continue;
            };
            if tbl.nr_present == 0 {
                va = stop;
                continue;
            }
            // Clear under the PTL, then account outside the borrow.
            let mut cleared = std::mem::take(&mut tlb.scratch);
            cleared.clear();
            // Batch zap (RFC v2 patch 17): consecutive PTEs mapping
            // consecutive pages of one large anon folio are one rmap call.
            // The runs are counted as the PTEs are cleared (one pass).
            let batch = self.anon_paths.batch_zap;
            let mut runs = 0u64;
            // The page of the previous PTE, unless that was special.
            let mut last: Option<Pfn> = None;
            // PTEs of a PMD-mapped THP (one entry to clear per PMD), of
            // PTE-mapped large folios (per-page rmap work) and of page-cache
            // folios (zap_file_pte_ns).
            let (mut huge, mut large, mut file) = (0u64, 0u64, 0u64);
            // Swap entries cleared (free_swap_and_cache), counted below.
            let mut swapped = 0u16;
            // Present PTEs cleared, and the first and last one's address.
            let (mut nr, mut lo, mut hi) = (0u16, 0u64, 0u64);
            // The rmap and the freeing, in PTE order (tlb.pages keeps it):
            // the table's leading order-0 pages, and zero-page PTEs, are
            // done as their PTEs are cleared (each page's work is its own,
            // and it takes no time: the PTL's hold below counts it); from
            // the first PTE that needs more (a large folio, a dirty file
            // page), every PTE goes to `cleared` for the loop after the
            // lock. The counters of order-0 and order-1 folios' unmaps are
            // added after the table (nothing below reads them).
            let mut delta = RmapDelta::default();
            let leak = self.knobs.mutant == Mutant::LeakMapcount;
            let mut zero_unmapped = 0;
            let mut a = va;
            while a < stop {
                let slot = &mut tbl.ptes[pte_index(a)];
                if slot.is_swap() {
                    if self.knobs.mutant != Mutant::SwapZapKeepsSlot {
                        self.swap.swap_free(slot.swp_offset());
                    }
                    *slot = Pte::NONE;
                    swapped += 1;
                } else if slot.present() {
                    let pte = *slot;
                    *slot = Pte::NONE;
                    if nr == 0 {
                        lo = a;
                    }
                    (nr, hi) = (nr + 1, a);
                    if pte.special() {
                        last = None;
                        runs += 1;
                        if cleared.is_empty() {
                            zero_unmapped += 1;
                        } else {
                            cleared.push((a, pte));
                        }
                    } else {
                        // The run goes on if this is the next page of the
                        // same folio (mem_map's orders do not change in
                        // this loop).
                        let pfn = pte.pfn();
                        let p = self.mem_map.get_mut(pfn);
                        let o = p.order as u32;
                        if pte.0 & Pte::HUGE != 0 {
                            huge += 1;
                        } else if o != 0 {
                            large += 1;
                        }
                        if p.flags & pg::ANON == 0 {
                            file += 1;
                        }
                        if cleared.is_empty() && o == 0 && !(pte.dirty() && p.flags & pg::ANON == 0) {
                            if !leak {
                                delta.remove(p);
                            }
                            tlb.pages.push(pfn); // one reference per PTE
                        } else {
                            cleared.push((a, pte));
                        }
                        // An order-0 page heads its own folio, which l
                        // (below it) is not in: its head is read alone.
                        let cont =
                            batch && last.is_some_and(|l| l + 1 == pfn && o != 0 && self.mem_map.folio_head(l) == pfn & !((1u32 << o) - 1));
                        if !cont {
                            runs += 1;
                        }
                        last = Some(pfn);
                    }
                }
                a += 4096;
            }
            tbl.nr_present -= nr + swapped;
            // The gathered range is a min/max over the cleared addresses,
            // which ascend: the first and the last set it.
            if nr > 0 {
                tlb.add_range(lo);
                tlb.add_range(hi);
            }
            // zap_huge_pmd clears one entry per PMD; folio_remove_rmap_ptes
            // drops every page's mapcount of a PTE-mapped large folio.
            let entries = nr as u64 - huge + huge.div_ceil(512);
            let hold = self.c.pte_clear * entries + self.c.rmap * runs + self.c.rmap_page * large + self.c.zap_file_pte * file;
            t = tbl.ptl.lock_for(t, cpu, hold, &lc);
            if swapped > 0 {
                self.mms[mm as usize].add_mm_counter(MmCounter::SwapEnts, -(swapped as i64));
                self.stat.v[Stat::SwapUsed as usize] = self.swap.inuse as i64;
            }
            self.stat.add(Stat::NrZeroPageMapped, -zero_unmapped);
            let mut i = 0;
            while i < cleared.len() {
                let (a, pte) = cleared[i];
                if pte.special() {
                    self.stat.add(Stat::NrZeroPageMapped, -1);
                    i += 1;
                    continue;
                }
                let pfn = pte.pfn();
                let p = self.mem_map.get(pfn);
                let (o, mut flags) = (p.order, p.flags);
                let head = pfn & !((1u32 << o) - 1);
                let horder = if head == pfn { o } else { self.mem_map.get(head).order };
                let mut n = 1;
                if horder > 0 {
                    let fend = head + (1 << horder);
                    while i + n < cleared.len() {
                        let (a2, p2) = cleared[i + n];
                        if !p2.present() || p2.special() || p2.pfn() != pfn + n as Pfn || a2 != a + 4096 * n as u64 || p2.pfn() >= fend {
                            break;
                        }
                        n += 1;
                    }
                }
                if pte.0 & Pte::HUGE != 0 && n < 512 {
                    self.split_huge_pmd_at(mm, a);
                    flags = self.mem_map.get(pfn).flags;
                }
                if pte.dirty() && flags & pg::ANON == 0 {
                    self.folio_mark_dirty(pfn);
                }
                if horder < 2 {
                    // What folio_remove_rmap_ptes does for a folio that can
                    // never be deferred-split, batched or not.
                    for j in 0..n as Pfn {
                        self.page_remove_rmap_delta(pfn + j, &mut delta);
                    }
                } else if batch {
                    t = self.folio_remove_rmap_ptes(t, cpu, mm, pfn, n as u32, true);
                } else {
                    for j in 0..n as Pfn {
                        t = self.folio_remove_rmap_ptes(t, cpu, mm, pfn + j, 1, false);
                    }
                }
                for _ in 0..n {
                    tlb.pages.push(head); // one reference per PTE
                }
                i += n;
            }
            self.rmap_delta_apply(mm, &delta);
            tlb.scratch = cleared;
            va = stop;
        }
        t
    }

    /// What free_pgtables' walk (free_pgd_range, VMA by VMA, before it
    /// frees anything) takes to step over the empty entries of the VMAs
    /// `tlb` zapped: the same entries the zap's walk counted. Charged
    /// apart from `free_pgtables`, which frees by a wider range at exit
    /// (every table of the mm) than the walk covers.
    pub fn free_pgtables_walk(&self, tlb: &MmuGather) -> Ns {
        self.c.pgtable_none * tlb.none_entries
    }

    /// free_pgtables: free PTE tables in [start, end) that no VMA uses any
    /// more (floor/ceiling rule: only whole 2 MiB ranges free of VMAs), and
    /// upper levels that became empty. The frames are freed after the flush.
    pub fn free_pgtables(&mut self, mm: u32, start: u64, end: u64, tlb: &mut MmuGather) {
        let first = start >> PMD_SHIFT;
        let last = (end - 1) >> PMD_SHIFT;
        let keys: Vec<u64> = if last - first < 4096 {
            (first..=last).filter(|k| self.mms[mm as usize].pt.pte_tables.contains_key(k)).collect()
        } else {
            let mut v: Vec<u64> = self.mms[mm as usize].pt.pte_tables.keys().copied().filter(|&k| k >= first && k <= last).collect();
            v.sort_unstable();
            v
        };
        for k in keys {
            let lo = k << PMD_SHIFT;
            let hi = lo + (1 << PMD_SHIFT);
            let m = &mut self.mms[mm as usize];
            if !m.range_free(lo, hi) || m.pt.pte_tables[&k].nr_present != 0 {
                continue;
            }
            let tbl = m.pt.pte_tables.remove(&k).unwrap();
            tlb.tables.push(tbl.pfn);
            let pmdk = lo >> PUD_SHIFT;
            let e = m.pt.pmd_tables.get_mut(&pmdk).unwrap();
            e.1 -= 1;
            if e.1 == 0 && m.range_free(pmdk << PUD_SHIFT, (pmdk + 1) << PUD_SHIFT) {
                let (pfn, _) = m.pt.pmd_tables.remove(&pmdk).unwrap();
                tlb.tables.push(pfn);
                let pudk = lo >> PGDIR_SHIFT;
                let e = m.pt.pud_tables.get_mut(&pudk).unwrap();
                e.1 -= 1;
                if e.1 == 0 && m.range_free(pudk << PGDIR_SHIFT, (pudk + 1) << PGDIR_SHIFT) {
                    let (pfn, _) = m.pt.pud_tables.remove(&pudk).unwrap();
                    tlb.tables.push(pfn);
                }
            }
        }
    }
}

/// Counter changes of unmapped pages (`Kernel::page_remove_rmap_delta`),
/// added together once.
#[derive(Default)]
struct RmapDelta {
    anon: i64,
    file: i64,
    /// Pages whose last mapping went, anonymous and file.
    anon_unmapped: i64,
    file_unmapped: i64,
}

impl RmapDelta {
    /// A mapping of frame `p` goes: its mapcount drops, and the counters
    /// it moves are summed here.
    #[inline(always)]
    fn remove(&mut self, p: &mut Page) {
        p.mapcount -= 1;
        let last = (p.mapcount == 0) as i64;
        if p.flags & pg::ANON != 0 {
            self.anon += 1;
            self.anon_unmapped += last;
        } else {
            self.file += 1;
            self.file_unmapped += last;
        }
    }
}

/// Does the VMA allow this access (the check in lock_mm_and_find_vma / access_error)?
#[inline]
pub fn access_permitted(vma: &Vma, kind: Access) -> bool {
    match kind {
        Access::Load => vma.flags & vm::READ != 0,
        Access::Store => vma.flags & vm::WRITE != 0,
        Access::Ifetch => vma.flags & vm::EXEC != 0,
    }
}

#[inline]
pub(crate) fn exec_bit(vma: &Vma) -> u64 {
    if vma.flags & vm::EXEC != 0 {
        Pte::EXEC
    } else {
        0
    }
}
