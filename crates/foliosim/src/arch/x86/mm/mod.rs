//! arch/x86/mm/.

pub mod tlb;
