//! The earliest of a fixed set of times (one per guest, one per VMM's
//! NUMA scan): a tournament tree, so that moving one time and reading the
//! earliest cost log2(n) rather than a pass over all n.

use super::Ns;

/// Times indexed 0..n; an entry at `Ns::MAX` is never the earliest.
#[derive(Clone, Debug)]
pub struct Earliest {
    leaves: usize,
    /// Node i holds the earliest (time, index) of its subtree; leaves
    /// start at `leaves`. Ties go to the lower index, as `min` on tuples.
    t: Vec<(Ns, usize)>,
}

impl Earliest {
    pub fn new(times: impl IntoIterator<Item = Ns>) -> Self {
        let times: Vec<Ns> = times.into_iter().collect();
        let leaves = times.len().next_power_of_two();
        let mut t = vec![(Ns::MAX, usize::MAX); 2 * leaves];
        for (i, &x) in times.iter().enumerate() {
            t[leaves + i] = (x, i);
        }
        for i in (1..leaves).rev() {
            t[i] = t[2 * i].min(t[2 * i + 1]);
        }
        Earliest { leaves, t }
    }

    /// Move entry `i` to `time`.
    #[inline]
    pub fn set(&mut self, i: usize, time: Ns) {
        let mut p = self.leaves + i;
        self.t[p] = (time, i);
        while p > 1 {
            p /= 2;
            self.t[p] = self.t[2 * p].min(self.t[2 * p + 1]);
        }
    }

    /// Entry `i`'s time.
    #[inline]
    pub fn get(&self, i: usize) -> Ns {
        self.t[self.leaves + i].0
    }

    /// The earliest time and its index (the lowest among equal times);
    /// None if every entry is at `Ns::MAX`.
    #[inline]
    pub fn min(&self) -> Option<(Ns, usize)> {
        let m = self.t[1];
        (m.0 != Ns::MAX).then_some(m)
    }

    /// The earliest time of every entry but `i` (`Ns::MAX` if none): the
    /// earliest of the sibling subtrees on the way from `i` to the root.
    #[inline]
    pub fn min_except(&self, i: usize) -> Ns {
        let mut p = self.leaves + i;
        let mut m = Ns::MAX;
        while p > 1 {
            m = m.min(self.t[p ^ 1].0);
            p /= 2;
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a plain pass, over a sequence of moves with ties.
    #[test]
    fn matches_a_linear_scan() {
        let mut v: Vec<Ns> = vec![5, 3, 9, 3, 7];
        let mut e = Earliest::new(v.iter().copied());
        let scan = |v: &[Ns]| v.iter().enumerate().map(|(i, &t)| (t, i)).filter(|m| m.0 != Ns::MAX).min();
        for (i, t) in [(1, 8), (3, 2), (0, 2), (4, Ns::MAX), (0, 1), (2, 1), (0, Ns::MAX), (2, Ns::MAX), (3, Ns::MAX), (1, Ns::MAX)] {
            assert_eq!(e.min(), scan(&v));
            let others = v.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &t)| t).min().unwrap_or(Ns::MAX);
            assert_eq!(e.min_except(i), others);
            v[i] = t;
            e.set(i, t);
        }
        assert_eq!(e.min(), None);
        assert_eq!(Earliest::new([]).min(), None);
    }
}
