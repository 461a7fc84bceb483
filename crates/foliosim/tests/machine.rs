//! What many CPUs share, end to end (docs/machine-model.md): a node's
//! memory bandwidth and the link between sockets, a socket's last-level
//! cache, a core between SMT siblings, and software time that follows the
//! clock and core of a derived profile. Each test compares two runs that
//! differ only in what the mechanism shares, so it fails without it.

use foliosim::config;
use foliosim::run;
use serde_json::Value;

fn result(toml: &str) -> Value {
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = run::simulate(&c, &mut |_| true).unwrap();
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    run::result_json(&c, &o)
}

/// Operations per second per task over the measured window.
fn per_task(r: &Value) -> f64 {
    r["summary"]["ops_per_s"].as_f64().unwrap() / r["summary"]["tasks"].as_f64().unwrap()
}

fn will_it_scale(profile: &str, machine: &str, w: &str, mode: &str, tasks: u32, extra: &str) -> Value {
    will_it_scale_for(0.01, profile, machine, w, mode, tasks, extra)
}

fn will_it_scale_for(secs: f64, profile: &str, machine: &str, w: &str, mode: &str, tasks: u32, extra: &str) -> Value {
    result(&format!(
        "seed = 1\n[machine]\nprofile = \"{profile}\"\n{machine}\n[workload]\nname = \"{w}\"\nmode = \"{mode}\"\ntasks = {tasks}\nprocess_image = \"none\"\n{extra}\n[run]\nwarmup_s = 0.002\nduration_s = {secs}\ncheck = true\n"
    ))
}

/// Four processes per node, each clearing a page every ~1.5 us (~2.7 GB/s):
/// a node sustaining 4 GB/s holds each to its share, one of 1000 GB/s does
/// not; one process alone is never slowed.
#[test]
fn cpus_clearing_at_once_share_the_nodes_bandwidth() {
    let run = |tasks: u32, gbps: f64| {
        let m = format!("nr_cpus = 8\nnode_mem_mib = [2048, 2048]\ncosts = {{ \"nodes.shared_bw_gbps\" = {gbps} }}");
        will_it_scale("generic-x86", &m, "page_fault1", "processes", tasks, "size_mib = 8")
    };
    let (wide, narrow) = (run(8, 1000.0), run(8, 4.0));
    let ratio = per_task(&narrow) / per_task(&wide);
    assert!(ratio < 0.6, "per-task ops with 4 GB/s / with 1000 GB/s = {ratio:.3}");
    assert!(narrow["memory"]["node_bw_wait_ns"][0].as_u64().unwrap() > 0);
    assert_eq!(wide["memory"]["node_bw_wait_ns"][0].as_u64(), Some(0));
    // What the four moved through node 0 is what they cleared: no more than the node carries.
    let bytes = narrow["memory"]["node_bw_bytes"][0].as_f64().unwrap();
    let secs = narrow["sim_time_s"].as_f64().unwrap();
    assert!(bytes / secs / 1e9 < 4.2, "{} GB/s through a 4 GB/s node", bytes / secs / 1e9);
    // One task alone clears at its own rate whatever the node's width.
    assert_eq!(per_task(&run(1, 4.0)), per_task(&run(1, 1000.0)));
}

/// Processes on both sockets clearing pages, node 1 too small for socket
/// 1's: its allocations fall back to node 0, and their clears cross the
/// link between the sockets, which a narrow link slows.
#[test]
fn clears_of_another_sockets_memory_share_the_link() {
    let run = |link: f64| {
        let m = format!("nr_cpus = 4\nnode_mem_mib = [2048, 64]\ncosts = {{ \"cpu.interconnect_bw_gbps\" = {link} }}");
        will_it_scale_for(0.05, "generic-x86", &m, "page_fault1", "processes", 4, "size_mib = 48")
    };
    let (wide, narrow) = (run(1000.0), run(1.0));
    assert!(wide["memory"]["link_bw_bytes"].as_u64().unwrap() > 0, "no traffic crossed the link");
    assert!(per_task(&narrow) < 0.9 * per_task(&wide), "{} vs {}", per_task(&narrow), per_task(&wide));
    assert!(narrow["memory"]["link_bw_wait_ns"].as_u64().unwrap() > 0);
}

/// Two processes each reusing 6 MiB, with an 8 MiB last-level cache per
/// socket and a one-page L2: on two sockets each keeps its pages in cache, on one
/// socket the two share the cache and neither does.
#[test]
fn a_sockets_cpus_share_its_last_level_cache() {
    let run = |nr_cpus: u32| {
        let m = format!("nr_cpus = {nr_cpus}\nnode_mem_mib = [2048, 2048]\ncosts = {{ \"cpu.l2_kib\" = 4, \"cpu.llc_kib\" = 8192 }}");
        will_it_scale("generic-x86", &m, "page_fault1", "processes", 2, "size_mib = 6")
    };
    // generic-x86 has 2 sockets: 2 CPUs are one per socket, 4 put both tasks on socket 0.
    let (apart, together) = (run(2), run(4));
    let fault_ns = |r: &Value| r["time_ns"]["fault"].as_f64().unwrap() / r["vmstat"]["pgfault"].as_f64().unwrap();
    assert!(
        fault_ns(&together) > fault_ns(&apart) + 150.0,
        "fault: {:.0} ns sharing the LLC, {:.0} ns apart",
        fault_ns(&together),
        fault_ns(&apart)
    );
}

/// The e5 guest's 16 CPUs are 8 cores x 2 threads: 8 processes get a core
/// each, 16 run two on every core, each at smt_throughput_ratio / 2 of its
/// speed; with a ratio of 2 the siblings do not slow each other.
#[test]
fn smt_siblings_share_a_core() {
    let run = |tasks: u32, ratio: f64| {
        let m = format!("costs = {{ \"cpu.smt_throughput_ratio\" = {ratio}, \"nodes.shared_bw_gbps\" = 1000.0 }}");
        will_it_scale("e5-2630v3-guest-32g", &m, "mmap1", "processes", tasks, "")
    };
    let alone = per_task(&run(8, 1.3));
    let shared = per_task(&run(16, 1.3));
    let r = shared / alone;
    assert!((r - 0.65).abs() < 0.05, "16 tasks on 8 cores: {r:.3} of a core each, want ~1.3 / 2");
    let free = per_task(&run(16, 2.0)) / per_task(&run(8, 2.0));
    assert!((free - 1.0).abs() < 0.02, "ratio 2: {free:.3}");
    // The first 8 tasks went to 8 different cores.
    let cpus: Vec<u64> = run(8, 1.3)["per_task"].as_array().unwrap().iter().map(|t| t["cpu"].as_u64().unwrap()).collect();
    assert_eq!(cpus, (0..8).collect::<Vec<u64>>(), "cores first: CPUs 0-7 are the 8 cores' first threads");
}

/// A derived profile at half the host's clock on the host's core charges
/// every software cost twice: mmap1 (software only) runs at half the rate.
#[test]
fn software_time_follows_the_clock_of_a_derived_profile() {
    let dir = std::env::temp_dir().join(format!("foliosim-machine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = foliosim::hw::profile_load::load_builtin("generic-x86").unwrap();
    let slow = dir.join("slow.toml");
    std::fs::write(
        &slow,
        format!(
            "name = \"slow\"\ndescription = \"d\"\n[derive]\nhost = \"generic-x86\"\n[cpu]\nfreq_ghz = {}  # [assumed] a test\n",
            host.cpu.freq_ghz / 2.0
        ),
    )
    .unwrap();
    let fast = per_task(&will_it_scale("generic-x86", "nr_cpus = 2", "mmap1", "processes", 1, ""));
    let half = per_task(&will_it_scale(&slow.display().to_string(), "nr_cpus = 2", "mmap1", "processes", 1, ""));
    let _ = std::fs::remove_dir_all(&dir);
    assert!((half / fast - 0.5).abs() < 0.02, "half the clock: {:.3} of the ops", half / fast);
}

/// llama's threads read their weights from memory (`Op::Stream`): what a
/// token reads goes through the node holding the model, and eight threads
/// streaming from a node of 2 GB/s take longer than from one of 1000 GB/s.
#[test]
fn threads_streaming_from_a_node_share_its_bandwidth() {
    let run = |gbps: f64| {
        result(&format!(
            "seed = 1\n[machine]\nprofile = \"luf-llama-tiered\"\nnode_mem_mib = [512, 512]\ncosts = {{ \"nodes.shared_bw_gbps\" = {gbps} }}\n[workload]\nname = \"llama\"\nprocesses = 1\nthreads = 8\nmodel_mib = 16\ntokens = 2\nfs = \"tmpfs\"\n[run]\nwarmup_s = 0.0\nduration_s = 5.0\ncheck = true\n"
        ))
    };
    let runtime = |r: &Value| {
        let tasks = r["per_task"].as_array().unwrap().iter().filter(|t| t["kthread"] == false);
        tasks
            .map(|t| {
                assert_eq!(t["exited"], true, "every thread ran to its end");
                t["clock_ns"].as_f64().unwrap()
            })
            .fold(0.0, f64::max)
    };
    let (wide, narrow) = (run(1000.0), run(2.0));
    // Two tokens, each a pass over the 16 MiB model.
    let read = narrow["memory"]["node_bw_bytes"].as_array().unwrap().iter().map(|b| b.as_f64().unwrap()).sum::<f64>();
    assert!(read >= 2.0 * 16.0 * 1048576.0, "{read} bytes through the nodes");
    assert!(runtime(&narrow) > 2.0 * runtime(&wide), "{} ns on 2 GB/s, {} ns on 1000 GB/s", runtime(&narrow), runtime(&wide));
    assert!(narrow["memory"]["node_bw_wait_ns"].as_array().unwrap().iter().any(|w| w.as_u64().unwrap() > 0));
}
