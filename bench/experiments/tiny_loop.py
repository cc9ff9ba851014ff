"""A loop of plan calls on one tiny tensor, for ``perf record`` (issue 10: plan calls on 2x16x8x8).

    PYTHONPATH=. perf record -g -o /tmp/p.data python bench/experiments/tiny_loop.py avg_pool2d 100000
    PYTHONPATH=. python bench/experiments/tiny_loop.py all 20000      # kernel-only medians (Launch.kernel_ns)

The plans are the ones bench/plan_overhead.py times (its ``plans``), so a profile shows what that bench measures.
"""
from __future__ import annotations

import sys

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from plan_overhead import kernel_us, plans  # noqa: E402


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "all"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    shape = tuple(int(v) for v in sys.argv[3].split("x")) if len(sys.argv) > 3 else (2, 16, 8, 8)
    run, made = plans(shape)
    if name == "all":
        for op, (plan, args) in made.items():
            k = kernel_us(plan, args, calls)
            print(f"{op}: kernel {'-' if k is None else f'{k:.2f}'} us")
        return 0
    f = run[name]
    for _ in range(calls):
        f()
    return 0


if __name__ == "__main__":
    sys.exit(main())
