//! The per-CPU TLB (`hw/tlb.rs`) against a reference model written for
//! clarity: plain set-associative structures with true LRU, scanned way by
//! way, no filter hashes, no size mask, no SIMD, no unchecked indexing.
//!
//! `hw/tlb.rs` is fast because of what the reference leaves out: the lookup
//! compares 4 or 16 filter hashes at once with SSE2, indexes sets with
//! `get_unchecked`, keeps LRU as stamps with the way in their low bits and
//! probes only the entry sizes present. A property test drives both with
//! the same random operations (lookups of every access kind, a fill after
//! each miss as the page walk does, fills over existing entries, flushes of
//! a page, a range, an ASID or everything, re-tagging an ASID) on the
//! geometries the machine profiles use, and compares every result: each
//! lookup, each flush's count, the statistics, and after every operation
//! the entries of every structure in slot order (which also pins the victim
//! each fill chose) and what covers a probe address.
//!
//! Miri would check the unsafe code for undefined behaviour on these same
//! runs; it is not installable on this project's toolchain (see
//! docs/DEVELOPING.md), so this comparison is the check of that code.

use foliosim::hw::profile::TlbSpec;
use foliosim::hw::tlb::{size, Tlb, TlbEntry, TlbLevel, TlbLookup, TlbStats};
use foliosim::mm::{Pfn, PAGE_SHIFT};
use foliosim::workload::Access;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

// ---- the reference model ---------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Slot {
    ent: TlbEntry,
    /// When the entry was last filled or hit (a per-structure clock).
    used: u64,
}

/// One set-associative structure: `sets` sets of `ways` slots; the set of
/// an entry is its tag (vpn >> size) modulo the number of sets.
struct RefAssoc {
    ways: usize,
    sets: usize,
    slots: Vec<Option<Slot>>,
    clock: u64,
}

impl RefAssoc {
    fn new(entries: u32, ways: u32) -> RefAssoc {
        let (entries, ways) = (entries as usize, ways as usize);
        RefAssoc { ways, sets: entries / ways, slots: vec![None; entries], clock: 0 }
    }

    /// Slot indices of the set that (tag, size) maps to.
    fn set(&self, tag: u64) -> std::ops::Range<usize> {
        let first = (tag % self.sets as u64) as usize * self.ways;
        first..first + self.ways
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The slot holding exactly the key (asid, tag, size), first way first.
    fn find(&self, asid: u32, tag: u64, size: u8) -> Option<usize> {
        self.set(tag).find(|&i| matches!(self.slots[i], Some(s) if s.ent.asid == asid && s.ent.size == size && s.ent.vpn >> size == tag))
    }

    /// The entry covering `vpn`, the smallest size first; a hit makes it
    /// the most recently used of its set.
    fn lookup(&mut self, asid: u32, vpn: u64) -> Option<TlbEntry> {
        for size in 0..=size::MAX {
            if let Some(i) = self.find(asid, vpn >> size, size) {
                let now = self.tick();
                let slot = self.slots[i].as_mut().unwrap();
                slot.used = now;
                return Some(slot.ent);
            }
        }
        None
    }

    /// Fill: over the entry with the same key if there is one, else into
    /// the set's first empty way, else over its least recently used entry.
    fn insert(&mut self, e: TlbEntry) {
        let tag = e.vpn >> e.size;
        let way = self.find(e.asid, tag, e.size).unwrap_or_else(|| {
            let set = self.set(tag);
            let empty = set.clone().find(|&i| self.slots[i].is_none());
            empty.unwrap_or_else(|| set.min_by_key(|&i| self.slots[i].unwrap().used).unwrap())
        });
        let now = self.tick();
        self.slots[way] = Some(Slot { ent: e, used: now });
    }

    /// Drop every entry for which `drop` holds; how many went.
    fn flush(&mut self, drop: impl Fn(&TlbEntry) -> bool) -> u32 {
        let mut n = 0;
        for slot in &mut self.slots {
            if slot.is_some_and(|s| drop(&s.ent)) {
                *slot = None;
                n += 1;
            }
        }
        n
    }

    fn entries(&self) -> impl Iterator<Item = TlbEntry> + '_ {
        self.slots.iter().flatten().map(|s| s.ent)
    }

    fn covering(&self, asid: u32, vpn: u64) -> Vec<TlbEntry> {
        (0..=size::MAX).filter_map(|size| self.find(asid, vpn >> size, size)).map(|i| self.slots[i].unwrap().ent).collect()
    }
}

/// The TLBs of one CPU: L1 iTLB, L1 dTLB (below 2 MiB), L1 dTLB for 2 MiB
/// and up, and the STLB behind them (2 MiB entries only if it holds them).
struct RefTlb {
    l1i: RefAssoc,
    l1d: RefAssoc,
    l1d_2m: RefAssoc,
    stlb: RefAssoc,
    stlb_holds_2m: bool,
    stats: TlbStats,
}

impl RefTlb {
    fn new(spec: &TlbSpec) -> RefTlb {
        RefTlb {
            l1i: RefAssoc::new(spec.l1i_entries, spec.l1i_ways),
            l1d: RefAssoc::new(spec.l1d_entries, spec.l1d_ways),
            l1d_2m: RefAssoc::new(spec.l1d_2m_entries, spec.l1d_2m_ways),
            stlb: RefAssoc::new(spec.stlb_entries, spec.stlb_ways),
            stlb_holds_2m: spec.stlb_holds_2m,
            stats: TlbStats::default(),
        }
    }

    fn all(&mut self) -> [&mut RefAssoc; 4] {
        [&mut self.l1i, &mut self.l1d, &mut self.l1d_2m, &mut self.stlb]
    }

    fn l1_insert(&mut self, kind: Access, e: TlbEntry) {
        match kind {
            Access::Ifetch => self.l1i.insert(e),
            _ if e.size >= size::PMD => self.l1d_2m.insert(e),
            _ => self.l1d.insert(e),
        }
    }

    fn lookup(&mut self, asid: u32, va: u64, kind: Access) -> TlbLookup {
        let (k, vpn) = (kind as usize, va >> PAGE_SHIFT);
        self.stats.lookups[k] += 1;
        let l1 = match kind {
            Access::Ifetch => self.l1i.lookup(asid, vpn),
            _ => self.l1d.lookup(asid, vpn).or_else(|| self.l1d_2m.lookup(asid, vpn)),
        };
        if let Some(e) = l1 {
            return TlbLookup::L1Hit(e);
        }
        self.stats.l1_misses[k] += 1;
        if let Some(e) = self.stlb.lookup(asid, vpn) {
            self.stats.stlb_hits[k] += 1;
            self.l1_insert(kind, e);
            return TlbLookup::StlbHit(e);
        }
        self.stats.walks[k] += 1;
        TlbLookup::Miss
    }

    fn fill(&mut self, kind: Access, e: TlbEntry) {
        self.stats.fills += 1;
        self.l1_insert(kind, e);
        if e.size < size::PMD || self.stlb_holds_2m {
            self.stlb.insert(e);
        }
    }

    fn flush(&mut self, drop: impl Fn(&TlbEntry) -> bool) -> u32 {
        let n = self.all().into_iter().map(|a| a.flush(&drop)).sum();
        self.stats.flushed_entries += n as u64;
        n
    }

    /// Entries of `asid` overlapping [start, end) (byte addresses).
    fn flush_range(&mut self, asid: u32, start: u64, end: u64) -> u32 {
        if end <= start {
            return 0;
        }
        let (first, last) = (start >> PAGE_SHIFT, (end - 1) >> PAGE_SHIFT);
        self.flush(|e| e.asid == asid && e.vpn <= last && e.vpn + e.nr_pages() > first)
    }

    fn retag(&mut self, from: u32, to: u32) -> u32 {
        let mut n = 0;
        for a in self.all() {
            for s in a.slots.iter_mut().flatten().filter(|s| s.ent.asid == from) {
                s.ent.asid = to;
                n += 1;
            }
        }
        n
    }

    fn levels(&self) -> [(TlbLevel, &RefAssoc); 4] {
        [(TlbLevel::L1I, &self.l1i), (TlbLevel::L1D, &self.l1d), (TlbLevel::L1D2M, &self.l1d_2m), (TlbLevel::Stlb, &self.stlb)]
    }

    fn entries(&self) -> Vec<(TlbLevel, TlbEntry)> {
        self.levels().into_iter().flat_map(|(l, a)| a.entries().map(move |e| (l, e))).collect()
    }

    fn covering(&self, asid: u32, va: u64) -> Vec<(TlbLevel, TlbEntry)> {
        let vpn = va >> PAGE_SHIFT;
        self.levels().into_iter().flat_map(|(l, a)| a.covering(asid, vpn).into_iter().map(move |e| (l, e))).collect()
    }
}

// ---- the operations --------------------------------------------------------

/// The frame every translation of (asid, vpn) maps to: congruent with the
/// vpn modulo every entry size, as a real block mapping is.
fn pfn_of(asid: u32, vpn: u64) -> Pfn {
    (vpn + ((asid as u64) << 20)) as Pfn
}

fn entry(asid: u32, vpn: u64, size: u8, flags: u8, epoch: u32) -> TlbEntry {
    TlbEntry::new(asid, vpn << PAGE_SHIFT, pfn_of(asid, vpn), size, flags, epoch)
}

#[derive(Clone, Debug)]
enum Op {
    /// A user access: lookup, and on a miss the walk's fill of an entry of
    /// `size` (`fill_after_miss`, as the fault and access paths do).
    Access {
        asid: u32,
        vpn: u64,
        offset: u64,
        kind: Access,
        size: u8,
        flags: u8,
        epoch: u32,
    },
    /// A fill that may replace an entry of the same key (a dirty-bit re-walk).
    Fill {
        asid: u32,
        vpn: u64,
        kind: Access,
        size: u8,
        flags: u8,
        epoch: u32,
    },
    FlushPage {
        asid: u32,
        va: u64,
    },
    FlushRange {
        asid: u32,
        start: u64,
        len: u64,
    },
    FlushAsid {
        asid: u32,
    },
    FlushAll,
    /// Entries of one ASID answer for another (only when the other has
    /// none: two entries with one key is not a state the kernel model makes).
    Retag {
        from: u32,
        to: u32,
    },
}

const ASIDS: u32 = 3;

fn kind() -> impl Strategy<Value = Access> {
    prop_oneof![Just(Access::Load), Just(Access::Store), Just(Access::Ifetch)]
}

/// Mostly a few dozen pages, so that sets fill, evict and hit; sometimes a
/// wider range, so that 2 MiB entries are not all one.
fn vpn() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0u64..96, 1 => 0u64..4096]
}

/// 4 KiB, HPA 16 KiB, contpte 64 KiB, PMD 2 MiB; 4 KiB most often.
fn entry_size() -> impl Strategy<Value = u8> {
    prop_oneof![6 => Just(size::PTE), 1 => Just(size::HPA), 1 => Just(size::CONTPTE), 1 => Just(size::PMD)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..ASIDS, vpn(), 0u64..4096, kind(), entry_size(), any::<u8>(), any::<u32>())
            .prop_map(|(asid, vpn, offset, kind, size, flags, epoch)| Op::Access { asid, vpn, offset, kind, size, flags: flags & 15, epoch }),
        3 => (0..ASIDS, vpn(), kind(), entry_size(), any::<u8>(), any::<u32>())
            .prop_map(|(asid, vpn, kind, size, flags, epoch)| Op::Fill { asid, vpn, kind, size, flags: flags & 15, epoch }),
        1 => (0..ASIDS, vpn(), 0u64..4096).prop_map(|(asid, vpn, off)| Op::FlushPage { asid, va: (vpn << PAGE_SHIFT) + off }),
        // Short ranges take the per-tag probe path, long ones the full scan.
        1 => (0..ASIDS, vpn(), prop_oneof![0u64..(64 << PAGE_SHIFT), 0u64..(1 << 40)], 0u64..4096)
            .prop_map(|(asid, vpn, len, off)| Op::FlushRange { asid, start: (vpn << PAGE_SHIFT) + off, len }),
        1 => (0..ASIDS).prop_map(|asid| Op::FlushAsid { asid }),
        1 => Just(Op::FlushAll),
        1 => (0..ASIDS, 0..ASIDS + 1).prop_map(|(from, to)| Op::Retag { from, to }),
    ]
}

// ---- the geometries --------------------------------------------------------

/// (L1 dTLB, L1 iTLB, L1 dTLB 2M, STLB) as (entries, ways), shrunk from the
/// profiles' so that sets fill up within a short run, with their ways.
const GEOMETRIES: [[(u32, u32); 4]; 6] = [
    // generic-x86 / Haswell: 4-way L1d, 8-way L1i, 16-way STLB (the 4/16
    // constant-way path for loads and stores, the dispatch for ifetch).
    [(16, 4), (16, 8), (8, 4), (32, 16)],
    // the same L1s, 8-way STLB (Haswell's): no constant-way path at all.
    [(16, 4), (16, 8), (8, 4), (32, 8)],
    // Golden Cove: 6-way L1d (no constant-way scan), 4-way L1i with a
    // 16-way STLB (the 4/16 path for ifetch only).
    [(24, 6), (16, 4), (8, 4), (64, 16)],
    // Neoverse N1: fully associative 48-entry L1s, 5-way STLB.
    [(48, 48), (48, 48), (48, 48), (20, 5)],
    // Direct-mapped everywhere.
    [(8, 1), (4, 1), (2, 1), (16, 1)],
    // One real profile's sizes unshrunk (generic-x86).
    [(64, 4), (128, 8), (32, 4), (2048, 16)],
];

fn spec(g: &[(u32, u32); 4], stlb_holds_2m: bool) -> TlbSpec {
    let [(l1d_entries, l1d_ways), (l1i_entries, l1i_ways), (l1d_2m_entries, l1d_2m_ways), (stlb_entries, stlb_ways)] = *g;
    TlbSpec {
        l1d_entries,
        l1d_ways,
        l1i_entries,
        l1i_ways,
        l1d_2m_entries,
        l1d_2m_ways,
        stlb_entries,
        stlb_ways,
        stlb_holds_2m,
        stlb_hit_ns: 1.0,
        walk_ns: 10.0,
        walk_cached_ns: 2.0,
        contpte: false,
        coalesce_order: 0,
    }
}

/// Both models through `ops`; the first difference as an error.
fn compare(spec: &TlbSpec, ops: &[Op]) -> Result<(), String> {
    let mut tlb = Tlb::new(spec);
    let mut model = RefTlb::new(spec);
    let mut actual = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let at = |what: &str| format!("step {step} ({op:?}): {what}");
        match *op {
            Op::Access { asid, vpn, offset, kind, size, flags, epoch } => {
                let va = (vpn << PAGE_SHIFT) + offset;
                let (got, want) = (tlb.lookup(asid, va, kind), model.lookup(asid, va, kind));
                if got != want {
                    return Err(at(&format!("lookup gave {got:?}, the model {want:?}")));
                }
                if got == TlbLookup::Miss {
                    let e = entry(asid, vpn, size, flags, epoch);
                    tlb.fill_after_miss(kind, e);
                    model.fill(kind, e);
                }
            }
            Op::Fill { asid, vpn, kind, size, flags, epoch } => {
                let e = entry(asid, vpn, size, flags, epoch);
                tlb.fill(kind, e);
                model.fill(kind, e);
            }
            Op::FlushPage { asid, va } => {
                let (got, want) = (tlb.flush_page(asid, va), model.flush_range(asid, va, va + 1));
                if got != want {
                    return Err(at(&format!("flush_page dropped {got}, the model {want}")));
                }
            }
            Op::FlushRange { asid, start, len } => {
                let (got, want) = (tlb.flush_range(asid, start, start + len), model.flush_range(asid, start, start + len));
                if got != want {
                    return Err(at(&format!("flush_range dropped {got}, the model {want}")));
                }
            }
            Op::FlushAsid { asid } => {
                let (got, want) = (tlb.flush_asid(asid), model.flush(|e| e.asid == asid));
                if got != want {
                    return Err(at(&format!("flush_asid dropped {got}, the model {want}")));
                }
            }
            Op::FlushAll => {
                let (got, want) = (tlb.flush_all(), model.flush(|_| true));
                if got != want {
                    return Err(at(&format!("flush_all dropped {got}, the model {want}")));
                }
            }
            Op::Retag { from, to } => {
                if from != to && model.entries().iter().all(|(_, e)| e.asid != to) {
                    let (got, want) = (tlb.retag_asid(from, to), model.retag(from, to));
                    if got != want {
                        return Err(at(&format!("retag_asid moved {got}, the model {want}")));
                    }
                }
            }
        }
        if tlb.stats != model.stats {
            return Err(at(&format!("statistics {:?}, the model's {:?}", tlb.stats, model.stats)));
        }
        actual.clear();
        tlb.for_each_entry(|l, e| actual.push((l, *e)));
        let expected = model.entries();
        if actual != expected {
            return Err(at(&format!("entries (level, entry) in slot order\n  tlb:   {actual:?}\n  model: {expected:?}")));
        }
        if tlb.nr_entries() as usize != expected.len() {
            return Err(at(&format!("nr_entries {} for {} entries", tlb.nr_entries(), expected.len())));
        }
        // What covers a page near the one just used, without side effects.
        let probe = match *op {
            Op::Access { asid, vpn, .. } | Op::Fill { asid, vpn, .. } => Some((asid, (vpn ^ 1) << PAGE_SHIFT)),
            _ => None,
        };
        if let Some((asid, va)) = probe {
            let mut got = Vec::new();
            tlb.entries_covering(asid, va, |l, e| got.push((l, *e)));
            let want = model.covering(asid, va);
            if got != want || tlb.holds(asid, va) == want.is_empty() {
                return Err(at(&format!("entries covering {va:#x}: {got:?}, the model {want:?}")));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn tlb_matches_the_reference_model(
        g in 0..GEOMETRIES.len(),
        stlb_holds_2m in any::<bool>(),
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let s = spec(&GEOMETRIES[g], stlb_holds_2m);
        if let Err(e) = compare(&s, &ops) {
            return Err(TestCaseError::fail(format!("geometry {:?}, stlb_holds_2m {stlb_holds_2m}: {e}", GEOMETRIES[g])));
        }
    }
}

/// The random operations above reach every kind of outcome on every
/// geometry: hits in the L1 and the STLB, misses and evictions of valid
/// entries (so a comparison that passes is not one over TLBs that never
/// fill up).
#[test]
fn operations_reach_every_outcome() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let ops = prop::collection::vec(op(), 3000).new_tree(&mut runner).unwrap().current();
    for g in &GEOMETRIES {
        let s = spec(g, true);
        compare(&s, &ops).unwrap();
        let mut t = Tlb::new(&s);
        let mut evicted = 0;
        for op in &ops {
            if let Op::Access { asid, vpn, offset, kind, size, flags, epoch } = *op {
                if t.lookup(asid, (vpn << PAGE_SHIFT) + offset, kind) == TlbLookup::Miss {
                    let before = t.nr_entries();
                    let e = entry(asid, vpn, size, flags, epoch);
                    t.fill_after_miss(kind, e);
                    let stlb = e.size < size::PMD || s.stlb_holds_2m;
                    evicted += before + 1 + stlb as u32 - t.nr_entries();
                }
            }
        }
        let st = &t.stats;
        let sum = |a: [u64; 3]| a.iter().sum::<u64>();
        let l1_hits = sum(st.lookups) - sum(st.l1_misses);
        assert!(l1_hits > 100 && sum(st.stlb_hits) >= 10 && sum(st.walks) > 100, "{g:?}: {st:?}");
        // The unshrunk geometry holds the whole working set.
        assert!(evicted > 50 || g[3].0 == 2048, "{g:?}: {evicted} evictions");
    }
}
