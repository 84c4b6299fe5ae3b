"""MovieLens's catalogue files (each movie's title and genres) and the line-level parsing the
feature files share: what :func:`secemb.data.movielens.read_ratings_file` reads the titles from
and :func:`secemb.data.features.movielens_features` the genres, so that neither of those two
modules imports the other.

* ML-100K: RecBole's ``ml-100k.item`` (tab-separated, typed header) or GroupLens' ``u.item``
  (``id|title|date|video date|url|`` 19 genre flags; Latin-1);
* ML-1M, ML-10M: ``movies.dat`` (``id::title::Genre|Genre``; Latin-1 unless the whole file
  is UTF-8); ML-25M: ``movies.csv`` (``movieId,title,genres``, titles quoted).

Malformed lines raise :class:`~secemb.data.DataFormatError` naming the file and 1-based line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from secemb.data.errors import DataFormatError, DatasetNotFoundError

__all__ = ["Entry", "catalogue", "find_beside", "int_id", "movielens_titles", "records"]


def _lines(path: Path, encoding: str) -> Iterable[tuple[int, str]]:
    with open(path, "rb") as fh:
        for no, raw in enumerate(fh, 1):
            line = raw.decode(encoding, "replace").rstrip("\r\n")
            yield no, line


def records(path: Path, sep: str, nfields: int, *, header: bool = False, encoding: str = "utf-8",
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


def int_id(tok: str, path: Path, line: int, what: str) -> int:
    tok = tok.strip()
    if not tok.isdigit():
        raise DataFormatError(f"{what} must be a non-negative integer, found {tok[:40]!r}", path=path, line=line)
    return int(tok)


def find_beside(folder: Path, names: Sequence[str], dataset: str) -> Path:
    for n in names:
        p = folder / n
        if p.is_file():
            return p
    raise DatasetNotFoundError(
        f"feature files of {dataset!r} not found beside the ratings in {folder}: looked for {', '.join(names)}"
    )


#: an item's catalogue entry: its title and its genres
Entry = tuple[str, list[str]]


def _ml100k_items(path: Path) -> dict[int, Entry]:
    out: dict[int, Entry] = {}
    if path.name == "ml-100k.item":  # RecBole: item_id, movie_title, release_year, class (space-separated)
        for no, f in records(path, "\t", 4, header=True, min_fields=4):
            out[int_id(f[0], path, no, "item id")] = (f[1].strip(), f[3].split())
        return out
    genres = ["unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime",
              "Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery",
              "Romance", "Sci-Fi", "Thriller", "War", "Western"]
    for no, f in records(path, "|", 24, encoding="latin-1"):
        flags = f[5:]
        if any(x not in ("0", "1") for x in flags):
            raise DataFormatError("genre flags must be 0 or 1", path=path, line=no)
        out[int_id(f[0], path, no, "item id")] = (f[1].strip(),
                                                   [g for g, x in zip(genres, flags, strict=True) if x == "1"])
    return out


def _movies_dat(path: Path) -> dict[int, Entry]:
    out: dict[int, Entry] = {}
    for no, line in _lines(path, _text_encoding(path)):
        if not line.strip():
            continue
        first, _, rest = line.partition("::")
        title, sep, genres = rest.rpartition("::")
        if not sep:
            raise DataFormatError("expected 'id::title::genres'", path=path, line=no)
        out[int_id(first, path, no, "movie id")] = (title.strip(), [g for g in genres.split("|") if g])
    return out


def _movies_csv(path: Path) -> dict[int, Entry]:
    out: dict[int, Entry] = {}
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
            out[int_id(row[0], path, reader.line_num, "movie id")] = (row[1].strip(),
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


def catalogue(name: str, folder: Path) -> dict[int, Entry]:
    """Title and genres of every movie of the MovieLens dataset ``name`` whose rating file is
    in ``folder``: RecBole's ``ml-100k.item`` or ``u.item`` (ML-100K), ``movies.csv``
    (ML-25M), ``movies.dat`` (ML-1M, ML-10M).

    Raises
    ------
    DatasetNotFoundError: the file is missing.  DataFormatError: a malformed line.
    """
    if name == "ml-100k":
        return _ml100k_items(find_beside(folder, ("ml-100k.item", "u.item"), name))
    if name == "ml-25m":
        return _movies_csv(find_beside(folder, ("movies.csv",), name))
    return _movies_dat(find_beside(folder, ("movies.dat",), name))


def movielens_titles(name: str, folder: Path, items: np.ndarray) -> tuple[str, ...] | None:
    """The title of each movie of ``items`` (sorted distinct raw movie ids, the order of the
    item indices) from the catalogue file beside the ratings in ``folder`` (see
    :func:`catalogue`); ``""`` for a movie the catalogue lacks; ``None`` when there is no
    catalogue file.

    Raises
    ------
    DataFormatError: a malformed catalogue line (file and line named).
    """
    try:
        entries = catalogue(name, folder)
    except DatasetNotFoundError:
        return None
    return tuple(entries[i][0] if i in entries else "" for i in items.tolist())
