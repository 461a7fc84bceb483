//! The host as a foliosim kernel (issue #33, docs/mechanisms/cloud-host.md):
//! each guest's RAM is an anonymous private mapping of one VMM process on
//! the host kernel, as QEMU's is, and KVM's EPT is that mm's secondary MMU
//! (mm/mmu_notifier.rs). A guest frame's first touch is an EPT violation:
//! `get_user_page` on the VMM mm (mm/gup.rs, KVM's hva_to_pfn), which runs
//! the host's own anonymous fault (the host's THP/mTHP policy choosing the
//! folio, the host's allocator and reclaim), and the SPTE is installed at
//! the host's mapping size (host_pfn_mapping_level: 2 MiB when the host
//! maps the whole block with one PMD-sized folio). A reported range is the
//! VMM's `madvise` on the host (QEMU's ram_block_discard_range), with the
//! advice the discard policy chooses; the host's own zap or MADV_FREE calls
//! the notifier, which drops the SPTEs.
//!
//! Not yet wired under a guest kernel: `virt/host.rs` (the bitmap host)
//! still serves every run; this is the host a guest will be switched to.

use super::host::{Advice, DiscardCtx, DiscardPolicy};
use crate::hw::profile::Profile;
use crate::kernel::knobs::{Knobs, ThpEnabled};
use crate::kernel::Kernel;
use crate::mm::gup::Gup;
use crate::mm::mmu_notifier::{SecondaryMmu, BLOCK_PAGES};
use crate::mm::vma::MmCounter;
use crate::mm::Pfn;
use crate::sim::{ns, Ns};
use crate::types::Error;
use crate::workload::{map, prot, Advice as MAdvice, Op, Ret};
use std::sync::Arc;

/// One guest on the host: its VMM process (mm), the vCPU thread that takes
/// its EPT violations and the main thread that serves its reports.
#[derive(Clone, Debug)]
pub struct Vm {
    pub mm: u32,
    pub vcpu: u32,
    pub vmm: u32,
    /// The guest RAM's mapping in the VMM: [base, base + nr_frames * 4 KiB).
    pub base: u64,
    pub nr_frames: u64,
}

/// A host kernel and the guests on it.
pub struct KvmHost {
    pub k: Box<Kernel>,
    pub vms: Vec<Vm>,
    discard: Arc<dyn DiscardPolicy>,
    /// The exit, KVM's TDP fault and the entry ([host] ept_violation_ns).
    ept_violation: Ns,
    /// The virtqueue round trip of a report ([host] vq_roundtrip_ns).
    pub vq_roundtrip: Ns,
}

impl KvmHost {
    /// Boot the host kernel from `prof` and `knobs` and start one VMM per
    /// guest, guest `g` with `frames[g]` 4 KiB frames of RAM. The EPT
    /// violation and report costs are the host profile's.
    pub fn boot(prof: Profile, knobs: Knobs, seed: u64, frames: &[u64], discard: Arc<dyn DiscardPolicy>) -> Result<KvmHost, Error> {
        let ept_violation = ns(prof.host.ept_violation_ns);
        let vq_roundtrip = ns(prof.host.vq_roundtrip_ns);
        let mut k = Box::new(Kernel::boot(prof, knobs, true, seed)?);
        let nr_cpus = k.nr_cpus();
        let mut vms = Vec::with_capacity(frames.len());
        for (g, &nr_frames) in frames.iter().enumerate() {
            let mm = k.new_mm();
            let cpu = g as u32 % nr_cpus;
            let vcpu = k.new_task(mm, cpu);
            let vmm = k.new_task(mm, cpu);
            k.mms[mm as usize].mmget();
            // 2 MiB more than the RAM, so that the RAM starts on a PMD
            // boundary as QEMU aligns it (qemu_ram_mmap).
            let len = (nr_frames << 12) + (BLOCK_PAGES << 12);
            let op = Op::Mmap { addr: 0, len, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 };
            let (Ret::Val(a), _) = run(&mut k, vmm, 0, op) else {
                return Err(Error::OutOfMemory(format!("host: no room to map guest {g}'s RAM")));
            };
            let base = (a as u64).next_multiple_of(BLOCK_PAGES << 12);
            // The remote flush an invalidation owes (kvm_flush_remote_tlbs)
            // is the guest's to pay, on its vCPUs, once guests run on this
            // host; the host side's callback costs nothing here yet.
            k.mms[mm as usize].mmu_notifier_register(SecondaryMmu::new(base, nr_frames, 0));
            vms.push(Vm { mm, vcpu, vmm, base, nr_frames });
        }
        Ok(KvmHost { k, vms, discard, ept_violation, vq_roundtrip })
    }

    fn ept(&self, g: usize) -> &SecondaryMmu {
        self.k.mms[self.vms[g].mm as usize].notifier.as_deref().expect("the EPT is subscribed")
    }
    fn ept_mut(&mut self, g: usize) -> &mut SecondaryMmu {
        self.k.mms[self.vms[g].mm as usize].notifier.as_deref_mut().expect("the EPT is subscribed")
    }

    /// Whether guest `g`'s frame `pfn` has an SPTE.
    pub fn ept_present(&self, g: usize, pfn: Pfn) -> bool {
        self.ept(g).present.get(pfn as u64)
    }
    /// Whether it is mapped by a 2 MiB SPTE.
    pub fn ept_large(&self, g: usize, pfn: Pfn) -> bool {
        self.ept(g).large.get(pfn as u64 / BLOCK_PAGES)
    }

    /// Host pages guest `g`'s VMM maps (its RSS).
    pub fn rss(&self, g: usize) -> u64 {
        self.k.mms[self.vms[g].mm as usize].get_mm_counter(MmCounter::AnonPages).max(0) as u64
    }

    /// Guest `g` touches its frames [pfn, pfn + n) at `t` (a write: the
    /// clearing or copy after an allocation). Each frame without an SPTE is
    /// an EPT violation: the host page through get_user_page on the vCPU's
    /// host task, then the SPTE at the host's mapping size. Returns when
    /// the vCPU is back in the guest.
    pub fn touch(&mut self, g: usize, pfn: Pfn, n: u64, t: Ns) -> Result<Ns, Error> {
        let mut t = t;
        let mut f = pfn as u64;
        let end = f + n;
        while f < end {
            if self.ept(g).present.get(f) {
                f += 1;
                continue;
            }
            t += self.ept_violation;
            t = self.ept_fault(g, f, t)?;
            f += 1;
        }
        Ok(t)
    }

    /// kvm_tdp_page_fault for guest `g`'s frame `f` at `t`.
    fn ept_fault(&mut self, g: usize, f: u64, t: Ns) -> Result<Ns, Error> {
        let Vm { vcpu, base, nr_frames, .. } = self.vms[g];
        let cpu = self.k.tasks[vcpu as usize].cpu;
        self.k.cpus[cpu as usize].curr = vcpu;
        let t = t.max(self.k.tasks[vcpu as usize].clock);
        self.k.tasks[vcpu as usize].clock = t;
        let (page, t) = self.k.get_user_page(vcpu, base + (f << 12), true, t);
        if self.k.tasks[vcpu as usize].fault_unlock.is_some() {
            self.k.fault_unlock_finish(vcpu);
        }
        let Gup::Page(pte) = page else {
            return Err(Error::OutOfMemory(format!("host: guest {g}'s frame {f} has no host page ({page:?})")));
        };
        // The guest writes it through the EPT, not the host PTE: KVM marks
        // the page dirty (kvm_release_faultin_page), so a lazily freed one
        // is not dropped under the guest.
        self.k.unpin_user_page_dirty(pte);
        // host_pfn_mapping_level: a 2 MiB SPTE when the host maps the whole
        // aligned block with one PMD-sized folio.
        let head = self.k.mem_map.folio_head(pte.pfn());
        let block = f / BLOCK_PAGES;
        let whole = self.k.mem_map.get(head).order as u64 >= 9 && (block + 1) * BLOCK_PAGES <= nr_frames;
        let ept = self.ept_mut(g);
        if whole {
            for i in block * BLOCK_PAGES..(block + 1) * BLOCK_PAGES {
                ept.present.set(i);
            }
            ept.large.set(block);
            ept.accessed.set(block * BLOCK_PAGES);
        } else {
            ept.present.set(f);
            ept.accessed.set(f);
        }
        Ok(t)
    }

    /// Guest `g` reported [pfn, pfn + n) at `t`: the VMM's main thread
    /// drops it with one madvise, the advice the discard policy chooses.
    /// Returns when the madvise is done.
    pub fn discard_range(&mut self, g: usize, pfn: Pfn, n: u64, t: Ns) -> Ns {
        let Vm { vmm, base, .. } = self.vms[g];
        let rss: u64 = (0..self.vms.len()).map(|i| self.rss(i)).sum();
        let thp = self.k.knobs.anon_folio.thp_enabled != ThpEnabled::Never;
        // The host's memory is the limit; the host kernel keeps no gauge
        // of its lazily freed folios (LazyFree) yet, so none are counted.
        let limit = Some(self.k.nodes.iter().map(|n| n.nr_pages).sum());
        let ctx = DiscardCtx { pfn, nr_pages: n, thp, rss, nr_lazy: 0, limit };
        let advice = match self.discard.advice(&ctx) {
            Advice::DontNeed => MAdvice::DontNeed,
            Advice::Free => MAdvice::Free,
        };
        let op = Op::Madvise { addr: base + ((pfn as u64) << 12), len: n << 12, advice };
        run(&mut self.k, vmm, t, op).1
    }
}

/// A host task of `mm` on `cpu`.
/// Run `op` as host task `tid` from `at` to its end (every step of it).
/// Returns its result and the task's clock after.
fn run(k: &mut Kernel, tid: u32, at: Ns, op: Op) -> (Ret, Ns) {
    let cpu = k.tasks[tid as usize].cpu;
    let tk = &mut k.tasks[tid as usize];
    tk.clock = tk.clock.max(at);
    k.cpus[cpu as usize].curr = tid;
    let mut r = k.exec(tid, op);
    while r.is_none() {
        let op = k.tasks[tid as usize].pending.take().expect("a pending op");
        r = k.exec(tid, op);
    }
    if k.tasks[tid as usize].fault_unlock.is_some() {
        k.fault_unlock_finish(tid);
    }
    (r.expect("the op finished"), k.tasks[tid as usize].clock)
}
