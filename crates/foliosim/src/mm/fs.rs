//! A file as the page cache sees it (include/linux/fs.h: struct inode and
//! its address_space). Apart from mm/filemap.rs, whose lookups and I/O
//! work on the whole kernel, so that struct Kernel can hold the inodes
//! without depending on those paths.

use crate::sim::lock::CacheLine;
use crate::workload::FsKind;

/// Cache lines standing for the hot `struct folio` words of a file's
/// folios (refcount, flags), hashed by page index. Readers of one file on
/// many CPUs bounce these lines, which is what limits read2.
pub const FOLIO_LINES: usize = 1024;

/// One file: its size, its page cache (index -> folio head) and the
/// cache lines of its folios' hot words.
pub struct Inode {
    pub id: u32,
    pub fs: FsKind,
    pub size: u64,
    /// Page index -> folio head (the xarray).
    pub pages: super::xarray::XArray,
    /// Pages [0, data_pages) have blocks on disk; beyond is a hole.
    pub data_pages: u64,
    pub lines: Vec<CacheLine>,
}

/// Pages of a file's extent on its disk: 2^24 (64 GiB).
pub const EXTENT_PAGES_SHIFT: u32 = 24;

/// Where the filesystem keeps page `index` of inode `ino` on its disk, in
/// 4 KiB blocks: each inode has an extent of 2^24 pages, in creation
/// order. What matters to a host is only that two guests which made the
/// same files in the same order (clones of one disk image running one
/// program) read the same blocks of it, and that two files never share
/// one.
pub fn disk_block(ino: u32, index: u64) -> u64 {
    ((ino as u64) << EXTENT_PAGES_SHIFT) + index.min((1 << EXTENT_PAGES_SHIFT) - 1)
}

impl Inode {
    pub fn new(id: u32, fs: FsKind, size: u64) -> Inode {
        Inode { id, fs, size, pages: Default::default(), data_pages: 0, lines: vec![CacheLine::default(); FOLIO_LINES] }
    }
}
