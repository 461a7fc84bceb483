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
        self.unlink_stretch(mm, prev, next, 1, 1 << order);
    }

    /// Take out a stretch of `folios` consecutive entries (`pages` base
    /// pages) whose own links are read and cleared: `prev` is the link
    /// before its first entry, `next` the link after its last. The list
    /// ends as the entries' `unlink`s one by one would leave it.
    #[inline(always)]
    fn unlink_stretch(&mut self, mm: &mut MemMap, prev: u32, next: u32, folios: u64, pages: u64) {
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
        self.len -= folios;
        self.pages -= pages;
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

    /// Take out the stretch `run` of list `run.lru` (`LruRun`).
    #[inline(always)]
    pub fn unlink_run(&mut self, mm: &mut MemMap, run: &LruRun) {
        self.lists[run.lru].unlink_stretch(mm, run.prev, run.next, run.folios, run.pages);
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

/// Folios leaving one LRU list in a batch (a release's), taken out as one
/// stretch while each is a list neighbour of those before it: only the
/// stretch's outer neighbours are relinked, once, when it ends (an unmap
/// releases its folios in the order a run of faults listed them, so the
/// whole batch is usually one stretch). `prev` and `next` are the links
/// around the stretch, as the first and last entries' own links were read:
/// an entry taken out one by one would have had its neighbours relinked
/// to the same values, and nothing reads the lists in between.
#[derive(Clone, Copy, Debug, Default)]
pub struct LruRun {
    pub nid: usize,
    pub lru: usize,
    pub prev: u32,
    pub next: u32,
    /// Folios in the stretch (0: none).
    pub folios: u64,
    pub pages: u64,
}

impl LruRun {
    /// Extend the stretch by folio `pfn` (of `pages` base pages, its links
    /// `prev` and `next` read and cleared) if it is a neighbour of it;
    /// false if it is not (or the stretch is empty).
    #[inline(always)]
    pub fn extend(&mut self, pfn: Pfn, prev: u32, next: u32, pages: u64) -> bool {
        if self.folios == 0 {
            return false;
        }
        if self.prev == pfn + 1 {
            self.prev = prev;
        } else if self.next == pfn + 1 {
            self.next = next;
        } else {
            return false;
        }
        self.folios += 1;
        self.pages += pages;
        true
    }
}

/// folio_is_file_lru: whether a folio with these flags sits on the file
/// lists (page cache, and lazily freed anonymous folios: not swap-backed).
#[inline(always)]
pub fn folio_is_file_lru(flags: u32) -> bool {
    flags & pg::SWAPBACKED == 0
}

/// Which LRU list a folio belongs on, from its flags: an index of `Lru`
/// (and of `LruVec::lists`), without branches but PG_unevictable's.
#[inline(always)]
pub fn folio_lru_list(flags: u32) -> usize {
    if flags & pg::UNEVICTABLE != 0 {
        return Lru::Unevictable as usize;
    }
    // InactiveAnon, ActiveAnon, InactiveFile, ActiveFile: file is bit 1.
    ((folio_is_file_lru(flags) as usize) << 1) | (flags & pg::ACTIVE != 0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::rng::Rng;

    /// A list of `n` entries (PFNs 0..n) in a shuffled order, on a fresh map.
    fn list(n: u32, rng: &mut Rng) -> (MemMap, ListHead, Vec<Pfn>) {
        let mut order: Vec<Pfn> = (0..n).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut mm = MemMap::new(n as u64);
        let mut l = ListHead::default();
        for &p in &order {
            l.add_head(&mut mm, p);
        }
        (mm, l, order)
    }

    /// Taking entries out as stretches (`LruRun`, as a release batch does)
    /// leaves every link and count as taking them out one by one does: the
    /// batches are runs in list order, in reverse list order, and random
    /// picks, so stretches start, grow at either end and break.
    #[test]
    fn stretches_unlink_as_one_by_one() {
        let mut rng = Rng::stream(7, "lru-run");
        for case in 0..300 {
            let n = 1 + rng.below(40) as u32;
            let (mut a, mut la, order) = list(n, &mut rng);
            let (mut b, mut lb) = {
                let mut mm = MemMap::new(n as u64);
                let mut l = ListHead::default();
                for &p in &order {
                    l.add_head(&mut mm, p);
                }
                (mm, l)
            };
            // The batch: a stretch of the list, forwards or backwards, or random entries.
            let mut batch: Vec<Pfn> = match case % 3 {
                0 => order.clone(),
                1 => order.iter().rev().copied().collect(),
                _ => order.iter().copied().filter(|_| rng.below(2) == 0).collect(),
            };
            if case % 3 != 2 {
                let lo = rng.below(batch.len() as u64) as usize;
                let hi = lo + rng.below((batch.len() - lo) as u64 + 1) as usize;
                batch = batch[lo..hi].to_vec();
            }
            for &p in &batch {
                la.del(&mut a, p);
            }
            let mut run = LruRun::default();
            let mut lists = [lb];
            for &p in &batch {
                let pg = b.get_mut(p);
                let (prev, next) = (pg.lru_prev, pg.lru_next);
                (pg.lru_prev, pg.lru_next) = (0, 0);
                if !run.extend(p, prev, next, 1) {
                    if run.folios > 0 {
                        lists[run.lru].unlink_stretch(&mut b, run.prev, run.next, run.folios, run.pages);
                    }
                    run = LruRun { nid: 0, lru: 0, prev, next, folios: 1, pages: 1 };
                }
            }
            if run.folios > 0 {
                lists[run.lru].unlink_stretch(&mut b, run.prev, run.next, run.folios, run.pages);
            }
            lb = lists[0];
            assert_eq!((la.head, la.tail, la.len, la.pages), (lb.head, lb.tail, lb.len, lb.pages), "case {case}");
            for p in 0..n {
                let (x, y) = (a.get(p), b.get(p));
                assert_eq!((x.lru_prev, x.lru_next), (y.lru_prev, y.lru_next), "case {case}: links of {p}");
            }
        }
    }
}
