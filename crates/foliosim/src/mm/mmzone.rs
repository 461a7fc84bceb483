//! The per-node LRU lists (include/linux/mmzone.h: enum lru_list, struct
//! lruvec; include/linux/mm_inline.h: folio_lru_list). The lists own their
//! links and counts; mm/swap.rs and mm/vmscan.rs decide what moves.

use super::mem_map::{pg, MemMap};
use super::Pfn;
use crate::sim::lock::{LineCost, SpinLock};
use crate::sim::Ns;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Lru {
    InactiveAnon = 0,
    ActiveAnon = 1,
    InactiveFile = 2,
    ActiveFile = 3,
    Unevictable = 4,
}
pub const NR_LRU_LISTS: usize = 5;

/// Where a node's kswapd stands in a balance_pgdat run (mm/kswapd.rs),
/// which spans several of its steps so that user tasks interleave.
#[derive(Clone, Copy, Debug)]
pub struct KswapdRun {
    pub priority: u32,
    /// Pages left to scan at this priority.
    pub to_scan: u64,
    pub reclaimed: u64,
}

/// An intrusive list over mem_map, linked through Page::lru_prev/lru_next (PFN + 1).
#[derive(Clone, Copy, Debug, Default)]
pub struct ListHead {
    head: u32,
    tail: u32,
    /// Folios on the list.
    len: u64,
    /// Base pages on the list.
    pages: u64,
}

impl ListHead {
    /// Folios on the list.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Base pages on the list.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    pub fn add_head(&mut self, mm: &mut MemMap, pfn: Pfn) {
        // One frame lookup for the links and the order.
        let order = {
            let p = mm.get_mut(pfn);
            p.lru_prev = 0;
            p.lru_next = self.head;
            p.order
        };
        self.link_head(mm, pfn, order);
    }

    /// `add_head` once the entry's own links point at the old head.
    #[inline(always)]
    fn link_head(&mut self, mm: &mut MemMap, pfn: Pfn, order: u8) {
        let old = self.head;
        if old != 0 {
            mm.get_mut(old - 1).lru_prev = pfn + 1;
        } else {
            self.tail = pfn + 1;
        }
        self.head = pfn + 1;
        self.len += 1;
        self.pages += 1 << order;
    }

    pub fn add_tail(&mut self, mm: &mut MemMap, pfn: Pfn) {
        let old = self.tail;
        {
            let p = mm.get_mut(pfn);
            p.lru_next = 0;
            p.lru_prev = old;
        }
        if old != 0 {
            mm.get_mut(old - 1).lru_next = pfn + 1;
        } else {
            self.head = pfn + 1;
        }
        self.tail = pfn + 1;
        self.len += 1;
        self.pages += 1 << mm.get(pfn).order;
    }

    pub fn del(&mut self, mm: &mut MemMap, pfn: Pfn) {
        // Read and clear the entry's links in one frame lookup (a listed
        // entry is never its own neighbour).
        let (prev, next, order) = {
            let p = mm.get_mut(pfn);
            let r = (p.lru_prev, p.lru_next, p.order);
            p.lru_prev = 0;
            p.lru_next = 0;
            r
        };
        self.unlink(mm, prev, next, order);
    }

    /// `del` once the entry's links (`prev`, `next`) are read and cleared.
    #[inline(always)]
    fn unlink(&mut self, mm: &mut MemMap, prev: u32, next: u32, order: u8) {
        if prev != 0 {
            mm.get_mut(prev - 1).lru_next = next;
        } else {
            self.head = next;
        }
        if next != 0 {
            mm.get_mut(next - 1).lru_prev = prev;
        } else {
            self.tail = prev;
        }
        self.len -= 1;
        self.pages -= 1 << order;
    }

    /// Iterate heads from the tail (oldest first), as reclaim scans.
    pub fn iter_from_tail<'a>(&self, mm: &'a MemMap) -> impl Iterator<Item = Pfn> + 'a {
        let mut cur = self.tail;
        std::iter::from_fn(move || {
            if cur == 0 {
                return None;
            }
            let pfn = cur - 1;
            cur = mm.get(pfn).lru_prev;
            Some(pfn)
        })
    }
}

/// Per-node LRU lists with their lock (lruvec + lru_lock). The folios
/// are linked through their frames, so the list operations take the
/// mem_map; which folio goes where, and the counters, are the callers'
/// (mm/swap.rs, mm/vmscan.rs).
#[derive(Default)]
pub struct LruVec {
    lists: [ListHead; NR_LRU_LISTS],
    lru_lock: SpinLock,
}

impl LruVec {
    /// One of the lists (`Lru`), to read or to walk from its tail.
    #[inline]
    pub fn list(&self, lru: Lru) -> &ListHead {
        &self.lists[lru as usize]
    }

    /// The first entry of list `lru` (PFN + 1; 0: empty), for a caller
    /// that links a folio in the same frame lookup as it sets its flags.
    #[inline(always)]
    pub fn head(&self, lru: usize) -> u32 {
        self.lists[lru].head
    }

    /// lruvec_add_folio's list part: `pfn` of `order` goes at the head of
    /// list `lru`; its own links already point at the old `head(lru)`.
    #[inline(always)]
    pub fn link_head(&mut self, mm: &mut MemMap, lru: usize, pfn: Pfn, order: u8) {
        self.lists[lru].link_head(mm, pfn, order);
    }

    /// lruvec_del_folio's list part, once the folio's links (`prev`,
    /// `next`) are read and cleared.
    #[inline(always)]
    pub fn unlink(&mut self, mm: &mut MemMap, lru: usize, prev: u32, next: u32, order: u8) {
        self.lists[lru].unlink(mm, prev, next, order);
    }

    /// A section under lru_lock that lists or unlists `n` folios at
    /// `per_folio` each, from `t`; returns its end.
    #[inline(always)]
    pub fn lock_folios(&mut self, t: Ns, cpu: u32, n: usize, per_folio: Ns, lc: &LineCost) -> Ns {
        self.lru_lock.lock_for(t, cpu, per_folio * n as Ns, lc)
    }

    /// The lock, to read its statistics.
    pub fn lru_lock(&self) -> &SpinLock {
        &self.lru_lock
    }
}

/// Which LRU list a folio belongs on, from its flags: an index of `Lru`
/// (and of `LruVec::lists`), without branches but PG_unevictable's.
#[inline(always)]
pub fn folio_lru_list(flags: u32) -> usize {
    if flags & pg::UNEVICTABLE != 0 {
        return Lru::Unevictable as usize;
    }
    // InactiveAnon, ActiveAnon, InactiveFile, ActiveFile: file is bit 1.
    (((flags & pg::SWAPBACKED == 0) as usize) << 1) | (flags & pg::ACTIVE != 0) as usize
}
