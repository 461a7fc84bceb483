"""The real programs the published experiments replay (issue #29), their
recordings and where those are.

An experiment names a recording as `workload.path = "@NAME"`; `resolve`
turns the name into a trace file:

- a trace small enough to commit is in `experiments/traces/NAME.fstrace`
  (ebizzy's, a few KiB each), recorded by `make traces` like the others;
- a trace too large to commit (the Linux kernel build) is made by `make
  traces` into the cache folder (`$FOLIOSIM_CACHE`, default
  results/cache) under a name that holds the hash of its inputs (the
  recipe and the program's source), so a changed recipe or source is
  recorded again and never mistaken for the old one. Such a trace has a
  small committed excerpt, a real recording of a few files of the same
  build, `experiments/traces/NAME.small.fstrace`: CI and the tests replay
  it (`foliosim reproduce --small-traces`, or FOLIOSIM_TRACES=small), and
  the experiment's result says it ran on the excerpt.

A trace that is neither committed nor recorded is an error naming the make
target, never a silent stand-in.

The programs are built from their public sources, never committed here:

- ebizzy 0.3 (Valerie Henson; GPL-2.0), as the Linux Test Project keeps it
  (github.com/linux-test-project/ltp, utils/benchmark/ebizzy-0.3):
  `make programs EBIZZY_SRC=DIR`, DIR a checkout or a bare git directory
  of that repository, or the ebizzy-0.3 folder itself;
- XSBench (Argonne National Laboratory; MIT licence),
  github.com/ANL-CESAR/XSBench, its openmp-threading version:
  `XSBENCH_SRC=DIR` likewise;
- the Linux kernel: Debian's linux-source-6.12 (GPL-2.0,
  /usr/src/linux-source-6.12.tar.xz; `apt-get install linux-source-6.12`).

    python -m foliosim.programs build [NAME...]    # `make programs`
    python -m foliosim.programs record [NAME...]   # `make traces`: the missing ones
    python -m foliosim.programs list               # every trace, and whether it is here
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._host import HostError

KERNEL_TAR = Path("/usr/src/linux-source-6.12.tar.xz")
ENV_MODE = "FOLIOSIM_TRACES"


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def committed_dir() -> Path:
    return repo_root() / "experiments" / "traces"


def cache_dir() -> Path:
    return Path(os.environ.get("FOLIOSIM_CACHE") or repo_root() / "results" / "cache")


# ------------------------------------------------------------- programs --
@dataclass
class Program:
    """A program built from its public source: `sub` is the folder of the
    source inside its repository, `env` the variable naming where the
    source is, `build` the commands run in the unpacked folder, `binary`
    the file they make."""

    name: str
    origin: str
    licence: str
    env: str
    sub: str
    marker: str
    build: list[list[str]]
    binary: str

    def source(self) -> Path:
        where = os.environ.get(self.env)
        if not where:
            raise HostError(f"{self.name}: set {self.env} to its source ({self.origin}): a checkout, a bare git "
                            f"directory of it, or its {self.sub} folder")
        p = Path(where)
        if not p.exists():
            raise HostError(f"{self.env}={where}: no such file or directory")
        return p

    def dir(self) -> Path:
        return cache_dir() / "programs" / self.name

    def path(self) -> Path:
        return self.dir() / self.binary

    def built(self) -> Path:
        if not self.path().exists():
            raise HostError(f"{self.name} is not built ({self.path()}): `make programs {self.env}=DIR` builds it "
                            f"from {self.origin}")
        return self.path()

    def unpack(self) -> Path:
        """Copy the source into the cache folder (from a folder, a checkout
        or a bare git directory) and return where it is."""
        src, out = self.source(), self.dir() / "src"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        if (src / self.marker).exists():
            shutil.copytree(src, out, dirs_exist_ok=True)
        elif (src / self.sub / self.marker).exists():
            shutil.copytree(src / self.sub, out, dirs_exist_ok=True)
        else:
            git = ["git", f"--git-dir={src}"] if (src / "HEAD").exists() and (src / "objects").exists() else ["git", "-C", str(src)]
            arch = subprocess.run([*git, "archive", "HEAD", self.sub], capture_output=True)
            if arch.returncode != 0:
                raise HostError(f"{self.env}={src}: neither {self.marker} nor {self.sub}/{self.marker} there, and not a git "
                                f"repository holding {self.sub} ({arch.stderr.decode(errors='replace').strip()[-200:]})")
            sub = self.dir() / "git"
            shutil.rmtree(sub, ignore_errors=True)
            sub.mkdir()
            subprocess.run(["tar", "x", "-C", str(sub)], input=arch.stdout, check=True)
            shutil.copytree(sub / self.sub, out, dirs_exist_ok=True)
            shutil.rmtree(sub)
        return out

    def make(self) -> Path:
        src = self.unpack()
        for cmd in self.build:
            r = subprocess.run(cmd, cwd=src, capture_output=True, text=True)
            if r.returncode != 0:
                raise HostError(f"{self.name}: `{' '.join(cmd)}` exited {r.returncode}: {r.stderr.strip()[-300:]}")
        self.dir().mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / Path(self.binary).name, self.path())
        (self.dir() / "source.sha256").write_text(_tree_hash(src) + "\n")
        return self.path()

    def source_hash(self) -> str:
        p = self.dir() / "source.sha256"
        return p.read_text().strip() if p.exists() else "unbuilt"


PROGRAMS = {
    "ebizzy": Program(
        "ebizzy", "the Linux Test Project's ebizzy 0.3 (github.com/linux-test-project/ltp, utils/benchmark/ebizzy-0.3)",
        "GPL-2.0", "EBIZZY_SRC", "utils/benchmark/ebizzy-0.3", "ebizzy.c",
        [["gcc", "-O2", "-pthread", "-o", "ebizzy", "ebizzy.c"]], "ebizzy"),
    "xsbench": Program(
        "xsbench", "XSBench (github.com/ANL-CESAR/XSBench, openmp-threading)", "MIT", "XSBENCH_SRC",
        "openmp-threading", "Simulation.c", [["make", "-s", "CC=gcc"]], "XSBench"),
}


def _tree_hash(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(x for x in d.rglob("*") if x.is_file() and x.suffix in (".c", ".h", "") and x.name != "XSBench"
                    and x.name != "ebizzy"):
        h.update(str(p.relative_to(d)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


# --------------------------------------------------------------- traces --
@dataclass
class Trace:
    """A recording an experiment replays. `cmd` runs in the folder `cwd`
    gives (after `prepare`, not recorded); `commit` says the whole trace is
    small enough to be committed; otherwise `small` records the committed
    excerpt."""

    name: str
    what: str
    cmd: Callable[[], list[str]]
    cwd: Callable[[], Path]
    inputs: Callable[[], str]
    commit: bool = False
    prepare: Callable[[], None] = lambda: None
    small: Callable[[], tuple[list[str], Path]] | None = None
    small_prepare: Callable[[], None] = lambda: None
    recipe: dict[str, object] = field(default_factory=dict)

    def key(self) -> str:
        """The hash of what the recording depends on: the recipe and the
        program's source."""
        h = hashlib.sha256(json.dumps({"name": self.name, "what": self.what, "recipe": self.recipe,
                                       "inputs": self.inputs()}, sort_keys=True).encode())
        return h.hexdigest()[:16]

    def committed(self) -> Path:
        return committed_dir() / (f"{self.name}.fstrace" if self.commit else f"{self.name}.small.fstrace")

    def cached(self) -> Path:
        return cache_dir() / "traces" / f"{self.name}-{self.key()}.fstrace"


def _ebizzy(threads: int) -> Trace:
    seconds = 3
    return Trace(
        f"ebizzy-t{threads}", f"ebizzy -mTt {threads} -S {seconds}",
        lambda: [str(PROGRAMS["ebizzy"].built()), "-mTt", str(threads), "-S", str(seconds)],
        lambda: PROGRAMS["ebizzy"].dir(), lambda: PROGRAMS["ebizzy"].source_hash(), commit=True,
        recipe={"threads": threads, "seconds": seconds})


def _kernel_tree() -> Path:
    return cache_dir() / "linux-source-6.12"


_tar_hash: dict[str, str] = {}


def _kernel_inputs() -> str:
    if not KERNEL_TAR.exists():
        return "missing"
    key = f"{KERNEL_TAR}:{KERNEL_TAR.stat().st_size}:{KERNEL_TAR.stat().st_mtime_ns}"
    if key not in _tar_hash:
        h = hashlib.sha256()
        with KERNEL_TAR.open("rb") as f:
            while b := f.read(1 << 20):
                h.update(b)
        _tar_hash[key] = h.hexdigest()
    return _tar_hash[key]


KBUILD_JOBS = 2
KBUILD_CONFIG = "tinyconfig"
# The excerpt: these objects of lib/ rebuilt by `make -j2 vmlinux` in the
# built tree (make walks the whole tree, compiles them, relinks).
KBUILD_SMALL = ("lib/ctype.o", "lib/sort.o", "lib/string.o")


def _kernel_prepare() -> None:
    if not KERNEL_TAR.exists():
        raise HostError(f"{KERNEL_TAR} is missing: apt-get install linux-source-6.12 (the kernel build's source)")
    src = _kernel_tree()
    stamp = cache_dir() / f".configured-{KBUILD_CONFIG}"
    if not stamp.exists():
        print(f"programs: unpacking {KERNEL_TAR} into {cache_dir()} and `make {KBUILD_CONFIG} prepare` ...",
              file=sys.stderr, flush=True)
        shutil.rmtree(src, ignore_errors=True)
        cache_dir().mkdir(parents=True, exist_ok=True)
        with tarfile.open(KERNEL_TAR) as t:
            t.extractall(cache_dir(), filter="data")
        for s in cache_dir().glob(".configured-*"):
            s.unlink()
        _check(["make", "-s", KBUILD_CONFIG], src)
        _check(["make", "-s", f"-j{KBUILD_JOBS}", "prepare"], src)
        stamp.write_text("")
    _check(["make", "-s", "clean"], src)


def _kernel_small_prepare() -> None:
    src = _kernel_tree()
    if not (src / "vmlinux").exists():
        _kernel_prepare()
        _check(["make", "-s", f"-j{KBUILD_JOBS}", "vmlinux"], src)
    for o in KBUILD_SMALL:
        (src / o).unlink(missing_ok=True)


def _check(cmd: list[str], cwd: Path) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise HostError(f"`{' '.join(cmd)}` in {cwd} exited {r.returncode}: {r.stderr.strip()[-300:]}")


KBUILD = Trace(
    "linux-tinyconfig", f"Linux 6.12 (Debian linux-source-6.12), make {KBUILD_CONFIG}, make -j{KBUILD_JOBS} vmlinux "
    "after make clean (not recorded)",
    lambda: ["make", "-s", f"-j{KBUILD_JOBS}", "vmlinux"], _kernel_tree, _kernel_inputs, prepare=_kernel_prepare,
    small=lambda: (["make", "-s", f"-j{KBUILD_JOBS}", "vmlinux"], _kernel_tree()),
    small_prepare=_kernel_small_prepare,
    recipe={"config": KBUILD_CONFIG, "jobs": KBUILD_JOBS, "target": "vmlinux", "small": list(KBUILD_SMALL)})

TRACES = {t.name: t for t in [*(_ebizzy(n) for n in (1, 4, 12, 24, 48)), KBUILD]}


class TraceMissing(HostError):
    pass


def small_mode() -> bool:
    return os.environ.get(ENV_MODE, "") == "small"


def parse_ref(ref: str) -> tuple[str, bool]:
    """The recording `@NAME` names, and whether it asks for the committed
    excerpt whatever the mode (`@NAME.small`: a study that replays a piece
    of the program among other work, not the whole recording)."""
    name = ref.removeprefix("@")
    base = name.removesuffix(".small")
    return (base, True) if base != name and base in TRACES else (name, False)


def resolve(ref: str, small: bool | None = None) -> Path:
    """The trace file of `@NAME`: committed, or recorded in the cache (or,
    in small mode or as `@NAME.small`, its committed excerpt). Raises
    TraceMissing, a one-line error naming the make target, when it is not
    here."""
    name, excerpt = parse_ref(ref)
    t = TRACES.get(name)
    if t is None:
        raise TraceMissing(f"@{name}: no such recorded program (known: {', '.join(sorted(TRACES))})")
    small = True if excerpt else small
    if t.commit:
        if not t.committed().exists():
            raise TraceMissing(f"@{name}: {t.committed()} is missing: `make traces TRACES={name}` records it")
        return t.committed()
    if small if small is not None else small_mode():
        return t.committed()
    p = t.cached()
    if not p.exists():
        raise TraceMissing(f"@{name} ({t.what}) is not recorded here: `make traces TRACES={name}` records it into "
                           f"{p.parent} (or replay its committed excerpt: foliosim reproduce --small-traces)")
    return p


def identity(ref: str) -> str:
    """What of a trace an experiment's result depends on, for its inputs'
    hash: a committed trace's bytes' hash; a cached one's recipe (its
    name, which holds the inputs' hash) and the committed excerpt's bytes."""
    t = TRACES.get(parse_ref(ref)[0])
    if t is None:
        return f"unknown:{ref}"
    c = t.committed()
    body = hashlib.sha256(c.read_bytes()).hexdigest() if c.exists() else "missing"
    return f"{t.name}:{json.dumps(t.recipe, sort_keys=True)}:{body}"


def record(t: Trace, small: bool = False, quiet: bool = False) -> Path:
    from .record import record as rec

    if small:
        assert t.small is not None
        t.small_prepare()
        cmd, cwd = t.small()
        out = t.committed()
    else:
        t.prepare()
        cmd, cwd = t.cmd(), t.cwd()
        out = t.committed() if t.commit else t.cached()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        res = rec(cmd, out, quiet=quiet)
    finally:
        os.chdir(here)
    if not quiet:
        print(f"programs: {t.name}{' (excerpt)' if small else ''}: {out} ({res['bytes']:,} bytes)", file=sys.stderr)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m foliosim.programs", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the programs from their sources")
    b.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(PROGRAMS)} (default: all)")
    r = sub.add_parser("record", help="record the traces that are not here")
    r.add_argument("names", nargs="*", metavar="NAME", help="traces (default: every one missing)")
    r.add_argument("--again", action="store_true", help="record them even if they are here")
    r.add_argument("--small", action="store_true", help="record the committed excerpts instead")
    sub.add_parser("list", help="every trace and where it is")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "build":
            for n in a.names or list(PROGRAMS):
                if n not in PROGRAMS:
                    raise HostError(f"{n}: no such program (known: {', '.join(PROGRAMS)})")
                print(f"programs: {n}: {PROGRAMS[n].make()}", file=sys.stderr)
        elif a.cmd == "record":
            for n in a.names or list(TRACES):
                t = TRACES.get(n)
                if t is None:
                    raise HostError(f"{n}: no such trace (known: {', '.join(TRACES)})")
                if a.small:
                    if t.small is not None:
                        record(t, small=True)
                    continue
                out = t.committed() if t.commit else t.cached()
                if out.exists() and not a.again and not a.names:
                    continue
                record(t)
        else:
            for t in TRACES.values():
                where = t.committed() if t.commit else t.cached()
                print(f"{t.name:20} {'here' if where.exists() else 'missing':8} {where}  ({t.what})")
    except HostError as e:
        print(f"foliosim: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
