//! The policy registry (crates/foliosim/src/policy/): a policy selected by
//! name in a config is the one that runs, its own knobs reach it and need
//! it selected, and the example order policy of docs/tutorial.md maps the
//! orders it says (counted as in hugepages-<size>kB/stats).

use foliosim::kernel::knobs::{KnobDefault, Knobs};
use serde_json::Value;
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(text: &str, name: &str) -> Value {
    let cfg = foliosim::api::load_toml(text, name).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&foliosim::api::run_json(&cfg, &mut |_| true).unwrap()).unwrap()
}

/// anon_fault_alloc per folio size, as hugepages-<size>kB/stats names it.
fn allocs(v: &Value) -> Vec<(String, u64)> {
    v["mthp"]["per_size"].as_object().unwrap().iter().map(|(k, s)| (k.clone(), s["anon_fault_alloc"].as_u64().unwrap())).collect()
}

#[test]
fn example_order_policy_maps_only_its_order() {
    let path = repo().join("configs/policy-only-order.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    for (order, size) in [(4, "hugepages-64kB"), (3, "hugepages-32kB")] {
        let text = text.replace("\"anon_folio.only_order\" = 4", &format!("\"anon_folio.only_order\" = {order}"));
        let v = run(&text, &path.display().to_string());
        assert_eq!(v["config"]["knobs"]["anon_folio.mode"], "only-order");
        assert_eq!(v["config"]["knobs"]["anon_folio.only_order"], order);
        for (k, n) in allocs(&v) {
            if k == size {
                assert!(n > 0, "only-order {order}: no {k} folio was allocated");
            } else {
                assert_eq!(n, 0, "only-order {order}: {n} folios of {k}");
            }
        }
        assert_eq!(v["vmstat"]["thp_fault_alloc"], 0, "only-order never maps a PMD");
        assert!(v["vmstat"]["pgfault"].as_i64().unwrap() > 0);
        assert_eq!(v["checker"]["enabled"], true);
        assert_eq!(v["checker"]["violations"].as_array().unwrap().len(), 0, "{}", v["checker"]);
    }
}

/// Each registered policy behaves as its own: the mix of folio sizes a
/// config gets differs by the policy it names (a registry line pointing
/// at the wrong file changes it).
#[test]
fn each_order_policy_name_selects_its_own_policy() {
    let text = std::fs::read_to_string(repo().join("configs/policy-only-order.toml")).unwrap();
    let with = |mode: &str, extra: &str| {
        let t = text.replace(
            "\"anon_folio.mode\" = \"only-order\"\n\"anon_folio.only_order\" = 4\n",
            &format!("\"anon_folio.mode\" = \"{mode}\"\n{extra}"),
        );
        // The benchmark's region only: the process image's small mappings
        // fall back to smaller orders by their own size.
        let t = t.replace("[workload]\n", "[workload]\nprocess_image = \"none\"\n");
        let v = run(&t, "<test>");
        allocs(&v).into_iter().filter(|(_, n)| *n > 0).map(|(k, _)| k).collect::<Vec<_>>()
    };
    assert_eq!(with("off", ""), Vec::<String>::new());
    // RFC v2: orders max_order (4) down to 2, whatever sysfs says.
    assert_eq!(with("rfc-v2", ""), vec!["hugepages-64kB".to_string()]);
    // Upstream: only what the per-size controls allow (16 KiB here).
    assert_eq!(
        with("upstream", "\"kernel/mm/transparent_hugepage/hugepages-16kB/enabled\" = \"always\"\n"),
        vec!["hugepages-16kB".to_string()]
    );
    assert_eq!(with("only-order", "\"anon_folio.only_order\" = 5\n"), vec!["hugepages-128kB".to_string()]);
}

#[test]
fn a_policy_knob_needs_its_policy_and_an_unknown_name_is_an_error() {
    let text = std::fs::read_to_string(repo().join("configs/policy-only-order.toml")).unwrap();
    let e = foliosim::api::load_toml(&text.replace("\"only-order\"", "\"upstream\""), "x.toml").unwrap_err().to_string();
    assert!(e.contains("x.toml") && e.contains("anon_folio.only_order") && e.contains("anon_folio.mode = \"only-order\""), "{e}");
    assert!(!e.contains('\n'), "{e}");
    let e = foliosim::api::load_toml(&text.replace("\"only-order\"", "\"largest\""), "x.toml").unwrap_err().to_string();
    assert!(e.contains("x.toml") && e.contains("anon_folio.mode") && e.contains("only-order"), "{e}");
    // Not selected, a policy's knob is not part of the normalised config.
    let cfg = foliosim::api::load_toml(&text.replace("\"anon_folio.only_order\" = 4\n", "").replace("\"only-order\"", "\"off\""), "x.toml")
        .unwrap();
    let v: Value = serde_json::from_str(&foliosim::api::run_json(&cfg, &mut |_| true).unwrap()).unwrap();
    assert!(v["config"]["knobs"].get("anon_folio.only_order").is_none());
}

/// The knob table: every selector offers exactly its kind's policies, every
/// key is unique, and `Knobs::default()` is what the table's defaults say
/// (each default, set again, changes nothing).
#[test]
fn knob_table_is_consistent() {
    use foliosim::policy;
    let all = policy::knobs();
    let mut keys: Vec<&str> = all.iter().map(|s| s.key).collect();
    keys.sort();
    let n = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), n, "a knob key is declared twice");
    let values = |key: &str| policy::find(key).unwrap().values.unwrap().to_vec();
    assert_eq!(values("anon_folio.mode"), policy::ANON_ORDER.policies.iter().map(|p| p.name).collect::<Vec<_>>());
    assert_eq!(values("fault_locking"), policy::FAULT_LOCK.policies.iter().map(|p| p.name).collect::<Vec<_>>());
    assert_eq!(values("promotion_list_order"), policy::PROMOTION.policies.iter().map(|p| p.name).collect::<Vec<_>>());
    let d = Knobs::default();
    for spec in all.iter().filter(|s| s.owner.is_none()) {
        let mut k = d.clone();
        k.set(spec, &spec.default_value());
        assert_eq!(format!("{k:?}"), format!("{d:?}"), "{}: Knobs::default() is not its table default", spec.key);
        if let (KnobDefault::Str(s), Some(vals)) = (&spec.default, spec.values) {
            assert!(vals.contains(s), "{}: default \"{s}\" is not one of its values", spec.key);
        }
    }
    // debug.mutant: the knob's values are MUTANTS' names, each parsing to its own mutant.
    let m = foliosim::kernel::knobs::MUTANTS;
    assert_eq!(policy::find("debug.mutant").unwrap().values.unwrap(), m.iter().map(|x| x.0).collect::<Vec<_>>());
    for (i, (name, mutant)) in m.iter().enumerate() {
        assert_eq!(foliosim::kernel::knobs::Mutant::named(name), *mutant);
        assert!(m[..i].iter().all(|(_, o)| o != mutant), "{name}: two names for one mutant");
    }
    // The line/rwsem mutants reach the line model (Kernel::boot puts them in
    // its LineCost); sim/lock.rs's tests show each breaks a test there.
    use foliosim::sim::lock::LockMutant;
    let lock = |n: &str| foliosim::kernel::knobs::Mutant::named(n).lock_mutant();
    assert_eq!(lock("line_out_of_order"), LockMutant::LineOutOfOrder);
    assert_eq!(lock("rwsem_reader_sleeps_without_writer"), LockMutant::ReaderSleepsWithoutWriter);
    assert_eq!(lock("spf_skip_seq_check"), LockMutant::None);
}
