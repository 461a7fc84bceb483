//! Page allocator randomisation (mm/shuffle.c, `page_alloc.shuffle=1`).
//!
//! Two effects, both driven by one seeded stream so that a run is
//! reproducible: the free lists are put in random order when the zone is
//! first populated, and every free that ends at SHUFFLE_ORDER or above goes
//! to the head or the tail of its list by a coin flip.

use super::MAX_PAGE_ORDER;
use crate::sim::rng::Rng;

/// Orders at or above this are randomised on free (6.12: MAX_PAGE_ORDER).
pub const SHUFFLE_ORDER: u32 = MAX_PAGE_ORDER;

#[derive(Clone, Debug)]
pub struct ShuffleState {
    rng: Rng,
    /// Cached random word; the kernel spends one bit per decision rather
    /// than one random number, and so do we, to keep the stream identical
    /// in shape (64 decisions per draw).
    rand: u64,
    rand_bits: u8,
}

impl ShuffleState {
    pub fn new(seed: u64) -> Self {
        ShuffleState { rng: Rng::stream(seed, "page_alloc.shuffle"), rand: 0, rand_bits: 0 }
    }

    #[inline]
    pub fn is_shuffle_order(order: u32) -> bool {
        order >= SHUFFLE_ORDER
    }

    /// One coin flip: true = insert at the tail.
    #[inline]
    pub fn pick_tail(&mut self) -> bool {
        if self.rand_bits == 0 {
            self.rand = self.rng.next_u64();
            self.rand_bits = 64;
        }
        let tail = self.rand & 1 != 0;
        self.rand >>= 1;
        self.rand_bits -= 1;
        tail
    }

    /// Fisher-Yates permutation, used on the boot-time free blocks. The
    /// kernel swaps random pairs of SHUFFLE_ORDER blocks in place; a full
    /// permutation gives the same distribution without its retry quirks.
    pub fn permute<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_tail_is_seeded_and_balanced() {
        let mut a = ShuffleState::new(1);
        let mut b = ShuffleState::new(1);
        let mut c = ShuffleState::new(2);
        let va: Vec<bool> = (0..256).map(|_| a.pick_tail()).collect();
        let vb: Vec<bool> = (0..256).map(|_| b.pick_tail()).collect();
        let vc: Vec<bool> = (0..256).map(|_| c.pick_tail()).collect();
        assert_eq!(va, vb);
        assert_ne!(va, vc);
        let tails = va.iter().filter(|t| **t).count();
        assert!((64..192).contains(&tails), "{tails}");
    }

    #[test]
    fn permute_is_a_permutation() {
        let mut s = ShuffleState::new(3);
        let mut v: Vec<u32> = (0..100).collect();
        s.permute(&mut v);
        assert_ne!(v, (0..100).collect::<Vec<_>>());
        v.sort();
        assert_eq!(v, (0..100).collect::<Vec<_>>());
    }
}
