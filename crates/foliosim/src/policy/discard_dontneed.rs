//! `host.discard = "dontneed"`: the VMM drops a reported range with
//! MADV_DONTNEED, as QEMU's ram_block_discard_range does for anonymous
//! RAM; a refault zero-fills.

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::virt::discard::{Advice, DiscardCtx, DiscardPolicy};
use std::sync::Arc;

pub const POLICY: Policy<Arc<dyn DiscardPolicy>> = Policy {
    name: "dontneed",
    help: "MADV_DONTNEED (QEMU's ram_block_discard_range): the host frees the range at once; a refault zero-fills",
    knobs: &[],
    build,
};

fn build(_: &Knobs) -> Arc<dyn DiscardPolicy> {
    Arc::new(DontNeed)
}

struct DontNeed;

impl DiscardPolicy for DontNeed {
    fn advice(&self, _: &DiscardCtx) -> Advice {
        Advice::DontNeed
    }
}
