//! System calls and user memory accesses: what a workload's operations do.

use super::trace::Tp;
use super::Kernel;
use crate::hw::mmu;
use crate::hw::tlb::{size, TlbLookup};
use crate::mm::memory::{access_permitted, Fault};
use crate::mm::mmap::{vm, OpenFile, Vma};
use crate::mm::mmu_gather::MmuGather;
use crate::mm::pgtable::{pte_index, Pte};
use crate::mm::vmstat::{Entry, Stat};
use crate::sim::Ns;
use crate::workload::{errno, map, prot, Access, Advice, Op, Ret};

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
            if self.check.enabled {
                self.check.on_tlb_hit(&self.mms[mm as usize], &self.mem_map, cpu, va, &e, kind);
                self.check_stale_hit(cpu, mm, va, &e, kind);
                if kind == Access::Store && e.writable() && e.dirty() && !self.check.data_ver.is_empty() {
                    let id = self.page_ident(e.pfn_of(va));
                    self.check.bump_data(id);
                }
            }
            if let Some(h) = self.host.as_mut() {
                // A page the host swapped out is read back on access.
                let pfn = e.pfn_of(va);
                cost += h.access(pfn, &mut self.stat);
                if self.check.enabled && pfn != self.zero_pfn {
                    self.check.on_guest_use(h, pfn, 1, "accessed");
                }
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
        // loop. (Not with the checker on: it inspects every hit.)
        let mut pending_lk = None;
        if !self.check.enabled {
            let (mm, cpu) = (self.tasks[tid as usize].mm, self.tasks[tid as usize].cpu);
            if self.cpus[cpu as usize].tlbstate.loaded_mm != mm {
                self.switch_mm_irqs_off(cpu, mm);
            }
            if !self.cpus[cpu as usize].landing.is_empty() {
                self.tlb_apply_landed(cpu, self.tasks[tid as usize].clock);
            }
            let tlb = &mut self.cpus[cpu as usize].tlb;
            // One copy of the loop per access kind: the kind tests inside
            // the lookup and the store check fold away.
            let (hits, stlb, lk) = match kind {
                Access::Load => mmu::tlb_hit_run(tlb, mm, Access::Load, &mut a, stride, &mut n, &mut done, MAX_RANGE_STEP),
                Access::Store => mmu::tlb_hit_run(tlb, mm, Access::Store, &mut a, stride, &mut n, &mut done, MAX_RANGE_STEP),
                Access::Ifetch => mmu::tlb_hit_run(tlb, mm, Access::Ifetch, &mut a, stride, &mut n, &mut done, MAX_RANGE_STEP),
            };
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

    #[allow(clippy::too_many_arguments)]
    fn do_mmap(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, len: u64, prot_: u32, flags: u32, fd: i32, off: u64) -> (Ret, Ns) {
        if len == 0 || !off.is_multiple_of(4096) || (flags & (map::SHARED | map::PRIVATE)) == 0 {
            return (Ret::Err(errno::EINVAL), t);
        }
        let len = len.div_ceil(4096) * 4096;
        // LUF v10: a writable mapping gives up every deferral.
        let t = if prot_ & prot::WRITE != 0 && self.luf_hooks_on() {
            self.luf_flush(t, cpu, self.cpus[cpu as usize].curr, crate::mm::luf::ForcedBy::MmapWrite)
        } else {
            t
        };
        let file = if flags & map::ANONYMOUS != 0 {
            0
        } else {
            match self.mms[mm as usize].fd(fd) {
                Some(f) => f.inode + 1,
                None => return (Ret::Err(errno::EBADF), t),
            }
        };
        let t = self.mmap_write_lock(t, cpu, mm);
        let mut t = t + self.c.mmap;
        let start = if flags & map::FIXED != 0 {
            if !addr.is_multiple_of(4096) {
                let t = self.mmap_write_unlock(t, cpu, mm);
                return (Ret::Err(errno::EINVAL), t);
            }
            addr
        } else {
            // Unhinted maps as the policy places them; THP alignment is for
            // private anonymous ones (a shared one is shmem's, not aligned
            // with shmem_enabled = never).
            let place = if addr == 0 {
                self.anon_policy.mmap_align(len, file == 0 && flags & map::SHARED == 0, &self.knobs)
            } else {
                crate::mm::mmap::Placement::Page
            };
            match self.mms[mm as usize].place(len, place) {
                Some(a) => a,
                None => {
                    let t = self.mmap_write_unlock(t, cpu, mm);
                    return (Ret::Err(errno::ENOMEM), t);
                }
            }
        };
        if flags & map::FIXED != 0 && !self.mms[mm as usize].range_free(start, start + len) {
            // MAP_FIXED replaces what was there.
            t = self.unmap_region_locked(t, cpu, mm, start, start + len);
        }
        let mut vflags = 0;
        if prot_ & prot::READ != 0 {
            vflags |= vm::READ;
        }
        if prot_ & prot::WRITE != 0 {
            vflags |= vm::WRITE | vm::MAYWRITE;
        }
        if prot_ & prot::EXEC != 0 {
            vflags |= vm::EXEC;
        }
        if flags & map::SHARED != 0 {
            vflags |= vm::SHARED;
        }
        let pgoff = if file == 0 { start >> 12 } else { off >> 12 };
        let vma = Vma { start, end: start + len, flags: vflags, file, pgoff, anon_vma: 0, seq: 0, vm_lock: Default::default() };
        // vma_merge_new_range write-locks the neighbours it may extend.
        t = self.vma_start_write_range(t, cpu, mm, start, start + len);
        let merged = self.mms[mm as usize].insert_vma(vma);
        if merged > 0 {
            self.stat.add(Stat::VmaMerge, merged as i64);
            t += self.c.vma_merge * merged as Ns;
        }
        if file != 0 {
            self.inodes[(file - 1) as usize].i_mmap += 1;
        }
        self.stat.inc(Stat::Mmap);
        let mut t = self.mmap_write_unlock(t, cpu, mm);
        if flags & map::POPULATE != 0 {
            let kind = if prot_ & prot::WRITE != 0 { Access::Store } else { Access::Load };
            let mut a = start;
            self.fault_kernel_mode = true;
            while a < start + len {
                let tid = self.tasks.iter().position(|x| x.mm == mm && x.cpu == cpu && !x.exited).unwrap_or(0) as u32;
                self.tasks[tid as usize].clock = t;
                self.user_access(tid, a, kind);
                t = self.tasks[tid as usize].clock;
                a += 4096;
            }
            self.fault_kernel_mode = false;
        }
        (Ret::Val(start as i64), t)
    }

    /// Detach and zap [start, end) with mmap_lock already held for write.
    fn unmap_region_locked(&mut self, t: Ns, cpu: u32, mm: u32, start: u64, end: u64) -> Ns {
        let t = self.vma_start_write_range(t, cpu, mm, start, end);
        self.mms[mm as usize].log_unmap(start, end);
        let (gone, splits) = self.mms[mm as usize].detach_range(start, end);
        let mut t = t + self.c.vma_split * splits as Ns;
        self.stat.add(Stat::VmaSplit, splits as i64);
        t = self.lru_add_drain_cpu(t, cpu);
        let mut tlb = MmuGather::new(mm, false);
        for v in &gone {
            t = self.zap_page_range(t, cpu, mm, v.start, v.end, &mut tlb);
            if v.file != 0 {
                self.inodes[(v.file - 1) as usize].i_mmap -= 1;
            }
        }
        if let (Some(f), Some(l)) = (gone.first(), gone.last()) {
            self.free_pgtables(mm, f.start, l.end, &mut tlb);
        }
        self.tlb_finish_mmu(t, cpu, tlb)
    }

    fn do_munmap(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, len: u64) -> (Ret, Ns) {
        if !addr.is_multiple_of(4096) || len == 0 {
            return (Ret::Err(errno::EINVAL), t);
        }
        let end = addr + len.div_ceil(4096) * 4096;
        self.stat.inc(Stat::Munmap);
        // Detach under the write lock, then downgrade for the zap, the
        // page-table free and the shootdown (since 4.20).
        let lc = self.lc;
        let t = self.mmap_write_lock(t, cpu, mm);
        let t = self.vma_start_write_range(t, cpu, mm, addr, end);
        self.mms[mm as usize].log_unmap(addr, end);
        let (gone, splits) = self.mms[mm as usize].detach_range(addr, end);
        let t = t + self.c.munmap + self.c.vma_split * splits as Ns;
        self.stat.add(Stat::VmaSplit, splits as i64);
        let mut t = self.mmap_write_downgrade(t, cpu, mm);
        t = self.lru_add_drain_cpu(t, cpu);
        let mut tlb = MmuGather::new(mm, false);
        for v in &gone {
            t = self.zap_page_range(t, cpu, mm, v.start, v.end, &mut tlb);
            if v.file != 0 {
                self.inodes[(v.file - 1) as usize].i_mmap -= 1;
            }
        }
        if let (Some(f), Some(l)) = (gone.first(), gone.last()) {
            self.free_pgtables(mm, f.start, l.end, &mut tlb);
        }
        let t = self.tlb_finish_mmu(t, cpu, tlb);
        let t = self.mms[mm as usize].mmap_lock.up_read(t, cpu, &lc);
        (Ret::Val(0), t)
    }

    fn do_mprotect(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, len: u64, prot_: u32) -> (Ret, Ns) {
        if !addr.is_multiple_of(4096) {
            return (Ret::Err(errno::EINVAL), t);
        }
        let end = addr + len.div_ceil(4096) * 4096;
        let _lc = self.lc;
        let t = self.mmap_write_lock(t, cpu, mm);
        let mut t = t + self.c.mprotect;
        // Every page of the range must be mapped.
        let covered: u64 =
            self.mms[mm as usize].vmas.values().filter(|v| v.end > addr && v.start < end).map(|v| v.end.min(end) - v.start.max(addr)).sum();
        if covered != end - addr {
            let t = self.mmap_write_unlock(t, cpu, mm);
            return (Ret::Err(errno::ENOMEM), t);
        }
        // mprotect_fixup: vma_start_write on each VMA it splits or changes.
        t = self.vma_start_write_range(t, cpu, mm, addr, end);
        let m = &mut self.mms[mm as usize];
        let splits = m.split_at(addr) as u32 + m.split_at(end) as u32;
        self.stat.add(Stat::VmaSplit, splits as i64);
        t += self.c.vma_split * splits as Ns;
        let keys: Vec<u64> = m.vmas.range(addr..end).map(|(&k, _)| k).collect();
        let mut tighten = false;
        for &k in &keys {
            let v = m.vmas.get_mut(&k).unwrap();
            let mut f = v.flags & !(vm::READ | vm::WRITE | vm::EXEC);
            if prot_ & prot::READ != 0 {
                f |= vm::READ;
            }
            if prot_ & prot::WRITE != 0 {
                f |= vm::WRITE | vm::MAYWRITE;
            }
            if prot_ & prot::EXEC != 0 {
                f |= vm::EXEC;
            }
            if v.flags & !f & (vm::WRITE | vm::READ | vm::EXEC) != 0 {
                tighten = true;
            }
            v.flags = f;
        }
        for &k in &keys {
            m.vma_mark_modified(k);
        }
        // A PMD-mapped THP only partly covered is split first (split_huge_pmd).
        if !addr.is_multiple_of(1 << 21) {
            self.split_huge_pmd_at(mm, addr);
        }
        if !end.is_multiple_of(1 << 21) {
            self.split_huge_pmd_at(mm, end - 1);
        }
        // change_protection: removing write (or all) access rewrites PTEs and flushes.
        // The exec bit follows the new protection either way (x86 NX comes
        // from vm_page_prot), or instruction fetches would fault forever.
        let want_x = prot_ & prot::EXEC != 0;
        // change_pte_range: reclaim's batched unmaps in this mm are flushed first.
        t = self.flush_tlb_batched_pending(t, cpu, mm);
        {
            let mut va = addr;
            while va < end {
                if let Some(tbl) = self.mms[mm as usize].pt.table_mut(va) {
                    let slot = &mut tbl.ptes[pte_index(va)];
                    if slot.present() && slot.exec() != want_x {
                        *slot = if want_x { slot.with(Pte::EXEC) } else { slot.without(Pte::EXEC) };
                        t += self.c.pte_set;
                        tighten |= !want_x;
                    }
                }
                va += 4096;
            }
        }
        if tighten {
            let mut changed = false;
            let mut va = addr;
            while va < end {
                if let Some(tbl) = self.mms[mm as usize].pt.table_mut(va) {
                    let slot = &mut tbl.ptes[pte_index(va)];
                    if slot.present() && (slot.write() || prot_ & prot::READ == 0 || !want_x) {
                        *slot = if prot_ & prot::WRITE == 0 { slot.without(Pte::WRITE) } else { *slot };
                        changed = true;
                        t += self.c.pte_set;
                    }
                }
                va += 4096;
            }
            if prot_ == prot::NONE {
                // PROT_NONE: zap-like removal is modelled as write-protect plus
                // VMA permission; accesses fault on the VMA check.
            }
            if changed {
                t = self.flush_tlb_mm_range(t, cpu, mm, addr, end, false);
            }
        }
        for k in keys {
            let merged = self.mms[mm as usize].merge_around(k);
            self.stat.add(Stat::VmaMerge, merged as i64);
        }
        let t = self.mmap_write_unlock(t, cpu, mm);
        (Ret::Val(0), t)
    }

    #[allow(clippy::too_many_arguments)]
    fn do_mremap(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, old_len: u64, new_len: u64, may_move: bool) -> (Ret, Ns) {
        let old_len = old_len.div_ceil(4096) * 4096;
        let new_len = new_len.div_ceil(4096) * 4096;
        if !addr.is_multiple_of(4096) || new_len == 0 {
            return (Ret::Err(errno::EINVAL), t);
        }
        let Some(v) = self.mms[mm as usize].vma_lookup(addr).cloned() else { return (Ret::Err(errno::EFAULT), t) };
        if addr + old_len > v.end {
            return (Ret::Err(errno::EFAULT), t);
        }
        if new_len <= old_len {
            let (r, t) = if new_len < old_len { self.do_munmap(t, cpu, mm, addr + new_len, old_len - new_len) } else { (Ret::Val(0), t) };
            return (if r.is_err() { r } else { Ret::Val(addr as i64) }, t);
        }
        let _lc = self.lc;
        let t = self.mmap_write_lock(t, cpu, mm);
        let mut t = t + self.c.mprotect;
        // Grow in place when the VMA ends at addr+old_len and the space after is free.
        if addr + old_len == v.end && self.mms[mm as usize].range_free(v.end, addr + new_len) {
            let t = self.vma_start_write_range(t, cpu, mm, v.start, v.end);
            let m = &mut self.mms[mm as usize];
            let vv = m.vmas.get_mut(&v.start).unwrap();
            vv.end = addr + new_len;
            m.vma_mark_modified(v.start);
            let t = self.mmap_write_unlock(t, cpu, mm);
            return (Ret::Val(addr as i64), t);
        }
        if !may_move {
            let t = self.mmap_write_unlock(t, cpu, mm);
            return (Ret::Err(errno::ENOMEM), t);
        }
        // move_vma: new range, move the PTEs, flush the old range.
        let Some(new) = self.mms[mm as usize].get_unmapped_area(new_len, 4096) else {
            let t = self.mmap_write_unlock(t, cpu, mm);
            return (Ret::Err(errno::ENOMEM), t);
        };
        // move_vma: the source is write-locked; the destination is new and
        // marked before it becomes visible (copy_vma).
        t = self.vma_start_write_range(t, cpu, mm, addr, addr + old_len);
        self.mms[mm as usize].log_unmap(addr, addr + old_len);
        let m = &mut self.mms[mm as usize];
        let splits = m.split_at(addr) as u32 + m.split_at(addr + old_len) as u32;
        t += self.c.vma_split * splits as Ns;
        let old = m.vmas.remove(&addr).unwrap();
        let (seq, cyc) = (m.fresh_seq(), m.mm_lock_seq);
        let mut moved = Vma { start: new, end: new + new_len, pgoff: old.pgoff, seq, vm_lock: Default::default(), ..old.clone() };
        moved.vm_lock.lock_seq = cyc;
        m.log_marked(new, new + new_len);
        let mut entries = Vec::new();
        let mut va = addr;
        while va < addr + old_len {
            if let Some(tbl) = m.pt.table_mut(va) {
                let slot = &mut tbl.ptes[pte_index(va)];
                if slot.present() {
                    entries.push((va - addr, *slot));
                    *slot = Pte::NONE;
                    tbl.nr_present -= 1;
                }
            }
            va += 4096;
        }
        m.vmas.insert(new, moved);
        for (off, pte) in entries {
            match self.pte_alloc_for_move(t, cpu, mm, new + off) {
                Some(t1) => t = t1,
                None => break,
            }
            let tbl = self.mms[mm as usize].pt.table_mut(new + off).unwrap();
            tbl.ptes[pte_index(new + off)] = pte.without(Pte::HUGE); // moved PTE by PTE: no PMD mapping
            tbl.nr_present += 1;
            t += self.c.pte_set;
        }
        t = self.flush_tlb_mm_range(t, cpu, mm, addr, addr + old_len, false);
        let mut tlb = MmuGather::new(mm, false);
        self.free_pgtables(mm, addr, addr + old_len, &mut tlb);
        t = self.tlb_finish_mmu(t, cpu, tlb);
        let t = self.mmap_write_unlock(t, cpu, mm);
        (Ret::Val(new as i64), t)
    }

    fn do_madvise(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, len: u64, advice: Advice) -> (Ret, Ns) {
        if !addr.is_multiple_of(4096) {
            return (Ret::Err(errno::EINVAL), t);
        }
        let end = addr + len.div_ceil(4096) * 4096;
        let lc = self.lc;
        match advice {
            Advice::DontNeed | Advice::Free => {
                // MADV_DONTNEED zaps under mmap_lock for read; without swap,
                // MADV_FREE behaves like DONTNEED here (no lazyfree reclaim yet).
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
                    t = self.zap_page_range(t, cpu, mm, s, e, &mut tlb);
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

    fn do_brk(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64) -> (Ret, Ns) {
        let cur = self.mms[mm as usize].brk;
        let start = self.mms[mm as usize].brk_start;
        if addr == 0 || addr < start {
            return (Ret::Val(cur as i64), t);
        }
        let _lc = self.lc;
        let new_end = addr.div_ceil(4096) * 4096;
        let old_end = cur.div_ceil(4096) * 4096;
        let t = self.mmap_write_lock(t, cpu, mm);
        let mut t = t + self.c.brk;
        if new_end > old_end {
            if !self.mms[mm as usize].range_free(old_end, new_end) {
                let t = self.mmap_write_unlock(t, cpu, mm);
                return (Ret::Val(cur as i64), t);
            }
            let v = Vma {
                start: old_end,
                end: new_end,
                flags: vm::READ | vm::WRITE | vm::MAYWRITE | vm::BRK,
                file: 0,
                pgoff: old_end >> 12,
                anon_vma: 0,
                seq: 0,
                vm_lock: Default::default(),
            };
            t = self.vma_start_write_range(t, cpu, mm, old_end, new_end);
            self.mms[mm as usize].insert_vma(v);
        } else if new_end < old_end {
            t = self.unmap_region_locked(t, cpu, mm, new_end, old_end);
        }
        self.mms[mm as usize].brk = addr;
        let t = self.mmap_write_unlock(t, cpu, mm);
        (Ret::Val(addr as i64), t)
    }

    fn pte_alloc_for_move(&mut self, t: Ns, cpu: u32, mm: u32, va: u64) -> Option<Ns> {
        // Reuse the fault path's table allocation.
        let (a, b, c) = self.mms[mm as usize].pt.missing(va);
        if !(a || b || c) {
            return Some(t);
        }
        self.pte_alloc_pub(t, cpu, mm, va)
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
fn _uses(_: &dyn Fn(&crate::mm::mmap::Vma, Access) -> bool) {
    let _ = access_permitted;
}
