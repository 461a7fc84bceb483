//! The foliosim trace format (docs/trace-format.md): what `foliosim record`
//! writes and the `trace` workload replays.
//!
//! ```text
//! "FOLIOTRC"  8-byte magic
//! u16 LE      format version (VERSION; 1 is still read)
//! u8          compression: 1 = zlib (RFC 1950, with its Adler-32 check)
//! u8          reserved, 0
//! zlib stream of records, the last one End { records }
//! ```
//!
//! Each record is a tag byte and unsigned LEB128 varints. Accesses are stored
//! per page run: the page as a zigzag delta from the previous access's page,
//! plus how many further accesses the program made to that page before it
//! touched another one (`repeat`). The reader rejects, with one-line
//! messages, a wrong magic, a newer version, an unknown compression, a
//! corrupt or truncated stream, unknown tags, oversized fields and bytes after
//! `End`.

use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use std::io::{self, BufReader, Read, Write};

pub const MAGIC: &[u8; 8] = b"FOLIOTRC";
pub const VERSION: u16 = 2;
/// The first version with several processes (Process/Fork/Exec/Wait/Exit).
pub const VERSION_PROCESSES: u16 = 2;
pub const COMPRESSION_ZLIB: u8 = 1;
/// Longest path or metadata string accepted.
pub const MAX_STR: u64 = 1 << 16;

pub const TAG_END: u8 = 0;
pub const TAG_META: u8 = 1;
pub const TAG_FILE: u8 = 2;
pub const TAG_MMAP: u8 = 3;
pub const TAG_MUNMAP: u8 = 4;
pub const TAG_MPROTECT: u8 = 5;
pub const TAG_MADVISE: u8 = 6;
pub const TAG_BRK: u8 = 7;
pub const TAG_MREMAP: u8 = 8;
pub const TAG_REGION: u8 = 9;
pub const TAG_PROCESS: u8 = 0x0a;
pub const TAG_FORK: u8 = 0x0b;
pub const TAG_EXEC: u8 = 0x0c;
pub const TAG_WAIT: u8 = 0x0d;
pub const TAG_EXIT: u8 = 0x0e;
/// 0x10 | kind (0 load, 1 store, 2 ifetch).
pub const TAG_ACCESS: u8 = 0x10;

/// Access kinds as stored.
pub const K_LOAD: u8 = 0;
pub const K_STORE: u8 = 1;
pub const K_IFETCH: u8 = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// JSON text describing the recording (command, exit code, tool versions).
    Meta {
        json: String,
    },
    /// Declares file index n (the n-th File record, from 0): its size and path.
    File {
        size: u64,
        path: String,
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
    /// Memory the program used that no recorded call created (its ELF image,
    /// initial stack, vDSO): replayed as a private anonymous read-write mapping.
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
    /// The records up to the next Process are those of recorded process
    /// `pid`, forked by `parent` (0: the recorded command itself).
    Process {
        pid: u64,
        parent: u64,
    },
    /// fork()/vfork()/clone() without CLONE_VM returned `child`.
    Fork {
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
    /// wait4() reaped `child`.
    Wait {
        child: u64,
    },
    /// exit_group(code).
    Exit {
        code: u64,
    },
    End {
        records: u64,
    },
}

// ------------------------------------------------------------------ writer --

pub struct TraceWriter<W: Write> {
    z: ZlibEncoder<W>,
    last_page: u64,
    records: u64,
    buf: Vec<u8>,
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

impl<W: Write> TraceWriter<W> {
    pub fn new(w: W) -> io::Result<Self> {
        Self::with_version(w, VERSION)
    }

    /// A writer stamping an older `version` in the header (tests of the
    /// reader's compatibility; the records written must exist in it).
    pub fn with_version(mut w: W, version: u16) -> io::Result<Self> {
        w.write_all(MAGIC)?;
        w.write_all(&version.to_le_bytes())?;
        w.write_all(&[COMPRESSION_ZLIB, 0])?;
        Ok(TraceWriter { z: ZlibEncoder::new(w, flate2::Compression::new(6)), last_page: 0, records: 0, buf: Vec::with_capacity(64) })
    }

    pub fn write(&mut self, r: &Record) -> io::Result<()> {
        let b = &mut self.buf;
        b.clear();
        match r {
            Record::Meta { json } => {
                b.push(TAG_META);
                put_varint(b, json.len() as u64);
                b.extend_from_slice(json.as_bytes());
            }
            Record::File { size, path } => {
                b.push(TAG_FILE);
                put_varint(b, *size);
                put_varint(b, path.len() as u64);
                b.extend_from_slice(path.as_bytes());
            }
            Record::Mmap { addr, len, prot, flags, file, off, ret } => {
                b.push(TAG_MMAP);
                for v in [*addr, *len, *prot as u64, *flags as u64, file.map_or(0, |f| f as u64 + 1), *off, *ret] {
                    put_varint(b, v);
                }
            }
            Record::Munmap { addr, len } => {
                b.push(TAG_MUNMAP);
                put_varint(b, *addr);
                put_varint(b, *len);
            }
            Record::Mprotect { addr, len, prot } => {
                b.push(TAG_MPROTECT);
                for v in [*addr, *len, *prot as u64] {
                    put_varint(b, v);
                }
            }
            Record::Madvise { addr, len, advice } => {
                b.push(TAG_MADVISE);
                for v in [*addr, *len, *advice as u64] {
                    put_varint(b, v);
                }
            }
            Record::Brk { addr, ret } => {
                b.push(TAG_BRK);
                put_varint(b, *addr);
                put_varint(b, *ret);
            }
            Record::Mremap { addr, old_len, new_len, flags, ret } => {
                b.push(TAG_MREMAP);
                for v in [*addr, *old_len, *new_len, *flags as u64, *ret] {
                    put_varint(b, v);
                }
            }
            Record::Region { addr, len } => {
                b.push(TAG_REGION);
                put_varint(b, *addr);
                put_varint(b, *len);
            }
            Record::Access { kind, page, repeat } => {
                b.push(TAG_ACCESS | (*kind & 3));
                put_varint(b, zigzag(page.wrapping_sub(self.last_page) as i64));
                put_varint(b, *repeat);
                self.last_page = *page;
            }
            Record::Process { pid, parent } => {
                b.push(TAG_PROCESS);
                put_varint(b, *pid);
                put_varint(b, *parent);
                // Each process's page deltas start from 0, so sections can be
                // written one after the other.
                self.last_page = 0;
            }
            Record::Fork { child } => {
                b.push(TAG_FORK);
                put_varint(b, *child);
            }
            Record::Exec { file, vaddr, text, data, data_off, bss } => {
                b.push(TAG_EXEC);
                for v in [*file as u64, *vaddr, *text, *data, *data_off, *bss] {
                    put_varint(b, v);
                }
            }
            Record::Wait { child } => {
                b.push(TAG_WAIT);
                put_varint(b, *child);
            }
            Record::Exit { code } => {
                b.push(TAG_EXIT);
                put_varint(b, *code);
            }
            Record::End { .. } => return Err(io::Error::other("End is written by finish()")),
        }
        self.records += 1;
        self.z.write_all(&self.buf)
    }

    /// Write End and flush the stream; returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        let mut b = vec![TAG_END];
        put_varint(&mut b, self.records);
        self.z.write_all(&b)?;
        self.z.finish()
    }
}

// ------------------------------------------------------------------ reader --

pub struct TraceReader<R: Read> {
    z: BufReader<ZlibDecoder<R>>,
    last_page: u64,
    records: u64,
    files: u64,
    version: u16,
    done: bool,
}

fn corrupt(e: io::Error) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        "truncated trace (the compressed stream ends early)".to_string()
    } else {
        format!("corrupt trace ({e})")
    }
}

impl<R: Read> TraceReader<R> {
    /// Check the header; errors are one line.
    pub fn new(mut r: R) -> Result<Self, String> {
        let mut h = [0u8; 12];
        let mut got = 0;
        while got < h.len() {
            match r.read(&mut h[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("cannot read the trace: {e}")),
            }
        }
        if got < 8 || &h[..8] != MAGIC {
            return Err("not a foliosim trace (bad magic; expected FOLIOTRC)".into());
        }
        if got < 12 {
            return Err("truncated trace (header cut short)".into());
        }
        let version = u16::from_le_bytes([h[8], h[9]]);
        if version > VERSION {
            return Err(format!("trace format version {version} is newer than this foliosim reads (up to {VERSION}); upgrade foliosim"));
        }
        if version == 0 {
            return Err("corrupt trace (format version 0)".into());
        }
        if h[10] != COMPRESSION_ZLIB {
            return Err(format!("corrupt trace (unknown compression {})", h[10]));
        }
        Ok(TraceReader { z: BufReader::new(ZlibDecoder::new(r)), last_page: 0, records: 0, files: 0, version, done: false })
    }

    fn byte(&mut self) -> Result<u8, String> {
        let mut b = [0u8; 1];
        self.z.read_exact(&mut b).map_err(corrupt)?;
        Ok(b[0])
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.byte()?;
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

    fn u32v(&mut self, what: &str) -> Result<u32, String> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| format!("corrupt trace ({what} {v} does not fit 32 bits)"))
    }

    /// The format version in the header.
    pub fn version(&self) -> u16 {
        self.version
    }

    fn file_ref(&mut self) -> Result<u64, String> {
        let f = self.varint()?;
        if f >= self.files {
            return Err(format!("corrupt trace (exec of file {f} before it is declared)"));
        }
        Ok(f)
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.varint()?;
        if n > MAX_STR {
            return Err(format!("corrupt trace (string of {n} bytes)"));
        }
        let mut b = vec![0u8; n as usize];
        self.z.read_exact(&mut b).map_err(corrupt)?;
        String::from_utf8(b).map_err(|_| "corrupt trace (string is not UTF-8)".to_string())
    }

    /// The next record; None after End (which is checked, as is the absence
    /// of anything after it).
    pub fn next_record(&mut self) -> Result<Option<Record>, String> {
        if self.done {
            return Ok(None);
        }
        let tag = self.byte()?;
        let r = match tag {
            TAG_END => {
                let n = self.varint()?;
                if n != self.records {
                    return Err(format!("corrupt trace (End says {n} records, found {})", self.records));
                }
                let mut rest = [0u8; 1];
                match self.z.read(&mut rest) {
                    Ok(0) => {}
                    Ok(_) => return Err("corrupt trace (data after the End record)".into()),
                    Err(e) => return Err(corrupt(e)),
                }
                self.done = true;
                return Ok(None);
            }
            TAG_META => Record::Meta { json: self.string()? },
            TAG_FILE => {
                let size = self.varint()?;
                let path = self.string()?;
                self.files += 1;
                Record::File { size, path }
            }
            TAG_MMAP => {
                let addr = self.varint()?;
                let len = self.varint()?;
                let prot = self.u32v("prot")?;
                let flags = self.u32v("flags")?;
                let f = self.varint()?;
                if f > self.files {
                    return Err(format!("corrupt trace (mmap of file {} before it is declared)", f - 1));
                }
                let off = self.varint()?;
                let ret = self.varint()?;
                Record::Mmap { addr, len, prot, flags, file: if f == 0 { None } else { Some((f - 1) as u32) }, off, ret }
            }
            TAG_MUNMAP => Record::Munmap { addr: self.varint()?, len: self.varint()? },
            TAG_MPROTECT => Record::Mprotect { addr: self.varint()?, len: self.varint()?, prot: self.u32v("prot")? },
            TAG_MADVISE => Record::Madvise { addr: self.varint()?, len: self.varint()?, advice: self.u32v("advice")? },
            TAG_BRK => Record::Brk { addr: self.varint()?, ret: self.varint()? },
            TAG_MREMAP => Record::Mremap {
                addr: self.varint()?,
                old_len: self.varint()?,
                new_len: self.varint()?,
                flags: self.u32v("flags")?,
                ret: self.varint()?,
            },
            TAG_REGION => Record::Region { addr: self.varint()?, len: self.varint()? },
            t if (TAG_PROCESS..=TAG_EXIT).contains(&t) && self.version < VERSION_PROCESSES => {
                return Err(format!("corrupt trace (record tag {t:#04x} in a version {} trace)", self.version));
            }
            TAG_PROCESS => {
                self.last_page = 0;
                Record::Process { pid: self.varint()?, parent: self.varint()? }
            }
            TAG_FORK => Record::Fork { child: self.varint()? },
            TAG_EXEC => Record::Exec {
                file: self.file_ref()? as u32,
                vaddr: self.varint()?,
                text: self.varint()?,
                data: self.varint()?,
                data_off: self.varint()?,
                bss: self.varint()?,
            },
            TAG_WAIT => Record::Wait { child: self.varint()? },
            TAG_EXIT => Record::Exit { code: self.varint()? },
            t if t & 0xf0 == TAG_ACCESS && t & 0x0f <= K_IFETCH => {
                let d = unzigzag(self.varint()?);
                let page = self.last_page.wrapping_add(d as u64);
                if page >= 1 << 52 {
                    return Err(format!("corrupt trace (page {page:#x} beyond the 64-bit address space)"));
                }
                self.last_page = page;
                Record::Access { kind: t & 0x0f, page, repeat: self.varint()? }
            }
            t => return Err(format!("corrupt trace (unknown record tag {t:#04x} at record {})", self.records)),
        };
        self.records += 1;
        Ok(Some(r))
    }

    /// Read every record (End excluded).
    pub fn read_all(mut self) -> Result<Vec<Record>, String> {
        let mut v = Vec::new();
        while let Some(r) = self.next_record()? {
            v.push(r);
        }
        Ok(v)
    }
}

/// Read a whole trace file.
pub fn read_file(path: &std::path::Path) -> Result<Vec<Record>, String> {
    TraceReader::new(crate::types::open_input(path)?)?.read_all()
}

/// Read a whole trace and summarise it as JSON (checks it end to end,
/// record by record: a trace can hold tens of millions).
pub fn summary_json(path: &std::path::Path) -> Result<String, String> {
    let mut r = TraceReader::new(crate::types::open_input(path)?)?;
    let version = r.version();
    let (mut accesses, mut records, mut files, mut regions, mut syscalls, mut processes) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut meta = serde_json::Value::Null;
    while let Some(rec) = r.next_record()? {
        records += 1;
        match rec {
            Record::Access { repeat, .. } => accesses += 1 + repeat,
            Record::File { .. } => files += 1,
            Record::Region { .. } => regions += 1,
            Record::Process { .. } => processes += 1,
            Record::Meta { json } => meta = serde_json::from_str(&json).unwrap_or(serde_json::Value::String(json)),
            _ => syscalls += 1,
        }
    }
    Ok(serde_json::json!({"version": version, "records": records, "accesses": accesses, "syscalls": syscalls, "files": files, "regions": regions, "processes": processes.max(1), "meta": meta}).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::Meta { json: "{\"argv\":[\"x\"]}".into() },
            Record::File { size: 8192, path: "/lib/x.so".into() },
            Record::Mmap { addr: 0, len: 8192, prot: 5, flags: 2, file: Some(0), off: 0, ret: 0x7f00_0000_0000 },
            Record::Region { addr: 0x40_0000, len: 4096 },
            Record::Brk { addr: 0, ret: 0x60_0000 },
            Record::Access { kind: K_STORE, page: 0x0007_f000_0000, repeat: 3 },
            Record::Access { kind: K_LOAD, page: 0x0400, repeat: 0 },
            Record::Access { kind: K_IFETCH, page: 0x0007_f000_0001, repeat: u64::MAX },
            Record::Madvise { addr: 0x7f00_0000_0000, len: 4096, advice: 4 },
            Record::Mprotect { addr: 0x7f00_0000_0000, len: 4096, prot: 1 },
            Record::Mremap { addr: 0x7f00_0000_0000, old_len: 8192, new_len: 16384, flags: 1, ret: 0x7e00_0000_0000 },
            Record::Munmap { addr: 0x7e00_0000_0000, len: 16384 },
            Record::Fork { child: 12 },
            Record::Wait { child: 12 },
            Record::Exit { code: 0 },
            Record::Process { pid: 12, parent: 11 },
            Record::Exec { file: 0, vaddr: 0x40_0000, text: 4096, data: 4096, data_off: 0, bss: 0 },
            Record::Access { kind: K_LOAD, page: 0x0400, repeat: 0 },
            Record::Exit { code: 1 },
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
        assert_eq!(TraceReader::new(&bytes[..]).unwrap().read_all().unwrap(), rs);
    }

    #[test]
    fn bad_inputs_are_one_line_errors() {
        let bytes = encode(&sample());
        let err = |b: &[u8]| TraceReader::new(b).and_then(|r| r.read_all()).unwrap_err();
        assert!(err(b"").contains("bad magic"));
        assert!(err(b"FOLIOTRC\x01").contains("truncated"));
        let mut newer = bytes.clone();
        newer[8] = VERSION as u8 + 1;
        assert!(err(&newer).contains("newer"), "{}", err(&newer));
        for cut in [13, bytes.len() / 2, bytes.len() - 1] {
            let e = err(&bytes[..cut]);
            assert!(e.contains("truncated") || e.contains("corrupt"), "{cut}: {e}");
        }
        let mut flipped = bytes.clone();
        let n = flipped.len();
        flipped[n - 6] ^= 0x55;
        assert!(err(&flipped).contains("corrupt") || err(&flipped).contains("truncated"));
        let mut extra = bytes.clone();
        extra.extend_from_slice(b"junk");
        // zlib stops at its own end; trailing junk after the stream is ignored
        // by the decoder, but End must still be there and be right.
        assert!(TraceReader::new(&extra[..]).unwrap().read_all().is_ok());
        for e in [err(b""), err(&newer), err(&bytes[..20])] {
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn version_1_is_read_without_process_records() {
        let v1: Vec<Record> = sample().into_iter().take_while(|r| !matches!(r, Record::Fork { .. })).collect();
        let mut w = TraceWriter::with_version(Vec::new(), 1).unwrap();
        for r in &v1 {
            w.write(r).unwrap();
        }
        let bytes = w.finish().unwrap();
        let r = TraceReader::new(&bytes[..]).unwrap();
        assert_eq!(r.version(), 1);
        assert_eq!(r.read_all().unwrap(), v1);
        // A version 1 trace cannot hold a Process record.
        let mut w = TraceWriter::with_version(Vec::new(), 1).unwrap();
        w.write(&Record::Process { pid: 1, parent: 0 }).unwrap();
        let bytes = w.finish().unwrap();
        let e = TraceReader::new(&bytes[..]).unwrap().read_all().unwrap_err();
        assert!(e.contains("version 1"), "{e}");
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
