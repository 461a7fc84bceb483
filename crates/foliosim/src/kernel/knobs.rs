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
}

pub const MUTANTS: &[&str] = &["none", "skip_shootdown", "leak_mapcount", "buddy_skip_nr_free_dec", "buddy_no_merge", "fpr_keep_reported_on_alloc"];

pub fn registry() -> Vec<KnobSpec> {
    use KnobDefault::*;
    vec![
        KnobSpec { key: "vm.min_free_kbytes", default: Int(-1), help: "free memory the kernel keeps for atomic allocations; sets zone watermarks (-1: the kernel's sqrt formula)", values: None, range: Some((-1, 1 << 40)) },
        KnobSpec { key: "vm.watermark_scale_factor", default: Int(10), help: "distance between min/low/high watermarks in 1/10000 of zone memory", values: None, range: Some((1, 3000)) },
        KnobSpec { key: "vm.percpu_pagelist_high_fraction", default: Int(0), help: "per-CPU page list high mark as a fraction of zone memory (0: derived from the low watermark)", values: None, range: Some((0, 1 << 20)) },
        KnobSpec { key: "debug/fault_around_bytes", default: Int(65536), help: "bytes of cached file pages mapped around a read fault (do_fault_around); 4096 disables", values: None, range: Some((4096, 1 << 21)) },
        KnobSpec { key: "kernel/mm/transparent_hugepage/enabled", default: Str("never"), help: "PMD-size THP for anonymous memory (the core models 4 KiB pages only; large folios arrive with the mTHP mechanism)", values: Some(&["never"]), range: None },
        KnobSpec { key: "fault_locking", default: Str("mmap_lock"), help: "how page faults synchronise with mmap/munmap: the classic mmap_lock read side", values: Some(&["mmap_lock"]), range: None },
        KnobSpec { key: "page_alloc.shuffle", default: Bool(false), help: "randomise the order of free memory at boot and on large frees (shuffle_pick_tail)", values: None, range: None },
        KnobSpec { key: "page_reporting.enabled", default: Bool(false), help: "a virtio-balloon device with VIRTIO_BALLOON_F_REPORTING registers for free page reporting (mm/page_reporting.c); off = the series applied but the feature not offered", values: None, range: None },
        KnobSpec { key: "page_reporting.page_reporting_order", default: Int(-1), help: "lowest buddy order reported to the host (module parameter; -1: the driver's choice, pageblock_order = 9 on x86-64)", values: None, range: Some((-1, 10)) },
        KnobSpec { key: "page_reporting.reported_putback", default: Str("tail"), help: "where reported pages go back on their free list: \"tail\" (FPI_TO_TAIL, Linux 5.10+) or \"v17_head_rules\" (Linux 5.7: the ordinary head/tail rules of __free_one_page)", values: Some(&["tail", "v17_head_rules"]), range: None },
        KnobSpec { key: "host.discard", default: Str("dontneed"), help: "how the hypervisor drops a reported range: \"dontneed\" (MADV_DONTNEED, QEMU's ram_block_discard_range: refault zero-fills) or \"free\" (MADV_FREE, the RFC: kept until host pressure, refault without zeroing)", values: Some(&["dontneed", "free"]), range: None },
        KnobSpec { key: "host.thp", default: Bool(false), help: "the host backs guest memory with 2 MiB transparent huge pages where a whole aligned 2 MiB range is unbacked", values: None, range: None },
        KnobSpec { key: "host.mem_mib", default: Int(0), help: "host memory available to this guest, MiB (0: no limit); beyond it the host reclaims (MADV_FREE'd pages first, then swaps guest pages out)", values: None, range: Some((0, 1 << 34)) },
        KnobSpec { key: "host.prealloc", default: Bool(false), help: "all guest memory is backed at boot (QEMU -mem-prealloc, or the state after the guest touched all of it)", values: None, range: None },
        KnobSpec { key: "debug.mutant", default: Str("none"), help: "a deliberately broken mechanism, to show the invariant checker catches it (tests only)", values: Some(MUTANTS), range: None },
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
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs { min_free_kbytes: None, watermark_scale_factor: 10, percpu_pagelist_high_fraction: 0, fault_around_bytes: 65536, shuffle: false, mutant: Mutant::None, page_reporting: false, page_reporting_order: None, reported_putback_tail: true, host_discard_free: false, host_thp: false, host_mem_mib: 0, host_prealloc: false }
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
            ("debug.mutant", KnobValue::Str(s)) => {
                self.mutant = match s.as_str() {
                    "skip_shootdown" => Mutant::SkipShootdown,
                    "leak_mapcount" => Mutant::LeakMapcount,
                    "buddy_skip_nr_free_dec" => Mutant::BuddySkipNrFreeDec,
                    "buddy_no_merge" => Mutant::BuddyNoMerge,
                    "fpr_keep_reported_on_alloc" => Mutant::FprKeepReportedOnAlloc,
                    _ => Mutant::None,
                }
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
