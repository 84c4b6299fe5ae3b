"""discrete_gaussian checks sigma, n and tail with the one integer/real check (secemb.errors):
every bad value is InvalidParameters naming it -- a bool count or scale was taken, an infinite
tail raised OverflowError and a non-number tail a plain ValueError."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.privacy import discrete_gaussian
from secemb.randomness import CtrDrbg


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"sigma": True, "n": 3}, r"^sigma must be a finite number in \(0, 2\^50\], got True$"),
    ({"sigma": 2.0**51, "n": 3}, r"^sigma must be a finite number in \(0, 2\^50\], got "),
    ({"sigma": 2.0, "n": True}, r"^n must be an int >= 0, got True$"),
    ({"sigma": 2.0, "n": 3.0}, r"^n must be an int >= 0, got 3.0$"),
    ({"sigma": 2.0, "n": 3, "tail": float("inf")}, r"^tail \(sigma=2.0\) must be a finite number >= 2.0, got inf$"),
    ({"sigma": 2.0, "n": 3, "tail": "9"}, r"^tail \(sigma=2.0\) must be a finite number >= 2.0, got '9'$"),
    ({"sigma": 2.0, "n": 3, "tail": 1.0}, r"^tail \(sigma=2.0\) must be a finite number >= 2.0, got 1.0$"),
])
def test_bad_parameters_are_invalid_parameters_naming_them(kwargs, says):
    with pytest.raises(InvalidParameters, match=says):
        discrete_gaussian(**kwargs, _rng=CtrDrbg(1))


def test_numpy_scalars_are_taken_as_the_numbers_they_are():
    a = discrete_gaussian(np.float32(3.0), np.int64(5), tail=np.float64(20.0), _rng=CtrDrbg(7))  # type: ignore[arg-type]
    b = discrete_gaussian(3.0, 5, tail=20.0, _rng=CtrDrbg(7))
    assert a.dtype == np.int64 and a.tolist() == b.tolist()
