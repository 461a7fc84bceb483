//! The simulated kernel: one struct holding the machine and all mm state.
//! Its methods are spread over the files of `mm/` (memory.rs holds the
//! fault paths, mmu_gather.rs the freeing after a TLB flush, ...) like Linux's functions
//! over its files; `kernel/syscalls.rs` dispatches a workload's operations.

pub mod costs;
pub mod knobs;
pub mod kthread;
pub mod syscalls;
pub mod task;
pub mod trace;
pub mod wait;

use crate::check::Checker;
use crate::hw::profile::Profile;
use crate::hw::tlb::Tlb;
use crate::mm::filemap::Inode;
use crate::mm::mem_map::{pg, MemMap};
use crate::mm::mmap::Mm;
use crate::mm::page_alloc::{AllocMutant, AllocParams, MigrateType, PageAlloc, ZoneSpec};
use crate::mm::swap::LruVec;
use crate::mm::vmstat::VmStat;
use crate::mm::Pfn;
use crate::sim::lock::{LineCost, SleepCost};
use crate::sim::Ns;
use costs::Costs;
use knobs::Knobs;
use task::Task;

/// One simulated CPU.
pub struct Cpu {
    pub tlb: Tlb,
    /// Interrupt work (IPIs received) not yet charged to whatever runs here.
    pub irq_debt: Ns,
    /// The per-CPU LRU-add batch (folio_batch), holding one reference each.
    pub lru_add: Vec<Pfn>,
    /// The task that owns this CPU now (u32::MAX: idle).
    pub curr: u32,
    /// Runnable tasks waiting for this CPU, in order.
    pub rq: std::collections::VecDeque<u32>,
    /// When the current task's time slice ends.
    pub slice_end: Ns,
    pub node: u32,
    /// Batched-flush IPIs in flight to this CPU: (when the handler runs,
    /// mm whose entries it drops). Applied before the CPU's next TLB use.
    pub landing: Vec<(Ns, u32)>,
    /// x86 cpu_tlbstate: the loaded mm and the dynamic ASID slots (arch/x86/tlbflush.rs).
    pub tlbstate: crate::arch::x86::tlbflush::TlbState,
    /// What this CPU's caches hold of recently freed pages and of its last
    /// page walk (hw/cache.rs).
    pub cache: crate::hw::cache::CpuCache,
}

/// One memory node (pg_data_t).
pub struct Node {
    pub id: u32,
    pub start_pfn: Pfn,
    pub nr_pages: u64,
    pub lruvec: LruVec,
    /// Clearing one 4 KiB page (one clear call).
    pub zero_4k: Ns,
    /// The fixed part of one clear call; a 2^k-page folio costs
    /// zero_call + 2^k * (zero_4k - zero_call).
    pub zero_call: Ns,
    pub copy_4k: Ns,
    pub read_4k: Ns,
    pub has_cpus: bool,
    /// pgdat->kswapd_failures: kswapd runs (balance_pgdat) in a row that
    /// reclaimed nothing; any reclaim progress on the node resets it.
    pub kswapd_failures: u32,
}

pub struct Kernel {
    pub prof: Profile,
    pub c: Costs,
    pub lc: LineCost,
    pub sc: SleepCost,
    pub knobs: Knobs,
    pub cpus: Vec<Cpu>,
    pub nodes: Vec<Node>,
    pub pa: PageAlloc,
    pub mem_map: MemMap,
    pub mms: Vec<Mm>,
    pub tasks: Vec<Task>,
    pub inodes: Vec<Inode>,
    pub stat: VmStat,
    pub check: Checker,
    pub zero_pfn: Pfn,
    pub next_anon_vma: u32,
    /// A fault being taken on the kernel's behalf (MAP_POPULATE), not from
    /// a user-mode trap: the fast fault-locking paths are not tried.
    pub fault_kernel_mode: bool,
    /// Fault-locking events recorded with `debug.fault_trace` > 0.
    pub fault_trace: Vec<crate::mm::mmap_lock::FaultTraceEvent>,
    /// (time, cpu, address) of the fault being handled, for the trace.
    pub fault_trace_ctx: (Ns, u32, u64),
    /// Kernel-thread bodies, indexed by `Task::kthread`.
    pub kthreads: Vec<Option<Box<dyn kthread::Kthread>>>,
    /// Tasks made runnable by the kernel during a step, for the driver's run queue.
    pub wakeups: Vec<(Ns, u32)>,
    /// Reused buffer of folios whose last reference went (release_folios).
    pub scratch_dead: Vec<Pfn>,
    /// Reused VMA copy of the classic fault (`fault_under_mmap_lock`):
    /// refilling its fields is cheaper than building and dropping a VMA
    /// (with its lock state) per fault. None while a fault borrows it.
    pub fault_vma: Option<Box<crate::mm::mmap::Vma>>,
    /// The hypervisor backing this machine's memory, when it is modelled
    /// as a VM guest (virt/).
    pub host: Option<crate::virt::Host>,
    /// The registered free-page-reporting device (mm/page_reporting.rs).
    pub prdev: Option<crate::mm::page_reporting::PageReportingDev>,
    /// Large anonymous folios: the order policy, the deferred-split queues
    /// (one per node: no memcg) and the per-size stats.
    pub anon_policy: Box<dyn crate::mm::huge_memory::AnonOrderPolicy>,
    /// `anon_policy.order0_only()`, read once: every anonymous fault asks,
    /// and the default policy's answer spares it a virtual call.
    pub anon_order0_only: bool,
    /// `anon_policy.paths()`, read once.
    pub anon_paths: crate::mm::huge_memory::AnonPaths,
    /// The fault-locking policy (`fault_locking`, mm/mmap_lock.rs).
    pub fault_lock: &'static dyn crate::mm::mmap_lock::FaultLockPolicy,
    /// The page-cache promotion policy (`promotion_list_order`, mm/memory_tiers.rs).
    pub promotion: Box<dyn crate::mm::memory_tiers::PromotionPolicy>,
    pub split_queues: Vec<crate::mm::huge_memory::SplitQueue>,
    pub mthp: crate::mm::huge_memory::MthpStats,
    /// Memory tiers, promotion lists, kswapd threads (mm/memory_tiers.rs).
    pub tier: crate::mm::memory_tiers::TierState,
    /// Lazy unmap flush pending sets (mm/luf.rs) and luf_lock.
    pub luf: crate::mm::luf::Luf,
    pub luf_lock: crate::sim::lock::SpinLock,
    /// The code running now has IRQs disabled (an atomic allocation).
    pub irqs_off: bool,
    /// Tracepoints (`[run] probes`), all off unless the config asks.
    pub trace: trace::Tracing,
}

impl Kernel {
    /// Boot a machine described by `prof` with `knobs`.
    pub fn boot(prof: Profile, knobs: Knobs, check: bool, seed: u64) -> Result<Kernel, String> {
        let c = Costs::from_profile(&prof);
        let nr_cpus = prof.cpu.nr_cpus;
        // A new simulation on this thread: its lines keep what they see.
        crate::sim::set_frontier(0);
        let lc = LineCost {
            local_rmw: c.line_local,
            same_socket: c.line_same,
            cross_socket: c.line_cross,
            read_same_socket: c.line_read_same,
            read_cross_socket: c.line_read_cross,
            cpus_per_socket: (nr_cpus / prof.cpu.sockets).max(1),
            mutant: knobs.mutant.lock_mutant(),
        };
        let sc = SleepCost { spin_limit: c.spin_limit, sleep_wake: c.context_switch };
        // Nodes get consecutive PFN ranges; CPUs are spread over nodes with CPUs.
        let cpu_nodes: Vec<u32> = prof.nodes.iter().enumerate().filter(|(_, n)| n.has_cpus).map(|(i, _)| i as u32).collect();
        let per = (nr_cpus as usize).div_ceil(cpu_nodes.len());
        let cpu_node = |cpu: u32| cpu_nodes[(cpu as usize / per).min(cpu_nodes.len() - 1)];
        let mut zones = Vec::new();
        let mut nodes = Vec::new();
        let mut start: u64 = 0;
        for (i, n) in prof.nodes.iter().enumerate() {
            let pages = n.mem_mib << (20 - 12);
            let local_cpus: Vec<u32> = (0..nr_cpus).filter(|&c| cpu_node(c) == i as u32).collect();
            zones.push(ZoneSpec { nid: i as u32, start_pfn: start as Pfn, nr_pages: pages, local_cpus });
            nodes.push(Node {
                id: i as u32,
                start_pfn: start as Pfn,
                nr_pages: pages,
                lruvec: LruVec::default(),
                zero_4k: c.node_zero_4k[i],
                zero_call: c.node_zero_call[i],
                copy_4k: c.node_copy_4k[i],
                read_4k: c.node_read_4k[i],
                has_cpus: n.has_cpus,
                kswapd_failures: 0,
            });
            start += pages;
        }
        let params = AllocParams {
            nr_cpus,
            min_free_kbytes: knobs.min_free_kbytes,
            watermark_scale_factor: knobs.watermark_scale_factor,
            percpu_pagelist_high_fraction: knobs.percpu_pagelist_high_fraction,
            alloc_pcp_ns: c.alloc_pcp,
            free_pcp_ns: c.free_pcp,
            buddy_op_ns: c.buddy_op,
            line: lc,
            merge_likely_tail: true,
            shuffle: knobs.shuffle,
            shuffle_seed: seed,
        };
        let mut pa = PageAlloc::new(zones, params);
        pa.set_track_pcp(check);
        pa.set_mutant(match knobs.mutant {
            knobs::Mutant::BuddySkipNrFreeDec => Some(AllocMutant::SkipNrFreeDec),
            knobs::Mutant::BuddyNoMerge => Some(AllocMutant::NoMerge),
            knobs::Mutant::FprKeepReportedOnAlloc => Some(AllocMutant::KeepReportedOnAlloc),
            knobs::Mutant::Luf(knobs::LufMutant::D1OrderAsUgen) => Some(AllocMutant::LufD1OrderAsUgen),
            knobs::Mutant::Luf(knobs::LufMutant::MergeKeepsOlder) => Some(AllocMutant::LufMergeKeepsOlder),
            knobs::Mutant::Luf(knobs::LufMutant::D2SplitDrops) => Some(AllocMutant::LufD2SplitDrops),
            knobs::Mutant::Luf(knobs::LufMutant::D3RefillDrops) => Some(AllocMutant::LufD3RefillDrops),
            _ => None,
        });
        let cpus = (0..nr_cpus)
            .map(|i| Cpu {
                tlb: Tlb::new(&prof.tlb),
                irq_debt: 0,
                lru_add: Vec::with_capacity(c.lru_batch),
                curr: u32::MAX,
                rq: Default::default(),
                slice_end: 0,
                node: cpu_node(i),
                landing: Vec::new(),
                tlbstate: Default::default(),
                cache: crate::hw::cache::CpuCache::new(),
            })
            .collect();
        let anon_policy = crate::policy::anon_order(&knobs)?;
        let fault_lock = crate::policy::fault_lock(&knobs)?;
        let promotion = crate::policy::promotion(&knobs)?;
        let mut k = Kernel {
            mem_map: MemMap::new(start),
            c,
            lc,
            sc,
            knobs,
            cpus,
            nodes,
            pa,
            mms: Vec::new(),
            tasks: Vec::new(),
            inodes: Vec::new(),
            stat: VmStat::default(),
            check: Checker::new(check),
            zero_pfn: 0,
            next_anon_vma: 1,
            fault_kernel_mode: false,
            fault_trace: Vec::new(),
            fault_trace_ctx: (0, 0, 0),
            kthreads: Vec::new(),
            wakeups: Vec::new(),
            scratch_dead: Vec::new(),
            fault_vma: None,
            host: None,
            prdev: None,
            anon_order0_only: anon_policy.order0_only(),
            anon_paths: anon_policy.paths(),
            anon_policy,
            fault_lock,
            promotion,
            split_queues: Vec::new(),
            mthp: Default::default(),
            tier: crate::mm::memory_tiers::TierState::new(&prof),
            luf: Default::default(),
            luf_lock: Default::default(),
            irqs_off: false,
            trace: Default::default(),
            prof,
        };
        k.split_queues = (0..k.nodes.len()).map(|_| Default::default()).collect();
        k.pa.init_vmstat(&mut k.stat);
        // The shared zero page: allocated once, never freed, never refcounted by mappings.
        let zp = k.pa.alloc_pages(0, 0, 0, 0, MigrateType::Unmovable, &mut k.stat).ok_or("no memory for the zero page")?;
        k.zero_pfn = zp.pfn;
        if k.knobs.demotion_enabled || k.knobs.numa_balancing & crate::mm::memory_tiers::NUMA_BALANCING_MEMORY_TIERING != 0 {
            k.spawn_kswapds();
        }
        let p = k.mem_map.get_mut(zp.pfn);
        p.flags = pg::ZERO_PAGE | pg::ALLOCATED | pg::HEAD;
        p.refcount = 1;
        p.nid = zp.nid as u8;
        k.boot_virt(start);
        Ok(k)
    }

    /// The machine as a VM guest: a host under its memory (when a host
    /// knob or page reporting asks for one) and the virtio-balloon device
    /// with free page reporting.
    fn boot_virt(&mut self, nr_frames: u64) {
        let kn = &self.knobs;
        let want_host = kn.page_reporting || kn.host_mem_mib > 0 || kn.host_prealloc || kn.host_thp || kn.host_discard_free;
        if want_host {
            use crate::virt::host::{Discard, Host, HostCosts};
            let discard = if kn.host_discard_free { Discard::Free } else { Discard::DontNeed };
            let limit = (kn.host_mem_mib > 0).then_some(kn.host_mem_mib << (20 - 12));
            let h = Host::new(nr_frames, HostCosts::from_profile(&self.prof), discard, kn.host_thp, limit, kn.host_prealloc);
            h.sync_gauges(&mut self.stat);
            self.host = Some(h);
        }
        if self.knobs.page_reporting {
            self.page_reporting_register(0);
        }
    }

    /// The task running on `cpu` (the last task when the CPU is idle): whose
    /// unmap batches a reclaim or migration there uses.
    pub fn current_tid(&self, cpu: u32) -> u32 {
        self.cpus[cpu as usize].curr.min(self.tasks.len().saturating_sub(1) as u32)
    }

    pub fn nr_cpus(&self) -> u32 {
        self.cpus.len() as u32
    }

    pub fn mem_bytes(&self) -> u64 {
        self.nodes.iter().map(|n| n.nr_pages << 12).sum()
    }

    #[inline]
    pub fn pfn_to_nid(&self, pfn: Pfn) -> u32 {
        for n in &self.nodes {
            if pfn >= n.start_pfn && (pfn as u64) < n.start_pfn as u64 + n.nr_pages {
                return n.id;
            }
        }
        0
    }

    pub fn new_mm(&mut self) -> u32 {
        let id = self.mms.len() as u32;
        self.mms.push(Mm::new(id, self.nr_cpus()));
        self.mms[id as usize].mmap_lock.rwsem_51 = self.knobs.rwsem_51;
        id
    }
}
