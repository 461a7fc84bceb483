"""A dependency-free progress bar on stderr.

It stays hidden for the first couple of seconds (short runs print nothing),
and is off when stderr is not a terminal or when asked to be quiet.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

__all__ = ["ProgressBar", "fmt_s"]


def fmt_s(s: float) -> str:
    """Host seconds as `42s`, `3m05s` or `1h02m`."""
    if s != s or s < 0:  # NaN
        return "?"
    if s < 60:
        return f"{s:.0f}s"
    m, s = divmod(int(s), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


class ProgressBar:
    """Callable as ``bar(sim_s, sim_total_s)`` (the ``_core`` progress
    callback); returns True to let the run go on. Use as a context manager so
    the line is cleared at the end."""

    def __init__(self, label: str = "", *, enabled: bool | None = None,
                 stream: TextIO | None = None, delay_s: float = 2.0, unit: str = "sim s"):
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.label = label
        self.unit = unit
        self.delay_s = delay_s
        self.start = time.monotonic()
        self.shown = False
        # Appended to the line: what is running now (`reproduce`'s runs).
        self.detail = ""
        self._last = 0.0

    def __call__(self, sim_s: float, sim_total_s: float) -> bool:
        if not self.enabled:
            return True
        now = time.monotonic()
        elapsed = now - self.start
        if elapsed < self.delay_s or now - self._last < 0.1:
            return True
        self._last = now
        frac = min(max(sim_s / sim_total_s, 0.0), 1.0) if sim_total_s > 0 else 0.0
        eta = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
        prec = 2 if self.unit == "sim s" else 0
        width = shutil.get_terminal_size((80, 24)).columns
        tail = f" {frac * 100:3.0f}% {sim_s:.{prec}f}/{sim_total_s:.{prec}f} {self.unit}  {fmt_s(elapsed)} elapsed, eta {fmt_s(eta)}"
        if self.detail:
            tail += f"; {self.detail}"
        head = f"{self.label} " if self.label else ""
        bar_w = max(10, min(40, width - len(head) - len(tail) - 3))
        filled = round(frac * bar_w)
        line = f"{head}[{'#' * filled}{'.' * (bar_w - filled)}]{tail}"
        self.stream.write("\r" + line[: width - 1] + "\x1b[K")
        self.stream.flush()
        self.shown = True
        return True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
