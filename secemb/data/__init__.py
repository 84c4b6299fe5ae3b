"""Rating datasets for secemb: MovieLens, synthetic stand-ins, the split and per-user views.

Public API::

    load_dataset(name="synthetic", data_dir=None, *, download=False, seed=0) -> RatingData
    read_own_ratings(path) -> RatingData   # your own .csv, .tsv or RecBole .inter file
    train_test_split(data, test_fraction=0.2, seed=0) -> (train, test)
    validation_split(train, valid_fraction, seed=0) -> (fit, validation)   # per user, from train only
    by_user(data) -> UserRatings          # CSR by user: .of(u), .counts()
    synthetic_like(num_users, num_items, num_ratings, seed=0) -> RatingData
    DATASETS                              # names load_dataset accepts
    IdMap                                 # RatingData.ids: the raw ids (and titles) behind the indices

See docs/data.md for where files go, the licence terms and the split rule.  Nothing here
imports torch or any crypto.
"""

from __future__ import annotations

import os

from secemb.data.errors import DataFormatError, DatasetNotFoundError
from secemb.data.files import is_rating_file, read_own_ratings
from secemb.data.ids import IdMap
from secemb.data.movielens import (
    DATA_DIR_ENV,
    MOVIELENS,
    default_data_dir,
    download_movielens,
    load_movielens,
    locate_movielens,
    read_ratings_file,
)
from secemb.data.ratings import (
    RatingData,
    UserRatings,
    by_user,
    concat,
    leave_one_out,
    train_test_split,
    validation_split,
)
from secemb.data.synthetic import SYNTHETIC_SHAPES, synthetic_like
from secemb.data.yelp import load_yelp
from secemb.errors import InvalidParameters

__all__ = [
    "DATASETS",
    "DATA_DIR_ENV",
    "DataFormatError",
    "DatasetNotFoundError",
    "IdMap",
    "RatingData",
    "UserRatings",
    "by_user",
    "check_dataset",
    "concat",
    "default_data_dir",
    "download_movielens",
    "leave_one_out",
    "load_dataset",
    "locate_movielens",
    "read_own_ratings",
    "read_ratings_file",
    "synthetic_like",
    "train_test_split",
    "validation_split",
]

DATASETS: tuple[str, ...] = (
    "synthetic",
    *MOVIELENS,
    "yelp",
    *(k for k in SYNTHETIC_SHAPES if k != "synthetic"),
)


def check_dataset(name: str) -> None:
    """Raise :class:`InvalidParameters` unless ``name`` is one of :data:`DATASETS` or names a
    ``.csv``, ``.tsv`` or ``.inter`` rating file; cheap, so callers check before other work."""
    if name not in DATASETS and not is_rating_file(name):
        raise InvalidParameters(
            f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}, or the path of a .csv, .tsv or "
            ".inter file"
        )


def load_dataset(
    name: str = "synthetic",
    data_dir: str | os.PathLike | None = None,
    *,
    download: bool = False,
    seed: int = 0,
) -> RatingData:
    """Load a dataset by name.

    Parameters
    ----------
    name:
        One of :data:`DATASETS`: ``synthetic`` (default; 943 users x 1,682 items x 35,000
        ratings), ``ml-100k``, ``ml-1m``, ``ml-10m``, ``ml-25m``, or a synthetic stand-in of a
        paper dataset's shape: ``synthetic-ml-1m``, ``synthetic-ml-10m``, ``synthetic-ml-25m``,
        ``synthetic-yelp``; or the path of your own ``.csv``, ``.tsv`` or RecBole ``.inter``
        rating file (:func:`read_own_ratings`).
    data_dir:
        Directory holding MovieLens files; default ``$SECEMB_DATA_DIR``, then
        ``~/.cache/secemb`` (and RecBole's bundled copy for ``ml-100k``).  Ignored for
        synthetic data.
    download:
        Fetch a missing MovieLens dataset from GroupLens (verified; see
        :func:`download_movielens`).  Ignored for synthetic data.
    seed:
        Seed of the synthetic generator; ignored for MovieLens.

    Raises
    ------
    InvalidParameters
        If ``name`` is unknown.
    DatasetNotFoundError
        If MovieLens files or the named rating file are missing (the message says where it
        looked and what to do).
    DataFormatError
        If a file is malformed (the message names the file and line).
    """
    check_dataset(name)
    if name in SYNTHETIC_SHAPES:
        num_users, num_items, num_ratings = SYNTHETIC_SHAPES[name]
        return synthetic_like(num_users, num_items, num_ratings, seed, name=name)
    if name in MOVIELENS:
        return load_movielens(name, data_dir, download=download)
    if name == "yelp":  # the paper's top-10,000-user subset of the Yelp files (secemb.data.yelp)
        return load_yelp(data_dir)
    return read_own_ratings(name)
