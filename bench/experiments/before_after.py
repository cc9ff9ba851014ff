"""Before / after on the CNN pooling layers: ``bench/models.py`` run alternately on two built poolgrad trees.

A change's effect measured as each tree's PyTorch time / poolgrad time, side by side: for every (model, batch,
threads) configuration the two trees' ``bench/models.py`` runs follow each other (their order alternating from
one configuration to the next), so both ratios of a row were measured minutes apart at most, against the same
PyTorch.  Ratios > 1 mean poolgrad is faster.  Only ratios mean anything on a shared machine; each tree's
ratio is against PyTorch timed in its own process, interleaved with its poolgrad calls.

    python bench/experiments/before_after.py --base /tmp/main-build --models alexnet googlenet vgg16 \\
        --layouts NCHW --batches 8 --threads 1 --phases fwd bwd --reps 5

``--base`` and ``--new`` (default: this tree) are repository roots with the extensions built in place; each is
run with its own ``bench/models.py`` (``--json``; the tables are rendered here).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_tree(root: str, models: list[str], batch: int, threads: int, args: argparse.Namespace) -> dict:
    """One ``bench/models.py`` run of the tree at ``root``; returns its JSON result."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        cmd = [sys.executable, os.path.join(root, "bench", "models.py"), "--models", *models,
               "--layouts", *args.layouts, "--batches", str(batch), "--threads", str(threads),
               "--modes", *args.modes, "--phases", *args.phases, "--reps", str(args.reps), "--json", out,
               "--markdown", os.path.join(tmp, "run.md"), "--tables", "layers"]
        env = dict(os.environ, PYTHONPATH=root)
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        if not os.path.exists(out):
            raise RuntimeError(f"{root}: bench/models.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        with open(out) as fh:
            return json.load(fh)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="root of the tree before the change (built in place)")
    ap.add_argument("--new", default=HERE, help="root of the tree after it (default: this tree)")
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--layouts", nargs="+", default=["NCHW"])
    ap.add_argument("--batches", type=int, nargs="+", default=[8])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--modes", nargs="+", default=["out"])
    ap.add_argument("--phases", nargs="+", default=["fwd", "bwd"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", help="write both trees' rows to this file")
    args = ap.parse_args(argv)
    rows: dict[tuple, dict] = {}
    flip = False
    for threads in args.threads:
        for batch in args.batches:
            for model in args.models:
                order = [("new", args.new), ("base", args.base)]
                for tag, root in (reversed(order) if flip else order):
                    res = run_tree(root, [model], batch, threads, args)
                    for r in res["rows"]:
                        key = (r["model"], r["layer"], r["batch"], r["layout"], r["threads"], r["mode"])
                        rows.setdefault(key, {})[tag] = r
                flip = not flip
                for key, both in rows.items():
                    if key[0] != model or key[2] != batch or key[4] != threads or both.get("shown"):
                        continue
                    both["shown"] = True
                    line = f"{key[0]}/{key[1]:<28} N={key[2]:<2} {key[3]} t={key[4]} {key[5]}"
                    for phase in args.phases:
                        ratios = []
                        for tag in ("base", "new"):
                            r = both.get(tag, {})
                            ok = f"poolgrad_{phase}_s" in r
                            ratios.append(r[f"torch_{phase}_s"] / r[f"poolgrad_{phase}_s"] if ok else float("nan"))
                        line += f"  {phase} {ratios[0]:5.2f}x -> {ratios[1]:5.2f}x"
                    print(line, flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([{"key": list(k), **{t: v[t] for t in ("base", "new") if t in v}} for k, v in rows.items()],
                      fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
