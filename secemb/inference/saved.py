"""A trained denoiser on disk, beside its recommender's saved folder
(:meth:`secemb.training.TrainedModel.save`); and the recommender's public table for the
servers that train a denoiser (:func:`save_frozen_table`, ``[model] frozen_table``).

One ``.npz`` (``allow_pickle=False``): ``e`` float64 ``(m, d^)`` (F_i's table: what a device
stores), ``dense`` float64 (F_h, F_z, F_o), ``mechanism`` float64 ``[epsilon, delta, B]`` it
was trained for, and ``spec`` (the denoiser's JSON constructor arguments as UTF-8 bytes).
The recommender's rows are not repeated: :func:`load_denoiser` takes them from the
recommender it is loaded against and checks the sizes agree.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from secemb.errors import InvalidMessage
from secemb.inference.denoiser import Denoiser, DenoiserContext
from secemb.inference.mechanism import GaussianLDP

__all__ = ["load_denoiser", "load_frozen_table", "save_denoiser", "save_frozen_table"]


def save_denoiser(path: str | os.PathLike, denoiser: Denoiser, table: np.ndarray, dense: np.ndarray) -> Path:
    """Write ``denoiser`` with its trained ``table`` and ``dense`` to ``path`` (``.npz``)."""
    m = denoiser.context.mechanism
    spec = json.dumps(denoiser.spec()).encode()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as fh:
        np.savez(fh, e=np.asarray(table[:, : denoiser.hat_d], dtype=np.float64),
                 dense=np.asarray(dense, dtype=np.float64),
                 mechanism=np.array([m.epsilon, m.delta, m.bound], dtype=np.float64),
                 spec=np.frombuffer(spec, dtype=np.uint8))
    return out


def load_denoiser(path: str | os.PathLike, trained: Any) -> tuple[Denoiser, np.ndarray, np.ndarray]:
    """``(denoiser, table, dense)`` from ``path`` against the recommender ``trained`` (a
    :class:`~secemb.training.TrainedModel`).

    Raises
    ------
    InvalidMessage
        An unreadable file, a missing array, or sizes that do not fit the recommender.
    """
    try:
        with np.load(Path(path), allow_pickle=False) as f:
            arrays = {k: f[k] for k in ("e", "dense", "mechanism", "spec")}
        spec = json.loads(arrays["spec"].tobytes().decode())
        eps, delta, bound = (float(x) for x in arrays["mechanism"])
    except (OSError, KeyError, ValueError, UnicodeDecodeError) as exc:
        raise InvalidMessage(f"{path}: not a saved denoiser ({exc})") from None
    mech = GaussianLDP(eps, delta, bound)
    features = getattr(trained.model, "features", None)
    ctx = DenoiserContext.from_trained(trained.model, trained.table, trained.dense, trained.user_store, mech,
                                       features)
    hp = {k: spec[k] for k in ("hat_d", "hidden", "reg", "init_std", "rating_range") if k in spec}
    den = Denoiser.for_context(ctx, **hp)
    if den.spec() != spec or arrays["e"].shape != (trained.num_items, den.hat_d) \
            or arrays["dense"].shape != (den.dense_size,):
        raise InvalidMessage(f"{path}: the denoiser does not fit this recommender "
                             f"(spec {spec}, e {arrays['e'].shape}, dense {arrays['dense'].shape})")
    table = np.concatenate([arrays["e"], trained.table], axis=1)
    return den, table, arrays["dense"]


def save_frozen_table(path: str | os.PathLike, table: np.ndarray) -> Path:
    """Write the recommender's public ``table`` (float64 ``(m, w)``) for the servers of a
    denoiser's training (``[model] frozen_table``: the denoiser's frozen columns; public, like
    the recommender's table every device downloads rows of).  ``.npz`` with one array ``table``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as fh:
        np.savez(fh, table=np.asarray(table, dtype=np.float64))
    return out


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
