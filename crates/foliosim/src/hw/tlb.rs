//! Per-CPU TLBs.
//!
//! One [`Tlb`] per simulated CPU. It holds four set-associative structures
//! with true LRU replacement inside a set, sized by the machine profile's
//! [`TlbSpec`]:
//!
//! | structure | holds | used by |
//! |---|---|---|
//! | L1 iTLB (`l1i_*`) | entries of every size | `Access::Ifetch` |
//! | L1 dTLB (`l1d_*`) | 4K and coalesced entries (size < 9) | `Access::Load` / `Access::Store` |
//! | L1 dTLB 2M (`l1d_2m_*`) | PMD entries (size 9) | `Access::Load` / `Access::Store` |
//! | STLB (`stlb_*`) | everything, 2M only if `stlb_holds_2m` | L1 misses of any kind |
//!
//! The L1s and the STLB are not inclusive of each other (as on Intel cores):
//! an STLB eviction leaves the L1 copy alone and vice versa, so a flush must
//! (and does) visit every structure. An L1 miss that hits the STLB refills the
//! L1 of the accessing kind.
//!
//! An entry covers `2^size` base pages: 0 = 4 KiB, 2 = HPA order-2 coalesced
//! 16 KiB, 4 = arm64 contpte 64 KiB, 9 = 2 MiB PMD. The caller (the page walk)
//! decides the coverage it fills. A structure that holds several sizes is
//! indexed, per size, by the virtual page number shifted by that size; a lookup
//! probes only the sizes currently present in the structure (a bitmask), so a
//! machine without contpte/HPA pays one probe per structure.
//!
//! Cost: a lookup that hits the L1 is a handful of compares on one set plus
//! an LRU stamp store; no allocation. Everything is deterministic (no hashing
//! with random state, LRU by a per-structure counter).
//!
//! Statistics: per access kind, lookups, L1 misses, STLB hits and walks. A
//! "walk" is an STLB miss, i.e. what perf reports as `dTLB-load-misses`,
//! `dTLB-store-misses` and `iTLB-load-misses` on Intel
//! (`*_MISSES.MISS_CAUSES_A_WALK`).

use super::profile::TlbSpec;
use crate::types::{Access, Pfn, PAGE_SHIFT};

/// Size codes (log2 of base pages covered) used by the kernel model.
pub mod size {
    pub const PTE: u8 = 0;
    /// HPA-style coalesced aligned group of 4 PTEs (16 KiB).
    pub const HPA: u8 = 2;
    /// arm64 contiguous-bit block of 16 PTEs (64 KiB).
    pub const CONTPTE: u8 = 4;
    /// PMD mapping (2 MiB).
    pub const PMD: u8 = 9;
    /// Largest size code the model accepts (1 GiB PUD would be 18).
    pub const MAX: u8 = 18;
}

/// Permission / state bits cached in an entry.
pub mod flags {
    pub const WRITE: u8 = 1 << 0;
    /// Dirty bit as seen at fill time. On x86 a store through an entry cached
    /// with DIRTY clear re-walks the page table to set it, so only
    /// entries with WRITE|DIRTY can write silently.
    pub const DIRTY: u8 = 1 << 1;
    pub const EXEC: u8 = 1 << 2;
    pub const USER: u8 = 1 << 3;
}

/// One cached translation. 24 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TlbEntry {
    /// Virtual page number of the first base page covered (aligned to `2^size`).
    pub vpn: u64,
    /// Address-space id: the simulator's mm id.
    pub asid: u32,
    /// PFN of the first base page covered (aligned like `vpn` for size > 0).
    pub pfn: Pfn,
    /// Opaque to the TLB: the checker's ground truth (the frame's allocation
    /// epoch when the entry was filled).
    pub epoch: u32,
    /// log2 of base pages covered (see [`size`]).
    pub size: u8,
    /// [`flags`] bits.
    pub flags: u8,
}

impl TlbEntry {
    /// Entry covering `2^size` pages around `va`, with `pfn` the frame that
    /// maps `va` itself. `vpn` and `pfn` are aligned down to the block.
    #[inline]
    pub fn new(asid: u32, va: u64, pfn: Pfn, size: u8, flags: u8, epoch: u32) -> TlbEntry {
        debug_assert!(size <= size::MAX);
        let vpn = va >> PAGE_SHIFT;
        let off = vpn & ((1u64 << size) - 1);
        debug_assert!((pfn as u64) & ((1u64 << size) - 1) == off, "pfn {pfn:#x} and va {va:#x} are not congruent for a size-{size} entry");
        TlbEntry { vpn: vpn - off, asid, pfn: pfn - off as Pfn, epoch, size, flags }
    }

    #[inline]
    pub fn nr_pages(&self) -> u64 {
        1u64 << self.size
    }
    #[inline]
    pub fn start_va(&self) -> u64 {
        self.vpn << PAGE_SHIFT
    }
    #[inline]
    pub fn end_va(&self) -> u64 {
        (self.vpn + self.nr_pages()) << PAGE_SHIFT
    }
    #[inline]
    pub fn covers(&self, asid: u32, va: u64) -> bool {
        self.asid == asid && (va >> PAGE_SHIFT).wrapping_sub(self.vpn) < self.nr_pages()
    }
    /// Frame that `va` (inside this entry) translates to.
    #[inline]
    pub fn pfn_of(&self, va: u64) -> Pfn {
        debug_assert!((va >> PAGE_SHIFT).wrapping_sub(self.vpn) < self.nr_pages());
        self.pfn + ((va >> PAGE_SHIFT) - self.vpn) as Pfn
    }
    #[inline]
    pub fn writable(&self) -> bool {
        self.flags & flags::WRITE != 0
    }
    #[inline]
    pub fn dirty(&self) -> bool {
        self.flags & flags::DIRTY != 0
    }
    #[inline]
    pub fn exec(&self) -> bool {
        self.flags & flags::EXEC != 0
    }
    #[inline]
    pub fn user(&self) -> bool {
        self.flags & flags::USER != 0
    }
}

/// Result of [`Tlb::lookup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlbLookup {
    L1Hit(TlbEntry),
    /// L1 missed, the STLB hit; the L1 has been refilled.
    StlbHit(TlbEntry),
    /// Both missed: the caller walks the page table and calls [`Tlb::fill`].
    Miss,
}

impl TlbLookup {
    #[inline]
    pub fn entry(&self) -> Option<TlbEntry> {
        match *self {
            TlbLookup::L1Hit(e) | TlbLookup::StlbHit(e) => Some(e),
            TlbLookup::Miss => None,
        }
    }
}

/// Which structure an entry sits in (for [`Tlb::for_each_entry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TlbLevel {
    L1I,
    L1D,
    L1D2M,
    Stlb,
}

/// Per-kind counters, indexed by `Access as usize` (Load, Store, Ifetch).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlbStats {
    pub lookups: [u64; 3],
    pub l1_misses: [u64; 3],
    pub stlb_hits: [u64; 3],
    /// STLB misses (page walks). perf's `{dTLB-load,dTLB-store,iTLB-load}-misses`.
    pub walks: [u64; 3],
    pub fills: u64,
    /// Entries dropped by flushes (all structures counted).
    pub flushed_entries: u64,
}

impl TlbStats {
    #[inline]
    pub fn walks_of(&self, kind: Access) -> u64 {
        self.walks[kind as usize]
    }
}

/// Filter hash of (asid, tag, size); never 0 (0 marks an empty slot).
#[inline(always)]
fn key_hash(asid: u32, tag: u64, size: u32) -> u32 {
    let x = tag ^ ((asid as u64) << 40) ^ ((asid as u64) >> 24) ^ ((size as u64) << 58);
    ((x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32) | 1
}

/// Bit i set iff `hs[i] == h`, for the first `W` (a multiple of 4) ways:
/// one SSE2 compare per 4 ways (SSE2 is part of x86-64), where the scalar
/// loop costs a compare, shift and or per way. The compares of 16 ways
/// are packed to bytes for one movemask: 8 instructions where a movemask,
/// shift and or per 4 ways took 14.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn match_mask<const W: usize>(hs: &[u32], h: u32) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_castsi128_ps, _mm_cmpeq_epi32, _mm_loadu_si128, _mm_movemask_epi8, _mm_movemask_ps, _mm_packs_epi16, _mm_packs_epi32,
        _mm_set1_epi32,
    };
    assert!(W.is_multiple_of(4) && W <= 32 && hs.len() >= W);
    let mut m = 0u32;
    // SAFETY: SSE2 is always available on x86_64; each unaligned load reads
    // 4 u32 inside `hs[..W]`, which the assert above guarantees.
    unsafe {
        let k = _mm_set1_epi32(h as i32);
        let eq = |c: usize| _mm_cmpeq_epi32(_mm_loadu_si128(hs.as_ptr().add(4 * c) as *const __m128i), k);
        let mut c = 0;
        while 4 * c + 16 <= W {
            // All-ones or zero lanes: the signed saturating packs keep
            // them so, in way order.
            let b = _mm_packs_epi16(_mm_packs_epi32(eq(c), eq(c + 1)), _mm_packs_epi32(eq(c + 2), eq(c + 3)));
            m |= (_mm_movemask_epi8(b) as u32) << (4 * c);
            c += 4;
        }
        while 4 * c < W {
            m |= (_mm_movemask_ps(_mm_castsi128_ps(eq(c))) as u32) << (4 * c);
            c += 1;
        }
    }
    m
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn match_mask<const W: usize>(hs: &[u32], h: u32) -> u32 {
    let mut m = 0u32;
    for (i, &x) in hs[..W].iter().enumerate() {
        m |= ((x == h) as u32) << i;
    }
    m
}

/// The hash of an entry's own key.
#[inline(always)]
fn entry_hash(e: &TlbEntry) -> u32 {
    key_hash(e.asid, e.vpn >> e.size, e.size as u32)
}

/// Everything of a slot but its filter hash: the probe scans the dense
/// hash array and touches a slot only on a filter match.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// LRU stamp: the slot's way in the bits under the structure's
    /// `way_mask`, and above them 0 for an empty slot, else the clock at
    /// the last fill or hit. Stamps of a set are then distinct, an empty
    /// way's below every valid one, so the set's least stamp is "first
    /// empty way, else least recently used" and names that way itself.
    stamp: u64,
    ent: TlbEntry,
}

/// One set-associative structure with LRU replacement: a filter-hash array
/// and a slot array, a set being `ways` consecutive indices of each.
#[derive(Clone, Debug)]
struct Assoc {
    ways: usize,
    set_mask: usize,
    /// 0 = empty slot.
    hash: Vec<u32>,
    slot: Vec<Slot>,
    /// Advances by `way_mask + 1`, keeping a stamp's way bits free.
    clock: u64,
    /// Low stamp bits that hold the way: `ways` rounded up to a power of
    /// two, minus one.
    way_mask: u64,
    /// Bit s set iff at least one valid entry has size s.
    size_mask: u32,
    size_count: [u32; size::MAX as usize + 1],
    nr_valid: u32,
}

/// The `size` of an empty slot's entry. No entry has it, so a fill tells
/// the usual eviction (of a valid entry of the same size, which leaves the
/// counts and the size mask as they are) from the others with one compare.
const NO_SIZE: u8 = u8::MAX;

const EMPTY: TlbEntry = TlbEntry { vpn: 0, asid: 0, pfn: 0, epoch: 0, size: NO_SIZE, flags: 0 };

impl Assoc {
    fn new(entries: u32, ways: u32) -> Assoc {
        assert!(ways > 0 && entries > 0 && entries.is_multiple_of(ways), "TLB {entries} entries / {ways} ways");
        let sets = (entries / ways) as usize;
        assert!(sets.is_power_of_two(), "TLB sets must be a power of two ({entries}/{ways})");
        let n = entries as usize;
        Assoc {
            ways: ways as usize,
            set_mask: sets - 1,
            hash: vec![0; n],
            slot: (0..n).map(|i| Slot { stamp: (i % ways as usize) as u64, ent: EMPTY }).collect(),
            clock: 0,
            way_mask: (ways as u64).next_power_of_two() - 1,
            size_mask: 0,
            size_count: [0; size::MAX as usize + 1],
            nr_valid: 0,
        }
    }

    /// First slot of the set `tag` maps to. `W` as in `find_h`.
    #[inline(always)]
    fn set_base<const W: usize>(&self, tag: u64) -> usize {
        debug_assert!(W == 0 || W == self.ways);
        (tag as usize & self.set_mask) * if W == 0 { self.ways } else { W }
    }

    /// `self.way_mask`, a constant when `W` (as in `find_h`) is known.
    #[inline(always)]
    fn way_mask<const W: usize>(&self) -> u64 {
        debug_assert!(W == 0 || W == self.ways);
        if W == 0 {
            self.way_mask
        } else {
            W.next_power_of_two() as u64 - 1
        }
    }

    /// Advance the clock: a way used now is stamped with the new value
    /// `|` its way.
    #[inline(always)]
    fn tick<const W: usize>(&mut self) -> u64 {
        self.clock += self.way_mask::<W>() + 1;
        self.clock
    }

    /// Slot `i` of the set `tag` maps to was just hit: make it the set's
    /// most recently used.
    #[inline(always)]
    fn touch<const W: usize>(&mut self, i: usize, tag: u64) {
        let stamp = self.tick::<W>() | (i - self.set_base::<W>(tag)) as u64;
        self.slot_at_mut(i).stamp = stamp;
    }

    // The lookups and fills below index a set without bounds checks: on
    // the TLB-hit path the checks (an overflow test and a length test per
    // slice, one per slot read) were about a tenth of the instructions
    // (callgrind). Soundness: `hash` and `slot` both have `(set_mask + 1)
    // * ways` elements from construction on (nothing resizes them), a
    // set's `base` always comes from `set_base`, so `base + ways` is at
    // most that length, and a way index is below `ways`. tests/tlb_model.rs
    // compares the whole TLB (these paths and `match_mask`) with a plain
    // reference model, with the debug assertions below switched on.

    /// The filter hashes of the set at `base` (`W` = `self.ways`).
    #[inline(always)]
    fn set_hashes<const W: usize>(&self, base: usize) -> &[u32] {
        debug_assert!(W == self.ways && base.is_multiple_of(W) && base + W <= self.hash.len());
        // SAFETY: see above.
        unsafe { self.hash.get_unchecked(base..base + W) }
    }

    /// Slot `i` = `base + way` of a set.
    #[inline(always)]
    fn slot_at(&self, i: usize) -> &Slot {
        debug_assert!(i < self.slot.len());
        // SAFETY: see above.
        unsafe { self.slot.get_unchecked(i) }
    }

    #[inline(always)]
    fn slot_at_mut(&mut self, i: usize) -> &mut Slot {
        debug_assert!(i < self.slot.len());
        // SAFETY: see above.
        unsafe { self.slot.get_unchecked_mut(i) }
    }

    /// The hashes and slots of the set at `base` (`ways` = `self.ways`),
    /// for a fill; the other fields stay free to borrow.
    #[inline(always)]
    fn set_mut<'a>(hash: &'a mut [u32], slot: &'a mut [Slot], base: usize, ways: usize) -> (&'a mut [u32], &'a mut [Slot]) {
        debug_assert!(base.is_multiple_of(ways) && base + ways <= hash.len() && hash.len() == slot.len());
        // SAFETY: see above.
        unsafe { (hash.get_unchecked_mut(base..base + ways), slot.get_unchecked_mut(base..base + ways)) }
    }

    /// Slot of the entry with exactly this key (`h` its hash), if present.
    /// `W` is `self.ways` when the caller knows it (see `Tlb::ways_4_16`),
    /// else 0: a dispatch on `self.ways` here.
    #[inline(always)]
    fn find_h<const W: usize>(&self, h: u32, asid: u32, tag: u64, s: u32) -> Option<usize> {
        let base = self.set_base::<W>(tag);
        if W != 0 {
            return self.find_in::<W>(base, h, asid, tag, s);
        }
        // The profiles' common associativities get a fixed-length scan the
        // compiler unrolls (and vectorises) instead of a counted loop.
        match self.ways {
            4 => self.find_in::<4>(base, h, asid, tag, s),
            8 => self.find_in::<8>(base, h, asid, tag, s),
            16 => self.find_in::<16>(base, h, asid, tag, s),
            _ => self.find_in::<0>(base, h, asid, tag, s),
        }
    }

    /// `find_h` in the set at `base`, `W` ways (0: `self.ways`).
    #[inline(always)]
    fn find_in<const W: usize>(&self, base: usize, h: u32, asid: u32, tag: u64, s: u32) -> Option<usize> {
        let ways = if W == 0 { self.ways } else { W };
        let verify = |i: usize| {
            let e = &self.slot_at(base + i).ent;
            e.asid == asid && e.size as u32 == s && e.vpn >> s == tag
        };
        if W == 0 {
            let hs = &self.hash[base..base + ways];
            for (i, &x) in hs.iter().enumerate() {
                if x == h && verify(i) {
                    return Some(base + i);
                }
            }
            return None;
        }
        // Filter matches as a bitmask, lowest way first (as the loop above).
        let mut m = match_mask::<W>(self.set_hashes::<W>(base), h);
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            if verify(i) {
                return Some(base + i);
            }
            m &= m - 1;
        }
        None
    }

    /// Way of the set `set` to fill, the first empty way, else the least
    /// recently used one: the way in the set's least stamp (see
    /// `Slot::stamp`), a compare and conditional move per way.
    #[inline(always)]
    fn victim<const W: usize>(set: &[Slot], way_mask: u64) -> usize {
        let n = if W == 0 { set.len() } else { W };
        (set[..n].iter().map(|sl| sl.stamp).min().unwrap() & way_mask) as usize
    }

    #[inline(always)]
    fn find(&self, asid: u32, tag: u64, s: u32) -> Option<usize> {
        self.find_h::<0>(key_hash(asid, tag, s), asid, tag, s)
    }

    /// Look `vpn` up in every size present; `h0` is the size-0 key hash,
    /// which the caller computes once for all structures it probes.
    /// Returns the hit slot's index (its stamp refreshed), so that an STLB
    /// hit can copy the entry straight from the slot into the L1.
    #[inline(always)]
    fn probe<const W: usize>(&mut self, asid: u32, vpn: u64, h0: u32) -> Option<usize> {
        let mut mask = self.size_mask;
        if mask & !1 == 0 {
            // Only 4 KiB entries (the usual case): no walk over the sizes.
            // An empty structure (mask 0) takes this path too: every hash
            // is 0 there and `h0` never is, so the probe just misses, one
            // test cheaper than telling 0 and 1 apart.
            let i = self.find_h::<W>(h0, asid, vpn, 0)?;
            self.touch::<W>(i, vpn);
            return Some(i);
        }
        while mask != 0 {
            let s = mask.trailing_zeros();
            mask &= mask - 1;
            let h = if s == 0 { h0 } else { key_hash(asid, vpn >> s, s) };
            if let Some(i) = self.find_h::<W>(h, asid, vpn >> s, s) {
                self.touch::<W>(i, vpn >> s);
                return Some(i);
            }
        }
        None
    }

    /// `probe`, returning the entry.
    #[inline(always)]
    fn probe_entry<const W: usize>(&mut self, asid: u32, vpn: u64, h0: u32) -> Option<TlbEntry> {
        let i = self.probe::<W>(asid, vpn, h0)?;
        Some(self.slot_at(i).ent)
    }

    #[inline]
    fn drop_slot(&mut self, i: usize) {
        debug_assert!(self.hash[i] != 0);
        self.hash[i] = 0;
        let sl = &mut self.slot[i];
        sl.stamp &= self.way_mask;
        let s = std::mem::replace(&mut sl.ent.size, NO_SIZE);
        self.uncount(s as u32);
    }

    /// A valid entry of size `s` went.
    #[inline(always)]
    fn uncount(&mut self, s: u32) {
        let s = s as usize;
        self.size_count[s] -= 1;
        if self.size_count[s] == 0 {
            self.size_mask &= !(1 << s);
        }
        self.nr_valid -= 1;
    }

    /// A valid entry of size `s` came.
    #[inline(always)]
    fn count(&mut self, s: u32) {
        self.size_count[s as usize] += 1;
        self.size_mask |= 1 << s;
        self.nr_valid += 1;
    }

    /// Insert `e` (`h` its `entry_hash`) over the entry with its key, else
    /// into the set's first empty or least recently used way. `absent`:
    /// the caller knows no entry has the key (a probe just missed it), so
    /// the search for one is skipped. `W` as in `find_h`. `e` by reference:
    /// an STLB hit refills the L1 from the STLB slot itself, a whole-entry
    /// copy instead of the entry's fields passing through registers and
    /// the stack.
    #[inline(always)]
    fn insert<const W: usize>(&mut self, e: &TlbEntry, h: u32, absent: bool) {
        debug_assert!(h == entry_hash(e));
        let s = e.size as u32;
        let tag = e.vpn >> s;
        let existing = if absent {
            debug_assert!(self.find(e.asid, tag, s).is_none());
            None
        } else {
            self.find_h::<W>(h, e.asid, tag, s)
        };
        let base = self.set_base::<W>(tag);
        // Work on the set's own slices.
        let ways = if W == 0 { self.ways } else { W };
        let way_mask = self.way_mask::<W>();
        let now = self.tick::<W>();
        let (hs, set) = Self::set_mut(&mut self.hash, &mut self.slot, base, ways);
        let w = match existing {
            Some(i) => i - base,
            None if W != 0 => Self::victim::<W>(set, way_mask),
            None => match ways {
                4 => Self::victim::<4>(set, way_mask),
                8 => Self::victim::<8>(set, way_mask),
                16 => Self::victim::<16>(set, way_mask),
                _ => Self::victim::<0>(set, way_mask),
            },
        };
        let sl = &mut set[w];
        let old_size = sl.ent.size;
        hs[w] = h;
        *sl = Slot { stamp: now | w as u64, ent: *e };
        if old_size as u32 != s {
            if old_size != NO_SIZE {
                self.uncount(old_size as u32);
            }
            self.count(s);
        }
    }

    /// Drop every entry of `asid` overlapping pages [first, last] (inclusive vpns).
    fn flush_vpns(&mut self, asid: u32, first: u64, last: u64) -> u32 {
        if self.nr_valid == 0 {
            return 0;
        }
        let mut dropped = 0;
        // Per-size probing costs sum(tags) * ways; a full scan costs all slots.
        let mut probe_cost: u64 = 0;
        let mut mask = self.size_mask;
        while mask != 0 {
            let s = mask.trailing_zeros();
            mask &= mask - 1;
            probe_cost = probe_cost.saturating_add(((last >> s) - (first >> s) + 1).saturating_mul(self.ways as u64));
        }
        if probe_cost < self.hash.len() as u64 {
            let mut mask = self.size_mask;
            while mask != 0 {
                let s = mask.trailing_zeros();
                mask &= mask - 1;
                for tag in (first >> s)..=(last >> s) {
                    if let Some(i) = self.find(asid, tag, s) {
                        self.drop_slot(i);
                        dropped += 1;
                    }
                }
            }
        } else {
            for i in 0..self.hash.len() {
                if self.hash[i] != 0 {
                    let e = &self.slot[i].ent;
                    if e.asid == asid && e.vpn <= last && e.vpn + (1u64 << e.size) > first {
                        self.drop_slot(i);
                        dropped += 1;
                    }
                }
            }
        }
        dropped
    }

    fn flush_asid(&mut self, asid: u32) -> u32 {
        if self.nr_valid == 0 {
            return 0;
        }
        let mut dropped = 0;
        for i in 0..self.hash.len() {
            if self.hash[i] != 0 && self.slot[i].ent.asid == asid {
                self.drop_slot(i);
                dropped += 1;
            }
        }
        dropped
    }

    /// Re-tag every entry of `from` as `to`, in place (same set: the set
    /// index does not depend on the ASID).
    fn retag(&mut self, from: u32, to: u32) -> u32 {
        let mut n = 0;
        for i in 0..self.hash.len() {
            if self.hash[i] != 0 && self.slot[i].ent.asid == from {
                self.slot[i].ent.asid = to;
                self.hash[i] = entry_hash(&self.slot[i].ent);
                n += 1;
            }
        }
        n
    }

    fn flush_all(&mut self) -> u32 {
        let n = self.nr_valid;
        if n != 0 {
            self.hash.fill(0);
            for sl in &mut self.slot {
                sl.stamp &= self.way_mask;
                sl.ent.size = NO_SIZE;
            }
            self.size_count = [0; size::MAX as usize + 1];
            self.size_mask = 0;
            self.nr_valid = 0;
        }
        n
    }

    fn for_each(&self, mut f: impl FnMut(&TlbEntry)) {
        if self.nr_valid == 0 {
            return;
        }
        for i in 0..self.hash.len() {
            if self.hash[i] != 0 {
                f(&self.slot[i].ent);
            }
        }
    }

    fn for_each_covering(&self, asid: u32, vpn: u64, mut f: impl FnMut(&TlbEntry)) {
        let mut mask = self.size_mask;
        while mask != 0 {
            let s = mask.trailing_zeros();
            mask &= mask - 1;
            if let Some(i) = self.find(asid, vpn >> s, s) {
                f(&self.slot[i].ent);
            }
        }
    }
}

/// The TLBs of one CPU.
#[derive(Clone, Debug)]
pub struct Tlb {
    l1i: Assoc,
    l1d: Assoc,
    l1d_2m: Assoc,
    stlb: Assoc,
    stlb_holds_2m: bool,
    /// Per access kind: its L1 is 4-way and the STLB 16-way (the usual
    /// x86 geometry). `lookup` and `fill_after_miss` then run a copy with
    /// the way counts as constants: one test per call instead of a
    /// dispatch on the way count in every probe and fill, and set bases by
    /// shifts.
    ways_4_16: [bool; 3],
    pub stats: TlbStats,
}

impl Tlb {
    /// Panics if the geometry is invalid; `Profile::validate` rejects such
    /// profiles first.
    pub fn new(spec: &TlbSpec) -> Tlb {
        Tlb {
            l1i: Assoc::new(spec.l1i_entries, spec.l1i_ways),
            l1d: Assoc::new(spec.l1d_entries, spec.l1d_ways),
            l1d_2m: Assoc::new(spec.l1d_2m_entries, spec.l1d_2m_ways),
            stlb: Assoc::new(spec.stlb_entries, spec.stlb_ways),
            stlb_holds_2m: spec.stlb_holds_2m,
            ways_4_16: [Access::Load, Access::Store, Access::Ifetch].map(|k| {
                let l1 = if k == Access::Ifetch { spec.l1i_ways } else { spec.l1d_ways };
                l1 == 4 && spec.stlb_ways == 16
            }),
            stats: TlbStats::default(),
        }
    }

    #[inline(always)]
    fn l1_probe<const L1W: usize>(&mut self, asid: u32, vpn: u64, h0: u32, kind: Access) -> Option<TlbEntry> {
        match kind {
            Access::Ifetch => self.l1i.probe_entry::<L1W>(asid, vpn, h0),
            Access::Load | Access::Store => match self.l1d.probe_entry::<L1W>(asid, vpn, h0) {
                Some(e) => Some(e),
                None => {
                    if self.l1d_2m.size_mask != 0 {
                        self.l1d_2m.probe_entry::<0>(asid, vpn, h0)
                    } else {
                        None
                    }
                }
            },
        }
    }

    /// Install `e` after a page walk for an access of `kind`: into that
    /// kind's L1 and into the STLB (a 2M entry only if the STLB holds 2M).
    /// An existing entry with the same (asid, vpn, size) is replaced, so
    /// re-filling after a dirty-bit re-walk updates the flags in place.
    /// `missed`: the walk followed a lookup of this address that missed,
    /// so the entry is in no structure and no search for an old copy is
    /// needed. Inlined, so that a caller that knows the entry's size gets
    /// a fill specialised to it.
    #[inline(always)]
    pub fn fill_walked(&mut self, kind: Access, e: TlbEntry, missed: bool) {
        if self.ways_4_16[kind as usize] {
            self.fill_w::<4, 16>(kind, e, missed)
        } else {
            self.fill_w::<0, 0>(kind, e, missed)
        }
    }

    /// `fill_walked` after a missed lookup.
    #[inline(always)]
    pub fn fill_after_miss(&mut self, kind: Access, e: TlbEntry) {
        self.fill_walked(kind, e, true)
    }

    /// `fill_walked` with no lookup before it.
    #[inline]
    pub fn fill(&mut self, kind: Access, e: TlbEntry) {
        self.fill_walked(kind, e, false)
    }

    /// `fill_walked` with the way counts as in `lookup_w`.
    #[inline(always)]
    fn fill_w<const L1W: usize, const SW: usize>(&mut self, kind: Access, e: TlbEntry, missed: bool) {
        debug_assert!(e.size <= size::MAX && e.vpn & (e.nr_pages() - 1) == 0, "unaligned TLB entry {e:?}");
        self.stats.fills += 1;
        let h = entry_hash(&e);
        Self::l1_fill::<L1W>(&mut self.l1i, &mut self.l1d, &mut self.l1d_2m, kind, &e, h, missed);
        if e.size < size::PMD || self.stlb_holds_2m {
            self.stlb.insert::<SW>(&e, h, missed);
        }
    }

    /// The L1 of `kind` (and of e's size) gets `e`; `absent` as in
    /// `Assoc::insert`. The L1s by field, so that `e` may borrow a slot of
    /// the STLB.
    #[inline(always)]
    fn l1_fill<const L1W: usize>(l1i: &mut Assoc, l1d: &mut Assoc, l1d_2m: &mut Assoc, kind: Access, e: &TlbEntry, h: u32, absent: bool) {
        match kind {
            Access::Ifetch => l1i.insert::<L1W>(e, h, absent),
            Access::Load | Access::Store => {
                if e.size >= size::PMD {
                    l1d_2m.insert::<0>(e, h, absent)
                } else {
                    l1d.insert::<L1W>(e, h, absent)
                }
            }
        }
    }

    /// Translate `va` of address space `asid` for an access of `kind`.
    /// Updates LRU state and statistics; an STLB hit refills the L1.
    /// Inlined into the access loops: a call would return the entry through
    /// memory.
    #[inline(always)]
    pub fn lookup(&mut self, asid: u32, va: u64, kind: Access) -> TlbLookup {
        if self.ways_4_16[kind as usize] {
            self.lookup_w::<4, 16>(asid, va, kind)
        } else {
            self.lookup_w::<0, 0>(asid, va, kind)
        }
    }

    /// `lookup` with the associativity of the kind's L1 (`L1W`) and of the
    /// STLB (`SW`) known, or 0 for a dispatch on it in every probe and fill.
    #[inline(always)]
    fn lookup_w<const L1W: usize, const SW: usize>(&mut self, asid: u32, va: u64, kind: Access) -> TlbLookup {
        let k = kind as usize;
        let vpn = va >> PAGE_SHIFT;
        // Every structure probes the 4 KiB key first: hash it once.
        let h0 = key_hash(asid, vpn, 0);
        self.stats.lookups[k] += 1;
        if let Some(e) = self.l1_probe::<L1W>(asid, vpn, h0, kind) {
            return TlbLookup::L1Hit(e);
        }
        self.stats.l1_misses[k] += 1;
        if let Some(i) = self.stlb.probe::<SW>(asid, vpn, h0) {
            self.stats.stlb_hits[k] += 1;
            // The L1 probe just missed every size at this vpn, so no L1
            // entry has e's key: skip the search for an old copy.
            let e = &self.stlb.slot_at(i).ent;
            let h = if e.size == 0 { h0 } else { entry_hash(e) };
            Self::l1_fill::<L1W>(&mut self.l1i, &mut self.l1d, &mut self.l1d_2m, kind, e, h, true);
            // Read back after the copy: the caller's uses load only the
            // fields they need.
            return TlbLookup::StlbHit(self.stlb.slot_at(i).ent);
        }
        self.stats.walks[k] += 1;
        TlbLookup::Miss
    }

    fn structures_mut(&mut self) -> [&mut Assoc; 4] {
        [&mut self.l1i, &mut self.l1d, &mut self.l1d_2m, &mut self.stlb]
    }

    /// INVLPG / TLBI VAE1: drop every entry of `asid` that covers `va`.
    /// Returns the number of entries dropped (over all structures).
    pub fn flush_page(&mut self, asid: u32, va: u64) -> u32 {
        let vpn = va >> PAGE_SHIFT;
        self.flush_vpn_range(asid, vpn, vpn)
    }

    /// Drop every entry of `asid` overlapping [start, end) (byte addresses;
    /// an entry partly inside is dropped whole). Returns entries dropped.
    pub fn flush_range(&mut self, asid: u32, start: u64, end: u64) -> u32 {
        if end <= start {
            return 0;
        }
        self.flush_vpn_range(asid, start >> PAGE_SHIFT, (end - 1) >> PAGE_SHIFT)
    }

    fn flush_vpn_range(&mut self, asid: u32, first: u64, last: u64) -> u32 {
        let n: u32 = self.structures_mut().into_iter().map(|a| a.flush_vpns(asid, first, last)).sum();
        self.stats.flushed_entries += n as u64;
        n
    }

    /// Drop every entry of `asid` (x86 full flush of one PCID; arm64 TLBI ASIDE1).
    pub fn flush_asid(&mut self, asid: u32) -> u32 {
        let n: u32 = self.structures_mut().into_iter().map(|a| a.flush_asid(asid)).sum();
        self.stats.flushed_entries += n as u64;
        n
    }

    /// The entries of `from` now answer lookups of `to`: two address
    /// spaces sharing one hardware ASID without a flush in between (only
    /// the mutant `asid_no_flush_on_reuse` does this). Returns entries moved.
    pub fn retag_asid(&mut self, from: u32, to: u32) -> u32 {
        self.structures_mut().into_iter().map(|a| a.retag(from, to)).sum()
    }

    /// Drop everything.
    pub fn flush_all(&mut self) -> u32 {
        let n: u32 = self.structures_mut().into_iter().map(|a| a.flush_all()).sum();
        self.stats.flushed_entries += n as u64;
        n
    }

    /// Every valid entry, structure by structure. The same translation may
    /// appear twice (L1 and STLB copies).
    pub fn for_each_entry(&self, mut f: impl FnMut(TlbLevel, &TlbEntry)) {
        self.l1i.for_each(|e| f(TlbLevel::L1I, e));
        self.l1d.for_each(|e| f(TlbLevel::L1D, e));
        self.l1d_2m.for_each(|e| f(TlbLevel::L1D2M, e));
        self.stlb.for_each(|e| f(TlbLevel::Stlb, e));
    }

    /// Every valid entry of `asid` that covers `va`, in any structure, without
    /// touching LRU state or statistics (for the checker).
    pub fn entries_covering(&self, asid: u32, va: u64, mut f: impl FnMut(TlbLevel, &TlbEntry)) {
        let vpn = va >> PAGE_SHIFT;
        self.l1i.for_each_covering(asid, vpn, |e| f(TlbLevel::L1I, e));
        self.l1d.for_each_covering(asid, vpn, |e| f(TlbLevel::L1D, e));
        self.l1d_2m.for_each_covering(asid, vpn, |e| f(TlbLevel::L1D2M, e));
        self.stlb.for_each_covering(asid, vpn, |e| f(TlbLevel::Stlb, e));
    }

    /// Whether any entry of `asid` covers `va` (no side effects).
    pub fn holds(&self, asid: u32, va: u64) -> bool {
        let mut any = false;
        self.entries_covering(asid, va, |_, _| any = true);
        any
    }

    /// Number of valid entries over all structures.
    pub fn nr_entries(&self) -> u32 {
        self.l1i.nr_valid + self.l1d.nr_valid + self.l1d_2m.nr_valid + self.stlb.nr_valid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Access::{Ifetch, Load, Store};

    const K4: u64 = 4096;

    /// Small geometry: L1 4 sets x 2 ways, iTLB 2x2, 2M 1x2, STLB 8 sets x 2 ways.
    fn small() -> TlbSpec {
        TlbSpec {
            l1d_entries: 8,
            l1d_ways: 2,
            l1i_entries: 4,
            l1i_ways: 2,
            l1d_2m_entries: 2,
            l1d_2m_ways: 2,
            stlb_entries: 16,
            stlb_ways: 2,
            stlb_holds_2m: true,
            stlb_hit_ns: 1.0,
            walk_ns: 10.0,
            walk_cached_ns: 2.0,
            contpte: false,
            coalesce_order: 0,
        }
    }

    fn e4k(asid: u32, va: u64, pfn: Pfn) -> TlbEntry {
        TlbEntry::new(asid, va, pfn, size::PTE, flags::USER | flags::WRITE, 7)
    }

    fn is_l1(r: TlbLookup) -> bool {
        matches!(r, TlbLookup::L1Hit(_))
    }

    #[test]
    fn miss_fill_hit() {
        let mut t = Tlb::new(&small());
        assert_eq!(t.lookup(1, 0x1234, Load), TlbLookup::Miss);
        t.fill(Load, e4k(1, 0x1234, 100));
        let r = t.lookup(1, 0x1fff, Load);
        let e = r.entry().unwrap();
        assert!(is_l1(r));
        assert_eq!((e.pfn, e.epoch, e.vpn), (100, 7, 1));
        assert_eq!(e.pfn_of(0x1fff), 100);
        assert_eq!(t.lookup(1, 0x2000, Load), TlbLookup::Miss);
        assert_eq!(t.stats.lookups[Load as usize], 3);
        assert_eq!(t.stats.walks[Load as usize], 2);
        assert_eq!(t.stats.l1_misses[Load as usize], 2);
    }

    #[test]
    fn lru_eviction_within_set() {
        let mut t = Tlb::new(&small());
        // L1D: 4 sets x 2 ways; vpns 0, 4, 8 share set 0.
        for (i, vpn) in [0u64, 4, 8].iter().enumerate() {
            if i == 2 {
                // touch vpn 0 so that vpn 4 is the LRU one
                assert!(is_l1(t.lookup(1, 0, Load)));
            }
            t.fill(Load, e4k(1, vpn * K4, 10 + i as Pfn));
        }
        assert!(is_l1(t.lookup(1, 0, Load)));
        assert!(is_l1(t.lookup(1, 8 * K4, Load)));
        // vpn 4 was evicted from L1 but is still in the STLB (set 4 there).
        assert!(matches!(t.lookup(1, 4 * K4, Load), TlbLookup::StlbHit(e) if e.pfn == 11));
        // ... and the STLB hit refilled the L1, evicting the LRU of set 0 (vpn 0).
        assert!(is_l1(t.lookup(1, 4 * K4, Load)));
        assert!(matches!(t.lookup(1, 0, Load), TlbLookup::StlbHit(_)));
        // Other sets are untouched.
        t.fill(Load, e4k(1, K4, 50));
        assert!(is_l1(t.lookup(1, K4, Load)));
    }

    #[test]
    fn stlb_lru_and_capacity() {
        let mut t = Tlb::new(&small());
        // STLB: 8 sets x 2 ways; vpns 0, 8, 16 share STLB set 0 (and L1D set 0).
        t.fill(Load, e4k(1, 0, 1));
        t.fill(Load, e4k(1, 8 * K4, 2));
        t.fill(Load, e4k(1, 16 * K4, 3));
        // vpn 0 is gone everywhere: L1 evicted it and so did the STLB.
        assert_eq!(t.lookup(1, 0, Load), TlbLookup::Miss);
        assert!(!t.holds(1, 0));
        assert!(t.holds(1, 8 * K4) && t.holds(1, 16 * K4));
    }

    #[test]
    fn refill_same_key_replaces() {
        let mut t = Tlb::new(&small());
        t.fill(Store, TlbEntry::new(1, 0x5000, 9, 0, flags::WRITE, 1));
        t.fill(Store, TlbEntry::new(1, 0x5000, 9, 0, flags::WRITE | flags::DIRTY, 1));
        assert_eq!(t.nr_entries(), 2); // one L1D + one STLB copy
        assert!(t.lookup(1, 0x5000, Store).entry().unwrap().dirty());
    }

    #[test]
    fn large_entries_cover_their_range() {
        let mut t = Tlb::new(&small());
        // 64 KiB contpte block at 0x10000 -> pfn 0x40..0x4f
        t.fill(Load, TlbEntry::new(1, 0x1_3000, 0x43, size::CONTPTE, flags::USER, 0));
        for p in 0..16u64 {
            let r = t.lookup(1, 0x1_0000 + p * K4 + 5, Load);
            assert!(is_l1(r), "page {p}");
            assert_eq!(r.entry().unwrap().pfn_of(0x1_0000 + p * K4), 0x40 + p as Pfn);
        }
        assert_eq!(t.lookup(1, 0x2_0000, Load), TlbLookup::Miss);
        assert_eq!(t.lookup(1, 0x0_f000, Load), TlbLookup::Miss);
        // HPA order-2 block
        t.fill(Load, TlbEntry::new(1, 0x40_0000, 0x200, size::HPA, 0, 0));
        assert!(is_l1(t.lookup(1, 0x40_3fff, Load)));
        assert_eq!(t.lookup(1, 0x40_4000, Load), TlbLookup::Miss);
        // 2 MiB PMD entry goes to the 2M L1 and the STLB
        t.fill(Load, TlbEntry::new(1, 0x4000_0000, 0x1000, size::PMD, 0, 0));
        let r = t.lookup(1, 0x401f_f000, Load);
        assert!(is_l1(r));
        assert_eq!(r.entry().unwrap().pfn_of(0x401f_f000), 0x11ff);
        assert_eq!(t.lookup(1, 0x4020_0000, Load), TlbLookup::Miss);
        let mut levels = vec![];
        t.entries_covering(1, 0x4010_0000, |l, _| levels.push(l));
        assert_eq!(levels, vec![TlbLevel::L1D2M, TlbLevel::Stlb]);
        // 4K entries and coexisting larger sizes in one structure
        t.fill(Load, e4k(1, 0x7000, 3));
        assert!(is_l1(t.lookup(1, 0x7000, Load)));
        assert!(is_l1(t.lookup(1, 0x1_8000, Load)));
    }

    #[test]
    fn stlb_without_2m() {
        let mut s = small();
        s.stlb_holds_2m = false;
        let mut t = Tlb::new(&s);
        t.fill(Load, TlbEntry::new(1, 0x4000_0000, 0x1000, size::PMD, 0, 0));
        assert_eq!(t.nr_entries(), 1);
        // Evict it from the 2-entry 2M L1; nothing catches it.
        t.fill(Load, TlbEntry::new(1, 0x8000_0000, 0x2000, size::PMD, 0, 0));
        t.fill(Load, TlbEntry::new(1, 0xc000_0000, 0x3000, size::PMD, 0, 0));
        assert_eq!(t.lookup(1, 0x4000_0000, Load), TlbLookup::Miss);
    }

    #[test]
    fn flush_range_drops_exactly_overlapping() {
        let mut t = Tlb::new(&small());
        // pages 0..8 of asid 1 as 4K (STLB holds all 8), one 64K block at 0x10000, asid 2 page 3
        for p in 0..8u64 {
            t.fill(Load, e4k(1, p * K4, p as Pfn));
        }
        t.fill(Load, TlbEntry::new(1, 0x1_0000, 0x40, size::CONTPTE, 0, 0));
        t.fill(Load, e4k(2, 3 * K4, 99));
        let mut before = 0;
        t.for_each_entry(|_, _| before += 1);
        // [0x2800, 0x5000) overlaps pages 2, 3, 4: each in the STLB, and some in L1D.
        let mut expect = 0;
        t.for_each_entry(|_, e| {
            if e.asid == 1 && e.start_va() < 0x5000 && e.end_va() > 0x2800 {
                expect += 1
            }
        });
        let n = t.flush_range(1, 0x2800, 0x5000);
        assert_eq!(n, expect);
        assert!(n >= 3);
        for p in 0..8u64 {
            assert_eq!(t.holds(1, p * K4), !(2..=4).contains(&p), "page {p}");
        }
        assert!(t.holds(2, 3 * K4));
        assert!(t.holds(1, 0x1_0000));
        // A range touching one page of the 64K block drops the block whole.
        assert_eq!(t.flush_range(1, 0x1_f000, 0x2_0000), 2);
        assert!(!t.holds(1, 0x1_0000));
        // Huge range -> full-scan path.
        let left = t.nr_entries();
        let n = t.flush_range(1, 0, 1 << 47);
        assert_eq!(t.nr_entries(), left - n);
        assert!(t.holds(2, 3 * K4));
        let mut after = 0;
        t.for_each_entry(|_, e| {
            assert_eq!(e.asid, 2);
            after += 1
        });
        assert_eq!(after, 2);
        assert!(before > after);
        assert_eq!(t.flush_range(1, 0x3000, 0x3000), 0);
    }

    #[test]
    fn flush_page_and_all() {
        let mut t = Tlb::new(&small());
        t.fill(Load, e4k(1, 0x3000, 3));
        t.fill(Ifetch, e4k(1, 0x3000, 3));
        t.fill(Load, TlbEntry::new(1, 0x0, 0x0, size::CONTPTE, 0, 0));
        // L1D 4K + iTLB 4K + STLB 4K + L1D 64K + STLB 64K
        assert_eq!(t.nr_entries(), 5);
        assert_eq!(t.flush_page(1, 0x3abc), 5);
        assert_eq!(t.nr_entries(), 0);
        t.fill(Load, e4k(1, 0x3000, 3));
        t.fill(Load, e4k(2, 0x3000, 3));
        assert_eq!(t.flush_all(), 4);
        assert_eq!(t.lookup(1, 0x3000, Load), TlbLookup::Miss);
        assert_eq!(t.stats.flushed_entries, 9);
    }

    #[test]
    fn asid_isolation() {
        let mut t = Tlb::new(&small());
        t.fill(Load, e4k(1, 0x7000, 70));
        t.fill(Load, e4k(2, 0x7000, 80));
        assert_eq!(t.lookup(1, 0x7000, Load).entry().unwrap().pfn, 70);
        assert_eq!(t.lookup(2, 0x7000, Load).entry().unwrap().pfn, 80);
        assert_eq!(t.lookup(3, 0x7000, Load), TlbLookup::Miss);
        assert_eq!(t.flush_page(3, 0x7000), 0);
        assert_eq!(t.flush_asid(1), 2);
        assert_eq!(t.lookup(1, 0x7000, Load), TlbLookup::Miss);
        assert_eq!(t.lookup(2, 0x7000, Load).entry().unwrap().pfn, 80);
        // Large asids (high bits) are distinct too.
        t.fill(Load, e4k(0x8000_0002, 0x7000, 90));
        assert_eq!(t.lookup(2, 0x7000, Load).entry().unwrap().pfn, 80);
        assert_eq!(t.lookup(0x8000_0002, 0x7000, Load).entry().unwrap().pfn, 90);
    }

    #[test]
    fn retag_moves_entries_to_the_new_asid() {
        let mut t = Tlb::new(&small());
        t.fill(Load, e4k(1, 0x7000, 70));
        t.fill(Ifetch, e4k(1, 0x9000, 90));
        t.fill(Load, e4k(2, 0x8000, 80));
        // L1D + STLB for 0x7000, iTLB + STLB for 0x9000.
        assert_eq!(t.retag_asid(1, 3), 4);
        assert!(!t.holds(1, 0x7000) && !t.holds(1, 0x9000));
        assert_eq!(t.lookup(3, 0x7000, Load).entry().unwrap().pfn, 70);
        assert_eq!(t.lookup(3, 0x9000, Ifetch).entry().unwrap().pfn, 90);
        assert_eq!(t.lookup(2, 0x8000, Load).entry().unwrap().pfn, 80);
        assert_eq!(t.flush_asid(3), 4);
    }

    #[test]
    fn itlb_dtlb_separation_and_stlb_refill() {
        let mut t = Tlb::new(&small());
        t.fill(Ifetch, TlbEntry::new(1, 0x40_0000, 5, 0, flags::EXEC | flags::USER, 0));
        assert!(is_l1(t.lookup(1, 0x40_0000, Ifetch)));
        // Data access to the same page misses L1D but hits the shared STLB, refilling L1D.
        assert!(matches!(t.lookup(1, 0x40_0000, Load), TlbLookup::StlbHit(e) if e.exec()));
        assert!(is_l1(t.lookup(1, 0x40_0000, Store)));
        // Flushing the STLB copy only (via LRU pressure) leaves both L1 copies.
        let s = &t.stats;
        assert_eq!(s.stlb_hits, [1, 0, 0]);
        assert_eq!(s.walks, [0, 0, 0]);
        assert_eq!(s.lookups, [1, 1, 1]);
        // A data fill does not make an ifetch hit in L1.
        t.fill(Load, e4k(1, 0x50_0000, 6));
        assert!(matches!(t.lookup(1, 0x50_0000, Ifetch), TlbLookup::StlbHit(_)));
        assert!(is_l1(t.lookup(1, 0x50_0000, Ifetch)));
        // 2M ifetch entries live in the iTLB.
        t.fill(Ifetch, TlbEntry::new(1, 0x80_0000, 0x200, size::PMD, flags::EXEC, 0));
        assert!(is_l1(t.lookup(1, 0x9f_f000, Ifetch)));
        let mut lv = vec![];
        t.entries_covering(1, 0x80_0000, |l, _| lv.push(l));
        assert_eq!(lv, vec![TlbLevel::L1I, TlbLevel::Stlb]);
    }

    #[test]
    fn deterministic_under_random_ops() {
        // Two TLBs fed the same pseudo-random stream stay identical; the
        // entry count never exceeds capacity; lookups agree with a naive model
        // of "what was filled and not flushed" for present entries.
        fn run(seed: u64) -> (TlbStats, Vec<TlbEntry>) {
            let mut t = Tlb::new(&small());
            let mut x = seed;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            for _ in 0..20_000 {
                let r = next();
                let asid = (r & 3) as u32;
                let vpn = (r >> 8) % 64;
                let kind = [Load, Store, Ifetch][((r >> 20) % 3) as usize];
                match (r >> 24) % 16 {
                    0 => {
                        t.flush_range(asid, vpn * K4, (vpn + (r >> 32) % 40) * K4);
                    }
                    1 => {
                        t.flush_page(asid, vpn * K4);
                        assert!(!t.holds(asid, vpn * K4));
                    }
                    2 if (r >> 40) % 8 == 0 => {
                        t.flush_asid(asid);
                    }
                    _ => {
                        if let Some(e) = t.lookup(asid, vpn * K4, kind).entry() {
                            assert!(e.covers(asid, vpn * K4));
                            assert_eq!(e.pfn_of(vpn * K4) as u64, vpn + 1024 * asid as u64);
                        } else {
                            let sz = [0u8, 0, 2, 4][((r >> 44) % 4) as usize];
                            let e = TlbEntry::new(asid, vpn * K4, (vpn + 1024 * asid as u64) as Pfn, sz, 0, 0);
                            t.fill(kind, e);
                        }
                    }
                }
                assert!(t.nr_entries() <= 4 + 8 + 2 + 16);
            }
            let mut v = vec![];
            t.for_each_entry(|_, e| v.push(*e));
            (t.stats.clone(), v)
        }
        assert_eq!(run(0x1234_5678), run(0x1234_5678));
        assert_ne!(run(0x1234_5678).0, run(0x9999).0);
    }

    #[test]
    fn constant_way_counts_match_the_dispatch() {
        // The 4-way L1 / 16-way STLB copy of `lookup` against the same
        // geometry through the runtime dispatch, on a stream of lookups and
        // fills of mixed sizes.
        let mut s = small();
        (s.l1d_entries, s.l1d_ways, s.l1i_entries, s.l1i_ways, s.stlb_entries, s.stlb_ways) = (16, 4, 8, 4, 64, 16);
        let mut fast = Tlb::new(&s);
        assert_eq!(fast.ways_4_16, [true; 3]);
        let mut slow = fast.clone();
        slow.ways_4_16 = [false; 3];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let asid = (x & 1) as u32;
            let vpn = (x >> 8) % 256;
            let kind = [Load, Store, Ifetch][((x >> 20) % 3) as usize];
            let r = fast.lookup(asid, vpn * K4, kind);
            assert_eq!(r, slow.lookup(asid, vpn * K4, kind));
            if r == TlbLookup::Miss {
                let sz = [0u8, 0, 0, 2, 4][((x >> 44) % 5) as usize];
                let e = TlbEntry::new(asid, vpn * K4, vpn as Pfn, sz, 0, 0);
                fast.fill_after_miss(kind, e);
                slow.fill_after_miss(kind, e);
            }
        }
        let (mut a, mut b) = (vec![], vec![]);
        fast.for_each_entry(|l, e| a.push((l, *e)));
        slow.for_each_entry(|l, e| b.push((l, *e)));
        assert_eq!(a, b);
        assert_eq!(fast.stats, slow.stats);
        assert!(fast.stats.stlb_hits.iter().sum::<u64>() > 1000);
    }

    #[test]
    fn victim_is_first_empty_way_else_lru() {
        // An `Assoc` against a reference model of its slots (None if
        // empty, else the step of the last fill or hit), on a stream of
        // hits, fills, replacements and drops of two sizes: every fill must
        // land in the first empty way of its set, else the least recently
        // used one. Runs the dispatched and the constant-way paths.
        fn run<const W: usize>(entries: u32, ways: u32, seed: u64) {
            let mut a = Assoc::new(entries, ways);
            let ways = ways as usize;
            let mut model: Vec<Option<u64>> = vec![None; entries as usize];
            let mut x = seed;
            for step in 0..30_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let vpn = (x >> 8) % (3 * entries as u64);
                let s = if (x >> 40).is_multiple_of(4) { size::HPA } else { size::PTE };
                let e = TlbEntry::new(1, (vpn << s) * K4, (vpn << s) as Pfn, s, 0, step as u32);
                let (tag, h) = (e.vpn >> s, entry_hash(&e));
                match (x >> 24) % 8 {
                    0..=2 => {
                        if let Some(i) = a.probe::<W>(1, vpn << s, key_hash(1, vpn << s, 0)) {
                            assert!(model[i].is_some());
                            model[i] = Some(step);
                        }
                    }
                    3 => {
                        if let Some(i) = a.find(1, tag, s as u32) {
                            a.drop_slot(i);
                            model[i] = None;
                        }
                    }
                    4 if (x >> 48).is_multiple_of(64) => {
                        a.flush_all();
                        model.fill(None);
                    }
                    _ => {
                        let base = (tag as usize & a.set_mask) * ways;
                        let old = a.find(1, tag, s as u32);
                        let set = &model[base..base + ways];
                        let want = match old {
                            Some(i) => i,
                            None => match set.iter().position(Option::is_none) {
                                Some(w) => base + w,
                                None => base + (0..ways).min_by_key(|&w| set[w]).unwrap(),
                            },
                        };
                        a.insert::<W>(&e, h, old.is_none());
                        assert_eq!(a.find(1, tag, s as u32), Some(want), "step {step}");
                        model[want] = Some(step);
                    }
                }
                assert_eq!(a.nr_valid as usize, model.iter().filter(|m| m.is_some()).count());
            }
        }
        for (entries, ways) in [(16, 4), (20, 5), (64, 16), (48, 48), (8, 1), (64, 8)] {
            run::<0>(entries, ways, 0x9e37_79b9_7f4a_7c15 ^ entries as u64);
        }
        run::<4>(16, 4, 0x1234_5678_9abc);
        run::<16>(64, 16, 0x0fed_cba9_8765);
    }

    /// Not an assertion: prints the host cost of an L1-hit lookup on the
    /// generic-x86 geometry and on the N1-like 48-way fully associative one.
    /// Run with `--nocapture` (benchmarks proper live in benches/).
    #[test]
    fn speed_sanity_print() {
        use std::time::Instant;
        for (name, entries, ways) in [("4-way 64", 64u32, 4u32), ("fully-assoc 48", 48, 48)] {
            let mut s = small();
            s.l1d_entries = entries;
            s.l1d_ways = ways;
            s.stlb_entries = 2048;
            s.stlb_ways = 16;
            let mut t = Tlb::new(&s);
            let pages = 32u64;
            for p in 0..pages {
                t.fill(Load, e4k(1, p * K4, p as Pfn));
            }
            let n = 2_000_000u64;
            let t0 = Instant::now();
            let mut acc = 0u64;
            for i in 0..n {
                let va = ((i * 7) % pages) * K4 + (i & 0xfff);
                if let TlbLookup::L1Hit(e) = t.lookup(1, std::hint::black_box(va), Load) {
                    acc += e.pfn as u64;
                }
            }
            let dt = t0.elapsed();
            eprintln!(
                "tlb speed ({name}): {:.1} ns per L1-hit lookup (acc {acc}, {} hits)",
                dt.as_nanos() as f64 / n as f64,
                n - t.stats.l1_misses[0]
            );
        }
    }
}
