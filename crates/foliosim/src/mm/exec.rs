//! execve (fs/exec.c, fs/binfmt_elf.c): a task drops its mm (the fork
//! copy, torn down here when it was the last user: exec_mmap -> mmput) and
//! gets a fresh one holding the binary's PT_LOAD segments, a brk heap after
//! bss and a stack whose top page the kernel writes (copy_strings).
//!
//! The segments are file-backed VMAs of the binary's inode, so every
//! process exec'ing the same binary maps the same page-cache folios: text
//! faults are do_read_fault with fault-around, data writes do_cow_fault.

use super::mmap::{vm, Vma, TASK_SIZE};
use super::vmstat::{Entry, Stat};
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::workload::{errno, Access, FileId, Ret};

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
    pub fn do_execve(&mut self, tid: u32, file: FileId, elf: ElfLayout) -> Ret {
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
            tk.entry_ns[Entry::Execve as usize] += t - t0;
            tk.sys_ns += t - t0;
            tk.clock = t;
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
            if v.file != 0 {
                self.inodes[file as usize].i_mmap += 1;
            }
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
        if r.is_err() {
            return r;
        }
        Ret::Val(STACK_TOP as i64)
    }

    fn execve_fail(&mut self, tid: u32, t0: Ns, t: Ns) -> Ret {
        let tk = &mut self.tasks[tid as usize];
        tk.entry_ns[Entry::Execve as usize] += t - t0;
        tk.sys_ns += t - t0;
        tk.clock = t;
        Ret::Err(errno::ENOMEM)
    }
}

/// One piece of a process image in the mmap area, top-down from the mmap
/// base: a mapping, or a hole something unmapped again.
#[derive(Clone, Copy, Debug)]
pub struct ImageSeg {
    pub len: u64,
    pub map: bool,
    pub what: &'static str,
}

/// What a dynamically linked program has in its mmap area when main()
/// starts, top-down from the mmap base, as exec and ld.so leave it on
/// x86-64 with glibc 2.36 (Debian 12) and ASLR off: /proc/PID/maps of
/// validation/bin/tlb_flush2 under `setarch -R` on the development host
/// (Linux 6.18). Its binary, heap and stack lie outside the mmap area and do
/// not change where an mmap lands.
pub const GLIBC_2_36_X86_64: &[ImageSeg] = &[
    ImageSeg { len: 0x35000, map: true, what: "ld-linux-x86-64.so.2 (mapped by exec, load_elf_interp)" },
    ImageSeg { len: 0x8000, map: true, what: "[vvar], [vvar_vclock], [vdso]" },
    ImageSeg { len: 0x2000, map: true, what: "ld.so's first anonymous allocation" },
    ImageSeg { len: 0x1000, map: true, what: "the harness's shared counter page (MAP_SHARED, before fork)" },
    ImageSeg { len: 0x8000, map: false, what: "a hole ld.so leaves (a temporary mapping, unmapped)" },
    ImageSeg { len: 0x1e2000, map: true, what: "libc.so.6: its five segments and its bss" },
    ImageSeg { len: 0x3000, map: true, what: "the static TLS block and DTV ld.so allocates" },
];

impl Kernel {
    /// Give `mm` the mappings of process image `segs` in its mmap area
    /// (setup: no simulated time), each a private mapping of `file`, never
    /// touched: they take address space, not memory. File mappings, so that
    /// none merges with a program's anonymous mapping next to it (the real
    /// ones do not either: in a forked child their anon_vma chain is not
    /// singular).
    pub fn map_process_image(&mut self, mm: u32, file: crate::workload::FileId, segs: &[ImageSeg]) -> Result<(), String> {
        let ino = file + 1;
        let mut top = super::mmap::MMAP_BASE;
        let mut off = 0;
        for s in segs {
            if s.len == 0 || !s.len.is_multiple_of(4096) || s.len > top - super::mmap::MMAP_MIN_ADDR {
                return Err(format!("process image: {}: bad length {:#x}", s.what, s.len));
            }
            top -= s.len;
            if !s.map {
                continue;
            }
            if !self.mms[mm as usize].range_free(top, top + s.len) {
                return Err(format!("process image: {} at {top:#x} overlaps a mapping", s.what));
            }
            let v = Vma {
                start: top,
                end: top + s.len,
                flags: vm::READ,
                file: ino,
                pgoff: off >> 12,
                anon_vma: 0,
                seq: 0,
                vm_lock: Default::default(),
            };
            off += s.len;
            self.inodes[file as usize].i_mmap += 1;
            self.mms[mm as usize].insert_vma(v);
        }
        Ok(())
    }
}
