"""The Python API's two speed targets (issue 31), each beside its baseline, each step in a fresh
child process of this one (wall time of the evaluation only, peak RSS from ``os.wait4``):

- ``cli``: ``hieval evaluate`` from the Parquet files, as a user runs it (a whole process:
  start-up, imports, the run); ``cli-inprocess``: ``hieval.cli.main`` timed after the imports;
- ``api``: ``hieval.evaluate`` from Polars DataFrames already in memory (read before timing);
- ``evaluator``: ``hieval.Evaluator`` over ``--batches`` batches of documents (split before
  timing), ``update`` each then ``compute``, against ``api`` (one evaluate).

Targets: ``api`` no slower than ``cli``; ``evaluator`` no slower than 1.2 x ``api``. The
metrics of ``api`` and ``evaluator`` are checked against the CLI's ``metrics.parquet``.

    python benchmarks/api_benchmark.py --scale 100 --batches 100
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("cli", "cli-inprocess", "api", "evaluator")


def child(step: str, gold: Path, pred: Path, work: Path, batches: int) -> dict:
    """Run one step in this process and return its timing (called in the child)."""
    import numpy as np
    import polars as pl

    import hieval
    from hieval import cli

    cache = work / "cache"
    out = work / f"{step}-out"
    if step == "cli-inprocess":
        argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out),
                "--cache", str(cache)]  # fmt: skip
        start = time.perf_counter()
        assert cli.main(argv) == 0
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "metrics": str(out / "metrics.parquet")}
    gold_frame, pred_frame = pl.read_parquet(gold), pl.read_parquet(pred)
    if step == "api":
        start = time.perf_counter()
        ev = hieval.evaluate(gold_frame, {"m": pred_frame}, cache=cache)
        seconds = time.perf_counter() - start
    else:
        docs = gold_frame["doc_id"].unique(maintain_order=True).to_numpy()
        parts = np.array_split(docs, batches)
        index = {d: i for i, part in enumerate(parts) for d in part}
        batch_of = pl.col("doc_id").replace_strict(index, return_dtype=pl.Int64)
        golds = gold_frame.with_columns(b=batch_of).partition_by("b", as_dict=True)
        preds = pred_frame.with_columns(b=batch_of).partition_by("b", as_dict=True)
        empty = pred_frame.head(0)
        start = time.perf_counter()
        evaluator = hieval.Evaluator(cache=cache)
        for i in range(batches):
            pred_batch = preds[(i,)].drop("b") if (i,) in preds else empty
            evaluator.update(golds[(i,)].drop("b"), {"m": pred_batch})
        ev = evaluator.compute()
        seconds = time.perf_counter() - start
    ev.metrics.write_parquet(out.with_suffix(".parquet"))
    return {"seconds": seconds, "metrics": str(out.with_suffix(".parquet"))}


def run(step: str, gold: Path, pred: Path, work: Path, batches: int) -> dict:
    """One step in a fresh child process: its own timing, and the child's peak RSS."""
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    if step == "cli":
        out, cache = work / "cli-out", work / "cache"
        command = [sys.executable, "-m", "hieval.cli", "evaluate", "--gold", str(gold),
                   "--pred", f"m={pred}", "--out", str(out), "--cache", str(cache)]  # fmt: skip
    else:
        command = [sys.executable, __file__, "--child", step, "--gold", str(gold), "--pred",
                   str(pred), "--work", str(work), "--batches", str(batches)]  # fmt: skip
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{step} failed")
    result = {"peak_rss_mb": usage.ru_maxrss / 1024}
    if step == "cli":
        return result | {"seconds": wall, "metrics": str(work / "cli-out" / "metrics.parquet")}
    return result | json.loads(output.decode().strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=100)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", choices=STEPS[1:])
    parser.add_argument("--gold", type=Path)
    parser.add_argument("--pred", type=Path)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args(argv)
    if args.child:
        result = child(args.child, args.gold, args.pred, args.work, args.batches)
        print(json.dumps(result))
        return
    sys.path.insert(0, str(ROOT))
    import polars as pl

    from benchmarks import generate as gen

    gold, pred = gen.generate(scale=args.scale)
    work = gold.parent / "tmp" / "api"
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "hieval.cli", "hierarchy", "--out",
                    str(work / "hier"), "--cache", str(work / "cache")],
                   check=True, capture_output=True, cwd=ROOT)  # fmt: skip
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for step in STEPS:
            result = run(step, gold, pred, work, args.batches)
            if step not in best or result["seconds"] < best[step]["seconds"]:
                best[step] = result
    reference = pl.read_parquet(best["cli"]["metrics"])
    info = gen.record(gold)
    print(f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} cores; "
          f"scale {args.scale:g}: {info['documents']} documents, {info['gold_rows']} gold "
          f"and {info['pred_rows']} predicted rows; {args.batches} batches")  # fmt: skip
    print("| step | wall s | peak RSS MB | metrics = CLI's |")
    print("|---|---:|---:|---|")
    for step in STEPS:
        same = pl.read_parquet(best[step]["metrics"]).equals(reference)
        print(f"| {step} | {best[step]['seconds']:.2f} | {best[step]['peak_rss_mb']:.0f} | "
              f"{'yes' if same else 'NO'} |")  # fmt: skip
    api, cli_s = best["api"]["seconds"], best["cli"]["seconds"]
    evaluator = best["evaluator"]["seconds"]
    print(f"api / cli = {api / cli_s:.2f} (target <= 1); api / cli-inprocess = "
          f"{api / best['cli-inprocess']['seconds']:.2f}; evaluator / api = "
          f"{evaluator / api:.2f} (target <= 1.2)")  # fmt: skip


if __name__ == "__main__":
    main()
