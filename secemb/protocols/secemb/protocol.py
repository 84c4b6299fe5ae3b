"""The SecEmb protocol object: its options, capabilities and exact message sizes, and the
factory of its roles (:class:`~secemb.protocols.secemb.user.SecEmbUser`,
:class:`~secemb.protocols.secemb.server.SecEmbServer`)."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping
from typing import Any, cast

from secemb.errors import InvalidParameters, check_int
from secemb.fss import rangeproof
from secemb.options import DEFAULTS
from secemb.privacy.noise import ClipSpec
from secemb.protocols.backends import Backend
from secemb.protocols.base import Capabilities, Protocol, RoundConfig, purpose_key
from secemb.protocols.stages import RoundPlan, round_plan
from secemb.protocols.secemb.bounds import (BOUND_RING_BITS, CHALLENGE_BYTES, QUERY_BYTES, bound_params,
                                           check_bound_ring, clip_norm)
from secemb.protocols.secemb.checks import SKETCH_KEY_BYTES
from secemb.protocols.secemb.relay import SecEmbRelayServer
from secemb.protocols.secemb.server import SecEmbServer
from secemb.protocols.secemb.sizes import (
    NAME,
    SIGMA_BYTES,
    relay_answer_bytes,
    relay_upload_bytes,
    request_bytes,
    roots_bytes,
    share_bytes,
    shared_bytes,
    upload_bytes,
)
from secemb.protocols.secemb.user import SecEmbUser
from secemb.randomness import RandomBytes
from secemb.ring import FixedPoint

__all__ = ["SecEmbProtocol"]


class SecEmbProtocol(Protocol):
    """Factory of SecEmb roles.

    Parameters
    ----------
    layout: ``"full"`` (the paper: ``m'`` keys over all ``m`` items) or ``"cuckoo"``
        (``B = ceil(expansion m')`` keys over small buckets; server work ~``3 m`` leaves per
        user instead of ``m' m``).
    relay: send identical bytes once (server 0 forwards them) and download one share.
    expansion: ``B / m'`` for the cuckoo layout (1.25 keeps insertion failures rare; larger
        values cost more keys).
    layout_seed: public seed of the cuckoo hash functions.
    backend: where servers evaluate batches of users (:mod:`secemb.protocols.backends`);
        serial by default.
    verify: verified uploads (on by default): the servers sketch each device's keys in their
        walk under a seed the device learns only once both hold its request, the device proves
        with its upload that every key's sketch is a point function's (the sketch proof,
        :meth:`SecEmbServer.verify_answer`, :meth:`SecEmbServer.verify_rejected`), and the servers
        compare per-user digests (:meth:`SecEmbServer.upload_digests`) before a user enters the
        aggregate; ``False`` is the unchecked protocol (benchmarks).  In process, both servers
        this object makes share one sketch key, drawn once with :mod:`secrets`
        (:meth:`make_server`).
    bound: bounded payloads (issue 34 (b), :mod:`secemb.protocols.secemb.bounds`; off by
        default): each device proves after its upload that its payloads and dense gradient are
        small (:meth:`SecEmbUser.bound_proof`), and the servers check the proofs with the
        digests (:meth:`SecEmbServer.bound_request`).  Needs ``verify``, the 32-bit ring and
        ``users_per_round``.
    users_per_round: ``n``, the round's users as the clipping bound takes them (the bound's
        ``t``); only with ``bound``.

    Raises
    ------
    InvalidParameters: ``verify`` or ``bound`` not a bool; ``bound`` without ``verify`` or without
        ``users_per_round >= 1``.
    """

    name = NAME
    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=True, networked=True,
                                options=("backend", "verify", "bound", "users_per_round"), local_options=("backend",),
                                central_dp=True)

    def __init__(
        self,
        layout: str = "full",
        relay: bool = False,
        expansion: float = DEFAULTS.expansion,
        layout_seed: int = 0,
        backend: Backend | None = None,
        verify: bool = True,
        bound: bool = False,
        users_per_round: int | None = None,
    ) -> None:
        super().__init__(layout, relay, expansion, layout_seed)
        self.backend = backend
        for name, flag in (("verify", verify), ("bound", bound)):  # a round document's values: hashed by round_plan
            if not isinstance(flag, bool):
                raise InvalidParameters(f"{name} must be a bool, got {flag!r:.80}")
        self.verify = verify
        if bound and (not verify or users_per_round is None):
            raise InvalidParameters("bounded payloads need verified uploads (verify=True) and users_per_round")
        self.bound = bound
        self.bound_users = check_int("users_per_round", users_per_round, low=1) if bound else None
        # the in-process servers' shared sketch key (a deployment's nodes pass their own: make_server)
        self._sketch_key = secrets.token_bytes(SKETCH_KEY_BYTES)

    @property
    def users_per_round(self) -> int | None:
        """``n`` of the bound (``None`` without ``bound``)."""
        return self.bound_users

    def spec(self) -> dict[str, Any]:
        """The shared options: ``verify`` only when off (a deployment that verifies, the
        default, announces the same protocol block as before verified uploads existed; one that
        does not tells its devices to send no proof seed, sketch proof or binding); ``bound`` and
        ``users_per_round`` only when bound (then every device knows to prove, and for how many
        users)."""
        out = super().spec()
        if out.get("verify") is True:
            del out["verify"]
        if not self.bound:
            del out["bound"], out["users_per_round"]
        return out

    def plan(self) -> RoundPlan:
        """The two-server round, with the ``prove`` step when ``bound``
        (:data:`~secemb.protocols.stages.PROVING`)."""
        return round_plan(relay=self.relay, bound=self.bound)

    def message_body_bytes(self, kind: str, rc: RoundConfig, *, party: int, num_users: int) -> int | None:
        """Exact body lengths (the aggregate share's with ``num_users`` users).  With relay,
        server 1 gets roots and seeds instead of keys, no upload, and the relay forwards."""
        roots_only = self.relay and party == 1
        if kind == "retrieval_request":
            sigma = SIGMA_BYTES if self.verify and party == 1 else 0  # verified uploads: server 1's proof seed
            return (roots_bytes(rc) if roots_only else request_bytes(rc)) + sigma
        if kind == "bound_proof":
            if not self.bound or party:
                return None  # a device sends its proof to server 0 only
            return bound_params(rc, cast("int", self.bound_users)).message_bytes(0)
        if kind == "bound_request":  # server 0 -> 1 at close: the query seed, then u64 user || c || part_0 || part_1
            if not self.bound or not party:
                return None
            return QUERY_BYTES + num_users * (8 + CHALLENGE_BYTES + 2 * rangeproof.PART_BYTES)
        if kind == "upload":
            commit = self.bound and not self.relay and not party  # server 0's ends with the dense commitment
            return None if roots_only else upload_bytes(rc, self.relay, party, verify=self.verify, commit=commit)
        if kind == "aggregate_share":
            return share_bytes(rc, num_users)
        if not roots_only:
            return None  # the relay forwards all go to (or come from) server 1 in relay mode
        return {"relay_keys": shared_bytes(rc), "relay_answer": relay_answer_bytes(rc, self.verify),
                "relay_upload": relay_upload_bytes(rc, self.verify)}[kind]

    def make_server(self, party: int, *, peer_key: bytes | None = None) -> SecEmbServer:
        """Server ``party``.  With verified uploads both servers hold the sketch check's 32-byte
        key: from a deployment's ``peer_key``, ``HMAC-SHA256(peer_key, b"secemb-sketch-key")``
        (:func:`~secemb.protocols.base.purpose_key`; the node passes its peer secret, so the two
        servers' keys agree and a running deployment's key is the one it always had); ``None``:
        this object's own, drawn once with :mod:`secrets` when it was made, so that the two
        servers it makes in one process share it.

        Raises
        ------
        InvalidParameters: ``party`` is not 0 or 1, or (verified uploads) ``peer_key`` is not
            bytes of at least :data:`~secemb.protocols.base.PEER_KEY_MIN_BYTES`.
        """
        role = SecEmbRelayServer if self.relay else SecEmbServer
        key = None
        if self.verify:
            key = self._sketch_key if peer_key is None else purpose_key(peer_key, b"secemb-sketch-key")
        return role(party, verify=self.verify, backend=self.backend, bound_users=self.bound_users, sketch_key=key)

    def upload_clip(self, fp: FixedPoint, clip: ClipSpec | None) -> ClipSpec | None:
        """With bounded payloads, the tighter of ``clip`` and an L2 norm of
        :func:`~secemb.protocols.secemb.bounds.clip_norm` (what an honest device's proof needs,
        :func:`~secemb.protocols.secemb.bounds.clip_upload`; the DP noise's reserves of ``clip``
        kept), so the proof holds whatever the DP settings; without, ``clip``."""
        if not self.bound:
            return clip
        l2 = clip_norm(fp, cast("int", self.bound_users), layout=self.layout)
        return ClipSpec(l2) if clip is None else dataclasses.replace(clip, l2=min(clip.l2, l2))

    @classmethod
    def payload_bound_blocker(cls, options: Mapping[str, Any], ring_bits: int) -> str | None:
        """The bound's check builds on verified uploads (``verify = false`` blocks it), and its
        range proof needs the :data:`~secemb.protocols.secemb.bounds.BOUND_RING_BITS`-bit ring."""
        if options.get("verify") is False:
            return "verified uploads are off ([protocol.options] verify = false), and the bound's check builds on them"
        if ring_bits != BOUND_RING_BITS:
            return f"the {ring_bits}-bit ring ([training] ring_bits): the bound's range proof needs the " \
                   f"{BOUND_RING_BITS}-bit ring"
        return None

    def check_ring_bits(self, ring_bits: int) -> None:
        """With ``bound``: the 32-bit ring, and a bound of at least 2 bits for ``users_per_round``
        users of this layout (:func:`~secemb.protocols.secemb.bounds.check_bound_ring`).

        Raises
        ------
        InvalidParameters: bounded payloads on another ring, or too many users for any bound in it.
        """
        if self.bound:
            check_bound_ring(ring_bits, cast("int", self.bound_users), layout=self.layout)

    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> SecEmbUser:
        return SecEmbUser(config, relay=self.relay, verify=self.verify, bound_users=self.bound_users, _rng=_rng)
