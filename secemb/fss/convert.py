"""Conversion of leaf words into pseudorandom ring vectors (``Convert_G`` of SecEmb
Algorithms 4, 5 and 8).

Hazmat layer.  ``Convert_tag(s)`` for a leaf word ``s`` is the first ``d`` ring elements
(little-endian) of the blocks ``MMO_tag(s XOR j) = AES_tag(s XOR j) XOR s XOR j`` for
``j = 0 .. c-1`` (``j`` in the high 64 bits, ``c = ceil(d k / 128)``).  Distinct tags use
independent fixed AES keys (:func:`secemb.fss.prg.fixed_key`), so conversions of the same
leaf for different purposes are independent pseudorandom values.

Work proceeds in chunks of about 1 MiB of AES input held in reused per-thread buffers, and
callers consume each chunk in place, so large outputs are written exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np

from secemb.fss.prg import CHUNK_BLOCKS, aes_for

__all__ = ["ring_dtype", "convert_chunks", "convert"]

_tls = threading.local()


def ring_dtype(ring_bits: int) -> np.dtype:
    """uint32 for a 32-bit ring, uint64 for a 64-bit ring."""
    return np.dtype(np.uint32 if ring_bits == 32 else np.uint64)


def _scratch(blocks: int) -> tuple[np.ndarray, np.ndarray]:
    bufs = getattr(_tls, "bufs", None)
    if bufs is None or bufs[0].shape[0] < blocks:
        bufs = _tls.bufs = (np.empty((blocks, 2), np.uint64), np.empty((blocks, 2), np.uint64))
    return bufs


def convert_chunks(
    words: np.ndarray, width: int, ring_bits: int, tag: str
) -> Iterator[tuple[int, int, np.ndarray]]:
    """Yield ``(lo, hi, values)``: ``values`` (hi - lo, width) is ``Convert_tag`` of
    ``words[lo:hi]``, a view of a scratch buffer valid until the next step.

    Parameters
    ----------
    words: uint64 (N, 2) leaf words.
    width: ``d >= 1`` ring elements per leaf.
    ring_bits: 32 or 64.
    tag: conversion domain.
    """
    dtype = ring_dtype(ring_bits)
    nb = -(-width * ring_bits // 128)
    per_block = 128 // ring_bits
    count = words.shape[0]
    step = max(1, CHUNK_BLOCKS // nb)
    inp, buf = _scratch(min(step, max(count, 1)) * nb)
    aes = aes_for("convert/" + tag)
    ctr = np.arange(nb, dtype=np.uint64)
    for lo in range(0, count, step):
        hi = min(lo + step, count)
        c = hi - lo
        x = inp[: c * nb].reshape(c, nb, 2)
        y = buf[: c * nb].reshape(c, nb, 2)
        x[:, :, 0] = words[lo:hi, 0, None]
        np.bitwise_xor(words[lo:hi, 1, None], ctr[None, :], out=x[:, :, 1])
        aes.encrypt_into(x, y)
        np.bitwise_xor(y, x, out=y)
        yield lo, hi, y.view(dtype).reshape(c, nb * per_block)[:, :width]


def convert(words: np.ndarray, width: int, ring_bits: int, tag: str) -> np.ndarray:
    """``Convert_tag`` of every word: uint64 (..., 2) -> ring (..., width)."""
    flat = words.reshape(-1, 2)
    out = np.empty((flat.shape[0], width), ring_dtype(ring_bits))
    for lo, hi, vals in convert_chunks(flat, width, ring_bits, tag):
        out[lo:hi] = vals
    return out.reshape(words.shape[:-1] + (width,))
