"""Your own rating file: CSV, TSV or a RecBole atomic ``.inter`` file (``--dataset PATH``).

Format, by the file's suffix
    ``.csv``: comma-separated (quoted fields allowed); ``.tsv``: tab-separated; ``.inter``:
    RecBole's atomic file, tab-separated with a typed header line (``user_id:token``,
    ``item_id:token``, ``rating:float``, ``timestamp:float``; other columns are ignored).
Columns
    ``user, item, rating[, timestamp]``.  A CSV/TSV file may start with a header line: it is
    recognised when its third field is not a number, and its names then pick the columns (case
    and ``_``/``-``/spaces ignored, a RecBole ``:type`` suffix dropped): user = ``user``,
    ``userid``, ``uid``; item = ``item``, ``itemid``, ``movieid``, ``iid``; rating =
    ``rating``, ``score``, ``stars``; timestamp = ``timestamp``, ``time``, ``ts``.  Without a
    header the columns are positional, 3 or 4 per line.
Ids
    Any token (``42``, ``u_42``, ``The Matrix``); remapped to contiguous 0-based ids in sorted
    order of the raw ids (numeric order when every id is an integer, as for MovieLens).  The
    raw ids are kept in the data's :class:`~secemb.data.ids.IdMap` (an integer id in canonical
    form: ``007`` becomes ``7``); a RecBole ``.inter`` file's titles come from the ``.item``
    file of the same name beside it when that file has a ``*title*`` column.
Values
    Ratings are any finite numbers (no scale is assumed); timestamps, when present, are kept
    as integer seconds (``881250949.0`` is accepted).  Blank lines are skipped.
Refused (:class:`DataFormatError`, naming the file and, for a bad line, its 1-based number)
    a wrong number of fields, an empty id, a rating or timestamp that is not a number, a file
    without ratings, and a file with a single user (federated training needs at least two).
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import numpy as np

from secemb.data.errors import DataFormatError, DatasetNotFoundError
from secemb.data.ids import IdMap
from secemb.data.movielens import remap_ids
from secemb.data.ratings import RatingData

__all__ = ["SUFFIXES", "is_rating_file", "read_own_ratings"]

#: file suffix -> field delimiter
SUFFIXES: dict[str, str] = {".csv": ",", ".tsv": "\t", ".inter": "\t"}

_ALIASES: dict[str, tuple[str, ...]] = {
    "user": ("user", "userid", "uid"),
    "item": ("item", "itemid", "movieid", "iid"),
    "rating": ("rating", "score", "stars"),
    "timestamp": ("timestamp", "time", "ts"),
}
_FIELDS = ("user", "item", "rating", "timestamp")
_INTEGER = re.compile(r"[+-]?\d{1,18}\Z")


def is_rating_file(name: str | os.PathLike) -> bool:
    """True when ``name`` names a rating file by its suffix (``.csv``, ``.tsv``, ``.inter``)."""
    return Path(name).suffix.lower() in SUFFIXES


def _normalise(field: str) -> str:
    return re.sub(r"[\s_\-]", "", field.split(":", 1)[0]).lower()


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _columns_from_header(header: list[str], path: Path) -> dict[str, int]:
    """Column index of user, item, rating (and timestamp when named) from a header line."""
    names = [_normalise(f) for f in header]
    found = {}
    for field in _FIELDS:
        hits = [k for k, n in enumerate(names) if n in _ALIASES[field]]
        if len(hits) > 1:
            raise DataFormatError(f"header names the {field} column twice: {header!r}", path=path, line=1)
        if hits:
            found[field] = hits[0]
    missing = [f for f in _FIELDS[:3] if f not in found]
    if missing:
        raise DataFormatError(
            f"header: expected columns named user, item, rating[, timestamp] (e.g. user_id, item_id, rating), "
            f"got {header!r}; missing {', '.join(missing)}",
            path=path,
            line=1,
        )
    return found


def _float_column(tokens: list[str], lines: list[int], what: str, path: Path) -> np.ndarray:
    """``tokens`` as float64, every one finite; the first bad token names its line."""
    try:
        values = np.asarray(tokens, dtype=np.float64)
        bad = ~np.isfinite(values)
    except ValueError:
        bad = np.array([not _is_number(t) for t in tokens])
        values = None
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        kind = "not a number" if values is None else "not finite"
        raise DataFormatError(f"{what} is {kind}: {tokens[k]!r}", path=path, line=lines[k])
    assert values is not None  # numpy refused a token that float() accepts
    return values


def _timestamps(tokens: list[str], lines: list[int], path: Path) -> np.ndarray:
    values = _float_column(tokens, lines, "timestamp", path)
    bad = (values < 0) | (values != np.floor(values)) | (values >= 2.0**62)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise DataFormatError(
            f"timestamp: expected whole seconds >= 0, got {tokens[k]!r}", path=path, line=lines[k]
        )
    return values.astype(np.int64)


def _ids(tokens: list[str]) -> tuple[np.ndarray, list[str]]:
    """Contiguous 0-based ids in sorted raw-id order (numeric order for integer ids), and the
    raw id of each (integers in canonical form)."""
    if all(_INTEGER.match(t) for t in tokens):
        raw = np.asarray(tokens, dtype=np.int64)
        ids, distinct = remap_ids(raw - raw.min())
        return ids, [str(v) for v in (distinct + raw.min()).tolist()]
    uniq, inverse = np.unique(np.asarray(tokens), return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), uniq.tolist()


def _recbole_titles(inter: Path, items: list[str]) -> tuple[str, ...] | None:
    """The title of each item of ``items`` from the RecBole ``.item`` file beside ``inter``
    (same stem), its first column ``item_id`` and a column whose name holds ``title``; ``""``
    for an item it lacks; ``None`` without such a file or column.

    Raises
    ------
    DataFormatError
        A line with another number of fields than the header's.
    """
    path = inter.with_suffix(".item")
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    names = [_normalise(f) for f in rows[0]] if rows else []
    col = next((k for k, n in enumerate(names) if "title" in n), None)
    if col is None or names[0] not in _ALIASES["item"]:
        return None
    titles = {}
    for no, row in enumerate(rows[1:], start=2):
        if not any(f.strip() for f in row):
            continue
        if len(row) != len(names):
            raise DataFormatError(f"expected {len(names)} fields, found {len(row)}", path=path, line=no)
        titles[row[0].strip()] = row[col].strip()
    return tuple(titles.get(i, "") for i in items)


def read_own_ratings(path: str | os.PathLike) -> RatingData:
    """Parse a CSV, TSV or RecBole ``.inter`` rating file (see the module docstring) into a
    :class:`RatingData` named after the path as given.

    Raises
    ------
    DatasetNotFoundError
        If the file does not exist.
    DataFormatError
        On an unknown suffix, a malformed line (with its line number), a file without
        ratings, or a file with fewer than two users.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DataFormatError(f"file type: expected a .csv, .tsv or .inter file, got {suffix or 'no suffix'!r}",
                              path=path)
    if not path.is_file():
        raise DatasetNotFoundError(f"rating file {path} not found (expected a .csv, .tsv or .inter file)")
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as fh:
        reader = csv.reader(fh, delimiter=SUFFIXES[suffix], quoting=csv.QUOTE_MINIMAL if suffix == ".csv"
                            else csv.QUOTE_NONE)
        rows, lines = [], []
        for row in reader:
            if any(f.strip() for f in row):
                rows.append([f.strip() for f in row])
                lines.append(reader.line_num)
    if suffix == ".inter" or (rows and len(rows[0]) >= 3 and not _is_number(rows[0][2])):
        if not rows:
            raise DataFormatError("no header line (a .inter file starts with one, e.g. 'user_id:token')", path=path)
        cols = _columns_from_header(rows[0], path)
        width = len(rows[0])
        rows, lines = rows[1:], lines[1:]
    else:
        width = len(rows[0]) if rows else 3
        if width not in (3, 4):
            raise DataFormatError(
                f"expected 3 or 4 fields (user, item, rating[, timestamp]), found {width}", path=path, line=lines[0]
            )
        cols = dict(zip(_FIELDS, range(width), strict=False))
    if not rows:
        raise DataFormatError("no ratings in file", path=path)
    for row, line in zip(rows, lines, strict=True):
        if len(row) != width:
            raise DataFormatError(f"expected {width} fields, found {len(row)}", path=path, line=line)
    fields = {f: [row[k] for row in rows] for f, k in cols.items()}
    for f in ("user", "item"):
        empty = [k for k, t in enumerate(fields[f]) if not t]
        if empty:
            raise DataFormatError(f"{f} id is empty", path=path, line=lines[empty[0]])
    users, raw_users = _ids(fields["user"])
    if len(raw_users) < 2:
        raise DataFormatError(
            f"users: expected at least 2 (federated training averages over users), got {len(raw_users)}", path=path
        )
    items, raw_items = _ids(fields["item"])
    ratings = _float_column(fields["rating"], lines, "rating", path)
    stamps = _timestamps(fields["timestamp"], lines, path) if "timestamp" in fields else None
    titles = _recbole_titles(path, raw_items) if suffix == ".inter" else None
    return RatingData(
        name=str(path),
        num_users=len(raw_users),
        num_items=len(raw_items),
        users=users,
        items=items,
        ratings=ratings.astype(np.float32),
        timestamps=stamps,
        ids=IdMap(tuple(raw_users), tuple(raw_items), titles),
    )
