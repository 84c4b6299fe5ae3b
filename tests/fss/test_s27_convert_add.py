"""Issue 37 (session 27, helper E): a conversion added into arrays inside its kernel.

:func:`secemb.fss.convert.convert_add` writes ``dst[i] = src[i] +- Convert_tag(words[i])`` (the relay masks:
server 1's shares plus each user's mask, a device's share of server 0 minus it); the compiled kernel adds each
AES step's blocks as it makes them, the reference converts chunk by chunk and adds.  Both against
``src + convert(...)`` computed apart, bit for bit, across the kernel's steps and the reference's chunks, for
widths that end inside a block, in place and from other arrays (read-only, strided); refused arrays leave
every destination as it was.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import _numba_kernels, convert, kernels
from secemb.fss.convert import convert_add

TAG = "relay"


@pytest.fixture(params=["default", "small"])
def steps(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The default step and chunk, or a kernel step of 32 AES blocks and reference chunks of 8, so that one
    word's conversion spans several of each."""
    if request.param == "small":
        monkeypatch.setattr(_numba_kernels, "STEP_BLOCKS", 32)
        monkeypatch.setattr(convert, "CHUNK_BLOCKS", 8)
    return str(request.param)


def _words(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64, (n, 2), dtype=np.uint64)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("shape", [(1,), (3,), (5,), (2, 3), (267, 69), (1000,)])
@pytest.mark.parametrize("negate", [False, True])
def test_the_sums_are_the_conversions_added(backend: str, steps: str, dtype: type[np.unsignedinteger],
                                            shape: tuple[int, ...], negate: bool) -> None:
    words = _words(6, len(shape) + shape[-1])
    gen = np.random.default_rng(shape[-1])
    size = int(np.prod(shape))
    masks = convert.convert(words, size, 8 * np.dtype(dtype).itemsize, TAG).reshape(6, *shape)
    src = gen.integers(0, 2**63, (6, *shape)).astype(dtype)
    want = src - masks if negate else src + masks
    dst = np.full((6, *shape), 0xA5, dtype)
    convert_add(words, TAG, list(dst), list(src), negate=negate)
    assert np.array_equal(dst, want)
    inplace = src.copy()
    convert_add(words, TAG, list(inplace), negate=negate)
    assert np.array_equal(inplace, want)


def test_both_paths_give_the_same_bits_from_read_only_and_strided_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    if not kernels.available():
        pytest.skip("numba or AES-NI missing")
    words = _words(4, 1)
    wide = np.random.default_rng(2).integers(0, 2**32, (4, 30, 2), dtype=np.uint32)
    src = [wide[i, :, 0] for i in range(4)]  # every other word: not contiguous
    src[1] = src[1].copy()
    src[1].flags.writeable = False  # as a reply's bytes are
    got = {}
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        dst = np.zeros((6, 30), np.uint32)
        convert_add(words, TAG, list(dst[1:5]), src, negate=True)
        got[name] = dst
    assert np.array_equal(got["numpy"], got["numba"])
    assert (got["numba"][[0, 5]] == 0).all()  # only the destinations are written
    assert np.array_equal(wide[:, :, 0] - got["numba"][1:5], convert.convert(words, 30, 32, TAG))


@pytest.mark.parametrize("case", ["read-only", "strided", "size", "dtype", "words", "sources"])
def test_arrays_the_kernel_cannot_write_are_refused(backend: str, case: str) -> None:
    dst = [np.zeros(8, np.uint32), np.zeros(8, np.uint32)]
    words, src = _words(2, 3), None
    if case == "read-only":
        dst[1] = dst[1].copy()
        dst[1].flags.writeable = False
    elif case == "strided":
        dst[1] = np.zeros(16, np.uint32)[::2]
    elif case == "size":
        dst[1] = np.zeros(9, np.uint32)
    elif case == "dtype":
        dst[1] = np.zeros(8, np.uint64)
    elif case == "words":
        words = _words(3, 3)
    else:
        src = [np.zeros(8, np.uint32)]
    with pytest.raises(InvalidParameters, match="convert_add"):
        convert_add(words, TAG, dst, src)
    assert all((d == 0).all() for d in dst)


def test_nothing_to_add_is_a_no_op(backend: str) -> None:
    convert_add(np.zeros((0, 2), np.uint64), TAG, [])
    empty = [np.zeros(0, np.uint64)]
    convert_add(_words(1, 4), TAG, empty)
    assert empty[0].size == 0
