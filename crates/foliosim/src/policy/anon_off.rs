//! `anon_folio.mode = "off"`: the baseline kernel. Anonymous faults map
//! order-0 pages, or a PMD THP where the top-level
//! `transparent_hugepage/enabled` allows one.

use super::Policy;
use crate::kernel::knobs::{Knobs, ThpEnabled};
use crate::mm::huge_mm::{AnonFaultCtx, AnonOrderPolicy, AnonOrders};

pub const POLICY: Policy<Box<dyn AnonOrderPolicy>> =
    Policy { name: "off", help: "order 0, plus PMD THP as transparent_hugepage/enabled says (the baseline kernel)", knobs: &[], build };

fn build(k: &Knobs) -> Box<dyn AnonOrderPolicy> {
    Box::new(Off { top: k.anon_folio.thp_enabled })
}

struct Off {
    top: ThpEnabled,
}

impl AnonOrderPolicy for Off {
    fn orders(&self, f: &AnonFaultCtx) -> AnonOrders {
        AnonOrders { pte: 0, pmd: f.thp_allowed(self.top) }
    }
    fn order0_only(&self) -> bool {
        self.top == ThpEnabled::Never
    }
}
