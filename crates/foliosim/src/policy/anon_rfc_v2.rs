//! `anon_folio.mode = "rfc-v2"`: the large anonymous folio series as
//! posted in April 2023 (v2). Every order from `anon_folio.max_order` down
//! to 2, whatever the THP sysfs settings say (the RFC checks only hardware
//! support), with the series' per-patch switches (`anon_folio.*`,
//! docs/mechanisms/large-anon-folios.md#knobs).

use super::Policy;
use crate::kernel::knobs::{AnonFolioKnobs, Knobs};
use crate::mm::huge_mm::{anon_placement, AnonFaultCtx, AnonOrderPolicy, AnonOrders, AnonPaths, PTE_ORDERS};
use crate::mm::mmap::Placement;
use crate::mm::PMD_ORDER;

pub const POLICY: Policy<Box<dyn AnonOrderPolicy>> = Policy {
    name: "rfc-v2",
    help: "the 2023 RFC v2 series: orders anon_folio.max_order..2, large zero-page write, range reuse, 64 KiB mmap alignment",
    knobs: &[],
    build,
};

fn build(k: &Knobs) -> Box<dyn AnonOrderPolicy> {
    Box::new(RfcV2 { k: k.anon_folio.clone() })
}

struct RfcV2 {
    k: AnonFolioKnobs,
}

impl AnonOrderPolicy for RfcV2 {
    fn orders(&self, f: &AnonFaultCtx) -> AnonOrders {
        let max = self.k.max_order.min(PMD_ORDER);
        AnonOrders { pte: ((1u32 << (max + 1)) - 1) & PTE_ORDERS, pmd: f.thp_allowed(self.k.thp_enabled) }
    }
    fn paths(&self) -> AnonPaths {
        AnonPaths {
            retry_lower_on_race: true,
            zero_page_large: self.k.zero_page_large,
            reuse_range: self.k.cow_reuse_range,
            cow_copy_large: self.k.cow_copy_large,
            batch_zap: self.k.batch_zap,
            free_always_locks_split_queue: !self.k.free_listempty_check,
            ..AnonPaths::default()
        }
    }
    fn mmap_align(&self, len: u64, anon: bool, k: &Knobs) -> Placement {
        // Patch 16: every unhinted map, file or anon, to 2^ANON_FOLIO_ORDER_MAX pages.
        if self.k.mmap_align_unhinted {
            Placement::AlignMask(4096 << self.k.max_order)
        } else if anon {
            anon_placement(k.anon_folio.thp_anon_align, len)
        } else {
            Placement::Page
        }
    }
}
