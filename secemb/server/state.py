"""One server's durable state and round lifecycle: :class:`NodeState`, the base of both
servers' nodes.

Party: both servers (server 0 and server 1 hold the same kinds of state).

The model (table, dense vector, optimizer state, version), the last committed round and its
users, m' and the mean count live in a checkpoint the :class:`~secemb.server.store.StateStore`
writes atomically -- the commit point of a round; its journal records round ids, outcomes,
alarms, the operator's clearing and the user set of the first count sum released.  On start
the node loads the checkpoint (none and no journal record of a commit: model version 0 from
the public ``init_seed``, saved at once; none but such a record: refused) and recovers from
the journal: round ids stay monotonic, the alarms not yet cleared and the per-device
rejections not yet forgiven (a clear of the alarms keeps them; a clear of the strikes forgives)
come back, as does the recount rule, and rounds left open end aborted (or committed, if the
checkpoint says so).  Here too is the round lifecycle every other part uses under
:attr:`NodeState.lock`: the current round (``_current``), its start (``_begin``) and its
journaled, idempotent end (``_end``).

Errors: :class:`~secemb.server.persist.CorruptState` (the stored state does not fit the
configuration, or its checkpoint was lost), :class:`~secemb.server.persist.StorageError` (a
write the disk refused: nothing changed), :class:`~secemb.server.errors.Conflict` (a message
for another round, or for a closed one).
"""

from __future__ import annotations

import inspect
import logging
import secrets
import threading
from typing import Any, Protocol as TypingProtocol, runtime_checkable

import numpy as np

from secemb.digest import model_sha256
from secemb.errors import InvalidParameters, ProtocolError, SecembError, check_int
from secemb.models.base import RecModel
from secemb.privacy.noise import RingNoise
from secemb.protocols.base import Protocol, RelayRole, ServerRole
from secemb.protocols.stages import PROVE, UPLOAD
from secemb.randomness import RandomBytes
from secemb.round import messages
from secemb.round.optimizer import ServerAdam
from secemb.server.config import ServerConfig
from secemb.server.count import CountPhase
from secemb.server.errors import Conflict
from secemb.server.persist import CorruptState, StorageError
from secemb.server.rounds import ABORTED, COMMITTED, FINAL, OPEN, Outcomes, Round
from secemb.server.store import Checkpoint, DiskStore, StateStore

__all__ = ["NodeState", "ProvingRole", "optimizer_state"]

log = logging.getLogger("secemb.server")

#: alarms kept in memory and shown in the status (the journal keeps them all)
_KEEP_ALARMS = 100


def _make_role(protocol: Protocol, name: str, party: int, peer_key: bytes) -> ServerRole:
    """``protocol.make_server(party, peer_key=peer_key)``: this node's role of the protocol
    registered as ``name``.

    Raises
    ------
    InvalidParameters: its ``make_server`` does not take the keyword ``peer_key`` (a plug-in
        written for the signature before session 30), or what ``make_server`` raises.
    """
    try:
        inspect.signature(protocol.make_server).bind(party, peer_key=peer_key)
    except TypeError:
        raise InvalidParameters(f"protocol {name!r}'s make_server must accept the keyword peer_key "
                                "(docs/protocol.md, 'Adding a protocol')") from None
    return protocol.make_server(party, peer_key=peer_key)


@runtime_checkable
class ProvingRole(TypingProtocol):
    """A server role with bounded payloads' steps (SecEmb's option ``bound``,
    :mod:`secemb.protocols.secemb.bounds`; the methods of
    :class:`~secemb.protocols.secemb.SecEmbServer`): server 0 hands each uploaded device a
    challenge and keeps its proof, and at close asks server 1 to check them."""

    #: ``n``: the most users a round may have (their bounded sums cannot wrap)
    bound_users: int | None

    def challenge(self, user_id: int) -> bytes:
        """Server 0: the 16-byte challenge of uploaded user ``user_id``."""

    def handle_proof_many(self, proofs: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """Server 0: keep each ``(user, proof)``; per item ``None`` or the error that refused it."""

    def bound_request(self, users: list[int]) -> bytes:
        """Server 0: the check's request to server 1 for uploaded ``users``."""

    def bound_answer(self, request: bytes) -> bytes:
        """Server 1: its verifier messages for server 0's request."""

    def unproved(self, users: list[int]) -> set[int]:
        """Server 0: the users of ``users`` without a kept proof."""

    def bound_rejected(self, answer: bytes) -> set[int]:
        """Server 0: the users of its last request that fail the check or sent no proof."""


class NodeState:
    """What one server holds: its configuration, protocol role, model (durable: checkpoint and
    journal, recovered on start), the current round and the outcomes and alarms it remembers,
    and the lock that guards them.  The base of :class:`~secemb.server.shared.Node`.

    Parameters
    ----------
    cfg: the validated configuration.
    store: durable state (default: :class:`~secemb.server.store.DiskStore` in ``cfg.state_dir``).
    protocol, model: the objects to run (default: built from ``cfg``).
    _noise_rng: the random bytes of the DP noise (tests only; the OS CSPRNG by default).

    Raises
    ------
    InvalidParameters: ``cfg.party`` is not this class's party, the protocol's ``make_server``
        does not take the keyword ``peer_key``, or central DP noise for a protocol without it.
    CorruptState: the stored state does not fit the configuration, or its checkpoint was lost.
    """

    party: int

    def __init__(self, cfg: ServerConfig, *, store: StateStore | None = None, protocol: Protocol | None = None,
                 model: RecModel | None = None, _noise_rng: RandomBytes | None = None) -> None:
        if cfg.party != self.party:
            raise InvalidParameters(f"{type(self).__name__} is server {self.party}, the configuration says "
                                    f"party={cfg.party}")
        self.cfg = cfg
        self.protocol = protocol if protocol is not None else cfg.make_protocol()
        #: this server's role; the peer secret both servers share is the deployment's peer key,
        #: from which a protocol derives the keys its servers need in common (SecEmb's sketch key:
        #: :meth:`~secemb.protocols.base.Protocol.make_server`)
        self.role: ServerRole = _make_role(self.protocol, cfg.protocol, self.party, cfg.peer_secret)
        #: the role's relay steps, where it has them (an optional role: :class:`RelayRole`)
        self.relay_role: RelayRole | None = self.role if isinstance(self.role, RelayRole) else None
        if self.protocol.relay and self.relay_role is None:
            raise InvalidParameters(f"protocol {cfg.protocol!r} is configured with relay, but its server role "
                                    f"{type(self.role).__name__} has no relay steps (it is not a RelayRole)")
        #: the role's bounded-payload steps, where the protocol's round has them (its plan's
        #: :data:`~secemb.protocols.stages.PROVE` hops: SecEmb's option ``bound``)
        self.prover: ProvingRole | None = None
        if self.protocol.plan().stage(PROVE):
            if not isinstance(self.role, ProvingRole):
                raise InvalidParameters(f"protocol {cfg.protocol!r} declares a proving step, but its server role "
                                        f"{type(self.role).__name__} has no bounded-payload steps")
            self.prover = self.role
        #: where devices upload to both servers (no relay): the key of server 1's upload receipts, which
        #: server 1 answers each accepted upload with and server 0 checks on each upload it takes
        #: (:func:`~secemb.round.messages.check_receipt`); ``None`` with relay (one upload, to server 0)
        self.receipts: bytes | None = (messages.receipt_key(cfg.peer_secret)
                                       if 1 in self.protocol.plan().device_sends(UPLOAD) else None)
        self.model = model if model is not None else cfg.make_model()
        self.fp = cfg.fixed_point()
        #: central DP: this server's noise on its own aggregate share (docs/security.md)
        self.noise: RingNoise | None = None
        if cfg.dp_sigma > 0:
            if not self.protocol.capabilities.central_dp:
                raise InvalidParameters(f"protocol {cfg.protocol!r} does not support central DP noise (central_dp)")
            self.noise = RingNoise(self.fp, cfg.dp_sigma, _rng=_noise_rng)
        self.width, self.dense_size = self.model.sparse_width, self.model.dense_size
        #: the round document's model: name, hyperparameters and, for a model with features, the
        #: SHA-256 of the public item features (:meth:`FeatureSet.public_sha256`), for GREC's
        #: denoiser that of the recommender's table it froze
        #: (:func:`~secemb.digest.table_sha256`), which a device building the model from
        #: its own copy compares before it sends anything
        self.model_doc: dict[str, Any] = {"name": cfg.model, "hparams": cfg.model_hparams}
        features = getattr(self.model, "features", None)
        if features is not None:
            self.model_doc["item_features_sha256"] = features.public_sha256()
        frozen = getattr(self.model, "recommender_table_sha256", None)
        if frozen is not None:
            self.model_doc["recommender_table_sha256"] = frozen
        self.fingerprint = cfg.fingerprint()
        self.boot_id = secrets.token_hex(8)
        self.store = store if store is not None else DiskStore(cfg.state_dir, self.party, self.fingerprint)
        self.lock = threading.RLock()
        self._wake = threading.Condition(self.lock)
        self.round: Round | None = None
        self.count = CountPhase(self.fp.dtype, on_first_release=self._journal_first_count)
        self.outcomes = Outcomes()
        self.alarms: list[dict[str, Any]] = []
        #: why the deployment is halted (``None``: it is not)
        self.halted: str | None = None
        #: server 0: per device, the rounds whose upload verification it failed since the operator
        #: last cleared its strikes (issue 34; rebuilt from the journal; a clear of the alarms keeps
        #: them: session 31, S31-R2): MAX_REJECTIONS refuse it
        self.rejections: dict[int, int] = {}
        self._stopping = False
        self._load()
        self._recover()

    def _new_optimizer(self) -> ServerAdam:
        """The optimizer (each server applies the same steps)."""
        return ServerAdam(self.cfg.num_items, self.width, self.dense_size, self.cfg.adam(), lazy=self.cfg.lazy_adam)

    def _load(self) -> None:
        self.opt = self._new_optimizer()
        ck = self.store.load()
        if ck is None:
            self._refuse_lost_checkpoint()
            self._initial_state()
            return
        if self.cfg.m_prime is not None and ck.m_prime not in (None, self.cfg.m_prime):
            raise CorruptState(f"checkpoint has m_prime={ck.m_prime}, config says {self.cfg.m_prime}")
        if ck.table.shape != (self.cfg.num_items, self.width) or ck.dense.shape != (self.dense_size,):
            raise CorruptState(f"checkpoint model shapes {ck.table.shape}, {ck.dense.shape} do not match the "
                               f"configuration's {(self.cfg.num_items, self.width)}, {(self.dense_size,)}")
        try:
            self.opt.load_state_dict(optimizer_state(ck))
        except InvalidParameters as exc:
            raise CorruptState(f"checkpoint: {exc}") from None
        self.version, self.last_round, self.last_included = ck.version, ck.last_round, ck.included
        self.m_prime = ck.m_prime if ck.m_prime is not None else self.cfg.m_prime
        self.mean_count = ck.mean_count
        self.table, self.dense, self.sha = ck.table, ck.dense, ck.model_sha256

    def _refuse_lost_checkpoint(self) -> None:
        """Issue 12, finding 11: no checkpoint, but the journal says one was written (a
        committed round or an opened m'), so the model was lost; starting from a fresh model
        would silently discard the training.  Refuse, naming the recovery."""
        written = [r for r in self.store.records() if r.get("ev") in (COMMITTED, "m_prime")]
        if written:
            last = written[-1]
            raise CorruptState(
                f"{self.store} has no checkpoint, but its journal records {len(written)} committed state "
                f"change(s) (the last: {last.get('ev')} of round {last.get('round')}): the checkpoint was lost. "
                "Refusing to start from a fresh model. Restore checkpoint.npz from a backup into the state "
                "directory, or start the deployment over by moving BOTH servers' state directories aside "
                "(docs/deployment.md, 'A lost checkpoint')."
            )

    def _initial_state(self) -> None:
        """State before the first checkpoint: model version 0, which each server initializes
        itself from the public ``init_seed`` (the two digests are compared before the first
        round), saved at once."""
        self.version, self.last_round, self.last_included = 0, -1, []
        self.m_prime, self.mean_count = self.cfg.m_prime, None
        rng = np.random.default_rng(self.cfg.init_seed)
        self.table, self.dense = self.model.init_public(self.cfg.num_items, rng, rating_range=self.cfg.rating_range)
        self.sha = model_sha256(self.table, self.dense)
        self._save()

    def _checkpoint(self, version: int, last_round: int, included: list[int], table: np.ndarray,
                    dense: np.ndarray, sha: str, opt: ServerAdam) -> Checkpoint:
        return Checkpoint(version, last_round, included, self.m_prime, self.mean_count, table, dense, sha,
                          opt.state_dict())

    def _save(self) -> None:
        self.store.save(self._checkpoint(self.version, self.last_round, self.last_included, self.table,
                                         self.dense, self.sha, self.opt))

    def _recover(self) -> None:
        """Round ids stay monotonic; rounds left open by a crash end as aborted (or as
        committed, if the checkpoint says so).  Each device's rejections since the last clear of
        its strikes (``strikes_cleared``: of that device, or of every device; a clear of the
        alarms forgives none) are counted once per round, from the ``rejected`` records the close
        journals when it rejects and from the rounds' outcome records (either alone suffices: a
        crash may come between them)."""
        self.max_round = self.last_round
        open_rounds: dict[int, dict[str, Any]] = {}
        counted: set[tuple[int, int]] = set()  # (round, user) rejections since the last clear
        forgotten: set[tuple[int, int]] = set()  # those a clear of the strikes forgave

        def device(what: str, u: Any) -> int:  # the server journals only int ids of its deployment's devices
            if not (type(u) is int and 0 <= u < self.cfg.num_users):
                raise CorruptState(f"journal: {what} names no device of the deployment ({str(u)[:40]!r}; the "
                                   f"server writes int ids in [0, {self.cfg.num_users}))")
            return u

        def devices(what: str, users: Any) -> list[int]:  # a record's list of devices (absent: none)
            if users is None:
                return []
            if not isinstance(users, list):
                raise CorruptState(f"journal: {what} is not a list of devices ({str(users)[:40]!r})")
            return [device(what, u) for u in users]

        def reject(r: int, users: list[int]) -> None:
            for u in users:
                if (r, u) not in forgotten and (r, u) not in counted:
                    counted.add((r, u))
                    self.rejections[u] = self.rejections.get(u, 0) + 1

        def forgive(who: Any) -> None:  # a clear of the strikes: of device ``who``, or of every device (None)
            if who is not None:
                device("a strikes_cleared record", who)
            gone = {(q, u) for q, u in counted if who is None or u == who}
            counted.difference_update(gone)
            forgotten.update(gone)
            for _, u in gone:
                self.rejections.pop(u, None)

        for rec in self.store.records():
            r = check_int("journal: a record's round", rec.get("round", -1), low=-1, error=CorruptState)
            self.max_round = max(self.max_round, r)
            ev = rec.get("ev")
            if ev == "alarm":
                self._remember_alarm(rec)
            elif ev == "alarms_cleared":
                self.alarms, self.halted = [], None
                if rec.get("strikes") != "kept":  # written before session 31, when a clear forgave every strike
                    forgive(None)
            elif ev == "strikes_cleared":
                forgive(rec.get("device"))
            elif ev == "rejected":
                reject(r, devices("a rejected record's users", rec.get("users")))
            elif ev == "count_first":
                self.count.restore_first(devices("a count_first record's users", rec.get("users")))
            elif ev == "open":
                open_rounds[r] = rec
            elif ev in FINAL:
                open_rounds.pop(r, None)
                left_out = devices(f"a round end's rejected (round {r})", rec.get("rejected"))
                included = rec.get("included")
                self.outcomes.remember(r, ev, None if included is None else devices(
                    f"a round end's included (round {r})", included), rec.get("reason", ""),
                    tampered=rec.get("tampered"), rejected=rec.get("rejected"))
                reject(r, left_out)
        for r in sorted(open_rounds):
            if r == self.last_round:
                rec = {"ev": COMMITTED, "round": r, "version": self.version, "included": self.last_included,
                       "reason": "recovered from checkpoint"}
            else:
                rec = {"ev": ABORTED, "round": r, "reason": "server restarted during the round"}
            left_out = sorted(u for q, u in counted | forgotten if q == r)
            if left_out:
                rec["rejected"] = left_out
            self.store.append(rec)
            self.outcomes.remember(r, rec["ev"], rec.get("included"), rec["reason"], rejected=left_out)

    def _remember_alarm(self, rec: dict[str, Any]) -> None:
        """Keep alarm record ``rec`` (journaled) in memory; a halting one halts."""
        doc = {k: rec.get(k) for k in ("kind", "round", "detail", "halt", "time_unix")}
        self.alarms.append(doc)
        del self.alarms[:-_KEEP_ALARMS]
        if doc["halt"]:
            self.halted = f"{doc['kind']} in round {doc['round']}"

    def stop(self) -> None:
        """Stop the background threads."""
        self._stopping = True
        with self._wake:
            self._wake.notify_all()

    def _current(self, r: int, *, states: tuple[str, ...] = (OPEN,)) -> Round:
        rnd = self.round
        if rnd is None or rnd.round_id != r:
            cur = "none" if rnd is None else str(rnd.round_id)
            raise Conflict(f"round {r} is not the current round (current: {cur})")
        if rnd.state not in states:
            raise Conflict(f"round {r} is closed ({rnd.state}): messages for it are refused" if rnd.state != OPEN
                           else f"round {r} is still open")
        return rnd

    def model_message(self) -> bytes:
        """The current model as a MODEL message (each server holds one from the start: version
        0, :meth:`_initial_state`)."""
        with self.lock:
            return messages.encode_model(self.version, self.table, self.dense)

    def model_sha(self) -> str:
        """SHA-256 of the current model (computed once per version)."""
        return self.sha

    def _proving(self) -> ProvingRole:
        """The role's bounded-payload steps.

        Raises
        ------
        ProtocolError: the protocol's round has none (bounded payloads off, or another protocol).
        """
        if self.prover is None:
            raise ProtocolError("this deployment's rounds have no bound proofs (bounded payloads are off)")
        return self.prover

    def _begin(self, rnd: Round) -> None:
        """Make ``rnd`` the current round (under the lock).  Both servers encode its DENSE
        message: server 0 serves it, and both announce its digest (a device checks the vector
        it gets from server 0 alone against both announcements)."""
        self.role.begin_round(rnd.rc, self.fp.encode(self.table))
        if self.party == 0 and self.prover is not None:  # bounded payloads: the quorum counts proofs
            rnd.proved = set()
        rnd.dense_msg = messages.encode_dense(rnd.round_id, self.fp.encode(self.dense), rnd.rc.ring_bits)
        self.round = rnd

    def _journal_open(self, rnd: Round) -> None:
        self.store.append({"ev": "open", "round": rnd.round_id, "version": rnd.version, "n_p": rnd.n_p})
        self.max_round = rnd.round_id

    def _journal_outcome(self, rec: dict[str, Any]) -> None:
        """Journal a record that only restates what recovery derives anyway (a round's end,
        m' after its checkpoint): if the disk refuses it, log and go on -- on restart an
        unterminated ``open`` becomes ``aborted``, or ``committed`` from the checkpoint."""
        try:
            self.store.append(rec)
        except StorageError as exc:
            log.error("journal record %s not written: %s", rec.get("ev"), exc)

    def _journal_first_count(self, users: list[int]) -> None:
        """Journal the user set of the first count sum released (durably, before it leaves:
        a StorageError refuses the sum), so that a recount over another set is refused after a
        restart too (issue 33, "the recount rule is lost on restart")."""
        self.store.append({"ev": "count_first", "round": self.max_round, "users": users})

    def _end(self, rnd: Round, state: str, reason: str, *, done: bool = True) -> None:
        """End ``rnd`` as ``state`` (journaled; idempotent)."""
        with self.lock:
            if rnd.state in FINAL:
                return
            rnd.state, rnd.reason = state, reason
            rec: dict[str, Any] = {"ev": state, "round": rnd.round_id, "reason": reason}
            if state == COMMITTED:
                rec["version"], rec["included"] = self.version, rnd.included
            if rnd.tampered:
                rec["tampered"] = sorted(rnd.tampered)
            if rnd.rejected:
                rec["rejected"] = sorted(rnd.rejected)
            self._journal_outcome(rec)
            self.outcomes.remember(rnd.round_id, state, rnd.included, reason, rnd.server_s, rnd.optimizer_s,
                                   sorted(rnd.tampered), sorted(rnd.rejected))
        if state == ABORTED:
            log.warning("round %d aborted: %s", rnd.round_id, reason)
        if done:
            rnd.done.set()


def optimizer_state(ck: Checkpoint) -> dict[str, Any]:
    """The optimizer state of checkpoint ``ck``.

    Raises
    ------
    CorruptState: it has none (a server 1 state directory written before both servers applied
        the update: start over).
    """
    if ck.optimizer is None:
        raise CorruptState(f"checkpoint of model version {ck.version} has no optimizer state (a server 1 state "
                           "directory written before both servers applied the update: start over)")
    return ck.optimizer
