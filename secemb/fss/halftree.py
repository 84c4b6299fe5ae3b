"""Half-Tree distributed point functions (Guo, Yang, Wang, Zhang, Xie, Liu, Zhao, "Half-Tree:
Halving the Cost of Tree Expansion in COT and DPF", EUROCRYPT 2023), behind the key API of
:mod:`secemb.fss.dpf` (``gen`` / ``eval_points`` / ``eval_full``, batched over keys).

Hazmat layer; an alternative to the default BGI trees, not used by the protocols (see
``docs/security.md``, "Half-Tree DPF", for its assumption).  A node is a 128-bit word whose
bit 0 is its control bit ``t``.  One fixed-key AES call per node: with the circular
correlation robust hash ``H(x) = AES_h(sigma(x)) XOR sigma(x)``,
``sigma(w0, w1) = (w0 XOR w1, w0)`` (Guo, Kolesnikov, Katz, Wang, S&P 2020), the children of
``x`` at level ``i`` are::

    left  = H(x) XOR (t ? CW_i : 0)
    right = left XOR x

The two parties' roots differ by a secret global offset ``Delta`` (bit 0 set), and so do
their nodes on the path to ``alpha`` at every level; off the path they are equal.  Generation
keeps that with ``CW_i = H(s_0) XOR H(s_1) XOR (1 - alpha_i) Delta``.  The leaves are
converted to ring elements as for BGI keys (:func:`secemb.fss.dpf.convert_gen`,
``Convert_tag`` of the leaf word with its own fixed key; on the path the two leaves differ
by ``Delta``, so that conversion must look random at ``s XOR Delta`` -- correlation
robustness, which the ideal-permutation model gives it).  A key is the root word, one 128-bit
correction word a level and the output correction word (BGI's two control-bit corrections a
level are not needed: ``t`` of a node is its bit 0, and ``Delta``'s bit 0 is set).

The scheme-independent parts -- the party check, the full-domain share loop and the point walk
-- are :func:`secemb.fss.dpf.path_of`, :func:`~secemb.fss.dpf.full_shares` and
:func:`~secemb.fss.dpf.point_shares`; this module gives them its own steps (its children, its walk).

Full-domain evaluation runs the same two-phase walk as BGI keys (:mod:`secemb.fss.tree`):
the numpy reference (:func:`secemb.fss.tree.numpy_groups` with this module's level step, AES
through OpenSSL), the compiled kernels
(:func:`secemb.fss.tree.compiled_groups`, 16 parents an AES call) when
:mod:`secemb.fss.kernels` selects them; the two give the same bits.  Keys live in memory
only: there is no byte format for them (the wire carries BGI keys).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from secemb.fss import kernels
from secemb.fss.dpf import (
    GenState,
    _check_alphas,
    full_shares,
    gen_keys,
    point_shares,
)
from secemb.fss.keys import DPFParams, OutputKeys
from secemb.fss.prg import aes_for
from secemb.fss.tree import check_fields, compiled_groups, numpy_groups
from secemb.randomness import RandomBytes, random_words, system_rng

__all__ = ["HASH_KEY", "HalfTreePath", "HalfTreeKeys", "ccr_hash", "gen_path", "gen", "leaf_groups", "eval_full",
           "eval_points"]

#: name of the fixed AES key of the tree's hash (:func:`secemb.fss.prg.fixed_key`)
HASH_KEY = "halftree/ccr"
_ONE = np.uint64(1)


def ccr_hash(x: np.ndarray) -> np.ndarray:
    """``H(x) = AES(sigma(x)) XOR sigma(x)`` for words ``x`` uint64 (..., 2) (a new array)."""
    s = np.empty(x.shape, np.uint64)
    np.bitwise_xor(x[..., 0], x[..., 1], out=s[..., 0])
    s[..., 1] = x[..., 0]
    return aes_for(HASH_KEY).mmo(s)


@dataclass(frozen=True, eq=False)
class HalfTreePath:
    """The path parts of ``K`` Half-Tree keys of one party.

    Attributes
    ----------
    params: domain (payload width 0).
    party: 0 or 1.
    roots: uint64 (K, 2), the root words (bit 0: the control bit).
    cw: uint64 (K, n, 2), one correction word a level.
    """

    params: DPFParams
    party: int
    roots: np.ndarray
    cw: np.ndarray

    def __len__(self) -> int:
        return self.roots.shape[0]

    def __getitem__(self, sl: slice) -> HalfTreePath:
        return HalfTreePath(self.params, self.party, self.roots[sl], self.cw[sl])


@dataclass(frozen=True, eq=False)
class HalfTreeKeys(OutputKeys[HalfTreePath]):
    """``K`` full Half-Tree keys of one party: the path parts and the output correction words
    ``cw_out`` ring (K, d)."""


def gen_path(
    alphas: np.ndarray, domain_size: int, *, _rng: RandomBytes | None = None
) -> tuple[HalfTreePath, HalfTreePath, GenState]:
    """Path parts of ``K`` Half-Tree key pairs and the generator's :class:`GenState` (for
    :func:`secemb.fss.dpf.convert_gen`), as :func:`secemb.fss.dpf.gen_path`.

    Raises
    ------
    InvalidParameters: ``m`` out of range or an alpha outside the domain.
    TypeError: alphas not integers.
    """
    params = DPFParams(domain_size, 0)
    a = _check_alphas(alphas, params.domain_size).astype(np.uint64)
    rng = _rng or system_rng
    k, n = a.shape[0], params.depth
    s = random_words(rng, (2, k, 2), np.uint64)
    delta = s[1].copy()
    delta[:, 0] |= _ONE  # Delta's bit 0 set: the path's two control bits differ
    s[0, :, 0] &= ~_ONE  # t_0 = 0 at the root, t_1 = 1
    s[1] = s[0] ^ delta
    roots = s.copy()
    cw = np.empty((k, n, 2), np.uint64)
    for i in range(n):
        bit = (a >> np.uint64(n - 1 - i)) & _ONE
        h = ccr_hash(s)
        c = h[0] ^ h[1] ^ (delta & (bit - _ONE)[:, None])  # bit - 1: all ones where alpha_i = 0
        cw[:, i] = c
        t_mask = (0 - (s[:, :, 0] & _ONE))[:, :, None]
        s = h ^ (s & (0 - bit)[None, :, None]) ^ (c[None] & t_mask)  # the child towards alpha
    path = [HalfTreePath(params, b, roots[b], cw) for b in (0, 1)]
    return path[0], path[1], GenState(params.domain_size, s[0].copy(), s[1].copy())


def gen(
    alphas: np.ndarray, betas: np.ndarray, domain_size: int, *, ring_bits: int = 32,
    _rng: RandomBytes | None = None,
) -> tuple[HalfTreeKeys, HalfTreeKeys]:
    """``K`` Half-Tree key pairs for ``f_{alpha_i, beta_i}``, as :func:`secemb.fss.dpf.gen`."""
    return gen_keys(gen_path, HalfTreeKeys, alphas, betas, domain_size, ring_bits=ring_bits, _rng=_rng)


def _level(x: np.ndarray, cw: np.ndarray, out: np.ndarray) -> None:
    """Children of parents ``x`` (R, N, 2) with their rows' correction words ``cw`` (R, 1, 2)
    into ``out`` (R, need, 2), ``need`` in {2N - 1, 2N}."""
    need = out.shape[1]
    left = ccr_hash(x)
    left ^= cw & (0 - (x[:, :, 0] & _ONE))[:, :, None]
    out[:, 0::2] = left[:, : -(-need // 2)]
    out[:, 1::2] = (left ^ x)[:, : need // 2]


def leaf_groups(path: HalfTreePath) -> Iterator[tuple[int, int, np.ndarray]]:
    """Every key's leaves, group by group: the groups, rows and leaf order of
    :func:`secemb.fss.tree.leaf_groups` (leaf ``p`` of row ``r`` at flat position
    ``r 2^s + p`` of a (K, padded) walk; a view valid until the next step).  Raises
    ``InvalidParameters`` for roots or corrections that are not those of ``len(path)`` keys of the
    domain's depth (:func:`~secemb.fss.tree.check_fields`)."""
    m, k, n = path.params.domain_size, len(path), path.params.depth
    check_fields(f"{k} Half-Tree keys of depth {n}", {"roots": (path.roots, (k, 2)), "cw": (path.cw, (k, n, 2))})
    if kernels.compiled():
        from secemb.fss._aesni import round_keys

        yield from compiled_groups(path.roots, np.ascontiguousarray(path.cw), m, round_keys(HASH_KEY))
        return
    yield from numpy_groups(path.roots, (path.cw,), m, _level)


def eval_full(keys: HalfTreeKeys, party: int) -> np.ndarray:
    """Every key on the whole domain: ring (K, m, d); ``eval_full(keys0, 0) + eval_full(keys1,
    1)`` is ``beta`` at ``alpha`` and 0 elsewhere (mod ``2^k``)."""
    return full_shares(keys, party, leaf_groups)


def eval_points(keys: HalfTreeKeys, party: int, xs: np.ndarray) -> np.ndarray:
    """Every key at the points ``xs`` (int array (P,)): ring (K, P, d)."""
    return point_shares(keys, party, xs, _children)


def _children(path: HalfTreePath, i: int, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both children of the nodes ``w`` uint64 (K, P, 2) at level ``i`` of ``path``."""
    left = ccr_hash(w) ^ (path.cw[:, i, None, :] & (0 - (w[:, :, 0] & _ONE))[:, :, None])
    return left, left ^ w
