//! fork (kernel/fork.c dup_mmap, mm/memory.c copy_page_range) and exit
//! (exit_mmap).

use super::mem_map::pg;
use super::mmu_gather::MmuGather;
use super::pgtable::{pte_index, Pte};
use super::vma::{Mm, MmCounter};
use super::vmstat::{Entry, Stat};
use crate::kernel::task::Task;
use crate::kernel::Kernel;
use crate::workload::{errno, Ret};

impl Kernel {
    /// fork(): a new process whose mm copies the parent's. Private anonymous
    /// pages become shared copy-on-write: write-protected in both, mapcount
    /// raised, AnonExclusive cleared. File VMAs without anon pages are not
    /// copied; their PTEs are refilled by faults (as copy_page_range skips them).
    pub fn do_fork(&mut self, tid: u32) -> Ret {
        let (pmm, cpu, t0) = {
            let tk = &self.tasks[tid as usize];
            (tk.mm, tk.cpu, tk.clock)
        };
        let _lc = self.lc;
        let mut t = self.mmap_write_lock(t0 + self.c.syscall / 2, cpu, pmm);
        // dup_mmap: vma_start_write on every parent VMA (the 6.4 fix; SPF
        // patch 18 marks them too): their PTEs are write-protected below.
        t = self.vma_start_write_range(t, cpu, pmm, 0, u64::MAX);
        t += self.c.fork_base;
        let cmm = self.new_mm();
        let vmas: Vec<_> = self.mms[pmm as usize].vmas.values().cloned().collect();
        {
            let (brk_start, brk, mmap_base, fds) = {
                let p = &self.mms[pmm as usize];
                (p.brk_start, p.brk, p.mmap_base, p.fds.clone())
            };
            let c: &mut Mm = &mut self.mms[cmm as usize];
            c.brk_start = brk_start;
            c.brk = brk;
            c.mmap_base = mmap_base;
            c.fds = fds;
            for v in &vmas {
                let mut v = v.clone();
                v.seq = 0;
                // vm_area_dup on the forking CPU.
                v.vm_lock = c.vma_obj_alloc(cpu);
                c.vmas.insert(v.start, v);
            }
        }
        let mut wrprotected = false;
        for v in &vmas {
            if v.anon_vma == 0 {
                continue; // copy_page_range: nothing a fault could not refill
            }
            let mut va = v.start;
            while va < v.end {
                let next_tbl = ((va >> 21) + 1) << 21;
                let pte = match self.mms[pmm as usize].pt.table(va) {
                    None => {
                        va = next_tbl;
                        continue;
                    }
                    Some(tbl) => tbl.ptes[pte_index(va)],
                };
                if pte.present() {
                    let mut pte = pte;
                    if !v.is_shared() && pte.write() {
                        pte = pte.without(Pte::WRITE);
                        self.mms[pmm as usize].pt.table_mut(va).unwrap().ptes[pte_index(va)] = pte;
                        wrprotected = true;
                    }
                    match self.pte_alloc_pub(t, cpu, cmm, va) {
                        Some(t1) => t = t1,
                        None => return self.fork_fail(tid, cmm, t0, t),
                    }
                    let tbl = self.mms[cmm as usize].pt.table_mut(va).unwrap();
                    tbl.ptes[pte_index(va)] = pte;
                    tbl.nr_present += 1;
                    t += self.c.copy_pte;
                    if pte.special() {
                        self.stat.inc(Stat::NrZeroPageMapped);
                    } else {
                        let pfn = pte.pfn();
                        // One folio reference per PTE, on the head (docs/mechanisms/large-anon-folios.md#rules-it-implements, I-1).
                        let head = self.mem_map.folio_head(pfn);
                        self.mem_map.get_mut(head).refcount += 1;
                        let p = self.mem_map.get_mut(pfn);
                        p.mapcount += 1;
                        if p.flags & pg::ANON != 0 {
                            p.flags &= !pg::ANON_EXCLUSIVE;
                            self.mms[cmm as usize].add_mm_counter(MmCounter::AnonPages, 1);
                        } else {
                            self.mms[cmm as usize].add_mm_counter(MmCounter::FilePages, 1);
                        }
                    }
                } else if pte.is_swap() {
                    // copy_nonpresent_pte: the child's PTE names the slot too.
                    if !self.swap.swap_duplicate(pte.swp_offset()) {
                        return self.fork_fail(tid, cmm, t0, t);
                    }
                    match self.pte_alloc_pub(t, cpu, cmm, va) {
                        Some(t1) => t = t1,
                        None => {
                            self.swap.swap_free(pte.swp_offset());
                            return self.fork_fail(tid, cmm, t0, t);
                        }
                    }
                    let tbl = self.mms[cmm as usize].pt.table_mut(va).unwrap();
                    tbl.ptes[pte_index(va)] = pte;
                    tbl.nr_present += 1;
                    self.mms[cmm as usize].add_mm_counter(MmCounter::SwapEnts, 1);
                    t += self.c.pte_set;
                }
                va += 4096;
            }
        }
        if wrprotected {
            // The parent's writable translations must go before anyone
            // writes, a secondary MMU's too (copy_page_range's notifier).
            t += self.mms[pmm as usize].mmu_notifier_invalidate(0, !4095, t);
            t = self.flush_tlb_mm_range(t, cpu, pmm, 0, !4095, false);
        }
        let t = self.mmap_write_unlock(t, cpu, pmm) + self.c.syscall / 2;
        let child = self.new_child_task(tid, cmm, t);
        self.tasks[child as usize].parent = Some(tid);
        self.tasks[tid as usize].children.push(child);
        self.stat.inc(Stat::Fork);
        let tk = &mut self.tasks[tid as usize];
        tk.charge_sys(Entry::Fork, t0, t);
        Ret::Val(child as i64)
    }

    /// clone() with CLONE_VM: a thread (CLONE_THREAD) or a vfork child
    /// (CLONE_VFORK), copy_process without dup_mmap: the new task shares
    /// the caller's mm. A vfork child is the caller's child (wait4 reaps
    /// it) and the caller sleeps until it execs or exits
    /// (wait_for_vfork_done). Returns the new task's id.
    pub fn do_clone_vm(&mut self, tid: u32, vfork: bool) -> Ret {
        let (mm, t0) = {
            let tk = &self.tasks[tid as usize];
            (tk.mm, tk.clock)
        };
        let t = t0 + self.c.syscall;
        self.mms[mm as usize].mmget();
        let child = self.new_child_task(tid, mm, t);
        if vfork {
            self.tasks[child as usize].parent = Some(tid);
            self.tasks[child as usize].vfork_parent = Some(tid);
            self.tasks[tid as usize].children.push(child);
            self.stat.inc(Stat::Fork);
        }
        let tk = &mut self.tasks[tid as usize];
        tk.entry_ns[Entry::Fork as usize] += t - t0;
        tk.sys_ns += t - t0;
        tk.clock = t;
        if vfork {
            tk.sleeping = true;
            tk.timer = false;
        }
        Ret::Val(child as i64)
    }

    /// A new task of `parent` in mm `mm`, runnable at `t` on the CPU
    /// wake_up_new_task gives it, its first step returning 0.
    fn new_child_task(&mut self, parent: u32, mm: u32, t: u64) -> u32 {
        let cpu = self.select_task_rq_fork(parent);
        let child = self.tasks.len() as u32;
        let mut ct = Task::new(child, mm, cpu, t);
        ct.last = Ret::Val(0);
        // The CPU affinity is inherited.
        ct.pinned = self.tasks[parent as usize].pinned;
        self.tasks.push(ct);
        self.mms[mm as usize].cpumask_set(cpu);
        child
    }

    /// wake_up_new_task's CPU for a child of `parent`: a pinned parent's
    /// (the child inherits its affinity); otherwise, as
    /// select_task_rq_fair's fork balancing (sched_balance_find_dst_cpu),
    /// the least loaded CPU: the fewest runnable tasks there (sleepers in
    /// wait4 or vfork do not count; the parent does), the parent's own on a
    /// tie (the local group is not left for an equally loaded one), else
    /// the first after it. Tasks stay on their CPU after (the model has no
    /// periodic load balancing).
    fn select_task_rq_fork(&mut self, parent: u32) -> u32 {
        let (pcpu, pinned) = {
            let tk = &self.tasks[parent as usize];
            (tk.cpu, tk.pinned)
        };
        if pinned {
            return pcpu;
        }
        // The tasks made since the last look, then forget the exited ones.
        let n = self.tasks.len();
        self.live_tasks.extend(self.live_seen as u32..n as u32);
        self.live_seen = n;
        let tasks = &self.tasks;
        self.live_tasks.retain(|&t| !tasks[t as usize].exited);
        let nr = self.cpus.len();
        let mut load = vec![0u32; nr];
        for &t in &self.live_tasks {
            let tk = &tasks[t as usize];
            if (!tk.sleeping || t == parent) && (tk.cpu as usize) < nr {
                load[tk.cpu as usize] += 1;
            }
        }
        let n = nr as u32;
        (0..n).map(|i| (pcpu + i) % n).min_by_key(|&c| load[c as usize]).unwrap_or(pcpu)
    }

    fn fork_fail(&mut self, tid: u32, cmm: u32, t0: u64, t: u64) -> Ret {
        self.exit_mmap(t, self.tasks[tid as usize].cpu, cmm);
        let tk = &mut self.tasks[tid as usize];
        tk.clock = t;
        tk.sys_ns += t - t0;
        Ret::Err(errno::ENOMEM)
    }

    /// exit(): the task leaves; the last user of an mm tears it down.
    pub fn do_exit(&mut self, tid: u32) {
        let (mm, cpu, t0) = {
            let tk = &self.tasks[tid as usize];
            (tk.mm, tk.cpu, tk.clock)
        };
        let mut t = t0 + self.c.exit_base;
        self.mms[mm as usize].users -= 1;
        if self.mms[mm as usize].users == 0 {
            t = self.exit_mmap(t, cpu, mm);
        }
        self.stat.inc(Stat::Exit);
        let tk = &mut self.tasks[tid as usize];
        tk.charge_sys(Entry::Exit, t0, t);
        tk.exited = true;
        // mm_release: a vfork parent waits no longer.
        if let Some(p) = tk.vfork_parent.take() {
            self.wake_up(p, t);
        }
        self.reparent_children(tid);
        self.notify_parent(tid);
    }

    /// exit_mmap: zap everything, free all page tables, forget the mm.
    pub fn exit_mmap(&mut self, t: u64, cpu: u32, mm: u32) -> u64 {
        let mut t = self.lru_add_drain_cpu(t, cpu);
        // exit_mm ran first: every CPU of the mm, this one included, is in
        // lazy TLB mode on it, and none switches back. Flushes of it from
        // here reach no CPU (x86 flush_tlb_func moves a lazy CPU to
        // init_mm without flushing the ASID): its entries stay, unreachable,
        // until another mm takes the ASID slot (arch/x86/tlbflush.rs).
        self.mms[mm as usize].alive = false;
        let vmas = self.mms[mm as usize].vmas.take_all();
        let mut tlb = MmuGather::new(mm, true);
        for v in &vmas {
            t = self.zap_page_range(t, cpu, mm, v.start, v.end, &mut tlb);
        }
        t += self.unlink_vmas(mm, &vmas);
        t += self.free_pgtables_walk(&tlb);
        self.free_pgtables(mm, 0, super::vma::TASK_SIZE, &mut tlb);
        t = self.tlb_finish_mmu(t, cpu, tlb);
        let m = &mut self.mms[mm as usize];
        m.alive = false;
        m.fds.clear();
        t
    }
}
