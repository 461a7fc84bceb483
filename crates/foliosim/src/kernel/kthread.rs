//! Kernel threads (kswapd, the page-reporting worker, the NUMA scanner, ...)
//! as simulated tasks: each runs on a CPU, competes for it with user tasks,
//! sleeps, and is woken by kernel events or timers. A mechanism adds one by
//! implementing `Kthread` and calling `Kernel::spawn_kthread`.

use super::task::Task;
use super::Kernel;
use crate::sim::Ns;

/// What a kernel thread does after one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KthreadNext {
    /// Run again at this time (a timer: schedule_delayed_work, msleep).
    At(Ns),
    /// Sleep until `Kernel::wake_up` (a wait queue).
    Sleep,
}

pub trait Kthread: Send {
    fn name(&self) -> &str;
    /// One run starting at `k.tasks[tid].clock`; charge time by advancing
    /// that clock (and `sys_ns`).
    fn run(&mut self, k: &mut Kernel, tid: u32) -> KthreadNext;
}

impl Kernel {
    /// Create a kernel thread bound to `cpu`, first running at `at` (None: asleep).
    pub fn spawn_kthread(&mut self, cpu: u32, at: Option<Ns>, body: Box<dyn Kthread>) -> u32 {
        let tid = self.tasks.len() as u32;
        // Kernel threads have no user mm; they borrow mm 0's id only for bookkeeping.
        let mut t = Task::new(tid, u32::MAX, cpu, at.unwrap_or(0));
        t.kthread = Some(self.kthreads.len() as u32);
        t.sleeping = true;
        t.timer = at.is_some();
        self.kthreads.push(Some(body));
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

    /// Run one step of kernel thread `tid` (called by the driver). Returns
    /// when the step ended: the thread's clock, except that a timed sleep
    /// moves the clock on to the wake-up time while the CPU is free from
    /// the end of the step.
    pub fn kthread_step(&mut self, tid: u32) -> Ns {
        let i = self.tasks[tid as usize].kthread.expect("a kernel thread") as usize;
        let mut body = self.kthreads[i].take().expect("kthread re-entered");
        let next = body.run(self, tid);
        self.kthreads[i] = Some(body);
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
