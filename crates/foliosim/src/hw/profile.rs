//! Machine profiles: every cost constant the simulator charges lives here,
//! loaded from `profiles/*.toml`, where each value says where it comes
//! from (hw/provenance.rs); a profile of a machine nobody here has is
//! derived from public figures and a measured host's costs by the rule of
//! hw/derive.rs (docs/profiles.md). Nothing else in the crate may hold a
//! nanosecond figure.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub cpu: CpuSpec,
    pub nodes: Vec<NodeSpec>,
    pub tlb: TlbSpec,
    pub cost: CostSpec,
    /// The hypervisor under the machine when it is a VM guest (virt/).
    pub host: HostSpec,
    /// The file's `[sources]` table: key -> citation, which its `[public:
    /// KEY]` tags name (hw/provenance.rs). Read, then folded into `sources`.
    #[serde(rename = "sources", default, skip_serializing)]
    pub citations: std::collections::BTreeMap<String, String>,
    /// Where each value comes from, by its path (`cost.trap_ns`,
    /// `nodes[1].latency_ns`): read from the file's tags, or written by
    /// the derivation rule. Not part of the profile's numbers.
    #[serde(skip)]
    pub sources: crate::hw::provenance::Sources,
}

/// Costs of the hypervisor seen by a guest (KVM + QEMU), ns: what the host
/// kernel (virt/kvm.rs) does not run as its own code paths. Its faults,
/// zaps, madvise and swap are the host kernel's, priced by the host's
/// profile.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// EPT-violation exit, KVM's fault handling and VM re-entry for a host
    /// page that exists (a MADV_FREE'd page still resident).
    pub ept_violation_ns: f64,
    /// virtqueue round trip of one report: kick exit, VMM handling,
    /// used-ring update, interrupt injection and wake-up of the waiter.
    pub vq_roundtrip_ns: f64,
    /// A VM exit and re-entry with no work between: what a vCPU pays for
    /// the kick IPI of a remote TLB flush (kvm_flush_remote_tlbs), the
    /// flush itself served on entry.
    pub vm_exit_ns: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuSpec {
    /// Logical CPUs.
    pub nr_cpus: u32,
    pub sockets: u32,
    /// Base page size in KiB (4 on x86-64 and the arm64 seeds; 64 on Power).
    #[serde(default = "default_page_kib")]
    pub page_size_kib: u32,
    /// The clock the cores run at under load (all-core turbo where it has
    /// one), GHz: software costs scale with it (hw/derive.rs).
    pub freq_ghz: f64,
    /// The core's microarchitecture, a key of profiles/cores.toml (its
    /// performance per clock and SMT throughput, for the derivation rule);
    /// empty when unknown.
    #[serde(default)]
    pub core: String,
    /// Logical CPUs per core: 2 with SMT (Hyper-Threading). The CPUs of a
    /// socket are numbered core by core, then the second thread of each
    /// (as Linux enumerates them on x86); hw/topology.rs.
    #[serde(default = "default_one")]
    pub threads_per_core: u32,
    /// What a core running a busy thread on each of its SMT siblings
    /// delivers, relative to one thread alone (1.3: each sibling runs at
    /// 1.3 / 2 of its solo speed while the other is busy). Unused without SMT.
    #[serde(default = "default_one_f")]
    pub smt_throughput_ratio: f64,
    /// Private (per core) second-level cache, KiB.
    pub l2_kib: u64,
    /// Last-level cache of a socket, shared by its CPUs, KiB.
    pub llc_kib: u64,
    /// Sustained bandwidth of the link between two sockets, one direction,
    /// GB/s: memory traffic between a CPU and another socket's node shares it.
    pub interconnect_bw_gbps: f64,
}

fn default_page_kib() -> u32 {
    4
}

fn default_one() -> u32 {
    1
}

fn default_one_f() -> f64 {
    1.0
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MemKind {
    Dram,
    Cxl,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub kind: MemKind,
    /// Memory on this node in MiB.
    pub mem_mib: u64,
    /// Whether this node has CPUs (CXL expanders do not). CPUs are spread
    /// evenly over the nodes that have them, in node order.
    pub has_cpus: bool,
    /// Load-to-use latency of a cache-missing access, ns.
    pub latency_ns: f64,
    /// Sustained bandwidth of this node's memory, shared by every CPU
    /// clearing, copying or reading it at the same time (STREAM with every
    /// core of the socket busy; bytes read and bytes written each count),
    /// GB/s. The per-CPU figures below are what one CPU alone reaches.
    pub shared_bw_gbps: f64,
    /// Sustained read bandwidth seen by one CPU, GB/s.
    pub read_bw_gbps: f64,
    /// Bandwidth of clearing a page (clear_page), GB/s.
    pub zero_bw_gbps: f64,
    /// Fixed cost of one clear_page/clear_huge_page call (the CPU's
    /// write-streaming warm-up): clearing one 2^k-page folio costs this once
    /// plus its bytes at zero_bw_gbps.
    pub zero_call_ns: f64,
    /// Bandwidth of copying a page within/into this node (copy_page, copy_to_user), GB/s.
    pub copy_bw_gbps: f64,
    /// This node's row of the firmware's distance table (ACPI SLIT, what
    /// `numactl -H` prints as "node distances"): its distance to every
    /// node, 10 to itself. Empty: Linux's default without a table, 10 to
    /// itself and 20 (REMOTE_DISTANCE) to every other node. Zonelists,
    /// demotion targets and which socket a CPU-less node hangs off follow
    /// it (`Profile::node_distance`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub distance: Vec<u32>,
}

/// LOCAL_DISTANCE and REMOTE_DISTANCE (include/linux/topology.h).
pub const LOCAL_DISTANCE: u32 = 10;
pub const REMOTE_DISTANCE: u32 = 20;

/// node_distance(a, b) from node `a`'s row of a distance table, or
/// Linux's default where the row has no entry (no table).
pub fn slit_distance(row: &[u32], a: usize, b: usize) -> u32 {
    match row.get(b) {
        Some(&d) => d,
        None if a == b => LOCAL_DISTANCE,
        None => REMOTE_DISTANCE,
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlbSpec {
    pub l1d_entries: u32,
    pub l1d_ways: u32,
    pub l1i_entries: u32,
    pub l1i_ways: u32,
    /// L1 dTLB entries for 2 MiB pages.
    pub l1d_2m_entries: u32,
    pub l1d_2m_ways: u32,
    /// Shared (unified) second-level TLB, per CPU.
    pub stlb_entries: u32,
    pub stlb_ways: u32,
    /// STLB also holds 2 MiB entries.
    pub stlb_holds_2m: bool,
    /// Extra latency of an L1 miss that hits the STLB, ns.
    pub stlb_hit_ns: f64,
    /// Page walk on an STLB miss whose page-table lines are not in this
    /// CPU's caches (a walk into a PTE table other than the last one this
    /// CPU walked: a random access over a large range), ns.
    pub walk_ns: f64,
    /// Page walk on an STLB miss into the PTE table this CPU walked last
    /// (its lines cached: a sequential or strided pass, the re-walk after a
    /// fault that just wrote the PTE), ns.
    pub walk_cached_ns: f64,
    /// arm64 contiguous-PTE hint honoured (16 x 4 KiB -> one entry).
    #[serde(default)]
    pub contpte: bool,
    /// HPA-style coalescing of aligned groups of 2^order PTEs (0 = none).
    #[serde(default)]
    pub coalesce_order: u32,
}

/// Software and hardware costs of kernel paths, in nanoseconds unless named otherwise.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostSpec {
    // --- entry/exit
    pub trap_ns: f64,
    pub syscall_ns: f64,
    /// What a page fault costs beyond `trap_ns` and the rest when the
    /// CPU's last kernel entry was a system call rather than a fault: the
    /// fault costs are measured on faults taken back to back, whose entry
    /// and handler find their code and branch state warm; a fault right
    /// after a system call (tlb_flush2's load after its madvise, malloc1's
    /// header store after its mmap) does not.
    pub fault_after_syscall_ns: f64,
    /// What a user fault costs beyond that when a folio was freed on its
    /// CPU since the CPU's last fault: the free path (memcg uncharge, the
    /// pcp list, the zap's TLB flush before it) displaces the fault path's
    /// lines. tlb_flush2's load after its madvise, malloc1's store after
    /// the munmap and mmap before it.
    pub fault_after_free_ns: f64,
    /// What the first folio allocation on a CPU after a free there costs
    /// beyond the fault's `fault_after_free_ns`: the allocation path's own
    /// lines, which a fault that allocates nothing (the zero page's) does
    /// not bring back.
    pub alloc_after_free_ns: f64,
    /// A user-mode memory access that hits the TLB (loop overhead included).
    pub user_access_ns: f64,
    // --- fault path (software part, excluding alloc, zeroing, PTE, rmap, LRU)
    pub fault_base_ns: f64,
    pub vma_lookup_ns: f64,
    /// set_pte_at / set_ptes, per PTE written.
    pub pte_set_ns: f64,
    /// change_pte_range, per present PTE that is looked at and left as it
    /// is (the NUMA-balancing scan skipping a folio): PTE load, folio
    /// lookup and its node and flag tests.
    pub change_pte_scan_ns: f64,
    /// ptep_get_and_clear in zap_pte_range, per PTE (one per PMD for a
    /// PMD-mapped THP, zap_huge_pmd).
    pub pte_clear_ns: f64,
    /// zap_present_folio_ptes' work for a page-cache folio, per PTE, beyond
    /// the clear and the rmap: folio_mark_dirty of a dirty PTE's folio,
    /// folio_mark_accessed of a young one's, the mapped-file statistics.
    pub zap_file_pte_ns: f64,
    /// Per rmap call (one per folio, or per batch of its PTEs when the zap
    /// batches them): the mapcount atomics, rss and NR_ANON accounting.
    pub rmap_ns: f64,
    /// Per page of a large folio mapped or unmapped by PTEs: the per-page
    /// _mapcount and PageAnonExclusive updates of folio_add_new_anon_rmap
    /// and folio_remove_rmap_ptes (a PMD mapping has none).
    pub rmap_page_ns: f64,
    /// Per tail page of a freshly allocated large folio: prep_compound_tail
    /// and post_alloc_hook's per-page work, and folio_zero_user's per-page
    /// clear call and cond_resched (the bytes are charged at the clearing
    /// bandwidth).
    pub prep_tail_ns: f64,
    /// Per large anonymous folio fault (mTHP or PMD THP), its work beyond
    /// the order-0 fault's: thp_vma_allowable_orders, the PTE-range scans
    /// of the candidate orders, folio_prep_large_rmappable, the mTHP
    /// counters (the allocation, clearing and per-page work are charged
    /// apart).
    pub alloc_anon_folio_ns: f64,
    /// Per large anonymous folio freed, its work beyond an order-0 page's:
    /// folio_undo_large_rmappable and the compound page's uncharge and
    /// free_pages_prepare (the tail pages, the zone lock and the buddy
    /// merges are charged apart).
    pub free_large_folio_ns: f64,
    /// Per tail page of a freed large folio: free_pages_prepare's
    /// free_tail_page_prepare check and flag reset.
    pub free_tail_ns: f64,
    /// Bandwidth of clearing a page whose lines are still in the caches (a
    /// page freed recently on this socket, reused while its caches hold it:
    /// cpu.l2_kib, cpu.llc_kib, hw/cache.rs; a cold page clears at the
    /// node's zero_bw_gbps), GB/s.
    pub zero_warm_bw_gbps: f64,
    /// Bandwidth of copying a page-cache page whose lines are in the
    /// caches to or from a user buffer (copy_page_to_iter of read(),
    /// copy_page_from_iter of write(): a file this socket copied lately,
    /// while it fits, hw/cache.rs; a cold one copies at the node's
    /// bandwidth), GB/s.
    pub copy_warm_bw_gbps: f64,
    /// Per folio allocated cold (not a recent free that the caches still
    /// hold, hw/cache.rs): the misses beyond the
    /// clear's (charged at zero_bw_gbps), on the head's struct page, the
    /// free-list links the allocator follows, the flags and refcount
    /// prep_new_page writes; a warm reuse hits them all. Once per folio,
    /// whatever its order.
    pub alloc_cold_ns: f64,
    /// Per large folio allocated cold, its misses beyond alloc_cold_ns:
    /// the folio's fields past the head page (page[1] and page[2] of
    /// struct folio: the mapcounts, the deferred-split list) and the
    /// buddy path of a higher order, which a cold order-0 page taken
    /// from its pcp list does not touch. Once per cold large folio (mTHP
    /// or PMD THP).
    pub alloc_cold_large_ns: f64,
    pub memcg_charge_ns: f64,
    pub lru_add_ns: f64,
    /// Per folio moved while holding lru_lock (batch drain, isolation).
    pub lru_lock_per_folio_ns: f64,
    /// Per-CPU LRU batch size (folio_batch, PAGEVEC_SIZE = 15 in 6.x).
    pub lru_batch: u32,
    // --- page allocator
    pub alloc_pcp_ns: f64,
    /// Putting a freed block on a pcp list (free_unref_folios' list add).
    pub free_pcp_ns: f64,
    /// Per folio freed to the page allocator, whatever its order and
    /// whichever path it takes (a pcp list, or straight to the buddy lists
    /// for orders without one): what folios_put_refs and free_unref_folios
    /// do for every folio before the list operation (the last reference's
    /// atomic, the memcg uncharge, free_pages_prepare's head-page checks).
    /// The list operation is free_pcp_ns or buddy_op_ns apart.
    pub free_folio_ns: f64,
    /// Per batch of up to 31 folios that folios_put_refs frees (the
    /// mmu_gather's release, free_pages_and_swap_cache): the work done
    /// once for the batch whatever its size, mem_cgroup_uncharge_folios'
    /// uncharge_batch (the page counters, the events) and
    /// free_unref_folios' pcp lock round. A one-page MADV_DONTNEED pays it
    /// whole; a 128 MiB munmap spreads it over 31 pages.
    pub folios_put_batch_ns: f64,
    /// Per zap (munmap, MADV_DONTNEED, ...) that gathered a page, whatever
    /// it frees: tlb_finish_mmu's work done once, the flush_tlb_mm_range
    /// call around the per-page flushes (tlb_flush_one_ns) and
    /// free_pages_and_swap_cache's pass (its lru_add_drain, the batch
    /// walk). A zap of part of a large folio pays it and frees nothing.
    pub tlb_gather_ns: f64,
    /// Per block taken from or given to the buddy lists under zone->lock.
    pub buddy_op_ns: f64,
    // --- page tables
    pub pgtable_alloc_ns: f64,
    pub pgtable_free_ns: f64,
    /// Per empty page-table entry an unmap's walks step over: a PMD entry
    /// with no PTE table below it (in a PMD table that exists), a PUD entry
    /// with no PMD table, a PGD entry with no PUD table. unmap_page_range
    /// and free_pgtables (free_pgd_range) each walk every entry of a VMA's
    /// range: a 128 MiB region with one page written has 63 empty PMD
    /// entries, walked twice.
    pub pgtable_none_ns: f64,
    // --- VMA / syscalls
    /// A VMA's first anonymous fault makes its anon_vma
    /// (__anon_vma_prepare: anon_vma and anon_vma_chain allocated, linked
    /// under the anon_vma's lock and page_table_lock).
    pub anon_vma_prepare_ns: f64,
    pub mmap_ns: f64,
    pub munmap_ns: f64,
    /// Per anon_vma an unmap frees with its last VMA (free_pgtables ->
    /// unlink_anon_vmas -> put_anon_vma: the chain unlinked under the
    /// anon_vma's lock, the anon_vma freed).
    pub unlink_anon_vma_ns: f64,
    pub vma_split_ns: f64,
    pub vma_merge_ns: f64,
    pub mprotect_ns: f64,
    pub madvise_ns: f64,
    pub brk_ns: f64,
    pub fork_base_ns: f64,
    /// Per present PTE fork copies (copy_present_pte: the PTE copied, the
    /// parent's write-protected, the folio's reference and rmap dup).
    pub copy_pte_ns: f64,
    pub exit_base_ns: f64,
    // --- page cache and files
    pub pagecache_lookup_ns: f64,
    pub pagecache_insert_ns: f64,
    /// Per folio read() copies out of the page cache, beyond the copy:
    /// filemap_read's batch lookup (filemap_get_read_batch),
    /// folio_mark_accessed and the loop around copy_folio_to_iter.
    pub pagecache_read_ns: f64,
    /// Per folio write() copies into the page cache, beyond the copy:
    /// generic_perform_write's write_begin (the folio looked up and
    /// locked) and write_end (marked dirty, unlocked).
    pub pagecache_write_ns: f64,
    /// Shared-file write fault on a disk file system (page_mkwrite, block reservation).
    pub page_mkwrite_ns: f64,
    /// Reading a page that is not cached from the disk-like file system, ns.
    pub disk_read_ns: f64,
    /// Reclaim writing one dirty page-cache folio back (pageout: the
    /// ->writepage call and bio submission the reclaimer pays; the IO
    /// itself completes asynchronously), ns.
    pub pageout_ns: f64,
    /// Writing one 4 KiB page to the swap device (swap.size_mib): what
    /// reclaim waits for before the page can go (mm/swapfile.rs), ns.
    pub swap_write_4k_ns: f64,
    /// Reading one 4 KiB page back from the swap device (the wait of a
    /// major fault on a swap entry), ns.
    pub swap_read_4k_ns: f64,
    pub file_op_ns: f64,
    /// read() from the page cache as a prefetch stream: copy at copy_bw
    /// while consecutive file pages are physically consecutive, plus one
    /// memory latency at every other page boundary (false: every page
    /// costs read_bw + latency, the older model).
    pub pagecache_read_stream: bool,
    // --- tiering: promotion and migration
    /// The out-of-line call into promotion_candidate and its first tests.
    pub promotion_candidate_ns: f64,
    /// numa_migrate_check + mpol_misplaced + should_numa_migrate_memory.
    pub numa_migrate_check_ns: f64,
    /// Per-folio fixed part of migrate_pages beyond allocation, copy,
    /// xarray store and LRU work: lock, refcount freeze, flag and memcg copy.
    pub migrate_folio_ns: f64,
    // --- TLB maintenance
    pub tlb_flush_one_ns: f64,
    pub tlb_flush_all_ns: f64,
    /// Sender cost per target CPU of a shootdown IPI.
    pub ipi_send_ns: f64,
    /// Receiver: interrupt entry/exit plus the flush itself.
    pub ipi_recv_ns: f64,
    /// Round trip until the slowest acknowledgement arrives (beyond sending).
    pub ipi_ack_ns: f64,
    /// Above this many pages a ranged flush becomes a full flush (x86 tlb_single_page_flush_ceiling = 33).
    pub tlb_flush_ceiling: u32,
    // --- coherence and scheduling
    /// Atomic RMW on a line this CPU already holds exclusive.
    pub cacheline_local_ns: f64,
    /// Exclusive transfer of a line (an RMW or store taking it, or a load
    /// of a line modified elsewhere) from another CPU of the same socket.
    pub cacheline_same_socket_ns: f64,
    /// The same from a CPU on another socket.
    pub cacheline_cross_socket_ns: f64,
    /// Shared read miss: a load of a line clean in another cache of the
    /// same socket.
    pub cacheline_read_same_socket_ns: f64,
    /// A load of a line clean only in a cache on another socket.
    pub cacheline_read_cross_socket_ns: f64,
    /// How long a writer spins on a reader-owned rwsem before it sleeps
    /// (5.3+ rwsem_rspin_threshold; a 5.1 writer never spins on readers).
    pub spin_limit_ns: f64,
    pub context_switch_ns: f64,
    /// list_add/list_del of one folio on the deferred-split queue, held under split_queue_lock.
    pub split_queue_ns: f64,
    /// Fixed part of execve (bprm setup, ELF header checks, de_thread,
    /// setup_new_exec, setup_arg_pages); the old mm's teardown, the segment
    /// mappings, the header read and the argument-page fault are charged
    /// separately.
    pub exec_base_ns: f64,
}

/// Profiles shipped with foliosim, embedded at build time.
pub const BUILTIN: &[(&str, &str)] = &[
    ("generic-x86", include_str!("../../../../profiles/generic-x86.toml")),
    ("ampere-altra-160", include_str!("../../../../profiles/ampere-altra-160.toml")),
    ("e5-2630v3-guest-32g", include_str!("../../../../profiles/e5-2630v3-guest-32g.toml")),
    ("cxl-1tb", include_str!("../../../../profiles/cxl-1tb.toml")),
    ("cxl-2s", include_str!("../../../../profiles/cxl-2s.toml")),
    ("luf-llama-tiered", include_str!("../../../../profiles/luf-llama-tiered.toml")),
    ("luf-xsbench-qemu", include_str!("../../../../profiles/luf-xsbench-qemu.toml")),
    ("skl-2s-72", include_str!("../../../../profiles/skl-2s-72.toml")),
    ("bdw-2s-48", include_str!("../../../../profiles/bdw-2s-48.toml")),
];

pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// What a number in a profile measures, told by its key's name: the unit
/// suffix (`_ns`, `_gbps`, ...) or, for counts, the name's form. Every
/// number a profile may hold must match one (the unit test
/// `every_profile_number_has_a_unit` checks every field), so a field added
/// later is range-checked without a check of its own.
pub struct Unit {
    /// What the unit is, for the error.
    pub what: &'static str,
    pub lo: f64,
    /// Whether `lo` itself is admitted (a bandwidth of 0 is not).
    pub lo_ok: bool,
    pub hi: f64,
}

/// Key name patterns and their units, first match wins: `*x` is a suffix,
/// `x*` a prefix, anything else the whole name.
const UNITS: &[(&str, Unit)] = &[
    ("*_ns", Unit { what: "a time in ns", lo: 0.0, lo_ok: true, hi: 1e9 }),
    ("*_gbps", Unit { what: "a bandwidth in GB/s", lo: 0.0, lo_ok: false, hi: 1e4 }),
    ("*_ghz", Unit { what: "a frequency in GHz", lo: 0.0, lo_ok: false, hi: 20.0 }),
    ("*_mib", Unit { what: "a size in MiB", lo: 1.0, lo_ok: true, hi: (64u64 << 20) as f64 }),
    ("*_kib", Unit { what: "a size in KiB", lo: 1.0, lo_ok: true, hi: (1u64 << 20) as f64 }),
    ("*_bytes", Unit { what: "a size in bytes", lo: 0.0, lo_ok: true, hi: (1u64 << 40) as f64 }),
    ("*_entries", Unit { what: "a number of TLB entries", lo: 1.0, lo_ok: true, hi: (1u64 << 20) as f64 }),
    ("*_ways", Unit { what: "a TLB associativity", lo: 1.0, lo_ok: true, hi: (1u64 << 20) as f64 }),
    ("*_order", Unit { what: "a page order", lo: 0.0, lo_ok: true, hi: 18.0 }),
    ("*_ratio", Unit { what: "a ratio", lo: 0.0, lo_ok: false, hi: 100.0 }),
    ("*_per_core", Unit { what: "a count per core", lo: 1.0, lo_ok: true, hi: 8.0 }),
    ("nr_*", Unit { what: "a count", lo: 1.0, lo_ok: true, hi: (1u64 << 20) as f64 }),
    ("*_batch", Unit { what: "a count", lo: 1.0, lo_ok: true, hi: (1u64 << 20) as f64 }),
    ("*_ceiling", Unit { what: "a count", lo: 0.0, lo_ok: true, hi: (1u64 << 20) as f64 }),
    ("sockets", Unit { what: "a count", lo: 1.0, lo_ok: true, hi: 4096.0 }),
    ("distance", Unit { what: "a node distance (the SLIT's)", lo: 10.0, lo_ok: true, hi: 254.0 }),
];

/// The unit of the profile number named `key` (its last path component).
pub fn unit_of(key: &str) -> Option<&'static Unit> {
    UNITS
        .iter()
        .find(|(pat, _)| match (pat.strip_prefix('*'), pat.strip_suffix('*')) {
            (Some(suffix), _) => key.ends_with(suffix),
            (_, Some(prefix)) => key.starts_with(prefix),
            _ => key == *pat,
        })
        .map(|(_, u)| u)
}

/// Where a number stands in a profile: `[table]` (or its `index`-th entry
/// when an array of tables, `[[nodes]]`) and the key.
#[derive(Debug, PartialEq)]
pub struct ValueAt {
    pub table: String,
    pub index: Option<usize>,
    pub key: String,
    pub reason: String,
}

impl ValueAt {
    /// `cost.trap_ns`, `nodes[1].latency_ns`.
    pub fn path(&self) -> String {
        let idx = self.index.map(|i| format!("[{i}]")).unwrap_or_default();
        if self.table.is_empty() {
            self.key.clone()
        } else {
            format!("{}{idx}.{}", self.table, self.key)
        }
    }
}

/// Checks every number of a profile as written (NaN and infinities
/// included, which serde would pass through as f64) against its unit.
pub fn check_values(doc: &toml::Table) -> Result<(), ValueAt> {
    fn walk(t: &toml::Table, table: &str, index: Option<usize>) -> Result<(), ValueAt> {
        for (k, v) in t {
            let at = |reason: String| ValueAt { table: table.to_string(), index, key: k.clone(), reason };
            let x = match v {
                // About the file, not the machine: citations, the derivation's inputs (hw/derive.rs checks them).
                toml::Value::Table(_) if table.is_empty() && (k == "sources" || k == "derive") => continue,
                toml::Value::Table(sub) if table.is_empty() => {
                    walk(sub, k, None)?;
                    continue;
                }
                toml::Value::Array(a) if table.is_empty() && a.iter().all(|e| e.is_table()) => {
                    for (i, e) in a.iter().enumerate() {
                        walk(e.as_table().expect("checked above"), k, Some(i))?;
                    }
                    continue;
                }
                toml::Value::Float(f) => *f,
                toml::Value::Integer(i) => *i as f64,
                _ => continue,
            };
            let Some(u) = unit_of(k) else {
                return Err(at("no unit is known for this key (name it with one: _ns, _gbps, ...)".into()));
            };
            if !x.is_finite() {
                return Err(at(format!("{x} is not a finite number ({})", u.what)));
            }
            let above_lo = if u.lo_ok { x >= u.lo } else { x > u.lo };
            if !(above_lo && x <= u.hi) {
                let range = if u.lo_ok { format!("{} to {}", u.lo, u.hi) } else { format!("above {}, at most {}", u.lo, u.hi) };
                return Err(at(format!("{x} is out of range for {}: expected {range}", u.what)));
            }
        }
        Ok(())
    }
    walk(doc, "", None)
}

impl Profile {
    /// The profile with some numbers replaced (a config's `machine.costs`,
    /// a sensitivity run): each key is a `[cost]` key
    /// (`cacheline_cross_socket_ns`) or `table.key` of `cpu`, `tlb`, `host`
    /// or `nodes` (every node). Values are checked against their unit as
    /// in a profile file. Errors are (key, reason).
    pub fn with_numbers(&self, over: &toml::Table) -> Result<Profile, (String, String)> {
        let toml::Value::Table(mut doc) = toml::Value::try_from(self).map_err(|e| (String::new(), e.to_string()))? else {
            unreachable!("a profile serialises to a table")
        };
        for (k, v) in over {
            let err = |reason: &str| (k.clone(), reason.to_string());
            let x = match v {
                toml::Value::Float(f) => *f,
                toml::Value::Integer(i) => *i as f64,
                v => return Err(err(&format!("expected a number, got {}", v.type_str()))),
            };
            let (table, key) = k.split_once('.').unwrap_or(("cost", k));
            let tables: Vec<&mut toml::Table> = match doc.get_mut(table) {
                Some(toml::Value::Table(t)) if table != "nodes" => vec![t],
                Some(toml::Value::Array(a)) if table == "nodes" => a.iter_mut().filter_map(|n| n.as_table_mut()).collect(),
                _ => return Err(err("unknown profile table (a [cost] key, or cost., cpu., tlb., host. or nodes. and a key)")),
            };
            for t in tables {
                match t.get_mut(key) {
                    Some(toml::Value::Float(old)) => *old = x,
                    Some(toml::Value::Integer(old)) if x.fract() == 0.0 && x.abs() < i64::MAX as f64 => *old = x as i64,
                    Some(toml::Value::Integer(_)) => return Err(err(&format!("expected an integer, got {x}"))),
                    Some(_) => return Err(err("not a number in the profile")),
                    None => {
                        return Err(err(&format!("unknown profile key (the profile's [{table}] has no {key}; `foliosim list profiles`)")))
                    }
                }
            }
        }
        // A value out of range is named as the caller wrote its key
        // (`trap_ns`, `nodes.latency_ns`), not by its place in the profile.
        check_values(&doc).map_err(|at| {
            let written = over.keys().find(|k| {
                let (table, key) = k.split_once('.').unwrap_or(("cost", k));
                table == at.table && key == at.key
            });
            (written.cloned().unwrap_or_else(|| at.path()), at.reason)
        })?;
        let mut p: Profile = toml::Value::Table(doc).try_into().map_err(|e: toml::de::Error| (String::new(), e.message().to_string()))?;
        p.sources = self.sources.clone();
        for k in over.keys() {
            let (table, key) = k.split_once('.').unwrap_or(("cost", k));
            let set = crate::hw::provenance::Source::new(
                crate::hw::provenance::Kind::Assumed,
                "",
                format!("set by the config's machine.costs ({k})"),
            );
            if table == "nodes" {
                for i in 0..p.nodes.len() {
                    p.sources.insert(format!("nodes[{i}].{key}"), set.clone());
                }
            } else {
                p.sources.insert(format!("{table}.{key}"), set);
            }
        }
        Ok(p)
    }

    pub fn total_mem_mib(&self) -> u64 {
        self.nodes.iter().map(|n| n.mem_mib).sum()
    }

    /// Time to stream `bytes` at `gbps` GB/s, in ns.
    #[inline]
    pub fn bw_ns(bytes: u64, gbps: f64) -> f64 {
        bytes as f64 / gbps
    }

    /// node_distance(a, b): the profile's table, or Linux's default
    /// without one.
    pub fn node_distance(&self, a: usize, b: usize) -> u32 {
        slit_distance(&self.nodes[a].distance, a, b)
    }

    /// The node with CPUs nearest to node `nid` (itself if it has CPUs):
    /// the socket a CPU-less node hangs off. None when several are equally
    /// near (no table): such a node is as far from every socket.
    pub fn home_cpu_node(&self, nid: usize) -> Option<usize> {
        if self.nodes[nid].has_cpus {
            return Some(nid);
        }
        let near = |i: &usize| self.node_distance(nid, *i);
        let cpu: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.nodes[i].has_cpus).collect();
        let best = cpu.iter().map(near).min()?;
        let at_best: Vec<usize> = cpu.into_iter().filter(|i| near(i) == best).collect();
        (at_best.len() == 1).then(|| at_best[0])
    }

    /// Semantic checks serde cannot express. Returns (key, reason).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.cpu.nr_cpus == 0 || self.cpu.nr_cpus > 4096 {
            return Err(("cpu.nr_cpus".into(), format!("must be 1..=4096, got {}", self.cpu.nr_cpus)));
        }
        if self.cpu.sockets == 0 || !self.cpu.nr_cpus.is_multiple_of(self.cpu.sockets) {
            return Err(("cpu.sockets".into(), "must divide cpu.nr_cpus".into()));
        }
        if self.cpu.page_size_kib != 4 {
            return Err(("cpu.page_size_kib".into(), "only 4 KiB base pages are modelled so far".into()));
        }
        if self.cpu.threads_per_core > 2 {
            return Err(("cpu.threads_per_core".into(), "1 or 2: SMT2 is what the model shares a core between".into()));
        }
        if !(self.cpu.nr_cpus / self.cpu.sockets).is_multiple_of(self.cpu.threads_per_core) {
            return Err(("cpu.threads_per_core".into(), "must divide the CPUs of a socket (cpu.nr_cpus / cpu.sockets)".into()));
        }
        if self.nodes.is_empty() {
            return Err(("nodes".into(), "a machine needs at least one memory node".into()));
        }
        if !self.nodes.iter().any(|n| n.has_cpus) {
            return Err(("nodes".into(), "at least one node must have CPUs".into()));
        }
        if self.nodes.len() > 64 {
            return Err(("nodes".into(), "at most 64 nodes".into()));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.mem_mib < 64 {
                return Err((format!("nodes[{i}].mem_mib"), "a node needs at least 64 MiB".into()));
            }
            if n.mem_mib > 64 * 1024 * 1024 {
                return Err((format!("nodes[{i}].mem_mib"), "more than 64 TiB on one node".into()));
            }
            for (k, v) in [
                ("latency_ns", n.latency_ns),
                ("shared_bw_gbps", n.shared_bw_gbps),
                ("read_bw_gbps", n.read_bw_gbps),
                ("zero_bw_gbps", n.zero_bw_gbps),
                ("copy_bw_gbps", n.copy_bw_gbps),
            ] {
                if !(v > 0.0 && v.is_finite()) {
                    return Err((format!("nodes[{i}].{k}"), "must be a positive number".into()));
                }
            }
        }
        let tables = self.nodes.iter().filter(|n| !n.distance.is_empty()).count();
        if tables != 0 {
            let nn = self.nodes.len();
            for (i, n) in self.nodes.iter().enumerate() {
                let key = format!("nodes[{i}].distance");
                if n.distance.len() != nn {
                    return Err((key, format!("needs one distance per node ({nn}): every node has a row or none does")));
                }
                for (j, &d) in n.distance.iter().enumerate() {
                    if (i == j) != (d == LOCAL_DISTANCE) || !(LOCAL_DISTANCE..=254).contains(&d) {
                        return Err((key, format!("entry {j} is {d}: 10 to itself, 11..=254 to other nodes (the SLIT's range)")));
                    }
                }
            }
        }
        let max_mib = crate::types::MAX_NR_FRAMES >> (20 - crate::types::PAGE_SHIFT);
        if self.total_mem_mib() > max_mib {
            return Err((
                "nodes".into(),
                format!("{} MiB in all: at most {max_mib} MiB (16 TiB less 1 MiB) is supported (32-bit PFNs)", self.total_mem_mib()),
            ));
        }
        let t = &self.tlb;
        for (k, e, w) in [
            ("l1d", t.l1d_entries, t.l1d_ways),
            ("l1i", t.l1i_entries, t.l1i_ways),
            ("l1d_2m", t.l1d_2m_entries, t.l1d_2m_ways),
            ("stlb", t.stlb_entries, t.stlb_ways),
        ] {
            if w == 0 || e == 0 || e % w != 0 || !(e / w).is_power_of_two() {
                return Err((format!("tlb.{k}_entries"), format!("{e} entries / {w} ways must give a power-of-two number of sets")));
            }
        }
        for (k, v) in [("cost.zero_warm_bw_gbps", self.cost.zero_warm_bw_gbps), ("cost.copy_warm_bw_gbps", self.cost.copy_warm_bw_gbps)] {
            if !(v > 0.0 && v.is_finite()) {
                return Err((k.into(), "must be a positive number".into()));
            }
        }
        if self.cost.lru_batch == 0 {
            return Err(("cost.lru_batch".into(), "must be at least 1".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each number of each built-in profile, set to NaN, to infinity or
    /// below its unit's range, is refused, naming the key.
    #[test]
    fn check_values_refuses_every_bad_number() {
        fn numbers(t: &toml::Table) -> Vec<(String, Option<usize>, String)> {
            let mut out = Vec::new();
            for (k, v) in t.iter().filter(|(k, _)| *k != "derive") {
                match v {
                    toml::Value::Table(sub) => {
                        out.extend(sub.iter().filter(|(_, x)| x.is_float() || x.is_integer()).map(|(kk, _)| (k.clone(), None, kk.clone())))
                    }
                    toml::Value::Array(a) => {
                        for (i, e) in a.iter().enumerate() {
                            let e = e.as_table().unwrap();
                            out.extend(
                                e.iter().filter(|(_, x)| x.is_float() || x.is_integer()).map(|(kk, _)| (k.clone(), Some(i), kk.clone())),
                            );
                        }
                    }
                    _ => {}
                }
            }
            out
        }
        fn slot<'a>(doc: &'a mut toml::Table, table: &str, index: Option<usize>, key: &str) -> &'a mut toml::Value {
            let t = match index {
                None => doc.get_mut(table).unwrap().as_table_mut().unwrap(),
                Some(i) => doc.get_mut(table).unwrap().as_array_mut().unwrap()[i].as_table_mut().unwrap(),
            };
            t.get_mut(key).unwrap()
        }
        let mut checked = 0;
        for (name, text) in BUILTIN {
            let doc: toml::Table = text.parse().unwrap();
            assert_eq!(check_values(&doc), Ok(()), "built-in profile {name}");
            for (table, index, key) in numbers(&doc) {
                let lo = unit_of(&key).unwrap().lo;
                for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, lo - 1.0, 1e300] {
                    let mut d = doc.clone();
                    *slot(&mut d, &table, index, &key) = toml::Value::Float(bad);
                    let e = check_values(&d).expect_err(&format!("{name}: {table}.{key} = {bad} was accepted"));
                    assert_eq!((e.table.as_str(), e.index, e.key.as_str()), (table.as_str(), index, key.as_str()), "{name}: {}", e.reason);
                }
                checked += 1;
            }
        }
        assert!(checked > 200, "{checked} numbers checked");
    }

    /// cxl-2s's table: each CXL node hangs off the socket of the DRAM node
    /// nearest to it; without a table a CPU-less node is as near to every
    /// socket; a table missing a row or with a bad entry is refused.
    #[test]
    fn node_distances_place_cpu_less_nodes_and_are_checked() {
        let cfg = "[machine]\nprofile = \"cxl-2s\"\n[workload]\nname = \"page_fault1\"\n";
        let two = crate::config::from_toml(cfg, "<test>").unwrap().profile;
        assert_eq!(two.validate(), Ok(()));
        assert_eq!((0..4).map(|n| two.home_cpu_node(n)).collect::<Vec<_>>(), vec![Some(0), Some(1), Some(0), Some(1)]);
        assert_eq!((two.node_distance(0, 3), two.node_distance(3, 3)), (24, 10));
        let mut flat = two.clone();
        for n in &mut flat.nodes {
            n.distance.clear();
        }
        assert_eq!(flat.home_cpu_node(2), None);
        assert_eq!((flat.node_distance(0, 3), flat.node_distance(2, 2)), (REMOTE_DISTANCE, LOCAL_DISTANCE));
        let mut short = two.clone();
        short.nodes[1].distance.pop();
        assert_eq!(short.validate().unwrap_err().0, "nodes[1].distance");
        let mut bad = two.clone();
        bad.nodes[2].distance[2] = 12;
        assert_eq!(bad.validate().unwrap_err().0, "nodes[2].distance");
        let mut bad = two;
        bad.nodes[0].distance[1] = 10;
        assert_eq!(bad.validate().unwrap_err().0, "nodes[0].distance");
    }

    #[test]
    fn builtin_names_are_unique() {
        let mut names: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), BUILTIN.len());
    }
}
