"""A device's credentials: the half each server's operator issues (``secemb admin add-devices``
in that operator's half of the deployment), and the whole file the device merges from its two
halves (``secemb credentials merge``) and ``secemb client --credentials`` reads.

Each operator knows only its own server's device-key secret, so each issues only its own
half; no one but the device holds both keys.  JSON, written 0600, never a server's master
secret.  A half (:class:`DeviceHalf`)::

    {"format": 2, "kind": "device-half", "party": 1, "user": 17,
     "url": "https://s1.example:8701",
     "ca": "/path/to/server1-ca.pem",      # server 1's operator's CA: pins server 1 only
     "key": "<hex>",                       # the device's HMAC key at server 1
     "model": {"name": "mf", "hparams": {...}}, "ring_bits": 32}   # public: for the count phase

The whole file (:class:`DeviceCredentials`)::

    {"format": 2, "user": 17,
     "server0": "https://s0.example:8700", "server1": "https://s1.example:8701",
     "ca0": "/path/to/server0-ca.pem", "ca1": "/path/to/server1-ca.pem",
     "key0": "<hex>", "key1": "<hex>", "model": {...}, "ring_bits": 32}

The keys are per device (``HMAC(users_secret_b, "secemb-user-key" || u)`` at server ``b``,
:func:`~secemb.transport.signing.user_key`), so a leaked file exposes that device only, and a
half exposes that device at one server only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secemb.errors import InvalidParameters, check_int
from secemb.outputs import atomic_write_bytes
from secemb.transport.signing import parse_secret

__all__ = ["DeviceCredentials", "DeviceHalf", "merge_halves"]

_FORMAT = 2
_HALF = "device-half"


def _write_private(path: str | os.PathLike, doc: dict[str, Any]) -> Path:
    """Write ``doc`` as JSON at ``path``, readable by its owner only (0600 from the first byte),
    atomically (:func:`secemb.outputs.atomic_write_bytes`; raises its ``OSError``)."""
    return atomic_write_bytes(path, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode(), mode=0o600)


def _read(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """The JSON object of a format-2 ``what`` file (raises ``InvalidParameters``)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidParameters(f"credentials {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise InvalidParameters(f"credentials {path}: not a format-{_FORMAT} {what} file")
    return doc


def _user(doc: dict[str, Any]) -> int:
    return check_int("user", doc["user"], low=0)


def _key(doc: dict[str, Any], name: str) -> bytes:
    return parse_secret(name, doc[name])


def _ca(value: Any) -> Path | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"a CA must be a path or null, got {value!r}")
    return None if value is None else Path(value)


def _public(doc: dict[str, Any]) -> tuple[dict[str, Any] | None, int]:
    """``(model, ring_bits)``: the deployment's public settings in ``doc``."""
    model = doc.get("model")
    if model is not None and not (isinstance(model, dict) and isinstance(model.get("name"), str)):
        raise ValueError(f"model must be an object with a name, got {model!r}")
    ring_bits = doc.get("ring_bits", 32)
    if ring_bits not in (32, 64) or isinstance(ring_bits, bool):
        raise ValueError(f"ring_bits must be 32 or 64, got {ring_bits!r}")
    return model, ring_bits


@dataclass(frozen=True)
class DeviceHalf:
    """What server ``party``'s operator issues to device ``user``: the server's URL, its
    operator's CA (which pins that server only), the device's HMAC key at that server, and the
    deployment's public model spec and ring."""

    party: int
    user: int
    url: str
    key: bytes = field(repr=False)  # a secret: never in a repr
    ca: Path | None
    model: dict[str, Any] | None = None
    ring_bits: int = 32

    def save(self, path: str | os.PathLike) -> Path:
        """Write the half at ``path`` (0600)."""
        return _write_private(path, {
            "format": _FORMAT, "kind": _HALF, "party": self.party, "user": self.user, "url": self.url,
            "ca": None if self.ca is None else str(self.ca), "key": self.key.hex(), "model": self.model,
            "ring_bits": self.ring_bits})

    @classmethod
    def load(cls, path: str | os.PathLike) -> DeviceHalf:
        """Read a half.

        Raises
        ------
        InvalidParameters
            Unreadable, not a device half, or a field missing or malformed (the message names it).
        """
        doc = _read(path, "device credentials half")
        if doc.get("kind") != _HALF:
            raise InvalidParameters(f"credentials {path}: not a device half (kind {doc.get('kind')!r}); the "
                                    f"halves come from each server's operator ('secemb admin add-devices')")
        try:
            party = doc["party"]
            if party not in (0, 1) or isinstance(party, bool):
                raise ValueError(f"party must be 0 or 1, got {party!r}")
            if not isinstance(doc["url"], str):
                raise ValueError(f"url must be a string, got {doc['url']!r}")
            return cls(party, _user(doc), doc["url"], _key(doc, "key"), _ca(doc.get("ca")), *_public(doc))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidParameters(f"credentials {path}: {exc}") from None


@dataclass(frozen=True)
class DeviceCredentials:
    """Device ``user``'s server URLs, each server's CA (``cas[b]`` pins server ``b`` only), its
    two HMAC keys, and the deployment's public model spec and ring (what the count phase needs
    before any round)."""

    user: int
    urls: tuple[str, str]
    keys: tuple[bytes, bytes] = field(repr=False)  # secrets: never in a repr
    cas: tuple[Path | None, Path | None] = (None, None)
    model: dict[str, Any] | None = None
    ring_bits: int = 32

    def save(self, path: str | os.PathLike) -> Path:
        """Write the file at ``path``, readable by its owner only (0600 from the first byte)."""
        return _write_private(path, {
            "format": _FORMAT, "user": self.user, "server0": self.urls[0], "server1": self.urls[1],
            **{f"ca{b}": None if ca is None else str(ca) for b, ca in enumerate(self.cas)},
            "key0": self.keys[0].hex(), "key1": self.keys[1].hex(), "model": self.model,
            "ring_bits": self.ring_bits})

    @classmethod
    def load(cls, path: str | os.PathLike) -> DeviceCredentials:
        """Read a credentials file.

        Raises
        ------
        InvalidParameters
            Unreadable, not this format (a half, too: merge the two first), or a field missing
            or malformed (the message names it).
        """
        doc = _read(path, "device credentials")
        if doc.get("kind") == _HALF:
            raise InvalidParameters(f"credentials {path}: one server's half only; merge it with the other "
                                    f"server's ('secemb credentials merge')")
        try:
            urls = (doc["server0"], doc["server1"])
            if not all(isinstance(u, str) for u in urls):
                raise ValueError(f"server0 and server1 must be strings, got {urls!r}")
            keys = (_key(doc, "key0"), _key(doc, "key1"))
            cas = (_ca(doc.get("ca0")), _ca(doc.get("ca1")))
            return cls(_user(doc), urls, keys, cas, *_public(doc))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidParameters(f"credentials {path}: {exc}") from None


def merge_halves(a: DeviceHalf, b: DeviceHalf) -> DeviceCredentials:
    """The device's credentials from its two halves, in either order: server 0's and server
    1's, for the same user, announcing the same model and ring.

    Raises
    ------
    InvalidParameters
        Not one half of each server, two users, or the operators announce different models or
        rings (the names and both values in the message).
    """
    if {a.party, b.party} != {0, 1}:
        raise InvalidParameters(f"give one half of each server, got halves of server {a.party} and server {b.party}")
    h0, h1 = (a, b) if a.party == 0 else (b, a)
    for name in ("user", "model", "ring_bits"):
        if getattr(h0, name) != getattr(h1, name):
            raise InvalidParameters(f"the halves disagree on {name}: server 0's says {getattr(h0, name)!r}, "
                                    f"server 1's {getattr(h1, name)!r}")
    return DeviceCredentials(h0.user, (h0.url, h1.url), (h0.key, h1.key), (h0.ca, h1.ca), h0.model, h0.ring_bits)
