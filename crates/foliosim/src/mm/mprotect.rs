//! mprotect(2) (mm/mprotect.c): new VMA permissions, the PTEs rewritten to
//! match, and the flush when access was taken away.

use super::pgtable::{pte_index, Pte};
use super::vma::vm;
use super::vmstat::Stat;
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::workload::{errno, prot, Ret};

impl Kernel {
    pub(crate) fn do_mprotect(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, len: u64, prot_: u32) -> (Ret, Ns) {
        if !addr.is_multiple_of(4096) {
            return (Ret::Err(errno::EINVAL), t);
        }
        let end = addr + len.div_ceil(4096) * 4096;
        let _lc = self.lc;
        let t = self.mmap_write_lock(t, cpu, mm);
        let mut t = t + self.c.mprotect;
        // Every page of the range must be mapped.
        let covered: u64 =
            self.mms[mm as usize].vmas.values().filter(|v| v.end > addr && v.start < end).map(|v| v.end.min(end) - v.start.max(addr)).sum();
        if covered != end - addr {
            let t = self.mmap_write_unlock(t, cpu, mm);
            return (Ret::Err(errno::ENOMEM), t);
        }
        // mprotect_fixup: vma_start_write on each VMA it splits or changes.
        t = self.vma_start_write_range(t, cpu, mm, addr, end);
        let m = &mut self.mms[mm as usize];
        let splits = m.split_at(addr) as u32 + m.split_at(end) as u32;
        self.stat.add(Stat::VmaSplit, splits as i64);
        t += self.c.vma_split * splits as Ns;
        let keys: Vec<u64> = m.vmas.range(addr..end).map(|(&k, _)| k).collect();
        let mut tighten = false;
        for &k in &keys {
            let v = m.vmas.get_mut(&k).unwrap();
            let mut f = v.flags & !(vm::READ | vm::WRITE | vm::EXEC);
            if prot_ & prot::READ != 0 {
                f |= vm::READ;
            }
            if prot_ & prot::WRITE != 0 {
                f |= vm::WRITE | vm::MAYWRITE;
            }
            if prot_ & prot::EXEC != 0 {
                f |= vm::EXEC;
            }
            if v.flags & !f & (vm::WRITE | vm::READ | vm::EXEC) != 0 {
                tighten = true;
            }
            v.flags = f;
        }
        for &k in &keys {
            m.vma_mark_modified(k);
        }
        // A PMD-mapped THP only partly covered is split first (split_huge_pmd).
        if !addr.is_multiple_of(1 << 21) {
            self.split_huge_pmd_at(mm, addr);
        }
        if !end.is_multiple_of(1 << 21) {
            self.split_huge_pmd_at(mm, end - 1);
        }
        // change_protection: removing write (or all) access rewrites PTEs and flushes.
        // The exec bit follows the new protection either way (x86 NX comes
        // from vm_page_prot), or instruction fetches would fault forever.
        let want_x = prot_ & prot::EXEC != 0;
        // change_pte_range: reclaim's batched unmaps in this mm are flushed
        // first; a secondary MMU drops the range (change_protection).
        t = self.flush_tlb_batched_pending(t, cpu, mm);
        t += self.mms[mm as usize].mmu_notifier_invalidate(addr, end, t);
        {
            let mut va = addr;
            while va < end {
                if let Some(tbl) = self.mms[mm as usize].pt.table_mut(va) {
                    let slot = &mut tbl.ptes[pte_index(va)];
                    if slot.present() && slot.exec() != want_x {
                        *slot = if want_x { slot.with(Pte::EXEC) } else { slot.without(Pte::EXEC) };
                        t += self.c.pte_set;
                        tighten |= !want_x;
                    }
                }
                va += 4096;
            }
        }
        if tighten {
            let mut changed = false;
            let mut va = addr;
            while va < end {
                if let Some(tbl) = self.mms[mm as usize].pt.table_mut(va) {
                    let slot = &mut tbl.ptes[pte_index(va)];
                    if slot.present() && (slot.write() || prot_ & prot::READ == 0 || !want_x) {
                        *slot = if prot_ & prot::WRITE == 0 { slot.without(Pte::WRITE) } else { *slot };
                        changed = true;
                        t += self.c.pte_set;
                    }
                }
                va += 4096;
            }
            if prot_ == prot::NONE {
                // PROT_NONE: zap-like removal is modelled as write-protect plus
                // VMA permission; accesses fault on the VMA check.
            }
            if changed {
                t = self.flush_tlb_mm_range(t, cpu, mm, addr, end, false);
            }
        }
        // vma_modify_flags: the changed VMA merges with its neighbours
        // when their flags match again (mprotect back to what they have).
        for k in keys {
            let merged = self.mms[mm as usize].merge_around(k);
            self.stat.add(Stat::VmaMerge, merged as i64);
            t += self.c.vma_merge * merged as Ns;
        }
        let t = self.mmap_write_unlock(t, cpu, mm);
        (Ret::Val(0), t)
    }
}
