//! The mm state a task carries (include/linux/mm_types_task.h, and the
//! task_struct and vm_fault fields the mm adds): the unmap batches, NUMA
//! balancing's per-task statistics, a speculative fault between its
//! steps, the lock a finished fault still holds.
//!
//! Only the types are here, apart from the files whose functions fill
//! them through the whole kernel (mm/rmap.rs, mm/numa_balancing.rs,
//! mm/spf.rs, mm/mmap_lock.rs), so that struct Task (kernel/task.rs) and
//! the LUF pending sets (mm/luf.rs) can hold them without depending on
//! those functions.

use super::pgtable::Pte;
use super::vma::{Mm, Vma};
use super::Pfn;
use crate::sim::Ns;
use crate::workload::Access;

/// struct tlbflush_unmap_batch: the CPUs (x86 cpumask) and address spaces
/// whose TLB generation moved, waiting for one flush.
#[derive(Clone, Debug, Default)]
pub struct TlbBatch {
    pub cpus: Vec<u64>,
    /// mms whose TLB generation was bumped (x86 inc_mm_tlb_gen): a target
    /// CPU flushes their entries in full.
    pub mms: Vec<u32>,
    pub flush_required: bool,
    /// A dirty PTE was cleared: flush before writeback IO.
    pub writable: bool,
}

impl TlbBatch {
    /// arch_tlbbatch_add_pending (x86): OR in mm_cpumask and bump the mm's generation.
    pub fn add_mm(&mut self, mm: &Mm) {
        if self.cpus.len() < mm.cpumask.len() {
            self.cpus.resize(mm.cpumask.len(), 0);
        }
        for (w, &b) in self.cpus.iter_mut().zip(&mm.cpumask) {
            *w |= b;
        }
        if !self.mms.contains(&mm.id) {
            self.mms.push(mm.id);
        }
        self.flush_required = true;
    }

    /// arch_tlbbatch_fold: move `other` into this batch, leaving it empty.
    pub fn fold(&mut self, other: &mut TlbBatch) {
        if !other.flush_required {
            return;
        }
        if self.cpus.len() < other.cpus.len() {
            self.cpus.resize(other.cpus.len(), 0);
        }
        for (w, &b) in self.cpus.iter_mut().zip(&other.cpus) {
            *w |= b;
        }
        for &m in &other.mms {
            if !self.mms.contains(&m) {
                self.mms.push(m);
            }
        }
        self.flush_required = true;
        self.writable |= other.writable;
        other.clear();
    }

    /// arch_tlbbatch_clear.
    pub fn clear(&mut self) {
        self.cpus.iter_mut().for_each(|w| *w = 0);
        self.mms.clear();
        self.flush_required = false;
        self.writable = false;
    }

    /// arch_tlbbatch_done: drop the CPUs of a finished flush; true if none is left.
    pub fn done(&mut self, flushed: &[u64]) -> bool {
        for (w, &b) in self.cpus.iter_mut().zip(flushed) {
            *w &= !b;
        }
        let empty = self.cpus.iter().all(|&w| w == 0);
        if empty {
            self.clear();
        }
        empty
    }

    pub fn has_cpu(&self, cpu: u32) -> bool {
        self.cpus.get((cpu / 64) as usize).is_some_and(|w| w & (1 << (cpu % 64)) != 0)
    }

    pub fn cpus_iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.cpus
            .iter()
            .enumerate()
            .flat_map(|(w, &bits)| (0..64u32).filter(move |b| bits & (1u64 << b) != 0).map(move |b| w as u32 * 64 + b))
    }
}

/// A task's unmap batches (current->tlb_ubc, tlb_ubc_ro, tlb_ubc_luf) and
/// its LUF state.
#[derive(Clone, Debug, Default)]
pub struct TaskUbc {
    pub ubc: TlbBatch,
    /// Read-only PTEs of the folio being unmapped.
    pub ro: TlbBatch,
    /// CPUs of LUF-able folios not yet handed to the global pending set.
    pub luf: TlbBatch,
    /// The current folio's walk met only read-only PTEs so far.
    pub can_luf: bool,
    /// Latest generation of the free pages this task took out of the
    /// allocator and has not checked yet (current->luf_ugen).
    pub ugen: u16,
}

/// A task's NUMA-balancing state (task_struct's numa_* fields).
#[derive(Clone, Copy, Debug, Default)]
pub struct TaskNuma {
    /// p->numa_scan_period, ms; 0 until first needed, when it takes
    /// init_numa_balancing's value (the scan delay) or, at the task's
    /// first scan, task_scan_start.
    pub scan_period_ms: u64,
    /// task_tick_numa has set p->node_stamp: the task has scanned.
    pub ticked: bool,
    /// p->numa_scan_period_max, ms.
    pub scan_period_max_ms: u64,
    /// p->numa_scan_seq: the mm's pass count at the task's last placement.
    pub scan_seq: u32,
    /// p->numa_faults_locality: pages of remote and local hint faults and
    /// of failed migrations since the last placement.
    pub faults_locality: [u64; 3],
    /// The NUMA_MEMBUF faults since the last placement: shared, private.
    pub faults_buf: [u64; 2],
}

/// FAULT_FLAG_* (include/linux/mm_types.h): what a fault knows of how
/// it was taken. The access kind (FAULT_FLAG_WRITE, FAULT_FLAG_INSTRUCTION)
/// is `Access` in the fault itself.
pub mod fault_flag {
    /// Taken from user mode (a trap), not on the kernel's behalf
    /// (MAP_POPULATE, exec copying its arguments: the fast fault-locking
    /// paths are not tried and the lock is released in the same step).
    pub const USER: u32 = 1 << 6;
    /// Handled under the VMA's read lock, not mmap_lock (lock_vma_under_rcu).
    pub const VMA_LOCK: u32 = 1 << 12;
    /// Handled speculatively, from a snapshot of the VMA (the SPF series'
    /// FAULT_FLAG_SPECULATIVE).
    pub const SPECULATIVE: u32 = 1 << 13;
}

/// A page fault as the arch entry takes it (do_user_addr_fault, before a
/// VMA is found): which task faulted on which CPU in which mm, at which
/// address and how, and when it trapped, the time its epilogue charges
/// from (`Task::charge_sys`).
#[derive(Clone, Copy, Debug)]
pub struct PageFault {
    pub tid: u32,
    pub mm: u32,
    pub cpu: u32,
    /// The address as accessed (vmf->real_address).
    pub addr: u64,
    pub kind: Access,
    /// `fault_flag` bits.
    pub flags: u32,
    /// When the fault trapped (or the step it resumes in began).
    pub t0: Ns,
}

impl PageFault {
    #[inline(always)]
    pub fn user(&self) -> bool {
        self.flags & fault_flag::USER != 0
    }

    /// The fault once its VMA is found: struct vm_fault, its orig_pte not
    /// read yet.
    #[inline(always)]
    pub fn with_vma<'a>(&self, vma: &'a Vma, flags: u32) -> VmFault<'a> {
        VmFault {
            tid: self.tid,
            mm: self.mm,
            cpu: self.cpu,
            vma,
            address: self.addr & !4095,
            kind: self.kind,
            flags: self.flags | flags,
            orig_pte: Pte::NONE,
        }
    }
}

/// struct vm_fault: one fault as the mm handles it once its VMA is found
/// (the copy the fault works from: the VMA may change under a fault that
/// does not hold mmap_lock), the page-aligned address, the access, the
/// flags and the PTE as first read. The handlers take it with the time
/// and return the time they finish.
#[derive(Clone, Copy, Debug)]
pub struct VmFault<'a> {
    pub tid: u32,
    pub mm: u32,
    pub cpu: u32,
    pub vma: &'a Vma,
    /// The faulting address, page-aligned (vmf->address).
    pub address: u64,
    pub kind: Access,
    /// `fault_flag` bits.
    pub flags: u32,
    /// The PTE as handle_pte_fault first read it (vmf->orig_pte): what a
    /// handler compares the slot against under the PTL.
    pub orig_pte: Pte,
}

impl VmFault<'_> {
    #[inline(always)]
    pub fn write(&self) -> bool {
        self.kind == Access::Store
    }
}

/// A speculative fault between its two steps (the parts of struct vm_fault
/// the series adds: the sequence snapshot, the flags snapshot, orig_pte).
#[derive(Clone, Debug)]
pub struct SpfPending {
    pub addr: u64,
    pub kind: Access,
    /// The VMA as snapshotted (its `seq` is vmf->sequence).
    pub vma: Vma,
    pub orig_pte: Pte,
    /// The page allocated and zeroed for a write to a none PTE.
    pub page: Option<Pfn>,
    /// When the attempt began (for wasted-time accounting) and the trap entry.
    pub t_begin: Ns,
    pub t_trap: Ns,
    /// mm_lock_seq and the read-side bump count at the snapshot.
    pub cycle: u64,
    pub read_bumps: u64,
    /// The VMA's vm_area_struct (the pinned pointer): its lines.
    pub obj: u64,
}

/// The lock a finished fault still holds. Its release is an RMW on a line
/// other CPUs use, a whole fault after the step began: the step ends there
/// (a faulting access ends its step), and the task's next step makes it, at
/// its own time (`fault_unlock_finish`), so the line sees it in arrival
/// order among the other CPUs' requests.
#[derive(Clone, Copy, Debug)]
pub enum FaultUnlock {
    /// mmap_read_unlock.
    MmapRead,
    /// vma_end_read of the VMA at `key`, whose vma_lock object is `lock_obj`.
    VmaRead { key: u64, lock_obj: u64 },
}

/// Where a fault that ended its step before its next request on a shared
/// line resumes (`Task::fault_redo`), from the time the step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultRedo {
    /// Its entry, right after the trap: the fault-locking policy's way in,
    /// whose first request (down_read, SPF's read of mm_users, the VMA
    /// lock's trylock) falls after another task's step begins.
    Entry,
    /// The classic fault under mmap_lock: after a fast path's failed
    /// attempt, or a fallback whose down_read falls after another task's
    /// step begins.
    Classic,
}

/// A fault that still holds its lock (`Task::fault_unlock`): what to
/// release, when the fault was entered, and when it finished.
#[derive(Clone, Copy, Debug)]
pub struct PendingUnlock {
    pub what: FaultUnlock,
    pub t0: Ns,
    pub at: Ns,
}

/// How a fault ended (vm_fault_t).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Done,
    /// SIGSEGV: no VMA or the VMA forbids the access.
    Segv,
    /// Out of memory with nothing reclaimable.
    Oom,
    /// A speculative fault ended its step after its snapshot and continues
    /// in the task's next step (`Task::fault_cont`), or the fault sleeps on
    /// mmap_lock behind a queued writer (`Task::lock_wait`).
    Pending,
}
