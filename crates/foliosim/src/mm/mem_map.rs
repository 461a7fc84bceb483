//! Per-frame state (`struct page` / `struct folio`), compact and sparse.
//!
//! Frames are grouped in sections of 2^SECTION_SHIFT (like SPARSEMEM). A
//! section's array is materialised the first time a frame in it leaves the
//! buddy allocator; free memory is described by buddy blocks alone, so an
//! idle 1 TiB machine costs almost nothing. A materialised frame costs
//! `size_of::<Page>()` = 48 bytes.

use super::Pfn;
use crate::hw::cache::CacheStamp;

pub const SECTION_SHIFT: u32 = 15; // 128 MiB of 4 KiB frames

/// Page flags (a subset of include/linux/page-flags.h, same meanings).
pub mod pg {
    pub const LOCKED: u32 = 1 << 0;
    pub const REFERENCED: u32 = 1 << 1;
    pub const UPTODATE: u32 = 1 << 2;
    pub const DIRTY: u32 = 1 << 3;
    pub const LRU: u32 = 1 << 4;
    pub const ACTIVE: u32 = 1 << 5;
    pub const WORKINGSET: u32 = 1 << 6;
    /// First page of a folio (order 0 folios have HEAD too in foliosim).
    pub const HEAD: u32 = 1 << 7;
    /// Not the first page of a large folio.
    pub const TAIL: u32 = 1 << 8;
    pub const SWAPBACKED: u32 = 1 << 9;
    /// Folio is anonymous (mapping is an anon_vma).
    pub const ANON: u32 = 1 << 10;
    /// PageAnonExclusive, per page.
    pub const ANON_EXCLUSIVE: u32 = 1 << 11;
    /// Isolated from the LRU (by reclaim, migration, promotion).
    pub const ISOLATED: u32 = 1 << 12;
    /// Page-table page.
    pub const PGTABLE: u32 = 1 << 13;
    /// Page is allocated (not in buddy/pcp); checker bookkeeping.
    pub const ALLOCATED: u32 = 1 << 14;
    /// On the deferred split queue.
    pub const DEFERRED_SPLIT: u32 = 1 << 15;
    /// Unevictable.
    pub const UNEVICTABLE: u32 = 1 << 16;
    /// Shared-memory (tmpfs) page-cache folio.
    pub const SHMEM: u32 = 1 << 17;
    /// The kernel's shared zero page.
    pub const ZERO_PAGE: u32 = 1 << 18;
    /// PageHWPoison: the frame is out of use for good (memory failure).
    pub const HWPOISON: u32 = 1 << 19;
}

/// `struct page`: head-page fields are meaningful on the folio's first page.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Page {
    pub flags: u32,
    /// Folio reference count (head only).
    pub refcount: i32,
    /// PTEs mapping this page, all mms (not biased by -1 as in Linux).
    pub mapcount: i32,
    /// File: inode number; anon: anon_vma id. 0 = none.
    pub mapping: u32,
    /// File: page offset in the file; anon: linear page index (address >> PAGE_SHIFT at fault).
    pub index: u64,
    /// LRU links (head only): PFN + 1 of neighbours, 0 = none.
    pub lru_prev: u32,
    pub lru_next: u32,
    /// Folio order (same value on every page of the folio).
    pub order: u8,
    /// Node the frame belongs to.
    pub nid: u8,
    /// Mechanism scratch (LUF generation, promotion timestamps, ...).
    pub private: u16,
    /// Allocation epoch, bumped every time the frame leaves the allocator
    /// (checker ground truth for "no access to a reallocated frame").
    pub alloc_epoch: u32,
    /// When a CPU last brought the frame's lines into its caches (its clear
    /// or copy when allocated, a read() or write() copying it), kept while
    /// the frame is free: whether it is still cached when allocated again
    /// (hw/cache.rs). (0, 0): never.
    pub cached: CacheStamp,
}

impl Page {
    /// An order-0 folio on an LRU list with a mapping (page cache or anon):
    /// what isolation for migration, compaction and memory failure take.
    #[inline]
    pub fn is_small_lru_folio(&self) -> bool {
        self.flags & (pg::HEAD | pg::LRU) == pg::HEAD | pg::LRU && self.order == 0 && self.mapping != 0
    }
}

/// Frames per section.
const SECTION_PAGES: usize = 1 << SECTION_SHIFT;

pub struct MemMap {
    /// A fixed-size array per section (not a slice): a frame's index within
    /// its section is masked, so it needs no bounds check, and `Option` of a
    /// thin `Box` is one pointer, null when not materialised.
    sections: Vec<Option<Box<[Page; SECTION_PAGES]>>>,
    nr_frames: u64,
    materialised: usize,
}

impl MemMap {
    pub fn new(nr_frames: u64) -> Self {
        let nsec = ((nr_frames + (1 << SECTION_SHIFT) - 1) >> SECTION_SHIFT) as usize;
        MemMap { sections: (0..nsec).map(|_| None).collect(), nr_frames, materialised: 0 }
    }

    pub fn nr_frames(&self) -> u64 {
        self.nr_frames
    }

    /// Bytes of per-frame state currently held.
    pub fn footprint_bytes(&self) -> u64 {
        ((self.materialised as u64) << SECTION_SHIFT) * std::mem::size_of::<Page>() as u64
    }

    #[inline]
    pub fn is_present(&self, pfn: Pfn) -> bool {
        matches!(self.sections.get((pfn >> SECTION_SHIFT) as usize), Some(Some(_)))
    }

    /// Read a frame. Frames in sections never materialised read as default.
    #[inline]
    pub fn get(&self, pfn: Pfn) -> &Page {
        static EMPTY: Page = Page {
            flags: 0,
            refcount: 0,
            mapcount: 0,
            mapping: 0,
            index: 0,
            lru_prev: 0,
            lru_next: 0,
            order: 0,
            nid: 0,
            private: 0,
            alloc_epoch: 0,
            cached: (0, 0),
        };
        match &self.sections[(pfn >> SECTION_SHIFT) as usize] {
            Some(s) => &s[(pfn & ((1 << SECTION_SHIFT) - 1)) as usize],
            None => &EMPTY,
        }
    }

    /// Mutable frame access; materialises the section on first use (out of
    /// line: once per section). Always inlined: the fault path's frame
    /// updates (new folio, rmap, LRU add) are its hot callers. The first
    /// write returns from the cold path, so that the common case is one
    /// section lookup: a fall-through after the materialising call made
    /// the compiler look the section up again (and keep a panic path) at
    /// every inlined call, 94 instructions per fault in all.
    #[inline(always)]
    pub fn get_mut(&mut self, pfn: Pfn) -> &mut Page {
        let si = (pfn >> SECTION_SHIFT) as usize;
        if self.sections[si].is_none() {
            return self.materialise(pfn);
        }
        match &mut self.sections[si] {
            Some(s) => &mut s[(pfn & ((1 << SECTION_SHIFT) - 1)) as usize],
            None => unreachable!(),
        }
    }

    /// The first write to the section of `pfn`: its frames appear, blank.
    #[cold]
    #[inline(never)]
    fn materialise(&mut self, pfn: Pfn) -> &mut Page {
        let s: Box<[Page; SECTION_PAGES]> = vec![Page::default(); SECTION_PAGES].into_boxed_slice().try_into().expect("section size");
        let s = self.sections[(pfn >> SECTION_SHIFT) as usize].insert(s);
        self.materialised += 1;
        &mut s[(pfn & ((1 << SECTION_SHIFT) - 1)) as usize]
    }

    /// Head PFN of the folio containing `pfn`.
    #[inline]
    pub fn folio_head(&self, pfn: Pfn) -> Pfn {
        let o = self.get(pfn).order as u32;
        pfn & !((1u32 << o) - 1)
    }

    /// Iterate over materialised frames (checker, reports).
    pub fn for_each_present(&self, mut f: impl FnMut(Pfn, &Page)) {
        for (si, s) in self.sections.iter().enumerate() {
            if let Some(s) = s {
                for (i, p) in s.iter().enumerate() {
                    f(((si as u32) << SECTION_SHIFT) | i as u32, p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn page_is_compact_and_sections_are_lazy() {
        assert!(std::mem::size_of::<Page>() <= 48, "struct Page grew: {}", std::mem::size_of::<Page>());
        let mut m = MemMap::new(1 << 28); // 1 TiB
        assert_eq!(m.footprint_bytes(), 0);
        m.get_mut(12345).refcount = 1;
        assert_eq!(m.get(12345).refcount, 1);
        assert_eq!(m.get(1 << 27).refcount, 0);
        assert_eq!(m.footprint_bytes(), (1u64 << SECTION_SHIFT) * std::mem::size_of::<Page>() as u64);
    }
}
