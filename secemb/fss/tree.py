"""Full-domain expansion of batched DPF trees (SecEmb Algorithm 6 for every input at once).

Hazmat layer.  A node is a 128-bit word (two ``uint64``) whose bit 0 is its control bit
``t``.  One level maps ``N`` parents ``x`` of a row (a key, or a subtree of one key) to
their children::

    child_c = MMO_c(x) XOR (t ? (sCW | tCW_c) : 0)      c in {left, right}

with ``MMO_c(x) = AES_c(x) XOR x`` (:mod:`secemb.fss.prg`).

Two phases keep memory traffic low.  The top ``n - s`` levels run breadth-first over all
rows of a key chunk, keeping only nodes with a leaf ``< m``.  The bottom ``s`` levels run on
groups of frontier nodes (one *row* per frontier node, with its key's correction words) whose
subtrees fit in the CPU cache; each group's leaves are handed to the caller before the next
group is expanded, so the caller consumes them while they are hot.  Every numpy operation
runs over one 64-bit plane of a whole level of a row group (long inner loops), and all
buffers are per-thread and reused (no page faults in the hot loop).

With the compiled kernels (:mod:`secemb.fss.kernels`) both phases run in numba
(:func:`compiled_groups`): the top in :func:`secemb.fss._numba_kernels.expand_top`, key by
key, the bottom in :func:`secemb.fss._numba_kernels.subtrees`, eight subtrees at a time in L1
with the AES rounds inline (with VAES both children of a parent in one instruction, the left and
right keys in the two lanes of :func:`secemb.fss._aesni.walk_keys`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.keys import DPFParams, PathBlocks, PathKeys
from secemb.fss.prg import aes_for

__all__ = ["SUBTREE_DEPTH", "GROUP_LEAVES", "check_fields", "check_path", "leaf_groups", "numpy_groups",
           "compiled_groups", "expand"]

_ONE = np.uint64(1)
_LEFT = aes_for("tree/left")
_RIGHT = aes_for("tree/right")
#: levels expanded per cache-resident row group
SUBTREE_DEPTH = 7
#: leaves per row group (16 bytes each)
GROUP_LEAVES = 1 << 17

_tls = threading.local()


def _buf(name: str, words: int) -> np.ndarray:
    """A per-thread scratch buffer of at least ``words`` uint64; contents undefined."""
    bufs = getattr(_tls, "bufs", None)
    if bufs is None:
        bufs = _tls.bufs = {}
    buf = bufs.get(name)
    if buf is None or buf.size < words:
        buf = bufs[name] = np.empty(max(words, 1), np.uint64)
    return buf


def _level(x: np.ndarray, cw_hi: np.ndarray, cw_l: np.ndarray, cw_r: np.ndarray, out: np.ndarray) -> None:
    """Children of parents ``x`` (R, N, 2) into ``out`` (R, need, 2), ``need`` in {2N-1, 2N}.

    ``cw_hi``: (R, 1) high word of the seed correction word; ``cw_l``/``cw_r``: (R, 1) low
    word with the left/right control-bit correction in bit 0.
    """
    rows, nodes = x.shape[:2]
    need = out.shape[1]
    size = rows * nodes
    mask = _buf("mask", size)[:size].reshape(rows, nodes)
    tmp1 = _buf("tmp1", size)[:size].reshape(rows, nodes)
    y = _buf("y", 2 * size)[: 2 * size].reshape(rows, nodes, 2)
    enc = _buf("enc", 2 * size)[: 2 * size].reshape(rows, nodes, 2)
    np.bitwise_and(x[:, :, 0], _ONE, out=mask)
    np.negative(mask, out=mask)  # all ones where t = 1
    # y = x XOR (t ? correction : 0); the high plane is shared by both children
    np.bitwise_and(mask, cw_hi, out=tmp1)
    np.bitwise_xor(x[:, :, 1], tmp1, out=y[:, :, 1])
    np.bitwise_and(mask, cw_l, out=tmp1)
    np.bitwise_xor(x[:, :, 0], tmp1, out=y[:, :, 0])
    half = -(-need // 2)  # parents whose left child is kept
    _LEFT.encrypt_into(x, enc)
    for w in (0, 1):  # plane by plane: long inner loops, children interleaved in place
        np.bitwise_xor(enc[:, :half, w], y[:, :half, w], out=out[:, 0::2, w])
    np.bitwise_and(mask, cw_r, out=tmp1)
    np.bitwise_xor(x[:, :, 0], tmp1, out=y[:, :, 0])
    full = need // 2  # parents whose right child is kept
    _RIGHT.encrypt_into(x, enc)
    for w in (0, 1):
        np.bitwise_xor(enc[:, :full, w], y[:, :full, w], out=out[:, 1::2, w])


def _cw_planes(path: PathKeys) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(K, n) high word, low word | tCW_L, low word | tCW_R of the seed correction words."""
    lo = path.cw_seed[:, :, 0]
    return (
        np.ascontiguousarray(path.cw_seed[:, :, 1]),
        lo | path.cw_tl.astype(np.uint64),
        lo | path.cw_tr.astype(np.uint64),
    )


def check_fields(what: str, fields: dict[str, tuple[np.ndarray, tuple[int, ...]]]) -> None:
    """Refuse a key batch whose fields do not have their shapes: ``fields`` maps a field's name
    to the array and the shape it must have (the compiled walk indexes them unchecked).

    Raises
    ------
    InvalidParameters: naming every field of another shape.
    """
    bad = [f"{name} {a.shape}, not {shape}" for name, (a, shape) in fields.items() if a.shape != shape]
    if bad:
        raise InvalidParameters(f"{what}: " + "; ".join(bad))


def check_path(path: PathKeys) -> None:
    """Refuse BGI path keys whose roots and correction words are not those of ``len(path)`` keys
    of their domain's depth (:func:`check_fields`): a batch built by hand, not parsed, before a
    compiled walk (CPU or GPU) indexes them."""
    k, n = len(path), path.params.depth
    check_fields(f"{k} path keys of depth {n}", {"roots": (path.roots, (k, 2)), "cw_seed": (path.cw_seed, (k, n, 2)),
                                                 "cw_tl": (path.cw_tl, (k, n)), "cw_tr": (path.cw_tr, (k, n))})


def leaf_groups(path: PathKeys | PathBlocks) -> Iterator[tuple[int, int, np.ndarray]]:
    """Expand every key of ``path`` to its leaves, group by group.

    Let ``s = min(SUBTREE_DEPTH, n)`` and ``F = ceil(m / 2^s)`` frontier nodes per key.  Row
    ``r = key * F + f`` is the subtree of frontier node ``f`` of ``key``; its ``2^s`` leaves
    are the domain points ``[f 2^s, (f + 1) 2^s)`` (points ``>= m`` are padding, to be
    ignored).  Equivalently, leaf ``p`` of row ``r`` sits at flat position ``r 2^s + p`` of a
    ``(K, F 2^s)`` array.  A :class:`~secemb.fss.keys.PathBlocks` is walked as the keys of its
    :meth:`~secemb.fss.keys.PathBlocks.copy`; the compiled walk reads their correction words
    where its batch holds them (the numpy reference walks the copy).

    Yields
    ------
    ``(r0, r1, leaves)``: rows ``[r0, r1)`` and their leaf words, uint64 (r1 - r0, 2^s, 2),
    a view of a per-thread buffer valid until the next step.

    Raises
    ------
    InvalidParameters: the fields of ``path`` (of its batch) are not those of ``len(path)`` keys of
        its domain's depth (the compiled walk indexes them unchecked: a key batch built by hand, not parsed).
    """
    keys = path if isinstance(path, PathKeys) else path.keys
    check_path(keys)
    if kernels.compiled():
        from secemb.fss._aesni import walk_keys
        from secemb.fss._numba_kernels import bgi_corrections

        # the kernels' ((lo | tCW_L, hi), (lo | tCW_R, hi)) per key and level, of the range's keys
        cwp = np.empty((len(path), path.params.depth, 2, 2), np.uint64)
        if isinstance(path, PathKeys):
            blocks, lo, roots = 1, 0, path.roots
        else:
            blocks, lo, roots = path.count, path.lo, path.roots()
        ro = kernels.read_only  # the fields C-contiguous and read-only, as the roots (compiled_groups)
        bgi_corrections(ro(keys.cw_seed), ro(keys.cw_tl), ro(keys.cw_tr), blocks, lo, cwp)
        yield from compiled_groups(roots, cwp, path.params.domain_size, walk_keys(_LEFT.name, _RIGHT.name))
        return
    whole = path if isinstance(path, PathKeys) else path.copy()
    yield from numpy_groups(whole.roots, _cw_planes(whole), whole.params.domain_size, _level)


def numpy_groups(
    roots: np.ndarray, cws: tuple[np.ndarray, ...], m: int, level: Callable[..., None]
) -> Iterator[tuple[int, int, np.ndarray]]:
    """:func:`leaf_groups` in numpy for either tree scheme: ``roots`` uint64 (K, 2), ``cws`` the
    scheme's per-level corrections (each (K, n, ...), row ``key`` level ``i`` at ``[key, i]``),
    ``level(x, *c, out)`` the children of parents ``x`` (R, N, 2) into ``out`` (R, need, 2) with
    their rows' corrections ``c`` (each ``cws[j][rows, i, None]``); the same groups, rows and
    leaves (and buffer lifetime) as :func:`leaf_groups`.

    The top ``n - s`` levels run breadth-first over every key (only nodes with a leaf < m), the
    bottom ``s`` on row groups of frontier nodes.
    """
    k, n = cws[0].shape[:2]
    s = min(SUBTREE_DEPTH, n)
    top = n - s
    cap = 2 * k * (-(-m >> s) if top else 1)
    tops = (_buf("top0", cap), _buf("top1", cap))
    x = tops[1][: 2 * k].reshape(k, 1, 2)
    x[:] = roots[:, None, :]
    for i in range(top):
        need = -(-m >> (n - 1 - i))  # nodes at depth i + 1 with a leaf < m
        out = tops[i % 2][: 2 * k * need].reshape(k, need, 2)
        level(x, *(c[:, i, None] for c in cws), out)
        x = out
    f = x.shape[1]
    rows = x.reshape(k * f, 2)
    group = max(1, GROUP_LEAVES >> s)
    width = 1 << s
    bufs = (_buf("grp0", 2 * group * width), _buf("grp1", 2 * group * width))
    for r0 in range(0, k * f, group):
        r1 = min(r0 + group, k * f)
        g = r1 - r0
        key = np.arange(r0, r1) // f
        sel = [c[key, top:] for c in cws]
        y = bufs[1][: 2 * g].reshape(g, 1, 2)
        y[:, 0] = rows[r0:r1]
        for i in range(s):
            out = bufs[i % 2][: 2 * g * (2 << i)].reshape(g, 2 << i, 2)
            level(y, *(c[:, i, None] for c in sel), out)
            y = out
        yield r0, r1, y


def compiled_groups(
    roots: np.ndarray, cwp: np.ndarray, m: int, rk: np.ndarray
) -> Iterator[tuple[int, int, np.ndarray]]:
    """:func:`leaf_groups` on the compiled kernels for either tree scheme: ``roots`` uint64
    (K, 2), ``cwp`` the per-level corrections of
    :func:`secemb.fss._numba_kernels.expand_top` (its ``ndim`` picks BGI or Half-Tree), ``rk``
    their round keys; the same groups, rows and leaves as :func:`leaf_groups`."""
    from secemb.fss._numba_kernels import expand_top, subtrees

    k, n = cwp.shape[:2]
    s = min(SUBTREE_DEPTH, n)
    f = -(-m >> s)
    frontier = _buf("front", 2 * k * f)[: 2 * k * f].reshape(k * f, 2)
    # the roots C-contiguous and read-only (a batch's range is a strided view, parsed keys read-only): one
    # compiled signature a scheme (session 37)
    expand_top(kernels.read_only(roots), cwp, n - s, m, rk, frontier.reshape(k, f, 2))
    if s == 0:
        yield 0, k, frontier.reshape(k, 1, 2)
        return
    group = max(1, GROUP_LEAVES >> s)
    width = 1 << s
    buf = _buf("grp0", 2 * group * width)
    for r0 in range(0, k * f, group):
        r1 = min(r0 + group, k * f)
        x = buf[: 2 * (r1 - r0) * width].reshape(r1 - r0, width, 2)
        subtrees(frontier[r0:r1], r0, f, cwp, n - s, s, rk, x)
        yield r0, r1, x


def padded_leaves(params: DPFParams) -> int:
    """Leaves per key of a full-domain walk with ``params`` (:func:`leaf_groups` order),
    ``F 2^s >= m``."""
    s = min(SUBTREE_DEPTH, params.depth)
    return -(-params.domain_size >> s) << s


def expand(path: PathKeys) -> np.ndarray:
    """Leaf words (K, m, 2) of every key (a view of a per-thread buffer valid until the next
    call; rows may be strided)."""
    k, mp = len(path), padded_leaves(path.params)
    out = _buf("leaves", 2 * k * mp)[: 2 * k * mp]
    for r0, r1, leaves in leaf_groups(path):
        out[2 * r0 * leaves.shape[1] : 2 * r1 * leaves.shape[1]] = leaves.reshape(-1)
    return out.reshape(k, mp, 2)[:, : path.params.domain_size]
