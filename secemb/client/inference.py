"""A device's GREC inference against a running deployment (``/v1/inference``; docs/inference.md).

The device builds its representation ``H_u`` and private offset from its own private
parameters (the ``params`` of ``secemb client --state-file``) and the model the server
announces, takes its release from its :class:`~secemb.inference.releases.ReleaseLedger` (the
same bytes again for the same ``H_u`` and mechanism; a new, recorded release otherwise, saved
before it is sent), sends ``H~_u`` -- the request names no item -- and picks the scores of
the items it wants from the reply, adding its offset locally.

Deployments whose model has user features (FM/DeepFM with ``l_x > 0``) are refused: the
device would need the public user-feature embeddings and its own features, which this path
does not fetch (docs/inference.md, "Not done").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.inference.mechanism import GaussianLDP
from secemb.inference.releases import ReleaseLedger
from secemb.inference.representation import representation_for
from secemb.inference.service import InferenceDevice
from secemb.randomness import RandomBytes

__all__ = ["InferenceLink", "RemoteAnswer", "infer_remote"]


class InferenceLink(Protocol):
    """What :func:`infer_remote` needs of a server (:class:`~secemb.engine.http.HttpServerLink`)."""

    def inference_info(self) -> dict[str, Any]:
        """``GET /v1/inference``."""

    def inference(self, body: bytes) -> tuple[bytes, int]:
        """``POST /v1/inference``: the reply and the model version it was scored on."""


@dataclass(frozen=True)
class RemoteAnswer:
    """The device's predictions of ``items`` (float64, the offset added), the model version
    the server scored on, the bytes of the request and of the reply, whether the release was
    an earlier one sent again, and the server's public description."""

    items: np.ndarray
    scores: np.ndarray
    model_version: int
    upload_bytes: int
    download_bytes: int
    reused: bool
    info: dict[str, Any]


def _info_fields(info: Any) -> tuple[str, dict[str, Any], int, int, int]:
    """``(model name, hparams, rows, dim, num_items)`` of the server's description.

    Raises
    ------
    InvalidMessage: a malformed description, or a candidate set other than every item.
    """
    try:
        name, hparams = str(info["model"]["name"]), dict(info["model"]["hparams"])
        rows, dim, n = (info[k] for k in ("rows", "dim", "num_items"))
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (rows, dim, n)):
            raise ValueError(f"rows, dim and num_items must be ints > 0, got {rows!r}, {dim!r}, {n!r}")
        if info.get("candidates") is not None:
            raise ValueError("only the candidate set of every item is supported")
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidMessage(f"malformed inference description from the server: {exc}") from None
    return name, hparams, rows, dim, n


def infer_remote(link: InferenceLink, params: np.ndarray, mechanism: GaussianLDP, items: np.ndarray | None, *,
                 ledger: ReleaseLedger | None = None, _rng: RandomBytes | None = None) -> RemoteAnswer:
    """One inference of the device with private ``params`` (float64 ``(P,)``) over ``link``.

    Parameters
    ----------
    items: int64 item ids whose predictions to return; ``None``: every item.
    ledger: the device's releases (a new in-memory one by default: one fresh release).  A new
        release is saved to the ledger's file before the request leaves.
    _rng: random bytes for the noise (tests only; the OS CSPRNG by default).

    Raises
    ------
    InvalidParameters
        ``params`` or ``items`` do not fit the deployment's model; a model with user features.
    InvalidMessage
        A malformed description or reply from the server.
    RemoteError, Unreachable
        The server refused or did not answer.
    """
    from secemb.models import get_model

    info = link.inference_info()
    name, hparams, rows, dim, n = _info_fields(info)
    model = get_model(name, **hparams)
    params = np.asarray(params, dtype=np.float64)
    if params.shape != (model.private_size,):
        raise InvalidParameters(f"the device's parameters have shape {params.shape}, the deployment's model "
                                f"{name} has {model.private_size} private parameters")
    # H_u and the offset of a model without user features read no public dense value
    rep = representation_for(model, np.zeros(model.dense_size))
    if (rep.rows, rep.dim) != (rows, dim):
        raise InvalidParameters(f"the deployment's representation is {rows} x {dim}, this device's model gives "
                                f"{rep.rows} x {rep.dim} (a model with user features is not served to devices yet)")
    wanted = np.arange(n, dtype=np.int64) if items is None else np.asarray(items, dtype=np.int64).reshape(-1)
    if wanted.size == 0 or wanted.min() < 0 or wanted.max() >= n:
        raise InvalidParameters(f"items must be item ids in [0, {n})")
    h, offset = rep.clean(params[None], np.zeros((1, 0)))
    ledger = ledger if ledger is not None else ReleaseLedger()
    h_tilde, z, reused = ledger.release(h[0], mechanism, _rng=_rng)
    if not reused and ledger.path is not None:
        ledger.save()  # a release is recorded before it can leave the device
    device = InferenceDevice(h[0], float(offset[0]), mechanism, num_items=n, release=(h_tilde, z))
    request = device.request()
    reply, version = link.inference(request)
    return RemoteAnswer(wanted, device.scores(reply, wanted), version, len(request), len(reply), reused, info)
