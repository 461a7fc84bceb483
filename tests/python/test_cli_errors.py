"""Bad input: one line on stderr naming file and key, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TINY, line_of, one_line_error, run_cli, stderr_lines


def write(tmp_path: Path, text: str, name: str = "bad.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def assert_one_line_error(proc, *must_contain: str) -> str:
    """A config error before any run: nothing on stdout, the line prefixed."""
    line = one_line_error(proc, *must_contain)
    assert line.startswith("foliosim: error: "), line
    assert proc.stdout == ""
    return line


def replace_line(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


def test_malformed_toml(tmp_path):
    text = replace_line(TINY, "tasks = 2", "tasks = = 2")
    p = write(tmp_path, text)
    line = assert_one_line_error(run_cli("run", str(p)), str(p))
    assert f"{p}:{line_of(text, 'tasks = = 2')}:" in line


def test_unclosed_table_header(tmp_path):
    p = write(tmp_path, TINY + "\n[run\n")
    assert_one_line_error(run_cli("run", str(p)), str(p))


def test_unknown_top_level_key(tmp_path):
    p = write(tmp_path, "bogus_key = 1\n" + TINY)
    assert_one_line_error(run_cli("run", str(p)), str(p), "bogus_key")


def test_unknown_knob(tmp_path):
    text = TINY + '\n[knobs]\n"vm.no_such_knob" = 1\n'
    p = write(tmp_path, text)
    line = assert_one_line_error(run_cli("run", str(p)), str(p), "vm.no_such_knob")
    assert f"{p}:{line_of(text, 'vm.no_such_knob')}:" in line


def test_wrong_type(tmp_path):
    p = write(tmp_path, replace_line(TINY, "tasks = 2", 'tasks = "two"'))
    assert_one_line_error(run_cli("run", str(p)), str(p), "tasks")


def test_wrong_type_run_table(tmp_path):
    p = write(tmp_path, replace_line(TINY, "duration_s = 0.05", 'duration_s = "long"'))
    assert_one_line_error(run_cli("run", str(p)), str(p), "duration_s")


def test_missing_file(tmp_path):
    p = tmp_path / "does-not-exist.toml"
    assert_one_line_error(run_cli("run", str(p)), str(p))


def test_unknown_workload(tmp_path):
    p = write(tmp_path, replace_line(TINY, 'name = "page_fault1"', 'name = "no_such_workload"'))
    assert_one_line_error(run_cli("run", str(p)), str(p), "workload")


def test_unknown_profile(tmp_path):
    p = write(tmp_path, replace_line(TINY, 'profile = "generic-x86"', 'profile = "no-such-machine"'))
    assert_one_line_error(run_cli("run", str(p)), str(p), "profile")


def test_not_utf8(tmp_path):
    p = tmp_path / "bin.toml"
    p.write_bytes(b"seed = 1\n\xff\xfe = 2\n")
    assert_one_line_error(run_cli("run", str(p)), str(p))


@pytest.mark.parametrize("override,key", [
    ("workload.tasks=\"many\"", "tasks"),
    ("knobs.\"vm.no_such_knob\"=1", "vm.no_such_knob"),
    ("no_equals_sign", "no_equals_sign"),
    ("=3", "=3"),
])
def test_bad_set(tiny_config, override, key):
    assert_one_line_error(run_cli("run", str(tiny_config), "--set", override), key)


def test_usage_error_is_one_line():
    proc = run_cli("run")
    assert proc.returncode == 2
    assert len(stderr_lines(proc)) == 1 and "Traceback" not in proc.stderr


def test_unknown_command_is_one_line():
    proc = run_cli("frobnicate")
    assert proc.returncode == 2
    assert len(stderr_lines(proc)) == 1


def test_debug_env_not_needed_for_config_errors(tmp_path):
    # Even with FOLIOSIM_DEBUG unset a config error never shows a traceback
    # (checked above); with it set the error is still raised, not swallowed.
    p = write(tmp_path, "bogus_key = 1\n" + TINY)
    proc = run_cli("run", str(p), env={"FOLIOSIM_DEBUG": "1"})
    assert proc.returncode != 0
    assert "bogus_key" in proc.stderr


@pytest.mark.parametrize(
    ("costs", "key"),
    [
        ("{ trap_ns = -1.0 }", "machine.costs.trap_ns"),
        ('{ trap_ns = "fast" }', "machine.costs.trap_ns"),
        ('{ "nodes.latency_ns" = -1.0 }', "machine.costs.nodes.latency_ns"),
    ],
)
def test_machine_costs_errors_name_the_key_as_written(tmp_path, costs, key):
    # An out-of-range number and a wrong type name the same key: the one
    # the config wrote, not its place in the profile ([cost] trap_ns).
    text = replace_line(TINY, "[machine]\n", f"[machine]\ncosts = {costs}\n")
    p = write(tmp_path, text)
    line = assert_one_line_error(run_cli("run", str(p)), f"{p}:{line_of(text, 'costs = ')}: {key}: ")
    assert ".cost." not in line, line
