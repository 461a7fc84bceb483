//! A page-cache index (the role of the kernel's xarray): file page index ->
//! folio PFN, stored in lazily allocated chunks of 512 slots. Lookups of
//! neighbouring indices touch neighbouring memory, so a linear read of a
//! 128 GiB file does not miss the host cache on every page as a hash map
//! does, and a dense file costs 4 bytes per page. Iteration is in index
//! order (deterministic).

use super::Pfn;

const CHUNK_SHIFT: u32 = 9;
const CHUNK: usize = 1 << CHUNK_SHIFT;
const EMPTY: Pfn = Pfn::MAX;

#[derive(Clone, Default)]
pub struct XArray {
    chunks: Vec<Option<Box<[Pfn; CHUNK]>>>,
    len: usize,
}

impl XArray {
    #[inline]
    pub fn get(&self, index: &u64) -> Option<&Pfn> {
        let c = (*index >> CHUNK_SHIFT) as usize;
        match self.chunks.get(c) {
            Some(Some(ch)) => {
                let p = &ch[(*index as usize) & (CHUNK - 1)];
                (*p != EMPTY).then_some(p)
            }
            _ => None,
        }
    }

    pub fn contains_key(&self, index: &u64) -> bool {
        self.get(index).is_some()
    }

    /// Store `pfn` at `index`; returns the previous entry.
    pub fn insert(&mut self, index: u64, pfn: Pfn) -> Option<Pfn> {
        debug_assert!(pfn != EMPTY);
        let c = (index >> CHUNK_SHIFT) as usize;
        if self.chunks.len() <= c {
            self.chunks.resize_with(c + 1, || None);
        }
        let ch = self.chunks[c].get_or_insert_with(|| Box::new([EMPTY; CHUNK]));
        let old = std::mem::replace(&mut ch[(index as usize) & (CHUNK - 1)], pfn);
        if old == EMPTY {
            self.len += 1;
            None
        } else {
            Some(old)
        }
    }

    pub fn remove(&mut self, index: &u64) -> Option<Pfn> {
        let c = (*index >> CHUNK_SHIFT) as usize;
        let Some(Some(ch)) = self.chunks.get_mut(c) else { return None };
        let old = std::mem::replace(&mut ch[(*index as usize) & (CHUNK - 1)], EMPTY);
        if old == EMPTY {
            return None;
        }
        self.len -= 1;
        Some(old)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// (index, pfn) in index order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Pfn)> + '_ {
        self.chunks
            .iter()
            .enumerate()
            .filter_map(|(c, ch)| ch.as_ref().map(|ch| (c, ch)))
            .flat_map(|(c, ch)| ch.iter().enumerate().filter(|(_, &p)| p != EMPTY).map(move |(i, &p)| (((c << CHUNK_SHIFT) | i) as u64, p)))
    }

    /// The folios, in index order.
    pub fn values(&self) -> impl Iterator<Item = &Pfn> + '_ {
        self.chunks.iter().flatten().flat_map(|ch| ch.iter()).filter(|&&p| p != EMPTY)
    }
}

impl std::ops::Index<&u64> for XArray {
    type Output = Pfn;
    fn index(&self, i: &u64) -> &Pfn {
        self.get(i).expect("no entry at this index")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn insert_get_remove_iterate_in_order() {
        let mut x = XArray::default();
        assert!(x.get(&5).is_none());
        assert_eq!(x.insert(5, 50), None);
        assert_eq!(x.insert(1 << 20, 7), None);
        assert_eq!(x.insert(5, 51), Some(50));
        assert_eq!(x.len(), 2);
        assert_eq!(x[&5], 51);
        assert_eq!(x.iter().collect::<Vec<_>>(), vec![(5, 51), (1 << 20, 7)]);
        assert_eq!(x.remove(&5), Some(51));
        assert_eq!(x.remove(&5), None);
        assert_eq!(x.values().copied().collect::<Vec<_>>(), vec![7]);
        assert_eq!(x.len(), 1);
    }
}
