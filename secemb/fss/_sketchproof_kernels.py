"""The compiled prover and verifier of the sketch check's proof (internal, numba): :func:`prove_core`,
the field part of :func:`secemb.fss.sketchproof.prove`, :func:`messages_core`, that of
:func:`secemb.fss.sketchproof.verifier_messages`, and :func:`decide_core`,
:func:`secemb.fss.sketchproof.decide`'s arithmetic; :func:`prove_many_core`, :func:`prove_core` of a
batch of devices in one call (:func:`secemb.fss.sketchproof.prove_many`); :func:`verifier_core` and
:func:`verify_core`, a server's whole :func:`~secemb.fss.sketchproof.verifier_messages` and
:func:`~secemb.fss.sketchproof.verify` after the SHAKE-128 batches (the coefficients reduced, the
query points, their Lagrange rows, :func:`messages_core` and :func:`decide_core` in one call), and
:func:`verifier_words`, the other server's messages read in one pass.

The same linear maps and gadget as the numpy reference in :mod:`secemb.fss.sketchproof` (its
``_prove_inputs`` and ``_share``, ``_messages_reference``, and ``decide``'s numpy lines), in ``F_p``
(``p = 2^61 - 1``): each sum of
products is taken as 128-bit products (:func:`secemb.fss._sketch_kernels.mac128`) summed
unreduced over at most 32 terms (32 products of factors below ``p`` stay below ``2^127``) and
reduced once (:func:`~secemb.fss._sketch_kernels.red128`); every value is canonical, so the same
field elements, bit for bit (``tests/fss/test_s29_sketchproof.py``).  Ported from session 28's
prototype (helper E, ``flp_kernel.py``).  Every index is unchecked: the caller checks the shapes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from secemb.fss import _kernel_cache  # noqa: F401 - first: the kernels' cache also covers _sketch_kernels' helpers
from secemb.fss._sketch_kernels import addp, mac128, mulp, red128, subp

__all__ = ["SHORT", "prove_core", "prove_many_core", "messages_core", "query_rows", "query_points", "reduce_words",
           "decide_core", "verifier_core", "verify_core", "verifier_words"]

#: products one unreduced 128-bit sum takes (32 products below p^2 < 2^122 stay below 2^127)
_TERMS = 32
_P = np.uint64((1 << 61) - 1)
#: :func:`prove_core`'s answer when server 1's stream holds fewer than a proof's elements
SHORT = -2


@njit(inline="always")
def _dot(a, b):  # noqa: ANN001, ANN202
    """``sum_t a[t] b[t] mod p`` over two 1-D arrays of field elements of ``a``'s length."""
    zero = np.uint64(0)
    acc, hi, lo = zero, zero, zero
    for t in range(a.shape[0]):
        hi, lo = mac128(hi, lo, a[t], b[t])  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
        if t % _TERMS == _TERMS - 1:
            acc = addp(acc, red128(hi, lo))
            hi, lo = zero, zero
    return addp(acc, red128(hi, lo))


@njit(inline="always")
def _gadget(y, s):  # noqa: ANN001, ANN202
    """``G_s(y) = sum_i s[i] (y[3i]^2 - y[3i+1] y[3i+2]) mod p`` for ``3 len(s)`` wire values ``y``."""
    out = np.uint64(0)
    for i in range(s.shape[0]):
        a, b, c = y[3 * i], y[3 * i + 1], y[3 * i + 2]
        out = addp(out, mulp(s[i], subp(mulp(a, a), mulp(b, c))))
    return out


@njit(cache=True, nogil=True)
def prove_core(x, coefficients, wire_words, calls, stream, chunk, out):  # noqa: ANN001, ANN201
    """Server 0's proof share ``pi0 = pi - share_1`` into ``out`` (``uint64 (2L + 2M + 3,)``,
    ``L = 3 chunk``, ``M = calls``), for any inputs ``x`` (``uint64 (K, 3)`` field elements);
    returns the first key ``k`` with ``A_k^2 != B_k C_k``, or -1 (``pi0`` is written either way), or
    :data:`SHORT` (nothing else done) when ``stream`` runs out.

    The other arguments, as :mod:`secemb.fss.sketchproof` draws them: ``coefficients`` (``uint64
    (2 (M + chunk),)``) the SHAKE-128 output of the coefficients read as little-endian words, two a
    128-bit integer, ``s`` the last ``chunk`` of them reduced mod ``p``; ``wire_words`` (``uint64
    (4L,)``) the ``2L`` wire seeds' 128-bit integers, those of node 0 then those of node ``M + 1``;
    ``stream`` (``uint64``) the words of server 1's AES-CTR stream, taken as
    :func:`secemb.fss.field.expand` takes them (each shifted right by 3, the value ``p`` skipped).
    The proof: the seeds, then the gadget polynomial ``G_s`` of the wires at the nodes ``0..2M+2``
    (key ``k = j chunk + i`` the wires ``3i..3i+2`` at node ``j + 1``, zero keys after ``K``).

    The wires (degree ``D = M + 1``) are extended to the nodes ``M+2..2M+2`` by finite differences,
    without a multiplication: their backward differences ``nabla^k f(D)``, ``k = 0..D``, from the
    values at ``0..D`` (``D (D + 1) / 2`` subtractions a wire), then each next node by ``D``
    additions (``nabla^D f`` is constant); the wires the inner loop, so the additions run as
    vectors.  The polynomial is the one the reference's Lagrange rows give, so the same elements."""
    big_l = 3 * chunk
    deg = calls + 1  # the wires' degree D: values at the nodes 0..D
    taken = 0
    for word in stream:
        if taken == out.shape[0]:
            break
        y = word >> np.uint64(3)
        if y != _P:
            out[taken] = y
            taken += 1
    if taken < out.shape[0]:
        return SHORT
    s = np.empty(chunk, np.uint64)
    for i in range(chunk):
        s[i] = red128(coefficients[2 * (calls + i) + 1], coefficients[2 * (calls + i)])
    nodes = np.zeros((deg + 1, big_l), np.uint64)  # every wire at every wire node
    for j in range(big_l):
        nodes[0, j] = red128(wire_words[2 * j + 1], wire_words[2 * j])
        nodes[deg, j] = red128(wire_words[2 * (big_l + j) + 1], wire_words[2 * (big_l + j)])
    bad = -1
    for k in range(x.shape[0]):
        a, b, c = x[k, 0], x[k, 1], x[k, 2]
        t, i = k // chunk + 1, 3 * (k % chunk)
        nodes[t, i], nodes[t, i + 1], nodes[t, i + 2] = a, b, c
        if bad < 0 and mulp(a, a) != mulp(b, c):
            bad = k
    for j in range(big_l):
        out[j] = subp(nodes[0, j], out[j])
        out[big_l + j] = subp(nodes[deg, j], out[big_l + j])
    for t in range(deg + 1):
        out[2 * big_l + t] = subp(_gadget(nodes[t], s), out[2 * big_l + t])
    diff = nodes  # in place: row deg - k becomes nabla^k f(deg)
    for level in range(1, deg + 1):
        for t in range(deg - level + 1):
            for j in range(big_l):
                diff[t, j] = subp(diff[t + 1, j], diff[t, j])
    for t in range(deg + 1, 2 * deg + 1):  # the nodes M+2..2M+2: row deg becomes f(t)
        for row in range(1, deg + 1):
            for j in range(big_l):
                diff[row, j] = addp(diff[row, j], diff[row - 1, j])
        out[2 * big_l + t] = subp(_gadget(diff[deg], s), out[2 * big_l + t])
    return bad


@njit(cache=True, nogil=True)
def prove_many_core(xs, coefficients, wire_words, calls, streams, chunk, out, status):  # noqa: ANN001, ANN201, PLR0913
    """:func:`prove_core` of ``n`` devices: row ``d`` of ``xs`` (``uint64 (n, K, 3)``),
    ``coefficients`` (``(n, 2 (M + chunk))``), ``wire_words`` (``(n, 4L)``) and ``streams``
    (``(n, W)``) device ``d``'s arguments, its share into ``out[d]`` (``uint64 (n, 2L + 2M + 3)``)
    and its answer into ``status[d]`` (``int64 (n,)``: -1, the first key with ``A^2 != B C``, or
    :data:`SHORT`, where the caller proves that device again on a longer stream)."""
    for d in range(xs.shape[0]):
        status[d] = prove_core(xs[d], coefficients[d], wire_words[d], calls, streams[d], chunk, out[d])


@njit(cache=True, nogil=True)
def messages_core(x, proofs, r, wire_rows, gadget_rows, chunk, out):  # noqa: ANN001, ANN201
    """``out[d]`` (``uint64 (n, 2L + 3)``, ``L = 3 chunk``) set to device ``d``'s verifier message
    share: ``z = sum_j r[d, j] g(j + 1)``, then per point ``q`` the ``L`` wires and ``g(rho_q)``.

    Shapes (``uint64`` field elements): ``x`` (n, K, 3) input shares, ``proofs`` (n, 2L + 2M + 3)
    proof shares (the wire seeds of node 0, those of node ``M + 1``, the gadget polynomial's
    values), ``r`` (n, M), ``wire_rows`` (n, 2, M + 2) and ``gadget_rows`` (n, 2, 2M + 3) the
    devices' Lagrange rows.  Wire ``j = 3i + w`` (key ``k = call chunk + i``, component ``w``) at
    point ``q`` is ``l_0 seed_0j + l_(M+1) seed_1j + sum_call l_(call+1) x[d, call chunk + i, w]``
    over the calls whose slot ``i`` holds a key (``k < K``; padding keys are zero)."""
    n = x.shape[0]
    big_l = 3 * chunk
    m = wire_rows.shape[2] - 2
    zero = np.uint64(0)
    for d in range(n):
        g = proofs[d, 2 * big_l :]
        out[d, 0] = _dot(r[d], g[1 : m + 1])
        for q in range(2):
            lw = wire_rows[d, q]
            base = 1 + q * (big_l + 1)
            for j in range(big_l):
                i, w = j // 3, j % 3
                keys = x[d, i::chunk, w]  # the calls' values of slot i, component w (fewer than M where padded)
                hi, lo = zero, zero
                for node, seed in ((0, j), (m + 1, big_l + j)):  # the seeds' terms
                    hi, lo = mac128(hi, lo, lw[node], proofs[d, seed])  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
                out[d, base + j] = addp(red128(hi, lo), _dot(keys, lw[1 : m + 1]))
            out[d, base + big_l] = _dot(gadget_rows[d, q], g)


@njit(cache=True, nogil=True)
def reduce_words(words, out):  # noqa: ANN001, ANN201
    """``out[i] = (words[2i + 1] 2^64 + words[2i]) mod p`` (``words`` uint64 (2 P,), little-endian
    16-byte integers; ``out`` uint64 (P,)): :func:`secemb.fss.field.from_uniform_bytes`' elements."""
    for i in range(out.size):
        out[i] = red128(words[2 * i + 1], words[2 * i])


@njit(cache=True, nogil=True)
def query_rows(points, wire_weights, gadget_weights, wire_rows, gadget_rows):  # noqa: ANN001, ANN201
    """The Lagrange rows of :func:`messages_core` (:func:`secemb.fss.field.lagrange_coefficients`'
    values): for each of the field elements ``points`` (uint64 (P,), none a node), ``wire_rows[r,
    j]`` over the wire nodes ``0..n1-1`` and ``gadget_rows[r, j]`` over the gadget nodes
    ``0..n2-1`` (``n1 <= n2`` the sizes of ``wire_weights`` and ``gadget_weights``, their
    barycentric weights): ``w_j prod_(m != j) (x - m) mod p``, the prefix products ``prod_(m < j)``
    shared by both, as :func:`secemb.fss._rangeproof_kernels.lagrange_rows` computes each set.  The
    points are the innermost loop: their products are independent chains, whose multiplications
    overlap (one point at a time, each waited for the last; the same elements)."""
    n1, n2 = wire_weights.size, gadget_weights.size
    count = points.size
    acc = np.empty(count, np.uint64)
    acc[:] = 1
    for j in range(n2):  # prod_(m < j) (x - m), both sets
        for r in range(count):
            gadget_rows[r, j] = acc[r]
            if j < n1:
                wire_rows[r, j] = acc[r]
            acc[r] = mulp(acc[r], points[r] - np.uint64(j))
    acc[:] = 1
    for j in range(n2 - 1, -1, -1):  # times prod_(m > j, m < n2) (x - m), times w_j
        for r in range(count):
            gadget_rows[r, j] = mulp(mulp(gadget_rows[r, j], acc[r]), gadget_weights[j])
            acc[r] = mulp(acc[r], points[r] - np.uint64(j))
    acc[:] = 1
    for j in range(n1 - 1, -1, -1):  # the same over the wire nodes
        for r in range(count):
            wire_rows[r, j] = mulp(mulp(wire_rows[r, j], acc[r]), wire_weights[j])
            acc[r] = mulp(acc[r], points[r] - np.uint64(j))


@njit(inline="always")
def _mod128(hi, lo, m):  # noqa: ANN001, ANN202
    """``(hi 2^64 + lo) mod m`` for any 128-bit value and ``0 < m < 2^62``: ``hi mod m``, then
    ``lo``'s bits shifted in one at a time (the running remainder stays below ``m``, so doubling it
    and adding a bit stays below ``2^63``)."""
    r = hi % m
    one = np.uint64(1)
    for bit in range(63, -1, -1):
        r = (r << one) | ((lo >> np.uint64(bit)) & one)
        if r >= m:
            r -= m
    return r


@njit(cache=True, nogil=True)
def query_points(words, nodes, points):  # noqa: ANN001, ANN201
    """Each device's two query points (:func:`secemb.fss.sketchproof._points`, whose Python integers
    are the reference) into ``points`` (uint64 (n, 2)), from its 32 bytes of SHAKE-128 output as
    ``words`` (uint64 (n, 4), little-endian): ``h1 = (w1 2^64 + w0) mod (p - nodes)``, ``h2 = (w3
    2^64 + w2) mod (p - nodes - 1)``; the points ``nodes + h1`` and ``nodes + (h1 + 1 + h2) mod (p -
    nodes)`` (``nodes``: the gadget nodes ``2M + 3``, below ``2^32``)."""
    m1 = _P - nodes
    m2 = m1 - np.uint64(1)
    for d in range(words.shape[0]):
        h1 = _mod128(words[d, 1], words[d, 0], m1)
        h2 = _mod128(words[d, 3], words[d, 2], m2)
        points[d, 0] = nodes + h1
        points[d, 1] = nodes + (h1 + np.uint64(1) + h2) % m1


@njit(cache=True, nogil=True)
def decide_core(v0, v1, s, chunk, ok):  # noqa: ANN001, ANN201
    """``ok[d]`` (``bool (n,)``) set to whether device ``d``'s messages ``v0[d] + v1[d]``
    (``uint64 (n, 2L + 3)`` field elements) have ``z = 0`` and ``G_s(wires) = g`` at both points,
    ``G_s(y) = sum_i s[d, i] (y_3i^2 - y_3i+1 y_3i+2)`` (``s`` ``(n, chunk)``)."""
    big_l = 3 * chunk
    at = np.empty(big_l, np.uint64)  # the opened wires at one point
    for d in range(v0.shape[0]):
        good = addp(v0[d, 0], v1[d, 0]) == 0
        for q in range(2):
            base = 1 + q * (big_l + 1)
            for j in range(big_l):
                at[j] = addp(v0[d, base + j], v1[d, base + j])
            good &= _gadget(at, s[d]) == addp(v0[d, base + big_l], v1[d, base + big_l])
        ok[d] = good


@njit(cache=True, nogil=True)
def _drawn(coefficients, queries, wire_weights, gadget_weights):  # noqa: ANN001, ANN202
    """The devices' reduced coefficients ``r || s`` (uint64 (n, M + chunk): :func:`reduce_words` of
    ``coefficients``, uint64 (n, 2 (M + chunk))), and their Lagrange rows over the wire nodes (n, 2,
    M + 2) and the gadget nodes (n, 2, 2M + 3) at their query points (:func:`query_points` of
    ``queries``, uint64 (n, 4); :func:`query_rows`)."""
    n, width = coefficients.shape[0], coefficients.shape[1] // 2
    n1, n2 = wire_weights.size, gadget_weights.size
    rs = np.empty((n, width), np.uint64)
    reduce_words(coefficients.reshape(n * 2 * width), rs.reshape(n * width))
    points = np.empty((n, 2), np.uint64)
    query_points(queries, np.uint64(n2), points)
    wire_rows = np.empty((n, 2, n1), np.uint64)
    gadget_rows = np.empty((n, 2, n2), np.uint64)
    query_rows(points.reshape(2 * n), wire_weights, gadget_weights, wire_rows.reshape(2 * n, n1),
               gadget_rows.reshape(2 * n, n2))
    return rs, wire_rows, gadget_rows


@njit(cache=True, nogil=True)
def verifier_core(x, proofs, coefficients, queries, wire_weights, gadget_weights, chunk, out):  # noqa: ANN001, ANN201, PLR0913
    """:func:`messages_core` of the devices' drawn words, in one call: ``r`` from ``coefficients``
    (uint64 (n, 2 (M + chunk)), each device's SHAKE-128 output of its coefficients as little-endian
    words: :func:`reduce_words`, the first ``M`` elements), the Lagrange rows at the points of
    ``queries`` (uint64 (n, 4), each device's SHAKE-128 output of its query seed:
    :func:`query_points`, :func:`query_rows`) over ``wire_weights`` (the ``M + 2`` wire nodes'
    barycentric weights) and ``gadget_weights`` (the ``2M + 3`` gadget nodes'); ``x``, ``proofs``,
    ``chunk`` and ``out`` as :func:`messages_core`'s.  The same kernels in the same order, so the
    same elements."""
    m = wire_weights.size - 2
    rs, wire_rows, gadget_rows = _drawn(coefficients, queries, wire_weights, gadget_weights)
    messages_core(x, proofs, rs[:, :m], wire_rows, gadget_rows, chunk, out)


@njit(cache=True, nogil=True)
def verify_core(x, proofs, coefficients, queries, wire_weights, gadget_weights, chunk, v1, ok):  # noqa: ANN001, ANN201, PLR0913
    """Server 0's whole check in one call: :func:`verifier_core`'s messages (its arguments), then
    :func:`decide_core` of them and the other server's ``v1`` (uint64 (n, 2L + 3) field elements)
    with ``s`` the last ``chunk`` reduced coefficients, into ``ok`` (bool (n,))."""
    m = wire_weights.size - 2
    rs, wire_rows, gadget_rows = _drawn(coefficients, queries, wire_weights, gadget_weights)
    v0 = np.empty(v1.shape, np.uint64)
    messages_core(x, proofs, rs[:, :m], wire_rows, gadget_rows, chunk, v0)
    decide_core(v0, v1, rs[:, m:], chunk, ok)


@njit(cache=True, nogil=True)
def verifier_words(words, out, refused):  # noqa: ANN001, ANN201
    """The other server's verifier messages from their wire words (``words`` uint64 (n, V), as
    read little-endian): ``refused[d]`` (bool (n,)) whether row ``d`` is all ``2^64 - 1`` (the
    refused marker), ``out[d]`` (uint64 (n, V)) the row, or zeros where refused; returns the first
    row that is neither field elements below ``p`` nor the marker, or -1.
    :func:`secemb.fss.sketchproof.parse_verifier_messages`' numpy lines in one pass."""
    marker = np.uint64(0xFFFFFFFFFFFFFFFF)
    bad = -1
    for d in range(words.shape[0]):
        marked = True
        for j in range(words.shape[1]):
            if words[d, j] != marker:
                marked = False
                break
        refused[d] = marked
        for j in range(words.shape[1]):
            w = words[d, j]
            out[d, j] = np.uint64(0) if marked else w
            if not marked and w >= _P and bad < 0:
                bad = d
    return bad
