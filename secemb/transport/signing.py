"""Request signing (spec: ``docs/deployment.md``, "Authentication"): the canonical string a
signature covers, the headers that carry it, and the per-device keys.  No HTTP library is
needed here: the server's verifier (:mod:`secemb.server.auth`) and the client
(:mod:`secemb.transport.network`) both build on it."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import struct
import time

from secemb.errors import InvalidParameters, check_int

__all__ = [
    "ALGORITHM",
    "HEADER_KEY_ID",
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "SECRET_BYTES",
    "canonical_request",
    "parse_secret",
    "sign_headers",
    "user_key",
]

ALGORITHM = "SECEMB-HMAC-SHA256"
HEADER_KEY_ID = "X-Secemb-Key-Id"
HEADER_TIMESTAMP = "X-Secemb-Timestamp"
HEADER_NONCE = "X-Secemb-Nonce"
HEADER_SIGNATURE = "X-Secemb-Signature"
_USER_KEY_LABEL = b"secemb-user-key"

#: the fewest bytes of a secret that keys HMAC-SHA256 (a server's peer, admin or user secret, a
#: device's key): the hash's output length, below which RFC 2104 calls a key insecure
SECRET_BYTES = 32

_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")


def parse_secret(name: str, value: object) -> bytes:
    """``value`` as a secret: ``bytes``, or hex digits of them (nothing else: no spaces, no
    ``0x``), at least :data:`SECRET_BYTES` bytes.  Every secret a server or device reads
    (configuration file, environment, deployment or credentials file) goes through here.

    Raises
    ------
    InvalidParameters
        Otherwise, naming ``name`` and what is wrong, never the value.
    """
    if isinstance(value, str):
        if not _HEX.fullmatch(value):
            raise InvalidParameters(f"{name} must be hex: an even number of digits 0-9a-f, nothing else (no spaces, "
                                    f"no 0x)")
        value = bytes.fromhex(value)
    elif not isinstance(value, bytes):
        raise InvalidParameters(f"{name} must be a hex string, got {type(value).__name__}")
    if len(value) < SECRET_BYTES:
        raise InvalidParameters(f"{name} must be >= {SECRET_BYTES} bytes ({2 * SECRET_BYTES} hex digits), got "
                                f"{len(value)}")
    return value


def user_key(user_secret: bytes, user_id: int) -> bytes:
    """The HMAC key of device ``user_id`` at a server whose user secret is ``user_secret``
    (at least :data:`SECRET_BYTES` bytes)."""
    user_id = check_int("user id", user_id, low=0, high=2**63 - 1)
    if len(user_secret) < SECRET_BYTES:
        raise InvalidParameters(f"user secret must have >= {SECRET_BYTES} bytes, got {len(user_secret)}")
    return hmac.new(user_secret, _USER_KEY_LABEL + struct.pack("<Q", user_id), hashlib.sha256).digest()


def canonical_request(
    key_id: str, method: str, path: str, query: str, timestamp_ms: int, nonce: str, body: bytes
) -> bytes:
    """The byte string a request's signature covers (see the module docstring)."""
    digest = hashlib.sha256(body).hexdigest()
    fields = (ALGORITHM, key_id, method.upper(), path, query, str(int(timestamp_ms)), nonce, digest)
    return "\n".join(fields).encode()


def sign_headers(
    key_id: str,
    key: bytes,
    method: str,
    path: str,
    query: str = "",
    body: bytes = b"",
    *,
    timestamp_ms: int | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """The authentication headers of one request."""
    ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
    nonce = secrets.token_hex(16) if nonce is None else nonce
    mac = hmac.new(key, canonical_request(key_id, method, path, query, ts, nonce, body), hashlib.sha256)
    return {
        HEADER_KEY_ID: key_id,
        HEADER_TIMESTAMP: str(ts),
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: mac.hexdigest(),
    }
