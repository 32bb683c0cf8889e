"""ICD-10 counting against ICD-9 counting for the same number of labels.

The ICD-10 tree (294,593 nodes, up to seven levels) is thirteen times the size of ICD-9's; what
a count job pays for it is building the code space over the part of the tree its labels reach
and one more group-by per extra level. This generates the same MIMIC-III-like data set (same
documents, same Poisson(15.9) codes each, same error profile) over each code system's leaves,
then times, in this process, the counts (flat, set-based, CoPHE up to ``block``/``c``) and the
one pass with ICM, each the best of ``--repeat`` runs.

    python benchmarks/code_systems.py --scale 100 [--repeat 2] [--threads 2]

The issue's target: ICD-10 within 1.5x of ICD-9's time at 100x.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `hieval` and `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.generate import DEFAULT_DATA_DIR, generate, hierarchy, record
from hieval.codesystem import code_system
from hieval.engine.counts import evaluated_levels
from hieval.engine.driver import count, evaluate
from hieval.engine.icm import IcmParams
from hieval.hierarchy.table import level_order


def _best(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(system: str, scale: float, repeat: int, threads: int | None) -> dict:
    gold, pred = generate(scale, system=system)
    ancestors = hierarchy(system=system)
    levels = level_order(ancestors.with_name("levels.parquet"))
    top = code_system(system).resolve_max_level(levels, None)
    evaluated = evaluated_levels(levels, top)
    info = record(gold)
    counts = _best(repeat, lambda: count(gold, pred, ancestors, evaluated, threads=threads))
    onepass = _best(
        repeat,
        lambda: evaluate(
            gold,
            pred,
            ancestors,
            levels=levels,
            evaluated=evaluated,
            params=IcmParams(),
            threads=threads,
        ),
    )
    labels = info["gold_rows"] + info["pred_rows"]
    return {"system": system, "labels": labels, "levels": evaluated, "counts": counts,
            "onepass": onepass}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    print(f"data in {DEFAULT_DATA_DIR}; scale {args.scale:g}; best of {args.repeat}")
    rows = [measure(s, args.scale, args.repeat, args.threads) for s in ("icd9", "icd10")]
    print("| code system | labels | levels counted | counts | one pass (with ICM) |")
    print("|---|---:|---|---:|---:|")
    for r in rows:
        print(f"| {r['system']} | {r['labels']:,} | {', '.join(r['levels'])} | "
              f"{r['counts']:.2f} s | {r['onepass']:.2f} s |")  # fmt: skip
    icd9, icd10 = rows
    print(f"ICD-10 / ICD-9: counts {icd10['counts'] / icd9['counts']:.2f}x, "
          f"one pass {icd10['onepass'] / icd9['onepass']:.2f}x (target: within 1.5x)")  # fmt: skip


if __name__ == "__main__":
    main()
