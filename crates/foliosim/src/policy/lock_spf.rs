//! `fault_locking = "spf"`: the speculative page fault series (SPF v12,
//! mm/spf.rs): an RCU lookup and a vm_sequence snapshot validated under
//! the PTL, mmap_lock when it aborts.

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::mm::fault_lock::{FaultLockCtx, FaultLockPolicy, FaultPath};

pub const POLICY: Policy<&'static dyn FaultLockPolicy> =
    Policy { name: "spf", help: "speculative page faults (SPF v12), mmap_lock on abort", knobs: &[], build };

fn build(_: &Knobs) -> &'static dyn FaultLockPolicy {
    &Spf
}

struct Spf;

impl FaultLockPolicy for Spf {
    fn path(&self, _: &FaultLockCtx) -> FaultPath {
        FaultPath::Spf
    }
}
