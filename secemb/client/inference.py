"""A device's GREC inference against a running deployment (``/v1/inference``; docs/inference.md).

The device builds its representation ``H_u`` and private offset from its own private
parameters (the ``params`` of ``secemb client --state-file``) and the model the server
announces, takes its release from its :class:`~secemb.inference.releases.ReleaseLedger` (the
same bytes again for the same ``H_u`` and mechanism; a new, recorded release otherwise, saved
before it is sent), sends ``H~_u`` -- the request names no item -- and picks the scores of
the items it wants from the reply, adding its offset locally.  The reply scores the server's
public candidate set (``GET /v1/inference``'s ``candidates``: every item, or the deployment's
``[inference] candidates``); the items the device already rated are left out here, on the
device, after the scoring (``exclude``), never told to the server.

A model with user features (FM/DeepFM with ``l_x > 0``) needs the public recommender (its
``V_x`` and ``w_x``, checked against the served model's SHA-256) and the device's own
features ``x_u``; so does a trained denoiser (docs/inference.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.inference.denoiser import Denoiser
from secemb.inference.mechanism import GaussianLDP
from secemb.inference.releases import DEFAULT_MAX_EPSILON, ReleaseLedger, model_identity
from secemb.inference.representation import has_representation, representation_for
from secemb.inference.service import InferenceDevice, reply_bytes
from secemb.models import RecModel, announced_model
from secemb.randomness import RandomBytes
from secemb.transport.limits import ANSWER_FLOOR_BYTES, MAX_ITEMS

__all__ = ["InferenceLink", "RemoteAnswer", "infer_remote"]


class InferenceLink(Protocol):
    """What :func:`infer_remote` needs of a server (:class:`~secemb.transport.http.HttpServerLink`)."""

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


def _is_id(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _info_fields(info: Any) -> tuple[str, dict[str, Any], int, int, int, np.ndarray]:
    """``(model name, hparams, rows, dim, num_items, candidates)`` of the server's description;
    ``candidates`` int64 ascending (every item when the server announces ``null``).

    Raises
    ------
    InvalidMessage: a malformed description (a field missing or of another type; a candidate
    set that is not a non-empty list of ascending, distinct item ids, or whose size is not the
    integer ``num_candidates``; more than :data:`MAX_ITEMS` items; more candidates than a reply the
    device reads can score, :data:`~secemb.transport.limits.ANSWER_FLOOR_BYTES`: finding S43-G5).
    """
    try:
        name, hparams = str(info["model"]["name"]), dict(info["model"]["hparams"])
        rows, dim, n = (info[k] for k in ("rows", "dim", "num_items"))
        if not all(_is_id(v) and v > 0 for v in (rows, dim, n)):
            raise ValueError(f"rows, dim and num_items must be ints > 0, got {rows!r}, {dim!r}, {n!r}")
        if n > MAX_ITEMS:
            raise ValueError(f"num_items {n} is beyond the {MAX_ITEMS} items a device accepts")
        listed = info.get("candidates")
        scored = len(listed) if isinstance(listed, list) else n  # another type is refused below
        if reply_bytes(scored) > ANSWER_FLOOR_BYTES:  # before any array of that size and any release (S43-G5)
            raise ValueError(f"{scored} candidates: their reply ({reply_bytes(scored)} bytes) is beyond the "
                             f"{ANSWER_FLOOR_BYTES} bytes a device reads")
        if listed is None:
            candidates = np.arange(n, dtype=np.int64)
        else:
            if not isinstance(listed, list) or not listed or not all(_is_id(c) for c in listed):
                raise ValueError("candidates must be null or a non-empty list of item ids")
            candidates = np.asarray(listed, dtype=np.int64)
            if (np.diff(candidates) <= 0).any() or candidates[0] < 0 or candidates[-1] >= n:
                raise ValueError(f"candidates must be ascending, distinct item ids in [0, {n})")
        if not _is_id(info["num_candidates"]) or info["num_candidates"] != candidates.size:
            raise ValueError(f"num_candidates {info['num_candidates']!r} but {candidates.size} candidates")
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # OverflowError: an id beyond int64
        raise InvalidMessage(f"malformed inference description from the server: {exc}") from None
    return name, hparams, rows, dim, n, candidates


def infer_remote(link: InferenceLink, params: np.ndarray, mechanism: GaussianLDP, items: np.ndarray | None, *,
                 exclude: np.ndarray | None = None, ledger: ReleaseLedger | None = None,
                 recommender: tuple[RecModel, np.ndarray, str] | None = None, user_x: np.ndarray | None = None,
                 denoiser: tuple[Denoiser, np.ndarray, np.ndarray] | None = None,
                 max_epsilon: float | None = DEFAULT_MAX_EPSILON, _rng: RandomBytes | None = None) -> RemoteAnswer:
    """One inference of the device with private ``params`` (float64 ``(P,)``) over ``link``.

    Parameters
    ----------
    items: int64 item ids whose predictions to return (each in the server's public candidate
        set); ``None``: every candidate (every item unless the deployment configures a set).
    exclude: int64 item ids the device already rated: with ``items=None`` they are left out of
        the answer, on the device after the scoring (the request does not depend on them).
    ledger: the device's releases (a new in-memory one by default: one fresh release).  A new
        release is saved to the ledger's file before the request leaves.  The ledger is bound to
        the announced model (name and hyper-parameters): another one is refused before any
        release (finding S43-G1).
    max_epsilon: the device's privacy budget (:meth:`ReleaseLedger.release
        <secemb.inference.releases.ReleaseLedger.release>`; ``None``: none): a new release beyond
        it is refused before it is drawn (finding S43-G2).
    recommender: ``(model, dense, model_sha256)``, the public recommender
        (:func:`~secemb.inference.saved.load_public_recommender`), which must be the model the
        deployment serves (its SHA-256); needed for a model with user features (FM/DeepFM with
        ``l_x > 0``: ``H_u`` and the offset read ``V_x`` and ``w_x``) and with ``denoiser``.
        Without it the model is built from the server's description (no user features).
    user_x: float64 ``(l_x,)``, the device's own features (a model with user features).
    denoiser: ``(F_p, e, dense)``: a trained denoiser over this device's one-device context
        (:func:`~secemb.inference.saved.load_denoiser_on_device`, on ``recommender``); the
        predictions are then F_p's (post-processing LDP) and ``mechanism`` must be the
        denoiser's.
    _rng: random bytes for the noise (tests only; the OS CSPRNG by default).

    Raises
    ------
    InvalidParameters
        ``params``, ``user_x`` or ``items`` do not fit the deployment's model (an item outside
        the catalogue or the candidate set: refused before any release is drawn); a new release
        beyond ``max_epsilon``; a model with
        user features without ``recommender`` and ``user_x``; a recommender or denoiser that is
        not the served model's, or a denoiser of another mechanism.
    InvalidMessage
        A malformed description or reply from the server; an announced model other than the one
        of the ledger's releases.
    RemoteError, Unreachable
        The server refused or did not answer.
    """
    info = link.inference_info()
    name, hparams, rows, dim, n, candidates = _info_fields(info)
    if recommender is None:
        if denoiser is not None:
            raise InvalidParameters("a denoiser needs its recommender (recommender=)")
        model, dense = announced_model(name, hparams, "the server's inference description"), None
        if not has_representation(model):  # before any array of its announced size (finding S41-R3)
            raise InvalidMessage(f"the server's inference description announces {name!r}, which has no GREC "
                                 "inference (mf, ncf, fm, deepfm)")
    else:
        model, dense, sha = recommender
        if model.name != name or sha != info.get("model_sha256"):
            raise InvalidParameters(f"the recommender {model.name} (model SHA-256 {sha}) is not the model the "
                                    f"deployment serves ({name}, {info.get('model_sha256')})")
    if denoiser is not None and denoiser[0].mechanism != mechanism:
        raise InvalidParameters(f"the mechanism {mechanism} is not the denoiser's {denoiser[0].mechanism}")
    params = np.asarray(params, dtype=np.float64)
    if params.shape != (model.private_size,):
        raise InvalidParameters(f"the device's parameters have shape {params.shape}, the deployment's model "
                                f"{name} has {model.private_size} private parameters")
    l_x = int(getattr(model, "l_x", 0))
    x = np.zeros((1, 0)) if user_x is None else np.asarray(user_x, dtype=np.float64).reshape(1, -1)
    if x.shape[1] != l_x:
        raise InvalidParameters(f"the model has {l_x} user features, the device gave {x.shape[1]}")
    # without the public recommender: H_u and the offset of a model without user features read no dense value
    rep = representation_for(model, np.zeros(model.dense_size) if dense is None else dense)
    if (rep.rows, rep.dim) != (rows, dim):
        raise InvalidParameters(f"the deployment's representation is {rows} x {dim}, this device's model gives "
                                f"{rep.rows} x {rep.dim} (a model with user features needs the public recommender "
                                "and the device's features)")
    if items is None:
        wanted = candidates if exclude is None else np.setdiff1d(candidates, np.asarray(exclude, dtype=np.int64))
    else:
        wanted = np.asarray(items, dtype=np.int64).reshape(-1)
        if wanted.size == 0 or wanted.min() < 0 or wanted.max() >= n:
            raise InvalidParameters(f"items must be item ids in [0, {n})")
        outside = np.setdiff1d(wanted, candidates)
        if outside.size:
            raise InvalidParameters(f"items {outside[:5].tolist()} are not in the deployment's public candidate set "
                                    f"({candidates.size} items)")
    h, offset = rep.clean(params[None], x)
    ledger = ledger if ledger is not None else ReleaseLedger()
    h_tilde, z, reused = ledger.release(h[0], mechanism, model=model_identity(name, hparams), max_epsilon=max_epsilon,
                                        _rng=_rng)
    if not reused and ledger.path is not None:
        ledger.save()  # a release is recorded before it can leave the device
    device = InferenceDevice(h[0], float(offset[0]), mechanism, num_items=n, candidates=candidates,
                             denoiser=denoiser, release=(h_tilde, z))
    request = device.request()
    reply, version = link.inference(request)
    return RemoteAnswer(wanted, device.scores(reply, wanted), version, len(request), len(reply), reused, info)
