//! The VMM's free-page-reporting discard policy (`host.discard`): which
//! madvise it issues on a range a guest reported (QEMU's
//! ram_block_discard_range issues MADV_DONTNEED; the MADV_FREE RFC of the
//! v17 thread the other). Implementations live in policy/, one file each.

use crate::mm::Pfn;

/// The madvise the VMM issues on a reported range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// MADV_DONTNEED: the pages go at once; a refault zero-fills.
    DontNeed,
    /// MADV_FREE: the pages stay until host reclaim takes them (first, at
    /// no I/O cost); a refault before that finds the old page.
    Free,
}

/// What a discard policy sees of one reported range and of the host,
/// read-only. Frames are the reporting guest's.
pub struct DiscardCtx {
    pub pfn: Pfn,
    pub nr_pages: u64,
    /// Host THP (a whole 2 MiB range is one PMD zap).
    pub thp: bool,
    /// Guest pages the host holds, lazily freed ones among them, and the
    /// limit (None: no limit).
    pub rss: u64,
    pub nr_lazy: u64,
    pub limit: Option<u64>,
}

/// The host's free-page-reporting discard policy (`host.discard`): which
/// madvise the VMM issues for a reported range. Implementations live in
/// policy/, one file each.
pub trait DiscardPolicy: Send + Sync {
    fn advice(&self, c: &DiscardCtx) -> Advice;
}
