"""Feature encoders and loaders on tiny files in every format (secemb.data.features)."""

import numpy as np
import pytest

from secemb.data import DataFormatError, DatasetNotFoundError, movielens
from secemb.data.features import (
    FeatureSet, load_features, movielens_features, multi_hot, one_hot, synthetic_features,
)
from secemb.errors import InvalidParameters


def test_one_hot_and_multi_hot():
    enc, names = one_hot(["b", "a", "b", ""], "x")
    assert names == ["x=a", "x=b"]
    assert enc.tolist() == [[0, 1], [1, 0], [0, 1], [0, 0]]
    enc, names = one_hot(["10", "7", "10"], "age")  # numbers sort numerically
    assert names == ["age=7", "age=10"]
    enc, names = multi_hot([["Drama", "War"], [], ["Drama"]], "genre")
    assert names == ["genre=Drama", "genre=War"] and enc.tolist() == [[1, 1], [0, 0], [1, 0]]


def test_featureset_validates():
    with pytest.raises(InvalidParameters):
        FeatureSet("x", np.array([[2]]), np.zeros((1, 1)))
    with pytest.raises(InvalidParameters):
        FeatureSet("x", np.zeros((1, 1)), np.zeros((1, 2)), (), ("only one",))


def _write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding))
    return path


def _ml100k_grouplens(d):
    _write(d / "u.data", "1\t1\t5\t881250949\n2\t3\t3\t881250950\n1\t2\t4\t881250951\n")
    _write(d / "u.user", "1|24|M|technician|85711\n2|53|F|other|94043\n")
    flags = lambda on: "|".join("1" if k in on else "0" for k in range(19))  # noqa: E731
    _write(d / "u.item", f"1|Toy Story|01-Jan-1995||url|{flags({3, 4, 5})}\n2|GoldenEye|01-Jan-1995||url|{flags({1})}\n"
           f"3|Four Rooms|01-Jan-1995||url|{flags({16})}\n", "latin-1")


def test_ml100k_grouplens_files(tmp_path):
    _ml100k_grouplens(tmp_path)
    f = movielens_features("ml-100k", tmp_path)
    assert (f.num_users, f.num_items, f.l_x, f.l_y) == (2, 3, 2 + 2 + 2, 5)
    assert f.user_names == ("gender=F", "gender=M", "age=24", "age=53", "occupation=other", "occupation=technician")
    assert f.user[0].tolist() == [0, 1, 1, 0, 0, 1]
    assert f.item[0].sum() == 3 and f.item[2].sum() == 1


def test_ml100k_recbole_files(tmp_path):
    _write(tmp_path / "ml-100k.inter", "user_id:token\titem_id:token\trating:float\ttimestamp:float\n1\t10\t4\t1\n7\t20\t3\t2\n")
    _write(tmp_path / "ml-100k.user", "user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n"
           "1\t24\tM\ttechnician\t1\n7\t30\tF\twriter\t2\n")
    _write(tmp_path / "ml-100k.item", "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
           "10\tToy Story\t1995\tAnimation Children's Comedy\n20\tHeat\t1995\tAction\n99\tNobody rated\t1990\tWar\n")
    f = movielens_features("ml-100k", tmp_path)
    assert f.num_users == 2 and f.num_items == 2  # unrated catalogue entries dropped
    assert f.item_names == ("genre=Action", "genre=Animation", "genre=Children's", "genre=Comedy", "genre=War")
    assert f.item.tolist() == [[0, 1, 1, 1, 0], [1, 0, 0, 0, 0]]


def test_ml1m_and_ml10m_files(tmp_path):
    _write(tmp_path / "ratings.dat", "1::1193::5::978300760\n2::661::3::978302109\n")
    _write(tmp_path / "users.dat", "1::F::1::10::48067\n2::M::56::16::70072\n")
    _write(tmp_path / "movies.dat", "661::James and the Giant Peach (1996)::Animation|Children's|Musical\n"
           "1193::One Flew Over the Cuckoo's Nest (1975)::Drama\n", "latin-1")
    f = movielens_features("ml-1m", tmp_path)
    assert (f.num_users, f.num_items, f.l_x, f.l_y) == (2, 2, 6, 4)
    assert f.item[1].tolist() == [0, 0, 1, 0] and f.item[0].sum() == 3  # item 0 is raw id 661
    f10 = movielens_features("ml-10m", tmp_path)
    assert f10.l_x == 0 and f10.l_y == 4


def test_ml25m_csv_with_quoted_titles(tmp_path):
    _write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n1,1,4.0,1\n1,2,3.5,2\n")
    _write(tmp_path / "movies.csv", 'movieId,title,genres\n1,"Toy Story, The (1995)",Adventure|Animation\n'
           "2,Jumanji (1995),(no genres listed)\n")
    f = movielens_features("ml-25m", tmp_path)
    assert f.item_names == ("genre=(no genres listed)", "genre=Adventure", "genre=Animation")
    assert f.item.tolist() == [[0, 1, 1], [1, 0, 0]]


@pytest.mark.parametrize(
    "fname, text, line",
    [
        ("u.user", "1|24|M|technician|85711\n2|53|X|other|94043\n", 2),
        ("u.user", "1|24|M|technician|85711\n2|fifty|F|other|94043\n", 2),
        ("u.user", "1|24|M|technician\n", 1),
        ("u.item", "1|Toy|d||u|" + "|".join(["0"] * 18 + ["7"]) + "\n", 1),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, fname, text, line):
    _ml100k_grouplens(tmp_path)
    _write(tmp_path / fname, text, "latin-1")
    with pytest.raises(DataFormatError) as info:
        movielens_features("ml-100k", tmp_path)
    assert info.value.line == line and info.value.path.endswith(fname)
    assert f"line {line}" in str(info.value)


def test_malformed_movies_files(tmp_path):
    _write(tmp_path / "ratings.dat", "1::1::5::1\n")
    _write(tmp_path / "users.dat", "1::F::1::10::48067\n")
    _write(tmp_path / "movies.dat", "1::no genres field\n")
    with pytest.raises(DataFormatError, match="movies.dat, line 1"):
        movielens_features("ml-1m", tmp_path)
    _write(tmp_path / "users.dat", "1::F::1::10::48067\nx::M::1::10::1\n")
    with pytest.raises(DataFormatError, match="users.dat, line 2"):
        movielens_features("ml-1m", tmp_path)
    _write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n1,1,4.0,1\n")
    _write(tmp_path / "movies.csv", "movieId,title,genres\n1,a,b,c\n")
    with pytest.raises(DataFormatError, match="movies.csv, line 2"):
        movielens_features("ml-25m", tmp_path)


def test_missing_feature_file(tmp_path):
    _write(tmp_path / "ratings.dat", "1::1::5::1\n")
    with pytest.raises(DatasetNotFoundError, match="users.dat"):
        movielens_features("ml-1m", tmp_path)


@pytest.mark.parametrize("name, lx, ly", [("synthetic", 84, 19), ("synthetic-ml-1m", 30, 18),
                                          ("synthetic-ml-10m", 0, 20), ("synthetic-yelp", 0, 16)])
def test_synthetic_features_have_table7_counts(name, lx, ly):
    f = synthetic_features(name, 50, 80, seed=1)
    assert (f.l_x, f.l_y) == (lx, ly)
    groups = 3 if lx else 0
    assert np.all(f.user.sum(1) == groups)  # one value per categorical group
    assert np.all(f.item.sum(1) >= 1)
    assert np.array_equal(f.item, synthetic_features(name, 50, 80, seed=1).item)


@pytest.mark.skipif(
    movielens._recbole_ml100k() is None,
    reason="real ML-100K absent: pip install --no-deps recbole==1.2.1 (the README's test command does)",
)
def test_real_ml100k_counts():
    f = load_features("ml-100k")
    assert (f.num_users, f.num_items, f.l_x, f.l_y) == (943, 1682, 84, 19)
