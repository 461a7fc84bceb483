#![no_main]
//! libFuzzer target: any bytes through the trace reader, and whatever it
//! accepts through the replay's translation table. Run with `make fuzz`.
use foliosim::workload::trace::TraceReplay;
use foliosim::workload::trace_format::TraceReader;
use foliosim::workload::{Op, Ret, Workload};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(records) = TraceReader::new(data).and_then(|r| r.read_all()) else { return };
    let mut w = TraceReplay::from_records("fuzz".into(), records);
    struct Env;
    impl foliosim::workload::SetupEnv for Env {
        fn nr_cpus(&self) -> u32 { 1 }
        fn mem_bytes(&self) -> u64 { 1 << 30 }
        fn create_file(&mut self, _: foliosim::workload::FsKind, _: u64, _: bool) -> Result<u32, String> { Ok(1) }
        fn spawn_process(&mut self, _: Option<u32>) -> Result<u32, String> { Ok(5) }
        fn spawn_thread(&mut self, _: u32, _: Option<u32>) -> Result<u32, String> { Err("no".into()) }
        fn seed(&self) -> u64 { 1 }
    }
    if w.setup(&mut Env).is_err() { return; }
    let mut last = Ret::Start;
    let mut next = 0x7f00_0000_0000u64;
    for _ in 0..100_000 {
        let mut ops = 0;
        match w.next_op(5, last, &mut ops) {
            Op::Exit => return,
            Op::Mmap { len, .. } | Op::Mremap { new_len: len, .. } => { last = Ret::Val(next as i64); next = next.wrapping_add((len | 0xfff).wrapping_add(1)); }
            _ => last = Ret::Val(0),
        }
    }
});
