"""Host side of the GPU evaluation: launches the Triton kernels of :mod:`secemb.fss.gpu._triton`
over torch tensors on the device and returns what the CPU path returns, bit for bit.

Hazmat layer.  :func:`evaluate` is the GPU form of the SecEmb server's per-batch evaluation
(``secemb.fss.tasks.evaluate_task``, built on :func:`secemb.fss.fused.retrieve_and_prepare`
and :func:`~secemb.fss.fused.retrieve_and_prepare_buckets`): for ``K`` keys of one party

1. the tree walk, breadth-first, one launch per level over every node of a chunk of keys that
   has a leaf ``< m`` (:func:`expand`);
2. at the leaves, the retrieval shares and control bits (one launch), the retrieval inner
   product with the table or with each key's bucket (one launch), and the aggregation
   conversion summed over keys onto items or buckets (one launch, ``ceil(w k / 128)``
   conversion blocks per leaf, no atomics: each program owns its output rows);
3. with the sketch check (verified uploads, :class:`~secemb.fss.sketch.SketchCheck`), the
   walk goes on over the padded domain (:func:`~secemb.fss.tree.padded_leaves`, as the CPU's
   does) and one more launch folds every leaf into its key's sketch values, each device's
   leaves under its own AES key (:func:`leaf_sketches`): no second walk on the CPU.

At close, the aggregation's control-bit part ``sum_i t[i, j] CW[i]`` is a ring product on the
device too (:func:`bits_product`, :func:`packed_bits_product`).

Keys are processed in chunks of whole users so that a chunk's leaves stay within
:data:`LEAF_BUDGET`; only answers, packed control bits and the (m, w) conversion sum come back
to the host.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import torch

from secemb.errors import InvalidParameters
from secemb.fss import field, gpu
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG
from secemb.fss.gpu import _triton as kern
from secemb.fss.gpu.tables import TABLES, expand_keys, round_keys
from secemb.fss.keys import DPFKeys, PathKeys
from secemb.fss.sketch import SKETCH_WORDS, Expanded, SketchCheck
from secemb.fss.tree import check_path, padded_leaves

__all__ = ["LEAF_BUDGET", "upload_table", "mmo", "expand", "retrieval_shares", "convert_sum", "sketch_round_keys",
           "leaf_sketches",
           "ring_matmul", "bits_product", "packed_bits_product", "evaluate"]

#: leaves of one chunk of keys (16 bytes each, plus the level above: 768 MiB on the device)
LEAF_BUDGET = 1 << 25
#: programs a ring product aims for (a few per SM of a large GPU), and its shortest slice
MATMUL_PROGRAMS = 2048
MATMUL_MIN_SLICE = 1024
#: programs the sketch kernel aims for (it splits each key's positions into slices)
SKETCH_PROGRAMS = 4096
_SIGNED = {np.dtype(np.uint32): np.int32, np.dtype(np.uint64): np.int64}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _block() -> int:
    """Elements per program: 256 on a GPU; large under the interpreter (one numpy op per
    Triton op per program, so fewer programs run faster)."""
    return 4096 if gpu.interpreting() else 256


@cache
def _tables(dev: torch.device) -> torch.Tensor:
    return torch.from_numpy(TABLES.view(np.int32).copy()).to(dev)


@cache
def _rk(name: str, dev: torch.device) -> torch.Tensor:
    return torch.from_numpy(round_keys(name).view(np.int32).copy()).to(dev)


def _to_device(a: np.ndarray, dev: torch.device) -> torch.Tensor:
    """A uint32/uint64 array as an int32/int64 tensor of the same bits on ``dev``."""
    return torch.from_numpy(np.ascontiguousarray(a).view(_SIGNED[a.dtype])).to(dev)


def _to_host(t: torch.Tensor, dtype: np.dtype) -> np.ndarray:
    return t.cpu().numpy().view(dtype)


def upload_table(table: np.ndarray, gather_index: np.ndarray | None, dev: torch.device) -> torch.Tensor:
    """``table`` ring (m, D) on ``dev`` as (1, m, D), or its bucket form (B, M, D) for a cuckoo
    layout's ``gather_index`` int64 (B, M) (-1: a zero row)."""
    data = _to_device(table, dev)
    if gather_index is None:
        return data[None]
    index = torch.from_numpy(gather_index).to(dev)
    out = data[index.clamp(min=0)]
    out[index < 0] = 0
    return out.contiguous()


def mmo(words: torch.Tensor, name: str) -> torch.Tensor:
    """``AES_name(x) ^ x`` of int64 (N, 2) words on the device (the raw AES of the kernels)."""
    n = words.shape[0]
    out = torch.empty_like(words)
    block = _block()
    kern.mmo_kernel[(_cdiv(n, block),)](words, out, n, _rk(name, words.device), _tables(words.device),
                                              BLOCK=block)
    return out


def _cw_tensor(path: PathKeys, dev: torch.device) -> torch.Tensor:
    """int64 (K, n, 3): per level ``(cw_hi, cw_lo | tCW_L, cw_lo | tCW_R)``."""
    lo = path.cw_seed[:, :, 0]
    planes = np.stack([path.cw_seed[:, :, 1], lo | path.cw_tl.astype(np.uint64), lo | path.cw_tr.astype(np.uint64)],
                      axis=2)
    return _to_device(planes, dev)


def expand(path: PathKeys, dev: torch.device, size: int | None = None) -> torch.Tensor:
    """Leaf words int64 (K, size, 2) of every key on ``dev`` (bit 0 of ``[..., 0]`` is ``t``):
    the first ``size`` leaves (default ``m``; at most ``2^n``, the tree's) of each, the same
    words as the CPU walk's (:func:`secemb.fss.tree.expand`, :func:`~secemb.fss.tree.leaf_groups`
    past ``m``).  Raises ``InvalidParameters`` as :func:`secemb.fss.tree.check_path` (the kernel
    indexes the correction words by level, unchecked), or for a ``size`` outside ``[m, 2^n]``."""
    check_path(path)
    m, n, k = path.params.domain_size, path.params.depth, len(path)
    size = m if size is None else size
    if not m <= size <= 1 << n:
        raise InvalidParameters(f"leaves per key must be in [{m}, {1 << n}], got {size}")
    x = _to_device(path.roots, dev).reshape(k, 1, 2)
    if n == 0 or k == 0:
        return x[:, :size].contiguous()
    cw = _cw_tensor(path, dev)
    tables, left, right = _tables(dev), _rk("tree/left", dev), _rk("tree/right", dev)
    block = _block()
    for i in range(n):
        parents = x.shape[1]
        need = -(-size >> (n - 1 - i))  # nodes at depth i + 1 with a leaf < size
        out = torch.empty((k, need, 2), dtype=torch.int64, device=dev)
        total = k * parents
        kern.level_kernel[(_cdiv(total, block),)](x, out, cw, parents, need, i, n, total, left, right, tables,
                                                        BLOCK=block)
        x = out
    return x


def retrieval_shares(leaves: torch.Tensor, cw: torch.Tensor, party: int, ring64: bool,
                     tag: str = RETRIEVAL_TAG, m: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(e, t)``: ring (K, m) shares ``(-1)^party [Convert_tag(s) + t CW]`` (payload 1) and
    uint8 (K, m) control bits of the first ``m`` leaves (default all) of each key, for leaves
    int64 (K, L, 2), ``L >= m``, and ``cw`` ring (K,)."""
    k, stride = leaves.shape[:2]
    m = stride if m is None else m
    if not 0 <= m <= stride:
        raise InvalidParameters(f"{m} leaves of keys with {stride}")
    e = torch.empty((k, m), dtype=torch.int64 if ring64 else torch.int32, device=leaves.device)
    t = torch.empty((k, m), dtype=torch.uint8, device=leaves.device)
    total, block = k * m, _block()
    kern.retrieval_kernel[(_cdiv(total, block),)](
        leaves, cw, e, t, m, stride, total, party, _rk("convert/" + tag, leaves.device), _tables(leaves.device),
        RING64=ring64, BLOCK=block)
    return e, t


def convert_sum(leaves: torch.Tensor, acc: torch.Tensor, tag: str = AGGREGATION_TAG) -> None:
    """``acc[g, p] += sum_u Convert_tag(leaves[u G + g, p])`` for ``p < m``: leaves int64 (U G, L,
    2), ``L >= m``, ``acc`` ring (G, m, w) (int32: ``Z_2^32``, int64: ``Z_2^64``), updated in
    place."""
    groups, m, width = acc.shape
    stride = leaves.shape[1]
    if stride < m:
        raise InvalidParameters(f"keys of {stride} leaves cannot fill {m} positions")
    ring64 = acc.dtype == torch.int64
    per_block = 2 if ring64 else 4
    users = leaves.shape[0] // groups
    block = _block()
    grid = (groups * _cdiv(m, block), _cdiv(width, per_block))
    kern.convert_sum_kernel[grid](leaves, acc, users, groups, m, stride, width, _rk("convert/" + tag, leaves.device),
                                  _tables(leaves.device), RING64=ring64, BLOCK=block)


def sketch_round_keys(expanded: Expanded, dev: torch.device) -> torch.Tensor:
    """The devices' AES-128 round keys of a sketch (:attr:`~secemb.fss.sketch.Expanded.keys`)
    in the kernels' T-table form (:func:`~secemb.fss.gpu.tables.expand_keys`): int32 (n, 44) on
    ``dev``.  The key schedule runs on the host, vectorized over the batch's devices."""
    return torch.from_numpy(expand_keys(np.asarray(expanded.keys)).view(np.int32)).to(dev)


def leaf_sketches(leaves: torch.Tensor, rk: torch.Tensor, r: torch.Tensor, r2: torch.Tensor, per_user: int,
                  key0: int = 0) -> np.ndarray:
    """The sketch values of a chunk of keys from their leaves on the device, as
    :meth:`secemb.fss.sketch.SketchCheck.add` computes them from the CPU walk's (bit for bit).

    ``leaves`` int64 (C, L, 2): keys ``key0 .. key0 + C - 1`` of the batch over the padded
    domain (``L`` = :func:`~secemb.fss.tree.padded_leaves`); ``rk`` int32 (U, 44) the devices'
    round keys (:func:`sketch_round_keys`); ``r``, ``r2`` int64 (U, L), the devices'
    coefficients and their squares in ``[0, p)``, key ``k`` of device ``k // per_user``.
    Returns uint64 (C, 3): each key's ``(A, B, C)`` in ``[0, p)`` over these leaves."""
    chunk, stride = leaves.shape[:2] if leaves.ndim == 3 else (-1, -1)
    devices = r.shape[0]
    if (chunk < 0 or leaves.shape[2] != 2 or rk.shape != (devices, 44) or r.shape != (devices, stride)
            or r2.shape != r.shape or per_user < 1 or not 0 <= key0 <= key0 + chunk <= devices * per_user):
        raise InvalidParameters(f"round keys {tuple(rk.shape)} and coefficients {tuple(r.shape)}, "
                                f"{tuple(r2.shape)} do not fit keys [{key0}, {key0 + chunk}) of {stride} leaves, "
                                f"{per_user} a device")
    if chunk == 0 or stride == 0:
        return np.zeros((chunk, SKETCH_WORDS), np.uint64)
    block = _block()
    slices = max(1, min(_cdiv(stride, block), _cdiv(SKETCH_PROGRAMS, chunk)))
    span = _cdiv(_cdiv(stride, slices), block) * block
    slices = _cdiv(stride, span)
    parts = torch.empty((chunk, slices, SKETCH_WORDS), dtype=torch.int64, device=leaves.device)
    kern.sketch_kernel[(chunk, slices)](leaves, rk, r, r2, parts, key0, stride, per_user, span,
                                        _tables(leaves.device), BLOCK=block)
    return field.sum_mod(_to_host(parts, np.dtype(np.uint64)), axis=1)


def ring_matmul(e: torch.Tensor, table: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``out[u, g] += e[u, g] @ table[g]`` in the ring: ``e`` (U, G, m), ``table`` (G, m, D),
    both int32 or both int64; ``out`` (U, G, D) of their dtype (default: zeros), returned.
    On a GPU a thin product's inner dimension is split over programs
    (:data:`MATMUL_PROGRAMS`), summed by integer atomics."""
    users, groups, m = e.shape
    d = table.shape[2]
    if out is None:
        out = torch.zeros((users, groups, d), dtype=e.dtype, device=e.device)
    elif out.shape != (users, groups, d) or out.dtype != e.dtype or not out.is_contiguous():
        raise InvalidParameters(f"out must be a contiguous {e.dtype} tensor of shape {(users, groups, d)}")
    bu, bd, bm = (16, 16, 16) if not gpu.interpreting() else (64, 64, 64)
    # slices of the inner dimension: about MATMUL_PROGRAMS programs in all, none shorter than
    # MATMUL_MIN_SLICE
    tiles = groups * _cdiv(users, bu) * _cdiv(d, bd)
    slices = max(1, min(_cdiv(MATMUL_PROGRAMS, tiles), m // MATMUL_MIN_SLICE))
    m_split = _cdiv(_cdiv(m, slices), bm) * bm
    grid = (groups, _cdiv(users, bu), _cdiv(d, bd) * _cdiv(m, m_split))
    kern.ring_matmul_kernel[grid](e, table, out, users, groups, m, d, m_split, RING64=e.dtype == torch.int64,
                                  BU=bu, BD=bd, BM=bm)
    return out


def bits_product(t: np.ndarray, cw: np.ndarray, dev: torch.device) -> np.ndarray:
    """``out[g] = t[g] @ cw[g]`` in the ring: ``t`` uint8 (G, R, U) 0/1, ``cw`` ring (G, U, w)
    (uint32 or uint64) -> ring (G, R, w); the product of :func:`ring_matmul` with the control
    bits as its left operand (rows ``R``, inner dimension ``U``)."""
    groups, rows, users = t.shape
    if cw.shape[:2] != (groups, users) or cw.dtype not in _SIGNED:
        raise InvalidParameters(f"correction words of shape {cw.shape} do not match control bits {t.shape}")
    signed = torch.int64 if cw.dtype == np.uint64 else torch.int32
    left = torch.from_numpy(np.ascontiguousarray(t.transpose(1, 0, 2))).to(dev).to(signed)  # (R, G, U)
    out = ring_matmul(left, _to_device(cw, dev))  # (R, G, w)
    return _to_host(out.permute(1, 0, 2).contiguous(), cw.dtype)


def packed_bits_product(bits: np.ndarray, cw: np.ndarray, m: int, dev: torch.device) -> np.ndarray:
    """``out[j] = sum_i t[i, j] cw[i]`` in the ring on ``dev``: the full layout's control-bit
    part of the aggregation (:meth:`secemb.fss.fused.PreparedAggregation.apply_bits` without
    its sign), for ``bits`` uint8 (K, ceil(m / 8)), each key's control bits at the ``m`` items
    packed (numpy ``packbits``), and ``cw`` ring (K, w) (uint32 or uint64) -> ring (m, w).
    The bits cross packed and are unpacked on the device, in chunks of keys of at most
    :data:`LEAF_BUDGET` bits (each a :func:`ring_matmul` into the same sum)."""
    k = bits.shape[0] if bits.ndim == 2 else -1
    if (bits.dtype != np.uint8 or bits.shape != (k, -(-m // 8)) or cw.dtype not in _SIGNED or cw.ndim != 2
            or cw.shape[0] != k):
        raise InvalidParameters(f"correction words {cw.dtype} {cw.shape} and packed control bits {bits.dtype} "
                                f"{bits.shape} do not match {m} items")
    signed = torch.int64 if cw.dtype == np.uint64 else torch.int32
    out = torch.zeros((m, 1, cw.shape[1]), dtype=signed, device=dev)
    packed, words = torch.from_numpy(np.ascontiguousarray(bits)).to(dev), _to_device(cw, dev)
    shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=dev)  # big bit order
    step = max(1, LEAF_BUDGET // max(m, 1))
    for k0 in range(0, k, step):
        chunk = packed[k0 : k0 + step]
        t = chunk[:, :, None].bitwise_right_shift(shifts).bitwise_and(1).reshape(len(chunk), -1)[:, :m]
        ring_matmul(t.T.to(signed).contiguous()[:, None, :], words[None, k0 : k0 + step], out=out)
    return _to_host(out[:, 0], cw.dtype)


def _pack_bits(t: torch.Tensor) -> torch.Tensor:
    """numpy ``packbits(t, axis=1)`` (big bit order) of uint8 (K, m) 0/1 on the device."""
    k, m = t.shape
    padded = torch.zeros((k, -(-m // 8) * 8), dtype=torch.uint8, device=t.device)
    padded[:, :m] = t
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=t.device)
    return (padded.view(k, -1, 8) * weights).sum(dim=2, dtype=torch.uint8)


def evaluate(party: int, keys: DPFKeys, table: gpu.DeviceTable, width: int,
             check: SketchCheck | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Evaluate a batch of users' retrieval keys on the device; the same result, bit for bit,
    as the CPU path (``secemb.fss.tasks.evaluate_task``).

    Parameters
    ----------
    party: ``b``, the keys' party.
    keys: ``U G`` retrieval keys (payload width 1, ring of the table), user-major: key
        ``u G + g`` reads group ``g`` of ``table`` (``G = 1``: the full layout; ``G = B``
        buckets: the cuckoo layout).
    table: the round's :class:`~secemb.fss.gpu.DeviceTable`.
    width: ``w``, the aggregation payload width.
    check: the keys' sketch check (:class:`~secemb.fss.sketch.SketchCheck` of these keys, its
        devices' seeds expanded over the padded domain), or ``None``: its values are computed
        on the device from the same walk and added into ``check.values`` (mod ``p``), as the
        CPU walk's :meth:`~secemb.fss.sketch.SketchCheck.add` does.

    Returns
    -------
    ``(answers, bits, conv)``: ring (K, D) answer shares; the control bits -- uint8
    (K, ceil(m / 8)) packed rows (numpy ``packbits``) for the full layout, uint8 (K, M) for
    the cuckoo layout; ring (m, w) or (B, M, w) ``(-1)^b sum Convert_agg`` over the keys
    (zero at positions that pad a bucket).
    """
    p = keys.params
    groups, m, d = table.data.shape
    if party != keys.party:
        raise InvalidParameters(f"keys belong to party {keys.party}, not {party}")
    if p.dtype != table.dtype or p.payload_width != 1 or p.domain_size != m:
        raise InvalidParameters(
            f"keys ({p.dtype}, payload {p.payload_width}, domain {p.domain_size}) do not match the table "
            f"({table.dtype}, payload 1, domain {m})")
    if len(keys) % groups or width < 1:
        raise InvalidParameters(f"{len(keys)} keys are not whole users of {groups} keys, or width {width} < 1")
    if keys.cw_out.shape != (len(keys), 1):  # the shares' kernel reads one a key, unchecked
        raise InvalidParameters(f"output correction words must be ({len(keys)}, 1), got {keys.cw_out.shape}")
    # with the check, the walk covers the padded domain, as the CPU walk the check is defined on
    size = m if check is None else padded_leaves(p)
    if check is not None and (len(check.values) != len(keys) or check.expanded.size != size):
        raise InvalidParameters(f"a check of {len(check.values)} keys over {check.expanded.size} positions does not "
                                f"fit {len(keys)} keys over {size}")
    dev, ring64 = table.device, p.ring_bits == 64
    k, users = len(keys), len(keys) // groups
    answers = torch.empty((k, d), dtype=table.data.dtype, device=dev)
    conv = torch.zeros((groups, m, width), dtype=table.data.dtype, device=dev)
    bits = []
    cw = _to_device(keys.cw_out[:, 0], dev)
    if check is not None:  # copies: the expanded arrays are read-only
        rk = sketch_round_keys(check.expanded, dev)
        r, r2 = _to_device(check.expanded.r.copy(), dev), _to_device(check.expanded.r2.copy(), dev)
    step = max(1, LEAF_BUDGET // (groups * size))
    for u0 in range(0, users, step):
        lo, hi = u0 * groups, min(users, u0 + step) * groups
        leaves = expand(keys.path[lo:hi], dev, size)
        e, t = retrieval_shares(leaves, cw[lo:hi], party, ring64, m=m)
        answers[lo:hi] = ring_matmul(e.view(-1, groups, m), table.data).view(hi - lo, d)
        convert_sum(leaves, conv)
        if check is not None:
            check.values[lo:hi] = field.add(check.values[lo:hi], leaf_sketches(leaves, rk, r, r2, check.per_user, lo))
        bits.append(_pack_bits(t) if groups == 1 else t)
        del leaves, e
    if not isinstance(table.layout, str):  # positions padding a bucket: zero, as on the CPU
        conv[torch.from_numpy(table.layout.gather_index < 0).to(dev)] = 0
    if party:
        conv = -conv
    dtype = p.dtype
    host_bits = torch.cat(bits).cpu().numpy() if bits else np.zeros((0, m if groups > 1 else -(-m // 8)), np.uint8)
    host_conv = _to_host(conv, dtype)
    return _to_host(answers, dtype), host_bits, host_conv[0] if groups == 1 else host_conv
