"""Issue 34 (session 30, helper K): :func:`secemb.fss.field.stream_words` derives its seeds'
AES-256 keys ``SHA-256(b"secemb.CtrDrbg" || seed)`` in one :func:`secemb.fss.hashing.sha256_many`
call from ``field._BATCH_KEYS`` seeds on (server 1's bound parse: 20 seeds), one hashlib call a
seed below; the prefix is :data:`secemb.randomness.DRBG_DOMAIN`, defined once.

The words are checked against AES-256-CTR streams computed here with ``cryptography`` and
``hashlib`` from the documented key (not through the module), on both backends, below, at and
above the batch size; a seed that is not 16 bytes is refused on both backends (the compiled path
used to key any length).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb import randomness
from secemb.errors import InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels, sketch, sketchproof

BACKENDS = ["numpy", "numba"] if kernels.available() else ["numpy"]


def _words(seed: bytes, count: int) -> list[int]:
    """The first ``count`` little-endian 64-bit words of AES-256-CTR from counter 0 under
    ``SHA-256(b"secemb.CtrDrbg" || seed)`` (randomness.CtrDrbg's documented stream)."""
    key = hashlib.sha256(b"secemb.CtrDrbg" + seed).digest()
    enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    return np.frombuffer(enc.update(bytes(8 * count)), "<u8").tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 3, 4, 5, 20])
def test_stream_words_are_the_documented_streams_below_at_and_above_the_batch(
        n: int, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    seeds = [os.urandom(16) for _ in range(n)]
    got = F.stream_words(seeds, 37)
    assert got.shape == (n, 37) and got.dtype == np.uint64
    assert got.tolist() == [_words(seed, 37) for seed in seeds]


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
@pytest.mark.parametrize(("n", "batches"), [(1, 0), (3, 0), (4, 1), (20, 1)])
def test_compiled_keys_take_one_sha256_many_batch_from_batch_size_on(
        n: int, batches: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch is taken where it pays (one call for all the seeds, under the shared prefix), and
    only there; its keys are each seed's ``drbg_key``."""
    assert F._BATCH_KEYS == 4
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    calls: list[tuple[bytes, int]] = []
    real = F.sha256_many

    def counted(prefix: bytes, suffixes: np.ndarray) -> np.ndarray:
        calls.append((prefix, suffixes.shape[0]))
        out = real(prefix, suffixes)
        assert out.tolist() == [list(hashlib.sha256(b"secemb.CtrDrbg" + bytes(row)).digest()) for row in suffixes]
        return out

    monkeypatch.setattr(F, "sha256_many", counted)
    seeds = [os.urandom(16) for _ in range(n)]
    assert F.stream_words(seeds, 9).tolist() == [_words(seed, 9) for seed in seeds]
    assert calls == [(b"secemb.CtrDrbg", n)] * batches


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [15, 17, 0])
@pytest.mark.parametrize("at", [0, 3, 4])
def test_stream_words_refuse_a_seed_not_16_bytes_on_both_backends(
        at: int, bad: int, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    seeds = [os.urandom(16) for _ in range(5)]
    seeds[at] = os.urandom(bad)
    with pytest.raises(InvalidParameters, match="seed must be 16 bytes"):
        F.stream_words(seeds, 8)


def test_the_drbg_prefix_is_defined_once() -> None:
    assert randomness.DRBG_DOMAIN == b"secemb.CtrDrbg"
    assert sketch.DRBG_DOMAIN is randomness.DRBG_DOMAIN
    assert F.DRBG_DOMAIN is randomness.DRBG_DOMAIN
    assert sketchproof.DRBG_DOMAIN is randomness.DRBG_DOMAIN
    seed = os.urandom(16)
    assert randomness.drbg_key(seed) == hashlib.sha256(b"secemb.CtrDrbg" + seed).digest()
