//! Simulation configs: TOML (or JSON from Python) to a validated `Config`.
//! Every error names the file, the line where the key stands (when it can
//! be found) and the key.

use crate::hw::profile::{self, Profile};
use crate::kernel::knobs::{self, KnobValue, Knobs};
use crate::types::ConfigError;
use crate::workload::{self, params::Params, RawParams};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Serialize)]
pub struct RunCfg {
    pub warmup_s: f64,
    pub duration_s: f64,
    pub check: bool,
    /// Simulated milliseconds between full audits when the checker is on.
    pub audit_interval_ms: f64,
    /// Simulated milliseconds between time-series samples.
    pub sample_ms: f64,
    /// Tracepoints counted (kernel/trace.rs), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<String>,
    /// Tracepoints counted and recorded event by event.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probes_record: Vec<String>,
    /// A task's consecutive accesses run as one step when nothing else
    /// can come first (docs/fault-path-speed.md); false runs them step by
    /// step, with the same result (a debug switch: the test that compares
    /// the two sets it).
    #[serde(skip_serializing_if = "is_true")]
    pub fault_runs: bool,
}

fn is_true(b: &bool) -> bool {
    *b
}

#[derive(Clone, Debug, Serialize)]
pub struct Config {
    pub seed: u64,
    pub profile_name: String,
    #[serde(skip)]
    pub profile: Profile,
    pub workload: String,
    #[serde(skip)]
    pub workload_params: RawParams,
    pub run: RunCfg,
    #[serde(skip)]
    pub knob_values: BTreeMap<String, KnobValue>,
    #[serde(skip)]
    pub knobs: Knobs,
    /// `machine.guests`: the machine is this many identical VM guests on
    /// one host (1: a single kernel). Guest g runs with seed `seed + g`.
    pub guests: u32,
    /// `machine.guest_stagger_ms`: guest g boots g times this late (VMs
    /// started one after another).
    pub guest_stagger_ms: f64,
    /// `[[guest]]`: each guest's own workload (guest g runs entry g mod
    /// their number); empty: every guest runs `workload`.
    #[serde(skip)]
    pub guest_workloads: Vec<(String, RawParams)>,
    /// `[host]`: the guests run on a host kernel (virt/kvm.rs) booted
    /// from this (the default one when the guest needs a host and the
    /// config has no `[host]` table); None: a single kernel, no host.
    #[serde(skip)]
    pub host: Option<HostCfg>,
    /// The normalised config, as JSON (defaults filled in).
    #[serde(skip)]
    pub normalized: serde_json::Value,
}

impl Config {
    /// Which entry of `guest_workloads` guest `g` runs (g mod their
    /// number; 0 without them): guests of one entry are clones of one
    /// template, with one disk image.
    pub fn guest_entry(&self, g: usize) -> usize {
        g % self.guest_workloads.len().max(1)
    }

    /// Guest `g`'s workload, name and parameters: its `[[guest]]` entry
    /// (`guest_entry`), or `[workload]` when the config has none.
    pub fn guest_workload(&self, g: usize) -> (&str, &RawParams) {
        match self.guest_workloads.get(self.guest_entry(g)) {
            None => (&self.workload, &self.workload_params),
            Some((name, raw)) => (name, raw),
        }
    }
}

/// `[host]` as parsed: the host machine and its kernel's knobs.
#[derive(Clone, Debug)]
pub struct HostCfg {
    pub profile_name: String,
    pub profile: Profile,
    pub knob_values: BTreeMap<String, KnobValue>,
    pub knobs: Knobs,
}

/// A default in `CONFIG_KEYS`.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(untagged)]
pub enum KeyValue {
    Num(f64),
    Int(i64),
    Bool(bool),
    Str(&'static str),
}

/// A key of a config's top level, `[machine]` or `[run]`. The parser takes
/// the defaults and ranges from `CONFIG_KEYS` and `foliosim list config`
/// prints it, so what is documented is what is admitted.
#[derive(Debug, Serialize)]
pub struct ConfigKey {
    pub table: &'static str,
    pub key: &'static str,
    /// None: the machine profile's value.
    pub default: Option<KeyValue>,
    /// Admitted values of a number, inclusive.
    pub range: Option<(f64, f64)>,
    pub help: &'static str,
}

use KeyValue::{Bool, Int, Num, Str};

pub const CONFIG_KEYS: &[ConfigKey] = &[
    ConfigKey { table: "", key: "seed", default: Some(Int(1)), range: Some((0.0, i64::MAX as f64)), help: "the run's seed: the same config and seed give the same numbers; another seed moves what is random on a real machine (ASLR's mmap base, page_alloc.shuffle, some workloads' choices: docs/tutorial.md, What the seed varies; guest g of machine.guests runs with seed + g)" },
    ConfigKey { table: "machine", key: "profile", default: Some(Str("generic-x86")), range: None, help: "a built-in machine profile (`foliosim list profiles`) or the path of a profile file, such as one `foliosim calibrate` wrote (relative to the config file)" },
    ConfigKey { table: "machine", key: "nr_cpus", default: None, range: Some((1.0, 4096.0)), help: "logical CPUs, in place of the profile's (sockets become 1 if they no longer divide them, and SMT off if its threads no longer divide a socket's CPUs)" },
    ConfigKey { table: "machine", key: "node_mem_mib", default: None, range: Some((64.0, (64u64 << 20) as f64)), help: "MiB of each memory node, an array with one size per node of the profile (in all at most 16 TiB less 1 MiB)" },
    ConfigKey { table: "machine", key: "tlb_contpte", default: None, range: None, help: "true: the arm64 contiguous-PTE hint is honoured (16 x 4 KiB in one TLB entry)" },
    ConfigKey { table: "machine", key: "tlb_coalesce_order", default: None, range: Some((0.0, 2.0)), help: "HPA-style TLB coalescing of aligned groups of 2^order PTEs: 0 (none) or 2" },
    ConfigKey { table: "machine", key: "costs", default: None, range: None, help: "numbers of the profile replaced, a table: `{ cacheline_cross_socket_ns = 270.0 }` ([cost] keys bare; `host.`, `tlb.`, `cpu.` or `nodes.` (every node) before others)" },
    ConfigKey { table: "machine", key: "guests", default: Some(Int(1)), range: Some((1.0, MAX_GUESTS as f64)), help: "the machine is this many identical VM guests on one host (1: a single kernel)" },
    ConfigKey { table: "machine", key: "guest_stagger_ms", default: Some(Num(0.0)), range: Some((0.0, 3.6e6)), help: "guest g boots g times this many milliseconds late (needs guests >= 2)" },
    ConfigKey { table: "host", key: "profile", default: None, range: None, help: "with a [host] table the guests run on a host kernel (docs/mechanisms/cloud-host.md) booted from this profile (default: the guests' machine.profile); its kernel's knobs are [host.knobs]" },
    ConfigKey { table: "host", key: "nr_cpus", default: None, range: Some((1.0, 4096.0)), help: "the host's logical CPUs, in place of its profile's" },
    ConfigKey { table: "host", key: "node_mem_mib", default: None, range: Some((64.0, (64u64 << 20) as f64)), help: "MiB of each host memory node (default: the profile's, the first node grown to hold every guest's RAM if it does not)" },
    ConfigKey { table: "host", key: "costs", default: None, range: None, help: "numbers of the host profile replaced, as machine.costs" },
    ConfigKey { table: "run", key: "warmup_s", default: Some(Num(1.0)), range: Some((0.0, 3600.0)), help: "simulated seconds before counting starts (at least one full iteration of the workload)" },
    ConfigKey { table: "run", key: "duration_s", default: Some(Num(5.0)), range: Some((1e-6, 36000.0)), help: "simulated seconds counted after the warm-up (the run ends then, or when every task has exited)" },
    ConfigKey { table: "run", key: "check", default: Some(Bool(false)), range: None, help: "the invariant checker (slower; `foliosim run --check`)" },
    ConfigKey { table: "run", key: "audit_interval_ms", default: Some(Num(50.0)), range: Some((0.001, 1e9)), help: "simulated milliseconds between the checker's full audits" },
    ConfigKey { table: "run", key: "sample_ms", default: Some(Num(1000.0)), range: Some((1.0, 1e9)), help: "simulated milliseconds between two rows of the time series" },
    ConfigKey { table: "run", key: "probes", default: None, range: None, help: "tracepoints to count (`foliosim list probes`): the result's probes.NAME.count, per CPU and per task" },
    ConfigKey { table: "run", key: "probes_record", default: None, range: None, help: "tracepoints whose events are also recorded, each with its time, CPU, task and value" },
    ConfigKey { table: "run", key: "fault_runs", default: Some(Bool(true)), range: None, help: "a task's consecutive accesses (a run of faults) run as one step when nothing else can come first; false: step by step, with the same result (a debug switch)" },
];

/// The entry of `CONFIG_KEYS` for `table.key` (every key the parser reads has one).
fn spec(table: &str, key: &str) -> &'static ConfigKey {
    CONFIG_KEYS.iter().find(|k| k.table == table && k.key == key).unwrap_or_else(|| panic!("{table}.{key} is missing from CONFIG_KEYS"))
}

/// Integer range of `table.key`, from `CONFIG_KEYS`.
fn int_range(table: &str, key: &str) -> std::ops::RangeInclusive<i64> {
    let (lo, hi) = spec(table, key).range.unwrap_or((0.0, i64::MAX as f64));
    lo as i64..=hi as i64
}

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    /// Where the config's relative paths start: the directory of the file
    /// that names them (the current directory for a string or a dict).
    dir: &'a Path,
}

/// `path` as the config at `dir` means it: relative paths start at `dir`.
/// The result is absolute (so the normalised config reruns from anywhere),
/// with symbolic links and `..` resolved when the file exists.
pub fn resolve_path(dir: &Path, path: &str) -> PathBuf {
    let joined = dir.join(path);
    std::fs::canonicalize(&joined).or_else(|_| std::path::absolute(&joined)).unwrap_or(joined)
}

/// Whether `machine.profile = name` names a file rather than a built-in profile.
fn profile_is_path(name: &str) -> bool {
    profile::builtin(name).is_none()
}

/// Makes every relative path of a config table absolute, as the file in
/// `dir` means it: `machine.profile` (unless a built-in name) and each
/// workload parameter that is a path (`workload::params::is_path`). Used for
/// a config merged into another that lives elsewhere (a sweep's `base`).
pub fn resolve_paths(root: &mut toml::Table, dir: &Path) {
    if let Some(toml::Value::Table(m)) = root.get_mut("machine") {
        if let Some(toml::Value::String(p)) = m.get_mut("profile") {
            if profile_is_path(p) {
                *p = resolve_path(dir, p).display().to_string();
            }
        }
    }
    if let Some(toml::Value::Table(w)) = root.get_mut("workload") {
        for (k, v) in w.iter_mut() {
            if let (true, toml::Value::String(p)) = (workload::params::is_path(k), v) {
                *p = resolve_path(dir, p).display().to_string();
            }
        }
    }
}

impl Ctx<'_> {
    fn err(&self, table: &str, key: &str, reason: impl Into<String>) -> ConfigError {
        let full = if table.is_empty() {
            key.to_string()
        } else if key.is_empty() {
            table.to_string()
        } else {
            format!("{table}.{key}")
        };
        ConfigError { file: self.file.to_string(), line: find_line(self.text, table, key), key: full, reason: reason.into() }
    }
}

/// Line (1-based) where `key` of `[table]` is written, if it can be found.
pub fn find_line(text: &str, table: &str, key: &str) -> Option<usize> {
    let mut in_table = table.is_empty();
    let mut header_line = None;
    let bare = key.trim_matches('"');
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.starts_with('[') {
            let name = l.trim_start_matches('[').split(']').next().unwrap_or("").trim();
            in_table = name == table;
            if in_table {
                header_line = Some(i + 1);
            }
            continue;
        }
        if !in_table || key.is_empty() {
            continue;
        }
        let k = l.split('=').next().unwrap_or("").trim();
        // (`vm.min_free_kbytes = 1` stands where the key `vm` is asked for.)
        if k == bare || k.trim_matches('"') == bare || k.trim_matches('\'') == bare || k.starts_with(&format!("{bare}.")) {
            return Some(i + 1);
        }
    }
    if key.is_empty() || header_line.is_some() {
        header_line
    } else {
        None
    }
}

/// Line (1-based) of `key` in the `index`-th `[[table]]` of `text` (or in
/// `[table]` when `index` is None), if it can be found.
pub fn find_line_at(text: &str, table: &str, index: Option<usize>, key: &str) -> Option<usize> {
    let Some(want) = index else { return find_line(text, table, key) };
    let mut seen = 0usize;
    let mut here = false;
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("[[") {
            here = rest.split("]]").next().unwrap_or("").trim() == table && {
                seen += 1;
                seen - 1 == want
            };
            continue;
        }
        if l.starts_with('[') {
            here = false;
            continue;
        }
        let k = l.split('=').next().unwrap_or("").trim().trim_matches('"');
        if here && l.contains('=') && k == key {
            return Some(i + 1);
        }
    }
    None
}

/// JSON to TOML; a null (which TOML cannot hold) is an error naming where
/// it stands, as a dotted key (`workload.tasks`, `machine.node_mem_mib[1]`).
fn json_to_toml(v: &serde_json::Value, at: &str) -> Result<toml::Value, String> {
    let key = |k: &str| if at.is_empty() { k.to_string() } else { format!("{at}.{k}") };
    Ok(match v {
        serde_json::Value::Null => return Err(at.to_string()),
        serde_json::Value::Bool(b) => toml::Value::Boolean(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml::Value::Integer(i),
            (None, Some(f)) => toml::Value::Float(f),
            (None, None) => return Err(at.to_string()),
        },
        serde_json::Value::String(s) => toml::Value::String(s.clone()),
        serde_json::Value::Array(a) => {
            toml::Value::Array(a.iter().enumerate().map(|(i, x)| json_to_toml(x, &format!("{at}[{i}]"))).collect::<Result<_, _>>()?)
        }
        serde_json::Value::Object(o) => {
            toml::Value::Table(o.iter().map(|(k, x)| Ok((k.clone(), json_to_toml(x, &key(k))?))).collect::<Result<_, String>>()?)
        }
    })
}

fn toml_to_json(v: &toml::Value) -> serde_json::Value {
    match v {
        toml::Value::String(s) => serde_json::Value::String(s.clone()),
        toml::Value::Integer(i) => serde_json::Value::from(*i),
        toml::Value::Float(f) => serde_json::Value::from(*f),
        toml::Value::Boolean(b) => serde_json::Value::Bool(*b),
        toml::Value::Datetime(d) => serde_json::Value::String(d.to_string()),
        toml::Value::Array(a) => serde_json::Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => serde_json::Value::Object(t.iter().map(|(k, v)| (k.clone(), toml_to_json(v))).collect()),
    }
}

/// Parse a TOML config. `file` names it in errors; relative paths in it
/// resolve next to it.
pub fn from_toml(text: &str, file: &str) -> Result<Config, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let msg = e.message().lines().next().unwrap_or("malformed TOML").to_string();
        ConfigError { file: file.to_string(), line, key: "(syntax)".into(), reason: msg }
    })?;
    let dir = if file.starts_with('<') { Path::new("") } else { Path::new(file).parent().unwrap_or(Path::new("")) };
    from_table(table, &Ctx { file, text, dir })
}

/// Parse a config given as JSON (e.g. a Python dict); relative paths in it
/// resolve against the current directory.
pub fn from_json(text: &str, origin: &str) -> Result<Config, ConfigError> {
    from_json_in(text, origin, Path::new(""))
}

/// `from_json` whose relative paths resolve against `dir` (the directory of
/// the file the config came from).
pub fn from_json_in(text: &str, origin: &str, dir: &Path) -> Result<Config, ConfigError> {
    let err = |key: &str, reason: String| ConfigError { file: origin.to_string(), line: None, key: key.into(), reason };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| err("(syntax)", format!("malformed JSON: {e}")))?;
    let t = match json_to_toml(&v, "") {
        Ok(toml::Value::Table(t)) => t,
        Ok(_) => return Err(err("(root)", "a config must be a table/dict".into())),
        Err(at) => {
            let at = if at.is_empty() { "(root)" } else { at.as_str() };
            return Err(err(at, "null/None is not a config value (leave the key out for its default)".into()));
        }
    };
    from_table(t, &Ctx { file: origin, text: "", dir })
}

fn take_table(ctx: &Ctx, root: &mut toml::Table, name: &str) -> Result<toml::Table, ConfigError> {
    match root.remove(name) {
        None => Ok(toml::Table::new()),
        Some(toml::Value::Table(t)) => Ok(t),
        Some(v) => Err(ctx.err("", name, format!("expected a table, got {}", v.type_str()))),
    }
}

/// A number key of `CONFIG_KEYS`: its default when absent, its range checked.
fn get_f64(ctx: &Ctx, t: &mut toml::Table, table: &str, key: &str) -> Result<f64, ConfigError> {
    let k = spec(table, key);
    let default = match k.default {
        Some(Num(x)) => x,
        _ => panic!("{table}.{key}: CONFIG_KEYS gives no number default"),
    };
    let (lo, hi) = k.range.unwrap_or((f64::MIN, f64::MAX));
    let v = match t.remove(key) {
        None => default,
        Some(toml::Value::Float(f)) => f,
        Some(toml::Value::Integer(i)) => i as f64,
        Some(v) => return Err(ctx.err(table, key, format!("expected a number, got {}", v.type_str()))),
    };
    if !(v.is_finite() && v >= lo && v <= hi) {
        return Err(ctx.err(table, key, format!("{v} is out of range {lo}..={hi}")));
    }
    Ok(v)
}

fn get_bool(ctx: &Ctx, t: &mut toml::Table, table: &str, key: &str) -> Result<bool, ConfigError> {
    let Some(Bool(default)) = spec(table, key).default else { panic!("{table}.{key}: CONFIG_KEYS gives no boolean default") };
    match t.remove(key) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(b),
        Some(v) => Err(ctx.err(table, key, format!("expected true or false, got {}", v.type_str()))),
    }
}

/// A list of tracepoint names (`[run] probes`), each checked.
fn get_probes(ctx: &Ctx, t: &mut toml::Table, key: &str) -> Result<Vec<String>, ConfigError> {
    let arr = match t.remove(key) {
        None => return Ok(Vec::new()),
        Some(toml::Value::Array(a)) => a,
        Some(v) => return Err(ctx.err("run", key, format!("expected a list of tracepoint names, got {}", v.type_str()))),
    };
    let mut out = Vec::new();
    for v in arr {
        let toml::Value::String(name) = v else {
            return Err(ctx.err("run", key, format!("expected tracepoint names (strings), got {}", v.type_str())));
        };
        if crate::kernel::trace::Tp::from_name(&name).is_none() {
            let known: Vec<String> = crate::kernel::trace::known().into_iter().map(|(n, _)| n).collect();
            return Err(ctx.err("run", key, format!("unknown tracepoint \"{name}\" (known: {})", known.join(", "))));
        }
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

fn no_leftovers(ctx: &Ctx, t: &toml::Table, table: &str) -> Result<(), ConfigError> {
    match t.keys().next() {
        Some(k) => {
            let known: Vec<&str> = CONFIG_KEYS.iter().filter(|c| c.table == table).map(|c| c.key).collect();
            Err(ctx.err(table, k, format!("unknown key (known: {}; `foliosim list config`)", known.join(", "))))
        }
        None => Ok(()),
    }
}

/// Load a profile by builtin name or path (relative to `base`); errors name
/// the profile file. A derived profile (a `[derive]` table) is completed by
/// the rule of hw/derive.rs from its host, loaded the same way (a path
/// relative to the derived profile's file).
pub fn load_profile(name: &str, base: &Path) -> Result<Profile, (String, Option<usize>, String, String)> {
    load_profile_from(name, base, 0)
}

fn load_profile_from(name: &str, base: &Path, depth: u32) -> Result<Profile, (String, Option<usize>, String, String)> {
    let (text, file, dir) = match profile::builtin(name) {
        Some(t) => (t.to_string(), format!("<builtin profile {name}>"), base.to_path_buf()),
        None => {
            let p = resolve_path(base, name);
            let read = |p: &Path| -> Result<String, String> {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut crate::types::open_input(p)?, &mut text).map_err(|e| format!("{}: {e}", p.display()))?;
                Ok(text)
            };
            match read(&p) {
                Ok(t) => {
                    let dir = p.parent().map(Path::to_path_buf).unwrap_or_else(|| base.to_path_buf());
                    (t, p.display().to_string(), dir)
                }
                Err(e) => {
                    return Err((
                        String::new(),
                        None,
                        "machine.profile".into(),
                        format!("\"{name}\" is neither a builtin profile nor a readable file ({e})"),
                    ))
                }
            }
        }
    };
    let mut load_host = |host: &str| {
        if depth >= 4 {
            return Err("derived profiles nest more than 4 deep (a cycle?)".to_string());
        }
        load_profile_from(host, &dir, depth + 1).map_err(|(f, _, k, r)| {
            format!("the host profile {host}: {}{k}: {r}", if f.is_empty() { String::new() } else { format!("{f}: ") })
        })
    };
    crate::hw::profile_load::parse(&text, &mut load_host).map_err(|e| {
        let line = e.line.or_else(|| line_of_path(&text, &e.key));
        (file.clone(), line, e.key, e.reason)
    })
}

/// Line of a dotted key path such as `cost.trap_ns` or `nodes[1].mem_mib`.
fn line_of_path(text: &str, path: &str) -> Option<usize> {
    let (table, key) = path.rsplit_once('.').unwrap_or(("", path));
    match table.strip_suffix(']').and_then(|t| t.split_once('[')) {
        Some((name, i)) => find_line_at(text, name, i.parse().ok(), key),
        None => find_line(text, table, key),
    }
}

/// The knob an unquoted dotted key meant: `knobs.vm.min_free_kbytes = 1`
/// reads as the table `vm` holding `min_free_kbytes`.
fn dotted_knob(head: &str, t: &toml::Table) -> Option<String> {
    let mut names = Vec::new();
    fn walk(prefix: &str, t: &toml::Table, out: &mut Vec<String>) {
        for (k, v) in t {
            let name = format!("{prefix}.{k}");
            match v {
                toml::Value::Table(sub) => walk(&name, sub, out),
                _ => out.push(name),
            }
        }
    }
    walk(head, t, &mut names);
    names.into_iter().find(|n| crate::policy::find(n).is_some())
}

/// Most VM guests `machine.guests` may ask for.
pub const MAX_GUESTS: u32 = 64;

/// The config a parsed TOML table says, every table checked in turn
/// (`seed`, `[machine]`, `[run]`, `[knobs]`, `[workload]`), then the whole
/// (the workload fits the machine, the guests fit the host, no unknown
/// table) and its normalised form.
fn from_table(mut root: toml::Table, ctx: &Ctx) -> Result<Config, ConfigError> {
    let seed = seed_from(&mut root, ctx)?;
    let machine = machine_from(&mut root, ctx)?;
    let run = run_from(&mut root, ctx)?;
    let (kn, knob_values) = knobs_from(&mut root, ctx, machine.prof.total_mem_mib() << 10)?;
    let guest_workloads = guest_mix_from(&mut root, ctx, &machine, kn.swap_size_mib)?;
    // With [[guest]] tables, [workload] may go: guest 0's stands for it.
    let (name, raw) = match guest_workloads.first() {
        Some(w) if !root.contains_key("workload") => w.clone(),
        _ => workload_from(&mut root, ctx, &machine.prof, kn.swap_size_mib)?,
    };
    let (host, host_json) = host_from(&mut root, ctx, &machine, &kn)?;
    let Machine { profile_name, prof, tlb_overrides, guests, guest_stagger_ms, costs } = machine;
    if let Some(k) = root.keys().next() {
        return Err(ctx.err("", k, "unknown key (expected seed, machine, host, guest, workload, run, knobs)"));
    }
    if let Some(h) = &host {
        let need = guests as u64 * (prof.total_mem_mib() + 2);
        if kn.host_prealloc && h.profile.total_mem_mib() < need {
            return Err(ctx.err(
                "host",
                "node_mem_mib",
                format!(
                    "{guests} preallocated guests of {} MiB need {need} MiB of host memory but the host has {}",
                    prof.total_mem_mib(),
                    h.profile.total_mem_mib()
                ),
            ));
        }
    }
    // Normalised form: everything explicit.
    let knobs_json = knobs_json(&knob_values);
    let wl_json = workload_json(&name, &raw);
    let mut machine_json = serde_json::Map::new();
    let profile_name =
        if profile_is_path(&profile_name) { resolve_path(ctx.dir, &profile_name).display().to_string() } else { profile_name };
    machine_json.insert("profile".into(), profile_name.clone().into());
    machine_json.insert("nr_cpus".into(), prof.cpu.nr_cpus.into());
    machine_json.insert("node_mem_mib".into(), prof.nodes.iter().map(|n| n.mem_mib).collect::<Vec<_>>().into());
    for (k, v) in tlb_overrides {
        machine_json.insert(k.into(), v);
    }
    if let Some(t) = costs {
        machine_json.insert("costs".into(), toml_to_json(&toml::Value::Table(t)));
    }
    if guests > 1 {
        machine_json.insert("guests".into(), guests.into());
        machine_json.insert("guest_stagger_ms".into(), guest_stagger_ms.into());
    }
    let mut normalized = serde_json::json!({
        "seed": seed,
        "machine": machine_json,
        "workload": wl_json,
        "run": serde_json::to_value(&run).unwrap(),
        "knobs": knobs_json,
    });
    if let Some(h) = host_json {
        normalized["host"] = h;
    }
    if !guest_workloads.is_empty() {
        normalized["guest"] = guest_workloads.iter().map(|(n, r)| serde_json::json!({ "workload": workload_json(n, r) })).collect();
    }
    Ok(Config {
        seed,
        profile_name,
        profile: prof,
        workload: name,
        workload_params: raw,
        run,
        knob_values,
        knobs: kn,
        guests,
        guest_stagger_ms,
        guest_workloads,
        host,
        normalized,
    })
}

/// `[[guest]]`: the guests' own workloads, one table each with a
/// `workload` table, taken in turn (guest g runs entry g mod their
/// number), so that a few entries make a mix over many guests; `[workload]`
/// is then optional. Empty: every guest runs `[workload]`.
fn guest_mix_from(root: &mut toml::Table, ctx: &Ctx, machine: &Machine, swap_mib: u64) -> Result<Vec<(String, RawParams)>, ConfigError> {
    let Some(v) = root.remove("guest") else { return Ok(Vec::new()) };
    let toml::Value::Array(entries) = v else {
        return Err(ctx.err("", "guest", format!("expected an array of tables ([[guest]]), got {}", v.type_str())));
    };
    if machine.guests < 2 {
        return Err(ctx.err("", "guest", "gives several guests their own workloads: needs machine.guests >= 2"));
    }
    if entries.is_empty() || entries.len() > machine.guests as usize {
        return Err(ctx.err(
            "",
            "guest",
            format!("{} entries for {} guests (expected 1 to machine.guests)", entries.len(), machine.guests),
        ));
    }
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let table = format!("guest[{i}]");
        let toml::Value::Table(mut t) = e else {
            return Err(ctx.err("", &table, format!("expected a table, got {}", e.type_str())));
        };
        let w = match t.remove("workload") {
            Some(toml::Value::Table(w)) => w,
            None => return Err(ctx.err(&table, "workload", "missing: the workload this guest runs")),
            Some(v) => return Err(ctx.err(&table, "workload", format!("expected a table, got {}", v.type_str()))),
        };
        if let Some(k) = t.keys().next() {
            return Err(ctx.err(&table, k, "unknown key (expected workload)"));
        }
        out.push(workload_table(w, ctx, &format!("{table}.workload"), &machine.prof, swap_mib)?);
    }
    Ok(out)
}

/// A workload's normalised form: its name and parameters.
fn workload_json(name: &str, raw: &RawParams) -> serde_json::Map<String, serde_json::Value> {
    let mut j = serde_json::Map::new();
    j.insert("name".into(), name.into());
    for (k, v) in raw {
        j.insert(k.clone(), toml_to_json(v));
    }
    j
}

/// Every knob of the policies selected, as set or at its default.
fn knobs_json(knob_values: &BTreeMap<String, KnobValue>) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for spec in crate::policy::knobs().iter().filter(|s| crate::policy::selected(s, |sel| knob_values.get(sel).cloned())) {
        let v = match knob_values.get(spec.key) {
            Some(KnobValue::Int(i)) => serde_json::Value::from(*i),
            Some(KnobValue::Bool(b)) => serde_json::Value::from(*b),
            Some(KnobValue::Str(s)) => serde_json::Value::from(s.clone()),
            None => serde_json::to_value(&spec.default).unwrap(),
        };
        out.insert(spec.key.to_string(), v);
    }
    out
}

/// `[host]` (and `[host.knobs]`): the host kernel under the guests, and
/// its normalised form. Its memory defaults to enough for every guest's
/// RAM (2 MiB more each, for the alignment of the VMM's mapping) and
/// 64 MiB of the host's own.
fn host_from(
    root: &mut toml::Table,
    ctx: &Ctx,
    guest: &Machine,
    guest_knobs: &Knobs,
) -> Result<(Option<HostCfg>, Option<serde_json::Value>), ConfigError> {
    let mut t = match root.remove("host") {
        Some(toml::Value::Table(t)) => t,
        Some(v) => return Err(ctx.err("", "host", format!("expected a table, got {}", v.type_str()))),
        None if wants_host(guest.guests, guest_knobs) => toml::Table::new(),
        None => return Ok((None, None)),
    };
    let kt = match t.remove("knobs") {
        None => toml::Table::new(),
        Some(toml::Value::Table(k)) => k,
        Some(v) => return Err(ctx.err("host", "knobs", format!("expected a table of host kernel knobs, got {}", v.type_str()))),
    };
    let sized = t.contains_key("node_mem_mib");
    let mut m = machine_table(t, ctx, "host", Some(&guest.profile_name))?;
    let need_mib = guest.guests as u64 * (guest.prof.total_mem_mib() + 2) + 64;
    if !sized && m.prof.total_mem_mib() < need_mib {
        let others: u64 = m.prof.nodes.iter().skip(1).map(|n| n.mem_mib).sum();
        m.prof.nodes[0].mem_mib = need_mib.saturating_sub(others).max(m.prof.nodes[0].mem_mib);
    }
    let (knobs, knob_values) = knobs_table(kt, ctx, "host.knobs", m.prof.total_mem_mib() << 10)?;
    let mut j = serde_json::Map::new();
    let pname = if profile_is_path(&m.profile_name) {
        resolve_path(ctx.dir, &m.profile_name).display().to_string()
    } else {
        m.profile_name.clone()
    };
    j.insert("profile".into(), pname.into());
    j.insert("nr_cpus".into(), m.prof.cpu.nr_cpus.into());
    j.insert("node_mem_mib".into(), m.prof.nodes.iter().map(|n| n.mem_mib).collect::<Vec<_>>().into());
    for (k, v) in m.tlb_overrides {
        j.insert(k.into(), v);
    }
    if let Some(c) = m.costs {
        j.insert("costs".into(), toml_to_json(&toml::Value::Table(c)));
    }
    j.insert("knobs".into(), knobs_json(&knob_values).into());
    Ok((Some(HostCfg { profile_name: m.profile_name, profile: m.prof, knob_values, knobs }), Some(j.into())))
}

/// The top-level `seed`.
fn seed_from(root: &mut toml::Table, ctx: &Ctx) -> Result<u64, ConfigError> {
    Ok(match root.remove("seed") {
        None => match spec("", "seed").default {
            Some(Int(i)) => i as u64,
            _ => 1,
        },
        Some(toml::Value::Integer(i)) if int_range("", "seed").contains(&i) => i as u64,
        Some(v) => return Err(ctx.err("", "seed", format!("expected a non-negative integer, got {v}"))),
    })
}

/// `[machine]` as parsed: the profile with what the table changes in it.
struct Machine {
    profile_name: String,
    prof: Profile,
    /// The TLB keys set (the normalised config lists them).
    tlb_overrides: Vec<(&'static str, serde_json::Value)>,
    guests: u32,
    guest_stagger_ms: f64,
    /// `machine.costs` as given.
    costs: Option<toml::Table>,
}

/// `[machine]`: the profile (built in or a file), and the numbers the
/// table replaces in it.
fn machine_from(root: &mut toml::Table, ctx: &Ctx) -> Result<Machine, ConfigError> {
    let m = take_table(ctx, root, "machine")?;
    machine_table(m, ctx, "machine", None)
}

/// A machine table: `[machine]`, or `[host]` (`tn`), whose profile
/// defaults to `default_profile` (the guests'). Only `[machine]` has guests.
fn machine_table(mut m: toml::Table, ctx: &Ctx, tn: &str, default_profile: Option<&str>) -> Result<Machine, ConfigError> {
    let profile_name = match m.remove("profile") {
        None => match (default_profile, spec("machine", "profile").default) {
            (Some(p), _) | (None, Some(Str(p))) => p.to_string(),
            _ => unreachable!("machine.profile has a default"),
        },
        Some(toml::Value::String(s)) => s,
        Some(v) => return Err(ctx.err(tn, "profile", format!("expected a profile name or path, got {}", v.type_str()))),
    };
    let mut prof = load_profile(&profile_name, ctx.dir).map_err(|(f, line, key, reason)| {
        if f.is_empty() {
            ctx.err(tn, "profile", reason)
        } else {
            ConfigError { file: f, line, key, reason }
        }
    })?;
    if let Some(v) = m.remove("nr_cpus") {
        let r = int_range("machine", "nr_cpus");
        match v {
            toml::Value::Integer(n) if r.contains(&n) => prof.cpu.nr_cpus = n as u32,
            v => return Err(ctx.err(tn, "nr_cpus", format!("expected an integer {}..={}, got {v}", r.start(), r.end()))),
        }
        if prof.cpu.nr_cpus % prof.cpu.sockets != 0 {
            prof.cpu.sockets = 1;
        }
        if !(prof.cpu.nr_cpus / prof.cpu.sockets).is_multiple_of(prof.cpu.threads_per_core) {
            prof.cpu.threads_per_core = 1;
        }
    }
    if let Some(v) = m.remove("node_mem_mib") {
        let arr = match v {
            toml::Value::Array(a) => a,
            v => return Err(ctx.err(tn, "node_mem_mib", format!("expected an array of MiB per node, got {}", v.type_str()))),
        };
        if arr.len() != prof.nodes.len() {
            return Err(ctx.err(
                tn,
                "node_mem_mib",
                format!("the profile has {} nodes but {} sizes were given", prof.nodes.len(), arr.len()),
            ));
        }
        let r = int_range("machine", "node_mem_mib");
        for (i, x) in arr.iter().enumerate() {
            match x {
                toml::Value::Integer(n) if r.contains(n) => prof.nodes[i].mem_mib = *n as u64,
                v => return Err(ctx.err(tn, "node_mem_mib", format!("element {i}: expected MiB {}..={}, got {v}", r.start(), r.end()))),
            }
        }
    }
    // TLB coalescing overrides (the RFC v2 kernels had no contpte).
    let mut tlb_overrides: Vec<(&'static str, serde_json::Value)> = Vec::new();
    if let Some(v) = m.remove("tlb_contpte") {
        match v {
            toml::Value::Boolean(b) => {
                prof.tlb.contpte = b;
                tlb_overrides.push(("tlb_contpte", b.into()));
            }
            v => return Err(ctx.err(tn, "tlb_contpte", format!("expected a boolean, got {}", v.type_str()))),
        }
    }
    if let Some(v) = m.remove("tlb_coalesce_order") {
        match v {
            toml::Value::Integer(n) if int_range("machine", "tlb_coalesce_order").contains(&n) && n != 1 => {
                prof.tlb.coalesce_order = n as u32;
                tlb_overrides.push(("tlb_coalesce_order", n.into()));
            }
            v => return Err(ctx.err(tn, "tlb_coalesce_order", format!("expected 0 (none) or 2 (HPA), got {v}"))),
        }
    }
    let r = int_range("machine", "guests");
    let guests = match if tn == "machine" { m.remove("guests") } else { None } {
        None => *r.start() as u32,
        Some(toml::Value::Integer(n)) if r.contains(&n) => n as u32,
        Some(v) => return Err(ctx.err(tn, "guests", format!("expected an integer 1..={} (VM guests sharing one host), got {v}", r.end()))),
    };
    let guest_stagger_ms = if tn == "machine" { get_f64(ctx, &mut m, "machine", "guest_stagger_ms")? } else { 0.0 };
    if guest_stagger_ms > 0.0 && guests < 2 {
        return Err(ctx.err(tn, "guest_stagger_ms", "staggers the boot of several guests: needs machine.guests >= 2"));
    }
    let costs = match m.remove("costs") {
        None => None,
        Some(toml::Value::Table(t)) => {
            prof = prof.with_numbers(&t).map_err(|(k, reason)| ConfigError {
                file: ctx.file.to_string(),
                line: find_line(ctx.text, tn, "costs").or_else(|| find_line(ctx.text, &format!("{tn}.costs"), &k)),
                key: format!("{tn}.costs.{k}"),
                reason,
            })?;
            Some(t)
        }
        Some(v) => return Err(ctx.err(tn, "costs", format!("expected a table of profile keys and numbers, got {}", v.type_str()))),
    };
    no_leftovers(ctx, &m, tn)?;
    prof.validate().map_err(|(k, r)| ctx.err(tn, "", format!("{k}: {r}")))?;
    Ok(Machine { profile_name, prof, tlb_overrides, guests, guest_stagger_ms, costs })
}

/// `[run]`.
fn run_from(root: &mut toml::Table, ctx: &Ctx) -> Result<RunCfg, ConfigError> {
    let mut r = take_table(ctx, root, "run")?;
    let run = RunCfg {
        warmup_s: get_f64(ctx, &mut r, "run", "warmup_s")?,
        duration_s: get_f64(ctx, &mut r, "run", "duration_s")?,
        check: get_bool(ctx, &mut r, "run", "check")?,
        audit_interval_ms: get_f64(ctx, &mut r, "run", "audit_interval_ms")?,
        sample_ms: get_f64(ctx, &mut r, "run", "sample_ms")?,
        probes: get_probes(ctx, &mut r, "probes")?,
        probes_record: get_probes(ctx, &mut r, "probes_record")?,
        fault_runs: get_bool(ctx, &mut r, "run", "fault_runs")?,
    };
    no_leftovers(ctx, &r, "run")?;
    Ok(run)
}

/// `[knobs]`: the knob values set (checked against their specs and the
/// policies they belong to) and the knobs they make.
fn knobs_from(root: &mut toml::Table, ctx: &Ctx, mem_kib: u64) -> Result<(Knobs, BTreeMap<String, KnobValue>), ConfigError> {
    let kt = take_table(ctx, root, "knobs")?;
    knobs_table(kt, ctx, "knobs", mem_kib)
}

/// What replaces a knob of the bitmap host that the host kernel
/// (virt/kvm.rs) replaced.
fn removed_knob(k: &str) -> Option<&'static str> {
    match k {
        "host.mem_mib" => Some("the host's memory is [host] node_mem_mib"),
        "host.thp" => Some("the host kernel's THP is its own knob, [host.knobs] \"kernel/mm/transparent_hugepage/enabled\""),
        _ => None,
    }
}

/// Whether a guest needs a host under it: several guests share one, page
/// reporting reports to it, and the `host.*` knobs ask for its backing or
/// its discard policy. Without a `[host]` table such a guest gets the
/// default host kernel.
fn wants_host(guests: u32, kn: &Knobs) -> bool {
    let discard_set = crate::policy::find("host.discard").is_some_and(|s| s.default_value() != KnobValue::Str(kn.host_discard.clone()));
    guests > 1 || kn.page_reporting || kn.host_prealloc || discard_set
}

/// A knobs table, `[knobs]` or `[host.knobs]` (`tn`), of a kernel with
/// `mem_kib` of memory.
fn knobs_table(kt: toml::Table, ctx: &Ctx, tn: &str, mem_kib: u64) -> Result<(Knobs, BTreeMap<String, KnobValue>), ConfigError> {
    let mut knob_values = BTreeMap::new();
    let mut kn = Knobs::default();
    for (k, v) in kt {
        if let toml::Value::Table(sub) = &v {
            if let Some(full) = dotted_knob(&k, sub) {
                return Err(ctx.err(
                    tn,
                    &k,
                    format!(
                        "the knob \"{full}\" has dots in its name: quote it, {tn}.\"{full}\" = VALUE (with --set: '{tn}.\"{full}\"=VALUE')"
                    ),
                ));
            }
        }
        if let Some(instead) = removed_knob(&k) {
            return Err(ctx.err(tn, &k, format!("went with the bitmap host: {instead}")));
        }
        let spec = crate::policy::find(&k).ok_or_else(|| ctx.err(tn, &k, "unknown knob (see `foliosim list`)"))?;
        let val = knobs::validate(spec, &v).map_err(|reason| ctx.err(tn, &k, reason))?;
        kn.set(spec, &val);
        knob_values.insert(k, val);
    }
    // Setting a per-size mTHP knob means the 6.8+ kernel those knobs belong
    // to, unless the model switch says otherwise.
    if !knob_values.contains_key("anon_folio.mode") && knobs::MTHP_SIZE_KEYS[..7].iter().any(|k| knob_values.contains_key(*k)) {
        let v = KnobValue::Str("upstream".into());
        kn.set(crate::policy::find("anon_folio.mode").expect("anon_folio.mode is a knob"), &v);
        knob_values.insert("anon_folio.mode".into(), v);
    }
    kn.check(&|k| knob_values.contains_key(k), mem_kib).map_err(|(k, reason)| ctx.err(tn, k, reason))?;
    // A policy's own knob needs that policy selected.
    for k in knob_values.keys() {
        let spec = crate::policy::find(k).expect("validated above");
        if !crate::policy::selected(spec, |sel| knob_values.get(sel).cloned()) {
            let (sel, name) = spec.owner.expect("only a policy's knob can be unselected");
            return Err(ctx.err(tn, k, format!("belongs to the policy \"{name}\": it needs {sel} = \"{name}\"")));
        }
    }
    Ok((kn, knob_values))
}

/// `[workload]`: its name and parameters (paths made absolute), checked by
/// building it once; it must fit in `prof`'s memory and `swap_mib` of swap.
fn workload_from(root: &mut toml::Table, ctx: &Ctx, prof: &Profile, swap_mib: u64) -> Result<(String, RawParams), ConfigError> {
    let w = take_table(ctx, root, "workload")?;
    workload_table(w, ctx, "workload", prof, swap_mib)
}

/// A workload table (`[workload]`, or a `[[guest]]`'s `workload`, named
/// `table` in errors): its name and parameters, checked by building it.
fn workload_table(mut w: toml::Table, ctx: &Ctx, table: &str, prof: &Profile, swap_mib: u64) -> Result<(String, RawParams), ConfigError> {
    let name = match w.remove("name") {
        Some(toml::Value::String(s)) => s,
        None => return Err(ctx.err(table, "name", "missing: which workload to run (see `foliosim list`)")),
        Some(v) => return Err(ctx.err(table, "name", format!("expected a string, got {}", v.type_str()))),
    };
    let info = workload::registry::find(&name)
        .ok_or_else(|| ctx.err(table, "name", format!("unknown workload \"{name}\" (see `foliosim list`)")))?;
    let mut raw: RawParams = w.into_iter().collect();
    for (k, v) in raw.iter_mut() {
        if let (true, toml::Value::String(p)) = (workload::params::is_path(k), v) {
            *p = resolve_path(ctx.dir, p).display().to_string();
        }
    }
    let wl = (info.build)(&mut Params::new(raw.clone())).map_err(|msg| {
        let (k, reason) = msg.split_once(": ").unwrap_or(("", msg.as_str()));
        ctx.err(table, k, reason.to_string())
    })?;
    if let Some(need) = wl.peak_bytes() {
        // Anonymous memory beyond RAM may live on the swap device.
        let have = (prof.total_mem_mib() + swap_mib) << 20;
        if need > have {
            return Err(ctx.err(
                "workload",
                "",
                format!(
                    "needs about {:.1} GiB but the machine has {:.1} GiB{}",
                    need as f64 / (1u64 << 30) as f64,
                    have as f64 / (1u64 << 30) as f64,
                    if swap_mib > 0 { " with its swap" } else { "" }
                ),
            ));
        }
    }
    Ok((name, raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_file_line_and_key() {
        let text = "seed = 1\n[workload]\nname = \"page_fault1\"\n[knobs]\n\"vm.bogus\" = 3\n";
        let e = from_toml(text, "c.toml").unwrap_err();
        assert_eq!(e.line, Some(5));
        assert_eq!(e.key, "knobs.vm.bogus");
        assert!(e.to_string().starts_with("c.toml:5: knobs.vm.bogus:"), "{e}");
        let e = from_toml("[run]\nduration_s = \"x\"\n", "d.toml").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(2), "run.duration_s"));
        let e = from_toml("[run\n", "e.toml").unwrap_err();
        assert_eq!(e.line, Some(1));
        let e = from_toml("[workload]\nname = \"nope\"\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "workload.name");
    }

    /// `machine.costs` replaces profile numbers: the value lands in the
    /// profile (every node for `nodes.`) and in the normalised config; a
    /// key the profile lacks, a bad value or a non-table is an error naming
    /// the file, line and key.
    #[test]
    fn machine_costs_override_profile_numbers() {
        let text = "[workload]\nname = \"page_fault1\"\n[machine]\nprofile = \"skl-2s-72\"\ncosts = { cacheline_cross_socket_ns = 270.0, \"nodes.zero_bw_gbps\" = 3.5, \"host.ept_violation_ns\" = 1 }\n";
        let c = from_toml(text, "c.toml").unwrap();
        assert_eq!(c.profile.cost.cacheline_cross_socket_ns, 270.0);
        assert!(c.profile.nodes.iter().all(|n| n.zero_bw_gbps == 3.5));
        assert_eq!(c.profile.host.ept_violation_ns, 1.0);
        let plain = from_toml("[workload]\nname = \"page_fault1\"\n[machine]\nprofile = \"skl-2s-72\"\n", "c.toml").unwrap();
        assert_eq!(c.profile.cost.cacheline_same_socket_ns, plain.profile.cost.cacheline_same_socket_ns);
        assert_ne!(plain.profile.cost.cacheline_cross_socket_ns, 270.0);
        assert_eq!(c.normalized["machine"]["costs"]["cacheline_cross_socket_ns"], 270.0);
        // The overridden value reaches the engine's line costs.
        let k = crate::kernel::Kernel::boot(c.profile.clone(), c.knobs.clone(), false, 1).unwrap();
        assert_eq!(k.lc.cross_socket, 270);
        for (costs, key, why) in [
            ("{ cacheline_bogus_ns = 1.0 }", "machine.costs.cacheline_bogus_ns", "unknown profile key"),
            ("{ \"tlb.bogus_entries\" = 1 }", "machine.costs.tlb.bogus_entries", "unknown profile key"),
            ("{ \"bogus.trap_ns\" = 1.0 }", "machine.costs.bogus.trap_ns", "unknown profile table"),
            ("{ trap_ns = \"fast\" }", "machine.costs.trap_ns", "expected a number"),
            ("{ trap_ns = -1.0 }", "machine.costs.trap_ns", "out of range"),
            ("{ \"cost.trap_ns\" = -1.0 }", "machine.costs.cost.trap_ns", "out of range"),
            ("{ \"nodes.latency_ns\" = -1.0 }", "machine.costs.nodes.latency_ns", "out of range"),
            ("{ lru_batch = 1.5 }", "machine.costs.lru_batch", "expected an integer"),
            ("3", "machine.costs", "expected a table"),
        ] {
            let text = format!("seed = 1\n[machine]\nprofile = \"skl-2s-72\"\ncosts = {costs}\n[workload]\nname = \"page_fault1\"\n");
            let e = from_toml(&text, "c.toml").unwrap_err();
            assert_eq!((e.key.as_str(), e.line), (key, Some(4)), "{e}");
            assert!(e.to_string().starts_with(&format!("c.toml:4: {key}: ")) && e.reason.contains(why), "{e}");
        }
    }

    /// A profile file with a bad number: the error names the profile file,
    /// the line and the key.
    #[test]
    fn bad_profile_numbers_name_file_line_and_key() {
        let dir = std::env::temp_dir().join(format!("foliosim-badprof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = profile::builtin("generic-x86").unwrap();
        let line_of = |text: &str, needle: &str| text.lines().position(|l| l.trim_start().starts_with(needle)).map(|i| i + 1);
        let cases = [
            ("trap_ns =", "trap_ns = -250.0", "cost.trap_ns"),
            ("fault_base_ns =", "fault_base_ns = nan", "cost.fault_base_ns"),
            ("ipi_ack_ns =", "ipi_ack_ns = inf", "cost.ipi_ack_ns"),
            ("walk_ns =", "walk_ns = 1e12", "tlb.walk_ns"),
            ("ept_violation_ns =", "ept_violation_ns = -1", "host.ept_violation_ns"),
            ("freq_ghz =", "freq_ghz = 0.0", "cpu.freq_ghz"),
        ];
        for (old, new, key) in cases {
            let at = good.lines().find(|l| l.trim_start().starts_with(old)).unwrap();
            let text = good.replacen(at, new, 1);
            let path = dir.join("bad.toml");
            std::fs::write(&path, &text).unwrap();
            let cfg = format!("[machine]\nprofile = \"{}\"\n[workload]\nname = \"page_fault1\"\n", path.display());
            let e = from_toml(&cfg, "c.toml").unwrap_err();
            assert_eq!((e.file.as_str(), e.line, e.key.as_str()), (path.to_str().unwrap(), line_of(&text, new), key), "{e}");
        }
        // The second node's latency: the line of the second [[nodes]].
        let text = good.to_string();
        let second = text.match_indices("latency_ns =").nth(1).map(|(i, _)| i);
        if let Some(i) = second {
            let end = i + text[i..].find('\n').unwrap();
            let text = format!("{}latency_ns = nan{}", &text[..i], &text[end..]);
            let path = dir.join("bad2.toml");
            std::fs::write(&path, &text).unwrap();
            let cfg = format!("[machine]\nprofile = \"{}\"\n[workload]\nname = \"page_fault1\"\n", path.display());
            let e = from_toml(&cfg, "c.toml").unwrap_err();
            let want = text[..i].matches('\n').count() + 1;
            assert_eq!((e.line, e.key.as_str()), (Some(want), "nodes[1].latency_ns"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// 9: the admitted machine size is the PFN space: 16 TiB is refused
    /// with an error, 16 TiB less 1 MiB boots and runs.
    #[test]
    fn the_machine_size_limit_is_the_pfn_space() {
        let cfg = |mib: &str| {
            format!("[machine]\nprofile = \"cxl-1tb\"\nnode_mem_mib = [{mib}]\n[workload]\nname = \"page_fault1\"\nsize_mib = 4\n[run]\nwarmup_s = 0.0\nduration_s = 0.0005\n")
        };
        let e = from_toml(&cfg("8388608, 8388608"), "c.toml").unwrap_err();
        assert!(e.reason.contains("32-bit PFNs") && e.line == Some(1), "{e}");
        let c = from_toml(&cfg("8388608, 8388607"), "c.toml").unwrap();
        let o = crate::run::simulate(&c, &mut |_| true).unwrap();
        assert!(o.kernel.stat.get(crate::mm::vmstat::Stat::NrFreePages) > 0);
    }

    /// 17: what `CONFIG_KEYS` documents is what the parser admits: every
    /// key is accepted, its default is the normalised config's, and a key
    /// it does not list is refused.
    #[test]
    fn config_keys_are_what_the_parser_admits() {
        let base = from_toml("[workload]\nname = \"page_fault1\"\n", "c.toml").unwrap().normalized;
        for k in CONFIG_KEYS {
            let v = match (k.default, k.key) {
                (Some(Num(x)), _) => toml::Value::Float(x),
                (Some(Int(i)), _) => toml::Value::Integer(i),
                (Some(Bool(b)), _) => toml::Value::Boolean(b),
                (Some(Str(s)), _) => toml::Value::String(s.into()),
                (None, "node_mem_mib") => toml::Value::Array(vec![toml::Value::Integer(1024); 2]),
                (None, "profile") => toml::Value::String("generic-x86".into()),
                (None, "tlb_contpte") => toml::Value::Boolean(true),
                (None, "costs") => toml::Value::Table("trap_ns = 250.0".parse().unwrap()),
                (None, "probes" | "probes_record") => toml::Value::Array(vec![toml::Value::String("tlb:tlb_flush".into())]),
                (None, _) => toml::Value::Integer(k.range.unwrap().1 as i64),
            };
            let mut t: toml::Table = "[workload]\nname = \"page_fault1\"\n".parse().unwrap();
            let table = if k.table.is_empty() {
                &mut t
            } else {
                t.entry(k.table).or_insert(toml::Value::Table(Default::default())).as_table_mut().unwrap()
            };
            table.insert(k.key.into(), v.clone());
            let c = from_table(t, &Ctx { file: "c.toml", text: "", dir: Path::new("") })
                .unwrap_or_else(|e| panic!("{}.{}: {e}", k.table, k.key));
            // (guests and their stagger are in the normalised config only for 2 or more;
            // run.fault_runs, a debug switch of the same result, only when off.)
            let hidden_at_default = (k.table == "machine" && k.key.starts_with("guest")) || (k.table == "run" && k.key == "fault_runs");
            if k.default.is_some() && !hidden_at_default {
                let got = if k.table.is_empty() { &base[k.key] } else { &base[k.table][k.key] };
                assert_eq!(got, &serde_json::to_value(k.default).unwrap(), "{}.{}: the default", k.table, k.key);
            }
            let _ = c;
            if let Some((_, hi)) = k.range {
                let mut t: toml::Table = "[workload]\nname = \"page_fault1\"\n".parse().unwrap();
                let table = if k.table.is_empty() {
                    &mut t
                } else {
                    t.entry(k.table).or_insert(toml::Value::Table(Default::default())).as_table_mut().unwrap()
                };
                let over = if k.key == "node_mem_mib" {
                    toml::Value::Array(vec![toml::Value::Float(hi * 2.0); 2])
                } else {
                    toml::Value::Float(hi * 2.0 + 1.0)
                };
                table.insert(k.key.into(), over);
                assert!(
                    from_table(t, &Ctx { file: "c.toml", text: "", dir: Path::new("") }).is_err(),
                    "{}.{}: above its range",
                    k.table,
                    k.key
                );
            }
        }
        let e = from_toml("[run]\nbogus = 1\n[workload]\nname = \"page_fault1\"\n", "c.toml").unwrap_err();
        assert!(e.reason.contains("warmup_s") && e.reason.contains("sample_ms"), "{e}");
    }

    /// 17: an unquoted dotted knob name gets a hint.
    #[test]
    fn an_unquoted_knob_name_gets_a_hint() {
        let e = from_toml("[workload]\nname = \"page_fault1\"\n[knobs]\nvm.min_free_kbytes = 1024\n", "c.toml").unwrap_err();
        assert!(e.reason.contains("knobs.\"vm.min_free_kbytes\""), "{e}");
        assert_eq!(e.line, Some(4), "{e}");
    }

    #[test]
    fn probes_are_checked_and_kept_out_of_the_config_when_unused() {
        let base = "[workload]\nname = \"page_fault1\"\n[run]\n";
        let e = from_toml(&format!("{base}probes = [\"tlb:nope\"]\n"), "p.toml").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(4), "run.probes"));
        assert!(e.reason.contains("tlb:tlb_flush"), "lists the known ones: {e}");
        let e = from_toml(&format!("{base}probes_record = \"tlb:tlb_flush\"\n"), "p.toml").unwrap_err();
        assert_eq!(e.key, "run.probes_record");
        let c = from_toml(&format!("{base}probes = [\"tlb:tlb_flush\", \"tlb:tlb_flush\"]\n"), "p.toml").unwrap();
        assert_eq!(c.run.probes, ["tlb:tlb_flush"]);
        assert_eq!(c.normalized["run"]["probes"], serde_json::json!(["tlb:tlb_flush"]));
        let c = from_toml(base, "p.toml").unwrap();
        assert!(c.normalized["run"].get("probes").is_none(), "a config without probes normalises as before");
    }

    #[test]
    fn a_guest_mix_names_each_guests_workload_and_its_errors() {
        let base = "[machine]\nguests = 3\n[workload]\nname = \"memhog\"\nsize_mib = 8\n";
        let c = from_toml(
            &format!("{base}[[guest]]\nworkload.name = \"page_fault1\"\n[[guest]]\nworkload.name = \"memhog\"\nworkload.size_mib = 4\n"),
            "m.toml",
        )
        .unwrap();
        assert_eq!(c.guest_workloads.iter().map(|w| w.0.as_str()).collect::<Vec<_>>(), ["page_fault1", "memhog"]);
        assert_eq!(c.normalized["guest"][1]["workload"]["size_mib"], 4);
        let e = |extra: &str, guests: u32| {
            from_toml(&format!("{}{extra}", base.replace("guests = 3", &format!("guests = {guests}"))), "m.toml").unwrap_err().to_string()
        };
        let m = e("[[guest]]\nworkload.name = \"memhog\"\nworkload.size_mb = 3\n", 3);
        assert!(m.contains("guest[0].workload.size_mb") && !m.contains('\n'), "{m}");
        assert!(e("[[guest]]\nworkload.name = \"memhog\"\n", 1).contains("needs machine.guests >= 2"));
        let four = "[[guest]]\nworkload.name = \"memhog\"\n".repeat(4);
        assert!(e(&four, 3).contains("4 entries for 3 guests"));
        assert!(e("[[guest]]\nknobs.x = 1\n", 3).contains("guest[0].workload: missing"));
        assert!(e("[[guest]]\nworkload.name = \"memhog\"\nseed = 2\n", 3).contains("guest[0].seed: unknown key"));
        let m = from_toml(&format!("guest = 3\n{base}"), "m.toml").unwrap_err().to_string();
        assert!(m.contains("expected an array of tables"), "{m}");
    }

    #[test]
    fn errors_stay_on_one_line_whatever_the_key_holds() {
        let e = from_json(r#"{"machine": {"\r": false}}"#, "<dict>").unwrap_err();
        let msg = e.to_string();
        assert!(!msg.contains('\r') && !msg.contains('\n'), "{msg:?}");
        assert!(msg.contains("machine.\\r"), "{msg:?}");
    }

    #[test]
    fn a_per_size_mthp_knob_selects_the_upstream_policy() {
        let base = "[workload]\nname = \"page_fault1\"\n[knobs]\n";
        let c = from_toml(&format!("{base}\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"\n"), "c.toml").unwrap();
        assert_eq!(c.knobs.anon_folio.mode, "upstream");
        assert_eq!(c.normalized["knobs"]["anon_folio.mode"], "upstream");
        // Another mode, written, would leave the size off without a word: refused.
        let e = from_toml(
            &format!("{base}\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"\n\"anon_folio.mode\" = \"rfc-v2\"\n"),
            "c.toml",
        )
        .unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(4), "knobs.kernel/mm/transparent_hugepage/hugepages-64kB/enabled"), "{e}");
        let c = from_toml(base, "c.toml").unwrap();
        assert_eq!(c.knobs.anon_folio.mode, "off");
    }
}
