//! The workloads by name: `config` and `run` look a workload up here. Kept
//! apart from mod.rs (the trait and the operations every generator names)
//! so that the generators import mod.rs and this file imports them, one way.

use super::{ebizzy, file_reader, kbuild, llama, memhog, memhog_then, sparse_touch, syscost, trace, will_it_scale, xsbench, WorkloadInfo};

/// Every workload foliosim knows, by name.
pub fn registry() -> Vec<WorkloadInfo> {
    let mut v = Vec::new();
    v.extend(registered());
    v
}

// Filled by the workload modules.
fn registered() -> Vec<WorkloadInfo> {
    let mut v = will_it_scale::infos();
    v.push(memhog::info());
    v.push(memhog_then::info());
    v.push(file_reader::info());
    v.push(sparse_touch::info());
    v.push(syscost::info());
    v.push(trace::info());
    v.push(kbuild::info());
    v.extend(ebizzy::infos());
    v.push(llama::info());
    v.push(xsbench::info());
    v
}

pub fn find(name: &str) -> Option<WorkloadInfo> {
    registry().into_iter().find(|w| w.name == name)
}
