//! The hypervisor under a guest: KVM + a QEMU-like VMM backing the guest's
//! physical memory with host pages, and the virtio-balloon device through
//! which the guest reports free pages (virtio_balloon.rs).
//!
//! The simulated kernel is the guest; what is under it is `Host`: a host
//! kernel (kvm.rs: a foliosim kernel with one VMM process per guest, the
//! EPT as its secondary MMU, the `[host]` table of a config, or the
//! default one when a guest needs a host and has none). The guest kernel
//! calls the host only through `Host`.

pub mod discard;
pub mod guests;
pub mod kvm;
pub mod virtio_balloon;

use crate::mm::vmstat::VmStat;
use crate::mm::Pfn;
use crate::sim::Ns;
use std::any::Any;

/// What a guest kernel asks of a host kernel under it (virt/kvm.rs
/// implements it; a trait so that this layer, below the kernel, names no
/// kernel). Frames are the current guest's (the one the host is lent to).
pub trait HostKernel {
    /// The guest's vCPU `cpu` touches [pfn, pfn + n) at `t`: EPT
    /// violations for the frames without an SPTE. Returns when the vCPU
    /// is back in the guest, or why the host could not back a frame.
    fn touch(&mut self, cpu: u32, pfn: Pfn, n: u64, t: Ns, stat: &mut VmStat) -> Result<Ns, String>;
    /// Whether a guest use of [pfn, pfn + n) costs the host nothing now.
    fn range_ready(&self, pfn: Pfn, n: u64) -> bool;
    /// Whether the host keeps the guest's contents of `pfn`.
    fn holds(&self, pfn: Pfn) -> bool;
    /// Whether the host holds nothing of [pfn, pfn + n) it must keep.
    fn range_given_back(&self, pfn: Pfn, n: u64) -> bool;
    /// The host part of a two-dimensional walk ending at `pfn`.
    fn walk(&mut self, pfn: Pfn) -> Ns;
    /// Whether the host maps frame `pfn` with a 4 KiB SPTE (a guest TLB
    /// entry for it is 4 KiB, whatever the guest's mapping).
    fn maps_4k(&self, pfn: Pfn) -> bool;
    /// Publish the guest's `foliosim_host_*` gauges.
    fn sync_gauges(&self, stat: &mut VmStat);
    /// The virtqueue round trip of one report.
    fn vq_roundtrip(&self) -> Ns;
    /// The VMM discards the reported range [pfn, pfn + n) at `t`. Returns
    /// the host time it takes.
    fn discard_range(&mut self, pfn: Pfn, n: u64, t: Ns, stat: &mut VmStat) -> Ns;
    /// A virtio-blk read of block `block` (4 KiB) of the guest's disk into
    /// its frame `pfn`, asked by vCPU `cpu` at `t`: the VMM reads its disk
    /// image through the host's page cache. Returns when the guest has the
    /// data in `pfn`, or why the host could not read it.
    fn blk_read(&mut self, cpu: u32, pfn: Pfn, block: u64, t: Ns, stat: &mut VmStat) -> Result<Ns, String>;
    /// A remote flush owed to the guest's vCPUs, taken, and what each
    /// vCPU pays for it.
    fn take_flush(&mut self) -> Option<Ns>;
    /// Whether the host kernel woke one of its threads (kswapd) that its
    /// run queue has not taken yet.
    fn woke(&self) -> bool;
    /// Guests on this host.
    fn nr_guests(&self) -> usize;
    /// Guest `g`'s pages on the host: (RSS, swapped out).
    fn guest_pages(&self, g: usize) -> (u64, u64);
    /// Remember why the host could not back a frame (the driver stops).
    fn fail(&mut self, why: String);
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// What backs a guest's memory: the host kernel, lent to the guest whose
/// vCPU runs. Its own methods are the guest's two uses with logic of their
/// own (a first touch, a TLB miss's walk); the rest is the trait's.
pub struct Host(pub Box<dyn HostKernel>);

impl std::ops::Deref for Host {
    type Target = dyn HostKernel;
    fn deref(&self) -> &(dyn HostKernel + 'static) {
        &*self.0
    }
}

impl std::ops::DerefMut for Host {
    fn deref_mut(&mut self) -> &mut (dyn HostKernel + 'static) {
        &mut *self.0
    }
}

impl Host {
    /// The guest's vCPU `cpu` writes its frames [pfn, pfn + n) at `t` for
    /// the first time since it allocated them. Returns the time the vCPU
    /// spends in the host.
    pub fn touch(&mut self, cpu: u32, pfn: Pfn, n: u64, t: Ns, stat: &mut VmStat) -> Ns {
        let h = &mut self.0;
        if h.range_ready(pfn, n) {
            return 0;
        }
        match h.touch(cpu, pfn, n, t, stat) {
            Ok(end) => end - t,
            Err(e) => {
                h.fail(e);
                0
            }
        }
    }

    /// vCPU `cpu` reads block `block` of the guest's disk into frame `pfn`
    /// at `t` (the trait's `blk_read`). Returns when the data is there; a
    /// read the host could not make stops the run, as a touch's does.
    pub fn blk_read(&mut self, cpu: u32, pfn: Pfn, block: u64, t: Ns, stat: &mut VmStat) -> Ns {
        let h = &mut self.0;
        match h.blk_read(cpu, pfn, block, t, stat) {
            Ok(end) => end,
            Err(e) => {
                h.fail(e);
                t
            }
        }
    }

    /// The host's part of a guest TLB miss on vCPU `cpu` at `t` whose walk
    /// ended at frame `pfn`: the host half of the two-dimensional walk, and
    /// an EPT violation if the host dropped the frame's SPTE.
    pub fn walk(&mut self, cpu: u32, pfn: Pfn, t: Ns, stat: &mut VmStat) -> Ns {
        let fault = self.touch(cpu, pfn, 1, t, stat);
        fault + self.0.walk(pfn)
    }
}
