"""Review of session 19's prime field (secemb/fss/field.py), issue 34 (b).

Found: :func:`~secemb.fss.field.from_canonical_bytes` measured a ``memoryview`` by ``len``, which
counts items, not bytes: a view of ``uint64`` words passed the length check with eight times the
bytes and came back as eight times ``count`` elements (a silent wrong answer on untrusted
input); :func:`~secemb.fss.field.matmul` answered shapes it cannot multiply with numpy's
``IndexError``/``ValueError``, and :func:`~secemb.fss.field.from_uniform_bytes` a list with
``AttributeError``, where their contract is ``InvalidParameters``.  Also pinned: ``matmul`` is
exact at the largest limbs a field element has, on both sides of its 2^11 inner cut."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F

P = 2**61 - 1


def test_a_memoryview_of_words_is_measured_in_bytes() -> None:
    words = np.array([5, 7, P - 1, 0, 1, 2, 3, 4], dtype=np.uint64)
    # 64 bytes are not one element: refused, not read as eight
    with pytest.raises(InvalidMessage, match="expected 8 bytes, got 64"):
        F.from_canonical_bytes(words.data, 1)
    # and 64 bytes are eight elements, whatever the view's item size
    assert F.from_canonical_bytes(words.data, 8).tolist() == [5, 7, P - 1, 0, 1, 2, 3, 4]
    assert F.from_canonical_bytes(words[:1].data, 1).tolist() == [5]
    with pytest.raises(InvalidMessage, match="not below p"):
        F.from_canonical_bytes(np.array([P], dtype=np.uint64).data, 1)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (np.uint64(3), np.ones((1, 1), np.uint64)),  # a scalar has no inner dimension
        (np.ones(3, np.uint64), np.ones((3, 2), np.uint64)),  # a vector is not (..., m, k): was IndexError
        (np.ones((2, 2, 3), np.uint64), np.ones((3, 3, 2), np.uint64)),  # batches 2 and 3 do not broadcast
    ],
)
def test_matmul_refuses_shapes_it_cannot_multiply(a: np.ndarray, b: np.ndarray) -> None:
    with pytest.raises(InvalidParameters, match="matmul"):
        F.matmul(a, b)


def test_from_uniform_bytes_refuses_what_is_neither_bytes_nor_words() -> None:
    with pytest.raises(InvalidParameters, match="from_uniform_bytes"):
        F.from_uniform_bytes([1, 2], 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [2047, 2048, 2049, 4097])
def test_matmul_is_exact_at_the_largest_limbs_across_the_inner_cut(k: int) -> None:
    # P - 2^42: its two low 21-bit limbs are all ones, the top one 2^19 - 2 (the largest a field
    # element can have with the others full), so every limb product is at its maximum
    v = P - 2**42
    a = np.full((1, k), v, dtype=np.uint64)
    b = np.full((k, 2), v, dtype=np.uint64)
    assert F.matmul(a, b).tolist() == [[k * v * v % P] * 2]
