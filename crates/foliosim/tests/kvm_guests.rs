//! Guests on a host kernel (a `[host]` table, virt/kvm.rs): one host for
//! every guest of a run, its own knobs, swap and THP; the guests' reports
//! are the VMM's madvise on it, and what the host drops the guests' TLBs
//! forget (the remote flush).

mod common;

use common::H;
use foliosim::config;
use foliosim::mm::vmstat::Stat;
use foliosim::sim::Ns;
use foliosim::virt::guests::{simulate_guests, GuestsOutcome};
use foliosim::virt::kvm::KvmHost;
use foliosim::workload::{Access, Op};

fn st(o: &foliosim::run::Outcome, s: Stat) -> i64 {
    o.kernel.stat().get(s)
}

/// Two 512 MiB guests on a host with 704 MiB and 1 GiB of swap: guest 0
/// runs memhog 448 MiB once and idles; guest 1 boots 40 s later and does
/// the same.
fn two_guests(reporting: bool, extra_knobs: &str) -> GuestsOutcome {
    two_guests_on(reporting, extra_knobs, "")
}

/// As `two_guests`, with `host_knobs` (TOML lines) in [host.knobs].
fn two_guests_on(reporting: bool, extra_knobs: &str, host_knobs: &str) -> GuestsOutcome {
    let toml = format!(
        "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\nguests = 2\nguest_stagger_ms = 40000\n\
         [host]\nnode_mem_mib = [704]\n[host.knobs]\n\"swap.size_mib\" = 1024\n{host_knobs}\n\
         [workload]\nname = \"memhog\"\nsize_mib = 448\nprocess_image = \"none\"\n\
         [knobs]\n\"page_reporting.enabled\" = {reporting}\n{extra_knobs}\n\
         [run]\nwarmup_s = 0.0\nduration_s = 45.0\nsample_ms = 500.0\ncheck = true\naudit_interval_ms = 2000.0\n"
    );
    let c = config::from_toml(&toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    assert!(c.host.is_some());
    simulate_guests(&c, &mut |_| true).unwrap_or_else(|e| panic!("{e}"))
}

fn host_vmstat(o: &GuestsOutcome, s: Stat) -> i64 {
    foliosim::virt::guests::kvm(&o.host).k.stat().get(s)
}

#[test]
fn memory_one_guest_reports_serves_another_without_host_swap() {
    let on = two_guests(true, "");
    let off = two_guests(false, "");
    for o in [&on, &off] {
        for g in &o.guests {
            assert!(g.kernel.check().violations.is_empty(), "{:?}", g.kernel.check().violations);
            assert!(g.kernel.check().audits >= 1);
        }
        assert_eq!(o.guests[1].kernel.tasks().iter().map(|t| t.ops).sum::<u64>(), 448 * 256, "guest 1's memhog finished");
    }
    // Without reporting the host kernel's reclaim swaps guest 0's cold
    // memory out to make room for guest 1's.
    assert!(host_vmstat(&off, Stat::Pswpout) > 64 * 256, "the host swapped: {}", host_vmstat(&off, Stat::Pswpout));
    assert!(off.host.guest_pages(0).1 > 64 * 256, "guest 0's pages went to swap: {:?}", off.host.guest_pages(0));
    let charged: i64 = off.guests.iter().map(|g| st(g, Stat::HostPswpout)).sum();
    assert_eq!(charged, host_vmstat(&off, Stat::Pswpout), "every host swap-out is charged to the guest whose page went out");
    assert!(st(&off.guests[0], Stat::HostPswpout) > 64 * 256, "guest 0's pages went out while guest 1 ran");
    // With it guest 0 gave its memory back with madvise, and guest 1 ran in it.
    assert_eq!(host_vmstat(&on, Stat::Pswpout), 0);
    assert!(on.host.guest_pages(0).0 < 64 * 256, "guest 0 gave its memory back: {:?}", on.host.guest_pages(0));
    assert!(st(&on.guests[0], Stat::HostDiscardedPages) > 300 * 256);
    // The host's swap-outs and discards dropped SPTEs of guest 0, whose
    // vCPUs flushed their TLBs for it.
    assert!(st(&off.guests[0], Stat::KvmRemoteTlbFlush) > 0);
    assert!(st(&on.guests[0], Stat::KvmRemoteTlbFlush) > 0);
}

/// Put the harness's kernel on a host kernel of its own (a default host
/// config) as its one guest. The guest's profile is the harness's,
/// generic-x86, as the host's.
fn on_a_host_kernel(h: &mut H) {
    let hc = config::from_toml("[workload]\nname = \"mmap1\"\n[host]\n", "<host>").unwrap();
    h.on_a_host_kernel(hc.host.unwrap(), &hc.profile, &hc.knobs);
}

/// A guest kernel (the tests' harness) on a host kernel: a process writes
/// a mapping, the host drops one of its frames (the VMM's MADV_DONTNEED,
/// as a host-side zap of memory the guest still maps would), the remote
/// flush is applied as the multi-guest driver applies it when it lends the
/// host, and the process reads the page again. Returns the harness.
fn host_drops_a_mapped_frame(knobs: &str) -> H {
    let mut h = H::boot(knobs, 1);
    on_a_host_kernel(&mut h);
    let p = h.process(0);
    let (base, t) = h.anon(p, 0, true);
    let mm = h.k.tasks()[p as usize].mm as usize;
    let pfn = h.k.mms()[mm].pt().pte(base).pfn();
    let kvm = h.k.host_mut().as_mut().unwrap().0.as_any_mut().downcast_mut::<KvmHost>().unwrap();
    let mut stat = foliosim::mm::vmstat::VmStat::default();
    let t = t + kvm.discard_range(pfn, 1, t, &mut stat);
    assert!(!kvm.ept_present(0, pfn));
    h.k.kvm_remote_flush();
    let faults = h.stat("foliosim_host_faults");
    h.run(p, t, Op::AccessRange { addr: base, stride: 4096, count: 1, kind: Access::Load });
    if !knobs.contains("mutant") {
        assert_eq!(h.stat("foliosim_host_faults"), faults + 1, "the re-read missed the TLB and took an EPT violation");
    }
    h
}

#[test]
fn a_frame_the_host_dropped_is_refaulted_after_the_remote_flush() {
    let h = host_drops_a_mapped_frame("");
    assert!(h.violations().is_empty(), "{:?}", h.violations());
    assert_eq!(h.stat("foliosim_kvm_remote_tlb_flush"), 1);
}

#[test]
fn a_guest_that_skips_the_remote_flush_uses_frames_the_host_took() {
    let h = host_drops_a_mapped_frame("\"debug.mutant\" = \"kvm_skip_remote_flush\"");
    let v = h.violations();
    assert!(v.iter().any(|m| m.contains("host has no page behind them")), "{v:?}");
}

#[test]
fn host_thp_backs_a_guest_with_2m_pages() {
    let toml = "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n\
         [host]\n[host.knobs]\n\"kernel/mm/transparent_hugepage/enabled\" = \"always\"\n\
         [workload]\nname = \"memhog\"\nsize_mib = 64\nprocess_image = \"none\"\n\
         [run]\nwarmup_s = 0.0\nduration_s = 2.0\ncheck = true\n";
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = simulate_guests(&c, &mut |_| true).unwrap();
    let g = &o.guests[0];
    assert!(g.kernel.check().violations.is_empty(), "{:?}", g.kernel.check().violations);
    assert!(st(g, Stat::HostThpFaults) >= 32, "{}", st(g, Stat::HostThpFaults));
    // The guest's counters are its run's; the host's count the blocks
    // backed at set-up too.
    assert!(host_vmstat(&o, Stat::ThpFaultAlloc) >= st(g, Stat::HostThpFaults));
}

#[test]
fn bad_host_tables_are_one_line_errors() {
    let base = "HOST\n[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n[workload]\nname = \"memhog\"\nsize_mib = 64\n[knobs]\nKNOBS\n";
    let e = |h: &str, k: &str| config::from_toml(&base.replace("HOST", h).replace("KNOBS", k), "h.toml").unwrap_err().to_string();
    let m = e("[host]\nnode_mem_mib = [1, 2]", "");
    assert!(m.starts_with("h.toml:") && m.contains("host.node_mem_mib") && !m.contains('\n'), "{m}");
    let m = e("[host]\nbogus = 1", "");
    assert!(m.contains("host.bogus") && m.contains("unknown key"), "{m}");
    let m = e("[host]\n[host.knobs]\n\"no.such\" = 1", "");
    assert!(m.contains("host.knobs.no.such") && m.contains("unknown knob"), "{m}");
    let m = e("[host]\nprofile = \"nope\"", "");
    assert!(m.contains("host.profile"), "{m}");
    let m = e("[host]", "\"host.mem_mib\" = 512");
    assert!(m.contains("knobs.host.mem_mib") && m.contains("node_mem_mib"), "{m}");
    let m = e("[host]\nnode_mem_mib = [256]", "\"host.prealloc\" = true");
    assert!(m.contains("host.node_mem_mib") && m.contains("514 MiB"), "{m}");
    let m = e("host = 3", "");
    assert!(m.contains("host") && m.contains("expected a table"), "{m}");
    assert!(config::from_toml(&base.replace("HOST", "[host]").replace("KNOBS", ""), "h.toml").is_ok());
}

/// A guest with THP `always` over a host whose THP is `host_thp`: the
/// result of its memhog of 64 MiB.
fn thp_guest(host_thp: &str) -> GuestsOutcome {
    let toml = format!(
        "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n\
         [host]\n[host.knobs]\n\"kernel/mm/transparent_hugepage/enabled\" = \"{host_thp}\"\n\
         [workload]\nname = \"memhog\"\nsize_mib = 64\npasses = 4\nprocess_image = \"none\"\n\
         [knobs]\n\"kernel/mm/transparent_hugepage/enabled\" = \"always\"\n\
         [run]\nwarmup_s = 0.0\nduration_s = 2.0\ncheck = true\n"
    );
    let c = config::from_toml(&toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    simulate_guests(&c, &mut |_| true).unwrap()
}

#[test]
fn a_guest_thp_over_4k_host_pages_fills_4k_tlb_entries() {
    let (small, large) = (thp_guest("never"), thp_guest("always"));
    for o in [&small, &large] {
        assert!(o.guests[0].kernel.check().violations.is_empty(), "{:?}", o.guests[0].kernel.check().violations);
        assert!(st(&o.guests[0], Stat::ThpFaultAlloc) >= 32, "the guest maps its memhog with THPs");
    }
    assert_eq!(st(&small.guests[0], Stat::TlbFillPmd), 0, "the host maps 4 KiB: so do the guest's TLB entries");
    assert!(st(&large.guests[0], Stat::TlbFillPmd) > 0, "host THPs: 2 MiB entries");
    assert!(
        st(&small.guests[0], Stat::DtlbStoreMisses) > 4 * st(&large.guests[0], Stat::DtlbStoreMisses),
        "4 KiB entries miss more: {} against {}",
        st(&small.guests[0], Stat::DtlbStoreMisses),
        st(&large.guests[0], Stat::DtlbStoreMisses)
    );
}

/// Every guest TLB miss pays the host's walk of the final guest-physical
/// address: four host levels over 4 KiB host pages, at a quarter of the
/// host profile's walk each.
#[test]
fn a_guest_tlb_miss_pays_the_host_walk() {
    let read = |host: bool| -> Ns {
        let mut h = H::boot("", 1);
        if host {
            on_a_host_kernel(&mut h);
        }
        let p = h.process(0);
        let (base, t) = h.anon(p, 0, true);
        h.k.cpu_mut(0).tlb.flush_all();
        let t1 = h.run(p, t, Op::AccessRange { addr: base, stride: 4096, count: common::PAGES, kind: Access::Load }).1;
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        t1 - t
    };
    let walk_ns = config::from_toml("[workload]\nname = \"mmap1\"\n", "<host>").unwrap().profile.tlb.walk_ns;
    let level = foliosim::sim::ns(walk_ns / 4.0);
    assert_eq!(read(true) - read(false), common::PAGES * 4 * level);
}

/// The host's audit runs with the guests': an mmu notifier the host's
/// swap-out skips leaves an SPTE over a page the VMM no longer maps
/// there, which the host's audit finds and the guest's result reports.
#[test]
fn the_hosts_audit_runs_with_the_guests() {
    let o = two_guests_on(false, "", "\"debug.mutant\" = \"mmu_notifier_skip_unmap\"");
    let v: Vec<&String> = o.guests.iter().flat_map(|g| &g.kernel.check().violations).collect();
    assert!(v.iter().any(|m| m.starts_with("host: ")), "{v:?}");
    let clean = two_guests(false, "");
    assert!(clean.guests.iter().all(|g| g.kernel.check().violations.is_empty()));
}

/// The host kernel's own threads run in the guests' time line: woken by
/// the vCPUs' faults when the host falls below its low watermark, the
/// host's kswapd ages the guests' pages (the EPT's accessed bits cleared
/// through clear_young) and swaps the cold ones out in the background,
/// its time its own task's and not a vCPU's.
#[test]
fn host_kswapd_reclaims_in_the_background() {
    let off = two_guests(false, "");
    let kvm = foliosim::virt::guests::kvm(&off.host);
    let kswapd: Vec<_> = kvm.k.tasks().iter().filter(|t| t.kthread.is_some()).collect();
    assert!(!kswapd.is_empty(), "the host has a kswapd (it has swap)");
    assert!(kswapd.iter().map(|t| t.sys_ns).sum::<Ns>() > 0, "kswapd ran");
    let (by_kswapd, direct) = (host_vmstat(&off, Stat::PgstealKswapd), host_vmstat(&off, Stat::PgstealDirect));
    assert!(by_kswapd > 64 * 256, "kswapd reclaimed guest memory: {by_kswapd} pages");
    assert!(by_kswapd > direct, "most host reclaim is kswapd's: {by_kswapd} against {direct} by the vCPUs' faults");
    let young: u64 = kvm.vms.iter().map(|vm| kvm.k.mms()[vm.mm as usize].notifier().map_or(0, |e| e.nr_young)).sum();
    assert!(young > 0, "the host's aging read the EPT's accessed bits");
    // The vCPUs' waits in the host's direct reclaim and swap-ins are
    // parts of their EPT violations' time, and only direct reclaim adds
    // to the first.
    for g in 0..2 {
        let (exit, reclaim, swapin) = (kvm.vms[g].exit_ns, kvm.direct_reclaim_ns(g), kvm.vms[g].swapin_ns);
        assert!(reclaim <= exit && swapin <= exit, "guest {g}: {reclaim} and {swapin} of {exit} ns");
        assert_eq!(swapin > 0, kvm.vms[g].swapins > 0, "guest {g}: {swapin} ns for {} swap-ins", kvm.vms[g].swapins);
    }
    let reclaim = kvm.direct_reclaim_ns(0) + kvm.direct_reclaim_ns(1);
    assert_eq!(reclaim > 0, direct > 0, "direct reclaim took {reclaim} ns for {direct} pages");
}

/// The host's LazyFree of each guest (smaps' count over its VMM's RAM),
/// and who pays for the lazily freed pages the host drops: with MADV_FREE
/// discards, what guest 0 reported stays on the host as lazily freed
/// pages until guest 1's memhog takes the host below its watermarks; the
/// host's kswapd drops them in the background, charged to no guest, and
/// a vCPU fault's direct reclaim to the guest whose fault it was.
#[test]
fn host_lazyfree_per_guest_and_kswapd_drops_charged_to_no_guest() {
    let o = two_guests(true, "\"host.discard\" = \"free\"");
    for g in &o.guests {
        assert!(g.kernel.check().violations.is_empty(), "{:?}", g.kernel.check().violations);
    }
    let kvm = foliosim::virt::guests::kvm(&o.host);
    let lazy0: Vec<u64> = o.samples.lazyfree.iter().map(|l| l[0]).collect();
    let peak = *lazy0.iter().max().unwrap();
    assert!(peak > 300 * 256, "guest 0's reports left its memory lazily freed on the host: {peak} pages");
    // The last sample is the walk at the end, and the guest's gauge shows it.
    let now = kvm.lazyfree(0);
    assert_eq!(*lazy0.last().unwrap(), now);
    assert_eq!(st(&o.guests[0], Stat::HostLazyfree), now as i64);
    let dropped = host_vmstat(&o, Stat::Pglazyfreed);
    assert!(
        now + 64 * 256 < peak && dropped > 64 * 256,
        "the host dropped guest 0's lazily freed pages: {peak} -> {now}, {dropped} dropped"
    );
    let charged: i64 = o.guests.iter().map(|g| st(g, Stat::HostLazyfreeReclaimed)).sum();
    assert!(charged < dropped, "kswapd's drops are charged to no guest: {charged} of {dropped} charged");
    assert!(host_vmstat(&o, Stat::PgstealKswapd) >= dropped - charged);
}

/// QEMU's -mem-prealloc backs a guest's RAM before the guest boots: the
/// host's faults for it are none of the guest's time and leave no lock or
/// line of the host busy when the guest starts (`KvmHost::epoch`). Here
/// they would take the host longer than the guest takes to its first
/// report, whose madvise would wait for them.
#[test]
fn prealloc_is_done_before_the_guest_starts() {
    let toml = "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [4096]\n[host]\n\
         [workload]\nname = \"memhog\"\nsize_mib = 64\nprocess_image = \"none\"\n\
         [knobs]\n\"host.prealloc\" = true\n\"page_reporting.enabled\" = true\n\
         [run]\nwarmup_s = 0.0\nduration_s = 4.0\n";
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = simulate_guests(&c, &mut |_| true).unwrap();
    let kvm = foliosim::virt::guests::kvm(&o.host);
    let calls = st(&o.guests[0], Stat::PageReportingCalls);
    assert!(calls > 0, "the guest reported");
    let per_call = kvm.vms[0].report_ns / calls as Ns;
    assert!(per_call < 30_000_000, "a report's madvise took {per_call} ns on the host");
    assert!(kvm.epoch > 0, "the host's prealloc took its time");
}

/// One 512 MiB guest running memhog over 320 MiB on a tiered host: 192
/// MiB of DRAM (node 0, the CPUs') and 1 GiB of CXL (node 1), demotion on,
/// and `host_knobs` (TOML lines) in [host.knobs].
fn tiered_guest(host_knobs: &str) -> GuestsOutcome {
    let toml = format!(
        "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\n\
         [host]\nprofile = \"cxl-1tb\"\nnode_mem_mib = [192, 1024]\n[host.knobs]\n\
         \"kernel/mm/numa/demotion_enabled\" = true\n{host_knobs}\n\
         [workload]\nname = \"memhog\"\nsize_mib = 320\nprocess_image = \"none\"\ncycles = 20\n\
         [run]\nwarmup_s = 0.0\nduration_s = 4.0\nsample_ms = 500.0\ncheck = true\naudit_interval_ms = 2000.0\n"
    );
    let c = config::from_toml(&toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    simulate_guests(&c, &mut |_| true).unwrap_or_else(|e| panic!("{e}"))
}

/// The host's NUMA balancing scans a guest's RAM as task work on a vCPU
/// thread: the PTEs it protects drop their SPTEs, the guest's next
/// access to such a page is an EPT violation whose get_user_page takes the
/// hinting fault, and a hot page on CXL is promoted to DRAM while kswapd
/// demotes cold ones. The scan's time is the vCPU's, not the guest's.
#[test]
fn the_hosts_numa_balancing_promotes_guest_memory_through_the_ept() {
    let off = tiered_guest("");
    let on = tiered_guest("\"kernel.numa_balancing\" = 2");
    for o in [&off, &on] {
        assert!(o.guests[0].kernel.check().violations.is_empty(), "{:?}", o.guests[0].kernel.check().violations);
    }
    // Guest memory spilled onto CXL once DRAM was below low, waking no
    // kswapd; promotion finds DRAM unbalanced and wakes its kswapd, which
    // demotes cold guest memory to make room.
    assert_eq!(host_vmstat(&off, Stat::PgdemoteKswapd), 0, "a spill wakes no kswapd");
    assert!(host_vmstat(&on, Stat::PgdemoteKswapd) > 0, "the host demoted guest memory to CXL");
    let kvm = |o: &GuestsOutcome| -> (u64, u64, Ns) {
        let k = foliosim::virt::guests::kvm(&o.host);
        (k.vms[0].hint_faults, k.vms[0].promoted, k.vms[0].numa_scan_ns)
    };
    assert_eq!(kvm(&off), (0, 0, 0), "no scan without NUMA balancing");
    assert_eq!(host_vmstat(&off, Stat::PgpromoteSuccess), 0);
    let (hints, promoted, scan_ns) = kvm(&on);
    assert!(scan_ns > 0, "the host scanned the guest's RAM on a vCPU thread");
    assert_eq!(hints as i64, host_vmstat(&on, Stat::NumaHintFaults), "every hinting fault came through the guest's EPT");
    assert!(promoted > 1000 && promoted as i64 == host_vmstat(&on, Stat::PgpromoteSuccess), "{promoted} pages promoted");
    // Hinting faults are not zero fills, and each protected page's SPTE
    // went with a remote flush of the guest's TLBs.
    assert_eq!(st(&on.guests[0], Stat::HostFaults), st(&off.guests[0], Stat::HostFaults));
    assert!(st(&on.guests[0], Stat::KvmRemoteTlbFlush) > st(&off.guests[0], Stat::KvmRemoteTlbFlush));
    // The vCPU was in the host for the scan: the guest's tasks paid it.
    let irq = |o: &GuestsOutcome| -> Ns {
        o.guests[0].kernel.tasks().iter().map(|t| t.entry_ns[foliosim::mm::vmstat::Entry::Irq as usize]).sum()
    };
    assert!(irq(&on) >= irq(&off) + scan_ns, "the guest lost the scan's {scan_ns} ns to the host");
}

/// The checker over host and guest catches an SPTE that outlives what the
/// host's NUMA balancing did to its page: kept over a PROT_NONE hinting
/// PTE, or over a page the host migrated between its tiers.
#[test]
fn the_checker_sees_an_spte_the_hosts_numa_balancing_left_stale() {
    let v = |mutant: &str| {
        tiered_guest(&format!("\"kernel.numa_balancing\" = 2\n\"debug.mutant\" = \"{mutant}\"")).guests[0].kernel.check().violations.clone()
    };
    let hint = v("numa_hint_skip_notifier");
    assert!(hint.iter().any(|f| f.starts_with("host: ") && f.contains("(an invalidation skipped)")), "{hint:?}");
    let migrated = v("mmu_notifier_skip_unmap");
    assert!(migrated.iter().any(|f| f.starts_with("host: ") && f.contains("(a migration skipped the invalidation)")), "{migrated:?}");
}

/// `[[guest]]` gives guests their own workloads, taken in turn: three
/// guests over a mix of two run memhog, page_fault1 with two tasks,
/// memhog again, and the result names each guest's.
#[test]
fn each_guest_runs_its_entry_of_the_mix() {
    let toml = "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\nguests = 3\n[host]\n\
         [[guest]]\nworkload.name = \"memhog\"\nworkload.size_mib = 64\nworkload.process_image = \"none\"\n\
         [[guest]]\nworkload.name = \"page_fault1\"\nworkload.tasks = 2\n\
         [run]\nwarmup_s = 0.0\nduration_s = 0.2\n";
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = simulate_guests(&c, &mut |_| true).unwrap();
    let users = |g: usize| o.guests[g].kernel.tasks().iter().filter(|t| t.kthread.is_none()).count();
    assert_eq!((users(0), users(1), users(2)), (1, 2, 1));
    assert!(st(&o.guests[0], Stat::Pgfault) >= 64 * 256, "guest 0 ran its 64 MiB memhog");
    let v = foliosim::virt::guests::result_json(&c, &o);
    let names: Vec<_> = v["guests"].as_array().unwrap().iter().map(|g| g["summary"]["workload"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["memhog", "page_fault1", "memhog"]);
    assert_eq!(v["summary"]["workload"], "memhog");
}

/// What a guest's boot and set-up wrote, the host backs before the guest
/// runs, on the host's time: the guest's time 0 comes after it
/// (`KvmHost::epoch`) and none of it is the guest's exit time. Before,
/// the backing's faults ran on a vCPU thread's clock from time 0, so the
/// guest's first EPT violation waited for all of them, and each backed
/// frame added the whole backing so far to the guest's exit time.
#[test]
fn the_boot_backing_is_the_hosts_time_not_the_guests() {
    let toml = "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [512]\nnr_cpus = 2\n[host]\n\
         [workload]\nname = \"trace\"\npath = \"../../experiments/traces/ebizzy-t1.fstrace\"\n\
         [run]\nwarmup_s = 0.0\nduration_s = 0.5\n";
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = simulate_guests(&c, &mut |_| true).unwrap();
    let kvm = foliosim::virt::guests::kvm(&o.host);
    assert!(kvm.epoch > 0, "the boot wrote memory the host backed first");
    let exits = kvm.vms[0].exit_ns;
    assert!(exits < 2 * 500_000_000, "the guest's exits took {exits} ns of a 0.5 s run on 2 vCPUs");
}

/// The scale benchmark's config (`foliosim bench --slow`, cloud_scale):
/// a 1 TiB tiered host under 16 guests of 64 GiB with all five mechanisms
/// on. Checked here, not run: it is a simulated minute of 16 guests.
#[test]
fn the_cloud_scale_benchmark_is_the_cloud_with_all_five_on() {
    let c = config::from_toml(&foliosim::bench::cloud_scale_config(60.0), "<bench>").unwrap_or_else(|e| panic!("{e}"));
    let h = c.host.as_ref().expect("a host kernel");
    assert_eq!((c.guests, c.profile.total_mem_mib(), c.guest_workloads.len()), (16, 65536, 2));
    assert!(h.profile.total_mem_mib() >= 1 << 20, "a 1 TiB host: {} MiB", h.profile.total_mem_mib());
    assert_eq!(h.profile.nodes.len(), 2, "DRAM and CXL");
    assert!(c.knobs.page_reporting && c.knobs.luf.enabled && h.knobs.luf.enabled, "reporting and LUF");
    assert_eq!(h.knobs.numa_balancing, 2);
    assert!(matches!(c.knob_values.get("fault_locking"), Some(foliosim::kernel::knobs::KnobValue::Str(s)) if s == "per_vma"));
}

#[test]
fn on_a_two_socket_host_each_guest_stays_on_one_socket_and_its_memory() {
    // cxl-2s, 8 host CPUs (4 a socket): guest 0 on socket 0's CPUs, guest
    // 1 on socket 1's. Guest 1 alone touches 160 MiB: its vCPUs fault its
    // RAM in on the host, from their own socket's DRAM node.
    let toml = "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnr_cpus = 2\nnode_mem_mib = [256]\nguests = 2\n\
                [host]\nprofile = \"cxl-2s\"\nnr_cpus = 8\nnode_mem_mib = [512, 512, 256, 256]\n\
                [[guest]]\nworkload = { name = \"memhog\", size_mib = 1, process_image = \"none\", cycles = 1 }\n\
                [[guest]]\nworkload = { name = \"memhog\", size_mib = 160, process_image = \"none\", cycles = 1 }\n\
                [run]\nwarmup_s = 0.0\nduration_s = 2.0\ncheck = true\naudit_interval_ms = 500.0\n";
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = simulate_guests(&c, &mut |_| true).unwrap_or_else(|e| panic!("{e}"));
    let h = foliosim::virt::guests::kvm(&o.host);
    assert!(h.k.check().violations.is_empty(), "{:?}", h.k.check().violations);
    let node_of =
        |g: usize| -> Vec<u32> { h.vms[g].vcpus.iter().map(|&t| h.k.cpus()[h.k.tasks()[t as usize].cpu as usize].node).collect() };
    assert_eq!(node_of(0), vec![0, 0]);
    assert_eq!(node_of(1), vec![1, 1]);
    let used = |nid: u32| 512 * 256 - h.k.pa().zone_free_pages(nid);
    assert!(used(1) >= 160 * 256, "node 1 holds guest 1's memhog: {} pages used", used(1));
    assert!(used(0) < 100 * 256, "node 0 does not: {} pages used", used(0));
    assert_eq!(h.k.pa().zone_free_pages(3) + h.k.pa().zone_free_pages(2), 2 * 256 * 256, "nothing spilled to CXL");
}

/// A recorded program that reads one 256 KiB file it found, written to a
/// trace file of its own (`name`).
fn reader_trace(name: &str) -> std::path::PathBuf {
    use foliosim::workload::trace_format::{Record, TraceWriter};
    let path = std::env::temp_dir().join(format!("foliosim-{name}-{}.fstrace", std::process::id()));
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    let recs = [
        Record::File { size: 256 << 10, path: "src.c".into(), flags: 0 },
        Record::Root { tid: 1 },
        Record::Task { tid: 1 },
        Record::Read { file: 0, off: 0, len: 256 << 10 },
        Record::Time { user_ns: 1000, sys_ns: 0 },
        Record::Exit { code: 0 },
    ];
    for r in &recs {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    path
}

/// Two guests, 100 ms apart, run `workloads` (TOML `[[guest]]` entries
/// naming `{trace}`) on one host.
fn disk_guests(trace: &std::path::Path, workloads: &str) -> (GuestsOutcome, serde_json::Value) {
    let toml = format!(
        "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnode_mem_mib = [256]\nnr_cpus = 1\nguests = 2\nguest_stagger_ms = 100\n[host]\n\
         {}\n[run]\nwarmup_s = 0.0\nduration_s = 0.3\ncheck = true\n",
        workloads.replace("{trace}", &trace.display().to_string())
    );
    let c = config::from_toml(&toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = simulate_guests(&c, &mut |_| true).unwrap_or_else(|e| panic!("{e}"));
    let v = foliosim::virt::guests::result_json(&c, &o);
    (o, v)
}

#[test]
fn guests_disk_reads_go_through_the_hosts_page_cache_of_their_image() {
    let trace = reader_trace("disk-guests");
    let cold = "[[guest]]\nworkload = { name = \"trace\", path = \"{trace}\", cache = \"cold\" }\n";
    let list =
        |v: &serde_json::Value, k: &str| -> Vec<u64> { v["host"][k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect() };
    // Clones of one image: guest 0 reads the file from the device into
    // the host's page cache, guest 1 finds it there.
    let (o, v) = disk_guests(&trace, cold);
    for g in &o.guests {
        assert_eq!(st(g, Stat::Pgmajfault), 64, "each guest read its 64 pages from its disk");
        assert!(g.kernel.check().violations.is_empty(), "{:?}", g.kernel.check().violations);
    }
    assert_eq!(list(&v, "blk_reads_by_guest"), [64, 64]);
    assert_eq!(list(&v, "blk_read_misses_by_guest"), [64, 0]);
    assert_eq!((host_vmstat(&o, Stat::Pgmajfault), host_vmstat(&o, Stat::NrFilePages)), (64, 64));
    let time = |v: &serde_json::Value, g: usize| v["host"]["time_s"]["blk_reads_by_guest"][g].as_f64().unwrap();
    assert!(time(&v, 1) < time(&v, 0) / 2.0, "the cached reads were quicker: {} s against {} s", time(&v, 1), time(&v, 0));
    // Two entries of the mix are two templates, two images: no sharing.
    let (o2, v2) = disk_guests(&trace, &cold.repeat(2));
    assert_eq!(list(&v2, "blk_read_misses_by_guest"), [64, 64]);
    assert_eq!(host_vmstat(&o2, Stat::NrFilePages), 128);
    // A warm cache reads nothing.
    let (o3, v3) = disk_guests(&trace, "[[guest]]\nworkload = { name = \"trace\", path = \"{trace}\" }\n");
    assert_eq!(list(&v3, "blk_reads_by_guest"), [0, 0]);
    assert_eq!(st(&o3.guests[0], Stat::Pgmajfault), 0);
    std::fs::remove_file(trace).ok();
}
