"""Request authentication on the server (the scheme: :mod:`secemb.transport.network`).

:class:`Verifier` checks a request's four headers and its HMAC and returns the
:class:`Principal` who signed it.  Every failure raises :class:`AuthError` (HTTP 401) with the
same kind of message whatever the reason, except that the reason is named for the operator's
log.  A nonce is remembered for twice the timestamp window, so a captured request cannot be
replayed; one whose timestamp left the window is refused anyway.  After a restart the nonce
memory is empty, so a server also refuses every request signed before it started (issue 12,
finding 7).  A timestamp may run ahead of the server's clock by :data:`MAX_FUTURE_S` at most
(not by the whole window), and the app acts on such a request only once its clock has reached
the timestamp (:meth:`Verifier.ahead_s`): every request a server acted on was signed before it
stopped, so none is accepted again after a restart (issue 33: one signed 60 s ahead before a
restart was accepted after it).  A request captured before a restart cannot be replayed after
it, within the window or not.  (Every state-changing request is moreover bound to a round or model version that the
restarted server no longer accepts twice; see ``docs/deployment.md``.)  Clients sign each
attempt afresh, so a retry after a restart passes; a client whose clock lags the server's by
``d`` seconds is refused for ``d`` seconds after a restart -- keep clocks synchronized.

Resources (issue 12, finding 4).  Everything that needs no body -- key id, timestamp window,
and whether the nonce was already used -- is checked by :meth:`Verifier.principal_of` before
the app reads a body.  A device key id of a user id at or beyond ``num_users`` passes that
check like a known one and is refused only at the signature (issue 33, "413-before-401"): no
answer before the signature (a 413 for a body over the limit, a 408, a 503) tells a known
device id from an unknown one, so the number of devices cannot be found by trying ids.
Nonces enter memory only after a valid signature, each device key is rate-limited (a token
bucket: ``rate_per_s`` requests a second, bursts of ``4 * rate_per_s``; beyond,
:class:`RateLimited`, HTTP 429) -- not the peer server, whose calls grow with the round's
devices (a server that floods its peer only denies service, which the threat model does not
protect), nor the server's own operator --, and the memory holds at most
``max_nonces`` unexpired nonces per credential class (devices, the operator, the peer server): a
full memory refuses new requests of that class (:class:`Busy`, HTTP 503) rather than forgetting a
nonce that could still be replayed.  Classes are apart (issue 33): devices that fill theirs -- 8
keys within their rate limits filled a shared 1,024-entry memory in 3.2 s -- never make the
operator's or the peer's calls busy.
"""

from __future__ import annotations

import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from secemb.errors import SecembError
from secemb.server.parsing import ascii_int
from secemb.transport.signing import (
    HEADER_KEY_ID,
    HEADER_NONCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    canonical_request,
    user_key,
)

__all__ = ["AuthError", "Busy", "Forbidden", "Principal", "RateLimited", "Verifier"]

_USER = "user:"
_NONCE = re.compile(r"[0-9a-f]{16,64}\Z")
_SIG = re.compile(r"[0-9a-f]{64}\Z")
_TS_END = 10**16  # timestamps are milliseconds of at most 16 digits
#: how far a request's timestamp may run ahead of the server's clock, seconds (clock skew; at most the window)
MAX_FUTURE_S = 2.0
_USER_ID_END = 2**63  # what a device key id may name (user_key's range); num_users bounds the known ones


class AuthError(SecembError):
    """Missing, malformed, stale, replayed or wrongly signed credentials (HTTP 401)."""


class Forbidden(SecembError):
    """Valid credentials of a principal that may not call this endpoint (HTTP 403)."""


class RateLimited(SecembError):
    """An authenticated key id sent requests faster than its rate limit (HTTP 429)."""


class Busy(SecembError):
    """The server is at a resource bound (nonce memory, concurrent body reads); retry later
    (HTTP 503)."""


@dataclass(frozen=True)
class Principal:
    """Who signed a request: ``kind`` is ``"peer"``, ``"admin"`` or ``"user"``."""

    kind: str
    key_id: str
    user_id: int | None = None


class Verifier:
    """Verifies signed requests for server ``party``.

    Parameters
    ----------
    party: this server.  Server 1 accepts server 0's key id (``server0``) on its peer
        endpoints; server 0 accepts no server's key: server 1 never calls it, so a request
        signed ``server1`` is refused at server 0 like an unknown key.
    peer_secret, admin_secret, user_secret: the HMAC secrets.
    num_users: user ids must lie in ``[0, num_users)``.
    window_s: how old a request's timestamp may be, seconds (how far ahead: ``future_s``).
    future_s: how far a timestamp may run ahead of this clock, seconds (at most ``window_s``).
    rate_per_s: requests a second each device key may sign (bursts up to four times that).
    max_nonces: unexpired nonces held at most (memory: about 220 bytes each, see docs/deployment.md).
    not_before_ms: requests signed earlier (Unix ms) are refused; default: when this verifier
        was made, i.e. when the server started.
    """

    def __init__(
        self, party: int, peer_secret: bytes, admin_secret: bytes, user_secret: bytes, num_users: int,
        window_s: float = 120.0, *, rate_per_s: float = 50.0, max_nonces: int = 262_144,
        not_before_ms: int | None = None, future_s: float = MAX_FUTURE_S,
    ) -> None:
        self.party = party
        self._peer_id = f"server{1 - party}"
        self._peer, self._admin, self._users = peer_secret, admin_secret, user_secret
        self.num_users = num_users
        self.window_ms = int(window_s * 1000)
        self.future_ms = int(min(future_s, window_s) * 1000)
        self.not_before_ms = int(time.time() * 1000) if not_before_ms is None else int(not_before_ms)
        #: per credential class (Principal.kind): "key id/nonce" -> expiry (ms), in insertion order
        self._nonces: dict[str, OrderedDict[str, int]] = {k: OrderedDict() for k in ("peer", "admin", "user")}
        self._lock = threading.Lock()
        self.rate_per_s, self.burst, self.max_nonces = float(rate_per_s), 4.0 * float(rate_per_s), int(max_nonces)
        self._buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, monotonic time)
        #: the key an unknown device id's signature is checked against (and fails): the same work as a known one's
        self._decoy = secrets.token_bytes(32)

    def principal_of(self, headers: Mapping[str, str]) -> tuple[Principal, bytes | None]:
        """Check what needs no body (headers well formed, timestamp in the window, key id
        of a known kind, nonce not used yet); return the claimed principal and its key --
        ``None`` for a device id at or beyond ``num_users``, which :meth:`verify` refuses only
        once the body is read, as it refuses a bad signature.

        Raises
        ------
        AuthError
        """
        key_id = headers.get(HEADER_KEY_ID)
        if key_id is None:
            raise AuthError("missing credentials")
        ts, nonce, sig = (headers.get(h) for h in (HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE))
        if ts is None or nonce is None or sig is None:
            raise AuthError("incomplete credentials")
        if not (_NONCE.match(nonce) and _SIG.match(sig)):
            raise AuthError("malformed credentials")
        now = int(time.time() * 1000)
        signed = _timestamp(ts)
        if now - signed > self.window_ms or signed - now > self.future_ms:
            raise AuthError("request timestamp outside the accepted window")
        if signed < self.not_before_ms:
            raise AuthError("request signed before this server started (a replay across a restart?)")
        principal, key = self._claimed(key_id)
        with self._lock:
            if f"{key_id}/{nonce}" in self._nonces[principal.kind]:
                raise AuthError("replayed request (nonce already used)")
        return principal, key

    def _claimed(self, key_id: str) -> tuple[Principal, bytes | None]:
        if key_id == self._peer_id and self.party == 1:  # server 0 calls server 1, never the reverse
            return Principal("peer", key_id), self._peer
        if key_id == "admin":
            return Principal("admin", key_id), self._admin
        if key_id.startswith(_USER):
            u = ascii_int(key_id[len(_USER):], "the key id's user id", 0, _USER_ID_END, AuthError)
            return Principal("user", key_id, u), user_key(self._users, u) if u < self.num_users else None
        raise AuthError("unknown key id")

    def verify(
        self, headers: Mapping[str, str], method: str, path: str, query: str, body: bytes
    ) -> Principal:
        """Full check of a request (after its body has been read).

        Raises
        ------
        AuthError
        """
        principal, key = self.principal_of(headers)
        ts, nonce, sig = headers[HEADER_TIMESTAMP], headers[HEADER_NONCE], headers[HEADER_SIGNATURE]
        canonical = canonical_request(principal.key_id, method, path, query, _timestamp(ts), nonce, body)
        expected = hmac.new(self._decoy if key is None else key, canonical, "sha256")
        if not hmac.compare_digest(expected.hexdigest(), sig) or key is None:
            raise AuthError("bad signature" if key is not None else "unknown device id")
        self._admit(principal, nonce, _timestamp(ts))
        return principal

    def ahead_s(self, headers: Mapping[str, str]) -> float:
        """Seconds by which a verified request's timestamp runs ahead of this clock (0 if it
        does not; at most ``future_s``): the app waits that long before it acts on the request,
        so that it acts on no request signed after a moment it was still running."""
        return max(0, _timestamp(headers[HEADER_TIMESTAMP]) - int(time.time() * 1000)) / 1000.0

    def _admit(self, principal: Principal, nonce: str, ts: int) -> None:
        """Charge the signer's rate limit and remember its ``nonce`` in its class's memory until
        it can no longer be replayed (twice the window past its timestamp)."""
        now, tick, key_id = int(time.time() * 1000), time.monotonic(), principal.key_id
        with self._lock:
            nonces = self._nonces[principal.kind]
            while nonces and next(iter(nonces.values())) <= now:  # insertion order ~ expiry order
                nonces.popitem(last=False)
            entry = f"{key_id}/{nonce}"
            if entry in nonces:
                raise AuthError("replayed request (nonce already used)")
            limited = principal.kind == "user"  # devices only: the peer scales with them, the operator is ours
            tokens, last = self._buckets.get(key_id, (self.burst, tick))
            tokens = min(self.burst, tokens + (tick - last) * self.rate_per_s)
            if limited and tokens < 1.0:
                self._buckets[key_id] = (tokens, tick)
                raise RateLimited(f"{key_id} exceeds {self.rate_per_s:g} requests/s; retry later")
            if len(nonces) >= self.max_nonces:
                raise Busy(f"{self.max_nonces} {principal.kind} requests are within the replay window; retry later")
            if limited:
                self._buckets[key_id] = (tokens - 1.0, tick)
            nonces[entry] = max(now, ts) + 2 * self.window_ms

    def nonces_held(self, kind: str | None = None) -> int:
        """Nonces in memory, of one credential class or of all (for tests and status)."""
        with self._lock:
            return sum(len(v) for k, v in self._nonces.items() if kind in (None, k))


def _timestamp(raw: str) -> int:
    """The timestamp header's milliseconds (ASCII digits, at most 16 of them)."""
    return ascii_int(raw, f"header {HEADER_TIMESTAMP}", 0, _TS_END, AuthError)
