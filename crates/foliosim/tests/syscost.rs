//! The terms `foliosim calibrate` fits on validation/syscost.c's cases are
//! charged where the model runs those very calls (the `syscost` workload),
//! as often as the kernel does the work: each case is run with a term at 0
//! and at 1000 ns, and every call's time (from its syscalls:sys_enter/exit
//! probes) must differ by exactly that many charges.

use serde_json::{json, Value};

fn run(case: &str, x: u64, costs: Value, probes: &[&str], duration_s: f64) -> Value {
    let cfg = json!({
        "seed": 1,
        "machine": {"profile": "generic-x86", "nr_cpus": 2, "costs": costs},
        "workload": {"name": "syscost", "case": case, "x": x, "file_kib": 64},
        "knobs": {"kernel/mm/transparent_hugepage/enabled": "never"},
        "run": {"warmup_s": 0.0, "duration_s": duration_s, "check": true, "probes_record": probes},
    });
    let out: Value = serde_json::from_str(&foliosim::api::run_json(&cfg.to_string(), &mut |_| true).unwrap()).unwrap();
    assert_eq!(out["checker"]["violations"].as_array().map(|v| v.len()), Some(0), "{case}: {}", out["checker"]);
    out
}

/// Every call's body time on `entry`, in order.
fn calls(out: &Value, entry: &str) -> Vec<i64> {
    let ev = |w: &str| out["probes"][format!("syscalls:sys_{w}_{entry}")]["events"].as_array().unwrap().clone();
    ev("enter").iter().zip(ev("exit")).map(|(a, b)| b[0].as_i64().unwrap() - a[0].as_i64().unwrap()).collect()
}

/// What raising `term` from 0 to 1000 ns adds to the first `n` calls on
/// `entry` of a case, call by call.
fn added(case: &str, x: u64, term: &str, entry: &str, n: usize) -> Vec<i64> {
    let probes = [format!("syscalls:sys_enter_{entry}"), format!("syscalls:sys_exit_{entry}")];
    let p: Vec<&str> = probes.iter().map(|s| s.as_str()).collect();
    let a = calls(&run(case, x, json!({term: 0.0}), &p, 0.002), entry);
    let b = calls(&run(case, x, json!({term: 1000.0}), &p, 0.002), entry);
    assert!(a.len() >= n && b.len() >= n, "{case}: {} and {} calls", a.len(), b.len());
    a.iter().zip(&b).take(n).map(|(a, b)| b - a).collect()
}

#[test]
fn mmap_and_munmap_of_an_untouched_region_charge_their_own_term_once() {
    assert_eq!(added("mmap", 8, "mmap_ns", "mmap", 5), vec![1000; 5]);
    assert_eq!(added("mmap", 8, "mmap_ns", "munmap", 5), vec![0; 5]);
    assert_eq!(added("mmap", 8, "munmap_ns", "munmap", 5), vec![1000; 5]);
    // Nothing mapped, nothing to free.
    assert_eq!(added("mmap", 8, "pgtable_free_ns", "munmap", 5), vec![0; 5]);
}

#[test]
fn munmap_frees_one_pte_table_per_2_mib_written() {
    assert_eq!(added("munmap", 4, "pgtable_free_ns", "munmap", 3), vec![4000; 3]);
    assert_eq!(added("munmap", 4, "munmap_ns", "munmap", 3), vec![1000; 3]);
    // Its one VMA was faulted: its anon_vma goes with it, once per call.
    assert_eq!(added("munmap", 4, "unlink_anon_vma_ns", "munmap", 3), vec![1000; 3]);
}

#[test]
fn munmap_walks_each_empty_pmd_entry_twice() {
    // 8 PMD entries with no PTE table under the anchor's PMD table: the
    // zap's walk and free_pgtables' each step over all 8.
    assert_eq!(added("munmap-empty", 8, "pgtable_none_ns", "munmap", 3), vec![16_000; 3]);
    assert_eq!(added("munmap-empty", 8, "pgtable_free_ns", "munmap", 3), vec![0; 3]);
    // Every entry of the munmap case's region has its PTE table: none empty.
    assert_eq!(added("munmap", 4, "pgtable_none_ns", "munmap", 3), vec![0; 3]);
    // The mmap case maps where the kernel places it, below the libraries,
    // whose PMD table covers it: its 4 empty PMD entries, each walk (at
    // the batches' AREA, with nothing else in its 512 GiB, it would be one
    // empty PGD entry).
    assert_eq!(added("mmap", 8, "pgtable_none_ns", "munmap", 3), vec![8_000; 3]);
}

#[test]
fn an_untouched_region_has_no_anon_vma_to_unlink() {
    assert_eq!(added("mmap", 8, "unlink_anon_vma_ns", "munmap", 5), vec![0; 5]);
}

#[test]
fn mprotect_charges_its_splits_and_merges() {
    // The setup's two guard mprotects, then R, RW, R, RW...: with its middle
    // changed, the first call splits twice and the second merges twice.
    let split = added("mprotect-split", 4, "vma_split_ns", "mprotect", 8);
    let merge = added("mprotect-split", 4, "vma_merge_ns", "mprotect", 8);
    assert_eq!(split[2..], [2000, 0, 2000, 0, 2000, 0]);
    assert_eq!(merge[2..], [0, 2000, 0, 2000, 0, 2000]);
    // A whole VMA: no split, no merge; mprotect_ns every call.
    assert_eq!(added("mprotect", 4, "vma_split_ns", "mprotect", 8)[2..], [0; 6]);
    assert_eq!(added("mprotect", 4, "vma_merge_ns", "mprotect", 8)[2..], [0; 6]);
    assert_eq!(added("mprotect", 4, "mprotect_ns", "mprotect", 8), vec![1000; 8]);
}

#[test]
fn brk_down_splits_the_heap_and_up_extends_it() {
    // The query and the setup's raise, then up, down, up, down...
    assert_eq!(added("brk", 16, "brk_ns", "brk", 6)[2..], [1000; 4]);
    assert_eq!(added("brk", 16, "vma_split_ns", "brk", 6)[2..], [0, 1000, 0, 1000]);
    // The heap had pages before the loop: the part split off shares its
    // anon_vma with the part left, which keeps it.
    assert_eq!(added("brk", 16, "unlink_anon_vma_ns", "brk", 6)[2..], [0; 4]);
}

#[test]
fn madvise_dontneed_flushes_each_zapped_page() {
    assert_eq!(added("madvise", 0, "madvise_ns", "madvise", 4), vec![1000; 4]);
    assert_eq!(added("madvise", 0, "tlb_flush_one_ns", "madvise", 4), vec![0; 4], "nothing zapped, nothing flushed");
    assert_eq!(added("madvise", 8, "tlb_flush_one_ns", "madvise", 4), vec![8000; 4]);
}

#[test]
fn read_and_write_charge_the_call_once_and_their_folio_work_per_page() {
    assert_eq!(added("read", 4, "file_op_ns", "read", 4), vec![1000; 4]);
    assert_eq!(added("read", 4, "pagecache_read_ns", "read", 4), vec![4000; 4]);
    assert_eq!(added("read", 4, "pagecache_write_ns", "read", 4), vec![0; 4]);
    assert_eq!(added("read", 4, "pagecache_lookup_ns", "read", 4), vec![0; 4], "a fault's lookup, not read()'s");
    assert_eq!(added("write", 2, "pagecache_write_ns", "write", 4), vec![2000; 4]);
    assert_eq!(added("write", 2, "file_op_ns", "write", 4), vec![1000; 4]);
}

#[test]
fn a_file_that_fits_the_cache_is_copied_from_it_after_its_first_pass() {
    // 64 KiB read a page at a time: the first pass copies from DRAM, the
    // next ones at copy_warm_bw_gbps.
    let probes = ["syscalls:sys_enter_read", "syscalls:sys_exit_read"];
    let slow = calls(&run("read", 1, json!({"copy_warm_bw_gbps": 4.096}), &probes, 0.002), "read");
    let fast = calls(&run("read", 1, json!({"copy_warm_bw_gbps": 40.96}), &probes, 0.002), "read");
    assert!(slow.len() > 40 && fast.len() > 40);
    assert_eq!(slow[..16], fast[..16], "the first pass is cold whatever the warm bandwidth");
    assert_eq!(slow[16] - fast[16], 1000 - 100, "a warm page: 4096 B at 4.096 and at 40.96 GB/s");
}

#[test]
fn fork_and_exit_charge_their_fixed_parts_once() {
    // Five forks, then the parent exits.
    let run5x = |x: u64, term: &str, v: f64| {
        let cfg = json!({
            "seed": 1, "machine": {"profile": "generic-x86", "nr_cpus": 2, "costs": {term: v}},
            "workload": {"name": "syscost", "case": "fork", "x": x, "calls": 5},
            "run": {"warmup_s": 0.0, "duration_s": 0.05, "check": true},
        });
        let out: Value = serde_json::from_str(&foliosim::api::run_json(&cfg.to_string(), &mut |_| true).unwrap()).unwrap();
        let tasks = out["per_task"].as_array().unwrap().clone();
        assert_eq!((tasks.len(), tasks[0]["ops"].as_i64()), (6, Some(5)), "a parent and five children");
        let fork = tasks[0]["time_ns"]["fork"].as_i64().unwrap();
        let exits: Vec<i64> = tasks[1..].iter().map(|t| t["time_ns"]["exit"].as_i64().unwrap()).collect();
        (fork, exits)
    };
    let run5 = |term: &str, v: f64| run5x(8, term, v);
    let (a, b) = (run5("fork_base_ns", 0.0), run5("fork_base_ns", 1000.0));
    assert_eq!((b.0 - a.0, &b.1), (5000, &a.1), "once per fork, nothing in the children's exits");
    let (a, b) = (run5("exit_base_ns", 0.0), run5("exit_base_ns", 1000.0));
    assert_eq!(b.1.iter().zip(&a.1).map(|(b, a)| b - a).collect::<Vec<_>>(), vec![1000; 5]);
    // copy_present_pte: once per present PTE of a private mapping with
    // anonymous pages (the image's too): 8 pages written more, 8 more each.
    let per_pte = |x: u64| run5x(x, "copy_pte_ns", 1000.0).0 - run5x(x, "copy_pte_ns", 0.0).0;
    assert_eq!(per_pte(16) - per_pte(8), 5 * 8 * 1000);
}
