"""One server's state and round logic, independent of HTTP (the app in :mod:`.app` is a thin
layer over :class:`ServerNode`).

The protocol work is done by the protocol's own :class:`~secemb.protocols.base.ServerRole`
(the same objects the in-process simulation drives); this module adds what a deployment
needs around them:

* **rounds** with a participant list, a quorum and a deadline, opened and closed by server 0
  (the leader), mirrored on server 1 through signed peer calls;
* **the agreed user set.**  Each server absorbs uploads as they arrive and keeps the accepted
  messages of the round.  At close, server 0 takes the users it absorbed, asks server 1 for
  its set and proposes the intersection ``I``; a server whose own set differs from ``I``
  (an upload reached only it) *replays* the round's accepted messages into a fresh role,
  leaving out the uploads of users outside ``I`` (they then count as retrieved-but-silent,
  which the protocol already removes from the aggregate).  Both shares then cover exactly
  ``I``, which SecEmb's combine checks.
* **durability**: model, optimizer and m' in an atomic checkpoint (the commit point of a
  round); round ids and outcomes in a journal (:mod:`.persist`).  Rounds in flight when a
  server dies are aborted; a committed round is never applied twice, because server 1 only
  accepts the model version that follows its own.
* **Eq. 11** count shares (m' from the mean rating count) before the first round.

Exceptions: :class:`Conflict` (409, a ``ProtocolError``), :class:`NotFound` (404),
:class:`PeerUnavailable` (503), :class:`~secemb.server.auth.Forbidden` (403), and the
protocol's ``InvalidMessage`` (400), ``ProtocolError`` (409), ``InvalidParameters`` (422).
Every rejected request leaves the state as it was.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import queue
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, SecembError
from secemb.protocols.base import RoundConfig, ServerRole
from secemb.server import faults
from secemb.server.auth import Forbidden
from secemb.server.config import ServerConfig
from secemb.server.persist import CorruptState, Journal, load_checkpoint, save_checkpoint
from secemb.sharing import reconstruct
from secemb.training import messages
from secemb.training.loop import model_sha256
from secemb.training.optimizer import ServerAdam
from secemb.transport.network import ApiClient, RemoteError, Unreachable

__all__ = ["Conflict", "NotFound", "PeerUnavailable", "ServerNode"]

log = logging.getLogger("secemb.server")

OPEN, CLOSING, COMMITTED, ABORTED = "open", "closing", "committed", "aborted"
FINAL = (COMMITTED, ABORTED)
CHECKPOINT = "checkpoint.npz"
JOURNAL = "journal.jsonl"
_KEEP_OUTCOMES = 10_000
_OPT_FIELDS = ("_m", "_v", "_row_t", "_dm", "_dv")


class Conflict(ProtocolError):
    """The request does not fit the current state (wrong round, round closed, ...): 409."""


class NotFound(SecembError):
    """No such round or resource: 404."""


class PeerUnavailable(SecembError):
    """The other server did not answer or refused: 503."""


def _peer_error(what: str, exc: Exception) -> SecembError:
    """503 if the peer did not answer (or failed), 409 if it refused the request."""
    if isinstance(exc, RemoteError) and exc.status < 500:
        return Conflict(f"{what}: the other server refused: {exc.detail}")
    return PeerUnavailable(f"{what}: {exc}")


@dataclass
class _Round:
    """A round's state at one server."""

    round_id: int
    rc: RoundConfig
    version: int
    participants: frozenset[int] | None
    n_p: int
    deadline: float  # unix time
    quorum: int
    min_users: int
    state: str = OPEN
    retrieved: set[int] = field(default_factory=set)
    relayed: set[int] = field(default_factory=set)  # server 1, relay: keys forwarded by server 0
    uploaded: set[int] = field(default_factory=set)  # absorbed by the role (the agreed set is a subset)
    finished: set[int] = field(default_factory=set)  # upload handling done (counts for the quorum)
    log: list[tuple[str, int, bytes]] = field(default_factory=list)  # accepted messages
    dense_msg: bytes = b""
    included: list[int] | None = None
    reason: str = ""
    share_include: list[int] | None = None
    share: bytes | None = None
    done: threading.Event = field(default_factory=threading.Event)
    closing: bool = False


@dataclass
class _Count:
    """The Eq. 11 count phase."""

    users: frozenset[int] | None = None
    shares: dict[int, np.ndarray] = field(default_factory=dict)
    state: str = "idle"  # idle | open | closed
    include: list[int] | None = None


class _Batcher:
    """Groups concurrent calls into one call of ``fn(items) -> results`` (a result may be an
    exception, raised in its caller's thread).  One worker thread."""

    def __init__(self, fn: Callable[[list[Any]], list[Any]], max_batch: int = 256) -> None:
        self._fn, self._max = fn, max_batch
        self._q: queue.Queue[tuple[Any, Future]] = queue.Queue()
        threading.Thread(target=self._run, daemon=True, name="secemb-batcher").start()

    def __call__(self, item: Any) -> Any:
        fut: Future = Future()
        self._q.put((item, fut))
        out = fut.result()
        if isinstance(out, BaseException):
            raise out
        return out

    def _run(self) -> None:
        while True:
            batch = [self._q.get()]
            while len(batch) < self._max:
                try:
                    batch.append(self._q.get_nowait())
                except queue.Empty:
                    break
            try:
                results = self._fn([item for item, _ in batch])
            except BaseException as exc:  # noqa: BLE001 - handed to every caller
                results = [exc] * len(batch)
            for (_, fut), res in zip(batch, results):
                fut.set_result(res)


class ServerNode:
    """Server ``cfg.party``: protocol role, model, journal, rounds.

    Parameters
    ----------
    cfg: the validated configuration.
    peer: client for the other server (default: signed client at ``cfg.peer_url``).
    start_threads: run server 0's round-closing thread (tests of single nodes turn it off).
    """

    def __init__(self, cfg: ServerConfig, *, peer: ApiClient | None = None, start_threads: bool = True) -> None:
        self.cfg = cfg
        self.party = cfg.party
        self.protocol = cfg.make_protocol()
        self.role: ServerRole = self.protocol.make_server(self.party)
        self.model = cfg.make_model()
        self.fp = cfg.fixed_point()
        self.width, self.dense_size = self.model.sparse_width, self.model.dense_size
        self.fingerprint = cfg.fingerprint()
        self.boot_id = secrets.token_hex(8)
        self.peer = peer or ApiClient(cfg.peer_url, f"server{self.party}", cfg.peer_secret, timeout=cfg.peer_timeout_s)
        self.lock = threading.RLock()
        self._open_lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self.round: _Round | None = None
        self.count = _Count()
        self.outcomes: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._sync_pending = False
        self._stopping = False
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(cfg.state_dir / JOURNAL)
        self._load()
        self._recover()
        self._retrieve_batch = _Batcher(self._retrieval_batch)
        self._relay_batch = _Batcher(self._relay_retrieval_batch)
        if start_threads and self.party == 0:
            threading.Thread(target=self._closer, daemon=True, name="secemb-closer").start()

    # ================================================================== state on disk
    def _load(self) -> None:
        ck = load_checkpoint(self.cfg.state_dir / CHECKPOINT)
        self.opt: ServerAdam | None = None
        if self.party == 0:
            self.opt = ServerAdam(self.cfg.num_items, self.width, self.dense_size, self.cfg.adam(), lazy=self.cfg.lazy_adam)
        if ck is None:
            self.version = -1  # server 1 has no model until server 0 syncs version 0
            self.last_round = -1
            self.last_included: list[int] = []
            self.m_prime, self.mean_count = self.cfg.m_prime, None
            self.table = np.zeros((self.cfg.num_items, self.width))
            self.dense = np.zeros(self.dense_size)
            if self.party == 0:
                rng = np.random.default_rng(self.cfg.init_seed)
                self.table, self.dense = self.model.init_public(
                    self.cfg.num_items, rng, rating_range=self.cfg.rating_range
                )
                self.version = 0
                self._save()
            return
        meta, arrays = ck
        if meta.get("party") != self.party or meta.get("fingerprint") != self.fingerprint:
            raise CorruptState(
                f"checkpoint in {self.cfg.state_dir} belongs to party {meta.get('party')} with another "
                "configuration; refusing to start (use a fresh state_dir)"
            )
        self.version = int(meta["version"])
        self.last_round = int(meta["last_round"])
        self.last_included = [int(u) for u in meta.get("included", [])]
        self.m_prime = meta.get("m_prime")
        self.mean_count = meta.get("mean_count")
        if self.cfg.m_prime is not None and self.m_prime not in (None, self.cfg.m_prime):
            raise CorruptState(f"checkpoint has m_prime={self.m_prime}, config says {self.cfg.m_prime}")
        if self.m_prime is None:
            self.m_prime = self.cfg.m_prime
        self.table, self.dense = arrays["table"], arrays["dense"]
        if self.table.shape != (self.cfg.num_items, self.width) or self.dense.shape != (self.dense_size,):
            raise CorruptState("checkpoint model shape does not match the configuration")
        if self.opt is not None:
            for name in _OPT_FIELDS:
                cur = getattr(self.opt, name)
                arr = arrays["opt" + name]
                if arr.shape != cur.shape:
                    raise CorruptState(f"checkpoint optimizer field {name} has shape {arr.shape}")
                setattr(self.opt, name, arr.astype(cur.dtype))
            self.opt.steps = int(meta["opt_steps"])

    def _checkpoint_doc(self, version: int, last_round: int, included: list[int], table: np.ndarray,
                        dense: np.ndarray, opt: ServerAdam | None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta = {
            "format": 1, "party": self.party, "fingerprint": self.fingerprint, "version": version,
            "last_round": last_round, "included": included, "m_prime": self.m_prime,
            "mean_count": self.mean_count, "opt_steps": opt.steps if opt is not None else 0,
            "model_sha256": model_sha256(table, dense),
        }
        arrays = {"table": table, "dense": dense}
        if opt is not None:
            arrays.update({"opt" + n: getattr(opt, n) for n in _OPT_FIELDS})
        return meta, arrays

    def _save(self) -> None:
        meta, arrays = self._checkpoint_doc(self.version, self.last_round, self.last_included, self.table,
                                            self.dense, self.opt)
        save_checkpoint(self.cfg.state_dir / CHECKPOINT, meta, arrays)

    def _recover(self) -> None:
        """Round ids stay monotonic; rounds left open by a crash end as aborted (or as
        committed, if the checkpoint says so)."""
        self.max_round = self.last_round
        open_rounds: dict[int, dict[str, Any]] = {}
        for rec in self.journal.records():
            r = int(rec.get("round", -1))
            self.max_round = max(self.max_round, r)
            ev = rec.get("ev")
            if ev == "open":
                open_rounds[r] = rec
            elif ev in FINAL:
                open_rounds.pop(r, None)
                self._remember(r, ev, rec.get("included"), rec.get("reason", ""))
        for r in sorted(open_rounds):
            if r == self.last_round:
                rec = {"ev": COMMITTED, "round": r, "version": self.version, "included": self.last_included,
                       "reason": "recovered from checkpoint"}
            else:
                rec = {"ev": ABORTED, "round": r, "reason": "server restarted during the round"}
            self.journal.append(rec)
            self._remember(r, rec["ev"], rec.get("included"), rec["reason"])

    def _remember(self, r: int, state: str, included: list[int] | None, reason: str) -> None:
        self.outcomes[r] = {"round_id": r, "state": state, "included": included, "reason": reason}
        self.outcomes.move_to_end(r)
        while len(self.outcomes) > _KEEP_OUTCOMES:
            self.outcomes.popitem(last=False)

    # ================================================================== helpers
    def stop(self) -> None:
        self._stopping = True
        with self._wake:
            self._wake.notify_all()

    def _require_party(self, party: int, what: str) -> None:
        if self.party != party:
            raise NotFound(f"{what} is served by server {party}, this is server {self.party}")

    def _current(self, r: int, *, states: tuple[str, ...] = (OPEN,)) -> _Round:
        rnd = self.round
        if rnd is None or rnd.round_id != r:
            cur = "none" if rnd is None else str(rnd.round_id)
            raise Conflict(f"round {r} is not the current round (current: {cur})")
        if rnd.state not in states:
            raise Conflict(f"round {r} is closed ({rnd.state}): messages for it are refused" if rnd.state != OPEN
                           else f"round {r} is still open")
        return rnd

    def model_message(self) -> bytes:
        with self.lock:
            if self.version < 0:
                raise Conflict("no model yet (server 0 has not synced this server)")
            return messages.encode_model(self.version, self.table, self.dense)

    def model_sha(self) -> str | None:
        return None if self.version < 0 else model_sha256(self.table, self.dense)

    def _round_doc(self, rnd: _Round) -> dict[str, Any]:
        return {
            "round_id": rnd.round_id,
            "state": rnd.state,
            "model_version": rnd.version,
            "n_p": rnd.n_p,
            "deadline_unix": rnd.deadline,
            "config": dataclasses.asdict(rnd.rc),
            "protocol": {"name": self.cfg.protocol, "layout": self.cfg.layout, "relay": self.cfg.relay,
                         "expansion": self.cfg.expansion, "layout_seed": self.cfg.layout_seed},
            "model": {"name": self.cfg.model, "hparams": self.cfg.model_hparams},
            "training": {"lr": self.cfg.lr, "beta1": self.cfg.beta1, "beta2": self.cfg.beta2,
                         "eps": self.cfg.eps, "ring_bits": self.cfg.ring_bits,
                         "frac_bits": self.cfg.frac_bits},
            "fingerprint": self.fingerprint,
        }

    # ================================================================== status
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
                "sync_pending": self._sync_pending,
                "count": {"state": self.count.state, "users": len(self.count.shares)},
                "round": None if rnd is None else {
                    "round_id": rnd.round_id, "state": rnd.state, "n_p": rnd.n_p,
                    "retrieved": len(rnd.retrieved), "uploaded": len(rnd.uploaded),
                    "deadline_unix": rnd.deadline,
                },
            }

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
        """Outcome of round ``r``: state, and (admin) the included users or (device) whether
        the device was included."""
        with self.lock:
            rnd = self.round
            if rnd is not None and rnd.round_id == r:
                doc = {"round_id": r, "state": rnd.state, "included": rnd.included, "reason": rnd.reason}
            elif r in self.outcomes:
                doc = dict(self.outcomes[r])
            else:
                raise NotFound(f"round {r} is unknown to this server")
        if user is not None:
            inc = doc.pop("included")
            doc["included"] = None if inc is None else user in inc
        return doc

    # ================================================================== Eq. 11 counts
    def count_open(self, users: list[int] | None, *, from_peer: bool = False) -> dict[str, Any]:
        """Start (or restart) the count phase; server 0 also restarts server 1's."""
        if not from_peer:
            self._require_party(0, "opening the count phase")
        ids = None if users is None else frozenset(self._user_list(users, "users"))
        with self.lock:
            if self.m_prime is not None and not from_peer:
                raise Conflict(f"m' is already fixed ({self.m_prime})")
        if not from_peer:
            try:
                self.peer.post_json("/v1/peer/count/open", {"users": None if ids is None else sorted(ids)})
            except (RemoteError, Unreachable) as exc:
                raise _peer_error("server 1 did not open the count phase", exc) from None
        with self.lock:
            self.count = _Count(users=ids, state="open")
        return {"state": "open"}

    def count_submit(self, user: int, body: bytes) -> None:
        share = messages.decode_count(body, ring_bits=self.cfg.ring_bits)
        with self.lock:
            c = self.count
            if c.state != "open":
                raise Conflict("the count phase is not open")
            if c.users is not None and user not in c.users:
                raise Forbidden(f"user {user} is not expected in the count phase")
            if user in c.shares:
                raise Conflict(f"user {user} already sent its count share")
            c.shares[user] = share

    def _count_sum(self, include: list[int]) -> np.ndarray:
        acc = np.zeros(1, self.fp.dtype)
        for u in include:
            acc += self.count.shares[u]
        return acc

    def peer_count_close(self) -> list[int]:
        with self.lock:
            if self.count.state not in ("open", "closed"):
                raise Conflict("the count phase is not open")
            self.count.state = "closed"
            return sorted(self.count.shares)

    def peer_count_share(self, include: list[int]) -> bytes:
        with self.lock:
            c = self.count
            if c.state != "closed":
                raise Conflict("the count phase is not closed")
            missing = set(include) - set(c.shares)
            if missing:
                raise Conflict(f"no count share of user(s) {sorted(missing)[:5]}")
            c.include = list(include)
            return messages.encode_count(self._count_sum(include), self.cfg.ring_bits)

    def count_close(self) -> dict[str, Any]:
        """Server 0: agree on the users with server 1, open the total, fix m' (Eq. 11)."""
        self._require_party(0, "closing the count phase")
        with self.lock:
            if self.count.state != "open":
                raise Conflict("the count phase is not open")
            self.count.state = "closed"
            mine = set(self.count.shares)
        try:
            theirs = self.peer.post_json("/v1/peer/count/close")["users"]
            include = sorted(mine & {int(u) for u in theirs})
            if not include:
                raise Conflict("no user sent its count share to both servers")
            peer_share = self.peer.request("POST", "/v1/peer/count/share", json_body={"include": include}).content
        except (RemoteError, Unreachable) as exc:
            with self.lock:
                self.count.state = "open"
            raise _peer_error("server 1 did not close the count phase", exc) from None
        peer = messages.decode_count(peer_share, ring_bits=self.cfg.ring_bits)
        with self.lock:
            total = int(reconstruct(self._count_sum(include), peer)[0])
            if total >= 2 ** (self.cfg.ring_bits - 1):
                self.count.state = "open"
                raise Conflict("the opened total does not fit the ring (inconsistent shares)")
            mean = total / len(include)
            self.m_prime = min(max(math.ceil(self.cfg.alpha * mean), 1), self.cfg.num_items)
            self.mean_count = mean
            self._save()
            self.journal.append({"ev": "m_prime", "round": -1, "m_prime": self.m_prime, "mean": mean,
                                 "users": len(include)})
            return {"m_prime": self.m_prime, "mean_count": mean, "users": len(include)}

    # ================================================================== opening rounds
    def _user_list(self, users: Any, name: str) -> list[int]:
        if not isinstance(users, list) or not users:
            raise InvalidParameters(f"{name} must be a non-empty list of user ids")
        out = []
        for u in users:
            if isinstance(u, bool) or not isinstance(u, int) or not 0 <= u < self.cfg.num_users:
                raise InvalidParameters(f"{name}: user id {u!r} is not an int in [0, {self.cfg.num_users})")
            out.append(u)
        if len(set(out)) != len(out):
            raise InvalidParameters(f"{name} has duplicate user ids")
        return out

    def _reconcile(self) -> int:
        """Server 0: make sure server 1 holds the same model version (re-sending the last sync
        if it missed it); return the next round id."""
        try:
            st = self.peer.get_json("/v1/peer/status")
        except (RemoteError, Unreachable) as exc:
            raise _peer_error("server 1 is unavailable", exc) from None
        if st.get("fingerprint") != self.fingerprint:
            raise Conflict("server 1 runs with a different protocol/model/training configuration")
        if int(st["model_version"]) == self.version - 1 or (int(st["model_version"]) < 0 and self.version == 0):
            self._sync_peer()
            if self._sync_pending:
                raise PeerUnavailable("server 1 did not accept the model sync")
            st = self.peer.get_json("/v1/peer/status")
        if int(st["model_version"]) != self.version or st.get("model_sha256") != self.model_sha():
            raise Conflict(
                f"server 1 holds model version {st['model_version']} ({st.get('model_sha256')}), "
                f"server 0 holds {self.version} ({self.model_sha()})"
            )
        return max(self.max_round, int(st.get("max_round", -1))) + 1

    def open_round(self, participants: list[int] | None = None, n_p: int | None = None,
                   deadline_s: float | None = None, quorum: int | None = None,
                   min_users: int | None = None) -> dict[str, Any]:
        """Server 0: open the next round (and on server 1)."""
        self._require_party(0, "opening rounds")
        ids = None if participants is None else frozenset(self._user_list(participants, "participants"))
        if ids is not None:
            n_p = len(ids)
        if isinstance(n_p, bool) or not isinstance(n_p, int) or not 1 <= n_p <= self.cfg.num_users:
            raise InvalidParameters(f"n_p must be an int in [1, {self.cfg.num_users}] (or give participants), got {n_p!r}")
        deadline_s = self.cfg.deadline_s if deadline_s is None else deadline_s
        if not (isinstance(deadline_s, (int, float)) and math.isfinite(deadline_s) and 0 < deadline_s <= 86400):
            raise InvalidParameters(f"deadline_s must be in (0, 86400], got {deadline_s!r}")
        quorum = n_p if quorum is None else quorum
        min_users = self.cfg.min_users if min_users is None else min_users
        for name, v in (("quorum", quorum), ("min_users", min_users)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= n_p:
                raise InvalidParameters(f"{name} must be an int in [1, n_p={n_p}], got {v!r}")
        with self._open_lock:
            with self.lock:
                if self.m_prime is None:
                    raise Conflict("m' is not known yet: run the count phase (Eq. 11) or set training.m_prime")
                if self.round is not None and self.round.state not in FINAL:
                    raise Conflict(f"round {self.round.round_id} is still {self.round.state}")
            r = self._reconcile()
            rc = self.protocol.round_config(r, self.cfg.num_items, self.width, self.dense_size, self.m_prime,
                                            self.cfg.ring_bits)
            rnd = _Round(r, rc, self.version, ids, n_p, time.time() + deadline_s, quorum, min_users)
            self.journal.append({"ev": "open", "round": r, "version": self.version, "n_p": n_p})
            self.max_round = r
            faults.hit("open")
            doc = self._round_doc(rnd)
            doc["participants"] = None if ids is None else sorted(ids)
            doc["quorum"], doc["min_users"] = quorum, min_users
            doc["model_sha256"] = self.model_sha()
            try:
                self.peer.post_json("/v1/peer/rounds", doc)
            except (RemoteError, Unreachable) as exc:
                self._end(rnd, ABORTED, f"server 1 did not open the round: {exc}", notify_peer=False)
                raise _peer_error("server 1 did not open the round", exc) from None
            with self.lock:
                self._begin(rnd)
                self._wake.notify_all()
            return self._round_doc(rnd) | {"participants": doc["participants"]}

    def _begin(self, rnd: _Round) -> None:
        self.role.begin_round(rnd.rc, self.fp.encode(self.table))
        if self.party == 0:
            rnd.dense_msg = messages.encode_dense(rnd.round_id, self.fp.encode(self.dense), rnd.rc.ring_bits)
        self.round = rnd

    def peer_open(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Server 1: mirror the round server 0 opened, after checking that both agree."""
        self._require_party(1, "peer round opening")
        try:
            rc = RoundConfig(**doc["config"])
            r = int(doc["round_id"])
            version = int(doc["model_version"])
            n_p = int(doc["n_p"])
            deadline = float(doc["deadline_unix"])
            quorum, min_users = int(doc["quorum"]), int(doc["min_users"])
            parts = doc.get("participants")
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise InvalidParameters(f"bad round document: {exc}") from None
        if doc.get("fingerprint") != self.fingerprint:
            raise Conflict("server 0 runs with a different protocol/model/training configuration")
        ids = None if parts is None else frozenset(self._user_list(parts, "participants"))
        expect = self.protocol.round_config(r, self.cfg.num_items, self.width, self.dense_size, rc.m_prime,
                                            self.cfg.ring_bits)
        if rc != expect or r != rc.round_id:
            raise Conflict(f"round configuration {rc} differs from this server's {expect}")
        with self.lock:
            if r <= self.max_round:
                raise Conflict(f"round {r} is not newer than round {self.max_round}")
            if version != self.version or doc.get("model_sha256") != self.model_sha():
                raise Conflict(f"server 0 is at model version {version}, this server at {self.version}")
            if self.round is not None and self.round.state not in FINAL:
                self._end(self.round, ABORTED, f"superseded by round {r}", notify_peer=False)
            rnd = _Round(r, rc, version, ids, n_p, deadline, quorum, min_users)
            self.journal.append({"ev": "open", "round": r, "version": version, "n_p": n_p})
            self.max_round = r
            self._begin(rnd)
        faults.hit("open")
        return {"round_id": r, "state": OPEN}

    # ================================================================== retrieval
    def _admit(self, rnd: _Round, user: int, admitted: set[int]) -> None:
        if rnd.participants is not None:
            if user not in rnd.participants:
                raise Forbidden(f"user {user} is not a participant of round {rnd.round_id}")
        elif user not in rnd.retrieved and len(rnd.retrieved | admitted) >= rnd.n_p:
            raise Conflict(f"round {rnd.round_id} is full ({rnd.n_p} users)")
        admitted.add(user)

    def retrieval(self, r: int, user: int, body: bytes) -> bytes | None:
        """A device's retrieval request; the reply (``None``: nothing to send back)."""
        if self.party == 0 and self.protocol.relay:
            # server 1 must hold the device's roots before server 0 evaluates anything, so that
            # a request server 1 would refuse is refused here without a change of state
            try:
                ready = self.peer.get_json(f"/v1/peer/rounds/{r}/ready", user=user)["ready"]
            except RemoteError as exc:
                if exc.status >= 500:
                    raise _peer_error("server 1 is unavailable", exc) from None
                raise Conflict(f"server 1: {exc.detail}") from None
            except Unreachable as exc:
                raise _peer_error("server 1 is unavailable", exc) from None
            if not ready:
                raise Conflict(f"user {user} must send its retrieval request to server 1 first")
        out = self._retrieve_batch((r, user, body))
        if self.party == 0 and self.protocol.relay:
            try:
                masked = self.peer.post_bytes(f"/v1/peer/rounds/{r}/relay-retrieval", out, user=user)
            except (RemoteError, Unreachable) as exc:
                raise _peer_error("server 1 did not answer the relayed retrieval (this user cannot take part "
                                  "in the round)", exc) from None
            with self.lock:
                self._current(r)
                return self.role.complete_retrieval(user, masked)
        return out

    def peer_ready(self, r: int, user: int) -> dict[str, bool]:
        """Server 1, relay: whether ``user`` sent its roots and awaits server 0's forward."""
        self._require_party(1, "relay readiness")
        with self.lock:
            rnd = self._current(r)
            return {"ready": user in rnd.retrieved and user not in rnd.relayed}

    def _retrieval_batch(self, items: list[tuple[int, int, bytes]]) -> list[Any]:
        results: list[Any] = [None] * len(items)
        with self.lock:
            todo: list[int] = []
            admitted: set[int] = set()
            for i, (r, user, body) in enumerate(items):
                try:
                    rnd = self._current(r)
                    self._admit(rnd, user, admitted)
                    todo.append(i)
                except SecembError as exc:
                    results[i] = exc
            if not todo:
                return results
            rnd = self.round
            outs = self.role.handle_retrieval_many([(items[i][1], items[i][2]) for i in todo])
            for i, out in zip(todo, outs):
                results[i] = out
                if not isinstance(out, BaseException):
                    _, user, body = items[i]
                    rnd.retrieved.add(user)
                    rnd.log.append(("retrieval", user, body))
            n = len(rnd.retrieved)
        if outs and not all(isinstance(o, BaseException) for o in outs):
            faults.hit("retrieval", n)
        return results

    def peer_relay_retrieval(self, r: int, user: int, body: bytes) -> bytes:
        """Server 1, relay: answer server 0's forwarded keys."""
        self._require_party(1, "relay retrieval")
        return self._relay_batch((r, user, body))

    def _relay_retrieval_batch(self, items: list[tuple[int, int, bytes]]) -> list[Any]:
        results: list[Any] = [None] * len(items)
        with self.lock:
            todo = []
            for i, (r, user, body) in enumerate(items):
                try:
                    self._current(r)
                    todo.append(i)
                except SecembError as exc:
                    results[i] = exc
            if todo:
                rnd = self.round
                outs = self.role.relay_retrieval_many([(items[i][1], items[i][2]) for i in todo])
                for i, out in zip(todo, outs):
                    results[i] = out
                    if not isinstance(out, BaseException):
                        rnd.log.append(("relay_retrieval", items[i][1], items[i][2]))
                        rnd.relayed.add(items[i][1])
        return results

    def dense_message(self, r: int) -> bytes:
        self._require_party(0, "the dense vector")
        with self.lock:
            return self._current(r).dense_msg

    # ================================================================== upload
    def upload(self, r: int, user: int, body: bytes) -> None:
        """A device's upload: absorbed at once (and, with relay, forwarded to server 1)."""
        with self.lock:
            rnd = self._current(r)
            fwd = self.role.handle_upload(user, body)
            rnd.log.append(("upload", user, body))
            rnd.uploaded.add(user)
            n = len(rnd.uploaded)
        try:
            if fwd is not None:  # relay: server 0 forwards the correction words
                try:
                    self.peer.post_bytes(f"/v1/peer/rounds/{r}/relay-upload", fwd, user=user)
                except (RemoteError, Unreachable) as exc:
                    log.warning("round %d: forwarding user %d's upload failed: %s", r, user, exc)
                    raise _peer_error("server 1 did not take the forwarded upload (it will not count)", exc) from None
        finally:
            with self._wake:
                rnd.finished.add(user)
                self._wake.notify_all()
        faults.hit("upload", n)

    def peer_relay_upload(self, r: int, user: int, body: bytes) -> None:
        self._require_party(1, "relay upload")
        with self.lock:
            rnd = self._current(r)
            self.role.relay_upload(user, body)
            rnd.log.append(("relay_upload", user, body))
            rnd.uploaded.add(user)
            n = len(rnd.uploaded)
        faults.hit("upload", n)

    # ================================================================== closing
    def _replayed(self, rnd: _Round, include: set[int]) -> ServerRole:
        """A fresh role fed the round's accepted messages, without the uploads of users
        outside ``include``."""
        role = self.protocol.make_server(self.party)
        role.begin_round(rnd.rc, self.fp.encode(self.table))
        by_kind: dict[str, list[tuple[int, bytes]]] = {}
        for kind, user, body in rnd.log:
            by_kind.setdefault(kind, []).append((user, body))
        for kind, many in (("retrieval", role.handle_retrieval_many), ("relay_retrieval", role.relay_retrieval_many)):
            if kind not in by_kind:
                continue
            for out in many(by_kind[kind]):
                if isinstance(out, BaseException):
                    raise out
        for user, body in by_kind.get("upload", []):
            if user in include:
                role.handle_upload(user, body)
        for user, body in by_kind.get("relay_upload", []):
            if user in include:
                role.relay_upload(user, body)
        return role

    def close_round(self, r: int, reason: str = "closed by the operator") -> dict[str, Any]:
        """Server 0: close round ``r`` now (idempotent); returns its outcome."""
        self._require_party(0, "closing rounds")
        with self.lock:
            rnd = self.round
            if rnd is None or rnd.round_id != r:
                if r in self.outcomes:
                    return self.round_status(r, None)
                raise NotFound(f"round {r} is unknown to this server")
            if rnd.state in FINAL or rnd.closing:
                wait = True
            else:
                wait = False
                rnd.closing = True
                rnd.state = CLOSING
                rnd.reason = reason
                uploaded = set(rnd.uploaded)
        if wait:
            rnd.done.wait(timeout=self.cfg.peer_timeout_s * 4)
            return self.round_status(r, None)
        try:
            self._close(rnd, uploaded)
        except Exception as exc:  # noqa: BLE001 - whatever happens, the round ends
            log.exception("round %d: close failed", r)
            self._end(rnd, ABORTED, f"close failed: {type(exc).__name__}: {exc}")
        return self.round_status(r, None)

    def _close(self, rnd: _Round, uploaded: set[int]) -> None:
        r = rnd.round_id
        faults.hit("close")
        try:
            theirs = self.peer.post_json(f"/v1/peer/rounds/{r}/close")["uploaded"]
        except (RemoteError, Unreachable) as exc:
            self._end(rnd, ABORTED, f"server 1 did not close the round: {exc}")
            return
        include = sorted(uploaded & {int(u) for u in theirs})
        if len(include) < rnd.min_users:
            self._end(rnd, ABORTED, f"{len(include)} user(s) uploaded to both servers, fewer than min_users={rnd.min_users}")
            return
        try:
            share = self.peer.request("POST", f"/v1/peer/rounds/{r}/share", json_body={"include": include}).content
        except (RemoteError, Unreachable) as exc:
            self._end(rnd, ABORTED, f"server 1 did not send its aggregate share: {exc}")
            return
        with self.lock:
            role = self.role if uploaded == set(include) else self._replayed(rnd, set(include))
            try:
                sparse_sum, dense_sum = role.combine(share)
            except SecembError as exc:
                self._end(rnd, ABORTED, f"combine failed: {exc}")
                return
            n = len(include)
            g_table = self.fp.decode(np.asarray(sparse_sum)) / n
            g_dense = self.fp.decode(np.asarray(dense_sum)) / n
            table, dense, opt = self.table.copy(), self.dense.copy(), copy.deepcopy(self.opt)
            opt.step(table, dense, g_table, g_dense)
            version = self.version + 1
            meta, arrays = self._checkpoint_doc(version, r, include, table, dense, opt)
            save_checkpoint(self.cfg.state_dir / CHECKPOINT, meta, arrays)  # the commit point
            faults.hit("commit")
            self.table, self.dense, self.opt = table, dense, opt
            self.version, self.last_round, self.last_included = version, r, include
            rnd.included = include
            self._sync_pending = True
            self._end(rnd, COMMITTED, rnd.reason, done=False)
        self._sync_peer()
        rnd.done.set()

    def _end(self, rnd: _Round, state: str, reason: str, *, notify_peer: bool = True, done: bool = True) -> None:
        with self.lock:
            if rnd.state in FINAL:
                return
            rnd.state, rnd.reason = state, reason
            rec: dict[str, Any] = {"ev": state, "round": rnd.round_id, "reason": reason}
            if state == COMMITTED:
                rec["version"], rec["included"] = self.version, rnd.included
            self.journal.append(rec)
            self._remember(rnd.round_id, state, rnd.included, reason)
            rnd.log = []  # the messages are needed only until the round ends
        if state == ABORTED:
            log.warning("round %d aborted: %s", rnd.round_id, reason)
            if self.party == 0 and notify_peer:
                try:
                    self.peer.post_json(f"/v1/peer/rounds/{rnd.round_id}/abort", {"reason": reason})
                except (RemoteError, Unreachable):
                    pass  # server 1 learns it when the next round opens
        if done:
            rnd.done.set()

    def _sync_peer(self) -> None:
        """Server 0: send server 1 the current model (after a commit, or when it missed it)."""
        with self.lock:
            msg = messages.encode_model(self.version, self.table, self.dense)
            r = self.last_round
        try:
            self.peer.post_bytes("/v1/peer/model", msg, round=r)
            ok = True
        except (RemoteError, Unreachable) as exc:
            log.warning("model sync to server 1 failed (will retry): %s", exc)
            ok = False
        with self.lock:
            self._sync_pending = not ok

    def _closer(self) -> None:
        """Server 0: close the round on quorum or deadline; retry a pending sync."""
        while not self._stopping:
            with self._wake:
                rnd = self.round
                timeout = 0.5
                if rnd is not None and rnd.state == OPEN:
                    timeout = max(0.0, min(timeout, rnd.deadline - time.time()))
                self._wake.wait(timeout=timeout)
                rnd = self.round
                due = (
                    rnd is not None and rnd.state == OPEN and not rnd.closing
                    and (len(rnd.finished) >= rnd.quorum or time.time() >= rnd.deadline)
                )
                sync = self._sync_pending
            if due:
                why = "quorum reached" if len(rnd.finished) >= rnd.quorum else "deadline passed"
                threading.Thread(target=self.close_round, args=(rnd.round_id, why), daemon=True).start()
            elif sync and (rnd is None or rnd.state in FINAL):
                self._sync_peer()
                if self._sync_pending:
                    time.sleep(0.5)

    # ================================================================== server 1's side of closing
    def peer_close(self, r: int) -> dict[str, Any]:
        self._require_party(1, "peer close")
        with self.lock:
            rnd = self._current(r, states=(OPEN, CLOSING))
            rnd.state = CLOSING
            out = {"uploaded": sorted(rnd.uploaded)}
        faults.hit("close")
        return out

    def peer_share(self, r: int, include: list[int]) -> bytes:
        self._require_party(1, "peer share")
        include = sorted(set(include))
        with self.lock:
            rnd = self._current(r, states=(CLOSING,))
            if rnd.share_include is not None:
                if rnd.share_include != include:
                    raise Conflict(f"round {r}: a share for another user set was already given")
                return rnd.share
            extra = set(include) - rnd.uploaded
            if extra:
                raise Conflict(f"round {r}: user(s) {sorted(extra)[:5]} did not upload to this server")
            role = self.role if rnd.uploaded == set(include) else self._replayed(rnd, set(include))
            rnd.share = role.aggregate_share()
            rnd.share_include = include
            rnd.included = include
        faults.hit("share")
        return rnd.share

    def peer_abort(self, r: int, reason: str) -> None:
        self._require_party(1, "peer abort")
        with self.lock:
            rnd = self.round
            if rnd is None or rnd.round_id != r:
                if r > self.max_round:
                    raise NotFound(f"round {r} is unknown to this server")
                return
        self._end(rnd, ABORTED, f"server 0: {reason}")

    def peer_model(self, body: bytes, r: int) -> dict[str, Any]:
        """Server 1: install the model server 0 synced (the next version, or the current one
        again -- idempotent)."""
        self._require_party(1, "model sync")
        m, w, p = self.cfg.num_items, self.width, self.dense_size
        with self.lock:
            try:
                table, dense = messages.decode_model(body, round_id=self.version + 1, num_items=m, width=w,
                                                     dense_size=p)
            except InvalidMessage:
                if self.version >= 0:
                    try:
                        table, dense = messages.decode_model(body, round_id=self.version, num_items=m, width=w,
                                                             dense_size=p)
                    except InvalidMessage:
                        pass
                    else:
                        if model_sha256(table, dense) == self.model_sha():
                            return {"model_version": self.version, "duplicate": True}
                        raise Conflict(f"a different model for version {self.version} was already installed") from None
                raise
            version = self.version + 1
            included = self.round.included if (self.round is not None and self.round.round_id == r) else []
            meta, arrays = self._checkpoint_doc(version, max(r, self.last_round), included or [], table, dense, None)
            save_checkpoint(self.cfg.state_dir / CHECKPOINT, meta, arrays)
            faults.hit("sync")
            self.table, self.dense, self.version = table, dense, version
            self.last_round, self.last_included = max(r, self.last_round), included or []
            rnd = self.round
            if rnd is not None and rnd.round_id == r and rnd.state not in FINAL:
                self._end(rnd, COMMITTED, "synced by server 0")
            elif r >= 0 and self.outcomes.get(r, {}).get("state") != COMMITTED:
                self.journal.append({"ev": COMMITTED, "round": r, "version": version, "included": None,
                                     "reason": "synced by server 0"})
                self._remember(r, COMMITTED, None, "synced by server 0")
            return {"model_version": version, "duplicate": False}

