"""Batched two-party distributed point functions (Boyle, Gilboa, Ishai 2016) with SecEmb's
path sharing (SecEmb Algorithms 4-7, with the PathEval erratum fixed: the right branch takes
``s^R, t^R``).

Hazmat layer.  A key pair for ``f_{alpha,beta}: [0, m) -> Z_{2^k}^d`` (``beta`` at
``alpha``, 0 elsewhere) consists of a *path part* (root word and ``n = ceil(log2 m)`` levels
of correction words, independent of ``beta``) and an *output correction word*
``CW^{n+1} in Z_{2^k}^d``.  :func:`gen_path` produces the path parts and a secret
:class:`GenState`; :func:`convert_gen` turns that state and any payload into an output
correction word.  Retrieval (payload 1) and aggregation (payload = a gradient row) share one
path; their conversions use different ``tag`` s, i.e. independent fixed AES keys, so the two
output correction words reveal nothing about each other.

Evaluation mirrors the split: :func:`eval_full_path` walks the whole (pruned) tree once and
returns every leaf word; :func:`convert_eval` maps leaf words and any output correction word
to shares.  :func:`eval_full`, :func:`eval_points` and :func:`eval_full_dot` are the one-shot
forms; all of them batch over keys and tree levels and bound memory by processing keys in
chunks.

Ring: outputs are in ``Z_{2^k}`` with numpy's natural wraparound; for every key
``eval(keys0, 0) + eval(keys1, 1) = f_{alpha,beta}`` modulo ``2^k``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar, overload

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.keys import DPFKeys, DPFParams, OutputKeys, PathKeys, _PathPart
from secemb.fss.linalg import LimbMatrix, ring_matmul
from secemb.fss.convert import _fused_scratch, convert_chunks, convert_eval_into, kept_leaves
from secemb.fss.tree import _LEFT, _RIGHT, expand, leaf_groups, padded_leaves
from secemb.randomness import RandomBytes, random_words, system_rng

__all__ = [
    "GenState",
    "gen_path",
    "convert_gen",
    "gen",
    "gen_keys",
    "eval_full_path",
    "convert_eval",
    "eval_full",
    "eval_points",
    "eval_full_dot",
    "path_of",
    "full_shares",
    "point_shares",
    "DEFAULT_TAG",
]

DEFAULT_TAG = "point"
_Path = TypeVar("_Path")
_Keys = TypeVar("_Keys")
_ONE = np.uint64(1)


class _TreePath(_PathPart, Protocol):
    """A path part of a tree scheme: the :class:`~secemb.fss.keys.OutputKeys` needs and the
    root words uint64 (K, 2)."""

    @property
    def roots(self) -> np.ndarray: ...


_P = TypeVar("_P", bound=_TreePath)
#: leaves a chunk of keys may expand at once (16 bytes each, a few copies live)
LEAF_CHUNK = 1 << 17
#: fewest keys per table product in :func:`eval_full_dot` (large domains: ~32 x m leaves live)
DOT_KEYS = 32


@dataclass(frozen=True, eq=False)
class GenState:
    """The key generator's secret state after :func:`gen_path`, for :func:`convert_gen`.

    Attributes
    ----------
    domain_size: ``m``.
    leaf0, leaf1: uint64 (K, 2); both parties' leaf words at ``alpha`` (bit 0 = control bit).
    """

    domain_size: int
    leaf0: np.ndarray
    leaf1: np.ndarray

    def __len__(self) -> int:
        return self.leaf0.shape[0]


def _check_party(party: int) -> int:
    if party not in (0, 1):
        raise InvalidParameters(f"party must be 0 or 1, got {party!r}")
    return int(party)


def _check_alphas(alphas: np.ndarray, m: int) -> np.ndarray:
    a = np.asarray(alphas)
    if a.ndim != 1:
        raise InvalidParameters(f"alphas must have shape (K,), got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"alphas must be integers, got dtype {a.dtype}")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= m):
        bad = int(a[(a < 0) | (a >= m)][0])
        raise InvalidParameters(f"alpha {bad} is outside the domain [0, {m})")
    return a


def _gen_levels(a: np.ndarray, s: np.ndarray, cw_seed: np.ndarray, cw_tl: np.ndarray, cw_tr: np.ndarray) -> None:
    """The level loop of :func:`gen_path` (numpy reference): both parties' seeds ``s`` uint64
    (2, K, 2) walk down to the leaves at ``a`` (int64 (K,)); writes the correction words
    ``cw_seed`` (K, n, 2), ``cw_tl``, ``cw_tr`` (K, n)."""
    n = cw_seed.shape[1]
    left = np.empty_like(s)
    right = np.empty_like(s)
    for i in range(n):
        bit = (a >> (n - 1 - i)) & 1  # alpha_i, MSB first
        go_right = bit.astype(bool)
        _LEFT.mmo(s, out=left)
        _RIGHT.mmo(s, out=right)
        # seed correction word: XOR of the two parties' "lose" children, bit 0 cleared
        scw = np.where(go_right[:, None], left[0] ^ left[1], right[0] ^ right[1])
        tl = left[0, :, 0] ^ left[1, :, 0]
        tr = right[0, :, 0] ^ right[1, :, 0]
        tcw_l = (tl ^ bit.astype(np.uint64) ^ _ONE) & _ONE
        tcw_r = (tr ^ bit.astype(np.uint64)) & _ONE
        scw[:, 0] &= ~_ONE
        cw_seed[:, i] = scw
        cw_tl[:, i] = tcw_l
        cw_tr[:, i] = tcw_r
        keep_lo = np.where(go_right, right[:, :, 0], left[:, :, 0])
        keep_hi = np.where(go_right, right[:, :, 1], left[:, :, 1])
        mask = 0 - (s[:, :, 0] & _ONE)  # (2, K): all ones where the parent's t is 1
        s[:, :, 0] = keep_lo ^ (mask & (scw[:, 0] | np.where(go_right, tcw_r, tcw_l)))
        s[:, :, 1] = keep_hi ^ (mask & scw[:, 1])


def gen_path(
    alphas: np.ndarray, domain_size: int, *, _rng: RandomBytes | None = None
) -> tuple[PathKeys, PathKeys, GenState]:
    """Generate the path parts of ``K`` key pairs (SecEmb Algorithm 7, batched).

    Parameters
    ----------
    alphas: int array (K,), each in ``[0, domain_size)``.
    domain_size: ``m >= 1``.
    _rng: test-only source of random bytes (default :func:`os.urandom`).

    Returns
    -------
    ``(path0, path1, state)``: each party's :class:`PathKeys` and the secret
    :class:`GenState` needed by :func:`convert_gen`.

    Raises
    ------
    InvalidParameters: ``m`` out of range or an alpha outside the domain.
    TypeError: alphas not integers.
    """
    params = DPFParams(domain_size, 0)
    a = _check_alphas(alphas, params.domain_size)
    rng = _rng or system_rng
    k, n = a.shape[0], params.depth
    s = random_words(rng, (2, k, 2), np.uint64)
    s[:, :, 0] &= ~_ONE
    s[1, :, 0] |= _ONE  # t_b^(0) = b
    roots = s.copy()
    cw_seed = np.empty((k, n, 2), np.uint64)
    cw_tl = np.empty((k, n), np.uint8)
    cw_tr = np.empty((k, n), np.uint8)
    if kernels.compiled():
        from secemb.fss._aesni import round_keys
        from secemb.fss._numba_kernels import gen_levels

        gen_levels(a, s, round_keys(_LEFT.name, _RIGHT.name), cw_seed, cw_tl, cw_tr)
    else:
        _gen_levels(a, s, cw_seed, cw_tl, cw_tr)
    path = [PathKeys(params, b, roots[b], cw_seed, cw_tl, cw_tr) for b in (0, 1)]
    return path[0], path[1], GenState(params.domain_size, s[0].copy(), s[1].copy())


def _check_betas(betas: np.ndarray, k: int, ring_bits: int) -> np.ndarray:
    b = np.asarray(betas)
    dtype = np.dtype(np.uint32 if ring_bits == 32 else np.uint64)
    if b.dtype != dtype:
        raise TypeError(f"betas must have dtype {dtype} for ring_bits={ring_bits}, got {b.dtype}")
    if b.ndim != 2 or b.shape[0] != k or b.shape[1] < 1:
        raise InvalidParameters(f"betas must have shape ({k}, d) with d >= 1, got {b.shape}")
    return b


def convert_gen(state: GenState, betas: np.ndarray, *, ring_bits: int = 32, tag: str = DEFAULT_TAG,
                overwrite_betas: bool = False) -> np.ndarray:
    """Output correction words for payloads ``betas`` (SecEmb Algorithm 5, batched).

    ``CW = (-1)^{t_1} [beta - Convert(s_0) + Convert(s_1)]`` in ``Z_{2^k}^d``.

    Parameters
    ----------
    state: from :func:`gen_path`.
    betas: ring array (K, d), uint32 for ``ring_bits=32``, uint64 for 64.
    tag: conversion domain (use a distinct tag per purpose sharing one path).
    overwrite_betas: write the correction words over ``betas`` and return it, instead of a
        copy, where it is a writable numpy array (one the caller gives up, e.g. one it
        concatenated for the call); the same words either way.

    Returns
    -------
    ring array (K, d).
    """
    if ring_bits not in (32, 64):
        raise InvalidParameters(f"ring_bits must be 32 or 64, got {ring_bits}")
    b = _check_betas(betas, len(state), ring_bits)
    width = b.shape[1]
    # each leaf's conversion subtracted or added chunk by chunk, never held whole (the compiled
    # kernel: both and the sign in one pass; the numpy passes below are its reference)
    cw = b if overwrite_betas and b is betas and b.flags.writeable else b.copy()
    if kernels.compiled():  # one pass: both conversions and the sign, chunk by chunk
        from secemb.fss._aesni import round_keys
        from secemb.fss._numba_kernels import convert_gen as fused

        nb = -(-width * ring_bits // 128)
        blocks0, vals0 = _fused_scratch(nb, cw.dtype)
        blocks1, vals1 = _fused_scratch(nb, cw.dtype)
        fused(np.ascontiguousarray(state.leaf0), np.ascontiguousarray(state.leaf1), nb,
              round_keys("convert/" + tag)[0], cw, blocks0, vals0, blocks1, vals1)
        return cw
    for lo, hi, vals in convert_chunks(state.leaf0, width, ring_bits, tag):
        cw[lo:hi] -= vals
    for lo, hi, vals in convert_chunks(state.leaf1, width, ring_bits, tag):
        cw[lo:hi] += vals
    t1 = (state.leaf1[:, 0] & _ONE).astype(bool)
    np.negative(cw, out=cw, where=t1[:, None])
    return cw


def gen(
    alphas: np.ndarray,
    betas: np.ndarray,
    domain_size: int,
    *,
    ring_bits: int = 32,
    _rng: RandomBytes | None = None,
) -> tuple[DPFKeys, DPFKeys]:
    """Generate ``K`` DPF key pairs for ``f_{alpha_i, beta_i}``.

    Parameters
    ----------
    alphas: int array (K,) in ``[0, domain_size)``.
    betas: ring array (K, d): uint32 for ``ring_bits=32``, uint64 for 64.
    domain_size: ``m >= 1``.
    ring_bits: 32 or 64.

    Returns
    -------
    ``(keys0, keys1)``, one :class:`DPFKeys` batch per party.
    """
    return gen_keys(gen_path, DPFKeys, alphas, betas, domain_size, ring_bits=ring_bits, _rng=_rng)


def gen_keys(
    make_path: Callable[..., tuple[_Path, _Path, GenState]],
    make_keys: Callable[[_Path, np.ndarray, DPFParams], _Keys],
    alphas: np.ndarray,
    betas: np.ndarray,
    domain_size: int,
    *,
    ring_bits: int,
    _rng: RandomBytes | None,
) -> tuple[_Keys, _Keys]:
    """:func:`gen` over the path parts of any scheme: ``make_path(alphas, domain_size, _rng=_rng)``
    makes both parties' path parts and the :class:`GenState` (:func:`gen_path`, or Half-Tree's),
    whose leaves are converted to ``betas`` (:func:`convert_gen`); ``make_keys(path, cw_out,
    params)`` is a party's keys.  Raises as :func:`gen`."""
    if ring_bits not in (32, 64):
        raise InvalidParameters(f"ring_bits must be 32 or 64, got {ring_bits}")
    a = np.asarray(alphas)
    if a.ndim != 1:
        raise InvalidParameters(f"alphas must have shape (K,), got {a.shape}")
    b = _check_betas(betas, a.shape[0], ring_bits)
    p0, p1, state = make_path(a, domain_size, _rng=_rng)
    cw = convert_gen(state, b, ring_bits=ring_bits)
    params = DPFParams(domain_size, b.shape[1], ring_bits)
    return make_keys(p0, cw, params), make_keys(p1, cw.copy(), params)


def _key_step(domain_size: int) -> int:
    """Keys per chunk so that one chunk expands about :data:`LEAF_CHUNK` leaves."""
    return max(1, LEAF_CHUNK // domain_size)


@overload
def path_of(keys: OutputKeys[_P], party: int) -> _P: ...


@overload
def path_of(keys: PathKeys, party: int) -> PathKeys: ...


def path_of(keys: OutputKeys[_P] | PathKeys, party: int) -> _P | PathKeys:
    """The path part of ``keys`` (complete keys of any scheme; a BGI path part is its own).

    Raises
    ------
    InvalidParameters: ``party`` is not 0 or 1, or the keys belong to the other party.
    """
    p = keys.path if isinstance(keys, OutputKeys) else keys
    if _check_party(party) != p.party:
        raise InvalidParameters(f"keys belong to party {p.party}, not {party}")
    return p


def eval_full_path(keys: PathKeys | DPFKeys, party: int) -> np.ndarray:
    """Every leaf word of every key: uint64 (K, m, 2), bit 0 of word 0 the control bit.

    This is the per-leaf state that :func:`convert_eval` turns into shares for any output
    correction word without walking the tree again.  Memory: ``16 K m`` bytes.
    """
    p = path_of(keys, party)
    m = p.params.domain_size
    out = np.empty((len(p), m, 2), np.uint64)
    step = _key_step(m)
    for lo in range(0, len(p), step):
        out[lo : lo + step] = expand(p[lo : lo + step])
    return out


def convert_eval(
    leaves: np.ndarray, cw: np.ndarray, party: int, *, ring_bits: int = 32, tag: str = DEFAULT_TAG
) -> np.ndarray:
    """Shares at the given leaves (SecEmb Algorithm 4, batched).

    ``v = (-1)^b [Convert(s) + t * CW]``.

    Parameters
    ----------
    leaves: uint64 (K, P, 2) leaf words from :func:`eval_full_path` (or a slice of them).
    cw: ring array (K, d), the keys' output correction words.
    party: 0 or 1.

    Returns
    -------
    ring array (K, P, d).
    """
    b = _check_party(party)
    k, p = leaves.shape[:2]
    cw = _check_betas(cw, k, ring_bits)
    out = np.empty((k, p, cw.shape[1]), cw.dtype)
    for i in range(k):
        convert_eval_into(leaves[i], cw[i : i + 1], 0, p, b, tag, out[i])
    return out


def _shares_into(
    groups: Iterator[tuple[int, int, np.ndarray]], params: DPFParams, cw: np.ndarray, party: int, out: np.ndarray
) -> None:
    """Shares of every leaf of a full-domain walk's ``groups`` (:func:`~secemb.fss.tree.leaf_groups`
    of keys with ``params``) for output correction words ``cw`` (K, d) into ``out``, a
    C-contiguous ring array (K, m, d): each group is converted while it is in cache, padding
    leaves dropped (no per-leaf word is stored for all keys)."""
    m, padded = params.domain_size, padded_leaves(params)
    flat = out.reshape(-1, out.shape[-1])
    for r0, r1, leaves in groups:
        a0, z0 = r0 * leaves.shape[1], r1 * leaves.shape[1]
        part = flat[kept_leaves(a0, padded, m) : kept_leaves(z0, padded, m)]
        convert_eval_into(leaves.reshape(-1, 2), cw, a0, padded, party, DEFAULT_TAG, part, valid=m)


def full_shares(
    keys: OutputKeys[_P], party: int, walk: Callable[[_P], Iterator[tuple[int, int, np.ndarray]]]
) -> np.ndarray:
    """:func:`eval_full` for the keys of any tree scheme whose full-domain walk is ``walk`` (its
    ``leaf_groups``: :func:`secemb.fss.tree.leaf_groups` or Half-Tree's).  Raises as
    :func:`path_of`, and with ``InvalidParameters`` for output correction words that are not
    ring ``(K, d)`` of ``keys.params`` (the compiled conversion indexes them by key, unchecked)."""
    p = keys.params
    if keys.cw_out.shape != (len(keys), p.payload_width) or keys.cw_out.dtype != p.dtype:
        raise InvalidParameters(f"output correction words must be {p.dtype} ({len(keys)}, {p.payload_width}), got "
                                f"{keys.cw_out.dtype} {keys.cw_out.shape}")
    out = np.empty((len(keys), p.domain_size, p.payload_width), p.dtype)
    _shares_into(walk(path_of(keys, party)), p, keys.cw_out, party, out)
    return out


def eval_full(keys: DPFKeys, party: int) -> np.ndarray:
    """Evaluate every key on the whole domain: ring array (K, m, d).

    For every key, ``eval_full(keys0, 0) + eval_full(keys1, 1)`` is ``beta`` at ``alpha`` and
    0 elsewhere (mod ``2^k``).  Memory: the output plus one cache-sized group of leaves.
    """
    return full_shares(keys, party, leaf_groups)


def eval_points(keys: DPFKeys, party: int, xs: np.ndarray) -> np.ndarray:
    """Evaluate every key at the points ``xs`` (int array (P,)): ring array (K, P, d)."""
    return point_shares(keys, party, xs, _children)


def _children(path: PathKeys, i: int, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both children of the nodes ``w`` uint64 (K, P, 2) at level ``i`` of BGI keys ``path``."""
    mask = (0 - (w[:, :, 0] & _ONE))[:, :, None]
    cw_l = path.cw_seed[:, i].copy()
    cw_l[:, 0] |= path.cw_tl[:, i].astype(np.uint64)
    cw_r = path.cw_seed[:, i].copy()
    cw_r[:, 0] |= path.cw_tr[:, i].astype(np.uint64)
    return _LEFT.mmo(w) ^ (cw_l[:, None, :] & mask), _RIGHT.mmo(w) ^ (cw_r[:, None, :] & mask)


def point_shares(
    keys: OutputKeys[_P], party: int, xs: np.ndarray,
    children: Callable[[_P, int, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> np.ndarray:
    """:func:`eval_points` for the keys of any tree scheme: each key walks from its root to every
    point of ``xs``, ``children(path, i, w)`` the left and right children of the nodes ``w``
    uint64 (K, P, 2) at level ``i``.  Raises as :func:`path_of` and, for a point outside the
    domain, as :func:`gen_path` for an alpha."""
    path = path_of(keys, party)
    p = keys.params
    x_idx = _check_alphas(xs, p.domain_size)
    n = p.depth
    w = np.ascontiguousarray(np.broadcast_to(path.roots[:, None, :], (len(keys), x_idx.size, 2)))
    for i in range(n):
        bit = ((x_idx >> (n - 1 - i)) & 1).astype(bool)[None, :, None]
        left, right = children(path, i, w)
        w = np.ascontiguousarray(np.where(bit, right, left))
    return convert_eval(w, keys.cw_out, party, ring_bits=p.ring_bits, tag=DEFAULT_TAG)


def eval_full_dot(keys: DPFKeys, party: int, table: np.ndarray) -> np.ndarray:
    """Private-information-retrieval answer: ``sum_j Eval(k, j) * table[j]`` per key.

    Fused: never materializes the (K, m) evaluation.  Keys must have payload width 1.

    Parameters
    ----------
    keys: K keys with ``payload_width == 1``.
    table: ring array (m, D) of the keys' ring dtype.

    Returns
    -------
    ring array (K, D): this party's shares of ``beta * table[alpha]``.
    """
    b = _check_party(party)
    p = keys.params
    if p.payload_width != 1:
        raise InvalidParameters(f"eval_full_dot needs payload width 1, got {p.payload_width}")
    if table.dtype != p.dtype or table.ndim != 2 or table.shape[0] != p.domain_size:
        raise InvalidParameters(
            f"table must be {p.dtype} of shape ({p.domain_size}, D), got {table.dtype} {table.shape}"
        )
    path = path_of(keys, b)
    out = np.empty((len(keys), table.shape[1]), p.dtype)
    # at least DOT_KEYS rows per product: a thinner one rereads the whole table per few keys
    step = max(_key_step(p.domain_size), DOT_KEYS)
    limbs = LimbMatrix(table, p.ring_bits)  # converted once, not per chunk
    e = np.empty((min(step, len(keys)), p.domain_size, 1), p.dtype)
    for lo in range(0, len(keys), step):
        hi = min(lo + step, len(keys))
        _shares_into(leaf_groups(path[lo:hi]), p, keys.cw_out[lo:hi], b, e[: hi - lo])
        out[lo:hi] = ring_matmul(e[: hi - lo, :, 0], limbs, p.ring_bits)
    return out
