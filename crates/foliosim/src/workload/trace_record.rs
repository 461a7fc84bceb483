//! Converting a valgrind log into a foliosim trace (used by `foliosim record`).
//!
//! The log comes from `valgrind --tool=lackey --trace-mem=yes
//! --trace-syscalls=yes`: lackey's memory accesses (`I  addr,size`,
//! ` L addr,size`, ` S addr,size`, ` M addr,size`) and the core's trace of the
//! client's system calls, in program order, in one stream. The syscalls are
//! taken from valgrind rather than from strace because under valgrind the
//! client's mappings are placed by valgrind: only its own trace has the
//! addresses the accesses use.
//!
//! Accesses are collapsed per page run: consecutive accesses to one 4 KiB
//! page become one record with a repeat count, except that a store after
//! loads/fetches of the same page starts a new record (a write to a page
//! mapped read-only, e.g. the zero page, faults again). `M` (modify) is a
//! store. Pages touched outside every recorded mapping become `Region`s.
//!
//! One log is one valgrind instance (one process between two execve);
//! `trace_procs` puts the logs of a process tree together. Here, a fork is
//! the core's "created child N" line and a wait4 its result.

use super::trace_format::{Record, TraceWriter, K_IFETCH, K_LOAD, K_STORE};
use super::trace_ranges::KnownRanges;
use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, Write};

/// Size of a file named in the log, where the recorder can stat it.
type FileSizeFn = Box<dyn Fn(&str) -> Option<u64>>;
/// The trace's File indices by canonical path, shared by every log of a tree.
pub(super) type Files = HashMap<String, u32>;

#[derive(Debug, Default, serde::Serialize)]
pub struct RecordStats {
    pub records: u64,
    pub accesses: u64,
    pub access_records: u64,
    pub syscalls: u64,
    pub files: u64,
    pub regions: u64,
    pub region_pages: u64,
    pub log_lines: u64,
    /// From the log's preamble ("Parent PID: N"); 0 when missing.
    pub parent: u64,
    /// exit_group's argument, if the log has it.
    pub exit_code: Option<u64>,
}

pub(super) struct Conv<W: Write> {
    w: TraceWriter<W>,
    /// The task whose records these are (the log's process).
    tid: u64,
    st: RecordStats,
    run: Option<(u8, u64, u64)>,
    known: KnownRanges,
    implicit: BTreeSet<u64>,
    files: Files,
    fd_path: HashMap<i64, String>,
    /// Per thread: a syscall whose result comes on a later line.
    pending: HashMap<String, (u32, Vec<String>)>,
    file_size: FileSizeFn,
}

fn num(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.split('(').next()?.trim();
    if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else if let Some(n) = s.strip_prefix('-') {
        n.parse::<u64>().ok().map(|v| v.wrapping_neg())
    } else {
        s.parse().ok()
    }
}

/// `0x4034bb0(/path/to/file)` -> `/path/to/file`.
fn path_arg(s: &str) -> Option<String> {
    let a = s.find('(')?;
    let b = s.rfind(')')?;
    (b > a + 1).then(|| s[a + 1..b].to_string())
}

impl<W: Write> Conv<W> {
    pub(super) fn put(&mut self, r: Record) -> Result<(), String> {
        self.st.records += 1;
        let res = if r.is_task_record() { self.w.write_task(self.tid, &r) } else { self.w.write_global(&r) };
        res.map_err(|e| format!("cannot write the trace: {e}"))
    }

    fn flush_run(&mut self) -> Result<(), String> {
        if let Some((kind, page, repeat)) = self.run.take() {
            self.st.access_records += 1;
            self.put(Record::Access { kind, page, repeat })?;
        }
        Ok(())
    }

    pub(super) fn know(&mut self, a: u64, len: u64) {
        self.known.know(a, len);
    }

    fn access(&mut self, kind: u8, addr: u64, size: u64) -> Result<(), String> {
        let first = addr >> 12;
        let last = addr.saturating_add(size.max(1) - 1) >> 12;
        for page in first..=last.min(first + 1) {
            self.st.accesses += 1;
            if !self.known.covered(page << 12) {
                self.implicit.insert(page);
            }
            match &mut self.run {
                Some((k, p, rep)) if *p == page && (kind != K_STORE || *k == K_STORE) => *rep += 1,
                _ => {
                    self.flush_run()?;
                    self.run = Some((kind, page, 0));
                }
            }
        }
        Ok(())
    }

    /// The File index of `path`, declared on first use. Files are known by
    /// their canonical path, so ld.so's /lib/... and the loader's /usr/lib/...
    /// are one file (one page cache) when replayed.
    pub(super) fn file_index(&mut self, path: &str, need: u64) -> Result<u32, String> {
        let canon = std::fs::canonicalize(path).ok().and_then(|p| p.to_str().map(str::to_string));
        let path = canon.as_deref().unwrap_or(path);
        if let Some(&i) = self.files.get(path) {
            return Ok(i);
        }
        let i = self.files.len() as u32;
        self.files.insert(path.to_string(), i);
        let size = (self.file_size)(path).unwrap_or(0).max(need);
        self.st.files += 1;
        self.put(Record::File { size, path: path.to_string(), flags: 0 })?;
        Ok(i)
    }

    /// A completed syscall `nr` with its argument strings and result.
    fn syscall(&mut self, nr: u32, args: &[String], ret: Result<u64, u64>) -> Result<(), String> {
        let a = |i: usize| args.get(i).and_then(|s| num(s)).unwrap_or(0);
        let Ok(ret) = ret else { return Ok(()) };
        match nr {
            // A WNOHANG wait4 that reaped a child (a blocking one is a Wait
            // where it was called: see `line`).
            61 if ret != 0 && a(2) & 1 != 0 => {
                self.flush_run()?;
                return self.put(Record::Wait { child: ret, flags: super::trace_format::WAIT_NOHANG });
            }
            // open, openat: remember the fd's path
            2 | 257 => {
                let p = if nr == 2 { args.first() } else { args.get(1) };
                if let Some(p) = p.and_then(|s| path_arg(s)) {
                    self.fd_path.insert(ret as i64, p);
                }
                return Ok(());
            }
            3 => {
                self.fd_path.remove(&(a(0) as i64));
                return Ok(());
            }
            _ => {}
        }
        if !matches!(nr, 9 | 11 | 10 | 12 | 25 | 28) {
            return Ok(());
        }
        self.flush_run()?;
        self.st.syscalls += 1;
        match nr {
            9 => {
                let (addr, len, prot, flags, fd, off) = (a(0), a(1), a(2) as u32, a(3) as u32, a(4) as i64 as i32, a(5));
                let file = if flags & 0x20 == 0 {
                    let path = self.fd_path.get(&(fd as i64)).cloned().unwrap_or_else(|| format!("fd:{fd}"));
                    Some(self.file_index(&path, off + len)?)
                } else {
                    None
                };
                self.known.know(ret, len);
                self.put(Record::Mmap { addr, len, prot, flags, file, off, ret })
            }
            11 => {
                self.known.forget(a(0), a(1));
                self.put(Record::Munmap { addr: a(0), len: a(1) })
            }
            10 => self.put(Record::Mprotect { addr: a(0), len: a(1), prot: a(2) as u32 }),
            28 => self.put(Record::Madvise { addr: a(0), len: a(1), advice: a(2) as u32 }),
            12 => {
                self.known.brk(ret);
                self.put(Record::Brk { addr: a(0), ret })
            }
            25 => {
                self.known.forget(a(0), a(1));
                self.known.know(ret, a(2));
                self.put(Record::Mremap { addr: a(0), old_len: a(1), new_len: a(2), flags: a(3) as u32, ret })
            }
            _ => Ok(()),
        }
    }

    fn line(&mut self, l: &str) -> Result<(), String> {
        self.st.log_lines += 1;
        if l.starts_with("==") {
            if let Some((_, p)) = l.split_once("Parent PID: ") {
                self.st.parent = p.trim().parse().unwrap_or(0);
            }
            return Ok(());
        }
        let b = l.as_bytes();
        if b.len() > 3 && (b[0] == b'I' || b[0] == b' ') && !l.starts_with("==") {
            let kind = match (b[0], b[1]) {
                (b'I', b' ') => K_IFETCH,
                (b' ', b'L') => K_LOAD,
                (b' ', b'S') | (b' ', b'M') => K_STORE,
                _ => return Ok(()),
            };
            let rest = l[2..].trim();
            let (addr, size) = rest.split_once(',').unwrap_or((rest, "1"));
            if let (Ok(a), Ok(s)) = (u64::from_str_radix(addr.trim(), 16), size.trim().parse::<u64>()) {
                self.access(kind, a, s)?;
            }
            return Ok(());
        }
        let Some(rest) = l.strip_prefix("SYSCALL[") else { return Ok(()) };
        let Some((tid, rest)) = rest.split_once(']') else { return Ok(()) };
        let Some(rest) = rest.strip_prefix('(') else { return Ok(()) };
        let Some((nr, rest)) = rest.split_once(')') else { return Ok(()) };
        let Ok(nr) = nr.parse::<u32>() else { return Ok(()) };
        let rest = rest.trim_start();
        if let Some((_, child)) = rest.split_once("created child ") {
            // fork, vfork (valgrind runs it as a fork) or a clone without CLONE_VM
            // (Its result, " --> ...", may have been joined to the line.)
            if let Some(Ok(child)) = child.split_whitespace().next().map(str::parse::<u64>) {
                self.flush_run()?;
                return self.put(Record::Fork { child });
            }
            return Ok(());
        }
        if nr == 231 {
            // exit_group( N ) --> ...
            self.st.exit_code = rest.split_once('(').and_then(|(_, a)| a.split_once(')')).and_then(|(a, _)| num(a));
            return Ok(());
        }
        let result = |s: &str| -> Option<Result<u64, u64>> {
            let (_, r) = s.rsplit_once("-->")?;
            let r = r.trim();
            let r = r.rsplit(' ').next().unwrap_or(r);
            if let Some(v) = r.strip_prefix("Success(").and_then(|v| v.strip_suffix(')')) {
                return num(v).map(Ok);
            }
            if let Some(v) = r.strip_prefix("Failure(").and_then(|v| v.strip_suffix(')')) {
                return num(v).map(Err);
            }
            None
        };
        if let Some(r) = rest.strip_prefix("...") {
            // The completion of an async syscall.
            if let (Some((pnr, args)), Some(res)) = (self.pending.remove(tid), result(r)) {
                if pnr == nr {
                    return self.syscall(nr, &args, res);
                }
            }
            return Ok(());
        }
        // sys_NAME ( a, b, c ) --> ...
        let (Some(open), Some(close)) = (rest.find(" ( "), rest.rfind(" )")) else { return Ok(()) };
        let args: Vec<String> =
            if close >= open + 3 { rest[open + 3..close].split(", ").map(|s| s.to_string()).collect() } else { Vec::new() };
        let tail = &rest[close..];
        if nr == 61 && args.get(2).and_then(|s| num(s)).is_some_and(|o| o & 1 == 0) {
            // A blocking wait4, at its call: valgrind does not always print
            // its completion (not when a SIGCHLD handler ran meanwhile).
            let pid = args.first().and_then(|s| num(s)).unwrap_or(0);
            self.flush_run()?;
            return self.put(Record::Wait { child: if pid as i32 > 0 { pid } else { 0 }, flags: 0 });
        }
        if tail.contains("[async]") && !tail.contains("Success(") && !tail.contains("Failure(") {
            self.pending.insert(tid.to_string(), (nr, args));
            return Ok(());
        }
        match result(tail) {
            Some(res) => self.syscall(nr, &args, res),
            None => Ok(()),
        }
    }

    pub(super) fn finish(mut self) -> Result<(TraceWriter<W>, RecordStats, Files), String> {
        self.flush_run()?;
        // Implicit regions: runs of contiguous pages.
        let pages: Vec<u64> = self.implicit.iter().copied().collect();
        let mut i = 0;
        while i < pages.len() {
            let mut j = i;
            while j + 1 < pages.len() && pages[j + 1] == pages[j] + 1 {
                j += 1;
            }
            self.st.regions += 1;
            self.st.region_pages += (j - i + 1) as u64;
            self.put(Record::Region { addr: pages[i] << 12, len: ((j - i + 1) as u64) << 12 })?;
            i = j + 1;
        }
        Ok((self.w, self.st, self.files))
    }
}

/// Convert a valgrind lackey+syscall log into a trace written to `out`.
/// `file_size(path)` gives the size of a mapped file (None: unknown).
/// The log's process is task 1, the trace's root.
pub fn from_valgrind_log<R: BufRead, W: Write>(log: R, out: W, meta_json: &str, file_size: FileSizeFn) -> Result<(W, RecordStats), String> {
    let w = TraceWriter::new(out).map_err(|e| format!("cannot write the trace: {e}"))?;
    let (w, st, _) = convert(log, w, 1, file_size, Files::new(), |c| {
        c.put(Record::Meta { json: meta_json.to_string() })?;
        c.put(Record::Root { tid: 1 })
    })?;
    Ok((w.finish().map_err(|e| format!("cannot write the trace: {e}"))?, st))
}

/// Convert one log into records of task `tid` written to `w`; `start`
/// writes the first records (and may declare known ranges) before the
/// log's. Returns the writer, to go on with the next log.
pub(super) fn convert<R: BufRead, W: Write>(
    mut log: R,
    w: TraceWriter<W>,
    tid: u64,
    file_size: FileSizeFn,
    files: Files,
    start: impl FnOnce(&mut Conv<W>) -> Result<(), String>,
) -> Result<(TraceWriter<W>, RecordStats, Files), String> {
    let mut c = Conv {
        w,
        tid,
        st: RecordStats::default(),
        run: None,
        known: KnownRanges::default(),
        implicit: BTreeSet::new(),
        files,
        fd_path: HashMap::new(),
        pending: HashMap::new(),
        file_size,
    };
    start(&mut c)?;
    let mut buf = Vec::with_capacity(256);
    // A message of valgrind's own at `-v` ("--PID-- Reading syms from ..."
    // for the file a mmap maps, with more lines at `-v -v`) can come between
    // a call and its result: the result line (" --> ...") is joined back to
    // the call it ends.
    let mut open_call: Option<String> = None;
    loop {
        buf.clear();
        let n = log.read_until(b'\n', &mut buf).map_err(|e| format!("cannot read the valgrind log: {e}"))?;
        if n == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&buf);
        let l = text.trim_end_matches(['\n', '\r']);
        let b = l.as_bytes();
        let record = l.starts_with("SYSCALL[") || (b.len() > 2 && matches!((b[0], b[1]), (b'I', b' ') | (b' ', b'L' | b'S' | b'M')));
        if let Some(call) = open_call.take() {
            if l.starts_with(" -->") {
                c.line(&format!("{call}{l}"))?;
                continue;
            }
            if !record {
                c.line(l)?; // valgrind's message: the call stays open
                open_call = Some(call);
                continue;
            }
            c.line(&call)?; // a call without a result
        }
        if l.starts_with("SYSCALL[") && !l.contains("-->") {
            open_call = Some(l.to_string());
            continue;
        }
        c.line(l)?;
    }
    if let Some(call) = open_call {
        c.line(&call)?;
    }
    c.finish()
}

/// Convert the log at `log_path` (a file or FIFO) into the trace `out_path`.
pub fn convert_files(log_path: &str, out_path: &str, meta_json: &str) -> Result<RecordStats, String> {
    let f = std::fs::File::open(log_path).map_err(|e| format!("{log_path}: {e}"))?;
    let o = std::fs::File::create(out_path).map_err(|e| format!("{out_path}: {e}"))?;
    let (o, st) = from_valgrind_log(
        std::io::BufReader::with_capacity(1 << 20, f),
        std::io::BufWriter::new(o),
        meta_json,
        Box::new(|p| std::fs::metadata(p).ok().map(|m| m.len())),
    )?;
    let f = o.into_inner().map_err(|e| format!("{out_path}: {e}"))?;
    f.sync_all().map_err(|e| format!("{out_path}: {e}"))?;
    Ok(st)
}

/// `convert_files`, statistics as JSON.
pub fn convert_files_json(log_path: &str, out_path: &str, meta_json: &str) -> Result<String, String> {
    convert_files(log_path, out_path, meta_json).map(|st| serde_json::to_string(&st).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::super::trace_format::TraceReader;
    use super::*;

    const LOG: &str = "\
==1== Lackey, an example Valgrind tool
SYSCALL[7,1](12) sys_brk ( 0x0 ) --> [pre-success] Success(0x4035000) 
I  04020c9c,5
SYSCALL[7,1](257) sys_openat ( 4294967196, 0x4034bb0(/lib/libz.so), 524288 ) --> [async] ... 
SYSCALL[7,1](257) ... [async] --> Success(0x4) 
SYSCALL[7,1](9) sys_mmap ( 0x0, 16400, 1, 2050, 4, 0 ) --> [pre-success] Success(0x4837000) 
SYSCALL[7,1](9) sys_mmap ( 0x0, 8192, 3, 34, 4294967295, 0 ) --> [pre-success] Success(0x4900000) 
 L 04837010,8
 L 04837018,8
 S 04837020,8
 M 04900ffc,8
SYSCALL[7,1](12) sys_brk ( 0x4056000 ) --> [pre-success] Success(0x4056000) 
 S 04035008,4
SYSCALL[7,1](11) sys_munmap ( 0x4900000, 8192 )[sync] --> Success(0x0) 
SYSCALL[7,1](102) sys_getuid ( )[sync] --> Success(0x0) 
SYSCALL[7,1](9) sys_mmap ( 0x0 
SYSCALL[7,1](21) sys_access ( 0x402a2a0(/etc/ld.so.preload), 4 )[sync] --> Failure(0x2) 
SYSCALL[7,1](9) sys_mmap ( 0x0, 8192, 3, 34, 4294967295, 0 ) --> [pre-success] Failure(0xc) 
";

    #[test]
    fn converts_syscalls_accesses_and_regions() {
        let (bytes, st) =
            from_valgrind_log(LOG.as_bytes(), Vec::new(), "{}", Box::new(|p| (p == "/lib/libz.so").then_some(20000))).unwrap();
        let rs = TraceReader::new(&bytes[..]).unwrap().read_all().unwrap();
        let want = vec![
            Record::Meta { json: "{}".into() },
            Record::Root { tid: 1 },
            // Global: before the task's chunk.
            Record::File { size: 20000, path: "/lib/libz.so".into(), flags: 0 },
            Record::Task { tid: 1 },
            Record::Brk { addr: 0, ret: 0x4035000 },
            Record::Access { kind: K_IFETCH, page: 0x4020, repeat: 0 },
            Record::Mmap { addr: 0, len: 16400, prot: 1, flags: 2050, file: Some(0), off: 0, ret: 0x4837000 },
            Record::Mmap { addr: 0, len: 8192, prot: 3, flags: 34, file: None, off: 0, ret: 0x4900000 },
            // two loads collapse; the store to the same page starts a new record
            Record::Access { kind: K_LOAD, page: 0x4837, repeat: 1 },
            Record::Access { kind: K_STORE, page: 0x4837, repeat: 0 },
            // an 8-byte modify crossing a page boundary touches both pages
            Record::Access { kind: K_STORE, page: 0x4900, repeat: 0 },
            Record::Access { kind: K_STORE, page: 0x4901, repeat: 0 },
            Record::Brk { addr: 0x4056000, ret: 0x4056000 },
            Record::Access { kind: K_STORE, page: 0x4035, repeat: 0 },
            Record::Munmap { addr: 0x4900000, len: 8192 },
            // ld.so's page (no recorded mapping) becomes a Region
            Record::Region { addr: 0x4020000, len: 4096 },
        ];
        assert_eq!(rs, want);
        assert_eq!((st.syscalls, st.files, st.regions, st.accesses), (5, 1, 1, 7));
    }

    /// At `-v -v` valgrind's messages for a mapping come between the mmap
    /// call and its result; the call is still recorded, with its result.
    #[test]
    fn a_call_split_by_valgrinds_messages_is_joined() {
        let split = LOG.replace(
            "SYSCALL[7,1](9) sys_mmap ( 0x0, 16400, 1, 2050, 4, 0 ) --> [pre-success] Success(0x4837000) \n",
            "SYSCALL[7,1](9) sys_mmap ( 0x0, 16400, 1, 2050, 4, 0 )\n--7-- Reading syms from /lib/libz.so\n\
             --7--    svma 0x0000002040, avma 0x0004839040\n--7-- summarise_context(loc_start = 0x10): cannot summarise(why=1):   \n\
             0x30a: [0]={ 56(r3) { u  u  u  c-56 u  u }\n --> [pre-success] Success(0x4837000) \n",
        );
        let size = || Box::new(|p: &str| (p == "/lib/libz.so").then_some(20000));
        let (a, _) = from_valgrind_log(LOG.as_bytes(), Vec::new(), "{}", size()).unwrap();
        let (b, st) = from_valgrind_log(split.as_bytes(), Vec::new(), "{}", size()).unwrap();
        assert_eq!(TraceReader::new(&b[..]).unwrap().read_all().unwrap(), TraceReader::new(&a[..]).unwrap().read_all().unwrap());
        assert_eq!(st.syscalls, 5);
        // A fork's result comes on the next line: the child is still found.
        let fork = "SYSCALL[7,1](58) sys_fork ( )   fork: process 7 created child 9\n --> [pre-success] Success(0x9) \n";
        let (f, _) = from_valgrind_log(fork.as_bytes(), Vec::new(), "{}", size()).unwrap();
        assert!(TraceReader::new(&f[..]).unwrap().read_all().unwrap().contains(&Record::Fork { child: 9 }));
    }
}
