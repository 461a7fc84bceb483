"""`python -m foliosim._bench_big [NAME]`: a benchmark whose peak RSS counts
("big_machine", the default, or "cloud_scale"), run in its own process by
`foliosim bench` so that its peak RSS can be measured alone. Prints one JSON
object (what `_core.bench_json(NAME)` returns)."""

import sys

from . import _core


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "big_machine"
    try:
        out = _core.bench_json(name)
    except Exception as e:  # one line, the parent reports it
        print(f"foliosim: error: {name}: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    sys.stdout.write(out.strip() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
