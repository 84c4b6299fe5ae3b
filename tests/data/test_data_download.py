"""Downloads with an injected fake fetcher: verification, extraction, cleanup.  No network."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest

from secemb.data import DataFormatError, DatasetNotFoundError, download_movielens, load_dataset, movielens
from secemb.errors import InvalidParameters

RATINGS_DAT = b"1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n"


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    monkeypatch.delenv("SECEMB_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


class FakeFetch:
    """Writes fixed bytes for any URL and records the calls."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.urls: list[str] = []

    def __call__(self, url: str, dest: Path) -> None:
        self.urls.append(url)
        dest.write_bytes(self.payload)


def _pin(monkeypatch, name: str, payload: bytes, **changes) -> movielens.Archive:
    """Pin the fake zip's digests in the archive table (and apply other changes)."""
    fields = dict(
        zip_md5=hashlib.md5(payload).hexdigest(),
        zip_sha256=hashlib.sha256(payload).hexdigest(),
    )
    fields.update(changes)
    arch = dataclasses.replace(movielens.ARCHIVES[name], **fields)
    monkeypatch.setitem(movielens.ARCHIVES, name, arch)
    return arch


def _ml1m_zip() -> bytes:
    return _zip(
        {
            "ml-1m/ratings.dat": RATINGS_DAT,
            "ml-1m/movies.dat": b"1193::One Flew Over the Cuckoo's Nest (1975)::Drama\n",
            "ml-1m/README": b"research use only\n",
            "ml-1m/../../evil.txt": b"never extracted\n",
        }
    )


def test_archive_table():
    assert set(movielens.ARCHIVES) == {"ml-100k", "ml-1m", "ml-10m", "ml-25m"}
    for name, arch in movielens.ARCHIVES.items():
        assert arch.url == f"https://files.grouplens.org/datasets/movielens/{name}.zip"
        assert arch.zip_md5 is not None and len(arch.zip_md5) == 32
    counts = {k: a.ratings_lines for k, a in movielens.ARCHIVES.items()}
    assert counts == {
        "ml-100k": 100_000,
        "ml-1m": 1_000_209,
        "ml-10m": 10_000_054,
        "ml-25m": 25_000_095,
    }
    assert movielens.ARCHIVES["ml-100k"].ratings_sha256 == (
        "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490"
    )


def test_download_extracts_verified_files(tmp_path, monkeypatch):
    payload = _ml1m_zip()
    _pin(monkeypatch, "ml-1m", payload, ratings_lines=3)
    fetch = FakeFetch(payload)
    path = download_movielens("ml-1m", tmp_path / "data", fetch=fetch)
    assert fetch.urls == ["https://files.grouplens.org/datasets/movielens/ml-1m.zip"]
    assert path == tmp_path / "data" / "ml-1m" / "ratings.dat"
    assert path.read_bytes() == RATINGS_DAT
    assert sorted(os.listdir(tmp_path / "data")) == ["ml-1m"]  # no temp folder, no zip
    assert sorted(os.listdir(tmp_path / "data" / "ml-1m")) == [
        "README",
        "movies.dat",
        "ratings.dat",
    ]
    assert not any(p.name == "evil.txt" for p in tmp_path.rglob("*"))
    data = load_dataset("ml-1m", tmp_path / "data")
    assert (len(data), data.num_users, data.num_items) == (3, 2, 2)


def test_load_dataset_downloads_only_when_missing(tmp_path, monkeypatch):
    payload = _ml1m_zip()
    _pin(monkeypatch, "ml-1m", payload, ratings_lines=3)
    fetch = FakeFetch(payload)
    monkeypatch.setattr(movielens, "_https_fetch", fetch)
    monkeypatch.setenv("SECEMB_DATA_DIR", str(tmp_path))
    assert len(load_dataset("ml-1m", download=True)) == 3
    assert len(fetch.urls) == 1
    assert len(load_dataset("ml-1m", download=True)) == 3  # present now: no second fetch
    assert len(fetch.urls) == 1
    assert (tmp_path / "ml-1m" / "ratings.dat").is_file()


def test_download_defaults_to_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    payload = _ml1m_zip()
    _pin(monkeypatch, "ml-1m", payload, ratings_lines=3)
    path = download_movielens("ml-1m", fetch=FakeFetch(payload))
    assert path == tmp_path / ".cache" / "secemb" / "ml-1m" / "ratings.dat"


def _assert_nothing_left(root: Path) -> None:
    assert list(root.iterdir()) == []


@pytest.mark.parametrize("which", ["zip_md5", "zip_sha256"])
def test_wrong_zip_digest_is_rejected_and_nothing_left(tmp_path, monkeypatch, which):
    payload = _ml1m_zip()
    _pin(
        monkeypatch,
        "ml-1m",
        payload,
        ratings_lines=3,
        **{which: "0" * (32 if which == "zip_md5" else 64)},
    )
    algo = "MD5" if which == "zip_md5" else "SHA-256"
    with pytest.raises(
        DataFormatError, match=f"{algo} of https://files.grouplens.org/.*ml-1m.zip is"
    ):
        download_movielens("ml-1m", tmp_path, fetch=FakeFetch(payload))
    _assert_nothing_left(tmp_path)


def test_real_pins_reject_fake_archive(tmp_path):
    payload = _ml1m_zip()
    with pytest.raises(DataFormatError, match="c4d9eecfca2ab87c1945afe126590906"):
        download_movielens("ml-1m", tmp_path, fetch=FakeFetch(payload))
    _assert_nothing_left(tmp_path)


def test_wrong_rating_count_is_rejected(tmp_path, monkeypatch):
    payload = _ml1m_zip()
    _pin(monkeypatch, "ml-1m", payload)  # real count 1,000,209 expected, 3 found
    with pytest.raises(DataFormatError, match="has 3 ratings, expected 1000209"):
        download_movielens("ml-1m", tmp_path, fetch=FakeFetch(payload))
    _assert_nothing_left(tmp_path)


def test_rating_count_excludes_csv_header(tmp_path, monkeypatch):
    payload = _zip({"ml-25m/ratings.csv": b"userId,movieId,rating,timestamp\n1,2,3.5,4\n5,6,4.0,8"})
    _pin(monkeypatch, "ml-25m", payload, ratings_lines=2)
    path = download_movielens("ml-25m", tmp_path, fetch=FakeFetch(payload))
    assert load_dataset("ml-25m", tmp_path).ratings.tolist() == [3.5, 4.0]
    assert path.parent.name == "ml-25m"


def test_wrong_ratings_sha256_is_rejected(tmp_path, monkeypatch):
    payload = _zip({"ml-100k/u.data": b"1\t1\t1\t1\n"})
    _pin(monkeypatch, "ml-100k", payload, ratings_lines=1)  # keeps the real u.data SHA-256 pin
    with pytest.raises(DataFormatError, match="SHA-256 of ml-100k/u.data .* expected 06416e59"):
        download_movielens("ml-100k", tmp_path, fetch=FakeFetch(payload))
    _assert_nothing_left(tmp_path)


def test_zip_without_ratings_member(tmp_path, monkeypatch):
    payload = _zip({"ml-10M100K/movies.dat": b"1::Toy Story (1995)::Comedy\n"})
    _pin(monkeypatch, "ml-10m", payload)
    with pytest.raises(DataFormatError, match="no member ml-10M100K/ratings.dat"):
        download_movielens("ml-10m", tmp_path, fetch=FakeFetch(payload))
    _assert_nothing_left(tmp_path)


def test_not_a_zip(tmp_path, monkeypatch):
    payload = b"<html>not found</html>"
    _pin(monkeypatch, "ml-10m", payload)
    with pytest.raises(DataFormatError, match="not a valid zip"):
        download_movielens("ml-10m", tmp_path, fetch=FakeFetch(payload))
    _assert_nothing_left(tmp_path)


def test_fetch_failure_propagates_and_nothing_left(tmp_path):
    def broken(url: str, dest: Path) -> None:
        dest.write_bytes(b"partial")
        raise ConnectionError("network unreachable")

    # one line naming the URL and the cause (issue 32: offline, `secemb train --download` printed tracebacks)
    with pytest.raises(DatasetNotFoundError, match=r"^could not download https://\S+/ml-1m\.zip \(ConnectionError"):
        download_movielens("ml-1m", tmp_path, fetch=broken)
    _assert_nothing_left(tmp_path)


def test_default_fetcher_refuses_plain_http(tmp_path):
    with pytest.raises(InvalidParameters, match="non-HTTPS"):
        movielens._https_fetch("http://files.grouplens.org/x.zip", tmp_path / "x")


def test_unknown_name(tmp_path):
    with pytest.raises(InvalidParameters):
        download_movielens("ml-20m", tmp_path, fetch=FakeFetch(b""))


@pytest.mark.skipif(
    movielens._recbole_ml100k() is None,
    reason="real ML-100K absent: pip install --no-deps recbole==1.2.1 (the README's test command does)",
)
def test_ml100k_download_with_the_real_u_data_pin(tmp_path, monkeypatch):
    """A zip holding the genuine u.data (rebuilt from RecBole's copy, in tmp only) passes."""
    raw = movielens._recbole_ml100k().read_bytes()
    payload = _zip({"ml-100k/u.data": raw[raw.index(b"\n") + 1 :], "ml-100k/README": b"readme\n"})
    _pin(monkeypatch, "ml-100k", payload)  # zip digests of our rebuilt zip; u.data pin is real
    path = download_movielens("ml-100k", tmp_path, fetch=FakeFetch(payload))
    assert path == tmp_path / "ml-100k" / "u.data"
    data = load_dataset("ml-100k", tmp_path)
    assert (len(data), data.num_users, data.num_items) == (100_000, 943, 1_682)


def test_default_fetcher_is_pooch_with_a_progress_bar(tmp_path, monkeypatch):
    """Issue 13 item 12: the download is pooch's (progress bar), not a hand-written urllib loop."""
    import pooch

    seen = {}

    class FakeDownloader:
        def __init__(self, **kwargs):
            seen.update(kwargs)

        def __call__(self, url, output_file, pooch_obj):
            seen["url"] = url
            Path(output_file).write_bytes(b"zip")

    monkeypatch.setattr(pooch, "HTTPDownloader", FakeDownloader)
    movielens._https_fetch("https://files.grouplens.org/datasets/movielens/ml-1m.zip", tmp_path / "z")
    assert seen["progressbar"] is True and seen["url"].endswith("ml-1m.zip")
    assert (tmp_path / "z").read_bytes() == b"zip"
