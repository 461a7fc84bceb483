//! Counters, named as in /proc/vmstat (plus foliosim's own, prefixed where no
//! Linux name exists). Events only ever grow; gauges (`nr_*`) go up and down.

macro_rules! stats {
    ($($id:ident = $name:literal : $help:literal,)*) => {
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Stat { $($id,)* }
        pub const NR_STATS: usize = [$(Stat::$id,)*].len();
        pub const STAT_NAMES: [&str; NR_STATS] = [$($name,)*];
        pub const STAT_HELP: [&str; NR_STATS] = [$($help,)*];
    };
}

stats! {
    // gauges
    NrFreePages = "nr_free_pages" : "free base pages in the buddy allocator and per-CPU lists",
    NrAnonPages = "nr_anon_pages" : "anonymous pages mapped by page tables",
    NrFilePages = "nr_file_pages" : "pages in the page cache",
    NrMapped = "nr_mapped" : "page-cache pages mapped by page tables",
    NrShmem = "nr_shmem" : "tmpfs (shmem) pages in the page cache",
    NrDirty = "nr_dirty" : "dirty page-cache pages",
    NrInactiveAnon = "nr_inactive_anon" : "pages on the inactive anon LRU",
    NrActiveAnon = "nr_active_anon" : "pages on the active anon LRU",
    NrInactiveFile = "nr_inactive_file" : "pages on the inactive file LRU",
    NrActiveFile = "nr_active_file" : "pages on the active file LRU",
    NrPageTablePages = "nr_page_table_pages" : "page-table pages (all levels)",
    NrZeroPageMapped = "foliosim_zero_page_ptes" : "PTEs mapping the shared zero page",
    // free page reporting and the hypervisor host (gauges)
    NrPageReportingIsolated = "foliosim_page_reporting_isolated_pages" : "base pages isolated by the page-reporting worker (in its scatterlist)",
    NrReportedPages = "foliosim_page_reporting_flagged_pages" : "base pages in PG_reported blocks on the free lists",
    HostRss = "foliosim_host_rss_pages" : "guest-physical 4 KiB pages backed by host memory (MADV_FREE'd ones included until reclaimed)",
    HostLazyfree = "foliosim_host_lazyfree_pages" : "backed guest pages the host holds as MADV_FREE (LazyFree)",
    HostSwap = "foliosim_host_swap_pages" : "guest pages the host has swapped out",
    HostMemFree = "foliosim_host_memfree_pages" : "the host kernel's free pages (its nr_free_pages)",
    NrAnonLarge = "foliosim_nr_anon_large_pages" : "pages in large (order >= 2) anonymous folios that are allocated",
    SplitQueueLen = "foliosim_split_queue_len" : "folios on the deferred-split queues (split_queue_len summed over nodes)",
    NrIsolatedFile = "nr_isolated_file" : "file pages isolated from the LRU (promotion lists, reclaim, migration)",
    NrIsolatedAnon = "nr_isolated_anon" : "anonymous pages isolated from the LRU (migration)",
    SwapUsed = "foliosim_swap_used_pages" : "swap slots in use (SwapTotal - SwapFree in /proc/meminfo)",
    // events
    Pgfault = "pgfault" : "page faults of any kind",
    Pgmajfault = "pgmajfault" : "faults that needed I/O",
    PgallocNormal = "pgalloc_normal" : "base pages allocated from ZONE_NORMAL",
    Pgfree = "pgfree" : "base pages freed",
    Pgactivate = "pgactivate" : "pages moved to an active LRU",
    Pgdeactivate = "pgdeactivate" : "pages moved to an inactive LRU",
    Pgrefill = "pgrefill" : "active pages scanned for deactivation",
    PgscanDirect = "pgscan_direct" : "pages scanned by direct reclaim",
    PgstealDirect = "pgsteal_direct" : "pages reclaimed by direct reclaim",
    PgscanKswapd = "pgscan_kswapd" : "pages scanned by kswapd",
    PgstealKswapd = "pgsteal_kswapd" : "pages reclaimed by kswapd",
    PgstealAnon = "pgsteal_anon" : "pages reclaimed from the anon LRUs (kswapd and direct, demoted ones included)",
    PgstealFile = "pgsteal_file" : "pages reclaimed from the file LRUs (page cache and lazily freed anon)",
    Pgreuse = "pgreuse" : "write faults that reused the page in place (wp_page_reuse)",
    Pgpgin = "pgpgin" : "KiB read from the disk-like file system",
    Pswpin = "pswpin" : "pages read back from swap",
    Pswpout = "pswpout" : "pages written out to swap",
    Pglazyfree = "pglazyfree" : "anonymous pages MADV_FREE marked lazily freed",
    Pglazyfreed = "pglazyfreed" : "lazily freed pages reclaim dropped without writing them",
    AllocstallNormal = "allocstall_normal" : "allocations that entered direct reclaim",
    Oom = "oom_kill" : "allocations that failed outright (no reclaimable memory)",
    NrTlbRemoteFlush = "nr_tlb_remote_flush" : "shootdown rounds sent to other CPUs",
    NrTlbRemoteFlushReceived = "nr_tlb_remote_flush_received" : "shootdown IPIs received",
    NrTlbLocalFlushAll = "nr_tlb_local_flush_all" : "full local TLB flushes",
    NrTlbLocalFlushOne = "nr_tlb_local_flush_one" : "single-page local TLB flushes",
    // fault kinds (foliosim; Linux has no vmstat names for these)
    FaultAnon = "foliosim_fault_anon" : "do_anonymous_page write faults that allocated",
    FaultZeroPage = "foliosim_fault_zero_page" : "read faults that mapped the shared zero page",
    FaultCow = "foliosim_fault_cow" : "wp_page_copy: write faults that copied a page",
    FaultFileRead = "foliosim_fault_file_read" : "do_read_fault on file mappings",
    FaultFileShared = "foliosim_fault_file_shared" : "do_shared_fault / wp_page_shared on shared file mappings",
    FaultAroundPages = "foliosim_fault_around_pages" : "extra PTEs mapped by fault-around",
    FaultSpurious = "foliosim_fault_spurious" : "faults that found the PTE already fixed",
    Segv = "foliosim_segv" : "accesses outside any VMA or against its protection",
    // TLB (foliosim; perf names in the comment of each)
    DtlbLoadMisses = "foliosim_dtlb_load_misses" : "dTLB-load-misses: loads missing L1 dTLB and STLB",
    DtlbStoreMisses = "foliosim_dtlb_store_misses" : "dTLB-store-misses",
    ItlbMisses = "foliosim_itlb_misses" : "iTLB-load-misses",
    StlbHits = "foliosim_stlb_hits" : "L1 TLB misses that hit the STLB",
    TlbAccesses = "foliosim_tlb_accesses" : "user memory accesses through the TLB",
    // syscalls
    Mmap = "foliosim_mmap" : "mmap calls",
    Munmap = "foliosim_munmap" : "munmap calls",
    VmaMerge = "foliosim_vma_merge" : "VMAs merged into a neighbour",
    VmaSplit = "foliosim_vma_split" : "VMAs split",
    FileRead = "foliosim_file_read" : "read() calls",
    FileWrite = "foliosim_file_write" : "write() calls",
    Fork = "foliosim_fork" : "fork calls",
    Exit = "foliosim_exit" : "task exits",
    // free page reporting (mm/page_reporting.c)
    PageReportingPasses = "foliosim_page_reporting_passes" : "runs of page_reporting_process",
    PageReportingCalls = "foliosim_page_reporting_report_calls" : "calls of the device's report() (one scatterlist each)",
    PageReportingReportedPages = "foliosim_page_reporting_reported_pages" : "base pages handed to the host by report()",
    PageReportingBudgetExhausted = "foliosim_page_reporting_budget_exhausted" : "free lists left early because the per-pass budget ran out",
    PageReportingZoneSkipped = "foliosim_page_reporting_zone_skipped" : "zones skipped by the low + 32 << order watermark gate",
    PageReportingIsolateFailed = "foliosim_page_reporting_isolate_failed" : "blocks __isolate_free_page refused (min watermark)",
    PageReportingRequests = "foliosim_page_reporting_requests" : "page_reporting_notify_free calls that found the worker idle and scheduled it",
    // the hypervisor host (foliosim virt/)
    HostFaults = "foliosim_host_faults" : "host page faults that zero-filled a discarded guest page (EPT violation + fault + clear)",
    HostThpFaults = "foliosim_host_thp_faults" : "host faults that backed a whole 2 MiB range with a THP",
    HostZeroedPages = "foliosim_host_zeroed_pages" : "4 KiB units the host zeroed on refault",
    HostLazyfreeReuse = "foliosim_host_lazyfree_reuse" : "guest touches of MADV_FREE'd pages the host still had (EPT refault, no zeroing)",
    HostFaultAllocs = "foliosim_host_fault_allocs" : "guest allocations whose pages needed the host fault path",
    HostDiscardedPages = "foliosim_host_discarded_pages" : "guest 4 KiB pages dropped (MADV_DONTNEED) or marked lazy (MADV_FREE) by reports",
    HostLazyfreeReclaimed = "foliosim_host_lazyfree_reclaimed" : "MADV_FREE'd pages the host dropped under its memory limit",
    HostPswpout = "foliosim_host_pswpout" : "guest pages swapped out by the host under its memory limit",
    HostPswpin = "foliosim_host_pswpin" : "guest pages swapped back in by the host (refaults)",
    KvmRemoteTlbFlush = "foliosim_kvm_remote_tlb_flush" : "KVM remote TLB flushes of this guest's vCPUs (kvm_flush_remote_tlbs after the host dropped SPTEs: each vCPU flushes all and pays a VM exit)",
    // large anonymous folios (docs/mechanisms/large-anon-folios.md)
    ThpFaultAlloc = "thp_fault_alloc" : "PMD-size THPs allocated on a fault",
    ThpFaultFallback = "thp_fault_fallback" : "PMD-size THP faults that fell back to smaller pages",
    ThpDeferredSplitPage = "thp_deferred_split_page" : "large folios queued for deferred split",
    ThpSplitPage = "thp_split_page" : "large folios split to order 0 (by the deferred-split shrinker)",
    ThpSplitPageFailed = "thp_split_page_failed" : "large folios the shrinker could not split (extra references)",
    MthpFaultAlloc = "foliosim_mthp_fault_alloc" : "large (order 2..8) anonymous folios allocated on a fault, all sizes",
    MthpFaultFallback = "foliosim_mthp_fault_fallback" : "large anonymous folio allocations that failed and fell back to a lower order",
    MthpRaceRetry = "foliosim_mthp_race_retry" : "large folios freed because a PTE of the block was filled before the PTL was taken",
    FaultAnonPages = "foliosim_fault_anon_pages" : "pages mapped by do_anonymous_page and zero-page write faults (pages per fault = this / faults)",
    ZeroedBytes = "foliosim_zeroed_bytes" : "bytes cleared for new anonymous folios",
    TlbFillContpte = "foliosim_tlb_fill_contpte" : "TLB fills of a 64 KiB contpte entry",
    TlbFillHpa = "foliosim_tlb_fill_hpa" : "TLB fills of an HPA-coalesced order-2 entry",
    TlbFillPmd = "foliosim_tlb_fill_pmd" : "TLB fills of a 2 MiB entry",
    // lazy unmap flush (docs/mechanisms/lazy-unmap-flush.md; v10 adds no counters, so these are foliosim's)
    LufDeferred = "foliosim_luf_deferred" : "folios whose TLB flush LUF deferred to the page's next exit from the allocator",
    LufGiveupFlushing = "foliosim_luf_giveup_flushing" : "try_to_unmap_luf gave up: an ordinary or LUF flush was in progress",
    LufFlush = "foliosim_luf_flush" : "LUF flushes (check_luf_flush IPI rounds), all triggers",
    LufFlushCpus = "foliosim_luf_flush_cpus" : "CPUs targeted by LUF flushes (divide by foliosim_luf_flush)",
    LufAllocPending = "foliosim_luf_alloc_pending" : "allocator exits that met a page with a LUF generation",
    LufForcedWp = "foliosim_luf_forced_wp" : "forced luf_flush: write-protect fault (do_wp_page)",
    LufForcedMmap = "foliosim_luf_forced_mmap" : "forced luf_flush: mmap with PROT_WRITE",
    LufForcedFault = "foliosim_luf_forced_fault" : "forced luf_flush: a fault installed a writable PTE (v11)",
    LufForcedWrite = "foliosim_luf_forced_write" : "forced luf_flush: file write (v11)",
    LufForcedOther = "foliosim_luf_forced_other" : "forced luf_flush: init_on_free, memory failure",
    TlbBatchedFlush = "foliosim_tlb_batched_flush" : "try_to_unmap_flush / LUF IPI rounds (x86 arch_tlbbatch_flush)",
    TlbFlushEvents = "foliosim_tlb_flush_events" : "tracepoint tlb:tlb_flush: every local flush and every remote flush received",
    // per-VMA locks (CONFIG_PER_VMA_LOCK_STATS names)
    VmaLockSuccess = "vma_lock_success" : "faults handled under a per-VMA read lock (incl. access errors)",
    VmaLockAbort = "vma_lock_abort" : "lock_vma_under_rcu failures: no VMA, VMA write-locked in the current mmap write cycle, or bounds",
    VmaLockRetry = "vma_lock_retry" : "faults that returned RETRY under the VMA lock and were redone under mmap_lock",
    VmaLockMiss = "vma_lock_miss" : "lock_vma_under_rcu found a detached VMA and walked again",
    // speculative page faults (SPF v12; Linux names where the series had them)
    SpeculativePgfault = "speculative_pgfault" : "faults completed speculatively (vmstat of the series)",
    PerfSpf = "foliosim_perf_spf" : "perf software event spf: speculative faults whose result was final (success or signal)",
    SpfAttempt = "foliosim_spf_attempt" : "speculative fault attempts (the gate passed)",
    SpfVmaChanged = "spf_vma_changed" : "tracepoint pagefault:spf_vma_changed (seq odd or moved, bounds)",
    SpfVmaNotsup = "spf_vma_notsup" : "tracepoint pagefault:spf_vma_notsup (file/stack VMA, no anon_vma, missing page table)",
    SpfVmaAccess = "spf_vma_access" : "tracepoint pagefault:spf_vma_access (access not permitted: SIGSEGV)",
    SpfNotAttemptedSysctl = "foliosim_spf_not_attempted_sysctl" : "faults with vm.speculative_page_fault = 0: SPF not tried",
    SpfNotAttemptedSingleThread = "foliosim_spf_not_attempted_single_thread" : "faults of single-threaded mms (mm_users == 1): SPF not tried",
    SpfNotAttemptedKernelMode = "foliosim_spf_not_attempted_kernel_mode" : "faults not from user mode (populate): SPF not tried",
    SpfAbortNoVma = "foliosim_spf_abort_no_vma" : "find_vma_rcu found no VMA",
    SpfAbortSeqOdd = "foliosim_spf_abort_seq_odd" : "vm_sequence odd at the snapshot (a writer section open)",
    SpfAbortVmOpsFault = "foliosim_spf_abort_vm_ops_fault" : "VMA has vm_ops->fault (file, shmem)",
    SpfAbortNoAnonVma = "foliosim_spf_abort_no_anon_vma" : "anonymous VMA without anon_vma (first fault)",
    SpfAbortStack = "foliosim_spf_abort_stack" : "VM_GROWSDOWN/UP VMA",
    SpfAbortPtPud = "foliosim_spf_abort_pt_pud" : "page walk: PUD table missing",
    SpfAbortPtPmdNone = "foliosim_spf_abort_pt_pmd_none" : "page walk: PMD none (no PTE table)",
    SpfAbortPtlChangedBeforeLock = "foliosim_spf_abort_ptl_changed_before_lock" : "pte_map_lock: VMA changed before the PTL was taken",
    SpfAbortPtlChangedAfterLock = "foliosim_spf_abort_ptl_changed_after_lock" : "pte_map_lock: VMA changed while the PTL was taken",
    SpfBeforeWriter = "foliosim_spf_before_writer" : "speculative faults that validated while a writer whose call had begun still spun for mmap_lock (a writer that waits longer sleeps, and its section runs later): they complete and the writer's changes apply to their PTE",
    SpfSigsegvPerm = "foliosim_spf_sigsegv_perm" : "speculative faults ending in SIGSEGV (no permission)",
    SpfWastedNs = "foliosim_spf_wasted_ns" : "simulated ns spent in aborted speculative attempts",
    SpfWastedPages = "foliosim_spf_wasted_pages" : "pages allocated and freed by aborted speculative attempts",
    // tiering: promotion, demotion, migration
    PgpromoteSuccess = "pgpromote_success" : "pages promoted to a top-tier node",
    PgpromoteCandidate = "pgpromote_candidate" : "pages that passed the hot threshold and were charged to the promotion rate limit",
    NumaHintPageCache = "numa_hint_page_cache" : "page-cache promotion hints (numa_migrate_check without a fault)",
    NumaHintPageCacheLocal = "numa_hint_page_cache_local" : "page-cache promotion hints on folios already on this CPU's node",
    NumaPagesMigrated = "numa_pages_migrated" : "pages migrated by NUMA balancing or page-cache promotion",
    PgmigrateSuccess = "pgmigrate_success" : "pages migrated",
    PgmigrateFail = "pgmigrate_fail" : "pages whose migration failed",
    PgdemoteKswapd = "pgdemote_kswapd" : "pages demoted to a lower tier by kswapd",
    PgdemoteDirect = "pgdemote_direct" : "pages demoted to a lower tier by direct reclaim",
    // NUMA balancing (memory-tiering mode)
    NumaPteUpdates = "numa_pte_updates" : "PTEs made PROT_NONE for NUMA hinting by task_numa_work",
    NumaHintFaults = "numa_hint_faults" : "NUMA hinting faults (accesses to PROT_NONE hinting PTEs)",
    NumaHintFaultsLocal = "numa_hint_faults_local" : "NUMA hinting faults on pages already on the faulting CPU's node",
    // compaction, alloc_contig_range, memory offline, memory failure (docs/mechanisms/lazy-unmap-flush.md#scenarios 6, 19)
    CompactMigrateScanned = "compact_migrate_scanned" : "pages the compaction migrate scanner looked at",
    CompactFreeScanned = "compact_free_scanned" : "pages the compaction free scanner looked at",
    CompactIsolated = "compact_isolated" : "pages isolated by compaction (free targets and migration sources)",
    CompactSuccess = "compact_success" : "direct compactions that captured a block for their allocation",
    AllocContigSuccess = "foliosim_alloc_contig_success" : "alloc_contig_range calls that got their range",
    AllocContigFail = "foliosim_alloc_contig_fail" : "alloc_contig_range calls that failed (-EBUSY: a page could not be migrated)",
    OfflinePages = "foliosim_offline_pages" : "pages taken offline by offline_pages",
    MemoryFailure = "foliosim_memory_failure" : "memory_failure and soft_offline_page calls",
    HwpoisonPages = "foliosim_hwpoison_pages" : "frames taken out of use as poisoned (HardwareCorrupted in /proc/meminfo)",
    // x86 ASIDs, writeback (docs/mechanisms/lazy-unmap-flush.md#scenarios 15 and 20)
    AsidReuse = "foliosim_asid_reuse" : "switch_mm took an ASID slot another mm held on that CPU (choose_new_asid), flushing it",
    Pgpageout = "foliosim_pageout" : "dirty page-cache folios written back by reclaim (pageout) before being freed",
    PgInvalidate = "foliosim_invalidate_inode_pages" : "page-cache pages dropped by invalidate_inode_pages2 (remote change)",
    LufForcedInvalidate = "foliosim_luf_forced_invalidate" : "forced luf_flush: invalidate_inode_pages2 (luf.invalidate_hook)",
    // processes (kbuild: make -jN)
    Exec = "foliosim_exec" : "execve calls that replaced a task's mm",
    WaitReaped = "foliosim_wait_reaped" : "exited children reaped by wait4",
}

pub const FIRST_EVENT: usize = Stat::Pgfault as usize;

impl Stat {
    pub fn name(self) -> &'static str {
        STAT_NAMES[self as usize]
    }
    pub fn is_gauge(self) -> bool {
        (self as usize) < FIRST_EVENT
    }
    pub fn from_name(name: &str) -> Option<Stat> {
        STAT_NAMES.iter().position(|n| *n == name).map(|i| ALL[i])
    }
}

const ALL: [Stat; NR_STATS] = {
    let mut a = [Stat::NrFreePages; NR_STATS];
    let mut i = 0;
    while i < NR_STATS {
        // SAFETY-free: Stat is repr(usize) with dense discriminants 0..NR_STATS.
        a[i] = unsafe { std::mem::transmute::<usize, Stat>(i) };
        i += 1;
    }
    a
};

/// The counter array. Cheap to copy for per-second snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmStat {
    pub v: [i64; NR_STATS],
}

impl Default for VmStat {
    fn default() -> Self {
        VmStat { v: [0; NR_STATS] }
    }
}

impl VmStat {
    #[inline]
    pub fn inc(&mut self, s: Stat) {
        self.v[s as usize] += 1;
    }
    #[inline]
    pub fn add(&mut self, s: Stat, n: i64) {
        self.v[s as usize] += n;
    }
    #[inline]
    pub fn get(&self, s: Stat) -> i64 {
        self.v[s as usize]
    }
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, i64)> + '_ {
        STAT_NAMES.iter().copied().zip(self.v.iter().copied())
    }
}

/// Kernel entry points that CPU time is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Entry {
    Fault,
    Mmap,
    Munmap,
    Mprotect,
    Mremap,
    Madvise,
    Brk,
    Read,
    Write,
    Open,
    Close,
    Lseek,
    Ftruncate,
    Fork,
    Exit,
    /// Interrupts: TLB shootdown IPIs received.
    Irq,
    Execve,
    Wait4,
    Nanosleep,
    /// System calls the model does not run, charged the time a replayed
    /// trace recorded for them (Op::SysTime).
    Other,
}
pub const NR_ENTRIES: usize = Entry::Other as usize + 1;
pub const ENTRY_NAMES: [&str; NR_ENTRIES] = [
    "fault",
    "mmap",
    "munmap",
    "mprotect",
    "mremap",
    "madvise",
    "brk",
    "read",
    "write",
    "open",
    "close",
    "lseek",
    "ftruncate",
    "fork",
    "exit",
    "irq",
    "execve",
    "wait4",
    "nanosleep",
    "other",
];

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn names_round_trip_and_are_unique() {
        for (i, n) in STAT_NAMES.iter().enumerate() {
            assert_eq!(Stat::from_name(n).unwrap() as usize, i);
            assert_eq!(STAT_NAMES.iter().filter(|m| *m == n).count(), 1, "{n}");
        }
        assert!(Stat::NrFreePages.is_gauge());
        assert!(!Stat::Pgfault.is_gauge());
    }
}
