//! Where a CPU sits: its socket and, with SMT, the sibling it shares a
//! core with; and the order in which the scheduler fills the CPUs.
//!
//! CPUs are numbered socket by socket (so that socket = cpu / CPUs per
//! socket, as the line costs and the nodes assume); within a socket, one
//! thread of every core first, then the second thread of every core, as
//! Linux enumerates them on x86 (CPU n and n + cores per socket are
//! siblings). A task not pinned to a CPU goes to the next of the order
//! will-it-scale binds its tasks in (hwloc's cores, then their second
//! threads) and Linux's load balancer spreads them: every core of every
//! socket first, SMT siblings only once every core has a task.

#[derive(Clone, Debug)]
pub struct Topology {
    nr_cpus: u32,
    sockets: u32,
    cpus_per_socket: u32,
    /// Cores per socket (cpus_per_socket / threads per core).
    cores: u32,
    threads: u32,
}

impl Topology {
    pub fn new(nr_cpus: u32, sockets: u32, threads_per_core: u32) -> Topology {
        let sockets = sockets.max(1);
        let cpus_per_socket = (nr_cpus / sockets).max(1);
        let threads = if threads_per_core > 1 && cpus_per_socket.is_multiple_of(threads_per_core) { threads_per_core } else { 1 };
        Topology { nr_cpus, sockets, cpus_per_socket, cores: cpus_per_socket / threads, threads }
    }

    /// The SMT sibling of `cpu` (None without SMT).
    #[inline(always)]
    pub fn sibling(&self, cpu: u32) -> Option<u32> {
        if self.threads < 2 {
            return None;
        }
        let (s, l) = (cpu / self.cpus_per_socket, cpu % self.cpus_per_socket);
        Some(s * self.cpus_per_socket + (l + self.cores) % self.cpus_per_socket)
    }

    /// The `i`-th CPU the scheduler gives a task that is not pinned.
    pub fn placement(&self, i: u32) -> u32 {
        let i = i % self.nr_cpus;
        let per_thread = self.sockets * self.cores;
        if self.threads < 2 || i >= per_thread * self.threads {
            return i;
        }
        let (t, r) = (i / per_thread, i % per_thread);
        (r / self.cores) * self.cpus_per_socket + t * self.cores + r % self.cores
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_and_the_order_cores_fill_in() {
        // 2 sockets x 3 cores x 2 threads.
        let t = Topology::new(12, 2, 2);
        assert_eq!(t.sibling(0), Some(3));
        assert_eq!(t.sibling(3), Some(0));
        assert_eq!(t.sibling(7), Some(10));
        // Every core of both sockets before a sibling.
        let order: Vec<u32> = (0..12).map(|i| t.placement(i)).collect();
        assert_eq!(order, [0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11]);
        let mut seen = order.clone();
        seen.sort();
        assert_eq!(seen, (0..12).collect::<Vec<_>>(), "a permutation");
        assert_eq!(t.placement(12), 0, "then around again");
        // Without SMT: CPU order.
        let n = Topology::new(8, 2, 1);
        assert_eq!(n.sibling(1), None);
        assert_eq!((0..8).map(|i| n.placement(i)).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
    }
}
