//! The policy registry (crates/foliosim/src/policy/): a policy selected by
//! name in a config is the one that runs, its own knobs reach it and need
//! it selected, the example order policy of docs/tutorial.md maps the
//! orders it says (counted as in hugepages-<size>kB/stats), its example
//! promotion policy takes order-0 folios only, its example discard policy
//! frees lazily below its threshold, the tutorial shows those examples as
//! they are, and each fault-locking policy chooses its way from the fault
//! context it sees; no file but the registry lists the policies, and the
//! tutorial's run without Python and its "which faults reach it" hold.

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
    assert_eq!(values("host.discard"), policy::HOST_DISCARD.policies.iter().map(|p| p.name).collect::<Vec<_>>());
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

/// The example promotion policy of docs/tutorial.md (policy/promo_order0.rs,
/// `promotion_list_order = "order0"`): an order-0 candidate joins the tail
/// of the task's list as with the default ("tail"); a large one stays on its
/// LRU where the default would take it. The model's page cache holds only
/// order-0 folios, so the large case is asked of the policy's interface;
/// the order-0 case also runs end to end, selected by name in a config.
#[test]
fn example_promotion_policy_promotes_only_order0_folios() {
    use foliosim::mm::memory_tiers::{ListEnd, PromoCandidate};
    use foliosim::policy;
    let build = |name: &str| (policy::PROMOTION.policies.iter().find(|p| p.name == name).unwrap().build)(&Knobs::default());
    let (order0, default) = (build("order0"), build("tail"));
    let cand = |order| PromoCandidate { pfn: 1 << 18, nid: 1, dst: 0, order, flags: 0, queued: 0, cap: 1024 };
    assert_eq!(order0.enqueue(&cand(0)), Some(ListEnd::Tail));
    for order in [2, 4, 9] {
        assert_eq!(default.enqueue(&cand(order)), Some(ListEnd::Tail), "the default takes an order-{order} folio");
        assert_eq!(order0.enqueue(&cand(order)), None, "order0 leaves an order-{order} folio on its LRU");
    }
    // A 16 MiB file on the CXL node read in 16 MiB calls: passes 1-3 make
    // its folios hot, then each pass promotes the per-call cap (1024 pages).
    let text = |mode: &str| {
        format!(
            "[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [1024, 512]\n[workload]\nname = \"file_reader\"\nprocess_image = \"none\"\nfs = \"disk\"\nfile_mib = 16\npopulate = true\npopulate_node = 1\nchunk_kib = 16384\ncycles = 9\n[run]\nwarmup_s = 0.0\nduration_s = 10.0\nsample_ms = 100.0\ncheck = true\n[knobs]\n\"kernel.numa_balancing\" = 2\n\"kernel/mm/numa/pagecache_promotion_enabled\" = true\n\"kernel.numa_balancing_promote_rate_limit_MBps\" = 1024\n\"promotion_list_order\" = \"{mode}\"\n"
        )
    };
    let v = run(&text("order0"), "order0.toml");
    assert_eq!(v["config"]["knobs"]["promotion_list_order"], "order0");
    assert_eq!(v["checker"]["violations"].as_array().unwrap().len(), 0, "{}", v["checker"]);
    let promoted = |v: &Value| v["vmstat"]["pgpromote_success"].as_i64().unwrap();
    assert_eq!(promoted(&v), 4096, "order0 promotes every (order-0) page of the file");
    assert_eq!(promoted(&v), promoted(&run(&text("tail"), "tail.toml")), "on order-0 folios it is the default");
}

/// The example discard policy of docs/tutorial.md (policy/discard_pressure.rs,
/// `host.discard = "pressure"`): MADV_FREE below `host.discard_free_below_pct`
/// of the host's limit (or with no limit), MADV_DONTNEED from there. Asked
/// of the interface at both sides of the threshold, then run end to end
/// in a guest with a host limit: with the threshold at 0 every range is
/// dropped and the run is the "dontneed" one, counter for counter; at 100
/// (the host never holds the whole limit) every range is lazily freed, so
/// the second memhog cycle refaults them unzeroed, as with "free".
#[test]
fn example_discard_policy_frees_lazily_below_its_threshold() {
    use foliosim::policy;
    use foliosim::virt::discard::{Advice, DiscardCtx};
    let p = policy::HOST_DISCARD.policies.iter().find(|p| p.name == "pressure").unwrap();
    let pressure = (p.build)(&Knobs::default());
    let ctx = |rss, limit| DiscardCtx { pfn: 0, nr_pages: 512, thp: false, rss, nr_lazy: 0, limit };
    assert_eq!(pressure.advice(&ctx(1 << 20, None)), Advice::Free, "no limit: always lazily");
    assert_eq!(pressure.advice(&ctx(499, Some(1000))), Advice::Free, "below half the limit (the default)");
    assert_eq!(pressure.advice(&ctx(500, Some(1000))), Advice::DontNeed, "from half the limit on");
    let text = |knobs: &str| {
        format!(
            "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n[workload]\nname = \"memhog\"\nsize_mib = 256\ncycles = 2\nsleep_ms = 6000\n[knobs]\n\"host.prealloc\" = true\n\"page_reporting.enabled\" = true\n{knobs}\n[host]\nnode_mem_mib = [1024]\n[run]\nwarmup_s = 0.0\nduration_s = 7.0\ncheck = true\n"
        )
    };
    let stat = |v: &Value, k: &str| v["vmstat"][k].as_i64().unwrap();
    let none = run(&text("\"host.discard\" = \"pressure\"\n\"host.discard_free_below_pct\" = 0"), "pressure0.toml");
    assert_eq!(none["config"]["knobs"]["host.discard_free_below_pct"], 0);
    assert_eq!(none["checker"]["violations"].as_array().unwrap().len(), 0, "{}", none["checker"]);
    assert!(stat(&none, "foliosim_host_faults") > 0, "the second cycle refaults dropped ranges");
    assert_eq!(none["vmstat"], run(&text("\"host.discard\" = \"dontneed\""), "dontneed.toml")["vmstat"], "threshold 0: the dontneed run");
    let all = run(&text("\"host.discard\" = \"pressure\"\n\"host.discard_free_below_pct\" = 100"), "pressure100.toml");
    assert_eq!(all["checker"]["violations"].as_array().unwrap().len(), 0, "{}", all["checker"]);
    assert!(stat(&all, "foliosim_host_lazyfree_reuse") > 0, "threshold 100: ranges are lazily freed and found again");
    assert_eq!(stat(&all, "foliosim_host_zeroed_pages"), 0, "and never zeroed on refault");
}

/// docs/tutorial.md shows each example policy as the file in the
/// repository has it (after the file's `//!` header), so the code the
/// tutorial teaches is the code these tests compile and run.
#[test]
fn the_tutorial_shows_the_example_policies_as_they_are() {
    let tutorial = std::fs::read_to_string(repo().join("docs/tutorial.md")).unwrap();
    for file in ["anon_only_order.rs", "promo_order0.rs", "discard_pressure.rs"] {
        let src = std::fs::read_to_string(repo().join("crates/foliosim/src/policy").join(file)).unwrap();
        let body: Vec<&str> = src.lines().skip_while(|l| l.starts_with("//!")).skip_while(|l| l.is_empty()).collect();
        // At the margin, or indented under a list item.
        let shown = ["", "   "].iter().any(|indent| {
            let lines: Vec<String> = body.iter().map(|l| if l.is_empty() { String::new() } else { format!("{indent}{l}") }).collect();
            tutorial.contains(&format!("{indent}```rust\n{}\n{indent}```", lines.join("\n")))
        });
        assert!(shown, "docs/tutorial.md must show crates/foliosim/src/policy/{file} (after its //! header) as it is");
    }
}

/// Every field of `Knobs` is some row's, and every row lands somewhere: for
/// each row of the table, a value other than its default (another allowed
/// string, the other boolean, a different integer in range) must change
/// the knob values, and together the rows must change every field (each
/// element of an array field too). A field added without a row, or a row
/// whose `land` writes nothing, fails here instead of being silently
/// stuck at zero or ignored.
#[test]
fn every_knob_field_has_a_row_and_every_row_lands() {
    use foliosim::kernel::knobs::KnobValue;
    use foliosim::policy;
    fn leaves(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) => m.iter().for_each(|(k, x)| leaves(x, format!("{path}.{k}"), out)),
            Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| leaves(x, format!("{path}[{i}]"), out)),
            _ => out.push((path, v.clone())),
        }
    }
    let flat = |k: &Knobs| {
        let mut out = Vec::new();
        leaves(&serde_json::to_value(k).unwrap(), String::new(), &mut out);
        out
    };
    let d = Knobs::default();
    let base = flat(&d);
    let mut covered = vec![false; base.len()];
    for spec in policy::knobs().iter().filter(|s| s.owner.is_none()) {
        let others: Vec<KnobValue> = match &spec.default {
            KnobDefault::Bool(b) => vec![KnobValue::Bool(!b)],
            KnobDefault::Str(s) => spec.values.unwrap_or(&[]).iter().filter(|v| *v != s).map(|v| KnobValue::Str(v.to_string())).collect(),
            KnobDefault::Int(i) => {
                let (lo, hi) = spec.range.unwrap_or((i64::MIN, i64::MAX));
                [lo, hi, i.saturating_add(1), i.saturating_sub(1), 0]
                    .into_iter()
                    .filter(|x| x != i && (lo..=hi).contains(x))
                    .map(KnobValue::Int)
                    .collect()
            }
        };
        let mut lands = false;
        for v in others {
            let mut k = d.clone();
            k.set(spec, &v);
            // By path: a value may change shape (debug.mutant's Luf(..)).
            let now: std::collections::BTreeMap<String, Value> = flat(&k).into_iter().collect();
            for (i, (p, a)) in base.iter().enumerate() {
                if now.get(p) != Some(a) {
                    covered[i] = true;
                    lands = true;
                }
            }
        }
        assert!(lands, "{}: no value other than its default changes any field (its row lands nowhere)", spec.key);
    }
    let orphans: Vec<&str> = base.iter().zip(&covered).filter(|(_, c)| !**c).map(|((p, _), _)| p.as_str()).collect();
    assert!(orphans.is_empty(), "fields no row of the knob table sets: {orphans:?}");
}

/// Each fault-locking policy chooses its way from the fault it sees: a
/// fault taken in kernel mode (a uaccess) takes mmap_lock under per-VMA
/// locks (lock_vma_under_rcu is tried only for user faults), and SPF and
/// the classic policy choose the same way whatever the mode.
#[test]
fn fault_lock_policies_choose_from_what_they_see() {
    use foliosim::mm::fault_lock::{FaultLockCtx, FaultPath};
    use foliosim::workload::Access;
    let build = |name: &str| (foliosim::policy::FAULT_LOCK.policies.iter().find(|p| p.name == name).unwrap().build)(&Knobs::default());
    let f = |kernel_mode| FaultLockCtx { mm: 0, cpu: 0, addr: 0x1000, kind: Access::Store, kernel_mode };
    for (name, user, kernel) in [
        ("mmap_lock", FaultPath::MmapLock, FaultPath::MmapLock),
        ("per_vma", FaultPath::PerVma, FaultPath::MmapLock),
        ("spf", FaultPath::Spf, FaultPath::Spf),
    ] {
        let p = build(name);
        assert_eq!((p.path(&f(false)), p.path(&f(true))), (user, kernel), "{name}");
    }
    assert!(build("per_vma").vma_start_write_waits() && !build("spf").vma_start_write_waits());
}

/// `foliosim list policies` comes from the registry: every policy of every
/// kind once, under its selector, with its help and its own knobs; rfc-v2's
/// per-patch switches are its own (declared in its file, not in the kernel's
/// knob table), and the selector's default is marked.
#[test]
fn the_policy_catalog_is_the_registry() {
    use foliosim::policy;
    let cat = policy::catalog();
    let kinds = [
        ("anon_folio.mode", policy::ANON_ORDER.policies.iter().map(|p| (p.name, p.help, p.knobs.len())).collect::<Vec<_>>()),
        ("fault_locking", policy::FAULT_LOCK.policies.iter().map(|p| (p.name, p.help, p.knobs.len())).collect()),
        ("promotion_list_order", policy::PROMOTION.policies.iter().map(|p| (p.name, p.help, p.knobs.len())).collect()),
        ("host.discard", policy::HOST_DISCARD.policies.iter().map(|p| (p.name, p.help, p.knobs.len())).collect()),
    ];
    assert_eq!(cat.len(), kinds.iter().map(|k| k.1.len()).sum::<usize>());
    for (selector, entries) in &kinds {
        let listed: Vec<_> = cat.iter().filter(|p| p["selector"] == *selector).collect();
        let got: Vec<_> = listed
            .iter()
            .map(|p| (p["name"].as_str().unwrap(), p["help"].as_str().unwrap(), p["knobs"].as_array().unwrap().len()))
            .collect();
        assert_eq!(&got, entries, "{selector}");
        assert_eq!(listed.iter().filter(|p| p["default"] == true).count(), 1, "{selector}: one default");
    }
    let rfc = cat.iter().find(|p| p["name"] == "rfc-v2").unwrap();
    let own: Vec<&str> = rfc["knobs"].as_array().unwrap().iter().map(|k| k["key"].as_str().unwrap()).collect();
    assert!(own.contains(&"anon_folio.max_order") && own.contains(&"anon_folio.batch_zap") && own.len() == 7, "{own:?}");
    assert!(foliosim::kernel::knobs::table().iter().all(|s| !own.contains(&s.key)), "rfc-v2's knobs are its own");
    assert!(own.iter().all(|k| policy::find(k).unwrap().owner == Some(("anon_folio.mode", "rfc-v2"))));
}

/// No file but the registry lists a kind's policies by hand (a list that
/// goes stale when a policy is added, as the selector help texts once
/// missed three): no line of the engine (outside policy/), the binding or
/// the Python package names two policies of one kind, and no docs page
/// enumerates a selector's values (`"a" / "b"`); they point to `foliosim
/// list policies SELECTOR`, which reads the registry.
#[test]
fn no_file_but_the_registry_lists_the_policies() {
    use foliosim::policy;
    let kinds: [(&str, Vec<&str>); 4] = [
        ("anon_folio.mode", policy::ANON_ORDER.policies.iter().map(|p| p.name).collect()),
        ("fault_locking", policy::FAULT_LOCK.policies.iter().map(|p| p.name).collect()),
        ("promotion_list_order", policy::PROMOTION.policies.iter().map(|p| p.name).collect()),
        ("host.discard", policy::HOST_DISCARD.policies.iter().map(|p| p.name).collect()),
    ];
    fn files(dir: &std::path::Path, ext: &str, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, ext, out);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    let mut code = Vec::new();
    files(&repo().join("crates/foliosim/src"), "rs", &mut code);
    files(&repo().join("crates/foliosim-py/src"), "rs", &mut code);
    files(&repo().join("python/foliosim"), "py", &mut code);
    code.retain(|p| !p.starts_with(repo().join("crates/foliosim/src/policy")));
    let mut docs = Vec::new();
    files(&repo().join("docs"), "md", &mut docs);
    assert!(code.len() > 50 && docs.len() > 10, "the scan found the sources");
    let mut found = Vec::new();
    for (path, is_doc) in code.iter().map(|p| (p, false)).chain(docs.iter().map(|p| (p, true))) {
        let text = std::fs::read_to_string(path).unwrap();
        for (i, line) in text.lines().enumerate() {
            for (selector, names) in &kinds {
                let named: Vec<&&str> = if is_doc {
                    names.iter().filter(|n| names.iter().any(|m| line.contains(&format!("\"{n}\" / \"{m}\"")))).collect()
                } else {
                    names.iter().filter(|n| line.contains(&format!("\"{n}\"")) || line.contains(&format!("'{n}'"))).collect()
                };
                if named.len() >= if is_doc { 1 } else { 2 } {
                    found.push(format!("{}:{}: {selector}: {named:?}", path.display(), i + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "policies listed by hand (name the registry instead: `foliosim list policies`):\n{}", found.join("\n"));
}

/// The tutorial's Rust-only run path ("Without Python", section 9) is code
/// that runs: its lines are this test's, from the repository's root.
#[test]
fn the_tutorials_run_without_python_runs() -> Result<(), Box<dyn std::error::Error>> {
    let tutorial = std::fs::read_to_string(repo().join("docs/tutorial.md"))?;
    let lines = [
        r#"let path = "configs/policy-only-order.toml";"#,
        "let cfg = foliosim::config::from_toml(&std::fs::read_to_string(path)?, path)?;",
        "let out = foliosim::run::simulate(&cfg, &mut |_| true)?; // the progress callback: true = go on",
        "let result = foliosim::run::result_json(&cfg, &out); // the JSON `foliosim run` writes",
    ];
    assert!(lines.iter().all(|l| tutorial.contains(&format!("   {l}\n"))), "docs/tutorial.md shows these lines");
    let path = "configs/policy-only-order.toml";
    let text = std::fs::read_to_string(repo().join(path))?;
    let cfg = foliosim::config::from_toml(&text, path)?;
    let out = foliosim::run::simulate(&cfg, &mut |_| true)?; // the progress callback: true = go on
    let result = foliosim::run::result_json(&cfg, &out); // the JSON `foliosim run` writes
    assert!(result["mthp"]["per_size"]["hugepages-64kB"]["anon_fault_alloc"].as_u64().unwrap() > 0, "{}", result["mthp"]["per_size"]);
    Ok(())
}

/// The tutorial's "Which faults reach it": a process image's anonymous VMAs
/// (.bss, heap, stack, TLS; `process_image = "glibc"`) fault through the
/// order policy like the workload's own region. rfc-v2 maps 64 KiB folios
/// in the benchmark's region; only with the image do its smaller
/// mappings ask it too, and get the smaller orders their size leaves.
#[test]
fn a_process_images_anonymous_vmas_reach_the_order_policy() {
    let text = std::fs::read_to_string(repo().join("configs/policy-only-order.toml")).unwrap();
    let text = text.replace("\"anon_folio.mode\" = \"only-order\"\n\"anon_folio.only_order\" = 4\n", "\"anon_folio.mode\" = \"rfc-v2\"\n");
    let sizes = |image: &str| {
        let t = text.replace("[workload]\n", &format!("[workload]\nprocess_image = \"{image}\"\n"));
        allocs(&run(&t, "<test>")).into_iter().filter(|(_, n)| *n > 0).map(|(k, _)| k).collect::<Vec<_>>()
    };
    assert_eq!(sizes("none"), vec!["hugepages-64kB".to_string()]);
    let with = sizes("glibc");
    assert!(with.contains(&"hugepages-64kB".to_string()) && with.len() > 1, "{with:?}");
}
