"""``secemb bench popularity``: Figure 2(a) -- the long tail of item popularity.

The paper's Figure 2(a) plots the number of ratings of each ML-10M item against its rank
(most rated first): a few items carry most ratings, most items few -- why a user's rows are
a small, varying subset of the catalogue.  :func:`run` counts the ratings per item of any
dataset :func:`secemb.data.load_dataset` reads: the real ML-10M where its ``ratings.dat``
lies in the data directory (``--data-dir``, ``$SECEMB_DATA_DIR``; GroupLens forbids
redistributing it, so it never ships here), or a synthetic stand-in of its shape
(``synthetic-ml-10m``: Zipf-like popularity by construction, docs/data.md), which the output
names as such.  The paper's caption says "27,278 items", ML-20M's count; Table 7 has 10,681
for ML-10M (``ratings.dat`` rates 10,677 of them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from secemb.data import RatingData

__all__ = ["SHARES", "long_tail", "plot", "run"]

#: head fractions of the catalogue whose share of all ratings the summary reports
SHARES = (0.01, 0.1, 0.2)


def long_tail(data: RatingData) -> dict[str, Any]:
    """Ratings per item of ``data``, most rated first (``counts``, one int per item of the
    catalogue, unrated items as 0), and the tail's summary: the share of all ratings held by
    the top 1 %, 10 % and 20 % of items, the fewest items that hold half of the ratings (as a
    fraction of the catalogue), the median count, and the items with fewer than 10 ratings."""
    counts = np.sort(np.bincount(data.items, minlength=data.num_items))[::-1]
    total = int(counts.sum())
    cum = np.cumsum(counts)
    m = counts.size
    return {
        "dataset": data.name, "items": m, "ratings": total, "max": int(counts[0]) if m else 0,
        "median": float(np.median(counts)) if m else 0.0,
        "head_share": {f"{p:g}": float(cum[max(1, round(p * m)) - 1] / total) for p in SHARES},
        "items_for_half": float((int(np.searchsorted(cum, total / 2)) + 1) / m),
        "items_below_10": int(np.count_nonzero(counts < 10)),
        "counts": counts.tolist(),
    }


def run(dataset: str = "ml-10m", data_dir: str | os.PathLike | None = None, *, seed: int = 0) -> dict[str, Any]:
    """:func:`long_tail` of ``dataset`` (loaded by :func:`secemb.data.load_dataset`; ``seed``
    seeds a synthetic stand-in) with ``stand_in``: whether the counts are synthetic."""
    from secemb.data import load_dataset

    out = long_tail(load_dataset(dataset, data_dir, seed=seed))
    out.update(dataset=dataset, stand_in=dataset.startswith("synthetic"))
    return out


def plot(result: dict[str, Any], path: str | Path) -> None:
    """Figure 2(a): ratings per item against the item's rank, log scale, to a PNG at ``path``;
    the title says when the data is a synthetic stand-in."""
    from secemb.bench.plots import line_panels

    label = result["dataset"] + (" (synthetic stand-in, not the real data)" if result["stand_in"] else "")
    line_panels(path, {label: {"ratings per item": result["counts"]}}, xlabel="item rank (most rated first)",
                ylabel="ratings", title="Figure 2(a): the long tail of item popularity", logy=True)
