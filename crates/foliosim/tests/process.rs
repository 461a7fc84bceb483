//! Processes as a kernel build runs them (issue 3, kbuild): execve of a
//! file-backed binary, wait4, and write() into the page cache. Checker on.

use foliosim::config;
use foliosim::mm::exec::{EXEC_STACK, STACK_TOP};
use foliosim::mm::mem_map::pg;
use foliosim::mm::vmstat::Stat;
use foliosim::run::{self, Outcome};
use foliosim::types::Error;
use foliosim::workload::{errno, map, prot, Access, FsKind, Op, Ret, SetupEnv, TaskId, Workload};
use std::sync::{Arc, Mutex};

const BASE: u64 = 0x40_0000;
const TEXT: u64 = 1 << 20;
const DATA: u64 = 64 << 10;
const BSS: u64 = 64 << 10;

/// Spawned processes run `progs[i]`; a forked child runs `child`. Every
/// result is logged as (task, op, result).
struct Progs {
    progs: Vec<Vec<Op>>,
    child: Vec<Op>,
    ids: Vec<TaskId>,
    pc: Vec<(TaskId, usize, Option<Op>)>,
    log: Arc<Mutex<Vec<(TaskId, Op, Ret)>>>,
}

impl Workload for Progs {
    fn name(&self) -> &str {
        "progs"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        // File 0: the binary (page cache populated); file 1: an empty output.
        env.create_file(FsKind::Tmpfs, TEXT + DATA, true)?;
        env.create_file(FsKind::Tmpfs, 0, false)?;
        // File 2: an empty file on a disk.
        env.create_file(FsKind::Disk, 0, false)?;
        for i in 0..self.progs.len() {
            let id = env.spawn_process(Some(i as u32))?;
            self.ids.push(id);
            self.pc.push((id, 0, None));
        }
        Ok(())
    }
    fn on_fork(&mut self, _p: TaskId, c: TaskId) {
        self.pc.push((c, 0, None));
    }
    fn next_op(&mut self, task: TaskId, last: Ret, _ops: &mut u64) -> Op {
        let k = self.pc.iter().position(|p| p.0 == task).unwrap();
        if let Some(prev) = self.pc[k].2 {
            self.log.lock().unwrap().push((task, prev, last));
        }
        let prog = match self.ids.iter().position(|&i| i == task) {
            Some(i) => &self.progs[i],
            None => &self.child,
        };
        let op = prog.get(self.pc[k].1).copied().unwrap_or(Op::Exit);
        self.pc[k].1 += 1;
        self.pc[k].2 = Some(op);
        op
    }
}

type Log = Vec<(TaskId, Op, Ret)>;

fn run_progs(progs: Vec<Vec<Op>>, child: Vec<Op>, duration_s: f64, knobs: &str) -> (Outcome, Log) {
    let c = config::from_toml(
        &format!("[machine]\nprofile = \"ampere-altra-160\"\nnr_cpus = 2\nnode_mem_mib = [256, 256]\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = {duration_s}\ncheck = true\naudit_interval_ms = 0.2\n[knobs]\n{knobs}\n"),
        "<test>",
    )
    .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let w = Box::new(Progs { progs, child, ids: Vec::new(), pc: Vec::new(), log: log.clone() });
    let o = run::simulate_with(&c, w, &mut |_| true).unwrap();
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    let l = log.lock().unwrap().clone();
    (o, l)
}

fn exec() -> Op {
    Op::Exec { file: 0, vaddr: BASE, text: TEXT, data: DATA, bss: BSS, mmap_base: 0 }
}

/// A compiler-like start: exec, fetch 256 KiB of text, write one data page
/// and one bss page, then hold the mappings.
fn cc(hold_ns: u64) -> Vec<Op> {
    vec![
        exec(),
        Op::AccessRange { addr: BASE, stride: 4096, count: 64, kind: Access::Ifetch },
        Op::Access { addr: BASE + TEXT, kind: Access::Store },
        Op::Access { addr: BASE + TEXT + DATA, kind: Access::Store },
        Op::Compute { ns: hold_ns },
    ]
}

/// Two processes exec the same binary: their text PTEs map the very same
/// page-cache folios (no new page cache), faulted in with fault-around;
/// the data page each writes is a private anon copy (do_cow_fault); the
/// pre-exec mms are gone and the layout is the program headers'.
#[test]
fn exec_maps_the_binary_from_the_shared_page_cache() {
    let (o, log) = run_progs(vec![cc(1_000_000_000), cc(1_000_000_000)], vec![], 0.01, "");
    let k = &o.kernel;
    let sp = log.iter().filter(|(_, op, _)| matches!(op, Op::Exec { .. })).map(|e| e.2).collect::<Vec<_>>();
    assert_eq!(sp, vec![Ret::Val(STACK_TOP as i64); 2], "exec returns the stack top");
    let binary_pages = (TEXT + DATA) / 4096;
    assert_eq!(k.stat().get(Stat::NrFilePages) as u64, binary_pages, "text faults found the cache: nothing new was read in");
    for idx in [0u64, 63] {
        let pfn = *k.inodes()[0].pages.get(&idx).unwrap();
        assert_eq!(k.mem_map().get(pfn).mapcount, 2, "text page {idx} is mapped by both processes");
    }
    assert!(k.stat().get(Stat::FaultAroundPages) > 0, "fault-around mapped neighbours");
    assert!(k.stat().get(Stat::FaultFileRead) <= 2 * 64 / 8, "64 text pages took {} read faults", k.stat().get(Stat::FaultFileRead));
    // The data page: each process has its own copy; the cached page is unmapped.
    assert_eq!(k.stat().get(Stat::FaultCow), 2);
    let data_pfn = *k.inodes()[0].pages.get(&(TEXT / 4096)).unwrap();
    assert_eq!(k.mem_map().get(data_pfn).mapcount, 0);
    for t in [0usize, 1] {
        let mm = &k.mms()[k.tasks()[t].mm as usize];
        assert!(k.tasks()[t].mm >= 2, "a fresh mm");
        let text = mm.vma_lookup(BASE).unwrap();
        assert_eq!((text.start, text.end, text.file, text.pgoff), (BASE, BASE + TEXT, 1, 0));
        let data = mm.vma_lookup(BASE + TEXT).unwrap();
        assert_eq!((data.end, data.file, data.pgoff), (BASE + TEXT + DATA, 1, TEXT / 4096));
        let bss = mm.vma_lookup(BASE + TEXT + DATA).unwrap();
        assert_eq!((bss.end, bss.file), (BASE + TEXT + DATA + BSS, 0));
        assert_eq!(mm.brk().0, BASE + TEXT + DATA + BSS, "the heap starts after bss");
        let stack = mm.vma_lookup(STACK_TOP - 8).unwrap();
        assert_eq!(stack.start, STACK_TOP - EXEC_STACK);
        assert!(mm.pt().pte(STACK_TOP - 4096).present(), "copy_strings wrote the argument page");
        assert!(!k.mms()[t].alive(), "the spawned mm {t} was torn down by exec");
    }
    assert_eq!(k.stat().get(Stat::Exec), 2);
    let file_vmas = k.mms().iter().filter(|m| m.alive()).flat_map(|m| m.vmas().values()).filter(|v| v.file == 1).count();
    assert_eq!(file_vmas, 4, "text and data VMAs of two processes map the binary");
}

/// fork + exec: the child's CoW copy of the parent's memory is dropped at
/// exec, so the parent's pages are mapped once again; the parent sleeps
/// in wait4 (no CPU time) until the child exits, then reaps it; a second
/// wait4 finds no children. exec's argument-page fault is billed to execve.
#[test]
fn wait_reaps_the_child_after_exec_and_exit() {
    let anon = Op::Mmap {
        addr: 0x1000_0000,
        len: 16 * 4096,
        prot: prot::READ | prot::WRITE,
        flags: map::PRIVATE | map::ANONYMOUS | map::FIXED,
        fd: -1,
        off: 0,
    };
    let parent = vec![
        anon,
        Op::AccessRange { addr: 0x1000_0000, stride: 4096, count: 16, kind: Access::Store },
        Op::Fork,
        Op::Wait,
        Op::Wait,
        Op::Compute { ns: 1_000_000_000 },
    ];
    let child = vec![exec(), Op::Compute { ns: 2_000_000 }, Op::Exit];
    let (o, log) = run_progs(vec![parent], child, 0.01, "");
    let k = &o.kernel;
    let child_id = 1u32;
    let waits: Vec<Ret> = log.iter().filter(|e| e.0 == 0 && e.1 == Op::Wait).map(|e| e.2).collect();
    assert_eq!(waits, vec![Ret::Val(child_id as i64), Ret::Err(errno::ECHILD)]);
    let c = &k.tasks()[child_id as usize];
    assert!(c.exited && c.parent.is_none(), "reaped");
    assert!(k.tasks()[0].children.is_empty());
    assert!(c.clock >= 2_000_000, "the child computed 2 ms");
    // The parent slept through the child's 2 ms: its kernel time is its
    // own mmap, faults, fork and two wait4 entries, far below 2 ms.
    let p = &k.tasks()[0];
    assert!(p.sys_ns < 1_000_000, "parent sys {} ns", p.sys_ns);
    assert!(p.entry_ns[foliosim::mm::vmstat::Entry::Wait4 as usize] > 0);
    assert_eq!(k.stat().get(Stat::WaitReaped), 1);
    // The parent's pages: mapcount back to 1 after the child's exec.
    let pfn = k.mms()[0].pt().pte(0x1000_0000).pfn();
    assert_eq!(k.mem_map().get(pfn).mapcount, 1);
    assert!(!k.mms()[1].alive(), "the child's fork copy went at exec");
    // execve carries the argument-page fault; the child's fault entry holds none of it.
    let ce = &c.entry_ns;
    assert!(ce[foliosim::mm::vmstat::Entry::Execve as usize] > 0);
    assert_eq!(ce[foliosim::mm::vmstat::Entry::Fault as usize], 0, "the child made no user-mode fault");
}

/// A parent that waits while its child still runs sleeps until the exit:
/// the wait returns no earlier than the child's exit, and the parent is
/// charged no CPU time for the sleep.
#[test]
fn wait_sleeps_until_the_child_exits() {
    let parent = vec![Op::Fork, Op::Wait, Op::Exit];
    let child = vec![Op::Compute { ns: 3_000_000 }, Op::Exit];
    let (o, log) = run_progs(vec![parent], child, 0.01, "");
    assert!(log.iter().any(|e| e.0 == 0 && e.1 == Op::Wait && e.2 == Ret::Val(1)));
    let (p, c) = (&o.kernel.tasks()[0], &o.kernel.tasks()[1]);
    assert!(p.exited && c.exited);
    assert!(p.clock >= c.clock, "parent exited at {} before its child's exit at {}", p.clock, c.clock);
    assert!(p.sys_ns + p.user_ns < 1_000_000, "no CPU time while asleep: sys {} user {}", p.sys_ns, p.user_ns);
}

/// write() into an empty file allocates page-cache pages and dirties
/// them; rewriting them dirties nothing new; the file grows.
#[test]
fn write_creates_dirty_page_cache() {
    let prog = vec![
        Op::Open { file: 1 },
        Op::Write { fd: 3, len: 40 << 10, buf: 0 },
        Op::Lseek { fd: 3, off: 0 },
        Op::Write { fd: 3, len: 4096, buf: 0 },
        Op::Close { fd: 3 },
        Op::Compute { ns: 1_000_000_000 },
    ];
    let (o, log) = run_progs(vec![prog], vec![], 0.01, "");
    let k = &o.kernel;
    let w: Vec<Ret> = log.iter().filter(|e| matches!(e.1, Op::Write { .. })).map(|e| e.2).collect();
    assert_eq!(w, vec![Ret::Val(40 << 10), Ret::Val(4096)]);
    assert_eq!(k.stat().get(Stat::NrDirty), 10);
    assert_eq!(k.stat().get(Stat::NrFilePages) as u64, (TEXT + DATA) / 4096 + 10);
    assert_eq!(k.inodes()[1].size, 40 << 10);
    for idx in 0..10u64 {
        let pfn = *k.inodes()[1].pages.get(&idx).unwrap();
        assert!(k.mem_map().get(pfn).flags & pg::DIRTY != 0, "page {idx} dirty");
    }
}

/// write() of a whole page that is not in the page cache reads nothing
/// from disk (write_begin reads only the blocks a write covers in part);
/// a partial write of one does.
#[test]
fn a_whole_page_write_reads_nothing_a_partial_one_reads_the_page() {
    let prog = vec![
        Op::Open { file: 2 },
        // Pages 0..20 now lie below the end of the file, none cached.
        Op::Lseek { fd: 3, off: 80 << 10 },
        Op::Write { fd: 3, len: 4096, buf: 0 },
        Op::Lseek { fd: 3, off: 0 },
        Op::Write { fd: 3, len: 8192, buf: 0 },
        Op::Lseek { fd: 3, off: (8 << 10) + 100 },
        Op::Write { fd: 3, len: 100, buf: 0 },
        Op::Close { fd: 3 },
        Op::Compute { ns: 1_000_000_000 },
    ];
    let (o, _) = run_progs(vec![prog], vec![], 0.01, "");
    let k = &o.kernel;
    assert_eq!(k.stat().get(Stat::Pgmajfault), 1, "only the partial write read its page");
    assert_eq!(k.stat().get(Stat::NrDirty), 4);
}

/// The kbuild workload end to end: every job is exec'd, reaped and leaves
/// a dirty object file; the binary's page cache is shared, not re-read.
#[test]
fn kbuild_execs_waits_and_writes_objects() {
    let c = config::from_toml(
        "[machine]\nprofile = \"ampere-altra-160\"\nnr_cpus = 4\nnode_mem_mib = [1024, 1024]\ntlb_contpte = false\n[workload]\nname = \"kbuild\"\ntasks = 4\njobs = 3\nheaders = 20\ncompute_us = 100\n[run]\nwarmup_s = 0.0\nduration_s = 10.0\ncheck = true\naudit_interval_ms = 1.0\n[knobs]\n\"anon_folio.mode\" = \"rfc-v2\"\n",
        "<test>",
    )
    .unwrap();
    let o = run::simulate(&c, &mut |_| true).unwrap();
    let k = &o.kernel;
    assert!(k.check().violations.is_empty(), "{:?}", k.check().violations);
    assert_eq!(k.stat().get(Stat::Exec), 12);
    assert_eq!(k.stat().get(Stat::WaitReaped), 12);
    assert!(k.tasks().iter().take(4).all(|t| t.exited && t.ops == 3 && t.children.is_empty()));
    // 12 objects of 128 KiB, dirty and kept.
    assert_eq!(k.stat().get(Stat::NrDirty), 12 * 32);
    // Text fetches hit the populated binary: no text page was read in again.
    let before = (16u64 << 20) / 4096 + (512 << 10) / 4096;
    assert_eq!(k.inodes()[0].pages.len() as u64, before);
    assert!(k.stat().get(Stat::FaultAroundPages) > 0);
    assert!(k.stat().get(Stat::FaultCow) >= 12 * 128, "each job relocates its 128 data pages");
    assert!(k.mms().iter().all(|m| !m.alive()), "every mm was torn down");
}

/// A file mapping split in three by mprotect, copied by fork and unmapped
/// whole by both processes: each piece is a VMA of its own, so what is
/// torn down is more VMAs than were mapped (a replayed trace's split file
/// mappings). The kernel keeps no per-file count that could underflow;
/// the cached pages stay, mapped by nobody.
#[test]
fn a_split_file_mapping_unmaps_whole_in_parent_and_child() {
    const A: u64 = 0x2000_0000;
    let map_file = Op::Mmap { addr: A, len: 16 * 4096, prot: prot::READ, flags: map::PRIVATE | map::FIXED, fd: 3, off: 0 };
    let parent = vec![
        Op::Open { file: 0 },
        map_file,
        Op::AccessRange { addr: A, stride: 4096, count: 16, kind: Access::Load },
        Op::Mprotect { addr: A + 4 * 4096, len: 4 * 4096, prot: prot::READ | prot::WRITE },
        Op::Fork,
        Op::Munmap { addr: A, len: 16 * 4096 },
        Op::Wait,
    ];
    let child = vec![Op::Munmap { addr: A, len: 16 * 4096 }];
    let (o, log) = run_progs(vec![parent], child, 0.01, "");
    let k = &o.kernel;
    let munmaps = log.iter().filter(|(_, op, r)| matches!(op, Op::Munmap { .. }) && *r == Ret::Val(0)).count();
    assert_eq!(munmaps, 2, "parent and child unmapped the three pieces: {log:?}");
    for idx in 0..16u64 {
        let pfn = *k.inodes()[0].pages.get(&idx).unwrap();
        assert_eq!(k.mem_map().get(pfn).mapcount, 0, "page {idx} is mapped by nobody");
    }
}
