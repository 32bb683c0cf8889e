"""How sure are we: bootstrap intervals and paired randomization tests for every tidy metric.

The sampling unit is the document: a test set is a sample of documents, and every metric of
the tidy table is a function of per-document quantities — count sums (micro), per (document,
node) counts (macro, label-based), per-item values (ICM, example-based, PROP-F, HF). So a
resampled test set is the same tables with a weight per document, and every replicate is
computed from weighted sums, never by recounting labels.

- **Bootstrap** (percentile intervals; for the rows averaged over the labels a test set
  contains, centred on the estimate: :func:`label_set_rows`): replicate r gives document d
  the weight w(seed, d, r) ~ Poisson(1) (the Poisson bootstrap: a multinomial resample of N
  documents is N draws, and for large N each document's count is Poisson(1)). The weight is a
  counter-based hash of the seed, the document id and r (:func:`poisson_weights`), so it
  depends on nothing else: a sharded run gives the same replicates as an unsharded one, every
  model is resampled with the same weights (the intervals of differences are paired), and
  adding a model never changes another's interval.
- **Paired approximate randomization test**: under the null hypothesis that two models are
  exchangeable on each document, permutation r swaps their outputs on the documents with
  s(seed, d, r) = 1 (a fair coin from the same hash, another stream). The p-value is
  (1 + #{r: |Δ*_r| ≥ |Δ|}) / (1 + R), Holm-corrected over all pairs of models per metric.
  ROC-AUC at a level above the exact plan's cap (where a permutation would pool two dense
  matrices) gets the paired bootstrap z-test instead, in the same Holm family
  (:mod:`~hieval.metrics.uncertainty.bootstrap_test`).

How it stays fast (the issue's target: MIMIC-III full, 5 models, 1,000 replicates and 9,999
permutations per pair): every per-node quantity (P, R, F1, reached, the per-label suite values)
is summed over nodes, and sums can be taken over any partition of the nodes. The bootstrap
skips the formulas on nodes with only TPs (value 1 where reached) or only errors (0). The
randomization test precomputes per pair (:func:`pair_plan`): the gold is the same for both
models, so a swap moves only TP and FP; a node no document moves is a constant; a node one
document moves is one of two values, so its sum is linear in the swaps (one product for all
permutations); a node a few documents move is in one of a few (ΔTP, ΔFP) states, each evaluated
once and looked up (a compiled loop, :mod:`hieval.metrics.uncertainty.state_sums`); only the
busiest nodes are evaluated per permutation. Column sums (micro) move by ``s @ (b − a)``.
Results equal the straightforward computation up to the order of floating-point sums
(tests/test_uncertainty_speed.py recounts swapped and repeated test sets from scratch); models
and pairs run on threads, independently of each other.

Ranking and calibration rows (P@K, R@K, R-precision, MAP, Brier, ECE) come from the scores'
per-document sums (:mod:`hieval.metrics.uncertainty.ranking`), ROC-AUC (micro, macro) from
weighted Mann-Whitney statistics over the scores sorted once
(:mod:`hieval.metrics.uncertainty.auc`), with the same weights and swaps
(:func:`block_values`, :func:`ranking_randomization_p`).

What is held fixed: ICM's information content and PROP-F's propensities are computed once from
the whole gold (they set the metrics' scale, as the node weights of a sharded run are); the
label set of LB-* and EB-HAMM follows each replicate's documents (``observed``) or is the
hierarchy's leaves (``hierarchy``). Formulas come from their one place: P/R/F-beta from
:data:`hieval.metrics.count_measures.COUNT_MEASURES`, label- and example-based measures from
the registry's ``per_unit``, ICM and the item measures from :mod:`hieval.metrics.suite`;
ROC-AUC from :func:`hieval.metrics.ranking.mann_whitney`, Brier and ECE from
:func:`hieval.metrics.ranking.calibration_formula`. A bootstrap replicate's sums of float
per-unit values are correctly rounded (:func:`hieval.metrics.arithmetic.exact_weighted_sums`,
:func:`~hieval.metrics.arithmetic.exact_parts`), as the reported means are (``math.fsum``),
so a replicate whose weights are all 1 is the point estimate bit for bit
(tests/test_metric_registry_common.py); the randomization test's permutations sum in numpy's
order (they compare two models; their observed differences are the exact values).

The package's modules: :mod:`~hieval.metrics.uncertainty.weights` (the replicate weights and
swaps), :mod:`~hieval.metrics.uncertainty.units` (per-document tables),
:mod:`~hieval.metrics.uncertainty.replicates` (count-family and item replicates, the
randomization test's pair plans), :mod:`~hieval.metrics.uncertainty.ranking` and
:mod:`~hieval.metrics.uncertainty.auc` (the scores' rows),
:mod:`~hieval.metrics.uncertainty.bootstrap_test` (the paired bootstrap test of ROC-AUC above
the cap), :mod:`~hieval.metrics.uncertainty.tables` (intervals and comparisons) and
:mod:`~hieval.metrics.uncertainty.settings` (the config's settings: light to import, as this
file imports nothing).
"""
