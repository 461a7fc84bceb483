#![no_main]
//! libFuzzer target: any bytes through the trace reader, and whatever it
//! accepts through the replay's translation table. Run with `make fuzz`.
use foliosim::workload::trace::TraceReplay;
use foliosim::workload::trace_format::Trace;
use foliosim::workload::{Op, Ret, Workload};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(trace) = Trace::read(data) else { return };
    let mut w = TraceReplay::from_trace("fuzz".into(), trace).with_jobs(2, &["make"]);
    struct Env;
    impl foliosim::workload::SetupEnv for Env {
        fn nr_cpus(&self) -> u32 {
            1
        }
        fn mem_bytes(&self) -> u64 {
            1 << 30
        }
        fn create_file(&mut self, _: foliosim::workload::FsKind, _: u64, _: bool) -> Result<u32, String> {
            Ok(1)
        }
        fn spawn_process(&mut self, _: Option<u32>) -> Result<u32, String> {
            Ok(5)
        }
        fn spawn_thread(&mut self, _: u32, _: Option<u32>) -> Result<u32, String> {
            Err("no".into())
        }
        fn seed(&self) -> u64 {
            1
        }
    }
    if w.setup(&mut Env).is_err() {
        return;
    }
    // Forked children run too, round robin.
    let mut run: std::collections::VecDeque<(u32, Ret)> = [(5, Ret::Start)].into();
    let (mut ids, mut next) = (5u32, 0x7f00_0000_0000u64);
    for _ in 0..100_000 {
        let Some((t, last)) = run.pop_front() else { return };
        let mut ops = 0;
        let ret = match w.next_op(t, last, &mut ops) {
            Op::Exit => continue,
            Op::Fork | Op::Vfork | Op::Clone => {
                ids += 1;
                w.on_fork(t, ids);
                run.push_back((ids, Ret::Val(0)));
                Ret::Val(ids as i64)
            }
            Op::Wait => Ret::Err(10),
            Op::Mmap { len, .. } | Op::Mremap { new_len: len, .. } => {
                let a = next;
                next = next.wrapping_add((len | 0xfff).wrapping_add(1));
                Ret::Val(a as i64)
            }
            _ => Ret::Val(0),
        };
        run.push_back((t, ret));
    }
});
