"""A trained model as one object: the public model, every device's private state and what each
device rated in training -- to recommend from (:meth:`TrainedModel.recommend`) and to save to a
folder and load back (:meth:`TrainedModel.save`, :meth:`TrainedModel.load`).

The saved folder (``secemb train --save-model DIR``; the format is in docs/training.md)::

    manifest.json   format, version, protocol, model name and spec, dataset, seed,
                    model_sha256, optimizer, the run's config, and the SHA-256 of both files
    public.npz      what the two servers hold: table, dense (float64), item_features (uint8)
    devices.npz     what each device holds: params, adam_m, adam_v, adam_t (its optimizer),
                    rated_indptr, rated_items (its training interactions), user_features

The arrays are NumPy ``.npz`` files read with ``allow_pickle=False``: no pickle anywhere.  A
folder whose bytes do not match its manifest, or whose manifest is malformed, raises
:class:`~secemb.errors.InvalidMessage` naming the file and the check that failed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from secemb.data import by_user
from secemb.data.features import FeatureSet
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.models import RecModel, SequenceModel, UserStore, get_model
from secemb.models.optim import AdamConfig
from secemb.training.results import TrainResult, model_sha256

if TYPE_CHECKING:  # pragma: no cover
    from secemb.training.builder import BuiltExperiment

__all__ = ["FORMAT", "VERSION", "Recommendations", "TrainedModel"]

#: the manifest's ``format`` field
FORMAT = "secemb-model"
#: the manifest's ``version`` field; a reader refuses any other
VERSION = 1
MANIFEST, PUBLIC, DEVICES = "manifest.json", "public.npz", "devices.npz"


@dataclass(frozen=True)
class Recommendations:
    """The top-k items for one user, best first (ties by item id ascending).

    Attributes
    ----------
    user: the user id (0-based, the dataset's contiguous ids).
    items: int64 (k,), item ids the user did not interact with in training.
    scores: float64 (k,), the model's scores of ``items`` (a rating model's predicted rating,
        unclipped; a sequential model's next-item score).
    """

    user: int
    items: np.ndarray
    scores: np.ndarray


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


def _read_npz(path: Path, expected_sha256: object, required: set[str], optional: set[str]) -> dict[str, np.ndarray]:
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


def _field(manifest: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
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
        ``model_sha256`` and the run's ``config``.
    """

    model: RecModel
    table: np.ndarray
    dense: np.ndarray
    user_store: UserStore
    rated_indptr: np.ndarray
    rated_items: np.ndarray
    info: Mapping[str, Any]

    @classmethod
    def from_training(cls, built: BuiltExperiment, result: TrainResult) -> TrainedModel:
        """The model ``result`` trained from ``built`` (:func:`~secemb.training.build_experiment`)."""
        train = built.train_data
        rated = by_user(train, order="time" if train.timestamps is not None else "item")
        cfg = result.config
        info = {"protocol": cfg["protocol"], "dataset": cfg.get("dataset", train.name), "seed": cfg["seed"],
                "model_sha256": result.model_sha256, "config": dict(cfg)}
        return cls(built.model, result.table, result.dense, result.user_store, rated.indptr, rated.items, info)

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
        """SHA-256 of the public model (:func:`~secemb.training.model_sha256`)."""
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

    def recommend(self, user: int, k: int = 10) -> Recommendations:
        """The ``k`` best-scored items ``user`` did not interact with in training (fewer if
        fewer are left), best first, ties by item id; deterministic.

        Raises
        ------
        InvalidParameters
            ``user`` not in ``[0, num_users)`` or ``k`` not an int >= 1.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidParameters(f"k must be an int >= 1, got {k!r}")
        scores = self.scores(user)
        candidates = np.setdiff1d(np.arange(self.num_items, dtype=np.int64), self.rated(user))
        order = np.lexsort((candidates, -scores[candidates]))[:k]
        return Recommendations(int(user), candidates[order], scores[candidates[order]])

    # ------------------------------------------------------------------ the saved folder

    def _features(self) -> FeatureSet | None:
        return getattr(self.model, "features", None) if self.model.uses_features else None

    def save(self, folder: str | os.PathLike) -> Path:
        """Write the model to ``folder`` (created if missing; files of an earlier save there are
        replaced, the manifest last); return its path.  The format is in the module docstring
        and docs/training.md."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        feats = self._features()
        public = {"table": np.ascontiguousarray(self.table, dtype=np.float64),
                  "dense": np.ascontiguousarray(self.dense, dtype=np.float64)}
        devices = {**self.user_store.state_dict(), "rated_indptr": self.rated_indptr, "rated_items": self.rated_items}
        if feats is not None:
            public["item_features"], devices["user_features"] = feats.item, feats.user
        files = {PUBLIC: _write_npz(out / PUBLIC, public), DEVICES: _write_npz(out / DEVICES, devices)}
        opt = self.user_store.optimizer
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "model": self.model.name,
            "model_spec": self.model.spec(),
            **{k: self.info[k] for k in ("protocol", "dataset", "seed")},
            "model_sha256": self.model_sha256,
            "num_users": self.num_users,
            "num_items": self.num_items,
            "optimizer": {"lr": opt.lr, "beta1": opt.beta1, "beta2": opt.beta2, "eps": opt.eps},
            "features": None if feats is None else {"name": feats.name, "user_names": list(feats.user_names),
                                                     "item_names": list(feats.item_names)},
            "config": self.info.get("config", {}),
            "files": files,
        }
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return out

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
        files = _field(manifest, "files", dict)
        public = _read_npz(root / PUBLIC, files.get(PUBLIC), {"table", "dense"}, {"item_features"})
        devices = _read_npz(root / DEVICES, files.get(DEVICES),
                            {"params", "adam_m", "adam_v", "adam_t", "rated_indptr", "rated_items"}, {"user_features"})
        try:
            return cls._from_arrays(manifest, public, devices)
        except (InvalidParameters, TypeError) as exc:  # TypeError: a spec or optimizer field the model does not take
            raise InvalidMessage(f"{root}: {exc}") from exc

    @classmethod
    def _from_arrays(cls, manifest: dict[str, Any], public: dict[str, np.ndarray],
                     devices: dict[str, np.ndarray]) -> TrainedModel:
        """Rebuild and check the model the manifest and the arrays describe."""
        spec = dict(_field(manifest, "model_spec", dict))
        feats = manifest.get("features")
        if feats is not None:
            if not isinstance(feats, dict) or "item_features" not in public or "user_features" not in devices:
                raise InvalidMessage(f"{MANIFEST}: features recorded without both feature arrays")
            spec["features"] = FeatureSet(str(feats.get("name", "")), devices.pop("user_features"),
                                          public.pop("item_features"), tuple(feats.get("user_names", ())),
                                          tuple(feats.get("item_names", ())))
        model = get_model(_field(manifest, "model", str), **spec)
        table, dense = public["table"], public["dense"]
        num_items = _field(manifest, "num_items", int)
        if table.dtype != np.float64 or table.shape != (num_items, model.sparse_width):
            raise InvalidMessage(f"{PUBLIC}: table must be float64 {(num_items, model.sparse_width)}, got "
                                 f"{table.dtype} {table.shape}")
        if dense.dtype != np.float64 or dense.shape != (model.dense_size,):
            raise InvalidMessage(f"{PUBLIC}: dense must be float64 ({model.dense_size},), got {dense.dtype} "
                                 f"{dense.shape}")
        expected = _field(manifest, "model_sha256", str)
        if model_sha256(table, dense) != expected:
            raise InvalidMessage(f"{PUBLIC}: the model's SHA-256 differs from the manifest's {expected}")
        optimizer = AdamConfig(**_field(manifest, "optimizer", dict))
        indptr, rated = devices.pop("rated_indptr"), devices.pop("rated_items")
        store = UserStore.from_state_dict(devices, optimizer)
        if store.private_size != model.private_size or store.num_users != _field(manifest, "num_users", int):
            raise InvalidMessage(f"{DEVICES}: params must be ({manifest['num_users']}, {model.private_size}), got "
                                 f"{store.params.shape}")
        if (indptr.dtype != np.int64 or indptr.shape != (store.num_users + 1,) or indptr[0] != 0
                or (np.diff(indptr) < 0).any() or indptr[-1] != rated.size or rated.dtype != np.int64
                or (rated.size and not 0 <= rated.min() <= rated.max() < num_items)):
            raise InvalidMessage(f"{DEVICES}: rated_indptr/rated_items are not a CSR of item ids in "
                                 f"[0, {num_items}) over {store.num_users} users")
        info = {k: manifest.get(k) for k in ("protocol", "dataset", "seed", "model_sha256", "config")}
        return cls(model, table, dense, store, indptr, rated, info)
