//! The rule that derives a profile for a machine nobody here has, from
//! public figures of that machine and the costs measured on a host
//! (docs/profiles.md explains it; `foliosim list profiles NAME --explain`
//! prints each value's derivation).
//!
//! A derived profile is a profile file with a `[derive]` table naming its
//! host (a profile whose costs were measured, `generic-x86` or one
//! `foliosim calibrate` wrote) and any subset of a profile's values, each
//! with its source. Every value it leaves out follows from its class:
//!
//! * **software time** (the kernel paths' `*_ns`): the host's, times the
//!   core factor kappa = (f_host x ppc_host) / (f x ppc): clock times
//!   performance per clock (`cpu.core`, from profiles/rule.toml);
//! * **cache bandwidth** (a clear in cache): the host's x f / f_host;
//! * **memory misses** (`alloc_cold_ns`, `alloc_cold_large_ns`): the host's x latency / the
//!   host's latency (node 0 of each);
//! * **one CPU's memory bandwidth** (`read_bw_gbps`, `zero_bw_gbps`,
//!   `copy_bw_gbps`): the host's x s, s = read_bw / the host's read_bw
//!   when the profile gives a public single-core read bandwidth, else the
//!   host's latency / the node's (a core keeps a fixed number of misses
//!   in flight: Little's law);
//! * **a node's shared bandwidth**: given, or the DRAM's peak
//!   (`derive.dram_channels` x `derive.dram_mts` x 8 bytes) x the STREAM
//!   efficiency of profiles/rule.toml;
//! * **SMT throughput**: the core's, from profiles/rule.toml;
//! * **the kernel's constants** (`lru_batch`, `spin_limit_ns`, ...): the
//!   host's, with its source (the same kernel);
//! * **facts of the machine** (topology, caches, latencies, core-to-core
//!   transfers, devices, TLB geometry): given, else the host's, marked
//!   assumed.

use crate::hw::profile::Profile;
use crate::hw::provenance::{self, Kind, Source, Sources};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The rule's own public figures: profiles/rule.toml.
pub const RULE_TOML: &str = include_str!("../../../../profiles/rule.toml");

/// What the rule does with a value it is not given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Fact,
    Kernel,
    Software,
    CacheBw,
    MemMiss,
    CoreBw,
    SharedBw,
    Smt,
}

/// The class of `table.key` (table without its index: `nodes`).
pub fn class(table: &str, key: &str) -> Option<Class> {
    use Class::*;
    Some(match (table, key) {
        ("cpu", "page_size_kib") => Kernel,
        ("cpu", "smt_throughput_ratio") => Smt,
        ("cpu", "nr_cpus" | "sockets" | "freq_ghz" | "core" | "threads_per_core" | "l2_kib" | "llc_kib" | "interconnect_bw_gbps") => Fact,
        ("nodes", "kind" | "mem_mib" | "has_cpus" | "latency_ns" | "zero_call_ns" | "distance") => Fact,
        ("nodes", "shared_bw_gbps") => SharedBw,
        ("nodes", "read_bw_gbps" | "zero_bw_gbps" | "copy_bw_gbps") => CoreBw,
        ("tlb", "stlb_hit_ns" | "walk_ns" | "walk_cached_ns") => Software,
        ("tlb", _) => Fact,
        ("cost", "zero_warm_bw_gbps" | "copy_warm_bw_gbps") => CacheBw,
        ("cost", "alloc_cold_ns" | "alloc_cold_large_ns") => MemMiss,
        ("cost", "lru_batch" | "spin_limit_ns" | "pagecache_read_stream") => Kernel,
        (
            "cost",
            "disk_read_ns"
            | "swap_write_4k_ns"
            | "swap_read_4k_ns"
            | "tlb_flush_ceiling"
            | "cacheline_same_socket_ns"
            | "cacheline_cross_socket_ns"
            | "cacheline_read_same_socket_ns"
            | "cacheline_read_cross_socket_ns",
        ) => Fact,
        ("cost" | "host", k) if k.ends_with("_ns") => Software,
        _ => return None,
    })
}

/// One core of profiles/rule.toml.
#[derive(Clone, Debug)]
struct Core {
    /// The core its performance per clock is stated against (none: the reference).
    base: Option<String>,
    per_clock_ratio: f64,
    smt_throughput_ratio: Option<f64>,
}

/// profiles/rule.toml, parsed.
pub struct Rule {
    cores: BTreeMap<String, Core>,
    pub stream_efficiency: f64,
    /// Sources of the rule's figures by path (`cores.zen4.per_clock_ratio`).
    pub sources: Sources,
}

fn parse_rule(text: &str) -> Result<Rule, String> {
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_string())?;
    let cites = provenance::citations(&doc).map_err(|(k, r)| format!("{k}: {r}"))?;
    let sources = provenance::read_tags_in(text, &cites, &|t| t.starts_with("cores.") || t == "memory")
        .map_err(|e| format!("line {}: {}: {}", e.line, e.key, e.reason))?;
    let stream_efficiency = doc
        .get("memory")
        .and_then(|m| m.get("stream_efficiency_ratio"))
        .and_then(toml::Value::as_float)
        .ok_or("memory.stream_efficiency_ratio missing")?;
    let mut cores = BTreeMap::new();
    for (name, c) in doc.get("cores").and_then(toml::Value::as_table).ok_or("no [cores.NAME] tables")? {
        let t = c.as_table().ok_or(format!("cores.{name}: a table"))?;
        for k in t.keys() {
            if !["base", "per_clock_ratio", "smt_throughput_ratio"].contains(&k.as_str()) {
                return Err(format!("cores.{name}.{k}: unknown key"));
            }
        }
        cores.insert(
            name.clone(),
            Core {
                base: t.get("base").and_then(toml::Value::as_str).map(str::to_string),
                per_clock_ratio: t
                    .get("per_clock_ratio")
                    .and_then(toml::Value::as_float)
                    .ok_or(format!("cores.{name}.per_clock_ratio missing"))?,
                smt_throughput_ratio: t.get("smt_throughput_ratio").and_then(toml::Value::as_float),
            },
        );
    }
    let rule = Rule { cores, stream_efficiency, sources };
    for name in rule.cores.keys() {
        rule.per_clock(name)?;
    }
    Ok(rule)
}

/// The rule of the built-in profiles/rule.toml.
pub fn rule() -> &'static Rule {
    static RULE: OnceLock<Rule> = OnceLock::new();
    RULE.get_or_init(|| parse_rule(RULE_TOML).unwrap_or_else(|e| panic!("profiles/rule.toml: {e}")))
}

impl Rule {
    /// The names of the cores, for errors.
    pub fn core_names(&self) -> Vec<&str> {
        self.cores.keys().map(String::as_str).collect()
    }

    /// A core's performance per clock relative to the reference core, and
    /// the chain of published ratios it multiplies (`zen4 1.13 x zen3 ...`).
    pub fn per_clock(&self, core: &str) -> Result<(f64, String), String> {
        let mut x = 1.0;
        let mut chain = Vec::new();
        let mut at = core.to_string();
        for _ in 0..16 {
            let c = self
                .cores
                .get(&at)
                .ok_or_else(|| format!("no core {at:?} in profiles/rule.toml (known: {})", self.core_names().join(", ")))?;
            x *= c.per_clock_ratio;
            match &c.base {
                Some(b) => {
                    chain.push(format!("{at}/{b} {}", num(c.per_clock_ratio)));
                    at = b.clone();
                }
                None => return Ok((x, if chain.is_empty() { format!("{at}: the reference") } else { chain.join(" x ") })),
            }
        }
        Err(format!("core {core:?}: its chain of bases does not end"))
    }

    fn smt(&self, core: &str) -> Option<(f64, Source)> {
        let c = self.cores.get(core)?;
        let v = c.smt_throughput_ratio?;
        let src = self.sources.get(&format!("cores.{core}.smt_throughput_ratio")).cloned()?;
        Some((v, src))
    }
}

/// A number for the derivation's text: four significant figures.
pub fn num(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = (3 - x.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A derived profile document: what `[derive]` says.
struct DeriveSpec {
    host: String,
    dram: Option<(u32, u32)>,
}

fn derive_spec(doc: &toml::Table) -> Result<Option<DeriveSpec>, (String, String)> {
    let Some(d) = doc.get("derive") else { return Ok(None) };
    let t = d.as_table().ok_or(("derive".to_string(), "a table: host = \"PROFILE\"".to_string()))?;
    let mut host = None;
    let (mut ch, mut mts) = (None, None);
    for (k, v) in t {
        let err = |r: &str| (format!("derive.{k}"), r.to_string());
        match k.as_str() {
            "host" => host = Some(v.as_str().ok_or(err("the host profile's name or path"))?.to_string()),
            "dram_channels" => {
                ch = Some(v.as_integer().filter(|n| (1..=64).contains(n)).ok_or(err("DRAM channels per socket, 1 to 64"))? as u32)
            }
            "dram_mts" => {
                mts = Some(v.as_integer().filter(|n| (100..=20000).contains(n)).ok_or(err("DRAM transfers per second, MT/s"))? as u32)
            }
            _ => return Err(err("unknown key (host, dram_channels, dram_mts)")),
        }
    }
    let host = host.ok_or(("derive.host".to_string(), "names the host profile whose measured costs the rule scales".to_string()))?;
    let dram = match (ch, mts) {
        (Some(c), Some(m)) => Some((c, m)),
        (None, None) => None,
        _ => return Err(("derive".into(), "dram_channels and dram_mts go together".into())),
    };
    Ok(Some(DeriveSpec { host, dram }))
}

/// The host profile a derived profile names, if it is one.
pub fn host_of(doc: &toml::Table) -> Result<Option<String>, (String, String)> {
    Ok(derive_spec(doc)?.map(|d| d.host))
}

/// The inputs of the rule that hold for every value of one profile.
struct Ctx<'a> {
    host: &'a Profile,
    host_table: toml::Table,
    kappa: f64,
    kappa_why: String,
    freq: f64,
    lat: f64,
    rule: &'a Rule,
}

fn f(t: &toml::Table, k: &str) -> Option<f64> {
    match t.get(k)? {
        toml::Value::Float(x) => Some(*x),
        toml::Value::Integer(i) => Some(*i as f64),
        _ => None,
    }
}

/// Derive a whole profile document from a derived one (`doc`, with the
/// sources of its tags) and its host profile. Errors are (key, reason).
pub fn derive(doc: &toml::Table, given: &Sources, host: &Profile) -> Result<(toml::Table, Sources), (String, String)> {
    derive_with(doc, given, host, rule())
}

fn derive_with(doc: &toml::Table, given: &Sources, host: &Profile, rule: &Rule) -> Result<(toml::Table, Sources), (String, String)> {
    let spec = derive_spec(doc)?.ok_or(("derive".to_string(), "not a derived profile".to_string()))?;
    let toml::Value::Table(host_table) = toml::Value::try_from(host).map_err(|e| (String::new(), e.to_string()))? else {
        unreachable!("a profile serialises to a table")
    };
    let empty = toml::Table::new();
    let cpu = doc.get("cpu").and_then(toml::Value::as_table).unwrap_or(&empty);
    let hcpu = host_table["cpu"].as_table().expect("cpu");
    let freq = f(cpu, "freq_ghz").unwrap_or(host.cpu.freq_ghz);
    let core = cpu.get("core").and_then(toml::Value::as_str).unwrap_or(&host.cpu.core).to_string();
    if host.cpu.core.is_empty() {
        return Err(("derive.host".into(), format!("the host profile {} names no cpu.core: the rule needs its core", host.name)));
    }
    let (ppc_h, chain_h) = rule.per_clock(&host.cpu.core).map_err(|e| ("derive.host".to_string(), e))?;
    let (ppc, chain) = rule.per_clock(&core).map_err(|e| ("cpu.core".to_string(), e))?;
    let kappa = (host.cpu.freq_ghz * ppc_h) / (freq * ppc);
    let kappa_why = format!(
        "kappa = (host {} GHz x {} {}) / ({} GHz x {} {}) = {}; per clock: {}{}",
        num(host.cpu.freq_ghz),
        host.cpu.core,
        num(ppc_h),
        num(freq),
        core,
        num(ppc),
        num(kappa),
        chain,
        if chain_h != chain { format!("; host: {chain_h}") } else { String::new() }
    );
    let host_nodes = host_table["nodes"].as_array().expect("nodes");
    let href = host.nodes.iter().position(|n| n.has_cpus).unwrap_or(0);
    let hnode = host_nodes[href].as_table().expect("node");
    let doc_nodes: Vec<toml::Table> = match doc.get("nodes") {
        Some(toml::Value::Array(a)) => a.iter().map(|e| e.as_table().cloned().unwrap_or_default()).collect(),
        Some(_) => return Err(("nodes".into(), "an array of tables, [[nodes]]".into())),
        None => host.nodes.iter().map(|_| toml::Table::new()).collect(),
    };
    let lat = doc_nodes.first().and_then(|n| f(n, "latency_ns")).unwrap_or(host.nodes[href].latency_ns);
    let cx = Ctx { host, host_table: host_table.clone(), kappa, kappa_why, freq, lat, rule };

    let mut out = toml::Table::new();
    let mut src = Sources::new();
    for k in ["name", "description"] {
        let v = doc.get(k).ok_or((k.to_string(), "a derived profile gives its own".to_string()))?;
        out.insert(k.into(), v.clone());
    }
    // [cpu]
    let threads = cpu.get("threads_per_core").and_then(toml::Value::as_integer).unwrap_or(host.cpu.threads_per_core as i64);
    let mut t = toml::Table::new();
    for k in keys(cpu, hcpu) {
        let path = format!("cpu.{k}");
        let (v, s) = match cpu.get(&k) {
            Some(v) => (v.clone(), given_source(given, &path)),
            None if k == "smt_throughput_ratio" && threads <= 1 => {
                (toml::Value::Float(1.0), Source::new(Kind::Derived, "1", "no SMT: one thread per core"))
            }
            None if k == "smt_throughput_ratio" => match rule.smt(&core) {
                Some((r, s)) => (toml::Value::Float(r), s),
                None => fact(&cx, &path, hcpu.get(&k), "nothing published for this core's SMT in profiles/rule.toml")?,
            },
            None => by_class(&cx, "cpu", &k, &path, hcpu.get(&k), None)?,
        };
        t.insert(k, v);
        src.insert(path, s);
    }
    out.insert("cpu".into(), toml::Value::Table(t));
    // [[nodes]]
    let mut nodes = Vec::new();
    for (i, n) in doc_nodes.iter().enumerate() {
        let mut t = toml::Table::new();
        for k in keys(n, hnode) {
            let path = format!("nodes[{i}].{k}");
            let (v, s) = match n.get(&k) {
                Some(v) => (v.clone(), given_source(given, &path)),
                None => by_class(&cx, "nodes", &k, &path, hnode.get(&k), Some((n, &spec)))?,
            };
            t.insert(k, v);
            src.insert(path, s);
        }
        nodes.push(toml::Value::Table(t));
    }
    out.insert("nodes".into(), toml::Value::Array(nodes));
    // [tlb], [cost], [host]
    for table in ["tlb", "cost", "host"] {
        let mine = doc.get(table).and_then(toml::Value::as_table).unwrap_or(&empty);
        let theirs = cx.host_table[table].as_table().expect("table");
        let mut t = toml::Table::new();
        for k in keys(mine, theirs) {
            let path = format!("{table}.{k}");
            let (v, s) = match mine.get(&k) {
                Some(v) => (v.clone(), given_source(given, &path)),
                None => by_class(&cx, table, &k, &path, theirs.get(&k), None)?,
            };
            t.insert(k, v);
            src.insert(path, s);
        }
        out.insert(table.into(), toml::Value::Table(t));
    }
    for k in doc.keys() {
        if !["name", "description", "derive", "sources", "cpu", "nodes", "tlb", "cost", "host"].contains(&k.as_str()) {
            return Err((k.clone(), "unknown table of a profile".into()));
        }
    }
    Ok((out, src))
}

/// A table's keys: the ones given, then the host's others, in order.
fn keys(mine: &toml::Table, host: &toml::Table) -> Vec<String> {
    let mut out: Vec<String> = mine.keys().cloned().collect();
    out.extend(host.keys().filter(|k| !mine.contains_key(*k)).cloned());
    out
}

fn given_source(given: &Sources, path: &str) -> Source {
    given.get(path).cloned().unwrap_or_else(|| Source::new(Kind::None, "", ""))
}

fn host_source(cx: &Ctx, path: &str) -> String {
    let hp = host_path(cx, path);
    cx.host.sources.get(&hp).map_or_else(|| "no source given".to_string(), Source::describe)
}

/// The host's path for a value: node paths point at the host's reference node.
fn host_path(cx: &Ctx, path: &str) -> String {
    match path.strip_prefix("nodes[") {
        Some(rest) => {
            let href = cx.host.nodes.iter().position(|n| n.has_cpus).unwrap_or(0);
            format!("nodes[{href}]{}", &rest[rest.find(']').unwrap_or(0) + 1..])
        }
        None => path.to_string(),
    }
}

fn fact(cx: &Ctx, path: &str, hv: Option<&toml::Value>, why: &str) -> Result<(toml::Value, Source), (String, String)> {
    let v = hv.ok_or((path.to_string(), "the host profile has no such value".to_string()))?.clone();
    Ok((v, Source::new(Kind::Assumed, "", format!("as on the host {} ({why}); there: {}", cx.host.name, host_source(cx, path)))))
}

fn by_class(
    cx: &Ctx,
    table: &str,
    key: &str,
    path: &str,
    hv: Option<&toml::Value>,
    node: Option<(&toml::Table, &DeriveSpec)>,
) -> Result<(toml::Value, Source), (String, String)> {
    let class = class(table, key).ok_or((path.to_string(), "no rule derives this value: give it with its source".to_string()))?;
    let hx = || hv.and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)));
    let hname = &cx.host.name;
    let scaled = |by: f64, unit: &str, why: String| -> Result<(toml::Value, Source), (String, String)> {
        let h = hx().ok_or((path.to_string(), "the host profile has no such number".to_string()))?;
        let v = h * by;
        Ok((
            toml::Value::Float(v),
            Source::new(
                Kind::Derived,
                format!("{} {unit} x {} = {} {unit}", num(h), num(by), num(v)),
                format!("{why}; host {hname}'s value: {}", host_source(cx, path)),
            ),
        ))
    };
    match class {
        Class::Fact => fact(cx, path, hv, "nothing published for this machine"),
        Class::Kernel => {
            let v = hv.ok_or((path.to_string(), "the host profile has no such value".to_string()))?.clone();
            let mut s = cx.host.sources.get(&host_path(cx, path)).cloned().unwrap_or_else(|| Source::new(Kind::None, "", ""));
            s.note = format!("the kernel's, as on the host {hname}{}{}", if s.note.is_empty() { "" } else { ": " }, s.note);
            Ok((v, s))
        }
        Class::Software => scaled(cx.kappa, "ns", format!("software time, scaled by the core factor: {}", cx.kappa_why)),
        Class::CacheBw => scaled(
            cx.freq / cx.host.cpu.freq_ghz,
            "GB/s",
            format!(
                "a core's cache bandwidth, bytes per clock as the host's: x {} GHz / host {} GHz",
                num(cx.freq),
                num(cx.host.cpu.freq_ghz)
            ),
        ),
        Class::MemMiss => {
            let hl = cx.host.nodes.iter().find(|n| n.has_cpus).map_or(1.0, |n| n.latency_ns);
            scaled(cx.lat / hl, "ns", format!("memory misses: x node 0 latency {} ns / host {} ns", num(cx.lat), num(hl)))
        }
        Class::CoreBw => {
            let (n, _) = node.expect("a node value");
            let hn = &cx.host.nodes[cx.host.nodes.iter().position(|n| n.has_cpus).unwrap_or(0)];
            let lat = f(n, "latency_ns").unwrap_or(hn.latency_ns);
            let (s, why) = match f(n, "read_bw_gbps") {
                Some(r) => (
                    r / hn.read_bw_gbps,
                    format!("one CPU's bandwidth: x this node's read_bw {} / host {} GB/s", num(r), num(hn.read_bw_gbps)),
                ),
                None => (
                    hn.latency_ns / lat,
                    format!(
                        "one CPU's bandwidth, misses in flight as the host's (Little's law): x host latency {} / {} ns",
                        num(hn.latency_ns),
                        num(lat)
                    ),
                ),
            };
            scaled(s, "GB/s", why)
        }
        Class::SharedBw => {
            let (n, spec) = node.expect("a node value");
            let dram = n.get("kind").and_then(toml::Value::as_str).unwrap_or("dram") == "dram";
            match spec.dram {
                Some((ch, mts)) if dram => {
                    let peak = ch as f64 * mts as f64 * 8.0 / 1000.0;
                    let v = peak * cx.rule.stream_efficiency;
                    let eff = cx.rule.sources.get("memory.stream_efficiency_ratio").map_or_else(String::new, Source::describe);
                    Ok((
                        toml::Value::Float(v),
                        Source::new(
                            Kind::Derived,
                            format!("{ch} channels x {mts} MT/s x 8 B = {} GB/s peak x {} = {} GB/s", num(peak), num(cx.rule.stream_efficiency), num(v)),
                            format!("the DRAM's peak (derive.dram_channels, derive.dram_mts) times the STREAM efficiency of profiles/rule.toml: {eff}"),
                        ),
                    ))
                }
                _ => fact(cx, path, hv, "no shared bandwidth or DRAM configuration given"),
            }
        }
        Class::Smt => fact(cx, path, hv, "no SMT figure for this core"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Profile {
        let text = crate::hw::profile::builtin("generic-x86").unwrap();
        let mut p: Profile = toml::from_str(text).unwrap();
        p.cpu.core = "skylake".into();
        p.cpu.freq_ghz = 3.0;
        p
    }

    fn doc(extra: &str) -> toml::Table {
        format!("name = \"t\"\ndescription = \"d\"\n[derive]\nhost = \"h\"\n{extra}").parse().unwrap()
    }

    fn derived(extra: &str) -> Profile {
        let (t, s) = derive(&doc(extra), &Sources::new(), &host()).unwrap();
        let mut p: Profile = toml::Value::Table(t).try_into().unwrap();
        p.sources = s;
        p
    }

    /// Clock and core scale every software cost by one factor; what is
    /// given is kept; a value nothing derives is the host's, assumed.
    #[test]
    fn software_costs_scale_with_clock_and_core() {
        let h = host();
        let same = derived("[cpu]\nfreq_ghz = 3.0\ncore = \"skylake\"\n");
        assert_eq!(same.cost.fault_base_ns, h.cost.fault_base_ns);
        let half = derived("[cpu]\nfreq_ghz = 1.5\ncore = \"skylake\"\n");
        for (a, b) in [
            (half.cost.fault_base_ns, h.cost.fault_base_ns),
            (half.cost.trap_ns, h.cost.trap_ns),
            (half.tlb.walk_ns, h.tlb.walk_ns),
            (half.host.ept_violation_ns, h.host.ept_violation_ns),
        ] {
            assert!((a - 2.0 * b).abs() < 1e-9, "{a} vs 2 x {b}");
        }
        assert_eq!(half.cost.lru_batch, h.cost.lru_batch, "a kernel constant");
        assert_eq!(half.cost.cacheline_cross_socket_ns, h.cost.cacheline_cross_socket_ns, "a fact, not given");
        assert_eq!(half.sources["cost.cacheline_cross_socket_ns"].kind, Kind::Assumed);
        assert_eq!(half.sources["cost.fault_base_ns"].kind, Kind::Derived);
        assert!((half.cost.zero_warm_bw_gbps - h.cost.zero_warm_bw_gbps / 2.0).abs() < 1e-9, "cache bytes per clock");
        // A core with a lower performance per clock: slower software.
        let hsw = derived("[cpu]\nfreq_ghz = 3.0\ncore = \"haswell\"\n");
        let (ppc, _) = rule().per_clock("haswell").unwrap();
        assert!(ppc < 1.0);
        assert!((hsw.cost.fault_base_ns - h.cost.fault_base_ns / ppc).abs() < 1e-6);
    }

    #[test]
    fn memory_values_follow_latency_or_the_given_bandwidth() {
        let h = host();
        let far = derived(&format!("[[nodes]]\nlatency_ns = {}\n", 2.0 * h.nodes[0].latency_ns));
        assert!((far.nodes[0].zero_bw_gbps - h.nodes[0].zero_bw_gbps / 2.0).abs() < 1e-9, "Little's law");
        assert!((far.cost.alloc_cold_ns - 2.0 * h.cost.alloc_cold_ns).abs() < 1e-9);
        let fast = derived(&format!("[[nodes]]\nread_bw_gbps = {}\n", 3.0 * h.nodes[0].read_bw_gbps));
        assert!((fast.nodes[0].copy_bw_gbps - 3.0 * h.nodes[0].copy_bw_gbps).abs() < 1e-9);
        let d = derived("").nodes.len();
        assert_eq!(d, h.nodes.len(), "no [[nodes]]: the host's");
        let dram: toml::Table =
            "name = \"t\"\ndescription = \"d\"\n[derive]\nhost = \"h\"\ndram_channels = 6\ndram_mts = 2666\n[[nodes]]\nkind = \"dram\"\n"
                .parse()
                .unwrap();
        let (t, s) = derive(&dram, &Sources::new(), &h).unwrap();
        let bw = t["nodes"][0]["shared_bw_gbps"].as_float().unwrap();
        assert!((bw - 6.0 * 2666.0 * 8.0 / 1000.0 * rule().stream_efficiency).abs() < 1e-9);
        assert_eq!(s["nodes[0].shared_bw_gbps"].kind, Kind::Derived);
    }

    #[test]
    fn errors_name_the_key() {
        let h = host();
        for (extra, key) in [
            ("[cpu]\ncore = \"pentium\"\n", "cpu.core"),
            ("[derive]\nbogus = 1\n", "derive.bogus"),
            ("[derive]\ndram_mts = 3200\n", "derive"),
            ("[bogus]\nx = 1\n", "bogus"),
        ] {
            let text = format!("name = \"t\"\ndescription = \"d\"\n{extra}");
            let mut d: toml::Table = text.parse().unwrap();
            d.entry("derive").or_insert(toml::Value::Table(toml::Table::new())).as_table_mut().unwrap().insert("host".into(), "h".into());
            let e = derive(&d, &Sources::new(), &h).unwrap_err();
            assert_eq!(e.0, key, "{extra}: {e:?}");
        }
    }

    /// Every value of a profile has a class, so that a field added later
    /// is derived or refused, never silently copied.
    #[test]
    fn every_value_has_a_class() {
        let p = host();
        let toml::Value::Table(t) = toml::Value::try_from(&p).unwrap() else { unreachable!() };
        for path in provenance::value_paths(&t) {
            let (table, key) = path.split_once('.').unwrap();
            let table = table.split('[').next().unwrap();
            assert!(class(table, key).is_some(), "{path} has no class in hw/derive.rs");
        }
    }

    #[test]
    fn the_cores_chain_to_the_reference() {
        let r = rule();
        for c in r.core_names() {
            let (x, why) = r.per_clock(c).unwrap();
            assert!(x > 0.3 && x < 3.0, "{c}: {x} ({why})");
            assert!(r.sources.contains_key(&format!("cores.{c}.per_clock_ratio")), "{c}: its ratio has a source");
        }
        assert!(parse_rule("[memory]\nstream_efficiency_ratio = 0.8\n[cores.a]\nbase = \"b\"\nper_clock_ratio = 1.0\n[cores.b]\nbase = \"a\"\nper_clock_ratio = 1.0\n").is_err());
        assert_eq!(num(1.23456), "1.235");
        assert_eq!(num(300.0), "300");
        assert_eq!(num(0.0123456), "0.01235");
    }
}
