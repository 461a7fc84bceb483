//! A recorded process tree: the logs of `valgrind --trace-children=yes
//! --child-silent-after-fork=yes -d --log-file=DIR/log.%p.%n` put together
//! into one trace (used by `foliosim record`).
//!
//! Each valgrind instance (a process from its execve to its exit or next
//! execve) writes its own log `log.PID.N`; `trace_record` converts each. A
//! forked child is silent until it execs (gcc's vfork+execvp children do
//! nothing else worth replaying), so every child's records start at an exec.
//! valgrind's loader, not a recorded call, maps the program and its ELF
//! interpreter; `-d` makes it print the client's memory layout at startup
//! on stderr, from which each instance gets an `Exec` (the program's
//! segments) and file-backed `Mmap`s (ld.so), so they replay over the page
//! cache instead of as anonymous `Region`s.
//!
//! The trace holds one section per process (`Process`, then its instances
//! in order), its `Fork`/`Wait` records where the parent made the calls,
//! and an `Exit` at the end of each.

use super::map;
use super::trace_format::{Record, TraceReader, TraceWriter};
use super::trace_record::{convert, Conv, RecordStats};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, Write};
use std::path::Path;

/// A client segment of valgrind's "Memory layout at client startup".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seg {
    pub start: u64,
    /// Exclusive.
    pub end: u64,
    pub prot: u32,
    /// File offset and path; None for anonymous memory.
    pub file: Option<(u64, String)>,
}

/// The startup layouts in `-d` output, per pid in the order printed (one per
/// valgrind instance). Lines look like
/// `--PID:1: aspacem   2: file 0000400000-0000630fff 2297856 r---- d=.. i=.. o=0 (1,49)`;
/// lower-case `file`/`anon` segments are the client's, upper-case valgrind's.
pub fn startup_layouts(debug: &str) -> HashMap<u64, Vec<Vec<Seg>>> {
    let mut out: HashMap<u64, Vec<Vec<Seg>>> = HashMap::new();
    // pid -> (names, segments) of the dump being read
    let mut open: HashMap<u64, (HashMap<u32, String>, Vec<Seg>)> = HashMap::new();
    for l in debug.lines() {
        let Some(rest) = l.strip_prefix("--") else { continue };
        let Some((pid, rest)) = rest.split_once(':') else { continue };
        let Ok(pid) = pid.parse::<u64>() else { continue };
        let Some((_, body)) = rest.split_once("aspacem") else { continue };
        let body = body.trim();
        if body.contains("SHOW_SEGMENTS: Memory layout at client startup") {
            open.insert(pid, (HashMap::new(), Vec::new()));
            continue;
        }
        let Some((names, segs)) = open.get_mut(&pid) else { continue };
        if body == ">>>" {
            let (_, segs) = open.remove(&pid).unwrap_or_default();
            out.entry(pid).or_default().push(segs);
            continue;
        }
        // "(1,49,7) /usr/bin/true": segment name 1
        if let Some(n) = body.strip_prefix('(') {
            if let Some((ids, path)) = n.split_once(") ") {
                if let Some(Ok(i)) = ids.split(',').next().map(str::parse::<u32>) {
                    names.insert(i, path.trim().to_string());
                }
            }
            continue;
        }
        let f: Vec<&str> = body.split_whitespace().collect();
        if f.len() < 5 || !f[0].ends_with(':') || !(f[1] == "file" || f[1] == "anon") {
            continue;
        }
        let Some((a, b)) = f[2].split_once('-') else { continue };
        let (Ok(start), Ok(last)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else { continue };
        let p = f[4].as_bytes();
        let prot = (p.first() == Some(&b'r')) as u32 | ((p.get(1) == Some(&b'w')) as u32) << 1 | ((p.get(2) == Some(&b'x')) as u32) << 2;
        let file = if f[1] == "file" {
            let off = f.iter().find_map(|x| x.strip_prefix("o=")).and_then(|o| o.parse::<u64>().ok());
            let name = f.last().and_then(|x| x.strip_prefix('(')).and_then(|x| x.split(',').next()).and_then(|x| x.parse::<u32>().ok());
            match (off, name.and_then(|n| names.get(&n))) {
                (Some(off), Some(path)) => Some((off, path.clone())),
                _ => continue,
            }
        } else {
            None
        };
        segs.push(Seg { start, end: last.saturating_add(1), prot, file });
    }
    out
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

/// Convert the logs of a recorded process tree in `dir` (and the `-d`
/// output in `debug_log`) into the trace `out_path`; `root` is the pid of
/// the recorded command.
pub fn from_valgrind_logs(dir: &Path, debug_log: &Path, out_path: &Path, meta_json: &str, root: u64) -> Result<RecordStats, String> {
    let debug = std::fs::read(debug_log).map_err(|e| format!("{}: {e}", debug_log.display()))?;
    let layouts = startup_layouts(&String::from_utf8_lossy(&debug));
    let all = logs(dir)?;
    if !all.contains_key(&root) {
        return Err(format!("valgrind wrote no log for the recorded command (pid {root})"));
    }
    let o = std::fs::File::create(out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let mut w = TraceWriter::new(std::io::BufWriter::new(o)).map_err(|e| format!("cannot write the trace: {e}"))?;
    let werr = |e: std::io::Error| format!("cannot write the trace: {e}");
    w.write(&Record::Meta { json: meta_json.to_string() }).map_err(werr)?;
    let mut total = RecordStats::default();
    let mut files: HashMap<String, u32> = HashMap::new();
    let order = std::iter::once(root).chain(all.keys().copied().filter(|&p| p != root));
    for pid in order {
        let mut exit_code = 0;
        for (k, (_, log)) in all[&pid].iter().enumerate() {
            let img = layouts.get(&pid).and_then(|v| v.get(k)).and_then(|segs| image(segs));
            let sec = dir.join(format!("sec.{pid}.{k}"));
            let f = std::fs::File::open(log).map_err(|e| format!("{}: {e}", log.display()))?;
            let o = std::fs::File::create(&sec).map_err(|e| format!("{}: {e}", sec.display()))?;
            let size = Box::new(|p: &str| std::fs::metadata(p).ok().map(|m| m.len()));
            let (o, st) = convert(BufReader::with_capacity(1 << 20, f), std::io::BufWriter::new(o), size, |c| {
                img.as_ref().map_or(Ok(()), |i| put_image(c, i))
            })?;
            drop(o);
            if k == 0 {
                let parent = if pid == root { 0 } else { st.parent };
                w.write(&Record::Process { pid, parent }).map_err(werr)?;
            }
            exit_code = st.exit_code.unwrap_or(exit_code);
            add(&mut total, &st);
            // Copy the section, its File indices made global.
            let f = std::fs::File::open(&sec).map_err(|e| format!("{}: {e}", sec.display()))?;
            let mut r = TraceReader::new(BufReader::with_capacity(1 << 20, f))?;
            let mut local: Vec<u32> = Vec::new();
            while let Some(rec) = r.next_record()? {
                let rec = match rec {
                    Record::File { size, path } => {
                        let n = files.len() as u32;
                        let g = *files.entry(path.clone()).or_insert(n);
                        if g == n {
                            w.write(&Record::File { size, path }).map_err(werr)?;
                        }
                        local.push(g);
                        continue;
                    }
                    Record::Mmap { addr, len, prot, flags, file, off, ret } => {
                        Record::Mmap { addr, len, prot, flags, file: file.map(|f| local[f as usize]), off, ret }
                    }
                    Record::Exec { file, vaddr, text, data, data_off, bss } => {
                        Record::Exec { file: local[file as usize], vaddr, text, data, data_off, bss }
                    }
                    r => r,
                };
                w.write(&rec).map_err(werr)?;
            }
            let _ = std::fs::remove_file(&sec);
        }
        w.write(&Record::Exit { code: exit_code }).map_err(werr)?;
    }
    total.files = files.len() as u64;
    let o = w.finish().map_err(werr)?;
    let f = o.into_inner().map_err(|e| format!("{}: {e}", out_path.display()))?;
    f.sync_all().map_err(|e| format!("{}: {e}", out_path.display()))?;
    Ok(total)
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
pub fn from_valgrind_logs_json(dir: &str, debug_log: &str, out_path: &str, meta_json: &str, root: u64) -> Result<String, String> {
    from_valgrind_logs(Path::new(dir), Path::new(debug_log), Path::new(out_path), meta_json, root)
        .map(|st| serde_json::to_string(&st).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBUG: &str = "\
--24488:1: aspacem <<< SHOW_SEGMENTS: Memory layout at client startup (35 segments)
--24488:1: aspacem 3 segment names in 3 slots
--24488:1: aspacem (0,4,9) /usr/libexec/valgrind/lackey-amd64-linux
--24488:1: aspacem (1,49,7) /usr/lib/gcc/x86_64-linux-gnu/12/cc1
--24488:1: aspacem (2,90,7) /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
--24488:1: aspacem   0: RSVN 0000000000-00003fffff 4194304 ----- SmFixed
--24488:1: aspacem   1: file 0000400000-0000630fff 2297856 r---- d=0xfe00 i=257291  o=0       (1,49)
--24488:1: aspacem   2: file 0000631000-00019f4fff     19m r-x-- d=0xfe00 i=257291  o=2297856 (1,49)
--24488:1: aspacem   3: file 00019f5000-00023bcfff      9m r---- d=0xfe00 i=257291  o=23023616 (1,49)
--24488:1: aspacem   4: file 00023bd000-00023ccfff   65536 rw--- d=0xfe00 i=257291  o=33275904 (1,49)
--24488:1: aspacem   5: anon 00023cd000-000256cfff 1703936 rw---
--24488:1: aspacem   6: RSVN 000256d000-0003ffffff     26m ----- SmFixed
--24488:1: aspacem   7: file 0004000000-0004000fff    4096 r---- d=0xfe00 i=325843  o=0       (2,90)
--24488:1: aspacem   8: file 0004001000-0004026fff  155648 r-x-- d=0xfe00 i=325843  o=4096    (2,90)
--24488:1: aspacem   9: anon 0004035000-0004035fff    4096 rwx--
--24488:1: aspacem  13: FILE 0058000000-0058000fff    4096 r---- d=0xfe00 i=328516  o=0       (0,4)
--24488:1: aspacem >>>
--24489:1: aspacem   1: file 0000400000-0000630fff 2297856 r---- d=0xfe00 i=257291  o=0       (1,49)
";

    #[test]
    fn startup_layout_gives_the_exec_and_the_interpreter() {
        let l = startup_layouts(DEBUG);
        assert_eq!(l.len(), 1, "a segment line outside a dump is ignored");
        let segs = &l[&24488][0];
        assert_eq!(segs.len(), 8, "{segs:?}");
        let img = image(segs).unwrap();
        assert_eq!(img.path, "/usr/lib/gcc/x86_64-linux-gnu/12/cc1");
        assert_eq!((img.vaddr, img.text, img.data, img.data_off, img.bss), (0x40_0000, 0x23bd000 - 0x40_0000, 65536, 33275904, 1703936));
        assert_eq!(img.others.len(), 2);
        assert_eq!(
            img.others[1],
            Seg { start: 0x4001000, end: 0x4027000, prot: 5, file: Some((4096, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2".into())) }
        );
    }

    #[test]
    fn a_process_tree_becomes_sections() {
        let d = std::env::temp_dir().join(format!("foliosim-procs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("debug"), DEBUG.replace("24488", "11")).unwrap();
        std::fs::write(
            d.join("log.10.1"),
            "==10== Parent PID: 3\nSYSCALL[10,1](58) sys_fork ( )   fork: process 10 created child 11\n S 04900000,8\nSYSCALL[10,1](61) sys_wait4 ( 11, 0x4060d50, 0, 0x0 ) --> [async] ... \nSYSCALL[10,1](61) ... [async] --> Success(0xb) \nSYSCALL[10,1](231) exit_group( 0 ) --> [pre-success] Success(0x0) \n",
        )
        .unwrap();
        std::fs::write(
            d.join("log.11.1"),
            "==11== Parent PID: 10\nI  00631000,4\n L 04001008,8\nSYSCALL[11,1](231) exit_group( 1 ) --> [pre-success] Success(0x0) \n",
        )
        .unwrap();
        let out = d.join("t.fstrace");
        let st = from_valgrind_logs(&d, &d.join("debug"), &out, "{}", 10).unwrap();
        let rs = super::super::trace_format::read_file(&out).unwrap();
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(st.files, 2);
        let kinds: Vec<String> = rs.iter().map(|r| format!("{r:?}").split([' ', '{']).next().unwrap().to_string()).collect();
        assert_eq!(
            kinds,
            [
                "Meta", "Process", "Fork", "Access", "Wait", "Region", "Exit", "Process", "File", "Exec", "File", "Mmap", "Mmap", "Access",
                "Access", "Exit"
            ]
        );
        assert_eq!(rs[1], Record::Process { pid: 10, parent: 0 });
        assert_eq!(rs[2], Record::Fork { child: 11 });
        assert_eq!(rs[4], Record::Wait { child: 11 });
        assert_eq!(rs[7], Record::Process { pid: 11, parent: 10 });
        assert_eq!(rs[15], Record::Exit { code: 1 });
        // The child's accesses fall in its image: no Region for them.
        assert!(matches!(rs[9], Record::Exec { file: 0, vaddr: 0x40_0000, .. }));
    }
}
