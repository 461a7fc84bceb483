//! Replay of a recorded program tree (issue 8 point 4, issue 29 point 2):
//! hand-written traces of a gcc-like driver that forks two children, each
//! exec'ing a binary and mapping a shared library; of threads, of vfork,
//! of compute on the simulated CPUs, and of a make re-run at other
//! parallelisms through the jobserver. Checker on.

use foliosim::config;
use foliosim::mm::vmstat::Stat;
use foliosim::run::{self, Outcome};
use foliosim::types::Error;
use foliosim::workload::trace::TraceReplay;
use foliosim::workload::trace_format::{Record, K_IFETCH, K_LOAD, K_STORE, WAIT_NOHANG};
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
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
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
        Record::File { size: EXE_PAGES * PAGE, path: "/usr/bin/cc".into(), flags: 0 },
        Record::File { size: LIB_PAGES * PAGE, path: "/lib/libc.so".into(), flags: 0 },
        Record::Root { tid: 10 },
        Record::Task { tid: 10 },
        exec(),
        lib(0x4800_0000),
    ];
    v.extend(fetch(BASE, 4));
    v.extend(fetch(0x4800_0000, 4));
    v.push(Record::Access { kind: K_STORE, page: (BASE + TEXT) >> 12, repeat: 0 });
    v.extend([
        Record::Fork { child: 11 },
        Record::Wait { child: 11, flags: 0 },
        Record::Fork { child: 12 },
        Record::Wait { child: 12, flags: 0 },
        Record::Exit { code: 0 },
    ]);
    v.extend([Record::Task { tid: 11 }, exec(), lib(0x4900_0000)]);
    v.extend(fetch(BASE, 8));
    v.extend(fetch(0x4900_0000, 8));
    v.push(Record::Access { kind: K_STORE, page: (BASE + TEXT + DATA) >> 12, repeat: 0 });
    v.push(Record::Exit { code: 0 });
    v.extend([Record::Task { tid: 12 }, exec(), lib(0x4a00_0000)]);
    v.extend(fetch(0x4a00_0000, 8));
    v.push(Record::Mmap { addr: 0, len: 4 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: 0x5000_0000 });
    v.push(Record::Run { kind: K_STORE, page: 0x5000_0000 >> 12, count: 4, step: 1 });
    v.push(Record::Access { kind: K_LOAD, page: 0x5000_0000 >> 12, repeat: 0 });
    v.push(Record::Exit { code: 0 });
    v
}

fn config(cpus: u32) -> foliosim::config::Config {
    config::from_toml(
        &format!("[machine]\nprofile = \"generic-x86\"\nnr_cpus = {cpus}\nnode_mem_mib = [256, 256]\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = 10.0\ncheck = true\naudit_interval_ms = 0.01\n"),
        "<test>",
    )
    .unwrap()
}

fn replay_on(inner: TraceReplay, cpus: u32) -> (Outcome, Vec<(TaskId, Op, Ret)>) {
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let w = Box::new(Logged { inner, prev: Default::default(), log: log.clone() });
    let o = run::simulate_with(&config(cpus), w, &mut |_| true).unwrap();
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    let l = log.lock().unwrap().clone();
    (o, l)
}

fn replay(rs: Vec<Record>) -> (Outcome, Vec<(TaskId, Op, Ret)>, u64) {
    let inner = TraceReplay::from_records("t".into(), &rs).unwrap();
    let procs = inner.tasks() as u64;
    let (o, l) = replay_on(inner, 2);
    (o, l, procs)
}

/// How long simulated task `task` slept in all (Op::Nanosleep).
fn slept(log: &[(TaskId, Op, Ret)], task: TaskId) -> u64 {
    log.iter().filter(|(t, _, _)| *t == task).map(|(_, op, _)| if let Op::Nanosleep { ns } = op { *ns } else { 0 }).sum()
}

/// When the last task ended, in simulated ns.
fn finished(o: &Outcome) -> u64 {
    let users: Vec<_> = o.kernel.tasks().iter().filter(|t| t.kthread.is_none()).collect();
    assert!(users.iter().all(|t| t.exited), "every task exited");
    users.iter().map(|t| t.clock).max().unwrap()
}

#[test]
fn a_process_tree_replays_as_processes_sharing_the_page_cache() {
    let (o, log, procs) = replay(tree());
    let k = &o.kernel;
    assert_eq!(procs, 3);
    assert_eq!(k.stat().get(Stat::Fork), 2, "two forks");
    assert_eq!(k.stat().get(Stat::Exec), 3, "the driver and both children exec'd the binary");
    assert_eq!(k.stat().get(Stat::WaitReaped), 2);
    assert_eq!(k.tasks().len(), 3, "one task per recorded process");
    // Page cache: the two files' pages, counted once; every fetch from the
    // binary or the library was a file fault (no anonymous zero-fill).
    assert_eq!(k.stat().get(Stat::NrFilePages) as u64, EXE_PAGES + LIB_PAGES);
    // One read fault per process and file mapping it fetched from (the
    // driver and child 11: binary and library; child 12: library), the
    // rest mapped by fault-around; none mapped the zero page.
    assert_eq!(k.stat().get(Stat::FaultFileRead), 5);
    assert!(k.stat().get(Stat::FaultAroundPages) > 0);
    assert_eq!(k.stat().get(Stat::FaultZeroPage), 0);
    // The driver's store to its data segment: a CoW of the file page.
    assert_eq!(k.stat().get(Stat::FaultCow), 1, "one data-page CoW");
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
    // Child 12's heap: a run of four stores, one anonymous fault each
    // (besides bss and the kernel's argument pages).
    assert!(k.stat().get(Stat::FaultAnon) >= 5, "{}", k.stat().get(Stat::FaultAnon));
}

/// A process with two threads: they share its address space (one mm, its
/// translation table), each runs on a CPU of its own.
#[test]
fn threads_share_their_process_address_space() {
    let heap = 0x7f00_1000_0000u64;
    let mut v = vec![
        Record::Root { tid: 1 },
        Record::Task { tid: 1 },
        Record::Mmap { addr: 0, len: 64 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: heap },
        Record::Clone { child: 2 },
        Record::Clone { child: 3 },
        Record::Time { user_ns: 1_000_000, sys_ns: 0 },
        Record::Exit { code: 0 },
    ];
    for (t, first) in [(2u64, 0u64), (3, 32)] {
        v.extend([
            Record::Task { tid: t },
            Record::Run { kind: K_STORE, page: (heap >> 12) + first, count: 32, step: 1 },
            Record::Time { user_ns: 500_000, sys_ns: 0 },
            Record::Exit { code: 0 },
        ]);
    }
    let (o, _, _) = replay(v);
    let k = &o.kernel;
    let users: Vec<_> = k.tasks().iter().filter(|t| t.kthread.is_none()).collect();
    assert_eq!(users.len(), 3);
    assert!(users.iter().all(|t| t.mm == users[0].mm), "one mm for the three");
    assert_ne!(users[1].cpu, users[2].cpu, "the threads run on both CPUs");
    assert_eq!(k.stat().get(Stat::FaultAnon), 64, "each page of the shared heap faults once");
    assert_eq!(k.stat().get(Stat::Fork), 0, "a thread is no fork");
}

/// Threads replay at the model's pace, not the recording's: a thread that
/// reaches memory before the other thread's mmap of it has replayed waits
/// for it (and faults it), one behind the other's munmap skips it, and one
/// whose memory nobody maps ends with the others.
#[test]
fn a_thread_ahead_of_the_mapping_it_touches_waits_for_it() {
    let heap = 0x7f00_1000_0000u64;
    let gone = 0x7f00_2000_0000u64;
    let main = vec![
        Record::Root { tid: 1 },
        Record::Task { tid: 1 },
        Record::Mmap { addr: 0, len: 8 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: gone },
        Record::Clone { child: 2 },
        Record::Munmap { addr: gone, len: 8 * PAGE },
        // The thread runs at once; this mmap comes a millisecond later.
        Record::Time { user_ns: 1_000_000, sys_ns: 0 },
        Record::Mmap { addr: 0, len: 16 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: heap },
        Record::Time { user_ns: 2_000_000, sys_ns: 0 },
        Record::Exit { code: 0 },
    ];
    let thread = |pages: u64| {
        vec![
            Record::Task { tid: 2 },
            Record::Run { kind: K_STORE, page: heap >> 12, count: pages, step: 1 },
            Record::Time { user_ns: 100_000, sys_ns: 0 },
            Record::Run { kind: K_STORE, page: gone >> 12, count: 8, step: 1 },
            Record::Run { kind: K_STORE, page: 0x7f00_3000_0000 >> 12, count: 4, step: 1 },
            Record::Exit { code: 0 },
        ]
    };
    let (o, log, _) = replay([main.clone(), thread(16)].concat());
    let k = &o.kernel;
    assert_eq!(k.stat().get(Stat::FaultAnon), 16, "the heap's 16 pages fault once the mmap has replayed; the rest are skipped");
    // It waits a millisecond for the mmap, then for the memory nobody maps
    // until the main thread has ended (3 ms in).
    assert!((3_000_000..4_000_000).contains(&slept(&log, 1)), "the thread slept {} ns", slept(&log, 1));
    // Nobody waits on memory its own task would have to map, nor past the
    // other tasks' end: the replay ends as the main thread does.
    assert!(finished(&o) < 4_000_000, "{}", finished(&o));
}

/// The other way round: a main thread reaches its munmap of memory its
/// thread has yet to touch (in the recording the thread was done with it
/// first: the join is not in the trace). The munmap waits for the thread's
/// accesses, which fault; a range no other thread touches again is
/// unmapped at once.
#[test]
fn a_munmap_waits_for_the_threads_still_to_touch_its_range() {
    let shared = 0x7f00_1000_0000u64;
    let own = 0x7f00_2000_0000u64;
    let main = vec![
        Record::Root { tid: 1 },
        Record::Task { tid: 1 },
        Record::Mmap { addr: 0, len: 8 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: shared },
        Record::Mmap { addr: 0, len: 4 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: own },
        Record::Run { kind: K_STORE, page: own >> 12, count: 4, step: 1 },
        Record::Clone { child: 2 },
        Record::Munmap { addr: own, len: 4 * PAGE },
        Record::Munmap { addr: shared, len: 8 * PAGE },
        Record::Exit { code: 0 },
    ];
    let thread = vec![
        Record::Task { tid: 2 },
        // A millisecond of work before it touches the shared range.
        Record::Time { user_ns: 1_000_000, sys_ns: 0 },
        Record::Run { kind: K_STORE, page: (shared >> 12) + 7, count: 8, step: -1 },
        Record::Exit { code: 0 },
    ];
    let (o, log, _) = replay([main, thread].concat());
    let k = &o.kernel;
    assert_eq!(k.stat().get(Stat::FaultAnon), 12, "the main thread's 4 pages and the thread's 8, none skipped");
    assert!((1_000_000..3_000_000).contains(&slept(&log, 0)), "the munmap waited the thread's millisecond: {} ns", slept(&log, 0));
}

/// vfork: the child runs in the parent's mm (no copy, no CoW) and the
/// parent sleeps until the child's exec.
#[test]
fn a_vfork_child_borrows_the_mm_and_its_parent_waits_for_its_exec() {
    let heap = 0x7f00_1000_0000u64;
    let v = vec![
        Record::File { size: EXE_PAGES * PAGE, path: "/usr/bin/cc".into(), flags: 0 },
        Record::File { size: LIB_PAGES * PAGE, path: "/lib/libc.so".into(), flags: 0 },
        Record::Root { tid: 1 },
        Record::Task { tid: 1 },
        Record::Mmap { addr: 0, len: 16 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: heap },
        Record::Run { kind: K_STORE, page: heap >> 12, count: 16, step: 1 },
        Record::Vfork { child: 2 },
        Record::Access { kind: K_STORE, page: heap >> 12, repeat: 0 },
        Record::Wait { child: 2, flags: 0 },
        Record::Exit { code: 0 },
        Record::Task { tid: 2 },
        Record::Time { user_ns: 50_000, sys_ns: 0 },
        exec(),
        Record::Time { user_ns: 200_000, sys_ns: 0 },
        Record::Exit { code: 0 },
    ];
    let (o, log, _) = replay(v);
    let k = &o.kernel;
    assert_eq!(k.stat().get(Stat::FaultCow), 0, "nothing was copied: the parent's store after the vfork does not fault");
    let root = log[0].0;
    let vfork = log.iter().position(|e| e.0 == root && e.1 == Op::Vfork).unwrap();
    let child = log[vfork].2.val() as TaskId;
    let exec = log.iter().position(|e| e.0 == child && matches!(e.1, Op::Exec { .. })).unwrap();
    let next = log.iter().skip(vfork + 1).position(|e| e.0 == root).unwrap() + vfork + 1;
    assert!(next > exec, "the parent's next op comes after the child's exec");
    assert!(k.tasks()[root as usize].clock >= 50_000, "the parent slept through the child's 50 us before its exec");
}

/// Recorded CPU time is replayed as compute on the simulated CPUs: four
/// children of 1 ms each finish in about 1 ms on 4 CPUs and 4 ms on one.
#[test]
fn compute_runs_in_parallel_on_the_simulated_cpus() {
    let mut v = vec![Record::Root { tid: 1 }, Record::Task { tid: 1 }];
    for c in 2..6 {
        v.push(Record::Fork { child: c });
    }
    for c in 2..6 {
        v.push(Record::Wait { child: c, flags: 0 });
    }
    v.push(Record::Exit { code: 0 });
    for c in 2..6 {
        v.extend([Record::Task { tid: c }, Record::Time { user_ns: 1_000_000, sys_ns: 20_000 }, Record::Exit { code: 0 }]);
    }
    let t = |cpus| {
        let (o, _) = replay_on(TraceReplay::from_records("t".into(), &v).unwrap(), cpus);
        let user: u64 = o.kernel.tasks().iter().map(|t| t.user_ns).sum();
        assert_eq!(user, 4_000_000, "the recorded user time, all of it");
        let other: u64 = o.kernel.tasks().iter().map(|t| t.entry_ns[foliosim::mm::vmstat::Entry::Other as usize]).sum();
        assert_eq!(other, 80_000, "the recorded time of calls the model does not run");
        finished(&o)
    };
    let (one, four) = (t(1), t(4));
    assert!((1_000_000..1_500_000).contains(&four), "{four}");
    assert!(one > 4_000_000, "{one}");
}

/// A make recorded at -j2 (GNU make reaps with WNOHANG when it waited for a
/// job slot, blocks in wait4 for a prerequisite): four 1 ms compiles, then
/// a 1 ms link that needs them all. Replayed as recorded it takes about
/// 3 ms; with 4 job slots the compiles run at once (2 ms); with 1, one
/// after the other (5 ms). Each compile is a vfork'd child that execs.
#[test]
fn a_recorded_make_reruns_at_another_parallelism() {
    let make = Record::File { size: EXE_PAGES * PAGE, path: "/usr/bin/make".into(), flags: 0 };
    let cc = Record::File { size: EXE_PAGES * PAGE, path: "/usr/bin/cc".into(), flags: 0 };
    let mut v = vec![make, cc, Record::Root { tid: 1 }, Record::Task { tid: 1 }, exec()];
    let nohang = |c| Record::Wait { child: c, flags: WAIT_NOHANG };
    let block = |c| Record::Wait { child: c, flags: 0 };
    v.extend([
        Record::Vfork { child: 2 },
        Record::Vfork { child: 3 },
        nohang(2),
        Record::Vfork { child: 4 },
        nohang(3),
        Record::Vfork { child: 5 },
        block(4),
        block(5),
        Record::Vfork { child: 6 },
        block(6),
        Record::Exit { code: 0 },
    ]);
    let exec_cc = Record::Exec { file: 1, vaddr: BASE, text: TEXT, data: DATA, data_off: TEXT - PAGE, bss: BSS };
    for c in 2..7 {
        v.extend([Record::Task { tid: c }, exec_cc.clone(), Record::Time { user_ns: 1_000_000, sys_ns: 0 }, Record::Exit { code: 0 }]);
    }
    let t = |jobs| {
        let r = TraceReplay::from_records("t".into(), &v).unwrap().with_jobs(jobs, &["make"]);
        let (o, log) = replay_on(r, 8);
        assert_eq!(log.iter().filter(|e| e.1 == Op::Wait && e.2.val() > 0).count(), 5, "every child is reaped once");
        finished(&o)
    };
    let (rec, j1, j4) = (t(0), t(1), t(4));
    let ms = |ns: u64| ns as f64 / 1e6;
    assert!((3.0..3.5).contains(&ms(rec)), "as recorded: {}", ms(rec));
    assert!((5.0..5.6).contains(&ms(j1)), "-j1: {}", ms(j1));
    assert!((2.0..2.5).contains(&ms(j4)), "-j4: {}", ms(j4));
    // -j2 is the recorded parallelism: the same shape as recorded.
    assert!((3.0..3.5).contains(&ms(t(2))), "-j2: {}", ms(t(2)));
}

/// A make recorded at -j2 running 320 compiles of 20 ms (a vfork'd child
/// each; the make reaps with WNOHANG when it waited for a slot, as GNU
/// make does), then a 1 ms link. With `jobs = "cpus"` it replays as
/// make -j8 on an 8-CPU machine (8 compiles at a time: 40 rounds, 800 ms)
/// and as make -j160 on the 160-CPU profile (160 at a time: 2 rounds);
/// as recorded (-j2) it runs 2 at a time on either: the parallelism is
/// the jobserver's, not the CPUs'. What runs at once is counted from
/// each compile's 20 ms of computing, which ends when it exits.
#[test]
fn a_recorded_make_replays_as_make_j_nproc_on_each_machine() {
    const JOBS: u64 = 320;
    const CC_NS: u64 = 20_000_000;
    let make = Record::File { size: EXE_PAGES * PAGE, path: "/usr/bin/make".into(), flags: 0 };
    let cc = Record::File { size: EXE_PAGES * PAGE, path: "/usr/bin/cc".into(), flags: 0 };
    let mut v = vec![make, cc, Record::Root { tid: 1 }, Record::Task { tid: 1 }, exec()];
    // At -j2: two children started, then each further one after a
    // WNOHANG reap of the oldest; the link waits for the last two.
    v.extend([Record::Vfork { child: 2 }, Record::Vfork { child: 3 }]);
    for c in 4..2 + JOBS {
        v.extend([Record::Wait { child: c - 2, flags: WAIT_NOHANG }, Record::Vfork { child: c }]);
    }
    let link = 2 + JOBS;
    v.extend([
        Record::Wait { child: link - 2, flags: 0 },
        Record::Wait { child: link - 1, flags: 0 },
        Record::Vfork { child: link },
        Record::Wait { child: link, flags: 0 },
        Record::Exit { code: 0 },
    ]);
    let exec_cc = Record::Exec { file: 1, vaddr: BASE, text: TEXT, data: DATA, data_off: TEXT - PAGE, bss: BSS };
    for c in 2..=link {
        let ns = if c == link { 1_000_000 } else { CC_NS };
        v.extend([Record::Task { tid: c }, exec_cc.clone(), Record::Time { user_ns: ns, sys_ns: 0 }, Record::Exit { code: 0 }]);
    }
    // (the most compiles computing at once, the build's end in ms)
    let t = |profile: &str, cpus: u32, per_cpu: bool| {
        let r = TraceReplay::from_records("t".into(), &v).unwrap();
        let r = if per_cpu { r.with_jobs_per_cpu(&["make"]) } else { r };
        let c = config::from_toml(
            &format!("[machine]\nprofile = \"{profile}\"\nnr_cpus = {cpus}\nnode_mem_mib = [512, 512]\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = 10.0\ncheck = true\naudit_interval_ms = 5.0\n"),
            "<test>",
        )
        .unwrap();
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let o = run::simulate_with(&c, Box::new(Logged { inner: r, prev: Default::default(), log: log.clone() }), &mut |_| true).unwrap();
        assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
        let reaped = log.lock().unwrap().iter().filter(|e| e.1 == Op::Wait && e.2.val() > 0).count() as u64;
        assert_eq!(reaped, JOBS + 1, "every child is reaped once");
        let mut edges: Vec<(u64, i32)> = Vec::new();
        for t in o.kernel.tasks().iter().filter(|t| t.kthread.is_none() && t.user_ns == CC_NS) {
            edges.extend([(t.clock - CC_NS, 1), (t.clock, -1)]);
        }
        assert_eq!(edges.len() as u64, 2 * JOBS, "every compile computed its recorded time");
        edges.sort();
        let (mut now, mut peak) = (0, 0);
        for (_, d) in edges {
            now += d;
            peak = peak.max(now);
        }
        (peak, finished(&o) as f64 / 1e6)
    };
    let (j8, j8_ms) = t("generic-x86", 8, true);
    assert_eq!(j8, 8, "make -j8 on 8 CPUs");
    assert!((800.0..900.0).contains(&j8_ms), "40 rounds of 20 ms: {j8_ms} ms");
    let (j160, j160_ms) = t("ampere-altra-160", 160, true);
    assert_eq!(j160, 160, "make -j160 on 160 CPUs");
    // Two rounds of 20 ms; 160 execs at once also share the machine's
    // memory bandwidth, which stretches them a little.
    assert!((40.0..80.0).contains(&j160_ms), "2 rounds of 20 ms: {j160_ms} ms");
    let (rec, rec_ms) = t("ampere-altra-160", 160, false);
    assert_eq!(rec, 2, "as recorded: -j2");
    assert!(rec_ms > 3200.0, "160 rounds of 20 ms: {rec_ms} ms");
}

/// A replayed process lives where the recorded one did: its mmap area
/// starts at the recorded top (the interpreter's end: the ASLR draw), the
/// kernel's own pieces of its image (the stack, the vDSO) are at their
/// recorded addresses, the interpreter's segments go over its whole first
/// mapping, and the program's unhinted mmaps then fall top-down where they
/// fell, so fault-around windows and PMDs cut them as they cut the
/// recording's.
#[test]
fn a_replayed_process_maps_where_the_recorded_one_did() {
    let top = 0x7f12_3450_3000u64; // not 64 KiB- or 2 MiB-aligned
    let interp = top - 8 * PAGE;
    let vdso = interp - 3 * PAGE;
    let anon = vdso - 4 * PAGE;
    let v = vec![
        Record::Meta { json: "{}".into() },
        Record::File { size: EXE_PAGES * PAGE, path: "/usr/bin/cc".into(), flags: 0 },
        Record::File { size: 8 * PAGE, path: "/lib64/ld-linux-x86-64.so.2".into(), flags: 0 },
        Record::Root { tid: 1 },
        Record::Task { tid: 1 },
        exec(),
        Record::Mmap { addr: 0, len: 8 * PAGE, prot: 1, flags: 0x2, file: Some(1), off: 0, ret: interp },
        Record::Mmap { addr: 0, len: 5 * PAGE, prot: 5, flags: 0x2, file: Some(1), off: PAGE, ret: interp + PAGE },
        Record::Region { addr: vdso, len: 3 * PAGE },
        Record::Region { addr: 0x7ffd_0000_0000, len: 0x21000 },
        Record::Mmap { addr: 0, len: 4 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: anon },
        Record::Run { kind: K_STORE, page: anon >> 12, count: 4, step: 1 },
        Record::Exit { code: 0 },
    ];
    let (_, log, _) = replay(v);
    let maps: Vec<(u64, Ret)> =
        log.iter().filter_map(|(_, op, r)| if let Op::Mmap { len, .. } = op { Some((*len, *r)) } else { None }).collect();
    let at = |len: u64| maps.iter().filter(|m| m.0 == len).map(|m| m.1).collect::<Vec<_>>();
    assert_eq!(at(8 * PAGE), vec![Ret::Val(interp as i64)], "the interpreter ends at the recorded mmap_base");
    assert_eq!(at(5 * PAGE), vec![Ret::Val((interp + PAGE) as i64)], "its segment over its first mapping");
    assert_eq!(at(3 * PAGE), vec![Ret::Val(vdso as i64)], "the vDSO where the kernel put it");
    assert_eq!(at(0x21000), vec![Ret::Val(0x7ffd_0000_0000)], "the stack above the mmap area");
    assert_eq!(at(4 * PAGE), vec![Ret::Val(anon as i64)], "the program's mmap where it fell");
}
