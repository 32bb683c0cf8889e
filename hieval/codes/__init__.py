"""Code syntax, one module per code system: :mod:`~hieval.codes.icd9` (ICD-9-CM, with the
diagnosis/procedure kinds every system shares) and :mod:`~hieval.codes.icd10` (ICD-10-CM/PCS).
The trees themselves are built in :mod:`hieval.hierarchy`."""
