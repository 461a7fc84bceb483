//! A SLUB object cache (mm/slub.c) reduced to what decides where objects
//! sit, hence which of them share cache lines: objects packed at their
//! size in slabs of 2^order pages (`calculate_order`), each CPU allocating
//! from its own active slab, freed objects reused last-in first-out, slabs
//! with free objects kept on a partial list for the next CPU that runs out.
//! Only addresses are modelled (no costs: allocation and free are inside
//! the callers' constants).
//!
//! Simplification: one freelist per slab. SLUB keeps the active slab's
//! free objects on the CPU (c->freelist) and remote frees on the slab
//! (slab->freelist) until the CPU's list runs dry; here a free goes onto
//! its slab's list at once, so a free on the owning CPU is reused by its
//! next allocation, as in SLUB's fast path.

/// Layout of struct vm_area_struct on x86-64 as the SPF v12 series leaves
/// it (Linux 5.1, CONFIG_NUMA, CONFIG_USERFAULTFD, no lockdep), byte
/// offsets. Base 5.1 (include/linux/mm_types.h): vm_start 0, vm_end 8,
/// vm_next 16, vm_prev 24, vm_rb 32 (rb_node, 24 B), rb_subtree_gap 56,
/// vm_mm 64, vm_page_prot 72, vm_flags 80, shared 88 (32 B),
/// anon_vma_chain 120 (16 B), anon_vma 136, vm_ops 144, vm_pgoff 152,
/// vm_file 160, vm_private_data 168, swap_readahead_info 176, vm_policy 184,
/// vm_userfaultfd_ctx 192: 200 bytes (the vm_area_struct objsize slabinfo
/// shows on 4.x/5.x). The series adds, after vm_prev, `atomic_t
/// vm_ref_count` (patch 20, "introduce vma reference counter") and
/// `struct rcu_head vm_rcu` (patch 21, 16 B, 8-aligned), moving vm_rb and
/// everything after it by 24; and `seqcount_t vm_sequence` at the very end
/// (patch 09). C7 in docs/mechanisms/speculative-page-faults.md#rules-it-implements.
pub mod vma_layout {
    pub const VM_START: u64 = 0;
    /// vm_ref_count: get_vma/put_vma's atomics, on line A with vm_start,
    /// vm_end, the list links and the tree links.
    pub const VM_REF_COUNT: u64 = 32;
    /// vm_rb: the tree node (cleared when erased; vma_has_changed reads it).
    pub const VM_RB: u64 = 56;
    pub const VM_PAGE_PROT: u64 = 96;
    pub const VM_FLAGS: u64 = 104;
    pub const ANON_VMA: u64 = 160;
    pub const VM_OPS: u64 = 168;
    pub const VM_SEQUENCE: u64 = 224;
    /// sizeof(struct vm_area_struct): 228 rounded to 8. KMEM_CACHE(vm_area_struct,
    /// SLAB_PANIC|SLAB_ACCOUNT) (kernel/fork.c) asks for no cache-line
    /// alignment, so objects are packed at this stride.
    pub const SIZE: u64 = 232;
}

/// struct vma_lock of 6.4–6.12 (a separate object from vma_lock_cachep,
/// KMEM_CACHE(vma_lock, SLAB_PANIC|SLAB_ACCOUNT), kernel/fork.c): one
/// struct rw_semaphore on x86-64 with CONFIG_RWSEM_SPIN_ON_OWNER: count 8,
/// owner 8, osq 4, wait_lock 4, wait_list 16 (include/linux/rwsem.h).
/// The count word is at offset 0.
pub const VMA_LOCK_SIZE: u64 = 40;

const PAGE: u64 = 4096;
/// slub_max_order (PAGE_ALLOC_COSTLY_ORDER).
const SLUB_MAX_ORDER: u32 = 3;

#[derive(Clone, Debug, Default)]
struct Slab {
    /// Free object indices, last freed on top.
    free: Vec<u32>,
    /// Objects never handed out: indices fresh..objs.
    fresh: u32,
    /// Some CPU allocates from it.
    active: bool,
    on_partial: bool,
}

/// One kmem_cache.
#[derive(Clone, Debug)]
pub struct KmemCache {
    size: u64,
    objs: u32,
    slab_bytes: u64,
    /// Address of slab 0; slab i is at base + i * slab_bytes.
    base: u64,
    slabs: Vec<Slab>,
    /// Per CPU: index of its active slab (u32::MAX: none).
    cpu_slab: Vec<u32>,
    /// Slabs with free objects that no CPU allocates from.
    partial: Vec<u32>,
}

impl KmemCache {
    /// A cache of `size`-byte objects for a machine of `nr_cpus` CPUs, its
    /// slabs from `base` on.
    pub fn new(size: u64, nr_cpus: u32, base: u64) -> Self {
        let order = calculate_order(size, nr_cpus);
        let slab_bytes = PAGE << order;
        KmemCache {
            size,
            objs: (slab_bytes / size) as u32,
            slab_bytes,
            base,
            slabs: Vec::new(),
            cpu_slab: vec![u32::MAX; nr_cpus as usize],
            partial: Vec::new(),
        }
    }

    pub fn objs_per_slab(&self) -> u32 {
        self.objs
    }

    /// Allocate an object on `cpu` (slab_alloc): from its active slab,
    /// else a partial slab, else a new one. Returns its address.
    pub fn alloc(&mut self, cpu: u32) -> u64 {
        let cpu = cpu as usize % self.cpu_slab.len();
        loop {
            let s = self.cpu_slab[cpu];
            if s != u32::MAX {
                let slab = &mut self.slabs[s as usize];
                let i = match slab.free.pop() {
                    Some(i) => Some(i),
                    None if slab.fresh < self.objs => {
                        slab.fresh += 1;
                        Some(slab.fresh - 1)
                    }
                    None => None,
                };
                if let Some(i) = i {
                    return self.base + s as u64 * self.slab_bytes + i as u64 * self.size;
                }
                // Full: deactivate it; frees put it back on the partial list.
                slab.active = false;
                self.cpu_slab[cpu] = u32::MAX;
            }
            let s = match self.partial.pop() {
                Some(s) => s,
                None => {
                    self.slabs.push(Slab::default());
                    self.slabs.len() as u32 - 1
                }
            };
            let slab = &mut self.slabs[s as usize];
            slab.on_partial = false;
            slab.active = true;
            self.cpu_slab[cpu] = s;
        }
    }

    /// Free the object at `addr` (slab_free).
    pub fn free(&mut self, addr: u64) {
        let off = addr - self.base;
        let s = (off / self.slab_bytes) as usize;
        let i = ((off % self.slab_bytes) / self.size) as u32;
        let slab = &mut self.slabs[s];
        debug_assert!(!slab.free.contains(&i) && i < slab.fresh, "double free of slab object {addr:#x}");
        slab.free.push(i);
        if !slab.active && !slab.on_partial {
            slab.on_partial = true;
            self.partial.push(s as u32);
        }
    }
}

/// calculate_order (mm/slub.c): the smallest order holding at least
/// 4 * (fls(nr_cpus) + 1) objects whose leftover is at most 1/16 of the
/// slab, backing off to 1/8, 1/4 and 1/2.
fn calculate_order(size: u64, nr_cpus: u32) -> u32 {
    let fls = 32 - nr_cpus.max(1).leading_zeros() as u64;
    let max_objects = ((PAGE << SLUB_MAX_ORDER) / size).max(1);
    let min_objects = (4 * (fls + 1)).min(max_objects);
    let min_order = get_order(min_objects * size);
    let mut fraction = 16;
    while fraction > 1 {
        for order in min_order..=SLUB_MAX_ORDER {
            let slab = PAGE << order;
            if slab % size <= slab / fraction {
                return order;
            }
        }
        fraction /= 2;
    }
    SLUB_MAX_ORDER
}

fn get_order(bytes: u64) -> u32 {
    let pages = bytes.div_ceil(PAGE).max(1);
    64 - (pages - 1).leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_match_slub_for_the_vma_caches() {
        // 72 CPUs: min_objects 4 * (7 + 1) = 32; 32 * 232 B needs order 1,
        // 8192 % 232 = 72 <= 512: 35 objects per order-1 slab.
        let c = KmemCache::new(vma_layout::SIZE, 72, 0);
        assert_eq!((c.slab_bytes, c.objs), (8192, 35));
        // vma_lock: 32 * 40 fits order 0, 4096 % 40 = 16: 102 per page.
        let c = KmemCache::new(VMA_LOCK_SIZE, 72, 0);
        assert_eq!((c.slab_bytes, c.objs), (4096, 102));
        // 4 CPUs: 4 * (3 + 1) = 16 objects, 16 * 232 fits one page (17).
        assert_eq!(KmemCache::new(vma_layout::SIZE, 4, 0).objs, 17);
    }

    #[test]
    fn objects_pack_per_cpu_and_freed_ones_are_reused_lifo() {
        let mut c = KmemCache::new(vma_layout::SIZE, 4, 1 << 30);
        let a = c.alloc(0);
        let b = c.alloc(0);
        assert_eq!(b, a + vma_layout::SIZE, "back-to-back allocations on one CPU are neighbours");
        let x = c.alloc(1);
        assert!(x.abs_diff(a) >= c.slab_bytes, "another CPU allocates from its own slab");
        c.free(a);
        c.free(b);
        assert_eq!(c.alloc(0), b, "last freed, first reused");
        assert_eq!(c.alloc(0), a);
        assert_eq!(c.alloc(0), b + vma_layout::SIZE);
        // Exhausting CPU 0's slab moves it to a new one.
        let mut last = 0;
        for _ in 0..c.objs {
            last = c.alloc(0);
        }
        assert!(last >= (1 << 30) + c.slab_bytes * 2);
    }
}
