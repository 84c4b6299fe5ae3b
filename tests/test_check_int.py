"""secemb.errors.check_int and check_float: the one check of an integer (a real) parameter (issue 36,
"one of each"), raising the class the caller names."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters, check_float, check_int


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


@pytest.mark.parametrize(("value", "low", "high", "says"), [
    (2**62, 0, 2**62 - 1, r"r must be an int in \[0, 2\^62 - 1\], got 4611686018427387904"),
    (2**31 + 1, 2, 1 << 31, r"r must be an int in \[2, 2\^31\], got 2147483649"),
    (-1, 2**20 + 1, None, r"r must be an int >= 2\^20 \+ 1, got -1"),
    (0, None, -(2**63), r"r must be an int <= -2\^63, got 0"),
    (0, -(2**63 - 1), -1, r"r must be an int in \[-\(2\^63 - 1\), -1\], got 0"),
    (2**20, 0, 2**20 - 1, r"r must be an int in \[0, 1048575\], got 1048576"),  # below 2^20: digits
    (0, 3 * 2**40, None, r"r must be an int >= 3298534883328, got 0"),  # no power of two: digits
])
def test_bounds_next_to_a_large_power_of_two_read_as_one(value: int, low: int | None, high: int | None,
                                                         says: str) -> None:
    with pytest.raises(InvalidParameters, match=f"^{says}$"):
        check_int("r", value, low=low, high=high)
    with pytest.raises(InvalidParameters, match=r"^f must be a finite number < 2\^53, got "):
        check_float("f", 2.0**60, below=2**53)
    with pytest.raises(InvalidParameters, match=r"^f must be a finite number in \(0, 2\^50\], got 1.2e\+16$"):
        check_float("f", 1.2e16, above=0, high=2.0**50)  # a whole float bound too
    with pytest.raises(InvalidParameters, match=r"^f must be a finite number <= 1048577.5, got "):
        check_float("f", 2.0**21, high=2.0**20 + 1.5)  # not whole: as it is


def test_a_long_value_is_cut_in_the_message_and_a_huge_int_raises_the_callers_class() -> None:
    with pytest.raises(InvalidMessage, match=r"^u must be an int, got 'xxxxx") as info:
        check_int("u", "x" * 10_000, error=InvalidMessage)
    assert len(str(info.value)) < 200 and str(info.value).endswith("... (10002 characters)")
    with pytest.raises(InvalidMessage, match=r"^u must be an int <= 5, got an int of 16610 bits$"):
        check_int("u", 10**5000, high=5, error=InvalidMessage)  # repr() would raise ValueError
    with pytest.raises(InvalidMessage, match=r"^f must be a finite number, got an int of 16610 bits$"):
        check_float("f", 10**5000, error=InvalidMessage)


def test_invalid_parameters_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        check_int("n", -1, low=0)


@pytest.mark.parametrize(("value", "says"), [
    (True, "r must be an int >= 0, got True"),
    ("1", "r must be an int >= 0, got '1'"),
    (-1, "r must be an int >= 0, got -1"),
])
def test_error_names_the_class_raised_with_the_same_message(value: object, says: str) -> None:
    with pytest.raises(InvalidMessage, match=f"^{says}$") as info:
        check_int("r", value, low=0, error=InvalidMessage)
    assert not isinstance(info.value, InvalidParameters)
    assert check_int("r", 4, low=0, error=InvalidMessage) == 4


def test_error_may_be_any_exception_class() -> None:
    class Refused(Exception):
        pass

    with pytest.raises(Refused, match=r"^q must be an int in \[1, 3\], got 4$"):
        check_int("q", 4, low=1, high=3, error=Refused)
    with pytest.raises(Refused, match=r"^f must be a finite number > 0, got 0$"):
        check_float("f", 0, above=0, error=Refused)


@pytest.mark.parametrize("value", [0, 2, 1.5, np.float32(0.25), np.float64(1.75), np.int64(2), Fraction(1, 4)])
def test_real_numbers_pass_and_come_back_as_python_floats(value: object) -> None:
    got = check_float("x", value, low=0, high=2)
    assert type(got) is float and got == float(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [True, False, np.bool_(True), math.nan, math.inf, -math.inf, np.float64("nan"),
                                   Fraction(10**400), 10**400, "1.0", None, [1.0], 1 + 0j])
def test_non_finite_non_real_and_bools_are_refused(value: object) -> None:
    with pytest.raises(InvalidParameters, match=r"^x must be a finite number, got "):
        check_float("x", value)


@pytest.mark.parametrize(("bounds", "ok", "bad", "says"), [
    ({"low": 0}, 0, -0.5, "s must be a finite number >= 0, got -0.5"),
    ({"above": 1}, 1.5, 1, "s must be a finite number > 1, got 1"),
    ({"high": 5}, 5, 5.5, "s must be a finite number <= 5, got 5.5"),
    ({"below": 1}, 0.5, 1.0, "s must be a finite number < 1, got 1.0"),
    ({"low": 0, "below": 1}, 0, 1, r"s must be a finite number in \[0, 1\), got 1"),
    ({"above": 0, "high": 86400}, 86400, 0, r"s must be a finite number in \(0, 86400\], got 0"),
    ({"low": 1, "high": 5}, 1, 5.25, r"s must be a finite number in \[1, 5\], got 5.25"),
])
def test_float_bounds_are_named_in_the_message(bounds: dict[str, Any], ok: float, bad: float, says: str) -> None:
    assert check_float("s", ok, **bounds) == ok
    with pytest.raises(InvalidParameters, match=f"^{says}$"):
        check_float("s", bad, **bounds)


@pytest.mark.parametrize("bounds", [{"low": 0, "above": 0}, {"high": 1, "below": 1}])
def test_float_bounds_on_one_side_are_one_bound(bounds: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        check_float("s", 0.5, **bounds)
