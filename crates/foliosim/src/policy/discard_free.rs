//! `host.discard = "free"`: the VMM marks a reported range with
//! MADV_FREE (the RFC of the free page reporting v17 cover letter): the
//! pages stay until host pressure reclaims them, and a refault before
//! that finds them without zeroing.

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::virt::discard::{Advice, DiscardCtx, DiscardPolicy};
use std::sync::Arc;

pub const POLICY: Policy<Arc<dyn DiscardPolicy>> = Policy {
    name: "free",
    help: "MADV_FREE (the RFC): kept until host pressure, refault without zeroing",
    knobs: &[],
    build,
};

fn build(_: &Knobs) -> Arc<dyn DiscardPolicy> {
    Arc::new(Free)
}

struct Free;

impl DiscardPolicy for Free {
    fn advice(&self, _: &DiscardCtx) -> Advice {
        Advice::Free
    }
}
