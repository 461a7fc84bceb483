//! "ebizzy" in `-mTt N` mode (ebizzy 0.3, Valerie Henson): N threads of one
//! process each loop { mmap a chunk (512 KiB) of anonymous memory; write one
//! byte per page (-T: touch instead of copy); munmap }. A record is one
//! iteration; ops = records.
//!
//! "spf_mixed": threads of one process, `faulters` of them faulting and the
//! rest mapping. A faulter owns a region (its own VMA, fenced by PROT_NONE
//! guard pages so it merges with nothing) and loops { write every page;
//! MADV_DONTNEED it } (ops = pages written). A mapper loops { mmap
//! `map_kib`; write its pages; munmap } in ranges disjoint from the faulters'.

use super::common::{pte_table_bytes, Mode, TaskCfg, TaskMap, PAGE};
use super::params::Params;
use super::{map, prot, Access, Advice, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::types::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Start,
    Guard1,
    Guard2,
    Mapped,
    Touched,
    Unmapped,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct St {
    phase: Phase,
    base: u64,
    /// Iterations: records (ebizzy) or regions written (spf_mixed).
    iters: u64,
}

pub struct Ebizzy {
    tasks_n: u32,
    chunk: u64,
    tasks: TaskMap,
    st: Vec<St>,
}

fn anon(len: u64) -> Op {
    Op::Mmap { addr: 0, len, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 }
}

impl Ebizzy {
    fn new(p: &mut Params) -> Result<Ebizzy, String> {
        let tasks = p.u64("threads", 1)?;
        if tasks == 0 || tasks > 2048 {
            return Err(format!("threads: must be between 1 and 2048, got {tasks}"));
        }
        let kib = p.u64("chunk_kib", 512)?;
        if kib == 0 || kib % 4 != 0 || kib > 1 << 20 {
            return Err(format!("chunk_kib: must be a positive multiple of 4 up to 1 GiB, got {kib}"));
        }
        p.finish()?;
        Ok(Ebizzy { tasks_n: tasks as u32, chunk: kib << 10, tasks: TaskMap::default(), st: Vec::new() })
    }
}

impl Workload for Ebizzy {
    fn name(&self) -> &str {
        "ebizzy"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let cfg = TaskCfg { mode: Mode::Threads, tasks: self.tasks_n, pin: true, image: false };
        let ids = cfg.spawn(env)?;
        self.tasks = TaskMap::new(&ids)?;
        self.st = vec![St { phase: Phase::Start, base: 0, iters: 0 }; ids.len()];
        Ok(())
    }
    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        let mut st = self.st[i];
        if last.is_err() {
            st.phase = Phase::Done;
        }
        let op = match st.phase {
            Phase::Start | Phase::Unmapped | Phase::Guard1 | Phase::Guard2 => {
                if st.phase == Phase::Unmapped {
                    *ops += 1;
                    st.iters += 1;
                }
                st.phase = Phase::Mapped;
                anon(self.chunk)
            }
            Phase::Mapped => {
                st.base = last.val() as u64;
                st.phase = Phase::Touched;
                Op::AccessRange { addr: st.base, stride: PAGE, count: self.chunk / PAGE, kind: Access::Store }
            }
            Phase::Touched => {
                st.phase = Phase::Unmapped;
                Op::Munmap { addr: st.base, len: self.chunk }
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
        Some(self.tasks_n as u64 * (self.chunk + pte_table_bytes(self.chunk)))
    }
}

pub struct SpfMixed {
    faulters: u32,
    mappers: u32,
    region: u64,
    map_len: u64,
    tasks: TaskMap,
    st: Vec<St>,
}

impl SpfMixed {
    fn new(p: &mut Params) -> Result<SpfMixed, String> {
        let faulters = p.u64("faulters", 2)?;
        let mappers = p.u64("mappers", 2)?;
        if faulters + mappers == 0 || faulters + mappers > 2048 {
            return Err(format!("faulters + mappers: must be between 1 and 2048, got {}", faulters + mappers));
        }
        let region_kib = p.u64("region_kib", 1024)?;
        let map_kib = p.u64("map_kib", 128)?;
        for (k, v) in [("region_kib", region_kib), ("map_kib", map_kib)] {
            if v == 0 || v % 4 != 0 || v > 1 << 20 {
                return Err(format!("{k}: must be a positive multiple of 4 up to 1 GiB, got {v}"));
            }
        }
        p.finish()?;
        Ok(SpfMixed {
            faulters: faulters as u32,
            mappers: mappers as u32,
            region: region_kib << 10,
            map_len: map_kib << 10,
            tasks: TaskMap::default(),
            st: Vec::new(),
        })
    }
}

impl Workload for SpfMixed {
    fn name(&self) -> &str {
        "spf_mixed"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let cfg = TaskCfg { mode: Mode::Threads, tasks: self.faulters + self.mappers, pin: true, image: false };
        let ids = cfg.spawn(env)?;
        self.tasks = TaskMap::new(&ids)?;
        self.st = vec![St { phase: Phase::Start, base: 0, iters: 0 }; ids.len()];
        Ok(())
    }
    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        let mut st = self.st[i];
        if last.is_err() {
            st.phase = Phase::Done;
        }
        let faulter = (i as u32) < self.faulters;
        let pages = if faulter { self.region / PAGE } else { self.map_len / PAGE };
        let op = if faulter {
            match st.phase {
                // mmap region + 2 guard pages, PROT_NONE both guards.
                Phase::Start => {
                    st.phase = Phase::Guard1;
                    anon(self.region + 2 * PAGE)
                }
                Phase::Guard1 => {
                    st.base = last.val() as u64 + PAGE;
                    st.phase = Phase::Guard2;
                    Op::Mprotect { addr: st.base - PAGE, len: PAGE, prot: prot::NONE }
                }
                Phase::Guard2 => {
                    st.phase = Phase::Mapped;
                    Op::Mprotect { addr: st.base + self.region, len: PAGE, prot: prot::NONE }
                }
                Phase::Mapped | Phase::Unmapped => {
                    st.phase = Phase::Touched;
                    Op::AccessRange { addr: st.base, stride: PAGE, count: pages, kind: Access::Store }
                }
                Phase::Touched => {
                    *ops += pages;
                    st.iters += 1;
                    st.phase = Phase::Unmapped;
                    Op::Madvise { addr: st.base, len: self.region, advice: Advice::DontNeed }
                }
                Phase::Done => Op::Exit,
            }
        } else {
            match st.phase {
                Phase::Start | Phase::Unmapped | Phase::Guard1 | Phase::Guard2 => {
                    st.phase = Phase::Mapped;
                    anon(self.map_len)
                }
                Phase::Mapped => {
                    st.base = last.val() as u64;
                    st.phase = Phase::Touched;
                    Op::AccessRange { addr: st.base, stride: PAGE, count: pages, kind: Access::Store }
                }
                Phase::Touched => {
                    *ops += pages;
                    st.iters += 1;
                    st.phase = Phase::Unmapped;
                    Op::Munmap { addr: st.base, len: self.map_len }
                }
                Phase::Done => Op::Exit,
            }
        };
        self.st[i] = st;
        op
    }
    fn iterations(&self, task: TaskId) -> Option<u64> {
        self.tasks.get(task).map(|i| self.st[i].iters)
    }
    fn peak_bytes(&self) -> Option<u64> {
        let f = self.faulters as u64 * (self.region + pte_table_bytes(self.region));
        Some(f + self.mappers as u64 * (self.map_len + pte_table_bytes(self.map_len)))
    }
}

pub fn infos() -> Vec<WorkloadInfo> {
    vec![
        WorkloadInfo {
            name: "ebizzy",
            help: "ebizzy -mTt N: threads loop mmap chunk_kib anonymous, write one byte per page, munmap; op = record (iteration)",
            params: || {
                vec![
                    ParamSpec { name: "threads", default: "1".into(), help: "threads of the one process (-t)" },
                    ParamSpec { name: "chunk_kib", default: "512".into(), help: "chunk size, KiB (ebizzy -s, default 512 KiB)" },
                ]
            },
            build: |p| Ok(Box::new(Ebizzy::new(p)?)),
        },
        WorkloadInfo {
            name: "spf_mixed",
            help: "threads of one process: `faulters` write their own fenced region then MADV_DONTNEED it (op = page), `mappers` mmap/write/munmap map_kib in disjoint ranges (op = page)",
            params: || {
                vec![
                    ParamSpec { name: "faulters", default: "2".into(), help: "threads that fault on their own region" },
                    ParamSpec { name: "mappers", default: "2".into(), help: "threads that mmap, write and munmap" },
                    ParamSpec { name: "region_kib", default: "1024".into(), help: "each faulter's region, KiB" },
                    ParamSpec { name: "map_kib", default: "128".into(), help: "each mapper's mapping, KiB" },
                ]
            },
            build: |p| Ok(Box::new(SpfMixed::new(p)?)),
        },
    ]
}
