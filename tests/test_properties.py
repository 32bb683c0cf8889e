"""Property-based tests (hypothesis) of counting and metrics on random small trees.

Each example draws a random forest (2-40 nodes, depth 1-4, one or several top nodes) turned into
a level table by ``edge_list_table``, and random gold and predicted label sets over 1-8
documents (some documents predict nothing, some predictions have no gold). Expected values come
from plain Python over the drawn labels, from scikit-learn, or from hieval itself on an
equivalent input (shuffled, renamed or sharded documents).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from sklearn.metrics import precision_recall_fscore_support
from sklearn.preprocessing import MultiLabelBinarizer

from hieval.codes.icd9 import parse_code
from hieval.engine.counts import evaluated_levels
from hieval.engine.driver import count
from hieval.errors import CodeError
from hieval.hierarchy.sources import edge_list_table
from hieval.hierarchy.table import LevelTable
from hieval.metrics.prf import metrics_table

# Each count() opens a DuckDB connection (~30 ms), so the example budgets are modest; the tests
# that count several times per example get fewer examples to keep the file fast.
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    database=None,  # leave no .hypothesis example database in the working tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SETTINGS_MULTI = settings(SETTINGS, max_examples=30)
LABEL_SCHEMA = {"doc_id": pl.String, "code": pl.String}
NODE_KEYS = ["family", "level", "node"]
DOC_KEYS = ["doc_id", "family", "level"]
TIDY_KEYS = ["model", "family", "level", "average", "metric"]
COUNTS = ["tp", "fp", "fn", "n_gold", "n_pred"]


# --- strategies -------------------------------------------------------------------------------


@dataclass
class Tree:
    table: LevelTable
    leaves: list[str]
    labels: list[str]  # codes usable as labels: the leaves, or every node but the root
    depth: dict[str, int]  # code -> k of its depth level dk (0 for the root)
    d1: dict[str, str]  # code -> its ancestor at d1 (top-level subtree)
    levels: tuple[str, ...]
    ancestors: pl.DataFrame
    edges: list[tuple[str, str | None]]

    def __repr__(self) -> str:
        return f"Tree(edges={self.edges!r})"

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis prints examples with this
        printer.text(repr(self))


@dataclass
class Case:
    tree: Tree
    gold: dict[str, set[str]]
    pred: dict[str, set[str]]

    def __repr__(self) -> str:
        gold = {d: sorted(c) for d, c in sorted(self.gold.items())}
        pred = {d: sorted(c) for d, c in sorted(self.pred.items())}
        return f"Case({self.tree!r}, gold={gold!r}, pred={pred!r})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))

    @property
    def docs(self) -> list[str]:
        return sorted(set(self.gold) | set(self.pred))


@st.composite
def trees(draw, internal_labels: bool | None = False) -> Tree:
    """A random forest as a level table; ``internal_labels`` None lets hypothesis choose."""
    n = draw(st.integers(2, 40))
    max_depth = draw(st.integers(1, 4))
    names = draw(st.permutations([f"n{i}" for i in range(n)]))
    # with a single top node, edge_list_table makes it the root; with several, a synthetic root
    forest = draw(st.booleans())
    parents: list[str | None] = [None]
    depths = [1]
    for i in range(1, n):
        eligible = [j for j in range(i) if depths[j] < max_depth]
        tops = [None] if forest or not eligible else []
        j = draw(st.sampled_from([*eligible, *tops]))  # None: another top node
        parents.append(None if j is None else names[j])
        depths.append(1 if j is None else depths[j] + 1)
    # a top node's parent is written as None or "" (both mean "no parent")
    blank = draw(st.sampled_from([None, ""]))
    edges = pl.DataFrame(
        {"child": names, "parent": [blank if p is None else p for p in parents]},
        schema={"child": pl.String, "parent": pl.String},
    )
    table, leaves = edge_list_table(edges, "test")
    rows = {r["code"]: r for r in table.frame.iter_rows(named=True)}
    depth = {c: 0 if r["depth"] == "root" else int(r["depth"][1:]) for c, r in rows.items()}
    d1 = {c: (c if depth[c] == 1 else r.get("d1")) for c, r in rows.items() if depth[c] >= 1}
    if internal_labels is None:
        internal_labels = draw(st.booleans())
    labels = sorted(c for c in rows if depth[c] >= 1) if internal_labels else sorted(leaves)
    levels = evaluated_levels(table.levels, "d1")
    return Tree(
        table, sorted(leaves), labels, depth, d1, levels, table.ancestors(), list(edges.iter_rows())
    )


@st.composite
def cases(draw, internal_labels: bool | None = False, one_per_subtree: bool = False) -> Case:
    """Random gold and predictions over 1-8 documents of a random tree.

    With ``one_per_subtree`` each document's gold (and its predictions) hold at most one label
    per top-level subtree, so no node holds more than one label of a document.
    """
    tree = draw(trees(internal_labels))
    codes = st.sampled_from(tree.labels)
    n_docs = draw(st.integers(1, 8))
    gold, pred = {}, {}
    for i in range(n_docs):
        doc = f"doc{i}"
        g = draw(st.sets(codes, max_size=6))
        keep = draw(st.sets(st.sampled_from(sorted(g)), max_size=len(g))) if g else set()
        mode = draw(st.sampled_from(["normal", "normal", "normal", "absent", "empty-gold"]))
        p = keep | draw(st.sets(codes, max_size=4))
        if one_per_subtree:
            g, p = _one_per_subtree(g, tree), _one_per_subtree(p, tree)
        if mode == "empty-gold":
            g = set()
        if g:
            gold[doc] = g
        if mode != "absent" and p:
            pred[doc] = p
    return Case(tree, gold, pred)


def _one_per_subtree(codes: set[str], tree: Tree) -> set[str]:
    kept: dict[str, str] = {}
    for code in sorted(codes):
        kept.setdefault(tree.d1[code], code)
    return set(kept.values())


# --- helpers ----------------------------------------------------------------------------------


def to_frame(labels: dict[str, set[str]]) -> pl.DataFrame:
    rows = [(doc, code) for doc, codes in labels.items() for code in sorted(codes)]
    return pl.DataFrame(rows, schema=LABEL_SCHEMA, orient="row")


def run(case: Case, gold=None, pred=None) -> tuple[pl.DataFrame, pl.DataFrame]:
    gold = to_frame(case.gold) if gold is None else gold
    pred = to_frame(case.pred) if pred is None else pred
    return count(gold, pred, case.tree.ancestors, case.tree.levels)


def sorted_nodes(nodes: pl.DataFrame) -> pl.DataFrame:
    return nodes.select(*NODE_KEYS, *COUNTS).sort(NODE_KEYS)


def sorted_docs(docs: pl.DataFrame) -> pl.DataFrame:
    return docs.select(*DOC_KEYS, "tp", "fp", "fn").sort(DOC_KEYS)


def sorted_tidy(tidy: pl.DataFrame) -> pl.DataFrame:
    return tidy.sort(TIDY_KEYS)


def shuffled(frame: pl.DataFrame, data) -> pl.DataFrame:
    order = data.draw(st.permutations(range(frame.height)))
    return frame[list(order)] if frame.height else frame


# --- properties -------------------------------------------------------------------------------


@SETTINGS
@given(case=cases(internal_labels=None))
def test_cophe_level_totals_count_labels_at_or_below_level(case):
    """At level dk, CoPHE TP+FN sums to the gold (doc, code) pairs with code depth >= k, and
    TP+FP to the predicted pairs with code depth >= k."""
    nodes, _ = run(case)
    cophe = nodes.filter(pl.col("family") == "cophe")
    for level in case.tree.levels:
        k = int(level[1:])
        at = cophe.filter(pl.col("level") == level)
        tp, fp, fn = (int(at[c].sum()) for c in ("tp", "fp", "fn"))
        n_gold = sum(case.tree.depth[c] >= k for codes in case.gold.values() for c in codes)
        n_pred = sum(case.tree.depth[c] >= k for codes in case.pred.values() for c in codes)
        assert tp + fn == n_gold, (level, tp, fn, n_gold)
        assert tp + fp == n_pred, (level, tp, fp, n_pred)
        assert int(at["n_gold"].sum()) == n_gold
        assert int(at["n_pred"].sum()) == n_pred


@SETTINGS
@given(case=cases(internal_labels=None, one_per_subtree=True))
def test_set_equals_cophe_without_multiple_labels_per_node(case):
    """When no node holds two labels of one document, clipping to 0/1 changes nothing."""
    nodes, docs = run(case)

    def family(frame: pl.DataFrame, name: str, keys: list[str]) -> pl.DataFrame:
        return frame.filter(pl.col("family") == name).drop("family").sort(keys)

    assert_frame_equal(
        family(nodes, "set", ["level", "node"]),
        family(nodes, "cophe", ["level", "node"]),
        check_exact=True,
    )
    assert_frame_equal(
        family(docs, "set", ["doc_id", "level"]),
        family(docs, "cophe", ["doc_id", "level"]),
        check_exact=True,
    )


@SETTINGS
@given(case=cases(internal_labels=None))
def test_flat_micro_matches_sklearn(case):
    docs = case.docs
    labels = sorted({c for d in docs for c in case.gold.get(d, set()) | case.pred.get(d, set())})
    assume(labels)
    nodes, _ = run(case)
    tidy = metrics_table(nodes, "m").filter(
        (pl.col("family") == "flat") & (pl.col("average") == "micro")
    )
    got = {r["metric"]: r["value"] for r in tidy.iter_rows(named=True)}

    # A never-used extra class keeps the matrices two-column at least: scikit-learn reads a
    # single 0/1 column as a binary target and micro-averages over the classes 0 and 1. An
    # all-zero column adds nothing to the micro counts.
    mlb = MultiLabelBinarizer(classes=[*labels, "\0unused"])
    y_true = mlb.fit_transform([sorted(case.gold.get(d, ())) for d in docs])
    y_pred = mlb.transform([sorted(case.pred.get(d, ())) for d in docs])
    p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, average="micro", zero_division=0)
    assert got["precision"] == pytest.approx(p, abs=1e-12)
    assert got["recall"] == pytest.approx(r, abs=1e-12)
    assert got["f1"] == pytest.approx(f, abs=1e-12)
    assert got["tp"] == (y_true & y_pred).sum()
    assert got["fp"] == ((1 - y_true) & y_pred).sum()
    assert got["fn"] == (y_true & (1 - y_pred)).sum()


@SETTINGS_MULTI
@given(case=cases(internal_labels=None), data=st.data())
def test_invariant_to_row_order_and_document_names(case, data):
    nodes, docs = run(case)
    tidy = metrics_table(nodes, "m")

    # new, distinct document names in a random order (their sort order differs from the old)
    old = case.docs
    new_names = data.draw(st.permutations([f"x{i:02d}" for i in range(len(old))]))
    rename = dict(zip(old, new_names, strict=True))
    gold = shuffled(to_frame(case.gold).with_columns(pl.col("doc_id").replace_strict(rename)), data)
    pred = shuffled(to_frame(case.pred).with_columns(pl.col("doc_id").replace_strict(rename)), data)
    ancestors = shuffled(case.tree.ancestors, data)
    nodes2, docs2 = count(gold, pred, ancestors, case.tree.levels)
    tidy2 = metrics_table(nodes2, "m")

    assert_frame_equal(sorted_nodes(nodes2), sorted_nodes(nodes), check_exact=True)
    back = {v: k for k, v in rename.items()}
    assert_frame_equal(
        sorted_docs(docs2.with_columns(pl.col("doc_id").replace_strict(back))),
        sorted_docs(docs),
        check_exact=True,
    )
    assert_frame_equal(sorted_tidy(tidy2), sorted_tidy(tidy), check_exact=True)


@SETTINGS
@given(case=cases(internal_labels=None))
def test_gold_against_itself_is_perfect(case):
    assume(case.gold)
    gold = to_frame(case.gold)
    nodes, docs = run(case, gold=gold, pred=gold)
    assert (nodes["fp"] == 0).all() and (nodes["fn"] == 0).all()
    assert (docs["fp"] == 0).all() and (docs["fn"] == 0).all()
    tidy = metrics_table(nodes, "m").filter(pl.col("metric").is_in(["precision", "recall", "f1"]))
    assert tidy.height
    # every family, level with at least one gold label, and average is present ...
    present = set(tidy.select("family", "level").unique().iter_rows())
    expected = {("flat", "leaf"), ("set", "overall"), ("cophe", "overall")}
    for level in case.tree.levels:
        k = int(level[1:])
        if any(case.tree.depth[c] >= k for codes in case.gold.values() for c in codes):
            expected |= {("set", level), ("cophe", level)}
    assert present == expected
    # ... and perfect
    bad = tidy.filter(pl.col("value") != 1.0)
    assert bad.height == 0, bad


@SETTINGS_MULTI
@given(case=cases(internal_labels=None), data=st.data())
def test_shards_add_up_to_the_whole(case, data):
    n_shards = data.draw(st.integers(2, 3))
    docs_list = case.docs
    shard_of = dict(
        zip(
            docs_list,
            data.draw(
                st.lists(
                    st.integers(0, n_shards - 1), min_size=len(docs_list), max_size=len(docs_list)
                )
            ),
            strict=True,
        )
    )
    nodes, docs = run(case)
    parts_nodes, parts_docs = [], []
    for shard in range(n_shards):
        gold = {d: c for d, c in case.gold.items() if shard_of[d] == shard}
        pred = {d: c for d, c in case.pred.items() if shard_of[d] == shard}
        n, d = run(case, gold=to_frame(gold), pred=to_frame(pred))
        parts_nodes.append(n)
        parts_docs.append(d)

    summed = pl.concat(parts_nodes).group_by(NODE_KEYS).agg(pl.col(COUNTS).sum())
    assert_frame_equal(sorted_nodes(summed), sorted_nodes(nodes), check_exact=True)
    assert_frame_equal(sorted_docs(pl.concat(parts_docs)), sorted_docs(docs), check_exact=True)
    assert_frame_equal(
        sorted_tidy(metrics_table(summed, "m")),
        sorted_tidy(metrics_table(nodes, "m")),
        check_exact=True,
    )


@SETTINGS
@given(case=cases(internal_labels=None))
def test_document_totals_equal_node_totals(case):
    nodes, docs = run(case)
    by_doc = docs.group_by("family", "level").agg(pl.col("tp", "fp", "fn").sum())
    by_node = nodes.group_by("family", "level").agg(pl.col("tp", "fp", "fn").sum())
    assert_frame_equal(
        by_doc.sort("family", "level"), by_node.sort("family", "level"), check_exact=True
    )
    # and every document with a label appears, at the flat level at least
    labelled = {d for d in case.docs if case.gold.get(d) or case.pred.get(d)}
    assert set(docs.filter(pl.col("family") == "flat")["doc_id"]) == labelled


# --- ICD-9 code normalisation -----------------------------------------------------------------

DIGITS = "0123456789"


def _digits(n: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=DIGITS, min_size=n, max_size=n)


def _code(prefix: str, before: int, after: tuple[int, ...]) -> st.SearchStrategy[str]:
    """``prefix`` + ``before`` digits, then a dot and 1 or 2 digits when ``after`` allows it."""
    return st.builds(
        lambda head, tail: f"{prefix}{head}{'.' + tail if tail else ''}",
        _digits(before),
        st.sampled_from(after).flatmap(_digits),
    )


icd9_codes = st.one_of(
    _code("", 3, (2,)),  # DDD.DD
    _code("", 3, (0, 1)),  # DDD, DDD.D
    _code("V", 2, (0, 1, 2)),  # VDD, VDD.D, VDD.DD
    _code("E", 3, (0, 1)),  # EDDD, EDDD.D
    _code("", 2, (2,)),  # DD.DD
    _code("", 2, (0, 1)),  # DD, DD.D
)


@settings(max_examples=100, deadline=None, database=None)
@given(code=icd9_codes)
def test_normalize_idempotent_and_tolerant(code):
    canon = parse_code(code)
    assert canon.code == code  # valid dotted codes are already canonical
    assert parse_code(canon.code) == canon
    assert parse_code(code.lower() + " ") == canon
    with pytest.raises(CodeError, match="does not end with a dot"):
        parse_code(" " + code.lower() + ". ")  # a trailing dot is malformed (issue 34)
