"""The result of one run, and writing it atomically."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["HOST_TIME_KEYS", "Result", "atomic_write", "deterministic_view", "remove_stale_staging", "staged_folder",
           "write_synced", "write_text_atomic"]

#: Fields that measure the host, not the simulation (``host_time_s``, and any
#: other ``host_*`` key at any depth): they differ between two runs of the same
#: config and are left out when comparing runs.
HOST_TIME_KEYS = ("host_time_s",)


def deterministic_view(raw: Any) -> Any:
    """`raw` without the host-time fields (for determinism checks)."""
    if isinstance(raw, dict):
        return {k: deterministic_view(v) for k, v in raw.items()
                if not (k in HOST_TIME_KEYS or k.startswith("host_"))}
    if isinstance(raw, list):
        return [deterministic_view(v) for v in raw]
    return raw


# ------------------------------------------------------------ staging --
# A write stages its file or folder under a hidden name beside the final
# one, `.NAME.PID.HEX.tmp`, and renames it into place when complete. A
# writer killed before the rename (SIGKILL, a power cut) leaves that name
# behind; the next write into the same folder removes it, unless the PID
# is a live process that was already running when the staging name was
# made (the writer may still be at work). A PID reused since by an
# unrelated process started later does not keep a stale name alive.
STAGING = re.compile(r"^\.(?P<name>.+)\.(?P<pid>[0-9]+)\.(?P<hex>[0-9a-f]{8})\.tmp$")
_swept: set[str] = set()


def staging_path(final: Path) -> Path:
    """The hidden staging name of `final` for this process (beside it)."""
    return final.parent / f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _started_after(pid: int, t: float) -> bool | None:
    """Whether process `pid` started after time `t` (epoch s); None if
    unknown (no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as f:
            btime = next(int(ln.split()[1]) for ln in f if ln.startswith(b"btime "))
        start = btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return start > t + 1.0  # /proc's start time is rounded down to the tick, btime to the second


def _writer_alive(pid: int, made: float) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists (another user's)
    return not _started_after(pid, made)


def remove_stale_staging(folder: str | os.PathLike) -> list[Path]:
    """Remove what killed writers left in `folder`: staging files and
    folders (`.NAME.PID.HEX.tmp`) whose writer is gone. Returns them.
    Once per folder per process (a sweep writes thousands of parts into one)."""
    d = Path(folder)
    key = os.path.realpath(d)
    if key in _swept:
        return []
    _swept.add(key)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(d))
    except OSError:
        return removed
    for e in entries:
        m = STAGING.match(e.name)
        if not m:
            continue
        try:
            made = e.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if _writer_alive(int(m["pid"]), made):
            continue
        try:
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path)
            else:
                os.unlink(e.path)
            removed.append(Path(e.path))
        except OSError:
            pass  # not ours to remove after all (permissions): leave it
    return removed


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[str]:
    """Yields a temporary path in the same folder as `path`; on success it is
    fsynced and renamed over `path` (os.replace), on failure removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(path.parent)
    # Same folder (os.replace must not cross file systems); the mode follows
    # the umask like any new file (mkstemp would make it 0600).
    tmp = str(staging_path(path))
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


@contextlib.contextmanager
def staged_folder(directory: str | os.PathLike) -> Iterator[Path]:
    """Yields an empty staging folder for the files of `directory` (created
    if needed); when the block ends without error they move in, all or
    nothing: a new folder is renamed into place whole, and into an existing
    one each file replaces its old self (sub-folders merge the same way),
    other files are left alone. On an error (a full disk) the staging
    folder is removed and `directory` is as it was."""
    d = Path(directory)
    exists = d.is_dir()
    if not exists:
        d.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(d.parent)
    if exists:
        remove_stale_staging(d)
    # Staging on the same file system as the final place (os.rename): in
    # the folder itself when it exists, so that only it need be writable.
    stage = staging_path(d / d.name if exists else d)
    stage.mkdir()  # (mode from the umask, as any new folder)
    try:
        yield stage
        if exists:
            _merge_into(stage, d)
            stage.rmdir()
        else:
            os.rename(stage, d)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _merge_into(src: Path, dst: Path) -> None:
    for e in sorted(os.scandir(src), key=lambda e: e.name):
        target = dst / e.name
        if e.is_dir(follow_symlinks=False) and target.is_dir():
            _merge_into(Path(e.path), target)
            os.rmdir(e.path)
        else:
            os.replace(e.path, target)


class Result:
    """One simulation's result.

    - ``raw``: the parsed JSON the simulator returned (see ``run_json``).
    - ``summary``: dict (ops_per_s, ops_total, tasks, ...).
    - ``counters``: DataFrame with columns ``name``, ``value`` (/proc/vmstat names).
    - ``timeseries``: DataFrame, one row per simulated second (column ``t_s``).
    """

    def __init__(self, raw: dict[str, Any] | str):
        self.raw: dict[str, Any] = json.loads(raw) if isinstance(raw, str) else raw

    # -- views -------------------------------------------------------------
    @property
    def summary(self) -> dict[str, Any]:
        return dict(self.raw.get("summary") or {})

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.raw.get("config") or {})

    @property
    def interrupted(self) -> bool:
        return bool(self.raw.get("interrupted", False))

    @property
    def sim_time_s(self) -> float:
        return float(self.raw.get("sim_time_s", 0.0))

    @property
    def host_time_s(self) -> float:
        return float(self.raw.get("host_time_s", 0.0))

    @property
    def vmstat(self) -> dict[str, Any]:
        return dict(self.raw.get("vmstat") or {})

    @property
    def counters(self) -> pd.DataFrame:
        import pandas as pd  # here, not at import: `foliosim record` and the CLI start without it
        vm = self.raw.get("vmstat") or {}
        return pd.DataFrame({"name": list(vm.keys()), "value": list(vm.values())})

    @property
    def timeseries(self) -> pd.DataFrame:
        import pandas as pd
        ts = self.raw.get("timeseries") or {}
        return pd.DataFrame({k: pd.Series(v) for k, v in ts.items()})

    # -- output ------------------------------------------------------------
    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.raw, indent=indent)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write result.json, vmstat.parquet and timeseries.parquet into
        `directory` (created if needed), all or nothing.

        The files are written into a hidden staging folder first and move in
        only when all three are complete (`staged_folder`). A failure (a
        full disk) leaves `directory` as it was and no staging folder
        behind; what a killed writer left is removed by the next write."""
        d = Path(directory)
        with staged_folder(d) as stage:
            _write_synced(stage / "result.json", lambda f: f.write((self.to_json(indent=1) + "\n").encode()))
            _write_synced(stage / "vmstat.parquet", lambda f: self.counters.to_parquet(f, index=False, engine="pyarrow"))
            _write_synced(stage / "timeseries.parquet", lambda f: self.timeseries.to_parquet(f, index=False, engine="pyarrow"))
        return d

    def __repr__(self) -> str:
        s = self.summary
        wl = (self.config.get("workload") or {}).get("name", "?")
        flag = " interrupted" if self.interrupted else ""
        return (f"<foliosim.Result {wl}: {s.get('ops_per_s', float('nan')):.4g} ops/s, "
                f"{self.sim_time_s:g} sim s{flag}>")


#: The files of a saved result, as `Result.save` writes them.
RESULT_FILES = ("result.json", "vmstat.parquet", "timeseries.parquet")


def _write_synced(path: Path, write: Callable[[Any], Any]) -> None:
    with open(path, "xb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def write_synced(path: Path, data: bytes) -> None:
    """A new file `path` holding `data`, on disk when this returns (for the
    files of a `staged_folder`)."""
    _write_synced(path, lambda f: f.write(data))

