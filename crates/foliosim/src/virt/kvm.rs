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
//! the notifier, which drops the SPTEs and owes the guest a remote flush
//! (kvm_flush_remote_tlbs), which the guest kernel applies to its vCPUs
//! before their next TLB use (`Kernel::kvm_remote_flush`).
//!
//! One host serves every guest of a run (virt/guests.rs lends it to the
//! guest whose vCPU runs: `cur`); guest frame numbers are the guest's own.

use super::discard::{Advice, DiscardCtx, DiscardPolicy};
use crate::hw::profile::Profile;
use crate::kernel::knobs::{Knobs, ThpEnabled, NUMA_BALANCING_MEMORY_TIERING};
use crate::kernel::Kernel;
use crate::mm::gup::Gup;
use crate::mm::mem_map::pg;
use crate::mm::mmu_notifier::{SecondaryMmu, BLOCK_PAGES};
use crate::mm::vma::MmCounter;
use crate::mm::vmstat::{Stat, VmStat};
use crate::mm::Pfn;
use crate::sim::{ns, Ns};
use crate::types::Error;
use crate::workload::{map, prot, Advice as MAdvice, FsKind, Op, Ret};
use std::sync::Arc;

/// One guest on the host: its VMM process (mm), one host thread per vCPU
/// (which takes that vCPU's EPT violations) and the main thread that
/// serves its reports.
#[derive(Clone, Debug)]
pub struct Vm {
    pub mm: u32,
    pub vcpus: Vec<u32>,
    pub vmm: u32,
    /// The guest RAM's mapping in the VMM: [base, base + nr_frames * 4 KiB).
    pub base: u64,
    pub nr_frames: u64,
    /// Pages of this guest read back from the host's swap, and swap
    /// entries of it its reports dropped: with the swap entries the VMM
    /// holds, what the host swapped out of this guest (`pswpout`).
    pub swapins: u64,
    pub swap_dropped: u64,
    /// Time the guest's vCPUs spent in the host for EPT violations, and
    /// its VMM's main thread discarding reported ranges.
    pub exit_ns: Ns,
    pub report_ns: Ns,
    /// The part of `exit_ns` in EPT violations that swapped the page in.
    pub swapin_ns: Ns,
    /// Time the host's NUMA balancing scans of this guest's RAM took on
    /// its first vCPU thread (`numa_scan`), and the hint faults its vCPUs
    /// took through the EPT (`ept_fault`) with the pages they promoted.
    pub numa_scan_ns: Ns,
    pub hint_faults: u64,
    pub promoted: u64,
    /// The guest's disk image (a host inode) and the VMM's descriptor of
    /// it; the virtio-blk reads the VMM made for the guest, those the
    /// host's page cache did not hold (read from the device), the time
    /// they took, and the pages page-cache promotion moved to the VMM's
    /// node as they returned.
    pub image: u32,
    pub fd: i32,
    pub blk_reads: u64,
    pub blk_read_misses: u64,
    pub blk_ns: Ns,
    pub blk_promoted: u64,
}

/// What a guest is, for the host that boots it.
#[derive(Clone, Copy, Debug)]
pub struct GuestShape {
    pub nr_frames: u64,
    pub nr_vcpus: u32,
    /// Its disk image: guests with the same one (clones of one template)
    /// share the host's page cache of it.
    pub image: usize,
}

/// A disk image's size on the host: room for any guest's files
/// (mm/fs.rs `disk_block`), all of it data.
pub const IMAGE_BYTES: u64 = 1 << 56;

/// A host kernel and the guests on it.
pub struct KvmHost {
    pub k: Box<Kernel>,
    pub vms: Vec<Vm>,
    discard: Arc<dyn DiscardPolicy>,
    /// The guest whose vCPUs call in (virt/guests.rs sets it).
    pub cur: usize,
    /// The exit, KVM's TDP fault and the entry ([host] ept_violation_ns).
    ept_violation: Ns,
    /// The virtqueue round trip of a report ([host] vq_roundtrip_ns).
    pub vq_roundtrip: Ns,
    /// What a vCPU pays for a remote flush: the kick IPI's VM exit and
    /// the entry that services KVM_REQ_TLB_FLUSH ([host] vm_exit_ns).
    pub vm_exit: Ns,
    /// The host part of a guest's two-dimensional walk per host level
    /// (the host profile's walk_ns / 4).
    walk_level: Ns,
    /// Why the host could not back a guest frame (the run stops with it).
    pub failed: Option<String>,
    /// The host's time at the guests' time 0: what -mem-prealloc did
    /// before the guests booted took the host's clocks and lines that far
    /// (0 without it). A guest's time t is the host's `epoch + t`.
    pub epoch: Ns,
}

impl KvmHost {
    /// Boot the host kernel from `prof` and `knobs` and start one VMM per
    /// guest. The costs of the exits and the virtqueue are `guest_prof`'s
    /// [host] table (what the guest sees of its hypervisor); `prealloc`
    /// backs and maps every guest frame at boot (QEMU -mem-prealloc, or
    /// the state after the guest touched all its RAM).
    pub fn boot(
        prof: Profile,
        knobs: Knobs,
        seed: u64,
        guests: &[GuestShape],
        discard: Arc<dyn DiscardPolicy>,
        guest_prof: &Profile,
        prealloc: bool,
        check: bool,
    ) -> Result<KvmHost, Error> {
        let hs = &guest_prof.host;
        let (ept_violation, vq_roundtrip, vm_exit) = (ns(hs.ept_violation_ns), ns(hs.vq_roundtrip_ns), ns(hs.vm_exit_ns));
        let walk_level = ns(prof.tlb.walk_ns / 4.0);
        let mut k = Box::new(Kernel::boot(prof, knobs, check, seed)?);
        let nr_cpus = k.nr_cpus();
        let mut vms = Vec::with_capacity(guests.len());
        // A guest's vCPUs stay on one socket, as a NUMA-aware placement
        // pins them, and the guests go round the sockets: guest g on the
        // CPUs of the host's g-th node with CPUs (mod their number), each
        // vCPU on that node's next CPU in turn. With one such node, vCPU c
        // of guest g is on host CPU (g * vcpus + c) mod host CPUs.
        let mut node_cpus: Vec<(u32, Vec<u32>)> = Vec::new();
        for cpu in 0..nr_cpus {
            let nid = k.cpus[cpu as usize].node;
            match node_cpus.iter_mut().find(|(n, _)| *n == nid) {
                Some((_, l)) => l.push(cpu),
                None => node_cpus.push((nid, vec![cpu])),
            }
        }
        let mut pinned = vec![0usize; node_cpus.len()];
        // The disk images, files of the host's filesystem, every block of
        // them data (QEMU's raw images with `cache=writeback`).
        let images: Vec<u32> =
            (0..guests.iter().map(|s| s.image + 1).max().unwrap_or(0)).map(|_| k.new_inode_on_disk(FsKind::Disk, IMAGE_BYTES)).collect();
        for (g, s) in guests.iter().enumerate() {
            let mm = k.new_mm();
            let sock = g % node_cpus.len();
            let vcpus: Vec<u32> = (0..s.nr_vcpus.max(1))
                .map(|_| {
                    let cpus = &node_cpus[sock].1;
                    let cpu = cpus[pinned[sock] % cpus.len()];
                    pinned[sock] += 1;
                    k.new_task(mm, cpu)
                })
                .collect();
            let cpu0 = k.tasks()[vcpus[0] as usize].cpu;
            let vmm = k.new_task(mm, cpu0);
            k.mms[mm as usize].mmget();
            // 2 MiB more than the RAM, so that the RAM starts on a PMD
            // boundary as QEMU aligns it (qemu_ram_mmap).
            let len = (s.nr_frames << 12) + (BLOCK_PAGES << 12);
            let op = Op::Mmap { addr: 0, len, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 };
            let (Ret::Val(a), _) = run(&mut k, vmm, 0, op) else {
                return Err(Error::OutOfMemory(format!("host: no room to map guest {g}'s RAM")));
            };
            let base = (a as u64).next_multiple_of(BLOCK_PAGES << 12);
            // QEMU advises huge pages on all guest RAM (ram_block_add:
            // QEMU_MADV_HUGEPAGE): the host's THP `madvise` mode backs it.
            run(&mut k, vmm, 0, Op::Madvise { addr: base, len: s.nr_frames << 12, advice: MAdvice::HugePage });
            // kvm_flush_remote_tlbs waits for every vCPU's acknowledgement
            // (KVM_REQUEST_WAIT): a kick per vCPU, then the slowest exit.
            let nv = vcpus.len() as Ns;
            let flush_cost = k.c.ipi_send * nv + vm_exit;
            let ept = SecondaryMmu::new(base, s.nr_frames, flush_cost);
            k.mms[mm as usize].mmu_notifier_register(if check { ept.track() } else { ept });
            let (Ret::Val(fd), _) = run(&mut k, vmm, 0, Op::Open { file: images[s.image] }) else {
                return Err(Error::Internal(format!("host: guest {g}'s VMM cannot open its disk image")));
            };
            vms.push(Vm {
                mm,
                vcpus,
                vmm,
                base,
                nr_frames: s.nr_frames,
                swapins: 0,
                swap_dropped: 0,
                exit_ns: 0,
                report_ns: 0,
                swapin_ns: 0,
                numa_scan_ns: 0,
                hint_faults: 0,
                promoted: 0,
                image: images[s.image],
                fd: fd as i32,
                blk_reads: 0,
                blk_read_misses: 0,
                blk_ns: 0,
                blk_promoted: 0,
            });
        }
        let mut h = KvmHost { k, vms, discard, cur: 0, ept_violation, vq_roundtrip, vm_exit, walk_level, failed: None, epoch: 0 };
        if prealloc {
            let mut st = VmStat::default();
            for g in 0..h.vms.len() {
                h.cur = g;
                let n = h.vms[g].nr_frames;
                h.touch(0, 0, n, 0, &mut st)?;
            }
            h.cur = 0;
            h.start_guests();
        }
        // Each VMM's first scan is due scan_delay after its mm was made
        // (init_numa_balancing), at the host's time 0.
        let delay = h.k.knobs.numa_scan_delay_ms * 1_000_000;
        for vm in &h.vms {
            h.k.mms[vm.mm as usize].numa_next_scan = delay;
        }
        Ok(h)
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

    /// The time guest `g`'s vCPU threads spent in the host's direct
    /// reclaim (in their EPT violations).
    pub fn direct_reclaim_ns(&self, g: usize) -> Ns {
        self.vms[g].vcpus.iter().map(|&v| self.k.tasks[v as usize].freepages_delay_ns).sum()
    }

    /// Host pages guest `g`'s VMM maps (its RSS).
    pub fn rss(&self, g: usize) -> u64 {
        self.k.mms[self.vms[g].mm as usize].get_mm_counter(MmCounter::AnonPages).max(0) as u64
    }
    /// Guest `g`'s pages on the host's swap device.
    pub fn swapped(&self, g: usize) -> u64 {
        self.k.mms[self.vms[g].mm as usize].get_mm_counter(MmCounter::SwapEnts).max(0) as u64
    }
    /// Pages of guest `g` the host swapped out, by whichever reclaim
    /// (kswapd's, or a fault's of any guest).
    pub fn pswpout(&self, g: usize) -> u64 {
        self.swapped(g) + self.vms[g].swapins + self.vms[g].swap_dropped
    }
    pub fn nr_guests(&self) -> usize {
        self.vms.len()
    }
    /// The host's memory, in pages.
    pub fn mem_pages(&self) -> u64 {
        self.k.nodes.iter().map(|n| n.nr_pages).sum()
    }

    /// The host PTE behind guest `g`'s frame `f`.
    fn host_pte(&self, g: usize, f: u64) -> crate::hw::mmu::Pte {
        let vm = &self.vms[g];
        self.k.mms[vm.mm as usize].pt.pte(vm.base + (f << 12))
    }

    /// Whether the host keeps the contents of the current guest's frame
    /// `pfn`: a present host page that is not lazily freed, or a swap entry.
    pub fn holds(&self, pfn: Pfn) -> bool {
        let pte = self.host_pte(self.cur, pfn as u64);
        pte.is_swap() || pte.present() && !self.lazily_freed(pte)
    }

    /// Whether the page a present host PTE maps is lazily freed (MADV_FREE
    /// took PG_swapbacked and the guest has not written it since).
    fn lazily_freed(&self, pte: crate::hw::mmu::Pte) -> bool {
        if pte.special() {
            return false;
        }
        let head = self.k.mem_map.folio_head(pte.pfn());
        self.k.mem_map.get(head).flags & (pg::SWAPBACKED | pg::DIRTY) == 0 && !pte.dirty()
    }

    /// Guest `g`'s lazily freed pages on the host, as the host kernel's
    /// MADV_FREE accounting shows them per process: smaps' `LazyFree` of
    /// the VMM's RAM (smaps_account: an anonymous folio without
    /// PG_swapbacked, neither it nor its PTE dirty). Like smaps, a walk
    /// of the page tables, made when the driver samples; frames with an
    /// SPTE are passed over, since MADV_FREE zapped the SPTEs of what it
    /// freed and the guest's next use dirtied the page through the EPT.
    pub fn lazyfree(&self, g: usize) -> u64 {
        let vm = &self.vms[g];
        let (pt, ept) = (&self.k.mms[vm.mm as usize].pt, self.ept(g));
        let mut n = 0;
        let mut f = 0;
        while f < vm.nr_frames {
            // The RAM starts on a PMD boundary: a block is one PTE table.
            let end = (f + BLOCK_PAGES).min(vm.nr_frames);
            if ept.present.count_range(f, end) < end - f {
                if let Some(tbl) = pt.table(vm.base + (f << 12)) {
                    let lazy = |i: &u64| {
                        let pte = tbl.ptes[(i - f) as usize];
                        !ept.present.get(*i) && pte.present() && self.lazily_freed(pte)
                    };
                    n += (f..end).filter(lazy).count() as u64;
                }
            }
            f = end;
        }
        n
    }

    /// Whether every frame of the current guest's [pfn, pfn + n) has an
    /// SPTE: a guest access to it costs the host nothing.
    pub fn range_ready(&self, pfn: Pfn, n: u64) -> bool {
        let s = pfn as u64;
        self.ept(self.cur).present.count_range(s, s + n) == n
    }

    /// Whether the host holds no contents of [pfn, pfn + n) it would have
    /// to keep (nothing mapped, or only lazily freed pages): what a
    /// reported block must look like.
    pub fn range_given_back(&self, pfn: Pfn, n: u64) -> bool {
        (pfn as u64..pfn as u64 + n).all(|f| {
            let pte = self.host_pte(self.cur, f);
            pte.is_none() || pte.present() && self.lazily_freed(pte)
        })
    }

    /// The current guest's vCPU `cpu` touches its frames [pfn, pfn + n)
    /// at `t` (a write: the clearing or copy after an allocation). Each
    /// frame without an SPTE is an EPT violation: the host page through
    /// get_user_page on the vCPU's host thread, then the SPTE at the
    /// host's mapping size. Counts what the host did in `stat` (the
    /// guest's `foliosim_host_*` counters). Returns when the vCPU is back
    /// in the guest.
    pub fn touch(&mut self, cpu: u32, pfn: Pfn, n: u64, t: Ns, stat: &mut VmStat) -> Result<Ns, Error> {
        let g = self.cur;
        let t0 = t + self.epoch;
        let mut t = t0;
        let mut f = pfn as u64;
        let end = f + n;
        let mut faulted = false;
        while f < end {
            if self.ept(g).present.get(f) {
                f += 1;
                continue;
            }
            faulted = true;
            t += self.ept_violation;
            t = self.ept_fault(g, cpu, f, t, stat)?;
            f += 1;
        }
        if faulted {
            stat.inc(Stat::HostFaultAllocs);
            self.sync_gauges(stat);
        }
        self.vms[g].exit_ns += t - t0;
        Ok(t - self.epoch)
    }

    /// The guests start when the host is done with what came before them
    /// (-mem-prealloc, backing what their boot wrote): that host time is
    /// not the guests' (their time 0 is the host's `epoch`), none of it
    /// counts as their exits, and no lock or line is still busy with it.
    pub fn start_guests(&mut self) {
        for vm in &mut self.vms {
            vm.exit_ns = 0;
            vm.swapin_ns = 0;
        }
        for t in self.k.tasks.iter_mut() {
            t.freepages_delay_ns = 0;
        }
        self.epoch = self.k.tasks.iter().map(|t| t.clock).max().unwrap_or(0);
    }

    /// Back every frame the current guest's kernel `guest` has allocated
    /// (what it wrote before it ran on this host), at the host's time
    /// (`start_guests` then starts the guests after it).
    pub fn back_allocated(&mut self, guest: &Kernel) -> Result<(), Error> {
        let mut st = VmStat::default();
        for f in 0..self.vms[self.cur].nr_frames {
            if guest.mem_map.get(f as Pfn).flags & pg::ALLOCATED != 0 && !self.ept(self.cur).present.get(f) {
                self.touch(0, f as Pfn, 1, 0, &mut st)?;
            }
        }
        Ok(())
    }

    /// kvm_tdp_page_fault for guest `g`'s frame `f`, taken on vCPU `cpu`, at `t`.
    fn ept_fault(&mut self, g: usize, cpu: u32, f: u64, t: Ns, stat: &mut VmStat) -> Result<Ns, Error> {
        let vm = &self.vms[g];
        let (vcpu, base, nr_frames) = (vm.vcpus[cpu as usize % vm.vcpus.len()], vm.base, vm.nr_frames);
        let hcpu = self.k.tasks[vcpu as usize].cpu;
        // The vCPU thread is in the host for this exit only: what the host
        // CPU ran before (idle, to the host's run queue) it runs after.
        let prev = std::mem::replace(&mut self.k.cpus[hcpu as usize].curr, vcpu);
        let t = t.max(self.k.tasks[vcpu as usize].clock);
        self.k.tasks[vcpu as usize].clock = t;
        let before = self.host_pte(g, f);
        let reuse = before.present() && self.lazily_freed(before);
        const SEEN: [Stat; 6] =
            [Stat::Pgfault, Stat::Pswpin, Stat::Pglazyfreed, Stat::ThpFaultAlloc, Stat::NumaHintFaults, Stat::PgpromoteSuccess];
        let s0 = SEEN.map(|s| self.k.stat.get(s));
        let t_in = t;
        let (page, t) = self.k.get_user_page(vcpu, base + (f << 12), true, t);
        if self.k.tasks[vcpu as usize].fault_unlock.is_some() {
            self.k.fault_unlock_finish(vcpu);
        }
        self.k.cpus[hcpu as usize].curr = prev;
        let Gup::Page(pte) = page else {
            return Err(Error::OutOfMemory(format!("host: guest {g}'s frame {f} has no host page ({page:?})")));
        };
        // The guest writes it through the EPT, not the host PTE: KVM marks
        // the page dirty (kvm_release_faultin_page), so a lazily freed one
        // is not dropped under the guest.
        self.k.unpin_user_page_dirty(pte);
        let head = self.k.mem_map.folio_head(pte.pfn());
        let order = self.k.mem_map.get(head).order;
        let d = SEEN.map(|s| self.k.stat.get(s)).iter().zip(s0).map(|(a, b)| a - b).collect::<Vec<_>>();
        if d[4] > 0 {
            // A NUMA hinting fault on a page the host's scan protected
            // (do_numa_page): the page is kept, or migrated to the vCPU's
            // node, not filled.
            self.vms[g].hint_faults += d[4] as u64;
            self.vms[g].promoted += d[5] as u64;
        } else if d[1] > 0 {
            stat.add(Stat::HostPswpin, d[1]);
            self.vms[g].swapins += d[1] as u64;
            self.vms[g].swapin_ns += t - t_in;
        } else if d[0] > 0 {
            stat.inc(Stat::HostFaults);
            stat.add(Stat::HostZeroedPages, 1 << order);
            if d[3] > 0 {
                stat.inc(Stat::HostThpFaults);
            }
        } else if reuse {
            stat.inc(Stat::HostLazyfreeReuse);
        }
        // Lazily freed pages the host dropped in this fault's direct
        // reclaim are charged to the guest whose fault made the host
        // reclaim (kswapd's are the host's alone); swap-outs go to the
        // guest whose page went out, as a memcg's pgsteal does
        // (`pswpout`, published by `sync_gauges`).
        stat.add(Stat::HostLazyfreeReclaimed, d[2]);
        // host_pfn_mapping_level: a 2 MiB SPTE when the host maps the whole
        // aligned block with one PMD-sized folio.
        let block = f / BLOCK_PAGES;
        let whole = order >= 9 && (block + 1) * BLOCK_PAGES <= nr_frames;
        let first = if whole { block * BLOCK_PAGES } else { f };
        let last = if whole { first + BLOCK_PAGES } else { f + 1 };
        let m = &mut self.k.mms[self.vms[g].mm as usize];
        let ept = m.notifier.as_deref_mut().expect("the EPT is subscribed");
        for i in first..last {
            // The frame, for the checker only (a lookup per page).
            let pfn = if ept.pfns.is_some() { m.pt.pte(base + (i << 12)).pfn() } else { 0 };
            ept.map(i, pfn);
        }
        ept.accessed.set(first);
        if whole {
            ept.large.set(block);
        }
        Ok(t)
    }

    /// When the host's NUMA balancing (memory tiering mode) next scans
    /// each guest's RAM (its VMM mm's `numa_next_scan`), in the guests'
    /// time; empty when the host does not scan.
    pub fn numa_scans_due(&self) -> Vec<Ns> {
        if self.k.knobs.numa_balancing & NUMA_BALANCING_MEMORY_TIERING == 0 {
            return Vec::new();
        }
        (0..self.vms.len()).map(|g| self.numa_scan_due_of(g)).collect()
    }

    /// When the scan of guest `g`'s VMM is due, in the guests' time.
    pub fn numa_scan_due_of(&self, g: usize) -> Ns {
        self.k.mms[self.vms[g].mm as usize].numa_next_scan.max(self.epoch) - self.epoch
    }

    /// task_numa_work over guest `g`'s VMM mm, on its first vCPU thread at
    /// the guests' time `t`: task_tick_numa, on the host tick that
    /// interrupts the vCPU once the scan is due, queues it as task work,
    /// and it runs before the vCPU re-enters the guest
    /// (xfer_to_guest_mode_handle_work, kernel/entry/kvm.c). Any vCPU's
    /// tick may find the scan due; foliosim lets the first vCPU take it.
    /// The PTEs it makes PROT_NONE drop their SPTEs through the notifier
    /// (the guest owes its vCPUs a remote flush), so the guest's next
    /// access to such a page is an EPT violation whose get_user_page takes
    /// the hinting fault (do_numa_page: promotion of a hot page from a
    /// lower tier). Returns the time the vCPU spent in the host.
    pub fn numa_scan(&mut self, g: usize, t: Ns) -> Ns {
        let vcpu = self.vms[g].vcpus[0];
        let hcpu = self.k.tasks[vcpu as usize].cpu;
        let prev = std::mem::replace(&mut self.k.cpus[hcpu as usize].curr, vcpu);
        let t = (t + self.epoch).max(self.k.tasks[vcpu as usize].clock);
        self.k.tasks[vcpu as usize].clock = t;
        self.k.task_numa_work(vcpu);
        // task_numa_work moved the mm's next scan a scan period on; a
        // trylock of mmap_lock that failed still did (as Linux's cmpxchg
        // on numa_next_scan comes first), so this never scans twice at t.
        let m = &mut self.k.mms[self.vms[g].mm as usize];
        m.numa_next_scan = m.numa_next_scan.max(t + 1);
        self.k.cpus[hcpu as usize].curr = prev;
        let d = self.k.tasks[vcpu as usize].clock - t;
        self.vms[g].numa_scan_ns += d;
        d
    }

    /// The host part of the current guest's two-dimensional walk that ends
    /// at frame `pfn`: the host walk of the final guest-physical address
    /// (the upper levels' entries in the paging-structure caches), four
    /// levels over a 4 KiB host mapping, three over a 2 MiB one. The walk
    /// sets the EPT's accessed bit.
    pub fn walk(&mut self, pfn: Pfn) -> Ns {
        let g = self.cur;
        let large = self.ept_large(g, pfn);
        let ept = self.ept_mut(g);
        let f = pfn as u64;
        ept.accessed.set(if large { f & !(BLOCK_PAGES - 1) } else { f });
        self.walk_level * if large { 3 } else { 4 }
    }

    /// The current guest reported [pfn, pfn + n) at `t`: the VMM's main
    /// thread drops it with one madvise, the advice the discard policy
    /// chooses. Returns the host time it took.
    pub fn discard_range(&mut self, pfn: Pfn, n: u64, t: Ns, stat: &mut VmStat) -> Ns {
        let g = self.cur;
        let Vm { vmm, base, .. } = self.vms[g];
        let rss: u64 = (0..self.vms.len()).map(|i| self.rss(i)).sum();
        let thp = self.k.knobs.anon_folio.thp_enabled != ThpEnabled::Never;
        // The host kernel keeps no running count of its lazily freed
        // folios (smaps' LazyFree is a walk, `lazyfree`, made when the
        // driver samples), so the policy sees none.
        let limit = Some(self.mem_pages());
        let ctx = DiscardCtx { pfn, nr_pages: n, thp, rss, nr_lazy: 0, limit };
        let advice = self.discard.advice(&ctx);
        let present = (pfn as u64..pfn as u64 + n)
            .filter(|&f| {
                let pte = self.host_pte(g, f);
                pte.present() && (advice == Advice::DontNeed || !self.lazily_freed(pte))
            })
            .count() as i64;
        stat.add(Stat::HostDiscardedPages, present);
        // madvise frees the swap entries of the range too (zap_pte_range,
        // madvise_free_pte_range: free_swap_and_cache).
        self.vms[g].swap_dropped += (pfn as u64..pfn as u64 + n).filter(|&f| self.host_pte(g, f).is_swap()).count() as u64;
        let advice = match advice {
            Advice::DontNeed => MAdvice::DontNeed,
            Advice::Free => MAdvice::Free,
        };
        let op = Op::Madvise { addr: base + ((pfn as u64) << 12), len: n << 12, advice };
        let t = t + self.epoch;
        let end = run(&mut self.k, vmm, t, op).1;
        self.sync_gauges(stat);
        self.vms[g].report_ns += end.saturating_sub(t);
        end.saturating_sub(t)
    }

    /// The current guest's vCPU `cpu` reads block `block` of its disk into
    /// its frame `pfn` at `t`. The VMM serves the virtio-blk request with
    /// one preadv of the guest's disk image (QEMU's `cache=writeback`:
    /// through the host's page cache, where a block another guest of the
    /// same image read is found, and folio_mark_accessed may find it hot
    /// on a lower tier) into the guest's RAM: a page fault in the VMM if
    /// the host has no page there. The VMM's main thread makes it (the
    /// thread that serves the balloon; QEMU's I/O threads are not
    /// modelled), then the completion (the used ring and the injected
    /// interrupt, a virtqueue round trip with the request's notify), and
    /// the guest's first use of the data: an EPT violation when the frame
    /// has no SPTE. Returns the guests' time when the guest has the data.
    pub fn blk_read(&mut self, cpu: u32, pfn: Pfn, block: u64, t: Ns, stat: &mut VmStat) -> Result<Ns, Error> {
        let g = self.cur;
        let Vm { mm, vmm, base, image, fd, .. } = self.vms[g];
        let cached = self.k.inodes[image as usize].pages.get(&block).is_some();
        // preadv: the position is the call's own.
        if let Some(f) = self.k.mms[mm as usize].fd(fd) {
            f.pos = block << 12;
        }
        let t0 = t + self.epoch;
        let promoted = self.k.stat.get(Stat::PgpromoteSuccess);
        let (r, end) = run(&mut self.k, vmm, t0, Op::Read { fd, len: 4096, buf: base + ((pfn as u64) << 12) });
        if r != Ret::Val(4096) {
            return Err(Error::OutOfMemory(format!("host: guest {g}'s read of disk block {block} failed ({r:?})")));
        }
        let vm = &mut self.vms[g];
        vm.blk_reads += 1;
        vm.blk_read_misses += !cached as u64;
        vm.blk_ns += end - t0;
        // The promotion work the read queued ran as it returned.
        vm.blk_promoted += (self.k.stat.get(Stat::PgpromoteSuccess) - promoted) as u64;
        self.sync_gauges(stat);
        self.touch(cpu, pfn, 1, end + self.vq_roundtrip - self.epoch, stat)
    }

    /// The flush the current guest owes its vCPUs for SPTEs the host
    /// dropped (kvm_flush_remote_tlbs), if any: taken, for the guest kernel
    /// to apply.
    pub fn take_flush(&mut self) -> bool {
        let g = self.cur;
        self.ept_mut(g).take_flush().is_some()
    }

    /// Whether the host kernel woke one of its kernel threads (kswapd)
    /// that its run queue has not taken yet (virt/guests.rs takes them).
    pub fn woke(&self) -> bool {
        self.k.wakeups.iter().any(|&(_, tid)| self.k.tasks[tid as usize].kthread.is_some())
    }

    /// Publish the current guest's gauges (but LazyFree, a walk the
    /// driver makes when it samples: `lazyfree`).
    pub fn sync_gauges(&self, stat: &mut VmStat) {
        let g = self.cur;
        stat.v[Stat::HostRss as usize] = self.rss(g) as i64;
        stat.v[Stat::HostSwap as usize] = self.swapped(g) as i64;
        stat.v[Stat::HostPswpout as usize] = self.pswpout(g) as i64;
        stat.v[Stat::HostMemFree as usize] = self.k.stat.get(Stat::NrFreePages);
    }
}

impl super::HostKernel for KvmHost {
    fn touch(&mut self, cpu: u32, pfn: Pfn, n: u64, t: Ns, stat: &mut VmStat) -> Result<Ns, String> {
        KvmHost::touch(self, cpu, pfn, n, t, stat).map_err(|e| e.to_string())
    }
    fn range_ready(&self, pfn: Pfn, n: u64) -> bool {
        KvmHost::range_ready(self, pfn, n)
    }
    fn holds(&self, pfn: Pfn) -> bool {
        KvmHost::holds(self, pfn)
    }
    fn range_given_back(&self, pfn: Pfn, n: u64) -> bool {
        KvmHost::range_given_back(self, pfn, n)
    }
    fn walk(&mut self, pfn: Pfn) -> Ns {
        KvmHost::walk(self, pfn)
    }
    fn maps_4k(&self, pfn: Pfn) -> bool {
        !self.ept_large(self.cur, pfn)
    }
    fn sync_gauges(&self, stat: &mut VmStat) {
        KvmHost::sync_gauges(self, stat)
    }
    fn vq_roundtrip(&self) -> Ns {
        self.vq_roundtrip
    }
    fn discard_range(&mut self, pfn: Pfn, n: u64, t: Ns, stat: &mut VmStat) -> Ns {
        KvmHost::discard_range(self, pfn, n, t, stat)
    }
    fn blk_read(&mut self, cpu: u32, pfn: Pfn, block: u64, t: Ns, stat: &mut VmStat) -> Result<Ns, String> {
        KvmHost::blk_read(self, cpu, pfn, block, t, stat).map_err(|e| e.to_string())
    }
    fn take_flush(&mut self) -> Option<Ns> {
        KvmHost::take_flush(self).then_some(self.vm_exit)
    }
    fn woke(&self) -> bool {
        KvmHost::woke(self)
    }
    fn nr_guests(&self) -> usize {
        self.vms.len()
    }
    fn guest_pages(&self, g: usize) -> (u64, u64) {
        (self.rss(g), self.swapped(g))
    }
    fn fail(&mut self, why: String) {
        self.failed.get_or_insert(why);
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Run `op` as host task `tid` from `at` to its end (every step of it),
/// the CPU given back after to what it ran before. Returns its result and
/// the task's clock after. (What a VMM does on the host: its mmap and
/// madvise here, a test's mprotect or reads.)
pub fn run(k: &mut Kernel, tid: u32, at: Ns, op: Op) -> (Ret, Ns) {
    let cpu = k.tasks[tid as usize].cpu;
    let tk = &mut k.tasks[tid as usize];
    tk.clock = tk.clock.max(at);
    let prev = std::mem::replace(&mut k.cpus[cpu as usize].curr, tid);
    let mut r = k.exec(tid, op);
    while r.is_none() {
        let op = k.tasks[tid as usize].pending.take().expect("a pending op");
        r = k.exec(tid, op);
    }
    if k.tasks[tid as usize].fault_unlock.is_some() {
        k.fault_unlock_finish(tid);
    }
    k.cpus[cpu as usize].curr = prev;
    (r.expect("the op finished"), k.tasks[tid as usize].clock)
}
