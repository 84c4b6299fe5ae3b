"""The named batch models consume."""

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.models.batch import ITEM_POS, RATING, Batch, rating_batch


def test_rating_batch_converts_dtypes_exactly():
    b = rating_batch([2, 0, 1], np.array([4.5, 1.0, 3.25], dtype=np.float32))
    assert b[ITEM_POS].dtype == np.int64 and b[RATING].dtype == np.float64
    assert b[ITEM_POS].tolist() == [2, 0, 1] and b[RATING].tolist() == [4.5, 1.0, 3.25]
    assert b.num_samples == 3 and sorted(b) == [ITEM_POS, RATING] and len(b) == 2


def test_select_filters_every_field_and_replace_swaps_one():
    b = Batch(item_pos=np.array([0, 1, 2]), rating=np.array([1.0, 2.0, 3.0]), hist=np.arange(6).reshape(3, 2))
    s = b.select(np.array([True, False, True])).replace(item_pos=np.array([5, 6]))
    assert s["item_pos"].tolist() == [5, 6] and s["rating"].tolist() == [1.0, 3.0]
    assert s["hist"].tolist() == [[0, 1], [4, 5]] and s.num_samples == 2


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [({}, "at least one field"), ({"a": [1, 2]}, "'a' must be a numpy array"),
     ({"a": np.float64(1.0)}, "'a' must be a numpy array"),
     ({"a": np.zeros(2), "b": np.zeros(3)}, "'b' must have leading length 2 \\(as 'a'\\), got 3")],
)
def test_malformed_batches_are_refused(fields, fragment):
    with pytest.raises(InvalidParameters, match=fragment):
        Batch(**fields)


def test_missing_fields_are_named():
    b = Batch(rating=np.zeros(1))
    with pytest.raises(InvalidParameters, match="must have field 'item_pos'"):
        b.require(ITEM_POS, RATING)
    with pytest.raises(InvalidParameters, match="no field 'x'"):
        b["x"]
    with pytest.raises(InvalidParameters, match="item_pos must be 1-D"):
        rating_batch(np.zeros((2, 2)), np.zeros(2))
