//! Host backing of guest-physical memory.
//!
//! One state per 4 KiB guest frame, kept as bitmaps (1 bit per frame and
//! state: 1 MiB per state for a 32 GiB guest), never as per-frame structs:
//!
//! * `backed`: the host has a page behind the frame (counts in host RSS);
//! * `lazy`: backed, but MADV_FREE'd by a report: the host may drop it
//!   under pressure without I/O; a guest write first re-dirties it;
//! * `swapped`: the host swapped the page out; a guest access reads it back;
//! * none of these: never touched, or dropped by MADV_DONTNEED (reported
//!   and discarded): a guest write faults in a fresh zeroed page.
//!
//! `lazy` implies `backed`; `swapped` implies not `backed`.
//!
//! Host THP (`host.thp`): a fault in a 2 MiB-aligned guest range that has
//! no backing at all (and nothing swapped) gets a whole huge page: one EPT
//! violation, one THP fault, 2 MiB of zeroing. A range that is partly
//! backed is filled with 4 KiB pages (khugepaged collapse is not modelled).
//!
//! The host memory limit (`host.mem_mib`) is the host memory the guests
//! may hold (with one guest, its share, as a per-VM memory cgroup limit
//! does). Above it the host reclaims: MADV_FREE'd pages first (dropped, no
//! I/O), then guest pages by a second-chance clock over the frames,
//! swapping them out. The host sees guest use only through EPT faults, so a
//! frame is "referenced" when the host last faulted it in; accessed-bit
//! harvesting is not modelled.
//!
//! Several guests on one host (`Host::shared`, driven by
//! `run::simulate_guests`): the bitmaps span every guest's frames, guest g
//! at `[base[g], base[g] + nr_frames(g))`, so there is one RSS, one limit
//! and one reclaim clock over all of them, like the host's global LRU over
//! every QEMU process's anonymous memory: a fault in one guest can swap out
//! another guest's cold page, and a range one guest reported is memory any
//! guest can fault in. The calls come from the guest whose vCPU is running
//! (`cur`, set by the driver when it lends the host to that guest's
//! kernel); a guest frame number is relative to its own guest.

use crate::hw::profile::Profile;
use crate::mm::mmu_notifier::Bitmap;
use crate::mm::vmstat::{Stat, VmStat};
use crate::mm::Pfn;
use crate::sim::{ns, Ns};
use std::sync::Arc;

/// The host costs, in integer ns (from the profile's `[host]` table; host
/// zeroing streams at the guest node's zero bandwidth: the same DRAM).
#[derive(Clone, Debug)]
pub struct HostCosts {
    pub ept_violation: Ns,
    pub fault_4k: Ns,
    pub fault_2m: Ns,
    pub madvise: Ns,
    pub zap_4k: Ns,
    pub zap_2m: Ns,
    pub vq_roundtrip: Ns,
    pub swapout_4k: Ns,
    pub swapin_4k: Ns,
    pub zero_4k: Ns,
}

impl HostCosts {
    pub fn from_profile(p: &Profile) -> HostCosts {
        let h = &p.host;
        HostCosts {
            ept_violation: ns(h.ept_violation_ns),
            fault_4k: ns(h.fault_4k_ns),
            fault_2m: ns(h.fault_2m_ns),
            madvise: ns(h.madvise_ns),
            zap_4k: ns(h.zap_4k_ns),
            zap_2m: ns(h.zap_2m_ns),
            vq_roundtrip: ns(h.vq_roundtrip_ns),
            swapout_4k: ns(h.swapout_4k_ns),
            swapin_4k: ns(h.swapin_4k_ns),
            zero_4k: ns(Profile::bw_ns(4096, p.nodes[0].zero_bw_gbps)),
        }
    }
}

pub use super::discard::{Advice, DiscardCtx, DiscardPolicy};

/// 2 MiB in 4 KiB frames.
pub const HPAGE_PAGES: u64 = 512;

/// One guest's share of the host's bitmaps and its page counts.
#[derive(Clone, Debug, Default)]
struct GuestSpan {
    base: u64,
    nr_frames: u64,
    rss: u64,
    nr_lazy: u64,
    nr_swapped: u64,
}

pub struct Host {
    pub c: HostCosts,
    pub discard: Arc<dyn DiscardPolicy>,
    pub thp: bool,
    /// Pages the guests may hold on the host (None: no limit).
    pub limit: Option<u64>,
    /// Frames of the bitmaps (every guest's, with alignment gaps).
    nr_frames: u64,
    guests: Vec<GuestSpan>,
    /// The guest whose vCPU calls in; its span's base and end.
    cur: usize,
    base: u64,
    end: u64,
    backed: Bitmap,
    lazy: Bitmap,
    swapped: Bitmap,
    referenced: Bitmap,
    rss: u64,
    nr_lazy: u64,
    nr_swapped: u64,
    /// Clock hands of host reclaim: lazy pages, then everything.
    lazy_hand: u64,
    hand: u64,
}

impl Host {
    /// A host for a guest of `nr_frames` frames; `prealloc` backs them all
    /// (QEMU -mem-prealloc, or a guest that has touched all its memory).
    pub fn new(nr_frames: u64, c: HostCosts, discard: Arc<dyn DiscardPolicy>, thp: bool, limit_pages: Option<u64>, prealloc: bool) -> Host {
        Host {
            c,
            discard,
            thp,
            limit: limit_pages,
            nr_frames,
            guests: vec![GuestSpan { base: 0, nr_frames, rss: if prealloc { nr_frames } else { 0 }, nr_lazy: 0, nr_swapped: 0 }],
            cur: 0,
            base: 0,
            end: nr_frames,
            backed: if prealloc { Bitmap::filled(nr_frames) } else { Bitmap::new(nr_frames) },
            lazy: Bitmap::new(nr_frames),
            swapped: Bitmap::new(nr_frames),
            referenced: Bitmap::new(nr_frames),
            rss: if prealloc { nr_frames } else { 0 },
            nr_lazy: 0,
            nr_swapped: 0,
            lazy_hand: 0,
            hand: 0,
        }
    }

    /// One host under several guests: the guests' own hosts (as each guest
    /// booted them, with the same costs, discard policy and host THP)
    /// joined side by side, with one memory limit for all. Each guest's span
    /// starts 2 MiB-aligned so a host THP never straddles two guests.
    pub fn shared(parts: Vec<Host>, limit_pages: Option<u64>) -> Host {
        let mut base = 0;
        let mut guests = Vec::new();
        for p in &parts {
            guests.push(GuestSpan { base, nr_frames: p.nr_frames, rss: p.rss, nr_lazy: p.nr_lazy, nr_swapped: p.nr_swapped });
            base = (base + p.nr_frames).next_multiple_of(HPAGE_PAGES);
        }
        let first = &parts[0];
        let mut h = Host {
            c: first.c.clone(),
            discard: Arc::clone(&first.discard),
            thp: first.thp,
            limit: limit_pages,
            nr_frames: base,
            guests,
            cur: 0,
            base: 0,
            end: parts[0].nr_frames,
            backed: Bitmap::new(base),
            lazy: Bitmap::new(base),
            swapped: Bitmap::new(base),
            referenced: Bitmap::new(base),
            rss: parts.iter().map(|p| p.rss).sum(),
            nr_lazy: parts.iter().map(|p| p.nr_lazy).sum(),
            nr_swapped: parts.iter().map(|p| p.nr_swapped).sum(),
            lazy_hand: 0,
            hand: 0,
        };
        for (g, p) in parts.iter().enumerate() {
            // Bases are multiples of 512 frames: whole words.
            let w0 = (h.guests[g].base / 64) as usize;
            for (dst, src) in
                [(&mut h.backed, &p.backed), (&mut h.lazy, &p.lazy), (&mut h.swapped, &p.swapped), (&mut h.referenced, &p.referenced)]
            {
                dst.w[w0..w0 + src.w.len()].copy_from_slice(&src.w);
            }
        }
        h
    }

    /// The vCPUs of guest `g` run now: its frame numbers are the ones
    /// passed in until the next call.
    pub fn set_guest(&mut self, g: usize) {
        self.cur = g;
        self.base = self.guests[g].base;
        self.end = self.base + self.guests[g].nr_frames;
    }
    pub fn nr_guests(&self) -> usize {
        self.guests.len()
    }
    /// The guest owning host frame `f` (a frame of some guest's span).
    fn guest_of(&self, f: u64) -> usize {
        self.guests.partition_point(|s| s.base <= f) - 1
    }

    pub fn nr_frames(&self) -> u64 {
        self.nr_frames
    }
    /// Host RSS of all guests.
    pub fn rss(&self) -> u64 {
        self.rss
    }
    pub fn nr_lazy(&self) -> u64 {
        self.nr_lazy
    }
    pub fn nr_swapped(&self) -> u64 {
        self.nr_swapped
    }
    /// Guest `g`'s pages: (host RSS, of them MADV_FREE'd, swapped out).
    pub fn guest_pages(&self, g: usize) -> (u64, u64, u64) {
        let s = &self.guests[g];
        (s.rss, s.nr_lazy, s.nr_swapped)
    }
    #[inline]
    pub fn is_backed(&self, pfn: Pfn) -> bool {
        self.backed.get(self.base + pfn as u64)
    }
    #[inline]
    pub fn is_lazy(&self, pfn: Pfn) -> bool {
        self.lazy.get(self.base + pfn as u64)
    }

    /// Whether every frame of the range is backed and not lazy: a guest
    /// write to it costs the host nothing.
    pub fn range_ready(&self, pfn: Pfn, n: u64) -> bool {
        let s = self.base + pfn as u64;
        self.backed.count_range(s, s + n) == n && (self.nr_lazy == 0 || self.lazy.count_range(s, s + n) == 0)
    }

    /// Whether the host keeps the guest's contents of `pfn`: backed and
    /// not MADV_FREE'd, or swapped out (read back on the next access).
    pub fn holds(&self, pfn: Pfn) -> bool {
        let f = self.base + pfn as u64;
        self.backed.get(f) && !self.lazy.get(f) || self.swapped.get(f)
    }

    /// Whether no frame of the range is backed by a page the host would
    /// have to keep (all discarded, lazy or swapped): what a reported block
    /// must look like.
    pub fn range_given_back(&self, pfn: Pfn, n: u64) -> bool {
        let s = self.base + pfn as u64;
        self.backed.count_range(s, s + n) == self.lazy.count_range(s, s + n)
    }

    /// Publish the current guest's gauges (host memory free is the host's).
    pub fn sync_gauges(&self, stat: &mut VmStat) {
        let g = &self.guests[self.cur];
        stat.v[Stat::HostRss as usize] = g.rss as i64;
        stat.v[Stat::HostLazyfree as usize] = g.nr_lazy as i64;
        stat.v[Stat::HostSwap as usize] = g.nr_swapped as i64;
        stat.v[Stat::HostMemFree as usize] = self.limit.map_or(0, |l| l.saturating_sub(self.rss) as i64);
    }

    /// The guest writes the frames [pfn, pfn + n) for the first time since
    /// it allocated them (the fault path's clearing or copy). Every frame
    /// without a usable host page is faulted in: EPT violation, then a
    /// zero-filled host page (THP if the whole 2 MiB range is empty and
    /// host THP is on), a swap-in, or, for a MADV_FREE'd page still there,
    /// just the EPT refault. Returns the time the vCPU spends in the host.
    pub fn touch(&mut self, pfn: Pfn, n: u64, stat: &mut VmStat) -> Ns {
        if self.range_ready(pfn, n) {
            return 0;
        }
        stat.inc(Stat::HostFaultAllocs);
        let mut t = 0;
        let g = self.cur;
        let mut f = self.base + pfn as u64;
        let end = f + n;
        while f < end {
            if self.backed.get(f) {
                if self.lazy.get(f) {
                    // Still resident: re-dirty it, no zeroing.
                    self.lazy.clear(f);
                    self.nr_lazy -= 1;
                    self.guests[g].nr_lazy -= 1;
                    self.referenced.set(f);
                    stat.inc(Stat::HostLazyfreeReuse);
                    t += self.c.ept_violation;
                }
                f += 1;
                continue;
            }
            let hp = f & !(HPAGE_PAGES - 1);
            if self.thp
                && hp + HPAGE_PAGES <= self.end
                && self.backed.count_range(hp, hp + HPAGE_PAGES) == 0
                && self.swapped.count_range(hp, hp + HPAGE_PAGES) == 0
            {
                t += self.make_room(HPAGE_PAGES, stat);
                for g in hp..hp + HPAGE_PAGES {
                    self.backed.set(g);
                    self.referenced.set(g);
                }
                self.rss += HPAGE_PAGES;
                self.guests[g].rss += HPAGE_PAGES;
                stat.inc(Stat::HostFaults);
                stat.inc(Stat::HostThpFaults);
                stat.add(Stat::HostZeroedPages, HPAGE_PAGES as i64);
                t += self.c.ept_violation + self.c.fault_2m + HPAGE_PAGES * self.c.zero_4k;
                f = hp + HPAGE_PAGES;
                continue;
            }
            t += self.make_room(1, stat);
            if self.swapped.get(f) {
                self.swapped.clear(f);
                self.nr_swapped -= 1;
                self.guests[g].nr_swapped -= 1;
                stat.inc(Stat::HostPswpin);
                t += self.c.ept_violation + self.c.fault_4k + self.c.swapin_4k;
            } else {
                stat.inc(Stat::HostFaults);
                stat.inc(Stat::HostZeroedPages);
                t += self.c.ept_violation + self.c.fault_4k + self.c.zero_4k;
            }
            self.backed.set(f);
            self.referenced.set(f);
            self.rss += 1;
            self.guests[g].rss += 1;
            f += 1;
        }
        self.sync_gauges(stat);
        t
    }

    /// Whether any guest page is swapped out on the host (else `access`
    /// costs nothing and changes nothing).
    #[inline]
    pub fn any_swapped(&self) -> bool {
        self.nr_swapped != 0
    }

    /// A guest access to an allocated frame: only a host swap-out can have
    /// taken its page away. Cheap when nothing is swapped.
    #[inline]
    pub fn access(&mut self, pfn: Pfn, stat: &mut VmStat) -> Ns {
        if self.nr_swapped == 0 || !self.swapped.get(self.base + pfn as u64) {
            return 0;
        }
        self.touch(pfn, 1, stat)
    }

    /// Host reclaim until `n` more pages fit under the limit. Returns the
    /// time the faulting vCPU waits (swap-out I/O in direct reclaim).
    fn make_room(&mut self, n: u64, stat: &mut VmStat) -> Ns {
        let Some(limit) = self.limit else { return 0 };
        let mut t = 0;
        // MADV_FREE'd pages go first and cost no I/O.
        let mut scanned = 0;
        while self.rss + n > limit && self.nr_lazy > 0 && scanned < self.nr_frames {
            let f = self.lazy_hand;
            self.lazy_hand = (self.lazy_hand + 1) % self.nr_frames;
            scanned += 1;
            if self.lazy.get(f) {
                self.lazy.clear(f);
                self.backed.clear(f);
                self.nr_lazy -= 1;
                self.rss -= 1;
                let o = self.guest_of(f);
                self.guests[o].nr_lazy -= 1;
                self.guests[o].rss -= 1;
                stat.inc(Stat::HostLazyfreeReclaimed);
            }
        }
        // Then a second-chance clock over guest pages, swapping out.
        let mut scanned = 0;
        while self.rss + n > limit && self.rss > 0 && scanned < 2 * self.nr_frames {
            let f = self.hand;
            self.hand = (self.hand + 1) % self.nr_frames;
            scanned += 1;
            if !self.backed.get(f) {
                continue;
            }
            if self.referenced.get(f) {
                self.referenced.clear(f);
                continue;
            }
            self.backed.clear(f);
            self.swapped.set(f);
            self.rss -= 1;
            self.nr_swapped += 1;
            let o = self.guest_of(f);
            self.guests[o].rss -= 1;
            self.guests[o].nr_swapped += 1;
            stat.inc(Stat::HostPswpout);
            t += self.c.swapout_4k;
        }
        t
    }

    /// The VMM drops the reported guest range [pfn, pfn + n) (one madvise
    /// call). Returns the host time it takes.
    pub fn discard_range(&mut self, pfn: Pfn, n: u64, stat: &mut VmStat) -> Ns {
        let mut t = self.c.madvise;
        let ctx = DiscardCtx { pfn, nr_pages: n, thp: self.thp, rss: self.rss, nr_lazy: self.nr_lazy, limit: self.limit };
        let advice = self.discard.advice(&ctx);
        let gi = self.cur;
        let s = self.base + pfn as u64;
        let end = s + n;
        let mut f = s;
        while f < end {
            // A whole backed 2 MiB range under host THP is one huge PMD.
            let whole = self.thp && f.is_multiple_of(HPAGE_PAGES) && end - f >= HPAGE_PAGES;
            let gs = &mut self.guests[gi];
            let step = if whole { HPAGE_PAGES } else { 1 };
            let mut present = 0;
            for g in f..f + step {
                if self.swapped.get(g) {
                    // Both advices free the swap entry.
                    self.swapped.clear(g);
                    self.nr_swapped -= 1;
                    gs.nr_swapped -= 1;
                }
                if !self.backed.get(g) {
                    continue;
                }
                match advice {
                    Advice::DontNeed => {
                        if self.lazy.get(g) {
                            self.lazy.clear(g);
                            self.nr_lazy -= 1;
                            gs.nr_lazy -= 1;
                        }
                        self.backed.clear(g);
                        self.rss -= 1;
                        gs.rss -= 1;
                        present += 1;
                    }
                    Advice::Free => {
                        if !self.lazy.get(g) {
                            self.lazy.set(g);
                            self.nr_lazy += 1;
                            gs.nr_lazy += 1;
                            present += 1;
                        }
                    }
                }
                self.referenced.clear(g);
            }
            if present > 0 {
                stat.add(Stat::HostDiscardedPages, present as i64);
                t += if whole && present == HPAGE_PAGES { self.c.zap_2m } else { present * self.c.zap_4k };
            }
            f += step;
        }
        self.sync_gauges(stat);
        t
    }

    /// Full consistency check of the bitmaps against the counters.
    pub fn check(&self) -> Result<(), String> {
        let b = self.backed.count();
        let l = self.lazy.count();
        let s = self.swapped.count();
        if b != self.rss || l != self.nr_lazy || s != self.nr_swapped {
            return Err(format!(
                "host counters rss {} lazy {} swapped {} but bitmaps hold {b} {l} {s}",
                self.rss, self.nr_lazy, self.nr_swapped
            ));
        }
        for (i, ((bw, lw), sw)) in self.backed.w.iter().zip(&self.lazy.w).zip(&self.swapped.w).enumerate() {
            if lw & !bw != 0 {
                return Err(format!("host: lazy frames without backing near frame {}", i * 64));
            }
            if sw & bw != 0 {
                return Err(format!("host: frames both swapped and backed near frame {}", i * 64));
            }
        }
        for (g, sp) in self.guests.iter().enumerate() {
            let (b, l, w) = (
                self.backed.count_range(sp.base, sp.base + sp.nr_frames),
                self.lazy.count_range(sp.base, sp.base + sp.nr_frames),
                self.swapped.count_range(sp.base, sp.base + sp.nr_frames),
            );
            if (b, l, w) != (sp.rss, sp.nr_lazy, sp.nr_swapped) {
                return Err(format!(
                    "host: guest {g} counts rss {} lazy {} swapped {} but its frames hold {b} {l} {w}",
                    sp.rss, sp.nr_lazy, sp.nr_swapped
                ));
            }
        }
        if let Some(lim) = self.limit {
            if self.rss > lim {
                return Err(format!("host RSS {} above the limit {lim}", self.rss));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> HostCosts {
        HostCosts {
            ept_violation: 1000,
            fault_4k: 500,
            fault_2m: 2000,
            madvise: 1000,
            zap_4k: 80,
            zap_2m: 1000,
            vq_roundtrip: 20000,
            swapout_4k: 50_000,
            swapin_4k: 100_000,
            zero_4k: 1000,
        }
    }

    /// A policy that always gives `Advice` (policy/ has the real ones).
    struct Fixed(Advice);

    impl DiscardPolicy for Fixed {
        fn advice(&self, _: &DiscardCtx) -> Advice {
            self.0
        }
    }

    fn fixed(a: Advice) -> Arc<dyn DiscardPolicy> {
        Arc::new(Fixed(a))
    }

    #[test]
    fn dontneed_discard_then_refault_zeroes() {
        let mut st = VmStat::default();
        let mut h = Host::new(4096, costs(), fixed(Advice::DontNeed), false, None, true);
        assert_eq!(h.touch(0, 512, &mut st), 0, "backed memory costs nothing");
        let t = h.discard_range(512, 512, &mut st);
        assert_eq!(t, 1000 + 512 * 80);
        assert_eq!(h.rss(), 4096 - 512);
        assert!(h.range_given_back(512, 512) && !h.range_given_back(0, 512));
        let t = h.touch(512, 1, &mut st);
        assert_eq!(t, 1000 + 500 + 1000, "EPT violation + host fault + zeroing");
        assert_eq!(st.get(Stat::HostFaults), 1);
        assert_eq!(h.rss(), 4096 - 511);
        h.check().unwrap();
    }

    #[test]
    fn madv_free_keeps_rss_and_refaults_without_zeroing_until_reclaimed() {
        let mut st = VmStat::default();
        let mut h = Host::new(2048, costs(), fixed(Advice::Free), false, Some(2048), true);
        h.discard_range(0, 1024, &mut st);
        assert_eq!((h.rss(), h.nr_lazy()), (2048, 1024), "MADV_FREE does not lower RSS by itself");
        assert_eq!(h.touch(0, 1, &mut st), 1000, "only the EPT refault");
        assert_eq!(st.get(Stat::HostZeroedPages), 0);
        // Pressure: shrink the limit; lazy pages go first, no swap.
        h.limit = Some(1500);
        h.touch(1, 0, &mut st);
        let t = h.make_room(0, &mut st);
        assert_eq!(t, 0);
        assert_eq!(h.rss(), 1500);
        assert_eq!(st.get(Stat::HostPswpout), 0);
        assert!(st.get(Stat::HostLazyfreeReclaimed) >= 548);
        h.check().unwrap();
    }

    #[test]
    fn limit_swaps_out_and_refaults_swap_in() {
        let mut st = VmStat::default();
        let mut h = Host::new(1024, costs(), fixed(Advice::DontNeed), false, Some(512), false);
        h.touch(0, 512, &mut st);
        assert_eq!(st.get(Stat::HostPswpout), 0);
        let t = h.touch(512, 1, &mut st);
        assert_eq!(st.get(Stat::HostPswpout), 1, "one page had to go");
        assert!(t >= 50_000);
        assert_eq!(h.rss(), 512);
        let victim = (0..512).find(|&f| !h.is_backed(f)).unwrap();
        let t = h.access(victim, &mut st);
        assert!(t >= 100_000 && st.get(Stat::HostPswpin) == 1, "swap-in on access");
        h.check().unwrap();
    }

    #[test]
    fn host_thp_backs_whole_empty_2m_ranges() {
        let mut st = VmStat::default();
        let mut h = Host::new(2048, costs(), fixed(Advice::DontNeed), true, None, false);
        let t = h.touch(5, 1, &mut st);
        assert_eq!(t, 1000 + 2000 + 512 * 1000);
        assert_eq!((h.rss(), st.get(Stat::HostThpFaults)), (512, 1));
        assert_eq!(h.touch(6, 1, &mut st), 0);
        // Discarding the whole 2 MiB is one PMD zap.
        assert_eq!(h.discard_range(0, 512, &mut st), 1000 + 1000);
        h.check().unwrap();
    }
}
