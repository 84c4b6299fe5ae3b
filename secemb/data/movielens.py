"""MovieLens: locating, parsing and (optionally) downloading the rating files.

GroupLens terms: research use only, cite Harper & Konstan (2015), never redistribute.  secemb
therefore ships no MovieLens file; it reads them from a data directory (``data_dir``
argument / ``--data-dir``, else ``$SECEMB_DATA_DIR``, else ``~/.cache/secemb``), from the
RecBole package's bundled ML-100K, or downloads them from GroupLens on request.

Raw user and item ids are remapped to contiguous 0-based ids in sorted order of the raw ids;
the raw ids, and the movies' titles from the catalogue file beside the ratings (``u.item``,
RecBole's ``ml-100k.item``, ``movies.dat``, ``movies.csv``) where it is there, are kept in the
data's :class:`~secemb.data.ids.IdMap`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from secemb.data._text import parse_columns, read_first_line
from secemb.data.catalogue import movielens_titles
from secemb.data.errors import DataFormatError, DatasetNotFoundError
from secemb.data.ids import IdMap
from secemb.data.ratings import RatingData
from secemb.errors import InvalidParameters

__all__ = [
    "MOVIELENS",
    "DATA_DIR_ENV",
    "ARCHIVES",
    "Archive",
    "Fetcher",
    "default_data_dir",
    "locate_movielens",
    "read_ratings_file",
    "load_movielens",
    "download_movielens",
]

MOVIELENS = ("ml-100k", "ml-1m", "ml-10m", "ml-25m")
DATA_DIR_ENV = "SECEMB_DATA_DIR"
BASE_URL = "https://files.grouplens.org/datasets/movielens/"
SOURCE_PAGE = "https://grouplens.org/datasets/movielens/"

# Where a dataset's rating file may sit inside a data directory, in search order.
_CANDIDATES: dict[str, tuple[str, ...]] = {
    "ml-100k": ("u.data", "ml-100k/u.data", "ml-100k.inter", "ml-100k/ml-100k.inter"),
    "ml-1m": ("ratings.dat", "ml-1m/ratings.dat"),
    "ml-10m": ("ratings.dat", "ml-10M100K/ratings.dat", "ml-10m/ratings.dat"),
    "ml-25m": ("ratings.csv", "ml-25m/ratings.csv"),
}

# Allowed rating values: ML-100K and ML-1M use whole stars 1..5, ML-10M and ML-25M half stars.
_RATING_RANGE: dict[str, tuple[float, float]] = {
    "ml-100k": (1.0, 5.0),
    "ml-1m": (1.0, 5.0),
    "ml-10m": (0.5, 5.0),
    "ml-25m": (0.5, 5.0),
}

_ML25M_HEADER = "userId,movieId,rating,timestamp"
_INTER_FIELDS = ("user_id", "item_id", "rating", "timestamp")


@dataclass(frozen=True)
class Archive:
    """How to fetch and verify one GroupLens archive.

    Attributes
    ----------
    url:
        Download address of the zip.
    folder:
        Top-level folder inside the zip; files are extracted to ``<data_dir>/<folder>/``.
    ratings:
        Name of the rating file inside ``folder``.
    extra:
        Other members extracted when present (metadata and README, for licence and features).
    zip_md5, zip_sha256:
        Digests of the zip, or ``None`` when not pinned.
    ratings_sha256:
        Digest of the extracted rating file, or ``None``.
    ratings_lines:
        Number of data lines (ratings) in the rating file, header excluded.
    header_lines:
        Header lines at the top of the rating file.
    """

    url: str
    folder: str
    ratings: str
    extra: tuple[str, ...]
    zip_md5: str | None
    zip_sha256: str | None
    ratings_sha256: str | None
    ratings_lines: int
    header_lines: int = 0


# Pinned digests.  The MD5s are the ones GroupLens publishes beside each zip (<zip>.md5) and
# that many public projects pin.  The SHA-256 of the ML-1M and ML-10M zips are those pinned by
# other public projects (e.g. TensorFlow Recommenders' MovieLens-1M example); the SHA-256 of
# ML-100K's u.data is the project's own (docs/data.md) and equals the body of RecBole 1.2.1's
# ml-100k.inter.  No SHA-256 is known here for the ML-100K and ML-25M zips: for those the zip
# MD5 and the rating count are checked.  Rating counts are from each dataset's README.
ARCHIVES: dict[str, Archive] = {
    "ml-100k": Archive(
        url=BASE_URL + "ml-100k.zip",
        folder="ml-100k",
        ratings="u.data",
        extra=("u.item", "u.user", "u.genre", "u.occupation", "README"),
        zip_md5="0e33842e24a9c977be4e0107933c0723",
        zip_sha256=None,
        ratings_sha256="06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490",
        ratings_lines=100_000,
    ),
    "ml-1m": Archive(
        url=BASE_URL + "ml-1m.zip",
        folder="ml-1m",
        ratings="ratings.dat",
        extra=("movies.dat", "users.dat", "README"),
        zip_md5="c4d9eecfca2ab87c1945afe126590906",
        zip_sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
        ratings_sha256=None,
        ratings_lines=1_000_209,
    ),
    "ml-10m": Archive(
        url=BASE_URL + "ml-10m.zip",
        folder="ml-10M100K",
        ratings="ratings.dat",
        extra=("movies.dat", "tags.dat", "README.html"),
        zip_md5="ce571fd55effeba0271552578f2648bd",
        zip_sha256="813c411ccb6122564edfe752e7f80c4dcc5aa25fa94c93622f6877a7ba252862",
        ratings_sha256=None,
        ratings_lines=10_000_054,
    ),
    "ml-25m": Archive(
        url=BASE_URL + "ml-25m.zip",
        folder="ml-25m",
        ratings="ratings.csv",
        extra=("movies.csv", "tags.csv", "links.csv", "README.txt"),
        zip_md5="6b51fb2759a8657d3bfcbfc42b592ada",
        zip_sha256=None,
        ratings_sha256=None,
        ratings_lines=25_000_095,
        header_lines=1,
    ),
}

Fetcher = Callable[[str, Path], None]
"""``fetch(url, dest)`` writes the bytes found at ``url`` to the file ``dest``."""

_MAX_MEMBER = 2 << 30  # nor any member we extract near 2 GiB


def _check_name(name: str) -> None:
    if name not in MOVIELENS:
        raise InvalidParameters(f"unknown MovieLens dataset {name!r}; expected one of {MOVIELENS}")


def default_data_dir() -> Path:
    """Where downloads go when neither ``data_dir`` nor ``$SECEMB_DATA_DIR`` is given."""
    return Path.home() / ".cache" / "secemb"


def _env_dir() -> Path | None:
    value = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else None


def _download_dir(data_dir: str | os.PathLike | None) -> Path:
    if data_dir is not None:
        return Path(data_dir).expanduser()
    return _env_dir() or default_data_dir()


def _recbole_ml100k() -> Path | None:
    """RecBole's bundled ``ml-100k.inter``, found without importing RecBole."""
    try:
        spec = importlib.util.find_spec("recbole")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root) / "dataset_example" / "ml-100k" / "ml-100k.inter"
        if path.is_file():
            return path
    return None


def _how_to_get(name: str) -> str:
    folder = ARCHIVES[name].folder
    lines = [
        f"To get it: download {name}.zip from {SOURCE_PAGE} (research use only; cite Harper &"
        " Konstan 2015; do not redistribute) and unzip it in a data directory (giving"
        f" DIR/{folder}/{ARCHIVES[name].ratings}); then pass --data-dir DIR (data_dir=DIR) or set"
        f" {DATA_DIR_ENV}=DIR.",
        f"Or, on a machine with network access, --download (load_dataset({name!r}, download=True)) fetches"
        f" and verifies it into the data directory (default {default_data_dir()}).",
    ]
    if name == "ml-100k":
        lines.append(
            "Or `pip install --no-deps recbole==1.2.1`, which ships ml-100k.inter (used when no"
            " data directory is given)."
        )
    return "\n".join(lines)


def locate_movielens(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Find the rating file of a MovieLens dataset.

    Search order: if ``data_dir`` is given, only there; otherwise ``$SECEMB_DATA_DIR`` (when
    set), then :func:`default_data_dir`, then — for ``ml-100k`` only — RecBole's bundled
    ``ml-100k.inter``.  Within a directory the candidates are, in order:
    ``ml-100k``: ``u.data``, ``ml-100k/u.data``, ``ml-100k.inter``, ``ml-100k/ml-100k.inter``;
    ``ml-1m``: ``ratings.dat``, ``ml-1m/ratings.dat``;
    ``ml-10m``: ``ratings.dat``, ``ml-10M100K/ratings.dat``, ``ml-10m/ratings.dat``;
    ``ml-25m``: ``ratings.csv``, ``ml-25m/ratings.csv``.

    Raises
    ------
    DatasetNotFoundError
        Naming every place looked at and how to obtain the data.
    InvalidParameters
        If ``name`` is not a MovieLens dataset.
    """
    _check_name(name)
    if data_dir is not None:
        dirs = [Path(data_dir).expanduser()]
    else:
        dirs = [d for d in (_env_dir(), default_data_dir()) if d is not None]
    looked: list[str] = []
    for d in dirs:
        for rel in _CANDIDATES[name]:
            path = d / rel
            if path.is_file():
                return path
            looked.append(str(path))
    if name == "ml-100k" and data_dir is None:
        example = _recbole_ml100k()
        if example is not None:
            return example
        looked.append("the recbole package's dataset_example/ml-100k/ml-100k.inter (not installed)")
    raise DatasetNotFoundError(
        f"MovieLens dataset {name!r} not found. Looked for:\n  "
        + "\n  ".join(looked)
        + "\n"
        + _how_to_get(name)
    )


def _layout(name: str, path: Path) -> tuple[bytes, tuple[int, int, int, int], int]:
    """Separator, column order and header line count of a rating file, from its name."""
    fname = path.name
    if fname.endswith(".inter"):
        header = read_first_line(path)
        fields = header.split("\t")
        names = [f.split(":", 1)[0] for f in fields]
        if len(fields) != 4 or sorted(names) != sorted(_INTER_FIELDS):
            raise DataFormatError(
                f"expected a RecBole header with the fields {', '.join(_INTER_FIELDS)} "
                f"(tab-separated, e.g. 'user_id:token'), found {header[:200]!r}",
                path=path,
                line=1,
            )
        u, i, r, t = (names.index(f) for f in _INTER_FIELDS)
        return b"\t", (u, i, r, t), 1
    if fname.endswith(".csv"):
        header = read_first_line(path).lstrip("\ufeff").strip()
        if header != _ML25M_HEADER:
            raise DataFormatError(
                f"expected the header {_ML25M_HEADER!r}, found {header[:200]!r}", path=path, line=1
            )
        return b",", (0, 1, 2, 3), 1
    if fname.endswith(".dat") and name != "ml-100k":
        return b"::", (0, 1, 2, 3), 0
    return b"\t", (0, 1, 2, 3), 0  # u.data and anything else: tab-separated, no header


def remap_ids(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map non-negative int64 ids to 0..k-1 in sorted order of the raw ids; return ``(ids,
    distinct)``: the new ids and the k sorted distinct raw ids (``distinct[ids] == raw``)."""
    if raw.shape[0] == 0:
        return raw.astype(np.int64), raw.astype(np.int64)
    top = int(raw.max())
    if top < 4 * raw.shape[0] + (1 << 20):  # dense enough: a lookup table beats sorting
        present = np.zeros(top + 1, dtype=bool)
        present[raw] = True
        table = np.cumsum(present, dtype=np.int64) - 1
        return table[raw], np.flatnonzero(present).astype(np.int64)
    uniq, inverse = np.unique(raw, return_inverse=True)
    return inverse.astype(np.int64, copy=False).reshape(-1), uniq.astype(np.int64, copy=False)


def read_ratings_file(name: str, path: str | os.PathLike) -> RatingData:
    """Parse one MovieLens rating file into a :class:`RatingData` named ``name``.

    The format follows the file name: ``*.inter`` (RecBole, tab-separated, typed header),
    ``*.csv`` (``userId,movieId,rating,timestamp`` header), ``*.dat`` (``::``-separated;
    for ``ml-100k`` a ``.dat`` is read as tab-separated), anything else tab-separated
    (``u.data``).  Ids are remapped to contiguous 0-based ids in sorted raw-id order; the raw
    ids and the titles of the catalogue file in the same folder, when there is one
    (:func:`~secemb.data.catalogue.movielens_titles`), are kept in the data's ``ids``.

    Raises
    ------
    DataFormatError
        On a malformed line, a rating outside the dataset's range (ML-100K/1M: 1..5,
        ML-10M/25M: 0.5..5), a negative id or timestamp, a file without ratings, or a
        malformed catalogue line; the message names the file and the 1-based line number.
    """
    _check_name(name)
    path = Path(path)
    sep, order, header_lines = _layout(name, path)
    cols = parse_columns(
        path,
        sep,
        order=order,
        header_lines=header_lines,
        names=("user id", "item id", "rating", "timestamp"),
    )
    n = cols.users.shape[0]
    if n == 0:
        raise DataFormatError("no ratings in file", path=path)

    def fail(mask: np.ndarray, what: str, values: np.ndarray) -> None:
        row = int(np.flatnonzero(mask)[0])
        raise DataFormatError(
            f"{what}, found {values[row].item()!r}", path=path, line=row + 1 + header_lines
        )

    lo, hi = _RATING_RANGE[name]
    bad = ~((cols.ratings >= lo) & (cols.ratings <= hi))
    if bad.any():
        fail(bad, f"rating out of range [{lo:g}, {hi:g}]", cols.ratings)
    for arr, what in (
        (cols.users, "user id"),
        (cols.items, "item id"),
        (cols.timestamps, "timestamp"),
    ):
        if arr.min() < 0:
            fail(arr < 0, f"{what} must be >= 0", arr)
    users, raw_users = remap_ids(cols.users)
    items, raw_items = remap_ids(cols.items)
    return RatingData(
        name=name,
        num_users=raw_users.size,
        num_items=raw_items.size,
        users=users,
        items=items,
        ratings=cols.ratings.astype(np.float32),
        timestamps=cols.timestamps,
        ids=IdMap.from_raw(raw_users.tolist(), raw_items.tolist(), movielens_titles(name, path.parent, raw_items)),
    )


def load_movielens(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    download: bool = False,
    fetch: Fetcher | None = None,
) -> RatingData:
    """Locate (or, with ``download=True``, fetch) and parse a MovieLens dataset.

    See :func:`locate_movielens` for where it looks and :func:`download_movielens` for the
    download.  Nothing is downloaded when the file is already present.
    """
    try:
        path = locate_movielens(name, data_dir)
    except DatasetNotFoundError:
        if not download:
            raise
        path = download_movielens(name, data_dir, fetch=fetch)
    return read_ratings_file(name, path)


# ----------------------------------------------------------------------------- download


def _https_fetch(url: str, dest: Path) -> None:
    """Default fetcher: pooch's HTTPS download with a progress bar on stderr, streamed to ``dest``."""
    if not url.startswith("https://"):
        raise InvalidParameters(f"refusing to download over a non-HTTPS URL: {url}")
    import pooch

    pooch.HTTPDownloader(progressbar=True, timeout=60, headers={"User-Agent": "secemb"})(url, str(dest), None)


def _digest(path: Path, algo: str) -> str:
    """Hex digest of a file (``algo``: ``md5`` or ``sha256``), computed by pooch."""
    import pooch

    return pooch.file_hash(str(path), alg=algo)


def _count_lines(path: Path) -> int:
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def _extract(zf: zipfile.ZipFile, member: str, dest: Path) -> bool:
    """Copy one zip member to ``dest`` (never trusting member paths); False if absent."""
    try:
        info = zf.getinfo(member)
    except KeyError:
        return False
    if info.file_size > _MAX_MEMBER:
        raise DataFormatError(f"zip member {member} is too large ({info.file_size} bytes)")
    with zf.open(info) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    return True


def download_movielens(
    name: str, data_dir: str | os.PathLike | None = None, *, fetch: Fetcher | None = None
) -> Path:
    """Download a MovieLens zip from GroupLens, verify and extract it; return the rating file.

    Steps: fetch ``ARCHIVES[name].url`` into a temporary folder inside the data directory
    (``data_dir``, else ``$SECEMB_DATA_DIR``, else ``~/.cache/secemb``); check the pinned zip
    digests (MD5 as published by GroupLens, SHA-256 where pinned); extract the rating file and
    a few metadata files by exact member name; check the rating file's SHA-256 where pinned
    (ML-100K's ``u.data``) and its number of ratings; only then move the files into
    ``<data_dir>/<folder>/`` (the rating file last).  The temporary folder is always removed,
    so a failed download leaves nothing behind.

    Parameters
    ----------
    fetch:
        ``fetch(url, dest)`` writing the bytes at ``url`` to ``dest``; default: HTTPS through
        pooch, with a progress bar.  Tests inject a fake one.

    Raises
    ------
    DataFormatError
        If a digest or the rating count does not match, or the zip lacks the rating file.
    DatasetNotFoundError
        If fetching fails (offline, HTTP error); the message is one line.
    OSError
        If writing fails.
    """
    _check_name(name)
    arch = ARCHIVES[name]
    root = _download_dir(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-download-", dir=root))
    try:
        zpath = tmp / arch.url.rsplit("/", 1)[-1]
        try:
            (fetch or _https_fetch)(arch.url, zpath)
        except OSError as exc:  # requests' errors are OSErrors: offline, DNS, HTTP 404, ...
            raise DatasetNotFoundError(
                f"could not download {arch.url} ({type(exc).__name__}: is this machine online?); or put "
                f"{arch.folder}/{arch.ratings} under {root} by hand (docs/data.md)") from None
        if not zpath.is_file():
            raise DataFormatError(f"fetching {arch.url} produced no file")
        for algo, name, want in (("MD5", "md5", arch.zip_md5), ("SHA-256", "sha256", arch.zip_sha256)):
            if want is None:
                continue
            got = _digest(zpath, name)
            if got != want:
                raise DataFormatError(
                    f"{algo} of {arch.url} is {got}, expected {want}; the download is corrupt or"
                    " the archive changed upstream"
                )
        staged = tmp / "files"
        staged.mkdir()
        try:
            zf = zipfile.ZipFile(zpath)
        except zipfile.BadZipFile as exc:
            raise DataFormatError(f"{arch.url} is not a valid zip: {exc}") from None
        with zf:
            if not _extract(zf, f"{arch.folder}/{arch.ratings}", staged / arch.ratings):
                raise DataFormatError(f"{arch.url} has no member {arch.folder}/{arch.ratings}")
            extracted = [m for m in arch.extra if _extract(zf, f"{arch.folder}/{m}", staged / m)]
        rpath = staged / arch.ratings
        if arch.ratings_sha256 is not None:
            got = _digest(rpath, "sha256")
            if got != arch.ratings_sha256:
                raise DataFormatError(
                    f"SHA-256 of {arch.folder}/{arch.ratings} in {arch.url} is {got}, expected "
                    f"{arch.ratings_sha256}"
                )
        lines = _count_lines(rpath) - arch.header_lines
        if lines != arch.ratings_lines:
            raise DataFormatError(
                f"{arch.folder}/{arch.ratings} in {arch.url} has {lines} ratings, expected "
                f"{arch.ratings_lines}"
            )
        final = root / arch.folder
        final.mkdir(exist_ok=True)
        for member in [*extracted, arch.ratings]:
            os.replace(staged / member, final / member)
        return final / arch.ratings
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
