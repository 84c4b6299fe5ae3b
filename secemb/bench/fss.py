"""``secemb bench fss``: DPF key generation and evaluation throughput next to raw AES.

Every figure is measured once per kernel backend (:mod:`secemb.fss.kernels`: ``numpy``, the
reference with AES through OpenSSL in large batched calls, and ``numba``, the compiled kernels
with the AES rounds inline) in one process, one core (BLAS limited to one thread: the
measurement re-runs itself in a child process with ``OPENBLAS_NUM_THREADS=1`` and the like when
they are not set).

How each figure is timed (:func:`interleaved`): every workload first runs once untimed (the
warm-up call: kernel compilation, first-touch allocation and caches are not in any figure);
then ``repeats`` rounds each time the raw AES references and the figure's workload one after
the other on this thread's CPU clock (:func:`time.thread_time`: time the scheduler gives other
processes is not counted), and the best time of each is kept.  A figure's shares of the AES
rate divide by the AES rate measured *interleaved with that figure*, so numerator and
denominator come from the same minutes whatever else the machine does.  Every share of the
fastest AES rate is checked against its physical ceiling (:data:`CEILINGS`: a walk leaf costs
at least two AES blocks, so 0.5); a share above it raises :class:`ShareAboveCeiling` -- a
broken measurement, never a row.

The figures:

* ``aes_blocks_per_s``: raw AES-128 blocks per second: ``openssl`` (ECB through ``cryptography``
  on 1 MiB buffers; the reference rate of the first share column) and ``kernel`` (the kernels'
  own AES rounds, MMO ``AES(x) ^ x``, over a 16 KiB buffer that stays in L1, in one call:
  :func:`kernel_aes`); at the top level the fastest of every interleaved measurement of the
  run, per figure the ones interleaved with it;
* ``keygen_ms``: one user's keys per round -- ``gen_path`` for ``m'`` indices, the retrieval
  conversion (payload width 1) and the aggregation conversion (payload width ``d``);
* ``eval_leaves_per_s``: full-domain path evaluation (tree walk to every leaf), as the
  servers run it; two AES blocks per leaf;
* ``convert_blocks_per_s``: payload conversion at the leaves (``d = 64``, ``k = 32``) summed
  over keys into about 1 MiB of rows, as a cuckoo server's evaluation task folds them; ``..._d65`` the same
  at ``d = 65``, the MF aggregate's width (64 gradient columns and the count), 17 blocks a
  leaf -- a width that is not a whole number of 16-block counter runs;
* ``dot_leaves_per_s``: the retrieval answer ``eval_full_dot`` (``d = 64``, ``k = 32``): the
  walk and more, so at most 0.5 of the AES rate too;
* ``eval_full_leaves_per_s``: the public one-shot ``eval_full`` at ``d = 1`` (walk and
  conversion, three blocks a leaf); ``halftree_*`` the same figures for Half-Tree keys
  (:mod:`secemb.fss.halftree`: one block a node, so a walk leaf costs one block and an
  ``eval_full`` leaf two); ``end_to_end_*``: key generation plus both parties' ``eval_full``
  at ``d = 1`` for BGI and Half-Tree keys, and ``halftree_over_bgi``, the ratio of the two
  rates measured in the same process;
* ``walk_share_of_ceiling``: each walk's rate times the AES blocks it must compute a leaf
  (:func:`walk_blocks`: the children the pruned tree needs, BGI; the parents, Half-Tree) over
  the kernels' AES rate timed with it (numba only);
* ``fused_memory``: peak RSS of a fresh process running the server's fused evaluation of 500
  keys over 93,386 items with ``d = 64`` (:mod:`secemb.bench.memory_probe`; its seconds are
  wall time after a warm-up call).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from secemb import fss
from secemb.bench.machine import machine_info
from secemb.errors import SecembError
from secemb.fss import halftree, kernels, tree
from secemb.fss.convert import convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG
from secemb.fss.prg import CHUNK_BLOCKS, aes_for
from secemb.protocols.secemb.server import FOLD_BYTES

__all__ = ["CEILINGS", "KEYGEN_SIZES", "ShareAboveCeiling", "Timed", "check_share", "interleaved", "run",
           "table_rows", "walk_blocks"]

#: (m, m') of the paper's datasets: ML-100K, ML-1M, Yelp
KEYGEN_SIZES = {"ml100k": (1682, 200), "ml1m": (3883, 300), "yelp": (93386, 500)}
#: figure -> its physical ceiling as a share of the fastest AES rate: 1 / (the fewest AES
#: blocks one unit of the figure costs).  A walk leaf costs two blocks (the PRG's two
#: children per node, about one node per leaf); the retrieval answer walks too; conversion
#: is counted in the AES blocks it encrypts.
CEILINGS = {
    "eval_leaves_per_s": 0.5,
    "eval_leaves_per_s_ml100k": 0.5,
    "convert_blocks_per_s": 1.0,
    "convert_blocks_per_s_d65": 1.0,
    "dot_leaves_per_s": 0.5,
    "eval_full_leaves_per_s": 1 / 3,
    "halftree_eval_leaves_per_s": 1.0,
    "halftree_eval_full_leaves_per_s": 0.5,
    "end_to_end_bgi": 1 / 6,
    "end_to_end_halftree": 1 / 4,
}
#: blocks of the kernels' AES reference buffer (:func:`kernel_aes`): 16 KiB, in L1 with its output
L1_BLOCKS = 1024
#: environment of a one-core measurement
_ONE_THREAD = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}
#: how every figure is timed, recorded with the result
TIMING = ("the thread's CPU clock (time.thread_time), best of the repeats; one untimed warm-up call of every "
          "workload first; each share divides by the AES rate timed interleaved with its figure")


class ShareAboveCeiling(SecembError, RuntimeError):
    """A measured share of the AES rate is above what the work it counts allows: the
    measurement is broken (e.g. a numerator and a denominator timed under different load)."""


@dataclass(frozen=True)
class Timed:
    """A workload: each call of ``run`` does ``work`` units (AES blocks, leaves, one user's keys)."""

    work: float
    run: Callable[[], object]


Clock = Callable[[], float]


def _seconds(fn: Callable[[], object], clock: Clock) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def interleaved(figure: Timed, refs: Mapping[str, Timed], repeats: int,
                clock: Clock = time.thread_time) -> tuple[float, dict[str, float]]:
    """``(figure's rate, {reference: its rate})`` in units per second, timed together.

    Every workload (the references, then ``figure``) runs once untimed (warm-up); then each of
    ``repeats`` rounds times every reference and then ``figure``, one after the other, on
    ``clock``; each rate is ``work`` over its workload's best (shortest) time.

    Raises
    ------
    ValueError
        ``repeats`` < 1.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for workload in (*refs.values(), figure):
        workload.run()
    best = dict.fromkeys(refs, float("inf"))
    best_figure = float("inf")
    for _ in range(repeats):
        for name, ref in refs.items():
            best[name] = min(best[name], _seconds(ref.run, clock))
        best_figure = min(best_figure, _seconds(figure.run, clock))
    return figure.work / best_figure, {name: refs[name].work / best[name] for name in refs}


def check_share(figure: str, share: float, ceiling: float) -> None:
    """Raise :class:`ShareAboveCeiling` if ``share`` (of the fastest AES rate) is above ``ceiling``."""
    if share > ceiling:
        raise ShareAboveCeiling(
            f"{figure}: measured {share:.3f} of the fastest AES rate, above its physical ceiling {ceiling}; "
            "the measurement is broken, not the figure fast (run again on a quieter machine)")


def _aes_buffer() -> np.ndarray:
    return np.frombuffer(np.random.default_rng(0).bytes(16 * CHUNK_BLOCKS), np.uint64).reshape(-1, 2).copy()


def openssl_aes(buffers: int) -> Timed:
    """Raw AES-128-ECB (OpenSSL through ``cryptography``) over ``buffers`` 1 MiB buffers, in blocks."""
    aes = aes_for("bench/raw")
    src = _aes_buffer()
    dst = np.empty_like(src)

    def run() -> None:
        for _ in range(buffers):
            aes.encrypt_into(src, dst)

    return Timed(buffers * CHUNK_BLOCKS, run)


def kernel_aes(buffers: int) -> Timed:
    """The compiled kernels' AES-128 (MMO), ``buffers`` times :data:`CHUNK_BLOCKS` blocks (1 MiB) in
    one call over a buffer of :data:`L1_BLOCKS` that stays in L1 with its output, in blocks: the
    rate of the rounds with nothing else, the ceiling of every kernel.  (Until session 38 it ran
    over 1 MiB buffers, through L2, about 10 % slower: the walk's levels, which stay in L1, then
    measured above it, a share above the walk's ceiling.)"""
    from secemb.fss._aesni import round_keys
    from secemb.fss._numba_kernels import mmo_repeat

    rk = round_keys("bench/raw")[0]
    src = _aes_buffer()[:L1_BLOCKS].copy()
    dst = np.empty_like(src)
    reps = buffers * CHUNK_BLOCKS // L1_BLOCKS
    return Timed(buffers * CHUNK_BLOCKS, lambda: mmo_repeat(src, rk, reps, dst))


def keygen(m: int, m_prime: int, d: int = 64) -> Timed:
    """One user's path keys plus retrieval and aggregation conversions (work: 1 user)."""
    rng = np.random.default_rng(1)
    alphas = rng.choice(m, size=m_prime, replace=False)
    ones = np.ones((m_prime, 1), np.uint32)
    grads = rng.integers(0, 2**32, size=(m_prime, d), dtype=np.uint64).astype(np.uint32)

    def run() -> None:
        _, _, state = fss.gen_path(alphas, m)
        fss.convert_gen(state, ones, tag=RETRIEVAL_TAG)
        fss.convert_gen(state, grads, tag=AGGREGATION_TAG)

    return Timed(1, run)


def walk(m: int, keys: int, passes: int = 1, scheme: str = "bgi") -> Timed:
    """Full-domain path evaluation of ``keys`` keys of ``scheme`` (``"bgi"`` or ``"halftree"``),
    ``passes`` times a call (a workload of a few milliseconds is timed too coarsely), in leaves."""
    keys_mod, tree_mod = (fss, tree) if scheme == "bgi" else (halftree, halftree)
    path, _, _ = keys_mod.gen_path(np.random.default_rng(2).integers(0, m, keys), m)

    def run() -> None:
        for _ in range(passes):
            for _ in tree_mod.leaf_groups(path):
                pass

    return Timed(passes * keys * m, run)


def conversion(m: int, keys: int, d: int = 64) -> Timed:
    """Payload conversion summed over keys (the aggregation stage), in AES blocks.

    The sums go into rows of about 1 MiB (``FOLD_BYTES``; leaf ``j`` into row ``j`` modulo
    their number), as a cuckoo server's evaluation task folds into its buckets' rows: a table
    of ``m`` rows would make the figure one of memory bandwidth rather than of the conversion."""
    path, _, _ = fss.gen_path(np.random.default_rng(3).integers(0, m, keys), m)
    leaves = fss.eval_full_path(path, 0)
    acc = np.zeros((min(m, FOLD_BYTES // (4 * d)), d), np.uint32)

    def run() -> None:
        for i in range(keys):
            convert_accumulate(leaves[i], AGGREGATION_TAG, acc, 0)

    return Timed(keys * m * (-(-d * 32 // 128)), run)


def dot(m: int, keys: int, d: int = 64) -> Timed:
    """The retrieval answer ``eval_full_dot`` (payload 1, table (m, d), Z_2^32), in leaves."""
    rng = np.random.default_rng(4)
    keys0, _ = fss.gen(rng.integers(0, m, keys), np.ones((keys, 1), np.uint32), m)
    table = rng.integers(0, 2**32, (m, d), dtype=np.uint64).astype(np.uint32)
    return Timed(keys * m, lambda: fss.eval_full_dot(keys0, 0, table))


def walk_blocks(m: int, scheme: str) -> float:
    """AES blocks a full-domain walk over ``[0, m)`` must compute, per leaf: every needed
    child (BGI: one block each) or every needed parent (Half-Tree: one block for both
    children) of the tree pruned to the leaves below ``m``."""
    n = (m - 1).bit_length()
    if scheme == "bgi":
        return sum(-(-m >> (n - i)) for i in range(1, n + 1)) / m
    return sum(-(-m >> (n - i)) for i in range(n)) / m


def one_shot(m: int, keys: int, scheme: str) -> Timed:
    """The public ``eval_full`` at ``d = 1`` of ``scheme`` (``"bgi"`` or ``"halftree"``), in leaves."""
    mod = fss if scheme == "bgi" else halftree
    rng = np.random.default_rng(5)
    keys0, _ = mod.gen(rng.integers(0, m, keys), np.ones((keys, 1), np.uint32), m)
    return Timed(keys * m, lambda: mod.eval_full(keys0, 0))


def end_to_end(m: int, keys: int, scheme: str) -> Timed:
    """Key generation and both parties' ``eval_full`` at ``d = 1``, in leaves (of one party)."""
    mod = fss if scheme == "bgi" else halftree
    rng = np.random.default_rng(6)
    alphas, ones = rng.integers(0, m, keys), np.ones((keys, 1), np.uint32)

    def run() -> None:
        keys0, keys1 = mod.gen(alphas, ones, m)
        mod.eval_full(keys0, 0)
        mod.eval_full(keys1, 1)

    return Timed(keys * m, run)


def _measure(quick: bool, refs: Mapping[str, Timed], repeats: int, clock: Clock) -> dict[str, Any]:
    """Every figure of one backend (the one :data:`secemb.fss.kernels.BACKEND` selects), each
    interleaved with ``refs``; raises :class:`ShareAboveCeiling` for a share above its ceiling."""
    sizes = {k: v for k, v in KEYGEN_SIZES.items() if not quick or k == "ml100k"}
    big = 1682 if quick else 93386
    keygen_ms = {}
    for name, (m, mp) in sizes.items():
        users_per_s, _ = interleaved(keygen(m, mp), {}, 3 if quick else 20, clock)
        keygen_ms[name] = 1e3 / users_per_s
    workloads = {
        "eval_leaves_per_s": walk(big, 20 if quick else 24),
        "eval_leaves_per_s_ml100k": walk(1682, 200, passes=1 if quick else 8),
        "convert_blocks_per_s": conversion(big, 4 if quick else 6),
        "convert_blocks_per_s_d65": conversion(big, 4 if quick else 6, d=65),
        "dot_leaves_per_s": dot(big, 32 if quick else 64),
        "eval_full_leaves_per_s": one_shot(big, 8 if quick else 24, "bgi"),
        "halftree_eval_leaves_per_s": walk(big, 20 if quick else 24, scheme="halftree"),
        "halftree_eval_full_leaves_per_s": one_shot(big, 8 if quick else 24, "halftree"),
        "end_to_end_bgi": end_to_end(big, 8 if quick else 24, "bgi"),
        "end_to_end_halftree": end_to_end(big, 8 if quick else 24, "halftree"),
    }
    out: dict[str, Any] = {"keygen_ms": keygen_ms}
    aes: dict[str, dict[str, float]] = {}
    share_openssl: dict[str, float] = {}
    share_fastest: dict[str, float] = {}
    for name, workload in workloads.items():
        rate, ref_rates = interleaved(workload, refs, repeats, clock)
        out[name], aes[name] = rate, ref_rates
        share_openssl[name] = rate / ref_rates["openssl"]
        share_fastest[name] = rate / max(ref_rates.values())
        check_share(name, share_fastest[name], CEILINGS[name])
    out.update(aes_blocks_per_s=aes, share_of_openssl_aes=share_openssl, share_of_fastest_aes=share_fastest)
    out["halftree_over_bgi"] = out["end_to_end_halftree"] / out["end_to_end_bgi"]
    out["eval_full_over_walk"] = out["eval_full_leaves_per_s"] / out["eval_leaves_per_s"]
    if "kernel" in refs:
        out["walk_share_of_ceiling"] = {
            scheme: out[fig] * walk_blocks(big, scheme) / aes[fig]["kernel"]
            for scheme, fig in (("bgi", "eval_leaves_per_s"), ("halftree", "halftree_eval_leaves_per_s"))}
    return out


def run(quick: bool = False, repeats: int | None = None, clock: Clock = time.thread_time) -> dict[str, Any]:
    """Run every measurement on one core; ``quick`` shrinks the workloads (for tests of the
    harness); ``repeats`` timings of each (default 3 quick, else 7), the best kept.  Runs in a
    child process unless BLAS is already limited to one thread.

    Raises
    ------
    ShareAboveCeiling
        A figure's share of the fastest AES rate is above its physical ceiling.
    """
    repeats = repeats or (3 if quick else 7)
    if any(os.environ.get(k) != v for k, v in _ONE_THREAD.items()):
        cmd = [sys.executable, "-m", "secemb.bench.fss", str(repeats)] + (["--quick"] if quick else [])
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **_ONE_THREAD})
        if out.returncode == 3:
            raise ShareAboveCeiling(out.stderr.strip())
        if out.returncode != 0:
            raise subprocess.CalledProcessError(out.returncode, cmd, out.stdout, out.stderr)
        return dict(json.loads(out.stdout))
    buffers = 8 if quick else 64
    refs = {"openssl": openssl_aes(buffers)}
    if kernels.available():
        refs["kernel"] = kernel_aes(buffers)
    backends = {}
    before = kernels.BACKEND
    try:
        for name in ("numpy", "numba") if kernels.available() else ("numpy",):
            kernels.BACKEND = name
            backends[name] = _measure(quick, refs, repeats, clock)
    finally:
        kernels.BACKEND = before
    aes = {ref: max(b["aes_blocks_per_s"][fig][ref] for b in backends.values() for fig in CEILINGS) for ref in refs}
    return {
        "aes_blocks_per_s": aes,
        "backends": backends,
        "ceilings": CEILINGS,
        "timing": {"method": TIMING, "repeats": repeats},
        "eval_domain": 1682 if quick else 93386,
        "payload": {"d": 64, "ring_bits": 32},
        "fused_memory": None if quick else _memory_probe(),
        "machine": machine_info(),
    }


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(measure, value, share of the OpenSSL AES rate, share of the fastest AES rate)`` rows
    of a :func:`run` result, every backend's figures side by side; each figure's shares are
    those of the AES rates timed interleaved with it."""
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
            (f"one-shot eval_full (m={m}, d=1)", "eval_full_leaves_per_s", "leaves"),
            (f"Half-Tree full-domain path eval (m={m})", "halftree_eval_leaves_per_s", "leaves"),
            (f"Half-Tree one-shot eval_full (m={m}, d=1)", "halftree_eval_full_leaves_per_s", "leaves"),
            (f"BGI gen + both parties' eval_full (m={m}, d=1)", "end_to_end_bgi", "leaves"),
            (f"Half-Tree gen + both parties' eval_full (m={m}, d=1)", "end_to_end_halftree", "leaves"),
        ):
            rows.append((f"[{name}] {label}", f"{r[key] / 1e6:,.1f} M {unit}/s",
                         f"{r['share_of_openssl_aes'][key]:.3f}", f"{r['share_of_fastest_aes'][key]:.3f}"))
        rows.append((f"[{name}] Half-Tree / BGI end to end (same run)", f"{r['halftree_over_bgi']:.2f}x", "", ""))
        rows.append((f"[{name}] eval_full / walk (same run)", f"{r['eval_full_over_walk']:.2f}", "", ""))
        for scheme, share in r.get("walk_share_of_ceiling", {}).items():
            rows.append((f"[{name}] {scheme} walk / its AES ceiling (kernel AES, blocks it must compute)",
                         f"{share:.3f}", "", ""))
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
    return dict(json.loads(out.stdout))


def _main(argv: list[str]) -> int:
    """The child process of :func:`run`: ``[repeats] [--quick]``; prints the JSON result, or
    the reason on stderr and exit 3 for a share above its ceiling."""
    numbers = [int(a) for a in argv if a.isdigit()]
    try:
        print(json.dumps(run(quick="--quick" in argv, repeats=numbers[0] if numbers else None)))
    except ShareAboveCeiling as exc:
        print(exc, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
