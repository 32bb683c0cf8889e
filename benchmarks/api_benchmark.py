"""The Python API's two speed targets (issue 31), each beside its baseline, each step in a fresh
child process of this one (wall time of the evaluation only, peak RSS from ``os.wait4``):

- ``cli``: ``hieval evaluate`` from the Parquet files, as a user runs it (a whole process:
  start-up, imports, the run); ``cli-inprocess``: ``hieval.cli.main`` timed after the imports;
- ``api``: ``hieval.evaluate`` from Polars DataFrames already in memory (read before timing);
- ``evaluator``: ``hieval.Evaluator`` over ``--batches`` batches of documents (split before
  timing), ``update`` each then ``compute``, against ``api`` (one evaluate).

Targets: ``api`` no slower than ``cli``; ``evaluator`` no slower than 1.2 x ``api``. The
metrics of ``api`` and ``evaluator`` are checked against the CLI's ``metrics.parquet`` (or,
without the ``cli`` step, against each other).

``--reduce-rows`` sets the Evaluator's ``reduce_rows`` (its default otherwise).
``--no-error-analysis`` times every step with the error analysis (issue 34's stage, which
dominates one evaluate at 100x) replaced by a no-op in the child, to show the Evaluator's own
work; the benchmark's switch only (the API has none). ``--steps`` runs some steps only; the
steps of one repeat run in turn, so ``--repeat`` alternates them under the same load.

    python benchmarks/api_benchmark.py --scale 100 --batches 100
    python benchmarks/api_benchmark.py --scale 100 --batches 100 --steps api evaluator \
        --repeat 2 --no-error-analysis
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


def child(
    step: str, gold: Path, pred: Path, work: Path, batches: int, *, analysis: bool,
    reduce_rows: int | None,
) -> dict:  # fmt: skip
    """Run one step in this process and return its timing and CPU time (called in the
    child)."""
    import numpy as np
    import polars as pl

    import hieval
    from hieval import cli, run

    if not analysis:  # the benchmark's switch: the stage does nothing, in every step alike
        run.error_analysis = lambda **kw: None
    cpu = time.process_time()

    cache = work / "cache"
    out = work / f"{step}-out"
    if step == "cli-inprocess":
        argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out),
                "--cache", str(cache)]  # fmt: skip
        start = time.perf_counter()
        assert cli.main(argv) == 0
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "cpu": time.process_time() - cpu,
                "metrics": str(out / "metrics.parquet")}  # fmt: skip
    gold_frame, pred_frame = pl.read_parquet(gold), pl.read_parquet(pred)
    if step == "api":
        cpu = time.process_time()
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
        cpu = time.process_time()
        start = time.perf_counter()
        rows = {} if reduce_rows is None else {"reduce_rows": reduce_rows}
        evaluator = hieval.Evaluator(cache=cache, **rows)
        for i in range(batches):
            pred_batch = preds[(i,)].drop("b") if (i,) in preds else empty
            evaluator.update(golds[(i,)].drop("b"), {"m": pred_batch})
        ev = evaluator.compute()
        seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    ev.metrics.write_parquet(out.with_suffix(".parquet"))
    return {"seconds": seconds, "cpu": cpu, "metrics": str(out.with_suffix(".parquet"))}


def run(
    step: str, gold: Path, pred: Path, work: Path, batches: int, *, analysis: bool,
    reduce_rows: int | None,
) -> dict:  # fmt: skip
    """One step in a fresh child process: its own timing, and the child's peak RSS."""
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    if step == "cli":
        out, cache = work / "cli-out", work / "cache"
        command = [sys.executable, "-m", "hieval", "evaluate", "--gold", str(gold),
                   "--pred", f"m={pred}", "--out", str(out), "--cache", str(cache)]  # fmt: skip
    else:
        command = [sys.executable, __file__, "--child", step, "--gold", str(gold), "--pred",
                   str(pred), "--work", str(work), "--batches", str(batches),
                   *([] if analysis else ["--no-error-analysis"]),
                   *([] if reduce_rows is None else ["--reduce-rows", str(reduce_rows)]),
                   ]  # fmt: skip
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
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--no-error-analysis", dest="analysis", action="store_false")
    parser.add_argument("--reduce-rows", type=int, help="the Evaluator's reduce_rows")
    args = parser.parse_args(argv)
    if args.child:
        result = child(
            args.child, args.gold, args.pred, args.work, args.batches, analysis=args.analysis,
            reduce_rows=args.reduce_rows,
        )  # fmt: skip
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
    # A whole `hieval evaluate` process has no switch for the error analysis.
    steps = [step for step in STEPS if step in args.steps and (args.analysis or step != "cli")]
    best: dict[str, dict] = {}
    for repeat in range(args.repeat):
        for step in steps:
            result = run(step, gold, pred, work, args.batches, analysis=args.analysis,
                         reduce_rows=args.reduce_rows)  # fmt: skip
            print(f"# repeat {repeat + 1}, {step}: {result['seconds']:.2f} s wall, "
                  f"{result.get('cpu', float('nan')):.2f} s CPU, load {os.getloadavg()[0]:.1f}",
                  flush=True)  # fmt: skip
            if step not in best or result["seconds"] < best[step]["seconds"]:
                best[step] = result
    reference = pl.read_parquet(best[steps[0]]["metrics"])
    info = gen.record(gold)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, {os.cpu_count()} cores; "
          f"scale {args.scale:g}: {info['documents']} documents, {info['gold_rows']} gold "
          f"and {info['pred_rows']} predicted rows; {args.batches} batches (reduce_rows "
          f"{args.reduce_rows or 'default'}); error analysis "
          f"{'on' if args.analysis else 'off'}; best of {args.repeat}")  # fmt: skip
    print(f"| step | wall s | CPU s | peak RSS MB | metrics = {steps[0]}'s |")
    print("|---|---:|---:|---:|---|")
    for step in steps:
        same = pl.read_parquet(best[step]["metrics"]).equals(reference)
        print(f"| {step} | {best[step]['seconds']:.2f} | {best[step].get('cpu', float('nan')):.2f} "
              f"| {best[step]['peak_rss_mb']:.0f} | {'yes' if same else 'NO'} |")  # fmt: skip
    wall = {step: best[step]["seconds"] for step in steps}
    if "api" in wall and "cli" in wall:
        print(f"api / cli = {wall['api'] / wall['cli']:.2f} (target <= 1)")
    if "api" in wall and "cli-inprocess" in wall:
        print(f"api / cli-inprocess = {wall['api'] / wall['cli-inprocess']:.2f}")
    if "api" in wall and "evaluator" in wall:
        cpu = best["evaluator"]["cpu"] / best["api"]["cpu"]
        print(f"evaluator / api = {wall['evaluator'] / wall['api']:.2f} wall, {cpu:.2f} CPU "
              f"(target <= 1.2; error analysis {'on' if args.analysis else 'off'})")  # fmt: skip


if __name__ == "__main__":
    main()
