//! The mapping system calls of mm/mmap.c: mmap, munmap, brk. The VMA tree
//! they change, and the mm_struct holding it, are mm/vma.rs.

use super::mmu_gather::MmuGather;
use super::vma::{vm, Vma};
use super::vmstat::Stat;
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::workload::{errno, map, prot, Access, Ret};

impl Kernel {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_mmap(
        &mut self,
        t: Ns,
        cpu: u32,
        mm: u32,
        addr: u64,
        len: u64,
        prot_: u32,
        flags: u32,
        fd: i32,
        off: u64,
    ) -> (Ret, Ns) {
        if len == 0 || !off.is_multiple_of(4096) || (flags & (map::SHARED | map::PRIVATE)) == 0 {
            return (Ret::Err(errno::EINVAL), t);
        }
        let len = len.div_ceil(4096) * 4096;
        // LUF v10: a writable mapping gives up every deferral.
        let t = if prot_ & prot::WRITE != 0 && self.luf_hooks_on() {
            self.luf_flush(t, cpu, self.cpus[cpu as usize].curr, crate::mm::luf::ForcedBy::MmapWrite)
        } else {
            t
        };
        let file = if flags & map::ANONYMOUS != 0 {
            0
        } else {
            match self.mms[mm as usize].fd(fd) {
                Some(f) => f.inode + 1,
                None => return (Ret::Err(errno::EBADF), t),
            }
        };
        let t = self.mmap_write_lock(t, cpu, mm);
        let mut t = t + self.c.mmap;
        let start = if flags & map::FIXED != 0 {
            if !addr.is_multiple_of(4096) {
                let t = self.mmap_write_unlock(t, cpu, mm);
                return (Ret::Err(errno::EINVAL), t);
            }
            addr
        } else if let Some(hint) = self.mms[mm as usize].hint_fits(addr, len) {
            // A hint whose range is free is taken as it is, THP alignment
            // or not (generic_get_unmapped_area_topdown's first check;
            // __thp_get_unmapped_area returns such a hint unaligned).
            hint
        } else {
            // Unhinted maps as the policy places them; THP alignment is for
            // private anonymous ones (a shared one is shmem's, not aligned
            // with shmem_enabled = never).
            let place = if addr == 0 {
                self.anon_policy.mmap_align(len, file == 0 && flags & map::SHARED == 0, &self.knobs)
            } else {
                crate::mm::vma::Placement::Page
            };
            match self.mms[mm as usize].place(len, place) {
                Some(a) => a,
                None => {
                    let t = self.mmap_write_unlock(t, cpu, mm);
                    return (Ret::Err(errno::ENOMEM), t);
                }
            }
        };
        if flags & map::FIXED != 0 && !self.mms[mm as usize].range_free(start, start + len) {
            // MAP_FIXED replaces what was there.
            t = self.unmap_region_locked(t, cpu, mm, start, start + len);
        }
        let mut vflags = 0;
        if prot_ & prot::READ != 0 {
            vflags |= vm::READ;
        }
        if prot_ & prot::WRITE != 0 {
            vflags |= vm::WRITE | vm::MAYWRITE;
        }
        if prot_ & prot::EXEC != 0 {
            vflags |= vm::EXEC;
        }
        if flags & map::SHARED != 0 {
            vflags |= vm::SHARED;
        }
        let pgoff = if file == 0 { start >> 12 } else { off >> 12 };
        let vma = Vma { start, end: start + len, flags: vflags, file, pgoff, anon_vma: 0, seq: 0, vm_lock: Default::default() };
        // vma_merge_new_range write-locks the neighbours it may extend.
        t = self.vma_start_write_range(t, cpu, mm, start, start + len);
        let merged = self.mms[mm as usize].insert_vma(vma);
        if merged > 0 {
            self.stat.add(Stat::VmaMerge, merged as i64);
            t += self.c.vma_merge * merged as Ns;
        }
        self.stat.inc(Stat::Mmap);
        let mut t = self.mmap_write_unlock(t, cpu, mm);
        if flags & map::POPULATE != 0 {
            let kind = if prot_ & prot::WRITE != 0 { Access::Store } else { Access::Load };
            let mut a = start;
            self.fault_kernel_mode = true;
            while a < start + len {
                let tid = self.tasks.iter().position(|x| x.mm == mm && x.cpu == cpu && !x.exited).unwrap_or(0) as u32;
                self.tasks[tid as usize].clock = t;
                self.user_access(tid, a, kind);
                t = self.tasks[tid as usize].clock;
                a += 4096;
            }
            self.fault_kernel_mode = false;
        }
        (Ret::Val(start as i64), t)
    }

    /// Detach and zap [start, end) with mmap_lock already held for write.
    fn unmap_region_locked(&mut self, t: Ns, cpu: u32, mm: u32, start: u64, end: u64) -> Ns {
        let (gone, t) = self.detach_vmas_locked(t, cpu, mm, start, end);
        self.zap_detached(t, cpu, mm, &gone)
    }

    /// The part of an unmap that needs mmap_lock for write: write-lock the
    /// VMAs in [start, end), split at its ends and detach them.
    fn detach_vmas_locked(&mut self, t: Ns, cpu: u32, mm: u32, start: u64, end: u64) -> (Vec<Vma>, Ns) {
        let t = self.vma_start_write_range(t, cpu, mm, start, end);
        self.mms[mm as usize].log_unmap(start, end);
        let (gone, splits) = self.mms[mm as usize].detach_range(start, end);
        self.stat.add(Stat::VmaSplit, splits as i64);
        (gone, t + self.c.vma_split * splits as Ns)
    }

    /// The part that a read hold suffices for: zap the detached VMAs, free
    /// their page tables and flush.
    fn zap_detached(&mut self, t: Ns, cpu: u32, mm: u32, gone: &[Vma]) -> Ns {
        let mut t = self.lru_add_drain_cpu(t, cpu);
        let mut tlb = MmuGather::new(mm, false);
        for v in gone {
            t = self.zap_page_range(t, cpu, mm, v.start, v.end, &mut tlb);
        }
        t += self.unlink_vmas(mm, gone);
        t += self.free_pgtables_walk(&tlb);
        if let (Some(f), Some(l)) = (gone.first(), gone.last()) {
            self.free_pgtables(mm, f.start, l.end, &mut tlb);
        }
        self.tlb_finish_mmu(t, cpu, tlb)
    }

    pub(crate) fn do_munmap(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, len: u64) -> (Ret, Ns) {
        if !addr.is_multiple_of(4096) || len == 0 {
            return (Ret::Err(errno::EINVAL), t);
        }
        let end = addr + len.div_ceil(4096) * 4096;
        self.stat.inc(Stat::Munmap);
        // Detach under the write lock, then downgrade for the zap, the
        // page-table free and the shootdown (since 4.20).
        let lc = self.lc;
        let t = self.mmap_write_lock(t, cpu, mm);
        let (gone, t) = self.detach_vmas_locked(t, cpu, mm, addr, end);
        let t = self.mmap_write_downgrade(t + self.c.munmap, cpu, mm);
        let t = self.zap_detached(t, cpu, mm, &gone);
        let t = self.mms[mm as usize].mmap_lock.up_read(t, cpu, &lc);
        (Ret::Val(0), t)
    }

    pub(crate) fn do_brk(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64) -> (Ret, Ns) {
        let cur = self.mms[mm as usize].brk;
        let start = self.mms[mm as usize].brk_start;
        if addr == 0 || addr < start {
            return (Ret::Val(cur as i64), t);
        }
        let _lc = self.lc;
        let new_end = addr.div_ceil(4096) * 4096;
        let old_end = cur.div_ceil(4096) * 4096;
        let t = self.mmap_write_lock(t, cpu, mm);
        let mut t = t + self.c.brk;
        if new_end > old_end {
            if !self.mms[mm as usize].range_free(old_end, new_end) {
                let t = self.mmap_write_unlock(t, cpu, mm);
                return (Ret::Val(cur as i64), t);
            }
            let v = Vma {
                start: old_end,
                end: new_end,
                flags: vm::READ | vm::WRITE | vm::MAYWRITE | vm::BRK,
                file: 0,
                pgoff: old_end >> 12,
                anon_vma: 0,
                seq: 0,
                vm_lock: Default::default(),
            };
            t = self.vma_start_write_range(t, cpu, mm, old_end, new_end);
            self.mms[mm as usize].insert_vma(v);
        } else if new_end < old_end {
            t = self.unmap_region_locked(t, cpu, mm, new_end, old_end);
        }
        self.mms[mm as usize].brk = addr;
        let t = self.mmap_write_unlock(t, cpu, mm);
        (Ret::Val(addr as i64), t)
    }
}
