//! What a workload's operations do: user memory accesses (TLB, walk,
//! fault), and the dispatch of each system call to its body in mm/ (mmap.rs,
//! mprotect.rs, mremap.rs, madvise.rs) or elsewhere.

use super::trace::Tp;
use super::Kernel;
use crate::hw::mmu;
use crate::hw::tlb::{size, TlbEntry, TlbLookup};
use crate::mm::memory::{access_permitted, Fault};
use crate::mm::pgtable::Pte;
use crate::mm::vma::OpenFile;
use crate::mm::vmstat::{Entry, Stat};
use crate::sim::Ns;
use crate::workload::{errno, Access, Advice, Op, Ret};

const MAX_RANGE_STEP: u64 = 4096;

impl Kernel {
    /// Run one operation of task `tid`, starting at its clock. Returns the
    /// result, or None when the operation continues in a later step (the
    /// rest is left in `task.pending`).
    #[inline]
    pub fn exec(&mut self, tid: u32, op: Op) -> Option<Ret> {
        // A fault of the previous step still holds its lock: release it now.
        if self.tasks[tid as usize].fault_unlock.is_some() {
            self.fault_unlock_finish(tid);
        }
        // The op of most steps (one per page in the page-fault tests) is
        // dispatched here, without entering the large body below.
        if let Op::Access { addr, kind } = op {
            self.resume_user_mode_work(tid);
            return self.exec_access(tid, addr, kind);
        }
        self.exec_other(tid, op)
    }

    /// Task work on the return to user space that precedes this step:
    /// task_numa_work, which scans when the mm's scan is due.
    #[inline(always)]
    fn resume_user_mode_work(&mut self, tid: u32) {
        if self.knobs.numa_balancing != 0 {
            self.task_numa_work(tid);
        }
    }

    /// `exec` of an `Op::Access`.
    #[inline]
    fn exec_access(&mut self, tid: u32, addr: u64, kind: Access) -> Option<Ret> {
        let r = self.user_access(tid, addr, kind);
        if self.tasks[tid as usize].mid_fault() {
            // A speculative fault continues next step, or the fault
            // sleeps on mmap_lock; the access re-executes after it.
            self.tasks[tid as usize].pending = Some(Op::Access { addr, kind });
            return None;
        }
        Some(r)
    }

    #[inline(never)]
    fn exec_other(&mut self, tid: u32, op: Op) -> Option<Ret> {
        // A call that takes mmap_lock may first sleep in its wait queue.
        if let Some((entry, write)) = mmap_lock_use(&op) {
            if self.mmap_lock_gate(tid, entry, write) {
                self.tasks[tid as usize].pending = Some(op);
                return None;
            }
        }
        self.resume_user_mode_work(tid);
        match op {
            Op::Access { .. } => unreachable!("exec runs accesses itself"),
            Op::AccessRange { addr, stride, count, kind } => self.access_range(tid, addr, stride, count, kind),
            Op::Compute { ns } => {
                let tk = &mut self.tasks[tid as usize];
                tk.clock += ns;
                tk.user_ns += ns;
                Some(Ret::Val(0))
            }
            Op::Mmap { addr, len, prot, flags, fd, off } => {
                Some(self.sys(tid, Entry::Mmap, |k, t, cpu, mm| k.do_mmap(t, cpu, mm, addr, len, prot, flags, fd, off)))
            }
            Op::Munmap { addr, len } => Some(self.sys(tid, Entry::Munmap, |k, t, cpu, mm| k.do_munmap(t, cpu, mm, addr, len))),
            Op::Mprotect { addr, len, prot } => {
                Some(self.sys(tid, Entry::Mprotect, |k, t, cpu, mm| k.do_mprotect(t, cpu, mm, addr, len, prot)))
            }
            Op::Mremap { addr, old_len, new_len, may_move } => {
                Some(self.sys(tid, Entry::Mremap, |k, t, cpu, mm| k.do_mremap(t, cpu, mm, addr, old_len, new_len, may_move)))
            }
            Op::Madvise { addr, len, advice } => {
                Some(self.sys(tid, Entry::Madvise, |k, t, cpu, mm| k.do_madvise(t, cpu, mm, addr, len, advice)))
            }
            Op::Brk { addr } => Some(self.sys(tid, Entry::Brk, |k, t, cpu, mm| k.do_brk(t, cpu, mm, addr))),
            Op::Open { file } => Some(self.sys(tid, Entry::Open, |k, t, _cpu, mm| {
                if file as usize >= k.inodes.len() {
                    return (Ret::Err(errno::ENOENT), t);
                }
                let fd = k.mms[mm as usize].alloc_fd(OpenFile { inode: file, pos: 0 });
                (Ret::Val(fd as i64), t + k.c.file_op)
            })),
            Op::Close { fd } => Some(self.sys(tid, Entry::Close, |k, t, _cpu, mm| match k.mms[mm as usize].fd(fd) {
                None => (Ret::Err(errno::EBADF), t),
                Some(_) => {
                    k.mms[mm as usize].fds[(fd - 3) as usize] = None;
                    (Ret::Val(0), t + k.c.file_op)
                }
            })),
            Op::Lseek { fd, off } => Some(self.sys(tid, Entry::Lseek, |k, t, _cpu, mm| match k.mms[mm as usize].fd(fd) {
                None => (Ret::Err(errno::EBADF), t),
                Some(f) => {
                    f.pos = off;
                    (Ret::Val(off as i64), t)
                }
            })),
            Op::Read { fd, len } => Some(self.sys(tid, Entry::Read, |k, t, cpu, mm| k.file_rw(t, cpu, mm, fd, len, false))),
            Op::Write { fd, len } => Some(self.sys(tid, Entry::Write, |k, t, cpu, mm| k.file_rw(t, cpu, mm, fd, len, true))),
            Op::Ftruncate { fd, len } => Some(self.sys(tid, Entry::Ftruncate, |k, t, cpu, mm| {
                let Some(f) = k.mms[mm as usize].fd(fd).copied() else { return (Ret::Err(errno::EBADF), t) };
                let ino = f.inode;
                let t = if len < k.inodes[ino as usize].size { k.truncate_pagecache(t, cpu, ino, len) } else { t };
                k.inodes[ino as usize].size = len;
                (Ret::Val(0), t + k.c.file_op)
            })),
            Op::Fork => Some(self.do_fork(tid)),
            Op::Exec { file, vaddr, text, data, bss } => {
                Some(self.do_execve(tid, file, crate::mm::exec::ElfLayout { vaddr, text, data, bss }))
            }
            Op::Wait => self.do_wait4(tid),
            Op::Exit => {
                // exit_task_work: pending promotion work runs (or puts back) first.
                self.tasks[tid as usize].exited = true;
                let t = self.task_numa_promotion_work(self.tasks[tid as usize].clock, tid);
                self.tasks[tid as usize].exited = false;
                self.tasks[tid as usize].clock = t;
                self.do_exit(tid);
                Some(Ret::Val(0))
            }
        }
    }

    /// read()/write() at the file position of `fd`, advancing it.
    fn file_rw(&mut self, t: Ns, cpu: u32, mm: u32, fd: i32, len: u64, write: bool) -> (Ret, Ns) {
        let Some(f) = self.mms[mm as usize].fd(fd).copied() else { return (Ret::Err(errno::EBADF), t) };
        self.stat.inc(if write { Stat::FileWrite } else { Stat::FileRead });
        let t0 = t + self.c.file_op;
        // rw_verify_area: one call moves at most MAX_RW_COUNT.
        let len = len.min(crate::mm::filemap::MAX_RW_COUNT);
        // LUF v11: file_end_write flushes every deferral.
        let t0 = if write && self.knobs.luf.v11_hooks && self.luf_hooks_on() {
            self.luf_flush(t0, cpu, self.cpus[cpu as usize].curr, crate::mm::luf::ForcedBy::FileWrite)
        } else {
            t0
        };
        if write && self.check.enabled {
            for i in f.pos >> 12..(f.pos + len).div_ceil(4096) {
                self.check.bump_data((false, f.inode + 1, i));
            }
        }
        let r = if write { self.filemap_write(t0, cpu, f.inode, f.pos, len) } else { self.filemap_read(t0, cpu, f.inode, f.pos, len) };
        match r {
            None => (Ret::Err(errno::ENOMEM), t),
            Some((n, t)) => {
                self.mms[mm as usize].fd(fd).unwrap().pos += n;
                (Ret::Val(n as i64), t)
            }
        }
    }

    /// Run a system call body between syscall entry and exit, charging its
    /// time to `entry`.
    fn sys(&mut self, tid: u32, entry: Entry, f: impl FnOnce(&mut Kernel, Ns, u32, u32) -> (Ret, Ns)) -> Ret {
        let (t0, cpu, mm) = {
            let tk = &self.tasks[tid as usize];
            (tk.clock, tk.cpu, tk.mm)
        };
        let t_body = t0 + self.c.syscall / 2;
        if self.trace.on(Tp::SysEnter(entry)) {
            self.trace.emit(Tp::SysEnter(entry), t_body, cpu, &[tid as i64]);
        }
        let (r, t) = f(self, t_body, cpu, mm);
        if self.trace.on(Tp::SysExit(entry)) {
            let ret = match r {
                Ret::Val(v) => v,
                Ret::Err(e) => -e,
                Ret::Start => 0,
            };
            self.trace.emit(Tp::SysExit(entry), t, cpu, &[tid as i64, ret]);
        }
        // Task work queued during the call (page-cache promotion) runs on
        // the way back to user space, charged to this task and call.
        let t = self.task_numa_promotion_work(t, tid);
        let t = t + self.c.syscall / 2;
        let tk = &mut self.tasks[tid as usize];
        tk.entry_ns[entry as usize] += t - t0;
        tk.sys_ns += t - t0;
        tk.clock = t;
        r
    }

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
            if let Some(h) = self.host.as_mut() {
                // A page the host swapped out is read back on access.
                cost += h.access(e.pfn_of(va), &mut self.stat);
            }
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
                    let c = h.access(pte.pfn(), &mut self.stat);
                    // The zero page is kernel image memory, never handed out.
                    if self.check.enabled && !pte.special() {
                        self.check.on_guest_use(h, pte.pfn(), 1, "accessed");
                    }
                    let tk = &mut self.tasks[tid as usize];
                    tk.clock += c;
                    tk.user_ns += c;
                }
                let epoch = self.mem_map.get(pte.pfn()).alloc_epoch;
                // Large entries: PMD THP, contpte, HPA; the mm decides the
                // size (mm/huge_memory.rs).
                if pte.0 & Pte::HUGE != 0 || self.prof.tlb.contpte || self.prof.tlb.coalesce_order != 0 {
                    let sz = self.tlb_fill_size(mm, va, pte);
                    let epoch = if sz > 0 { self.mem_map.get(pte.pfn() & !((1u32 << sz) - 1)).alloc_epoch } else { epoch };
                    mmu::tlb_fill(&mut self.cpus[cpu as usize].tlb, kind, mm, va, pte, sz, epoch, missed);
                } else {
                    // The common 4 KiB fill on its own path: a constant size.
                    mmu::tlb_fill(&mut self.cpus[cpu as usize].tlb, kind, mm, va, pte, size::PTE, epoch, missed);
                }
                return Ret::Val(0);
            }
            match self.handle_mm_fault(tid, addr, kind) {
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
    fn access_range(&mut self, tid: u32, addr: u64, stride: u64, count: u64, kind: Access) -> Option<Ret> {
        let mut a = addr;
        let mut n = count;
        let faults0 = self.stat.get(Stat::Pgfault);
        let mut done = 0;
        // Fast path: accesses that hit the TLB with the permission they need
        // change nothing but the clock and the counters; run them in a tight
        // loop. With the checker on, the same loop runs and the checker
        // sees each hit afterwards (nothing it reads changes during the
        // loop). Not while the host has swapped pages out: a hit on one
        // reads it back (the slow path's `Host::access`).
        let mut pending_lk = None;
        if self.host.as_ref().is_none_or(|h| !h.any_swapped()) {
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
                tlb_hit_run_kind(tlb, mm, kind, &mut a, stride, &mut n, &mut done, &mut |va, e| seen.push((va, *e)))
            } else {
                tlb_hit_run_kind(tlb, mm, kind, &mut a, stride, &mut n, &mut done, &mut |_, _| {})
            };
            if self.check.enabled {
                let mut seen = std::mem::take(&mut self.check.fast_hits);
                for (va, e) in seen.drain(..) {
                    if kind == Access::Store && !(e.writable() && e.dirty()) {
                        // The CPU re-walks for such a store; only the slow
                        // path may take it.
                        self.check.report(format!(
                            "cpu {cpu} mm {mm} va {va:#x}: the fast run took a store through a read-only or clean TLB entry"
                        ));
                    }
                    self.check_tlb_hit(cpu, mm, va, &e, kind);
                }
                self.check.fast_hits = seen;
            }
            pending_lk = lk.map(|lk| (mm, cpu, lk));
            if hits > 0 {
                self.stat.add(Stat::TlbAccesses, hits as i64);
                self.stat.add(Stat::StlbHits, stlb as i64);
                let c = self.c.user_access * hits + self.c.stlb_hit * stlb;
                let tk = &mut self.tasks[tid as usize];
                tk.clock += c;
                tk.user_ns += c;
            }
        }
        if let Some((mm, cpu, lk)) = pending_lk {
            let r = self.user_access_after(tid, mm, cpu, a, kind, lk);
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
            if self.stat.get(Stat::Pgfault) != faults0 {
                if n == 0 {
                    return Some(Ret::Val(count as i64));
                }
                self.tasks[tid as usize].pending = Some(Op::AccessRange { addr: a, stride, count: n, kind });
                return None;
            }
        }
        while n > 0 {
            let r = self.user_access(tid, a, kind);
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
            if self.stat.get(Stat::Pgfault) != faults0 || done >= MAX_RANGE_STEP {
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

/// `mmu::tlb_hit_run` with `kind` made a constant: one copy of the loop per
/// access kind, so the kind tests inside the lookup and the store check
/// fold away.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tlb_hit_run_kind(
    tlb: &mut crate::hw::tlb::Tlb,
    mm: u32,
    kind: Access,
    a: &mut u64,
    stride: u64,
    n: &mut u64,
    done: &mut u64,
    observe: &mut impl FnMut(u64, &TlbEntry),
) -> (u64, u64, Option<TlbLookup>) {
    match kind {
        Access::Load => mmu::tlb_hit_run(tlb, mm, Access::Load, a, stride, n, done, MAX_RANGE_STEP, observe),
        Access::Store => mmu::tlb_hit_run(tlb, mm, Access::Store, a, stride, n, done, MAX_RANGE_STEP, observe),
        Access::Ifetch => mmu::tlb_hit_run(tlb, mm, Access::Ifetch, a, stride, n, done, MAX_RANGE_STEP, observe),
    }
}

/// The system calls that take mmap_lock, with their entry and whether they
/// take it for write.
fn mmap_lock_use(op: &Op) -> Option<(Entry, bool)> {
    Some(match *op {
        Op::Mmap { .. } => (Entry::Mmap, true),
        Op::Munmap { .. } => (Entry::Munmap, true),
        Op::Mprotect { .. } => (Entry::Mprotect, true),
        Op::Mremap { .. } => (Entry::Mremap, true),
        Op::Brk { .. } => (Entry::Brk, true),
        Op::Fork => (Entry::Fork, true),
        Op::Madvise { advice: Advice::DontNeed | Advice::Free, .. } => (Entry::Madvise, false),
        Op::Madvise { advice: Advice::HugePage | Advice::NoHugePage, .. } => (Entry::Madvise, true),
        _ => return None,
    })
}

#[allow(dead_code)]
fn _uses(_: &dyn Fn(&crate::mm::vma::Vma, Access) -> bool) {
    let _ = access_permitted;
}
