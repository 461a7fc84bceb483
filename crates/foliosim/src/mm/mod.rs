//! The kernel model, one file per Linux file where one exists.

pub mod asid;
pub mod compaction;
pub mod exec;
pub mod filemap;
pub mod fork;
pub mod huge_memory;
pub mod kswapd;
pub mod luf;
pub mod mem_map;
pub mod memory;
pub mod memory_failure;
pub mod memory_hotplug;
pub mod memory_tiers;
pub mod migrate;
pub mod mmap;
pub mod mmap_lock;
pub mod mmu_gather;
pub mod numa_balancing;
pub mod page_alloc;
pub mod page_isolation;
pub mod page_reporting;
pub mod pgtable;
pub mod rmap;
pub mod shuffle;
pub mod slub;
pub mod spf;
pub mod swap;
pub mod truncate;
pub mod vmscan;
pub mod vmstat;
pub mod xarray;

/// Page frame number. 32 bits cover 16 TiB of 4 KiB frames, less one:
/// `Pfn::MAX` means "none" (xarray slots) and LRU links hold PFN + 1 in a
/// `u32` (mem_map::Page), so frames are 0..MAX_NR_FRAMES. (Widening it would
/// grow every struct page and page-cache slot for machines past 16 TiB.)
pub type Pfn = u32;

/// Most frames a machine may have: the PFNs below `Pfn::MAX`.
pub const MAX_NR_FRAMES: u64 = Pfn::MAX as u64;

pub const PAGE_SHIFT: u32 = 12;
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// Orders 0..=MAX_PAGE_ORDER are managed by the buddy allocator (6.12 naming).
pub const MAX_PAGE_ORDER: u32 = 10;
pub const NR_PAGE_ORDERS: usize = MAX_PAGE_ORDER as usize + 1;
/// 2 MiB on x86-64 and arm64 with 4 KiB pages.
pub const PMD_ORDER: u32 = 9;
pub const PTRS_PER_PTE: usize = 512;
/// pageblock_order = PMD order on x86-64 (HUGETLB_PAGE_ORDER).
pub const PAGEBLOCK_ORDER: u32 = PMD_ORDER;
