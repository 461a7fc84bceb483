//! will-it-scale testcases (github.com/antonblanchard/will-it-scale, tests/*.c), rebuilt as generators.
//!
//! Each testcase is its own workload ("page_fault1", ..., "read2"). The
//! harness part that belongs to a workload is reproduced here: task creation
//! as processes (own mm) or threads (one shared mm), pinning task i to CPU
//! `i % nr_cpus`, the start gate (every task polls one pipe that the parent
//! writes once all exist, so they start one wake-up apart: `start_gate`),
//! per-task files on `/tmp` (tmpfs or a disk file system), and
//! the per-task counter, which `next_op` increments exactly where the real
//! testcase does `(*iterations)++`. Sampling (1 s samples, 6 warm-up samples,
//! measured seconds, ops/s) is the engine's job.
//!
//! Errors: the real testcases `assert()` on mmap and on values read back, and
//! a store to `MAP_FAILED` kills them with SIGSEGV. Here any `Ret::Err` makes
//! the task issue `Op::Exit` (and `Op::Exit` again if asked once more), so a
//! failing configuration ends instead of looping. This also covers results
//! the real code ignores (munmap, madvise): looping on them would only hide
//! the failure.
//!
//! Each process starts with a glibc program's address space as the
//! harness leaves it when the loop starts (`process_image`, mm/exec.rs: the
//! binary, its bss and brk heap, the stack, ld.so, the vDSO, libc, the
//! harness's counter page, their resident pages touched), so that the
//! testcase's mappings land where Linux puts them (a 1 MiB tlb_flush2
//! region is not 64 KiB aligned, a 128 MiB one is PMD aligned) and its RSS
//! starts from the harness's baseline.
//!
//! The read tests copy into the testcase's static buffer, which lies in the
//! binary's data and bss (`SetupEnv::image_buffer`): the first read()
//! faults in the bss page nothing touched before, as on Linux.
//!
//! Not modelled: the loads and stores to the harness's counter page (each
//! `(*iterations)++`), read1's 1 MiB stack buffer and
//! its initial write(2) calls (the file is created populated instead, and the
//! EOF offset is set with an initial `lseek`), mkstemp/unlink (files are made
//! in `setup`; the O_RDONLY of read2's open is not expressible).

use super::common::{pte_table_bytes, read_fs, read_size, TaskCfg, TaskMap, KIB, MIB, PAGE};
use super::params::Params;
use super::{map, prot, Access, AccessRun, Advice, Fd, FileId, FsKind, Op, ParamSpec, Ret, SetupEnv, TaskId, Workload, WorkloadInfo};
use crate::types::Error;

/// The eleven testcases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    PageFault1,
    PageFault2,
    PageFault3,
    Malloc1,
    Mmap1,
    Mmap2,
    TlbFlush1,
    TlbFlush2,
    TlbFlush3,
    Read1,
    Read2,
}

/// What one outer iteration looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    /// mmap; one store per page, op per page; munmap.
    Touch,
    /// mmap; munmap; op per pair.
    MapUnmap,
    /// glibc malloc of a huge chunk: mmap; store to the chunk header; free
    /// reads the header; munmap; op per pair.
    Malloc,
    /// mmap; per page: store, madvise(DONTNEED, 1 page), load, op; munmap.
    TlbFlush,
    /// read(fd, 4096) loop, lseek(fd, 0) when a read returns 0; op per read.
    Read,
}

/// Which size parameter a test takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SizeParam {
    /// `size_mib`, default 128.
    RegionMib,
    /// `region_kib`, default 1024 (tlb_flush2).
    RegionKib,
    /// `file_kib`, default 1024 (read1, read2).
    FileKib,
}

/// Largest region accepted: 1 TiB.
const MAX_REGION_MIB: u64 = 1 << 20;
const READ_LEN: u64 = 4096;
/// glibc's mmapped-chunk overhead: a 128 MiB request maps 128 MiB + 4 KiB.
const MALLOC_PAD: u64 = PAGE;
/// Offset of the chunk `size` field glibc's free() reads.
const MALLOC_SIZE_FIELD: u64 = 8;

pub const ALL: [Test; 11] = [
    Test::PageFault1,
    Test::PageFault2,
    Test::PageFault3,
    Test::Malloc1,
    Test::Mmap1,
    Test::Mmap2,
    Test::TlbFlush1,
    Test::TlbFlush2,
    Test::TlbFlush3,
    Test::Read1,
    Test::Read2,
];

impl Test {
    pub fn name(self) -> &'static str {
        match self {
            Test::PageFault1 => "page_fault1",
            Test::PageFault2 => "page_fault2",
            Test::PageFault3 => "page_fault3",
            Test::Malloc1 => "malloc1",
            Test::Mmap1 => "mmap1",
            Test::Mmap2 => "mmap2",
            Test::TlbFlush1 => "tlb_flush1",
            Test::TlbFlush2 => "tlb_flush2",
            Test::TlbFlush3 => "tlb_flush3",
            Test::Read1 => "read1",
            Test::Read2 => "read2",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Test::PageFault1 => "will-it-scale page_fault1, \"Anonymous memory page fault\": mmap 128 MiB anon private, store one byte per 4 KiB page, munmap; op = page touched",
            Test::PageFault2 => "will-it-scale page_fault2, \"Separate file private mapping page fault\": per-task sparse 128 MiB /tmp file mapped MAP_PRIVATE, store per page, munmap; op = page touched",
            Test::PageFault3 => "will-it-scale page_fault3, \"Separate file shared mapping page fault\": per-task sparse 128 MiB /tmp file mapped MAP_SHARED, store per page, munmap; op = page touched",
            Test::Malloc1 => "will-it-scale malloc1, \"malloc/free of 128MB\": glibc mmap of 128 MiB + 4 KiB, chunk-header store in the first page, munmap; op = malloc+free pair",
            Test::Mmap1 => "will-it-scale mmap1, \"Anonymous memory mmap/munmap of 128MB\": mmap + munmap, no faults; op = pair",
            Test::Mmap2 => "will-it-scale mmap2, \"Separate file mmap/munmap of 128MB\": mmap MAP_PRIVATE of a per-task sparse /tmp file + munmap; op = pair",
            Test::TlbFlush1 => "will-it-scale tlb_flush1, \"TLB flush of separate file private mapping\": per page store, madvise(DONTNEED, 4 KiB), load; op = page",
            Test::TlbFlush2 => "will-it-scale tlb_flush2, \"TLB flush of anonymous memory private mapping\": 1 MiB anon, per page store, madvise(DONTNEED, 4 KiB), load; op = page",
            Test::TlbFlush3 => "will-it-scale tlb_flush3, \"TLB flush of separate file shared mapping\": per page store, madvise(DONTNEED, 4 KiB), load; op = page",
            Test::Read1 => "will-it-scale read1, \"Separate file read\": per-task 1 MiB /tmp file, read(4096) loop with lseek 0 at EOF, first read at EOF; op = read() call",
            Test::Read2 => "will-it-scale read2, \"Same file read\": one shared 1 MiB /tmp file opened by every task, read(4096) loop with lseek 0 at EOF; op = read() call",
        }
    }

    fn body(self) -> Body {
        match self {
            Test::PageFault1 | Test::PageFault2 | Test::PageFault3 => Body::Touch,
            Test::Malloc1 => Body::Malloc,
            Test::Mmap1 | Test::Mmap2 => Body::MapUnmap,
            Test::TlbFlush1 | Test::TlbFlush2 | Test::TlbFlush3 => Body::TlbFlush,
            Test::Read1 | Test::Read2 => Body::Read,
        }
    }

    fn size_param(self) -> SizeParam {
        match self {
            Test::TlbFlush2 => SizeParam::RegionKib,
            Test::Read1 | Test::Read2 => SizeParam::FileKib,
            _ => SizeParam::RegionMib,
        }
    }

    /// One sparse temp file per task, as mkstemp + ftruncate does.
    fn per_task_sparse_file(self) -> bool {
        matches!(self, Test::PageFault2 | Test::PageFault3 | Test::Mmap2 | Test::TlbFlush1 | Test::TlbFlush3)
    }

    /// mmap flags; None for the read tests.
    fn map_flags(self) -> u32 {
        match self {
            Test::PageFault1 | Test::Malloc1 | Test::Mmap1 | Test::TlbFlush2 => map::PRIVATE | map::ANONYMOUS,
            Test::PageFault2 | Test::Mmap2 | Test::TlbFlush1 => map::PRIVATE,
            Test::PageFault3 | Test::TlbFlush3 => map::SHARED,
            Test::Read1 | Test::Read2 => 0,
        }
    }

    /// The parameter list of this testcase (for workloads wrapping it).
    pub fn specs_pub(self) -> Vec<ParamSpec> {
        self.specs()
    }

    fn from_index(i: usize) -> Test {
        ALL[i]
    }

    fn specs(self) -> Vec<ParamSpec> {
        let mut v = TaskCfg::specs();
        v.push(ParamSpec {
            name: "tmp_fs",
            default: "tmpfs".into(),
            help: "what /tmp is: \"tmpfs\" (shmem) or \"disk\" (ext4-like); affects the per-task files of page_fault2/3, mmap2, tlb_flush1/3, read1/2",
        });
        v.push(match self.size_param() {
            SizeParam::RegionMib => ParamSpec {
                name: "size_mib",
                default: "128".into(),
                help: "size of the mapped region (and per-task file), MiB; the real test uses 128",
            },
            SizeParam::RegionKib => ParamSpec {
                name: "region_kib",
                default: "1024".into(),
                help: "size of the anonymous region, KiB (multiple of 4); the real test uses 1024",
            },
            SizeParam::FileKib => ParamSpec {
                name: "file_kib",
                default: "1024".into(),
                help: "size of the file read, KiB (multiple of 4); the real test uses 1024",
            },
        });
        v
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before the first op.
    Start,
    /// `Open` issued; expecting the fd.
    Opening,
    /// read1's initial lseek to EOF issued.
    SeekEof,
    /// `Mmap` issued; expecting the address.
    Mapping,
    /// Store to page `off` issued (Touch).
    Touching,
    /// Store to page `off` issued (TlbFlush).
    FlushStore,
    /// madvise of page `off` issued.
    FlushAdvise,
    /// Load of page `off` issued.
    FlushLoad,
    /// malloc1's header store issued.
    MallocStore,
    /// free()'s header load issued.
    MallocLoad,
    /// `Munmap` issued.
    Unmapping,
    /// `Read` issued.
    Reading,
    /// `Lseek(fd, 0)` after a 0-byte read issued.
    Rewinding,
    /// `Exit` issued.
    Done,
}

#[derive(Clone, Copy, Debug)]
struct TaskState {
    phase: Phase,
    /// File this task opens (u32::MAX: none).
    file: FileId,
    fd: Fd,
    base: u64,
    /// Offset of the current page in the region (the read tests: reads
    /// that returned data in this pass).
    off: u64,
    /// Iterations completed: munmaps returned, or (read tests) passes that
    /// read the file to its end.
    iters: u64,
}

/// One will-it-scale testcase.
pub struct WillItScale {
    test: Test,
    body: Body,
    cfg: TaskCfg,
    tmp_fs: FsKind,
    /// Region (mmap length, and per-task file size) or file size (read tests).
    size: u64,
    map_len: u64,
    map_flags: u32,
    tasks: TaskMap,
    st: Vec<TaskState>,
    /// The read tests' buffer: the testcase's static one in the process
    /// image (0 without an image).
    buf: u64,
}

const NO_FILE: FileId = FileId::MAX;

impl WillItScale {
    pub fn new(test: Test, p: &mut Params) -> Result<WillItScale, String> {
        let cfg = TaskCfg::read(p)?;
        let tmp_fs = read_fs(p, "tmp_fs", "tmpfs")?;
        let size = match test.size_param() {
            SizeParam::RegionMib => read_size(p, "size_mib", 128, MIB, MAX_REGION_MIB)?,
            SizeParam::RegionKib => page_multiple("region_kib", read_size(p, "region_kib", 1024, KIB, MAX_REGION_MIB * 1024)?)?,
            SizeParam::FileKib => page_multiple("file_kib", read_size(p, "file_kib", 1024, KIB, MAX_REGION_MIB * 1024)?)?,
        };
        p.finish()?;
        let map_len = if test == Test::Malloc1 { size + MALLOC_PAD } else { size };
        Ok(WillItScale {
            test,
            body: test.body(),
            cfg,
            tmp_fs,
            size,
            map_len,
            map_flags: test.map_flags(),
            tasks: TaskMap::default(),
            st: Vec::new(),
            buf: 0,
        })
    }

    #[inline]
    fn mmap(&self, st: &mut TaskState) -> Op {
        st.phase = Phase::Mapping;
        let anon = self.map_flags & map::ANONYMOUS != 0;
        Op::Mmap {
            addr: 0,
            len: self.map_len,
            prot: prot::READ | prot::WRITE,
            flags: self.map_flags,
            fd: if anon { -1 } else { st.fd },
            off: 0,
        }
    }

    #[inline]
    fn read(&self, st: &mut TaskState) -> Op {
        st.phase = Phase::Reading;
        Op::Read { fd: st.fd, len: READ_LEN, buf: self.buf }
    }

    #[inline]
    fn munmap(&self, st: &mut TaskState) -> Op {
        st.phase = Phase::Unmapping;
        Op::Munmap { addr: st.base, len: self.map_len }
    }

    /// First op of an iteration over the freshly mapped region at `st.base`.
    #[inline]
    fn begin_region(&self, st: &mut TaskState) -> Op {
        st.off = 0;
        match self.body {
            Body::Touch => {
                st.phase = Phase::Touching;
                Op::Access { addr: st.base, kind: Access::Store }
            }
            Body::TlbFlush => {
                st.phase = Phase::FlushStore;
                Op::Access { addr: st.base, kind: Access::Store }
            }
            Body::Malloc => {
                // sysmalloc's set_prev_size/set_head write the chunk header
                // at the start of the mapping: the one write fault.
                st.phase = Phase::MallocStore;
                Op::Access { addr: st.base, kind: Access::Store }
            }
            Body::MapUnmap => self.munmap(st),
            Body::Read => unreachable!("read tests do not map"),
        }
    }

    /// `next_op` past the per-page fast path: every phase change.
    #[inline(never)]
    fn next_op_slow(&mut self, i: usize, last: Ret, ops: &mut u64) -> Op {
        let mut st = self.st[i];
        if last.is_err() || st.phase == Phase::Done {
            st.phase = Phase::Done;
            self.st[i] = st;
            return Op::Exit;
        }
        let op = match st.phase {
            Phase::Start => {
                if st.file != NO_FILE {
                    st.phase = Phase::Opening;
                    Op::Open { file: st.file }
                } else {
                    self.mmap(&mut st)
                }
            }
            Phase::Opening => {
                st.fd = last.val() as Fd;
                match self.test {
                    Test::Read1 => {
                        // The file offset is left at EOF by the setup writes.
                        st.phase = Phase::SeekEof;
                        Op::Lseek { fd: st.fd, off: self.size }
                    }
                    Test::Read2 => self.read(&mut st),
                    _ => self.mmap(&mut st),
                }
            }
            Phase::SeekEof => self.read(&mut st),
            Phase::Mapping => {
                st.base = last.val() as u64;
                self.begin_region(&mut st)
            }
            Phase::Touching => {
                *ops += 1;
                st.off += PAGE;
                if st.off < self.size {
                    Op::Access { addr: st.base + st.off, kind: Access::Store }
                } else {
                    self.munmap(&mut st)
                }
            }
            Phase::FlushStore => {
                st.phase = Phase::FlushAdvise;
                Op::Madvise { addr: st.base + st.off, len: PAGE, advice: Advice::DontNeed }
            }
            Phase::FlushAdvise => {
                st.phase = Phase::FlushLoad;
                Op::Access { addr: st.base + st.off, kind: Access::Load }
            }
            Phase::FlushLoad => {
                *ops += 1;
                st.off += PAGE;
                if st.off < self.size {
                    st.phase = Phase::FlushStore;
                    Op::Access { addr: st.base + st.off, kind: Access::Store }
                } else {
                    self.munmap(&mut st)
                }
            }
            Phase::MallocStore => {
                // free(): chunk_is_mmapped()/chunksize() read the header.
                st.phase = Phase::MallocLoad;
                Op::Access { addr: st.base + MALLOC_SIZE_FIELD, kind: Access::Load }
            }
            Phase::MallocLoad => self.munmap(&mut st),
            Phase::Unmapping => {
                if matches!(self.body, Body::MapUnmap | Body::Malloc) {
                    *ops += 1;
                }
                st.iters += 1;
                self.mmap(&mut st)
            }
            Phase::Reading => {
                if last.val() == 0 {
                    // read1 starts at EOF: its first, empty pass is no iteration.
                    st.iters += (st.off > 0) as u64;
                    st.off = 0;
                    st.phase = Phase::Rewinding;
                    Op::Lseek { fd: st.fd, off: 0 }
                } else {
                    *ops += 1;
                    st.off += 1;
                    self.read(&mut st)
                }
            }
            Phase::Rewinding => {
                *ops += 1;
                self.read(&mut st)
            }
            Phase::Done => Op::Exit,
        };
        self.st[i] = st;
        op
    }
}

fn page_multiple(key: &str, bytes: u64) -> Result<u64, String> {
    if !bytes.is_multiple_of(PAGE) {
        return Err(format!("{key}: must be a multiple of 4 (KiB), got {}", bytes / KIB));
    }
    Ok(bytes)
}

impl Workload for WillItScale {
    fn name(&self) -> &str {
        self.test.name()
    }

    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        // read2's testcase_prepare: one shared file, made before the tasks.
        let shared = if self.test == Test::Read2 { env.create_file(self.tmp_fs, self.size, true)? } else { NO_FILE };
        let ids = self.cfg.spawn(env)?;
        self.buf = if self.cfg.image { env.image_buffer() } else { 0 };
        // main.c: every task polls the pipe the parent writes once all exist.
        env.start_gate(&ids)?;
        self.tasks = TaskMap::new(&ids)?;
        self.st.clear();
        for _ in &ids {
            let file = if self.test.per_task_sparse_file() {
                // mkstemp + ftruncate(size): sparse, nothing cached.
                env.create_file(self.tmp_fs, self.size, false)?
            } else if self.test == Test::Read1 {
                // mkstemp + write(1 MiB of zeros): fully cached.
                env.create_file(self.tmp_fs, self.size, true)?
            } else {
                shared
            };
            self.st.push(TaskState { phase: Phase::Start, file, fd: -1, base: 0, off: 0, iters: 0 });
        }
        Ok(())
    }

    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let Some(i) = self.tasks.get(task) else { return Op::Exit };
        // The op per page of page_fault1..3: the next store of the region,
        // updated in place (the general path below copies the state).
        let size = self.size;
        let cur = &mut self.st[i];
        if cur.phase == Phase::Touching && !last.is_err() && cur.off + PAGE < size {
            *ops += 1;
            cur.off += PAGE;
            return Op::Access { addr: cur.base + cur.off, kind: Access::Store };
        }
        self.next_op_slow(i, last, ops)
    }

    fn access_run(&self, task: TaskId) -> Option<AccessRun> {
        // The rest of the region `next_op`'s fast path would touch.
        let st = &self.st[self.tasks.get(task)?];
        (st.phase == Phase::Touching && st.off + PAGE < self.size).then(|| AccessRun {
            addr: st.base + st.off + PAGE,
            stride: PAGE,
            count: (self.size - 1 - st.off) / PAGE,
            kind: Access::Store,
        })
    }

    fn access_run_done(&mut self, task: TaskId, n: u64, ops: &mut u64) {
        let Some(i) = self.tasks.get(task) else { return };
        debug_assert!(self.st[i].phase == Phase::Touching && self.st[i].off + n * PAGE < self.size);
        *ops += n;
        self.st[i].off += n * PAGE;
    }

    fn iterations(&self, task: TaskId) -> Option<u64> {
        self.tasks.get(task).map(|i| self.st[i].iters)
    }

    fn peak_bytes(&self) -> Option<u64> {
        let n = self.cfg.tasks as u64;
        let tmpfs = self.tmp_fs == FsKind::Tmpfs;
        // Page cache counts only on tmpfs (shmem, no swap); a disk file's
        // page cache is reclaimable.
        let cache = |bytes: u64| if tmpfs { bytes } else { 0 };
        let pt = pte_table_bytes(self.map_len);
        Some(match self.test {
            // Every page of the region is populated before munmap.
            Test::PageFault1 => n * (self.size + pt),
            // Anonymous COW copies plus the (zero-filled) page cache.
            Test::PageFault2 => n * (self.size + cache(self.size) + pt),
            Test::PageFault3 => n * (cache(self.size) + pt),
            // One page (more if backed by a large folio).
            Test::Malloc1 => n * (PAGE + PAGE),
            Test::Mmap1 | Test::Mmap2 => 0,
            // One anonymous page at a time plus the page cache read back.
            Test::TlbFlush1 | Test::TlbFlush3 => n * (PAGE + cache(self.size) + pt),
            Test::TlbFlush2 => n * (PAGE + pt),
            Test::Read1 => n * self.size,
            Test::Read2 => self.size,
        })
    }
}

fn build_test<const T: usize>(p: &mut Params) -> Result<Box<dyn Workload>, String> {
    Ok(Box::new(WillItScale::new(Test::from_index(T), p)?))
}

fn specs_test<const T: usize>() -> Vec<ParamSpec> {
    Test::from_index(T).specs()
}

macro_rules! info {
    ($i:literal) => {
        WorkloadInfo { name: ALL[$i].name(), help: ALL[$i].help(), params: specs_test::<$i>, build: build_test::<$i> }
    };
}

/// The registry entries of all testcases.
pub fn infos() -> Vec<WorkloadInfo> {
    vec![info!(0), info!(1), info!(2), info!(3), info!(4), info!(5), info!(6), info!(7), info!(8), info!(9), info!(10)]
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::*;

    fn setup(name: &str, kv: &[(&str, toml::Value)], cpus: u32) -> (Box<dyn Workload>, FakeEnv, FakeKernel) {
        let mut w = build(name, kv).unwrap();
        let mut env = FakeEnv::new(cpus);
        w.setup(&mut env).unwrap();
        let k = FakeKernel::new(&env);
        (w, env, k)
    }

    /// Number of steps whose op matches.
    fn count<F: Fn(&Op) -> bool>(steps: &[Step], f: F) -> usize {
        steps.iter().filter(|s| f(&s.op)).count()
    }

    #[test]
    fn all_testcases_registered_with_their_names() {
        let names: Vec<_> = infos().iter().map(|i| i.name).collect();
        assert_eq!(
            names,
            [
                "page_fault1",
                "page_fault2",
                "page_fault3",
                "malloc1",
                "mmap1",
                "mmap2",
                "tlb_flush1",
                "tlb_flush2",
                "tlb_flush3",
                "read1",
                "read2"
            ]
        );
        for t in ALL {
            let w = build(t.name(), &[]).unwrap();
            assert_eq!(w.name(), t.name());
        }
    }

    #[test]
    fn page_fault1_one_store_per_page_one_op_per_touch() {
        let (mut w, env, mut k) = setup("page_fault1", &[("size_mib", i(1))], 4);
        let t = env.ids()[0];
        // Start: mmap.
        let s = k.step(&mut *w, t);
        let Op::Mmap { addr: 0, len, prot: pr, flags, fd, off: 0 } = s.op else { panic!("{s:?}") };
        assert_eq!((len, pr, flags, fd), (MIB, prot::READ | prot::WRITE, map::PRIVATE | map::ANONYMOUS, -1));
        let base = s.ret.val() as u64;
        for p in 0..256u64 {
            let s = k.step(&mut *w, t);
            assert_eq!(s.op, Op::Access { addr: base + p * PAGE, kind: Access::Store });
            // The op for page p-1 is counted when the touch of page p is issued.
            assert_eq!(s.ops, (p > 0) as u64);
        }
        let s = k.step(&mut *w, t);
        assert_eq!(s.op, Op::Munmap { addr: base, len: MIB });
        assert_eq!(s.ops, 1);
        assert_eq!(k.ops[&t], 256);
        // Next iteration maps again and touches again.
        let s = k.step(&mut *w, t);
        assert!(matches!(s.op, Op::Mmap { len: MIB, .. }));
        assert_eq!(s.ops, 0);
        k.run(&mut *w, &[t], 256 + 1);
        assert_eq!(k.ops[&t], 512);
        assert!(k.maps.is_empty());
    }

    #[test]
    fn page_fault1_default_region_is_128_mib() {
        let (mut w, env, mut k) = setup("page_fault1", &[], 1);
        let t = env.ids()[0];
        k.run(&mut *w, &[t], 1 + 32768 + 1);
        let log = k.log(t);
        assert_eq!(count(log, |o| matches!(o, Op::Access { kind: Access::Store, .. })), 32768);
        assert!(matches!(log.last().unwrap().op, Op::Munmap { len, .. } if len == 128 * MIB));
        assert_eq!(k.ops[&t], 32768);
        assert_eq!(w.peak_bytes(), Some(128 * MIB + 64 * PAGE));
    }

    #[test]
    fn page_fault2_and_3_map_per_task_sparse_files() {
        for (name, flags) in [("page_fault2", map::PRIVATE), ("page_fault3", map::SHARED)] {
            let (mut w, env, mut k) = setup(name, &[("size_mib", i(2)), ("tasks", i(3)), ("tmp_fs", s("disk"))], 8);
            assert_eq!(env.files, vec![(FsKind::Disk, 2 * MIB, false); 3]);
            let ids = env.ids();
            k.run(&mut *w, &ids, 3 * (2 + 512 + 2));
            let mut files = Vec::new();
            for &t in &ids {
                let log = k.log(t);
                let Op::Open { file } = log[0].op else { panic!() };
                files.push(file);
                let fd = log[0].ret.val() as Fd;
                assert_eq!(log[1].op, Op::Mmap { addr: 0, len: 2 * MIB, prot: prot::READ | prot::WRITE, flags, fd, off: 0 });
                assert_eq!(count(log, |o| matches!(o, Op::Access { kind: Access::Store, .. })), 512);
                assert_eq!(count(log, |o| matches!(o, Op::Munmap { .. })), 1);
                assert!(matches!(log.last().unwrap().op, Op::Mmap { .. }), "second iteration maps again, no reopen");
                assert_eq!(k.ops[&t], 512);
            }
            files.sort();
            files.dedup();
            assert_eq!(files.len(), 3, "one file per task");
        }
    }

    #[test]
    fn malloc1_one_header_store_and_one_op_per_pair() {
        let (mut w, env, mut k) = setup("malloc1", &[], 1);
        let t = env.ids()[0];
        k.run(&mut *w, &[t], 4 * 10);
        let log = k.log(t);
        for it in 0..10 {
            let l = &log[it * 4..it * 4 + 4];
            let Op::Mmap { len, flags, fd: -1, .. } = l[0].op else { panic!("{:?}", l[0]) };
            assert_eq!((len, flags), (128 * MIB + PAGE, map::PRIVATE | map::ANONYMOUS));
            let base = l[0].ret.val() as u64;
            assert_eq!(l[1].op, Op::Access { addr: base, kind: Access::Store });
            assert!(matches!(l[2].op, Op::Access { addr, kind: Access::Load } if addr / PAGE == base / PAGE));
            assert_eq!(l[3].op, Op::Munmap { addr: base, len: 128 * MIB + PAGE });
            // Counted when the munmap (free) has returned.
            assert_eq!(l.iter().map(|s| s.ops).sum::<u64>(), if it == 0 { 0 } else { 1 });
        }
        assert_eq!(count(log, |o| matches!(o, Op::Access { kind: Access::Store, .. })), 10);
        assert_eq!(k.ops[&t], 9);
        k.step(&mut *w, t);
        assert_eq!(k.ops[&t], 10);
    }

    #[test]
    fn mmap1_and_mmap2_pairs_without_accesses() {
        for (name, anon) in [("mmap1", true), ("mmap2", false)] {
            let (mut w, env, mut k) = setup(name, &[("tasks", i(2))], 2);
            assert_eq!(env.files.len(), if anon { 0 } else { 2 });
            let ids = env.ids();
            k.run(&mut *w, &ids, 2 * 21);
            for &t in &ids {
                let log = k.log(t);
                let off = if anon { 0 } else { 1 };
                let maps = count(log, |o| matches!(o, Op::Mmap { .. }));
                let unmaps = count(log, |o| matches!(o, Op::Munmap { .. }));
                assert_eq!(count(log, |o| matches!(o, Op::Access { .. })), 0);
                assert_eq!(maps + unmaps + off, 21);
                // A pair is counted when the next mmap is issued.
                assert_eq!(k.ops[&t], maps as u64 - 1);
                for s in &log[off..] {
                    if let Op::Mmap { flags, len, .. } = s.op {
                        assert_eq!(len, 128 * MIB);
                        assert_eq!(flags, if anon { map::PRIVATE | map::ANONYMOUS } else { map::PRIVATE });
                    }
                }
            }
        }
    }

    fn check_tlb_flush(name: &str, kv: &[(&str, toml::Value)], region: u64, flags: u32, file: bool) {
        let (mut w, env, mut k) = setup(name, kv, 1);
        let t = env.ids()[0];
        let pages = region / PAGE;
        let pre = if file { 2 } else { 1 };
        k.run(&mut *w, &[t], pre + 3 * pages as usize + 2);
        let log = k.log(t);
        let Op::Mmap { len, flags: f, .. } = log[pre - 1].op else { panic!() };
        assert_eq!((len, f), (region, flags));
        let base = log[pre - 1].ret.val() as u64;
        for p in 0..pages {
            let a = base + p * PAGE;
            let l = &log[pre + 3 * p as usize..pre + 3 * p as usize + 3];
            assert_eq!(l[0].op, Op::Access { addr: a, kind: Access::Store });
            assert_eq!(l[1].op, Op::Madvise { addr: a, len: PAGE, advice: Advice::DontNeed });
            assert_eq!(l[2].op, Op::Access { addr: a, kind: Access::Load });
            // The op of page p is counted after its load returns.
            assert_eq!(l[0].ops, (p > 0) as u64);
            assert_eq!(l[1].ops + l[2].ops, 0);
        }
        let n = log.len();
        assert_eq!(log[n - 2].op, Op::Munmap { addr: base, len: region });
        assert!(matches!(log[n - 1].op, Op::Mmap { .. }));
        assert_eq!(k.ops[&t], pages);
    }

    #[test]
    fn tlb_flush_store_dontneed_load_per_page() {
        check_tlb_flush("tlb_flush1", &[("size_mib", i(1))], MIB, map::PRIVATE, true);
        check_tlb_flush("tlb_flush3", &[("size_mib", i(1))], MIB, map::SHARED, true);
        // tlb_flush2: fixed 1 MiB = 256 pages, anonymous.
        check_tlb_flush("tlb_flush2", &[], MIB, map::PRIVATE | map::ANONYMOUS, false);
        check_tlb_flush("tlb_flush2", &[("region_kib", i(64))], 64 * KIB, map::PRIVATE | map::ANONYMOUS, false);
        // size_mib does not resize tlb_flush2.
        let e = build("tlb_flush2", &[("size_mib", i(1))]).err().unwrap();
        assert!(e.starts_with("size_mib"), "{e}");
    }

    #[test]
    fn read1_starts_at_eof_and_counts_every_read() {
        let (mut w, env, mut k) = setup("read1", &[("tasks", i(2))], 2);
        assert_eq!(env.files, vec![(FsKind::Tmpfs, MIB, true); 2]);
        let t = env.ids()[0];
        let s = k.step(&mut *w, t);
        assert!(matches!(s.op, Op::Open { .. }));
        let fd = s.ret.val() as Fd;
        assert_eq!(k.step(&mut *w, t).op, Op::Lseek { fd, off: MIB });
        let s = k.step(&mut *w, t);
        assert_eq!((s.op, s.ret), (Op::Read { fd, len: 4096, buf: 0 }, Ret::Val(0)), "first read is at EOF");
        let s = k.step(&mut *w, t);
        assert_eq!((s.op, s.ops), (Op::Lseek { fd, off: 0 }, 0));
        assert_eq!(k.ops[&t], 0);
        // The first read is counted once the lseek returns.
        let s = k.step(&mut *w, t);
        assert_eq!((s.op, s.ops, s.ret), (Op::Read { fd, len: 4096, buf: 0 }, 1, Ret::Val(4096)));
        // One full pass: 256 data reads + the EOF read = 257 ops.
        let before = k.ops[&t];
        k.run(&mut *w, &[t], 256 + 2);
        assert_eq!(k.ops[&t] - before, 257);
        let l = k.log(t);
        assert_eq!(count(l, |o| matches!(o, Op::Lseek { off: 0, .. })), 2);
        // Two tasks, two different files.
        let u = env.ids()[1];
        let s = k.step(&mut *w, u);
        assert_ne!(s.op, k.log(t)[0].op);
    }

    #[test]
    fn read2_one_shared_file_opened_by_each_task() {
        let (mut w, env, mut k) = setup("read2", &[("tasks", i(3)), ("mode", s("threads"))], 4);
        assert_eq!(env.files, vec![(FsKind::Tmpfs, MIB, true)]);
        let ids = env.ids();
        k.run(&mut *w, &ids, 3 * (1 + 257 + 1));
        for &t in &ids {
            let l = k.log(t);
            assert_eq!(l[0].op, Op::Open { file: 7 });
            assert_eq!(l[1].ret, Ret::Val(4096), "offset starts at 0");
            assert_eq!(count(l, |o| matches!(o, Op::Read { .. })), 257 + 1 - 1);
            assert_eq!(count(l, |o| matches!(o, Op::Lseek { off: 0, .. })), 1);
            assert_eq!(k.ops[&t], 256);
        }
        assert_eq!(w.peak_bytes(), Some(MIB));
    }

    #[test]
    fn threads_mode_one_process_rest_threads_pinned_modulo() {
        let (_w, env, _k) = setup("page_fault1", &[("tasks", i(5)), ("mode", s("threads"))], 2);
        assert_eq!(env.tasks.len(), 5);
        let p = env.tasks[0].0;
        assert_eq!(env.tasks[0].1, Spawn::Process { cpu: Some(0) });
        for (i, t) in env.tasks.iter().enumerate().skip(1) {
            assert_eq!(t.1, Spawn::Thread { of: p, cpu: Some(i as u32 % 2) });
        }
        let (_w, env, _k) = setup("page_fault1", &[("tasks", i(5))], 3);
        for (i, t) in env.tasks.iter().enumerate() {
            assert_eq!(t.1, Spawn::Process { cpu: Some(i as u32 % 3) });
        }
        let (_w, env, _k) = setup("mmap1", &[("tasks", i(2)), ("pin", toml::Value::Boolean(false))], 3);
        assert!(env.tasks.iter().all(|t| t.1 == Spawn::Process { cpu: None }));
    }

    #[test]
    fn threads_map_distinct_regions() {
        let (mut w, env, mut k) = setup("page_fault1", &[("tasks", i(3)), ("mode", s("threads")), ("size_mib", i(1))], 4);
        let ids = env.ids();
        k.run(&mut *w, &ids, 3 * 10);
        let bases: Vec<_> = ids.iter().map(|&t| k.log(t)[0].ret.val()).collect();
        assert!(bases[0] != bases[1] && bases[1] != bases[2] && bases[0] != bases[2]);
        for (&t, &b) in ids.iter().zip(&bases) {
            assert!(k.log(t)[1..].iter().all(|s| matches!(s.op, Op::Access { addr, .. } if addr >= b as u64 && addr < b as u64 + MIB)));
        }
    }

    #[test]
    fn failed_mmap_exits() {
        let (mut w, env, mut k) = setup("page_fault1", &[("size_mib", i(1))], 1);
        let t = env.ids()[0];
        k.fail_mmap_after = Some(1);
        k.run(&mut *w, &[t], 1000);
        let l = k.log(t);
        assert_eq!(l.len(), 1 + 256 + 1 + 1 + 1, "mmap, 256 stores, munmap, failing mmap, exit");
        assert_eq!(l[l.len() - 2].ret, Ret::Err(super::super::errno::ENOMEM));
        assert_eq!(l.last().unwrap().op, Op::Exit);
        // Asked again, it keeps exiting.
        assert_eq!(w.next_op(t, Ret::Val(0), &mut 0), Op::Exit);
        // Unknown task ids exit too.
        assert_eq!(w.next_op(9999, Ret::Start, &mut 0), Op::Exit);
    }

    #[test]
    fn failed_read_exits() {
        let (mut w, env, _k) = setup("read2", &[], 1);
        let t = env.ids()[0];
        let mut ops = 0;
        assert!(matches!(w.next_op(t, Ret::Start, &mut ops), Op::Open { .. }));
        assert!(matches!(w.next_op(t, Ret::Val(3), &mut ops), Op::Read { fd: 3, .. }));
        assert_eq!(w.next_op(t, Ret::Err(super::super::errno::EBADF), &mut ops), Op::Exit);
        assert_eq!(ops, 0);
    }

    #[test]
    fn bad_params_are_errors_naming_the_key() {
        let e = build("page_fault1", &[("sise_mib", i(1))]).err().unwrap();
        assert!(e.starts_with("sise_mib"), "{e}");
        let e = build("read1", &[("size_mib", i(1))]).err().unwrap();
        assert!(e.starts_with("size_mib"), "{e}");
        for n in [0, 2049] {
            let e = build("mmap1", &[("tasks", i(n))]).err().unwrap();
            assert!(e.starts_with("tasks"), "{e}");
        }
        assert!(build("mmap1", &[("tasks", i(2048))]).is_ok());
        let e = build("mmap1", &[("mode", s("both"))]).err().unwrap();
        assert!(e.starts_with("mode"), "{e}");
        let e = build("page_fault2", &[("tmp_fs", s("nfs"))]).err().unwrap();
        assert!(e.starts_with("tmp_fs"), "{e}");
        let e = build("page_fault1", &[("size_mib", i(0))]).err().unwrap();
        assert!(e.starts_with("size_mib"), "{e}");
        let e = build("read2", &[("file_kib", i(6))]).err().unwrap();
        assert!(e.starts_with("file_kib"), "{e}");
    }

    #[test]
    fn peak_bytes_scales_with_tasks_and_fs() {
        let pk = |name: &str, kv: &[(&str, toml::Value)]| build(name, kv).unwrap().peak_bytes().unwrap();
        let pt = 64 * PAGE;
        assert_eq!(pk("page_fault1", &[("tasks", i(4))]), 4 * (128 * MIB + pt));
        assert_eq!(pk("page_fault2", &[("tasks", i(2))]), 2 * (256 * MIB + pt));
        assert_eq!(pk("page_fault2", &[("tasks", i(2)), ("tmp_fs", s("disk"))]), 2 * (128 * MIB + pt));
        assert_eq!(pk("mmap1", &[("tasks", i(2))]), 0);
        assert_eq!(pk("read1", &[("tasks", i(3))]), 3 * MIB);
    }
}
