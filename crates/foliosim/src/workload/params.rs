//! Typed access to a workload's parameters, with errors that name the key.

use std::collections::BTreeMap;

/// A workload's parameters as the config gives them.
pub type RawParams = BTreeMap<String, toml::Value>;

/// Whether the workload parameter `key` is a file path: `path` or a name
/// ending in `_path`. Config loading resolves such a parameter relative to
/// the config file that names it and stores it absolute.
pub fn is_path(key: &str) -> bool {
    key == "path" || key.ends_with("_path")
}

pub struct Params {
    raw: RawParams,
    used: Vec<String>,
}

impl Params {
    pub fn new(raw: RawParams) -> Self {
        Params { raw, used: Vec::new() }
    }

    fn take(&mut self, key: &str) -> Option<toml::Value> {
        self.used.push(key.to_string());
        self.raw.get(key).cloned()
    }

    pub fn u64(&mut self, key: &str, default: u64) -> Result<u64, String> {
        match self.take(key) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) if i >= 0 => Ok(i as u64),
            Some(v) => Err(format!("{key}: expected a non-negative integer, got {v}")),
        }
    }

    pub fn f64(&mut self, key: &str, default: f64) -> Result<f64, String> {
        match self.take(key) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) => Ok(i as f64),
            Some(toml::Value::Float(f)) if f.is_finite() => Ok(f),
            Some(v) => Err(format!("{key}: expected a number, got {v}")),
        }
    }

    pub fn bool(&mut self, key: &str, default: bool) -> Result<bool, String> {
        match self.take(key) {
            None => Ok(default),
            Some(toml::Value::Boolean(b)) => Ok(b),
            Some(v) => Err(format!("{key}: expected true or false, got {v}")),
        }
    }

    pub fn choice(&mut self, key: &str, default: &str, allowed: &[&str]) -> Result<String, String> {
        match self.take(key) {
            None => Ok(default.to_string()),
            Some(toml::Value::String(s)) if allowed.contains(&s.as_str()) => Ok(s),
            Some(v) => Err(format!("{key}: expected one of {allowed:?}, got {v}")),
        }
    }

    /// The raw parameters (for workloads that hand some on to another).
    pub fn raw(&self) -> &RawParams {
        &self.raw
    }

    /// A string parameter; None when absent.
    pub fn string(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(format!("{key}: expected a string, got {v}")),
        }
    }

    /// Call after reading every parameter: unknown keys are an error.
    pub fn finish(&self) -> Result<(), String> {
        for k in self.raw.keys() {
            if !self.used.iter().any(|u| u == k) {
                return Err(format!("{k}: unknown parameter for this workload"));
            }
        }
        Ok(())
    }
}
