//! The free-page-reporting half of virtio-balloon
//! (drivers/virtio/virtio_balloon.c, VIRTIO_BALLOON_F_REPORTING) and the
//! VMM's handler of the reporting virtqueue (QEMU's
//! virtio_balloon_handle_report).
//!
//! Guest side (virtballoon_free_page_report): the scatterlist becomes one
//! request of n device-writable buffers on the reporting virtqueue; the
//! driver kicks the host and sleeps until the buffer comes back. It is
//! synchronous for the reporting worker, but the vCPU is free meanwhile
//! (the worker sleeps in wait_event; the zone lock is not held). The only
//! error is a failed virtqueue_add, which cannot happen on the empty
//! queue the worker uses, so reports always succeed here.
//!
//! Host side: for every buffer, the guest range is discarded with one
//! madvise call (MADV_DONTNEED, or MADV_FREE with the RFC). QEMU skips a
//! request when discards are inhibited (VFIO) or page poisoning uses a
//! non-zero pattern; neither is modelled (no device assignment, no
//! poisoning), which the checker relies on: a reported block is always
//! given back on the host.

use super::Host;
use crate::mm::vmstat::VmStat;
use crate::mm::Pfn;
use crate::sim::Ns;

/// VIRTIO_BALLOON_F_REPORTING feature bit.
pub const VIRTIO_BALLOON_F_REPORTING: u32 = 5;

/// One report() call: the VMM discards each (pfn, order) range in
/// scatterlist order. Returns how long the guest waits for the buffer to
/// come back: the virtqueue round trip plus the host's discard work (the
/// VMM handles the request before returning it).
pub fn free_page_report(host: &mut Host, sg: &[(Pfn, u32)], now: Ns, stat: &mut VmStat) -> Ns {
    let mut t = host.vq_roundtrip();
    for &(pfn, order) in sg {
        t += host.discard_range(pfn, 1 << order, now + t, stat);
    }
    t
}
