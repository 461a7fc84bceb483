//! Discrete-event engine: virtual clock, seeded RNG streams, modelled locks.
//!
//! The unit of atomicity is a *step*: one operation of one task (a memory
//! access, a fault, a syscall). A step starts at its task's clock and charges
//! simulated time as it goes; kernel state changes take effect when the step
//! runs. Steps run in order of their start time (ties broken by task id), so
//! concurrent operations interleave in simulated time. Shared cache lines,
//! and the locks built on them, are FIFO servers by arrival time (lock.rs):
//! waiting is real simulated time, without host threads, and only an
//! rwsem's own rules make a task sleep. A kernel path that must observe
//! other CPUs between two points (a speculative fault validating its
//! snapshot) splits itself into two steps, and so does one whose request
//! on a contended line would otherwise be processed before an earlier
//! arrival from another task's step (`horizon`).

pub mod bw;
pub mod earliest;
pub mod lock;
pub mod rng;
pub mod sched;

/// Simulated time in nanoseconds.
pub type Ns = u64;

thread_local! {
    static FRONTIER: std::cell::Cell<(Ns, Ns)> = const { std::cell::Cell::new((0, Ns::MAX)) };
}

/// Set the engine's frontier as a step starts at `t`: no step still to
/// run starts before it; and `horizon`, the earliest start of a step of
/// any other task (or kernel sharing the time line) still to run. The
/// driver sets both; a simulation runs on one thread.
#[inline]
pub fn set_frontier(t: Ns, horizon: Ns) {
    FRONTIER.with(|f| f.set((t, horizon)));
}

/// The engine's frontier: requests made from now on arrive at or after it.
#[inline]
pub fn frontier() -> Ns {
    FRONTIER.with(|f| f.get().0)
}

/// The earliest start of another task's step still to run (`Ns::MAX`:
/// none). A request on a shared line that the running step makes at or
/// before it is in arrival order among every request still to come; one
/// after it may arrive after a request that step will make, so a path
/// whose request on a contended line falls beyond it ends its step there
/// and makes the request from a step starting at its own time.
#[inline]
pub fn horizon() -> Ns {
    FRONTIER.with(|f| f.get().1)
}

pub const NSEC_PER_USEC: Ns = 1_000;
pub const NSEC_PER_MSEC: Ns = 1_000_000;
pub const NSEC_PER_SEC: Ns = 1_000_000_000;

/// Convert a duration given in (possibly fractional) nanoseconds, as profiles
/// hold them, into the integer clock, rounding to nearest.
#[inline]
pub fn ns(x: f64) -> Ns {
    if x <= 0.0 {
        0
    } else {
        (x + 0.5) as Ns
    }
}
