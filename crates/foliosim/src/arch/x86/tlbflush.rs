//! x86 cpu_tlbstate's ASID part (arch/x86/include/asm/tlbflush.h) and the
//! PCID slot choice of arch/x86/mm/tlb.c (choose_new_asid), as state that
//! owns its data: the kernel's side of switch_mm_irqs_off, which counts,
//! flushes and tells the checker, is in arch/x86/mm/tlb.rs.
//!
//! A CPU has TLB_NR_DYN_ASIDS hardware ASID slots. Each remembers which mm
//! (ctx_id) last used it. Switching to an mm reuses its slot if the CPU
//! still has one; otherwise the next slot round-robin (`next_asid`) is taken
//! from whoever held it and loaded with a flush, because the hardware entries
//! tagged with that ASID belong to the previous owner.
//!
//! The TLB model tags entries with the mm id, not the slot, so the hot
//! lookup path is unchanged. The two are equivalent as long as a slot's
//! entries are exactly its owner's: taking a slot drops the old owner's
//! entries on that CPU (the flush on reassignment). An exited mm's entries
//! stay in the TLB, as they stay in its dead PCID on x86, until the slot is
//! taken; they are unreachable meanwhile (no CPU loads that mm again), which
//! `tlb_live_entry_w` reflects. The mutant `asid_no_flush_on_reuse` skips
//! the flush: the old owner's entries are re-tagged to the new mm, which is
//! what sharing a hardware ASID means, and the checker's stale records
//! follow them.
//!
//! The per-slot tlb_gen of cpu_tlbstate.ctxs is `Mm::cpu_tlb_gen` here: a
//! flush IPI brings every mm of a target up to date at once (mm/tlb.rs),
//! which drops the same entries the lazy catch-up at the next switch would.

/// TLB_NR_DYN_ASIDS (arch/x86/include/asm/tlbflush.h).
pub const TLB_NR_DYN_ASIDS: usize = 6;

/// The ASID part of one CPU's cpu_tlbstate.
#[derive(Clone, Debug)]
pub struct TlbState {
    /// The mm whose ASID is loaded (u32::MAX: none yet, init_mm).
    pub loaded_mm: u32,
    /// ctxs[asid]: owner mm id + 1 (0: never used by a user mm).
    pub ctxs: [u32; TLB_NR_DYN_ASIDS],
    /// The next slot to hand out; 1 at boot, as slot 0 is the boot context's.
    pub next_asid: u8,
}

impl Default for TlbState {
    fn default() -> Self {
        TlbState { loaded_mm: u32::MAX, ctxs: [0; TLB_NR_DYN_ASIDS], next_asid: 1 }
    }
}

impl TlbState {
    /// choose_new_asid: the slot `mm` owns here, or the next one round-robin.
    /// Returns (slot, whether it had to be taken).
    pub fn choose_new_asid(&mut self, mm: u32) -> (usize, bool) {
        if let Some(i) = self.ctxs.iter().position(|&c| c == mm + 1) {
            return (i, false);
        }
        let mut a = self.next_asid as usize;
        self.next_asid += 1;
        if a >= TLB_NR_DYN_ASIDS {
            a = 0;
            self.next_asid = 1;
        }
        (a, true)
    }

    /// The slot `mm` owns on this CPU, if any.
    pub fn asid_of(&self, mm: u32) -> Option<usize> {
        self.ctxs.iter().position(|&c| c == mm + 1)
    }

    /// switch_mm_irqs_off's part in cpu_tlbstate: load `mm`, in the slot it
    /// owns here or in one taken round-robin. Returns the mm that owned the
    /// taken slot, whose entries the new owner must not see (None: the mm
    /// kept its slot, or the slot was never used by a user mm).
    #[inline]
    pub fn switch_mm(&mut self, mm: u32) -> Option<u32> {
        self.loaded_mm = mm;
        let (slot, taken) = self.choose_new_asid(mm);
        if !taken {
            return None;
        }
        std::mem::replace(&mut self.ctxs[slot], mm + 1).checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_robin_from_one() {
        let mut s = TlbState::default();
        let got: Vec<(usize, bool)> = (0..7).map(|mm| s.choose_new_asid(mm)).collect();
        assert_eq!(got, vec![(1, true), (2, true), (3, true), (4, true), (5, true), (0, true), (1, true)]);
    }

    #[test]
    fn own_slot_is_kept() {
        let mut s = TlbState::default();
        let (a, _) = s.choose_new_asid(7);
        s.ctxs[a] = 8;
        assert_eq!(s.choose_new_asid(7), (a, false));
        assert_eq!(s.asid_of(7), Some(a));
        assert_eq!(s.asid_of(3), None);
    }
}
