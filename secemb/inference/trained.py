"""A trained model as one object: the public model, every device's private state and what each
device rated in training -- to recommend from (:meth:`TrainedModel.recommend`) and to save to a
folder and load back (:meth:`TrainedModel.save`, :meth:`TrainedModel.load`).

The saved folder (``secemb train --save-model DIR``; the format is in docs/training.md)::

    manifest.json   format, version, protocol, model name and spec, dataset, seed,
                    model_sha256, optimizer, the run's config, ``selection`` (the epoch
                    kept and how: TrainResult.selection; absent from an export), the SHA-256
                    of both .npz files, and ``ids`` (the names of the two id files, when
                    there are ids)
    public.npz      what the two servers hold: table, dense (float64), item_features (uint8)
    items.json      the items' raw ids and titles (public catalogue data; secemb.data.ids)
    devices.npz     what each device holds: params, adam_m, adam_v, adam_t (its optimizer),
                    rated_indptr, rated_items (its training interactions), user_features
    users.json      each user's raw id (each device's own, private like devices.npz)

A model exported from a deployment (:func:`save_public`, ``secemb admin export-model``) has
the public files only -- ``manifest.json``, ``public.npz`` and ``items.json`` when given --:
the users' parameters never leave their devices.  A folder without ids (saved before they
were recorded, or trained on synthetic data) uses the indices as ids.

The arrays are NumPy ``.npz`` files read with ``allow_pickle=False``: no pickle anywhere; the
id files are JSON, checked on load (a person may edit a title).  A folder whose ``.npz`` bytes
do not match its manifest, or whose manifest or id files are malformed, raises
:class:`~secemb.errors.InvalidMessage` naming the file and the check that failed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from secemb.data import RatingData, by_user
from secemb.data.features import FeatureSet
from secemb.data.ids import IdMap, item_ids_from_document, user_ids_from_document
from secemb.digest import model_sha256
from secemb.errors import InvalidMessage, InvalidParameters, check_int
from secemb.models import RecModel, SequenceModel, UserStore, get_model
from secemb.models.optim import AdamConfig
from secemb.round.results import TrainResult

__all__ = ["DEVICES", "FORMAT", "ITEMS", "MANIFEST", "PUBLIC", "USERS", "VERSION", "Recommendations", "TrainedModel",
           "manifest_field", "read_item_ids", "read_npz", "save_public"]

#: the manifest's ``format`` field
FORMAT = "secemb-model"
#: the manifest's ``version`` field; a reader refuses any other
VERSION = 1
MANIFEST, PUBLIC, DEVICES = "manifest.json", "public.npz", "devices.npz"
ITEMS, USERS = "items.json", "users.json"


@dataclass(frozen=True)
class Recommendations:
    """The top-k items for one user, best first (ties by item index ascending).

    Attributes
    ----------
    user: the user's index (0-based, the dataset's contiguous ids).
    items: int64 (k,), indices of items the user did not interact with in training.
    scores: float64 (k,), the model's scores of ``items`` (a rating model's predicted rating,
        unclipped; a sequential model's next-item score).
    user_id: the user's raw id in the dataset (``str(user)`` when ``raw_ids`` is False).
    item_ids: the raw id of each of ``items`` (their indices as strings when ``raw_ids`` is False).
    titles: the title of each of ``items`` (``""`` where the catalogue has none), or ``None``
        when the dataset has no titles.
    raw_ids: whether the model records its dataset's raw ids; False for a model saved before
        they were recorded or trained on synthetic data: its ids are the indices.
    """

    user: int
    items: np.ndarray
    scores: np.ndarray
    user_id: str = ""
    item_ids: tuple[str, ...] = ()
    titles: tuple[str, ...] | None = None
    raw_ids: bool = False


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> str:
    """Write ``arrays`` to ``path`` as an uncompressed ``.npz`` (what :func:`numpy.savez`
    writes, but ``allow_pickle=False`` and fixed zip timestamps, so equal arrays give equal
    bytes); return the file's SHA-256."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            with zf.open(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(arr), allow_pickle=False)
    data = buf.getvalue()
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def read_npz(path: Path, expected_sha256: object, required: set[str], optional: set[str]) -> dict[str, np.ndarray]:
    """The arrays of ``path`` after checking its SHA-256 and its keys (no pickle)."""
    if not path.is_file():
        raise InvalidMessage(f"{path}: missing (the manifest names it)")
    digest = _sha256_file(path)
    if digest != expected_sha256:
        raise InvalidMessage(f"{path}: SHA-256 {digest} differs from the manifest's {expected_sha256!r} "
                             "(the file is corrupted or from another model)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InvalidMessage(f"{path}: not a readable .npz file ({exc})") from exc
    if not required <= set(arrays) <= required | optional:
        raise InvalidMessage(f"{path}: expected arrays {sorted(required)} (optional {sorted(optional)}), "
                             f"got {sorted(arrays)}")
    return arrays


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n",
                    encoding="utf-8")


def _read_json(path: Path) -> Any:
    """The JSON document in ``path`` (InvalidMessage naming the file if missing or malformed)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidMessage(f"{path}: missing (the manifest names it)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidMessage(f"{path}: not valid JSON ({exc})") from None


def _features(model: RecModel) -> FeatureSet | None:
    return getattr(model, "features", None) if model.uses_features else None


def _save(out: Path, model: RecModel, table: np.ndarray, dense: np.ndarray, info: Mapping[str, Any],
          num_users: int, ids: IdMap | None, devices: dict[str, np.ndarray] | None,
          optimizer: AdamConfig | None) -> Path:
    """Write a saved-model folder: the public files always, the devices' files when
    ``devices`` (their arrays) is given; the manifest last."""
    out.mkdir(parents=True, exist_ok=True)
    feats = _features(model)
    public = {"table": np.ascontiguousarray(table, dtype=np.float64),
              "dense": np.ascontiguousarray(dense, dtype=np.float64)}
    if feats is not None:
        public["item_features"] = feats.item
    files = {PUBLIC: _write_npz(out / PUBLIC, public)}
    if devices is not None:
        files[DEVICES] = _write_npz(out / DEVICES, devices if feats is None else {**devices,
                                                                                   "user_features": feats.user})
    id_files = {}
    if ids is not None:
        _write_json(out / ITEMS, ids.items_document())
        id_files["items"] = ITEMS
        if devices is not None and ids.users is not None:
            _write_json(out / USERS, ids.users_document())
            id_files["users"] = USERS
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "model": model.name,
        "model_spec": model.spec(),
        **{k: info[k] for k in ("protocol", "dataset", "seed")},
        "model_sha256": model_sha256(table, dense),
        "num_users": num_users,
        "num_items": int(table.shape[0]),
        "optimizer": None if optimizer is None else {"lr": optimizer.lr, "beta1": optimizer.beta1,
                                                     "beta2": optimizer.beta2, "eps": optimizer.eps},
        "features": None if feats is None else {"name": feats.name, "user_names": list(feats.user_names),
                                                 "item_names": list(feats.item_names)},
        "config": info.get("config", {}),
        "selection": info.get("selection"),
        "files": files,
        "ids": id_files or None,
    }
    _write_json(out / MANIFEST, manifest)
    return out


def save_public(folder: str | os.PathLike, model: RecModel, table: np.ndarray, dense: np.ndarray,
                info: Mapping[str, Any], *, num_users: int, ids: IdMap | None = None) -> Path:
    """Write the public part of a saved model to ``folder`` (created if missing): the
    manifest, ``public.npz`` (``table``, ``dense``, a feature model's public item features)
    and, with ``ids``, ``items.json`` -- never a user's id or parameters.  What ``secemb admin
    export-model`` writes from a deployment: :func:`secemb.inference.saved.load_public_recommender`
    reads it (``secemb infer --credentials ... --recommender``), :meth:`TrainedModel.load`
    refuses it (no user to recommend for).  ``info``: ``protocol``, ``dataset``, ``seed`` and
    ``config`` for the manifest; ``num_users``: the number of devices.

    Raises
    ------
    OSError
        The folder cannot be created or written.
    """
    return _save(Path(folder), model, table, dense, info, num_users, ids, None, None)


def _read_ids(root: Path, manifest: Mapping[str, Any], num_items: int, num_users: int | None) -> IdMap | None:
    """The id map the manifest's ``ids`` names (``None`` when it names none: the indices are
    the ids); the users' ids only when ``num_users`` is given and the folder has them."""
    names = manifest.get("ids")
    if names is None:
        return None
    if not isinstance(names, dict) or names.get("items") != ITEMS or not set(names) <= {"items", "users"} \
            or names.get("users", USERS) != USERS:
        raise InvalidMessage(f"{MANIFEST}: field 'ids' must be null or {{'items': {ITEMS!r}[, 'users': {USERS!r}]}}, "
                             f"got {names!r}")
    items, titles = item_ids_from_document(_read_json(root / ITEMS), num_items, str(root / ITEMS))
    users = None
    if num_users is not None and "users" in names:
        users = user_ids_from_document(_read_json(root / USERS), num_users, str(root / USERS))
    return IdMap(users, items, titles)


def read_item_ids(folder: str | os.PathLike) -> IdMap | None:
    """The items' raw ids and titles of a saved folder (``items.json``; the users' ids are not
    read), or ``None`` when it records none.  For the public part of a model
    (:func:`save_public`), where :meth:`TrainedModel.load` does not apply.

    Raises
    ------
    InvalidMessage
        A missing or malformed manifest or ``items.json``.
    """
    root = Path(folder)
    manifest = _manifest(root)
    return _read_ids(root, manifest, manifest_field(manifest, "num_items", int), None)


def _manifest(root: Path) -> dict[str, Any]:
    """The manifest of the saved folder ``root``, its format and version checked.

    Raises
    ------
    InvalidParameters
        ``root`` is not a folder.
    InvalidMessage
        The manifest is missing, not JSON, or of another format or version.
    """
    if not root.is_dir():
        raise InvalidParameters(f"model folder {root}: expected a folder written by --save-model, got "
                                f"{'a file' if root.exists() else 'nothing there'}")
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InvalidMessage(f"{root / MANIFEST}: missing (not a folder written by --save-model?)") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidMessage(f"{root / MANIFEST}: not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        got = (manifest.get("format"), manifest.get("version")) if isinstance(manifest, dict) else manifest
        raise InvalidMessage(f"{root / MANIFEST}: expected format {FORMAT!r} version {VERSION}, got {got!r}")
    return manifest


def manifest_field(manifest: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``manifest[key]``, checked to be a ``kind`` (a bool is not an int here).

    Raises
    ------
    InvalidMessage
        The field is missing or of another type.
    """
    value = manifest.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InvalidMessage(f"{MANIFEST}: field {key!r} missing or of the wrong type, got {value!r}")
    return value


@dataclass(frozen=True)
class TrainedModel:
    """A trained model: the public model, every device's private state, and each device's
    training interactions (what :meth:`recommend` leaves out).

    Attributes
    ----------
    model: the model (built with ``features`` for a feature model).
    table: float64 (num_items, sparse_width), the public sparse table.
    dense: float64 (dense_size,), the public dense vector.
    user_store: every device's private parameters and on-device optimizer state.
    rated_indptr: int64 (num_users + 1,); ``rated_items[rated_indptr[u]:rated_indptr[u + 1]]``
        are user ``u``'s training interactions, in time order where the data has timestamps
        (a sequential model's history), else by item id.
    rated_items: int64 (num_train_interactions,).
    info: provenance recorded in the manifest: ``protocol``, ``dataset``, ``seed``,
        ``model_sha256``, the run's ``config`` and ``selection`` (the epoch kept,
        :meth:`~secemb.round.results.TrainResult.selection`).
    ids: the dataset's raw user and item ids and item titles (:class:`~secemb.data.ids.IdMap`),
        or ``None``: the indices are the ids.
    """

    model: RecModel
    table: np.ndarray
    dense: np.ndarray
    user_store: UserStore
    rated_indptr: np.ndarray
    rated_items: np.ndarray
    info: Mapping[str, Any]
    ids: IdMap | None = None

    @classmethod
    def from_training(cls, model: RecModel, train: RatingData, result: TrainResult) -> TrainedModel:
        """The ``model`` that ``result`` trained on ``train`` (the training data: what each user
        rated, left out of :meth:`recommend`)."""
        rated = by_user(train, order="time" if train.timestamps is not None else "item")
        cfg = result.config
        info = {"protocol": cfg["protocol"], "dataset": cfg.get("dataset", train.name), "seed": cfg["seed"],
                "model_sha256": result.model_sha256, "config": dict(cfg), "selection": result.selection()}
        return cls(model, result.table, result.dense, result.user_store, rated.indptr, rated.items, info,
                   train.ids)

    @property
    def num_users(self) -> int:
        """Number of users (devices)."""
        return self.user_store.num_users

    @property
    def num_items(self) -> int:
        """Number of items (rows of the table)."""
        return int(self.table.shape[0])

    @property
    def model_sha256(self) -> str:
        """SHA-256 of the public model (:func:`~secemb.digest.model_sha256`)."""
        return model_sha256(self.table, self.dense)

    def rated(self, user: int) -> np.ndarray:
        """int64: ``user``'s training interactions (see ``rated_indptr``)."""
        self.user_store.state(user)  # validates user
        return self.rated_items[self.rated_indptr[user] : self.rated_indptr[user + 1]]

    def scores(self, user: int) -> np.ndarray:
        """float64 (num_items,): the model's score of every item for ``user`` -- a rating model's
        predicted rating (unclipped), a sequential model's next-item score after the user's last
        ``max_len`` training interactions."""
        history = self.rated(user)
        users = np.array([user], dtype=np.int64)
        if isinstance(self.model, SequenceModel):
            hist = np.full((1, self.model.task.max_len), -1, dtype=np.int64)
            tail = history[-self.model.task.max_len :]
            hist[0, hist.shape[1] - tail.size :] = tail
            return self.model.score_next(self.table, self.dense, self.user_store, users, hist, None)[0]
        items = np.arange(self.num_items, dtype=np.int64)
        return self.model.predict(self.table, self.dense, self.user_store, np.repeat(users, items.size), items)

    def user_index(self, user_id: str) -> int:
        """The index of the user whose raw id in the dataset is ``user_id`` (for a model
        without raw ids, the index written in decimal).

        Raises
        ------
        InvalidParameters
            No user has that id.
        """
        if self.ids is not None:
            return self.ids.user_index(user_id)
        if not isinstance(user_id, str) or not user_id.strip().isascii() or not user_id.strip().isdigit():
            raise InvalidParameters(f"unknown user id {user_id!r} (this model records no raw ids: its ids are the "
                                    f"indices 0..{self.num_users - 1})")
        if int(user_id) >= self.num_users:
            raise InvalidParameters(f"user must be in [0, {self.num_users}), got {int(user_id)} (this model records "
                                    "no raw ids: its ids are the indices)")
        return int(user_id)

    def user_id(self, user: int) -> str:
        """The raw id of the user whose index is ``user`` (``str(user)`` for a model without
        raw ids).

        Raises
        ------
        InvalidParameters
            ``user`` not in ``[0, num_users)``.
        """
        self.user_store.state(user)  # validates user
        return str(user) if self.ids is None or self.ids.users is None else self.ids.users[user]

    def recommend(self, user: int | None = None, k: int = 10, *, user_id: str | None = None) -> Recommendations:
        """The ``k`` best-scored items a user did not interact with in training (fewer if
        fewer are left), best first, ties by item index; deterministic.  The user is given by
        its index ``user`` or by its raw id in the dataset ``user_id`` (one of the two); the
        result has both the items' indices and their raw ids and titles.

        Raises
        ------
        InvalidParameters
            Neither or both of ``user`` and ``user_id``; ``user`` not in ``[0, num_users)``;
            an unknown ``user_id``; ``k`` not an int >= 1.
        """
        if (user is None) == (user_id is None):
            raise InvalidParameters("give the user's index (user=) or its raw id (user_id=), one of the two")
        k = check_int("k", k, low=1)
        index = self.user_index(user_id) if user_id is not None else user
        if index is None:  # pragma: no cover - excluded above; for the type checker
            raise InvalidParameters("no user given")
        scores = self.scores(index)
        candidates = np.setdiff1d(np.arange(self.num_items, dtype=np.int64), self.rated(index))
        top = candidates[np.lexsort((candidates, -scores[candidates]))[:k]]
        if self.ids is None:
            return Recommendations(int(index), top, scores[top], str(index), tuple(str(i) for i in top.tolist()))
        titles = None if self.ids.titles is None else tuple(self.ids.titles[i] for i in top.tolist())
        return Recommendations(int(index), top, scores[top], self.user_id(index),
                               tuple(self.ids.items[i] for i in top.tolist()), titles, True)

    # ------------------------------------------------------------------ the saved folder

    def save(self, folder: str | os.PathLike) -> Path:
        """Write the model to ``folder`` (created if missing; files of an earlier save there are
        replaced, the manifest last); return its path.  The format is in the module docstring
        and docs/training.md."""
        devices = {**self.user_store.state_dict(), "rated_indptr": self.rated_indptr, "rated_items": self.rated_items}
        return _save(Path(folder), self.model, self.table, self.dense, self.info, self.num_users, self.ids,
                     devices, self.user_store.optimizer)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> TrainedModel:
        """Read a folder written by :meth:`save`.

        Raises
        ------
        InvalidParameters
            ``folder`` is not a folder.
        InvalidMessage
            A file is missing, corrupted (its SHA-256 differs from the manifest's) or malformed,
            the manifest's format or version is not this reader's, the model is not registered
            in this process, or the arrays do not fit the model or give the manifest's
            ``model_sha256``.  The message names the file and the check.
        """
        root = Path(folder)
        manifest = _manifest(root)
        files = manifest_field(manifest, "files", dict)
        if DEVICES not in files:
            raise InvalidMessage(f"{root}: holds a public model only (no {DEVICES}: exported from a deployment, whose "
                                 "users' parameters stay on their devices), so it has no user to recommend for; a "
                                 f"device uses it with 'secemb infer --credentials FILE --state-file STATE "
                                 f"--recommender {root}'")
        public = read_npz(root / PUBLIC, files.get(PUBLIC), {"table", "dense"}, {"item_features"})
        devices = read_npz(root / DEVICES, files.get(DEVICES),
                            {"params", "adam_m", "adam_v", "adam_t", "rated_indptr", "rated_items"}, {"user_features"})
        try:
            trained = cls._from_arrays(manifest, public, devices)
        except (InvalidParameters, TypeError) as exc:  # TypeError: a spec or optimizer field the model does not take
            raise InvalidMessage(f"{root}: {exc}") from exc
        return dataclasses.replace(trained, ids=_read_ids(root, manifest, trained.num_items, trained.num_users))

    @classmethod
    def _from_arrays(cls, manifest: dict[str, Any], public: dict[str, np.ndarray],
                     devices: dict[str, np.ndarray]) -> TrainedModel:
        """Rebuild and check the model the manifest and the arrays describe."""
        spec = dict(manifest_field(manifest, "model_spec", dict))
        feats = manifest.get("features")
        if feats is not None:
            if not isinstance(feats, dict) or "item_features" not in public or "user_features" not in devices:
                raise InvalidMessage(f"{MANIFEST}: features recorded without both feature arrays")
            spec["features"] = FeatureSet(str(feats.get("name", "")), devices.pop("user_features"),
                                          public.pop("item_features"), tuple(feats.get("user_names", ())),
                                          tuple(feats.get("item_names", ())))
        model = get_model(manifest_field(manifest, "model", str), **spec)
        table, dense = public["table"], public["dense"]
        num_items = manifest_field(manifest, "num_items", int)
        if table.dtype != np.float64 or table.shape != (num_items, model.sparse_width):
            raise InvalidMessage(f"{PUBLIC}: table must be float64 {(num_items, model.sparse_width)}, got "
                                 f"{table.dtype} {table.shape}")
        if dense.dtype != np.float64 or dense.shape != (model.dense_size,):
            raise InvalidMessage(f"{PUBLIC}: dense must be float64 ({model.dense_size},), got {dense.dtype} "
                                 f"{dense.shape}")
        expected = manifest_field(manifest, "model_sha256", str)
        if model_sha256(table, dense) != expected:
            raise InvalidMessage(f"{PUBLIC}: the model's SHA-256 differs from the manifest's {expected}")
        optimizer = AdamConfig(**manifest_field(manifest, "optimizer", dict))
        indptr, rated = devices.pop("rated_indptr"), devices.pop("rated_items")
        store = UserStore.from_state_dict(devices, optimizer)
        if store.private_size != model.private_size or store.num_users != manifest_field(manifest, "num_users", int):
            raise InvalidMessage(f"{DEVICES}: params must be ({manifest['num_users']}, {model.private_size}), got "
                                 f"{store.params.shape}")
        if (indptr.dtype != np.int64 or indptr.shape != (store.num_users + 1,) or indptr[0] != 0
                or (np.diff(indptr) < 0).any() or indptr[-1] != rated.size or rated.dtype != np.int64
                or (rated.size and not 0 <= rated.min() <= rated.max() < num_items)):
            raise InvalidMessage(f"{DEVICES}: rated_indptr/rated_items are not a CSR of item ids in "
                                 f"[0, {num_items}) over {store.num_users} users")
        info = {k: manifest.get(k) for k in ("protocol", "dataset", "seed", "model_sha256", "config", "selection")}
        return cls(model, table, dense, store, indptr, rated, info)
