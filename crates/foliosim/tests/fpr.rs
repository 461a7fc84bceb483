//! End-to-end tests of free page reporting and the host model (spec/003),
//! with the invariant checker on.

use foliosim::config;
use foliosim::mm::vmstat::Stat;
use foliosim::run::{self, Outcome};

fn sim(toml: &str) -> Outcome {
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    run::simulate(&c, &mut |_| true).unwrap()
}

fn st(o: &Outcome, s: Stat) -> i64 {
    o.kernel.stat.get(s)
}

/// A 512 MiB guest running memhog `mib` twice, `sleep_ms` apart.
fn guest(knobs: &str, mib: u64, sleep_ms: u64, dur: f64) -> String {
    format!(
        "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n[workload]\nname = \"memhog\"\nsize_mib = {mib}\ncycles = 2\nsleep_ms = {sleep_ms}\n[knobs]\n\"host.prealloc\" = true\n{knobs}\n[run]\nwarmup_s = 0.0\nduration_s = {dur}\ncheck = true\naudit_interval_ms = 250.0\n"
    )
}

#[test]
fn reported_memory_leaves_the_host_and_refaults_zeroed() {
    let on = sim(&guest("\"page_reporting.enabled\" = true", 256, 6000, 7.0));
    assert!(on.kernel.check.violations.is_empty(), "{:?}", on.kernel.check.violations);
    assert!(on.kernel.check.audits > 2);
    assert!(st(&on, Stat::PageReportingPasses) >= 2);
    let reported = st(&on, Stat::PageReportingReportedPages);
    assert!(reported > 0 && reported % 512 == 0, "whole order >= 9 blocks are reported: {reported}");
    // The second memhog cycle allocated pages the host had dropped.
    assert!(st(&on, Stat::HostFaults) > 0, "no host refault");
    assert_eq!(st(&on, Stat::HostFaults), st(&on, Stat::HostZeroedPages), "DONTNEED refaults zero 4 KiB each");
    let off = sim(&guest("", 256, 6000, 7.0));
    assert!(off.kernel.check.violations.is_empty());
    assert_eq!(st(&off, Stat::HostFaults), 0);
    assert_eq!(st(&off, Stat::HostRss), 512 * 256, "without reporting the host keeps everything");
    assert!(st(&on, Stat::HostRss) < st(&off, Stat::HostRss) - 64 * 256, "reporting gave memory back: {}", st(&on, Stat::HostRss));
}

#[test]
fn madv_free_refaults_without_zeroing() {
    let o = sim(&guest("\"page_reporting.enabled\" = true\n\"host.discard\" = \"free\"", 256, 6000, 7.0));
    assert!(o.kernel.check.violations.is_empty(), "{:?}", o.kernel.check.violations);
    assert!(st(&o, Stat::HostLazyfreeReuse) > 0);
    assert_eq!(st(&o, Stat::HostZeroedPages), 0, "MADV_FREE pages come back without host zeroing");
    assert_eq!(st(&o, Stat::HostRss), 512 * 256, "MADV_FREE alone does not shrink RSS");
}

#[test]
fn checker_catches_reported_flag_kept_on_allocation() {
    let o = sim(&guest("\"page_reporting.enabled\" = true\n\"debug.mutant\" = \"fpr_keep_reported_on_alloc\"", 256, 6000, 7.0));
    let v = &o.kernel.check.violations;
    assert!(v.iter().any(|m| m.contains("PG_reported")), "mutant not caught: {v:?}");
}

#[test]
fn idle_guest_reports_a_sixteenth_per_list_per_pass_until_done() {
    // A 4 GiB idle guest: 1024 order-10 blocks -> budget ceil(1024/512) = 2,
    // so 3 report calls of 32 blocks reach order 10 in the first pass.
    let t = |dur: f64| format!("[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [4096]\n[workload]\nname = \"memhog\"\nsize_mib = 1\n[knobs]\n\"host.prealloc\" = true\n\"page_reporting.enabled\" = true\n[run]\nwarmup_s = 0.0\nduration_s = {dur}\ncheck = true\naudit_interval_ms = 500.0\n");
    let one = sim(&t(3.0));
    assert!(one.kernel.check.violations.is_empty(), "{:?}", one.kernel.check.violations);
    assert_eq!(st(&one, Stat::PageReportingPasses), 1, "the first pass starts 2 s after registration");
    assert_eq!(st(&one, Stat::PageReportingBudgetExhausted), 1, "the order-10 list ran out of budget");
    let calls = st(&one, Stat::PageReportingCalls);
    assert!((3..=4).contains(&calls), "budget + 1 full calls (+ leftover): {calls}");
    assert!(st(&one, Stat::PageReportingReportedPages) <= 4 * 32 * 1024);
    let all = sim(&t(30.0));
    assert!(all.kernel.check.violations.is_empty());
    let free = all.kernel.pa.nr_free() as i64;
    let flagged = st(&all, Stat::NrReportedPages);
    assert!(flagged > free * 9 / 10, "idle guest not fully reported: {flagged} of {free}");
    assert!(st(&all, Stat::PageReportingPasses) < 14, "the worker goes idle once done");
}

#[test]
fn disabled_reporting_leaves_the_allocator_untouched() {
    let base = "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n[workload]\nname = \"page_fault1\"\nsize_mib = 4\n[run]\nwarmup_s = 0.0\nduration_s = 0.05\n";
    let a = sim(base);
    let b = sim(&base.replace("[run]", "[knobs]\n\"page_reporting.enabled\" = false\n\"page_reporting.page_reporting_order\" = 9\n\"page_reporting.reported_putback\" = \"v17_head_rules\"\n[run]"));
    assert_eq!(a.kernel.stat.v, b.kernel.stat.v);
    assert_eq!(a.kernel.pa.free_extents(), b.kernel.pa.free_extents());
}

#[test]
fn host_limit_swaps_and_reporting_avoids_it() {
    // 512 MiB guest allowed 320 MiB of host memory, memhog 256 MiB twice
    // with shuffling (different frames each cycle).
    let k = "\"host.prealloc\" = false\n\"host.mem_mib\" = 320\n\"page_alloc.shuffle\" = true";
    let off = sim(&guest(k, 256, 6000, 8.0).replace("\"host.prealloc\" = true\n", ""));
    let on = sim(&guest(&format!("{k}\n\"page_reporting.enabled\" = true"), 256, 6000, 8.0).replace("\"host.prealloc\" = true\n", ""));
    for o in [&off, &on] {
        assert!(o.kernel.check.violations.is_empty(), "{:?}", o.kernel.check.violations);
        assert!(st(o, Stat::HostRss) <= 320 * 256);
    }
    assert!(st(&off, Stat::HostPswpout) > 0, "the limit forced no swap");
    assert!(st(&on, Stat::HostPswpout) < st(&off, Stat::HostPswpout), "reporting did not reduce host swap: {} vs {}", st(&on, Stat::HostPswpout), st(&off, Stat::HostPswpout));
}

#[test]
fn memhog_then_runs_the_test_after_memhog() {
    let o = sim("[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n[workload]\nname = \"memhog_then\"\nhog_mib = 64\nsettle_ms = 20\ntest = \"page_fault2\"\ntasks = 2\nsize_mib = 4\n[run]\nwarmup_s = 0.0\nduration_s = 0.2\ncheck = true\naudit_interval_ms = 20.0\n");
    assert!(o.kernel.check.violations.is_empty(), "{:?}", o.kernel.check.violations);
    let ops: Vec<u64> = o.kernel.tasks.iter().map(|t| t.ops).collect();
    assert_eq!(ops[0], 64 * 256, "memhog touched its pages once");
    assert!(ops[1] > 0 && ops[2] > 0, "both test tasks ran: {ops:?}");
    assert!(st(&o, Stat::FaultCow) > 0, "page_fault2 copies");
}
