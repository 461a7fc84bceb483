//! Large anonymous folios (issue 3, docs/mechanisms/large-anon-folios.md): order choice, the fault
//! paths, zap, reuse, deferred split, policies, TLB coalescing, and the
//! checker catching each broken variant. Checker on everywhere.

use foliosim::config;
use foliosim::kernel::Kernel;
use foliosim::run::{self, Outcome};
use foliosim::types::Error;
use foliosim::workload::{map, prot, Access, Advice, Op, Ret, SetupEnv, TaskId, Workload};

fn cfg(toml: &str) -> config::Config {
    config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"))
}

fn stat(o: &Outcome, name: &str) -> i64 {
    o.kernel.stat().get(foliosim::mm::vmstat::Stat::from_name(name).unwrap())
}

fn base_cfg(knobs: &str, profile: &str) -> config::Config {
    cfg(&format!(
        "[machine]\nprofile = \"{profile}\"\nnr_cpus = 2\nnode_mem_mib = [256, 256]\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = 0.01\ncheck = true\naudit_interval_ms = 0.5\n[knobs]\n{knobs}\n"
    ))
}

/// One task (plus an optional forked child) running a fixed script. `base`
/// is the address the first mmap returned; ops are built from it.
type Step = Box<dyn Fn(u64) -> Op + Send>;

struct Script {
    steps: Vec<Step>,
    child_steps: Vec<Step>,
    parent: TaskId,
    child: Option<TaskId>,
    i: usize,
    ci: usize,
    base: u64,
}

impl Script {
    fn new(steps: Vec<Step>, child_steps: Vec<Step>) -> Box<Script> {
        Box::new(Script { steps, child_steps, parent: 0, child: None, i: 0, ci: 0, base: 0 })
    }
}

impl Workload for Script {
    fn name(&self) -> &str {
        "script"
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
            self.ci += 1;
            return match self.child_steps.get(self.ci - 1) {
                Some(f) => f(self.base),
                None => Op::Exit,
            };
        }
        if self.i == 1 {
            self.base = last.val() as u64;
        }
        self.i += 1;
        match self.steps.get(self.i - 1) {
            Some(f) => f(self.base),
            None => Op::Compute { ns: 1_000_000 },
        }
    }
}

fn mmap_fixed(addr: u64, len: u64) -> Step {
    Box::new(move |_| Op::Mmap {
        addr,
        len,
        prot: prot::READ | prot::WRITE,
        flags: map::PRIVATE | map::ANONYMOUS | map::FIXED,
        fd: -1,
        off: 0,
    })
}
fn mmap_any(len: u64) -> Step {
    Box::new(move |_| Op::Mmap { addr: 0, len, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 })
}
fn store_at(addr: u64) -> Step {
    Box::new(move |_| Op::Access { addr, kind: Access::Store })
}
fn load_at(addr: u64) -> Step {
    Box::new(move |_| Op::Access { addr, kind: Access::Load })
}
fn store_rel(off: u64) -> Step {
    Box::new(move |b| Op::Access { addr: b + off, kind: Access::Store })
}

fn run_script(c: &config::Config, steps: Vec<Step>, child: Vec<Step>) -> Outcome {
    run::simulate_with(c, Script::new(steps, child), &mut |_| true).unwrap()
}

fn present(k: &Kernel, va: u64) -> bool {
    k.mms()[0].pt().pte(va).present()
}

const RFC: &str = "\"anon_folio.mode\" = \"rfc-v2\"";

/// The order choice (RFC v2 patch 6) on worked examples, on an otherwise empty PTE table.
#[test]
fn order_choice_follows_the_worked_examples() {
    let c = base_cfg(RFC, "generic-x86");
    // [0x10000, 0x30000), fault 0x12000 -> order 4 over 0x10000..0x20000.
    let o = run_script(&c, vec![mmap_fixed(0x10000, 0x20000), store_at(0x12000)], vec![]);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(o.kernel.mthp().path_a[4], 1);
    assert!(present(&o.kernel, 0x10000) && present(&o.kernel, 0x1f000) && !present(&o.kernel, 0x20000));
    // [0x11000, 0x30000), fault 0x12000 -> every block starts below vm_start: order 0.
    let o = run_script(&c, vec![mmap_fixed(0x11000, 0x1f000), store_at(0x12000)], vec![]);
    assert_eq!(o.kernel.mthp().path_a[0], 1);
    assert_eq!(o.kernel.mthp().path_a[2..].iter().sum::<u64>(), 0);
    // fault 0x14000 -> order 2 (0x14000..0x18000).
    let o = run_script(&c, vec![mmap_fixed(0x11000, 0x1f000), store_at(0x14000)], vec![]);
    assert_eq!(o.kernel.mthp().path_a[2], 1);
    assert!(present(&o.kernel, 0x17000) && !present(&o.kernel, 0x18000) && !present(&o.kernel, 0x13000));
    // A zero-page PTE at 0x1a000 blocks order 4; order 3 (0x10000..0x18000) is accepted.
    let o = run_script(&c, vec![mmap_fixed(0x10000, 0x20000), load_at(0x1a000), store_at(0x12000)], vec![]);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(o.kernel.mthp().path_a[3], 1);
    assert!(present(&o.kernel, 0x17000) && !present(&o.kernel, 0x18000));
}

#[test]
fn baseline_and_default_upstream_allocate_order_zero_only() {
    for knobs in ["", "\"anon_folio.mode\" = \"upstream\""] {
        let c = base_cfg(knobs, "generic-x86");
        let o = run_script(&c, vec![mmap_fixed(0x10000, 0x20000), store_at(0x12000)], vec![]);
        assert_eq!(o.kernel.mthp().path_a[0], 1, "{knobs}");
        assert!(!present(&o.kernel, 0x13000), "{knobs}");
    }
}

/// Path B: a write to a zero-page PTE allocates a large zeroed folio (RFC
/// patch 15) with the none-or-entry rule; upstream copies to order 0.
#[test]
fn zero_page_write_is_large_under_rfc_only() {
    let steps = || vec![mmap_fixed(0x10000, 0x20000), load_at(0x12000), store_at(0x12000)];
    let o = run_script(&base_cfg(RFC, "generic-x86"), steps(), vec![]);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(o.kernel.mthp().path_b[4], 1);
    assert_eq!(stat(&o, "foliosim_zero_page_ptes"), 0);
    let o = run_script(
        &base_cfg(
            "\"anon_folio.mode\" = \"upstream\"\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"",
            "generic-x86",
        ),
        steps(),
        vec![],
    );
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(o.kernel.mthp().path_b[0], 1);
    assert_eq!(o.kernel.mthp().path_b[4], 0);
}

/// Upstream per-size controls: always / madvise / inherit, and PMD THP
/// as the 2048 kB size, with its vmstat and per-size counters.
#[test]
fn upstream_per_size_controls() {
    let up = "\"anon_folio.mode\" = \"upstream\"\n";
    let steps = || vec![mmap_fixed(0x200000, 0x400000), store_at(0x212000)];
    // 32 kB always, 64 kB never: order 3.
    let o = run_script(
        &base_cfg(&format!("{up}\"kernel/mm/transparent_hugepage/hugepages-32kB/enabled\" = \"always\""), "generic-x86"),
        steps(),
        vec![],
    );
    assert_eq!(o.kernel.mthp().path_a[3], 1);
    assert_eq!(o.kernel.mthp().anon_fault_alloc[3], 1);
    // 64 kB madvise without MADV_HUGEPAGE: order 0.
    let o = run_script(
        &base_cfg(&format!("{up}\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"madvise\""), "generic-x86"),
        steps(),
        vec![],
    );
    assert_eq!(o.kernel.mthp().path_a[0], 1);
    // 64 kB inherit + top-level always: order 4... but 2048 kB inherits too, so PMD first.
    let o = run_script(
        &base_cfg(&format!("{up}\"kernel/mm/transparent_hugepage/enabled\" = \"always\"\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"inherit\""), "generic-x86"),
        vec![mmap_fixed(0x200000, 0x400000), store_at(0x212000), load_at(0x3ff000), load_at(0x200000)],
        vec![],
    );
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(stat(&o, "thp_fault_alloc"), 1);
    assert_eq!(o.kernel.mthp().anon_fault_alloc[9], 1);
    assert!(present(&o.kernel, 0x200000) && present(&o.kernel, 0x3ff000));
    assert!(stat(&o, "foliosim_tlb_fill_pmd") >= 1, "a walk over a PMD-mapped THP fills a 2 MiB entry");
    // ... and with the PMD size off, 64 kB.
    let o = run_script(
        &base_cfg(&format!("{up}\"kernel/mm/transparent_hugepage/enabled\" = \"always\"\n\"kernel/mm/transparent_hugepage/hugepages-2048kB/enabled\" = \"never\"\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"inherit\""), "generic-x86"),
        steps(),
        vec![],
    );
    assert_eq!(stat(&o, "thp_fault_alloc"), 0);
    assert_eq!(o.kernel.mthp().path_a[4], 1);
}

/// Zap: a partial unmap queues the folio for deferred split; a whole unmap
/// (batched) does not; freeing takes it off the queue.
#[test]
fn partial_unmap_queues_for_deferred_split() {
    let dontneed = |off: u64| -> Step { Box::new(move |b| Op::Madvise { addr: b + off, len: 4096, advice: Advice::DontNeed }) };
    let c = base_cfg(RFC, "generic-x86");
    let o = run_script(&c, vec![mmap_any(1 << 20), store_rel(0), dontneed(0x1000)], vec![]);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(stat(&o, "thp_deferred_split_page"), 1);
    assert_eq!(stat(&o, "foliosim_split_queue_len"), 1);
    assert_eq!(o.kernel.mthp().split_deferred[4], 1);
    // Whole unmap of a fully mapped folio: freed, never queued.
    let munmap: Step = Box::new(|b| Op::Munmap { addr: b, len: 1 << 20 });
    let o = run_script(&c, vec![mmap_any(1 << 20), store_rel(0), munmap], vec![]);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(stat(&o, "thp_deferred_split_page"), 0);
    assert_eq!(stat(&o, "foliosim_nr_anon_large_pages"), 0);
    // Without batch zap (6.3 one-page rmap), the first page queues it; the free unqueues.
    let c = base_cfg(&format!("{RFC}\n\"anon_folio.batch_zap\" = false"), "generic-x86");
    let munmap: Step = Box::new(|b| Op::Munmap { addr: b, len: 1 << 20 });
    let o = run_script(&c, vec![mmap_any(1 << 20), store_rel(0), munmap], vec![]);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(stat(&o, "thp_deferred_split_page"), 1);
    assert_eq!(stat(&o, "foliosim_split_queue_len"), 0);
}

/// fork, the child writes (CoW copies of single pages) and exits, then the
/// parent's first write reuses the whole remaining run (RFC patches 9-10).
#[test]
fn range_reuse_after_the_child_exits() {
    let mut parent: Vec<Step> = vec![mmap_any(1 << 20), store_rel(0), Box::new(|_| Op::Fork), Box::new(|_| Op::Compute { ns: 5_000_000 })];
    parent.push(store_rel(0x3000));
    for i in 0..16 {
        parent.push(store_rel(i * 4096));
    }
    let child: Vec<Step> = vec![store_rel(0x1000)];
    let o = run_script(&base_cfg(RFC, "generic-x86"), parent, child);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    // The child's write copied one page (in the child only); after its exit
    // the folio's 16 references are the parent's 16 PTEs, so the parent's
    // write at 0x3000 reuses the whole run 0..0x10000 in one fault.
    assert_eq!(stat(&o, "foliosim_fault_cow"), 1);
    assert_eq!(o.kernel.mthp().path_c[4], 1, "the child's CoW copies the whole maybe-shared 64 KiB block (path C)");
    let reuse = stat(&o, "pgreuse");
    assert_eq!(reuse, 16, "the parent reuses all 16 pages in one fault, got {reuse}");
    assert_eq!(o.kernel.mthp().path_d_pages[4], 1);
    // Upstream: reuse page by page (each exclusive-less page copies or reuses alone).
    // 2 MiB: a PMD multiple, which 6.12 aligns, so the first 64 KiB block is whole.
    let mut parent: Vec<Step> = vec![mmap_any(2 << 20), store_rel(0), Box::new(|_| Op::Fork), Box::new(|_| Op::Compute { ns: 5_000_000 })];
    for i in 0..16 {
        parent.push(store_rel(i * 4096));
    }
    let o = run_script(
        &base_cfg(
            "\"anon_folio.mode\" = \"upstream\"\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"",
            "generic-x86",
        ),
        parent,
        vec![store_rel(0x1000)],
    );
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert!(stat(&o, "foliosim_fault_cow") >= 15, "6.12 copies a non-exclusive large folio page by page");
}

/// Path C off (patch 14 reverted): the child's CoW copies one page.
#[test]
fn cow_copy_large_can_be_switched_off() {
    let parent: Vec<Step> = vec![mmap_any(1 << 20), store_rel(0), Box::new(|_| Op::Fork), Box::new(|_| Op::Compute { ns: 5_000_000 })];
    let child: Vec<Step> = vec![store_rel(0x1000), store_rel(0x2000)];
    let o = run_script(&base_cfg(&format!("{RFC}\n\"anon_folio.cow_copy_large\" = false"), "generic-x86"), parent, child);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(o.kernel.mthp().path_c[4], 0);
    assert_eq!(stat(&o, "foliosim_fault_cow"), 2);
    let parent: Vec<Step> = vec![mmap_any(1 << 20), store_rel(0), Box::new(|_| Op::Fork), Box::new(|_| Op::Compute { ns: 5_000_000 })];
    let child: Vec<Step> = vec![store_rel(0x1000), store_rel(0x2000)];
    let o = run_script(&base_cfg(RFC, "generic-x86"), parent, child);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(stat(&o, "foliosim_fault_cow"), 1, "one large copy serves both child writes");
}

#[test]
fn rfc_v2_aligns_unhinted_mmaps_to_64k() {
    let steps = vec![mmap_any(0x3000), mmap_any(0x5000), store_rel(0)];
    let o = run_script(&base_cfg(RFC, "generic-x86"), steps, vec![]);
    for v in o.kernel.mms()[0].vmas().values() {
        assert_eq!(v.start % 0x10000, 0, "VMA at {:#x} is not 64 KiB aligned", v.start);
    }
}

fn will_it_scale(w: &str, knobs: &str, profile: &str) -> Outcome {
    let size = if matches!(w, "tlb_flush2" | "read1" | "read2") { "" } else { "size_mib = 4" };
    will_it_scale_with(w, knobs, profile, size)
}

fn will_it_scale_with(w: &str, knobs: &str, profile: &str, size: &str) -> Outcome {
    let c = cfg(&format!(
        "[machine]\nprofile = \"{profile}\"\nnr_cpus = 4\nnode_mem_mib = [1024, 1024]\n[workload]\nname = \"{w}\"\nmode = \"processes\"\ntasks = 2\n{size}\n[run]\nwarmup_s = 0.0\nduration_s = 0.01\ncheck = true\naudit_interval_ms = 2.0\n[knobs]\n{knobs}\n"
    ));
    run::simulate(&c, &mut |_| true).unwrap()
}

#[test]
fn will_it_scale_runs_clean_with_large_folios() {
    for knobs in [
        RFC.to_string(),
        format!("{RFC}\n\"anon_folio.batch_zap\" = false\n\"anon_folio.free_listempty_check\" = true"),
        "\"anon_folio.mode\" = \"upstream\"\n\"kernel/mm/transparent_hugepage/enabled\" = \"always\"\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"".to_string(),
    ] {
        for w in ["page_fault1", "page_fault2", "malloc1", "mmap1", "tlb_flush2", "tlb_flush3"] {
            let o = will_it_scale(w, &knobs, "generic-x86");
            assert!(o.kernel.check().violations.is_empty(), "{w} / {knobs}: {:?}", o.kernel.check().violations);
            assert!(o.kernel.tasks().iter().map(|t| t.ops).sum::<u64>() > 0, "{w}: no ops");
        }
    }
}

#[test]
fn page_fault1_maps_16_pages_per_fault_and_runs_faster() {
    // 64 MiB regions: beyond the profile's warm cache, so that both runs
    // clear cold pages, as page_fault1's 128 MiB does.
    let base = will_it_scale_with("page_fault1", "", "generic-x86", "size_mib = 64");
    let rfc = will_it_scale_with("page_fault1", RFC, "generic-x86", "size_mib = 64");
    assert!(rfc.kernel.check().violations.is_empty(), "{:?}", rfc.kernel.check().violations);
    let pages = stat(&rfc, "foliosim_fault_anon_pages") as f64;
    let faults = stat(&rfc, "foliosim_fault_anon") as f64;
    assert!(pages / faults > 15.0, "pages per fault {}", pages / faults);
    let ops = |o: &Outcome| o.kernel.tasks().iter().map(|t| t.ops).sum::<u64>() as f64;
    let r = ops(&rfc) / ops(&base);
    assert!(r > 2.0 && r < 16.0, "order-4 speedup {r}");
}

/// contpte (arm64) and HPA order-2 coalescing fill large TLB entries over
/// large folios, and cut dTLB misses of a re-read.
#[test]
fn tlb_coalescing_fills_large_entries() {
    let reread = |knobs: &str, extra: &str| {
        let c = cfg(&format!(
            "[machine]\nprofile = \"ampere-altra-160\"\nnr_cpus = 2\nnode_mem_mib = [256, 256]\n{extra}\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = 0.01\ncheck = true\naudit_interval_ms = 0.5\n[knobs]\n{knobs}\n"
        ));
        let mut steps: Vec<Step> = vec![mmap_any(8 << 20)];
        steps.push(Box::new(|b| Op::AccessRange { addr: b, stride: 4096, count: 2048, kind: Access::Store }));
        for _ in 0..3 {
            steps.push(Box::new(|b| Op::AccessRange { addr: b, stride: 4096, count: 2048, kind: Access::Load }));
        }
        run::simulate_with(&c, Script::new(steps, vec![]), &mut |_| true).unwrap()
    };
    let base = reread("", "");
    let big = reread(RFC, "");
    assert!(big.kernel.check().violations.is_empty(), "{:?}", big.kernel.check().violations);
    assert!(stat(&big, "foliosim_tlb_fill_contpte") > 0);
    assert_eq!(stat(&base, "foliosim_tlb_fill_contpte"), 0);
    let misses = |o: &Outcome| stat(o, "foliosim_dtlb_load_misses") + stat(o, "foliosim_dtlb_store_misses");
    assert!(misses(&big) * 4 < misses(&base), "contpte misses {} vs 4K {}", misses(&big), misses(&base));
}

fn mutant(name: &str, steps: Vec<Step>, child: Vec<Step>) -> Vec<String> {
    let c = base_cfg(&format!("{RFC}\n\"debug.mutant\" = \"{name}\""), "generic-x86");
    run_script(&c, steps, child).kernel.check().violations.clone()
}

#[test]
fn checker_catches_a_folio_across_the_vma_boundary() {
    let v = mutant("mthp_skip_vma_bound", vec![mmap_fixed(0x11000, 0x1f000), store_at(0x12000)], vec![]);
    assert!(v.iter().any(|s| s.contains("I-5")), "{v:?}");
}

#[test]
fn checker_catches_overwriting_a_populated_pte() {
    let v = mutant("mthp_skip_pte_recheck", vec![mmap_fixed(0x10000, 0x20000), load_at(0x1a000), store_at(0x12000)], vec![]);
    assert!(v.iter().any(|s| s.contains("I-7")), "{v:?}");
}

#[test]
fn checker_catches_cow_of_an_exclusive_page() {
    let v = mutant(
        "mthp_cow_exclusive",
        vec![
            mmap_any(1 << 20),
            store_rel(0),
            Box::new(|b| Op::Mprotect { addr: b, len: 1 << 20, prot: prot::READ }),
            Box::new(|b| Op::Mprotect { addr: b, len: 1 << 20, prot: prot::READ | prot::WRITE }),
            store_rel(0x1000),
        ],
        vec![],
    );
    assert!(v.iter().any(|s| s.contains("I-12")), "{v:?}");
}

#[test]
fn checker_catches_a_missing_deferred_split_unqueue() {
    let munmap: Step = Box::new(|b| Op::Munmap { addr: b, len: 1 << 20 });
    let dn: Step = Box::new(|b| Op::Madvise { addr: b + 0x1000, len: 4096, advice: Advice::DontNeed });
    let v = mutant("mthp_skip_unqueue", vec![mmap_any(1 << 20), store_rel(0), dn, munmap], vec![]);
    assert!(v.iter().any(|s| s.contains("I-15")), "{v:?}");
}

/// The deferred-split queue lock is one per node (one memcg): with many
/// CPUs unmapping parts of large folios it is contended. 6.3 takes it on
/// every large-folio free, even of a never-queued folio; Yin's lockless
/// check (upstream) does not.
#[test]
fn split_queue_lock_contention_is_visible_with_many_cpus() {
    let run_it = |w: &str, extra: &str| {
        let size = if w == "page_fault1" { "size_mib = 8" } else { "" };
        let c = cfg(&format!(
            "[machine]\nprofile = \"ampere-altra-160\"\nnr_cpus = 32\nnode_mem_mib = [1024, 1024]\ntlb_contpte = false\n[workload]\nname = \"{w}\"\nmode = \"processes\"\ntasks = 32\n{size}\n[run]\nwarmup_s = 0.0\nduration_s = 0.004\ncheck = false\n[knobs]\n{RFC}\n{extra}\n"
        ));
        let o = run::simulate(&c, &mut |_| true).unwrap();
        let j = run::result_json(&c, &o);
        (
            j["locks"]["split_queue_lock_acquisitions"].as_u64().unwrap(),
            j["locks"]["split_queue_lock_contended"].as_u64().unwrap(),
            j["locks"]["split_queue_lock_wait_ns"].as_u64().unwrap(),
        )
    };
    let (acq, cont, wait) = run_it("tlb_flush2", "");
    assert!(acq > 0 && cont > 0 && wait > 0, "tlb_flush2: acquisitions {acq} contended {cont} wait {wait}");
    let (acq, _, _) = run_it("page_fault1", "");
    assert!(acq > 0, "6.3: every large-folio free takes split_queue_lock");
    let (acq2, _, _) = run_it("page_fault1", "\"anon_folio.free_listempty_check\" = true");
    assert_eq!(acq2, 0, "never-queued folios are freed without the lock");
}

fn kbuild(knobs: &str, tasks: u32, jobs: u32, check: bool) -> (Outcome, serde_json::Value) {
    let c = cfg(&format!(
        "[machine]\nprofile = \"ampere-altra-160\"\nnr_cpus = 8\nnode_mem_mib = [2048, 2048]\ntlb_contpte = false\n[workload]\nname = \"kbuild\"\ntasks = {tasks}\njobs = {jobs}\ncompute_us = 200\n[run]\nwarmup_s = 0.0\nduration_s = 10.0\ncheck = {check}\naudit_interval_ms = 1.0\n[knobs]\n{knobs}\n"
    ));
    let o = run::simulate(&c, &mut |_| true).unwrap();
    let j = run::result_json(&c, &o);
    (o, j)
}

/// The kernel-build-like workload runs clean with large folios; its fault
/// paths produce a mix of orders (no order 1) and less system time.
#[test]
fn kbuild_runs_clean_and_mixes_orders() {
    let (base, _) = kbuild("", 4, 3, true);
    let (rfc, _) = kbuild(RFC, 4, 3, true);
    for o in [&base, &rfc] {
        assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
        assert!(o.kernel.tasks().iter().take(4).all(|t| t.exited && t.ops == 3), "every slot ran its jobs");
    }
    let m = &rfc.kernel.mthp();
    assert!(m.path_a[4] > 0 && m.path_a[0] + m.path_a[2] + m.path_a[3] > 0, "path A orders {:?}", m.path_a);
    assert_eq!(m.path_a[1] + m.path_b[1] + m.path_c[1], 0, "never order 1");
    assert!(m.path_b[2..].iter().sum::<u64>() > 0, "bss read-then-write gives large zero-page writes: {:?}", m.path_b);
    let sys = |o: &Outcome| o.kernel.tasks().iter().map(|t| t.sys_ns).sum::<u64>();
    assert!(sys(&rfc) < sys(&base), "sys {} vs {}", sys(&rfc), sys(&base));
}

/// Two threads on two CPUs: thread 0 maps a 256 KiB region, writes it,
/// unmaps it, again and again; thread 1 keeps writing it. With order-4
/// folios and contpte, thread 1's TLB holds 64 KiB entries, which the
/// munmap shootdown must drop; the checker's stale-entry rule must see
/// through a large entry when the shootdown is skipped.
struct SharedRegion {
    tasks: Vec<TaskId>,
    addr: u64,
    step: [u64; 2],
}

const REGION_PAGES: u64 = 64;

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
            return Op::Access { addr: self.addr + (s % REGION_PAGES) * 4096, kind: Access::Store };
        }
        match s % (REGION_PAGES + 2) {
            0 => Op::Mmap {
                addr: 0,
                len: REGION_PAGES << 12,
                prot: prot::READ | prot::WRITE,
                flags: map::PRIVATE | map::ANONYMOUS,
                fd: -1,
                off: 0,
            },
            k @ 1..=REGION_PAGES => {
                if k == 1 {
                    self.addr = last.val() as u64;
                }
                Op::Access { addr: self.addr + (k - 1) * 4096, kind: Access::Store }
            }
            _ => Op::Munmap { addr: self.addr, len: REGION_PAGES << 12 },
        }
    }
}

fn shared_region(mutant: &str) -> Outcome {
    let c = base_cfg(&format!("{RFC}\n\"debug.mutant\" = \"{mutant}\""), "ampere-altra-160");
    run::simulate_with(&c, Box::new(SharedRegion { tasks: vec![], addr: 0, step: [0, 0] }), &mut |_| true).unwrap()
}

#[test]
fn checker_sees_stale_contpte_entries() {
    let o = shared_region("none");
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert!(stat(&o, "foliosim_tlb_fill_contpte") > 0, "thread 1 should fill 64 KiB entries");
    assert!(stat(&o, "nr_tlb_remote_flush") > 0);
    let o = shared_region("skip_shootdown");
    assert!(
        o.kernel.check().violations.iter().any(|v| v.contains("stale")),
        "a skipped shootdown of contpte entries must be caught: {:?}",
        o.kernel.check().violations
    );
}

/// The deferred-split shrinker (run by reclaim) splits partly mapped folios
/// to order 0 and frees the unmapped halves; the audit stays clean.
#[test]
fn deferred_split_shrinker_frees_unmapped_pages() {
    let mut steps: Vec<Step> =
        vec![mmap_any(1 << 20), Box::new(|b| Op::AccessRange { addr: b, stride: 4096, count: 256, kind: Access::Store })];
    for blk in 0..16u64 {
        steps.push(Box::new(move |b| Op::Madvise { addr: b + blk * 0x10000, len: 0x8000, advice: Advice::DontNeed }));
    }
    let mut o = run_script(&base_cfg(RFC, "generic-x86"), steps, vec![]);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
    assert_eq!(stat(&o, "foliosim_split_queue_len"), 16);
    assert_eq!(stat(&o, "foliosim_nr_anon_large_pages"), 256, "the unmapped halves are still allocated");
    let free0 = stat(&o, "nr_free_pages");
    let (freed, _) = o.kernel.try_to_free_pages(o.sim_end, 0, 1);
    assert_eq!(freed, 128, "16 folios x 8 unmapped pages");
    assert_eq!(stat(&o, "nr_free_pages") - free0, 128);
    assert_eq!(stat(&o, "thp_split_page"), 16);
    assert_eq!(stat(&o, "foliosim_split_queue_len"), 0);
    assert_eq!(stat(&o, "foliosim_nr_anon_large_pages"), 0);
    assert_eq!(stat(&o, "nr_anon_pages"), 128);
    foliosim::check::audit(&mut o.kernel);
    assert!(o.kernel.check().violations.is_empty(), "{:?}", o.kernel.check().violations);
}

#[test]
fn large_folio_runs_are_deterministic() {
    let (_, mut a) = kbuild(RFC, 4, 2, false);
    let (_, mut b) = kbuild(RFC, 4, 2, false);
    a.as_object_mut().unwrap().remove("host_time_s");
    b.as_object_mut().unwrap().remove("host_time_s");
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
}

/// The fallback of RFC v2 and of upstream's alloc_anon_folio: with free memory only in isolated 4 KiB frames,
/// every large order fails once (counted per size in anon_fault_fallback)
/// and the fault ends at order 0. rfc-v2 walks 4, 3, 2; upstream tries
/// only the enabled sizes.
#[test]
fn large_allocation_failures_fall_back_order_by_order() {
    use foliosim::mm::page_alloc::MigrateType;
    // Take every frame at order 0, give back one in four (no two of them
    // are buddies), then take every block above order 0 that is left:
    // nothing above order 0 can be allocated.
    let mut fragment = |k: &mut Kernel| {
        let mut held = Vec::new();
        for mt in [MigrateType::Movable, MigrateType::Unmovable, MigrateType::Reclaimable] {
            for nid in k.pa().nids() {
                let (pa, stat) = k.pa_stat_mut();
                while let Some(a) = pa.alloc_pages(0, 0, 0, nid, mt, stat) {
                    held.push(a.pfn);
                }
            }
        }
        for pfn in held.into_iter().filter(|p| p % 4 == 0) {
            let (pa, stat) = k.pa_stat_mut();
            pa.free_pages(0, 0, pfn, 0, stat);
        }
        // The watermark reserve the first sweep left: every block above
        // order 0 goes too (now that free memory is above the marks).
        for order in (1..=10).rev() {
            for mt in [MigrateType::Movable, MigrateType::Unmovable, MigrateType::Reclaimable] {
                for nid in k.pa().nids() {
                    let (pa, stat) = k.pa_stat_mut();
                    while pa.alloc_pages(0, 0, order, nid, mt, stat).is_some() {}
                }
            }
        }
    };
    let no_check = |knobs: &str| {
        cfg(&format!(
            "[machine]\nprofile = \"generic-x86\"\nnr_cpus = 2\nnode_mem_mib = [128, 128]\n[workload]\nname = \"mmap1\"\n[run]\nwarmup_s = 0.0\nduration_s = 0.01\n[knobs]\n{knobs}\n"
        ))
    };
    let steps = || vec![mmap_fixed(0x10000, 0x20000), store_at(0x12000)];
    let o = run::simulate_hooked(&no_check(RFC), Script::new(steps(), vec![]), &mut fragment, &mut |_| true).unwrap();
    let m = &o.kernel.mthp();
    assert_eq!((m.anon_fault_fallback[4], m.anon_fault_fallback[3], m.anon_fault_fallback[2]), (1, 1, 1));
    assert_eq!(m.path_a[0], 1, "the fault ended at order 0");
    assert_eq!(stat(&o, "foliosim_mthp_fault_fallback"), 3);
    assert!(present(&o.kernel, 0x12000) && !present(&o.kernel, 0x13000));
    let up = "\"anon_folio.mode\" = \"upstream\"\n\"kernel/mm/transparent_hugepage/hugepages-64kB/enabled\" = \"always\"";
    let o = run::simulate_hooked(&no_check(up), Script::new(steps(), vec![]), &mut fragment, &mut |_| true).unwrap();
    let m = &o.kernel.mthp();
    assert_eq!((m.anon_fault_fallback[4], m.anon_fault_fallback[3], m.anon_fault_fallback[2]), (1, 0, 0), "only the enabled size is tried");
    assert_eq!(m.path_a[0], 1);
}
