// DEV ONLY, NOT COMPILED. A stand-in for crates/foliosim/src/api.rs used while
// the core was being written, to build and test the Python front end.
// To use it: cp crates/foliosim-py/dev/fake_api.rs crates/foliosim/src/api.rs
// (and `git checkout crates/foliosim/src/api.rs` afterwards; never commit it).
// It shows the expectations tests/python checks the real core against:
// error keys like `workload.tasks` / `knobs.vm.min_free_kbytes`, lines for TOML
// input, the result JSON shape, progress every ~100 ms, interrupt on false.
//! The library's front door, used by the Python bindings and the tests.
//! (INTERFACE — bodies are being written; signatures are stable.)

use serde::Serialize;

/// A config error that names where it happened. Display gives the one-line
/// message the CLI prints: `FILE:LINE: KEY: REASON` (LINE omitted if unknown).
#[derive(Clone, Debug, Serialize)]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}: {}", self.file, l, self.key, self.reason),
            None => write!(f, "{}: {}: {}", self.file, self.key, self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Progress of a run, reported about every 100 ms of host time.
#[derive(Clone, Debug, Serialize)]
pub struct Progress {
    /// Simulated seconds done and in total.
    pub sim_s: f64,
    pub sim_total_s: f64,
}


// ======================= FAKE (dev only, never commit) =======================
use serde_json::{json, Map, Value};

const PROFILES: &[(&str, u64, u64)] = &[
    ("generic-x86", 64, 131072),
    ("ampere-altra-160", 160, 262144),
    ("cxl-1tb", 64, 1048576),
    ("e5-2630v3-guest-32g", 16, 32768),
    ("luf-llama-tiered", 64, 262144),
];
const WORKLOADS: &[&str] = &["page_fault1", "page_fault2", "page_fault3", "mmap1", "mmap2", "read2"];
const KNOBS: &[(&str, &str)] = &[
    ("vm.min_free_kbytes", "int"),
    ("vm.overcommit_memory", "int"),
    ("kernel/mm/transparent_hugepage/enabled", "str"),
    ("kernel/mm/transparent_hugepage/defrag", "str"),
];

fn find_line(text: &str, key: &str) -> Option<usize> {
    let leaf = key.rsplit('.').next().unwrap_or(key);
    let leaf_knob = key.strip_prefix("knobs.").unwrap_or(key);
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_start();
        for k in [leaf_knob, leaf] {
            if t.starts_with(&format!("{k} ")) || t.starts_with(&format!("{k}="))
                || t.starts_with(&format!("\"{k}\"")) || t.starts_with(&format!("[{k}]")) {
                return Some(i + 1);
            }
        }
    }
    None
}

fn err(file: &str, text: Option<&str>, key: &str, reason: String) -> ConfigError {
    ConfigError { file: file.into(), line: text.and_then(|t| find_line(t, key)), key: key.into(), reason }
}

fn table<'a>(v: &'a Value, k: &str, file: &str, text: Option<&str>) -> Result<Map<String, Value>, ConfigError> {
    match v.get(k) {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(o) => Err(err(file, text, k, format!("expected a table, got {o}"))),
    }
}

fn validate(v: &Value, file: &str, text: Option<&str>) -> Result<String, ConfigError> {
    let top = v.as_object().ok_or_else(|| err(file, text, "(config)", "expected a table".into()))?;
    for k in top.keys() {
        if !["seed", "machine", "workload", "run", "knobs"].contains(&k.as_str()) {
            return Err(err(file, text, k, "unknown key".into()));
        }
    }
    let seed = match top.get("seed") { None => 1, Some(s) => s.as_u64().ok_or_else(|| err(file, text, "seed", format!("expected a non-negative integer, got {s}")))? };
    let m = table(v, "machine", file, text)?;
    for k in m.keys() { if k != "profile" { return Err(err(file, text, &format!("machine.{k}"), "unknown key".into())); } }
    let profile = match m.get("profile") { None => "generic-x86".to_string(), Some(Value::String(s)) => s.clone(), Some(o) => return Err(err(file, text, "machine.profile", format!("expected a string, got {o}"))) };
    let (_, cpus, _mem) = *PROFILES.iter().find(|p| p.0 == profile).ok_or_else(|| err(file, text, "machine.profile", format!("unknown profile {profile:?}")))?;
    let w = table(v, "workload", file, text)?;
    let name = match w.get("name") { None => return Err(err(file, text, "workload.name", "missing".into())), Some(Value::String(s)) => s.clone(), Some(o) => return Err(err(file, text, "workload.name", format!("expected a string, got {o}"))) };
    if !WORKLOADS.contains(&name.as_str()) { return Err(err(file, text, "workload.name", format!("unknown workload {name:?}"))); }
    let mode = match w.get("mode") { None => "processes".to_string(), Some(Value::String(s)) if s == "processes" || s == "threads" => s.clone(), Some(o) => return Err(err(file, text, "workload.mode", format!("expected one of [\"processes\", \"threads\"], got {o}"))) };
    let tasks = match w.get("tasks") { None => 1, Some(t) => t.as_u64().filter(|&t| t > 0).ok_or_else(|| err(file, text, "workload.tasks", format!("expected a positive integer, got {t}")))? };
    if tasks > cpus { return Err(err(file, text, "workload.tasks", format!("{tasks} tasks but profile {profile} has {cpus} CPUs"))); }
    let size = match w.get("size_mib") { None => 128, Some(t) => t.as_u64().ok_or_else(|| err(file, text, "workload.size_mib", format!("expected a non-negative integer, got {t}")))? };
    let fs = match w.get("fs") { None => "tmpfs".to_string(), Some(Value::String(s)) if s == "tmpfs" || s == "disk" => s.clone(), Some(o) => return Err(err(file, text, "workload.fs", format!("expected one of [\"tmpfs\", \"disk\"], got {o}"))) };
    for k in w.keys() { if !["name", "mode", "tasks", "size_mib", "fs"].contains(&k.as_str()) { return Err(err(file, text, &format!("workload.{k}"), "unknown parameter for this workload".into())); } }
    let r = table(v, "run", file, text)?;
    let num = |k: &str, d: f64| -> Result<f64, ConfigError> { match r.get(k) { None => Ok(d), Some(x) => x.as_f64().filter(|f| *f >= 0.0).ok_or_else(|| err(file, text, &format!("run.{k}"), format!("expected a non-negative number, got {x}"))) } };
    let warmup = num("warmup_s", 1.0)?; let duration = num("duration_s", 5.0)?;
    let check = match r.get("check") { None => false, Some(Value::Bool(b)) => *b, Some(o) => return Err(err(file, text, "run.check", format!("expected true or false, got {o}"))) };
    for k in r.keys() { if !["warmup_s", "duration_s", "check"].contains(&k.as_str()) { return Err(err(file, text, &format!("run.{k}"), "unknown key".into())); } }
    let kn = table(v, "knobs", file, text)?;
    let mut knobs = Map::new();
    knobs.insert("vm.min_free_kbytes".into(), json!(65536)); knobs.insert("vm.overcommit_memory".into(), json!(0));
    knobs.insert("kernel/mm/transparent_hugepage/enabled".into(), json!("always")); knobs.insert("kernel/mm/transparent_hugepage/defrag".into(), json!("madvise"));
    for (k, x) in kn.iter() {
        let key = format!("knobs.{k}");
        let ty = KNOBS.iter().find(|p| p.0 == k).ok_or_else(|| err(file, text, &key, "unknown knob".into()))?.1;
        let ok = match ty { "int" => x.is_i64() || x.is_u64(), _ => x.is_string() };
        if !ok { return Err(err(file, text, &key, format!("expected {}, got {x}", if ty == "int" { "an integer" } else { "a string" }))); }
        knobs.insert(k.clone(), x.clone());
    }
    Ok(json!({"seed": seed, "machine": {"profile": profile},
        "workload": {"name": name, "mode": mode, "tasks": tasks, "size_mib": size, "fs": fs},
        "run": {"warmup_s": warmup, "duration_s": duration, "check": check}, "knobs": knobs}).to_string())
}

/// Validate and normalise a TOML config; returns the normalised config as JSON
/// (all defaults filled in), which `run_json` accepts.
pub fn load_toml(text: &str, file: &str) -> Result<String, ConfigError> {
    let t: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        ConfigError { file: file.into(), line, key: "(syntax)".into(), reason: e.message().replace('\n', " ").trim().to_string() }
    })?;
    let v = serde_json::to_value(&t).map_err(|e| err(file, None, "(syntax)", e.to_string()))?;
    validate(&v, file, Some(text))
}

/// Same, for a config given as JSON (a Python dict serialised).
pub fn load_json(text: &str, origin: &str) -> Result<String, ConfigError> {
    let v: Value = serde_json::from_str(text).map_err(|e| ConfigError { file: origin.into(), line: Some(e.line()), key: "(syntax)".into(), reason: e.to_string() })?;
    validate(&v, origin, None)
}

pub fn run_json(config_json: &str, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<String, ConfigError> {
    let start = std::time::Instant::now();
    let norm = load_json(config_json, "<run>")?;
    let cfg: Value = serde_json::from_str(&norm).unwrap();
    let total = cfg["run"]["warmup_s"].as_f64().unwrap() + cfg["run"]["duration_s"].as_f64().unwrap();
    let seed = cfg["seed"].as_u64().unwrap();
    let tasks = cfg["workload"]["tasks"].as_u64().unwrap();
    if std::env::var("FOLIOSIM_FAKE_PANIC").is_ok() { panic!("fake panic"); }
    let host_per_sim = 2.5;
    let mut sim = 0.0f64; let mut interrupted = false;
    while sim < total {
        std::thread::sleep(std::time::Duration::from_millis(20));
        sim = (sim + 0.02 / host_per_sim).min(total);
        if start.elapsed().as_millis() % 100 < 25 || sim >= total {
            if !progress(&Progress { sim_s: sim, sim_total_s: total }) { interrupted = true; break; }
        }
    }
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(tasks);
    let mut rnd = || { x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (x >> 33) % 1000 };
    let ops_total = (sim * 1e6) as u64 * tasks + rnd();
    let pgfault = ops_total * 512;
    let mut ts = Map::new();
    let mut t_s = vec![]; let mut t = 1.0; while t <= sim + 1e-9 { t_s.push(t); t += 1.0; }
    if t_s.last().map_or(true, |l| (sim - l).abs() > 1e-9) && sim > 0.0 { t_s.push(sim); }
    let n = t_s.len();
    ts.insert("t_s".into(), json!(t_s)); ts.insert("ops".into(), json!(vec![ops_total / n.max(1) as u64; n]));
    ts.insert("pgfault".into(), json!(vec![pgfault / n.max(1) as u64; n]));
    let per_task: Vec<Value> = (0..tasks).map(|i| json!({"task": i, "cpu": i, "ops": ops_total / tasks, "user_ns": 1000 + rnd(), "sys_ns": 5000 + rnd()})).collect();
    Ok(json!({"config": cfg, "interrupted": interrupted, "sim_time_s": sim, "host_time_s": start.elapsed().as_secs_f64(),
        "summary": {"ops_per_s": ops_total as f64 / sim.max(1e-9), "ops_total": ops_total, "tasks": tasks},
        "vmstat": {"pgfault": pgfault, "pgmajfault": 0, "pgalloc_normal": pgfault, "pgfree": pgfault - 10, "thp_fault_alloc": 0, "nr_anon_pages": 1024 + rnd()},
        "time_ns": {"user": 100000 + rnd(), "sys": 900000 + rnd(), "fault": 700000 + rnd(), "mmap": 1000 + rnd()},
        "per_task": per_task, "timeseries": ts,
        "locks": {"mmap_lock_wait_ns": rnd()},
        "checker": {"enabled": cfg["run"]["check"], "audits": if cfg["run"]["check"].as_bool().unwrap() { 10 } else { 0 }, "violations": []}}).to_string())
}

pub fn catalog_json() -> String {
    json!({"workloads": WORKLOADS.iter().map(|w| json!({"name": w, "help": format!("will-it-scale {w}"), "params": [{"name": "size_mib", "default": "128", "help": "MiB per task"}]})).collect::<Vec<_>>(),
        "profiles": PROFILES.iter().map(|p| json!({"name": p.0, "description": "fake", "nr_cpus": p.1, "mem_mib": p.2})).collect::<Vec<_>>(),
        "knobs": KNOBS.iter().map(|k| json!({"key": k.0, "default": if k.1 == "int" { "0" } else { "always" }, "help": "a knob", "values": null})).collect::<Vec<_>>(),
        "counters": [{"name": "pgfault", "help": "page faults", "gauge": false}, {"name": "nr_anon_pages", "help": "anon pages", "gauge": true}],
        "experiments": []}).to_string()
}

pub fn reproduce_json(name: &str, _progress: &mut dyn FnMut(&Progress) -> bool) -> Result<String, ConfigError> {
    Err(ConfigError { file: "<reproduce>".into(), line: None, key: name.into(), reason: "unknown experiment".into() })
}

pub fn experiments() -> Vec<(String, String)> {
    if std::env::var("FOLIOSIM_FAKE_EXPERIMENTS").is_ok() { return vec![("demo".into(), "a demo".into())]; }
    Vec::new()
}

pub fn bench_json(which: &str) -> Result<String, String> {
    std::thread::sleep(std::time::Duration::from_millis(200));
    match which {
        "anon_faults" => Ok(json!({"anon_faults_per_host_s": 6.1e6}).to_string()),
        "tlb_hits" => Ok(json!({"tlb_hit_accesses_per_host_s": 4.0e7}).to_string()),
        "pf1_threads64" => Ok(json!({"pf1_threads64_host_s": 12.5}).to_string()),
        "big_machine" => { let v: Vec<u8> = vec![1u8; 200 << 20]; Ok(json!({"big_machine_host_s": 0.3, "touched": v.iter().map(|&b| b as u64).sum::<u64>()}).to_string()) }
        o => Err(format!("unknown benchmark {o:?}")),
    }
}
