//! x86 TLB management (arch/x86/mm/tlb.c): loading an mm's ASID on a CPU
//! (switch_mm_irqs_off), ranged and full flushes with shootdown IPIs to
//! the CPUs in mm_cpumask (flush_tlb_mm_range), the batched flush of the
//! reclaim and migration unmaps (arch_tlbbatch_flush), and the IPI
//! handlers' flushes landing on their CPUs. The per-CPU ASID state is in
//! arch/x86/tlbflush.rs.

use crate::kernel::knobs::Mutant;
use crate::kernel::trace::TlbFlushReason;
use crate::kernel::Kernel;
use crate::mm::vmstat::Stat;
use crate::sim::Ns;

impl Kernel {
    /// switch_mm_irqs_off: load `mm` on `cpu` before its next TLB use.
    /// Cheap when `mm` is already loaded (the caller checks that first).
    #[cold]
    pub fn switch_mm_irqs_off(&mut self, cpu: u32, mm: u32) {
        let Some(prev) = self.cpus[cpu as usize].tlbstate.switch_mm(mm) else {
            return;
        };
        self.stat.inc(Stat::AsidReuse);
        if self.knobs.mutant == Mutant::AsidNoFlushOnReuse {
            // The slot keeps its entries: they now translate for `mm`.
            self.cpus[cpu as usize].tlb.retag_asid(prev, mm);
            if self.check.enabled {
                self.check.retag_stale(cpu, prev, mm);
            }
            return;
        }
        // Loading CR3 without NOFLUSH for the new owner drops the slot.
        self.cpus[cpu as usize].tlb.flush_asid(prev);
    }

    /// flush_tlb_mm_range: flush [start, end) of `mm` on every CPU that may
    /// cache it. Ranged up to the flush ceiling, full beyond. Returns when
    /// the initiator has all acknowledgements.
    pub fn flush_tlb_mm_range(&mut self, t: Ns, cpu: u32, mm: u32, start: u64, end: u64, freed_tables: bool) -> Ns {
        if !self.mms[mm as usize].alive {
            // exit_mmap: every CPU is lazy on the dying mm (fork.rs).
            return t;
        }
        let pages = (end - start) / 4096;
        let full = pages > self.c.flush_ceiling;
        let mut t = t;
        let asid = mm;
        // Local flush, if this CPU runs the mm.
        let targets: Vec<u32> = self.mms[mm as usize].cpumask_iter().collect();
        if targets.contains(&cpu) {
            self.stat.inc(Stat::TlbFlushEvents);
            if full {
                self.cpus[cpu as usize].tlb.flush_asid(asid);
                self.mm_caught_up(mm, cpu);
                self.stat.inc(Stat::NrTlbLocalFlushAll);
                self.trace.tlb_flush(t, cpu, TlbFlushReason::LocalMmShootdown, None);
                t += self.c.flush_all;
            } else {
                self.cpus[cpu as usize].tlb.flush_range(asid, start, end);
                self.stat.add(Stat::NrTlbLocalFlushOne, pages as i64);
                self.trace.tlb_flush(t, cpu, TlbFlushReason::LocalMmShootdown, Some(pages));
                t += self.c.flush_one * pages;
            }
        }
        if self.knobs.mutant == Mutant::SkipShootdown {
            return t;
        }
        let remote: Vec<u32> = targets.into_iter().filter(|&c| c != cpu).collect();
        let _ = freed_tables; // lazy-TLB CPUs are not modelled: every mm_cpumask CPU is a target
        if remote.is_empty() {
            return t;
        }
        self.stat.inc(Stat::NrTlbRemoteFlush);
        self.stat.add(Stat::NrTlbRemoteFlushReceived, remote.len() as i64);
        self.stat.add(Stat::TlbFlushEvents, remote.len() as i64);
        let recv = self.c.ipi_recv + if full { self.c.flush_all } else { self.c.flush_one * pages };
        for (i, &c) in remote.iter().enumerate() {
            self.trace.tlb_flush(t + self.c.ipi_send * (i as Ns + 1), c, TlbFlushReason::RemoteShootdown, (!full).then_some(pages));
            let tlb = &mut self.cpus[c as usize].tlb;
            if full {
                tlb.flush_asid(asid);
                self.mm_caught_up(mm, c);
            } else {
                tlb.flush_range(asid, start, end);
            }
            self.cpus[c as usize].irq_debt += recv;
        }
        t + self.c.ipi_send * remote.len() as Ns + self.c.ipi_ack
    }

    /// arch_tlbbatch_flush (x86): one IPI round to every CPU of the batch.
    /// A target drops, in full, the entries of each address space whose
    /// TLB generation moved since it last caught up (its loaded mm at once,
    /// the others when it switches back to them: the same entries). The
    /// remote handlers run as the IPIs arrive, so their flushes land over
    /// [t, end) in simulated time; the initiator returns at `end`, when
    /// every acknowledgement is back.
    pub fn arch_tlbbatch_flush(&mut self, t: Ns, cpu: u32, b: &crate::mm::mm_types_task::TlbBatch) -> Ns {
        self.stat.inc(Stat::TlbBatchedFlush);
        let targets: Vec<u32> = b.cpus_iter().collect();
        let mut t_local = t;
        let mut sent = 0u64;
        let recv = self.c.ipi_recv + self.c.flush_all;
        for &c in &targets {
            // Address spaces this CPU must catch up with.
            let stale: Vec<u32> = self
                .mms
                .iter()
                .filter(|m| {
                    m.alive
                        && m.cpu_tlb_gen.len() > c as usize
                        && m.cpu_tlb_gen[c as usize] < m.tlb_gen
                        && m.cpumask.get((c / 64) as usize).is_some_and(|w| w & (1 << (c % 64)) != 0)
                })
                .map(|m| m.id)
                .collect();
            for &m in &stale {
                let g = self.mms[m as usize].tlb_gen;
                self.mms[m as usize].cpu_tlb_gen[c as usize] = g;
            }
            self.stat.inc(Stat::TlbFlushEvents);
            if c == cpu {
                for m in stale {
                    self.cpus[c as usize].tlb.flush_asid(m);
                }
                self.stat.inc(Stat::NrTlbLocalFlushAll);
                self.trace.tlb_flush(t_local, c, TlbFlushReason::LocalShootdown, None);
                t_local += self.c.flush_all;
                continue;
            }
            sent += 1;
            self.trace.tlb_flush(t + self.c.ipi_send * sent, c, TlbFlushReason::RemoteShootdown, None);
            // The handler's flush is done when its IRQ work is.
            let at = t + self.c.ipi_send * sent + self.c.ipi_recv;
            for m in stale {
                self.cpus[c as usize].landing.push((at, m));
            }
            self.cpus[c as usize].irq_debt += recv;
        }
        if sent == 0 {
            return t_local;
        }
        self.stat.inc(Stat::NrTlbRemoteFlush);
        self.stat.add(Stat::NrTlbRemoteFlushReceived, sent as i64);
        t_local.max(t + self.c.ipi_send * sent + self.c.ipi_ack)
    }

    /// A full flush of `mm` on `cpu`: it owes that mm nothing any more.
    fn mm_caught_up(&mut self, mm: u32, cpu: u32) {
        let m = &mut self.mms[mm as usize];
        if let Some(g) = m.cpu_tlb_gen.get_mut(cpu as usize) {
            *g = m.tlb_gen;
        }
    }

    /// Run the flush handlers of IPIs that reached `cpu` by `t`.
    #[inline]
    pub fn tlb_apply_landed(&mut self, cpu: u32, t: Ns) {
        let c = &mut self.cpus[cpu as usize];
        if c.landing.is_empty() || c.landing.iter().all(|l| l.0 > t) {
            return;
        }
        let mut keep = Vec::new();
        for (at, m) in std::mem::take(&mut c.landing) {
            if at <= t {
                c.tlb.flush_asid(m);
            } else {
                keep.push((at, m));
            }
        }
        c.landing = keep;
    }

    /// The guest side of kvm_flush_remote_tlbs, if the host dropped SPTEs
    /// of this guest since the last call: every vCPU drops all its
    /// translations (the whole EPT context's) before its next TLB use and
    /// pays the kick's VM exit. Cheap when nothing is owed. Called after
    /// every call into the host, it also passes on that the host woke a
    /// thread of its own (kswapd), so that the driver lets it run.
    #[inline]
    pub fn kvm_remote_flush(&mut self) {
        if self.host.is_some() {
            self.kvm_remote_flush_owed();
        }
    }

    /// `kvm_remote_flush` under a host: out of line, so that the guest's
    /// paths that call it carry only the test.
    #[inline(never)]
    fn kvm_remote_flush_owed(&mut self) {
        let Some(h) = self.host.as_mut() else { return };
        if h.woke() && self.wakeups.last().is_none_or(|w| w.1 != crate::kernel::HOST_WOKE) {
            self.wakeups.push((0, crate::kernel::HOST_WOKE));
        }
        let Some(exit) = h.take_flush() else { return };
        self.stat.inc(Stat::KvmRemoteTlbFlush);
        if self.knobs.mutant == Mutant::KvmSkipRemoteFlush {
            return;
        }
        for c in &mut self.cpus {
            c.tlb.flush_all();
            c.irq_debt += exit;
        }
    }

    /// flush_tlb_page (ptep_clear_flush).
    pub fn flush_tlb_page(&mut self, t: Ns, cpu: u32, mm: u32, va: u64) -> Ns {
        self.flush_tlb_mm_range(t, cpu, mm, va, va + 4096, false)
    }
}
