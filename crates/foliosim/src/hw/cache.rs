//! What a CPU's caches still hold, as far as the kernel's costs care: the
//! lines of pages it freed recently (a page reused soon after is cleared in
//! cache, several times faster than one coming from DRAM), of the
//! page-cache pages it copied lately (read() of a file that fits the
//! cache copies from it, three times faster than from DRAM) and the PTE
//! table its last page walk read.
//!
//! The bookkeeping is a counter per CPU and a stamp per page, no scans:
//! every CPU counts the pages whose lines it brought into its caches
//! (`fill_clock`: each page allocated on it, about to be written through
//! them by a clear, a copy or a fill, and each page-cache page it copied
//! from DRAM); a folio freed on a CPU carries (that CPU, its clock) in its
//! frames while free (`FreeStamp`, kept in the frames' LRU links, which a
//! free frame does not use), and a page-cache page it copied the clock of
//! that copy in the CPU's `copied` table (a page-cache page's links are in
//! use). A page is warm on the CPU that stamped it until that CPU has
//! filled more than `warm_cache_pages` since. The page allocator hands out
//! the most recently freed pages first (the per-CPU lists are LIFO, frees
//! go to the head of the buddy lists), so after a large free the first
//! `warm_cache_pages` of reuse are warm and the rest cold, as on the
//! machine; a file read over and over stays warm while it fits.

use crate::types::Pfn;
use rustc_hash::FxHashMap;

/// (CPU + 1, that CPU's `fill_clock` when it freed the frame); CPU 0
/// means no stamp (never freed, or freed by a path that does not stamp).
pub type FreeStamp = (u32, u32);

#[derive(Clone, Debug, Default)]
pub struct CpuCache {
    /// Pages whose lines this CPU brought into its caches so far
    /// (allocated on it, or page-cache pages it copied cold; wrapping).
    pub fill_clock: u32,
    /// Whether the last folio allocated on this CPU was warm.
    pub alloc_warm: bool,
    /// The PTE table (mm, va >> PMD_SHIFT) of this CPU's last page walk,
    /// u64::MAX for none.
    pub last_walk: u64,
    /// Page-cache pages this CPU copied (read(), write()): their PFN and
    /// `fill_clock` after the copy. Entries older than the cache holds are
    /// dropped now and then, so it stays within twice the cache's pages.
    pub copied: FxHashMap<Pfn, u32>,
}

impl CpuCache {
    pub fn new() -> CpuCache {
        CpuCache { fill_clock: 0, alloc_warm: false, last_walk: u64::MAX, copied: FxHashMap::default() }
    }

    /// The stamp a frame freed now on CPU `cpu` carries.
    #[inline(always)]
    pub fn free_stamp(&self, cpu: u32) -> FreeStamp {
        (cpu + 1, self.fill_clock)
    }

    /// A folio of `pages` pages whose frames carry `stamp` is allocated on
    /// CPU `cpu`: advance the clock and say whether it is warm (freed here,
    /// and this CPU allocated at most `warm_pages` since, itself included).
    #[inline(always)]
    pub fn on_alloc(&mut self, cpu: u32, stamp: FreeStamp, pages: u32, warm_pages: u64) -> bool {
        self.fill_clock = self.fill_clock.wrapping_add(pages);
        let warm = stamp.0 == cpu + 1 && self.fill_clock.wrapping_sub(stamp.1) as u64 <= warm_pages;
        self.alloc_warm = warm;
        warm
    }

    /// This CPU copies page-cache page `pfn` (copy_page_to_iter,
    /// copy_page_from_iter): whether its lines are still in this CPU's
    /// caches (it copied the page within the last `warm_pages` pages
    /// filled); a cold page is brought in, which advances the clock.
    pub fn on_copy(&mut self, pfn: Pfn, warm_pages: u64) -> bool {
        let now = self.fill_clock;
        let warm = self.copied.get(&pfn).is_some_and(|&s| now.wrapping_sub(s) as u64 <= warm_pages);
        if !warm {
            self.fill_clock = now.wrapping_add(1);
            if self.copied.len() as u64 > 2 * warm_pages + 64 {
                let clock = self.fill_clock;
                self.copied.retain(|_, s| clock.wrapping_sub(*s) as u64 <= warm_pages);
            }
        }
        self.copied.insert(pfn, self.fill_clock);
        warm
    }

    /// A page walk into the PTE table `table` (mm and va >> PMD_SHIFT,
    /// packed): whether its lines are cached (the table this CPU walked
    /// last).
    #[inline(always)]
    pub fn walk(&mut self, table: u64) -> bool {
        let cached = self.last_walk == table;
        self.last_walk = table;
        cached
    }
}

/// The key `CpuCache::walk` takes for (mm, va).
#[inline(always)]
pub fn walk_key(mm: u32, va: u64) -> u64 {
    (mm as u64) << 40 | va >> crate::types::PMD_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_reused_by_the_cpu_that_freed_it_is_warm_within_the_cache() {
        let mut c = CpuCache::new();
        c.on_alloc(0, (0, 0), 10, 4);
        let stamp = c.free_stamp(0);
        // Itself included: 4 pages fit, the fifth does not.
        assert!(c.on_alloc(0, stamp, 1, 4));
        assert!(c.on_alloc(0, stamp, 3, 4));
        assert!(!c.on_alloc(0, stamp, 1, 4), "five pages since the free: out of a four-page cache");
        // Another CPU's page, and an unstamped one, are cold.
        let mut d = CpuCache::new();
        assert!(!d.on_alloc(1, stamp, 1, 1 << 20));
        assert!(!d.on_alloc(0, (0, 0), 1, 1 << 20));
        // A folio larger than the cache is cold even just after its free.
        let s = d.free_stamp(0);
        assert!(!d.on_alloc(0, s, 8, 4));
    }

    #[test]
    fn a_page_copied_again_is_warm_while_the_cache_holds_it() {
        let mut c = CpuCache::new();
        assert!(!c.on_copy(7, 4), "first copy: from DRAM");
        assert!(c.on_copy(7, 4), "again at once: in cache");
        // Three more pages brought in (copies of others) leave it in a
        // four-page cache; five more push it out.
        for p in 10..13 {
            assert!(!c.on_copy(p, 4));
        }
        assert!(c.on_copy(7, 4), "three pages since: still held");
        for p in 20..25 {
            assert!(!c.on_copy(p, 4));
        }
        assert!(!c.on_copy(7, 4), "five pages since: gone");
        // Allocations fill the same caches: they age a copied page too.
        assert!(c.on_copy(7, 4));
        c.on_alloc(0, (0, 0), 8, 4);
        assert!(!c.on_copy(7, 4), "eight pages allocated since its copy");
        // A file that fits is read over and over from cache; the table of
        // copied pages stays bounded whatever is read.
        let mut d = CpuCache::new();
        for pass in 0..3 {
            for p in 0..4 {
                assert_eq!(d.on_copy(p, 4), pass > 0, "pass {pass}, page {p}");
            }
        }
        for p in 100..10_000 {
            d.on_copy(p, 4);
        }
        assert!(d.copied.len() <= 2 * 4 + 64 + 1, "{} entries", d.copied.len());
    }

    #[test]
    fn a_walk_into_the_table_walked_last_is_cached() {
        let mut c = CpuCache::new();
        assert!(!c.walk(walk_key(1, 0x1000)));
        assert!(c.walk(walk_key(1, 0x1f_f000)), "same 2 MiB: same PTE table");
        assert!(!c.walk(walk_key(1, 0x20_0000)));
        assert!(!c.walk(walk_key(2, 0x20_0000)), "another mm's table");
    }
}
