"""Chapter and block names in the report's heatmap labels are cut at a word's end, never
mid-word (issue 35): every ICD-9-CM range title, and words longer than the width."""

from __future__ import annotations

import pytest

from hieval.hierarchy.ranges import icd9_ranges
from hieval.reports.figures import _shorten

WIDTH = 44  # the heatmap's label width (hieval.reports.figures.disagreement_heatmap)


def _whole_words(label: str, title: str) -> bool:
    """``label`` is ``title`` itself, or some of its first words (trailing punctuation
    dropped) and an ellipsis."""
    if label == title:
        return True
    assert label.endswith("…"), label
    words, original = label[:-1].split(" "), title.split(" ")
    head = original[: len(words)]
    return words[:-1] == head[:-1] and head[-1].rstrip(",;:-") == words[-1]


@pytest.mark.parametrize("title", sorted({r.title for r in icd9_ranges().ranges}))
def test_range_titles_are_cut_at_word_ends(title):
    label = _shorten(title, WIDTH)
    assert _whole_words(label, title), (title, label)
    assert len(label) <= WIDTH or " " not in label


def test_a_word_longer_than_the_width_is_kept_whole():
    title = "Pneumonoultramicroscopicsilicovolcanoconiosis-related disorders of the lung"
    assert _shorten(title, 20) == "Pneumonoultramicroscopicsilicovolcanoconiosis-related…"
    assert _shorten("short title", 20) == "short title"
