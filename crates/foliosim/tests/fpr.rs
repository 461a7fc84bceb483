//! End-to-end tests of free page reporting and the host model (docs/mechanisms/free-page-reporting.md),
//! with the invariant checker on.

mod common;

use common::H;
use foliosim::config;
use foliosim::mm::vmstat::Stat;
use foliosim::run::{self, Outcome};

/// The run of `toml`; a guest's (page reporting or a host knob) on its
/// host kernel, through the driver of the guests.
fn sim(toml: &str) -> Outcome {
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    if c.host.is_some() {
        return foliosim::virt::guests::simulate_guests(&c, &mut |_| true).unwrap().guests.remove(0);
    }
    run::simulate(&c, &mut |_| true).unwrap()
}

fn st(o: &Outcome, s: Stat) -> i64 {
    o.kernel.stat().get(s)
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
    assert!(on.kernel.check().violations.is_empty(), "{:?}", on.kernel.check().violations);
    assert!(on.kernel.check().audits > 2);
    assert!(st(&on, Stat::PageReportingPasses) >= 2);
    let reported = st(&on, Stat::PageReportingReportedPages);
    assert!(reported > 0 && reported % 512 == 0, "whole order >= 9 blocks are reported: {reported}");
    // The second memhog cycle allocated pages the host had dropped.
    assert!(st(&on, Stat::HostFaults) > 0, "no host refault");
    assert_eq!(st(&on, Stat::HostFaults), st(&on, Stat::HostZeroedPages), "DONTNEED refaults zero 4 KiB each");
    let off = sim(&guest("", 256, 6000, 7.0));
    assert!(off.kernel.check().violations.is_empty());
    assert_eq!(st(&off, Stat::HostFaults), 0);
    assert_eq!(st(&off, Stat::HostRss), 512 * 256, "without reporting the host keeps everything");
    assert!(st(&on, Stat::HostRss) < st(&off, Stat::HostRss) - 64 * 256, "reporting gave memory back: {}", st(&on, Stat::HostRss));
}

#[test]
fn madv_free_refaults_without_zeroing() {
    let o = sim(&guest("\"page_reporting.enabled\" = true\n\"host.discard\" = \"free\"", 256, 6000, 7.0));
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert!(st(&o, Stat::HostLazyfreeReuse) > 0);
    assert_eq!(st(&o, Stat::HostZeroedPages), 0, "MADV_FREE pages come back without host zeroing");
    assert_eq!(st(&o, Stat::HostRss), 512 * 256, "MADV_FREE alone does not shrink RSS");
}

#[test]
fn checker_catches_reported_flag_kept_on_allocation() {
    let o = sim(&guest("\"page_reporting.enabled\" = true\n\"debug.mutant\" = \"fpr_keep_reported_on_alloc\"", 256, 6000, 7.0));
    let v = &o.kernel.check().violations;
    assert!(v.iter().any(|m| m.contains("PG_reported")), "mutant not caught: {v:?}");
}

#[test]
fn idle_guest_reports_a_sixteenth_per_list_per_pass_until_done() {
    // A 4 GiB idle guest: 1024 order-10 blocks -> budget ceil(1024/512) = 2,
    // so 3 report calls of 32 blocks reach order 10 in the first pass.
    let t = |dur: f64| {
        format!("[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [4096]\n[workload]\nname = \"memhog\"\nsize_mib = 1\n[knobs]\n\"host.prealloc\" = true\n\"page_reporting.enabled\" = true\n[run]\nwarmup_s = 0.0\nduration_s = {dur}\ncheck = true\naudit_interval_ms = 500.0\n")
    };
    let one = sim(&t(3.0));
    assert!(one.kernel.check().violations.is_empty(), "{:?}", one.kernel.check().violations);
    assert_eq!(st(&one, Stat::PageReportingPasses), 1, "the first pass starts 2 s after registration");
    assert_eq!(st(&one, Stat::PageReportingBudgetExhausted), 1, "the order-10 list ran out of budget");
    let calls = st(&one, Stat::PageReportingCalls);
    assert!((3..=4).contains(&calls), "budget + 1 full calls (+ leftover): {calls}");
    assert!(st(&one, Stat::PageReportingReportedPages) <= 4 * 32 * 1024);
    let all = sim(&t(30.0));
    assert!(all.kernel.check().violations.is_empty());
    let free = all.kernel.pa().nr_free() as i64;
    let flagged = st(&all, Stat::NrReportedPages);
    assert!(flagged > free * 9 / 10, "idle guest not fully reported: {flagged} of {free}");
    assert!(st(&all, Stat::PageReportingPasses) < 14, "the worker goes idle once done");
}

#[test]
fn disabled_reporting_leaves_the_allocator_untouched() {
    let base = "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n[workload]\nname = \"page_fault1\"\nsize_mib = 4\n[run]\nwarmup_s = 0.0\nduration_s = 0.05\n";
    let a = sim(base);
    let b = sim(&base.replace("[run]", "[knobs]\n\"page_reporting.enabled\" = false\n\"page_reporting.page_reporting_order\" = 9\n\"page_reporting.reported_putback\" = \"v17_head_rules\"\n[run]"));
    assert_eq!(a.kernel.stat().v, b.kernel.stat().v);
    assert_eq!(a.kernel.pa().free_extents(), b.kernel.pa().free_extents());
}

#[test]
fn host_limit_swaps_and_reporting_avoids_it() {
    // A 512 MiB guest on a host with 320 MiB and swap, memhog 256 MiB
    // twice with shuffling (different frames each cycle).
    let k = "\"page_alloc.shuffle\" = true";
    let host = "[host]\nnode_mem_mib = [320]\n[host.knobs]\n\"swap.size_mib\" = 1024\n[run]";
    let off = sim(&guest(k, 256, 6000, 8.0).replace("\"host.prealloc\" = true\n", "").replace("[run]", host));
    let on = sim(&guest(&format!("{k}\n\"page_reporting.enabled\" = true"), 256, 6000, 8.0)
        .replace("\"host.prealloc\" = true\n", "")
        .replace("[run]", host));
    for o in [&off, &on] {
        assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
        assert!(st(o, Stat::HostRss) <= 320 * 256);
    }
    assert!(st(&off, Stat::HostPswpout) > 0, "the limit forced no swap");
    assert!(
        st(&on, Stat::HostPswpout) < st(&off, Stat::HostPswpout),
        "reporting did not reduce host swap: {} vs {}",
        st(&on, Stat::HostPswpout),
        st(&off, Stat::HostPswpout)
    );
}

#[test]
fn memhog_then_runs_the_test_after_memhog() {
    let o = sim("[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n[workload]\nname = \"memhog_then\"\nhog_mib = 64\nsettle_ms = 20\ntest = \"page_fault2\"\ntasks = 2\nsize_mib = 4\n[run]\nwarmup_s = 0.0\nduration_s = 0.2\ncheck = true\naudit_interval_ms = 20.0\n");
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    let ops: Vec<u64> = o.kernel.tasks().iter().map(|t| t.ops).collect();
    assert_eq!(ops[0], 64 * 256, "memhog touched its pages once");
    assert!(ops[1] > 0 && ops[2] > 0, "both test tasks ran: {ops:?}");
    assert!(st(&o, Stat::FaultCow) > 0, "page_fault2 copies");
}

/// As many test tasks as vCPUs, each pair of vCPUs one core's SMT threads:
/// the waiting tasks sleep through memhog and the settle time (they do not
/// spin, which would stretch every sibling's time and leave the waiters'
/// own count of time behind the clock), so every one starts the test.
#[test]
fn memhog_then_waiters_sleep_and_all_start_on_a_full_smt_guest() {
    let o = sim("[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [1024]\n[workload]\nname = \"memhog_then\"\nhog_mib = 16\nsettle_ms = 300\ntest = \"page_fault1\"\ntasks = 16\nsize_mib = 4\n[run]\nwarmup_s = 0.0\nduration_s = 0.5\n");
    assert_eq!(o.kernel.nr_cpus(), 16);
    let settle = 300_000_000;
    for t in &o.kernel.tasks()[1..] {
        assert!(t.ops > 0, "test task {} never started", t.id);
        // Asleep for the settle time: little user time, about 3 ms of
        // nanosleep calls (one a poll_ms), the rest of the clock asleep.
        assert!(t.user_ns < settle / 2, "task {} spent {} ns of user time waiting", t.id, t.user_ns);
        assert!(t.entry_ns[foliosim::mm::vmstat::Entry::Nanosleep as usize] > 0);
    }
}

#[test]
fn bad_guest_configs_are_one_line_errors() {
    let base = "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\nGUESTS\n[workload]\nname = \"memhog\"\nsize_mib = 64\n[knobs]\nKNOBS\n";
    let e = |g: &str, k: &str| config::from_toml(&base.replace("GUESTS", g).replace("KNOBS", k), "g.toml").unwrap_err().to_string();
    let m = e("guests = 0", "");
    assert!(m.starts_with("g.toml:4: machine.guests:") && !m.contains('\n'), "{m}");
    assert!(e("guests = \"two\"", "").contains("machine.guests"));
    assert!(e("guests = 65", "").contains("1..=64"));
    assert!(e("guest_stagger_ms = 5", "").contains("needs machine.guests >= 2"));
    assert!(e("guests = 2\nguest_stagger_ms = -1", "").contains("machine.guest_stagger_ms"));
    let m = e("guests = 4", "\"host.mem_mib\" = 1024");
    assert!(m.contains("knobs.host.mem_mib") && m.contains("[host] node_mem_mib") && !m.contains('\n'), "{m}");
    let m = e("", "\"host.thp\" = true");
    assert!(m.contains("knobs.host.thp") && m.contains("[host.knobs]"), "{m}");
    assert!(config::from_toml(&base.replace("GUESTS", "guests = 3").replace("KNOBS", ""), "g.toml").is_ok());
}

#[test]
fn a_task_sharing_the_workers_cpu_is_not_held_up_by_its_timed_sleep() {
    // Two CPUs, the reporting worker on the last one. A 4 GiB guest's
    // initial sweep exhausts the order-10 budget, so each pass ends with a
    // 2 s timed sleep; the task it preempted must get the CPU back at the
    // end of the pass, not when the worker's timer fires.
    let o = sim("[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [4096]\nnr_cpus = 2\n[workload]\nname = \"page_fault1\"\ntasks = 2\nsize_mib = 16\n[knobs]\n\"host.prealloc\" = true\n\"page_reporting.enabled\" = true\n[run]\nwarmup_s = 0.0\nduration_s = 7.0\n");
    assert!(st(&o, Stat::PageReportingPasses) >= 2, "the worker ran passes");
    let worker_cpu = 1;
    let ops = |cpu: u32| o.kernel.tasks().iter().filter(|t| t.kthread.is_none() && t.cpu == cpu).map(|t| t.ops).sum::<u64>() as f64;
    assert!(ops(worker_cpu) > 0.95 * ops(0), "task on the worker's CPU lost time: {} vs {}", ops(worker_cpu), ops(0));
}

/// memhog 256 MiB twice with large anonymous folios (`knobs` picks the
/// order): the second cycle's folios come from blocks reporting gave to
/// the host, whatever the allocation path. Returns the run and the same
/// run with 4 KiB folios.
fn large_folio_guest(knobs: &str) -> (Outcome, Outcome) {
    let large = sim(&guest(&format!("\"page_reporting.enabled\" = true\n{knobs}"), 256, 6000, 7.0));
    let small = sim(&guest("\"page_reporting.enabled\" = true", 256, 6000, 7.0));
    (large, small)
}

/// Every path that hands out a folio faults the host back in: the large
/// folios of the second memhog cycle re-fault reported memory as its
/// 4 KiB pages do (same blocks reported, same memory re-used), the
/// checker's use and audit rules hold, and host RSS covers the memhog.
fn assert_large_folios_refault(large: &Outcome, small: &Outcome, what: &str) {
    assert!(large.kernel.check().violations.is_empty(), "{what}: {:?}", large.kernel.check().violations);
    assert!(large.kernel.check().audits > 2);
    let (fl, fs) = (st(large, Stat::HostFaults), st(small, Stat::HostFaults));
    assert!(st(large, Stat::PageReportingReportedPages) > 0);
    assert!(fs > 0 && fl > 0, "{what}: no host fault for reported memory the second cycle took ({fl} against {fs} with 4 KiB folios)");
    // The same memory comes back: the host faults the large folios take
    // are within a quarter of the 4 KiB run's (a folio may straddle a
    // reported block, so they need not be equal).
    assert!((fl - fs).abs() * 4 <= fs, "{what}: {fl} host faults against {fs} with 4 KiB folios");
    assert!(st(large, Stat::HostFaultAllocs) > 0);
}

#[test]
fn thp_folios_fault_reported_memory_back_in() {
    let (large, small) = large_folio_guest("\"kernel/mm/transparent_hugepage/enabled\" = \"always\"");
    assert!(st(&large, Stat::ThpFaultAlloc) >= 128, "the memhog took PMD THPs");
    assert_large_folios_refault(&large, &small, "PMD THP");
}

#[test]
fn mthp_folios_fault_reported_memory_back_in() {
    let (large, small) = large_folio_guest("\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"");
    assert_eq!(st(&large, Stat::ThpFaultAlloc), 0);
    assert!(st(&large, Stat::MthpFaultAlloc) >= 2048, "the memhog took 64 KiB folios");
    assert_large_folios_refault(&large, &small, "mTHP");
}

/// The golden config's case (tests/golden/configs/memhog-fpr-guest.toml):
/// a guest whose host backs nothing at boot, THP always, memhog 256 MiB:
/// the host holds the memhog's memory, faulted in 2 MiB... by 4 KiB
/// host pages (host THP off), one host fault each.
#[test]
fn thp_memhog_on_an_unbacked_guest_is_backed_by_the_host() {
    let o = sim("seed = 13\n[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [1024]\n[workload]\nname = \"memhog\"\nsize_mib = 256\n[knobs]\n\"page_reporting.enabled\" = true\n\"kernel/mm/transparent_hugepage/enabled\" = \"always\"\n[run]\nwarmup_s = 0.0\nduration_s = 0.6\ncheck = true\naudit_interval_ms = 20.0\n");
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(st(&o, Stat::ThpFaultAlloc), 128);
    let faults = st(&o, Stat::HostFaults);
    assert!(faults >= 256 * 256, "the memhog's 65536 frames were faulted in on the host: {faults}");
    assert_eq!(faults, st(&o, Stat::HostZeroedPages));
    assert!(st(&o, Stat::HostRss) >= 256 * 256, "host RSS {}", st(&o, Stat::HostRss));
}

#[test]
fn checker_catches_a_guest_page_used_without_host_backing() {
    let o = sim(&guest("\"page_reporting.enabled\" = true\n\"debug.mutant\" = \"fpr_skip_host_fault\"", 256, 6000, 7.0));
    let v = &o.kernel.check().violations;
    assert!(v.iter().any(|m| m.contains("while the host has no page behind them")), "mutant not caught: {v:?}");
    // Large folios too, on the THP path.
    let o = sim(&guest(
        "\"page_reporting.enabled\" = true\n\"kernel/mm/transparent_hugepage/enabled\" = \"always\"\n\"debug.mutant\" = \"fpr_skip_host_fault\"",
        256,
        6000,
        7.0,
    ));
    let v = &o.kernel.check().violations;
    assert!(v.iter().any(|m| m.contains("cleared while the host has no page")), "THP path not caught: {v:?}");
}

/// A migration target is a fresh allocation too: `move_pages` of a
/// process's pages to node 1 of a guest whose host backs nothing of node
/// 1 (no prealloc, never touched: as after a report) faults every target
/// frame in before the copy, and the checker's copy rule holds.
#[test]
fn migration_targets_fault_the_host_back_in() {
    let mut h = H::boot("\"page_reporting.enabled\" = true", 1);
    let a = h.allocator(0);
    let t = h.alloc_write(a, 0, 64);
    let (base, _) = h.arena[&a];
    let mm = h.k.tasks()[a as usize].mm as usize;
    let frames = |h: &H| -> Vec<foliosim::mm::Pfn> { (0..64).map(|i| h.k.mms()[mm].pt().pte(base + i * 4096).pfn()).collect() };
    let src = frames(&h);
    assert!(src.iter().all(|&p| h.k.pfn_to_nid(p) == 0));
    let faults = h.stat("foliosim_host_faults");
    let (moved, t) = h.k.move_pages_to_node(t + 100, 0, &src, 1);
    assert_eq!(moved, 64);
    let dst = frames(&h);
    assert!(dst.iter().all(|&p| h.k.pfn_to_nid(p) == 1));
    let host = h.k.host().expect("a guest");
    let unbacked: Vec<_> = dst.iter().filter(|&&p| !host.holds(p)).collect();
    assert!(unbacked.is_empty(), "migration targets the host does not back: {unbacked:?}");
    assert!(h.stat("foliosim_host_faults") - faults >= 64, "no host fault for the targets");
    h.run(a, t, foliosim::workload::Op::AccessRange { addr: base, stride: 4096, count: 64, kind: foliosim::workload::Access::Load });
    assert!(h.violations().is_empty(), "{:?}", h.violations());
}

/// nanosleep is a system call like any other (`Kernel::sys`): its
/// syscalls:sys_enter/exit tracepoints fire once per call, in pairs.
#[test]
fn nanosleep_goes_through_the_system_call_path_and_its_tracepoints() {
    let cfg = serde_json::json!({
        "seed": 1,
        "machine": {"profile": "e5-2630v3-guest-32g", "node_mem_mib": [1024]},
        "workload": {"name": "memhog_then", "hog_mib": 16, "settle_ms": 50, "test": "page_fault1", "tasks": 2, "size_mib": 4},
        "run": {"warmup_s": 0.0, "duration_s": 0.1,
                "probes_record": ["syscalls:sys_enter_nanosleep", "syscalls:sys_exit_nanosleep"]},
    });
    let out: serde_json::Value = serde_json::from_str(&foliosim::api::run_json(&cfg.to_string(), &mut |_| true).unwrap()).unwrap();
    let n = |w: &str| out["probes"][format!("syscalls:sys_{w}_nanosleep")]["events"].as_array().map_or(0, |v| v.len());
    assert!(n("enter") > 0, "no sys_enter_nanosleep: {}", out["probes"]);
    assert_eq!(n("enter"), n("exit"));
}
