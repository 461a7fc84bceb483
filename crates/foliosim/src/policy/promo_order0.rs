//! `promotion_list_order = "order0"`: an example promotion policy (the one
//! docs/tutorial.md builds). Only order-0 folios are promoted, at the tail
//! as in RFC v3; a large folio stays on its lower-tier LRU, so one hot
//! page does not pull a whole large folio up.

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::mm::memory_tiers::{ListEnd, PromoCandidate, PromotionPolicy};

pub const POLICY: Policy<Box<dyn PromotionPolicy>> =
    Policy { name: "order0", help: "example: RFC v3 for order-0 folios; large folios are never promoted", knobs: &[], build };

fn build(_: &Knobs) -> Box<dyn PromotionPolicy> {
    Box::new(Order0)
}

struct Order0;

impl PromotionPolicy for Order0 {
    fn enqueue(&self, c: &PromoCandidate) -> Option<ListEnd> {
        (c.order == 0).then_some(ListEnd::Tail)
    }
}
