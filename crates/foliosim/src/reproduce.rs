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

pub struct Experiment {
    pub name: &'static str,
    pub title: &'static str,
    pub run: fn(&mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError>,
}

pub fn registry() -> Vec<Experiment> {
    vec![
        Experiment {
            name: "core-pf1-scaling",
            title: "will-it-scale page_fault1, processes, 1/2/4/8 tasks on generic-x86 (core scaling curve)",
            run: core_pf1_scaling,
        },
        Experiment { name: "promo-table", title: "page-cache promotion: the five configurations of spec/002 (full scale)", run: crate::reproduce_promo::promo_table },
        Experiment { name: "promo-convergence", title: "page-cache promotion: time per cycle while promotion runs (full scale)", run: crate::reproduce_promo::promo_convergence },
        Experiment { name: "promo-order", title: "page-cache promotion: list_add_tail vs list_add (full scale)", run: crate::reproduce_promo::promo_order },
        Experiment { name: "promo-uncapped", title: "page-cache promotion: per-task cap removed vs capped (full scale)", run: crate::reproduce_promo::promo_uncapped },
    ]
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
pub(crate) fn profile_json(name: &str) -> Value {
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
