//! The free blocks of one zone by first PFN: what `struct page` of a free
//! block's head holds in the kernel (buddy order, list links, migratetype),
//! with the map API (`get`, `get_mut`, `insert`, `remove`, ...) of the hash
//! map it replaces, but indexed by PFN instead of hashed.
//!
//! Compact and sparse, like the rest of foliosim's per-frame state: memory
//! is cut into chunks of 2^MAX_PAGE_ORDER frames (the largest buddy block).
//! A chunk that is one whole free block (all of an idle machine) costs one
//! entry in `top`; only a chunk holding smaller free blocks gets a dense
//! array of 2^MAX_PAGE_ORDER entries, returned to a spare pool once its last
//! small block is gone (allocated or merged back into a whole chunk). Free
//! blocks never span chunks, since blocks are naturally aligned.

use crate::mm::{Pfn, MAX_PAGE_ORDER};

/// A free block on a buddy free list. Free memory has no `struct Page`
/// state in foliosim: this node is all there is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FreeBlock {
    pub prev: Pfn, // PFN + 1 of the previous block on the same list, 0 = none
    pub next: Pfn,
    pub order: u8,
    pub mt: u8,
    /// PG_reported (free page reporting).
    pub reported: bool,
    /// LUF unmap generation carried by the block (0 = none).
    pub ugen: u16,
}

const CHUNK_SHIFT: u32 = MAX_PAGE_ORDER;
const CHUNK_MASK: Pfn = (1 << CHUNK_SHIFT) - 1;

/// An empty entry (no block starts at this PFN): an impossible order.
const VACANT: FreeBlock = FreeBlock { prev: 0, next: 0, order: u8::MAX, mt: 0, reported: false, ugen: 0 };

/// Dense entries for the 2^MAX_PAGE_ORDER frames of one chunk.
struct Chunk {
    blocks: Box<[FreeBlock]>,
    /// Non-vacant entries.
    used: u32,
}

pub(super) struct FreeBlocks {
    /// First chunk number of the zone (its start PFN >> CHUNK_SHIFT).
    base: u64,
    /// Per chunk: the order-MAX_PAGE_ORDER block covering it, or VACANT.
    top: Vec<FreeBlock>,
    /// Per chunk: 1 + index into `chunks` of its small blocks, 0 = none.
    dir: Vec<u32>,
    chunks: Vec<Chunk>,
    /// Indices of `chunks` not in use (all entries vacant).
    spare: Vec<u32>,
    len: usize,
}

impl FreeBlocks {
    /// An empty store for the zone [start_pfn, end_pfn).
    pub(super) fn new(start_pfn: Pfn, end_pfn: u64) -> FreeBlocks {
        let base = start_pfn as u64 >> CHUNK_SHIFT;
        let n = ((end_pfn + CHUNK_MASK as u64) >> CHUNK_SHIFT) - base;
        FreeBlocks { base, top: vec![VACANT; n as usize], dir: vec![0; n as usize], chunks: Vec::new(), spare: Vec::new(), len: 0 }
    }

    /// Chunk index of `pfn`, if inside the zone's chunks.
    #[inline(always)]
    fn chunk(&self, pfn: Pfn) -> Option<usize> {
        let c = (pfn as u64 >> CHUNK_SHIFT).wrapping_sub(self.base) as usize;
        (c < self.dir.len()).then_some(c)
    }

    #[inline]
    pub(super) fn get(&self, pfn: &Pfn) -> Option<&FreeBlock> {
        let pfn = *pfn;
        let c = self.chunk(pfn)?;
        if pfn & CHUNK_MASK == 0 && self.top[c].order != VACANT.order {
            return Some(&self.top[c]);
        }
        let d = self.dir[c];
        if d == 0 {
            return None;
        }
        let b = &self.chunks[d as usize - 1].blocks[(pfn & CHUNK_MASK) as usize];
        (b.order != VACANT.order).then_some(b)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, pfn: &Pfn) -> Option<&mut FreeBlock> {
        let pfn = *pfn;
        let c = self.chunk(pfn)?;
        if pfn & CHUNK_MASK == 0 && self.top[c].order != VACANT.order {
            return Some(&mut self.top[c]);
        }
        let d = self.dir[c];
        if d == 0 {
            return None;
        }
        let b = &mut self.chunks[d as usize - 1].blocks[(pfn & CHUNK_MASK) as usize];
        (b.order != VACANT.order).then_some(b)
    }

    #[inline]
    pub(super) fn contains_key(&self, pfn: &Pfn) -> bool {
        self.get(pfn).is_some()
    }

    /// Insert (or replace) the block at `pfn`; returns the old one.
    #[inline]
    pub(super) fn insert(&mut self, pfn: Pfn, blk: FreeBlock) -> Option<FreeBlock> {
        debug_assert!(blk.order as u32 <= MAX_PAGE_ORDER);
        let c = self.chunk(pfn).expect("free block outside its zone");
        let aligned = pfn & CHUNK_MASK == 0;
        // An entry at this PFN lives in `top` or in the chunk's array,
        // whichever its order says: take out one in the other place.
        let old = if blk.order as u32 == MAX_PAGE_ORDER {
            debug_assert!(aligned);
            let other = if self.dir[c] != 0 { self.remove_small(c, pfn) } else { None };
            let old = std::mem::replace(&mut self.top[c], blk);
            if old.order == VACANT.order {
                other
            } else {
                self.len -= 1;
                Some(old)
            }
        } else {
            let other = if aligned && self.top[c].order != VACANT.order {
                self.len -= 1;
                Some(std::mem::replace(&mut self.top[c], VACANT))
            } else {
                None
            };
            if self.dir[c] == 0 {
                let i = match self.spare.pop() {
                    Some(i) => i,
                    None => {
                        self.chunks.push(Chunk { blocks: vec![VACANT; 1 << CHUNK_SHIFT].into_boxed_slice(), used: 0 });
                        self.chunks.len() as u32 - 1
                    }
                };
                self.dir[c] = i + 1;
            }
            let ch = &mut self.chunks[self.dir[c] as usize - 1];
            let old = std::mem::replace(&mut ch.blocks[(pfn & CHUNK_MASK) as usize], blk);
            if old.order == VACANT.order {
                ch.used += 1;
                other
            } else {
                self.len -= 1;
                Some(old)
            }
        };
        self.len += 1;
        old
    }

    #[inline]
    pub(super) fn remove(&mut self, pfn: &Pfn) -> Option<FreeBlock> {
        let pfn = *pfn;
        let c = self.chunk(pfn)?;
        if pfn & CHUNK_MASK == 0 && self.top[c].order != VACANT.order {
            self.len -= 1;
            return Some(std::mem::replace(&mut self.top[c], VACANT));
        }
        self.remove_small(c, pfn)
    }

    /// Remove the entry for `pfn` from chunk `c`'s array, if there is one.
    #[inline]
    fn remove_small(&mut self, c: usize, pfn: Pfn) -> Option<FreeBlock> {
        let d = self.dir[c];
        if d == 0 {
            return None;
        }
        let ch = &mut self.chunks[d as usize - 1];
        let b = &mut ch.blocks[(pfn & CHUNK_MASK) as usize];
        if b.order == VACANT.order {
            return None;
        }
        let old = std::mem::replace(b, VACANT);
        ch.used -= 1;
        if ch.used == 0 {
            self.dir[c] = 0;
            self.spare.push(d - 1);
        }
        self.len -= 1;
        Some(old)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// (pfn, block) pairs in ascending PFN order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Pfn, &FreeBlock)> + '_ {
        let base = (self.base << CHUNK_SHIFT) as Pfn;
        (0..self.dir.len()).flat_map(move |c| {
            let first = base + ((c as Pfn) << CHUNK_SHIFT);
            let top = (self.top[c].order != VACANT.order).then(|| (first, &self.top[c]));
            let small = match self.dir[c] {
                0 => None,
                d => Some(
                    self.chunks[d as usize - 1]
                        .blocks
                        .iter()
                        .enumerate()
                        .filter(|(_, b)| b.order != VACANT.order)
                        .map(move |(i, b)| (first + i as Pfn, b)),
                ),
            };
            top.into_iter().chain(small.into_iter().flatten())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blk(order: u8) -> FreeBlock {
        FreeBlock { order, ..Default::default() }
    }

    #[test]
    fn map_semantics_and_chunks_are_recycled() {
        // A zone starting off a chunk boundary.
        let mut m = FreeBlocks::new(1000, 5000);
        assert!(m.get(&999).is_none() && m.get(&6000).is_none() && m.get(&u32::MAX).is_none());
        assert!(m.insert(1024, blk(10)).is_none());
        assert!(m.insert(1000, blk(3)).is_none());
        assert!(m.insert(2050, blk(1)).is_none());
        assert_eq!(m.len(), 3);
        assert_eq!(m.get(&1024).unwrap().order, 10);
        assert_eq!(m.get(&2050).unwrap().order, 1);
        assert!(m.get(&2048).is_none());
        m.get_mut(&2050).unwrap().ugen = 7;
        assert_eq!(m.insert(2050, blk(1)).unwrap().ugen, 7);
        let v: Vec<(Pfn, u8)> = m.iter().map(|(p, b)| (p, b.order)).collect();
        assert_eq!(v, vec![(1000, 3), (1024, 10), (2050, 1)]);
        assert_eq!(m.remove(&2050).unwrap().order, 1);
        assert!(m.remove(&2050).is_none());
        assert_eq!(m.spare.len(), 1, "the emptied chunk went back to the pool");
        m.insert(3000, blk(0));
        assert_eq!((m.chunks.len(), m.spare.len()), (2, 0), "and was reused");
        // Replacing a small block by a whole-chunk block at the same PFN.
        m.insert(3072, blk(2));
        assert_eq!(m.insert(3072, blk(10)).unwrap().order, 2);
        assert_eq!(m.get(&3072).unwrap().order, 10);
        assert_eq!(m.len(), 4);
    }
}
