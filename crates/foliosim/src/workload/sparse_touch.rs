//! "sparse_touch": each task maps `size_mib` of anonymous memory, stores one
//! byte every `stride_kib`, unmaps it, and repeats; op = one touch. The
//! counterpart of validation/sparse_touch.c: with 4 KiB pages the touched
//! RSS is size/stride pages, with large anonymous folios it grows to the
//! folio size per touch.

use super::common::{read_size, TaskCfg, TaskMap, KIB, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Access, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Start,
    Mapping,
    Touching,
    Unmapping,
    Done,
}

pub struct SparseTouch {
    cfg: TaskCfg,
    size: u64,
    stride: u64,
    tasks: TaskMap,
    st: Vec<(Phase, u64, u64)>,
}

impl SparseTouch {
    pub fn new(p: &mut Params) -> Result<Self, String> {
        let cfg = TaskCfg::read(p)?;
        let size = read_size(p, "size_mib", 128, MIB, 1 << 20)?;
        let stride = read_size(p, "stride_kib", 64, KIB, 1 << 20)?;
        p.finish()?;
        if stride % PAGE != 0 {
            return Err(format!("stride_kib: must be a multiple of 4, got {}", stride / KIB));
        }
        Ok(SparseTouch { cfg, size, stride, tasks: TaskMap::default(), st: Vec::new() })
    }
}

impl Workload for SparseTouch {
    fn name(&self) -> &str {
        "sparse_touch"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), String> {
        let ids = self.cfg.spawn(env)?;
        self.tasks = TaskMap::new(&ids)?;
        self.st = vec![(Phase::Start, 0, 0); ids.len()];
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        let (mut ph, mut base, mut off) = self.st[i];
        if last.is_err() || ph == Phase::Done {
            self.st[i].0 = Phase::Done;
            return Op::Exit;
        }
        let mmap = Op::Mmap { addr: 0, len: self.size, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 };
        let op = match ph {
            Phase::Start | Phase::Unmapping => {
                ph = Phase::Mapping;
                mmap
            }
            Phase::Mapping => {
                base = last.val() as u64;
                off = 0;
                ph = Phase::Touching;
                Op::Access { addr: base, kind: Access::Store }
            }
            Phase::Touching => {
                *ops += 1;
                off += self.stride;
                if off < self.size {
                    Op::Access { addr: base + off, kind: Access::Store }
                } else {
                    ph = Phase::Unmapping;
                    Op::Munmap { addr: base, len: self.size }
                }
            }
            Phase::Done => Op::Exit,
        };
        self.st[i] = (ph, base, off);
        op
    }

    fn peak_bytes(&self) -> Option<u64> {
        Some(self.cfg.tasks as u64 * (self.size / self.stride * PAGE + super::common::pte_table_bytes(self.size)))
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(SparseTouch::new(p)?))
}

fn params() -> Vec<ParamSpec> {
    let mut v = TaskCfg::specs();
    v.push(ParamSpec { name: "size_mib", default: "128".into(), help: "size of the anonymous region, MiB" });
    v.push(ParamSpec { name: "stride_kib", default: "64".into(), help: "distance between touches, KiB (multiple of 4)" });
    v
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "sparse_touch",
        help: "mmap size_mib anonymous, store one byte every stride_kib (default 64 KiB), munmap; op = touch (validation/sparse_touch.c)",
        params,
        build,
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::*;

    #[test]
    fn one_store_per_stride() {
        let mut raw = super::super::RawParams::new();
        raw.insert("size_mib".into(), toml::Value::Integer(1));
        let mut w = super::build(&mut Params::new(raw)).unwrap();
        let mut env = FakeEnv::new(1);
        w.setup(&mut env).unwrap();
        let mut k = FakeKernel::new(&env);
        let t = env.ids()[0];
        k.run(&mut *w, &[t], 1 + 16 + 1);
        let log = k.log(t);
        let base = log[0].ret.val() as u64;
        let stores: Vec<u64> = log.iter().filter_map(|s| match s.op { Op::Access { addr, kind: Access::Store } => Some(addr - base), _ => None }).collect();
        assert_eq!(stores, (0..16).map(|i| i * 64 * KIB).collect::<Vec<_>>());
        assert_eq!(log.last().unwrap().op, Op::Munmap { addr: base, len: MIB });
        assert_eq!(k.ops[&t], 16);
    }
}
