"""tools/profile-hot-paths: its readers of perf's and callgrind's output and
its naming of Rust symbols, on hand-made inputs (no profiler runs here)."""

from __future__ import annotations

import importlib.machinery
import importlib.util

import pytest

from conftest import REPO


def _tool():
    loader = importlib.machinery.SourceFileLoader("profile_hot_paths", str(REPO / "tools" / "profile-hot-paths"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


T = _tool()


@pytest.mark.parametrize(("sym", "short"), [
    ("foliosim::mm::memory::<impl foliosim::kernel::Kernel>::handle_mm_fault", "handle_mm_fault"),
    ("foliosim::sim::lock::CacheLine::fold_old", "CacheLine::fold_old"),
    ("foliosim::run::Driver::run_one", "Driver::run_one"),
    ("<foliosim::workload::will_it_scale::WillItScale as foliosim::workload::Workload>::next_op", "next_op"),
    ("foliosim::mm::swap::<impl foliosim::kernel::Kernel>::release_folios_ugen::h0123456789abcdef", "release_folios_ugen"),
    ("clear_page_erms", "clear_page_erms"),
    ("foliosim::run::enqueue", "enqueue"),
])
def test_short_names(sym, short):
    assert T.short_name(sym) == short


def test_perf_report_lines_are_samples_per_symbol():
    text = """
    27.23%           186  [.] foliosim::arch::x86::mm::fault::<impl foliosim::kernel::Kernel>::user_access
     0.73%             5  [k] clear_page_erms
     0.10%             1  [.] foliosim::arch::x86::mm::fault::<impl foliosim::kernel::Kernel>::user_access
#
"""
    got = T.parse_perf_report(text)
    assert got == {"[.] foliosim::arch::x86::mm::fault::<impl foliosim::kernel::Kernel>::user_access": 187, "[k] clear_page_erms": 5}


def test_callgrind_self_cost_leaves_out_the_calls_inclusive_cost(tmp_path):
    # fn (1) costs 10+5 itself and calls (2), whose inclusive cost (100)
    # follows the calls= line and is not (1)'s; (2) costs 100 itself, in two
    # parts (the second with a compressed name and a relative position).
    f = tmp_path / "cg.out"
    f.write_text(
        "version: 1\ncreator: callgrind-3.19.0\npositions: line\n"
        "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n"
        "fl=(1) a.rs\nfn=(1) foliosim::run::Driver::run_one\n"
        "10 10 1 2\n"
        "cfn=(2) foliosim::sim::lock::CacheLine::fold_old\ncalls=3 40\n"
        "12 100 30 20 0 7 1 0 4 1\n"
        "+2 5\n"
        "fn=(2)\n40 60 20 10 0 5 1 0 3 1\n* 40 10 10 0 2 0 0 1 0\n"
        "totals: 215\n"
    )
    cost = T.parse_callgrind(f)
    assert cost["foliosim::run::Driver::run_one"] == [15, 1, 2, 0, 0, 0, 0, 0, 0]
    assert cost["foliosim::sim::lock::CacheLine::fold_old"] == [100, 30, 20, 0, 7, 1, 0, 4, 1]


def test_callgrind_without_cache_simulation_is_refused(tmp_path):
    f = tmp_path / "cg.out"
    f.write_text("events: Ir\nfn=(1) x\n1 5\n")
    with pytest.raises(SystemExit, match="cache-sim"):
        T.parse_callgrind(f)


def test_rows_put_the_host_time_beside_the_per_event_costs():
    perf = {"events": 1000, "cpu_s": 1e-3, "percent": {"a": 60.0, "b": 39.7, "c": 0.3}}
    zeros = [0.0] * 9
    cg = {"per_event": {"a": [500.0, 0, 0, 1.0, 2.0, 3.0, 0.0, 0.5, 0.25], "b": [300.0, *zeros[1:]], "c": [10.0, *zeros[1:]]}}
    rows = T.combine(perf, cg)
    # 1 µs of CPU per event: a has 600 ns of it; c is under 0.5% and goes
    # into the rest.
    assert [r["function"] for r in rows] == ["a", "b", "the other 1"]
    a = rows[0]
    assert a["host_ns"] == pytest.approx(600.0)
    assert (a["instructions"], a["l1_misses"], a["ll_misses"]) == (500.0, 6.0, 0.75)
    assert rows[2]["instructions"] == 10.0
