//! arch/x86/mm/.

pub mod fault;
pub mod tlb;
