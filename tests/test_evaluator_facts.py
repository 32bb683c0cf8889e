"""The Evaluator's look at a large batch (:func:`hieval.evaluator._facts`): whether any code
has a dot and whether any is not blank are settled by its first rows when they show one, by the
whole column otherwise; checked against the plain Python answer over every code."""

from __future__ import annotations

import polars as pl
import pytest

from hieval import evaluator as module

ROWS = 3 * module._SMALL  # past the small-frame path: the Polars query with its first-rows look


def _frame(head: list[str | None], tail: list[str | None]) -> pl.DataFrame:
    """``head`` repeated over the first rows, then ``tail``'s codes at the end."""
    codes = (head * ROWS)[: ROWS - len(tail)] + tail
    return pl.DataFrame({"doc_id": [f"d{i // 3}" for i in range(ROWS)], "code": codes})


CASES = {
    "dotted at once": _frame(["401.9", "4019"], []),
    "a dot only in the last row": _frame(["4019", None], ["250.00"]),
    "no dot at all": _frame(["4019", "25000"], []),
    "blank first rows, one code at the end": _frame([" ", None, ""], ["4019"]),
    "blank first rows, one dotted code at the end": _frame([None, "  "], ["401.9"]),
    "no code at all": _frame([None, " ", "\t"], []),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("gold", [True, False])
def test_a_large_batch_is_looked_at_as_every_code_says(name, gold):
    frame = CASES[name]
    assert frame.height > module._SMALL
    codes = [c for c in frame["code"].to_list() if c is not None]
    dotted = any("." in c for c in codes)
    coded = any(c.strip() for c in codes)
    docs = list(dict.fromkeys(frame["doc_id"].to_list()))
    layout, found_docs, alone = module._facts(frame, gold_docs=None if gold else docs)
    assert layout[-1] is dotted
    if gold:
        assert found_docs == docs
        assert alone is (not coded)  # a gold without any code goes alone (refused as a file)
    else:
        assert found_docs == []
        assert alone is False  # every predicted document is in the gold
