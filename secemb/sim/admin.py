"""The operator's calls to the servers (:class:`~secemb.transport.links.AdminLink`), as the round
driver (:mod:`secemb.sim.driver`) makes them: retried while a server is unreachable or
restarting (:func:`retry`), the model fetched and decoded (:func:`fetch_model`), a round closed
(:func:`close_round`) or awaited (:func:`await_round`), and the servers' announcement of a round
checked against the run (:func:`check_info`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_delay, wait_exponential

from secemb.client.device import RoundInfo
from secemb.errors import InvalidParameters, SecembError
from secemb.models.base import RecModel
from secemb.privacy.accounting import DPPlan
from secemb.round import messages
from secemb.round.results import TrainConfig
from secemb.transport.errors import RemoteError, Unreachable
from secemb.transport.links import AdminLink

__all__ = ["RoundAborted", "await_round", "check_info", "close_round", "fetch_model", "retry"]


class RoundAborted(SecembError):
    """A round could not be completed after all attempts."""


def _transient(retry_conflict: bool) -> Callable[[BaseException], bool]:
    """Whether a failed operator call is worth retrying: the server is unreachable or
    answered 503 (restarting, its peer restarting, its disk full), or 409 where the caller
    says a conflict clears by itself (the count phase of a restarted peer)."""

    def check(exc: BaseException) -> bool:
        if isinstance(exc, Unreachable):
            return True
        return isinstance(exc, RemoteError) and (exc.status == 503 or (retry_conflict and exc.status == 409))

    return check


def retry(fn: Callable[[], Any], wait_s: float, what: str, retry_conflict: bool = False) -> Any:
    """Call ``fn`` until it does not fail transiently (:func:`_transient`), with exponential
    backoff (tenacity: 0.05 s doubling to 0.5 s) for up to ``wait_s`` seconds; other errors
    pass through at once.

    Raises
    ------
    RoundAborted
        Still failing after ``wait_s`` seconds (the last error in the message).
    """
    retrying = Retrying(retry=retry_if_exception(_transient(retry_conflict)), stop=stop_after_delay(wait_s),
                        wait=wait_exponential(multiplier=0.05, min=0.05, max=0.5))
    try:
        return retrying(fn)
    except RetryError as exc:
        raise RoundAborted(f"{what}: gave up after {wait_s} s: {exc.last_attempt.exception()}") from None


def fetch_model(admin: AdminLink, wait_s: float, m: int, width: int,
                dense_size: int) -> tuple[int, np.ndarray, np.ndarray]:
    """A server's model, ``(version, table, dense)``, fetched (:func:`retry`) and decoded for
    ``m`` rows of ``width`` and ``dense_size`` dense values."""
    data = retry(admin.model, wait_s, "fetching the model")
    version = messages.model_version(data)
    table, dense = messages.decode_model(data, version=version, num_items=m, width=width, dense_size=dense_size)
    return version, table, dense


def check_info(info: RoundInfo, model: RecModel, cfg: TrainConfig, dp: DPPlan | None) -> None:
    """The servers train ``model`` with ``cfg``'s optimizer, ring and (central DP) clip and noise.

    Raises
    ------
    InvalidParameters
        ``info`` announces another model or other training settings.
    """
    want_training: dict[str, Any] = {"lr": cfg.lr, "beta1": cfg.beta1, "beta2": cfg.beta2, "eps": cfg.eps,
                                     "ring_bits": cfg.ring_bits, "frac_bits": cfg.frac_bits}
    if dp is not None and dp.central:  # what the servers announce their devices clip to, and the noise
        want_training.update(dp_clip=dp.settings.clip, dp_sigma=dp.sigma_ring)
    if info.model.get("name") != model.name or info.model.get("hparams") != json.loads(json.dumps(model.spec())):
        raise InvalidParameters(f"the servers train {info.model}, the run wants {model.name} {model.spec()}")
    if info.training != want_training:
        raise InvalidParameters(f"the servers use {info.training}, the run wants {want_training}")


def close_round(admin0: AdminLink, r: int, wait_s: float) -> dict[str, Any]:
    """Round ``r`` closed at server 0 (:func:`retry`); its outcome, awaited
    (:func:`await_round`) while the servers still finish it.  A round server 0 does not know
    (it restarted before recording it) is ``aborted``."""
    def once() -> dict[str, Any]:
        try:
            return admin0.close_round(r)
        except RemoteError as exc:
            if exc.status == 404:  # server 0 restarted before it recorded the round
                return {"round_id": r, "state": "aborted", "included": None, "reason": exc.detail}
            raise
    doc: dict[str, Any] = retry(once, wait_s, f"closing round {r}")
    if doc["state"] not in ("committed", "aborted"):
        return await_round(admin0, r, wait_s)
    return doc


def await_round(admin0: AdminLink, r: int, wait_s: float) -> dict[str, Any]:
    """Round ``r``'s outcome once server 0 reports it ``committed`` or ``aborted`` (polled
    every 0.05 s; unknown to server 0: ``aborted``).

    Raises
    ------
    RoundAborted
        The round did not end within ``wait_s`` seconds.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            doc = admin0.round_status(r)
            if doc["state"] in ("committed", "aborted"):
                return doc
        except Unreachable:
            pass
        except RemoteError as exc:
            if exc.status == 404:
                return {"round_id": r, "state": "aborted", "included": None, "reason": exc.detail}
            if exc.status != 503:
                raise
        if time.monotonic() >= deadline:
            raise RoundAborted(f"round {r} did not end within {wait_s} s")
        time.sleep(0.05)
