//! Speculative page faults (the SPF v12 series, Dufour 2019; patch 22, as
//! docs/mechanisms/speculative-page-faults.md#rules-it-implements):
//! handle an anonymous fault without mmap_lock, from a snapshot of the VMA
//! validated under the PTL, and redo it under mmap_lock when validation fails.
//!
//! Two steps, so that other CPUs act in between (the page is prepared
//! outside any lock and validated later, as in the series):
//! 1. `spf_fault_begin`: find_vma_rcu and the VMA reference, the vm_sequence
//!    snapshot (S2), the VMA-kind checks (S3–S10), the IRQ-off walk (S12;
//!    page tables must exist), and for a write fault on a none PTE the page
//!    allocation and zeroing. The step ends (`Task::fault_cont`).
//! 2. `spf_fault_finish`: pte_map_lock — vma_has_changed (the VMA detached,
//!    its vm_sequence moved, or a writer section open), PTL — then install;
//!    on failure, free what was allocated (wasted work) and run the classic
//!    fault under mmap_lock.
//!
//! Writers (mm/mmap.rs, mprotect.rs, mremap.rs, madvise.rs) change a VMA's
//! vm_sequence (a fresh value, `Mm::vma_mark_modified`) in
//! `vma_start_write_range` and in every split, merge or field change,
//! inside their locked section (one step at the time they acquire
//! mmap_lock; mm/mmap_lock.rs).

use super::fault_lock::FastFault;
use super::memory::{exec_bit, Fault};
use super::mm_types_task::{fault_flag, PageFault, SpfPending};
use super::pgtable::Pte;
use super::slub::vma_layout as vl;
use super::vma::vm;
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::knobs::Mutant;
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::workload::Access;

impl Kernel {
    /// Step 1 of a speculative fault (the gate, S1–S13, allocation).
    pub(crate) fn spf_fault_begin(&mut self, pf: &PageFault, t: Ns) -> FastFault {
        let (cpu, mm, addr, kind) = (pf.cpu, pf.mm, pf.addr, pf.kind);
        // G1: the sysctl.
        if !self.knobs.speculative_page_fault {
            self.fault_event(Stat::SpfNotAttemptedSysctl);
            return FastFault::Fallback(t);
        }
        // G2: not a user-mode fault, or a single-threaded mm.
        if !pf.user() {
            self.fault_event(Stat::SpfNotAttemptedKernelMode);
            return FastFault::Fallback(t);
        }
        // G2 reads mm_users. In 5.1's mm_struct (x86-64; mm_cachep objects
        // are cache-aligned) mm_users is at byte 96 and mmap_sem's count at
        // 120 (after v12's mm_seq): the same line, the one every classic
        // fault's down_read/up_read RMWs (C7 in docs/mechanisms/speculative-page-faults.md#rules-it-implements: the mm lines).
        let t = self.mms[mm as usize].mmap_lock.line.read(t, cpu, &self.lc);
        if self.mms[mm as usize].users <= 1 {
            self.fault_event(Stat::SpfNotAttemptedSingleThread);
            return FastFault::Fallback(t);
        }
        self.fault_event(Stat::SpfAttempt);
        let lc = self.lc;
        let t_begin = t;
        // S1: find_vma_rcu (tree walk under RCU; mm_seq read on the tree line).
        let mut t = t + self.c.vma_lookup;
        let m = &mut self.mms[mm as usize];
        // v11 (spf.tree_protection = "rwlock"): read_lock(&mm->mm_rb_lock)
        // around the walk and get_vma, read_unlock after: two RMWs on the
        // mm_struct line next to mm_rb, shared by every faulting CPU.
        if self.knobs.spf_tree_rwlock {
            let l = m.mm_rb_line();
            t = m.lines.rmw(l, t, cpu, &lc);
            t = m.lines.rmw(l, t, cpu, &lc);
        }
        let Some((key, obj)) = m.vma_lookup(addr).map(|v| (v.start, v.vm_lock.obj)) else {
            self.fault_event(Stat::SpfAbortNoVma);
            return self.spf_abort(t_begin, t);
        };
        // The lookup ends on the VMA (the vmacache hit or the last node of
        // the walk): vm_start/vm_end, on line A. The walk's inner nodes are
        // other VMAs' lines A too, read only after a vmacache invalidation
        // (not modelled). Then get_vma: an RMW on vm_ref_count, line A.
        let t = m.lines.read(obj + vl::VM_START, t, cpu, &lc);
        let t = m.lines.rmw(obj + vl::VM_REF_COUNT, t, cpu, &lc);
        let vma = m.vmas[&key].fault_copy();
        // S2 reads vm_sequence, the object's last line.
        let t = m.lines.read(obj + vl::VM_SEQUENCE, t, cpu, &lc);
        // S2: the count is odd while a writer is inside its section (around
        // the field writes of __vma_adjust, mprotect_fixup, the zap). The
        // writer's step is atomic, so what says whether the section is open
        // at this fault's time is the writer's cycle in simulated time: the
        // VMA's range was marked in a cycle holding mmap_lock at `t` (any
        // of the queued ones, not only the last). (The cycle bounds the
        // section from outside: the section proper starts at the VMA's
        // vm_write_begin, a little after the lock.)
        if m.vma_write_locked_at(&m.vmas[&key], t) {
            self.fault_event(Stat::SpfAbortSeqOdd);
            self.fault_event(Stat::SpfVmaChanged);
            return self.spf_abort_put(t_begin, t, cpu, mm, obj);
        }
        // S3 reads vm_ops, S4 anon_vma (adjacent fields).
        let m = &mut self.mms[mm as usize];
        let t = m.lines.read(obj + vl::VM_OPS, t, cpu, &lc);
        // S3: vm_ops->fault (every file-backed VMA, shmem).
        if !vma.is_anon() {
            self.fault_event(Stat::SpfAbortVmOpsFault);
            self.fault_event(Stat::SpfVmaNotsup);
            return self.spf_abort_put(t_begin, t, cpu, mm, obj);
        }
        let t = m.lines.read(obj + vl::ANON_VMA, t, cpu, &lc);
        // S4: first fault of a fresh anonymous VMA.
        if vma.anon_vma == 0 {
            self.fault_event(Stat::SpfAbortNoAnonVma);
            self.fault_event(Stat::SpfVmaNotsup);
            return self.spf_abort_put(t_begin, t, cpu, mm, obj);
        }
        // The snapshot of vm_flags and vm_page_prot (line B).
        let t = m.lines.read(obj + vl::VM_PAGE_PROT, t, cpu, &lc);
        let t = m.lines.read(obj + vl::VM_FLAGS, t, cpu, &lc);
        // S7: stacks.
        if vma.flags & vm::GROWSDOWN != 0 {
            self.fault_event(Stat::SpfAbortStack);
            self.fault_event(Stat::SpfVmaNotsup);
            return self.spf_abort_put(t_begin, t, cpu, mm, obj);
        }
        // S10: no permission: SIGSEGV, final (x86/arm64).
        if !super::memory::access_permitted(&vma, kind) {
            self.fault_event(Stat::SpfVmaAccess);
            self.fault_event(Stat::SpfSigsegvPerm);
            self.fault_event(Stat::PerfSpf);
            let t = self.mms[mm as usize].lines.rmw(obj + vl::VM_REF_COUNT, t, cpu, &lc);
            return FastFault::Done(Fault::Segv, t);
        }
        // S12: the IRQ-off walk of the table the faulting access just
        // walked (its lines cached); SPF never allocates page tables (patch 22).
        let t = t + self.c.walk_cached;
        let (pud, pmd, pte) = self.mms[mm as usize].pt.missing(addr);
        if pud || pmd || pte {
            self.stat.inc(if pud || pmd { Stat::SpfAbortPtPud } else { Stat::SpfAbortPtPmdNone });
            self.fault_event(Stat::SpfVmaNotsup);
            return self.spf_abort_put(t_begin, t, cpu, mm, obj);
        }
        let orig_pte = self.mms[mm as usize].pt.pte(addr);
        // S13: nothing can move within this step; the re-check is a read.
        // D2 write fault: allocate and zero the page before pte_map_lock
        // (preemption point (f): the long part of the window).
        let mut t = t + self.c.fault_base;
        let mut page = None;
        if orig_pte.is_none() && kind == Access::Store {
            match self.alloc_anon_page(t, &pf.with_vma(&vma, fault_flag::SPECULATIVE), true) {
                Some((pfn, t1)) => {
                    page = Some(pfn);
                    t = t1;
                }
                None => return self.spf_abort_put(t_begin, t, cpu, mm, obj),
            }
        }
        let (cycle, read_bumps) = (self.mms[mm as usize].mm_lock_seq, self.mms[mm as usize].seq_bumps_read_side);
        self.tasks[pf.tid as usize].fault_cont =
            Some(SpfPending { addr: addr & !4095, kind, vma, orig_pte, page, t_begin, t_trap: pf.t0, cycle, read_bumps, obj });
        FastFault::Pending(t)
    }

    /// Step 2 of the pending speculative fault `pf` (its address and
    /// access the pending one's, its t0 the task's clock):
    /// pte_map_lock's validation, then install (Done) or abort and redo
    /// classically (Fallback).
    pub(crate) fn spf_fault_finish(&mut self, pf: &PageFault) -> FastFault {
        let tid = pf.tid;
        let Some(p) = self.tasks[tid as usize].fault_cont.take() else { return FastFault::Done(Fault::Done, pf.t0) };
        let (mm, cpu, t0) = (pf.mm, pf.cpu, pf.t0);
        let key = p.vma.start;
        // vma_has_changed: the VMA instance is gone from the tree (detached,
        // or replaced: values of vm_sequence name instances), its count
        // moved, or a writer's section is open at this time. It reads the
        // tree node (line A) and vm_sequence (the last line), inside
        // pte_map_lock before the PTL: at the step's start. (`pf.t0` stays
        // the step's start for the accounting.)
        let lc = self.lc;
        let m = &mut self.mms[mm as usize];
        let t0 = m.lines.read(p.obj + vl::VM_RB, t0, cpu, &lc);
        let t0 = m.lines.read(p.obj + vl::VM_SEQUENCE, t0, cpu, &lc);
        let m = &self.mms[mm as usize];
        let changed = match m.vmas.get(&key) {
            None => true,
            Some(v) => v.seq != p.vma.seq,
        };
        let skip = self.knobs.mutant == Mutant::SpfSkipSeqCheck;
        // A writer that spins for mmap_lock (behind a writer, or 5.3+ behind
        // readers for at most spin_limit) runs its section in the step of its call, so it may have run although
        // it acquires only after this validation. Then, in time, this fault
        // validated first: it completes, and the writers' changes apply to
        // its PTE (zapped if one of them unmapped the address). (A writer
        // that sleeps in the wait queue has not run yet.)
        if changed && !skip && m.seq_bumps_read_side == p.read_bumps {
            if let Some(i) = m.cycle_log.iter().position(|c| c.seq == p.cycle + 1) {
                if m.cycle_log[i].start > t0 {
                    let zapped = m.cycle_log.iter().skip(i).any(|c| c.unmapped.iter().any(|r| r.0 <= p.addr && p.addr < r.1));
                    return self.spf_finish_before_writer(pf, p, t0, zapped);
                }
            }
        }
        if changed && !skip {
            self.fault_event(Stat::SpfAbortPtlChangedBeforeLock);
            self.fault_event(Stat::SpfVmaChanged);
            let t = self.spf_put_ref(t0, cpu, mm, p.obj);
            let t = self.spf_free_wasted(t, cpu, &p, p.page);
            return FastFault::Fallback(t);
        }
        // The page tables the walk saw must still be there: with the check
        // skipped, a munmap may have freed them (a use after free).
        if self.mms[mm as usize].pt.table(p.addr).is_none() {
            self.check.report(format!("mm {mm} va {:#x}: speculative fault dereferenced a freed page table (I4)", p.addr));
            let t = self.spf_put_ref(t0, cpu, mm, p.obj);
            let t = self.spf_free_wasted(t, cpu, &p, p.page);
            return FastFault::Fallback(t);
        }
        if self.check.enabled && !self.mms[mm as usize].vmas.contains_key(&key) {
            self.check.report(format!(
                "mm {mm} va {:#x}: speculative fault used VMA [{:#x},{:#x}) after it was detached (I3)",
                p.addr, key, p.vma.end
            ));
        }
        let addr = p.addr;
        let (res, t) = match p.page {
            Some(pfn) => {
                // D2 write: install the prepared page if the PTE is still none.
                self.check_fault_install(mm, addr, &p.vma);
                let pte = Pte::new(pfn, Pte::WRITE | Pte::DIRTY | Pte::YOUNG | exec_bit(&p.vma));
                let hold = self.c.pte_set + self.c.rmap;
                let (ok, t) = self.set_pte_locked(t0, cpu, mm, addr, Pte::NONE, pte, hold);
                if ok {
                    self.page_add_rmap(mm, pfn, true);
                    self.stat.inc(Stat::FaultAnon);
                    (Fault::Done, self.folio_add_lru(t, cpu, pfn))
                } else {
                    // Another fault won: not an abort, the page goes back.
                    (Fault::Done, self.release_folios(t, cpu, &[pfn]))
                }
            }
            None => {
                // Zero-page reads and present PTEs (write-protect, CoW,
                // young/dirty update): run the PTE-level fault on the
                // validated snapshot; it takes the PTL and compares the PTE.
                self.check_fault_install(mm, addr, &p.vma);
                self.handle_pte_fault(t0, &pf.with_vma(&p.vma, fault_flag::SPECULATIVE))
            }
        };
        let t = self.spf_put_ref(t, cpu, mm, p.obj);
        self.fault_event(Stat::SpeculativePgfault);
        self.fault_event(Stat::PerfSpf);
        FastFault::Done(res, t)
    }

    /// A fault that validated before the queued writer acquired mmap_lock:
    /// install what the fault made, as the writer's changes leave it — kept
    /// (read-only if the writer removed write) where a VMA with the same
    /// anon_vma still covers the address, zapped (the page freed) where none
    /// does. A fault that had nothing prepared runs on the current VMA.
    fn spf_finish_before_writer(&mut self, pf: &PageFault, p: SpfPending, t0: Ns, zapped: bool) -> FastFault {
        let (mm, cpu) = (pf.mm, pf.cpu);
        self.fault_event(Stat::SpfBeforeWriter);
        let cur = self.mms[mm as usize]
            .vma_lookup(p.addr)
            .cloned()
            .filter(|v| !zapped && v.is_anon() && v.anon_vma == p.vma.anon_vma && self.mms[mm as usize].pt.table(p.addr).is_some());
        let (res, t) = match (p.page, cur) {
            (Some(pfn), Some(v)) if v.flags & vm::READ != 0 => {
                let w = if v.flags & vm::WRITE != 0 { Pte::WRITE } else { 0 };
                let pte = Pte::new(pfn, w | Pte::DIRTY | Pte::YOUNG | exec_bit(&v));
                let hold = self.c.pte_set + self.c.rmap;
                let (ok, t) = self.set_pte_locked(t0, cpu, mm, p.addr, Pte::NONE, pte, hold);
                if ok {
                    self.page_add_rmap(mm, pfn, true);
                    self.stat.inc(Stat::FaultAnon);
                    (Fault::Done, self.folio_add_lru(t, cpu, pfn))
                } else {
                    (Fault::Done, self.release_folios(t, cpu, &[pfn]))
                }
            }
            (Some(pfn), _) => (Fault::Done, self.release_folios(t0, cpu, &[pfn])),
            (None, Some(v)) if super::memory::access_permitted(&v, p.kind) => {
                self.handle_pte_fault(t0, &pf.with_vma(&v, fault_flag::SPECULATIVE))
            }
            (None, _) => (Fault::Done, t0),
        };
        let t = self.spf_put_ref(t, cpu, mm, p.obj);
        self.fault_event(Stat::SpeculativePgfault);
        self.fault_event(Stat::PerfSpf);
        FastFault::Done(res, t)
    }

    /// put_vma: an RMW on vm_ref_count (line A of the object `obj`). The
    /// VMA may be gone from the tree: the reference keeps the object.
    fn spf_put_ref(&mut self, t: Ns, cpu: u32, mm: u32, obj: u64) -> Ns {
        let lc = self.lc;
        self.mms[mm as usize].lines.rmw(obj + vl::VM_REF_COUNT, t, cpu, &lc)
    }

    fn spf_free_wasted(&mut self, t: Ns, cpu: u32, p: &SpfPending, page: Option<Pfn>) -> Ns {
        let t = match page {
            Some(pfn) => {
                // Undo alloc_anon_page: the page was never mapped.
                self.fault_event(Stat::SpfWastedPages);
                self.release_folios(t, cpu, &[pfn])
            }
            None => t,
        };
        self.stat.add(Stat::SpfWastedNs, (t - p.t_begin) as i64);
        t
    }

    /// Abort in step 1 after the VMA reference was taken: drop it.
    fn spf_abort_put(&mut self, t_begin: Ns, t: Ns, cpu: u32, mm: u32, obj: u64) -> FastFault {
        let t = self.spf_put_ref(t, cpu, mm, obj);
        self.spf_abort(t_begin, t)
    }

    /// Abort in step 1: the time so far is wasted; the classic path follows,
    /// from the next step (its down_read comes a whole attempt after this
    /// step began, behind other CPUs' requests made meanwhile).
    fn spf_abort(&mut self, t_begin: Ns, t: Ns) -> FastFault {
        self.stat.add(Stat::SpfWastedNs, (t - t_begin) as i64);
        FastFault::Redo(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::task::Task;
    use crate::workload::{map, prot, Op, Ret};

    /// A kernel with one process of two threads (tasks 0 and 1 on CPUs 0
    /// and 1) and a 64 KiB anonymous region whose first page task 0 has
    /// faulted in (so the anon_vma and the PTE table exist).
    fn setup(policy: &str) -> (Kernel, u64) {
        let mut k = boot_with(&format!("fault_locking = \"{policy}\"\n"));
        let Some(Ret::Val(a)) = k.exec(
            0,
            Op::Mmap { addr: 0, len: 16 << 12, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 },
        ) else {
            panic!()
        };
        let a = a as u64;
        assert_eq!(run_op(&mut k, 0, Op::Access { addr: a, kind: Access::Store }), Some(Ret::Val(0)));
        assert!(k.tasks[0].fault_cont.is_none(), "the first fault (no anon_vma) is classic");
        (k, a)
    }

    /// `exec` of `op` by task `tid`, then what its fault left for the
    /// task's next steps: the classic fault after a failed attempt (then the
    /// access again), the release of its lock (as the driver runs them).
    fn run_op(k: &mut Kernel, tid: u32, op: Op) -> Option<Ret> {
        let mut r = k.exec(tid, op);
        loop {
            if k.tasks[tid as usize].fault_unlock.is_some() {
                k.fault_unlock_finish(tid);
            }
            if r.is_some() || k.tasks[tid as usize].fault_redo.is_none() {
                return r;
            }
            // The classic fault after a failed attempt: its own step.
            if k.fault_continue(tid) == crate::mm::memory::Fault::Segv {
                k.tasks[tid as usize].pending = None;
                return Some(Ret::Err(crate::workload::errno::EFAULT));
            }
            let op = k.tasks[tid as usize].pending.take().expect("the faulting access");
            r = k.exec(tid, op);
        }
    }

    fn st(k: &Kernel, s: Stat) -> i64 {
        k.stat.get(s)
    }

    /// Step 1 of a store to page 1 by task 0, then `writer` by task 1 starting
    /// `dt` ns relative to task 0's clock, then step 2.
    fn race(writer: Op, dt: i64) -> (Kernel, u64) {
        let (mut k, a) = setup("spf");
        let op = Op::Access { addr: a + 4096, kind: Access::Store };
        assert_eq!(k.exec(0, op), None, "the speculative fault ends its step after the snapshot");
        assert!(k.tasks[0].fault_cont.as_ref().unwrap().page.is_some(), "the page is allocated in step 1");
        k.tasks[1].clock = (k.tasks[0].clock as i64 + dt) as Ns;
        assert!(k.exec(1, writer).is_some());
        k.fault_continue(0);
        (k, a)
    }

    #[test]
    fn mprotect_acquiring_between_the_steps_aborts_the_fault() {
        // The writer takes mmap_lock well before task 0 validates.
        let (k, a) = race(Op::Mprotect { addr: 0, len: 0, prot: 0 }, 0);
        // (a no-op writer: zero length changes nothing, no abort)
        assert_eq!(st(&k, Stat::SpfAbortPtlChangedBeforeLock), 0);
        assert_eq!(st(&k, Stat::SpeculativePgfault), 1);
        assert!(k.mms[0].pt.pte(a + 4096).write());
        let (k, a) = race(Op::Mprotect { addr: a, len: 16 << 12, prot: prot::READ }, -2000);
        assert_eq!(st(&k, Stat::SpfAbortPtlChangedBeforeLock), 1, "vm_sequence moved: abort at pte_map_lock");
        assert_eq!(st(&k, Stat::SpfWastedPages), 1, "the prepared page is freed");
        assert_eq!(st(&k, Stat::SpeculativePgfault), 0);
        assert!(k.mms[0].pt.pte(a + 4096).is_none(), "the classic retry finds a read-only VMA: no PTE");
        assert_eq!(st(&k, Stat::Segv), 1);
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    /// Hold mmap_lock of mm 0 for read on CPU 2 over [from, from + len).
    fn hold_read(k: &mut Kernel, from: Ns, len: Ns) {
        let (lc, sc) = (k.lc, k.sc);
        let r = k.mms[0].mmap_lock.down_read(from, 2, &lc, &sc);
        k.mms[0].mmap_lock.up_read(r + len, 2, &lc);
    }

    /// Run what the driver would when task `tid`'s wake-up comes: the rest
    /// of a fault asleep on mmap_lock, then its pending operation.
    fn wake(k: &mut Kernel, tid: u32) -> Option<Ret> {
        let at = k.wakeups.iter().rev().find(|w| w.1 == tid).expect("a wake-up is queued").0;
        k.wakeups.retain(|w| w.1 != tid);
        let tk = &mut k.tasks[tid as usize];
        tk.clock = at;
        tk.sleeping = false;
        if tk.mid_fault() && k.fault_continue(tid) == crate::mm::memory::Fault::Segv {
            k.tasks[tid as usize].pending = None;
            return Some(Ret::Err(crate::workload::errno::EFAULT));
        }
        let op = k.tasks[tid as usize].pending.take().unwrap();
        k.exec(tid, op)
    }

    /// A munmap queued behind a reader, and a store by task 0 to the range
    /// it will unmap, trapping `dt` after the munmap's call began.
    fn queued_munmap(policy: &str, dt: Ns) -> (Kernel, u64, Option<Ret>) {
        let (mut k, a) = setup(policy);
        let t = k.tasks[0].clock;
        hold_read(&mut k, t, 20_000);
        k.tasks[1].clock = t + 10;
        assert_eq!(k.exec(1, Op::Munmap { addr: a, len: 16 << 12 }), None, "the munmap sleeps in the wait queue");
        assert_eq!(k.mms[0].mmap_lock.queued_writer, Some(1));
        assert!(k.tasks[1].sleeping);
        k.tasks[0].clock = t + 10 + dt;
        let r = run_op(&mut k, 0, Op::Access { addr: a + 2 * 4096, kind: Access::Store });
        (k, a, r)
    }

    #[test]
    fn a_speculative_fault_before_a_queued_munmap_acquires_completes_and_is_zapped() {
        let (mut k, a, r) = queued_munmap("spf", 1000);
        assert_eq!(r, None, "step 1 of the speculative fault");
        assert!(k.mms[0].vma_lookup(a).is_some(), "the queued munmap has changed nothing yet");
        assert_eq!(k.fault_continue(0), crate::mm::memory::Fault::Done);
        assert_eq!(st(&k, Stat::SpeculativePgfault), 1);
        assert_eq!(st(&k, Stat::SpfBeforeWriter), 0, "the writer's section runs after the fault in time and in order");
        assert!(k.mms[0].pt.pte(a + 2 * 4096).present());
        // The munmap wakes once the reader is gone and zaps the new page.
        let free0 = st(&k, Stat::NrFreePages);
        assert_eq!(wake(&mut k, 1), Some(Ret::Val(0)));
        assert!(k.mms[0].cycle_log.back().unwrap().start > k.tasks[0].clock - 2 * k.c.trap);
        assert!(k.mms[0].vma_lookup(a).is_none());
        assert!(st(&k, Stat::NrFreePages) > free0, "the zap frees the pages");
        assert!(k.tasks[1].entry_ns[crate::mm::vmstat::Entry::Munmap as usize] > 15_000, "the sleep is charged to munmap");
        crate::check::audit(&mut k);
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    #[test]
    fn a_per_vma_fault_before_a_queued_munmap_acquires_succeeds() {
        let (mut k, a, r) = queued_munmap("per_vma", 1000);
        assert_eq!(r, Some(Ret::Val(0)));
        assert_eq!(st(&k, Stat::VmaLockSuccess), 2);
        assert!(k.mms[0].pt.pte(a + 2 * 4096).present());
        assert_eq!(wake(&mut k, 1), Some(Ret::Val(0)));
        assert!(k.mms[0].pt.pte(a + 2 * 4096).is_none(), "zapped by the munmap");
        crate::check::audit(&mut k);
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    #[test]
    fn a_classic_fault_behind_a_queued_munmap_sleeps_and_then_gets_sigsegv() {
        let (mut k, a, r) = queued_munmap("mmap_lock", 1000);
        assert_eq!(r, None, "the fault sleeps on mmap_lock behind the queued writer");
        assert!(k.tasks[0].sleeping && k.tasks[0].mid_fault());
        assert_eq!(k.mms[0].lock_waiters, vec![0]);
        assert!(k.mms[0].pt.pte(a + 2 * 4096).is_none());
        // The munmap runs, its downgrade wakes the fault (a reader: woken
        // holding the lock), which finds no VMA.
        assert_eq!(wake(&mut k, 1), Some(Ret::Val(0)));
        assert!(k.mms[0].lock_waiters.is_empty());
        assert_eq!(wake(&mut k, 0), Some(Ret::Err(crate::workload::errno::EFAULT)));
        assert_eq!(st(&k, Stat::Segv), 1);
        assert!(k.tasks[0].clock > k.mms[0].cycle_log.back().unwrap().end, "the fault ran after the writer's section");
        crate::check::audit(&mut k);
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    #[test]
    fn the_checker_reports_two_writers_holding_mmap_lock_at_once() {
        let (mut k, _) = setup("mmap_lock");
        let t = k.tasks[0].clock + 1000;
        let w = k.mmap_write_lock(t, 0, 0);
        k.mmap_write_unlock(w + 5000, 0, 0);
        assert!(k.check.violations.is_empty());
        // A broken lock that lets a second writer in during the first's hold.
        k.mms[0].mmap_lock.writer_until = 0;
        k.mms[0].mmap_lock.readers_until = 0;
        k.mmap_write_lock(w + 100, 1, 0);
        assert!(k.check.violations.iter().any(|v| v.contains("exclusion")), "{:?}", k.check.violations);
    }

    #[test]
    fn a_writer_behind_a_queued_writer_waits_for_it_and_is_woken_alone() {
        // Readers sharing, then writers in arrival order: FIFO hand-off.
        let (mut k, a) = setup("mmap_lock");
        k.tasks.push(Task::new(2, 0, 2, 0));
        k.tasks.push(Task::new(3, 0, 3, 0));
        k.mms[0].users = 4;
        let t = k.tasks[0].clock;
        hold_read(&mut k, t, 20_000);
        k.tasks[1].clock = t + 10;
        assert_eq!(k.exec(1, Op::Mprotect { addr: a, len: 4096, prot: prot::READ }), None);
        k.tasks[2].clock = t + 20;
        assert_eq!(k.exec(2, Op::Mprotect { addr: a + 4096, len: 4096, prot: prot::READ }), None);
        k.tasks[3].clock = t + 30;
        assert_eq!(k.exec(3, Op::Madvise { addr: a, len: 4096, advice: crate::workload::Advice::DontNeed }), None);
        assert_eq!(k.mms[0].lock_waiters, vec![2, 3]);
        assert_eq!(wake(&mut k, 1), Some(Ret::Val(0)));
        // The head waiter (a writer) is woken alone and heads the queue.
        assert_eq!(k.mms[0].mmap_lock.queued_writer, Some(2));
        assert_eq!(k.mms[0].lock_waiters, vec![3]);
        assert!(!k.wakeups.iter().any(|w| w.1 == 3));
        let first = k.mms[0].cycle_log.back().unwrap().clone();
        assert_eq!(wake(&mut k, 2), Some(Ret::Val(0)));
        let second = k.mms[0].cycle_log.back().unwrap().clone();
        assert!(second.start >= first.end, "write sections never overlap");
        assert_eq!(k.mms[0].mmap_lock.queued_writer, None);
        assert_eq!(wake(&mut k, 3), Some(Ret::Val(0)));
        assert!(k.tasks[3].clock > second.end);
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    #[test]
    fn a_writer_finding_the_lock_free_before_the_queued_writer_wakes_takes_it() {
        // Task 1's munmap sleeps behind a long read hold; task 2 asks for
        // the lock for write just after the readers left, while task 1 is
        // still on its way back from sleep: it takes the lock (rwsem lock
        // stealing), and task 1, woken, runs after its section.
        let (mut k, a) = queued_writer_behind_readers();
        let free_at = k.mms[0].mmap_lock.holders_until();
        assert!(k.mms[0].mmap_lock.queued_wake > free_at + 100, "the sleeper runs again after a wake-up latency");
        k.tasks[2].clock = free_at + 100;
        let r = k.exec(2, Op::Mprotect { addr: a + (8 << 12), len: 4096, prot: prot::READ });
        assert_eq!(r, Some(Ret::Val(0)), "the lock is free and its queued writer asleep: task 2 takes it");
        let stolen = k.mms[0].cycle_log.back().unwrap().clone();
        assert!(stolen.start < k.mms[0].mmap_lock.queued_wake);
        assert_eq!(k.mms[0].mmap_lock.queued_writer, Some(1), "task 1 still heads the queue");
        assert_eq!(wake(&mut k, 1), Some(Ret::Val(0)));
        let munmap = k.mms[0].cycle_log.back().unwrap().clone();
        assert!(munmap.start >= stolen.end, "the woken writer waits for the section taken ahead of it");
        assert!(k.mms[0].vma_lookup(a).is_none());
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    /// Task 1's munmap asleep in the wait queue behind a 20 us read hold
    /// (longer than a writer spins on readers), task 2 a third user.
    fn queued_writer_behind_readers() -> (Kernel, u64) {
        let (mut k, a) = setup("per_vma");
        k.tasks.push(Task::new(2, 0, 2, 0));
        k.mms[0].users = 3;
        // Late enough that a wait can have begun RWSEM_WAIT_TIMEOUT before.
        let t = k.tasks[0].clock + 2 * crate::sim::lock::RWSEM_WAIT_TIMEOUT;
        hold_read(&mut k, t, 20_000);
        k.tasks[1].clock = t + 10;
        assert_eq!(k.exec(1, Op::Munmap { addr: a, len: 16 << 12 }), None, "the munmap sleeps in the wait queue");
        assert_eq!(k.mms[0].mmap_lock.queued_writer, Some(1));
        (k, a)
    }

    #[test]
    fn a_writer_spins_past_a_sleeping_writer_until_its_handoff() {
        // rwsem_down_write_slowpath spins before it queues, whoever sleeps
        // in the queue: task 2, asking while the readers have less left
        // than a writer spins on them, takes the lock when they leave,
        // ahead of the sleeper. Asked while they have more left, it
        // sleeps behind task 1; and once task 1 has waited
        // RWSEM_WAIT_TIMEOUT (its handoff bit), task 2 queues behind it
        // however short the wait.
        let spin = boot_with("").sc.spin_limit;
        for (before_free, handoff, spins) in [(spin / 2, false, true), (spin + 5_000, false, false), (spin / 2, true, false)] {
            let (mut k, a) = queued_writer_behind_readers();
            let free_at = k.mms[0].mmap_lock.holders_until();
            if handoff {
                k.mms[0].mmap_lock.queued_since = free_at - crate::sim::lock::RWSEM_WAIT_TIMEOUT - before_free;
            }
            k.tasks[2].clock = free_at - before_free;
            let r = k.exec(2, Op::Mprotect { addr: a + (8 << 12), len: 4096, prot: prot::READ });
            if !spins {
                assert_eq!(r, None, "task 2 queues behind the sleeping writer ({before_free} ns before the release, handoff {handoff})");
                assert_eq!(k.mms[0].lock_waiters, vec![2]);
                continue;
            }
            assert_eq!(r, Some(Ret::Val(0)), "task 2 spins on the readers and takes the lock past the sleeper");
            let spun = k.mms[0].cycle_log.back().unwrap().clone();
            assert!(spun.start >= free_at && spun.start < k.mms[0].mmap_lock.queued_wake);
            assert_eq!(wake(&mut k, 1), Some(Ret::Val(0)));
            assert!(k.mms[0].cycle_log.back().unwrap().start >= spun.end, "the sleeper runs after the spinner's section");
            assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
        }
    }

    #[test]
    fn a_fault_inside_a_writers_section_sees_the_count_odd_and_aborts() {
        let (mut k, a) = setup("spf");
        // The writer splits the fault's VMA: the half holding a + 4096 is
        // modified (its end moves) inside the writer's section.
        k.tasks[1].clock = k.tasks[0].clock;
        assert_eq!(k.exec(1, Op::Mprotect { addr: a + (8 << 12), len: 8 << 12, prot: prot::READ }), Some(Ret::Val(0)));
        let (ws, we) = (k.mms[0].cycle_log.back().unwrap().start, k.mms[0].cycle_log.back().unwrap().end);
        assert!(we > ws);
        // A fault whose snapshot falls inside that cycle.
        k.tasks[0].clock = ws + (we - ws) / 2 - k.c.trap;
        assert_eq!(run_op(&mut k, 0, Op::Access { addr: a + 4096, kind: Access::Store }), Some(Ret::Val(0)));
        assert_eq!(st(&k, Stat::SpfAbortSeqOdd), 1, "vm_sequence odd at the snapshot: S2 aborts");
        assert_eq!(st(&k, Stat::SpfVmaChanged), 1);
        assert!(k.tasks[0].clock > we, "the classic retry waits for the writer on mmap_lock");
        assert!(k.mms[0].pt.pte(a + 4096).write(), "the retry installs the page");
        // After the cycle the same VMA is open to speculation again.
        assert_eq!(run_op(&mut k, 0, Op::Access { addr: a + 2 * 4096, kind: Access::Store }), None);
        k.fault_continue(0);
        assert_eq!(st(&k, Stat::SpfAbortSeqOdd), 1);
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    /// Two writers one after the other on mmap_lock: task 1 splits the
    /// faulting region's VMA (mprotect of its upper half), task 2 (arriving
    /// 1 ns later, it spins) maps an unrelated range. Returns the first
    /// cycle's lock hold.
    fn two_cycles(policy: &str) -> (Kernel, u64, Ns, Ns) {
        let (mut k, a) = setup(policy);
        k.tasks.push(Task::new(2, 0, 2, 0));
        k.mms[0].users = 3;
        let t0 = k.tasks[0].clock;
        k.tasks[1].clock = t0;
        assert_eq!(k.exec(1, Op::Mprotect { addr: a + (8 << 12), len: 8 << 12, prot: prot::READ }), Some(Ret::Val(0)));
        let (s1, e1) = (k.mms[0].cycle_log.back().unwrap().start, k.mms[0].cycle_log.back().unwrap().end);
        k.tasks[2].clock = t0 + 1;
        let Some(Ret::Val(b)) = k.exec(
            2,
            Op::Mmap { addr: 0, len: 4 << 12, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 },
        ) else {
            panic!()
        };
        assert!(b as u64 + (4 << 12) <= a || b as u64 >= a + (16 << 12));
        assert!(k.mms[0].cycle_log.back().unwrap().start >= e1, "the second cycle waited for the first");
        (k, a, s1, e1)
    }

    #[test]
    fn a_fault_inside_an_earlier_of_two_queued_cycles_also_aborts() {
        let (mut k, a, s1, e1) = two_cycles("spf");
        // A fault inside the first cycle: its VMA's count is odd then,
        // although the last cycle never touched it.
        k.tasks[0].clock = s1 + (e1 - s1) / 2 - k.c.trap;
        assert_eq!(run_op(&mut k, 0, Op::Access { addr: a + 4096, kind: Access::Store }), Some(Ret::Val(0)));
        assert_eq!(st(&k, Stat::SpfAbortSeqOdd), 1);
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    #[test]
    fn per_vma_fault_inside_an_earlier_of_two_queued_cycles_falls_back() {
        let (mut k, a, s1, e1) = two_cycles("per_vma");
        // vma_start_read inside the first cycle finds the VMA write-locked.
        let before = st(&k, Stat::VmaLockAbort);
        k.tasks[0].clock = s1 + (e1 - s1) / 2 - k.c.trap;
        assert_eq!(run_op(&mut k, 0, Op::Access { addr: a + 4096, kind: Access::Store }), Some(Ret::Val(0)));
        assert_eq!(st(&k, Stat::VmaLockAbort), before + 1);
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    #[test]
    fn mutant_without_the_final_check_installs_into_a_read_only_vma() {
        let (mut k, a) = setup("spf");
        k.knobs.mutant = Mutant::SpfSkipSeqCheck;
        assert_eq!(run_op(&mut k, 0, Op::Access { addr: a + 4096, kind: Access::Store }), None);
        k.tasks[1].clock = k.tasks[0].clock - 2000;
        k.exec(1, Op::Mprotect { addr: a, len: 16 << 12, prot: prot::READ });
        k.fault_continue(0);
        assert!(k.check.violations.iter().any(|v| v.contains("I1")), "{:?}", k.check.violations);
    }

    #[test]
    fn per_vma_writer_waits_for_the_fault_holding_the_vma_and_later_faults_fall_back() {
        let (mut k, a) = setup("per_vma");
        let c0 = k.tasks[0].clock;
        assert_eq!(run_op(&mut k, 0, Op::Access { addr: a + 4096, kind: Access::Store }), Some(Ret::Val(0)));
        assert_eq!(st(&k, Stat::VmaLockSuccess), 2);
        // A writer arriving while the fault holds the VMA's read lock waits for it.
        k.tasks[1].clock = c0 + 10;
        assert_eq!(k.exec(1, Op::Mprotect { addr: a, len: 16 << 12, prot: prot::READ | prot::WRITE }), Some(Ret::Val(0)));
        let v = k.mms[0].vma_lookup(a).unwrap();
        assert!(v.vm_lock.sem.write_wait_ns > 0, "vma_start_write must wait for the in-flight fault");
        assert_eq!(v.vm_lock.lock_seq, k.mms[0].mm_lock_seq);
        // A fault while the writer holds mmap_lock sees the mark and falls back.
        let (ws, we) = (k.mms[0].cycle_log.back().unwrap().start, k.mms[0].cycle_log.back().unwrap().end);
        assert!(we > ws);
        k.tasks[0].clock = ws + (we - ws) / 2;
        assert_eq!(run_op(&mut k, 0, Op::Access { addr: a + 2 * 4096, kind: Access::Store }), Some(Ret::Val(0)));
        assert_eq!(st(&k, Stat::VmaLockAbort), 1);
        assert!(k.tasks[0].clock > we, "the fallback waits for the writer on mmap_lock");
        crate::check::audit(&mut k);
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
    }

    /// A kernel of 4 CPUs with one two-thread process (tasks 0 and 1 on
    /// CPUs 0 and 1) under SPF, with `knobs` added.
    fn boot2(knobs: &str) -> Kernel {
        boot_with(&format!("fault_locking = \"spf\"\n{knobs}"))
    }

    /// A 4-CPU kernel with `knobs`, one mm and two threads of it (tasks 0
    /// and 1 on CPUs 0 and 1).
    fn boot_with(knobs: &str) -> Kernel {
        let cfg = crate::config::from_toml(&format!("[machine]\nprofile = \"generic-x86\"\nnode_mem_mib = [256, 256]\nnr_cpus = 4\n[workload]\nname = \"mmap1\"\n[knobs]\n{knobs}"), "<test>").unwrap();
        let mut k = Kernel::boot(cfg.profile.clone(), cfg.knobs.clone(), true, 1).unwrap();
        let mm = k.new_mm();
        k.tasks.push(Task::new(0, mm, 0, 0));
        k.tasks.push(Task::new(1, mm, 1, 0));
        k.mms[mm as usize].users = 2;
        k
    }

    /// Start task `tid`'s next call after every task's last one, so that
    /// it never waits for mmap_lock (these tests are about placement).
    fn after_all(k: &mut Kernel, tid: u32) {
        k.tasks[tid as usize].clock = k.tasks.iter().map(|t| t.clock).max().unwrap() + 100_000;
    }

    /// mmap 64 KiB of anonymous memory at `addr` (MAP_FIXED) from task `tid`.
    fn map_at(k: &mut Kernel, tid: u32, addr: u64) -> u64 {
        after_all(k, tid);
        let op = Op::Mmap {
            addr,
            len: 16 << 12,
            prot: prot::READ | prot::WRITE,
            flags: map::PRIVATE | map::ANONYMOUS | map::FIXED,
            fd: -1,
            off: 0,
        };
        assert_eq!(k.exec(tid, op), Some(Ret::Val(addr as i64)));
        k.mms[0].vma_lookup(addr).unwrap().vm_lock.obj
    }

    /// A store by task `tid` to `addr`, run to completion (both SPF steps).
    fn store(k: &mut Kernel, tid: u32, addr: u64) {
        if run_op(k, tid, Op::Access { addr, kind: Access::Store }).is_none() {
            k.fault_continue(tid);
            if k.tasks[tid as usize].fault_unlock.is_some() {
                k.fault_unlock_finish(tid);
            }
        }
    }

    /// VMA 1 faulted by task 1 (CPU 1), VMA 2 by task 0 (CPU 0), pages
    /// 1..=n, the two tasks in step; VMA 1 mapped by `map1_by`. Returns
    /// the transfers paid on the mm's lines during those faults and the
    /// speculative faults done.
    fn two_vma_faults(map1_by: u32, n: u64) -> (u64, u64, u64, u64) {
        let mut k = boot2("");
        let (x, y) = (0x10_0000_0000u64, 0x10_0100_0000u64);
        map_at(&mut k, 0, 0x0f_0000_0000); // some earlier VMA of CPU 0
        let o1 = map_at(&mut k, map1_by, x);
        let o2 = map_at(&mut k, 0, y);
        // First faults (no anon_vma yet) are classic; they attach anon_vma.
        store(&mut k, map1_by, x);
        store(&mut k, 0, y);
        let (b0, s0) = (k.mms[0].lines.total_bounces(), st(&k, Stat::SpeculativePgfault));
        for i in 1..=n {
            let t = k.tasks[0].clock.max(k.tasks[1].clock);
            k.tasks[0].clock = t;
            k.tasks[1].clock = t;
            store(&mut k, 1, x + i * 4096);
            store(&mut k, 0, y + i * 4096);
        }
        assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
        (o1, o2, k.mms[0].lines.total_bounces() - b0, (st(&k, Stat::SpeculativePgfault) - s0) as u64)
    }

    /// Sixteen threads (CPUs 0-15 of a 16-CPU box) faulting their own pages
    /// of one mapping at the same instant, classic faults only: readers of
    /// mmap_lock and no writer. They stall on the count's line, one RMW after
    /// another, but none sleeps, under either rwsem.
    #[test]
    fn no_rwsem_sleep_is_charged_without_a_writer_in_the_queue() {
        for rwsem in ["5.1", "5.3+"] {
            let cfg = crate::config::from_toml(
                &format!("[machine]\nprofile = \"generic-x86\"\nnode_mem_mib = [256, 256]\nnr_cpus = 16\n[workload]\nname = \"mmap1\"\n[knobs]\n\"mmap_lock.rwsem_semantics\" = \"{rwsem}\"\n"),
                "<test>",
            )
            .unwrap();
            let mut k = Kernel::boot(cfg.profile.clone(), cfg.knobs.clone(), true, 1).unwrap();
            let mm = k.new_mm();
            for cpu in 0..16 {
                k.tasks.push(Task::new(cpu, mm, cpu, 0));
            }
            k.mms[mm as usize].users = 16;
            // Four regions of 16 pages, one per round, mapped before any fault.
            let regions: Vec<u64> = (0..4u64).map(|r| 0x10_0000_0000 + (r << 24)).collect();
            for &r in &regions {
                map_at(&mut k, 0, r);
            }
            let t = k.tasks.iter().map(|t| t.clock).max().unwrap() + 100_000;
            let (sleeps0, wait0, faults0) = (k.mms[0].mmap_lock.sleeps, k.mms[0].mmap_lock.read_wait_ns, st(&k, Stat::Pgfault));
            for (round, &r) in regions.iter().enumerate() {
                for tid in 0..16u32 {
                    k.tasks[tid as usize].clock = t + round as Ns * 50_000;
                    let op = Op::Access { addr: r + tid as u64 * 4096, kind: Access::Store };
                    assert_eq!(run_op(&mut k, tid, op), Some(Ret::Val(0)));
                }
            }
            assert_eq!(st(&k, Stat::Pgfault) - faults0, 64);
            let m = &k.mms[0].mmap_lock;
            assert!(
                m.read_wait_ns - wait0 > 16 * 200,
                "rwsem {rwsem}: the readers stall on the count's line ({} ns)",
                m.read_wait_ns - wait0
            );
            assert_eq!(m.sleeps - sleeps0, 0, "rwsem {rwsem}: a reader slept with no writer in the queue");
            assert!(k.check.violations.is_empty(), "{:?}", k.check.violations);
        }
    }

    #[test]
    fn vmas_packed_in_one_cpus_slab_share_a_line_that_spf_faults_from_two_cpus_bounce() {
        // Both VMAs allocated back to back on CPU 0: vm_sequence of the
        // first (offset 224) and vm_ref_count of the second (offset 32 of
        // the next object, 232 bytes on) fall in one 64-byte line.
        let (o1, o2, shared, spf) = two_vma_faults(0, 10);
        assert_eq!(o2, o1 + vl::SIZE, "back-to-back allocations on one CPU are neighbours");
        assert_eq!((o1 + vl::VM_SEQUENCE) / 64, (o2 + vl::VM_REF_COUNT) / 64);
        assert_eq!(spf, 20, "every fault after the first is speculative");
        // CPU 0's get_vma/put_vma on VMA 2 and CPU 1's vm_sequence reads of
        // VMA 1 (S2 and the final check) move the line at every fault.
        assert!(shared >= 20, "false sharing between neighbouring objects: {shared} transfers");
        // VMA 1 from CPU 1's own slab: no line is touched by both CPUs.
        let (o1, o2, apart, spf) = two_vma_faults(1, 10);
        assert_ne!(o1 / 4096, o2 / 4096, "different CPUs' slabs");
        assert_eq!(spf, 20);
        assert_eq!(apart, 0, "each CPU's faults stay on its own lines");
    }

    #[test]
    fn a_freed_vma_object_is_reused_by_the_next_allocation_on_that_cpu() {
        let mut k = boot2("");
        let a = map_at(&mut k, 0, 0x10_0000_0000);
        after_all(&mut k, 0);
        assert_eq!(k.exec(0, Op::Munmap { addr: 0x10_0000_0000, len: 16 << 12 }), Some(Ret::Val(0)));
        // CPU 1 allocates from its own slab, not the object CPU 0 freed.
        let b = map_at(&mut k, 1, 0x10_0100_0000);
        assert_ne!(b, a);
        assert!(b.abs_diff(a) >= 4096);
        // CPU 0's next allocation takes the object it freed last.
        assert_eq!(map_at(&mut k, 0, 0x10_0200_0000), a);
        // A split allocates the new half on the splitting CPU; the unmapped
        // half's object goes back and is reused next.
        let c = map_at(&mut k, 0, 0x10_0300_0000);
        assert_eq!(c, a + vl::SIZE);
        after_all(&mut k, 1);
        assert_eq!(k.exec(1, Op::Mprotect { addr: 0x10_0300_0000 + (8 << 12), len: 8 << 12, prot: prot::READ }), Some(Ret::Val(0)));
        let tail = k.mms[0].vma_lookup(0x10_0300_0000 + (8 << 12)).unwrap().vm_lock.obj;
        assert_eq!(k.mms[0].vma_lookup(0x10_0300_0000).unwrap().vm_lock.obj, c, "the head keeps its object");
        assert_eq!(tail, b + vl::SIZE, "the tail is CPU 1's next object");
    }

    #[test]
    fn v11_rwlock_tree_protection_bounces_one_mm_line_between_faulting_cpus() {
        for (knob, rwlock) in [("", false), ("\"spf.tree_protection\" = \"rwlock\"\n", true)] {
            let mut k = boot2(knob);
            let (x, y) = (0x10_0000_0000u64, 0x10_0100_0000u64);
            map_at(&mut k, 1, x);
            map_at(&mut k, 0, y);
            store(&mut k, 1, x);
            store(&mut k, 0, y);
            for i in 1..=8 {
                let t = k.tasks[0].clock.max(k.tasks[1].clock);
                k.tasks[0].clock = t;
                k.tasks[1].clock = t;
                store(&mut k, 1, x + i * 4096);
                store(&mut k, 0, y + i * 4096);
            }
            let l = k.mms[0].mm_rb_line();
            assert_eq!(st(&k, Stat::SpeculativePgfault), 16);
            if rwlock {
                assert!(k.mms[0].lines.bounces(l) >= 15, "read_lock/read_unlock from alternating CPUs: {}", k.mms[0].lines.bounces(l));
            } else {
                assert_eq!(k.mms[0].lines.bounces(l), 0, "v12's RCU walk writes no mm line");
            }
        }
    }

    #[test]
    fn the_gate_reads_mm_users_on_the_mmap_lock_count_line() {
        // Task 0's mmap and classic first fault left mmap_lock's line on CPU 0.
        let (mut k, a) = setup("spf");
        let b0 = k.mms[0].mmap_lock.line.bounces;
        k.tasks[1].clock = k.tasks[0].clock + 10_000;
        store(&mut k, 1, a + 4096);
        store(&mut k, 1, a + 2 * 4096);
        assert_eq!(st(&k, Stat::SpeculativePgfault), 2, "both faults speculative: no mmap_lock RMW");
        assert_eq!(k.mms[0].mmap_lock.line.bounces, b0 + 1, "G2's mm_users read fetched the line once; the copy then stays valid");
        // The next down_write/up_write on CPU 0 must invalidate CPU 1's copy.
        k.tasks[0].clock = k.tasks[1].clock + 10_000;
        assert_eq!(k.exec(0, Op::Munmap { addr: a + (12 << 12), len: 4 << 12 }), Some(Ret::Val(0)));
        assert!(k.mms[0].mmap_lock.line.bounces >= b0 + 2);
    }
}
