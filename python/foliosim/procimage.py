"""The process image of `foliosim calibrate`: what a will-it-scale task's
address space holds when its loop starts, on this host
(validation/image_layout.c under `setarch -R`, ASLR off) against the
model's (mm/exec.rs GLIBC_2_36_X86_64, every workload of validation/ starts
with it).

The image is not a time but the pages a task has before its first op: where
they are decides what later faults find (read1's buffer spills into a bss
page nothing touched before the loop), and their sum is the baseline every
RSS row of `foliosim validate` subtracts. It is measured on the host and
compared piece by piece (the pieces matched by their start address, the
same with ASLR off), and its residual is the resident pages the model has
elsewhere than the host, or not at all: a host with another C library or
another binary layout shows there, and mm/exec.rs must be remeasured.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from typing import Any

from ._host import HostError, build_validation, why_failed

# image_layout's lines (stderr): "LO-HI PERMS SIZE kB rss R kB anon A kB NAME[ pages 0-3,25]".
LINE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+)\s+\d+ kB rss\s+(\d+) kB anon\s+(\d+) kB ?(.*?)(?: pages (\S+))?$")


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    rss_kib: int
    anon_kib: int
    name: str
    pages: frozenset[int]


def parse_pages(text: str) -> frozenset[int]:
    """"0-1,8" -> {0, 1, 8}."""
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def parse(stderr: str) -> list[dict[str, Any]]:
    """image_layout's mapping lines as plain records (JSON-ready: they go
    into calibrate's measurements file)."""
    out = []
    for line in stderr.splitlines():
        m = LINE.match(line.rstrip())
        if not m:
            continue
        lo, hi, perms, rss, anon, name, pages = m.groups()
        out.append({"start": int(lo, 16), "end": int(hi, 16), "perms": perms, "rss_kib": int(rss), "anon_kib": int(anon),
                    "name": name.strip(), "pages": sorted(parse_pages(pages or ""))})
    return out


def measure() -> list[dict[str, Any]]:
    """Run validation/image_layout with ASLR off; its mappings."""
    binary = build_validation() / "image_layout"
    try:
        r = subprocess.run(["setarch", "-R", str(binary), "-s", "0.1", "-w", "0"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HostError(f"image_layout: {e}") from e
    if r.returncode != 0:
        raise HostError(f"image_layout failed: {why_failed(r)}")
    maps = parse(r.stderr)
    if not maps:
        raise HostError("image_layout printed no mapping")
    return maps


def model_image() -> list[dict[str, Any]]:
    from . import _core
    return json.loads(_core.process_image_json())


def compare(host: list[dict[str, Any]], model: list[dict[str, Any]]) -> dict[str, Any]:
    """Host against model, piece by piece (matched by start address):
    rows of (what, host pages, model pages, pages only on one side), the
    resident totals and the residual (pages in the wrong place or missing,
    over the host's resident pages)."""
    by_start = {p["start"]: p for p in model}
    rows = []
    seen = set()
    for h in host:
        hp = set(h["pages"])
        p = by_start.get(h["start"])
        if p is None:
            if hp:
                rows.append({"start": h["start"], "what": h["name"] or "anonymous", "host": len(hp), "model": 0,
                             "host_only": len(hp), "model_only": 0, "len_differs": False})
            continue
        seen.add(p["start"])
        mp = {i for a, b in p["resident"] for i in range(a, b)}
        special = p["kind"] == "special"  # vvar, vdso: no page of the process, one piece in the model
        if special:
            mp = hp = set()
        rows.append({"start": h["start"], "what": p["what"], "host": len(hp), "model": len(mp),
                     "host_only": len(hp - mp), "model_only": len(mp - hp),
                     "len_differs": not special and h["end"] - h["start"] != p["len"]})
    for p in model:
        if p["start"] not in seen and p["resident"]:
            n = sum(b - a for a, b in p["resident"])
            rows.append({"start": p["start"], "what": p["what"] + " (not on the host)", "host": 0, "model": n,
                         "host_only": 0, "model_only": n, "len_differs": True})
    host_pages = sum(r["host"] for r in rows)
    model_pages = sum(r["model"] for r in rows)
    wrong = sum(r["host_only"] + r["model_only"] for r in rows)
    return {"rows": rows, "host_kib": 4 * host_pages, "model_kib": 4 * model_pages,
            "host_anon_kib": sum(h["anon_kib"] for h in host), "misplaced_pages": wrong,
            "residual": wrong / host_pages if host_pages else 0.0}


def format_compare(c: dict[str, Any]) -> list[str]:
    out = [f"process image (validation/image_layout.c, ASLR off) against the model's (mm/exec.rs): resident "
           f"{c['host_kib']} KiB on the host, {c['model_kib']} KiB in the model; {c['misplaced_pages']} pages resident on one side "
           f"only (residual {100 * c['residual']:.1f}% of the host's)"]
    for r in c["rows"]:
        if r["host_only"] or r["model_only"] or r["len_differs"]:
            out.append(f"  {r['start']:#014x} {r['what']}: host {r['host']} pages, model {r['model']}"
                       f" ({r['host_only']} only on the host, {r['model_only']} only in the model"
                       + ("; the mapping's length differs" if r["len_differs"] else "") + ")")
    return out
