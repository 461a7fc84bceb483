//! foliosim: a fast, deterministic simulator of the Linux memory-management
//! subsystem. `api` is the front door (the Python binding's), with
//! `config` and `run` for a Rust program that runs a config itself
//! (docs/tutorial.md, "Add a policy in Rust"). The other modules are public
//! for this crate's tests and benchmarks (tests/, benches/), which build
//! kernels and look inside them; they are not an interface. The map of the
//! modules, their layers and the time model is docs/DEVELOPING.md.

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
