//! Speed benchmarks of the simulator itself.\npub fn run(which: &str) -> Result<serde_json::Value, String> { Err(format!("unknown bench {which}")) }
