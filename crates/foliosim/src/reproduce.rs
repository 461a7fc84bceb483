//! Registry of reproductions of the seeds' published figures. Each entry
//! runs configs through the simulator and returns rows of seed vs simulated
//! values. The mechanisms register theirs as they land.

use crate::api::{ConfigError, Progress};
use serde_json::Value;

pub struct Experiment {
    pub name: &'static str,
    pub title: &'static str,
    pub run: fn(&mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError>,
}

pub fn registry() -> Vec<Experiment> {
    let mut v = Vec::new();
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
