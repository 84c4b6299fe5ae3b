"""``secemb bench fss``: DPF key generation and evaluation throughput next to raw AES.

Measured quantities (all in one run, best of ``repeats`` timings each):

* ``aes_blocks_per_s``: AES-128-ECB through ``cryptography`` on a 1 MiB buffer, one core;
* ``keygen_ms``: one user's keys per round -- ``gen_path`` for ``m'`` indices, the retrieval
  conversion (payload width 1) and the aggregation conversion (payload width ``d``);
* ``eval_leaves_per_s``: full-domain path evaluation (tree walk to every leaf), as the
  servers run it;
* ``convert_blocks_per_s``: payload conversion at the leaves (``d = 64``, ``k = 32``)
  summed over keys, as the aggregation stage runs it;
* ``fused_memory``: peak RSS of a fresh process running the server's fused evaluation of 500
  keys over 93,386 items with ``d = 64`` (:mod:`secemb.bench.memory_probe`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from secemb import fss
from secemb.bench.machine import machine_info
from secemb.fss import tree
from secemb.fss.convert import convert_chunks
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG
from secemb.fss.prg import CHUNK_BLOCKS, aes_for

__all__ = ["KEYGEN_SIZES", "run"]

#: (m, m') of the paper's datasets: ML-100K, ML-1M, Yelp
KEYGEN_SIZES = {"ml100k": (1682, 200), "ml1m": (3883, 300), "yelp": (93386, 500)}


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def aes_rate(repeats: int = 5, buffers: int = 64) -> float:
    """Raw AES-128-ECB blocks per second on 1 MiB buffers (one core)."""
    aes = aes_for("bench/raw")
    src = np.frombuffer(np.random.default_rng(0).bytes(16 * CHUNK_BLOCKS), np.uint64).reshape(-1, 2).copy()
    dst = np.empty_like(src)

    def run() -> None:
        for _ in range(buffers):
            aes.encrypt_into(src, dst)

    return buffers * CHUNK_BLOCKS / _best(run, repeats)


def keygen_ms(m: int, m_prime: int, d: int = 64, repeats: int = 20) -> float:
    """Milliseconds for one user's path keys plus retrieval and aggregation conversions."""
    rng = np.random.default_rng(1)
    alphas = rng.choice(m, size=m_prime, replace=False)
    ones = np.ones((m_prime, 1), np.uint32)
    grads = rng.integers(0, 2**32, size=(m_prime, d), dtype=np.uint64).astype(np.uint32)

    def run() -> None:
        _, _, state = fss.gen_path(alphas, m)
        fss.convert_gen(state, ones, tag=RETRIEVAL_TAG)
        fss.convert_gen(state, grads, tag=AGGREGATION_TAG)

    return 1e3 * _best(run, repeats)


def eval_rate(m: int, keys: int, repeats: int = 3) -> float:
    """Full-domain path evaluation, leaves per second."""
    path, _, _ = fss.gen_path(np.random.default_rng(2).integers(0, m, keys), m)

    def run() -> None:
        for _ in tree.leaf_groups(path):
            pass

    return keys * m / _best(run, repeats)


def convert_rate(m: int, keys: int, d: int = 64, repeats: int = 3) -> float:
    """Payload conversion summed over keys (the aggregation stage), AES blocks per second."""
    path, _, _ = fss.gen_path(np.random.default_rng(3).integers(0, m, keys), m)
    leaves = fss.eval_full_path(path, 0)
    acc = np.zeros((m, d), np.uint32)

    def run() -> None:
        for i in range(keys):
            for lo, hi, vals in convert_chunks(leaves[i], d, 32, AGGREGATION_TAG):
                acc[lo:hi] += vals

    blocks = keys * m * (-(-d * 32 // 128))
    return blocks / _best(run, repeats)


def run(quick: bool = False) -> dict[str, object]:
    """Run every measurement; ``quick`` shrinks the workloads (for tests of the harness)."""
    repeats = 2 if quick else 5
    aes = aes_rate(repeats=repeats, buffers=8 if quick else 64)
    sizes = {k: v for k, v in KEYGEN_SIZES.items() if not quick or k == "ml100k"}
    keygen = {name: keygen_ms(m, mp, repeats=3 if quick else 20) for name, (m, mp) in sizes.items()}
    eval_m, eval_keys = (1682, 20) if quick else (93386, 24)
    conv_m, conv_keys = (1682, 4) if quick else (93386, 6)
    leaves = eval_rate(eval_m, eval_keys, repeats=2 if quick else 3)
    blocks = convert_rate(conv_m, conv_keys, repeats=2 if quick else 3)
    leaves_small = eval_rate(1682, 200, repeats=2 if quick else 3)
    memory = None if quick else _memory_probe()
    return {
        "aes_blocks_per_s": aes,
        "keygen_ms": keygen,
        "eval_leaves_per_s": leaves,
        "eval_ratio_to_aes": leaves / aes,
        "eval_domain": eval_m,
        "eval_leaves_per_s_ml100k": leaves_small,
        "eval_ratio_to_aes_ml100k": leaves_small / aes,
        "convert_blocks_per_s": blocks,
        "convert_ratio_to_aes": blocks / aes,
        "convert_domain": conv_m,
        "payload": {"d": 64, "ring_bits": 32},
        "fused_memory": memory,
        "machine": machine_info(),
    }


def _memory_probe() -> dict[str, float]:
    """Peak RSS of a fresh process evaluating 500 keys over 93,386 items, d = 64."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "secemb.bench.memory_probe", "500", "93386", "64"],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout)
