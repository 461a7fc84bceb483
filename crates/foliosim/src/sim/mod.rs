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
//! snapshot) splits itself into two steps.

pub mod lock;
pub mod rng;
pub mod sched;

/// Simulated time in nanoseconds.
pub type Ns = u64;

thread_local! {
    static FRONTIER: std::cell::Cell<Ns> = const { std::cell::Cell::new(0) };
}

/// Set the engine's frontier: no step still to run starts before `t` (the
/// driver sets it as each step starts; a simulation runs on one thread).
#[inline]
pub fn set_frontier(t: Ns) {
    FRONTIER.with(|f| f.set(t));
}

/// The engine's frontier: requests made from now on arrive at or after it.
#[inline]
pub fn frontier() -> Ns {
    FRONTIER.with(|f| f.get())
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
