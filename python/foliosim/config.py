"""Loading configs: a TOML file, a TOML string or a dict, with --set overrides.

Python never validates: it only gets text to the Rust side, which checks
everything and answers with a normalised config as JSON (or a ConfigError
whose message names the file, line and key).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import _core
from ._core import ConfigError

ConfigLike = str | os.PathLike | Mapping[str, Any]

__all__ = ["ConfigError", "ConfigLike", "apply_overrides", "load", "load_file", "parse_override"]


def _error(file: str, key: str, reason: str, line: int | None = None) -> ConfigError:
    where = f"{file}:{line}" if line is not None else file
    err = ConfigError(f"{where}: {key}: {reason}")
    err.file, err.line, err.key, err.reason = file, line, key, reason
    return err


def _one_line(s: object) -> str:
    return " ".join(str(s).split())


#: The largest config (or sweep spec, or profile) read: far above any real
#: one, and small enough that reading it cannot take the machine's memory.
MAX_CONFIG_BYTES = 16 << 20

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_a_file(st: os.stat_result) -> str | None:
    """Why what `st` describes cannot be read as a config (None: it can): a
    FIFO, a device or a socket may never end, and a folder is no file."""
    for test, kind in _KINDS:
        if test(st.st_mode):
            return f"is {kind}, not a regular file"
    return None


def read_text(path: str | os.PathLike) -> str:
    """Read a config file; a missing or unreadable file is a ConfigError, and
    so is anything that is not a regular file (a FIFO would block forever,
    /dev/zero never end) or is larger than MAX_CONFIG_BYTES."""
    name = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _error(name, "file", _one_line(e.strerror or str(e))) from None
    st = os.fstat(fd)
    why = not_a_file(st)
    if why:
        os.close(fd)
        raise _error(name, "file", why)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > MAX_CONFIG_BYTES:
            raise _error(name, "file", f"{st.st_size:,} bytes: larger than a config can be "
                                       f"(at most {MAX_CONFIG_BYTES >> 20} MiB)")
        try:
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as e:
            raise _error(name, "file", _one_line(e.strerror or str(e))) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise _error(name, "file", f"larger than a config can be (at most {MAX_CONFIG_BYTES >> 20} MiB)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise _error(name, "file", "not valid UTF-8", line) from None


def _tomllib_error(file: str, e: tomllib.TOMLDecodeError) -> ConfigError:
    msg = str(e)
    m = re.search(r"\(at line (\d+), column \d+\)", msg)
    line = int(m.group(1)) if m else None
    reason = _one_line(re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg))
    return _error(file, "(syntax)", reason, line)


def parse_override(arg: str) -> dict[str, Any]:
    """`KEY=VALUE` (KEY a TOML dotted key, VALUE a TOML literal) -> a nested
    dict. A value that is no TOML literal is an error, never taken as a
    string: `--set workload.mode=thread` would otherwise pass a typo on."""
    key, sep, value = arg.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key:
        raise _error("--set", arg, "expected KEY=VALUE")
    try:
        tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError:
        raise _error("--set", key, "not a valid TOML dotted key (quote a name with dots or slashes: "
                     'knobs."vm.min_free_kbytes")') from None
    try:
        return tomllib.loads(f"{key} = {value}")
    except tomllib.TOMLDecodeError:
        pass
    hint = f" (a string is quoted: {key}='{json.dumps(value, ensure_ascii=False)}')" if value else ""
    raise _error("--set", key, f"{value!r} is not a TOML literal{hint}") from None


def _merge(base: dict[str, Any], over: Mapping[str, Any], path: str) -> None:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _merge(base[k], v, f"{path}{k}.")
        else:
            base[k] = v


def check_overrides(overrides: Any) -> list[str]:
    """`overrides` as a list of `KEY=VALUE` strings; anything else (a bare
    string, a dict, None in the list) is a ConfigError that says so."""
    if isinstance(overrides, (str, bytes)):
        raise _error("overrides", repr(overrides), "expected a list of 'KEY=VALUE' strings, got one string "
                     f"(write [{overrides!r}])")
    if isinstance(overrides, Mapping):
        raise _error("overrides", "(dict)", "expected a list of 'KEY=VALUE' strings, got a dict "
                     "(lay a dict over the config instead, or write ['KEY=VALUE', ...])")
    try:
        items = list(overrides)
    except TypeError:
        raise _error("overrides", "(overrides)", f"expected a list of 'KEY=VALUE' strings, got {type(overrides).__name__}") from None
    for i, arg in enumerate(items):
        if not isinstance(arg, str):
            raise _error("overrides", f"[{i}]", f"expected a 'KEY=VALUE' string, got {arg!r}")
    return items


def apply_overrides(cfg: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply `KEY=VALUE` overrides to a config dict (in place; returned)."""
    for arg in check_overrides(overrides):
        _merge(cfg, parse_override(arg), "")
    return cfg


def _bad_value(v: Any, path: str) -> tuple[str, str] | None:
    """The first value a config cannot hold (None, NaN, an infinity), as
    (dotted key, reason)."""
    if v is None:
        return path, "null/None is not a config value (leave the key out for its default)"
    if isinstance(v, float) and not math.isfinite(v):
        return path, f"{v} is not a config value (numbers must be finite)"
    if isinstance(v, Mapping):
        for k, x in v.items():
            bad = _bad_value(x, f"{path}.{k}" if path else str(k))
            if bad:
                return bad
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            bad = _bad_value(x, f"{path}[{i}]")
            if bad:
                return bad
    return None


def _dumps(cfg: Mapping[str, Any], origin: str) -> str:
    bad = _bad_value(cfg, "")
    if bad:
        raise _error(origin, bad[0] or "(config)", bad[1])
    try:
        return json.dumps(cfg, default=_json_default, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise _error(origin, "(config)", _one_line(e)) from None


def _json_default(o: Any) -> Any:
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    if hasattr(o, "isoformat"):  # TOML dates and times
        return o.isoformat()
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    raise TypeError(f"{type(o).__name__} is not a config value")


def load_file(path: str | os.PathLike, overrides: Iterable[str] = ()) -> str:
    """A config file (plus overrides) -> the normalised config JSON."""
    name = os.fspath(path)
    return load_text(read_text(name), name, overrides)


def load_text(text: str, name: str = "<string>", overrides: Iterable[str] = ()) -> str:
    """TOML text (plus overrides) -> the normalised config JSON."""
    overrides = check_overrides(overrides)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise _error(name, "file", "not valid UTF-8", text[: e.start].count("\n") + 1) from None
    # The file alone first: its errors then carry the file's line numbers.
    norm = _core.load_toml(text, name)
    if not overrides:
        return norm
    try:
        cfg = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # Rust accepted it; be safe anyway
        raise _tomllib_error(name, e) from None
    apply_overrides(cfg, overrides)
    return _core.load_json(_dumps(cfg, name), f"{name} (--set)", base_dir_of(name))


def base_dir_of(name: str) -> str:
    """Where the relative paths of the config file `name` start: its folder
    ("" for a config that is not a file: the current directory)."""
    return "" if name.startswith("<") else os.path.dirname(name)


def load(config: ConfigLike, overrides: Iterable[str] = ()) -> str:
    """Any config form -> the normalised config JSON (raises ConfigError).

    A str is TOML text if it contains a newline or an `=`, otherwise a path.
    """
    overrides = check_overrides(overrides)
    if isinstance(config, Mapping):
        cfg = json.loads(_dumps(config, "<dict>"))
        apply_overrides(cfg, overrides)
        return _core.load_json(_dumps(cfg, "<dict>"), "<dict>")
    if isinstance(config, os.PathLike):
        return load_file(config, overrides)
    if isinstance(config, bytes):
        config = config.decode("utf-8")
    if isinstance(config, str):
        if "\n" in config or "=" in config or config.strip() == "":
            return load_text(config, "<string>", overrides)
        return load_file(config, overrides)
    raise TypeError(f"config must be a path, a TOML string or a dict, not {type(config).__name__}")


def stem_of(config: ConfigLike) -> str:
    """Name used for the default output folder."""
    if isinstance(config, os.PathLike) or (isinstance(config, str) and "\n" not in config and "=" not in config):
        return Path(os.fspath(config)).stem or "run"
    return "run"
