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
    /// Page-cache promotion never runs its task work on return to user
    /// space: isolated folios stay off the LRU (leak) until the task exits.
    PromoSkipTaskWork,
    /// Page-cache promotion isolates even when the target node is below
    /// its high watermark (no migrate_balanced_pgdat check).
    PromoIgnoreWatermark,
}

pub const MUTANTS: &[&str] = &["none", "skip_shootdown", "leak_mapcount", "buddy_skip_nr_free_dec", "buddy_no_merge", "promo_skip_task_work", "promo_ignore_watermark"];

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
        KnobSpec { key: "kernel/mm/numa/demotion_enabled", default: Bool(false), help: "reclaim migrates folios to the next lower memory tier instead of dropping them", values: None, range: None },
        KnobSpec { key: "kernel/mm/numa/pagecache_promotion_enabled", default: Bool(false), help: "promote unmapped page-cache folios from lower tiers when folio_mark_accessed finds them hot (RFC v3, needs kernel.numa_balancing = 2)", values: None, range: None },
        KnobSpec { key: "kernel.numa_balancing", default: Int(0), help: "NUMA balancing: 0 off, 1 normal, 2 memory tiering, 3 both", values: None, range: Some((0, 3)) },
        KnobSpec { key: "kernel.numa_balancing_promote_rate_limit_MBps", default: Int(65536), help: "promotion rate limit, MB/s; the page-cache promotion list cap compares pages with this value", values: None, range: Some((0, 1 << 40)) },
        KnobSpec { key: "promotion_list_order", default: Str("tail"), help: "foliosim model switch: promotion_candidate appends with list_add_tail (v3, \"tail\") or list_add (the development build, \"head\")", values: Some(&["tail", "head"]), range: None },
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
    pub demotion_enabled: bool,
    pub pagecache_promotion_enabled: bool,
    pub numa_balancing: u8,
    pub promote_rate_limit_mbps: u64,
    /// list_add (head) instead of list_add_tail for the promotion list.
    pub promo_list_head: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs { min_free_kbytes: None, watermark_scale_factor: 10, percpu_pagelist_high_fraction: 0, fault_around_bytes: 65536, shuffle: false, mutant: Mutant::None, demotion_enabled: false, pagecache_promotion_enabled: false, numa_balancing: 0, promote_rate_limit_mbps: 65536, promo_list_head: false }
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
            ("kernel/mm/numa/demotion_enabled", KnobValue::Bool(b)) => self.demotion_enabled = *b,
            ("kernel/mm/numa/pagecache_promotion_enabled", KnobValue::Bool(b)) => self.pagecache_promotion_enabled = *b,
            ("kernel.numa_balancing", KnobValue::Int(i)) => self.numa_balancing = *i as u8,
            ("kernel.numa_balancing_promote_rate_limit_MBps", KnobValue::Int(i)) => self.promote_rate_limit_mbps = *i as u64,
            ("promotion_list_order", KnobValue::Str(s)) => self.promo_list_head = s == "head",
            ("debug.mutant", KnobValue::Str(s)) => {
                self.mutant = match s.as_str() {
                    "skip_shootdown" => Mutant::SkipShootdown,
                    "leak_mapcount" => Mutant::LeakMapcount,
                    "buddy_skip_nr_free_dec" => Mutant::BuddySkipNrFreeDec,
                    "buddy_no_merge" => Mutant::BuddyNoMerge,
                    "promo_skip_task_work" => Mutant::PromoSkipTaskWork,
                    "promo_ignore_watermark" => Mutant::PromoIgnoreWatermark,
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
