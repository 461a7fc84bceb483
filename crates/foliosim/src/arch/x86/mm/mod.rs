//! arch/x86/mm/.

pub mod fault;
pub mod mmap;
pub mod tlb;
