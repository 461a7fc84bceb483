//! "trace": replay of a recorded program (`foliosim record`, format in
//! docs/trace-format.md and `trace_format.rs`) as one process.
//!
//! Recorded addresses are the recording's; the simulated kernel places
//! mappings where it likes. The replayer keeps a translation table from
//! recorded ranges to simulated ones: every recorded mmap/mremap result, the
//! brk area (recorded base -> simulated base) and each `Region` (memory the
//! program used that no recorded call created: its ELF image and initial
//! stack, mapped here as private anonymous memory before the first record).
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
    Mapped { rec: u64, len: u64 },
    /// The initial brk(0): the simulated brk base.
    BrkBase,
}

pub struct TraceReplay {
    path: String,
    records: Vec<Record>,
    files: Vec<(u64, String)>,
    regions: Vec<(u64, u64)>,
    file_ids: Vec<FileId>,
    fds: Vec<Fd>,
    task: TaskId,
    /// rec_start -> (rec_end, sim_start)
    xlat: BTreeMap<u64, (u64, u64)>,
    /// Recorded brk base and current end; simulated brk base.
    brk_rec: Option<(u64, u64)>,
    brk_sim: Option<u64>,
    queue: VecDeque<(Op, After)>,
    pending: After,
    started: bool,
    next: usize,
    done: bool,
}

impl TraceReplay {
    pub fn new(p: &mut Params) -> Result<Self, String> {
        let path = p.string("path")?;
        p.finish()?;
        let path = path.ok_or_else(|| "path: required (the trace file written by `foliosim record`)".to_string())?;
        let all = tf::read_file(std::path::Path::new(&path)).map_err(|e| format!("path: {e}"))?;
        Ok(Self::from_records(path, all))
    }

    pub fn from_records(path: String, all: Vec<Record>) -> Self {
        let mut files = Vec::new();
        let mut regions = Vec::new();
        let mut records = Vec::with_capacity(all.len());
        for r in all {
            match r {
                Record::File { size, path } => files.push((size, path)),
                Record::Region { addr, len } => regions.push((addr, len)),
                Record::Meta { .. } => {}
                r => records.push(r),
            }
        }
        TraceReplay {
            path,
            records,
            files,
            regions,
            file_ids: Vec::new(),
            fds: Vec::new(),
            task: 0,
            xlat: BTreeMap::new(),
            brk_rec: None,
            brk_sim: None,
            queue: VecDeque::new(),
            pending: After::Nothing,
            started: false,
            next: 0,
            done: false,
        }
    }

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

    /// Turn record `r` into queued ops (possibly none).
    fn expand(&mut self, i: usize, ops: &mut u64) -> Option<Op> {
        match self.records[i] {
            Record::Access { kind, page, repeat } => {
                let Some(a) = self.translate(page << 12) else { return None };
                let kind = match kind {
                    tf::K_STORE => Access::Store,
                    tf::K_IFETCH => Access::Ifetch,
                    _ => Access::Load,
                };
                *ops += 1 + repeat;
                return Some(if repeat == 0 { Op::Access { addr: a, kind } } else { Op::AccessRange { addr: a, stride: 0, count: repeat.saturating_add(1), kind } });
            }
            Record::Mmap { addr, len, prot: pr, flags, file, off, ret } => {
                let fixed = flags & (map::FIXED | 0x10_0000) != 0;
                let target = if fixed { self.translate(addr) } else { None };
                let share = if flags & 0x3 == map::PRIVATE { map::PRIVATE } else { map::SHARED };
                let mut fl = share | (flags & (map::ANONYMOUS | map::POPULATE));
                if target.is_some() {
                    fl |= map::FIXED;
                }
                let fd = match file {
                    Some(f) if flags & map::ANONYMOUS == 0 => self.fds.get(f as usize).copied().unwrap_or(-1),
                    _ => -1,
                };
                if fd < 0 {
                    fl |= map::ANONYMOUS;
                }
                let pr = pr & (prot::READ | prot::WRITE | prot::EXEC);
                self.queue.push_back((Op::Mmap { addr: target.unwrap_or(0), len, prot: pr, flags: fl, fd, off: if fd < 0 { 0 } else { off } }, After::Mapped { rec: ret, len }));
            }
            Record::Munmap { addr, len } => {
                for (a, l) in self.pieces(addr, len) {
                    self.queue.push_back((Op::Munmap { addr: a, len: l }, After::Nothing));
                }
                self.forget(addr, len);
            }
            Record::Mprotect { addr, len, prot: pr } => {
                for (a, l) in self.pieces(addr, len) {
                    self.queue.push_back((Op::Mprotect { addr: a, len: l, prot: pr & 7 }, After::Nothing));
                }
            }
            Record::Madvise { addr, len, advice } => {
                if let Some(adv) = Self::advice(advice) {
                    for (a, l) in self.pieces(addr, len) {
                        self.queue.push_back((Op::Madvise { addr: a, len: l, advice: adv }, After::Nothing));
                    }
                }
            }
            Record::Brk { addr, ret } => match (self.brk_rec, self.brk_sim) {
                (None, _) => self.brk_rec = Some((ret, ret)),
                (Some((b, _)), Some(s)) if addr != 0 => {
                    self.brk_rec = Some((b, ret.max(b)));
                    self.queue.push_back((Op::Brk { addr: addr.saturating_sub(b) + s }, After::Nothing));
                }
                _ => {}
            },
            Record::Mremap { addr, old_len, new_len, flags, ret } => {
                if let Some(a) = self.translate(addr) {
                    self.forget(addr, old_len);
                    self.queue.push_back((Op::Mremap { addr: a, old_len, new_len, may_move: flags & 1 != 0 }, After::Mapped { rec: ret, len: new_len }));
                }
            }
            Record::File { .. } | Record::Region { .. } | Record::Meta { .. } | Record::End { .. } => {}
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
        self.task = env.spawn_process(Some(0))?;
        self.fds = vec![-1; self.files.len()];
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        if task != self.task || self.done {
            return Op::Exit;
        }
        // The result of the previous queued op.
        if !last.is_err() {
            match std::mem::replace(&mut self.pending, After::Nothing) {
                After::Opened(i) => self.fds[i] = last.val() as Fd,
                After::Mapped { rec, len } => self.remember(rec, len, last.val() as u64),
                After::BrkBase => self.brk_sim = Some(last.val() as u64),
                After::Nothing => {}
            }
        }
        self.pending = After::Nothing;
        if !self.started {
            self.started = true;
            for (i, &f) in self.file_ids.iter().enumerate() {
                self.queue.push_back((Op::Open { file: f }, After::Opened(i)));
            }
            self.queue.push_back((Op::Brk { addr: 0 }, After::BrkBase));
            for &(a, l) in &self.regions {
                let op = Op::Mmap { addr: 0, len: page_up(l), prot: prot::READ | prot::WRITE | prot::EXEC, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 };
                self.queue.push_back((op, After::Mapped { rec: a, len: l }));
            }
        }
        loop {
            if let Some((op, after)) = self.queue.pop_front() {
                self.pending = after;
                return op;
            }
            if self.next >= self.records.len() {
                self.done = true;
                return Op::Exit;
            }
            let i = self.next;
            self.next += 1;
            if let Some(op) = self.expand(i, ops) {
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
        help: "replay of a program recorded with `foliosim record -- CMD` (its mmap/munmap/brk/mprotect/madvise/mremap calls and memory accesses), one process; op = recorded access",
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
                Op::Mmap { addr, len, flags, .. } if flags & map::FIXED != 0 => { let _ = len; Ret::Val(addr as i64) }
                Op::Mmap { len, .. } => { let a = next; next += len + (1 << 21); Ret::Val(a as i64) }
                Op::Brk { addr: 0 } => Ret::Val(0x5000_0000),
                Op::Brk { addr } => Ret::Val(addr as i64),
                Op::Open { .. } => { fd += 1; Ret::Val(fd - 1) }
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
        let b = 0x4035_000u64;
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
