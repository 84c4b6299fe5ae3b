"""Peak memory of the server's fused evaluation at Yelp size, in a fresh process.

``python -m secemb.bench.memory_probe [K] [m] [d]`` runs ``retrieve_and_prepare`` for ``K``
keys over ``m`` items with payload width ``d`` and prints one JSON object with the peak
resident set size before and after, in MiB.

The peak is this process image's own: on Linux, ``ru_maxrss`` carries over the peak of the
process that started it (a fork of a large parent, e.g. a test runner, counts its pages), so
the probe resets the high-water mark (``/proc/self/clear_refs``) and reads ``VmHWM`` from
``/proc/self/status``; elsewhere it falls back to ``ru_maxrss``.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import numpy as np

from secemb import fss
from secemb.fss.fused import RETRIEVAL_TAG, retrieve_and_prepare


def _reset_peak() -> bool:
    """Reset this process's RSS high-water mark; whether that worked (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _peak_mib(own: bool) -> float:
    """The process's peak RSS in MiB: ``VmHWM`` when the mark was reset, else ``ru_maxrss``
    (KiB on Linux)."""
    if own:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def probe(keys: int = 500, m: int = 93386, d: int = 64) -> dict[str, float]:
    """Run the evaluation once, after a warm-up call on 2 keys over 1,682 items (kernel
    loading and compilation are in neither figure); peak RSS in MiB before and after it."""
    _evaluate(2, 1682, d)  # warm-up
    own = _reset_peak()
    return {"keys": keys, "m": m, "d": d, **_evaluate(keys, m, d, own)}


def _evaluate(keys: int, m: int, d: int, own: bool = False) -> dict[str, float]:
    """One fused evaluation: its wall seconds and the peak RSS in MiB before and after it."""
    rng = np.random.default_rng(0)
    table = rng.integers(0, 2**32, (m, d), dtype=np.uint64).astype(np.uint32)
    p0, _, state = fss.gen_path(rng.choice(m, keys, replace=False), m)
    cw = fss.convert_gen(state, np.ones((keys, 1), np.uint32), tag=RETRIEVAL_TAG)
    before = _peak_mib(own)
    t0 = time.perf_counter()
    retrieve_and_prepare(p0, 0, cw, table, d)
    seconds = time.perf_counter() - t0
    peak = _peak_mib(own)
    return {"seconds": seconds, "rss_before_mib": before, "peak_rss_mib": peak}


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    print(json.dumps(probe(*args)))
