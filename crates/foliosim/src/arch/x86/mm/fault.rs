//! A user access as the CPU runs it, and its page-fault entry
//! (arch/x86/mm/fault.c: exc_page_fault, do_user_addr_fault): the TLB
//! lookup, on a miss the hardware's page walk and TLB fill (hw/mmu.rs:
//! walk_pte, tlb_fill, with the entry size the mm chooses,
//! mm/huge_memory.rs: tlb_fill_size), the fault when the walk finds no
//! usable PTE, and the retried access after it. A user loop over many
//! addresses (`Op::AccessRange`) runs its TLB hits in the MMU's tight loop
//! (hw/mmu.rs: tlb_hit_run) and the rest here.
//!
//! The fault takes its lock here, as do_user_addr_fault does: the way in
//! the fault-locking policy chooses (per-VMA lock, speculative), falling
//! back to mmap_lock for read (`lock_mmap`), then handle_mm_fault
//! (mm/memory.rs) on one `PageFault`/`VmFault` context. The parts of a
//! fault that run in later steps of its task (the time model in
//! docs/DEVELOPING.md) re-enter here: `fault_continue`, and the release
//! of the lock a finished fault holds, `fault_unlock_finish`.

use crate::hw::mmu;
use crate::hw::tlb::{size, TlbEntry, TlbLookup};
use crate::kernel::task::LockWait;
use crate::kernel::Kernel;
use crate::mm::fault_lock::{FastFault, FaultLockCtx, FaultPath};
use crate::mm::memory::Fault;
use crate::mm::mm_types_task::{fault_flag, FaultRedo, FaultUnlock, PageFault, PendingUnlock};
use crate::mm::pgtable::Pte;
use crate::mm::vmstat::{Entry, Stat};
use crate::sim::Ns;
use crate::workload::{errno, Access, Op, Ret};

/// The most accesses of a user loop one step runs, so that other CPUs
/// interleave.
const MAX_RANGE_STEP: u64 = 4096;

impl Kernel {
    /// One user access: TLB lookup, page walk on a miss, fault if the walk
    /// finds no usable PTE, then retry.
    pub fn user_access(&mut self, tid: u32, addr: u64, kind: Access) -> Ret {
        let (mm, cpu) = {
            let tk = &self.tasks[tid as usize];
            (tk.mm, tk.cpu)
        };
        if self.cpus[cpu as usize].tlbstate.loaded_mm != mm {
            self.switch_mm_irqs_off(cpu, mm);
        }
        if !self.cpus[cpu as usize].landing.is_empty() {
            self.tlb_apply_landed(cpu, self.tasks[tid as usize].clock);
        }
        let lk = self.cpus[cpu as usize].tlb.lookup(mm, addr & !4095, kind);
        self.user_access_after(tid, mm, cpu, addr, kind, lk)
    }

    /// The rest of a user access whose TLB lookup gave `lk` (`mm` and `cpu`:
    /// the task's, as the caller read them).
    #[inline(always)]
    fn user_access_after(&mut self, tid: u32, mm: u32, cpu: u32, addr: u64, kind: Access, lk: TlbLookup) -> Ret {
        let va = addr & !4095;
        let mut cost = self.c.user_access;
        self.stat.inc(Stat::TlbAccesses);
        let missed = matches!(lk, TlbLookup::Miss);
        let stlb = matches!(lk, TlbLookup::StlbHit(_));
        let hit = match lk {
            TlbLookup::L1Hit(e) => Some(e),
            TlbLookup::StlbHit(e) => {
                self.stat.inc(Stat::StlbHits);
                cost += self.c.stlb_hit;
                Some(e)
            }
            TlbLookup::Miss => None,
        };
        if let Some(e) = hit {
            if self.check.enabled {
                self.check_tlb_hit(cpu, mm, va, &e, kind);
            }
            if kind != Access::Store || (e.writable() && e.dirty()) {
                let tk = &mut self.tasks[tid as usize];
                tk.clock += cost;
                tk.user_ns += cost;
                return Ret::Val(0);
            }
            // Store through a read-only or clean entry: the CPU re-walks.
        } else {
            self.stat.inc(match kind {
                Access::Load => Stat::DtlbLoadMisses,
                Access::Store => Stat::DtlbStoreMisses,
                Access::Ifetch => Stat::ItlbMisses,
            });
        }
        // A walk into the PTE table this CPU walked last finds its lines in
        // cache (hw/cache.rs).
        cost += if self.cpus[cpu as usize].cache.walk(crate::hw::cache::walk_key(mm, va)) { self.c.walk_cached } else { self.c.walk };
        if self.tasks[tid as usize].fault_retry.is_some() {
            self.fault_retried(tid, va, kind, missed, stlb, &mut cost);
        }
        {
            let tk = &mut self.tasks[tid as usize];
            tk.clock += cost;
            tk.user_ns += cost;
        }
        for _ in 0..3 {
            if let Some(pte) = mmu::walk_pte(self.mms[mm as usize].pt.pte_slot_mut(va), kind) {
                if kind == Access::Store && self.check.enabled && !self.check.data_ver.is_empty() {
                    let id = self.page_ident(pte.pfn());
                    self.check.bump_data(id);
                }
                if let Some(h) = self.host.as_mut() {
                    let now = self.tasks[tid as usize].clock;
                    let c = h.walk(cpu, pte.pfn(), now, &mut self.stat);
                    self.kvm_remote_flush();
                    let Some(h) = self.host.as_ref() else { unreachable!() };
                    // The zero page is kernel image memory, never handed out.
                    if self.check.enabled && !pte.special() {
                        self.check.on_guest_use(h, pte.pfn(), 1, "accessed");
                    }
                    let tk = &mut self.tasks[tid as usize];
                    tk.clock += c;
                    tk.user_ns += c;
                }
                // The entry's epoch is the checker's alone (its stale-entry
                // test): without the checker the frame's struct page, a
                // cache miss on a walk into a large table, is not read.
                let checked = self.check.enabled;
                let epoch = if checked { self.mem_map.get(pte.pfn()).alloc_epoch } else { 0 };
                // Large entries: PMD THP, contpte, HPA; the mm decides the
                // size (mm/huge_memory.rs).
                if pte.0 & Pte::HUGE != 0 || self.prof.tlb.contpte || self.prof.tlb.coalesce_order != 0 {
                    let sz = self.tlb_fill_size(mm, va, pte);
                    let epoch = if sz > 0 && checked { self.mem_map.get(pte.pfn() & !((1u32 << sz) - 1)).alloc_epoch } else { epoch };
                    mmu::tlb_fill(&mut self.cpus[cpu as usize].tlb, kind, mm, va, pte, sz, epoch, missed);
                } else {
                    // The common 4 KiB fill on its own path: a constant size.
                    mmu::tlb_fill(&mut self.cpus[cpu as usize].tlb, kind, mm, va, pte, size::PTE, epoch, missed);
                }
                return Ret::Val(0);
            }
            match self.exc_page_fault(tid, addr, kind) {
                Fault::Done => {
                    // The access is retried: a walk of the PTE the fault
                    // just wrote, its line in cache.
                    let tk = &mut self.tasks[tid as usize];
                    tk.clock += self.c.walk_cached;
                    tk.user_ns += self.c.walk_cached;
                    continue;
                }
                Fault::Segv => return Ret::Err(errno::EFAULT),
                Fault::Oom => return Ret::Err(errno::ENOMEM),
                Fault::Pending => {
                    self.tasks[tid as usize].fault_retry = Some(va);
                    return Ret::Val(0);
                }
            }
        }
        Ret::Err(errno::EFAULT)
    }

    /// The access a fault that spanned steps re-executes (`fault_retry`):
    /// its TLB access, miss and walk were counted and charged when it first
    /// faulted, as for a fault that ends in its own step, whose walk is
    /// retried without another lookup.
    #[cold]
    #[inline(never)]
    fn fault_retried(&mut self, tid: u32, va: u64, kind: Access, missed: bool, stlb: bool, cost: &mut Ns) {
        if self.tasks[tid as usize].fault_retry.take() != Some(va) {
            return;
        }
        self.stat.add(Stat::TlbAccesses, -1);
        if missed {
            self.stat.add(
                match kind {
                    Access::Load => Stat::DtlbLoadMisses,
                    Access::Store => Stat::DtlbStoreMisses,
                    Access::Ifetch => Stat::ItlbMisses,
                },
                -1,
            );
        } else if stlb {
            self.stat.add(Stat::StlbHits, -1);
        }
        // As when the fault is done within its step: the retry is one walk
        // of the PTE the fault just wrote, its line in cache.
        *cost = self.c.walk_cached;
    }

    /// The checker's view of one TLB hit (the slow path's and each of the
    /// fast run's): the entry against the page table, a stale entry's
    /// data, and the host page behind the frame.
    fn check_tlb_hit(&mut self, cpu: u32, mm: u32, va: u64, e: &TlbEntry, kind: Access) {
        self.check.on_tlb_hit(&self.mms[mm as usize], &self.mem_map, cpu, va, e, kind);
        self.check_stale_hit(cpu, mm, va, e, kind);
        if kind == Access::Store && e.writable() && e.dirty() && !self.check.data_ver.is_empty() {
            let id = self.page_ident(e.pfn_of(va));
            self.check.bump_data(id);
        }
        let pfn = e.pfn_of(va);
        if let Some(h) = self.host.as_ref() {
            if pfn != self.zero_pfn {
                self.check.on_guest_use(h, pfn, 1, "accessed");
            }
        }
    }

    /// A user loop over many addresses. Runs until the first access that
    /// faulted (so that other CPUs interleave at fault granularity) or a
    /// bounded number of accesses, leaving the rest pending.
    pub fn access_range(&mut self, tid: u32, addr: u64, stride: u64, count: u64, kind: Access) -> Option<Ret> {
        let mut a = addr;
        let mut n = count;
        let faults0 = self.stat.get(Stat::Pgfault);
        let mut done = 0;
        // Fast path: accesses that hit the TLB with the permission they need
        // change nothing but the clock and the counters; run them in a tight
        // loop. With the checker on, the same loop runs and the checker
        // sees each hit afterwards (nothing it reads changes during the
        // loop).
        let (mm, cpu) = (self.tasks[tid as usize].mm, self.tasks[tid as usize].cpu);
        if self.cpus[cpu as usize].tlbstate.loaded_mm != mm {
            self.switch_mm_irqs_off(cpu, mm);
        }
        if !self.cpus[cpu as usize].landing.is_empty() {
            self.tlb_apply_landed(cpu, self.tasks[tid as usize].clock);
        }
        let tlb = &mut self.cpus[cpu as usize].tlb;
        let (hits, stlb, lk) = if self.check.enabled {
            let seen = &mut self.check.fast_hits;
            mmu::tlb_hit_run(tlb, mm, kind, &mut a, stride, &mut n, &mut done, MAX_RANGE_STEP, &mut |va, e| seen.push((va, *e)))
        } else {
            mmu::tlb_hit_run(tlb, mm, kind, &mut a, stride, &mut n, &mut done, MAX_RANGE_STEP, &mut |_, _| {})
        };
        if self.check.enabled {
            let mut seen = std::mem::take(&mut self.check.fast_hits);
            for (va, e) in seen.drain(..) {
                if kind == Access::Store && !(e.writable() && e.dirty()) {
                    // The CPU re-walks for such a store; only the slow
                    // path may take it.
                    self.check
                        .report(format!("cpu {cpu} mm {mm} va {va:#x}: the fast run took a store through a read-only or clean TLB entry"));
                }
                self.check_tlb_hit(cpu, mm, va, &e, kind);
            }
            self.check.fast_hits = seen;
        }
        let mut pending_lk = lk.map(|lk| (mm, cpu, lk));
        if hits > 0 {
            self.stat.add(Stat::TlbAccesses, hits as i64);
            self.stat.add(Stat::StlbHits, stlb as i64);
            let c = self.c.user_access * hits + self.c.stlb_hit * stlb;
            let tk = &mut self.tasks[tid as usize];
            tk.clock += c;
            tk.user_ns += c;
        }
        // The access the fast run stopped at (its lookup made), then the
        // rest one by one, until one faults or the step's bound. The bound
        // counts the accesses made after the fast run's own: the one it
        // stopped at may be its last.
        while n > 0 {
            let resumed = pending_lk.is_some();
            let r = match pending_lk.take() {
                Some((mm, cpu, lk)) => self.user_access_after(tid, mm, cpu, a, kind, lk),
                None => self.user_access(tid, a, kind),
            };
            if self.tasks[tid as usize].mid_fault() {
                self.tasks[tid as usize].pending = Some(Op::AccessRange { addr: a, stride, count: n, kind });
                return None;
            }
            if r.is_err() {
                return Some(r);
            }
            a += stride;
            n -= 1;
            done += 1;
            if self.stat.get(Stat::Pgfault) != faults0 || done >= MAX_RANGE_STEP && !resumed {
                break;
            }
        }
        if n == 0 {
            return Some(Ret::Val(count as i64));
        }
        self.tasks[tid as usize].pending = Some(Op::AccessRange { addr: a, stride, count: n, kind });
        None
    }
}

/// The fault's entry, its lock, and its epilogue.
impl Kernel {
    /// The fault of task `tid` at `addr` (trapped, or resumed in a later
    /// step, at `t0`), taken from user mode unless the kernel takes it on
    /// a task's behalf (`fault_kernel_mode`: MAP_POPULATE, exec's copy of
    /// its arguments).
    #[inline(always)]
    pub(crate) fn page_fault(&self, tid: u32, addr: u64, kind: Access, t0: Ns) -> PageFault {
        let tk = &self.tasks[tid as usize];
        let flags = if self.fault_kernel_mode { 0 } else { fault_flag::USER };
        PageFault { tid, mm: tk.mm, cpu: tk.cpu, addr, kind, flags, t0 }
    }

    /// exc_page_fault: the trap of task `tid`'s access at `addr`, at its
    /// clock. Charges the task's clock. Every way in starts with a request
    /// on a line the mm's faulting CPUs share: made from a step that starts
    /// at its time if another task's step begins first (sim::horizon), so
    /// the line serves it in arrival order.
    pub fn exc_page_fault(&mut self, tid: u32, addr: u64, kind: Access) -> Fault {
        let pf = self.page_fault(tid, addr, kind, self.tasks[tid as usize].clock);
        self.stat.inc(Stat::Pgfault);
        let mut t = pf.t0 + self.c.trap / 2;
        let cache = &mut self.cpus[pf.cpu as usize].cache;
        if std::mem::take(&mut cache.syscall_since_fault) && pf.user() {
            t += self.c.fault_after_syscall;
        }
        if std::mem::take(&mut cache.freed_since_fault) && pf.user() {
            t += self.c.fault_after_free;
        }
        if t > crate::sim::horizon() && pf.user() {
            return self.fault_redo_later(&pf, t, FaultRedo::Entry);
        }
        self.do_user_addr_fault(&pf, t)
    }

    /// do_user_addr_fault from its entry at `t` through the return to user
    /// mode: the lock chosen here. The fault-locking policy's way in is
    /// tried first (lock_vma_under_rcu, or the speculative fault); when it
    /// does not handle the fault, the classic fault under mmap_lock.
    #[inline(always)]
    pub(crate) fn do_user_addr_fault(&mut self, pf: &PageFault, t: Ns) -> Fault {
        self.fault_trace_ctx = (t, pf.cpu, pf.addr);
        let ctx = FaultLockCtx { mm: pf.mm, cpu: pf.cpu, addr: pf.addr, kind: pf.kind, kernel_mode: !pf.user() };
        let fast = match self.fault_lock.path(&ctx) {
            FaultPath::MmapLock => return self.lock_mmap(pf, t),
            FaultPath::PerVma => self.fault_per_vma(pf, t),
            FaultPath::Spf => self.spf_fault_begin(pf, t),
        };
        self.fault_fast_done(pf, fast)
    }

    /// What follows a fast way in's outcome: the return to user mode, the
    /// lock kept to the next step, the classic fault (now, or from the next
    /// step), or the end of the step with the fault pending.
    #[inline(always)]
    fn fault_fast_done(&mut self, pf: &PageFault, fast: FastFault) -> Fault {
        match fast {
            FastFault::Done(res, t) => {
                self.fault_return(pf.tid, pf.t0, t, res);
                res
            }
            FastFault::Unlock(res, t, held) => self.fault_unlock(pf, t, res, held),
            FastFault::Fallback(t) => self.lock_mmap(pf, t),
            FastFault::Redo(t) => self.fault_redo_later(pf, t, FaultRedo::Classic),
            FastFault::Pending(t) => {
                self.tasks[pf.tid as usize].charge_sys(Entry::Fault, pf.t0, t);
                Fault::Pending
            }
        }
    }

    /// The `lock_mmap` label of do_user_addr_fault: the classic fault under
    /// mmap_lock for read from `t`, through the return to user mode.
    /// Behind a queued writer it sleeps at its down_read instead
    /// (Fault::Pending) and resumes in `fault_continue`, unless it finds
    /// the lock free before that writer runs again (`RwSem::steals`); a fault taken for
    /// the kernel (MAP_POPULATE, inside a call that holds or just held the
    /// lock) never finds one. A down_read that would arrive after another
    /// task's step begins (`sim::horizon`) is made from the task's next
    /// step, at `t`: that step runs in time order among the others, so the
    /// count's line serves the RMW after every earlier one and before every
    /// later one (an RMW processed out of order would move requests already
    /// answered). A fault taken for the kernel keeps one step.
    #[inline(always)]
    pub(crate) fn lock_mmap(&mut self, pf: &PageFault, t: Ns) -> Fault {
        if pf.user() {
            let sem = &self.mms[pf.mm as usize].mmap_lock;
            if sem.queued_writer.is_some() && !sem.steals(t, false) {
                self.tasks[pf.tid as usize].clock = t;
                let w = LockWait::Fault { addr: pf.addr, kind: pf.kind, t0: pf.t0, t_req: t };
                self.mmap_lock_sleep(pf.tid, pf.mm, w);
                return Fault::Pending;
            }
            if t > crate::sim::horizon() {
                return self.fault_redo_later(pf, t, FaultRedo::Classic);
            }
        }
        let (res, t) = self.fault_under_mmap_lock(pf, t);
        self.fault_unlock(pf, t, res, FaultUnlock::MmapRead)
    }

    /// End the step of fault `pf` at `t`: it continues from `from` in the
    /// task's next step, at `t` (`fault_continue`); the time so far is the
    /// fault's.
    #[cold]
    #[inline(never)]
    fn fault_redo_later(&mut self, pf: &PageFault, t: Ns, from: FaultRedo) -> Fault {
        let tk = &mut self.tasks[pf.tid as usize];
        tk.fault_redo = Some((pf.addr, pf.kind, from));
        tk.charge_sys(Entry::Fault, pf.t0, t);
        Fault::Pending
    }

    /// The rest of a fault that did not finish in its step: a speculative
    /// fault's second step, the classic fault after a failed attempt, or a
    /// fault woken on mmap_lock. Returns its outcome (Pending: still not
    /// finished).
    pub fn fault_continue(&mut self, tid: u32) -> Fault {
        let now = self.tasks[tid as usize].clock;
        if let Some(p) = &self.tasks[tid as usize].fault_cont {
            let pf = self.page_fault(tid, p.addr, p.kind, now);
            let fast = self.spf_fault_finish(&pf);
            return self.fault_fast_done(&pf, fast);
        }
        if let Some((addr, kind, from)) = self.tasks[tid as usize].fault_redo.take() {
            let pf = self.page_fault(tid, addr, kind, now);
            return match from {
                FaultRedo::Entry => self.do_user_addr_fault(&pf, now),
                FaultRedo::Classic => self.lock_mmap(&pf, now),
            };
        }
        let Some(pf) = self.mmap_lock_fault_woken(tid) else { return Fault::Done };
        let (res, t) = self.fault_under_mmap_lock(&pf, now);
        self.fault_unlock(&pf, t, res, FaultUnlock::MmapRead)
    }

    /// The end of fault `pf`, finished at `t` holding `what`: a fault taken
    /// from user mode that succeeded keeps it until its task's next step,
    /// which releases it at `t` and returns to user mode
    /// (`fault_unlock_finish`); the faulting access completes now (its
    /// retried walk costs nothing). Any other fault releases it now and
    /// returns. Returns the fault's outcome.
    #[inline(always)]
    fn fault_unlock(&mut self, pf: &PageFault, t: Ns, res: Fault, what: FaultUnlock) -> Fault {
        let (tid, mm) = (pf.tid, pf.mm);
        if res == Fault::Done && pf.user() {
            // Until the release, the lock counts as held to `t` (writers
            // deciding whether to wait see the reader).
            match what {
                FaultUnlock::MmapRead => {
                    let sem = &mut self.mms[mm as usize].mmap_lock;
                    sem.readers_until = sem.readers_until.max(t);
                }
                FaultUnlock::VmaRead { key, .. } => {
                    if let Some(v) = self.mms[mm as usize].vmas.get_mut(&key) {
                        v.vm_lock.sem.readers_until = v.vm_lock.sem.readers_until.max(t);
                    }
                }
            }
            let tk = &mut self.tasks[tid as usize];
            tk.fault_unlock = Some(PendingUnlock { what, t0: pf.t0, at: t });
            tk.clock = t;
            return Fault::Done;
        }
        let t = self.fault_release(what, t, pf.cpu, mm);
        self.fault_return(tid, pf.t0, t, res);
        res
    }

    /// The release a fault of task `tid` left for this step (its clock is
    /// the release's time), then the return to user mode.
    #[inline]
    pub fn fault_unlock_finish(&mut self, tid: u32) {
        let Some(p) = self.tasks[tid as usize].fault_unlock.take() else { return };
        let (mm, cpu, now) = (self.tasks[tid as usize].mm, self.tasks[tid as usize].cpu, self.tasks[tid as usize].clock);
        let t = self.fault_release(p.what, now, cpu, mm);
        // What the task's clock moved since the fault finished (an
        // interrupt's handler, a wait for the CPU) is charged elsewhere.
        let moved = now.saturating_sub(p.at);
        self.fault_return(tid, p.t0 + moved, t, Fault::Done);
    }

    /// Return from the fault to user mode at `t` (the fault began at `t0`):
    /// the fault's epilogue.
    fn fault_return(&mut self, tid: u32, t0: Ns, t: Ns, res: Fault) {
        let t = t + self.c.trap / 2;
        if res == Fault::Segv {
            self.stat.inc(Stat::Segv);
        }
        self.tasks[tid as usize].charge_sys(Entry::Fault, t0, t);
    }
}
