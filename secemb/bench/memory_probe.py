"""Peak memory of the server's fused evaluation at Yelp size, in a fresh process.

``python -m secemb.bench.memory_probe [K] [m] [d]`` runs ``retrieve_and_prepare`` for ``K``
keys over ``m`` items with payload width ``d`` and prints one JSON object with the peak
resident set size (``ru_maxrss``) before and after, in MiB.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import numpy as np

from secemb import fss
from secemb.fss.fused import RETRIEVAL_TAG, retrieve_and_prepare


def probe(keys: int = 500, m: int = 93386, d: int = 64) -> dict[str, float]:
    """Run the evaluation once; peak RSS in MiB (Linux reports ``ru_maxrss`` in KiB)."""
    rng = np.random.default_rng(0)
    table = rng.integers(0, 2**32, (m, d), dtype=np.uint64).astype(np.uint32)
    p0, _, state = fss.gen_path(rng.choice(m, keys, replace=False), m)
    cw = fss.convert_gen(state, np.ones((keys, 1), np.uint32), tag=RETRIEVAL_TAG)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    retrieve_and_prepare(p0, 0, cw, table, d)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"keys": keys, "m": m, "d": d, "seconds": seconds, "rss_before_mib": before, "peak_rss_mib": peak}


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    print(json.dumps(probe(*args)))
