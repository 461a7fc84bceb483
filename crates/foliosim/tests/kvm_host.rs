//! The host as a foliosim kernel (virt/kvm.rs): a guest frame's first
//! touch is a host fault in its VMM's mapping, the host's THP policy
//! choosing the folio and the EPT entry's size; a report is the VMM's
//! madvise, whose zap or MADV_FREE drops the EPT entries through the mmu
//! notifier.

use foliosim::config;
use foliosim::mm::vmstat::{Stat, VmStat};
use foliosim::virt::kvm::{run, GuestShape, KvmHost};
use foliosim::workload::{prot, Access, Op};

/// 16 MiB of guest RAM: 4096 frames.
const FRAMES: u64 = 4096;

/// A host of two nodes (256 and 64 MiB) with `knobs` (TOML lines) and one guest.
fn host(knobs: &str) -> KvmHost {
    host_vcpus(knobs, 1)
}

/// `host`, the guest having `nr_vcpus` vCPUs (vCPU c on host CPU c).
fn host_vcpus(knobs: &str, nr_vcpus: u32) -> KvmHost {
    let text = format!(
        "[machine]\nprofile = \"generic-x86\"\nnr_cpus = 4\nnode_mem_mib = [256, 64]\n[workload]\nname = \"mmap1\"\n[run]\ncheck = true\n[knobs]\n{knobs}\n"
    );
    let c = config::from_toml(&text, "kvm-host-test").unwrap_or_else(|e| panic!("{e}"));
    let discard = foliosim::policy::host_discard(&c.knobs).unwrap();
    let shape = GuestShape { nr_frames: FRAMES, nr_vcpus, image: 0 };
    KvmHost::boot(c.profile.clone(), c.knobs, 1, &[shape], discard, &c.profile, false, true).unwrap()
}

fn pgfault(h: &KvmHost) -> i64 {
    h.k.stat().get(foliosim::mm::vmstat::Stat::Pgfault)
}

/// The host kernel's full audit (the EPT's entries against the VMM's PTEs among it).
fn audit(h: &mut KvmHost) -> Vec<String> {
    foliosim::check::audit(&mut h.k);
    h.k.check().violations.clone()
}

#[test]
fn a_first_touch_is_a_host_fault_and_a_4k_ept_entry() {
    let mut h = host("");
    let t = h.touch(0, 5, 1, 1000, &mut VmStat::default()).unwrap();
    assert!(t > 1000, "the vCPU waited for the host");
    assert!(h.ept_present(0, 5) && !h.ept_large(0, 5) && !h.ept_present(0, 6));
    assert_eq!((h.rss(0), pgfault(&h)), (1, 1), "one host page, one host fault");
    // Mapped now: no exit, no host work.
    assert_eq!(h.touch(0, 5, 1, t, &mut VmStat::default()).unwrap(), t);
    assert_eq!(pgfault(&h), 1);
    assert!(audit(&mut h).is_empty());
}

#[test]
fn host_thp_backs_the_block_and_the_ept_maps_it_with_one_entry() {
    let mut h = host("\"kernel/mm/transparent_hugepage/enabled\" = \"always\"");
    let t = h.touch(0, 5, 1, 0, &mut VmStat::default()).unwrap();
    assert_eq!(h.rss(0), 512, "the host's THP policy chose a 2 MiB folio");
    assert!(h.ept_large(0, 5) && h.ept_present(0, 0) && h.ept_present(0, 511) && !h.ept_present(0, 512));
    // The rest of the block is mapped: no exit.
    assert_eq!(h.touch(0, 0, 512, t, &mut VmStat::default()).unwrap(), t);
    assert!(audit(&mut h).is_empty());
}

#[test]
fn a_dontneed_report_frees_the_host_pages_and_zaps_the_ept() {
    let mut h = host("\"host.discard\" = \"dontneed\"");
    let t = h.touch(0, 0, 512, 0, &mut VmStat::default()).unwrap();
    assert_eq!(h.rss(0), 512);
    let t = t + h.discard_range(0, 256, t, &mut VmStat::default());
    assert_eq!(h.rss(0), 256, "MADV_DONTNEED freed the reported half");
    assert!(!h.ept_present(0, 0) && !h.ept_present(0, 255) && h.ept_present(0, 256));
    assert!(audit(&mut h).is_empty());
    // The guest uses the frame again: a new host fault.
    let faults = pgfault(&h);
    h.touch(0, 0, 1, t, &mut VmStat::default()).unwrap();
    assert_eq!((h.rss(0), pgfault(&h)), (257, faults + 1));
}

#[test]
fn a_free_report_keeps_the_pages_until_host_reclaim_and_a_rewrite_keeps_its_page() {
    let mut h = host("\"host.discard\" = \"free\"");
    let t = h.touch(0, 0, 512, 0, &mut VmStat::default()).unwrap();
    let t = t + h.discard_range(0, 512, t, &mut VmStat::default());
    assert_eq!(h.rss(0), 512, "MADV_FREE leaves the pages mapped");
    assert!(!h.ept_present(0, 7), "but the EPT entries are gone");
    // The guest writes frame 7 again: the host PTE is still there, so no
    // host fault, only the EPT refault; KVM marks the page dirty.
    let faults = pgfault(&h);
    let t = h.touch(0, 7, 1, t, &mut VmStat::default()).unwrap();
    assert_eq!(pgfault(&h), faults);
    assert!(h.ept_present(0, 7));
    // Host reclaim takes the clean lazily freed pages, not the written one.
    let vmm = h.vms[0].vmm;
    let cpu = h.k.tasks()[vmm as usize].cpu;
    let t = h.k.lru_add_drain_cpu(t, cpu);
    h.k.try_to_free_pages(t, cpu, 1024);
    assert!(h.k.stat().get(foliosim::mm::vmstat::Stat::Pglazyfreed) > 0);
    let base = h.vms[0].base;
    let mm = h.vms[0].mm as usize;
    assert!(h.k.mms()[mm].pt().pte(base + (7 << 12)).present(), "the frame the guest wrote is kept");
    assert!(h.ept_present(0, 7));
    assert!(audit(&mut h).is_empty());
}

#[test]
fn a_host_reclaim_that_ignores_the_guest_write_loses_it() {
    let mut h = host("\"host.discard\" = \"free\"\n\"debug.mutant\" = \"lazyfree_discard_redirtied\"");
    let t = h.touch(0, 0, 512, 0, &mut VmStat::default()).unwrap();
    let t = t + h.discard_range(0, 512, t, &mut VmStat::default());
    let t = h.touch(0, 7, 1, t, &mut VmStat::default()).unwrap();
    let vmm = h.vms[0].vmm;
    let cpu = h.k.tasks()[vmm as usize].cpu;
    let t = h.k.lru_add_drain_cpu(t, cpu);
    h.k.try_to_free_pages(t, cpu, 1024);
    let (base, mm) = (h.vms[0].base, h.vms[0].mm as usize);
    assert!(!h.k.mms()[mm].pt().pte(base + (7 << 12)).present(), "the mutant drops the page the guest wrote");
}

/// LUF across the host's migrations of guest memory: the VMM
/// write-protects the first 64 frames of the guest's RAM and reads them
/// through its own TLB on host CPU 0 (what QEMU's background snapshot
/// does: userfaultfd write-protection, then a copy of every page), the
/// host migrates those pages to its other node on CPU 1, where LUF defers
/// the shootdown of the read-only mappings, and vCPU 1's EPT violations
/// on CPU 1 take the frames the migration freed there: the allocator must
/// flush CPU 0's entries before it hands them out (the host's checker,
/// check/luf.rs, holds it).
fn migrate_read_only_guest_ram(knobs: &str) -> KvmHost {
    const N: u64 = 64;
    let mut h = host_vcpus(&format!("\"luf.enabled\" = true\n{knobs}"), 2);
    let t = h.touch(0, 0, N, 0, &mut VmStat::default()).unwrap();
    let (vmm, base, mm) = (h.vms[0].vmm, h.vms[0].base, h.vms[0].mm as usize);
    let (_, t) = run(&mut h.k, vmm, t, Op::Mprotect { addr: base, len: N << 12, prot: prot::READ });
    let (_, t) = run(&mut h.k, vmm, t, Op::AccessRange { addr: base, stride: 4096, count: N, kind: Access::Load });
    let pfns: Vec<_> = (0..N).map(|f| h.k.mms()[mm].pt().pte(base + (f << 12)).pfn()).collect();
    let cpu = h.k.tasks()[h.vms[0].vcpus[1] as usize].cpu;
    assert_ne!(cpu, h.k.tasks()[vmm as usize].cpu);
    let (moved, t) = h.k.move_pages_to_node(t, cpu, &pfns, 1);
    assert_eq!(moved, N, "the host migrated the guest's pages");
    assert!(h.k.stat().get(Stat::LufDeferred) > 0, "LUF deferred the flush of the read-only mappings");
    assert!((0..N as u32).all(|f| !h.ept_present(0, f)), "the migration zapped the SPTEs");
    let pending = h.k.stat().get(Stat::LufAllocPending);
    h.touch(1, N as u32, N, t, &mut VmStat::default()).unwrap();
    assert!(h.k.stat().get(Stat::LufAllocPending) > pending, "vCPU 1's host faults met the pages the migration freed");
    h
}

#[test]
fn luf_flushes_before_a_host_migration_s_frames_back_a_guest() {
    let mut h = migrate_read_only_guest_ram("");
    assert!(h.k.stat().get(Stat::LufFlush) > 0, "the allocator flushed the deferred entries");
    assert!(audit(&mut h).is_empty(), "{:?}", h.k.check().violations);
}

#[test]
fn a_host_allocator_that_skips_luf_s_flush_is_caught() {
    let h = migrate_read_only_guest_ram("\"debug.mutant\" = \"luf_skip_alloc_flush\"");
    let v = &h.k.check().violations;
    assert!(v.iter().any(|m| m.starts_with("I4")), "{v:?}");
}

#[test]
fn a_guest_disk_read_goes_through_the_hosts_page_cache() {
    let mut h = host("");
    let (img, mut st) = (h.vms[0].image, VmStat::default());
    let c = config::from_toml("[machine]\nprofile = \"generic-x86\"\n[workload]\nname = \"mmap1\"\n", "-").unwrap();
    let device = c.profile.cost.disk_read_ns as u64;
    // A block no guest read: the VMM's preadv reads it from the device
    // into the host's page cache and copies it into the guest's frame,
    // which the host backs; the guest then maps it.
    let t1 = h.blk_read(0, 7, 42, 1000, &mut st).unwrap();
    assert!(t1 - 1000 > device, "the guest waited for the device: {} ns", t1 - 1000);
    assert_eq!((h.vms[0].blk_reads, h.vms[0].blk_read_misses), (1, 1));
    assert_eq!((h.k.stat().get(Stat::Pgmajfault), h.k.stat().get(Stat::NrFilePages)), (1, 1));
    assert!(h.k.inodes()[img as usize].pages.get(&42).is_some(), "the block is in the host's page cache");
    assert!(h.ept_present(0, 7) && h.rss(0) == 1, "the frame is backed and mapped");
    // The same block into another frame: from the host's page cache.
    let t2 = h.blk_read(0, 8, 42, t1, &mut st).unwrap();
    assert_eq!((h.vms[0].blk_reads, h.vms[0].blk_read_misses, h.k.stat().get(Stat::Pgmajfault)), (2, 1, 1));
    assert!(
        (t1 - 1000).saturating_sub(t2 - t1) >= device * 9 / 10,
        "a cached block costs no device read: {} ns against {} ns",
        t2 - t1,
        t1 - 1000
    );
    // Another block: the device again.
    h.blk_read(0, 9, 43, t2, &mut st).unwrap();
    assert_eq!((h.vms[0].blk_read_misses, h.k.stat().get(Stat::NrFilePages)), (2, 2));
    assert!(audit(&mut h).is_empty(), "{:?}", h.k.check().violations);
}

/// One guest on a host of DRAM and CXL (cxl-1tb scaled: 256 MiB each) in
/// tiering mode, page-cache promotion on or off.
fn tiered_host(promo: bool) -> KvmHost {
    let text = format!(
        "[machine]\nprofile = \"cxl-1tb\"\nnode_mem_mib = [256, 256]\n[workload]\nname = \"mmap1\"\n[run]\ncheck = true\n\
         [knobs]\n\"kernel.numa_balancing\" = 2\n\"kernel/mm/numa/pagecache_promotion_enabled\" = {promo}\n"
    );
    let c = config::from_toml(&text, "kvm-host-test").unwrap_or_else(|e| panic!("{e}"));
    let discard = foliosim::policy::host_discard(&c.knobs).unwrap();
    let shape = GuestShape { nr_frames: FRAMES, nr_vcpus: 1, image: 0 };
    KvmHost::boot(c.profile.clone(), c.knobs, 1, &[shape], discard, &c.profile, false, true).unwrap()
}

#[test]
fn an_image_block_guests_keep_reading_from_cxl_is_promoted_to_the_vmm_s_node() {
    for promo in [true, false] {
        let mut h = tiered_host(promo);
        let img = h.vms[0].image;
        // The block is in the host's page cache on the CXL node, where
        // demotion leaves a cold one.
        h.k.filemap_get_folio_nid(0, 0, img, 42, 1).unwrap();
        h.k.lru_add_drain_cpu(0, 0);
        let node = |h: &KvmHost| {
            let pfn = *h.k.inodes()[img as usize].pages.get(&42).unwrap();
            h.k.mem_map().get(pfn).nid
        };
        assert_eq!(node(&h), 1);
        // Guests read it again and again (each read one more clone of the
        // image, or one guest whose own cache dropped it).
        let (mut t, mut st) = (1_000_000, VmStat::default());
        for f in 0..16 {
            t = h.blk_read(0, f, 42, t, &mut st).unwrap() + 10_000_000;
        }
        assert_eq!(h.vms[0].blk_read_misses, 0);
        if promo {
            assert_eq!(node(&h), 0, "promoted to the VMM's node");
            assert_eq!((h.vms[0].blk_promoted, h.k.stat().get(Stat::PgpromoteSuccess)), (1, 1));
        } else {
            assert_eq!((node(&h), h.vms[0].blk_promoted), (1, 0), "left on CXL without page-cache promotion");
        }
        assert!(audit(&mut h).is_empty(), "{:?}", h.k.check().violations);
    }
}
