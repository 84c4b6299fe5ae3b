"""Session 34 (helper P2): the sketch check's inputs as arrays, one batch.

``sketch.server_inputs_many`` stacks the usual batch (native uint64 arrays of one shape) in one call,
checked by its distinct (type, shape, dtype); ``checks.query_seed_rows`` / ``binding_rows`` give the
query seeds and bindings as rows; ``sketchproof``'s verifier takes seeds, query seeds and ``sigma`` as
rows uint8 (n, 16) as well as ``bytes``.  References here: per-device ``server_inputs``, Python integers,
:func:`hmac.digest` / :func:`hashlib.sha256` of the spelled-out messages, and the same calls on ``bytes``."""

from __future__ import annotations

import hashlib
import hmac
import struct

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import field as F
from secemb.fss import sketch as K
from secemb.fss import sketchproof as S
from secemb.protocols.secemb import checks

P = F.P


def _stream(label: str, n: int) -> bytes:
    return hashlib.shake_256(label.encode()).digest(n)


def _values(n: int, keys: int, label: str) -> list[np.ndarray]:
    """``n`` arrays uint64 (keys, 3) of field elements (0 and p - 1 among them), views of one batch as
    a server's walk leaves them."""
    raw = np.frombuffer(_stream(label, 8 * n * keys * 3), "<u8") % np.uint64(P)
    batch = raw.astype(np.uint64).reshape(n, keys, 3)
    batch.reshape(-1)[::5] = P - 1
    batch.reshape(-1)[2::7] = 0
    return list(batch)


@pytest.mark.parametrize("party", [0, 1])
@pytest.mark.parametrize("n", [1, 2, 20])
def test_server_inputs_many_of_one_shape_is_each_devices_server_inputs(backend: str, party: int, n: int) -> None:
    """The one-call stack (native uint64, one shape) is ``server_inputs`` of each device (server 1:
    ``p - v``, 0 for 0, in Python integers), and the same as the array-by-array path (one array
    big-endian: another dtype, checked and stacked one by one); the devices' arrays unchanged."""
    values = _values(n, 13, f"si/{n}")
    kept = [v.copy() for v in values]
    got = K.server_inputs_many(values, party)
    want = [[[(-int(w)) % P if party else int(w) for w in r] for r in v.tolist()] for v in values]
    assert got.dtype == np.uint64 and got.shape == (n, 13, 3) and got.tolist() == want
    assert np.array_equal(got, np.stack([K.server_inputs(v, party) for v in values]))
    mixed = values[:-1] + [values[-1].astype(">u8")]
    assert np.array_equal(K.server_inputs_many(mixed, party), got)
    for v, k in zip(values, kept, strict=True):
        assert np.array_equal(v, k)


@pytest.mark.parametrize("party", [0, 1])
def test_server_inputs_many_refusals_keep_their_text(backend: str, party: int) -> None:
    """What the one-call path does not take goes the array-by-array way, with its errors: another
    shape among them, another dtype, a non-array, an element p, an empty batch."""
    a, b = _values(2, 4, "ref")
    cases = {
        "shape": ([a, np.zeros((5, 3), np.uint64)], "of one shape"),
        "width": ([a, b[:, :2].copy()], "of one shape"),
        "widths": ([a[:, :2].copy(), b[:, :2].copy()], r"below p, got uint64 \(4, 2\)"),
        "3-d": ([a[None], b[None]], "arrays below p"),
        "uint32": ([a, b.astype(np.uint32)], "arrays below p"),
        "list": ([a, b.tolist()], "arrays below p"),
        "empty": ([], "arrays below p"),
    }
    bad = b.copy()
    bad[1, 1] = P
    cases["p"] = ([a, bad], "below p")
    for name, (batch, text) in cases.items():
        with pytest.raises(InvalidParameters, match=text):
            K.server_inputs_many(batch, party)
        assert name  # named for the failure report
    with pytest.raises(InvalidParameters, match="party"):
        K.server_inputs_many([a, b], 2)


def _hmac16(key: bytes, msg: bytes) -> bytes:
    return hmac.digest(key, msg, "sha256")[:16]


def test_query_seed_rows_are_the_query_seeds() -> None:
    """Row ``i`` is ``HMAC-SHA256(s_round, b"secemb-sketch-query" || u64 round || u64 user)[:16]``
    (spelled out with :func:`hmac.digest`), and ``query_seeds`` its rows as bytes."""
    s_round = _stream("round", 32)
    users = [0, 3, 17, 2**40 + 5]
    rows = checks.query_seed_rows(s_round, 9, users)
    want = [_hmac16(s_round, b"secemb-sketch-query" + struct.pack("<QQ", 9, u)) for u in users]
    assert rows.dtype == np.uint8 and rows.shape == (4, 16) and rows.flags.c_contiguous
    assert [r.tobytes() for r in rows] == want == checks.query_seeds(s_round, 9, users)
    assert checks.query_seed_rows(s_round, 9, []).shape == (0, 16)


def test_sketch_half_rows_are_the_halves() -> None:
    """``[b, i]`` is ``HMAC-SHA256(s_round, b"secemb-sketch-half" || u8 b || u64 round || u64 user ||
    K)[:16]`` (spelled out), ``sketch_halves`` its rows as bytes, and the XOR of the two rows the
    sketch seed ``c_u`` as bytes XOR gives it."""
    s_round = _stream("round", 32)
    users = [1, 4, 2**33]
    digests = [_stream(f"K{u}", 32) for u in users]
    rows = checks.sketch_half_rows(s_round, 6, users, digests)
    want = [[_hmac16(s_round, b"secemb-sketch-half" + bytes([b]) + struct.pack("<QQ", 6, u) + d)
             for u, d in zip(users, digests, strict=True)] for b in (0, 1)]
    assert rows.dtype == np.uint8 and rows.shape == (2, 3, 16)
    assert [[r.tobytes() for r in half] for half in rows] == want
    assert checks.sketch_halves(s_round, 6, users, digests) == list(zip(*want, strict=True))
    assert [r.tobytes() for r in rows[0] ^ rows[1]] == [bytes(a ^ b for a, b in zip(h0, h1, strict=True))
                                                         for h0, h1 in zip(*want, strict=True)]
    assert checks.sketch_half_rows(s_round, 6, [], []).shape == (2, 0, 16)
    with pytest.raises(InvalidParameters):
        checks.sketch_half_rows(s_round, 6, users, digests[:2])


def test_binding_rows_are_the_bindings_of_any_layout() -> None:
    """Row ``i`` is ``SHA-256(b"secemb-sketch-bind" || u64 round || c_u || sigma)`` (spelled out), of
    C-contiguous rows and of strided views alike; ``bindings`` of the bytes the same."""
    n = 5
    seeds = [_stream(f"c{i}", 16) for i in range(n)]
    sigmas = [_stream(f"s{i}", 16) for i in range(n)]
    want = [hashlib.sha256(b"secemb-sketch-bind" + struct.pack("<Q", 4) + c + s).digest()
            for c, s in zip(seeds, sigmas, strict=True)]
    c_rows = np.frombuffer(b"".join(seeds), np.uint8).reshape(n, 16)
    s_rows = np.frombuffer(b"".join(sigmas), np.uint8).reshape(n, 16)
    wide = np.zeros((n, 40), np.uint8)
    wide[:, 3:19], wide[:, 21:37] = c_rows, s_rows
    for c, s in ((c_rows, s_rows), (wide[:, 3:19], wide[:, 21:37]), (np.asfortranarray(c_rows), s_rows)):
        got = checks.binding_rows(4, c, s)
        assert got.shape == (n, 32) and [r.tobytes() for r in got] == want
    assert checks.bindings(4, seeds, sigmas) == want
    assert [checks.binding(4, c, s) for c, s in zip(seeds, sigmas, strict=True)] == want
    for c, s in ((c_rows, s_rows[:-1]), (c_rows[:, :15], s_rows), (c_rows.astype(np.int8), s_rows),
                 (seeds, s_rows), (c_rows.view(np.uint16), s_rows)):
        with pytest.raises(InvalidParameters, match="binding rows"):
            checks.binding_rows(4, c, s)  # type: ignore[arg-type]


def _batch(n: int) -> tuple:
    """A batch of ``n`` honest devices' proofs: params, x0, x1, seeds, sigmas, queries, proof messages."""
    keys = 6
    params = S.SketchParams(keys)
    rz = [int.from_bytes(_stream(f"rz{i}", 16), "little") % P for i in range(2 * n * keys)]
    xs = np.array([(r * z % P, r * r % P * z % P, z) for r, z in zip(rz[::2], rz[1::2], strict=True)],
                  np.uint64).reshape(n, keys, 3)
    seeds, sigmas, queries = ([_stream(f"{w}{d}", 16) for d in range(n)] for w in "csq")
    counter = [0]

    def rng(k: int) -> bytes:
        counter[0] += 1
        return _stream(f"rng{counter[0]}", k)

    msgs = [S._share(params, S._prove_inputs(params, x, c, s, rng), s)
            for x, c, s in zip(xs, seeds, sigmas, strict=True)]
    x0 = np.array(_values(n, keys, "x0"), np.uint64)
    return params, x0, F.sub(xs, x0), seeds, sigmas, queries, msgs


def _rows(values: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(values), np.uint8).reshape(len(values), 16)


@pytest.mark.parametrize("n", [1, 3])
def test_the_verifier_of_seed_rows_is_the_verifier_of_bytes(backend: str, n: int) -> None:
    """``server1_shares``, ``verifier_messages``, ``decide`` and ``verify`` give the same elements and
    verdicts for the seeds, query seeds and ``sigma`` as rows (contiguous or strided) as for bytes;
    one device's bent server-1 message fails it alone on both."""
    params, x0, x1, seeds, sigmas, queries, msgs = _batch(n)
    wide = np.zeros((n, 3, 20), np.uint8)
    for j, v in enumerate((seeds, sigmas, queries)):
        wide[:, j, 2:18] = _rows(v)
    for c, s, q in ((_rows(seeds), _rows(sigmas), _rows(queries)),
                    (wide[:, 0, 2:18], wide[:, 1, 2:18], wide[:, 2, 2:18])):
        p1 = S.server1_shares(params, sigmas)
        assert np.array_equal(S.server1_shares(params, s), p1)
        v1 = S.verifier_messages(params, x1, p1, seeds, queries)
        assert np.array_equal(S.verifier_messages(params, x1, p1, c, q), v1)
        p0 = S.parse(params, msgs)
        v0 = S.verifier_messages(params, x0, p0, seeds, queries)
        assert np.array_equal(S.verifier_messages(params, x0, p0, c, q), v0)
        assert S.decide(params, v0, v1, seeds).all() and S.decide(params, v0, v1, c).all()
        bent = v1.copy()
        bent[n - 1, -1] = (int(bent[n - 1, -1]) + 1) % P
        want = [True] * (n - 1) + [False]
        assert S.decide(params, v0, bent, c).tolist() == S.decide(params, v0, bent, seeds).tolist() == want
        assert S.verify(params, x0, p0, c, q, bent).tolist() == S.verify(params, x0, p0, seeds, queries, bent).tolist()
        assert S.verify(params, x0, p0, c, q, bent).tolist() == want


def test_the_verifier_refuses_rows_of_another_shape_or_dtype(backend: str) -> None:
    """Rows of another count, width or dtype: InvalidParameters naming the argument, as for bytes."""
    params, x0, x1, seeds, sigmas, queries, msgs = _batch(2)
    p0 = S.parse(params, msgs)
    good = _rows(seeds)
    for bad in (good[:1], good[:, :15], good.astype(np.int8), good.view(np.uint16), np.zeros((2, 16), np.uint64)):
        with pytest.raises(InvalidParameters, match="queries"):
            S.verifier_messages(params, x0, p0, seeds, bad)
        if len(bad) == 2:  # the seeds (the sigmas) set n: one row is a batch of one
            with pytest.raises(InvalidParameters, match="seeds"):
                S.verifier_messages(params, x0, p0, bad, queries)
            with pytest.raises(InvalidParameters, match="sigma"):
                S.server1_shares(params, bad)
    with pytest.raises(InvalidParameters, match="queries: expected 2 seeds, got 1"):
        S.verifier_messages(params, x0, p0, seeds, queries[:1])  # the bytes' text, as before
    with pytest.raises(InvalidParameters, match=r"queries\[1\] must be 16 bytes"):
        S.verifier_messages(params, x0, p0, good, [queries[0], queries[1][:15]])
