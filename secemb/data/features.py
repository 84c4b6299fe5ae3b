"""Binary user and item features (SecEmb Appendix H), aligned with the ids of a dataset.

=================  ==========================================  ============  =========
dataset            features                                    users l_x     items l_y
=================  ==========================================  ============  =========
``ml-100k``        user gender, age (each distinct value),     2 + 61 + 21   19
                   occupation; movie genre (incl. "unknown")    = 84
``ml-1m``          user gender, age group, occupation; genre   2 + 7 + 21    18
``ml-10m``         movie genre                                  0             20
``ml-25m``         movie genre                                  0             20
``yelp``           business state (see :mod:`secemb.data.yelp`) 0             16
=================  ==========================================  ============  =========

These are the counts of the paper's Table 7; they fall out of the files (the vocabulary of a
feature is the sorted set of values that occur).  Every feature becomes a 0/1 column:
categorical values one-hot (:func:`one_hot`), genre lists multi-hot (:func:`multi_hot`).

Files, looked for beside the rating file :func:`~secemb.data.locate_movielens` finds:

* ML-100K: RecBole's ``ml-100k.user`` / ``ml-100k.item`` (tab-separated, typed header) or
  GroupLens' ``u.user`` (``id|age|gender|occupation|zip``) / ``u.item`` (``id|title|date|
  video date|url|`` 19 genre flags);
* ML-1M: ``users.dat`` (``id::gender::age::occupation::zip``), ``movies.dat``
  (``id::title::Genre|Genre``; Latin-1);
* ML-10M: ``movies.dat``; ML-25M: ``movies.csv`` (``movieId,title,genres``, titles quoted).

Ids follow :func:`secemb.data.load_dataset`: raw ids that occur in the rating file, remapped
to ``0..k-1`` in sorted raw-id order; catalogue entries nobody rated are dropped, a rated item
missing from the catalogue gets an all-zero row.  Malformed lines raise
:class:`~secemb.data.DataFormatError` naming the file and 1-based line.

Synthetic stand-ins (:func:`synthetic_features`) draw features with the paper's counts:
each user one value per categorical group, each item 1-3 genres (or one state for Yelp),
deterministic in the seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from secemb.data._text import parse_columns
from secemb.data.catalogue import catalogue, find_beside, int_id, movielens_titles, records
from secemb.data.errors import DataFormatError
from secemb.data.featureset import FeatureSet, multi_hot, one_hot
from secemb.data.movielens import _layout, locate_movielens  # _layout: the rating reader's own format rule
from secemb.data.synthetic import STANDS_FOR, SYNTHETIC_SHAPES
from secemb.data.yelp import load_yelp_features
from secemb.errors import InvalidParameters

__all__ = [
    "FEATURE_SHAPES",
    "FeatureSet",
    "ITEM_FEATURES_FORMAT",
    "load_features",
    "load_item_features",
    "movielens_features",
    "movielens_titles",
    "multi_hot",
    "one_hot",
    "save_item_features",
    "synthetic_features",
]

#: dataset -> (user feature groups with their sizes, item features l_y) of Table 7
FEATURE_SHAPES: dict[str, tuple[tuple[tuple[str, int], ...], int]] = {
    "ml-100k": ((("gender", 2), ("age", 61), ("occupation", 21)), 19),
    "ml-1m": ((("gender", 2), ("age", 7), ("occupation", 21)), 18),
    "ml-10m": ((), 20),
    "ml-25m": ((), 20),
    "yelp": ((), 16),
}


# ----------------------------------------------------------------------------- parsing


def _align(raw_ids: np.ndarray, rows: dict[int, np.ndarray], width: int) -> np.ndarray:
    """Rows for each raw id in ``raw_ids`` (sorted distinct), zeros where unknown."""
    out = np.zeros((raw_ids.size, width), np.uint8)
    for k, rid in enumerate(raw_ids.tolist()):
        r = rows.get(rid)
        if r is not None:
            out[k] = r
    return out


def _rated_ids(name: str, ratings_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct raw user and item ids of a MovieLens rating file."""
    sep, order, header = _layout(name, ratings_path)
    cols = parse_columns(ratings_path, sep, order=order, header_lines=header)
    return np.unique(cols.users), np.unique(cols.items)


def _ml100k_users(path: Path) -> tuple[dict[int, tuple[str, str, str]], int]:
    recbole = path.name == "ml-100k.user"
    recs = records(path, "\t" if recbole else "|", 5, header=recbole)
    out = {}
    for no, f in recs:
        uid = int_id(f[0], path, no, "user id")
        age, gender, occ = (f[1], f[2], f[3])
        if not age.strip().isdigit():
            raise DataFormatError(f"age must be an integer, found {age[:40]!r}", path=path, line=no)
        if gender not in ("M", "F"):
            raise DataFormatError(f"gender must be M or F, found {gender[:40]!r}", path=path, line=no)
        out[uid] = (gender, str(int(age)), occ.strip())
    return out, len(recs)


def _ml1m_users(path: Path) -> dict[int, tuple[str, str, str]]:
    out = {}
    for no, f in records(path, "::", 5):
        if f[1] not in ("M", "F"):
            raise DataFormatError(f"gender must be M or F, found {f[1][:40]!r}", path=path, line=no)
        for tok, what in ((f[2], "age"), (f[3], "occupation")):
            if not tok.isdigit():
                raise DataFormatError(f"{what} must be an integer code, found {tok[:40]!r}", path=path, line=no)
        out[int_id(f[0], path, no, "user id")] = (f[1], f[2], f[3])
    return out


def movielens_features(name: str, data_dir: str | os.PathLike | None = None) -> FeatureSet:
    """Features of a MovieLens dataset, aligned with :func:`secemb.data.load_dataset` ids.

    Raises
    ------
    DatasetNotFoundError: rating or feature files missing.
    DataFormatError: a malformed line (file and line named).
    """
    ratings = locate_movielens(name, data_dir)
    folder = ratings.parent
    users, items = _rated_ids(name, ratings)
    user_rows: dict[int, np.ndarray] = {}
    ux = np.zeros((users.size, 0), np.uint8)
    unames: list[str] = []
    if name in ("ml-100k", "ml-1m"):
        if name == "ml-100k":
            upath = find_beside(folder, ("ml-100k.user", "u.user"), name)
            table, _ = _ml100k_users(upath)
        else:
            upath = find_beside(folder, ("users.dat",), name)
            table = _ml1m_users(upath)
        ids = sorted(table)
        blocks = []
        for g, label in enumerate(("gender", "age", "occupation")):
            block, nm = one_hot([table[i][g] for i in ids], label)
            blocks.append(block)
            unames += nm
        enc = np.concatenate(blocks, axis=1)
        user_rows = {i: enc[k] for k, i in enumerate(ids)}
        ux = _align(users, user_rows, enc.shape[1])
    genres = catalogue(name, folder)
    ids = sorted(genres)
    enc, inames = multi_hot([genres[i][1] for i in ids], "genre")
    iy = _align(items, {i: enc[k] for k, i in enumerate(ids)}, enc.shape[1])
    return FeatureSet(name, ux, iy, tuple(unames), tuple(inames))


def synthetic_features(name: str, num_users: int, num_items: int, seed: int = 0) -> FeatureSet:
    """Random binary features with the counts of the paper dataset ``name`` stands for.

    ``name`` is a paper dataset (``ml-100k``...) or a stand-in (``synthetic``,
    ``synthetic-ml-1m``...).  Users: one value per categorical group (sizes of
    :data:`FEATURE_SHAPES`), skewed like real demographics (Zipf weights).  Items: 1-3 genres
    (Zipf-weighted), or exactly one state for Yelp.  Deterministic in ``seed`` (numpy's
    Generator: training data, not crypto).
    """
    base = STANDS_FOR.get(name, name)
    if base not in FEATURE_SHAPES:
        raise InvalidParameters(
            f"no feature shape for dataset {name!r}; known: {sorted([*FEATURE_SHAPES, *STANDS_FOR])}"
        )
    groups, l_y = FEATURE_SHAPES[base]
    rng = np.random.default_rng([seed, 0x5EED])
    ux = [np.zeros((num_users, 0), np.uint8)]
    unames: list[str] = []
    for label, size in groups:
        w = 1.0 / np.arange(1, size + 1)
        pick = rng.choice(size, size=num_users, p=w / w.sum())
        block = np.zeros((num_users, size), np.uint8)
        block[np.arange(num_users), pick] = 1
        ux.append(block)
        unames += [f"{label}={j}" for j in range(size)]
    w = 1.0 / np.arange(1, l_y + 1)
    w /= w.sum()
    iy = np.zeros((num_items, l_y), np.uint8)
    if base == "yelp":
        iy[np.arange(num_items), rng.choice(l_y, size=num_items, p=w)] = 1
        inames = [f"state={j}" for j in range(l_y)]
    else:
        counts = rng.integers(1, 4, size=num_items)
        for k in range(3):
            sel = counts > k
            iy[np.flatnonzero(sel), rng.choice(l_y, size=int(sel.sum()), p=w)] = 1
        inames = [f"genre={j}" for j in range(l_y)]
    return FeatureSet(name, np.concatenate(ux, axis=1), iy, tuple(unames), tuple(inames))


def load_features(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    num_users: int | None = None,
    num_items: int | None = None,
    seed: int = 0,
) -> FeatureSet:
    """Features of dataset ``name`` (real files for MovieLens and Yelp; generated for the
    synthetic stand-ins, which need ``num_users`` and ``num_items``).

    Raises
    ------
    InvalidParameters: unknown name, or sizes missing for a synthetic dataset.
    DatasetNotFoundError, DataFormatError: as the loaders.
    """
    if name in STANDS_FOR:
        if num_users is None or num_items is None:
            num_users, num_items, _ = SYNTHETIC_SHAPES[name]
        return synthetic_features(name, num_users, num_items, seed)
    if name == "yelp":
        return load_yelp_features(data_dir)
    if name in ("ml-100k", "ml-1m", "ml-10m", "ml-25m"):
        return movielens_features(name, data_dir)
    raise InvalidParameters(f"no features for dataset {name!r}")



# ----------------------------------------------------------------------------- public item features

#: format tag of the file :func:`save_item_features` writes
ITEM_FEATURES_FORMAT = "secemb-item-features-v1"


def save_item_features(path: str | os.PathLike, features: FeatureSet) -> Path:
    """Write the *public* part of ``features`` -- the item matrix, the item and user feature
    names and the number of user features ``l_x`` -- to ``path`` (numpy ``.npz``, no pickle).

    This is the file a server operator gives both servers (``[model] item_features``) so they
    can build a feature model (FM, DeepFM): the item features go into the table's code columns,
    ``l_x`` sizes the dense layout.  The user matrix is private device data and is not
    written.  Returns the path written.
    """
    p = Path(path)
    with p.open("wb") as fh:
        np.savez(
            fh,
            format=np.array(ITEM_FEATURES_FORMAT),
            name=np.array(features.name),
            item=features.item,
            l_x=np.array(features.l_x, dtype=np.int64),
            item_names=np.array(features.item_names, dtype=str),
            user_names=np.array(features.user_names, dtype=str),
        )
    return p


def load_item_features(path: str | os.PathLike) -> FeatureSet:
    """Read a file written by :func:`save_item_features`.

    Returns a :class:`FeatureSet` with the item matrix (uint8 (num_items, l_y)) and a user
    matrix of shape ``(0, l_x)``: the server knows how many user features there are, never
    their values.

    Raises
    ------
    InvalidParameters
        Unreadable file, wrong format tag, missing array, or arrays of the wrong shape or
        values (the message names the file and the field).
    """
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise InvalidParameters(f"cannot read item features {p}: {exc}") from None
    fmt = str(arrays.get("format", ""))
    if fmt != ITEM_FEATURES_FORMAT:
        raise InvalidParameters(f"item features {p}: format must be {ITEM_FEATURES_FORMAT!r}, got {fmt!r}")
    missing = [k for k in ("name", "item", "l_x", "item_names", "user_names") if k not in arrays]
    if missing:
        raise InvalidParameters(f"item features {p}: missing {', '.join(missing)}")
    l_x = arrays["l_x"]
    if l_x.shape != () or l_x.dtype.kind not in "iu" or int(l_x) < 0:
        raise InvalidParameters(f"item features {p}: l_x must be an int >= 0, got {l_x!r}")
    try:
        return FeatureSet(
            str(arrays["name"]),
            np.zeros((0, int(l_x)), dtype=np.uint8),
            arrays["item"],
            user_names=tuple(str(s) for s in arrays["user_names"]),
            item_names=tuple(str(s) for s in arrays["item_names"]),
        )
    except InvalidParameters as exc:
        raise InvalidParameters(f"item features {p}: {exc}") from None
