"""`python -m foliosim._bench_big`: the "big_machine" benchmark, run in its own
process by `foliosim bench` so that its peak RSS can be measured alone.
Prints one JSON object (what `_core.bench_json("big_machine")` returns)."""

import sys

from . import _core


def main() -> int:
    try:
        out = _core.bench_json("big_machine")
    except Exception as e:  # one line, the parent reports it
        print(f"foliosim: error: big_machine: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    sys.stdout.write(out.strip() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
