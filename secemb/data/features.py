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

import csv

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from secemb.data._text import parse_columns
from secemb.data.synthetic import STANDS_FOR
from secemb.data.errors import DataFormatError, DatasetNotFoundError
from secemb.errors import InvalidParameters, check_int

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


@dataclass(frozen=True)
class FeatureSet:
    """Binary features of every user and item of one dataset.

    Attributes
    ----------
    name: dataset name.
    user: uint8 (num_users, l_x), 0/1; private data of each device.
    item: uint8 (num_items, l_y), 0/1; public catalogue metadata.
    user_names, item_names: one name per column (``"gender=F"``, ``"genre=Drama"``).
    """

    name: str
    user: np.ndarray
    item: np.ndarray
    user_names: tuple[str, ...] = field(default=())
    item_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for what in ("user", "item"):
            a = getattr(self, what)
            if not isinstance(a, np.ndarray) or a.ndim != 2:
                raise InvalidParameters(f"{what} features must be a 2-D numpy array")
            if a.size and not np.isin(a, (0, 1)).all():
                raise InvalidParameters(f"{what} features must be 0/1")
            object.__setattr__(self, what, np.ascontiguousarray(a, dtype=np.uint8))
            names = getattr(self, f"{what}_names")
            if names and len(names) != a.shape[1]:
                raise InvalidParameters(f"{len(names)} {what} feature names for {a.shape[1]} columns")

    @property
    def num_users(self) -> int:
        return int(self.user.shape[0])

    @property
    def num_items(self) -> int:
        return int(self.item.shape[0])

    @property
    def l_x(self) -> int:
        """Number of user features."""
        return int(self.user.shape[1])

    @property
    def l_y(self) -> int:
        """Number of item features."""
        return int(self.item.shape[1])

    def public_sha256(self) -> str:
        """SHA-256 of the public part as a model takes it: ``num_items``, ``l_y`` and ``l_x``
        (little-endian int64), then the item matrix (uint8, row-major).  Names and user rows do
        not enter (a device's :meth:`for_device` hashes as the servers' full set).  The servers
        announce it in the round document (``model.item_features_sha256``); a device compares
        its own (:meth:`secemb.client.device.RoundInfo.check_model`).

        >>> a = FeatureSet("x", np.zeros((2, 3)), np.eye(4, 2))
        >>> a.public_sha256() == a.for_device(1).public_sha256() != FeatureSet("x", np.zeros((2, 3)),
        ...                                                                    np.eye(4, 2)[::-1]).public_sha256()
        True
        """
        import hashlib

        h = hashlib.sha256(np.array([self.num_items, self.l_y, self.l_x], dtype="<i8").tobytes())
        h.update(self.item.tobytes())
        return h.hexdigest()

    def for_device(self, user: int) -> FeatureSet:
        """What device ``user`` holds: its own user row (``(1, l_x)``: row 0, as the device's
        one-row :class:`~secemb.models.UserStore`, a copy) and the public item matrix; nobody
        else's row, and no view that keeps the full user matrix alive.

        Raises
        ------
        InvalidParameters
            ``user`` outside ``[0, num_users)``.
        """
        user = check_int("user", user, low=0, high=self.num_users - 1)
        return FeatureSet(self.name, self.user[user : user + 1].copy(), self.item, self.user_names, self.item_names)

    def check_sizes(self, num_users: int, num_items: int) -> None:
        """Raise :class:`InvalidParameters` unless the features cover exactly these ids."""
        if (self.num_users, self.num_items) != (num_users, num_items):
            raise InvalidParameters(
                f"features of {self.name!r} cover {self.num_users} users x {self.num_items} items, "
                f"the data has {num_users} x {num_items}"
            )

    def __repr__(self) -> str:
        return f"FeatureSet({self.name!r}, users={self.num_users}x{self.l_x}, items={self.num_items}x{self.l_y})"


# ----------------------------------------------------------------------------- encoders


def one_hot(
    values: Sequence[str], prefix: str, vocabulary: Sequence[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """One 0/1 column per distinct value (sorted; or the given ``vocabulary``).

    Returns ``(uint8 (n, V), names)``.  A value outside a given vocabulary maps to an all-zero
    row; ``""`` (missing) always does.
    """
    vocab = sorted({v for v in values if v != ""}, key=_natural) if vocabulary is None else list(vocabulary)
    index = {v: j for j, v in enumerate(vocab)}
    out = np.zeros((len(values), len(vocab)), np.uint8)
    for i, v in enumerate(values):
        j = index.get(v)
        if j is not None:
            out[i, j] = 1
    return out, [f"{prefix}={v}" for v in vocab]


def multi_hot(
    lists: Sequence[Iterable[str]], prefix: str, vocabulary: Sequence[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """One 0/1 column per distinct token over all lists (sorted, or ``vocabulary``)."""
    lists = [list(x) for x in lists]
    vocab = sorted({t for x in lists for t in x if t}) if vocabulary is None else list(vocabulary)
    index = {v: j for j, v in enumerate(vocab)}
    out = np.zeros((len(lists), len(vocab)), np.uint8)
    for i, x in enumerate(lists):
        for t in x:
            j = index.get(t)
            if j is not None:
                out[i, j] = 1
    return out, [f"{prefix}={v}" for v in vocab]


def _natural(v: str) -> tuple[int, int | str]:
    return (0, int(v)) if v.lstrip("-").isdigit() else (1, v)


# ----------------------------------------------------------------------------- parsing


def _lines(path: Path, encoding: str) -> Iterable[tuple[int, str]]:
    with open(path, "rb") as fh:
        for no, raw in enumerate(fh, 1):
            line = raw.decode(encoding, "replace").rstrip("\r\n")
            yield no, line


def _records(path: Path, sep: str, nfields: int, *, header: bool = False, encoding: str = "utf-8",
             min_fields: int | None = None) -> list[tuple[int, list[str]]]:
    """Split every non-blank line into fields; raise naming file and line on a bad count."""
    out = []
    for no, line in _lines(path, encoding):
        if header and no == 1:
            continue
        if not line.strip():
            continue
        fields = line.split(sep)
        lo = nfields if min_fields is None else min_fields
        if not lo <= len(fields) <= nfields:
            raise DataFormatError(f"expected {nfields} fields separated by {sep!r}, found {len(fields)}",
                                  path=path, line=no)
        out.append((no, fields))
    return out


def _int_id(tok: str, path: Path, line: int, what: str) -> int:
    tok = tok.strip()
    if not tok.isdigit():
        raise DataFormatError(f"{what} must be a non-negative integer, found {tok[:40]!r}", path=path, line=line)
    return int(tok)


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
    from secemb.data.movielens import _layout  # the rating reader's own format rule

    sep, order, header = _layout(name, ratings_path)
    cols = parse_columns(ratings_path, sep, order=order, header_lines=header)
    return np.unique(cols.users), np.unique(cols.items)


def _find(folder: Path, names: Sequence[str], dataset: str) -> Path:
    for n in names:
        p = folder / n
        if p.is_file():
            return p
    raise DatasetNotFoundError(
        f"feature files of {dataset!r} not found beside the ratings in {folder}: looked for {', '.join(names)}"
    )


def _ml100k_users(path: Path) -> tuple[dict[int, tuple[str, str, str]], int]:
    recbole = path.name == "ml-100k.user"
    recs = _records(path, "\t" if recbole else "|", 5, header=recbole)
    out = {}
    for no, f in recs:
        uid = _int_id(f[0], path, no, "user id")
        age, gender, occ = (f[1], f[2], f[3])
        if not age.strip().isdigit():
            raise DataFormatError(f"age must be an integer, found {age[:40]!r}", path=path, line=no)
        if gender not in ("M", "F"):
            raise DataFormatError(f"gender must be M or F, found {gender[:40]!r}", path=path, line=no)
        out[uid] = (gender, str(int(age)), occ.strip())
    return out, len(recs)


#: an item's catalogue entry: its title and its genres
_Entry = tuple[str, list[str]]


def _ml100k_items(path: Path) -> dict[int, _Entry]:
    out: dict[int, _Entry] = {}
    if path.name == "ml-100k.item":  # RecBole: item_id, movie_title, release_year, class (space-separated)
        for no, f in _records(path, "\t", 4, header=True, min_fields=4):
            out[_int_id(f[0], path, no, "item id")] = (f[1].strip(), f[3].split())
        return out
    genres = ["unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime",
              "Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery",
              "Romance", "Sci-Fi", "Thriller", "War", "Western"]
    for no, f in _records(path, "|", 24, encoding="latin-1"):
        flags = f[5:]
        if any(x not in ("0", "1") for x in flags):
            raise DataFormatError("genre flags must be 0 or 1", path=path, line=no)
        out[_int_id(f[0], path, no, "item id")] = (f[1].strip(),
                                                   [g for g, x in zip(genres, flags, strict=True) if x == "1"])
    return out


def _ml1m_users(path: Path) -> dict[int, tuple[str, str, str]]:
    out = {}
    for no, f in _records(path, "::", 5):
        if f[1] not in ("M", "F"):
            raise DataFormatError(f"gender must be M or F, found {f[1][:40]!r}", path=path, line=no)
        for tok, what in ((f[2], "age"), (f[3], "occupation")):
            if not tok.isdigit():
                raise DataFormatError(f"{what} must be an integer code, found {tok[:40]!r}", path=path, line=no)
        out[_int_id(f[0], path, no, "user id")] = (f[1], f[2], f[3])
    return out


def _movies_dat(path: Path) -> dict[int, _Entry]:
    out: dict[int, _Entry] = {}
    for no, line in _lines(path, _text_encoding(path)):
        if not line.strip():
            continue
        first, _, rest = line.partition("::")
        title, sep, genres = rest.rpartition("::")
        if not sep:
            raise DataFormatError("expected 'id::title::genres'", path=path, line=no)
        out[_int_id(first, path, no, "movie id")] = (title.strip(), [g for g in genres.split("|") if g])
    return out


def _movies_csv(path: Path) -> dict[int, _Entry]:
    out: dict[int, _Entry] = {}
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        for no, row in enumerate(reader, 1):
            if no == 1:
                if [c.strip().lstrip("\ufeff") for c in row] != ["movieId", "title", "genres"]:
                    raise DataFormatError(f"expected the header 'movieId,title,genres', found {row!r}"[:200],
                                          path=path, line=1)
                continue
            if not row:
                continue
            if len(row) != 3:
                raise DataFormatError(f"expected 3 fields, found {len(row)}", path=path, line=reader.line_num)
            out[_int_id(row[0], path, reader.line_num, "movie id")] = (row[1].strip(),
                                                                       [g for g in row[2].split("|") if g])
    return out


def _text_encoding(path: Path) -> str:
    """``utf-8`` when the whole file decodes as UTF-8 (ML-10M's ``movies.dat``), else
    ``latin-1`` (ML-1M's, ML-100K's ``u.item``)."""
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return "latin-1"
    return "utf-8"


def _catalogue(name: str, folder: Path) -> dict[int, _Entry]:
    """Title and genres of every movie of the MovieLens dataset ``name`` whose rating file is
    in ``folder``: RecBole's ``ml-100k.item`` or ``u.item`` (ML-100K), ``movies.csv``
    (ML-25M), ``movies.dat`` (ML-1M, ML-10M).

    Raises
    ------
    DatasetNotFoundError: the file is missing.  DataFormatError: a malformed line.
    """
    if name == "ml-100k":
        return _ml100k_items(_find(folder, ("ml-100k.item", "u.item"), name))
    if name == "ml-25m":
        return _movies_csv(_find(folder, ("movies.csv",), name))
    return _movies_dat(_find(folder, ("movies.dat",), name))


def movielens_titles(name: str, folder: Path, items: np.ndarray) -> tuple[str, ...] | None:
    """The title of each movie of ``items`` (sorted distinct raw movie ids, the order of the
    item indices) from the catalogue file beside the ratings in ``folder`` (see
    :func:`_catalogue`); ``""`` for a movie the catalogue lacks; ``None`` when there is no
    catalogue file.

    Raises
    ------
    DataFormatError: a malformed catalogue line (file and line named).
    """
    try:
        entries = _catalogue(name, folder)
    except DatasetNotFoundError:
        return None
    return tuple(entries[i][0] if i in entries else "" for i in items.tolist())


def movielens_features(name: str, data_dir: str | os.PathLike | None = None) -> FeatureSet:
    """Features of a MovieLens dataset, aligned with :func:`secemb.data.load_dataset` ids.

    Raises
    ------
    DatasetNotFoundError: rating or feature files missing.
    DataFormatError: a malformed line (file and line named).
    """
    from secemb.data.movielens import locate_movielens

    ratings = locate_movielens(name, data_dir)
    folder = ratings.parent
    users, items = _rated_ids(name, ratings)
    user_rows: dict[int, np.ndarray] = {}
    ux = np.zeros((users.size, 0), np.uint8)
    unames: list[str] = []
    if name in ("ml-100k", "ml-1m"):
        if name == "ml-100k":
            upath = _find(folder, ("ml-100k.user", "u.user"), name)
            table, _ = _ml100k_users(upath)
        else:
            upath = _find(folder, ("users.dat",), name)
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
    genres = _catalogue(name, folder)
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
            from secemb.data.synthetic import SYNTHETIC_SHAPES

            num_users, num_items, _ = SYNTHETIC_SHAPES[name]
        return synthetic_features(name, num_users, num_items, seed)
    if name == "yelp":
        from secemb.data.yelp import load_yelp_features

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
