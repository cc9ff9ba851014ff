"""Merge an allocating run and an ``--out`` run of ``bench/compare.py`` into the tables of docs/BENCHMARKS.md and
the README.

    python bench/compare.py --threads 1 2 --reps 7 --json bench/results/compare.json
    python bench/compare.py --out --threads 1 2 --reps 7 --json bench/results/compare_out.json
    python bench/merge_tables.py bench/results/compare.json bench/results/compare_out.json          # every row
    python bench/merge_tables.py bench/results/compare.json bench/results/compare_out.json --readme # selection

Rows are matched on (operator, case, layout, dtype, threads, mode).  "vs other" is the speed-up against the
allocating call of the other libraries (PyTorch; TensorFlow for ``max_pool_grad``; JAX's jit-compiled gradient
of ``lax.reduce_window`` for float32 max and average pooling; ``np.where`` and ``torch.where`` for
``max_pooling_grad``); the ``(out=)`` columns time every library writing a preallocated output where it has one
(TensorFlow and JAX have none: the same allocating calls).
"""
from __future__ import annotations

import argparse
import json

COLUMNS = ("operator", "case", "layout", "dtype", "thr", "mode", "poolgrad ms", "% of copy", "vs other",
           "poolgrad ms (out=)", "% of copy (out=)", "vs other (out=)")


def _case(row: dict) -> str:
    return f"{row['shape']} {row['extra']}".strip()


def _key(row: dict) -> tuple:
    return (row["op"], _case(row), row["layout"], row["dtype"], row["threads"], row["deterministic"])


def _vs(row: dict) -> str:
    parts = []
    if row.get("vs_torch") is not None and row["op"] != "max_pooling_grad":
        parts.append(f"{row['vs_torch']:.2f}x PyTorch")
    if row.get("vs_tf") is not None:
        parts.append(f"{row['vs_tf']:.1f}x TF")
    if row.get("vs_jax") is not None:
        parts.append(f"{row['vs_jax']:.0f}x JAX")
    if row["op"] == "max_pooling_grad":
        if row.get("vs_numpy") is not None:
            parts.append(f"{row['vs_numpy']:.1f}x np.where")
        if row.get("vs_torch") is not None:
            parts.append(f"{row['vs_torch']:.1f}x torch.where")
    return ", ".join(parts) or "-"


def _mode(row: dict) -> str:
    return {True: "det", False: "nondet", None: "-"}[row["deterministic"]]


def _selected(row: dict) -> bool:
    """The README's rows: the issue targets' cases, float32 plus one 16-bit row, deterministic mode."""
    if row["deterministic"] is None:                  # max_pooling_grad and the forwards
        return row["dtype"] == "f32"
    case = _case(row)
    if not row["deterministic"] or "i32" in case or "k2s2" in case or "VALID" in case:
        return False
    if row["op"] == "max_pool_grad":
        return row["layout"] == "NHWC" and row["dtype"] in ("f32", "bf16")
    if row["op"] == "adaptive_max_pool2d_backward":
        return row["dtype"] == "f32" and row["layout"] == "NCHW"
    return row["dtype"] == "f32" or (row["dtype"] == "bf16" and row["shape"].startswith("32x") and
                                     row["layout"] == "NCHW")


def merge(alloc: dict, out: dict, readme: bool = False) -> str:
    by_key = {_key(r): r for r in out["rows"]}
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in alloc["rows"]:
        if readme and not _selected(row):
            continue
        o = by_key.get(_key(row))
        cells = [row["op"], _case(row), row["layout"], row["dtype"], str(row["threads"]), _mode(row),
                 f"{row['poolgrad_s'] * 1e3:.2f}", f"{row['frac_copy']:.0%}", _vs(row)]
        if o is None:
            cells += ["-", "-", "-"]
        else:
            cells += [f"{o['poolgrad_s'] * 1e3:.2f}", f"{o['frac_copy']:.0%}", _vs(o)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _rates(run: dict) -> str:
    """The copy rates of a run by thread count (the roofline each row's "% of copy" divides by)."""
    rates = sorted(run["copy_gbs"].items(), key=lambda kv: int(kv[0]))
    return ", ".join(f"{t} thread(s) {r:.1f} GB/s" for t, r in rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("alloc_json", help="JSON of an allocating run (compare.py --json)")
    parser.add_argument("out_json", help="JSON of an --out run (compare.py --out --json)")
    parser.add_argument("--readme", action="store_true", help="only the README's selected rows")
    args = parser.parse_args(argv)
    with open(args.alloc_json) as fh:
        alloc = json.load(fh)
    with open(args.out_json) as fh:
        out = json.load(fh)
    print(f"copy rate: {_rates(alloc)} (allocating run); {_rates(out)} (out= run)\n")
    print(merge(alloc, out, args.readme))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
