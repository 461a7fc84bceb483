//! `anon_folio.mode = "only-order"`: an example order policy (the one
//! docs/tutorial.md builds). Every anonymous fault tries one folio order,
//! `anon_folio.only_order`; the fault path maps it where its naturally
//! aligned block lies in the VMA with no PTE yet, and order 0 otherwise.
//! Never a PMD THP, none at all in a VM_NOHUGEPAGE VMA. The other paths
//! behave as upstream's.

use super::Policy;
use crate::kernel::knobs::{KnobSpec, Knobs};
use crate::mm::huge_mm::{AnonFaultCtx, AnonOrderPolicy, AnonOrders};
use crate::mm::mmap::vm;

const ONLY_ORDER: KnobSpec = KnobSpec::int_param(
    "anon_folio.only_order",
    4,
    (2, 8),
    "with anon_folio.mode = \"only-order\": the one order of a large anonymous folio (4 = 64 KiB)",
);

pub const POLICY: Policy<Box<dyn AnonOrderPolicy>> = Policy {
    name: "only-order",
    help: "example: one order (anon_folio.only_order) where its block has no PTE yet, else order 0",
    knobs: &[ONLY_ORDER],
    build,
};

fn build(k: &Knobs) -> Box<dyn AnonOrderPolicy> {
    Box::new(OnlyOrder { order: super::int_knob(k, &ONLY_ORDER) as u32 })
}

struct OnlyOrder {
    order: u32,
}

impl AnonOrderPolicy for OnlyOrder {
    fn orders(&self, f: &AnonFaultCtx) -> AnonOrders {
        if f.vma.flags & vm::NOHUGEPAGE != 0 {
            return AnonOrders::default();
        }
        AnonOrders { pte: 1 << self.order, pmd: false }
    }
}
