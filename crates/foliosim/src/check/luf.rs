//! Ground truth for deferred TLB flushes (docs/mechanisms/lazy-unmap-flush.md#invariants), kept apart from
//! LUF's own bookkeeping: when an unmap clears a PTE without flushing at
//! once, the checker records which CPUs' TLBs really still hold that
//! translation (read from the TLB model). Later checks ask the TLB model
//! again, so an entry evicted or flushed by anyone stops counting.
//!
//! - I1: no store through a stale entry (check/mod.rs `on_tlb_hit`).
//! - I2: no load through a stale entry to a reallocated frame (`on_tlb_hit`).
//! - I3: a frame with live stale entries is not poisoned (init_on_free).
//! - I4: when a frame leaves the allocator, no CPU holds a live stale entry to it.
//! - I6: a load through a stale entry sees what the program should see:
//!   the same data identity (file page or anon page) behind the address,
//!   at the same data version.
//! - I6'/I9: with no deferral owed (generation 0), a frame is freed only
//!   after its stale entries are gone.

use super::Checker;
use crate::hw::tlb::TlbEntry;
use crate::kernel::Kernel;
use crate::mm::mem_map::pg;
use crate::mm::Pfn;
use crate::sim::Ns;
use crate::workload::Access;

pub use super::{Ident, StaleRec};

impl Checker {
    /// Record that `rec` (its `ver` is filled in here) still shows `pfn`.
    pub fn luf_record_stale(&mut self, pfn: Pfn, rec: StaleRec) {
        let ver = *self.data_ver.entry(rec.ident).or_insert(0);
        self.stale.entry(pfn).or_default().push(StaleRec { ver, ..rec });
    }

    /// `cpu`'s entries of `from` now translate for `to` (an ASID slot
    /// reused without a flush): the records follow the hardware tag.
    pub fn retag_stale(&mut self, cpu: u32, from: u32, to: u32) {
        for recs in self.stale.values_mut() {
            for r in recs.iter_mut().filter(|r| r.cpu == cpu && r.mm == from) {
                r.mm = to;
            }
        }
    }

    /// The data behind `ident` changed (a store, a write()).
    #[inline]
    pub fn bump_data(&mut self, ident: Ident) {
        if let Some(v) = self.data_ver.get_mut(&ident) {
            *v += 1;
        }
    }
}

impl Kernel {
    /// Identity of the data in frame `pfn`.
    pub fn page_ident(&self, pfn: Pfn) -> Ident {
        let head = self.mem_map.folio_head(pfn);
        let p = self.mem_map.get(head);
        (p.flags & pg::ANON != 0, p.mapping, p.index + (pfn - head) as u64)
    }

    /// Live stale records of `pfn` at `t`; forgets the dead ones.
    fn live_stale(&mut self, pfn: Pfn, t: Ns) -> Vec<StaleRec> {
        let Some(recs) = self.check.stale.remove(&pfn) else { return Vec::new() };
        let live: Vec<StaleRec> = recs.into_iter().filter(|r| self.tlb_live_entry(r.cpu, r.mm, r.va, pfn, t)).collect();
        if !live.is_empty() {
            self.check.stale.insert(pfn, live.clone());
        }
        live
    }

    /// I4: frames [pfn, pfn + 2^order) leave the allocator at `t`, to be
    /// written by their new owner: no CPU may still cache them.
    /// (Inlined guard: every allocation calls it, the checker is usually off.)
    #[inline]
    pub fn check_alloc_exit(&mut self, t: Ns, pfn: Pfn, order: u32, what: &str) {
        if self.check.enabled && !self.check.stale.is_empty() {
            self.check_alloc_exit_stale(t, pfn, order, what);
        }
    }

    #[inline(never)]
    fn check_alloc_exit_stale(&mut self, t: Ns, pfn: Pfn, order: u32, what: &str) {
        self.report_live_stale(t, pfn, order, |p, r| {
            format!("I4: frame {p} left the allocator ({what}) at {t} ns while cpu {} still caches mm {} va {:#x} -> it (stale since {} ns): flush missing before reuse", r.cpu, r.mm, r.va, r.since)
        });
    }

    /// Report the first live stale entry of each frame of the block (and
    /// forget that frame's records: one report a frame).
    fn report_live_stale(&mut self, t: Ns, pfn: Pfn, order: u32, msg: impl Fn(Pfn, &StaleRec) -> String) {
        for i in 0..(1u32 << order) {
            let live = self.live_stale(pfn + i, t);
            if let Some(r) = live.first() {
                self.check.report(msg(pfn + i, r));
                self.check.stale.remove(&(pfn + i));
            }
        }
    }

    /// I6'/I9: a frame freed with no deferred flush owed (generation 0)
    /// must have no live stale entry.
    #[inline]
    pub fn check_free_flushed(&mut self, t: Ns, pfn: Pfn, order: u32, ugen: u16) {
        if self.check.enabled && !self.check.stale.is_empty() {
            self.check_free_flushed_stale(t, pfn, order, ugen);
        }
    }

    #[inline(never)]
    fn check_free_flushed_stale(&mut self, t: Ns, pfn: Pfn, order: u32, ugen: u16) {
        for i in 0..(1u32 << order) {
            let live = self.live_stale(pfn + i, t);
            if let Some(r) = live.first() {
                if ugen == 0 {
                    self.check.report(format!(
                        "I6'/I9: frame {} freed at {t} ns with no deferred flush owed while cpu {} still caches mm {} va {:#x} -> it",
                        pfn + i,
                        r.cpu,
                        r.mm,
                        r.va
                    ));
                    self.check.stale.remove(&(pfn + i));
                } else if r.writable {
                    self.check.report(format!(
                        "I5: frame {} deferred (generation {ugen}) while cpu {} holds a writable entry for mm {} va {:#x}",
                        pfn + i,
                        r.cpu,
                        r.mm,
                        r.va
                    ));
                }
            }
        }
    }

    /// I7 (white-box): every free frame some CPU still caches must carry a
    /// generation whose flush has not completed, so that its next exit
    /// from the allocator flushes. Checked when a block has just left the
    /// allocator and before its generation is acted on: after pcp refills,
    /// splits and drains.
    #[inline]
    pub fn check_free_generations(&mut self, t: Ns) {
        if self.check.enabled && !self.check.stale.is_empty() && self.knobs.luf.enabled {
            self.check_free_generations_stale(t);
        }
    }

    #[inline(never)]
    fn check_free_generations_stale(&mut self, t: Ns) {
        let free = self.pa.free_extents();
        let mut pfns: Vec<Pfn> = self.check.stale.keys().copied().collect();
        pfns.sort_unstable();
        for pfn in pfns {
            let i = free.partition_point(|e| e.pfn <= pfn);
            let Some(e) = i.checked_sub(1).map(|i| &free[i]) else { continue };
            if pfn >= e.pfn + (1 << e.order) {
                continue;
            }
            let done = self.luf.done_seen(self.pfn_to_nid(pfn), t, &self.knobs);
            let pending = e.ugen != 0 && crate::mm::page_alloc::ugen_before(done, e.ugen);
            if pending {
                continue;
            }
            let live = self.live_stale(pfn, t);
            if let Some(r) = live.first() {
                self.check.report(format!(
                    "I7: free frame {pfn} carries generation {} (flushed up to {done}) while cpu {} still caches mm {} va {:#x} -> it: its next allocation will not flush",
                    e.ugen, r.cpu, r.mm, r.va
                ));
                self.check.stale.remove(&pfn);
            }
        }
    }

    /// I1w (scenario 15): writeback IO of `pfn` starts at `t`: no CPU may
    /// still be able to store to it without faulting, i.e. hold a live
    /// entry cached with W=1 and D=1 (a store through a clean or read-only
    /// entry re-walks the page table and finds the PTE gone). A write
    /// after the IO read the page would be lost when the clean folio is
    /// freed.
    pub fn check_pageout(&mut self, t: Ns, pfn: Pfn) {
        if self.check.stale.is_empty() {
            return;
        }
        let Some(recs) = self.check.stale.get(&pfn).cloned() else { return };
        for r in recs.iter().filter(|r| r.writable) {
            if self.tlb_live_entry_wd(r.cpu, r.mm, r.va, pfn, t) {
                self.check.report(format!(
                    "I1w: writeback of frame {pfn} started at {t} ns while cpu {} can still write it through mm {} va {:#x} (W=1 D=1 entry, stale since {} ns): a store after the IO read the page is lost",
                    r.cpu, r.mm, r.va, r.since
                ));
                return;
            }
        }
    }

    /// I3: the contents of a free frame change (init_on_free, poisoning).
    pub fn check_content_change(&mut self, t: Ns, pfn: Pfn, order: u32, why: &str) {
        if !self.check.enabled || self.check.stale.is_empty() {
            return;
        }
        self.report_live_stale(t, pfn, order, |p, r| {
            format!("I3: free frame {p} changed ({why}) at {t} ns while cpu {} still reads it through mm {} va {:#x}", r.cpu, r.mm, r.va)
        });
    }

    /// I6: a load or fetch through a TLB entry whose PTE changed.
    pub fn check_stale_hit(&mut self, cpu: u32, mm: u32, va: u64, e: &TlbEntry, kind: Access) {
        if self.check.stale.is_empty() || kind == Access::Store {
            return;
        }
        let pfn = e.pfn_of(va);
        let pte = self.mms[mm as usize].pt.pte(va);
        if pte.present() && pte.pfn() == pfn {
            return;
        }
        let Some(recs) = self.check.stale.get(&pfn) else { return };
        let Some(r) = recs.iter().find(|r| r.cpu == cpu && r.mm == mm && r.va == va).cloned() else { return };
        // What the program should see at va now.
        let now: Option<(bool, u32, u64)> = if pte.present() && !pte.special() {
            Some(self.page_ident(pte.pfn()))
        } else {
            self.mms[mm as usize].vma_lookup(va).map(|v| {
                if v.file != 0 {
                    (false, v.file, v.pgoff + ((va - v.start) >> 12))
                } else {
                    (true, v.anon_vma, v.pgoff + ((va - v.start) >> 12))
                }
            })
        };
        if now != Some(r.ident) {
            self.check.report(format!(
                "I6a: cpu {cpu} read mm {mm} va {va:#x} through a stale entry to frame {pfn} ({:?}) but the address now stands for {now:?} (new mapping since {} ns)",
                r.ident, r.since
            ));
            return;
        }
        if self.check.data_ver.get(&r.ident).copied().unwrap_or(0) != r.ver {
            self.check.report(format!(
                "I6b: cpu {cpu} read mm {mm} va {va:#x} through a stale entry to frame {pfn}: the data of {:?} changed since {} ns",
                r.ident, r.since
            ));
        }
    }
}
