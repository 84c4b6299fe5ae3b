"""The kernels' wrappers hand numba one array layout whatever the caller's (session 36).

numba compiles a kernel once for each mix of argument types it is called with -- dtype, layout ('C', 'F',
'A') and writability all count -- and a fresh install compiles each mix cold (2-10 s of CPU each).  In one
test run the odd layouts of the red-team files had compiled 58 signatures of ``affine_tile_products`` (178 s
of CPU) and three of ``_hmac_rows`` and two of ``_shake_rows`` in the README's first command.  These tests pin
the normalization: the numba type of what the wrappers pass is the same for every layout a caller may use,
and the elements are the caller's."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.fss.kernels import read_only

numba = pytest.importorskip("numba")


def _layouts(a: np.ndarray) -> list[np.ndarray]:
    """``a``'s elements in five layouts: C writeable, C read-only, Fortran, a strided view, reversed rows."""
    frozen = a.copy()
    frozen.flags.writeable = False
    wide = np.zeros((a.shape[0], 2 * a.shape[1]), a.dtype)
    wide[:, ::2] = a
    return [a.copy(), frozen, np.asfortranarray(a), wide[:, ::2], a[::-1].copy()[::-1]]


def test_read_only_is_one_type_for_every_layout_and_keeps_the_elements() -> None:
    a = np.arange(6 * 40, dtype=np.uint8).reshape(6, 40)
    got = [read_only(x) for x in _layouts(a)]
    assert {str(numba.typeof(g)) for g in got} == {str(numba.typeof(got[1]))}
    assert all(not g.flags.writeable and g.flags.c_contiguous and np.array_equal(g, a) for g in got)
    frozen = _layouts(a)[1]
    assert read_only(frozen) is frozen  # already the kernels' layout: no view, no copy


def test_read_only_never_makes_the_callers_array_read_only() -> None:
    a = np.zeros((3, 4), np.uint8)
    read_only(a)
    a[0, 0] = 1  # still writeable
    assert a[0, 0] == 1


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_canonical_parts_are_one_type_for_every_layout_and_count_dtype(dtype: type) -> None:
    from secemb.fss._projection_kernels import canonical_part

    gen = np.random.default_rng(36)
    base = gen.integers(0, 1 << 32, (5, 7)).astype(dtype)
    words = gen.integers(0, 1 << 32, (5, 7)).astype(dtype)
    tail = gen.integers(0, 1 << 32, (1, 9)).astype(dtype)
    count = np.array([0, 1, 3, 100, 7])
    types, seen = set(), []
    for b, w, t in zip(_layouts(base), _layouts(words), _layouts(tail), strict=True):
        if not (b.flags.writeable and w.flags.writeable and t.flags.writeable):
            continue  # writability is passed on as it comes (a read-only view would cost more than it saves)
        for c in (count.astype(np.int8), count.astype(np.uint16), count.astype(np.uint64), count[::-1][::-1]):
            part = canonical_part((b, c, w, t[0]))
            types.add(str(numba.typeof(part)))
            seen.append(part)
    assert len(types) == 1, types
    for got_base, got_count, got_words, got_tail in seen:
        assert got_count.dtype == np.int64 and np.array_equal(got_count, count)
        assert np.array_equal(got_base, base) and np.array_equal(got_words, words) and np.array_equal(got_tail, tail[0])


def test_a_count_of_uint64_keeps_its_word() -> None:
    """A uint64 count past int64's range becomes a negative int64: the same word modulo 2^64 and 2^32,
    which is what the kernels multiply by (``_word``)."""
    from secemb.fss._projection_kernels import canonical_part

    big = np.array([(1 << 64) - 1, 1 << 63, 5], np.uint64)
    ring = np.zeros((3, 2), np.uint64)
    _, count, _, _ = canonical_part((ring, big, ring, np.zeros(1, np.uint64)))
    assert [int(c) % (1 << 64) for c in count] == [int(c) for c in big]
