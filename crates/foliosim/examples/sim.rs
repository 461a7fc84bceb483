//! Run one config file (TOML, or a normalised config as JSON) and print
//! the result JSON summary: `cargo run --release --example sim -- FILE.toml`. A developer
//! convenience beside the Python CLI (experiments: `foliosim reproduce`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file = args.first().expect("config file");
    let text = std::fs::read_to_string(file).expect("read config");
    let cfg = if file.ends_with(".json") { foliosim::config::from_json(&text, file) } else { foliosim::config::from_toml(&text, file) }
        .unwrap_or_else(|e| panic!("{e}"));
    let t0 = std::time::Instant::now();
    let j = foliosim::api::run_config(&cfg, &mut |_| true).expect("simulate");
    println!("{}", serde_json::to_string_pretty(&j["summary"]).unwrap());
    let keep = ["pgfault", "nr_free_pages", "pgalloc_normal"];
    // GREP=a,b prints the counters whose names contain one of these.
    let extra: Vec<String> = std::env::var("GREP").map(|g| g.split(',').map(str::to_string).collect()).unwrap_or_default();
    for (k, v) in j["vmstat"].as_object().unwrap() {
        if keep.contains(&k.as_str()) || k.contains("report") || k.contains("host") || extra.iter().any(|e| k.contains(e.as_str())) {
            println!("{k} = {v}");
        }
    }
    println!("violations: {}", j["checker"]["violations"]);
    // Under a host, the host kernel's counters GREP names too.
    if let Some(hv) = j["host"]["vmstat"].as_object() {
        for (k, v) in hv {
            if extra.iter().any(|e| k.contains(e.as_str())) {
                println!("host {k} = {v}");
            }
        }
    }
    // MEMORY=1 prints the memory section (per-node bandwidth among it).
    if std::env::var("MEMORY").is_ok() {
        println!("memory {}", j["memory"]);
    }
    // LOCKS=1 prints the lock statistics and the time spent per entry.
    if std::env::var("LOCKS").is_ok() {
        println!("locks {}", j["locks"]);
        println!("time_ns {}", j["time_ns"]);
    }
    // SERIES=name,name prints those time series (per-sample deltas for events).
    if let Ok(names) = std::env::var("SERIES") {
        let ts = &j["timeseries"];
        println!("t_s {}", ts["t_s"]);
        for n in names.split(',') {
            println!("{n} {}", ts[n]);
        }
    }
    eprintln!("host time {:.2} s, sim {:.2} s", t0.elapsed().as_secs_f64(), j["sim_time_s"]);
}
