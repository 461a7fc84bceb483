//! What a recorder knows a recorded process has mapped.
//!
//! Both converters (perf's events in `trace_perf`, valgrind's log in
//! `trace_record`) follow the process's mmap, munmap, mremap and brk calls,
//! so that a touch outside every range the trace declares becomes a
//! `Region` the replay maps first (the loader's mappings, valgrind's, the
//! vDSO: nothing the recording saw created).

use std::collections::BTreeMap;

const PAGE: u64 = 4096;

#[derive(Clone, Debug, Default)]
pub(super) struct KnownRanges {
    /// Mapped ranges: start -> end, page-aligned ends, never overlapping.
    known: BTreeMap<u64, u64>,
    /// The heap: brk's base and its current end.
    brk: Option<(u64, u64)>,
}

impl KnownRanges {
    /// Whether the byte at `addr` lies in a known range or the heap.
    pub(super) fn covered(&self, addr: u64) -> bool {
        if let Some((b, e)) = self.brk {
            if addr >= b && addr < e.next_multiple_of(PAGE) {
                return true;
            }
        }
        matches!(self.known.range(..=addr).next_back(), Some((_, &e)) if addr < e)
    }

    /// [a, a+len) is no longer mapped (munmap, the old place of an mremap);
    /// ranges it cuts keep their outer parts.
    pub(super) fn forget(&mut self, a: u64, len: u64) {
        let end = a.saturating_add(len.next_multiple_of(PAGE));
        let hit: Vec<(u64, u64)> = self.known.range(..end).filter(|(_, &e)| e > a).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in hit {
            self.known.remove(&s);
            if s < a {
                self.known.insert(s, a);
            }
            if e > end {
                self.known.insert(end, e);
            }
        }
    }

    /// [a, a+len) is mapped now (mmap, an mremap's new place, the image).
    pub(super) fn know(&mut self, a: u64, len: u64) {
        self.forget(a, len);
        self.known.insert(a, a.saturating_add(len.next_multiple_of(PAGE)));
    }

    /// brk returned `ret`: the first return is the heap's base (brk(0)),
    /// later ones its end; the heap never ends below its base.
    pub(super) fn brk(&mut self, ret: u64) {
        self.brk = Some(match self.brk {
            None => (ret, ret),
            Some((b, _)) => (b, ret.max(b)),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_munmap_in_the_middle_keeps_both_outer_parts() {
        let mut k = KnownRanges::default();
        k.know(0x10000, 0x4000);
        k.forget(0x11000, 0x1000);
        assert!(k.covered(0x10fff) && !k.covered(0x11000) && !k.covered(0x11fff) && k.covered(0x12000));
        assert!(!k.covered(0x14000), "ends are exclusive");
    }

    #[test]
    fn the_heap_is_covered_from_its_base_to_its_end_rounded_up() {
        let mut k = KnownRanges::default();
        k.brk(0x50000);
        assert!(!k.covered(0x50000), "an empty heap covers nothing");
        k.brk(0x50010);
        assert!(k.covered(0x50fff) && !k.covered(0x51000));
        k.brk(0x40000);
        assert!(!k.covered(0x50000), "a brk below the base empties the heap");
    }
}
