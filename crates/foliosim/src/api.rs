//! The library's front door, used by the Python bindings and the tests.
//! Every function returns its failure as an `Error`, whose kind says whose
//! it is to fix (types.rs); the binding maps it once to Python's
//! `foliosim.Error` hierarchy.

pub use crate::types::{ConfigError, Error, Progress};

/// Validate and normalise a TOML config; returns the normalised config as JSON
/// (all defaults filled in), which `run_json` accepts.
pub fn load_toml(text: &str, file: &str) -> Result<String, Error> {
    Ok(crate::config::from_toml(text, file)?.normalized.to_string())
}

/// Same, for a config given as JSON (a Python dict serialised).
pub fn load_json(text: &str, origin: &str) -> Result<String, Error> {
    Ok(crate::config::from_json(text, origin)?.normalized.to_string())
}

/// `load_json` for a config read from a file in `dir`: its relative paths
/// start there. (The normalised config holds them absolute.)
pub fn load_json_in(text: &str, origin: &str, dir: &str) -> Result<String, Error> {
    Ok(crate::config::from_json_in(text, origin, std::path::Path::new(dir))?.normalized.to_string())
}

/// A config (JSON, not normalised) with its relative paths made absolute as
/// the file in `dir` means them, nothing else changed: for a config laid
/// under keys from elsewhere (a sweep's `base`).
pub fn resolve_paths_json(text: &str, origin: &str, dir: &str) -> Result<String, Error> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| ConfigError {
        file: origin.into(),
        line: None,
        key: "(syntax)".into(),
        reason: format!("malformed JSON: {e}"),
    })?;
    let mut t: toml::Table = serde_json::from_value(v).map_err(|e| ConfigError {
        file: origin.into(),
        line: None,
        key: "(root)".into(),
        reason: e.to_string(),
    })?;
    crate::config::resolve_paths(&mut t, std::path::Path::new(dir));
    Ok(serde_json::to_string(&t).map_err(|e| ConfigError {
        file: origin.into(),
        line: None,
        key: "(root)".into(),
        reason: e.to_string(),
    })?)
}

/// Run one simulation. `progress` is called periodically; returning false
/// stops the run early (Ctrl-C), and the result says `"interrupted": true`.
/// Returns the result as a JSON object string:
/// {"config": {...}, "interrupted": bool, "sim_time_s": f, "host_time_s": f,
///  "summary": {"ops_per_s": f, "ops_total": i, "tasks": i, ...},
///  "vmstat": {"pgfault": i, ...}, "time_ns": {"user": i, "sys": i, "fault": i, "mmap": i, ...},
///  "per_task": [{"task": i, "cpu": i, "ops": i, "user_ns": i, "sys_ns": i}],
///  "timeseries": {"t_s": [..], "ops": [..], "<vmstat name>": [..], ...},
///  "locks": {"mmap_lock_wait_ns": i, ...},
///  "checker": {"enabled": bool, "audits": i, "violations": [str]}}
pub fn run_json(config_json: &str, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<String, Error> {
    let cfg = crate::config::from_json(config_json, "(config)")?;
    Ok(run_config(&cfg, progress)?.to_string())
}

/// Run `cfg` and return its result object (see `run_json`): a single
/// kernel, or guests on the host kernel when the config has a host
/// (several guests always do, config.rs).
pub fn run_config(cfg: &crate::config::Config, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<serde_json::Value, Error> {
    if cfg.host.is_some() {
        let out = crate::virt::guests::simulate_guests(cfg, progress)?;
        return Ok(crate::virt::guests::result_json(cfg, &out));
    }
    let out = crate::run::simulate(cfg, progress)?;
    Ok(crate::run::result_json(cfg, &out))
}

/// Everything `foliosim list` shows, as JSON:
/// {"workloads": [{"name", "help", "params": [{"name","default","help"}]}],
///  "profiles": [{"name","description","nr_cpus","mem_mib"}],
///  "knobs": [{"key","default","help","values"}],
///  "policies": [{"selector","kind","name","default","help","knobs": [{"key","default","help","values","range"}]}],
///  "counters": [{"name","help","gauge"}],
///  "probes": [{"name","help"}]}
/// (The experiments are files of experiments/, listed by the Python layer.)
pub fn catalog_json() -> String {
    crate::catalog::catalog().to_string()
}

/// The process image a will-it-scale task of validation/ starts its loop
/// with in the model (mm/exec.rs GLIBC_2_36_X86_64): every mapped piece,
/// its start, length, kind and resident pages, as JSON.
pub fn process_image_json() -> String {
    crate::mm::exec::GLIBC_2_36_X86_64.to_json().to_string()
}

/// How each value of a machine profile was obtained (`foliosim list
/// profiles NAME --explain`, docs/profiles.md): the profile by built-in
/// name or path (relative to `dir`), as JSON
/// {"name", "description", "host" (a derived profile's, else null),
///  "values": [{"path", "value", "kind", "what", "note"}]}, in the
/// profile's order; kind is measured, public, derived, assumed or "no
/// source given".
pub fn profile_explain_json(name: &str, dir: &str) -> Result<String, ConfigError> {
    let p = crate::config::load_profile(name, std::path::Path::new(dir)).map_err(|(file, line, key, reason)| ConfigError {
        file: if file.is_empty() { "(profile)".into() } else { file },
        line,
        key,
        reason,
    })?;
    Ok(crate::catalog::explain(&p, name, std::path::Path::new(dir)).to_string())
}

/// Speed benchmarks of the simulator itself. `which` is one of
/// "anon_faults", "tlb_hits", "pf1_threads64", "big_machine"; returns JSON
/// with the figure(s) measured, e.g. {"anon_faults_per_host_s": f}.
pub fn bench_json(which: &str) -> Result<String, Error> {
    crate::bench::run(which).map(|v| v.to_string()).map_err(Error::Workload)
}

/// The instruction count of a benchmark in `bench::COUNTED` (e.g.
/// "anon_fault_instructions"), counted under callgrind on the command
/// `child` (which runs `bench_events`); JSON, e.g.
/// {"instructions_per_anon_fault": f, ...}.
pub fn bench_instructions_json(which: &str, child: &[String]) -> Result<String, Error> {
    crate::bench::instructions(which, child).map(|v| v.to_string()).map_err(Error::Workload)
}

/// One run of a counted benchmark's workload ("anon_faults", "tlb_hits")
/// for `sim_s` simulated seconds; the events it counted.
pub fn bench_events(workload: &str, sim_s: f64) -> Result<u64, Error> {
    crate::bench::events(workload, sim_s).map_err(Error::Workload)
}

/// Convert a valgrind lackey+syscall log (file or FIFO) into a foliosim
/// trace at `out_path`; statistics as JSON.
pub fn trace_from_valgrind_log(log_path: &str, out_path: &str, meta_json: &str) -> Result<String, Error> {
    crate::workload::trace_record::convert_files_json(log_path, out_path, meta_json).map_err(Error::Workload)
}

/// Convert the valgrind logs of a recorded process tree (`DIR/log.PID.N`)
/// into a trace; statistics as JSON.
pub fn trace_from_valgrind_logs(dir: &str, out_path: &str, meta_json: &str, root: u64) -> Result<String, Error> {
    crate::workload::trace_procs::from_valgrind_logs_json(dir, out_path, meta_json, root).map_err(Error::Workload)
}

/// Convert perf's pipe stream read from `input_path` into a trace at
/// `out_path` (the tracepoints' formats from `tracefs`; the recorder's
/// status file read when the stream ends); statistics as JSON.
pub fn trace_from_perf(input_path: &str, out_path: &str, meta_json: &str, status_path: &str, tracefs: &str) -> Result<String, Error> {
    crate::workload::trace_perf::convert_files_json(input_path, out_path, meta_json, status_path, tracefs).map_err(Error::Workload)
}

/// A listener on a free port of 127.0.0.1 for the logs valgrind streams
/// with --log-socket.
pub fn valgrind_listener() -> Result<std::net::TcpListener, Error> {
    crate::workload::trace_procs::bind_valgrind_socket().map_err(Error::Workload)
}

/// Convert the logs valgrind streams to `listener`, each as it arrives,
/// into a trace at `out_path`, until `stop` is set and every connection
/// is read; statistics as JSON.
pub fn trace_from_valgrind_socket(
    listener: std::net::TcpListener,
    stop: &std::sync::atomic::AtomicBool,
    out_path: &str,
    meta_json: &str,
    root: u64,
) -> Result<String, Error> {
    crate::workload::trace_procs::from_valgrind_socket_json(listener, stop, out_path, meta_json, root).map_err(Error::Workload)
}

/// The Meta JSON at the head of a trace ("" if none).
pub fn trace_meta(path: &str) -> Result<String, Error> {
    crate::workload::trace_format::meta_of(std::path::Path::new(path)).map_err(Error::Workload)
}

/// Read and check a whole trace: {"records", "accesses", "files",
/// "regions", "meta"} as JSON.
pub fn trace_info(path: &str) -> Result<String, Error> {
    crate::workload::trace_format::summary_json(std::path::Path::new(path)).map_err(Error::Workload)
}
