"""Property-based: whatever text or dict it is given, the config loader either
loads it or raises ConfigError with a one-line message — never another
exception, never a crash (a Rust panic would surface as PanicException)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TINY
from foliosim import _core
from foliosim._core import ConfigError

VALID_LINES = (TINY + '\n[knobs]\n"vm.min_free_kbytes" = 65536\n'
               '"kernel/mm/transparent_hugepage/enabled" = "never"\n').splitlines()

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys = st.sampled_from(["seed", "machine", "workload", "run", "knobs", "profile", "name", "mode",
                        "tasks", "size_mib", "warmup_s", "duration_s", "check", "fs",
                        '"vm.min_free_kbytes"', '"kernel/mm/transparent_hugepage/enabled"',
                        "bogus", '"a.b"', "x-y"])
values = st.one_of(
    st.integers(min_value=-2**63, max_value=2**63 - 1).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f).replace("inf", "inf").replace("nan", "nan")),
    st.booleans().map(lambda b: str(b).lower()),
    st.text(max_size=12).map(json.dumps),
    st.sampled_from(['"page_fault1"', '"threads"', '"processes"', '"never"', '"generic-x86"',
                     "[]", "[1, 2]", "{}", "{a = 1}", "1979-05-27", "0x10", "1e400", '"', "[", "=", ""]),
)
random_line = st.one_of(
    st.builds(lambda k, v: f"{k} = {v}", keys, values),
    st.builds(lambda k: f"[{k}]", keys),
    st.builds(lambda k: f"[[{k}]]", keys),
    st.text(max_size=30),
)


@st.composite
def mutated_config(draw):
    lines = list(VALID_LINES)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["drop", "dup", "corrupt", "insert", "replace_value", "swap"]))
        i = draw(st.integers(0, len(lines) - 1)) if lines else 0
        if not lines:
            lines.append(draw(random_line))
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "corrupt":
            s = lines[i]
            j = draw(st.integers(0, len(s)))
            lines[i] = s[:j] + draw(st.text(max_size=3)) + s[j + draw(st.integers(0, 3)):]
        elif op == "insert":
            lines.insert(i, draw(random_line))
        elif op == "replace_value" and "=" in lines[i]:
            lines[i] = lines[i].split("=", 1)[0] + "= " + draw(values)
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines) + "\n"


def check_load(fn, text: str, origin: str) -> None:
    try:
        out = fn(text, origin)
    except ConfigError as e:
        msg = str(e)
        assert msg and "\n" not in msg and "\r" not in msg, repr(msg)
        assert msg.startswith(origin), msg
        return
    cfg = json.loads(out)
    assert isinstance(cfg, dict)


@SETTINGS
@given(mutated_config())
def test_load_toml_mutated(text):
    check_load(_core.load_toml, text, "fuzz.toml")


@SETTINGS
@given(st.text(max_size=200))
def test_load_toml_random_text(text):
    check_load(_core.load_toml, text, "fuzz.toml")


@SETTINGS
@given(st.binary(max_size=200))
def test_load_toml_random_bytes(data):
    check_load(_core.load_toml, data.decode("utf-8", errors="replace"), "fuzz.toml")


@SETTINGS
@given(st.lists(random_line, max_size=12))
def test_load_toml_random_lines(lines):
    check_load(_core.load_toml, "\n".join(lines), "fuzz.toml")


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=10)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=10), children, max_size=4)),
    max_leaves=20,
)


@SETTINGS
@given(st.dictionaries(st.sampled_from(["seed", "machine", "workload", "run", "knobs", "zz"]), json_values, max_size=5))
def test_load_json_random_dicts(d):
    check_load(_core.load_json, json.dumps(d), "<dict>")


@SETTINGS
@given(st.text(max_size=100))
def test_load_json_random_text(text):
    check_load(_core.load_json, text, "<dict>")
