//! Anonymous swap (mm/swapfile.rs, mm/vmscan.rs, do_swap_page): memory
//! beyond RAM goes out to the device and comes back on the next touch, the
//! slot counts follow the PTEs through fork and exit, and without a device
//! nothing changes.

use foliosim::config;
use foliosim::mm::vmstat::Stat;
use foliosim::run::{self, Outcome};

/// memhog over one 256 MiB node, with `knobs` (TOML lines), the checker on.
/// Returns the outcome and the profile's swap_read_4k_ns.
fn memhog(size_mib: u64, passes: u64, knobs: &str) -> (Outcome, f64) {
    let text = format!(
        "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnr_cpus = 2\nnode_mem_mib = [256]\n[workload]\nname = \"memhog\"\ntasks = 1\nsize_mib = {size_mib}\npasses = {passes}\n[run]\nwarmup_s = 0.0\nduration_s = 20.0\ncheck = true\naudit_interval_ms = 200\n[knobs]\n{knobs}\n"
    );
    let c = config::from_toml(&text, "swap-test").unwrap_or_else(|e| panic!("{e}"));
    (run::simulate(&c, &mut |_| true).unwrap(), c.profile.cost.swap_read_4k_ns)
}

#[test]
fn memory_beyond_ram_goes_to_swap_and_comes_back() {
    let (o, swap_read_ns) = memhog(320, 2, "\"swap.size_mib\" = 512");
    let k = &o.kernel;
    assert!(k.check().violations.is_empty(), "{:?}", &k.check().violations[..k.check().violations.len().min(5)]);
    let (out, inn) = (k.stat().get(Stat::Pswpout), k.stat().get(Stat::Pswpin));
    assert!(out > 64 << 8, "more than the 64 MiB beyond RAM went out: {out} pages");
    assert!(inn > 0, "the second pass reads pages back: {inn}");
    assert_eq!(k.stat().get(Stat::Pgmajfault), inn, "every swap-in is a major fault");
    assert_eq!(k.stat().get(Stat::Oom), 0);
    // memhog unmapped its range at the end: the zap freed every slot.
    assert_eq!(k.swap().inuse, 0);
    assert_eq!(k.stat().get(Stat::SwapUsed), 0);
    // The task waited for the device: the reads alone take this long.
    let sys: u64 = k.tasks().iter().map(|t| t.sys_ns).sum();
    assert!(sys as f64 >= inn as f64 * swap_read_ns);
}

#[test]
fn without_a_device_anonymous_memory_stays() {
    let (o, _) = memhog(192, 1, "");
    let k = &o.kernel;
    assert_eq!(k.stat().get(Stat::Pswpout), 0);
    assert_eq!(k.swap().nr_slots, 0);
    assert!(k.check().violations.is_empty());
}

#[test]
fn a_zap_that_keeps_the_slot_is_caught() {
    let (o, _) = memhog(320, 1, "\"swap.size_mib\" = 512\n\"debug.mutant\" = \"swap_zap_keeps_slot\"");
    let v = &o.kernel.check().violations;
    assert!(v.iter().any(|m| m.contains("swap slot") && m.contains("0 swap PTEs name it")), "{:?}", &v[..v.len().min(5)]);
}
