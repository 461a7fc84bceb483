//! Tracepoints: named events fired where Linux fires its own, for whatever
//! an analysis needs to observe beyond the counters (when each read() of a
//! pass returned, which CPU took a TLB shootdown). They cost one test of a
//! flag when off, which they are unless the config asks:
//!
//! ```toml
//! [run]
//! probes = ["tlb:tlb_flush"]                 # counted: total, per CPU, per reason
//! probes_record = ["syscalls:sys_exit_read"] # counted, and every event kept
//! ```
//!
//! The result JSON then has `"probes": {NAME: {"count", "per_cpu",
//! ["by_reason"], ["fields", "events", "dropped"]}}`: each recorded event is
//! an array of its fields (`fields` names them, `t_ns` first), the first
//! `MAX_EVENTS` of them kept and the rest counted in `dropped`.
//!
//! Names and fields follow Linux's tracepoints:
//! - `tlb:tlb_flush` (arch/x86/mm/tlb.c flush_tlb_func): a CPU flushed its
//!   TLB for a shootdown it received (`TLB_REMOTE_SHOOTDOWN`, the events
//!   /proc/interrupts counts as "TLB shootdowns"), or flushed locally for
//!   its own mm (`TLB_LOCAL_MM_SHOOTDOWN`) or for a batched unmap
//!   (`TLB_LOCAL_SHOOTDOWN`); `pages` is the page count, -1 for a full flush.
//!   `t_ns`: when the flush ran (a remote one: when its IPI was sent).
//! - `syscalls:sys_enter_NAME` / `syscalls:sys_exit_NAME` for the system
//!   calls of kernel/syscalls.rs (`ret`: the return value or -errno).
//!   `t_ns`: when the call's body begins / ends, between the entry and exit
//!   halves of the mode switch; task work queued by the call (page-cache
//!   promotion) runs after sys_exit, as in syscall_exit_to_user_mode.

use crate::mm::vmstat::{Entry, ENTRY_NAMES, NR_ENTRIES};
use crate::sim::Ns;
use serde_json::{json, Map, Value};

/// Events kept per recorded tracepoint; the rest are counted, not kept.
pub const MAX_EVENTS: usize = 1_000_000;

/// A tracepoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tp {
    TlbFlush,
    SysEnter(Entry),
    SysExit(Entry),
}

/// Values of `tlb:tlb_flush`'s `reason` (enum tlb_flush_reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlbFlushReason {
    OnTaskSwitch,
    RemoteShootdown,
    LocalShootdown,
    LocalMmShootdown,
    RemoteSendIpi,
}

const TLB_FLUSH_REASONS: [&str; 5] =
    ["TLB_FLUSH_ON_TASK_SWITCH", "TLB_REMOTE_SHOOTDOWN", "TLB_LOCAL_SHOOTDOWN", "TLB_LOCAL_MM_SHOOTDOWN", "TLB_REMOTE_SEND_IPI"];

/// The system calls that fire `syscalls:*` (those run through `sys()`).
const SYSCALLS: [Entry; 13] = [
    Entry::Mmap,
    Entry::Munmap,
    Entry::Mprotect,
    Entry::Mremap,
    Entry::Madvise,
    Entry::Brk,
    Entry::Read,
    Entry::Write,
    Entry::Open,
    Entry::Close,
    Entry::Lseek,
    Entry::Ftruncate,
    Entry::Nanosleep,
];

const NR_TP: usize = 1 + 2 * NR_ENTRIES;

impl Tp {
    fn index(self) -> usize {
        match self {
            Tp::TlbFlush => 0,
            Tp::SysEnter(e) => 1 + e as usize,
            Tp::SysExit(e) => 1 + NR_ENTRIES + e as usize,
        }
    }

    /// Every tracepoint, in index order.
    pub fn all() -> Vec<Tp> {
        let mut v = vec![Tp::TlbFlush];
        v.extend(SYSCALLS.iter().map(|&e| Tp::SysEnter(e)));
        v.extend(SYSCALLS.iter().map(|&e| Tp::SysExit(e)));
        v
    }

    pub fn name(self) -> String {
        match self {
            Tp::TlbFlush => "tlb:tlb_flush".into(),
            Tp::SysEnter(e) => format!("syscalls:sys_enter_{}", ENTRY_NAMES[e as usize]),
            Tp::SysExit(e) => format!("syscalls:sys_exit_{}", ENTRY_NAMES[e as usize]),
        }
    }

    pub fn from_name(name: &str) -> Option<Tp> {
        Tp::all().into_iter().find(|t| t.name() == name)
    }

    /// The event's fields after `t_ns` and `cpu`.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Tp::TlbFlush => &["reason", "pages"],
            Tp::SysEnter(_) => &["task"],
            Tp::SysExit(_) => &["task", "ret"],
        }
    }

    /// One line for `foliosim list`.
    pub fn help(self) -> String {
        match self {
            Tp::TlbFlush => {
                "a CPU flushed its TLB: a shootdown received (TLB_REMOTE_SHOOTDOWN) or a local flush; fields reason, pages".into()
            }
            Tp::SysEnter(e) => format!("{}() begins; field task", ENTRY_NAMES[e as usize]),
            Tp::SysExit(e) => format!("{}() returns; fields task, ret", ENTRY_NAMES[e as usize]),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    Count,
    Record,
}

struct Point {
    count: u64,
    per_cpu: Vec<u64>,
    /// tlb:tlb_flush: per reason, per CPU.
    by_reason: Vec<Vec<u64>>,
    /// Recorded events, `2 + fields().len()` values each, flat.
    events: Vec<i64>,
    dropped: u64,
}

/// The tracepoints of one kernel.
pub struct Tracing {
    mode: [Mode; NR_TP],
    points: Vec<Option<Point>>,
}

impl Default for Tracing {
    fn default() -> Self {
        Tracing { mode: [Mode::Off; NR_TP], points: (0..NR_TP).map(|_| None).collect() }
    }
}

/// The names `[run] probes` accepts, for errors and `foliosim list`.
pub fn known() -> Vec<(String, String)> {
    Tp::all().into_iter().map(|t| (t.name(), t.help())).collect()
}

impl Tracing {
    /// Tracepoints counted (`count`) and recorded (`record`) on `nr_cpus`
    /// CPUs; the names are checked by the config.
    pub fn new(count: &[String], record: &[String], nr_cpus: u32) -> Tracing {
        let mut t = Tracing::default();
        for (names, mode) in [(count, Mode::Count), (record, Mode::Record)] {
            for n in names {
                let Some(tp) = Tp::from_name(n) else { continue };
                let i = tp.index();
                if t.mode[i] != Mode::Record {
                    t.mode[i] = mode;
                }
                let reasons = if tp == Tp::TlbFlush { TLB_FLUSH_REASONS.len() } else { 0 };
                t.points[i].get_or_insert_with(|| Point {
                    count: 0,
                    per_cpu: vec![0; nr_cpus as usize],
                    by_reason: vec![vec![0; nr_cpus as usize]; reasons],
                    events: Vec::new(),
                    dropped: 0,
                });
            }
        }
        t
    }

    /// Whether `tp` is on: callers test this before building the event.
    #[inline(always)]
    pub fn on(&self, tp: Tp) -> bool {
        self.mode[tp.index()] != Mode::Off
    }

    /// Fire `tp` at `t` on `cpu` with its fields (see `Tp::fields`).
    pub fn emit(&mut self, tp: Tp, t: Ns, cpu: u32, fields: &[i64]) {
        let i = tp.index();
        let record = self.mode[i] == Mode::Record;
        let Some(p) = self.points[i].as_mut() else { return };
        p.count += 1;
        if let Some(c) = p.per_cpu.get_mut(cpu as usize) {
            *c += 1;
        }
        if tp == Tp::TlbFlush {
            if let Some(c) = p.by_reason.get_mut(fields[0] as usize).and_then(|v| v.get_mut(cpu as usize)) {
                *c += 1;
            }
        }
        if record {
            let width = 2 + fields.len();
            if p.events.len() / width < MAX_EVENTS {
                p.events.push(t as i64);
                p.events.push(cpu as i64);
                p.events.extend_from_slice(fields);
            } else {
                p.dropped += 1;
            }
        }
    }

    /// `tlb:tlb_flush` on `cpu` (pages: None for a full flush).
    #[inline]
    pub fn tlb_flush(&mut self, t: Ns, cpu: u32, reason: TlbFlushReason, pages: Option<u64>) {
        if self.on(Tp::TlbFlush) {
            self.emit(Tp::TlbFlush, t, cpu, &[reason as i64, pages.map_or(-1, |p| p as i64)]);
        }
    }

    /// Whether any tracepoint is on (the result then has `probes`).
    pub fn any(&self) -> bool {
        self.points.iter().any(|p| p.is_some())
    }

    /// The `probes` object of the result.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        for tp in Tp::all() {
            let i = tp.index();
            let Some(p) = &self.points[i] else { continue };
            let mut v = json!({"count": p.count, "per_cpu": p.per_cpu});
            if tp == Tp::TlbFlush {
                let by: Map<String, Value> = TLB_FLUSH_REASONS
                    .iter()
                    .zip(&p.by_reason)
                    .map(|(r, c)| ((*r).to_string(), json!({"count": c.iter().sum::<u64>(), "per_cpu": c})))
                    .collect();
                v["by_reason"] = by.into();
            }
            if self.mode[i] == Mode::Record {
                let mut fields = vec!["t_ns", "cpu"];
                fields.extend_from_slice(tp.fields());
                let width = fields.len();
                let events: Vec<Value> = p
                    .events
                    .chunks(width)
                    .map(|e| {
                        let mut row: Vec<Value> = e.iter().map(|&x| x.into()).collect();
                        if tp == Tp::TlbFlush {
                            row[2] = TLB_FLUSH_REASONS.get(e[2] as usize).copied().unwrap_or("?").into();
                        }
                        Value::Array(row)
                    })
                    .collect();
                v["fields"] = fields.into();
                v["events"] = events.into();
                v["dropped"] = p.dropped.into();
            }
            out.insert(tp.name(), v);
        }
        out.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for tp in Tp::all() {
            assert_eq!(Tp::from_name(&tp.name()), Some(tp));
        }
        assert_eq!(Tp::from_name("syscalls:sys_exit_read"), Some(Tp::SysExit(Entry::Read)));
        assert_eq!(Tp::from_name("syscalls:sys_exit_fault"), None, "faults are not system calls");
        assert_eq!(Tp::from_name("tlb:nope"), None);
    }

    #[test]
    fn counted_and_recorded_events() {
        let mut t = Tracing::new(&["tlb:tlb_flush".into()], &["syscalls:sys_exit_read".into()], 4);
        assert!(t.on(Tp::TlbFlush) && t.on(Tp::SysExit(Entry::Read)) && !t.on(Tp::SysEnter(Entry::Read)));
        t.tlb_flush(10, 2, TlbFlushReason::RemoteShootdown, Some(1));
        t.tlb_flush(11, 2, TlbFlushReason::LocalMmShootdown, None);
        t.emit(Tp::SysExit(Entry::Read), 20, 1, &[7, 0]);
        let v = t.to_json();
        assert_eq!(v["tlb:tlb_flush"]["count"], 2);
        assert_eq!(v["tlb:tlb_flush"]["per_cpu"], json!([0, 0, 2, 0]));
        assert_eq!(v["tlb:tlb_flush"]["by_reason"]["TLB_REMOTE_SHOOTDOWN"]["per_cpu"], json!([0, 0, 1, 0]));
        assert!(v["tlb:tlb_flush"].get("events").is_none(), "counted only");
        assert_eq!(v["syscalls:sys_exit_read"]["fields"], json!(["t_ns", "cpu", "task", "ret"]));
        assert_eq!(v["syscalls:sys_exit_read"]["events"], json!([[20, 1, 7, 0]]));
        assert!(Tracing::default().to_json().as_object().unwrap().is_empty());
    }
}
