"""A dense block's calibration sums per document in one compiled pass: what
:func:`hieval.metrics.ranking.calibration_sums` adds per document, in the order it adds them.

Why: with numpy the exact per-document order (today's ``np.bincount`` over sorted keys: a
document's scored codes in code order) costs a permuted float64 copy of the block, an index
array per cell and three passes of ``bincount`` (5 CPU seconds at 157M cells). The compiled
loop reads each cell once, in code order, and does today's float64 arithmetic in today's
order (``score - truth``, its square added to the document's sum; the bin ``int(score * bins)``
capped at the last), so every per-document float is today's to the last bit. An unscored
cell (``-inf``: a long file's pair it does not score, :mod:`hieval.inputs.dense_long`) adds
nothing there, as the long path has no score for it: it is counted as a scored cell is not,
and as a missed gold pair where it is one (score 0, truth 1, added after the scored cells).
"""

from __future__ import annotations

import numpy as np

from hieval.compiled import compiled


def _block_sums_py(  # noqa: PLR0913 (the block, its gold cells, and the sums it adds to)
    block, by_code, gold_rows, gold_places, bins, brier, score_sum, true_sum, scored, missed
):
    """Add ``block``'s cells (rows x columns, read in the column order ``by_code``) to the
    sums of its rows; ``gold_rows``/``gold_places`` (sorted) are the gold cells, as the row
    and the place in code order. Per row, ``scored`` counts its scored cells and ``missed``
    its unscored (``-inf``) gold cells. False, with the sums unfinished, when a score lies
    outside [0, 1] (calibration is then not reported)."""
    rows, width = block.shape
    g = 0
    n_gold = len(gold_rows)
    for r in range(rows):
        for p in range(width):
            score = np.float64(block[r, by_code[p]])
            truth = 0.0
            if g < n_gold and gold_rows[g] == r and gold_places[g] == p:
                truth = 1.0
                g += 1
            if score == -np.inf:  # unscored: no score to add
                missed[r] += truth
                continue
            if score < 0.0 or score > 1.0:
                return False
            scored[r] += 1.0
            error = score - truth
            brier[r] += error * error
            b = int(score * bins)
            if b > bins - 1:
                b = bins - 1
            score_sum[r, b] += score
            if truth == 1.0:
                true_sum[r, b] += 1.0
    return True


block_sums = compiled(_block_sums_py)
