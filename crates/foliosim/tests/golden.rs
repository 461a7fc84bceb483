//! Golden outputs: every config in `tests/golden/configs/` is run and its
//! full result JSON, less the host's own time, is compared byte for byte
//! with `tests/golden/expected/NAME.json`.
//!
//! A change of output must be deliberate: rerun with `make golden` (which
//! sets FOLIOSIM_BLESS=1) to rewrite the expected files, commit them with
//! the change, and say in the commit message which figures moved and why.
//! On a mismatch the actual output is left in
//! `target/golden-actual/NAME.json` and the first differing values are
//! printed.

use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The prefix a normalised config gives the files of this checkout (paths
/// are stored absolute), written `<repo>` in the golden files so that they
/// hold no path of one machine.
fn repo_prefix() -> String {
    std::fs::canonicalize(repo()).unwrap().display().to_string()
}

/// Result JSON of one golden config, host-dependent fields removed.
fn run_config(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let cfg = foliosim::api::load_toml(&text, &path.display().to_string())
        .unwrap_or_else(|e| panic!("golden config {} does not load: {e}", path.display()));
    let out = foliosim::api::run_json(&cfg, &mut |_| true).unwrap_or_else(|e| panic!("golden config {} fails: {e}", path.display()));
    let mut v: Value = serde_json::from_str(&out).unwrap();
    v.as_object_mut().unwrap().remove("host_time_s");
    let mut s = serde_json::to_string_pretty(&v).unwrap().replace(&format!("\"{}/", repo_prefix()), "\"<repo>/");
    s.push('\n');
    assert!(!s.contains(&repo_prefix()), "{}: a path of this machine is left in the output", path.display());
    s
}

/// Up to `max` leaf paths where two JSON documents differ.
fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>, max: usize) {
    if out.len() >= max {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                match y.get(k) {
                    Some(vb) => differences(va, vb, &format!("{path}.{k}"), out, max),
                    None => out.push(format!("{path}.{k}: only in expected")),
                }
            }
            for k in y.keys().filter(|k| !x.contains_key(*k)) {
                out.push(format!("{path}.{k}: only in actual"));
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(va, vb, &format!("{path}[{i}]"), out, max);
            }
        }
        _ if a != b => out.push(format!("{path}: expected {a}, got {b}")),
        _ => {}
    }
}

#[test]
fn golden_outputs_are_unchanged() {
    let dir = repo().join("tests/golden");
    let bless = std::env::var_os("FOLIOSIM_BLESS").is_some();
    let mut configs: Vec<PathBuf> = std::fs::read_dir(dir.join("configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    configs.sort();
    assert!(configs.len() >= 20, "the golden set has {} configs", configs.len());
    let actual_dir = repo().join("target/golden-actual");
    let mut failed = Vec::new();
    for path in &configs {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let want_path = dir.join("expected").join(format!("{name}.json"));
        let got = match std::panic::catch_unwind(|| run_config(path)) {
            Ok(got) => got,
            Err(_) => {
                failed.push(format!("{name}: the simulation panicked (see above)"));
                continue;
            }
        };
        if bless {
            std::fs::create_dir_all(want_path.parent().unwrap()).unwrap();
            std::fs::write(&want_path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&want_path).unwrap_or_default();
        if want != got {
            std::fs::create_dir_all(&actual_dir).unwrap();
            std::fs::write(actual_dir.join(format!("{name}.json")), &got).unwrap();
            let mut diffs = Vec::new();
            match serde_json::from_str::<Value>(&want) {
                Ok(w) => differences(&w, &serde_json::from_str(&got).unwrap(), "", &mut diffs, 8),
                Err(_) => diffs.push(format!("{} is missing or not JSON", want_path.display())),
            }
            failed.push(format!("{name}:\n    {}", diffs.join("\n    ")));
        }
    }
    // An expected file whose config is gone is stale.
    for e in std::fs::read_dir(dir.join("expected")).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        if !configs.iter().any(|c| c.file_stem().unwrap().to_string_lossy() == stem) {
            if bless {
                std::fs::remove_file(&p).unwrap();
            } else {
                failed.push(format!("{stem}: expected output without a config"));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "golden outputs differ (a deliberate change: `make golden`, commit the files, say why):\n{}",
        failed.join("\n")
    );
}
