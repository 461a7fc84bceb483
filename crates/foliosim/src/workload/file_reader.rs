//! "file_reader": a linear reader. One file of `file_mib` on `fs` (its page
//! cache populated or not); every task opens it (own file offset) and reads
//! it sequentially with `read(fd, chunk_kib)` from offset 0 to EOF (a read
//! returning 0), then `lseek(fd, 0)`, for `cycles` passes (0 = forever), then
//! exits. ops = bytes read / 4096, i.e. pages read (exact across partial
//! reads: a task's running byte count is converted to pages).
//!
//! With `buffer`, each task first maps and populates an anonymous buffer of
//! `chunk_kib` (the memory read() copies into). It matters to NUMA
//! balancing, whose scanner walks the buffer's PTEs; read()'s copy cost is
//! the file side's and does not depend on it.
//!
//! Errors: any `Ret::Err` makes the task `Exit`.

use super::common::{read_fs, read_size, TaskCfg, TaskMap, KIB, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Fd, FileId, FsKind, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::types::Error;

const MAX_FILE_MIB: u64 = 1 << 24;
const MAX_CHUNK_KIB: u64 = 1 << 22;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Start,
    MappingBuffer,
    Opening,
    Reading,
    Rewinding,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct TaskState {
    phase: Phase,
    fd: Fd,
    /// Bytes read so far (ops = bytes / 4096).
    bytes: u64,
    /// Completed passes.
    pass: u64,
}

pub struct FileReader {
    cfg: TaskCfg,
    fs: FsKind,
    size: u64,
    populate: bool,
    /// Node the populated cache is placed on first (None: the local node).
    populate_node: Option<u32>,
    /// The populated folios start referenced + active.
    populate_hot: bool,
    chunk: u64,
    /// Map and populate a read buffer of `chunk` bytes first.
    buffer: bool,
    /// 0 = forever.
    cycles: u64,
    file: FileId,
    tasks: TaskMap,
    st: Vec<TaskState>,
}

impl FileReader {
    pub fn new(p: &mut Params) -> Result<FileReader, String> {
        let cfg = TaskCfg::read(p)?;
        let fs = read_fs(p, "fs", "disk")?;
        let size = read_size(p, "file_mib", 256, MIB, MAX_FILE_MIB)?;
        let populate = p.bool("populate", false)?;
        let pn = p.f64("populate_node", -1.0)? as i64;
        if !(-1..=63).contains(&pn) {
            return Err("populate_node: must be -1 (local) or a node id".into());
        }
        let populate_node = (pn >= 0).then_some(pn as u32);
        let populate_hot = p.bool("populate_hot", false)?;
        let chunk = read_size(p, "chunk_kib", 128, KIB, MAX_CHUNK_KIB)?;
        let cycles = p.u64("cycles", 1)?;
        let buffer = p.bool("buffer", false)?;
        p.finish()?;
        Ok(FileReader {
            cfg,
            fs,
            size,
            populate,
            populate_node,
            populate_hot,
            chunk,
            buffer,
            cycles,
            file: 0,
            tasks: TaskMap::default(),
            st: Vec::new(),
        })
    }

    fn specs() -> Vec<ParamSpec> {
        let mut v = TaskCfg::specs();
        v.extend([
            ParamSpec { name: "fs", default: "disk".into(), help: "file system of the file: \"disk\" (ext4-like) or \"tmpfs\"" },
            ParamSpec { name: "file_mib", default: "256".into(), help: "size of the file, MiB" },
            ParamSpec { name: "populate", default: "false".into(), help: "start with the file's page cache filled (warm cache)" },
            ParamSpec {
                name: "populate_node",
                default: "-1".into(),
                help: "node the populated cache is placed on first, as after mbind (-1: the reader's local node)",
            },
            ParamSpec {
                name: "populate_hot",
                default: "false".into(),
                help: "populated folios start referenced and active, as after several earlier passes (classic LRU state)",
            },
            ParamSpec { name: "chunk_kib", default: "128".into(), help: "bytes per read() call, KiB" },
            ParamSpec {
                name: "buffer",
                default: "false".into(),
                help: "map and populate an anonymous read buffer of chunk_kib first (what NUMA balancing's scanner walks)",
            },
            ParamSpec { name: "cycles", default: "1".into(), help: "sequential passes over the file per task (0 = forever)" },
        ]);
        v
    }

    #[inline]
    fn read(&self, st: &mut TaskState) -> Op {
        st.phase = Phase::Reading;
        Op::Read { fd: st.fd, len: self.chunk, buf: 0 }
    }
}

impl Workload for FileReader {
    fn name(&self) -> &str {
        "file_reader"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        self.file = env.create_file_on(self.fs, self.size, self.populate, self.populate_node, self.populate_hot)?;
        let ids = self.cfg.spawn(env)?;
        self.tasks = TaskMap::new(&ids)?;
        self.st = vec![TaskState { phase: Phase::Start, fd: -1, bytes: 0, pass: 0 }; ids.len()];
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        let mut st = self.st[i];
        if last.is_err() {
            st.phase = Phase::Done;
        }
        let op = match st.phase {
            Phase::Start if self.buffer => {
                st.phase = Phase::MappingBuffer;
                Op::Mmap {
                    addr: 0,
                    len: self.chunk.next_multiple_of(PAGE),
                    prot: prot::READ | prot::WRITE,
                    flags: map::PRIVATE | map::ANONYMOUS | map::POPULATE,
                    fd: -1,
                    off: 0,
                }
            }
            Phase::Start | Phase::MappingBuffer => {
                st.phase = Phase::Opening;
                Op::Open { file: self.file }
            }
            Phase::Opening => {
                st.fd = last.val() as Fd;
                self.read(&mut st)
            }
            Phase::Reading => {
                let n = last.val().max(0) as u64;
                if n > 0 {
                    let before = st.bytes / PAGE;
                    st.bytes += n;
                    *ops += st.bytes / PAGE - before;
                    self.read(&mut st)
                } else {
                    st.pass += 1;
                    if self.cycles != 0 && st.pass >= self.cycles {
                        st.phase = Phase::Done;
                        Op::Exit
                    } else {
                        st.phase = Phase::Rewinding;
                        Op::Lseek { fd: st.fd, off: 0 }
                    }
                }
            }
            Phase::Rewinding => self.read(&mut st),
            Phase::Done => Op::Exit,
        };
        self.st[i] = st;
        op
    }

    fn iterations(&self, task: TaskId) -> Option<u64> {
        self.tasks.get(task).map(|i| self.st[i].pass)
    }

    fn peak_bytes(&self) -> Option<u64> {
        // tmpfs pages cannot be reclaimed (no swap); a populated disk file
        // must fit when it is populated. A cold disk file's cache is
        // reclaimable.
        let file = if self.fs == FsKind::Tmpfs || self.populate { self.size } else { 0 };
        let buffers = if self.buffer { self.chunk.next_multiple_of(PAGE) * self.cfg.tasks as u64 } else { 0 };
        Some(file + buffers)
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(FileReader::new(p)?))
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "file_reader",
        help: "every task reads one shared file sequentially with read(fd, chunk_kib) from 0 to EOF, then lseek 0, for `cycles` passes; op = 4 KiB page read",
        params: FileReader::specs,
        build,
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::build;
    use super::super::common::testutil::*;
    use super::*;

    fn setup(kv: &[(&str, toml::Value)]) -> (Box<dyn Workload>, FakeEnv, FakeKernel) {
        let mut w = build("file_reader", kv).unwrap();
        let mut env = FakeEnv::new(2);
        w.setup(&mut env).unwrap();
        let k = FakeKernel::new(&env);
        (w, env, k)
    }

    #[test]
    fn reads_sequentially_to_eof_for_each_cycle() {
        let (mut w, env, mut k) = setup(&[("file_mib", i(1)), ("chunk_kib", i(64)), ("cycles", i(2)), ("tasks", i(2))]);
        assert_eq!(env.files, vec![(FsKind::Disk, MIB, false)]);
        let ids = env.ids();
        k.run(&mut *w, &ids, 2 * 1000);
        for &t in &ids {
            let log = k.log(t);
            let ops: Vec<_> = log.iter().map(|s| s.op).collect();
            assert_eq!(ops[0], Op::Open { file: 7 });
            let fd = log[0].ret.val() as Fd;
            // Pass: 16 reads of 64 KiB + the EOF read; lseek; pass; exit.
            let mut want = vec![Op::Open { file: 7 }];
            want.extend(vec![Op::Read { fd, len: 64 * KIB, buf: 0 }; 17]);
            want.push(Op::Lseek { fd, off: 0 });
            want.extend(vec![Op::Read { fd, len: 64 * KIB, buf: 0 }; 17]);
            want.push(Op::Exit);
            assert_eq!(ops, want);
            assert_eq!(log[17].ret, Ret::Val(0));
            assert_eq!(k.ops[&t], 2 * 256);
        }
        assert_ne!(k.log(ids[0])[0].ret, k.log(ids[1])[0].ret, "each task has its own fd");
    }

    #[test]
    fn partial_reads_count_whole_pages_exactly() {
        // 1 MiB file in 12 KiB chunks: 85 full reads + one of 4 KiB.
        let (mut w, env, mut k) =
            setup(&[("file_mib", i(1)), ("chunk_kib", i(12)), ("fs", s("tmpfs")), ("populate", toml::Value::Boolean(true))]);
        assert_eq!(env.files, vec![(FsKind::Tmpfs, MIB, true)]);
        let t = env.ids()[0];
        k.run(&mut *w, &[t], 1000);
        assert_eq!(k.ops[&t], 256);
        assert_eq!(k.log(t).iter().filter(|s| matches!(s.op, Op::Read { .. })).count(), 86 + 1);
        assert_eq!(w.peak_bytes(), Some(MIB));
    }

    #[test]
    fn forever_and_errors() {
        let (mut w, env, mut k) = setup(&[("file_mib", i(1)), ("chunk_kib", i(1024)), ("cycles", i(0))]);
        let t = env.ids()[0];
        k.run(&mut *w, &[t], 301);
        // open, then (read, read-EOF, lseek) forever.
        assert_eq!(k.ops[&t], 100 * 256);
        assert!(!k.exited.get(&t).copied().unwrap_or(false));
        assert_eq!(w.next_op(t, Ret::Err(super::super::errno::EBADF), &mut 0), Op::Exit);
        let e = build("file_reader", &[("chunk", i(4))]).err().unwrap();
        assert!(e.starts_with("chunk"), "{e}");
        let e = build("file_reader", &[("fs", s("xfs"))]).err().unwrap();
        assert!(e.starts_with("fs"), "{e}");
    }
}
