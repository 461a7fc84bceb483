"""Experiment files: parsing and checking one `experiments/MECHANISM/NAME.toml`.

The format (docs/experiments.md describes it for a reader)::

    title = "..."                       # one line: what is compared

    [sources.ID]                        # the public sources of the figures
    title = "[RFC v2 PATCH 00/17] ..."  # thread or commit subject
    message_id = "..."                  # and/or url, commit, or list + date
    list = "linux-mm"
    date = "2023-04-14"

    [published.ID]                      # a published figure
    value = 624061.0                    # a number or a list of numbers
    source = "ID"                       # a [sources] id
    where = "cover letter, will-it-scale table, page_fault1 baseline"
    quote = "| page_fault1.csv      |   624061 |"  # the figure as the source prints it

    [config]                            # the base config, in the config language
    seed = 1
    machine.profile = "generic-x86"
    workload.name = "page_fault1"

    [runs.NAME]                         # one run: config keys laid over [config]
    label = "..."                       # optional; shown with its config
    workload.tasks = 8

    [sweeps.NAME]                       # one run per point of a grid
    axes.tasks = [1, 2, 4, 8]           # axes, in order (the last varies fastest)
    name = "t{tasks}"                   # each run's name (a template)
    label = "{tasks} tasks"
    workload.tasks = "{tasks}"          # "{expr}" alone: the value itself

    [let]                               # named values, in order
    one = "t1.summary.ops_per_s"

    [[rows]]                            # the table
    id = "pf1"                          # optional: how notes refer to it
    for = { tasks = [1, 2, 4, 8] }      # optional: one row per value
    when = "tasks > 1"                  # optional: the row only where true
    label = "{tasks} tasks"             # templates
    metric = "page_fault1 ops/s"
    unit = "ops/s"
    published = "pub.ID"                # optional: an expression over pub.*
    noise = "pub.ID_stddev"             # optional: the noise the source states for
                                        # the figure (a half-width, the row's unit)
    simulated = "runs[f't{tasks}'].summary.ops_per_s"
    note = "..."                        # a template; see `Template`
    note_when = "EXPR"                  # optional: the note only where true
                                        # (`this` is the row: this.simulated)
    headline = true                     # the headline row (with `for`: an
                                        # expression choosing one of them)

    [[series]]                          # curves for the report
    name = "..."; x = "EXPR"; y = "EXPR"; xlabel = "..."; ylabel = "..."

    [[notes]]                           # or notes = ["...", ...]
    text = "TEMPLATE"
    when = "EXPR"                       # optional
    for = { t = [...] }                 # optional: one note per value

Every config is checked (by the engine) when the file is loaded, so a bad
key is reported before anything runs, with the file and the run.
"""

from __future__ import annotations

import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _core
from .. import config as _config
from .. import programs as _programs
from ..sweep import point_id
from .expr import FUNCTIONS, Expr, ExprError, Template, TemplateError, evaluate, free_names

__all__ = ["EntrySpec", "Experiment", "ExperimentError", "NoteSpec", "RowSpec", "RunSpec", "SeriesSpec", "load"]

CONFIG_KEYS = ("seed", "machine", "host", "guest", "workload", "run", "knobs")
RESERVED = {"runs", "pub", "row", "rows", "config", "experiment", *CONFIG_KEYS}
_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class ExperimentError(ValueError):
    """A bad experiment file: one line naming the file, line and key."""

    def __init__(self, file: str, key: str, reason: str, line: int | None = None):
        self.file, self.key, self.reason, self.line = file, key, reason, line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key}: {' '.join(str(reason).split())}")


WINDOWS = ("steady", "finished", "iterated")


@dataclass
class RunSpec:
    name: str
    label: str
    config: dict[str, Any]
    params: dict[str, Any]
    sweep: str | None
    cfg_json: str = ""
    id: str = ""
    # What the rows read of this run, checked on its result (runner.window):
    # "steady": a window after at least one whole iteration of every task,
    # holding at least one more; "finished": every task ran to its end;
    # "iterated": every task completed at least one iteration.
    window: str = "steady"


@dataclass
class EntrySpec:
    """One `[[rows]]` or `[[series]]` entry: its parsed fields, its `for`
    loops and its `when` condition (the two kinds differ only in fields)."""

    index: int
    fields: dict[str, Any]
    loops: list[tuple[str, Any]]
    when: Expr | None


RowSpec = EntrySpec
SeriesSpec = EntrySpec


@dataclass
class NoteSpec:
    index: int
    text: Template
    when: Expr | None
    loops: list[tuple[str, Any]] = field(default_factory=list)


@dataclass
class Experiment:
    name: str
    path: Path
    mechanism: str
    title: str
    text: str
    sources: dict[str, dict[str, Any]]
    published: dict[str, dict[str, Any]]
    base: dict[str, Any]
    runs: dict[str, RunSpec] = field(default_factory=dict)
    sweeps: dict[str, list[str]] = field(default_factory=dict)
    lets: list[tuple[str, Expr]] = field(default_factory=list)
    rows: list[RowSpec] = field(default_factory=list)
    series: list[SeriesSpec] = field(default_factory=list)
    notes: list[NoteSpec] = field(default_factory=list)
    # [sensitivity]: profile numbers (machine.costs keys) whose value is
    # uncertain; the runs the published rows read are rerun with each at
    # every factor (runner.sensitivity).
    sensitivity: list[str] = field(default_factory=list)
    factors: list[float] = field(default_factory=lambda: [0.5, 2.0])
    # The recordings its runs replay (`workload.path = "@NAME"`): name ->
    # the file, and whether it is the committed excerpt of a larger one.
    traces: dict[str, tuple[str, bool]] = field(default_factory=dict)

    def err(self, key: str, reason: str) -> ExperimentError:
        return ExperimentError(str(self.path), key, reason, line_of(self.text, key))

    @property
    def profile(self) -> str:
        for r in self.runs.values():
            return str(json.loads(r.cfg_json)["machine"]["profile"])
        return str((self.base.get("machine") or {}).get("profile", "generic-x86"))

    @property
    def seed(self) -> int:
        for r in self.runs.values():
            return int(json.loads(r.cfg_json)["seed"])
        return int(self.base.get("seed", 1))

    def templates(self) -> list[tuple[str, Template]]:
        """Every note template, with where it stands (for the note check)."""
        out = [(f"notes[{n.index}]", n.text) for n in self.notes]
        for r in self.rows:
            if isinstance(r.fields.get("note"), Template):
                out.append((f"rows[{r.index}].note", r.fields["note"]))
        return out


def line_of(text: str, key: str) -> int | None:
    """The line where `key` (a dotted path; its last part is searched for
    as a key or table header) is written."""
    parts = [p for p in re.split(r"[.\[\]]", key) if p and not p.isdigit()]
    if not parts:
        return None
    last = parts[-1].strip('"')
    pat = re.compile(rf'^\s*(\[\[?\s*)?("?[^=\]]*\.)?"?{re.escape(last)}"?\s*(=|\]|\.)')
    for i, line in enumerate(text.splitlines()):
        if pat.match(line):
            return i + 1
    return None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = json.loads(json.dumps(v)) if isinstance(v, (dict, list)) else v


def _config_part(t: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in t.items() if k in CONFIG_KEYS}


def _substitute(v: Any, env: dict[str, Any], where: str, exp: Experiment) -> Any:
    """Sweep config values: "{expr}" alone is the value itself (typed);
    other strings with placeholders are formatted."""
    if isinstance(v, dict):
        return {k: _substitute(x, env, f"{where}.{k}", exp) for k, x in v.items()}
    if isinstance(v, list):
        return [_substitute(x, env, where, exp) for x in v]
    if not isinstance(v, str) or "{" not in v:
        return v
    try:
        m = re.fullmatch(r"\{([^{}]*)\}", v)
        if m:
            return evaluate(Expr(m.group(1)), env)
        return Template(v).render(env)
    except (ExprError, TemplateError) as e:
        raise exp.err(where, str(e)) from None


def _str(exp: Experiment, t: dict[str, Any], key: str, where: str, required: bool = False) -> str | None:
    v = t.get(key)
    if v is None:
        if required:
            raise exp.err(f"{where}.{key}", "missing")
        return None
    if not isinstance(v, str):
        raise exp.err(f"{where}.{key}", f"expected a string, got {type(v).__name__}")
    return v


def _expr(exp: Experiment, v: Any, where: str) -> Expr:
    if isinstance(v, (bool, int, float)):
        v = repr(v)
    if not isinstance(v, str):
        raise exp.err(where, f"expected an expression (a string), got {type(v).__name__}")
    try:
        return Expr(v)
    except ExprError as e:
        raise exp.err(where, str(e)) from None


def _template(exp: Experiment, v: Any, where: str) -> Template:
    if not isinstance(v, str):
        raise exp.err(where, f"expected text, got {type(v).__name__}")
    try:
        return Template(v)
    except TemplateError as e:
        raise exp.err(where, str(e)) from None


def _loops(exp: Experiment, t: dict[str, Any], where: str) -> list[tuple[str, Any]]:
    f = t.get("for")
    if f is None:
        return []
    if not isinstance(f, dict) or not f:
        raise exp.err(f"{where}.for", "expected a table of loop variables: for = { name = [values] }")
    out: list[tuple[str, Any]] = []
    for k, v in f.items():
        if not _IDENT.match(k) or k in RESERVED:
            raise exp.err(f"{where}.for.{k}", "a loop variable is a plain name, not a reserved one")
        if isinstance(v, list):
            out.append((k, v))
        else:
            out.append((k, _expr(exp, v, f"{where}.for.{k}")))
    return out


# A number as a source prints it: an optional sign (a hyphen after a digit
# or a letter joins a range or a name, not a sign), digits with or without
# thousands separators, a decimal part.
_NUMBER = re.compile(r"(?<![\w.])([-\u2212+]?)((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)")


def quoted_numbers(text: str) -> list[float]:
    """The numbers in a quote, in order ("-8.1%" -> -8.1, "8,827,457.25" ->
    8827457.25, "683B" -> 683)."""
    out = []
    for sign, digits in _NUMBER.findall(text):
        n = float(digits.replace(",", ""))
        out.append(-n if sign in ("-", "\u2212") else n)
    return out


def quote_problem(value: Any, quote: Any) -> str | None:
    """Why `quote` does not show `value` as printed (None: it does). A
    figure's quote is the text of the source that states it: every number
    of the value must be one of the quote's numbers, in order, so that a
    figure worked out from others (a sum, a difference, a unit conversion)
    cannot pass for one the source printed."""
    if isinstance(quote, list) and all(isinstance(q, str) for q in quote):
        text = " ".join(quote)
    elif isinstance(quote, str):
        text = quote
    else:
        return ("missing: the figure as the source prints it (a figure the source does not print is not published; "
                "compute it in the row's `published` from the figures it does print)")
    numbers = quoted_numbers(text)
    values = value if isinstance(value, list) else [value]
    at = 0
    for v in values:
        while at < len(numbers) and numbers[at] != float(v):
            at += 1
        if at == len(numbers):
            return f"{v!r} is not printed in the quote {text!r} (after the numbers before it)"
        at += 1
    return None


ROW_KEYS = {"id", "for", "when", "label", "metric", "unit", "published", "noise", "simulated", "note", "note_when",
            "headline"}
SERIES_KEYS = {"for", "when", "name", "x", "y", "xlabel", "ylabel"}
TOP_KEYS = {"title", "window", "sources", "published", "config", "runs", "sweeps", "let", "rows", "series", "notes", "sensitivity"}


def _resolve_trace(exp: Experiment, cfg: dict[str, Any], where: str) -> None:
    """`workload.path = "@NAME"`: the recording of a real program
    (foliosim.programs), committed or recorded by `make traces`."""
    guests = cfg.get("guest")
    tables = [("workload", cfg.get("workload"))] + [
        (f"guest[{i}].workload", g.get("workload")) for i, g in enumerate(guests if isinstance(guests, list) else [])
        if isinstance(g, dict)]
    for key, wl in tables:
        if not isinstance(wl, dict):
            continue
        ref = wl.get("path")
        if not (isinstance(ref, str) and ref.startswith("@")):
            continue
        try:
            p = _programs.resolve(ref)
        except _programs.TraceMissing as e:
            raise exp.err(f"{key}.path", f"{where}: {e}") from None
        wl["path"] = str(p)
        exp.traces[ref[1:]] = (str(p), p.name.endswith(".small.fstrace"))


def load(path: str | Path) -> Experiment:
    """Read, check and expand one experiment file (every config validated)."""
    p = Path(path)
    text = _config.read_text(p)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _config._tomllib_error(str(p), e) from None
    exp = Experiment(name=p.stem, path=p, mechanism=p.parent.name, title="", text=text, sources={}, published={}, base={})
    for k in doc:
        if k not in TOP_KEYS:
            raise exp.err(k, f"unknown key (expected {', '.join(sorted(TOP_KEYS))})")
    exp.title = _str(exp, doc, "title", "", required=True) or ""
    default_window = doc.get("window", "steady")
    if default_window not in WINDOWS:
        raise exp.err("window", f"expected one of {', '.join(WINDOWS)}")
    # sources and published figures
    for sid, s in (doc.get("sources") or {}).items():
        if not isinstance(s, dict):
            raise exp.err(f"sources.{sid}", "expected a table")
        unknown = set(s) - {"title", "message_id", "url", "commit", "list", "date", "where"}
        if unknown:
            raise exp.err(f"sources.{sid}.{sorted(unknown)[0]}", "unknown key (expected title, message_id, url, commit, list, date, where)")
        if not s.get("title"):
            raise exp.err(f"sources.{sid}.title", "missing: the thread's subject or the commit's title")
        if not (any(s.get(k) for k in ("message_id", "url", "commit")) or (s.get("list") and s.get("date"))):
            raise exp.err(f"sources.{sid}", "a public source needs a message_id, a url, a commit, or the list and date of its thread")
        exp.sources[sid] = dict(s)
    for fid, f in (doc.get("published") or {}).items():
        if not isinstance(f, dict):
            raise exp.err(f"published.{fid}", "expected a table: { value = ..., source = ..., where = ... }")
        unknown = set(f) - {"value", "source", "where", "quote"}
        if unknown:
            raise exp.err(f"published.{fid}.{sorted(unknown)[0]}", "unknown key (expected value, source, where, quote)")
        v = f.get("value")
        if not (isinstance(v, (int, float)) and not isinstance(v, bool)) and not (
                isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)):
            raise exp.err(f"published.{fid}.value", "expected a number or a list of numbers")
        if f.get("source") not in exp.sources:
            raise exp.err(f"published.{fid}.source", f"{f.get('source')!r} is not a [sources] id")
        if not isinstance(f.get("where"), str) or not f["where"].strip():
            raise exp.err(f"published.{fid}.where", "say where in the source the figure stands (table, section)")
        problem = quote_problem(v, f.get("quote"))
        if problem:
            raise exp.err(f"published.{fid}.quote", problem)
        exp.published[fid] = dict(f)
    # configs
    base = doc.get("config") or {}
    if not isinstance(base, dict):
        raise exp.err("config", "expected a table (the base config)")
    for k in base:
        if k not in CONFIG_KEYS:
            raise exp.err(f"config.{k}", f"unknown config key (expected {', '.join(CONFIG_KEYS)})")
    exp.base = base
    names: set[str] = set()

    def add_run(r: RunSpec, where: str) -> None:
        if r.name in names:
            raise exp.err(where, f"run {r.name!r} is defined twice")
        if not _IDENT.match(r.name) or r.name in RESERVED:
            raise exp.err(where, f"run name {r.name!r}: a plain name (letters, digits, _), not a reserved one")
        names.add(r.name)
        cfg = json.loads(json.dumps(base))
        _merge(cfg, r.config)
        _resolve_trace(exp, cfg, where)
        r.config = cfg
        try:
            r.cfg_json = _core.load_json(_config._dumps(cfg, str(p)), f"{p} [{where}]")
        except _core.ConfigError as e:
            key = getattr(e, "key", "") or "(config)"
            raise ExperimentError(str(p), f"{where}.{key}", getattr(e, "reason", None) or str(e), line_of(text, key)) from None
        r.id = point_id(r.cfg_json)
        if r.window not in WINDOWS:
            raise exp.err(f"{where}.window", f"expected one of {', '.join(WINDOWS)}")
        exp.runs[r.name] = r

    for name, t in (doc.get("runs") or {}).items():
        if not isinstance(t, dict):
            raise exp.err(f"runs.{name}", "expected a table")
        extra = set(t) - set(CONFIG_KEYS) - {"label", "window"}
        if extra:
            raise exp.err(f"runs.{name}.{sorted(extra)[0]}", f"unknown key (expected label, window or config keys: {', '.join(CONFIG_KEYS)})")
        add_run(RunSpec(name, _str(exp, t, "label", f"runs.{name}") or name, _config_part(t), {}, None,
                        window=t.get("window", default_window)), f"runs.{name}")
    for sname, t in (doc.get("sweeps") or {}).items():
        where = f"sweeps.{sname}"
        if not isinstance(t, dict):
            raise exp.err(where, "expected a table")
        extra = set(t) - set(CONFIG_KEYS) - {"label", "name", "axes", "window"}
        if extra:
            raise exp.err(f"{where}.{sorted(extra)[0]}", "unknown key (expected axes, name, label, window or config keys)")
        axes = t.get("axes")
        if not isinstance(axes, dict) or not axes or not all(isinstance(v, list) and v for v in axes.values()):
            raise exp.err(f"{where}.axes", "expected axes.NAME = [values, ...]")
        for a in axes:
            if not _IDENT.match(a):
                raise exp.err(f"{where}.axes.{a}", "an axis is a plain name")
        name_t = _template(exp, t.get("name") or (sname + "".join(f"_{{{a}}}" for a in axes)), f"{where}.name")
        label_t = _template(exp, t.get("label") or ", ".join(f"{a} {{{a}}}" for a in axes), f"{where}.label")
        exp.sweeps[sname] = []
        if not _IDENT.match(sname) or sname in RESERVED:
            raise exp.err(where, f"sweep name {sname!r}: a plain name, not a reserved one")
        for combo in itertools.product(*axes.values()):
            env = dict(zip(axes, combo, strict=True))
            rname = re.sub(r"[^A-Za-z0-9_]", "_", name_t.render(env))
            r = RunSpec(rname, label_t.render(env), _substitute(_config_part(t), env, where, exp), env, sname,
                        window=t.get("window", default_window))
            add_run(r, f"{where} point {rname}")
            exp.sweeps[sname].append(rname)
        names.add(sname)
    if not exp.runs:
        raise exp.err("runs", "an experiment needs at least one run ([runs.NAME] or [sweeps.NAME])")
    _load_sensitivity(exp, doc.get("sensitivity"))
    # rules
    lets = doc.get("let") or {}
    if not isinstance(lets, dict):
        raise exp.err("let", "expected a table of NAME = \"EXPR\"")
    for k, v in lets.items():
        if not _IDENT.match(k) or k in RESERVED or k in names:
            raise exp.err(f"let.{k}", "a plain name that no run, sweep or reserved name uses")
        exp.lets.append((k, _expr(exp, v, f"let.{k}")))
        # Lets are evaluated in order, after the runs: a name that is not
        # known yet would end a long reproduction at its end.
        undefined = sorted(n for n in free_names(exp.lets[-1][1]) if n not in names and n not in RESERVED and n not in FUNCTIONS and n != "profile")
        if undefined:
            below = " (a let defined below it: lets are evaluated in order)" if undefined[0] in lets else ""
            raise exp.err(f"let.{k}", f"unknown name {undefined[0]!r}{below}")
        names.add(k)
    rows = doc.get("rows") or []
    if not isinstance(rows, list) or not rows:
        raise exp.err("rows", "expected [[rows]] tables (at least one)")
    ids: set[str] = set()
    for i, t in enumerate(rows):
        where = f"rows[{i}]"
        extra = set(t) - ROW_KEYS
        if extra:
            raise exp.err(f"{where}.{sorted(extra)[0]}", f"unknown key (expected {', '.join(sorted(ROW_KEYS))})")
        fields: dict[str, Any] = {}
        for k in ("label", "metric", "unit", "note"):
            if k in t:
                fields[k] = _template(exp, t[k], f"{where}.{k}")
        for k in ("label", "metric", "simulated"):
            if k not in t:
                raise exp.err(f"{where}.{k}", "missing")
        fields["simulated"] = _expr(exp, t["simulated"], f"{where}.simulated")
        if "published" in t:
            fields["published"] = _expr(exp, t["published"], f"{where}.published")
        if "noise" in t:
            if "published" not in t:
                raise exp.err(f"{where}.noise", "noise of a published figure that the row does not have")
            fields["noise"] = _expr(exp, t["noise"], f"{where}.noise")
        if "id" in t:
            rid = _str(exp, t, "id", where) or ""
            if not _IDENT.match(rid) or rid in ids:
                raise exp.err(f"{where}.id", f"{rid!r}: a plain name, unique in the file")
            if "for" in t:
                raise exp.err(f"{where}.id", "a row with `for` has no single id (give one row per id)")
            ids.add(rid)
            fields["id"] = rid
        if "headline" in t:
            h = t["headline"]
            if isinstance(h, bool):
                fields["headline"] = h
            elif "for" in t:
                fields["headline"] = _expr(exp, h, f"{where}.headline")
            else:
                raise exp.err(f"{where}.headline", "expected true or false (or, in a row with `for`, an expression choosing one)")
        if "note_when" in t:
            if "note" not in t:
                raise exp.err(f"{where}.note_when", "a condition for a note that is not there")
            fields["note_when"] = _expr(exp, t["note_when"], f"{where}.note_when")
        when = _expr(exp, t["when"], f"{where}.when") if "when" in t else None
        exp.rows.append(RowSpec(i, fields, _loops(exp, t, where), when))
    heads = [r for r in exp.rows if r.fields.get("headline")]
    if len(heads) > 1:
        raise exp.err(f"rows[{heads[1].index}].headline", "only one [[rows]] entry holds the headline")
    for i, t in enumerate(doc.get("series") or []):
        where = f"series[{i}]"
        extra = set(t) - SERIES_KEYS
        if extra:
            raise exp.err(f"{where}.{sorted(extra)[0]}", f"unknown key (expected {', '.join(sorted(SERIES_KEYS))})")
        fields = {k: _template(exp, t.get(k, ""), f"{where}.{k}") for k in ("name", "xlabel", "ylabel")}
        for k in ("x", "y"):
            if k not in t:
                raise exp.err(f"{where}.{k}", "missing")
            fields[k] = _expr(exp, t[k], f"{where}.{k}")
        when = _expr(exp, t["when"], f"{where}.when") if "when" in t else None
        exp.series.append(SeriesSpec(i, fields, _loops(exp, t, where), when))
    notes = doc.get("notes") or []
    if not isinstance(notes, list):
        raise exp.err("notes", "expected a list of notes")
    for i, n in enumerate(notes):
        if isinstance(n, str):
            exp.notes.append(NoteSpec(i, _template(exp, n, f"notes[{i}]"), None))
        elif isinstance(n, dict) and "text" in n and set(n) <= {"text", "when", "for"}:
            when = _expr(exp, n["when"], f"notes[{i}].when") if "when" in n else None
            exp.notes.append(NoteSpec(i, _template(exp, n["text"], f"notes[{i}].text"), when, _loops(exp, n, f"notes[{i}]")))
        else:
            raise exp.err(f"notes[{i}]", "a note is text, or a table { text = ..., when = ..., for = ... }")
    return exp


def _load_sensitivity(exp: Experiment, t: Any) -> None:
    """`[sensitivity] costs = [KEY, ...]` (and `factors`, default 0.5 and 2):
    every key must be a number of every run's profile, which the engine
    checks by loading each run with it overridden."""
    if t is None:
        return
    if not isinstance(t, dict):
        raise exp.err("sensitivity", "expected a table: costs = [profile keys], factors = [numbers]")
    extra = set(t) - {"costs", "factors"}
    if extra:
        raise exp.err(f"sensitivity.{sorted(extra)[0]}", "unknown key (expected costs, factors)")
    costs = t.get("costs")
    if not isinstance(costs, list) or not costs or not all(isinstance(c, str) and c for c in costs) or len(set(costs)) != len(costs):
        raise exp.err("sensitivity.costs", "expected a list of distinct profile keys (machine.costs keys: cacheline_cross_socket_ns, nodes.zero_bw_gbps)")
    factors = t.get("factors", [0.5, 2.0])
    if not isinstance(factors, list) or not factors or not all(
            isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 and f != 1 for f in factors):
        raise exp.err("sensitivity.factors", "expected a list of positive factors other than 1")
    exp.sensitivity = list(costs)
    exp.factors = [float(f) for f in factors]
    for r in exp.runs.values():
        for c in exp.sensitivity:
            try:
                variant(exp, r, c, exp.factors[0])
            except ExperimentError as e:
                raise ExperimentError(e.file, f"sensitivity.costs.{c}", f"run {r.name}: {e.reason}", line_of(exp.text, "costs")) from None


def profile_number(cfg: dict[str, Any], key: str) -> float:
    """The number `key` (a machine.costs key) has in the profile of the run
    whose normalised config is `cfg` (after its own machine.costs)."""
    m = cfg["machine"]
    if key in (m.get("costs") or {}):
        return float(m["costs"][key])
    name = m["profile"]
    # The profile as loaded (a derived one completed by the rule of
    # docs/profiles.md), not its file's text.
    try:
        values = {v["path"]: v["value"] for v in json.loads(_core.profile_explain_json(name))["values"]}
    except _core.ConfigError as e:
        raise ValueError(f"{key}: profile {name}: {e}") from None
    table, _, k = key.rpartition(".") if "." in key else ("cost", "", key)
    vals = ([v for p, v in values.items() if p.startswith("nodes[") and p.endswith(f"].{k}")] if table == "nodes"
            else [values.get(f"{table}.{k}")])
    nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(nums) != len(vals) or len(set(nums)) != 1:
        raise ValueError(f"{key}: not one number in profile {name}")
    return float(nums[0])


def variant(exp: Experiment, r: RunSpec, key: str, factor: float) -> RunSpec:
    """Run `r` with profile number `key` at `factor` times its value."""
    cfg = json.loads(r.cfg_json)
    try:
        value = profile_number(cfg, key) * factor
    except (ValueError, OSError, KeyError):
        value = None
    cfg["machine"].setdefault("costs", {})[key] = value if value is not None else 0.0
    where = f"{exp.path} [sensitivity {key} x{factor:g}, run {r.name}]"
    try:
        cfg_json = _core.load_json(json.dumps(cfg), where)
    except _core.ConfigError as e:
        raise ExperimentError(str(exp.path), getattr(e, "key", "") or "(config)", getattr(e, "reason", None) or str(e)) from None
    if value is None:
        raise ExperimentError(str(exp.path), f"sensitivity.costs.{key}", "not one number in the run's profile (nodes. keys need the same value on every node)")
    v = RunSpec(r.name, r.label, cfg, r.params, r.sweep, cfg_json=cfg_json, window=r.window)
    v.id = point_id(cfg_json)
    return v
