"""Seed expansion: the documented AES-256-CTR stream, computed here independently."""

from __future__ import annotations

from hashlib import sha256

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.errors import InvalidParameters
from secemb.randomness import CtrDrbg, expand_seed


def _stream(seed: bytes, n: int) -> bytes:
    key = sha256(b"secemb.CtrDrbg" + seed).digest()
    return Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(n))


@pytest.mark.parametrize(("shape", "dtype"), [((1,), np.uint8), ((250, 65), np.uint32), ((3, 5, 7), np.uint64),
                                              ((0,), np.uint32), ((17,), np.uint16)])
def test_expand_seed_is_aes_ctr_under_the_hashed_seed(shape: tuple[int, ...], dtype: type) -> None:
    seed = bytes(range(16))
    got = expand_seed(seed, shape, dtype)
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    assert got.shape == shape and got.dtype == dtype and got.flags.writeable
    assert got.tobytes() == _stream(seed, n)


def test_drbg_words_continue_its_byte_stream() -> None:
    drbg = CtrDrbg(b"w" * 16)
    head = drbg(5)
    words = drbg.words((4, 3), np.uint32)
    assert head + words.tobytes() + drbg(9) == _stream(b"w" * 16, 5 + 48 + 9)


def test_expand_seed_refuses_a_seed_of_another_length() -> None:
    with pytest.raises(InvalidParameters, match="16 bytes"):
        expand_seed(b"short", (3,), np.uint32)
