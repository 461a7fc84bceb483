"""How a simulated figure compares with the published one, in a word.

Every table that puts a reproduction beside its source (the README's
headline table, the mechanism pages, docs/reproductions.md, the HTML
report, `foliosim reproduce`) takes its verdict from here, so that one
rule holds everywhere:

- "model only": the source published no figure for the row;
- "no value": the simulation gave none;
- "opposite": the two figures have different signs (a change the model
  gets the wrong way round never matches, however small either is);
- "matches": the difference is within the noise the source states for the
  figure (the row's ``noise``, a half-width in the row's unit, read from
  the source's own figures: a stated standard deviation or spread), or
  within 10% of |published|;
- "close": within 25% of |published|;
- "off": beyond.

A row without a stated noise gets no band: its difference is taken
relative to |published| alone, however small the published figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["NEAR", "VERDICTS", "count_within", "noise", "published", "verdict", "within"]

VERDICTS = ("matches", "close", "off", "opposite", "model only", "no value")
# The verdicts of a row within 25% of its published figure.
NEAR = ("matches", "close")


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def published(row: Mapping[str, Any]) -> Any:
    """A row's published figure (None: the source published none). Rows name
    it ``"published"``; ``"seed"``, the name before, is read for one release."""
    return row["published"] if "published" in row else row.get("seed")


def noise(row: Mapping[str, Any]) -> float:
    """The half-width of the noise band the source states for the row's
    published figure, in the row's unit; 0 where it states none."""
    n = _num(row.get("noise"))
    return abs(n) if n is not None else 0.0


def verdict(row: Mapping[str, Any]) -> str:
    """One of `VERDICTS` for a row {published, simulated, noise?} (see the
    module's docstring for the rule)."""
    pub, sim = _num(published(row)), _num(row.get("simulated"))
    if pub is None:
        return "model only"
    if sim is None:
        return "no value"
    if pub * sim < 0:
        return "opposite"
    d = abs(sim - pub)
    if d <= noise(row):
        return "matches"
    rel = d / abs(pub) if pub else (0.0 if d == 0 else math.inf)
    return "matches" if rel <= 0.10 else "close" if rel <= 0.25 else "off"


def within(row: Mapping[str, Any]) -> bool:
    """Whether a row with a published figure is within 25% of it (or of its
    stated noise) and of the same sign."""
    return verdict(row) in NEAR


def count_within(rows: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(rows within 25%, rows with a published figure): a row the model gave
    no value for counts against it."""
    judged = [r for r in rows if verdict(r) != "model only"]
    return sum(1 for r in judged if within(r)), len(judged)
