"""secemb.errors.check_int: the one check of an integer parameter (issue 36, "one of each")."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters, check_int


@pytest.mark.parametrize("value", [0, 7, 2**64 - 1, np.int64(7), np.uint64(2**64 - 1), np.uint8(3)])
def test_integers_pass_and_come_back_as_python_ints(value: object) -> None:
    got = check_int("x", value, low=0, high=2**64 - 1)
    assert type(got) is int and got == int(value)  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 1.0, np.float64(2.0), "3", None, [1], 2 + 0j])
def test_non_integers_and_bools_are_refused(value: object) -> None:
    with pytest.raises(InvalidParameters, match=r"^x must be an int, got "):
        check_int("x", value)


@pytest.mark.parametrize(("value", "low", "high", "says"), [
    (-1, 0, None, "n must be an int >= 0, got -1"),
    (0, 1, None, "n must be an int >= 1, got 0"),
    (256, 1, 255, r"n must be an int in \[1, 255\], got 256"),
    (0, 1, 255, r"n must be an int in \[1, 255\], got 0"),
    (6, None, 5, "n must be an int <= 5, got 6"),
])
def test_bounds_are_inclusive_and_named_in_the_message(value: int, low: int | None, high: int | None,
                                                        says: str) -> None:
    with pytest.raises(InvalidParameters, match=f"^{says}$"):
        check_int("n", value, low=low, high=high)
    edge = low if low is not None else high
    assert check_int("n", edge, low=low, high=high) == edge


def test_invalid_parameters_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        check_int("n", -1, low=0)
