//! What `foliosim list` shows.

use crate::hw::profile;
use crate::mm::vmstat::{Stat, NR_STATS, STAT_HELP, STAT_NAMES};
use crate::workload;
use serde_json::{json, Value};

pub fn catalog() -> Value {
    let workloads: Vec<Value> =
        workload::registry::registry().iter().map(|w| json!({"name": w.name, "help": w.help, "params": (w.params)()})).collect();
    let profiles: Vec<Value> = profile::BUILTIN
        .iter()
        .filter_map(|(name, _)| crate::hw::profile_load::load_builtin(name).ok().map(|p| (name, p)))
        .map(|(name, p)| json!({"name": name, "description": p.description, "nr_cpus": p.cpu.nr_cpus, "mem_mib": p.total_mem_mib(), "nodes": p.nodes.len(), "toml": profile::builtin(name)}))
        .collect();
    let knobs: Vec<Value> =
        crate::policy::knobs().iter().map(|k| json!({"key": k.key, "default": k.default, "help": k.help, "values": k.values})).collect();
    let counters: Vec<Value> = (0..NR_STATS)
        .map(|i| json!({"name": STAT_NAMES[i], "help": STAT_HELP[i], "gauge": Stat::from_name(STAT_NAMES[i]).unwrap().is_gauge()}))
        .collect();
    let probes: Vec<Value> = crate::kernel::trace::known().into_iter().map(|(n, h)| json!({"name": n, "help": h})).collect();
    let config: Vec<Value> = crate::config::CONFIG_KEYS
        .iter()
        .map(|k| json!({"table": k.table, "key": k.key, "default": k.default, "range": k.range, "help": k.help}))
        .collect();
    let policies = crate::policy::catalog();
    json!({"workloads": workloads, "profiles": profiles, "knobs": knobs, "policies": policies, "counters": counters, "probes": probes, "config": config})
}

/// Each value of profile `p` with its source (api::profile_explain_json).
pub fn explain(p: &profile::Profile, name: &str, dir: &std::path::Path) -> Value {
    let host = profile::builtin(name)
        .map(str::to_string)
        .or_else(|| std::fs::read_to_string(crate::config::resolve_path(dir, name)).ok())
        .and_then(|t| t.parse::<toml::Table>().ok())
        .and_then(|doc| crate::hw::derive::host_of(&doc).ok().flatten());
    let toml::Value::Table(doc) = toml::Value::try_from(p).expect("a profile serialises") else { unreachable!() };
    let values: Vec<Value> = crate::hw::provenance::value_paths(&doc)
        .into_iter()
        .map(|path| {
            let (table, rest) = path.split_once('.').expect("table.key");
            let v = match table.split_once('[') {
                Some((t, i)) => &doc[t][i.trim_end_matches(']').parse::<usize>().expect("index")][rest],
                None => &doc[table][rest],
            };
            let s = p.sources.get(&path);
            json!({
                "path": path,
                "value": serde_json::to_value(v).unwrap_or(Value::Null),
                "kind": s.map_or("no source given", |s| s.kind.name()),
                "what": s.map_or("", |s| s.what.as_str()),
                "note": s.map_or("", |s| s.note.as_str()),
            })
        })
        .collect();
    json!({"name": p.name, "description": p.description, "host": host, "values": values})
}
