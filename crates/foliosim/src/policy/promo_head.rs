//! `promotion_list_order = "head"`: page-cache promotion as the series'
//! development build had it: every candidate joins the front of the
//! task's list (list_add).

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::mm::memory_tiers::{ListEnd, PromoCandidate, PromotionPolicy};

pub const POLICY: Policy<Box<dyn PromotionPolicy>> =
    Policy { name: "head", help: "the development build: every candidate, list_add", knobs: &[], build };

fn build(_: &Knobs) -> Box<dyn PromotionPolicy> {
    Box::new(Head)
}

struct Head;

impl PromotionPolicy for Head {
    fn enqueue(&self, _: &PromoCandidate) -> Option<ListEnd> {
        Some(ListEnd::Head)
    }
}
