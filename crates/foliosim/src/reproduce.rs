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
    Vec::new()
}

pub fn run(name: &str, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<Value, ConfigError> {
    match registry().into_iter().find(|e| e.name == name) {
        Some(e) => (e.run)(progress),
        None => Err(ConfigError { file: "(reproduce)".into(), line: None, key: name.into(), reason: "no such experiment (see `foliosim list`)".into() }),
    }
}
