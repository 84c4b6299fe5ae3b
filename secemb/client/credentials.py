"""A device's credentials file: what ``secemb admin add-devices`` writes for one device and
``secemb client --credentials`` reads.

JSON, written 0600, holding only what the device needs -- never a server's master secret::

    {"format": 1, "user": 17,
     "server0": "https://s0.example:8700", "server1": "https://s1.example:8701",
     "ca": "/path/to/ca.pem",            # the deployment's CA (both servers chain to it)
     "key0": "<hex>", "key1": "<hex>",   # the device's HMAC keys at server 0 and server 1
     "model": {"name": "mf", "hparams": {...}}, "ring_bits": 32}   # public: for the count phase

The keys are per device (``HMAC(users_secret_b, "secemb-user-key" || u)`` at server ``b``,
:func:`~secemb.transport.signing.user_key`), so a leaked file exposes that device only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secemb.errors import InvalidParameters

__all__ = ["DeviceCredentials"]

_FORMAT = 1


@dataclass(frozen=True)
class DeviceCredentials:
    """Device ``user``'s server URLs, the CA to verify them with, its two HMAC keys, and the
    deployment's public model spec and ring (what the count phase needs before any round)."""

    user: int
    urls: tuple[str, str]
    keys: tuple[bytes, bytes]
    ca: Path | None
    model: dict[str, Any] | None = None
    ring_bits: int = 32

    def save(self, path: str | os.PathLike) -> Path:
        """Write the file at ``path``, readable by its owner only (0600 from the first byte)."""
        doc = {"format": _FORMAT, "user": self.user, "server0": self.urls[0], "server1": self.urls[1],
               "ca": None if self.ca is None else str(self.ca), "key0": self.keys[0].hex(),
               "key1": self.keys[1].hex(), "model": self.model, "ring_bits": self.ring_bits}
        path = Path(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode())
        finally:
            os.close(fd)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> DeviceCredentials:
        """Read a credentials file.

        Raises
        ------
        InvalidParameters
            Unreadable, not this format, or a field missing or malformed (the message names it).
        """
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise InvalidParameters(f"credentials {path}: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise InvalidParameters(f"credentials {path}: not a format-{_FORMAT} device credentials file")
        try:
            user = doc["user"]
            if isinstance(user, bool) or not isinstance(user, int) or user < 0:
                raise ValueError(f"user must be an int >= 0, got {user!r}")
            urls = (str(doc["server0"]), str(doc["server1"]))
            keys = (bytes.fromhex(doc["key0"]), bytes.fromhex(doc["key1"]))
            if min(len(k) for k in keys) < 16:
                raise ValueError("key0 and key1 must be hex of >= 16 bytes")
            ca = None if doc.get("ca") is None else Path(doc["ca"])
            model = doc.get("model")
            if model is not None and not (isinstance(model, dict) and isinstance(model.get("name"), str)):
                raise ValueError(f"model must be an object with a name, got {model!r}")
            ring_bits = doc.get("ring_bits", 32)
            if ring_bits not in (32, 64):
                raise ValueError(f"ring_bits must be 32 or 64, got {ring_bits!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidParameters(f"credentials {path}: {exc}") from None
        return cls(user, urls, keys, ca, model, ring_bits)
