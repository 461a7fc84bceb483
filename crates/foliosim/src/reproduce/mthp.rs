//! Reproductions of the RFC v2 thread's figures (docs/mechanisms/large-anon-folios.md):
//! will-it-scale one task (R3-R7), the sparse-touch memory pathology, and
//! the order sweep. Every figure comes out of the mechanism; the seed's
//! published numbers are printed beside ours, never fitted.

use super::{profile_json, run_point};
use crate::api::{ConfigError, Progress};
use crate::run;
use serde_json::{json, Value};

const PROFILE: &str = "ampere-altra-160";
const SEED: u64 = 1;
/// The seed's machine: Altra, 4 KiB pages, RFC v2 kernels without contpte.
/// One task runs, so 4 CPUs stand in for 160 (the others would idle).
const MACHINE: &str = "[machine]\nprofile = \"ampere-altra-160\"\nnr_cpus = 4\nnode_mem_mib = [4096, 4096]\ntlb_contpte = false\n";
const RFC_KNOBS: &str = "\"anon_folio.mode\" = \"rfc-v2\"\n";

fn wis_config(test: &str, knobs: &str) -> String {
    // page_fault1/2/3 touch a 128 MiB region before unmapping it: the
    // window must hold several regions at the baseline rate (~45 ms each),
    // or the unmap and free side is left out of the baseline.
    let (warm, dur) = match test {
        "page_fault1" | "page_fault2" | "page_fault3" => (0.01, 0.25),
        _ => (0.002, 0.03),
    };
    format!(
        "seed = {SEED}\n{MACHINE}[workload]\nname = \"{test}\"\nmode = \"processes\"\ntasks = 1\n[run]\nwarmup_s = {warm}\nduration_s = {dur}\n[knobs]\n{knobs}"
    )
}

/// (test, seed baseline ops/s, seed anonfolio ops/s, attributable, note when not).
const WIS: [(&str, f64, f64, bool, &str); 10] = [
    ("page_fault1", 624_061.0, 3_185_678.0, true, ""),
    ("malloc1", 96_214.0, 50_890.0, true, ""),
    ("mmap1", 410_253.0, 375_746.0, true, ""),
    ("tlb_flush2", 266_763.0, 322_320.0, true, ""),
    (
        "page_fault2",
        416_483.0,
        557_448.0,
        false,
        "private file CoW stays order 0 (RFC v2 leaves file CoW alone): not attributable to this mechanism; the seed's gain is unexplained (R7)",
    ),
    ("page_fault3", 724_566.0, 1_152_726.0, false, "shared file faults are untouched by this mechanism: not attributable (R7)"),
    ("read1", 1_806_908.0, 1_905_752.0, false, "read() is untouched by this mechanism: not attributable, within the seed's noise (R7)"),
    (
        "read2",
        587_722.0,
        1_942_062.0,
        false,
        "read() is untouched by this mechanism: not attributable; the seed's +230% is unexplained (R7)",
    ),
    ("tlb_flush1", 143_910.0, 152_097.0, false, "anon CoW pages in a file VMA stay order 0: not attributable (R7)"),
    (
        "context_switch1",
        328_744.0,
        351_150.0,
        false,
        "context_switch1 is not modelled (no pipe workload); not attributable to this mechanism either (R7)",
    ),
];

pub(super) fn mthp_will_it_scale(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    const NAME: &str = "mthp-will-it-scale";
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    let mut notes: Vec<String> = vec![
        "will-it-scale, one task, process mode, Ampere Altra profile (contpte off: the RFC v2 kernels had none); baseline = anon_folio.mode off, anonfolio = rfc-v2 (max order 4, all patches on).".into(),
    ];
    let runnable: Vec<_> = WIS.iter().filter(|w| w.0 != "context_switch1").collect();
    let n = runnable.len() * 2;
    let mut i = 0;
    let mut interrupted = false;
    let (mut xs, mut ys_seed, mut ys_sim) = (Vec::new(), Vec::new(), Vec::new());
    for &(test, sb, sa, attributable, why) in WIS.iter() {
        let seed_change = (sa / sb - 1.0) * 100.0;
        if test == "context_switch1" {
            rows.push(json!({"label": test, "metric": "ops/s change, order-4 vs baseline", "unit": "%", "seed": seed_change, "simulated": null, "note": why}));
            notes.push(format!("{test}: {why}"));
            continue;
        }
        let mut ops = [0.0f64; 2];
        for (j, knobs) in ["", RFC_KNOBS].iter().enumerate() {
            let toml = wis_config(test, knobs);
            let (cfg, out) = run_point(NAME, &toml, i, n, progress)?;
            i += 1;
            let res = run::result_json(&cfg, &out);
            ops[j] = res["summary"]["ops_per_s"].as_f64().unwrap_or(0.0);
            configs.push(json!({"label": format!("{test} {}", if j == 0 { "baseline" } else { "anonfolio" }), "config": cfg.normalized}));
            interrupted |= out.interrupted;
        }
        let sim_change = if ops[0] > 0.0 { (ops[1] / ops[0] - 1.0) * 100.0 } else { 0.0 };
        let differs = (sim_change - seed_change).abs() > 0.25 * seed_change.abs().max(1.0);
        let note = if !attributable {
            why.to_string()
        } else if differs {
            match test {
                "page_fault1" => "the model amortises trap, allocation, LRU and free over 16 pages; per-page costs (zeroing at the profile's bandwidth, PTE, rmap, zap) bound the gain".to_string(),
                "malloc1" => "one header store per 128 MiB malloc now zeroes and maps 64 KiB and takes the zone lock twice; the remaining gap is allocator/free-path cold-cache cost the model does not have (R4)".to_string(),
                "mmap1" => "mmap1 never faults; only the 64 KiB alignment of patch 16 can act, and the model charges no cost for an aligned gap search (the thread has no explanation, R5)".to_string(),
                "tlb_flush2" => "the model gains more than the seed: 15 of 16 write faults are saved and the offsets it has (64 KiB zeroing, the deferred-split lock on the first DONTNEED of each folio and on its free) cost less than those faults; whatever else slowed the seed's madvise path is not modelled".to_string(),
                _ => String::new(),
            }
        } else {
            String::new()
        };
        if !note.is_empty() {
            notes.push(format!("{test}: {note}"));
        }
        let base_note = if (ops[0] / sb - 1.0).abs() > 0.25 {
            "absolute level only: the Altra profile's software costs are mostly generic-x86 assumptions (the thread gives no more than 'Altra, 160 CPUs'); not a reproduction target"
        } else {
            ""
        };
        rows.push(json!({"label": test, "metric": "baseline ops/s", "unit": "ops/s", "seed": sb, "simulated": ops[0], "note": base_note}));
        rows.push(json!({"label": test, "metric": "ops/s change, order-4 vs baseline", "unit": "%", "seed": seed_change, "simulated": sim_change, "note": note}));
        xs.push(test);
        ys_seed.push(seed_change);
        ys_sim.push(sim_change);
        if interrupted {
            break;
        }
    }
    notes.push("Baseline ops/s rows are the model's absolute calibration on this profile; the seed's machine details beyond 'Altra, 160 CPUs' are not published, so only the change rows are the reproduction.".into());
    Ok(json!({
        "name": NAME,
        "title": "will-it-scale one task, process mode: baseline vs order-4 large anon folios (RFC v2 cover letter, R3-R7)",
        "rows": rows,
        "notes": notes,
        "seed": SEED,
        "profile": profile_json(PROFILE),
        "configs": configs,
        "interrupted": interrupted,
    }))
}

// ---- mthp-memory ---------------------------------------------------------------

fn sparse_config(stride_kib: u64, knobs: &str) -> String {
    format!(
        "seed = {SEED}\n{MACHINE}[workload]\nname = \"sparse_touch\"\ntasks = 1\nsize_mib = 64\nstride_kib = {stride_kib}\nhold_ms = 1000\n[run]\nwarmup_s = 0.0\nduration_s = 0.01\n[knobs]\n{knobs}"
    )
}

/// Anonymous memory mapped at the end of the run (the touched region is
/// held), MiB, and the touches made.
fn anon_mib(out: &run::Outcome) -> f64 {
    out.kernel.stat.get(crate::mm::vmstat::Stat::NrAnonPages) as f64 * 4096.0 / (1 << 20) as f64
}

/// kbuild -j8 on a 4 GiB Altra, counters sampled every millisecond.
fn kbuild_memory_config(knobs: &str) -> String {
    format!(
        "seed = {SEED}\n[machine]\nprofile = \"ampere-altra-160\"\nnr_cpus = 8\nnode_mem_mib = [2048, 2048]\ntlb_contpte = false\n[workload]\nname = \"kbuild\"\ntasks = 8\njobs = 24\n[run]\nwarmup_s = 0.0\nduration_s = 2.0\nsample_ms = 1.0\n[knobs]\n{knobs}"
    )
}

/// (low, high) watermark and mean of used memory (MemTotal - MemFree,
/// MiB) over the samples taken while the build ran.
fn used_watermarks(out: &run::Outcome) -> (f64, f64, f64) {
    let total = out.kernel.mem_bytes() as f64 / (1 << 20) as f64;
    let end = times(out).0;
    let free = crate::mm::vmstat::Stat::NrFreePages as usize;
    let used: Vec<f64> = out
        .samples_t
        .iter()
        .zip(&out.samples_stat)
        .filter(|(&t, _)| t > 0.0 && t <= end)
        .map(|(_, s)| total - s[free] as f64 * 4096.0 / (1 << 20) as f64)
        .collect();
    let lo = used.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = used.iter().copied().fold(0.0, f64::max);
    if used.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (lo, hi, used.iter().sum::<f64>() / used.len() as f64)
    }
}

pub(super) fn mthp_memory(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    const NAME: &str = "mthp-memory";
    const STRIDES: [u64; 6] = [4, 8, 16, 32, 64, 128];
    let n = STRIDES.len() * 2 + 2;
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    let mut interrupted = false;
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    let mut i = 0;
    for &stride in STRIDES.iter() {
        let mut mib = [0.0f64; 2];
        for (j, knobs) in ["", RFC_KNOBS].iter().enumerate() {
            let (cfg, out) = run_point(NAME, &sparse_config(stride, knobs), i, n, progress)?;
            i += 1;
            mib[j] = anon_mib(&out);
            interrupted |= out.interrupted;
            configs.push(json!({"label": format!("stride {stride} KiB {}", if j == 0 { "baseline" } else { "anonfolio" }), "config": cfg.normalized}));
        }
        let mult = if mib[0] > 0.0 { mib[1] / mib[0] } else { 0.0 };
        xs.push(stride);
        ys.push(mult);
        if stride == 64 {
            rows.push(json!({"label": "sparse touch 64 MiB, 1 byte / 64 KiB", "metric": "anon memory, order 0", "unit": "MiB", "seed": 4.0, "simulated": mib[0]}));
            rows.push(json!({"label": "sparse touch 64 MiB, 1 byte / 64 KiB", "metric": "anon memory, order 4", "unit": "MiB", "seed": 64.0, "simulated": mib[1]}));
            rows.push(json!({"label": "sparse touch 64 MiB, 1 byte / 64 KiB", "metric": "memory multiplier", "unit": "x", "seed": 16.0, "simulated": mult}));
        }
        if interrupted {
            break;
        }
    }
    if !interrupted {
        let mut used = [(0.0f64, 0.0f64, 0.0f64); 2];
        for (j, knobs) in ["", RFC_KNOBS].iter().enumerate() {
            let (cfg, out) = run_point(NAME, &kbuild_memory_config(knobs), i, n, progress)?;
            i += 1;
            used[j] = used_watermarks(&out);
            interrupted |= out.interrupted;
            configs.push(json!({"label": format!("kernel build -j8 in 4 GB {}", if j == 0 { "baseline" } else { "anonfolio" }), "config": cfg.normalized}));
        }
        let ch = |a: f64, b: f64| if a > 0.0 { (b / a - 1.0) * 100.0 } else { 0.0 };
        let differs = |sim: f64, seed: f64| (sim - seed).abs() > 0.25 * seed.abs().max(1.0);
        let lo = ch(used[0].0, used[1].0);
        let hi = ch(used[0].1, used[1].1);
        let lo_note = if differs(lo, 2.1) {
            "the denominator differs: the seed's 825 MB is mostly page cache of the source tree and the OS, ours only the compiler, headers and sources (MiB rows); our minimum is the first sample, when the 8 jobs are starting: the extra MiB are anon folios rounded up over partly used blocks, plus the order-4 jobs being further along at that instant (see the mean row)"
        } else {
            ""
        };
        let hi_note = if differs(hi, -0.9) {
            "the seed's high watermark moves within its noise (-0.9% by MemFree, +1.0% by MemAvailable, R8); ours is set by the live jobs' anon memory plus the objects' page cache at the end of the run"
        } else {
            ""
        };
        let lbl = "kernel build -j8 in 4 GB (used = MemTotal - MemFree)";
        rows.push(json!({"label": lbl, "metric": "used memory at the low watermark, baseline", "unit": "MiB", "seed": 825.0, "simulated": used[0].0,
                         "note": if differs(used[0].0, 825.0) { "absolute level only: the simulated machine holds no OS, no source tree and no make/sh processes" } else { "" }}));
        rows.push(json!({"label": lbl, "metric": "used memory at the low watermark, change", "unit": "%", "seed": 2.1, "simulated": lo, "note": lo_note}));
        rows.push(json!({"label": lbl, "metric": "used memory at the low watermark, difference", "unit": "MiB", "seed": 17.0, "simulated": used[1].0 - used[0].0,
                         "note": if differs(used[1].0 - used[0].0, 17.0) { "8 jobs live at once here; the seed's machine also ran make, sh and the gcc driver, each with their own partly used anon folios" } else { "" }}));
        rows.push(json!({"label": lbl, "metric": "used memory at the high watermark, change", "unit": "%", "seed": -0.9, "simulated": hi, "note": hi_note}));
        rows.push(json!({"label": lbl, "metric": "mean used memory over the build, change", "unit": "%", "seed": null, "simulated": ch(used[0].2, used[1].2),
                         "note": "no seed figure; the time average compares both kernels at the same 8 live jobs, so it isolates the rounding and deferred-split memory from the order-4 build's faster progress"}));
    }
    Ok(json!({
        "name": NAME,
        "title": "Memory cost of large anon folios: the sparse-touch pathology and a kernel build in 4 GB (RFC v2 cover letter, P-1 and R8)",
        "rows": rows,
        "notes": [
            "sparse_touch maps 64 MiB and writes one byte per stride; memory is the anonymous pages mapped while the region is held (nr_anon_pages).",
            "Every 64 KiB block is empty and inside the VMA (rfc-v2 aligns the mmap to 64 KiB), so each touch allocates a whole order-4 folio: the multiplier is min(stride, 64 KiB) / 4 KiB.",
            "kernel build -j8 in 4 GB (R8): the kbuild workload of mthp-kernel-build (8 slots x 24 jobs) on a 4 GiB Altra; used = MemTotal - MemFree (nr_free_pages) sampled every 1 ms while the build runs (the seed polled every 0.5 s over a 373 s build: both give a few hundred samples); the low and high watermarks are the smallest and largest sample. 4 GB - MemAvailable is not computed.",
        ],
        "series": [
            {"name": "order-4 / order-0 memory", "x": xs, "y": ys, "xlabel": "touch stride (KiB)", "ylabel": "memory multiplier (x)"},
        ],
        "seed": SEED,
        "profile": profile_json(PROFILE),
        "configs": configs,
        "interrupted": interrupted,
    }))
}

// ---- mthp-orders ---------------------------------------------------------------

pub(super) fn mthp_orders(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    const NAME: &str = "mthp-orders";
    // Order 0 = baseline; order 1 is never allocated (THP metadata needs 3 pages).
    const ORDERS: [u32; 9] = [0, 2, 3, 4, 5, 6, 7, 8, 9];
    const TESTS: [&str; 2] = ["page_fault1", "malloc1"];
    let n = ORDERS.len() * TESTS.len();
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    let mut series = Vec::new();
    let mut interrupted = false;
    let mut i = 0;
    for test in TESTS {
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        let mut base = 0.0;
        for &order in ORDERS.iter() {
            let knobs = if order == 0 { String::new() } else { format!("{RFC_KNOBS}\"anon_folio.max_order\" = {order}\n") };
            let (cfg, out) = run_point(NAME, &wis_config(test, &knobs), i, n, progress)?;
            i += 1;
            let ops = run::result_json(&cfg, &out)["summary"]["ops_per_s"].as_f64().unwrap_or(0.0);
            if order == 0 {
                base = ops;
            }
            let rel = if base > 0.0 { ops / base } else { 0.0 };
            configs.push(json!({"label": format!("{test} order {order}"), "config": cfg.normalized}));
            let seed = match (test, order) {
                ("page_fault1", 4) => json!(3_185_678.0 / 624_061.0),
                ("malloc1", 4) => json!(50_890.0 / 96_214.0),
                _ => Value::Null,
            };
            rows.push(json!({"label": format!("{test}, max order {order}"), "metric": "ops/s relative to order 0", "unit": "x", "seed": seed, "simulated": rel}));
            xs.push(order);
            ys.push(rel);
            interrupted |= out.interrupted;
            if interrupted {
                break;
            }
        }
        series.push(
            json!({"name": test, "x": xs, "y": ys, "xlabel": "max anon folio order (rfc-v2)", "ylabel": "ops/s relative to order 0"}),
        );
        if interrupted {
            break;
        }
    }
    // The kernel-build-like workload at -j8: system time per order.
    if !interrupted {
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        let mut base = 0.0;
        for (j, &order) in ORDERS.iter().enumerate() {
            let knobs = if order == 0 { String::new() } else { format!("{RFC_KNOBS}\"anon_folio.max_order\" = {order}\n") };
            let (cfg, out) = run_point(NAME, &kbuild_config(8, 24, &knobs), j, ORDERS.len(), progress)?;
            let sys = times(&out).2;
            if order == 0 {
                base = sys;
            }
            let rel = if base > 0.0 { sys / base } else { 0.0 };
            let seed = if order == 4 { json!(1.0 - 0.333) } else { Value::Null };
            let note = if order == 4 && (rel - 0.667).abs() > 0.25 * 0.667 {
                "see mthp-kernel-build: kbuild's kernel time is mostly anon faults"
            } else {
                ""
            };
            rows.push(json!({"label": format!("kbuild -j8, max order {order}"), "metric": "sys time relative to order 0", "unit": "x", "seed": seed, "simulated": rel, "note": note}));
            configs.push(json!({"label": format!("kbuild -j8 order {order}"), "config": cfg.normalized}));
            xs.push(order);
            ys.push(rel);
            interrupted |= out.interrupted;
            if interrupted {
                break;
            }
        }
        series.push(json!({"name": "kbuild -j8 sys", "x": xs, "y": ys, "xlabel": "max anon folio order (rfc-v2)", "ylabel": "sys time relative to order 0"}));
    }
    Ok(json!({
        "name": NAME,
        "title": "will-it-scale page_fault1 and malloc1 over the max anon folio order 0..9 (RFC v2 cover letter: the order knee, R3, R4)",
        "rows": rows,
        "notes": [
            "rfc-v2 with anon_folio.max_order = k (order 9 here is PTE-mapped, as the RFC's cap allows); order 0 is the baseline kernel. The seed publishes only order 4 and says the gain flattens around order 4 (cover letter).",
            "page_fault1 can never exceed 16x at order 4 (R3); per-page costs (zeroing, PTE, rmap, zap) bound it as the order grows. malloc1 loses more at every larger order: one header store zeroes and maps the whole folio (R4).",
            "kbuild -j8 (the kernel-build-like workload of mthp-kernel-build): system time by max order; the seed gives only order 4 (sys -33.3%).",
        ],
        "series": series,
        "seed": SEED,
        "profile": profile_json(PROFILE),
        "configs": configs,
        "interrupted": interrupted,
    }))
}

// ---- mthp-tlb-reach --------------------------------------------------------------

pub(super) fn mthp_tlb_reach(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    const NAME: &str = "mthp-tlb-reach";
    // memhog re-writing 64 MiB: far beyond the 1280-entry L2 TLB at 4 KiB
    // (5 MiB reach), within it at 64 KiB (80 MiB reach).
    let cases: [(&str, &str, &str); 4] = [
        ("4 KiB pages (baseline)", "tlb_contpte = false\n", ""),
        ("order-4 folios, no coalescing (RFC v2 kernel)", "tlb_contpte = false\n", RFC_KNOBS),
        ("order-4 folios + HPA order-2 coalescing", "tlb_contpte = false\ntlb_coalesce_order = 2\n", RFC_KNOBS),
        ("order-4 folios + arm64 contpte", "tlb_contpte = true\n", RFC_KNOBS),
    ];
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    let mut interrupted = false;
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for (i, (label, machine, knobs)) in cases.iter().enumerate() {
        let toml = format!(
            "seed = {SEED}\n[machine]\nprofile = \"ampere-altra-160\"\nnr_cpus = 4\nnode_mem_mib = [4096, 4096]\n{machine}[workload]\nname = \"memhog\"\ntasks = 1\nsize_mib = 64\npasses = 1000\n[run]\nwarmup_s = 0.005\nduration_s = 0.02\n[knobs]\n{knobs}"
        );
        let (cfg, out) = run_point(NAME, &toml, i, cases.len(), progress)?;
        let s = &out.kernel.stat;
        use crate::mm::vmstat::Stat;
        let acc = s.get(Stat::TlbAccesses).max(1) as f64;
        let miss = (s.get(Stat::DtlbLoadMisses) + s.get(Stat::DtlbStoreMisses)) as f64;
        let mpki = 1000.0 * miss / acc;
        rows.push(json!({"label": label, "metric": "dTLB misses per 1000 accesses", "unit": "", "seed": null, "simulated": mpki}));
        configs.push(json!({"label": label, "config": cfg.normalized}));
        xs.push(i);
        ys.push(mpki);
        interrupted |= out.interrupted;
        if interrupted {
            break;
        }
    }
    Ok(json!({
        "name": NAME,
        "title": "TLB reach of large anon folios: dTLB misses of a 64 MiB rewrite loop with 4 KiB, HPA and contpte entries",
        "rows": rows,
        "notes": [
            "No seed figure: the thread names TLB reach as a benefit (contpte, HPA) but publishes no miss rates; the RFC v2 kernels had no contpte (contpte came in Linux 6.9).",
            "memhog writes one byte per 4 KiB page of 64 MiB, over and over; misses come from the Altra profile's TLB geometry (48-entry L1, 1280-entry L2).",
            "Large folios alone do not change the miss rate; only an entry covering several pages (HPA 16 KiB, contpte 64 KiB) does.",
        ],
        "series": [{"name": "dTLB MPKI", "x": xs, "y": ys, "xlabel": "case (0 = 4K, 1 = order-4, 2 = +HPA, 3 = +contpte)", "ylabel": "misses per 1000 accesses"}],
        "seed": SEED,
        "profile": profile_json(PROFILE),
        "configs": configs,
        "interrupted": interrupted,
    }))
}

// ---- mthp-kernel-build ------------------------------------------------------------

fn kbuild_config(jobs_n: u32, jobs_each: u32, knobs: &str) -> String {
    format!(
        "seed = {SEED}\n[machine]\nprofile = \"ampere-altra-160\"\nnode_mem_mib = [8192, 8192]\ntlb_contpte = false\n[workload]\nname = \"kbuild\"\ntasks = {jobs_n}\njobs = {jobs_each}\n[run]\nwarmup_s = 0.0\nduration_s = 100.0\n[knobs]\n{knobs}"
    )
}

/// (real, user, sys) in seconds: real = when the last slot exited.
/// Kernel time of the workload's tasks by entry point, ns.
fn entry_ns(out: &run::Outcome) -> [u64; crate::mm::vmstat::NR_ENTRIES] {
    let mut v = [0u64; crate::mm::vmstat::NR_ENTRIES];
    for t in out.kernel.tasks.iter().filter(|t| t.kthread.is_none()) {
        for (a, b) in v.iter_mut().zip(t.entry_ns.iter()) {
            *a += b;
        }
    }
    v
}

fn times(out: &run::Outcome) -> (f64, f64, f64) {
    let ws: Vec<_> = out.kernel.tasks.iter().filter(|t| t.kthread.is_none()).collect();
    let real = ws.iter().map(|t| t.clock).max().unwrap_or(0) as f64 / 1e9;
    let user = ws.iter().map(|t| t.user_ns).sum::<u64>() as f64 / 1e9;
    let sys = ws.iter().map(|t| t.sys_ns).sum::<u64>() as f64 / 1e9;
    (real, user, sys)
}

pub(super) fn mthp_kernel_build(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    const NAME: &str = "mthp-kernel-build";
    // (-jN, jobs per slot, seed real/user/sys change %)
    // -j160 runs 16 jobs per slot so that the steady state, not the start
    // (160 CPUs refilling empty per-CPU lists at once), sets the result.
    const CASES: [(u32, u32, [f64; 3]); 2] = [(8, 24, [-8.1, -2.5, -33.3]), (160, 16, [-10.2, 5.0, -22.3])];
    let n = CASES.len() * 2;
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    let mut interrupted = false;
    let mut i = 0;
    let mut hist = None;
    let mut entries = [[0u64; crate::mm::vmstat::NR_ENTRIES]; 2];
    let mut sys_per_job = [0.0f64; 2];
    for &(jn, each, seed) in CASES.iter() {
        let mut t = [(0.0, 0.0, 0.0); 2];
        let mut split_wait = 0u64;
        for (j, knobs) in ["", RFC_KNOBS].iter().enumerate() {
            let (cfg, out) = run_point(NAME, &kbuild_config(jn, each, knobs), i, n, progress)?;
            i += 1;
            t[j] = times(&out);
            interrupted |= out.interrupted;
            if j == 1 {
                split_wait = out.kernel.split_queues.iter().map(|q| q.lock.wait_ns).sum();
                if jn == 8 {
                    hist = Some(out.kernel.mthp.clone());
                }
            }
            if jn == 8 {
                entries[j] = entry_ns(&out);
            }
            configs.push(json!({"label": format!("-j{jn} {}", if j == 0 { "baseline" } else { "anonfolio" }), "config": cfg.normalized}));
        }
        let ch = |a: f64, b: f64| if a > 0.0 { (b / a - 1.0) * 100.0 } else { 0.0 };
        let sim = [ch(t[0].0, t[1].0), ch(t[0].1, t[1].1), ch(t[0].2, t[1].2)];
        sys_per_job[if jn == 8 { 0 } else { 1 }] = t[0].2 / (jn * each) as f64;
        for (k, what) in ["real", "user", "sys"].iter().enumerate() {
            let differs = (sim[k] - seed[k]).abs() > 0.25 * seed[k].abs().max(1.0);
            let note = match (*what, differs) {
                (_, false) => String::new(),
                ("real", _) => "real is set by the slots' serial job chains here; the seed's build has serial phases (link, final image) and I/O the workload does not model".into(),
                ("user", _) => "user time is the workload's fixed compute_us plus TLB walks; the seed's user change (cache/TLB effects of the compiler itself) is not modelled (P-5)".into(),
                _ if jn == 160 => format!("the model gains more: its baseline sys per job rises only {:.2}x from -j8 to -j160 (seed 2.68x), mostly zone and LRU lock contention, which large folios relieve; the seed's extra kernel time at 160 CPUs also holds contention this mechanism leaves alone (VFS path walks, page cache, scheduler); split_queue_lock wait {:.3} ms", sys_per_job[1] / sys_per_job[0].max(1e-12), split_wait as f64 / 1e6),
                _ => format!("anon faults are a larger share of the model's kernel time than of the seed's (data aborts 41% of its kernel cycles, R1); split_queue_lock wait {:.3} ms", split_wait as f64 / 1e6),
            };
            rows.push(json!({"label": format!("kernel build -j{jn}"), "metric": format!("{what} time change, order-4 vs baseline"), "unit": "%", "seed": seed[k], "simulated": sim[k], "note": note}));
        }
        if interrupted {
            break;
        }
    }
    if let Some(h) = hist {
        let faults: u64 = h.path_a.iter().sum();
        let pages: u64 = h.path_a.iter().enumerate().map(|(o, &n)| n << o).sum();
        let f = faults.max(1) as f64;
        let note = |sim: f64, seed: f64| {
            if (sim - seed).abs() > 0.25 * seed {
                "shape only (R11 comes from the reworked series compiling v6.3-rc3): the workload's VMA sizes set the order mix"
            } else {
                ""
            }
        };
        let ppf = pages as f64 / f;
        let o4 = 100.0 * h.path_a[4] as f64 / f;
        let o0 = 100.0 * h.path_a[0] as f64 / f;
        rows.push(json!({"label": "kernel build -j8, path A", "metric": "pages per fault", "unit": "", "seed": 9.7, "simulated": ppf, "note": note(ppf, 9.7)}));
        rows.push(json!({"label": "kernel build -j8, path A", "metric": "share of faults at order 4", "unit": "%", "seed": 54.8, "simulated": o4, "note": note(o4, 54.8)}));
        rows.push(json!({"label": "kernel build -j8, path A", "metric": "share of faults at order 0", "unit": "%", "seed": 35.1, "simulated": o0, "note": note(o0, 35.1)}));
    }
    if entries[0].iter().any(|&v| v > 0) {
        // Kernel time by entry point (R1's cycle table; the fault row sums
        // data and instruction aborts, as the model's fault entry does).
        use crate::mm::vmstat::Entry;
        let breakdown: [(&str, Entry, f64, &str); 7] = [
            ("faults (data + instruction abort)", Entry::Fault, (392.0 / 776.0 - 1.0) * 100.0, "anon faults are the model's largest kernel cost and large folios cut them by the pages-per-fault ratio; its file faults (text fetches, data CoW: the seed's instruction aborts) are unchanged"),
            ("exit_group", Entry::Exit, -35.7, "the model's exit zaps fewer, larger folios (batch zap, one rmap removal per folio); its exit_group has no other work (files, signals) to dilute it"),
            ("execve", Entry::Execve, -11.0, "execve here is the fixed part, the teardown of the forked copy of make and one argument-page fault"),
            ("read", Entry::Read, -12.7, "read() copies into user memory without faulting here; the seed's change would come from faults on fresh user buffers billed to read (our hypothesis for R1)"),
            ("write", Entry::Write, -2.9, "write() is untouched by this mechanism"),
            ("openat", Entry::Open, -3.3, "openat is untouched by this mechanism"),
            ("clone", Entry::Fork, -10.0, "fork copies make's PTEs one by one in both kernels (6.3)"),
        ];
        for (what, e, seed, why) in breakdown {
            let (a, b) = (entries[0][e as usize] as f64, entries[1][e as usize] as f64);
            let sim = if a > 0.0 { (b / a - 1.0) * 100.0 } else { 0.0 };
            let note = if (sim - seed).abs() > 0.25 * seed.abs().max(1.0) { why } else { "" };
            rows.push(json!({"label": "kernel build -j8, kernel time by entry", "metric": format!("{what} change"), "unit": "%", "seed": seed, "simulated": sim, "note": note}));
        }
        let share = 100.0 * entries[0][Entry::Fault as usize] as f64 / entries[0].iter().sum::<u64>().max(1) as f64;
        rows.push(json!({"label": "kernel build -j8, kernel time by entry", "metric": "faults' share of baseline kernel time", "unit": "%", "seed": 100.0 * 776.0 / 1663.0, "simulated": share,
                         "note": if (share - 46.7).abs() > 0.25 * 46.7 { "the workload's shape, not a target: per job, anon memory against a few hundred file syscalls; the seed's build also runs sh, make, as and ld" } else { "" }}));
    }
    Ok(json!({
        "name": NAME,
        "title": "Kernel-build-like workload at -j8 and -j160 on Altra: real/user/sys, baseline vs order-4 (RFC v2 thread, R1, R2, R11)",
        "rows": rows,
        "notes": [
            "kbuild: make slots (-jN, 24 jobs each at -j8, 16 at -j160), each forking one compiler process at a time and reaping it with wait4. The child execs a shared file-backed binary (16 MiB text fetched in part through the page cache with fault-around, 512 KiB data relocated: private file CoW, 512 KiB bss partly read before written), grows a brk heap in glibc's 132 KiB steps, writes three small anon maps and its stack, reads its source and 300 headers (open/read/close), computes 5 ms, writes its object file (dirty page cache) and exits (exit_group tears the mm down). A simplification of a kernel build: shape, not replay (R1).",
            "brk growth in 132 KiB steps leaves the page after each step's end in a block that crossed the old end, so the RFC's first_bad rule gives order 0/2 around every step: that, not a tuned constant, sets the order mix.",
            "Kernel time by entry (R1's cycle table) is the -j8 run's; faults taken inside execve (the argument page) are billed to execve. The kernel-build memory watermarks (R8) are in mthp-memory.",
            "The -j160 run has 160 slots on 160 CPUs with one memcg: split_queue_lock, the LRU lock and the zone lock (order-4 folios bypass the PCP) are shared; extra kernel time comes only from modelled contention.",
            "Altra profile with contpte off (RFC v2 kernels).",
        ],
        "seed": SEED,
        "profile": profile_json(PROFILE),
        "configs": configs,
        "interrupted": interrupted,
    }))
}

// ---- mthp-patches ----------------------------------------------------------------

pub(super) fn mthp_patches(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    const NAME: &str = "mthp-patches";
    // Ryan's reordered stack (R10), -j8: (step, knobs, seed real/user/sys %).
    let off = "\"anon_folio.zero_page_large\" = false\n\"anon_folio.cow_reuse_range\" = false\n\"anon_folio.cow_copy_large\" = false\n\"anon_folio.mmap_align_unhinted\" = false\n";
    let steps: [(&str, String, [f64; 3]); 5] = [
        ("baseline", String::new(), [0.0, 0.0, 0.0]),
        ("alloc", format!("{RFC_KNOBS}{off}"), [-6.0, -2.3, -24.1]),
        ("reuse", format!("{RFC_KNOBS}{}", off.replace("cow_reuse_range\" = false", "cow_reuse_range\" = true")), [-9.5, -5.8, -28.5]),
        (
            "copy",
            format!("{RFC_KNOBS}\"anon_folio.zero_page_large\" = false\n\"anon_folio.mmap_align_unhinted\" = false\n"),
            [-10.6, -6.9, -29.4],
        ),
        ("zero-alloc", format!("{RFC_KNOBS}\"anon_folio.mmap_align_unhinted\" = false\n"), [-9.2, -5.1, -29.8]),
    ];
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    let mut interrupted = false;
    let mut base = (0.0, 0.0, 0.0);
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for (i, (step, knobs, seed)) in steps.iter().enumerate() {
        let (cfg, out) = run_point(NAME, &kbuild_config(8, 24, knobs), i, steps.len(), progress)?;
        let t = times(&out);
        if i == 0 {
            base = t;
        }
        configs.push(json!({"label": step, "config": cfg.normalized}));
        interrupted |= out.interrupted;
        if i > 0 {
            let ch = |a: f64, b: f64| if a > 0.0 { (b / a - 1.0) * 100.0 } else { 0.0 };
            let sim = [ch(base.0, t.0), ch(base.1, t.1), ch(base.2, t.2)];
            for (k, what) in ["real", "user", "sys"].iter().enumerate() {
                let note = if (sim[k] - seed[k]).abs() > 0.25 * seed[k].abs().max(1.0) {
                    match *what {
                        "user" => "user changes are not modelled beyond TLB walks (P-5)",
                        "real" => "real follows CPU time here; the seed's build has serial phases and I/O",
                        _ => "anon faults are a larger share of kbuild's kernel time than of the seed's (see mthp-kernel-build's entry rows), so each step gains more than in a real build",
                    }
                } else {
                    ""
                };
                rows.push(json!({"label": format!("-j8 +{step}"), "metric": format!("{what} change vs baseline"), "unit": "%", "seed": seed[k], "simulated": sim[k], "note": note}));
            }
            xs.push(i);
            ys.push(sim[2]);
        }
        if interrupted {
            break;
        }
    }
    Ok(json!({
        "name": NAME,
        "title": "Per-patch breakdown of the kernel-build gain, -j8 (Ryan Roberts, 2023-04-26, R10): alloc, +reuse, +copy, +zero-alloc",
        "rows": rows,
        "notes": [
            "Steps are cumulative, as Ryan reordered the stack: alloc = path A only (zero-page write, range reuse and large CoW copy off), then + range reuse, + large CoW copy, + large zero-page write. Patch 16 (mmap alignment) is off in every step, as in the thread's breakdown; 'utility' has no separate step (its patches are inert here).",
            "kbuild -j8 on the Altra profile (contpte off); see mthp-kernel-build for the workload and its limits.",
            "In kbuild make writes 2 pages of its heap per job while the child shares it (copy) and 8 after reaping it (reuse), and each job reads 1 in 8 bss pages before writing them (zero-alloc): reuse and copy add almost nothing, zero-alloc a few points; the seed's extra points for reuse come from fork-heavy make/sh processes this workload does not have.",
        ],
        "series": [{"name": "sys change", "x": xs, "y": ys, "xlabel": "step (1 alloc, 2 +reuse, 3 +copy, 4 +zero-alloc)", "ylabel": "sys change vs baseline (%)"}],
        "seed": SEED,
        "profile": profile_json(PROFILE),
        "configs": configs,
        "interrupted": interrupted,
    }))
}
