//! foliosim: a fast, deterministic simulator of the Linux memory-management
//! subsystem. See DESIGN.md in the shared folder for the architecture.

pub mod api;
pub mod hw;
pub mod mm;
pub mod sim;
pub mod workload;
