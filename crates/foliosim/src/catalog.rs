//! What `foliosim list` shows.

use crate::hw::profile::{self, Profile};
use crate::mm::vmstat::{Stat, NR_STATS, STAT_HELP, STAT_NAMES};
use crate::workload;
use serde_json::{json, Value};

pub fn catalog() -> Value {
    let workloads: Vec<Value> =
        workload::registry::registry().iter().map(|w| json!({"name": w.name, "help": w.help, "params": (w.params)()})).collect();
    let profiles: Vec<Value> = profile::BUILTIN
        .iter()
        .filter_map(|(name, text)| toml::from_str::<Profile>(text).ok().map(|p| (name, p)))
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
