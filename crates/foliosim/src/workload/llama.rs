//! "llama": an llama.cpp-like inference workload (docs/mechanisms/lazy-unmap-flush.md#workloads-and-scaling).
//! `processes` processes of `threads` threads each. Each process opens its
//! own model file (`model_mib`, on `fs`, cold: the seed dropped caches before
//! each run) and mmaps it PROT_READ, MAP_PRIVATE (llama.cpp's default mmap
//! load), maps the shared executable's hot text (`code_kib`, one file for all
//! processes, cached, PROT_READ|PROT_EXEC, MAP_PRIVATE) and a small
//! read-write anonymous KV-cache/activation area (`kv_mib` per process).
//! Then, for each of `tokens` tokens, every thread streams its share of
//! every layer of the model (the model is `layers` equal layers; thread t
//! reads the t-th of `threads` contiguous slices of each layer), so the
//! whole model is read once per token. Per chunk of `chunk_kib` weights a
//! thread fetches the hot text (one instruction fetch per code page), loads
//! the chunk (`loads_per_page` loads per 4 KiB page) and stores then loads
//! `state_pages` pages of its slice of the KV area (cycling through it),
//! then reads the chunk's bytes from memory (`Op::Stream`: token generation
//! is bound by the memory bandwidth, every weight read once per token; each
//! byte stands for `stream_scale` bytes, as the model is scaled down), each
//! page from the node holding it at one CPU's bandwidth, shared with every
//! thread streaming from that node; `page_compute_ns` per page adds user
//! time.
//! Threads of one process meet at a barrier after each token (llama.cpp's
//! threads sync after every graph; only the per-token one is modelled),
//! polling every `barrier_poll_us` of user time (ggml threads spin).
//!
//! With processes x model larger than memory and swap off, the page cache of
//! the weights is reclaimed (and, with tiering, demoted and promoted) while
//! the model is mapped: every reclaimed page is an unmap of a read-only PTE.
//!
//! ops = 4 KiB weight pages streamed. Tasks exit after the last token; the
//! last exit is the runtime. Any error (e.g. ENOMEM) makes the task exit.

use super::common::TaskMap;
use super::common::{pte_table_bytes, read_fs, read_size, KIB, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Access, Fd, FileId, FsKind, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::sim::Ns;
use crate::types::Error;

const MAX_MODEL_MIB: u64 = 1 << 24;
const MAX_TASKS: u64 = 2048;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The process leader's setup steps (open, mmap model, open, mmap code, mmap KV).
    Setup(u8),
    /// A worker waiting for its leader's mappings.
    WaitSetup,
    /// Streaming: sub-step of the current chunk.
    Run(u8),
    /// Finished token `token - 1`; waiting for the process's other threads.
    Barrier,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct Thread {
    proc_: u32,
    idx: u32,
    phase: Phase,
    fd: Fd,
    /// Tokens completed.
    token: u64,
    /// Layer being streamed, and the next page of this thread's slice of it.
    layer: u64,
    page: u64,
    /// Pages in the chunk being streamed.
    chunk_pages: u64,
    /// Next page of this thread's KV slice.
    kv_cursor: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Proc {
    ready: bool,
    model: u64,
    code: u64,
    kv: u64,
}

pub struct Llama {
    procs: u32,
    threads: u32,
    model: u64,
    layers: u64,
    tokens: u64,
    chunk: u64,
    loads_per_page: u64,
    code: u64,
    kv: u64,
    state_pages: u64,
    /// User time per weight page streamed.
    page_compute: Ns,
    /// Bytes each byte of weights read from memory stands for (0: none read).
    stream_scale: u64,
    fs: FsKind,
    pin: bool,
    barrier_poll: Ns,
    model_files: Vec<FileId>,
    code_file: FileId,
    tasks: TaskMap,
    p: Vec<Proc>,
    st: Vec<Thread>,
}

impl Llama {
    pub fn new(p: &mut Params) -> Result<Llama, String> {
        let procs = p.u64("processes", 3)?;
        let threads = p.u64("threads", 15)?;
        if procs == 0 || threads == 0 || procs * threads > MAX_TASKS {
            return Err(format!("threads: processes x threads must be between 1 and {MAX_TASKS}, got {procs} x {threads}"));
        }
        let model = read_size(p, "model_mib", 140, MIB, MAX_MODEL_MIB)?;
        let layers = p.u64("layers", 32)?;
        if layers == 0 || model / PAGE / layers < threads {
            return Err(format!(
                "layers: every layer must hold at least one page per thread ({} pages / {layers} layers < {threads} threads); use fewer layers or a larger model_mib",
                model / PAGE
            ));
        }
        let tokens = read_size(p, "tokens", 24, 1, 1 << 32)?;
        let chunk = read_size(p, "chunk_kib", 256, KIB, 1 << 20)?;
        if !chunk.is_multiple_of(PAGE) {
            return Err(format!("chunk_kib: must be a multiple of 4, got {}", chunk / KIB));
        }
        let loads_per_page = p.u64("loads_per_page", 1)?;
        if !(1..=64).contains(&loads_per_page) || !PAGE.is_multiple_of(loads_per_page) {
            return Err(format!("loads_per_page: must divide 4096 and be between 1 and 64, got {loads_per_page}"));
        }
        let code = read_size(p, "code_kib", 64, KIB, 1 << 20)?;
        if !code.is_multiple_of(PAGE) {
            return Err(format!("code_kib: must be a multiple of 4, got {}", code / KIB));
        }
        let kv = read_size(p, "kv_mib", 4, MIB, 1 << 20)?;
        if kv / PAGE < threads {
            return Err(format!("kv_mib: needs at least one page per thread, got {} MiB for {threads} threads", kv / MIB));
        }
        let state_pages = p.u64("state_pages", 4)?;
        if state_pages > 4096 {
            return Err(format!("state_pages: must be between 0 and 4096, got {state_pages}"));
        }
        let page_compute = p.u64("page_compute_ns", 0)?;
        if page_compute > 1_000_000_000 {
            return Err(format!("page_compute_ns: must be at most 1000000000, got {page_compute}"));
        }
        let stream_scale = p.u64("stream_scale", 1)?;
        if stream_scale > 1 << 20 {
            return Err(format!("stream_scale: must be at most 1048576, got {stream_scale}"));
        }
        let fs = read_fs(p, "fs", "disk")?;
        let pin = p.bool("pin", true)?;
        let poll = p.u64("barrier_poll_us", 20)?;
        if poll == 0 || poll > 1_000_000 {
            return Err(format!("barrier_poll_us: must be between 1 and 1000000, got {poll}"));
        }
        p.finish()?;
        Ok(Llama {
            procs: procs as u32,
            threads: threads as u32,
            model,
            layers,
            tokens,
            chunk,
            loads_per_page,
            code,
            kv,
            state_pages,
            page_compute,
            stream_scale,
            fs,
            pin,
            barrier_poll: poll * 1000,
            model_files: Vec::new(),
            code_file: 0,
            tasks: TaskMap::default(),
            p: Vec::new(),
            st: Vec::new(),
        })
    }

    fn specs() -> Vec<ParamSpec> {
        vec![
            ParamSpec { name: "processes", default: "3".into(), help: "concurrent llama.cpp processes, each with its own model (seed: 3)" },
            ParamSpec { name: "threads", default: "15".into(), help: "threads per process (llama.cpp -t; seed: 15)" },
            ParamSpec {
                name: "model_mib",
                default: "140".into(),
                help: "size of each process's model file, MiB (seed: ~70 GB; scale with the machine)",
            },
            ParamSpec {
                name: "layers",
                default: "32".into(),
                help: "equal layers of the model; each thread streams its slice of every layer",
            },
            ParamSpec { name: "tokens", default: "24".into(), help: "tokens generated: full passes over the model (seed: 24)" },
            ParamSpec { name: "chunk_kib", default: "256".into(), help: "weights streamed between two fetches of the hot code, KiB" },
            ParamSpec { name: "loads_per_page", default: "1".into(), help: "loads per 4 KiB page of weights (1..64, dividing 4096)" },
            ParamSpec {
                name: "code_kib",
                default: "64".into(),
                help: "hot executable text (shared file mapped PROT_READ|PROT_EXEC), fetched once per page per chunk, KiB",
            },
            ParamSpec {
                name: "kv_mib",
                default: "4".into(),
                help: "read-write anonymous KV cache/activations per process, MiB (split between its threads)",
            },
            ParamSpec {
                name: "state_pages",
                default: "4".into(),
                help: "pages of its KV slice a thread stores to and then loads per chunk",
            },
            ParamSpec {
                name: "page_compute_ns",
                default: "0".into(),
                help: "user time per 4 KiB weight page besides reading it from memory, ns",
            },
            ParamSpec {
                name: "stream_scale",
                default: "1".into(),
                help: "each byte of weights read from memory stands for this many (the memory scale-down of the model; 0: none read)",
            },
            ParamSpec {
                name: "fs",
                default: "disk".into(),
                help: "file system of the model files: \"disk\" (cold, read from disk on fault) or \"tmpfs\"",
            },
            ParamSpec {
                name: "pin",
                default: "true".into(),
                help: "pin thread i (over all processes) to CPU i % nr_cpus (false: the scheduler places them)",
            },
            ParamSpec { name: "barrier_poll_us", default: "20".into(), help: "user time between two polls of the per-token barrier, us" },
        ]
    }

    fn model_pages(&self) -> u64 {
        self.model / PAGE
    }

    /// First page and page count of thread `idx`'s slice of `layer`.
    fn slice(&self, layer: u64, idx: u32) -> (u64, u64) {
        let lp = self.model_pages() / self.layers;
        let base = layer * lp;
        // The last layer takes the remainder pages.
        let lp = if layer + 1 == self.layers { self.model_pages() - base } else { lp };
        let t = self.threads as u64;
        let lo = lp * idx as u64 / t;
        let hi = lp * (idx as u64 + 1) / t;
        (base + lo, hi - lo)
    }

    /// The next op of a running thread (sub-step `sub` of its chunk).
    fn run(&self, s: &mut Thread, sub: u8, ops: &mut u64) -> Op {
        let pr = self.p[s.proc_ as usize];
        match sub {
            // Hot code between chunks.
            0 => {
                s.phase = Phase::Run(1);
                Op::AccessRange { addr: pr.code, stride: PAGE, count: self.code / PAGE, kind: Access::Ifetch }
            }
            // The chunk of weights.
            1 => {
                let (first, n) = self.slice(s.layer, s.idx);
                s.chunk_pages = (self.chunk / PAGE).min(n - s.page);
                let addr = pr.model + (first + s.page) * PAGE;
                s.phase = Phase::Run(if self.state_pages > 0 { 2 } else { 4 });
                Op::AccessRange { addr, stride: PAGE / self.loads_per_page, count: s.chunk_pages * self.loads_per_page, kind: Access::Load }
            }
            // KV/activation stores, then loads of the same pages.
            2 | 3 => {
                let slice = self.kv / PAGE / self.threads as u64;
                let n = self.state_pages.min(slice - s.kv_cursor);
                let addr = pr.kv + (s.idx as u64 * slice + s.kv_cursor) * PAGE;
                let kind = if sub == 2 { Access::Store } else { Access::Load };
                if sub == 3 {
                    s.kv_cursor = (s.kv_cursor + n) % slice;
                }
                s.phase = Phase::Run(sub + 1);
                Op::AccessRange { addr, stride: PAGE, count: n, kind }
            }
            // The chunk's weights read from memory, then any other work on them.
            4 if self.stream_scale > 0 => {
                let (first, _) = self.slice(s.layer, s.idx);
                s.phase = Phase::Run(5);
                Op::Stream { addr: pr.model + (first + s.page) * PAGE, stride: PAGE, count: s.chunk_pages, bytes: PAGE * self.stream_scale }
            }
            4 | 5 if self.page_compute > 0 => {
                s.phase = Phase::Run(6);
                Op::Compute { ns: s.chunk_pages * self.page_compute }
            }
            // Chunk done: advance.
            _ => {
                *ops += s.chunk_pages;
                s.page += s.chunk_pages;
                let (_, n) = self.slice(s.layer, s.idx);
                if s.page >= n {
                    s.page = 0;
                    s.layer += 1;
                    if s.layer == self.layers {
                        s.layer = 0;
                        s.token += 1;
                        if s.token >= self.tokens {
                            s.phase = Phase::Done;
                            return Op::Exit;
                        }
                        s.phase = Phase::Barrier;
                        return Op::Compute { ns: self.barrier_poll };
                    }
                }
                self.run(s, 0, ops)
            }
        }
    }
}

impl Workload for Llama {
    fn name(&self) -> &str {
        "llama"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let nr_cpus = env.nr_cpus();
        if nr_cpus == 0 {
            return Err(Error::Workload("the machine has no CPUs".into()));
        }
        self.code_file = env.create_file(FsKind::Tmpfs, self.code, true)?;
        self.model_files = (0..self.procs).map(|_| env.create_file(self.fs, self.model, false)).collect::<Result<_, _>>()?;
        let mut ids = Vec::new();
        self.st.clear();
        for pi in 0..self.procs {
            let mut leader = 0;
            for t in 0..self.threads {
                let i = pi * self.threads + t;
                let cpu = if self.pin { Some(i % nr_cpus) } else { None };
                let id = if t == 0 { env.spawn_process(cpu)? } else { env.spawn_thread(leader, cpu)? };
                if t == 0 {
                    leader = id;
                }
                ids.push(id);
                let phase = if t == 0 { Phase::Setup(0) } else { Phase::WaitSetup };
                self.st.push(Thread { proc_: pi, idx: t, phase, fd: -1, token: 0, layer: 0, page: 0, chunk_pages: 0, kv_cursor: 0 });
            }
        }
        self.tasks = TaskMap::new(&ids)?;
        self.p = vec![Proc::default(); self.procs as usize];
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        let mut s = self.st[i];
        if last.is_err() {
            s.phase = Phase::Done;
        }
        let pi = s.proc_ as usize;
        let op = match s.phase {
            Phase::Setup(k) => {
                s.phase = Phase::Setup(k + 1);
                match k {
                    0 => Op::Open { file: self.model_files[pi] },
                    1 => {
                        s.fd = last.val() as Fd;
                        Op::Mmap { addr: 0, len: self.model, prot: prot::READ, flags: map::PRIVATE, fd: s.fd, off: 0 }
                    }
                    2 => {
                        self.p[pi].model = last.val() as u64;
                        Op::Open { file: self.code_file }
                    }
                    3 => Op::Mmap {
                        addr: 0,
                        len: self.code,
                        prot: prot::READ | prot::EXEC,
                        flags: map::PRIVATE,
                        fd: last.val() as Fd,
                        off: 0,
                    },
                    4 => {
                        self.p[pi].code = last.val() as u64;
                        Op::Mmap {
                            addr: 0,
                            len: self.kv,
                            prot: prot::READ | prot::WRITE,
                            flags: map::PRIVATE | map::ANONYMOUS,
                            fd: -1,
                            off: 0,
                        }
                    }
                    _ => {
                        self.p[pi].kv = last.val() as u64;
                        self.p[pi].ready = true;
                        self.run(&mut s, 0, ops)
                    }
                }
            }
            Phase::WaitSetup => {
                if self.p[pi].ready {
                    self.run(&mut s, 0, ops)
                } else {
                    Op::Compute { ns: self.barrier_poll }
                }
            }
            Phase::Run(sub) => self.run(&mut s, sub, ops),
            Phase::Barrier => {
                let lo = pi * self.threads as usize;
                let behind = self.st[lo..lo + self.threads as usize].iter().any(|o| o.token < s.token && o.phase != Phase::Done);
                if behind {
                    Op::Compute { ns: self.barrier_poll }
                } else {
                    self.run(&mut s, 0, ops)
                }
            }
            Phase::Done => Op::Exit,
        };
        self.st[i] = s;
        op
    }

    fn iterations(&self, task: TaskId) -> Option<u64> {
        self.tasks.get(task).map(|i| self.st[i].token)
    }

    fn peak_bytes(&self) -> Option<u64> {
        // The model's page cache is reclaimable (a disk file) unless on tmpfs.
        let per_proc =
            self.kv + pte_table_bytes(self.kv) + pte_table_bytes(self.model) + if self.fs == FsKind::Tmpfs { self.model } else { 0 };
        Some(self.code + self.procs as u64 * per_proc)
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(Llama::new(p)?))
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "llama",
        help: "llama.cpp-like inference: `processes` x `threads`, each process mmaps its own read-only model file and streams all of it once per token (`tokens`), with hot code fetches and a small RW KV area per chunk; op = 4 KiB weight page streamed",
        params: Llama::specs,
        build,
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::build;
    use super::super::common::testutil::*;
    use super::*;

    fn small() -> Vec<(&'static str, toml::Value)> {
        vec![
            ("processes", i(2)),
            ("threads", i(3)),
            ("model_mib", i(1)),
            ("layers", i(4)),
            ("tokens", i(2)),
            ("chunk_kib", i(16)),
            ("kv_mib", i(1)),
        ]
    }

    #[test]
    fn streams_every_model_page_once_per_token_and_exits() {
        let mut w = build("llama", &small()).unwrap();
        let mut env = FakeEnv::new(4);
        w.setup(&mut env).unwrap();
        assert_eq!(env.files, vec![(FsKind::Tmpfs, 64 * KIB, true), (FsKind::Disk, MIB, false), (FsKind::Disk, MIB, false)]);
        assert_eq!(env.tasks.len(), 6);
        let ids = env.ids();
        let mut k = FakeKernel::new(&env);
        k.run(&mut *w, &ids, 100_000);
        for &t in &ids {
            assert!(k.exited.get(&t).copied().unwrap_or(false), "task {t} did not finish");
            assert!(k.log(t).iter().all(|s| !s.ret.is_err()), "an access missed its mapping");
        }
        // Each process streams its model (256 pages) per token.
        let per_proc: u64 = ids[..3].iter().map(|t| k.ops[t]).sum();
        assert_eq!(per_proc, 2 * 256);
        // Every weight page of process 0 loaded exactly twice; code fetched, KV stored.
        let mut loads = std::collections::BTreeMap::<u64, u32>::new();
        let (mut ifetch, mut stores) = (0, 0);
        for &t in &ids[..3] {
            let mut after_ifetch = false;
            for s in k.log(t) {
                if let Op::AccessRange { addr, stride, count, kind } = s.op {
                    match kind {
                        // Weights: the load that follows the code fetch.
                        Access::Load if after_ifetch => {
                            for j in 0..count {
                                *loads.entry(addr + j * stride).or_default() += 1;
                            }
                        }
                        Access::Load => {}
                        Access::Ifetch => ifetch += count,
                        Access::Store => stores += count,
                    }
                    after_ifetch = kind == Access::Ifetch;
                }
            }
        }
        let weights: Vec<_> = loads.iter().filter(|(_, &n)| n == 2).collect();
        assert_eq!(weights.len(), 256);
        assert!(ifetch > 0 && stores > 0);
    }

    #[test]
    fn computes_per_weight_page_after_each_chunk() {
        let mut kv = small();
        kv.push(("page_compute_ns", i(1000)));
        let mut w = build("llama", &kv).unwrap();
        let mut env = FakeEnv::new(4);
        w.setup(&mut env).unwrap();
        let ids = env.ids();
        let mut k = FakeKernel::new(&env);
        k.run(&mut *w, &ids, 100_000);
        for &t in &ids {
            // Every chunk's weights are followed by their compute, and the
            // compute adds up to 1 us per page streamed.
            let (mut pending, mut ns, mut after_ifetch) = (0, 0, false);
            for st in k.log(t) {
                match st.op {
                    Op::AccessRange { kind: Access::Load, count, .. } if after_ifetch => pending = count,
                    Op::Compute { ns: c } if c != 20_000 => {
                        assert_eq!(c, pending * 1000);
                        ns += c;
                        pending = 0;
                    }
                    _ => {}
                }
                after_ifetch = matches!(st.op, Op::AccessRange { kind: Access::Ifetch, .. });
            }
            assert_eq!(ns, k.ops[&t] * 1000, "task {t}");
        }
    }

    #[test]
    fn parameters_are_validated() {
        for (kv, key) in [
            (vec![("threads", i(0))], "threads"),
            (vec![("model_mib", i(0))], "model_mib"),
            (vec![("model_mib", i(1)), ("layers", i(64))], "layers"),
            (vec![("tokens", i(0))], "tokens"),
            (vec![("chunk_kib", i(6))], "chunk_kib"),
            (vec![("loads_per_page", i(3))], "loads_per_page"),
            (vec![("kv_mib", i(0))], "kv_mib"),
            (vec![("fs", s("xfs"))], "fs"),
            (vec![("barrier_poll_us", i(0))], "barrier_poll_us"),
            (vec![("page_compute_ns", i(2_000_000_000))], "page_compute_ns"),
            (vec![("nope", i(1))], "nope"),
        ] {
            let e = build("llama", &kv).err().unwrap_or_else(|| panic!("{key} accepted"));
            assert!(e.starts_with(key), "{key}: {e}");
        }
    }
}
