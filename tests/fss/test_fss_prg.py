"""Known-answer tests of the fixed-key AES PRG against plain AES from ``cryptography``.

Every expected value is computed independently: a fresh ``Cipher`` per call, keys from
``hashlib``, XOR on Python ``bytes``.  Sizes around :data:`CHUNK_BLOCKS` exercise the
chunk-boundary logic of ``encrypt_into`` (its ``update_into`` slack handling)."""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st

from secemb.fss import prg
from secemb.fss.prg import CHUNK_BLOCKS, FixedKeyAES, aes_for, fixed_key

#: every fixed-key name the DPF uses (tree levels and the conversions of each tag)
USED_NAMES = [
    "tree/left",
    "tree/right",
    "convert/point",
    "convert/secemb/retrieval",
    "convert/secemb/aggregation",
]


def _plain_ecb(key: bytes, data: bytes) -> bytes:
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(data) + enc.finalize()


def _plain_mmo(name: str, data: bytes) -> bytes:
    key = hashlib.sha256(b"secemb/fss/" + name.encode()).digest()[:16]
    ct = _plain_ecb(key, data)
    return (
        bytes(a ^ b for a, b in zip(ct, data))
        if len(data) < 4096
        else (np.frombuffer(ct, np.uint8) ^ np.frombuffer(data, np.uint8)).tobytes()
    )


def _words(blocks: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(
        0, 2**64, (blocks, 2), dtype=np.uint64, endpoint=False
    )


@pytest.mark.parametrize("name", USED_NAMES + ["", "x", "ünïcode/名前"])
def test_fixed_key_is_sha256_prefix(name: str) -> None:
    want = hashlib.sha256(b"secemb/fss/" + name.encode("utf-8")).digest()[:16]
    assert fixed_key(name) == want
    assert len(fixed_key(name)) == 16


def test_fixed_key_known_answer() -> None:
    # SHA-256(b"secemb/fss/tree/left")[:16] and ".../tree/right", computed once with
    # `python -c 'import hashlib; print(hashlib.sha256(b"secemb/fss/tree/left").hexdigest())'`
    assert fixed_key("tree/left").hex() == "cbce9bc90baa81fb2b876df48576e03a"
    assert fixed_key("tree/right").hex() == "f433f95a3cf835cb2e39c6c1b054fcc0"
    assert fixed_key("tree/left") != fixed_key("tree/right")
    assert len({fixed_key(n) for n in USED_NAMES}) == len(USED_NAMES)


def test_aes_known_answer_fips197() -> None:
    """Sanity of the reference itself: FIPS-197 Appendix C.1."""
    key = bytes(range(16))
    pt = bytes.fromhex("00112233445566778899aabbccddeeff")
    assert _plain_ecb(key, pt).hex() == "69c4e0d86a7b0430d8cdb78070b4c55a"


@pytest.mark.parametrize(
    "blocks",
    [
        0,
        1,
        2,
        3,
        CHUNK_BLOCKS - 1,
        CHUNK_BLOCKS,
        CHUNK_BLOCKS + 1,
        2 * CHUNK_BLOCKS,
        2 * CHUNK_BLOCKS + 3,
    ],
)
def test_mmo_equals_plain_aes_xor_input(blocks: int) -> None:
    x = _words(blocks, blocks)
    got = aes_for("tree/left").mmo(x)
    assert got.shape == x.shape and got.dtype == np.uint64
    assert got.tobytes() == _plain_mmo("tree/left", x.tobytes())


@pytest.mark.parametrize("blocks", [0, 1, CHUNK_BLOCKS, CHUNK_BLOCKS + 1])
def test_encrypt_into_equals_plain_aes(blocks: int) -> None:
    x = _words(blocks, 7)
    out = np.empty_like(x)
    res = aes_for("convert/point").encrypt_into(x, out)
    assert res is out
    assert out.tobytes() == _plain_ecb(fixed_key("convert/point"), x.tobytes())


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
@pytest.mark.parametrize("blocks", list(range(12)))
def test_encrypt_into_chunk_boundaries(
    monkeypatch: pytest.MonkeyPatch, chunk: int, blocks: int
) -> None:
    """With tiny chunks every boundary case (last chunk of 1 block, exact multiple, one
    spare block) happens many times."""
    monkeypatch.setattr(prg, "CHUNK_BLOCKS", chunk)
    x = _words(blocks, 100 * chunk + blocks)
    got = FixedKeyAES("tree/right").mmo(x)
    assert got.tobytes() == _plain_mmo("tree/right", x.tobytes())


@pytest.mark.parametrize("blocks", [1, 2, CHUNK_BLOCKS, CHUNK_BLOCKS + 1])
def test_encrypt_into_never_writes_outside_its_output(blocks: int) -> None:
    """``update_into`` needs one block of slack; it must never be taken from the caller's
    neighbouring memory."""
    x = _words(blocks, 3)
    big = np.full((blocks + 2, 2), 0xA5A5A5A5A5A5A5A5, np.uint64)
    dst = big[1:-1]
    aes_for("tree/left").encrypt_into(x, dst)
    assert np.all(big[0] == 0xA5A5A5A5A5A5A5A5) and np.all(
        big[-1] == 0xA5A5A5A5A5A5A5A5
    )
    assert dst.tobytes() == _plain_ecb(fixed_key("tree/left"), x.tobytes())


def test_mmo_into_given_output_and_multidimensional_shapes() -> None:
    x = _words(3 * 5, 11).reshape(3, 5, 2)
    out = np.zeros_like(x)
    res = aes_for("tree/right").mmo(x, out=out)
    assert res is out
    assert out.tobytes() == _plain_mmo("tree/right", x.tobytes())
    for shape in ((0, 2), (4, 0, 2), (0,)):
        empty = np.zeros(shape, np.uint64)
        assert aes_for("tree/right").mmo(empty).shape == shape


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 40).flatmap(lambda n: st.binary(min_size=16 * n, max_size=16 * n)),
    st.sampled_from(USED_NAMES),
)
def test_mmo_known_answer_for_random_inputs(data: bytes, name: str) -> None:
    x = np.frombuffer(data, "<u8").astype(np.uint64).reshape(-1, 2)
    assert aes_for(name).mmo(x).astype("<u8").tobytes() == _plain_mmo(name, data)


def test_word_layout_is_the_aes_block() -> None:
    """Word (lo, hi) is the 16 bytes lo_le || hi_le: bit 0 of lo is bit 0 of byte 0."""
    x = np.array([[1, 0]], np.uint64)
    block = (1).to_bytes(16, "little")
    assert aes_for("tree/left").mmo(x).tobytes() == _plain_mmo("tree/left", block)


def test_aes_for_is_cached_per_name() -> None:
    assert aes_for("tree/left") is aes_for("tree/left")
    assert aes_for("tree/left") is not aes_for("tree/right")


def test_encryptor_is_per_thread() -> None:
    """Several threads hammering one instance get correct, independent results."""
    aes = FixedKeyAES("convert/secemb/retrieval")
    inputs = [_words(5000 + 17 * i, 50 + i) for i in range(6)]
    results: list[bytes | None] = [None] * len(inputs)

    def work(i: int) -> None:
        for _ in range(5):
            results[i] = aes.mmo(inputs[i]).tobytes()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, r in zip(inputs, results):
        assert r == _plain_mmo("convert/secemb/retrieval", x.tobytes())
