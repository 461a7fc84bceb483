//! "xsbench": XSBench's default run, the unionized-grid cross-section lookup
//! (docs/mechanisms/lazy-unmap-flush.md#workloads-and-scaling), as its
//! OpenMP source describes it (ANL-CESAR/XSBench, openmp-threading:
//! GridInit.c, Materials.c, Simulation.c's calculate_macro_xs,
//! calculate_micro_xs, grid_search and pick_mat).
//!
//! One process, `threads` threads. The main thread maps the hot text
//! (`code_kib`, a cached file mapped PROT_READ|PROT_EXEC, MAP_PRIVATE), then
//! XSBench's three tables, each its own anonymous mapping (malloc of this
//! size is mmap), in the order GridInit builds them, each written once:
//!
//! * the nuclide grid: `isotopes` x `gridpoints` points of 48 bytes (an
//!   energy and five cross sections; each nuclide's points sorted by energy);
//! * the unionized energy grid: every nuclide's energies, `isotopes` x
//!   `gridpoints` doubles, sorted;
//! * the index grid: for every unionized energy, one int per nuclide, the
//!   index of its grid point below that energy: `isotopes`^2 x `gridpoints`
//!   x 4 bytes, 96 % of the memory (5.7 GB of 5.9 GB for H-M large).
//!
//! then per-thread stacks. Then every thread looks up (one op = one
//! lookup): it fetches the hot code (one instruction fetch per code page),
//! draws a uniform energy and a material (pick_mat's volume fractions of
//! the 12 H-M materials), binary-searches the unionized grid (one load per
//! distinct page the search probes: the top of the search is the same few
//! pages for every lookup, its bottom one random page), reads the index
//! grid's row for that energy (the pages holding the material's entries:
//! about one row of 1.4 KB, i.e. one or two pages, per lookup) and, for
//! every nuclide of the material (321 for the fuel, 4 to 27 for the
//! others: 55.7 on average), the two adjacent points of its grid around the
//! energy (one load: they share a page but one time in 85), stores to its
//! stack, then reads from memory what those probes miss on (`Op::Stream`):
//! a cache line per probe of the search, the row's entries, two lines per
//! nuclide, each from the node holding its page at one CPU's bandwidth,
//! shared with every thread (XSBench's lookups are bound by memory, not by
//! their arithmetic; with `stream_scale` each byte stands for that many, as
//! the tables are scaled down). `compute_ns` adds user time per lookup.
//!
//! Every access rate is the program's: per lookup, one row of the 355-wide
//! index grid and ~56 nuclide-grid points. With `gridpoints` scaled down
//! the whole problem shrinks by the same factor (every table, not one),
//! so a page of the index grid is read as often per lookup-second as in
//! the full-size run when the lookup rate shrinks with it.
//!
//! Energies are uniform and each nuclide's grid holds uniform random
//! energies, so the grid point below energy e is taken at e x gridpoints
//! (its expected place) in every table.
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
use crate::types::Error;

/// Tables are initialised in steps of this many bytes (one op each).
const INIT_STEP: u64 = MIB;
/// Bytes of one nuclide-grid point (NuclideGridPoint: six doubles).
const POINT: u64 = 48;
/// Bytes of one unionized energy (a double) and of one index (an int).
const ENERGY: u64 = 8;
const INDEX: u64 = 4;
/// A cache line: what a probe of the search misses on.
const LINE: u64 = 64;
/// XSBench -g default: grid points per nuclide in H-M large.
const GRIDPOINTS_LARGE: u64 = 11303;

/// pick_mat's probabilities of the 12 H-M materials (fractions by volume
/// of the core), as a cumulative distribution.
const MAT_CDF: [f64; 12] = [0.140, 0.192, 0.467, 0.601, 0.755, 0.819, 0.885, 0.940, 0.948, 0.963, 0.988, 1.0];

/// The nuclides of each H-M material (Materials.c's load_mats). The fuel
/// (material 0) holds the 34 listed and, in H-M large, nuclides 68..320+34.
const FUEL_SMALL: [u32; 34] =
    [58, 59, 60, 61, 40, 42, 43, 44, 45, 46, 1, 2, 3, 7, 8, 9, 10, 29, 57, 47, 48, 0, 62, 15, 33, 34, 52, 53, 54, 55, 56, 18, 23, 41];
const CLADDING: [u32; 5] = [63, 64, 65, 66, 67];
const WATER: [u32; 4] = [24, 41, 4, 5];
const RPV: [u32; 27] = [19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 27, 28, 29, 30, 31, 32, 26, 49, 50, 51, 11, 12, 13, 14, 6, 16, 17];
const REFLECTOR: [u32; 21] = [24, 41, 4, 5, 19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 49, 50, 51, 11, 12, 13, 14];
const ASSEMBLY: [u32; 9] = [24, 41, 4, 5, 63, 64, 65, 66, 67];
/// Fuel nuclides in H-M large (num_nucs[0]).
const FUEL_LARGE: u32 = 321;

/// A material as the lookup reads it: its nuclides as runs of consecutive
/// ids (first, count), and the span of its entries in an index-grid row.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Material {
    runs: Vec<(u32, u32)>,
    first: u32,
    last: u32,
    nuclides: u32,
}

impl Material {
    fn new(nucs: &[u32]) -> Material {
        let mut v = nucs.to_vec();
        v.sort_unstable();
        v.dedup();
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for &n in &v {
            match runs.last_mut() {
                Some((f, c)) if *f + *c == n => *c += 1,
                _ => runs.push((n, 1)),
            }
        }
        Material { first: v[0], last: v[v.len() - 1], nuclides: v.len() as u32, runs }
    }
}

/// The 12 H-M materials for `isotopes` nuclides (68: small, 355: large).
fn materials(large: bool) -> Vec<Material> {
    let mut fuel = FUEL_SMALL.to_vec();
    if large {
        fuel.extend(68..68 + FUEL_LARGE - FUEL_SMALL.len() as u32);
    }
    let mut m = vec![Material::new(&fuel), Material::new(&CLADDING), Material::new(&WATER), Material::new(&WATER), Material::new(&RPV)];
    m.extend((0..5).map(|_| Material::new(&REFLECTOR)));
    m.extend((0..2).map(|_| Material::new(&ASSEMBLY)));
    m
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Main thread: open, mmap code, mmap the three tables, mmap stacks.
    Setup(u8),
    /// Main thread: writing table `.0` (0 nuclide, 1 unionized, 2 index)
    /// from byte `.1`.
    Init(u8, u64),
    WaitSetup,
    /// Looking up: the lookup's accesses are queued in `Thread::plan`.
    Lookup,
    Done,
}

#[derive(Debug)]
struct Thread {
    idx: u32,
    phase: Phase,
    rng: Rng,
    lookups: u64,
    stack_cursor: u64,
    /// The rest of the current lookup, popped from the end.
    plan: Vec<Op>,
}

pub struct XsBench {
    threads: u32,
    isotopes: u64,
    gridpoints: u64,
    lookups: u64,
    code: u64,
    stack: u64,
    pin: bool,
    poll: Ns,
    /// User work per lookup besides the modelled accesses.
    compute: Ns,
    /// Bytes each byte a lookup reads from memory stands for (0: none read).
    stream_scale: u64,
    mats: Vec<Material>,
    code_file: FileId,
    ready: bool,
    code_base: u64,
    /// Bases of the nuclide, unionized-energy and index grids.
    base: [u64; 3],
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
        let large = p.choice("size", "large", &["large", "small"])? == "large";
        let gridpoints = p.u64("gridpoints", GRIDPOINTS_LARGE)?;
        if !(2..=1 << 24).contains(&gridpoints) {
            return Err(format!("gridpoints: must be between 2 and 16777216, got {gridpoints}"));
        }
        let lookups = p.u64("lookups", 0)?;
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
        let stream_scale = p.u64("stream_scale", 1)?;
        if stream_scale > 1 << 20 {
            return Err(format!("stream_scale: must be at most 1048576, got {stream_scale}"));
        }
        let pin = p.bool("pin", true)?;
        let poll = p.u64("poll_us", 20)?;
        if poll == 0 || poll > 1_000_000 {
            return Err(format!("poll_us: must be between 1 and 1000000, got {poll}"));
        }
        p.finish()?;
        Ok(XsBench {
            threads: threads as u32,
            isotopes: if large { 355 } else { 68 },
            gridpoints,
            lookups,
            code,
            stack,
            pin,
            poll: poll * 1000,
            compute,
            stream_scale,
            mats: materials(large),
            code_file: 0,
            ready: false,
            code_base: 0,
            base: [0; 3],
            stack_base: 0,
            tasks: TaskMap::default(),
            st: Vec::new(),
        })
    }

    fn specs() -> Vec<ParamSpec> {
        vec![
            ParamSpec { name: "threads", default: "14".into(), help: "threads of the one process (XSBench -t; seed: 14 on 16 vCPUs)" },
            ParamSpec {
                name: "size",
                default: "\"large\"".into(),
                help: "H-M benchmark size (XSBench -s): \"large\" (355 nuclides) or \"small\" (68)",
            },
            ParamSpec {
                name: "gridpoints",
                default: "11303".into(),
                help: "grid points per nuclide (XSBench -g; 11303 = H-M large, 5.9 GB of tables). Scales every table at once",
            },
            ParamSpec {
                name: "lookups",
                default: "0".into(),
                help: "total lookups over all threads, split evenly (XSBench -l; 0: until the run ends)",
            },
            ParamSpec {
                name: "code_kib",
                default: "32".into(),
                help: "hot executable text (a cached file mapped PROT_READ|PROT_EXEC), fetched once per page per lookup, KiB",
            },
            ParamSpec {
                name: "stack_kib",
                default: "16".into(),
                help: "each thread's private read-write stack; one store per lookup, KiB",
            },
            ParamSpec {
                name: "compute_ns",
                default: "0".into(),
                help: "user work per lookup besides the modelled accesses and the memory they read, ns",
            },
            ParamSpec {
                name: "stream_scale",
                default: "1".into(),
                help: "each byte a lookup reads from memory stands for this many (the memory scale-down of the tables; 0: none read)",
            },
            ParamSpec { name: "pin", default: "true".into(), help: "pin thread i to CPU i % nr_cpus (false: the scheduler places them)" },
            ParamSpec {
                name: "poll_us",
                default: "20".into(),
                help: "user time between two polls while waiting for the main thread's initialisation, us",
            },
        ]
    }

    /// Bytes of the nuclide, unionized-energy and index grids.
    fn sizes(&self) -> [u64; 3] {
        let points = self.isotopes * self.gridpoints;
        [points * POINT, points * ENERGY, points * self.isotopes * INDEX].map(|b| b.next_multiple_of(PAGE))
    }

    fn quota(&self, idx: u32) -> u64 {
        let t = self.threads as u64;
        self.lookups * (idx as u64 + 1) / t - self.lookups * idx as u64 / t
    }

    /// Queue one lookup's accesses in `plan` (last op first).
    fn plan_lookup(&self, s: &mut Thread) {
        let n_union = self.isotopes * self.gridpoints;
        let e = s.rng.unit();
        let roll = s.rng.unit();
        let mat = &self.mats[MAT_CDF.iter().position(|&c| roll < c).unwrap_or(11)];
        let plan = &mut s.plan;
        plan.clear();
        if self.compute > 0 {
            plan.push(Op::Compute { ns: self.compute });
        }
        // After the probes, what they read from memory (the plan is a stack:
        // pushed first, run last): two lines per nuclide, the row, a line
        // per level of the search.
        let j = ((e * self.gridpoints as f64) as u64).min(self.gridpoints - 2);
        let idx = ((e * n_union as f64) as u64).min(n_union - 2);
        if self.stream_scale > 0 {
            let k = self.stream_scale;
            for &(first, count) in &mat.runs {
                let addr = self.base[0] + (first as u64 * self.gridpoints + j) * POINT;
                plan.push(Op::Stream { addr, stride: self.gridpoints * POINT, count: count as u64, bytes: 2 * LINE * k });
            }
            let row = self.base[2] + idx * self.isotopes * INDEX + mat.first as u64 * INDEX;
            plan.push(Op::Stream { addr: row, stride: 0, count: 1, bytes: (mat.last - mat.first + 1) as u64 * INDEX * k });
            let levels = 64 - (n_union - 1).leading_zeros() as u64;
            plan.push(Op::Stream { addr: self.base[1] + idx * ENERGY, stride: 0, count: 1, bytes: levels * LINE * k });
        }
        let pages = self.stack / PAGE;
        plan.push(Op::Access { addr: self.stack_base + s.idx as u64 * self.stack + (s.stack_cursor % pages) * PAGE, kind: Access::Store });
        s.stack_cursor += 1;
        // calculate_micro_xs for each nuclide of the material: the grid
        // point below e and the one above it, in that nuclide's grid.
        for &(first, count) in mat.runs.iter().rev() {
            let addr = self.base[0] + (first as u64 * self.gridpoints + j) * POINT;
            plan.push(Op::AccessRange { addr, stride: self.gridpoints * POINT, count: count as u64, kind: Access::Load });
        }
        // The index grid's row for the unionized energy found: the pages of
        // the material's entries in it.
        let row = self.base[2] + idx * self.isotopes * INDEX;
        let (lo, hi) = ((row + mat.first as u64 * INDEX) & !(PAGE - 1), (row + mat.last as u64 * INDEX) & !(PAGE - 1));
        plan.push(Op::AccessRange { addr: lo, stride: PAGE, count: (hi - lo) / PAGE + 1, kind: Access::Load });
        // grid_search: the binary search over the unionized energies
        // (A[mid] > e exactly when mid > idx), one load per new page probed.
        let mark = plan.len();
        let (mut lo, mut hi) = (0u64, n_union - 1);
        let mut last_page = u64::MAX;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let page = (mid * ENERGY) & !(PAGE - 1);
            if page != last_page {
                plan.push(Op::Access { addr: self.base[1] + page, kind: Access::Load });
                last_page = page;
            }
            if mid > idx {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        plan[mark..].reverse();
        plan.push(Op::AccessRange { addr: self.code_base, stride: PAGE, count: self.code / PAGE, kind: Access::Ifetch });
    }

    /// The next op of a looking-up thread: the rest of its lookup, or the
    /// start of the next one.
    fn lookup(&self, s: &mut Thread, ops: &mut u64) -> Op {
        if let Some(op) = s.plan.pop() {
            return op;
        }
        if self.lookups != 0 && s.lookups >= self.quota(s.idx) {
            s.phase = Phase::Done;
            return Op::Exit;
        }
        s.phase = Phase::Lookup;
        s.lookups += 1;
        *ops += 1;
        self.plan_lookup(s);
        s.plan.pop().expect("a lookup fetches its code first")
    }

    /// The main thread's initialisation writes, table after table.
    fn init_step(&mut self, s: &mut Thread, table: u8, off: u64, ops: &mut u64) -> Op {
        let sizes = self.sizes();
        let (mut table, mut off) = (table as usize, off);
        while table < 3 && off >= sizes[table] {
            (table, off) = (table + 1, 0);
        }
        if table == 3 {
            self.ready = true;
            return self.lookup(s, ops);
        }
        let n = INIT_STEP.min(sizes[table] - off);
        s.phase = Phase::Init(table as u8, off + n);
        Op::AccessRange { addr: self.base[table] + off, stride: PAGE, count: n / PAGE, kind: Access::Store }
    }
}

impl Workload for XsBench {
    fn name(&self) -> &str {
        "xsbench"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let nr_cpus = env.nr_cpus();
        if nr_cpus == 0 {
            return Err(Error::Workload("the machine has no CPUs".into()));
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
            let rng = Rng::stream(seed, &format!("xsbench/{t}"));
            self.st.push(Thread { idx: t, phase, rng, lookups: 0, stack_cursor: 0, plan: Vec::new() });
        }
        self.tasks = TaskMap::new(&ids)?;
        self.ready = false;
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        // The threads' states are taken out so that `self` can be read while
        // one changes (its plan is reused from lookup to lookup).
        let mut st = std::mem::take(&mut self.st);
        let s = &mut st[i];
        if last.is_err() {
            s.phase = Phase::Done;
        }
        let rw = prot::READ | prot::WRITE;
        let anon = map::PRIVATE | map::ANONYMOUS;
        let op = match s.phase {
            Phase::Setup(k) => {
                s.phase = Phase::Setup(k + 1);
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
                    2..=4 => {
                        if k == 2 {
                            self.code_base = last.val() as u64;
                        } else {
                            self.base[k as usize - 3] = last.val() as u64;
                        }
                        Op::Mmap { addr: 0, len: self.sizes()[k as usize - 2], prot: rw, flags: anon, fd: -1, off: 0 }
                    }
                    5 => {
                        self.base[2] = last.val() as u64;
                        Op::Mmap { addr: 0, len: self.stack * self.threads as u64, prot: rw, flags: anon, fd: -1, off: 0 }
                    }
                    _ => {
                        self.stack_base = last.val() as u64;
                        self.init_step(s, 0, 0, ops)
                    }
                }
            }
            Phase::Init(table, off) => self.init_step(s, table, off, ops),
            Phase::WaitSetup => {
                if self.ready {
                    self.lookup(s, ops)
                } else {
                    Op::Compute { ns: self.poll }
                }
            }
            Phase::Lookup => self.lookup(s, ops),
            Phase::Done => Op::Exit,
        };
        self.st = st;
        op
    }

    fn iterations(&self, task: TaskId) -> Option<u64> {
        self.tasks.get(task).map(|i| self.st[i].lookups)
    }

    fn peak_bytes(&self) -> Option<u64> {
        let stacks = self.stack * self.threads as u64;
        let tables: u64 = self.sizes().iter().map(|&b| b + pte_table_bytes(b)).sum();
        Some(self.code + tables + stacks + pte_table_bytes(stacks))
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(XsBench::new(p)?))
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "xsbench",
        help: "XSBench's unionized-grid lookups: one process, `threads` threads; nuclide, unionized-energy and index grids (`size`, `gridpoints`) written once, then lookups (binary search, one index-grid row, one grid point per nuclide of a random material, a stack store, hot code); op = lookup",
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
        k.run(&mut *w, &ids, 400_000);
        (k, ids)
    }

    /// The three tables' (base, length), from the main thread's mmaps.
    fn tables(k: &FakeKernel, main: TaskId) -> Vec<(u64, u64)> {
        k.log(main)
            .iter()
            .filter_map(|s| match s.op {
                Op::Mmap { len, fd: -1, .. } => Some((s.ret.val() as u64, len)),
                _ => None,
            })
            .take(3)
            .collect()
    }

    #[test]
    fn the_materials_are_xsbenchs() {
        let m = materials(true);
        let nucs: Vec<u32> = m.iter().map(|x| x.nuclides).collect();
        assert_eq!(nucs, [321, 5, 4, 4, 27, 21, 21, 21, 21, 21, 9, 9]);
        // The large fuel: nuclides 68..354 are one run after the 34 listed.
        assert_eq!(m[0].runs.last(), Some(&(68, 287)));
        assert_eq!((m[0].first, m[0].last), (0, 354));
        assert_eq!(materials(false)[0].nuclides, 34);
        // 55.7 nuclides per lookup on average (pick_mat's fractions).
        let mut prev = 0.0;
        let mean: f64 = m
            .iter()
            .zip(MAT_CDF)
            .map(|(x, c)| {
                let p = c - prev;
                prev = c;
                p * x.nuclides as f64
            })
            .sum();
        assert!((mean - 55.7).abs() < 0.1, "{mean}");
    }

    #[test]
    fn initialises_then_looks_up_as_xsbench_does() {
        let g = 16;
        let (k, ids) = run(&[("threads", i(3)), ("gridpoints", i(g)), ("lookups", i(300)), ("compute_ns", i(500))]);
        let t = tables(&k, ids[0]);
        // Nuclide grid, unionized energies, index grid, in GridInit's order.
        let pts = 355 * g as u64;
        assert_eq!(t.iter().map(|x| x.1).collect::<Vec<_>>(), [pts * 48, pts * 8, pts * 355 * 4].map(|b| b.next_multiple_of(PAGE)));
        let computes = ids.iter().map(|t| k.log(*t).iter().filter(|s| s.op == Op::Compute { ns: 500 }).count()).sum::<usize>();
        assert_eq!(computes, 300);
        assert_eq!(ids.iter().map(|t| k.ops[t]).sum::<u64>(), 300);
        for &id in &ids {
            assert!(k.exited.get(&id).copied().unwrap_or(false));
            assert!(k.log(id).iter().all(|s| !s.ret.is_err()));
        }
        // The main thread wrote every table once before any lookup.
        let written: u64 = k
            .log(ids[0])
            .iter()
            .map(|s| match s.op {
                Op::AccessRange { count, kind: Access::Store, .. } => count,
                _ => 0,
            })
            .sum();
        assert_eq!(written, t.iter().map(|x| x.1 / PAGE).sum::<u64>());
        let inside = |a: u64, tb: (u64, u64)| a >= tb.0 && a < tb.0 + tb.1;
        let (mut index_pages, mut points, mut search) = (0, 0, 0);
        for id in &ids {
            for s in k.log(*id) {
                match s.op {
                    Op::AccessRange { addr, stride, count, kind: Access::Load } if inside(addr, t[0]) => {
                        assert_eq!(stride, g as u64 * 48, "one point per nuclide, nuclide after nuclide");
                        assert!(inside(addr + stride * (count - 1), t[0]));
                        points += count;
                    }
                    Op::AccessRange { addr, count, kind: Access::Load, .. } if inside(addr, t[2]) => index_pages += count,
                    Op::Access { addr, kind: Access::Load } if inside(addr, t[1]) => search += 1,
                    _ => {}
                }
            }
        }
        // ~55.7 nuclides per lookup; a 1,420-byte row is one or two pages;
        // log2(5,680) = 12.5 probes over 12 pages of energies.
        let per = |n: u64| n as f64 / 300.0;
        assert!((40.0..72.0).contains(&per(points)), "{}", per(points));
        assert!((1.0..1.6).contains(&per(index_pages)), "{}", per(index_pages));
        assert!((3.0..14.0).contains(&per(search)), "{}", per(search));
    }

    #[test]
    fn the_search_finds_the_energys_row() {
        let mut p = Params::new([("gridpoints".to_string(), i(64))].into_iter().collect());
        let mut w = XsBench::new(&mut p).unwrap();
        w.base = [1 << 30, 2 << 30, 3 << 30];
        w.code_base = 4 << 30;
        w.stack_base = 5 << 30;
        let mut s = Thread { idx: 0, phase: Phase::Lookup, rng: Rng::new(3), lookups: 0, stack_cursor: 0, plan: Vec::new() };
        for _ in 0..50 {
            w.plan_lookup(&mut s);
            let ops: Vec<Op> = s.plan.iter().rev().copied().collect();
            let probes: Vec<u64> = ops
                .iter()
                .filter_map(|o| match *o {
                    Op::Access { addr, kind: Access::Load } => Some(addr - (2 << 30)),
                    _ => None,
                })
                .collect();
            // The first probe is the middle of the energies; the last one is
            // on the page of the row the index-grid load reads.
            assert_eq!(probes[0], (355 * 64 / 2 * 8) & !(PAGE - 1));
            let row_page = ops.iter().find_map(|o| match *o {
                Op::AccessRange { addr, kind: Access::Load, .. } if addr >= 3 << 30 => Some(addr - (3 << 30)),
                _ => None,
            });
            let idx_of_row = row_page.unwrap() / (355 * 4);
            let last = *probes.last().unwrap();
            assert!((idx_of_row * 8).abs_diff(last) < 2 * PAGE, "{idx_of_row} {last}");
            // The nuclide grids are read at the same energy: the point below
            // it, j of 64, sits where row idx of the 355 x 64 sits.
            let j = ops.iter().find_map(|o| match *o {
                Op::AccessRange { addr, kind: Access::Load, .. } if (1 << 30..2 << 30).contains(&addr) => {
                    Some((addr - (1 << 30)) % (64 * 48) / 48)
                }
                _ => None,
            });
            assert!((j.unwrap() * 355).abs_diff(idx_of_row) <= 355 + 12, "{j:?} {idx_of_row}");
            assert!(probes.windows(2).all(|w| w[0] != w[1]));
        }
    }

    #[test]
    fn same_seed_same_addresses() {
        let kv = [("threads", i(2)), ("gridpoints", i(8)), ("lookups", i(20))];
        let (a, ids) = run(&kv);
        let (b, _) = run(&kv);
        assert_eq!(a.log(ids[1]), b.log(ids[1]));
    }

    #[test]
    fn parameters_are_validated() {
        for (kv, key) in [
            (vec![("threads", i(0))], "threads"),
            (vec![("gridpoints", i(1))], "gridpoints"),
            (vec![("size", s("huge"))], "size"),
            (vec![("code_kib", i(6))], "code_kib"),
            (vec![("stack_kib", i(0))], "stack_kib"),
            (vec![("poll_us", i(0))], "poll_us"),
            (vec![("compute_ns", i(2_000_000_000))], "compute_ns"),
            (vec![("grid_mib", i(1))], "grid_mib"),
        ] {
            let e = build("xsbench", &kv).err().unwrap_or_else(|| panic!("{key} accepted"));
            assert!(e.starts_with(key), "{key}: {e}");
        }
    }
}
