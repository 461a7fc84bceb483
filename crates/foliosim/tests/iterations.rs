//! Workload::iterations: each workload counts the whole iterations of its
//! tasks' loops, and the result reports them overall and inside the
//! measured window (what an experiment checks its window against).

use foliosim::{config, run};
use serde_json::Value;

fn result(toml: &str) -> Value {
    let c = config::from_toml(toml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let o = run::simulate(&c, &mut |_| true).unwrap();
    run::result_json(&c, &o)
}

fn user_tasks(r: &Value) -> Vec<&Value> {
    r["per_task"].as_array().unwrap().iter().filter(|t| t["kthread"] == false).collect()
}

/// page_fault1 touches 256 pages per 1 MiB region, one op each, then
/// munmaps: an iteration per munmap, so iterations follow ops / 256.
#[test]
fn will_it_scale_counts_munmaps() {
    let r = result(
        "[workload]\nname = \"page_fault1\"\nmode = \"processes\"\ntasks = 2\nsize_mib = 1\n[run]\nwarmup_s = 0.001\nduration_s = 0.004\n",
    );
    let mut measured = 0;
    for t in user_tasks(&r) {
        let (ops, n) = (t["ops"].as_u64().unwrap(), t["iterations"].as_u64().unwrap());
        assert!(n >= 2, "{t}");
        assert!(n == ops / 256 || n + 1 == ops / 256, "ops {ops}, iterations {n}: one per region of 256 pages");
        let m = t["iterations_measured"].as_u64().unwrap();
        assert!(m < n && m > 0, "{t}: the window holds some, the warm-up the others");
        measured += m;
    }
    assert_eq!(r["summary"]["iterations_measured"], measured);
}

/// file_reader: one iteration per pass, i.e. per read() that returned 0.
#[test]
fn file_reader_counts_passes() {
    let r = result("[workload]\nname = \"file_reader\"\nfile_mib = 4\npopulate = true\nchunk_kib = 256\ncycles = 3\n[run]\nwarmup_s = 0.0\nduration_s = 1.0\nprobes_record = [\"syscalls:sys_exit_read\"]\n");
    let eofs = r["probes"]["syscalls:sys_exit_read"]["events"].as_array().unwrap().iter().filter(|e| e[3] == 0).count();
    assert_eq!(eofs, 3);
    let t = user_tasks(&r)[0];
    assert_eq!(t["iterations"], 3);
    assert_eq!(t["exited"], true);
}

/// kbuild: a make slot's iterations are the jobs it reaped; the compiler
/// processes it forked have no loop (null).
#[test]
fn kbuild_counts_jobs_reaped() {
    let r = result("[machine]\nnode_mem_mib = [2048, 2048]\n[workload]\nname = \"kbuild\"\ntasks = 2\njobs = 3\n[run]\nwarmup_s = 0.0\nduration_s = 10.0\n");
    let tasks = user_tasks(&r);
    let slots: Vec<_> = tasks.iter().filter(|t| !t["iterations"].is_null()).collect();
    assert_eq!(slots.len(), 2);
    assert!(slots.iter().all(|t| t["iterations"] == 3 && t["exited"] == true), "{slots:?}");
    assert_eq!(tasks.len(), 2 + 2 * 3, "the children are there, without iterations");
    assert_eq!(r["summary"]["iterations"], 6);
}

/// memhog: a pass writes every page once.
#[test]
fn memhog_counts_passes() {
    let r = result("[workload]\nname = \"memhog\"\nsize_mib = 1\npasses = 5\n[run]\nwarmup_s = 0.0\nduration_s = 1.0\n");
    assert_eq!(user_tasks(&r)[0]["iterations"], 5);
}

/// sparse_touch: the region touched once is one iteration (then it is held).
#[test]
fn sparse_touch_counts_the_touch() {
    let r = result(
        "[workload]\nname = \"sparse_touch\"\nsize_mib = 1\nstride_kib = 64\nhold_ms = 1\n[run]\nwarmup_s = 0.0\nduration_s = 0.01\n",
    );
    assert_eq!(user_tasks(&r)[0]["iterations"], 1, "the region touched once");
}
