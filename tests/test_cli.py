"""The hieval command line: same tables as the workflow, clear errors, honest exit codes."""

from __future__ import annotations

import polars as pl
import pytest

from hieval.cli import build_parser, main


@pytest.fixture
def example(tmp_path):
    """The CoPHE paper's worked example as files."""
    gold = tmp_path / "gold.tsv"
    gold.write_text("doc_id\tcode\nex\t364.11\nex\t364.24\nex\t364.9\n")
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\nex,364.11\nex,364.21\nex,364.3\nex,364.41\n")
    return gold, pred


def micro(tidy: pl.DataFrame, family: str, level: str) -> list[int]:
    rows = tidy.filter(
        (pl.col("family") == family) & (pl.col("level") == level) & (pl.col("average") == "micro")
    )
    values = dict(zip(rows["metric"], rows["value"], strict=True))
    return [int(values[m]) for m in ("tp", "fp", "fn")]


def test_evaluate_writes_every_output(example, tmp_path):
    gold, pred = example
    out = tmp_path / "out"
    code = main(
        [
            "evaluate",
            "--gold",
            str(gold),
            "--pred",
            f"paper={pred}",
            "--out",
            str(out),
            "--max-level",
            "e0",
        ]
    )
    assert code == 0
    tidy = pl.read_parquet(out / "metrics.parquet")
    assert tidy.columns == ["model", "family", "level", "average", "metric", "value"]
    # The paper's Table 1 (Falis et al., 2021), hand-checked: leaf 1/3/2, CoPHE overall 6/5/2.
    assert micro(tidy, "flat", "leaf") == [1, 3, 2]
    assert micro(tidy, "set", "overall") == [4, 4, 2]
    assert micro(tidy, "cophe", "e0") == [3, 1, 0]
    assert micro(tidy, "cophe", "overall") == [6, 5, 2]
    for name in ("metrics.csv", "summary.csv", "summary.md", "nodes/paper.csv"):
        assert (out / name).exists(), name
    nodes = pl.read_csv(out / "nodes/paper.csv", schema_overrides={"node": pl.String})
    # Every node disagrees by at most one leaf; ties sort by level (deepest first), then node.
    top = nodes.row(0, named=True)
    assert (top["level"], top["node"], top["over"], top["under"]) == ("e2", "364.21", 1, 0)
    e0 = nodes.filter(pl.col("node") == "364").row(0, named=True)
    assert (e0["n_gold"], e0["n_pred"], e0["tp"], e0["over"], e0["under"]) == (3, 4, 3, 1, 0)


def test_missing_gold_exits_non_zero_without_outputs(example, tmp_path, capsys):
    _, pred = example
    out = tmp_path / "out"
    code = main(
        ["evaluate", "--gold", str(tmp_path / "nope.csv"), "--pred", f"m={pred}", "--out", str(out)]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "nope.csv does not exist" in err
    assert "Traceback" not in err
    assert not (out / "metrics.parquet").exists()


def test_duplicate_model_names_are_refused(example, tmp_path, capsys):
    gold, pred = example
    code = main(
        [
            "evaluate",
            "--gold",
            str(gold),
            "--pred",
            f"m={pred}",
            "--pred",
            f"m={pred}",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 1
    assert "given more than once: m" in capsys.readouterr().err


def test_bad_max_level_names_the_levels(example, tmp_path, capsys):
    gold, pred = example
    code = main(
        [
            "evaluate",
            "--gold",
            str(gold),
            "--pred",
            f"m={pred}",
            "--out",
            str(tmp_path / "out"),
            "--max-level",
            "block",
        ]
    )
    assert code == 1
    assert "'block' is not a level" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threshold", "1.5"], "threshold must be in [0, 1]"),
        (["--top-k", "0"], "top-k must be at least 1"),
        (["--pred", "no-equals-sign"], "expected NAME=PATH"),
    ],
)
def test_bad_arguments(example, tmp_path, capsys, args, message):
    gold, pred = example
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "evaluate",
                "--gold",
                str(gold),
                "--pred",
                f"m={pred}",
                "--out",
                str(tmp_path / "o"),
                *args,
            ]
        )
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_help_documents_every_option():
    text = build_parser()._subparsers._group_actions[0].choices["evaluate"].format_help()
    for option in (
        "--gold",
        "--pred",
        "--out",
        "--hierarchy",
        "--max-level",
        "--unknown-codes",
        "--unknown-docs",
        "--threshold",
        "--top-k",
        "--code-format",
        "--code-type",
    ):
        assert option in text


def test_hierarchy_command_with_own_tree(tmp_path):
    tree = tmp_path / "tree.csv"
    tree.write_text("child,parent\nA,\nA1,A\nA1a,A1\nB,\n")
    assert main(["hierarchy", "--hierarchy", str(tree), "--out", str(tmp_path / "h")]) == 0
    ancestors = pl.read_parquet(tmp_path / "h/ancestors.parquet")
    rows = set(ancestors.filter(pl.col("code") == "A1a").select("level", "ancestor").rows())
    assert rows == {("d3", "A1a"), ("d2", "A1"), ("d1", "A"), ("root", "root")}
