//! Reproductions of the v17 cover letter's figures (free page reporting), registered in
//! `reproduce.rs`: `fpr-overhead`, `fpr-host-memory`, `fpr-overcommit`.
//! Every figure comes out of the model; the seed numbers are only printed
//! beside it.

use crate::api::{ConfigError, Progress};
use crate::config;
use crate::mm::vmstat::Stat;
use crate::run::{self, Outcome};
use crate::virt::guests;
use serde_json::{json, Value};

const GIB_PAGES: f64 = (1u64 << 18) as f64;

fn err(name: &str, e: String) -> ConfigError {
    ConfigError { file: "(reproduce)".into(), line: None, key: name.into(), reason: e }
}

fn sim(name: &str, toml: &str, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Outcome, ConfigError> {
    let cfg = config::from_toml(toml, name)?;
    run::simulate(&cfg, progress).map_err(|e| err(name, e))
}

fn row(label: &str, metric: &str, unit: &str, seed: Option<f64>, simulated: f64, note: &str) -> Value {
    json!({"label": label, "metric": metric, "unit": unit, "seed": seed, "simulated": simulated, "note": note})
}

fn measured_ops_per_s(o: &Outcome, first_task: usize) -> f64 {
    let ops: u64 = o
        .kernel
        .tasks
        .iter()
        .enumerate()
        .filter(|(i, t)| *i >= first_task && t.kthread.is_none())
        .map(|(i, t)| t.ops - o.ops_at_warmup.get(i).copied().unwrap_or(0).min(t.ops))
        .sum();
    ops as f64 / (o.measured_ns as f64 / 1e9)
}

/// One seed configuration of the v17 cover letter's table.
struct SeedCfg {
    label: &'static str,
    knobs: &'static str,
    /// Seed "Process Iter": page_fault1 (THP) 1 task, 16 tasks; page_fault2 1, 16.
    seed: [f64; 4],
}

const SEED_TABLE: [SeedCfg; 5] = [
    SeedCfg { label: "Baseline", knobs: "", seed: [1012402.50, 8827457.25, 361855.25, 3282347.00] },
    SeedCfg { label: "Patches Applied", knobs: "", seed: [1007897.00, 8784741.75, 361887.00, 3240669.25] },
    SeedCfg {
        label: "Patches Enabled",
        knobs: "\"page_reporting.enabled\" = true\n",
        seed: [1010227.50, 8756219.00, 359749.25, 3226608.75],
    },
    SeedCfg {
        label: "Enabled + page shuffle",
        knobs: "\"page_reporting.enabled\" = true\n\"page_alloc.shuffle\" = true\n",
        seed: [1050982.00, 8672601.25, 357966.25, 3223177.75],
    },
    SeedCfg {
        label: "Enabled + shuffle w/ MADV_FREE RFC",
        knobs: "\"page_reporting.enabled\" = true\n\"page_alloc.shuffle\" = true\n\"host.discard\" = \"free\"\n",
        seed: [1003238.00, 8767010.50, 360211.00, 3199874.00],
    },
];

/// Simulated seconds: the idle settle after boot (every free page reported
/// by then, as after the seed's memhog), then warm-up and measurement.
const SETTLE_MS: u64 = 34_000;
const WARM_S: [f64; 2] = [0.5, 0.6];
const MEASURE_S: [f64; 2] = [4.0, 0.3];

/// Run independent configs on two host threads (results in input order;
/// each run is deterministic on its own).
fn sim_many(name: &str, tomls: &[String]) -> Result<Vec<Outcome>, ConfigError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Result<Outcome, ConfigError>>>> = Mutex::new((0..tomls.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= tomls.len() {
                    break;
                }
                let r = sim(name, &tomls[i], &mut |_| true);
                out.lock().unwrap()[i] = Some(r);
            });
        }
    });
    out.into_inner().unwrap().into_iter().map(|r| r.expect("every run finished")).collect()
}

/// `fpr-overhead`: the v17 cover letter's table.
pub fn overhead(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    let mut rows = Vec::new();
    let mut detail = Vec::new();
    // Every simulated (config, test, tasks), then the table.
    let mut tomls = Vec::new();
    for (ci, c) in SEED_TABLE.iter().enumerate() {
        for test in ["page_fault1", "page_fault2"] {
            for (ni, tasks) in [1u32, 16].iter().enumerate() {
                if ci == 1 {
                    continue;
                }
                let start = SETTLE_MS as f64 / 1e3;
                // The seed ran page_fault1 with THP (enabled = always).
                let thp = if test == "page_fault1" { "\"kernel/mm/transparent_hugepage/enabled\" = \"always\"\n" } else { "" };
                tomls.push(format!(
                    "[machine]\nprofile = \"e5-2630v3-guest-32g\"\n[workload]\nname = \"memhog_then\"\nhog_mib = 64\nsettle_ms = {SETTLE_MS}\ntest = \"{test}\"\ntasks = {tasks}\n[knobs]\n\"host.prealloc\" = true\n\"page_reporting.reported_putback\" = \"v17_head_rules\"\n{thp}{}[run]\nwarmup_s = {}\nduration_s = {}\n",
                    c.knobs,
                    start + WARM_S[ni],
                    MEASURE_S[ni]
                ));
            }
        }
    }
    let outs = sim_many("fpr-overhead", &tomls)?;
    progress(&Progress { sim_s: 1.0, sim_total_s: 1.0 });
    let mut outs = outs.into_iter();
    // [test][tasks] baseline ops/s
    let mut base = [[0.0f64; 2]; 2];
    for (ci, c) in SEED_TABLE.iter().enumerate() {
        for (ti, test) in ["page_fault1", "page_fault2"].iter().enumerate() {
            for (ni, tasks) in [1u32, 16].iter().enumerate() {
                let seed_v = c.seed[ti * 2 + ni];
                let (sim_v, info) = if ci == 1 {
                    // The series applied with the feature not offered runs
                    // exactly the baseline code (no device: static key off,
                    // no worker); tests check it is bit-identical.
                    (base[ti][ni], json!({"identical_to": "Baseline"}))
                } else {
                    let o = outs.next().expect("one outcome per run");
                    let v = measured_ops_per_s(&o, 0);
                    let st = &o.kernel.stat;
                    let allocs = st.get(Stat::PgallocNormal).max(1) as f64;
                    (
                        v,
                        json!({"host_faults": st.get(Stat::HostFaults), "host_fault_allocs": st.get(Stat::HostFaultAllocs), "host_fault_alloc_fraction": st.get(Stat::HostFaultAllocs) as f64 / allocs, "lazyfree_reuse": st.get(Stat::HostLazyfreeReuse), "report_calls": st.get(Stat::PageReportingCalls), "reported_pages": st.get(Stat::PageReportingReportedPages), "host_rss_gib": st.get(Stat::HostRss) as f64 / GIB_PAGES, "host_s": o.host_s}),
                    )
                };
                if ci == 0 {
                    base[ti][ni] = sim_v;
                }
                let thp = "";
                let metric =
                    format!("{test}{} {tasks} task{} ops/s", if ti == 0 { " (THP)" } else { "" }, if *tasks > 1 { "s" } else { "" });
                let diff = (sim_v - seed_v) / seed_v;
                let abs_note = if diff.abs() > 0.25 {
                    format!("{thp}Absolute rate {:+.0}% off the seed: guest fault-path costs are the generic-x86 KVM-guest figures, not measured on this box.", diff * 100.0)
                } else {
                    thp.to_string()
                };
                // The guest profile's zeroing bandwidth was derived from this
                // very row (see profiles/e5-2630v3-guest-32g.toml): say so.
                let abs_note = if ti == 0 && ni == 0 {
                    format!("{abs_note}Agreement by construction: the guest profile's zero_bw_gbps was derived from this seed figure.")
                } else {
                    abs_note
                };
                rows.push(row(c.label, &metric, "ops/s", Some(seed_v), sim_v, &abs_note));
                if ci > 0 {
                    let sb = SEED_TABLE[0].seed[ti * 2 + ni];
                    let seed_d = (seed_v / sb - 1.0) * 100.0;
                    let sim_d = (sim_v / base[ti][ni] - 1.0) * 100.0;
                    let why = if ci >= 2 && ni == 1 {
                        // What the counters show (host faults, passes): see the note below.
                        "No reporting pass and no host re-fault fall inside the 0.3 s window (the first touches of reported memory re-fault in the warm-up; see notes): ~0 here, while the seed's longer runs pay steady-state re-faults.".to_string()
                    } else {
                        format!("{thp}Seed changes are within its run-to-run spread (0.1-4.3%); compare sign and size, not digits.")
                    };
                    rows.push(row(c.label, &format!("{metric}: change vs Baseline"), "%", Some(seed_d), sim_d, &why));
                }
                detail.push(json!({"config": c.label, "test": test, "tasks": tasks, "ops_per_s": sim_v, "model": info}));
            }
        }
    }
    Ok(json!({
        "name": "fpr-overhead",
        "title": "Free page reporting v17: will-it-scale page_fault1/page_fault2 per configuration (cover letter table)",
        "rows": rows,
        "detail": detail,
        "notes": [
            format!("Protocol: 32 GiB guest (e5-2630v3-guest-32g), host backing preallocated (the state after the seed's memhog 32g); the guest idles {} s after boot so the initial sweep reports all free memory, then the test warms up {}/{} s and is measured {}/{} s (1/16 tasks) of simulated time.", SETTLE_MS / 1000, WARM_S[0], WARM_S[1], MEASURE_S[0], MEASURE_S[1]),
            "Reporting rows use the v17 (Linux 5.7) putback rules (page_reporting.reported_putback = v17_head_rules), MADV_DONTNEED unless stated, host 4 KiB pages.".to_string(),
            "Patches Applied = Baseline by construction (no reporting device: no notification, no worker, same allocator decisions); not re-simulated.".to_string(),
            "page_fault1 (THP) runs with kernel/mm/transparent_hugepage/enabled = always: 2 MiB folios, one per 2 MiB of the test's 128 MiB region.".to_string(),
            format!("16 tasks: the test starts at about {} s and is measured from {} s for {} s (host-time budget). No reporting pass falls inside the window: the settle's sweep, slowed by the waiting tasks' polls on the worker's CPU, still has 2.25 GiB to go and its next pass starts at 34.91 s. page_fault1 THP re-uses the blocks it frees and that backed memory: no host fault. page_fault2's first iteration (16 x 2 x 128 MiB) re-faults 1.75 GiB of reported memory during the warm-up (detail: host_faults), none in the window. page_fault2 with 1 task frees only low orders (per-CPU lists): no pass during its test.", SETTLE_MS as f64 / 1e3, SETTLE_MS as f64 / 1e3 + WARM_S[1], MEASURE_S[1]),
        ],
    }))
}

/// Guest size and memhog size of `fpr-host-memory` (the v17 thread: memhog 32g in a 32 GB guest).
const HM_HOG_MIB: u64 = 31 * 1024;

/// `fpr-host-memory`: host memory while the guest switches from memhog to
/// a page-fault test, with and without reporting.
pub fn host_memory(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    let mut series = serde_json::Map::new();
    let mut curves = Vec::new();
    let mut finals = Vec::new();
    let mut settle = 0.0;
    let mut hog_end = 0.0;
    // Simulated seconds: memhog 31 GiB takes ~20 s (~22 s with reporting:
    // what the worker reported ahead of it refaults from the host); then
    // the test, during which the host RSS settles (~30 s).
    let dur_s = [35.0, 110.0];
    for (i, enabled) in [false, true].into_iter().enumerate() {
        let toml = format!(
            "[machine]\nprofile = \"e5-2630v3-guest-32g\"\n[workload]\nname = \"memhog_then\"\nhog_mib = {HM_HOG_MIB}\ntest = \"page_fault2\"\ntasks = 1\n[knobs]\n\"host.prealloc\" = true\n\"page_reporting.enabled\" = {enabled}\n[run]\nwarmup_s = 0.0\nduration_s = {}\nsample_ms = 500.0\n",
            dur_s[i]
        );
        let o = sim("fpr-host-memory", &toml, progress)?;
        let rss: Vec<f64> = o.samples_stat.iter().map(|s| s[Stat::HostRss as usize] as f64 / GIB_PAGES).collect();
        let free: Vec<f64> = o.samples_stat.iter().map(|s| s[Stat::NrFreePages as usize] as f64 / GIB_PAGES).collect();
        // memhog has exited when guest free memory jumps back up.
        let low = free.iter().position(|f| *f < 8.0).unwrap_or(0);
        let end = o.samples_t.iter().zip(&free).skip(low).find(|(_, f)| **f > 24.0).map_or(f64::NAN, |(t, _)| *t);
        let last = *rss.last().unwrap_or(&0.0);
        if enabled {
            hog_end = end;
            let peak = rss.iter().copied().fold(0.0, f64::max);
            let target = peak - 0.9 * (peak - last);
            settle = o.samples_t.iter().zip(&rss).find(|(t, r)| **t >= end && **r <= target).map_or(f64::NAN, |(t, _)| *t - end);
        }
        finals.push(last);
        let key = if enabled { "reporting_on" } else { "reporting_off" };
        let which = if enabled { "reporting on" } else { "reporting off" };
        curves.push(json!({"name": format!("host memory of the guest, {which}"), "x": o.samples_t, "y": rss, "xlabel": "time (s)", "ylabel": "GiB"}));
        curves.push(json!({"name": format!("guest MemFree, {which}"), "x": o.samples_t, "y": free, "xlabel": "time (s)", "ylabel": "GiB"}));
        series.insert(key.into(), json!({"t_s": o.samples_t, "host_rss_gib": rss, "guest_free_gib": free, "memhog_exit_s": end}));
    }
    let returned = finals[0] - finals[1];
    let rows = vec![
        row(
            "after memhog, reporting off vs on",
            "host memory given back by the guest",
            "GiB",
            Some(31_269_732.0 / 1048576.0),
            returned,
            "seed: host MemFree 126,459,472 kB (on) - 95,189,740 kB (off) after memhog 32g",
        ),
        row(
            "reporting on",
            "time for host RSS to make 90% of its drop after memhog exits",
            "s",
            Some(30.0),
            settle,
            "seed: \"about 30 s to settle\" (author, v13/v14 thread)",
        ),
        row(
            "reporting on",
            "guest's host RSS with the page-fault test running",
            "GiB",
            None,
            finals[1],
            "seed: \"only a few GB\" of host memory for the whole VM (QEMU and host kernel included, which are not modelled)",
        ),
        row("reporting off", "guest's host RSS with the page-fault test running", "GiB", None, finals[0], "seed: \"never dropped\""),
    ];
    Ok(json!({
        "name": "fpr-host-memory",
        "title": "Free page reporting: host memory of a 32 GiB guest switching from memhog 31g to page_fault2 (1 task)",
        "rows": rows,
        "series": curves,
        "timeseries": series,
        "notes": [
            format!("memhog {HM_HOG_MIB} MiB then will-it-scale page_fault2 with 1 task, host backing preallocated (the VM has run before), reporting registered at boot, 6.12 tail putback, MADV_DONTNEED; samples every 0.5 s. With reporting, memhog exited at {hog_end:.1} s and the test ran to {:.0} s; the run without reporting was simulated for {:.0} s (its RSS is flat).", dur_s[1], dur_s[0]),
            "series: host memory of the guest (and guest MemFree) over time, reporting off and on; timeseries holds the same samples by run.".to_string(),
        ],
    }))
}

/// memhog's complete busy runs (seconds), from a run's ops samples taken
/// every `step_s`: consecutive samples in which it touched pages.
fn busy_runs(samples_ops: &[u64], step_s: f64) -> Vec<f64> {
    let mut runs = Vec::new();
    let mut cur = 0.0;
    for w in samples_ops.windows(2) {
        if w[1] > w[0] {
            cur += step_s;
        } else if cur > 0.0 {
            runs.push(cur);
            cur = 0.0;
        }
    }
    // A run still going at the end of the samples is incomplete: left out.
    runs
}

/// `fpr-overcommit`: N guests on one host with less memory than their sum.
pub fn overcommit(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    const N: u64 = 4;
    const GUEST_MIB: u64 = 2048;
    const HOST_MIB: u64 = 6144;
    const HOG_MIB: u64 = 1792;
    const CYCLES: u64 = 3;
    const SLEEP_MS: u64 = 30_000;
    /// The guests boot one after another, so their memhogs overlap only
    /// partly: memory an idle guest gave back can serve a busy one.
    const STAGGER_MS: u64 = 8_000;
    // Room for the slow cycles of the run without reporting.
    let dur_s = (CYCLES * (SLEEP_MS / 1000 + 30) + (N - 1) * STAGGER_MS / 1000) as f64;
    let mut rows = Vec::new();
    let mut detail = Vec::new();
    let mut series = serde_json::Map::new();
    let mut curves = Vec::new();
    let mut configs = Vec::new();
    for enabled in [false, true] {
        let toml = format!(
            "seed = 1\n[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [{GUEST_MIB}]\nguests = {N}\nguest_stagger_ms = {STAGGER_MS}\n[workload]\nname = \"memhog\"\nsize_mib = {HOG_MIB}\ncycles = {CYCLES}\nsleep_ms = {SLEEP_MS}\n[knobs]\n\"host.mem_mib\" = {HOST_MIB}\n\"page_alloc.shuffle\" = true\n\"page_reporting.enabled\" = {enabled}\n[run]\nwarmup_s = 0.0\nduration_s = {dur_s}\nsample_ms = 100.0\n"
        );
        let cfg = config::from_toml(&toml, "fpr-overcommit")?;
        let o = guests::simulate_guests(&cfg, progress).map_err(|e| err("fpr-overcommit", e))?;
        let label = if enabled { "reporting on" } else { "reporting off" };
        let (mut swpin, mut swpout, mut faults, mut busy, mut cycles_seen) = (0i64, 0i64, 0i64, 0.0f64, 0u64);
        for (g, go) in o.guests.iter().enumerate() {
            let st = &go.kernel.stat;
            swpin += st.get(Stat::HostPswpin);
            swpout += st.get(Stat::HostPswpout);
            faults += st.get(Stat::HostFaults);
            let runs = busy_runs(&go.samples_ops, 0.1);
            for r in runs.iter().skip(1) {
                busy += r;
                cycles_seen += 1;
            }
            detail.push(json!({"reporting": enabled, "guest": g, "boots_at_s": g as f64 * STAGGER_MS as f64 / 1e3, "memhog_cycle_s": runs, "pswpin_charged": st.get(Stat::HostPswpin), "pswpout_charged": st.get(Stat::HostPswpout), "host_faults": st.get(Stat::HostFaults), "host_rss_gib_end": o.host.guest_pages(g).0 as f64 / GIB_PAGES}));
        }
        let total: Vec<f64> = o.samples_rss.iter().map(|r| r.iter().sum::<u64>() as f64 / GIB_PAGES).collect();
        let peak_other = o.samples_rss.iter().map(|r| r.iter().copied().max().unwrap_or(0)).max().unwrap_or(0) as f64 / GIB_PAGES;
        series.insert(
            label.replace(' ', "_"),
            json!({"t_s": o.samples_t, "host_rss_gib": total, "host_rss_gib_by_guest": (0..N as usize).map(|g| o.samples_rss.iter().map(|r| r[g] as f64 / GIB_PAGES).collect::<Vec<_>>()).collect::<Vec<_>>(), "host_swap_gib": o.samples_swap.iter().map(|s| *s as f64 / GIB_PAGES).collect::<Vec<_>>()}),
        );
        curves.push(json!({"name": format!("host RSS of all guests, {label}"), "x": o.samples_t, "y": total, "xlabel": "time (s)", "ylabel": "host memory (GiB)"}));
        curves.push(json!({"name": format!("host swap, {label}"), "x": o.samples_t, "y": o.samples_swap.iter().map(|s| *s as f64 / GIB_PAGES).collect::<Vec<_>>(), "xlabel": "time (s)", "ylabel": "host swap (GiB)"}));
        configs.push(json!({"label": label, "config": cfg.normalized}));
        let cycle = busy / cycles_seen.max(1) as f64;
        rows.push(row(label, "host swap-ins (all guests)", "pages", None, swpin as f64, ""));
        rows.push(row(label, "host swap-outs (all guests)", "pages", None, swpout as f64, ""));
        rows.push(row(label, "host zero-fill faults (all guests)", "pages", None, faults as f64, ""));
        rows.push(row(label, "largest host RSS of one guest", "GiB", None, peak_other, ""));
        rows.push(row(
            label,
            "memhog cycle time after the first (mean)",
            "s",
            None,
            cycle,
            "seed (RFC era, different sizes and swap device, not comparable): 40+ s from host swap vs 5-7 s with hinting",
        ));
    }
    Ok(json!({
        "name": "fpr-overcommit",
        "title": format!("Free page reporting under host overcommit: {N} guests of {} GiB on one host with {} GiB", GUEST_MIB / 1024, HOST_MIB / 1024),
        "rows": rows,
        "detail": detail,
        "series": curves,
        "timeseries": series,
        "configs": configs,
        "notes": [
            format!("{N} guests (machine.guests) on one host with {HOST_MIB} MiB for all of them: one RSS, one limit, one reclaim clock over every guest's pages (the host's global LRU), in one simulated time line. Guest g boots at g x {} s; each runs memhog {HOG_MIB} MiB {CYCLES} times, {} s apart, with page_alloc.shuffle on (so successive cycles touch different frames, as a long-running guest does); host THP off, MADV_DONTNEED, 6.12 tail putback.", STAGGER_MS / 1000, SLEEP_MS / 1000),
            "Host swap is charged to the guest whose fault made the host reclaim (detail: pswp*_charged), whichever guest's page went out; the totals are the host's.".to_string(),
            "A new study: the seed has no figure (seed = null).".to_string(),
        ],
    }))
}
