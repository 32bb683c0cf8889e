"""The label hierarchy as depth-level tables (CoPHE style) and where it comes from.

``levels`` holds one row per node with its ancestor at every level; ``ancestors`` is the long
``code, level, ancestor`` table the evaluation joins on.
"""

from hieval.hierarchy.table import LevelTable, read_level_table, write_level_table

__all__ = ["LevelTable", "read_level_table", "write_level_table"]
