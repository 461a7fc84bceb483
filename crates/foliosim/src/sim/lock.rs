//! Modelled locks and shared cache lines, as timelines in simulated time.
//!
//! Every lock here is acquired by a step at its current time `now`; it returns
//! when the caller actually holds it (>= now). Waiting is therefore charged as
//! real simulated time. Hand-off between CPUs pays a cache-line transfer, and
//! the lock word itself is a cache line whose RMWs serialise.

use super::Ns;

/// Cost of moving a cache line between CPUs, from the machine profile.
#[derive(Clone, Copy, Debug)]
pub struct LineCost {
    /// Atomic RMW on a line already owned by this CPU.
    pub local_rmw: Ns,
    /// Transfer from another CPU on the same socket.
    pub same_socket: Ns,
    /// Transfer from a CPU on another socket.
    pub cross_socket: Ns,
    /// CPUs per socket, to tell the two apart.
    pub cpus_per_socket: u32,
}

impl LineCost {
    #[inline]
    pub fn transfer(&self, from: u32, to: u32) -> Ns {
        if from == to || from == u32::MAX {
            self.local_rmw
        } else if from / self.cpus_per_socket == to / self.cpus_per_socket {
            self.same_socket
        } else {
            self.cross_socket
        }
    }
}

/// Reservations of a resource in simulated time: non-overlapping busy
/// intervals, sorted. Steps run in start-time order but a step may reserve
/// a resource later than another step's earlier request (a release at the
/// end of a long hold); a request takes the earliest gap at or after its
/// time, so it neither jumps a reservation it overlaps nor waits behind one
/// that starts after it is done.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// The live reservations are `iv[head..]`. Forgetting the oldest only
    /// advances `head` (the storage is compacted now and then): cheaper on
    /// this hot path than a ring buffer's index wrapping.
    iv: Vec<(Ns, Ns, u32)>,
    head: usize,
}

/// Reservations ending this long before a request are forgotten: a request
/// can only precede the latest reservation by about one step's length, and
/// steps (a fault, a syscall) are microseconds. The cap bounds memory per
/// lock and keeps the search cache-resident; a request that would have
/// fitted before a forgotten interval is simply served at its time.
const HORIZON: Ns = 2_000_000;
const MAX_INTERVALS: usize = 256;

impl Timeline {
    /// Reserve the earliest slot at or after `t` for `cpu`; `len(prev)`
    /// gives the slot's length given the previous holder. Returns (start,
    /// end, previous holder of the slot taken: u32::MAX for none).
    /// The common case (after everything reserved so far) is inlined into
    /// every lock operation; the gap search is out of line.
    #[inline(always)]
    pub fn reserve(&mut self, t: Ns, cpu: u32, len: impl Fn(u32) -> Ns) -> (Ns, Ns, u32) {
        match self.last_holder(t) {
            Some(owner) => {
                let end = t + len(owner);
                self.push((t, end, cpu));
                (t, end, owner)
            }
            None => self.reserve_in_gap(t, cpu, &len),
        }
    }

    /// Forget what ended before the horizon, then: the previous holder of
    /// a slot at `t` when `t` is after everything reserved so far (u32::MAX
    /// for none), or None when the slot needs the gap search. The hot lock
    /// operations append with `push` on Some and take a cold path on None,
    /// so their fast path carries no gap bookkeeping (its start is `t`).
    /// Calling it again at the same `t` forgets nothing more.
    #[inline(always)]
    fn last_holder(&mut self, t: Ns) -> Option<u32> {
        // The cap is applied by `push` and `reserve_in_gap` as they add
        // (the same positions the old test at the next request dropped):
        // here only the horizon, whose first test almost always fails.
        let n = self.iv.len();
        let mut head = self.head;
        if head < n && self.iv[head].1 + HORIZON < t {
            head += 1;
            while head < n && self.iv[head].1 + HORIZON < t {
                head += 1;
            }
            self.head = head;
        }
        if head < n {
            let (_, e, owner) = self.iv[n - 1];
            if e > t {
                return None;
            }
            Some(owner)
        } else {
            Some(u32::MAX)
        }
    }

    /// Append a reservation. The forgotten ones' storage is dropped only
    /// when the vector is full (instead of a test on every call): the live
    /// ones are at most MAX_INTERVALS, so the vector stops growing.
    #[inline(always)]
    fn push(&mut self, iv: (Ns, Ns, u32)) {
        if self.iv.len() == self.iv.capacity() {
            self.compact();
        }
        self.iv.push(iv);
        self.cap_live();
    }

    /// Forget the oldest reservation beyond the cap, right after one was
    /// added (the live ones were at most MAX_INTERVALS before it).
    #[inline(always)]
    fn cap_live(&mut self) {
        if self.iv.len() - self.head > MAX_INTERVALS {
            self.head += 1;
        }
    }

    /// Drop the forgotten reservations' storage when at least half of it
    /// is forgotten (amortised: it moves at most as many live entries as
    /// forgotten ones), else let the vector grow.
    #[cold]
    #[inline(never)]
    fn compact(&mut self) {
        if self.head >= 64 && 2 * self.head >= self.iv.len() {
            self.iv.drain(..self.head);
            self.head = 0;
        } else {
            self.iv.reserve(self.iv.len().max(64));
        }
    }

    /// `reserve` when `t` is before the end of the latest reservation.
    #[inline(never)]
    fn reserve_in_gap(&mut self, t: Ns, cpu: u32, len: &dyn Fn(u32) -> Ns) -> (Ns, Ns, u32) {
        let head = self.head;
        let live = &self.iv[head..];
        // First interval that ends after t.
        let mut i = live.partition_point(|iv| iv.1 <= t);
        let mut s = t;
        let mut owner = if i > 0 { live[i - 1].2 } else { u32::MAX };
        loop {
            if i == live.len() {
                break;
            }
            let (is, ie, io) = live[i];
            if is <= s || s + len(owner) > is {
                s = s.max(ie);
                owner = io;
                i += 1;
                continue;
            }
            break;
        }
        let end = s + len(owner);
        self.iv.insert(head + i, (s, end, cpu));
        self.cap_live();
        (s, end, owner)
    }

    /// End of the latest reservation.
    pub fn busy_until(&self) -> Ns {
        self.iv[self.head..].last().map_or(0, |x| x.1)
    }
}

/// A shared, written cache line (a counter, a lock word, a refcount). RMWs
/// on it serialise: each one waits for the line and pays a transfer if
/// another CPU owned it.
#[derive(Clone, Debug, Default)]
pub struct CacheLine {
    tl: Timeline,
    /// Total time callers spent waiting for the line (for reports).
    pub wait_ns: Ns,
    pub bounces: u64,
}

impl CacheLine {
    /// Perform one atomic RMW at `now` from `cpu`; returns completion time.
    #[inline]
    pub fn rmw(&mut self, now: Ns, cpu: u32, lc: &LineCost) -> Ns {
        // The bounce follows from the previous holder the reservation
        // returns: a closure recording it would live in memory.
        let (s, e, prev) = self.tl.reserve(now, cpu, |prev| lc.transfer(prev, cpu));
        self.bounces += (prev != cpu && prev != u32::MAX) as u64;
        self.wait_ns += s - now;
        e
    }
}

/// Cache-line size of every modelled machine (x86-64 and arm64 profiles).
pub const LINE_BYTES: u64 = 64;

/// A line that is both written and read (the fields of slab-packed VMAs,
/// the mmap_lock count next to mm_users): RMWs serialise on its timeline as
/// on a `CacheLine` and take the line exclusive, which invalidates the CPUs
/// that read it since (the farthest one's transfer). A read by a CPU
/// without a valid copy fetches one: the first read after an RMW takes the
/// line from its modified owner, serialised with the RMWs like a transfer
/// (the owner forwards it); later reads find it shared and only pay the
/// transfer's latency. With RMWs only it behaves exactly as a `CacheLine`.
#[derive(Clone, Debug)]
pub struct SharedLine {
    tl: Timeline,
    /// CPU of the last RMW (u32::MAX: none yet).
    owner: u32,
    /// CPUs other than `owner` holding a shared copy since that RMW.
    sharers: Vec<u32>,
    /// No read since the last RMW: the line is modified in `owner`'s cache.
    modified: bool,
    /// Transfers paid (RMWs from another CPU or invalidating readers, and
    /// reads that missed).
    pub bounces: u64,
    pub wait_ns: Ns,
}

impl Default for SharedLine {
    fn default() -> Self {
        SharedLine { tl: Timeline::default(), owner: u32::MAX, sharers: Vec::new(), modified: false, bounces: 0, wait_ns: 0 }
    }
}

impl SharedLine {
    /// One atomic RMW (or a store) at `now` from `cpu`; returns completion.
    /// Taking the line from readers costs as much as a transfer from the
    /// farthest of them. Always inlined: mmap_lock's down_read and up_read
    /// on every fault, where a call would cost more than the fast path.
    #[inline(always)]
    pub fn rmw(&mut self, now: Ns, cpu: u32, lc: &LineCost) -> Ns {
        if !self.sharers.is_empty() {
            return self.rmw_invalidating(now, cpu, lc);
        }
        // Nobody read it since the last RMW (always so for mmap_lock's count
        // under the classic policy): a `CacheLine` RMW, on the hot path.
        // After everything reserved it starts at `now` (no wait to add);
        // the gap search and its bookkeeping are out of line.
        let Some(prev) = self.tl.last_holder(now) else {
            return self.rmw_in_gap(now, cpu, lc);
        };
        // The bounce test shares `transfer`'s local-RMW branch: nothing to
        // count when this CPU (or nobody) held the line.
        let e = if prev == cpu || prev == u32::MAX {
            now + lc.local_rmw
        } else {
            self.bounces += 1;
            now + lc.transfer(prev, cpu)
        };
        self.tl.push((now, e, cpu));
        self.owner = cpu;
        self.modified = true;
        e
    }

    /// `rmw` when it must find a gap before the latest reservation.
    #[inline(never)]
    fn rmw_in_gap(&mut self, now: Ns, cpu: u32, lc: &LineCost) -> Ns {
        let (s, e, prev) = self.tl.reserve_in_gap(now, cpu, &|prev| lc.transfer(prev, cpu));
        self.owner = cpu;
        self.modified = true;
        self.bounces += (prev != cpu && prev != u32::MAX) as u64;
        self.wait_ns += s - now;
        e
    }

    /// `rmw` when readers hold copies the RMW must invalidate.
    #[inline(never)]
    fn rmw_invalidating(&mut self, now: Ns, cpu: u32, lc: &LineCost) -> Ns {
        let inval = self.sharers.iter().filter(|&&c| c != cpu).map(|&c| lc.transfer(c, cpu)).max().unwrap_or(0);
        let (s, e, prev) = self.tl.reserve(now, cpu, |prev| lc.transfer(prev, cpu).max(inval));
        let bounced = (prev != cpu && prev != u32::MAX) || inval > 0;
        self.sharers.clear();
        self.owner = cpu;
        self.modified = true;
        self.bounces += bounced as u64;
        self.wait_ns += s - now;
        e
    }

    /// A load at `now` from `cpu`; returns when the value is there. A CPU
    /// with a valid copy pays nothing beyond the step's own constants.
    #[inline]
    pub fn read(&mut self, now: Ns, cpu: u32, lc: &LineCost) -> Ns {
        if self.owner == cpu || self.owner == u32::MAX || self.sharers.contains(&cpu) {
            return now;
        }
        self.sharers.push(cpu);
        self.bounces += 1;
        if !self.modified {
            return now + lc.transfer(self.owner, cpu);
        }
        // The owner keeps a shared copy: its next RMW must invalidate ours,
        // and ours must invalidate its copy.
        self.modified = false;
        self.sharers.push(self.owner);
        let (s, e, _) = self.tl.reserve(now, cpu, |prev| lc.transfer(prev, cpu));
        self.wait_ns += s - now;
        e
    }
}

/// The shared lines of one address space's kernel objects, keyed by line
/// address; a line's state is created at its first access and kept (the
/// slab reuses addresses), so accesses do not allocate.
#[derive(Clone, Debug, Default)]
pub struct LineStore {
    lines: rustc_hash::FxHashMap<u64, SharedLine>,
}

impl LineStore {
    /// The line holding byte address `addr`.
    #[inline]
    pub fn line(&mut self, addr: u64) -> &mut SharedLine {
        self.lines.entry(addr / LINE_BYTES).or_default()
    }
    #[inline]
    pub fn rmw(&mut self, addr: u64, now: Ns, cpu: u32, lc: &LineCost) -> Ns {
        self.line(addr).rmw(now, cpu, lc)
    }
    #[inline]
    pub fn read(&mut self, addr: u64, now: Ns, cpu: u32, lc: &LineCost) -> Ns {
        self.line(addr).read(now, cpu, lc)
    }
    /// Transfers paid on the line holding `addr` so far (tests, reports).
    pub fn bounces(&self, addr: u64) -> u64 {
        self.lines.get(&(addr / LINE_BYTES)).map_or(0, |l| l.bounces)
    }
    pub fn total_bounces(&self) -> u64 {
        self.lines.values().map(|l| l.bounces).sum()
    }
}

/// A queued spinlock (FIFO, like qspinlock). The holder's critical section is
/// known when it takes the lock, so acquisition reserves the lock-word
/// transfer plus the hold.
#[derive(Clone, Debug, Default)]
pub struct SpinLock {
    tl: Timeline,
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_ns: Ns,
}

impl SpinLock {
    /// Take the lock at `now`, hold it for `hold`; returns the release time.
    /// Always inlined: the fast path is shorter than a call's register
    /// saves (the PTE lock on every fault, the lru_lock per batch).
    #[inline(always)]
    pub fn lock_for(&mut self, now: Ns, cpu: u32, hold: Ns, lc: &LineCost) -> Ns {
        // After everything reserved it is taken at `now`, uncontended.
        if let Some(prev) = self.tl.last_holder(now) {
            let e = now + lc.transfer(prev, cpu) + hold;
            self.tl.push((now, e, cpu));
            self.acquisitions += 1;
            return e;
        }
        self.lock_in_gap(now, cpu, hold, lc)
    }

    /// `lock_for` when it must find a gap before the latest reservation.
    #[inline(never)]
    fn lock_in_gap(&mut self, now: Ns, cpu: u32, hold: Ns, lc: &LineCost) -> Ns {
        let (s, e, _) = self.tl.reserve_in_gap(now, cpu, &|prev| lc.transfer(prev, cpu) + hold);
        if s > now {
            self.contended += 1;
            self.wait_ns += s - now;
        }
        self.acquisitions += 1;
        e
    }

    /// As `lock_for`, returning when the critical section starts (after
    /// the lock word arrived) and when it ends.
    #[inline(always)]
    pub fn lock_span(&mut self, now: Ns, cpu: u32, hold: Ns, lc: &LineCost) -> (Ns, Ns) {
        let e = self.lock_for(now, cpu, hold, lc);
        (e - hold, e)
    }
}

/// Reader/writer semaphore (mmap_lock). Readers share; a writer excludes all.
/// FIFO fairness as in the kernel's rwsem: a reader arriving while a writer is
/// waiting or holding queues behind that writer. Waiting beyond a short spin
/// sleeps, which costs a context switch and a wake-up on the waiter's CPU.
#[derive(Clone, Debug, Default)]
pub struct RwSem {
    /// The count word: every down/up is an RMW on it. (A `SharedLine`: SPF
    /// reads mm_users on mmap_lock's line.)
    pub line: SharedLine,
    /// End of the latest reader's hold.
    pub readers_until: Ns,
    /// End of the latest (held or queued) writer's hold.
    pub writer_until: Ns,
    /// Start of the latest writer's hold: readers arriving before it share
    /// with the readers ahead of it.
    pub writer_from: Ns,
    pub read_acquisitions: u64,
    pub write_acquisitions: u64,
    pub read_wait_ns: Ns,
    pub write_wait_ns: Ns,
    pub sleeps: u64,
    /// Readers never spin: any wait for a writer sleeps (rwsem before 5.3,
    /// when reader optimistic spinning arrived). Default false (5.3+).
    pub reader_no_spin: bool,
    /// A writer asleep in the wait queue, not yet holding: the task whose
    /// locked section has not run. Every other request waits behind it
    /// (FIFO: no reader overtakes a waiting writer), which the caller must
    /// model by sleeping until the writer releases (`Kernel::mmap_lock_gate`).
    pub queued_writer: Option<u32>,
    /// Writers that had to sleep in the wait queue (their section moved to
    /// the time they acquired).
    pub write_queued: u64,
    /// CPU of the latest writer (the owner field): what the writer's
    /// section allocates or writes is placed and charged on that CPU.
    pub writer_cpu: u32,
}

/// Costs of sleeping on a semaphore.
#[derive(Clone, Copy, Debug)]
pub struct SleepCost {
    /// Waits shorter than this are spent spinning (optimistic spinning).
    pub spin_limit: Ns,
    /// Context switch out plus wake-up latency when a waiter slept.
    pub sleep_wake: Ns,
}

impl RwSem {
    /// down_read at `now`, holding for `hold`. Returns (acquired_at, released_at).
    #[inline]
    pub fn read_for(&mut self, now: Ns, cpu: u32, hold: Ns, lc: &LineCost, sc: &SleepCost) -> (Ns, Ns) {
        let t = self.line.rmw(now, cpu, lc);
        let mut start = t;
        // A writer holds or is queued at or before our arrival: wait for it.
        // Steps run in time order, so any writer still holding or queued was
        // requested before us.
        if self.writer_until > t {
            start = self.writer_until;
        }
        start = self.reader_wait_cost(t, now, start, sc);
        self.read_wait_ns += start - now;
        self.read_acquisitions += 1;
        let end = start + hold;
        // up_read is another RMW on the count line.
        let end = self.line.rmw(end, cpu, lc);
        self.readers_until = self.readers_until.max(end);
        (start, end)
    }

    /// down_write at `now`, holding for `hold`. Returns (acquired_at, released_at).
    #[inline]
    pub fn write_for(&mut self, now: Ns, cpu: u32, hold: Ns, lc: &LineCost, sc: &SleepCost) -> (Ns, Ns) {
        let t = self.line.rmw(now, cpu, lc);
        let start = t.max(self.holders_until());
        let start = self.wait_cost(now, start, sc);
        self.write_wait_ns += start - now;
        self.write_acquisitions += 1;
        self.writer_from = start;
        self.writer_cpu = cpu;
        let end = self.line.rmw(start + hold, cpu, lc);
        self.writer_until = end;
        (start, end)
    }

    /// When the current holders (readers and the last writer) are all gone.
    #[inline]
    pub fn holders_until(&self) -> Ns {
        self.readers_until.max(self.writer_until)
    }

    /// Account a sleep in the wait queue from `from` until the waiter ran
    /// again at `now` (woken at the hand-over, plus the wake-up latency).
    pub fn slept(&mut self, from: Ns, now: Ns, write: bool) {
        let waited = now.saturating_sub(from);
        if write {
            self.write_wait_ns += waited;
        } else {
            self.read_wait_ns += waited;
        }
        self.sleeps += 1;
    }

    /// down_read at `now`; returns when held. Pair with `up_read` in the same step.
    #[inline(always)]
    pub fn down_read(&mut self, now: Ns, cpu: u32, lc: &LineCost, sc: &SleepCost) -> Ns {
        let t = self.line.rmw(now, cpu, lc);
        let start = if self.writer_until > t { self.writer_until } else { t };
        let start = self.reader_wait_cost(t, now, start, sc);
        // Waiting is what goes beyond the uncontended atomic.
        self.read_wait_ns += start.saturating_sub(now + lc.local_rmw);
        self.read_acquisitions += 1;
        start
    }

    /// down_read_trylock at `now`: one RMW on the count (a failed cmpxchg
    /// costs the same); fails if a writer holds or waits. Returns when held.
    #[inline]
    pub fn down_read_trylock(&mut self, now: Ns, cpu: u32, lc: &LineCost) -> Option<Ns> {
        let t = self.line.rmw(now, cpu, lc);
        if self.writer_until > t || self.queued_writer.is_some() {
            return None;
        }
        self.read_acquisitions += 1;
        Some(t)
    }

    /// up_read at `t`; returns when the release RMW completed.
    #[inline(always)]
    pub fn up_read(&mut self, t: Ns, cpu: u32, lc: &LineCost) -> Ns {
        let end = self.line.rmw(t, cpu, lc);
        self.readers_until = self.readers_until.max(end);
        end
    }

    /// down_write at `now`; returns when held. Pair with `up_write` (or
    /// `downgrade_write` + `up_read`) in the same step.
    #[inline]
    pub fn down_write(&mut self, now: Ns, cpu: u32, lc: &LineCost, sc: &SleepCost) -> Ns {
        let t = self.line.rmw(now, cpu, lc);
        let start = t.max(self.holders_until());
        let start = self.wait_cost(now, start, sc);
        self.write_wait_ns += start.saturating_sub(now + lc.local_rmw);
        self.write_acquisitions += 1;
        self.writer_from = start;
        self.writer_cpu = cpu;
        // Reserve until released: later readers in this step's future queue behind.
        self.writer_until = Ns::MAX;
        start
    }

    #[inline]
    pub fn up_write(&mut self, t: Ns, cpu: u32, lc: &LineCost) -> Ns {
        let end = self.line.rmw(t, cpu, lc);
        self.writer_until = end;
        end
    }

    /// downgrade_write at `t`: readers may enter from now; the caller now
    /// holds it for read and must `up_read`.
    #[inline]
    pub fn downgrade_write(&mut self, t: Ns, cpu: u32, lc: &LineCost) -> Ns {
        let end = self.line.rmw(t, cpu, lc);
        self.writer_until = end;
        end
    }

    /// Write section followed by a downgrade to read (munmap since 4.20):
    /// `hold_w` exclusive, then `hold_r` shared. Returns (acquired, downgraded, released).
    pub fn write_downgrade_for(&mut self, now: Ns, cpu: u32, hold_w: Ns, hold_r: Ns, lc: &LineCost, sc: &SleepCost) -> (Ns, Ns, Ns) {
        let (start, down) = self.write_for(now, cpu, hold_w, lc, sc);
        let end = self.line.rmw(down + hold_r, cpu, lc);
        self.readers_until = self.readers_until.max(end);
        (start, down, end)
    }

    /// A reader's wait: as `wait_cost`, but without spinning when
    /// `reader_no_spin` (it sleeps as soon as it must wait for a writer).
    #[inline]
    fn reader_wait_cost(&mut self, t: Ns, now: Ns, start: Ns, sc: &SleepCost) -> Ns {
        if self.reader_no_spin && start > t {
            self.sleeps += 1;
            return start + sc.sleep_wake;
        }
        self.wait_cost(now, start, sc)
    }

    #[inline]
    fn wait_cost(&mut self, now: Ns, start: Ns, sc: &SleepCost) -> Ns {
        if start > now + sc.spin_limit {
            self.sleeps += 1;
            start + sc.sleep_wake
        } else {
            start
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const LC: LineCost = LineCost { local_rmw: 5, same_socket: 50, cross_socket: 150, cpus_per_socket: 4 };
    const SC: SleepCost = SleepCost { spin_limit: 100, sleep_wake: 3000 };

    #[test]
    fn rmw_on_one_line_serialises() {
        let mut l = CacheLine::default();
        let a = l.rmw(0, 0, &LC);
        let b = l.rmw(0, 1, &LC);
        let c = l.rmw(0, 5, &LC);
        assert_eq!(a, 5);
        assert_eq!(b, 5 + 50);
        assert_eq!(c, 55 + 150);
        assert_eq!(l.bounces, 2);
    }

    #[test]
    fn a_future_reservation_does_not_block_an_earlier_request() {
        let mut l = CacheLine::default();
        l.rmw(1000, 0, &LC);
        // An RMW at t=10 fits before the one reserved at t=1000 (no owner
        // before it: a local RMW).
        assert_eq!(l.rmw(10, 1, &LC), 10 + 5);
        // One overlapping the reservation waits for it.
        assert!(l.rmw(990, 2, &LC) >= 1005);
        let mut s = SpinLock::default();
        s.lock_for(1000, 0, 100, &LC);
        assert!(s.lock_for(0, 1, 100, &LC) <= 300);
        assert!(s.lock_for(950, 1, 100, &LC) >= 1105);
    }

    #[test]
    fn spinlock_is_fifo_and_exclusive() {
        let mut s = SpinLock::default();
        let e1 = s.lock_for(0, 0, 100, &LC);
        let e2 = s.lock_for(10, 1, 100, &LC);
        assert!(e2 >= e1 + 100);
        assert_eq!(s.contended, 1);
    }

    #[test]
    fn readers_share_writer_excludes_and_blocks_later_readers() {
        let mut r = RwSem::default();
        let (s1, e1) = r.read_for(0, 0, 1000, &LC, &SC);
        let (s2, _e2) = r.read_for(10, 1, 1000, &LC, &SC);
        assert!(s2 < e1, "second reader shares with the first");
        assert!(s1 < 100);
        let (ws, we) = r.write_for(20, 2, 500, &LC, &SC);
        assert!(ws >= e1, "writer waits for readers");
        let (s3, _) = r.read_for(30, 3, 10, &LC, &SC);
        assert!(s3 >= we, "reader behind a queued writer waits for it");
        assert!(r.sleeps >= 2);
    }

    #[test]
    fn readers_sleep_without_spinning_under_5_1_semantics() {
        for no_spin in [false, true] {
            let mut r = RwSem { reader_no_spin: no_spin, ..Default::default() };
            let w = r.down_write(0, 0, &LC, &SC);
            let end = r.up_write(w + 280, 0, &LC);
            // A reader arriving near the end of the write section waits < spin_limit.
            let s = r.down_read(200, 1, &LC, &SC);
            assert!(end - 200 < SC.spin_limit);
            assert_eq!(r.sleeps, no_spin as u64, "no_spin = {no_spin}");
            assert!(s >= end);
            assert_eq!(s >= end + SC.sleep_wake, no_spin);
        }
    }

    #[test]
    fn split_api_matches_reservations() {
        let mut r = RwSem::default();
        let a = r.down_read(0, 0, &LC, &SC);
        let a_end = r.up_read(a + 1000, 0, &LC);
        let w = r.down_write(10, 1, &LC, &SC);
        assert!(w >= a_end);
        let w_end = r.up_write(w + 500, 1, &LC);
        let b = r.down_read(20, 2, &LC, &SC);
        assert!(b >= w_end);
    }
}
