//! The simulated kernel: one struct holding the machine and all mm state.
//! Its methods are spread over the files of `mm/` (memory.rs holds the
//! fault paths, mmu_gather.rs the freeing after a TLB flush, ...) like Linux's functions
//! over its files; `kernel/syscalls.rs` dispatches a workload's operations.

mod boot;
pub mod costs;
pub mod knobs;
pub mod kthread;
mod luf;
mod memory_tiers;
mod page_reporting;
pub mod syscalls;
pub mod task;
pub mod trace;
pub mod wait;

use crate::check::checker::Checker;
use crate::hw::profile::Profile;
use crate::hw::tlb::Tlb;
use crate::mm::fs::Inode;
use crate::mm::mem_map::MemMap;
use crate::mm::mmzone::LruVec;
use crate::mm::page_alloc::PageAlloc;
use crate::mm::vma::Mm;
use crate::mm::vmstat::VmStat;
use crate::mm::Pfn;
use crate::sim::lock::{LineCost, SleepCost};
use crate::sim::Ns;
use costs::Costs;
use knobs::Knobs;
use task::Task;

/// In `Kernel::wakeups`: not a task, but the host kernel under this guest
/// woke a thread of its own.
pub(crate) const HOST_WOKE: u32 = u32::MAX;

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
    /// When the last step run here ended: while it runs, an SMT sibling's
    /// steps share the core (Kernel::smt_share).
    pub busy_until: Ns,
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
    /// Reading 4 KiB as part of a prefetched stream (read_bw alone).
    pub stream_4k: Ns,
    /// The node's memory bandwidth, shared by every CPU clearing, copying
    /// or reading it at once (nodes[].shared_bw_gbps).
    pub bw: crate::sim::bw::BwServer,
    /// For a node with CPUs: the link into its socket from the others'
    /// memory (cpu.interconnect_bw_gbps).
    pub link: crate::sim::bw::BwServer,
    /// The node with CPUs whose socket this node hangs off (itself for a
    /// node with CPUs; Profile::home_cpu_node): memory traffic from another
    /// socket's CPU crosses the link. None: as near to every socket.
    pub home: Option<u32>,
    /// pgdat->kswapd_failures: kswapd runs (balance_pgdat) in a row that
    /// reclaimed nothing; any reclaim progress on the node resets it.
    pub kswapd_failures: u32,
    /// The node's kswapd: the balance_pgdat run in progress, which spans
    /// several of its steps (mm/kswapd.rs).
    pub kswapd_run: Option<crate::mm::mmzone::KswapdRun>,
}

pub struct Kernel {
    pub(crate) prof: Profile,
    pub(crate) c: Costs,
    pub(crate) lc: LineCost,
    pub(crate) sc: SleepCost,
    pub(crate) knobs: Knobs,
    pub(crate) cpus: Vec<Cpu>,
    /// What each socket's caches hold of the pages freed on it (hw/cache.rs).
    pub(crate) llc: crate::hw::cache::Llc,
    /// Sockets, cores and SMT siblings (hw/topology.rs).
    pub(crate) topo: crate::hw::topology::Topology,
    pub(crate) nodes: Vec<Node>,
    pub(crate) pa: PageAlloc,
    pub(crate) mem_map: MemMap,
    pub(crate) mms: Vec<Mm>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) inodes: Vec<Inode>,
    pub(crate) stat: VmStat,
    pub(crate) check: Checker,
    pub(crate) zero_pfn: Pfn,
    pub(crate) next_anon_vma: u32,
    /// A fault being taken on the kernel's behalf (MAP_POPULATE), not from
    /// a user-mode trap: the fast fault-locking paths are not tried.
    pub(crate) fault_kernel_mode: bool,
    /// Fault-locking events recorded with `debug.fault_trace` > 0.
    pub(crate) fault_trace: Vec<crate::mm::fault_lock::FaultTraceEvent>,
    /// (time, cpu, address) of the fault being handled, for the trace.
    pub(crate) fault_trace_ctx: (Ns, u32, u64),
    /// Tasks made runnable by the kernel during a step, for the driver's
    /// run queue; `HOST_WOKE` in place of a task: the host kernel under
    /// this guest woke one of its own threads (the driver ends the step's
    /// run so that the host's thread runs in time, virt/guests.rs).
    pub(crate) wakeups: Vec<(Ns, u32)>,
    /// Tasks not known to have exited, and how many of `tasks` were looked
    /// at: fork balancing counts the runnable ones per CPU (mm/fork.rs).
    pub(crate) live_tasks: Vec<u32>,
    pub(crate) live_seen: usize,
    /// Reused buffer of folios whose last reference went (release_folios).
    pub(crate) scratch_dead: Vec<Pfn>,
    /// The hypervisor backing this machine's memory, when it is modelled
    /// as a VM guest (virt/).
    pub(crate) host: Option<crate::virt::Host>,
    /// The registered free-page-reporting device (mm/page_reporting.rs).
    pub(crate) prdev: Option<crate::mm::page_reporting::PageReportingDev>,
    /// Large anonymous folios: the order policy, the deferred-split queues
    /// (one per node: no memcg) and the per-size stats.
    pub(crate) anon_policy: Box<dyn crate::mm::huge_mm::AnonOrderPolicy>,
    /// `anon_policy.order0_only()`, read once: every anonymous fault asks,
    /// and the default policy's answer spares it a virtual call.
    pub(crate) anon_order0_only: bool,
    /// `anon_policy.paths()`, read once.
    pub(crate) anon_paths: crate::mm::huge_mm::AnonPaths,
    /// The fault-locking policy (`fault_locking`, mm/mmap_lock.rs).
    pub(crate) fault_lock: &'static dyn crate::mm::fault_lock::FaultLockPolicy,
    /// The page-cache promotion policy (`promotion_list_order`, mm/memory_tiers.rs).
    pub(crate) promotion: Box<dyn crate::mm::memory_tiers::PromotionPolicy>,
    pub(crate) split_queues: Vec<crate::mm::huge_mm::SplitQueue>,
    pub(crate) mthp: crate::mm::huge_mm::MthpStats,
    /// Memory tiers, promotion lists, kswapd threads (mm/memory_tiers.rs).
    pub(crate) tier: crate::mm::memory_tiers::TierState,
    /// Lazy unmap flush pending sets and luf_lock (mm/luf.rs).
    pub(crate) luf: crate::mm::luf::Luf,
    /// The swap device (`swap.size_mib`; no slots without one).
    pub(crate) swap: crate::mm::swapfile::SwapInfo,
    /// The code running now has IRQs disabled (an atomic allocation).
    pub(crate) irqs_off: bool,
    /// Tracepoints (`[run] probes`), all off unless the config asks.
    pub(crate) trace: trace::Tracing,
    /// The random stream of ASLR's mmap bases (arch/x86/mm/mmap.rs).
    pub(crate) aslr: crate::sim::rng::Rng,
}

/// What the crate's integration tests (tests/*.rs) and benchmarks read of
/// a kernel, and the few things they set up by hand (a task placed on a
/// CPU, a check switched on, a mutant installed): the fields themselves
/// are the crate's. Nothing outside the crate is an interface to them.
impl Kernel {
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }
    pub fn task_mut(&mut self, tid: u32) -> &mut Task {
        &mut self.tasks[tid as usize]
    }
    pub fn mms(&self) -> &[Mm] {
        &self.mms
    }
    pub fn mm_mut(&mut self, id: u32) -> &mut Mm {
        &mut self.mms[id as usize]
    }
    pub fn cpus(&self) -> &[Cpu] {
        &self.cpus
    }
    pub fn cpu_mut(&mut self, cpu: u32) -> &mut Cpu {
        &mut self.cpus[cpu as usize]
    }
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    pub fn inodes(&self) -> &[Inode] {
        &self.inodes
    }
    pub fn inode_mut(&mut self, ino: u32) -> &mut Inode {
        &mut self.inodes[ino as usize]
    }
    pub fn pa(&self) -> &PageAlloc {
        &self.pa
    }
    pub fn pa_mut(&mut self) -> &mut PageAlloc {
        &mut self.pa
    }
    /// The allocator and the counters its calls update (PageAlloc's
    /// methods take them as an argument).
    pub fn pa_stat_mut(&mut self) -> (&mut PageAlloc, &mut VmStat) {
        (&mut self.pa, &mut self.stat)
    }
    pub fn mem_map(&self) -> &MemMap {
        &self.mem_map
    }
    pub fn mem_map_mut(&mut self) -> &mut MemMap {
        &mut self.mem_map
    }
    pub fn stat(&self) -> &VmStat {
        &self.stat
    }
    pub fn check(&self) -> &Checker {
        &self.check
    }
    pub fn mthp(&self) -> &crate::mm::huge_mm::MthpStats {
        &self.mthp
    }
    pub fn tier(&self) -> &crate::mm::memory_tiers::TierState {
        &self.tier
    }
    pub fn luf_mut(&mut self) -> &mut crate::mm::luf::Luf {
        &mut self.luf
    }
    pub fn swap(&self) -> &crate::mm::swapfile::SwapInfo {
        &self.swap
    }
    pub fn trace(&self) -> &trace::Tracing {
        &self.trace
    }
    /// Switch the tracepoints on (`[run] probes` does it for a run).
    pub fn set_tracing(&mut self, t: trace::Tracing) {
        self.trace = t;
    }
    pub fn host(&self) -> Option<&crate::virt::Host> {
        self.host.as_ref()
    }
    /// The hypervisor this kernel runs under: set by the guests' driver,
    /// and by tests that put a guest on a host they built.
    pub fn host_mut(&mut self) -> &mut Option<crate::virt::Host> {
        &mut self.host
    }
    pub fn prdev(&self) -> Option<&crate::mm::page_reporting::PageReportingDev> {
        self.prdev.as_ref()
    }
    pub fn fault_trace(&self) -> &[crate::mm::fault_lock::FaultTraceEvent] {
        &self.fault_trace
    }
}

impl Kernel {
    /// A step ran on `cpu` from `start` to `end`: while the CPU's SMT
    /// sibling was busy too, the two threads shared the core, each running
    /// at smt_throughput_ratio / 2 of its solo speed, so the part of the
    /// step the sibling was busy for takes 2 / ratio times as long. The
    /// sibling is busy until the end of its last step and, while a task
    /// runs there, again from that task's next step on. Returns the step's
    /// end; the sibling's next step sees this one the same way. Without
    /// SMT, `end`.
    #[inline(always)]
    pub fn smt_share(&mut self, cpu: u32, start: Ns, end: Ns) -> Ns {
        if self.c.smt_stretch_per_mille == 0 {
            return end;
        }
        let mut end = end;
        if let (Some(s), true) = (self.topo.sibling(cpu), end > start) {
            let sib = &self.cpus[s as usize];
            let mut overlap = end.min(sib.busy_until).saturating_sub(start);
            if sib.curr != u32::MAX {
                let next = self.tasks[sib.curr as usize].clock.max(sib.busy_until).max(start);
                overlap += end.saturating_sub(next);
            }
            end += overlap * self.c.smt_stretch_per_mille / 1000;
        }
        self.cpus[cpu as usize].busy_until = end;
        end
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

    /// A new task of `mm`, placed on `cpu`; its id.
    pub fn new_task(&mut self, mm: u32, cpu: u32) -> u32 {
        let id = self.tasks.len() as u32;
        self.tasks.push(Task::new(id, mm, cpu, 0));
        self.mms[mm as usize].cpumask_set(cpu);
        id
    }

    /// A new file of `size` bytes on `fs`, no page of it cached; its inode number.
    pub fn new_inode(&mut self, fs: crate::workload::FsKind, size: u64) -> u32 {
        let id = self.inodes.len() as u32;
        self.inodes.push(Inode::new(id, fs, size));
        id
    }

    /// `new_inode` with every page of it on disk (data, not a hole), as a
    /// file written before boot: its first reads read it in.
    pub fn new_inode_on_disk(&mut self, fs: crate::workload::FsKind, size: u64) -> u32 {
        let id = self.new_inode(fs, size);
        self.inodes[id as usize].data_pages = size.div_ceil(4096);
        id
    }
}
