//! Per-CPU TLBs. STUB
