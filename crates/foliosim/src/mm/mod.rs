//! The kernel model, one file per Linux file where one exists.

pub mod compaction;
pub mod exec;
pub mod fault_lock;
pub mod filemap;
pub mod fork;
pub mod fs;
pub mod gup;
pub mod huge_memory;
pub mod huge_mm;
pub mod kswapd;
pub mod luf;
pub mod madvise;
pub mod mem_map;
pub mod memory;
pub mod memory_failure;
pub mod memory_hotplug;
pub mod memory_tiers;
pub mod migrate;
pub mod mm_types_task;
pub mod mmap;
pub mod mmap_lock;
pub mod mmu_gather;
pub mod mmu_notifier;
pub mod mmzone;
pub mod mprotect;
pub mod mremap;
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
pub mod swapfile;
pub mod truncate;
pub mod vma;
pub mod vmscan;
pub mod vmstat;
pub mod xarray;

pub use crate::types::{
    Pfn, MAX_NR_FRAMES, MAX_PAGE_ORDER, NR_PAGE_ORDERS, PAGEBLOCK_ORDER, PAGE_SHIFT, PAGE_SIZE, PMD_ORDER, PTRS_PER_PTE,
};
