"""Yelp: the academic dataset's review and business files -> the paper's subset (§5.1).

Files (JSON lines, one object per line), looked for in ``data_dir`` (else
``$SECEMB_DATA_DIR``, else ``~/.cache/secemb``), directly or in a ``yelp/`` folder:

* ``yelp_academic_dataset_review.json`` (or ``review.json``): ``user_id``, ``business_id``,
  ``stars`` (1-5), ``date`` (``YYYY-MM-DD HH:MM:SS``);
* ``yelp_academic_dataset_business.json`` (or ``business.json``): ``business_id``, ``state``.

The subset: the ``top_users`` (10,000) users with the most reviews (ties broken by
``user_id``), all their reviews; items are the businesses they reviewed.  Ids are remapped to
``0..k-1`` in sorted order of the raw string ids (kept in the data's
:class:`~secemb.data.ids.IdMap`; no titles).  The paper reports 10,000 users, 93,386 items
and 1,007,956 ratings for its subset (Table 7); the dataset version it used is not stated.
Features: one-hot business state (16 states in the paper's subset).

Yelp's terms forbid redistribution; secemb ships no Yelp file.  Malformed lines raise
:class:`~secemb.data.DataFormatError` naming the file and 1-based line.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from secemb.data.errors import DataFormatError, DatasetNotFoundError
from secemb.data.featureset import FeatureSet, one_hot
from secemb.data.ids import IdMap
from secemb.data.movielens import _env_dir, default_data_dir
from secemb.data.ratings import RatingData

__all__ = ["load_yelp", "load_yelp_features", "locate_yelp"]

_REVIEW = ("yelp_academic_dataset_review.json", "review.json")
_BUSINESS = ("yelp_academic_dataset_business.json", "business.json")


def locate_yelp(data_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """``(review file, business file)``.

    Raises
    ------
    DatasetNotFoundError: naming every path tried.
    """
    dirs = [Path(data_dir).expanduser()] if data_dir is not None else [d for d in (_env_dir(), default_data_dir()) if d]
    found = []
    looked = []
    for names in (_REVIEW, _BUSINESS):
        hit = None
        for d in dirs:
            for sub in ("", "yelp"):
                for n in names:
                    p = d / sub / n if sub else d / n
                    looked.append(str(p))
                    if hit is None and p.is_file():
                        hit = p
        if hit is None:
            raise DatasetNotFoundError(
                "Yelp files not found. Looked for:\n  " + "\n  ".join(looked)
                + "\nDownload the Yelp Open Dataset (https://www.yelp.com/dataset; its terms forbid redistribution),"
                " extract the JSON files into DIR and pass --data-dir DIR."
            )
        found.append(hit)
    return found[0], found[1]


def _json_lines(path: Path, fields: tuple[str, ...]):  # noqa: ANN202
    with open(path, "rb") as fh:
        for no, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise DataFormatError(f"not a JSON object ({exc.__class__.__name__})", path=path, line=no) from None
            if not isinstance(obj, dict):
                raise DataFormatError("expected a JSON object", path=path, line=no)
            missing = [f for f in fields if f not in obj]
            if missing:
                raise DataFormatError(f"missing field(s) {', '.join(missing)}", path=path, line=no)
            yield no, obj


def _read_reviews(path: Path) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    users, items, stars, ts = [], [], [], []
    for no, obj in _json_lines(path, ("user_id", "business_id", "stars", "date")):
        u, b, s, d = obj["user_id"], obj["business_id"], obj["stars"], obj["date"]
        if not isinstance(u, str) or not isinstance(b, str) or not u or not b:
            raise DataFormatError("user_id and business_id must be non-empty strings", path=path, line=no)
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 1 <= s <= 5:
            raise DataFormatError(f"stars must be a number in [1, 5], found {s!r}", path=path, line=no)
        try:
            t = datetime.strptime(str(d), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            raise DataFormatError(
                f"date must be 'YYYY-MM-DD HH:MM:SS', found {str(d)[:40]!r}", path=path, line=no
            ) from None
        users.append(u)
        items.append(b)
        stars.append(float(s))
        ts.append(int(t.timestamp()))
    if not users:
        raise DataFormatError("no reviews in file", path=path)
    return users, items, np.asarray(stars, np.float32), np.asarray(ts, np.int64)


def _subset(review: Path, top_users: int) -> tuple[RatingData, list[str]]:
    users, items, stars, ts = _read_reviews(review)
    u_raw, u_inv = np.unique(np.asarray(users, dtype=object).astype(str), return_inverse=True)
    counts = np.bincount(u_inv)
    order = np.lexsort((u_raw, -counts))  # most reviews first, then by id
    keep_users = np.sort(order[:top_users])
    keep = np.isin(u_inv, keep_users)
    new_user = np.full(u_raw.size, -1, np.int64)
    new_user[keep_users] = np.arange(keep_users.size)
    it = np.asarray(items, dtype=object).astype(str)[keep]
    i_raw, i_inv = np.unique(it, return_inverse=True)
    data = RatingData("yelp", int(keep_users.size), int(i_raw.size), new_user[u_inv[keep]],
                      i_inv.astype(np.int64).reshape(-1), stars[keep], ts[keep],
                      IdMap.from_raw(u_raw[keep_users].tolist(), i_raw.tolist()))
    return data, list(i_raw)


def load_yelp(data_dir: str | os.PathLike | None = None, *, top_users: int = 10_000) -> RatingData:
    """The paper's Yelp subset as a :class:`RatingData` (see the module docstring)."""
    review, _ = locate_yelp(data_dir)
    return _subset(review, top_users)[0]


def load_yelp_features(data_dir: str | os.PathLike | None = None, *, top_users: int = 10_000) -> FeatureSet:
    """State one-hot of every item of :func:`load_yelp`'s subset (no user features)."""
    review, business = locate_yelp(data_dir)
    data, item_ids = _subset(review, top_users)
    state: dict[str, str] = {}
    for no, obj in _json_lines(business, ("business_id", "state")):
        if not isinstance(obj["business_id"], str) or not isinstance(obj["state"], (str, type(None))):
            raise DataFormatError("business_id and state must be strings", path=business, line=no)
        state[obj["business_id"]] = obj["state"] or ""
    enc, names = one_hot([state.get(b, "") for b in item_ids], "state")
    return FeatureSet("yelp", np.zeros((data.num_users, 0), np.uint8), enc, (), tuple(names))
