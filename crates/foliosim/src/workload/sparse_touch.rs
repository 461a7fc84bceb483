//! "sparse_touch": the sparse-access pathology of large anonymous folios
//! (P-1 in docs/mechanisms/large-anon-folios.md#published-figures): each task maps `size_mib` of anonymous memory and writes
//! one byte every `stride_kib` (default 64 KiB, one touch per order-4
//! block), then holds the memory for `hold_ms`, unmaps it, and repeats
//! `cycles` times (0 = forever). With 4 KiB folios each touch costs one
//! page; with 64 KiB folios it costs sixteen. ops = touches.
//!
//! Errors: any `Ret::Err` makes the task `Exit`. `hold_ms` is a sleep
//! (`Op::Nanosleep`): the memory is held by an idle process.

use super::common::{pte_table_bytes, read_size, TaskCfg, TaskMap, KIB, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Access, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::sim::{Ns, NSEC_PER_MSEC};
use crate::types::Error;

/// Touches per `AccessRange`.
const CHUNK: u64 = 512;
const MAX_SIZE_MIB: u64 = 1 << 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Start,
    Mapping,
    Touching,
    Holding,
    Unmapping,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct TaskState {
    phase: Phase,
    base: u64,
    next: u64,
    inflight: u64,
    cycle: u64,
    /// Iterations: times the whole region was touched.
    iters: u64,
}

pub struct SparseTouch {
    cfg: TaskCfg,
    size: u64,
    stride: u64,
    hold: Ns,
    cycles: u64,
    tasks: TaskMap,
    st: Vec<TaskState>,
}

impl SparseTouch {
    pub fn new(p: &mut Params) -> Result<SparseTouch, String> {
        let cfg = TaskCfg::read(p)?;
        let size = read_size(p, "size_mib", 64, MIB, MAX_SIZE_MIB)?;
        let stride = read_size(p, "stride_kib", 64, KIB, 1 << 30)?;
        if stride % PAGE != 0 {
            return Err(format!("stride_kib: must be a multiple of 4, got {}", stride / KIB));
        }
        let hold_ms = p.u64("hold_ms", 1000)?;
        let hold = hold_ms.checked_mul(NSEC_PER_MSEC).ok_or_else(|| format!("hold_ms: too large: {hold_ms}"))?;
        let cycles = p.u64("cycles", 1)?;
        p.finish()?;
        Ok(SparseTouch { cfg, size, stride, hold, cycles, tasks: TaskMap::default(), st: Vec::new() })
    }

    fn specs() -> Vec<ParamSpec> {
        let mut v = TaskCfg::specs();
        v.extend([
            ParamSpec { name: "size_mib", default: "64".into(), help: "anonymous memory each task maps, MiB" },
            ParamSpec {
                name: "stride_kib",
                default: "64".into(),
                help: "distance between touches, KiB (multiple of 4); one byte is written per stride",
            },
            ParamSpec {
                name: "hold_ms",
                default: "1000".into(),
                help: "time the touched memory is held before munmap, ms (modelled as user computation)",
            },
            ParamSpec {
                name: "cycles",
                default: "1".into(),
                help: "map/touch/hold/unmap cycles per task (0 = forever); after the last the task exits",
            },
        ]);
        v
    }

    fn touches(&self) -> u64 {
        self.size / self.stride
    }

    fn touch(&self, st: &mut TaskState) -> Op {
        st.phase = Phase::Touching;
        let count = CHUNK.min(self.touches() - st.next);
        st.inflight = count;
        Op::AccessRange { addr: st.base + st.next * self.stride, stride: self.stride, count, kind: Access::Store }
    }

    fn mmap(st: &mut TaskState, len: u64) -> Op {
        st.phase = Phase::Mapping;
        Op::Mmap { addr: 0, len, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 }
    }
}

impl Workload for SparseTouch {
    fn name(&self) -> &str {
        "sparse_touch"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let ids = self.cfg.spawn(env)?;
        self.tasks = TaskMap::new(&ids)?;
        self.st = vec![TaskState { phase: Phase::Start, base: 0, next: 0, inflight: 0, cycle: 0, iters: 0 }; ids.len()];
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        let mut st = self.st[i];
        if last.is_err() {
            st.phase = Phase::Done;
        }
        let op = match st.phase {
            Phase::Start => Self::mmap(&mut st, self.size),
            Phase::Mapping => {
                st.base = last.val() as u64;
                st.next = 0;
                if self.touches() == 0 {
                    st.phase = Phase::Holding;
                    Op::Nanosleep { ns: self.hold.max(1) }
                } else {
                    self.touch(&mut st)
                }
            }
            Phase::Touching => {
                *ops += st.inflight;
                st.next += st.inflight;
                if st.next < self.touches() {
                    self.touch(&mut st)
                } else {
                    st.iters += 1;
                    st.phase = Phase::Holding;
                    Op::Nanosleep { ns: self.hold.max(1) }
                }
            }
            Phase::Holding => {
                st.phase = Phase::Unmapping;
                Op::Munmap { addr: st.base, len: self.size }
            }
            Phase::Unmapping => {
                st.cycle += 1;
                if self.cycles != 0 && st.cycle >= self.cycles {
                    st.phase = Phase::Done;
                    Op::Exit
                } else {
                    Self::mmap(&mut st, self.size)
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
    Ok(Box::new(SparseTouch::new(p)?))
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "sparse_touch",
        help: "each task mmaps size_mib of anonymous memory, writes one byte every stride_kib (the large-folio sparse pathology), holds it hold_ms, munmaps; op = touch",
        params: SparseTouch::specs,
        build,
    }
}
