//! `fault_locking = "mmap_lock"`: every fault takes mmap_lock for read
//! (the classic fault; no fast path).

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::mm::fault_lock::{FaultLockCtx, FaultLockPolicy, FaultPath};

pub const POLICY: Policy<&'static dyn FaultLockPolicy> =
    Policy { name: "mmap_lock", help: "every fault takes mmap_lock for read", knobs: &[], build };

fn build(_: &Knobs) -> &'static dyn FaultLockPolicy {
    &MmapLock
}

struct MmapLock;

impl FaultLockPolicy for MmapLock {
    fn path(&self, _: &FaultLockCtx) -> FaultPath {
        FaultPath::MmapLock
    }
}
