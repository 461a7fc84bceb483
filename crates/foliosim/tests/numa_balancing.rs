//! NUMA balancing in memory-tiering mode for mapped memory (issue #5 item
//! 2): task_numa_work makes PTEs of lower-tier pages PROT_NONE, the hint
//! faults promote hot pages to DRAM through migrate_misplaced_folio.
//!
//! The machine: cxl-1tb shrunk to 256 MiB DRAM + 512 MiB CXL, 2 CPUs. A
//! 256 MiB anonymous filler first fills DRAM, so the process's data (anon,
//! written) lands on CXL; its 8 MiB file, populated on CXL, is mapped
//! shared read-write and only read (clean: async migration moves it).
//! The filler is then unmapped, leaving room on DRAM. DRAM is below 1 GiB,
//! so pgdat_free_space_enough never bypasses the hot threshold and the
//! rate limit.

use foliosim::config;
use foliosim::mm::pgtable::Pte;
use foliosim::run::{self, Outcome};
use foliosim::types::Error;
use foliosim::workload::{map, prot, Access, FsKind, Op, Ret, SetupEnv, TaskId, Workload};

const FILLER: u64 = 0x10_0000_0000;
const DATA: u64 = 0x20_0000_0000;
const COLD: u64 = 0x30_0000_0000;
const FMAP: u64 = 0x40_0000_0000;
const MIB: u64 = 1 << 20;

#[derive(Clone)]
struct Params {
    filler_mib: u64,
    data_mib: u64,
    file_mib: u64,
    /// A second anon region on CXL, touched only every `cold_every` iterations.
    cold_mib: u64,
    cold_every: u32,
    /// User computation between passes over the hot regions.
    compute_ns: u64,
    /// Hot passes before the (optional) final write pass.
    iters: u32,
    write_at_end: bool,
    /// The hot passes leave the data region alone (another thread reads it).
    skip_data: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            filler_mib: 256,
            data_mib: 8,
            file_mib: 8,
            cold_mib: 0,
            cold_every: 0,
            compute_ns: 20_000_000,
            iters: 150,
            write_at_end: false,
            skip_data: false,
        }
    }
}

struct Tiered {
    p: Params,
    file: u32,
    fd: i32,
    script: Vec<Op>,
    pc: usize,
    iter: u32,
}

impl Tiered {
    fn new(p: Params) -> Tiered {
        Tiered { p, file: 0, fd: -1, script: Vec::new(), pc: 0, iter: 0 }
    }
    fn range(addr: u64, mib: u64, kind: Access) -> Op {
        Op::AccessRange { addr, stride: 4096, count: mib * MIB / 4096, kind }
    }
    fn anon(addr: u64, mib: u64) -> Op {
        Op::Mmap { addr, len: mib * MIB, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS | map::FIXED, fd: -1, off: 0 }
    }
}

impl Workload for Tiered {
    fn name(&self) -> &str {
        "numa_tiered"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        self.file = env.create_file_on(FsKind::Disk, self.p.file_mib * MIB, true, Some(1), false)?;
        env.spawn_process(Some(0))?;
        Ok(())
    }
    fn next_op(&mut self, _task: TaskId, last: Ret, ops: &mut u64) -> Op {
        *ops += 1;
        let p = self.p.clone();
        if self.script.is_empty() {
            // Phase 1: fill DRAM, place data and cold regions on CXL, open the file.
            self.script = vec![
                Self::anon(FILLER, p.filler_mib),
                Self::range(FILLER, p.filler_mib, Access::Store),
                Self::anon(DATA, p.data_mib),
                Self::range(DATA, p.data_mib, Access::Store),
            ];
            if p.cold_mib > 0 {
                self.script.push(Self::anon(COLD, p.cold_mib));
                self.script.push(Self::range(COLD, p.cold_mib, Access::Store));
            }
            self.script.push(Op::Open { file: self.file });
        }
        if self.pc < self.script.len() {
            let op = self.script[self.pc];
            self.pc += 1;
            return op;
        }
        if self.fd < 0 {
            self.fd = last.val() as i32;
            self.script.push(Op::Mmap {
                addr: FMAP,
                len: p.file_mib * MIB,
                prot: prot::READ | prot::WRITE,
                flags: map::SHARED | map::FIXED,
                fd: self.fd,
                off: 0,
            });
            self.script.push(Self::range(FMAP, p.file_mib, Access::Load));
            // Phase 2: the filler goes, DRAM has room.
            self.script.push(Op::Munmap { addr: FILLER, len: p.filler_mib * MIB });
            return self.next_op(_task, last, &mut 0);
        }
        // Phase 3: hot passes, a cold pass now and then, computation between.
        if self.iter < p.iters {
            self.iter += 1;
            if !p.skip_data {
                self.script.push(Self::range(DATA, p.data_mib, Access::Load));
            }
            self.script.push(Self::range(FMAP, p.file_mib, Access::Load));
            if p.cold_every > 0 && self.iter.is_multiple_of(p.cold_every) {
                self.script.push(Self::range(COLD, p.cold_mib, Access::Load));
            }
            self.script.push(Op::Compute { ns: p.compute_ns });
        } else if self.iter == p.iters {
            self.iter += 1;
            if p.write_at_end {
                self.script.push(Self::range(DATA, p.data_mib, Access::Store));
            }
            self.script.push(Op::Compute { ns: p.compute_ns });
        } else {
            self.script.push(Op::Compute { ns: p.compute_ns });
        }
        let op = self.script[self.pc];
        self.pc += 1;
        op
    }
}

fn sim(p: Params, duration_s: f64, knobs: &str) -> Outcome {
    let toml = format!(
        "[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [256, 512]\n[workload]\nname = \"file_reader\"\n[run]\nwarmup_s = 0.0\nduration_s = {duration_s}\ncheck = true\naudit_interval_ms = 50.0\n[knobs]\n{knobs}"
    );
    let c = config::from_toml(&toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    run::simulate_with(&c, Box::new(Tiered::new(p)), &mut |_| true).unwrap()
}

fn stat(o: &Outcome, name: &str) -> i64 {
    o.kernel.stat().get(foliosim::mm::vmstat::Stat::from_name(name).unwrap())
}

const TIERING: &str = "\"kernel.numa_balancing\" = 2\n";

/// The process's mm (the one user task's).
fn user_mm(o: &Outcome) -> u32 {
    o.kernel.tasks().iter().find(|t| t.kthread.is_none()).unwrap().mm
}

/// (PTE, node of the mapped page) for each page of [addr, addr + mib).
fn region(o: &Outcome, addr: u64, mib: u64) -> Vec<(Pte, u8)> {
    let k = &o.kernel;
    let m = &k.mms()[user_mm(o) as usize];
    (0..mib * MIB / 4096)
        .map(|i| {
            let pte = m.pt().pte(addr + i * 4096);
            (pte, if pte.present() { k.mem_map().get(pte.pfn()).nid } else { u8::MAX })
        })
        .collect()
}

fn on_node(r: &[(Pte, u8)], nid: u8) -> usize {
    r.iter().filter(|(_, n)| *n == nid).count()
}

fn no_violations(o: &Outcome) {
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert!(o.kernel.check().audits > 0);
}

#[test]
fn tiering_mode_promotes_hot_mapped_anon_and_file_pages() {
    let o = sim(Params::default(), 3.0, TIERING);
    no_violations(&o);
    let data = region(&o, DATA, 8);
    let file = region(&o, FMAP, 8);
    let n = data.len();
    eprintln!(
        "pte_updates {} hint_faults {} local {} candidates {} promoted {} migrated {} pgmigrate_success {}",
        stat(&o, "numa_pte_updates"),
        stat(&o, "numa_hint_faults"),
        stat(&o, "numa_hint_faults_local"),
        stat(&o, "pgpromote_candidate"),
        stat(&o, "pgpromote_success"),
        stat(&o, "numa_pages_migrated"),
        stat(&o, "pgmigrate_success")
    );
    // Pages still in a per-CPU LRU add batch cannot be isolated: a few may stay.
    assert!(on_node(&data, 0) >= n - 32, "anon on DRAM: {} of {n}", on_node(&data, 0));
    assert!(on_node(&file, 0) >= n - 32, "file on DRAM: {} of {n}", on_node(&file, 0));
    let promoted = stat(&o, "pgpromote_success");
    assert!(promoted >= 2 * n as i64 - 64, "{promoted}");
    assert_eq!(stat(&o, "numa_pages_migrated"), promoted);
    assert!(stat(&o, "pgmigrate_success") >= promoted);
    assert!(stat(&o, "numa_pte_updates") >= promoted);
    assert!(stat(&o, "numa_hint_faults") >= promoted);
    // Nothing was local: the CXL node has no CPUs.
    assert_eq!(stat(&o, "numa_hint_faults_local"), 0);
    assert_eq!(stat(&o, "nr_isolated_anon"), 0);
    assert_eq!(stat(&o, "nr_isolated_file"), 0);
    // The data was written (writable PTEs); after promotion through the
    // hinting PTE, which has no write bit, the copies are mapped read-only.
    for (pte, nid) in &data {
        if *nid == 0 {
            assert!(pte.present() && !pte.write() && pte.0 & Pte::PROTNONE == 0, "{pte:?}");
        }
    }
    // DRAM pages are not scanned again in tiering mode: no PTE is left
    // PROT_NONE on the top tier.
    assert!(data.iter().chain(&file).filter(|(p, n)| *n == 0 && p.0 & Pte::PROTNONE != 0).count() == 0);
}

#[test]
fn a_write_after_promotion_reuses_the_exclusive_anon_page() {
    let p = Params { write_at_end: true, ..Params::default() };
    let ro = sim(Params::default(), 3.5, TIERING);
    let rw = sim(p, 3.5, TIERING);
    no_violations(&rw);
    let (a, b) = (region(&ro, DATA, 8), region(&rw, DATA, 8));
    let mut reused = 0;
    for ((pa, na), (pb, nb)) in a.iter().zip(&b) {
        if *na == 0 {
            // Same frame (reused, not copied), now writable and dirty.
            assert_eq!(pa.pfn(), pb.pfn());
            assert_eq!(*nb, 0);
            assert!(pb.write() && pb.dirty(), "{pb:?}");
            reused += 1;
        }
    }
    assert!(reused >= a.len() - 32);
    assert!(stat(&rw, "pgreuse") - stat(&ro, "pgreuse") >= reused as i64, "pgreuse {} vs {}", stat(&rw, "pgreuse"), stat(&ro, "pgreuse"));
    assert_eq!(stat(&rw, "foliosim_fault_cow"), stat(&ro, "foliosim_fault_cow"));
}

/// Migration keeps each page's AnonExclusive (remove_migration_pte maps
/// a page RMAP_EXCLUSIVE from its exclusive migration entry), tail pages
/// of a large folio as much as the head: a write after the promotion of a
/// 64 KiB folio reuses every page of it, never copies.
#[test]
fn a_write_after_promotion_of_a_64k_folio_reuses_every_page() {
    let knobs = format!("{TIERING}\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"\n");
    let p = Params { write_at_end: true, ..Params::default() };
    let ro = sim(Params::default(), 3.5, &knobs);
    let rw = sim(p, 3.5, &knobs);
    no_violations(&rw);
    assert!(stat(&rw, "foliosim_mthp_fault_alloc") > 0);
    assert!(stat(&rw, "pgpromote_success") > 0);
    let (a, b) = (region(&ro, DATA, 8), region(&rw, DATA, 8));
    let reused = a.iter().zip(&b).filter(|((pa, na), (pb, _))| *na == 0 && pa.pfn() == pb.pfn() && pb.write()).count();
    assert!(reused >= a.len() - 32, "{reused} of {}", a.len());
    assert_eq!(stat(&rw, "foliosim_fault_cow"), stat(&ro, "foliosim_fault_cow"));
}

#[test]
fn nothing_moves_without_tiering_mode() {
    for knobs in ["", "\"kernel.numa_balancing\" = 1\n"] {
        let o = sim(Params::default(), 2.5, knobs);
        no_violations(&o);
        for name in ["numa_pte_updates", "numa_hint_faults", "pgpromote_success", "pgpromote_candidate", "pgmigrate_success"] {
            assert_eq!(stat(&o, name), 0, "{knobs}: {name}");
        }
        let n = 8 * MIB as usize / 4096;
        assert_eq!(on_node(&region(&o, DATA, 8), 1), n, "{knobs}");
        assert_eq!(on_node(&region(&o, FMAP, 8), 1), n, "{knobs}");
    }
}

#[test]
fn the_rate_limit_caps_promotions() {
    // 1 MB/s = 256 pages per 1 s window; scans start after 1 s, so a 4 s
    // run has at most 4 windows with hint faults.
    let o = sim(Params::default(), 4.0, &format!("{TIERING}\"kernel.numa_balancing_promote_rate_limit_MBps\" = 1\n"));
    no_violations(&o);
    let promoted = stat(&o, "pgpromote_success");
    let cand = stat(&o, "pgpromote_candidate");
    eprintln!("rate limited: promoted {promoted} candidates {cand} hint faults {}", stat(&o, "numa_hint_faults"));
    assert!(promoted > 0);
    assert!(promoted <= 4 * 256, "{promoted}");
    assert!(cand > promoted, "candidates {cand} promoted {promoted}");
    let total = (on_node(&region(&o, DATA, 8), 0) + on_node(&region(&o, FMAP, 8), 0)) as i64;
    assert_eq!(total, promoted);
}

#[test]
fn the_hot_threshold_rejects_cold_pages() {
    // The cold region is read every 125 passes (about 2.5 s): its hint
    // faults come more than 1 s after the scan and never qualify.
    let p = Params { cold_mib: 4, cold_every: 125, ..Params::default() };
    let o = sim(p, 6.0, TIERING);
    no_violations(&o);
    let cold = region(&o, COLD, 4);
    let data = region(&o, DATA, 8);
    eprintln!("cold on CXL {} of {}, hot on DRAM {}", on_node(&cold, 1), cold.len(), on_node(&data, 0));
    assert_eq!(on_node(&cold, 1), cold.len(), "cold pages stay on CXL");
    assert!(on_node(&data, 0) >= data.len() - 32);
    // The cold pages did fault (and were refused), so hints outnumber promotions.
    assert!(stat(&o, "numa_hint_faults") >= stat(&o, "pgpromote_success") + cold.len() as i64);
}

/// update_task_scan_period in tiering mode: the only hint faults
/// task_numa_fault records are promotions, all remote and private, so
/// each pass over the mm that promotes doubles the task's scan period
/// (from task_scan_min, here scan_period_min: the mm is one scan window)
/// up to task_scan_max.
#[test]
fn a_promoting_task_scans_ever_slower_up_to_scan_period_max() {
    let knobs = |max: u32| {
        format!("{TIERING}\"kernel.numa_balancing_scan_delay_ms\" = 100\n\"kernel.numa_balancing_scan_period_min_ms\" = 100\n\"kernel.numa_balancing_scan_period_max_ms\" = {max}\n")
    };
    let user = |o: &Outcome| o.kernel.tasks().iter().find(|t| t.kthread.is_none()).unwrap().numa;
    let o = sim(Params::default(), 3.0, &knobs(60_000));
    no_violations(&o);
    assert!(stat(&o, "pgpromote_success") > 0);
    let n = user(&o);
    assert_eq!(n.scan_period_max_ms, 60_000);
    assert!(n.scan_period_ms >= 200 && (n.scan_period_ms / 100).is_power_of_two(), "{}", n.scan_period_ms);
    // Capped at task_scan_max.
    let o = sim(Params::default(), 3.0, &knobs(150));
    let n = user(&o);
    assert_eq!((n.scan_period_ms, n.scan_period_max_ms), (150, 150));
}

#[test]
fn deterministic() {
    let a = sim(Params::default(), 2.5, TIERING);
    let b = sim(Params::default(), 2.5, TIERING);
    assert_eq!(a.sim_end, b.sim_end);
    for name in [
        "numa_pte_updates",
        "numa_hint_faults",
        "pgpromote_success",
        "pgpromote_candidate",
        "pgmigrate_success",
        "nr_tlb_remote_flush",
        "pgfault",
    ] {
        assert_eq!(stat(&a, name), stat(&b, name), "{name}");
    }
    let pfns = |o: &Outcome| region(o, DATA, 8).iter().map(|(p, _)| p.0).collect::<Vec<_>>();
    assert_eq!(pfns(&a), pfns(&b));
}

#[test]
fn mode_3_also_scans_the_top_tier_and_only_restores_it() {
    // NUMA_BALANCING_NORMAL | MEMORY_TIERING: top-tier pages get hinting
    // PTEs too; their faults are local and (normal placement not being
    // modelled) only make the PTE accessible again. The first pass (at
    // 1 s) promotes the data, which doubles the scan period: the second
    // pass, the first over the promoted pages, comes at 3 s.
    let o = sim(Params::default(), 5.0, "\"kernel.numa_balancing\" = 3\n");
    no_violations(&o);
    assert!(stat(&o, "pgpromote_success") >= 4096 - 64);
    assert!(stat(&o, "numa_hint_faults_local") > 0);
    assert!(stat(&o, "numa_pte_updates") > stat(&o, "pgpromote_success"));
}

/// Hinting PTEs meet mprotect, fork, CoW, munmap and exit: the filler
/// puts the data on CXL, a scan makes its PTEs PROT_NONE, then the
/// process write-protects part of it, forks, and both processes touch,
/// write, unmap and exit with the checker auditing every 1 ms.
struct Interplay {
    parent: Vec<Op>,
    pc: usize,
    child: Vec<Op>,
    cc: usize,
    file: u32,
    fd: i32,
    parent_tid: Option<TaskId>,
}

impl Workload for Interplay {
    fn name(&self) -> &str {
        "numa_interplay"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        self.file = env.create_file_on(FsKind::Disk, 8 * MIB, true, Some(1), false)?;
        env.spawn_process(Some(0))?;
        Ok(())
    }
    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        *ops += 1;
        let parent = *self.parent_tid.get_or_insert(task);
        if task != parent {
            let op = self.child.get(self.cc).copied().unwrap_or(Op::Exit);
            self.cc += 1;
            return op;
        }
        if self.parent.is_empty() {
            self.parent = vec![
                Tiered::anon(FILLER, 256),
                Tiered::range(FILLER, 256, Access::Store),
                Tiered::anon(DATA, 8),
                Tiered::range(DATA, 8, Access::Store),
                Op::Open { file: self.file },
            ];
            self.child = vec![
                Tiered::range(FMAP, 8, Access::Load),
                Tiered::range(DATA, 8, Access::Load),
                Tiered::range(DATA + 6 * MIB, 1, Access::Store),
                Op::Compute { ns: 1_500_000_000 },
                Tiered::range(DATA, 8, Access::Load),
                Op::Exit,
            ];
        }
        if self.pc == self.parent.len() && self.fd < 0 {
            self.fd = last.val() as i32;
            self.parent.extend([
                Op::Mmap { addr: FMAP, len: 8 * MIB, prot: prot::READ | prot::WRITE, flags: map::SHARED | map::FIXED, fd: self.fd, off: 0 },
                Tiered::range(FMAP, 8, Access::Load),
                Op::Munmap { addr: FILLER, len: 256 * MIB },
                Op::Compute { ns: 1_100_000_000 },
                // The scan ran before this step: every data and file PTE is PROT_NONE.
                Op::Mprotect { addr: DATA, len: 2 * MIB, prot: prot::READ },
                Op::Fork,
                Tiered::range(DATA, 8, Access::Load),
                Tiered::range(DATA + 4 * MIB, 1, Access::Store),
                Op::Munmap { addr: DATA + 7 * MIB, len: MIB },
                Op::Compute { ns: 1_100_000_000 },
                Tiered::range(DATA, 7, Access::Load),
                Op::Mprotect { addr: DATA, len: 2 * MIB, prot: prot::READ | prot::WRITE },
                Tiered::range(DATA, 7, Access::Store),
                Op::Munmap { addr: FMAP, len: 8 * MIB },
            ]);
        }
        let op = self.parent.get(self.pc).copied().unwrap_or(Op::Compute { ns: 10_000_000 });
        self.pc += 1;
        op
    }
}

#[test]
fn hinting_ptes_survive_mprotect_fork_cow_munmap_and_exit() {
    let toml = "[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [256, 512]\n[workload]\nname = \"file_reader\"\n[run]\nwarmup_s = 0.0\nduration_s = 5.0\ncheck = true\naudit_interval_ms = 1.0\n[knobs]\n\"kernel.numa_balancing\" = 2\n";
    let c = config::from_toml(toml, "<test>").unwrap();
    let w = Interplay { parent: Vec::new(), pc: 0, child: Vec::new(), cc: 0, file: 0, fd: -1, parent_tid: None };
    let o = run::simulate_with(&c, Box::new(w), &mut |_| true).unwrap();
    no_violations(&o);
    eprintln!(
        "interplay: pte_updates {} hint_faults {} promoted {} cow {} reuse {} forks {}",
        stat(&o, "numa_pte_updates"),
        stat(&o, "numa_hint_faults"),
        stat(&o, "pgpromote_success"),
        stat(&o, "foliosim_fault_cow"),
        stat(&o, "pgreuse"),
        o.kernel.tasks().iter().filter(|t| t.kthread.is_none()).count()
    );
    assert!(o.kernel.tasks().iter().filter(|t| t.kthread.is_none()).count() == 2, "the fork happened");
    assert!(stat(&o, "numa_pte_updates") >= 4096);
    assert!(stat(&o, "pgpromote_success") > 0);
    assert!(stat(&o, "foliosim_fault_cow") > 0);
    // The parent's surviving data ends up on DRAM and writable again.
    let data = region(&o, DATA, 7);
    assert!(on_node(&data, 0) >= data.len() - 32, "{}", on_node(&data, 0));
    assert!(data.iter().all(|(p, _)| p.present() && p.write()));
}

/// `Tiered` (on CPU 0, often back in user space, so it runs the scans)
/// plus a second thread of the same mm on CPU 1 that alone reads the data
/// region, every 50 ms once it is there.
struct TwoThreads {
    main: Tiered,
    main_tid: TaskId,
    iter: u32,
}

impl Workload for TwoThreads {
    fn name(&self) -> &str {
        "numa_two_threads"
    }
    fn setup(&mut self, env: &mut dyn SetupEnv) -> Result<(), Error> {
        self.main.file = env.create_file_on(FsKind::Disk, self.main.p.file_mib * MIB, true, Some(1), false)?;
        self.main_tid = env.spawn_process(Some(0))?;
        env.spawn_thread(self.main_tid, Some(1))?;
        Ok(())
    }
    fn next_op(&mut self, task: TaskId, last: Ret, ops: &mut u64) -> Op {
        if task == self.main_tid {
            return self.main.next_op(task, last, ops);
        }
        *ops += 1;
        self.iter += 1;
        match self.iter {
            1 => Op::Compute { ns: 500_000_000 },
            i if i % 2 == 0 => Tiered::range(DATA, self.main.p.data_mib, Access::Load),
            _ => Op::Compute { ns: 50_000_000 },
        }
    }
}

fn two_threads(knobs: &str) -> Outcome {
    let toml = format!("[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [256, 512]\n[workload]\nname = \"file_reader\"\n[run]\nwarmup_s = 0.0\nduration_s = 2.5\ncheck = true\naudit_interval_ms = 50.0\n[knobs]\n{TIERING}{knobs}");
    let c = config::from_toml(&toml, "<test>").unwrap();
    let p = Params { file_mib: 1, compute_ns: 1_000_000, iters: 100_000, skip_data: true, ..Params::default() };
    let w = TwoThreads { main: Tiered::new(p), main_tid: 0, iter: 0 };
    run::simulate_with(&c, Box::new(w), &mut |_| true).unwrap()
}

#[test]
fn threads_of_the_mm_share_the_scan_and_the_checker_catches_a_missing_flush() {
    let o = two_threads("");
    no_violations(&o);
    let data = region(&o, DATA, 8);
    assert!(on_node(&data, 0) >= data.len() - 32);
    // One scan per period for the mm, whichever thread gets there first:
    // the first scan updates data and file PTEs once each.
    assert!(stat(&o, "numa_pte_updates") >= 2048 + 256 - 64);
    assert!(stat(&o, "nr_tlb_remote_flush") > 0);
    // Without the shootdown of change_prot_numa's flush the other CPU keeps
    // reaching pages through translations of hinting PTEs.
    let m = two_threads("\"debug.mutant\" = \"skip_shootdown\"\n");
    let v = &m.kernel.check().violations;
    assert!(v.iter().any(|s| s.contains("PROT_NONE hinting PTE")), "{v:?}");
}

/// The reader of promo-table's config 2, "Promo On" (file and buffer in DRAM, tiering mode
/// on, page-cache promotion off): the scanner changes no PTE, yet walking
/// the buffer's PTEs is work charged to the reader (docs/mechanisms/numa-balancing.md#what-the-scan-costs).
fn reader(buffer: bool, knobs: &str) -> Outcome {
    let toml = format!(
        "[machine]\nprofile = \"cxl-1tb\"\nnr_cpus = 2\nnode_mem_mib = [512, 256]\n[workload]\nname = \"file_reader\"\nfile_mib = 64\npopulate = true\npopulate_node = 0\nchunk_kib = 65536\nbuffer = {buffer}\ncycles = 0\n[run]\nwarmup_s = 0.0\nduration_s = 4.0\ncheck = true\naudit_interval_ms = 200.0\n[knobs]\n\"kernel.numa_balancing_scan_period_min_ms\" = 100\n{knobs}"
    );
    let c = config::from_toml(&toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    run::simulate(&c, &mut |_| true).unwrap()
}

#[test]
fn scanning_a_top_tier_buffer_changes_nothing_but_costs_the_reader_time() {
    let sys = |o: &Outcome| o.kernel.tasks().iter().filter(|t| t.kthread.is_none()).map(|t| t.sys_ns).sum::<u64>();
    let pages = |o: &Outcome| o.kernel.tasks().iter().map(|t| t.ops).sum::<u64>();
    let base = reader(true, "");
    let tiering = reader(true, TIERING);
    let no_buffer = reader(false, TIERING);
    for o in [&base, &tiering, &no_buffer] {
        no_violations(o);
    }
    assert_eq!(stat(&tiering, "numa_pte_updates"), 0, "a DRAM-only reader has no PTE to make inaccessible");
    assert_eq!(stat(&tiering, "numa_hint_faults"), 0);
    // Same simulated duration: the scan's time shows as fewer pages read.
    let (b, t, n) = (pages(&base), pages(&tiering), pages(&no_buffer));
    assert!(b > 0 && t < b, "tiering mode with a mapped buffer must read less in the same time: {t} vs {b}");
    assert!(n >= t, "without a buffer there is nothing to walk: {n} vs {t}");
    assert!(sys(&tiering) > 0 && sys(&base) > 0);
}

/// A thread that promotes but never scans (the other thread of the mm
/// scans) starts from init_numa_balancing's period, the scan delay, and
/// doubles it at each pass, as the scanning thread does: its
/// update_task_scan_period moves the mm's next scan that far on, never to
/// the moment of its fault (from a period of 0, which made the mm's scan
/// due at once: the reader, returning to user space, scanned too).
#[test]
fn a_thread_that_never_scanned_doubles_the_scan_delay() {
    let o = two_threads("");
    no_violations(&o);
    let reader = o.kernel.tasks().iter().filter(|t| t.kthread.is_none()).find(|t| !t.numa.ticked).expect("the reading thread never scans");
    let (p, delay) = (reader.numa.scan_period_ms, 1000);
    assert!(p >= 2 * delay && (p / delay).is_power_of_two(), "{p}");
}
