//! The dispatch of a workload's operations: a user memory access to the
//! CPU's access path (arch/x86/mm/fault.rs), each system call to its body
//! in mm/ (mmap.rs, mprotect.rs, mremap.rs, madvise.rs, filemap.rs) or
//! elsewhere, between syscall entry and exit.

use super::trace::Tp;
use super::Kernel;
use crate::mm::vma::OpenFile;
use crate::mm::vmstat::Entry;
use crate::sim::Ns;
use crate::workload::{errno, Access, Advice, Op, Ret};

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
        // Every op but user work is a system call: the next fault on this
        // CPU finds its path cold (fault_after_syscall_ns).
        let syscall = !matches!(op, Op::AccessRange { .. } | Op::Compute { .. } | Op::Stream { .. });
        let r = self.exec_op(tid, op);
        if syscall && r.is_some() {
            self.cpus[self.tasks[tid as usize].cpu as usize].cache.syscall_since_fault = true;
        }
        r
    }

    /// The body of `exec_other`: one op, to its end or to a later step.
    #[inline(always)]
    fn exec_op(&mut self, tid: u32, op: Op) -> Option<Ret> {
        match op {
            Op::Access { .. } => unreachable!("exec runs accesses itself"),
            Op::AccessRange { addr, stride, count, kind } => self.access_range(tid, addr, stride, count, kind),
            Op::Compute { ns } => {
                let tk = &mut self.tasks[tid as usize];
                tk.clock += ns;
                tk.user_ns += ns;
                Some(Ret::Val(0))
            }
            Op::Stream { addr, stride, count, bytes } => {
                let (mm, cpu, t0) = {
                    let tk = &self.tasks[tid as usize];
                    (tk.mm, tk.cpu, tk.clock)
                };
                let home = self.cpus[cpu as usize].node as usize;
                let mut t = t0;
                for i in 0..count {
                    // The node of the page read (the CPU's own if it is gone),
                    // from the node's PFN range: the struct page, a cache
                    // miss for every page of a large table, says the same.
                    let pte = self.mms[mm as usize].pt.pte(addr + i * stride);
                    let nid = if pte.present() { self.pfn_to_nid(pte.pfn()) as usize } else { home };
                    debug_assert!(!pte.present() || nid == self.mem_map.get(pte.pfn()).nid as usize);
                    t = self.mem_traffic(t, cpu, nid, bytes, self.nodes[nid].stream_4k * bytes / 4096);
                }
                let tk = &mut self.tasks[tid as usize];
                tk.user_ns += t - t0;
                tk.clock = t;
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
            Op::Read { fd, len, buf } => Some(self.sys(tid, Entry::Read, |k, t, cpu, mm| {
                let (r, t) = k.file_rw(t, cpu, mm, fd, len, false);
                k.user_copy(tid, t, r, buf, Access::Store)
            })),
            Op::Write { fd, len, buf } => Some(self.sys(tid, Entry::Write, |k, t, cpu, mm| {
                let (r, t) = k.file_rw(t, cpu, mm, fd, len, true);
                k.user_copy(tid, t, r, buf, Access::Load)
            })),
            Op::Ftruncate { fd, len } => Some(self.sys(tid, Entry::Ftruncate, |k, t, cpu, mm| {
                let Some(f) = k.mms[mm as usize].fd(fd).copied() else { return (Ret::Err(errno::EBADF), t) };
                let ino = f.inode;
                let t = if len < k.inodes[ino as usize].size { k.truncate_pagecache(t, cpu, ino, len) } else { t };
                k.inodes[ino as usize].size = len;
                (Ret::Val(0), t + k.c.file_op)
            })),
            Op::Fork => Some(self.do_fork(tid)),
            Op::Vfork => Some(self.do_clone_vm(tid, true)),
            Op::Clone => Some(self.do_clone_vm(tid, false)),
            Op::SysTime { ns } => {
                let tk = &mut self.tasks[tid as usize];
                tk.clock += ns;
                tk.sys_ns += ns;
                tk.entry_ns[Entry::Other as usize] += ns;
                Some(Ret::Val(0))
            }
            Op::Exec { file, vaddr, text, data, bss, mmap_base } => {
                Some(self.do_execve(tid, file, crate::mm::exec::ElfLayout { vaddr, text, data, bss }, mmap_base))
            }
            Op::Wait => self.do_wait4(tid),
            Op::Nanosleep { ns } => {
                let r = self.sys(tid, Entry::Nanosleep, |_, t, _, _| (Ret::Val(0), t));
                self.hrtimer_nanosleep(tid, ns);
                Some(r)
            }
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

    /// The user buffer of a read() (`kind` Store: copy_to_user writes it)
    /// or write() (Load) that moved `r` bytes at `buf`: its pages not yet
    /// mapped for that access fault in as the copy reaches them (a
    /// kernel-mode fault: counted as a fault, its time the call's, as a
    /// profiler attributes it). The copy itself is the call's already.
    fn user_copy(&mut self, tid: u32, t: Ns, r: Ret, buf: u64, kind: Access) -> (Ret, Ns) {
        let Ret::Val(n) = r else { return (r, t) };
        if buf == 0 || n <= 0 {
            return (r, t);
        }
        let mm = self.tasks[tid as usize].mm as usize;
        let mut t = t;
        for va in (buf & !4095..buf + n as u64).step_by(4096) {
            let pte = self.mms[mm].pt.pte(va);
            if pte.present() && (kind == Access::Load || pte.write()) {
                continue;
            }
            let (sys0, fault0) = {
                let tk = &self.tasks[tid as usize];
                (tk.sys_ns, tk.entry_ns[Entry::Fault as usize])
            };
            self.tasks[tid as usize].clock = t;
            self.fault_kernel_mode = true;
            let f = self.user_access(tid, va, kind);
            self.fault_kernel_mode = false;
            let tk = &mut self.tasks[tid as usize];
            t = tk.clock;
            tk.sys_ns = sys0;
            tk.entry_ns[Entry::Fault as usize] = fault0;
            if f.is_err() {
                return (Ret::Err(errno::EFAULT), t);
            }
        }
        (r, t)
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
        tk.charge_sys(entry, t0, t);
        r
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
