"""Every Polars join in hieval says whether the order of its rows matters.

Why: Polars' joins keep no row order unless asked (``maintain_order``, default ``"none"``:
"the ordering might differ across Polars versions or even between different runs"). hieval
aligns many join results by position (row *i* is node *i* of a space, document *i* of the
gold): such a join left to the default gives right numbers today and silently wrong ones after
an upgrade. So each join names its order: ``"left"`` where rows are aligned by position,
``"none"`` where they are keyed, grouped or sorted afterwards.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import polars as pl

SOURCE = Path(__file__).resolve().parents[1] / "hieval"
#: Joins that filter the left rows (semi, anti) keep their order by definition.
FILTERING = {"semi", "anti"}


def _unordered_joins() -> list[str]:
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            if node.func.attr != "join" or "on" not in keywords:
                continue  # str.join, thread.join, path joins: no ``on=``
            how = keywords.get("how")
            if isinstance(how, ast.Constant) and how.value in FILTERING:
                continue
            if "maintain_order" not in keywords:
                found.append(f"{path.relative_to(SOURCE.parent)}:{node.lineno}")
    return found


def test_every_join_names_its_row_order():
    assert _unordered_joins() == []


def test_the_scan_finds_a_join_without_an_order(tmp_path, monkeypatch):
    """The check itself: a join without ``maintain_order`` is reported, one with it is not."""
    (tmp_path / "hieval").mkdir()
    (tmp_path / "hieval" / "m.py").write_text(
        "a.join(b, on='k', how='left')\n"
        "a.join(b, on='k', how='left', maintain_order='left')\n"
        "a.join(b, on='k', how='semi')\n"
        "', '.join(names)\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "SOURCE", tmp_path / "hieval")
    assert _unordered_joins() == ["hieval/m.py:1"]


def test_a_left_join_kept_in_order_keeps_the_left_rows_order():
    """What the aligned joins rely on, with keys in an order a hash join would not keep."""
    left = pl.DataFrame({"k": list(range(10_000, 0, -1))})
    right = pl.DataFrame({"k": list(range(1, 10_001, 3)), "v": list(range(0, 3334))})
    joined = left.join(right, on="k", how="left", maintain_order="left")
    assert joined["k"].to_list() == left["k"].to_list()
