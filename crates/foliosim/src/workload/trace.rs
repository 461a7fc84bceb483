//! "trace": replay of a recorded program tree (`foliosim record`, format in
//! docs/trace-format.md and `trace_format.rs`). Each recorded task is a
//! simulated one: processes with their own address spaces, threads sharing
//! one, and their fork, vfork, clone, execve, wait4 and exit are the
//! kernel's (Op::Fork, Op::Vfork, Op::Clone, Op::Exec, Op::Wait, Op::Exit).
//! Between its records a task computes for the user time it recorded and
//! spends the system time of the calls the model does not run (Op::Compute,
//! Op::SysTime); the tasks run on the simulated CPUs as the scheduler
//! places them, so the recorded parallelism is replayed, not the recorded
//! interleaving.
//!
//! Recorded addresses are the recording's; the simulated kernel places
//! mappings where it likes. The replayer keeps a translation table from
//! recorded ranges to simulated ones per address space: every recorded
//! mmap/mremap result, the brk area (recorded base -> simulated base) and
//! each `Region` (memory the program used that no recorded call or exec
//! created: its initial stack, the vDSO), mapped as private anonymous
//! memory when its process image starts. MAP_FIXED targets,
//! munmap/mprotect/madvise ranges and accesses are translated through it; a
//! range spanning several recorded mappings becomes one call per piece.
//! The threads of a process replay at the model's pace, not the recording's,
//! so a thread can reach memory before another thread's mmap or brk that
//! made it has replayed: such an access (to a recorded address no known
//! range of its space has ever held) waits, in sleeps of MAP_WAIT_NS that
//! double up to MAP_WAIT_LONGEST_NS, while another thread of the process is
//! still replaying (AHEAD_WAIT_MAX_NS in all at most), and is made once the
//! range is known. The other way round, a thread can reach its munmap of
//! memory another thread has yet to touch (a main thread whose join of its
//! workers the trace does not hold): the munmap waits, in the same sleeps,
//! while another thread's queued ops or its next LOOKAHEAD_RECORDS accesses
//! and mappings hold an access to the range before that thread's own
//! mapping of it. An access to memory the space held and unmapped since, or
//! to memory nobody maps, is skipped, and a replayed call that fails is
//! skipped too (the recording only holds calls that succeeded), so a replay
//! always runs to its end.
//!
//! `jobs` re-runs a recorded make at another parallelism, as GNU make's
//! jobserver does: every make of the tree (an image whose file's name is
//! in `jobserver`) has one implicit job slot and takes one of `jobs - 1`
//! shared tokens for each further child it runs at once, giving it back
//! when it reaps one. A wait4 the recorded make made without blocking
//! (WNOHANG, after its jobserver read woke it: it waited for a slot) is
//! put off until the make needs a token and none is free, or until it
//! exits; a blocking wait4 (it waited for a prerequisite) first reaps every
//! child whose reap was put off. `jobs = "cpus"` gives the makes a slot per
//! simulated CPU, as `make -j$(nproc)` would get on that machine: one
//! recording replays as -j8 on an 8-CPU profile and -j160 on a 160-CPU one.
//!
//! One op = one recorded access (a fault, in a trace recorded by perf).

use super::params::Params;
use super::trace_format::{self as tf, Record, Trace, WAIT_NOHANG};
use super::{map, prot, Access, Advice, Fd, FileId, FsKind, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::types::Error;
use std::collections::{BTreeMap, VecDeque};

const PAGE: u64 = 4096;
/// A thread waiting for another (module docs) sleeps MAP_WAIT_NS first,
/// then twice as long each time up to MAP_WAIT_LONGEST_NS, and at most
/// MAP_WAIT_MAX_NS in all for one record (an access to memory not mapped
/// yet AHEAD_WAIT_MAX_NS: a recording can hold an access to memory no
/// recorded call maps, which must not hold its thread back long): then its
/// record goes ahead (an access skipped, a munmap made), so that no cycle
/// of waits the recording did not have can stall a replay. The doubling keeps a long wait (a
/// thread's whole work before its process frees the memory) to a few
/// hundred looks.
const MAP_WAIT_NS: u64 = 10_000;
const MAP_WAIT_LONGEST_NS: u64 = 1_280_000;
const MAP_WAIT_MAX_NS: u64 = 10_000_000_000;
const AHEAD_WAIT_MAX_NS: u64 = 100_000_000;
/// How many of another thread's accesses and mappings a munmap looks
/// through for one to its range (bounded: a replay's cost stays linear).
const LOOKAHEAD_RECORDS: usize = 65_536;

fn page_up(v: u64) -> u64 {
    v.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// What to do with the result of a queued op.
#[derive(Clone, Copy, Debug)]
enum After {
    Nothing,
    /// An open of file index i: keep the fd.
    Opened(usize),
    /// A mapping of the recorded range [rec, rec+len): translate it to the result.
    Mapped {
        rec: u64,
        len: u64,
    },
    /// The initial brk(0): the simulated brk base.
    BrkBase,
    /// A fork, vfork or clone of recorded task `tid` (on_fork binds it).
    Created {
        tid: u64,
        kind: Created,
    },
    /// An execve mapping the recorded image [vaddr, vaddr+len) where it was.
    Exec {
        vaddr: u64,
        len: u64,
        make: bool,
    },
    /// A wait4 of a make: one child fewer (`early`: made for a token, not
    /// at a recorded wait).
    Reaped {
        early: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Created {
    Process,
    Vfork,
    Thread,
}

/// Recorded addresses -> simulated ones, for one address space.
#[derive(Clone, Default)]
struct Space {
    /// rec_start -> (rec_end, sim_start)
    xlat: BTreeMap<u64, (u64, u64)>,
    /// Recorded brk base and current end; simulated brk base.
    brk_rec: Option<(u64, u64)>,
    brk_sim: Option<u64>,
    /// Every recorded range this space has held (rec_start -> rec_end,
    /// disjoint): an address outside them is one no task has mapped yet.
    seen: BTreeMap<u64, u64>,
}

/// One recorded task as it replays.
struct RTask {
    /// Its records in the trace (None: a child the recording saw start but
    /// never run, e.g. one killed at once: it just exits).
    bytes: Option<usize>,
    /// The cursor's (position, last access page).
    cur: (usize, u64),
    space: usize,
    queue: VecDeque<(Op, After)>,
    pending: After,
    started: bool,
    done: bool,
    /// Recorded faults since its last Time record.
    faults: u64,
    /// Its image is a job server (make).
    make: bool,
    /// Children it started and has not reaped; reaps put off; reaps made
    /// before their recorded wait.
    running: u32,
    owed: u32,
    ahead: u32,
    /// A thread (clone) of its process, or a vfork child borrowing its
    /// parent's mm (which waits for it, so maps nothing meanwhile).
    thread: bool,
    vfork: bool,
    /// Sleeps so far, and their time, waiting on another thread before its
    /// next record (module docs).
    map_waits: u32,
    map_waited_ns: u64,
    /// The op it is doing (returned by next_op, not yet completed): an
    /// access of it may still be in its fault.
    doing: Option<Op>,
    /// Its accesses and mappings, for another thread's munmap to look
    /// through (built when its process gets a second thread).
    touches: Option<Vec<Touch>>,
}

/// An access or mapping record of a task: where it is in the task's
/// records and the recorded range it touches or (un)maps. An exec or exit
/// is a mapping of everything: a munmap looks no further.
#[derive(Clone, Copy)]
struct Touch {
    pos: usize,
    lo: u64,
    hi: u64,
    maps: bool,
}

/// The Touches of a task's records, in order.
fn touches(bytes: &[u8]) -> Vec<Touch> {
    let mut c = tf::TaskCursor::at(bytes, (0, 0));
    let mut v = Vec::new();
    loop {
        let pos = c.state().0;
        let Some(r) = c.next() else { break };
        let mut touch = |lo: u64, hi: u64, maps: bool| v.push(Touch { pos, lo, hi, maps });
        match r {
            Record::Access { page, .. } => touch(page << 12, (page + 1) << 12, false),
            Record::Run { page, count, step, .. } => {
                let end = page.wrapping_add_signed(step.wrapping_mul(count.saturating_sub(1) as i64));
                touch(page.min(end) << 12, (page.max(end) + 1) << 12, false);
            }
            Record::Mmap { ret, len, .. } => touch(ret, ret.saturating_add(page_up(len)), true),
            Record::Munmap { addr, len } => touch(addr, addr.saturating_add(page_up(len)), true),
            Record::Mremap { addr, old_len, new_len, ret, .. } => {
                touch(addr, addr.saturating_add(page_up(old_len)), true);
                touch(ret, ret.saturating_add(page_up(new_len)), true);
            }
            Record::Exec { .. } | Record::Exit { .. } => touch(0, u64::MAX, true),
            _ => {}
        }
    }
    v
}

impl RTask {
    fn new(bytes: Option<usize>, space: usize) -> RTask {
        RTask {
            bytes,
            cur: (0, 0),
            space,
            queue: VecDeque::new(),
            pending: After::Nothing,
            started: false,
            done: false,
            faults: 0,
            make: false,
            running: 0,
            owed: 0,
            ahead: 0,
            thread: false,
            vfork: false,
            map_waits: 0,
            map_waited_ns: 0,
            doing: None,
            touches: None,
        }
    }
}

pub struct TraceReplay {
    path: String,
    trace: Trace,
    /// Job slots of the tree's makes (0: replay every wait where it was recorded).
    jobs: u32,
    /// `jobs = "cpus"`: as many job slots as the simulated machine has CPUs
    /// (set at setup), as `make -j$(nproc)` gets on each machine.
    jobs_per_cpu: bool,
    /// `cache = "cold"`: the files the program found are on disk and not
    /// in the page cache, as on the first run after boot.
    cold: bool,
    /// Basenames of the job servers' files.
    jobserver: Vec<String>,
    /// Tokens free in the jobserver.
    tokens: u32,
    /// Kernel time of one recorded fault, taken from the user time that
    /// follows it (the recorder counts it there; the model charges its own).
    fault_ns: u64,
    file_ids: Vec<FileId>,
    /// Opened by the root before its first record; every other process
    /// inherits them through fork and exec.
    fds: Vec<Fd>,
    tasks: Vec<RTask>,
    by_tid: BTreeMap<u64, usize>,
    spaces: Vec<Space>,
    /// Simulated task -> its entry in tasks.
    sim: BTreeMap<TaskId, usize>,
}

impl TraceReplay {
    pub fn new(p: &mut Params) -> Result<Self, String> {
        let path = p.string("path")?;
        let per_cpu = matches!(p.raw().get("jobs"), Some(toml::Value::String(_)));
        let jobs = if per_cpu {
            p.choice("jobs", "cpus", &["cpus"]).map_err(|_| "jobs: expected a number of job slots or \"cpus\"".to_string())?;
            0
        } else {
            p.u64("jobs", 0).map_err(|_| "jobs: expected a number of job slots or \"cpus\"".to_string())?
        };
        let jobserver = p.string("jobserver")?.unwrap_or_else(|| "make".into());
        let cold = p.choice("cache", "warm", &["warm", "cold"])? == "cold";
        p.finish()?;
        let path = path.ok_or_else(|| "path: required (the trace file written by `foliosim record`)".to_string())?;
        if jobs > 1 << 16 {
            return Err(format!("jobs: must be at most 65536, got {jobs}"));
        }
        let trace = tf::read_trace(std::path::Path::new(&path)).map_err(|e| format!("path: {e}"))?;
        let mut r = Self::from_trace(path, trace);
        r.jobs = jobs as u32;
        r.jobs_per_cpu = per_cpu;
        r.cold = cold;
        r.jobserver = jobserver.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        Ok(r)
    }

    pub fn from_trace(path: String, trace: Trace) -> Self {
        let fault_ns = trace
            .summary
            .as_deref()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            .and_then(|v| v.get("fault_kernel_ns").and_then(|x| x.as_f64()))
            .map_or(0, |x| x.max(0.0) as u64);
        let mut tasks = Vec::new();
        let mut by_tid = BTreeMap::new();
        let root = trace.root.unwrap_or(0);
        // The root first: setup spawns it.
        let order = trace
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.tid == root)
            .chain(trace.tasks.iter().enumerate().filter(|(_, t)| t.tid != root));
        for (i, t) in order {
            by_tid.insert(t.tid, tasks.len());
            tasks.push(RTask::new(Some(i), 0));
        }
        if tasks.is_empty() {
            tasks.push(RTask::new(None, 0));
        }
        TraceReplay {
            path,
            trace,
            jobs: 0,
            jobs_per_cpu: false,
            cold: false,
            jobserver: vec!["make".into()],
            tokens: 0,
            fault_ns,
            file_ids: Vec::new(),
            fds: Vec::new(),
            tasks,
            by_tid,
            spaces: vec![Space::default()],
            sim: BTreeMap::new(),
        }
    }

    /// Build from records in the flat form (tests, fuzzing).
    pub fn from_records(path: String, records: &[Record]) -> Result<Self, String> {
        Ok(Self::from_trace(path, Trace::from_records(records)?))
    }

    /// `jobs` and `jobserver` as the parameters give them.
    pub fn with_jobs(mut self, jobs: u32, jobserver: &[&str]) -> Self {
        self.jobs = jobs;
        self.jobserver = jobserver.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `jobs = "cpus"`: a job slot per simulated CPU.
    pub fn with_jobs_per_cpu(mut self, jobserver: &[&str]) -> Self {
        self.jobs_per_cpu = true;
        self.with_jobs(0, jobserver)
    }

    /// Number of recorded tasks.
    pub fn tasks(&self) -> usize {
        self.tasks.len()
    }

    /// The next record of task `p` (None at its end).
    fn peek(&self, p: usize) -> Option<(Record, (usize, u64))> {
        let b = &self.trace.tasks[self.tasks[p].bytes?].bytes;
        let mut c = tf::TaskCursor::at(b, self.tasks[p].cur);
        let r = c.next()?;
        Some((r, c.state()))
    }

    /// Task `p`'s records from its cursor, past the exec there if there is
    /// one: what its (next) process image holds.
    fn image_cursor(&self, p: usize) -> Option<tf::TaskCursor<'_>> {
        let bytes = &self.trace.tasks[self.tasks[p].bytes?].bytes;
        let mut c = tf::TaskCursor::at(bytes, self.tasks[p].cur);
        if !matches!(c.next(), Some(Record::Exec { .. })) {
            c = tf::TaskCursor::at(bytes, self.tasks[p].cur);
        }
        Some(c)
    }

    /// The `Region`s of task `p` from its cursor up to its next exec,
    /// merged into ranges.
    fn regions_ahead(&self, p: usize) -> Vec<(u64, u64)> {
        let Some(c) = self.image_cursor(p) else { return Vec::new() };
        let mut v: Vec<(u64, u64)> = Vec::new();
        for r in c {
            match r {
                Record::Exec { .. } => break,
                Record::Region { addr, len } => v.push((addr & !(PAGE - 1), page_up(addr.saturating_add(len)))),
                _ => {}
            }
        }
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (a, e) in v {
            match out.last_mut() {
                Some(l) if a <= l.1 => l.1 = l.1.max(e),
                _ => out.push((a, e)),
            }
        }
        out.into_iter().map(|(a, e)| (a, e - a)).collect()
    }

    /// The top of the mmap area of the process image task `p` is about to
    /// exec, as recorded: the end of the image's highest file mapping (the
    /// interpreter, which load_elf_binary maps first, top-down from
    /// mmap_base), so that the replay takes the recorded ASLR draw and the
    /// program's mappings fall where they fell, relative to the fault-around
    /// windows and PMDs, under the kernel's own placement. 0 (the kernel
    /// draws) for an image with no file mapping beside the binary.
    fn recorded_mmap_base(&self, p: usize) -> u64 {
        let Some(c) = self.image_cursor(p) else { return 0 };
        let mut top = 0;
        for r in c {
            match r {
                Record::Mmap { file: Some(_), ret, len, .. } => top = top.max(ret.saturating_add(page_up(len))),
                Record::Mmap { .. } | Record::Region { .. } => {}
                _ => break,
            }
        }
        top
    }

    /// Queue the mappings of the Regions task `p` meets before its next
    /// exec; with `brk`, first the brk(0) of a new process image.
    fn start_instance(&mut self, p: usize, brk: bool) {
        let regions = self.regions_ahead(p);
        let q = &mut self.tasks[p].queue;
        if brk {
            q.push_back((Op::Brk { addr: 0 }, After::BrkBase));
        }
        for (a, l) in regions {
            // At the recorded address where it is free (the kernel placed
            // the stack and the vDSO there, outside the program's own
            // top-down mmaps), else where the kernel puts it.
            let op = Op::Mmap {
                addr: a,
                len: l,
                prot: prot::READ | prot::WRITE | prot::EXEC,
                flags: map::PRIVATE | map::ANONYMOUS,
                fd: -1,
                off: 0,
            };
            q.push_back((op, After::Mapped { rec: a, len: l }));
        }
    }

    /// Whether `p` is one of several threads of a process and another of
    /// them replays still (has not reached its exit): one that may yet map
    /// what `p` waits for. A vfork child and its parent never wait on each
    /// other (the parent sleeps until the child's exec or exit).
    fn threads_replaying(&self, p: usize) -> bool {
        let me = &self.tasks[p];
        let space = me.space;
        let shared = |t: &RTask| t.space == space && !t.vfork;
        !me.vfork
            && self.tasks.iter().any(|t| shared(t) && t.thread)
            && self.tasks.iter().enumerate().any(|(q, t)| q != p && shared(t) && t.started && !t.done)
    }

    /// Whether another thread of `p`'s process has yet to make an access
    /// to recorded [addr, addr+len), which `p` is about to unmap: one it is
    /// doing (its fault may be under way) or has queued, or among its next
    /// LOOKAHEAD_RECORDS accesses and mappings before it maps or unmaps
    /// some of the range itself (after that its accesses are to its own
    /// mapping), execs or exits. A thread that waits itself is not waited
    /// for: what it waits for comes after this munmap in the recording, and
    /// so do its accesses to the range (to a mapping made there since), and
    /// two threads never wait on each other.
    fn others_still_use(&self, p: usize, addr: u64, len: u64) -> bool {
        let me = &self.tasks[p];
        let (lo, hi) = (addr & !(PAGE - 1), page_up(addr.saturating_add(len)));
        let sim = self.spaces[me.space].pieces(addr, len);
        let queued = |op: &Op| {
            let (a, end) = match *op {
                Op::Access { addr, .. } => (addr, addr + 1),
                Op::AccessRange { addr, stride, count, .. } => (addr, addr + stride.max(1) * count.max(1)),
                _ => return false,
            };
            sim.iter().any(|&(s, l)| a < s + l && s < end)
        };
        let recorded = |q: &RTask| {
            let Some(v) = q.touches.as_deref() else { return false };
            let from = v.partition_point(|t| t.pos < q.cur.0);
            v[from..].iter().take(LOOKAHEAD_RECORDS).find(|t| t.lo < hi && lo < t.hi).is_some_and(|t| !t.maps)
        };
        !me.vfork
            && self.tasks.iter().enumerate().any(|(q, t)| {
                q != p
                    && t.space == me.space
                    && !t.vfork
                    && t.started
                    && !t.done
                    && t.map_waits == 0
                    && (t.doing.iter().chain(t.queue.iter().map(|(op, _)| op)).any(queued) || recorded(t))
            })
    }

    /// Queue task `p`'s next sleep of a wait on another thread (module
    /// docs); false once it has waited `max_ns` for this record, so
    /// that no cycle of waits the recording did not have stalls a replay.
    fn map_wait(&mut self, p: usize, max_ns: u64) -> bool {
        let t = &mut self.tasks[p];
        if t.map_waited_ns >= max_ns {
            return false;
        }
        let ns = (MAP_WAIT_NS << t.map_waits.min(16)).min(MAP_WAIT_LONGEST_NS);
        t.map_waits += 1;
        t.map_waited_ns += ns;
        t.queue.push_back((Op::Nanosleep { ns }, After::Nothing));
        true
    }

    /// Task `p`'s record goes ahead: its next wait starts afresh.
    fn map_waited(&mut self, p: usize) {
        let t = &mut self.tasks[p];
        t.map_waits = 0;
        t.map_waited_ns = 0;
    }

    fn is_jobserver(&self, file: u32) -> bool {
        let Some((_, path, _)) = self.trace.files.get(file as usize) else { return false };
        let base = path.rsplit('/').next().unwrap_or(path);
        self.jobserver.iter().any(|j| j == base)
    }
}

impl Space {
    /// Simulated address of recorded `a`, if some known range holds it.
    fn translate(&self, a: u64) -> Option<u64> {
        self.known(a).map(|(start, _, sim)| a - start + sim)
    }

    /// The known range holding recorded `a`: (rec_start, rec_end, sim_start).
    fn known(&self, a: u64) -> Option<(u64, u64, u64)> {
        if let (Some((b, end)), Some(s)) = (self.brk_rec, self.brk_sim) {
            if a >= b && a < page_up(end) {
                return Some((b, page_up(end), s));
            }
        }
        let (&start, &(end, sim)) = self.xlat.range(..=a).next_back()?;
        (a < end).then_some((start, end, sim))
    }

    /// The pieces of recorded [a, a+len) that are known: (sim_addr, len).
    fn pieces(&self, a: u64, len: u64) -> Vec<(u64, u64)> {
        let end = a.saturating_add(page_up(len));
        let mut v = Vec::new();
        if let (Some((b, bend)), Some(s)) = (self.brk_rec, self.brk_sim) {
            let (lo, hi) = (a.max(b), end.min(page_up(bend)));
            if lo < hi {
                v.push((lo - b + s, hi - lo));
            }
        }
        let first = self.xlat.range(..=a).next_back().map(|(&s, _)| s).unwrap_or(a);
        for (&s, &(e, sim)) in self.xlat.range(first..end) {
            let (lo, hi) = (a.max(s), end.min(e));
            if lo < hi {
                v.push((lo - s + sim, hi - lo));
            }
        }
        v
    }

    /// Forget recorded [a, a+len) (munmap, or a mapping replaced).
    fn forget(&mut self, a: u64, len: u64) {
        let end = a.saturating_add(page_up(len));
        let first = self.xlat.range(..=a).next_back().map(|(&s, _)| s).unwrap_or(a);
        let hit: Vec<(u64, (u64, u64))> = self.xlat.range(first..end).map(|(&s, &v)| (s, v)).collect();
        for (s, (e, sim)) in hit {
            if e <= a || s >= end {
                continue;
            }
            self.xlat.remove(&s);
            if s < a {
                self.xlat.insert(s, (a, sim));
            }
            if e > end {
                self.xlat.insert(end, (e, sim + (end - s)));
            }
        }
    }

    fn remember(&mut self, rec: u64, len: u64, sim: u64) {
        self.forget(rec, len);
        self.xlat.insert(rec, (rec + page_up(len), sim));
        self.mark_seen(rec, rec + page_up(len));
    }

    /// Add recorded [a, end) to the ranges this space has held.
    fn mark_seen(&mut self, a: u64, end: u64) {
        let (mut lo, mut hi) = (a, end);
        let first = self.seen.range(..=a).next_back().filter(|(_, &e)| e >= a).map_or(a, |(&s, _)| s);
        let hit: Vec<(u64, u64)> = self.seen.range(first..=end).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in hit {
            self.seen.remove(&s);
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.seen.insert(lo, hi);
    }

    /// Whether recorded `a` lies in no range this space has ever held.
    fn never_held(&self, a: u64) -> bool {
        self.seen.range(..=a).next_back().is_none_or(|(_, &e)| a >= e)
    }

    /// Whether some page of `count` accesses at `page + i * step` (pages)
    /// is in no known range and in none this space has held: memory
    /// another task has not mapped yet. A known range is stepped over whole.
    fn ahead_of_its_mapping(&self, page: u64, count: u64, step: i64) -> bool {
        let mut i = 0;
        while i < count {
            let a = page.wrapping_add_signed(step.wrapping_mul(i as i64)) << 12;
            match self.known(a) {
                None if self.never_held(a) => return true,
                // The pages of the stride still inside [s, e).
                Some((s, e, _)) if step != 0 => {
                    let room = if step > 0 { (e - a).div_ceil(PAGE) } else { (a - s) / PAGE + 1 };
                    i += room.div_ceil(step.unsigned_abs()).max(1);
                }
                Some(_) if step == 0 => return false,
                _ => i += 1,
            }
        }
        false
    }

    /// `count` accesses of `kind`, one to each page `page + i * step`,
    /// translated: one AccessRange per stretch that stays in one known
    /// range, ascending.
    fn run_ops(&self, kind: Access, page: u64, count: u64, step: i64, out: &mut VecDeque<(Op, After)>) {
        let (lo, stride) = if step < 0 {
            (page.wrapping_sub(step.unsigned_abs().wrapping_mul(count - 1)), step.unsigned_abs())
        } else {
            (page, step as u64)
        };
        if stride == 0 {
            if let Some(a) = self.translate(lo << 12) {
                out.push_back((Op::AccessRange { addr: a, stride: 0, count, kind }, After::Nothing));
            }
            return;
        }
        let mut i = 0;
        while i < count {
            let Some(a) = self.translate((lo + i * stride) << 12) else {
                i += 1;
                continue;
            };
            let mut n = 1;
            while i + n < count && self.translate((lo + (i + n) * stride) << 12) == Some(a + n * stride * PAGE) {
                n += 1;
            }
            let op = if n == 1 { Op::Access { addr: a, kind } } else { Op::AccessRange { addr: a, stride: stride * PAGE, count: n, kind } };
            out.push_back((op, After::Nothing));
            i += n;
        }
    }
}

fn advice(a: u32) -> Option<Advice> {
    Some(match a {
        3 => Advice::WillNeed,
        4 => Advice::DontNeed,
        8 => Advice::Free,
        14 => Advice::HugePage,
        15 => Advice::NoHugePage,
        20 => Advice::Cold,
        21 => Advice::PageOut,
        _ => return None,
    })
}

fn access_kind(kind: u8) -> Access {
    match kind {
        tf::K_STORE => Access::Store,
        tf::K_IFETCH => Access::Ifetch,
        _ => Access::Load,
    }
}

impl TraceReplay {
    /// Turn record `r` of task `p` into queued ops (possibly none). Returns
    /// false when the record must be met again later (a make waiting for a
    /// job token first reaps a child).
    fn expand(&mut self, p: usize, r: Record, ops: &mut u64) -> bool {
        let accessed = match r {
            Record::Access { page, .. } => Some((page, 1, 0)),
            Record::Run { page, count, step, .. } => Some((page, count, step)),
            _ => None,
        };
        if let Some((page, count, step)) = accessed {
            let t = &self.tasks[p];
            if self.spaces[t.space].ahead_of_its_mapping(page, count, step)
                && self.threads_replaying(p)
                && self.map_wait(p, AHEAD_WAIT_MAX_NS)
            {
                // Memory another thread of the process has yet to map.
                return false;
            }
            self.map_waited(p);
        }
        if let Record::Munmap { addr, len } = r {
            if self.others_still_use(p, addr, len) && self.map_wait(p, MAP_WAIT_MAX_NS) {
                // Another thread has yet to touch what this would unmap.
                return false;
            }
            self.map_waited(p);
        }
        let jobs = self.jobs > 0 && self.tasks[p].make;
        match r {
            Record::Exec { file, vaddr, text, data, data_off, bss } => {
                let (Some(&id), Some(&fd)) = (self.file_ids.get(file as usize), self.fds.get(file as usize)) else { return true };
                // The image goes where it was (execve maps it at the ELF's
                // addresses); the kernel puts data right after text, at file
                // offset `text`: where the ELF's offset differs, the data
                // segment is mapped again from its own offset.
                let make = self.is_jobserver(file);
                let mmap_base = self.recorded_mmap_base(p);
                let q = &mut self.tasks[p].queue;
                q.push_back((
                    Op::Exec { file: id, vaddr, text, data, bss, mmap_base },
                    After::Exec { vaddr, len: page_up(text) + page_up(data) + page_up(bss), make },
                ));
                if data > 0 && data_off != text {
                    let op = Op::Mmap {
                        addr: vaddr + page_up(text),
                        len: data,
                        prot: prot::READ | prot::WRITE,
                        flags: map::PRIVATE | map::FIXED,
                        fd,
                        off: data_off & !(PAGE - 1),
                    };
                    q.push_back((op, After::Nothing));
                }
                self.start_instance(p, true);
                return true;
            }
            Record::Fork { child } | Record::Vfork { child } if jobs && self.tasks[p].running > 0 => {
                if self.tokens == 0 {
                    // No token free: reap a child first (it gives back one).
                    self.tasks[p].queue.push_back((Op::Wait, After::Reaped { early: true }));
                    return false;
                }
                self.tokens -= 1;
                let (op, kind) = if matches!(r, Record::Fork { .. }) { (Op::Fork, Created::Process) } else { (Op::Vfork, Created::Vfork) };
                self.tasks[p].queue.push_back((op, After::Created { tid: child, kind }));
                return true;
            }
            Record::Wait { flags, .. } if jobs => {
                let t = &mut self.tasks[p];
                if t.ahead > 0 {
                    t.ahead -= 1;
                } else if flags & WAIT_NOHANG != 0 {
                    t.owed += 1;
                } else {
                    for _ in 0..=t.owed {
                        t.queue.push_back((Op::Wait, After::Reaped { early: false }));
                    }
                    t.owed = 0;
                }
                return true;
            }
            Record::Exit { .. } if jobs => {
                let t = &mut self.tasks[p];
                for _ in 0..t.owed {
                    t.queue.push_back((Op::Wait, After::Reaped { early: false }));
                }
                t.owed = 0;
            }
            _ => {}
        }
        let fds = &self.fds;
        let fault_ns = self.fault_ns;
        let t = &mut self.tasks[p];
        let (sp, q) = (&mut self.spaces[t.space], &mut t.queue);
        match r {
            Record::Access { kind, page, repeat } => {
                *ops += 1 + repeat;
                t.faults += 1 + repeat;
                sp.run_ops(access_kind(kind), page, repeat.saturating_add(1), 0, q);
            }
            Record::Run { kind, page, count, step } => {
                *ops += count;
                t.faults += count;
                sp.run_ops(access_kind(kind), page, count, step, q);
            }
            Record::Around { page, count } => sp.run_ops(Access::Load, page, count, 1, q),
            Record::Time { user_ns, sys_ns } => {
                // The kernel time of the faults before it is in the recorded
                // user time; the model charges its own.
                let user = user_ns.saturating_sub(t.faults.saturating_mul(fault_ns));
                t.faults = 0;
                if user > 0 {
                    q.push_back((Op::Compute { ns: user }, After::Nothing));
                }
                if sys_ns > 0 {
                    q.push_back((Op::SysTime { ns: sys_ns }, After::Nothing));
                }
            }
            Record::Mmap { addr, len, prot: pr, flags, file, off, ret } => {
                // A mapping recorded over memory the process held was placed
                // there (MAP_FIXED: the kernel puts no other mapping over
                // one), as the segments of the interpreter in an exec's
                // image are, over its whole first mapping.
                let fixed = flags & (map::FIXED | 0x10_0000) != 0;
                let target = if fixed { sp.translate(addr) } else { sp.translate(ret) };
                let share = if flags & 0x3 == map::PRIVATE { map::PRIVATE } else { map::SHARED };
                let mut fl = share | (flags & (map::ANONYMOUS | map::POPULATE));
                if target.is_some() {
                    fl |= map::FIXED;
                }
                let fd = match file {
                    Some(f) if flags & map::ANONYMOUS == 0 => fds.get(f as usize).copied().unwrap_or(-1),
                    _ => -1,
                };
                if fd < 0 {
                    fl |= map::ANONYMOUS;
                }
                let pr = pr & (prot::READ | prot::WRITE | prot::EXEC);
                q.push_back((
                    Op::Mmap { addr: target.unwrap_or(0), len, prot: pr, flags: fl, fd, off: if fd < 0 { 0 } else { off } },
                    After::Mapped { rec: ret, len },
                ));
            }
            Record::Munmap { addr, len } => {
                for (a, l) in sp.pieces(addr, len) {
                    q.push_back((Op::Munmap { addr: a, len: l }, After::Nothing));
                }
                sp.forget(addr, len);
            }
            Record::Mprotect { addr, len, prot: pr } => {
                for (a, l) in sp.pieces(addr, len) {
                    q.push_back((Op::Mprotect { addr: a, len: l, prot: pr & 7 }, After::Nothing));
                }
            }
            Record::Madvise { addr, len, advice: a } => {
                if let Some(adv) = advice(a) {
                    for (a, l) in sp.pieces(addr, len) {
                        q.push_back((Op::Madvise { addr: a, len: l, advice: adv }, After::Nothing));
                    }
                }
            }
            Record::Brk { addr, ret } => match (sp.brk_rec, sp.brk_sim) {
                (None, _) => sp.brk_rec = Some((ret, ret)),
                (Some((b, _)), Some(s)) if addr != 0 => {
                    sp.brk_rec = Some((b, ret.max(b)));
                    sp.mark_seen(b, page_up(ret.max(b)));
                    q.push_back((Op::Brk { addr: addr.saturating_sub(b) + s }, After::Nothing));
                }
                _ => {}
            },
            Record::Mremap { addr, old_len, new_len, flags, ret } => {
                if let Some(a) = sp.translate(addr) {
                    sp.forget(addr, old_len);
                    q.push_back((
                        Op::Mremap { addr: a, old_len, new_len, may_move: flags & 1 != 0 },
                        After::Mapped { rec: ret, len: new_len },
                    ));
                }
            }
            Record::Read { file, off, len } | Record::Write { file, off, len } => {
                if let Some(&fd) = fds.get(file as usize).filter(|&&fd| fd >= 0) {
                    q.push_back((Op::Lseek { fd, off }, After::Nothing));
                    // The recorded faults already hold the buffer's pages.
                    let op = if matches!(r, Record::Read { .. }) { Op::Read { fd, len, buf: 0 } } else { Op::Write { fd, len, buf: 0 } };
                    q.push_back((op, After::Nothing));
                }
            }
            Record::Fork { child } => q.push_back((Op::Fork, After::Created { tid: child, kind: Created::Process })),
            Record::Vfork { child } => q.push_back((Op::Vfork, After::Created { tid: child, kind: Created::Vfork })),
            Record::Clone { child } => q.push_back((Op::Clone, After::Created { tid: child, kind: Created::Thread })),
            Record::Wait { .. } => q.push_back((Op::Wait, After::Nothing)),
            Record::Exit { .. } => {
                t.done = true;
                q.push_back((Op::Exit, After::Nothing));
            }
            Record::Region { .. }
            | Record::Exec { .. }
            | Record::File { .. }
            | Record::Meta { .. }
            | Record::Summary { .. }
            | Record::Root { .. }
            | Record::Task { .. }
            | Record::End { .. } => {}
        }
        true
    }

    /// Apply the result of task `p`'s previous queued op.
    fn complete(&mut self, p: usize, last: Ret) {
        self.tasks[p].doing = None;
        let pending = std::mem::replace(&mut self.tasks[p].pending, After::Nothing);
        if let After::Reaped { early } = pending {
            let t = &mut self.tasks[p];
            if last.is_err() {
                t.running = 0; // no child left to reap
                return;
            }
            if t.running >= 2 {
                self.tokens += 1;
            }
            t.running = t.running.saturating_sub(1);
            if early {
                if t.owed > 0 {
                    t.owed -= 1;
                } else {
                    t.ahead += 1;
                }
            }
            return;
        }
        if last.is_err() {
            return;
        }
        let space = self.tasks[p].space;
        match pending {
            After::Opened(i) => self.fds[i] = last.val() as Fd,
            After::Mapped { rec, len } => self.spaces[space].remember(rec, len, last.val() as u64),
            After::BrkBase => self.spaces[space].brk_sim = Some(last.val() as u64),
            After::Exec { vaddr, len, make } => {
                // A new address space (a vfork child leaves its parent's).
                let mut sp = Space::default();
                sp.remember(vaddr, len, vaddr);
                self.spaces.push(sp);
                let t = &mut self.tasks[p];
                t.space = self.spaces.len() - 1;
                t.make = make;
            }
            After::Created { kind: Created::Process | Created::Vfork, .. } => self.tasks[p].running += 1,
            After::Created { .. } | After::Nothing | After::Reaped { .. } => {}
        }
    }
}

impl Workload for TraceReplay {
    fn name(&self) -> &str {
        "trace"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        self.file_ids.clear();
        for (size, _, flags) in &self.trace.files {
            // Files the program found are read from a warm page cache, as
            // on a re-run, or from disk on a cold one; the ones it created
            // start empty.
            let found = flags & tf::FILE_CREATED == 0;
            let size = page_up((*size).max(PAGE));
            let id =
                if found && self.cold { env.create_file_on_disk(FsKind::Disk, size)? } else { env.create_file(FsKind::Disk, size, found)? };
            self.file_ids.push(id);
        }
        let task = env.spawn_process(None)?;
        self.sim.insert(task, 0);
        self.fds = vec![-1; self.trace.files.len()];
        if self.jobs_per_cpu {
            self.jobs = env.nr_cpus();
        }
        self.tokens = self.jobs.saturating_sub(1);
        Ok(())
    }

    /// The child runs its recorded records (a child without any just
    /// exits): a process in a copy of the parent's address space, a vfork
    /// child or a thread in the parent's own.
    fn on_fork(&mut self, parent: TaskId, child: TaskId) {
        let Some(&p) = self.sim.get(&parent) else { return };
        let After::Created { tid, kind } = self.tasks[p].pending else { return };
        let c = match self.by_tid.get(&tid).copied().filter(|&c| !self.tasks[c].started) {
            Some(c) => c,
            None => {
                self.tasks.push(RTask::new(None, 0));
                self.tasks.len() - 1
            }
        };
        let space = match kind {
            Created::Process => {
                let sp = self.spaces[self.tasks[p].space].clone();
                self.spaces.push(sp);
                self.spaces.len() - 1
            }
            Created::Vfork | Created::Thread => self.tasks[p].space,
        };
        self.tasks[c].space = space;
        self.tasks[c].started = true;
        self.tasks[c].thread = matches!(kind, Created::Thread);
        self.tasks[c].vfork = matches!(kind, Created::Vfork);
        if kind == Created::Thread {
            for t in [p, c] {
                if let (Some(i), None) = (self.tasks[t].bytes, &self.tasks[t].touches) {
                    self.tasks[t].touches = Some(touches(&self.trace.tasks[i].bytes));
                }
            }
        }
        self.sim.insert(child, c);
        // Its Regions (a thread's, a vfork child's) go into the shared space
        // now; a process image's come with its exec.
        if !matches!(self.peek(c), Some((Record::Exec { .. }, _))) {
            self.start_instance(c, false);
        }
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(&p) = self.sim.get(&task) else { return Op::Exit };
        self.complete(p, last);
        if !self.tasks[p].started {
            // The root: it opens every file, and maps what its image needs.
            self.tasks[p].started = true;
            for (i, &f) in self.file_ids.iter().enumerate() {
                self.tasks[p].queue.push_back((Op::Open { file: f }, After::Opened(i)));
            }
            if !matches!(self.peek(p), Some((Record::Exec { .. }, _))) {
                self.start_instance(p, true);
            }
        }
        loop {
            if let Some((op, after)) = self.tasks[p].queue.pop_front() {
                self.tasks[p].pending = after;
                self.tasks[p].doing = Some(op);
                return op;
            }
            if self.tasks[p].done {
                return Op::Exit;
            }
            let Some((r, next)) = self.peek(p) else {
                self.tasks[p].done = true;
                return Op::Exit;
            };
            if self.expand(p, r, ops) {
                self.tasks[p].cur = next;
            }
        }
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(TraceReplay::new(p)?))
}

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec { name: "path", default: "(required)".into(), help: "trace file written by `foliosim record` (docs/trace-format.md)" },
        ParamSpec {
            name: "jobs",
            default: "0".into(),
            help: "job slots of the recorded makes, as make -jN's jobserver gives them (a make recorded at -j8 replays at -jN); \"cpus\": one per simulated CPU, as make -j$(nproc); 0: every wait4 where it was recorded",
        },
        ParamSpec { name: "jobserver", default: "make".into(), help: "file names (comma-separated) of the programs `jobs` applies to" },
        ParamSpec {
            name: "cache",
            default: "warm".into(),
            help: "the page cache of the files the program found: \"warm\" (all cached, as on a re-run) or \"cold\" (on disk only, as the first run after boot: each page's first read or fault reads it in)",
        },
    ]
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "trace",
        help: "replay of a program tree recorded with `foliosim record -- CMD`: its processes and threads with their fork/vfork/clone/execve/wait4/exit, their mmap/munmap/brk/mprotect/madvise/mremap calls, file reads and writes, page faults (or every access, from the valgrind recorder) and CPU time between them; op = recorded access",
        params,
        build,
    }
}

impl TraceReplay {
    /// The file this replay was read from.
    pub fn path(&self) -> &str {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal kernel: mmap hands out fresh addresses far from the
    /// recorded ones (MAP_FIXED gets what it asks), brk starts at 0x5000_0000.
    fn run(records: Vec<Record>) -> (Vec<Step>, u64) {
        let mut all = vec![Record::Root { tid: 1 }, Record::Task { tid: 1 }];
        all.extend(records.iter().filter(|r| r.is_task_record()).cloned());
        let globals: Vec<Record> = records.into_iter().filter(|r| !r.is_task_record()).collect();
        let mut w = TraceReplay::from_records("t".into(), &[globals, all].concat()).unwrap();
        let mut env = super::super::common::testutil::FakeEnv::new(1);
        w.setup(&mut env).unwrap();
        let t = env.ids()[0];
        let (mut last, mut ops, mut log, mut next, mut fd) = (Ret::Start, 0u64, Vec::new(), 0x7f00_0000_0000u64, 3i64);
        for _ in 0..10_000 {
            let mut o = 0;
            let op = w.next_op(t, last, &mut o);
            ops += o;
            last = match op {
                Op::Mmap { addr, flags, .. } if flags & map::FIXED != 0 => Ret::Val(addr as i64),
                Op::Mmap { len, .. } => {
                    let a = next;
                    next += len + (1 << 21);
                    Ret::Val(a as i64)
                }
                Op::Brk { addr: 0 } => Ret::Val(0x5000_0000),
                Op::Brk { addr } => Ret::Val(addr as i64),
                Op::Open { .. } => {
                    fd += 1;
                    Ret::Val(fd - 1)
                }
                _ => Ret::Val(0),
            };
            log.push(Step { op, ret: last });
            if op == Op::Exit {
                break;
            }
        }
        (log, ops)
    }

    #[derive(Debug)]
    struct Step {
        op: Op,
        ret: Ret,
    }

    #[test]
    fn accesses_follow_their_mapping_to_its_simulated_address() {
        let rec = 0x4830_0000u64;
        let (log, ops) = run(vec![
            Record::Mmap { addr: 0, len: 3 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: rec },
            Record::Access { kind: tf::K_STORE, page: (rec >> 12) + 2, repeat: 4 },
            Record::Access { kind: tf::K_LOAD, page: rec >> 12, repeat: 0 },
            // Outside any mapping: skipped.
            Record::Access { kind: tf::K_LOAD, page: 0x1234, repeat: 0 },
            Record::Munmap { addr: rec, len: 3 * PAGE },
            Record::Access { kind: tf::K_LOAD, page: rec >> 12, repeat: 0 },
        ]);
        // brk(0), mmap, range, access, munmap, exit
        assert_eq!(log[0].op, Op::Brk { addr: 0 });
        let Op::Mmap { addr: 0, len, flags, fd: -1, .. } = log[1].op else { panic!("{:?}", log[1]) };
        assert_eq!((len, flags), (3 * PAGE, map::PRIVATE | map::ANONYMOUS));
        let sim = log[1].ret.val() as u64;
        assert_ne!(sim, rec, "the fake kernel places mappings elsewhere");
        assert_eq!(log[2].op, Op::AccessRange { addr: sim + 2 * PAGE, stride: 0, count: 5, kind: Access::Store });
        assert_eq!(log[3].op, Op::AccessRange { addr: sim, stride: 0, count: 1, kind: Access::Load });
        assert_eq!(log[4].op, Op::Munmap { addr: sim, len: 3 * PAGE });
        assert_eq!(log[5].op, Op::Exit);
        assert_eq!(log.len(), 6);
        // Every recorded access is an op, replayed or not.
        assert_eq!(ops, 8);
    }

    #[test]
    fn a_run_of_faults_is_one_range_per_mapping_it_crosses() {
        let (a, b) = (0x4830_0000u64, 0x4830_3000u64);
        let (log, ops) = run(vec![
            Record::Mmap { addr: 0, len: 3 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: a },
            Record::Mmap { addr: 0, len: 2 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: b },
            // Downwards from b's second page to a's first: 5 pages, two mappings.
            Record::Run { kind: tf::K_STORE, page: (b >> 12) + 1, count: 5, step: -1 },
        ]);
        let (sa, sb) = (log[1].ret.val() as u64, log[2].ret.val() as u64);
        assert_eq!(log[3].op, Op::AccessRange { addr: sa, stride: PAGE, count: 3, kind: Access::Store });
        assert_eq!(log[4].op, Op::AccessRange { addr: sb, stride: PAGE, count: 2, kind: Access::Store });
        assert_eq!(ops, 5);
    }

    #[test]
    fn time_becomes_compute_and_system_time_less_the_faults_kernel_time() {
        let rec = 0x4830_0000u64;
        let mut w = TraceReplay::from_records(
            "t".into(),
            &[
                Record::Summary { json: "{\"fault_kernel_ns\": 1000}".into() },
                Record::Task { tid: 1 },
                Record::Mmap { addr: 0, len: 4 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: rec },
                Record::Time { user_ns: 50_000, sys_ns: 0 },
                Record::Run { kind: tf::K_STORE, page: rec >> 12, count: 4, step: 1 },
                Record::Time { user_ns: 10_000, sys_ns: 700 },
                Record::Access { kind: tf::K_STORE, page: rec >> 12, repeat: 0 },
                Record::Time { user_ns: 500, sys_ns: 0 },
            ],
        )
        .unwrap();
        let mut env = super::super::common::testutil::FakeEnv::new(1);
        w.setup(&mut env).unwrap();
        let t = env.ids()[0];
        let mut got = Vec::new();
        let mut last = Ret::Start;
        loop {
            let op = w.next_op(t, last, &mut 0);
            last = if let Op::Mmap { .. } = op { Ret::Val(0x7f00_0000_0000) } else { Ret::Val(0) };
            if let Op::Compute { ns } | Op::SysTime { ns } = op {
                got.push((matches!(op, Op::Compute { .. }), ns));
            }
            if op == Op::Exit {
                break;
            }
        }
        // 4 faults' 4 us come off the 10 us after them; the 500 ns after one fault are all kernel time.
        assert_eq!(got, [(true, 50_000), (true, 6_000), (false, 700)]);
    }

    #[test]
    fn fixed_maps_partial_unmaps_regions_and_files() {
        let rec = 0x10_0000_0000u64;
        let (log, _) = run(vec![
            Record::File { size: 5 * PAGE, path: "/lib/libx.so".into(), flags: 0 },
            Record::Region { addr: 0x40_0000, len: 2 * PAGE },
            Record::Mmap { addr: 0, len: 4 * PAGE, prot: 1, flags: 0x802, file: Some(0), off: 0, ret: rec },
            Record::Mmap { addr: rec + PAGE, len: PAGE, prot: 5, flags: 0x812, file: Some(0), off: PAGE, ret: rec + PAGE },
            Record::Munmap { addr: rec + 3 * PAGE, len: PAGE },
            Record::Access { kind: tf::K_IFETCH, page: (rec >> 12) + 1, repeat: 0 },
            Record::Access { kind: tf::K_LOAD, page: (rec >> 12) + 3, repeat: 0 },
            Record::Access { kind: tf::K_STORE, page: 0x401, repeat: 0 },
        ]);
        let Op::Open { .. } = log[0].op else { panic!() };
        let fd = log[0].ret.val() as Fd;
        assert_eq!(log[1].op, Op::Brk { addr: 0 });
        let Op::Mmap { len: rl, flags: rf, .. } = log[2].op else { panic!() };
        assert_eq!((rl, rf), (2 * PAGE, map::PRIVATE | map::ANONYMOUS));
        let region = log[2].ret.val() as u64;
        let Op::Mmap { addr: 0, fd: f1, flags: fl1, .. } = log[3].op else { panic!("{:?}", log[3]) };
        assert_eq!((f1, fl1), (fd, map::PRIVATE));
        let base = log[3].ret.val() as u64;
        assert_eq!(log[4].op, Op::Mmap { addr: base + PAGE, len: PAGE, prot: 5, flags: map::PRIVATE | map::FIXED, fd, off: PAGE });
        assert_eq!(log[5].op, Op::Munmap { addr: base + 3 * PAGE, len: PAGE });
        assert_eq!(log[6].op, Op::AccessRange { addr: base + PAGE, stride: 0, count: 1, kind: Access::Ifetch });
        // page 3 was unmapped: skipped; the region page is translated.
        assert_eq!(log[7].op, Op::AccessRange { addr: region + PAGE, stride: 0, count: 1, kind: Access::Store });
        assert_eq!(log[8].op, Op::Exit);
    }

    #[test]
    fn brk_is_translated_from_the_recorded_base() {
        let b = 0x0403_5000_u64;
        let (log, _) = run(vec![
            Record::Brk { addr: 0, ret: b },
            Record::Brk { addr: b + 8 * PAGE, ret: b + 8 * PAGE },
            Record::Access { kind: tf::K_STORE, page: (b >> 12) + 7, repeat: 0 },
        ]);
        let sb = log[0].ret.val() as u64;
        assert_eq!(log[1].op, Op::Brk { addr: sb + 8 * PAGE });
        assert_eq!(log[2].op, Op::AccessRange { addr: sb + 7 * PAGE, stride: 0, count: 1, kind: Access::Store });
    }

    #[test]
    fn reads_and_writes_go_through_the_files_fd_at_their_offset() {
        let (log, _) = run(vec![
            Record::File { size: 5 * PAGE, path: "/src/a.c".into(), flags: 0 },
            Record::Read { file: 0, off: 8192, len: 100 },
            Record::Write { file: 0, off: 0, len: 4096 },
        ]);
        let fd = log[0].ret.val() as Fd;
        let ops: Vec<Op> = log[2..6].iter().map(|s| s.op).collect();
        assert_eq!(
            ops,
            [Op::Lseek { fd, off: 8192 }, Op::Read { fd, len: 100, buf: 0 }, Op::Lseek { fd, off: 0 }, Op::Write { fd, len: 4096, buf: 0 }]
        );
    }

    #[test]
    fn a_cold_cache_leaves_the_files_the_program_found_on_disk_only() {
        let recs = [
            Record::File { size: 5 * PAGE, path: "/src/a.c".into(), flags: 0 },
            Record::File { size: PAGE, path: "/obj/a.o".into(), flags: tf::FILE_CREATED },
            Record::Root { tid: 1 },
            Record::Task { tid: 1 },
            Record::Exit { code: 0 },
        ];
        for (cache, populated, on_disk) in [("warm", [true, false], vec![]), ("cold", [false, false], vec![0])] {
            let mut w = TraceReplay::from_records("t".into(), &recs).unwrap();
            w.cold = cache == "cold";
            let mut env = super::super::common::testutil::FakeEnv::new(1);
            w.setup(&mut env).unwrap();
            assert_eq!(env.files.iter().map(|f| f.2).collect::<Vec<_>>(), populated, "{cache}");
            assert_eq!(env.on_disk, on_disk, "{cache}");
        }
    }
}
