# `make demo`: set up .venv/, build foliosim (release) into it, run the default
# experiment. `make test`: set up the same, then every test (cargo + pytest).
# Needs only Rust (cargo; cargo-nextest if present), Python 3.11 with pip, gcc
# and make; Python packages come from PyPI into .venv/. `make test` also runs
# the lint gates (`make lint`: rustfmt, clippy, ruff, mypy, the _core stub
# check; ruff, mypy and pandas-stubs come into .venv/ too) and adds
# Ray (the optional extra, for the Ray sweep test) and, when run as root,
# Debian's chromium (for the report test); without them those tests skip and
# say why. FOLIOSIM_NO_APT=1 skips the apt-get step.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := demo

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-stamp
PY_DEPS := 'maturin>=1.5,<2' 'pandas>=2.0' 'pyarrow>=14' 'matplotlib>=3.7' 'pytest>=7' 'hypothesis>=6'
# The lint tools, pinned: a new release may find new things, and a gate
# should not start failing without a change to the repository.
LINT_DEPS := 'ruff==0.17.6' 'mypy==2.4.1' 'pandas-stubs==3.1.0.261029'
PIP_FLAGS := --quiet --disable-pip-version-check --no-input
LINT_STAMP := $(VENV)/.lint-stamp

RAY_STAMP := $(VENV)/.ray-stamp

.PHONY: demo test venv develop cargo-test pytest bench clean browser ray docs-tables validation fuzz validate golden lint toolchain reproductions check-reproductions docs-validation validation-public record-test-traces bench-record validate-programs validate-rule programs traces

demo: develop
	$(VENV)/bin/foliosim run configs/default.toml

# The suites and the lint gates all run even if one fails; the exit code
# says if any did.
test: develop browser ray validation
	rc=0; $(MAKE) --no-print-directory cargo-test || rc=1; \
	$(MAKE) --no-print-directory pytest || rc=1; \
	$(MAKE) --no-print-directory lint || rc=1; exit $$rc

# The Rust release rust-toolchain.toml pins, linked to this machine's stable
# when that is the same release and rustup cannot download it (see the script).
toolchain:
	tools/ensure-rust-toolchain.sh

# Lint gates: formatting (the workspace, and fuzz/, its own workspace),
# clippy with warnings as errors, ruff, mypy (config in pyproject.toml), and
# mypy's stubtest: python/foliosim/_core.pyi against the compiled module
# (every public name in both, with the same parameters). Every gate runs;
# the exit code says if any failed.
lint: toolchain develop $(LINT_STAMP)
	rc=0; \
	cargo fmt --all --check || rc=1; \
	cargo fmt --all --check --manifest-path fuzz/Cargo.toml || rc=1; \
	cargo clippy --all-targets --workspace -- -D warnings || rc=1; \
	$(VENV)/bin/ruff check python tests/python || rc=1; \
	$(VENV)/bin/mypy || rc=1; \
	$(VPY) -m mypy.stubtest foliosim._core || rc=1; \
	if [ $$rc = 0 ]; then echo "lint: all gates passed"; else echo "lint: some gates failed (see above)"; fi; exit $$rc

$(LINT_STAMP): $(STAMP) Makefile
	$(VPY) -m pip install $(PIP_FLAGS) $(LINT_DEPS)
	touch $@

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install $(PIP_FLAGS) $(PY_DEPS)
	touch $@

# Builds the extension in release mode and installs the package (editable:
# python/ is used in place) with its console script .venv/bin/foliosim.
develop: toolchain $(STAMP)
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH \
		$(VENV)/bin/maturin develop --release
	test -x $(VENV)/bin/foliosim

# The binding crate has no Rust tests (it cannot link without an interpreter);
# pytest covers it, so it is left out here rather than built a second time.
cargo-test: toolchain
	if cargo nextest --version >/dev/null 2>&1; then \
		cargo nextest run --workspace --exclude foliosim-py --no-tests=warn; \
	else \
		cargo test --workspace --exclude foliosim-py; \
	fi

# Headless Chromium for the report test (Debian's package), when missing.
browser:
	if command -v chromium >/dev/null 2>&1 || [ -n "$${FOLIOSIM_NO_APT:-}" ]; then :; \
	elif [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
		echo "make: chromium is not installed and apt-get needs root: the browser test will skip"; \
	else \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			chromium >/dev/null) || echo "make: apt-get install chromium failed: the browser test will skip"; \
	fi

# Ray, the optional extra `foliosim[ray]`, for the Ray sweep test.
ray: $(RAY_STAMP)

$(RAY_STAMP): $(STAMP)
	if $(VPY) -m pip install $(PIP_FLAGS) 'ray>=2.9'; then touch $@; \
	else echo "make: pip install ray failed: the Ray test will skip"; fi

# docs/reproductions.{json,md}: every experiment rerun (experiments/*/*.toml,
# FOLIOSIM_JOBS simulations at a time, default one per CPU; the replays of the
# recorded kernel build hold about 3.3 GB each; progress on stderr). `make
# test` checks them cheaply (hashes of the inputs, the cheap experiments
# rerun); check-reproductions reruns all; `python -m foliosim.reproduce.docs
# stale` lists the experiments whose inputs changed.
reproductions: develop
	$(VPY) -m foliosim.reproduce.docs write

check-reproductions: develop
	$(VPY) -m foliosim.reproduce.docs check

# The published-vs-simulated tables in README.md and docs/mechanisms/*.md,
# from docs/reproductions.json (`make reproductions` first when it is stale).
# docs/validation-public.{json,md}: every point of validation/public/ predicted
# on its machine's profile (no root; about a minute a point on two cores).
validation-public: develop
	$(VPY) -m foliosim.public --docs

docs-tables: develop
	$(VPY) -m foliosim.doctables docs/reproductions.json README.md docs/mechanisms/*.md

# docs/validation.md from a full `foliosim validate --json` on this host (root,
# the THP knobs; about 10 minutes; run it on a quiet machine): real against
# predicted, the held-out headline, medians of 5 interleaved repeats.
docs-validation: develop validation
	mkdir -p results/validate
	$(VENV)/bin/foliosim validate --json --out results/validate > results/validate/report.json
	$(VPY) -m foliosim.validation_doc results/validate/report.json docs/validation.md

# Rewrites tests/golden/expected/ from the current code: for a deliberate
# change of output (commit the files with it and say which figures moved).
golden: toolchain
	FOLIOSIM_BLESS=1 cargo test --release -p foliosim --test golden

pytest: $(STAMP)
	$(VPY) -m pytest -q tests/python

# Real-kernel microbenchmarks (C), used by calibrate/validate/record. The
# recorder needs perf (Debian's linux-perf) and, with --mode valgrind,
# valgrind (the examples sqlite3): installed from Debian's packages when
# missing and we may (root with apt-get); otherwise the tests that need them
# skip and say why.
validation:
	$(MAKE) --no-print-directory -C validation
	@if ! command -v valgrind >/dev/null || ! command -v sqlite3 >/dev/null || ! command -v perf >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind sqlite3 linux-perf >/dev/null || \
				echo "note: could not install valgrind/sqlite3/linux-perf; record tests will skip"; \
		else echo "note: valgrind/sqlite3/perf missing and not root; record tests will skip"; fi; \
	fi

# The small traces the tests, the golden outputs and the fuzzer replay
# (committed: CI does not record them), from tests/data/tinyproj: its
# `make -j2` build and a program of four threads, recorded with perf (root);
# and /bin/true recorded with valgrind, a seed of the other recorder.
TEST_TRACES := tests/data/traces
record-test-traces: develop validation
	mkdir -p $(TEST_TRACES)
	$(MAKE) -s -C tests/data/tinyproj clean threads
	$(VENV)/bin/foliosim record -o $(TEST_TRACES)/make-j2.fstrace -- make -s -j2 -C tests/data/tinyproj tiny
	$(VENV)/bin/foliosim record -o $(TEST_TRACES)/threads.fstrace -- tests/data/tinyproj/threads
	$(VENV)/bin/foliosim record --mode valgrind -o fuzz/seeds/true-valgrind.fstrace -- true
	cp $(TEST_TRACES)/threads.fstrace fuzz/seeds/threads.fstrace
	$(MAKE) -s -C tests/data/tinyproj clean

# The real programs the published experiments replay (python/foliosim/
# programs.py, docs/experiments.md "Recorded programs"): `make programs`
# builds ebizzy and XSBench from their public sources, never committed
# here (EBIZZY_SRC, XSBENCH_SRC: a checkout or bare git directory of the
# Linux Test Project's and of ANL-CESAR/XSBench's repositories), into
# $FOLIOSIM_CACHE (default results/cache). `make traces` records the
# traces that are missing (root, perf; TRACES=NAME... for some, again):
# ebizzy's into experiments/traces/ (committed), the Linux kernel build's
# (Debian's linux-source-6.12, installed when missing) into the cache under
# the hash of its inputs; TRACES_SMALL=1 records the committed excerpts.
programs: develop
	$(VPY) -m foliosim.programs build

traces: develop validation
	@test -f /usr/src/linux-source-6.12.tar.xz || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-source-6.12 >/dev/null
	$(VPY) -m foliosim.programs record $(if $(TRACES_SMALL),--small) $(TRACES)

# The trace reader fuzzer. cargo-fuzz (libFuzzer) when it is installed and
# builds on this toolchain (stable + RUSTC_BOOTSTRAP=1), for FUZZ_SECONDS;
# the deterministic harness (tests/trace_fuzz.rs) with many inputs either way.
FUZZ_SECONDS ?= 60
FUZZ_ITERS ?= 1000000
fuzz: toolchain
	FOLIOSIM_FUZZ_ITERS=$(FUZZ_ITERS) cargo test -p foliosim --test trace_fuzz -- --nocapture
	if cargo fuzz --version >/dev/null 2>&1; then \
		cd fuzz && mkdir -p corpus/trace_reader && RUSTC_BOOTSTRAP=1 cargo fuzz run trace_reader corpus/trace_reader seeds -- -max_total_time=$(FUZZ_SECONDS); \
	else echo "cargo-fuzz not installed (cargo install cargo-fuzz): ran the deterministic harness only"; fi

# Real kernel vs model under every THP setting (root; skips otherwise).
validate: develop validation
	$(VENV)/bin/foliosim validate

# Real programs recorded, run natively and replayed under 4K, 64K and 2M:
# faults, peak RSS, sys time and its change (root, perf; a quiet host, a few
# minutes); fills the last table of docs/validation.md.
validate-programs: develop validation
	$(VENV)/bin/foliosim validate --programs --out results/validate-programs
	$(VPY) -m foliosim.validate_programs doc results/validate-programs/programs.json docs/validation.md

# The derivation rule of docs/profiles.md checked on this host, after
# docs-validation: a profile of this host's facts with everything else
# derived from generic-x86, the model rerun on that report's real figures
# (a minute; no root). RULE_CORE names this host's core (a key of
# profiles/rule.toml): this development host is a Granite Rapids guest
# (AMX, 2 MiB L2 and 64 KiB L1i per core, 480 MiB L3), whose Redwood Cove
# the rule has no figure for; Golden Cove stands for it, as in
# validation/public/profiles/lkp-gnr-6767p.toml.
RULE_CORE ?= golden-cove
RULE_REPORT ?= results/validate/report.json
validate-rule: develop
	$(VPY) -m foliosim.rule_check run --core $(RULE_CORE) --report $(RULE_REPORT) > /dev/null
	$(VPY) -m foliosim.rule_check doc results/validate/rule/rule.json docs/validation.md

bench: develop
	$(VENV)/bin/foliosim bench

# What recording with perf costs (docs/performance.md, "Recording
# overhead"): root, on a quiet host, about an hour on 2 CPUs. Installs
# Debian's linux-source-6.12 (the kernel build's source) when missing;
# fills the tables of docs/performance.md and docs/tutorial.md.
bench-record: develop validation
	@test -f /usr/src/linux-source-6.12.tar.xz || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-source-6.12 >/dev/null
	$(VENV)/bin/foliosim bench --record --out results/bench-record
	$(VPY) -m foliosim.record_bench doc results/bench-record/record-bench.json docs/performance.md docs/tutorial.md

clean: toolchain
	rm -rf $(VENV) results python/foliosim/_core*.so
	cargo clean
