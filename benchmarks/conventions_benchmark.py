"""The named conventions at the size of CAML's MIMIC-III full test set: 3,372 documents, its
8,922-code label space, each document's top 100 scores and ~15 gold codes (random), every
matrix convention (caml, edin, edin_mullenbach); prints the wall time and peak RSS.

    python benchmarks/conventions_benchmark.py
"""

import resource
import time

import numpy as np
import polars as pl

from hieval.conventions.table import model_rows

rng = np.random.default_rng(0)
D, L = 3372, 8922
codes = [f"{i // 10:03d}.{i % 10}" for i in range(L)]
docs = [f"D{i:05d}" for i in range(D)]
g_doc = np.repeat(np.arange(D), 15)
g_code = rng.integers(0, L, D * 15)
gold = pl.DataFrame({"doc_id": np.array(docs)[g_doc], "code": np.array(codes)[g_code]}).unique()
s_doc = np.repeat(np.arange(D), 100)
s_code = rng.integers(0, L, D * 100)
scores = pl.DataFrame(
    {"doc_id": np.array(docs)[s_doc], "code": np.array(codes)[s_code], "score": rng.random(D * 100)}
).unique(["doc_id", "code"])
decided = scores.filter(pl.col("score") >= 0.9)
t = time.time()
r = model_rows(
    "m",
    gold=gold,
    decided=decided,
    scores=scores,
    tidy=None,
    conventions=["caml", "edin", "edin_mullenbach"],
    ks=(8, 15),
    label_space=codes,
    label_space_name="x",
    threshold=0.9,
)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{time.time() - t:.1f} s, peak RSS {peak:.0f} MB, {r.height} rows")
