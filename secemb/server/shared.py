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
from typing import Any, NamedTuple

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
        wait = cfg.batch_wait_ms / 1e3  # concurrent devices' messages share an evaluation (Batcher)
        self._retrieve_batch = Batcher(by_round(self.retrieval_many), wait_s=wait)
        self._upload_batch = Batcher(by_round(self.upload_many), wait_s=wait)
        self._proof_batch = Batcher(by_round(self.proof_many), wait_s=wait)
        #: the round document's parts fixed while a round, its config and its DENSE message are
        #: (:meth:`_round_doc`), computed once rather than for every device's request
        self._doc_parts: _DocParts | None = None

    def status(self) -> dict[str, Any]:
        """Everything an operator may see (admin/peer); ``strikes``: each device with a
        rejection since its strikes were last cleared (server 0's door), and how many."""
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
                "strikes": {str(u): n for u, n in sorted(self.rejections.items())},
                "payload_bounds": self.cfg.payload_bounds(),
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
        whose dict values (config, protocol, model, training) are the caller's own copies too.

        Its parts fixed for the round (the config as a dict, the DENSE message's SHA-256, this
        server's protocol, model and training blocks) are built once per round, DENSE message
        and configuration (:class:`_DocParts`); the round's changing fields are read on each call."""
        parts = self._doc_parts
        if parts is None or not parts.fits(rnd, self.cfg):
            parts = self._doc_parts = _DocParts.of(rnd, self.cfg, self.model_doc)
        return {
            "round_id": rnd.round_id,
            "state": rnd.state,
            "model_version": rnd.version,
            "n_p": rnd.n_p,
            "min_users": rnd.min_users,
            "deadline_unix": rnd.deadline,
            "config": dict(parts.config) if parts.flat_config else copy.deepcopy(parts.config),
            "protocol": _own(parts.protocol),  # what the devices build it from (protocols.factory)
            "model": _own(parts.model),  # its hparams: a dict inside, the server config's own
            "training": _own(parts.training),
            "fingerprint": self.fingerprint,
            # the digest of the model the round trains on: a device checks both servers announce it
            "model_sha256": rnd.model_sha,
            # the digest of the round's DENSE message, which devices get from server 0 alone
            "dense_sha256": parts.dense_sha256,
        }

    def count_submit(self, user: int, body: bytes) -> None:
        """A device's COUNT share."""
        self.count.submit(user, messages.decode_count(body, ring_bits=self.cfg.ring_bits, party=self.party))


def _own(block: Any) -> Any:
    """A copy of a document block of JSON values at every depth (its dicts and lists new; the
    rest immutable): a caller's change to it reaches no other document, nor the server."""
    if type(block) is list:
        return [_own(x) if type(x) is dict or type(x) is list else x for x in block]
    out = dict(block)
    for k, x in block.items():
        if type(x) is dict or type(x) is list:
            out[k] = _own(x)
    return out


class _DocParts(NamedTuple):
    """The parts of a round document (:meth:`Node._round_doc`) fixed while ``rnd``, its
    config ``rc``, its DENSE message and the server's configuration ``cfg`` are the same
    objects; the dicts here are copied for each caller, never handed out."""

    rnd: Round
    rc: RoundConfig
    dense_msg: bytes
    cfg: ServerConfig
    #: ``rc`` as a dict, and whether its values are all ints and strings (a flat copy suffices)
    config: dict[str, Any]
    flat_config: bool
    dense_sha256: str
    protocol: dict[str, Any]
    model: dict[str, Any]
    training: dict[str, Any]

    def fits(self, rnd: Round, cfg: ServerConfig) -> bool:
        """Whether these parts are those of ``rnd`` (its config and DENSE message) under ``cfg``."""
        return self.rnd is rnd and self.rc is rnd.rc and self.dense_msg is rnd.dense_msg and self.cfg is cfg

    @classmethod
    def of(cls, rnd: Round, cfg: ServerConfig, model_doc: dict[str, Any]) -> _DocParts:
        """The parts of ``rnd``'s document on a server of ``cfg`` announcing ``model_doc``."""
        config = dataclasses.asdict(rnd.rc)
        training = {"lr": cfg.lr, "beta1": cfg.beta1, "beta2": cfg.beta2, "eps": cfg.eps, "ring_bits": cfg.ring_bits,
                    "frac_bits": cfg.frac_bits,
                    # central DP: what every device clips to, and the noise it leaves room for
                    **({"dp_clip": cfg.dp_clip, "dp_sigma": cfg.dp_sigma} if cfg.dp_clip else {})}
        return cls(rnd, rnd.rc, rnd.dense_msg, cfg, config, all(isinstance(v, (int, str)) for v in config.values()),
                   hashlib.sha256(rnd.dense_msg).hexdigest(), cfg.protocol_description(), model_doc, training)
