//! Kernel knobs, keyed by their Linux paths: sysctl names under /proc/sys
//! (`vm.min_free_kbytes`), sysfs paths relative to /sys
//! (`kernel/mm/transparent_hugepage/enabled`), debugfs paths relative to
//! /sys/kernel/debug (`debug/fault_around_bytes`), boot parameters
//! (`page_alloc.shuffle`), and foliosim's own model switches
//! (`fault_locking`, `debug.mutant`).

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum KnobDefault {
    Int(i64),
    Bool(bool),
    Str(&'static str),
}

#[derive(Clone, Debug, Serialize)]
pub struct KnobSpec {
    pub key: &'static str,
    pub default: KnobDefault,
    pub help: &'static str,
    /// Allowed string values (None: any value of the default's type).
    pub values: Option<&'static [&'static str]>,
    /// Inclusive integer range.
    #[serde(skip)]
    pub range: Option<(i64, i64)>,
}

/// Deliberately broken variants of core mechanisms, for showing that the
/// invariant checker catches them. Never use outside tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Mutant {
    None,
    /// munmap/zap flushes only the local TLB: remote CPUs keep stale entries.
    SkipShootdown,
    /// Zap forgets to drop the mapcount of the pages it unmaps.
    LeakMapcount,
    /// The buddy allocator forgets to decrement nr_free when it takes a block.
    BuddySkipNrFreeDec,
    /// The buddy allocator never merges a freed block with its buddy.
    BuddyNoMerge,
    /// Taking a free block for an allocation forgets to clear PG_reported
    /// (free page reporting): the flag stays on the page.
    FprKeepReportedOnAlloc,
    /// post_alloc_hook does not fault the host page back in: a guest frame
    /// that reporting gave away is cleared, copied into or mapped while the
    /// host has nothing behind it (the state of every path but
    /// alloc_pages before the hook was shared).
    FprSkipHostFault,
    /// Large anon folios: the order choice ignores the VMA bounds (I-5, docs/mechanisms/large-anon-folios.md#rules-it-implements).
    MthpSkipVmaBound,
    /// Large anon folios: no pte_none scan and no re-check under the PTL, so
    /// a fresh folio may overwrite populated PTEs (I-7).
    MthpSkipPteRecheck,
    /// Large anon folios: the re-check under the PTL looks only at the
    /// faulting PTE, not at the whole block (pte_range_none), so a PTE that
    /// another CPU populated in the block after the order was chosen is
    /// overwritten (I-7).
    MthpRecheckFaultPteOnly,
    /// wp fault: copy even when the page is AnonExclusive (I-12; RFC v2's bug P-10).
    MthpCowExclusive,
    /// Freeing a large folio forgets to take it off the deferred-split queue (I-15).
    MthpSkipUnqueue,
    /// The speculative fault skips the final vm_sequence check under the PTL.
    SpfSkipSeqCheck,
    /// Page-cache promotion never runs its task work on return to user
    /// space: isolated folios stay off the LRU (leak) until the task exits.
    PromoSkipTaskWork,
    /// Page-cache promotion isolates even when the target node is below
    /// its high watermark (no migrate_balanced_pgdat check).
    PromoIgnoreWatermark,
    /// LUF mutants (docs/mechanisms/lazy-unmap-flush.md#mutants); the name says what is broken.
    Luf(LufMutant),
    /// x86 choose_new_asid hands a recycled ASID slot to a new mm without
    /// flushing it: the old owner's entries become the new mm's (scenario 20,
    /// docs/mechanisms/lazy-unmap-flush.md#scenarios).
    AsidNoFlushOnReuse,
    /// Reclaim starts writeback of a folio whose PTE was dirty without
    /// try_to_unmap_flush_dirty: CPUs may still write it through cached
    /// writable entries while the IO reads it (scenario 15).
    ReclaimSkipDirtyFlush,
}

/// Broken variants of lazy unmap flush, each one a defect of the v10 text
/// (D1-D6) or a mutant (M1-M14) of docs/mechanisms/lazy-unmap-flush.md#rules-it-implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LufMutant {
    /// M1: prep_new_page does not check the page's generation.
    SkipAllocFlush,
    /// M1 for large folios only: an mTHP or PMD THP allocation (order >= 2)
    /// skips the generation check that order-0 allocations still make.
    LargeSkipAllocFlush,
    /// M2 / D1: pcp -> buddy stores the order where the generation goes.
    D1OrderAsUgen,
    /// M3: a buddy merge keeps the older generation.
    MergeKeepsOlder,
    /// M4 / D2: split remainders get generation 0.
    D2SplitDrops,
    /// M5 / D3: pcp refill zeroes the pages' generations.
    D3RefillDrops,
    /// M6: no check when compaction (free isolation, capture), page reporting,
    /// alloc_contig_range, memory offline or hwpoison take free pages off the lists.
    SkipIsolationCheck,
    /// M7: accept deferrals while an ordinary flush is in progress.
    NoOnFlushingRefusal,
    /// M8: check_luf_flush returns while another LUF flush runs.
    NoWait,
    /// M9: publish luf_gen_done before the IPI round completes.
    EarlyDone,
    /// M10: defer folios that had a writable PTE.
    DeferWritable,
    /// M11 / D6: no check for a pending write-protect flush.
    D6NoWpPendingCheck,
    /// M12: no forced flush in do_wp_page / writable-PTE installs / do_mmap.
    NoWpHooks,
    /// M13: init_on_free poisons frames whose flush is still pending.
    PoisonPending,
    /// M14: generations compared as signed values without wrap-around.
    SignedCompare,
    /// D5: an allocation with IRQs disabled meets a pending generation and
    /// starts the shootdown there (v10), instead of passing such pages by.
    D5IrqOffFlush,
    /// M13': an MR_MEMORY_FAILURE migration leaves its deferral pending
    /// while the poisoned source is taken out of use (v10 flushes at once).
    DeferMemoryFailure,
    /// try_to_unmap_luf takes an earlier open deferral (a migration not
    /// settled yet) as flushed: its CPUs are dropped and its generation
    /// marked done, and the new deferral starts a fresh generation.
    HandoverOverwrites,
    /// zap_pte_range skips a PTE table with no present PTE, so munmap of a
    /// range reclaim emptied never runs flush_tlb_batched_pending before
    /// free_pgtables frees the table (the "no zap_pte_range visit" case).
    ZapSkipsEmptyTable,
}

/// (debug.mutant value, mutant) for the LUF mutants.
pub const LUF_MUTANTS: &[(&str, LufMutant)] = &[
    ("luf_skip_alloc_flush", LufMutant::SkipAllocFlush),
    ("luf_large_skip_alloc_flush", LufMutant::LargeSkipAllocFlush),
    ("luf_d1_order_as_ugen", LufMutant::D1OrderAsUgen),
    ("luf_merge_keeps_older", LufMutant::MergeKeepsOlder),
    ("luf_d2_split_drops", LufMutant::D2SplitDrops),
    ("luf_d3_refill_drops", LufMutant::D3RefillDrops),
    ("luf_skip_isolation_check", LufMutant::SkipIsolationCheck),
    ("luf_no_on_flushing_refusal", LufMutant::NoOnFlushingRefusal),
    ("luf_no_wait", LufMutant::NoWait),
    ("luf_early_done", LufMutant::EarlyDone),
    ("luf_defer_writable", LufMutant::DeferWritable),
    ("luf_d6_no_wp_pending_check", LufMutant::D6NoWpPendingCheck),
    ("luf_no_wp_hooks", LufMutant::NoWpHooks),
    ("luf_poison_pending", LufMutant::PoisonPending),
    ("luf_signed_compare", LufMutant::SignedCompare),
    ("luf_d5_irq_off_flush", LufMutant::D5IrqOffFlush),
    ("luf_defer_memory_failure", LufMutant::DeferMemoryFailure),
    ("luf_handover_overwrites", LufMutant::HandoverOverwrites),
    ("luf_zap_skips_empty_table", LufMutant::ZapSkipsEmptyTable),
];

/// Lazy unmap flush (docs/mechanisms/lazy-unmap-flush.md): `luf.*` knobs.
#[derive(Clone, Copy, Debug, Serialize, Default)]
pub struct LufKnobs {
    pub enabled: bool,
    /// "zone": one pending set per zone (RFC v12-like) instead of one global set (v10).
    pub per_zone: bool,
    /// The v11 forced-flush set: writable-PTE installs in faults, file writes, init_on_free.
    pub v11_hooks: bool,
    /// foliosim's fix for remote page-cache changes (in no posted version):
    /// invalidate_inode_pages2 forces the deferred flush first.
    pub invalidate_hook: bool,
}

/// How page faults synchronise with writers of the VMA tree (`fault_locking`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FaultLocking {
    /// Every fault takes mmap_lock for read.
    MmapLock,
    /// Linux 6.4+ per-VMA locks (lock_vma_under_rcu), mmap_lock on failure.
    PerVma,
    /// The speculative page fault series (SPF v12), mmap_lock on abort.
    Spf,
}

pub const MUTANTS: &[&str] = &[
    "none",
    "skip_shootdown",
    "leak_mapcount",
    "buddy_skip_nr_free_dec",
    "buddy_no_merge",
    "mthp_skip_vma_bound",
    "mthp_skip_pte_recheck",
    "mthp_recheck_fault_pte_only",
    "mthp_cow_exclusive",
    "mthp_skip_unqueue",
    "fpr_keep_reported_on_alloc",
    "fpr_skip_host_fault",
    "spf_skip_seq_check",
    "promo_skip_task_work",
    "promo_ignore_watermark",
    "luf_skip_alloc_flush",
    "luf_large_skip_alloc_flush",
    "luf_d1_order_as_ugen",
    "luf_merge_keeps_older",
    "luf_d2_split_drops",
    "luf_d3_refill_drops",
    "luf_skip_isolation_check",
    "luf_no_on_flushing_refusal",
    "luf_no_wait",
    "luf_early_done",
    "luf_defer_writable",
    "luf_d6_no_wp_pending_check",
    "luf_no_wp_hooks",
    "luf_poison_pending",
    "luf_signed_compare",
    "luf_d5_irq_off_flush",
    "luf_defer_memory_failure",
    "luf_handover_overwrites",
    "luf_zap_skips_empty_table",
    "asid_no_flush_on_reuse",
    "reclaim_skip_dirty_flush",
];

/// Policy for large anonymous folios (`anon_folio.mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum AnonFolioMode {
    /// Order 0 only, except PMD THP (the baseline kernel).
    Off,
    /// The RFC v2 series as posted: orders up to `anon_folio.max_order`.
    RfcV2,
    /// Linux 6.8+ multi-size THP (commit 19eaf44954df): per-size sysfs controls.
    Upstream,
}

/// A THP sysfs `enabled` value (top level: always/madvise/never; per size also inherit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ThpEnabled {
    Always,
    Inherit,
    Madvise,
    Never,
}

impl ThpEnabled {
    pub fn parse(s: &str) -> ThpEnabled {
        match s {
            "always" => ThpEnabled::Always,
            "inherit" => ThpEnabled::Inherit,
            "madvise" => ThpEnabled::Madvise,
            _ => ThpEnabled::Never,
        }
    }
}

/// Which unhinted anonymous mmaps the kernel aligns to a PMD boundary
/// (so that THPs can back them), by the rule of each kernel era.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThpAnonAlign {
    /// Up to Linux 6.6: none (an anonymous mapping goes through
    /// mm_get_unmapped_area, page-aligned).
    None,
    /// Linux 6.7-6.11 ("mm: align larger anonymous mappings on THP
    /// boundaries"): every anonymous mapping goes through
    /// thp_get_unmapped_area, whose __thp_get_unmapped_area aligns a
    /// length of at least PMD_SIZE.
    LenGePmd,
    /// Linux 6.12 on ("mm, mmap: limit THP alignment of anonymous mappings
    /// to PMD-aligned sizes"): __get_unmapped_area calls
    /// thp_get_unmapped_area_vmflags only when IS_ALIGNED(len, PMD_SIZE).
    LenPmdAligned,
}

impl ThpAnonAlign {
    pub const VALUES: &'static [&'static str] = &["none", "len_ge_pmd", "len_pmd_aligned"];

    pub fn parse(s: &str) -> ThpAnonAlign {
        match s {
            "none" => ThpAnonAlign::None,
            "len_ge_pmd" => ThpAnonAlign::LenGePmd,
            _ => ThpAnonAlign::LenPmdAligned,
        }
    }

    /// Does __get_unmapped_area send an unhinted private anonymous mapping
    /// of `len` bytes to thp_get_unmapped_area (64-bit kernel, native
    /// syscall: __thp_get_unmapped_area does nothing for 32-bit kernels or
    /// compat syscalls)? A shared anonymous mapping goes to
    /// shmem_get_unmapped_area instead; MAP_STACK, which only makes the VMA
    /// VM_NOHUGEPAGE, does not change the placement.
    pub fn thp_aligned(self, len: u64) -> bool {
        const PMD_SIZE: u64 = 2 << 20;
        match self {
            ThpAnonAlign::None => false,
            // __thp_get_unmapped_area gives up below one whole PMD.
            ThpAnonAlign::LenGePmd => len >= PMD_SIZE,
            ThpAnonAlign::LenPmdAligned => len.is_multiple_of(PMD_SIZE),
        }
    }
}

/// The per-size directories `hugepages-<size>kB` (orders 2..=9 at 4 KiB pages).
pub const MTHP_SIZE_KEYS: [&str; 8] = [
    "kernel/mm/transparent_hugepage/hugepages-16kB/enabled",
    "kernel/mm/transparent_hugepage/hugepages-32kB/enabled",
    "kernel/mm/transparent_hugepage/hugepages-64kB/enabled",
    "kernel/mm/transparent_hugepage/hugepages-128kB/enabled",
    "kernel/mm/transparent_hugepage/hugepages-256kB/enabled",
    "kernel/mm/transparent_hugepage/hugepages-512kB/enabled",
    "kernel/mm/transparent_hugepage/hugepages-1024kB/enabled",
    "kernel/mm/transparent_hugepage/hugepages-2048kB/enabled",
];

/// The large-anon-folio knobs.
#[derive(Clone, Debug, Serialize)]
pub struct AnonFolioKnobs {
    pub mode: AnonFolioMode,
    /// RFC v2: ANON_FOLIO_ORDER_MAX.
    pub max_order: u32,
    /// RFC v2 per-patch switches (docs/mechanisms/large-anon-folios.md#knobs).
    pub zero_page_large: bool,
    pub cow_reuse_range: bool,
    pub cow_copy_large: bool,
    pub mmap_align_unhinted: bool,
    /// `anon_folio.thp_get_unmapped_area`: the PMD alignment rule of
    /// unhinted anonymous mmaps.
    pub thp_anon_align: ThpAnonAlign,
    pub batch_zap: bool,
    pub free_listempty_check: bool,
    /// `kernel/mm/transparent_hugepage/enabled`.
    pub thp_enabled: ThpEnabled,
    /// `hugepages-<16 << i>kB/enabled`, i = order - 2.
    pub per_size: [ThpEnabled; 8],
}

impl Default for AnonFolioKnobs {
    fn default() -> Self {
        let mut per_size = [ThpEnabled::Never; 8];
        per_size[7] = ThpEnabled::Inherit; // the PMD size inherits (6.8+ default)
        AnonFolioKnobs {
            mode: AnonFolioMode::Off,
            max_order: 4,
            zero_page_large: true,
            cow_reuse_range: true,
            cow_copy_large: true,
            mmap_align_unhinted: true,
            thp_anon_align: ThpAnonAlign::LenPmdAligned,
            batch_zap: true,
            free_listempty_check: false,
            thp_enabled: ThpEnabled::Never,
            per_size,
        }
    }
}

pub fn registry() -> Vec<KnobSpec> {
    use KnobDefault::*;
    vec![
        KnobSpec { key: "vm.min_free_kbytes", default: Int(-1), help: "free memory the kernel keeps for atomic allocations; sets zone watermarks (-1: the kernel's sqrt formula)", values: None, range: Some((-1, 1 << 40)) },
        KnobSpec { key: "vm.watermark_scale_factor", default: Int(10), help: "distance between min/low/high watermarks in 1/10000 of zone memory", values: None, range: Some((1, 3000)) },
        KnobSpec { key: "vm.percpu_pagelist_high_fraction", default: Int(0), help: "per-CPU page list high mark as a fraction of zone memory (0: derived from the low watermark)", values: None, range: Some((0, 1 << 20)) },
        KnobSpec { key: "debug/fault_around_bytes", default: Int(65536), help: "bytes of cached file pages mapped around a read fault (do_fault_around); 4096 disables", values: None, range: Some((4096, 1 << 21)) },
        KnobSpec { key: "kernel/mm/transparent_hugepage/enabled", default: Str("never"), help: "THP for anonymous memory: the PMD size, and every hugepages-<size>kB set to inherit (modelled as 512 PTEs of one order-9 folio plus a 2 MiB TLB entry)", values: Some(&["always", "madvise", "never"]), range: None },
        KnobSpec { key: "fault_locking", default: Str("mmap_lock"), help: "how page faults synchronise with mmap/munmap: mmap_lock (every fault takes mmap_lock for read), per_vma (6.4+ lock_vma_under_rcu, fallback to mmap_lock), spf (speculative page faults v12: RCU lookup, vm_sequence snapshot validated under the PTL, retry through mmap_lock)", values: Some(&["mmap_lock", "per_vma", "spf"]), range: None },
        KnobSpec { key: "vm.speculative_page_fault", default: Int(1), help: "with fault_locking = \"spf\": 0 disables the speculative attempt (gate G1 of the series' sysctl; the writer bookkeeping stays)", values: None, range: Some((i64::MIN, i64::MAX)) },
        KnobSpec { key: "mmap_lock.rwsem_semantics", default: Str("5.3+"), help: "mmap_lock's rwsem: \"5.3+\" readers spin briefly before sleeping (reader optimistic spinning, 5.3); \"5.1\" readers sleep as soon as they wait for a writer (the SPF seed's kernels)", values: Some(&["5.3+", "5.1"]), range: None },
        KnobSpec { key: "page_alloc.shuffle", default: Bool(false), help: "randomise the order of free memory at boot and on large frees (shuffle_pick_tail)", values: None, range: None },
        KnobSpec { key: "page_reporting.enabled", default: Bool(false), help: "a virtio-balloon device with VIRTIO_BALLOON_F_REPORTING registers for free page reporting (mm/page_reporting.c); off = the series applied but the feature not offered", values: None, range: None },
        KnobSpec { key: "page_reporting.page_reporting_order", default: Int(-1), help: "lowest buddy order reported to the host (module parameter; -1: the driver's choice, pageblock_order = 9 on x86-64)", values: None, range: Some((-1, 10)) },
        KnobSpec { key: "page_reporting.reported_putback", default: Str("tail"), help: "where reported pages go back on their free list: \"tail\" (FPI_TO_TAIL, Linux 5.10+) or \"v17_head_rules\" (Linux 5.7: the ordinary head/tail rules of __free_one_page)", values: Some(&["tail", "v17_head_rules"]), range: None },
        KnobSpec { key: "host.discard", default: Str("dontneed"), help: "how the hypervisor drops a reported range: \"dontneed\" (MADV_DONTNEED, QEMU's ram_block_discard_range: refault zero-fills) or \"free\" (MADV_FREE, the RFC: kept until host pressure, refault without zeroing)", values: Some(&["dontneed", "free"]), range: None },
        KnobSpec { key: "host.thp", default: Bool(false), help: "the host backs guest memory with 2 MiB transparent huge pages where a whole aligned 2 MiB range is unbacked", values: None, range: None },
        KnobSpec { key: "host.mem_mib", default: Int(0), help: "host memory available to this guest, MiB (0: no limit); beyond it the host reclaims (MADV_FREE'd pages first, then swaps guest pages out)", values: None, range: Some((0, 1 << 34)) },
        KnobSpec { key: "host.prealloc", default: Bool(false), help: "all guest memory is backed at boot (QEMU -mem-prealloc, or the state after the guest touched all of it)", values: None, range: None },
        KnobSpec { key: "anon_folio.mode", default: Str("off"), help: "large anonymous folios: off (order 0 + PMD THP), rfc-v2 (the 2023 series: orders up to anon_folio.max_order, large zero-page write, range reuse, 64 KiB mmap alignment), upstream (6.8+ multi-size THP, per-size hugepages-<size>kB/enabled); setting a per-size knob without this one selects upstream", values: Some(&["off", "rfc-v2", "upstream"]), range: None },
        KnobSpec { key: "anon_folio.max_order", default: Int(4), help: "rfc-v2: ANON_FOLIO_ORDER_MAX, the largest order of a fresh anonymous folio (4 = 64 KiB)", values: None, range: Some((2, 9)) },
        KnobSpec { key: "anon_folio.zero_page_large", default: Bool(true), help: "rfc-v2 patch 15: a write to the zero page allocates a large folio", values: None, range: None },
        KnobSpec { key: "anon_folio.cow_reuse_range", default: Bool(true), help: "rfc-v2 patches 9-10: a write fault reuses the whole contiguous run of a folio that only this mapping references", values: None, range: None },
        KnobSpec { key: "anon_folio.cow_copy_large", default: Bool(true), help: "rfc-v2 patches 11-14: CoW of a non-exclusive large folio copies the largest aligned maybe-shared block (<= source order) into a large folio", values: None, range: None },
        KnobSpec { key: "anon_folio.mmap_align_unhinted", default: Bool(true), help: "rfc-v2 patch 16: unhinted mmaps are aligned to 2^max_order pages", values: None, range: None },
        KnobSpec { key: "anon_folio.thp_get_unmapped_area", default: Str("len_pmd_aligned"), help: "which unhinted private anonymous mmaps thp_get_unmapped_area places (padded by 2 MiB, then aligned to a PMD boundary; shared ones are shmem's): \"none\" (Linux <= 6.6), \"len_ge_pmd\" (6.7-6.11: every one of at least 2 MiB, thp_get_unmapped_area), \"len_pmd_aligned\" (6.12 on: only lengths that are multiples of 2 MiB, IS_ALIGNED(len, PMD_SIZE)); rfc-v2's own patch 16 (anon_folio.mmap_align_unhinted) comes first", values: Some(ThpAnonAlign::VALUES), range: None },
        KnobSpec { key: "anon_folio.batch_zap", default: Bool(true), help: "rfc-v2 patch 17: zap a large anon folio's PTEs in one batch (one rmap removal; a whole unmap does not queue it for deferred split)", values: None, range: None },
        KnobSpec { key: "anon_folio.free_listempty_check", default: Bool(false), help: "rfc-v2: check the deferred-split list without split_queue_lock when freeing a large folio (Yin's patch; always on upstream)", values: None, range: None },
        KnobSpec { key: MTHP_SIZE_KEYS[0], default: Str("never"), help: "upstream mTHP: 16 KiB anonymous folios (order 2)", values: Some(&["always", "inherit", "madvise", "never"]), range: None },
        KnobSpec { key: MTHP_SIZE_KEYS[1], default: Str("never"), help: "upstream mTHP: 32 KiB anonymous folios (order 3)", values: Some(&["always", "inherit", "madvise", "never"]), range: None },
        KnobSpec { key: MTHP_SIZE_KEYS[2], default: Str("never"), help: "upstream mTHP: 64 KiB anonymous folios (order 4)", values: Some(&["always", "inherit", "madvise", "never"]), range: None },
        KnobSpec { key: MTHP_SIZE_KEYS[3], default: Str("never"), help: "upstream mTHP: 128 KiB anonymous folios (order 5)", values: Some(&["always", "inherit", "madvise", "never"]), range: None },
        KnobSpec { key: MTHP_SIZE_KEYS[4], default: Str("never"), help: "upstream mTHP: 256 KiB anonymous folios (order 6)", values: Some(&["always", "inherit", "madvise", "never"]), range: None },
        KnobSpec { key: MTHP_SIZE_KEYS[5], default: Str("never"), help: "upstream mTHP: 512 KiB anonymous folios (order 7)", values: Some(&["always", "inherit", "madvise", "never"]), range: None },
        KnobSpec { key: MTHP_SIZE_KEYS[6], default: Str("never"), help: "upstream mTHP: 1 MiB anonymous folios (order 8)", values: Some(&["always", "inherit", "madvise", "never"]), range: None },
        KnobSpec { key: MTHP_SIZE_KEYS[7], default: Str("inherit"), help: "upstream: PMD-size (2 MiB) THP, mapped as 512 PTEs of one order-9 folio plus a 2 MiB TLB entry", values: Some(&["always", "inherit", "madvise", "never"]), range: None },
        KnobSpec { key: "debug.fault_trace", default: Int(0), help: "record up to this many fault-locking events (SPF attempts, aborts by reason, per-VMA lock outcomes) as [time_ns, cpu, address, event] in the result's fault_trace", values: None, range: Some((0, 10_000_000)) },
        KnobSpec { key: "kernel/mm/numa/demotion_enabled", default: Bool(false), help: "reclaim migrates folios to the next lower memory tier instead of dropping them", values: None, range: None },
        KnobSpec { key: "kernel/mm/numa/pagecache_promotion_enabled", default: Bool(false), help: "promote unmapped page-cache folios from lower tiers when folio_mark_accessed finds them hot (RFC v3, needs kernel.numa_balancing = 2)", values: None, range: None },
        KnobSpec { key: "kernel.numa_balancing", default: Int(0), help: "NUMA balancing: 0 off, 1 normal, 2 memory tiering, 3 both", values: None, range: Some((0, 3)) },
        KnobSpec { key: "kernel.numa_balancing_promote_rate_limit_MBps", default: Int(65536), help: "promotion rate limit, MB/s; the page-cache promotion list cap compares pages with this value", values: None, range: Some((0, 1 << 40)) },
        KnobSpec { key: "promotion_list_order", default: Str("tail"), help: "foliosim model switch: promotion_candidate appends with list_add_tail (v3, \"tail\") or list_add (the development build, \"head\")", values: Some(&["tail", "head"]), range: None },
        KnobSpec { key: "luf.enabled", default: Bool(false), help: "lazy unmap flush (LUF v10 series, never merged): defer the TLB shootdown of read-only order-0 folios unmapped by reclaim or async migration until the frame leaves the page allocator again", values: None, range: None },
        KnobSpec { key: "luf.granularity", default: Str("global"), help: "LUF pending set: one global cpumask and generation (v10) or one per zone (RFC v12-like)", values: Some(&["global", "zone"]), range: None },
        KnobSpec { key: "luf.v11_hooks", default: Bool(false), help: "LUF v11 forced flushes as well as v10's: a fault installing a writable PTE, file write(), init_on_free", values: None, range: None },
        KnobSpec { key: "luf.invalidate_hook", default: Bool(false), help: "foliosim's fix, in no posted LUF version: invalidate_inode_pages2 (a file changed remotely: NFS, FUSE) forces the deferred flush first, as v11's write() hook does for local writes", values: None, range: None },
        KnobSpec { key: "init_on_free", default: Bool(false), help: "boot parameter init_on_free=1: freed pages are zeroed (their contents change while free)", values: None, range: None },
        KnobSpec { key: "migrate.batch_flush", default: Bool(true), help: "migrate_pages unmaps a batch with TTU_BATCH_FLUSH and flushes once (Linux 6.4+, commit 7e12beb8ca2a); false: every unmapped PTE is flushed at once (ptep_clear_flush), as before that commit, and LUF cannot defer", values: None, range: None },
        KnobSpec { key: "kernel.numa_balancing_scan_delay_ms", default: Int(1000), help: "NUMA balancing: the first scan of an mm waits this long, ms (debugfs sched/numa_balancing/scan_delay_ms)", values: None, range: Some((0, 1 << 32)) },
        KnobSpec { key: "kernel.numa_balancing_scan_period_min_ms", default: Int(1000), help: "NUMA balancing: the shortest scan period of an mm, ms, divided by its RSS in scan_size windows (task_scan_min; sysctl before 5.13, debugfs sched/numa_balancing/scan_period_min_ms since)", values: None, range: Some((1, 1 << 32)) },
        KnobSpec { key: "kernel.numa_balancing_scan_period_max_ms", default: Int(60000), help: "NUMA balancing: the longest scan period, ms, divided by the RSS in scan_size windows (task_scan_max), and the period of the hot-threshold adjustment (debugfs sched/numa_balancing/scan_period_max_ms)", values: None, range: Some((1, 1 << 32)) },
        KnobSpec { key: "kernel.numa_balancing_scan_size_mb", default: Int(256), help: "NUMA balancing: MB of PTEs made PROT_NONE per task_numa_work pass (up to 8x that of address space walked)", values: None, range: Some((1, 1 << 32)) },
        KnobSpec { key: "kernel.numa_balancing_hot_threshold_ms", default: Int(1000), help: "NUMA balancing memory tiering: a lower-tier page whose hint fault came less than this after its scan is hot (debugfs sched/numa_balancing/hot_threshold_ms)", values: None, range: Some((1, 1 << 32)) },
        KnobSpec { key: "debug.mutant", default: Str("none"), help: "a deliberately broken mechanism, to show the invariant checker catches it (tests only)", values: Some(MUTANTS), range: None },
        KnobSpec { key: "spf.tree_protection", default: Str("rcu+refcount"), help: "with fault_locking = \"spf\": how the speculative VMA lookup is protected against tree changes: rcu+refcount (v12: RCU walk, get_vma/put_vma on the VMA's line) or rwlock (v11: also read_lock/read_unlock of the per-mm mm_rb_lock, two RMWs on one shared mm_struct line per lookup)", values: Some(&["rcu+refcount", "rwlock"]), range: None },
    ]
}

/// The knob values one simulation runs with.
#[derive(Clone, Debug, Serialize)]
pub struct Knobs {
    pub min_free_kbytes: Option<u64>,
    pub watermark_scale_factor: u64,
    pub percpu_pagelist_high_fraction: u64,
    pub fault_around_bytes: u64,
    pub shuffle: bool,
    pub mutant: Mutant,
    /// page_reporting.enabled.
    pub page_reporting: bool,
    /// page_reporting.page_reporting_order (None: unset, -1).
    pub page_reporting_order: Option<u32>,
    /// page_reporting.reported_putback == "tail".
    pub reported_putback_tail: bool,
    /// host.discard == "free" (MADV_FREE) rather than MADV_DONTNEED.
    pub host_discard_free: bool,
    pub host_thp: bool,
    /// host.mem_mib (0: unlimited).
    pub host_mem_mib: u64,
    pub host_prealloc: bool,
    pub anon_folio: AnonFolioKnobs,
    pub fault_locking: FaultLocking,
    /// debug.fault_trace: how many fault-locking events to record.
    pub fault_trace: usize,
    /// mmap_lock.rwsem_semantics = "5.1": readers do not spin.
    pub rwsem_51: bool,
    /// vm.speculative_page_fault != 0.
    pub speculative_page_fault: bool,
    pub demotion_enabled: bool,
    pub pagecache_promotion_enabled: bool,
    pub numa_balancing: u8,
    pub promote_rate_limit_mbps: u64,
    /// kernel.numa_balancing_scan_period_min_ms.
    pub numa_scan_period_min_ms: u64,
    /// kernel.numa_balancing_scan_period_max_ms.
    pub numa_scan_period_max_ms: u64,
    /// kernel.numa_balancing_scan_delay_ms.
    pub numa_scan_delay_ms: u64,
    /// kernel.numa_balancing_scan_size_mb.
    pub numa_scan_size_mb: u64,
    /// kernel.numa_balancing_hot_threshold_ms.
    pub numa_hot_threshold_ms: u64,
    /// list_add (head) instead of list_add_tail for the promotion list.
    pub promo_list_head: bool,
    pub luf: LufKnobs,
    /// init_on_free=1.
    pub init_on_free: bool,
    /// migrate_pages batches its TLB flush (7e12beb8ca2a applied).
    pub migrate_batch_flush: bool,
    /// spf.tree_protection = "rwlock" (SPF v11's mm_rb_lock).
    pub spf_tree_rwlock: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            min_free_kbytes: None,
            watermark_scale_factor: 10,
            percpu_pagelist_high_fraction: 0,
            fault_around_bytes: 65536,
            shuffle: false,
            mutant: Mutant::None,
            page_reporting: false,
            page_reporting_order: None,
            reported_putback_tail: true,
            host_discard_free: false,
            host_thp: false,
            host_mem_mib: 0,
            host_prealloc: false,
            anon_folio: AnonFolioKnobs::default(),
            fault_locking: FaultLocking::MmapLock,
            speculative_page_fault: true,
            fault_trace: 0,
            rwsem_51: false,
            demotion_enabled: false,
            pagecache_promotion_enabled: false,
            numa_balancing: 0,
            promote_rate_limit_mbps: 65536,
            numa_scan_period_min_ms: 1000,
            numa_scan_period_max_ms: 60000,
            numa_scan_delay_ms: 1000,
            numa_scan_size_mb: 256,
            numa_hot_threshold_ms: 1000,
            promo_list_head: false,
            luf: LufKnobs::default(),
            init_on_free: false,
            migrate_batch_flush: true,
            spf_tree_rwlock: false,
        }
    }
}

/// A knob value after type checking.
#[derive(Clone, Debug, PartialEq)]
pub enum KnobValue {
    Int(i64),
    Bool(bool),
    Str(String),
}

impl Knobs {
    /// Apply one validated value. `key` must be registered.
    pub fn set(&mut self, key: &str, v: &KnobValue) {
        match (key, v) {
            ("vm.min_free_kbytes", KnobValue::Int(i)) => self.min_free_kbytes = (*i >= 0).then_some(*i as u64),
            ("vm.watermark_scale_factor", KnobValue::Int(i)) => self.watermark_scale_factor = *i as u64,
            ("vm.percpu_pagelist_high_fraction", KnobValue::Int(i)) => self.percpu_pagelist_high_fraction = *i as u64,
            ("debug/fault_around_bytes", KnobValue::Int(i)) => self.fault_around_bytes = *i as u64,
            ("page_alloc.shuffle", KnobValue::Bool(b)) => self.shuffle = *b,
            ("page_reporting.enabled", KnobValue::Bool(b)) => self.page_reporting = *b,
            ("page_reporting.page_reporting_order", KnobValue::Int(i)) => self.page_reporting_order = (*i >= 0).then_some(*i as u32),
            ("page_reporting.reported_putback", KnobValue::Str(s)) => self.reported_putback_tail = s == "tail",
            ("host.discard", KnobValue::Str(s)) => self.host_discard_free = s == "free",
            ("host.thp", KnobValue::Bool(b)) => self.host_thp = *b,
            ("host.mem_mib", KnobValue::Int(i)) => self.host_mem_mib = *i as u64,
            ("host.prealloc", KnobValue::Bool(b)) => self.host_prealloc = *b,
            ("mmap_lock.rwsem_semantics", KnobValue::Str(s)) => self.rwsem_51 = s == "5.1",
            ("debug.fault_trace", KnobValue::Int(i)) => self.fault_trace = *i as usize,
            ("vm.speculative_page_fault", KnobValue::Int(i)) => self.speculative_page_fault = *i != 0,
            ("fault_locking", KnobValue::Str(s)) => {
                self.fault_locking = match s.as_str() {
                    "per_vma" => FaultLocking::PerVma,
                    "spf" => FaultLocking::Spf,
                    _ => FaultLocking::MmapLock,
                }
            }
            ("kernel/mm/numa/demotion_enabled", KnobValue::Bool(b)) => self.demotion_enabled = *b,
            ("kernel/mm/numa/pagecache_promotion_enabled", KnobValue::Bool(b)) => self.pagecache_promotion_enabled = *b,
            ("kernel.numa_balancing", KnobValue::Int(i)) => self.numa_balancing = *i as u8,
            ("kernel.numa_balancing_promote_rate_limit_MBps", KnobValue::Int(i)) => self.promote_rate_limit_mbps = *i as u64,
            ("kernel.numa_balancing_scan_period_min_ms", KnobValue::Int(i)) => self.numa_scan_period_min_ms = *i as u64,
            ("kernel.numa_balancing_scan_period_max_ms", KnobValue::Int(i)) => self.numa_scan_period_max_ms = *i as u64,
            ("kernel.numa_balancing_scan_delay_ms", KnobValue::Int(i)) => self.numa_scan_delay_ms = *i as u64,
            ("kernel.numa_balancing_scan_size_mb", KnobValue::Int(i)) => self.numa_scan_size_mb = *i as u64,
            ("kernel.numa_balancing_hot_threshold_ms", KnobValue::Int(i)) => self.numa_hot_threshold_ms = *i as u64,
            ("promotion_list_order", KnobValue::Str(s)) => self.promo_list_head = s == "head",
            ("luf.enabled", KnobValue::Bool(b)) => self.luf.enabled = *b,
            ("luf.granularity", KnobValue::Str(s)) => self.luf.per_zone = s == "zone",
            ("luf.v11_hooks", KnobValue::Bool(b)) => self.luf.v11_hooks = *b,
            ("luf.invalidate_hook", KnobValue::Bool(b)) => self.luf.invalidate_hook = *b,
            ("init_on_free", KnobValue::Bool(b)) => self.init_on_free = *b,
            ("migrate.batch_flush", KnobValue::Bool(b)) => self.migrate_batch_flush = *b,
            ("spf.tree_protection", KnobValue::Str(s)) => self.spf_tree_rwlock = s == "rwlock",
            ("debug.mutant", KnobValue::Str(s)) => {
                if let Some((_, m)) = LUF_MUTANTS.iter().find(|(n, _)| n == s) {
                    self.mutant = Mutant::Luf(*m);
                    return;
                }
                self.mutant = match s.as_str() {
                    "skip_shootdown" => Mutant::SkipShootdown,
                    "leak_mapcount" => Mutant::LeakMapcount,
                    "buddy_skip_nr_free_dec" => Mutant::BuddySkipNrFreeDec,
                    "buddy_no_merge" => Mutant::BuddyNoMerge,
                    "fpr_keep_reported_on_alloc" => Mutant::FprKeepReportedOnAlloc,
                    "fpr_skip_host_fault" => Mutant::FprSkipHostFault,
                    "mthp_skip_vma_bound" => Mutant::MthpSkipVmaBound,
                    "mthp_skip_pte_recheck" => Mutant::MthpSkipPteRecheck,
                    "mthp_recheck_fault_pte_only" => Mutant::MthpRecheckFaultPteOnly,
                    "mthp_cow_exclusive" => Mutant::MthpCowExclusive,
                    "mthp_skip_unqueue" => Mutant::MthpSkipUnqueue,
                    "spf_skip_seq_check" => Mutant::SpfSkipSeqCheck,
                    "promo_skip_task_work" => Mutant::PromoSkipTaskWork,
                    "promo_ignore_watermark" => Mutant::PromoIgnoreWatermark,
                    "asid_no_flush_on_reuse" => Mutant::AsidNoFlushOnReuse,
                    "reclaim_skip_dirty_flush" => Mutant::ReclaimSkipDirtyFlush,
                    _ => Mutant::None,
                }
            }
            ("anon_folio.mode", KnobValue::Str(s)) => {
                self.anon_folio.mode = match s.as_str() {
                    "rfc-v2" => AnonFolioMode::RfcV2,
                    "upstream" => AnonFolioMode::Upstream,
                    _ => AnonFolioMode::Off,
                }
            }
            ("anon_folio.max_order", KnobValue::Int(i)) => self.anon_folio.max_order = *i as u32,
            ("anon_folio.zero_page_large", KnobValue::Bool(b)) => self.anon_folio.zero_page_large = *b,
            ("anon_folio.cow_reuse_range", KnobValue::Bool(b)) => self.anon_folio.cow_reuse_range = *b,
            ("anon_folio.cow_copy_large", KnobValue::Bool(b)) => self.anon_folio.cow_copy_large = *b,
            ("anon_folio.mmap_align_unhinted", KnobValue::Bool(b)) => self.anon_folio.mmap_align_unhinted = *b,
            ("anon_folio.thp_get_unmapped_area", KnobValue::Str(v)) => self.anon_folio.thp_anon_align = ThpAnonAlign::parse(v),
            ("anon_folio.batch_zap", KnobValue::Bool(b)) => self.anon_folio.batch_zap = *b,
            ("anon_folio.free_listempty_check", KnobValue::Bool(b)) => self.anon_folio.free_listempty_check = *b,
            ("kernel/mm/transparent_hugepage/enabled", KnobValue::Str(s)) => self.anon_folio.thp_enabled = ThpEnabled::parse(s),
            (k, KnobValue::Str(s)) if MTHP_SIZE_KEYS.contains(&k) => {
                let i = MTHP_SIZE_KEYS.iter().position(|x| *x == k).unwrap();
                self.anon_folio.per_size[i] = ThpEnabled::parse(s);
            }
            _ => {}
        }
    }
}

/// Type-check `v` against the registered knob `key`.
pub fn validate(key: &str, v: &toml::Value) -> Result<KnobValue, String> {
    let spec = registry().into_iter().find(|k| k.key == key).ok_or_else(|| "unknown knob (see `foliosim list`)".to_string())?;
    match (&spec.default, v) {
        (KnobDefault::Int(_), toml::Value::Integer(i)) => {
            if let Some((lo, hi)) = spec.range {
                if *i < lo || *i > hi {
                    return Err(format!("{i} is out of range {lo}..={hi}"));
                }
            }
            Ok(KnobValue::Int(*i))
        }
        (KnobDefault::Bool(_), toml::Value::Boolean(b)) => Ok(KnobValue::Bool(*b)),
        (KnobDefault::Bool(_), toml::Value::Integer(i)) if *i == 0 || *i == 1 => Ok(KnobValue::Bool(*i == 1)),
        (KnobDefault::Str(_), toml::Value::String(s)) => {
            if let Some(vals) = spec.values {
                if !vals.contains(&s.as_str()) {
                    return Err(format!("\"{s}\" is not one of {vals:?}"));
                }
            }
            Ok(KnobValue::Str(s.clone()))
        }
        (d, v) => Err(format!(
            "expected {}, got {}",
            match d {
                KnobDefault::Int(_) => "an integer",
                KnobDefault::Bool(_) => "a boolean",
                KnobDefault::Str(_) => "a string",
            },
            v.type_str()
        )),
    }
}
