"""Named conventions: the headline metrics as a paper's reference code computes them.

The same predictions get different "macro-F1", "AUC" or "P@8" in different papers because each
paper's code makes its own choices (the label space, the average, the guards against a zero
denominator, strict or inclusive thresholds). A convention is one such named set of choices;
:mod:`hieval.conventions.registry` lists them, and each module computes one paper's metrics
from the normalised inputs, under the names that paper's code gives its outputs, so a user can
diff hieval's ``conventions.parquet`` against that tool's logs. The definitions are written
from the papers' code (tests check them against it); none of that code is copied here.
"""
