"""MovieLens parsing and locating, on tiny files written to tmp_path (no dataset file shipped)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from secemb.data import (
    DATASETS,
    DataFormatError,
    DatasetNotFoundError,
    load_dataset,
    locate_movielens,
    movielens,
)
from secemb.data._text import parse_columns
from secemb.errors import InvalidParameters, SecembError

U_DATA = (
    "196\t242\t3\t881250949\n"
    "186\t302\t3\t891717742\n"
    "22\t377\t1\t878887116\n"
    "196\t302\t5\t881250950\n"
)
# raw users {22, 186, 196} -> 0, 1, 2; raw items {242, 302, 377} -> 0, 1, 2
EXPECTED = dict(
    users=[2, 1, 0, 2],
    items=[0, 1, 2, 1],
    ratings=[3.0, 3.0, 1.0, 5.0],
    timestamps=[881250949, 891717742, 878887116, 881250950],
)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    """No SECEMB_DATA_DIR and an empty home, so the real cache never leaks into a test."""
    monkeypatch.delenv("SECEMB_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _check(data, expected=EXPECTED, name=None):
    assert data.users.tolist() == expected["users"]
    assert data.items.tolist() == expected["items"]
    assert data.ratings.tolist() == expected["ratings"]
    assert data.timestamps.tolist() == expected["timestamps"]
    assert data.num_users == max(expected["users"]) + 1
    assert data.num_items == max(expected["items"]) + 1
    assert data.users.dtype == data.items.dtype == data.timestamps.dtype == np.int64
    assert data.ratings.dtype == np.float32
    if name is not None:
        assert data.name == name


def _recbole_inter() -> Path | None:
    return movielens._recbole_ml100k()


needs_recbole = pytest.mark.skipif(
    _recbole_inter() is None,
    reason="real ML-100K absent: pip install --no-deps recbole==1.2.1 (the README's test command does)",
)


# ----------------------------------------------------------------------------- formats


def test_datasets_names():
    assert DATASETS[0] == "synthetic"
    for name in (
        "ml-100k",
        "ml-1m",
        "ml-10m",
        "ml-25m",
        "synthetic-ml-1m",
        "synthetic-ml-10m",
        "synthetic-ml-25m",
        "synthetic-yelp",
    ):
        assert name in DATASETS


@pytest.mark.parametrize("rel", ["u.data", "ml-100k/u.data"])
def test_u_data(tmp_path, rel):
    _write(tmp_path / rel, U_DATA)
    _check(load_dataset("ml-100k", tmp_path), name="ml-100k")


def test_recbole_inter_with_header(tmp_path):
    header = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
    _write(tmp_path / "ml-100k.inter", header + U_DATA)
    _check(load_dataset("ml-100k", str(tmp_path)))


def test_recbole_inter_columns_in_any_order(tmp_path):
    header = "timestamp:float\trating:float\titem_id:token\tuser_id:token\n"
    body = "".join("\t".join(reversed(line.split("\t"))) + "\n" for line in U_DATA.splitlines())
    _write(tmp_path / "ml-100k" / "ml-100k.inter", header + body)
    _check(load_dataset("ml-100k", tmp_path))


def test_recbole_inter_bad_header(tmp_path):
    _write(
        tmp_path / "ml-100k.inter",
        "user_id:token\titem_id:token\tscore:float\ttimestamp:float\n" + U_DATA,
    )
    with pytest.raises(DataFormatError, match=r"ml-100k\.inter, line 1: expected a RecBole header"):
        load_dataset("ml-100k", tmp_path)


def test_recbole_inter_float_timestamps_take_the_slow_path(tmp_path):
    header = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
    body = U_DATA.replace("881250949", "881250949.0")
    _write(tmp_path / "ml-100k.inter", header + body)
    _check(load_dataset("ml-100k", tmp_path))


@pytest.mark.parametrize("rel", ["ratings.dat", "ml-1m/ratings.dat"])
def test_ml1m_ratings_dat(tmp_path, rel):
    _write(tmp_path / rel, U_DATA.replace("\t", "::"))
    _check(load_dataset("ml-1m", tmp_path), name="ml-1m")


@pytest.mark.parametrize("rel", ["ratings.dat", "ml-10M100K/ratings.dat", "ml-10m/ratings.dat"])
def test_ml10m_half_stars(tmp_path, rel):
    text = "1::122::5::838985046\n1::185::4.5::838983525\n20::122::0.5::838983392\n"
    _write(tmp_path / rel, text)
    data = load_dataset("ml-10m", tmp_path)
    assert data.users.tolist() == [0, 0, 1]
    assert data.items.tolist() == [0, 1, 0]
    assert data.ratings.tolist() == [5.0, 4.5, 0.5]
    assert data.timestamps.tolist() == [838985046, 838983525, 838983392]


@pytest.mark.parametrize("rel", ["ratings.csv", "ml-25m/ratings.csv"])
def test_ml25m_ratings_csv(tmp_path, rel):
    body = "".join(
        f"{u},{i},{r:.1f},{t}\n"
        for u, i, r, t in [
            (196, 242, 3, 881250949),
            (186, 302, 3, 891717742),
            (22, 377, 1, 878887116),
            (196, 302, 5, 881250950),
        ]
    )
    _write(tmp_path / rel, "userId,movieId,rating,timestamp\n" + body)
    _check(load_dataset("ml-25m", tmp_path), name="ml-25m")


def test_ml25m_bad_header(tmp_path):
    _write(tmp_path / "ratings.csv", "user,movie,rating,timestamp\n1,2,3.0,4\n")
    with pytest.raises(DataFormatError, match=r"ratings\.csv, line 1: expected the header"):
        load_dataset("ml-25m", tmp_path)


def test_crlf_missing_final_newline_and_trailing_blank_lines(tmp_path):
    _write(tmp_path / "a" / "u.data", U_DATA.replace("\n", "\r\n"))
    _check(load_dataset("ml-100k", tmp_path / "a"))
    _write(tmp_path / "b" / "u.data", U_DATA.rstrip("\n"))
    _check(load_dataset("ml-100k", tmp_path / "b"))
    _write(tmp_path / "c" / "u.data", U_DATA + "\n\n")
    _check(load_dataset("ml-100k", tmp_path / "c"))


def test_id_remapping_is_sorted_raw_order(tmp_path):
    text = "10\t7\t1\t0\n3\t7\t2\t0\n7\t1\t3\t0\n3\t100\t4\t0\n"
    _write(tmp_path / "u.data", text)
    data = load_dataset("ml-100k", tmp_path)
    assert data.users.tolist() == [2, 0, 1, 0]  # raw 3 -> 0, 7 -> 1, 10 -> 2
    assert data.items.tolist() == [1, 1, 0, 2]  # raw 1 -> 0, 7 -> 1, 100 -> 2
    assert (data.num_users, data.num_items) == (3, 3)


def test_id_remapping_of_huge_sparse_ids(tmp_path):
    big = 10**15
    text = f"{big}\t{big + 5}\t1\t0\n5\t{big}\t2\t0\n{big}\t3\t3\t0\n"
    _write(tmp_path / "u.data", text)
    data = load_dataset("ml-100k", tmp_path)
    assert data.users.tolist() == [1, 0, 1]
    assert data.items.tolist() == [2, 1, 0]


# ----------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize(
    "name, fname, text, line, message",
    [
        ("ml-100k", "u.data", "1\t2\t3\t4\n1\t2\t3\n", 2, r"separated by '\\t', found 3"),
        ("ml-100k", "u.data", "1\t2\t3\t4\n5\t6\t7\t8\t9\n", 2, "found 5"),
        ("ml-100k", "u.data", "1\t2\t3\t4\n\n1\t3\t3\t4\n", 2, "found an empty line"),
        ("ml-100k", "u.data", "1\t2\t3\t4\n1\tx\t3\t4\n", 2, "item id is not a number: 'x'"),
        ("ml-100k", "u.data", "1\t2\t3\t4\n1\t\t3\t4\n", 2, "item id is not a number: ''"),
        (
            "ml-100k",
            "u.data",
            "1\t2\t3\t4\n1\t2\t3\t4\n1\t2\t6\t4\n",
            3,
            r"rating out of range \[1, 5\], found 6",
        ),
        ("ml-100k", "u.data", "1\t2\t0\t4\n", 1, "rating out of range"),
        ("ml-100k", "u.data", "1\t2\tnan\t4\n", 1, "rating is not finite"),
        ("ml-100k", "u.data", "1\t2.5\t3\t4\n", 1, "item id is not an integer: '2.5'"),
        ("ml-100k", "u.data", "-1\t2\t3\t4\n", 1, "user id must be >= 0, found -1"),
        ("ml-100k", "u.data", "1 \t2\t3\t4\n", 1, "user id is not a number"),
        ("ml-100k", "u.data", "1_0\t2\t3\t4\n", 1, "user id is not a number"),
        ("ml-100k", "u.data", "1\t2\t3\t-4\n", 1, "timestamp must be >= 0"),
        ("ml-100k", "u.data", "1\t2\t3\t99999999999999999999999\n", 1, "timestamp is out of range"),
        (
            "ml-1m",
            "ratings.dat",
            "1::2::3::4\n1::2::3:4\n",
            2,
            "expected 4 fields separated by '::', found 3",
        ),
        ("ml-1m", "ratings.dat", "1::2::3::4\n1:::2::3::4\n", 2, "item id is not a number: ':2'"),
        ("ml-1m", "ratings.dat", "1::2::3::4\n1::2::3.5.5::4\n", 2, "rating is not a number"),
        (
            "ml-10m",
            "ratings.dat",
            "1::2::3::4\n1::2::5.5::4\n",
            2,
            r"rating out of range \[0.5, 5\], found 5.5",
        ),
        (
            "ml-25m",
            "ratings.csv",
            "userId,movieId,rating,timestamp\n1,2,3.0,4\n1,2,3.0\n",
            3,
            "found 3",
        ),
        (
            "ml-25m",
            "ratings.csv",
            "userId,movieId,rating,timestamp\n1,2,3.0,4\n1,2,0.0,4\n",
            3,
            "rating out of range",
        ),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, name, fname, text, line, message):
    path = _write(tmp_path / fname, text)
    with pytest.raises(DataFormatError, match=message) as info:
        load_dataset(name, tmp_path)
    err = info.value
    assert err.line == line
    assert err.path == str(path)
    assert f"{path}, line {line}: " in str(err)
    assert isinstance(err, ValueError) and isinstance(err, SecembError)


def test_empty_file_is_an_error(tmp_path):
    _write(tmp_path / "ratings.dat", "\n")
    with pytest.raises(DataFormatError, match="no ratings"):
        load_dataset("ml-1m", tmp_path)


def test_line_numbers_across_blocks(tmp_path):
    lines = [f"{k}\t{k % 7}\t{1 + k % 5}\t{1000 + k}" for k in range(500)]
    lines[437] = "3\t4\tfive\t9"
    path = _write(tmp_path / "u.data", "\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match="line 438: rating is not a number: 'five'"):
        parse_columns(path, b"\t", chunk_bytes=100)


@pytest.mark.parametrize("chunk", [3, 9, 16, 1 << 20])
def test_blank_lines_across_blocks(tmp_path, chunk):
    good = "1\t2\t3\t4\n" * 5
    cols = parse_columns(_write(tmp_path / "a", good + "\n\r\n\n"), b"\t", chunk_bytes=chunk)
    assert cols.users.tolist() == [1] * 5
    with pytest.raises(DataFormatError, match="line 6: .*empty line"):
        parse_columns(_write(tmp_path / "b", good + "\n\n" + good), b"\t", chunk_bytes=chunk)
    with pytest.raises(DataFormatError, match="line 3: timestamp is not a number"):
        parse_columns(
            _write(tmp_path / "c", "1\t2\t3\t4\n" * 2 + "1\t2\t3\t4\r\r\n" + good),
            b"\t",
            chunk_bytes=chunk,
        )


# ----------------------------------------------------------------------------- fast == slow


def _reference(text: str, sep: str, header: int):
    rows = [line.rstrip("\r").split(sep) for line in text.rstrip("\r\n").split("\n")[header:]]
    return [
        [int(float(r[0])) for r in rows],
        [int(float(r[1])) for r in rows],
        [float(r[2]) for r in rows],
        [int(float(r[3])) for r in rows],
    ]


@pytest.mark.parametrize("sep", ["\t", "::", ","])
@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_block_parser_matches_reference(tmp_path, sep, chunk):
    rng = np.random.default_rng(len(sep) * 1000 + chunk)
    lines = []
    for k in range(400):
        r = rng.choice(["4", "3.5", "0.5", "5.0", "2.25", "04", "1.05"])
        if k % 97 == 13:  # a few lines the fast path declines but that are valid
            r = "+3"
        lines.append(
            sep.join(
                [
                    str(rng.integers(0, 10**6)),
                    str(rng.integers(0, 10**9)),
                    r,
                    str(rng.integers(0, 2**40)),
                ]
            )
        )
    text = "\n".join(lines) + "\n"
    path = _write(tmp_path / "f.txt", text)
    cols = parse_columns(path, sep.encode(), chunk_bytes=chunk)
    ref = _reference(text, sep, 0)
    assert cols.users.tolist() == ref[0]
    assert cols.items.tolist() == ref[1]
    assert cols.ratings.tolist() == ref[2]
    assert cols.timestamps.tolist() == ref[3]


def test_block_parser_uniform_decimal_lines(tmp_path):
    text = "1,2,3.5,4\n5,6,4.0,8\n9,10,0.5,12\n"
    cols = parse_columns(_write(tmp_path / "f.csv", text), b",")
    assert cols.ratings.tolist() == [3.5, 4.0, 0.5]
    assert cols.timestamps.tolist() == [4, 8, 12]


# ----------------------------------------------------------------------------- locating


def test_missing_data_names_places_and_remedies(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("ml-1m", tmp_path)
    msg = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert str(tmp_path / "ratings.dat") in msg and str(tmp_path / "ml-1m" / "ratings.dat") in msg
    for hint in ("--data-dir", "SECEMB_DATA_DIR", "download=True", "do not redistribute"):
        assert hint in msg


def test_missing_ml100k_in_explicit_dir_does_not_fall_back_to_recbole(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="recbole==1.2.1") as info:
        load_dataset("ml-100k", tmp_path)
    assert str(tmp_path / "u.data") in str(info.value)


def test_missing_ml100k_without_recbole(monkeypatch):
    monkeypatch.setattr(movielens, "_recbole_ml100k", lambda: None)
    with pytest.raises(DatasetNotFoundError, match="recbole package"):
        load_dataset("ml-100k")


def test_env_var_is_used(tmp_path, monkeypatch):
    _write(tmp_path / "ml-1m" / "ratings.dat", U_DATA.replace("\t", "::"))
    monkeypatch.setenv("SECEMB_DATA_DIR", str(tmp_path))
    assert locate_movielens("ml-1m") == tmp_path / "ml-1m" / "ratings.dat"
    _check(load_dataset("ml-1m"))


def test_explicit_dir_beats_env(tmp_path, monkeypatch):
    _write(tmp_path / "env" / "u.data", U_DATA)
    _write(tmp_path / "arg" / "u.data", "1\t1\t1\t1\n")
    monkeypatch.setenv("SECEMB_DATA_DIR", str(tmp_path / "env"))
    assert len(load_dataset("ml-100k", tmp_path / "arg")) == 1


def test_default_cache_dir_is_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _write(
        tmp_path / ".cache" / "secemb" / "ml-25m" / "ratings.csv",
        "userId,movieId,rating,timestamp\n1,1,4.0,1\n",
    )
    assert len(load_dataset("ml-25m")) == 1


def test_direct_file_preferred_over_subfolder(tmp_path):
    _write(tmp_path / "u.data", "1\t1\t1\t1\n")
    _write(tmp_path / "ml-100k" / "u.data", U_DATA)
    assert locate_movielens("ml-100k", tmp_path) == tmp_path / "u.data"


def test_unknown_dataset_name():
    with pytest.raises(InvalidParameters, match="unknown dataset 'ml-20m'"):
        load_dataset("ml-20m")
    with pytest.raises(InvalidParameters):
        locate_movielens("synthetic")


# ----------------------------------------------------------------------------- real ML-100K


@needs_recbole
def test_real_ml100k_from_recbole():
    data = load_dataset("ml-100k")
    assert (len(data), data.num_users, data.num_items) == (100_000, 943, 1_682)
    assert set(np.unique(data.ratings).tolist()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert np.bincount(data.users).min() == 20  # every ML-100K user has >= 20 ratings
    assert data.timestamps.min() == 874724710 and data.timestamps.max() == 893286638
    # first line of u.data: user 196 rated item 242 with 3 (ids 1-based and dense -> minus 1)
    assert (data.users[0], data.items[0], data.ratings[0]) == (195, 241, 3.0)


@needs_recbole
def test_recbole_fallback_when_env_dir_lacks_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SECEMB_DATA_DIR", str(tmp_path))
    assert locate_movielens("ml-100k") == _recbole_inter()


@needs_recbole
def test_recbole_body_is_u_data():
    """RecBole's ml-100k.inter minus its header line is byte-identical to GroupLens' u.data."""
    raw = _recbole_inter().read_bytes()
    body = raw[raw.index(b"\n") + 1 :]
    assert len(body) == 1_979_173
    assert hashlib.sha256(body).hexdigest() == movielens.ARCHIVES["ml-100k"].ratings_sha256


def test_no_dataset_file_in_repo():
    """GroupLens forbids redistribution: no MovieLens file may be tracked in the repository."""
    root = Path(__file__).resolve().parents[2]
    banned = {"u.data", "ratings.dat", "ratings.csv", "ml-100k.inter", "movies.dat", "users.dat"}
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        out = [
            os.path.relpath(os.path.join(d, f), root)
            for d, _, files in os.walk(root)
            if ".git" not in Path(d).parts
            for f in files
        ]
    assert [p for p in out if Path(p).name in banned] == []


# ----------------------------------------------------------------------------- fuzz: fast == slow

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from secemb.data import _text  # noqa: E402


def _parse_or_error(path, sep, chunk):
    try:
        cols = parse_columns(path, sep, chunk_bytes=chunk)
        return [a.tolist() for a in (cols.users, cols.items, cols.ratings, cols.timestamps)]
    except DataFormatError as exc:
        return ("error", exc.line, str(exc))


_int_tok = st.from_regex(r"\A[0-9]{1,6}\Z")
_num_tok = st.one_of(_int_tok, st.from_regex(r"\A[0-9]{1,2}\.[0-9]{0,3}\Z"), st.just(".5"))
_junk_tok = st.text(alphabet="0123456789.:,\t-+e \r", min_size=0, max_size=4)
_valid_line = st.lists(_int_tok, min_size=2, max_size=2).flatmap(
    lambda ab: st.tuples(_num_tok, _int_tok).map(lambda rt: [*ab, *rt])
)
_any_line = st.one_of(
    _valid_line, _valid_line, _valid_line, st.lists(_junk_tok, min_size=3, max_size=5)
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sep=st.sampled_from([b"\t", b",", b"::"]),
    body=st.lists(_any_line, min_size=1, max_size=12),
    chunk=st.sampled_from([4, 16, 1 << 20]),
    crlf=st.booleans(),
)
def test_fast_path_agrees_with_slow_path(tmp_path, monkeypatch, sep, body, chunk, crlf):
    newline = "\r\n" if crlf else "\n"
    text = newline.join(sep.decode().join(fields) for fields in body) + newline
    path = tmp_path / "fuzz.txt"
    path.write_bytes(text.encode())
    fast = _parse_or_error(path, sep, chunk)

    def never(*args, **kwargs):
        raise _text._SlowPath

    with monkeypatch.context() as m:
        m.setattr(_text, "_fast_block", never)
        slow = _parse_or_error(path, sep, chunk)
    assert fast == slow
