"""The words for a score cell the inputs refuse (empty, or not a finite number), in one place
for the long path (:func:`hieval.inputs.normalize._raise_bad_row`) and the blocks that refuse
the same cell without making the file long (:mod:`hieval.inputs.dense_wide`).

Why: a wide table with an empty cell is refused either way, and the user must read the same
line whichever way found it; two copies of the sentence would drift.
"""

from __future__ import annotations

from hieval.errors import InputError, preview_value


def bad_score(name: str, where: str, *, score: str | None, doc: str, code: str) -> InputError:
    """The refusal of the score ``score`` (its text as read; None or blank: an empty cell) of
    document ``doc`` and code ``code``, at ``where`` (the file and its row or line) of the
    file called ``name``."""
    label = f"document {preview_value(doc)}, code {preview_value(code)}"
    if score is None or not score.strip():
        return InputError(
            f"{name}: {where}: empty score ({label}); every code listed "
            "needs a score: fill it in, or leave the code out"
        )
    return InputError(
        f"{name}: {where}: score {preview_value(score)} is not a finite number "
        f"({label}); fix or remove it"
    )
