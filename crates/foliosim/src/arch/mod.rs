//! Architecture code, as in Linux's arch/: x86 only.

pub mod x86;
