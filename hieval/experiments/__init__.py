"""Experiments built on the library: the synthetic demo zoo, the CoPHE paper's Table 1, and the
formal-property (meta-evaluation) trials of Amigó & Delgado."""
