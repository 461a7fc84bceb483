//! `fault_locking = "per_vma"`: Linux 6.4+ per-VMA locks
//! (lock_vma_under_rcu, mm/mmap_lock.rs `fault_per_vma`), mmap_lock when
//! that fails; a writer's vma_start_write waits for the VMA's readers.

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::mm::fault_lock::{FaultLockCtx, FaultLockPolicy, FaultPath};

pub const POLICY: Policy<&'static dyn FaultLockPolicy> =
    Policy { name: "per_vma", help: "6.4+ per-VMA locks (lock_vma_under_rcu), mmap_lock on failure", knobs: &[], build };

fn build(_: &Knobs) -> &'static dyn FaultLockPolicy {
    &PerVma
}

struct PerVma;

impl FaultLockPolicy for PerVma {
    fn path(&self, f: &FaultLockCtx) -> FaultPath {
        // A fault taken in kernel mode (a uaccess) goes the classic way.
        if f.kernel_mode {
            FaultPath::MmapLock
        } else {
            FaultPath::PerVma
        }
    }
    fn vma_start_write_waits(&self) -> bool {
        true
    }
}
