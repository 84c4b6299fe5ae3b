"""Verifiable path keys: the servers check that a DPF key is a point function (issue 34).

Hazmat layer.  A server walks every key of a user to all its leaves anyway
(:func:`secemb.fss.fused.retrieve_and_prepare`); this module turns those leaf words into one
256-bit check value per key, at two fixed-key AES blocks per leaf and no second walk.  For an
honest pair of keys the two servers' check values are **equal**; for a pair whose leaf states
differ at two or more points they differ, except with negligible probability.  The servers
compare digests of them (:mod:`secemb.protocols.secemb`); docs/security.md, "A malicious
device: verified uploads", gives the argument.  The construction follows the verifiable DPF of
de Castro and Polychroniadou (EUROCRYPT 2022): a per-leaf hash, a correction word the key
generator adds so that the two parties' hashes agree at the special point, and a comparison.

Per key, with leaf word ``w_b(x)`` (127 seed bits and the control bit ``t_b(x)`` in bit 0) of
party ``b`` at padded domain position ``x``:

* ``pi_b(x) = F(w_b(x)) XOR t_b(x) (cs XOR H(x))``, where ``F = Convert_leaf`` (four 64-bit
  words, two MMO blocks) and ``H(x) = Convert_position((x, 0))`` is a public pseudorandom
  offset per position;
* ``cs = F(w_0(alpha)) XOR F(w_1(alpha)) XOR H(alpha)`` is the key's check correction word
  (:func:`corrections`), sent by the device with the key;
* the key's check value is ``sum_x r(x) * pi_b(x)`` word-wise mod ``2^64``
  (:class:`LeafCheck`), with challenge words ``r`` (``(mp, 4)`` per user) expanded from a
  seed the servers derive from the user's committed key bytes (:func:`challenges`).

Off the special point an honest pair has ``w_0(x) = w_1(x)``, hence ``pi_0(x) = pi_1(x)``; at
``alpha`` the control bits differ and ``cs`` makes the two equal.  The numpy reference computes
``F`` and ``H`` through :func:`secemb.fss.convert.convert` and accumulates in numpy; with the
compiled kernels one numba loop computes ``F`` on AES-NI and accumulates, each leaf's four words
in vector registers (:func:`secemb.fss._check_kernels.check_accumulate`), equal bit for bit
(``tests/protocols/test_malicious_device.py``, ``tests/fss/test_s28_check_kernel.py``).
"""

from __future__ import annotations

from functools import cache
from types import ModuleType

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.convert import convert

__all__ = ["CHECK_WORDS", "CHECK_BYTES", "LeafCheck", "challenges", "corrections", "leaf_values",
           "position_offsets"]

#: 64-bit words of a check value (256 bits)
CHECK_WORDS = 4
#: bytes of a check correction word or a check value
CHECK_BYTES = 8 * CHECK_WORDS
LEAF_TAG = "secemb/verify-leaf"
POSITION_TAG = "secemb/verify-position"
CHALLENGE_TAG = "secemb/verify-challenge"


def leaf_values(words: np.ndarray) -> np.ndarray:
    """``F(w) = Convert_leaf(w)``: uint64 (..., 2) leaf words -> uint64 (..., 4)."""
    return convert(words, CHECK_WORDS, 64, LEAF_TAG)


@cache
def position_offsets(size: int) -> np.ndarray:
    """``H(x)`` for ``x < size``: uint64 (size, 4), read-only (cached per size)."""
    if size < 1:
        raise InvalidParameters(f"size must be >= 1, got {size}")
    words = np.zeros((size, 2), np.uint64)
    words[:, 0] = np.arange(size, dtype=np.uint64)
    out = convert(words, CHECK_WORDS, 64, POSITION_TAG)
    out.flags.writeable = False
    return out


def corrections(alphas: np.ndarray, leaf0: np.ndarray, leaf1: np.ndarray) -> np.ndarray:
    """The key generator's check correction words ``cs``: uint64 (K, 4) for points ``alphas``
    int (K,) and both parties' leaf words at them, uint64 (K, 2) each."""
    alphas = np.asarray(alphas, np.int64)
    if leaf0.shape != (len(alphas), 2) or leaf1.shape != leaf0.shape:
        raise InvalidParameters(f"leaf words must be (K, 2) for K = {len(alphas)} points")
    if len(alphas) == 0:
        return np.zeros((0, CHECK_WORDS), np.uint64)
    if alphas.min() < 0:
        raise InvalidParameters("points must be >= 0")
    return leaf_values(leaf0) ^ leaf_values(leaf1) ^ position_offsets(int(alphas.max()) + 1)[alphas]


def challenges(seeds: np.ndarray, size: int) -> np.ndarray:
    """Challenge words ``r``: uint64 (U, size, 4) expanded from per-user 128-bit seeds uint64
    (U, 2) (``Convert_challenge``)."""
    if seeds.ndim != 2 or seeds.shape[1] != 2 or seeds.dtype != np.uint64:
        raise InvalidParameters(f"seeds must be uint64 (U, 2), got {seeds.dtype} {seeds.shape}")
    return convert(seeds, size * CHECK_WORDS, 64, CHALLENGE_TAG).reshape(len(seeds), size, CHECK_WORDS)


@cache
def _compiled_check() -> tuple[ModuleType, np.ndarray]:
    """The compiled check loop's module (:mod:`secemb.fss._check_kernels`) and the round keys of
    ``F``'s fixed key: imported and looked up once a process, not by two import statements at
    every leaf group.  :meth:`LeafCheck.add` takes the loop from the module at each call, so a
    timing wrapper installed as the module's attribute (``bench overhead``'s kernel clock) sees
    every call."""
    from secemb.fss import _check_kernels
    from secemb.fss._aesni import round_keys

    return _check_kernels, round_keys("convert/" + LEAF_TAG)[0]


class LeafCheck:
    """The check values of ``K`` keys, accumulated over the leaf groups of one walk.

    Parameters
    ----------
    cs: uint64 (K, 4), the keys' check correction words.
    r: uint64 (U, mp, 4), the challenge words of ``U`` users; key ``k`` belongs to user
        ``k // per_user`` and ``mp`` is the walk's padded domain.
    per_user: keys per user (``K = U per_user``).

    :meth:`add` takes the groups of :func:`secemb.fss.tree.leaf_groups` (row ``key F + f``
    holds positions ``[f 2^s, (f + 1) 2^s)``); :attr:`values` is uint64 (K, 4).
    """

    def __init__(self, cs: np.ndarray, r: np.ndarray, per_user: int) -> None:
        if cs.ndim != 2 or cs.shape[1] != CHECK_WORDS or cs.dtype != np.uint64:
            raise InvalidParameters(f"cs must be uint64 (K, {CHECK_WORDS}), got {cs.dtype} {cs.shape}")
        if r.ndim != 3 or r.shape[2] != CHECK_WORDS or r.dtype != np.uint64 or per_user < 1 or (
                r.shape[0] * per_user != len(cs)):
            raise InvalidParameters(f"r must be uint64 (K / per_user, mp, {CHECK_WORDS}), got {r.dtype} {r.shape} "
                                    f"for {len(cs)} keys and per_user={per_user}")
        # C-contiguous: the compiled kernel reads them by address
        self.cs, self.r, self.per_user = np.ascontiguousarray(cs), np.ascontiguousarray(r), per_user
        self.values = np.zeros((len(cs), CHECK_WORDS), np.uint64)

    def add(self, r0: int, r1: int, leaves: np.ndarray) -> None:
        """Fold in rows ``[r0, r1)`` of the walk, leaf words uint64 (r1 - r0, 2^s, 2).

        Raises
        ------
        InvalidParameters: ``leaves`` of another dtype than native-order uint64 (the compiled
            kernel reads 16 bytes a leaf by address) or of another shape, or rows that are not rows
            of these keys' walk (the kernel indexes the check words by them, unchecked).
        """
        mp = self.r.shape[1]
        width = leaves.shape[1] if leaves.ndim == 3 else 0
        frontier = mp // width if width else 0
        if leaves.dtype != np.uint64 or leaves.shape != (r1 - r0, width, 2) or not (
                frontier and 0 <= r0 <= r1 <= len(self.cs) * frontier):
            raise InvalidParameters(f"leaves of rows [{r0}, {r1}) of a walk of {len(self.cs)} keys over {mp} "
                                    f"positions must be uint64 ({r1 - r0}, 2^s <= {mp}, 2), got {leaves.dtype} "
                                    f"{leaves.shape}")
        if kernels.compiled():
            loop, rk = _compiled_check()
            loop.check_accumulate(np.ascontiguousarray(leaves), r0, frontier, self.per_user, rk, self.cs,
                                  position_offsets(mp), self.r, self.values)
            return
        rows = np.arange(r0, r1)
        key = rows // frontier
        pos = (rows % frontier)[:, None] * width + np.arange(width)  # (g, width)
        vals = leaf_values(leaves)  # (g, width, 4)
        t = (leaves[..., 0] & np.uint64(1)).astype(bool)
        corr = self.cs[key][:, None, :] ^ position_offsets(mp)[pos]
        vals ^= np.where(t[..., None], corr, np.uint64(0))
        vals *= self.r[(key // self.per_user)[:, None], pos]
        np.add.at(self.values, key, vals.sum(axis=1, dtype=np.uint64))
