//! Free page reporting (mm/page_reporting.c, mm/page_reporting.h).
//!
//! A guest tells its hypervisor which of its free pages it may drop. The
//! buddy allocator keeps, per free block, the PG_reported flag
//! (`FreeBlock::reported`); it is set only here, by the drain below, and
//! cleared whenever a block leaves a free list (allocation, merge,
//! isolation, split: page_alloc's `del_from_free_list`). Split remainders
//! go back unflagged even though the host has them discarded.
//!
//! How it runs, in the kernel's terms:
//!
//! * Registration (`page_reporting_register`, from the virtio-balloon probe):
//!   state IDLE, then an immediate request, so a first sweep happens
//!   `PAGE_REPORTING_DELAY` (2 s) later; the order defaults to
//!   pageblock_order unless the `page_reporting_order` module parameter
//!   is set.
//! * The free path (`page_reporting_notify_free`): a free whose merged
//!   block reaches the reporting order requests a pass. REQUESTED stays;
//!   IDLE becomes REQUESTED and the delayed work is queued 2 s out; ACTIVE
//!   becomes REQUESTED and the running pass re-queues itself at its end.
//!   Putbacks by the reporter itself do not notify.
//! * A pass (`page_reporting_process`): ACTIVE; for every zone, if its
//!   free pages exceed low + (CAPACITY << order), walk every free list of
//!   order >= the reporting order and every migratetype but ISOLATE
//!   (`page_reporting_cycle`), then report what is left in the scatterlist.
//!   At the end ACTIVE goes back to IDLE, unless someone asked again
//!   (REQUESTED), in which case the next pass is queued 2 s later.
//! * A cycle over one list, under zone->lock: budget = ceil(nr_free of the
//!   order / (CAPACITY * 16)) report calls (so at least 1/16 of the list per
//!   pass, +1 call for pages left over from the previous list). Walk from
//!   the head, skipping reported blocks; once the budget is below zero, ask
//!   for another pass and stop there; while the 32-entry scatterlist has
//!   room, isolate the block (refused at the min watermark: stop there);
//!   when a 33rd candidate turns up, rotate the list so it is first, drop
//!   the lock, report the 32 blocks, spend one budget unit, retake the lock,
//!   put them back (drain) and start again from the list head. A walk that
//!   stopped early rotates its resume point to the front.
//! * Drain: in scatterlist index order (the reverse of isolation), put each
//!   block back (`__putback_isolated_page`: the tail since 5.10, the
//!   ordinary head/tail rules in v17 = `page_reporting.reported_putback`)
//!   and flag it reported if the report succeeded and it did not merge.
//!
//! The worker is a kernel thread (the delayed work on system_freezable_wq):
//! it competes for its CPU, holds the zone lock in simulated time while it
//! walks and isolates, and sleeps through each report call, during which
//! the vCPU runs other tasks. Each run of the thread ends at a report
//! call, so allocators interleave with the pass as they would.
//!
//! This file owns the device state and the walk over the free lists,
//! taking the page allocator, the counters and the costs as arguments;
//! the worker thread and the calls that need the whole kernel (waking it,
//! the report to the host, LUF's exit check) are in kernel/page_reporting.rs.

use super::page_alloc::{FpiPlace, IsolatedBlock, MigrateType, PageAlloc};
use super::vmstat::{Stat, VmStat};
use super::Pfn;
use crate::sim::lock::LineCost;
use crate::sim::{Ns, NSEC_PER_SEC};

/// Scatterlist entries per report call; a power of two (the budget
/// division relies on it). virtio-balloon refuses a reporting virtqueue
/// with fewer ring entries.
pub const PAGE_REPORTING_CAPACITY: usize = 32;
/// From a request to the start of a pass, and between passes (2 * HZ).
pub const PAGE_REPORTING_DELAY: Ns = 2 * NSEC_PER_SEC;
/// Each pass may report at least 1/16 of every free list.
pub const PAGE_REPORTING_BUDGET_DIVISOR: u64 = 16;

/// prdev->state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrState {
    Idle,
    Requested,
    Active,
}

/// What the free path and the worker share (struct
/// page_reporting_dev_info, the page_reporting_enabled static key and
/// page_reporting_order).
pub struct PageReportingDev {
    state: PrState,
    /// page_reporting_order.
    order: u32,
    /// Where drained blocks go (FPI_TO_TAIL, or the v17 ordinary rules).
    putback: FpiPlace,
    /// The worker's task id.
    tid: u32,
    /// The scatterlist: isolated blocks not yet drained, in isolation order
    /// (the kernel fills slots from the top, so its index order is the
    /// reverse of this).
    sg: Vec<IsolatedBlock>,
    /// The worker's pass, suspended while a report is in flight; the
    /// worker (page_reporting_process) resumes it on its next run.
    pass: Option<Pass>,
}

impl PageReportingDev {
    /// page_reporting_register's device, IDLE, with its worker `tid`.
    pub fn new(order: u32, putback: FpiPlace, tid: u32) -> PageReportingDev {
        PageReportingDev { state: PrState::Idle, order, putback, tid, sg: Vec::with_capacity(PAGE_REPORTING_CAPACITY), pass: None }
    }

    /// page_reporting_order.
    pub fn order(&self) -> u32 {
        self.order
    }

    /// The worker's task id.
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// The blocks isolated and not yet drained, in isolation order.
    pub fn sg(&self) -> &[IsolatedBlock] {
        &self.sg
    }

    /// Base pages held in the scatterlist (NR_PAGE_REPORTING_ISOLATED).
    pub fn isolated_pages(&self) -> u64 {
        self.sg.iter().map(|b| 1u64 << b.order).sum()
    }

    /// __page_reporting_request's state change. True when the worker was
    /// IDLE and must be woken (the delayed work queued).
    pub fn request(&mut self) -> bool {
        match self.state {
            PrState::Requested => false,
            PrState::Active => {
                self.state = PrState::Requested;
                false
            }
            PrState::Idle => {
                self.state = PrState::Requested;
                true
            }
        }
    }

    /// A pass starts (page_reporting_process): ACTIVE.
    pub fn pass_begin(&mut self) -> Pass {
        self.state = PrState::Active;
        Pass { order: self.order, ..Default::default() }
    }

    /// The pass the worker suspended for a report, if any.
    pub fn pass_resume(&mut self) -> Option<Pass> {
        self.pass.take()
    }

    /// The worker suspends `pass` until the report in flight returns.
    pub fn pass_suspend(&mut self, pass: Pass) {
        self.pass = Some(pass);
    }

    /// A pass ends: ACTIVE goes back to IDLE unless someone asked again
    /// meanwhile (true: the next pass is due).
    pub fn pass_end(&mut self) -> bool {
        if self.state == PrState::Requested {
            true
        } else {
            self.state = PrState::Idle;
            false
        }
    }

    /// page_reporting_drain: put every scatterlist block back, flagging it
    /// reported if the report succeeded and it did not merge. Caller holds
    /// zone->lock.
    pub fn drain(&mut self, pa: &mut PageAlloc, reported: bool, stat: &mut VmStat) {
        // Index order of the kernel's scatterlist = reverse isolation order.
        for b in self.sg.iter().rev() {
            pa.putback_isolated_ugen(b.pfn, b.order, self.putback, reported, b.ugen, stat);
        }
        self.sg.clear();
    }

    /// page_reporting_cycle's walk of the (`order`, `mt`) list of node
    /// `nid`, from the list head, up to the next report call. Charges the
    /// zone lock hold to `*t`: `step_ns` per block visited (a cache miss
    /// on the node) and `buddy_op` per list operation.
    pub fn cycle(
        &mut self,
        pa: &mut PageAlloc,
        stat: &mut VmStat,
        nid: u32,
        order: u32,
        mt: MigrateType,
        pass: &mut Pass,
        t: &mut Ns,
        cpu: u32,
        step_ns: Ns,
        buddy_op: Ns,
        lc: &LineCost,
    ) -> Walk {
        let Some(head) = pa.free_list_head(nid, order, mt) else {
            return Walk::Done; // empty: not even the lock is taken
        };
        let ops0 = pa.zone_list_ops(nid);
        let budget = pass.budget.get_or_insert_with(|| {
            let per_call = (PAGE_REPORTING_CAPACITY as u64) * PAGE_REPORTING_BUDGET_DIVISOR;
            pa.zone_nr_free(nid, order).div_ceil(per_call) as i64
        });
        let mut walked: u64 = 0;
        let mut cur = Some(head);
        let mut resume: Option<Pfn> = None;
        let mut out = Walk::Done;
        while let Some(pfn) = cur {
            walked += 1;
            let Some(b) = pa.free_block(pfn) else { break };
            let next = b.next.checked_sub(1);
            if b.reported {
                cur = next;
                continue;
            }
            if *budget < 0 {
                self.state = PrState::Requested;
                stat.inc(Stat::PageReportingBudgetExhausted);
                resume = Some(pfn);
                break;
            }
            if self.sg.len() < PAGE_REPORTING_CAPACITY {
                match pa.isolate_free_block(pfn, stat) {
                    None => {
                        stat.inc(Stat::PageReportingIsolateFailed);
                        resume = Some(pfn);
                        break;
                    }
                    Some(iso) => {
                        self.sg.push(iso);
                        // The successor is still on this list unless the
                        // isolation moved it (pageblock retyping): restart.
                        cur = next
                            .filter(|&n| pa.free_block(n).is_some_and(|nb| nb.order as u32 == order && nb.mt == mt as u8))
                            .or_else(|| pa.free_list_head(nid, order, mt));
                        continue;
                    }
                }
            }
            // A 33rd candidate: it becomes the first entry, and the report
            // of the full scatterlist happens with the lock dropped.
            pa.free_list_rotate_to_front(pfn);
            out = Walk::Report;
            break;
        }
        if let (Walk::Done, Some(r)) = (&out, resume) {
            pa.free_list_rotate_to_front(r);
        }
        let ops = pa.zone_list_ops(nid) - ops0;
        let hold = walked * step_ns + ops * buddy_op;
        *t = pa.zone_lock(nid).lock_for(*t, cpu, hold, lc);
        out
    }
}

/// Where a pass stands between two runs of the worker.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pass {
    /// Index into the zones (nodes with memory), the order and the
    /// migratetype of the list being walked.
    pub zone: usize,
    pub order: u32,
    pub mt: usize,
    /// Budget of the current list; None before its walk starts.
    pub budget: Option<i64>,
    /// A report of a full scatterlist is in flight (drain, then go on with
    /// the same list), or of the zone's leftover (drain, next zone).
    pub after_report: Option<bool>,
    /// The current zone passed the watermark gate.
    pub zone_started: bool,
}

/// What one walk of a list under the lock ended with.
pub enum Walk {
    /// The list is done for this pass (walked to the end, budget spent or
    /// isolation refused).
    Done,
    /// A full scatterlist must be reported before going on.
    Report,
}
