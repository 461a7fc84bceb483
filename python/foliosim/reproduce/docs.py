"""`docs/reproductions.md` and `docs/reproductions.json`: every experiment's
rows, generated from the experiments and checked against the code.

    python -m foliosim.reproduce.docs write   # `make reproductions`: run all, write both
    python -m foliosim.reproduce.docs write NAME...  # rerun only these (the others' inputs unchanged)
    python -m foliosim.reproduce.docs check   # `make check-reproductions`: run all, compare
    python -m foliosim.reproduce.docs stale   # the experiments whose inputs changed (no run)
    python -m foliosim.reproduce.docs render  # rewrite the Markdown from the JSON only
    python -m foliosim.reproduce.docs rehash  # new input hashes, rows kept: only after an
                                              # output-neutral change (golden files identical)

`-j N` (or $FOLIOSIM_JOBS) runs N simulations at a time, sensitivity
variants included; the default is the host's CPUs.

The JSON keeps, per experiment, its rows, notes and sources and the hash of
everything its rows depend on (`inputs_sha256`: the experiment file, the
machine profiles, the engine's and the runner's sources and the lock file),
so a test can tell cheaply whether the committed tables still come from the
committed code: `tests/python/test_reproductions.py` recomputes the hashes,
reruns the cheap experiments row by row, and checks that the Markdown is the
rendering of the JSON.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import time
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .. import programs as _programs
from ..progress import fmt_s
from ..result import write_text_atomic
from . import find, load_all, run_experiments
from .runner import Status
from .spec import ExperimentError

__all__ = ["check", "inputs_hash", "main", "rehash", "render", "repo_root", "stale", "write"]

# Experiments a test reruns (`make test`): the cheap ones, a minute or two
# of host time together; the others are checked by their inputs' hash and by
# `make check-reproductions`.
CHEAP = ("core-pf1-scaling", "spf-vs-per-vma", "mthp-tlb-reach")

MECHANISM_TITLES = {
    "core": "The simulator core",
    "large-anon-folios": "Large anonymous folios (mTHP)",
    "speculative-page-faults": "Speculative page faults and per-VMA locks",
    "pagecache-promotion": "Page-cache promotion",
    "free-page-reporting": "Free page reporting",
    "lazy-unmap-flush": "Lazy unmap flush (LUF)",
    "cloud-host": "The cloud host: all five together",
}


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def _files(root: Path, patterns: Iterable[str]) -> list[Path]:
    out: set[Path] = set()
    for pat in patterns:
        out.update(p for p in root.glob(pat) if p.is_file())
    return sorted(out)


ENGINE = ("crates/foliosim/src/**/*.rs", "crates/foliosim/Cargo.toml", "crates/foliosim-py/src/**/*.rs",
          "crates/foliosim-py/Cargo.toml", "Cargo.lock", "profiles/*.toml", "python/foliosim/reproduce/__init__.py",
          "python/foliosim/reproduce/expr.py", "python/foliosim/reproduce/spec.py", "python/foliosim/reproduce/runner.py")


def inputs_hash(exp_file: Path, root: Path | None = None) -> str:
    """SHA-256 of what an experiment's rows depend on: its file, the engine
    and bindings sources, the profiles, the runner, the lock file (paths and
    contents, in a fixed order)."""
    root = root or repo_root()
    h = hashlib.sha256()
    for p in [exp_file, *_files(root, ENGINE)]:
        h.update(str(p.relative_to(root) if p.is_relative_to(root) else p.name).encode())
        h.update(b"\0")
        h.update(_content(p, root))
        h.update(b"\0")
    for t in _traces(exp_file.read_text(encoding="utf-8")):
        h.update(_programs.identity(t).encode())
        h.update(b"\0")
    return h.hexdigest()


def _traces(text: str) -> list[str]:
    """The recordings an experiment names (`path = "@NAME"`, or a template
    such as "@ebizzy-t{threads}": every trace whose name it begins)."""
    refs = re.findall(r'"@([A-Za-z0-9_.-]+)', text)
    return sorted(n for n in _programs.TRACES if any(n.startswith(r) for r in refs))


def _content(p: Path, root: Path) -> bytes:
    """What of a file the rows depend on: a profile's parsed values (a
    comment or a source line changes no result), any other file whole."""
    if p.suffix == ".toml" and p.parent == root / "profiles":
        with p.open("rb") as f:
            return json.dumps(tomllib.load(f), sort_keys=True, default=str).encode()
    return p.read_bytes()


def _keep(rep: dict[str, Any], root: Path) -> dict[str, Any]:
    path = find()[rep["name"]]
    return {
        "name": rep["name"], "title": rep["title"], "mechanism": rep.get("mechanism", ""),
        "file": str(path.relative_to(root)) if path.is_relative_to(root) else path.name,
        "inputs_sha256": inputs_hash(path, root),
        "rows": rep["rows"], "notes": rep["notes"], "sources": rep.get("sources", {}),
        "windows": rep.get("windows", []),
        **({"sensitivity": rep["sensitivity"]} if rep.get("sensitivity") else {}),
    }


# --------------------------------------------------------------- Markdown --
def _fmt(v: Any) -> str:
    from ..report import fmt

    return str(fmt(v))


def _cell(s: Any) -> str:
    return str(s if s is not None else "").replace("|", "/").replace("\n", " ")


def _source_line(sid: str, s: dict[str, Any]) -> str:
    bits = [f"**{sid}**: {s.get('title', '')}"]
    if s.get("message_id"):
        bits.append(f"message-id `{s['message_id']}`")
    if s.get("url"):
        bits.append(f"<{s['url']}>")
    if s.get("commit"):
        bits.append(f"commit `{s['commit']}`")
    if s.get("list") or s.get("date"):
        bits.append(", ".join(x for x in (s.get("list"), s.get("date")) if x))
    if s.get("where"):
        bits.append(str(s["where"]))
    return "- " + "; ".join(bits)


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def render(data: dict[str, Any]) -> str:
    """The Markdown of `docs/reproductions.json`."""
    from ..doctables import published_cell, within_cell
    from ..report import difference
    from ..verdict import verdict

    exps = data["experiments"]
    out = ["# Reproductions", "",
           "Every experiment's rows: the published figure beside the simulated one, with the notes",
           "and the public sources of the figures. Generated by `make reproductions` from",
           "`experiments/*/*.toml` (the rows are also in `reproductions.json`); do not edit by hand:",
           "`make test` checks that both still come from the code, `make check-reproductions`",
           "reruns every experiment. How to read and add experiments: `docs/experiments.md`.", ""]
    mechs: list[str] = []
    for e in exps:
        if e["mechanism"] not in mechs:
            mechs.append(e["mechanism"])
    for m in mechs:
        out.append(f"- [{MECHANISM_TITLES.get(m, m)}](#{_anchor(MECHANISM_TITLES.get(m, m))})")
    for m in mechs:
        out += ["", f"## {MECHANISM_TITLES.get(m, m)}", "",
                f"Mechanism: [docs/mechanisms/{m}.md](mechanisms/{m}.md)."]
        for e in (x for x in exps if x["mechanism"] == m):
            within = within_cell(e["rows"])
            out += ["", f"### `{e['name']}`: {_cell(e['title'])}", "",
                    f"From [`{e['file']}`](../{e['file']}); `foliosim reproduce {e['name']}`. "
                    + (f"Rows within 25% of their published figure: {within}." if within != "—"
                       else "No published figure: the model's own rows."), "",
                    "| label | metric | published | simulated | difference | verdict | note |",
                    "| --- | --- | ---: | ---: | ---: | --- | --- |"]
            for r in e["rows"]:
                pub = r.get("published", r.get("seed"))
                d, p = difference(pub, r.get("simulated"))
                diff = "—" if d is None else (f"{_fmt(d)} ({p:+.1f}%)" if p is not None else _fmt(d))
                unit = f" {r['unit']}" if r.get("unit") else ""
                sim = "—" if r.get("simulated") is None else f"{_fmt(r.get('simulated'))}{unit}"
                head = " **(headline)**" if r.get("headline") else ""
                out.append(f"| {_cell(r.get('label'))}{head} | {_cell(r.get('metric'))} | {_cell(published_cell(r))} | {sim} | "
                           f"{diff} | {verdict(r)} | {_cell(r.get('note'))} |")
            out += _sensitivity_table(e)
            if e["notes"]:
                out += ["", "Notes:", ""] + [f"- {_cell(n)}" for n in e["notes"]]
            if e.get("windows"):
                out += ["", "Measured windows (whole iterations of each task's loop: will-it-scale's munmaps, passes, "
                        "jobs reaped, tokens; `steady`: at least one before the window and one inside it):", "",
                        "| run | window | tasks | iterations before (min per task) | in the window (min per task) "
                        "| in the window (all tasks) | ops per iteration | |",
                        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
                for w in e["windows"]:
                    state = "ok" if w["ok"] else f"**short**: {_cell(w['reason'])}"
                    out.append(f"| {_cell(w['label'])} | {w['kind']} | {w['tasks']} | {_fmt(w['iterations_before_min'])} | "
                               f"{_fmt(w['iterations_measured_min'])} | {_fmt(w['iterations_measured'])} | "
                               f"{_fmt(w['ops_per_iteration'])} | {state} |")
            figs: dict[str, list[str]] = {}
            for r in e["rows"]:
                for s in r.get("sources") or []:
                    q = s.get("quote")
                    quoted = " … ".join(q) if isinstance(q, list) else q
                    line = f"{s['figure']} ({s['where']})" + (f": `{quoted.replace('`', chr(39))}`" if quoted else "")
                    figs.setdefault(s["source"], [])
                    if line not in figs[s["source"]]:
                        figs[s["source"]].append(line)
            if e["sources"]:
                out += ["", "Sources:", ""]
                for sid, s in e["sources"].items():
                    out.append(_source_line(sid, s))
                    out += [f"  - {_cell(f)}" for f in figs.get(sid, [])]
    return "\n".join(out) + "\n"


def _sensitivity_table(e: dict[str, Any]) -> list[str]:
    """Each published row beside its value with every [sensitivity] cost at
    each factor of its profile value."""
    sens = e.get("sensitivity")
    rows = [r for r in e["rows"] if r.get("sensitivity")]
    if not sens or not rows:
        return []
    costs, factors = list(sens["costs"]), sens["factors"]
    out = ["", "Sensitivity: each published row rerun with one profile cost at "
           + " and ".join(f"x{_fmt(f)}" for f in factors) + " its value (the others as profiled):", "",
           "| label | simulated | " + " | ".join(f"`{c}`" + ("" if sens["costs"][c] is None else f" = {_fmt(sens['costs'][c])}") + ": "
                                         + " / ".join(f"x{_fmt(f)}" for f in factors)
                                         for c in costs) + " |",
           "| --- | ---: | " + " | ".join("---:" for _ in costs) + " |"]
    for r in rows:
        unit = f" {r['unit']}" if r.get("unit") else ""
        by = {(s["cost"], s["factor"]): s["simulated"] for s in r["sensitivity"]}
        cells = [" / ".join("—" if by.get((c, f)) is None else _fmt(by[(c, f)]) for f in factors) + unit for c in costs]
        out.append(f"| {_cell(r.get('label'))}: {_cell(r.get('metric'))} | {_fmt(r.get('simulated'))}{unit} | " + " | ".join(cells) + " |")
    return out


# ----------------------------------------------------------------- actions --
class _StatusLine:
    """`make reproductions`' progress on stderr: on a terminal one line
    rewritten every second; in a log a line when a run finishes (at most
    one every 10 s) and every 30 s while none does."""

    def __init__(self, label: str, stream: TextIO | None = None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.last = -1.0
        self.done = 0
        self.shown = False

    def __call__(self, st: Status) -> None:
        now = time.monotonic()
        if not self.tty and not (now - self.last >= 30 or (st.done != self.done and now - self.last >= 10)):
            return
        self.last, self.done = now, st.done
        line = f"{self.label}: {st.text()}"
        if self.tty:
            width = shutil.get_terminal_size((120, 24)).columns
            self.stream.write("\r" + line[: width - 1] + "\x1b[K")
            self.shown = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self, st: Status | None) -> None:
        if self.shown:
            self.stream.write("\n")
        if st is not None:
            self.stream.write(f"{self.label}: {st.done} runs in {fmt_s(st.elapsed_s)}\n")
        self.stream.flush()


def _run_all(progress: bool, names: Sequence[str] | None = None, jobs: int | None = None) -> list[dict[str, Any]]:
    exps = load_all(names)
    total = len(exps)
    line = _StatusLine("make reproductions") if progress else None
    last: list[Status] = []

    def status(st: Status) -> None:
        last[:] = [st]
        if line is not None:
            line(st)

    try:
        reps = list(run_experiments(exps, jobs=jobs, status=status))
    finally:
        if line is not None:
            line.close(last[0] if last else None)
    if len(reps) != total or any(r.get("interrupted") for r in reps):
        raise SystemExit("foliosim: interrupted: nothing written")
    return reps


def write(root: Path | None = None, progress: bool = True, names: Sequence[str] = (), jobs: int | None = None) -> None:
    """Run every experiment (or only `names`, keeping the others' committed
    rows, which must still come from the same inputs) and write both files."""
    root = root or repo_root()
    if names:
        old = json.loads((root / "docs" / "reproductions.json").read_text(encoding="utf-8"))["experiments"]
        # Before anything runs: a finished run is never lost to this check.
        stale = [e["name"] for e in old if e["name"] not in names and e["inputs_sha256"] != inputs_hash(root / e["file"], root)]
        if stale:
            raise SystemExit(f"foliosim: {', '.join(stale)}: inputs changed too; run `make reproductions` (all), "
                             "or `rehash` first if the change moved no output")
        fresh = {r["name"]: _keep(r, root) for r in _run_all(progress, names, jobs)}
        kept = [fresh.pop(e["name"], e) for e in old]
        # A new experiment goes where a whole write would put it.
        order = {n: i for i, n in enumerate(find())}
        exps = sorted(kept + list(fresh.values()), key=lambda e: order.get(e["name"], len(order)))
        data = {"generated_by": "make reproductions", "experiments": exps}
    else:
        data = {"generated_by": "make reproductions", "experiments": [_keep(r, root) for r in _run_all(progress, jobs=jobs)]}
    write_text_atomic(root / "docs" / "reproductions.json", json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    write_text_atomic(root / "docs" / "reproductions.md", render(data))


def rehash(root: Path | None = None) -> list[str]:
    """Record the current input hashes and keep every row: for a change that
    moved no output (a refactor whose golden files are byte-identical), so the
    tables need not be rerun. Returns the experiments whose hash moved."""
    root = root or repo_root()
    data = json.loads((root / "docs" / "reproductions.json").read_text(encoding="utf-8"))
    moved = []
    for e in data["experiments"]:
        h = inputs_hash(root / e["file"], root)
        if h != e["inputs_sha256"]:
            e["inputs_sha256"] = h
            moved.append(e["name"])
    write_text_atomic(root / "docs" / "reproductions.json", json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    write_text_atomic(root / "docs" / "reproductions.md", render(data))
    return moved


def compare_rows(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Where two experiments' rows and notes differ (empty: identical)."""
    out = []
    if len(old["rows"]) != len(new["rows"]):
        out.append(f"{old['name']}: {len(old['rows'])} rows committed, {len(new['rows'])} now")
    for a, b in zip(old["rows"], new["rows"], strict=False):
        for k in ("label", "metric", "unit", "published", "noise", "simulated", "note", "window"):
            if a.get(k) != b.get(k):
                out.append(f"{old['name']}: {a.get('label')} / {a.get('metric')}: {k} {a.get(k)!r} committed, {b.get(k)!r} now")
    if old["notes"] != new["notes"]:
        out.append(f"{old['name']}: notes differ")
    return out


def stale(root: Path | None = None) -> list[str]:
    """The experiments whose inputs changed since their rows were made (no
    run: their hashes only)."""
    root = root or repo_root()
    data = json.loads((root / "docs" / "reproductions.json").read_text(encoding="utf-8"))
    return [e["name"] for e in data["experiments"] if e["inputs_sha256"] != inputs_hash(root / e["file"], root)]


def check(root: Path | None = None, progress: bool = True, jobs: int | None = None) -> list[str]:
    root = root or repo_root()
    data = json.loads((root / "docs" / "reproductions.json").read_text(encoding="utf-8"))
    committed = {e["name"]: e for e in data["experiments"]}
    problems: list[str] = []
    for rep in _run_all(progress, jobs=jobs):
        new = _keep(rep, root)
        old = committed.get(new["name"])
        if old is None:
            problems.append(f"{new['name']}: not in docs/reproductions.json")
            continue
        problems += compare_rows(old, new)
        if old["inputs_sha256"] != new["inputs_sha256"]:
            problems.append(f"{new['name']}: inputs changed since the tables were made")
    if (root / "docs" / "reproductions.md").read_text(encoding="utf-8") != render(data):
        problems.append("docs/reproductions.md is not the rendering of docs/reproductions.json")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except ExperimentError as e:
        # A bad or unrunnable experiment (e.g. a trace not recorded here):
        # one line naming the file and key, as `foliosim reproduce` does.
        print(f"foliosim: {e}", file=sys.stderr)
        return 2


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    jobs = None
    for flag in ("-j", "--jobs"):
        if flag in args:
            i = args.index(flag)
            value = args[i + 1] if i + 1 < len(args) else ""
            if not value.isdigit() or int(value) < 1:
                print(f"foliosim: {flag} {value}: expected a whole number of runs at a time, at least 1", file=sys.stderr)
                return 2
            jobs = int(value)
            del args[i:i + 2]
    what = args[0] if args else ""
    root = repo_root()
    if what == "write":
        write(root, names=args[1:], jobs=jobs)
        print("wrote docs/reproductions.json and docs/reproductions.md")
        return 0
    if what == "render":
        data = json.loads((root / "docs" / "reproductions.json").read_text(encoding="utf-8"))
        write_text_atomic(root / "docs" / "reproductions.md", render(data))
        return 0
    if what == "rehash":
        moved = rehash(root)
        print(f"rehashed {len(moved)} experiments (rows kept): {', '.join(moved) or 'none'}")
        return 0
    if what == "stale":
        names = stale(root)
        print(" ".join(names) if names else "reproductions: every experiment's inputs unchanged")
        return 1 if names else 0
    if what == "check":
        problems = check(root, jobs=jobs)
        for p in problems:
            print(f"foliosim: {p}", file=sys.stderr)
        print("reproductions: up to date" if not problems else f"reproductions: {len(problems)} differences (run `make reproductions`)")
        return 1 if problems else 0
    print("usage: python -m foliosim.reproduce.docs [-j N] write [NAME...]|check|stale|render|rehash", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
