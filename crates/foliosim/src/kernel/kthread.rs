//! Kernel threads (kswapd, the page-reporting worker, ...) as simulated
//! tasks: each runs on a CPU, competes for it with user tasks, sleeps, and
//! is woken by kernel events or timers. A kernel thread is a task with a
//! thread function (`KthreadFn`, kernel/task.rs); its state between runs is
//! its subsystem's (the node's kswapd run, the reporting device's pass), so
//! the Kernel holds no thread bodies. A mechanism adds one by adding its
//! function to `KthreadFn` and to the match in `kthread_step`, and calling
//! `Kernel::spawn_kthread`.

use super::task::{KthreadFn, KthreadNext, Task};
use super::Kernel;
use crate::sim::Ns;

impl Kernel {
    /// Create a kernel thread running `f`, bound to `cpu`, first running
    /// at `at` (None: asleep).
    pub fn spawn_kthread(&mut self, cpu: u32, at: Option<Ns>, f: KthreadFn) -> u32 {
        let tid = self.tasks.len() as u32;
        // Kernel threads have no user mm; they borrow mm 0's id only for bookkeeping.
        let mut t = Task::new(tid, u32::MAX, cpu, at.unwrap_or(0));
        t.kthread = Some(f);
        t.sleeping = true;
        t.timer = at.is_some();
        self.tasks.push(t);
        if let Some(at) = at {
            self.wakeups.push((at, tid));
        }
        tid
    }

    /// Wake a sleeping kernel thread at time `t` (wake_up_process).
    pub fn wake_up(&mut self, tid: u32, t: Ns) {
        let tk = &mut self.tasks[tid as usize];
        if tk.sleeping && !tk.exited {
            if tk.timer && tk.clock <= t {
                return; // the timer fires first anyway
            }
            tk.clock = if tk.timer { t } else { tk.clock.max(t) };
            tk.timer = false;
            self.wakeups.push((tk.clock, tid));
        }
    }

    /// Run one step of kernel thread `tid` (called by the driver): one run
    /// of its thread function, starting at the task's clock, which charges
    /// its time by advancing that clock (and `sys_ns`). Returns when the
    /// step ended: the thread's clock, except that a timed sleep moves the
    /// clock on to the wake-up time while the CPU is free from the end of
    /// the step.
    pub fn kthread_step(&mut self, tid: u32) -> Ns {
        let next = match self.tasks[tid as usize].kthread.expect("a kernel thread") {
            KthreadFn::Kswapd(nid) => self.kswapd(tid, nid),
            KthreadFn::PageReporting => self.page_reporting_process(tid),
            #[cfg(test)]
            KthreadFn::Ticker { wake } => tests::ticker(self, tid, wake),
        };
        match next {
            KthreadNext::At(t) => {
                // A timed sleep: the CPU is free until then.
                let tk = &mut self.tasks[tid as usize];
                let ended = tk.clock;
                tk.clock = tk.clock.max(t);
                tk.sleeping = true;
                tk.timer = true;
                self.wakeups.push((tk.clock, tid));
                ended
            }
            KthreadNext::Sleep => {
                let tk = &mut self.tasks[tid as usize];
                tk.sleeping = true;
                tk.timer = false;
                tk.clock
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `KthreadFn::Ticker`: counts its runs in the task's `ops` (a kernel
    /// thread has no workload to count them) and charges 10 µs each.
    pub(super) fn ticker(k: &mut Kernel, tid: u32, wake: Option<u32>) -> KthreadNext {
        let tk = &mut k.tasks[tid as usize];
        tk.ops += 1;
        let t = tk.clock + 10_000;
        tk.clock = t;
        tk.sys_ns += 10_000;
        match wake {
            Some(w) => {
                k.wake_up(w, t);
                KthreadNext::At(t + 990_000)
            }
            None => KthreadNext::Sleep,
        }
    }

    /// A kernel thread that runs every millisecond for 10 µs, and one that
    /// sleeps until the first one wakes it.
    #[test]
    fn kernel_threads_run_on_timers_and_wake_ups() {
        let toml = "[machine]\nnode_mem_mib = [512, 512]\n[workload]\nname = \"page_fault1\"\nsize_mib = 4\n[run]\nwarmup_s = 0.0\nduration_s = 0.0105\n";
        let c = crate::config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
        let wl = crate::run::build_workload(&c).unwrap();
        let (mut sleeper, mut ticker) = (0, 0);
        let o = crate::run::simulate_hooked(
            &c,
            wl,
            &mut |k| {
                sleeper = k.spawn_kthread(1, None, KthreadFn::Ticker { wake: None });
                ticker = k.spawn_kthread(0, Some(0), KthreadFn::Ticker { wake: Some(sleeper) });
            },
            &mut |_| true,
        )
        .unwrap();
        let tasks = &o.kernel.tasks;
        // Every ms for 10.5 ms: runs at 0, 1, ..., 10 ms.
        assert_eq!(tasks[ticker as usize].ops, 11);
        assert_eq!(tasks[sleeper as usize].ops, 11, "each tick wakes the sleeper once");
        // The ticker shares CPU 0 with the page_fault1 task, which keeps running.
        let user = tasks.iter().find(|t| t.kthread.is_none()).unwrap();
        assert!(user.ops > 0);
        assert_eq!(tasks[ticker as usize].sys_ns, 11 * 10_000, "the ticker's time is charged to it");
    }
}
