//! How faults synchronise with the writers of an address space
//! (`fault_locking`): the mmap_lock write side every writer goes through
//! (include/linux/mmap_lock.h), the per-VMA write marks (vma_start_write),
//! and the ways a fault takes that the arch entry chooses between
//! (arch/x86/mm/fault.rs: do_user_addr_fault): the classic mmap_lock read
//! side, per-VMA locks (lock_vma_under_rcu, mm/memory.c, 6.4+) and
//! speculative faults (mm/spf.rs).
//!
//! Time model. A writer's locked section runs as one step at the time it
//! acquires mmap_lock. A writer that would wait for the holders beyond a
//! short spin sleeps in the wait queue instead (`mmap_lock_gate`): it
//! becomes the mm's queued writer, and its call re-enters when the
//! holders are gone, so faults that run meanwhile without mmap_lock
//! (per-VMA locks, SPF) see the address space as it still is, and any
//! read request for mmap_lock meanwhile sleeps behind the writer (rwsem
//! FIFO) until its release wakes the queue's head (`mmap_lock_wake_waiters`),
//! but for one that finds the lock free while the writer is still on its
//! way back from sleep: that one takes it (rwsem lock stealing,
//! `RwSem::steals`). A write request spins past the sleeper, as
//! rwsem_down_write_slowpath's optimistic spin does, until the sleeper's
//! handoff timeout (`RwSem::writer_spins_past_queue`).
//! What a fault running later in simulated time must still see is *when*
//! each cycle held the lock and what it marked: `Mm::cycle_log`. A VMA
//! range marked in a cycle is write-locked for any fault inside that
//! cycle's lock hold (`Mm::vma_write_locked_at`), exactly as vm_lock_seq
//! == mm_lock_seq until mmap_write_unlock bumps mm_lock_seq; the same test
//! stands for SPF's odd vm_sequence.

use super::fault_lock::FastFault;
use super::memory::Fault;
use super::mm_types_task::{fault_flag, FaultUnlock, PageFault};
use super::vmstat::Entry;
use super::vmstat::Stat;
use crate::kernel::task::LockWait;
use crate::kernel::Kernel;
use crate::sim::Ns;

impl Kernel {
    /// Count a fault-locking event and, with `debug.fault_trace` > 0, record
    /// it against the fault in progress (`fault_trace_ctx`).
    pub(crate) fn fault_event(&mut self, s: Stat) {
        self.stat.inc(s);
        if self.fault_trace.len() < self.knobs.fault_trace {
            let (t, cpu, addr) = self.fault_trace_ctx;
            self.fault_trace.push((t, cpu, addr, s.name()));
        }
    }

    /// mmap_write_lock: take mmap_lock for write and open a write cycle
    /// (mm_lock_seq moves; the per-VMA marks of this cycle count until the
    /// unlock or downgrade).
    pub fn mmap_write_lock(&mut self, t: Ns, cpu: u32, mm: u32) -> Ns {
        let m = &mut self.mms[mm as usize];
        let t = m.mmap_lock.down_write(t, cpu, &self.lc, &self.sc);
        if self.check.enabled {
            if let Some(prev) = m.cycle_log.back().filter(|c| c.end > t) {
                self.check.report(format!(
                    "mm {mm}: a writer acquired mmap_lock at {t} ns while write cycle {} held it until {} ns (exclusion)",
                    prev.seq, prev.end
                ));
            }
        }
        m.mm_lock_seq += 1;
        if m.cycle_log.len() >= 256 {
            m.cycle_log.pop_front();
        }
        m.cycle_log.push_back(super::vma::WriteCycle { seq: m.mm_lock_seq, start: t, end: Ns::MAX, ..Default::default() });
        t
    }

    /// mmap_write_unlock: release and end the cycle (vma_end_write_all).
    pub fn mmap_write_unlock(&mut self, t: Ns, cpu: u32, mm: u32) -> Ns {
        let m = &mut self.mms[mm as usize];
        let t = m.mmap_lock.up_write(t, cpu, &self.lc);
        if let Some(c) = m.cycle_log.back_mut() {
            c.end = t;
        }
        self.mmap_lock_wake_waiters(mm, t);
        t
    }

    /// mmap_write_downgrade: readers may enter; the cycle's VMA marks end.
    pub fn mmap_write_downgrade(&mut self, t: Ns, cpu: u32, mm: u32) -> Ns {
        let m = &mut self.mms[mm as usize];
        let t = m.mmap_lock.downgrade_write(t, cpu, &self.lc);
        if let Some(c) = m.cycle_log.back_mut() {
            c.end = t;
        }
        self.mmap_lock_wake_waiters(mm, t);
        t
    }

    /// The rwsem slow path at a system call's entry. A writer that finds
    /// the lock held beyond a short spin queues and sleeps: it becomes the
    /// mm's queued writer and runs its locked section (the whole call,
    /// re-entered) only when the holders have gone, so that faults running
    /// meanwhile see the address space as it still is. A reader finding a
    /// queued writer sleeps behind it until the release wakes it (rwsem
    /// FIFO: no reader overtakes a waiting writer), unless the lock is free
    /// and the writer not yet running (`RwSem::steals`: then the call takes
    /// the lock and the writer, woken, waits for it); a writer spins for the
    /// lock past the sleeper until the sleeper holds the handoff bit
    /// (`RwSem::writer_spins_past_queue`). Returns true when the task
    /// sleeps (the caller keeps the operation pending). `entry`: the call,
    /// `write`: whether it takes the lock for write.
    pub(crate) fn mmap_lock_gate(&mut self, tid: u32, entry: Entry, write: bool) -> bool {
        let (mm, now) = (self.tasks[tid as usize].mm, self.tasks[tid as usize].clock);
        let mut granted = false;
        if let Some(LockWait::Syscall { t_step, .. }) = self.tasks[tid as usize].lock_wait.take() {
            // Woken: charge the sleep to the call, which starts over now. A
            // reader was woken holding the lock; a writer was woken as the
            // head of the queue and checks the holders again.
            let sem = &mut self.mms[mm as usize].mmap_lock;
            if sem.queued_writer == Some(tid) {
                sem.queued_writer = None;
            }
            granted = !write;
            sem.slept(t_step, now, write);
            self.tasks[tid as usize].charge_sys(entry, t_step, now);
        }
        let sem = &mut self.mms[mm as usize].mmap_lock;
        let t_req = now + self.c.syscall / 2;
        let spins = write && sem.writer_spins_past_queue(t_req, &self.sc);
        if sem.queued_writer.is_some() && !granted && !sem.steals(t_req, write) && !spins {
            return self.mmap_lock_sleep(tid, mm, LockWait::Syscall { t_step: now, write });
        }
        let free_at = sem.holders_until();
        if write && sem.writer_sleeps(t_req, &self.sc) {
            // rwsem_down_write_slowpath: no (more) optimistic spinning on
            // the readers holding it: queue, sleep until the hand-over.
            sem.queued_writer = Some(tid);
            sem.queued_wake = free_at + self.sc.sleep_wake;
            sem.queued_since = now;
            sem.write_queued += 1;
            let tk = &mut self.tasks[tid as usize];
            tk.lock_wait = Some(LockWait::Syscall { t_step: now, write });
            tk.sleeping = true;
            tk.timer = true;
            self.wakeups.push((free_at + self.sc.sleep_wake, tid));
            return true;
        }
        false
    }

    /// Put `tid` to sleep behind the queued writer of `mm`.
    pub(crate) fn mmap_lock_sleep(&mut self, tid: u32, mm: u32, w: LockWait) -> bool {
        self.mms[mm as usize].lock_waiters.push(tid);
        let tk = &mut self.tasks[tid as usize];
        tk.lock_wait = Some(w);
        tk.sleeping = true;
        tk.timer = false;
        true
    }

    /// rwsem_wake at a release or downgrade at `t` by the queue's head:
    /// a writer at the head of the wait queue is woken alone and becomes
    /// the queued writer; readers at the head are woken holding the lock
    /// (with 5.1 semantics those before the first writer, since 5.11 every
    /// reader in the queue), and the first writer left behind them becomes
    /// the queued writer, woken after them to check the holders again. The
    /// wake-ups run after the wake-up latency, in queue order.
    fn mmap_lock_wake_waiters(&mut self, mm: u32, t: Ns) {
        let m = &mut self.mms[mm as usize];
        if m.lock_waiters.is_empty() || m.mmap_lock.queued_writer.is_some() {
            // Nobody waits, or they wait behind a writer still queued.
            return;
        }
        let at = t + self.sc.sleep_wake;
        let tasks = &self.tasks;
        let is_writer = |w: u32| matches!(tasks[w as usize].lock_wait, Some(LockWait::Syscall { write: true, .. }));
        let waiters = std::mem::take(&mut m.lock_waiters);
        let mut woken = Vec::new();
        let mut left = Vec::new();
        if is_writer(waiters[0]) {
            m.mmap_lock.queued_writer = Some(waiters[0]);
            woken.push(waiters[0]);
            left.extend_from_slice(&waiters[1..]);
        } else {
            let upto =
                if m.mmap_lock.rwsem_51 { waiters.iter().position(|&w| is_writer(w)).unwrap_or(waiters.len()) } else { waiters.len() };
            for (i, &w) in waiters.iter().enumerate() {
                if i < upto && !is_writer(w) {
                    woken.push(w);
                } else {
                    left.push(w);
                }
            }
        }
        // The first writer still waiting heads the queue: nobody new passes it.
        if let Some(i) = left.iter().position(|&w| is_writer(w)) {
            let w = left.remove(i);
            m.mmap_lock.queued_writer = Some(w);
            woken.push(w);
        }
        m.lock_waiters = left;
        for w in woken {
            // A woken task runs no earlier than the wake-up, nor than the
            // time it went to sleep (the release can be stamped before it:
            // each task keeps its own clock).
            let run_at = self.tasks[w as usize].clock.max(at);
            if m.mmap_lock.queued_writer == Some(w) {
                m.mmap_lock.queued_wake = run_at;
                // Its wait (and so its handoff timeout) began when it slept.
                if let Some(LockWait::Syscall { t_step, .. }) = self.tasks[w as usize].lock_wait {
                    m.mmap_lock.queued_since = t_step;
                }
            }
            self.tasks[w as usize].clock = run_at;
            self.wakeups.push((run_at, w));
        }
    }

    /// A fault woken from mmap_lock (`Task::lock_wait`): it holds it for
    /// read now. Returns the fault (its trap time: when it trapped), or
    /// None if the task was not asleep in a fault.
    pub(crate) fn mmap_lock_fault_woken(&mut self, tid: u32) -> Option<PageFault> {
        let Some(LockWait::Fault { addr, kind, t0, t_req }) = self.tasks[tid as usize].lock_wait else { return None };
        self.tasks[tid as usize].lock_wait = None;
        let pf = self.page_fault(tid, addr, kind, t0);
        // Woken holding the lock for read (rwsem_mark_wake grants it).
        let now = self.tasks[tid as usize].clock;
        self.mms[pf.mm as usize].mmap_lock.slept(t_req, now, false);
        Some(pf)
    }

    /// Release `what` at `t`; returns when the release RMW completed.
    pub(crate) fn fault_release(&mut self, what: FaultUnlock, t: Ns, cpu: u32, mm: u32) -> Ns {
        let lc = &self.lc;
        let m = &mut self.mms[mm as usize];
        match what {
            FaultUnlock::MmapRead => m.mmap_lock.up_read(t, cpu, lc),
            FaultUnlock::VmaRead { key, lock_obj } => {
                // vma_end_read: up_read, an RMW on the vma_lock's count word.
                let end = m.lines.rmw(lock_obj, t, cpu, lc);
                if let Some(v) = m.vmas.get_mut(&key) {
                    v.vm_lock.sem.readers_until = v.vm_lock.sem.readers_until.max(end);
                }
                end
            }
        }
    }

    /// vma_start_write on every VMA overlapping or touching [lo, hi] (the
    /// ones a split, merge, detach or change in that range modifies), before
    /// the writer modifies them. Under per-VMA locks this waits for the
    /// faults holding each VMA for read (down_write on its vm_lock); under
    /// SPF it opens the VMA's vm_sequence write section (the section's end is
    /// the cycle's end). Every policy marks the state (cheap; the classic
    /// policy never reads it). Mmap_lock must be held for write.
    pub fn vma_start_write_range(&mut self, t: Ns, cpu: u32, mm: u32, lo: u64, hi: u64) -> Ns {
        let per_vma = self.fault_lock.vma_start_write_waits();
        let (lc, sc) = (self.lc, self.sc);
        let m = &mut self.mms[mm as usize];
        let cyc = m.mm_lock_seq;
        let keys: Vec<u64> = m.vmas.range(..=hi).rev().take_while(|(_, v)| v.end >= lo).map(|(&k, _)| k).collect();
        let mut t = t;
        for k in keys {
            let v = m.vmas.get_mut(&k).unwrap();
            if v.vm_lock.lock_seq == cyc {
                continue; // already marked in this cycle
            }
            if per_vma {
                // down_write/up_write RMW the count word of the VMA's struct
                // vma_lock: the line the faults' down_read_trylock and
                // up_read RMW (`Mm::lines` at lock_obj).
                let l = v.vm_lock.lock_obj;
                let r = m.lines.rmw(l, t, cpu, &lc);
                let s = v.vm_lock.sem.write_granted(t, r, cpu, &lc, &sc);
                let e = m.lines.rmw(l, s, cpu, &lc);
                t = v.vm_lock.sem.write_released(e);
            }
            m.vma_mark_modified(k);
        }
        t
    }

    /// lock_mm_and_find_vma and handle_mm_fault: the classic fault of `pf`
    /// under mmap_lock for read from `t`. Returns with the lock still held
    /// (`FaultUnlock::MmapRead`). Always inlined (two callers): every
    /// classic fault passes through it.
    #[inline(always)]
    pub(crate) fn fault_under_mmap_lock(&mut self, pf: &PageFault, t: Ns) -> (Fault, Ns) {
        let (cpu, mm) = (pf.cpu, pf.mm);
        let t = self.mms[mm as usize].mmap_lock.down_read(t, cpu, &self.lc, &self.sc);
        let t = t + self.c.vma_lookup;
        // The fault works from a copy of the VMA (it needs `&mut self`).
        let m = &mut self.mms[mm as usize];
        let seq = m.vmas.seqnum();
        let copy = m.fault_vma_take(pf.addr);
        let r = match copy.as_deref() {
            Some(vma) if super::memory::access_permitted(vma, pf.kind) => self.handle_mm_fault(t, &pf.with_vma(vma, 0)),
            _ => (Fault::Segv, t),
        };
        if let Some(c) = copy {
            self.mms[mm as usize].fault_vma_put(seq, c);
        }
        r
    }

    /// lock_vma_under_rcu + handle_mm_fault(FAULT_FLAG_VMA_LOCK) + vma_end_read
    /// (6.12). One step: the VMA read lock is held over the whole fault, so
    /// a writer whose step comes later waits for it in vma_start_write, and
    /// a fault after a writer's mark fails the vm_lock_seq test.
    pub(crate) fn fault_per_vma(&mut self, pf: &PageFault, t: Ns) -> FastFault {
        let (cpu, mm, addr) = (pf.cpu, pf.mm, pf.addr);
        let lc = self.lc;
        // RCU maple-tree walk.
        let t = t + self.c.vma_lookup;
        let m = &mut self.mms[mm as usize];
        let Some(key) = m.vma_lookup(addr).map(|v| v.start) else {
            self.fault_event(Stat::VmaLockAbort);
            return FastFault::Fallback(t);
        };
        // vma_start_read: (a) vm_lock_seq == mm_lock_seq -> write-locked.
        if m.vma_write_locked_at(&m.vmas[&key], t) {
            self.fault_event(Stat::VmaLockAbort);
            return FastFault::Fallback(t);
        }
        // (b) down_read_trylock on vm_lock: an RMW on the count word of the
        // VMA's struct vma_lock, a slab object whose line neighbours share
        // (`Mm::lines`); fails while a writer holds or waits.
        let lock_obj = m.vmas[&key].vm_lock.lock_obj;
        let t = m.lines.rmw(lock_obj, t, cpu, &lc);
        let v = m.vmas.get_mut(&key).unwrap();
        if v.vm_lock.sem.writer_until > t {
            self.fault_event(Stat::VmaLockAbort);
            return FastFault::Fallback(t);
        }
        v.vm_lock.sem.read_acquisitions += 1;
        let vma = v.fault_copy();
        let held = FaultUnlock::VmaRead { key, lock_obj };
        let unlock = |k: &mut Kernel, t: Ns| k.fault_release(held, t, cpu, mm);
        if !super::memory::access_permitted(&vma, pf.kind) {
            // An access error under the VMA lock is a SIGSEGV, counted as a success.
            let t = unlock(self, t);
            self.fault_event(Stat::VmaLockSuccess);
            return FastFault::Done(Fault::Segv, t);
        }
        // vmf_anon_prepare: a first anonymous fault needs mmap_lock to attach
        // the anon_vma; it only trylocks it, else RETRY.
        if vma.is_anon() && vma.anon_vma == 0 {
            let ml = &mut self.mms[mm as usize].mmap_lock;
            match ml.down_read_trylock(t, cpu, &lc) {
                None => {
                    let t = unlock(self, t + lc.local_rmw);
                    self.fault_event(Stat::VmaLockRetry);
                    return FastFault::Fallback(t);
                }
                Some(t1) => {
                    // anon_vma_prepare happens inside the fault; release after it.
                    let (res, t2) = self.handle_mm_fault(t1, &pf.with_vma(&vma, fault_flag::VMA_LOCK));
                    let t2 = self.mms[mm as usize].mmap_lock.up_read(t2, cpu, &lc);
                    let t2 = unlock(self, t2);
                    self.fault_event(Stat::VmaLockSuccess);
                    self.check_fault_install(mm, addr, &vma);
                    return FastFault::Done(res, t2);
                }
            }
        }
        let (res, t) = self.handle_mm_fault(t, &pf.with_vma(&vma, fault_flag::VMA_LOCK));
        self.check_fault_install(mm, addr, &vma);
        self.fault_event(Stat::VmaLockSuccess);
        FastFault::Unlock(res, t, held)
    }

    /// I1 (docs/mechanisms/speculative-page-faults.md#what-it-models) for faults outside mmap_lock, on ground truth: the
    /// VMA now covering `addr` has the range, flags and anon_vma the fault
    /// used (anon_vma may have been set by this very fault).
    pub(crate) fn check_fault_install(&mut self, mm: u32, addr: u64, used: &super::vma::Vma) {
        if !self.check.enabled {
            return;
        }
        let now = self.mms[mm as usize].vma_lookup(addr).cloned();
        let ok = match &now {
            None => false,
            Some(v) => {
                v.start == used.start
                    && v.end == used.end
                    && v.flags == used.flags
                    && v.pgoff == used.pgoff
                    && (used.anon_vma == 0 || v.anon_vma == used.anon_vma)
            }
        };
        if !ok {
            self.check.report(format!(
                "mm {mm} va {addr:#x}: fault installed a PTE using VMA [{:#x},{:#x}) flags {:#x} anon_vma {}, but the VMA there is now {:?} (I1: range, protection or anon_vma changed since the snapshot)",
                used.start,
                used.end,
                used.flags,
                used.anon_vma,
                now.map(|v| (v.start, v.end, v.flags, v.anon_vma))
            ));
        }
    }
}
