"""Scale benchmark: hieval against the naive dense baseline and a DuckDB full-scan floor.

Run from the repository root:

    python benchmarks/harness.py --scales 1 10 100 [1000] [--seed 7] [--threads 2] [--repeat 3]
        [--shards N] [--steps ...] [--doc-ids int string padded] [--json results/bench/run.json]

For each scale (1 = MIMIC-III full's test set, 3,372 documents), the data are generated once
and cached (``results/bench/``, see ``benchmarks/generate.py``); then every step runs in a
fresh child process, so its peak RSS (``ru_maxrss`` of that child, from ``os.wait4``) is its
own:

- ``DuckDB full-scan floor``: read both Parquet files and hash every value — no evaluation
  can be faster than reading its input;
- ``hieval counts + metrics``: :func:`hieval.engine.driver.count` (flat, set-based and CoPHE at the
  paper's levels e2, e1, e0, c; the per-document table streamed to a Parquet file, as the
  workflow writes it) and :func:`hieval.metrics.prf.metrics_table` on its nodes;
- with ``--shards N``: ``shard split`` (the workflow's ``split_by_document``, once, cached) and
  ``hieval counts + metrics, sharded``: the N shards counted in turn in one process, gathered
  as the workflow gathers them, and the node table compared with the unsharded one;
- ``hieval ICM``: `icm()` over the whole hierarchy (node weights from the gold,
  then the per-item sums: two reads of the inputs);
- ``hieval one pass``: :func:`hieval.engine.driver.evaluate`, what the workflow's count job runs:
  node weights, counts, per-document table and ICM/HF/PROP-F sums over one encoding;
- ``dense baseline``: :mod:`benchmarks.dense_baseline`, where its matrices fit in memory;
- ``naive DuckDB micro counts``: one DuckDB query, in its own child process, that joins the
  gold and the predictions with the ancestor table and computes the micro TP/FP/FN of flat,
  set-based and CoPHE at each level (all it computes; its counts are checked against
  hieval's, so it is also an independent check);
- ``tuned Polars micro counts``: the same counts as a careful user writes them in Polars
  (:func:`polars_micro`: integer codes joined to the ancestor table, one group-by on integer
  keys, streaming engine), checked against the naive query's;
- ``hieval evaluate end to end``: the command a user runs, ``hieval evaluate --gold G
  --pred bench=P --out OUT`` (every family and level, ICM, the comparison suite, ranking notes,
  every report: report.html, tables, figures), timed as a process from start to exit, its peak
  RSS from ``os.wait4``. The hierarchy cache (``--cache``) is built once before the first run,
  as any earlier run on the machine would have built it.

Wall seconds are those of the step's calls (not of interpreter start-up and imports; except
``e2e``: the whole process); rows/s is
(gold rows + predicted rows) / wall seconds. hieval's micro counts are checked against the
baseline's wherever both run. One Markdown table is printed per run, with each process's CPU
seconds beside its wall seconds, then every target met or MISSED (``hieval evaluate`` against
each anchor query of the same data, for every ``--doc-ids`` style).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `hieval` and `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import generate as gen

STEPS = (
    "floor", "hieval", "split", "sharded", "icm", "onepass", "baseline", "naive", "polars", "e2e"
)  # fmt: skip
LABELS = {
    "floor": "DuckDB full-scan floor",
    "hieval": "hieval counts + metrics",
    "split": "shard split (once per data set)",
    "sharded": "hieval counts + metrics, sharded",
    "icm": "hieval ICM",
    "onepass": "hieval one pass (counts + ICM)",
    "baseline": "dense baseline (numpy)",
    "naive": "naive DuckDB micro-count query",
    "polars": "tuned Polars micro-count query (streaming)",
    "e2e": "hieval evaluate end to end (CLI process)",
}
MAX_LEVEL = "c"
#: The issue's targets: (scale, seconds, peak RSS MB) for hieval counts + metrics.
TARGETS = {100: (3.0, 2048), 1000: (30.0, 3072)}
SPEEDUP_TARGET = 50  # at 1×
#: End to end (``hieval evaluate``, process start to exit): (scale, seconds, peak RSS MB).
E2E_TARGETS = {100: (8.0, 2048), 1000: (90.0, 3072)}
E2E_NAIVE_SPEEDUP = 2.0  # at 100×: the CLI at least this much faster than the naive query
E2E_POLARS_SPEEDUP = 1.0  # at 100×: the CLI at least as fast as the tuned Polars query
E2E_MODEL = "bench"
ICM_RATIO_TARGET = 2.0  # at 100×


# --- child side ----------------------------------------------------------------------------


def _docs_out(gold: str | Path, tag: str) -> Path:
    """Where a step streams its per-document table (written, as the workflow writes it)."""
    stem = Path(gold).name.removesuffix("_gold.parquet")
    return Path(gold).parent / "tmp" / f"{stem}_{tag}_docs.parquet"


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def _source_digest(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:10]


def shard_dir(gold: str | Path, shards: int) -> Path:
    """Where the document shards of a generated data set are cached (per split function)."""
    from hieval.pipeline import split_by_document

    stem = Path(gold).name.removesuffix("_gold.parquet")
    name = f"{stem}_n{shards}_split{_source_digest(split_by_document)}"
    return Path(gold).parent / "shards" / name


def _unsharded_nodes(gold: str | Path) -> Path:
    """Where the unsharded node table of this data set and counting code is kept."""
    from hieval.engine import counts

    stem = Path(gold).name.removesuffix("_gold.parquet")
    digest = hashlib.sha256(Path(counts.__file__).read_bytes()).hexdigest()[:10]
    return Path(gold).parent / "tmp" / f"{stem}_nodes_counts{digest}.parquet"


def _micro_rows(nodes) -> list[list]:
    from benchmarks.dense_baseline import hieval_micro

    return [[*key, *value] for key, value in sorted(hieval_micro(nodes).items())]


def naive_micro_sql(levels: tuple[str, ...]) -> str:
    """The naive query: micro TP/FP/FN of flat (``leaf``), set-based and CoPHE per level, by
    joining both label files with the ancestor table and grouping, as one would in SQL.

    Parameters ``$gold``, ``$pred``, ``$ancestors`` (Parquet paths). CoPHE compares, per
    document and ancestor, the number of gold (y) and predicted (x) codes under it: TP = Σ
    min(x, y), FP = Σ max(x − y, 0), FN = Σ max(y − x, 0); set-based the same on x > 0, y > 0.
    """
    wanted = ", ".join(f"'{level}'" for level in levels)
    return f"""
        WITH g AS (SELECT DISTINCT doc_id, code FROM read_parquet($gold) WHERE code IS NOT NULL),
             p AS (SELECT DISTINCT doc_id, code FROM read_parquet($pred) WHERE code IS NOT NULL),
             a AS (SELECT code, level, ancestor FROM read_parquet($ancestors)
                   WHERE level IN ({wanted})),
             gy AS (SELECT doc_id, level, ancestor, count(*) AS y FROM g JOIN a USING (code)
                    GROUP BY ALL),
             px AS (SELECT doc_id, level, ancestor, count(*) AS x FROM p JOIN a USING (code)
                    GROUP BY ALL),
             xy AS (SELECT coalesce(gy.level, px.level) AS level, coalesce(x, 0) AS x,
                           coalesce(y, 0) AS y
                    FROM gy FULL JOIN px ON gy.doc_id = px.doc_id AND gy.level = px.level
                                        AND gy.ancestor = px.ancestor)
        SELECT 'flat' AS family, 'leaf' AS level,
               count(*) FILTER (g.code IS NOT NULL AND p.code IS NOT NULL) AS tp,
               count(*) FILTER (g.code IS NULL) AS fp, count(*) FILTER (p.code IS NULL) AS fn
        FROM g FULL JOIN p ON g.doc_id = p.doc_id AND g.code = p.code
        UNION ALL
        SELECT 'cophe', level, sum(least(x, y)), sum(greatest(x - y, 0)),
               sum(greatest(y - x, 0))
        FROM xy GROUP BY level
        UNION ALL
        SELECT 'set', level, count(*) FILTER (x > 0 AND y > 0), count(*) FILTER (y = 0),
               count(*) FILTER (x = 0)
        FROM xy GROUP BY level"""


#: Bits of a tuned-query key below the document: a level's index, then the node's index.
_NODE_BITS, _LEVEL_SHIFT = 23, 20


def polars_micro(gold: str, pred: str, ancestors: str, levels: tuple[str, ...]):
    """The tuned Polars micro-count query, as a LazyFrame of ``family, level, tp, fp, fn``.

    What a careful user writes: codes and ancestors become integers once (the ancestor table
    is small), documents become integers (integer ids as they are, text through a categorical
    cast), both label files are stacked as ``x``/``y`` flags, joined to the integer ancestor
    table (``leaf`` is each code itself) and summed per ``document << 23 | level << 20 | node``
    key in one group-by on an integer key, run by the streaming engine; then per level:
    flat and set-based on x > 0, y > 0, CoPHE on min/max of x and y.
    """
    import polars as pl

    table = pl.read_parquet(ancestors, columns=["code", "level", "ancestor"])
    code_ids = table.select("code").unique(maintain_order=True).with_row_index("cid")
    wanted = table.filter(pl.col("level").is_in(levels))
    leaf = code_ids.select("code", pl.lit("leaf").alias("level"), pl.col("code").alias("ancestor"))
    names = ("leaf", *levels)
    nodes = pl.concat([leaf, wanted]).with_columns(
        pl.col("level").replace_strict(names, range(len(names)), return_dtype=pl.Int64),
        pl.col("ancestor").rank("dense").over("level").cast(pl.Int64).alias("node"),
    )
    edges = (
        nodes.join(code_ids, on="code")
        .select("cid", (pl.col("level") * (1 << _LEVEL_SHIFT) + pl.col("node")).alias("node"))
        .lazy()
    )

    def labels(path: str, x: int):
        frame = pl.scan_parquet(path).select("doc_id", "code").drop_nulls("code")
        is_int = frame.collect_schema()["doc_id"].is_integer()
        doc = pl.col("doc_id") if is_int else pl.col("doc_id").cast(pl.Categorical).to_physical()
        return (
            frame.join(code_ids.lazy(), on="code")
            .select(doc.cast(pl.Int64).alias("doc"), "cid")
            .unique()
            .with_columns(pl.lit(x, pl.Int32).alias("x"), pl.lit(1 - x, pl.Int32).alias("y"))
        )

    per_node = (
        pl.concat([labels(gold, 0), labels(pred, 1)])
        .join(edges, on="cid")
        .group_by((pl.col("doc") * (1 << _NODE_BITS) + pl.col("node")).alias("key"))
        .agg(pl.col("x", "y").sum())
    )
    x, y = pl.col("x"), pl.col("y")
    return (
        per_node.group_by(((pl.col("key") % (1 << _NODE_BITS)) // (1 << _LEVEL_SHIFT)).alias("at"))
        .agg(
            cophe_tp=pl.min_horizontal(x, y).sum(),
            cophe_fp=(x - y).clip(0).sum(),
            cophe_fn=(y - x).clip(0).sum(),
            set_tp=((x > 0) & (y > 0)).sum(),
            set_fp=(y == 0).sum(),
            set_fn=(x == 0).sum(),
        )
        .with_columns(pl.col("at").replace_strict(range(len(names)), names).alias("level"))
    )


def _polars_rows(frame) -> list[list]:
    """``[family, level, tp, fp, fn]`` rows of :func:`polars_micro`'s result, as the other
    steps report micro counts (flat at ``leaf``; set-based and CoPHE at the levels)."""
    rows = []
    for r in frame.iter_rows(named=True):
        families = ("set",) if r["level"] == "leaf" else ("set", "cophe")
        for family in families:
            name = "flat" if r["level"] == "leaf" else family
            rows.append([name, r["level"], *(int(r[f"{family}_{c}"]) for c in ("tp", "fp", "fn"))])
    return sorted(rows)


def run_step(step: str, gold: str, pred: str, ancestors: str, options: dict) -> dict:
    """Run one measured step in this process; return its timings and results.

    ``options``: ``threads``; ``shards``.
    """
    from hieval.engine.counts import evaluated_levels
    from hieval.hierarchy.table import level_order

    all_levels = level_order(ancestors)
    levels = evaluated_levels(all_levels, MAX_LEVEL)
    threads = options.get("threads")
    if step == "floor":
        import duckdb

        con = duckdb.connect(config={"threads": threads} if threads else {})
        start = time.perf_counter()
        rows, _, _ = con.execute(
            "SELECT count(*), sum(hash(doc_id)), sum(hash(code)) FROM read_parquet($files)",
            {"files": [gold, pred]},
        ).fetchone()
        return {"seconds": time.perf_counter() - start, "rows": rows}
    if step == "hieval":
        from hieval.engine.driver import count
        from hieval.metrics.prf import metrics_table

        docs_out = _docs_out(gold, "count")
        start = time.perf_counter()
        nodes, _ = count(gold, pred, ancestors, levels, threads=threads, docs_out=docs_out)
        counted = time.perf_counter()
        metrics = metrics_table(nodes, "bench", split_kinds=True)
        done = time.perf_counter()
        nodes.write_parquet(_unsharded_nodes(gold))  # for the sharded step's comparison
        return {
            "seconds": done - start,
            "count_s": counted - start,
            "metrics_s": done - counted,
            "node_rows": nodes.height,
            "doc_rows": _rows(docs_out),
            "metric_rows": metrics.height,
            "micro": _micro_rows(nodes),
        }
    if step == "split":
        from hieval.pipeline import split_by_document

        n, out = options["shards"], shard_dir(gold, options["shards"])
        if (out / "complete").exists():
            return {"seconds": 0.0, "cached": True}
        start = time.perf_counter()
        for name, source in (("gold", gold), ("pred", pred)):
            split_by_document(source, [out / f"{name}_{i}.parquet" for i in range(n)])
        (out / "complete").write_text("", encoding="utf-8")
        return {"seconds": time.perf_counter() - start, "cached": False}
    if step == "sharded":
        import polars as pl
        import pyarrow.parquet as pq

        from hieval.engine.driver import count
        from hieval.metrics.prf import metrics_table

        n, folder = options["shards"], shard_dir(gold, options["shards"])
        shard_rows = [
            sum(
                pq.ParquetFile(folder / f"{name}_{i}.parquet").metadata.num_rows
                for name in ("gold", "pred")
            )
            for i in range(n)
        ]
        shard_s, parts = [], []
        start = time.perf_counter()
        for i in range(n):
            clock = time.perf_counter()
            shard_nodes, _ = count(
                folder / f"gold_{i}.parquet",
                folder / f"pred_{i}.parquet",
                ancestors,
                levels,
                threads=threads,
                docs_out=_docs_out(gold, f"shard{i}"),
            )
            shard_s.append(time.perf_counter() - clock)
            parts.append(shard_nodes)
        clock = time.perf_counter()
        nodes = (  # as hieval.pipeline.gather_counts reduces shards
            pl.concat(parts)
            .group_by("family", "level", "node")
            .agg(pl.col("tp", "fp", "fn", "n_gold", "n_pred").sum())
            .sort("family", "level", "node")
        )
        metrics_table(nodes, "bench", split_kinds=True)
        done = time.perf_counter()
        reference = _unsharded_nodes(gold)
        if reference.exists():
            unsharded = pl.read_parquet(reference)
            same = "identical" if nodes.equals(unsharded.select(nodes.columns)) else "DIFFERENT"
        else:
            same = "not compared (no unsharded run)"
        return {
            "seconds": done - start,
            "shard_s": shard_s,
            "shard_rows": shard_rows,
            "gather_s": done - clock,
            "vs_unsharded": same,
            "micro": _micro_rows(nodes),
        }
    if step == "icm":
        from hieval.metrics.tidy import icm

        start = time.perf_counter()
        values = icm(gold, pred, ancestors, all_levels, threads=threads)
        return {"seconds": time.perf_counter() - start, "icm": values["icm"]}
    if step == "onepass":
        from hieval.engine.driver import evaluate
        from hieval.engine.icm import IcmParams
        from hieval.metrics.suite import icm_values

        params = IcmParams()
        docs_out = _docs_out(gold, "onepass")
        start = time.perf_counter()
        result = evaluate(
            gold,
            pred,
            ancestors,
            levels=all_levels,
            evaluated=levels,
            params=params,
            threads=threads,
            docs_out=docs_out,
        )
        values = icm_values(result.item_sums, params)
        return {"seconds": time.perf_counter() - start, "icm": values["icm"]}
    if step == "naive":
        import duckdb

        con = duckdb.connect(config={"threads": threads} if threads else {})
        start = time.perf_counter()
        rows = con.execute(
            naive_micro_sql(levels), {"gold": gold, "pred": pred, "ancestors": ancestors}
        ).fetchall()
        return {
            "seconds": time.perf_counter() - start,
            "micro": sorted(
                [family, level, int(tp), int(fp), int(fn)] for family, level, tp, fp, fn in rows
            ),
        }
    if step == "polars":
        query = polars_micro(gold, pred, ancestors, levels)
        start = time.perf_counter()
        frame = query.collect(engine="streaming")
        return {"seconds": time.perf_counter() - start, "micro": _polars_rows(frame)}
    if step == "baseline":
        from benchmarks.dense_baseline import dense_counts

        start = time.perf_counter()
        micro, timings = dense_counts(gold, pred, ancestors, levels)
        return {
            "seconds": time.perf_counter() - start,
            **{f"{k}_s": v for k, v in timings.items()},
            "micro": [[*key, *value] for key, value in sorted(micro.items())],
        }
    raise ValueError(f"unknown step {step!r}")


# --- parent side ---------------------------------------------------------------------------


def measure(step: str, gold: Path, pred: Path, ancestors: Path, options: dict) -> dict:
    """Run ``step`` in a fresh child process; add its peak RSS (MB) and process wall time.

    The child runs in ``<data dir>/tmp``, so anything DuckDB spills lands there.
    """
    threads = str(options.get("threads") or os.cpu_count())
    env = os.environ | {
        name: threads
        for name in (
            "OMP_NUM_THREADS",
            "OPENBLAS_NUM_THREADS",
            "MKL_NUM_THREADS",
            "POLARS_MAX_THREADS",
        )
    }
    command = [sys.executable, str(Path(__file__).resolve()), "--child", step]
    command += [str(gold), str(pred), str(ancestors), "--options", json.dumps(options)]
    workdir = Path(gold).resolve().parent / "tmp"
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, cwd=workdir)
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        return {"error": f"exit code {child.returncode}", "peak_rss_mb": usage.ru_maxrss / 1024}
    result = json.loads(output.decode().strip().splitlines()[-1])
    result["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux reports kilobytes
    result["cpu_s"] = usage.ru_utime + usage.ru_stime  # the whole child, start-up included
    result["process_s"] = time.perf_counter() - start
    return result


def e2e_command(gold: Path, pred: Path, out: Path, cache: Path, threads: int | None) -> list[str]:
    """``hieval evaluate`` as a user types it (through this interpreter's environment):
    ``python -m hieval``, the ``hieval`` script's entry (``hieval.console``). Not ``-m
    hieval.cli``, which runs that module as ``__main__``: the report's figure workers must then
    import it again (the fork server does so once; 0.4 CPU-s the script never pays)."""
    command = [sys.executable, "-m", "hieval", "evaluate", "--gold", str(gold)]
    command += ["--pred", f"{E2E_MODEL}={pred}", "--out", str(out), "--cache", str(cache)]
    return command + (["--threads", str(threads)] if threads else [])


def measure_e2e(gold: Path, pred: Path, options: dict) -> dict:
    """Run ``hieval evaluate`` as a child process: wall seconds from start to exit, peak RSS
    (``os.wait4``), and the micro counts of the node table it wrote.

    The hierarchy cache lives in ``<data dir>/cache`` and is built (untimed) before the first
    run, as are the compiled kernels and hieval's byte code; OUT is ``<data dir>/tmp/e2e_out``,
    replaced by every run (the warm-up hierarchy too).
    """
    import shutil

    import polars as pl

    workdir = Path(gold).resolve().parent / "tmp"
    workdir.mkdir(parents=True, exist_ok=True)
    cache, out = Path(gold).resolve().parent / "cache", workdir / "e2e_out"
    root = Path(__file__).resolve().parents[1]
    env = os.environ | {"PYTHONPATH": str(root)}  # this checkout's hieval, not an installed one
    hierarchy = workdir / "e2e_hier"  # the benchmark's own folder: an older hieval's copy goes
    shutil.rmtree(hierarchy, ignore_errors=True)
    warm = [sys.executable, "-m", "hieval.cli", "hierarchy", "--out", str(hierarchy)]
    subprocess.run([*warm, "--cache", str(cache)], env=env, cwd=root, check=True,
                   capture_output=True)  # fmt: skip
    kernel = (  # compiled once per checkout
        "from hieval.engine.lca_compiled import warm; warm(); "
        "from hieval.engine.counts_compiled import warm; warm(); "
        "from hieval.analysis.errors_compiled import warm; warm()"
    )
    subprocess.run([sys.executable, "-c", kernel], env=env, cwd=root, check=True)
    # hieval's byte code, as an installed package has it (pip compiles it at install; an
    # editable install writes it at the first import) but a machine with PYTHONDONTWRITEBYTECODE
    # set never keeps: each run would compile every module again (about 0.1 s of the imports).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "hieval")], env=env,
                   cwd=root, check=True)  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    command = e2e_command(gold, pred, out, cache, options.get("threads"))
    start = time.perf_counter()
    child = subprocess.Popen(
        command, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    result = {
        "seconds": seconds,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }
    if os.waitstatus_to_exitcode(status):
        return result | {"error": errors.decode(errors="replace").strip().splitlines()[-1]}
    nodes = pl.read_parquet(out / "work" / "counts" / E2E_MODEL / "nodes.parquet")
    outputs = sorted(p.name for p in out.iterdir())
    return result | {"micro": _micro_rows(nodes), "outputs": outputs}


def best_of(runs: list[dict]) -> dict:
    """The fastest of repeated runs, with the largest peak RSS seen."""
    ok = [r for r in runs if "error" not in r] or runs
    best = dict(min(ok, key=lambda r: r.get("seconds", float("inf"))))
    best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    best["runs"] = [round(r["seconds"], 3) for r in ok if "seconds" in r]
    return best


def mem_available_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return float("inf")


def baseline_need_gb(gold: Path, pred: Path, ancestors: Path, info: dict) -> float:
    """The dense baseline's planned peak (GB); a cheap lower bound first when it is huge."""
    from benchmarks.dense_baseline import BYTES, plan
    from hieval.engine.counts import evaluated_levels
    from hieval.hierarchy.table import level_order

    lower = BYTES * 2 * info["documents"] * info["codes"] / 1024**3
    if lower > 64:  # G and P alone: no need to scan the files
        return lower
    levels = evaluated_levels(level_order(ancestors), MAX_LEVEL)
    return plan(gold, pred, ancestors, levels).peak_bytes / 1024**3


def run_scale(
    scale: float,
    seed: int,
    data_dir: Path,
    repeat: int,
    baseline_max_gb: float,
    options: dict,
    steps: tuple[str, ...] = STEPS,
    log=print,
) -> dict:
    """Generate (cached) and measure one scale with its documents named as
    ``options["doc_ids"]`` says (see :data:`benchmarks.generate.DOC_ID_STYLES`); return the
    data record and step results."""
    doc_ids = options.get("doc_ids", "padded")
    started = time.perf_counter()
    table = None
    documents = gen.documents_for(scale)
    if not all(p.exists() for p in gen.paths(data_dir, documents, seed)):
        from hieval.hierarchy.sources import load_source

        table = load_source("package")[0]
    ancestors = gen.hierarchy(data_dir, table)
    gold, pred = gen.generate(scale, seed, data_dir, table=table)
    info = gen.record(gold)
    gold, pred = gen.doc_id_variant(gold, pred, doc_ids)
    log(
        f"scale {scale:g} ({doc_ids} doc ids, e.g. {_first_doc(gold)!r}): "
        f"{info['documents']:,} documents, {info['gold_rows']:,} gold + "
        f"{info['pred_rows']:,} predicted rows, {info['codes']:,} distinct codes "
        f"(data ready in {time.perf_counter() - started:.1f} s)"
    )
    results: dict[str, dict] = {}
    for step in steps:
        if step in ("split", "sharded") and not options.get("shards"):
            continue
        if step == "baseline":
            need = baseline_need_gb(gold, pred, ancestors, info)
            limit = min(baseline_max_gb, 0.7 * mem_available_gb())
            if need > limit:
                results[step] = {"skipped": f"skipped (would need {need:.1f} GB)", "need_gb": need}
                log(f"  {step}: skipped, would need {need:.1f} GB (limit {limit:.1f} GB)")
                continue
            runs = [measure(step, gold, pred, ancestors, options)]  # once: it is slow
            runs[0]["need_gb"] = need
        elif step == "split":  # once: it is preparation, cached
            runs = [measure(step, gold, pred, ancestors, options)]
        elif step == "e2e":
            runs = [measure_e2e(gold, pred, options) for _ in range(repeat)]
        else:
            runs = [measure(step, gold, pred, ancestors, options) for _ in range(repeat)]
        results[step] = best_of(runs)
        r = results[step]
        log(f"  {step}: " + (r["error"] if "error" in r else f"{r['seconds']:.3f} s"))
    return {
        "scale": scale,
        "doc_ids": doc_ids,
        "info": info,
        "options": options,
        "results": results,
        "check": check(results),
        "e2e_check": check(results, "e2e", "naive"),
        "polars_check": check(results, "polars", "naive"),
    }


def _first_doc(path: Path) -> object:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read_row_group(0, columns=["doc_id"])["doc_id"][0].as_py()


def check(results: dict[str, dict], ours: str = "hieval", theirs: str = "baseline") -> str:
    """Whether hieval's micro counts equal the baseline's (when both ran)."""
    ours, theirs = results.get(ours, {}), results.get(theirs, {})
    if "micro" not in ours or "micro" not in theirs:
        return ""
    if ours["micro"] == theirs["micro"]:
        return f"identical ({len(ours['micro'])} family × level cells)"
    a = {tuple(r[:2]): r[2:] for r in ours["micro"]}
    b = {tuple(r[:2]): r[2:] for r in theirs["micro"]}
    diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return f"DIFFERENT at {diff}"


def _notes(step: str, r: dict, results: dict[str, dict], check_text: str) -> str:
    if "skipped" in r:
        return r["skipped"]
    if "error" in r:
        return f"failed: {r['error']}"
    if step == "floor":
        return "reads and hashes every value of both files"
    if step == "hieval":
        text = f"count {r['count_s']:.2f} s + metrics {r['metrics_s']:.2f} s"
        return text + (f"; micro counts vs baseline: {check_text}" if check_text else "")
    if step == "split":
        return (
            "cached from an earlier run" if r.get("cached") else "hieval.pipeline.split_by_document"
        )
    if step == "sharded":
        shards, rows = r["shard_s"], r["shard_rows"]
        return (
            f"{len(shards)} shards in turn (rows {'/'.join(f'{n:,}' for n in rows)}), slowest "
            f"{max(shards):.2f} s; gather + metrics {r['gather_s']:.2f} s; nodes vs unsharded: "
            f"{r['vs_unsharded']}"
        )
    if step in ("icm", "onepass"):
        counts = results.get("hieval", {})
        if "count_s" in counts:
            return f"{r['seconds'] / counts['count_s']:.2f}× the counting time"
        return ""
    if step == "naive":
        return "one query: joins both files with the ancestor table, micro TP/FP/FN only"
    if step == "polars":
        return (
            "integer codes joined to the ancestor table, one group-by on integer keys "
            "(streaming engine), micro TP/FP/FN only"
        )
    if step == "e2e":
        naive = results.get("naive", {}).get("seconds")
        text = (
            f"process start to exit, {len(r['outputs'])} outputs ({', '.join(r['outputs'])})"
            f"; runs {', '.join(f'{x:.2f}' for x in r['runs'])} s"
        )
        if naive:
            ratio = naive / r["seconds"]
            text += (
                f"; {ratio:.2f}× faster than the naive query"
                if ratio >= 1
                else f"; {1 / ratio:.2f}× the naive query's time"
            )
        check_e2e = results.get("_e2e_check", "")
        return text + (f"; micro counts vs naive query: {check_e2e}" if check_e2e else "")
    if step == "baseline":
        return (
            f"load {r['load_s']:.2f} + matrices {r['matrices_s']:.2f} + products/sums "
            f"{r['evaluate_s']:.2f} s; planned peak {r['need_gb']:.1f} GB"
        )
    return ""


def table_rows(run: dict) -> list[dict]:
    """One row per step of one scale, ready for :func:`render`."""
    info, results = run["info"], run["results"]
    rows_total = info["gold_rows"] + info["pred_rows"]
    baseline = results.get("baseline", {}).get("seconds")
    out = []
    for step, r in results.items():
        seconds = r.get("seconds")
        if step == "hieval" and baseline and seconds:
            versus = f"{baseline / seconds:.0f}× faster"
        elif step == "baseline" and seconds:
            versus = "1×"
        else:
            versus = ""
        out.append(
            {
                "scale": f"{run['scale']:g}×"
                + ("" if run.get("doc_ids", "padded") == "padded" else f" ({run['doc_ids']} ids)"),
                "documents": f"{info['documents']:,}",
                "gold rows": f"{info['gold_rows']:,}",
                "pred rows": f"{info['pred_rows']:,}",
                "step": LABELS.get(step, step),
                "wall s": f"{seconds:.3f}" if seconds else "—",
                "CPU s (process)": f"{r['cpu_s']:.2f}" if "cpu_s" in r else "—",
                "peak RSS MB": f"{r['peak_rss_mb']:,.0f}" if "peak_rss_mb" in r else "—",
                "rows/s": f"{rows_total / seconds:,.0f}" if seconds else "—",
                "vs baseline": versus,
                "notes": _notes(
                    step,
                    r,
                    results | {"_e2e_check": run.get("e2e_check", "")},
                    run.get("check", ""),
                ),
            }
        )
    return out


def render(rows: list[dict]) -> str:
    """A Markdown table; numeric columns right-aligned."""
    if not rows:
        return ""
    columns = list(rows[0])
    right = {"documents", "gold rows", "pred rows", "wall s", "CPU s (process)", "peak RSS MB"}
    right.add("rows/s")
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---:" if c in right else "---" for c in columns) + "|",
    ]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def targets(runs: list[dict]) -> list[str]:
    """The issue's targets that this run can judge, each marked met or missed."""
    out = []
    for run in runs:
        scale, res = run["scale"], run["results"]
        ours, base = res.get("hieval", {}), res.get("baseline", {})
        if scale == 1 and "seconds" in ours and "seconds" in base:
            speed = base["seconds"] / ours["seconds"]
            met = speed >= SPEEDUP_TARGET
            out.append(
                f"1×: hieval ≥ {SPEEDUP_TARGET}× faster than the baseline: {speed:.0f}× — "
                + ("met" if met else "MISSED")
            )
        for step in ("hieval", "sharded"):
            r = res.get(step, {})
            if scale in TARGETS and "seconds" in r:
                limit_s, limit_mb = TARGETS[scale]
                s, mb = r["seconds"], r["peak_rss_mb"]
                out.append(
                    f"{scale:g}× ({LABELS[step]}): ≤ {limit_s:g} s and ≤ {limit_mb / 1024:g} GB: "
                    f"{s:.2f} s, {mb:,.0f} MB — "
                    + ("met" if s <= limit_s and mb <= limit_mb else "MISSED")
                )
        sharded = res.get("sharded", {})
        if "vs_unsharded" in sharded:
            out.append(f"{scale:g}×: sharded nodes vs unsharded: {sharded['vs_unsharded']}")
            rows = sharded["shard_rows"]
            if max(rows) > 2 * sum(rows) / len(rows):
                out.append(
                    f"{scale:g}×: shards are UNBALANCED (rows {rows}): the split does not "
                    "spread documents, so sharding cannot cut the time or memory per job"
                )
        if scale == 100 and "count_s" in ours and "seconds" in res.get("icm", {}):
            ratio = res["icm"]["seconds"] / ours["count_s"]
            out.append(
                f"100×: ICM within {ICM_RATIO_TARGET:g}× the counting time: {ratio:.2f}× — "
                + ("met" if ratio <= ICM_RATIO_TARGET else "MISSED")
            )
        e2e = res.get("e2e", {})
        if scale in E2E_TARGETS and "seconds" in e2e and "error" not in e2e:
            limit_s, limit_mb = E2E_TARGETS[scale]
            s, mb = e2e["seconds"], e2e["peak_rss_mb"]
            out.append(
                f"{scale:g}× (hieval evaluate end to end, {run.get('doc_ids', 'padded')} doc "
                f"ids): ≤ {limit_s:g} s and ≤ "
                f"{limit_mb / 1024:g} GB: {s:.2f} s, {mb:,.0f} MB — "
                + ("met" if s <= limit_s and mb <= limit_mb else "MISSED")
            )
        if scale == 100:
            out += anchor_verdicts(run)
        if run.get("e2e_check"):
            out.append(f"{scale:g}×: end-to-end micro counts vs naive query: {run['e2e_check']}")
        if run.get("polars_check"):
            out.append(
                f"{scale:g}×: tuned Polars query's micro counts vs naive query: "
                f"{run['polars_check']}"
            )
        if run.get("check", "").startswith("DIFFERENT"):
            out.append(f"{scale:g}×: micro counts differ from the baseline: {run['check']}")
    return out


def anchor_verdicts(run: dict) -> list[str]:
    """The end-to-end run against each anchor query of the same data and process tree: the
    ratio (anchor seconds / ``hieval evaluate`` seconds) against its target, met or missed."""
    res, out = run["results"], []
    e2e = res.get("e2e", {})
    if "seconds" not in e2e or "error" in e2e:
        return out
    where = f"{run['scale']:g}×, {run.get('doc_ids', 'padded')} doc ids"
    for step, target, words in (
        ("naive", E2E_NAIVE_SPEEDUP, "faster than the naive DuckDB query"),
        ("polars", E2E_POLARS_SPEEDUP, "as fast as the tuned Polars query"),
    ):
        anchor = res.get(step, {})
        if "seconds" not in anchor:
            continue
        ratio = anchor["seconds"] / e2e["seconds"]
        out.append(
            f"{where}: end to end ({e2e['seconds']:.2f} s) ≥ {target:g}× {words} "
            f"({anchor['seconds']:.2f} s, {anchor['peak_rss_mb']:,.0f} MB): {ratio:.2f}× — "
            + ("met" if ratio >= target else "MISSED")
            + _cpu_ratio(anchor, e2e)
        )
    return out


def _cpu_ratio(anchor: dict, e2e: dict) -> str:
    """The same ratio in CPU seconds of the two processes (start-up included), which a busy
    machine moves less than wall seconds."""
    if "cpu_s" not in anchor or "cpu_s" not in e2e:
        return ""
    ratio = anchor["cpu_s"] / e2e["cpu_s"]
    return f" (CPU s {anchor['cpu_s']:.1f} vs {e2e['cpu_s']:.1f}: {ratio:.2f}×)"


def code_version() -> str:
    """The commit measured, and whether the engine's files differ from it (read-only git)."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "hieval"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "hieval (no git)"
    counts = hashlib.sha256((root / "hieval" / "engine" / "counts.py").read_bytes()).hexdigest()[
        :12
    ]
    state = "with uncommitted changes to hieval/" if dirty else "clean"
    return f"hieval {commit or '?'} ({state}; engine/counts.py sha256 {counts})"


def environment(threads: int) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, threads={threads}, load average {load:.2f}, "
        f"{mem_available_gb():.1f} GB available, Python {platform.python_version()}, "
        + code_version()
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[1, 10])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="runs per step (best is kept)")
    parser.add_argument("--data-dir", type=Path, default=gen.DEFAULT_DATA_DIR)
    parser.add_argument(
        "--baseline-max-gb",
        type=float,
        default=16.0,
        help="run the dense baseline only below this planned peak (and 70%% of free memory)",
    )
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument(
        "--shards",
        type=int,
        default=0,
        help="also split the documents into this many shards (by md5 of doc_id, as the "
        "workflow does), count them in turn, gather, and compare with the unsharded nodes",
    )
    parser.add_argument(
        "--doc-ids",
        nargs="+",
        choices=gen.DOC_ID_STYLES,
        default=["padded"],
        help="how documents are named: as generated (D0000001), integers (1), or text that is "
        "not zero-padded (d1); each style is measured in turn on the same rows",
    )
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=4, metavar=("STEP", "GOLD", "PRED", "ANCESTORS"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args(argv)
    if args.child:
        step, gold, pred, ancestors = args.child
        print(json.dumps(run_step(step, gold, pred, ancestors, json.loads(args.options))))
        return

    options = {"threads": args.threads, "shards": args.shards}
    print(environment(args.threads), file=sys.stderr)
    runs = []
    for scale in args.scales:
        for doc_ids in args.doc_ids:
            run = run_scale(
                scale,
                args.seed,
                args.data_dir.resolve(),
                args.repeat,
                args.baseline_max_gb,
                options | {"doc_ids": doc_ids},
                tuple(args.steps),
                log=lambda text: print(text, file=sys.stderr, flush=True),
            )
            runs.append(run)
    print(
        f"\n{environment(args.threads)}; seed {args.seed}; "
        f"best of {args.repeat} (the dense baseline and the shard split run once)\n"
    )
    print(render([row for run in runs for row in table_rows(run)]))
    verdicts = targets(runs)
    if verdicts:
        print("\nTargets (flat + set-based + CoPHE, one model):")
        print("\n".join(f"- {v}" for v in verdicts))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(runs, indent=1, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
