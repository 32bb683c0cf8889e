"""Hierarchical error analysis (issue 34): error distance, confusions and per-code counts,
checked against a naive implementation written here (plain Python over sets and the package
hierarchy's ancestor table) on random zoos with designed errors: sibling swaps, same-category
swaps, other-chapter codes, plain misses, extra codes and invented codes (placed by syntax)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import polars as pl
import pytest

import hieval
from hieval.codes.icd9 import ICD9_LEVELS

LEVELS = ICD9_LEVELS  # e2, e1, e0, c, chapter, root
EVALUATED = ("e2", "e1", "e0", "c")  # up to the default max_level, c


# --- the naive reference --------------------------------------------------------------------


def naive_ancestors(icd9_ancestors: pl.DataFrame) -> dict[str, dict[str, str]]:
    """code -> {level: ancestor} of the package tree (plain dicts)."""
    up: dict[str, dict[str, str]] = defaultdict(dict)
    for code, level, ancestor in icd9_ancestors.iter_rows():
        up[code][level] = ancestor
    return up


def place(code: str, up: dict[str, dict[str, str]]) -> dict[str, str]:
    """An invented dotted diagnosis DDD.DD placed as ICD-9 syntax says: itself at e2, its first
    decimal at e1, its category at e0 and the category's block and chapter."""
    category = up[code[:3]]
    return {
        "e2": code,
        "e1": code[:5],
        "e0": code[:3],
        "c": category["c"],
        "chapter": category["chapter"],
    }


def lca(a: str, b: str, up) -> str:
    """The lowest level at which two codes share an ancestor (root when none below it)."""
    for level in LEVELS[:-1]:
        if level in up[a] and up[a].get(level) == up[b].get(level):
            return level
    return "root"


def naive_errors(gold: dict[str, set], pred: dict[str, set], up, placed: set) -> Counter:
    counts: Counter = Counter()
    for doc in gold.keys() | pred.keys():
        g, p = gold.get(doc, set()), pred.get(doc, set())
        for kind, own, other in (("fn", g - p, p - g), ("fp", p - g, g - p)):
            for code in own:
                if other:
                    level = min((lca(code, o, up) for o in other), key=LEVELS.index)
                else:
                    level = "none"
                counts[(kind, level, "placed" if code in placed else "valid")] += 1
    return counts


def naive_confusions(gold, pred, up) -> Counter:
    pairs: Counter = Counter()
    for doc in gold.keys() | pred.keys():
        g, p = gold.get(doc, set()), pred.get(doc, set())
        for a in g - p:
            for b in p - g:
                level = lca(a, b, up)
                if LEVELS.index(level) <= LEVELS.index("e0"):
                    pairs[(a, b, level)] += 1
    return pairs


def naive_codes(gold, pred, up) -> dict[tuple[str, str], tuple[int, int, int]]:
    counts: dict = defaultdict(lambda: [0, 0, 0])
    for doc in gold.keys() | pred.keys():
        for level in EVALUATED:
            g = {up[c][level] for c in gold.get(doc, ()) if level in up[c]}
            p = {up[c][level] for c in pred.get(doc, ()) if level in up[c]}
            for node in g | p:
                counts[(node, level)][0] += node in g and node in p
                counts[(node, level)][1] += node in p and node not in g
                counts[(node, level)][2] += node in g and node not in p
    return {key: tuple(value) for key, value in counts.items()}


# --- a zoo with designed errors -------------------------------------------------------------


def designed_zoo(icd9, up, seed: int, documents: int = 60):
    """Gold sets and two models' sets: a near-miss model (sibling and same-category swaps,
    invented codes) and a far model (other-chapter codes, misses, extras)."""
    rng = np.random.default_rng(seed)
    frame = icd9.frame.filter(pl.col("depth") == "e2", pl.col("kind") == "dx")
    leaves = sorted(frame["code"].to_list())
    by_e1, by_e0 = defaultdict(list), defaultdict(list)
    for code in leaves:
        by_e1[up[code]["e1"]].append(code)
        by_e0[up[code]["e0"]].append(code)
    known = set(icd9.frame["code"].to_list())
    invented = [
        f"{c[:5]}{d}" for c in leaves[::97] for d in "0123456789" if f"{c[:5]}{d}" not in known
    ][:40]
    gold, near, far = {}, {}, {}
    for i in range(documents):
        doc = f"d{i:03d}"
        codes = set(rng.choice(leaves, size=int(rng.integers(1, 8)), replace=False))
        gold[doc] = codes
        near[doc], far[doc] = set(), set()
        for code in codes:
            roll = rng.random()
            if roll < 0.3:
                near[doc].add(str(rng.choice(by_e1[up[code]["e1"]])))  # a sibling (maybe itself)
            elif roll < 0.5:
                near[doc].add(str(rng.choice(by_e0[up[code]["e0"]])))  # same category
            elif roll < 0.6:
                near[doc].add(str(rng.choice(invented)))
            else:
                near[doc].add(code)
            roll = rng.random()
            if roll < 0.3:
                chapter = up[code]["chapter"]
                other = [c for c in rng.choice(leaves, 20) if up[c]["chapter"] != chapter]
                far[doc].add(str(other[0]))
            elif roll < 0.5:
                pass  # a plain miss
            else:
                far[doc].add(code)
        if rng.random() < 0.3:
            far[doc].add(str(rng.choice(leaves)))  # an extra code
        if i % 10 == 0:
            near[doc] = set()  # a document the model leaves empty: every miss is plain
    for code in invented:
        up[code] = place(code, up)
    return gold, {"near": near, "far": far}, set(invented)


def frame_of(sets: dict[str, set]) -> pl.DataFrame:
    rows = [(doc, code) for doc, codes in sets.items() for code in sorted(codes)]
    return pl.DataFrame(rows, schema=["doc_id", "code"], orient="row")


@pytest.fixture(scope="module", params=[1, 2])
def analysed(request, icd9, icd9_ancestors, tmp_path_factory):
    up = naive_ancestors(icd9_ancestors)
    gold, models, placed = designed_zoo(icd9, up, seed=request.param)
    train = {f"t{i}": codes for i, codes in enumerate(list(gold.values())[::2])}
    evaluation = hieval.evaluate(
        frame_of(gold),
        {name: frame_of(sets) for name, sets in models.items()},
        train_gold=frame_of(train),
        cache=tmp_path_factory.mktemp("cache"),
    )
    return evaluation, gold, models, up, placed, train


def test_error_distance_matches_the_naive_count(analysed):
    evaluation, gold, models, up, placed, _ = analysed
    table = evaluation.errors
    assert table.columns == ["model", "kind", "lca_level", "code_status", "count", "share"]
    for name, pred in models.items():
        expected = naive_errors(gold, pred, up, placed)
        rows = table.filter(model=name)
        got = {(k, lv, s): c for k, lv, s, c in rows.select(list(table.columns[1:5])).iter_rows()}
        assert got == dict(expected)
        for kind in ("fn", "fp"):
            total = sum(c for (k, _, _), c in expected.items() if k == kind)
            for level, status, share in (
                rows.filter(kind=kind).select("lca_level", "code_status", "share").iter_rows()
            ):
                assert share == pytest.approx(expected[(kind, level, status)] / total, abs=1e-15)
    # The designed errors are there: the near model's misses meet their swaps low in the tree,
    # its invented codes are `placed`, its empty documents give plain misses.
    near = table.filter(model="near")
    assert set(near["lca_level"]) >= {"e1", "e0", "none"}
    assert "placed" in set(near["code_status"])
    assert {"chapter", "root"} & set(table.filter(model="far")["lca_level"])


def test_confusions_match_the_naive_pairs(analysed):
    evaluation, gold, models, up, _, _ = analysed
    for name, pred in models.items():
        table = evaluation.confusions[name]
        assert table.columns == ["gold_code", "predicted_code", "lca_level", "documents"]
        got = {(a, b, lv): n for a, b, lv, n in table.iter_rows()}
        assert got == dict(naive_confusions(gold, pred, up))
        counts = table["documents"].to_list()
        assert counts == sorted(counts, reverse=True)  # most frequent first
    assert evaluation.confusions["near"].height > 0


def test_per_code_counts_match_the_naive_sets(analysed):
    evaluation, gold, models, up, _, train = analysed
    titles = dict(evaluation_titles(evaluation))
    for name, pred in models.items():
        table = evaluation.codes[name]
        assert table.columns == [
            "code", "title", "level", "support", "tp", "fp", "fn",
            "precision", "recall", "f1", "train_frequency",
        ]  # fmt: skip
        expected = naive_codes(gold, pred, up)
        rows = table.iter_rows(named=True)
        got = {(r["code"], r["level"]): (r["tp"], r["fp"], r["fn"]) for r in rows}
        assert got == expected
        trained = naive_codes(train, {}, up)
        for row in table.iter_rows(named=True):
            tp, fp, fn = row["tp"], row["fp"], row["fn"]
            assert row["support"] == tp + fn
            assert row["precision"] == (tp / (tp + fp) if tp + fp else 0.0)
            assert row["recall"] == (tp / (tp + fn) if tp + fn else 0.0)
            assert math.isclose(row["f1"], 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
            assert row["train_frequency"] == trained.get((row["code"], row["level"]), (0, 0, 0))[2]
            assert row["title"] == titles.get(row["code"])


def evaluation_titles(evaluation) -> list[tuple[str, str | None]]:
    """The package tree's titles, read from the evaluation's own hierarchy table."""
    frame = pl.read_parquet(evaluation._folder / "work" / "hierarchy" / "levels.parquet")
    return frame.select("code", "title").iter_rows()


def test_share_intervals_are_the_bootstrap_of_the_naive_shares(icd9, icd9_ancestors, tmp_path):
    """With ``bootstrap``, each share's interval is the percentile interval of the share over
    replicates that weigh each document by its Poisson weight (the documented weights of
    hieval.metrics.uncertainty, by seed, document and replicate), computed here per error."""
    from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights

    up = naive_ancestors(icd9_ancestors)
    gold, models, placed = designed_zoo(icd9, up, seed=3, documents=40)
    replicates, seed = 60, 11
    evaluation = hieval.evaluate(
        frame_of(gold),
        {"near": frame_of(models["near"])},
        cache=tmp_path / "cache",
        bootstrap=replicates,
        permutations=10,
        seed=seed,
        confidence=0.9,
    )
    table = evaluation.errors
    assert table.columns[-2:] == ["low", "high"]
    docs = sorted(gold)
    weights = poisson_weights(doc_keys(docs), seed=seed, first=0, count=replicates)
    weight_of = {doc: weights[:, i] for i, doc in enumerate(docs)}
    per_cell: dict = defaultdict(lambda: np.zeros(replicates))
    pred = models["near"]
    for doc in docs:
        one = naive_errors({doc: gold[doc]}, {doc: pred.get(doc, set())}, up, placed)
        for cell, n in one.items():
            per_cell[cell] += n * weight_of[doc]
    for kind, level, status, low, high in table.select(
        "kind", "lca_level", "code_status", "low", "high"
    ).iter_rows():
        total = sum(v for (k, _, _), v in per_cell.items() if k == kind)
        shares = per_cell[(kind, level, status)] / total
        expected = np.quantile(shares, [0.05, 0.95])
        assert (low, high) == pytest.approx(tuple(expected), abs=1e-12)
        assert low <= high


def test_a_users_tree_by_hand(tmp_path):
    """A user's tree (levels d3, d2, d1 from the leaves up), worked by hand: siblings meet at
    d2, cousins at d1, other branches at the root; near misses are siblings."""
    tree = tmp_path / "tree.csv"
    tree.write_text(
        "child,parent\nA,\nB,\nA1,A\nA2,A\nB1,B\nA1x,A1\nA1y,A1\nA2x,A2\nB1x,B1\nB1y,B1\n"
    )
    gold = {"d1": ["A1x", "B1x"], "d2": ["A1x"], "d3": ["B1y"]}
    pred = {"d1": ["A1y", "A2x"], "d2": ["A1x", "B1y"], "d3": []}
    evaluation = hieval.evaluate(gold, {"m": pred}, hierarchy=tree, cache=tmp_path / "cache")
    rows = {(k, lv): c for _, k, lv, _, c, _ in evaluation.errors.iter_rows()}
    # d1: A1x meets A1y at d2 (A1); B1x meets A1y/A2x only at the root; A1y at d2 (A1x); A2x
    # at d1 (A, with A1x). d2: B1y is an extra code (no miss): none. d3: B1y a plain miss.
    assert rows == {
        ("fn", "d2"): 1,
        ("fn", "root"): 1,
        ("fn", "none"): 1,
        ("fp", "d2"): 1,
        ("fp", "d1"): 1,
        ("fp", "none"): 1,
    }
    assert evaluation.confusions["m"].rows() == [("A1x", "A1y", "d2", 1)]
    codes = evaluation.codes["m"]
    a = codes.filter(code="A").row(0, named=True)  # d1 and d2 carry A on both sides
    assert (a["level"], a["tp"], a["fp"], a["fn"]) == ("d1", 2, 0, 0)


def test_icd10_by_hand(icd10_cache):
    """ICD-10's levels: E11.9 and E11.65 meet at their category E11; I10 and I11.9 at their
    block (hypertensive diseases); the two pairs share nothing below the root."""
    gold = {"d": ["E11.9", "I10"]}
    pred = {"d": ["E11.65", "I11.9"]}
    evaluation = hieval.evaluate(gold, {"m": pred}, hierarchy="icd10", cache=icd10_cache)
    rows = {(k, lv): c for _, k, lv, _, c, _ in evaluation.errors.iter_rows()}
    assert rows == {("fn", "category"): 1, ("fn", "block"): 1, ("fp", "category"): 1,
                    ("fp", "block"): 1}  # fmt: skip
    assert evaluation.confusions["m"].rows() == [("E11.9", "E11.65", "category", 1)]
