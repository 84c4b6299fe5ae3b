"""secemb.server.parsing.ascii_int: an integer written in ASCII digits (a path or query
parameter, a header), its range checked by the one integer check (secemb.errors.check_int), so
a refusal names the field and the bound as every other integer check does."""

from __future__ import annotations

import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.server.parsing import ascii_int


@pytest.mark.parametrize(("raw", "lo", "hi", "says"), [
    (str(2**62), 0, 2**62, r"^round_id must be an int in \[0, 2\^62 - 1\], got 4611686018427387904$"),
    ("-1", 0, 2**62, r"^round_id must be an int in \[0, 2\^62 - 1\], got -1$"),
    ("12", 0, 12, r"^round_id must be an int in \[0, 11\], got 12$"),
    ("1x", 0, 12, r"^round_id must be an integer in ASCII digits, got '1x'$"),
    ("01", 0, 12, r"^round_id must be an integer in ASCII digits, got '01'$"),
    (None, 0, 12, r"^round_id is missing$"),
])
def test_a_bad_or_out_of_range_numeral_is_refused_naming_the_field_and_bound(raw, lo, hi, says):
    with pytest.raises(InvalidParameters, match=says):
        ascii_int(raw, "round_id", lo, hi)


def test_the_bounds_are_lo_inclusive_hi_exclusive_and_the_class_is_the_callers():
    assert ascii_int("0", "n", 0, 1) == 0 and ascii_int(str(2**62 - 1), "n", 0, 2**62) == 2**62 - 1
    assert ascii_int("-5", "n", -5, 0) == -5
    with pytest.raises(InvalidMessage, match=r"^header Content-Length must be an int in \[0, 2\^63 - 1\], got "):
        ascii_int(str(2**63), "header Content-Length", 0, 2**63, InvalidMessage)
