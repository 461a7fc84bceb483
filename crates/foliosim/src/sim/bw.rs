//! A bandwidth many CPUs share, in simulated time: a memory node's (every
//! CPU clearing, copying or reading it) or the link between two sockets.
//!
//! Like a cache line (lock.rs), it is a server: a transfer is served at the
//! rate one CPU reaches alone (its *solo* time), as long as the resource
//! has room, and waits when the transfers in flight already use all of it.
//! Time is cut into buckets of `BUCKET_NS`; each bucket holds what the
//! resource moves in it (`gbps` x 1024 bytes) and what the transfers
//! processed so far took of it. A transfer fills the buckets from its
//! start on, at most its solo rate's share of each; what a full bucket
//! refuses goes on into the next ones, and the transfer ends when its last
//! byte is placed. The buckets are kept by their number, not relative to
//! the engine's clock, so a transfer processed after one that starts later
//! still finds the room before it (a step runs to its end before another
//! task's earlier one). Only the ring's last `SLOTS` buckets (about 4 ms)
//! are remembered: a bucket older than that is taken to have room.
//!
//! A transfer that finds room all along ends exactly at its solo time: one
//! CPU alone is never slowed. A transfer shorter than a bucket that its
//! bucket has room for is counted whole in it (the fast path: a few
//! compares, for every page a fault clears).

use super::Ns;

/// Length of a bucket, ns (a power of two: the bucket is `t >> BUCKET_SHIFT`).
const BUCKET_SHIFT: u32 = 10;
pub const BUCKET_NS: Ns = 1 << BUCKET_SHIFT;
/// Buckets remembered (a power of two).
const SLOTS: usize = 4096;

#[derive(Clone, Debug)]
pub struct BwServer {
    /// Bytes the resource moves in one bucket.
    cap: u64,
    /// (bucket number, bytes taken of it), by bucket number modulo SLOTS.
    slots: Box<[(u64, u64)]>,
    /// Bytes transferred, and time transfers spent beyond their solo time
    /// (waiting for the resource), for the results.
    pub bytes: u64,
    pub wait_ns: u64,
}

impl BwServer {
    /// A resource sustaining `gbps` GB/s (bytes per ns).
    pub fn new(gbps: f64) -> BwServer {
        let cap = (gbps * BUCKET_NS as f64).round().max(1.0) as u64;
        BwServer { cap, slots: vec![(u64::MAX, 0); SLOTS].into_boxed_slice(), bytes: 0, wait_ns: 0 }
    }

    /// A transfer of `bytes` starting at `t` that alone would take `solo`
    /// ns: when it ends (at `t + solo` if it never waits).
    #[inline(always)]
    pub fn transfer(&mut self, t: Ns, bytes: u64, solo: Ns) -> Ns {
        self.bytes += bytes;
        // The common case: a short transfer (a page's clear) that its
        // bucket has room for, counted whole in it.
        let b = t >> BUCKET_SHIFT;
        let s = &mut self.slots[b as usize & (SLOTS - 1)];
        if solo <= BUCKET_NS {
            if s.0 == b {
                if s.1 + bytes <= self.cap {
                    s.1 += bytes;
                    return t + solo;
                }
            } else if (s.0 < b || s.0 == u64::MAX) && bytes <= self.cap {
                *s = (b, bytes);
                return t + solo;
            }
        }
        self.transfer_slow(t, bytes, solo)
    }

    /// `transfer` across buckets: at most its solo rate's share of each,
    /// what a bucket refuses going on into the next ones.
    #[inline(never)]
    fn transfer_slow(&mut self, t: Ns, bytes: u64, solo: Ns) -> Ns {
        if bytes == 0 || solo == 0 {
            return t + solo;
        }
        // What the transfer moves in a whole bucket at its solo rate.
        let per_bucket = ((bytes as u128 * BUCKET_NS as u128).div_ceil(solo as u128) as u64).max(1);
        let mut now = t;
        let mut left = bytes;
        let mut waited = false;
        loop {
            let b = now >> BUCKET_SHIFT;
            let end_b = (b + 1) << BUCKET_SHIFT;
            let s = &mut self.slots[b as usize & (SLOTS - 1)];
            if s.0 != b {
                if s.0 != u64::MAX && s.0 > b {
                    // Older than the ring remembers: taken to have room.
                    return if waited { self.ended(t, solo, now + left * solo / bytes) } else { t + solo };
                }
                *s = (b, 0);
            }
            let span = end_b - now;
            let can = if now == t { per_bucket.min(((span as u128 * bytes as u128) / solo as u128).max(1) as u64) } else { per_bucket };
            let want = left.min(can);
            let take = want.min(self.cap.saturating_sub(s.1));
            s.1 += take;
            left -= take;
            waited |= take < want;
            if left == 0 {
                return if waited { self.ended(t, solo, now + (take * solo).div_ceil(bytes)) } else { t + solo };
            }
            now = end_b;
        }
    }

    #[cold]
    fn ended(&mut self, t: Ns, solo: Ns, end: Ns) -> Ns {
        let end = end.max(t + solo);
        self.wait_ns += end - (t + solo);
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_alone_takes_its_solo_time() {
        let mut s = BwServer::new(10.0);
        // 4 KiB at 8 GB/s: 512 ns, across a bucket boundary too.
        assert_eq!(s.transfer(900, 4096, 512), 1412);
        assert_eq!(s.transfer(5000, 4096, 512), 5512);
        // Back to back from one CPU: never faster than its solo rate, never slowed.
        let mut t = 10_000;
        for _ in 0..1000 {
            t = s.transfer(t, 4096, 512);
        }
        assert_eq!(t, 10_000 + 1000 * 512);
        assert_eq!(s.wait_ns, 0);
    }

    /// Four CPUs each streaming at 8 GB/s alone into a 16 GB/s resource:
    /// together they move 16 GB/s, each at half its solo rate.
    #[test]
    fn transfers_beyond_the_capacity_share_it() {
        let mut s = BwServer::new(16.0);
        let mut t = [0u64; 4];
        let pages = 2000u64;
        for _ in 0..pages {
            // In start order, as the engine runs steps.
            let i = (0..4).min_by_key(|&i| t[i]).unwrap();
            t[i] = s.transfer(t[i], 4096, 512);
        }
        let end = *t.iter().max().unwrap() as f64;
        let rate = (pages * 4096) as f64 / end;
        assert!((rate - 16.0).abs() < 0.3, "{rate} GB/s moved");
        assert!(s.wait_ns > 0);
        // Two CPUs at 8 GB/s fit in 16: none waits.
        let mut s = BwServer::new(16.0);
        let mut t = [0u64; 2];
        for _ in 0..pages {
            let i = (0..2).min_by_key(|&i| t[i]).unwrap();
            t[i] = s.transfer(t[i], 4096, 512);
        }
        assert_eq!(t, [pages / 2 * 512; 2]);
    }

    /// A transfer processed after a later one still has the room before it.
    #[test]
    fn an_earlier_transfer_processed_late_finds_the_room_before_the_later_one() {
        let mut s = BwServer::new(4.0);
        // A full bucket at 10 * 1024, then one at 2048 that fits.
        assert_eq!(s.transfer(10 * BUCKET_NS, 4096, 1024), 11 * BUCKET_NS);
        assert_eq!(s.transfer(2048, 4096, 1024), 2048 + 1024);
        // The bucket at 10 is full: another transfer there waits for the next.
        assert!(s.transfer(10 * BUCKET_NS, 4096, 1024) > 11 * BUCKET_NS);
    }
}
