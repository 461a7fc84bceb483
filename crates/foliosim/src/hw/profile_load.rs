//! Loading a profile file: its tags read, a derived profile completed by
//! the rule (hw/derive.rs), every value checked against its unit.

use crate::hw::profile::{builtin, check_values, Profile};
use crate::hw::{derive, provenance};

/// Why a profile file did not load: the value's path (`cost.trap_ns`,
/// `(profile)` for the file as a whole), its line when known, the reason.
#[derive(Debug)]
pub struct ProfileError {
    pub line: Option<usize>,
    pub key: String,
    pub reason: String,
}

impl ProfileError {
    fn at(key: impl Into<String>, reason: impl Into<String>) -> ProfileError {
        ProfileError { line: None, key: key.into(), reason: reason.into() }
    }
}

/// A profile file's text as a profile, every value with its source
/// (hw/provenance.rs); a derived profile (a `[derive]` table) completed by
/// the rule of hw/derive.rs from its host, which `load_host` loads by the
/// name the file gives.
pub fn parse(text: &str, load_host: &mut dyn FnMut(&str) -> Result<Profile, String>) -> Result<Profile, ProfileError> {
    let syntax = |e: toml::de::Error| ProfileError {
        line: e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1),
        key: "(profile)".into(),
        reason: e.message().lines().next().unwrap_or("").to_string(),
    };
    let doc: toml::Table = text.parse().map_err(syntax)?;
    // Every number against its unit (NaN, negative costs, ...): serde takes them as f64.
    check_values(&doc).map_err(|at| ProfileError::at(at.path(), at.reason))?;
    let cites = provenance::citations(&doc).map_err(|(k, r)| ProfileError::at(k, r))?;
    let tags = provenance::read_tags(text, &cites).map_err(|e| ProfileError { line: Some(e.line), key: e.key, reason: e.reason })?;
    let mut prof = match derive::host_of(&doc).map_err(|(k, r)| ProfileError::at(k, r))? {
        None => {
            let mut prof: Profile = toml::from_str(text).map_err(syntax)?;
            prof.sources = provenance::value_paths(&doc)
                .into_iter()
                .map(|p| {
                    let s = tags.get(&p).cloned().unwrap_or_else(|| provenance::Source::new(provenance::Kind::None, "", ""));
                    (p, s)
                })
                .collect();
            prof
        }
        Some(host_name) => {
            let host = load_host(&host_name).map_err(|r| ProfileError::at("derive.host", r))?;
            let (full, sources) = derive::derive(&doc, &tags, &host).map_err(|(k, r)| ProfileError::at(k, r))?;
            check_values(&full).map_err(|v| ProfileError::at(v.path(), format!("as derived: {}", v.reason)))?;
            let mut prof: Profile =
                toml::Value::Table(full).try_into().map_err(|e: toml::de::Error| ProfileError::at("(profile)", e.message().to_string()))?;
            prof.sources = sources;
            prof
        }
    };
    prof.validate().map_err(|(k, r)| ProfileError::at(k, r))?;
    prof.citations.clear();
    Ok(prof)
}

/// A built-in profile, loaded as a config naming it would (derived ones
/// completed from their built-in hosts).
pub fn load_builtin(name: &str) -> Result<Profile, String> {
    let text = builtin(name).ok_or_else(|| format!("no built-in profile {name}"))?;
    parse(text, &mut |h| load_builtin(h))
        .map_err(|e| format!("profile {name}: {}{}: {}", e.line.map_or(String::new(), |l| format!("line {l}: ")), e.key, e.reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::profile::{unit_of, BUILTIN};

    #[test]
    fn every_builtin_profile_parses_and_validates() {
        for (name, _) in BUILTIN {
            let p = load_builtin(name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(&p.name, name, "profile {name}: `name` must match its BUILTIN key");
            assert!(!p.description.contains("PLACEHOLDER"), "profile {name} is still a placeholder");
            if let Err((k, why)) = p.validate() {
                panic!("profile {name}: {k}: {why}");
            }
            // Every TLB geometry must also build a TLB.
            let _ = crate::hw::tlb::Tlb::new(&p.tlb);
        }
        assert!(builtin("generic-x86").is_some());
        assert!(builtin("no-such-machine").is_none());
    }

    /// Every number a Profile holds (defaulted fields included) has a unit,
    /// so `check_values` covers a field the day it is added.
    #[test]
    fn every_profile_number_has_a_unit() {
        fn walk(v: &serde_json::Value, key: &str, missing: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => m.iter().for_each(|(k, x)| walk(x, k, missing)),
                serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, key, missing)),
                // (f64 NaN serialises as null: no built-in holds one.)
                serde_json::Value::Number(_) | serde_json::Value::Null if unit_of(key).is_none() => missing.push(key.to_string()),
                _ => {}
            }
        }
        for (name, _) in BUILTIN {
            let p = load_builtin(name).unwrap();
            let mut missing = Vec::new();
            walk(&serde_json::to_value(&p).unwrap(), "", &mut missing);
            assert!(missing.is_empty(), "profile {name}: no unit for {missing:?}: name the field with a unit suffix (see UNITS)");
        }
    }

    /// The check `make test` runs on the profiles (docs/profiles.md): every
    /// value of every built-in profile has a source of an allowed kind; a
    /// measured one names a program that is in validation/; none was worked
    /// back from a figure a reproduction compares against (the phrases such
    /// a value was marked with before the rule).
    #[test]
    fn every_builtin_value_has_a_source() {
        use crate::hw::provenance::Kind;
        let validation = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../validation");
        let mut counted = 0;
        for (name, _) in BUILTIN {
            let p = load_builtin(name).unwrap();
            let toml::Value::Table(doc) = toml::Value::try_from(&p).unwrap() else { unreachable!() };
            for path in crate::hw::provenance::value_paths(&doc) {
                let s = p.sources.get(&path).unwrap_or_else(|| panic!("profile {name}: {path} has no source"));
                match s.kind {
                    Kind::None => {
                        panic!("profile {name}: {path} has no source: tag it [measured: validation/X.c], [public: KEY] or [assumed] why")
                    }
                    Kind::Measured => {
                        let prog = s.what.split_whitespace().next().unwrap_or("");
                        assert!(
                            validation.join(prog.trim_start_matches("validation/")).is_file(),
                            "profile {name}: {path}: {prog} is not in validation/"
                        );
                    }
                    Kind::Public => assert!(!s.what.is_empty(), "profile {name}: {path}: a public figure cites its source"),
                    Kind::Derived | Kind::Assumed => {}
                }
                let text = format!("{} {}", s.what, s.note).to_lowercase();
                for banned in ["by construction", "worked back", "derived from the published", "[d]"] {
                    assert!(
                        !text.contains(banned),
                        "profile {name}: {path}: {banned:?}: a value must not come from a figure a reproduction compares against"
                    );
                }
                counted += 1;
            }
        }
        assert!(counted > 8 * 100, "{counted} values checked");
    }
}
