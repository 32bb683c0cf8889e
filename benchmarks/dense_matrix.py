"""A dense ICD-10 score matrix (the MIMIC-IV ICD-10 setup of Edin et al. 2023): where
``hieval evaluate`` spends time and memory on it, against scikit-learn's two AUCs.

Run from the repository root:

    python benchmarks/dense_matrix.py --docs 990 [--codes 7900] [--gold-per-doc 15] [--seed 7]
        [--data results/bench/dense] [--profile 25] [--skip-sklearn] [--json PATH]

The issue's full shape is 19,802 test documents x 7,900 codes (157M float32 scores); the
benchmark takes ``--docs`` for a fraction of it (990 is 1/20, 2,475 is 1/8). It writes, once
per shape and seed:

- ``scores.npy`` (float32 sigmoid scores, documents x codes, written block by block through a
  memory map), ``scores.codes.txt`` (ICD-10-CM billable codes, dotted, drawn from the package
  hierarchy without replacement) and ``scores.docs.txt`` (MIMIC-IV-like ``hadm_id`` numbers);
- ``gold.csv`` (``doc_id,code``): each code is gold in a document with a Zipf-like
  probability summing to ``--gold-per-doc`` codes a document (at least one each); a gold
  pair's logit is raised by 4, so the scores rank gold codes high but not perfectly.

Then each side runs in a child process of its own, so that its peak RSS is its own:

- ``hieval``: ``hieval evaluate --hierarchy icd10`` with the defaults (the hierarchy is built
  into ``DATA/cache`` before and not timed), inside the child, so that each stage's wall time
  and peak RSS are measured there (a thread samples ``/proc/self/statm`` every 10 ms; stages
  nest, a nested stage's peak is counted in its parent's too). With ``--profile N`` the run is
  under cProfile and the N functions of largest cumulative time are printed (cProfile slows
  the Python-heavy parts: the stage times of a profiled run are not the figures to quote).
- ``scikit-learn``: ``roc_auc_score`` micro on the flattened matrix (the gold as a boolean
  matrix), and macro as the mean of ``roc_auc_score`` per code with a positive and a negative
  document, one call per contiguous column (as ``benchmarks/ranking_benchmark.py`` does:
  ``average="macro"`` on the whole matrices is the same number, far slower). Reading the
  ``.npy`` and the gold is timed too.

The two AUCs of each side must agree within 1e-9. One Markdown table per side is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `hieval` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

FULL_DOCS = 19_802
THREADS = "2"
TOLERANCE = 1e-9
#: Documents per block when the matrix is written (the generator's memory stays bounded).
BLOCK = 1024
DEFAULT_DATA = Path(__file__).resolve().parents[1] / "results" / "bench" / "dense"


def icd10_cm_leaves() -> list[str]:
    """ICD-10-CM's billable codes (the leaves of the package hierarchy), sorted."""
    from hieval.codes.icd9 import DX
    from hieval.hierarchy.icd10 import icd10_leaf_titles

    return sorted(icd10_leaf_titles()[DX])


def folder_for(data: Path, docs: int, codes: int, gold_per_doc: float, seed: int) -> Path:
    return data / f"d{docs}_c{codes}_g{gold_per_doc:g}_s{seed}"


def generate(folder: Path, *, docs: int, codes: int, gold_per_doc: float, seed: int) -> Path:
    """Write the matrix, its lists and the gold into ``folder`` (once); return ``folder``."""
    done = folder / "done.json"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    leaves = icd10_cm_leaves()
    chosen = np.sort(rng.choice(len(leaves), codes, replace=False))
    code_list = [leaves[i] for i in chosen]
    frequency = 1.0 / (rng.permutation(codes) + 1.0) ** 0.9  # Zipf-like, in random code order
    frequency = (frequency * gold_per_doc / frequency.sum()).astype(np.float32)
    doc_ids = [str(20_000_000 + 37 * i) for i in range(docs)]
    (folder / "scores.codes.txt").write_text("\n".join(code_list) + "\n", encoding="utf-8")
    (folder / "scores.docs.txt").write_text("\n".join(doc_ids) + "\n", encoding="utf-8")
    matrix = np.lib.format.open_memmap(
        folder / "scores.npy", mode="w+", dtype=np.float32, shape=(docs, codes)
    )
    gold_pairs = 0
    with open(folder / "gold.csv", "w", encoding="utf-8") as gold_file:
        gold_file.write("doc_id,code\n")
        for start in range(0, docs, BLOCK):
            stop = min(start + BLOCK, docs)
            gold = rng.random((stop - start, codes), dtype=np.float32) < frequency
            empty = np.flatnonzero(~gold.any(axis=1))
            gold[empty, rng.integers(0, codes, len(empty))] = True  # a document has a code
            logits = rng.normal(-4.0, 1.5, size=gold.shape).astype(np.float32) + 4.0 * gold
            matrix[start:stop] = 1.0 / (1.0 + np.exp(-logits))
            rows, cols = np.nonzero(gold)
            gold_file.writelines(
                f"{doc_ids[start + r]},{code_list[c]}\n"
                for r, c in zip(rows.tolist(), cols.tolist(), strict=True)
            )
            gold_pairs += len(rows)
    matrix.flush()
    del matrix
    done.write_text(
        json.dumps({"docs": docs, "codes": codes, "gold_pairs": gold_pairs, "seed": seed}) + "\n"
    )
    return folder


def model_name(k: int) -> str:
    """The k-th model's name and file stem (``dense`` is the first: ``scores.npy``)."""
    return "dense" if k == 0 else f"model{k + 1}"


def model_matrix(folder: Path, k: int) -> Path:
    return folder / ("scores.npy" if k == 0 else f"{model_name(k)}.npy")


def generate_models(folder: Path, models: int) -> None:
    """Score matrices 2 .. ``models`` on the first one's gold (once each): the same noise
    model with its own seed and a gold boost of 4 - 0.25 (k - 1), so the zoo's models differ
    in quality (the paired tests have something to find) and in every cell."""
    shape = json.loads((folder / "done.json").read_text())
    docs, codes = shape["docs"], shape["codes"]
    rows, cols = gold_pairs(folder) if models > 1 else (None, None)
    for k in range(1, models):
        path = model_matrix(folder, k)
        for kind in ("codes", "docs"):
            (folder / f"{model_name(k)}.{kind}.txt").write_text(
                (folder / f"scores.{kind}.txt").read_text(encoding="utf-8"), encoding="utf-8"
            )
        if path.exists():
            continue
        rng = np.random.default_rng(1000 + k)
        partial = path.with_suffix(".partial.npy")
        matrix = np.lib.format.open_memmap(
            partial, mode="w+", dtype=np.float32, shape=(docs, codes)
        )
        order = np.argsort(rows, kind="stable")
        r_sorted, c_sorted = rows[order], cols[order]
        for start in range(0, docs, BLOCK):
            stop = min(start + BLOCK, docs)
            a, b = np.searchsorted(r_sorted, [start, stop])
            gold = np.zeros((stop - start, codes), dtype=bool)
            gold[r_sorted[a:b] - start, c_sorted[a:b]] = True
            boost = 4.0 - 0.25 * (k - 1)
            logits = rng.normal(-4.0, 1.5, size=gold.shape).astype(np.float32) + boost * gold
            matrix[start:stop] = 1.0 / (1.0 + np.exp(-logits))
        matrix.flush()
        del matrix
        partial.rename(path)


def gold_pairs(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """The gold as (row, column) pairs of the matrix."""
    import polars as pl

    doc_index = {d: i for i, d in enumerate((folder / "scores.docs.txt").read_text().split())}
    code_index = {c: i for i, c in enumerate((folder / "scores.codes.txt").read_text().split())}
    frame = pl.read_csv(folder / "gold.csv", schema={"doc_id": pl.String, "code": pl.String})
    rows = np.array([doc_index[d] for d in frame["doc_id"].to_list()])
    cols = np.array([code_index[c] for c in frame["code"].to_list()])
    return rows, cols


def read_gold(folder: Path, docs: int, codes: int) -> np.ndarray:
    """The gold as a boolean documents x codes matrix (the scikit-learn side's input)."""
    gold = np.zeros((docs, codes), dtype=bool)
    gold[gold_pairs(folder)] = True
    return gold


class StageMeter:
    """Wall time and peak RSS per named stage, from a thread sampling ``/proc/self/statm``.

    Stages nest (a stage inside another counts in both); a stage entered again accumulates
    its time and keeps its highest peak. ``order`` keeps first-entry order for the table.
    """

    def __init__(self, interval: float = 0.01, log: Path | None = None) -> None:
        self.interval = interval
        self.log = log  # each finished stage as a JSON line: what a run that crashes leaves
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.active: dict[str, int] = {}
        self.time: dict[str, float] = {}
        self.cpu: dict[str, float] = {}  # process CPU (every thread): robust to a loaded machine
        self.peak: dict[str, int] = {}
        self.virtual: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.order: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def sizes(self) -> tuple[int, int]:
        """Resident and virtual bytes now (``ulimit -v`` bounds the second)."""
        with open("/proc/self/statm", encoding="ascii") as statm:
            virtual, resident = statm.read().split()[:2]
        return int(resident) * self.page, int(virtual) * self.page

    def _note(self) -> None:
        rss, virtual = self.sizes()
        for name in list(self.active):
            self.peak[name] = max(self.peak.get(name, 0), rss)
            self.virtual[name] = max(self.virtual.get(name, 0), virtual)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._note()

    @contextmanager
    def stage(self, name: str):
        if name not in self.time:
            self.order.append(name)
            self.time[name] = 0.0
            self.cpu[name] = 0.0
        self.calls[name] = self.calls.get(name, 0) + 1
        self.active[name] = self.active.get(name, 0) + 1
        self._note()
        start, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.time[name] += time.perf_counter() - start
            self.cpu[name] += time.process_time() - cpu
            self._note()
            if self.log is not None:
                with open(self.log, "a", encoding="utf-8") as log:
                    log.write(json.dumps(self.row(name)) + "\n")
            self.active[name] -= 1
            if not self.active[name]:
                del self.active[name]

    def wrap(self, module, attribute: str, name: str | Callable[..., str]) -> None:
        """Replace ``module.attribute`` by a timed call (``name`` may depend on the call)."""
        inner = getattr(module, attribute)

        def timed(*args, **kwargs):
            with self.stage(name(*args, **kwargs) if callable(name) else name):
                return inner(*args, **kwargs)

        setattr(module, attribute, timed)

    def close(self) -> list[dict]:
        self._stop.set()
        self._thread.join()
        return [self.row(name) for name in self.order]

    def row(self, name: str) -> dict:
        return {
            "stage": name,
            "seconds": round(self.time[name], 3),
            "cpu_seconds": round(self.cpu[name], 3),
            "peak_rss_gb": round(self.peak[name] / 2**30, 3),
            "peak_virtual_gb": round(self.virtual[name] / 2**30, 3),
            "calls": self.calls[name],
        }


def _instrument(meter: StageMeter) -> None:
    """Time the stages of one ``hieval evaluate`` where the run module calls them."""
    from hieval import pipeline, run
    from hieval.inputs import dense_normalize
    from hieval.inputs.formats import dense
    from hieval.metrics import blocked_rows, ranking

    def role(*_args, **kwargs) -> str:
        return f"normalise {kwargs.get('role', '?')}"

    meter.wrap(run, "normalize_file", role)
    meter.wrap(dense, "load", "  dense .npy -> DuckDB long view")
    meter.wrap(pipeline, "count_model", "counts (engine)")
    meter.wrap(pipeline, "model_metrics", "count metrics")
    meter.wrap(pipeline, "score_metrics", "scores: ranking + calibration")
    meter.wrap(pipeline.paths, "read_parquet", "  read_parquet (any stage)")
    meter.wrap(ranking, "encode", "  encode (long scores -> arrays)")
    meter.wrap(ranking, "level_arrays", "  pool to a level")
    meter.wrap(ranking, "micro_auc", "  micro AUC")
    meter.wrap(ranking, "per_label_auc", "  macro AUC (per code)")
    meter.wrap(ranking, "document_ranks", "  document ranks (@K, MAP)")
    meter.wrap(ranking, "calibration_values", "  calibration")
    meter.wrap(dense_normalize, "normalize_dense", "  dense .npy decided by blocks")
    meter.wrap(blocked_rows, "dense_rows_and_units", "  dense ranking + calibration by blocks")
    meter.wrap(blocked_rows.blocked, "blocked_levels", "    AUC + document ranks, every level")
    meter.wrap(blocked_rows, "calibration_values", "    calibration by blocks")
    meter.wrap(run, "_intervals", "intervals")
    meter.wrap(run, "_conventions", "conventions")
    meter.wrap(run, "error_analysis", "error analysis")
    meter.wrap(run, "_reports", "reports")


def run_hieval(
    folder: Path, profile: int, tune: bool, *, models: int = 1, bootstrap: int = 0
) -> dict:
    from hieval import cli

    out = folder / "out"
    preds = [f"{model_name(k)}={model_matrix(folder, k)}" for k in range(models)]
    argv = [
        "evaluate",
        "--gold", str(folder / "gold.csv"),
        *[item for pred in preds for item in ("--pred", pred)],
        "--hierarchy", "icd10",
        "--cache", str(folder.parent / "cache"),
        "--out", str(out),
    ] + (["--bootstrap", str(bootstrap)] if bootstrap else [])  # fmt: skip
    (folder / "stages.jsonl").unlink(missing_ok=True)
    meter = StageMeter(log=folder / "stages.jsonl")
    _instrument(meter)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    start = time.perf_counter()
    with meter.stage("hieval evaluate (total)"):
        code = cli.main(argv)
    total = time.perf_counter() - start
    if profiler is not None:
        profiler.disable()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if code != 0:
        raise SystemExit(f"hieval evaluate exited {code}")
    import polars as pl

    tidy = pl.read_parquet(out / "metrics.parquet")
    pick = tidy.filter((pl.col("family") == "ranking") & (pl.col("level") == "leaf"))
    values = {f"{a} {m}": v for a, m, v in pick.select("average", "metric", "value").iter_rows()}
    calibration = tidy.filter(pl.col("family") == "calibration").select("metric", "value")
    ranking: dict = {}
    rows = tidy.filter(pl.col("family") == "ranking").select("level", "average", "metric", "value")
    for level, average, metric, value in rows.iter_rows():
        ranking.setdefault(level, {})[f"{average} {metric}"] = value
    result = {
        "total": total,
        "peak_rss_gb": peak,
        "micro_auc": values.get("micro auc"),
        "macro_auc": values.get("macro auc"),
        "p@8": values.get("mean precision@8"),
        "rows": tidy.height,
        "ranking": ranking,
        "calibration": dict(calibration.rows()),
        "decided_digest": _decided_digest(out, folder),
        "models": models,
        "bootstrap": bootstrap,
        "cpu_seconds": _cpu_seconds(),
    }
    if bootstrap:
        result["uncertainty"] = _uncertainty_summary(out)
    if tune:  # not part of the defaults: tuning on the same scores as the dev set
        from hieval.metrics import ranking
        from hieval.metrics.tuning import tune as tune_on

        gold = pl.read_parquet(out / "work" / "inputs" / "gold.parquet")
        scores = pl.read_parquet(out / "work" / "inputs" / "scores" / "dense.parquet")
        with meter.stage("extra: tuning (global + per code, dev = test)"):
            arrays = ranking.encode(gold, scores)
            tuned = tune_on(arrays, per_code=True, min_support=5)
        result["tuned"] = [tuned.threshold, tuned.f1]
    result["stages"] = meter.close()
    if profiler is not None:
        import io
        import pstats

        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(profile)
        result["profile"] = text.getvalue()
    return result


def _cpu_seconds() -> float:
    """This process's user + system CPU seconds, every thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _uncertainty_summary(out: Path) -> dict:
    """How many interval and comparison rows (and of them ROC-AUC's, and AUC comparisons
    with an interval) the bootstrap wrote."""
    import polars as pl

    intervals = pl.read_parquet(out / "intervals.parquet")
    comparisons = pl.read_parquet(out / "comparisons.parquet")
    auc = pl.col("metric") == "auc"
    return {
        "intervals": intervals.height,
        "auc_intervals": intervals.filter(auc & pl.col("low").is_not_null()).height,
        "comparisons": comparisons.height,
        "auc_comparisons": comparisons.filter(auc & pl.col("low").is_not_null()).height,
        "p_values": comparisons.filter(pl.col("p_value").is_not_null()).height,
        "auc_p_values": comparisons.filter(auc & pl.col("p_value").is_not_null()).height,
        "bootstrap_tests": comparisons.filter(pl.col("test") == "bootstrap").height
        if "test" in comparisons.columns
        else 0,
    }


def _decided_digest(out: Path, folder: Path) -> str:
    """The digest of hieval's normalised decisions (its predictions file after selection)."""
    import polars as pl

    decided = pl.read_parquet(out / "work" / "inputs" / "predictions" / "dense.parquet")
    pairs = decided.drop_nulls("code").select("doc_id", "code").unique()
    docs = {d: i for i, d in enumerate((folder / "scores.docs.txt").read_text().split())}
    codes = {c: i for i, c in enumerate((folder / "scores.codes.txt").read_text().split())}
    rows = np.array([docs[d] for d in pairs["doc_id"]], dtype=np.int64)
    cols = np.array([codes[c] for c in pairs["code"]], dtype=np.int64)
    return _pairs_digest(rows, cols, folder)


def run_sklearn(folder: Path, docs: int, codes: int) -> dict:
    from sklearn.metrics import roc_auc_score

    cpu = time.process_time()  # reading included
    start = time.perf_counter()
    scores = np.load(folder / "scores.npy")
    gold = read_gold(folder, docs, codes)
    read = time.perf_counter() - start
    t = time.perf_counter()
    micro = roc_auc_score(gold.ravel(), scores.ravel())
    micro_time = time.perf_counter() - t
    support = gold.sum(axis=0)
    usable = (support > 0) & (support < docs)
    t = time.perf_counter()
    gold_t = np.ascontiguousarray(gold[:, usable].T)
    scores_t = np.ascontiguousarray(scores[:, usable].T)
    macro = float(np.mean([roc_auc_score(g, s) for g, s in zip(gold_t, scores_t, strict=True)]))
    macro_time = time.perf_counter() - t
    return {
        "times": {"read .npy + gold": read, "micro AUC": micro_time, "macro AUC": macro_time},
        "total": micro_time + macro_time,
        "micro_auc": float(micro),
        "macro_auc": macro,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "cpu_seconds": time.process_time() - cpu,
    }


def run_blocked(folder: Path, block_docs: int) -> dict:
    """The prototype (:mod:`hieval.metrics.blocked`) on the memory-mapped matrix, a block of
    documents at a time: the decisions, both AUCs at the leaves (the part compared with
    scikit-learn), then every ranking row at the leaves and every default level in two reads
    (:func:`~hieval.metrics.blocked.blocked_levels`)."""
    from hieval.metrics.blocked import (
        blocked_aucs,
        blocked_calibration,
        blocked_global_threshold,
        blocked_levels,
        decided_pairs,
        document_values,
    )
    from hieval.metrics.ranking import DEFAULT_KS

    cpu = time.process_time()
    start = time.perf_counter()
    scores = np.load(folder / "scores.npy", mmap_mode="r")
    rows, cols = gold_pairs(folder)
    read = time.perf_counter() - start
    t = time.perf_counter()
    blocks = {"block_docs": block_docs}
    decided = decided_pairs(scores, threshold=0.5, **blocks)  # the default threshold
    decide = time.perf_counter() - t
    t = time.perf_counter()
    result = blocked_aucs(scores, rows, cols, **blocks)
    both = time.perf_counter() - t
    leaf_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t = time.perf_counter()
    node_of = level_nodes(folder, (folder / "scores.codes.txt").read_text().split())
    maps = time.perf_counter() - t
    t = time.perf_counter()
    ranking: dict = {}
    levels = blocked_levels(scores, rows, cols, node_of=node_of, **blocks)
    for level, (aucs, ranks) in levels.items():
        values = {"micro auc": aucs.micro, "macro auc": aucs.macro}
        means = document_values(ranks, scores.shape[0], DEFAULT_KS)
        ranking[level] = values | {f"{a} {m}": v for (a, m), v in means.items()}
    every = time.perf_counter() - t
    t = time.perf_counter()
    calibration = blocked_calibration(scores, rows, cols, **blocks)
    calibrate = time.perf_counter() - t
    t = time.perf_counter()
    tuned = blocked_global_threshold(scores, rows, cols, **blocks)  # dev = test, as hieval
    tuning = time.perf_counter() - t
    return {
        "times": {
            "map .npy + read gold": read,
            "decided pairs (threshold 0.5)": decide,
            "micro + macro AUC (leaf)": both,
            "level maps from the cached hierarchy": maps,
            f"every ranking row, leaf + {len(ranking) - 1} levels, two reads": every,
            "Brier and ECE": calibrate,
            "tuned global threshold (dev = test)": tuning,
        },
        "calibration": calibration,
        "tuned": list(tuned),
        "leaf_peak_rss_gb": leaf_peak,
        "total": both,
        "micro_auc": result.micro,
        "macro_auc": result.macro,
        "ranking": ranking,
        "decided_digest": _pairs_digest(decided.rows, decided.cols, folder),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "cpu_seconds": time.process_time() - cpu,
    }


def _pairs_digest(rows: np.ndarray, cols: np.ndarray, folder: Path) -> str:
    """sha256 of the sorted ``doc_id<TAB>code`` lines of (row, column) pairs: one value that
    two sides' decided pairs must share."""
    import hashlib

    docs = (folder / "scores.docs.txt").read_text().split()
    codes = (folder / "scores.codes.txt").read_text().split()
    lines = sorted(f"{docs[r]}\t{codes[c]}\n" for r, c in zip(rows, cols, strict=True))
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def level_nodes(folder: Path, codes: list[str]) -> dict[str, np.ndarray]:
    """For each level hieval evaluates by default, each column's node (numbered in name
    order, as :func:`hieval.metrics.ranking.level_arrays` numbers them) or -1."""
    from hieval import codesystem
    from hieval.engine.counts import evaluated_levels
    from hieval.hierarchy.icd10 import cached_icd10_table

    table, _leaves, _folder = cached_icd10_table(folder.parent / "cache" / "hierarchy" / "icd10")
    system = codesystem.of_table(table)
    levels = evaluated_levels(table.levels, system.resolve_max_level(table.levels, None))
    ancestors = table.ancestors()
    node_of = {}
    for level in levels:
        of = dict(ancestors.filter(ancestors["level"] == level).select("code", "ancestor").rows())
        nodes = {node: i for i, node in enumerate(sorted({of[c] for c in codes if c in of}))}
        node_of[level] = np.array([nodes[of[c]] if c in of else -1 for c in codes])
    return node_of


def measure(side: str, args: argparse.Namespace, folder: Path) -> dict:
    env = {
        **os.environ,
        **{v: THREADS for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        "POLARS_MAX_THREADS": THREADS,
    }
    command = [
        sys.executable, __file__, "--child", side, "--docs", str(args.docs),
        "--codes", str(args.codes), "--gold-per-doc", str(args.gold_per_doc),
        "--seed", str(args.seed), "--data", str(args.data), "--profile", str(args.profile),
        "--block-docs", str(args.block_docs), "--models", str(args.models),
        "--bootstrap", str(args.bootstrap),
    ] + (["--tune"] if args.tune else [])  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"{side} failed ({done.returncode})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - start
    return result


def child(args: argparse.Namespace) -> None:
    folder = folder_for(args.data, args.docs, args.codes, args.gold_per_doc, args.seed)
    if args.child == "hieval":
        result = run_hieval(
            folder, args.profile, args.tune, models=args.models, bootstrap=args.bootstrap
        )
    elif args.child == "blocked":
        result = run_blocked(folder, args.block_docs)
    else:
        result = run_sklearn(folder, args.docs, args.codes)
    print(json.dumps(result))


def warm_cache(folder: Path) -> None:
    """Build the ICD-10 hierarchy into the shared cache (in a child: its memory is not ours)."""
    code = (
        "from hieval.hierarchy.icd10 import cached_icd10_table; "
        f"cached_icd10_table({str(folder.parent / 'cache' / 'hierarchy' / 'icd10')!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=FULL_DOCS // 20)
    parser.add_argument("--codes", type=int, default=7900)
    parser.add_argument("--gold-per-doc", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--profile", type=int, default=0, help="print N cProfile lines")
    parser.add_argument("--tune", action="store_true", help="also time tuning (not a default)")
    parser.add_argument("--skip-sklearn", action="store_true")
    parser.add_argument(
        "--block-docs", type=int, default=1024, help="documents per block (the prototype)"
    )
    parser.add_argument("--skip-hieval", action="store_true")
    parser.add_argument(
        "--blocked", action="store_true", help="also the blocked AUC prototype (issue 36)"
    )
    parser.add_argument(
        "--models", type=int, default=1, help="score matrices on the same gold (a zoo)"
    )
    parser.add_argument("--bootstrap", type=int, default=0, help="hieval's --bootstrap")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", choices=["hieval", "sklearn", "blocked"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    folder = folder_for(args.data, args.docs, args.codes, args.gold_per_doc, args.seed)
    start = time.perf_counter()
    generate(
        folder, docs=args.docs, codes=args.codes, gold_per_doc=args.gold_per_doc, seed=args.seed
    )
    generate_models(folder, args.models)
    print(f"data: {folder} ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    warm_cache(folder)
    shape = json.loads((folder / "done.json").read_text())
    results: dict = {"shape": shape, "fraction_of_full": args.docs / FULL_DOCS}
    if not args.skip_hieval:
        results["hieval"] = measure("hieval", args, folder)
    if args.blocked:
        results["blocked"] = measure("blocked", args, folder)
    if not args.skip_sklearn:
        results["sklearn"] = measure("sklearn", args, folder)
    report(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def report(results: dict) -> None:
    shape = results["shape"]
    print(
        f"\n{shape['docs']:,} documents x {shape['codes']:,} codes "
        f"({shape['docs'] * shape['codes']:,} scores, {shape['gold_pairs']:,} gold pairs; "
        f"{results['fraction_of_full']:.3f} of 19,802 documents)\n"
    )
    hieval = results.get("hieval")
    if hieval:
        print("| hieval stage | seconds | CPU s | peak RSS (GB) | peak virtual (GB) | calls |")
        print("|---|---:|---:|---:|---:|---:|")
        for row in hieval["stages"]:
            print(f"| {row['stage']} | {row['seconds']:.2f} | {row['cpu_seconds']:.2f} | "
                  f"{row['peak_rss_gb']:.2f} | "
                  f"{row['peak_virtual_gb']:.2f} | {row['calls']} |")  # fmt: skip
        print(f"\nhieval: {hieval['total']:.1f} s, peak RSS {hieval['peak_rss_gb']:.2f} GB "
              f"(process {hieval['process_seconds']:.1f} s, CPU {hieval['cpu_seconds']:.1f} s; "
              f"{hieval['models']} model(s), --bootstrap {hieval['bootstrap']}); micro AUC "
              f"{hieval['micro_auc']}, macro AUC {hieval['macro_auc']}")  # fmt: skip
        if "uncertainty" in hieval:
            print(f"hieval uncertainty: {hieval['uncertainty']}")
        if "profile" in hieval:
            print("\n```\n" + hieval["profile"] + "```")
    sk = results.get("sklearn")
    if sk:
        times = ", ".join(f"{k} {v:.1f} s" for k, v in sk["times"].items())
        print(f"scikit-learn: micro + macro AUC {sk['total']:.1f} s ({times}), peak RSS "
              f"{sk['peak_rss_gb']:.2f} GB, CPU {sk['cpu_seconds']:.1f} s; "
              f"micro AUC {sk['micro_auc']}, macro AUC {sk['macro_auc']}")  # fmt: skip
    blocked = results.get("blocked")
    if blocked:
        times = ", ".join(f"{k} {v:.1f} s" for k, v in blocked["times"].items())
        print(f"blocked prototype: {times}, peak RSS {blocked['leaf_peak_rss_gb']:.2f} GB "
              f"(leaf AUCs), {blocked['peak_rss_gb']:.2f} GB (with the hierarchy), "
              f"CPU {blocked['cpu_seconds']:.1f} s; micro AUC {blocked['micro_auc']}, "
              f"macro AUC {blocked['macro_auc']}")  # fmt: skip
    for name, side in (("hieval", hieval), ("blocked prototype", blocked)):
        if not (side and sk and side["micro_auc"] is not None):
            continue
        for which in ("micro_auc", "macro_auc"):
            if abs(side[which] - sk[which]) > TOLERANCE:
                raise SystemExit(f"{which} differs: {name} {side[which]} vs sklearn {sk[which]}")
        print(f"{name}: AUCs agree with scikit-learn within {TOLERANCE}; time / scikit-learn's: "
              f"{side['total'] / sk['total']:.2f}x")  # fmt: skip
    if hieval and blocked and hieval["micro_auc"] is not None:
        ours, theirs = blocked["ranking"], hieval["ranking"]
        rows = sum(len(values) for values in theirs.values())
        print(f"blocked prototype's every ranking row (leaf and {len(ours) - 1} levels, "
              f"{rows} rows) equal to hieval's to the last bit: {ours == theirs}")  # fmt: skip
        ours, theirs = blocked["calibration"], hieval["calibration"]
        gaps = {m: abs(ours[m] - theirs[m]) / abs(theirs[m]) for m in theirs}
        print(f"... its Brier and ECE: equal bits {ours == theirs}, relative gaps {gaps}")
        if "tuned" in hieval:
            same = hieval["tuned"] == blocked["tuned"]
            print(f"... and its tuned global threshold is hieval's: {same} ({blocked['tuned']})")
        same = hieval.get("decided_digest") == blocked.get("decided_digest")
        print(f"... and its decided pairs are hieval's normalised predictions: {same}")


if __name__ == "__main__":
    main()
