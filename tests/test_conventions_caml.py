"""The ``caml`` convention against caml-mimic's own ``evaluation.py`` (Mullenbach et al. 2018),
run as it is from ../shared/reference/ (its ``constants``, ``datasets`` and ``tqdm`` imports
given stand-ins); skipped when the reference is absent. Agreement to 1e-9 on every row."""

from __future__ import annotations

import csv
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conventions_fixtures import assert_same, dense, observed, rows_of, zoo

from hieval.conventions.table import model_rows

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "caml_mimic"
EVALUATION = REFERENCE / "evaluation.py"
KS = (5, 8)

pytestmark = pytest.mark.skipif(
    not EVALUATION.is_file(), reason="caml-mimic's evaluation.py is not in ../shared/reference"
)


@pytest.fixture(scope="module")
def caml(tmp_path_factory):
    """caml-mimic's evaluation module, imported with stand-ins for its data-set imports;
    ``constants.MIMIC_3_DIR`` is a temporary folder (results_by_type reads the gold there)."""
    folder = tmp_path_factory.mktemp("mimic3")
    stubs = {
        "constants": types.ModuleType("constants"),
        "datasets": types.ModuleType("datasets"),
        "tqdm": types.ModuleType("tqdm"),
    }
    stubs["constants"].MIMIC_3_DIR = str(folder)
    stubs["tqdm"].tqdm = lambda iterable, *a, **k: iterable
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location("caml_evaluation", EVALUATION)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    module.mimic3_dir = folder
    return module


def ours(gold, decided, scores, labels=None, name=None):
    return rows_of(
        model_rows(
            "m",
            gold=gold,
            decided=decided,
            scores=scores,
            tidy=pl.DataFrame(),
            conventions=["caml"],
            ks=KS,
            label_space=labels,
            label_space_name=name,
        ),
        "caml",
    )


def theirs(caml, gold, decided, scores, labels):
    """all_metrics over the matrices CAML's metrics_from_dicts would build (every gold
    document: hieval's rows; see docs/conventions.md on documents without predictions)."""
    _, y, yhat, raw = dense(gold, decided, scores, labels)
    with np.errstate(all="ignore"):
        return caml.all_metrics(yhat, y, k=list(KS), yhat_raw=raw)


def by_type(caml, gold, decided, tmp_path):
    """f1_diag and f1_proc as caml-mimic's __main__ computes them from its files."""
    mdir = tmp_path / "model"
    mdir.mkdir()
    with open(mdir / "preds_test.psv", "w", newline="") as f:
        writer = csv.writer(f, delimiter="|")
        for doc in sorted(set(gold["doc_id"])):
            writer.writerow([doc, *decided.filter(pl.col("doc_id") == doc)["code"]])
    with open(caml.mimic3_dir / "test_full.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["SUBJECT_ID", "HADM_ID", "TEXT", "LABELS", "length"])
        grouped = gold.drop_nulls().group_by("doc_id", maintain_order=True).agg("code")
        for doc, codes in grouped.iter_rows():
            writer.writerow(["0", doc, "text", ";".join(codes), "1"])
    dp, dg, pp, pg, _, _, hadm_ids, (ind2d, ind2p) = caml.results_by_type("full", str(mdir))
    with np.errstate(all="ignore"):
        return {
            "f1_diag": caml.diag_f1(dp, dg, ind2d, hadm_ids),
            "f1_proc": caml.proc_f1(pp, pg, ind2p, hadm_ids),
        }


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("ties", [False, True])
def test_caml_rows_are_evaluation_py_over_the_observed_codes(caml, seed, ties, tmp_path):
    gold, decided, scores = zoo(seed, ties=ties)
    labels = observed(gold, decided)
    # results_by_type reads CAML's gold file, which has no document without codes
    expected = theirs(caml, gold, decided, scores, labels)
    got = ours(gold, decided, scores)
    split = {k: got.pop(k) for k in ("f1_diag", "f1_proc")}
    assert_same(got, expected)
    with_labels = gold.drop_nulls()
    assert_same(split, by_type(caml, with_labels, decided, tmp_path))


def test_caml_rows_over_a_given_label_space(caml, tmp_path):
    """A label space wider than the observed codes (CAML's 8,922 codes) lowers the macro
    averages: the unseen labels count 0 in P and R; codes outside it are left out."""
    gold, decided, scores = zoo(4)
    labels = sorted({*observed(gold, decided)[3:], "001.0", "002.1", "003.9", "V01.1"})
    expected = theirs(caml, gold, decided, scores, labels)
    got = ours(gold, decided, scores, labels=labels, name="--label-space m=codes.txt")
    for key in ("f1_diag", "f1_proc"):
        got.pop(key)
    assert_same(got, expected)
    assert got["prec_macro"] < ours(gold, decided, scores)["prec_macro"]
