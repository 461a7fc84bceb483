//! Workloads: generators of user-level operations, all behind one trait.
//!
//! A workload never touches kernel state. It creates tasks and files in
//! `setup`, then answers `next_op` for a task with the next system call or
//! memory access that task makes, given the result of its previous one.
//! Trace replay is one more implementation of the same trait.

use crate::sim::Ns;
use crate::types::Error;
pub use params::RawParams;

pub mod common;
pub mod ebizzy;
pub mod file_reader;
pub mod kbuild;
pub mod llama;
pub mod memhog;
pub mod memhog_then;
pub mod params;
pub mod registry;
pub mod sparse_touch;
pub mod syscost;
pub mod trace;
pub mod trace_format;
pub mod trace_perf;
pub mod trace_procs;
mod trace_ranges;
pub mod trace_record;
pub mod will_it_scale;
pub mod xsbench;

pub type TaskId = u32;
pub type Fd = i32;
pub type FileId = u32;

pub use crate::types::Access;

pub mod prot {
    pub const NONE: u32 = 0;
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const EXEC: u32 = 4;
}

pub mod map {
    pub const SHARED: u32 = 0x01;
    pub const PRIVATE: u32 = 0x02;
    pub const FIXED: u32 = 0x10;
    pub const ANONYMOUS: u32 = 0x20;
    pub const POPULATE: u32 = 0x8000;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    DontNeed,
    Free,
    HugePage,
    NoHugePage,
    WillNeed,
    Cold,
    PageOut,
}

/// Linux errno values returned to workloads.
pub mod errno {
    pub const ENOENT: i64 = 2;
    pub const EBADF: i64 = 9;
    pub const ENOMEM: i64 = 12;
    pub const EACCES: i64 = 13;
    pub const EFAULT: i64 = 14;
    pub const EINVAL: i64 = 22;
    pub const ECHILD: i64 = 10;
}

/// Type of file system a file lives on (will-it-scale's /tmp may be either).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsKind {
    /// shmem: page cache only, swap-backed, no page_mkwrite.
    Tmpfs,
    /// A disk file system (ext4-like): reads of uncached blocks cost I/O,
    /// shared write faults call page_mkwrite, holes read as zeroes.
    Disk,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Mmap {
        addr: u64,
        len: u64,
        prot: u32,
        flags: u32,
        fd: Fd,
        off: u64,
    },
    Munmap {
        addr: u64,
        len: u64,
    },
    Mprotect {
        addr: u64,
        len: u64,
        prot: u32,
    },
    Mremap {
        addr: u64,
        old_len: u64,
        new_len: u64,
        may_move: bool,
    },
    Madvise {
        addr: u64,
        len: u64,
        advice: Advice,
    },
    /// Set the program break; `addr` 0 queries it.
    Brk {
        addr: u64,
    },
    /// One user memory access (faults are taken as needed).
    Access {
        addr: u64,
        kind: Access,
    },
    /// A user loop: `count` accesses starting at `addr`, `stride` bytes apart.
    AccessRange {
        addr: u64,
        stride: u64,
        count: u64,
        kind: Access,
    },
    Open {
        file: FileId,
    },
    /// read(fd, buf, len). `buf`: the user buffer the data is copied to
    /// (its pages not yet mapped writable fault in during the copy, as
    /// copy_to_user takes them); 0 when the workload models none.
    Read {
        fd: Fd,
        len: u64,
        buf: u64,
    },
    /// write(fd, buf, len): `buf` as for Read (copy_from_user reads it).
    Write {
        fd: Fd,
        len: u64,
        buf: u64,
    },
    Lseek {
        fd: Fd,
        off: u64,
    },
    Ftruncate {
        fd: Fd,
        len: u64,
    },
    Close {
        fd: Fd,
    },
    /// fork(): the parent gets the child's task id, the child starts with Ret::Val(0).
    Fork,
    Exit,
    /// Pure user-mode computation.
    Compute {
        ns: Ns,
    },
    /// A user loop whose speed is its memory's: `count` reads of `bytes`
    /// bytes each, at `addr`, `addr + stride`, ... (mapped by accesses
    /// before it). Each moves its bytes from the node holding its page at
    /// one CPU's read bandwidth, through that node's bandwidth, which every
    /// CPU streaming from it shares (docs/machine-model.md).
    Stream {
        addr: u64,
        stride: u64,
        count: u64,
        bytes: u64,
    },
    /// execve() of an ELF binary in file `file`: the task's mm is replaced
    /// by a fresh one holding the binary's PT_LOAD segments as its program
    /// headers would give them (text r-x at `vaddr` from offset 0, data rw
    /// private from offset `text`, then `bss` anonymous), a stack, and the
    /// heap starting after bss. Returns the initial stack pointer.
    /// `mmap_base` is the top of the new mm's mmap area where the caller
    /// knows it (a replay: the recorded process's ASLR draw); 0: the
    /// kernel draws it (arch_pick_mmap_layout).
    Exec {
        file: FileId,
        vaddr: u64,
        text: u64,
        data: u64,
        bss: u64,
        mmap_base: u64,
    },
    /// wait4(-1): reap an exited child (its task id), sleeping until one
    /// exits; ECHILD when the task has no children left.
    Wait,
    /// vfork() (clone with CLONE_VM | CLONE_VFORK): the child runs in the
    /// parent's mm, the parent sleeps until the child execs or exits. The
    /// parent gets the child's task id, the child starts with Ret::Val(0).
    Vfork,
    /// clone() of a thread (CLONE_VM | CLONE_THREAD): a new task in the
    /// caller's mm; the caller gets its task id, the thread starts with
    /// Ret::Val(0).
    Clone,
    /// nanosleep(): the task leaves its CPU and is runnable again `ns`
    /// after the call (a timer), as a harness waiting between phases does.
    Nanosleep {
        ns: Ns,
    },
    /// `ns` of system time in calls the model does not run (a replayed
    /// trace's recorded time), charged to the `other` entry.
    SysTime {
        ns: Ns,
    },
}

/// What `Workload::access_run` announces: `count` accesses of `kind`
/// from `addr`, `stride` bytes apart, one op each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessRun {
    pub addr: u64,
    pub stride: u64,
    pub count: u64,
    pub kind: Access,
}

/// Result of the previous operation, as the syscall would return it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ret {
    /// The task's first operation.
    Start,
    Val(i64),
    Err(i64),
}

impl Ret {
    pub fn val(self) -> i64 {
        match self {
            Ret::Val(v) => v,
            _ => 0,
        }
    }
    pub fn is_err(self) -> bool {
        matches!(self, Ret::Err(_))
    }
}

/// What a workload may do while setting up.
pub trait SetupEnv {
    fn nr_cpus(&self) -> u32;
    /// Total memory of the machine, bytes.
    fn mem_bytes(&self) -> u64;
    /// Create a file; if `populate`, its page cache is filled as if written
    /// with zeroes (no simulated time). Returns its id for `Op::Open`.
    fn create_file(&mut self, fs: FsKind, size: u64, populate: bool) -> Result<FileId, Error>;
    /// Create a file whose `size` bytes are on its disk and none of them
    /// in the page cache: its first reads read them in (major faults).
    fn create_file_on_disk(&mut self, fs: FsKind, size: u64) -> Result<FileId, Error> {
        let _ = (fs, size);
        Err(Error::Workload("this environment cannot make a file that is only on disk".into()))
    }
    /// create_file with the populated cache placed on node `node` first
    /// (as a reader bound there with mbind would leave it); `hot`: the
    /// folios start referenced and active, as after several earlier reads.
    fn create_file_on(&mut self, fs: FsKind, size: u64, populate: bool, node: Option<u32>, hot: bool) -> Result<FileId, Error> {
        match node {
            None if !hot => self.create_file(fs, size, populate),
            _ => Err(Error::Workload("this environment cannot place a file on a node".into())),
        }
    }
    /// A new process (own mm) on `cpu` (None: let the scheduler place it).
    fn spawn_process(&mut self, cpu: Option<u32>) -> Result<TaskId, Error>;
    /// A new thread sharing `of`'s mm.
    fn spawn_thread(&mut self, of: TaskId, cpu: Option<u32>) -> Result<TaskId, Error>;
    /// Seed for the workload's own random stream.
    fn seed(&self) -> u64;
    /// A start gate (will-it-scale's): `tasks`, in the order they were
    /// created, each block in poll() on one pipe until the parent writes
    /// it; that one wake-up releases them one after another. Without it
    /// (the default here) every task starts at time 0.
    fn start_gate(&mut self, tasks: &[TaskId]) -> Result<(), Error> {
        let _ = tasks;
        Ok(())
    }
    /// Give task `task`'s mm the mappings a dynamically linked program has
    /// when its loop starts, with their resident pages touched (mm/exec.rs
    /// GLIBC_2_36_X86_64).
    fn map_process_image(&mut self, task: TaskId) -> Result<(), Error> {
        let _ = task;
        Ok(())
    }
    /// Where a testcase's static 4 KiB buffer lies in that process image
    /// (read1's read() buffer, in the binary's data and bss); 0 without an
    /// image.
    fn image_buffer(&self) -> u64 {
        0
    }
}

/// Description of a workload parameter, for `foliosim list`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ParamSpec {
    pub name: &'static str,
    pub default: String,
    pub help: &'static str,
}

pub trait Workload: Send {
    fn name(&self) -> &str;
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error>;
    /// The next operation of `task`. Add to `ops` whatever this workload
    /// counts as an operation (will-it-scale's per-task counter).
    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op;
    /// The accesses `task`'s next calls of `next_op` return, one op each,
    /// as long as each returned `Ret::Val(0)`: a user loop the workload
    /// runs op by op (will-it-scale's touch of its region). The driver
    /// runs them without asking `next_op` (a run of steps,
    /// docs/fault-path-speed.md) and then calls `access_run_done`. None:
    /// the next op is something else, or the workload does not say.
    fn access_run(&self, _task: TaskId) -> Option<AccessRun> {
        None
    }
    /// `n` accesses of the run `access_run` announced were made (every one
    /// but the last returned `Ret::Val(0)`): advance as `n` calls of
    /// `next_op` would have, `ops` included.
    fn access_run_done(&mut self, task: TaskId, n: u64, ops: &mut u64) {
        for _ in 0..n {
            self.next_op(task, Ret::Val(0), ops);
        }
    }
    /// A fork created `child` from `parent`.
    fn on_fork(&mut self, _parent: TaskId, _child: TaskId) {}
    /// Whole iterations of `task`'s loop completed so far: what a reader
    /// checks a measured window against (will-it-scale: munmaps returned;
    /// memhog and file_reader: passes; kbuild: jobs reaped; llama: tokens).
    /// None: the task has no loop (a forked child, a replayed trace).
    fn iterations(&self, _task: TaskId) -> Option<u64> {
        None
    }
    /// Bytes of memory this workload needs at its peak (for an early, clear
    /// error when the machine cannot hold it). None = unknown.
    fn peak_bytes(&self) -> Option<u64> {
        None
    }
}

/// A registered workload: name, help, parameters and constructor.
pub struct WorkloadInfo {
    pub name: &'static str,
    pub help: &'static str,
    pub params: fn() -> Vec<ParamSpec>,
    pub build: fn(&mut params::Params) -> Result<Box<dyn Workload>, String>,
}
