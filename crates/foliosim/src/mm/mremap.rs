//! mremap(2) (mm/mremap.c): shrink, grow in place, or move the VMA and its
//! PTEs to a new range.

use super::mmu_gather::MmuGather;
use super::pgtable::{pte_index, Pte};
use super::vma::Vma;
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::workload::{errno, Ret};

impl Kernel {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_mremap(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, old_len: u64, new_len: u64, may_move: bool) -> (Ret, Ns) {
        let old_len = old_len.div_ceil(4096) * 4096;
        let new_len = new_len.div_ceil(4096) * 4096;
        if !addr.is_multiple_of(4096) || new_len == 0 {
            return (Ret::Err(errno::EINVAL), t);
        }
        let Some(v) = self.mms[mm as usize].vma_lookup(addr).cloned() else { return (Ret::Err(errno::EFAULT), t) };
        if addr + old_len > v.end {
            return (Ret::Err(errno::EFAULT), t);
        }
        if new_len <= old_len {
            let (r, t) = if new_len < old_len { self.do_munmap(t, cpu, mm, addr + new_len, old_len - new_len) } else { (Ret::Val(0), t) };
            return (if r.is_err() { r } else { Ret::Val(addr as i64) }, t);
        }
        let _lc = self.lc;
        let t = self.mmap_write_lock(t, cpu, mm);
        let mut t = t + self.c.mprotect;
        // Grow in place when the VMA ends at addr+old_len and the space after is free.
        if addr + old_len == v.end && self.mms[mm as usize].range_free(v.end, addr + new_len) {
            let t = self.vma_start_write_range(t, cpu, mm, v.start, v.end);
            let m = &mut self.mms[mm as usize];
            let vv = m.vmas.get_mut(&v.start).unwrap();
            vv.end = addr + new_len;
            m.vma_mark_modified(v.start);
            let t = self.mmap_write_unlock(t, cpu, mm);
            return (Ret::Val(addr as i64), t);
        }
        if !may_move {
            let t = self.mmap_write_unlock(t, cpu, mm);
            return (Ret::Err(errno::ENOMEM), t);
        }
        // move_vma: new range, move the PTEs, flush the old range.
        let Some(new) = self.mms[mm as usize].get_unmapped_area(new_len, 4096) else {
            let t = self.mmap_write_unlock(t, cpu, mm);
            return (Ret::Err(errno::ENOMEM), t);
        };
        // move_vma: the source is write-locked; the destination is new and
        // marked before it becomes visible (copy_vma).
        t = self.vma_start_write_range(t, cpu, mm, addr, addr + old_len);
        self.mms[mm as usize].log_unmap(addr, addr + old_len);
        let m = &mut self.mms[mm as usize];
        let splits = m.split_at(addr) as u32 + m.split_at(addr + old_len) as u32;
        t += self.c.vma_split * splits as Ns;
        let old = m.vmas.remove(&addr).unwrap();
        let (seq, cyc) = (m.fresh_seq(), m.mm_lock_seq);
        let mut moved = Vma { start: new, end: new + new_len, pgoff: old.pgoff, seq, vm_lock: Default::default(), ..old.clone() };
        moved.vm_lock.lock_seq = cyc;
        m.log_marked(new, new + new_len);
        t += m.mmu_notifier_invalidate(addr, addr + old_len, t);
        let mut entries = Vec::new();
        let mut va = addr;
        while va < addr + old_len {
            if let Some(tbl) = m.pt.table_mut(va) {
                let slot = &mut tbl.ptes[pte_index(va)];
                if slot.present() || slot.is_swap() {
                    entries.push((va - addr, *slot));
                    *slot = Pte::NONE;
                    tbl.nr_present -= 1;
                }
            }
            va += 4096;
        }
        m.vmas.insert(new, moved);
        for (off, pte) in entries {
            match self.pte_alloc_for_move(t, cpu, mm, new + off) {
                Some(t1) => t = t1,
                None => break,
            }
            let tbl = self.mms[mm as usize].pt.table_mut(new + off).unwrap();
            tbl.ptes[pte_index(new + off)] = pte.without(Pte::HUGE); // moved PTE by PTE: no PMD mapping
            tbl.nr_present += 1;
            t += self.c.pte_set;
        }
        t = self.flush_tlb_mm_range(t, cpu, mm, addr, addr + old_len, false);
        // Three walks of the old range step over its empty entries, as an
        // munmap's two do: move_page_tables', then the old range's unmap
        // (unmap_vmas' and free_pgtables').
        t += self.c.pgtable_none * 3 * self.mms[mm as usize].pt.none_entries(addr, addr + old_len);
        let mut tlb = MmuGather::new(mm, false);
        self.free_pgtables(mm, addr, addr + old_len, &mut tlb);
        t = self.tlb_finish_mmu(t, cpu, tlb);
        let t = self.mmap_write_unlock(t, cpu, mm);
        (Ret::Val(new as i64), t)
    }

    fn pte_alloc_for_move(&mut self, t: Ns, cpu: u32, mm: u32, va: u64) -> Option<Ns> {
        // Reuse the fault path's table allocation.
        let (a, b, c) = self.mms[mm as usize].pt.missing(va);
        if !(a || b || c) {
            return Some(t);
        }
        self.pte_alloc_pub(t, cpu, mm, va)
    }
}
