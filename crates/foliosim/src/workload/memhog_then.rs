//! "memhog_then": the free-page-reporting test sequence of the v17 cover
//! letter (docs/mechanisms/free-page-reporting.md#published-figures). One process runs numactl's `memhog` over `hog_mib` (touch
//! every page once, then exit, freeing it all), then, after `settle_ms`,
//! a will-it-scale testcase (`test`, default page_fault1) starts with
//! `tasks` tasks and runs to the end of the simulation.
//!
//! The test's tasks exist from the start but wait: each sleeps
//! (`Op::Nanosleep`) `poll_ms` at a time until memhog has exited and the
//! settle time has passed. Sleeping, not spinning: a spinning waiter would
//! keep its CPU and its SMT sibling busy through the settle time, which the
//! idle guest of the cover letter does not (the reporting worker runs on
//! an idle machine). memhog runs on the last CPU.
//!
//! ops = memhog's pages touched + the test's operations; use the time
//! series (or warm-up past the memhog phase) to separate them.

use super::memhog::Memhog;
use super::params::Params;
use super::will_it_scale::{Test, WillItScale, ALL};
use super::{Op, ParamSpec, RawParams, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::sim::{Ns, NSEC_PER_MSEC};
use crate::types::Error;

pub struct MemhogThen {
    hog: Memhog,
    test: WillItScale,
    hog_task: TaskId,
    hog_done_at: Option<Ns>,
    settle: Ns,
    poll: Ns,
    /// Simulated time each waiting task has reached (from its polls).
    waited: Vec<(TaskId, Ns, bool)>,
}

impl MemhogThen {
    fn new(p: &mut Params, raw: &RawParams) -> Result<MemhogThen, String> {
        let hog_mib = p.u64("hog_mib", 1024)?;
        let test_name = p.choice("test", "page_fault1", &["page_fault1", "page_fault2"])?;
        let settle_ms = p.u64("settle_ms", 0)?;
        let poll_ms = p.u64("poll_ms", 10)?.max(1);
        let mut hog_raw = RawParams::new();
        hog_raw.insert("size_mib".into(), toml::Value::Integer(hog_mib as i64));
        let hog = Memhog::new(&mut Params::new(hog_raw))?;
        // Everything else belongs to the testcase, which checks it.
        let mut test_raw = RawParams::new();
        for (k, v) in raw {
            if !matches!(k.as_str(), "hog_mib" | "test" | "settle_ms" | "poll_ms") {
                test_raw.insert(k.clone(), v.clone());
            }
        }
        let t = ALL.iter().copied().find(|t| t.name() == test_name).unwrap_or(Test::PageFault1);
        let test = WillItScale::new(t, &mut Params::new(test_raw))?;
        Ok(MemhogThen {
            hog,
            test,
            hog_task: u32::MAX,
            hog_done_at: None,
            settle: settle_ms * NSEC_PER_MSEC,
            poll: poll_ms * NSEC_PER_MSEC,
            waited: Vec::new(),
        })
    }
}

impl Workload for MemhogThen {
    fn name(&self) -> &str {
        "memhog_then"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let last = env.nr_cpus() - 1;
        // memhog's own setup pins to CPU 0; run it on the last CPU instead.
        let mut pinned = PinLast { inner: env, cpu: last, ids: Vec::new() };
        self.hog.setup(&mut pinned)?;
        self.hog_task = *pinned.ids.first().ok_or_else(|| Error::Workload("memhog created no task".into()))?;
        let mut rec = Record { inner: env, ids: Vec::new() };
        self.test.setup(&mut rec)?;
        self.waited = rec.ids.iter().map(|&t| (t, 0, false)).collect();
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        if task == self.hog_task {
            let op = self.hog.next_op(task, last, ops);
            if op == Op::Exit && self.hog_done_at.is_none() {
                // Exit is the last op; the poll clock of the others tells
                // when it happened closely enough (within poll_ms).
                let now = self.waited.iter().map(|w| w.1).max().unwrap_or(0);
                self.hog_done_at = Some(now);
            }
            return op;
        }
        let Some(w) = self.waited.iter_mut().find(|w| w.0 == task) else { return Op::Exit };
        if !w.2 {
            let ready = self.hog_done_at.is_some_and(|d| w.1 >= d + self.settle);
            if !ready {
                w.1 += self.poll;
                return Op::Nanosleep { ns: self.poll };
            }
            w.2 = true;
            return self.test.next_op(task, Ret::Start, ops);
        }
        self.test.next_op(task, last, ops)
    }

    fn iterations(&self, task: TaskId) -> Option<u64> {
        if task == self.hog_task {
            self.hog.iterations(task)
        } else {
            self.test.iterations(task)
        }
    }

    fn peak_bytes(&self) -> Option<u64> {
        Some(self.hog.peak_bytes().unwrap_or(0).max(self.test.peak_bytes().unwrap_or(0)))
    }
}

/// Spawns processes on one CPU and records their ids.
struct PinLast<'a> {
    inner: &'a mut dyn SetupEnv,
    cpu: u32,
    ids: Vec<TaskId>,
}

impl SetupEnv for PinLast<'_> {
    fn nr_cpus(&self) -> u32 {
        self.inner.nr_cpus()
    }
    fn mem_bytes(&self) -> u64 {
        self.inner.mem_bytes()
    }
    fn create_file(&mut self, fs: super::FsKind, size: u64, populate: bool) -> Result<super::FileId, Error> {
        self.inner.create_file(fs, size, populate)
    }
    fn spawn_process(&mut self, _cpu: Option<u32>) -> Result<TaskId, Error> {
        let t = self.inner.spawn_process(Some(self.cpu))?;
        self.ids.push(t);
        Ok(t)
    }
    fn spawn_thread(&mut self, of: TaskId, _cpu: Option<u32>) -> Result<TaskId, Error> {
        let t = self.inner.spawn_thread(of, Some(self.cpu))?;
        self.ids.push(t);
        Ok(t)
    }
    fn seed(&self) -> u64 {
        self.inner.seed()
    }
}

/// Passes everything through and records the task ids.
struct Record<'a> {
    inner: &'a mut dyn SetupEnv,
    ids: Vec<TaskId>,
}

impl SetupEnv for Record<'_> {
    fn nr_cpus(&self) -> u32 {
        self.inner.nr_cpus()
    }
    fn mem_bytes(&self) -> u64 {
        self.inner.mem_bytes()
    }
    fn create_file(&mut self, fs: super::FsKind, size: u64, populate: bool) -> Result<super::FileId, Error> {
        self.inner.create_file(fs, size, populate)
    }
    fn spawn_process(&mut self, cpu: Option<u32>) -> Result<TaskId, Error> {
        let t = self.inner.spawn_process(cpu)?;
        self.ids.push(t);
        Ok(t)
    }
    fn spawn_thread(&mut self, of: TaskId, cpu: Option<u32>) -> Result<TaskId, Error> {
        let t = self.inner.spawn_thread(of, cpu)?;
        self.ids.push(t);
        Ok(t)
    }
    fn seed(&self) -> u64 {
        self.inner.seed()
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    let raw = p.raw().clone();
    Ok(Box::new(MemhogThen::new(p, &raw)?))
}

fn specs() -> Vec<ParamSpec> {
    let mut v = vec![
        ParamSpec {
            name: "hog_mib",
            default: "1024".into(),
            help: "memory memhog touches once and frees before the test, MiB (the v17 cover letter: memhog 32g)",
        },
        ParamSpec {
            name: "test",
            default: "page_fault1".into(),
            help: "the will-it-scale testcase that follows: page_fault1 or page_fault2",
        },
        ParamSpec { name: "settle_ms", default: "0".into(), help: "idle time between memhog's exit and the test's start, ms" },
        ParamSpec {
            name: "poll_ms",
            default: "10".into(),
            help: "how long a waiting test task sleeps between looks at whether memhog has exited, ms",
        },
    ];
    v.extend(Test::PageFault2.specs_pub());
    v
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "memhog_then",
        help: "memhog over hog_mib (touch once, exit), then after settle_ms a will-it-scale page_fault1/page_fault2 with `tasks` tasks: the free-page-reporting sequence of the v17 cover letter; op = page touched",
        params: specs,
        build,
    }
}
