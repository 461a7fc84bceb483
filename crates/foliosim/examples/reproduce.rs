//! Run one reproduction from the command line without the Python layer:
//! `cargo run --release -p foliosim --example reproduce -- promo-table`.
//! Prints the experiment's JSON and the host time.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "promo-table".into());
    let t0 = std::time::Instant::now();
    if name.ends_with(".toml") {
        // A config file: print the time of each pass over the file.
        let text = std::fs::read_to_string(&name).expect("read config");
        let cfg = foliosim::config::from_toml(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        let out = foliosim::run::simulate(&cfg, &mut |_| true).expect("simulate");
        let mut prev = 0;
        for t in &out.kernel.tier.eof_times {
            println!("pass {:.3} s", (t - prev) as f64 / 1e9);
            prev = *t;
        }
        println!("pgpromote_success {}", out.kernel.stat.get(foliosim::mm::vmstat::Stat::PgpromoteSuccess));
        eprintln!("host time: {:.1} s", t0.elapsed().as_secs_f64());
        return;
    }
    // Several experiments separated by commas share cached runs.
    let mut all = Vec::new();
    for n in name.split(',') {
        match foliosim::reproduce::run(n, &mut |_| true) {
            Ok(v) => all.push(v),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }
    println!("{}", serde_json::to_string_pretty(&all).unwrap());
    eprintln!("host time: {:.1} s", t0.elapsed().as_secs_f64());
}
