//! The page cache and file I/O (mm/filemap.c, mm/shmem.c in part):
//! lookup, read-in of missing folios, read()/write(), folio_mark_accessed.

use super::mem_map::pg;
use super::page_alloc::MigrateType;
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::types::Error;
use crate::workload::{errno, FsKind, Ret};

/// MAX_RW_COUNT = INT_MAX & PAGE_MASK: the most one read() or write() moves.
pub const MAX_RW_COUNT: u64 = (i32::MAX as u64) & !4095;

/// How a page-cache lookup went.
pub enum CacheHit {
    Hit(Pfn),
    /// Allocated and read in (or zero-filled for a hole).
    Filled(Pfn),
}

impl Kernel {
    /// read()/write() at the file position of `fd`, advancing it
    /// (fs/read_write.c: ksys_read, ksys_write).
    pub fn file_rw(&mut self, t: Ns, cpu: u32, mm: u32, fd: i32, len: u64, write: bool) -> (Ret, Ns) {
        let Some(f) = self.mms[mm as usize].fd(fd).copied() else { return (Ret::Err(errno::EBADF), t) };
        self.stat.inc(if write { Stat::FileWrite } else { Stat::FileRead });
        let t0 = t + self.c.file_op;
        // rw_verify_area: one call moves at most MAX_RW_COUNT.
        let len = len.min(MAX_RW_COUNT);
        // LUF v11: file_end_write flushes every deferral.
        let t0 = if write && self.knobs.luf.v11_hooks && self.luf_hooks_on() {
            self.luf_flush(t0, cpu, self.cpus[cpu as usize].curr, crate::mm::luf::ForcedBy::FileWrite)
        } else {
            t0
        };
        if write && self.check.enabled {
            for i in f.pos >> 12..(f.pos + len).div_ceil(4096) {
                self.check.bump_data((false, f.inode + 1, i));
            }
        }
        let r = if write { self.filemap_write(t0, cpu, f.inode, f.pos, len) } else { self.filemap_read(t0, cpu, f.inode, f.pos, len) };
        match r {
            None => (Ret::Err(errno::ENOMEM), t),
            Some((n, t)) => {
                self.mms[mm as usize].fd(fd).unwrap().pos += n;
                (Ret::Val(n as i64), t)
            }
        }
    }

    /// Find the folio at `index` of inode `ino`, reading it in if missing
    /// (filemap_get_folio + filemap_add_folio + read_folio; shmem allocates
    /// a zeroed folio). Returns (head pfn, done time) or None on OOM.
    pub fn filemap_get_folio(&mut self, t: Ns, cpu: u32, ino: u32, index: u64) -> Option<(CacheHit, Ns)> {
        let nid = self.cpus[cpu as usize].node;
        self.filemap_get_folio_nid(t, cpu, ino, index, nid)
    }

    /// filemap_get_folio allocating a missing folio on `nid` first (the
    /// task's memory policy: local node, or an mbind'ed one).
    pub fn filemap_get_folio_nid(&mut self, t: Ns, cpu: u32, ino: u32, index: u64, nid: u32) -> Option<(CacheHit, Ns)> {
        self.filemap_find_or_fill(t + self.c.pc_lookup, cpu, ino, index, nid, false)
    }

    /// The folio at `index`, read in (or cleared) if missing, without the
    /// lookup's charge: read() and write() charge theirs per folio copied
    /// (pagecache_read_ns, pagecache_write_ns). `overwrite`: a write() is
    /// about to fill the whole folio, so a missing one is neither read
    /// from disk nor cleared (write_begin reads only the blocks a write
    /// covers in part, as block_write_begin does; shmem_write_begin leaves
    /// a new folio for the copy, and write_end zeroes what it missed).
    fn filemap_find_or_fill(&mut self, t: Ns, cpu: u32, ino: u32, index: u64, nid: u32, overwrite: bool) -> Option<(CacheHit, Ns)> {
        if let Some(&pfn) = self.inodes[ino as usize].pages.get(&index) {
            return Some((CacheHit::Hit(pfn), t));
        }
        let (pfn, mut t) = self.alloc_folio(t, cpu, 0, nid, MigrateType::Movable)?;
        let fs = self.inodes[ino as usize].fs;
        let on_disk = index < self.inodes[ino as usize].data_pages;
        let pnid = self.mem_map.get(pfn).nid as usize;
        if overwrite {
            // Nothing to read or clear: the copy that follows fills it.
        } else if fs == FsKind::Disk && on_disk {
            // A guest's disk is its VMM's image file on the host: the read
            // is a virtio-blk request the host serves through its own page
            // cache (virt/kvm.rs `blk_read`).
            t = match self.host.as_mut() {
                Some(h) => h.blk_read(cpu, pfn, super::fs::disk_block(ino, index), t, &mut self.stat),
                None => t + self.c.disk_read,
            };
            self.stat.inc(Stat::Pgmajfault);
            self.stat.add(Stat::Pgpgin, 4);
        } else {
            // A hole, or a new shmem page: cleared.
            t = self.clear_folio(t, cpu, pnid, 0);
        }
        self.check_guest_write(pfn, 0, "filled");
        {
            let p = self.mem_map.get_mut(pfn);
            p.flags |= pg::UPTODATE | if fs == FsKind::Tmpfs { pg::SWAPBACKED | pg::SHMEM } else { 0 };
            p.mapping = ino + 1;
            p.index = index;
        }
        self.inodes[ino as usize].pages.insert(index, pfn);
        self.stat.inc(Stat::NrFilePages);
        if fs == FsKind::Tmpfs {
            self.stat.inc(Stat::NrShmem);
        }
        t += self.c.pc_insert;
        // The cache's own reference is the allocation's initial one.
        let t = self.folio_add_lru(t, cpu, pfn);
        Some((CacheHit::Filled(pfn), t))
    }

    /// folio_mark_accessed, classic (two-list) LRU: the first access sets
    /// PG_referenced; a second one on an inactive folio activates it.
    pub fn folio_mark_accessed(&mut self, t: Ns, cpu: u32, pfn: Pfn) -> Ns {
        let flags = self.mem_map.get(pfn).flags;
        if flags & pg::REFERENCED == 0 {
            self.mem_map.get_mut(pfn).flags |= pg::REFERENCED;
            return t;
        }
        if flags & pg::UNEVICTABLE != 0 {
            return t;
        }
        if flags & pg::ACTIVE != 0 {
            // Referenced and active (RFC v3): a promotion candidate if the
            // folio is not flagged isolated and tiering mode and the sysfs
            // knob are on (the checks inlined into folio_mark_accessed).
            if flags & pg::ISOLATED == 0 && super::memory_tiers::pagecache_promotion_on(&self.knobs) {
                let tid = self.cpus[cpu as usize].curr;
                if tid != u32::MAX {
                    return self.promotion_candidate(t, cpu, tid, pfn);
                }
            }
            return t;
        }
        let mut t = t;
        if flags & pg::LRU != 0 {
            // folio_activate: move to the active list under lru_lock.
            let nid = self.mem_map.get(pfn).nid as usize;
            t = self.lru_lock_folios(t, cpu, nid, 1);
            self.lruvec_del_folio(pfn);
            self.mem_map.get_mut(pfn).flags |= pg::ACTIVE;
            self.lruvec_add_folio(pfn);
            self.stat.add(Stat::Pgactivate, 1 << self.mem_map.get(pfn).order);
        } else {
            // Still in a per-CPU batch: it will be added to the active list.
            self.mem_map.get_mut(pfn).flags |= pg::ACTIVE;
        }
        self.mem_map.get_mut(pfn).flags &= !pg::REFERENCED;
        t
    }

    /// CPU `cpu` copies page-cache page `pfn` (to or from user memory):
    /// whether it is still in the socket's caches (hw/cache.rs `on_copy`);
    /// the copy is the frame's last touch.
    #[inline]
    fn copy_page_cache(&mut self, cpu: u32, pfn: Pfn) -> bool {
        let warm = self.llc.on_copy(cpu, pfn);
        self.mem_map.get_mut(pfn).cached = self.llc.stamp(cpu);
        warm
    }

    /// read(): copy `len` bytes at the file position through the page cache
    /// (filemap_read). Returns (bytes read, done time), None on OOM.
    pub fn filemap_read(&mut self, t: Ns, cpu: u32, ino: u32, pos: u64, len: u64) -> Option<(u64, Ns)> {
        let size = self.inodes[ino as usize].size;
        if pos >= size || len == 0 {
            return Some((0, t));
        }
        let end = (pos + len).min(size);
        let mut t = t;
        let mut idx = pos >> 12;
        // The previous page copied, for the prefetch-stream model.
        let mut prev: Pfn = Pfn::MAX;
        let local = self.cpus[cpu as usize].node;
        while idx << 12 < end {
            let (hit, t1) = self.filemap_find_or_fill(t + self.c.pc_read, cpu, ino, idx, local, false)?;
            let pfn = match hit {
                CacheHit::Hit(p) | CacheHit::Filled(p) => p,
            };
            // folio_get / folio_put around the copy: RMWs on the folio's line.
            let li = (idx as usize) % super::fs::FOLIO_LINES;
            t = self.inodes[ino as usize].lines[li].rmw(t1, cpu, &self.lc);
            t = self.folio_mark_accessed(t, cpu, pfn);
            let chunk = ((idx + 1) << 12).min(end) - (idx << 12).max(pos);
            let nid = self.mem_map.get(pfn).nid as usize;
            if self.copy_page_cache(cpu, pfn) {
                // Copied lately on this socket: from its caches, no memory
                // traffic.
                t += self.c.copy_warm_4k * chunk / 4096;
                prev = pfn;
            } else if self.c.read_stream {
                // copy_to_user streams at the node's read bandwidth (into a
                // buffer the caches hold) while the source pages ascend
                // physically; a jump restarts the hardware prefetcher: one
                // demand miss at the page boundary.
                let jump = prev == Pfn::MAX || pfn != prev.wrapping_add(1);
                t += if jump { self.c.node_latency[nid] } else { 0 };
                t = self.mem_traffic(t, cpu, nid, chunk, self.nodes[nid].stream_4k * chunk / 4096);
                prev = pfn;
            } else {
                t = self.mem_traffic(t, cpu, nid, chunk, self.nodes[nid].read_4k * chunk / 4096);
            }
            t = self.inodes[ino as usize].lines[li].rmw(t, cpu, &self.lc);
            idx += 1;
        }
        Some((end - pos, t))
    }

    /// write(): copy into the page cache, extending the file; pages become
    /// dirty (no writeback is modelled: dirty pages stay until truncation).
    pub fn filemap_write(&mut self, t: Ns, cpu: u32, ino: u32, pos: u64, len: u64) -> Option<(u64, Ns)> {
        let end = pos + len;
        let mut t = t;
        let mut idx = pos >> 12;
        let local = self.cpus[cpu as usize].node;
        while idx << 12 < end {
            let whole = idx << 12 >= pos && (idx + 1) << 12 <= end;
            let (hit, t1) = self.filemap_find_or_fill(t + self.c.pc_write, cpu, ino, idx, local, whole)?;
            let pfn = match hit {
                CacheHit::Hit(p) | CacheHit::Filled(p) => p,
            };
            t = t1;
            let nid = self.mem_map.get(pfn).nid as usize;
            let chunk = ((idx + 1) << 12).min(end) - (idx << 12).max(pos);
            if self.copy_page_cache(cpu, pfn) {
                t += self.c.copy_warm_4k * chunk / 4096;
            } else {
                t = self.mem_traffic(t, cpu, nid, chunk, self.nodes[nid].copy_4k * chunk / 4096);
            }
            // write_end dirties the folio; the access mark sees it dirty
            // (so page-cache promotion refuses a folio being written).
            self.folio_mark_dirty(pfn);
            t = self.folio_mark_accessed(t, cpu, pfn);
            idx += 1;
        }
        let inode = &mut self.inodes[ino as usize];
        inode.size = inode.size.max(end);
        inode.data_pages = inode.data_pages.max(end.div_ceil(4096));
        Some((len, t))
    }

    pub fn folio_mark_dirty(&mut self, pfn: Pfn) {
        let p = self.mem_map.get_mut(pfn);
        if p.flags & pg::DIRTY == 0 {
            p.flags |= pg::DIRTY;
            // nr_dirty counts the page cache's; an anonymous folio's flag
            // is set without accounting (it has no mapping to account to).
            if p.flags & pg::ANON == 0 {
                self.stat.inc(Stat::NrDirty);
            }
        }
    }

    /// Populate a file's cache at setup time, as if written with zeroes
    /// long before the measurement (no simulated time is charged).
    pub fn populate_file(&mut self, ino: u32) -> Result<(), Error> {
        let nid = self.cpus[0].node;
        self.populate_file_on(ino, nid)
    }

    /// populate_file with the folios allocated on node `nid` first (as
    /// after mbind to that node), falling back along its zonelist.
    pub fn populate_file_on(&mut self, ino: u32, nid: u32) -> Result<(), Error> {
        let pages = self.inodes[ino as usize].size.div_ceil(4096);
        self.inodes[ino as usize].data_pages = pages;
        // The cache was there before the run (written, or read by an
        // earlier one): its filling is no major fault and no page-in.
        let (majflt, pgpgin) = (self.stat.get(Stat::Pgmajfault), self.stat.get(Stat::Pgpgin));
        for idx in 0..pages {
            if self.filemap_get_folio_nid(0, 0, ino, idx, nid).is_none() {
                return Err(Error::OutOfMemory("the machine has no memory for the file's page cache".into()));
            }
        }
        self.stat.add(Stat::Pgmajfault, majflt - self.stat.get(Stat::Pgmajfault));
        self.stat.add(Stat::Pgpgin, pgpgin - self.stat.get(Stat::Pgpgin));
        self.lru_add_drain_cpu(0, 0);
        Ok(())
    }

    /// Leave a populated file's folios as several earlier read() passes
    /// would: referenced and active, on the active file list (setup only).
    pub fn mark_file_hot(&mut self, ino: u32) {
        let folios: Vec<Pfn> = self.inodes[ino as usize].pages.values().copied().collect();
        for pfn in folios {
            if self.mem_map.get(pfn).flags & pg::LRU == 0 {
                continue;
            }
            self.lruvec_del_folio(pfn);
            self.mem_map.get_mut(pfn).flags |= pg::ACTIVE | pg::REFERENCED;
            self.lruvec_add_folio(pfn);
        }
    }

    /// Drop the page cache beyond `new_size` (truncate_inode_pages_range):
    /// unmapped folios are freed; mapped ones stay until unmapped.
    pub fn truncate_pagecache(&mut self, t: Ns, cpu: u32, ino: u32, new_size: u64) -> Ns {
        let first = new_size.div_ceil(4096);
        let mut victims: Vec<(u64, Pfn)> = self.inodes[ino as usize].pages.iter().filter(|&(i, _)| i >= first).collect();
        victims.sort_unstable();
        let mut put = Vec::with_capacity(victims.len());
        for (i, pfn) in victims {
            self.inodes[ino as usize].pages.remove(&i);
            self.page_cache_delete(pfn);
            put.push(pfn);
        }
        let inode = &mut self.inodes[ino as usize];
        inode.size = new_size;
        inode.data_pages = inode.data_pages.min(first);
        self.release_folios(t, cpu, &put)
    }

    /// Forget a folio's page-cache identity (its cache reference is dropped by the caller).
    pub fn page_cache_delete(&mut self, pfn: Pfn) {
        let p = self.mem_map.get_mut(pfn);
        let (dirty, shmem) = (p.flags & pg::DIRTY != 0, p.flags & pg::SHMEM != 0);
        p.flags &= !(pg::DIRTY | pg::UPTODATE);
        p.mapping = 0;
        self.stat.add(Stat::NrFilePages, -1);
        if dirty {
            self.stat.add(Stat::NrDirty, -1);
        }
        if shmem {
            self.stat.add(Stat::NrShmem, -1);
        }
    }
}
