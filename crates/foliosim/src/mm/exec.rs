//! execve (fs/exec.c, fs/binfmt_elf.c): a task drops its mm (the fork
//! copy, torn down here when it was the last user: exec_mmap -> mmput) and
//! gets a fresh one holding the binary's PT_LOAD segments, a brk heap after
//! bss and a stack whose top page the kernel writes (copy_strings).
//!
//! The segments are file-backed VMAs of the binary's inode, so every
//! process exec'ing the same binary maps the same page-cache folios: text
//! faults are do_read_fault with fault-around, data writes do_cow_fault.

use super::vma::{vm, Vma, DEFAULT_MAP_WINDOW, TASK_SIZE};
use super::vmstat::{Entry, Stat};
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::types::Error;
use crate::workload::{errno, Access, FileId, Ret};
use std::ops::Range;

/// Top of the user stack with ASLR off (arm64 and x86-64: STACK_TOP = TASK_SIZE).
pub const STACK_TOP: u64 = TASK_SIZE;
/// The stack VMA exec leaves: setup_arg_pages expands it by stack_expand
/// (128 KiB) below the argument page(s).
pub const EXEC_STACK: u64 = (128 << 10) + 4096;

/// What the ELF program headers of a binary say (the workload supplies
/// them: the simulated file holds no bytes).
#[derive(Clone, Copy, Debug)]
pub struct ElfLayout {
    pub vaddr: u64,
    pub text: u64,
    pub data: u64,
    pub bss: u64,
}

impl Kernel {
    /// execve of `file` by task `tid`. Returns the initial stack pointer
    /// (the top of the stack VMA).
    pub fn do_execve(&mut self, tid: u32, file: FileId, elf: ElfLayout, mmap_base: u64) -> Ret {
        let (old, cpu, t0) = {
            let tk = &self.tasks[tid as usize];
            (tk.mm, tk.cpu, tk.clock)
        };
        let page = |x: u64| x.div_ceil(4096) * 4096;
        let (text, data, bss) = (page(elf.text), page(elf.data), page(elf.bss));
        let bad = file as usize >= self.inodes.len()
            || !elf.vaddr.is_multiple_of(4096)
            || text == 0
            || elf.vaddr + text + data + bss >= STACK_TOP - EXEC_STACK
            || self.inodes[file as usize].size < text + data;
        if bad {
            let t = t0 + self.c.syscall;
            let tk = &mut self.tasks[tid as usize];
            tk.charge_sys(Entry::Execve, t0, t);
            return Ret::Err(if file as usize >= self.inodes.len() { errno::ENOENT } else { errno::EINVAL });
        }
        // open_exec + prepare_binprm: the first page of the binary is read
        // through the page cache (the ELF and program headers).
        let mut t = t0 + self.c.syscall / 2 + self.c.file_op;
        t = match self.filemap_read(t, cpu, file, 0, 4096) {
            Some((_, t)) => t,
            None => return self.execve_fail(tid, t0, t),
        };
        // exec_mmap: the task switches to a new mm; the old one goes with
        // its last user (after fork + exec, the child's CoW copy of make).
        let new = self.new_mm();
        let fds = self.mms[old as usize].fds.clone();
        self.mms[new as usize].fds = fds;
        // setup_new_exec: arch_pick_mmap_layout, or the draw the caller
        // brings (the recorded one) where it could be one: page-aligned,
        // above the image and inside the map window.
        let brought = mmap_base.is_multiple_of(4096) && mmap_base > elf.vaddr + text + data + bss && mmap_base <= DEFAULT_MAP_WINDOW;
        self.mms[new as usize].mmap_base = if brought { mmap_base } else { self.arch_pick_mmap_base() };
        self.mms[old as usize].users -= 1;
        if self.mms[old as usize].users == 0 {
            t = self.exit_mmap(t, cpu, old);
        }
        self.tasks[tid as usize].mm = new;
        self.mms[new as usize].cpumask_set(cpu);
        t += self.c.exec_base;
        // load_elf_binary: elf_map of each PT_LOAD segment, bss by vm_brk.
        let ino = file + 1;
        let mut segs = vec![Vma {
            start: elf.vaddr,
            end: elf.vaddr + text,
            flags: vm::READ | vm::EXEC,
            file: ino,
            pgoff: 0,
            anon_vma: 0,
            seq: 0,
            vm_lock: Default::default(),
        }];
        let mut end = elf.vaddr + text;
        if data > 0 {
            segs.push(Vma {
                start: end,
                end: end + data,
                flags: vm::READ | vm::WRITE | vm::MAYWRITE,
                file: ino,
                pgoff: text >> 12,
                anon_vma: 0,
                seq: 0,
                vm_lock: Default::default(),
            });
            end += data;
        }
        if bss > 0 {
            segs.push(Vma {
                start: end,
                end: end + bss,
                flags: vm::READ | vm::WRITE | vm::MAYWRITE,
                file: 0,
                pgoff: end >> 12,
                anon_vma: 0,
                seq: 0,
                vm_lock: Default::default(),
            });
            end += bss;
        }
        segs.push(Vma {
            start: STACK_TOP - EXEC_STACK,
            end: STACK_TOP,
            flags: vm::READ | vm::WRITE | vm::MAYWRITE | vm::GROWSDOWN,
            file: 0,
            pgoff: (STACK_TOP - EXEC_STACK) >> 12,
            anon_vma: 0,
            seq: 0,
            vm_lock: Default::default(),
        });
        // The new mm's VMAs are allocated on the exec'ing CPU.
        self.mms[new as usize].mmap_lock.writer_cpu = cpu;
        for v in segs {
            self.mms[new as usize].insert_vma(v);
            t += self.c.mmap;
        }
        let m = &mut self.mms[new as usize];
        m.brk_start = end;
        m.brk = end;
        self.stat.inc(Stat::Exec);
        // copy_strings: the kernel writes argv and envp into the top stack
        // page (get_user_pages_remote -> a fault in the new mm). Its time is
        // execve's, as a profiler attributes it (R1 in docs/mechanisms/large-anon-folios.md#published-figures).
        let (sys0, fault0, user0) = {
            let tk = &self.tasks[tid as usize];
            (tk.sys_ns, tk.entry_ns[Entry::Fault as usize], tk.user_ns)
        };
        self.tasks[tid as usize].clock = t;
        self.fault_kernel_mode = true;
        let r = self.user_access(tid, STACK_TOP - 8, Access::Store);
        self.fault_kernel_mode = false;
        let t = self.tasks[tid as usize].clock + self.c.syscall / 2;
        let tk = &mut self.tasks[tid as usize];
        tk.sys_ns = sys0 + (t - t0);
        tk.entry_ns[Entry::Fault as usize] = fault0;
        tk.user_ns = user0;
        tk.entry_ns[Entry::Execve as usize] += t - t0;
        tk.clock = t;
        // exec_mm_release: a vfork parent waits no longer.
        if let Some(p) = tk.vfork_parent.take() {
            self.wake_up(p, t);
        }
        if r.is_err() {
            return r;
        }
        Ret::Val(STACK_TOP as i64)
    }

    fn execve_fail(&mut self, tid: u32, t0: Ns, t: Ns) -> Ret {
        let tk = &mut self.tasks[tid as usize];
        tk.charge_sys(Entry::Execve, t0, t);
        Ret::Err(errno::ENOMEM)
    }
}

/// What one piece of a process image is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegKind {
    /// A segment of the binary or of a shared library (a private file
    /// mapping; the harness reads every page of it before its baseline).
    File,
    /// Anonymous memory: bss, an allocation of ld.so or libc, the heap.
    Anon,
    /// A special mapping holding no page of the process (vvar, vdso).
    Special,
    /// Address space something mapped and unmapped again.
    Hole,
}

/// One piece of a process image.
#[derive(Clone, Copy, Debug)]
pub struct ImageSeg {
    pub len: u64,
    pub kind: SegKind,
    pub write: bool,
    /// Its pages resident when the testcase's loop starts, as ranges of
    /// page indices from its start (where they are decides what later
    /// faults find: read1's buffer spills into a bss page nothing touched).
    pub resident: &'static [Range<u32>],
    pub what: &'static str,
}

/// Every page of a piece `len` bytes long.
// A piece's resident pages are a list of page ranges, one range or several.
#[allow(clippy::single_range_in_vec_init)]
const fn all(len: u64) -> &'static [Range<u32>] {
    match len >> 12 {
        1 => &[0..1],
        2 => &[0..2],
        3 => &[0..3],
        4 => &[0..4],
        5 => &[0..5],
        0xa => &[0..0xa],
        0x26 => &[0..0x26],
        0x53 => &[0..0x53],
        0x156 => &[0..0x156],
        _ => panic!("add the length to all()"),
    }
}

const fn seg(len: u64, kind: SegKind, write: bool, resident: &'static [Range<u32>], what: &'static str) -> ImageSeg {
    ImageSeg { len, kind, write, resident, what }
}

impl ImageSeg {
    /// Bytes of it resident.
    pub fn resident_bytes(&self) -> u64 {
        self.resident.iter().map(|r| (r.end - r.start) as u64 * 4096).sum()
    }
}

/// A process's address space when its benchmark loop starts.
#[derive(Clone, Copy, Debug)]
pub struct ProcessImage {
    /// Where the (position-independent) binary is loaded.
    pub binary_base: u64,
    /// Bottom-up from `binary_base`: the binary's segments, its bss and,
    /// last, the brk heap.
    pub low: &'static [ImageSeg],
    /// The stack VMA, ending at `stack_top`.
    pub stack: ImageSeg,
    pub stack_top: u64,
    /// Top-down from the mmap base: the mmap area.
    pub mmap_area: &'static [ImageSeg],
    /// Where a testcase's static 4 KiB buffer lies (in the binary's data
    /// and bss): the user buffer of read1's read() calls.
    pub testcase_buf: u64,
}

use SegKind::{Anon, File, Hole, Special};

/// A will-it-scale task of validation/ (a harness binary, forked, set up,
/// parked before its loop), dynamically linked against glibc 2.36 (Debian
/// 12) on x86-64 with ASLR off: /proc/self/smaps and /proc/self/pagemap of
/// validation/bin/image_layout under `setarch -R` on the development host
/// (Linux 6.18), which prints every mapping and its resident pages as its
/// loop starts (the dump itself may touch a stack or heap page more).
/// Resident: the harness reads every page of the file mappings; the
/// anonymous pages are what exec, ld.so, libc's start-up and the harness
/// wrote (the bss page of the harness's globals, the first heap pages and
/// the one glibc's first malloc chunk reached, the stack's top pages and
/// those of main()'s deeper frames). The RELRO pages ld.so wrote before
/// making them read-only count as mapped file pages here (the same RSS;
/// their copy-on-write is not modelled).
#[allow(clippy::single_range_in_vec_init)]
pub const GLIBC_2_36_X86_64: ProcessImage = ProcessImage {
    // ELF_ET_DYN_BASE (2/3 of TASK_SIZE, page aligned) with ASLR off.
    binary_base: 0x5555_5555_4000,
    low: &[
        seg(0x2000, File, false, all(0x2000), "binary: ELF headers, .rodata of the first PT_LOAD"),
        seg(0x3000, File, false, all(0x3000), "binary: .text"),
        seg(0x1000, File, false, all(0x1000), "binary: .rodata, .eh_frame"),
        seg(0x1000, File, false, all(0x1000), "binary: RELRO"),
        seg(0x1000, File, true, all(0x1000), "binary: .data"),
        seg(0x19000, Anon, true, &[24..25], "binary: .bss (the harness's arrays; its globals in the last page)"),
        seg(0x21000, Anon, true, &[0..2, 8..9], "[heap]: the 132 KiB glibc's first malloc takes by brk"),
    ],
    // 132 KiB: exec's stack grown by the first touches of main().
    stack: seg(0x21000, Anon, true, &[16..19, 24..25, 31..33], "[stack]"),
    // STACK_TOP with ASLR off: one page below 2^47.
    stack_top: 0x7fff_ffff_f000,
    mmap_area: &[
        seg(0x2000, File, true, all(0x2000), "ld-linux-x86-64.so.2: .data, .bss"),
        seg(0x2000, File, false, all(0x2000), "ld-linux-x86-64.so.2: RELRO"),
        seg(0xa000, File, false, all(0xa000), "ld-linux-x86-64.so.2: .rodata"),
        seg(0x26000, File, false, all(0x26000), "ld-linux-x86-64.so.2: .text"),
        seg(0x1000, File, false, all(0x1000), "ld-linux-x86-64.so.2: ELF headers"),
        seg(0x8000, Special, false, &[], "[vvar], [vvar_vclock], [vdso]"),
        seg(0x2000, Anon, true, &[0..1], "ld.so's first anonymous allocation"),
        seg(0x1000, File, true, all(0x1000), "the harness's shared counter page (MAP_SHARED, before fork)"),
        seg(0x8000, Hole, false, &[], "a hole ld.so leaves (a temporary mapping, unmapped)"),
        seg(0xd000, Anon, true, &[0..1, 4..7, 12..13], "libc.so.6: .bss"),
        seg(0x2000, File, true, all(0x2000), "libc.so.6: .data"),
        seg(0x4000, File, false, all(0x4000), "libc.so.6: RELRO"),
        seg(0x53000, File, false, all(0x53000), "libc.so.6: .rodata"),
        seg(0x156000, File, false, all(0x156000), "libc.so.6: .text"),
        seg(0x26000, File, false, all(0x26000), "libc.so.6: ELF headers, .rodata"),
        seg(0x3000, Anon, true, &[0..2], "the static TLS block and DTV ld.so allocates"),
    ],
    // read1's `static char buf[4096]` (validation/read1.c): `nm
    // validation/bin/read1` puts it 0x200 into the page of .data, so that
    // it spills into the first page of the bss, which nothing touched
    // before the loop: the first read() faults it in.
    testcase_buf: 0x5555_5555_b200,
};

impl ProcessImage {
    /// Bytes of the stand-in file the image's file mappings map: each
    /// mapping at its own offset, a page apart, so that no two merge (the
    /// real ones are separate VMAs: different files, offsets or flags).
    pub fn file_bytes(&self) -> u64 {
        self.all(super::vma::MMAP_BASE).map(|(_, s)| s.len + 4096).sum()
    }

    /// Every mapped piece with its start address, the mmap area's pieces
    /// below `mmap_base`.
    pub fn all(&self, mmap_base: u64) -> impl Iterator<Item = (u64, &ImageSeg)> + '_ {
        let low = self.low.iter().scan(self.binary_base, |a, s| {
            let at = *a;
            *a += s.len;
            Some((at, s))
        });
        let stack = std::iter::once((self.stack_top - self.stack.len, &self.stack));
        let high = self.mmap_area.iter().scan(mmap_base, |top, s| {
            *top = top.saturating_sub(s.len);
            Some((*top, s))
        });
        low.chain(stack).chain(high).filter(|(_, s)| s.kind != Hole)
    }

    /// Every mapped piece as JSON, for `foliosim calibrate` to set against
    /// validation/image_layout.c on a host, with ASLR off (the mmap area
    /// below MMAP_BASE) as it runs there: [{"start", "len", "kind",
    /// "write", "resident": [[first, end), ...], "what"}].
    pub fn to_json(&self) -> serde_json::Value {
        let pieces: Vec<serde_json::Value> = self
            .all(super::vma::MMAP_BASE)
            .map(|(start, s)| {
                serde_json::json!({
                    "start": start,
                    "len": s.len,
                    "kind": format!("{:?}", s.kind).to_lowercase(),
                    "write": s.write,
                    "resident": s.resident.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>(),
                    "what": s.what,
                })
            })
            .collect();
        serde_json::Value::Array(pieces)
    }
}

impl Kernel {
    /// Give `mm` the mappings of process image `img` (setup, no simulated
    /// time), untouched. Everything in the mmap area is a private mapping
    /// of `file` (anonymous pieces too), so that none merges with a
    /// program's anonymous mapping next to it (the real ones do not either:
    /// in a forked child their anon_vma chain is not singular). The heap is
    /// the brk VMA and the stack grows down.
    pub fn map_process_image(&mut self, mm: u32, file: crate::workload::FileId, img: &ProcessImage) -> Result<(), Error> {
        let ino = file + 1;
        let base = self.mms[mm as usize].mmap_base;
        let mut off = 0;
        let last_low = img.binary_base + img.low.iter().map(|s| s.len).sum::<u64>();
        let heap = img.low.last().map(|s| last_low - s.len);
        for (start, s) in img.all(base) {
            let end = start + s.len;
            if s.len == 0
                || !s.len.is_multiple_of(4096)
                || start < super::vma::MMAP_MIN_ADDR
                || s.resident.iter().any(|r| r.end as u64 * 4096 > s.len)
            {
                return Err(Error::Internal(format!(
                    "process image: {}: bad length {:#x} or resident pages {:?}",
                    s.what, s.len, s.resident
                )));
            }
            if !self.mms[mm as usize].range_free(start, end) {
                return Err(Error::Workload(format!("process image: {} at {start:#x} overlaps a mapping", s.what)));
            }
            let in_mmap_area = start >= last_low && start < img.stack_top - img.stack.len;
            let anon = s.kind == Anon && !in_mmap_area;
            let mut flags = vm::READ;
            if s.write {
                flags |= vm::WRITE | vm::MAYWRITE;
            }
            if Some(start) == heap {
                flags |= vm::BRK;
            }
            if start == img.stack_top - img.stack.len {
                flags |= vm::GROWSDOWN;
            }
            let v = Vma {
                start,
                end,
                flags,
                file: if anon { 0 } else { ino },
                pgoff: if anon { start >> 12 } else { off >> 12 },
                anon_vma: 0,
                seq: 0,
                vm_lock: Default::default(),
            };
            off += s.len + 4096;
            self.mms[mm as usize].insert_vma(v);
        }
        let m = &mut self.mms[mm as usize];
        if let Some(h) = heap {
            m.brk_start = h;
            m.brk = last_low;
        }
        Ok(())
    }

    /// Task `tid` touches what its image says is resident (a store to a
    /// writable page, a load otherwise), through the fault path: the
    /// start-up a real process goes through before its loop, so that its
    /// RSS, page tables and page cache hold them. It takes the task's
    /// simulated time, before its first op.
    pub fn touch_process_image(&mut self, tid: u32, img: &ProcessImage) -> Result<(), Error> {
        let base = self.mms[self.tasks[tid as usize].mm as usize].mmap_base;
        for (start, s) in img.all(base) {
            let kind = if s.write { Access::Store } else { Access::Load };
            for a in s.resident.iter().flat_map(|r| r.clone()).map(|i| start + i as u64 * 4096) {
                if let Ret::Err(e) = self.user_access(tid, a, kind) {
                    let what = format!("process image: {}: touching {a:#x} failed (errno {e})", s.what);
                    return Err(if e == errno::ENOMEM { Error::OutOfMemory(what) } else { Error::Internal(what) });
                }
            }
        }
        Ok(())
    }
}
