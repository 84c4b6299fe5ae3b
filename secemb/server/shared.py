""":class:`Node`, what both servers share: the state (:mod:`.state`), the alarms
(:mod:`.alarms`), the device messages of a round (:mod:`.retrieval`) and the update both
compute (:mod:`.combine`), plus what an operator or a device may read -- the status, the round
document, round outcomes -- and a device's COUNT share (Eq. 11).

Party: both servers; :class:`~secemb.server.leader.LeaderNode` (server 0) and
:class:`~secemb.server.follower.FollowerNode` (server 1) build on it.  Errors: as
:mod:`secemb.server.node` states.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from typing import Any

from secemb.models.base import RecModel
from secemb.protocols.base import Protocol, RoundConfig
from secemb.randomness import RandomBytes
from secemb.round import messages
from secemb.server.alarms import Alarms
from secemb.server.combine import Combine
from secemb.server.config import ServerConfig
from secemb.server.errors import NotFound
from secemb.server.retrieval import Retrieval
from secemb.server.rounds import Batcher, Round, by_round
from secemb.server.store import StateStore

__all__ = ["Node"]


class Node(Alarms, Retrieval, Combine):
    """What both servers share: model, store, rounds, retrieval and upload handling.

    Parameters
    ----------
    cfg: the validated configuration.
    store: durable state (default: :class:`~secemb.server.store.DiskStore` in ``cfg.state_dir``).
    _noise_rng: the random bytes of the DP noise (tests only; the OS CSPRNG by default).
    """

    def __init__(self, cfg: ServerConfig, *, store: StateStore | None = None, protocol: Protocol | None = None,
                 model: RecModel | None = None, _noise_rng: RandomBytes | None = None) -> None:
        super().__init__(cfg, store=store, protocol=protocol, model=model, _noise_rng=_noise_rng)
        self._retrieve_batch = Batcher(by_round(self.retrieval_many))
        #: the round document's parts that are fixed while a round's config and DENSE message are
        #: (:meth:`_round_doc`): (round, its config, its DENSE message, the config as a dict, that
        #: message's SHA-256), computed once rather than for every device's request
        self._doc_parts: tuple[Round, RoundConfig, bytes, dict[str, Any], str] | None = None

    def status(self) -> dict[str, Any]:
        """Everything an operator may see (admin/peer)."""
        with self.lock:
            rnd = self.round
            return {
                "party": self.party,
                "boot_id": self.boot_id,
                "fingerprint": self.fingerprint,
                "model_version": self.version,
                "model_sha256": self.model_sha(),
                "last_committed_round": self.last_round,
                "max_round": self.max_round,
                "m_prime": self.m_prime,
                "mean_count": self.mean_count,
                "sync_pending": self._sync_pending_status(),
                "count": self.count.status(),
                "halted": self.halted is not None,
                "alarms": list(self.alarms),
                "round": None if rnd is None else {
                    "round_id": rnd.round_id, "state": rnd.state, "n_p": rnd.n_p,
                    "retrieved": len(rnd.retrieved), "uploaded": len(rnd.uploaded),
                    "deadline_unix": rnd.deadline,
                },
            }

    def _sync_pending_status(self) -> bool:
        return False

    def round_info(self, user: int | None) -> dict[str, Any]:
        """The current round as a device sees it."""
        with self.lock:
            rnd = self.round
            if rnd is None:
                raise NotFound("no round has been opened since this server started")
            doc = self._round_doc(rnd)
            doc["participant"] = None if user is None else (rnd.participants is None or user in rnd.participants)
            return doc

    def round_status(self, r: int, user: int | None) -> dict[str, Any]:
        """Outcome of round ``r``: ``state``, ``reason``, and for the operator (``user`` None)
        the included ids and this server's busy seconds ``server_s`` (role calls) and
        ``optimizer_s`` (``None`` for rounds recovered after a restart); for device ``user``
        only whether it was included."""
        with self.lock:
            rnd = self.round
            if rnd is not None and rnd.round_id == r:
                doc = rnd.outcome()
            else:
                past = self.outcomes.get(r)
                if past is None:
                    raise NotFound(f"round {r} is unknown to this server")
                doc = past
        if user is not None:
            inc = doc.pop("included")
            doc["included"] = None if inc is None else user in inc
            del doc["server_s"], doc["optimizer_s"], doc["tampered"]
            doc.pop("rejected", None)
        return doc

    def _round_doc(self, rnd: Round) -> dict[str, Any]:
        """The round document of ``rnd``: a new dict on every call (callers add their fields),
        sharing nothing mutable with the cache it is built from."""
        parts = self._doc_parts
        if parts is None or parts[0] is not rnd or parts[1] is not rnd.rc or parts[2] is not rnd.dense_msg:
            parts = (rnd, rnd.rc, rnd.dense_msg, dataclasses.asdict(rnd.rc), hashlib.sha256(rnd.dense_msg).hexdigest())
            self._doc_parts = parts
        cached = parts[3]  # copied: a flat dict (RoundConfig's fields are ints and strings), else deeply
        config = dict(cached) if all(isinstance(v, (int, str)) for v in cached.values()) else copy.deepcopy(cached)
        return {
            "round_id": rnd.round_id,
            "state": rnd.state,
            "model_version": rnd.version,
            "n_p": rnd.n_p,
            "min_users": rnd.min_users,
            "deadline_unix": rnd.deadline,
            "config": config,
            "protocol": self.cfg.protocol_description(),  # what the devices build it from (protocols.factory)
            "model": self.model_doc,
            "training": {"lr": self.cfg.lr, "beta1": self.cfg.beta1, "beta2": self.cfg.beta2,
                         "eps": self.cfg.eps, "ring_bits": self.cfg.ring_bits,
                         "frac_bits": self.cfg.frac_bits,
                         # central DP: what every device clips to, and the noise it leaves room for
                         **({"dp_clip": self.cfg.dp_clip, "dp_sigma": self.cfg.dp_sigma} if self.cfg.dp_clip else {})},
            "fingerprint": self.fingerprint,
            # the digest of the model the round trains on: a device checks both servers announce it
            "model_sha256": rnd.model_sha,
            # the digest of the round's DENSE message, which devices get from server 0 alone
            "dense_sha256": parts[4],
        }

    def count_submit(self, user: int, body: bytes) -> None:
        """A device's COUNT share."""
        self.count.submit(user, messages.decode_count(body, ring_bits=self.cfg.ring_bits, party=self.party))
