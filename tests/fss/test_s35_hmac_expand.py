"""Session 35 (helper K2, issue 34's checked retrieval): a relay server's sketch seeds ``c_u =
HMAC-SHA256(s_round, head || tail_u)[:16]`` and their expansion run as one compiled call with the SHA-NI
kernel (``sketch.hmac_expand``, ``_sketch_seed_kernels.hmac_expand_core``) where the HMAC batch and
``sketch.expand`` were two calls of several kernels.  The same seeds, keys, ``r``, ``r^2`` and round
keys as the reference -- ``hashlib``'s HMAC (``hmac.digest``) and the numpy ``expand`` -- at batch sizes
around the SHA and Keccak kernels' lane groups and widths around the CTR pass; ``Expanded.rows`` is
the expansion of those devices' seeds alone; the protocol's ``sketch_seeds_expanded`` is
``sketch_seeds`` then ``expand``."""

from __future__ import annotations

import hmac
import os

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import kernels, sketch
from secemb.protocols.secemb import checks

needs_sha = pytest.mark.skipif(not kernels.sha_compiled(), reason="the fused call is the SHA-NI kernel's path")


def _reference(key: bytes, head: bytes, tails: np.ndarray, mp: int,
               monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], sketch.Expanded]:
    """The seeds by ``hmac.digest`` row by row and their numpy ``expand``."""
    seeds = [hmac.digest(key, head + t.tobytes(), "sha256")[:16] for t in tails]
    with monkeypatch.context() as m:
        m.setattr(kernels, "BACKEND", "numpy")
        return seeds, sketch.expand(seeds, mp)


def _same(a: sketch.Expanded, b: sketch.Expanded) -> None:
    for x, y in ((a.keys, b.keys), (a.r, b.r), (a.r2, b.r2), (a.round_keys, b.round_keys)):
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


@needs_sha
@pytest.mark.parametrize("n", [1, 2, 8, 9, 16, 17, 20, 33])
@pytest.mark.parametrize("mp", [1, 8, 9, 32])
def test_the_fused_seeds_and_expansion_are_the_reference_bit_for_bit(n: int, mp: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    key, head = os.urandom(32), b"secemb-sketch" + os.urandom(8)
    tails = np.frombuffer(os.urandom(n * 40), np.uint8).reshape(n, 40)
    seeds, fused = sketch.hmac_expand(key, head, tails, mp)
    assert "round_keys" in fused.__dict__  # set by the fused call
    want_seeds, want = _reference(key, head, tails, mp, monkeypatch)
    assert seeds == want_seeds
    _same(fused, want)
    for a in (fused.keys, fused.r, fused.r2, fused.round_keys):
        assert not a.flags.writeable


@needs_sha
def test_the_fused_call_reads_strided_tails_and_refuses_what_the_reference_refuses() -> None:
    key = os.urandom(32)
    wide = np.frombuffer(os.urandom(5 * 64), np.uint8).reshape(5, 64)
    seeds, got = sketch.hmac_expand(key, b"h", wide[:, 3:43], 16)
    want_seeds, want = sketch.hmac_expand(key, b"h", np.ascontiguousarray(wide[:, 3:43]), 16)
    assert seeds == want_seeds and seeds == [hmac.digest(key, b"h" + t.tobytes(), "sha256")[:16] for t in wide[:, 3:43]]
    _same(got, want)
    with pytest.raises(InvalidParameters):
        sketch.hmac_expand(key, b"h", wide[:, 3:43], 0)
    with pytest.raises(InvalidParameters):
        sketch.hmac_expand(key, b"h", wide.view(np.uint16), 16)
    with pytest.raises(InvalidParameters):
        sketch.hmac_expand(bytes(65), b"h", wide, 16)


def test_the_reference_path_is_hmac_then_expand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    key, tails = os.urandom(32), np.frombuffer(os.urandom(3 * 40), np.uint8).reshape(3, 40)
    seeds, got = sketch.hmac_expand(key, b"x", tails, 9)
    want_seeds, want = _reference(key, b"x", tails, 9, monkeypatch)
    assert seeds == want_seeds
    for x, y in ((got.keys, want.keys), (got.r, want.r), (got.r2, want.r2)):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("lo, hi", [(0, 5), (2, 3), (1, 5), (3, 3)])
def test_rows_of_an_expansion_are_the_expansion_of_those_seeds(lo: int, hi: int) -> None:
    seeds = [os.urandom(16) for _ in range(5)]
    whole = sketch.expand(seeds, 11)
    part, alone = whole.rows(lo, hi), sketch.expand(seeds[lo:hi], 11)
    for x, y in ((part.keys, alone.keys), (part.r, alone.r), (part.r2, alone.r2), (part.round_keys, alone.round_keys)):
        assert np.array_equal(x, y) and x.shape == y.shape


def test_the_protocols_seeds_and_expansion_are_sketch_seeds_then_expand(monkeypatch: pytest.MonkeyPatch) -> None:
    s_round, users = os.urandom(32), [3, 1, 2**40, 7]
    digests = [os.urandom(32) for _ in users]
    seeds, got = checks.sketch_seeds_expanded(s_round, 12, users, digests, 32)
    want_seeds = [hmac.digest(s_round, b"secemb-sketch" + (12).to_bytes(8, "little") + u.to_bytes(8, "little") + d,
                              "sha256")[:16] for u, d in zip(users, digests, strict=True)]
    assert seeds == want_seeds == checks.sketch_seeds(s_round, 12, users, digests)
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    want = sketch.expand(want_seeds, 32)
    for x, y in ((got.keys, want.keys), (got.r, want.r), (got.r2, want.r2)):
        assert np.array_equal(x, y)
