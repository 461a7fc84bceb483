//! "xsbench": an XSBench-like Monte Carlo cross-section lookup kernel
//! (docs/mechanisms/lazy-unmap-flush.md#workloads-and-scaling). One process, `threads` threads. The main thread
//! maps the hot text (`code_kib`, a cached file mapped PROT_READ|PROT_EXEC,
//! MAP_PRIVATE), the lookup tables (`grid_mib` of anonymous read-write
//! memory: XSBench's unionized energy grid and nuclide grids, malloc'd) and
//! the threads' private stacks (`stack_kib` each), then initialises the
//! tables with stores (one pass, in 1 MiB steps) while the other threads
//! wait. Then every thread does lookups: per lookup it fetches the hot code
//! (one instruction fetch per code page), makes `loads_per_lookup` loads in
//! the tables (one per equal stretch of them, all at one seeded random
//! 8-byte-aligned offset into their stretch: one grid point per nuclide, as
//! XSBench reads at the index its energy search found; one op) and one
//! store to its stack (cycling through its pages), then computes for
//! `compute_ns` (user time standing for the work the loads do not model). `lookups` is the total over all threads, split evenly (0: look
//! up until the run ends).
//!
//! After initialisation the tables are only read: under memory tiering a
//! demoted then promoted page comes back mapped read-only (the hinting
//! fault's migration entry has no write bit), which makes it eligible for
//! a lazy unmap flush when it is demoted again (docs/mechanisms/numa-balancing.md).
//!
//! ops = lookups. Any error makes the task exit.

use super::common::{pte_table_bytes, read_size, TaskMap, KIB, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Access, Fd, FileId, FsKind, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::sim::rng::Rng;
use crate::sim::Ns;

const MAX_GRID_MIB: u64 = 1 << 24;
/// Tables are initialised in steps of this many bytes (one op each).
const INIT_STEP: u64 = MIB;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Main thread: open, mmap code, mmap tables, mmap stacks.
    Setup(u8),
    /// Main thread: initialising the tables; next offset.
    Init(u64),
    WaitSetup,
    /// A lookup: sub-step (0 code, 1 table loads, 2 stack store, 3 compute).
    Lookup(u32),
    Done,
}

#[derive(Clone, Debug)]
struct Thread {
    idx: u32,
    phase: Phase,
    rng: Rng,
    lookups: u64,
    stack_cursor: u64,
}

pub struct XsBench {
    threads: u32,
    grid: u64,
    lookups: u64,
    loads_per_lookup: u32,
    code: u64,
    stack: u64,
    pin: bool,
    poll: Ns,
    /// User work per lookup besides the modelled accesses.
    compute: Ns,
    code_file: FileId,
    ready: bool,
    code_base: u64,
    grid_base: u64,
    stack_base: u64,
    tasks: TaskMap,
    st: Vec<Thread>,
}

impl XsBench {
    pub fn new(p: &mut Params) -> Result<XsBench, String> {
        let threads = p.u64("threads", 14)?;
        if threads == 0 || threads > 2048 {
            return Err(format!("threads: must be between 1 and 2048, got {threads}"));
        }
        let grid = read_size(p, "grid_mib", 256, MIB, MAX_GRID_MIB)?;
        let lookups = p.u64("lookups", 0)?;
        let loads = p.u64("loads_per_lookup", 70)?;
        if !(1..=4096).contains(&loads) || loads * 8 > grid {
            return Err(format!("loads_per_lookup: must be between 1 and 4096 and at most one per 8 bytes of the tables, got {loads}"));
        }
        let code = read_size(p, "code_kib", 32, KIB, 1 << 20)?;
        if !code.is_multiple_of(PAGE) {
            return Err(format!("code_kib: must be a multiple of 4, got {}", code / KIB));
        }
        let stack = read_size(p, "stack_kib", 16, KIB, 1 << 20)?;
        if !stack.is_multiple_of(PAGE) {
            return Err(format!("stack_kib: must be a multiple of 4, got {}", stack / KIB));
        }
        let compute = p.u64("compute_ns", 0)?;
        if compute > 1_000_000_000 {
            return Err(format!("compute_ns: must be at most 1000000000 (1 s), got {compute}"));
        }
        let pin = p.bool("pin", true)?;
        let poll = p.u64("poll_us", 20)?;
        if poll == 0 || poll > 1_000_000 {
            return Err(format!("poll_us: must be between 1 and 1000000, got {poll}"));
        }
        p.finish()?;
        Ok(XsBench {
            threads: threads as u32,
            grid,
            lookups,
            loads_per_lookup: loads as u32,
            code,
            stack,
            pin,
            poll: poll * 1000,
            compute,
            code_file: 0,
            ready: false,
            code_base: 0,
            grid_base: 0,
            stack_base: 0,
            tasks: TaskMap::default(),
            st: Vec::new(),
        })
    }

    fn specs() -> Vec<ParamSpec> {
        vec![
            ParamSpec { name: "threads", default: "14".into(), help: "threads of the one process (XSBench -t; seed: 14 on 16 vCPUs)" },
            ParamSpec { name: "grid_mib", default: "256".into(), help: "anonymous lookup tables, MiB (initialised once by stores, then only read)" },
            ParamSpec { name: "lookups", default: "0".into(), help: "total lookups over all threads, split evenly (XSBench -l; 0: until the run ends)" },
            ParamSpec { name: "loads_per_lookup", default: "70".into(), help: "loads in the tables per lookup: one at a random offset in each of this many equal stretches (one grid point per nuclide). 70 = the published dTLB-load-misses per lookup (1.2e11 / 1.7e9, the LUF v10 XSBench reply of 2024-05-22)" },
            ParamSpec { name: "code_kib", default: "32".into(), help: "hot executable text (a cached file mapped PROT_READ|PROT_EXEC), fetched once per page per lookup, KiB" },
            ParamSpec { name: "stack_kib", default: "16".into(), help: "each thread's private read-write stack; one store per lookup, KiB" },
            ParamSpec { name: "compute_ns", default: "0".into(), help: "user work per lookup besides the modelled accesses (arithmetic, reads not modelled as loads), ns" },
            ParamSpec { name: "pin", default: "true".into(), help: "pin thread i to CPU i % nr_cpus (false: the scheduler places them)" },
            ParamSpec { name: "poll_us", default: "20".into(), help: "user time between two polls while waiting for the main thread's initialisation, us" },
        ]
    }

    fn quota(&self, idx: u32) -> u64 {
        let t = self.threads as u64;
        self.lookups * (idx as u64 + 1) / t - self.lookups * idx as u64 / t
    }

    fn lookup(&self, s: &mut Thread, sub: u32, ops: &mut u64) -> Op {
        if sub == 0 {
            if self.lookups != 0 && s.lookups >= self.quota(s.idx) {
                s.phase = Phase::Done;
                return Op::Exit;
            }
            s.phase = Phase::Lookup(1);
            return Op::AccessRange { addr: self.code_base, stride: PAGE, count: self.code / PAGE, kind: Access::Ifetch };
        }
        if sub == 1 {
            // One load in each of `loads_per_lookup` equal stretches of the
            // tables at the same random offset: XSBench reads one grid point
            // of every nuclide (each nuclide's grid is its own stretch) at the
            // index the energy search found. One op, all loads on different
            // pages when a stretch is at least a page.
            s.phase = Phase::Lookup(2);
            let n = self.loads_per_lookup as u64;
            let stride = (self.grid / n) & !7;
            let off = s.rng.below(stride.max(8) / 8) * 8;
            return Op::AccessRange { addr: self.grid_base + off, stride: stride.max(8), count: n, kind: Access::Load };
        }
        if sub == 3 {
            s.phase = Phase::Lookup(0);
            return Op::Compute { ns: self.compute };
        }
        let pages = self.stack / PAGE;
        let addr = self.stack_base + s.idx as u64 * self.stack + (s.stack_cursor % pages) * PAGE;
        s.stack_cursor += 1;
        s.lookups += 1;
        *ops += 1;
        s.phase = Phase::Lookup(if self.compute > 0 { 3 } else { 0 });
        Op::Access { addr, kind: Access::Store }
    }
}

impl Workload for XsBench {
    fn name(&self) -> &str {
        "xsbench"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), String> {
        let nr_cpus = env.nr_cpus();
        if nr_cpus == 0 {
            return Err("the machine has no CPUs".into());
        }
        self.code_file = env.create_file(FsKind::Tmpfs, self.code, true)?;
        let seed = env.seed();
        let mut ids = Vec::new();
        self.st.clear();
        for t in 0..self.threads {
            let cpu = if self.pin { Some(t % nr_cpus) } else { None };
            let id = if t == 0 { env.spawn_process(cpu)? } else { env.spawn_thread(ids[0], cpu)? };
            ids.push(id);
            let phase = if t == 0 { Phase::Setup(0) } else { Phase::WaitSetup };
            self.st.push(Thread { idx: t, phase, rng: Rng::stream(seed, &format!("xsbench/{t}")), lookups: 0, stack_cursor: 0 });
        }
        self.tasks = TaskMap::new(&ids)?;
        self.ready = false;
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        let mut th = self.st[i].clone();
        if last.is_err() {
            th.phase = Phase::Done;
        }
        let rw = prot::READ | prot::WRITE;
        let anon = map::PRIVATE | map::ANONYMOUS;
        let op = match th.phase {
            Phase::Setup(k) => {
                th.phase = Phase::Setup(k + 1);
                match k {
                    0 => Op::Open { file: self.code_file },
                    1 => Op::Mmap {
                        addr: 0,
                        len: self.code,
                        prot: prot::READ | prot::EXEC,
                        flags: map::PRIVATE,
                        fd: last.val() as Fd,
                        off: 0,
                    },
                    2 => {
                        self.code_base = last.val() as u64;
                        Op::Mmap { addr: 0, len: self.grid, prot: rw, flags: anon, fd: -1, off: 0 }
                    }
                    3 => {
                        self.grid_base = last.val() as u64;
                        Op::Mmap { addr: 0, len: self.stack * self.threads as u64, prot: rw, flags: anon, fd: -1, off: 0 }
                    }
                    _ => {
                        self.stack_base = last.val() as u64;
                        let n = INIT_STEP.min(self.grid);
                        th.phase = Phase::Init(n);
                        Op::AccessRange { addr: self.grid_base, stride: PAGE, count: n / PAGE, kind: Access::Store }
                    }
                }
            }
            Phase::Init(off) => {
                if off >= self.grid {
                    self.ready = true;
                    self.lookup(&mut th, 0, ops)
                } else {
                    let n = INIT_STEP.min(self.grid - off);
                    th.phase = Phase::Init(off + n);
                    Op::AccessRange { addr: self.grid_base + off, stride: PAGE, count: n / PAGE, kind: Access::Store }
                }
            }
            Phase::WaitSetup => {
                if self.ready {
                    self.lookup(&mut th, 0, ops)
                } else {
                    Op::Compute { ns: self.poll }
                }
            }
            Phase::Lookup(sub) => self.lookup(&mut th, sub, ops),
            Phase::Done => Op::Exit,
        };
        self.st[i] = th;
        op
    }

    fn iterations(&self, task: TaskId) -> Option<u64> {
        self.tasks.get(task).map(|i| self.st[i].lookups)
    }

    fn peak_bytes(&self) -> Option<u64> {
        let stacks = self.stack * self.threads as u64;
        Some(self.code + self.grid + pte_table_bytes(self.grid) + stacks + pte_table_bytes(stacks))
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(XsBench::new(p)?))
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "xsbench",
        help: "XSBench-like: one process, `threads` threads; anonymous tables (`grid_mib`) written once, then random read-only lookups (`loads_per_lookup` loads + a stack store + hot code fetch each); op = lookup",
        params: XsBench::specs,
        build,
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::build;
    use super::super::common::testutil::*;
    use super::*;

    fn run(seed_kv: &[(&str, toml::Value)]) -> (FakeKernel, Vec<TaskId>) {
        let mut w = build("xsbench", seed_kv).unwrap();
        let mut env = FakeEnv::new(4);
        w.setup(&mut env).unwrap();
        let ids = env.ids();
        let mut k = FakeKernel::new(&env);
        k.run(&mut *w, &ids, 200_000);
        (k, ids)
    }

    #[test]
    fn initialises_then_looks_up_read_only_and_exits() {
        let (k, ids) =
            run(&[("threads", i(3)), ("grid_mib", i(2)), ("lookups", i(100)), ("loads_per_lookup", i(4)), ("compute_ns", i(500))]);
        let computes = ids.iter().map(|t| k.log(*t).iter().filter(|s| s.op == Op::Compute { ns: 500 }).count()).sum::<usize>();
        assert_eq!(computes, 100);
        let total: u64 = ids.iter().map(|t| k.ops[t]).sum();
        assert_eq!(total, 100);
        for &t in &ids {
            assert!(k.exited.get(&t).copied().unwrap_or(false));
            assert!(k.log(t).iter().all(|s| !s.ret.is_err()));
        }
        // The main thread wrote the whole 2 MiB table before any lookup.
        let init: u64 = k
            .log(ids[0])
            .iter()
            .map(|s| match s.op {
                Op::AccessRange { count, kind: Access::Store, .. } => count,
                _ => 0,
            })
            .sum();
        assert_eq!(init, 512);
        let mut loads = 0;
        for t in &ids {
            for s in k.log(*t) {
                if let Op::AccessRange { addr, stride, count, kind: Access::Load } = s.op {
                    // Four loads, one per 512 KiB stretch of the 2 MiB table.
                    assert_eq!((stride, count), (512 * KIB, 4));
                    assert_eq!((addr - k.log(ids[0])[2].ret.val() as u64) % 8, 0);
                    loads += count;
                }
            }
        }
        assert_eq!(loads, 400);
        let fetch = k.log(ids[1]).iter().filter(|s| matches!(s.op, Op::AccessRange { kind: Access::Ifetch, .. })).count();
        assert!(fetch >= 33);
    }

    #[test]
    fn same_seed_same_addresses() {
        let kv = [("threads", i(2)), ("grid_mib", i(1)), ("lookups", i(20))];
        let (a, ids) = run(&kv);
        let (b, _) = run(&kv);
        assert_eq!(a.log(ids[1]), b.log(ids[1]));
    }

    #[test]
    fn parameters_are_validated() {
        for (kv, key) in [
            (vec![("threads", i(0))], "threads"),
            (vec![("grid_mib", i(0))], "grid_mib"),
            (vec![("loads_per_lookup", i(0))], "loads_per_lookup"),
            (vec![("grid_mib", i(1)), ("loads_per_lookup", i(200_000))], "loads_per_lookup"),
            (vec![("code_kib", i(6))], "code_kib"),
            (vec![("stack_kib", i(0))], "stack_kib"),
            (vec![("poll_us", i(0))], "poll_us"),
            (vec![("compute_ns", i(2_000_000_000))], "compute_ns"),
            (vec![("lookup", i(1))], "lookup"),
        ] {
            let e = build("xsbench", &kv).err().unwrap_or_else(|| panic!("{key} accepted"));
            assert!(e.starts_with(key), "{key}: {e}");
        }
    }
}
