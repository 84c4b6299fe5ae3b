"""Issue 37 (session 30, helper G): a round's batch of devices proves at once --
:func:`secemb.fss.sketch.device_inputs_many` and :func:`secemb.fss.sketchproof.prove_many` give each device the
bytes its own :func:`~secemb.fss.sketch.device_inputs` and :func:`~secemb.fss.sketchproof.prove` give.

The expected values come from the one-device functions on the numpy backend (the reference, itself checked against
Python integers and the servers' verifier in ``test_s29_sketch_device.py`` and ``test_s29_sketchproof.py``); each
device's wire seeds from its own deterministic source, which must be drawn once, in the device's order.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import sketchproof as S
from secemb.fss.sketch import device_inputs, device_inputs_many
from secemb.randomness import CtrDrbg

P = F.P
BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(not kernels.available(),
                                                                    reason="numba or AES-NI missing"))]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(kernels, "BACKEND", request.param)
    yield request.param


def _batch(n: int, keys: int, mp: int) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray]:
    """``n`` devices' seeds, points (n, K) in ``[0, mp)`` (the domain's last point among them) and leaf words
    (n, K, 2) whose two parties' words differ at each key (an honest device's)."""
    gen = np.random.default_rng(secrets.randbits(64))
    alphas = gen.integers(0, mp, (n, keys))
    alphas[0, 0] = mp - 1
    leaf0 = gen.integers(0, 1 << 64, (n, keys, 2), dtype=np.uint64)
    leaf1 = leaf0 ^ gen.integers(1, 1 << 64, (n, keys, 2), dtype=np.uint64)
    return [os.urandom(16) for _ in range(n)], alphas, leaf0, leaf1


def _reference(monkeypatch: pytest.MonkeyPatch, fn: Callable[[], object]) -> object:
    """``fn()`` on the numpy backend, whatever the test's."""
    with monkeypatch.context() as m:
        m.setattr(kernels, "BACKEND", "numpy")
        return fn()


@pytest.mark.parametrize(("n", "keys", "mp"), [(1, 1, 1), (5, 250, 1 << 12), (3, 200, 1000)])
def test_device_inputs_many_equal_each_devices_own(backend: str, n: int, keys: int, mp: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    seeds, alphas, leaf0, leaf1 = _batch(n, keys, mp)
    got = device_inputs_many(seeds, mp, alphas, leaf0, leaf1)
    want = _reference(monkeypatch, lambda: np.stack([device_inputs(seeds[i], mp, alphas[i], leaf0[i], leaf1[i])
                                                     for i in range(n)]))
    assert got.dtype == np.uint64 and got.shape == (n, keys, 3)
    np.testing.assert_array_equal(got, want)
    # and the one-device function on this backend (it runs the batch's compiled call for one device)
    np.testing.assert_array_equal(np.stack([device_inputs(seeds[i], mp, alphas[i], leaf0[i], leaf1[i])
                                            for i in range(n)]), want)


def test_device_inputs_many_refuses_bad_arguments(backend: str) -> None:
    seeds, alphas, leaf0, leaf1 = _batch(2, 4, 8)
    with pytest.raises(InvalidParameters, match=r"points must be integers \(2, K\)"):
        device_inputs_many(seeds, 8, alphas[0], leaf0, leaf1)  # one device's points for two seeds
    with pytest.raises(InvalidParameters, match=r"points must be integers \(3, K\)"):
        device_inputs_many([*seeds, seeds[0]], 8, alphas, leaf0, leaf1)
    with pytest.raises(InvalidParameters, match="leaf1 must be uint64"):
        device_inputs_many(seeds, 8, alphas, leaf0, leaf1[:, :3])
    with pytest.raises(InvalidParameters, match="leaf0 must be uint64"):
        device_inputs_many(seeds, 8, alphas, leaf0.astype(">u8"), leaf1)
    with pytest.raises(InvalidParameters, match="16 bytes"):
        device_inputs_many([seeds[0], seeds[1][:15]], 8, alphas, leaf0, leaf1)
    bad = alphas.copy()
    bad[1, 3] = 8
    with pytest.raises(InvalidParameters, match=r"points must be in \[0, 8\)"):
        device_inputs_many(seeds, 8, bad, leaf0, leaf1)
    assert device_inputs_many([], 8, np.zeros((0, 4), np.int64), leaf0[:0], leaf1[:0]).shape == (0, 4, 3)


class _Source:
    """A device's deterministic source of secret bytes that records its draws."""

    def __init__(self, name: bytes) -> None:
        self._drbg, self.draws = CtrDrbg(name), []

    def __call__(self, n: int) -> bytes:
        self.draws.append(n)
        return self._drbg(n)


@pytest.mark.parametrize(("n", "keys"), [(1, 1), (6, 250), (4, 200), (3, 10)])
def test_prove_many_equals_each_devices_prove(backend: str, n: int, keys: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Bit for bit the reference prover's share of each device, each device's source drawn once for its wire seeds
    (and the same bytes as this backend's ``prove`` one by one)."""
    params, mp = S.SketchParams(keys), 1 << 10
    seeds, alphas, leaf0, leaf1 = _batch(n, keys, mp)
    xs = device_inputs_many(seeds, mp, alphas, leaf0, leaf1)
    sigmas = [os.urandom(16) for _ in range(n)]
    sources = [_Source(b"device %d" % i) for i in range(n)]
    got = S.prove_many(params, xs, seeds, sigmas, sources)
    assert [s.draws for s in sources] == [[32 * params.wires]] * n
    want = _reference(monkeypatch, lambda: [S.prove(params, xs[i], seeds[i], sigmas[i], _rng=CtrDrbg(b"device %d" % i))
                                            for i in range(n)])
    assert got == want
    assert got == [S.prove(params, xs[i], seeds[i], sigmas[i], _rng=CtrDrbg(b"device %d" % i)) for i in range(n)]
    assert all(len(m) == params.proof_bytes for m in got)


def test_prove_many_names_a_cheating_device(backend: str) -> None:
    params, mp = S.SketchParams(20), 64
    seeds, alphas, leaf0, leaf1 = _batch(3, 20, mp)
    xs = device_inputs_many(seeds, mp, alphas, leaf0, leaf1)
    xs[2, 7, 0] = (xs[2, 7, 0] + np.uint64(1)) % np.uint64(P)  # A changed: A^2 != B C at key 7 of device 2
    with pytest.raises(InvalidParameters, match="device 2's key 7 has A"):
        S.prove_many(params, xs, seeds, [os.urandom(16)] * 3, [os.urandom] * 3)


def test_prove_many_refuses_bad_arguments(backend: str) -> None:
    params = S.SketchParams(4)
    xs, seeds = np.zeros((2, 4, 3), np.uint64), [os.urandom(16)] * 2
    with pytest.raises(InvalidParameters, match=r"xs must be a uint64 array \(2, 4, 3\)"):
        S.prove_many(params, xs[:1], seeds, seeds, [os.urandom] * 2)
    with pytest.raises(InvalidParameters, match="below p"):
        S.prove_many(params, xs + np.uint64(P), seeds, seeds, [os.urandom] * 2)
    with pytest.raises(InvalidParameters, match="2 seeds, 1 sigmas and 2 sources"):
        S.prove_many(params, xs, seeds, seeds[:1], [os.urandom] * 2)
    with pytest.raises(InvalidParameters, match=r"sigmas\[1\] must be 16 bytes"):
        S.prove_many(params, xs, seeds, [seeds[0], b"short"], [os.urandom] * 2)
    with pytest.raises(InvalidParameters, match=r"seeds\[0\] must be 16 bytes"):
        S.prove_many(params, xs, [b"x" * 15, seeds[1]], seeds, [os.urandom] * 2)
    assert S.prove_many(params, xs[:0], [], [], []) == []


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
def test_prove_many_draws_a_longer_stream_for_a_device_whose_stream_runs_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """Server 1's stream of device 1 made all ``p`` words (skipped, so the proof runs out of them): that device alone
    is proved again on a stream twice as long, with the wire seeds it drew once; every device's bytes are still the
    reference's."""
    from secemb.fss import _rangeproof_kernels

    monkeypatch.setattr(kernels, "BACKEND", "numba")
    params, mp, n = S.SketchParams(250), 1 << 10, 3
    nbytes = 8 * params.proof_length
    seeds, alphas, leaf0, leaf1 = _batch(n, 250, mp)
    xs = device_inputs_many(seeds, mp, alphas, leaf0, leaf1)
    sigmas = [os.urandom(16) for _ in range(n)]
    real, calls = _rangeproof_kernels.ctr_streams, []

    def device_1_short_once(keys: np.ndarray, out: np.ndarray, stride: int, size: int) -> None:
        real(keys, out, stride, size)
        if not calls:
            out[stride : stride + size].view(np.uint64)[:] = np.uint64(P << 3)
        calls.append((len(keys), size))

    monkeypatch.setattr(_rangeproof_kernels, "ctr_streams", device_1_short_once)
    got = S.prove_many(params, xs, seeds, sigmas, [CtrDrbg(b"device %d" % i) for i in range(n)])
    assert calls == [(n, nbytes), (1, 2 * nbytes)]
    monkeypatch.setattr(_rangeproof_kernels, "ctr_streams", real)
    want = _reference(monkeypatch, lambda: [S.prove(params, xs[i], seeds[i], sigmas[i], _rng=CtrDrbg(b"device %d" % i))
                                            for i in range(n)])
    assert got == want
