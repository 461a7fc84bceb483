//! x86-64 (arch/x86/).

pub mod mm;
pub mod tlbflush;
