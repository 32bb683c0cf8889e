"""hieval: flat, set-based and count-preserving hierarchical (CoPHE) evaluation of ICD-9 coders.

The package holds pure functions; the Snakemake workflow (``Snakefile``, ``workflow/``) and the
``hieval`` command line are thin layers over it, so every number can be reproduced and tested
without Snakemake.
"""

__version__ = "0.1.0"
