"""A trained denoiser on disk, beside its recommender's saved folder
(:meth:`secemb.inference.trained.TrainedModel.save`); and the recommender's public table for the
servers that train a denoiser (:func:`save_frozen_table`, ``[model] frozen_table``).

One ``.npz`` (``allow_pickle=False``): ``e`` float64 ``(m, d^)`` (F_i's table: what a device
stores), ``dense`` float64 (F_h, F_z, F_o), ``mechanism`` float64 ``[epsilon, delta, B]`` it
was trained for, ``spec`` (the denoiser's JSON constructor arguments as UTF-8 bytes) and
``recommender_sha256`` (the ``model_sha256`` of the recommender it was trained against, 64
lowercase hex digits as ASCII bytes); optionally ``selection``, the JSON (UTF-8 bytes) of the
denoiser's training run's :meth:`~secemb.round.results.TrainResult.selection` (the epoch
kept and how it was chosen), for the record: loading does not read it.  The recommender's rows are not repeated:
:func:`load_denoiser` and :func:`load_denoiser_on_device` take them from the recommender the
denoiser is loaded against, which must be the one it was trained against (its SHA-256), and
check the sizes agree.  A file without ``recommender_sha256`` (written before it was recorded)
is refused: nothing tells which recommender it belongs to.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from secemb.data.features import FeatureSet
from secemb.digest import is_sha256_hex, model_sha256, table_sha256
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.inference import trained as tm
from secemb.inference.denoiser import Denoiser, DenoiserContext
from secemb.inference.mechanism import GaussianLDP
from secemb.inference.trained import TrainedModel
from secemb.models import RecModel, get_model
from secemb.outputs import atomic_write_bytes

__all__ = ["load_denoiser", "load_denoiser_on_device", "load_frozen_table", "load_public_recommender",
           "save_denoiser", "save_frozen_table"]


def _write_npz(path: str | os.PathLike, **arrays: Any) -> Path:
    """Write ``arrays`` to ``path`` (``.npz``, its folder created), replacing any file there
    atomically and mode 0600 (:func:`secemb.outputs.atomic_write_bytes`; a saved model's
    devices' file holds their private state): a write that fails leaves the previous file whole.

    Raises
    ------
    OSError
        The folder cannot be created, the arrays cannot be serialized, or the disk refused the
        write.
    """
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return atomic_write_bytes(path, buf.getvalue(), mode=0o600)


#: the arrays of a saved denoiser
_ARRAYS = ("e", "dense", "mechanism", "spec", "recommender_sha256")


def save_denoiser(path: str | os.PathLike, denoiser: Denoiser, table: np.ndarray, dense: np.ndarray, *,
                  recommender_sha256: str, selection: dict[str, Any] | None = None) -> Path:
    """Write ``denoiser`` with its trained ``table`` and ``dense`` to ``path`` (``.npz``),
    recording ``recommender_sha256`` (the ``model_sha256`` of the recommender it was trained
    against) and, when given, ``selection`` (its training run's
    :meth:`~secemb.round.results.TrainResult.selection`: the epoch kept), replacing a file
    there atomically (:func:`_write_npz`'s errors).

    Raises
    ------
    InvalidParameters
        ``recommender_sha256`` is not 64 lowercase hex digits.
    """
    if not is_sha256_hex(recommender_sha256):
        raise InvalidParameters(f"recommender_sha256 must be 64 lowercase hex digits, got {recommender_sha256!r}")
    m = denoiser.mechanism
    spec = json.dumps(denoiser.spec(), allow_nan=False).encode()
    record = {} if selection is None else \
        {"selection": np.frombuffer(json.dumps(selection, allow_nan=False).encode(), dtype=np.uint8)}
    return _write_npz(path, e=np.asarray(table[:, : denoiser.hat_d], dtype=np.float64),
                      dense=np.asarray(dense, dtype=np.float64),
                      mechanism=np.array([m.epsilon, m.delta, m.bound], dtype=np.float64),
                      spec=np.frombuffer(spec, dtype=np.uint8),
                      recommender_sha256=np.frombuffer(recommender_sha256.encode("ascii"), dtype=np.uint8), **record)


def load_denoiser(path: str | os.PathLike, trained: TrainedModel, *, recommender: str | os.PathLike
                  ) -> tuple[Denoiser, np.ndarray, np.ndarray]:
    """``(denoiser, table, dense)`` from ``path`` against the recommender ``trained`` (a
    :class:`~secemb.inference.trained.TrainedModel`, read from ``recommender``: the name the errors give).

    Raises
    ------
    InvalidParameters
        ``trained`` is not the recommender the denoiser was trained against (its SHA-256).
    InvalidMessage
        An unreadable file, a missing array (``recommender_sha256`` included), or sizes that
        do not fit the recommender.
    """
    spec, arrays = _read_denoiser(path, trained.model_sha256, recommender)
    mech = GaussianLDP(spec["epsilon"], spec["delta"], spec["bound"])
    features = getattr(trained.model, "features", None)
    ctx = DenoiserContext.from_trained(trained.model, trained.table, trained.dense, trained.user_store, mech,
                                       features)
    hp = {k: v for k, v in spec.items() if k not in ("rows", "dim", "frozen")}
    try:
        den = Denoiser.for_context(ctx, **hp)
    except (InvalidParameters, TypeError) as exc:
        raise InvalidMessage(f"{path}: the denoiser does not fit this recommender ({exc})") from None
    _check_fits(path, den, spec, arrays, trained.num_items)
    table = np.concatenate([arrays["e"], trained.table], axis=1)
    return den, table, arrays["dense"]


def _read_denoiser(path: str | os.PathLike, recommender_sha256: str, recommender: str | os.PathLike
                   ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The spec (mechanism included) and the arrays of a saved denoiser, after checking that it
    was trained against the recommender ``recommender`` whose ``model_sha256`` is
    ``recommender_sha256`` (InvalidParameters naming both files otherwise)."""
    try:
        with np.load(Path(path), allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files if k in _ARRAYS}
    except (OSError, ValueError) as exc:
        raise InvalidMessage(f"{path}: not a saved denoiser ({exc})") from None
    missing = sorted(set(_ARRAYS) - set(arrays))
    if missing == ["recommender_sha256"]:
        raise InvalidMessage(f"{path}: records no recommender SHA-256 (saved by an older secemb), so nothing tells "
                             f"which recommender it was trained against; save it again ('secemb bench grec "
                             f"--save-dir' or 'secemb admin save-denoiser --recommender')")
    if missing:
        raise InvalidMessage(f"{path}: not a saved denoiser (no {', '.join(missing)})")
    try:
        spec = json.loads(arrays["spec"].tobytes().decode())
        eps, delta, bound = (float(x) for x in arrays["mechanism"])
        recorded = arrays["recommender_sha256"].tobytes().decode("ascii")
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise InvalidMessage(f"{path}: not a saved denoiser ({exc})") from None
    if not isinstance(spec, dict) or not is_sha256_hex(recorded):
        raise InvalidMessage(f"{path}: not a saved denoiser (its spec is not a JSON object or its recommender "
                             f"SHA-256 is not 64 lowercase hex digits)")
    if recorded != recommender_sha256:
        raise InvalidParameters(f"{path} was trained against the recommender with model_sha256 {recorded}, not "
                                f"{recommender} (model_sha256 {recommender_sha256}): use the denoiser with the "
                                f"recommender it was trained against")
    # the mechanism array where the spec lacks it (:func:`_check_fits` compares the two)
    return {"epsilon": eps, "delta": delta, "bound": bound, **spec}, arrays


def _check_fits(path: str | os.PathLike, den: Denoiser, spec: dict[str, Any], arrays: dict[str, np.ndarray],
                num_items: int) -> None:
    if den.spec() != spec or arrays["e"].shape != (num_items, den.hat_d) \
            or arrays["dense"].shape != (den.dense_size,) \
            or [den.mechanism.epsilon, den.mechanism.delta, den.mechanism.bound] != arrays["mechanism"].tolist():
        raise InvalidMessage(f"{path}: the denoiser does not fit this recommender "
                             f"(spec {spec}, e {arrays['e'].shape}, dense {arrays['dense'].shape})")


def load_denoiser_on_device(path: str | os.PathLike, model: RecModel, dense: np.ndarray, params: np.ndarray,
                            num_items: int, user_x: np.ndarray | None = None, *, recommender_sha256: str,
                            recommender: str | os.PathLike) -> tuple[Denoiser, np.ndarray, np.ndarray]:
    """``(denoiser, e, dense)`` of a saved denoiser for one standalone device: its one-device
    context (:meth:`Denoiser.for_device`: the recommender ``model`` at its public ``dense``,
    the device's recommender ``params``, its ``user_x`` with user features), F_i's table ``e``
    float64 ``(num_items, d^)`` -- all :meth:`Denoiser.denoise` reads of a table; the device
    holds no recommender row -- and F_p's dense part.  ``recommender_sha256``: the
    recommender's ``model_sha256`` (:func:`load_public_recommender`'s), which must be the one
    the denoiser records; ``recommender``: its folder, named in the errors.

    Raises
    ------
    InvalidParameters
        The recommender is not the one the denoiser was trained against (its SHA-256).
    InvalidMessage
        An unreadable file (no recorded recommender SHA-256 included), or a denoiser that does
        not fit the recommender.
    """
    spec, arrays = _read_denoiser(path, recommender_sha256, recommender)
    try:
        den = Denoiser.for_device(spec, model, dense, params, user_x)
    except InvalidParameters as exc:
        raise InvalidMessage(f"{path}: the denoiser does not fit this recommender ({exc})") from None
    _check_fits(path, den, spec, arrays, num_items)
    return den, arrays["e"], arrays["dense"]


def load_public_recommender(folder: str | os.PathLike) -> tuple[RecModel, np.ndarray, str, int, str]:
    """``(model, dense, model_sha256, num_items, table_sha256)``: the public part of a
    recommender's saved folder (:meth:`secemb.inference.trained.TrainedModel.save`, or the public files
    alone that :func:`secemb.inference.trained.save_public` writes: ``secemb admin export-model``)
    -- ``manifest.json``
    and ``public.npz`` only, each checked (the file's SHA-256, the model's); ``devices.npz``
    (every device's private state) is neither needed nor read, so an operator can publish the
    first two alone.  What a standalone device needs of the recommender to use or train a
    denoiser: the model and its public dense vector; and, to train one, the
    :func:`~secemb.digest.table_sha256` of its table, which a denoiser's round
    announces for the table the servers froze (the device does not keep the table itself).

    A feature model (FM, DeepFM) is built with the public item features and a user matrix of
    shape ``(0, l_x)``: the device supplies its own ``x_u`` where it needs it.

    Raises
    ------
    InvalidParameters
        ``folder`` is not a folder.
    InvalidMessage
        A missing, corrupted or malformed manifest or ``public.npz``.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InvalidParameters(f"recommender folder {root}: expected a folder written by --save-model")
    try:
        manifest = json.loads((root / tm.MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidMessage(f"{root / tm.MANIFEST}: not readable JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != tm.FORMAT or manifest.get("version") != tm.VERSION:
        raise InvalidMessage(f"{root / tm.MANIFEST}: not a saved model's manifest")
    files = tm.manifest_field(manifest, "files", dict)
    public = tm.read_npz(root / tm.PUBLIC, files.get(tm.PUBLIC), {"table", "dense"}, {"item_features"})
    spec = dict(tm.manifest_field(manifest, "model_spec", dict))
    try:
        feats = manifest.get("features")
        if feats is not None:  # the public item features; no user's row (each device has its own)
            if not isinstance(feats, dict) or "item_features" not in public:
                raise InvalidParameters("features recorded without the item features")
            names = tuple(str(n) for n in feats.get("user_names", ()))
            spec["features"] = FeatureSet(str(feats.get("name", "")), np.zeros((0, len(names)), dtype=np.uint8),
                                          public["item_features"], names,
                                          tuple(str(n) for n in feats.get("item_names", ())))
        model = get_model(tm.manifest_field(manifest, "model", str), **spec)
    except (InvalidParameters, TypeError) as exc:
        raise InvalidMessage(f"{root / tm.MANIFEST}: {exc}") from None
    table, dense = public["table"], public["dense"]
    sha = tm.manifest_field(manifest, "model_sha256", str)
    if (dense.dtype != np.float64 or dense.shape != (model.dense_size,) or table.shape[1:] != (model.sparse_width,)
            or model_sha256(table, dense) != sha):
        raise InvalidMessage(f"{root / tm.PUBLIC}: the table or dense vector does not fit {model.name} or the "
                             f"model's SHA-256 differs from the manifest's {sha}")
    return model, dense, sha, int(table.shape[0]), table_sha256(table)


def save_frozen_table(path: str | os.PathLike, table: np.ndarray) -> Path:
    """Write the recommender's public ``table`` (float64 ``(m, w)``) for the servers of a
    denoiser's training (``[model] frozen_table``: the denoiser's frozen columns; public, like
    the recommender's table every device downloads rows of).  ``.npz`` with one array ``table``,
    replacing a file there atomically (:func:`_write_npz`'s errors)."""
    return _write_npz(path, table=np.asarray(table, dtype=np.float64))


def load_frozen_table(path: str | os.PathLike) -> np.ndarray:
    """The table :func:`save_frozen_table` wrote (float64 ``(m, w)``).

    Raises
    ------
    InvalidMessage
        An unreadable file, no ``table`` array, or not a 2-D float64 array.
    """
    try:
        with np.load(Path(path), allow_pickle=False) as f:
            table = f["table"]
    except (OSError, KeyError, ValueError) as exc:
        raise InvalidMessage(f"{path}: not a saved frozen table ({exc})") from None
    if table.ndim != 2 or table.dtype != np.float64:
        raise InvalidMessage(f"{path}: the frozen table must be a 2-D float64 array, got {table.dtype} {table.shape}")
    return table
