//! `anon_folio.mode = "upstream"`: Linux 6.8+ multi-size THP (commit
//! 19eaf44954df), as in 6.12: the orders the per-size
//! `hugepages-<size>kB/enabled` controls allow in this VMA
//! (thp_vma_allowable_orders).

use super::Policy;
use crate::kernel::knobs::{Knobs, ThpEnabled};
use crate::mm::huge_mm::{AnonFaultCtx, AnonOrderPolicy, AnonOrders, AnonPaths};
use crate::mm::PMD_ORDER;

pub const POLICY: Policy<Box<dyn AnonOrderPolicy>> = Policy {
    name: "upstream",
    help: "6.8+ multi-size THP: per-size kernel/mm/transparent_hugepage/hugepages-<size>kB/enabled",
    knobs: &[],
    build,
};

fn build(k: &Knobs) -> Box<dyn AnonOrderPolicy> {
    Box::new(Upstream { per_size: k.anon_folio.per_size })
}

struct Upstream {
    /// `hugepages-<16 << i>kB/enabled`, i = order - 2.
    per_size: [ThpEnabled; 8],
}

impl AnonOrderPolicy for Upstream {
    fn orders(&self, f: &AnonFaultCtx) -> AnonOrders {
        // always | madvise (VM_HUGEPAGE) | inherit (the top level); none at
        // all with VM_NOHUGEPAGE.
        let mut pte = 0;
        for order in 2..PMD_ORDER {
            if f.thp_allowed(self.per_size[(order - 2) as usize]) {
                pte |= 1 << order;
            }
        }
        AnonOrders { pte, pmd: f.thp_allowed(self.per_size[7]) }
    }
    fn paths(&self) -> AnonPaths {
        // 6.12's wp_can_reuse_anon_folio never reuses a large folio that
        // is not AnonExclusive.
        AnonPaths { reuse_large_by_refcount: false, ..AnonPaths::default() }
    }
}
