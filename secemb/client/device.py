"""The device SDK: what an app embeds to take part in secemb rounds.

A device holds its own ratings and private parameters; nothing but protocol messages leaves
it.  One round, step by step::

    client = DeviceClient(user_id, url0, url1, key0, key1)
    info = client.round_info()                 # the round's public configuration (both servers)
    session = RoundSession(client, info)
    session.prepare(items, ratings)            # the task's sample, PadOrTruncIdx / cuckoo placement, DPF keys
    session.retrieve()                         # server 1 first, then server 0; reconstruct rows
    session.train(model.local_step bound to the device's state)   # the local-training hook
    session.upload()                           # server 1 first (if it gets a message), then 0

:class:`Device` bundles this with the device's private state (a one-row
:class:`~secemb.models.base.UserStore`, or a row of a shared one in simulations) and undoes the
local step when server 0 reports the round aborted (:meth:`Device.settle`).

Key generation and reconstruction are the protocol's own :class:`~secemb.protocols.base.UserRole`
(fresh OS randomness for every key).  What the device trains on comes from the model's task
(:mod:`secemb.models.task`: the rating task's distinct items and ratings, or a sequential
task's windows with sampled negatives, which are requested privately like every row); the
task's draws and the placement draws come from the device's own generator,
:func:`private_rng` (seeded from the OS CSPRNG, never from a run seed) -- or, in a simulation
that must match the in-process run bit for bit, as a :class:`~secemb.models.task.Sample` and a
:class:`~secemb.protocols.placement.PaddedRequest` the driver drew.
"""

from __future__ import annotations

import hashlib
import math
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from secemb.digest import is_sha256_hex
from secemb.fss.cuckoo import MAX_EXPANSION, buckets_for
from secemb.errors import (
    InvalidMessage,
    InvalidParameters,
    ModelDisagreement,
    ProtocolError,
    RetrievalTampered,
    check_int,
)
from secemb.inference.denoiser import NAME as DENOISER
from secemb.inference.denoiser import Denoiser
from secemb.models import announced_model
from secemb.models.base import RecModel, StepResult, UserSnapshot, UserState, UserStore
from secemb.models.batch import Batch
from secemb.models.optim import AdamConfig
from secemb.models.task import Sample, Task
from secemb.privacy.noise import ClipSpec, clip_spec
from secemb.protocols.base import BOUND_CHALLENGE_BYTES, BoundProver, Protocol, RoundConfig, result_or_raise
from secemb.protocols.factory import make_protocol
from secemb.protocols.placement import PaddedRequest, place
from secemb.protocols.stages import PROVE, RETRIEVAL, UPLOAD, round_plan
from secemb.randomness import system_rng
from secemb.ring import FixedPoint
from secemb.round import messages
from secemb.round.local import LocalStep, local_update
from secemb.round.policy import DEFAULT_MIN_USERS, MIN_USERS_FLOOR
from secemb.sharing import share
from secemb.transport.errors import RemoteError
from secemb.transport.limits import MAX_ITEMS
from secemb.transport.links import ServerLink

if TYPE_CHECKING:
    import httpx

    from secemb.transport.network import ApiClient

    from secemb.data.features import FeatureSet

#: the order of the count stage's device hops (server 1 first)
COUNT_ORDER = round_plan(relay=False).device_sends("count")

__all__ = ["Device", "DeviceClient", "RoundInfo", "RoundSession", "private_rng"]

#: bytes of OS entropy that seed a device's :func:`private_rng`
_PRIVATE_SEED_BYTES = 32


def private_rng() -> np.random.Generator:
    """A device's own generator for its private draws -- the initialization of its private
    parameters, its task's samples (negatives, dropout), the padding slots of its requests --
    seeded with 256 bits from the OS CSPRNG (:func:`secemb.randomness.system_rng`), never
    from a run seed or anything a server receives (issue 33, item 4).

    numpy's PCG64 expands the seed (the models and the placement take a numpy generator); it
    is a statistical generator, not a cryptographic one, so its outputs are never sent as
    they are: what leaves the device are DPF keys, which hide the slots, and additive
    shares of updates.  Keys, shares and DP noise use :func:`~secemb.randomness.system_rng`
    directly."""
    return np.random.default_rng(int.from_bytes(system_rng(_PRIVATE_SEED_BYTES), "little"))


#: the round document's SHA-256 fields of its model block (:meth:`RoundInfo.check_model`)
_MODEL_HASHES = ("item_features_sha256", "recommender_table_sha256")


@dataclass(frozen=True)
class RoundInfo:
    """A round's public configuration as both servers announce it."""

    round_id: int
    state: str
    model_version: int
    n_p: int
    min_users: int
    deadline_unix: float
    config: RoundConfig
    protocol: dict[str, Any]
    model: dict[str, Any]
    training: dict[str, Any]
    fingerprint: str
    participant: bool | None
    #: SHA-256 of the model the round trains on, as this server announces it (``None``: not announced)
    model_sha256: str | None = None
    #: SHA-256 of the round's DENSE message (the dense vector a device downloads from server 0 alone),
    #: as this server announces it (``None``: not announced)
    dense_sha256: str | None = None

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> RoundInfo:
        """The round a server's document announces.

        Raises
        ------
        InvalidMessage: a field missing or of the wrong type, sizes past what a device builds
            (:data:`~secemb.transport.limits.MAX_ITEMS` items, :data:`~secemb.fss.cuckoo.MAX_EXPANSION`
            buckets a row of ``m'``), or a ``model.item_features_sha256`` or
            ``model.recommender_table_sha256`` that is not 64 lowercase hex digits.
        """
        try:
            info = cls(
                int(doc["round_id"]), str(doc["state"]), int(doc["model_version"]), int(doc["n_p"]),
                int(doc["min_users"]), float(doc["deadline_unix"]), RoundConfig(**doc["config"]), dict(doc["protocol"]),
                dict(doc["model"]), dict(doc["training"]), str(doc["fingerprint"]), doc.get("participant"),
                doc.get("model_sha256"), doc.get("dense_sha256"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidMessage(f"malformed round document: {exc}") from None
        cfg = info.config  # sizes a device builds arrays of before its first request (finding S41-R4)
        if cfg.num_items > MAX_ITEMS or cfg.num_buckets > buckets_for(cfg.m_prime, MAX_EXPANSION):
            raise InvalidMessage(f"malformed round document: {cfg.num_items} items and {cfg.num_buckets} buckets "
                                 f"for m' = {cfg.m_prime} (a device accepts at most {MAX_ITEMS} items and "
                                 f"{MAX_EXPANSION:g} buckets a row)")
        for name in ("model_sha256", "dense_sha256"):
            sha = getattr(info, name)
            if sha is not None and not is_sha256_hex(sha):
                raise InvalidMessage(f"malformed round document: {name} must be 64 lowercase hex digits, got "
                                     f"{sha!r:.80}")
        for key in _MODEL_HASHES:
            sha = info.model.get(key)
            if sha is not None and not is_sha256_hex(sha):
                raise InvalidMessage(f"malformed round document: model.{key} must be 64 lowercase hex digits, "
                                     f"got {sha!r}")
        return info

    def public(self) -> tuple[Any, ...]:
        """What both servers must announce identically."""
        return (self.round_id, self.model_version, self.n_p, self.min_users, self.config, self.protocol, self.model,
                self.training, self.fingerprint)

    def make_protocol(self) -> Protocol:
        """The announced protocol with its layout options.

        Raises
        ------
        InvalidMessage: the ``protocol`` block lacks a field, or names a protocol, option or
            value this device does not have or refuses -- the servers' fault.
        """
        try:
            return make_protocol(self.protocol)
        except (TypeError, InvalidParameters) as exc:  # TypeError: an option value the protocol's class cannot take
            raise InvalidMessage(f"the round announces a protocol this device cannot run ({exc!r})") from None

    def fixed_point(self) -> FixedPoint:
        """The announced fixed-point encoding (``training.ring_bits``, ``frac_bits``).

        Raises
        ------
        InvalidMessage: a field missing, not an integer, or a ring the encoding refuses.
        """
        try:
            return FixedPoint(int(self.training["ring_bits"]), int(self.training["frac_bits"]))
        except (KeyError, TypeError, ValueError) as exc:  # InvalidParameters is a ValueError
            raise InvalidMessage(f"malformed fixed-point settings in the round document: {exc!r}") from None

    def clip(self) -> ClipSpec | None:
        """The clipping the round announces, the same :class:`~secemb.privacy.noise.ClipSpec`
        as the run's DP plan: central DP, the servers' ``training.dp_clip`` and ``dp_sigma``;
        local DP (DP-FedRec), the protocol options ``clip`` and ``sigma`` of the device's own
        noise; ``None`` without DP.

        Raises
        ------
        InvalidMessage: a malformed or non-positive bound or scale.
        InvalidParameters: announced protocol options the protocol refuses.
        """
        if "dp_clip" not in self.training:
            return self.make_protocol().device_clip()
        try:
            l2, sigma = float(self.training["dp_clip"]), float(self.training["dp_sigma"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidMessage(f"malformed DP settings in the round document: {exc}") from None
        if not (np.isfinite(l2) and np.isfinite(sigma) and l2 > 0 and sigma > 0):
            raise InvalidMessage(f"the round document's DP settings must be positive, got clip={l2}, sigma={sigma}")
        return clip_spec(l2, sigma, central=True)

    def make_task(self) -> Task:
        """The announced model's task (:attr:`~secemb.models.base.RecModel.task`)."""
        return self.make_model().task

    def make_model(self, features: FeatureSet | None = None) -> RecModel:
        """The announced model; ``features`` (FM, DeepFM): built with them -- on a device, its
        own row and the public item matrix (:meth:`~secemb.data.features.FeatureSet.for_device`).
        The announced hyperparameters do not say whether the deployment uses features: the
        round's sizes do (:meth:`check_model`).

        Raises
        ------
        InvalidMessage: the announcement names no model this device has, or hyperparameters the
            model does not take or refuses -- the servers' fault, not the device's.
        """
        extra = {} if features is None else {"features": features}
        return announced_model(self.model.get("name"), self.model.get("hparams"), "the round", **extra)

    def fits(self, model: RecModel) -> bool:
        """Whether ``model``'s table width and dense size are the round's."""
        return (model.sparse_width, model.dense_size) == (self.config.width, self.config.dense_size)

    def check_model(self, model: RecModel) -> None:
        """Check that ``model`` is the servers' model as far as the device can tell: it
        :meth:`fits` the round (not, e.g., FM without the features the deployment trains
        with); a model with features was built from the servers' public item features (the
        round's ``model.item_features_sha256``, :meth:`FeatureSet.public_sha256`); and GREC's
        denoiser was built over the recommender whose table the servers froze (the round's
        ``model.recommender_table_sha256``, :func:`~secemb.digest.table_sha256`;
        the device's :attr:`Denoiser.recommender_table_sha256
        <secemb.inference.denoiser.Denoiser.recommender_table_sha256>`).

        Raises
        ------
        InvalidParameters: ``model`` is not of the round's sizes, this device's item features
            differ from the servers', or (a denoiser's round) this device's recommender differs
            from the one the servers' denoiser is trained against, or its model records no
            SHA-256 of its recommender's table.
        InvalidMessage: ``model`` has features and the round announces no SHA-256 of the
            servers' item features, or the round trains a denoiser and announces no SHA-256
            of the frozen table (nothing to check against: the servers' fault).
        """
        if not self.fits(model):
            got, want = (model.sparse_width, model.dense_size), (self.config.width, self.config.dense_size)
            raise InvalidParameters(f"the round trains a {self.model['name']} of table width {want[0]} and "
                                    f"dense size {want[1]}, the device's model has {got[0]} and {got[1]}")
        self._check_features(model)
        self._check_recommender(model)

    def _check_features(self, model: RecModel) -> None:
        """:meth:`check_model`'s check of the item features."""
        features: FeatureSet | None = getattr(model, "features", None)
        announced = self.model.get("item_features_sha256")
        if features is None:
            if announced is not None:
                raise InvalidParameters(f"the round trains a {self.model['name']} with item features, the device's "
                                        f"model has none")
            return
        if announced is None:
            raise InvalidMessage("the round announces no SHA-256 of the servers' item features, and the device's "
                                 "model uses features: nothing to check them against")
        mine = features.public_sha256()
        if mine != announced:
            raise InvalidParameters(f"this device's item features differ from the servers' (SHA-256 {mine}, the "
                                    f"round announces {announced})")

    def _check_recommender(self, model: RecModel) -> None:
        """:meth:`check_model`'s check of a denoiser's recommender (its table's SHA-256)."""
        if self.model.get("name") != DENOISER:
            return
        announced = self.model.get("recommender_table_sha256")
        if announced is None:
            raise InvalidMessage("the round trains a GREC denoiser and announces no SHA-256 of the recommender's "
                                 "table the servers froze: nothing to check this device's recommender against")
        mine = model.recommender_table_sha256 if isinstance(model, Denoiser) else None
        if mine is None:
            raise InvalidParameters(f"the round trains a GREC denoiser, and the device's {model.name} records no "
                                    f"SHA-256 of its recommender's table: build it with Denoiser.for_device(..., "
                                    f"table_sha256=) of the recommender's (load_public_recommender's)")
        if mine != announced:
            raise InvalidParameters(f"this device's recommender differs from the one the servers' denoiser is trained "
                                    f"against (its table's SHA-256 {mine}, the round announces {announced})")

    def adam(self) -> AdamConfig:
        """The announced optimizer settings.

        Raises
        ------
        InvalidMessage: ``training`` lacks lr, beta1, beta2 or eps, or they are not Adam's.
        """
        t = self.training
        try:
            return AdamConfig(t["lr"], t["beta1"], t["beta2"], t["eps"])
        except (KeyError, TypeError, InvalidParameters) as exc:
            raise InvalidMessage(f"malformed optimizer settings in the round document: {exc!r}") from None


class DeviceClient:
    """Device ``user_id``'s connections to server 0 and server 1 (:class:`ServerLink`\\ s).

    The constructor connects over HTTPS with the device's per-server keys (``tls``: one
    context per server, server 0's and server 1's, each pinning that server's own CA, or one
    context for both; ``http``: an optional
    shared ``httpx.Client`` pool for simulations of many devices in one process);
    :meth:`over` wraps any pair of links, e.g. the in-process ones of
    :mod:`secemb.sim.local`.

    ``min_users`` is the device's own floor: it takes part in no round announced for fewer
    users, or whose aggregate the servers would release with fewer (:meth:`round_info`
    raises), whatever the servers are configured with.
    """

    def __init__(self, user_id: int, url0: str, url1: str, key0: bytes, key1: bytes, *, timeout: float = 60.0,
                 http: httpx.Client | None = None,
                 tls: ssl.SSLContext | tuple[ssl.SSLContext | None, ssl.SSLContext | None] | None = None,
                 min_users: int = DEFAULT_MIN_USERS) -> None:
        from secemb.transport.http import HttpServerLink

        tls0, tls1 = tls if isinstance(tls, tuple) else (tls, tls)
        http0 = HttpServerLink(0, user_id, url0, key0, timeout=timeout, http=http, tls=tls0)
        http1 = HttpServerLink(1, user_id, url1, key1, timeout=timeout, http=http, tls=tls1)
        self.user_id = int(user_id)
        self.min_users = _floor(min_users)
        self.links: tuple[ServerLink, ServerLink] = (http0, http1)
        #: the signed HTTP clients (raw access for tests of the endpoints; none over :meth:`over`'s links)
        self.servers: tuple[ApiClient, ...] = (http0.api, http1.api)

    @classmethod
    def over(cls, user_id: int, links: tuple[ServerLink, ServerLink], *,
             min_users: int = DEFAULT_MIN_USERS) -> DeviceClient:
        """A client for device ``user_id`` over ``links`` (server 0's, server 1's)."""
        self = cls.__new__(cls)
        self.user_id, self.links, self.min_users = int(user_id), links, _floor(min_users)
        self.servers = ()
        return self

    def fit_answers(self, config: RoundConfig) -> None:
        """Let the HTTP links (:attr:`servers`) read the answers of a round of ``config``: raise
        their answer limit (``max_answer_bytes``, :data:`~secemb.transport.network.ANSWER_FLOOR_BYTES`
        until then) to :func:`~secemb.transport.network.answer_limit` of its sizes, never lower
        it.  ``config`` is the round both servers announce (:meth:`round_info` checks that they
        agree), so one deviating server cannot raise the limit; a longer answer -- endless, or a
        decompression bomb -- is refused with ``InvalidMessage`` once the limit is read, the
        round failing as for any malformed answer."""
        if not self.servers:  # links without HTTP (in process): nothing is read from a network
            return
        from secemb.transport.network import answer_limit  # here: in-process devices never need httpx

        limit = answer_limit(max(config.num_items, config.slots), config.width, config.dense_size)
        for api in self.servers:
            if api.max_answer_bytes is not None:
                api.max_answer_bytes = max(api.max_answer_bytes, limit)

    def close(self) -> None:
        for link in self.links:
            link.close()

    def round_info(self) -> RoundInfo:
        """The current round from both servers.

        Raises
        ------
        ProtocolError
            The servers announce different rounds (one is behind or misbehaves), or a round
            of fewer users than this device's floor ``min_users``.
        """
        a = RoundInfo.from_doc(self.links[0].round_info())
        b = RoundInfo.from_doc(self.links[1].round_info())
        if a.public() != b.public():
            raise ProtocolError(f"the servers announce different rounds ({a.round_id} and {b.round_id})")
        if (a.model_sha256, a.dense_sha256) != (b.model_sha256, b.dense_sha256):  # one server deviated (issue 33)
            exc = ModelDisagreement(f"round {a.round_id}: server 0 announces model {a.model_sha256} (dense "
                                    f"{a.dense_sha256}), server 1 {b.model_sha256} (dense {b.dense_sha256}); "
                                    "this device takes no part")
            self.report(a.round_id, exc)
            raise exc
        if a.n_p < self.min_users or a.min_users < self.min_users:
            raise ProtocolError(f"round {a.round_id} is announced for n_p={a.n_p} users with min_users="
                                f"{a.min_users}; this device's floor is {self.min_users} users")
        return a

    def send_count(self, count: int, ring_bits: int) -> int:
        """Eq. 11: send one additive share of ``count`` to each server (server 1 first, as the
        plan's count stage orders it); returns the bytes sent."""
        dt = np.dtype(np.uint32 if ring_bits == 32 else np.uint64)
        shares = share(np.array([count], dtype=dt))
        sent = 0
        for party in COUNT_ORDER:
            msg = messages.encode_count(shares[party], ring_bits, party)
            self.links[party].count(msg)
            sent += len(msg)
        return sent

    def report(self, round_id: int, exc: ModelDisagreement | RetrievalTampered) -> list[BaseException | None]:
        """Report the deviation ``exc`` this device caught in round ``round_id`` to both servers
        (``POST /v1/alarm``; the honest one halts the deployment), best effort: per server
        ``None`` or the error its report met (the device refuses the round either way)."""
        kind = "model_disagreement" if isinstance(exc, ModelDisagreement) else "retrieval_tampered"
        report = {"kind": kind, "round_id": int(round_id), "detail": str(exc)[:200]}
        out: list[BaseException | None] = []
        for link in self.links:
            try:
                link.alarm(report)
                out.append(None)
            except Exception as err:  # noqa: BLE001 - a deviating server may refuse: the other still hears
                out.append(err)
        return out

    def round_status(self, round_id: int) -> dict[str, Any]:
        """Server 0's view of round ``round_id`` (state; whether this device was included).

        Raises
        ------
        InvalidMessage: the answer is not a JSON object.
        """
        doc = self.links[0].round_status(round_id)
        if not isinstance(doc, dict):
            raise InvalidMessage(f"malformed round status: a JSON object expected, got {type(doc).__name__}")
        return doc


def _floor(min_users: int) -> int:
    return check_int("min_users", min_users, low=MIN_USERS_FLOOR)


class RoundSession:
    """One device in one round.  Call :meth:`prepare`, :meth:`retrieve` (or its three steps
    :meth:`send_requests`, :meth:`fetch_dense`, :meth:`reconstruct`), :meth:`train`,
    :meth:`upload` in this order (each raises ``ProtocolError`` out of order).

    The messages go where the protocol's :class:`~secemb.protocols.stages.RoundPlan` says, in its
    order; a protocol that produces a message the plan has no hop for (or none where the plan
    has one) is refused.  An engine that batches many devices (the in-process one) drives the
    retrieval stage itself through :meth:`request_for` and :meth:`accept_reply`.  A new session
    lets its client's HTTP links read answers of the round's sizes (:meth:`DeviceClient.fit_answers`).

    Attributes
    ----------
    upload_bytes, download_bytes: protocol message bytes sent to / received from the servers
        (retrieval requests and uploads; replies and the dense vector).
    compute_s: seconds of device-side computation (keys, reconstruction, training, encoding,
        the bound proof).
    clip: what the local step's contribution is clipped to (the protocol's
        :meth:`~secemb.protocols.base.Protocol.upload_clip` of the ``clip`` given: with bounded
        payloads, at most the proof's bound).
    """

    _uploads: dict[int, bytes]  # by party in the plan's order, set by train

    def __init__(self, client: DeviceClient, info: RoundInfo, *, protocol: Protocol | None = None,
                 fp: FixedPoint | None = None, task: Task | None = None, clip: ClipSpec | None = None) -> None:
        self.client, self.info = client, info
        self.rc = info.config
        self.protocol = protocol or info.make_protocol()
        self.task = task if task is not None else info.make_task()
        self.plan = self.protocol.plan()
        self.fp = fp or info.fixed_point()
        self.clip = self.protocol.upload_clip(self.fp, clip)
        client.fit_answers(self.rc)  # the round's answers are read from here on
        self._proved = False
        self.upload_bytes = self.download_bytes = 0
        self.compute_s = 0.0
        self._stage = 0
        self.rows_ring: np.ndarray | None = None
        self.dense_ring: np.ndarray | None = None
        self.g_ring: np.ndarray | None = None
        self.d_ring: np.ndarray | None = None
        self.result: StepResult | None = None

    def _advance(self, expect: int) -> None:
        if self._stage != expect:
            raise ProtocolError(f"round session step {expect} called at step {self._stage}")
        self._stage += 1

    def prepare(self, items: np.ndarray | None = None, ratings: np.ndarray | None = None, *,
                sample: Sample | None = None, placement: PaddedRequest | None = None,
                rng: np.random.Generator | None = None) -> PaddedRequest:
        """Build the round's sample -- ``sample``, or the task's draw from the device's
        ``items`` (int64 (n,)) and ``ratings`` (float32 (n,)) in the task's order (by item for
        ratings, chronological for sequences) -- choose the request slots (``placement``, or
        drawn), and make the retrieval keys.  Draws use ``rng``, by default a fresh :func:`private_rng`.

        Raises
        ------
        InvalidParameters
            Neither or both of ``sample`` and ``items``/``ratings`` given.
        """
        if (sample is None) == (items is None or ratings is None):
            raise InvalidParameters("prepare takes either items and ratings or a sample")
        self._advance(0)
        t = time.perf_counter()
        if rng is None and (sample is None or placement is None):  # a fresh generator only if drawn from
            rng = private_rng()
        if sample is None:
            assert items is not None and ratings is not None and rng is not None  # checked above
            sample = self.task.sample(np.asarray(items, dtype=np.int64), ratings, self.rc.num_items, rng)
        if placement is None:
            assert rng is not None  # made above
            placement = place(self.rc, sample.items, rng)
        self._drawn(sample, placement)
        self._keyed(self.role.retrieval_request(self.request.indices))
        self.compute_s += time.perf_counter() - t
        return self.request

    def _drawn(self, sample: Sample, placement: PaddedRequest) -> None:
        """Keep the round's sample and slots; a fresh protocol user for them."""
        self.batch = sample.batch
        self.num_distinct = int(sample.items.size)
        self.request = placement
        self.role = self.protocol.make_user(self.rc)

    def _keyed(self, requests: tuple[bytes, bytes | None]) -> None:
        """Keep the retrieval requests, per server in the plan's order."""
        self._requests = _by_plan(self.plan.device_sends(RETRIEVAL), requests, "retrieval request")
        self._replies: dict[int, bytes | None] = {}

    @staticmethod
    def prepare_many(sessions: Sequence[RoundSession], samples: Sequence[Sample],
                     placements: Sequence[PaddedRequest]) -> list[Exception | None]:
        """:meth:`prepare` of many sessions of one round with the driver's samples and slots,
        their keys generated as one batch (the protocol's
        :meth:`~secemb.protocols.base.UserRole.retrieval_requests`: a simulation of many
        devices in one process); per session ``None`` or the exception that failed its
        preparation (then its stage is unchanged).  Each session's ``compute_s`` is charged an
        equal share of the batch's time."""
        t = time.perf_counter()
        errors: list[Exception | None] = [None] * len(sessions)
        ready: list[int] = []
        for i, (session, sample, placement) in enumerate(zip(sessions, samples, placements, strict=True)):
            try:
                if session._stage != 0:
                    raise ProtocolError(f"round session step 0 called at step {session._stage}")
                session._drawn(sample, placement)
                ready.append(i)
            except Exception as exc:  # noqa: BLE001 - one device's failure is its own result
                errors[i] = exc
        if ready:
            roles = [sessions[i].role for i in ready]
            requests = type(roles[0]).retrieval_requests(roles, [sessions[i].request.indices for i in ready])
            for i, got in zip(ready, requests, strict=True):
                try:
                    if isinstance(got, Exception):
                        raise got
                    sessions[i]._keyed(got)
                    sessions[i]._stage = 1
                except Exception as exc:  # noqa: BLE001 - as above
                    errors[i] = exc
        share = (time.perf_counter() - t) / max(len(sessions), 1)
        for session in sessions:
            session.compute_s += share
        return errors

    def request_for(self, party: int) -> bytes:
        """The retrieval request for server ``party`` (to send in the plan's order)."""
        if self._stage != 1:
            raise ProtocolError("retrieval requests exist between prepare and reconstruct")
        return self._requests[party]

    def accept_reply(self, party: int, reply: bytes | None) -> None:
        """Keep server ``party``'s reply to :meth:`request_for` (and count both)."""
        if self._stage != 1 or party in self._replies:
            raise ProtocolError(f"reply of server {party} not expected now")
        self._replies[party] = reply
        self.upload_bytes += len(self._requests[party])
        self.download_bytes += 0 if reply is None else len(reply)

    def retrieve(self) -> np.ndarray:
        """:meth:`send_requests`, :meth:`fetch_dense`, :meth:`reconstruct`; the rows."""
        self.send_requests()
        self.fetch_dense()
        return self.reconstruct()

    def send_requests(self) -> None:
        """Send the retrieval requests in the plan's order -- server 1 first: with relay it
        must hold the roots before server 0 forwards the keys -- and keep the replies."""
        if self._stage != 1 or self._replies:
            raise ProtocolError("send_requests belongs after prepare, once")
        for party in self._requests:
            self.accept_reply(party, self.client.links[party].retrieval(self.rc.round_id, self._requests[party]))

    def fetch_dense(self) -> None:
        """Get the round's dense vector from server 0 and check it is the one both servers
        announced (``dense_sha256`` of the round document): server 0 alone sends it, so a vector
        crafted for this device would otherwise go unchecked (issue 33).

        Raises
        ------
        ModelDisagreement: the vector's digest is not the announced one (reported to both servers).
        """
        if self._stage != 1 or self.dense_ring is not None:
            raise ProtocolError("fetch_dense belongs after send_requests, once")
        msg = self.client.links[0].dense(self.rc.round_id)
        self.download_bytes += len(msg)
        if self.info.dense_sha256 is not None and hashlib.sha256(msg).hexdigest() != self.info.dense_sha256:
            exc = ModelDisagreement(f"round {self.rc.round_id}: server 0 sent a dense vector that is not the one "
                                    "both servers announced; this device takes no part")
            self.client.report(self.rc.round_id, exc)
            raise exc
        self.dense_ring = messages.decode_dense(msg, round_id=self.rc.round_id, dense_size=self.rc.dense_size,
                                                ring_bits=self.rc.ring_bits)

    def reconstruct(self) -> np.ndarray:
        """The requested rows from the replies (ring, (slots, width))."""
        return result_or_raise(self.reconstruct_many([self])[0])

    @staticmethod
    def reconstruct_many(sessions: Sequence[RoundSession]) -> list[np.ndarray | Exception]:
        """:meth:`reconstruct` of many sessions of one round, their rows read as one batch (the
        protocol's :meth:`~secemb.protocols.base.UserRole.retrieval_results`: a simulation of
        many devices in one process); per session its rows or the exception :meth:`reconstruct`
        would have raised (a tampered answer reported to both servers as there).  The sessions
        that read rows share the batch's time in their ``compute_s``."""
        out: list[np.ndarray | Exception | None] = [None] * len(sessions)
        ready: list[tuple[int, bytes]] = []
        for i, session in enumerate(sessions):
            try:
                ready.append((i, session._replies_read()))
            except Exception as exc:  # noqa: BLE001 - one device's failure is its own result
                out[i] = exc
        if ready:
            t = time.perf_counter()
            roles = [sessions[i].role for i, _ in ready]
            rows = type(roles[0]).retrieval_results(roles, [(r0, sessions[i]._replies.get(1)) for i, r0 in ready])
            share = (time.perf_counter() - t) / len(ready)
            for (i, _), got in zip(ready, rows, strict=True):
                session = sessions[i]
                if isinstance(got, RetrievalTampered):  # a server altered its answer: no training, both told
                    session.client.report(session.rc.round_id, got)
                elif not isinstance(got, Exception):
                    session.rows_ring = got
                    session.compute_s += share
                out[i] = got
        return cast("list[np.ndarray | Exception]", out)  # every entry is set above

    def _replies_read(self) -> bytes:
        """Step to reading the replies: server 0's (the one every protocol sends).

        Raises
        ------
        ProtocolError: before :meth:`fetch_dense`, a server's reply missing, or out of order.
        InvalidMessage: server 0 sent no reply.
        """
        if self.dense_ring is None:
            raise ProtocolError("reconstruct belongs after fetch_dense")
        if set(self._replies) != set(self._requests):
            raise ProtocolError("reconstruct needs the reply of every server the request went to")
        self._advance(1)
        reply0 = self._replies[0]
        if reply0 is None:
            raise InvalidMessage("server 0 sent no retrieval reply")
        return reply0

    def train(self, step: LocalStep) -> StepResult:
        """Run the local-training hook on the real rows; encode the gradients for upload."""
        return result_or_raise(self.train_many([self], [step])[0])

    @staticmethod
    def train_many(sessions: Sequence[RoundSession], steps: Sequence[LocalStep]) -> list[StepResult | Exception]:
        """:meth:`train` of many sessions of one round: each session's local step in turn
        (``steps[i]`` for ``sessions[i]``), then their uploads encoded as one batch (the
        protocol's :meth:`~secemb.protocols.base.UserRole.uploads`: a simulation of many
        devices in one process); per session its step's result or the exception :meth:`train`
        would have raised.  Each session's ``compute_s``: its step and an equal share of the
        batch's encoding."""
        out: list[StepResult | Exception | None] = [None] * len(sessions)
        ready: list[int] = []
        gradients: list[tuple[np.ndarray, np.ndarray]] = []  # of the ready sessions
        for i, (session, step) in enumerate(zip(sessions, steps, strict=True)):
            try:
                session._advance(2)
                assert session.rows_ring is not None and session.dense_ring is not None  # steps 1 and 2 set them
                t = time.perf_counter()
                session.g_ring, session.d_ring, session.result = grads = local_update(
                    session.fp, session.rc, session.info.n_p, session.request, session.num_distinct, session.batch,
                    session.rows_ring, session.dense_ring, step, task=session.task, clip=session.clip,
                )
                session.compute_s += time.perf_counter() - t
                ready.append(i)
                gradients.append(grads[:2])
            except Exception as exc:  # noqa: BLE001 - one device's failure is its own result
                out[i] = exc
        if ready:
            t = time.perf_counter()
            roles = [sessions[i].role for i in ready]
            msgs = type(roles[0]).uploads(roles, gradients)
            for i, got in zip(ready, msgs, strict=True):
                session = sessions[i]
                try:
                    session._uploads = _by_plan(session.plan.device_sends(UPLOAD), result_or_raise(got), "upload")
                    out[i] = session.result
                except Exception as exc:  # noqa: BLE001 - as above
                    out[i] = exc
            share = (time.perf_counter() - t) / len(ready)
            for i in ready:
                sessions[i].compute_s += share
        return cast("list[StepResult | Exception]", out)  # every entry is set above

    def upload(self, *, only: int | None = None) -> None:
        """Send the upload in the plan's order: server 1 first (without relay), then server 0
        -- server 0 counts uploads towards the quorum, so a user it counts is already at
        server 1.

        Where the device uploads to both servers, server 1 answers with its receipt, which is
        appended to the upload to server 0 (:func:`~secemb.round.messages.split_receipt`: server 0
        takes no upload without it, and holds server 1 to it at the close); a server 1 that answers
        without a well-formed receipt fails the upload (``InvalidMessage``) and nothing is sent to
        server 0.

        ``only``: send to that server alone (simulates a device that dies in between; the
        servers then leave it out of the aggregate).  ``only=0`` where the device uploads to both
        servers sends server 0 its upload without a receipt, which server 0 refuses (a device cannot
        reach server 0 alone)."""
        self._advance(3)
        receipt = b""
        for party, msg in self._uploads.items():
            if only in (None, party):
                body = msg + receipt if party == 0 else msg
                answer = self.client.links[party].upload(self.rc.round_id, body)
                self.upload_bytes += len(body)
                if party == 1:
                    receipt = messages.check_receipt_form(answer, round_id=self.rc.round_id)
                    self.download_bytes += len(receipt)

    @property
    def proves(self) -> bool:
        """Whether the round has bounded payloads' step (its plan's :data:`PROVE` hops): then
        :meth:`prove` follows :meth:`upload`."""
        return bool(self.plan.stage(PROVE))

    def prove(self) -> bool:
        """Bounded payloads, after :meth:`upload` (to both servers): fetch server 0's challenge
        for this device's upload, prove that the upload is small (its role's
        :meth:`~secemb.protocols.base.BoundProver.bound_proof`, e.g. SecEmb's) and send server 0 the
        proof.  ``False``: the upload is not within the bound (the local step's contribution was
        clipped to it, :meth:`~secemb.protocols.base.Protocol.upload_clip`, so an honest SecEmb
        device fails with probability below ``2^-52`` at the sizes of docs/security.md, "Honest
        devices pass", which gives the general figure); nothing is sent, and
        the servers leave the device out of the round.

        Raises
        ------
        ProtocolError: the round has no bound proof (or its user role makes none:
            not a :class:`~secemb.protocols.base.BoundProver`), before :meth:`upload`, or twice.
        InvalidMessage: server 0's challenge is not 16 bytes.
        """
        if not self.proves or not isinstance(self.role, BoundProver):
            raise ProtocolError("this round has no bound proof")
        if self._stage != 4 or self._proved:
            raise ProtocolError("prove belongs after upload, once")
        self._proved = True
        challenge = self.client.links[0].challenge(self.rc.round_id)
        self.download_bytes += len(challenge)
        if not isinstance(challenge, bytes) or len(challenge) != BOUND_CHALLENGE_BYTES:
            raise InvalidMessage(f"server 0's bound challenge is not {BOUND_CHALLENGE_BYTES} bytes")
        t = time.perf_counter()
        try:
            body = self.role.bound_proof(challenge)
        except InvalidParameters:  # the upload is beyond the bound: no proof can be made
            return False
        finally:
            self.compute_s += time.perf_counter() - t
        self.client.links[0].proof(self.rc.round_id, body)
        self.upload_bytes += len(body)
        return True

    def release(self, *, keep_encoded: bool = False) -> None:
        """Drop the round's buffers once :meth:`upload` has run: the keys and replies, the
        retrieved rows, the dense vector, the step's gradients (``result`` keeps its ``loss``
        and empty gradient arrays), the upload messages and, unless ``keep_encoded``, the
        encoded gradients ``g_ring`` / ``d_ring``.  An engine that holds a round's sessions
        until the round closes calls it, so its memory is one device's buffers, not
        ``users_per_round`` of them (DeepFM at d = 128: 7 M dense values, ~0.2 GB a session).
        The byte and time counters stay.

        Raises
        ------
        ProtocolError
            Before :meth:`upload`.
        """
        if self._stage != 4:
            raise ProtocolError("release belongs after upload")
        self._requests, self._replies, self._uploads = {}, {}, {}
        self.rows_ring = self.dense_ring = None
        if self.result is not None:
            self.result = StepResult(np.zeros((0, 0)), np.zeros(0), self.result.loss)
        if not keep_encoded:
            self.g_ring = self.d_ring = None


def _by_plan(order: tuple[int, ...], msgs: tuple[bytes | None, ...], what: str) -> dict[int, bytes]:
    """The protocol's messages to server 0 and 1 keyed by party in the plan's ``order``.

    Raises
    ------
    ProtocolError
        The protocol made a message for a server the plan does not send to, or none for one
        it does.
    """
    for party, msg in enumerate(msgs):
        if (msg is not None) != (party in order):
            raise ProtocolError(
                f"{what}: the protocol {'made' if msg is not None else 'made no'} message for server {party}, "
                f"its round plan sends to servers {order}"
            )
    return {party: msgs[party] for party in order}  # type: ignore[misc]


#: the longest upload quantum a device takes (seconds): a round waits for its devices, and a minute a
#: round is far beyond any local step this SDK runs
MAX_UPLOAD_QUANTUM_S = 60.0


def paced_wait(elapsed: float, quantum: float) -> float:
    """Seconds a device waits before its upload when its local step took ``elapsed`` seconds since its
    last download of the round: up to the next multiple of ``quantum`` (at least one), so that the gap a
    server sees between the device's downloads and its upload tells it only how many quanta the step
    took -- not, to the millisecond, how much work the device's own data made (its count of ratings:
    docs/security.md, "Participation and timing").  ``quantum`` 0: no wait."""
    if quantum <= 0.0:
        return 0.0
    return max(1, math.ceil(elapsed / quantum)) * quantum - elapsed


class Device:
    """A device: its ratings, its private state, and the client for both servers.

    Parameters
    ----------
    client: the device's connections.
    items, ratings: its training interactions (item ids, ratings), in the order of the model's
        task (:attr:`~secemb.models.task.Task.order`: chronological for a sequential model).
    store, user: where its private parameters live (row ``user`` of ``store``); by default a
        fresh one-row store initialized by the model with ``rng``.
    rng: the device's generator for its private draws (initialization, samples, slots); default a
        fresh :func:`private_rng`.
    upload_quantum_s: the device uploads at the next multiple of this many seconds after its last
        download of the round (:func:`paced_wait`; ``secemb client`` takes 0.25 by default); 0 sends at
        once.  At most :data:`MAX_UPLOAD_QUANTUM_S`.

    Raises
    ------
    InvalidParameters: an upload quantum that is not a finite number of seconds in ``[0, 60]``.
    """

    def __init__(self, client: DeviceClient, items: np.ndarray, ratings: np.ndarray, *,
                 store: UserStore | None = None, user: int | None = None,
                 rng: np.random.Generator | None = None, upload_quantum_s: float = 0.0) -> None:
        quantum = upload_quantum_s
        if isinstance(quantum, bool) or not isinstance(quantum, int | float) or not math.isfinite(quantum) \
                or not 0.0 <= quantum <= MAX_UPLOAD_QUANTUM_S:
            raise InvalidParameters(f"upload_quantum_s must be a number of seconds in [0, {MAX_UPLOAD_QUANTUM_S:g}], "
                                    f"got {upload_quantum_s!r}")
        self.upload_quantum_s = float(quantum)
        self.client = client
        self.items, self.ratings = np.asarray(items, dtype=np.int64), np.asarray(ratings)
        self.store = store
        self.row = 0 if store is None else (client.user_id if user is None else int(user))
        self.rng = rng or private_rng()
        self._snap: UserSnapshot | None = None
        self._round: int | None = None

    def _state(self, info: RoundInfo, model: RecModel) -> UserState:
        if self.store is None:
            self.store = model.new_user_store(1, self.rng, info.adam())
        return self.store.state(self.row)

    def participate(self, info: RoundInfo, *, model: RecModel | None = None, placement: PaddedRequest | None = None,
                    protocol: Protocol | None = None, hook: LocalStep | None = None,
                    pause: float = 0.0) -> RoundSession:
        """Take part in round ``info``: retrieve, train (``hook``, default the model's local
        step), clip when the round announces DP (:meth:`RoundInfo.clip`) or bounded payloads,
        upload, and prove the upload's bound where the round has that step.  ``pause`` seconds
        between retrieval and upload (for tests of late devices); the upload then waits for the
        device's upload quantum (:func:`paced_wait`, from the end of its last download).  The
        private state is snapshotted first (see :meth:`settle`).

        Raises
        ------
        InvalidParameters
            ``model`` (default the announced one) is not of the round's sizes
            (:meth:`RoundInfo.check_model`).
        """
        model = model or info.make_model()
        info.check_model(model)
        state = self._state(info, model)
        if hook is None:
            def hook(rows: np.ndarray, dense: np.ndarray, batch: Batch) -> StepResult:
                return model.local_step(rows, dense, state, batch)
        assert self.store is not None  # _state made it
        self._snap, self._round = self.store.snapshot(self.row), info.round_id
        session = RoundSession(self.client, info, protocol=protocol, task=model.task, clip=info.clip())
        session.prepare(self.items, self.ratings, placement=placement, rng=self.rng)
        session.send_requests()
        session.fetch_dense()
        downloaded = time.monotonic()  # the round's last download: the gap a server sees starts here
        session.reconstruct()
        session.train(hook)
        if pause:
            time.sleep(pause)
        wait = paced_wait(time.monotonic() - downloaded, self.upload_quantum_s)
        if wait > 0.0:
            time.sleep(wait)
        session.upload()
        if session.proves:
            session.prove()
        return session

    def settle(self, outcome: dict[str, Any] | None = None, *, wait_s: float = 0.0) -> str:
        """Apply the round's outcome to the private state: keep the local step unless server 0
        reports the round ``aborted`` (then undo it).  ``outcome``: a status document, else
        it is fetched (waiting up to ``wait_s`` for the round to end).  Returns the state."""
        if self._round is None:
            raise ProtocolError("settle before participate")
        deadline = time.monotonic() + wait_s
        while outcome is None or outcome.get("state") not in ("committed", "aborted"):
            try:
                outcome = self.client.round_status(self._round)
            except RemoteError as exc:
                if exc.status == 404:
                    outcome = {"state": "aborted"}
                    break
                raise
            if outcome.get("state") in ("committed", "aborted") or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        state = str(outcome.get("state"))
        if state == "aborted" and self._snap is not None:
            assert self.store is not None  # the snapshot came from it
            self.store.restore(self.row, self._snap)
        if state in ("committed", "aborted"):
            self._snap, self._round = None, None
        return state

