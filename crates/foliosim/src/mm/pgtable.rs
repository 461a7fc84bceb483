//! Page tables of one mm: 4 levels (PGD/PUD/PMD/PTE) on x86-64 and arm64.
//!
//! PTE tables are the only level whose entries foliosim stores; they are
//! kept in a hash keyed by the PMD index (va >> 21) so a walk is one lookup.
//! Upper-level tables are counted (each is a real page from the allocator)
//! but hold no entries of their own. Each PTE table carries its split PTL.

use super::Pfn;
use crate::sim::lock::SpinLock;
use rustc_hash::FxHashMap;
use std::cell::Cell;

pub use crate::types::{PGDIR_SHIFT, PMD_SHIFT, PUD_SHIFT};

pub use crate::hw::mmu::Pte;

pub struct PteTable {
    pub ptes: [Pte; 512],
    /// Present PTEs in this table.
    pub nr_present: u16,
    /// The frame backing this table.
    pub pfn: Pfn,
    /// Split page-table lock.
    pub ptl: SpinLock,
}

/// The PTE tables of one mm by PMD index (va >> PMD_SHIFT), with the map
/// API the kernel code uses. A fault or a walk looks the same table up
/// several times in a row (pte_alloc, the fault, the install under the
/// PTL, the re-walk), so the last table found is remembered: a repeat is
/// one compare instead of a hash probe. Tables live in a slab; the map
/// gives a key's slab index.
///
/// Threads of one mm faulting in their own regions (page_fault1 with 64
/// threads) replace `last` at every step; before the hash probe, a lookup
/// that misses `last` tries a small table of slab indices by key hash
/// (`hints`), whose entry holds if `keys` has that key at that index. A
/// hint is never wrong, only stale (a remove moved or dropped its table),
/// so nothing resets it.
pub struct PteTables {
    index: FxHashMap<u64, u32>,
    slab: Vec<Box<PteTable>>,
    /// Key of each slab entry (to re-index the one `swap_remove` moves).
    keys: Vec<u64>,
    /// (key, slab index) of the last lookup that found a table; key
    /// `NO_KEY` when unset. Reset by every insert and remove.
    last: Cell<(u64, u32)>,
    /// Slab index of a table whose key hashes to each entry (`hint_of`).
    hints: [Cell<u32>; HINTS],
}

/// Entries of `PteTables::hints`: 64 tasks' tables, one per task, rarely
/// share one.
const HINTS: usize = 256;

/// The `hints` entry of key `k` (Fibonacci hashing: keys of neighbouring
/// regions spread over the table).
#[inline(always)]
fn hint_of(k: u64) -> usize {
    (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - HINTS.trailing_zeros())) as usize
}

/// Not a PMD index of any user address (va >> 21 < 2^43).
const NO_KEY: u64 = u64::MAX;

impl Default for PteTables {
    fn default() -> PteTables {
        PteTables {
            index: FxHashMap::default(),
            slab: Vec::new(),
            keys: Vec::new(),
            last: Cell::new((NO_KEY, 0)),
            hints: std::array::from_fn(|_| Cell::new(u32::MAX)),
        }
    }
}

// The map API hands out `&Box<PteTable>` as the FxHashMap it replaces did.
#[allow(clippy::borrowed_box)]
impl PteTables {
    #[inline(always)]
    fn slot(&self, k: u64) -> Option<usize> {
        let (lk, li) = self.last.get();
        if lk == k {
            return Some(li as usize);
        }
        self.slot_cold(k)
    }

    /// A lookup that missed `last`: the hint, else the hash probe. Out of
    /// line: a caller otherwise sets the probe up before knowing it needs
    /// it.
    #[inline(never)]
    #[cold]
    fn slot_cold(&self, k: u64) -> Option<usize> {
        let hint = &self.hints[hint_of(k)];
        let i = match hint.get() {
            h if self.keys.get(h as usize) == Some(&k) => h,
            _ => {
                let i = *self.index.get(&k)?;
                hint.set(i);
                i
            }
        };
        self.last.set((k, i));
        Some(i as usize)
    }

    #[inline]
    pub fn get(&self, k: &u64) -> Option<&Box<PteTable>> {
        self.slot(*k).map(|i| &self.slab[i])
    }

    #[inline]
    pub fn get_mut(&mut self, k: &u64) -> Option<&mut Box<PteTable>> {
        self.slot(*k).map(|i| &mut self.slab[i])
    }

    #[inline]
    pub fn contains_key(&self, k: &u64) -> bool {
        self.slot(*k).is_some()
    }

    /// Insert (or replace) the table at `k`; returns the old one.
    pub fn insert(&mut self, k: u64, t: Box<PteTable>) -> Option<Box<PteTable>> {
        self.last.set((NO_KEY, 0));
        match self.index.get(&k) {
            Some(&i) => Some(std::mem::replace(&mut self.slab[i as usize], t)),
            None => {
                self.index.insert(k, self.slab.len() as u32);
                self.slab.push(t);
                self.keys.push(k);
                None
            }
        }
    }

    pub fn remove(&mut self, k: &u64) -> Option<Box<PteTable>> {
        self.last.set((NO_KEY, 0));
        let i = self.index.remove(k)? as usize;
        let t = self.slab.swap_remove(i);
        self.keys.swap_remove(i);
        if i < self.slab.len() {
            *self.index.get_mut(&self.keys[i]).expect("moved table indexed") = i as u32;
        }
        Some(t)
    }

    /// Keys in the map's (arbitrary) order; callers sort where order matters.
    pub fn keys(&self) -> impl Iterator<Item = &u64> + '_ {
        self.index.keys()
    }

    /// (key, table) pairs in the map's (arbitrary) order.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &Box<PteTable>)> + '_ {
        self.index.iter().map(|(k, &i)| (k, &self.slab[i as usize]))
    }

    pub fn values(&self) -> impl Iterator<Item = &Box<PteTable>> + '_ {
        self.iter().map(|(_, t)| t)
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }
}

impl std::ops::Index<&u64> for PteTables {
    type Output = Box<PteTable>;
    fn index(&self, k: &u64) -> &Box<PteTable> {
        self.get(k).expect("no PTE table at key")
    }
}

#[derive(Default)]
pub struct PageTable {
    pub pte_tables: PteTables,
    /// PMD tables by va >> PUD_SHIFT, with the frame backing each and the number of PTE tables below.
    pub pmd_tables: FxHashMap<u64, (Pfn, u32)>,
    /// PUD tables by va >> PGDIR_SHIFT.
    pub pud_tables: FxHashMap<u64, (Pfn, u32)>,
    /// The PGD frame.
    pub pgd: Pfn,
}

#[inline]
pub fn pte_index(va: u64) -> usize {
    ((va >> 12) & 511) as usize
}

impl PageTable {
    #[inline]
    pub fn pte(&self, va: u64) -> Pte {
        match self.pte_tables.get(&(va >> PMD_SHIFT)) {
            Some(t) => t.ptes[pte_index(va)],
            None => Pte::NONE,
        }
    }

    /// The PTE slot of `va` (None without a PTE table): one walk serves
    /// the hardware walk's read and its accessed/dirty update.
    #[inline(always)]
    pub fn pte_slot_mut(&mut self, va: u64) -> Option<&mut Pte> {
        self.pte_tables.get_mut(&(va >> PMD_SHIFT)).map(|t| &mut t.ptes[pte_index(va)])
    }

    #[inline]
    pub fn table(&self, va: u64) -> Option<&PteTable> {
        self.pte_tables.get(&(va >> PMD_SHIFT)).map(|b| &**b)
    }

    #[inline]
    pub fn table_mut(&mut self, va: u64) -> Option<&mut PteTable> {
        self.pte_tables.get_mut(&(va >> PMD_SHIFT)).map(|b| &mut **b)
    }

    /// Number of page-table pages held (all levels, PGD included).
    pub fn nr_pages(&self) -> u64 {
        1 + self.pud_tables.len() as u64 + self.pmd_tables.len() as u64 + self.pte_tables.len() as u64
    }

    /// The entries a top-down walk of [start, end) finds empty and steps
    /// over, as unmap_page_range and free_pgd_range do: a PGD entry with no
    /// PUD table (512 GiB at once), a PUD entry with no PMD table (1 GiB),
    /// a PMD entry with no PTE table (2 MiB).
    pub fn none_entries(&self, start: u64, end: u64) -> u64 {
        let mut n = 0;
        let mut va = start;
        while va < end {
            let (shift, none) = if !self.pud_tables.contains_key(&(va >> PGDIR_SHIFT)) {
                (PGDIR_SHIFT, true)
            } else if !self.pmd_tables.contains_key(&(va >> PUD_SHIFT)) {
                (PUD_SHIFT, true)
            } else {
                (PMD_SHIFT, !self.pte_tables.contains_key(&(va >> PMD_SHIFT)))
            };
            n += none as u64;
            va = ((va >> shift) + 1) << shift;
        }
        n
    }

    /// Levels missing for `va`: (need_pud, need_pmd, need_pte).
    #[inline]
    pub fn missing(&self, va: u64) -> (bool, bool, bool) {
        if self.pte_tables.contains_key(&(va >> PMD_SHIFT)) {
            return (false, false, false);
        }
        (
            !self.pud_tables.contains_key(&(va >> PGDIR_SHIFT)),
            !self.pmd_tables.contains_key(&(va >> PUD_SHIFT)),
            !self.pte_tables.contains_key(&(va >> PMD_SHIFT)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pfn: Pfn) -> Box<PteTable> {
        Box::new(PteTable { ptes: [Pte::NONE; 512], nr_present: 0, pfn, ptl: Default::default() })
    }

    /// The unmap walks step over one empty entry per level they find
    /// none at: a whole 512 GiB without a PUD table, a whole 1 GiB
    /// without a PMD table, a 2 MiB without a PTE table.
    #[test]
    fn none_entries_counts_one_entry_per_empty_slot_at_the_level_it_is_empty() {
        const GIB: u64 = 1 << 30;
        let mut pt = PageTable::default();
        let base = 0x7f00_0000_0000u64; // 512 GiB aligned: PGD slot 254
        assert_eq!(pt.none_entries(base, base + 4 * GIB), 1, "no PUD table: one PGD entry");
        pt.pud_tables.insert(base >> PGDIR_SHIFT, (1, 1));
        assert_eq!(pt.none_entries(base, base + 4 * GIB), 4, "four PUD entries, no PMD table under any");
        pt.pmd_tables.insert(base >> PUD_SHIFT, (2, 1));
        pt.pte_tables.insert(base >> PMD_SHIFT, table(3));
        // 1 GiB of PMD entries (512, one of them with its PTE table) and
        // three empty PUD entries.
        assert_eq!(pt.none_entries(base, base + 4 * GIB), 511 + 3);
        // A range inside one 2 MiB: one entry, empty or not.
        assert_eq!(pt.none_entries(base + 4096, base + 8192), 0);
        assert_eq!(pt.none_entries(base + (2 << 20), base + (2 << 20) + 4096), 1);
        assert_eq!(pt.none_entries(base, base), 0, "an empty range walks nothing");
    }

    #[test]
    fn lookups_find_their_own_table_after_removes_move_others() {
        // Keys that share hint entries, looked up in turns (as 64 threads'
        // walks are), with removes in between that move slab entries (the
        // hints then name a moved or a gone table): every lookup must find
        // the table inserted at its key, and nothing at a removed key.
        let mut t = PteTables::default();
        let keys: Vec<u64> = (0..600u64).map(|i| 0x7f00_0000 + i * 37).collect();
        for &k in &keys {
            t.insert(k, table(k as Pfn));
        }
        let mut gone = std::collections::HashSet::new();
        for round in 0..6u64 {
            for (n, &k) in keys.iter().enumerate() {
                if (n as u64 + round).is_multiple_of(7) && gone.insert(k) {
                    assert_eq!(t.remove(&k).map(|b| b.pfn), Some(k as Pfn));
                }
                for &j in [k, keys[(n * 13 + round as usize) % keys.len()]].iter() {
                    match t.get(&j) {
                        Some(b) => assert!(!gone.contains(&j) && b.pfn == j as Pfn, "key {j:#x} found table {}", b.pfn),
                        None => assert!(gone.contains(&j), "key {j:#x} lost"),
                    }
                }
            }
        }
        assert_eq!(t.len(), keys.len() - gone.len());
    }
}
