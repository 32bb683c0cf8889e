"""hieval's counts and metrics against a naive reference on random labels over the real ICD-9-CM
hierarchy, the CoPHE paper's Table 1, and additivity over documents.

The reference below is deliberately plain Python (dicts, sets, Counters) and never calls hieval's
count or metric code: each code's ancestors are read from the level table's rows.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import polars as pl
import pytest

from hieval.engine.driver import count
from hieval.experiments.paper import table1_markdown
from hieval.metrics.prf import metrics_table

LEVELS = ("e2", "e1", "e0", "c", "chapter")
N_DOCS = 300
SEED = 20211107
KEYS = ("tp", "fp", "fn", "n_gold", "n_pred")


# --- the naive reference ----------------------------------------------------------------------


def naive_ancestor_map(frame: pl.DataFrame, codes) -> dict[str, dict[str, str]]:
    """code -> {level: ancestor} from the level-table rows: a code counts at its own depth and
    every level above; an e1-depth code has no e2 ancestor, an e0-depth code no e1."""
    rows = {r["code"]: r for r in frame.iter_rows(named=True)}
    out = {}
    for code in codes:
        r = rows[code]
        levels = {}
        if r["depth"] == "e2":
            levels["e2"] = code
        for level in ("e1", "e0", "c", "chapter"):
            if r[level] is not None:
                levels[level] = r[level]
        out[code] = levels
    return out


def naive_counts(gold: dict, pred: dict, anc: dict, levels=LEVELS):
    """Per-node (family, level, node) -> [tp, fp, fn, n_gold, n_pred] and per-document
    (doc, family, level) -> [tp, fp, fn]."""
    nodes = defaultdict(lambda: [0, 0, 0, 0, 0])
    docs = defaultdict(lambda: [0, 0, 0])

    def add(doc, family, level, node, x, y):
        tp, fp, fn = min(x, y), max(x - y, 0), max(y - x, 0)
        acc = nodes[(family, level, node)]
        acc[0] += tp
        acc[1] += fp
        acc[2] += fn
        acc[3] += y
        acc[4] += x
        d = docs[(doc, family, level)]
        d[0] += tp
        d[1] += fp
        d[2] += fn

    for doc in sorted(set(gold) | set(pred)):
        g, p = set(gold.get(doc, ())), set(pred.get(doc, ()))
        for code in g | p:
            add(doc, "flat", "leaf", code, int(code in p), int(code in g))
        for level in levels:
            ys = Counter(anc[c][level] for c in g if level in anc[c])
            xs = Counter(anc[c][level] for c in p if level in anc[c])
            for node in set(xs) | set(ys):
                x, y = xs[node], ys[node]
                add(doc, "cophe", level, node, x, y)
                add(doc, "set", level, node, min(x, 1), min(y, 1))
    return {k: tuple(v) for k, v in nodes.items()}, {k: tuple(v) for k, v in docs.items()}


def _f2(p, r):
    """F-beta with beta = 2 from precision and recall: 5PR / (4P + R), 0 when both are 0."""
    return 5 * p * r / (4 * p + r) if 4 * p + r else 0.0


def _prf(tp, fp, fn):
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0
    return p, r, f, _f2(p, r)


def naive_metrics(nodes: dict) -> dict:
    """(family, level, average, metric) -> value, with the conventions of hieval.metrics.prf."""
    groups = defaultdict(list)
    for (family, level, _node), c in nodes.items():
        groups[(family, level)].append(c[:3])
        if family != "flat":
            groups[(family, "overall")].append(c[:3])
    out = {}
    for (family, level), counts in groups.items():
        tp, fp, fn = (sum(c[i] for c in counts) for i in range(3))
        per_node = [_prf(*c) for c in counts]
        macro_p, macro_r, macro_f, macro_f2 = (
            sum(x[i] for x in per_node) / len(per_node) for i in range(4)
        )
        hm = 2 * macro_p * macro_r / (macro_p + macro_r) if macro_p + macro_r else 0.0
        values = {
            "micro": _prf(tp, fp, fn),
            "macro": (macro_p, macro_r, macro_f, macro_f2),
            "macro_hm": (macro_p, macro_r, hm, _f2(macro_p, macro_r)),
        }
        for average, (p, r, f, f2) in values.items():
            for metric, value in zip(
                ("tp", "fp", "fn", "precision", "recall", "f1", "f2"),
                (tp, fp, fn, p, r, f, f2),
                strict=True,
            ):
                out[(family, level, average, metric)] = value
    return out


# --- random labels over the real hierarchy ----------------------------------------------------


def to_frame(labels: dict[str, list[str]]) -> pl.DataFrame:
    rows = [(doc, code) for doc, codes in labels.items() for code in codes]
    return pl.DataFrame(rows, schema={"doc_id": pl.String, "code": pl.String}, orient="row")


def node_dict(nodes: pl.DataFrame) -> dict:
    return {
        (r["family"], r["level"], r["node"]): tuple(r[k] for k in KEYS)
        for r in nodes.iter_rows(named=True)
    }


def doc_dict(docs: pl.DataFrame) -> dict:
    return {
        (r["doc_id"], r["family"], r["level"]): (r["tp"], r["fp"], r["fn"])
        for r in docs.iter_rows(named=True)
    }


def tidy_dict(tidy: pl.DataFrame) -> dict:
    return {
        (r["family"], r["level"], r["average"], r["metric"]): r["value"]
        for r in tidy.iter_rows(named=True)
    }


@pytest.fixture(scope="module")
def dataset(icd9, icd9_leaves):
    rng = np.random.default_rng(SEED)
    rows = {r["code"]: r for r in icd9.frame.iter_rows(named=True)}
    by_cat, by_block = defaultdict(list), defaultdict(set)
    for code in sorted(icd9_leaves):
        by_cat[rows[code]["e0"]].append(code)
        by_block[rows[code]["c"]].add(rows[code]["e0"])
    kind_of_block = {b: rows[next(iter(cats))]["kind"] for b, cats in by_block.items()}
    dx_blocks = sorted(b for b, k in kind_of_block.items() if k == "dx")
    proc_blocks = sorted(b for b, k in kind_of_block.items() if k == "proc")
    blocks = [
        *rng.choice(dx_blocks, 14, replace=False),
        *rng.choice(proc_blocks, 6, replace=False),
        # fixed: the paper's block, chapters that are their own block, E and V codes
        "360-379", "280-289", "740-759", "E849-E849", "V50-V59", "87-99", "410-414",
    ]  # fmt: skip
    pool_cats = []
    for block in dict.fromkeys(blocks):
        cats = sorted(by_block[block])
        pool_cats += list(rng.choice(cats, min(4, len(cats)), replace=False))
    # categories that are leaves themselves (e0 leaves such as 412)
    e0_leaves = sorted(c for c in icd9_leaves if rows[c]["depth"] == "e0")
    pool_cats += list(rng.choice(e0_leaves, 15, replace=False))
    pool_cats = sorted(set(pool_cats))
    cat_pool = {}
    for cat in pool_cats:
        leaves = by_cat[cat]
        cat_pool[cat] = sorted(rng.choice(leaves, min(10, len(leaves)), replace=False))
    pool = sorted(c for leaves in cat_pool.values() for c in leaves)
    block_pool = defaultdict(list)
    for code in pool:
        block_pool[rows[code]["c"]].append(code)

    def pick(seq):
        return seq[int(rng.integers(len(seq)))]

    gold = {}
    for i in range(N_DOCS):
        doc = f"doc{i:03d}"
        codes = set()
        for _ in range(int(rng.integers(1, 4))):
            leaves = cat_pool[pick(pool_cats)]
            k = int(rng.integers(1, min(4, len(leaves)) + 1))
            codes.update(rng.choice(leaves, k, replace=False))
        codes.update(rng.choice(pool, int(rng.integers(0, 3)), replace=False))
        gold[doc] = sorted(codes)

    def sibling(code):
        return pick(cat_pool[rows[code]["e0"]])

    def cousin(code):
        same_block = block_pool[rows[code]["c"]]
        other = [c for c in same_block if rows[c]["e0"] != rows[code]["e0"]]
        return pick(other or same_block)

    models = {"perfect": gold}
    models["sibling"] = {
        d: sorted({sibling(c) if rng.random() < 0.6 else c for c in g}) for d, g in gold.items()
    }
    models["cousin"] = {
        d: sorted({cousin(c) if rng.random() < 0.5 else c for c in g}) for d, g in gold.items()
    }
    over = {}
    for d, g in gold.items():
        codes = set(g)
        for c in g:
            if rng.random() < 0.5:
                codes.update(sibling(c) for _ in range(int(rng.integers(1, 3))))
        if rng.random() < 0.3:
            codes.add(pick(pool))
        over[d] = sorted(codes)
    models["over"] = over
    drop = {d: [c for c in g if rng.random() < 0.6] for d, g in gold.items()}
    models["drop"] = {d: g for d, g in drop.items() if g}  # some documents have no prediction
    models["random"] = {
        d: sorted(set(rng.choice(pool, int(rng.integers(0, 9)), replace=True))) for d in gold
    }
    models["empty"] = {}

    frames = {name: to_frame(labels) for name, labels in models.items()}
    # Duplicate rows must be counted once.
    frames["over"] = pl.concat([frames["over"], frames["over"].sample(50, seed=SEED)])
    anc = naive_ancestor_map(icd9.frame, pool)
    return {"gold": gold, "models": models, "frames": frames, "anc": anc, "rows": rows}


def test_dataset_covers_kinds_and_depths(dataset):
    rows = dataset["rows"]
    used = {c for codes in dataset["gold"].values() for c in codes}
    kinds_depths = {(rows[c]["kind"], rows[c]["depth"]) for c in used}
    assert {("dx", "e2"), ("dx", "e1"), ("dx", "e0"), ("proc", "e2"), ("proc", "e1")} <= (
        kinds_depths
    )
    assert {rows[c]["c"] for c in used} >= {"360-379", "280-289", "E849-E849", "87-99"}
    # Several leaves of one category in one document, so CoPHE counts exceed set counts.
    assert any(
        max(Counter(rows[c]["e0"] for c in codes).values()) > 1
        for codes in dataset["gold"].values()
    )


@pytest.fixture(scope="module")
def results(dataset, icd9_ancestors):
    gold_frame = to_frame(dataset["gold"])
    out = {}
    for name, frame in dataset["frames"].items():
        nodes, docs = count(gold_frame, frame, icd9_ancestors, LEVELS)
        out[name] = (nodes, docs)
    return out


MODELS = ("perfect", "sibling", "cousin", "over", "drop", "random", "empty")


@pytest.mark.parametrize("model", MODELS)
def test_node_counts_match_reference(model, dataset, results):
    nodes, _ = results[model]
    assert tuple(nodes.columns) == ("family", "level", "node", *KEYS)
    expected, _ = naive_counts(dataset["gold"], dataset["models"][model], dataset["anc"])
    got = node_dict(nodes)
    assert nodes.height == len(got), "a (family, level, node) appears more than once"
    for family in ("flat", "set", "cophe"):
        levels = ("leaf",) if family == "flat" else LEVELS
        for level in levels:
            exp = {k: v for k, v in expected.items() if k[:2] == (family, level)}
            act = {k: v for k, v in got.items() if k[:2] == (family, level)}
            assert act == exp, f"{model}: {family}/{level} node counts differ"
    assert set(got) == set(expected)


@pytest.mark.parametrize("model", MODELS)
def test_doc_counts_match_reference(model, dataset, results):
    _, docs = results[model]
    _, expected = naive_counts(dataset["gold"], dataset["models"][model], dataset["anc"])
    assert doc_dict(docs) == expected


@pytest.mark.parametrize("model", MODELS)
def test_metrics_match_reference(model, dataset, results):
    nodes, _ = results[model]
    tidy = metrics_table(nodes, model)
    assert tidy["model"].unique().to_list() == [model]
    got = tidy_dict(tidy)
    assert len(got) == tidy.height
    expected_nodes, _ = naive_counts(dataset["gold"], dataset["models"][model], dataset["anc"])
    expected = naive_metrics(expected_nodes)
    assert set(got) == set(expected)
    for key in sorted(expected):
        assert got[key] == pytest.approx(expected[key], rel=1e-12, abs=1e-12), key


def test_perfect_model_scores_one(results):
    got = tidy_dict(metrics_table(results["perfect"][0], "perfect"))
    for (_f, _l, _a, metric), value in got.items():
        if metric in ("precision", "recall", "f1"):
            assert value == pytest.approx(1.0)
        if metric in ("fp", "fn"):
            assert value == 0


def test_over_prediction_cophe_penalises_more_than_set(results):
    # Extra siblings in a gold category are invisible to set-based e0 but FP under CoPHE.
    got = tidy_dict(metrics_table(results["over"][0], "over"))
    assert got[("set", "e0", "micro", "fn")] == 0
    assert got[("cophe", "e0", "micro", "fp")] > got[("set", "e0", "micro", "fp")]


# --- the paper's worked example ---------------------------------------------------------------

PAPER_GOLD = ["364.11", "364.24", "364.9"]
PAPER_PRED = ["364.11", "364.21", "364.3", "364.41"]
PAPER_TABLE1 = {
    ("flat", "leaf"): (1, 3, 2),
    ("set", "e2"): (1, 2, 1),
    ("set", "e1"): (2, 2, 1),
    ("set", "e0"): (1, 0, 0),
    ("set", "overall"): (4, 4, 2),
    ("cophe", "e2"): (1, 2, 1),
    ("cophe", "e1"): (2, 2, 1),
    ("cophe", "e0"): (3, 1, 0),
    ("cophe", "overall"): (6, 5, 2),
}


def test_paper_table1(icd9, icd9_ancestors):
    gold = to_frame({"ex": PAPER_GOLD})
    pred = to_frame({"ex": PAPER_PRED})
    nodes, _ = count(gold, pred, icd9_ancestors, ("e2", "e1", "e0"))
    got = tidy_dict(metrics_table(nodes, "paper"))
    levels = {(f, lvl) for f, lvl, _a, _m in got}
    assert levels == set(PAPER_TABLE1)
    for (family, level), (tp, fp, fn) in PAPER_TABLE1.items():
        assert tuple(got[(family, level, "micro", m)] for m in ("tp", "fp", "fn")) == (tp, fp, fn)
        p, r, f, _ = _prf(tp, fp, fn)
        assert got[(family, level, "micro", "precision")] == pytest.approx(p)
        assert got[(family, level, "micro", "recall")] == pytest.approx(r)
        assert got[(family, level, "micro", "f1")] == pytest.approx(f)
    assert got[("flat", "leaf", "micro", "f1")] == pytest.approx(2 / 7)
    assert got[("cophe", "overall", "micro", "f1")] == pytest.approx(12 / 19)
    # and the naive reference agrees
    anc = naive_ancestor_map(icd9.frame, PAPER_GOLD + PAPER_PRED)
    expected, _ = naive_counts(
        {"ex": PAPER_GOLD}, {"ex": PAPER_PRED}, anc, levels=("e2", "e1", "e0")
    )
    assert node_dict(nodes) == expected


def test_paper_table1_markdown(icd9):
    text = table1_markdown(icd9)
    assert "| CoPHE | overall | 6 | 5 | 2 |" in text
    assert "| Leaf-only | leaf | 1 | 3 | 2 |" in text


# --- additivity over documents ----------------------------------------------------------------


@pytest.mark.parametrize("model", ["sibling", "over", "random"])
def test_docs_sum_to_nodes(model, results):
    nodes, docs = results[model]
    by_nodes = nodes.group_by("family", "level").agg(pl.col("tp", "fp", "fn").sum())
    by_docs = docs.group_by("family", "level").agg(pl.col("tp", "fp", "fn").sum())
    as_dict = {
        name: {(r[0], r[1]): r[2:] for r in frame.iter_rows()}
        for name, frame in (("nodes", by_nodes), ("docs", by_docs))
    }
    assert as_dict["nodes"] == as_dict["docs"]
    assert len(as_dict["nodes"]) == 1 + 2 * len(LEVELS)


@pytest.mark.parametrize("model", ["cousin", "over", "drop"])
def test_halves_add_up_to_whole(model, dataset, icd9_ancestors, results):
    gold, pred = to_frame(dataset["gold"]), dataset["frames"][model]
    docs = sorted(dataset["gold"])
    halves = (set(docs[: len(docs) // 2]), set(docs[len(docs) // 2 :]))
    parts = [
        count(
            gold.filter(pl.col("doc_id").is_in(half)),
            pred.filter(pl.col("doc_id").is_in(half)),
            icd9_ancestors,
            LEVELS,
        )[0]
        for half in (sorted(halves[0]), sorted(halves[1]))
    ]
    summed = pl.concat(parts).group_by("family", "level", "node").agg(pl.col(*KEYS).sum())
    assert node_dict(summed) == node_dict(results[model][0])


def test_codes_placed_outside_the_hierarchy(icd9, icd9_ancestors):
    # 364.99 and 96.99 are not ICD-9-CM v32 codes; unknown_codes: place puts them where their
    # syntax says, and count() takes their ancestor rows as extra_ancestors.
    from hieval.inputs.normalize import placed_ancestors

    extra = placed_ancestors(["364.99", "96.99"], icd9)
    gold = {"a": ["364.99", "364.11"], "b": ["96.04"]}
    pred = {"a": ["364.9", "364.24"], "b": ["96.99", "96.04"]}
    nodes, _ = count(to_frame(gold), to_frame(pred), icd9_ancestors, LEVELS, extra)
    anc = naive_ancestor_map(icd9.frame, ["364.11", "364.9", "364.24", "96.04"])
    anc["364.99"] = {"e2": "364.99", "e1": "364.9", "e0": "364", "c": "360-379",
                     "chapter": "320-389"}  # fmt: skip
    anc["96.99"] = {"e2": "96.99", "e1": "96.9", "e0": "96", "c": "87-99", "chapter": "87-99"}
    expected, _ = naive_counts(gold, pred, anc)
    assert node_dict(nodes) == expected
