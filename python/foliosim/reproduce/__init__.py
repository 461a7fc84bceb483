"""Experiments: reproductions of published figures, kept as data.

Each experiment is one TOML file under ``experiments/MECHANISM/NAME.toml``
at the top of the repository (or under ``$FOLIOSIM_EXPERIMENTS``): its
configs, the published figures with their public sources, and the rules
that turn run results into rows (see :mod:`.spec` for the format and
:mod:`.expr` for the rule language). The engine knows none of them: every
config runs through the ordinary run path.

    >>> from foliosim import reproduce
    >>> exps = reproduce.load_all(["core-pf1-scaling"])
    >>> for rep in reproduce.run_experiments(exps):
    ...     print(rep["rows"][0])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .expr import Expr, ExprError, Template, TemplateError, check_note_text, evaluate
from .runner import evaluate_experiment, run_experiments
from .spec import Experiment, ExperimentError, load

__all__ = [
    "Experiment",
    "ExperimentError",
    "Expr",
    "ExprError",
    "Template",
    "TemplateError",
    "catalog",
    "check_note_text",
    "default_dir",
    "evaluate",
    "evaluate_experiment",
    "find",
    "load",
    "load_all",
    "run_experiments",
]


def default_dir() -> Path:
    """``$FOLIOSIM_EXPERIMENTS``, else ``experiments/`` of the checkout this
    package runs from. A variable that names no folder is an
    ExperimentError: it would otherwise read as "no experiments"."""
    env = os.environ.get("FOLIOSIM_EXPERIMENTS")
    if env:
        if not Path(env).is_dir():
            why = "is not a folder" if Path(env).exists() else "no such folder"
            raise ExperimentError("FOLIOSIM_EXPERIMENTS", env, f"{why} (it names the folder of the experiments; "
                                  "unset it for the checkout's experiments/)")
        return Path(env)
    return Path(__file__).resolve().parents[3] / "experiments"


def find(root: str | os.PathLike | None = None) -> dict[str, Path]:
    """Experiment names -> files, in order (mechanism folders, then names)."""
    base = Path(root) if root is not None else default_dir()
    out: dict[str, Path] = {}
    if not base.is_dir():
        return out
    for f in sorted(base.glob("*/*.toml"), key=lambda p: (p.parent.name, p.stem)):
        if f.stem in out:
            raise ExperimentError(str(f), "(name)", f"experiment {f.stem!r} is also {out[f.stem]}")
        out[f.stem] = f
    return out


def load_all(names: Sequence[str] | None = None, root: str | os.PathLike | None = None) -> list[Experiment]:
    """Load (and check) the experiments named, or every one."""
    files = find(root)
    if names is None:
        return [load(p) for p in files.values()]
    missing = [n for n in names if n not in files]
    if missing:
        raise ExperimentError("(experiments)", missing[0], f"no such experiment (known: {', '.join(files) or 'none'})")
    return [load(files[n]) for n in names]


def catalog(root: str | os.PathLike | None = None) -> list[dict[str, str]]:
    """Name, title and mechanism of every experiment, for `foliosim list`
    (read without validating the configs)."""
    import tomllib

    out = []
    for name, path in find(root).items():
        try:
            title = str(tomllib.loads(path.read_text(encoding="utf-8")).get("title", ""))
        except (OSError, ValueError):
            title = "(unreadable)"
        out.append({"name": name, "help": title, "mechanism": path.parent.name, "file": str(path)})
    return out
