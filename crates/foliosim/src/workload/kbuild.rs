//! "kbuild": a kernel-build-like mix of short-lived compiler jobs, `tasks`
//! of them at a time (make -jN), `jobs` per slot. Each slot is a long-lived
//! "make" process with its own small heap; per job it forks (the child
//! exits at once: it stands for the fork+exec of the compiler, whose new mm
//! is modelled by the job's own maps below), writes its heap (CoW faults
//! while the child lives, reuse after), then runs the job in fresh mappings:
//! the compiler text (a shared file, mapped private read+exec, instruction
//! fetches with fault-around), a malloc heap of log-uniform size (256 KiB..
//! 8 MiB) grown with brk in glibc's steps (M_TOP_PAD 128 KiB + a 4 KiB
//! request) and written as it grows, three small anonymous maps (8..256 KiB, unaligned
//! lengths), a stack read before it is written (zero page, then a write to
//! it), a source file read through the page cache, `compute_us` of user
//! work, and finally unmaps everything (the exit_group teardown). ops = jobs.
//!
//! Simplifications (spec/000 R1): no exec of the child (its mm would only be
//! torn down), no real wait() (the slot runs the job itself), no file writes.

use super::common::{TaskCfg, TaskMap, KIB, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Access, Fd, FileId, FsKind, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::sim::rng::Rng;
use crate::sim::Ns;

const TEXT: u64 = 16 * MIB;
const TEXT_RUN: u64 = 2 * MIB;
const MAKE_HEAP: u64 = 256 * KIB;
const STACK: u64 = 132 * KIB;
const SRC_FILES: usize = 8;
const SRC: u64 = 64 * KIB;
/// glibc sbrk step: the request plus M_TOP_PAD (128 KiB).
const BRK_STEP: u64 = 132 * KIB;

#[derive(Clone)]
struct Slot {
    pc: u32,
    job: u64,
    rng: Rng,
    make_heap: u64,
    fd: Fd,
    /// (addr, len) of the job's mappings, in map order.
    maps: Vec<(u64, u64)>,
    /// Lengths still to map for this job: 3 small, stack.
    lens: Vec<u64>,
    heap: u64,
    brk_base: u64,
    brk_cur: u64,
}

pub struct Kbuild {
    cfg: TaskCfg,
    jobs: u64,
    compute: Ns,
    fs: FsKind,
    text: FileId,
    srcs: Vec<FileId>,
    tasks: TaskMap,
    st: Vec<Slot>,
    seed: u64,
}

impl Kbuild {
    pub fn new(p: &mut Params) -> Result<Kbuild, String> {
        let cfg = TaskCfg::read(p)?;
        let jobs = p.u64("jobs", 10)?;
        let compute_us = p.u64("compute_us", 5000)?;
        let fs = match p.choice("fs", "tmpfs", &["tmpfs", "disk"])?.as_str() {
            "disk" => FsKind::Disk,
            _ => FsKind::Tmpfs,
        };
        p.finish()?;
        Ok(Kbuild { cfg, jobs, compute: compute_us * 1000, fs, text: 0, srcs: Vec::new(), tasks: TaskMap::default(), st: Vec::new(), seed: 0 })
    }

    fn specs() -> Vec<ParamSpec> {
        let mut v = TaskCfg::specs();
        v.extend([
            ParamSpec { name: "jobs", default: "10".into(), help: "compiler jobs each slot (make -jN: tasks = N) runs before it exits" },
            ParamSpec { name: "compute_us", default: "5000".into(), help: "user-mode work of one compiler job, us" },
            ParamSpec { name: "fs", default: "tmpfs".into(), help: "where the compiler binary and sources live: tmpfs or disk (both populated)" },
        ]);
        v
    }

    fn anon(len: u64) -> Op {
        Op::Mmap { addr: 0, len, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 }
    }

    fn step(&self, s: &mut Slot, last: Ret, ops: &mut u64) -> Op {
        loop {
            let pc = s.pc;
            s.pc += 1;
            return match pc {
                // Once: make's own heap, written.
                0 => Self::anon(MAKE_HEAP),
                1 => {
                    s.make_heap = last.val() as u64;
                    Op::AccessRange { addr: s.make_heap, stride: PAGE, count: MAKE_HEAP / PAGE, kind: Access::Store }
                }
                // A job starts: fork (the child exits at once).
                2 => {
                    if s.job == self.jobs {
                        s.pc = 2;
                        return Op::Exit;
                    }
                    Op::Fork
                }
                3 => Op::AccessRange { addr: s.make_heap, stride: PAGE, count: 8, kind: Access::Store },
                4 => Op::Open { file: self.text },
                5 => {
                    s.fd = last.val() as Fd;
                    Op::Mmap { addr: 0, len: TEXT, prot: prot::READ | prot::EXEC, flags: map::PRIVATE, fd: s.fd, off: 0 }
                }
                6 => {
                    let a = last.val() as u64;
                    s.maps.push((a, TEXT));
                    Op::AccessRange { addr: a, stride: PAGE, count: TEXT_RUN / PAGE, kind: Access::Ifetch }
                }
                7 => Op::Close { fd: s.fd },
                8 => {
                    // Sizes of this job's anonymous maps.
                    s.heap = (256 * KIB) << s.rng.below(6); // 256 KiB .. 8 MiB
                    let mut lens = Vec::new();
                    for _ in 0..3 {
                        lens.push((2 + s.rng.below(63)) * PAGE);
                    }
                    lens.push(STACK);
                    s.lens = lens;
                    s.pc = 20;
                    continue;
                }
                // The malloc heap: brk grown step by step, each step written.
                20 => Op::Brk { addr: 0 },
                21 => {
                    s.brk_base = last.val() as u64;
                    s.brk_cur = s.brk_base;
                    s.pc = 22;
                    continue;
                }
                22 => {
                    if s.brk_cur - s.brk_base >= s.heap {
                        s.pc = 9;
                        continue;
                    }
                    Op::Brk { addr: s.brk_cur + BRK_STEP }
                }
                23 => {
                    let new = last.val() as u64;
                    let from = s.brk_cur.div_ceil(PAGE) * PAGE;
                    let to = new.div_ceil(PAGE) * PAGE;
                    s.brk_cur = new;
                    s.pc = 22;
                    if to <= from {
                        return Op::Exit; // brk refused to grow
                    }
                    Op::AccessRange { addr: from, stride: PAGE, count: (to - from) / PAGE, kind: Access::Store }
                }
                // Map and write each anonymous region (the stack is read first).
                9 => match s.lens.first() {
                    Some(&len) => Self::anon(len),
                    None => {
                        s.pc = 12;
                        continue;
                    }
                },
                10 => {
                    let a = last.val() as u64;
                    let len = s.lens.remove(0);
                    s.maps.push((a, len));
                    if len == STACK {
                        Op::AccessRange { addr: a + len - 8 * PAGE, stride: PAGE, count: 4, kind: Access::Load }
                    } else {
                        s.pc = 9;
                        Op::AccessRange { addr: a, stride: PAGE, count: len / PAGE, kind: Access::Store }
                    }
                }
                11 => {
                    let &(a, len) = s.maps.last().unwrap();
                    s.pc = 9;
                    Op::AccessRange { addr: a + len - 8 * PAGE, stride: PAGE, count: 8, kind: Access::Store }
                }
                12 => Op::Open { file: self.srcs[s.rng.below(SRC_FILES as u64) as usize] },
                13 => {
                    s.fd = last.val() as Fd;
                    Op::Read { fd: s.fd, len: SRC }
                }
                14 => Op::Close { fd: s.fd },
                15 => Op::Compute { ns: self.compute.max(1) },
                // exit_group of the job: unmap everything it mapped.
                16 => match s.maps.pop() {
                    Some((a, len)) => {
                        s.pc = 16;
                        Op::Munmap { addr: a, len }
                    }
                    None => {
                        s.pc = 17;
                        Op::Brk { addr: s.brk_base }
                    }
                },
                17 => {
                    s.job += 1;
                    *ops += 1;
                    s.pc = 2;
                    continue;
                }
                _ => Op::Exit,
            };
        }
    }
}

impl Workload for Kbuild {
    fn name(&self) -> &str {
        "kbuild"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), String> {
        self.seed = env.seed();
        self.text = env.create_file(self.fs, TEXT, true)?;
        self.srcs = (0..SRC_FILES).map(|_| env.create_file(self.fs, SRC, true)).collect::<Result<_, _>>()?;
        let ids = self.cfg.spawn(env)?;
        self.tasks = TaskMap::new(&ids)?;
        self.st = (0..ids.len())
            .map(|i| Slot { pc: 0, job: 0, rng: Rng::stream(self.seed, &format!("kbuild/{i}")), make_heap: 0, fd: -1, maps: Vec::new(), lens: Vec::new(), heap: 0, brk_base: 0, brk_cur: 0 })
            .collect();
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit }; // a forked child: exec'd away
        if last.is_err() {
            return Op::Exit;
        }
        let mut s = std::mem::replace(&mut self.st[i], Slot { pc: 0, job: 0, rng: Rng::new(0), make_heap: 0, fd: -1, maps: Vec::new(), lens: Vec::new(), heap: 0, brk_base: 0, brk_cur: 0 });
        let op = self.step(&mut s, last, ops);
        self.st[i] = s;
        op
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(Kbuild::new(p)?))
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "kbuild",
        help: "kernel-build-like mix: `tasks` make slots (-jN), each running `jobs` short compiler jobs: fork, text fetch from a shared binary, a brk heap grown in glibc steps and small anon maps written, stack read then written, a source read, compute_us of user work, unmap all; op = job",
        params: Kbuild::specs,
        build,
    }
}
