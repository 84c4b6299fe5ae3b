"""Table 15 by its formula reproduces the paper's cells where the paper's arithmetic is right
(10 of 15), and differs where the spec found the paper's cells inconsistent with its formula."""

import pytest

from secemb.bench.breakpoint import breakpoint, table15
from secemb.errors import InvalidParameters


def test_formula_reproduces_ten_of_the_papers_cells():
    rows = table15()
    same = {(r["dim"], r["dataset"]) for r in rows if r["ours"] == r["paper"]}
    assert len(rows) == 15 and len(same) == 10
    assert {(r["dim"], r["dataset"]) for r in rows} - same == {
        (128, "ml-10m"), (128, "ml-25m"), (128, "yelp"), (64, "yelp"), (512, "yelp")}
    # the disagreeing cells, by hand: 10,681 * 32 * 128 / (130 log2 10,681 + 4,096) = 7,496.8
    assert breakpoint(10_681, 128) == 7_496 and breakpoint(93_386, 64) == 45_597


def test_strictly_below_the_bound_and_bad_input():
    # m = 2, d = 1: 2 * 32 / (130 + 32) = 0.395..., so no m' >= 1 pays off
    assert breakpoint(2, 1) == 0
    with pytest.raises(InvalidParameters):
        breakpoint(1, 64)
