//! `promotion_list_order = "tail"`: page-cache promotion as RFC v3 posted
//! it: every candidate joins the end of the task's list (list_add_tail).

use super::Policy;
use crate::kernel::knobs::Knobs;
use crate::mm::memory_tiers::{ListEnd, PromoCandidate, PromotionPolicy};

pub const POLICY: Policy<Box<dyn PromotionPolicy>> =
    Policy { name: "tail", help: "RFC v3: every candidate, list_add_tail", knobs: &[], build };

fn build(_: &Knobs) -> Box<dyn PromotionPolicy> {
    Box::new(Tail)
}

struct Tail;

impl PromotionPolicy for Tail {
    fn enqueue(&self, _: &PromoCandidate) -> Option<ListEnd> {
        Some(ListEnd::Tail)
    }
}
