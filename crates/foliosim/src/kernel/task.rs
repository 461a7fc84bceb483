//! A simulated task (thread or process) as the kernel sees it.

use crate::mm::vmstat::{Entry, NR_ENTRIES};
use crate::sim::Ns;
use crate::workload::{Op, Ret};

/// A kernel thread's function (what `kthread_run` was given). The thread's
/// state between runs lives with its subsystem, so a kernel thread is only
/// this id: `Kernel::kthread_step` (kernel/kthread.rs) runs the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KthreadFn {
    /// kswapd of node `nid` (mm/kswapd.rs); its balance_pgdat run in
    /// progress is the node's (`Node::kswapd_run`).
    Kswapd(u32),
    /// The page-reporting work item, page_reporting_process
    /// (kernel/page_reporting.rs); its pass in progress is the device's
    /// (`PageReportingDev`).
    PageReporting,
    /// A test thread (kernel/kthread.rs): 10 µs of work per run; with
    /// `wake`, it wakes that thread and sleeps on a timer until the next
    /// millisecond, else it sleeps until woken.
    #[cfg(test)]
    Ticker { wake: Option<u32> },
}

/// What a kernel thread does after one run of its function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KthreadNext {
    /// Run again at this time (a timer: schedule_delayed_work, msleep).
    At(Ns),
    /// Sleep until `Kernel::wake_up` (a wait queue).
    Sleep,
}

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
    /// Time in the allocator's direct reclaim (delay accounting's
    /// freepages_delay_total; part of sys_ns).
    pub freepages_delay_ns: Ns,
    /// Result of the previous operation, handed to the workload.
    pub last: Ret,
    /// An operation in progress across steps (e.g. the rest of an access range).
    pub pending: Option<Op>,
    pub exited: bool,
    /// A speculative fault waiting for its second step (validation and install).
    pub fault_cont: Option<crate::mm::mm_types_task::SpfPending>,
    /// The thread function if this task is a kernel thread.
    pub kthread: Option<KthreadFn>,
    /// A kernel thread waiting to be woken, or for its timer.
    pub sleeping: bool,
    /// The sleep ends at `clock` by itself (a timer), unless woken earlier.
    pub timer: bool,
    /// Sequence number of this task's one valid run-queue entry (older ones are stale).
    pub qseq: u64,
    /// Unmap batches and LUF state (mm/rmap.rs).
    pub ubc: crate::mm::mm_types_task::TaskUbc,
    /// The task that forked this one (None: spawned by the workload).
    pub parent: Option<u32>,
    /// Bound to its CPU (a workload pinned it; its children inherit the
    /// affinity): wake_up_new_task does not place a child elsewhere.
    pub pinned: bool,
    /// A vfork child: the parent sleeping until this task execs or exits.
    pub vfork_parent: Option<u32>,
    /// Children not yet reaped by wait4, live or exited (zombies).
    pub children: Vec<u32>,
    /// Asleep in wait4 until a child exits (kernel/wait.rs).
    pub in_wait: bool,
    /// Asleep on mmap_lock (mm/mmap_lock.rs): what resumes when it wakes.
    pub lock_wait: Option<LockWait>,
    /// A fault of (address, access) that continues in the next step, from
    /// where it says: its next request on a shared line falls after
    /// another task's step begins, or its fast path failed after an
    /// attempt (`Kernel::fault_redo_later`).
    pub fault_redo: Option<(u64, crate::workload::Access, crate::mm::mm_types_task::FaultRedo)>,
    /// A finished fault's lock, released at the start of the task's next
    /// step (`Kernel::exec`), before the return to user mode.
    pub fault_unlock: Option<crate::mm::mm_types_task::PendingUnlock>,
    /// The address of the access a fault that spanned steps re-executes:
    /// its TLB miss and walk were counted when it first faulted.
    pub fault_retry: Option<u64>,
    /// NUMA balancing's per-task scan period and fault statistics
    /// (mm/numa_balancing.rs).
    pub numa: crate::mm::mm_types_task::TaskNuma,
}

/// Where a task sleeping on mmap_lock resumes.
#[derive(Clone, Copy, Debug)]
pub enum LockWait {
    /// A classic fault at its down_read: trap time `t0`, request at `t_req`.
    Fault { addr: u64, kind: crate::workload::Access, t0: Ns, t_req: Ns },
    /// A system call that sleeps before taking mmap_lock (for write or
    /// read); it re-enters from its start (nothing before the lock has side
    /// effects), the sleep since `t_step` charged to it.
    Syscall { t_step: Ns, write: bool },
}

impl Task {
    /// A fault of this task did not finish in its step (a speculative
    /// fault's second step, the classic fault after a failed attempt, or a
    /// fault asleep on mmap_lock): the access re-executes after it.
    #[inline]
    pub fn mid_fault(&self) -> bool {
        self.fault_resumes()
    }

    /// The rest of the fault runs in the next step (`Kernel::fault_continue`):
    /// a speculative fault's second step, the classic fault after a failed
    /// attempt, or a fault woken on mmap_lock.
    #[inline]
    pub fn fault_resumes(&self) -> bool {
        self.fault_cont.is_some() || self.fault_redo.is_some() || self.fault_waits()
    }

    #[inline]
    fn fault_waits(&self) -> bool {
        matches!(self.lock_wait, Some(LockWait::Fault { .. }))
    }

    /// The epilogue of a kernel entry (a fault, a system call, a sleep in
    /// one) that ran from `t0` to `t`: the time is the task's system time
    /// and the entry's, and the task's clock moves to `t`.
    #[inline(always)]
    pub fn charge_sys(&mut self, entry: Entry, t0: Ns, t: Ns) {
        self.entry_ns[entry as usize] += t - t0;
        self.sys_ns += t - t0;
        self.clock = t;
    }

    pub fn new(id: u32, mm: u32, cpu: u32, clock: Ns) -> Task {
        Task {
            id,
            mm,
            cpu,
            clock,
            ops: 0,
            user_ns: 0,
            freepages_delay_ns: 0,
            sys_ns: 0,
            entry_ns: [0; NR_ENTRIES],
            last: Ret::Start,
            pending: None,
            exited: false,
            fault_cont: None,
            kthread: None,
            sleeping: false,
            timer: false,
            qseq: 0,
            ubc: Default::default(),
            parent: None,
            pinned: false,
            vfork_parent: None,
            children: Vec::new(),
            in_wait: false,
            lock_wait: None,
            fault_redo: None,
            fault_unlock: None,
            fault_retry: None,
            numa: Default::default(),
        }
    }
}
