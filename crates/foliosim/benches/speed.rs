//! `cargo bench -p foliosim --bench speed [NAME...]`: the simulator's own
//! speed (the same figures `foliosim bench` prints). Without names: the two
//! instruction counts (under callgrind; needs valgrind) and the three quick
//! throughputs. See docs/performance.md.
//!
//! `speed --counted WORKLOAD SIM_S` is the child the instruction counts run
//! under callgrind: one simulation, its event count on stdout.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--counted") {
        let (workload, sim_s) = match &args[1..] {
            [w, s] => (w.as_str(), s.parse::<f64>().unwrap_or(f64::NAN)),
            _ => (" ", f64::NAN),
        };
        match foliosim::bench::events(workload, sim_s) {
            Ok(n) => println!("{n}"),
            Err(e) => {
                eprintln!("speed --counted {workload} {sim_s}: {e}");
                std::process::exit(2);
            }
        }
        return;
    }
    // cargo passes --bench (and a filter, if given, as a plain word).
    let names: Vec<&str> = args.iter().map(String::as_str).filter(|a| !a.starts_with('-')).collect();
    let counted: Vec<&str> = foliosim::bench::COUNTED.iter().map(|c| c.name).collect();
    let which = if names.is_empty() { [&counted[..], &["anon_faults", "tlb_hits", "pf1_threads64"]].concat() } else { names };
    let exe = std::env::current_exe().expect("the bench binary's own path").to_string_lossy().into_owned();
    let child = [exe, "--counted".to_string()];
    let mut failed = false;
    for w in which {
        let r = if counted.contains(&w) { foliosim::bench::instructions(w, &child) } else { foliosim::bench::run(w) };
        match r {
            Ok(v) => println!("{w}: {v}"),
            Err(e) => {
                eprintln!("{w}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
