//! foliosim: a fast, deterministic simulator of the Linux memory-management
//! subsystem. See DESIGN.md in the shared folder for the architecture.

pub mod api;
pub mod arch;
pub mod bench;
pub mod catalog;
pub mod check;
pub mod config;
pub mod hw;
pub mod kernel;
pub mod mm;
pub mod policy;
pub mod run;
pub mod sim;
pub mod types;
pub mod virt;
pub mod workload;
