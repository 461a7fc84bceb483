//! wait4 (kernel/exit.c do_wait): a parent reaps its exited children,
//! sleeping until one exits. make -jN keeps N children alive this way.
//! And nanosleep: a task sleeping on a timer.

use super::Kernel;
use crate::mm::vmstat::{Entry, Stat};
use crate::sim::Ns;
use crate::workload::{errno, Op, Ret};

impl Kernel {
    /// wait4(-1, ...) by `tid`: Some(child id) when a zombie was reaped,
    /// Some(ECHILD) without children, None when the task went to sleep
    /// (the call is re-run when a child's exit wakes it).
    pub fn do_wait4(&mut self, tid: u32) -> Option<Ret> {
        let t0 = self.tasks[tid as usize].clock;
        let zombie = self.tasks[tid as usize].children.iter().position(|&c| self.tasks[c as usize].exited);
        let r = match zombie {
            Some(i) => {
                // release_task: the zombie's last state goes with the reap.
                let c = self.tasks[tid as usize].children.remove(i);
                self.tasks[c as usize].parent = None;
                self.stat.inc(Stat::WaitReaped);
                Some(Ret::Val(c as i64))
            }
            None if self.tasks[tid as usize].children.is_empty() => Some(Ret::Err(errno::ECHILD)),
            None => None,
        };
        let t = t0 + self.c.syscall / 2;
        let tk = &mut self.tasks[tid as usize];
        if r.is_none() {
            // Sleep on the wait queue: the CPU is free until a child exits
            // (the syscall's entry half is charged now, its exit half after).
            tk.in_wait = true;
            tk.sleeping = true;
            tk.timer = false;
            tk.pending = Some(Op::Wait);
        } else {
            tk.in_wait = false;
        }
        tk.charge_sys(Entry::Wait4, t0, t);
        r
    }

    /// nanosleep (kernel/time/hrtimer.c hrtimer_nanosleep): the task
    /// sleeps on a timer `ns` from now, its CPU free meanwhile (the driver
    /// wakes it then). The call's entry and exit, with their tracepoints
    /// and the task work on return, are `Kernel::sys`'s like any call's:
    /// they are charged before the sleep, the way a profiler that counts
    /// a sleeping task's CPU time sees them.
    pub(crate) fn hrtimer_nanosleep(&mut self, tid: u32, ns: Ns) {
        let tk = &mut self.tasks[tid as usize];
        tk.sleeping = true;
        tk.timer = true;
        self.wakeups.push((tk.clock + ns, tid));
    }

    /// do_notify_parent: a task that exited wakes its parent if it waits.
    pub(crate) fn notify_parent(&mut self, tid: u32) {
        let Some(p) = self.tasks[tid as usize].parent else { return };
        let t = self.tasks[tid as usize].clock;
        if self.tasks[p as usize].in_wait {
            self.tasks[p as usize].in_wait = false;
            self.wake_up(p, t);
        }
    }

    /// forget_original_parent: children of an exiting task are reparented
    /// to init, which reaps them; here they simply lose their parent.
    pub(crate) fn reparent_children(&mut self, tid: u32) {
        for c in std::mem::take(&mut self.tasks[tid as usize].children) {
            self.tasks[c as usize].parent = None;
        }
    }
}
