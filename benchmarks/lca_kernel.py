"""LCA-F's compiled kernel alone (:mod:`hieval.engine.lca_compiled`), on real slices.

Run from the repository root:

    python benchmarks/lca_kernel.py [--bench results/bench] [--against REV] [--repeat 5]

The labels go through the normal encode path (:func:`hieval.engine.driver.encode_labels`, then
:func:`hieval.engine.groups.slices`), and :func:`~hieval.engine.lca_compiled.slice_lca_sums` is
timed over every slice, single-threaded, best of ``--repeat``: CPU seconds of this thread and
wall. With ``--against REV`` the kernel of that git revision is loaded from git into a temporary
module and timed alternately in the same process, and its sums must equal the current ones to
the last integer. Defaults: the 100x MIMIC-III benchmark's files (``results/bench/``).

Why: at 100x MIMIC-III LCA-F's per-document sizes are the largest single CPU cost of
``hieval evaluate`` (issue 36); the end-to-end run's spread (+-0.4 s) hides a kernel change.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hieval.engine.driver import encode_labels
from hieval.engine.groups import slices
from hieval.engine.lca import node_depths
from hieval.hierarchy.table import read_level_table

BENCH = Path("results/bench")
KERNEL = "hieval/engine/lca_compiled.py"


def _default_tables(bench: Path) -> tuple[Path | None, Path | None]:
    """The newest built hierarchy in the benchmark's cache (what ``--cache`` gives the CLI)."""
    built = sorted(
        (bench / "cache" / "hierarchy" / "built").glob("*/ancestors.parquet"),
        key=lambda p: p.stat().st_mtime,
    )
    return (built[-1], built[-1].with_name("levels.parquet")) if built else (None, None)


def kernel_at(revision: str, folder: Path):
    """The kernel module as it was at ``revision``, imported from a temporary file."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{KERNEL}"], check=True, capture_output=True, text=True
    ).stdout
    path = folder / "lca_compiled_at_revision.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("lca_compiled_at_revision", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def time_kernels(kernels: dict, parts, depth, repeat: int) -> dict:
    """Per kernel, its best thread CPU and wall seconds of one pass over every slice, and its
    sums; the kernels take turns, so that a slow spell of the machine hits them alike."""
    for kernel in kernels.values():  # compile or load the machine code outside the timing
        for part in parts[:1]:
            kernel.slice_lca_sums(part.doc, part.code, part.pred, space=part.space, depth=depth)
    results = {name: [float("inf"), float("inf"), []] for name in kernels}
    for _ in range(repeat):
        for name, kernel in kernels.items():
            cpu, wall = time.thread_time(), time.perf_counter()
            sums = [
                kernel.slice_lca_sums(p.doc, p.code, p.pred, space=p.space, depth=depth)
                for p in parts
            ]
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            best = results[name]
            best[0], best[1], best[2] = min(best[0], cpu), min(best[1], wall), sums
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, default=BENCH, help="the benchmark's data folder")
    parser.add_argument("--gold", type=Path, help="default: the 100x gold, text ids")
    parser.add_argument("--pred", type=Path, help="default: the 100x predictions, text ids")
    parser.add_argument("--ancestors", type=Path, help="default: the newest in the cache")
    parser.add_argument("--levels", type=Path, help="default: beside --ancestors")
    parser.add_argument("--against", help="a git revision whose kernel to time beside this one")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--slices", type=int, default=0, help="only the first N slices (0: all)")
    args = parser.parse_args()
    stem = args.bench / "docs337200_seed7_stringids_v2"
    args.gold = args.gold or Path(f"{stem}_gold.parquet")
    args.pred = args.pred or Path(f"{stem}_pred.parquet")
    if args.ancestors is None:
        args.ancestors, args.levels = _default_tables(args.bench)
    if args.ancestors is None:
        parser.error(f"no built hierarchy under {args.bench}/cache: pass --bench or --ancestors")
    args.levels = args.levels or args.ancestors.with_name("levels.parquet")

    from hieval.engine import lca_compiled

    table = read_level_table(args.levels)
    labels = encode_labels(args.gold, args.pred, args.ancestors, levels=tuple(table.levels))
    parts = list(slices(labels))
    parts = parts[: args.slices] if args.slices else parts
    for part in parts:  # decoded outside the timing, as the count's threads decode them
        _ = part.doc
    depth = node_depths(labels.space)
    space = labels.space
    entries = sum(
        int((space.anc_ptr[p.code + 1] - space.anc_ptr[p.code]).sum()) for p in parts
    )  # fmt: skip
    n_labels = sum(p.code.size for p in parts)
    print(f"{len(parts)} slices, {n_labels:,} labels, {entries:,} (label, ancestor) entries")

    kernels = {"current": lca_compiled}
    with tempfile.TemporaryDirectory() as folder:
        if args.against:
            kernels = {args.against: kernel_at(args.against, Path(folder))} | kernels
        results = time_kernels(kernels, parts, depth, args.repeat)
    for name, (cpu, wall, _) in results.items():
        print(f"{name:>12}: {cpu:.3f} CPU-s, {wall:.3f} s wall (best of {args.repeat})")
    if args.against:
        old, new = results[args.against][2], results["current"][2]
        same = all(np.array_equal(a, b) for a, b in zip(old, new, strict=True))
        print("sums identical:", same)
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
