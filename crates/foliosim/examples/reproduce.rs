//! Run one reproduction from the command line without the Python layer:
//! `cargo run --release -p foliosim --example reproduce -- promo-table`.
//! Prints the experiment's JSON and the host time.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "promo-table".into());
    let t0 = std::time::Instant::now();
    match foliosim::reproduce::run(&name, &mut |_| true) {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap());
            eprintln!("host time: {:.1} s", t0.elapsed().as_secs_f64());
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
