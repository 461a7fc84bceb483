//! Speed benchmarks of the simulator itself (`foliosim bench`). Each runs a
//! fixed config and reports host throughput; targets are checked by the CLI,
//! never by tests. Throughputs are the median of several runs.

use crate::config;
use crate::mm::vmstat::Stat;
use crate::run;
use serde_json::{json, Value};
use std::time::Instant;

fn simulate(toml: &str) -> Result<(run::Outcome, f64), String> {
    let cfg = config::from_toml(toml, "<bench>").map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let out = run::simulate(&cfg, &mut |_| true)?;
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
            // One process faulting 4 KiB anonymous pages (page_fault1): each
            // fault a pcp allocation, zeroing charged, PTE, rmap, LRU, zap.
            let runs = repeat(|| {
                let (o, host) = simulate("[workload]\nname = \"page_fault1\"\ntasks = 1\n[run]\nwarmup_s = 0.0\nduration_s = 2.0\n")?;
                Ok((o.kernel.stat.get(Stat::Pgfault) as f64, host))
            })?;
            Ok(summary("anon_faults_per_host_s", "faults", &runs))
        }
        "tlb_hits" => {
            // 1 MiB touched over and over: every access hits the L1 or STLB.
            let runs = repeat(|| {
                let (o, host) = simulate("[workload]\nname = \"memhog\"\nsize_mib = 1\npasses = 200000\n[run]\nwarmup_s = 0.0\nduration_s = 0.5\n")?;
                let acc = o.kernel.stat.get(Stat::TlbAccesses);
                let miss = o.kernel.stat.get(Stat::DtlbLoadMisses) + o.kernel.stat.get(Stat::DtlbStoreMisses) + o.kernel.stat.get(Stat::ItlbMisses);
                Ok(((acc - miss) as f64, host))
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
        _ => Err(format!("unknown benchmark \"{which}\" (anon_faults, tlb_hits, pf1_threads64, big_machine; the experiments are timed by `foliosim bench` itself)")),
    }
}
