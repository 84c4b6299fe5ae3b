"""Configuration of one server process: a TOML or JSON file plus command-line overrides.

The file has sections; every key is optional except where noted (see ``docs/deployment.md``
for a full example)::

    [server]    party (required), host, port, peer_url (required), state_dir (required),
                auth_window_s, peer_timeout_s, max_body_bytes, read_timeout_s, max_connections,
                insecure_http (plain HTTP, loopback only; default false: TLS)
    [tls]       ca, cert, key -- PEM files written by ``secemb admin init`` (required unless
                insecure_http)
    [secrets]   peer, admin, users   -- hex, >= 16 bytes each (required; or the environment
                variables SECEMB_PEER_SECRET, SECEMB_ADMIN_SECRET, SECEMB_USER_SECRET)
    [protocol]  name, layout, relay, expansion, layout_seed, backend, workers
    [model]     name, hparams (table: the model's constructor spec), num_items (required),
                num_users (required), rating_range, init_seed, item_features (path of the
                public item features of a feature model, written by
                ``secemb.data.features.save_item_features``)
    [training]  lr, beta1, beta2, eps, lazy_adam, ring_bits, frac_bits, m_prime, alpha
    [rounds]    deadline_s, min_users
    [privacy]   sigma (central DP: each server's noise scale in ring units; docs/security.md)

The two servers' files must agree on ``[protocol]``, ``[model]`` and ``[training]`` (server 1
checks a fingerprint of them when server 0 opens a round) and on the peer secret.  Unknown
sections or keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secemb.errors import InvalidParameters

__all__ = ["DEFAULT_MIN_USERS", "MIN_USERS_FLOOR", "ServerConfig", "load_config", "SECRET_ENV"]

#: the default floor on the number of users in any aggregate a server releases
#: (``[rounds] min_users``; docs/security.md, "The floor")
DEFAULT_MIN_USERS = 10
#: the lowest floor a configuration may set: an aggregate of one user is that user's data
MIN_USERS_FLOOR = 2

SECRET_ENV = {
    "peer_secret": "SECEMB_PEER_SECRET",
    "admin_secret": "SECEMB_ADMIN_SECRET",
    "user_secret": "SECEMB_USER_SECRET",
}

_LOOPBACK = ("127.0.0.1", "::1", "localhost")

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
        "alpha": "alpha",
    },
    "rounds": {"deadline_s": "deadline_s", "min_users": "min_users"},
    "privacy": {"sigma": "dp_sigma"},
}

#: fields both servers must agree on (hashed into the fingerprint)
_SHARED = (
    "protocol", "layout", "relay", "expansion", "layout_seed", "protocol_options", "model", "model_hparams",
    "num_items",
    "num_users", "rating_range", "init_seed", "lr", "beta1", "beta2", "eps", "lazy_adam", "ring_bits",
    "frac_bits", "alpha",
)


def _secret(name: str, value: Any) -> bytes:
    if isinstance(value, bytes):
        raw = value
    elif isinstance(value, str):
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise InvalidParameters(f"secret {name} must be hex") from None
    else:
        raise InvalidParameters(f"secret {name} must be a hex string, got {type(value).__name__}")
    if len(raw) < 16:
        raise InvalidParameters(f"secret {name} must have >= 16 bytes, got {len(raw)}")
    return raw


@dataclass(frozen=True)
class ServerConfig:
    """Everything a server process needs (validated on creation)."""

    party: int
    peer_url: str
    state_dir: Path
    peer_secret: bytes = field(repr=False)
    admin_secret: bytes = field(repr=False)
    user_secret: bytes = field(repr=False)
    num_items: int = 0
    num_users: int = 0
    host: str = "127.0.0.1"
    port: int = 8700
    auth_window_s: float = 120.0
    peer_timeout_s: float = 60.0
    max_body_bytes: int = 256 * 2**20
    #: seconds a connection may take to send a request's headers, and a request its body
    read_timeout_s: float = 10.0
    #: concurrent connections and requests; beyond, uvicorn answers 503 at once
    max_connections: int = 256
    #: plain HTTP instead of TLS (refused unless ``host`` is a loopback address)
    insecure_http: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    protocol: str = "secemb"
    layout: str = "cuckoo"
    relay: bool = True
    expansion: float = 1.25
    layout_seed: int = 0
    backend: str = "serial"
    workers: int | None = None
    model: str = "mf"
    model_hparams: dict[str, Any] = field(default_factory=dict)
    protocol_options: dict[str, Any] = field(default_factory=dict)
    #: ``.npz`` of the public item features (FM, DeepFM); see :meth:`make_model`
    item_features: Path | None = None
    rating_range: tuple[float, float] = (1.0, 5.0)
    init_seed: int = 0
    lr: float = 0.025
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    lazy_adam: bool = True
    ring_bits: int = 32
    frac_bits: int = 16
    m_prime: int | None = None
    alpha: float = 2.5
    deadline_s: float = 60.0
    #: the floor: this server releases no count, aggregate share or user set of fewer users
    min_users: int = DEFAULT_MIN_USERS
    #: central DP: the scale (ring units) of the discrete Gaussian this server adds to every
    #: coordinate of its aggregate share each round (0: none; secemb.privacy.plan_dp)
    dp_sigma: float = 0.0

    def __post_init__(self) -> None:
        def is_int(x: object) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        if self.party not in (0, 1) or isinstance(self.party, bool):
            raise InvalidParameters(f"party must be 0 or 1, got {self.party!r}")
        for name in ("peer_secret", "admin_secret", "user_secret"):
            object.__setattr__(self, name, _secret(name, getattr(self, name)))
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        if not isinstance(self.peer_url, str) or not self.peer_url.startswith(("http://", "https://")):
            raise InvalidParameters(f"peer_url must be an http(s) URL, got {self.peer_url!r}")
        if not is_int(self.num_items) or self.num_items < 1:
            raise InvalidParameters(f"num_items must be an int >= 1, got {self.num_items!r}")
        if not is_int(self.num_users) or self.num_users < 1:
            raise InvalidParameters(f"num_users must be an int >= 1, got {self.num_users!r}")
        if not is_int(self.port) or not 0 <= self.port < 65536:
            raise InvalidParameters(f"port must be in [0, 65536), got {self.port!r}")
        if not isinstance(self.insecure_http, bool):
            raise InvalidParameters(f"insecure_http must be true or false, got {self.insecure_http!r}")
        if self.insecure_http and self.host not in _LOOPBACK:
            raise InvalidParameters(f"insecure_http binds loopback only ({', '.join(_LOOPBACK)}), got host "
                                    f"{self.host!r}; give [tls] files for any other address")
        for name in ("tls_ca", "tls_cert", "tls_key"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        if not is_int(self.max_connections) or self.max_connections < 8:
            raise InvalidParameters(f"max_connections must be an int >= 8, got {self.max_connections!r}")
        for name in ("auth_window_s", "peer_timeout_s", "deadline_s", "read_timeout_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InvalidParameters(f"{name} must be a positive number, got {v!r}")
        if not is_int(self.max_body_bytes) or self.max_body_bytes < 1024:
            raise InvalidParameters(f"max_body_bytes must be an int >= 1024, got {self.max_body_bytes!r}")
        if self.m_prime is not None and (not is_int(self.m_prime) or not 1 <= self.m_prime <= self.num_items):
            raise InvalidParameters(f"m_prime must be None or in [1, num_items], got {self.m_prime!r}")
        if not is_int(self.min_users) or self.min_users < MIN_USERS_FLOOR:
            raise InvalidParameters(f"min_users must be an int >= {MIN_USERS_FLOOR}, got {self.min_users!r}")
        if not (isinstance(self.dp_sigma, (int, float)) and math.isfinite(self.dp_sigma) and self.dp_sigma >= 0):
            raise InvalidParameters(f"privacy sigma must be a finite number >= 0, got {self.dp_sigma!r}")
        if not is_int(self.init_seed) or self.init_seed < 0:
            raise InvalidParameters(f"init_seed must be an int >= 0, got {self.init_seed!r}")
        lo, hi = (float(x) for x in self.rating_range)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise InvalidParameters(f"rating_range must be (lo, hi) with lo < hi, got {self.rating_range!r}")
        object.__setattr__(self, "rating_range", (lo, hi))
        if not isinstance(self.protocol_options, dict):
            raise InvalidParameters("protocol options must be a table")
        if not isinstance(self.model_hparams, dict):
            raise InvalidParameters("model hparams must be a table")
        if self.item_features is not None:
            object.__setattr__(self, "item_features", Path(self.item_features))
        # the objects below validate the remaining fields
        self.make_protocol()
        self.make_model()
        self.adam()
        self.fixed_point()

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

    def peer_tls(self):  # noqa: ANN201 - ssl.SSLContext | None
        """Server 0's client context for server 1 (pins the CA, presents server 0's
        certificate: mutual TLS); ``None`` without ``[tls]`` files (plain HTTP)."""
        if self.tls_ca is None:
            return None
        from secemb.server.tls import client_context

        return client_context(self.tls_ca, self.tls_cert, self.tls_key)

    def make_protocol(self):  # noqa: ANN201 - Protocol
        from secemb.protocols import get_protocol

        opts: dict[str, Any] = {"layout": self.layout, "relay": self.relay, "expansion": self.expansion,
                                "layout_seed": self.layout_seed, **self.protocol_options}
        if self.backend != "serial":
            from secemb.protocols.backends import make_backend

            opts["backend"] = make_backend(self.backend, self.workers)
        return get_protocol(self.protocol, **opts)

    def make_model(self):  # noqa: ANN201 - RecModel
        """The model ``get_model(model, **model_hparams)``; with ``item_features`` set, built
        with the public item features read from that file (``features=``).

        Raises
        ------
        InvalidParameters
            Unknown model or hyperparameter; an unreadable features file, or one that covers
            another number of items than ``num_items``.
        """
        from secemb.models import get_model

        if self.item_features is None:
            return get_model(self.model, **self.model_hparams)
        from secemb.data.features import load_item_features

        features = load_item_features(self.item_features)
        if features.num_items != self.num_items:
            raise InvalidParameters(
                f"item_features {self.item_features} cover {features.num_items} items, "
                f"num_items is {self.num_items}"
            )
        return get_model(self.model, features=features, **self.model_hparams)

    def adam(self):  # noqa: ANN201 - AdamConfig
        from secemb.models.optim import AdamConfig

        return AdamConfig(self.lr, self.beta1, self.beta2, self.eps)

    def fixed_point(self):  # noqa: ANN201 - FixedPoint
        from secemb.ring import FixedPoint

        return FixedPoint(self.ring_bits, self.frac_bits)

    def shared_doc(self) -> dict[str, Any]:
        """The settings both servers must share (what devices also need to know)."""
        doc = {k: getattr(self, k) for k in _SHARED}
        doc["rating_range"] = list(self.rating_range)
        if self.dp_sigma:  # only under DP, so the fingerprints of existing state directories stay valid
            doc["dp_sigma"] = self.dp_sigma
        if self.item_features is not None:  # the content counts, not where each server keeps it
            doc["item_features_sha256"] = hashlib.sha256(self.item_features.read_bytes()).hexdigest()
        return doc

    def fingerprint(self) -> str:
        """SHA-256 of :meth:`shared_doc` (canonical JSON)."""
        text = json.dumps(self.shared_doc(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def replace(self, **changes: Any) -> ServerConfig:
        return dataclasses.replace(self, **changes)


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


def _read(path: str | os.PathLike) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise InvalidParameters(f"cannot read config file {p}: {exc}") from None
    try:
        doc = tomllib.loads(text.decode()) if p.suffix == ".toml" else json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "TOML" if p.suffix == ".toml" else "JSON"
        raise InvalidParameters(f"config file {p} is not valid {kind}: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidParameters(f"config file {p} must hold a table")
    return _flatten(doc)


def load_config(path: str | os.PathLike | None = None, **overrides: Any) -> ServerConfig:
    """Read a TOML (``.toml``) or JSON file, apply ``overrides`` (field names, ``None`` values
    ignored) and secrets from the environment (when the file has none), and validate.

    Raises
    ------
    InvalidParameters
        Unreadable file, unknown key, missing or invalid value.
    """
    values: dict[str, Any] = {} if path is None else _read(path)
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
        raise InvalidParameters(f"config is missing {', '.join(missing)}")
    if "rating_range" in values:
        values["rating_range"] = tuple(values["rating_range"])
    try:
        return ServerConfig(**values)
    except TypeError as exc:
        raise InvalidParameters(f"bad config: {exc}") from None
