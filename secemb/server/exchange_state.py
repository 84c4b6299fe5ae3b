"""A one-server deployment's durable state (``secemb serve`` of ``secemb admin init --protocol P``;
docs/deployment.md, "One server"): the round ids it has used and, after each committed round,
what its node needs to go on, in ``DEPLOYMENT/state/`` (0700), written with the two-server
server's helpers (:mod:`secemb.server.persist`)::

    binding.json     the directory's owner: the state format and the configuration's
                     fingerprint, written atomically (fsync-ed) at the first start, before
                     any round opens
    checkpoint.npz   the commit point of a round (atomic): the node's state
                     (:class:`~secemb.protocols.exchange.DurableExchangeNode`: e.g. SFSL's public
                     model, SecEA's HELLOs and entity union), the committed round's document, the
                     public model's SHA-256 and the configuration's fingerprint
    journal.jsonl    one fsync-ed record per round opened (before the node opens it), per
                     round ended (committed, aborted, or refused by the node), per clear of
                     the strikes by the operator, and (session 25) per finding of an open
                     round: its ``proven_bad_shares`` so far, after a stage close that leaves
                     it open with a device proven that no earlier finding record names, before
                     the round goes on (session 26: and after the close that ends it, before
                     its checkpoint and end record)
    server.lock      (session 25) the running server's hold on the directory
                     (:func:`~secemb.server.persist.hold_state_dir`, ``secemb serve``): empty

At start (:class:`ExchangeState`) the checkpoint is restored into the fresh node and checked
(the model's SHA-256), and a round the journal shows opened but never ended -- open when the
server stopped, or aborted while it ran with its end record refused by the disk -- is recorded
as aborted: no half state, its id is not used again (SecEA's one-time pads depend on it).  The
round document the devices and the operator read (``GET /v1/exchange/round``) is then the last
round's, so ``secemb admin open-round`` continues from its id; the server refuses an id that does
not follow the last one used (409).

**Strikes** (issue 34; docs/deployment.md, "Strikes: a device proven to cheat"): a device
named in a round's ``proven_bad_shares`` (a *signed* secure aggregation showed it cheating:
:func:`~secemb.protocols.exchange.secagg_findings`) has a strike for that round, whether the
round committed or aborted; an unsigned aggregation's name and a complaint never strike.  A
device with :data:`~secemb.server.verify.MAX_REJECTIONS` strikes (the two-server door's limit)
is refused at the app's door (:class:`~secemb.server.exchange_app.StageCloser`) until the
operator clears the strikes (:meth:`ExchangeState.clear_strikes`, journaled with the last ended
round's id).  A running server counts a round's strikes when the round ends.  At start the
strikes are rebuilt from the journal's records of the rounds after the last clear's round -- a
round's names are those of its end record and of its finding records (:meth:`ExchangeState.found`),
each device once a round -- so a restart keeps them (end records written before session 24 have no
``proven_bad_shares``: they strike nobody); the checkpoint's round, when the disk took the
checkpoint but refused its end record, gets that record at start, and its strikes count.  A round
open when the server stopped is recorded as aborted with the names its finding records hold
(session 25: before, what its signed aggregations had proven was in memory only, and the
restart forgot it); so is any other opened round without an end record -- one aborted while the
server ran whose end record the disk refused, and the server stopped before writing it.  Such a
round may lie before the checkpoint's round in a journal written before session 27 (an aborted
round's refused end record was not retried; its reason then says so); a round's missing end record
holds up the next opening (session 27: an aborted round's too), so only the last round can lack
one (session 25 red team, F3: before, only the rounds after the checkpoint's were recorded, and
such a round's findings were forgotten at the restart).  A device first proven
at the close that ended the round gets a finding record before the round's checkpoint and end
record (session 26: before, it was named in the end record only, and a restart after the disk
refused that record, or a committed round's checkpoint, did not strike it).

The journal is read in order (session 26, red team F's S26-F2): a round id the node refused stays
free, so one id can have several openings, and a ``refused`` end record ends only the opening
before it -- an ``open`` record of the id discards it (before, the end records were keyed by id:
a refused opening's end was taken for the end of a later opening of the id that was open when
the server stopped, which was then not recorded aborted, and its id opened again).  An opening
of an id after its other end record (committed or aborted), and a finding record after a round's
end record, are records the server never writes: a corrupt journal.  So is a finding or end record
naming, in ``proven_bad_shares`` or :data:`DROPOUTS`, a device outside the users of the opening
it belongs to (session 27, red team G's S27-G4: before, such a name was counted, and refused at
the door a device that was never in the round), and so is a record naming a device twice; the
running server drops such a name from a node before it counts or journals it (logged as an error;
the nodes name only a round's devices), and keeps each name once (red team L's S27-L1: a name the
node gave twice was counted once, journaled twice, and the restart refused the journal).

**Aborting dropouts** (session 26, red team F's S26-F1; docs/deployment.md, "Aborting
dropouts"): an aborted round names in its :data:`DROPOUTS` the devices its secure aggregations
named for the abort: under ``min_row_holders`` the devices whose own rows breached the rule (each
dropped out, or did not sign the survivor list, holding a row then left too few holders), and
(session 27, red team G's S27-G2) a device whose secret the complaints against it alone left
short at Unmasking -- in SFSL's PSU or secure sum, or SecEA's set-up.  A suspicion, not a proof
(an honest dropout does the same, and colluding devices can complain an honest device's secret
short: docs/security.md), so not a strike.  They are counted like the strikes but apart, and as
a rate (session 27): the server numbers the rounds it ran (committed or aborted, in round order;
an opening the node refused is no round), and :attr:`ExchangeState.dropouts` counts, for each
device, the rounds among the last :data:`~secemb.server.verify.ABORT_WINDOW` that name it (each
device once a round, rebuilt from the end records and finding records after the last clear, the
finding record written before the end record; the rounds are numbered from the end records, so a
restart numbers them as the running server did).  A device at
:data:`~secemb.server.verify.MAX_ABORTS` there is refused at the door too, until enough of those
rounds leave the window (:meth:`ExchangeState.let_in_after`) or the same clear (a SecEA silo
refused before its set-up has committed: the clear only, as the node refuses a set-up without
every silo and such an opening is no round).

**Binding** (session 24, helper L): the binding makes the directory its configuration's from
its first start, not from its first checkpoint only (the checkpoint records the fingerprint
too, but a journal without one -- no round committed yet -- was taken by any deployment, which
then went on after the other's round ids and counted its strikes).  A directory from before the
binding (a journal or checkpoint, no ``binding.json``) starts as it did and is bound at that start.

A binding, checkpoint or journal that cannot be read, or that belongs to another configuration, is
:class:`~secemb.server.persist.CorruptState`: the server does not start and nothing is written.
A checkpoint the disk refuses after a commit (:class:`~secemb.server.persist.StorageError`) is
retried when the next round opens, which is refused (503) until it is written; should the
server stop before, that round is aborted at the restart and the model is the one before it.
Likewise an ended round's end record (session 27, red team G's S27-G3), and a refused opening's
(red team L's S27-L2): owed, written before the next opening, which is refused (503) until it is;
a round thus never opens after one whose names (or refusal) the journal would not hold.  Should
the server stop before, the restart records the round aborted with what its finding records name
(the names of a round whose finding record the disk refused too, counted by the running server
only, are then lost: nothing durable holds them; a refused opening is then a round, one more on
the window's clock than the running server counted, and its id is used).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, check_int
from secemb.protocols.exchange import DurableExchangeNode, ExchangeServer
from secemb.server.persist import (
    CorruptState, Journal, StorageError, atomic_write, load_checkpoint, remove_stale_temporaries, save_checkpoint,
)
from secemb.server.verify import ABORT_WINDOW, MAX_ABORTS, MAX_REJECTIONS

__all__ = ["DROPOUTS", "ExchangeState", "fingerprint"]

FORMAT = "secemb-exchange-state/1"
CHECKPOINT = "checkpoint.npz"
JOURNAL = "journal.jsonl"
BINDING = "binding.json"
#: the journal's record of the operator clearing the strikes
STRIKES_CLEARED = "strikes_cleared"
#: the journal's record of what an open round's signed secure aggregations have proven so far
FOUND = "found"
#: the field of a round's end document (and of its finding record) naming the devices named for its
#: abort: a dropout that breached ``min_row_holders``, or a secret the complaints against its owner
#: alone left short (a suspicion: see the module docstring)
DROPOUTS = "aborting_dropouts"
_RESTART = "open when the server stopped: aborted at the restart"
#: the reason recorded for an opened round without an end record before the checkpoint's round
_UNRECORDED = "aborted while the server ran, its end record refused by the disk: recorded at the restart"

log = logging.getLogger(__name__)


def fingerprint(doc: dict[str, Any]) -> str:
    """The SHA-256 of what a server's state depends on in a deployment document: its
    ``protocol``, ``run`` and ``options``."""
    key = {k: doc.get(k) for k in ("protocol", "run", "options")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _round_id(rec: dict[str, Any], where: str) -> int:
    return check_int(f"{where}: round_id", rec.get("round_id"), low=0, error=CorruptState)


def _user_set(users: Any) -> set[int]:
    """The device ids of a round's ``users`` as recorded (an opening record's list, or a round
    document's): its integer entries, none if it is not a list."""
    if not isinstance(users, list):
        return set()
    return {u for u in users if isinstance(u, int) and not isinstance(u, bool)}


def _proven(doc: dict[str, Any], where: str, users: Any, name: str = "proven_bad_shares") -> list[int]:
    """The devices an ended round's document (or a finding record) names in its field ``name``:
    ``proven_bad_shares``, or :data:`DROPOUTS` (none if it has no such field: a record written
    before session 24, resp. 26, a refused round), each one of the round's ``users`` (its opening
    record's list; session 27, red team G's S27-G4).

    Raises
    ------
    CorruptState: a value that is not a list of distinct device ids, or one naming a device outside
        ``users`` (the server names only a round's own devices).
    """
    got = doc.get(name, [])
    if not isinstance(got, list):
        raise CorruptState(f"{where}: {name} is not a list: {got!r:.80}")
    ids = [check_int(f"{where}: a device of {name}", u, low=0, error=CorruptState) for u in got]
    if len(set(ids)) != len(ids):
        raise CorruptState(f"{where}: {name} names a device twice: {ids!r:.80}")
    outside = sorted(set(ids) - _user_set(users))
    if outside:
        raise CorruptState(f"{where}: {name} names device(s) {outside!r:.80}, not among the round's users "
                           f"{users!r:.80}: the server names only the devices a round was opened for")
    return ids


class ExchangeState:
    """The state of ``server`` (a one-server protocol's, fresh from ``make_server``) in
    ``state_dir``, restored on construction (see the module docstring).

    :meth:`opening`, :meth:`refused` and :meth:`ended` are called by the app
    (:class:`~secemb.server.exchange_app.StageCloser`, under its lock) around the node's calls;
    :meth:`refuses` is its door, :meth:`clear_strikes` the operator's clear.

    Raises
    ------
    CorruptState: a binding, checkpoint or journal that cannot be read, another configuration's,
        a state the node refuses, or a committed state for a node that cannot restore one (a
        binding of another configuration: before anything is written).
    StorageError: the disk refused to write the binding, or to record the aborted round (or the
        end of the checkpoint's round).
    """

    def __init__(self, state_dir: str | Path, fingerprint: str, server: ExchangeServer) -> None:
        self.dir, self.fingerprint, self.server = Path(state_dir), fingerprint, server
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        bound = self._bound()  # read before anything is written there
        ck = load_checkpoint(self.dir / CHECKPOINT)
        journal = Journal(self.dir / JOURNAL)
        remove_stale_temporaries(self.dir)
        self._journal = journal
        #: the ended round whose records the disk refused (:meth:`ended`): written before the next opening
        self._owed: dict[str, Any] | None = None
        #: the open round's id -> the devices its finding records name (:meth:`found`)
        self._found: dict[int, set[int]] = {}
        #: the round whose opening this server journaled (:meth:`opening`) and its users: the one a
        #: finding record may be of, the devices it may name (a restart refuses others: S27-G4)
        self._opened: tuple[int, set[int]] | None = None
        #: the last round's document (committed or aborted), ``None``: no round yet
        self.last: dict[str, Any] | None = self._restore(ck) if ck is not None else None
        ended: dict[int, dict[str, Any]] = {}
        opened: dict[int, list[int]] = {}
        found: dict[int, set[int]] = {}  # round -> the devices its finding records name
        dropped: dict[int, set[int]] = {}  # round -> the aborting dropouts its finding records name
        cleared_through = -1  # the strikes of rounds up to this id were cleared
        for rec in journal.records():
            if rec.get("event") == STRIKES_CLEARED:
                cleared_through = max(cleared_through, check_int(
                    f"journal {journal.path}: through_round", rec.get("through_round"), low=-1, error=CorruptState))
                continue
            rid = _round_id(rec, f"journal {journal.path}")
            if rec.get("event") == "open" and isinstance(rec.get("users"), list):
                if rid in ended:  # read in order: a refused end ends only the opening before it (S26-F2)
                    if ended[rid].get("state") != "refused":
                        raise CorruptState(f"journal {journal.path}: round {rid} opened again after its end record "
                                           f"(state {ended[rid].get('state')!r}): round ids are never used twice")
                    del ended[rid]
                opened[rid] = rec["users"]
            elif rec.get("event") == FOUND:
                if rid not in opened:
                    raise CorruptState(f"journal {journal.path}: a finding record of round {rid}, which no record "
                                       "opened before it")
                if rid in ended:
                    raise CorruptState(f"journal {journal.path}: a finding record of round {rid} after its end record")
                where = f"journal {journal.path}: the finding of round {rid}"
                found.setdefault(rid, set()).update(_proven(rec, where, opened[rid]))
                dropped.setdefault(rid, set()).update(_proven(rec, where, opened[rid], DROPOUTS))
            elif rec.get("event") == "end" and isinstance(rec.get("round"), dict):
                if _round_id(rec["round"], f"journal {journal.path}: the document of round {rid}") != rid:
                    raise CorruptState(f"journal {journal.path}: the end record of round {rid} holds a document "
                                       f"of round_id {rec['round']['round_id']}")
                ended[rid] = rec["round"]
            else:
                raise CorruptState(f"journal {journal.path}: a record that is neither an open nor an end: {rec!r}")
        committed = -1 if self.last is None else int(self.last["round_id"])
        lost = sorted(r for r, doc in ended.items() if doc.get("state") == "committed" and r > committed)
        if lost:
            # a committed round's end is journaled only after its checkpoint is written (_record_end), so the
            # checkpoint of round lost[-1] was lost or replaced by an older one: starting would serve an
            # older model under a later round's document (as the two-server server, docs/deployment.md,
            # "A lost checkpoint")
            have = "no checkpoint" if self.last is None else f"the checkpoint of round {committed}"
            raise CorruptState(
                f"{self.dir} has {have}, but its journal records {len(lost)} later committed round(s) (the last: "
                f"round {lost[-1]}): the checkpoint was lost. Refusing to start from an older model. Restore "
                f"{CHECKPOINT} of round {lost[-1]} from a backup into the state directory, or start the deployment "
                "over by moving the state directory aside (docs/deployment.md, 'A lost checkpoint').")
        missing = []  # end records to write once everything is checked
        if self.last is not None and committed not in ended:
            # the checkpoint was written, its end record was not (the disk refused it and the server
            # stopped before the next opening): record it now, so its strikes count (session 24 red team, F1)
            ended[committed] = self.last
            missing.append(committed)
        for rid in sorted(r for r in opened if r not in ended):
            # before the checkpoint's round (committed): aborted while the server ran, its end refused
            ended[rid] = {"round_id": rid, "users": opened[rid], "stages": [], "stage": None, "state": "aborted",
                          "reason": _RESTART if rid > committed else _UNRECORDED}
            if rid in found:  # what its signed aggregations had proven before the server stopped
                ended[rid]["proven_bad_shares"] = sorted(found[rid])
            if dropped.get(rid):  # its end record refused by the disk after the abort's finding record
                ended[rid][DROPOUTS] = sorted(dropped[rid])
            missing.append(rid)
        #: device -> the rounds since the operator last cleared the strikes whose
        #: ``proven_bad_shares`` name it (see the module docstring)
        self.strikes: dict[int, int] = {}
        #: the rounds this server has run (committed or aborted), the clock of the aborting dropouts'
        #: window (see the module docstring)
        self.rounds = 0
        #: device -> the numbers (:attr:`rounds` when each ended) of the rounds in the window and
        #: after the operator's last clear whose :data:`DROPOUTS` name it, ascending
        self._aborts: dict[int, list[int]] = {}
        for rid, doc in sorted(ended.items()):
            if doc.get("state") == "refused":
                continue
            # each device once a round: its end record's names and its findings', all of them its users
            # (those of the opening it ends; the document's own where the journal holds no opening)
            where, users = f"journal {journal.path}: round {rid}", opened.get(rid, doc.get("users"))
            proven = set(_proven(doc, where, users)) | found.get(rid, set())
            aborting = set(_proven(doc, where, users, DROPOUTS)) | dropped.get(rid, set())
            self.rounds += 1
            if self.last is None or doc["round_id"] > self.last["round_id"]:
                self.last = doc
            if rid > cleared_through:
                for u in proven:
                    self.strikes[u] = self.strikes.get(u, 0) + 1
                for u in aborting:
                    self._aborts.setdefault(u, []).append(self.rounds)
        self._slide()
        if not bound:
            atomic_write(self.dir / BINDING, json.dumps({"format": FORMAT, "fingerprint": fingerprint},
                                                        sort_keys=True).encode() + b"\n")
        for rid in missing:
            journal.append({"event": "end", "round_id": rid, "round": ended[rid]})

    def _bound(self) -> bool:
        """Whether the directory is bound already (``binding.json``, this configuration's); not
        bound: a fresh directory, or one from before the binding (see the module docstring).

        Raises
        ------
        CorruptState: a binding that cannot be read, or another configuration's.
        """
        path = self.dir / BINDING
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            if (self.dir / JOURNAL).exists() or (self.dir / CHECKPOINT).exists():
                log.warning("state directory %s has no %s (written before session 24): taken as this "
                            "configuration's and bound to it", self.dir, BINDING)
            return False
        except (OSError, ValueError) as exc:  # ValueError: not UTF-8 or not JSON
            raise CorruptState(f"{path} is unreadable: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("fingerprint"), str):
            raise CorruptState(f"{path}: not a one-server state's binding ({FORMAT!r})")
        if doc["fingerprint"] != self.fingerprint:
            raise CorruptState(f"state directory {self.dir} belongs to another configuration (its {BINDING}: "
                               f"fingerprint {doc['fingerprint']:.16}..., this one's {self.fingerprint:.16}...); "
                               "refusing to start: give this deployment a fresh state directory")
        return True

    def _restore(self, ck: tuple[dict[str, Any], dict[str, np.ndarray]]) -> dict[str, Any]:
        meta, arrays = ck
        where = f"checkpoint {self.dir / CHECKPOINT}"
        if meta.get("format") != FORMAT or not isinstance(meta.get("round"), dict) \
                or not isinstance(meta.get("node"), dict):
            raise CorruptState(f"{where}: not a one-server state ({FORMAT!r})")
        if meta.get("fingerprint") != self.fingerprint:
            raise CorruptState(f"{where} belongs to another configuration; refusing to start")
        _round_id(meta["round"], where)
        node = self.server.node
        if not isinstance(node, DurableExchangeNode):
            raise CorruptState(f"{where}: this protocol's server cannot restore a committed state "
                               "(no DurableExchangeNode); start a fresh deployment")
        try:
            node.restore(meta["node"], arrays)
        except (InvalidParameters, InvalidMessage, ProtocolError) as exc:
            raise CorruptState(f"{where}: {exc}") from None
        if hashlib.sha256(self.server.model()).hexdigest() != meta.get("model_sha256"):
            raise CorruptState(f"{where}: the restored model does not have the recorded SHA-256")
        return dict(meta["round"])

    def opening(self, round_id: int, users: list[int]) -> None:
        """Before the node opens round ``round_id``: write the last round's records still owed (its
        checkpoint and end record, an aborted round's end record -- :meth:`ended` -- or a refused
        opening's: :meth:`refused`), refuse an id that does not follow the last one, record the
        opening durably.

        Raises
        ------
        ProtocolError: ``round_id`` is not after the last round's.
        StorageError: the disk refused (nothing opened; what is owed stays owed).
        """
        if self._owed is not None:
            self._record_end(self._owed)
            self._owed = None
        if self.last is not None and round_id <= self.last["round_id"]:
            raise ProtocolError(f"round {round_id} does not follow round {self.last['round_id']} "
                                "(round ids are never used twice, restarts included)")
        self._journal.append({"event": "open", "round_id": round_id, "users": users})
        self._opened = (round_id, _user_set(users))

    def refused(self, round_id: int, reason: str) -> None:
        """The node refused to open round ``round_id`` (the opening just journaled): no round, its
        id stays free.  Its end record (state ``refused``) is written or, if the disk refuses it,
        logged and owed as an ended round's (:meth:`ended`): written at the next :meth:`opening`,
        which is refused while the disk refuses (session 27, red team L's S27-L2: before, the
        disk's error went to the caller and nothing owed the record, so a restart found the opening
        without an end and recorded the round aborted -- one round more on the window's clock than
        the running server counted, its id used).  A server that stops while it is owed still
        leaves that opening without an end: the restart records the round aborted."""
        self._end_or_owe({"round_id": round_id, "state": "refused", "reason": reason})

    def found(self, round_id: int, proven: list[int]) -> None:
        """Open round ``round_id``'s signed secure aggregations have proven ``proven`` to have
        cheated (its ``proven_bad_shares`` so far): journal the names (fsync-ed) unless they are
        journaled already, so that a restart that aborts the round still counts them (the
        strikes count when the round ends: :meth:`ended`, or that restart).  A disk that refuses
        is logged; the next call with the names writes them.  Names outside the round this server
        opened, or outside its users, are neither journaled nor counted (logged as an error: a
        restart refuses a journal holding them)."""
        proven = self._within(round_id, None, proven, "proven_bad_shares")
        known = self._found.get(round_id, set())
        if set(proven) <= known:
            return
        names = sorted(known | set(proven))
        if self._record_found(round_id, names):
            self._found = {round_id: set(names)}
            log.warning("round %s: devices %s were shown to have cheated in a signed secure aggregation (recorded; "
                        "their strikes count when the round ends)", round_id, names)

    def _record_found(self, round_id: int, names: list[int], dropouts: list[int] | None = None) -> bool:
        """Journal round ``round_id``'s finding record naming ``names`` (and, if any, the
        aborting ``dropouts``; fsync-ed); whether the disk took it (a refusal is logged)."""
        rec: dict[str, Any] = {"event": FOUND, "round_id": round_id, "proven_bad_shares": names}
        if dropouts:
            rec[DROPOUTS] = dropouts
        try:
            self._journal.append(rec)
        except StorageError as exc:
            log.error("round %s: devices %s proven to have cheated (aborting dropouts %s), not recorded: %s",
                      round_id, names, dropouts or [], exc)
            return False
        return True

    def _within(self, round_id: int, doc_users: Any, names: list[int], field: str) -> list[int]:
        """``names`` (a round's ``field``, from the node) less the devices that are not round
        ``round_id``'s users -- those of its opening if this server journaled it, else its
        document's ``doc_users`` (``None``: none) -- each left out logged as an error: the node
        names only a round's devices, and a restart refuses a journal naming others (S27-G4) --
        sorted, each once (session 27, red team L's S27-L1: a name given twice was counted once and
        journaled twice, and the restart refused that journal)."""
        users = self._opened[1] if self._opened is not None and self._opened[0] == round_id else _user_set(doc_users)
        outside = sorted(set(names) - users)
        if outside:
            log.error("round %s: the node named devices %s in %s, not among the users this server opened the "
                      "round for: not counted, not recorded", round_id, outside, field)
        return sorted(set(names) & users)

    def ended(self, doc: dict[str, Any]) -> None:
        """Round ``doc`` (its document with its final ``state``) has ended: a committed one is
        checkpointed (the commit point) before its end is recorded.  A disk that refuses is
        logged, and what it refused is owed: written at the next :meth:`opening` (which is refused
        while the disk refuses), so a restart after that counts what the running server counted
        (session 27, S27-G3: before, an aborted round's refused end record was not retried, and a
        name whose finding record the disk had refused too was lost at the restart).  The names of
        its ``proven_bad_shares`` and :data:`DROPOUTS` outside its users are dropped first (logged
        as an error), and each is kept once, sorted (:meth:`_within`).  Each device of its ``proven_bad_shares``
        or of its :meth:`found` records has a strike (once; counted at once, whatever the disk
        does).  Devices its ``proven_bad_shares`` names that no finding record holds yet (first
        proven at the close that ended the round) get one (fsync-ed) before the checkpoint and the
        end record, if this server journaled the round's opening: a restart that finds no end
        record (the disk refused it, or the checkpoint) still counts them (session 26).  Likewise
        each device of its :data:`DROPOUTS` (named for the round's abort: its dropout breached
        ``min_row_holders``, or the complaints against it alone left its secret short) has one more
        aborted round, counted at once, journaled in a finding record
        before the end record and raised as an alarm (a WARNING, not halting: a suspicion; S26-F1),
        and the window of the aborting dropouts moves on by this round (session 27)."""
        rid = doc["round_id"]
        doc = {**doc, **{field: self._within(rid, doc.get("users"), doc[field], field)
                         for field in ("proven_bad_shares", DROPOUTS) if field in doc}}
        self.last = doc
        self.rounds += 1
        self._slide()
        known = self._found.pop(rid, set())
        proven = set(doc.get("proven_bad_shares", [])) | known
        dropouts = sorted(set(doc.get(DROPOUTS, [])))
        if (proven != known or dropouts) and self._opened is not None and rid == self._opened[0]:
            self._record_found(rid, sorted(proven), dropouts)
        for u in sorted(proven):
            self.strikes[u] = self.strikes.get(u, 0) + 1
            log.warning("round %s: device %d was shown to have cheated in a signed secure aggregation (%d strike(s); "
                        "at %d it is refused until the operator clears the strikes)", doc["round_id"], u,
                        self.strikes[u], MAX_REJECTIONS)
        for u in dropouts:
            self._aborts.setdefault(u, []).append(self.rounds)
            log.warning("ALARM round %s: device %d was named for the abort (aborting_dropouts: its dropout "
                        "breached min_row_holders, or the complaints against it alone left its secret short; the "
                        "round's reason says which): %d of the last %d rounds; at %d it is refused until they "
                        "leave the window or the operator clears it: 'secemb admin clear-alarms'",
                        doc["round_id"], u, len(self._aborts[u]), ABORT_WINDOW, MAX_ABORTS)
        self._end_or_owe(doc)

    def _end_or_owe(self, doc: dict[str, Any]) -> None:
        """Write ended (or refused) round ``doc``'s records (:meth:`_record_end`); if the disk refuses,
        log it and owe them to the next :meth:`opening`."""
        try:
            self._record_end(doc)
        except StorageError as exc:
            self._owed = doc
            log.error("round %s %s but not recorded (owed: written before the next round opens, which is "
                      "refused until then): %s", doc["round_id"], doc["state"], exc)

    def _slide(self) -> None:
        """Forget the aborting dropouts of the rounds that left the window (the last
        :data:`~secemb.server.verify.ABORT_WINDOW` of the :attr:`rounds`)."""
        since = self.rounds - ABORT_WINDOW
        self._aborts = {u: kept for u, got in self._aborts.items() if (kept := [n for n in got if n > since])}

    @property
    def dropouts(self) -> dict[int, int]:
        """Device -> the rounds among the last :data:`~secemb.server.verify.ABORT_WINDOW` (after
        the operator's last clear) whose :data:`DROPOUTS` name it; devices with none are absent."""
        return {u: len(got) for u, got in sorted(self._aborts.items())}

    def let_in_after(self, user: int) -> int:
        """How many more rounds must end before the window lets device ``user`` in again: 0 if its
        aborting dropouts do not refuse it (fewer than :data:`~secemb.server.verify.MAX_ABORTS` in
        the window), else the rounds until the oldest of its last ``MAX_ABORTS`` leaves it (a
        refused device is in no round, so nothing it does adds one; the operator's clear lets it in
        at once)."""
        got = self._aborts.get(user, [])
        return 0 if len(got) < MAX_ABORTS else got[-MAX_ABORTS] + ABORT_WINDOW - self.rounds

    def refuses(self, user: int) -> bool:
        """Whether device ``user`` has :data:`~secemb.server.verify.MAX_REJECTIONS` strikes, or
        its dropouts aborted :data:`~secemb.server.verify.MAX_ABORTS` of the last
        :data:`~secemb.server.verify.ABORT_WINDOW` rounds: the door refuses it."""
        return self.strikes.get(user, 0) >= MAX_REJECTIONS or self.let_in_after(user) > 0

    def clear_strikes(self) -> dict[int, int]:
        """The operator's clear (``secemb admin clear-alarms``): journal it with the last ended
        round's id (a restart forgets the strikes and aborting dropouts of that round and those
        before), forget both; the strikes cleared.

        Raises
        ------
        StorageError: the disk refused (nothing cleared).
        """
        cleared = dict(sorted(self.strikes.items()))
        self._journal.append({"event": STRIKES_CLEARED, "through_round": -1 if self.last is None
                              else int(self.last["round_id"]), "strikes": {str(u): n for u, n in cleared.items()}})
        log.warning("the operator cleared the strikes of %d device(s) and the aborting dropouts of %d",
                    len(cleared), len(self.dropouts))
        self.strikes, self._aborts = {}, {}
        return cleared

    def _record_end(self, doc: dict[str, Any]) -> None:
        """Write ended round ``doc``'s records: a committed round's checkpoint (the node's state:
        the commit point), then its end record (fsync-ed).

        Raises
        ------
        StorageError: the disk refused one (a committed round's checkpoint may be written).
        """
        if doc["state"] == "committed":
            node = self.server.node
            if isinstance(node, DurableExchangeNode):
                meta, arrays = node.state()
            else:  # no restore: a restart refuses this checkpoint
                meta, arrays = {}, {}
            save_checkpoint(self.dir / CHECKPOINT, {
                "format": FORMAT, "fingerprint": self.fingerprint, "round": doc, "node": meta,
                "model_sha256": hashlib.sha256(self.server.model()).hexdigest()}, arrays)
        self._journal.append({"event": "end", "round_id": doc["round_id"], "round": doc})
