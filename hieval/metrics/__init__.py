"""Metrics from the engine's additive tables: the registry (what each metric is), the
precision/recall/F1 families, and ICM with the metrics it is compared with."""
