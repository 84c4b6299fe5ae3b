"""Issue 34 (session 29, helper B): the sketch check's proof, :mod:`secemb.fss.sketchproof`.

The statements are built here from Python integers: an honest key's ``x = (r z, r^2 z, z)``, a
two-point key's ``(r1 z1 + r2 z2, r1^2 z1 + r2^2 z2, z1 + z2)`` (``A^2 - BC`` checked non-zero in
Python ints), the servers' shares a uniform ``x_0`` and ``x - x_0``.  Completeness at ``K = 1``,
keys not a multiple of the chunk, ``K = 200`` and ``K = 250``, on both backends (the Lagrange rows
and the seeds' expansion have compiled paths); soundness against a two-point key proved with the
true proof, with a proof forged so that the circuit's output is zero, and with the single-point
``x`` of one of its points; a proof share of another ``sigma`` or another ``c_u``; malformed proof
shares and verifier messages refused; the sizes written out by hand.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import sketchproof as S
from secemb.fss.keys import PathKeys
from secemb.fss.sketch import Expanded, SketchCheck, device_inputs, server_inputs
from secemb.fss.sketch import expand as sketch_expand
from secemb.fss.tree import leaf_groups, padded_leaves
from secemb.randomness import SEED_BYTES

P = F.P


def _honest_key() -> list[int]:
    r, z = secrets.randbelow(P), secrets.randbelow(P)
    return [r * z % P, r * r * z % P, z]


def _two_point_key(points: list[tuple[int, int]]) -> list[int]:
    """``x`` of a key whose leaves differ at the given ``(r_x, z_x)`` positions."""
    return [sum(r * z for r, z in points) % P, sum(r * r * z for r, z in points) % P, sum(z for _, z in points) % P]


def _array(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.uint64).reshape(len(rows), 3)


def _shares(xs: list[list[list[int]]]) -> tuple[np.ndarray, np.ndarray]:
    """Server 0's uniform shares and server 1's ``x - x_0`` (Python ints), ``uint64 (n, K, 3)`` each."""
    x0 = [[[secrets.randbelow(P) for _ in range(3)] for _ in key_rows] for key_rows in xs]
    x1 = [[[(a - b) % P for a, b in zip(k, k0, strict=True)] for k, k0 in zip(dev, dev0, strict=True)]
          for dev, dev0 in zip(xs, x0, strict=True)]
    return np.array(x0, dtype=np.uint64), np.array(x1, dtype=np.uint64)


def _verify(params: S.SketchParams, xs: list[list[list[int]]], msgs: list[bytes], cus: list[bytes],
            sigmas: list[bytes], *, server_sigmas: list[bytes] | None = None,
            queries: list[bytes] | None = None) -> np.ndarray:
    x0, x1 = _shares(xs)
    qs = queries or [os.urandom(16) for _ in xs]
    v0 = S.verifier_messages(params, x0, S.parse(params, msgs), cus, qs)
    v1 = S.verifier_messages(params, x1, S.server1_shares(params, server_sigmas or sigmas), cus, qs)
    # through the wire, as server 1 sends them
    v1w, refused = S.parse_verifier_messages(params, S.encode_verifier_messages(params, v1), len(xs))
    assert not refused.any()
    return S.decide(params, v0, v1w, cus)


def _seeds(n: int) -> list[bytes]:
    return [os.urandom(16) for _ in range(n)]


def test_sizes_written_out() -> None:
    """ML-100K's cuckoo (250 keys) and full (200 keys) layouts, and the smallest: by hand, and the
    chunk checked minimal against every ``c`` up to ``K``."""
    for keys, chunk, calls, elements, nbytes, vlen in ((250, 9, 28, 113, 904, 57), (200, 8, 25, 101, 808, 51),
                                                       (1, 1, 1, 11, 88, 9)):
        p = S.SketchParams(keys)
        assert (p.chunk, p.calls, p.wires, p.proof_length, p.proof_bytes, p.verifier_length, p.verifier_bytes) == (
            chunk, calls, 3 * chunk, elements, nbytes, vlen, 8 * vlen)
    for keys in (1, 2, 3, 7, 30, 99, 250, 1000):
        lengths = [6 * c + 2 * -(-keys // c) + 3 for c in range(1, keys + 1)]
        best = min(lengths)
        assert S.SketchParams(keys).proof_length == best
        assert S.SketchParams(keys).chunk == lengths.index(best) + 1
    for bad in (0, -1, 2.0, True):
        with pytest.raises(InvalidParameters):
            S.SketchParams(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("keys", [1, 7, 17, 37, 200, 250])
def test_honest_devices_pass(keys: int, backend: str) -> None:
    params = S.SketchParams(keys)
    if keys in (17, 37):
        assert keys % params.chunk, "a key count that is not a multiple of the chunk"
    n = 6
    for _ in range(3):
        xs = [[_honest_key() for _ in range(keys)] for _ in range(n)]
        cus, sigmas = _seeds(n), _seeds(n)
        msgs = [S.prove(params, _array(x), cu, sg) for x, cu, sg in zip(xs, cus, sigmas, strict=True)]
        assert all(len(m) == params.proof_bytes for m in msgs)
        assert _verify(params, xs, msgs, cus, sigmas).tolist() == [True] * n


def test_zero_keys_pass(backend: str) -> None:
    """Keys whose leaves do not differ at all (``x = 0``) are honest too."""
    params = S.SketchParams(13)
    xs = [[[0, 0, 0]] * 13, [_honest_key() for _ in range(12)] + [[0, 0, 0]]]
    cus, sigmas = _seeds(2), _seeds(2)
    msgs = [S.prove(params, _array(x), cu, sg) for x, cu, sg in zip(xs, cus, sigmas, strict=True)]
    assert _verify(params, xs, msgs, cus, sigmas).tolist() == [True, True]


def _cheater(keys: int, bad_key: int) -> tuple[list[list[int]], list[list[int]]]:
    """A device's true ``x`` with one two-point key, and the ``x`` it would claim: that key's
    single-point ``x`` at its first position."""
    first, second = (secrets.randbelow(P), secrets.randbelow(P - 1) + 1), (secrets.randbelow(P),
                                                                            secrets.randbelow(P - 1) + 1)
    true = [_honest_key() for _ in range(keys)]
    true[bad_key] = _two_point_key([first, second])
    a, b, c = true[bad_key]
    assert (a * a - b * c) % P != 0, "the two-point key breaks A^2 = B C"
    claimed = [list(k) for k in true]
    claimed[bad_key] = _two_point_key([first])
    return true, claimed


@pytest.mark.parametrize("how", ["true", "forged", "single-point"])
@pytest.mark.parametrize("keys", [37, 250])
def test_two_point_key_rejected(how: str, keys: int, backend: str) -> None:
    params = S.SketchParams(keys)
    n, m = 5, params.calls
    for trial in range(3):
        cheat, bad_key = secrets.randbelow(n), secrets.randbelow(keys)
        xs = [[_honest_key() for _ in range(keys)] for _ in range(n)]
        true, claimed = _cheater(keys, bad_key)
        xs[cheat] = true
        cus, sigmas = _seeds(n), _seeds(n)
        msgs = [S.prove(params, _array(x), cu, sg) if i != cheat else b"" for i, (x, cu, sg)
                in enumerate(zip(xs, cus, sigmas, strict=True))]
        with pytest.raises(InvalidParameters, match=f"key {bad_key} has A"):
            S.prove(params, _array(true), cus[cheat], sigmas[cheat])
        rng = os.urandom
        if how == "single-point":  # an honest proof of the statement it claims, not of the servers' x
            proof = S._prove_inputs(params, _array(claimed), cus[cheat], sigmas[cheat], rng)
        else:
            proof = S._prove_inputs(params, _array(true), cus[cheat], sigmas[cheat], rng)
        if how == "forged":  # the last call's output moved so that sum_j r_j g(j) = 0 (in Python ints)
            r = [int(v) for v in S._coefficients(params, [cus[cheat]])[0][0]]
            g = [int(v) for v in proof[2 * params.wires:]]
            total = sum(rj * gj for rj, gj in zip(r, g[1 : m + 1], strict=True)) % P
            g[m] = (g[m] - total * pow(r[m - 1], P - 2, P)) % P
            assert sum(rj * gj for rj, gj in zip(r, g[1 : m + 1], strict=True)) % P == 0
            proof[2 * params.wires + m] = g[m]
        msgs[cheat] = S._share(params, proof, sigmas[cheat])
        ok = _verify(params, xs, msgs, cus, sigmas)
        assert ok.tolist() == [i != cheat for i in range(n)], (how, trial)


def test_other_sigma_or_seed_fails(backend: str) -> None:
    params = S.SketchParams(40)
    n = 4
    xs = [[_honest_key() for _ in range(40)] for _ in range(n)]
    cus, sigmas = _seeds(n), _seeds(n)
    msgs = [S.prove(params, _array(x), cu, sg) for x, cu, sg in zip(xs, cus, sigmas, strict=True)]
    other = list(sigmas)
    other[1] = os.urandom(16)
    assert _verify(params, xs, msgs, cus, sigmas, server_sigmas=other).tolist() == [True, False, True, True]
    proved_under = list(cus)
    proved_under[2] = os.urandom(16)  # the device proved under another c_u than the servers check
    msgs[2] = S.prove(params, _array(xs[2]), proved_under[2], sigmas[2])
    assert _verify(params, xs, msgs, cus, sigmas).tolist() == [True, True, False, True]
    # the range proof's expansion of the same sigma is not this proof's share (an independent stream)
    assert not np.array_equal(S.server1_shares(params, sigmas[:1])[0], F.expand(sigmas[0], params.proof_length))


def test_server1_messages_under_another_query() -> None:
    """Server 1's answers to one proof under two query seeds: the same ``z`` share, every opened
    (masked) value different."""
    params = S.SketchParams(30)
    xs = [[_honest_key() for _ in range(30)]]
    cu, sigma = _seeds(1), _seeds(1)
    _, x1 = _shares(xs)
    share = S.server1_shares(params, sigma)
    a = S.verifier_messages(params, x1, share, cu, [os.urandom(16)])
    b = S.verifier_messages(params, x1, share, cu, [os.urandom(16)])
    assert a[0, 0] == b[0, 0]
    assert np.all(a[0, 1:] != b[0, 1:])


def test_query_points_avoid_the_nodes() -> None:
    params = S.SketchParams(250)
    points = S._points(params, _seeds(2000))
    assert points.min() >= params.gadget_nodes and points.max() < P
    assert np.all(points[:, 0] != points[:, 1])


def test_malformed_proof_shares_refused() -> None:
    params = S.SketchParams(20)
    assert params.proof_bytes == 8 * (6 * 2 + 2 * 10 + 3)  # c = 2, M = 10
    good = S.prove(params, _array([_honest_key() for _ in range(20)]), os.urandom(16), os.urandom(16))
    S.check_message(params, good)
    S.check_message(params, memoryview(good))
    for bad, what in ((good[:-1], "expected 280 bytes, got 279 bytes"), (good + b"\0" * 8, "got 288 bytes"),
                      ("x" * 280, "got str"), (None, "got NoneType")):
        with pytest.raises(InvalidMessage, match=what):
            S.check_message(params, bad)
    for position in (0, params.proof_length // 2, params.proof_length - 1):
        for word in (P, P + 1, 2**64 - 1):
            data = bytearray(good)
            data[8 * position : 8 * position + 8] = word.to_bytes(8, "little")
            with pytest.raises(InvalidMessage, match="sketch proof 1: an element is not below p"):
                S.parse(params, [good, bytes(data)])
    almost = bytearray(good)
    almost[:8] = (P - 1).to_bytes(8, "little")
    assert int(S.parse(params, [bytes(almost)])[0, 0]) == P - 1


def test_verifier_messages_wire_format() -> None:
    params = S.SketchParams(20)
    n, width = 3, params.verifier_length
    v = np.array([[secrets.randbelow(P) for _ in range(width)] for _ in range(n)], dtype=np.uint64)
    refused = np.array([False, True, False])
    data = S.encode_verifier_messages(params, v, refused)
    assert len(data) == n * params.verifier_bytes
    assert data[params.verifier_bytes : 2 * params.verifier_bytes] == b"\xff" * params.verifier_bytes
    got, got_refused = S.parse_verifier_messages(params, data, n)
    assert got_refused.tolist() == [False, True, False]
    assert np.array_equal(got[[0, 2]], v[[0, 2]]) and not got[1].any()
    with pytest.raises(InvalidMessage, match="expected"):
        S.parse_verifier_messages(params, data[:-1], n)
    with pytest.raises(InvalidMessage, match="expected"):
        S.parse_verifier_messages(params, data, n + 1)
    for word in (P, 2**64 - 1):  # one bad word (a row of 0xff bytes but one is no refusal either)
        bad = bytearray(data)
        bad[8:16] = word.to_bytes(8, "little")
        with pytest.raises(InvalidMessage, match="message 0: an element is not below p"):
            S.parse_verifier_messages(params, bytes(bad), n)
    partial = bytearray(data)
    partial[params.verifier_bytes : params.verifier_bytes + 8] = (5).to_bytes(8, "little")
    with pytest.raises(InvalidMessage, match="message 1"):
        S.parse_verifier_messages(params, bytes(partial), n)
    with pytest.raises(InvalidParameters):
        S.encode_verifier_messages(params, v, np.array([True, False]))
    with pytest.raises(InvalidMessage):
        S.decide(params, v, v[:2], _seeds(3))
    over = v.copy()
    over[0, 0] = P
    with pytest.raises(InvalidMessage, match="not below p"):
        S.decide(params, v, over, _seeds(3))


def test_arguments_checked() -> None:
    params = S.SketchParams(5)
    x = _array([_honest_key() for _ in range(5)])
    seed = os.urandom(SEED_BYTES)
    for bad_x in (x[:4], x.astype(np.int64), x.tolist()):
        with pytest.raises(InvalidParameters, match="x must be"):
            S.prove(params, bad_x, seed, seed)  # type: ignore[arg-type]
    over = x.copy()
    over[0, 0] = P
    with pytest.raises(InvalidParameters, match="below p"):
        S.prove(params, over, seed, seed)
    with pytest.raises(InvalidParameters, match="seed must be 16 bytes"):
        S.prove(params, x, seed[:15], seed)
    with pytest.raises(InvalidParameters, match="sigma must be 16 bytes"):
        S.prove(params, x, seed, "s" * 16)  # type: ignore[arg-type]
    proofs = S.server1_shares(params, [seed])
    with pytest.raises(InvalidParameters, match="queries: expected 1 seeds"):
        S.verifier_messages(params, x[None], proofs, [seed], [])
    with pytest.raises(InvalidParameters, match="proofs must be"):
        S.verifier_messages(params, x[None], proofs[:, 1:], [seed], [seed])
    with pytest.raises(InvalidParameters, match="x must be"):
        S.verifier_messages(params, x, proofs, [seed], [seed])


def test_coefficients_from_the_seed() -> None:
    """``r || s`` are the 16-byte little-endian integers of SHAKE-128(domain || "coefficients" || c_u)
    reduced mod ``p`` (written out with hashlib and Python ints), a batch's devices each their own."""
    params = S.SketchParams(250)
    width = params.calls + params.chunk
    seeds = _seeds(3)
    r, s = S._coefficients(params, seeds)
    assert r.shape == (3, params.calls) and s.shape == (3, params.chunk)
    for i, seed in enumerate(seeds):
        blob = hashlib.shake_128(b"secemb/fss/sketchproof/v1/coefficients" + seed).digest(16 * width)
        want = [int.from_bytes(blob[16 * j : 16 * j + 16], "little") % P for j in range(width)]
        assert [int(v) for v in r[i]] + [int(v) for v in s[i]] == want


def _random_elements(*shape: int) -> np.ndarray:
    """Uniform field elements, with ``p - 1`` and ``0`` among them (the edges of the reductions)
    and the first row all ``p - 1`` (the longest unreduced sums)."""
    x = np.frombuffer(os.urandom(8 * int(np.prod(shape))), "<u8").astype(np.uint64) >> np.uint64(3)
    x[x >= np.uint64(P)] = 0
    x[::7] = P - 1
    x[3::11] = 0
    x = x.reshape(shape)
    x[0] = P - 1
    return x


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
@pytest.mark.parametrize("keys", [1, 17, 200, 250, 1000])
def test_compiled_verifier_equals_the_reference(keys: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled messages and verdicts equal the numpy reference's bit for bit: on arbitrary
    shares and proofs (long sums of ``p - 1``), and on messages of honest and cheating devices,
    where the verdicts differ."""
    params = S.SketchParams(keys)
    n = 7
    x, proofs = _random_elements(n, keys, 3), _random_elements(n, params.proof_length)
    seeds, queries = _seeds(n), _seeds(n)
    got = {}
    for backend in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        got[backend] = S.verifier_messages(params, x, proofs, seeds, queries)
    assert np.array_equal(got["numpy"], got["numba"])
    # honest devices, one cheater, and messages one element off
    xs = [[_honest_key() for _ in range(keys)] for _ in range(n)]
    xs[3], _ = _cheater(keys, keys // 2)
    sigmas = _seeds(n)
    msgs = [S._share(params, S._prove_inputs(params, _array(k), cu, sg, os.urandom), sg)
            for k, cu, sg in zip(xs, seeds, sigmas, strict=True)]
    x0, x1 = _shares(xs)
    v0 = S.verifier_messages(params, x0, S.parse(params, msgs), seeds, queries)
    v1 = S.verifier_messages(params, x1, S.server1_shares(params, sigmas), seeds, queries)
    v1[5, secrets.randbelow(params.verifier_length)] ^= np.uint64(1)
    verdicts = {}
    for backend in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        verdicts[backend] = S.decide(params, v0, v1, seeds).tolist()
        assert S.decide(params, got["numpy"], got["numpy"], seeds).tolist() == [False] * n
    assert verdicts["numpy"] == verdicts["numba"] == [True, True, True, False, True, False, True]


def _fixed_rng(data: bytes) -> Callable[[int], bytes]:
    """A ``RandomBytes`` that returns ``data`` once (the prover draws its wire seeds in one call)."""
    calls = []

    def rng(n: int) -> bytes:
        assert not calls and n == len(data), "one draw of the wire seeds' bytes"
        calls.append(n)
        return data

    return rng


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
@pytest.mark.parametrize("keys", [1, 7, 200, 250, 1000])
def test_compiled_prover_equals_the_reference(keys: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled prover's ``pi0`` equals the numpy reference's bit for bit, the wire seeds'
    randomness fixed: on honest keys (random ones, keys of ``p - 1``s, zero keys; seeds' bytes random,
    all ``0xff`` and all zero), and for any inputs, where it names the first key with ``A^2 != B C``
    (found here in Python ints) as the reference refuses it."""
    params = S.SketchParams(keys)
    size = 16 * 2 * params.wires
    honest = [_honest_key() for _ in range(keys)]
    honest[::3] = [[P - 1] * 3] * len(honest[::3])  # (p - 1)^2 = (p - 1)(p - 1)
    honest[1::5] = [[0] * 3] * len(honest[1::5])
    for x in (_array(honest), _array([[P - 1] * 3] * keys)):
        for wire_bytes in (os.urandom(size), b"\xff" * size, bytes(size)):
            seed, sigma = os.urandom(16), os.urandom(16)
            got = {}
            for backend in ("numpy", "numba"):
                monkeypatch.setattr(kernels, "BACKEND", backend)
                got[backend] = S.prove(params, x, seed, sigma, _rng=_fixed_rng(wire_bytes))
            assert got["numpy"] == got["numba"]
    for _ in range(3):
        x = _random_elements(keys, 3)
        rows = [[int(v) for v in k] for k in x]
        unequal = [k for k, (a, b, c) in enumerate(rows) if (a * a - b * c) % P]
        seed, sigma, wire_bytes = os.urandom(16), os.urandom(16), os.urandom(size)
        want = S._share(params, S._prove_inputs(params, x, seed, sigma, _fixed_rng(wire_bytes)), sigma)
        assert S._prove_compiled(params, x, seed, sigma, _fixed_rng(wire_bytes)) == (
            want, unequal[0] if unequal else -1)
        if unequal:
            monkeypatch.setattr(kernels, "BACKEND", "numba")
            with pytest.raises(InvalidParameters, match=f"key {unequal[0]} has A"):
                S.prove(params, x, seed, sigma)


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
def test_compiled_prover_skips_p_in_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Server 1's share is read from its AES-CTR stream as :func:`secemb.fss.field.expand` reads it:
    words whose top 61 bits are ``p`` are skipped (``prove_core`` on a stream with such words put
    in equals it on the stream without them), a stream that runs out is answered ``SHORT``, and
    ``prove`` then draws a stream twice as long (``ctr_streams`` made to give only ``p``'s once)."""
    from secemb.fss import _rangeproof_kernels
    from secemb.fss._sketchproof_kernels import SHORT, prove_core

    params = S.SketchParams(250)
    n = params.proof_length
    x = _array([_honest_key() for _ in range(250)])
    coefficients = np.frombuffer(os.urandom(16 * (params.calls + params.chunk)), "<u8")
    wires = np.frombuffer(os.urandom(32 * params.wires), "<u8")
    stream = F.expand(os.urandom(16), n) << np.uint64(3)  # n words, none of them p
    skipped = np.uint64(P << 3)
    spiked = np.insert(stream, [0, 5, 5, n - 1], [skipped, skipped | np.uint64(7), skipped, skipped | np.uint64(1)])
    spiked[7] |= np.uint64(5)  # the low 3 bits are dropped
    outs = []
    for words in (stream, spiked):
        out = np.empty(n, np.uint64)
        assert prove_core(x, coefficients, wires, params.calls, words, params.chunk, out) == -1
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])
    assert prove_core(x, coefficients, wires, params.calls, spiked[: n + 3], params.chunk, np.empty(n, np.uint64)) \
        == SHORT

    real, lengths = _rangeproof_kernels.ctr_streams, []

    def only_p_once(keys: np.ndarray, out: np.ndarray, stride: int, nbytes: int) -> None:
        real(keys, out, stride, nbytes)
        if not lengths:
            out[:nbytes].view(np.uint64)[:] = skipped
        lengths.append(nbytes)

    monkeypatch.setattr(_rangeproof_kernels, "ctr_streams", only_p_once)
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    seed, sigma, wire_bytes = os.urandom(16), os.urandom(16), os.urandom(32 * params.wires)
    got = S.prove(params, x, seed, sigma, _rng=_fixed_rng(wire_bytes))
    assert lengths == [8 * n, 16 * n]
    assert got == S._share(params, S._prove_inputs(params, x, seed, sigma, _fixed_rng(wire_bytes)), sigma)


def test_empty_batch(backend: str) -> None:
    """No devices: empty messages and verdicts, no error."""
    params = S.SketchParams(250)
    x = np.zeros((0, 250, 3), np.uint64)
    v0 = S.verifier_messages(params, x, S.parse(params, []), [], [])
    v1 = S.verifier_messages(params, x, S.server1_shares(params, []), [], [])
    assert v0.shape == v1.shape == (0, params.verifier_length)
    assert S.decide(params, v0, v1, []).shape == (0,)
    assert S.encode_verifier_messages(params, v1) == b""
    v, refused = S.parse_verifier_messages(params, b"", 0)
    assert v.shape == (0, params.verifier_length) and refused.shape == (0,)


def _walk(path: PathKeys, ex: Expanded, per_user: int) -> np.ndarray:
    check = SketchCheck(ex, per_user)
    for r0, r1, leaves in leaf_groups(path):
        check.add(r0, r1, leaves)
    return check.values


@pytest.mark.parametrize(("domain", "per_user", "flip"), [(20, 25, False), (20, 25, True), (300, 4, True)])
def test_end_to_end_with_real_keys(domain: int, per_user: int, flip: bool, backend: str) -> None:
    """Real DPF keys (:func:`secemb.fss.gen_path`) walked by both servers into :mod:`secemb.fss.sketch`'s
    sketches, each device proving its own :func:`~secemb.fss.sketch.device_inputs`: the honest devices pass;
    with ``flip``, one key carries the ``two-points`` attack (its last seed correction word's bit 1 flipped for
    both servers, so its leaves differ at two positions) and its device fails, the others pass."""
    users = 3
    alphas = np.array([secrets.randbelow(domain) for _ in range(users * per_user)])
    p0, p1, state = fss.gen_path(alphas, domain)
    bad = per_user + secrets.randbelow(per_user)  # a key of device 1
    if flip:
        cw = p0.cw_seed.copy()
        cw[bad, -1, 0] ^= np.uint64(2)
        p0, p1 = (PathKeys(p.params, p.party, p.roots, cw, p.cw_tl, p.cw_tr) for p in (p0, p1))
    mp = padded_leaves(p0.params)
    params = S.SketchParams(per_user)
    cus, sigmas, queries = _seeds(users), _seeds(users), _seeds(users)
    ex = sketch_expand(cus, mp)
    x0 = server_inputs(_walk(p0, ex, per_user), 0).reshape(users, per_user, 3)
    x1 = server_inputs(_walk(p1, ex, per_user), 1).reshape(users, per_user, 3)
    msgs = []
    for u in range(users):
        keys = slice(u * per_user, (u + 1) * per_user)
        claim = device_inputs(cus[u], mp, alphas[keys], state.leaf0[keys], state.leaf1[keys])
        msgs.append(S.prove(params, claim, cus[u], sigmas[u]))  # what the device can prove: its leaves at alpha
    v0 = S.verifier_messages(params, x0, S.parse(params, msgs), cus, queries)
    v1 = S.verifier_messages(params, x1, S.server1_shares(params, sigmas), cus, queries)
    assert S.decide(params, v0, v1, cus).tolist() == [True, not flip, True]
