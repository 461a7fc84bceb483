//! The timed child of `foliosim bench --paired REF` (python/foliosim/paired.py):
//! `paired_driver CONFIG.toml EVENTS` runs one simulation and prints
//! `EVENTS_COUNTED HOST_SECONDS` on one line, the host seconds being those
//! of `run::simulate` alone (boot, setup, the run; not process start-up).
//! EVENTS is `faults` (pgfault) or `tlb_hits` (user accesses that did not
//! walk). The paired benchmark copies this file into the tree of the git
//! ref it compares against, so it uses only what every version of the
//! crate since 2026-11-22 has: `config::from_toml`, `run::simulate`, the
//! counters by their `Stat` names.

use foliosim::mm::vmstat::Stat;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, events] = &args[..] else {
        eprintln!("usage: paired_driver CONFIG.toml faults|tlb_hits");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| {
        eprintln!("paired_driver: {file}: {e}");
        std::process::exit(2);
    });
    let cfg = foliosim::config::from_toml(&text, file).unwrap_or_else(|e| {
        eprintln!("paired_driver: {e}");
        std::process::exit(2);
    });
    let t0 = std::time::Instant::now();
    let out = foliosim::run::simulate(&cfg, &mut |_| true).unwrap_or_else(|e| {
        eprintln!("paired_driver: {file}: {e}");
        std::process::exit(1);
    });
    let host_s = t0.elapsed().as_secs_f64();
    let st = out.kernel.stat();
    let n = match events.as_str() {
        "faults" => st.get(Stat::Pgfault),
        "tlb_hits" => st.get(Stat::TlbAccesses) - st.get(Stat::DtlbLoadMisses) - st.get(Stat::DtlbStoreMisses) - st.get(Stat::ItlbMisses),
        _ => {
            eprintln!("paired_driver: unknown events \"{events}\" (faults, tlb_hits)");
            std::process::exit(2);
        }
    };
    println!("{n} {host_s}");
}
