"""The counting engine: labels encoded once as sorted integer keys, then one pass over slices of
documents that sums everything an evaluation needs (flat, set-based and CoPHE counts; ICM, HF
and PROP-F per-item sums).

Modules: :mod:`~hieval.engine.keys` (encoding), :mod:`~hieval.engine.groups` (group-bys over
sorted keys), :mod:`~hieval.engine.counts` and :mod:`~hieval.engine.icm` (what one slice
contributes), :mod:`~hieval.engine.driver` (the one pass: the only place labels are encoded and
counted).
"""
