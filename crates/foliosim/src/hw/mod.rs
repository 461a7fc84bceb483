//! The simulated machine: memory nodes, per-CPU TLBs, the cost profile.

pub mod cache;
pub mod mmu;
pub mod profile;
pub mod tlb;
