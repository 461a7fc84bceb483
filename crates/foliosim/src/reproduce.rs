//! Registry of reproductions of the seeds' published figures. Each entry
//! runs configs through the simulator and returns rows of seed vs simulated
//! values. The mechanisms register theirs as they land.
//!
//! Contract (what `foliosim reproduce` and its report read):
//! `{"name", "title", "rows": [{"label","metric","unit","seed","simulated"}],
//!   "notes": [..]}` plus, optionally,
//! `"series": [{"name","x":[..],"y":[..],"xlabel","ylabel"}]` (plotted as
//! curves; without it the report draws seed vs simulated bars per row),
//! `"seed"` (the RNG seed), `"profile": {"name","toml"}` (the machine profile
//! used) and `"configs": [{"label","config"}]` (every normalised config run),
//! so that a reader can rerun each point with `foliosim run`.
//! `"seed": null` in a row means that the seed published no figure for it.

use crate::api::{ConfigError, Progress};
use crate::config::{self, Config};
use crate::hw::profile;
use crate::run::{self, Outcome};
use serde_json::{json, Value};

mod mthp;

pub struct Experiment {
    pub name: &'static str,
    pub title: &'static str,
    pub run: fn(&mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError>,
}

pub fn registry() -> Vec<Experiment> {
    let mut v = vec![Experiment {
        name: "core-pf1-scaling",
        title: "will-it-scale page_fault1, processes, 1/2/4/8 tasks on generic-x86 (core scaling curve)",
        run: core_pf1_scaling,
    },
    Experiment {
        name: "mthp-will-it-scale",
        title: "will-it-scale one task, process mode: baseline vs order-4 large anon folios (spec/000 §4.5)",
        run: mthp::mthp_will_it_scale,
    },
    Experiment {
        name: "mthp-memory",
        title: "Memory cost of large anon folios: the sparse-touch pathology (spec/000 P-1)",
        run: mthp::mthp_memory,
    },
    Experiment {
        name: "mthp-orders",
        title: "will-it-scale page_fault1 and malloc1 over the max anon folio order 0..9 (spec/000 §4.7)",
        run: mthp::mthp_orders,
    },
    Experiment {
        name: "mthp-tlb-reach",
        title: "TLB reach of large anon folios: dTLB misses with 4 KiB, HPA and contpte entries",
        run: mthp::mthp_tlb_reach,
    },
    Experiment {
        name: "mthp-kernel-build",
        title: "Kernel-build-like workload at -j8 and -j160: real/user/sys, baseline vs order-4 (spec/000 §4.2, §4.4)",
        run: mthp::mthp_kernel_build,
    },
    Experiment {
        name: "mthp-patches",
        title: "Per-patch breakdown of the kernel-build gain, -j8 (spec/000 §4.8)",
        run: mthp::mthp_patches,
    }
    ];
    // spec/003: free page reporting (virt/experiments.rs).
    v.push(Experiment { name: "fpr-overhead", title: "free page reporting v17: page_fault1/page_fault2 overhead per configuration (seed table)", run: crate::virt::experiments::overhead });
    v.push(Experiment { name: "fpr-host-memory", title: "free page reporting: host memory over time, memhog then page fault test, reporting on/off", run: crate::virt::experiments::host_memory });
    v.push(Experiment { name: "fpr-overcommit", title: "free page reporting: N guests on an overcommitted host, host swap with/without reporting (new study)", run: crate::virt::experiments::overcommit });
    v
}

pub fn run(name: &str, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    match registry().into_iter().find(|e| e.name == name) {
        Some(e) => (e.run)(progress),
        None => Err(ConfigError { file: "(reproduce)".into(), line: None, key: name.into(), reason: "no such experiment (see `foliosim list`)".into() }),
    }
}

// ---- helpers for experiments ------------------------------------------------

/// A run of point `i` of `n` (all of equal simulated length): progress is
/// reported over the whole experiment. Returns the config, the outcome, and
/// whether the run was stopped early.
fn run_point(
    exp: &str,
    toml: &str,
    i: usize,
    n: usize,
    progress: &mut dyn FnMut(&Progress) -> bool,
) -> Result<(Config, Outcome), ConfigError> {
    let cfg = config::from_toml(toml, &format!("({exp})"))?;
    let total = cfg.run.warmup_s + cfg.run.duration_s;
    let mut inner = |p: &Progress| progress(&Progress { sim_s: i as f64 * total + p.sim_s, sim_total_s: n as f64 * total });
    let out = run::simulate(&cfg, &mut inner).map_err(|e| ConfigError { file: format!("({exp})"), line: None, key: "run".into(), reason: e })?;
    Ok((cfg, out))
}

/// The machine profile as shipped (`{"name","toml"}`), for the report.
fn profile_json(name: &str) -> Value {
    json!({"name": name, "toml": profile::builtin(name)})
}

// ---- core-pf1-scaling ---------------------------------------------------------

/// will-it-scale page_fault1 in process mode, 1, 2, 4 and 8 tasks on the
/// generic x86 server: each process faults its own 128 MiB region in and
/// unmaps it, so the processes share only the zone lock, the LRU lock and
/// memory bandwidth. The seeds publish no figure for this machine (`seed`
/// is null); it is the simulator core's own scaling curve.
fn core_pf1_scaling(progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    const NAME: &str = "core-pf1-scaling";
    const PROFILE: &str = "generic-x86";
    const SEED: u64 = 1;
    const TASKS: [u32; 4] = [1, 2, 4, 8];
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    let mut interrupted = false;
    let mut one_task = 0.0;
    for (i, &tasks) in TASKS.iter().enumerate() {
        let toml = format!(
            "seed = {SEED}\n[machine]\nprofile = \"{PROFILE}\"\n[workload]\nname = \"page_fault1\"\nmode = \"processes\"\ntasks = {tasks}\nsize_mib = 16\n[run]\nwarmup_s = 0.01\nduration_s = 0.05\n"
        );
        let (cfg, out) = run_point(NAME, &toml, i, TASKS.len(), progress)?;
        let res = run::result_json(&cfg, &out);
        let ops = res["summary"]["ops_per_s"].as_f64().unwrap_or(0.0);
        if tasks == 1 {
            one_task = ops;
        }
        let label = format!("{tasks} task{}", if tasks == 1 { "" } else { "s" });
        rows.push(json!({"label": label, "metric": "page_fault1 ops/s", "unit": "ops/s", "seed": null, "simulated": ops}));
        rows.push(json!({"label": label, "metric": "scaling vs 1 task", "unit": "x", "seed": null,
                         "simulated": if one_task > 0.0 { ops / one_task } else { 0.0 }}));
        configs.push(json!({"label": label, "config": cfg.normalized}));
        xs.push(tasks);
        ys.push(ops);
        if out.interrupted {
            interrupted = true;
            break;
        }
    }
    Ok(json!({
        "name": NAME,
        "title": "will-it-scale page_fault1, processes, 1/2/4/8 tasks on generic-x86",
        "rows": rows,
        "notes": [
            "No seed publishes page_fault1 on this machine: the seed column is empty and the curve is the model's own.",
            "Each process faults its own 16 MiB region and unmaps it; processes share the zone lock, the LRU lock and memory bandwidth.",
        ],
        "series": [
            {"name": "page_fault1 (processes)", "x": xs, "y": ys, "xlabel": "tasks", "ylabel": "ops/s"},
        ],
        "seed": SEED,
        "profile": profile_json(PROFILE),
        "configs": configs,
        "interrupted": interrupted,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_are_unique() {
        let mut names: Vec<_> = registry().iter().map(|e| e.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn unknown_experiment_is_a_config_error() {
        let e = run("no-such", &mut |_| true).unwrap_err();
        assert_eq!(e.key, "no-such");
    }
}
