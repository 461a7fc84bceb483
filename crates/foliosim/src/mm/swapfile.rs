//! One swap device (mm/swapfile.c): its slots and their use counts.
//!
//! `swap.size_mib` makes one device of that size at boot (a `swapon`); 0,
//! the default, leaves the machine without swap, as every run was before
//! swap was modelled. A slot's count is the number of swap PTEs that name
//! it (`swap_map`): reclaim gives each page of a folio it swaps out one
//! slot and sets it in every PTE that mapped the page (try_to_unmap), fork
//! duplicates it (swap_duplicate), a swap-in or a zap drops one (swap_free).
//!
//! There is no swap cache: the folio leaves as soon as its pages are
//! written (the write is waited for), and a swap-in reads a fresh page.
//! A page that fork left shared is read back once per mapping that faults
//! on it. Slots are handed out lowest-free-first from a stack of freed
//! ones and a high-water mark (the kernel's cluster allocator spreads
//! them differently; only their number matters here).

/// The device: one use count per slot, allocated as slots are first used.
#[derive(Default)]
pub struct SwapInfo {
    /// Slots on the device (0: no swap).
    pub nr_slots: u64,
    /// swap_map: references to each slot ever used, 0 when free.
    map: Vec<u16>,
    /// Freed slots, reused last-freed first.
    free: Vec<u32>,
    /// Slots in use.
    pub inuse: u64,
}

/// The most references one slot counts here (the kernel's swap_map byte
/// counts to SWAP_MAP_MAX = 0x3e and chains continuation pages beyond).
const SWAP_MAP_MAX: u16 = u16::MAX;

impl SwapInfo {
    pub fn new(nr_slots: u64) -> SwapInfo {
        SwapInfo { nr_slots, ..Default::default() }
    }

    /// Free slots left (get_nr_swap_pages).
    #[inline]
    pub fn nr_free(&self) -> u64 {
        self.nr_slots - self.inuse
    }

    /// folio_alloc_swap for one page: a free slot, with no references yet
    /// (the unmap adds one per PTE). None when the device is full.
    pub fn get_swap_page(&mut self) -> Option<u32> {
        if self.inuse >= self.nr_slots {
            return None;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.map.push(0);
                (self.map.len() - 1) as u32
            }
        };
        self.inuse += 1;
        Some(slot)
    }

    /// One more PTE names `slot` (the unmap, or swap_duplicate at fork).
    /// False when the slot cannot count more (the caller keeps the page).
    pub fn swap_duplicate(&mut self, slot: u32) -> bool {
        let c = &mut self.map[slot as usize];
        if *c == SWAP_MAP_MAX {
            return false;
        }
        *c += 1;
        true
    }

    /// A swap PTE naming `slot` is gone (swap_free). Returns whether the
    /// slot is now free.
    pub fn swap_free(&mut self, slot: u32) -> bool {
        let c = &mut self.map[slot as usize];
        debug_assert!(*c > 0, "swap_free of a free slot {slot}");
        *c -= 1;
        if *c == 0 {
            self.free.push(slot);
            self.inuse -= 1;
            return true;
        }
        false
    }

    /// A slot taken by get_swap_page that no PTE came to name (the unmap
    /// failed): back to the free stack.
    pub fn put_unused(&mut self, slot: u32) {
        if self.map[slot as usize] == 0 {
            self.free.push(slot);
            self.inuse -= 1;
        }
    }

    /// References to `slot` (__swap_count).
    #[inline]
    pub fn count(&self, slot: u32) -> u16 {
        self.map.get(slot as usize).copied().unwrap_or(0)
    }

    /// Every slot with its count, for the checker.
    pub fn counts(&self) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.map.iter().enumerate().map(|(i, &c)| (i as u32, c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_and_reused() {
        let mut s = SwapInfo::new(2);
        let a = s.get_swap_page().unwrap();
        let b = s.get_swap_page().unwrap();
        assert_eq!(s.get_swap_page(), None, "the device is full");
        assert!(s.swap_duplicate(a) && s.swap_duplicate(a) && s.swap_duplicate(b));
        assert!(!s.swap_free(a), "one PTE still names it");
        assert!(s.swap_free(a));
        assert_eq!(s.nr_free(), 1);
        assert_eq!(s.get_swap_page(), Some(a), "the freed slot first");
        s.put_unused(a);
        assert!(s.swap_free(b));
        assert_eq!((s.inuse, s.nr_free()), (0, 2));
    }
}
