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

use super::page_alloc::{FpiPlace, IsolatedBlock, MigrateType};
use super::vmstat::Stat;
use super::{Pfn, MAX_PAGE_ORDER, PAGEBLOCK_ORDER};
use crate::kernel::kthread::{Kthread, KthreadNext};
use crate::kernel::Kernel;
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
    pub state: PrState,
    /// page_reporting_order.
    pub order: u32,
    /// Where drained blocks go (FPI_TO_TAIL, or the v17 ordinary rules).
    pub putback: FpiPlace,
    /// The worker's task id.
    pub tid: u32,
    /// The scatterlist: isolated blocks not yet drained, in isolation order
    /// (the kernel fills slots from the top, so its index order is the
    /// reverse of this).
    pub sg: Vec<IsolatedBlock>,
}

impl Kernel {
    /// page_reporting_register, as virtio-balloon's probe calls it. Spawns
    /// the worker on the last CPU and asks for the initial sweep.
    pub fn page_reporting_register(&mut self, now: Ns) {
        if self.prdev.is_some() {
            return; // -EBUSY: one device only
        }
        let order = self.knobs.page_reporting_order.unwrap_or(PAGEBLOCK_ORDER).min(MAX_PAGE_ORDER);
        let cpu = self.nr_cpus() - 1;
        let tid = self.spawn_kthread(cpu, None, Box::new(PageReportingWork::default()));
        let putback = if self.knobs.reported_putback_tail { FpiPlace::Tail } else { FpiPlace::Head };
        self.prdev = Some(PageReportingDev { state: PrState::Idle, order, putback, tid, sg: Vec::with_capacity(PAGE_REPORTING_CAPACITY) });
        self.page_reporting_request(now);
        // The static key goes on: frees start notifying.
        self.pa.set_page_reporting_order(Some(order));
    }

    /// __page_reporting_request.
    fn page_reporting_request(&mut self, now: Ns) {
        let Some(pr) = self.prdev.as_mut() else { return };
        match pr.state {
            PrState::Requested => {}
            PrState::Active => pr.state = PrState::Requested,
            PrState::Idle => {
                pr.state = PrState::Requested;
                let tid = pr.tid;
                self.stat.inc(Stat::PageReportingRequests);
                self.wake_up(tid, now + PAGE_REPORTING_DELAY);
            }
        }
    }

    /// page_reporting_notify_free, for the frees task `tid` made in its
    /// last step: the allocator latches "a free reached the reporting
    /// order"; this passes it on at the time the step ended.
    pub fn page_reporting_poll(&mut self, tid: u32) {
        if self.prdev.is_some() && self.pa.take_page_reporting_notify() {
            let now = self.tasks[tid as usize].clock;
            self.page_reporting_request(now);
        }
    }

    fn page_reporting_gauges(&mut self) {
        let iso: u64 = self.prdev.as_ref().map_or(0, |p| p.sg.iter().map(|b| 1u64 << b.order).sum());
        self.stat.v[Stat::NrPageReportingIsolated as usize] = iso as i64;
        let rep: u64 = self.pa.nids().iter().map(|&n| self.pa.zone_reported_pages(n)).sum();
        self.stat.v[Stat::NrReportedPages as usize] = rep as i64;
    }

    /// prdev->report(): hand the scatterlist to the device. Returns when
    /// the host has returned the buffer.
    fn page_reporting_report(&mut self, now: Ns, cpu: u32) -> Ns {
        // Isolated pages are an exit from the allocator: flush what LUF
        // deferred before the host discards their contents.
        let mut now = now;
        let owed: Vec<(Pfn, u32, u16)> = self.prdev.as_ref().expect("registered").sg.iter().map(|b| (b.pfn, b.order, b.ugen)).collect();
        for &(pfn, order, ugen) in &owed {
            if ugen != 0 && self.knobs.mutant != crate::kernel::knobs::Mutant::Luf(crate::kernel::knobs::LufMutant::SkipIsolationCheck) {
                let nid = self.pfn_to_nid(pfn);
                now = self.luf_alloc_exit(now, cpu, nid, ugen);
            }
            self.check_content_change(now, pfn, order, "page reporting discard");
        }
        let pr = self.prdev.as_ref().expect("registered");
        let sg: Vec<(Pfn, u32)> = pr.sg.iter().rev().map(|b| (b.pfn, b.order)).collect();
        self.stat.inc(Stat::PageReportingCalls);
        self.stat.add(Stat::PageReportingReportedPages, sg.iter().map(|&(_, o)| 1i64 << o).sum());
        let wait = match self.host.as_mut() {
            Some(h) => crate::virt::virtio_balloon::free_page_report(h, &sg, &mut self.stat),
            None => 0,
        };
        now + wait
    }

    /// page_reporting_drain: put every scatterlist block back, flagging it
    /// reported if the report succeeded and it did not merge. Caller holds
    /// zone->lock; returns the list operations done.
    fn page_reporting_drain(&mut self, reported: bool) {
        let pr = self.prdev.as_mut().expect("registered");
        let place = pr.putback;
        let sg = std::mem::take(&mut pr.sg);
        // Index order of the kernel's scatterlist = reverse isolation order.
        for b in sg.iter().rev() {
            self.pa.putback_isolated_ugen(b.pfn, b.order, place, reported, b.ugen, &mut self.stat);
        }
        let mut sg = sg;
        sg.clear();
        self.prdev.as_mut().unwrap().sg = sg;
    }
}

/// Where a pass stands between two runs of the worker.
#[derive(Clone, Copy, Debug, Default)]
struct Pass {
    /// Index into the zones (nodes with memory), the order and the
    /// migratetype of the list being walked.
    zone: usize,
    order: u32,
    mt: usize,
    /// Budget of the current list; None before its walk starts.
    budget: Option<i64>,
    /// A report of a full scatterlist is in flight (drain, then go on with
    /// the same list), or of the zone's leftover (drain, next zone).
    after_report: Option<bool>,
    /// The current zone passed the watermark gate.
    zone_started: bool,
}

/// The delayed work item, page_reporting_process, as a kernel thread.
#[derive(Default)]
pub struct PageReportingWork {
    pass: Option<Pass>,
}

/// What one walk of a list under the lock ended with.
enum Walk {
    /// The list is done for this pass (walked to the end, budget spent or
    /// isolation refused).
    Done,
    /// A full scatterlist must be reported before going on.
    Report,
}

impl PageReportingWork {
    /// page_reporting_cycle's walk, from the list head, up to the next
    /// report call. Charges the zone lock hold to `*t`.
    fn cycle(k: &mut Kernel, nid: u32, order: u32, mt: MigrateType, pass: &mut Pass, t: &mut Ns, cpu: u32) -> Walk {
        let Some(head) = k.pa.free_list_head(nid, order, mt) else {
            return Walk::Done; // empty: not even the lock is taken
        };
        let lat = k.prof.nodes.get(nid as usize).map_or(0.0, |n| n.latency_ns);
        let step_ns = crate::sim::ns(lat);
        let ops0 = k.pa.zone_list_ops(nid);
        let budget = pass.budget.get_or_insert_with(|| {
            let per_call = (PAGE_REPORTING_CAPACITY as u64) * PAGE_REPORTING_BUDGET_DIVISOR;
            k.pa.zone_nr_free(nid, order).div_ceil(per_call) as i64
        });
        let mut walked: u64 = 0;
        let mut cur = Some(head);
        let mut resume: Option<Pfn> = None;
        let mut out = Walk::Done;
        while let Some(pfn) = cur {
            walked += 1;
            let Some(b) = k.pa.free_block(pfn) else { break };
            let next = b.next.checked_sub(1);
            if b.reported {
                cur = next;
                continue;
            }
            if *budget < 0 {
                k.prdev.as_mut().unwrap().state = PrState::Requested;
                k.stat.inc(Stat::PageReportingBudgetExhausted);
                resume = Some(pfn);
                break;
            }
            if k.prdev.as_ref().unwrap().sg.len() < PAGE_REPORTING_CAPACITY {
                match k.pa.isolate_free_block(pfn, &mut k.stat) {
                    None => {
                        k.stat.inc(Stat::PageReportingIsolateFailed);
                        resume = Some(pfn);
                        break;
                    }
                    Some(iso) => {
                        k.prdev.as_mut().unwrap().sg.push(iso);
                        // The successor is still on this list unless the
                        // isolation moved it (pageblock retyping): restart.
                        cur = next
                            .filter(|&n| k.pa.free_block(n).is_some_and(|nb| nb.order as u32 == order && nb.mt == mt as u8))
                            .or_else(|| k.pa.free_list_head(nid, order, mt));
                        continue;
                    }
                }
            }
            // A 33rd candidate: it becomes the first entry, and the report
            // of the full scatterlist happens with the lock dropped.
            k.pa.free_list_rotate_to_front(pfn);
            out = Walk::Report;
            break;
        }
        if let (Walk::Done, Some(r)) = (&out, resume) {
            k.pa.free_list_rotate_to_front(r);
        }
        let ops = k.pa.zone_list_ops(nid) - ops0;
        let hold = walked * step_ns + ops * k.c.buddy_op;
        let lc = k.lc;
        *t = k.pa.zone_lock(nid).lock_for(*t, cpu, hold, &lc);
        out
    }
}

impl Kthread for PageReportingWork {
    fn name(&self) -> &str {
        "kworker/page_reporting"
    }

    fn run(&mut self, k: &mut Kernel, tid: u32) -> KthreadNext {
        let (t0, cpu) = (k.tasks[tid as usize].clock, k.tasks[tid as usize].cpu);
        let mut t = t0;
        let mut pass = match self.pass.take() {
            Some(p) => p,
            None => {
                let pr = k.prdev.as_mut().expect("registered");
                pr.state = PrState::Active;
                k.stat.inc(Stat::PageReportingPasses);
                Pass { order: pr.order, ..Default::default() }
            }
        };
        let order0 = k.prdev.as_ref().unwrap().order;
        let nids = k.pa.nids();
        let lc = k.lc;
        let next = loop {
            // Finish a report that was in flight: retake the lock, drain.
            if let Some(full) = pass.after_report.take() {
                let nid = nids[pass.zone];
                let ops0 = k.pa.zone_list_ops(nid);
                k.page_reporting_drain(true);
                let hold = (k.pa.zone_list_ops(nid) - ops0) * k.c.buddy_op;
                t = k.pa.zone_lock(nid).lock_for(t, cpu, hold, &lc);
                if full {
                    // One budget unit spent; the walk restarts at the head.
                    if let Some(b) = pass.budget.as_mut() {
                        *b -= 1;
                    }
                } else {
                    pass.zone += 1;
                    pass.zone_started = false;
                    pass.order = order0;
                    pass.mt = 0;
                    pass.budget = None;
                }
            }
            if pass.zone >= nids.len() {
                // End of the pass: ACTIVE -> IDLE unless asked again.
                let pr = k.prdev.as_mut().unwrap();
                break if pr.state == PrState::Requested {
                    KthreadNext::At(t + PAGE_REPORTING_DELAY)
                } else {
                    pr.state = PrState::Idle;
                    KthreadNext::Sleep
                };
            }
            let nid = nids[pass.zone];
            if !pass.zone_started {
                let (_, low, _) = k.pa.zone_watermarks(nid);
                let mark = low + ((PAGE_REPORTING_CAPACITY as u64) << order0);
                if !k.pa.zone_watermark_ok(nid, 0, mark) {
                    k.stat.inc(Stat::PageReportingZoneSkipped);
                    pass.zone += 1;
                    continue;
                }
                pass.zone_started = true;
                pass.order = order0;
                pass.mt = 0;
                pass.budget = None;
            }
            if pass.order <= MAX_PAGE_ORDER {
                let mt = MigrateType::ALL[pass.mt];
                let walk =
                    if mt == MigrateType::Isolate { Walk::Done } else { Self::cycle(k, nid, pass.order, mt, &mut pass, &mut t, cpu) };
                match walk {
                    Walk::Report => {
                        let done = k.page_reporting_report(t, cpu);
                        pass.after_report = Some(true);
                        self.pass = Some(pass);
                        break KthreadNext::At(done);
                    }
                    Walk::Done => {
                        pass.budget = None;
                        pass.mt += 1;
                        if pass.mt == MigrateType::ALL.len() {
                            pass.mt = 0;
                            pass.order += 1;
                        }
                        continue;
                    }
                }
            }
            // Every list walked: report the leftover, or go to the next zone.
            if !k.prdev.as_ref().unwrap().sg.is_empty() {
                let done = k.page_reporting_report(t, cpu);
                pass.after_report = Some(false);
                self.pass = Some(pass);
                break KthreadNext::At(done);
            }
            pass.zone += 1;
            pass.zone_started = false;
        };
        let tk = &mut k.tasks[tid as usize];
        tk.sys_ns += t - t0;
        tk.clock = t;
        k.page_reporting_gauges();
        next
    }
}
