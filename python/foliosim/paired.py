"""`foliosim bench --paired REF`: the simulator's throughput, a git ref's
build against the working tree's, on the same box at the same time.

Instruction counts (callgrind) do not see a change that adds no
instructions but loses locality; a throughput does, but moves with the
box's load by more than most changes. So the two builds run interleaved:
each pair runs the same workload once on each build, back to back, and
the figure is the per-pair ratio (candidate rate / ref rate), whose median
and spread do not carry the load's drift between pairs. The order inside a
pair alternates (ref first, then candidate first: ABBA...), so that a
trend within a pair does not favour one side.

The ref is built from `git archive REF` (committed files only) under
`target/paired/SHA/`, the candidate from the working tree into its own
`target/`; both are the example `paired_driver` (crates/foliosim/examples/
paired_driver.rs, copied into the ref's tree), built with the working
tree's pinned toolchain and each tree's own release profile. Each run is
a fresh process; its time is that of `run::simulate` alone.

docs/performance.md says how to run it and gives the latest figures.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DRIVER = "paired_driver"
DRIVER_SRC = Path("crates/foliosim/examples") / f"{DRIVER}.rs"
KERNEL_SRC = Path("crates/foliosim/src/kernel/mod.rs")


def driver_for_ref(driver: str, kernel_src: str) -> str:
    """The driver as the ref's crate compiles it: before #32 made the
    Kernel's fields private (2026-11-29), its counters were the public field
    `stat`, not the method `stat()`."""
    if "pub stat: VmStat" in kernel_src:
        return driver.replace("out.kernel.stat()", "&out.kernel.stat")
    return driver


class PairedError(Exception):
    """A paired benchmark that cannot run (bad ref, failed build, a run that
    failed): the message is one line naming what."""


@dataclass(frozen=True)
class Workload:
    name: str
    # What the driver counts: "faults" (pgfault) or "tlb_hits".
    events: str
    unit: str
    toml: str


# The issue's figures: page_fault1 with 1 task for 4 simulated s (every
# fault a 4 KiB anonymous one, with its munmap); 64 threads of one process
# (the mm's lines and locks shared, one CPU each: every step is another
# CPU's); memhog over 1 MiB, every access after the first pass a TLB hit.
# 64 threads run 1 simulated s (each thread maps, touches and unmaps its
# 128 MiB about twice; several times the 1-task run's host time), not the
# 5 s of `foliosim bench`'s pf1_threads64, so that a pair takes seconds.
WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("pf1_1task", "faults", "faults/host s",
                 '[workload]\nname = "page_fault1"\ntasks = 1\n[run]\nwarmup_s = 0.0\nduration_s = 4.0\n'),
        Workload("pf1_threads64", "faults", "faults/host s",
                 '[workload]\nname = "page_fault1"\nmode = "threads"\ntasks = 64\n[run]\nwarmup_s = 0.0\nduration_s = 1.0\n'),
        Workload("tlb_hits", "tlb_hits", "TLB hits/host s",
                 '[workload]\nname = "memhog"\nsize_mib = 1\npasses = 200000\n[run]\nwarmup_s = 0.0\nduration_s = 0.5\n'),
    ]
}

REF, CAND = "ref", "candidate"


@dataclass(frozen=True)
class Run:
    """One timed run: the events counted and the host seconds they took."""

    events: int
    host_s: float

    @property
    def rate(self) -> float:
        return self.events / self.host_s


def schedule(pairs: int, workloads: Sequence[str]) -> list[tuple[int, str, tuple[str, str]]]:
    """The runs in the order they are made: for each pair, each workload
    on both builds back to back, the ref first in even pairs and the
    candidate first in odd ones."""
    order = [(REF, CAND), (CAND, REF)]
    return [(i, w, order[i % 2]) for i in range(pairs) for w in workloads]


def quantile(xs: Sequence[float], q: float) -> float:
    """The q-quantile of xs by linear interpolation between order statistics
    (numpy's default, `statistics.quantiles(method="inclusive")`)."""
    if not xs:
        raise ValueError("quantile of no values")
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def spread(xs: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "q1": quantile(xs, 0.25), "q3": quantile(xs, 0.75), "min": min(xs), "max": max(xs)}


def summarize(runs: dict[str, list[dict[str, Run]]]) -> dict[str, Any]:
    """Per workload: each pair's ratio (candidate rate / ref rate), their
    median and spread, and each side's rates with theirs. `runs[w]` holds
    one {"ref": Run, "candidate": Run} per pair, in pair order."""
    out: dict[str, Any] = {}
    for w, pairs in runs.items():
        ratios = [p[CAND].rate / p[REF].rate for p in pairs]
        out[w] = {
            "unit": WORKLOADS[w].unit if w in WORKLOADS else "events/host s",
            "pairs": len(pairs),
            "ratio": spread(ratios),
            "ratios": ratios,
            REF: {**spread([p[REF].rate for p in pairs]), "rates": [p[REF].rate for p in pairs], "events": [p[REF].events for p in pairs]},
            CAND: {**spread([p[CAND].rate for p in pairs]), "rates": [p[CAND].rate for p in pairs], "events": [p[CAND].events for p in pairs]},
        }
    return out


def run_pairs(runners: dict[str, Callable[[str], Run]], pairs: int, workloads: Sequence[str],
              progress: Callable[[str], None] | None = None) -> dict[str, list[dict[str, Run]]]:
    """Run the schedule with `runners[side](workload)` and collect the runs
    by workload and pair. Both sides of a pair must count the same events:
    the builds simulate the same config, and a change of output is not a
    speed change (compare the results with `foliosim compare`)."""
    if pairs < 1:
        raise PairedError(f"--pairs {pairs}: at least 1")
    runs: dict[str, list[dict[str, Run]]] = {w: [] for w in workloads}
    for i, w, order in schedule(pairs, workloads):
        pair: dict[str, Run] = {}
        for side in order:
            pair[side] = runners[side](w)
            if progress:
                progress(f"pair {i + 1}/{pairs} {w} {side}: {pair[side].rate:,.0f} {WORKLOADS[w].unit if w in WORKLOADS else 'events/host s'}")
        runs[w].append(pair)
    return runs


def parse_driver_output(out: str) -> Run:
    """The driver's line `EVENTS HOST_S`."""
    parts = out.split()
    try:
        events, host_s = int(parts[0]), float(parts[1])
    except (IndexError, ValueError):
        raise PairedError(f"{DRIVER} printed {out.strip()!r}, not 'EVENTS HOST_S'") from None
    if len(parts) != 2 or host_s <= 0 or events < 0:
        raise PairedError(f"{DRIVER} printed {out.strip()!r}, not 'EVENTS HOST_S'")
    return Run(events, host_s)


# ------------------------------------------------------------- building --
def _git(root: Path, *args: str) -> str:
    p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise PairedError(f"git {' '.join(args)}: {' '.join(p.stderr.split()) or 'failed'}")
    return p.stdout.strip()


def repo_root(start: Path) -> Path:
    try:
        return Path(_git(start, "rev-parse", "--show-toplevel"))
    except PairedError:
        raise PairedError(f"{start}: not in a git checkout of foliosim (the paired benchmark builds from its source)") from None


def resolve(root: Path, ref: str) -> str:
    """The commit `ref` names (a branch, tag, or hash)."""
    try:
        return _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except PairedError:
        raise PairedError(f"--paired {ref}: no such commit in {root}") from None


def _toolchain(root: Path) -> str | None:
    """The working tree's pinned toolchain (rust-toolchain.toml), which both
    builds use: an old ref may pin none, or another."""
    f = root / "rust-toolchain.toml"
    if not f.exists():
        return None
    for line in f.read_text().splitlines():
        k, _, v = line.partition("=")
        if k.strip() == "channel":
            return v.strip().strip('"')
    return None


def _cargo_build(manifest_dir: Path, target_dir: Path, toolchain: str | None, log: Path) -> Path:
    env = dict(os.environ)
    if toolchain:
        env["RUSTUP_TOOLCHAIN"] = toolchain
    cmd = ["cargo", "build", "--release", "--locked", "-p", "foliosim", "--example", DRIVER, "--target-dir", str(target_dir)]
    with log.open("w") as f:
        p = subprocess.run(cmd, cwd=manifest_dir, stdout=f, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        last = [ln for ln in log.read_text().splitlines() if ln.strip()][-1:] or ["(no output)"]
        raise PairedError(f"building {DRIVER} in {manifest_dir} failed: {last[0].strip()} (log: {log})")
    exe = target_dir / "release" / "examples" / DRIVER
    if not exe.exists():
        raise PairedError(f"building {DRIVER} in {manifest_dir} made no {exe}")
    return exe


def extract_ref(root: Path, sha: str, src: Path) -> None:
    """Put the files of commit `sha` (as `git archive` gives them: committed
    files only) at `src`, whole or not at all."""
    src.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="src.", dir=src.parent))
    try:
        p = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", sha], capture_output=True, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise PairedError(f"git archive {sha[:12]}: {' '.join(p.stderr.decode(errors='replace').split())}")
        with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tf:
            tf.extractall(tmp, filter="data")
        shutil.rmtree(src, ignore_errors=True)
        tmp.rename(src)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_ref(root: Path, sha: str, progress: Callable[[str], None] | None = None) -> Path:
    """Build the driver of commit `sha` under target/paired/SHA/ (its source
    from `git archive`, the working tree's driver copied in) and return it."""
    base = root / "target" / "paired" / sha[:12]
    src = base / "src"
    if not (src / "Cargo.toml").exists():
        if progress:
            progress(f"extracting {sha[:12]} into {src}")
        extract_ref(root, sha, src)
    driver = root / DRIVER_SRC
    if not driver.exists():
        raise PairedError(f"{driver}: missing (the driver both builds run)")
    dest = src / DRIVER_SRC
    dest.parent.mkdir(parents=True, exist_ok=True)
    text = driver_for_ref(driver.read_text(), (src / KERNEL_SRC).read_text() if (src / KERNEL_SRC).exists() else "")
    # Only when it differs: a new mtime would have cargo link it again.
    if not dest.exists() or dest.read_text() != text:
        dest.write_text(text)
    if progress:
        progress(f"building {sha[:12]} (log: {base / 'build.log'})")
    return _cargo_build(src, base / "target", _toolchain(root), base / "build.log")


def build_candidate(root: Path, progress: Callable[[str], None] | None = None) -> Path:
    log = root / "target" / "paired" / "candidate-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if progress:
        progress(f"building the working tree (log: {log})")
    return _cargo_build(root, root / "target", _toolchain(root), log)


def driver_runner(exe: Path, configs: Path) -> Callable[[str], Run]:
    """A runner for `run_pairs`: one fresh process of `exe` per run."""

    def run(w: str) -> Run:
        wl = WORKLOADS[w]
        cfg = configs / f"{w}.toml"
        if not cfg.exists():
            cfg.write_text(wl.toml)
        p = subprocess.run([str(exe), str(cfg), wl.events], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            msg = " ".join(p.stderr.split()) or f"exit code {p.returncode}"
            raise PairedError(f"{exe} {w}: {msg}")
        return parse_driver_output(p.stdout)

    return run


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def paired(ref: str, pairs: int, workloads: Sequence[str], start: Path,
           progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build `ref` and the working tree, run `pairs` interleaved pairs of
    each workload, and return the summary (JSON-ready)."""
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        raise PairedError(f"--workloads: unknown {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")
    if pairs < 1:
        raise PairedError(f"--pairs {pairs}: at least 1")
    root = repo_root(start)
    sha = resolve(root, ref)
    # What the candidate is, as it is built (the tree may change later).
    head = _git(root, "rev-parse", "HEAD")
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    exes = {REF: build_ref(root, sha, progress), CAND: build_candidate(root, progress)}
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="foliosim-paired.") as d:
        runners = {side: driver_runner(exe, Path(d)) for side, exe in exes.items()}
        runs = run_pairs(runners, pairs, workloads, progress)
    return {
        "ref": ref,
        "ref_commit": sha,
        "candidate": f"working tree at {head[:12]}" + (" (with uncommitted changes)" if dirty else ""),
        "candidate_commit": head,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "nr_cpus": os.cpu_count(),
        "workloads": {w: WORKLOADS[w].toml for w in workloads},
        "results": summarize(runs),
    }


def _si(x: float) -> str:
    for div, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " K")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def format_summary(s: dict[str, Any]) -> str:
    """The summary as a table: per workload the median rate of each side
    [min-max], and the per-pair ratio's median [IQR] (min-max)."""
    lines = [
        f"paired: ref {s['ref']} ({s['ref_commit'][:12]}) vs candidate {s['candidate']}",
        f"load average before {s['load_average_before']}, after {s['load_average_after']} ({s['nr_cpus']} CPUs)",
        f"{'workload':<14} {'pairs':>5}  {'ref (median [min-max])':<26} {'candidate (median [min-max])':<30} ratio cand/ref: median [IQR] (min-max)",
    ]
    for w, r in s["results"].items():
        ref, cand, q = r[REF], r[CAND], r["ratio"]
        lines.append(
            f"{w:<14} {r['pairs']:>5}  {_si(ref['median']) + ' [' + _si(ref['min']) + '-' + _si(ref['max']) + ']':<26} "
            f"{_si(cand['median']) + ' [' + _si(cand['min']) + '-' + _si(cand['max']) + ']':<30} "
            f"{q['median']:.3f} [{q['q1']:.3f}-{q['q3']:.3f}] ({q['min']:.3f}-{q['max']:.3f})  {r['unit']}"
        )
    return "\n".join(lines)


def main_paired(ref: str, pairs: int, workloads: Sequence[str], as_json: bool, show_progress: bool) -> int:
    def progress(msg: str) -> None:
        print(f"foliosim bench --paired: {msg}", file=sys.stderr, flush=True)

    s = paired(ref, pairs, workloads, Path.cwd(), progress if show_progress else None)
    print(json.dumps(s) if as_json else format_summary(s))
    return 0
