"""Label files in, clean label files out: everything between a user's file and the engine.

- :mod:`~hieval.inputs.formats`: one reader per input format (long, wide, CAML, dense, MIMIC-IV,
  scores) and the detection of a file's format;
- :mod:`~hieval.inputs.normalize`: validation and normalisation of labels in DuckDB (the general
  path, with row-level messages);
- :mod:`~hieval.inputs.parquet_fast`: the same over dictionary-encoded columns, for the common
  case of a clean Parquet file;
- :mod:`~hieval.inputs.policies`: the unknown-code, unknown-document and coverage verdicts;
- :mod:`~hieval.inputs.record`: what was done to a file (its input record);
- :mod:`~hieval.inputs.options`: how a file is read (options, policies, tuned thresholds).

Nothing is imported here, so that ``hieval.inputs.options`` (needed by config validation) does
not load DuckDB or pyarrow.
"""
