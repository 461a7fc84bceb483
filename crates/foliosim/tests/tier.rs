//! Memory tiers and page-cache promotion (docs/mechanisms/pagecache-promotion.md) on a small version of
//! the seed's machine, with the invariant checker on.

use foliosim::config;
use foliosim::run::{self, Outcome};
use foliosim::types::Error;
use foliosim::workload::{FsKind, Op, Ret, SetupEnv, TaskId, Workload};

fn sim(toml: &str) -> Outcome {
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    run::simulate(&c, &mut |_| true).unwrap()
}

fn stat(o: &Outcome, name: &str) -> i64 {
    o.kernel.stat().get(foliosim::mm::vmstat::Stat::from_name(name).unwrap())
}

/// cxl-1tb shrunk to 1 GiB DRAM + 512 MiB CXL and 2 CPUs; a 64 MiB file
/// populated on the CXL node, read in 16 MiB calls. The cap is the
/// rate-limit value in pages: 1024 pages (4 MiB) per read call, so a pass
/// of 4 calls promotes 4096 of the 16384 pages.
/// No process image in these configs: the tests count the file's pages
/// exactly, and the image's file would add its own. The last-level cache
/// is scaled down with the memory (8 MiB, not 105): the file stands for one
/// larger than the caches, whose passes read from the tiers, not from cache.
fn tiered(cycles: u32, knobs: &str) -> String {
    format!(
        "[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [1024, 512]\ncosts = {{ \"cpu.llc_kib\" = 8192 }}\n[workload]\nname = \"file_reader\"\nprocess_image = \"none\"\nfs = \"disk\"\nfile_mib = 64\npopulate = true\npopulate_node = 1\nchunk_kib = 16384\ncycles = {cycles}\n[run]\nwarmup_s = 0.0\nduration_s = 10.0\nsample_ms = 100.0\ncheck = true\naudit_interval_ms = 5.0\nprobes_record = [\"syscalls:sys_exit_read\"]\n[knobs]\n{knobs}\n"
    )
}

const ON: &str = "\"kernel.numa_balancing\" = 2\n\"kernel/mm/numa/pagecache_promotion_enabled\" = true\n\"kernel.numa_balancing_promote_rate_limit_MBps\" = 1024\n";

/// Seconds of each pass over the file: the reader's read() calls that
/// returned 0 (tracepoint syscalls:sys_exit_read, recorded by `tiered`).
fn cycle_times(o: &Outcome) -> Vec<f64> {
    let probes = o.kernel.trace().to_json();
    let events = probes["syscalls:sys_exit_read"]["events"].as_array().expect("sys_exit_read recorded").clone();
    let mut prev = 0u64;
    events
        .iter()
        .filter(|e| e[3] == 0)
        .map(|e| {
            let t = e[0].as_u64().unwrap();
            let d = t - prev;
            prev = t;
            d as f64 / 1e9
        })
        .collect()
}

fn cxl_pages(o: &Outcome) -> usize {
    let k = &o.kernel;
    k.inodes()[0].pages.values().filter(|&&p| k.mem_map().get(p).nid == 1).count()
}

#[test]
fn tiers_put_the_cpu_less_cxl_node_below_dram() {
    let o = sim(&tiered(1, ""));
    let k = &o.kernel;
    assert!(k.tier().node_is_toptier(0));
    assert!(!k.tier().node_is_toptier(1));
    assert_eq!(k.tier().tiers.tier_of(0), 4, "DRAM is memory_tier4");
    assert!(k.tier().tiers.tier_of(1) > 4);
    assert_eq!(k.tier().tiers.demotion_target[0], Some(1));
    assert_eq!(k.tier().tiers.demotion_target[1], None);
    // The file was placed on the CXL node and nothing moved with the knobs off.
    assert_eq!(cxl_pages(&o), 16384);
    assert_eq!(stat(&o, "pgpromote_success"), 0);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
}

#[test]
fn promotion_is_capped_per_read_call_and_converges() {
    // 3 passes bring the folios to referenced+active (the classic LRU state
    // machine), then each pass promotes 4 x 1024 pages: 4 more passes.
    let o = sim(&tiered(9, ON));
    let k = &o.kernel;
    assert!(k.check().violations.is_empty(), "{:?}", k.check().violations);
    assert_eq!(stat(&o, "pgpromote_success"), 16384);
    assert_eq!(stat(&o, "numa_pages_migrated"), 16384);
    assert_eq!(stat(&o, "nr_isolated_file"), 0);
    assert_eq!(cxl_pages(&o), 0);
    assert_eq!(stat(&o, "nr_file_pages"), 16384);
    // Hints: one per candidate that reached numa_migrate_check.
    assert!(stat(&o, "numa_hint_page_cache") >= 16384);
    let ct = cycle_times(&o);
    assert_eq!(ct.len(), 9);
    // Passes 1-3: on CXL, no promotion. 4-7: promotion work on top, each
    // faster than the last as more is on DRAM. 8-9: all on DRAM.
    assert!(ct[3] > ct[2] * 1.3, "{ct:?}");
    for i in 4..7 {
        assert!(ct[i] < ct[i - 1], "{ct:?}");
    }
    assert!(ct[7] < ct[2] * 0.9, "post-promotion pass faster than CXL: {ct:?}");
    assert!((ct[8] - ct[7]).abs() < ct[7] * 0.01, "{ct:?}");
}

#[test]
fn off_means_off() {
    for knobs in ["", "\"kernel.numa_balancing\" = 2\n"] {
        let o = sim(&tiered(5, knobs));
        assert_eq!(stat(&o, "pgpromote_success"), 0, "{knobs}");
        assert_eq!(stat(&o, "numa_hint_page_cache"), 0, "{knobs}");
        assert_eq!(cxl_pages(&o), 16384, "{knobs}");
    }
    // Promotion switched on without memory tiering would do nothing: the
    // config is refused, naming the knob, rather than run as off.
    for knobs in [
        "\"kernel/mm/numa/pagecache_promotion_enabled\" = true\n",
        "\"kernel.numa_balancing\" = 1\n\"kernel/mm/numa/pagecache_promotion_enabled\" = true\n",
    ] {
        let e = config::from_toml(&tiered(5, knobs), "<test>").unwrap_err();
        assert_eq!(e.key, "knobs.kernel/mm/numa/pagecache_promotion_enabled", "{e}");
    }
}

#[test]
fn head_insertion_lays_promoted_pages_out_backwards_and_reads_slower() {
    let tail = sim(&tiered(9, ON));
    let head = sim(&tiered(9, &format!("{ON}\"promotion_list_order\" = \"head\"\n")));
    assert!(head.kernel.check().violations.is_empty(), "{:?}", head.kernel.check().violations);
    assert_eq!(stat(&head, "pgpromote_success"), 16384);
    // Physical order of file pages 1..: ascending with tail insertion,
    // descending inside each batch with head insertion.
    let order = |o: &Outcome| {
        let p = &o.kernel.inodes()[0].pages;
        (1..16384u64).filter(|&i| p[&i] == p[&(i - 1)] + 1).count()
    };
    assert!(order(&tail) > 16000, "tail: {}", order(&tail));
    assert!(order(&head) < 100, "head: {}", order(&head));
    let (t, h) = (cycle_times(&tail)[8], cycle_times(&head)[8]);
    assert!(h > t * 1.2, "post-promotion pass: head {h} vs tail {t}");
}

#[test]
fn checker_catches_promotion_leaking_isolated_folios() {
    let o = sim(&tiered(5, &format!("{ON}\"debug.mutant\" = \"promo_skip_task_work\"\n")));
    let v = &o.kernel.check().violations;
    assert!(v.iter().any(|s| s.contains("promotion list")), "{v:?}");
}

#[test]
fn no_promotion_into_a_node_below_its_watermark() {
    // DRAM just big enough for the file: the top tier fills up and
    // isolation is refused (kswapd is woken) rather than overfilling it.
    let t = tiered(9, ON).replace("node_mem_mib = [1024, 512]", "node_mem_mib = [64, 512]");
    let o = sim(&t);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    let (_, _, high) = o.kernel.pa().zone_watermarks(0);
    assert!(stat(&o, "pgpromote_success") < 16384);
    assert!(o.kernel.pa().zone_free_pages(0) + 1 >= high || stat(&o, "pgsteal_kswapd") > 0);
    // The mutant that skips the check is caught.
    let m = sim(&format!("{t}\"debug.mutant\" = \"promo_ignore_watermark\"\n"));
    assert!(m.kernel.check().violations.iter().any(|s| s.contains("below its high watermark")), "{:?}", m.kernel.check().violations);
}

#[test]
fn a_hot_cache_reaches_the_hook_on_the_first_pass() {
    // populate_hot: folios referenced + active (as after earlier passes).
    let t = tiered(5, ON).replace("populate_node = 1\n", "populate_node = 1\npopulate_hot = true\n");
    let o = sim(&t);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    let ct = cycle_times(&o);
    assert_eq!(stat(&o, "pgpromote_success"), 16384);
    // Passes 1-4 promote a quarter each; pass 5 reads from DRAM only.
    assert!(ct[0] > ct[4] * 1.3, "{ct:?}");
    assert!(ct[3] > ct[4] * 1.2, "{ct:?}");
}

#[test]
fn a_spill_onto_cxl_wakes_no_kswapd() {
    // A 320 MiB file populated on a 256 MiB DRAM node leaves DRAM below
    // its low watermark and spills onto CXL, which has room: the fast
    // path's zonelist fallback, which wakes no kswapd
    // (get_page_from_freelist; only the slow path's wake_all_kswapds does).
    let cfg = "[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [256, 512]\n[workload]\nname = \"file_reader\"\nprocess_image = \"none\"\nfs = \"disk\"\nfile_mib = 320\npopulate = true\nchunk_kib = 4096\ncycles = 1\n[run]\nwarmup_s = 0.0\nduration_s = 5.0\ncheck = true\naudit_interval_ms = 5.0\n[knobs]\n\"kernel/mm/numa/demotion_enabled\" = true\n";
    let s = sim(cfg);
    assert!(s.kernel.check().violations.is_empty(), "{:?}", s.kernel.check().violations);
    let (_, low0, _) = s.kernel.pa().zone_watermarks(0);
    let (_, low1, _) = s.kernel.pa().zone_watermarks(1);
    assert!(s.kernel.pa().zone_free_pages(0) < low0);
    assert!(s.kernel.pa().zone_free_pages(1) >= low1);
    assert_eq!(stat(&s, "pgscan_kswapd"), 0);
    assert_eq!(stat(&s, "nr_file_pages"), 320 * 256);
}

#[test]
fn kswapd_demotes_to_cxl_when_enabled_and_drops_otherwise() {
    // A 764 MiB file populated on 256 MiB DRAM + 512 MiB CXL takes both
    // nodes below low: the slow path wakes both kswapds, and DRAM's
    // demotes to CXL when demotion is on.
    let base = "[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [256, 512]\n[workload]\nname = \"file_reader\"\nprocess_image = \"none\"\nfs = \"disk\"\nfile_mib = 764\npopulate = true\nchunk_kib = 4096\ncycles = 1\n[run]\nwarmup_s = 0.0\nduration_s = 5.0\ncheck = true\naudit_interval_ms = 5.0\n[knobs]\n";
    let on = sim(&format!("{base}\"kernel/mm/numa/demotion_enabled\" = true\n"));
    assert!(on.kernel.check().violations.is_empty(), "{:?}", on.kernel.check().violations);
    assert!(stat(&on, "pgdemote_kswapd") > 0);
    assert!(stat(&on, "pgsteal_kswapd") >= stat(&on, "pgdemote_kswapd"));
    assert!(stat(&on, "pgscan_kswapd") >= stat(&on, "pgsteal_kswapd"));
    // Every page that left came from the file LRUs.
    assert_eq!(stat(&on, "pgsteal_file"), stat(&on, "pgsteal_kswapd") + stat(&on, "pgsteal_direct"));
    assert_eq!(stat(&on, "pgsteal_anon"), 0);
    // Without demotion kswapd only runs in tiering mode; there it drops.
    let off = sim(&format!("{base}\"kernel.numa_balancing\" = 2\n"));
    assert!(off.kernel.check().violations.is_empty(), "{:?}", off.kernel.check().violations);
    assert_eq!(stat(&off, "pgdemote_kswapd"), 0);
    assert!(stat(&off, "pgsteal_kswapd") > 0);
}

#[test]
fn direct_reclaim_demotes_before_dropping() {
    // A cold 400 MiB disk file read through 128 MiB DRAM + 128 MiB CXL:
    // the cache fills both nodes and allocations enter direct reclaim.
    let base = "[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [128, 128]\n[workload]\nname = \"file_reader\"\nfs = \"disk\"\nfile_mib = 400\nchunk_kib = 1024\ncycles = 1\n[run]\nwarmup_s = 0.0\nduration_s = 5.0\ncheck = true\naudit_interval_ms = 5.0\n[knobs]\n";
    let on = sim(&format!("{base}\"kernel/mm/numa/demotion_enabled\" = true\n"));
    assert!(on.kernel.check().violations.is_empty(), "{:?}", on.kernel.check().violations);
    eprintln!(
        "direct: steal {} demote {} kswapd demote {} fail {}",
        stat(&on, "pgsteal_direct"),
        stat(&on, "pgdemote_direct"),
        stat(&on, "pgdemote_kswapd"),
        stat(&on, "pgmigrate_fail")
    );
    assert!(stat(&on, "pgdemote_direct") + stat(&on, "pgdemote_kswapd") > 0);
    assert_eq!(stat(&on, "nr_isolated_file"), 0);
    let off = sim(base);
    assert!(off.kernel.check().violations.is_empty(), "{:?}", off.kernel.check().violations);
    assert_eq!(stat(&off, "pgdemote_direct"), 0);
    assert!(stat(&off, "pgsteal_direct") > 0);
}

/// Write 4 KiB at the start of a hot 1 MiB file on CXL (dirtying page 0),
/// then read the whole file twice: every clean folio is promoted, the
/// dirty one is refused at isolation.
struct DirtyThenRead {
    file: u32,
    step: u32,
    fd: i32,
}

impl Workload for DirtyThenRead {
    fn name(&self) -> &str {
        "dirty_then_read"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        self.file = env.create_file_on(FsKind::Disk, 1 << 20, true, Some(1), true)?;
        env.spawn_process(Some(0))?;
        Ok(())
    }
    fn next_op(&mut self, _task: TaskId, last: Ret, ops: &mut u64) -> Op {
        self.step += 1;
        *ops += 1;
        match self.step {
            1 => Op::Open { file: self.file },
            2 => {
                self.fd = last.val() as i32;
                Op::Write { fd: self.fd, len: 4096, buf: 0 }
            }
            3 | 5 => Op::Lseek { fd: self.fd, off: 0 },
            4 | 6 => Op::Read { fd: self.fd, len: 1 << 20, buf: 0 },
            _ => Op::Exit,
        }
    }
}

#[test]
fn dirty_folios_are_never_isolated_for_promotion() {
    let toml = format!("[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [1024, 512]\n[workload]\nname = \"file_reader\"\n[run]\nwarmup_s = 0.0\nduration_s = 1.0\ncheck = true\naudit_interval_ms = 0.001\n[knobs]\n{ON}");
    let c = config::from_toml(&toml, "<test>").unwrap();
    let o = run::simulate_with(&c, Box::new(DirtyThenRead { file: 0, step: 0, fd: -1 }), &mut |_| true).unwrap();
    let k = &o.kernel;
    assert!(k.check().violations.is_empty(), "{:?}", k.check().violations);
    let pages = &k.inodes()[0].pages;
    assert_eq!(k.mem_map().get(pages[&0]).nid, 1, "the dirty folio stayed on CXL");
    assert!((1..256u64).all(|i| k.mem_map().get(pages[&i]).nid == 0), "clean folios were promoted");
    assert_eq!(stat(&o, "pgpromote_success"), 255);
    assert_eq!(stat(&o, "nr_isolated_file"), 0);
}

#[test]
fn small_reads_promote_the_whole_file_in_one_pass() {
    // The cap is per return to user space: 64 KiB reads (16 pages) never
    // reach 1024 pages, so the first hot pass promotes everything, while
    // 16 MiB reads promote 4 x 1024 pages per pass.
    let small = tiered(2, ON)
        .replace("chunk_kib = 16384", "chunk_kib = 64")
        .replace("populate_node = 1\n", "populate_node = 1\npopulate_hot = true\n");
    let o = sim(&small);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(stat(&o, "pgpromote_success"), 16384);
    let ct = cycle_times(&o);
    assert!(ct[0] > ct[1] * 2.0, "{ct:?}");
    let big = sim(&tiered(1, ON).replace("populate_node = 1\n", "populate_node = 1\npopulate_hot = true\n"));
    assert_eq!(stat(&big, "pgpromote_success"), 4 * 1024);
}

/// A memhog larger than DRAM and CXL together, with demotion and swap:
/// once both nodes are below low, DRAM's kswapd demotes anonymous memory
/// to CXL while CXL is above its min mark (alloc_demote_folio's target),
/// the demotions that find CXL at min fail and go to swap instead
/// (shrink_folio_list's retry without the demotion pass), and CXL's
/// kswapd, woken by the demotions that took CXL below low, swaps too.
#[test]
fn demotion_fills_cxl_to_its_min_mark_and_what_fails_goes_to_swap() {
    let cfg = "[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [256, 512]\n[workload]\nname = \"memhog\"\nsize_mib = 900\nprocess_image = \"none\"\ncycles = 3\n[run]\nwarmup_s = 0.0\nduration_s = 3.0\ncheck = true\naudit_interval_ms = 100.0\n[knobs]\n\"kernel/mm/numa/demotion_enabled\" = true\n\"swap.size_mib\" = 1024\n";
    let s = sim(cfg);
    assert!(s.kernel.check().violations.is_empty(), "{:?}", s.kernel.check().violations);
    let (demoted, failed, out) = (stat(&s, "pgdemote_kswapd"), stat(&s, "pgmigrate_fail"), stat(&s, "pswpout"));
    assert!(demoted > 10_000, "DRAM's kswapd demoted {demoted} pages");
    assert!(failed > 0, "no demotion found CXL at its min mark");
    assert!(out > 0 && stat(&s, "pgsteal_kswapd") >= demoted + out / 2, "swap took what demotion could not: {out}");
    // Demoted or swapped, every page that left came from the anon LRUs.
    assert_eq!(stat(&s, "pgsteal_anon"), stat(&s, "pgsteal_kswapd") + stat(&s, "pgsteal_direct"));
    assert_eq!(stat(&s, "pgsteal_file"), 0);
}

/// cxl-2s, a DRAM and a CXL node per socket, shrunk to 256 MiB DRAM and
/// 512 MiB CXL a socket and one CPU each; a file populated from socket 0's
/// CPU.
fn two_sockets(file_mib: u32) -> String {
    format!("[machine]\nprofile = \"cxl-2s\"\nnr_cpus = 2\nnode_mem_mib = [256, 256, 512, 512]\n[workload]\nname = \"file_reader\"\nprocess_image = \"none\"\nfs = \"disk\"\nfile_mib = {file_mib}\npopulate = true\nchunk_kib = 4096\ncycles = 1\n[run]\nwarmup_s = 0.0\nduration_s = 5.0\ncheck = true\naudit_interval_ms = 5.0\n[knobs]\n\"kernel/mm/numa/demotion_enabled\" = true\n")
}

fn file_pages_on(o: &Outcome, nid: u8) -> usize {
    let k = &o.kernel;
    k.inodes()[0].pages.values().filter(|&&p| k.mem_map().get(p).nid == nid).count()
}

#[test]
fn on_two_sockets_each_dram_node_spills_to_and_demotes_to_its_own_cxl() {
    // The profile's distances (14 to the own socket's CXL, 21 to the other
    // socket's DRAM, 24 to its CXL): each DRAM node's zonelist and
    // demotion target is its own socket's CXL node.
    let s = sim(&two_sockets(320));
    assert!(s.kernel.check().violations.is_empty(), "{:?}", s.kernel.check().violations);
    let k = &s.kernel;
    assert_eq!(k.pa().zonelist(0), vec![0, 2, 1, 3]);
    assert_eq!(k.pa().zonelist(1), vec![1, 3, 0, 2]);
    let on = foliosim::kernel::knobs::Knobs { demotion_enabled: true, ..Default::default() };
    assert_eq!(k.tier().next_demotion_node(0, &on), Some(2));
    assert_eq!(k.tier().next_demotion_node(1, &on), Some(3));
    // 320 MiB on socket 0's 256 MiB DRAM: the rest goes to socket 0's CXL,
    // none to the other socket.
    assert!(file_pages_on(&s, 2) > 0);
    assert_eq!(file_pages_on(&s, 1) + file_pages_on(&s, 3), 0);
    // Beyond DRAM and CXL of socket 0: the fast path goes on along the
    // zonelist to the other socket's DRAM, which has room, and wakes no
    // kswapd (Linux's get_page_from_freelist): nothing is demoted yet.
    let big = sim(&two_sockets(900));
    assert!(big.kernel.check().violations.is_empty(), "{:?}", big.kernel.check().violations);
    assert_eq!(stat(&big, "pgscan_kswapd"), 0);
    assert!(file_pages_on(&big, 1) > 0);
    assert_eq!(file_pages_on(&big, 3), 0);
    assert_eq!(file_pages_on(&big, 0) + file_pages_on(&big, 1) + file_pages_on(&big, 2), 900 * 256);
}

mod common;

#[test]
fn a_demotion_whose_target_is_at_its_min_mark_goes_to_another_lower_node() {
    use foliosim::workload::{map, prot};
    // cxl-2s with socket 0's CXL node small: a file read on socket 0 fills
    // its DRAM and then its CXL node down to their low marks, the rest
    // going to socket 1's DRAM. Direct reclaim on socket 0 then demotes
    // DRAM's page cache: to node 2 until it reaches its min mark, then
    // (alloc_demote_folio without __GFP_THISNODE) to node 3, the other
    // lower-tier node, which the read never reached.
    let text = "[machine]\nprofile = \"cxl-2s\"\nnr_cpus = 2\nnode_mem_mib = [256, 256, 64, 512]\n[workload]\nname = \"mmap1\"\n[run]\nduration_s = 0.01\ncheck = true\n[knobs]\n\"kernel/mm/numa/demotion_enabled\" = true\n";
    let c = config::from_toml(text, "<test>").unwrap();
    let k = foliosim::kernel::Kernel::boot(c.profile, c.knobs, true, 1).unwrap();
    let mut h = common::H { k, rng: 1, arena: Default::default() };
    let tid = h.process(0);
    let chunk: u64 = 1 << 20;
    let (buf, t) = h.val(
        tid,
        0,
        Op::Mmap { addr: 0, len: chunk, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 },
    );
    let pages: u64 = 90_000;
    let ino = h.file(pages);
    let (fd, mut t) = h.val(tid, t, Op::Open { file: ino });
    for _ in 0..(pages << 12).div_ceil(chunk) {
        t = h.run(tid, t, Op::Read { fd: fd as i32, len: chunk, buf: buf as u64 }).1;
    }
    let on = |h: &common::H, nid: u8| h.k.inodes()[ino as usize].pages.values().filter(|&&p| h.k.mem_map().get(p).nid == nid).count();
    assert_eq!(on(&h, 3), 0, "the read itself never reaches node 3");
    assert!(on(&h, 1) > 0);
    let (freed, _) = h.reclaim(tid, t, 8192);
    assert!(freed > 0);
    assert!(h.stat("pgdemote_direct") > 0);
    // Thousands, not a handful: a demotion refused by node 2 lands on node 3.
    assert!(on(&h, 3) >= 1024, "demotions beyond node 2's min mark go to node 3: {}", on(&h, 3));
    assert!(h.violations().is_empty(), "{:?}", h.violations());
}
