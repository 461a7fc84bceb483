"""The rule language of experiments: small, safe expressions over run results.

An expression is Python syntax parsed with :mod:`ast` and interpreted here
node by node (never compiled or passed to ``eval``). What it may use:

- numbers, strings, ``True``/``False``/``None``, lists, tuples and dicts;
- names bound by the experiment (runs by name, ``runs``, ``pub``, ``row``,
  ``let`` values, loop variables) and the functions in :data:`FUNCTIONS`;
- ``a.b`` and ``a["b"]`` read key ``b`` of a result (a JSON object),
  ``a[i]`` and ``a[i:j]`` index a list;
- arithmetic ``+ - * / // %`` and ``**`` (small exponents), comparisons,
  ``and``/``or``/``not``, ``x if c else y``;
- list and dict comprehensions and generator expressions (``[r.ops for r in
  per_task if not r.kthread]``) and f-strings.

Nothing else parses: no attribute of a Python object (only keys of result
objects, never one starting with ``_``), no call but the functions listed,
no lambda, assignment, import or starred argument. Errors are
:class:`ExprError`, one line naming the expression.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

__all__ = ["FUNCTIONS", "Expr", "ExprError", "Template", "TemplateError", "check_note_text", "evaluate", "free_names", "texts_of"]

MAX_SEQUENCE = 10_000_000
MAX_EXPONENT = 64


class ExprError(ValueError):
    """A rule that cannot be parsed or evaluated (one line)."""


# ------------------------------------------------------------- functions --
def _seq_sum(xs: Iterable[Any], start: Any = 0) -> Any:
    # A plain left fold: Python 3.12's sum() of floats is compensated, which
    # would not give the figures a sequential Rust sum gives.
    acc = start
    for x in xs:
        acc = acc + x
    return acc


def _mean(xs: Iterable[Any]) -> float:
    v = list(xs)
    if not v:
        raise ExprError("mean() of an empty sequence")
    return _seq_sum(v, 0.0) / len(v)


def _median(xs: Iterable[Any]) -> Any:
    v = sorted(xs)
    if not v:
        raise ExprError("median() of an empty sequence")
    n = len(v)
    return v[n // 2] if n % 2 == 1 else (v[n // 2 - 1] + v[n // 2]) / 2.0


def _first(xs: Iterable[Any], default: Any = None) -> Any:
    for x in xs:
        return x
    return default


def _last(xs: Iterable[Any], default: Any = None) -> Any:
    v = list(xs)
    return v[-1] if v else default


def _get(obj: Any, key: Any, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    if isinstance(obj, (list, tuple)) and isinstance(key, int) and -len(obj) <= key < len(obj):
        return obj[key]
    return default


def _spans(flags: Iterable[Any], step: float) -> list[float]:
    """The lengths of the complete runs of true values in `flags`, each
    the sum of `step` over its elements (a run still going at the end is
    left out: it is not complete)."""
    out: list[float] = []
    cur = 0.0
    for f in flags:
        if f:
            cur += step
        elif cur > 0.0:
            out.append(cur)
            cur = 0.0
    return out


def _range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_SEQUENCE:
        raise ExprError(f"range of {len(r)} elements is too long")
    return r


def _min(*args: Any, default: Any = ...) -> Any:
    if len(args) == 1:
        v = list(args[0])
        if not v and default is not ...:
            return default
        return min(v)
    return min(args)


def _max(*args: Any, default: Any = ...) -> Any:
    if len(args) == 1:
        v = list(args[0])
        if not v and default is not ...:
            return default
        return max(v)
    return max(args)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "all": all,
    "any": any,
    "enumerate": lambda xs, start=0: list(enumerate(xs, start)),
    "finite": _finite,
    "first": _first,
    "float": float,
    "get": _get,
    "int": int,
    "last": _last,
    "len": len,
    "list": list,
    "max": _max,
    "mean": _mean,
    "median": _median,
    "min": _min,
    "range": _range,
    "round": round,
    "sorted": lambda xs, reverse=False: sorted(xs, reverse=reverse),
    "spans": _spans,
    "str": str,
    "sum": _seq_sum,
    "zip": lambda *xs: list(zip(*xs, strict=False)),
}

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class _Scope:
    """Names visible to an expression: comprehension variables over the
    environment; `on_name` hears every name read from the environment."""

    def __init__(self, env: Mapping[str, Any], on_name: Callable[[str], None] | None = None):
        self.env = env
        self.on_name = on_name
        self.local: list[dict[str, Any]] = []

    def lookup(self, name: str) -> Any:
        for frame in reversed(self.local):
            if name in frame:
                return frame[name]
        if name in self.env:
            if self.on_name is not None:
                self.on_name(name)
            return self.env[name]
        if name in FUNCTIONS:
            raise ExprError(f"{name} is a function: call it")
        raise ExprError(f"unknown name {name!r}")


class Expr:
    """A parsed rule. `source` is kept for error messages."""

    __slots__ = ("source", "tree")

    def __init__(self, source: str):
        if not isinstance(source, str):
            raise ExprError(f"expected an expression (a string), got {type(source).__name__}")
        self.source = source
        try:
            self.tree = ast.parse(source.strip(), mode="eval")
        except SyntaxError as e:
            raise ExprError(f"{source!r}: syntax error: {e.msg}") from None
        _validate(self.tree, source)

    def __call__(self, env: Mapping[str, Any]) -> Any:
        return evaluate(self, env)

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"


def free_names(e: Expr) -> set[str]:
    """The names `e` reads and does not bind itself (a comprehension's
    targets bind; bound anywhere in `e` counts as bound, so a name it
    reports is certainly read from outside)."""
    loads: set[str] = set()
    stores: set[str] = set()
    for node in ast.walk(e.tree):
        if isinstance(node, ast.Name):
            (stores if isinstance(node.ctx, ast.Store) else loads).add(node.id)
    return loads - stores


_ALLOWED = (
    ast.Expression, ast.Constant, ast.Name, ast.Load, ast.Attribute, ast.Subscript, ast.Slice,
    ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.keyword, ast.List, ast.Tuple, ast.Dict,
    ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.comprehension, ast.Store, ast.JoinedStr, ast.FormattedValue,
    ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, *list(_BINOPS), *list(_CMPOPS),
)


def _validate(tree: ast.AST, source: str) -> None:
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ExprError(f"{source!r}: {type(node).__name__} is not allowed in a rule")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise ExprError(f"{source!r}: .{node.attr}: keys starting with '_' are not readable")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise ExprError(f"{source!r}: {node.id}: names starting with '_' are not allowed")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                what = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ExprError(f"{source!r}: {what}(): not a rule function (known: {', '.join(sorted(FUNCTIONS))})")
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                raise ExprError(f"{source!r}: starred arguments are not allowed")
        if isinstance(node, ast.comprehension):
            if node.is_async:
                raise ExprError(f"{source!r}: async comprehensions are not allowed")
            targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
            if not all(isinstance(t, ast.Name) for t in targets):
                raise ExprError(f"{source!r}: a comprehension binds names only")
        if isinstance(node, ast.Dict) and any(k is None for k in node.keys):
            raise ExprError(f"{source!r}: ** in a dict is not allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool, type(None))):
            raise ExprError(f"{source!r}: constant {node.value!r} is not allowed")


def evaluate(expr: Expr | str, env: Mapping[str, Any], on_name: Callable[[str], None] | None = None) -> Any:
    """The value of `expr` over `env`; `on_name(name)` is called for every
    name the expression reads from `env`."""
    e = expr if isinstance(expr, Expr) else Expr(expr)
    try:
        return _eval(e.tree.body, _Scope(env, on_name))
    except ExprError as err:
        msg = str(err)
        raise ExprError(msg if msg.startswith(repr(e.source)) else f"{e.source!r}: {msg}") from None
    except (ArithmeticError, TypeError, ValueError, KeyError, IndexError) as err:
        raise ExprError(f"{e.source!r}: {type(err).__name__}: {err}") from None


def _key(obj: Any, key: Any, node: ast.AST) -> Any:
    # `node` is unparsed for the message only: a rule reads keys once per
    # task or sample, and unparsing costs more than the read.
    if isinstance(obj, Mapping):
        if key not in obj:
            keys = ", ".join(sorted(map(str, obj)))[:200]
            raise ExprError(f"{ast.unparse(node)}: no key {key!r} (has: {keys})")
        return obj[key]
    if isinstance(obj, (list, tuple, str)):
        if isinstance(key, slice):
            return obj[key]
        if not isinstance(key, int) or isinstance(key, bool):
            raise ExprError(f"{ast.unparse(node)}: a list is indexed by an integer, not {key!r}")
        if not -len(obj) <= key < len(obj):
            raise ExprError(f"{ast.unparse(node)}: index {key} out of range (length {len(obj)})")
        return obj[key]
    raise ExprError(f"{ast.unparse(node)}: cannot index a {type(obj).__name__}")


def _eval(node: ast.AST, s: _Scope) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return s.lookup(node.id)
    if isinstance(node, ast.Attribute):
        return _key(_eval(node.value, s), node.attr, node)
    if isinstance(node, ast.Subscript):
        obj = _eval(node.value, s)
        if isinstance(node.slice, ast.Slice):
            sl = node.slice
            idx: Any = slice(*(None if p is None else _eval(p, s) for p in (sl.lower, sl.upper, sl.step)))
        else:
            idx = _eval(node.slice, s)
        return _key(obj, idx, node)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, s), _eval(node.right, s)
        op = type(node.op)
        if op in (ast.Mult, ast.Mod, ast.Pow) and not (_is_num(a) and _is_num(b)):
            raise ExprError(f"{ast.unparse(node)}: {op.__name__} takes numbers")
        if op is ast.Pow and abs(b) > MAX_EXPONENT:
            raise ExprError(f"{ast.unparse(node)}: exponent too large")
        if op in (ast.Div, ast.FloorDiv, ast.Mod) and _is_num(b) and b == 0:
            raise ExprError(f"{ast.unparse(node)}: division by zero")
        return _BINOPS[op](a, b)
    if isinstance(node, ast.UnaryOp):
        u = _eval(node.operand, s)
        if isinstance(node.op, ast.Not):
            return not u
        if not _is_num(u):
            raise ExprError(f"{ast.unparse(node)}: a sign takes a number")
        return -u if isinstance(node.op, ast.USub) else +u
    if isinstance(node, ast.BoolOp):
        v: Any
        if isinstance(node.op, ast.And):
            v = True
            for x in node.values:
                v = _eval(x, s)
                if not v:
                    return v
            return v
        v = False
        for x in node.values:
            v = _eval(x, s)
            if v:
                return v
        return v
    if isinstance(node, ast.Compare):
        left = _eval(node.left, s)
        for cop, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, s)
            if not _CMPOPS[type(cop)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, s) if _eval(node.test, s) else _eval(node.orelse, s)
    if isinstance(node, ast.Call):
        f = FUNCTIONS[node.func.id]  # type: ignore[attr-defined]
        args = [_eval(a, s) for a in node.args]
        kwargs = {k.arg: _eval(k.value, s) for k in node.keywords if k.arg is not None}
        return f(*args, **kwargs)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_eval(x, s) for x in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict):
        return {_eval(k, s): _eval(v, s) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        out: list[Any] = []
        _comprehend(node.generators, 0, node.elt, s, out)
        return out
    if isinstance(node, ast.DictComp):
        pairs: list[Any] = []
        _comprehend(node.generators, 0, ast.Tuple(elts=[node.key, node.value], ctx=ast.Load()), s, pairs)
        return dict(pairs)
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                parts.append(_eval(v, s))
        return "".join(parts)
    if isinstance(node, ast.FormattedValue):
        val = _eval(node.value, s)
        spec = "" if node.format_spec is None else _eval(node.format_spec, s)
        return format(val, spec)
    raise ExprError(f"{type(node).__name__} is not allowed in a rule")


def _bind(target: ast.AST, value: Any, frame: dict[str, Any]) -> None:
    if isinstance(target, ast.Name):
        frame[target.id] = value
        return
    elts = target.elts  # type: ignore[attr-defined]
    vals = list(value)
    if len(vals) != len(elts):
        raise ExprError(f"cannot unpack {len(vals)} values into {len(elts)} names")
    for t, v in zip(elts, vals, strict=True):
        _bind(t, v, frame)


def _comprehend(gens: list[ast.comprehension], i: int, elt: ast.AST, s: _Scope, out: list[Any]) -> None:
    if i == len(gens):
        out.append(_eval(elt, s))
        if len(out) > MAX_SEQUENCE:
            raise ExprError("comprehension too long")
        return
    g = gens[i]
    seq = _eval(g.iter, s)
    frame: dict[str, Any] = {}
    s.local.append(frame)
    try:
        for item in seq:
            _bind(g.target, item, frame)
            if all(_eval(c, s) for c in g.ifs):
                _comprehend(gens, i + 1, elt, s, out)
    finally:
        s.local.pop()


# -------------------------------------------------------------- templates --
class TemplateError(ValueError):
    """A malformed note or label template (one line)."""


def _outside_strings(s: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """(index, char) of `s` from `start`, skipping Python string literals
    (their quotes included, backslash escapes honoured)."""
    quote, esc = "", False
    for i in range(start, len(s)):
        ch = s[i]
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        else:
            yield i, ch


def _split_placeholder(body: str) -> tuple[str, str]:
    """'expr:spec' -> (expr, spec); the spec is after the last ':' at depth 0
    outside strings."""
    depth, cut = 0, -1
    for i, ch in _outside_strings(body):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ":" and depth == 0:
            cut = i
    return (body, "") if cut < 0 else (body[:cut], body[cut + 1:])


class Template:
    """Text with ``{EXPR}`` or ``{EXPR:SPEC}`` placeholders (``{{``/``}}``
    for braces). Every placeholder is a rule expression; SPEC is a Python
    format spec (``.1f``, ``+.1%``, ``,.0f``)."""

    __slots__ = ("parts", "source")

    def __init__(self, source: str):
        if not isinstance(source, str):
            raise TemplateError(f"expected text, got {type(source).__name__}")
        self.source = source
        self.parts: list[str | tuple[Expr, str]] = []
        i, lit = 0, []
        while i < len(source):
            ch = source[i]
            if ch == "{" and source.startswith("{{", i):
                lit.append("{")
                i += 2
            elif ch == "}" and source.startswith("}}", i):
                lit.append("}")
                i += 2
            elif ch == "{":
                end = _matching_brace(source, i)
                if end < 0:
                    raise TemplateError(f"{source!r}: unclosed '{{' at column {i + 1}")
                if lit:
                    self.parts.append("".join(lit))
                    lit = []
                body, spec = _split_placeholder(source[i + 1:end])
                try:
                    self.parts.append((Expr(body), spec))
                except ExprError as e:
                    raise TemplateError(f"{source!r}: placeholder {{{source[i + 1:end]}}}: {e}") from None
                i = end + 1
            elif ch == "}":
                raise TemplateError(f"{source!r}: single '}}' at column {i + 1} (write '}}}}')")
            else:
                lit.append(ch)
                i += 1
        if lit:
            self.parts.append("".join(lit))

    def literal_text(self) -> str:
        """The template with every placeholder cut out (what a reader sees
        that no result formats)."""
        return "\u241f".join(p for p in self.parts if isinstance(p, str))

    def render(self, env: Mapping[str, Any], on_name: Callable[[str], None] | None = None) -> str:
        out: list[str] = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
                continue
            e, spec = p
            v = evaluate(e, env, on_name)
            try:
                out.append(format(v, spec) if spec else auto_format(v))
            except (TypeError, ValueError) as err:
                raise ExprError(f"{{{e.source}:{spec}}}: cannot format {v!r}: {err}") from None
        return "".join(out)


def _matching_brace(s: str, start: int) -> int:
    depth = 0
    for i, ch in _outside_strings(s, start):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def auto_format(v: Any) -> str:
    """A figure as a note shows it without a spec: integers with thousands
    separators, other numbers to three significant digits (or whole above
    a thousand)."""
    if v is None:
        return "—"
    if isinstance(v, (bool, str)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        a = abs(v)
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.0f}"
        if a >= 10:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(auto_format(x) for x in v)
    raise ExprError(f"cannot format a {type(v).__name__} in a note")


# --------------------------------------------------- the rule for notes --
_CODE = re.compile(r"`[^`]*`")
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.,]*")
_BINARY_UNIT = re.compile(r"^\s?(?:KiB|MiB|GiB|TiB)\b")
_NUMBER_WITH_UNIT = re.compile(r"[0-9.,]+(?:[A-Za-z]{1,3})")


def texts_of(template: Template, lets: Mapping[str, Expr] | None = None) -> list[str]:
    """All the text a template can put in a note: its literal parts, the
    string constants of its placeholders, and those of the `let` rules its
    placeholders read (recursively)."""
    out = [p for p in template.parts if isinstance(p, str)]
    seen: set[str] = set()

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.FormattedValue):
            walk(node.value)  # its format spec (".1f") is no text
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
        elif isinstance(node, ast.Name) and lets and node.id in lets and node.id not in seen:
            seen.add(node.id)
            walk(lets[node.id].tree)
        for child in ast.iter_child_nodes(node):
            walk(child)

    for p in template.parts:
        if not isinstance(p, str):
            walk(p[0].tree)
    return out


def check_note_text(template: Template | str, lets: Mapping[str, Expr] | None = None) -> list[str]:
    """Figures typed by hand in a note. Outside placeholders a digit may
    only stand in a name (a word with a letter that is not a number with a
    unit: `page_fault2`, `x86`, `v12`, `-j160`, `E5-2630v3`, a commit id),
    in a code span in backticks (a config key or knob value), or in a
    binary size naming a page or folio size (`4 KiB`, `2 MiB`). `3.3x`,
    `-28%`, `0.05`, `10s` are figures: they must be placeholders. The
    strings a placeholder can produce (its string constants, and those of
    the `lets` it reads) are held to the same rule. Returns the offending
    tokens (empty: the note is clean)."""
    t = template if isinstance(template, Template) else Template(template)
    bad: list[str] = []
    for part in texts_of(t, lets):
        text = _CODE.sub(" ", part)
        for m in _TOKEN.finditer(text):
            tok = m.group(0).rstrip(".,")
            if not any(c.isdigit() for c in tok):
                continue
            end = m.start() + len(tok)
            if any(c.isalpha() for c in tok):
                unit = _NUMBER_WITH_UNIT.fullmatch(tok)
                if not unit or tok.endswith(("KiB", "MiB", "GiB", "TiB")):
                    continue
            elif _BINARY_UNIT.match(text[end:]):
                continue
            elif m.start() >= 2 and text[m.start() - 1] == "-" and text[m.start() - 2].isalpha():
                continue  # a hyphenated name: order-4, x86-64
            lead = text[m.start() - 1] if m.start() > 0 and text[m.start() - 1] in "-+~" else ""
            tail = "%" if text[end:end + 1] == "%" else ""
            bad.append(lead + tok + tail)
    return bad
