"""The child that `foliosim bench` runs under callgrind for its instruction
counts: ``python -P -S -s _bench_count.py CORE WORKLOAD SIM_S`` runs one
simulation of WORKLOAD ("anon_faults" or "tlb_hits") for SIM_S simulated
seconds and prints the number of events (faults, TLB hits) it counted.

It loads the compiled module from its path CORE and nothing else of
foliosim: the package imports pandas, whose import would take most of the
time under callgrind (it counts the same in both runs, so it would not
change the figure, only make it slow).
"""

import importlib.machinery
import importlib.util
import sys


def main(argv: list[str]) -> int:
    core_path, workload, sim_s = argv
    loader = importlib.machinery.ExtensionFileLoader("foliosim._core", core_path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    core = importlib.util.module_from_spec(spec)
    loader.exec_module(core)
    print(core.bench_events(workload, float(sim_s)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
