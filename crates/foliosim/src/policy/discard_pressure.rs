//! `host.discard = "pressure"`: an example discard policy (the one
//! docs/tutorial.md builds). The VMM marks a reported range MADV_FREE
//! while the guests hold less than `host.discard_free_below_pct` of the
//! host's memory, so a refault finds the old page, and drops it with
//! MADV_DONTNEED above that, where host reclaim would soon take the lazily
//! freed pages anyway. With no limit it is always MADV_FREE.

use super::Policy;
use crate::kernel::knobs::{KnobSpec, Knobs};
use crate::virt::discard::{Advice, DiscardCtx, DiscardPolicy};
use std::sync::Arc;

const FREE_BELOW_PCT: KnobSpec = KnobSpec::int_param(
    "host.discard_free_below_pct",
    50,
    (0, 100),
    "with host.discard = \"pressure\": MADV_FREE while the guests hold less than this percentage of the host's memory, MADV_DONTNEED from there",
);

pub const POLICY: Policy<Arc<dyn DiscardPolicy>> = Policy {
    name: "pressure",
    help: "example: MADV_FREE below host.discard_free_below_pct of the host's memory, MADV_DONTNEED above",
    knobs: &[FREE_BELOW_PCT],
    build,
};

fn build(k: &Knobs) -> Arc<dyn DiscardPolicy> {
    Arc::new(Pressure { pct: super::int_knob(k, &FREE_BELOW_PCT) as u64 })
}

struct Pressure {
    pct: u64,
}

impl DiscardPolicy for Pressure {
    fn advice(&self, c: &DiscardCtx) -> Advice {
        match c.limit {
            Some(limit) if c.rss * 100 >= limit * self.pct => Advice::DontNeed,
            _ => Advice::Free,
        }
    }
}
