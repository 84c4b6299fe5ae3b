"""``secemb bench fss``: DPF key generation and evaluation throughput next to raw AES.

Every figure is measured once per kernel backend (:mod:`secemb.fss.kernels`: ``numpy``, the
reference with AES through OpenSSL in large batched calls, and ``numba``, the compiled kernels
with the AES rounds inline) in one process, one core (BLAS limited to one thread: the
measurement re-runs itself in a child process with ``OPENBLAS_NUM_THREADS=1`` and the like when
they are not set), best of ``repeats`` timings each:

* ``aes``: raw AES-128 blocks per second on 1 MiB buffers: ``openssl`` (ECB through
  ``cryptography``; the reference rate of every ratio) and ``kernel`` (the kernels' own AES
  rounds, MMO ``AES(x) ^ x``);
* ``keygen_ms``: one user's keys per round -- ``gen_path`` for ``m'`` indices, the retrieval
  conversion (payload width 1) and the aggregation conversion (payload width ``d``);
* ``eval_leaves_per_s``: full-domain path evaluation (tree walk to every leaf), as the
  servers run it; two AES blocks per leaf;
* ``convert_blocks_per_s``: payload conversion at the leaves (``d = 64``, ``k = 32``) summed
  over keys into about 1 MiB of rows, as a cuckoo server's evaluation task folds them; ``..._d65`` the same
  at ``d = 65``, the MF aggregate's width (64 gradient columns and the count), 17 blocks a
  leaf -- a width that is not a whole number of 16-block counter runs;
* ``dot_leaves_per_s``: the retrieval answer ``eval_full_dot`` (``d = 64``, ``k = 32``);
* ``fused_memory``: peak RSS of a fresh process running the server's fused evaluation of 500
  keys over 93,386 items with ``d = 64`` (:mod:`secemb.bench.memory_probe`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from secemb import fss
from secemb.bench.machine import machine_info
from secemb.fss import kernels, tree
from secemb.fss.convert import convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG
from secemb.fss.prg import CHUNK_BLOCKS, aes_for
from secemb.protocols.secemb import FOLD_BYTES

__all__ = ["KEYGEN_SIZES", "run", "table_rows"]

#: (m, m') of the paper's datasets: ML-100K, ML-1M, Yelp
KEYGEN_SIZES = {"ml100k": (1682, 200), "ml1m": (3883, 300), "yelp": (93386, 500)}
#: environment of a one-core measurement
_ONE_THREAD = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}


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


def kernel_aes_rate(repeats: int = 5, buffers: int = 64) -> float:
    """The compiled kernels' AES-128 (MMO) blocks per second on 1 MiB buffers (one core)."""
    from secemb.fss._aesni import round_keys
    from secemb.fss._numba_kernels import convert_blocks

    rk = round_keys("bench/raw")[0]
    src = np.frombuffer(np.random.default_rng(0).bytes(16 * CHUNK_BLOCKS), np.uint64).reshape(-1, 2).copy()
    dst = np.empty((CHUNK_BLOCKS, 1, 2), np.uint64)
    convert_blocks(src, 1, rk, dst)  # compile

    def run() -> None:
        for _ in range(buffers):
            convert_blocks(src, 1, rk, dst)

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
    """Payload conversion summed over keys (the aggregation stage), AES blocks per second.

    The sums go into rows of about 1 MiB (``FOLD_BYTES``; leaf ``j`` into row ``j`` modulo
    their number), as a cuckoo server's evaluation task folds into its buckets' rows: a table
    of ``m`` rows would make the figure one of memory bandwidth rather than of the conversion."""
    path, _, _ = fss.gen_path(np.random.default_rng(3).integers(0, m, keys), m)
    leaves = fss.eval_full_path(path, 0)
    acc = np.zeros((min(m, FOLD_BYTES // (4 * d)), d), np.uint32)

    def run() -> None:
        for i in range(keys):
            convert_accumulate(leaves[i], AGGREGATION_TAG, acc, 0)

    blocks = keys * m * (-(-d * 32 // 128))
    return blocks / _best(run, repeats)


def dot_rate(m: int, keys: int, d: int = 64, repeats: int = 3) -> float:
    """The retrieval answer ``eval_full_dot`` (payload 1, table (m, d), Z_2^32), leaves per
    second."""
    rng = np.random.default_rng(4)
    keys0, _ = fss.gen(rng.integers(0, m, keys), np.ones((keys, 1), np.uint32), m)
    table = rng.integers(0, 2**32, (m, d), dtype=np.uint64).astype(np.uint32)
    return keys * m / _best(lambda: fss.eval_full_dot(keys0, 0, table), repeats)


def _measure(quick: bool) -> dict[str, object]:
    """Every figure of one backend (the one :data:`secemb.fss.kernels.BACKEND` selects)."""
    repeats = 2 if quick else 3
    sizes = {k: v for k, v in KEYGEN_SIZES.items() if not quick or k == "ml100k"}
    big = 1682 if quick else 93386
    # warm-up: compile the kernels (cached on disk after the first run)
    eval_rate(1682, 2, repeats=1)
    convert_rate(1682, 1, repeats=1)
    keygen_ms(1682, 10, repeats=1)
    return {
        "keygen_ms": {name: keygen_ms(m, mp, repeats=3 if quick else 20) for name, (m, mp) in sizes.items()},
        "eval_leaves_per_s": eval_rate(big, 20 if quick else 24, repeats),
        "eval_leaves_per_s_ml100k": eval_rate(1682, 200, repeats),
        "convert_blocks_per_s": convert_rate(big, 4 if quick else 6, repeats=repeats),
        "convert_blocks_per_s_d65": convert_rate(big, 4 if quick else 6, d=65, repeats=repeats),
        "dot_leaves_per_s": dot_rate(big, 32 if quick else 64, repeats=repeats),
    }


def run(quick: bool = False) -> dict[str, object]:
    """Run every measurement on one core; ``quick`` shrinks the workloads (for tests of the
    harness).  Runs in a child process unless BLAS is already limited to one thread."""
    if any(os.environ.get(k) != v for k, v in _ONE_THREAD.items()):
        cmd = [sys.executable, "-m", "secemb.bench.fss"] + (["--quick"] if quick else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, **_ONE_THREAD})
        return json.loads(out.stdout)
    repeats = 2 if quick else 5
    buffers = 8 if quick else 64
    aes = {"openssl": aes_rate(repeats=repeats, buffers=buffers)}
    if kernels.available():
        aes["kernel"] = kernel_aes_rate(repeats=repeats, buffers=buffers)
    backends = {}
    before = kernels.BACKEND
    try:
        for name in ("numpy", "numba") if kernels.available() else ("numpy",):
            kernels.BACKEND = name
            backends[name] = _measure(quick)
    finally:
        kernels.BACKEND = before
    return {
        "aes_blocks_per_s": aes,
        "backends": backends,
        "eval_domain": 1682 if quick else 93386,
        "payload": {"d": 64, "ring_bits": 32},
        "fused_memory": None if quick else _memory_probe(),
        "machine": machine_info(),
    }


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(measure, value, share of the OpenSSL AES rate, share of the fastest AES rate)`` rows
    of a :func:`run` result, every backend's figures side by side."""
    aes = result["aes_blocks_per_s"]
    ref, fastest = aes["openssl"], max(aes.values())
    rows = [("raw AES-128-ECB, OpenSSL (cryptography)", f"{ref / 1e6:,.0f} M blocks/s", "1.000",
             f"{ref / fastest:.3f}")]
    if "kernel" in aes:
        rows.append(("raw AES-128 in the kernels (MMO)", f"{aes['kernel'] / 1e6:,.0f} M blocks/s",
                     f"{aes['kernel'] / ref:.3f}", f"{aes['kernel'] / fastest:.3f}"))
    m = result["eval_domain"]
    for name, r in result["backends"].items():
        for size, ms in r["keygen_ms"].items():
            rows.append((f"[{name}] keygen per user ({size})", f"{ms:.3f} ms", "", ""))
        for label, key, unit in (
            (f"full-domain path eval (m={m})", "eval_leaves_per_s", "leaves"),
            ("full-domain path eval (m=1682, 200 keys)", "eval_leaves_per_s_ml100k", "leaves"),
            (f"payload conversion + sum over keys (m={m}, d=64, k=32)", "convert_blocks_per_s", "blocks"),
            (f"payload conversion + sum over keys (m={m}, d=65, k=32)", "convert_blocks_per_s_d65", "blocks"),
            (f"retrieval answer eval_full_dot (m={m}, d=64, k=32)", "dot_leaves_per_s", "leaves"),
        ):
            v = r[key]
            rows.append((f"[{name}] {label}", f"{v / 1e6:,.1f} M {unit}/s", f"{v / ref:.3f}", f"{v / fastest:.3f}"))
    mem = result.get("fused_memory")
    if mem:
        rows.append((f"fused eval ({kernels.BACKEND}), {mem['keys']} keys x {mem['m']} items, d={mem['d']}",
                     f"{mem['seconds']:.1f} s, peak {mem['peak_rss_mib']:.0f} MiB", "", ""))
    return rows


def _memory_probe() -> dict[str, float]:
    """Peak RSS of a fresh process evaluating 500 keys over 93,386 items, d = 64."""
    out = subprocess.run(
        [sys.executable, "-m", "secemb.bench.memory_probe", "500", "93386", "64"],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout)


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:])))
