//! Runs of steps (docs/fault-path-speed.md): a task's consecutive accesses
//! run back to back when nothing else can come first. The result must be
//! the one of the same steps run one by one by the driver, to the bit:
//! every golden config and a set of fault-heavy ones run with runs on and
//! off (`[run] fault_runs`), the checker off and on, and the whole result
//! JSON (counters, times, time series, per-task figures, lock statistics,
//! the checker's counts) must be equal. A deliberately broken run (a
//! mutant that lets it go past another task's next step) must make them
//! differ.

use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The result JSON of the normalised config `cfg` with runs on or off and
/// the checker as asked, less what differs by construction (the config,
/// which records the switch; the host's time).
fn result(cfg: &Value, runs: bool, check: bool) -> Value {
    let mut c = cfg.clone();
    c["run"]["fault_runs"] = runs.into();
    c["run"]["check"] = check.into();
    let out = foliosim::api::run_json(&c.to_string(), &mut |_| true).unwrap_or_else(|e| panic!("{e}"));
    let mut v: Value = serde_json::from_str(&out).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("config");
    o.remove("host_time_s");
    v
}

fn normalised(toml: &str, origin: &str) -> Value {
    serde_json::from_str(&foliosim::api::load_toml(toml, origin).unwrap_or_else(|e| panic!("{origin}: {e}"))).unwrap()
}

/// The first leaf where two results differ.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                match y.get(k) {
                    Some(vb) => {
                        if let Some(d) = first_difference(va, vb, &format!("{path}.{k}")) {
                            return Some(d);
                        }
                    }
                    None => return Some(format!("{path}.{k}: only with runs")),
                }
            }
            y.keys().find(|k| !x.contains_key(*k)).map(|k| format!("{path}.{k}: only without runs"))
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (va, vb))| first_difference(va, vb, &format!("{path}[{i}]")))
        }
        _ if a != b => Some(format!("{path}: {a} with runs, {b} without")),
        _ => None,
    }
}

/// Runs on and off give the same result for `cfg`, with the checker off
/// and on (and the checker finds nothing either way).
fn assert_same(name: &str, cfg: &Value) {
    for check in [false, true] {
        let (on, off) = (result(cfg, true, check), result(cfg, false, check));
        if let Some(d) = first_difference(&on, &off, "") {
            panic!("{name} (checker {}): runs change the result: {d}", if check { "on" } else { "off" });
        }
        if check {
            assert_eq!(on["checker"]["violations"], Value::from(Vec::<Value>::new()), "{name}: the checker found violations");
        }
    }
}

#[test]
fn golden_configs_run_the_same_with_and_without_runs() {
    let dir = repo().join("tests/golden/configs");
    let mut configs: Vec<PathBuf> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "toml")).collect();
    configs.sort();
    assert!(configs.len() >= 20);
    for path in configs {
        let text = std::fs::read_to_string(&path).unwrap();
        assert_same(&path.display().to_string(), &normalised(&text, &path.display().to_string()));
    }
}

/// Fault-heavy configs beyond the golden set: page_fault1..3 with one
/// task, processes and threads, under each fault-locking policy; a memhog
/// whose first pass faults; tasks sharing CPUs (time slices end runs).
fn fault_configs() -> Vec<(String, String)> {
    let mut v = Vec::new();
    for test in ["page_fault1", "page_fault2", "page_fault3"] {
        for (mode, tasks, cpus) in [("processes", 1, 4), ("processes", 4, 4), ("threads", 16, 16), ("threads", 6, 2)] {
            for lock in ["mmap_lock", "per_vma", "spf"] {
                v.push((
                    format!("{test} {mode} {tasks} tasks on {cpus} CPUs, {lock}"),
                    format!(
                        "seed = 3\n[machine]\nprofile = \"generic-x86\"\nnr_cpus = {cpus}\n[workload]\nname = \"{test}\"\nmode = \"{mode}\"\ntasks = {tasks}\nsize_mib = 2\n[run]\nwarmup_s = 0.002\nduration_s = 0.006\nsample_ms = 1\naudit_interval_ms = 1\n[knobs]\nfault_locking = \"{lock}\"\n"
                    ),
                ));
            }
        }
    }
    // page_fault1 with 64 threads, one CPU each: runs of one step mostly
    // (another CPU's step comes first), the lines shared.
    v.push((
        "page_fault1 threads 64 tasks on 64 CPUs".into(),
        "seed = 6\n[machine]\nprofile = \"generic-x86\"\nnr_cpus = 64\n[workload]\nname = \"page_fault1\"\nmode = \"threads\"\ntasks = 64\nsize_mib = 1\n[run]\nwarmup_s = 0.001\nduration_s = 0.003\nsample_ms = 1\naudit_interval_ms = 1\n".into(),
    ));
    // Large folios (16 KiB and 64 KiB enabled: the largest that fits),
    // processes and threads: a run's accesses after a large fault walk
    // or hit without faulting. (The golden set adds kbuild-mthp and
    // sparse-touch-mthp, whose folios are of mixed orders.)
    for (mode, tasks) in [("processes", 4), ("threads", 8)] {
        v.push((
            format!("page_fault1 {mode} {tasks} tasks, 16 KiB and 64 KiB mTHP"),
            format!(
                "seed = 7\n[machine]\nprofile = \"generic-x86\"\nnr_cpus = 4\n[workload]\nname = \"page_fault1\"\nmode = \"{mode}\"\ntasks = {tasks}\nsize_mib = 2\n[run]\nwarmup_s = 0.001\nduration_s = 0.006\nsample_ms = 1\naudit_interval_ms = 1\n[knobs]\n\"kernel/mm/transparent_hugepage/hugepages-16kB/enabled\" = \"always\"\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"\n"
            ),
        ));
    }
    v.push((
        "memhog".into(),
        "seed = 4\n[workload]\nname = \"memhog\"\nsize_mib = 8\npasses = 3\n[run]\nwarmup_s = 0.0\nduration_s = 0.01\nsample_ms = 1\n"
            .into(),
    ));
    v
}

#[test]
fn fault_heavy_configs_run_the_same_with_and_without_runs() {
    for (name, toml) in fault_configs() {
        assert_same(&name, &normalised(&toml, &name));
    }
}

#[test]
fn page_fault1_runs_its_faults_as_runs() {
    // Without this the comparisons above could pass with runs never taken.
    let toml = "[workload]\nname = \"page_fault1\"\ntasks = 1\nsize_mib = 4\n[run]\nwarmup_s = 0.0\nduration_s = 0.01\n";
    let cfg = foliosim::config::from_toml(toml, "pf1").unwrap();
    let o = foliosim::run::simulate(&cfg, &mut |_| true).unwrap();
    let faults = o.kernel.stat().get(foliosim::mm::vmstat::Stat::Pgfault) as u64;
    assert!(o.run_steps > faults / 2, "{} of {faults} faults' steps ran in runs", o.run_steps);
}

/// A deliberately broken run step must change the result: `mutant` on
/// page_fault1 (1 task, and 4 threads on 4 CPUs), whose runs on and off
/// agree without it.
fn broken_run_is_seen(mutant: &str) {
    for (mode, tasks) in [("processes", 1), ("threads", 4)] {
        let toml = format!(
            "seed = 5\n[machine]\nprofile = \"generic-x86\"\nnr_cpus = 4\n[workload]\nname = \"page_fault1\"\nmode = \"{mode}\"\ntasks = {tasks}\nsize_mib = 2\n[run]\nwarmup_s = 0.0\nduration_s = 0.004\n"
        );
        assert_same(&format!("{tasks} {mode}"), &normalised(&toml, mutant));
        let toml = format!("{toml}[knobs]\n\"debug.mutant\" = \"{mutant}\"\n");
        let cfg = normalised(&toml, mutant);
        let (on, off) = (result(&cfg, true, false), result(&cfg, false, false));
        assert!(first_difference(&on, &off, "").is_some(), "{mutant}, {tasks} {mode}: the broken runs gave the step-by-step result");
    }
}

#[test]
fn a_run_past_another_tasks_step_changes_the_result() {
    // The run goes on past the next step of another task: the steps run
    // out of time order (seen only where there is another task).
    broken_run_is_seen("run_past_other_steps");
}

#[test]
fn a_run_that_skips_a_counter_changes_the_result() {
    // The run leaves one counter (the task's ops) behind.
    broken_run_is_seen("run_skips_op_count");
}
