//! `anon_folio.mode = "rfc-v2"`: the large anonymous folio series as
//! posted in April 2023 (v2). Every order from `anon_folio.max_order` down
//! to 2, whatever the THP sysfs settings say (the RFC checks only hardware
//! support), with the series' per-patch switches, this policy's own knobs
//! (docs/mechanisms/large-anon-folios.md#knobs).

use super::{flag_knob, int_knob, Policy};
use crate::kernel::knobs::{KnobSpec, Knobs, ThpAnonAlign, ThpEnabled};
use crate::mm::huge_mm::{anon_placement, AnonFaultCtx, AnonOrderPolicy, AnonOrders, AnonPaths, PTE_ORDERS};
use crate::mm::vma::Placement;
use crate::mm::PMD_ORDER;

const MAX_ORDER: KnobSpec = KnobSpec::int_param(
    "anon_folio.max_order",
    4,
    (2, 9),
    "rfc-v2: ANON_FOLIO_ORDER_MAX, the largest order of a fresh anonymous folio (4 = 64 KiB)",
);
const ZERO_PAGE_LARGE: KnobSpec =
    KnobSpec::flag_param("anon_folio.zero_page_large", true, "rfc-v2 patch 15: a write to the zero page allocates a large folio");
const COW_REUSE_RANGE: KnobSpec = KnobSpec::flag_param(
    "anon_folio.cow_reuse_range",
    true,
    "rfc-v2 patches 9-10: a write fault reuses the whole contiguous run of a folio that only this mapping references",
);
const COW_COPY_LARGE: KnobSpec = KnobSpec::flag_param(
    "anon_folio.cow_copy_large",
    true,
    "rfc-v2 patches 11-14: CoW of a non-exclusive large folio copies the largest aligned maybe-shared block (<= source order) into a large folio",
);
const MMAP_ALIGN_UNHINTED: KnobSpec =
    KnobSpec::flag_param("anon_folio.mmap_align_unhinted", true, "rfc-v2 patch 16: unhinted mmaps are aligned to 2^max_order pages");
const BATCH_ZAP: KnobSpec = KnobSpec::flag_param(
    "anon_folio.batch_zap",
    true,
    "rfc-v2 patch 17: zap a large anon folio's PTEs in one batch (one rmap removal; a whole unmap does not queue it for deferred split)",
);
const FREE_LISTEMPTY_CHECK: KnobSpec = KnobSpec::flag_param(
    "anon_folio.free_listempty_check",
    false,
    "rfc-v2: check the deferred-split list without split_queue_lock when freeing a large folio (Yin's patch; always on upstream)",
);

pub const POLICY: Policy<Box<dyn AnonOrderPolicy>> = Policy {
    name: "rfc-v2",
    help: "the 2023 RFC v2 series: orders anon_folio.max_order..2, large zero-page write, range reuse, 64 KiB mmap alignment",
    knobs: &[MAX_ORDER, ZERO_PAGE_LARGE, COW_REUSE_RANGE, COW_COPY_LARGE, MMAP_ALIGN_UNHINTED, BATCH_ZAP, FREE_LISTEMPTY_CHECK],
    build,
};

fn build(k: &Knobs) -> Box<dyn AnonOrderPolicy> {
    Box::new(RfcV2 {
        max_order: int_knob(k, &MAX_ORDER) as u32,
        thp_enabled: k.anon_folio.thp_enabled,
        thp_anon_align: k.anon_folio.thp_anon_align,
        paths: AnonPaths {
            retry_lower_on_race: true,
            zero_page_large: flag_knob(k, &ZERO_PAGE_LARGE),
            reuse_range: flag_knob(k, &COW_REUSE_RANGE),
            cow_copy_large: flag_knob(k, &COW_COPY_LARGE),
            batch_zap: flag_knob(k, &BATCH_ZAP),
            free_always_locks_split_queue: !flag_knob(k, &FREE_LISTEMPTY_CHECK),
            ..AnonPaths::default()
        },
        mmap_align_unhinted: flag_knob(k, &MMAP_ALIGN_UNHINTED),
    })
}

struct RfcV2 {
    max_order: u32,
    thp_enabled: ThpEnabled,
    thp_anon_align: ThpAnonAlign,
    paths: AnonPaths,
    mmap_align_unhinted: bool,
}

impl AnonOrderPolicy for RfcV2 {
    fn orders(&self, f: &AnonFaultCtx) -> AnonOrders {
        let max = self.max_order.min(PMD_ORDER);
        AnonOrders { pte: ((1u32 << (max + 1)) - 1) & PTE_ORDERS, pmd: f.thp_allowed(self.thp_enabled) }
    }
    fn paths(&self) -> AnonPaths {
        self.paths
    }
    fn mmap_align(&self, len: u64, anon: bool, _k: &Knobs) -> Placement {
        // Patch 16: every unhinted map, file or anon, to 2^ANON_FOLIO_ORDER_MAX pages.
        if self.mmap_align_unhinted {
            Placement::AlignMask(4096 << self.max_order)
        } else if anon {
            anon_placement(self.thp_anon_align, len)
        } else {
            Placement::Page
        }
    }
}
