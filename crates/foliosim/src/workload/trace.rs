//! "trace": replay of a recorded program (`foliosim record`, format in
//! docs/trace-format.md and `trace_format.rs`), each recorded process as a
//! simulated one: its forks, execs, waits and exit are the kernel's
//! (Op::Fork, Op::Exec, Op::Wait, Op::Exit, as kbuild uses them).
//!
//! Recorded addresses are the recording's; the simulated kernel places
//! mappings where it likes. The replayer keeps a translation table from
//! recorded ranges to simulated ones per process: every recorded mmap/mremap result, the
//! brk area (recorded base -> simulated base) and each `Region` (memory the
//! program used that no recorded call or exec created: its initial stack,
//! ld.so's bss; in a version 1 trace also its ELF image), mapped as private
//! anonymous memory before the first record of its process image).
//! MAP_FIXED targets, munmap/mprotect/madvise ranges and accesses are
//! translated through it; a range spanning several recorded mappings becomes
//! one call per piece. Accesses outside every known range are skipped, and a
//! replayed call that fails is skipped too (the recording only holds calls
//! that succeeded), so a replay always runs to the end and exits.
//!
//! One op = one recorded memory access (`1 + repeat` per access record).

use super::params::Params;
use super::trace_format::{self as tf, Record};
use super::{map, prot, Access, Advice, Fd, FileId, FsKind, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use std::collections::{BTreeMap, VecDeque};

const PAGE: u64 = 4096;

fn page_up(v: u64) -> u64 {
    v.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// What to do with the result of a queued op.
#[derive(Clone, Copy, Debug)]
enum After {
    Nothing,
    /// An open of file index i: keep the fd.
    Opened(usize),
    /// A mapping of the recorded range [rec, rec+len): translate it to the result.
    Mapped {
        rec: u64,
        len: u64,
    },
    /// The initial brk(0): the simulated brk base.
    BrkBase,
    /// A fork of recorded process `pid` (on_fork binds the child task).
    Forked(u64),
    /// An execve mapping the recorded image [vaddr, vaddr+len) where it was.
    Exec {
        vaddr: u64,
        len: u64,
    },
}

/// Recorded addresses -> simulated ones, for one address space.
#[derive(Clone, Default)]
struct Space {
    /// rec_start -> (rec_end, sim_start)
    xlat: BTreeMap<u64, (u64, u64)>,
    /// Recorded brk base and current end; simulated brk base.
    brk_rec: Option<(u64, u64)>,
    brk_sim: Option<u64>,
}

/// One recorded process: records[start..end] of the trace.
struct Proc {
    pid: u64,
    end: usize,
    next: usize,
    sp: Space,
    queue: VecDeque<(Op, After)>,
    pending: After,
    started: bool,
    done: bool,
}

impl Proc {
    fn new(pid: u64, start: usize, end: usize) -> Proc {
        Proc { pid, end, next: start, sp: Space::default(), queue: VecDeque::new(), pending: After::Nothing, started: false, done: false }
    }
}

pub struct TraceReplay {
    path: String,
    records: Vec<Record>,
    files: Vec<(u64, String)>,
    file_ids: Vec<FileId>,
    /// Opened by the first process before its first record; every other
    /// process inherits them through fork and exec.
    fds: Vec<Fd>,
    procs: Vec<Proc>,
    /// Simulated task -> its entry in procs.
    tasks: BTreeMap<TaskId, usize>,
}

impl TraceReplay {
    pub fn new(p: &mut Params) -> Result<Self, String> {
        let path = p.string("path")?;
        p.finish()?;
        let path = path.ok_or_else(|| "path: required (the trace file written by `foliosim record`)".to_string())?;
        let all = tf::read_file(std::path::Path::new(&path)).map_err(|e| format!("path: {e}"))?;
        Ok(Self::from_records(path, all))
    }

    /// Records before the first `Process` (a version 1 trace: all of them)
    /// are the first process's, pid 0.
    pub fn from_records(path: String, all: Vec<Record>) -> Self {
        let mut files = Vec::new();
        let mut records = Vec::with_capacity(all.len());
        let mut procs = vec![Proc::new(0, 0, 0)];
        for r in all {
            match r {
                Record::File { size, path } => files.push((size, path)),
                Record::Meta { .. } => {}
                Record::Process { pid, .. } => {
                    if let Some(p) = procs.last_mut() {
                        p.end = records.len();
                    }
                    procs.push(Proc::new(pid, records.len(), records.len()));
                }
                r => records.push(r),
            }
        }
        if let Some(p) = procs.last_mut() {
            p.end = records.len();
        }
        // A leading empty section exists only when the trace starts with
        // a Process record: the first process is then that one.
        if procs.len() > 1 && procs[0].end == 0 {
            procs.remove(0);
        }
        TraceReplay { path, records, files, file_ids: Vec::new(), fds: Vec::new(), procs, tasks: BTreeMap::new() }
    }

    /// Number of recorded processes.
    pub fn processes(&self) -> usize {
        self.procs.len()
    }

    /// The `Region`s of the instance starting at record `from` (up to the
    /// next exec): mapped before its first record.
    fn regions_from(&self, from: usize, end: usize) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        for (i, r) in self.records[from..end].iter().enumerate() {
            match *r {
                Record::Exec { .. } if i > 0 => break,
                Record::Region { addr, len } => v.push((addr, len)),
                _ => {}
            }
        }
        v
    }

    /// Queue what a process does when an instance starts at record `from`:
    /// brk(0) and the mappings of its regions.
    fn start_instance(&mut self, p: usize, from: usize) {
        let regions = self.regions_from(from, self.procs[p].end);
        let q = &mut self.procs[p].queue;
        q.push_back((Op::Brk { addr: 0 }, After::BrkBase));
        for (a, l) in regions {
            let op = Op::Mmap {
                addr: 0,
                len: page_up(l),
                prot: prot::READ | prot::WRITE | prot::EXEC,
                flags: map::PRIVATE | map::ANONYMOUS,
                fd: -1,
                off: 0,
            };
            q.push_back((op, After::Mapped { rec: a, len: l }));
        }
    }
}

impl Space {
    /// Simulated address of recorded `a`, if some known range holds it.
    fn translate(&self, a: u64) -> Option<u64> {
        if let (Some((b, end)), Some(s)) = (self.brk_rec, self.brk_sim) {
            if a >= b && a < page_up(end) {
                return Some(a - b + s);
            }
        }
        let (&start, &(end, sim)) = self.xlat.range(..=a).next_back()?;
        (a < end).then(|| a - start + sim)
    }

    /// The pieces of recorded [a, a+len) that are known: (sim_addr, len).
    fn pieces(&self, a: u64, len: u64) -> Vec<(u64, u64)> {
        let end = a.saturating_add(page_up(len));
        let mut v = Vec::new();
        if let (Some((b, bend)), Some(s)) = (self.brk_rec, self.brk_sim) {
            let (lo, hi) = (a.max(b), end.min(page_up(bend)));
            if lo < hi {
                v.push((lo - b + s, hi - lo));
            }
        }
        let first = self.xlat.range(..=a).next_back().map(|(&s, _)| s).unwrap_or(a);
        for (&s, &(e, sim)) in self.xlat.range(first..end) {
            let (lo, hi) = (a.max(s), end.min(e));
            if lo < hi {
                v.push((lo - s + sim, hi - lo));
            }
        }
        v
    }

    /// Forget recorded [a, a+len) (munmap, or a mapping replaced).
    fn forget(&mut self, a: u64, len: u64) {
        let end = a.saturating_add(page_up(len));
        let first = self.xlat.range(..=a).next_back().map(|(&s, _)| s).unwrap_or(a);
        let hit: Vec<(u64, (u64, u64))> = self.xlat.range(first..end).map(|(&s, &v)| (s, v)).collect();
        for (s, (e, sim)) in hit {
            if e <= a || s >= end {
                continue;
            }
            self.xlat.remove(&s);
            if s < a {
                self.xlat.insert(s, (a, sim));
            }
            if e > end {
                self.xlat.insert(end, (e, sim + (end - s)));
            }
        }
    }

    fn remember(&mut self, rec: u64, len: u64, sim: u64) {
        self.forget(rec, len);
        self.xlat.insert(rec, (rec + page_up(len), sim));
    }
}

impl TraceReplay {
    fn advice(a: u32) -> Option<Advice> {
        Some(match a {
            3 => Advice::WillNeed,
            4 => Advice::DontNeed,
            8 => Advice::Free,
            14 => Advice::HugePage,
            15 => Advice::NoHugePage,
            20 => Advice::Cold,
            21 => Advice::PageOut,
            _ => return None,
        })
    }

    /// Turn record `i` of process `p` into an op or queued ops (possibly none).
    fn expand(&mut self, p: usize, i: usize, ops: &mut u64) -> Option<Op> {
        if let Record::Exec { file, vaddr, text, data, data_off, bss } = self.records[i] {
            let (Some(&id), Some(&fd)) = (self.file_ids.get(file as usize), self.fds.get(file as usize)) else { return None };
            // The image goes where it was (execve maps it at the ELF's
            // addresses); the kernel puts data right after text, at file
            // offset `text`: where the ELF's offset differs, the data
            // segment is mapped again from its own offset.
            let q = &mut self.procs[p].queue;
            q.push_back((
                Op::Exec { file: id, vaddr, text, data, bss },
                After::Exec { vaddr, len: page_up(text) + page_up(data) + page_up(bss) },
            ));
            if data > 0 && data_off != text {
                let op = Op::Mmap {
                    addr: vaddr + page_up(text),
                    len: data,
                    prot: prot::READ | prot::WRITE,
                    flags: map::PRIVATE | map::FIXED,
                    fd,
                    off: data_off & !(PAGE - 1),
                };
                q.push_back((op, After::Nothing));
            }
            self.start_instance(p, i);
            return None;
        }
        let fds = &self.fds;
        let pr = &mut self.procs[p];
        let (sp, q) = (&mut pr.sp, &mut pr.queue);
        match self.records[i] {
            Record::Access { kind, page, repeat } => {
                let a = sp.translate(page << 12)?;
                let kind = match kind {
                    tf::K_STORE => Access::Store,
                    tf::K_IFETCH => Access::Ifetch,
                    _ => Access::Load,
                };
                *ops += 1 + repeat;
                return Some(if repeat == 0 {
                    Op::Access { addr: a, kind }
                } else {
                    Op::AccessRange { addr: a, stride: 0, count: repeat.saturating_add(1), kind }
                });
            }
            Record::Mmap { addr, len, prot: pr, flags, file, off, ret } => {
                let fixed = flags & (map::FIXED | 0x10_0000) != 0;
                let target = if fixed { sp.translate(addr) } else { None };
                let share = if flags & 0x3 == map::PRIVATE { map::PRIVATE } else { map::SHARED };
                let mut fl = share | (flags & (map::ANONYMOUS | map::POPULATE));
                if target.is_some() {
                    fl |= map::FIXED;
                }
                let fd = match file {
                    Some(f) if flags & map::ANONYMOUS == 0 => fds.get(f as usize).copied().unwrap_or(-1),
                    _ => -1,
                };
                if fd < 0 {
                    fl |= map::ANONYMOUS;
                }
                let pr = pr & (prot::READ | prot::WRITE | prot::EXEC);
                q.push_back((
                    Op::Mmap { addr: target.unwrap_or(0), len, prot: pr, flags: fl, fd, off: if fd < 0 { 0 } else { off } },
                    After::Mapped { rec: ret, len },
                ));
            }
            Record::Munmap { addr, len } => {
                for (a, l) in sp.pieces(addr, len) {
                    q.push_back((Op::Munmap { addr: a, len: l }, After::Nothing));
                }
                sp.forget(addr, len);
            }
            Record::Mprotect { addr, len, prot: pr } => {
                for (a, l) in sp.pieces(addr, len) {
                    q.push_back((Op::Mprotect { addr: a, len: l, prot: pr & 7 }, After::Nothing));
                }
            }
            Record::Madvise { addr, len, advice } => {
                if let Some(adv) = Self::advice(advice) {
                    for (a, l) in sp.pieces(addr, len) {
                        q.push_back((Op::Madvise { addr: a, len: l, advice: adv }, After::Nothing));
                    }
                }
            }
            Record::Brk { addr, ret } => match (sp.brk_rec, sp.brk_sim) {
                (None, _) => sp.brk_rec = Some((ret, ret)),
                (Some((b, _)), Some(s)) if addr != 0 => {
                    sp.brk_rec = Some((b, ret.max(b)));
                    q.push_back((Op::Brk { addr: addr.saturating_sub(b) + s }, After::Nothing));
                }
                _ => {}
            },
            Record::Mremap { addr, old_len, new_len, flags, ret } => {
                if let Some(a) = sp.translate(addr) {
                    sp.forget(addr, old_len);
                    q.push_back((
                        Op::Mremap { addr: a, old_len, new_len, may_move: flags & 1 != 0 },
                        After::Mapped { rec: ret, len: new_len },
                    ));
                }
            }
            Record::Fork { child } => q.push_back((Op::Fork, After::Forked(child))),
            Record::Wait { .. } => q.push_back((Op::Wait, After::Nothing)),
            Record::Exit { .. } => {
                pr.done = true;
                return Some(Op::Exit);
            }
            Record::File { .. }
            | Record::Region { .. }
            | Record::Meta { .. }
            | Record::End { .. }
            | Record::Process { .. }
            | Record::Exec { .. } => {}
        }
        None
    }
}

impl Workload for TraceReplay {
    fn name(&self) -> &str {
        "trace"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), String> {
        self.file_ids.clear();
        for (size, _) in &self.files {
            // Program files are read from a warm page cache, as on a re-run.
            self.file_ids.push(env.create_file(FsKind::Disk, page_up((*size).max(PAGE)), true)?);
        }
        let task = env.spawn_process(Some(0))?;
        self.tasks.insert(task, 0);
        self.fds = vec![-1; self.files.len()];
        Ok(())
    }

    /// The child runs its recorded section, if the trace has one (a child
    /// that never exec'd was not recorded: it exits), in a copy of the
    /// parent's address space.
    fn on_fork(&mut self, parent: TaskId, child: TaskId) {
        let Some(&p) = self.tasks.get(&parent) else { return };
        let After::Forked(pid) = self.procs[p].pending else { return };
        let c = match self.procs.iter().position(|x| x.pid == pid && !x.started) {
            Some(c) => c,
            None => {
                let n = self.records.len();
                self.procs.push(Proc::new(pid, n, n));
                self.procs.len() - 1
            }
        };
        self.procs[c].sp = self.procs[p].sp.clone();
        self.procs[c].started = true;
        self.tasks.insert(child, c);
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(&p) = self.tasks.get(&task) else { return Op::Exit };
        if self.procs[p].done {
            return Op::Exit;
        }
        // The result of the previous queued op.
        let pending = std::mem::replace(&mut self.procs[p].pending, After::Nothing);
        if !last.is_err() {
            let sp = &mut self.procs[p].sp;
            match pending {
                After::Opened(i) => self.fds[i] = last.val() as Fd,
                After::Mapped { rec, len } => sp.remember(rec, len, last.val() as u64),
                After::BrkBase => sp.brk_sim = Some(last.val() as u64),
                After::Exec { vaddr, len } => {
                    *sp = Space::default();
                    sp.remember(vaddr, len, vaddr);
                }
                After::Forked(_) | After::Nothing => {}
            }
        }
        if !self.procs[p].started {
            self.procs[p].started = true;
            for (i, &f) in self.file_ids.iter().enumerate() {
                self.procs[p].queue.push_back((Op::Open { file: f }, After::Opened(i)));
            }
            let first = self.procs[p].next;
            if !matches!(self.records.get(first), Some(Record::Exec { .. })) || first >= self.procs[p].end {
                self.start_instance(p, first);
            }
        }
        loop {
            if let Some((op, after)) = self.procs[p].queue.pop_front() {
                self.procs[p].pending = after;
                return op;
            }
            let i = self.procs[p].next;
            if i >= self.procs[p].end {
                self.procs[p].done = true;
                return Op::Exit;
            }
            self.procs[p].next += 1;
            if let Some(op) = self.expand(p, i, ops) {
                return op;
            }
        }
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(TraceReplay::new(p)?))
}

fn params() -> Vec<ParamSpec> {
    vec![ParamSpec { name: "path", default: "(required)".into(), help: "trace file written by `foliosim record` (docs/trace-format.md)" }]
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "trace",
        help: "replay of a program recorded with `foliosim record -- CMD` (its mmap/munmap/brk/mprotect/madvise/mremap calls and memory accesses; every process of the tree, with its fork/execve/wait4/exit and its ELF image and libraries as file mappings); op = recorded access",
        params,
        build,
    }
}

impl TraceReplay {
    /// The file this replay was read from.
    pub fn path(&self) -> &str {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal kernel: mmap hands out fresh addresses far from the
    /// recorded ones (MAP_FIXED gets what it asks), brk starts at 0x5000_0000.
    fn run(records: Vec<Record>) -> (Vec<Step>, u64) {
        let mut w = TraceReplay::from_records("t".into(), records);
        let mut env = super::super::common::testutil::FakeEnv::new(1);
        w.setup(&mut env).unwrap();
        let t = env.ids()[0];
        let (mut last, mut ops, mut log, mut next, mut fd) = (Ret::Start, 0u64, Vec::new(), 0x7f00_0000_0000u64, 3i64);
        for _ in 0..10_000 {
            let mut o = 0;
            let op = w.next_op(t, last, &mut o);
            ops += o;
            last = match op {
                Op::Mmap { addr, len, flags, .. } if flags & map::FIXED != 0 => {
                    let _ = len;
                    Ret::Val(addr as i64)
                }
                Op::Mmap { len, .. } => {
                    let a = next;
                    next += len + (1 << 21);
                    Ret::Val(a as i64)
                }
                Op::Brk { addr: 0 } => Ret::Val(0x5000_0000),
                Op::Brk { addr } => Ret::Val(addr as i64),
                Op::Open { .. } => {
                    fd += 1;
                    Ret::Val(fd - 1)
                }
                _ => Ret::Val(0),
            };
            log.push(Step { op, ops: o, ret: last });
            if op == Op::Exit {
                break;
            }
        }
        (log, ops)
    }

    #[derive(Debug)]
    struct Step {
        op: Op,
        #[allow(dead_code)]
        ops: u64,
        ret: Ret,
    }

    #[test]
    fn accesses_follow_their_mapping_to_its_simulated_address() {
        let rec = 0x4830_0000u64;
        let (log, ops) = run(vec![
            Record::Mmap { addr: 0, len: 3 * PAGE, prot: 3, flags: 0x22, file: None, off: 0, ret: rec },
            Record::Access { kind: tf::K_STORE, page: (rec >> 12) + 2, repeat: 4 },
            Record::Access { kind: tf::K_LOAD, page: rec >> 12, repeat: 0 },
            // Outside any mapping: skipped.
            Record::Access { kind: tf::K_LOAD, page: 0x1234, repeat: 0 },
            Record::Munmap { addr: rec, len: 3 * PAGE },
            Record::Access { kind: tf::K_LOAD, page: rec >> 12, repeat: 0 },
        ]);
        // brk(0), mmap, range, access, munmap, exit
        assert_eq!(log[0].op, Op::Brk { addr: 0 });
        let Op::Mmap { addr: 0, len, flags, fd: -1, .. } = log[1].op else { panic!("{:?}", log[1]) };
        assert_eq!((len, flags), (3 * PAGE, map::PRIVATE | map::ANONYMOUS));
        let sim = log[1].ret.val() as u64;
        assert_ne!(sim, rec, "the fake kernel places mappings elsewhere");
        assert_eq!(log[2].op, Op::AccessRange { addr: sim + 2 * PAGE, stride: 0, count: 5, kind: Access::Store });
        assert_eq!(log[3].op, Op::Access { addr: sim, kind: Access::Load });
        assert_eq!(log[4].op, Op::Munmap { addr: sim, len: 3 * PAGE });
        assert_eq!(log[5].op, Op::Exit);
        assert_eq!(log.len(), 6);
        assert_eq!(ops, 6);
    }

    #[test]
    fn fixed_maps_partial_unmaps_regions_and_files() {
        let rec = 0x10_0000_0000u64;
        let (log, _) = run(vec![
            Record::File { size: 5 * PAGE, path: "/lib/libx.so".into() },
            Record::Region { addr: 0x40_0000, len: 2 * PAGE },
            Record::Mmap { addr: 0, len: 4 * PAGE, prot: 1, flags: 0x802, file: Some(0), off: 0, ret: rec },
            Record::Mmap { addr: rec + PAGE, len: PAGE, prot: 5, flags: 0x812, file: Some(0), off: PAGE, ret: rec + PAGE },
            Record::Munmap { addr: rec + 3 * PAGE, len: PAGE },
            Record::Access { kind: tf::K_IFETCH, page: (rec >> 12) + 1, repeat: 0 },
            Record::Access { kind: tf::K_LOAD, page: (rec >> 12) + 3, repeat: 0 },
            Record::Access { kind: tf::K_STORE, page: 0x401, repeat: 0 },
        ]);
        let Op::Open { .. } = log[0].op else { panic!() };
        let fd = log[0].ret.val() as Fd;
        assert_eq!(log[1].op, Op::Brk { addr: 0 });
        let Op::Mmap { len: rl, flags: rf, .. } = log[2].op else { panic!() };
        assert_eq!((rl, rf), (2 * PAGE, map::PRIVATE | map::ANONYMOUS));
        let region = log[2].ret.val() as u64;
        let Op::Mmap { addr: 0, fd: f1, flags: fl1, .. } = log[3].op else { panic!("{:?}", log[3]) };
        assert_eq!((f1, fl1), (fd, map::PRIVATE));
        let base = log[3].ret.val() as u64;
        assert_eq!(log[4].op, Op::Mmap { addr: base + PAGE, len: PAGE, prot: 5, flags: map::PRIVATE | map::FIXED, fd, off: PAGE });
        assert_eq!(log[5].op, Op::Munmap { addr: base + 3 * PAGE, len: PAGE });
        assert_eq!(log[6].op, Op::Access { addr: base + PAGE, kind: Access::Ifetch });
        // page 3 was unmapped: skipped; the region page is translated.
        assert_eq!(log[7].op, Op::Access { addr: region + PAGE, kind: Access::Store });
        assert_eq!(log[8].op, Op::Exit);
    }

    #[test]
    fn brk_is_translated_from_the_recorded_base() {
        let b = 0x0403_5000_u64;
        let (log, _) = run(vec![
            Record::Brk { addr: 0, ret: b },
            Record::Brk { addr: b + 8 * PAGE, ret: b + 8 * PAGE },
            Record::Access { kind: tf::K_STORE, page: (b >> 12) + 7, repeat: 0 },
        ]);
        let sb = log[0].ret.val() as u64;
        assert_eq!(log[1].op, Op::Brk { addr: sb + 8 * PAGE });
        assert_eq!(log[2].op, Op::Access { addr: sb + 7 * PAGE, kind: Access::Store });
    }
}
