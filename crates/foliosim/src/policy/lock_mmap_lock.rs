//! `fault_locking = "mmap_lock"`: every fault takes mmap_lock for read
//! (the classic fault; no fast path).

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::kernel::Kernel;
use crate::mm::mmap_lock::{FastFault, FaultLockPolicy};
use crate::sim::Ns;
use crate::workload::Access;

pub const POLICY: Policy<&'static dyn FaultLockPolicy> =
    Policy { name: "mmap_lock", help: "every fault takes mmap_lock for read", knobs: &[], build };

fn build(_: &Knobs) -> &'static dyn FaultLockPolicy {
    &MmapLock
}

struct MmapLock;

impl FaultLockPolicy for MmapLock {
    fn fast(&self, _: &mut Kernel, _: u32, t: Ns, _: u32, _: u32, _: u64, _: Access) -> FastFault {
        FastFault::Fallback(t)
    }
}
