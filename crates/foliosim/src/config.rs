//! Simulation configs: TOML (or JSON from Python) to a validated `Config`.
//! Every error names the file, the line where the key stands (when it can
//! be found) and the key.

use crate::api::ConfigError;
use crate::hw::profile::{self, Profile};
use crate::kernel::knobs::{self, KnobValue, Knobs};
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
    /// The normalised config, as JSON (defaults filled in).
    #[serde(skip)]
    pub normalized: serde_json::Value,
}

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
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
        if k == bare || k.trim_matches('"') == bare || k.trim_matches('\'') == bare {
            return Some(i + 1);
        }
    }
    if key.is_empty() || header_line.is_some() {
        header_line
    } else {
        None
    }
}

fn json_to_toml(v: &serde_json::Value) -> Option<toml::Value> {
    Some(match v {
        serde_json::Value::Null => return None,
        serde_json::Value::Bool(b) => toml::Value::Boolean(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                toml::Value::Integer(i)
            } else {
                toml::Value::Float(n.as_f64()?)
            }
        }
        serde_json::Value::String(s) => toml::Value::String(s.clone()),
        serde_json::Value::Array(a) => toml::Value::Array(a.iter().map(json_to_toml).collect::<Option<_>>()?),
        serde_json::Value::Object(o) => {
            toml::Value::Table(o.iter().map(|(k, v)| Some((k.clone(), json_to_toml(v)?))).collect::<Option<_>>()?)
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

/// Parse a TOML config. `file` names it in errors; relative profile paths resolve next to it.
pub fn from_toml(text: &str, file: &str) -> Result<Config, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let msg = e.message().lines().next().unwrap_or("malformed TOML").to_string();
        ConfigError { file: file.to_string(), line, key: "(syntax)".into(), reason: msg }
    })?;
    from_table(table, &Ctx { file, text })
}

/// Parse a config given as JSON (e.g. a Python dict).
pub fn from_json(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let err = |key: &str, reason: String| ConfigError { file: origin.to_string(), line: None, key: key.into(), reason };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| err("(syntax)", format!("malformed JSON: {e}")))?;
    let t = match json_to_toml(&v) {
        Some(toml::Value::Table(t)) => t,
        Some(_) => return Err(err("(root)", "a config must be a table/dict".into())),
        None => return Err(err("(root)", "null values are not allowed in a config".into())),
    };
    from_table(t, &Ctx { file: origin, text: "" })
}

fn take_table(ctx: &Ctx, root: &mut toml::Table, name: &str) -> Result<toml::Table, ConfigError> {
    match root.remove(name) {
        None => Ok(toml::Table::new()),
        Some(toml::Value::Table(t)) => Ok(t),
        Some(v) => Err(ctx.err("", name, format!("expected a table, got {}", v.type_str()))),
    }
}

fn get_f64(ctx: &Ctx, t: &mut toml::Table, table: &str, key: &str, default: f64, lo: f64, hi: f64) -> Result<f64, ConfigError> {
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

fn get_bool(ctx: &Ctx, t: &mut toml::Table, table: &str, key: &str, default: bool) -> Result<bool, ConfigError> {
    match t.remove(key) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(b),
        Some(v) => Err(ctx.err(table, key, format!("expected true or false, got {}", v.type_str()))),
    }
}

fn no_leftovers(ctx: &Ctx, t: &toml::Table, table: &str) -> Result<(), ConfigError> {
    match t.keys().next() {
        Some(k) => Err(ctx.err(table, k, "unknown key")),
        None => Ok(()),
    }
}

/// Load a profile by builtin name or path; errors name the profile file.
pub fn load_profile(name: &str, base: &Path) -> Result<Profile, (String, Option<usize>, String, String)> {
    let (text, file) = match profile::builtin(name) {
        Some(t) => (t.to_string(), format!("<builtin profile {name}>")),
        None => {
            let p: PathBuf = if Path::new(name).is_absolute() { name.into() } else { base.join(name) };
            match std::fs::read_to_string(&p) {
                Ok(t) => (t, p.display().to_string()),
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
    let prof: Profile = toml::from_str(&text).map_err(|e| {
        let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        (file.clone(), line, "(profile)".to_string(), e.message().lines().next().unwrap_or("").to_string())
    })?;
    prof.validate()
        .map_err(|(k, r)| (file.clone(), find_line(&text, k.split('.').next().unwrap_or(""), k.rsplit('.').next().unwrap_or("")), k, r))?;
    Ok(prof)
}

/// Most VM guests `machine.guests` may ask for.
pub const MAX_GUESTS: u32 = 64;

fn from_table(mut root: toml::Table, ctx: &Ctx) -> Result<Config, ConfigError> {
    let seed = match root.remove("seed") {
        None => 1,
        Some(toml::Value::Integer(i)) if i >= 0 => i as u64,
        Some(v) => return Err(ctx.err("", "seed", format!("expected a non-negative integer, got {v}"))),
    };
    // --- machine
    let mut m = take_table(ctx, &mut root, "machine")?;
    let profile_name = match m.remove("profile") {
        None => "generic-x86".to_string(),
        Some(toml::Value::String(s)) => s,
        Some(v) => return Err(ctx.err("machine", "profile", format!("expected a profile name or path, got {}", v.type_str()))),
    };
    let base = Path::new(ctx.file).parent().unwrap_or(Path::new("."));
    let mut prof = load_profile(&profile_name, base).map_err(|(f, line, key, reason)| {
        if f.is_empty() {
            ctx.err("machine", "profile", reason)
        } else {
            ConfigError { file: f, line, key, reason }
        }
    })?;
    if let Some(v) = m.remove("nr_cpus") {
        match v {
            toml::Value::Integer(n) if (1..=4096).contains(&n) => prof.cpu.nr_cpus = n as u32,
            v => return Err(ctx.err("machine", "nr_cpus", format!("expected an integer 1..=4096, got {v}"))),
        }
        if prof.cpu.nr_cpus % prof.cpu.sockets != 0 {
            prof.cpu.sockets = 1;
        }
    }
    if let Some(v) = m.remove("node_mem_mib") {
        let arr = match v {
            toml::Value::Array(a) => a,
            v => return Err(ctx.err("machine", "node_mem_mib", format!("expected an array of MiB per node, got {}", v.type_str()))),
        };
        if arr.len() != prof.nodes.len() {
            return Err(ctx.err(
                "machine",
                "node_mem_mib",
                format!("the profile has {} nodes but {} sizes were given", prof.nodes.len(), arr.len()),
            ));
        }
        for (i, x) in arr.iter().enumerate() {
            match x {
                toml::Value::Integer(n) if *n > 0 => prof.nodes[i].mem_mib = *n as u64,
                v => return Err(ctx.err("machine", "node_mem_mib", format!("element {i}: expected a positive integer, got {v}"))),
            }
        }
    }
    // TLB coalescing overrides (the RFC v2 kernels had no contpte).
    let mut tlb_overrides: Vec<(&str, serde_json::Value)> = Vec::new();
    if let Some(v) = m.remove("tlb_contpte") {
        match v {
            toml::Value::Boolean(b) => {
                prof.tlb.contpte = b;
                tlb_overrides.push(("tlb_contpte", b.into()));
            }
            v => return Err(ctx.err("machine", "tlb_contpte", format!("expected a boolean, got {}", v.type_str()))),
        }
    }
    if let Some(v) = m.remove("tlb_coalesce_order") {
        match v {
            toml::Value::Integer(n) if n == 0 || n == 2 => {
                prof.tlb.coalesce_order = n as u32;
                tlb_overrides.push(("tlb_coalesce_order", n.into()));
            }
            v => return Err(ctx.err("machine", "tlb_coalesce_order", format!("expected 0 (none) or 2 (HPA), got {v}"))),
        }
    }
    let guests = match m.remove("guests") {
        None => 1,
        Some(toml::Value::Integer(n)) if (1..=MAX_GUESTS as i64).contains(&n) => n as u32,
        Some(v) => {
            return Err(ctx.err("machine", "guests", format!("expected an integer 1..={MAX_GUESTS} (VM guests sharing one host), got {v}")))
        }
    };
    let guest_stagger_ms = get_f64(ctx, &mut m, "machine", "guest_stagger_ms", 0.0, 0.0, 3.6e6)?;
    if guest_stagger_ms > 0.0 && guests < 2 {
        return Err(ctx.err("machine", "guest_stagger_ms", "staggers the boot of several guests: needs machine.guests >= 2"));
    }
    no_leftovers(ctx, &m, "machine")?;
    prof.validate().map_err(|(k, r)| ctx.err("machine", "", format!("{k}: {r}")))?;
    // --- run
    let mut r = take_table(ctx, &mut root, "run")?;
    let run = RunCfg {
        warmup_s: get_f64(ctx, &mut r, "run", "warmup_s", 1.0, 0.0, 3600.0)?,
        duration_s: get_f64(ctx, &mut r, "run", "duration_s", 5.0, 1e-6, 36000.0)?,
        check: get_bool(ctx, &mut r, "run", "check", false)?,
        audit_interval_ms: get_f64(ctx, &mut r, "run", "audit_interval_ms", 50.0, 0.001, 1e9)?,
        sample_ms: get_f64(ctx, &mut r, "run", "sample_ms", 1000.0, 1.0, 1e9)?,
    };
    no_leftovers(ctx, &r, "run")?;
    // --- knobs
    let kt = take_table(ctx, &mut root, "knobs")?;
    let mut knob_values = BTreeMap::new();
    let mut kn = Knobs::default();
    for (k, v) in kt {
        let val = knobs::validate(&k, &v).map_err(|reason| ctx.err("knobs", &k, reason))?;
        kn.set(&k, &val);
        knob_values.insert(k, val);
    }
    // Setting a per-size mTHP knob means the 6.8+ kernel those knobs belong
    // to, unless the model switch says otherwise.
    if !knob_values.contains_key("anon_folio.mode") && knobs::MTHP_SIZE_KEYS[..7].iter().any(|k| knob_values.contains_key(*k)) {
        let v = KnobValue::Str("upstream".into());
        kn.set("anon_folio.mode", &v);
        knob_values.insert("anon_folio.mode".into(), v);
    }
    // --- workload
    let mut w = take_table(ctx, &mut root, "workload")?;
    let name = match w.remove("name") {
        Some(toml::Value::String(s)) => s,
        None => return Err(ctx.err("workload", "name", "missing: which workload to run (see `foliosim list`)")),
        Some(v) => return Err(ctx.err("workload", "name", format!("expected a string, got {}", v.type_str()))),
    };
    let info =
        workload::find(&name).ok_or_else(|| ctx.err("workload", "name", format!("unknown workload \"{name}\" (see `foliosim list`)")))?;
    let raw: RawParams = w.into_iter().collect();
    let wl = (info.build)(&mut Params::new(raw.clone())).map_err(|msg| {
        let (k, reason) = msg.split_once(": ").unwrap_or(("", msg.as_str()));
        ctx.err("workload", k, reason.to_string())
    })?;
    if let Some(need) = wl.peak_bytes() {
        let have = prof.total_mem_mib() << 20;
        if need > have {
            return Err(ctx.err(
                "workload",
                "",
                format!(
                    "needs about {:.1} GiB but the machine has {:.1} GiB",
                    need as f64 / (1u64 << 30) as f64,
                    have as f64 / (1u64 << 30) as f64
                ),
            ));
        }
    }
    if let Some(k) = root.keys().next() {
        return Err(ctx.err("", k, "unknown key (expected seed, machine, workload, run, knobs)"));
    }
    if guests > 1 && kn.host_prealloc && kn.host_mem_mib > 0 && kn.host_mem_mib < guests as u64 * prof.total_mem_mib() {
        return Err(ctx.err(
            "knobs",
            "host.prealloc",
            format!(
                "{guests} preallocated guests of {} MiB need {} MiB but host.mem_mib is {}",
                prof.total_mem_mib(),
                guests as u64 * prof.total_mem_mib(),
                kn.host_mem_mib
            ),
        ));
    }
    // Normalised form: everything explicit.
    let mut knobs_json = serde_json::Map::new();
    for spec in knobs::registry() {
        let v = match knob_values.get(spec.key) {
            Some(KnobValue::Int(i)) => serde_json::Value::from(*i),
            Some(KnobValue::Bool(b)) => serde_json::Value::from(*b),
            Some(KnobValue::Str(s)) => serde_json::Value::from(s.clone()),
            None => serde_json::to_value(&spec.default).unwrap(),
        };
        knobs_json.insert(spec.key.to_string(), v);
    }
    let mut wl_json = serde_json::Map::new();
    wl_json.insert("name".into(), name.clone().into());
    for (k, v) in &raw {
        wl_json.insert(k.clone(), toml_to_json(v));
    }
    let mut machine_json = serde_json::Map::new();
    machine_json.insert("profile".into(), profile_name.clone().into());
    machine_json.insert("nr_cpus".into(), prof.cpu.nr_cpus.into());
    machine_json.insert("node_mem_mib".into(), prof.nodes.iter().map(|n| n.mem_mib).collect::<Vec<_>>().into());
    for (k, v) in tlb_overrides {
        machine_json.insert(k.into(), v);
    }
    if guests > 1 {
        machine_json.insert("guests".into(), guests.into());
        machine_json.insert("guest_stagger_ms".into(), guest_stagger_ms.into());
    }
    let normalized = serde_json::json!({
        "seed": seed,
        "machine": machine_json,
        "workload": wl_json,
        "run": serde_json::to_value(&run).unwrap(),
        "knobs": knobs_json,
    });
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
        normalized,
    })
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
        assert_eq!(c.knobs.anon_folio.mode, crate::kernel::knobs::AnonFolioMode::Upstream);
        assert_eq!(c.normalized["knobs"]["anon_folio.mode"], "upstream");
        let c = from_toml(
            &format!("{base}\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"\n\"anon_folio.mode\" = \"rfc-v2\"\n"),
            "c.toml",
        )
        .unwrap();
        assert_eq!(c.knobs.anon_folio.mode, crate::kernel::knobs::AnonFolioMode::RfcV2, "an explicit mode wins");
        let c = from_toml(base, "c.toml").unwrap();
        assert_eq!(c.knobs.anon_folio.mode, crate::kernel::knobs::AnonFolioMode::Off);
    }
}
