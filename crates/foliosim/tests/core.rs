//! End-to-end tests of the baseline kernel with the invariant checker on.

use foliosim::config;
use foliosim::run::{self, Outcome};
use foliosim::types::Error;
use foliosim::workload::{map, prot, Access, Op, Ret, SetupEnv, TaskId, Workload};
use serde_json::Value;

fn cfg(toml: &str) -> config::Config {
    config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"))
}

fn sim(toml: &str) -> Outcome {
    run::simulate(&cfg(toml), &mut |_| true).unwrap()
}

fn json_of(toml: &str) -> Value {
    let c = cfg(toml);
    let o = run::simulate(&c, &mut |_| true).unwrap();
    run::result_json(&c, &o)
}

fn stat(o: &Outcome, name: &str) -> i64 {
    o.kernel.stat().get(foliosim::mm::vmstat::Stat::from_name(name).unwrap())
}

fn small(workload: &str, mode: &str, tasks: u32, extra: &str) -> String {
    format!(
        "[machine]\nprofile = \"generic-x86\"\nnode_mem_mib = [1024, 1024]\n[workload]\nname = \"{workload}\"\nmode = \"{mode}\"\ntasks = {tasks}\n{extra}\n[run]\nwarmup_s = 0.0\nduration_s = 0.02\ncheck = true\naudit_interval_ms = 2.0\n"
    )
}

#[test]
fn every_will_it_scale_test_runs_clean_in_both_modes() {
    for w in [
        "page_fault1",
        "page_fault2",
        "page_fault3",
        "malloc1",
        "mmap1",
        "mmap2",
        "tlb_flush1",
        "tlb_flush2",
        "tlb_flush3",
        "read1",
        "read2",
    ] {
        for mode in ["processes", "threads"] {
            let size = if matches!(w, "tlb_flush2" | "read1" | "read2") { "" } else { "size_mib = 4" };
            let o = sim(&small(w, mode, 3, size));
            assert!(o.kernel.check().violations.is_empty(), "{w}/{mode}: {:?}", o.kernel.check().violations);
            assert!(o.kernel.check().audits > 2, "{w}/{mode}: checker did not audit");
            let ops: u64 = o.kernel.tasks().iter().map(|t| t.ops).sum();
            assert!(ops > 0, "{w}/{mode}: no operations completed");
        }
    }
}

#[test]
fn page_fault1_faults_once_per_page_and_frees_everything() {
    // No process image: its start-up faults (file pages among them) and
    // pages would enter the counts.
    let o = sim(&small("page_fault1", "processes", 1, "size_mib = 4\nprocess_image = \"none\""));
    let ops = o.kernel.tasks()[0].ops as i64;
    let faults = stat(&o, "pgfault");
    // One anonymous write fault per page touched (4 KiB pages only).
    assert!((faults - ops).abs() <= 1, "faults {faults} vs ops {ops}");
    assert_eq!(stat(&o, "foliosim_fault_anon"), faults);
    // Whatever was freed went back: allocated - freed = what is still mapped or cached.
    let alloc = stat(&o, "pgalloc_normal");
    let freed = stat(&o, "pgfree");
    assert!(alloc - freed >= 0 && alloc - freed < 2048 + 64, "alloc {alloc} freed {freed}");
    assert!(stat(&o, "nr_tlb_local_flush_all") + stat(&o, "nr_tlb_local_flush_one") > 0);
}

#[test]
fn same_seed_gives_identical_results() {
    let t = small("page_fault2", "threads", 4, "size_mib = 4");
    let mut a = json_of(&t);
    let mut b = json_of(&t);
    a.as_object_mut().unwrap().remove("host_time_s");
    b.as_object_mut().unwrap().remove("host_time_s");
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
}

#[test]
fn process_mode_page_fault1_scales_nearly_linearly() {
    // 64 MiB regions: beyond the profile's warm cache, so that one process
    // does not clear warm pages that eight (whose frees drain to the shared
    // buddy lists and come back on other CPUs) would clear cold.
    let one = json_of(&small("page_fault1", "processes", 1, "size_mib = 64").replace("check = true", "check = false"));
    let eight = json_of(&small("page_fault1", "processes", 8, "size_mib = 64").replace("check = true", "check = false"));
    let r = eight["summary"]["ops_per_s"].as_f64().unwrap() / one["summary"]["ops_per_s"].as_f64().unwrap();
    assert!(r > 7.0 && r <= 8.2, "8 processes scale by {r}");
}

#[test]
fn thread_mode_mmap1_contends_on_mmap_lock() {
    let mut per_task = Vec::new();
    let mut wait_per_op = Vec::new();
    for n in [1, 4, 16] {
        let j = json_of(&small("mmap1", "threads", n, "").replace("check = true", "check = false"));
        per_task.push(j["summary"]["ops_per_s_per_task"].as_f64().unwrap());
        wait_per_op.push(j["locks"]["mmap_lock_wait_ns"].as_f64().unwrap() / j["summary"]["ops_total"].as_f64().unwrap());
    }
    assert!(per_task[0] > per_task[1] && per_task[1] > per_task[2], "per-task mmap1 rate should fall with threads: {per_task:?}");
    assert!(wait_per_op[0] < wait_per_op[1] && wait_per_op[1] < wait_per_op[2], "mmap_lock wait should grow: {wait_per_op:?}");
}

/// Two threads of one process share a region: thread 0 keeps unmapping and
/// remapping it, thread 1 keeps writing to it. Correct shootdowns make
/// thread 1 fault (and see EFAULT or the new mapping); a missing shootdown
/// leaves it writing through stale TLB entries.
struct SharedRegion {
    tasks: Vec<TaskId>,
    addr: u64,
    step: [u64; 2],
}

const REGION: u64 = 64 << 12;

impl Workload for SharedRegion {
    fn name(&self) -> &str {
        "shared_region"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        let a = env.spawn_process(Some(0))?;
        let b = env.spawn_thread(a, Some(1))?;
        self.tasks = vec![a, b];
        Ok(())
    }
    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        let i = self.tasks.iter().position(|&t| t == task).unwrap();
        let s = self.step[i];
        self.step[i] += 1;
        *ops += 1;
        if i == 1 {
            if self.addr == 0 {
                return Op::Compute { ns: 1000 };
            }
            return Op::Access { addr: self.addr + (s % 64) * 4096, kind: Access::Store };
        }
        // Thread 0: mmap, touch 64 pages, munmap, repeat.
        match s % 66 {
            0 => Op::Mmap { addr: 0, len: REGION, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 },
            1..=64 => {
                if s % 66 == 1 {
                    self.addr = last.val() as u64;
                }
                Op::Access { addr: self.addr + (s % 66 - 1) * 4096, kind: Access::Store }
            }
            _ => Op::Munmap { addr: self.addr, len: REGION },
        }
    }
}

fn shared_region(mutant: &str) -> Outcome {
    let c = cfg(&format!(
        "[machine]\nnode_mem_mib = [512, 512]\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = 0.01\ncheck = true\naudit_interval_ms = 1.0\n[knobs]\n\"debug.mutant\" = \"{mutant}\"\n"
    ));
    run::simulate_with(&c, Box::new(SharedRegion { tasks: vec![], addr: 0, step: [0, 0] }), &mut |_| true).unwrap()
}

#[test]
fn checker_passes_correct_shootdowns() {
    let o = shared_region("none");
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert!(stat(&o, "nr_tlb_remote_flush") > 0, "the munmaps should have shot down CPU 1");
    assert!(o.kernel.check().tlb_checks > 0);
}

#[test]
fn checker_catches_a_skipped_shootdown() {
    let o = shared_region("skip_shootdown");
    assert!(
        o.kernel.check().violations.iter().any(|v| v.contains("stale")),
        "skipping the munmap shootdown must be caught: {:?}",
        o.kernel.check().violations
    );
}

#[test]
fn checker_catches_a_leaked_mapcount() {
    let t = small("page_fault1", "processes", 1, "size_mib = 4").replace("[run]", "[knobs]\n\"debug.mutant\" = \"leak_mapcount\"\n[run]");
    let o = sim(&t);
    assert!(o.kernel.check().violations.iter().any(|v| v.contains("mapcount")), "{:?}", o.kernel.check().violations);
}

#[test]
fn checker_catches_broken_buddy_accounting() {
    for m in ["buddy_skip_nr_free_dec", "buddy_no_merge"] {
        let t =
            small("page_fault1", "processes", 2, "size_mib = 4").replace("[run]", &format!("[knobs]\n\"debug.mutant\" = \"{m}\"\n[run]"));
        let o = sim(&t);
        assert!(
            o.kernel.check().violations.iter().any(|v| v.contains("page allocator") || v.contains("nr_free")),
            "{m} must be caught: {:?}",
            o.kernel.check().violations
        );
    }
}

/// fork: the child's writes copy, the parent's later writes reuse its pages
/// once the child has gone.
struct ForkCow {
    parent: TaskId,
    child: Option<TaskId>,
    addr: u64,
    ps: u64,
    cs: u64,
}

const PAGES: u64 = 16;

impl Workload for ForkCow {
    fn name(&self) -> &str {
        "fork_cow"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        self.parent = env.spawn_process(Some(0))?;
        Ok(())
    }
    fn on_fork(&mut self, _p: TaskId, c: TaskId) {
        self.child = Some(c);
    }
    fn next_op(&mut self, task: TaskId, last: Ret, _ops: &mut u64) -> Op {
        if Some(task) == self.child {
            self.cs += 1;
            return match self.cs {
                1..=PAGES => Op::Access { addr: self.addr + (self.cs - 1) * 4096, kind: Access::Store },
                _ => Op::Exit,
            };
        }
        self.ps += 1;
        match self.ps {
            1 => Op::Mmap {
                addr: 0,
                len: PAGES * 4096,
                prot: prot::READ | prot::WRITE,
                flags: map::PRIVATE | map::ANONYMOUS,
                fd: -1,
                off: 0,
            },
            2..=17 => {
                if self.ps == 2 {
                    self.addr = last.val() as u64;
                }
                Op::Access { addr: self.addr + (self.ps - 2) * 4096, kind: Access::Store }
            }
            18 => Op::Fork,
            19 => Op::Compute { ns: 10_000_000 },
            20..=35 => Op::Access { addr: self.addr + (self.ps - 20) * 4096, kind: Access::Store },
            _ => Op::Compute { ns: 1_000_000 },
        }
    }
}

#[test]
fn fork_copy_on_write_then_reuse() {
    let c = cfg("[machine]\nnode_mem_mib = [512, 512]\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = 0.05\ncheck = true\naudit_interval_ms = 0.5\n");
    let o = run::simulate_with(&c, Box::new(ForkCow { parent: 0, child: None, addr: 0, ps: 0, cs: 0 }), &mut |_| true).unwrap();
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(stat(&o, "foliosim_fault_anon"), PAGES as i64, "parent's first touches");
    assert_eq!(stat(&o, "foliosim_fault_cow"), PAGES as i64, "child's writes copy");
    assert_eq!(stat(&o, "pgreuse"), PAGES as i64, "parent reuses after the child exits");
    assert_eq!(stat(&o, "foliosim_fork"), 1);
    assert!(stat(&o, "nr_tlb_local_flush_all") + stat(&o, "nr_tlb_local_flush_one") > 0, "fork write-protect must flush the parent");
}

fn stat_of(v: &Value, name: &str) -> i64 {
    v["vmstat"][name].as_i64().unwrap()
}

/// The checker only watches: with it off, the paths that skip its hooks
/// (release_folios' eager per-frame reset and one-call bulk free, among
/// others) must give the run the checker-on paths give, counter for counter.
#[test]
fn the_checker_does_not_change_the_run() {
    for w in ["page_fault1", "page_fault2", "malloc1"] {
        for mode in ["processes", "threads"] {
            let on = small(w, mode, 3, "size_mib = 4");
            let off = on.replace("check = true", "check = false");
            let (mut a, mut b) = (json_of(&on), json_of(&off));
            // What may differ: the check flag, the checker's report, the host time.
            for v in [&mut a, &mut b] {
                v.as_object_mut().unwrap().retain(|k, _| k != "config" && k != "host_time_s" && k != "checker");
            }
            let differ: Vec<&String> =
                a.as_object().unwrap().iter().filter(|(k, x)| b.get(k.as_str()) != Some(*x)).map(|(k, _)| k).collect();
            assert!(differ.is_empty() && a == b, "{w}/{mode}: {differ:?} differ with the checker off");
            assert!(stat_of(&a, "pgfree") > 0, "{w}/{mode}: nothing was freed");
        }
    }
}

/// A setup error keeps its type through the workload's setup: a populated
/// page cache the machine cannot hold (127 MiB of 128, which the config's
/// estimate lets through: the kernel's own pages and the watermarks are
/// not in it) is out of memory (a bigger machine fixes it), not a workload
/// that cannot run.
#[test]
fn a_page_cache_the_machine_cannot_hold_is_out_of_memory() {
    let text = "seed = 1\n[machine]\nprofile = \"generic-x86\"\nnode_mem_mib = [64, 64]\n[workload]\nname = \"file_reader\"\nfs = \"tmpfs\"\nfile_mib = 127\npopulate = true\n[run]\nduration_s = 0.01\n";
    let cfg = foliosim::config::from_toml(text, "oom.toml").unwrap();
    match foliosim::run::simulate(&cfg, &mut |_| true) {
        Err(foliosim::types::Error::OutOfMemory(m)) => assert!(m.contains("page cache"), "{m}"),
        Err(e) => panic!("not OutOfMemory: {e:?}"),
        Ok(_) => panic!("a 127 MiB page cache fitted in 128 MiB with the kernel"),
    }
}
