"""Session 34 (issue 34, the checked retrieval's cost): with the compiled kernels ``sketch.expand``
draws the coefficients' streams, reduces them, squares them and schedules the devices' AES keys in one
compiled call (``_sketch_device_kernels.expand_core``) after the seeds' SHAKE and the streams' keys.
The same keys, ``r``, ``r^2`` and round keys as the numpy reference (``stream_words`` by
``expand_seed``, ``from_uniform_bytes``, ``mul``) and the schedules ``sketch_schedules`` writes, at
widths around the CTR pass (8 blocks) and the servers' (32), and as the specification's Python
integers (``test_s29_sketch._expansion``)."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.errors import InvalidParameters
from secemb.fss import kernels, sketch
from secemb.fss.field import P

pytestmark = pytest.mark.skipif(not kernels.available(), reason="the fused expansion is the compiled kernels' path")


def _spec(seed: bytes, mp: int) -> tuple[bytes, list[int]]:
    """``k_u`` and ``r_x`` of a seed from the module docstring's formula, in Python integers and OpenSSL."""
    d = hashlib.shake_128(b"secemb-sketch-expand" + seed).digest(32)
    enc = Cipher(algorithms.AES(hashlib.sha256(b"secemb.CtrDrbg" + d[16:]).digest()), modes.CTR(bytes(16))).encryptor()
    stream = enc.update(bytes(16 * mp))
    return d[:16], [int.from_bytes(stream[16 * x : 16 * (x + 1)], "little") % P for x in range(mp)]


@pytest.mark.parametrize("n", [1, 2, 20])
@pytest.mark.parametrize("mp", [1, 7, 8, 9, 16, 32, 37])
def test_the_fused_expansion_is_the_reference_bit_for_bit(n: int, mp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = [os.urandom(sketch.SKETCH_SEED_BYTES) for _ in range(n)]
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    fused = sketch.expand(seeds, mp)
    assert "round_keys" in fused.__dict__  # set by the fused call, not computed on first use
    rks = fused.round_keys
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    ref = sketch.expand(seeds, mp)
    for a, b in ((fused.keys, ref.keys), (fused.r, ref.r), (fused.r2, ref.r2)):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
        assert not a.flags.writeable
    want = np.empty_like(rks)
    sketch._compiled_sketch().sketch_schedules(np.ascontiguousarray(ref.keys), want)
    assert np.array_equal(rks, want) and not rks.flags.writeable
    for u in (0, n - 1):
        key, r = _spec(seeds[u], mp)
        assert fused.keys[u].tobytes() == key and fused.r[u].tolist() == r
        assert fused.r2[u].tolist() == [x * x % P for x in r]


def test_the_fused_expansion_refuses_what_the_reference_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    with pytest.raises(InvalidParameters):
        sketch.expand([bytes(16), bytes(15)], 8)
    with pytest.raises(InvalidParameters):
        sketch.expand([bytes(16)], 0)
    assert sketch.expand([], 4).r.shape == (0, 4)
