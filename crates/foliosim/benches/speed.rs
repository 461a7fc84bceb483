//! `cargo bench -p foliosim --bench speed [NAME...]`: the simulator's own
//! speed (the same figures `foliosim bench` prints).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let all = ["anon_faults", "tlb_hits", "pf1_threads64", "big_machine", "luf_llama", "fpr_overhead"];
    let which: Vec<&str> = if args.is_empty() { all[..3].to_vec() } else { args.iter().map(|s| s.as_str()).collect() };
    for w in which {
        match foliosim::bench::run(w) {
            Ok(v) => println!("{w}: {v}"),
            Err(e) => eprintln!("{w}: {e}"),
        }
    }
}
