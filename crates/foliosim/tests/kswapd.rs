//! kswapd's back-off (mm/vmscan.c: kswapd_failures, MAX_RECLAIM_RETRIES):
//! a node kswapd cannot reclaim from stops costing it CPU, and reclaim
//! progress on the node (direct reclaim) brings it back.

use foliosim::config;
use foliosim::mm::mmzone::Lru;
use foliosim::run::{self, Outcome};
use foliosim::types::Error;
use foliosim::workload::{FsKind, Op, Ret, SetupEnv, TaskId, Workload};

const MIB: u64 = 1 << 20;
/// Read-call size of both phases.
const CHUNK: u64 = MIB;
/// What the tmpfs file keeps when it is truncated before the disk reads.
const TRUNC_MIB: u64 = 16;

/// One task on CPU 1 of a single 64 MiB node: it writes `dirty_mib` of a
/// disk file (dirty page cache: the model has no flusher threads, so
/// reclaim can neither write it back nor drop it; writes that find no
/// memory fail), computes `idle_s` seconds without allocating, then, if
/// `disk_mib` > 0, truncates the written file to TRUNC_MIB (memory comes
/// back, but no reclaim made progress) and
/// reads a disk file of `disk_mib` `passes` times (clean page cache: what
/// reclaim can free), and computes on.
struct Phases {
    dirty_mib: u64,
    idle_s: u64,
    disk_mib: u64,
    passes: u64,
    files: Vec<u32>,
    task: TaskId,
    script: Vec<Op>,
    i: usize,
    fd: i32,
}

impl Phases {
    fn new(dirty_mib: u64, idle_s: u64, disk_mib: u64, passes: u64) -> Box<Phases> {
        Box::new(Phases { dirty_mib, idle_s, disk_mib, passes, files: Vec::new(), task: 0, script: Vec::new(), i: 0, fd: -1 })
    }
}

impl Workload for Phases {
    fn name(&self) -> &str {
        "kswapd-phases"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        self.files.push(env.create_file(FsKind::Disk, self.dirty_mib * MIB, false)?);
        if self.disk_mib > 0 {
            self.files.push(env.create_file(FsKind::Disk, self.disk_mib * MIB, false)?);
        }
        self.task = env.spawn_process(Some(1))?;
        let mut s = vec![Op::Open { file: self.files[0] }];
        s.extend((0..self.dirty_mib * MIB / CHUNK).map(|_| Op::Write { fd: -1, len: CHUNK, buf: 0 }));
        s.extend((0..self.idle_s).map(|_| Op::Compute { ns: 1_000_000_000 }));
        if self.disk_mib > 0 {
            s.push(Op::Ftruncate { fd: -1, len: TRUNC_MIB * MIB });
            s.push(Op::Open { file: self.files[1] });
            for _ in 0..self.passes {
                s.push(Op::Lseek { fd: -1, off: 0 });
                s.extend((0..self.disk_mib * MIB / CHUNK).map(|_| Op::Read { fd: -1, len: CHUNK, buf: 0 }));
            }
        }
        self.script = s;
        Ok(())
    }
    fn next_op(&mut self, _task: TaskId, last: Ret, _ops: &mut u64) -> Op {
        if self.i > 0 && matches!(self.script.get(self.i - 1), Some(Op::Open { .. })) {
            self.fd = last.val() as i32;
        }
        self.i += 1;
        match self.script.get(self.i - 1) {
            Some(Op::Read { len, .. }) => Op::Read { fd: self.fd, len: *len, buf: 0 },
            Some(Op::Write { len, .. }) => Op::Write { fd: self.fd, len: *len, buf: 0 },
            Some(Op::Lseek { off, .. }) => Op::Lseek { fd: self.fd, off: *off },
            Some(Op::Ftruncate { len, .. }) => Op::Ftruncate { fd: self.fd, len: *len },
            Some(op) => *op,
            None => Op::Compute { ns: 1_000_000_000 },
        }
    }
}

/// kswapd runs for every node when demotion is enabled (there is no
/// demotion target on one node: kswapd reclaims page cache only).
fn sim(w: Box<Phases>, duration_s: f64) -> Outcome {
    let toml = format!(
        "[machine]\nprofile = \"e5-2630v3-guest-32g\"\nnr_cpus = 2\nnode_mem_mib = [64]\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = {duration_s}\ncheck = true\naudit_interval_ms = 500.0\n[knobs]\n\"kernel/mm/numa/demotion_enabled\" = true\n"
    );
    let c = config::from_toml(&toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = run::simulate_with(&c, w, &mut |_| true).unwrap();
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    o
}

fn stat(o: &Outcome, name: &str) -> i64 {
    o.kernel.stat().get(foliosim::mm::vmstat::Stat::from_name(name).unwrap())
}

/// kswapd0's system time.
fn kswapd_sys_ns(o: &Outcome) -> u64 {
    let tid = o.kernel.tier().kswapd(0).expect("kswapd runs");
    o.kernel.tasks()[tid as usize].sys_ns
}

/// 63 MiB of dirty page cache on a 64 MiB node: below kswapd's target
/// with nothing it can reclaim. It gives up after 16 runs that each scanned the LRU,
/// and a long idle period then costs it nothing.
#[test]
fn kswapd_gives_up_on_a_node_it_cannot_reclaim() {
    let short = sim(Phases::new(63, 1, 0, 0), 2.0);
    let long = sim(Phases::new(63, 20, 0, 0), 21.0);
    let k = &long.kernel;
    assert!(k.pa().zone_free_pages(0) < k.kswapd_target(0), "the node stays below kswapd's target");
    assert_eq!(k.nodes()[0].kswapd_failures, 16, "MAX_RECLAIM_RETRIES failed runs");
    let lru = [Lru::InactiveAnon, Lru::ActiveAnon, Lru::InactiveFile, Lru::ActiveFile, Lru::Unevictable]
        .iter()
        .map(|&l| k.nodes()[0].lruvec.list(l).pages())
        .sum::<u64>();
    let scanned = stat(&long, "pgscan_kswapd") as u64;
    assert!(scanned >= 16 * lru / 2, "each failed run scans about the LRU once: {scanned} for {lru} pages");
    assert!(scanned <= 2 * 16 * lru, "kswapd scanned {scanned} pages for {lru} pages of LRU");
    assert_eq!(stat(&long, "pgsteal_kswapd"), 0);
    // 19 more seconds of idle: not one more page scanned, no more CPU.
    assert_eq!(stat(&long, "pgscan_kswapd"), stat(&short, "pgscan_kswapd"));
    assert_eq!(kswapd_sys_ns(&long), kswapd_sys_ns(&short));
    assert!(kswapd_sys_ns(&long) < 100_000_000, "kswapd burnt {} ns", kswapd_sys_ns(&long));
}

/// The same hopeless node; then the written file shrinks to 16 MiB and a
/// 56 MiB disk file is read three times: kswapd stays asleep (a wake-up
/// leaves a hopeless node alone) until the allocations reach the min mark
/// and direct reclaim frees clean cache, which resets kswapd_failures;
/// then kswapd reclaims again.
#[test]
fn kswapd_resumes_when_reclaim_makes_progress() {
    let o = sim(Phases::new(63, 2, 56, 3), 6.0);
    assert!(stat(&o, "pgsteal_direct") > 0, "direct reclaim made progress");
    assert!(stat(&o, "pgsteal_kswapd") > 0, "kswapd did not come back");
    assert!(o.kernel.nodes()[0].kswapd_failures < 16);
    // Before the disk reads the node was hopeless, as in the test above.
    let before = sim(Phases::new(63, 2, 0, 0), 2.0);
    assert_eq!(before.kernel.nodes()[0].kswapd_failures, 16);
    assert_eq!(stat(&before, "pgsteal_kswapd"), 0);
}

/// luf-xsbench's machine and workload (1/16 of the memory: 64 MiB DRAM,
/// 1 GiB far memory, 1/16 of XSBench's 5.9 GB of tables), about a third of its
/// lookups, on a NUMA-balancing clock compressed 1000x (so that pages
/// are promoted, and come back active, within the second simulated). The
/// program's text is a mapped tmpfs file: shmem folios on the inactive
/// anon list that demotion cannot take. kswapd must still find victims
/// among the tables' anonymous folios, which sit on the active list: it
/// ages them onto the inactive list while that list is low
/// (inactive_is_low), not only when it is empty.
#[test]
fn demotion_ages_active_anon_when_the_inactive_list_is_low() {
    let toml = "seed = 1\n[machine]\nprofile = \"luf-xsbench-qemu\"\nnode_mem_mib = [64, 1024]\n[workload]\nname = \"xsbench\"\nthreads = 14\ngridpoints = 706\nlookups = 600000\ncompute_ns = 8000\n[run]\nwarmup_s = 0.0\nduration_s = 1.0\nsample_ms = 10.0\n[knobs]\n\"kernel.numa_balancing\" = 2\n\"kernel/mm/numa/demotion_enabled\" = true\n\"kernel.numa_balancing_scan_delay_ms\" = 1\n\"kernel.numa_balancing_scan_period_min_ms\" = 1\n\"kernel.numa_balancing_hot_threshold_ms\" = 1\n\"kernel.numa_balancing_scan_size_mb\" = 16\n\"kernel.numa_balancing_scan_period_max_ms\" = 60\n";
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = run::simulate(&c, &mut |_| true).unwrap();
    assert!(stat(&o, "pgdeactivate") > 0, "no active anon folio was aged");
    assert!(stat(&o, "pgpromote_success") > 0);
    // Once initialisation is over (its freshly written pages are young and
    // rightly rotated), kswapd's scans must find victims. The bug this
    // guards against stole nothing while scanning millions of pages; a
    // working LRU under XSBench's steady access rotates the young pages it
    // meets, 12 to 24 scanned per page demoted here as the timing of the
    // threads' allocations shifts (alloc_cold_ns from 0 to 250 ns gave
    // 12.6, 18.5, 19.5, 15.9, 20.4, 17.8, 24.0). Judged over the
    // lookup phase: from the first sample with lookups done (the tables
    // are built) to the first with all of them done.
    let total = *o.samples_ops.last().unwrap();
    let from = o.samples_ops.iter().position(|&n| n > 0).expect("no lookup done");
    let to = o.samples_ops.iter().position(|&n| n == total).unwrap();
    let at = |name: &str, k: usize| {
        let i = foliosim::mm::vmstat::Stat::from_name(name).unwrap() as usize;
        o.samples_stat[k][i]
    };
    let scan = at("pgscan_kswapd", to) - at("pgscan_kswapd", from);
    let steal = at("pgsteal_kswapd", to) - at("pgsteal_kswapd", from);
    let (t0, t1) = (o.samples_t[from], o.samples_t[to]);
    assert!(steal > 0 && scan < 32 * steal, "from {t0} s to {t1} s kswapd scanned {scan} pages to demote {steal}");
}
