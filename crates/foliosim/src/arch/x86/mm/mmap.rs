//! arch/x86/mm/mmap.c: where a new address space's mmap area starts. With
//! ASLR on (kernel.randomize_va_space), exec puts the mmap base a random
//! number of pages below the stack gap (arch_rnd: vm.mmap_rnd_bits random
//! bits of a page count), so a program's mappings land at other addresses,
//! and with other alignments to page-table boundaries, on every run.

use crate::kernel::Kernel;
use crate::mm::vma::mmap_base;
use crate::types::PAGE_SHIFT;

impl Kernel {
    /// arch_pick_mmap_layout's mmap base for a new exec: random when
    /// kernel.randomize_va_space is on (PF_RANDOMIZE), from the run's seed.
    pub fn arch_pick_mmap_base(&mut self) -> u64 {
        let randomize = self.knobs.randomize_va_space > 0;
        let rnd = if randomize { (self.aslr.next_u64() & ((1u64 << self.knobs.mmap_rnd_bits) - 1)) << PAGE_SHIFT } else { 0 };
        mmap_base(rnd, randomize)
    }
}
