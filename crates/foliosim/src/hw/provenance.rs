//! Where each number of a machine profile comes from.
//!
//! A value's source is one of four kinds (docs/profiles.md): *measured*
//! here by a named program of `validation/`, a *public* figure with its
//! source, *derived* by the rule of hw/derive.rs from other values, or
//! *assumed* with the reason. A profile file says it in a tag that opens
//! the value's comment:
//!
//! ```toml
//! [sources]
//! ark = "Intel ARK, Xeon Gold 6430"
//!
//! [cpu]
//! freq_ghz = 2.1          # [public: ark] base clock
//! l2_kib = 2048           # [measured: validation/calibrate.c] ...
//! walk_cached_ns = 5.0    # [assumed] why
//! ```
//!
//! `public` names a key of the file's `[sources]` table (its full
//! citation), so that every public figure can be traced to one. Derived
//! values are never written in a file: the rule writes them, with their
//! arithmetic. A file without tags (or with bracketed notes of its own,
//! `[G]`) still loads, its values then saying "no source given"; the
//! built-in profiles all carry tags, which `every_builtin_value_has_a_source`
//! checks.

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Measured,
    Public,
    Derived,
    Assumed,
    /// An untagged value of a user's profile file.
    None,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Measured => "measured",
            Kind::Public => "public",
            Kind::Derived => "derived",
            Kind::Assumed => "assumed",
            Kind::None => "no source given",
        }
    }
}

/// One value's source.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Source {
    pub kind: Kind,
    /// measured: the program (`validation/calibrate.c`); public: the
    /// citations of the keys named, `; `-separated; derived: the rule's
    /// arithmetic with its numbers; assumed, none: empty.
    pub what: String,
    /// The rest of the comment: what the figure is, how it was taken.
    pub note: String,
}

impl Source {
    pub fn new(kind: Kind, what: impl Into<String>, note: impl Into<String>) -> Source {
        Source { kind, what: what.into(), note: note.into() }
    }

    /// One line for `--explain`: `public (Intel ARK ...): base clock`.
    pub fn describe(&self) -> String {
        let mut s = self.kind.name().to_string();
        if !self.what.is_empty() {
            s += &format!(" ({})", self.what);
        }
        if !self.note.is_empty() {
            s += &format!(": {}", self.note);
        }
        s
    }
}

/// Sources by value path: `cpu.freq_ghz`, `nodes[1].latency_ns`.
pub type Sources = BTreeMap<String, Source>;

/// The tables of a profile whose values carry sources (`[derive]` and
/// `[sources]` are about the file, not values of the machine).
pub const VALUE_TABLES: &[&str] = &["cpu", "nodes", "tlb", "cost", "host"];

/// A tag that does not parse, at a 1-based line.
#[derive(Debug, PartialEq)]
pub struct TagError {
    pub line: usize,
    pub key: String,
    pub reason: String,
}

/// The tags of a profile file's value lines, by path, and the file's
/// `[sources]` citations. Untagged values are left out; a malformed tag,
/// or a `public` one naming a key that `[sources]` lacks, is an error.
pub fn read_tags(text: &str, citations: &BTreeMap<String, String>) -> Result<Sources, TagError> {
    read_tags_in(text, citations, &|t| VALUE_TABLES.contains(&t))
}

/// `read_tags` over the tables `wanted` accepts (profiles/rule.toml tags
/// its `[cores.NAME]` tables).
pub fn read_tags_in(text: &str, citations: &BTreeMap<String, String>, wanted: &dyn Fn(&str) -> bool) -> Result<Sources, TagError> {
    let mut out = Sources::new();
    let mut table = String::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut slot: Option<usize> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(h) = line.strip_prefix("[[") {
            table = h.split("]]").next().unwrap_or("").trim().to_string();
            let i = index.entry(table.clone()).or_insert(0);
            slot = Some(*i);
            *i += 1;
            continue;
        }
        if let Some(h) = line.strip_prefix('[') {
            table = h.split(']').next().unwrap_or("").trim().to_string();
            slot = None;
            continue;
        }
        if !wanted(&table) {
            continue;
        }
        let Some((key, rest)) = line.split_once('=') else { continue };
        let key = key.trim().trim_matches('"').to_string();
        let path = match slot {
            Some(i) => format!("{table}[{i}].{key}"),
            None => format!("{table}.{key}"),
        };
        let Some(comment) = comment_of(rest) else { continue };
        let err = |reason: String| TagError { line: n + 1, key: path.clone(), reason };
        let comment = comment.trim();
        let Some(tag) = comment.strip_prefix('[') else { continue };
        let Some((tag, note)) = tag.split_once(']') else { return Err(err("a tag opens with [ but has no ]".into())) };
        let note = note.trim().to_string();
        let (kind, arg) = match tag.split_once(':') {
            Some((k, a)) => (k.trim(), a.trim()),
            None => (tag.trim(), ""),
        };
        let src = match kind {
            "measured" => {
                if !(arg.starts_with("validation/") && arg.len() > "validation/".len()) {
                    return Err(err(format!("[measured: ...] names the program of validation/ that measured it, got {arg:?}")));
                }
                Source::new(Kind::Measured, arg, note)
            }
            "public" => {
                let keys: Vec<&str> = arg.split(',').map(str::trim).filter(|k| !k.is_empty()).collect();
                if keys.is_empty() {
                    return Err(err("[public: KEY] names its source, a key of the file's [sources] table".into()));
                }
                let mut cites = Vec::new();
                for k in keys {
                    match citations.get(k) {
                        Some(c) => cites.push(c.clone()),
                        None => return Err(err(format!("[public: {k}]: the file's [sources] table has no {k}"))),
                    }
                }
                Source::new(Kind::Public, cites.join("; "), note)
            }
            "assumed" => {
                if note.is_empty() && arg.is_empty() {
                    return Err(err("[assumed] says why after the tag".into()));
                }
                Source::new(Kind::Assumed, "", if arg.is_empty() { note } else { format!("{arg} {note}").trim().to_string() })
            }
            "derived" => return Err(err("a derived value is written by the rule (hw/derive.rs), not by hand: leave the key out".into())),
            // Some other bracketed note (an older file's own tags): untagged.
            _ => continue,
        };
        out.insert(path, src);
    }
    Ok(out)
}

/// The comment after a TOML value (`1.0  # text`): the first `#` outside
/// a string.
fn comment_of(rest: &str) -> Option<&str> {
    let b = rest.as_bytes();
    let mut i = 0;
    let mut quote: Option<u8> = None;
    while i < b.len() {
        match (quote, b[i]) {
            (None, b'#') => return Some(&rest[i + 1..]),
            (None, q @ (b'"' | b'\'')) => quote = Some(q),
            (Some(b'"'), b'\\') => i += 1,
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The `[sources]` table of a profile document: key -> citation.
pub fn citations(doc: &toml::Table) -> Result<BTreeMap<String, String>, (String, String)> {
    let mut out = BTreeMap::new();
    match doc.get("sources") {
        None => {}
        Some(toml::Value::Table(t)) => {
            for (k, v) in t {
                match v {
                    toml::Value::String(s) if !s.trim().is_empty() => {
                        out.insert(k.clone(), s.clone());
                    }
                    _ => return Err((format!("sources.{k}"), "a source is a citation string".into())),
                }
            }
        }
        Some(_) => return Err(("sources".into(), "a table of citations, key = \"...\"".into())),
    }
    Ok(out)
}

/// Every value path of a profile document (its numbers, booleans and
/// strings in the value tables).
pub fn value_paths(doc: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    for table in VALUE_TABLES {
        match doc.get(*table) {
            Some(toml::Value::Table(t)) => out.extend(t.keys().map(|k| format!("{table}.{k}"))),
            Some(toml::Value::Array(a)) => {
                for (i, e) in a.iter().enumerate() {
                    if let Some(t) = e.as_table() {
                        out.extend(t.keys().map(|k| format!("{table}[{i}].{k}")));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cites() -> BTreeMap<String, String> {
        [("ark".to_string(), "Intel ARK".to_string())].into_iter().collect()
    }

    #[test]
    fn tags_are_read_by_path() {
        let text = "name = \"x # not a comment\"\n[sources]\nark = \"Intel ARK\"\n[cpu]\nfreq_ghz = 2.1  # [public: ark] base clock\n\
                    core = \"a#b\"  # [assumed] nothing published\n[[nodes]]\nlatency_ns = 90.0\n[[nodes]]\nlatency_ns = 200.0 # [measured: validation/calibrate.c] chase\n";
        let s = read_tags(text, &cites()).unwrap();
        assert_eq!(s["cpu.freq_ghz"], Source::new(Kind::Public, "Intel ARK", "base clock"));
        assert_eq!(s["cpu.core"].kind, Kind::Assumed);
        assert!(!s.contains_key("nodes[0].latency_ns"), "untagged");
        assert_eq!(s["nodes[1].latency_ns"], Source::new(Kind::Measured, "validation/calibrate.c", "chase"));
        // Another file's own bracketed notes are no tags: the value is untagged.
        assert!(read_tags("[cost]\nx_ns = 1.0 # [G] a range\n", &cites()).unwrap().is_empty());
    }

    #[test]
    fn bad_tags_are_refused_naming_line_and_key() {
        for (line, why) in [
            ("x_ns = 1.0 # [public: nope] a", "has no nope"),
            ("x_ns = 1.0 # [measured: calibrate.c] a", "validation/"),
            ("x_ns = 1.0 # [assumed]", "says why"),
            ("x_ns = 1.0 # [derived] by hand", "written by the rule"),
        ] {
            let e = read_tags(&format!("[cost]\n{line}\n"), &cites()).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (2, "cost.x_ns"), "{line}");
            assert!(e.reason.contains(why), "{line}: {}", e.reason);
        }
    }
}
