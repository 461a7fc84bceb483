//! `fault_locking = "per_vma"`: Linux 6.4+ per-VMA locks
//! (lock_vma_under_rcu, mm/mmap_lock.rs `fault_per_vma`), mmap_lock when
//! that fails; a writer's vma_start_write waits for the VMA's readers.

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::kernel::Kernel;
use crate::mm::mmap_lock::{FastFault, FaultLockPolicy};
use crate::sim::Ns;
use crate::workload::Access;

pub const POLICY: Policy<&'static dyn FaultLockPolicy> =
    Policy { name: "per_vma", help: "6.4+ per-VMA locks (lock_vma_under_rcu), mmap_lock on failure", knobs: &[], build };

fn build(_: &Knobs) -> &'static dyn FaultLockPolicy {
    &PerVma
}

struct PerVma;

impl FaultLockPolicy for PerVma {
    fn fast(&self, k: &mut Kernel, _: u32, t: Ns, cpu: u32, mm: u32, addr: u64, kind: Access) -> FastFault {
        // A fault taken in kernel mode (a uaccess) goes the classic way.
        if k.fault_kernel_mode {
            return FastFault::Fallback(t);
        }
        k.fault_per_vma(t, cpu, mm, addr, kind)
    }
    fn vma_start_write_waits(&self) -> bool {
        true
    }
}
