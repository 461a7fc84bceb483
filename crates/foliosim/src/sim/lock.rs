//! Modelled locks and shared cache lines in simulated time.
//!
//! A shared cache line is a FIFO server: requests are served in the order
//! they arrive (their simulated request time), whatever order the steps that
//! make them run in. An RMW or a store needs the line exclusive: it waits
//! for everything that arrived before it and pays a transfer from the CPU
//! that held the line (and from the farthest CPU holding a shared copy, all
//! of which it invalidates). A load needs the line shared: it waits for the
//! exclusive requests that arrived before it, and loads that arrive between
//! two exclusive requests are served together. Every lock is such a line:
//! a spinlock's critical section holds its word exclusive, an rwsem's count
//! is RMWed at every down and up. Waiting for a line is time spent stalled
//! on it, never a sleep; only an rwsem puts its waiters to sleep, by its
//! own rules (`RwSem`).

use super::Ns;

/// Cost of moving a cache line between CPUs, from the machine profile.
#[derive(Clone, Copy, Debug)]
pub struct LineCost {
    /// Atomic RMW on a line already held exclusive by this CPU.
    pub local_rmw: Ns,
    /// Exclusive transfer (a modified line, or an RFO invalidating copies)
    /// from another CPU on the same socket.
    pub same_socket: Ns,
    /// The same from a CPU on another socket.
    pub cross_socket: Ns,
    /// A load missing on a line that is clean in another cache of the same
    /// socket (shared read miss).
    pub read_same_socket: Ns,
    /// A load missing on a line that is clean only on another socket.
    pub read_cross_socket: Ns,
    /// CPUs per socket, to tell the two apart.
    pub cpus_per_socket: u32,
    /// A deliberately broken line or rwsem (`debug.mutant`; tests only).
    pub mutant: LockMutant,
}

/// Broken variants of the line and rwsem model, to show the tests catch
/// them (kernel/knobs.rs `MUTANTS` maps `debug.mutant` onto them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LockMutant {
    #[default]
    None,
    /// A request processed after one that arrived later is served after
    /// it, in processing order, instead of in its arrival place.
    LineOutOfOrder,
    /// down_read sleeps when it waited on the count's line longer than
    /// `spin_limit`, with no writer holding or queued.
    ReaderSleepsWithoutWriter,
}

/// The line costs the unit tests run with (sim/lock.rs, mm/page_alloc):
/// round numbers with a local RMW well below a same-socket transfer, and
/// that below a cross-socket one, so each kind of transfer shows.
#[cfg(test)]
pub const TEST_LINE_COST: LineCost = LineCost {
    local_rmw: 5,
    same_socket: 50,
    cross_socket: 150,
    read_same_socket: 20,
    read_cross_socket: 100,
    cpus_per_socket: 4,
    mutant: LockMutant::None,
};

impl LineCost {
    #[inline]
    fn same_socket_as(&self, a: u32, b: u32) -> bool {
        a / self.cpus_per_socket == b / self.cpus_per_socket
    }

    /// Taking the line exclusive on `to` from `from` (u32::MAX: nobody).
    #[inline]
    pub fn transfer(&self, from: u32, to: u32) -> Ns {
        if from == to || from == u32::MAX {
            self.local_rmw
        } else if self.same_socket_as(from, to) {
            self.same_socket
        } else {
            self.cross_socket
        }
    }

    /// A load on `to` of a line clean in `from`'s cache.
    #[inline]
    pub fn read_miss(&self, from: u32, to: u32) -> Ns {
        if self.same_socket_as(from, to) {
            self.read_same_socket
        } else {
            self.read_cross_socket
        }
    }
}

/// One request to a line: when it arrived, when it was served to its end,
/// the critical section it holds the line exclusive for (`READ`: a load),
/// and its CPU.
#[derive(Clone, Copy, Debug)]
struct Req {
    arrival: Ns,
    end: Ns,
    hold: u32,
    cpu: u32,
}

const READ: u32 = u32::MAX;

impl Req {
    #[inline]
    fn read(&self) -> bool {
        self.hold == READ
    }
}

/// What the line looks like after the requests served so far.
#[derive(Clone, Debug)]
struct LineState {
    /// CPU of the latest exclusive request (u32::MAX: never written, as
    /// fresh from memory: free to anyone).
    owner: u32,
    /// When that request's service ended: nothing is served before.
    excl_end: Ns,
    /// The latest end among the loads since: the next exclusive request
    /// waits for them.
    reads_end: Ns,
    /// When the first load since that request had its copy: until then
    /// the line is modified in the owner's cache, which must forward it.
    clean_from: Ns,
    /// CPUs other than `owner` that loaded it since (valid shared copies).
    sharers: Vec<u32>,
}

impl Default for LineState {
    fn default() -> Self {
        LineState { owner: u32::MAX, excl_end: 0, reads_end: 0, clean_from: Ns::MAX, sharers: Vec::new() }
    }
}

impl LineState {
    /// Serve `r` after every request before it; returns its start and end
    /// and whether it paid a transfer.
    #[inline(always)]
    fn serve(&mut self, r: &Req, lc: &LineCost) -> (Ns, Ns, bool) {
        if r.read() {
            let start = r.arrival.max(self.excl_end);
            if r.cpu == self.owner || self.owner == u32::MAX || self.sharers.contains(&r.cpu) {
                return (start, start, false);
            }
            // Still modified in the owner's cache (no load since the write
            // has its copy yet): the owner forwards it, as for an exclusive
            // transfer. Once clean, the nearest copy answers.
            let cost = if start < self.clean_from {
                lc.transfer(self.owner, r.cpu)
            } else {
                self.sharers.iter().chain(std::iter::once(&self.owner)).map(|&c| lc.read_miss(c, r.cpu)).min().unwrap_or(0)
            };
            self.sharers.push(r.cpu);
            let end = start + cost;
            self.reads_end = self.reads_end.max(end);
            self.clean_from = self.clean_from.min(end);
            return (start, end, true);
        }
        let start = r.arrival.max(self.excl_end).max(self.reads_end);
        let mut cost = lc.transfer(self.owner, r.cpu);
        let mut bounced = self.owner != r.cpu && self.owner != u32::MAX;
        if !self.sharers.is_empty() {
            // The RFO invalidates every shared copy: the farthest answers last.
            let inval = self.sharers.iter().filter(|&&c| c != r.cpu).map(|&c| lc.transfer(c, r.cpu)).max().unwrap_or(0);
            bounced |= inval > 0 && inval != lc.local_rmw;
            cost = cost.max(inval);
            self.sharers.clear();
        }
        let end = start + cost + r.hold as Ns;
        self.owner = r.cpu;
        self.excl_end = end;
        self.reads_end = 0;
        self.clean_from = Ns::MAX;
        (start, end, bounced)
    }

    /// Fold a request already served (`r.end` known) into the state.
    fn absorb(&mut self, r: &Req) {
        if r.read() {
            if r.cpu != self.owner && self.owner != u32::MAX && !self.sharers.contains(&r.cpu) {
                self.sharers.push(r.cpu);
                self.reads_end = self.reads_end.max(r.end);
                self.clean_from = self.clean_from.min(r.end);
            }
        } else {
            self.owner = r.cpu;
            self.excl_end = r.end;
            self.reads_end = 0;
            self.clean_from = Ns::MAX;
            self.sharers.clear();
        }
    }
}

/// Requests kept for placing a late-processed earlier one: those that ended
/// before the engine's frontier (`sim::frontier`) are folded into the base
/// state, for no request still to come arrives before them. At most
/// `LINE_WINDOW` are kept (beyond, the oldest are folded, and a request
/// arriving before them is placed after them). A line checks the frontier
/// once it keeps `LINE_FOLD_AT` requests.
const LINE_WINDOW: usize = 1 << 16;
const LINE_FOLD_AT: usize = 64;

/// A shared cache line (a counter, a lock word, a refcount, fields read by
/// one CPU and written by another): a FIFO server of exclusive requests
/// (RMWs, stores, a spinlock's critical section) and loads.
///
/// Steps run in order of their start time, but a step's own requests fall
/// later than its start (a lock taken after a page was zeroed). A path
/// whose request on a contended line would fall after another task's step
/// begins ends its step there (`sim::horizon`; a fault does so at its entry
/// and at its down_read, and releases its lock from its next step), so
/// the requests on mmap_lock's line are processed in arrival order. A
/// request elsewhere can still be processed after one that arrived later.
/// It is then placed by its arrival: served after everything that arrived before it and before what
/// arrived after it, whose service moves later on the line (they already
/// returned their times to their steps; how much later is `late_ns`, the
/// model's own error). Nothing is reserved ahead: a later request never
/// delays an earlier one, and no gap is left unused.
#[derive(Clone, Debug, Default)]
pub struct CacheLine {
    /// Recent requests in arrival order (ties: in the order processed),
    /// from `head` on: those before it are folded, and removed once they
    /// are at least as many as the rest (a saturated line, whose requests
    /// all end beyond the frontier, folds one per request). A plain vector
    /// rather than a deque: appending is the hot path.
    q: Vec<Req>,
    head: usize,
    /// The arrival of `q`'s last request (0 when empty): a request arriving
    /// before it is placed late.
    last_arrival: Ns,
    /// The state after `q`'s last request.
    cur: LineState,
    /// The state before `q`'s first one (the requests folded away).
    base: LineState,
    /// Transfers paid (exclusive requests taking the line from another CPU
    /// or invalidating copies, and loads that missed).
    pub bounces: u64,
    /// Time requests waited for the line before their own service.
    pub wait_ns: Ns,
    /// How much later on the line requests already answered were served
    /// once an earlier one processed after them took its place.
    pub late_ns: Ns,
}

impl CacheLine {
    /// One atomic RMW (or a store) at `now` from `cpu`; returns completion.
    #[inline(always)]
    pub fn rmw(&mut self, now: Ns, cpu: u32, lc: &LineCost) -> Ns {
        self.request(Req { arrival: now, end: 0, hold: 0, cpu }, lc).1
    }

    /// A load at `now` from `cpu`; returns when the value is there. A CPU
    /// holding a valid copy pays nothing beyond the step's own constants.
    #[inline(always)]
    pub fn read(&mut self, now: Ns, cpu: u32, lc: &LineCost) -> Ns {
        self.request(Req { arrival: now, end: 0, hold: READ, cpu }, lc).1
    }

    /// Take the line exclusive at `now` and keep it for `hold` (a spinlock's
    /// critical section); returns (start of the service, end of the hold).
    #[inline(always)]
    pub fn hold(&mut self, now: Ns, cpu: u32, hold: Ns, lc: &LineCost) -> (Ns, Ns) {
        let hold = hold.min(READ as Ns - 1) as u32;
        self.request(Req { arrival: now, end: 0, hold, cpu }, lc)
    }

    #[inline(always)]
    fn request(&mut self, mut r: Req, lc: &LineCost) -> (Ns, Ns) {
        if self.last_arrival > r.arrival && lc.mutant != LockMutant::LineOutOfOrder {
            return self.insert_late(r, lc);
        }
        let (s, e, bounced) = self.cur.serve(&r, lc);
        self.bounces += bounced as u64;
        self.wait_ns += s - r.arrival;
        r.end = e;
        self.push(r);
        (s, e)
    }

    /// Append a served request, folding the oldest ones away.
    #[inline(always)]
    fn push(&mut self, r: Req) {
        if self.q.len() - self.head >= LINE_FOLD_AT {
            self.fold_old();
        }
        self.q.push(r);
        self.last_arrival = r.arrival;
    }

    /// Fold the leading requests that ended before the frontier (and any
    /// beyond the window) into the base state.
    #[cold]
    #[inline(never)]
    fn fold_old(&mut self) {
        let frontier = super::frontier();
        let w = self.window();
        let over = w.len().saturating_sub(LINE_WINDOW - 1);
        let n = over + ended_before(&w[over..], frontier);
        if n == 0 {
            return;
        }
        self.base = self.state_before(n);
        self.head += n;
        if self.head >= self.q.len() - self.head {
            // Moves no more requests than were folded since the last time.
            self.q.drain(..self.head);
            self.head = 0;
        }
        self.last_arrival = self.q.last().map_or(0, |b| b.arrival);
    }

    /// The requests not folded yet.
    #[inline]
    fn window(&self) -> &[Req] {
        &self.q[self.head..]
    }

    /// The state after the first `p` requests of the window.
    fn state_before(&self, p: usize) -> LineState {
        let w = &self.window()[..p];
        let (mut s, from) = match w.iter().rposition(|r| !r.read()) {
            Some(i) => {
                let mut s = LineState::default();
                s.absorb(&w[i]);
                (s, i + 1)
            }
            None => (self.base.clone(), 0),
        };
        for r in &w[from..] {
            s.absorb(r);
        }
        s
    }

    /// A request that arrived before the latest one processed: serve it in
    /// its place and serve again, in order, those that arrived after it.
    #[inline(never)]
    fn insert_late(&mut self, mut r: Req, lc: &LineCost) -> (Ns, Ns) {
        // A request older than the window is placed at its front, behind
        // requests that may have arrived after it (rare: the window spans
        // far more than a step).
        let p = self.window().partition_point(|x| x.arrival <= r.arrival);
        let mut s = self.state_before(p);
        let p = self.head + p;
        let (start, end, bounced) = s.serve(&r, lc);
        self.bounces += bounced as u64;
        self.wait_ns += start - r.arrival.min(start);
        r.end = end;
        self.q.insert(p, r);
        for i in p + 1..self.q.len() {
            let old = self.q[i];
            let (_, e, _) = s.serve(&old, lc);
            self.q[i].end = e;
            self.late_ns += e.saturating_sub(old.end);
            if !old.read() && e == old.end {
                // The state after an exclusive request is its CPU and end:
                // from here on nothing moves.
                return (start, end);
            }
        }
        self.cur = s;
        (start, end)
    }
}

/// How many leading requests of `w` (served in order) ended before `t`.
/// An exclusive request is served after every request before it, so none
/// of those ended later: one that ended before `t` answers for all before
/// it, and the scan goes by strides of such requests.
fn ended_before(w: &[Req], t: Ns) -> usize {
    const STRIDE: usize = 8;
    let mut n = 0;
    while w.get(n + STRIDE - 1).is_some_and(|r| !r.read() && r.end < t) {
        n += STRIDE;
    }
    n + w[n..].iter().take_while(|r| r.end < t).count()
}

/// Cache-line size of every modelled machine (x86-64 and arm64 profiles).
pub const LINE_BYTES: u64 = 64;

/// The shared lines of one address space's kernel objects, keyed by line
/// address; a line's state is created at its first access and kept (the
/// slab reuses addresses), so accesses do not allocate.
#[derive(Clone, Debug, Default)]
pub struct LineStore {
    lines: rustc_hash::FxHashMap<u64, CacheLine>,
}

impl LineStore {
    /// The line holding byte address `addr`.
    #[inline]
    pub fn line(&mut self, addr: u64) -> &mut CacheLine {
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
    /// Time requests waited on these lines (reports).
    pub fn total_wait_ns(&self) -> Ns {
        self.lines.values().map(|l| l.wait_ns).sum()
    }
}

/// A queued spinlock (FIFO, like qspinlock): its word is a line the holder
/// keeps exclusive through the critical section, whose length it knows
/// when it takes the lock. A waiter spins (never sleeps).
#[derive(Clone, Debug, Default)]
pub struct SpinLock {
    line: CacheLine,
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_ns: Ns,
}

impl SpinLock {
    /// Take the lock at `now`, hold it for `hold`; returns the release time.
    #[inline(always)]
    pub fn lock_for(&mut self, now: Ns, cpu: u32, hold: Ns, lc: &LineCost) -> Ns {
        self.lock_span(now, cpu, hold, lc).1
    }

    /// As `lock_for`, returning when the critical section starts (after
    /// the lock word arrived) and when it ends.
    #[inline(always)]
    pub fn lock_span(&mut self, now: Ns, cpu: u32, hold: Ns, lc: &LineCost) -> (Ns, Ns) {
        let (s, e) = self.line.hold(now, cpu, hold, lc);
        self.acquisitions += 1;
        if s > now {
            self.contended += 1;
            self.wait_ns += s - now;
        }
        (e - hold, e)
    }
}

/// Reader/writer semaphore (mmap_lock, a VMA's vm_lock). Readers share; a
/// writer excludes all; FIFO as in the kernel's rwsem: a reader arriving
/// while a writer holds the lock or waits for it queues behind that writer.
/// Every down and up is an RMW on the count's line, which may stall (never
/// sleep). Who sleeps, by `rwsem_51` (kernel/locking/rwsem.c and its 5.1
/// predecessor rwsem-xadd.c):
/// - a reader behind a writer: 5.1 sleeps at once (no reader spinning
///   before 5.3); 5.3+ spins while the writer runs its section;
/// - a writer: spins while a writer owns the lock; behind readers, 5.1
///   sleeps at once (it never spins on a reader-owned lock), 5.3+ spins
///   for `SleepCost::spin_limit` (rwsem_rspin_threshold) and then sleeps.
#[derive(Clone, Debug, Default)]
pub struct RwSem {
    /// The count word: every down/up is an RMW on it. (SPF also reads
    /// mm_users on mmap_lock's line.)
    pub line: CacheLine,
    /// End of the latest reader's hold.
    pub readers_until: Ns,
    /// End of the latest (held or queued) writer's hold.
    pub writer_until: Ns,
    /// Start of the latest writer's hold.
    pub writer_from: Ns,
    pub read_acquisitions: u64,
    pub write_acquisitions: u64,
    pub read_wait_ns: Ns,
    pub write_wait_ns: Ns,
    pub sleeps: u64,
    /// The 5.1 rwsem of the SPF seed's kernels: nobody spins on a reader,
    /// readers never spin. False: 5.3+ optimistic spinning.
    pub rwsem_51: bool,
    /// A writer asleep in the wait queue, not yet holding: the task whose
    /// locked section has not run. Every other request waits behind it
    /// (FIFO: no reader overtakes a waiting writer), which the caller must
    /// model by sleeping until the writer releases (`Kernel::mmap_lock_gate`),
    /// but for one that finds the lock free before the sleeper runs again
    /// (`steals`).
    pub queued_writer: Option<u32>,
    /// When the queued writer runs again (its wake-up): until then a
    /// request that finds the lock free takes it past the sleeper (`steals`).
    pub queued_wake: Ns,
    /// When the queued writer first went to sleep in the wait queue: from
    /// RWSEM_WAIT_TIMEOUT later it holds the handoff bit (`handoff`).
    pub queued_since: Ns,
    /// Writers that had to sleep in the wait queue (their section moved to
    /// the time they acquired).
    pub write_queued: u64,
    /// CPU of the latest writer (the owner field): what the writer's
    /// section allocates or writes is placed and charged on that CPU.
    pub writer_cpu: u32,
}

/// How long a writer waits in an rwsem's queue before, woken and failing
/// to acquire, it sets RWSEM_FLAG_HANDOFF (kernel/locking/rwsem.c,
/// rwsem_try_write_lock: `waiter->timeout`, RWSEM_WAIT_TIMEOUT =
/// DIV_ROUND_UP(HZ, 250) jiffies: 4 ms at HZ 250 and at HZ 1000).
pub const RWSEM_WAIT_TIMEOUT: Ns = 4_000_000;

/// Costs of sleeping on a semaphore.
#[derive(Clone, Copy, Debug)]
pub struct SleepCost {
    /// How long a 5.3+ writer spins on a reader-owned rwsem before it
    /// sleeps (rwsem_rspin_threshold).
    pub spin_limit: Ns,
    /// Context switch out plus wake-up latency when a waiter slept.
    pub sleep_wake: Ns,
}

impl RwSem {
    /// When the current holders (readers and the last writer) are all gone.
    #[inline]
    pub fn holders_until(&self) -> Ns {
        self.readers_until.max(self.writer_until)
    }

    /// Whether a writer requesting at `t` sleeps before it gets the lock:
    /// some reader will own it while it waits (after the owning writer, if
    /// any, releases), and it does not spin on readers (5.1) or not that
    /// long (5.3+).
    #[inline]
    pub fn writer_sleeps(&self, t: Ns, sc: &SleepCost) -> bool {
        let readers_from = t.max(self.writer_until);
        self.readers_until > readers_from && (self.rwsem_51 || self.readers_until > readers_from + sc.spin_limit)
    }

    /// Whether a request at `t` takes the lock ahead of the queued writer,
    /// which sleeps until `queued_wake`: the lock is free at `t` and the
    /// sleeper, not yet running, cannot have set RWSEM_FLAG_HANDOFF (it
    /// sets it only when, awake, it fails to acquire after
    /// RWSEM_WAIT_TIMEOUT). kernel/locking/rwsem.c: a writer takes a free
    /// lock whatever the queue (rwsem_try_write_lock_unqueued while it
    /// spins, and rwsem_try_write_lock, which lets a waiter other than the
    /// first acquire unless the first set the handoff bit); a reader by
    /// optimistic lock stealing in rwsem_down_read_slowpath (5.11+, commit
    /// 1a728dff855a; never in the 5.1 rwsem, where a reader queues behind
    /// any waiter). Stealing is what keeps a writer that slept behind a
    /// long read hold from becoming a convoy: the task that held the lock
    /// for read and comes back for write at once does not wait a whole
    /// section of the sleeper's.
    #[inline]
    pub fn steals(&self, t: Ns, write: bool) -> bool {
        self.queued_writer.is_some() && t < self.queued_wake && self.holders_until() <= t && (write || !self.rwsem_51)
    }

    /// Whether a writer requesting at `t` spins for the lock past the
    /// writer asleep in the queue instead of queueing behind it:
    /// rwsem_down_write_slowpath spins first (rwsem_optimistic_spin, the
    /// OSQ queue of spinners, and rwsem_try_write_lock_unqueued), whoever
    /// sleeps in the wait queue, and gives up only on a reader-owned lock
    /// held too long (`writer_sleeps`) or once the sleeper holds the
    /// handoff bit (5.3+: RWSEM_WAIT_TIMEOUT after it queued; the 5.1
    /// rwsem had no handoff). Without this every writer queued behind one
    /// that slept, and the queue never drained into spinners again.
    #[inline]
    pub fn writer_spins_past_queue(&self, t: Ns, sc: &SleepCost) -> bool {
        self.queued_writer.is_some()
            && !self.writer_sleeps(t, sc)
            && (self.rwsem_51 || t < self.queued_since.saturating_add(RWSEM_WAIT_TIMEOUT))
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

    /// down_read at `now`; returns when held. Pair with `up_read`.
    #[inline(always)]
    pub fn down_read(&mut self, now: Ns, cpu: u32, lc: &LineCost, sc: &SleepCost) -> Ns {
        let t = self.line.rmw(now, cpu, lc);
        // Steps run in time order, so a writer still holding was granted
        // the lock before this request: wait for it.
        let start = if self.writer_until > t {
            self.reader_behind_writer(sc)
        } else if lc.mutant == LockMutant::ReaderSleepsWithoutWriter && t > now + sc.spin_limit {
            self.sleeps += 1;
            t + sc.sleep_wake
        } else {
            t
        };
        // Waiting is what goes beyond the uncontended atomic.
        self.read_wait_ns += start.saturating_sub(now + lc.local_rmw);
        self.read_acquisitions += 1;
        start
    }

    #[cold]
    #[inline(never)]
    fn reader_behind_writer(&mut self, sc: &SleepCost) -> Ns {
        if self.rwsem_51 {
            self.sleeps += 1;
            self.writer_until + sc.sleep_wake
        } else {
            self.writer_until
        }
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
        self.write_granted(now, t, cpu, lc, sc)
    }

    /// down_write requested at `now` whose RMW on the count completed at
    /// `t` on a line kept outside this struct (a slab object's line in a
    /// `LineStore`, shared with the readers' RMWs); returns when held.
    #[inline]
    pub fn write_granted(&mut self, now: Ns, t: Ns, cpu: u32, lc: &LineCost, sc: &SleepCost) -> Ns {
        let mut start = t.max(self.holders_until());
        if self.writer_sleeps(t, sc) {
            self.sleeps += 1;
            start += sc.sleep_wake;
        }
        self.write_wait_ns += start.saturating_sub(now + lc.local_rmw);
        self.write_acquisitions += 1;
        self.writer_from = start;
        self.writer_cpu = cpu;
        // Held until released: a reader in this step's future queues behind.
        self.writer_until = Ns::MAX;
        start
    }

    #[inline]
    pub fn up_write(&mut self, t: Ns, cpu: u32, lc: &LineCost) -> Ns {
        let end = self.line.rmw(t, cpu, lc);
        self.write_released(end)
    }

    /// up_write whose RMW on the count completed at `end` on a line kept
    /// outside this struct (as `write_granted`).
    #[inline]
    pub fn write_released(&mut self, end: Ns) -> Ns {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    const LC: LineCost = TEST_LINE_COST;
    const SC: SleepCost = SleepCost { spin_limit: 1000, sleep_wake: 3000 };

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

    /// A schedule worked out by hand: CPUs 0-3 on socket 0, 4-7 on socket 1.
    /// Given in arrival order, each request's end is what the FIFO gives.
    const SCHEDULE: [(Ns, bool, u32, Ns); 7] = [
        // (arrival, read, cpu, expected end)
        (0, false, 0, 5),    // RMW, fresh line: local, [0, 5]
        (10, true, 1, 60),   // load, modified in CPU 0: forwarded, [10, 60]
        (12, true, 5, 162),  // load, served with the first: [12, 162] (still modified: from CPU 0, across)
        (20, false, 2, 312), // RMW: after both loads (162), invalidates CPU 5 across: [162, 312]
        (30, true, 2, 312),  // load by the owner: a hit, after the RMW
        (400, true, 6, 550), // load: modified in CPU 2 across: [400, 550]
        (600, true, 7, 620), // load: clean on CPU 6 since 550, same socket: [600, 620]
    ];

    #[test]
    fn the_line_serves_requests_in_arrival_order() {
        let mut l = CacheLine::default();
        for (arrival, read, cpu, end) in SCHEDULE {
            let got = if read { l.read(arrival, cpu, &LC) } else { l.rmw(arrival, cpu, &LC) };
            assert_eq!(got, end, "request at {arrival} (cpu {cpu}, read {read})");
        }
        // An RMW after the last two loads invalidates both: the farthest
        // copy (CPU 6 or 7, across from CPU 0) answers last.
        assert_eq!(l.rmw(700, 0, &LC), 700 + 150);
    }

    #[test]
    fn a_request_processed_late_is_served_in_its_arrival_place() {
        // The RMWs at 0 and 100 are processed first; the one at 50 after.
        let mut l = CacheLine::default();
        assert_eq!(l.rmw(0, 0, &LC), 5);
        assert_eq!(l.rmw(100, 1, &LC), 150, "alone after CPU 0: [100, 150]");
        // By arrival, CPU 2's RMW at 50 precedes CPU 1's: [50, 100] from CPU 0 ...
        assert_eq!(l.rmw(50, 2, &LC), 100);
        // ... which then takes the line from CPU 2 at 100: unchanged end
        // (its own answer stays), and the line's state moves on from there.
        assert_eq!(l.late_ns, 0);
        assert_eq!(l.rmw(150, 3, &LC), 200);
        // An early request that overlaps a later one's service pushes it.
        let mut l = CacheLine::default();
        l.rmw(0, 0, &LC);
        assert_eq!(l.rmw(100, 4, &LC), 250, "across from CPU 0: [100, 250]");
        assert_eq!(l.rmw(90, 1, &LC), 140, "arrived first: served first, [90, 140]");
        assert_eq!(l.late_ns, 290 - 250, "CPU 4's RMW moved to [140, 290] on the line");
        assert_eq!(l.rmw(300, 4, &LC), 305, "the line is CPU 4's from 290: local");
        // Nothing is reserved ahead: an early request never waits for a later one.
        let mut l = CacheLine::default();
        l.rmw(1_000, 0, &LC);
        assert_eq!(l.rmw(10, 1, &LC), 15);
    }

    /// SCHEDULE processed back to front on a line with costs `lc`: each
    /// request's end on the line, in arrival order.
    fn schedule_back_to_front(lc: &LineCost) -> (CacheLine, Vec<Ns>) {
        let mut l = CacheLine::default();
        for &(arrival, read, cpu, _) in SCHEDULE.iter().rev() {
            if read {
                l.read(arrival, cpu, lc);
            } else {
                l.rmw(arrival, cpu, lc);
            }
        }
        let mut ends: Vec<(Ns, Ns)> = l.window().iter().map(|r| (r.arrival, r.end)).collect();
        ends.sort_by_key(|e| e.0);
        (l, ends.into_iter().map(|e| e.1).collect())
    }

    #[test]
    fn the_schedule_is_the_same_whatever_order_requests_are_processed_in() {
        // Process SCHEDULE back to front: each request is placed by its
        // arrival, and the line ends as when processed in order.
        let (mut l, ends) = schedule_back_to_front(&LC);
        assert_eq!(ends, SCHEDULE.iter().map(|s| s.3).collect::<Vec<_>>());
        assert_eq!(l.rmw(700, 0, &LC), 700 + 150);
    }

    #[test]
    fn serving_out_of_arrival_order_breaks_the_hand_computed_schedule() {
        // The mutant serves a late-processed request behind the later
        // arrivals already served: the schedule test above sees it.
        let lc = LineCost { mutant: LockMutant::LineOutOfOrder, ..LC };
        let (_, ends) = schedule_back_to_front(&lc);
        assert_ne!(ends, SCHEDULE.iter().map(|s| s.3).collect::<Vec<_>>());
    }

    #[test]
    fn a_reader_sleeping_without_a_writer_is_caught() {
        // The mutant turns a long wait for the count's line into a sleep:
        // sixty-four readers with no writer, and sleeps appear.
        let lc = LineCost { mutant: LockMutant::ReaderSleepsWithoutWriter, ..LC };
        let mut r = RwSem { rwsem_51: true, ..Default::default() };
        for cpu in 0..64 {
            r.down_read(0, cpu % 8, &lc, &SC);
        }
        assert!(r.sleeps > 0, "the mutant must sleep where readers_share_and_never_sleep_without_a_writer forbids it");
    }

    #[test]
    fn the_fold_counts_the_leading_requests_that_ended() {
        let excl = |end| Req { arrival: 0, end, hold: 0, cpu: 0 };
        let load = |end| Req { arrival: 0, end, hold: READ, cpu: 1 };
        // Exclusive requests served in order: the first 13 ended before 14,
        // across a stride.
        let w: Vec<Req> = (1..=20).map(excl).collect();
        assert_eq!(ended_before(&w, 14), 13);
        assert_eq!(ended_before(&w, 100), 20);
        // A load that ended early answers for nobody before it: the second
        // request (a remote load, still being served) stops the count.
        let mut w = vec![excl(10), load(100)];
        w.extend((0..14).map(|_| load(20)));
        assert_eq!(ended_before(&w, 50), 1);
    }

    #[test]
    fn spinlock_is_fifo_and_exclusive() {
        let mut s = SpinLock::default();
        let e1 = s.lock_for(0, 0, 100, &LC);
        assert_eq!(e1, 105);
        let (c2, e2) = s.lock_span(10, 1, 100, &LC);
        assert_eq!((c2, e2), (105 + 50, 255), "waits for the holder, then takes the word");
        assert_eq!(s.contended, 1);
        assert_eq!(s.wait_ns, 95);
    }

    #[test]
    fn readers_share_and_never_sleep_without_a_writer() {
        for rwsem_51 in [false, true] {
            let mut r = RwSem { rwsem_51, ..Default::default() };
            // Eight readers arriving together stall on the count line (one
            // RMW after another, hundreds of ns), but nobody sleeps.
            let mut last = 0;
            for cpu in 0..8 {
                last = r.down_read(0, cpu, &LC, &SC);
            }
            // 5, then +50 per same-socket hand-over, +150 across to CPU 4.
            assert_eq!(last, 5 + 3 * 50 + 150 + 3 * 50, "the count's line serialises the RMWs");
            assert_eq!(r.sleeps, 0, "no writer: no sleep (5.1 = {rwsem_51})");
            // Sixty-four more: the last waits far beyond spin_limit for the
            // line, and still spins on it, as a stalled `lock xadd` does.
            for cpu in 0..64 {
                last = r.down_read(0, cpu % 8, &LC, &SC);
            }
            assert!(last > SC.spin_limit * 2, "the line wait exceeds spin_limit ({last} ns)");
            assert_eq!(r.sleeps, 0, "a long line wait is no sleep (5.1 = {rwsem_51})");
        }
    }

    #[test]
    fn a_reader_behind_a_writer_sleeps_under_5_1_and_spins_under_5_3() {
        for rwsem_51 in [false, true] {
            let mut r = RwSem { rwsem_51, ..Default::default() };
            let w = r.down_write(0, 0, &LC, &SC);
            let end = r.up_write(w + 280, 0, &LC);
            let s = r.down_read(200, 1, &LC, &SC);
            assert_eq!(r.sleeps, rwsem_51 as u64, "5.1 = {rwsem_51}");
            assert_eq!(s, if rwsem_51 { end + SC.sleep_wake } else { end });
        }
    }

    #[test]
    fn a_writer_sleeps_behind_readers_under_5_1_and_after_its_spin_under_5_3() {
        for (rwsem_51, hold, sleeps) in [(true, 200, 1), (false, 200, 0), (false, 5_000, 1)] {
            let mut r = RwSem { rwsem_51, ..Default::default() };
            let a = r.down_read(0, 0, &LC, &SC);
            let a_end = r.up_read(a + hold, 0, &LC);
            let w = r.down_write(10, 1, &LC, &SC);
            assert_eq!(r.sleeps, sleeps, "5.1 = {rwsem_51}, readers hold {hold} ns");
            assert!(w >= a_end);
            // Behind a writer, a writer spins.
            let w_end = r.up_write(w + 500, 1, &LC);
            let w2 = r.down_write(w + 10, 2, &LC, &SC);
            assert_eq!(r.sleeps, sleeps);
            assert!(w2 >= w_end);
        }
    }
}
