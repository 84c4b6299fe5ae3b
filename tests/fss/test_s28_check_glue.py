"""The check's glue (session 28, helper C; since session 29 the sketch check's):
:meth:`secemb.fss.sketch.SketchCheck.add` and :func:`secemb.fss.hashing.sha256_many` import their compiled modules
once a process, not at every call, but take the kernels from those modules at each call, so a wrapper installed as
the module's attribute after the first call (``bench overhead``'s kernel clock, a test's stand-in) still sees every
call."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from secemb.bench import overhead
from secemb.fss import hashing, kernels
from secemb.fss.sketch import SketchCheck, expand

pytestmark = pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")


def _check() -> tuple[SketchCheck, np.ndarray]:
    gen = np.random.default_rng(2828)
    leaves = gen.integers(0, 2**64 - 1, (2, 16, 2), np.uint64, endpoint=True)
    return SketchCheck(expand([b"glue" * 4], 16), 2), leaves


def test_the_kernel_clock_counts_the_check_after_an_earlier_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    check, leaves = _check()
    check.add(0, 2, leaves)  # the loop's module imported before the clock wraps its attribute
    timed, _ = _check()
    with overhead.kernel_clock() as clock:
        timed.add(0, 2, leaves)
    assert clock.calls.get("sketch_accumulate") == 1
    np.testing.assert_array_equal(timed.values, check.values)  # the wrapper changes no result


def test_sha256_many_takes_the_kernel_from_its_module_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    if not kernels.sha_compiled():
        pytest.skip("no SHA-NI kernel here")
    rows = np.arange(64, dtype=np.uint8).reshape(2, 32)
    first = hashing.sha256_many(b"p", rows)  # the module imported
    assert first.tobytes() == b"".join(hashlib.sha256(b"p" + bytes(row)).digest() for row in rows)
    from secemb.fss import _shani

    seen = []

    def stand_in(prefix: bytes, suffixes: np.ndarray) -> np.ndarray:
        seen.append(prefix)
        return np.zeros((len(suffixes), 32), np.uint8)

    monkeypatch.setattr(_shani, "sha256_many", stand_in)
    assert not hashing.sha256_many(b"q", rows).any() and seen == [b"q"]
