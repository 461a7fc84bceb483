//! What a CPU's caches still hold, as far as the kernel's costs care: the
//! lines of pages it freed recently (a page reused soon after is cleared in
//! cache, several times faster than one coming from DRAM) and the PTE table
//! its last page walk read.
//!
//! The bookkeeping is two counters and a stamp per free frame, no scans:
//! every CPU counts the pages allocated on it (`alloc_clock`: each is
//! about to be written through its caches, by a clear, a copy or a fill);
//! a folio freed on a CPU carries (that CPU, its clock) in its frames
//! while free (`FreeStamp`, kept in the frames' LRU links, which a free
//! frame does not use). A folio allocated on the CPU that freed it, before
//! that CPU allocated more than `warm_cache_pages` since, is warm. The page
//! allocator hands out the most recently freed pages first (the per-CPU
//! lists are LIFO, frees go to the head of the buddy lists), so after a
//! large free the first `warm_cache_pages` of reuse are warm and the rest
//! cold, as on the machine.

/// (CPU + 1, that CPU's `alloc_clock` when it freed the frame); CPU 0
/// means no stamp (never freed, or freed by a path that does not stamp).
pub type FreeStamp = (u32, u32);

#[derive(Clone, Debug, Default)]
pub struct CpuCache {
    /// Pages allocated on this CPU so far (wrapping).
    pub alloc_clock: u32,
    /// Whether the last folio allocated on this CPU was warm.
    pub alloc_warm: bool,
    /// The PTE table (mm, va >> PMD_SHIFT) of this CPU's last page walk,
    /// u64::MAX for none.
    pub last_walk: u64,
}

impl CpuCache {
    pub fn new() -> CpuCache {
        CpuCache { alloc_clock: 0, alloc_warm: false, last_walk: u64::MAX }
    }

    /// The stamp a frame freed now on CPU `cpu` carries.
    #[inline(always)]
    pub fn free_stamp(&self, cpu: u32) -> FreeStamp {
        (cpu + 1, self.alloc_clock)
    }

    /// A folio of `pages` pages whose frames carry `stamp` is allocated on
    /// CPU `cpu`: advance the clock and say whether it is warm (freed here,
    /// and this CPU allocated at most `warm_pages` since, itself included).
    #[inline(always)]
    pub fn on_alloc(&mut self, cpu: u32, stamp: FreeStamp, pages: u32, warm_pages: u64) -> bool {
        self.alloc_clock = self.alloc_clock.wrapping_add(pages);
        let warm = stamp.0 == cpu + 1 && self.alloc_clock.wrapping_sub(stamp.1) as u64 <= warm_pages;
        self.alloc_warm = warm;
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
    fn a_walk_into_the_table_walked_last_is_cached() {
        let mut c = CpuCache::new();
        assert!(!c.walk(walk_key(1, 0x1000)));
        assert!(c.walk(walk_key(1, 0x1f_f000)), "same 2 MiB: same PTE table");
        assert!(!c.walk(walk_key(1, 0x20_0000)));
        assert!(!c.walk(walk_key(2, 0x20_0000)), "another mm's table");
    }
}
