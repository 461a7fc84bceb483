//! mmu notifiers (include/linux/mmu_notifier.h) and the secondary MMU that
//! subscribes to them: a second set of translations of part of an mm's
//! address space, kept by another agent (KVM's EPT for a VMM's guest RAM,
//! virt/kvm.rs). The mm's own code calls the notifier where Linux does
//! (zap, MADV_FREE, try_to_unmap/try_to_migrate, change_prot_numa,
//! mprotect, mremap, split_huge_pmd: `invalidate_range`; reclaim's aging:
//! `clear_young`); an mm without a subscriber pays one test of a field.
//!
//! The subscriber's state lives here, in the mm, as Linux's subscription
//! hangs off mm_struct: which pages of the subscribed range it maps (one
//! bit per 4 KiB page, and one per 2 MiB block mapped by a large entry),
//! their accessed bits, and whether its users owe a TLB flush for
//! translations it dropped. What a dropped translation costs the users
//! (kvm_flush_remote_tlbs: IPIs to the vCPUs, their VM exits) is theirs:
//! the subscriber says at registration what an invalidation that zapped
//! something costs the caller, and collects the flushes it owes.

use super::Pfn;
use crate::sim::Ns;

/// One bit per page (or per block).
#[derive(Clone, Debug, Default)]
pub struct Bitmap {
    pub(crate) w: Vec<u64>,
}

impl Bitmap {
    pub fn new(n: u64) -> Bitmap {
        Bitmap { w: vec![0; n.div_ceil(64) as usize] }
    }
    /// `n` bits, all set.
    pub fn filled(n: u64) -> Bitmap {
        let words = n.div_ceil(64) as usize;
        let mut b = Bitmap { w: vec![!0; words] };
        if !n.is_multiple_of(64) {
            b.w[words - 1] = (1u64 << (n % 64)) - 1;
        }
        b
    }
    #[inline]
    pub fn get(&self, i: u64) -> bool {
        self.w[(i >> 6) as usize] >> (i & 63) & 1 != 0
    }
    #[inline]
    pub fn set(&mut self, i: u64) {
        self.w[(i >> 6) as usize] |= 1 << (i & 63);
    }
    #[inline]
    pub fn clear(&mut self, i: u64) {
        self.w[(i >> 6) as usize] &= !(1 << (i & 63));
    }
    /// Clear bits [s, e); returns how many were set.
    pub fn clear_range(&mut self, s: u64, e: u64) -> u64 {
        let mut n = 0;
        let mut i = s;
        while i < e {
            let w = &mut self.w[(i >> 6) as usize];
            if i & 63 == 0 && e - i >= 64 {
                n += w.count_ones() as u64;
                *w = 0;
                i += 64;
            } else {
                n += *w >> (i & 63) & 1;
                *w &= !(1 << (i & 63));
                i += 1;
            }
        }
        n
    }
    /// Bits set in [s, e).
    pub fn count_range(&self, s: u64, e: u64) -> u64 {
        let mut n = 0;
        let mut i = s;
        while i < e {
            if i & 63 == 0 && e - i >= 64 {
                n += self.w[(i >> 6) as usize].count_ones() as u64;
                i += 64;
            } else {
                n += self.get(i) as u64;
                i += 1;
            }
        }
        n
    }
    pub fn count(&self) -> u64 {
        self.w.iter().map(|w| w.count_ones() as u64).sum()
    }
    /// Set bits, in order.
    pub fn iter_set(&self) -> impl Iterator<Item = u64> + '_ {
        self.w.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as u64;
                w &= w - 1;
                Some(((i as u64) << 6) | b)
            })
        })
    }
}

/// 4 KiB pages per 2 MiB block.
pub const BLOCK_PAGES: u64 = 512;

/// What a secondary MMU maps of an mm (one subscription, one range).
#[derive(Clone, Debug)]
pub struct SecondaryMmu {
    /// The subscribed range: [start, start + nr_pages * 4096), 2 MiB aligned.
    pub start: u64,
    pub nr_pages: u64,
    /// Pages it maps (an SPTE each, or through a large entry).
    pub present: Bitmap,
    /// Per 2 MiB block: mapped by one large entry.
    pub large: Bitmap,
    /// Accessed bits, set by the secondary MMU's walks.
    pub accessed: Bitmap,
    /// What an invalidation that dropped a translation costs its caller
    /// (the subscriber's callback: kvm_flush_remote_tlbs), ns.
    pub flush_cost: Ns,
    /// The earliest time of an invalidation whose flush the users still
    /// owe (None: none owed).
    pub flush_owed: Option<Ns>,
    /// Invalidations that dropped something (each one flush), and the
    /// pages they dropped.
    pub nr_flushes: u64,
    pub nr_zapped: u64,
    /// Accessed bits found set and cleared by clear_young.
    pub nr_young: u64,
    /// The frame each page's translation maps, kept when the checker runs
    /// (`track`), so that an audit sees a translation that outlived a
    /// migration of its page: the PTE then maps another frame.
    pub pfns: Option<Vec<Pfn>>,
}

impl SecondaryMmu {
    pub fn new(start: u64, nr_pages: u64, flush_cost: Ns) -> SecondaryMmu {
        let nr_pages = nr_pages.next_multiple_of(BLOCK_PAGES);
        SecondaryMmu {
            start,
            nr_pages,
            present: Bitmap::new(nr_pages),
            large: Bitmap::new(nr_pages / BLOCK_PAGES),
            accessed: Bitmap::new(nr_pages),
            flush_cost,
            flush_owed: None,
            nr_flushes: 0,
            nr_zapped: 0,
            nr_young: 0,
            pfns: None,
        }
    }

    /// Keep the frame of each translation (for the checker).
    pub fn track(mut self) -> SecondaryMmu {
        self.pfns = Some(vec![0; self.nr_pages as usize]);
        self
    }

    /// The secondary MMU maps page `i` to host frame `pfn`.
    #[inline]
    pub fn map(&mut self, i: u64, pfn: Pfn) {
        self.present.set(i);
        if let Some(p) = self.pfns.as_mut() {
            p[i as usize] = pfn;
        }
    }

    /// The subscribed pages of [s, e), as page indexes (empty if none).
    #[inline]
    fn pages(&self, s: u64, e: u64) -> (u64, u64) {
        let end = self.start + (self.nr_pages << 12);
        if e <= self.start || s >= end {
            return (0, 0);
        }
        ((s.max(self.start) - self.start) >> 12, (e.min(end) - self.start).div_ceil(4096))
    }

    /// invalidate_range_start at `t` for [s, e): the translations of the
    /// range go (a large entry drops whole); if any did, the users owe a
    /// flush. Returns the caller's cost.
    pub fn invalidate_range(&mut self, s: u64, e: u64, t: Ns) -> Ns {
        let (a, b) = self.pages(s, e);
        if a == b {
            return 0;
        }
        // A large entry overlapping the range drops whole.
        let (ba, bb) = (a / BLOCK_PAGES, b.div_ceil(BLOCK_PAGES));
        let (mut a, mut b) = (a, b);
        if self.large.count_range(ba, bb) > 0 {
            if self.large.get(ba) {
                a = ba * BLOCK_PAGES;
            }
            if self.large.get(bb - 1) {
                b = bb * BLOCK_PAGES;
            }
            self.large.clear_range(ba, bb);
        }
        let zapped = self.present.clear_range(a, b);
        if zapped == 0 {
            return 0;
        }
        self.accessed.clear_range(a, b);
        self.nr_flushes += 1;
        self.nr_zapped += zapped;
        self.flush_owed = Some(self.flush_owed.map_or(t, |o| o.min(t)));
        self.flush_cost
    }

    /// clear_young for the page at `va`: whether the secondary MMU used it
    /// since the last call (its accessed bit, cleared now; a large entry's
    /// bit is its first page's). No flush: x86 KVM elides it for aging.
    pub fn clear_young(&mut self, va: u64) -> bool {
        let (a, b) = self.pages(va, va + 4096);
        if a == b {
            return false;
        }
        let i = if self.large.get(a / BLOCK_PAGES) { a & !(BLOCK_PAGES - 1) } else { a };
        let young = self.accessed.get(i);
        if young {
            self.accessed.clear(i);
            self.nr_young += 1;
        }
        young
    }

    /// The users applied the flush they owed.
    pub fn take_flush(&mut self) -> Option<Ns> {
        self.flush_owed.take()
    }

    /// Page index of `va` in the range (the caller knows it is inside).
    #[inline]
    pub fn index(&self, va: u64) -> u64 {
        (va - self.start) >> 12
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidation_drops_what_is_mapped_and_owes_one_flush() {
        let mut s = SecondaryMmu::new(1 << 30, 2048, 700);
        assert_eq!(s.invalidate_range(1 << 30, (1 << 30) + 8192, 5), 0, "nothing mapped: no flush");
        s.present.set(1);
        s.accessed.set(1);
        assert!(s.clear_young((1 << 30) + 4096));
        assert!(!s.clear_young((1 << 30) + 4096), "cleared");
        assert_eq!(s.invalidate_range(0, 1 << 31, 9), 700);
        assert_eq!((s.nr_flushes, s.nr_zapped, s.take_flush()), (1, 1, Some(9)));
        // A large entry goes whole, even for one page of it.
        for i in 512..1024 {
            s.present.set(i);
        }
        s.large.set(1);
        s.invalidate_range((1 << 30) + (600 << 12), (1 << 30) + (601 << 12), 11);
        assert_eq!((s.present.count(), s.large.count(), s.nr_zapped), (0, 0, 513));
    }

    #[test]
    fn bitmap_ranges() {
        let mut b = Bitmap::new(300);
        for i in [0, 63, 64, 200, 299] {
            b.set(i);
        }
        assert_eq!(b.count_range(1, 200), 2);
        assert_eq!(b.iter_set().collect::<Vec<_>>(), vec![0, 63, 64, 200, 299]);
        assert_eq!(b.clear_range(0, 128), 3);
        assert_eq!(b.count(), 2);
    }
}
