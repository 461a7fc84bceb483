//! The values every layer names: errors, page frame numbers and the page
//! sizes, progress reports, access kinds. This is the bottom layer: it
//! imports nothing of the crate (tests/layers.rs holds the layer order).

use serde::Serialize;

/// A config error that names where it happened. Display gives the one-line
/// message the CLI prints: `FILE:LINE: KEY: REASON` (LINE omitted if unknown).
#[derive(Clone, Debug, Serialize)]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    pub key: String,
    pub reason: String,
}

/// Keys and values come from user input: escape control characters so the
/// message stays on one line whatever the input holds.
fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (file, key, reason) = (one_line(&self.file), one_line(&self.key), one_line(&self.reason));
        match self.line {
            Some(l) => write!(f, "{file}:{l}: {key}: {reason}"),
            None => write!(f, "{file}: {key}: {reason}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why the engine could not give a result: what went wrong, and so whose it
/// is to fix. The front ends map it once: the Python binding to the
/// `foliosim.Error` hierarchy (crates/foliosim-py), the CLI to its exit
/// code (`Error::user_fixable`).
#[derive(Clone, Debug)]
pub enum Error {
    /// Bad input, named where it is: a config file, a key, a knob, a
    /// parameter.
    Config(ConfigError),
    /// The workload cannot be set up or run as asked: a trace that cannot
    /// be read or converted, a generator whose parameters this machine
    /// cannot honour, a run whose workload created no task.
    Workload(String),
    /// The simulated machine ran out of memory where the run cannot go on
    /// (a process image that cannot be mapped): a bigger machine or a
    /// smaller workload fixes it.
    OutOfMemory(String),
    /// The run was stopped (Ctrl-C, a cancel handle, a progress callback
    /// returning false) before its measured window began: there is no
    /// measurement to return.
    Cancelled,
    /// A bug in the engine: an invariant broke. Not the user's to fix.
    Internal(String),
}

impl Error {
    /// Whether the user can fix it (their input, their machine's size, their
    /// stop): the CLI exits 2 for these, 1 for a bug.
    pub fn user_fixable(&self) -> bool {
        !matches!(self, Error::Internal(_))
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Config(e) => e.fmt(f),
            Error::Workload(m) => write!(f, "workload: {}", one_line(m)),
            Error::OutOfMemory(m) => write!(f, "out of memory: {}", one_line(m)),
            Error::Cancelled => f.write_str("cancelled before the measured window began"),
            Error::Internal(m) => write!(f, "internal error: {}", one_line(m)),
        }
    }
}

impl std::error::Error for Error {}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::Config(e)
    }
}

/// Open an input file (a machine profile, a trace) to read. Anything but a
/// regular file is refused before it is opened: opening a FIFO waits for a
/// writer that may never come, and a device such as /dev/zero never ends.
pub fn open_input(path: &std::path::Path) -> Result<std::fs::File, String> {
    let ft = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.file_type();
    if !ft.is_file() {
        let kind = if ft.is_dir() { "a folder" } else { special_kind(&ft) };
        return Err(format!("{}: is {kind}, not a regular file", path.display()));
    }
    std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(unix)]
fn special_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::FileType) -> &'static str {
    "a special file"
}

/// Progress of a run, reported about every 100 ms of host time.
#[derive(Clone, Debug, Serialize)]
pub struct Progress {
    /// Simulated seconds done and in total.
    pub sim_s: f64,
    pub sim_total_s: f64,
}

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
/// The page-table levels' shifts on x86-64 (4-level paging) and arm64
/// with 4 KiB pages.
pub const PMD_SHIFT: u32 = 21;
pub const PUD_SHIFT: u32 = 30;
pub const PGDIR_SHIFT: u32 = 39;

/// Kind of a user memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    Load,
    Store,
    Ifetch,
}
