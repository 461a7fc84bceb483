//! The simulated machine: memory nodes, per-CPU TLBs, the cost profile.

pub mod cache;
pub mod derive;
pub mod mmu;
pub mod profile;
pub mod profile_load;
pub mod provenance;
pub mod tlb;
pub mod topology;
