//! Deterministic fuzzing of the trace reader and the replay's translation
//! table: random byte strings, and valid traces mutated (bit flips, byte
//! overwrites, truncation, insertion, deletion, splicing). Every input must
//! give Ok or a one-line Err, never a panic, and an accepted trace must
//! replay to its end. `FOLIOSIM_FUZZ_ITERS` sets the number of inputs
//! (`make fuzz` runs many; `make test` a short run). A plain cargo test (not
//! cargo-fuzz/libFuzzer) so it runs on the stable toolchain.

use foliosim::workload::trace::TraceReplay;
use foliosim::workload::trace_format::Trace;
use foliosim::workload::trace_format::{Record, TraceReader, TraceWriter, K_IFETCH, K_LOAD, K_STORE};
use foliosim::workload::{map, Op, Ret, Workload};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn random_records(r: &mut Rng) -> Vec<Record> {
    let mut v = vec![Record::Meta { json: "{\"argv\":[\"fuzz\"]}".into() }, Record::Root { tid: 1 }, Record::Task { tid: 1 }];
    let mut files = 0u32;
    let base = 0x4000_0000u64 + (r.below(1 << 20) << 12);
    for _ in 0..r.below(60) {
        let a = base + (r.below(512) << 12);
        let len = (1 + r.below(64)) << 12;
        v.push(match r.below(22) {
            11 => Record::Task { tid: 1 + r.below(4) },
            12 => Record::Fork { child: 1 + r.below(4) },
            13 if files > 0 => Record::Exec {
                file: r.below(files as u64) as u32,
                vaddr: [0x40_0000, 0x10_8000, a][r.below(3) as usize],
                text: (1 + r.below(32)) << 12,
                data: r.below(4) << 12,
                data_off: r.below(40) << 12,
                bss: r.below(4) << 12,
            },
            14 => Record::Wait { child: r.below(5), flags: r.below(2) as u32 },
            15 => Record::Exit { code: r.below(3) },
            16 => Record::Vfork { child: 1 + r.below(4) },
            17 => Record::Clone { child: 1 + r.below(4) },
            18 => Record::Time { user_ns: r.below(1 << 20), sys_ns: r.below(1 << 10) },
            19 => Record::Run {
                kind: [K_LOAD, K_STORE, K_IFETCH][r.below(3) as usize],
                page: a >> 12,
                count: 2 + r.below(40),
                step: [1, -1, 2][r.below(3) as usize],
            },
            20 if files > 0 => Record::Read { file: r.below(files as u64) as u32, off: r.below(1 << 20), len: r.below(1 << 16) },
            21 if files > 0 => Record::Write { file: r.below(files as u64) as u32, off: r.below(1 << 20), len: r.below(1 << 16) },
            0 => {
                files += 1;
                Record::File { size: r.below(1 << 24), path: format!("/f{files}"), flags: r.below(2) as u32 }
            }
            1 | 2 => Record::Mmap {
                addr: if r.below(2) == 0 { 0 } else { a },
                len,
                prot: r.below(8) as u32,
                flags: [0x22, 0x2, 0x1, 0x12, 0x812, 0x100022][r.below(6) as usize],
                file: if files > 0 && r.below(2) == 0 { Some(r.below(files as u64) as u32) } else { None },
                off: r.below(16) << 12,
                ret: a,
            },
            3 => Record::Munmap { addr: a, len },
            4 => Record::Mprotect { addr: a, len, prot: r.below(8) as u32 },
            5 => Record::Madvise { addr: a, len, advice: r.below(24) as u32 },
            6 => Record::Brk { addr: if r.below(3) == 0 { 0 } else { a }, ret: a },
            7 => Record::Mremap {
                addr: a,
                old_len: len,
                new_len: (1 + r.below(64)) << 12,
                flags: r.below(4) as u32,
                ret: base + (r.below(1024) << 12),
            },
            8 => Record::Region { addr: a, len },
            _ => Record::Access { kind: [K_LOAD, K_STORE, K_IFETCH][r.below(3) as usize], page: a >> 12, repeat: r.below(5) },
        });
    }
    v
}

/// The flat form a reader gives back: globals first, then each task's
/// records after a Task marker, tasks in the order they first wrote.
fn canonical(rs: &[Record]) -> Vec<Record> {
    let mut globals = Vec::new();
    let mut tasks: Vec<(u64, Vec<Record>)> = Vec::new();
    let mut cur = None;
    for r in rs {
        match r {
            Record::Task { tid } => cur = Some(*tid),
            r if r.is_task_record() => {
                let tid = cur.unwrap();
                match tasks.iter_mut().find(|t| t.0 == tid) {
                    Some(t) => t.1.push(r.clone()),
                    None => tasks.push((tid, vec![r.clone()])),
                }
            }
            r => globals.push(r.clone()),
        }
    }
    for (tid, recs) in tasks {
        globals.push(Record::Task { tid });
        globals.extend(recs);
    }
    globals
}

fn encode(rs: &[Record]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    for x in rs {
        w.write(x).unwrap();
    }
    w.finish().unwrap()
}

fn mutate(r: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + r.below(4) {
        if b.is_empty() {
            break;
        }
        let i = r.below(b.len() as u64) as usize;
        match r.below(6) {
            0 => b[i] ^= 1 << r.below(8),
            1 => b[i] = r.next() as u8,
            2 => b.truncate(i),
            3 => b.insert(i, r.next() as u8),
            4 => {
                b.remove(i);
            }
            _ => {
                let j = r.below(b.len() as u64) as usize;
                let (lo, hi) = (i.min(j), i.max(j));
                let chunk = b[lo..hi].to_vec();
                b.extend_from_slice(&chunk);
            }
        }
    }
    b
}

/// Replay against a stub kernel that returns plausible results; forked
/// children and threads run too (round robin).
fn replay(t: Trace) {
    let mut w = TraceReplay::from_trace("fuzz".into(), t).with_jobs(2, &["f1"]);
    struct Env(u32);
    impl foliosim::workload::SetupEnv for Env {
        fn nr_cpus(&self) -> u32 {
            1
        }
        fn mem_bytes(&self) -> u64 {
            1 << 30
        }
        fn create_file(&mut self, _: foliosim::workload::FsKind, _: u64, _: bool) -> Result<u32, foliosim::types::Error> {
            self.0 += 1;
            Ok(self.0)
        }
        fn spawn_process(&mut self, _: Option<u32>) -> Result<u32, foliosim::types::Error> {
            Ok(5)
        }
        fn spawn_thread(&mut self, _: u32, _: Option<u32>) -> Result<u32, foliosim::types::Error> {
            Err(foliosim::types::Error::Workload("no threads".into()))
        }
        fn seed(&self) -> u64 {
            1
        }
    }
    w.setup(&mut Env(0)).unwrap();
    let mut next = 0x7f00_0000_0000u64;
    // (task, its last result)
    let mut run: std::collections::VecDeque<(u32, Ret)> = [(5, Ret::Start)].into();
    let mut ids = 5u32;
    // Children not reaped yet, per parent: a wait of a parent without any gets ECHILD.
    let mut kids: std::collections::BTreeMap<u32, u32> = Default::default();
    for _ in 0..200_000 {
        let Some((t, last)) = run.pop_front() else { return };
        let mut ops = 0;
        let op = w.next_op(t, last, &mut ops);
        let ret = match op {
            Op::Exit => continue,
            Op::Fork | Op::Vfork | Op::Clone => {
                ids += 1;
                w.on_fork(t, ids);
                run.push_back((ids, Ret::Val(0)));
                if op != Op::Clone {
                    *kids.entry(t).or_default() += 1;
                }
                Ret::Val(ids as i64)
            }
            Op::Exec { vaddr, .. } => Ret::Val(vaddr as i64 + (1 << 30)),
            Op::Wait => match kids.get_mut(&t) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    Ret::Val(1)
                }
                _ => Ret::Err(10),
            },
            Op::Mmap { addr, flags, .. } if flags & map::FIXED != 0 => Ret::Val(addr as i64),
            Op::Mmap { len, .. } | Op::Mremap { new_len: len, .. } => {
                let a = next;
                next += (len | 0xfff) + 1;
                Ret::Val(a as i64)
            }
            Op::Brk { addr: 0 } => Ret::Val(0x5000_0000),
            _ => Ret::Val(0),
        };
        run.push_back((t, ret));
    }
    panic!("replay did not reach its end");
}

/// Every seed of the cargo-fuzz target reads and replays.
#[test]
fn fuzz_seeds_are_valid_traces() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let t = foliosim::workload::trace_format::read_trace(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        replay(t);
        n += 1;
    }
    assert!(n >= 2, "a recorded and a hand-made seed");
}

#[test]
fn trace_reader_never_panics() {
    let iters: u64 = std::env::var("FOLIOSIM_FUZZ_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let seed: u64 = std::env::var("FOLIOSIM_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    let mut r = Rng(seed | 1);
    let (mut ok, mut err) = (0u64, 0u64);
    for i in 0..iters {
        let valid = random_records(&mut r);
        let input = match i % 4 {
            0 => (0..r.below(64)).map(|_| r.next() as u8).collect(),
            1 => {
                let mut b =
                    if i % 8 == 1 { b"FOLIOTRC\x02\x00\x01\x00".to_vec() } else { b"FOLIOTRC\x03\x00\x01\x0c\x3e\x00\x00\x00".to_vec() };
                b.extend((0..r.below(64)).map(|_| r.next() as u8));
                b
            }
            _ => mutate(&mut r, encode(&valid)),
        };
        match Trace::read(&input[..]) {
            Ok(t) => {
                ok += 1;
                replay(t);
            }
            Err(e) => {
                err += 1;
                assert!(!e.is_empty() && !e.contains('\n'), "input {i}: error is not one line: {e:?}");
            }
        }
        if i % 8 == 0 {
            // Unmutated traces must read back exactly and replay.
            let bytes = encode(&valid);
            let back = TraceReader::new(&bytes[..]).unwrap().read_all().unwrap();
            assert_eq!(back, canonical(&valid));
            replay(Trace::read(&bytes[..]).unwrap());
        }
    }
    eprintln!("trace fuzz: {iters} inputs, {ok} accepted, {err} rejected, 0 crashes");
    assert!(err > 0, "mutations must produce rejected inputs");
}

/// The valgrind-log converter must take any text: random mutations of a
/// realistic log, never a panic.
#[test]
fn valgrind_log_converter_never_panics() {
    use foliosim::workload::trace_record::from_valgrind_log;
    let log = "SYSCALL[7,1](12) sys_brk ( 0x0 ) --> [pre-success] Success(0x4035000) \nI  04020c9c,5\n\
SYSCALL[7,1](257) sys_openat ( 4294967196, 0x4034bb0(/lib/libz.so), 524288 ) --> [async] ... \n\
SYSCALL[7,1](257) ... [async] --> Success(0x4) \n\
SYSCALL[7,1](9) sys_mmap ( 0x0, 16400, 1, 2050, 4, 0 ) --> [pre-success] Success(0x4837000) \n L 04837010,8\n S 04837020,8\n M 04900ffc,8\n\
SYSCALL[7,1](25) sys_mremap ( 0x4837000, 16400, 32768, 1 ) --> [pre-success] Success(0x5000000) \n\
SYSCALL[7,1](102) sys_getuid ( )[sync] --> Success(0x0) \nSYSCALL[7,1](11) sys_munmap ( 0x5000000, 32768 )[sync] --> Success(0x0) \n";
    let iters: u64 = std::env::var("FOLIOSIM_FUZZ_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000) / 4;
    let mut r = Rng(0xfeed);
    for _ in 0..iters {
        let b = mutate(&mut r, log.as_bytes().to_vec());
        let res = from_valgrind_log(&b[..], Vec::new(), "{}", Box::new(|_| None));
        if let Ok((bytes, _)) = res {
            // Whatever it accepted must read back.
            TraceReader::new(&bytes[..]).unwrap().read_all().unwrap();
        }
    }
}
