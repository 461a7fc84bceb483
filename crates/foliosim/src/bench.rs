//! Speed benchmarks of the simulator itself (`foliosim bench`, `cargo bench
//! -p foliosim --bench speed`). Targets are checked by the CLI, never by
//! tests; docs/performance.md explains the figures.
//!
//! Two kinds of figure. Throughputs (`run`): a fixed config timed on the
//! host, the median of several runs; they move with the machine and its
//! load. Instruction counts (`instructions`): the same workloads run under
//! valgrind's callgrind, which counts the instructions executed whatever
//! else the machine is doing, so a change of the hot paths shows as a change
//! of the count.

use crate::config;
use crate::mm::vmstat::Stat;
use crate::run;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Instant;

/// The "anon_faults" workload: one process faulting 4 KiB anonymous pages
/// (page_fault1), each fault a pcp allocation, zeroing charged, PTE, rmap,
/// LRU, zap; for `sim_s` simulated seconds.
fn anon_faults_config(sim_s: f64) -> String {
    format!("[workload]\nname = \"page_fault1\"\ntasks = 1\n[run]\nwarmup_s = 0.0\nduration_s = {sim_s:?}\n")
}

/// The "tlb_hits" workload: 1 MiB touched over and over, so that after the
/// first pass every access hits the L1 dTLB or the STLB.
fn tlb_hits_config(sim_s: f64) -> String {
    format!("[workload]\nname = \"memhog\"\nsize_mib = 1\npasses = 200000\n[run]\nwarmup_s = 0.0\nduration_s = {sim_s:?}\n")
}

/// The "cloud_scale" run: 16 guests of 64 GiB (4 vCPUs each, half of them
/// memhog over 16 GiB every 5 s, half page_fault1 with two threads) on
/// cxl-1tb's 768 GiB DRAM + 256 GiB CXL host, with mTHP, per-VMA locks,
/// free page reporting and LUF in the guests and the host's NUMA balancing
/// (tiering), demotion, mTHP and LUF; for `sim_s` simulated seconds.
pub fn cloud_scale_config(sim_s: f64) -> String {
    format!(
        "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnr_cpus = 4\nnode_mem_mib = [65536]\nguests = 16\nguest_stagger_ms = 500\n\
         [host]\nprofile = \"cxl-1tb\"\n[host.knobs]\n\"kernel/mm/numa/demotion_enabled\" = true\n\"kernel.numa_balancing\" = 2\n\
         \"luf.enabled\" = true\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"\n\
         [[guest]]\nworkload.name = \"memhog\"\nworkload.size_mib = 16384\nworkload.cycles = 1000\nworkload.sleep_ms = 5000\nworkload.process_image = \"none\"\n\
         [[guest]]\nworkload.name = \"page_fault1\"\nworkload.tasks = 2\nworkload.mode = \"threads\"\n\
         [knobs]\n\"page_reporting.enabled\" = true\nfault_locking = \"per_vma\"\n\"luf.enabled\" = true\n\
         \"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"\n\
         [run]\nwarmup_s = 0.0\nduration_s = {sim_s:?}\nsample_ms = 1000.0\n"
    )
}

fn faults(o: &run::Outcome) -> u64 {
    o.kernel.stat.get(Stat::Pgfault) as u64
}

/// Accesses that did not walk the page table.
fn tlb_hits(o: &run::Outcome) -> u64 {
    let st = &o.kernel.stat;
    (st.get(Stat::TlbAccesses) - st.get(Stat::DtlbLoadMisses) - st.get(Stat::DtlbStoreMisses) - st.get(Stat::ItlbMisses)) as u64
}

fn simulate(toml: &str) -> Result<(run::Outcome, f64), String> {
    let cfg = config::from_toml(toml, "<bench>").map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let out = run::simulate(&cfg, &mut |_| true).map_err(|e| e.to_string())?;
    Ok((out, t0.elapsed().as_secs_f64()))
}

/// Runs of a throughput benchmark: one run is a fraction of a host second,
/// where a busy or frequency-scaling host moves a single figure by half.
const RUNS: usize = 5;

/// `RUNS` runs of `f`, each giving (simulated events, host seconds).
fn repeat(mut f: impl FnMut() -> Result<(f64, f64), String>) -> Result<Vec<(f64, f64)>, String> {
    (0..RUNS).map(|_| f()).collect()
}

/// The median rate of `runs` under `key` (the figure the target is checked
/// on), with every run's rate beside it so the spread is visible.
fn summary(key: &str, events: &str, runs: &[(f64, f64)]) -> Value {
    let mut rates: Vec<f64> = runs.iter().map(|&(n, host)| n / host).collect();
    let each = rates.clone();
    rates.sort_by(f64::total_cmp);
    json!({key: rates[rates.len() / 2], events: runs[0].0, "host_s": runs.iter().map(|r| r.1).collect::<Vec<_>>(), "rates": each, "min": rates[0], "max": rates[rates.len() - 1]})
}

pub fn run(which: &str) -> Result<Value, String> {
    match which {
        "anon_faults" => {
            let runs = repeat(|| {
                let (o, host) = simulate(&anon_faults_config(2.0))?;
                Ok((faults(&o) as f64, host))
            })?;
            Ok(summary("anon_faults_per_host_s", "faults", &runs))
        }
        "tlb_hits" => {
            let runs = repeat(|| {
                let (o, host) = simulate(&tlb_hits_config(0.5))?;
                Ok((tlb_hits(&o) as f64, host))
            })?;
            Ok(summary("tlb_hit_accesses_per_host_s", "hits", &runs))
        }
        "pf1_threads64" => {
            let (o, host) = simulate("[workload]\nname = \"page_fault1\"\nmode = \"threads\"\ntasks = 64\n[run]\nwarmup_s = 0.0\nduration_s = 5.0\n")?;
            Ok(json!({"pf1_threads64_host_s": host, "faults": o.kernel.stat.get(Stat::Pgfault)}))
        }
        "big_machine" => {
            // 1 TiB machine (768 GiB DRAM + 256 GiB CXL) with a 128 GiB file
            // read once through the page cache. Peak RSS is measured by the
            // caller (a separate process).
            let (o, host) = simulate(
                "[machine]\nprofile = \"cxl-1tb\"\n[workload]\nname = \"file_reader\"\nfs = \"tmpfs\"\nfile_mib = 131072\nchunk_kib = 1024\ncycles = 1\n[run]\nwarmup_s = 0.0\nduration_s = 36000.0\n",
            )?;
            Ok(json!({"big_machine_host_s": host, "nr_file_pages": o.kernel.stat.get(Stat::NrFilePages), "mem_map_bytes": o.kernel.mem_map.footprint_bytes()}))
        }
        "cloud_scale" => {
            // Issue #33's scale: a 1 TiB tiered host (cxl-1tb) with 16 guests
            // of 64 GiB, all five mechanisms on, for a simulated minute.
            // Peak RSS is measured by the caller (a separate process).
            let cfg = config::from_toml(&cloud_scale_config(60.0), "<bench>").map_err(|e| e.to_string())?;
            let t0 = Instant::now();
            let o = crate::virt::guests::simulate_guests(&cfg, &mut |_| true).map_err(|e| e.to_string())?;
            let host = t0.elapsed().as_secs_f64();
            let faults: i64 = o.guests.iter().map(|g| g.kernel.stat.get(Stat::Pgfault)).sum();
            Ok(json!({"cloud_scale_host_s": host, "sim_s": 60.0, "guests": o.guests.len(), "guest_faults": faults,
                      "guest_faults_per_host_s": faults as f64 / host}))
        }
        _ => Err(format!(
            "unknown benchmark \"{which}\" (anon_faults, tlb_hits, pf1_threads64, big_machine, cloud_scale; the experiments are timed by `foliosim bench` itself; instruction counts: {})",
            COUNTED.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// An instruction-count benchmark: a throughput benchmark's workload run
/// under callgrind for two simulated lengths. The difference of the two
/// instruction totals over the difference of the events leaves out what
/// both runs share (process start-up, config parsing, boot, the first pass
/// over memory, the result), so the figure is the cost of one event in the
/// steady state.
pub struct Counted {
    pub name: &'static str,
    /// The workload, as `events` names it.
    pub workload: &'static str,
    /// The JSON key of the figure.
    pub key: &'static str,
    /// Simulated seconds of the two runs, longer first. The shorter one is
    /// past the start-up transient (for tlb_hits: 1 MiB faulted in).
    pub sim_s: [f64; 2],
}

pub const COUNTED: [Counted; 2] = [
    Counted { name: "anon_fault_instructions", workload: "anon_faults", key: "instructions_per_anon_fault", sim_s: [0.2, 0.1] },
    Counted { name: "tlb_hit_instructions", workload: "tlb_hits", key: "instructions_per_tlb_hit", sim_s: [0.004, 0.002] },
];

/// One run of `workload` ("anon_faults" or "tlb_hits") for `sim_s`
/// simulated seconds; the events it counts (faults, or TLB hits). This is
/// what the child process that `instructions` runs under callgrind does.
pub fn events(workload: &str, sim_s: f64) -> Result<u64, String> {
    let (toml, count): (String, fn(&run::Outcome) -> u64) = match workload {
        "anon_faults" => (anon_faults_config(sim_s), faults),
        "tlb_hits" => (tlb_hits_config(sim_s), tlb_hits),
        _ => return Err(format!("unknown counted workload \"{workload}\" (anon_faults, tlb_hits)")),
    };
    let (o, _) = simulate(&toml)?;
    Ok(count(&o))
}

/// The instruction count of benchmark `which` (a name in `COUNTED`).
/// `child` is the command that calls `events` and prints its result: it
/// is run under callgrind with the workload and the simulated length as
/// its last two arguments (the Python CLI runs its interpreter on the
/// compiled module, `cargo bench` its own binary). Needs valgrind.
pub fn instructions(which: &str, child: &[String]) -> Result<Value, String> {
    let c = COUNTED.iter().find(|c| c.name == which).ok_or_else(|| format!("unknown instruction-count benchmark \"{which}\""))?;
    let (prog, args) = child.split_first().ok_or("no child command to count")?;
    let mut runs = [(0u64, 0u64); 2];
    for (run, sim_s) in runs.iter_mut().zip(c.sim_s) {
        let out = Command::new("valgrind")
            .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
            .arg(prog)
            .args(args)
            .args([c.workload.to_string(), format!("{sim_s:?}")])
            // A Python child hashes strings with a fixed seed: its start-up
            // is then the same in both runs, to the instruction.
            .env("PYTHONHASHSEED", "0")
            .output()
            .map_err(|e| format!("cannot run valgrind ({e}): install it (Debian: apt-get install valgrind)"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            return Err(format!("{which}: counted run ({sim_s} s) failed with {}: {last}", out.status));
        }
        let ir = callgrind_total(&stderr).ok_or_else(|| format!("{which}: no \"Collected :\" line in callgrind's output"))?;
        let ev = stdout.trim().parse().map_err(|_| format!("{which}: the counted run printed {:?}, not an event count", stdout.trim()))?;
        *run = (ir, ev);
    }
    let [(ir_long, ev_long), (ir_short, ev_short)] = runs;
    if ev_long <= ev_short || ir_long <= ir_short {
        return Err(format!(
            "{which}: the longer run did not count more ({ev_long} vs {ev_short} events, {ir_long} vs {ir_short} instructions)"
        ));
    }
    let per = (ir_long - ir_short) as f64 / (ev_long - ev_short) as f64;
    Ok(json!({c.key: per, "instructions": [ir_long, ir_short], "events": [ev_long, ev_short], "sim_s": c.sim_s, "counter": "callgrind Ir"}))
}

/// The instruction total in callgrind's closing lines on stderr
/// (`==PID== Collected : N`).
fn callgrind_total(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|l| l.split_once("Collected :").and_then(|(_, n)| n.trim().parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callgrind_total_reads_the_collected_line() {
        let err = "==123== Callgrind, a call-graph generating cache profiler\n==123== \n==123== Events    : Ir\n==123== Collected : 105519521\n==123== \n==123== I   refs:      105,519,521\n";
        assert_eq!(callgrind_total(err), Some(105_519_521));
        assert_eq!(callgrind_total("==1== I   refs: 5\n"), None);
    }

    #[test]
    fn events_counts_what_the_run_did() {
        // Twice the simulated time, more faults; an unknown name is an error.
        let short = events("anon_faults", 0.001).unwrap();
        let long = events("anon_faults", 0.002).unwrap();
        assert!(short > 0 && long > short, "{short} {long}");
        // 1 ms: past the process's start-up (its image) and the first pass.
        assert!(events("tlb_hits", 0.001).unwrap() > 0);
        assert!(events("pf1_threads64", 0.1).is_err());
    }
}
