"""Simulated malicious devices for SecEmb (issue 34): named attacks on a device's messages.

A :class:`MaliciousUser` runs the honest :class:`~secemb.protocols.secemb.SecEmbUser` and
rewrites the bytes it sends, as a device that controls its own software would.  The attacks
(:data:`ATTACKS`):

* ``two-points``: one key's last-level seed correction word has a bit flipped (the same bytes
  to both servers), so the key pair evaluates to two non-zero points (its point and that
  point's sibling, with a pseudorandom value there) -- a key that is not a point function.
* ``inconsistent-keys``: server 1 gets the keys of another request (without relay: all of
  them; with relay: its roots), so the two servers' keys are not one DPF key pair.
* ``oversized-payload``: well-formed keys, but the uploaded rows are ``2^(k-2)`` above the
  clipped gradient at every real slot (a payload far beyond the clipping bound).
* ``wrapped-dense``: the dense gradient share is shifted by ``2^(k-1)`` (the sum wraps).
* ``random-bytes``: every request and upload body is uniformly random bytes of the right
  length (the frame header kept).

``two-points``, ``inconsistent-keys`` and ``random-bytes`` are what the servers' verification
(:meth:`~secemb.protocols.secemb.SecEmbServer.upload_digests` and the sketch proof,
:meth:`~secemb.protocols.secemb.SecEmbServer.verify_rejected`) rejects or the parsers refuse.
``oversized-payload`` and ``wrapped-dense`` need the payload bound check: bounded payloads, the
protocol option ``bound`` (:mod:`secemb.protocols.secemb.bounds`; ``secemb train --bound``),
under which such a device, which cannot prove its real upload small, proves the upload it would
have sent honestly instead: the servers' check rejects the lie and leaves it out (a device that
sent no proof would be left out too, as a dropout); without it (the default) they are not caught
(docs/security.md, "A malicious device: verified uploads").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from secemb import fss
from secemb.errors import InvalidParameters, RetrievalTampered
from secemb.fss.keys import HEADER_BYTES
from secemb.protocols.base import Protocol, RoundConfig
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.protocols.secemb.sizes import DIGEST_BYTES, SIGMA_BYTES, key_params
from secemb.protocols.wire import HEADER_BYTES as FRAME_BYTES
from secemb.randomness import RandomBytes

#: the prefix of a simulated device's behavior (:data:`secemb.sim.driver.Behavior`) that runs
#: an attack: ``"attack:two-points"``
ATTACK_BEHAVIOR = "attack:"

__all__ = ["ATTACKS", "ATTACK_BEHAVIOR", "AdversaryRecord", "MaliciousUser", "attack_behavior", "with_attack"]

ATTACKS = ("two-points", "inconsistent-keys", "oversized-payload", "wrapped-dense", "random-bytes")


def _flip_last_level(body: bytes, cfg: RoundConfig) -> bytes:
    """A key batch body (DPF header, roots, seed CWs, ...) with bit 1 of key 0's last-level
    seed correction word flipped."""
    depth = key_params(cfg).depth
    if depth == 0:
        raise InvalidParameters("a one-point domain has no correction word to corrupt")
    pos = HEADER_BYTES + 16 * cfg.slots + 16 * (depth - 1)
    return body[:pos] + bytes([body[pos] ^ 2]) + body[pos + 1 :]


class MaliciousUser(SecEmbUser):
    """A SecEmb device that runs ``attack`` (one of :data:`ATTACKS`) on its own messages."""

    def __init__(self, config: RoundConfig, attack: str, *, relay: bool = False, verify: bool = True,
                 bound_users: int | None = None, _rng: RandomBytes | None = None) -> None:
        if attack not in ATTACKS:
            raise InvalidParameters(f"attack must be one of {ATTACKS}, got {attack!r}")
        super().__init__(config, relay=relay, verify=verify, bound_users=bound_users, _rng=_rng)
        self.attack = attack

    def _random(self, message: bytes) -> bytes:
        return message[:FRAME_BYTES] + self._rng(len(message) - FRAME_BYTES)

    def _sending(self, messages: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
        m0, m1 = messages
        cfg = self.config
        # verified uploads: the request to server 1 ends with the device's proof seed sigma, kept as it is
        sigma = m1[len(m1) - SIGMA_BYTES :] if self.verify else b""
        end = len(m1) - len(sigma)
        if self.attack == "random-bytes":
            return self._random(m0), self._random(m1)
        if self.attack == "two-points":
            m0 = m0[:FRAME_BYTES] + _flip_last_level(m0[FRAME_BYTES:], cfg)
            if not self.relay:
                return m0, m1[:FRAME_BYTES] + _flip_last_level(m1[FRAME_BYTES:], cfg)
            # relay: commit server 1 to the altered shared part, so that the relay check passes
            digest = hashlib.sha256(fss.DPFKeys.from_bytes(m0[FRAME_BYTES:]).shared_bytes()).digest()
            return m0, m1[: end - DIGEST_BYTES] + digest + sigma
        if self.attack == "inconsistent-keys":
            assert self._items is not None  # set with the request
            other = SecEmbUser(cfg, relay=self.relay, verify=self.verify, bound_users=self.bound_users, _rng=self._rng)
            _, o1 = other.retrieval_request(self._items)  # the same items, another key generation
            if not self.relay:
                return m0, o1[:end] + sigma  # this device's own sigma (its proof's)
            roots = 16 * cfg.slots + FRAME_BYTES
            return m0, o1[:roots] + m1[roots:]  # another request's roots, this one's seeds and digest
        return m0, m1

    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
        """The honest result, or zero rows when the attack broke the retrieval (the device
        uploads anyway)."""
        try:
            return super().retrieval_result(reply0, reply1)
        except RetrievalTampered:
            self._tampered = False
            return np.zeros((self.config.slots, self.config.width), self.config.dtype)

    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes | None]:
        cfg = self.config
        honest = rows.astype(cfg.dtype)
        shift = cfg.dtype.type(0)
        if self.attack == "oversized-payload":
            assert self._real is not None  # set by retrieval_request
            rows = rows + np.where(self._real[:, None], cfg.dtype.type(1 << (cfg.ring_bits - 2)), cfg.dtype.type(0))
        elif self.attack == "wrapped-dense":
            shift = cfg.dtype.type(1 << (cfg.ring_bits - 1))
            dense = dense + shift
        u0, u1 = super().upload(rows.astype(cfg.dtype), dense.astype(cfg.dtype))
        if self._kept is not None and self.attack in ("oversized-payload", "wrapped-dense"):
            # bounded payloads: the device proves the upload it would have sent honestly (the rows
            # before the attack, server 1's dense share without the shift) -- a lie about what the
            # servers hold, which their check rejects (an honest prover of the real upload refuses)
            self._kept = replace(self._kept, rows=honest, dense1=self._kept.dense1 - shift)
        if self.attack == "random-bytes":
            return self._random(u0), None if u1 is None else self._random(u1)
        return u0, u1


class _AttackProtocol(SecEmbProtocol):
    """SecEmb whose users run ``attack`` (:func:`with_attack`)."""

    def __init__(self, base: SecEmbProtocol, attack: str) -> None:
        super().__init__(base.layout, base.relay, base.expansion, base.layout_seed, base.backend, base.verify,
                         base.bound, base.bound_users)
        self.attack = attack

    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> SecEmbUser:
        return MaliciousUser(config, self.attack, relay=self.relay, verify=self.verify, bound_users=self.bound_users,
                             _rng=_rng)


def with_attack(protocol: Protocol, attack: str) -> Protocol:
    """``protocol`` (SecEmb) with malicious users running ``attack`` (:data:`ATTACKS`).

    Raises
    ------
    InvalidParameters: not a SecEmb protocol, or an unknown attack.
    """
    if not isinstance(protocol, SecEmbProtocol):
        raise InvalidParameters(f"simulated attacks need --protocol secemb, got {protocol.name!r}")
    if attack not in ATTACKS:
        raise InvalidParameters(f"attack must be one of {ATTACKS}, got {attack!r}")
    return _AttackProtocol(protocol, attack)


def attack_behavior(attack: str, count: int) -> Callable[[int, int], str | None]:
    """The driver's per-(round, user) behavior of a run with ``count`` malicious devices: users
    ``0 .. count - 1`` run ``attack`` in every round they take part in, the others are honest.

    Raises
    ------
    InvalidParameters: an unknown attack or ``count < 1``.
    """
    if attack not in ATTACKS:
        raise InvalidParameters(f"attack must be one of {ATTACKS}, got {attack!r}")
    if count < 1:
        raise InvalidParameters(f"the number of malicious devices must be >= 1, got {count}")
    return lambda _round, user: ATTACK_BEHAVIOR + attack if user < count else None


@dataclass
class AdversaryRecord:
    """Per committed round, the malicious devices that took part and the ones the servers left
    out: ``rejected`` by the upload verification or ``refused`` earlier (a message a server
    would not take); :meth:`after_round` is the driver's ``after_round`` callback."""

    attack: str
    count: int
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def after_round(self, round_index: int, attempt: int, outcome: dict[str, Any],
                    errors: dict[int, BaseException]) -> None:
        if outcome.get("state") != "committed":
            return
        included = set(outcome.get("included") or [])
        rejected = sorted(int(u) for u in outcome.get("rejected") or [])
        refused = sorted(u for u in errors if u < self.count and u not in rejected)
        self.rounds.append({"round_index": round_index, "round_id": int(outcome["round_id"]),
                            "rejected_devices": rejected, "refused_devices": refused,
                            "malicious_included": sorted(u for u in included if u < self.count)})

    def to_dict(self) -> dict[str, Any]:
        return {"attack": self.attack, "adversaries": self.count, "rounds": list(self.rounds)}
