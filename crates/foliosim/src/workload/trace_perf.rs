//! Converting perf's pipe stream into a trace (used by `foliosim record`).
//!
//! `perf record -o -` writes its events in the pipe format of
//! tools/perf/Documentation/perf.data-file-format.txt ("PERFILE2", then
//! records: the events' attributes, the tracing data, the samples). This
//! reads that stream as perf writes it, orders each round of events by
//! time as `perf script` would (a round ends at PERF_RECORD_FINISHED_ROUND;
//! events up to the latest time of the previous round are complete), and
//! turns them into the trace's records task by task, in one pass: no event
//! is kept once it is converted, nothing is parsed as text.
//!
//! The events (their fields are found by name in the tracepoints' format
//! files, `Formats`):
//! - exceptions:page_fault_user and page_fault_kernel (a user address
//!   touched by a system call): one access each, a store when the error
//!   code has its write bit, a fetch with its instruction bit;
//! - raw_syscalls:sys_enter/sys_exit: mmap, munmap, mremap, brk, mprotect,
//!   madvise become records; read/write-family calls become Read/Write of
//!   the file that filemap:mm_filemap_get_pages,
//!   filemap:mm_filemap_add_to_page_cache or writeback:writeback_dirty_folio
//!   named during the call (or that the fd named before); wait4 that
//!   reaped a child a Wait. The time of every other call is the task's
//!   system time in its next Time record;
//! - task:task_newtask (its clone flags say fork, vfork or thread),
//!   sched:sched_process_exec (and the PERF_RECORD_MMAP2 records of the
//!   new image: its segments, bss, stack, ld.so, vDSO),
//!   sched:sched_process_exit;
//! - PERF_RECORD_SWITCH (`--switch-events`): when each task runs, so the
//!   time between two of its records is its own CPU time, user time
//!   outside system calls and system time inside.
//!
//! The recorded command runs under a wrapper (`foliosim record`'s, which
//! disables THP for the tree and reports the tree's rusage): the first
//! task is the wrapper, its first child the recorded command, whose
//! records start at its first exec.

use super::trace_format::{Record, TraceWriter, FILE_CREATED, K_IFETCH, K_LOAD, K_STORE, WAIT_NOHANG};
use super::trace_ranges::KnownRanges;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::io::{BufReader, Read, Write};

// ---------------------------------------------------------------- formats --

/// Where a tracepoint's field lies in its raw record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Field {
    pub off: usize,
    pub size: usize,
}

/// The tracepoints the converter reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tp {
    FaultUser,
    FaultKernel,
    SysEnter,
    SysExit,
    Exec,
    Exit,
    NewTask,
    GetPages,
    AddPage,
    Dirty,
    MapPages,
}

/// Each tracepoint's name and the fields the converter reads, in order.
pub const TRACEPOINTS: &[(Tp, &str, &[&str])] = &[
    (Tp::FaultUser, "exceptions:page_fault_user", &["address", "error_code"]),
    (Tp::FaultKernel, "exceptions:page_fault_kernel", &["address", "error_code"]),
    (Tp::SysEnter, "raw_syscalls:sys_enter", &["id", "args"]),
    (Tp::SysExit, "raw_syscalls:sys_exit", &["id", "ret"]),
    (Tp::Exec, "sched:sched_process_exec", &["filename"]),
    (Tp::Exit, "sched:sched_process_exit", &["pid"]),
    (Tp::NewTask, "task:task_newtask", &["pid", "clone_flags"]),
    (Tp::GetPages, "filemap:mm_filemap_get_pages", &["i_ino", "s_dev", "index", "last_index"]),
    (Tp::AddPage, "filemap:mm_filemap_add_to_page_cache", &["i_ino", "s_dev", "index"]),
    (Tp::Dirty, "writeback:writeback_dirty_folio", &["ino", "index"]),
    (Tp::MapPages, "filemap:mm_filemap_map_pages", &["i_ino", "s_dev", "index", "last_index"]),
];

/// The tracepoints' ids and field positions on the recording kernel.
#[derive(Clone, Debug, Default)]
pub struct Formats {
    by_id: HashMap<u16, (Tp, Vec<Field>)>,
}

impl Formats {
    /// Read them from tracefs (`/sys/kernel/tracing`): `events/SYS/NAME/id`
    /// and `format`.
    pub fn from_tracefs(dir: &std::path::Path) -> Result<Formats, String> {
        let mut f = Formats::default();
        for &(tp, name, _) in TRACEPOINTS {
            let (sys, ev) = name.split_once(':').unwrap_or(("", name));
            let d = dir.join("events").join(sys).join(ev);
            let read = |n: &str| std::fs::read_to_string(d.join(n)).map_err(|e| format!("tracepoint {name}: {}: {e}", d.join(n).display()));
            let id = read("id")?.trim().parse::<u16>().map_err(|e| format!("tracepoint {name}: bad id: {e}"))?;
            f.add(tp, id, &read("format")?)?;
        }
        Ok(f)
    }

    /// Add tracepoint `tp` with id `id` and the text of its format file.
    pub fn add(&mut self, tp: Tp, id: u16, format: &str) -> Result<(), String> {
        let (_, name, names) = TRACEPOINTS.iter().find(|t| t.0 == tp).copied().ok_or("unknown tracepoint")?;
        let mut fields = Vec::new();
        for want in names {
            let f = format
                .lines()
                .filter_map(|l| {
                    let l = l.trim();
                    let decl = l.strip_prefix("field:")?.split(';').next()?;
                    let fname = decl.trim().rsplit(|c: char| c.is_whitespace() || c == '*').next()?;
                    let fname = fname.split('[').next()?;
                    let num = |key: &str| l.split(key).nth(1)?.split(';').next()?.trim().parse::<usize>().ok();
                    (fname == *want).then_some(Field { off: num("offset:")?, size: num("size:")? })
                })
                .next()
                .ok_or_else(|| format!("tracepoint {name}: no field {want} in its format"))?;
            fields.push(f);
        }
        self.by_id.insert(id, (tp, fields));
        Ok(())
    }
}

fn le(b: &[u8], off: usize, size: usize) -> u64 {
    let mut v = [0u8; 8];
    let n = size.min(8);
    if let Some(s) = b.get(off..off + n) {
        v[..n].copy_from_slice(s);
    }
    u64::from_le_bytes(v)
}

// ----------------------------------------------------------------- stream --

const PERF_RECORD_MMAP2: u32 = 10;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_RECORD_SWITCH: u32 = 14;
const PERF_RECORD_LOST_SAMPLES: u32 = 13;
const PERF_RECORD_HEADER_ATTR: u32 = 64;
const PERF_RECORD_HEADER_TRACING_DATA: u32 = 66;
const PERF_RECORD_FINISHED_ROUND: u32 = 68;
const PERF_RECORD_MISC_SWITCH_OUT: u16 = 0x2000;
const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;

const S_IP: u64 = 1 << 0;
const S_TID: u64 = 1 << 1;
const S_TIME: u64 = 1 << 2;
const S_ADDR: u64 = 1 << 3;
const S_READ: u64 = 1 << 4;
const S_CALLCHAIN: u64 = 1 << 5;
const S_ID: u64 = 1 << 6;
const S_CPU: u64 = 1 << 7;
const S_PERIOD: u64 = 1 << 8;
const S_STREAM_ID: u64 = 1 << 9;
const S_RAW: u64 = 1 << 10;
const S_IDENTIFIER: u64 = 1 << 16;

/// One event, decoded.
#[derive(Clone, Debug)]
enum Ev {
    Fault {
        addr: u64,
        err: u64,
        kernel: bool,
    },
    SysEnter {
        id: u64,
        args: [u64; 6],
    },
    SysExit {
        id: u64,
        ret: i64,
    },
    Exec {
        filename: String,
    },
    Exit,
    NewTask {
        child: u32,
        flags: u64,
    },
    /// A page-cache lookup, fill or dirtying of (dev, ino) from page lo
    /// (dev None: writeback gives no device).
    FilePages {
        dev: Option<u32>,
        ino: u64,
        lo: u64,
        fill: bool,
    },
    /// Fault-around mapped the cached pages lo..=hi of (dev, ino).
    MapPages {
        dev: u32,
        ino: u64,
        lo: u64,
        hi: u64,
    },
    Mmap2(Box<Mmap2>),
    Switch {
        out: bool,
    },
}

#[derive(Clone, Debug)]
struct Mmap2 {
    addr: u64,
    len: u64,
    pgoff: u64,
    /// (dev, ino), None for anonymous and special mappings.
    file: Option<(u32, u64)>,
    prot: u32,
    flags: u32,
    name: String,
}

#[derive(Debug)]
struct Timed {
    time: u64,
    seq: u64,
    tid: u32,
    ev: Ev,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.seq) == (o.time, o.seq)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // A min-heap on (time, arrival).
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

/// Reads perf's pipe stream and hands its events to the converter in time order.
struct PerfStream<R: Read> {
    r: BufReader<R>,
    sample_type: Option<u64>,
    heap: BinaryHeap<Timed>,
    seq: u64,
    /// Latest time seen; the latest at the end of the previous round; up
    /// to when events are complete.
    max_time: u64,
    round_max: u64,
    flush_limit: u64,
    lost: u64,
    records: u64,
    body: Vec<u8>,
}

fn perr(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        "perf's stream ends inside a record (perf was killed?)".into()
    } else {
        format!("cannot read perf's stream: {e}")
    }
}

impl<R: Read> PerfStream<R> {
    fn new(r: R) -> Result<Self, String> {
        let mut r = BufReader::with_capacity(1 << 20, r);
        let mut h = [0u8; 16];
        r.read_exact(&mut h).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "perf wrote nothing (it failed before recording: see its message above)".to_string()
            } else {
                perr(e)
            }
        })?;
        if &h[..8] != b"PERFILE2" {
            return Err("not a perf pipe stream (bad magic; expected PERFILE2)".into());
        }
        if u64::from_le_bytes(h[8..16].try_into().unwrap_or_default()) != 16 {
            return Err("a perf.data file, not perf's pipe stream (record with `perf record -o -`)".into());
        }
        Ok(PerfStream {
            r,
            sample_type: None,
            heap: BinaryHeap::new(),
            seq: 0,
            max_time: 0,
            round_max: 0,
            flush_limit: 0,
            lost: 0,
            records: 0,
            body: Vec::with_capacity(4096),
        })
    }

    /// Read the next record; Ok(false) at the end of the stream.
    fn read_record(&mut self, fm: &Formats) -> Result<bool, String> {
        let mut h = [0u8; 8];
        match self.r.read(&mut h[..1]) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) => return Err(perr(e)),
        }
        self.r.read_exact(&mut h[1..]).map_err(perr)?;
        let typ = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_le_bytes([h[4], h[5]]);
        let size = u16::from_le_bytes([h[6], h[7]]) as usize;
        if size < 8 {
            return Err(format!("corrupt perf stream (a record of {size} bytes)"));
        }
        self.body.resize(size - 8, 0);
        self.r.read_exact(&mut self.body).map_err(perr)?;
        self.records += 1;
        match typ {
            PERF_RECORD_HEADER_ATTR => {
                // perf_event_attr: sample_type at offset 24.
                let st = le(&self.body, 24, 8);
                match self.sample_type {
                    None => self.sample_type = Some(st),
                    Some(s) if s != st => return Err(format!("perf's events differ in sample layout ({s:#x}, {st:#x})")),
                    _ => {}
                }
            }
            PERF_RECORD_HEADER_TRACING_DATA => {
                // Its data follows the record, padded to 8 bytes.
                let n = le(&self.body, 0, 4) as usize;
                std::io::copy(&mut (&mut self.r).take(n.next_multiple_of(8) as u64), &mut std::io::sink()).map_err(perr)?;
            }
            // perf read every CPU's buffer once in the round: an event not
            // yet seen is later than anything the previous round held
            // (tools/perf/util/ordered-events.c, OE_FLUSH__ROUND).
            PERF_RECORD_FINISHED_ROUND => {
                self.flush_limit = self.round_max;
                self.round_max = self.max_time;
            }
            PERF_RECORD_LOST => self.lost += le(&self.body, 8, 8),
            PERF_RECORD_LOST_SAMPLES => self.lost += le(&self.body, 0, 8),
            PERF_RECORD_SAMPLE => self.sample(fm)?,
            PERF_RECORD_MMAP2 | PERF_RECORD_SWITCH => self.other(typ, misc)?,
            _ => {}
        }
        Ok(true)
    }

    fn push(&mut self, time: u64, tid: u32, ev: Ev) {
        self.seq += 1;
        self.max_time = self.max_time.max(time);
        self.heap.push(Timed { time, seq: self.seq, tid, ev });
    }

    fn sample(&mut self, fm: &Formats) -> Result<(), String> {
        let st = self.sample_type.ok_or("corrupt perf stream (a sample before the events' attributes)")?;
        if st & (S_READ | S_CALLCHAIN) != 0 || st & (S_TID | S_TIME | S_RAW) != S_TID | S_TIME | S_RAW {
            return Err(format!("perf's samples lack tid, time or raw data, or carry more than this reads (sample_type {st:#x})"));
        }
        let b = &self.body;
        let mut o = 0;
        for bit in [S_IDENTIFIER, S_IP] {
            o += 8 * (st & bit != 0) as usize;
        }
        let tid = le(b, o + 4, 4) as u32;
        o += 8;
        let time = le(b, o, 8);
        o += 8;
        for bit in [S_ADDR, S_ID, S_STREAM_ID, S_CPU, S_PERIOD] {
            o += 8 * (st & bit != 0) as usize;
        }
        let n = le(b, o, 4) as usize;
        let raw = b.get(o + 4..o + 4 + n).ok_or("corrupt perf stream (raw data beyond its sample)")?;
        let Some((tp, f)) = fm.by_id.get(&(le(raw, 0, 2) as u16)) else { return Ok(()) };
        let g = |i: usize| le(raw, f[i].off, f[i].size);
        let ev = match tp {
            Tp::FaultUser | Tp::FaultKernel => Ev::Fault { addr: g(0), err: g(1), kernel: *tp == Tp::FaultKernel },
            Tp::SysEnter => {
                let mut args = [0u64; 6];
                for (i, a) in args.iter_mut().enumerate() {
                    *a = le(raw, f[1].off + 8 * i, 8);
                }
                Ev::SysEnter { id: g(0), args }
            }
            Tp::SysExit => Ev::SysExit { id: g(0), ret: g(1) as i64 },
            Tp::Exec => {
                // __data_loc: offset in the low 16 bits, length in the high.
                let loc = g(0);
                let (off, len) = ((loc & 0xffff) as usize, (loc >> 16 & 0xffff) as usize);
                let s = raw.get(off..off + len).unwrap_or_default();
                let s = s.split(|&c| c == 0).next().unwrap_or_default();
                Ev::Exec { filename: String::from_utf8_lossy(s).into_owned() }
            }
            Tp::Exit => Ev::Exit,
            Tp::NewTask => Ev::NewTask { child: g(0) as u32, flags: g(1) },
            Tp::GetPages => Ev::FilePages { dev: Some(g(1) as u32), ino: g(0), lo: g(2), fill: false },
            Tp::AddPage => Ev::FilePages { dev: Some(g(1) as u32), ino: g(0), lo: g(2), fill: true },
            Tp::Dirty => Ev::FilePages { dev: None, ino: g(0), lo: g(1), fill: true },
            Tp::MapPages => Ev::MapPages { dev: g(1) as u32, ino: g(0), lo: g(2), hi: g(3) },
        };
        self.push(time, tid, ev);
        Ok(())
    }

    /// A non-sample record, its pid, tid and time from the sample_id trailer.
    fn other(&mut self, typ: u32, misc: u16) -> Result<(), String> {
        let st = self.sample_type.ok_or("corrupt perf stream (a record before the events' attributes)")?;
        let trailer: usize = [S_TID, S_TIME, S_ID, S_STREAM_ID, S_CPU, S_IDENTIFIER].iter().map(|&b| 8 * (st & b != 0) as usize).sum();
        let b = &self.body;
        let Some(t0) = b.len().checked_sub(trailer) else { return Err("corrupt perf stream (a record shorter than its trailer)".into()) };
        let (tid, time) = (le(b, t0 + 4, 4) as u32, le(b, t0 + 8, 8));
        let ev = if typ == PERF_RECORD_SWITCH {
            Ev::Switch { out: misc & PERF_RECORD_MISC_SWITCH_OUT != 0 }
        } else {
            let (addr, len, pgoff) = (le(b, 8, 8), le(b, 16, 8), le(b, 24, 8));
            let file = if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
                None
            } else {
                let (maj, min, ino) = (le(b, 32, 4) as u32, le(b, 36, 4) as u32, le(b, 40, 8));
                (ino != 0).then_some(((maj << 20) | min, ino))
            };
            let (prot, flags) = (le(b, 56, 4) as u32, le(b, 60, 4) as u32);
            let name = b.get(64..t0).unwrap_or_default();
            let name = String::from_utf8_lossy(name.split(|&c| c == 0).next().unwrap_or_default()).into_owned();
            Ev::Mmap2(Box::new(Mmap2 { addr, len, pgoff, file, prot, flags, name }))
        };
        self.push(time, tid, ev);
        Ok(())
    }

    /// The next event in time order, reading as much of the stream as it
    /// takes; None at its end.
    fn next(&mut self, fm: &Formats) -> Result<Option<Timed>, String> {
        loop {
            if self.heap.peek().is_some_and(|e| e.time <= self.flush_limit) {
                return Ok(self.heap.pop());
            }
            if !self.read_record(fm)? {
                return Ok(self.heap.pop());
            }
        }
    }
}

// -------------------------------------------------------------- converter --

const PAGE: u64 = 4096;
const TASK_SIZE: u64 = 0x0000_7fff_ffff_f000;
const CLONE_VM: u64 = 0x100;
const CLONE_FILES: u64 = 0x400;
const CLONE_THREAD: u64 = 0x10000;
const MAP_ANONYMOUS: u64 = 0x20;

/// x86-64 system call numbers.
mod nr {
    pub const READ: u64 = 0;
    pub const WRITE: u64 = 1;
    pub const CLOSE: u64 = 3;
    pub const LSEEK: u64 = 8;
    pub const MMAP: u64 = 9;
    pub const MPROTECT: u64 = 10;
    pub const MUNMAP: u64 = 11;
    pub const BRK: u64 = 12;
    pub const PREAD64: u64 = 17;
    pub const PWRITE64: u64 = 18;
    pub const READV: u64 = 19;
    pub const WRITEV: u64 = 20;
    pub const MREMAP: u64 = 25;
    pub const MADVISE: u64 = 28;
    pub const DUP: u64 = 32;
    pub const DUP2: u64 = 33;
    pub const CLONE: u64 = 56;
    pub const FORK: u64 = 57;
    pub const VFORK: u64 = 58;
    pub const EXECVE: u64 = 59;
    pub const EXIT: u64 = 60;
    pub const WAIT4: u64 = 61;
    pub const FCNTL: u64 = 72;
    pub const GETPPID: u64 = 110;
    pub const EXIT_GROUP: u64 = 231;
    pub const WAITID: u64 = 247;
    pub const OPENAT: u64 = 257;
    pub const DUP3: u64 = 292;
    pub const PREADV: u64 = 295;
    pub const PWRITEV: u64 = 296;
    pub const EXECVEAT: u64 = 322;
    pub const PREADV2: u64 = 327;
    pub const PWRITEV2: u64 = 328;
    pub const PKEY_MPROTECT: u64 = 329;
    pub const CLONE3: u64 = 435;
}

/// A system call in progress.
#[derive(Debug, Default)]
struct Sys {
    id: u64,
    args: [u64; 6],
    /// Its CPU time so far.
    ns: u64,
    /// The file mapping a mmap made (MMAP2).
    mmap: Option<Mmap2>,
    /// The new image's mappings (execve).
    image: Vec<Mmap2>,
    /// The file a read or write touched: (dev, ino), its first page, filled.
    file: Option<(Option<u32>, u64, u64, bool)>,
    /// It created a process (fork: the model runs it, not its recorded time).
    forked: bool,
    /// Tracepoint events the call fired between its entry and its exit
    /// (kernel faults, page-cache events, a new task): each one's cost is
    /// in its recorded time.
    events: u64,
}

/// A pending run of faults.
#[derive(Clone, Copy, Debug)]
enum Faults {
    Access { kind: u8, page: u64, repeat: u64 },
    Run { kind: u8, page: u64, count: u64, step: i64 },
}

#[derive(Default)]
struct Task {
    space: usize,
    fds: usize,
    /// Records dropped (the wrapper; the command before its exec).
    skip: bool,
    /// Running since (switch-in time); on-CPU time not yet attributed.
    run_start: Option<u64>,
    cpu: u64,
    user: u64,
    sys: u64,
    sysc: Option<Sys>,
    faults: Option<Faults>,
    /// Pages no recorded call mapped, not yet written as Regions.
    regions: Vec<(u64, u64)>,
    exit_code: u64,
    exited: bool,
    /// The address of its last fault (fault-around maps around it).
    last_fault: u64,
}

/// A file VMA: its end, the file offset of its start, its file (dev, ino).
type FileVma = (u64, u64, (u32, u64));

#[derive(Clone, Default)]
struct Space {
    known: KnownRanges,
    /// File VMAs as the MMAP2 records describe them, by start.
    vmas: BTreeMap<u64, FileVma>,
}

impl Space {
    /// A file VMA [a, a+len) at file offset `off` (an MMAP2 record); an
    /// anonymous one (file None) only removes what it replaces.
    fn vma(&mut self, a: u64, len: u64, off: u64, file: Option<(u32, u64)>) {
        let end = a.saturating_add(len.next_multiple_of(PAGE));
        let hit: Vec<(u64, FileVma)> = self.vmas.range(..end).filter(|(_, v)| v.0 > a).map(|(&s, &v)| (s, v)).collect();
        for (s, (e, o, f)) in hit {
            self.vmas.remove(&s);
            if s < a {
                self.vmas.insert(s, (a, o, f));
            }
            if e > end {
                self.vmas.insert(end, (e, o + (end - s), f));
            }
        }
        if let Some(f) = file {
            self.vmas.insert(a, (end, off, f));
        }
    }

    /// The virtual page of file page `index` of `file` in the VMA holding `addr`.
    fn page_of(&self, addr: u64, file: (u32, u64), index: u64) -> Option<u64> {
        let (&s, &(e, off, f)) = self.vmas.range(..=addr).next_back()?;
        if addr >= e || f != file {
            return None;
        }
        let va = (s + (index * PAGE)).checked_sub(off)?;
        (va >= s && va < e).then_some(va >> 12)
    }
}

#[derive(Clone, Copy, Default)]
struct Fd {
    file: Option<u32>,
    pos: u64,
}

/// A file the trace declares.
struct FileInfo {
    path: Option<String>,
    /// Bytes the recording touched (the extent a replay needs).
    extent: u64,
    created: bool,
}

/// What the conversion found, returned as JSON.
#[derive(Debug, Default, serde::Serialize)]
pub struct PerfStats {
    pub perf_records: u64,
    pub events: u64,
    pub lost_events: u64,
    pub tasks: u64,
    pub processes: u64,
    pub threads: u64,
    pub faults: u64,
    pub kernel_faults: u64,
    /// Pages fault-around mapped (where it could not be turned off).
    pub around_pages: u64,
    pub fault_records: u64,
    pub syscalls: u64,
    /// CPU time in system calls, every one (replayed or not), as recorded.
    pub syscall_ns: u64,
    /// The recording's cost of one traced event inside a call: the median
    /// recorded time of the wrapper's getppid() calls (`probe_calls` of
    /// them), whose own work is a few loads (0: no probe, no correction).
    pub tracepoint_ns: u64,
    pub probe_calls: u64,
    /// What that cost took out of the calls the model does not run.
    pub tracepoint_removed_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    pub records: u64,
    pub files: u64,
    pub regions: u64,
}

struct Conv<W: Write> {
    w: TraceWriter<W>,
    st: PerfStats,
    tasks: HashMap<u32, Task>,
    spaces: Vec<Space>,
    fdt: Vec<BTreeMap<i64, Fd>>,
    files: Vec<FileInfo>,
    file_ids: HashMap<(u32, u64), u32>,
    /// The wrapper's tid, and the recorded command's.
    wrapper: Option<u32>,
    root: Option<u32>,
    /// The recorded times of the wrapper's probe calls (getppid).
    probe: Vec<u64>,
}

fn is_err(ret: i64) -> bool {
    (-4095..0).contains(&ret)
}

impl<W: Write> Conv<W> {
    fn werr(e: std::io::Error) -> String {
        format!("cannot write the trace: {e}")
    }

    fn task(&mut self, tid: u32) -> &mut Task {
        if !self.tasks.contains_key(&tid) {
            // A task first seen without its creation (the wrapper).
            self.spaces.push(Space::default());
            self.fdt.push(BTreeMap::new());
            let t = Task { space: self.spaces.len() - 1, fds: self.fdt.len() - 1, skip: true, ..Default::default() };
            if self.wrapper.is_none() {
                self.wrapper = Some(tid);
            }
            self.tasks.insert(tid, t);
        }
        self.tasks.get_mut(&tid).expect("inserted above")
    }

    /// Attribute the task's CPU time up to `now`: to its system call in
    /// progress, or to user time.
    fn tick(&mut self, tid: u32, now: u64) {
        let t = self.task(tid);
        if let Some(s) = t.run_start {
            t.cpu += now.saturating_sub(s);
            t.run_start = Some(now);
        }
        let d = std::mem::take(&mut t.cpu);
        match &mut t.sysc {
            Some(s) => s.ns += d,
            None => t.user += d,
        }
    }

    fn put(&mut self, tid: u32, r: Record) -> Result<(), String> {
        if self.tasks.get(&tid).is_some_and(|t| t.skip) {
            return Ok(());
        }
        self.st.records += 1;
        self.w.write_task(tid as u64, &r).map_err(Self::werr)
    }

    /// Write the task's pending faults (and the Regions they found), then
    /// its time since its previous record.
    fn flush(&mut self, tid: u32) -> Result<(), String> {
        let t = self.task(tid);
        let (faults, regions) = (t.faults.take(), std::mem::take(&mut t.regions));
        for (a, e) in regions {
            self.st.regions += 1;
            self.put(tid, Record::Region { addr: a, len: e - a })?;
        }
        if let Some(f) = faults {
            self.st.fault_records += 1;
            let r = match f {
                Faults::Access { kind, page, repeat } => Record::Access { kind, page, repeat },
                Faults::Run { kind, page, count, step } => Record::Run { kind, page, count, step },
            };
            self.put(tid, r)?;
        }
        self.flush_time(tid)
    }

    fn flush_time(&mut self, tid: u32) -> Result<(), String> {
        let t = self.task(tid);
        let (user, sys) = (std::mem::take(&mut t.user), std::mem::take(&mut t.sys));
        if user + sys == 0 || t.skip {
            return Ok(());
        }
        self.st.user_ns += user;
        self.st.sys_ns += sys;
        self.put(tid, Record::Time { user_ns: user, sys_ns: sys })
    }

    fn fault(&mut self, tid: u32, addr: u64, err: u64, kernel: bool) -> Result<(), String> {
        if addr >= TASK_SIZE || self.task(tid).skip {
            return Ok(());
        }
        if kernel {
            self.st.kernel_faults += 1;
        } else {
            self.st.faults += 1;
        }
        // x86 error code: bit 1 write, bit 4 instruction fetch.
        let kind = if err & 2 != 0 {
            K_STORE
        } else if err & 16 != 0 {
            K_IFETCH
        } else {
            K_LOAD
        };
        let page = addr >> 12;
        self.task(tid).last_fault = addr;
        let t = self.tasks.get(&tid);
        let space = t.map_or(0, |t| t.space);
        if !self.spaces[space].known.covered(page << 12) {
            self.spaces[space].known.know(page << 12, PAGE);
            let t = self.task(tid);
            match t.regions.last_mut() {
                Some(r) if r.0 == (page + 1) << 12 => r.0 = page << 12,
                Some(r) if r.1 == page << 12 => r.1 += PAGE,
                _ => t.regions.push((page << 12, (page + 1) << 12)),
            }
        }
        let t = self.task(tid);
        let next = match t.faults {
            Some(Faults::Access { kind: k, page: p, repeat }) if k == kind && p == page => {
                Some(Faults::Access { kind, page, repeat: repeat + 1 })
            }
            Some(Faults::Access { kind: k, page: p, repeat: 0 }) if k == kind && p.abs_diff(page) == 1 => {
                Some(Faults::Run { kind, page: p, count: 2, step: page as i64 - p as i64 })
            }
            Some(Faults::Run { kind: k, page: p, count, step }) if k == kind && p.wrapping_add((step * count as i64) as u64) == page => {
                Some(Faults::Run { kind, page: p, count: count + 1, step })
            }
            _ => None,
        };
        if let Some(f) = next {
            t.faults = Some(f);
            return Ok(());
        }
        // A new run: what came before it goes first.
        self.flush(tid)?;
        self.task(tid).faults = Some(Faults::Access { kind, page, repeat: 0 });
        Ok(())
    }

    fn file_index(&mut self, key: (u32, u64), path: Option<&str>, created: bool) -> u32 {
        if let Some(&i) = self.file_ids.get(&key) {
            if let (Some(p), None) = (path, &self.files[i as usize].path) {
                self.files[i as usize].path = Some(p.to_string());
            }
            return i;
        }
        let i = self.files.len() as u32;
        self.files.push(FileInfo { path: path.map(str::to_string), extent: 0, created });
        self.file_ids.insert(key, i);
        i
    }

    fn touch_file(&mut self, f: u32, end: u64) {
        let fi = &mut self.files[f as usize];
        fi.extent = fi.extent.max(end);
    }

    fn sys_enter(&mut self, tid: u32, id: u64, args: [u64; 6]) -> Result<(), String> {
        let t = self.task(tid);
        if matches!(id, nr::EXIT_GROUP | nr::EXIT) {
            t.exit_code = args[0] & 0xff;
        }
        t.sysc = Some(Sys { id, args, ..Default::default() });
        Ok(())
    }

    fn sys_exit(&mut self, tid: u32, id: u64, ret: i64) -> Result<(), String> {
        let Some(s) = self.task(tid).sysc.take() else { return Ok(()) };
        if s.id == nr::GETPPID && s.id == id && Some(tid) == self.wrapper && self.root.is_none() {
            self.probe.push(s.ns);
        }
        if s.id != id || self.task(tid).skip {
            return Ok(());
        }
        self.st.syscalls += 1;
        self.st.syscall_ns += s.ns;
        let modeled = self.syscall(tid, &s, ret)?;
        if !modeled {
            let ns = self.without_tracepoints(&s);
            self.task(tid).sys += ns;
        }
        Ok(())
    }

    /// A call's recorded time less what tracing it cost: the call's own
    /// entry and exit events, and every event it fired in between, each
    /// at the probe's cost (docs/validation.md, "What recording costs a
    /// system call"). The time between a call's two events holds the rest
    /// of the entry event's work after its timestamp and the exit event's
    /// work before its own: about one event's whole cost, as the probe's
    /// getppid() shows, whose own work is a few loads.
    fn without_tracepoints(&mut self, s: &Sys) -> u64 {
        if self.st.tracepoint_ns == 0 && !self.probe.is_empty() {
            self.probe.sort_unstable();
            self.st.tracepoint_ns = self.probe[self.probe.len() / 2];
            self.st.probe_calls = self.probe.len() as u64;
            self.probe = Vec::new();
        }
        let cost = self.st.tracepoint_ns.saturating_mul(1 + s.events).min(s.ns);
        self.st.tracepoint_removed_ns += cost;
        s.ns - cost
    }

    /// Records for a finished system call; true if the model runs it (its
    /// recorded time is not kept).
    fn syscall(&mut self, tid: u32, s: &Sys, ret: i64) -> Result<bool, String> {
        let a = s.args;
        let (space, fds) = {
            let t = self.task(tid);
            (t.space, t.fds)
        };
        match s.id {
            nr::OPENAT if !is_err(ret) => {
                self.fdt[fds].insert(ret, Fd::default());
            }
            nr::CLOSE if ret == 0 => {
                self.fdt[fds].remove(&(a[0] as i64));
            }
            nr::DUP | nr::FCNTL if !is_err(ret) && (s.id == nr::DUP || matches!(a[1], 0 | 1030)) => {
                let f = self.fdt[fds].get(&(a[0] as i64)).copied().unwrap_or_default();
                self.fdt[fds].insert(ret, f);
            }
            nr::DUP2 | nr::DUP3 if !is_err(ret) => {
                let f = self.fdt[fds].get(&(a[0] as i64)).copied().unwrap_or_default();
                self.fdt[fds].insert(ret, f);
            }
            nr::LSEEK if !is_err(ret) => {
                if let Some(f) = self.fdt[fds].get_mut(&(a[0] as i64)) {
                    f.pos = ret as u64;
                }
            }
            nr::FORK | nr::VFORK | nr::CLONE | nr::CLONE3 | nr::EXECVE | nr::EXECVEAT if !is_err(ret) => {
                // The records were made by task_newtask and the exec; a
                // process's fork and an exec are run by the model.
                return Ok(s.forked || matches!(s.id, nr::EXECVE | nr::EXECVEAT));
            }
            nr::WAIT4 if ret > 0 => {
                self.flush(tid)?;
                let flags = if a[2] & 1 != 0 { WAIT_NOHANG } else { 0 };
                self.put(tid, Record::Wait { child: ret as u64, flags })?;
                return Ok(true);
            }
            nr::WAITID if ret == 0 && a[3] & 1 == 0 && a[3] & 0x0100_0000 == 0 => {
                self.flush(tid)?;
                self.put(tid, Record::Wait { child: 0, flags: 0 })?;
                return Ok(true);
            }
            _ => {}
        }
        if is_err(ret) {
            return Ok(false);
        }
        let ret = ret as u64;
        let r = match s.id {
            nr::MMAP => {
                let file = match (&s.mmap, a[3] & MAP_ANONYMOUS) {
                    (Some(m), 0) => m.file.map(|k| {
                        let f = self.file_index(k, Some(&m.name), false);
                        self.touch_file(f, a[5].saturating_add(a[1]));
                        f
                    }),
                    _ => None,
                };
                self.spaces[space].known.know(ret, a[1]);
                Record::Mmap { addr: a[0], len: a[1], prot: a[2] as u32, flags: a[3] as u32, file, off: a[5], ret }
            }
            nr::MUNMAP => {
                self.spaces[space].known.forget(a[0], a[1]);
                self.spaces[space].vma(a[0], a[1], 0, None);
                Record::Munmap { addr: a[0], len: a[1] }
            }
            nr::MPROTECT | nr::PKEY_MPROTECT => Record::Mprotect { addr: a[0], len: a[1], prot: a[2] as u32 },
            nr::MADVISE => Record::Madvise { addr: a[0], len: a[1], advice: a[2] as u32 },
            nr::BRK => {
                self.spaces[space].known.brk(ret);
                Record::Brk { addr: a[0], ret }
            }
            nr::MREMAP => {
                self.spaces[space].known.forget(a[0], a[1]);
                self.spaces[space].known.know(ret, a[2]);
                Record::Mremap { addr: a[0], old_len: a[1], new_len: a[2], flags: a[3] as u32, ret }
            }
            nr::READ
            | nr::READV
            | nr::PREAD64
            | nr::PREADV
            | nr::PREADV2
            | nr::WRITE
            | nr::WRITEV
            | nr::PWRITE64
            | nr::PWRITEV
            | nr::PWRITEV2 => {
                let write = matches!(s.id, nr::WRITE | nr::WRITEV | nr::PWRITE64 | nr::PWRITEV | nr::PWRITEV2);
                let positioned = matches!(s.id, nr::PREAD64 | nr::PREADV | nr::PREADV2 | nr::PWRITE64 | nr::PWRITEV | nr::PWRITEV2);
                let fd = a[0] as i64;
                // The file the page cache named during the call, else the one the fd had.
                let named = s.file.and_then(|(dev, ino, _, fill)| {
                    let key = match dev {
                        Some(d) => Some((d, ino)),
                        None => self.file_ids.keys().find(|k| k.1 == ino).copied(),
                    }?;
                    Some(self.file_index(key, None, write && fill))
                });
                let ent = self.fdt[fds].entry(fd).or_default();
                if let Some(f) = named {
                    ent.file = Some(f);
                }
                let Some(file) = ent.file else { return Ok(false) };
                let off = if positioned { a[3] } else { ent.pos };
                if !positioned {
                    ent.pos = off + ret;
                }
                if ret == 0 {
                    return Ok(false);
                }
                self.touch_file(file, off + ret);
                if write {
                    Record::Write { file, off, len: ret }
                } else {
                    Record::Read { file, off, len: ret }
                }
            }
            _ => return Ok(false),
        };
        self.flush(tid)?;
        self.put(tid, r)?;
        Ok(true)
    }

    fn new_task(&mut self, parent: u32, child: u32, flags: u64) -> Result<(), String> {
        let (pspace, pfds, pskip) = {
            let p = self.task(parent);
            (p.space, p.fds, p.skip)
        };
        let space = if flags & CLONE_VM != 0 {
            pspace
        } else {
            self.spaces.push(self.spaces[pspace].clone());
            self.spaces.len() - 1
        };
        let fds = if flags & CLONE_FILES != 0 {
            pfds
        } else {
            self.fdt.push(self.fdt[pfds].clone());
            self.fdt.len() - 1
        };
        // The wrapper's first child is the recorded command: it starts at its exec.
        let skip = if pskip && Some(parent) == self.wrapper && self.root.is_none() {
            self.root = Some(child);
            self.w.write_global(&Record::Root { tid: child as u64 }).map_err(Self::werr)?;
            true
        } else {
            pskip
        };
        self.tasks.insert(child, Task { space, fds, skip, ..Default::default() });
        let counted = !pskip as u64;
        self.st.tasks += counted;
        let r = if flags & CLONE_THREAD != 0 {
            self.st.threads += counted;
            Record::Clone { child: child as u64 }
        } else {
            self.st.processes += counted;
            if flags & CLONE_VM != 0 {
                Record::Vfork { child: child as u64 }
            } else {
                if let Some(s) = &mut self.task(parent).sysc {
                    s.forked = true;
                }
                Record::Fork { child: child as u64 }
            }
        };
        self.flush(parent)?;
        self.put(parent, r)
    }

    /// The task exec'd `filename`: its new image from the MMAP2 records
    /// the exec made.
    fn exec(&mut self, tid: u32, filename: &str) -> Result<(), String> {
        let image = self.task(tid).sysc.as_mut().map(|s| std::mem::take(&mut s.image)).unwrap_or_default();
        self.flush(tid)?;
        let root_starts = Some(tid) == self.root && self.task(tid).skip;
        if root_starts {
            self.task(tid).skip = false;
        }
        let mut sp = Space::default();
        for m in &image {
            sp.vma(m.addr, m.len, m.pgoff, m.file);
        }
        self.spaces.push(sp);
        let space = self.spaces.len() - 1;
        self.task(tid).space = space;
        let Some(main) = image.iter().find(|m| m.file.is_some()).and_then(|m| m.file) else {
            return Ok(()); // no ELF image seen: its faults become Regions
        };
        let path = image.iter().find(|m| m.file == Some(main)).map(|m| m.name.clone()).unwrap_or_else(|| filename.to_string());
        let mut own: Vec<&Mmap2> = image.iter().filter(|m| m.file == Some(main)).collect();
        own.sort_by_key(|m| m.addr);
        let vaddr = own[0].addr;
        let end = own.iter().map(|m| m.addr + m.len).max().unwrap_or(vaddr);
        let (text, data, data_off) = match own.iter().find(|m| m.prot & 2 != 0) {
            Some(d) => (d.addr - vaddr, end - d.addr, d.pgoff),
            None => (end - vaddr, 0, 0),
        };
        let bss = image.iter().find(|m| m.file.is_none() && m.addr == end && m.name == "//anon").map_or(0, |m| m.len);
        let file = self.file_index(main, Some(&path), false);
        self.touch_file(file, (text + data).max(data_off + data));
        self.put(tid, Record::Exec { file, vaddr, text, data, data_off, bss })?;
        self.spaces[space].known.know(vaddr, text + data + bss);
        for m in &image {
            if m.file == Some(main) || (m.file.is_none() && m.addr == end && bss > 0) {
                continue;
            }
            match m.file {
                Some(k) => {
                    let f = self.file_index(k, Some(&m.name), false);
                    self.touch_file(f, m.pgoff + m.len);
                    self.put(
                        tid,
                        Record::Mmap { addr: 0, len: m.len, prot: m.prot, flags: m.flags, file: Some(f), off: m.pgoff, ret: m.addr },
                    )?;
                }
                None => {
                    self.st.regions += 1;
                    self.put(tid, Record::Region { addr: m.addr, len: m.len })?;
                }
            }
            self.spaces[space].known.know(m.addr, m.len);
        }
        Ok(())
    }

    /// Fault-around mapped file pages lo..=hi around the task's last fault:
    /// the pages besides the faulting one, as Around records.
    fn around(&mut self, tid: u32, file: (u32, u64), lo: u64, hi: u64) -> Result<(), String> {
        let t = self.task(tid);
        if t.skip || hi < lo || hi - lo > 512 {
            return Ok(());
        }
        let (space, fault) = (t.space, t.last_fault >> 12);
        let sp = &self.spaces[space];
        let Some(first) = sp.page_of(fault << 12, file, lo) else { return Ok(()) };
        let count = hi - lo + 1;
        // The faulting page is the fault's own record.
        let pieces = [(first, fault.saturating_sub(first).min(count)), (fault + 1, (first + count).saturating_sub(fault + 1))];
        self.flush(tid)?;
        for (page, n) in pieces {
            if n > 0 && n <= count {
                self.st.around_pages += n;
                self.put(tid, Record::Around { page, count: n })?;
            }
        }
        Ok(())
    }

    fn exit(&mut self, tid: u32) -> Result<(), String> {
        self.flush(tid)?;
        let t = self.task(tid);
        if let Some(s) = t.sysc.take() {
            self.st.syscall_ns += s.ns; // exit_group's, which never returns
        }
        let t = self.task(tid);
        t.exited = true;
        let code = t.exit_code;
        self.put(tid, Record::Exit { code })?;
        self.w.flush_task(tid as u64).map_err(Self::werr)
    }

    fn event(&mut self, e: Timed) -> Result<(), String> {
        self.st.events += 1;
        let tid = e.tid;
        if let Ev::Switch { out: false } = e.ev {
            self.task(tid).run_start = Some(e.time);
            return Ok(());
        }
        // A task's first event while it runs starts its clock.
        let t = self.task(tid);
        if t.run_start.is_none() && !matches!(e.ev, Ev::Switch { .. }) {
            t.run_start = Some(e.time);
        }
        self.tick(tid, e.time);
        if matches!(
            e.ev,
            Ev::Fault { kernel: true, .. } | Ev::FilePages { .. } | Ev::MapPages { .. } | Ev::NewTask { .. } | Ev::Exec { .. }
        ) {
            if let Some(s) = &mut self.task(tid).sysc {
                s.events += 1;
            }
        }
        match e.ev {
            Ev::Switch { .. } => self.task(tid).run_start = None,
            Ev::Fault { addr, err, kernel } => self.fault(tid, addr, err, kernel)?,
            Ev::SysEnter { id, args } => self.sys_enter(tid, id, args)?,
            Ev::SysExit { id, ret } => self.sys_exit(tid, id, ret)?,
            Ev::NewTask { child, flags } => self.new_task(tid, child, flags)?,
            Ev::Exec { filename } => self.exec(tid, &filename)?,
            Ev::Exit => self.exit(tid)?,
            Ev::FilePages { dev, ino, lo, fill, .. } => {
                if let Some(s) = &mut self.task(tid).sysc {
                    if s.file.is_none() {
                        s.file = Some((dev, ino, lo, fill));
                    }
                }
            }
            Ev::MapPages { dev, ino, lo, hi } => self.around(tid, (dev, ino), lo, hi)?,
            Ev::Mmap2(m) => {
                let t = self.task(tid);
                let space = t.space;
                match &mut t.sysc {
                    // The new image's: its space is made at the exec.
                    Some(s) if matches!(s.id, nr::EXECVE | nr::EXECVEAT) => s.image.push(*m),
                    sysc => {
                        if let Some(s) = sysc.as_mut().filter(|s| s.id == nr::MMAP) {
                            s.mmap = Some((*m).clone());
                        }
                        self.spaces[space].vma(m.addr, m.len, m.pgoff, m.file);
                    }
                }
            }
        }
        Ok(())
    }

    /// Declare the files (with what was learnt of their sizes) and the
    /// summary, and end the trace.
    fn finish(mut self, summary: serde_json::Value) -> Result<(W, PerfStats), String> {
        let tids: Vec<u32> = self.tasks.iter().filter(|(_, t)| !t.exited).map(|(&k, _)| k).collect();
        for tid in tids {
            self.flush(tid)?;
        }
        for f in std::mem::take(&mut self.files) {
            let size = f.path.as_deref().and_then(|p| std::fs::metadata(p).ok()).map_or(0, |m| m.len()).max(f.extent);
            let path = f.path.unwrap_or_else(|| "(a file read or written, never mapped)".into());
            self.w.write_global(&Record::File { size, path, flags: if f.created { FILE_CREATED } else { 0 } }).map_err(Self::werr)?;
        }
        self.w.write_global(&Record::Summary { json: summary.to_string() }).map_err(Self::werr)?;
        let w = self.w.finish().map_err(Self::werr)?;
        Ok((w, self.st))
    }
}

/// Convert perf's pipe stream `input` into a trace written to `out`.
/// `status` is what the wrapper reported at the end (exit status, the
/// tree's rusage), read once the stream has ended; it goes into the
/// trace's Summary with what the conversion counted.
pub fn convert<R: Read, W: Write>(
    input: R,
    out: W,
    meta_json: &str,
    fm: &Formats,
    status: impl FnOnce() -> serde_json::Value,
) -> Result<(W, PerfStats), String> {
    let mut w = TraceWriter::new(out).map_err(Conv::<W>::werr)?;
    w.write_global(&Record::Meta { json: meta_json.to_string() }).map_err(Conv::<W>::werr)?;
    let mut c = Conv {
        w,
        st: PerfStats::default(),
        tasks: HashMap::new(),
        spaces: Vec::new(),
        fdt: Vec::new(),
        files: Vec::new(),
        file_ids: HashMap::new(),
        wrapper: None,
        root: None,
        probe: Vec::new(),
    };
    let mut s = PerfStream::new(input)?;
    while let Some(e) = s.next(fm)? {
        c.event(e)?;
    }
    c.st.perf_records = s.records;
    c.st.lost_events = s.lost;
    if c.root.is_none() {
        return Err("the recording holds no process of the command (did perf trace the wrapper?)".into());
    }
    c.st.files = c.files.len() as u64;
    let mut sum = status();
    let rusage_sys_ns = sum.get("rusage").and_then(|r| r.get("sys_ns")).and_then(|v| v.as_u64());
    // The kernel time of a fault: the tree's system time outside system
    // calls, over its faults (the time a fault's handler ran is counted in
    // the user time after it).
    let fault_ns = rusage_sys_ns.filter(|_| c.st.faults > 0).map(|s| s.saturating_sub(c.st.syscall_ns) as f64 / c.st.faults as f64);
    if let Some(m) = sum.as_object_mut() {
        m.insert("fault_kernel_ns".into(), fault_ns.map_or(serde_json::Value::Null, serde_json::Value::from));
        m.insert("converter".into(), serde_json::to_value(&c.st).unwrap_or_default());
    }
    c.finish(sum)
}

/// Convert the stream read from `input_path` (perf's stdout as
/// /proc/self/fd/N, or a saved stream) into the trace `out_path`; the
/// wrapper's status file is read after the stream ends. Statistics as JSON.
pub fn convert_files_json(input_path: &str, out_path: &str, meta_json: &str, status_path: &str, tracefs: &str) -> Result<String, String> {
    let fm = Formats::from_tracefs(std::path::Path::new(tracefs))?;
    let input = std::fs::File::open(input_path).map_err(|e| format!("{input_path}: {e}"))?;
    let o = std::fs::File::create(out_path).map_err(|e| format!("{out_path}: {e}"))?;
    let status =
        || std::fs::read_to_string(status_path).ok().and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_else(|| serde_json::json!({}));
    let (o, st) = convert(input, std::io::BufWriter::with_capacity(1 << 20, o), meta_json, &fm, status)?;
    let f = o.into_inner().map_err(|e| format!("{out_path}: {e}"))?;
    f.sync_all().map_err(|e| format!("{out_path}: {e}"))?;
    serde_json::to_string(&st).map_err(|e| e.to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::workload::trace_format::Trace;

    /// This kernel's (6.18) format files, as far as the converter reads them.
    pub(crate) fn formats() -> Formats {
        let mut f = Formats::default();
        let fault = "\tfield:unsigned long address;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:unsigned long ip;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:unsigned long error_code;\toffset:24;\tsize:8;\tsigned:0;\n";
        f.add(Tp::FaultUser, 190, fault).unwrap();
        f.add(Tp::FaultKernel, 191, fault).unwrap();
        f.add(
            Tp::SysEnter,
            365,
            "\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n",
        )
        .unwrap();
        f.add(Tp::SysExit, 366, "\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n")
            .unwrap();
        f.add(
            Tp::Exec,
            369,
            "\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n",
        )
        .unwrap();
        f.add(
            Tp::Exit,
            370,
            "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n",
        )
        .unwrap();
        f.add(
            Tp::NewTask,
            205,
            "\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:u64 clone_flags;\toffset:32;\tsize:8;\tsigned:0;\n",
        )
        .unwrap();
        f.add(
            Tp::GetPages,
            599,
            "\tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:unsigned long last_index;\toffset:32;\tsize:8;\tsigned:0;\n",
        )
        .unwrap();
        f.add(
            Tp::AddPage,
            600,
            "\tfield:unsigned long pfn;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:unsigned long i_ino;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:dev_t s_dev;\toffset:32;\tsize:4;\tsigned:0;\n",
        )
        .unwrap();
        f.add(
            Tp::MapPages,
            601,
            "\tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:unsigned long last_index;\toffset:32;\tsize:8;\tsigned:0;\n",
        )
        .unwrap();
        f.add(Tp::Dirty, 1009, "\tfield:char name[32];\toffset:8;\tsize:32;\tsigned:0;\n\tfield:ino_t ino;\toffset:40;\tsize:8;\tsigned:0;\n\tfield:unsigned long index;\toffset:48;\tsize:8;\tsigned:0;\n")
            .unwrap();
        f
    }

    /// A perf pipe stream written by hand: sample_type IP|TID|TIME|ID|CPU|PERIOD|RAW, sample_id_all.
    pub(crate) struct Perf {
        pub b: Vec<u8>,
    }

    const ST: u64 = S_IP | S_TID | S_TIME | S_ID | S_CPU | S_PERIOD | S_RAW;

    impl Perf {
        pub fn new() -> Perf {
            let mut b = b"PERFILE2".to_vec();
            b.extend(16u64.to_le_bytes());
            let mut p = Perf { b };
            let mut attr = vec![0u8; 128];
            attr[4..8].copy_from_slice(&128u32.to_le_bytes());
            attr[24..32].copy_from_slice(&ST.to_le_bytes());
            attr.extend(7u64.to_le_bytes()); // its id
            p.rec(PERF_RECORD_HEADER_ATTR, 0, &attr);
            // Tracing data: out of band after the record.
            p.rec(PERF_RECORD_HEADER_TRACING_DATA, 0, &[5, 0, 0, 0, 0, 0, 0, 0]);
            p.b.extend([1, 2, 3, 4, 5, 0, 0, 0]);
            p
        }
        fn rec(&mut self, typ: u32, misc: u16, body: &[u8]) {
            self.b.extend(typ.to_le_bytes());
            self.b.extend(misc.to_le_bytes());
            self.b.extend(((body.len() + 8) as u16).to_le_bytes());
            self.b.extend(body);
        }
        fn trailer(pid: u32, tid: u32, t: u64) -> Vec<u8> {
            let mut v = Vec::new();
            v.extend(pid.to_le_bytes());
            v.extend(tid.to_le_bytes());
            v.extend(t.to_le_bytes());
            v.extend(7u64.to_le_bytes());
            v.extend([0u8; 8]);
            v
        }
        /// A tracepoint sample of `tid` at `t`: `fields` are (offset, size, value).
        pub fn tp(&mut self, tid: u32, t: u64, id: u16, fields: &[(usize, usize, u64)], tail: &[u8]) -> &mut Self {
            let mut raw = vec![0u8; 8];
            raw[..2].copy_from_slice(&id.to_le_bytes());
            for &(off, size, v) in fields {
                if raw.len() < off + size {
                    raw.resize(off + size, 0);
                }
                raw[off..off + size].copy_from_slice(&v.to_le_bytes()[..size]);
            }
            raw.extend(tail);
            while !(raw.len() + 4).is_multiple_of(8) {
                raw.push(0);
            }
            let mut body = Vec::new();
            body.extend(0u64.to_le_bytes()); // ip
            body.extend(tid.to_le_bytes()); // pid (tgid: not used)
            body.extend(tid.to_le_bytes());
            body.extend(t.to_le_bytes());
            body.extend(7u64.to_le_bytes());
            body.extend([0u8; 8]); // cpu
            body.extend(1u64.to_le_bytes()); // period
            body.extend((raw.len() as u32).to_le_bytes());
            body.extend(raw);
            self.rec(PERF_RECORD_SAMPLE, 0, &body);
            self
        }
        pub fn fault(&mut self, tid: u32, t: u64, addr: u64, err: u64) -> &mut Self {
            self.tp(tid, t, 190, &[(8, 8, addr), (24, 8, err)], &[])
        }
        pub fn enter(&mut self, tid: u32, t: u64, id: u64, args: &[u64]) -> &mut Self {
            let mut f = vec![(8, 8, id)];
            for (i, &a) in args.iter().enumerate() {
                f.push((16 + 8 * i, 8, a));
            }
            f.push((56, 8, args.get(5).copied().unwrap_or(0)));
            self.tp(tid, t, 365, &f, &[])
        }
        pub fn exit(&mut self, tid: u32, t: u64, id: u64, ret: i64) -> &mut Self {
            self.tp(tid, t, 366, &[(8, 8, id), (16, 8, ret as u64)], &[])
        }
        pub fn newtask(&mut self, parent: u32, t: u64, child: u32, flags: u64) -> &mut Self {
            self.tp(parent, t, 205, &[(8, 4, child as u64), (32, 8, flags)], &[])
        }
        pub fn exec(&mut self, tid: u32, t: u64, name: &str) -> &mut Self {
            let loc = 20u64 | ((name.len() as u64 + 1) << 16);
            let mut tail = vec![0u8; 4];
            tail.extend(name.as_bytes());
            tail.push(0);
            self.tp(tid, t, 369, &[(8, 4, loc), (12, 4, tid as u64)], &tail)
        }
        pub fn task_exit(&mut self, tid: u32, t: u64) -> &mut Self {
            self.tp(tid, t, 370, &[(24, 4, tid as u64)], &[])
        }
        pub fn pages(&mut self, tid: u32, t: u64, dev: u32, ino: u64, lo: u64, hi: u64) -> &mut Self {
            self.tp(tid, t, 599, &[(8, 8, ino), (16, 4, dev as u64), (24, 8, lo), (32, 8, hi)], &[])
        }
        pub fn map_pages(&mut self, tid: u32, t: u64, dev: u32, ino: u64, lo: u64, hi: u64) -> &mut Self {
            self.tp(tid, t, 601, &[(8, 8, ino), (16, 4, dev as u64), (24, 8, lo), (32, 8, hi)], &[])
        }
        pub fn add_page(&mut self, tid: u32, t: u64, dev: u32, ino: u64, index: u64) -> &mut Self {
            self.tp(tid, t, 600, &[(16, 8, ino), (24, 8, index), (32, 4, dev as u64)], &[])
        }
        pub fn switch(&mut self, tid: u32, t: u64, out: bool) -> &mut Self {
            let tr = Self::trailer(tid, tid, t);
            self.rec(PERF_RECORD_SWITCH, if out { PERF_RECORD_MISC_SWITCH_OUT } else { 0 }, &tr);
            self
        }
        /// A file mapping (dev 254:0) or, with ino 0, an anonymous one.
        #[allow(clippy::too_many_arguments)]
        pub fn mmap2(&mut self, tid: u32, t: u64, addr: u64, len: u64, pgoff: u64, ino: u64, prot: u32, name: &str) -> &mut Self {
            let mut body = Vec::new();
            body.extend(tid.to_le_bytes());
            body.extend(tid.to_le_bytes());
            for v in [addr, len, pgoff] {
                body.extend(v.to_le_bytes());
            }
            body.extend((if ino == 0 { 0u32 } else { 254 }).to_le_bytes());
            body.extend(0u32.to_le_bytes());
            body.extend(ino.to_le_bytes());
            body.extend(0u64.to_le_bytes());
            body.extend(prot.to_le_bytes());
            body.extend(2u32.to_le_bytes());
            body.extend(name.as_bytes());
            body.push(0);
            while body.len() % 8 != 0 {
                body.push(0);
            }
            body.extend(Self::trailer(tid, tid, t));
            self.rec(PERF_RECORD_MMAP2, 0, &body);
            self
        }
        pub fn round(&mut self) -> &mut Self {
            self.rec(PERF_RECORD_FINISHED_ROUND, 0, &[]);
            self
        }
    }

    pub(crate) fn convert_stream(b: &[u8], status: serde_json::Value) -> Result<(Trace, PerfStats), String> {
        let (out, st) = convert(b, Vec::new(), "{\"mode\":\"perf\"}", &formats(), || status)?;
        Ok((Trace::read(&out[..])?, st))
    }

    const DEV: u32 = 254 << 20;

    /// The wrapper (tid 10) forks the command (11), which execs /bin/prog
    /// and touches memory.
    fn wrapped() -> Perf {
        wrapped_with_probe(&[])
    }

    /// `wrapped`, the wrapper first making getppid() calls that take
    /// `probe` ns each (recordwrap's probe of the tracepoints' cost).
    fn wrapped_with_probe(probe: &[u64]) -> Perf {
        let mut p = Perf::new();
        p.switch(10, 100, false);
        for (i, &ns) in probe.iter().enumerate() {
            let t = 120 + 280 * i as u64;
            p.enter(10, t, nr::GETPPID, &[0; 6]).exit(10, t + ns.min(250), nr::GETPPID, 9);
        }
        p.fault(10, 1_100, 0x5555_0000_0000, 6) // the wrapper's own: dropped
            .enter(10, 1_200, nr::CLONE3, &[0; 6])
            .newtask(10, 1_300, 11, 0x0121_1100 & !CLONE_VM) // fork
            .exit(10, 1_400, nr::CLONE3, 11)
            .switch(10, 1_500, true)
            .switch(11, 2_000, false)
            .fault(11, 2_100, 0x5555_0000_1000, 6) // before its exec: dropped
            .enter(11, 2_200, nr::EXECVE, &[0; 6])
            .mmap2(11, 2_300, 0x7ffd_0000_0000, 0x21000, 0, 0, 3, "[stack]")
            .mmap2(11, 2_310, 0x40_0000, 0x1000, 0, 42, 1, "/bin/prog")
            .mmap2(11, 2_320, 0x40_1000, 0x2000, 0x1000, 42, 5, "/bin/prog")
            .mmap2(11, 2_330, 0x40_3000, 0x1000, 0x3000, 42, 3, "/bin/prog")
            .mmap2(11, 2_340, 0x40_4000, 0x2000, 0, 0, 3, "//anon")
            .mmap2(11, 2_350, 0x7f00_0000_0000, 0x30000, 0, 43, 5, "/lib/ld.so")
            .exec(11, 2_400, "/bin/prog")
            .exit(11, 2_500, nr::EXECVE, 0)
            .round();
        p
    }

    #[test]
    fn an_exec_becomes_the_image_and_the_wrapper_is_left_out() {
        let mut p = wrapped();
        p.fault(11, 3_000, 0x40_1234, 0x14).task_exit(11, 3_100).round();
        let (t, st) = convert_stream(&p.b, serde_json::json!({"status": 0})).unwrap();
        assert_eq!(t.root, Some(11));
        assert_eq!(t.tasks.len(), 1, "the wrapper writes nothing");
        let rs: Vec<Record> = t.task(11).unwrap().cursor().collect();
        assert_eq!(rs[0], Record::Exec { file: 0, vaddr: 0x40_0000, text: 0x3000, data: 0x1000, data_off: 0x3000, bss: 0x2000 });
        assert!(rs.contains(&Record::Region { addr: 0x7ffd_0000_0000, len: 0x21000 }));
        assert!(rs.contains(&Record::Mmap { addr: 0, len: 0x30000, prot: 5, flags: 2, file: Some(1), off: 0, ret: 0x7f00_0000_0000 }));
        assert!(rs.contains(&Record::Access { kind: K_IFETCH, page: 0x401, repeat: 0 }));
        assert_eq!(rs.last(), Some(&Record::Exit { code: 0 }));
        assert_eq!(t.files[0].1, "/bin/prog");
        assert_eq!(st.faults, 1, "the wrapper's and the command's before its exec are left out");
    }

    #[test]
    fn sequential_first_touches_are_one_run_and_time_is_cpu_time() {
        let mut p = wrapped();
        let a = 0x7f10_0000_0000u64;
        p.enter(11, 10_000, nr::MMAP, &[0, 64 << 12, 3, 0x22, u64::MAX, 0]).exit(11, 10_500, nr::MMAP, a as i64);
        // 16 pages up, 1 us apart, with the task off the CPU for 5 us in the middle.
        for i in 0..16u64 {
            let t = 20_000 + i * 1_000 + if i >= 8 { 5_000 } else { 0 };
            if i == 8 {
                p.switch(11, 27_500, true).switch(11, 32_500, false);
            }
            p.fault(11, t, a + i * 4096 + 8, 6);
        }
        // A fault on the run's last page again (a retry, a CoW) starts a new record.
        p.fault(11, 45_000, a + 15 * 4096, 6).enter(11, 46_000, nr::MUNMAP, &[a, 64 << 12]).exit(11, 46_400, nr::MUNMAP, 0);
        p.enter(11, 47_000, 102, &[0; 6]).exit(11, 47_300, 102, 0); // getuid: its time is kept
        p.task_exit(11, 50_000).round();
        let (t, _) = convert_stream(&p.b, serde_json::json!({})).unwrap();
        let rs: Vec<Record> = t
            .task(11)
            .unwrap()
            .cursor()
            .filter(|r| !matches!(r, Record::Region { .. } | Record::Mmap { .. } | Record::Exec { .. }))
            .collect();
        let after_mmap = rs.iter().position(|r| matches!(r, Record::Run { .. })).unwrap();
        assert_eq!(rs[after_mmap], Record::Run { kind: K_STORE, page: a >> 12, count: 16, step: 1 });
        // Before the run: user time from the mmap's return to the first fault.
        assert_eq!(rs[after_mmap - 1], Record::Time { user_ns: 9_500, sys_ns: 0 });
        // The run's own CPU time: 15 gaps of 1 us (the 5 us off the CPU left
        // out), then 5 us to the next fault.
        assert_eq!(rs[after_mmap + 1], Record::Time { user_ns: 15_000 + 5_000, sys_ns: 0 });
        assert_eq!(rs[after_mmap + 2], Record::Access { kind: K_STORE, page: (a >> 12) + 15, repeat: 0 });
        assert_eq!(rs[after_mmap + 3], Record::Time { user_ns: 1_000, sys_ns: 0 });
        assert_eq!(rs[after_mmap + 4], Record::Munmap { addr: a, len: 64 << 12 });
        // munmap's 400 ns are the model's; getuid's 300 ns are kept.
        assert_eq!(rs[after_mmap + 5], Record::Time { user_ns: 600 + 2_700, sys_ns: 300 });
    }

    #[test]
    fn reads_and_writes_name_their_file_and_offsets() {
        let mut p = wrapped();
        p.enter(11, 10_000, nr::OPENAT, &[0; 6]).exit(11, 10_100, nr::OPENAT, 3);
        p.enter(11, 11_000, nr::READ, &[3, 0, 8192, 0, 0, 0]).pages(11, 11_100, DEV, 77, 0, 1).exit(11, 11_200, nr::READ, 8192);
        // The next read of fd 3 names no page (cached): the fd knows the file.
        p.enter(11, 12_000, nr::READ, &[3, 0, 100, 0, 0, 0]).exit(11, 12_100, nr::READ, 100);
        p.enter(11, 13_000, nr::OPENAT, &[0; 6]).exit(11, 13_100, nr::OPENAT, 4);
        p.enter(11, 14_000, nr::WRITE, &[4, 0, 5000, 0, 0, 0]).add_page(11, 14_100, DEV, 78, 0).exit(11, 14_200, nr::WRITE, 5000);
        // A pipe: no page cache, nothing recorded.
        p.enter(11, 15_000, nr::WRITE, &[1, 0, 10, 0, 0, 0]).exit(11, 15_100, nr::WRITE, 10);
        p.enter(11, 16_000, nr::PREAD64, &[3, 0, 4096, 65536, 0, 0]).exit(11, 16_100, nr::PREAD64, 4096);
        p.task_exit(11, 20_000).round();
        let (t, _) = convert_stream(&p.b, serde_json::json!({})).unwrap();
        let io: Vec<Record> = t.task(11).unwrap().cursor().filter(|r| matches!(r, Record::Read { .. } | Record::Write { .. })).collect();
        assert_eq!(
            io,
            [
                Record::Read { file: 2, off: 0, len: 8192 },
                Record::Read { file: 2, off: 8192, len: 100 },
                Record::Write { file: 3, off: 0, len: 5000 },
                Record::Read { file: 2, off: 65536, len: 4096 },
            ]
        );
        assert_eq!(t.files[3].2, FILE_CREATED, "written first");
        assert_eq!(t.files[2].2, 0);
        assert_eq!(t.files[2].0, 65536 + 4096, "its extent");
    }

    #[test]
    fn children_threads_and_waits_are_records_of_their_parent() {
        let mut p = wrapped();
        p.enter(11, 10_000, nr::CLONE3, &[0; 6]).newtask(11, 10_100, 12, CLONE_VM | 0x4000).exit(11, 12_000, nr::CLONE3, 12);
        p.enter(11, 13_000, nr::CLONE3, &[0; 6]).newtask(11, 13_100, 13, CLONE_VM | CLONE_FILES | CLONE_THREAD).exit(
            11,
            13_200,
            nr::CLONE3,
            13,
        );
        p.switch(12, 10_200, false).fault(12, 10_300, 0x7ffd_0000_1000, 6).task_exit(12, 10_400);
        p.switch(13, 13_300, false).fault(13, 13_400, 0x7ffd_0000_2000, 6).task_exit(13, 13_500);
        p.enter(11, 14_000, nr::WAIT4, &[u64::MAX, 0, 1, 0, 0, 0]).exit(11, 14_100, nr::WAIT4, 12);
        p.task_exit(11, 20_000).round();
        let (t, st) = convert_stream(&p.b, serde_json::json!({})).unwrap();
        let rs: Vec<Record> = t.task(11).unwrap().cursor().collect();
        assert!(rs.contains(&Record::Vfork { child: 12 }));
        assert!(rs.contains(&Record::Clone { child: 13 }));
        assert!(rs.contains(&Record::Wait { child: 12, flags: WAIT_NOHANG }));
        assert_eq!((st.processes, st.threads), (1, 1));
        assert!(t.task(12).unwrap().cursor().any(|r| r == Record::Access { kind: K_STORE, page: 0x7_ffd0_0001, repeat: 0 }));
        // The vfork's and the thread's clone time are kept (the model runs no mm work for them).
        let sys: u64 = rs.iter().map(|r| if let Record::Time { sys_ns, .. } = r { *sys_ns } else { 0 }).sum();
        assert_eq!(sys, 2_000 + 200, "{rs:?}");
    }

    /// Where fault-around cannot be turned off, the pages it mapped around a
    /// fault are recovered from the window mm_filemap_map_pages names and
    /// the VMA's file offset (MMAP2).
    #[test]
    fn fault_around_pages_are_recovered() {
        let mut p = wrapped();
        // The text VMA: 0x401000.. at file offset 0x1000; a fetch from its
        // second page, and fault-around over file pages 0..=3 (the VMA has
        // pages 1 and 2 only: the window is clamped in the kernel; here, by the VMA).
        p.fault(11, 3_000, 0x40_2010, 0x14).map_pages(11, 3_010, DEV, 42, 1, 2).task_exit(11, 3_100).round();
        let (t, st) = convert_stream(&p.b, serde_json::json!({})).unwrap();
        let rs: Vec<Record> = t.task(11).unwrap().cursor().collect();
        let i = rs.iter().position(|r| *r == Record::Access { kind: K_IFETCH, page: 0x402, repeat: 0 }).unwrap();
        assert_eq!(rs[i + 1..].iter().find(|r| matches!(r, Record::Around { .. })), Some(&Record::Around { page: 0x401, count: 1 }));
        assert_eq!(st.around_pages, 1);
        assert_eq!(st.faults, 1, "fault-around is no fault");
    }

    #[test]
    fn events_of_a_round_are_taken_in_time_order() {
        let mut p = wrapped();
        // Written out of order within a round, as two CPUs' buffers are.
        p.fault(11, 30_000, 0x7ffd_0000_3000, 6).fault(11, 20_000, 0x7ffd_0000_2000, 6).round().task_exit(11, 40_000).round();
        let (t, _) = convert_stream(&p.b, serde_json::json!({})).unwrap();
        let faults: Vec<Record> = t.task(11).unwrap().cursor().filter(|r| matches!(r, Record::Run { .. })).collect();
        assert_eq!(faults, [Record::Run { kind: K_STORE, page: 0x7_ffd0_0002, count: 2, step: 1 }]);
    }

    #[test]
    fn the_fault_kernel_time_comes_from_the_rusage() {
        let mut p = wrapped();
        p.enter(11, 10_000, 102, &[0; 6]).exit(11, 15_000, 102, 0);
        p.fault(11, 16_000, 0x7ffd_0000_3000, 6).fault(11, 17_000, 0x7ffd_0000_5000, 6).task_exit(11, 20_000).round();
        let (t, _) = convert_stream(&p.b, serde_json::json!({"rusage": {"sys_ns": 9_300}})).unwrap();
        let s: serde_json::Value = serde_json::from_str(t.summary.as_deref().unwrap()).unwrap();
        // 9.3 us of system time, 5.3 us of it in calls (the exec's 300 ns,
        // getuid's 5 us): 4 us over the 2 faults.
        assert_eq!(s["fault_kernel_ns"], 2000.0);
    }

    #[test]
    fn the_tracepoints_cost_is_taken_out_of_the_calls_kept() {
        // The probe's calls take 90, 100 and 250 ns (one hit by an
        // interrupt): the median, 100 ns, is one event's cost.
        let mut p = wrapped_with_probe(&[90, 100, 250]);
        p.enter(11, 10_000, 102, &[0; 6]).exit(11, 13_000, 102, 0); // getuid: 3000 - 100
                                                                    // A read of an unknown fd, two page-cache events inside: 6000 - 3 x 100.
        p.enter(11, 20_000, nr::READ, &[9, 0, 8192, 0, 0, 0]).pages(11, 20_100, DEV, 77, 0, 1).add_page(11, 20_200, DEV, 77, 1).exit(
            11,
            26_000,
            nr::READ,
            0,
        );
        p.enter(11, 30_000, 102, &[0; 6]).exit(11, 30_050, 102, 0); // shorter than its cost: 0
                                                                    // The model's own call (munmap): its recorded time is not kept anyway.
        p.enter(11, 40_000, nr::MUNMAP, &[0x40_0000, 4096]).exit(11, 45_000, nr::MUNMAP, 0);
        p.task_exit(11, 50_000).round();
        let (t, st) = convert_stream(&p.b, serde_json::json!({})).unwrap();
        let sys: u64 = t.task(11).unwrap().cursor().map(|r| if let Record::Time { sys_ns, .. } = r { sys_ns } else { 0 }).sum();
        assert_eq!((st.tracepoint_ns, st.probe_calls), (100, 3));
        assert_eq!(sys, 2_900 + 5_700);
        assert_eq!(st.tracepoint_removed_ns, 100 + 300 + 50);
        assert_eq!(st.syscall_ns, 3_000 + 6_000 + 50 + 5_000 + 300, "as recorded (with the exec's)");
        // Without the probe (an older wrapper): nothing is taken out.
        let mut p = wrapped();
        p.enter(11, 10_000, 102, &[0; 6]).exit(11, 13_000, 102, 0).task_exit(11, 50_000).round();
        let (t, st) = convert_stream(&p.b, serde_json::json!({})).unwrap();
        let sys: u64 = t.task(11).unwrap().cursor().map(|r| if let Record::Time { sys_ns, .. } = r { sys_ns } else { 0 }).sum();
        assert_eq!((sys, st.tracepoint_ns, st.tracepoint_removed_ns), (3_000, 0, 0));
    }

    #[test]
    fn bad_streams_are_one_line_errors() {
        let e = |b: &[u8]| convert_stream(b, serde_json::json!({})).err().unwrap();
        assert!(e(b"").contains("perf wrote nothing"), "{}", e(b""));
        assert!(e(b"PERFILE2\x10\x00\x00\x00\x00\x00\x00\x00").contains("no process of the command"));
        assert!(e(b"PERFILE2\x00\x01\x00\x00\x00\x00\x00\x00").contains("perf.data file"));
        assert!(e(b"NOTPERF!\x10\x00\x00\x00\x00\x00\x00\x00").contains("bad magic"));
        let b = wrapped().b;
        let cut = e(&b[..b.len() - 5]);
        assert!(cut.contains("ends inside a record"), "{cut}");
        for x in [e(b""), cut] {
            assert!(!x.contains('\n'));
        }
    }

    #[test]
    fn formats_are_read_by_field_name() {
        let f = formats();
        let (tp, fields) = &f.by_id[&600];
        assert_eq!(*tp, Tp::AddPage);
        assert_eq!(fields, &[Field { off: 16, size: 8 }, Field { off: 32, size: 4 }, Field { off: 24, size: 8 }]);
        let mut g = Formats::default();
        let e = g.add(Tp::Exit, 1, "\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n").unwrap_err();
        assert!(e.contains("no field pid"), "{e}");
    }
}
