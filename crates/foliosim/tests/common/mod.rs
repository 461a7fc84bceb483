//! The harness the LUF scenario tests share (tests/luf.rs, tests/luf_exits.rs):
//! a kernel driven directly, with every step placed in simulated time.

#![allow(dead_code)]

use foliosim::config;
use foliosim::kernel::Kernel;
use foliosim::sim::Ns;
use foliosim::workload::{map, prot, Access, FsKind, Op, Ret};

pub const PAGES: u64 = 64;

pub struct H {
    pub k: Kernel,
    pub rng: u64,
    /// Per allocating task: (its anonymous arena, pages used so far).
    pub arena: std::collections::HashMap<u32, (u64, u64)>,
}

impl H {
    pub fn boot(knobs: &str, seed: u64) -> H {
        // Page reporting skips a zone unless 32 pageblocks stay free above
        // its low watermark: give node 0 room for that.
        let node0 = if knobs.contains("page_reporting.enabled") { 256 } else { 64 };
        let text = format!("seed = {seed}\n[machine]\nprofile = \"generic-x86\"\nnr_cpus = 16\nnode_mem_mib = [{node0}, 64]\n[workload]\nname = \"mmap1\"\n[run]\nduration_s = 0.01\ncheck = true\n[knobs]\n{knobs}\n");
        let c = config::from_toml(&text, "luf-test").unwrap();
        let (host, guest_prof, guest_knobs) = (c.host.clone(), c.profile.clone(), c.knobs.clone());
        let mut k = Kernel::boot(c.profile, c.knobs, true, seed).unwrap();
        // Shootdowns per CPU, for the tests that count them.
        k.set_tracing(foliosim::kernel::trace::Tracing::new(&["tlb:tlb_flush".into()], &[], k.nr_cpus()));
        let mut h = H { k, rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1, arena: Default::default() };
        // A guest (page reporting, a host knob): on the host kernel its
        // config says, as the multi-guest driver puts it.
        if let Some(hc) = host {
            h.on_a_host_kernel(hc, &guest_prof, &guest_knobs);
        }
        h
    }

    /// Put the harness's kernel on a host kernel booted from `hc`, as its
    /// one guest, its boot's pages backed as the driver backs them.
    pub fn on_a_host_kernel(
        &mut self,
        hc: config::HostCfg,
        guest_prof: &foliosim::hw::profile::Profile,
        guest_knobs: &foliosim::kernel::knobs::Knobs,
    ) {
        use foliosim::virt::kvm::{GuestShape, KvmHost};
        let shape = GuestShape { nr_frames: self.k.mem_bytes() >> 12, nr_vcpus: self.k.nr_cpus(), image: 0 };
        let discard = foliosim::policy::host_discard(guest_knobs).unwrap();
        let mut host = KvmHost::boot(hc.profile, hc.knobs, 1, &[shape], discard, guest_prof, guest_knobs.host_prealloc, true).unwrap();
        host.back_allocated(&self.k).unwrap();
        host.start_guests();
        *self.k.host_mut() = Some(foliosim::virt::Host(Box::new(host)));
    }

    /// A small xorshift: the scenario's own choices, separate from the kernel's RNG.
    pub fn rand(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }

    pub fn process(&mut self, cpu: u32) -> u32 {
        let mm = self.k.new_mm();
        self.task(mm, cpu)
    }

    pub fn thread(&mut self, of: u32, cpu: u32) -> u32 {
        let mm = self.k.tasks()[of as usize].mm;
        self.k.mm_mut(mm).mmget();
        self.task(mm, cpu)
    }

    pub fn task(&mut self, mm: u32, cpu: u32) -> u32 {
        self.k.new_task(mm, cpu)
    }

    pub fn file(&mut self, pages: u64) -> u32 {
        let id = self.k.new_inode(FsKind::Disk, pages << 12);
        self.k.inode_mut(id).data_pages = pages;
        id
    }

    /// Run `op` as task `tid`, starting no earlier than `at`. Returns the
    /// result and the time the task is done.
    pub fn run(&mut self, tid: u32, at: Ns, op: Op) -> (Ret, Ns) {
        let cpu = self.k.tasks()[tid as usize].cpu;
        let tk = self.k.task_mut(tid);
        tk.clock = tk.clock.max(at);
        self.k.cpu_mut(cpu).curr = tid;
        let mut r = self.k.exec(tid, op);
        while r.is_none() {
            let op = self.k.task_mut(tid).pending.take().expect("a pending op");
            r = self.k.exec(tid, op);
        }
        // A fault's lock released in the task's next step: release it now,
        // at its time, before the caller moves the clock.
        if self.k.tasks()[tid as usize].fault_unlock.is_some() {
            self.k.fault_unlock_finish(tid);
        }
        (r.unwrap(), self.k.tasks()[tid as usize].clock)
    }

    pub fn val(&mut self, tid: u32, at: Ns, op: Op) -> (i64, Ns) {
        match self.run(tid, at, op) {
            (Ret::Val(v), t) => (v, t),
            (r, _) => panic!("{r:?}"),
        }
    }

    /// Map file `ino` into `tid`'s mm with `prot_`, shared.
    pub fn map_file(&mut self, tid: u32, at: Ns, ino: u32, prot_: u32) -> (u64, Ns) {
        let (fd, t) = self.val(tid, at, Op::Open { file: ino });
        let (a, t) = self.val(tid, t, Op::Mmap { addr: 0, len: PAGES << 12, prot: prot_, flags: map::SHARED, fd: fd as i32, off: 0 });
        (a as u64, t)
    }

    /// An anonymous private read-write mapping of PAGES pages in `tid`'s
    /// mm from `at`, every page written when `write`. Returns its base and
    /// the time.
    pub fn anon(&mut self, tid: u32, at: Ns, write: bool) -> (u64, Ns) {
        let op =
            Op::Mmap { addr: 0, len: PAGES << 12, prot: prot::READ | prot::WRITE, flags: map::PRIVATE | map::ANONYMOUS, fd: -1, off: 0 };
        let (a, t) = self.val(tid, at, op);
        let base = a as u64;
        if !write {
            return (base, t);
        }
        (base, self.run(tid, t, Op::AccessRange { addr: base, stride: 4096, count: PAGES, kind: Access::Store }).1)
    }

    pub fn read_all(&mut self, tid: u32, at: Ns, base: u64) -> Ns {
        self.run(tid, at, Op::AccessRange { addr: base, stride: 4096, count: PAGES, kind: Access::Load }).1
    }

    /// Direct reclaim by `tid` until `want` pages are freed.
    pub fn reclaim(&mut self, tid: u32, at: Ns, want: u64) -> (u64, Ns) {
        let cpu = self.k.tasks()[tid as usize].cpu;
        self.k.cpu_mut(cpu).curr = tid;
        let mut t = at;
        for c in 0..self.k.nr_cpus() {
            t = self.k.lru_add_drain_cpu(t, c);
        }
        let mut freed = 0;
        for _ in 0..4 {
            let (f, t1) = self.k.try_to_free_pages(t, cpu, want - freed);
            freed += f;
            t = t1;
            if freed >= want {
                break;
            }
        }
        (freed, t)
    }

    /// A process that will allocate: its anonymous arena is mapped now,
    /// at the start (a PROT_WRITE mmap is a LUF v10 forced flush, which
    /// would hide the allocation-time flush the scenarios are about).
    pub fn allocator(&mut self, cpu: u32) -> u32 {
        let tid = self.process(cpu);
        let (a, _) = self.val(
            tid,
            0,
            Op::Mmap {
                addr: 0,
                len: (16 * PAGES) << 12,
                prot: prot::READ | prot::WRITE,
                flags: map::PRIVATE | map::ANONYMOUS,
                fd: -1,
                off: 0,
            },
        );
        self.arena.insert(tid, (a as u64, 0));
        tid
    }

    /// `tid` writes `pages` fresh pages of its arena: allocations that may
    /// take the reclaimed frames.
    pub fn alloc_write(&mut self, tid: u32, at: Ns, pages: u64) -> Ns {
        let (a, used) = self.arena[&tid];
        assert!(used + pages <= 16 * PAGES, "arena of task {tid} used up");
        self.arena.insert(tid, (a, used + pages));
        self.run(tid, at, Op::AccessRange { addr: a + (used << 12), stride: 4096, count: pages, kind: Access::Store }).1
    }

    pub fn stat(&self, name: &str) -> i64 {
        foliosim::mm::vmstat::Stat::from_name(name).map_or(0, |s| self.k.stat().get(s))
    }

    pub fn violations(&self) -> Vec<String> {
        self.k.check().violations.clone()
    }
}

/// Common start: process A with three threads on CPUs 0..2 reads a
/// read-only shared file mapping (every CPU caches its translations);
/// process C on CPU 3 reclaims it. Returns (harness, A's tids, base, time).
pub fn readers_then_reclaim(knobs: &str, seed: u64, alloc_cpus: &[u32]) -> (H, Vec<u32>, u64, Ns, Vec<u32>) {
    let mut h = H::boot(knobs, seed);
    let ds: Vec<u32> = alloc_cpus.iter().map(|&c| h.allocator(c)).collect();
    let f = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let a2 = h.thread(a0, 2);
    let c = h.process(3);
    let (base, mut t) = h.map_file(a0, 0, f, prot::READ);
    for &tid in &[a0, a1, a2] {
        let r = h.rand(1000);
        t = h.read_all(tid, t + r, base);
    }
    let (freed, t) = h.reclaim(c, t + 1000, PAGES);
    assert!(freed >= PAGES, "reclaim freed {freed}");
    (h, vec![a0, a1, a2], base, t, ds)
}

pub const LUF: &str = "\"luf.enabled\" = true";
pub const LUF11: &str = "\"luf.enabled\" = true\n\"luf.v11_hooks\" = true";
pub const SEEDS: u64 = 12;

/// Whether `mutant` makes scenario `f` report a violation under some seed.
pub fn caught(mutant: &str, base: &str, f: impl Fn(&str, u64) -> H) -> bool {
    let knobs = format!("{base}\n\"debug.mutant\" = \"{mutant}\"");
    (1..=SEEDS).any(|s| !f(&knobs, s).violations().is_empty())
}
