//! The kernel's side of free page reporting (mm/page_reporting.rs owns
//! the device state and the free-list walk): registration, the request
//! from the free path, the report to the host and the worker thread.

use crate::kernel::task::KthreadFn;
use crate::kernel::task::KthreadNext;
use crate::kernel::Kernel;
use crate::mm::page_alloc::{FpiPlace, MigrateType};
use crate::mm::page_reporting::{PageReportingDev, Pass, Walk, PAGE_REPORTING_CAPACITY, PAGE_REPORTING_DELAY};
use crate::mm::vmstat::Stat;
use crate::mm::{Pfn, MAX_PAGE_ORDER, PAGEBLOCK_ORDER};
use crate::sim::Ns;

impl Kernel {
    /// page_reporting_register, as virtio-balloon's probe calls it. Spawns
    /// the worker on the last CPU and asks for the initial sweep.
    pub fn page_reporting_register(&mut self, now: Ns) {
        if self.prdev.is_some() {
            return; // -EBUSY: one device only
        }
        let order = self.knobs.page_reporting_order.unwrap_or(PAGEBLOCK_ORDER).min(MAX_PAGE_ORDER);
        let cpu = self.nr_cpus() - 1;
        let tid = self.spawn_kthread(cpu, None, KthreadFn::PageReporting);
        let putback = if self.knobs.reported_putback_tail { FpiPlace::Tail } else { FpiPlace::Head };
        self.prdev = Some(PageReportingDev::new(order, putback, tid));
        self.page_reporting_request(now);
        // The static key goes on: frees start notifying.
        self.pa.set_page_reporting_order(Some(order));
    }

    /// __page_reporting_request.
    fn page_reporting_request(&mut self, now: Ns) {
        let Some(pr) = self.prdev.as_mut() else { return };
        if pr.request() {
            let tid = pr.tid();
            self.stat.inc(Stat::PageReportingRequests);
            self.wake_up(tid, now + PAGE_REPORTING_DELAY);
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
        let iso: u64 = self.prdev.as_ref().map_or(0, |p| p.isolated_pages());
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
        let owed: Vec<(Pfn, u32, u16)> = self.prdev.as_ref().expect("registered").sg().iter().map(|b| (b.pfn, b.order, b.ugen)).collect();
        for &(pfn, order, ugen) in &owed {
            if ugen != 0 && self.knobs.mutant != crate::kernel::knobs::Mutant::Luf(crate::kernel::knobs::LufMutant::SkipIsolationCheck) {
                let nid = self.pfn_to_nid(pfn);
                now = self.luf_alloc_exit(now, cpu, nid, ugen);
            }
            self.check_content_change(now, pfn, order, "page reporting discard");
        }
        let pr = self.prdev.as_ref().expect("registered");
        let sg: Vec<(Pfn, u32)> = pr.sg().iter().rev().map(|b| (b.pfn, b.order)).collect();
        self.stat.inc(Stat::PageReportingCalls);
        self.stat.add(Stat::PageReportingReportedPages, sg.iter().map(|&(_, o)| 1i64 << o).sum());
        let wait = match self.host.as_mut() {
            Some(h) => crate::virt::virtio_balloon::free_page_report(h, &sg, now, &mut self.stat),
            None => 0,
        };
        // The VMM's madvise dropped the SPTEs of what it discarded.
        self.kvm_remote_flush();
        now + wait
    }
}

/// page_reporting_cycle on node `nid`'s list: a walk costs a cache miss
/// on the node per block visited.
fn cycle(k: &mut Kernel, nid: u32, order: u32, mt: MigrateType, pass: &mut Pass, t: &mut Ns, cpu: u32) -> Walk {
    let lat = k.prof.nodes.get(nid as usize).map_or(0.0, |n| n.latency_ns);
    let step_ns = crate::sim::ns(lat);
    let pr = k.prdev.as_mut().expect("registered");
    pr.cycle(&mut k.pa, &mut k.stat, nid, order, mt, pass, t, cpu, step_ns, k.c.buddy_op, &k.lc)
}

impl Kernel {
    /// The delayed work item, page_reporting_process, run as kernel thread
    /// `tid`: one pass over the free lists, suspended (in the device)
    /// while each report is in flight.
    pub fn page_reporting_process(&mut self, tid: u32) -> KthreadNext {
        let (t0, cpu) = (self.tasks[tid as usize].clock, self.tasks[tid as usize].cpu);
        let mut t = t0;
        let mut pass = match self.prdev.as_mut().expect("registered").pass_resume() {
            Some(p) => p,
            None => {
                let pass = self.prdev.as_mut().expect("registered").pass_begin();
                self.stat.inc(Stat::PageReportingPasses);
                pass
            }
        };
        let order0 = self.prdev.as_ref().unwrap().order();
        let nids = self.pa.nids();
        let lc = self.lc;
        let next = loop {
            // Finish a report that was in flight: retake the lock, drain.
            if let Some(full) = pass.after_report.take() {
                let nid = nids[pass.zone];
                let ops0 = self.pa.zone_list_ops(nid);
                self.prdev.as_mut().expect("registered").drain(&mut self.pa, true, &mut self.stat);
                let hold = (self.pa.zone_list_ops(nid) - ops0) * self.c.buddy_op;
                t = self.pa.zone_lock(nid).lock_for(t, cpu, hold, &lc);
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
                break if self.prdev.as_mut().unwrap().pass_end() { KthreadNext::At(t + PAGE_REPORTING_DELAY) } else { KthreadNext::Sleep };
            }
            let nid = nids[pass.zone];
            if !pass.zone_started {
                let (_, low, _) = self.pa.zone_watermarks(nid);
                let mark = low + ((PAGE_REPORTING_CAPACITY as u64) << order0);
                if !self.pa.zone_watermark_ok(nid, 0, mark) {
                    self.stat.inc(Stat::PageReportingZoneSkipped);
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
                let walk = if mt == MigrateType::Isolate { Walk::Done } else { cycle(self, nid, pass.order, mt, &mut pass, &mut t, cpu) };
                match walk {
                    Walk::Report => {
                        let done = self.page_reporting_report(t, cpu);
                        pass.after_report = Some(true);
                        self.prdev.as_mut().expect("registered").pass_suspend(pass);
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
            if !self.prdev.as_ref().unwrap().sg().is_empty() {
                let done = self.page_reporting_report(t, cpu);
                pass.after_report = Some(false);
                self.prdev.as_mut().expect("registered").pass_suspend(pass);
                break KthreadNext::At(done);
            }
            pass.zone += 1;
            pass.zone_started = false;
        };
        let tk = &mut self.tasks[tid as usize];
        tk.sys_ns += t - t0;
        tk.clock = t;
        self.page_reporting_gauges();
        next
    }
}
