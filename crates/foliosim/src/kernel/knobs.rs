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
    /// The speculative fault skips the final vm_sequence check under the PTL.
    SpfSkipSeqCheck,
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

pub const MUTANTS: &[&str] = &["none", "skip_shootdown", "leak_mapcount", "buddy_skip_nr_free_dec", "buddy_no_merge", "spf_skip_seq_check"];

pub fn registry() -> Vec<KnobSpec> {
    use KnobDefault::*;
    vec![
        KnobSpec { key: "vm.min_free_kbytes", default: Int(-1), help: "free memory the kernel keeps for atomic allocations; sets zone watermarks (-1: the kernel's sqrt formula)", values: None, range: Some((-1, 1 << 40)) },
        KnobSpec { key: "vm.watermark_scale_factor", default: Int(10), help: "distance between min/low/high watermarks in 1/10000 of zone memory", values: None, range: Some((1, 3000)) },
        KnobSpec { key: "vm.percpu_pagelist_high_fraction", default: Int(0), help: "per-CPU page list high mark as a fraction of zone memory (0: derived from the low watermark)", values: None, range: Some((0, 1 << 20)) },
        KnobSpec { key: "debug/fault_around_bytes", default: Int(65536), help: "bytes of cached file pages mapped around a read fault (do_fault_around); 4096 disables", values: None, range: Some((4096, 1 << 21)) },
        KnobSpec { key: "kernel/mm/transparent_hugepage/enabled", default: Str("never"), help: "PMD-size THP for anonymous memory (the core models 4 KiB pages only; large folios arrive with the mTHP mechanism)", values: Some(&["never"]), range: None },
        KnobSpec { key: "fault_locking", default: Str("mmap_lock"), help: "how page faults synchronise with mmap/munmap: mmap_lock (every fault takes mmap_lock for read), per_vma (6.4+ lock_vma_under_rcu, fallback to mmap_lock), spf (speculative page faults v12: RCU lookup, vm_sequence snapshot validated under the PTL, retry through mmap_lock)", values: Some(&["mmap_lock", "per_vma", "spf"]), range: None },
        KnobSpec { key: "vm.speculative_page_fault", default: Int(1), help: "with fault_locking = \"spf\": 0 disables the speculative attempt (gate G1 of the series' sysctl; the writer bookkeeping stays)", values: None, range: Some((i64::MIN, i64::MAX)) },
        KnobSpec { key: "mmap_lock.rwsem_semantics", default: Str("5.3+"), help: "mmap_lock's rwsem: \"5.3+\" readers spin briefly before sleeping (reader optimistic spinning, 5.3); \"5.1\" readers sleep as soon as they wait for a writer (the SPF seed's kernels)", values: Some(&["5.3+", "5.1"]), range: None },
        KnobSpec { key: "page_alloc.shuffle", default: Bool(false), help: "randomise the order of free memory at boot and on large frees (shuffle_pick_tail)", values: None, range: None },
        KnobSpec { key: "debug.fault_trace", default: Int(0), help: "record up to this many fault-locking events (SPF attempts, aborts by reason, per-VMA lock outcomes) as [time_ns, cpu, address, event] in the result's fault_trace", values: None, range: Some((0, 10_000_000)) },
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
    pub fault_locking: FaultLocking,
    /// debug.fault_trace: how many fault-locking events to record.
    pub fault_trace: usize,
    /// mmap_lock.rwsem_semantics = "5.1": readers do not spin.
    pub rwsem_51: bool,
    /// vm.speculative_page_fault != 0.
    pub speculative_page_fault: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs { min_free_kbytes: None, watermark_scale_factor: 10, percpu_pagelist_high_fraction: 0, fault_around_bytes: 65536, shuffle: false, mutant: Mutant::None, fault_locking: FaultLocking::MmapLock, speculative_page_fault: true, fault_trace: 0, rwsem_51: false }
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
            ("debug.mutant", KnobValue::Str(s)) => {
                self.mutant = match s.as_str() {
                    "skip_shootdown" => Mutant::SkipShootdown,
                    "leak_mapcount" => Mutant::LeakMapcount,
                    "buddy_skip_nr_free_dec" => Mutant::BuddySkipNrFreeDec,
                    "buddy_no_merge" => Mutant::BuddyNoMerge,
                    "spf_skip_seq_check" => Mutant::SpfSkipSeqCheck,
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
