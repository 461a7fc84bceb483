//! Address spaces and VMAs (struct mm_struct; mm/vma.c, placement from
//! mm/mmap.c): lookup, placement, merge, split. The system calls that change
//! them are mm/mmap.rs, mprotect.rs, mremap.rs and madvise.rs. The tree
//! is a BTreeMap keyed by vm_start, standing in for the maple tree; its
//! costs are charged from the profile by the callers.

use super::pgtable::PageTable;
use super::slub::{vma_layout, KmemCache, VMA_LOCK_SIZE};
use crate::sim::lock::{LineStore, RwSem};
use crate::sim::Ns;
use std::collections::BTreeMap;

pub mod vm {
    pub const READ: u64 = 1 << 0;
    pub const WRITE: u64 = 1 << 1;
    pub const EXEC: u64 = 1 << 2;
    pub const SHARED: u64 = 1 << 3;
    pub const MAYWRITE: u64 = 1 << 5;
    pub const GROWSDOWN: u64 = 1 << 8;
    pub const HUGEPAGE: u64 = 1 << 29;
    pub const NOHUGEPAGE: u64 = 1 << 30;
    /// The heap VMA made by brk.
    pub const BRK: u64 = 1 << 40;
}

pub const TASK_SIZE: u64 = 1 << 47;
/// The top of a 64-bit task's address space that mmap searches below
/// (x86-64 DEFAULT_MAP_WINDOW: one page under 2^47).
pub const DEFAULT_MAP_WINDOW: u64 = TASK_SIZE - 4096;
/// The stack rlimit every task runs with (RLIMIT_STACK's usual 8 MiB).
const STACK_RLIMIT: u64 = 8 << 20;
/// mm/mmap.c stack_guard_gap: 256 pages.
const STACK_GUARD_GAP: u64 = 256 << 12;
/// arch/x86 stack_maxrandom_size with ASLR on: __STACK_RND_MASK (0x3fffff)
/// pages, room for the stack top's own randomisation.
const STACK_MAXRANDOM: u64 = 0x3f_ffff << 12;

/// The top of the mmap area (arch/x86/mm/mmap.c mmap_base): below
/// DEFAULT_MAP_WINDOW by the stack gap (the stack rlimit, the stack's
/// random range when `randomize`, the guard gap; between 128 MiB and 5/6
/// of the window) and by `rnd` bytes (arch_rnd: a random page count).
/// Where a mapping lands below it depends on what is already mapped there
/// (mm/exec.rs: a process image): alignment falls where it falls on Linux.
pub const fn mmap_base(rnd: u64, randomize: bool) -> u64 {
    let pad = if randomize { STACK_MAXRANDOM } else { 0 } + STACK_GUARD_GAP;
    let gap = STACK_RLIMIT + pad;
    let (gap_min, gap_max) = (128 << 20, DEFAULT_MAP_WINDOW / 6 * 5);
    let gap = if gap < gap_min {
        gap_min
    } else if gap > gap_max {
        gap_max
    } else {
        gap
    };
    (DEFAULT_MAP_WINDOW - gap - rnd + 4095) & !4095
}

/// The mmap base with ASLR off (kernel.randomize_va_space = 0, `setarch
/// -R`): 128 MiB below DEFAULT_MAP_WINDOW.
pub const MMAP_BASE: u64 = mmap_base(0, false);
pub const MMAP_MIN_ADDR: u64 = 1 << 16;
/// Start of the heap (brk) with ASLR off, after a small text+data image.
pub const BRK_START: u64 = 0x0060_0000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub flags: u64,
    /// Inode id + 1 of a file mapping; 0 = anonymous.
    pub file: u32,
    /// File offset of `start`, in pages (for anon: start >> PAGE_SHIFT, as Linux sets vm_pgoff).
    pub pgoff: u64,
    /// anon_vma id, assigned at the first anonymous fault (anon_vma_prepare); 0 = none.
    pub anon_vma: u32,
    /// vm_sequence (speculative faults): changed by writers that change what a fault depends on.
    /// Values come from the mm's counter (`Mm::fresh_seq`), so a value also
    /// names one VMA instance: a VMA freed and another created at the same
    /// address never share one (this stands in for SPF's pinned pointer and
    /// its "node cleared" test).
    pub seq: u32,
    /// The per-VMA lock state (per-VMA locks and SPF).
    pub vm_lock: VmaLock,
}

/// Per-VMA synchronisation state. Not part of a VMA's identity: equality
/// ignores it.
#[derive(Clone, Debug, Default)]
pub struct VmaLock {
    /// vm_lock (6.4+): the rwsem faults take for read; its count is one line.
    pub sem: RwSem,
    /// vm_lock_seq: the mm write cycle (`Mm::mm_lock_seq`) in which a writer
    /// marked this VMA with vma_start_write (0: never).
    pub lock_seq: u64,
    /// Address of the VMA's vm_area_struct in the mm's slab cache (0: not
    /// allocated yet); its fields' lines are `Mm::lines` at this address
    /// plus the `vma_layout` offsets.
    pub obj: u64,
    /// Address of its struct vma_lock (per-VMA locks: the rwsem's count).
    pub lock_obj: u64,
}

impl PartialEq for VmaLock {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for VmaLock {}

impl Vma {
    /// The copy a fault works from. Faults read only the VMA's own fields;
    /// a plain clone would also copy the lock's timelines (heap-allocated
    /// deques), one allocation per fault for state the copy never uses.
    #[inline]
    pub fn fault_copy(&self) -> Vma {
        Vma { vm_lock: VmaLock { lock_seq: self.vm_lock.lock_seq, ..Default::default() }, ..*self }
    }

    /// `fault_copy` into a reused copy `dst`, whose lock timelines stay
    /// empty (nothing writes through a fault's copy).
    #[inline]
    pub fn fault_copy_into(&self, dst: &mut Vma) {
        // Exhaustive, so that a field added to Vma must be decided on here
        // (as `fault_copy`'s `..*self` copies it).
        let Vma { start, end, flags, file, pgoff, anon_vma, seq, ref vm_lock } = *self;
        dst.start = start;
        dst.end = end;
        dst.flags = flags;
        dst.file = file;
        dst.pgoff = pgoff;
        dst.anon_vma = anon_vma;
        dst.seq = seq;
        dst.vm_lock.lock_seq = vm_lock.lock_seq;
    }

    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
    pub fn is_anon(&self) -> bool {
        self.file == 0
    }
    pub fn is_shared(&self) -> bool {
        self.flags & vm::SHARED != 0
    }
    // A VMA is never empty (do_mmap refuses a zero length), so no is_empty.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    /// Page offset in the file (or anon linear index) of `addr`.
    #[inline]
    pub fn linear_page_index(&self, addr: u64) -> u64 {
        ((addr - self.start) >> 12) + self.pgoff
    }
    /// Can `next`, starting at our end, merge into us?
    fn can_merge_with(&self, next: &Vma) -> bool {
        self.end == next.start
            && self.flags == next.flags
            && self.file == next.file
            && (self.file == 0 || self.pgoff + (self.len() >> 12) == next.pgoff)
            && (self.anon_vma == 0 || next.anon_vma == 0 || self.anon_vma == next.anon_vma)
            && self.flags & vm::BRK == next.flags & vm::BRK
    }
}

/// The VMA tree: a BTreeMap keyed by vm_start (standing in for the maple
/// tree), read through `Deref`, changed only through the methods below,
/// each of which bumps `seqnum` — as Linux's vmacache_invalidate bumped
/// mm->vmacache_seqnum — so that a copy of a VMA tagged with the seqnum it
/// was made at (`Mm::fault_vma_take`) is known current without a lookup.
#[derive(Debug, Default)]
pub struct VmaTree {
    map: BTreeMap<u64, Vma>,
    seqnum: u64,
}

impl std::ops::Deref for VmaTree {
    type Target = BTreeMap<u64, Vma>;
    #[inline]
    fn deref(&self) -> &BTreeMap<u64, Vma> {
        &self.map
    }
}

impl VmaTree {
    /// The tree after every change so far; never repeats in an mm's life.
    #[inline]
    pub fn seqnum(&self) -> u64 {
        self.seqnum
    }
    /// The tree, to change: every change goes through here.
    #[inline]
    fn changed(&mut self) -> &mut BTreeMap<u64, Vma> {
        self.seqnum += 1;
        &mut self.map
    }
    pub fn get_mut(&mut self, key: &u64) -> Option<&mut Vma> {
        self.changed().get_mut(key)
    }
    pub fn insert(&mut self, key: u64, v: Vma) -> Option<Vma> {
        self.changed().insert(key, v)
    }
    pub fn remove(&mut self, key: &u64) -> Option<Vma> {
        self.changed().remove(key)
    }
    pub fn range_mut<R: std::ops::RangeBounds<u64>>(&mut self, r: R) -> std::collections::btree_map::RangeMut<'_, u64, Vma> {
        self.changed().range_mut(r)
    }
    /// Empty the tree, returning its VMAs in address order.
    pub fn take_all(&mut self) -> Vec<Vma> {
        std::mem::take(self.changed()).into_values().collect()
    }
}

/// An open file description (fd table entry).
#[derive(Clone, Copy, Debug)]
pub struct OpenFile {
    pub inode: u32,
    pub pos: u64,
}

/// One mmap_lock write cycle, as speculative faults need to see it.
#[derive(Clone, Debug, Default)]
pub struct WriteCycle {
    /// mm_lock_seq of the cycle.
    pub seq: u64,
    /// When it acquired mmap_lock, and released or downgraded it (Ns::MAX
    /// while open).
    pub start: Ns,
    pub end: Ns,
    /// Ranges it unmapped.
    pub unmapped: Vec<(u64, u64)>,
    /// VMA ranges whose vm_sequence it bumped (as they were when marked).
    pub marked: Vec<(u64, u64)>,
}

/// The per-mm counters of mm->rss_stat (include/linux/mm_types_task.h:
/// MM_FILEPAGES, MM_ANONPAGES, MM_SWAPENTS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmCounter {
    FilePages,
    AnonPages,
    SwapEnts,
}

pub struct Mm {
    pub(crate) id: u32,
    pub(crate) vmas: VmaTree,
    pub(crate) pt: PageTable,
    pub(crate) mmap_lock: RwSem,
    pub(crate) brk_start: u64,
    pub(crate) brk: u64,
    /// mm->mmap_base: the top of the mmap area (arch_pick_mmap_layout at
    /// exec, copied by fork).
    pub(crate) mmap_base: u64,
    /// mm_cpumask: CPUs that may hold TLB entries of this mm (x86 does not clear bits eagerly).
    pub(crate) cpumask: Vec<u64>,
    /// Threads using this mm.
    pub(crate) users: u32,
    rss_anon: i64,
    rss_file: i64,
    /// Swap PTEs of this mm (MM_SWAPENTS, VmSwap).
    swap_ents: i64,
    /// A secondary MMU subscribed to this mm's notifiers (KVM's EPT of a
    /// VMM's guest RAM: mm/mmu_notifier.rs).
    pub(crate) notifier: Option<Box<super::mmu_notifier::SecondaryMmu>>,
    /// Peak of rss_anon + rss_file in pages (Linux's mm->hiwater_rss, VmHWM).
    hiwater_rss: i64,
    /// rss_anon + rss_file when the run started (after the workload's
    /// setup: a process image's resident pages), in pages.
    base_rss: i64,
    /// The fd table (shared by the threads of a process, copied by fork).
    pub(crate) fds: Vec<Option<OpenFile>>,
    pub(crate) alive: bool,
    /// mm_lock_seq: counts mmap write cycles; the current (or last) cycle's number.
    pub(crate) mm_lock_seq: u64,
    /// Recent write cycles, oldest first: when each held mmap_lock and
    /// what it marked and unmapped. Faults use it to place themselves
    /// against writers whose atomic steps already ran (mmap_lock.rs,
    /// spf.rs).
    pub(crate) cycle_log: std::collections::VecDeque<WriteCycle>,
    /// vm_sequence bumps made outside write cycles (MADV_DONTNEED's zap).
    pub(crate) seq_bumps_read_side: u64,
    /// Source of vm_sequence values.
    next_seq: u32,
    /// mm->tlb_flush_pending: write-protect flushes begun, not finished.
    tlb_flush_pending: u32,
    /// mm->tlb_flush_batched: batched unmaps set pending / seen flushed.
    tlb_flush_batched_pending: u32,
    tlb_flush_batched_flushed: u32,
    /// The vm_area_struct and vma_lock slab caches and the cache lines of
    /// their objects and of this mm_struct. Per mm: object addresses come
    /// from a region of this mm's own, so two processes' VMAs never share a
    /// line (SLUB's caches are global; the workloads where lines matter run
    /// one multi-threaded process).
    vma_cache: KmemCache,
    vma_lock_cache: KmemCache,
    pub(crate) lines: LineStore,
    /// x86 tlb_gen: bumped by every batched unmap of this mm.
    pub(crate) tlb_gen: u64,
    /// Per CPU: the tlb_gen its TLB is up to date with (lazily sized).
    pub(crate) cpu_tlb_gen: Vec<u64>,
    /// NUMA balancing: when task_numa_work may next scan this mm
    /// (mm->numa_next_scan; 0 = never scanned yet), where the scan resumes
    /// (mm->numa_scan_offset) and how many full passes were made (numa_scan_seq).
    pub(crate) numa_next_scan: Ns,
    pub(crate) numa_scan_offset: u64,
    pub(crate) numa_scan_seq: u32,
    /// Tasks asleep on mmap_lock behind its queued writer, in arrival
    /// order; woken when that writer releases or downgrades.
    pub(crate) lock_waiters: Vec<u32>,
    /// Host-side hint for `vma_lookup`: the start (the tree key) of the
    /// VMA found last. Needs no invalidation: a hit is checked against the
    /// tree (the VMA at that key must contain the address, and VMAs never
    /// overlap), so a stale hint only costs the full search.
    last_vma: std::cell::Cell<u64>,
    /// vmacache: the copy of a VMA the last fault worked from, and the
    /// tree's seqnum it is a copy at (`fault_vma_take`).
    fault_vma: Option<(u64, Box<Vma>)>,
}

/// How __get_unmapped_area places an unhinted mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The highest page-aligned gap (mm_get_unmapped_area).
    Page,
    /// The highest start aligned to this many bytes (vm_unmapped_area's
    /// align_mask; the RFC's patch 16).
    AlignMask(u64),
    /// thp_get_unmapped_area: padded by a PMD, then PMD aligned; `bottom`:
    /// as before 96204e15310c (the padding stays above an aligned find).
    ThpPadded { bottom: bool },
}

/// Outcome of inserting a new mapping.
pub struct Placed {
    pub start: u64,
    pub merged: u32,
}

impl Mm {
    pub fn new(id: u32, nr_cpus: u32) -> Self {
        Mm {
            id,
            vmas: VmaTree::default(),
            pt: PageTable::default(),
            mmap_lock: RwSem::default(),
            brk_start: BRK_START,
            brk: BRK_START,
            mmap_base: MMAP_BASE,
            cpumask: vec![0; (nr_cpus as usize).div_ceil(64)],
            users: 1,
            rss_anon: 0,
            rss_file: 0,
            swap_ents: 0,
            notifier: None,
            hiwater_rss: 0,
            base_rss: 0,
            fds: Vec::new(),
            alive: true,
            mm_lock_seq: 0,
            next_seq: 1,
            seq_bumps_read_side: 0,
            cycle_log: Default::default(),
            vma_cache: KmemCache::new(vma_layout::SIZE, nr_cpus, Self::obj_region(id)),
            vma_lock_cache: KmemCache::new(VMA_LOCK_SIZE, nr_cpus, Self::obj_region(id) + (1 << 38)),
            lines: LineStore::default(),
            tlb_flush_pending: 0,
            tlb_flush_batched_pending: 0,
            tlb_flush_batched_flushed: 0,
            tlb_gen: 0,
            cpu_tlb_gen: Vec::new(),
            numa_next_scan: 0,
            numa_scan_offset: 0,
            numa_scan_seq: 0,
            lock_waiters: Vec::new(),
            last_vma: std::cell::Cell::new(u64::MAX),
            fault_vma: None,
        }
    }

    /// mmget: one more user (a thread, a VMM) of this mm.
    pub fn mmget(&mut self) {
        self.users += 1;
    }

    /// mmu_notifier_register: `s` subscribes to this mm's notifiers.
    pub fn mmu_notifier_register(&mut self, s: super::mmu_notifier::SecondaryMmu) {
        self.notifier = Some(Box::new(s));
    }

    // What the crate's integration tests read of an mm (the fields are
    // the crate's).
    pub fn vmas(&self) -> &VmaTree {
        &self.vmas
    }
    pub fn pt(&self) -> &PageTable {
        &self.pt
    }
    pub fn pt_mut(&mut self) -> &mut PageTable {
        &mut self.pt
    }
    pub fn mmap_lock(&self) -> &RwSem {
        &self.mmap_lock
    }
    /// mm->start_brk and mm->brk.
    pub fn brk(&self) -> (u64, u64) {
        (self.brk_start, self.brk)
    }
    /// inc_tlb_flush_pending: a change of PTEs whose TLB flush comes later
    /// has begun.
    pub fn inc_tlb_flush_pending(&mut self) {
        self.tlb_flush_pending += 1;
    }
    /// dec_tlb_flush_pending: that flush is done.
    pub fn dec_tlb_flush_pending(&mut self) {
        self.tlb_flush_pending -= 1;
    }
    /// mm_tlb_flush_pending: CPUs may hold entries the PTEs no longer say.
    pub fn mm_tlb_flush_pending(&self) -> bool {
        self.tlb_flush_pending > 0
    }
    /// set_tlb_ubc_flush_pending's mark: reclaim unmapped a page of this mm
    /// and batched its flush.
    pub fn set_tlb_batched_pending(&mut self) {
        self.tlb_flush_batched_pending += 1;
    }
    /// Batched unmaps since the last flush_tlb_batched_pending.
    pub fn tlb_batched_pending(&self) -> bool {
        self.tlb_flush_batched_pending != self.tlb_flush_batched_flushed
    }
    /// flush_tlb_batched_pending's mark: every batched unmap so far is
    /// flushed (the caller flushes). Returns whether any was pending.
    pub fn take_tlb_batched_pending(&mut self) -> bool {
        let was = self.tlb_batched_pending();
        self.tlb_flush_batched_flushed = self.tlb_flush_batched_pending;
        was
    }

    /// add_mm_counter: `n` more (or fewer) pages of kind `c`.
    #[inline(always)]
    pub fn add_mm_counter(&mut self, c: MmCounter, n: i64) {
        match c {
            MmCounter::FilePages => self.rss_file += n,
            MmCounter::AnonPages => self.rss_anon += n,
            MmCounter::SwapEnts => self.swap_ents += n,
        }
    }
    /// get_mm_counter.
    pub fn get_mm_counter(&self, c: MmCounter) -> i64 {
        match c {
            MmCounter::FilePages => self.rss_file,
            MmCounter::AnonPages => self.rss_anon,
            MmCounter::SwapEnts => self.swap_ents,
        }
    }
    /// Resident pages, anonymous and file (get_mm_rss).
    #[inline(always)]
    pub fn rss(&self) -> i64 {
        self.rss_anon + self.rss_file
    }
    /// update_hiwater_rss: the peak RSS (VmHWM) is at least today's.
    #[inline(always)]
    pub fn update_hiwater_rss(&mut self) {
        self.hiwater_rss = self.hiwater_rss.max(self.rss());
    }
    /// The peak RSS in pages (mm->hiwater_rss).
    pub fn hiwater_rss(&self) -> i64 {
        self.hiwater_rss
    }
    /// The RSS when the run started (after the workload's setup), in pages.
    pub fn base_rss(&self) -> i64 {
        self.base_rss
    }
    /// The run starts now: what is resident is its base.
    pub fn set_base_rss(&mut self) {
        self.base_rss = self.rss();
    }
    /// Not torn down yet (exit_mmap has not run).
    pub fn alive(&self) -> bool {
        self.alive
    }
    pub fn notifier(&self) -> Option<&super::mmu_notifier::SecondaryMmu> {
        self.notifier.as_deref()
    }

    /// Record that the current write cycle unmapped [start, end).
    pub fn log_unmap(&mut self, start: u64, end: u64) {
        if let Some(c) = self.cycle_log.back_mut() {
            c.unmapped.push((start, end));
        }
    }

    /// Record that the current write cycle marks [lo, hi) (vma_start_write,
    /// or a VMA the cycle creates, splits or moves).
    pub(crate) fn log_marked(&mut self, lo: u64, hi: u64) {
        let cyc = self.mm_lock_seq;
        if let Some(c) = self.cycle_log.back_mut().filter(|c| c.seq == cyc) {
            c.marked.push((lo, hi));
        }
    }

    /// A vm_sequence value never used before in this mm.
    #[inline]
    pub fn fresh_seq(&mut self) -> u32 {
        self.next_seq = self.next_seq.wrapping_add(2);
        self.next_seq
    }

    /// Is `v` write-locked for a fault at time `t` (vm_lock_seq ==
    /// mm_lock_seq for per-VMA locks; vm_sequence odd for SPF): did a
    /// write cycle holding mmap_lock at `t` mark `v`'s range? A locked
    /// section is one step, so a writer that acquired before `t` has
    /// already made all its changes; the cycle's lock-hold window says
    /// whether, at `t`, it was inside them. Cycles hold the lock one after
    /// another, so only the last few can still be open at `t`. (A writer
    /// still asleep in the wait queue has changed nothing yet.)
    pub fn vma_write_locked_at(&self, v: &Vma, t: Ns) -> bool {
        for c in self.cycle_log.iter().rev() {
            if c.end <= t {
                return false;
            }
            if c.start <= t && c.marked.iter().any(|&(lo, hi)| lo < v.end && v.start < hi) {
                return true;
            }
        }
        false
    }

    /// Mark the VMA at `key` as modified in this write cycle (the state part
    /// of vma_start_write and of the SPF write_seqcount_begin/end pair).
    pub fn vma_mark_modified(&mut self, key: u64) {
        let seq = self.fresh_seq();
        let cyc = self.mm_lock_seq;
        if let Some(v) = self.vmas.get_mut(&key) {
            v.seq = seq;
            v.vm_lock.lock_seq = cyc;
            let (lo, hi, obj) = (v.start, v.end, v.vm_lock.obj);
            self.log_marked(lo, hi);
            self.writer_store(obj + vma_layout::VM_SEQUENCE);
        }
    }

    /// Base of this mm's kernel-object address region.
    fn obj_region(id: u32) -> u64 {
        (id as u64 + 1) << 40
    }

    /// Line address of this mm_struct's mm_rb/mm_seq/vmacache_seqnum line
    /// (and v11's mm_rb_lock next to them).
    pub fn mm_rb_line(&self) -> u64 {
        Self::obj_region(self.id) + (1 << 39)
    }

    /// A store (or seqcount increment) by the writer holding mmap_lock for
    /// write, on the line holding `addr`: the line moves to the writer's CPU
    /// at the start of its section, so the next reader elsewhere pays a
    /// transfer. The writer's own step is not charged: its constants
    /// (vma_split, mmap, munmap) already include touching the VMA.
    #[inline]
    fn writer_store(&mut self, addr: u64) {
        if addr < (1 << 40) {
            return; // no object
        }
        let lc = crate::sim::lock::LineCost {
            local_rmw: 0,
            same_socket: 0,
            cross_socket: 0,
            read_same_socket: 0,
            read_cross_socket: 0,
            cpus_per_socket: 1,
            mutant: crate::sim::lock::LockMutant::None,
        };
        let (t, cpu) = (self.mmap_lock.writer_from, self.mmap_lock.writer_cpu);
        self.lines.rmw(addr, t, cpu, &lc);
    }

    /// A new vm_area_struct (and vma_lock) on the writer's CPU
    /// (vm_area_alloc, or vm_area_dup for a split or fork), initialised
    /// by it: every line of the object is the writer's.
    pub fn vma_obj_alloc(&mut self, cpu: u32) -> VmaLock {
        let obj = self.vma_cache.alloc(cpu);
        let lock_obj = self.vma_lock_cache.alloc(cpu);
        for off in [vma_layout::VM_START, vma_layout::VM_REF_COUNT, vma_layout::VM_FLAGS, vma_layout::VM_OPS, vma_layout::VM_SEQUENCE] {
            self.writer_store(obj + off);
        }
        self.writer_store(lock_obj);
        VmaLock { obj, lock_obj, ..Default::default() }
    }

    /// vm_area_free of a VMA that left the tree.
    pub fn vma_obj_free(&mut self, l: &VmaLock) {
        if l.obj != 0 {
            self.vma_cache.free(l.obj);
            self.vma_lock_cache.free(l.lock_obj);
        }
    }

    #[inline]
    pub fn cpumask_set(&mut self, cpu: u32) {
        self.cpumask[(cpu / 64) as usize] |= 1 << (cpu % 64);
    }

    pub fn cpumask_iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.cpumask
            .iter()
            .enumerate()
            .flat_map(|(w, &bits)| (0..64u32).filter(move |b| bits & (1u64 << b) != 0).map(move |b| w as u32 * 64 + b))
    }

    /// The VMA containing `addr` (vma_lookup).
    #[inline]
    pub fn vma_lookup(&self, addr: u64) -> Option<&Vma> {
        // A key lookup is much cheaper than the range search, and
        // consecutive faults mostly hit the same VMA.
        if let Some(v) = self.vmas.get(&self.last_vma.get()).filter(|v| v.contains(addr)) {
            return Some(v);
        }
        let v = self.vmas.range(..=addr).next_back().map(|(_, v)| v).filter(|v| v.contains(addr))?;
        self.last_vma.set(v.start);
        Some(v)
    }

    /// The VMA containing `addr`, as the copy a fault works from while it
    /// changes the kernel (None: no VMA there). The copy the last fault
    /// gave back serves again, without a lookup, if the tree has not
    /// changed since it was made (vmacache) and it contains `addr`; else
    /// it is refilled from the tree. Give it back with `fault_vma_put`.
    #[inline(always)]
    pub fn fault_vma_take(&mut self, addr: u64) -> Option<Box<Vma>> {
        match self.fault_vma.take() {
            Some((seq, c)) if seq == self.vmas.seqnum() && c.contains(addr) => Some(c),
            cached => {
                let v = self.vma_lookup(addr)?;
                Some(match cached {
                    Some((_, mut c)) => {
                        v.fault_copy_into(&mut c);
                        c
                    }
                    None => Box::new(v.fault_copy()),
                })
            }
        }
    }

    /// Give back a copy `fault_vma_take` made when the tree was at `seq`:
    /// it serves the next fault if the tree is still there (the seqnum
    /// never comes back to an older value, so a copy from before a change
    /// never matches again; it keeps its allocation for the refill).
    #[inline(always)]
    pub fn fault_vma_put(&mut self, seq: u64, c: Box<Vma>) {
        self.fault_vma = Some((seq, c));
    }

    #[inline]
    pub fn vma_lookup_mut(&mut self, addr: u64) -> Option<&mut Vma> {
        self.vmas.range_mut(..=addr).next_back().map(|(_, v)| v).filter(|v| v.contains(addr))
    }

    /// Top-down search for a free range of `len` bytes, aligned to
    /// `align`, below the mmap base.
    pub fn get_unmapped_area(&self, len: u64, align: u64) -> Option<u64> {
        let mut gap_end = self.mmap_base;
        let floor = self.brk.max(MMAP_MIN_ADDR);
        let fits = |lo: u64, hi: u64| -> Option<u64> {
            if hi < len || hi - len < lo {
                return None;
            }
            let a = (hi - len) & !(align - 1);
            (a >= lo).then_some(a)
        };
        for (_, v) in self.vmas.range(..self.mmap_base).rev() {
            if v.end <= gap_end {
                if let Some(a) = fits(v.end.max(floor), gap_end) {
                    return Some(a);
                }
            }
            gap_end = gap_end.min(v.start);
            if gap_end <= floor {
                return None;
            }
        }
        fits(floor, gap_end)
    }

    /// thp_get_unmapped_area (mm/huge_memory.c, top-down, file offset 0):
    /// search for `len` plus a PMD of padding, and take the PMD-aligned
    /// start inside what was found: the highest one, the found start
    /// itself pushed up by a whole PMD when it was already aligned (since
    /// 96204e15310c; with `bottom`, before it, the found start itself,
    /// the padding left above). A gap holding an aligned `len` but not
    /// `len + PMD` is not taken (a 2 MiB hole left by an aligned 2 MiB
    /// mapping is not reused by the next one). When the padded search
    /// fails, the plain search decides.
    pub fn thp_get_unmapped_area(&self, len: u64, bottom: bool) -> Option<u64> {
        const PMD_SIZE: u64 = 2 << 20;
        match self.get_unmapped_area(len + PMD_SIZE, 4096) {
            Some(ret) => {
                let off_sub = ret.wrapping_neg() & (PMD_SIZE - 1);
                Some(if off_sub == 0 && !bottom { ret + PMD_SIZE } else { ret + off_sub })
            }
            None => self.get_unmapped_area(len, 4096),
        }
    }

    /// Where an unhinted mapping of `len` bytes goes, as `place` says.
    pub fn place(&self, len: u64, place: Placement) -> Option<u64> {
        match place {
            Placement::Page => self.get_unmapped_area(len, 4096),
            Placement::AlignMask(a) => self.get_unmapped_area(len, a),
            Placement::ThpPadded { bottom } => self.thp_get_unmapped_area(len, bottom),
        }
    }

    /// The page-aligned hint `addr` if a mapping of `len` bytes fits there:
    /// above mmap_min_addr, inside the map window, over no VMA.
    pub fn hint_fits(&self, addr: u64, len: u64) -> Option<u64> {
        let a = addr.checked_add(4095)? & !4095;
        let fits = addr != 0 && a >= MMAP_MIN_ADDR && a.checked_add(len).is_some_and(|e| e <= DEFAULT_MAP_WINDOW);
        (fits && self.range_free(a, a + len)).then_some(a)
    }

    /// Is [start, end) free of VMAs?
    pub fn range_free(&self, start: u64, end: u64) -> bool {
        self.vmas.range(..end).next_back().is_none_or(|(_, v)| v.end <= start)
    }

    /// Insert a VMA over a free range, merging with compatible neighbours
    /// (vma_merge_new_range). Returns the number of merges done.
    pub fn insert_vma(&mut self, mut new: Vma) -> u32 {
        let mut merged = 0;
        // A new (or grown) VMA is a new vm_sequence value, made in this cycle.
        new.seq = self.fresh_seq();
        new.vm_lock.lock_seq = self.mm_lock_seq;
        // The object the result lives in (vma_merge): the prev it extends,
        // else the VMA's own (a re-insert after mprotect), else the next it
        // extends downwards, else a new one; the others are freed.
        let mut keep: Option<VmaLock> = (new.vm_lock.obj != 0).then(|| new.vm_lock.clone());
        let mut dropped: [Option<VmaLock>; 2] = [None, None];
        if let Some((&pk, prev)) = self.vmas.range(..new.start).next_back() {
            if prev.can_merge_with(&new) {
                let prev = self.vmas.remove(&pk).unwrap();
                new.start = prev.start;
                new.pgoff = prev.pgoff;
                new.anon_vma = new.anon_vma.max(prev.anon_vma);
                merged += 1;
                dropped[0] = keep.replace(prev.vm_lock);
            }
        }
        if let Some(next) = self.vmas.get(&new.end) {
            if new.can_merge_with(next) {
                let next = self.vmas.remove(&new.end).unwrap();
                new.end = next.end;
                new.anon_vma = new.anon_vma.max(next.anon_vma);
                merged += 1;
                if keep.is_none() {
                    keep = Some(next.vm_lock);
                } else {
                    dropped[1] = Some(next.vm_lock);
                }
            }
        }
        for d in dropped.iter().flatten() {
            self.vma_obj_free(d);
        }
        let l = match keep {
            Some(l) => l,
            None => self.vma_obj_alloc(self.mmap_lock.writer_cpu),
        };
        new.vm_lock.obj = l.obj;
        new.vm_lock.lock_obj = l.lock_obj;
        // vm_start/vm_end/vm_pgoff (line A) and the seqcount written.
        self.writer_store(l.obj + vma_layout::VM_START);
        self.writer_store(l.obj + vma_layout::VM_SEQUENCE);
        self.log_marked(new.start, new.end);
        self.vmas.insert(new.start, new);
        merged
    }

    /// Split VMAs so that `addr` is a boundary (__split_vma). Returns true if a split happened.
    pub fn split_at(&mut self, addr: u64) -> bool {
        let key = match self.vmas.range(..addr).next_back() {
            Some((&k, v)) if v.end > addr => k,
            _ => return false,
        };
        let (s1, s2, cyc) = (self.fresh_seq(), self.fresh_seq(), self.mm_lock_seq);
        let v = self.vmas.get_mut(&key).unwrap();
        let mut tail = v.clone();
        v.end = addr;
        v.seq = s1;
        v.vm_lock.lock_seq = cyc;
        tail.pgoff += (addr - tail.start) >> 12;
        tail.start = addr;
        tail.seq = s2;
        let obj = v.vm_lock.obj;
        // __split_vma: vm_area_dup on the writer's CPU; the old VMA's
        // vm_end (line A) and seqcount are written.
        tail.vm_lock = VmaLock { lock_seq: cyc, ..self.vma_obj_alloc(self.mmap_lock.writer_cpu) };
        self.writer_store(obj + vma_layout::VM_START);
        self.writer_store(obj + vma_layout::VM_SEQUENCE);
        let v = &self.vmas[&key];
        let lo = v.start;
        self.log_marked(lo, tail.end);
        self.vmas.insert(addr, tail);
        true
    }

    /// Detach every VMA inside [start, end), splitting at the edges first.
    /// Returns the detached VMAs (in address order) and the number of splits.
    pub fn detach_range(&mut self, start: u64, end: u64) -> (Vec<Vma>, u32) {
        let mut splits = 0;
        splits += self.split_at(start) as u32;
        splits += self.split_at(end) as u32;
        let keys: Vec<u64> = self.vmas.range(start..end).map(|(&k, _)| k).collect();
        let v: Vec<Vma> = keys.into_iter().map(|k| self.vmas.remove(&k).unwrap()).collect();
        // remove_vma frees the objects (SPF v12 after an RCU grace period and
        // the last reference; not modelled: the object is reusable at once).
        for x in &v {
            self.vma_obj_free(&x.vm_lock);
        }
        (v, splits)
    }

    /// Try to merge the VMA starting at `key` with its neighbours (after mprotect).
    pub fn merge_around(&mut self, key: u64) -> u32 {
        match self.vmas.remove(&key) {
            Some(v) => self.insert_vma(v),
            None => 0,
        }
    }

    pub fn alloc_fd(&mut self, of: OpenFile) -> i32 {
        if let Some(i) = self.fds.iter().position(|f| f.is_none()) {
            self.fds[i] = Some(of);
            i as i32 + 3
        } else {
            self.fds.push(Some(of));
            self.fds.len() as i32 + 2
        }
    }

    pub fn fd(&mut self, fd: i32) -> Option<&mut OpenFile> {
        if fd < 3 {
            return None;
        }
        self.fds.get_mut((fd - 3) as usize).and_then(|f| f.as_mut())
    }
}

impl Mm {
    /// mmu_notifier_invalidate_range_start for [s, e) at `t`: the
    /// subscriber's translations of the range go. Returns what its
    /// callback costs the caller (0 without a subscriber).
    #[inline]
    pub fn mmu_notifier_invalidate(&mut self, s: u64, e: u64, t: Ns) -> Ns {
        match self.notifier.as_deref_mut() {
            Some(n) => n.invalidate_range(s, e, t),
            None => 0,
        }
    }

    /// The notifier half of ptep_clear_young_notify for the page at `va`.
    #[inline]
    pub fn mmu_notifier_clear_young(&mut self, va: u64) -> bool {
        self.notifier.as_deref_mut().is_some_and(|n| n.clear_young(va))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// arch/x86/mm/mmap.c mmap_base: 128 MiB under the map window with
    /// ASLR off; with it on, under the stack's random range (0x3fffff
    /// pages), the 8 MiB rlimit and the 1 MiB guard gap, less `rnd`.
    #[test]
    fn mmap_base_is_x86_64s() {
        assert_eq!(MMAP_BASE, (1 << 47) - 4096 - (128 << 20));
        let top = mmap_base(0, true);
        assert_eq!(top, DEFAULT_MAP_WINDOW - (0x3f_ffff << 12) - (8 << 20) - (1 << 20));
        assert_eq!(mmap_base(7 << 12, true), top - (7 << 12));
        assert_eq!(mmap_base(((1 << 28) - 1) << 12, true) % 4096, 0);
    }

    fn anon(start: u64, end: u64) -> Vma {
        Vma { start, end, flags: vm::READ | vm::WRITE, file: 0, pgoff: start >> 12, anon_vma: 0, seq: 0, vm_lock: Default::default() }
    }

    #[test]
    fn top_down_placement_reuses_freed_hole() {
        let mut mm = Mm::new(1, 4);
        let a = mm.get_unmapped_area(1 << 20, 4096).unwrap();
        assert_eq!(a, MMAP_BASE - (1 << 20));
        mm.insert_vma(Vma { flags: vm::READ, ..anon(a, a + (1 << 20)) });
        let b = mm.get_unmapped_area(1 << 20, 4096).unwrap();
        assert_eq!(b, a - (1 << 20));
        mm.detach_range(a, a + (1 << 20));
        assert_eq!(mm.get_unmapped_area(1 << 20, 4096).unwrap(), a);
    }

    /// The fault's cached copy (vmacache) follows every change of the tree:
    /// a field changed in place, a split, a removal.
    #[test]
    fn fault_vma_copy_follows_every_change() {
        let mut mm = Mm::new(1, 4);
        mm.insert_vma(anon(0x10000, 0x20000));
        let take = |mm: &mut Mm, addr: u64| {
            let seq = mm.vmas.seqnum();
            let c = mm.fault_vma_take(addr);
            let v = c.as_deref().map(Vma::fault_copy);
            if let Some(c) = c {
                mm.fault_vma_put(seq, c);
            }
            v
        };
        assert_eq!(take(&mut mm, 0x11000).unwrap().flags, vm::READ | vm::WRITE);
        mm.vmas.get_mut(&0x10000).unwrap().flags = vm::READ;
        assert_eq!(take(&mut mm, 0x11000).unwrap().flags, vm::READ);
        mm.split_at(0x18000);
        assert_eq!(take(&mut mm, 0x11000).unwrap().end, 0x18000);
        assert_eq!(take(&mut mm, 0x19000).unwrap().start, 0x18000);
        mm.detach_range(0x18000, 0x20000);
        assert!(take(&mut mm, 0x19000).is_none());
        // A copy given back after the tree changed under it (as the first
        // fault's anon_vma_prepare changes it) is not reused.
        let seq = mm.vmas.seqnum();
        let c = mm.fault_vma_take(0x11000).unwrap();
        mm.vmas.get_mut(&0x10000).unwrap().anon_vma = 7;
        mm.fault_vma_put(seq, c);
        assert_eq!(take(&mut mm, 0x11000).unwrap().anon_vma, 7);
    }

    #[test]
    fn merge_and_split() {
        let mut mm = Mm::new(1, 4);
        assert_eq!(mm.insert_vma(anon(0x10000, 0x20000)), 0);
        assert_eq!(mm.insert_vma(anon(0x20000, 0x30000)), 1);
        assert_eq!(mm.vmas.len(), 1);
        let (gone, splits) = mm.detach_range(0x18000, 0x19000);
        assert_eq!(splits, 2);
        assert_eq!(gone.len(), 1);
        assert_eq!(mm.vmas.len(), 2);
        assert!(mm.vma_lookup(0x18000).is_none());
        assert_eq!(mm.vma_lookup(0x19000).unwrap().pgoff, 0x19);
        // Filling the hole merges all three back into one.
        assert_eq!(mm.insert_vma(anon(0x18000, 0x19000)), 2);
        assert_eq!(mm.vmas.len(), 1);
        assert!(mm.range_free(0x30000, 0x40000));
        assert!(!mm.range_free(0x2f000, 0x40000));
    }
}
