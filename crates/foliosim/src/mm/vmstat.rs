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
    NrIsolatedFile = "nr_isolated_file" : "file pages isolated from the LRU (promotion lists, reclaim, migration)",
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
    Pgreuse = "pgreuse" : "write faults that reused the page in place (wp_page_reuse)",
    Pgpgin = "pgpgin" : "KiB read from the disk-like file system",
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
}
pub const NR_ENTRIES: usize = Entry::Irq as usize + 1;
pub const ENTRY_NAMES: [&str; NR_ENTRIES] = [
    "fault", "mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "read", "write", "open", "close", "lseek",
    "ftruncate", "fork", "exit", "irq",
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
