"""Table 15 (Appendix K.5) by its formula: the largest m' for which SecEmb's upload is smaller
than secure FedRec's, ``m' < m b d / ((lambda + 2) log2 m + b d)`` (§5.2.1: a row key of about
``(lambda + 2) log2 m`` bits plus its ``b``-bit payload correction per requested row against
``b d`` bits per item of the full table), with the paper's lambda = 128 and b = 32.

A formula, not a measurement: the measured upload of every variant is in ``secemb bench comm``
(docs/results.md); this table reproduces the paper's own arithmetic so that its cells can be
checked.  ``m'`` is the largest integer strictly below the bound.
"""

from __future__ import annotations

import math

from secemb.errors import check_int

__all__ = ["ITEMS", "PAPER", "breakpoint", "table15"]

#: items per dataset (Table 7)
ITEMS = {"ml-100k": 1_682, "ml-1m": 3_883, "ml-10m": 10_681, "ml-25m": 62_423, "yelp": 93_386}
#: Table 15 as printed: dimension -> the m' of each dataset in ITEMS' order
PAPER = {
    64: (1_001, 2_210, 5_775, 31_038, 45_418),
    128: (1_255, 2_817, 6_408, 37_453, 56_031),
    512: (1_550, 3_547, 9_655, 55_418, 82_495),
}


def breakpoint(num_items: int, dim: int, *, security_bits: int = 128, value_bits: int = 32) -> int:
    """The largest integer ``m'`` with ``m' < m b d / ((lambda + 2) log2 m + b d)``."""
    for name, v in (("num_items", num_items), ("dim", dim), ("security_bits", security_bits),
                    ("value_bits", value_bits)):
        check_int(name, v, low=2 if name == "num_items" else 1)
    bound = num_items * value_bits * dim / ((security_bits + 2) * math.log2(num_items) + value_bits * dim)
    return math.ceil(bound) - 1


def table15() -> list[dict[str, int | str]]:
    """Rows ``{"dim", "dataset", "items", "ours", "paper"}`` for every cell of Table 15."""
    return [{"dim": d, "dataset": name, "items": m, "ours": breakpoint(m, d), "paper": PAPER[d][j]}
            for d in PAPER for j, (name, m) in enumerate(ITEMS.items())]
