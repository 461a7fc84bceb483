//! The simulation driver: boots the kernel, lets the workload set up, runs
//! task steps in simulated-time order, samples counters, collects results.

use crate::check;
use crate::config::Config;
use crate::kernel::knobs::Mutant;
use crate::kernel::{Kernel, HOST_WOKE};
use crate::mm::vmstat::{Stat, ENTRY_NAMES, NR_STATS, STAT_NAMES};
use crate::sim::{Ns, NSEC_PER_SEC};
use crate::types::{Error, Progress};
use crate::workload::{
    self,
    params::{Params, RawParams},
    AccessRun, FileId, FsKind, Op, Ret, SetupEnv, TaskId, Workload,
};
use serde_json::{json, Map, Value};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

struct Env<'a> {
    k: &'a mut Kernel,
    seed: u64,
    next_cpu: u32,
    /// The stand-in file of the process images' mappings, once made.
    image_file: Option<FileId>,
    /// Tasks whose image is mapped, to touch once their clocks are set.
    imaged: Vec<TaskId>,
    /// The mmap base of the launcher the workload's processes are forked
    /// from (will-it-scale's main, a shell), chosen at its exec.
    launcher_mmap_base: Option<u64>,
}

impl SetupEnv for Env<'_> {
    fn nr_cpus(&self) -> u32 {
        self.k.nr_cpus()
    }
    fn mem_bytes(&self) -> u64 {
        self.k.mem_bytes()
    }
    fn create_file(&mut self, fs: FsKind, size: u64, populate: bool) -> Result<FileId, Error> {
        let id = self.k.new_inode(fs, size);
        if populate {
            self.k.populate_file(id)?;
        }
        Ok(id)
    }
    fn create_file_on_disk(&mut self, fs: FsKind, size: u64) -> Result<FileId, Error> {
        Ok(self.k.new_inode_on_disk(fs, size))
    }
    fn create_file_on(&mut self, fs: FsKind, size: u64, populate: bool, node: Option<u32>, hot: bool) -> Result<FileId, Error> {
        let nid = node.unwrap_or(self.k.cpus[0].node);
        if nid as usize >= self.k.nodes.len() {
            return Err(Error::Workload(format!("populate_node: no node {nid} (the machine has {})", self.k.nodes.len())));
        }
        let id = self.k.new_inode(fs, size);
        if populate {
            self.k.populate_file_on(id, nid)?;
            if hot {
                self.k.mark_file_hot(id);
            }
        }
        Ok(id)
    }
    fn spawn_process(&mut self, cpu: Option<u32>) -> Result<TaskId, Error> {
        let pinned = cpu.is_some();
        let cpu = self.pick_cpu(cpu)?;
        let mm = self.k.new_mm();
        // Forked from one launcher: its mmap base, as dup_mm copies it.
        let base = match self.launcher_mmap_base {
            Some(b) => b,
            None => *self.launcher_mmap_base.insert(self.k.arch_pick_mmap_base()),
        };
        self.k.mms[mm as usize].mmap_base = base;
        Ok(self.add_task(mm, cpu, pinned))
    }
    fn spawn_thread(&mut self, of: TaskId, cpu: Option<u32>) -> Result<TaskId, Error> {
        let pinned = cpu.is_some();
        let cpu = self.pick_cpu(cpu)?;
        let mm = self.k.tasks.get(of as usize).ok_or_else(|| Error::Internal(format!("spawn_thread: no task {of}")))?.mm;
        self.k.mms[mm as usize].mmget();
        Ok(self.add_task(mm, cpu, pinned))
    }
    fn seed(&self) -> u64 {
        self.seed
    }
    fn start_gate(&mut self, tasks: &[TaskId]) -> Result<(), Error> {
        // pipe_write wakes the pollers, non-exclusive waiters, in wait-queue
        // order, and add_wait_queue puts each new waiter at the head: the
        // last task to poll is woken first. Each try_to_wake_up, one after
        // another on the waker's CPU, takes the wakee CPU's runqueue line
        // from that CPU and sends it a reschedule IPI; the wakee then runs
        // after a wake-up's latency. The parent (not pinned) is taken to run
        // on CPU 0. What is created before the gate costs no time here.
        let k = &mut *self.k;
        let waker = 0;
        let mut t = 0;
        for &id in tasks.iter().rev() {
            let task = k.tasks.get_mut(id as usize).ok_or_else(|| Error::Internal(format!("start_gate: no task {id}")))?;
            t += k.lc.transfer(task.cpu, waker) + k.c.ipi_send;
            task.clock = t + k.c.context_switch;
        }
        Ok(())
    }
    fn image_buffer(&self) -> u64 {
        crate::mm::exec::GLIBC_2_36_X86_64.testcase_buf
    }
    fn map_process_image(&mut self, task: TaskId) -> Result<(), Error> {
        let img = &crate::mm::exec::GLIBC_2_36_X86_64;
        let file = match self.image_file {
            Some(f) => f,
            None => {
                // The binary and libraries are in the page cache, as on any
                // host that ran them before. A tmpfs file: populating a disk
                // one would count its read-in as major faults.
                let f = self.create_file(FsKind::Tmpfs, img.file_bytes(), true)?;
                self.image_file = Some(f);
                f
            }
        };
        let mm = self.k.tasks.get(task as usize).ok_or_else(|| Error::Internal(format!("map_process_image: no task {task}")))?.mm;
        self.k.map_process_image(mm, file, img)?;
        self.imaged.push(task);
        Ok(())
    }
}

impl Env<'_> {
    fn pick_cpu(&mut self, cpu: Option<u32>) -> Result<u32, Error> {
        let n = self.k.nr_cpus();
        match cpu {
            Some(c) if c < n => Ok(c),
            Some(c) => Err(Error::Workload(format!("cpu {c} does not exist (the machine has {n})"))),
            None => {
                let c = self.k.topo.placement(self.next_cpu % n);
                self.next_cpu += 1;
                Ok(c)
            }
        }
    }
    fn add_task(&mut self, mm: u32, cpu: u32, pinned: bool) -> TaskId {
        let id = self.k.new_task(mm, cpu);
        self.k.tasks[id as usize].pinned = pinned;
        id
    }
}

/// Everything a finished (or interrupted) run produced.
pub struct Outcome {
    pub kernel: Kernel,
    pub interrupted: bool,
    pub sim_end: Ns,
    pub host_s: f64,
    pub samples_t: Vec<f64>,
    pub samples_ops: Vec<u64>,
    pub samples_stat: Vec<[i64; NR_STATS]>,
    pub ops_at_warmup: Vec<u64>,
    /// Each task's iterations (Workload::iterations) when the measured
    /// window opened, and at the end.
    pub iterations_at_warmup: Vec<Option<u64>>,
    pub iterations: Vec<Option<u64>>,
    pub warmup_ns: Ns,
    pub measured_ns: Ns,
    /// Steps run in runs of steps (`access_run`), not one by one.
    pub run_steps: u64,
}

/// The run queue: (time, sequence, task). The sequence number makes ties
/// FIFO, so tasks sharing a CPU take turns.
struct Queue {
    heap: BinaryHeap<Reverse<(Ns, u64, u32)>>,
    seq: u64,
}

impl Queue {
    fn push(&mut self, t: Ns, tid: u32) -> u64 {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, tid)));
        self.seq
    }
}

/// Queue `tid` at `t`, superseding any earlier entry of it.
fn enqueue(k: &mut Kernel, q: &mut Queue, t: Ns, tid: u32) {
    let s = q.push(t, tid);
    k.tasks[tid as usize].qseq = s;
}

/// The workload `cfg` names, built from its parameters (the config checked
/// both; an error here is the workload's).
pub fn build_workload(cfg: &Config) -> Result<Box<dyn Workload>, Error> {
    build_named(&cfg.workload, &cfg.workload_params)
}

/// Guest `g`'s workload (`Config::guest_workload`).
pub fn build_guest_workload(cfg: &Config, g: usize) -> Result<Box<dyn Workload>, Error> {
    let (name, raw) = cfg.guest_workload(g);
    build_named(name, raw)
}

fn build_named(name: &str, raw: &RawParams) -> Result<Box<dyn Workload>, Error> {
    let info = workload::registry::find(name).ok_or_else(|| Error::Workload(format!("unknown workload {name}")))?;
    (info.build)(&mut Params::new(raw.clone())).map_err(Error::Workload)
}

/// Run `cfg` to completion (or until `progress` returns false: a run
/// stopped in its measured window returns what it has, one stopped in its
/// warm-up `Error::Cancelled`).
pub fn simulate(cfg: &Config, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Outcome, Error> {
    let wl = build_workload(cfg)?;
    simulate_with(cfg, wl, progress)
}

/// Run `cfg` with a workload object supplied by the caller (tests, trace replay).
pub fn simulate_with(cfg: &Config, wl: Box<dyn Workload>, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Outcome, Error> {
    simulate_hooked(cfg, wl, &mut |_| {}, progress)
}

/// As `simulate_with`, calling `boot_hook` on the booted kernel before the
/// workload sets up (tests use it to add kernel threads or state).
pub fn simulate_hooked(
    cfg: &Config,
    wl: Box<dyn Workload>,
    boot_hook: &mut dyn FnMut(&mut Kernel),
    progress: &mut dyn FnMut(&Progress) -> bool,
) -> Result<Outcome, Error> {
    if cfg.host.is_some() {
        return Err(Error::Internal("a run with a host goes through virt::guests::simulate_guests".into()));
    }
    let host0 = Instant::now();
    let mut d = Driver::new(cfg, cfg.seed, 0, wl, boot_hook)?;
    let mut interrupted = false;
    let mut last_progress = Instant::now();
    loop {
        match d.run_one(Ns::MAX) {
            Stepped::Over => break,
            Stepped::Skipped => {}
            Stepped::Ran => {
                if d.steps & 0xfff == 0 && last_progress.elapsed().as_millis() >= 100 {
                    last_progress = Instant::now();
                    if !progress(&Progress { sim_s: d.now as f64 / 1e9, sim_total_s: d.end as f64 / 1e9 }) {
                        interrupted = true;
                        break;
                    }
                }
            }
        }
    }
    if interrupted && d.in_warmup() {
        // Stopped in the warm-up: no measured window, nothing to report.
        return Err(Error::Cancelled);
    }
    let o = d.finish(interrupted, host0);
    progress(&Progress { sim_s: o.sim_end as f64 / 1e9, sim_total_s: (o.warmup_ns + o.measured_ns) as f64 / 1e9 });
    Ok(o)
}

/// What `Driver::run_one` did.
#[derive(PartialEq, Eq)]
pub(crate) enum Stepped {
    /// Nothing is left before the end of the run.
    Over,
    /// The entry was stale, or its task had to wait for its CPU.
    Skipped,
    /// A task ran one or more steps.
    Ran,
}

/// One kernel's run in progress: the kernel, its workload, its run queue,
/// the samples taken so far. `simulate_hooked` runs one to the end;
/// `simulate_guests` interleaves several (VM guests on one host).
pub(crate) struct Driver {
    pub(crate) k: Kernel,
    wl: Box<dyn Workload>,
    q: Queue,
    warmup_ns: Ns,
    measured_ns: Ns,
    pub(crate) end: Ns,
    sample_every: Ns,
    audit_every: Ns,
    out_t: Vec<f64>,
    out_ops: Vec<u64>,
    out_stat: Vec<[i64; NR_STATS]>,
    next_sample: Ns,
    next_audit: Ns,
    ops_at_warmup: Option<Vec<u64>>,
    iterations_at_warmup: Vec<Option<u64>>,
    pub(crate) steps: u64,
    pub(crate) now: Ns,
    /// `[run] fault_runs`: runs of steps (`access_run`).
    fault_runs: bool,
    run_steps: u64,
}

impl Driver {
    /// The run has not reached its measured window yet.
    pub(crate) fn in_warmup(&self) -> bool {
        self.ops_at_warmup.is_none()
    }

    /// Boot a kernel for `cfg` (with `seed`), let the workload set up and
    /// queue its tasks; they start at `start` (a guest booted that late).
    pub(crate) fn new(
        cfg: &Config,
        seed: u64,
        start: Ns,
        mut wl: Box<dyn Workload>,
        boot_hook: &mut dyn FnMut(&mut Kernel),
    ) -> Result<Driver, Error> {
        let mut k = Kernel::boot(cfg.profile.clone(), cfg.knobs.clone(), cfg.run.check, seed)?;
        k.trace = crate::kernel::trace::Tracing::new(&cfg.run.probes, &cfg.run.probes_record, k.nr_cpus());
        boot_hook(&mut k);
        let imaged = {
            let mut env = Env { k: &mut k, seed, next_cpu: 0, image_file: None, imaged: Vec::new(), launcher_mmap_base: None };
            wl.setup(&mut env)?;
            env.imaged
        };
        if k.tasks.is_empty() {
            return Err(Error::Workload("the workload created no tasks".into()));
        }
        let warmup_ns = (cfg.run.warmup_s * NSEC_PER_SEC as f64) as Ns;
        let measured_ns = (cfg.run.duration_s * NSEC_PER_SEC as f64) as Ns;
        let sample_every = ((cfg.run.sample_ms * 1e6) as Ns).max(1);
        let audit_every = ((cfg.run.audit_interval_ms * 1e6) as Ns).max(1);
        if start > 0 {
            for t in k.tasks.iter_mut() {
                t.clock += start;
            }
            for w in k.wakeups.iter_mut() {
                w.0 += start;
            }
        }
        // Each imaged process starts up (touches its image) at its own
        // start, a late-booting guest's included.
        for &tid in &imaged {
            k.touch_process_image(tid, &crate::mm::exec::GLIBC_2_36_X86_64)?;
        }
        for m in k.mms.iter_mut() {
            m.set_base_rss();
        }
        let mut q = Queue { heap: BinaryHeap::new(), seq: 0 };
        for i in 0..k.tasks.len() {
            if k.tasks[i].kthread.is_none() {
                let t = k.tasks[i].clock;
                enqueue(&mut k, &mut q, t, i as u32);
            }
        }
        take_wakeups(&mut k, &mut q);
        let out_stat = vec![k.stat.v];
        let ops_at_warmup = if warmup_ns == 0 { Some(vec![0; k.tasks.len()]) } else { None };
        let iterations_at_warmup = if warmup_ns == 0 { (0..k.tasks.len() as u32).map(|t| wl.iterations(t)).collect() } else { Vec::new() };
        Ok(Driver {
            k,
            wl,
            q,
            warmup_ns,
            measured_ns,
            end: warmup_ns + measured_ns,
            sample_every,
            audit_every,
            out_t: vec![0.0],
            out_ops: vec![0u64],
            out_stat,
            next_sample: sample_every,
            next_audit: audit_every,
            ops_at_warmup,
            iterations_at_warmup,
            steps: 0,
            now: 0,
            fault_runs: cfg.run.fault_runs,
            run_steps: 0,
        })
    }

    /// Time of the earliest run-queue entry (a lower bound on the next
    /// step: the entry may have been superseded).
    pub(crate) fn next_time(&self) -> Option<Ns> {
        self.q.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Pop the earliest run-queue entry and run its task; the task keeps
    /// running steps while its clock stays before every other queued entry
    /// and before `horizon` (the next event of other kernels sharing the
    /// simulated time line; `Ns::MAX` when there are none).
    pub(crate) fn run_one(&mut self, horizon: Ns) -> Stepped {
        let (t, tid) = match pop(&mut self.k, &mut self.q, self.end) {
            Ok(e) => e,
            Err(s) => return s,
        };
        let k = &mut self.k;
        self.now = t;
        // Everything before a boundary has run: record it.
        if self.ops_at_warmup.is_none() && t >= self.warmup_ns {
            self.ops_at_warmup = Some(k.tasks.iter().map(|x| x.ops).collect());
            self.iterations_at_warmup = (0..k.tasks.len() as u32).map(|t| self.wl.iterations(t)).collect();
        }
        while t >= self.next_sample {
            self.out_t.push(self.next_sample as f64 / NSEC_PER_SEC as f64);
            self.out_ops.push(k.tasks.iter().map(|x| x.ops).sum());
            self.out_stat.push(k.stat.v);
            self.next_sample += self.sample_every;
        }
        if k.check.enabled && t >= self.next_audit {
            check::audit(k);
            self.next_audit = t + self.audit_every;
        }
        // What ends the run of steps besides the queue: the next sample,
        // the end, the next audit (next_audit only moves when the checker
        // is on), the warm-up boundary not yet recorded (then every step
        // ends it: 0). None of these moves while the task runs its steps.
        let stop = if self.ops_at_warmup.is_none() {
            0
        } else {
            self.next_sample.min(self.end).min(if k.check.enabled { self.next_audit } else { Ns::MAX })
        };
        let mut run = TaskRun { steps: &mut self.steps, run_steps: &mut self.run_steps, fault_runs: self.fault_runs };
        run_task(k, self.wl.as_mut(), &mut self.q, tid, t, horizon, stop, &mut run)
    }

    /// Take the samples up to the end of the run, audit, and hand over.
    pub(crate) fn finish(mut self, interrupted: bool, host0: Instant) -> Outcome {
        let k = &mut self.k;
        let sim_end = if interrupted { self.now } else { self.end };
        while !interrupted && self.next_sample <= self.end {
            self.out_t.push(self.next_sample as f64 / NSEC_PER_SEC as f64);
            self.out_ops.push(k.tasks.iter().map(|x| x.ops).sum());
            self.out_stat.push(k.stat.v);
            self.next_sample += self.sample_every;
        }
        if k.check.enabled {
            check::audit(k);
        }
        let ops_at_warmup = self.ops_at_warmup.unwrap_or_else(|| vec![0; k.tasks.len()]);
        let iterations = (0..k.tasks.len() as u32).map(|t| self.wl.iterations(t)).collect();
        Outcome {
            ops_at_warmup,
            iterations_at_warmup: self.iterations_at_warmup,
            iterations,
            kernel: self.k,
            interrupted,
            sim_end,
            host_s: host0.elapsed().as_secs_f64(),
            samples_t: self.out_t,
            samples_ops: self.out_ops,
            samples_stat: self.out_stat,
            warmup_ns: self.warmup_ns,
            measured_ns: self.measured_ns,
            run_steps: self.run_steps,
        }
    }
}

/// Pop the earliest run-queue entry: its time and task, made runnable
/// (a sleeper's timer fired, or it was woken); or what the driver does
/// instead (the queue is empty or past `end`, the entry was stale).
#[inline(always)]
fn pop(k: &mut Kernel, q: &mut Queue, end: Ns) -> Result<(Ns, u32), Stepped> {
    let Some(Reverse((t, seq, tid))) = q.heap.pop() else { return Err(Stepped::Over) };
    if seq != k.tasks[tid as usize].qseq {
        return Err(Stepped::Skipped); // superseded by a later wake-up
    }
    if t >= end {
        return Err(Stepped::Over);
    }
    let tk = &mut k.tasks[tid as usize];
    if tk.sleeping {
        tk.sleeping = false;
        tk.timer = false;
    }
    Ok((t, tid))
}

/// Queue what the step woke: its tasks, and whether the host kernel under
/// this guest woke a thread of its own (`HOST_WOKE`).
#[inline]
fn take_wakeups(k: &mut Kernel, q: &mut Queue) -> bool {
    let mut host = false;
    for (t, w) in std::mem::take(&mut k.wakeups) {
        if w == HOST_WOKE {
            host = true;
        } else {
            enqueue(k, q, t, w);
        }
    }
    host
}

/// The step counters a run of a task's steps adds to, and whether it may
/// run accesses as runs of steps (`[run] fault_runs`).
struct TaskRun<'a> {
    steps: &'a mut u64,
    run_steps: &'a mut u64,
    fault_runs: bool,
}

/// Run task `tid`, popped at `t`, on its CPU (or queue it there behind the
/// CPU's current task): its steps while its clock stays before every other
/// queued entry, `horizon` (the next event of other kernels sharing the
/// time line) and `stop` (what ends the run besides: the next sample,
/// audit or the end). Every kernel's tasks run through here, a host
/// kernel's threads under its guests too (`KthreadQueue`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn run_task(k: &mut Kernel, wl: &mut dyn Workload, q: &mut Queue, tid: u32, t: Ns, mut horizon: Ns, stop: Ns, r: &mut TaskRun) -> Stepped {
    let cpu = k.tasks[tid as usize].cpu as usize;
    if k.cpus[cpu].curr == u32::MAX {
        k.cpus[cpu].curr = tid;
        k.cpus[cpu].slice_end = t + SCHED_SLICE;
    } else if k.cpus[cpu].curr != tid {
        if k.tasks[tid as usize].kthread.is_some() {
            // A woken kernel thread preempts at the current task's next
            // step boundary (wakeup preemption).
            k.cpus[cpu].rq.push_front(tid);
            k.cpus[cpu].slice_end = 0;
            k.tasks[tid as usize].qseq = 0;
        } else {
            // The CPU is busy: wait in its run queue for the current task's slice to end.
            k.cpus[cpu].rq.push_back(tid);
            k.tasks[tid as usize].qseq = 0;
        }
        return Stepped::Skipped;
    }
    k.tasks[tid as usize].clock = t;
    // Run steps of this task while it is still the earliest.
    let mut earliest = q.heap.peek().map_or(Ns::MAX, |Reverse((t, _, _))| *t).min(horizon);
    loop {
        let start = k.tasks[tid as usize].clock;
        crate::sim::set_frontier(start, earliest);
        k.charge_irq(tid, cpu as u32);
        // The steps after this one that this loop would run next, if
        // they are accesses, run as one (`access_run`): as many as
        // remain before the next progress check.
        let bound = RunBound { until: earliest.min(stop), earliest, steps: (0x1000 - ((*r.steps + 1) & 0xfff)) & 0xfff };
        let (ended, ran) = step(k, wl, tid, q, r.fault_runs.then_some(bound));
        *r.steps += ran;
        *r.run_steps += ran - 1;
        // (Most steps wake nobody: skip the take-and-drop of the buffer.)
        // A thread the host woke runs before this guest's next step: the
        // run ends after this one.
        if !k.wakeups.is_empty() && take_wakeups(k, q) {
            horizon = 0;
        }
        let tk = &k.tasks[tid as usize];
        let c = if tk.exited || tk.sleeping {
            k.cpus[cpu].busy_until = ended.unwrap_or(tk.clock);
            tk.clock
        } else {
            let c = k.smt_share(cpu as u32, start, tk.clock);
            k.tasks[tid as usize].clock = c;
            c
        };
        let tk = &k.tasks[tid as usize];
        if tk.exited || tk.sleeping {
            // (A sleeping kernel thread's wake-up entry is already queued.)
            // The CPU is free from the end of the step, not from a
            // timed sleep's wake-up time (the clock has moved there).
            k.cpus[cpu].curr = u32::MAX;
            switch_to_next(k, cpu, ended.unwrap_or(c), q);
            break;
        }
        if c >= k.cpus[cpu].slice_end && !k.cpus[cpu].rq.is_empty() {
            // Time slice over and others wait: go to the back of the queue.
            k.cpus[cpu].rq.push_back(tid);
            k.tasks[tid as usize].qseq = 0;
            k.cpus[cpu].curr = u32::MAX;
            switch_to_next(k, cpu, c, q);
            break;
        }
        if c >= k.cpus[cpu].slice_end {
            k.cpus[cpu].slice_end = c + SCHED_SLICE;
        }
        earliest = q.heap.peek().map_or(Ns::MAX, |Reverse((t, _, _))| *t).min(horizon);
        if c < earliest && c < stop && *r.steps & 0xfff != 0 {
            continue;
        }
        enqueue(k, q, c, tid);
        break;
    }
    Stepped::Ran
}

/// The run queue of a kernel without a workload: a host kernel's own
/// threads (kswapd) under its guests, which the multi-guest driver
/// (virt/guests.rs) runs in the guests' time line, each step through the
/// same dispatch as any kernel's tasks (`run_task`). The host's other
/// tasks (the VMMs' vCPU and main threads) run only inside guest steps,
/// as the exits that call them: their wake-ups are not this queue's.
pub(crate) struct KthreadQueue {
    q: Queue,
    steps: u64,
    run_steps: u64,
}

/// What a kernel without a workload runs: no task asks it for an op.
struct NoWorkload;

impl Workload for NoWorkload {
    fn name(&self) -> &str {
        "none"
    }
    fn setup(&mut self, _: &mut dyn SetupEnv) -> Result<(), Error> {
        Ok(())
    }
    fn next_op(&mut self, _: TaskId, _: Ret, _: &mut u64) -> Op {
        Op::Exit
    }
}

impl KthreadQueue {
    pub(crate) fn new() -> KthreadQueue {
        KthreadQueue { q: Queue { heap: BinaryHeap::new(), seq: 0 }, steps: 0, run_steps: 0 }
    }

    /// Take `k`'s wake-ups of its kernel threads into the queue (the
    /// others' are dropped: see above).
    pub(crate) fn take_wakeups(&mut self, k: &mut Kernel) {
        for (t, w) in std::mem::take(&mut k.wakeups) {
            if w != HOST_WOKE && k.tasks[w as usize].kthread.is_some() {
                enqueue(k, &mut self.q, t, w);
            }
        }
    }

    /// Time of the earliest entry (as `Driver::next_time`).
    pub(crate) fn next_time(&self) -> Option<Ns> {
        self.q.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Run the earliest entry's kernel thread on `k`, before `horizon`
    /// (the guests' next event) and `end`.
    pub(crate) fn run_one(&mut self, k: &mut Kernel, horizon: Ns, end: Ns) -> Stepped {
        let (t, tid) = match pop(k, &mut self.q, end) {
            Ok(e) if k.tasks[e.1 as usize].kthread.is_some() => e,
            Ok(_) => return Stepped::Skipped,
            Err(s) => return s,
        };
        let mut run = TaskRun { steps: &mut self.steps, run_steps: &mut self.run_steps, fault_runs: false };
        let r = run_task(k, &mut NoWorkload, &mut self.q, tid, t, horizon, end, &mut run);
        self.take_wakeups(k);
        r
    }
}

/// Length of a time slice when tasks share a CPU: EEVDF's base slice
/// (0.75 ms) scaled by 1 + log2(CPUs) capped at 8 CPUs, as Linux 6.6+ does.
const SCHED_SLICE: Ns = 3_000_000;

/// Give `cpu`, free since `t`, to the next task in its run queue.
fn switch_to_next(k: &mut Kernel, cpu: usize, t: Ns, q: &mut Queue) {
    while let Some(n) = k.cpus[cpu].rq.pop_front() {
        let tk = &mut k.tasks[n as usize];
        if tk.exited || tk.sleeping {
            continue;
        }
        // The incoming task waited; it starts after a context switch.
        let start = tk.clock.max(t) + k.c.context_switch;
        tk.clock = start;
        k.cpus[cpu].curr = n;
        k.cpus[cpu].slice_end = start + SCHED_SLICE;
        enqueue(k, q, start, n);
        return;
    }
}

/// What bounds a run of steps (`access_run`): the driver runs the task's
/// next step at once while its clock is before `until` (the earliest
/// other step, and the next sample, audit or the end) and for `steps`
/// more steps (to its next progress check); `earliest` is the frontier's
/// horizon.
#[derive(Clone, Copy)]
struct RunBound {
    until: Ns,
    earliest: Ns,
    steps: u64,
}

/// One step of task `tid`: the rest of a pending operation, or the
/// workload's next one; with `run`, then the accesses that follow it as
/// further steps (`access_run`). Returns when a kernel thread's step
/// ended, and the steps run.
fn step(k: &mut Kernel, wl: &mut dyn Workload, tid: u32, q: &mut Queue, run: Option<RunBound>) -> (Option<Ns>, u64) {
    let tk = &mut k.tasks[tid as usize];
    if tk.kthread.is_some() {
        return (Some(k.kthread_step(tid)), 1);
    }
    if tk.fault_resumes() {
        // The rest of a fault; then the access re-executes (unless the
        // fault sleeps on mmap_lock, or still has a step to go).
        use crate::mm::memory::Fault;
        let f = k.fault_continue(tid);
        let tk = &k.tasks[tid as usize];
        if tk.lock_wait.is_some() || tk.mid_fault() || tk.fault_unlock.is_some() {
            return (None, 1);
        }
        match f {
            Fault::Done | Fault::Pending => {}
            f @ (Fault::Segv | Fault::Oom) => {
                let e = if f == Fault::Oom { crate::workload::errno::ENOMEM } else { crate::workload::errno::EFAULT };
                k.tasks[tid as usize].pending = None;
                k.tasks[tid as usize].last = Ret::Err(e);
                return (None, 1);
            }
        }
    }
    let tk = &mut k.tasks[tid as usize];
    let op = match tk.pending.take() {
        Some(op) => op,
        None => wl.next_op(tid, tk.last, &mut tk.ops),
    };
    // (Only what kind of op it was is needed after exec: the op moves in.)
    let fork = matches!(op, Op::Fork | Op::Vfork | Op::Clone);
    let (access, range) = (matches!(op, Op::Access { .. }), matches!(op, Op::AccessRange { .. }));
    let r = k.exec(tid, op);
    // A run follows a single access, or a range of them that a fault
    // interrupted; after a whole range (memhog's pass: one step for many
    // TLB hits) the next op is the workload's, whatever it is.
    let runs = access || (range && k.tasks[tid as usize].pending.is_some());
    // page_reporting_notify_free for the frees this step made.
    k.page_reporting_poll(tid);
    if let Some(r) = r {
        k.tasks[tid as usize].last = r;
        if let (true, Ret::Val(child)) = (fork, r) {
            let child = child as u32;
            wl.on_fork(tid, child);
            let t = k.tasks[child as usize].clock;
            enqueue(k, q, t, child);
        }
    }
    match run {
        Some(b) if runs && b.steps > 0 && k.tasks[tid as usize].clock < b.until => (None, 1 + access_run(k, wl, tid, b)),
        _ => (None, 1),
    }
}

/// A run of steps (docs/fault-path-speed.md): the steps of task `tid`
/// that follow one that made an access, while each is an access (the rest
/// of a pending user loop, or the next of the accesses the workload
/// announces, `Workload::access_run`) and the driver would run it next
/// with nothing in between: the same steps, in the same order, at the
/// same times, through the same `exec`, with what the driver does at a
/// step's start (the frontier, interrupt time), without its dispatch
/// (the run queue, the workload's `next_op`, the step's case analysis).
/// Returns the steps run; the driver then goes on after the last one as
/// after any step.
fn access_run(k: &mut Kernel, wl: &mut dyn Workload, tid: u32, b: RunBound) -> u64 {
    let cpu = k.tasks[tid as usize].cpu;
    let mut announced: Option<AccessRun> = None;
    let (mut n, mut used) = (0, 0);
    while n < b.steps && run_goes_on(k, tid, cpu, b.until) {
        let tk = &mut k.tasks[tid as usize];
        let op = match tk.pending {
            Some(op @ Op::AccessRange { .. }) => {
                tk.pending = None;
                op
            }
            Some(_) => break,
            // The workload's next op, as long as the one before succeeded.
            None if tk.last == Ret::Val(0) => {
                let a = match &mut announced {
                    Some(a) => a,
                    None => match wl.access_run(tid) {
                        Some(a) => announced.insert(a),
                        None => break,
                    },
                };
                if a.count == 0 {
                    break;
                }
                let op = Op::Access { addr: a.addr, kind: a.kind };
                a.addr += a.stride;
                a.count -= 1;
                used += 1;
                op
            }
            None => break,
        };
        crate::sim::set_frontier(tk.clock, b.earliest);
        k.charge_irq(tid, cpu);
        if let Some(r) = k.exec(tid, op) {
            k.tasks[tid as usize].last = r;
        }
        k.page_reporting_poll(tid);
        n += 1;
    }
    if used > 0 {
        let mut scratch = 0;
        let ops = if k.knobs.mutant == Mutant::RunSkipsOpCount { &mut scratch } else { &mut k.tasks[tid as usize].ops };
        wl.access_run_done(tid, used, ops);
    }
    n
}

/// Whether the driver, after task `tid`'s step on `cpu`, would run its
/// next step at once and do nothing else first (the conditions that end
/// a run, docs/fault-path-speed.md): nobody was woken, the task neither
/// exited nor sleeps nor has a fault to resume, its clock is before
/// `until`, and its CPU is still its own (a time slice over with nobody
/// waiting is renewed, as the driver renews it).
#[inline(always)]
fn run_goes_on(k: &mut Kernel, tid: u32, cpu: u32, until: Ns) -> bool {
    let tk = &k.tasks[tid as usize];
    let c = tk.clock;
    let past = c >= until && k.knobs.mutant != Mutant::RunPastOtherSteps;
    if !k.wakeups.is_empty() || tk.exited || tk.sleeping || tk.fault_resumes() || past {
        return false;
    }
    let cp = &mut k.cpus[cpu as usize];
    if c >= cp.slice_end {
        if !cp.rq.is_empty() {
            return false;
        }
        cp.slice_end = c + SCHED_SLICE;
    }
    true
}

/// The result object (see `api::run_json` for its shape).
pub fn result_json(cfg: &Config, o: &Outcome) -> Value {
    let k = &o.kernel;
    let mut vmstat = Map::new();
    for (name, v) in k.stat.iter() {
        vmstat.insert(name.to_string(), v.into());
    }
    let mut time = Map::new();
    let user: Ns = k.tasks.iter().map(|t| t.user_ns).sum();
    let sys: Ns = k.tasks.iter().map(|t| t.sys_ns).sum();
    time.insert("user".into(), user.into());
    time.insert("sys".into(), sys.into());
    for (i, n) in ENTRY_NAMES.iter().enumerate() {
        time.insert((*n).into(), k.tasks.iter().map(|t| t.entry_ns[i]).sum::<Ns>().into());
    }
    let measured_s = if o.interrupted { (o.sim_end.saturating_sub(o.warmup_ns)) as f64 / 1e9 } else { o.measured_ns as f64 / 1e9 };
    let per_task: Vec<Value> = k
        .tasks
        .iter()
        .map(|t| {
            let base = o.ops_at_warmup.get(t.id as usize).copied().unwrap_or(0);
            // Kernel time by entry point (the non-zero ones).
            let entries: Map<String, Value> =
                ENTRY_NAMES.iter().zip(t.entry_ns.iter()).filter(|(_, &ns)| ns > 0).map(|(n, &ns)| ((*n).to_string(), ns.into())).collect();
            let iters = o.iterations.get(t.id as usize).copied().flatten();
            let at_warmup = o.iterations_at_warmup.get(t.id as usize).copied().flatten().unwrap_or(0);
            json!({"task": t.id, "cpu": t.cpu, "mm": t.mm, "kthread": t.kthread.is_some(), "ops": t.ops, "ops_measured": t.ops - base.min(t.ops), "iterations": iters, "iterations_measured": iters.map(|n| n - at_warmup.min(n)), "user_ns": t.user_ns, "sys_ns": t.sys_ns, "time_ns": entries, "exited": t.exited, "clock_ns": t.clock})
        })
        .collect();
    let nr_user = k.tasks.iter().filter(|t| t.kthread.is_none()).count();
    // When the workload's last task exited (a replayed trace at its end),
    // or null: tasks were still running when the run ended.
    let mut users = k.tasks.iter().filter(|t| t.kthread.is_none());
    let finished_ns = users.clone().all(|t| t.exited).then(|| users.by_ref().map(|t| t.clock).max().unwrap_or(0));
    let ops_total: u64 = k.tasks.iter().map(|t| t.ops).sum();
    let ops_measured: u64 = k.tasks.iter().map(|t| t.ops - o.ops_at_warmup.get(t.id as usize).copied().unwrap_or(0).min(t.ops)).sum();
    let ops_per_s = if measured_s > 0.0 { ops_measured as f64 / measured_s } else { 0.0 };
    // Whole iterations of the workload's loops (None: it has none).
    let iters: Vec<(u64, u64)> = o
        .iterations
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.map(|n| (n, n - o.iterations_at_warmup.get(i).copied().flatten().unwrap_or(0).min(n))))
        .collect();
    let (iterations, iterations_measured) = if iters.is_empty() {
        (Value::Null, Value::Null)
    } else {
        (iters.iter().map(|x| x.0).sum::<u64>().into(), iters.iter().map(|x| x.1).sum::<u64>().into())
    };
    let mut ts = Map::new();
    ts.insert("t_s".into(), o.samples_t.clone().into());
    ts.insert("ops".into(), o.samples_ops.clone().into());
    for (i, name) in STAT_NAMES.iter().enumerate() {
        ts.insert((*name).into(), o.samples_stat.iter().map(|s| s[i]).collect::<Vec<_>>().into());
    }
    let mut mmap_wait = 0;
    let mut mmap_sleeps = 0;
    let mut mmap_bounces = 0;
    let mut mmap_queued = 0;
    let mut mmap_late = 0;
    for m in &k.mms {
        mmap_late += m.mmap_lock.line.late_ns;
        mmap_wait += m.mmap_lock.read_wait_ns + m.mmap_lock.write_wait_ns;
        mmap_sleeps += m.mmap_lock.sleeps;
        mmap_bounces += m.mmap_lock.line.bounces;
        mmap_queued += m.mmap_lock.write_queued;
    }
    let lru_wait: Ns = k.nodes.iter().map(|n| n.lruvec.lru_lock().wait_ns).sum();
    let zone =
        k.pa.nids()
            .iter()
            .map(|&n| k.pa.zone_lock_stats(n))
            .fold((0u64, 0u64, 0u64), |a, z| (a.0 + z.acquisitions, a.1 + z.contended, a.2 + z.wait_ns));
    let mut v = json!({
        "config": cfg.normalized,
        "interrupted": o.interrupted,
        "sim_time_s": o.sim_end as f64 / 1e9,
        "host_time_s": o.host_s,
        "summary": {
            "workload": cfg.workload,
            "profile": cfg.profile_name,
            "tasks": nr_user,
            "kernel_threads": k.tasks.len() - nr_user,
            "nr_cpus": k.nr_cpus(),
            "ops_total": ops_total,
            "ops_measured": ops_measured,
            "measured_s": measured_s,
            "ops_per_s": ops_per_s,
            "ops_per_s_per_task": if nr_user == 0 { 0.0 } else { ops_per_s / nr_user as f64 },
            "iterations": iterations,
            "iterations_measured": iterations_measured,
            "workload_finished_s": finished_ns.map(|t| t as f64 / 1e9),
        },
        "vmstat": vmstat,
        "mthp": k.mthp.to_json(),
        "time_ns": time,
        "per_task": per_task,
        "timeseries": ts,
        "locks": {
            "mmap_lock_wait_ns": mmap_wait,
            "mmap_lock_sleeps": mmap_sleeps,
            "mmap_lock_line_bounces": mmap_bounces,
            // Writers that slept in the wait queue before their section ran.
            "mmap_lock_write_queued": mmap_queued,
            // How much later on the count's line requests already answered
            // were served, once one that arrived earlier was processed after
            // them (sim/lock.rs): the line model's own error.
            "mmap_lock_line_late_ns": mmap_late,
            // The VMA objects' lines (SPF's refcount and field reads, the
            // per-VMA locks' words) and the mm's others.
            "mm_lines_wait_ns": k.mms.iter().map(|m| m.lines.total_wait_ns()).sum::<Ns>(),
            "mm_lines_bounces": k.mms.iter().map(|m| m.lines.total_bounces()).sum::<u64>(),
            "lru_lock_wait_ns": lru_wait,
            "zone_lock_acquisitions": zone.0,
            "zone_lock_contended": zone.1,
            "zone_lock_wait_ns": zone.2,
            "split_queue_lock_acquisitions": k.split_queues.iter().map(|q| q.lock.acquisitions).sum::<u64>(),
            "split_queue_lock_contended": k.split_queues.iter().map(|q| q.lock.contended).sum::<u64>(),
            "split_queue_lock_wait_ns": k.split_queues.iter().map(|q| q.lock.wait_ns).sum::<u64>(),
        },
        "memory": {
            // MemTotal.
            "mem_total_kib": k.mem_bytes() >> 10,
            "mem_map_bytes": k.mem_map.footprint_bytes(),
            "nr_free_pages": k.stat.get(Stat::NrFreePages),
            // VmHWM: the largest peak RSS of any mm, and each mm's (KiB).
            "peak_rss_kib": k.mms.iter().map(|m| m.hiwater_rss().max(0) as u64 * 4).max().unwrap_or(0),
            "peak_rss_kib_by_mm": k.mms.iter().map(|m| m.hiwater_rss().max(0) as u64 * 4).collect::<Vec<_>>(),
            // RSS when the run started (a process image's pages), the
            // largest of any mm: the harness's baseline.
            "base_rss_kib": k.mms.iter().map(|m| m.base_rss().max(0) as u64 * 4).max().unwrap_or(0),
            // What the CPUs moved through each node's shared bandwidth and
            // through the socket links (sim/bw.rs), and the time transfers
            // waited for them beyond what one CPU alone takes.
            "node_bw_bytes": k.nodes.iter().map(|n| n.bw.bytes).collect::<Vec<_>>(),
            "node_bw_wait_ns": k.nodes.iter().map(|n| n.bw.wait_ns).collect::<Vec<_>>(),
            "link_bw_bytes": k.nodes.iter().map(|n| n.link.bytes).sum::<u64>(),
            "link_bw_wait_ns": k.nodes.iter().map(|n| n.link.wait_ns).sum::<u64>(),
        },
        "checker": {
            "enabled": k.check.enabled,
            "audits": k.check.audits,
            "tlb_checks": k.check.tlb_checks,
            "violations": k.check.violations,
        },
    });
    if k.trace.any() {
        v["probes"] = k.trace.to_json();
    }
    if !k.fault_trace.is_empty() {
        // [time_ns, cpu, address, event] per fault-locking event (debug.fault_trace).
        v["fault_trace"] = k.fault_trace.iter().map(|&(t, c, a, e)| json!([t, c, a, e])).collect::<Vec<_>>().into();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// will-it-scale's start gate on two sockets of two CPUs (skl-2s-72's
    /// costs): the waker on CPU 0 wakes the last task first, each wake-up
    /// an IPI after a transfer of the pipe's line from where it was.
    #[test]
    fn the_start_gate_wakes_the_last_poller_first_one_wake_up_apart() {
        let toml = "seed = 1\n[machine]\nprofile = \"skl-2s-72\"\nnr_cpus = 4\n[workload]\nname = \"page_fault1\"\nmode = \"threads\"\ntasks = 4\nsize_mib = 1\nprocess_image = \"none\"\n[run]\nwarmup_s = 0.0\nduration_s = 0.001\n";
        let cfg = crate::config::from_toml(toml, "<test>").unwrap();
        let d = Driver::new(&cfg, cfg.seed, 0, build_workload(&cfg).unwrap(), &mut |_| {}).unwrap();
        let clocks: Vec<Ns> = d.k.tasks.iter().map(|t| t.clock).collect();
        // task 3 (CPU 3, other socket): a cross-socket transfer and an IPI;
        // task 2 (CPU 2): the same again; task 1 (CPU 1): a same-socket
        // transfer and an IPI; task 0 (CPU 0): a local RMW and an IPI; each
        // runs a context switch after its wake-up.
        let c = &d.k.c;
        let w3 = c.line_cross + c.ipi_send;
        let w2 = w3 + c.line_cross + c.ipi_send;
        let w1 = w2 + c.line_same + c.ipi_send;
        let w0 = w1 + c.line_local + c.ipi_send;
        assert_eq!(clocks, [w0, w1, w2, w3].map(|w| w + c.context_switch));
    }
}
