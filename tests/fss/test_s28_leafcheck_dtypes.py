""":meth:`SketchCheck.add <secemb.fss.sketch.SketchCheck.add>` (``LeafCheck.add``'s contract, session 29)
takes leaf words of native-order uint64 only (red team finding S28-E1, session 28, helper C): the compiled kernel
reads 16 bytes a leaf by address, so leaves of a narrower, signed, floating or byte-swapped dtype at the right shape
are refused with ``InvalidParameters`` on both backends, the sketch values untouched; the same leaves as native
uint64 are folded in.  The red team's
child-process test (``tests/review/test_session28_redteam_kernels.py``) covers the 4 MiB uint8 row that read
past its end."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.sketch import SKETCH_WORDS, SketchCheck, expand

BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not kernels.available(), reason="the compiled kernels need numba and AES-NI"))]
MASK = 2**64 - 1
KEYS, MP, WIDTH = 2, 32, 16


def _check(gen: np.random.Generator) -> SketchCheck:
    return SketchCheck(expand([gen.bytes(16) for _ in range(KEYS)], MP), 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["uint8", "uint32", "int64", ">u8", "float64", "object"])
def test_leaves_of_another_dtype_are_refused(backend: str, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(2810)
    check = _check(gen)
    leaves = gen.integers(0, 255, (1, WIDTH, 2)).astype(dtype)
    with pytest.raises(InvalidParameters, match=f"got {np.dtype(dtype)} "):
        check.add(0, 1, leaves)
    assert check.values.tolist() == [[0] * SKETCH_WORDS] * KEYS


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_leaves_as_native_uint64_are_folded_in(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Big-endian leaf words are refused; the same values converted to native order (``=u8``) give the sketch
    values of the words given natively from the start, which are not zero (the fold ran)."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    words = np.random.default_rng(2811).integers(0, MASK, (KEYS * MP // WIDTH, WIDTH, 2), np.uint64, endpoint=True)
    swapped = words.astype(">u8")
    native, again = _check(np.random.default_rng(2812)), _check(np.random.default_rng(2812))
    native.add(0, len(words), words)
    with pytest.raises(InvalidParameters):
        again.add(0, len(words), swapped)
    again.add(0, len(words), swapped.astype("=u8"))
    assert again.values.tolist() == native.values.tolist()
    assert np.all(native.values != 0)
