//! The run queue of the discrete-event engine: which task runs its next step.
//!
//! A binary heap keyed by (time, task id) gives a total, deterministic order.
//! `pop_if_before` lets the running task keep going without a heap round-trip
//! while it is still the earliest, which is the common single-task case.

use super::Ns;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Default, Debug)]
pub struct RunQueue {
    heap: BinaryHeap<Reverse<(Ns, u32)>>,
}

impl RunQueue {
    pub fn push(&mut self, t: Ns, task: u32) {
        self.heap.push(Reverse((t, task)));
    }

    pub fn pop(&mut self) -> Option<(Ns, u32)> {
        self.heap.pop().map(|Reverse(x)| x)
    }

    /// Time of the earliest queued step, if any.
    #[inline]
    pub fn peek_time(&self) -> Option<(Ns, u32)> {
        self.heap.peek().map(|Reverse(x)| *x)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}
