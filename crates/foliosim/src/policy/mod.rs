//! The policy registry: every policy of every kind names itself here and
//! declares its own knobs. A kind is an interface of the mm (an order
//! policy for anonymous folios, a fault-locking policy, a page-cache
//! promotion policy) or of the host under a guest (the discard of free
//! page reporting) and a selector knob that picks one of its policies
//! by name. Adding a policy is one new file in this directory plus one
//! line in `registry!` below (docs/tutorial.md, "Add a policy").
//!
//! A policy's own knobs (`KnobSpec::int_param` and friends) land in
//! `Knobs::params`; they count only when that policy is selected (setting
//! one for another policy is a config error), and the normalised config
//! lists them only then.

use crate::kernel::knobs::{self, KnobSpec, KnobValue, Knobs};
use crate::mm::fault_lock::FaultLockPolicy;
use crate::mm::huge_mm::AnonOrderPolicy;
use crate::mm::memory_tiers::PromotionPolicy;
use crate::types::{ConfigError, Error};
use crate::virt::discard::DiscardPolicy;
use std::sync::{Arc, OnceLock};

/// One policy: its name (the selector's value), a line of help, the knobs
/// only it reads, and how to build it from the knob values.
pub struct Policy<B: 'static> {
    pub name: &'static str,
    pub help: &'static str,
    pub knobs: &'static [KnobSpec],
    pub build: fn(&Knobs) -> B,
}

/// The policies of one kind and the knob that selects among them.
pub struct Kind<B: 'static> {
    pub selector: &'static str,
    pub policies: &'static [Policy<B>],
}

/// Declares each policy file as a module and lists its `POLICY` under its kind.
macro_rules! registry {
    ($($(#[$m:meta])* $kind:ident: $b:ty = $selector:literal [$($file:ident,)*];)*) => {
        $($(mod $file;)*)*
        $($(#[$m])* pub const $kind: Kind<$b> = Kind { selector: $selector, policies: &[$($file::POLICY,)*] };)*
    };
}

registry! {
    /// Anonymous-folio order policies (mm/huge_memory.rs `AnonOrderPolicy`).
    ANON_ORDER: Box<dyn AnonOrderPolicy> = "anon_folio.mode" [
        anon_off,
        anon_rfc_v2,
        anon_upstream,
        anon_only_order,
    ];
    /// Fault-locking policies (mm/fault_lock.rs `FaultLockPolicy`).
    FAULT_LOCK: &'static dyn FaultLockPolicy = "fault_locking" [
        lock_mmap_lock,
        lock_per_vma,
        lock_spf,
    ];
    /// Page-cache promotion policies (mm/memory_tiers.rs `PromotionPolicy`).
    PROMOTION: Box<dyn PromotionPolicy> = "promotion_list_order" [
        promo_tail,
        promo_head,
        promo_order0,
    ];
    /// The host's discard of a reported range (virt/discard.rs `DiscardPolicy`).
    HOST_DISCARD: Arc<dyn DiscardPolicy> = "host.discard" [
        discard_dontneed,
        discard_free,
        discard_pressure,
    ];
}

/// What the knob registry needs of a kind, whatever its policies build.
trait KindInfo: Sync {
    fn selector(&self) -> &'static str;
    /// Each policy's name, help and own knobs.
    fn entries(&self) -> Vec<(&'static str, &'static str, &'static [KnobSpec])>;
}

impl<B: 'static> KindInfo for Kind<B> {
    fn selector(&self) -> &'static str {
        self.selector
    }
    fn entries(&self) -> Vec<(&'static str, &'static str, &'static [KnobSpec])> {
        self.policies.iter().map(|p| (p.name, p.help, p.knobs)).collect()
    }
}

const KINDS: &[&dyn KindInfo] = &[&ANON_ORDER, &FAULT_LOCK, &PROMOTION, &HOST_DISCARD];

/// Every knob: the kernel's table (kernel/knobs.rs) with each selector's
/// values filled in from its kind's policies and its help pointing at
/// them, then every policy's own knobs, marked with their owner. No other
/// place lists the policies of a kind.
pub fn knobs() -> &'static [KnobSpec] {
    static ALL: OnceLock<Vec<KnobSpec>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut all = knobs::table();
        for kind in KINDS {
            let names: Vec<&'static str> = kind.entries().iter().map(|e| e.0).collect();
            let names: &'static [&'static str] = Box::leak(names.into_boxed_slice());
            let spec = all.iter_mut().find(|s| s.key == kind.selector()).expect("every kind's selector is in the knob table");
            spec.values = Some(names);
            let help = format!("{}; each policy with its help and own knobs: `foliosim list policies {}`", spec.help, spec.key);
            spec.help = Box::leak(help.into_boxed_str());
        }
        for kind in KINDS {
            for (name, _, own) in kind.entries() {
                all.extend(own.iter().map(|s| KnobSpec { owner: Some((kind.selector(), name)), ..s.clone() }));
            }
        }
        all
    })
}

/// The knob `key`, if there is one.
pub fn find(key: &str) -> Option<&'static KnobSpec> {
    knobs().iter().find(|s| s.key == key)
}

/// Whether `spec` counts with the selectors as `value` reports them (the
/// value set, None: the default): always, unless it is another policy's.
pub fn selected(spec: &KnobSpec, value: impl Fn(&str) -> Option<KnobValue>) -> bool {
    let Some((selector, name)) = spec.owner else { return true };
    match value(selector) {
        Some(KnobValue::Str(s)) => s == name,
        _ => find(selector).is_some_and(|sel| matches!(sel.default, knobs::KnobDefault::Str(d) if d == name)),
    }
}

fn build<B>(kind: &Kind<B>, k: &Knobs, name: &str) -> Result<B, Error> {
    match kind.policies.iter().find(|p| p.name == name) {
        Some(p) => Ok((p.build)(k)),
        None => Err(Error::Config(ConfigError {
            file: "(knobs)".into(),
            line: None,
            key: kind.selector.into(),
            reason: format!("unknown policy \"{name}\" (see `foliosim list`)"),
        })),
    }
}

/// The anonymous-folio order policy `anon_folio.mode` selects.
pub fn anon_order(k: &Knobs) -> Result<Box<dyn AnonOrderPolicy>, Error> {
    build(&ANON_ORDER, k, &k.anon_folio.mode)
}

/// The fault-locking policy `fault_locking` selects.
pub fn fault_lock(k: &Knobs) -> Result<&'static dyn FaultLockPolicy, Error> {
    build(&FAULT_LOCK, k, &k.fault_locking)
}

/// The page-cache promotion policy `promotion_list_order` selects.
pub fn promotion(k: &Knobs) -> Result<Box<dyn PromotionPolicy>, Error> {
    build(&PROMOTION, k, &k.promotion_policy)
}

/// The host's discard policy `host.discard` selects.
pub fn host_discard(k: &Knobs) -> Result<Arc<dyn DiscardPolicy>, Error> {
    build(&HOST_DISCARD, k, &k.host_discard)
}

/// A policy's own integer knob (the value set, else its default).
pub fn int_knob(k: &Knobs, spec: &KnobSpec) -> i64 {
    match k.param(spec) {
        KnobValue::Int(i) => i,
        v => unreachable!("knob {}: {v:?} is not an integer", spec.key),
    }
}

/// A policy's own boolean knob (the value set, else its default).
pub fn flag_knob(k: &Knobs, spec: &KnobSpec) -> bool {
    match k.param(spec) {
        KnobValue::Bool(b) => b,
        v => unreachable!("knob {}: {v:?} is not a boolean", spec.key),
    }
}

/// Every policy as `foliosim list policies` shows it, from the registry:
/// its selector and what the selector decides, its name, whether it is
/// the selector's default, its help and its own knobs.
pub fn catalog() -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for kind in KINDS {
        let sel = find(kind.selector()).expect("every kind's selector is in the knob table");
        for (name, help, own) in kind.entries() {
            let knobs: Vec<serde_json::Value> = own
                .iter()
                .map(|s| serde_json::json!({"key": s.key, "default": s.default, "help": s.help, "values": s.values, "range": s.range}))
                .collect();
            out.push(serde_json::json!({
                "selector": kind.selector(),
                "kind": sel.help,
                "name": name,
                "default": matches!(sel.default, knobs::KnobDefault::Str(d) if d == name),
                "help": help,
                "knobs": knobs,
            }));
        }
    }
    out
}
