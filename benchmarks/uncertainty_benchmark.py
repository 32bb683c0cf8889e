"""Bootstrap intervals and paired randomization tests over a MIMIC-III-full-sized zoo.

Run from the repository root:

    python benchmarks/uncertainty_benchmark.py [--scale 1] [--models 5] [--bootstrap 1000]
        [--permutations 9999] [--naive-permutations 20] [--json results/bench/unc.json]

The gold is :mod:`benchmarks.generate`'s (3,372 documents per unit of scale, Poisson(15.9)
codes drawn Zipf-like from 8,900 ICD-9-CM leaves); the models are derived from it with that
module's error profile at different error rates (model i keeps 80 − 5·i % of the gold codes),
so the zoo has a clear order and close neighbours. Preparation (generation, counting, the tidy
rows, the per-document tables) is timed apart; then, in this process:

- **bootstrap**: every model's replicates × tidy rows (:func:`bootstrap_matrix`), every row
  of the tidy table (flat, set-based, CoPHE micro/macro per level and overall, dx/proc, ICM,
  the comparison suite);
- **permutations**: the paired randomization test of every pair (:func:`randomization_p`);
- **naive baseline**: the straightforward permutation algorithm (every permutation recomputes
  every metric of both swapped models from the swapped per-document tables, as hieval did
  before) on ``--naive-permutations`` permutations of the first pair, its time extrapolated
  linearly to all permutations and pairs — the output says so. Its p-values are those of the
  fast path on the same permutations (checked here; tested in tests/test_uncertainty_speed.py).

Peak RSS is the process's ``ru_maxrss`` (preparation included, so an upper bound). With
``--micro-only``, only the micro rows are bootstrapped (the issue's 100× target).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `hieval` and `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits

from benchmarks import generate as gen
from hieval.engine.icm import IcmParams
from hieval.engine.keys import LEAF
from hieval.hierarchy.sources import load_source
from hieval.metrics.uncertainty import replicates, tables, units, weights
from hieval.metrics.uncertainty.settings import Settings
from hieval.pipeline import count_model, model_metrics, zoo_units

KEEP_RATES = (0.80, 0.75, 0.70, 0.65, 0.60, 0.55, 0.50)
SHARED = 0.8


def derive_models(
    gold: pl.DataFrame, *, models: int, seed: int, out_dir: Path, shared: float = SHARED
) -> list[Path]:
    """``models`` prediction files from the gold, with generate.py's error profile: model i
    keeps ``KEEP_RATES[i]`` of the gold codes, swaps 12 % for a sibling, and adds ~0.2 extra
    codes per gold code.

    Models of one zoo are trained on the same data and make mostly the same mistakes, so the
    fate of a gold code (kept, swapped, missed) is decided, with probability ``shared``, by a
    uniform draw common to every model (a code's difficulty) and otherwise by the model's own
    draw; likewise a ``shared`` share of the extra codes is common to every model. With
    ``shared`` 0 the models err independently (the slowest case for the randomization test:
    the two models of a pair then differ on about a third of the cells).
    """
    table = load_source(gen.SYSTEM_SOURCES["icd9"])[0]
    leaf = gen.leaves(table)
    pool = gen.code_pool(leaf, seed)
    codes = leaf.codes.to_pylist()
    code_id = pl.DataFrame({"code": codes, "id": np.arange(len(codes))})
    ids = gold.join(code_id, on="code", how="left")
    doc_ids = gold["doc_id"].unique().sort()
    doc = doc_ids.search_sorted(ids["doc_id"]).to_numpy().astype(np.int64)
    code = ids["id"].to_numpy().astype(np.int64)
    n_docs = doc_ids.len()
    common = np.random.default_rng([seed, 99])
    difficulty = common.random(len(doc))
    sibling = gen._sibling(common, pool, code)
    n_extra = common.poisson(gen.EXTRA_PER_GOLD * np.bincount(doc, minlength=n_docs))
    common_doc = np.repeat(np.arange(n_docs), n_extra)
    common_code = gen._draw(common, pool, len(common_doc))
    written = []
    for i in range(models):
        rng = np.random.default_rng([seed, 100 + i])
        keep = KEEP_RATES[i % len(KEEP_RATES)]
        fate = np.where(rng.random(len(doc)) < shared, difficulty, rng.random(len(doc)))
        kept, swapped = fate < keep, (fate >= keep) & (fate < keep + gen.SWAP)
        own = rng.random(len(doc)) >= shared
        swap_to = np.where(own, gen._sibling(rng, pool, code), sibling)
        n_own = rng.poisson(gen.EXTRA_PER_GOLD * (1 - shared) * np.bincount(doc, minlength=n_docs))
        own_doc = np.repeat(np.arange(n_docs), n_own)
        keep_common = rng.random(len(common_doc)) < shared
        pred_doc, pred_code = gen._dedupe_sorted(
            np.concatenate([doc[kept], doc[swapped], common_doc[keep_common], own_doc]),
            np.concatenate(
                [
                    code[kept],
                    swap_to[swapped],
                    common_code[keep_common],
                    gen._draw(rng, pool, len(own_doc)),
                ]
            ),
            len(codes),
        )
        path = out_dir / f"model{i}.parquet"
        pl.DataFrame(
            {"doc_id": doc_ids.gather(pred_doc), "code": [codes[c] for c in pred_code]}
        ).write_parquet(path)
        written.append(path)
    return written


def prepare(
    *, documents: int, models: int, seed: int, work: Path, shared: float = SHARED,
    micro_only: bool = False,
):  # fmt: skip
    """Generate the zoo, count and score every model, and build the per-document tables
    (with ``micro_only``, one model at a time and without the per-node tables the micro rows do
    not read: at 100× they would hold ~2 GB per model)."""
    data_dir = gen.DEFAULT_DATA_DIR
    gold_path, _ = gen.generate(documents=documents, seed=seed, out_dir=data_dir)
    ancestors = gen.hierarchy(data_dir)
    levels = ancestors.with_name("levels.parquet")
    gold = pl.read_parquet(gold_path)
    preds = derive_models(gold, models=models, seed=seed, out_dir=work, shared=shared)
    params = IcmParams()
    tidy, items, named = {}, {}, {}
    for path in preds:
        name = path.stem
        named[name] = path
        out = work / name
        out.mkdir()
        count_model(
            gold_path, path, levels_file=levels, ancestors=ancestors, max_level=None,
            nodes_out=out / "nodes.parquet", docs_out=out / "docs.parquet",
            item_sums_out=out / "items.parquet", params=params,
        )  # fmt: skip
        items[name] = out / "items.parquet"
        tidy[name] = model_metrics(
            model=name, nodes=out / "nodes.parquet", docs=out / "docs.parquet",
            item_sums=items[name], levels_file=levels, params=params, label_set="observed",
            metrics_out=out / "metrics.parquet", nodes_report_out=out / "nodes.csv",
        )  # fmt: skip
    if not micro_only:
        layout, units = zoo_units(
            gold=gold_path, predictions=named, item_sums=items, levels_file=levels,
            ancestors=ancestors, max_level=None, params=params, label_set="observed",
        )  # fmt: skip
        return layout, units, tidy
    units = {}
    for name, path in named.items():
        layout, one = zoo_units(
            gold=gold_path, predictions={name: path}, item_sums={name: items[name]},
            levels_file=levels, ancestors=ancestors, max_level=None, params=params,
            label_set="observed",
        )  # fmt: skip
        units[name] = units.Units(one[name].columns, one[name].names, {})
    return layout, units, tidy


def naive_values(components, layout: units.Layout) -> dict:
    """The straightforward replicate (hieval's algorithm before the shortcuts): every node
    of every part summed densely and every formula applied to every node."""
    sums = sum(w @ u.columns for u, w in components)
    col = {name: sums[:, i] for name, i in components[0][0].names.items()}
    nodes = {}
    for family, level in layout.count_parts():
        n = layout.nodes[level].len()
        summed = sum(w @ u.nodes[family, level] for u, w in components)
        tp, fp, fn = (summed[:, i * n : (i + 1) * n] for i in range(3))
        items = col["item"][:, None] if (family, level) == ("flat", LEAF) else None
        nodes[family, level] = replicates.node_sums(tp, fp, fn, items=items)

    def doc_total(metric, n):
        total = 0.0
        for u, w in components:
            weighted = w * u.column("item")
            values = replicates._doc_values(u, metric, n)
            total = total + (weighted @ values if values.ndim == 1 else (weighted * values).sum(1))
        return total

    return replicates.assemble(col, nodes, doc_total, layout)


def naive_hits(a, b, keys, *, layout, weights_key, seed: int, permutations: int) -> np.ndarray:
    """#{|Δ*| ≥ |Δ| − slack} of the straightforward randomization test."""
    ones = np.ones((1, weights_key.size))
    observed_a, observed_b = (naive_values([(u, ones)], layout) for u in (a, b))
    observed = np.array([abs(observed_a[k][0] - observed_b[k][0]) for k in keys])
    slack = tables._TIE * np.maximum(1.0, observed)
    hits = np.zeros(len(keys), dtype=np.int64)
    for first, count in weights.blocks(permutations, layout.width):
        s = weights.swaps(weights_key, seed=seed, first=first, count=count)
        star_a = naive_values([(a, 1 - s), (b, s)], layout)
        star_b = naive_values([(a, s), (b, 1 - s)], layout)
        delta = np.column_stack([np.abs(star_a[k] - star_b[k]) for k in keys])
        hits += (delta >= observed - slack).sum(0)
    return hits


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(args: argparse.Namespace) -> dict:
    """One measurement in this (child) process, on the pickled zoo: its own peak RSS."""
    if args.what == "prepare":
        with tempfile.TemporaryDirectory() as tmp:
            started, cpu = time.perf_counter(), time.process_time()
            layout, units, tidy = prepare(
                documents=gen.documents_for(args.scale), models=args.models, seed=args.seed,
                work=Path(tmp), shared=args.shared, micro_only=args.micro_only,
            )  # fmt: skip
            prepare_s = time.perf_counter() - started
        with open(args.child, "wb") as handle:
            pickle.dump((layout, units, tidy), handle)
        return {
            "prepare_s": prepare_s,
            "documents": layout.doc_ids.len(),
            "nodes": {level: names.len() for level, names in layout.nodes.items()},
            "peak_rss_mb": _peak_mb(),
        }
    with open(args.child, "rb") as handle:
        layout, units, tidy = pickle.load(handle)
    models = list(tidy)
    keys = tables._keys_of(tidy[models[0]])
    weights_key = weights.doc_keys(layout.doc_ids.to_list())
    out: dict = {"load_before": os.getloadavg()[0]}
    if args.what == "fast":
        if args.micro_only:
            tidy = {m: t.filter(pl.col("average") == "micro") for m, t in tidy.items()}
        settings = Settings(bootstrap=args.bootstrap, seed=args.seed, permutations=0)
        started, cpu = time.perf_counter(), time.process_time()
        tables.uncertainty_tables(
            tidy, units, layout=layout, settings=settings, levels=layout.levels,
            threads=args.threads,
        )  # fmt: skip
        out["bootstrap_s"] = time.perf_counter() - started
        out["bootstrap_cpu_s"] = time.process_time() - cpu
        if args.permutations:
            settings = Settings(
                bootstrap=args.bootstrap, seed=args.seed, permutations=args.permutations
            )
            started = time.perf_counter()
            tables.uncertainty_tables(
                tidy, units, layout=layout, settings=settings, levels=layout.levels,
                threads=args.threads,
            )  # fmt: skip
            out["total_s"] = time.perf_counter() - started
            out["total_cpu_s"] = time.process_time() - cpu
            out["permutations_s"] = out["total_s"] - out["bootstrap_s"]
            # The same permutations as the naive child, to compare the counts.
            a, b = units[models[0]], units[models[1]]
            p = tables.randomization_p(
                a, b, keys, layout=layout, weights_key=weights_key,
                settings=Settings(seed=args.seed, permutations=args.naive_permutations),
            )  # fmt: skip
            out["check_hits"] = np.rint(p * (1 + args.naive_permutations) - 1).astype(int).tolist()
    else:
        a, b = units[models[0]], units[models[1]]
        # One BLAS thread, as the fast path runs: OpenBLAS's spinning threads would make the
        # baseline slower (and noisier) for reasons that are not its algorithm.
        limit = threadpool_limits(limits=1, user_api="blas")
        started = time.perf_counter()
        hits = naive_hits(
            a, b, keys, layout=layout, weights_key=weights_key, seed=args.seed,
            permutations=args.naive_permutations,
        )  # fmt: skip
        out["naive_s"] = time.perf_counter() - started
        out["check_hits"] = hits.tolist()
        started = time.perf_counter()
        for model in models:
            for first, count in weights.blocks(args.naive_bootstrap, layout.width):
                w = weights.poisson_weights(weights_key, seed=args.seed, first=first, count=count)
                naive_values([(units[model], w)], layout)
        out["naive_bootstrap_s"] = time.perf_counter() - started
        limit.restore_original_limits()
    out["peak_rss_mb"] = _peak_mb()
    out["load_after"] = os.getloadavg()[0]
    return out


def _run_child(args: argparse.Namespace, zoo: Path, what: str) -> dict:
    command = [sys.executable, __file__, "--child", str(zoo), "--what", what]
    for name in (
        "bootstrap", "permutations", "naive_permutations", "naive_bootstrap", "seed", "threads",
        "scale", "models", "shared",
    ):  # fmt: skip
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if args.micro_only:
        command.append("--micro-only")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode:
        sys.exit(f"the {what} measurement failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1)
    parser.add_argument("--models", type=int, default=5)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--permutations", type=int, default=9999)
    parser.add_argument("--naive-permutations", type=int, default=20)
    parser.add_argument("--naive-bootstrap", type=int, default=20)
    parser.add_argument("--shared", type=float, default=SHARED)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs of each child")
    parser.add_argument("--micro-only", action="store_true")
    parser.add_argument("--no-naive", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--what", default="fast", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        zoo = work / "zoo.pickle"
        # Preparation in a child too: a child forked from a large parent would report the
        # parent's size as its own peak RSS (ru_maxrss survives fork and exec).
        prepared = _run_child(args, zoo, "prepare")
        runs = [_run_child(args, zoo, "fast") for _ in range(args.repeat)]
        fast = min(runs, key=lambda r: r.get("total_s", r["bootstrap_s"]))
        naive = None
        if not args.no_naive and args.permutations:
            naive = min(
                (_run_child(args, zoo, "naive") for _ in range(args.repeat)),
                key=lambda r: r["naive_s"],
            )
    prepare_s = prepared["prepare_s"]
    n_docs, nodes = prepared["documents"], prepared["nodes"]
    pairs = args.models * (args.models - 1) // 2
    report = {
        "documents": n_docs,
        "models": args.models,
        "pairs": pairs,
        "nodes": nodes,
        "bootstrap": args.bootstrap,
        "permutations": args.permutations,
        "threads": args.threads,
        "shared": args.shared,
        "micro_only": args.micro_only,
        "prepare_s": round(prepare_s, 2),
        "prepare_peak_rss_mb": prepared["peak_rss_mb"],
        "fast": fast,
        "runs": runs,
        "python": platform.python_version(),
    }
    lines = [
        f"Uncertainty benchmark: {n_docs:,} documents, {args.models} models "
        f"({pairs} pairs), {sum(report['nodes'].values()):,} (level, node) pairs, "
        f"{args.threads} threads; preparation {prepare_s:.1f} s (not counted)",
        "",
        "| step | seconds | peak RSS (MB) | load average (1 min, before/after) |",
        "|---|---:|---:|---|",
        f"| {args.bootstrap} bootstrap replicates, every model"
        f"{' (micro rows)' if args.micro_only else ''} | {fast['bootstrap_s']:.1f} | "
        f"{fast['peak_rss_mb']:.0f} | {fast['load_before']:.2f} / {fast['load_after']:.2f} |",
    ]
    if args.permutations:
        lines.append(
            f"| {args.permutations} permutations × {pairs} pairs | {fast['permutations_s']:.1f} | "
            f"(same process) | |"
        )
        lines.append(f"| total (intervals + comparisons) | {fast['total_s']:.1f} | | |")
    if naive:
        per_perm = naive["naive_s"] / args.naive_permutations
        per_rep = naive["naive_bootstrap_s"] / (args.naive_bootstrap * args.models)
        report["naive"] = naive
        report["naive_permutations_extrapolated_s"] = per_perm * args.permutations * pairs
        report["naive_bootstrap_extrapolated_s"] = per_rep * args.bootstrap * args.models
        same = naive["check_hits"] == fast["check_hits"]
        report["naive_counts_equal"] = same
        lines += [
            f"| naive baseline: permutations, EXTRAPOLATED linearly from "
            f"{args.naive_permutations} permutations of one pair | "
            f"{report['naive_permutations_extrapolated_s']:.0f} | {naive['peak_rss_mb']:.0f} | "
            f"{naive['load_before']:.2f} / {naive['load_after']:.2f} |",
            f"| naive baseline: bootstrap, EXTRAPOLATED linearly from "
            f"{args.naive_bootstrap} replicates per model | "
            f"{report['naive_bootstrap_extrapolated_s']:.0f} | | |",
            "",
            f"Naive and fast randomization counts on the same {args.naive_permutations} "
            f"permutations: {'identical' if same else 'DIFFERENT'}.",
        ]
    cpu_line = f"CPU seconds (every thread of the process): bootstrap {fast['bootstrap_cpu_s']:.1f}"
    if args.permutations:
        cpu_line += f", bootstrap + permutations {fast['total_cpu_s']:.1f}"
    lines += ["", cpu_line + " (less sensitive than wall time to other jobs on the machine)."]
    if args.repeat > 1:
        lines.append(f"Best of {args.repeat} runs (by total time).")
    print("\n".join(lines))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if naive and not report["naive_counts_equal"]:
        sys.exit("the fast and naive randomization tests disagree")


if __name__ == "__main__":
    main()
