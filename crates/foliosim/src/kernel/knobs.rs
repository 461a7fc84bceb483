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

/// Where a knob's value lands in `Knobs` (its type is the default's).
#[derive(Clone, Copy, Debug)]
pub enum Land {
    Int(fn(&mut Knobs, i64)),
    Bool(fn(&mut Knobs, bool)),
    Str(fn(&mut Knobs, &str)),
    /// A knob a policy declares (policy/): kept by key in `Knobs::params`,
    /// read by the policy when it is built.
    Param,
}

/// One knob, written once: its key, default (and so its type), help,
/// allowed values or range, and where its value lands.
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
    #[serde(skip)]
    pub land: Land,
    /// For a policy's own knob: the selector knob and the policy's name
    /// (the knob counts only when that policy is selected).
    #[serde(skip)]
    pub owner: Option<(&'static str, &'static str)>,
}

impl KnobSpec {
    /// An integer knob in the inclusive `range`.
    pub const fn int(key: &'static str, default: i64, range: (i64, i64), help: &'static str, land: fn(&mut Knobs, i64)) -> KnobSpec {
        KnobSpec { key, default: KnobDefault::Int(default), help, values: None, range: Some(range), land: Land::Int(land), owner: None }
    }

    /// A boolean knob (also written 0 or 1).
    pub const fn flag(key: &'static str, default: bool, help: &'static str, land: fn(&mut Knobs, bool)) -> KnobSpec {
        KnobSpec { key, default: KnobDefault::Bool(default), help, values: None, range: None, land: Land::Bool(land), owner: None }
    }

    /// A string knob taking one of `values`.
    pub const fn choice(
        key: &'static str,
        default: &'static str,
        values: &'static [&'static str],
        help: &'static str,
        land: fn(&mut Knobs, &str),
    ) -> KnobSpec {
        KnobSpec { key, default: KnobDefault::Str(default), help, values: Some(values), range: None, land: Land::Str(land), owner: None }
    }

    /// The knob that selects a policy of one kind by name; the policy
    /// registry (policy/mod.rs) fills in the names.
    pub const fn selector(key: &'static str, default: &'static str, help: &'static str, land: fn(&mut Knobs, &str)) -> KnobSpec {
        KnobSpec { key, default: KnobDefault::Str(default), help, values: None, range: None, land: Land::Str(land), owner: None }
    }

    /// A policy's own integer knob (policy/): the value is kept in `Knobs::params`.
    pub const fn int_param(key: &'static str, default: i64, range: (i64, i64), help: &'static str) -> KnobSpec {
        KnobSpec { key, default: KnobDefault::Int(default), help, values: None, range: Some(range), land: Land::Param, owner: None }
    }

    /// A policy's own boolean knob.
    pub const fn flag_param(key: &'static str, default: bool, help: &'static str) -> KnobSpec {
        KnobSpec { key, default: KnobDefault::Bool(default), help, values: None, range: None, land: Land::Param, owner: None }
    }

    /// A policy's own string knob taking one of `values`.
    pub const fn choice_param(key: &'static str, default: &'static str, values: &'static [&'static str], help: &'static str) -> KnobSpec {
        KnobSpec { key, default: KnobDefault::Str(default), help, values: Some(values), range: None, land: Land::Param, owner: None }
    }

    /// The default as a value.
    pub fn default_value(&self) -> KnobValue {
        match self.default {
            KnobDefault::Int(i) => KnobValue::Int(i),
            KnobDefault::Bool(b) => KnobValue::Bool(b),
            KnobDefault::Str(s) => KnobValue::Str(s.to_string()),
        }
    }
}

/// Deliberately broken variants of core mechanisms, for showing that the
/// invariant checker catches them. Never use outside tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
pub enum Mutant {
    #[default]
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
    /// A contended cache line serves a request processed late behind the
    /// later arrivals already served, not in arrival order (sim/lock.rs).
    LineOutOfOrder,
    /// An rwsem reader sleeps after a long wait on the count's line with
    /// no writer holding or queued (sim/lock.rs).
    RwsemReaderSleepsWithoutWriter,
    /// A run of steps (run.rs: access_run) goes on past another task's
    /// next step: its steps come out of time order.
    RunPastOtherSteps,
    /// A run of steps does not advance its task's op counter for the
    /// accesses it ran (the workload's `access_run_done` gets a scratch
    /// counter): one counter the step-by-step path advances is left out.
    RunSkipsOpCount,
    /// zap_pte_range clears a swap PTE without swap_free: the slot stays
    /// counted with no PTE naming it (mm/swapfile.rs).
    SwapZapKeepsSlot,
    /// Reclaim discards a lazily freed (MADV_FREE) folio that was written
    /// again since the madvise (mm/madvise.rs): the write is lost.
    LazyfreeDiscardRedirtied,
    /// try_to_unmap/try_to_migrate change a folio's PTEs without calling
    /// the mmu notifier: a secondary MMU (KVM's EPT) keeps translating to
    /// a page the mm no longer maps there (mm/mmu_notifier.rs).
    MmuNotifierSkipUnmap,
    /// change_prot_numa makes PTEs PROT_NONE without calling the mmu
    /// notifier: KVM's EPT keeps translating pages the host's NUMA
    /// balancing protected, so the guest takes no hinting fault.
    NumaHintSkipNotifier,
    /// A guest does not apply the remote TLB flush the host's dropping of
    /// SPTEs owes it (kvm_flush_remote_tlbs, virt/kvm.rs): its TLBs keep
    /// translations of frames the host no longer backs.
    KvmSkipRemoteFlush,
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

/// Every `debug.mutant` value and the mutant it selects: the knob's values
/// and its parsing both come from here.
pub const MUTANTS: &[(&str, Mutant)] = &[
    ("none", Mutant::None),
    ("skip_shootdown", Mutant::SkipShootdown),
    ("leak_mapcount", Mutant::LeakMapcount),
    ("buddy_skip_nr_free_dec", Mutant::BuddySkipNrFreeDec),
    ("buddy_no_merge", Mutant::BuddyNoMerge),
    ("mthp_skip_vma_bound", Mutant::MthpSkipVmaBound),
    ("mthp_skip_pte_recheck", Mutant::MthpSkipPteRecheck),
    ("mthp_recheck_fault_pte_only", Mutant::MthpRecheckFaultPteOnly),
    ("mthp_cow_exclusive", Mutant::MthpCowExclusive),
    ("mthp_skip_unqueue", Mutant::MthpSkipUnqueue),
    ("fpr_keep_reported_on_alloc", Mutant::FprKeepReportedOnAlloc),
    ("fpr_skip_host_fault", Mutant::FprSkipHostFault),
    ("swap_zap_keeps_slot", Mutant::SwapZapKeepsSlot),
    ("lazyfree_discard_redirtied", Mutant::LazyfreeDiscardRedirtied),
    ("mmu_notifier_skip_unmap", Mutant::MmuNotifierSkipUnmap),
    ("numa_hint_skip_notifier", Mutant::NumaHintSkipNotifier),
    ("kvm_skip_remote_flush", Mutant::KvmSkipRemoteFlush),
    ("spf_skip_seq_check", Mutant::SpfSkipSeqCheck),
    ("promo_skip_task_work", Mutant::PromoSkipTaskWork),
    ("promo_ignore_watermark", Mutant::PromoIgnoreWatermark),
    ("luf_skip_alloc_flush", Mutant::Luf(LufMutant::SkipAllocFlush)),
    ("luf_large_skip_alloc_flush", Mutant::Luf(LufMutant::LargeSkipAllocFlush)),
    ("luf_d1_order_as_ugen", Mutant::Luf(LufMutant::D1OrderAsUgen)),
    ("luf_merge_keeps_older", Mutant::Luf(LufMutant::MergeKeepsOlder)),
    ("luf_d2_split_drops", Mutant::Luf(LufMutant::D2SplitDrops)),
    ("luf_d3_refill_drops", Mutant::Luf(LufMutant::D3RefillDrops)),
    ("luf_skip_isolation_check", Mutant::Luf(LufMutant::SkipIsolationCheck)),
    ("luf_no_on_flushing_refusal", Mutant::Luf(LufMutant::NoOnFlushingRefusal)),
    ("luf_no_wait", Mutant::Luf(LufMutant::NoWait)),
    ("luf_early_done", Mutant::Luf(LufMutant::EarlyDone)),
    ("luf_defer_writable", Mutant::Luf(LufMutant::DeferWritable)),
    ("luf_d6_no_wp_pending_check", Mutant::Luf(LufMutant::D6NoWpPendingCheck)),
    ("luf_no_wp_hooks", Mutant::Luf(LufMutant::NoWpHooks)),
    ("luf_poison_pending", Mutant::Luf(LufMutant::PoisonPending)),
    ("luf_signed_compare", Mutant::Luf(LufMutant::SignedCompare)),
    ("luf_d5_irq_off_flush", Mutant::Luf(LufMutant::D5IrqOffFlush)),
    ("luf_defer_memory_failure", Mutant::Luf(LufMutant::DeferMemoryFailure)),
    ("luf_handover_overwrites", Mutant::Luf(LufMutant::HandoverOverwrites)),
    ("luf_zap_skips_empty_table", Mutant::Luf(LufMutant::ZapSkipsEmptyTable)),
    ("asid_no_flush_on_reuse", Mutant::AsidNoFlushOnReuse),
    ("reclaim_skip_dirty_flush", Mutant::ReclaimSkipDirtyFlush),
    ("line_out_of_order", Mutant::LineOutOfOrder),
    ("rwsem_reader_sleeps_without_writer", Mutant::RwsemReaderSleepsWithoutWriter),
    ("run_past_other_steps", Mutant::RunPastOtherSteps),
    ("run_skips_op_count", Mutant::RunSkipsOpCount),
];

impl Mutant {
    /// The `debug.mutant` values, in `MUTANTS` order.
    pub fn names() -> &'static [&'static str] {
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        NAMES.get_or_init(|| MUTANTS.iter().map(|(n, _)| *n).collect())
    }

    /// The line/rwsem model's broken variant this mutant selects.
    pub fn lock_mutant(self) -> crate::sim::lock::LockMutant {
        use crate::sim::lock::LockMutant;
        match self {
            Mutant::LineOutOfOrder => LockMutant::LineOutOfOrder,
            Mutant::RwsemReaderSleepsWithoutWriter => LockMutant::ReaderSleepsWithoutWriter,
            _ => LockMutant::None,
        }
    }

    /// The mutant a (validated) `debug.mutant` value names.
    pub fn named(s: &str) -> Mutant {
        MUTANTS.iter().find(|(n, _)| *n == s).map_or(Mutant::None, |(_, m)| *m)
    }
}

/// A THP sysfs `enabled` value (top level: always/madvise/never; per size also inherit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
pub enum ThpEnabled {
    Always,
    Inherit,
    Madvise,
    #[default]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ThpAnonAlign {
    /// Up to Linux 6.6: none (an anonymous mapping goes through
    /// mm_get_unmapped_area, page-aligned).
    None,
    /// Linux 6.8-6.11 ("mm: align larger anonymous mappings on THP
    /// boundaries", efa7df3e3bb5, 6.7): every anonymous mapping goes
    /// through thp_get_unmapped_area, whose __thp_get_unmapped_area aligns
    /// a length of at least PMD_SIZE; top-down, an aligned find is pushed
    /// up a PMD, next to the mapping above (96204e15310c, 6.8).
    LenGePmd,
    /// The same rule before 96204e15310c ("mm: thp_get_unmapped_area must
    /// honour topdown preference", 6.8): the mapping starts at the first
    /// PMD boundary of the padded area, so an aligned find keeps the PMD of
    /// padding above it, a gap nothing merges across. Linux 6.7, and
    /// f35b5d7d676e in 6.1-rc (reverted for 6.1 by 0ba09b1733).
    LenGePmdBottom,
    /// Linux 6.12 on ("mm, mmap: limit THP alignment of anonymous mappings
    /// to PMD-aligned sizes"): __get_unmapped_area calls
    /// thp_get_unmapped_area_vmflags only when IS_ALIGNED(len, PMD_SIZE).
    #[default]
    LenPmdAligned,
}

impl ThpAnonAlign {
    pub const VALUES: &'static [&'static str] = &["none", "len_ge_pmd_bottom", "len_ge_pmd", "len_pmd_aligned"];

    pub fn parse(s: &str) -> ThpAnonAlign {
        match s {
            "none" => ThpAnonAlign::None,
            "len_ge_pmd" => ThpAnonAlign::LenGePmd,
            "len_ge_pmd_bottom" => ThpAnonAlign::LenGePmdBottom,
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
            ThpAnonAlign::LenGePmd | ThpAnonAlign::LenGePmdBottom => len >= PMD_SIZE,
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

/// The large-anon-folio knobs. `Default` is blank: `Knobs::default()`
/// fills it from the knob table.
#[derive(Clone, Debug, Serialize, Default)]
pub struct AnonFolioKnobs {
    /// The order policy's name (`anon_folio.mode`, policy/mod.rs).
    pub mode: String,
    /// `anon_folio.thp_get_unmapped_area`: the PMD alignment rule of
    /// unhinted anonymous mmaps.
    pub thp_anon_align: ThpAnonAlign,
    /// `kernel/mm/transparent_hugepage/enabled`.
    pub thp_enabled: ThpEnabled,
    /// `hugepages-<16 << i>kB/enabled`, i = order - 2.
    pub per_size: [ThpEnabled; 8],
}

/// The kernel's knobs, in the order `foliosim list` and a normalised
/// config show them. The policy registry (policy/mod.rs) adds the names of
/// the selectors' policies and each policy's own knobs.
pub fn table() -> Vec<KnobSpec> {
    vec![
        KnobSpec::int("vm.min_free_kbytes", -1, (-1, i32::MAX as i64), "free memory the kernel keeps for atomic allocations; sets zone watermarks (-1: the kernel's sqrt formula)", |k, i| k.min_free_kbytes = (i >= 0).then_some(i as u64)),
        KnobSpec::int("vm.watermark_scale_factor", 10, (1, 3000), "distance between min/low/high watermarks in 1/10000 of zone memory", |k, i| k.watermark_scale_factor = i as u64),
        KnobSpec::int("kernel.randomize_va_space", 2, (0, 2), "ASLR: 1 or 2 (the default) put a new address space's mmap base a random number of pages (vm.mmap_rnd_bits bits, from the run's seed) below the stack gap, as exec does on every run of a real program; the processes a workload starts share one base, as children forked from one launcher do. 0 puts it where ASLR off does (setarch -R). The stack, the brk heap and a PIE binary's base stay at their ASLR-off places in either case", |k, i| k.randomize_va_space = i as u8),
        KnobSpec::int("vm.mmap_rnd_bits", 28, (28, 32), "bits of randomness in the mmap base when kernel.randomize_va_space is on (x86-64: CONFIG_ARCH_MMAP_RND_BITS, 28 by default, 28..32)", |k, i| k.mmap_rnd_bits = i as u32),
        KnobSpec::int("vm.percpu_pagelist_high_fraction", 0, (0, 1 << 20), "per-CPU page list high mark as a fraction of zone memory (0: derived from the low watermark)", |k, i| k.percpu_pagelist_high_fraction = i as u64),
        KnobSpec::int("debug/fault_around_bytes", 65536, (4096, 1 << 21), "bytes of cached file pages mapped around a read fault (do_fault_around); 4096 disables", |k, i| k.fault_around_bytes = i as u64),
        KnobSpec::choice("kernel/mm/transparent_hugepage/enabled", "never", &["always", "madvise", "never"], "THP for anonymous memory: the PMD size, and every hugepages-<size>kB set to inherit (modelled as 512 PTEs of one order-9 folio plus a 2 MiB TLB entry)", |k, s| k.anon_folio.thp_enabled = ThpEnabled::parse(s)),
        KnobSpec::selector("fault_locking", "mmap_lock", "how page faults synchronise with mmap/munmap: the way a fault enters before it would take mmap_lock for read (mm/fault_lock.rs)", |k, s| k.fault_locking = s.to_string()),
        KnobSpec::int("vm.speculative_page_fault", 1, (i64::MIN, i64::MAX), "with fault_locking = \"spf\": 0 disables the speculative attempt (gate G1 of the series' sysctl; the writer bookkeeping stays)", |k, i| k.speculative_page_fault = i != 0),
        KnobSpec::choice("mmap_lock.rwsem_semantics", "5.3+", &["5.3+", "5.1"], "mmap_lock's rwsem: \"5.3+\" readers spin briefly before sleeping (reader optimistic spinning, 5.3); \"5.1\" readers sleep as soon as they wait for a writer (the SPF seed's kernels)", |k, s| k.rwsem_51 = s == "5.1"),
        KnobSpec::flag("page_alloc.shuffle", false, "randomise the order of free memory at boot and on large frees (shuffle_pick_tail)", |k, b| k.shuffle = b),
        KnobSpec::flag("page_reporting.enabled", false, "a virtio-balloon device with VIRTIO_BALLOON_F_REPORTING registers for free page reporting (mm/page_reporting.c); off = the series applied but the feature not offered", |k, b| k.page_reporting = b),
        KnobSpec::int("page_reporting.page_reporting_order", -1, (-1, 10), "lowest buddy order reported to the host (module parameter; -1: the driver's choice, pageblock_order = 9 on x86-64)", |k, i| k.page_reporting_order = (i >= 0).then_some(i as u32)),
        KnobSpec::choice("page_reporting.reported_putback", "tail", &["tail", "v17_head_rules"], "where reported pages go back on their free list: \"tail\" (FPI_TO_TAIL, Linux 5.10+) or \"v17_head_rules\" (Linux 5.7: the ordinary head/tail rules of __free_one_page)", |k, s| k.reported_putback_tail = s == "tail"),
        KnobSpec::selector("host.discard", "dontneed", "how the hypervisor drops a range a guest reported free (virt/discard.rs)", |k, s| k.host_discard = s.to_string()),
        KnobSpec::flag("host.prealloc", false, "all guest memory is backed at boot (QEMU -mem-prealloc, or the state after the guest touched all of it)", |k, b| k.host_prealloc = b),
        KnobSpec::selector("anon_folio.mode", "off", "the policy that chooses the order of a fresh anonymous folio and the large-folio paths (mm/huge_memory.rs); setting a per-size hugepages-<size>kB knob without this one selects upstream", |k, s| k.anon_folio.mode = s.to_string()),
        KnobSpec::choice("anon_folio.thp_get_unmapped_area", "len_pmd_aligned", ThpAnonAlign::VALUES, "which unhinted private anonymous mmaps thp_get_unmapped_area places (padded by 2 MiB, then aligned to a PMD boundary; shared ones are shmem's): \"none\" (Linux <= 6.6), \"len_ge_pmd_bottom\" (6.7, and 6.1-rc's f35b5d7d676e: every one of at least 2 MiB, at the first PMD boundary of the padded area, so the padding stays above it), \"len_ge_pmd\" (6.8-6.11: the same, pushed up next to the mapping above, 96204e15310c), \"len_pmd_aligned\" (6.12 on: only lengths that are multiples of 2 MiB, IS_ALIGNED(len, PMD_SIZE)); rfc-v2's own patch 16 (anon_folio.mmap_align_unhinted) comes first", |k, s| k.anon_folio.thp_anon_align = ThpAnonAlign::parse(s)),
        KnobSpec::choice(MTHP_SIZE_KEYS[0], "never", &["always", "inherit", "madvise", "never"], "upstream mTHP: 16 KiB anonymous folios (order 2)", |k, s| k.anon_folio.per_size[0] = ThpEnabled::parse(s)),
        KnobSpec::choice(MTHP_SIZE_KEYS[1], "never", &["always", "inherit", "madvise", "never"], "upstream mTHP: 32 KiB anonymous folios (order 3)", |k, s| k.anon_folio.per_size[1] = ThpEnabled::parse(s)),
        KnobSpec::choice(MTHP_SIZE_KEYS[2], "never", &["always", "inherit", "madvise", "never"], "upstream mTHP: 64 KiB anonymous folios (order 4)", |k, s| k.anon_folio.per_size[2] = ThpEnabled::parse(s)),
        KnobSpec::choice(MTHP_SIZE_KEYS[3], "never", &["always", "inherit", "madvise", "never"], "upstream mTHP: 128 KiB anonymous folios (order 5)", |k, s| k.anon_folio.per_size[3] = ThpEnabled::parse(s)),
        KnobSpec::choice(MTHP_SIZE_KEYS[4], "never", &["always", "inherit", "madvise", "never"], "upstream mTHP: 256 KiB anonymous folios (order 6)", |k, s| k.anon_folio.per_size[4] = ThpEnabled::parse(s)),
        KnobSpec::choice(MTHP_SIZE_KEYS[5], "never", &["always", "inherit", "madvise", "never"], "upstream mTHP: 512 KiB anonymous folios (order 7)", |k, s| k.anon_folio.per_size[5] = ThpEnabled::parse(s)),
        KnobSpec::choice(MTHP_SIZE_KEYS[6], "never", &["always", "inherit", "madvise", "never"], "upstream mTHP: 1 MiB anonymous folios (order 8)", |k, s| k.anon_folio.per_size[6] = ThpEnabled::parse(s)),
        KnobSpec::choice(MTHP_SIZE_KEYS[7], "inherit", &["always", "inherit", "madvise", "never"], "upstream: PMD-size (2 MiB) THP, mapped as 512 PTEs of one order-9 folio plus a 2 MiB TLB entry", |k, s| k.anon_folio.per_size[7] = ThpEnabled::parse(s)),
        KnobSpec::int("debug.fault_trace", 0, (0, 10_000_000), "record up to this many fault-locking events (SPF attempts, aborts by reason, per-VMA lock outcomes) as [time_ns, cpu, address, event] in the result's fault_trace", |k, i| k.fault_trace = i as usize),
        KnobSpec::flag("kernel/mm/numa/demotion_enabled", false, "reclaim migrates folios to the next lower memory tier instead of dropping them", |k, b| k.demotion_enabled = b),
        KnobSpec::flag("kernel/mm/numa/pagecache_promotion_enabled", false, "promote unmapped page-cache folios from lower tiers when folio_mark_accessed finds them hot (RFC v3, needs kernel.numa_balancing = 2)", |k, b| k.pagecache_promotion_enabled = b),
        KnobSpec::int("kernel.numa_balancing", 0, (0, 3), "NUMA balancing: 0 off, 1 normal, 2 memory tiering, 3 both", |k, i| k.numa_balancing = i as u8),
        KnobSpec::int("kernel.numa_balancing_promote_rate_limit_MBps", 65536, (0, 1 << 40), "promotion rate limit, MB/s; the page-cache promotion list cap compares pages with this value", |k, i| k.promote_rate_limit_mbps = i as u64),
        KnobSpec::selector("promotion_list_order", "tail", "foliosim model switch: where promotion_candidate queues a page-cache folio it promotes, or whether it does (mm/memory_tiers.rs)", |k, s| k.promotion_policy = s.to_string()),
        KnobSpec::flag("luf.enabled", false, "lazy unmap flush (LUF v10 series, never merged): defer the TLB shootdown of read-only order-0 folios unmapped by reclaim or async migration until the frame leaves the page allocator again", |k, b| k.luf.enabled = b),
        KnobSpec::choice("luf.granularity", "global", &["global", "zone"], "LUF pending set: one global cpumask and generation (v10) or one per zone (RFC v12-like)", |k, s| k.luf.per_zone = s == "zone"),
        KnobSpec::flag("luf.v11_hooks", false, "LUF v11 forced flushes as well as v10's: a fault installing a writable PTE, file write(), init_on_free", |k, b| k.luf.v11_hooks = b),
        KnobSpec::flag("luf.invalidate_hook", false, "foliosim's fix, in no posted LUF version: invalidate_inode_pages2 (a file changed remotely: NFS, FUSE) forces the deferred flush first, as v11's write() hook does for local writes", |k, b| k.luf.invalidate_hook = b),
        KnobSpec::int("swap.size_mib", 0, (0, 1 << 34), "foliosim model switch: one swap device of this many MiB is swapped on at boot (0: no swap); reclaim then writes inactive anonymous folios out to it (mm/swapfile.rs)", |k, i| k.swap_size_mib = i as u64),
        KnobSpec::int("vm.swappiness", 60, (0, 200), "how hard reclaim goes for anonymous memory against the page cache: anon and file are scanned in the ratio swappiness : 200 - swappiness (get_scan_count's SCAN_FRACT, the reclaim costs not weighed)", |k, i| k.swappiness = i as u32),
        KnobSpec::flag("init_on_free", false, "boot parameter init_on_free=1: freed pages are zeroed (their contents change while free)", |k, b| k.init_on_free = b),
        KnobSpec::flag("migrate.batch_flush", true, "migrate_pages unmaps a batch with TTU_BATCH_FLUSH and flushes once (Linux 6.4+, commit 7e12beb8ca2a); false: every unmapped PTE is flushed at once (ptep_clear_flush), as before that commit, and LUF cannot defer", |k, b| k.migrate_batch_flush = b),
        KnobSpec::int("kernel.numa_balancing_scan_delay_ms", 1000, (0, 1 << 32), "NUMA balancing: the first scan of an mm waits this long, ms (debugfs sched/numa_balancing/scan_delay_ms)", |k, i| k.numa_scan_delay_ms = i as u64),
        KnobSpec::int("kernel.numa_balancing_scan_period_min_ms", 1000, (1, 1 << 32), "NUMA balancing: the shortest scan period of an mm, ms, divided by its RSS in scan_size windows (task_scan_min; sysctl before 5.13, debugfs sched/numa_balancing/scan_period_min_ms since)", |k, i| k.numa_scan_period_min_ms = i as u64),
        KnobSpec::int("kernel.numa_balancing_scan_period_max_ms", 60000, (1, 1 << 32), "NUMA balancing: the longest scan period, ms, divided by the RSS in scan_size windows (task_scan_max), and the period of the hot-threshold adjustment (debugfs sched/numa_balancing/scan_period_max_ms)", |k, i| k.numa_scan_period_max_ms = i as u64),
        KnobSpec::int("kernel.numa_balancing_scan_size_mb", 256, (1, 1 << 32), "NUMA balancing: MB of PTEs made PROT_NONE per task_numa_work pass (up to 8x that of address space walked)", |k, i| k.numa_scan_size_mb = i as u64),
        KnobSpec::int("kernel.numa_balancing_hot_threshold_ms", 1000, (1, 1 << 32), "NUMA balancing memory tiering: a lower-tier page whose hint fault came less than this after its scan is hot (debugfs sched/numa_balancing/hot_threshold_ms)", |k, i| k.numa_hot_threshold_ms = i as u64),
        KnobSpec::choice("debug.mutant", "none", Mutant::names(), "a deliberately broken mechanism, to show the invariant checker catches it (tests only)", |k, s| k.mutant = Mutant::named(s)),
        KnobSpec::choice("spf.tree_protection", "rcu+refcount", &["rcu+refcount", "rwlock"], "with fault_locking = \"spf\": how the speculative VMA lookup is protected against tree changes: rcu+refcount (v12: RCU walk, get_vma/put_vma on the VMA's line) or rwlock (v11: also read_lock/read_unlock of the per-mm mm_rb_lock, two RMWs on one shared mm_struct line per lookup)", |k, s| k.spf_tree_rwlock = s == "rwlock"),
    ]
}

/// Declares `Knobs` and its blank value (every field zero, false or
/// empty), the starting point the table's defaults are applied to.
macro_rules! knob_values {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])* pub struct $name { $($(#[$fm])* pub $f: $t,)* }
        impl $name {
            fn blank() -> Self {
                $name { $($f: Default::default(),)* }
            }
        }
    };
}

knob_values! {
/// The knob values one simulation runs with. Each field is set by its row
/// of `table()`; `Default` applies every row's default.
#[derive(Clone, Debug, Serialize)]
pub struct Knobs {
    pub min_free_kbytes: Option<u64>,
    /// kernel.randomize_va_space (0: ASLR off).
    pub randomize_va_space: u8,
    /// vm.mmap_rnd_bits.
    pub mmap_rnd_bits: u32,
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
    /// The host's discard policy's name (`host.discard`, policy/mod.rs).
    pub host_discard: String,
    pub host_prealloc: bool,
    pub anon_folio: AnonFolioKnobs,
    /// The fault-locking policy's name (`fault_locking`, policy/mod.rs).
    pub fault_locking: String,
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
    /// The page-cache promotion policy's name (`promotion_list_order`,
    /// policy/mod.rs).
    pub promotion_policy: String,
    pub luf: LufKnobs,
    /// swap.size_mib: the swap device's size (0: no swap).
    pub swap_size_mib: u64,
    /// vm.swappiness.
    pub swappiness: u32,
    /// init_on_free=1.
    pub init_on_free: bool,
    /// migrate_pages batches its TLB flush (7e12beb8ca2a applied).
    pub migrate_batch_flush: bool,
    /// spf.tree_protection = "rwlock" (SPF v11's mm_rb_lock).
    pub spf_tree_rwlock: bool,
    /// The values of policies' own knobs (`Land::Param`), by key.
    #[serde(skip)]
    pub params: std::collections::BTreeMap<&'static str, KnobValue>,
}
}

impl Default for Knobs {
    fn default() -> Self {
        let mut k = Knobs::blank();
        for spec in table() {
            k.set(&spec, &spec.default_value());
        }
        k
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
    /// Apply one value of `spec`'s type (`validate` checked it).
    pub fn set(&mut self, spec: &KnobSpec, v: &KnobValue) {
        match (spec.land, v) {
            (Land::Int(f), KnobValue::Int(i)) => f(self, *i),
            (Land::Bool(f), KnobValue::Bool(b)) => f(self, *b),
            (Land::Str(f), KnobValue::Str(s)) => f(self, s),
            (Land::Param, v) => {
                self.params.insert(spec.key, v.clone());
            }
            (_, v) => unreachable!("knob {}: a {v:?} passed validation against {:?}", spec.key, spec.default),
        }
    }

    /// A policy's own knob: the value set, else its default.
    pub fn param(&self, spec: &KnobSpec) -> KnobValue {
        self.params.get(spec.key).cloned().unwrap_or_else(|| spec.default_value())
    }
}

/// The bits of kernel.numa_balancing: NUMA placement, memory tiering.
pub const NUMA_BALANCING_NORMAL: u8 = 1;
pub const NUMA_BALANCING_MEMORY_TIERING: u8 = 2;

/// The kernel's lowest non-zero vm.percpu_pagelist_high_fraction
/// (mm/page_alloc.c: its sysctl handler refuses 1..7 with -EINVAL).
pub const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u64 = 8;

impl Knobs {
    /// What the per-knob checks (type, range, allowed values) cannot see: a
    /// value the kernel refuses by a rule of its own, two knobs that
    /// contradict each other, a knob that does nothing without another,
    /// one the machine (`mem_kib` of memory) cannot hold. Every such rule
    /// is here, and config loading runs them all. `written` says whether
    /// the config set a key (the defaults never conflict); the error names
    /// the knob to change and says why.
    pub fn check(&self, written: &dyn Fn(&str) -> bool, mem_kib: u64) -> Result<(), (&'static str, String)> {
        let f = self.percpu_pagelist_high_fraction;
        if f != 0 && f < MIN_PERCPU_PAGELIST_HIGH_FRACTION {
            return Err((
                "vm.percpu_pagelist_high_fraction",
                format!(
                    "{f} is below the kernel's minimum of {MIN_PERCPU_PAGELIST_HIGH_FRACTION} (MIN_PERCPU_PAGELIST_HIGH_FRACTION; 0 keeps the default pcp->high)"
                ),
            ));
        }
        if let Some(m) = self.min_free_kbytes.filter(|&m| m >= mem_kib) {
            return Err((
                "vm.min_free_kbytes",
                format!("{m} KiB is not below the machine's memory ({mem_kib} KiB): the min watermark would leave nothing to allocate"),
            ));
        }
        let (lo, hi) = (self.numa_scan_period_min_ms, self.numa_scan_period_max_ms);
        if lo > hi {
            let (min_key, max_key) = ("kernel.numa_balancing_scan_period_min_ms", "kernel.numa_balancing_scan_period_max_ms");
            let key = if written(min_key) { min_key } else { max_key };
            return Err((key, format!("the shortest scan period ({lo} ms) is above the longest ({hi} ms)")));
        }
        if !self.luf.enabled {
            for (key, on) in [
                ("luf.v11_hooks", self.luf.v11_hooks),
                ("luf.granularity", self.luf.per_zone),
                ("luf.invalidate_hook", self.luf.invalidate_hook),
            ] {
                if on {
                    return Err((key, "has no effect without luf.enabled = true".into()));
                }
            }
        }
        if self.pagecache_promotion_enabled && self.numa_balancing & NUMA_BALANCING_MEMORY_TIERING == 0 {
            return Err((
                "kernel/mm/numa/pagecache_promotion_enabled",
                format!(
                    "has no effect with kernel.numa_balancing = {} (page-cache promotion is part of memory tiering: 2 or 3)",
                    self.numa_balancing
                ),
            ));
        }
        self.check_mthp_sizes(written)
    }

    /// The per-size `hugepages-<size>kB/enabled` knobs are read by the
    /// upstream order policy only: under another `anon_folio.mode` a size
    /// written to be enabled would silently stay off (and a PMD size
    /// written other than the top-level `enabled` says, silently follow it).
    fn check_mthp_sizes(&self, written: &dyn Fn(&str) -> bool) -> Result<(), (&'static str, String)> {
        let a = &self.anon_folio;
        if a.mode == "upstream" {
            return Ok(());
        }
        let effective = |e: ThpEnabled| if e == ThpEnabled::Inherit { a.thp_enabled } else { e };
        for (i, key) in MTHP_SIZE_KEYS.iter().enumerate() {
            let v = a.per_size[i];
            let does = if i == 7 { effective(v) == a.thp_enabled } else { effective(v) == ThpEnabled::Never };
            if written(key) && !does {
                let said = format!("{v:?}").to_lowercase();
                let what = if i == 7 { "PMD THPs follow transparent_hugepage/enabled alone" } else { "these folios are never made" };
                return Err((
                    key,
                    format!(
                        "\"{said}\" has no effect with anon_folio.mode = \"{}\": only \"upstream\" reads the per-size knobs, and {what} (leave anon_folio.mode out, or set it to \"upstream\")",
                        a.mode
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Type-check `v` against the knob `spec`.
pub fn validate(spec: &KnobSpec, v: &toml::Value) -> Result<KnobValue, String> {
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
