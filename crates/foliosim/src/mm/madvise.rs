//! madvise(2) (mm/madvise.c): MADV_DONTNEED/FREE zap under the read lock,
//! MADV_HUGEPAGE/NOHUGEPAGE change the VMA flags under the write lock.

use super::mmu_gather::MmuGather;
use super::vma::vm;
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::workload::{errno, Advice, Ret};

impl Kernel {
    pub(crate) fn do_madvise(&mut self, t: Ns, cpu: u32, mm: u32, addr: u64, len: u64, advice: Advice) -> (Ret, Ns) {
        if !addr.is_multiple_of(4096) {
            return (Ret::Err(errno::EINVAL), t);
        }
        let end = addr + len.div_ceil(4096) * 4096;
        let lc = self.lc;
        match advice {
            Advice::DontNeed | Advice::Free => {
                // MADV_DONTNEED zaps under mmap_lock for read; without swap,
                // MADV_FREE behaves like DONTNEED here (no lazyfree reclaim yet).
                let t = self.mms[mm as usize].mmap_lock.down_read(t, cpu, &lc, &self.sc);
                let mut t = t + self.c.madvise;
                let ranges: Vec<(u64, u64)> = self.mms[mm as usize]
                    .vmas
                    .values()
                    .filter(|v| v.end > addr && v.start < end)
                    .map(|v| (v.start.max(addr), v.end.min(end)))
                    .collect();
                if ranges.iter().map(|r| r.1 - r.0).sum::<u64>() != end - addr {
                    let t = self.mms[mm as usize].mmap_lock.up_read(t, cpu, &lc);
                    return (Ret::Err(errno::ENOMEM), t);
                }
                t = self.lru_add_drain_cpu(t, cpu);
                // SPF: unmap_page_range opens each zapped VMA's vm_sequence
                // section (a new value; no write cycle under the read lock).
                for &(s, _) in &ranges {
                    let m = &mut self.mms[mm as usize];
                    if let Some(k) = m.vma_lookup(s).map(|v| v.start) {
                        let seq = m.fresh_seq();
                        m.vmas.get_mut(&k).unwrap().seq = seq;
                        m.seq_bumps_read_side += 1;
                    }
                }
                let mut tlb = MmuGather::new(mm, false);
                for (s, e) in ranges {
                    t = self.zap_page_range(t, cpu, mm, s, e, &mut tlb);
                }
                t = self.tlb_finish_mmu(t, cpu, tlb);
                let t = self.mms[mm as usize].mmap_lock.up_read(t, cpu, &lc);
                (Ret::Val(0), t)
            }
            Advice::HugePage | Advice::NoHugePage => {
                let t = self.mmap_write_lock(t, cpu, mm);
                let t = self.vma_start_write_range(t, cpu, mm, addr, end);
                let m = &mut self.mms[mm as usize];
                let splits = m.split_at(addr) as u32 + m.split_at(end) as u32;
                for v in m.vmas.range_mut(addr..end).map(|(_, v)| v) {
                    if advice == Advice::HugePage {
                        v.flags = (v.flags | vm::HUGEPAGE) & !vm::NOHUGEPAGE;
                    } else {
                        v.flags = (v.flags | vm::NOHUGEPAGE) & !vm::HUGEPAGE;
                    }
                }
                let keys: Vec<u64> = m.vmas.range(addr..end).map(|(&k, _)| k).collect();
                for k in keys {
                    m.vma_mark_modified(k);
                }
                let t = t + self.c.madvise + self.c.vma_split * splits as Ns;
                let t = self.mmap_write_unlock(t, cpu, mm);
                (Ret::Val(0), t)
            }
            Advice::WillNeed | Advice::Cold | Advice::PageOut => (Ret::Val(0), t + self.c.madvise),
        }
    }
}
