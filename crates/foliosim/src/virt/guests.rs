//! VM guests on one host (any run with a host: a `[host]` table, or a
//! guest that needs one, see config.rs): N guest kernels in one simulated
//! time line over one shared host kernel (virt/kvm.rs), so memory one
//! guest reports is memory the others can fault in, and a guest's fault
//! can make the host reclaim another guest's cold page.
//!
//! Each guest is an ordinary single-kernel run (`run::Driver`, the same
//! code as a single-guest run). This driver always advances the guest whose
//! next event is earliest (ties: the lowest guest number), and lets that
//! guest's steps run on only while they stay before every other guest's
//! next event, so guests interleave exactly as tasks of one kernel do. The
//! host is lent to the running guest's kernel (`Kernel::host`) for its
//! steps and taken back after: the guest kernels need no shared handle.

use crate::config::Config;
use crate::mm::vmstat::Stat;
use crate::run::{self, Driver, Outcome, Stepped};
use crate::sim::earliest::Earliest;
use crate::sim::{Ns, NSEC_PER_SEC};
use crate::types::Error;
use crate::types::Progress;
use crate::virt::kvm::{GuestShape, KvmHost};
use crate::virt::Host;
use serde_json::{json, Value};
use std::time::Instant;

/// What a multi-guest run produced.
pub struct GuestsOutcome {
    /// One outcome per guest (its kernel's `host` is None: see `host`).
    pub guests: Vec<Outcome>,
    pub host: Host,
    /// Host-wide samples every `run.sample_ms`: time, RSS of each guest,
    /// pages swapped out (all guests), each guest's LazyFree.
    pub samples: Samples,
    pub interrupted: bool,
    pub host_s: f64,
}

/// Lend the host to guest `g` for its steps.
fn lend(host: Host, g: usize, d: &mut Driver) {
    let mut host = host;
    kvm_of(&mut host).cur = g;
    // Other guests' faults may have reclaimed this guest's pages meanwhile,
    // and dropped SPTEs its vCPUs must flush before they run.
    host.sync_gauges(&mut d.k.stat);
    d.k.host = Some(host);
    d.k.kvm_remote_flush();
}

/// The host's samples of a multi-guest run.
#[derive(Default)]
pub struct Samples {
    pub t: Vec<f64>,
    pub rss: Vec<Vec<u64>>,
    pub swap: Vec<u64>,
    pub lazyfree: Vec<Vec<u64>>,
}

/// Sample the host at `at`. Each guest's LazyFree, a walk of its VMM's
/// page tables under a host kernel (`KvmHost::lazyfree`), is taken here
/// and published in the guest's gauge too.
fn sample(host: &Host, ds: &mut [Driver], s: &mut Samples, at: Ns) {
    s.t.push(at as f64 / NSEC_PER_SEC as f64);
    s.rss.push((0..host.nr_guests()).map(|g| host.guest_pages(g).0).collect());
    s.swap.push((0..host.nr_guests()).map(|g| host.guest_pages(g).1).sum());
    let k = kvm(host);
    let lazy: Vec<u64> = (0..k.nr_guests()).map(|g| k.lazyfree(g)).collect();
    for (d, &l) in ds.iter_mut().zip(&lazy) {
        d.k.stat.v[Stat::HostLazyfree as usize] = l as i64;
    }
    s.lazyfree.push(lazy);
}

/// The host kernel lent as a `HostKernel`.
fn kvm_of(h: &mut Host) -> &mut KvmHost {
    h.0.as_any_mut().downcast_mut::<KvmHost>().expect("virt/kvm.rs is the host kernel")
}

/// The host kernel of a run.
pub fn kvm(h: &Host) -> &KvmHost {
    h.0.as_any().downcast_ref::<KvmHost>().expect("virt/kvm.rs is the host kernel")
}

/// The host kernel's full audit (its checks of every SPTE against the
/// VMM's PTEs among them), if the host runs its checker: the first new
/// finding.
fn audit_host(h: &mut KvmHost) -> Result<(), String> {
    if !h.k.check.enabled {
        return Ok(());
    }
    let before = h.k.check.violations.len();
    crate::check::audit(&mut h.k);
    match h.k.check.violations.get(before) {
        Some(v) => Err(format!("host: {v}")),
        None => Ok(()),
    }
}

/// The host of a run: its kernel, with every guest's
/// VMM, the discard policy and -mem-prealloc as the guests' knobs say.
fn boot_kvm(cfg: &Config, ds: &[Driver]) -> Result<KvmHost, Error> {
    let hc = cfg.host.as_ref().expect("a guest's config has a host (config.rs wants_host)");
    let shapes: Vec<GuestShape> = ds
        .iter()
        .enumerate()
        .map(|(g, d)| GuestShape { nr_frames: d.k.mem_bytes() >> 12, nr_vcpus: d.k.nr_cpus(), image: cfg.guest_entry(g) })
        .collect();
    let g0 = &ds[0].k;
    let discard = crate::policy::host_discard(&g0.knobs)?;
    KvmHost::boot(hc.profile.clone(), hc.knobs.clone(), cfg.seed, &shapes, discard, &g0.prof, g0.knobs.host_prealloc, cfg.run.check)
}

/// Run `cfg.guests` guests of `cfg` on the host kernel of its `[host]`
/// table.
pub fn simulate_guests(cfg: &Config, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<GuestsOutcome, Error> {
    let host0 = Instant::now();
    let n = cfg.guests.max(1) as usize;
    let mut ds = Vec::with_capacity(n);
    for g in 0..n {
        let wl = run::build_guest_workload(cfg, g)?;
        let start = (g as f64 * cfg.guest_stagger_ms * 1e6) as Ns;
        ds.push(Driver::new(cfg, cfg.seed + g as u64, start, wl, &mut |_| {})?);
    }
    let mut kvm = boot_kvm(cfg, &ds)?;
    // What each guest's boot and set-up wrote (its kernel's pages, the
    // process images) the host backs before the run, untimed.
    for (g, d) in ds.iter().enumerate() {
        kvm.cur = g;
        kvm.back_allocated(&d.k)?;
    }
    kvm.start_guests();
    // The host kernel's own threads (kswapd) run in the guests' time line,
    // the host's time `epoch` ahead of the guests' (virt/kvm.rs).
    let epoch = kvm.epoch;
    let mut host_rq = run::KthreadQueue::new();
    host_rq.take_wakeups(&mut kvm.k);
    let mut host = Host(Box::new(kvm));
    let end = ds[0].end;
    let sample_every = ((cfg.run.sample_ms * 1e6) as Ns).max(1);
    let mut samples = Samples::default();
    sample(&host, &mut ds, &mut samples, 0);
    let mut next_sample = sample_every;
    let mut audits_seen = vec![0u64; n];
    let mut interrupted = false;
    let mut last_progress = Instant::now();
    // Each guest's next event (`Ns::MAX` once it is over) and each VMM's
    // next NUMA scan, kept in tournament trees: choosing the next step
    // then reads log2(n) nodes, not every guest's run queue and every
    // VMM's mm (with 32 guests those passes took a fifth of the host
    // time). A guest's step changes only its own queue and its own VMM's
    // scan time; what else may change them updates the entries it touches.
    let guest_next = |d: &Driver| d.next_time().unwrap_or(Ns::MAX);
    let mut next = Earliest::new(ds.iter().map(guest_next));
    let due = kvm_of(&mut host).numa_scans_due();
    let scanning = !due.is_empty();
    let mut scans = Earliest::new(due);
    loop {
        debug_assert!(
            ds.iter().enumerate().all(|(g, d)| next.get(g) == Ns::MAX || next.get(g) == guest_next(d)),
            "a guest's next event moved unseen"
        );
        debug_assert!(
            kvm_of(&mut host).numa_scans_due().iter().enumerate().all(|(g, &s)| scans.get(g) == s),
            "a VMM's next NUMA scan moved unseen"
        );
        // The guest with the earliest next event (ties: the lowest number);
        // it runs on only while it stays before every other guest's.
        let best = next.min();
        let horizon = best.map_or(Ns::MAX, |(_, g)| next.min_except(g));
        let Some((t, g)) = best else { break };
        // A host thread, or a NUMA balancing scan of a VMM's memory, due
        // no later than the earliest guest runs first, up to that guest's
        // next event.
        let kthread_next = host_rq.next_time().map(|h| h.saturating_sub(epoch));
        let scan = scans.min();
        let host_next = match (kthread_next, scan) {
            (Some(k), Some((s, _))) => Some(k.min(s)),
            (k, s) => k.or(s.map(|s| s.0)),
        };
        let host_t = host_next.filter(|&h| h <= t);
        let t = host_t.unwrap_or(t);
        while t >= next_sample && next_sample <= end {
            sample(&host, &mut ds, &mut samples, next_sample);
            next_sample += sample_every;
        }
        if let Some(ht) = host_t {
            match scan {
                Some((s, sg)) if s == ht && kthread_next.is_none_or(|k| s < k) => {
                    // The scan ran on vCPU 0's host thread: time that vCPU
                    // did not run the guest, paid by whatever the guest
                    // runs there next, as an interrupt's.
                    let took = kvm_of(&mut host).numa_scan(sg, ht);
                    ds[sg].k.cpus[0].irq_debt += took;
                    scans.set(sg, kvm_of(&mut host).numa_scan_due_of(sg));
                }
                _ => {
                    host_rq.run_one(&mut kvm_of(&mut host).k, best.map_or(Ns::MAX, |b| b.0.saturating_add(epoch)), end + epoch);
                    scans = Earliest::new(kvm_of(&mut host).numa_scans_due());
                }
            }
            continue;
        }
        let horizon = horizon.min(host_next.unwrap_or(Ns::MAX));
        let d = &mut ds[g];
        lend(host, g, d);
        let r = d.run_one(horizon);
        next.set(g, if r == Stepped::Over { Ns::MAX } else { guest_next(d) });
        host = d.k.host.take().expect("the guest hands the host back");
        let h = kvm_of(&mut host);
        if scanning {
            scans.set(g, h.numa_scan_due_of(g));
        }
        if let Some(e) = h.failed.take() {
            return Err(Error::OutOfMemory(e));
        }
        host_rq.take_wakeups(&mut h.k);
        // The checker runs over the host and its guests together: when a
        // guest's audit ran, so does the host kernel's (each SPTE against
        // the VMM's PTEs, the host's LUF and rmap rules), its findings the
        // guest's.
        if d.k.check.audits != audits_seen[g] {
            audits_seen[g] = d.k.check.audits;
            if let Err(e) = audit_host(h) {
                d.k.check.report(e);
            }
        }
        match r {
            Stepped::Over | Stepped::Skipped => {}
            Stepped::Ran => {
                if d.steps & 0xfff == 0 && last_progress.elapsed().as_millis() >= 100 {
                    last_progress = Instant::now();
                    if !progress(&Progress { sim_s: d.now as f64 / 1e9, sim_total_s: end as f64 / 1e9 }) {
                        interrupted = true;
                        break;
                    }
                }
            }
        }
    }
    if interrupted && ds.iter().all(|d| d.in_warmup()) {
        // Stopped in the warm-up: no measured window, nothing to report.
        return Err(Error::Cancelled);
    }
    while !interrupted && next_sample <= end {
        sample(&host, &mut ds, &mut samples, next_sample);
        next_sample += sample_every;
    }
    let mut guests = Vec::with_capacity(n);
    for (g, mut d) in ds.into_iter().enumerate() {
        lend(host, g, &mut d);
        let mut o = d.finish(interrupted, host0);
        host = o.kernel.host.take().expect("the guest hands the host back");
        guests.push(o);
    }
    progress(&Progress { sim_s: end as f64 / 1e9, sim_total_s: end as f64 / 1e9 });
    Ok(GuestsOutcome { guests, host, samples, interrupted, host_s: host0.elapsed().as_secs_f64() })
}

/// The result object of a multi-guest run: guest 0's result (as a single
/// run's, see `run::result_json`) plus `guests` (every guest's summary and
/// vmstat) and `host` (the host kernel's vmstat and watermarks, RSS and
/// swap per guest, and their time series).
pub fn result_json(cfg: &Config, o: &GuestsOutcome) -> Value {
    let mut v = run::result_json(cfg, &o.guests[0]);
    v["summary"]["workload"] = cfg.guest_workload(0).0.into();
    let per: Vec<Value> = o
        .guests
        .iter()
        .enumerate()
        .map(|(g, go)| {
            let mut r = run::result_json(cfg, go);
            r["summary"]["workload"] = cfg.guest_workload(g).0.into();
            let mut v = json!({"guest": g, "seed": cfg.seed + g as u64, "summary": r["summary"], "vmstat": r["vmstat"], "time_ns": r["time_ns"], "checker": r["checker"],
                   "timeseries": {"t_s": r["timeseries"]["t_s"], "ops": r["timeseries"]["ops"]}});
            if let Some(p) = r.get("probes") {
                v["probes"] = p.clone();
            }
            v
        })
        .collect();
    v["guests"] = per.into();
    let h = &o.host;
    let n = h.nr_guests();
    let by_guest: Vec<(u64, u64)> = (0..n).map(|g| h.guest_pages(g)).collect();
    v["host"] = json!({
        "guests": n,
        "rss_pages": by_guest.iter().map(|p| p.0).sum::<u64>(),
        "swap_pages": by_guest.iter().map(|p| p.1).sum::<u64>(),
        "rss_pages_by_guest": by_guest.iter().map(|p| p.0).collect::<Vec<_>>(),
        "swap_pages_by_guest": by_guest.iter().map(|p| p.1).collect::<Vec<_>>(),
        "lazyfree_pages_by_guest": o.samples.lazyfree.last().cloned().unwrap_or_default(),
        "timeseries": {"t_s": o.samples.t, "rss_pages_by_guest": o.samples.rss, "swap_pages": o.samples.swap,
                       "lazyfree_pages_by_guest": o.samples.lazyfree},
    });
    let k = kvm(h);
    v["host"]["mem_pages"] = json!(k.mem_pages());
    // Each node's watermarks (min, low, high), in pages: where
    // kswapd wakes and where it stops, where a fault reclaims.
    let wm: Vec<(u64, u64, u64)> = (0..k.k.nodes.len() as u32).map(|n| k.k.pa().zone_watermarks(n)).collect();
    v["host"]["watermark_pages"] = json!({
        "min": wm.iter().map(|w| w.0).collect::<Vec<_>>(),
        "low": wm.iter().map(|w| w.1).collect::<Vec<_>>(),
        "high": wm.iter().map(|w| w.2).collect::<Vec<_>>(),
    });
    v["host"]["vmstat"] = k.k.stat.iter().map(|(name, v)| (name.to_string(), json!(v))).collect::<serde_json::Map<_, _>>().into();
    // The host's CPU time: in the vCPUs' exits (EPT violations),
    // the VMMs' main threads (reports), its own threads (kswapd).
    let sys = |f: &dyn Fn(&crate::kernel::task::Task) -> bool| {
        k.k.tasks().iter().filter(|t| f(t)).map(|t| t.sys_ns).sum::<Ns>() as f64 / NSEC_PER_SEC as f64
    };
    let secs = |ns: Ns| ns as f64 / NSEC_PER_SEC as f64;
    v["host"]["time_s"] = json!({
        "ept_violations_by_guest": k.vms.iter().map(|vm| secs(vm.exit_ns)).collect::<Vec<_>>(),
        "reports_by_guest": k.vms.iter().map(|vm| secs(vm.report_ns)).collect::<Vec<_>>(),
        "kthreads": sys(&|t| t.kthread.is_some()),
        "numa_scans_by_guest": k.vms.iter().map(|vm| secs(vm.numa_scan_ns)).collect::<Vec<_>>(),
        "blk_reads_by_guest": k.vms.iter().map(|vm| secs(vm.blk_ns)).collect::<Vec<_>>(),
        // Of ept_violations_by_guest: the vCPUs' time in the host's
        // direct reclaim, and in the faults that swapped a page in.
        "direct_reclaim_by_guest": (0..n).map(|g| secs(k.direct_reclaim_ns(g))).collect::<Vec<_>>(),
        "swapins_by_guest": k.vms.iter().map(|vm| secs(vm.swapin_ns)).collect::<Vec<_>>(),
    });
    // The guests' disk reads the VMMs made, those the host's page cache
    // did not hold, and the image pages page-cache promotion moved up as
    // the reads returned.
    v["host"]["blk_reads_by_guest"] = json!(k.vms.iter().map(|vm| vm.blk_reads).collect::<Vec<_>>());
    v["host"]["blk_read_misses_by_guest"] = json!(k.vms.iter().map(|vm| vm.blk_read_misses).collect::<Vec<_>>());
    v["host"]["blk_pgpromote_success_by_guest"] = json!(k.vms.iter().map(|vm| vm.blk_promoted).collect::<Vec<_>>());
    // The host's NUMA balancing of each guest's RAM: hinting faults
    // its vCPUs took through the EPT, and the pages they promoted.
    v["host"]["numa_hint_faults_by_guest"] = json!(k.vms.iter().map(|vm| vm.hint_faults).collect::<Vec<_>>());
    v["host"]["pgpromote_success_by_guest"] = json!(k.vms.iter().map(|vm| vm.promoted).collect::<Vec<_>>());
    v["host"]["remote_tlb_flushes_by_guest"] =
        json!((0..n).map(|g| k.k.mms[k.vms[g].mm as usize].notifier.as_ref().map_or(0, |e| e.nr_flushes)).collect::<Vec<_>>());
    v["host_time_s"] = o.host_s.into();
    v
}
