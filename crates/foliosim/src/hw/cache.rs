//! What the CPUs' caches still hold, as far as the kernel's costs care:
//! the lines of pages freed recently (a page reused soon after is cleared
//! in cache, several times faster than one coming from DRAM), of the
//! page-cache pages copied lately (read() of a file that fits the cache
//! copies from it, three times faster than from DRAM) and the PTE table a
//! CPU's last page walk read.
//!
//! The caches of a socket's CPUs are shared: its last-level cache
//! (cpu.llc_kib) holds what any of them wrote, and each core's L2
//! (cpu.l2_kib) what that core wrote. The bookkeeping is a counter per
//! socket and a stamp per frame, no scans: every socket counts the pages
//! its CPUs allocate (`Llc::clocks`: each is about to be written through
//! the caches, by a clear, a copy or a fill); a frame carries (the CPU,
//! its socket's clock) of the last time a CPU brought its lines in
//! (`CacheStamp`, `Page::cached`: its clear or copy when allocated, a
//! read() or write() copying it), and keeps it while free. A freed folio
//! allocated again on that socket is warm while what the socket's CPUs
//! allocated since that last touch fits in its last-level cache (plus the
//! L2, on the CPU that touched it): one CPU alone keeps the whole LLC,
//! many CPUs allocating at once each keep their share of it. The time of
//! the free does not count: a page written long before its munmap left
//! the caches long before, whenever it is freed. The page allocator hands
//! out the most recently freed pages first (the per-CPU lists are LIFO,
//! frees go to the head of the buddy lists); a region freed in the order
//! it was written is reused last-written first, and the k-th page reused
//! has 2k pages brought in since its write (the k written after it, the k
//! reused before it): of a region larger than the caches, the first half
//! of the caches' worth of reuse is warm and the rest cold, as on the
//! machine.
//!
//! Whether a copy of a page-cache page (read(), write()) finds it cached
//! is a question for each socket, whose caches may each hold it: a socket
//! keeps the pages its CPUs copied in a table: (CPU + 1, the socket's
//! clock after the copy), pruned to about twice what the caches hold; the
//! frame's own stamp takes the copy too, for its reuse once freed. A copy from DRAM brings the page's lines in and advances the
//! clock like an allocation; a page copied again while what the socket
//! brought in since fits (as for a reused folio) copies from the caches,
//! so a file read over and over stays warm while it fits.

use crate::types::Pfn;
use rustc_hash::FxHashMap;

/// (CPU + 1, its socket's `Llc` clock) when that CPU last brought a
/// frame's lines into its caches; CPU 0 means never.
pub type CacheStamp = (u32, u32);

/// What one CPU's caches hold of its last allocation and its last walk.
#[derive(Clone, Debug)]
pub struct CpuCache {
    /// Whether the last folio allocated on this CPU was warm.
    pub alloc_warm: bool,
    /// The PTE table (mm, va >> PMD_SHIFT) of this CPU's last page walk,
    /// u64::MAX for none.
    pub last_walk: u64,
    /// A system call ran here since the last page fault: the fault path's
    /// code and branch state are no longer warm (`fault_after_syscall_ns`).
    pub syscall_since_fault: bool,
    /// A folio was freed here since the last page fault
    /// (`fault_after_free_ns`) and since the last folio allocation
    /// (`alloc_after_free_ns`).
    pub freed_since_fault: bool,
    pub freed_since_alloc: bool,
}

impl Default for CpuCache {
    fn default() -> Self {
        CpuCache::new()
    }
}

impl CpuCache {
    pub fn new() -> CpuCache {
        CpuCache { alloc_warm: false, last_walk: u64::MAX, syscall_since_fault: false, freed_since_fault: false, freed_since_alloc: false }
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

/// The sockets' last-level caches: what their CPUs allocated.
#[derive(Clone, Debug)]
pub struct Llc {
    /// Pages whose lines each socket's CPUs brought into its caches so far
    /// (allocated there, or page-cache pages copied from DRAM; wrapping).
    clocks: Vec<u32>,
    /// Per socket, the page-cache pages its CPUs copied: PFN -> (CPU + 1,
    /// the socket's clock after the copy).
    copied: Vec<FxHashMap<Pfn, CacheStamp>>,
    cpus_per_socket: u32,
    /// A core's L2 and a socket's last-level cache, in pages.
    l2_pages: u32,
    llc_pages: u32,
}

impl Llc {
    pub fn new(sockets: u32, cpus_per_socket: u32, l2_kib: u64, llc_kib: u64) -> Llc {
        let pages = |kib: u64| (kib / 4).min(u32::MAX as u64 / 2) as u32;
        Llc {
            clocks: vec![0; sockets.max(1) as usize],
            copied: vec![FxHashMap::default(); sockets.max(1) as usize],
            cpus_per_socket: cpus_per_socket.max(1),
            l2_pages: pages(l2_kib),
            llc_pages: pages(llc_kib),
        }
    }

    #[inline(always)]
    fn socket(&self, cpu: u32) -> usize {
        ((cpu / self.cpus_per_socket) as usize).min(self.clocks.len() - 1)
    }

    /// The stamp of lines CPU `cpu` brings into its caches now (a frame's
    /// `Page::cached` after its allocation or a copy).
    #[inline(always)]
    pub fn stamp(&self, cpu: u32) -> CacheStamp {
        (cpu + 1, self.clocks[self.socket(cpu)])
    }

    /// A folio of `pages` pages whose frames carry `stamp` (their last
    /// touch) is allocated on CPU `cpu`: advance its socket's clock and say
    /// whether the folio is warm (last touched on this socket, and what the
    /// socket allocated since, itself included, fits in the last-level
    /// cache, plus the L2 when this CPU touched it).
    #[inline(always)]
    pub fn on_alloc(&mut self, cpu: u32, stamp: CacheStamp, pages: u32) -> bool {
        let s = self.socket(cpu);
        self.clocks[s] = self.clocks[s].wrapping_add(pages);
        if stamp.0 == 0 || self.socket(stamp.0 - 1) != s {
            return false;
        }
        self.clocks[s].wrapping_sub(stamp.1) <= self.room(cpu, stamp)
    }

    /// CPU `cpu` writes `pages` pages other than by an allocation's clear or
    /// copy (init_on_free's zeroing): advance its socket's clock; returns
    /// their stamp.
    pub fn on_write(&mut self, cpu: u32, pages: u32) -> CacheStamp {
        let s = self.socket(cpu);
        self.clocks[s] = self.clocks[s].wrapping_add(pages);
        self.stamp(cpu)
    }

    /// What may be brought in since a page stamped `stamp` leaves it still
    /// cached for CPU `cpu`: the LLC, plus the L2 on the CPU that stamped it.
    #[inline(always)]
    fn room(&self, cpu: u32, stamp: CacheStamp) -> u32 {
        self.llc_pages + if stamp.0 == cpu + 1 { self.l2_pages } else { 0 }
    }

    /// CPU `cpu` copies page-cache page `pfn` (copy_page_to_iter,
    /// copy_page_from_iter): whether its lines are still in the caches (a
    /// CPU of this socket copied it, and what the socket brought in since
    /// fits); a page copied from DRAM is brought in, advancing the clock.
    pub fn on_copy(&mut self, cpu: u32, pfn: Pfn) -> bool {
        let s = self.socket(cpu);
        let now = self.clocks[s];
        let warm = self.copied[s].get(&pfn).is_some_and(|&st| now.wrapping_sub(st.1) <= self.room(cpu, st));
        if !warm {
            self.clocks[s] = now.wrapping_add(1);
            let bound = 2 * (self.llc_pages as u64 + self.l2_pages as u64) + 64;
            if self.copied[s].len() as u64 > bound {
                let (clock, most) = (self.clocks[s], self.llc_pages + self.l2_pages);
                self.copied[s].retain(|_, st| clock.wrapping_sub(st.1) <= most);
            }
        }
        let stamp = (cpu + 1, self.clocks[s]);
        self.copied[s].insert(pfn, stamp);
        warm
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
    fn a_page_reused_on_the_socket_that_freed_it_is_warm_within_its_caches() {
        // 2 sockets of 2 CPUs; an L2 of 2 pages, an LLC of 4.
        let mut c = Llc::new(2, 2, 8, 16);
        c.on_alloc(0, (0, 0), 10);
        let stamp = c.stamp(0);
        // On the CPU that freed it: L2 + LLC, itself included: 6 pages fit.
        assert!(c.on_alloc(0, stamp, 1));
        assert!(c.on_alloc(0, stamp, 5));
        assert!(!c.on_alloc(0, stamp, 1), "seven pages since the free: out of the caches");
        // Another CPU of the socket finds it in the LLC alone (4 pages).
        let stamp = c.stamp(0);
        assert!(c.on_alloc(1, stamp, 4));
        assert!(!c.on_alloc(1, stamp, 1));
        // What the socket's other CPU allocates counts against the shared LLC.
        let stamp = c.stamp(0);
        c.on_alloc(1, (0, 0), 5);
        assert!(!c.on_alloc(0, stamp, 2), "the other CPU's 5 pages pushed it out");
        // The other socket's allocations do not; its CPUs find it cold.
        let stamp = c.stamp(0);
        c.on_alloc(2, (0, 0), 100);
        assert!(!c.on_alloc(3, stamp, 1), "another socket's page is cold");
        assert!(c.on_alloc(0, stamp, 1), "the other socket's allocations left it in place");
        // An unstamped page, and a folio larger than the caches, are cold.
        assert!(!c.on_alloc(0, (0, 0), 1));
        let s = c.stamp(0);
        assert!(!c.on_alloc(0, s, 8));
    }

    #[test]
    fn a_page_copied_again_is_warm_while_the_caches_hold_it() {
        // 2 sockets of 2 CPUs; an L2 of 1 page, an LLC of 3.
        let mut c = Llc::new(2, 2, 4, 12);
        assert!(!c.on_copy(0, 7), "first copy: from DRAM");
        assert!(c.on_copy(0, 7), "again at once: in cache");
        // Three more pages brought in leave it in L2 + LLC (4 pages); five
        // more push it out.
        for p in 10..13 {
            assert!(!c.on_copy(0, p));
        }
        assert!(c.on_copy(0, 7), "three pages since: still held");
        for p in 20..25 {
            assert!(!c.on_copy(0, p));
        }
        assert!(!c.on_copy(0, 7), "five pages since: gone");
        // Allocations fill the same caches: they age a copied page too.
        assert!(c.on_copy(0, 7));
        c.on_alloc(0, (0, 0), 8);
        assert!(!c.on_copy(0, 7), "eight pages allocated since its copy");
        // The socket's other CPU finds it in the LLC; the other socket not.
        assert!(c.on_copy(1, 7), "a sibling CPU of the socket: in its LLC");
        assert!(!c.on_copy(2, 7), "another socket: from DRAM");
        // A file that fits is read over and over from cache; the table of
        // copied pages stays bounded whatever is read.
        let mut d = Llc::new(1, 1, 4, 12);
        for pass in 0..3 {
            for p in 100..104 {
                assert_eq!(d.on_copy(0, p), pass > 0, "pass {pass}, page {p}");
            }
        }
        for p in 1000..10_000 {
            d.on_copy(0, p);
        }
        assert!(d.copied[0].len() <= 2 * 4 + 64 + 1, "{} entries", d.copied[0].len());
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
