//! "memhog": each task maps `size_mib` of anonymous memory, writes every page
//! `passes` times, unmaps it (freeing it), and after `sleep_ms` does it again,
//! `cycles` times (0 = forever). Like numactl's memhog, whose memset is
//! modelled as one store per 4 KiB page, issued as `AccessRange` runs of at
//! most 2 MiB so ops accrue smoothly. ops = pages touched.
//!
//! Errors: any `Ret::Err` (failed mmap, fault on the range) makes the task
//! `Exit`.
//!
//! `sleep_ms` is a sleep (`Op::Nanosleep`): the CPU is idle meanwhile, as
//! between the runs of memhog the free-page-reporting letter describes.

use super::common::{pte_table_bytes, read_size, TaskCfg, TaskMap, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Access, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::sim::{Ns, NSEC_PER_MSEC};
use crate::types::Error;

/// Pages per `AccessRange` (2 MiB).
const CHUNK_PAGES: u64 = 512;
const MAX_SIZE_MIB: u64 = 1 << 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Start,
    Mapping,
    Touching,
    Unmapping,
    Sleeping,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct TaskState {
    phase: Phase,
    base: u64,
    /// Next page to touch in the current pass.
    page: u64,
    /// Pages in the range in flight.
    inflight: u64,
    pass: u64,
    cycle: u64,
    /// Iterations: passes completed (every page written once).
    iters: u64,
}

pub struct Memhog {
    cfg: TaskCfg,
    size: u64,
    passes: u64,
    /// 0 = forever.
    cycles: u64,
    sleep: Ns,
    tasks: TaskMap,
    st: Vec<TaskState>,
}

impl Memhog {
    pub fn new(p: &mut Params) -> Result<Memhog, String> {
        let cfg = TaskCfg::read(p)?;
        let size = read_size(p, "size_mib", 1024, MIB, MAX_SIZE_MIB)?;
        let passes = p.u64("passes", 1)?;
        if passes == 0 {
            return Err("passes: must be at least 1".into());
        }
        let cycles = p.u64("cycles", 1)?;
        let sleep_ms = p.u64("sleep_ms", 0)?;
        let sleep = sleep_ms.checked_mul(NSEC_PER_MSEC).ok_or_else(|| format!("sleep_ms: too large: {sleep_ms}"))?;
        p.finish()?;
        Ok(Memhog { cfg, size, passes, cycles, sleep, tasks: TaskMap::default(), st: Vec::new() })
    }

    fn specs() -> Vec<ParamSpec> {
        let mut v = TaskCfg::specs();
        v.extend([
            ParamSpec { name: "size_mib", default: "1024".into(), help: "anonymous memory each task maps and touches, MiB" },
            ParamSpec { name: "passes", default: "1".into(), help: "times every page is written per cycle" },
            ParamSpec { name: "cycles", default: "1".into(), help: "map/touch/unmap cycles per task (0 = forever)" },
            ParamSpec { name: "sleep_ms", default: "0".into(), help: "pause between cycles, ms (a sleep: the CPU idles)" },
        ]);
        v
    }

    #[inline]
    fn pages(&self) -> u64 {
        self.size / PAGE
    }

    #[inline]
    fn mmap(&self, st: &mut TaskState) -> Op {
        st.phase = Phase::Mapping;
        Op::Mmap { addr: 0, len: self.size, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 }
    }

    #[inline]
    fn touch(&self, st: &mut TaskState) -> Op {
        st.phase = Phase::Touching;
        let count = CHUNK_PAGES.min(self.pages() - st.page);
        st.inflight = count;
        Op::AccessRange { addr: st.base + st.page * PAGE, stride: PAGE, count, kind: Access::Store }
    }
}

impl Workload for Memhog {
    fn name(&self) -> &str {
        "memhog"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let ids = self.cfg.spawn(env)?;
        self.tasks = TaskMap::new(&ids)?;
        self.st = vec![TaskState { phase: Phase::Start, base: 0, page: 0, inflight: 0, pass: 0, cycle: 0, iters: 0 }; ids.len()];
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        let mut st = self.st[i];
        if last.is_err() {
            st.phase = Phase::Done;
        }
        let op = match st.phase {
            Phase::Start | Phase::Sleeping => self.mmap(&mut st),
            Phase::Mapping => {
                st.base = last.val() as u64;
                st.page = 0;
                st.pass = 0;
                self.touch(&mut st)
            }
            Phase::Touching => {
                *ops += st.inflight;
                st.page += st.inflight;
                if st.page == self.pages() {
                    st.page = 0;
                    st.pass += 1;
                    st.iters += 1;
                }
                if st.pass < self.passes {
                    self.touch(&mut st)
                } else {
                    st.phase = Phase::Unmapping;
                    Op::Munmap { addr: st.base, len: self.size }
                }
            }
            Phase::Unmapping => {
                st.cycle += 1;
                if self.cycles != 0 && st.cycle >= self.cycles {
                    st.phase = Phase::Done;
                    Op::Exit
                } else if self.sleep > 0 {
                    st.phase = Phase::Sleeping;
                    Op::Nanosleep { ns: self.sleep }
                } else {
                    self.mmap(&mut st)
                }
            }
            Phase::Done => Op::Exit,
        };
        self.st[i] = st;
        op
    }

    fn iterations(&self, task: TaskId) -> Option<u64> {
        self.tasks.get(task).map(|i| self.st[i].iters)
    }

    fn peak_bytes(&self) -> Option<u64> {
        Some(self.cfg.tasks as u64 * (self.size + pte_table_bytes(self.size)))
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(Memhog::new(p)?))
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "memhog",
        help: "each task mmaps size_mib of anonymous memory, writes every page `passes` times, munmaps it, and repeats `cycles` times after sleep_ms; op = page touched",
        params: Memhog::specs,
        build,
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::*;

    fn run(kv: &[(&str, toml::Value)], steps: usize) -> (Box<dyn Workload>, FakeEnv, FakeKernel) {
        let mut w = build_named(kv);
        let mut env = FakeEnv::new(4);
        w.setup(&mut env).unwrap();
        let mut k = FakeKernel::new(&env);
        let ids = env.ids();
        k.run(&mut *w, &ids, steps * ids.len());
        (w, env, k)
    }

    fn build_named(kv: &[(&str, toml::Value)]) -> Box<dyn Workload> {
        super::super::common::testutil::build("memhog", kv).unwrap()
    }

    #[test]
    fn touches_every_page_each_pass_then_unmaps_and_exits() {
        // 5 MiB = 1280 pages = 3 ranges (512, 512, 256) per pass.
        let (_w, env, k) = run(&[("size_mib", i(5)), ("passes", i(2))], 100);
        let t = env.ids()[0];
        let log = k.log(t);
        let Op::Mmap { len, flags, .. } = log[0].op else { panic!() };
        assert_eq!((len, flags), (5 * MIB, map::PRIVATE | map::ANONYMOUS));
        let base = log[0].ret.val() as u64;
        let mut touched = vec![0u32; 1280];
        for s in &log[1..7] {
            let Op::AccessRange { addr, stride: 4096, count, kind: Access::Store } = s.op else { panic!("{s:?}") };
            assert!(count <= 512);
            for j in 0..count {
                touched[((addr - base) / PAGE + j) as usize] += 1;
            }
        }
        assert!(touched.iter().all(|&c| c == 2), "every page written exactly once per pass");
        assert_eq!(log[7].op, Op::Munmap { addr: base, len: 5 * MIB });
        assert_eq!(log[8].op, Op::Exit);
        assert_eq!(log.len(), 9);
        assert_eq!(k.ops[&t], 2 * 1280);
        assert!(k.maps.is_empty());
    }

    #[test]
    fn cycles_repeat_after_sleep() {
        let (_w, env, k) = run(&[("size_mib", i(2)), ("cycles", i(3)), ("sleep_ms", i(5)), ("tasks", i(2))], 100);
        for t in env.ids() {
            let log = k.log(t);
            let ops: Vec<_> = log.iter().map(|s| s.op).collect();
            assert_eq!(ops.iter().filter(|o| matches!(o, Op::Mmap { .. })).count(), 3);
            assert_eq!(ops.iter().filter(|o| matches!(o, Op::Munmap { .. })).count(), 3);
            let sleeps: Vec<_> = ops.iter().filter(|o| matches!(o, Op::Nanosleep { .. })).collect();
            assert_eq!(sleeps, vec![&Op::Nanosleep { ns: 5_000_000 }; 2]);
            // Sleep comes right after an munmap.
            for w in ops.windows(2) {
                if matches!(w[1], Op::Nanosleep { .. }) {
                    assert!(matches!(w[0], Op::Munmap { .. }));
                }
            }
            assert_eq!(*ops.last().unwrap(), Op::Exit);
            assert_eq!(k.ops[&t], 3 * 512);
        }
    }

    #[test]
    fn forever_keeps_cycling_and_failed_mmap_exits() {
        let mut w = build_named(&[("size_mib", i(1)), ("cycles", i(0))]);
        let mut env = FakeEnv::new(1);
        w.setup(&mut env).unwrap();
        let mut k = FakeKernel::new(&env);
        let t = env.ids()[0];
        k.fail_mmap_after = Some(50);
        k.run(&mut *w, &[t], 1000);
        let log = k.log(t);
        assert_eq!(log.len(), 50 * 3 + 2);
        assert_eq!(log.last().unwrap().op, Op::Exit);
        assert_eq!(k.ops[&t], 50 * 256);
    }

    #[test]
    fn params_checked() {
        let e = super::super::common::testutil::build("memhog", &[("passes", i(0))]).err().unwrap();
        assert!(e.starts_with("passes"), "{e}");
        let e = super::super::common::testutil::build("memhog", &[("size", i(1))]).err().unwrap();
        assert!(e.starts_with("size"), "{e}");
        let w = build_named(&[("size_mib", i(64)), ("tasks", i(3))]);
        assert_eq!(w.peak_bytes(), Some(3 * (64 * MIB + 32 * PAGE)));
    }
}
