//! The foliosim trace format (docs/trace-format.md): what `foliosim record`
//! writes and the `trace` workload replays.
//!
//! ```text
//! "FOLIOTRC"  8-byte magic
//! u16 LE      format version (VERSION)
//! u8          compression: 1 = zlib (RFC 1950, with its Adler-32 check)
//! u8          page shift of the recorded machine (12: 4 KiB pages)
//! u16 LE      ELF machine of the recorded programs (62: x86-64)
//! u16 LE      reserved, 0
//! zlib stream of records, the last one End { records }
//! ```
//!
//! Each record is a tag byte and unsigned LEB128 varints. The stream holds
//! global records (Meta, File, Root, Summary, End) and chunks: a chunk is
//! the tag, the recorded task id and a byte count, then that many bytes of
//! the task's own records. A writer buffers each task's records and writes
//! them a chunk at a time, so a recorder streams a whole process tree
//! without holding it, and a reader gets each task's records apart (the
//! replay runs tasks in its own order, not the recording's). In the flat
//! form (`read_all`, `TraceWriter::write`) a `Task { tid }` record stands
//! for "the records that follow are task tid's" until the next one.
//!
//! Accesses are stored per page run: the page as a zigzag delta from the
//! task's previous access page, plus how many further accesses the program
//! made to that page (`Access`), or how many pages a step apart it touched
//! one after the other (`Run`). The reader rejects, with one-line messages,
//! a wrong magic, an older or newer version, a trace of another kind of
//! machine, an unknown compression, a corrupt or truncated stream, unknown
//! tags, oversized fields, a file used but never declared (File records
//! may come anywhere: a recorder learns file sizes only at the end) and a
//! missing or wrong End.

use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use std::collections::BTreeMap;
use std::io::{self, BufReader, Read, Write};

pub const MAGIC: &[u8; 8] = b"FOLIOTRC";
pub const VERSION: u16 = 3;
pub const COMPRESSION_ZLIB: u8 = 1;
/// The machine a replay models: x86-64 with 4 KiB pages.
pub const PAGE_SHIFT: u8 = 12;
pub const EM_X86_64: u16 = 62;
pub const HEADER_LEN: usize = 16;
/// Longest path or metadata string accepted.
pub const MAX_STR: u64 = 1 << 16;
/// A task's records are written in chunks of about this many bytes.
pub const CHUNK_BYTES: usize = 64 << 10;
/// Largest chunk a reader accepts.
pub const MAX_CHUNK: u64 = 16 << 20;

pub const TAG_END: u8 = 0x00;
pub const TAG_META: u8 = 0x01;
pub const TAG_FILE: u8 = 0x02;
pub const TAG_MMAP: u8 = 0x03;
pub const TAG_MUNMAP: u8 = 0x04;
pub const TAG_MPROTECT: u8 = 0x05;
pub const TAG_MADVISE: u8 = 0x06;
pub const TAG_BRK: u8 = 0x07;
pub const TAG_MREMAP: u8 = 0x08;
pub const TAG_REGION: u8 = 0x09;
pub const TAG_SUMMARY: u8 = 0x0a;
pub const TAG_FORK: u8 = 0x0b;
pub const TAG_EXEC: u8 = 0x0c;
pub const TAG_WAIT: u8 = 0x0d;
pub const TAG_EXIT: u8 = 0x0e;
pub const TAG_CHUNK: u8 = 0x0f;
/// 0x10 | kind (0 load, 1 store, 2 ifetch): accesses to one page.
pub const TAG_ACCESS: u8 = 0x10;
/// 0x14 | kind: one access to each page of a run.
pub const TAG_RUN: u8 = 0x14;
pub const TAG_TIME: u8 = 0x18;
pub const TAG_VFORK: u8 = 0x19;
pub const TAG_CLONE: u8 = 0x1a;
pub const TAG_READ: u8 = 0x1b;
pub const TAG_WRITE: u8 = 0x1c;
pub const TAG_ROOT: u8 = 0x1d;
pub const TAG_AROUND: u8 = 0x1e;

/// Access kinds as stored.
pub const K_LOAD: u8 = 0;
pub const K_STORE: u8 = 1;
pub const K_IFETCH: u8 = 2;

/// `File` flags: the recorded program created the file (its page cache
/// starts empty in a replay); otherwise it existed and is read warm.
pub const FILE_CREATED: u32 = 1;
/// `Wait` flags: the recorded wait4 did not block (WNOHANG). GNU make
/// reaps so after its jobserver read woke it (it waited for a job slot),
/// and blocks in wait4 when it waits for a prerequisite.
pub const WAIT_NOHANG: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// JSON text describing the recording (command, mode, what it lacks,
    /// tool versions). Global.
    Meta {
        json: String,
    },
    /// Declares file index n (the n-th File record, from 0): its size, path
    /// and flags (FILE_CREATED). Global.
    File {
        size: u64,
        path: String,
        flags: u32,
    },
    /// The task the recorded command ran as. Global.
    Root {
        tid: u64,
    },
    /// JSON text of what was known only at the end (exit status, the
    /// tree's rusage, events lost). Global.
    Summary {
        json: String,
    },
    /// Flat form only: the records that follow are task `tid`'s.
    Task {
        tid: u64,
    },
    /// mmap(addr, len, prot, flags, file, off) returned `ret` in the recording.
    /// `file` is a File index, None for anonymous memory. Flags are Linux's.
    Mmap {
        addr: u64,
        len: u64,
        prot: u32,
        flags: u32,
        file: Option<u32>,
        off: u64,
        ret: u64,
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
    /// Linux advice number (MADV_DONTNEED = 4, ...).
    Madvise {
        addr: u64,
        len: u64,
        advice: u32,
    },
    /// brk(addr) returned `ret` (addr 0 queries).
    Brk {
        addr: u64,
        ret: u64,
    },
    Mremap {
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u32,
        ret: u64,
    },
    /// Memory the program used that no recorded call or exec created (its
    /// initial stack, the vDSO): replayed as private anonymous memory mapped
    /// when its process image starts.
    Region {
        addr: u64,
        len: u64,
    },
    /// `1 + repeat` accesses of `kind` to the 4 KiB page `page` (address >> 12).
    Access {
        kind: u8,
        page: u64,
        repeat: u64,
    },
    /// One access of `kind` to each of `count` pages: `page`, `page + step`, ...
    Run {
        kind: u8,
        page: u64,
        count: u64,
        step: i64,
    },
    /// `count` pages from `page` that the kernel mapped around a file fault
    /// (fault-around), recorded where it could not be turned off: a replay
    /// touches each once (a load), as if at that fault. Not an op.
    Around {
        page: u64,
        count: u64,
    },
    /// The task ran `user_ns` in user mode and `sys_ns` in system calls
    /// that are not recorded as records, since its previous record.
    Time {
        user_ns: u64,
        sys_ns: u64,
    },
    /// fork() or clone() without CLONE_VM created process `child`.
    Fork {
        child: u64,
    },
    /// vfork() (clone with CLONE_VM, without CLONE_THREAD) created `child`,
    /// which runs in this address space until it execs or exits.
    Vfork {
        child: u64,
    },
    /// clone() created thread `child` of this process.
    Clone {
        child: u64,
    },
    /// execve of File `file`: its ELF image as the kernel mapped it, text
    /// (every segment before the writable one, file offset = address -
    /// vaddr) at `vaddr`, then `data` bytes of the file from `data_off`,
    /// then `bss` anonymous bytes.
    Exec {
        file: u32,
        vaddr: u64,
        text: u64,
        data: u64,
        data_off: u64,
        bss: u64,
    },
    /// read(2) family: `len` bytes of File `file` from offset `off`.
    Read {
        file: u32,
        off: u64,
        len: u64,
    },
    /// write(2) family: `len` bytes to File `file` at offset `off`.
    Write {
        file: u32,
        off: u64,
        len: u64,
    },
    /// wait4() reaped `child` (0: unknown); flags WAIT_NOHANG.
    Wait {
        child: u64,
        flags: u32,
    },
    /// The task exited (exit_group's code for the last thread of a process).
    Exit {
        code: u64,
    },
    End {
        records: u64,
    },
}

impl Record {
    /// Whether the record belongs to a task (as opposed to the whole trace).
    pub fn is_task_record(&self) -> bool {
        !matches!(
            self,
            Record::Meta { .. }
                | Record::File { .. }
                | Record::Root { .. }
                | Record::Summary { .. }
                | Record::Task { .. }
                | Record::End { .. }
        )
    }
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf.push(b);
            return;
        }
        buf.push(b | 0x80);
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    put_varint(b, s.len() as u64);
    b.extend_from_slice(s.as_bytes());
}

/// Encode a task record into `b`; `last_page` is the task's previous access page.
fn encode_task(b: &mut Vec<u8>, r: &Record, last_page: &mut u64) -> io::Result<()> {
    let vs = |b: &mut Vec<u8>, tag: u8, v: &[u64]| {
        b.push(tag);
        for &x in v {
            put_varint(b, x);
        }
    };
    match *r {
        Record::Mmap { addr, len, prot, flags, file, off, ret } => {
            vs(b, TAG_MMAP, &[addr, len, prot as u64, flags as u64, file.map_or(0, |f| f as u64 + 1), off, ret])
        }
        Record::Munmap { addr, len } => vs(b, TAG_MUNMAP, &[addr, len]),
        Record::Mprotect { addr, len, prot } => vs(b, TAG_MPROTECT, &[addr, len, prot as u64]),
        Record::Madvise { addr, len, advice } => vs(b, TAG_MADVISE, &[addr, len, advice as u64]),
        Record::Brk { addr, ret } => vs(b, TAG_BRK, &[addr, ret]),
        Record::Mremap { addr, old_len, new_len, flags, ret } => vs(b, TAG_MREMAP, &[addr, old_len, new_len, flags as u64, ret]),
        Record::Region { addr, len } => vs(b, TAG_REGION, &[addr, len]),
        Record::Access { kind, page, repeat } => {
            vs(b, TAG_ACCESS | (kind & 3), &[zigzag(page.wrapping_sub(*last_page) as i64), repeat]);
            *last_page = page;
        }
        Record::Run { kind, page, count, step } => {
            if count < 2 {
                return Err(io::Error::other("a Run holds at least 2 pages"));
            }
            vs(b, TAG_RUN | (kind & 3), &[zigzag(page.wrapping_sub(*last_page) as i64), count - 2, zigzag(step)]);
            *last_page = page.wrapping_add(step.wrapping_mul(count as i64 - 1) as u64);
        }
        Record::Around { page, count } => {
            if count == 0 {
                return Err(io::Error::other("an Around holds at least 1 page"));
            }
            vs(b, TAG_AROUND, &[zigzag(page.wrapping_sub(*last_page) as i64), count - 1]);
            *last_page = page;
        }
        Record::Time { user_ns, sys_ns } => vs(b, TAG_TIME, &[user_ns, sys_ns]),
        Record::Fork { child } => vs(b, TAG_FORK, &[child]),
        Record::Vfork { child } => vs(b, TAG_VFORK, &[child]),
        Record::Clone { child } => vs(b, TAG_CLONE, &[child]),
        Record::Exec { file, vaddr, text, data, data_off, bss } => vs(b, TAG_EXEC, &[file as u64, vaddr, text, data, data_off, bss]),
        Record::Read { file, off, len } => vs(b, TAG_READ, &[file as u64, off, len]),
        Record::Write { file, off, len } => vs(b, TAG_WRITE, &[file as u64, off, len]),
        Record::Wait { child, flags } => vs(b, TAG_WAIT, &[child, flags as u64]),
        Record::Exit { code } => vs(b, TAG_EXIT, &[code]),
        _ => return Err(io::Error::other("not a task record")),
    }
    Ok(())
}

// ------------------------------------------------------------------ writer --

/// One task's records not yet written.
#[derive(Default)]
struct TaskBuf {
    buf: Vec<u8>,
    last_page: u64,
}

pub struct TraceWriter<W: Write> {
    z: ZlibEncoder<W>,
    records: u64,
    tasks: BTreeMap<u64, TaskBuf>,
    /// Tasks in the order they first wrote (chunks left at the end go in it).
    order: Vec<u64>,
    /// The task of the flat form's last `Task` record.
    current: Option<u64>,
    buf: Vec<u8>,
}

impl<W: Write> TraceWriter<W> {
    pub fn new(w: W) -> io::Result<Self> {
        Self::with_header(w, VERSION, PAGE_SHIFT, EM_X86_64)
    }

    /// A writer stamping another version, page shift or machine in the
    /// header (tests of the reader's refusals).
    pub fn with_header(mut w: W, version: u16, page_shift: u8, machine: u16) -> io::Result<Self> {
        w.write_all(MAGIC)?;
        w.write_all(&version.to_le_bytes())?;
        w.write_all(&[COMPRESSION_ZLIB, page_shift])?;
        w.write_all(&machine.to_le_bytes())?;
        w.write_all(&[0, 0])?;
        Ok(TraceWriter {
            z: ZlibEncoder::new(w, flate2::Compression::new(6)),
            records: 0,
            tasks: BTreeMap::new(),
            order: Vec::new(),
            current: None,
            buf: Vec::with_capacity(256),
        })
    }

    /// Write a record in the flat form: a global record, a `Task` marker,
    /// or a record of the task the last marker named.
    pub fn write(&mut self, r: &Record) -> io::Result<()> {
        match r {
            Record::Task { tid } => {
                self.current = Some(*tid);
                Ok(())
            }
            r if r.is_task_record() => {
                let tid = self.current.ok_or_else(|| io::Error::other("a task record before any Task"))?;
                self.write_task(tid, r)
            }
            r => self.write_global(r),
        }
    }

    /// A global record (Meta, File, Root, Summary).
    pub fn write_global(&mut self, r: &Record) -> io::Result<()> {
        let b = &mut self.buf;
        b.clear();
        match r {
            Record::Meta { json } => {
                b.push(TAG_META);
                put_str(b, json);
            }
            Record::Summary { json } => {
                b.push(TAG_SUMMARY);
                put_str(b, json);
            }
            Record::File { size, path, flags } => {
                b.push(TAG_FILE);
                put_varint(b, *size);
                put_str(b, path);
                put_varint(b, *flags as u64);
            }
            Record::Root { tid } => {
                b.push(TAG_ROOT);
                put_varint(b, *tid);
            }
            _ => return Err(io::Error::other("not a global record")),
        }
        self.records += 1;
        self.z.write_all(&self.buf)
    }

    /// A record of task `tid`, buffered until its chunk is full.
    pub fn write_task(&mut self, tid: u64, r: &Record) -> io::Result<()> {
        if !self.tasks.contains_key(&tid) {
            self.order.push(tid);
        }
        let t = self.tasks.entry(tid).or_default();
        encode_task(&mut t.buf, r, &mut t.last_page)?;
        self.records += 1;
        if t.buf.len() >= CHUNK_BYTES {
            self.flush_task(tid)?;
        }
        Ok(())
    }

    /// Write task `tid`'s buffered records as a chunk.
    pub fn flush_task(&mut self, tid: u64) -> io::Result<()> {
        let Some(t) = self.tasks.get_mut(&tid) else { return Ok(()) };
        if t.buf.is_empty() {
            return Ok(());
        }
        let b = &mut self.buf;
        b.clear();
        b.push(TAG_CHUNK);
        put_varint(b, tid);
        put_varint(b, t.buf.len() as u64);
        self.z.write_all(&self.buf)?;
        self.z.write_all(&t.buf)?;
        t.buf.clear();
        Ok(())
    }

    /// Write End after every buffered chunk and flush the stream; returns
    /// the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        for tid in std::mem::take(&mut self.order) {
            self.flush_task(tid)?;
        }
        let mut b = vec![TAG_END];
        put_varint(&mut b, self.records);
        self.z.write_all(&b)?;
        self.z.finish()
    }
}

// ------------------------------------------------------------------ reader --

/// Where record bytes come from: the zlib stream, or a chunk in memory.
trait Src {
    fn byte(&mut self) -> Result<u8, String>;
    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, String>;
}

fn corrupt(e: io::Error) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        "truncated trace (the compressed stream ends early)".to_string()
    } else {
        format!("corrupt trace ({e})")
    }
}

struct Stream<R: Read>(BufReader<ZlibDecoder<R>>);

impl<R: Read> Src for Stream<R> {
    fn byte(&mut self) -> Result<u8, String> {
        let mut b = [0u8; 1];
        self.0.read_exact(&mut b).map_err(corrupt)?;
        Ok(b[0])
    }
    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, String> {
        let mut b = vec![0u8; n];
        self.0.read_exact(&mut b).map_err(corrupt)?;
        Ok(b)
    }
}

struct Slice<'a>(&'a [u8]);

impl Src for Slice<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let (&b, rest) = self.0.split_first().ok_or("corrupt trace (a chunk ends inside a record)")?;
        self.0 = rest;
        Ok(b)
    }
    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, String> {
        if n > self.0.len() {
            return Err("corrupt trace (a chunk ends inside a record)".into());
        }
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(a.to_vec())
    }
}

fn varint(s: &mut impl Src) -> Result<u64, String> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let b = s.byte()?;
        if i == 9 && b > 1 {
            return Err("corrupt trace (varint overflows 64 bits)".into());
        }
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("corrupt trace (varint too long)".into())
}

fn u32v(s: &mut impl Src, what: &str) -> Result<u32, String> {
    let v = varint(s)?;
    u32::try_from(v).map_err(|_| format!("corrupt trace ({what} {v} does not fit 32 bits)"))
}

fn string(s: &mut impl Src) -> Result<String, String> {
    let n = varint(s)?;
    if n > MAX_STR {
        return Err(format!("corrupt trace (string of {n} bytes)"));
    }
    String::from_utf8(s.bytes(n as usize)?).map_err(|_| "corrupt trace (string is not UTF-8)".to_string())
}

fn page_of(last: u64, delta: u64) -> Result<u64, String> {
    let page = last.wrapping_add(unzigzag(delta) as u64);
    if page >= 1 << 52 {
        return Err(format!("corrupt trace (page {page:#x} beyond the 64-bit address space)"));
    }
    Ok(page)
}

fn file_ref(s: &mut impl Src) -> Result<u32, String> {
    let f = varint(s)?;
    u32::try_from(f).map_err(|_| format!("corrupt trace (file index {f} does not fit 32 bits)"))
}

/// The File index a task record uses, if any.
fn file_of(r: &Record) -> Option<u32> {
    match *r {
        Record::Mmap { file, .. } => file,
        Record::Exec { file, .. } | Record::Read { file, .. } | Record::Write { file, .. } => Some(file),
        _ => None,
    }
}

/// Decode one task record from `s` (`last_page`: the task's previous
/// access page). File indices are checked against the declarations at End.
fn decode_task(s: &mut impl Src, last_page: &mut u64) -> Result<Record, String> {
    let tag = s.byte()?;
    Ok(match tag {
        TAG_MMAP => {
            let addr = varint(s)?;
            let len = varint(s)?;
            let prot = u32v(s, "prot")?;
            let flags = u32v(s, "flags")?;
            let f = varint(s)?;
            if f > u32::MAX as u64 {
                return Err(format!("corrupt trace (file index {f} does not fit 32 bits)"));
            }
            let off = varint(s)?;
            let ret = varint(s)?;
            Record::Mmap { addr, len, prot, flags, file: if f == 0 { None } else { Some((f - 1) as u32) }, off, ret }
        }
        TAG_MUNMAP => Record::Munmap { addr: varint(s)?, len: varint(s)? },
        TAG_MPROTECT => Record::Mprotect { addr: varint(s)?, len: varint(s)?, prot: u32v(s, "prot")? },
        TAG_MADVISE => Record::Madvise { addr: varint(s)?, len: varint(s)?, advice: u32v(s, "advice")? },
        TAG_BRK => Record::Brk { addr: varint(s)?, ret: varint(s)? },
        TAG_MREMAP => {
            Record::Mremap { addr: varint(s)?, old_len: varint(s)?, new_len: varint(s)?, flags: u32v(s, "flags")?, ret: varint(s)? }
        }
        TAG_REGION => Record::Region { addr: varint(s)?, len: varint(s)? },
        TAG_FORK => Record::Fork { child: varint(s)? },
        TAG_VFORK => Record::Vfork { child: varint(s)? },
        TAG_CLONE => Record::Clone { child: varint(s)? },
        TAG_EXEC => Record::Exec {
            file: file_ref(s)?,
            vaddr: varint(s)?,
            text: varint(s)?,
            data: varint(s)?,
            data_off: varint(s)?,
            bss: varint(s)?,
        },
        TAG_READ => Record::Read { file: file_ref(s)?, off: varint(s)?, len: varint(s)? },
        TAG_WRITE => Record::Write { file: file_ref(s)?, off: varint(s)?, len: varint(s)? },
        TAG_TIME => Record::Time { user_ns: varint(s)?, sys_ns: varint(s)? },
        TAG_AROUND => {
            let page = page_of(*last_page, varint(s)?)?;
            let count = varint(s)?.checked_add(1).ok_or("corrupt trace (run length overflows)")?;
            if page.checked_add(count).is_none_or(|e| e > 1 << 52) {
                return Err(format!("corrupt trace ({count} pages from {page:#x} leave the address space)"));
            }
            *last_page = page;
            Record::Around { page, count }
        }
        TAG_WAIT => Record::Wait { child: varint(s)?, flags: u32v(s, "wait flags")? },
        TAG_EXIT => Record::Exit { code: varint(s)? },
        t if t & 0xfc == TAG_ACCESS && t & 3 <= K_IFETCH => {
            let page = page_of(*last_page, varint(s)?)?;
            *last_page = page;
            Record::Access { kind: t & 3, page, repeat: varint(s)? }
        }
        t if t & 0xfc == TAG_RUN && t & 3 <= K_IFETCH => {
            let page = page_of(*last_page, varint(s)?)?;
            let count = varint(s)?.checked_add(2).ok_or("corrupt trace (run length overflows)")?;
            let step = unzigzag(varint(s)?);
            let last = (page as i128) + (step as i128) * (count as i128 - 1);
            if !(0..1i128 << 52).contains(&last) {
                return Err(format!("corrupt trace (a run of {count} pages from {page:#x} leaves the address space)"));
            }
            *last_page = last as u64;
            Record::Run { kind: t & 3, page, count, step }
        }
        t => return Err(format!("corrupt trace (unknown record tag {t:#04x})")),
    })
}

/// What one read of the stream gave.
#[derive(Debug)]
pub enum Item {
    Global(Record),
    /// A chunk of task `tid`: its raw bytes, checked, and how many records they hold.
    Chunk {
        tid: u64,
        bytes: Vec<u8>,
        records: u64,
    },
}

pub struct TraceReader<R: Read> {
    z: Stream<R>,
    records: u64,
    files: u64,
    /// The largest File index a record used, checked at End.
    max_file: Option<u32>,
    /// Each task's last access page, carried from chunk to chunk.
    last_page: BTreeMap<u64, u64>,
    done: bool,
}

/// Check a header; errors are one line naming what differs.
pub fn check_header(h: &[u8]) -> Result<(), String> {
    if h.len() < 8 || &h[..8] != MAGIC {
        return Err("not a foliosim trace (bad magic; expected FOLIOTRC)".into());
    }
    if h.len() < 10 {
        return Err("truncated trace (header cut short)".into());
    }
    let version = u16::from_le_bytes([h[8], h[9]]);
    if version > VERSION {
        return Err(format!("trace format version {version} is newer than this foliosim reads ({VERSION}); upgrade foliosim"));
    }
    if version < VERSION {
        return Err(format!(
            "trace format version {version} is older than this foliosim reads ({VERSION}): record the program again with `foliosim record`"
        ));
    }
    if h.len() < HEADER_LEN {
        return Err("truncated trace (header cut short)".into());
    }
    let (shift, machine) = (h[11], u16::from_le_bytes([h[12], h[13]]));
    if shift != PAGE_SHIFT || machine != EM_X86_64 {
        let page = if shift < 40 { format!("{} KiB", (1u64 << shift) >> 10) } else { format!("2^{shift}-byte") };
        return Err(format!(
            "trace recorded on another kind of machine ({}, {page} pages); foliosim replays x86-64 programs with 4 KiB pages",
            machine_name(machine)
        ));
    }
    if h[10] != COMPRESSION_ZLIB {
        return Err(format!("corrupt trace (unknown compression {})", h[10]));
    }
    Ok(())
}

fn machine_name(m: u16) -> String {
    match m {
        3 => "i386".into(),
        20 => "ppc".into(),
        21 => "ppc64".into(),
        22 => "s390".into(),
        40 => "arm".into(),
        62 => "x86-64".into(),
        183 => "aarch64".into(),
        243 => "riscv".into(),
        258 => "loongarch".into(),
        m => format!("ELF machine {m}"),
    }
}

impl<R: Read> TraceReader<R> {
    /// Check the header; errors are one line.
    pub fn new(mut r: R) -> Result<Self, String> {
        let mut h = [0u8; HEADER_LEN];
        let mut got = 0;
        while got < h.len() {
            match r.read(&mut h[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("cannot read the trace: {e}")),
            }
        }
        check_header(&h[..got])?;
        Ok(TraceReader {
            z: Stream(BufReader::new(ZlibDecoder::new(r))),
            records: 0,
            files: 0,
            max_file: None,
            last_page: BTreeMap::new(),
            done: false,
        })
    }

    /// The next global record or chunk (its records checked); None after
    /// End (which is checked, as is the absence of anything after it).
    pub fn next_item(&mut self) -> Result<Option<Item>, String> {
        if self.done {
            return Ok(None);
        }
        let tag = self.z.byte()?;
        let it = match tag {
            TAG_END => {
                let n = varint(&mut self.z)?;
                if n != self.records {
                    return Err(format!("corrupt trace (End says {n} records, found {})", self.records));
                }
                if let Some(f) = self.max_file.filter(|&f| f as u64 >= self.files) {
                    return Err(format!("corrupt trace (file {f} is used but never declared)"));
                }
                let mut rest = [0u8; 1];
                match self.z.0.read(&mut rest) {
                    Ok(0) => {}
                    Ok(_) => return Err("corrupt trace (data after the End record)".into()),
                    Err(e) => return Err(corrupt(e)),
                }
                self.done = true;
                return Ok(None);
            }
            TAG_META => Item::Global(Record::Meta { json: string(&mut self.z)? }),
            TAG_SUMMARY => Item::Global(Record::Summary { json: string(&mut self.z)? }),
            TAG_FILE => {
                let size = varint(&mut self.z)?;
                let path = string(&mut self.z)?;
                let flags = u32v(&mut self.z, "file flags")?;
                self.files += 1;
                Item::Global(Record::File { size, path, flags })
            }
            TAG_ROOT => Item::Global(Record::Root { tid: varint(&mut self.z)? }),
            TAG_CHUNK => {
                let tid = varint(&mut self.z)?;
                let n = varint(&mut self.z)?;
                if n == 0 || n > MAX_CHUNK {
                    return Err(format!("corrupt trace (a chunk of {n} bytes)"));
                }
                let bytes = self.z.bytes(n as usize)?;
                let last = self.last_page.entry(tid).or_insert(0);
                let mut s = Slice(&bytes);
                let mut records = 0;
                while !s.0.is_empty() {
                    if let Some(f) = file_of(&decode_task(&mut s, last)?) {
                        self.max_file = self.max_file.max(Some(f));
                    }
                    records += 1;
                }
                self.records += records;
                return Ok(Some(Item::Chunk { tid, bytes, records }));
            }
            t => return Err(format!("corrupt trace (unknown record tag {t:#04x} at record {})", self.records)),
        };
        self.records += 1;
        Ok(Some(it))
    }

    /// Every record in the flat form (End excluded): each chunk as a
    /// `Task` marker followed by its records.
    pub fn read_all(mut self) -> Result<Vec<Record>, String> {
        let mut v = Vec::new();
        let mut pages: BTreeMap<u64, u64> = BTreeMap::new();
        while let Some(it) = self.next_item()? {
            match it {
                Item::Global(r) => v.push(r),
                Item::Chunk { tid, bytes, .. } => {
                    v.push(Record::Task { tid });
                    let mut c = TaskCursor { bytes: &bytes, pos: 0, last_page: pages.get(&tid).copied().unwrap_or(0) };
                    v.extend(c.by_ref());
                    pages.insert(tid, c.last_page);
                }
            }
        }
        Ok(v)
    }
}

/// A whole trace in memory: its global records and each task's record
/// bytes (checked), in the order of the tasks' first chunks.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub meta: Option<String>,
    pub summary: Option<String>,
    /// (size, path, flags) by File index.
    pub files: Vec<(u64, String, u32)>,
    pub root: Option<u64>,
    pub tasks: Vec<TaskBytes>,
}

#[derive(Clone, Debug, Default)]
pub struct TaskBytes {
    pub tid: u64,
    pub bytes: Vec<u8>,
    pub records: u64,
}

impl TaskBytes {
    pub fn cursor(&self) -> TaskCursor<'_> {
        TaskCursor { bytes: &self.bytes, pos: 0, last_page: 0 }
    }
}

/// Decodes a task's records (already checked by the reader).
pub struct TaskCursor<'a> {
    bytes: &'a [u8],
    pub pos: usize,
    last_page: u64,
}

impl TaskCursor<'_> {
    /// A cursor at a saved position (`pos`, `last_page` from `state`).
    pub fn state(&self) -> (usize, u64) {
        (self.pos, self.last_page)
    }
}

impl<'a> TaskCursor<'a> {
    pub fn at(bytes: &'a [u8], state: (usize, u64)) -> Self {
        TaskCursor { bytes, pos: state.0, last_page: state.1 }
    }
}

impl Iterator for TaskCursor<'_> {
    type Item = Record;
    fn next(&mut self) -> Option<Record> {
        let mut s = Slice(&self.bytes[self.pos.min(self.bytes.len())..]);
        if s.0.is_empty() {
            return None;
        }
        let before = s.0.len();
        // Checked when read.
        let r = decode_task(&mut s, &mut self.last_page).ok()?;
        self.pos += before - s.0.len();
        Some(r)
    }
}

impl Trace {
    /// Read a whole trace from `r`.
    pub fn read(r: impl Read) -> Result<Trace, String> {
        let mut rd = TraceReader::new(r)?;
        let mut t = Trace::default();
        let mut idx: BTreeMap<u64, usize> = BTreeMap::new();
        while let Some(it) = rd.next_item()? {
            match it {
                Item::Global(Record::Meta { json }) => t.meta = Some(json),
                Item::Global(Record::Summary { json }) => t.summary = Some(json),
                Item::Global(Record::File { size, path, flags }) => t.files.push((size, path, flags)),
                Item::Global(Record::Root { tid }) => t.root = Some(tid),
                Item::Global(_) => {}
                Item::Chunk { tid, bytes, records } => {
                    let i = *idx.entry(tid).or_insert_with(|| {
                        t.tasks.push(TaskBytes { tid, ..Default::default() });
                        t.tasks.len() - 1
                    });
                    t.tasks[i].bytes.extend_from_slice(&bytes);
                    t.tasks[i].records += records;
                }
            }
        }
        if t.root.is_none() {
            t.root = t.tasks.first().map(|x| x.tid);
        }
        Ok(t)
    }

    /// Build a trace from records in the flat form (tests, fuzzing).
    pub fn from_records(records: &[Record]) -> Result<Trace, String> {
        let mut w = TraceWriter::new(Vec::new()).map_err(|e| e.to_string())?;
        for r in records {
            w.write(r).map_err(|e| e.to_string())?;
        }
        Trace::read(&w.finish().map_err(|e| e.to_string())?[..])
    }

    pub fn task(&self, tid: u64) -> Option<&TaskBytes> {
        self.tasks.iter().find(|t| t.tid == tid)
    }
}

/// Read a whole trace file in the flat form.
pub fn read_file(path: &std::path::Path) -> Result<Vec<Record>, String> {
    TraceReader::new(crate::types::open_input(path)?)?.read_all()
}

/// Read a whole trace file.
pub fn read_trace(path: &std::path::Path) -> Result<Trace, String> {
    Trace::read(crate::types::open_input(path)?)
}

/// Counts over a whole trace (checks it end to end, chunk by chunk: a
/// trace can hold hundreds of millions of records).
#[derive(Debug, Default, serde::Serialize)]
pub struct TraceStats {
    pub version: u16,
    pub records: u64,
    /// Recorded accesses (the replay's ops): each Access's 1 + repeat, each Run's pages.
    pub accesses: u64,
    pub access_records: u64,
    pub syscalls: u64,
    pub files: u64,
    pub regions: u64,
    /// Pages fault-around mapped (Around records).
    pub around_pages: u64,
    pub tasks: u64,
    pub processes: u64,
    pub threads: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
}

pub fn stats_of(path: &std::path::Path) -> Result<(TraceStats, Option<String>, Option<String>), String> {
    let mut r = TraceReader::new(crate::types::open_input(path)?)?;
    let mut st = TraceStats { version: VERSION, ..Default::default() };
    let (mut meta, mut summary) = (None, None);
    let mut seen = std::collections::BTreeSet::new();
    let mut pages: BTreeMap<u64, u64> = BTreeMap::new();
    while let Some(it) = r.next_item()? {
        match it {
            Item::Global(rec) => {
                st.records += 1;
                match rec {
                    Record::File { .. } => st.files += 1,
                    Record::Meta { json } => meta = Some(json),
                    Record::Summary { json } => summary = Some(json),
                    _ => {}
                }
            }
            Item::Chunk { tid, bytes, records } => {
                st.records += records;
                seen.insert(tid);
                let mut c = TaskCursor { bytes: &bytes, pos: 0, last_page: pages.get(&tid).copied().unwrap_or(0) };
                for rec in c.by_ref() {
                    match rec {
                        Record::Access { repeat, .. } => {
                            st.accesses += 1 + repeat;
                            st.access_records += 1;
                        }
                        Record::Run { count, .. } => {
                            st.accesses += count;
                            st.access_records += 1;
                        }
                        Record::Region { .. } => st.regions += 1,
                        Record::Around { count, .. } => st.around_pages += count,
                        Record::Time { user_ns, sys_ns } => {
                            st.user_ns += user_ns;
                            st.sys_ns += sys_ns;
                        }
                        Record::Fork { .. } | Record::Vfork { .. } => {
                            st.processes += 1;
                            st.syscalls += 1;
                        }
                        Record::Clone { .. } => {
                            st.threads += 1;
                            st.syscalls += 1;
                        }
                        Record::Exit { .. } => {}
                        _ => st.syscalls += 1,
                    }
                }
                pages.insert(tid, c.last_page);
            }
        }
    }
    st.tasks = seen.len() as u64;
    st.processes += 1;
    Ok((st, meta, summary))
}

/// The Meta JSON at the head of a trace ("" if none), without reading the rest.
pub fn meta_of(path: &std::path::Path) -> Result<String, String> {
    let mut r = TraceReader::new(crate::types::open_input(path)?)?;
    while let Some(it) = r.next_item()? {
        match it {
            Item::Global(Record::Meta { json }) => return Ok(json),
            Item::Global(_) => {}
            Item::Chunk { .. } => break,
        }
    }
    Ok(String::new())
}

/// Read a whole trace and summarise it as JSON.
pub fn summary_json(path: &std::path::Path) -> Result<String, String> {
    let (st, meta, summary) = stats_of(path)?;
    let parse = |s: Option<String>| s.map(|j| serde_json::from_str(&j).unwrap_or(serde_json::Value::String(j))).unwrap_or_default();
    let mut v = serde_json::to_value(&st).map_err(|e| e.to_string())?;
    v["meta"] = parse(meta);
    v["summary"] = parse(summary);
    Ok(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Vec<Record> {
        vec![
            Record::Meta { json: "{\"argv\":[\"x\"]}".into() },
            Record::File { size: 8192, path: "/lib/x.so".into(), flags: 0 },
            Record::Root { tid: 11 },
            Record::Task { tid: 11 },
            Record::Mmap { addr: 0, len: 8192, prot: 5, flags: 2, file: Some(0), off: 0, ret: 0x7f00_0000_0000 },
            Record::Region { addr: 0x40_0000, len: 4096 },
            Record::Brk { addr: 0, ret: 0x60_0000 },
            Record::Access { kind: K_STORE, page: 0x0007_f000_0000, repeat: 3 },
            Record::Time { user_ns: 1234, sys_ns: 5 },
            Record::Access { kind: K_LOAD, page: 0x0400, repeat: 0 },
            Record::Run { kind: K_STORE, page: 0x0500, count: 17, step: 1 },
            Record::Run { kind: K_LOAD, page: 0x0600, count: 2, step: -1 },
            Record::Around { page: 0x0700, count: 15 },
            Record::Access { kind: K_IFETCH, page: 0x0007_f000_0001, repeat: u64::MAX },
            Record::Madvise { addr: 0x7f00_0000_0000, len: 4096, advice: 4 },
            Record::Mprotect { addr: 0x7f00_0000_0000, len: 4096, prot: 1 },
            Record::Mremap { addr: 0x7f00_0000_0000, old_len: 8192, new_len: 16384, flags: 1, ret: 0x7e00_0000_0000 },
            Record::Munmap { addr: 0x7e00_0000_0000, len: 16384 },
            Record::Read { file: 0, off: 4096, len: 100 },
            Record::Write { file: 0, off: 0, len: 8192 },
            Record::Fork { child: 12 },
            Record::Vfork { child: 13 },
            Record::Clone { child: 14 },
            Record::Wait { child: 12, flags: WAIT_NOHANG },
            Record::Exit { code: 0 },
            Record::Task { tid: 12 },
            Record::Exec { file: 0, vaddr: 0x40_0000, text: 4096, data: 4096, data_off: 0, bss: 0 },
            Record::Access { kind: K_LOAD, page: 0x0400, repeat: 0 },
            Record::Exit { code: 1 },
            Record::Summary { json: "{\"status\":0}".into() },
        ]
    }

    fn encode(rs: &[Record]) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new()).unwrap();
        for r in rs {
            w.write(r).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn round_trip() {
        let rs = sample();
        let bytes = encode(&rs);
        assert_eq!(&bytes[..8], MAGIC);
        // Chunks are written when their task's buffer fills or at the end:
        // the globals come first, then each task's records.
        let back = TraceReader::new(&bytes[..]).unwrap().read_all().unwrap();
        let globals: Vec<&Record> = rs.iter().filter(|r| !r.is_task_record() && !matches!(r, Record::Task { .. })).collect();
        assert_eq!(back.iter().take(globals.len()).collect::<Vec<_>>(), globals);
        let tasks: Vec<Record> = rs.iter().filter(|r| r.is_task_record() || matches!(r, Record::Task { .. })).cloned().collect();
        assert_eq!(back[globals.len()..], tasks[..]);
        let t = Trace::read(&bytes[..]).unwrap();
        assert_eq!((t.root, t.files.len(), t.tasks.len()), (Some(11), 1, 2));
        assert_eq!(t.task(12).unwrap().cursor().count(), 3);
    }

    #[test]
    fn a_long_task_is_written_in_chunks_that_read_back_in_order() {
        let mut rs = vec![Record::Task { tid: 1 }];
        for i in 0..40_000u64 {
            rs.push(Record::Access { kind: K_STORE, page: 0x1000 + i * 7 % 9999, repeat: i % 3 });
            if i % 1000 == 0 {
                rs.push(Record::Task { tid: 2 + i % 3 });
                rs.push(Record::Time { user_ns: i, sys_ns: 0 });
                rs.push(Record::Task { tid: 1 });
            }
        }
        let bytes = encode(&rs);
        let t = Trace::read(&bytes[..]).unwrap();
        let want: Vec<Record> = rs[1..]
            .iter()
            .scan(1u64, |cur, r| {
                if let Record::Task { tid } = r {
                    *cur = *tid;
                }
                Some((*cur, r.clone()))
            })
            .filter(|(c, r)| *c == 1 && !matches!(r, Record::Task { .. }))
            .map(|x| x.1)
            .collect();
        assert_eq!(t.task(1).unwrap().cursor().collect::<Vec<_>>(), want);
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        let mut chunks = 0;
        while let Some(it) = r.next_item().unwrap() {
            chunks += matches!(it, Item::Chunk { tid: 1, .. }) as u32;
        }
        assert!(chunks > 1, "{chunks}");
    }

    #[test]
    fn bad_inputs_are_one_line_errors() {
        let bytes = encode(&sample());
        let err = |b: &[u8]| TraceReader::new(b).and_then(|r| r.read_all()).unwrap_err();
        assert!(err(b"").contains("bad magic"));
        assert!(err(b"FOLIOTRC\x03").contains("truncated"));
        let mut newer = bytes.clone();
        newer[8] = VERSION as u8 + 1;
        assert!(err(&newer).contains("newer"), "{}", err(&newer));
        for cut in [17, bytes.len() / 2, bytes.len() - 1] {
            let e = err(&bytes[..cut]);
            assert!(e.contains("truncated") || e.contains("corrupt"), "{cut}: {e}");
        }
        let mut flipped = bytes.clone();
        let n = flipped.len();
        flipped[n - 6] ^= 0x55;
        assert!(err(&flipped).contains("corrupt") || err(&flipped).contains("truncated"));
        for e in [err(b""), err(&newer), err(&bytes[..20])] {
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn an_older_format_or_another_machine_names_what_differs() {
        let mut w = TraceWriter::with_header(Vec::new(), 2, PAGE_SHIFT, EM_X86_64).unwrap();
        w.write_global(&Record::Meta { json: "{}".into() }).unwrap();
        let e = TraceReader::new(&w.finish().unwrap()[..]).err().unwrap();
        assert!(e.contains("version 2 is older") && e.contains("record the program again"), "{e}");
        let w = TraceWriter::with_header(Vec::new(), VERSION, 16, 183).unwrap();
        let e = TraceReader::new(&w.finish().unwrap()[..]).err().unwrap();
        assert!(e.contains("aarch64") && e.contains("64 KiB pages"), "{e}");
        let w = TraceWriter::with_header(Vec::new(), VERSION, 12, 183).unwrap();
        let e = TraceReader::new(&w.finish().unwrap()[..]).err().unwrap();
        assert!(e.contains("aarch64, 4 KiB pages"), "{e}");
    }

    #[test]
    fn a_file_used_but_never_declared_is_refused() {
        let rs = [Record::Task { tid: 1 }, Record::Read { file: 0, off: 0, len: 1 }];
        let e = TraceReader::new(&encode(&rs)[..]).unwrap().read_all().unwrap_err();
        assert!(e.contains("file 0 is used but never declared"), "{e}");
        // Declared after its use (a recorder learns sizes at the end): fine.
        let rs = [rs[0].clone(), rs[1].clone(), Record::File { size: 1, path: "/x".into(), flags: 0 }];
        assert!(TraceReader::new(&encode(&rs)[..]).unwrap().read_all().is_ok());
    }

    #[test]
    fn varints_and_zigzag() {
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        let mut b = Vec::new();
        put_varint(&mut b, u64::MAX);
        assert_eq!(b.len(), 10);
    }
}
