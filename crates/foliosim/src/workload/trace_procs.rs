//! A recorded process tree: the logs of `valgrind --trace-children=yes
//! --child-silent-after-fork=yes -v -v --log-file=DIR/log.%p.%n` put
//! together into one trace (used by `foliosim record`).
//!
//! Each valgrind instance (a process from its execve to its exit or next
//! execve) writes its own log `log.PID.N`; `trace_record` converts each. A
//! forked child is silent until it execs (gcc's vfork+execvp children do
//! nothing else worth replaying), so every child's records start at an exec.
//! valgrind's loader, not a recorded call, maps the program and its ELF
//! interpreter. At verbosity 2 each log names them before the client runs
//! ("Reading syms from PATH", then "svma S, avma A": the load bias is A - S)
//! and their ELF program headers give the segments the loader mapped, as
//! the kernel maps them. Each instance gets an `Exec` (the program's
//! segments) and file-backed `Mmap`s (ld.so) from them, so they replay over
//! the page cache instead of as anonymous `Region`s. (valgrind's `-d`
//! prints the same layout, but it keeps fd 2 for itself: a program that
//! closes its stderr and checks the result, as xz and mawk do, fails.)
//!
//! Each process is a task of the trace (its pid): its instances in order,
//! its `Fork`/`Wait` records where it made the calls, and an `Exit` at the
//! end.

use super::map;
use super::trace_format::{Record, TraceReader, TraceWriter};
use super::trace_record::{convert, Conv, Files, RecordStats};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// A client segment of the memory layout at client startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seg {
    pub start: u64,
    /// Exclusive.
    pub end: u64,
    pub prot: u32,
    /// File offset and path; None for anonymous memory.
    pub file: Option<(u64, String)>,
}

/// The ELF objects valgrind's loader mapped for one instance, in the order
/// its log names them (the program, then its interpreter), with their load
/// bias: the "Reading syms from" entries before the client's first record,
/// less valgrind's own (its library directory).
pub fn loaded_objects<R: BufRead>(log: R) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut valgrind_dir: Option<String> = None;
    let mut reading: Option<String> = None;
    for l in log.lines() {
        let Ok(l) = l else { break };
        let b = l.as_bytes();
        let access = b.len() > 2 && matches!((b[0], b[1]), (b'I', b' ') | (b' ', b'L' | b'S' | b'M'));
        if access || l.starts_with("SYSCALL[") {
            break; // the client runs: later objects are its own mmaps
        }
        let Some(rest) = l.strip_prefix("--") else { continue };
        let Some((_, body)) = rest.split_once("-- ") else { continue };
        if let Some(d) = body.strip_prefix("Valgrind library directory: ") {
            valgrind_dir = Some(format!("{}/", d.trim()));
        } else if let Some(p) = body.strip_prefix("Reading syms from ") {
            let p = p.trim().to_string();
            reading = (!valgrind_dir.as_ref().is_some_and(|d| p.starts_with(d.as_str()))).then_some(p);
        } else if let (Some(p), Some(addrs)) = (&reading, body.trim().strip_prefix("svma ")) {
            let hex = |x: &str| u64::from_str_radix(x.trim().trim_start_matches("0x"), 16).ok();
            if let Some((sv, av)) = addrs.split_once(", avma ") {
                if let (Some(sv), Some(av)) = (hex(sv), hex(av)) {
                    out.push((p.clone(), av.wrapping_sub(sv)));
                }
            }
            reading = None;
        }
    }
    out
}

/// The segments the loader maps for the ELF file `path` at load bias
/// `bias`: each PT_LOAD's file pages, and the anonymous pages of its bss
/// beyond them. None if the file is not a 64-bit little-endian ELF.
pub fn elf_segments(path: &str, bias: u64) -> Option<Vec<Seg>> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut h = [0u8; 64];
    f.read_exact(&mut h).ok()?;
    if &h[..4] != b"\x7fELF" || h[4] != 2 || h[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]) as u64;
    let u64_at = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    let (phoff, phentsize, phnum) = (u64_at(&h, 32), u16_at(&h, 54), u16_at(&h, 56));
    if phentsize < 56 || phnum > 256 {
        return None;
    }
    let mut ph = vec![0u8; (phentsize * phnum) as usize];
    f.seek(SeekFrom::Start(phoff)).ok()?;
    f.read_exact(&mut ph).ok()?;
    let page = |x: u64| x & !0xfff;
    let page_up = |x: u64| (x + 0xfff) & !0xfff;
    let mut segs = Vec::new();
    for e in ph.chunks(phentsize as usize) {
        if u32::from_le_bytes([e[0], e[1], e[2], e[3]]) != 1 {
            continue; // not PT_LOAD
        }
        let flags = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        let (off, vaddr, filesz, memsz) = (u64_at(e, 8), u64_at(e, 16), u64_at(e, 32), u64_at(e, 40));
        // PF_R 4, PF_W 2, PF_X 1 -> PROT_READ 1, PROT_WRITE 2, PROT_EXEC 4
        let prot = (flags & 4 != 0) as u32 | (flags & 2) | ((flags & 1 != 0) as u32) << 2;
        let start = page(bias.wrapping_add(vaddr));
        let file_end = page_up(bias.wrapping_add(vaddr).wrapping_add(filesz));
        let mem_end = page_up(bias.wrapping_add(vaddr).wrapping_add(memsz));
        if file_end > start {
            segs.push(Seg { start, end: file_end, prot, file: Some((page(off), path.to_string())) });
        }
        if mem_end > file_end {
            segs.push(Seg { start: file_end, end: mem_end, prot, file: None });
        }
    }
    Some(segs)
}

/// The startup layout of the instance that wrote `log`: the program's
/// segments (and bss), then the interpreter's.
pub fn startup_layout(log: &Path) -> Vec<Seg> {
    let Ok(f) = std::fs::File::open(log) else { return Vec::new() };
    loaded_objects(BufReader::new(f)).iter().filter_map(|(p, bias)| elf_segments(p, *bias)).flatten().collect()
}

/// The program's image in a startup layout: the run of segments of the
/// first mapped file, the anonymous segment right after it (bss), and the
/// other file segments (the ELF interpreter).
#[derive(Debug, PartialEq, Eq)]
pub struct Image {
    pub path: String,
    pub vaddr: u64,
    pub text: u64,
    pub data: u64,
    pub data_off: u64,
    pub bss: u64,
    pub others: Vec<Seg>,
}

pub fn image(segs: &[Seg]) -> Option<Image> {
    let first = segs.iter().position(|s| s.file.is_some())?;
    let path = segs[first].file.as_ref()?.1.clone();
    let mut last = first;
    while last + 1 < segs.len() && segs[last + 1].file.as_ref().is_some_and(|f| f.1 == path) && segs[last + 1].start == segs[last].end {
        last += 1;
    }
    let own = &segs[first..=last];
    let vaddr = own[0].start;
    let end = own[last - first].end;
    let (text, data, data_off) = match own.iter().find(|s| s.prot & 2 != 0) {
        Some(d) => (d.start - vaddr, end - d.start, d.file.as_ref().map_or(0, |f| f.0)),
        None => (end - vaddr, 0, 0),
    };
    let bss = segs.get(last + 1).filter(|s| s.file.is_none() && s.start == end).map_or(0, |s| s.end - s.start);
    let others = segs.iter().enumerate().filter(|&(i, s)| (i < first || i > last) && s.file.is_some()).map(|(_, s)| s.clone()).collect();
    Some(Image { path, vaddr, text, data, data_off, bss, others })
}

/// The first records of an instance: its exec and its interpreter's mappings.
fn put_image<W: Write>(c: &mut Conv<W>, img: &Image) -> Result<(), String> {
    let file = c.file_index(&img.path, (img.text + img.data).max(img.data_off + img.data))?;
    c.put(Record::Exec { file, vaddr: img.vaddr, text: img.text, data: img.data, data_off: img.data_off, bss: img.bss })?;
    c.know(img.vaddr, img.text + img.data + img.bss);
    for s in &img.others {
        let Some((off, path)) = &s.file else { continue };
        let len = s.end - s.start;
        let file = c.file_index(path, off + len)?;
        c.put(Record::Mmap { addr: 0, len, prot: s.prot, flags: map::PRIVATE, file: Some(file), off: *off, ret: s.start })?;
        c.know(s.start, len);
    }
    Ok(())
}

/// The logs in `dir` (`log.PID.N`), by pid and instance number.
fn logs(dir: &Path) -> Result<BTreeMap<u64, BTreeMap<u64, std::path::PathBuf>>, String> {
    let mut m: BTreeMap<u64, BTreeMap<u64, std::path::PathBuf>> = BTreeMap::new();
    for e in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = e.file_name().to_string_lossy().to_string();
        let mut it = name.strip_prefix("log.").into_iter().flat_map(|r| r.split('.'));
        if let (Some(Ok(pid)), Some(Ok(n)), None) = (it.next().map(str::parse::<u64>), it.next().map(str::parse::<u64>), it.next()) {
            m.entry(pid).or_default().insert(n, e.path());
        }
    }
    Ok(m)
}

/// One valgrind instance (a process from its execve to its exit or next
/// execve) converted by itself: its pid, its place among the pid's
/// instances, its records as a trace of their own (task = pid).
pub struct Instance {
    pub pid: u64,
    pub seq: u64,
    pub bytes: Vec<u8>,
    pub stats: RecordStats,
}

fn is_record_line(l: &[u8]) -> bool {
    l.starts_with(b"SYSCALL[") || (l.len() > 2 && matches!((l[0], l[1]), (b'I', b' ') | (b' ', b'L' | b'S' | b'M')))
}

/// The pid of a log's preamble lines ("==PID== ..." or "--PID-- ...").
fn pid_of(head: &[u8]) -> Option<u64> {
    head.split(|&c| c == b'\n').find_map(|l| {
        let l = std::str::from_utf8(l).ok()?;
        let rest = l.strip_prefix("==").or_else(|| l.strip_prefix("--"))?;
        let (n, _) = rest.split_once(if l.starts_with("==") { "==" } else { "--" })?;
        n.parse().ok()
    })
}

/// Convert one instance's log, a file or a socket's stream, by itself. Its
/// head (up to the client's first record) names the ELF objects valgrind's
/// loader mapped; it is read first and then fed to the converter.
pub fn convert_instance<R: BufRead>(mut log: R, seq: u64, pid: Option<u64>) -> Result<Instance, String> {
    let mut head = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = log.read_until(b'\n', &mut line).map_err(|e| format!("cannot read valgrind's log: {e}"))?;
        head.extend_from_slice(&line);
        if n == 0 || is_record_line(&line) {
            break;
        }
    }
    let pid = pid.or_else(|| pid_of(&head)).ok_or("a valgrind log without its pid (no ==PID== line)")?;
    let segs: Vec<Seg> = loaded_objects(&head[..]).iter().filter_map(|(p, bias)| elf_segments(p, *bias)).flatten().collect();
    let img = image(&segs);
    let w = TraceWriter::new(Vec::new()).map_err(|e| format!("cannot write the trace: {e}"))?;
    let size = Box::new(|p: &str| std::fs::metadata(p).ok().map(|m| m.len()));
    let (w, stats, _) =
        convert(std::io::Cursor::new(head).chain(log), w, pid, size, Files::new(), |c| img.as_ref().map_or(Ok(()), |i| put_image(c, i)))?;
    let bytes = w.finish().map_err(|e| format!("cannot write the trace: {e}"))?;
    Ok(Instance { pid, seq, bytes, stats })
}

/// Put converted instances together into the trace `out_path`: the root
/// process first, each process's instances in order, its File indices made
/// the trace's, an `Exit` after each process.
pub fn assemble(mut instances: Vec<Instance>, out_path: &Path, meta_json: &str, root: u64) -> Result<RecordStats, String> {
    if !instances.iter().any(|i| i.pid == root) {
        return Err(format!("valgrind wrote no log for the recorded command (pid {root})"));
    }
    instances.sort_by_key(|i| (i.pid != root, i.pid, i.seq));
    let o = std::fs::File::create(out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let werr = |e: std::io::Error| format!("cannot write the trace: {e}");
    let mut w = TraceWriter::new(std::io::BufWriter::new(o)).map_err(werr)?;
    w.write_global(&Record::Meta { json: meta_json.to_string() }).map_err(werr)?;
    w.write_global(&Record::Root { tid: root }).map_err(werr)?;
    let mut total = RecordStats::default();
    let mut files = Files::new();
    let mut k = 0;
    while k < instances.len() {
        let pid = instances[k].pid;
        let mut exit_code = 0;
        while k < instances.len() && instances[k].pid == pid {
            let inst = &instances[k];
            exit_code = inst.stats.exit_code.unwrap_or(exit_code);
            add(&mut total, &inst.stats);
            let mut local: Vec<u32> = Vec::new();
            for rec in TraceReader::new(&inst.bytes[..])?.read_all()? {
                let g = |f: u32| local.get(f as usize).copied().unwrap_or(f);
                let rec = match rec {
                    Record::File { size, path, flags } => {
                        let n = files.len() as u32;
                        let gi = *files.entry(path.clone()).or_insert(n);
                        if gi == n {
                            w.write_global(&Record::File { size, path, flags }).map_err(werr)?;
                        }
                        local.push(gi);
                        continue;
                    }
                    Record::Mmap { addr, len, prot, flags, file, off, ret } => {
                        Record::Mmap { addr, len, prot, flags, file: file.map(g), off, ret }
                    }
                    Record::Exec { file, vaddr, text, data, data_off, bss } => {
                        Record::Exec { file: g(file), vaddr, text, data, data_off, bss }
                    }
                    r if r.is_task_record() => r,
                    _ => continue,
                };
                w.write_task(pid, &rec).map_err(werr)?;
            }
            k += 1;
        }
        w.write_task(pid, &Record::Exit { code: exit_code }).map_err(werr)?;
        w.flush_task(pid).map_err(werr)?;
    }
    total.files = files.len() as u64;
    let o = w.finish().map_err(werr)?;
    let f = o.into_inner().map_err(|e| format!("{}: {e}", out_path.display()))?;
    f.sync_all().map_err(|e| format!("{}: {e}", out_path.display()))?;
    Ok(total)
}

/// Convert the logs of a recorded process tree in `dir` into the trace
/// `out_path`; `root` is the pid of the recorded command. Each process is
/// the task of its pid.
pub fn from_valgrind_logs(dir: &Path, out_path: &Path, meta_json: &str, root: u64) -> Result<RecordStats, String> {
    let mut instances = Vec::new();
    for (pid, logs) in logs(dir)? {
        for (n, log) in logs {
            let f = std::fs::File::open(&log).map_err(|e| format!("{}: {e}", log.display()))?;
            instances.push(convert_instance(BufReader::with_capacity(1 << 20, f), n, Some(pid))?);
        }
    }
    assemble(instances, out_path, meta_json, root)
}

/// Convert the logs valgrind streams with `--log-socket=HOST:PORT` to
/// `listener` (one connection per instance, in the order they start) into
/// the trace `out_path`, each as it arrives, until `stop` is set (valgrind
/// has exited) and every connection is read: nothing goes to disk but the
/// trace.
pub fn from_valgrind_socket(
    listener: std::net::TcpListener,
    stop: &std::sync::atomic::AtomicBool,
    out_path: &Path,
    meta_json: &str,
    root: u64,
) -> Result<RecordStats, String> {
    use std::sync::Mutex;
    listener.set_nonblocking(true).map_err(|e| format!("valgrind's log socket: {e}"))?;
    let done: Mutex<Vec<Result<Instance, String>>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let mut seq = 0;
        let r = accept_until_stopped(
            || listener.accept(),
            stop,
            |(stream, _)| {
                seq += 1;
                let (n, done) = (seq, &done);
                s.spawn(move || {
                    let r = stream
                        .set_nonblocking(false)
                        .map_err(|e| format!("valgrind's log socket: {e}"))
                        .and_then(|_| convert_instance(BufReader::with_capacity(1 << 20, stream), n, None));
                    done.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                });
            },
        );
        if let Err(e) = r {
            done.lock().unwrap_or_else(|e| e.into_inner()).push(Err(format!("valgrind's log socket: {e}")));
        }
    });
    let mut instances = Vec::new();
    for r in done.into_inner().unwrap_or_else(|e| e.into_inner()) {
        instances.push(r?);
    }
    assemble(instances, out_path, meta_json, root)
}

/// Accept connections (`accept` is non-blocking) and hand each to `on`
/// until `stop` is set and the backlog is empty. `stop` is read before the
/// accept that ends the loop: it is set once valgrind has exited, so every
/// instance's connection was made before it, and an accept begun after it
/// was seen finds them all. (Read after a WouldBlock instead, as it was, a
/// connection made and a `stop` set between the two, on a loaded host, was
/// never accepted: the trace lost that process's records, and a replay its
/// exec and its parent's reap.)
pub fn accept_until_stopped<T>(
    mut accept: impl FnMut() -> std::io::Result<T>,
    stop: &std::sync::atomic::AtomicBool,
    mut on: impl FnMut(T),
) -> std::io::Result<()> {
    loop {
        let stopping = stop.load(std::sync::atomic::Ordering::Acquire);
        match accept() {
            Ok(c) => on(c),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stopping {
                    return Ok(());
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// `from_valgrind_socket`, statistics as JSON.
pub fn from_valgrind_socket_json(
    listener: std::net::TcpListener,
    stop: &std::sync::atomic::AtomicBool,
    out_path: &str,
    meta_json: &str,
    root: u64,
) -> Result<String, String> {
    from_valgrind_socket(listener, stop, Path::new(out_path), meta_json, root).map(|st| serde_json::to_string(&st).unwrap_or_default())
}

/// A listener on a free port of 127.0.0.1 for `from_valgrind_socket`.
pub fn bind_valgrind_socket() -> Result<std::net::TcpListener, String> {
    std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot listen for valgrind's logs: {e}"))
}

fn add(t: &mut RecordStats, s: &RecordStats) {
    t.records += s.records;
    t.accesses += s.accesses;
    t.access_records += s.access_records;
    t.syscalls += s.syscalls;
    t.regions += s.regions;
    t.region_pages += s.region_pages;
    t.log_lines += s.log_lines;
}

/// `from_valgrind_logs`, statistics as JSON.
pub fn from_valgrind_logs_json(dir: &str, out_path: &str, meta_json: &str, root: u64) -> Result<String, String> {
    from_valgrind_logs(Path::new(dir), Path::new(out_path), meta_json, root).map(|st| serde_json::to_string(&st).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 file: a header and PT_LOAD program headers
    /// (flags, offset, vaddr, filesz, memsz).
    fn write_elf(path: &Path, loads: &[(u32, u64, u64, u64, u64)]) {
        let mut b = vec![0u8; 64];
        b[..6].copy_from_slice(b"\x7fELF\x02\x01");
        b[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        b[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        b[56..58].copy_from_slice(&(loads.len() as u16 + 1).to_le_bytes());
        // A PT_INTERP first: only PT_LOADs count.
        let mut interp = vec![0u8; 56];
        interp[0] = 3;
        b.extend(interp);
        for &(flags, off, vaddr, filesz, memsz) in loads {
            let mut e = vec![0u8; 56];
            e[0] = 1;
            e[4..8].copy_from_slice(&flags.to_le_bytes());
            for (i, v) in [(8, off), (16, vaddr), (24, vaddr), (32, filesz), (40, memsz)] {
                e[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            b.extend(e);
        }
        std::fs::write(path, b).unwrap();
    }

    /// A program (non-PIE at 0x400000: r, r-x, rw- with 8 KiB of bss) and
    /// an interpreter (loaded at bias 0x4000000) in `d`.
    fn objects(d: &Path) -> (String, String) {
        let (prog, interp) = (d.join("prog"), d.join("ld.so"));
        write_elf(
            &prog,
            &[(4, 0, 0x40_0000, 0x1000, 0x1000), (5, 0x1000, 0x40_1000, 0x2000, 0x2000), (6, 0x3000, 0x40_3000, 0x800, 0x3000)],
        );
        write_elf(&interp, &[(4, 0, 0, 0xd58, 0xd58), (5, 0x1000, 0x1000, 0x25111, 0x25111)]);
        (prog.display().to_string(), interp.display().to_string())
    }

    /// The head of a `-v -v` log naming `prog` and `interp`, valgrind's own
    /// tool between them and the client's first records, and a library the
    /// client maps later.
    fn log_head(pid: u64, prog: &str, interp: &str) -> String {
        format!(
            "--{pid}-- Valgrind library directory: /usr/libexec/valgrind\n\
             --{pid}-- Reading syms from {prog}\n--{pid}--    svma 0x0000401080, avma 0x0000401080\n\
             --{pid}-- Reading syms from {interp}\n--{pid}--   Considering /usr/lib/debug/x.debug ..\n\
             --{pid}--    svma 0x0000001060, avma 0x0004001060\n\
             0x30a: [0]={{ 56(r3) {{ u  u  c-56 }}\n\
             --{pid}-- Reading syms from /usr/libexec/valgrind/lackey-amd64-linux\n--{pid}--    svma 0x0058001000, avma 0x0058001000\n"
        )
    }

    #[test]
    fn the_log_names_the_program_and_its_interpreter_with_their_bias() {
        let log = format!(
            "{}I  04001090,3\n--7-- Reading syms from /lib/libc.so.6\n--7--    svma 0x26380, avma 0x486b380\n",
            log_head(7, "/p", "/ld")
        );
        assert_eq!(loaded_objects(log.as_bytes()), [("/p".to_string(), 0), ("/ld".to_string(), 0x400_0000)]);
    }

    #[test]
    fn elf_segments_are_the_pages_the_loader_maps() {
        let d = std::env::temp_dir().join(format!("foliosim-elf-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let (prog, interp) = objects(&d);
        let segs = elf_segments(&prog, 0).unwrap();
        let f = |off: u64| Some((off, prog.clone()));
        assert_eq!(
            segs,
            [
                Seg { start: 0x40_0000, end: 0x40_1000, prot: 1, file: f(0) },
                Seg { start: 0x40_1000, end: 0x40_3000, prot: 5, file: f(0x1000) },
                Seg { start: 0x40_3000, end: 0x40_4000, prot: 3, file: f(0x3000) },
                Seg { start: 0x40_4000, end: 0x40_6000, prot: 3, file: None },
            ]
        );
        let segs = elf_segments(&interp, 0x400_0000).unwrap();
        assert_eq!(segs[1], Seg { start: 0x400_1000, end: 0x402_7000, prot: 5, file: Some((0x1000, interp.clone())) });
        assert!(elf_segments(d.join("missing").to_str().unwrap(), 0).is_none());
        std::fs::write(d.join("text"), "#!/bin/sh\n").unwrap();
        assert!(elf_segments(d.join("text").to_str().unwrap(), 0).is_none());
        let img = image(&[elf_segments(&prog, 0).unwrap(), segs].concat()).unwrap();
        assert_eq!((img.vaddr, img.text, img.data, img.data_off, img.bss), (0x40_0000, 0x3000, 0x1000, 0x3000, 0x2000));
        assert_eq!(img.others.len(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The logs of a tree: pid 10 forks 11, which execs `prog` (with `interp`).
    fn tree_logs(prog: &str, interp: &str) -> [(u64, String); 2] {
        [
            (10, "==10== Parent PID: 3\nSYSCALL[10,1](58) sys_fork ( )   fork: process 10 created child 11\n S 04900000,8\nSYSCALL[10,1](61) sys_wait4 ( 11, 0x4060d50, 0, 0x0 ) --> [async] ... \nSYSCALL[10,1](61) ... [async] --> Success(0xb) \nSYSCALL[10,1](231) exit_group( 0 ) --> [pre-success] Success(0x0) \n".to_string()),
            (
                11,
                format!(
                    "{}==11== Parent PID: 10\nI  00401000,4\n L 04001008,8\nSYSCALL[11,1](231) exit_group( 1 ) --> [pre-success] Success(0x0) \n",
                    log_head(11, prog, interp)
                ),
            ),
        ]
    }

    /// The logs streamed over --log-socket make the trace the log files make.
    #[test]
    fn logs_streamed_over_sockets_make_the_same_trace() {
        use std::io::Write as _;
        let d = std::env::temp_dir().join(format!("foliosim-sock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let (prog, interp) = objects(&d);
        for (pid, log) in tree_logs(&prog, &interp) {
            std::fs::write(d.join(format!("log.{pid}.1")), log).unwrap();
        }
        let (files, sock) = (d.join("files.fstrace"), d.join("sock.fstrace"));
        from_valgrind_logs(&d, &files, "{}", 10).unwrap();
        let l = bind_valgrind_socket().unwrap();
        let addr = l.local_addr().unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let st = std::thread::scope(|s| {
            let h = s.spawn(|| from_valgrind_socket(l, &stop, &sock, "{}", 10));
            // The child's log first: the order of connections of different pids does not matter.
            for (_, log) in tree_logs(&prog, &interp).into_iter().rev() {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(log.as_bytes()).unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
            h.join().unwrap()
        })
        .unwrap();
        let (a, b) = (super::super::trace_format::read_file(&files).unwrap(), super::super::trace_format::read_file(&sock).unwrap());
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(a, b);
        assert_eq!(st.files, 2);
        // Without the root's log: one line.
        let l = bind_valgrind_socket().unwrap();
        let stop = std::sync::atomic::AtomicBool::new(true);
        let e = from_valgrind_socket(l, &stop, &d.join("x"), "{}", 10).err().unwrap();
        assert!(e.contains("no log for the recorded command"), "{e}");
    }

    /// The connection that arrives, with `stop`, while the loop is between
    /// an accept that found nothing and its next look at `stop` is accepted.
    #[test]
    fn a_connection_made_just_before_the_stop_is_not_lost() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = AtomicBool::new(false);
        let mut backlog: Vec<u32> = Vec::new();
        let mut calls = 0;
        let mut got = Vec::new();
        let accept = || {
            calls += 1;
            if let Some(c) = backlog.pop() {
                return Ok(c);
            }
            if calls == 1 {
                // Nothing yet; meanwhile the child connects and valgrind exits.
                backlog.push(11);
                stop.store(true, Ordering::Release);
            }
            Err(std::io::Error::from(std::io::ErrorKind::WouldBlock))
        };
        accept_until_stopped(accept, &stop, |c| got.push(c)).unwrap();
        assert_eq!(got, [11]);
        // An error other than WouldBlock ends the loop with it.
        let e = accept_until_stopped(|| Err::<u32, _>(std::io::Error::other("boom")), &stop, |_| ()).unwrap_err();
        assert_eq!(e.to_string(), "boom");
    }

    #[test]
    fn a_process_tree_becomes_sections() {
        let d = std::env::temp_dir().join(format!("foliosim-procs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let (prog, interp) = objects(&d);
        for (pid, log) in tree_logs(&prog, &interp) {
            std::fs::write(d.join(format!("log.{pid}.1")), log).unwrap();
        }
        let out = d.join("t.fstrace");
        let st = from_valgrind_logs(&d, &out, "{}", 10).unwrap();
        let rs = super::super::trace_format::read_file(&out).unwrap();
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(st.files, 2);
        let kinds: Vec<String> = rs.iter().map(|r| format!("{r:?}").split([' ', '{']).next().unwrap().to_string()).collect();
        assert_eq!(
            kinds,
            [
                "Meta", "Root", "Task", "Fork", "Access", "Wait", "Region", "Exit", "File", "File", "Task", "Exec", "Mmap", "Mmap",
                "Access", "Access", "Exit"
            ]
        );
        assert_eq!(rs[1], Record::Root { tid: 10 });
        assert_eq!(rs[2], Record::Task { tid: 10 });
        assert_eq!(rs[3], Record::Fork { child: 11 });
        assert_eq!(rs[5], Record::Wait { child: 11, flags: 0 });
        assert_eq!(rs[10], Record::Task { tid: 11 });
        assert_eq!(rs[16], Record::Exit { code: 1 });
        // The child's accesses fall in its image: no Region for them.
        assert_eq!(rs[11], Record::Exec { file: 0, vaddr: 0x40_0000, text: 0x3000, data: 0x1000, data_off: 0x3000, bss: 0x2000 });
    }
}
