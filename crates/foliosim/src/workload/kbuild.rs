//! "kbuild": a kernel-build-like mix of short-lived compiler processes,
//! `tasks` of them at a time (make -jN), `jobs` per slot.
//!
//! Each slot is a long-lived "make" process with its own small heap. Per
//! job it forks, writes a little of its heap while the child still shares
//! it (CoW copies), and waits for the child (wait4); after the reap it
//! writes its heap again (the child exec'd, so the pages are reused in
//! place). The child is the compiler:
//! - execve of the compiler binary, one shared file: text r-x, data rw
//!   private, bss (the kernel's copy of argv touches the new stack);
//! - instruction fetches over part of the text (read faults on the shared
//!   page cache, with fault-around), the data segment written (ld.so
//!   relocations: private file CoW, order 0 in every kernel) and bss,
//!   partly read before it is written (zero-page PTEs, then path B);
//! - a malloc heap of log-uniform size (256 KiB..8 MiB) grown with brk in
//!   glibc's steps (M_TOP_PAD 128 KiB + a 4 KiB request) and written as it
//!   grows; three small anonymous maps (8..256 KiB, unaligned lengths);
//!   stack pages read before they are written (zero page, then a write);
//! - the source file and `headers` header files read through the page
//!   cache (open/read/close each), `compute_us` of user work;
//! - the object file written (its page cache dirtied and kept), exit:
//!   exit_group tears the mm down.
//!
//! ops = jobs reaped by the slots.
//!
//! Simplifications (docs/mechanisms/large-anon-folios.md#what-it-leaves-out): one process per job (no sh, gcc driver
//! or as), one make per slot (a make -jN is one process keeping N children;
//! here each slot keeps one, on its own CPU), no stat() of prerequisites.

use super::common::{read_size, TaskCfg, TaskMap, KIB, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Access, Fd, FileId, FsKind, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::sim::rng::Rng;
use crate::sim::Ns;
use crate::types::Error;
use std::collections::BTreeMap;

/// The compiler binary's program headers (a cc1-like image: large text,
/// relocated data, bss), loaded at the non-PIE base.
const ELF_BASE: u64 = 0x40_0000;
const TEXT: u64 = 16 * MIB;
const DATA: u64 = 512 * KIB;
const BSS: u64 = 512 * KIB;
/// The part of the text one compile executes.
const TEXT_RUN: u64 = 2 * MIB;
const MAKE_HEAP: u64 = 256 * KIB;
const SRC_FILES: usize = 8;
const SRC: u64 = 64 * KIB;
/// Distinct headers in the tree (their page cache is shared by all jobs).
const HEADER_FILES: usize = 512;
const HEADER: u64 = 8 * KIB;
/// The object file each job writes.
const OBJ: u64 = 128 * KIB;
/// glibc sbrk step: the request plus M_TOP_PAD (128 KiB).
const BRK_STEP: u64 = 132 * KIB;
/// Stack pages a job touches below the argument page.
const STACK_TOUCH: u64 = 8;
/// bss pages read before the writes begin: one in this many.
const BSS_READ_STRIDE: u64 = 8;

/// A make slot.
#[derive(Clone, Default)]
struct Slot {
    pc: u32,
    job: u64,
    make_heap: u64,
}

/// One compiler process (a forked child after its exec).
#[derive(Clone)]
struct Job {
    pc: u32,
    slot: usize,
    nr: u64,
    rng: Rng,
    fd: Fd,
    sp: u64,
    /// Lengths of the small anonymous maps still to make.
    lens: Vec<u64>,
    heap: u64,
    brk_base: u64,
    brk_cur: u64,
    headers_left: u64,
}

pub struct Kbuild {
    cfg: TaskCfg,
    jobs: u64,
    headers: u64,
    compute: Ns,
    fs: FsKind,
    cc1: FileId,
    srcs: Vec<FileId>,
    hdrs: Vec<FileId>,
    /// Output object file of job j of slot s: objs[s * jobs + j].
    objs: Vec<FileId>,
    tasks: TaskMap,
    st: Vec<Slot>,
    children: BTreeMap<TaskId, Job>,
    seed: u64,
}

impl Kbuild {
    pub fn new(p: &mut Params) -> Result<Kbuild, String> {
        let cfg = TaskCfg::read(p)?;
        let jobs = read_size(p, "jobs", 10, 1, 1 << 20)?;
        let compute_us = p.u64("compute_us", 5000)?;
        let headers = p.u64("headers", 300)?;
        let fs = match p.choice("fs", "tmpfs", &["tmpfs", "disk"])?.as_str() {
            "disk" => FsKind::Disk,
            _ => FsKind::Tmpfs,
        };
        p.finish()?;
        Ok(Kbuild {
            cfg,
            jobs,
            headers,
            compute: compute_us * 1000,
            fs,
            cc1: 0,
            srcs: Vec::new(),
            hdrs: Vec::new(),
            objs: Vec::new(),
            tasks: TaskMap::default(),
            st: Vec::new(),
            children: BTreeMap::new(),
            seed: 0,
        })
    }

    fn specs() -> Vec<ParamSpec> {
        let mut v = TaskCfg::specs();
        v.extend([
            ParamSpec { name: "jobs", default: "10".into(), help: "compiler jobs each slot (make -jN: tasks = N) runs before it exits" },
            ParamSpec { name: "compute_us", default: "5000".into(), help: "user-mode work of one compiler job, us" },
            ParamSpec { name: "headers", default: "300".into(), help: "header files (8 KiB, from a shared pool of 512) each job opens and reads; kernel objects' .cmd files list a few hundred" },
            ParamSpec { name: "fs", default: "tmpfs".into(), help: "where the compiler binary, sources, headers and objects live: tmpfs or disk (inputs populated)" },
        ]);
        v
    }

    fn anon(len: u64) -> Op {
        Op::Mmap { addr: 0, len, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 }
    }

    /// The make slot: fork, a CoW write, wait4, a reuse write, next job.
    fn make_step(&self, s: &mut Slot, last: Ret, ops: &mut u64) -> Op {
        loop {
            let pc = s.pc;
            s.pc += 1;
            return match pc {
                0 => Self::anon(MAKE_HEAP),
                1 => {
                    s.make_heap = last.val() as u64;
                    Op::AccessRange { addr: s.make_heap, stride: PAGE, count: MAKE_HEAP / PAGE, kind: Access::Store }
                }
                2 => {
                    if s.job == self.jobs {
                        s.pc = 2;
                        return Op::Exit;
                    }
                    Op::Fork
                }
                // The job table updated while the child shares the heap.
                3 => Op::AccessRange { addr: s.make_heap, stride: PAGE, count: 2, kind: Access::Store },
                4 => Op::Wait,
                // Reaped: make updates its state; the child's exec left
                // the pages to make alone.
                5 => Op::AccessRange { addr: s.make_heap, stride: PAGE, count: 8, kind: Access::Store },
                _ => {
                    s.job += 1;
                    *ops += 1;
                    s.pc = 2;
                    continue;
                }
            };
        }
    }

    /// The compiler process.
    fn job_step(&self, j: &mut Job, last: Ret) -> Op {
        loop {
            let pc = j.pc;
            j.pc += 1;
            return match pc {
                0 => Op::Exec { file: self.cc1, vaddr: ELF_BASE, text: TEXT, data: DATA, bss: BSS, mmap_base: 0 },
                1 => {
                    j.sp = last.val() as u64;
                    Op::AccessRange { addr: ELF_BASE, stride: PAGE, count: TEXT_RUN / PAGE, kind: Access::Ifetch }
                }
                // ld.so relocates the data segment; bss is read (tables
                // tested before first use: zero-page PTEs) and then written.
                2 => Op::AccessRange { addr: ELF_BASE + TEXT, stride: PAGE, count: DATA / PAGE, kind: Access::Store },
                3 => Op::AccessRange {
                    addr: ELF_BASE + TEXT + DATA,
                    stride: BSS_READ_STRIDE * PAGE,
                    count: BSS / PAGE / BSS_READ_STRIDE,
                    kind: Access::Load,
                },
                4 => Op::AccessRange { addr: ELF_BASE + TEXT + DATA, stride: PAGE, count: BSS / PAGE, kind: Access::Store },
                // The stack below the argument page: read, then written.
                5 => Op::AccessRange { addr: j.sp - (STACK_TOUCH + 1) * PAGE, stride: PAGE, count: STACK_TOUCH / 2, kind: Access::Load },
                6 => Op::AccessRange { addr: j.sp - (STACK_TOUCH + 1) * PAGE, stride: PAGE, count: STACK_TOUCH, kind: Access::Store },
                7 => {
                    j.heap = (256 * KIB) << j.rng.below(6); // 256 KiB .. 8 MiB
                    j.lens = (0..3).map(|_| (2 + j.rng.below(63)) * PAGE).collect();
                    j.pc = 20;
                    continue;
                }
                // The malloc heap: brk grown step by step, each step written.
                20 => Op::Brk { addr: 0 },
                21 => {
                    j.brk_base = last.val() as u64;
                    j.brk_cur = j.brk_base;
                    j.pc = 22;
                    continue;
                }
                22 => {
                    if j.brk_cur - j.brk_base >= j.heap {
                        j.pc = 30;
                        continue;
                    }
                    Op::Brk { addr: j.brk_cur + BRK_STEP }
                }
                23 => {
                    let new = last.val() as u64;
                    let from = j.brk_cur.div_ceil(PAGE) * PAGE;
                    let to = new.div_ceil(PAGE) * PAGE;
                    j.brk_cur = new;
                    j.pc = 22;
                    if to <= from {
                        return Op::Exit; // brk refused to grow
                    }
                    Op::AccessRange { addr: from, stride: PAGE, count: (to - from) / PAGE, kind: Access::Store }
                }
                // Small anonymous maps, each written.
                30 => match j.lens.first() {
                    Some(&len) => Self::anon(len),
                    None => {
                        j.pc = 40;
                        continue;
                    }
                },
                31 => {
                    let a = last.val() as u64;
                    let len = j.lens.remove(0);
                    j.pc = 30;
                    Op::AccessRange { addr: a, stride: PAGE, count: len / PAGE, kind: Access::Store }
                }
                // The source, then the headers.
                40 => Op::Open { file: self.srcs[j.rng.below(SRC_FILES as u64) as usize] },
                41 => {
                    j.fd = last.val() as Fd;
                    Op::Read { fd: j.fd, len: SRC, buf: 0 }
                }
                42 => {
                    j.headers_left = self.headers;
                    Op::Close { fd: j.fd }
                }
                43 => {
                    if j.headers_left == 0 {
                        j.pc = 50;
                        continue;
                    }
                    j.headers_left -= 1;
                    Op::Open { file: self.hdrs[j.rng.below(HEADER_FILES as u64) as usize] }
                }
                44 => {
                    j.fd = last.val() as Fd;
                    Op::Read { fd: j.fd, len: HEADER, buf: 0 }
                }
                45 => {
                    j.pc = 43;
                    Op::Close { fd: j.fd }
                }
                50 => Op::Compute { ns: self.compute.max(1) },
                // The object file, then exit_group.
                51 => Op::Open { file: self.objs[j.slot * self.jobs as usize + j.nr as usize] },
                52 => {
                    j.fd = last.val() as Fd;
                    Op::Write { fd: j.fd, len: OBJ, buf: 0 }
                }
                53 => Op::Close { fd: j.fd },
                _ => Op::Exit,
            };
        }
    }
}

impl Workload for Kbuild {
    fn name(&self) -> &str {
        "kbuild"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        self.seed = env.seed();
        self.cc1 = env.create_file(self.fs, TEXT + DATA, true)?;
        self.srcs = (0..SRC_FILES).map(|_| env.create_file(self.fs, SRC, true)).collect::<Result<_, _>>()?;
        self.hdrs = (0..HEADER_FILES).map(|_| env.create_file(self.fs, HEADER, true)).collect::<Result<_, _>>()?;
        let ids = self.cfg.spawn(env)?;
        self.objs = (0..ids.len() as u64 * self.jobs).map(|_| env.create_file(self.fs, 0, false)).collect::<Result<_, _>>()?;
        self.tasks = TaskMap::new(&ids)?;
        self.st = vec![Slot::default(); ids.len()];
        Ok(())
    }

    fn iterations(&self, task: TaskId) -> Option<u64> {
        self.tasks.get(task).map(|i| self.st[i].job)
    }

    fn on_fork(&mut self, parent: TaskId, child: TaskId) {
        let Some(i) = self.tasks.get(parent) else { return };
        let nr = self.st[i].job;
        let rng = Rng::stream(self.seed, &format!("kbuild/{i}/{nr}"));
        self.children.insert(
            child,
            Job { pc: 0, slot: i, nr, rng, fd: -1, sp: 0, lens: Vec::new(), heap: 0, brk_base: 0, brk_cur: 0, headers_left: 0 },
        );
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        if let Some(i) = self.tasks.get(task) {
            if last.is_err() {
                return Op::Exit;
            }
            let mut s = std::mem::take(&mut self.st[i]);
            let op = self.make_step(&mut s, last, ops);
            self.st[i] = s;
            return op;
        }
        let Some(mut j) = self.children.remove(&task) else { return Op::Exit };
        if last.is_err() {
            return Op::Exit;
        }
        let op = self.job_step(&mut j, last);
        if op != Op::Exit {
            self.children.insert(task, j);
        }
        op
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(Kbuild::new(p)?))
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "kbuild",
        help: "kernel-build-like mix: `tasks` make slots (-jN), each running `jobs` compiler processes: fork, execve of a shared file-backed binary (text faults with fault-around, data CoW, bss), a brk heap grown in glibc steps and small anon maps written, stack read then written, a source and `headers` headers read, compute_us of user work, the object file written, exit; the slot waits (wait4) for each; op = job",
        params: Kbuild::specs,
        build,
    }
}
