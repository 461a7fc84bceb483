//! Fault-locking policies (mmap_lock, per_vma, spf) under randomized races
//! of faults against munmap, mmap, mprotect and mremap on threads of one mm,
//! with the invariant checker on.

use foliosim::config;
use foliosim::run::{self, Outcome};
use foliosim::types::Error;
use foliosim::workload::{map, prot, Access, Op, Ret, SetupEnv, TaskId, Workload};

fn cfg(toml: &str) -> config::Config {
    config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"))
}

fn stat(o: &Outcome, name: &str) -> i64 {
    o.kernel.stat().get(foliosim::mm::vmstat::Stat::from_name(name).unwrap())
}

const SLOT_PAGES: u64 = 16;
const SLOTS: u64 = 8;
const SLOT: u64 = SLOT_PAGES << 12;

/// Threads of one process on one 512 KiB region (one PTE table), split into
/// slots. Each thread draws from its own seeded stream: mostly stores and
/// loads to random pages, sometimes munmap, MAP_FIXED mmap, mprotect or
/// mremap of a random slot. Task 0 maps the region first and touches every
/// page once so the anon_vma and the page table exist (SPF needs both).
struct Races {
    tasks: Vec<TaskId>,
    rng: Vec<u64>,
    base: u64,
    init: u64,
}

impl Races {
    fn rand(&mut self, i: usize) -> u64 {
        // xorshift64*
        let mut x = self.rng[i];
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng[i] = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11
    }
}

impl Workload for Races {
    fn name(&self) -> &str {
        "fault_races"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let a = env.spawn_process(Some(0))?;
        self.tasks = vec![a];
        for c in 1..4 {
            self.tasks.push(env.spawn_thread(a, Some(c))?);
        }
        let s = env.seed();
        self.rng = (0..4u64)
            .map(|i| s.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9))
            .collect();
        Ok(())
    }
    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let i = self.tasks.iter().position(|&t| t == task).unwrap();
        *ops += 1;
        if self.base == 0 {
            if i != 0 {
                return Op::Compute { ns: 2000 };
            }
            if self.init == 0 {
                self.init = 1;
                return Op::Mmap {
                    addr: 0,
                    len: SLOT * SLOTS,
                    prot: prot::READ | prot::WRITE,
                    flags: map::PRIVATE | map::ANONYMOUS,
                    fd: -1,
                    off: 0,
                };
            }
            self.base = last.val() as u64;
            return Op::AccessRange { addr: self.base, stride: 4096, count: SLOT_PAGES * SLOTS, kind: Access::Store };
        }
        let r = self.rand(i);
        let slot = self.base + (r >> 8) % SLOTS * SLOT;
        match r % 100 {
            0..=44 => Op::Access { addr: self.base + (r >> 12) % (SLOT_PAGES * SLOTS) * 4096, kind: Access::Store },
            45..=69 => Op::Access { addr: self.base + (r >> 12) % (SLOT_PAGES * SLOTS) * 4096, kind: Access::Load },
            70..=77 => Op::Munmap { addr: slot, len: SLOT },
            78..=87 => Op::Mmap {
                addr: slot,
                len: SLOT,
                prot: prot::READ | prot::WRITE,
                flags: map::PRIVATE | map::ANONYMOUS | map::FIXED,
                fd: -1,
                off: 0,
            },
            88..=93 => Op::Mprotect { addr: slot, len: SLOT, prot: if r & 1 == 0 { prot::READ } else { prot::READ | prot::WRITE } },
            94..=96 => Op::Mremap { addr: slot, old_len: SLOT, new_len: SLOT / 2, may_move: false },
            _ => Op::Mremap { addr: slot, old_len: SLOT / 2, new_len: SLOT, may_move: false },
        }
    }
}

/// The races of seed `seed`: even seeds under the 5.1 rwsem (writers sleep
/// behind any reader, so the wait queue fills), odd ones under 5.3+.
fn races(policy: &str, mutant: &str, seed: u64) -> Outcome {
    let rwsem = if seed.is_multiple_of(2) { "5.1" } else { "5.3+" };
    let c = cfg(&format!(
        "seed = {seed}\n[machine]\nprofile = \"generic-x86\"\nnode_mem_mib = [256, 256]\nnr_cpus = 4\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = 0.002\ncheck = true\naudit_interval_ms = 0.1\n[knobs]\nfault_locking = \"{policy}\"\n\"debug.mutant\" = \"{mutant}\"\n\"mmap_lock.rwsem_semantics\" = \"{rwsem}\"\n"
    ));
    run::simulate_with(&c, Box::new(Races { tasks: vec![], rng: vec![], base: 0, init: 0 }), &mut |_| true).unwrap()
}

#[test]
fn all_policies_pass_randomized_races_with_the_checker_on() {
    for policy in ["mmap_lock", "per_vma", "spf"] {
        let (mut faults, mut spf_ok, mut spf_changed, mut vl_ok, mut vl_abort, mut queued) = (0, 0, 0, 0, 0, 0);
        for seed in 0..12 {
            let o = races(policy, "none", seed);
            queued += o.kernel.mms().iter().map(|m| m.mmap_lock().write_queued).sum::<u64>();
            assert!(o.kernel.check().violations.is_empty(), "{policy} seed {seed}: {:?}", o.kernel.check().violations);
            assert!(o.kernel.check().audits > 5, "{policy} seed {seed}: not audited");
            faults += stat(&o, "pgfault");
            spf_ok += stat(&o, "speculative_pgfault");
            spf_changed += stat(&o, "spf_vma_changed");
            vl_ok += stat(&o, "vma_lock_success");
            vl_abort += stat(&o, "vma_lock_abort");
            if policy == "spf" {
                // Every attempt ends as a final speculative result or an abort counted once.
                let attempts = stat(&o, "foliosim_spf_attempt");
                let aborts: i64 = [
                    "foliosim_spf_abort_no_vma",
                    "foliosim_spf_abort_seq_odd",
                    "foliosim_spf_abort_vm_ops_fault",
                    "foliosim_spf_abort_no_anon_vma",
                    "foliosim_spf_abort_stack",
                    "foliosim_spf_abort_pt_pud",
                    "foliosim_spf_abort_pt_pmd_none",
                    "foliosim_spf_abort_ptl_changed_before_lock",
                    "foliosim_spf_abort_ptl_changed_after_lock",
                ]
                .iter()
                .map(|n| stat(&o, n))
                .sum();
                let pending = o.kernel.tasks().iter().filter(|t| t.fault_cont.is_some()).count() as i64;
                assert_eq!(attempts, stat(&o, "foliosim_perf_spf") + aborts + pending, "seed {seed}: attempts = spf + aborts (I13)");
            }
        }
        eprintln!("{policy}: faults {faults} spf_ok {spf_ok} spf_changed {spf_changed} vma_lock ok {vl_ok} abort {vl_abort} writers queued {queued}");
        assert!(faults > 200, "{policy}: too few faults ({faults}) to exercise races");
        assert!(queued > 0, "{policy}: some writers must sleep in mmap_lock's wait queue ({queued})");
        match policy {
            "spf" => {
                assert!(spf_ok > 50, "spf: speculative faults must succeed ({spf_ok})");
                assert!(spf_changed > 0, "spf: the races must make some attempts abort");
            }
            "per_vma" => {
                assert!(vl_ok > 50, "per_vma: faults must succeed under the VMA lock ({vl_ok})");
                assert!(vl_abort > 0, "per_vma: a fault on a VMA marked by a writer must abort");
            }
            _ => assert_eq!(spf_ok + vl_ok, 0),
        }
    }
}

#[test]
fn checker_catches_spf_skipping_the_final_sequence_check() {
    let mut caught = 0;
    for seed in 0..12 {
        let o = races("spf", "spf_skip_seq_check", seed);
        if o.kernel.check().violations.iter().any(|v| v.contains("I1") || v.contains("outside any VMA") || v.contains("read-only VMA")) {
            caught += 1;
        }
        if seed == 0 {
            eprintln!("mutant seed 0: {:?}", &o.kernel.check().violations[..o.kernel.check().violations.len().min(6)]);
        }
    }
    assert!(caught > 0, "skipping the sequence check must be caught on some seed");
}

fn policy_run(workload: &str, params: &str, policy: &str, cpus: u32, dur: f64, knobs: &str) -> (Outcome, f64) {
    let c = cfg(&format!(
        "[machine]\nprofile = \"generic-x86\"\nnode_mem_mib = [1024, 1024]\nnr_cpus = {cpus}\n[workload]\nname = \"{workload}\"\n{params}\n[run]\nwarmup_s = 0.0\nduration_s = {dur}\ncheck = true\naudit_interval_ms = 5.0\n[knobs]\nfault_locking = \"{policy}\"\n{knobs}"
    ));
    let o = run::simulate(&c, &mut |_| true).unwrap();
    let ops: u64 = o.kernel.tasks().iter().map(|t| t.ops).sum();
    (o, ops as f64 / dur)
}

/// The seed's ebizzy setting (§4.5): 24 threads on 24 CPUs, the 5.1 rwsem
/// of its kernels.
#[test]
fn ebizzy_spf_and_per_vma_beat_mmap_lock_with_many_threads() {
    let mut r = Vec::new();
    for policy in ["mmap_lock", "per_vma", "spf"] {
        let (o, rate) = policy_run("ebizzy", "threads = 24", policy, 24, 0.01, "\"mmap_lock.rwsem_semantics\" = \"5.1\"\n");
        assert!(o.kernel.check().violations.is_empty(), "{policy}: {:?}", o.kernel.check().violations);
        eprintln!(
            "ebizzy {policy}: {rate:.0} records/s faults {} spf {} changed {} notsup {} vl_ok {} vl_abort {}",
            stat(&o, "pgfault"),
            stat(&o, "speculative_pgfault"),
            stat(&o, "spf_vma_changed"),
            stat(&o, "spf_vma_notsup"),
            stat(&o, "vma_lock_success"),
            stat(&o, "vma_lock_abort")
        );
        r.push(rate);
    }
    assert!(r[2] > r[0], "spf must beat mmap_lock on ebizzy: {r:?}");
    assert!(r[1] > r[0], "per_vma must beat mmap_lock on ebizzy: {r:?}");
}

/// Speed probe: `SPF_DUR=5 cargo test -p foliosim --test spf speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn speed_page_fault2_160_threads() {
    let dur: f64 = std::env::var("SPF_DUR").ok().and_then(|s| s.parse().ok()).unwrap_or(0.05);
    for policy in ["mmap_lock", "spf", "per_vma"] {
        let c = cfg(&format!(
            "[machine]\nprofile = \"ampere-altra-160\"\n[workload]\nname = \"page_fault2\"\nmode = \"threads\"\ntasks = 160\nsize_mib = 8\n[run]\nwarmup_s = 0.0\nduration_s = {dur}\n[knobs]\nfault_locking = \"{policy}\"\n"
        ));
        let t = std::time::Instant::now();
        let o = run::simulate(&c, &mut |_| true).unwrap();
        let ops: u64 = o.kernel.tasks().iter().map(|t| t.ops).sum();
        eprintln!("{policy}: {dur} s simulated in {:.1} s host, {:.0} ops/s", t.elapsed().as_secs_f64(), ops as f64 / dur);
    }
}

#[test]
fn fault_trace_records_events_on_request() {
    let c = cfg("[machine]\nprofile = \"generic-x86\"\nnode_mem_mib = [256, 256]\nnr_cpus = 4\n[workload]\nname = \"ebizzy\"\nthreads = 4\n[run]\nwarmup_s = 0.0\nduration_s = 0.002\ncheck = true\n[knobs]\nfault_locking = \"spf\"\n\"debug.fault_trace\" = 500\n");
    let o = run::simulate(&c, &mut |_| true).unwrap();
    let j = run::result_json(&c, &o);
    let tr = j["fault_trace"].as_array().expect("fault_trace present");
    assert_eq!(tr.len(), 500, "capped at the knob's value");
    assert!(tr.iter().any(|e| e[3] == "speculative_pgfault"));
    assert!(tr.iter().any(|e| e[3] == "foliosim_spf_attempt"));
    // Off by default: no key.
    let (o, _) = policy_run("ebizzy", "threads = 2", "spf", 4, 0.001, "");
    assert!(o.kernel.fault_trace().is_empty());
}

/// Sixteen threads faulting on one mm saturate mmap_lock's count line (and,
/// with SPF, read mm_users on it at each attempt). Every request on it is
/// made from a step that starts no later than any other task's, so the
/// line serves them in arrival order: none is processed after a later
/// arrival, and no answered request is moved (`late_ns`).
#[test]
fn a_contended_mmap_lock_line_is_served_first_come_first_served() {
    for policy in ["mmap_lock", "spf", "per_vma"] {
        let (o, _) = policy_run(
            "page_fault3",
            "mode = \"threads\"\ntasks = 16\nsize_mib = 2",
            policy,
            16,
            0.002,
            "\"mmap_lock.rwsem_semantics\" = \"5.1\"\n",
        );
        assert!(o.kernel.check().violations.is_empty(), "{policy}: {:?}", o.kernel.check().violations);
        let faults = stat(&o, "pgfault") as u64;
        let line = &o.kernel.mms()[0].mmap_lock().line;
        let fault_ns: u64 = o.kernel.tasks().iter().map(|t| t.entry_ns[foliosim::mm::vmstat::Entry::Fault as usize]).sum();
        eprintln!(
            "{policy}: {faults} faults, {:.2} transfers and {:.0} ns waited on the line per fault, late {} ns in all",
            line.bounces as f64 / faults as f64,
            line.wait_ns as f64 / faults as f64,
            line.late_ns
        );
        if policy != "per_vma" {
            assert!(line.bounces > faults, "{policy}: the count's line moves at every down_read and up_read");
            assert!(line.wait_ns > 100 * faults, "{policy}: faults queue on the line");
        }
        assert!(
            line.late_ns * 1000 <= fault_ns,
            "{policy}: {} ns of answered requests moved, against {fault_ns} ns of faults",
            line.late_ns
        );
    }
}
