"""Yelp loader on tiny JSON-lines files (secemb.data.yelp)."""

import json

import pytest

from secemb.data import DataFormatError, DatasetNotFoundError, load_dataset
from secemb.data.yelp import load_yelp, load_yelp_features


def _review(u, b, s, d="2015-01-02 03:04:05"):
    return json.dumps({"review_id": "r", "user_id": u, "business_id": b, "stars": s, "date": d, "text": "x"})


@pytest.fixture()
def yelp_dir(tmp_path):
    reviews = [_review("ua", "b1", 5), _review("ua", "b2", 4), _review("ua", "b3", 1),
               _review("ub", "b1", 3), _review("ub", "b4", 2), _review("uc", "b5", 4)]
    (tmp_path / "yelp_academic_dataset_review.json").write_text("\n".join(reviews) + "\n")
    biz = [{"business_id": b, "state": s} for b, s in (("b1", "AZ"), ("b2", "NV"), ("b3", "AZ"), ("b4", "ON"), ("b5", "PA"))]
    (tmp_path / "yelp_academic_dataset_business.json").write_text("\n".join(json.dumps(x) for x in biz) + "\n")
    return tmp_path


def test_top_users_subset(yelp_dir):
    data = load_yelp(yelp_dir, top_users=2)
    assert (data.num_users, data.num_items, data.num_ratings) == (2, 4, 5)  # uc dropped, b5 unused
    assert data.ratings.tolist() == [5, 4, 1, 3, 2]
    assert data.timestamps[0] == 1420167845
    f = load_yelp_features(yelp_dir, top_users=2)
    assert f.item_names == ("state=AZ", "state=NV", "state=ON")
    assert f.item.tolist() == [[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1]]
    assert f.l_x == 0 and f.num_users == 2
    assert load_dataset("yelp", yelp_dir).num_users == 3


def test_ties_broken_by_user_id(yelp_dir):
    data = load_yelp(yelp_dir, top_users=1)
    assert data.num_ratings == 3


@pytest.mark.parametrize("bad, msg", [
    ("{not json", "not a JSON object"),
    (json.dumps({"user_id": "u", "business_id": "b", "stars": 9, "date": "2015-01-02 03:04:05"}), "stars"),
    (json.dumps({"user_id": "u", "business_id": "b", "stars": 3}), "missing field"),
    (json.dumps({"user_id": "u", "business_id": "b", "stars": 3, "date": "yesterday"}), "date"),
])
def test_malformed_review_lines(yelp_dir, bad, msg):
    p = yelp_dir / "yelp_academic_dataset_review.json"
    p.write_text(_review("ua", "b1", 5) + "\n" + bad + "\n")
    with pytest.raises(DataFormatError, match=msg) as info:
        load_yelp(yelp_dir)
    assert info.value.line == 2 and info.value.path == str(p)


def test_missing_files(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="review"):
        load_yelp(tmp_path)
