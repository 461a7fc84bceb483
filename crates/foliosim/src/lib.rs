//! foliosim: a fast, deterministic simulator of the Linux memory-management
//! subsystem. `api` is the front door (the Python binding's); the map of
//! the modules, their layers and the time model is docs/DEVELOPING.md.

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
