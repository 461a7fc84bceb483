//! "syscost": the system calls of validation/syscost.c, one case at a time,
//! so that `foliosim calibrate` can run the model on the very calls it
//! timed on the host and fit each term the model charges for them (the
//! host's time minus the model's with the term at 0), and print model
//! against host case by case.
//!
//! One process (with the will-it-scale process image) repeats the case;
//! op = one repetition (the call and, where the case has one, its undoing):
//!
//! - `mmap`: mmap of an untouched `x`-MiB anonymous region where the
//!   kernel places it, then its munmap (pairs back to back, as mmap1).
//! - `munmap`: a region of `x` PTE tables, one page written in each, then
//!   its munmap (the zap and free_pgtables' teardown).
//! - `munmap-empty`: the munmap case's region of `x` PMD entries, nothing
//!   written: its munmap's walks step over `x` empty PMD entries.
//! - `brk`: raise the break by `x` pages, then lower it back.
//! - `mprotect`: PROT_READ of a whole `x`-page VMA, then back to RW.
//! - `mprotect-split`: the same on the middle `x` pages of a `3x`-page VMA
//!   (two splits, then the merge of the three).
//! - `madvise`: MADV_DONTNEED of a 32-page range whose first `x` pages were
//!   written (`x` <= 32).
//! - `madvise-mthp`: a 16 KiB region mapped and written once (one 16 KiB
//!   folio where the knobs allow it), MADV_DONTNEED of its first `x` pages
//!   (1-3: the folio stays, nothing is freed), then its munmap.
//! - `read`, `write`: `x` pages per call from / into a populated tmpfs file
//!   of `file_kib`, in file order (pread/pwrite: an lseek, then the call).
//! - `fork`: write `x` pages of a private mapping, fork; the child exits at
//!   once and the parent reaps it.
//!
//! The real program runs each call but mmap's in batches on separate
//! regions spaced apart (so that nothing merges); here every such region
//! is placed with MAP_FIXED at the same spacing, the batch being
//! irrelevant to the model.
//! In the munmap case a page written at the start of the area keeps the
//! upper page tables, as in the real program: each munmap frees its PTE
//! tables only.

use super::common::{TaskCfg, TaskMap, KIB, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Access, Advice, Fd, FileId, FsKind, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::types::Error;

/// Where the regions go: validation/syscost.c's AREA.
const AREA: u64 = 0x2000_0000_0000;
const PMD: u64 = 2 * MIB;
/// madvise's range, in pages.
const MADVISE_RANGE: u64 = 32;
/// madvise-mthp's region: one 16 KiB folio where the knobs allow it.
const MTHP_PAGES: u64 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Mmap,
    Munmap,
    MunmapEmpty,
    Brk,
    Mprotect,
    MprotectSplit,
    Madvise,
    MadviseMthp,
    Read,
    Write,
    Fork,
}

const CASES: [(&str, Case); 11] = [
    ("mmap", Case::Mmap),
    ("munmap", Case::Munmap),
    ("munmap-empty", Case::MunmapEmpty),
    ("brk", Case::Brk),
    ("mprotect", Case::Mprotect),
    ("mprotect-split", Case::MprotectSplit),
    ("madvise", Case::Madvise),
    ("madvise-mthp", Case::MadviseMthp),
    ("read", Case::Read),
    ("write", Case::Write),
    ("fork", Case::Fork),
];

/// Where the parent is in its repetition (each step names the op it issued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Start,
    /// Setup: the file opened, the guard mapping made, the break read.
    Open,
    Guard,
    GuardProt(u8),
    BrkQuery,
    BrkSetup,
    /// munmap's anchor page mapped, then written: it keeps the upper
    /// page tables of the area, so that a munmap frees PTE tables only.
    Anchor,
    AnchorWritten,
    /// The region mapped (munmap), its pages to write next.
    Mapped,
    /// The case's call, and its undoing.
    Call,
    Undo,
    /// The writes before the call (munmap, madvise, fork).
    Touch,
    Seek,
    Wait,
    Done,
}

pub struct Syscost {
    case: Case,
    x: u64,
    file_kib: u64,
    /// Repetitions before the process exits (0: until the run ends).
    calls: u64,
    cfg: TaskCfg,
    tasks: TaskMap,
    parent: TaskId,
    step: Step,
    file: FileId,
    fd: Fd,
    brk: u64,
    off: u64,
    iters: u64,
}

impl Syscost {
    pub fn new(p: &mut Params) -> Result<Syscost, String> {
        let names: Vec<&str> = CASES.iter().map(|(n, _)| *n).collect();
        let name = p.choice("case", "mmap", &names)?;
        let case = CASES.iter().find(|(n, _)| *n == name).map(|(_, c)| *c).expect("a choice");
        let x = p.u64("x", 1)?;
        let file_kib = p.u64("file_kib", 4096)?;
        let calls = p.u64("calls", 0)?;
        let cfg = TaskCfg::read(p)?;
        p.finish()?;
        let max = match case {
            Case::Mmap => 1 << 16,
            Case::Munmap => 4096,
            // The region stays in the 1 GiB whose PMD table the anchor keeps.
            Case::MunmapEmpty => 511,
            Case::Madvise => MADVISE_RANGE,
            Case::MadviseMthp => MTHP_PAGES - 1,
            Case::Read | Case::Write => file_kib / 4,
            _ => 1 << 20,
        };
        if (x == 0 && case != Case::Madvise) || x > max {
            return Err(format!("x: must be between {} and {max} for case {name}, got {x}", (case != Case::Madvise) as u64));
        }
        if matches!(case, Case::Read | Case::Write) && (file_kib == 0 || file_kib % 4 != 0) {
            return Err(format!("file_kib: must be a positive multiple of 4, got {file_kib}"));
        }
        if cfg.tasks != 1 {
            return Err(format!("tasks: syscost runs one process, got {}", cfg.tasks));
        }
        Ok(Syscost {
            case,
            x,
            file_kib,
            calls,
            cfg,
            tasks: TaskMap::default(),
            parent: 0,
            step: Step::Start,
            file: FileId::MAX,
            fd: -1,
            brk: 0,
            off: 0,
            iters: 0,
        })
    }

    fn specs() -> Vec<ParamSpec> {
        let mut v = TaskCfg::specs();
        v.extend([
            ParamSpec {
                name: "case",
                default: "mmap".into(),
                help: "the case of validation/syscost.c: mmap, munmap, munmap-empty, brk, mprotect, mprotect-split, madvise, madvise-mthp, read, write or fork",
            },
            ParamSpec {
                name: "x",
                default: "1".into(),
                help: "the case's size: MiB (mmap), PTE tables (munmap), PMD entries (munmap-empty), pages (the others; madvise: pages written of its 32; madvise-mthp: pages zapped of a 16 KiB folio, 1-3)",
            },
            ParamSpec { name: "file_kib", default: "4096".into(), help: "read, write: the populated tmpfs file's size, KiB" },
            ParamSpec { name: "calls", default: "0".into(), help: "repetitions before the process exits (0: until the run ends)" },
        ]);
        v
    }

    /// Bytes of the region the case works on.
    fn region(&self) -> u64 {
        match self.case {
            Case::Mmap => self.x * MIB,
            Case::Munmap | Case::MunmapEmpty => self.x * PMD,
            Case::Mprotect => self.x * PAGE,
            Case::MprotectSplit => 3 * self.x * PAGE,
            Case::Madvise => MADVISE_RANGE * PAGE,
            Case::MadviseMthp => MTHP_PAGES * PAGE,
            Case::Fork => self.x * PAGE,
            _ => 0,
        }
    }

    /// Where the case's region starts: the area's start, but for munmap's
    /// (past the anchor page at the area's start, in the next PTE table).
    fn base(&self) -> u64 {
        if matches!(self.case, Case::Munmap | Case::MunmapEmpty) {
            AREA + PMD
        } else {
            AREA
        }
    }

    fn map_fixed(&self, addr: u64, len: u64) -> Op {
        Op::Mmap { addr, len, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS | map::FIXED, fd: -1, off: 0 }
    }

    /// What a case changes with mprotect: [start, start + len) inside the
    /// guarded VMA at AREA + PAGE.
    fn mprotect_range(&self) -> (u64, u64) {
        let len = self.x * PAGE;
        let start = self.base() + PAGE + if self.case == Case::MprotectSplit { len } else { 0 };
        (start, len)
    }

    /// The op that starts a repetition.
    fn begin(&mut self) -> Op {
        match self.case {
            Case::Mmap => {
                self.step = Step::Call;
                Op::Mmap {
                    addr: 0,
                    len: self.region(),
                    prot: prot::READ | prot::WRITE,
                    flags: map::PRIVATE | map::ANONYMOUS,
                    fd: -1,
                    off: 0,
                }
            }
            Case::Munmap | Case::MunmapEmpty | Case::MadviseMthp => {
                self.step = Step::Mapped;
                self.map_fixed(self.base(), self.region())
            }
            Case::Brk => {
                self.step = Step::Call;
                Op::Brk { addr: self.brk + self.x * PAGE }
            }
            Case::Mprotect | Case::MprotectSplit => {
                self.step = Step::Call;
                let (addr, len) = self.mprotect_range();
                Op::Mprotect { addr, len, prot: prot::READ }
            }
            Case::Madvise | Case::Fork => self.touch(),
            Case::Read | Case::Write => {
                if self.off + self.x * PAGE > self.file_kib * KIB {
                    self.off = 0;
                }
                self.step = Step::Seek;
                Op::Lseek { fd: self.fd, off: self.off }
            }
        }
    }

    /// The writes before the call: a page per PTE table (munmap), the
    /// first `x` pages (madvise, fork).
    fn touch(&mut self) -> Op {
        self.step = Step::Touch;
        let (stride, count) = match self.case {
            Case::Munmap => (PMD, self.x),
            Case::MunmapEmpty => (PMD, 0),
            // One store: the fault maps the whole 16 KiB folio.
            Case::MadviseMthp => (PAGE, 1),
            _ => (PAGE, self.x),
        };
        if count == 0 {
            return self.call();
        }
        Op::AccessRange { addr: self.base(), stride, count, kind: Access::Store }
    }

    /// The call itself, after its setup.
    fn call(&mut self) -> Op {
        self.step = Step::Call;
        match self.case {
            Case::Munmap | Case::MunmapEmpty => {
                self.step = Step::Undo;
                Op::Munmap { addr: self.base(), len: self.region() }
            }
            Case::Madvise => {
                self.step = Step::Undo;
                Op::Madvise { addr: self.base(), len: self.region(), advice: Advice::DontNeed }
            }
            // Part of the folio: nothing is freed; its munmap follows.
            Case::MadviseMthp => Op::Madvise { addr: self.base(), len: self.x * PAGE, advice: Advice::DontNeed },
            Case::Fork => Op::Fork,
            Case::Read => {
                self.step = Step::Undo;
                Op::Read { fd: self.fd, len: self.x * PAGE, buf: 0 }
            }
            Case::Write => {
                self.step = Step::Undo;
                Op::Write { fd: self.fd, len: self.x * PAGE, buf: 0 }
            }
            _ => unreachable!("the other cases start with their call"),
        }
    }

    fn parent_op(&mut self, last: Ret, ops: &mut u64) -> Op {
        if last.is_err() {
            self.step = Step::Done;
            return Op::Exit;
        }
        match self.step {
            Step::Start => match self.case {
                Case::Read | Case::Write => {
                    self.step = Step::Open;
                    Op::Open { file: self.file }
                }
                Case::Mprotect | Case::MprotectSplit | Case::Madvise | Case::Fork => {
                    self.step = Step::Guard;
                    // Two guard pages around the region (mprotect's), the region.
                    let len = self.region() + if matches!(self.case, Case::Mprotect | Case::MprotectSplit) { 2 * PAGE } else { 0 };
                    self.map_fixed(self.base(), len)
                }
                Case::Munmap | Case::MunmapEmpty => {
                    self.step = Step::Anchor;
                    self.map_fixed(AREA, PAGE)
                }
                Case::Brk => {
                    self.step = Step::BrkQuery;
                    Op::Brk { addr: 0 }
                }
                _ => self.begin(),
            },
            Step::Open => {
                self.fd = last.val() as Fd;
                self.begin()
            }
            Step::Guard => {
                if matches!(self.case, Case::Mprotect | Case::MprotectSplit) {
                    self.step = Step::GuardProt(0);
                    Op::Mprotect { addr: self.base(), len: PAGE, prot: prot::NONE }
                } else {
                    self.begin()
                }
            }
            Step::GuardProt(0) => {
                self.step = Step::GuardProt(1);
                Op::Mprotect { addr: self.base() + self.region() + PAGE, len: PAGE, prot: prot::NONE }
            }
            Step::GuardProt(_) => self.begin(),
            Step::BrkQuery => {
                // One page above the start: the heap VMA always exists.
                self.brk = last.val() as u64 + PAGE;
                self.step = Step::BrkSetup;
                Op::Brk { addr: self.brk }
            }
            Step::BrkSetup => self.begin(),
            Step::Anchor => {
                self.step = Step::AnchorWritten;
                Op::Access { addr: AREA, kind: Access::Store }
            }
            Step::AnchorWritten => self.begin(),
            Step::Mapped => self.touch(),
            Step::Touch => self.call(),
            Step::Seek => self.call(),
            Step::Call => {
                self.step = Step::Undo;
                match self.case {
                    Case::Mmap => Op::Munmap { addr: last.val() as u64, len: self.region() },
                    Case::MadviseMthp => Op::Munmap { addr: self.base(), len: self.region() },
                    Case::Brk => Op::Brk { addr: self.brk },
                    Case::Mprotect | Case::MprotectSplit => {
                        let (addr, len) = self.mprotect_range();
                        Op::Mprotect { addr, len, prot: prot::READ | prot::WRITE }
                    }
                    Case::Fork => {
                        self.step = Step::Wait;
                        Op::Wait
                    }
                    _ => unreachable!("a case without an undo ends at its call"),
                }
            }
            Step::Undo | Step::Wait => {
                *ops += 1;
                self.iters += 1;
                if matches!(self.case, Case::Read | Case::Write) {
                    self.off += self.x * PAGE;
                }
                if self.calls != 0 && self.iters >= self.calls {
                    self.step = Step::Done;
                    return Op::Exit;
                }
                self.begin()
            }
            Step::Done => Op::Exit,
        }
    }
}

impl Workload for Syscost {
    fn name(&self) -> &str {
        "syscost"
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let ids = self.cfg.spawn(env)?;
        self.parent = ids[0];
        self.tasks = TaskMap::new(&ids)?;
        if matches!(self.case, Case::Read | Case::Write) {
            self.file = env.create_file(FsKind::Tmpfs, self.file_kib * KIB, true)?;
        }
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        if task != self.parent {
            // A forked child: it exits at once, touching nothing.
            return Op::Exit;
        }
        self.parent_op(last, ops)
    }

    fn iterations(&self, task: TaskId) -> Option<u64> {
        self.tasks.get(task).map(|_| self.iters)
    }

    fn peak_bytes(&self) -> Option<u64> {
        Some(self.region() + self.file_kib * KIB)
    }
}

fn build(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(Syscost::new(p)?))
}

pub fn info() -> WorkloadInfo {
    WorkloadInfo {
        name: "syscost",
        help: "the system calls validation/syscost.c times for `foliosim calibrate` (case, x): mmap/munmap, brk, mprotect, madvise, read/write of a cached file, fork+exit; op = one call and its undoing",
        params: Syscost::specs,
        build,
    }
}
