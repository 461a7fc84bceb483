//! A simulated task (thread or process) as the kernel sees it.

use crate::mm::vmstat::NR_ENTRIES;
use crate::sim::Ns;
use crate::workload::{Op, Ret};

pub struct Task {
    pub id: u32,
    pub mm: u32,
    pub cpu: u32,
    /// The task's own simulated clock: when its next step starts.
    pub clock: Ns,
    /// Operations counted by the workload (will-it-scale's counter).
    pub ops: u64,
    pub user_ns: Ns,
    pub sys_ns: Ns,
    pub entry_ns: [Ns; NR_ENTRIES],
    /// Result of the previous operation, handed to the workload.
    pub last: Ret,
    /// An operation in progress across steps (e.g. the rest of an access range).
    pub pending: Option<Op>,
    pub exited: bool,
    /// A speculative fault waiting for its second step (validation and install).
    pub fault_cont: Option<crate::mm::spf::SpfPending>,
    /// Index of this task's body in `Kernel::kthreads` if it is a kernel thread.
    pub kthread: Option<u32>,
    /// A kernel thread waiting to be woken, or for its timer.
    pub sleeping: bool,
    /// The sleep ends at `clock` by itself (a timer), unless woken earlier.
    pub timer: bool,
    /// Sequence number of this task's one valid run-queue entry (older ones are stale).
    pub qseq: u64,
    /// Unmap batches and LUF state (mm/rmap.rs).
    pub ubc: crate::mm::rmap::TaskUbc,
    /// The task that forked this one (None: spawned by the workload).
    pub parent: Option<u32>,
    /// Children not yet reaped by wait4, live or exited (zombies).
    pub children: Vec<u32>,
    /// Asleep in wait4 until a child exits (kernel/wait.rs).
    pub in_wait: bool,
}

impl Task {
    pub fn new(id: u32, mm: u32, cpu: u32, clock: Ns) -> Task {
        Task { id, mm, cpu, clock, ops: 0, user_ns: 0, sys_ns: 0, entry_ns: [0; NR_ENTRIES], last: Ret::Start, pending: None, exited: false, fault_cont: None, kthread: None, sleeping: false, timer: false, qseq: 0, ubc: Default::default(), parent: None, children: Vec::new(), in_wait: false }
    }
}
