//! Replay of a recorded process tree (issue 8 point 4): a hand-written
//! version 2 trace of a gcc-like driver that forks two children, each
//! exec'ing a binary and mapping a shared library. Checker on.

use foliosim::config;
use foliosim::mm::vmstat::Stat;
use foliosim::run::{self, Outcome};
use foliosim::workload::trace::TraceReplay;
use foliosim::workload::trace_format::{Record, TraceReader, TraceWriter, K_IFETCH, K_LOAD, K_STORE};
use foliosim::workload::{Op, Ret, SetupEnv, TaskId, Workload};
use std::sync::{Arc, Mutex};

const PAGE: u64 = 4096;
const BASE: u64 = 0x40_0000;
const TEXT: u64 = 16 * PAGE;
const DATA: u64 = 2 * PAGE;
const BSS: u64 = 2 * PAGE;
/// Pages of the two files: the binary and the library.
const EXE_PAGES: u64 = 24;
const LIB_PAGES: u64 = 32;
const LIB_TEXT: u64 = 8 * PAGE;

type Log = Arc<Mutex<Vec<(TaskId, Op, Ret)>>>;

/// The replay, with every op's result logged as (task, op, result).
struct Logged {
    inner: TraceReplay,
    prev: std::collections::BTreeMap<TaskId, Op>,
    log: Log,
}

impl Workload for Logged {
    fn name(&self) -> &str {
        "logged-trace"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), String> {
        self.inner.setup(env)
    }
    fn on_fork(&mut self, parent: TaskId, child: TaskId) {
        self.inner.on_fork(parent, child)
    }
    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        if let Some(prev) = self.prev.remove(&task) {
            self.log.lock().unwrap().push((task, prev, last));
        }
        let op = self.inner.next_op(task, last, ops);
        if op == Op::Exit {
            // No result comes back: logged when issued.
            self.log.lock().unwrap().push((task, op, Ret::Val(0)));
        } else {
            self.prev.insert(task, op);
        }
        op
    }
}

fn exec() -> Record {
    Record::Exec { file: 0, vaddr: BASE, text: TEXT, data: DATA, data_off: TEXT - PAGE, bss: BSS }
}

/// ld.so-style map of the library's text at the recorded address `at`.
fn lib(at: u64) -> Record {
    Record::Mmap { addr: 0, len: LIB_TEXT, prot: 5, flags: 0x802, file: Some(1), off: 0, ret: at }
}

fn fetch(at: u64, pages: u64) -> Vec<Record> {
    (0..pages).map(|i| Record::Access { kind: K_IFETCH, page: (at >> 12) + i, repeat: 2 }).collect()
}

/// A driver (pid 10) runs two children one after the other, as gcc runs cc1
/// then as: each child execs the binary, maps the library at its own
/// recorded address and fetches from both; child 12 also writes a heap.
fn tree() -> Vec<Record> {
    let mut v = vec![
        Record::Meta { json: "{}".into() },
        Record::File { size: EXE_PAGES * PAGE, path: "/usr/bin/cc".into() },
        Record::File { size: LIB_PAGES * PAGE, path: "/lib/libc.so".into() },
        Record::Process { pid: 10, parent: 0 },
        exec(),
        lib(0x4800_0000),
    ];
    v.extend(fetch(BASE, 4));
    v.extend(fetch(0x4800_0000, 4));
    v.push(Record::Access { kind: K_STORE, page: (BASE + TEXT) >> 12, repeat: 0 });
    v.extend([
        Record::Fork { child: 11 },
        Record::Wait { child: 11 },
        Record::Fork { child: 12 },
        Record::Wait { child: 12 },
        Record::Exit { code: 0 },
    ]);
    v.extend([Record::Process { pid: 11, parent: 10 }, exec(), lib(0x4900_0000)]);
    v.extend(fetch(BASE, 8));
    v.extend(fetch(0x4900_0000, 8));
    v.push(Record::Access { kind: K_STORE, page: (BASE + TEXT + DATA) >> 12, repeat: 0 });
    v.push(Record::Exit { code: 0 });
    v.extend([Record::Process { pid: 12, parent: 10 }, exec(), lib(0x4a00_0000)]);
    v.extend(fetch(0x4a00_0000, 8));
    v.push(Record::Mmap { addr: 0, len: 4 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: 0x5000_0000 });
    v.extend((0..4).map(|i| Record::Access { kind: K_STORE, page: (0x5000_0000 >> 12) + i, repeat: 0 }));
    v.push(Record::Access { kind: K_LOAD, page: 0x5000_0000 >> 12, repeat: 0 });
    v.push(Record::Exit { code: 0 });
    v
}

fn encode(rs: &[Record]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    for r in rs {
        w.write(r).unwrap();
    }
    w.finish().unwrap()
}

fn replay(rs: Vec<Record>) -> (Outcome, Vec<(TaskId, Op, Ret)>, u64) {
    let c = config::from_toml(
        "[machine]\nprofile = \"generic-x86\"\nnr_cpus = 2\nnode_mem_mib = [256, 256]\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = 10.0\ncheck = true\naudit_interval_ms = 0.01\n",
        "<test>",
    )
    .unwrap();
    let inner = TraceReplay::from_records("t".into(), rs);
    let procs = inner.processes() as u64;
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let w = Box::new(Logged { inner, prev: Default::default(), log: log.clone() });
    let o = run::simulate_with(&c, w, &mut |_| true).unwrap();
    assert!(o.kernel.check.violations.is_empty(), "{:?}", o.kernel.check.violations);
    let l = log.lock().unwrap().clone();
    (o, l, procs)
}

#[test]
fn a_process_tree_replays_as_processes_sharing_the_page_cache() {
    let bytes = encode(&tree());
    let rs = TraceReader::new(&bytes[..]).unwrap().read_all().unwrap();
    let (o, log, procs) = replay(rs);
    let k = &o.kernel;
    assert_eq!(procs, 3);
    assert_eq!(k.stat.get(Stat::Fork), 2, "two forks");
    assert_eq!(k.stat.get(Stat::Exec), 3, "the driver and both children exec'd the binary");
    assert_eq!(k.stat.get(Stat::WaitReaped), 2);
    assert_eq!(k.tasks.len(), 3, "one task per recorded process");
    // Page cache: the two files' pages, counted once; every fetch from the
    // binary or the library was a file fault (no anonymous zero-fill).
    assert_eq!(k.stat.get(Stat::NrFilePages) as u64, EXE_PAGES + LIB_PAGES);
    // One read fault per process and file mapping it fetched from (the
    // driver and child 11: binary and library; child 12: library), the
    // rest mapped by fault-around; none mapped the zero page.
    assert_eq!(k.stat.get(Stat::FaultFileRead), 5);
    assert!(k.stat.get(Stat::FaultAroundPages) > 0);
    assert_eq!(k.stat.get(Stat::FaultZeroPage), 0);
    // The driver's store to its data segment: a CoW of the file page.
    assert_eq!(k.stat.get(Stat::FaultCow), 1, "one data-page CoW");
    // Order: fork 11, its exit, the wait reaping it, then fork 12, its exit, the second wait.
    let root = log[0].0;
    let forks: Vec<(usize, i64)> =
        log.iter().enumerate().filter(|(_, e)| e.0 == root && e.1 == Op::Fork).map(|(i, e)| (i, e.2.val())).collect();
    let waits: Vec<(usize, i64)> =
        log.iter().enumerate().filter(|(_, e)| e.0 == root && e.1 == Op::Wait).map(|(i, e)| (i, e.2.val())).collect();
    let exits: Vec<(usize, TaskId)> = log.iter().enumerate().filter(|(_, e)| e.1 == Op::Exit).map(|(i, e)| (i, e.0)).collect();
    assert_eq!(forks.len(), 2);
    assert_eq!(
        waits.iter().map(|w| w.1).collect::<Vec<_>>(),
        forks.iter().map(|f| f.1).collect::<Vec<_>>(),
        "each wait reaps the child forked before it"
    );
    for ((f, child), (w, _)) in forks.iter().zip(&waits) {
        assert!(f < w);
        let first = log.iter().position(|e| e.0 as i64 == *child).expect("the child ran");
        assert!(first > *f, "the child starts after the fork");
        assert!(matches!(log[first].1, Op::Exec { file: 0, vaddr: BASE, .. }), "the child's first op is its exec: {:?}", log[first]);
        assert_eq!(log[first].2, Ret::Val(foliosim::mm::exec::STACK_TOP as i64));
        let exit = exits.iter().find(|e| e.1 as i64 == *child).expect("the child exited").0;
        assert!(first < exit && exit < *w, "the child exits before the wait that reaps it returns");
    }
    assert!(forks[1].0 > waits[0].0, "the second fork follows the first wait");
    assert!(exits.last().unwrap().1 == root, "the driver exits last");
    // Child 12's heap: four stores, one anonymous fault each (besides bss
    // and the kernel's argument pages).
    assert!(k.stat.get(Stat::FaultAnon) >= 5, "{}", k.stat.get(Stat::FaultAnon));
}

/// A version 1 trace (one process, no Process records) still replays: its
/// regions are anonymous memory mapped before its first record.
#[test]
fn a_version_1_trace_replays_as_one_process() {
    let rs = vec![
        Record::Region { addr: 0x40_0000, len: 2 * PAGE },
        Record::Access { kind: K_STORE, page: 0x400, repeat: 0 },
        Record::Access { kind: K_STORE, page: 0x401, repeat: 0 },
    ];
    let mut w = TraceWriter::with_version(Vec::new(), 1).unwrap();
    for r in &rs {
        w.write(r).unwrap();
    }
    let bytes = w.finish().unwrap();
    let (o, _, procs) = replay(TraceReader::new(&bytes[..]).unwrap().read_all().unwrap());
    assert_eq!(procs, 1);
    assert_eq!(o.kernel.stat.get(Stat::FaultAnon), 2);
    assert_eq!(o.kernel.stat.get(Stat::Fork), 0);
}
