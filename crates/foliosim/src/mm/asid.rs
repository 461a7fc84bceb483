//! The x86 ASID code moved to arch/x86/ (tlbflush.rs: the per-CPU state,
//! mm/tlb.rs: switch_mm_irqs_off); these names stay here for old imports.

pub use crate::arch::x86::tlbflush::{TlbState, TLB_NR_DYN_ASIDS};
