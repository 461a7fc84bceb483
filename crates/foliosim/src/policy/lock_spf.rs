//! `fault_locking = "spf"`: the speculative page fault series (SPF v12,
//! mm/spf.rs): an RCU lookup and a vm_sequence snapshot validated under
//! the PTL, mmap_lock when it aborts.

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::kernel::Kernel;
use crate::mm::mmap_lock::{FastFault, FaultLockPolicy};
use crate::sim::Ns;
use crate::workload::Access;

pub const POLICY: Policy<&'static dyn FaultLockPolicy> =
    Policy { name: "spf", help: "speculative page faults (SPF v12), mmap_lock on abort", knobs: &[], build };

fn build(_: &Knobs) -> &'static dyn FaultLockPolicy {
    &Spf
}

struct Spf;

impl FaultLockPolicy for Spf {
    fn fast(&self, k: &mut Kernel, tid: u32, t: Ns, cpu: u32, mm: u32, addr: u64, kind: Access) -> FastFault {
        k.spf_fault_begin(tid, t, cpu, mm, addr, kind)
    }
}
