"""Where, how badly and for whom models fail (issue 34): hierarchical error analysis over the
normalised labels and the hierarchy's ancestor table.

- :mod:`~hieval.analysis.tree`: the ancestor table of the codes a run holds (placed codes
  included), with each code's status and the level order;
- :mod:`~hieval.analysis.errors`: every error's distance to the nearest error on the other side
  of its document (``errors.parquet``), over the count engine's integer label keys;
- :mod:`~hieval.analysis.confusions`: the near misses, gold code by predicted code
  (``confusions/{model}.parquet``);
- :mod:`~hieval.analysis.per_code`: counts and P/R/F1 of every code and ancestor node
  (``codes/{model}.parquet``), from the count engine's node rows;
- :mod:`~hieval.analysis.groups`: documents split by the attributes of a ``doc_groups`` table,
  ICM of each group from its own labels.

The tables these functions return are Polars frames; the stage that reads the run's files and
writes them is :mod:`hieval.analysis_stage`.
"""
