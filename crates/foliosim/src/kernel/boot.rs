//! Booting a machine (init/main.c's part of it): the nodes and zones
//! from the profile, the page allocator, the CPUs, the policies looked up
//! in the registry (policy/), the zero page, kswapd and the VM host.
//! Apart from struct Kernel (kernel/mod.rs), so that the registry, whose
//! policies implement traits over the Kernel, is not imported by the file
//! that defines it.

use super::costs::Costs;
use super::knobs::{self, Knobs};
use super::{Cpu, Kernel, Node};
use crate::check::checker::Checker;
use crate::hw::profile::Profile;
use crate::hw::tlb::Tlb;
use crate::mm::mem_map::{pg, MemMap};
use crate::mm::mmzone::LruVec;
use crate::mm::page_alloc::{AllocMutant, AllocParams, MigrateType, PageAlloc, ZoneSpec};
use crate::mm::vmstat::VmStat;
use crate::mm::Pfn;
use crate::sim::lock::{LineCost, SleepCost};
use crate::types::Error;

impl Kernel {
    /// Boot a machine described by `prof` with `knobs`.
    pub fn boot(prof: Profile, knobs: Knobs, check: bool, seed: u64) -> Result<Kernel, Error> {
        let c = Costs::from_profile(&prof);
        let nr_cpus = prof.cpu.nr_cpus;
        // A new simulation on this thread: its lines keep what they see.
        crate::sim::set_frontier(0, crate::sim::Ns::MAX);
        let lc = LineCost {
            local_rmw: c.line_local,
            same_socket: c.line_same,
            cross_socket: c.line_cross,
            read_same_socket: c.line_read_same,
            read_cross_socket: c.line_read_cross,
            cpus_per_socket: (nr_cpus / prof.cpu.sockets).max(1),
            mutant: knobs.mutant.lock_mutant(),
        };
        let sc = SleepCost { spin_limit: c.spin_limit, sleep_wake: c.context_switch };
        // Nodes get consecutive PFN ranges; CPUs are spread over nodes with CPUs.
        let cpu_nodes: Vec<u32> = prof.nodes.iter().enumerate().filter(|(_, n)| n.has_cpus).map(|(i, _)| i as u32).collect();
        let per = (nr_cpus as usize).div_ceil(cpu_nodes.len());
        let cpu_node = |cpu: u32| cpu_nodes[(cpu as usize / per).min(cpu_nodes.len() - 1)];
        let mut zones = Vec::new();
        let mut nodes = Vec::new();
        let mut start: u64 = 0;
        for (i, n) in prof.nodes.iter().enumerate() {
            let pages = n.mem_mib << (20 - 12);
            let local_cpus: Vec<u32> = (0..nr_cpus).filter(|&c| cpu_node(c) == i as u32).collect();
            zones.push(ZoneSpec { nid: i as u32, start_pfn: start as Pfn, nr_pages: pages, local_cpus });
            nodes.push(Node {
                id: i as u32,
                start_pfn: start as Pfn,
                nr_pages: pages,
                lruvec: LruVec::default(),
                zero_4k: c.node_zero_4k[i],
                zero_call: c.node_zero_call[i],
                copy_4k: c.node_copy_4k[i],
                read_4k: c.node_read_4k[i],
                stream_4k: c.node_stream_4k[i],
                bw: crate::sim::bw::BwServer::new(n.shared_bw_gbps),
                link: crate::sim::bw::BwServer::new(prof.cpu.interconnect_bw_gbps),
                home: prof.home_cpu_node(i).map(|h| h as u32),
                kswapd_failures: 0,
                kswapd_run: None,
            });
            start += pages;
        }
        let params = AllocParams {
            nr_cpus,
            min_free_kbytes: knobs.min_free_kbytes,
            watermark_scale_factor: knobs.watermark_scale_factor,
            percpu_pagelist_high_fraction: knobs.percpu_pagelist_high_fraction,
            alloc_pcp_ns: c.alloc_pcp,
            free_pcp_ns: c.free_pcp,
            buddy_op_ns: c.buddy_op,
            line: lc,
            merge_likely_tail: true,
            shuffle: knobs.shuffle,
            shuffle_seed: seed,
            distance: (0..prof.nodes.len()).map(|a| (0..prof.nodes.len()).map(|b| prof.node_distance(a, b)).collect()).collect(),
        };
        let mut pa = PageAlloc::new(zones, params);
        pa.set_track_pcp(check);
        pa.set_mutant(match knobs.mutant {
            knobs::Mutant::BuddySkipNrFreeDec => Some(AllocMutant::SkipNrFreeDec),
            knobs::Mutant::BuddyNoMerge => Some(AllocMutant::NoMerge),
            knobs::Mutant::FprKeepReportedOnAlloc => Some(AllocMutant::KeepReportedOnAlloc),
            knobs::Mutant::Luf(knobs::LufMutant::D1OrderAsUgen) => Some(AllocMutant::LufD1OrderAsUgen),
            knobs::Mutant::Luf(knobs::LufMutant::MergeKeepsOlder) => Some(AllocMutant::LufMergeKeepsOlder),
            knobs::Mutant::Luf(knobs::LufMutant::D2SplitDrops) => Some(AllocMutant::LufD2SplitDrops),
            knobs::Mutant::Luf(knobs::LufMutant::D3RefillDrops) => Some(AllocMutant::LufD3RefillDrops),
            _ => None,
        });
        let cpus = (0..nr_cpus)
            .map(|i| Cpu {
                tlb: Tlb::new(&prof.tlb),
                irq_debt: 0,
                lru_add: Vec::with_capacity(c.lru_batch),
                curr: u32::MAX,
                rq: Default::default(),
                slice_end: 0,
                node: cpu_node(i),
                landing: Vec::new(),
                tlbstate: Default::default(),
                cache: crate::hw::cache::CpuCache::new(),
                busy_until: 0,
            })
            .collect();
        let anon_policy = crate::policy::anon_order(&knobs)?;
        let fault_lock = crate::policy::fault_lock(&knobs)?;
        let promotion = crate::policy::promotion(&knobs)?;
        let knobs_swap_slots = knobs.swap_size_mib << (20 - 12);
        let mut k = Kernel {
            mem_map: MemMap::new(start),
            c,
            lc,
            sc,
            knobs,
            cpus,
            topo: crate::hw::topology::Topology::new(nr_cpus, prof.cpu.sockets, prof.cpu.threads_per_core),
            llc: crate::hw::cache::Llc::new(prof.cpu.sockets, (nr_cpus / prof.cpu.sockets).max(1), prof.cpu.l2_kib, prof.cpu.llc_kib),
            nodes,
            pa,
            mms: Vec::new(),
            tasks: Vec::new(),
            inodes: Vec::new(),
            stat: VmStat::default(),
            check: Checker::new(check),
            zero_pfn: 0,
            next_anon_vma: 1,
            fault_kernel_mode: false,
            fault_trace: Vec::new(),
            fault_trace_ctx: (0, 0, 0),
            wakeups: Vec::new(),
            live_tasks: Vec::new(),
            live_seen: 0,
            scratch_dead: Vec::new(),
            host: None,
            prdev: None,
            anon_order0_only: anon_policy.order0_only(),
            anon_paths: anon_policy.paths(),
            anon_policy,
            fault_lock,
            promotion,
            split_queues: Vec::new(),
            mthp: Default::default(),
            tier: crate::mm::memory_tiers::TierState::new(&prof),
            luf: Default::default(),
            swap: crate::mm::swapfile::SwapInfo::new(knobs_swap_slots),
            irqs_off: false,
            trace: Default::default(),
            aslr: crate::sim::rng::Rng::stream(seed, "aslr"),
            prof,
        };
        k.split_queues = (0..k.nodes.len()).map(|_| Default::default()).collect();
        k.pa.init_vmstat(&mut k.stat);
        // The shared zero page: allocated once, never freed, never refcounted by mappings.
        let zp =
            k.pa.alloc_pages(0, 0, 0, 0, MigrateType::Unmovable, &mut k.stat)
                .ok_or_else(|| Error::OutOfMemory("no memory for the zero page".into()))?;
        k.zero_pfn = zp.pfn;
        // kswapd reclaims ahead of allocations where it has something to
        // do beyond the page cache: demotion, tiering, swap.
        if k.knobs.demotion_enabled
            || k.knobs.numa_balancing & crate::mm::memory_tiers::NUMA_BALANCING_MEMORY_TIERING != 0
            || k.swap.nr_slots > 0
        {
            k.spawn_kswapds();
        }
        let p = k.mem_map.get_mut(zp.pfn);
        p.flags = pg::ZERO_PAGE | pg::ALLOCATED | pg::HEAD;
        p.refcount = 1;
        p.nid = zp.nid as u8;
        k.boot_virt();
        Ok(k)
    }

    /// The machine as a VM guest: the virtio-balloon device with free page
    /// reporting. The host under it (virt/kvm.rs) is lent to the kernel
    /// by the driver of the guests (virt/guests.rs).
    fn boot_virt(&mut self) {
        if self.knobs.page_reporting {
            self.page_reporting_register(0);
        }
    }
}
