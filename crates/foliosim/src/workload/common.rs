//! Helpers shared by the workload generators: task creation the way
//! will-it-scale's harness does it (processes or threads, pinned to CPU
//! `i % nr_cpus`), a task-id → slot map, and common parameters.

use super::params::Params;
use super::{FsKind, ParamSpec, SetupEnv, TaskId};
use crate::types::Error;

pub const PAGE: u64 = 4096;
pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * 1024;
/// will-it-scale's `-t` limit.
pub const MAX_TASKS: u64 = 2048;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every task is a process with its own mm.
    Processes,
    /// Task 0 is a process; the others are threads sharing its mm.
    Threads,
}

/// How a workload's tasks are created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskCfg {
    pub mode: Mode,
    pub tasks: u32,
    /// Pin task i to CPU `i % nr_cpus` (will-it-scale's default; `-n` turns it off).
    pub pin: bool,
    /// Each process starts with a dynamically linked program's mappings
    /// and resident pages (`process_image = "glibc"`), so that its own
    /// mappings land where they land on Linux.
    pub image: bool,
}

impl TaskCfg {
    /// Read `mode`, `tasks` and `pin`.
    pub fn read(p: &mut Params) -> Result<TaskCfg, String> {
        let mode = match p.choice("mode", "processes", &["processes", "threads"])?.as_str() {
            "threads" => Mode::Threads,
            _ => Mode::Processes,
        };
        let tasks = p.u64("tasks", 1)?;
        if tasks == 0 || tasks > MAX_TASKS {
            return Err(format!("tasks: must be between 1 and {MAX_TASKS}, got {tasks}"));
        }
        let pin = p.bool("pin", true)?;
        let image = p.choice("process_image", "glibc", &["glibc", "none"])? == "glibc";
        Ok(TaskCfg { mode, tasks: tasks as u32, pin, image })
    }

    pub fn specs() -> Vec<ParamSpec> {
        vec![
            ParamSpec {
                name: "mode",
                default: "processes".into(),
                help: "\"processes\": each task has its own mm; \"threads\": all tasks share one mm",
            },
            ParamSpec { name: "tasks", default: "1".into(), help: "number of tasks (1..=2048)" },
            ParamSpec {
                name: "pin",
                default: "true".into(),
                help: "pin task i to CPU i % nr_cpus (false = let the scheduler place tasks, like will-it-scale -n)",
            },
            ParamSpec {
                name: "process_image",
                default: "glibc".into(),
                help: "\"glibc\": each process starts with a will-it-scale binary's address space (binary, bss, brk heap, stack, ld.so, the vDSO, libc; x86-64, glibc 2.36, ASLR off) and its resident pages, so that its mmaps land where Linux puts them and its RSS starts where the real one does; \"none\": an empty address space",
            },
        ]
    }

    /// Create the tasks: processes, or one process and `tasks - 1` threads of
    /// it. Returns their ids in creation order (task index i = position i).
    pub fn spawn(&self, env: &mut dyn SetupEnv) -> Result<Vec<TaskId>, Error> {
        let nr_cpus = env.nr_cpus();
        if nr_cpus == 0 {
            return Err(Error::Workload("the machine has no CPUs".into()));
        }
        let mut ids = Vec::with_capacity(self.tasks as usize);
        for i in 0..self.tasks {
            let cpu = if self.pin { Some(i % nr_cpus) } else { None };
            let id = match (self.mode, i) {
                (Mode::Threads, i) if i > 0 => env.spawn_thread(ids[0], cpu)?,
                _ => {
                    let id = env.spawn_process(cpu)?;
                    if self.image {
                        env.map_process_image(id)?;
                    }
                    id
                }
            };
            ids.push(id);
        }
        Ok(ids)
    }
}

/// Read a file-system kind parameter ("tmpfs" or "disk").
pub fn read_fs(p: &mut Params, key: &str, default: &str) -> Result<FsKind, String> {
    Ok(match p.choice(key, default, &["tmpfs", "disk"])?.as_str() {
        "disk" => FsKind::Disk,
        _ => FsKind::Tmpfs,
    })
}

/// Read a size parameter that must be at least 1, returned multiplied by `unit`.
pub fn read_size(p: &mut Params, key: &str, default: u64, unit: u64, max: u64) -> Result<u64, String> {
    let v = p.u64(key, default)?;
    if v == 0 || v > max {
        return Err(format!("{key}: must be between 1 and {max}, got {v}"));
    }
    Ok(v * unit)
}

/// Maps the engine's task ids to dense slots 0..n in creation order.
/// Lookup is one bounds-checked load; no allocation after construction.
#[derive(Clone, Debug, Default)]
pub struct TaskMap {
    slot: Vec<u32>,
}

impl TaskMap {
    const NONE: u32 = u32::MAX;

    pub fn new(ids: &[TaskId]) -> Result<TaskMap, Error> {
        let max = ids.iter().copied().max().unwrap_or(0) as usize;
        if max >= (1 << 24) {
            return Err(Error::Internal(format!("task id {max} is too large for a dense task map")));
        }
        let mut slot = vec![Self::NONE; max + 1];
        for (i, &id) in ids.iter().enumerate() {
            if slot[id as usize] != Self::NONE {
                return Err(Error::Internal(format!("task id {id} handed out twice")));
            }
            slot[id as usize] = i as u32;
        }
        Ok(TaskMap { slot })
    }

    #[inline]
    pub fn get(&self, id: TaskId) -> Option<usize> {
        match self.slot.get(id as usize) {
            Some(&s) if s != Self::NONE => Some(s as usize),
            _ => None,
        }
    }
}

/// Bytes of page-table pages (PTE level) needed to map `len` bytes with 4 KiB
/// pages; upper levels are negligible.
pub fn pte_table_bytes(len: u64) -> u64 {
    len.div_ceil(512 * PAGE) * PAGE
}

#[cfg(test)]
pub mod testutil {
    //! A fake `SetupEnv` and a fake kernel to drive workloads in tests.

    use super::super::registry::find;
    use super::super::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Spawn {
        Process { cpu: Option<u32> },
        Thread { of: TaskId, cpu: Option<u32> },
    }

    pub struct FakeEnv {
        pub nr_cpus: u32,
        pub next_id: TaskId,
        pub tasks: Vec<(TaskId, Spawn)>,
        pub files: Vec<(FsKind, u64, bool)>,
        /// Which of `files` were made on disk only (create_file_on_disk).
        pub on_disk: Vec<usize>,
    }

    impl FakeEnv {
        /// Task ids start at 100 (not 0) so workloads must map them.
        pub fn new(nr_cpus: u32) -> Self {
            FakeEnv { nr_cpus, next_id: 100, tasks: Vec::new(), files: Vec::new(), on_disk: Vec::new() }
        }
        pub fn ids(&self) -> Vec<TaskId> {
            self.tasks.iter().map(|t| t.0).collect()
        }
    }

    impl SetupEnv for FakeEnv {
        fn nr_cpus(&self) -> u32 {
            self.nr_cpus
        }
        fn mem_bytes(&self) -> u64 {
            1 << 34
        }
        fn create_file(&mut self, fs: FsKind, size: u64, populate: bool) -> Result<FileId, Error> {
            self.files.push((fs, size, populate));
            // File ids start at 7 so workloads must keep them.
            Ok(7 + self.files.len() as FileId - 1)
        }
        fn create_file_on_disk(&mut self, fs: FsKind, size: u64) -> Result<FileId, Error> {
            self.on_disk.push(self.files.len());
            self.create_file(fs, size, false)
        }
        fn spawn_process(&mut self, cpu: Option<u32>) -> Result<TaskId, Error> {
            let id = self.next_id;
            self.next_id += 3; // non-contiguous ids
            self.tasks.push((id, Spawn::Process { cpu }));
            Ok(id)
        }
        fn spawn_thread(&mut self, of: TaskId, cpu: Option<u32>) -> Result<TaskId, Error> {
            let id = self.next_id;
            self.next_id += 3;
            self.tasks.push((id, Spawn::Thread { of, cpu }));
            Ok(id)
        }
        fn seed(&self) -> u64 {
            42
        }
    }

    struct OpenFile {
        file: FileId,
        off: u64,
    }

    /// One step of a task as the fake kernel saw it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Step {
        pub op: Op,
        /// What `next_op` added to `ops` when it returned this op.
        pub ops: u64,
        /// What the fake kernel returned for it.
        pub ret: Ret,
    }

    /// A fake kernel: hands out mmap addresses and fds, checks that every
    /// access, madvise and munmap hits a live mapping, tracks file offsets.
    pub struct FakeKernel {
        pub file_sizes: BTreeMap<FileId, u64>,
        next_addr: u64,
        next_fd: Fd,
        fds: BTreeMap<Fd, OpenFile>,
        /// addr → len of live mappings.
        pub maps: BTreeMap<u64, u64>,
        /// Fail every mmap after this many succeeded (None = never).
        pub fail_mmap_after: Option<u64>,
        mmaps: u64,
        pub last: BTreeMap<TaskId, Ret>,
        pub exited: BTreeMap<TaskId, bool>,
        pub log: BTreeMap<TaskId, Vec<Step>>,
        pub ops: BTreeMap<TaskId, u64>,
    }

    impl FakeKernel {
        pub fn new(env: &FakeEnv) -> Self {
            let file_sizes = env.files.iter().enumerate().map(|(i, f)| (7 + i as FileId, f.1)).collect();
            FakeKernel {
                file_sizes,
                next_addr: 0x7f00_0000_0000,
                next_fd: 3,
                fds: BTreeMap::new(),
                maps: BTreeMap::new(),
                fail_mmap_after: None,
                mmaps: 0,
                last: BTreeMap::new(),
                exited: BTreeMap::new(),
                log: BTreeMap::new(),
                ops: BTreeMap::new(),
            }
        }

        fn mapped(&self, addr: u64, len: u64) -> bool {
            match self.maps.range(..=addr).next_back() {
                Some((&a, &l)) => addr >= a && addr + len <= a + l,
                None => false,
            }
        }

        pub fn exec(&mut self, op: Op) -> Ret {
            match op {
                Op::Mmap { addr, len, prot: _, flags, fd, off: _ } => {
                    if self.fail_mmap_after.is_some_and(|n| self.mmaps >= n) {
                        return Ret::Err(errno::ENOMEM);
                    }
                    assert_eq!(addr, 0, "will-it-scale passes NULL");
                    assert!(len > 0 && len % 4096 == 0);
                    if flags & map::ANONYMOUS == 0 {
                        assert!(self.fds.contains_key(&fd), "mmap of a closed fd {fd}");
                    } else {
                        assert_eq!(fd, -1);
                    }
                    self.mmaps += 1;
                    let a = self.next_addr;
                    self.next_addr += len.next_multiple_of(1 << 21) + (1 << 21);
                    self.maps.insert(a, len);
                    Ret::Val(a as i64)
                }
                Op::Munmap { addr, len } => {
                    assert_eq!(self.maps.remove(&addr), Some(len), "munmap of a non-mapping");
                    Ret::Val(0)
                }
                Op::Madvise { addr, len, .. } => {
                    assert!(self.mapped(addr, len), "madvise outside a mapping");
                    Ret::Val(0)
                }
                Op::Access { addr, .. } => {
                    if self.mapped(addr, 1) {
                        Ret::Val(0)
                    } else {
                        Ret::Err(errno::EFAULT)
                    }
                }
                Op::AccessRange { addr, stride, count, .. } => {
                    assert!(count > 0);
                    if self.mapped(addr, stride * (count - 1) + 1) {
                        Ret::Val(0)
                    } else {
                        Ret::Err(errno::EFAULT)
                    }
                }
                // A stream reads what accesses before it mapped.
                Op::Stream { addr, stride, count, .. } => {
                    assert!(count > 0);
                    if self.mapped(addr, stride * (count - 1) + 1) {
                        Ret::Val(0)
                    } else {
                        Ret::Err(errno::EFAULT)
                    }
                }
                Op::Open { file } => {
                    assert!(self.file_sizes.contains_key(&file), "open of unknown file {file}");
                    let fd = self.next_fd;
                    self.next_fd += 1;
                    self.fds.insert(fd, OpenFile { file, off: 0 });
                    Ret::Val(fd as i64)
                }
                Op::Read { fd, len, .. } => {
                    let Some(f) = self.fds.get_mut(&fd) else { return Ret::Err(errno::EBADF) };
                    let size = self.file_sizes[&f.file];
                    let n = len.min(size.saturating_sub(f.off));
                    f.off += n;
                    Ret::Val(n as i64)
                }
                Op::Lseek { fd, off } => {
                    let Some(f) = self.fds.get_mut(&fd) else { return Ret::Err(errno::EBADF) };
                    f.off = off;
                    Ret::Val(off as i64)
                }
                Op::Close { fd } => match self.fds.remove(&fd) {
                    Some(_) => Ret::Val(0),
                    None => Ret::Err(errno::EBADF),
                },
                Op::Compute { .. } | Op::Nanosleep { .. } => Ret::Val(0),
                Op::Exit => Ret::Val(0),
                other => panic!("unexpected op {other:?}"),
            }
        }

        /// Run one step of `task`.
        pub fn step(&mut self, w: &mut dyn Workload, task: TaskId) -> Step {
            assert!(!self.exited.get(&task).copied().unwrap_or(false), "step of an exited task");
            let last = self.last.get(&task).copied().unwrap_or(Ret::Start);
            let mut ops = 0;
            let op = w.next_op(task, last, &mut ops);
            let ret = self.exec(op);
            if op == Op::Exit {
                self.exited.insert(task, true);
            }
            self.last.insert(task, ret);
            *self.ops.entry(task).or_default() += ops;
            let s = Step { op, ops, ret };
            self.log.entry(task).or_default().push(s);
            s
        }

        /// Round-robin `steps` steps over `tasks` (skipping exited ones).
        pub fn run(&mut self, w: &mut dyn Workload, tasks: &[TaskId], steps: usize) {
            for k in 0..steps {
                let t = tasks[k % tasks.len()];
                if !self.exited.get(&t).copied().unwrap_or(false) {
                    self.step(w, t);
                }
            }
        }

        pub fn log(&self, t: TaskId) -> &[Step] {
            self.log.get(&t).map(|v| v.as_slice()).unwrap_or(&[])
        }
    }

    pub fn raw(kv: &[(&str, toml::Value)]) -> RawParams {
        kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    /// Build a registered workload by name with raw params.
    pub fn build(name: &str, kv: &[(&str, toml::Value)]) -> Result<Box<dyn Workload>, String> {
        let info = find(name).unwrap_or_else(|| panic!("workload {name} not registered"));
        let mut p = params::Params::new(raw(kv));
        (info.build)(&mut p)
    }

    pub fn s(v: &str) -> toml::Value {
        toml::Value::String(v.into())
    }
    pub fn i(v: i64) -> toml::Value {
        toml::Value::Integer(v)
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn task_map_maps_sparse_ids_in_creation_order() {
        let m = TaskMap::new(&[103, 100, 250]).unwrap();
        assert_eq!(m.get(103), Some(0));
        assert_eq!(m.get(100), Some(1));
        assert_eq!(m.get(250), Some(2));
        assert_eq!(m.get(101), None);
        assert_eq!(m.get(9999), None);
        assert!(TaskMap::new(&[5, 5]).is_err());
    }

    #[test]
    fn spawn_threads_and_processes_pinned_modulo_cpus() {
        let mut env = FakeEnv::new(3);
        let cfg = TaskCfg { mode: Mode::Threads, tasks: 5, pin: true, image: true };
        let ids = cfg.spawn(&mut env).unwrap();
        assert_eq!(ids, env.ids());
        assert_eq!(env.tasks[0].1, Spawn::Process { cpu: Some(0) });
        for i in 1..5 {
            assert_eq!(env.tasks[i].1, Spawn::Thread { of: ids[0], cpu: Some(i as u32 % 3) });
        }
        let mut env = FakeEnv::new(2);
        let cfg = TaskCfg { mode: Mode::Processes, tasks: 3, pin: false, image: true };
        cfg.spawn(&mut env).unwrap();
        assert!(env.tasks.iter().all(|t| t.1 == Spawn::Process { cpu: None }));
    }

    #[test]
    fn pte_table_bytes_counts_pte_pages() {
        assert_eq!(pte_table_bytes(128 * MIB), 64 * PAGE);
        assert_eq!(pte_table_bytes(1), PAGE);
        assert_eq!(pte_table_bytes(0), 0);
    }

    /// Every registered workload builds with no params and with each of its
    /// advertised params set to its advertised default; names are unique.
    #[test]
    fn registry_param_specs_are_accepted() {
        let reg = super::super::registry::registry();
        let mut names: Vec<_> = reg.iter().map(|w| w.name).collect();
        assert_eq!(names.len(), 22);
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 22);
        for w in &reg {
            assert!(!w.help.is_empty());
            let mut kv = Vec::new();
            for spec in (w.params)() {
                let v: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {}", spec.default)) {
                    Ok(t) => t["v"].clone(),
                    Err(_) => s(&spec.default),
                };
                kv.push((spec.name, v));
            }
            if (w.params)().iter().any(|p| p.default == "(required)") {
                // e.g. trace's path: no default to build with, and its absence is the error.
                let e = build(w.name, &[]).err().unwrap();
                assert!(e.contains("required"), "{e}");
                let e = build(w.name, &[("bogus_key", i(1))]).err().unwrap();
                assert!(e.starts_with("bogus_key"), "{e}");
                continue;
            }
            let built = build(w.name, &kv).unwrap_or_else(|e| panic!("{}: {e}", w.name));
            assert_eq!(built.name(), w.name);
            assert!(build(w.name, &[]).is_ok());
            let e = build(w.name, &[("bogus_key", i(1))]).err().unwrap();
            assert!(e.starts_with("bogus_key"), "{e}");
        }
    }
}
