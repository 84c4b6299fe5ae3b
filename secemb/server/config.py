"""Configuration of one server process: a TOML or JSON file plus command-line overrides.

The file has sections; every key is optional except where noted (see ``docs/deployment.md``
for a full example)::

    [server]    party (required), host, port, peer_url (required), state_dir (required),
                auth_window_s, peer_timeout_s, max_body_bytes, read_timeout_s, max_connections,
                max_body_reads, requests_per_s, max_nonces, batch_wait_ms, docs (serve /docs and /openapi.json),
                insecure_http (plain HTTP, loopback only -- host and peer_url; default false: TLS)
    [tls]       ca, cert, key -- PEM files written by ``secemb admin init`` (required unless
                insecure_http)
    [secrets]   peer, admin, users   -- hex, >= 32 bytes each (required; or the environment
                variables SECEMB_PEER_SECRET, SECEMB_ADMIN_SECRET, SECEMB_USER_SECRET)
    [protocol]  name, layout, relay, expansion, layout_seed, backend, workers; [protocol.options] the
                protocol's own options (secemb: ``bound``, on by default where it applies, and its
                ``users_per_round``; see :data:`DEFAULT_BOUND_USERS` and :meth:`ServerConfig.payload_bounds`)
    [model]     name, hparams (table: the model's constructor spec), num_items (required),
                num_users (required), rating_range, init_seed, item_features (path of the
                public item features of a feature model, written by
                ``secemb.data.features.save_item_features``), frozen_table (GREC's denoiser:
                path of the recommender's public table, its frozen columns, written by
                ``secemb.inference.saved.save_frozen_table``)
    [training]  lr, beta1, beta2, eps, lazy_adam, ring_bits, frac_bits, m_prime, m_prime_max, alpha
    [rounds]    deadline_s, min_users
    [privacy]   sigma (central DP: each server's noise scale in ring units; docs/security.md),
                clip (the L2 bound every device clips its round contribution to; required with
                sigma, announced to the devices in the round document)
    [inference] candidates (GREC inference: the public candidate set, item ids scored for every
                device's request; omitted: every item; docs/inference.md)

The two servers' files must agree on ``[protocol]``, ``[model]``, ``[training]`` and ``[inference]`` (server 1
checks a fingerprint of them when server 0 opens a round) and on the peer secret.  Unknown
sections or keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError,
                      ValidationInfo, field_validator, model_validator)

from secemb.data.features import load_item_features
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.inference.denoiser import NAME as DENOISER
from secemb.inference.saved import load_frozen_table
from secemb.models import RecModel, get_model
from secemb.models.optim import AdamConfig
from secemb.protocols.backends import make_backend
from secemb.protocols.base import Protocol
from secemb.protocols.factory import make_protocol
from secemb.protocols.registry import protocol_class
from secemb.ring import FixedPoint
from secemb.options import DEFAULT_MODEL, DEFAULTS, read_table
from secemb.round.policy import DEFAULT_MIN_USERS, MIN_USERS_FLOOR
from secemb.server.tls import client_context
from secemb.transport.signing import parse_secret

__all__ = ["DEFAULT_BOUND_USERS", "ServerConfig", "load_config", "SECRET_ENV"]

SECRET_ENV = {
    "peer_secret": "SECEMB_PEER_SECRET",
    "admin_secret": "SECEMB_ADMIN_SECRET",
    "user_secret": "SECEMB_USER_SECRET",
}

_LOOPBACK = ("127.0.0.1", "::1", "localhost")

#: the defaults a server shares with a training run beside its options' (:data:`~secemb.options.DEFAULTS`): Adam's
#: constants (:class:`~secemb.models.optim.AdamConfig`) and the fixed point's (:class:`~secemb.ring.FixedPoint`)
_ADAM, _FIXED = AdamConfig(), FixedPoint()

#: the round size a deployment's payload bound is proved for when ``[protocol.options]`` names no
#: ``users_per_round``: ``secemb train``'s users per round (:data:`~secemb.options.DEFAULTS`, 100), the
#: ``--participants 0-99`` of docs/deployment.md; ``num_users`` when the deployment has fewer devices (no round
#: can have more).  Server 0 refuses to open a larger round (:meth:`secemb.server.leader.LeaderNode.open_round`)
DEFAULT_BOUND_USERS = DEFAULTS.users_per_round
#: the protocol option that turns bounded payloads on (issue 34 (b), :mod:`secemb.protocols.secemb.bounds`)
_BOUND, _BOUND_USERS = "bound", "users_per_round"

# section -> {file key: field name}
_SECTIONS: dict[str, dict[str, str]] = {
    "server": {
        "party": "party",
        "host": "host",
        "port": "port",
        "peer_url": "peer_url",
        "state_dir": "state_dir",
        "auth_window_s": "auth_window_s",
        "peer_timeout_s": "peer_timeout_s",
        "max_body_bytes": "max_body_bytes",
        "read_timeout_s": "read_timeout_s",
        "max_connections": "max_connections",
        "max_body_reads": "max_body_reads",
        "requests_per_s": "requests_per_s",
        "max_nonces": "max_nonces",
        "batch_wait_ms": "batch_wait_ms",
        "docs": "docs",
        "insecure_http": "insecure_http",
    },
    "tls": {"ca": "tls_ca", "cert": "tls_cert", "key": "tls_key"},
    "secrets": {"peer": "peer_secret", "admin": "admin_secret", "users": "user_secret"},
    "protocol": {
        "name": "protocol",
        "layout": "layout",
        "relay": "relay",
        "expansion": "expansion",
        "layout_seed": "layout_seed",
        "backend": "backend",
        "workers": "workers",
        "options": "protocol_options",
    },
    "model": {
        "name": "model",
        "hparams": "model_hparams",
        "num_items": "num_items",
        "num_users": "num_users",
        "rating_range": "rating_range",
        "init_seed": "init_seed",
        "item_features": "item_features",
        "frozen_table": "frozen_table",
    },
    "training": {
        "lr": "lr",
        "beta1": "beta1",
        "beta2": "beta2",
        "eps": "eps",
        "lazy_adam": "lazy_adam",
        "ring_bits": "ring_bits",
        "frac_bits": "frac_bits",
        "m_prime": "m_prime",
        "m_prime_max": "m_prime_max",
        "alpha": "alpha",
    },
    "rounds": {"deadline_s": "deadline_s", "min_users": "min_users"},
    "privacy": {"sigma": "dp_sigma", "clip": "dp_clip"},
    "inference": {"candidates": "inference_candidates"},
}

#: fields both servers must agree on (hashed into the fingerprint)
_SHARED = (
    "protocol", "layout", "relay", "expansion", "layout_seed", "protocol_options", "model", "model_hparams",
    "num_items",
    "num_users", "rating_range", "init_seed", "lr", "beta1", "beta2", "eps", "lazy_adam", "ring_bits",
    "frac_bits", "alpha",
)


# numbers: an int stays an int (the fingerprint hashes the value as given), bools are refused
_Number = StrictInt | StrictFloat
_PositiveNumber = Annotated[StrictInt, Field(gt=0)] | Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)]
_NonNegativeNumber = Annotated[StrictInt, Field(ge=0)] | Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False)]


def _invalid(exc: ValidationError, data: dict[str, Any]) -> Exception:
    """The one translation of pydantic's :class:`ValidationError` into secemb's errors.

    An exception a validator raised (the secrets' rules, a cross-field check, the protocol,
    model, optimiser or ring refusing a value) comes back as itself; a missing or unexpected
    keyword is a :class:`TypeError`, as for any call; any other failure is an
    :class:`InvalidParameters` naming the field, what it must be (its ``description``) and
    what it got."""
    err = exc.errors()[0]
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, Exception):
        return cause
    name = str(err["loc"][0]) if err["loc"] else ""
    if err["type"] == "missing":
        return TypeError(f"ServerConfig() missing required argument: {name!r}")
    if err["type"] == "extra_forbidden":
        return TypeError(f"ServerConfig() got an unexpected keyword argument {name!r}")
    got = data[name] if name in data else err["input"]
    info = ServerConfig.model_fields.get(name)
    expected = info.description if info is not None and info.description else err["msg"]
    return InvalidParameters(f"{name} must be {expected}, got {got!r}")


def _bound_blocker(protocol: str, options: Mapping[str, Any], ring_bits: int, dp_sigma: float) -> str | None:
    """Why bounded payloads cannot apply to a deployment of ``protocol`` with these ``[protocol.options]``,
    ring and central-DP noise (``None``: they can): a protocol without the ``bound`` option, what the
    protocol's own proof needs (:meth:`~secemb.protocols.base.Protocol.payload_bound_blocker`: SecEmb's,
    verified uploads and the 32-bit ring), or central DP (its rounds are Poisson-sampled: no fixed size
    the bound could be proved for).

    Raises
    ------
    InvalidParameters: ``protocol`` is not a two-server protocol's name.
    """
    cls = protocol_class(protocol)
    if _BOUND not in cls.capabilities.options:
        return f"protocol {protocol!r} has no bounded payloads"
    blocker = cls.payload_bound_blocker(options, ring_bits)
    if blocker is not None:
        return blocker
    if dp_sigma:
        return "central DP ([privacy] sigma) samples each round's users by Poisson sampling: no fixed round size " \
               "to prove the bound for"
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class ServerConfig(BaseModel):
    """Everything a server process needs (validated on creation; immutable).

    Each field's ``description`` is what an invalid value's error says it must be.  The options
    a server shares with a training run (protocol, expansion, backend, workers, lazy_adam,
    ring_bits, m_prime, alpha) default to the run's (:class:`~secemb.options.RunOptions`),
    the Adam constants (lr, beta1, beta2, eps) to :class:`~secemb.models.optim.AdamConfig`'s and
    ``frac_bits`` to :class:`~secemb.ring.FixedPoint`'s, as a training run's
    (:class:`~secemb.round.results.TrainConfig`); the file's own sections and the strict types
    stay this model's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    party: StrictInt = Field(ge=0, le=1, description="0 or 1")
    peer_url: StrictStr = Field(pattern=r"^https?://", description="an http(s) URL")
    state_dir: Path = Field(description="a path")
    peer_secret: bytes = Field(repr=False, description="hex of >= 32 bytes")
    admin_secret: bytes = Field(repr=False, description="hex of >= 32 bytes")
    user_secret: bytes = Field(repr=False, description="hex of >= 32 bytes")
    num_items: StrictInt = Field(0, ge=1, validate_default=True, description="an int >= 1")
    num_users: StrictInt = Field(0, ge=1, validate_default=True, description="an int >= 1")
    host: StrictStr = Field("127.0.0.1", description="a host name or address")
    port: StrictInt = Field(8700, ge=0, lt=65536, description="in [0, 65536)")
    auth_window_s: _PositiveNumber = Field(120.0, description="a positive number")
    peer_timeout_s: _PositiveNumber = Field(60.0, description="a positive number")
    max_body_bytes: StrictInt = Field(256 * 2**20, ge=1024, description="an int >= 1024")
    #: seconds a connection may take to send a request's headers, and a request its body
    read_timeout_s: _PositiveNumber = Field(10.0, description="a positive number")
    #: concurrent connections and requests; beyond, uvicorn answers 503 at once
    max_connections: StrictInt = Field(256, ge=8, description="an int >= 8")
    #: bodies read at once per credential class before their signature is checked (more wait, up to read_timeout_s)
    max_body_reads: StrictInt = Field(32, ge=1, description="an int >= 1")
    #: requests a second each device key may sign (bursts of four times that); beyond, 429
    requests_per_s: _PositiveNumber = Field(50.0, description="a positive number")
    #: unexpired nonces remembered at most (~220 bytes each); a full memory answers 503
    max_nonces: StrictInt = Field(262_144, ge=1024, description="an int >= 1024")
    #: milliseconds a batch of device (and relayed) messages waits for more while they arrive together, so that
    #: concurrent devices share one evaluation (:class:`~secemb.server.rounds.Batcher`); a lone device never waits
    batch_wait_ms: _NonNegativeNumber = Field(5.0, le=1000, description="a number in [0, 1000] (milliseconds)")
    #: serve the interactive API docs (/docs) and the schema (/openapi.json); off by default
    docs: StrictBool = Field(False, description="true or false")
    #: plain HTTP instead of TLS (refused unless ``host`` is a loopback address)
    insecure_http: StrictBool = Field(False, description="true or false")
    tls_ca: Path | None = Field(None, description="a path")
    tls_cert: Path | None = Field(None, description="a path")
    tls_key: Path | None = Field(None, description="a path")
    protocol: StrictStr = Field(DEFAULTS.protocol, description="a protocol name")
    layout: StrictStr = Field("cuckoo", description="a layout name")
    relay: StrictBool = Field(True, description="true or false")
    expansion: _Number = Field(DEFAULTS.expansion, description="a number")
    layout_seed: StrictInt = Field(0, description="an int")
    backend: StrictStr = Field(DEFAULTS.backend, description="a backend name")
    workers: StrictInt | None = Field(DEFAULTS.workers, description="None or an int")
    model: StrictStr = Field(DEFAULT_MODEL, description="a model name")
    model_hparams: dict[str, Any] = Field(default_factory=dict, description="a table")
    protocol_options: dict[str, Any] = Field(default_factory=dict, description="a table")
    #: ``.npz`` of the public item features (FM, DeepFM); see :meth:`make_model`
    item_features: Path | None = Field(None, description="None or a path")
    #: ``.npz`` of the recommender's public table, the frozen columns of GREC's denoiser
    #: (``grec-denoiser``); see :meth:`make_model`
    frozen_table: Path | None = Field(None, description="None or a path")
    rating_range: tuple[Annotated[float, Field(allow_inf_nan=False)], Annotated[float, Field(allow_inf_nan=False)]] = (
        Field((1.0, 5.0), description="(lo, hi) with lo < hi"))
    init_seed: StrictInt = Field(0, ge=0, description="an int >= 0")
    lr: _Number = Field(_ADAM.lr, description="a number")
    beta1: _Number = Field(_ADAM.beta1, description="a number")
    beta2: _Number = Field(_ADAM.beta2, description="a number")
    eps: _Number = Field(_ADAM.eps, description="a number")
    lazy_adam: StrictBool = Field(DEFAULTS.lazy_adam, description="true or false")
    ring_bits: StrictInt = Field(DEFAULTS.ring_bits, description="an int")
    frac_bits: StrictInt = Field(_FIXED.frac_bits, description="an int")
    m_prime: StrictInt | None = Field(DEFAULTS.m_prime, ge=1, description="None or in [1, num_items]")
    #: the largest m' the count phase may set (a malicious device's count share moves m' at most
    #: up to it; docs/security.md); None: num_items
    m_prime_max: StrictInt | None = Field(None, ge=1, description="None or in [1, num_items]")
    alpha: _Number = Field(DEFAULTS.alpha, description="a number")
    deadline_s: _PositiveNumber = Field(60.0, description="a positive number")
    #: the floor: this server releases no count, aggregate share or user set of fewer users
    min_users: StrictInt = Field(DEFAULT_MIN_USERS, ge=MIN_USERS_FLOOR, description=f"an int >= {MIN_USERS_FLOOR}")
    #: central DP: the scale (ring units) of the discrete Gaussian this server adds to every
    #: coordinate of its aggregate share each round (0: none; secemb.privacy.plan_dp)
    dp_sigma: _NonNegativeNumber = Field(0.0, description="a finite number >= 0 ([privacy] sigma)")
    #: central DP: the L2 bound of one device's round contribution, announced to the devices
    #: (the round document's training.dp_clip); > 0 exactly when dp_sigma is
    dp_clip: _NonNegativeNumber = Field(0.0, description="a finite number >= 0 ([privacy] clip)")
    #: GREC inference: the public candidate set, the item ids every device's request is scored
    #: on (the reply's order: ascending); None: every item.  Public and the same for every device
    #: (in the fingerprint when set), never chosen per request
    inference_candidates: tuple[StrictInt, ...] | None = Field(
        None, description="None or a non-empty list of distinct item ids in [0, num_items) ([inference] candidates)")

    def __init__(self, **data: Any) -> None:
        """Validate ``data`` (the fields, by name).

        Raises
        ------
        InvalidParameters
            An invalid value (the message names the field, what it must be and what it got).
        TypeError
            A missing or unknown field.
        """
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _invalid(exc, data) from None

    @model_validator(mode="before")
    @classmethod
    def _default_bound(cls, data: Any) -> Any:
        """Bounded payloads on by default wherever they apply (:func:`_bound_blocker`): ``[protocol.options]``
        without ``bound`` gets ``bound = true`` there, and a bound without ``users_per_round`` gets
        :data:`DEFAULT_BOUND_USERS` (or ``num_users`` when smaller).  Where they cannot apply the options stay
        as given.  Values of the wrong type are left for the fields' own validation.

        Raises
        ------
        InvalidParameters: ``bound`` not a bool; ``bound = true``, or a ``users_per_round``, where bounds
            cannot apply; ``users_per_round`` with ``bound = false``.
        """
        if not isinstance(data, dict):
            return data
        options = data.get("protocol_options", {})
        protocol, ring_bits = data.get("protocol", DEFAULTS.protocol), data.get("ring_bits", DEFAULTS.ring_bits)
        dp_sigma = data.get("dp_sigma", 0.0)
        if not (isinstance(options, dict) and isinstance(protocol, str) and _is_int(ring_bits)
                and isinstance(dp_sigma, int | float) and not isinstance(dp_sigma, bool)):
            return data
        if not isinstance(options.get(_BOUND, False), bool):
            raise InvalidParameters(f"[protocol.options] bound must be true or false, got {options[_BOUND]!r:.80}")
        blocker = _bound_blocker(protocol, options, ring_bits, dp_sigma)
        bound = options.get(_BOUND, blocker is None)
        if blocker is not None and bound is True:
            raise InvalidParameters(f"[protocol.options] bound = true cannot apply: {blocker}; remove it (payload "
                                    "bounds are then off)")
        if _BOUND_USERS in options and bound is not True:
            why = blocker if blocker is not None else "bound = false"
            raise InvalidParameters(f"[protocol.options] users_per_round is the payload bound's round size, and "
                                    f"payload bounds are off here: {why}; remove it")
        if blocker is not None:
            return data
        if bound is True and _BOUND_USERS not in options:
            users = data.get("num_users")
            n = users if isinstance(users, int) and 1 <= users < DEFAULT_BOUND_USERS else DEFAULT_BOUND_USERS
            options = options | {_BOUND: True, _BOUND_USERS: n}
        return data | {"protocol_options": options | {_BOUND: bound}}

    @field_validator("peer_secret", "admin_secret", "user_secret", mode="before")
    @classmethod
    def _parse_secret(cls, value: Any, info: ValidationInfo) -> bytes:
        """Secrets are bytes, or hex text of them; at least 32 bytes (``signing.parse_secret``)."""
        return parse_secret(f"secret {info.field_name}", value)

    @field_validator("rating_range")
    @classmethod
    def _ordered_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        """``lo < hi``."""
        if not value[0] < value[1]:
            raise InvalidParameters(f"rating_range must be (lo, hi) with lo < hi, got {value!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ServerConfig:
        """The cross-field checks: plain HTTP on loopback only (the address served and the
        peer called), ``m_prime <= num_items``; then the protocol, model, optimiser and ring
        objects validate the fields they take."""
        if self.insecure_http and self.host not in _LOOPBACK:
            raise InvalidParameters(f"insecure_http binds loopback only ({', '.join(_LOOPBACK)}), got host "
                                    f"{self.host!r}; give [tls] files for any other address")
        if self.insecure_http and urlsplit(self.peer_url).hostname not in _LOOPBACK:
            raise InvalidParameters(f"insecure_http calls a loopback peer only ({', '.join(_LOOPBACK)}), got peer_url "
                                    f"{self.peer_url!r}: plain HTTP would carry the servers' traffic in the clear "
                                    "over the network; give [tls] files")
        if self.m_prime is not None and self.m_prime > self.num_items:
            raise InvalidParameters(f"m_prime must be None or in [1, num_items], got {self.m_prime!r}")
        if self.m_prime_max is not None and self.m_prime_max > self.num_items:
            raise InvalidParameters(f"m_prime_max must be None or in [1, num_items], got {self.m_prime_max!r}")
        if self.inference_candidates is not None:
            self._check_candidates(self.inference_candidates)
        if bool(self.dp_sigma) != bool(self.dp_clip):
            raise InvalidParameters(f"[privacy] sigma and clip go together (the devices clip to what the noise is "
                                    f"calibrated for), got sigma={self.dp_sigma!r}, clip={self.dp_clip!r}")
        self.make_protocol().check_ring_bits(self.ring_bits)  # e.g. n users' bound must leave room in the ring
        self.make_model()
        self.adam()
        self.fixed_point()
        return self

    def _check_candidates(self, ids: tuple[int, ...]) -> None:
        """``[inference] candidates``: non-empty, distinct, in ``[0, num_items)``."""
        what = "[inference] candidates"
        if not ids:
            raise InvalidParameters(f"{what} must list at least one item id (omit the key for every item)")
        bad = [i for i in ids if not 0 <= i < self.num_items]
        if bad:
            raise InvalidParameters(f"{what} must be item ids in [0, {self.num_items}), got {bad[:5]}"
                                    + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""))
        if len(set(ids)) != len(ids):
            uniq, counts = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
            raise InvalidParameters(f"{what} must be distinct, got {uniq[counts > 1][:5].tolist()} more than once")

    def payload_bounds(self) -> dict[str, Any]:
        """Whether the servers verify bounded payloads (issue 34 (b)), what ``secemb serve`` says at start-up
        and ``/v1/admin/status`` reports: ``{"verified", "users_per_round", "turned_off", "detail"}``.
        ``verified``: every device proves its upload small for rounds of at most ``users_per_round`` users
        (``None`` when not verified); ``turned_off``: they would apply but ``bound = false`` turned them off
        (then a malicious device can wrap the round's sum and corrupt the model); ``detail``: one line saying
        which, or why they cannot apply (:func:`_bound_blocker`)."""
        if self.protocol_options.get(_BOUND) is True:
            n = int(self.protocol_options[_BOUND_USERS])
            return {"verified": True, "users_per_round": n, "turned_off": False,
                    "detail": f"payload bounds verified: every device proves its upload small, for rounds of at "
                              f"most {n} users ([protocol.options] users_per_round)"}
        blocker = _bound_blocker(self.protocol, self.protocol_options, self.ring_bits, self.dp_sigma)
        if blocker is not None:
            return {"verified": False, "users_per_round": None, "turned_off": False,
                    "detail": f"payload bounds off: {blocker}"}
        return {"verified": False, "users_per_round": None, "turned_off": True,
                "detail": "payload bounds off ([protocol.options] bound = false): a malicious device can send "
                          "oversized payloads that wrap the round's sum and corrupt rows of the model "
                          "(docs/security.md)"}

    def candidates(self) -> np.ndarray | None:
        """The public candidate set as sorted int64 ids (the reply's order); ``None``: every item."""
        if self.inference_candidates is None:
            return None
        return np.sort(np.asarray(self.inference_candidates, dtype=np.int64))

    # ---------------------------------------------------------------- derived objects
    def check_listener(self) -> None:
        """What serving needs beyond a valid configuration: TLS files that exist and an
        ``https`` peer URL, unless ``insecure_http``.

        Raises
        ------
        InvalidParameters
        """
        if self.insecure_http:
            return
        missing = [f"[tls] {n}" for n, v in (("ca", self.tls_ca), ("cert", self.tls_cert), ("key", self.tls_key))
                   if v is None or not v.is_file()]
        if missing:
            raise InvalidParameters(f"TLS is required: {', '.join(missing)} missing (create them with "
                                    "'secemb admin init', or serve plain HTTP on loopback with --insecure-http)")
        if not self.peer_url.startswith("https://"):
            raise InvalidParameters(f"peer_url must be https:// when serving TLS, got {self.peer_url!r}")

    def peer_tls(self) -> ssl.SSLContext | None:
        """Server 0's client context for server 1 (pins the CA, presents server 0's
        certificate: mutual TLS); ``None`` without ``[tls]`` files (plain HTTP)."""
        if self.tls_ca is None:
            return None
        return client_context(self.tls_ca, self.tls_cert, self.tls_key)

    def protocol_description(self) -> dict[str, Any]:
        """The protocol as the round document announces it (``[protocol]`` less the backend:
        name, layout options, ``options``), what :func:`~secemb.protocols.factory.make_protocol`
        builds it from on the servers and on the devices."""
        return {"name": self.protocol, "layout": self.layout, "relay": self.relay, "expansion": self.expansion,
                "layout_seed": self.layout_seed, "options": self.protocol_options}

    def make_protocol(self) -> Protocol:
        """The protocol of :meth:`protocol_description`, on ``[protocol] backend`` (with
        ``workers``) unless that is ``serial``.

        Raises
        ------
        InvalidParameters
            The protocol refuses the name, an option or a value; the options repeat a layout
            option; an unknown backend.
        """
        backend = None if self.backend == "serial" else make_backend(self.backend, self.workers)
        return make_protocol(self.protocol_description(), backend=backend)

    def make_model(self) -> RecModel:
        """The model ``get_model(model, **model_hparams)``; with ``item_features`` set, built
        with the public item features read from that file (``features=``); with
        ``frozen_table`` set (GREC's denoiser), with the recommender's public table read from
        that file (``frozen_table=``).

        Raises
        ------
        InvalidParameters
            Unknown model or hyperparameter; an unreadable features or table file, or one that
            covers another number of items than ``num_items``; ``frozen_table`` for another
            model than the denoiser.
        """
        if self.frozen_table is not None:
            return self._model_with_frozen_table()
        if self.item_features is None:
            return get_model(self.model, **self.model_hparams)
        features = load_item_features(self.item_features)
        if features.num_items != self.num_items:
            raise InvalidParameters(
                f"item_features {self.item_features} cover {features.num_items} items, "
                f"num_items is {self.num_items}"
            )
        return get_model(self.model, features=features, **self.model_hparams)

    def _model_with_frozen_table(self) -> RecModel:
        """GREC's denoiser built with the recommender's public table read from ``frozen_table``."""
        if self.model != DENOISER:
            raise InvalidParameters(f"frozen_table is for model {DENOISER!r} (its frozen columns), not {self.model!r}")
        assert self.frozen_table is not None  # the caller checked
        try:
            table = load_frozen_table(self.frozen_table)
        except InvalidMessage as exc:
            raise InvalidParameters(f"frozen_table: {exc}") from None
        if table.shape[0] != self.num_items:
            raise InvalidParameters(f"frozen_table {self.frozen_table} has {table.shape[0]} rows, "
                                    f"num_items is {self.num_items}")
        return get_model(self.model, frozen_table=table, **self.model_hparams)

    def adam(self) -> AdamConfig:
        """The devices' and the servers' Adam settings (``[training]`` lr, beta1, beta2, eps)."""
        return AdamConfig(self.lr, self.beta1, self.beta2, self.eps)

    def fixed_point(self) -> FixedPoint:
        """The fixed-point encoding of ``[training]`` ring_bits and frac_bits."""
        return FixedPoint(self.ring_bits, self.frac_bits)

    def shared_doc(self) -> dict[str, Any]:
        """The settings both servers must share (what devices also need to know)."""
        doc = {k: getattr(self, k) for k in _SHARED}
        doc["rating_range"] = list(self.rating_range)
        if self.dp_sigma:  # only under DP, so the fingerprints of existing state directories stay valid
            doc["dp_sigma"] = self.dp_sigma
            doc["dp_clip"] = self.dp_clip
        if self.inference_candidates is not None:  # only when set, so existing fingerprints stay valid
            doc["inference_candidates"] = sorted(self.inference_candidates)
        if self.item_features is not None:  # the content counts, not where each server keeps it
            doc["item_features_sha256"] = hashlib.sha256(self.item_features.read_bytes()).hexdigest()
        if self.frozen_table is not None:  # likewise
            doc["frozen_table_sha256"] = hashlib.sha256(self.frozen_table.read_bytes()).hexdigest()
        return doc

    def fingerprint(self) -> str:
        """SHA-256 of :meth:`shared_doc` (canonical JSON)."""
        text = json.dumps(self.shared_doc(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def replace(self, **changes: Any) -> ServerConfig:
        """A validated copy with ``changes`` (field names) applied."""
        return ServerConfig(**{name: getattr(self, name) for name in type(self).model_fields} | changes)


def _flatten(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section, values in doc.items():
        if section not in _SECTIONS:
            raise InvalidParameters(f"unknown config section [{section}]; known: {sorted(_SECTIONS)}")
        if not isinstance(values, dict):
            raise InvalidParameters(f"config section [{section}] must be a table")
        for key, value in values.items():
            if key not in _SECTIONS[section]:
                raise InvalidParameters(
                    f"unknown key {key!r} in [{section}]; known: {sorted(_SECTIONS[section])}"
                )
            out[_SECTIONS[section][key]] = value
    return out


def config_document(cfg: ServerConfig) -> dict[str, Any]:
    """The sectioned document of ``cfg`` (inverse of :func:`load_config`); secrets as hex."""
    doc: dict[str, dict[str, Any]] = {}
    for section, keys in _SECTIONS.items():
        for key, name in keys.items():
            value = getattr(cfg, name)
            if value is None:
                continue
            if isinstance(value, bytes):
                value = value.hex()
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            doc.setdefault(section, {})[key] = value
    return doc


def load_config(path: str | os.PathLike | None = None, **overrides: Any) -> ServerConfig:
    """Read a TOML (``.toml``) or JSON file, apply ``overrides`` (field names, ``None`` values
    ignored) and secrets from the environment (when the file has none), and validate.

    The precedence is the run's (:mod:`secemb.options`): ``overrides`` (``secemb serve``'s command
    line) > the file > the fields' defaults (those shared with a training run:
    :class:`~secemb.options.RunOptions`').

    Raises
    ------
    InvalidParameters
        Unreadable file, unknown key, missing or invalid value.
    """
    values: dict[str, Any] = {} if path is None else _flatten(read_table(path))
    party = overrides.get("party")
    if party is not None and "party" in values and values["party"] != party:
        raise InvalidParameters(f"the command line says party {party}, the config file says {values['party']}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    for name, env in SECRET_ENV.items():
        if name not in values and os.environ.get(env):
            values[name] = os.environ[env]
    missing = [n for n in ("party", "peer_url", "state_dir", "peer_secret", "admin_secret", "user_secret",
                           "num_items", "num_users") if n not in values]
    if missing:
        hint = ("" if path is not None else
                "; give --config FILE, the serverP.json that 'secemb admin init' (then 'pair') wrote "
                "(docs/deployment.md, 'Running it')")
        raise InvalidParameters(f"config is missing {', '.join(missing)}{hint}")
    try:
        return ServerConfig(**values)
    except TypeError as exc:
        raise InvalidParameters(f"bad config: {exc}") from None
