//! The fault-locking policy interface (`fault_locking`): which way a fault
//! enters before it would take mmap_lock for read, decided from a
//! read-only view of the fault, and what a writer's vma_start_write waits
//! for. The ways themselves (the classic mmap_lock read side, per-VMA
//! locks, speculative faults) are carried out by the kernel in
//! mm/mmap_lock.rs and mm/spf.rs; the policies live in policy/, one file
//! each. Nothing here imports the Kernel, so that struct Kernel can hold
//! a policy and the fault trace.

use super::mm_types_task::{Fault, FaultUnlock};
use crate::sim::Ns;
use crate::workload::Access;

/// What a fault-locking policy sees of a fault as it enters from the trap.
#[derive(Clone, Copy, Debug)]
pub struct FaultLockCtx {
    pub mm: u32,
    pub cpu: u32,
    pub addr: u64,
    pub kind: Access,
    /// Taken in kernel mode (a uaccess, e.g. exec copying its arguments).
    pub kernel_mode: bool,
}

/// The way a fault enters, as a policy chose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPath {
    /// Take mmap_lock for read and run the classic fault.
    MmapLock,
    /// Look the VMA up under RCU and read-lock it (lock_vma_under_rcu,
    /// mm/memory.c, 6.4+); mmap_lock when that fails.
    PerVma,
    /// The speculative page fault (SPF v12, mm/spf.rs); mmap_lock when it
    /// aborts.
    Spf,
}

/// A fault-locking policy. Implementations are stateless (knobs are read
/// when the policy is built).
pub trait FaultLockPolicy: Sync {
    /// The way the fault described by `f` enters.
    fn path(&self, f: &FaultLockCtx) -> FaultPath;
    /// vma_start_write waits for the faults holding the VMA's lock for
    /// read (per-VMA locks); otherwise it only marks the VMA.
    fn vma_start_write_waits(&self) -> bool {
        false
    }
}

/// What the fast path of a fault did.
pub enum FastFault {
    /// Finished (success or signal) at the given time.
    Done(Fault, Ns),
    /// Finished at the given time, still holding a lock to release.
    Unlock(Fault, Ns, FaultUnlock),
    /// The fault continues in a later step (`Task::fault_cont`); the step ends here.
    Pending(Ns),
    /// Not handled: take mmap_lock for read and run the classic fault from here.
    Fallback(Ns),
    /// Not handled after an attempt: the classic fault runs in the task's
    /// next step, at the given time (`Kernel::fault_redo_later`).
    Redo(Ns),
}

/// One record of the fault-locking trace (`debug.fault_trace`): when the
/// fault's step began, its CPU and address, and the event (a counter's name).
pub type FaultTraceEvent = (Ns, u32, u64, &'static str);
