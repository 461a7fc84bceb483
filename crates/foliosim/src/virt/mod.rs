//! The hypervisor under a guest: KVM + a QEMU-like VMM backing the guest's
//! physical memory with host pages (host.rs), and the virtio-balloon device
//! through which the guest reports free pages (virtio_balloon.rs).
//!
//! The simulated kernel is the guest. The host is modelled only as far as
//! the guest can feel it: which guest-physical frames have host memory
//! behind them, what a guest write to a frame without it costs (EPT
//! violation, host fault, zeroing, or a swap-in), and what dropping a
//! reported range costs the host.

pub mod guests;
pub mod host;
pub mod kvm;
pub mod virtio_balloon;

pub use host::{Host, HostCosts};
