"""The server side of Bonawitz et al.'s secure aggregation (CCS 2017, Fig. 4; with
:attr:`~secemb.secagg.config.SecAggConfig.signed`, the active-adversary variant's relaying).

The server collects each stage's messages with a ``receive_*`` method (the transport tells it
who sent them) and closes the stage with the method that builds the next messages; closing a
stage fixes its set of live clients (U1, U2, U3, U4) and aborts the round with
:class:`~secemb.secagg.config.SecAggAborted` if fewer than ``threshold`` are left::

    receive_advertise(id, msg)*  keys_messages()      -> {id: keys}       U1
    receive_shares(id, msg)*     relayed_messages()   -> {id: relayed}    U2
    receive_masked(id, msg)*     survivors_messages() -> {id: survivors}  U3
    receive_consistency(id, msg)* signatures_messages() -> {id: signatures}  (signed round only)
    receive_unmask(id, msg)*     result()             -> sum over U3      U4

In a signed round the server relays what the clients signed (their certificates and
signatures in the key list, in a sparse round with each client's row set as a bitmap over the
round's candidate rows, and their signatures of U3); it checks each signature it can (a
device's under its certificate's key; the certificate under the roster's key when given
``pin``) so that one bad device cannot make the honest ones refuse the round, but the clients
do not rely on these checks.

:meth:`SecAggServer.result` reconstructs ``s^SK`` of every dropped client (U2 minus U3) to
remove its pairwise masks with the survivors and ``b`` of every survivor to remove the self
masks; what it returns is the sum of the survivors' inputs in Z_2^32 and nothing else.  In a
signed round it keeps every dealer's commitments to its shares (relayed with the ciphertexts),
checks each unmask share against its commitment and names in :attr:`SecAggServer.cheaters`
exactly the devices shown to have cheated: a holder whose unmask share is not the one it was
dealt, a dealer whose dealt shares do not open to the secret it committed to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from secemb.errors import InvalidMessage, ProtocolError
from secemb.secagg import keys, messages, shamir
from secemb.secagg.client import (
    ADVERTISE_DOMAIN,
    COMMITMENT_BYTES,
    CONSISTENCY_DOMAIN,
    SHARE_CIPHERTEXT_BYTES,
    SHARE_COMMITMENT_BYTES,
    advertised,
    key_list_digest,
    seed_commitment,
    share_committer,
    share_record_bytes,
    short_row,
    survivor_list,
)
from secemb.secagg.config import SecAggAborted, SecAggConfig, sign
from secemb.secagg.identity import CERTIFICATE_BYTES, SIGNATURE_BYTES, Certificate, RosterPin, verify
from secemb.secagg.prg import SEED_BYTES, mask_rows

__all__ = ["SecAggServer"]

_STAGES = ("advertise", "shares", "masked", "consistency", "unmask", "done")
_SECRETS = ("mask key", "self-mask seed")  # a secret (client, which): which 0 is s^SK, 1 is b
_CONSISTENCY, _UNMASK = 3, 4


class SecAggServer:
    """The server of one round.

    Parameters
    ----------
    config: the round's public parameters.
    pin: in a signed round, the roster the devices trust (public; optional): the server then
        also refuses an advertise message whose certificate is not the roster's.

    Raises
    ------
    InvalidMessage: a client message that is malformed, from an unknown or excluded client,
        a duplicate, or inconsistent with the round.
    ProtocolError: a method called out of order.
    SecAggAborted: fewer than ``threshold`` clients left when a stage closes; every later
        call raises it again.
    """

    def __init__(self, config: SecAggConfig, *, pin: RosterPin | None = None) -> None:
        self.config = config
        self.pin = pin
        self._stage = 0
        self._aborted: str | None = None
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._signed: dict[int, bytes] = {}  # signed round: commitment || certificate || signature [|| bitmap]
        self._commitment: dict[int, bytes] = {}  # signed round: the client's signed commitment to its seed
        self._signer: dict[int, bytes] = {}  # signed round: the device's certified signing key
        self._u3_sigs: dict[int, bytes] = {}
        self._key_list = b""  # signed round: SHA-256 of the key list every client was sent
        self._rows: dict[int, np.ndarray] = {}
        self._shares: dict[int, dict[int, bytes]] = {}  # sender -> recipient -> record (ciphertext [commitments])
        self._dealt: dict[int, dict[int, bytes]] = {}  # signed: dealer -> holder -> its two shares' commitments
        self._masked: dict[int, np.ndarray] = {}
        self._unmask: dict[int, tuple[dict[int, int], dict[int, int]]] = {}
        self._slot: dict[int, int] = {}
        self._pos: dict[int, np.ndarray] = {}
        self._member = np.zeros((0, 0), bool)
        self.u1: list[int] = []
        self.u2: list[int] = []
        self.u3: list[int] = []
        self.signers: list[int] = []
        self.u4: list[int] = []
        #: device of :attr:`cheaters` -> what it was found doing (text for the operator)
        self.cheated: dict[int, str] = {}
        #: client of U4 -> the clients of U2 whose shares its unmask message leaves out: those whose
        #: encrypted shares to it did not open (the sender's fault or a relay's; the server cannot
        #: check the claim, so it is for the operator to read, not proof against anyone)
        self.complaints: dict[int, list[int]] = {}
        #: the sorted clients the abort named (:attr:`~secemb.secagg.config.SecAggAborted.aborting_dropouts`;
        #: a suspicion): under ``min_row_holders`` those whose own rows breached the rule, at
        #: Unmasking the owners of secrets the complaints against them left short
        self.aborting_dropouts: list[int] = []

    # ------------------------------------------------------------------ helpers
    def _at(self, stage: int, name: str) -> None:
        if self._aborted is not None:
            raise SecAggAborted(self._aborted, tuple(self.aborting_dropouts))
        if self._stage != stage:
            raise ProtocolError(f"server: {name} called during stage {_STAGES[self._stage]}, "
                                f"expected {_STAGES[stage]}")

    def _abort(self, reason: str, dropouts: list[int] | None = None) -> SecAggAborted:
        """End the round (every later call raises again) and drop the inputs; the error to raise
        (naming ``dropouts``, the :attr:`aborting_dropouts`)."""
        self._aborted = f"round {self.config.round_id} aborted at {reason}"
        self.aborting_dropouts = sorted(dropouts or [])
        self._masked.clear()
        self._unmask.clear()
        return SecAggAborted(self._aborted, tuple(self.aborting_dropouts))

    def _short_row_owners(self, dropped: list[int], signers: list[int] | None = None) -> list[int]:
        """After :func:`~secemb.secagg.client.short_row` found a breach over U3: the clients whose
        own rows breach it -- each client of ``dropped`` whose rows alone do (rule 1), or, given
        ``signers``, each survivor outside them holding a row with at least ``m`` surviving
        holders but fewer than ``m`` signers (rule 2).  For rule 2 the rule runs once a
        non-signer ``v`` with every other non-signer's rows cut to those ``v`` holds: the rows at
        risk are then ``v``'s, each counted over every survivor and signer as before."""
        if signers is None:
            return [v for v in dropped if short_row(self.config, self.rows_of, self.u3, dropped=[v]) is not None]
        signed = set(signers)

        def within(v: int) -> Callable[[int], np.ndarray]:
            mine = self.rows_of(v)
            return lambda w: self.rows_of(w) if w in signed or w == v else np.intersect1d(self.rows_of(w), mine)

        return [v for v in self.u3 if v not in signed
                and short_row(self.config, within(v), self.u3, signers=signers) is not None]

    def _close(self, live: list[int], what: str) -> list[int]:
        live = sorted(live)
        if len(live) < self.config.threshold:
            raise self._abort(f"{what}: {len(live)} clients left, threshold {self.config.threshold}")
        self._stage += 1
        return live

    def _sender(self, client_id: int, msg: bytes, kind: str, allowed: list[int] | None,
                seen: Mapping[int, object]) -> memoryview:
        cid = self.config.check_id(client_id)
        if allowed is not None and cid not in allowed:
            raise InvalidMessage(f"{kind} from client {cid}, who is not in this stage of the round")
        if cid in seen:
            raise InvalidMessage(f"duplicate {kind} message from client {cid}")
        _, body = messages.open_frame(msg, kind, self.config.round_id, cid)
        return body

    def rows_of(self, client_id: int) -> np.ndarray:
        """The rows client ``client_id`` contributes (int64, increasing)."""
        return self._rows[client_id] if self.config.sparse else np.arange(self.config.length, dtype=np.int64)

    def _index_rows(self) -> None:
        """Membership of each client of U1 in each row anyone declared: a bool matrix
        ``(len(U1), len(all rows))`` and each client's positions among all rows."""
        every = np.unique(np.concatenate([self._rows[u] for u in self.u1]))
        self._slot = {u: k for k, u in enumerate(self.u1)}
        self._pos = {u: np.searchsorted(every, self._rows[u]) for u in self.u1}
        self._member = np.zeros((len(self.u1), every.size), bool)
        for u in self.u1:
            self._member[self._slot[u], self._pos[u]] = True

    def _shared_with(self, u: int) -> np.ndarray:
        """For each client of U1 (in order), which of ``u``'s rows it holds too: bool
        ``(len(U1), len(rows of u))``, ``u``'s own line all false."""
        out = self._member[:, self._pos[u]]
        out[self._slot[u]] = False
        return out

    def _common(self, u: int, v: int) -> np.ndarray:
        """The rows ``u`` and ``v`` both hold (int64, increasing)."""
        return self._rows[u][self._member[self._slot[v], self._pos[u]]]

    def _unopened(self, v: int, which: int, value: int) -> str | None:
        """Why ``value``, opened as client ``v``'s mask key (``which`` 0) or self-mask seed (1), is
        not that secret (``None`` when it is, as far as the round can check): a key out of range
        or whose public key is not the one ``v`` advertised; a seed out of range or, in a signed
        round, that does not hash to the commitment ``v`` signed (:func:`seed_commitment`)."""
        if which == 0:
            if value >= 1 << (8 * keys.KEY_BYTES):
                return "is out of range"
            if keys.KeyPair.from_private(value.to_bytes(keys.KEY_BYTES, "little")).public != self._keys[v][1]:
                return "does not match its public key"
            return None
        if value >= 1 << (8 * SEED_BYTES):
            return "is out of range"
        if self.config.signed and seed_commitment(self.config, v, value.to_bytes(SEED_BYTES, "little")) \
                != self._commitment[v]:
            return "does not match its signed commitment"
        return None

    @property
    def cheaters(self) -> list[int]:
        """The devices :meth:`result` found cheating (sorted; :attr:`cheated` says what each did).  In
        a signed round each is shown to have cheated: a holder that sent an unmask share other
        than the one its dealer committed to (all its shares are left out), or a dealer whose
        shares, as committed, do not open to the secret it committed to (docs/secagg.md, "Share
        commitments"); an honest device is never named.  In an unsigned round (honest-but-curious
        devices, no commitments) at most one: the holder whose shares the leave-one-out search
        left out, which a dealer that dealt it a share off the polynomial could have framed."""
        return sorted(self.cheated)

    def _name(self, device: int, what: str) -> None:
        """Record ``device`` in :attr:`cheaters` for ``what`` (the first finding is kept)."""
        self.cheated.setdefault(device, what)

    def _one_spare(self, use: list[int], group: list[tuple[int, int]],
                   points: shamir.PointSet) -> tuple[list[int], int] | None:
        """(Unsigned round.) Secrets ``group`` (each ``(client, which)``) from the shares of exactly
        ``threshold + 1`` holders ``use`` that do not lie on one polynomial: the opening, and the
        index in ``use`` of the holder left out, from the one ``threshold``-subset whose secrets all
        pass their checks (:meth:`_unopened`).  ``None`` where a secret of the group has no check
        (a seed: an unsigned round has no commitments) or where not exactly one subset passes (two
        wrong shares, or an owner that shared another secret).  Another subset passes only with an
        X25519 key collision: a subset with the wrong share opens a key other than the one whose
        public key was advertised.  The subsets' openings come from one set of coefficients
        (:func:`~secemb.secagg.shamir.openings_leaving_one_out`, ``use``'s weights from
        ``points``, U4's): ``O(t)`` a subset and secret (session 26: each subset's own
        coefficients, ``O(t^2)``, made the search ``O(t^3)``)."""
        if any(which == 1 for _, which in group):
            return None
        xs = points.subset([h + 1 for h in use])
        columns = [[self._unmask[h][which][v] for h in use] for v, which in group]
        passing = [(opened, i) for i, opened in enumerate(shamir.openings_leaving_one_out(xs, columns))
                   if all(self._unopened(v, which, value) is None
                          for (v, which), value in zip(group, opened, strict=True))]
        return passing[0] if len(passing) == 1 else None

    @property
    def survivors(self) -> list[int]:
        """U3: the clients whose inputs are in the sum (known once the masked stage closes)."""
        return list(self.u3)

    # ------------------------------------------------------------------ stage 0
    def receive_advertise(self, client_id: int, msg: bytes) -> None:
        """Record a client's two public keys (and its rows in a sparse round: within the round's
        candidate rows and every public row; in a signed round its seed commitment, its
        certificate and its signature of the keys, the commitment and, sparse, the row set, the
        last two checked)."""
        self._at(0, "receive_advertise")
        cfg = self.config
        body = self._sender(client_id, msg, "advertise", None, self._keys)
        cid = int(client_id)
        rd = messages.Reader(body, "advertise")
        c_pk, s_pk = keys.check_public(rd.take(keys.KEY_BYTES)), keys.check_public(rd.take(keys.KEY_BYTES))
        if cfg.signed:
            commitment = bytes(rd.take(COMMITMENT_BYTES))
            cert_bytes, sig = bytes(rd.take(CERTIFICATE_BYTES)), bytes(rd.take(SIGNATURE_BYTES))
        rows = rd.increasing(cfg.length, "rows") if cfg.sparse else None
        rd.end()
        bitmap = b""
        if rows is not None:
            if cfg.public_from is not None \
                    and int(np.count_nonzero(rows >= cfg.public_from)) != cfg.length - cfg.public_from:
                raise InvalidMessage(f"advertise of client {cid}: its rows must include every row from "
                                     f"{cfg.public_from} on")
            got = cfg.row_bitmap(rows)
            if got is None:
                raise InvalidMessage(f"advertise of client {cid}: rows outside the round's candidate rows")
            bitmap = got if cfg.signed else b""
        if cfg.signed:
            signer = (self.pin.certificate(cert_bytes, cid).public if self.pin is not None
                      else Certificate.named_key(cert_bytes))
            verify(signer, ADVERTISE_DOMAIN, advertised(cfg, cid, c_pk, s_pk, commitment, bitmap), sig,
                   f"advertise of client {cid}")
            self._signed[cid], self._signer[cid] = commitment + cert_bytes + sig + bitmap, signer
            self._commitment[cid] = commitment
        self._keys[cid] = (c_pk, s_pk)
        if rows is not None:
            self._rows[int(client_id)] = rows

    def keys_messages(self) -> dict[int, bytes]:
        """Close AdvertiseKeys (U1 = clients that advertised) and build each client's key
        list (in a signed round each entry with its certificate and signature, and in a sparse
        one then the client's signed row set, the same list for every client: one message, the
        same bytes object for all; in an unsigned sparse round followed by, for each client of
        the list, a bitmap of ``ceil(len(rows) / 8)`` bytes marking the recipient's rows that
        client holds too)."""
        self._at(0, "keys_messages")
        self.u1 = self._close(list(self._keys), "AdvertiseKeys")
        head = len(self.u1).to_bytes(4, "little") + b"".join(
            v.to_bytes(4, "little") + self._keys[v][0] + self._keys[v][1] + self._signed.get(v, b"")
            for v in self.u1)
        if self.config.sparse:
            self._index_rows()
        self._key_list = key_list_digest(head)  # a signed round's key list is the same for every client
        if self.config.signed:  # one copy, not one per client (n copies of n row sets: O(n^2) bytes held)
            msg = messages.frame("keys", self.config.round_id, messages.SERVER, head)
            return {u: msg for u in self.u1}
        out = {}
        for u in self.u1:
            tail = b""
            if self.config.sparse:  # per peer, a bitmap over u's rows (little bit order)
                tail = np.packbits(self._shared_with(u), axis=1, bitorder="little").tobytes()
            out[u] = messages.frame("keys", self.config.round_id, messages.SERVER, head, tail)
        return out

    # ------------------------------------------------------------------ stage 1
    def receive_shares(self, client_id: int, msg: bytes) -> None:
        """Record a client's encrypted shares, one for every other client of U1 (in a signed round
        each with the commitments to its two shares, and then the commitments to the client's
        own shares: kept for :meth:`result`)."""
        self._at(1, "receive_shares")
        body = self._sender(client_id, msg, "shares", self.u1, self._shares)
        rd = messages.Reader(body, "shares")
        cid = int(client_id)
        entries = rd.records(share_record_bytes(self.config), "recipient")
        own = bytes(rd.take(2 * SHARE_COMMITMENT_BYTES)) if self.config.signed else b""
        rd.end()
        if [v for v, _ in entries] != [v for v in self.u1 if v != cid]:
            raise InvalidMessage(f"shares from client {cid} must go to exactly the other {len(self.u1) - 1} "
                                 f"clients of the key list, got {len(entries)}")
        self._shares[cid] = dict(entries)
        if self.config.signed:
            self._dealt[cid] = {v: rec[SHARE_CIPHERTEXT_BYTES:] for v, rec in entries}
            self._dealt[cid][cid] = own

    def relayed_messages(self) -> dict[int, bytes]:
        """Close ShareKeys (U2 = clients that sent shares) and give each client of U2 the
        ciphertexts addressed to it by the other clients of U2 (in a signed round each with the
        commitments to its shares that the server keeps)."""
        self._at(1, "relayed_messages")
        self.u2 = self._close(list(self._shares), "ShareKeys")
        out = {}
        for v in self.u2:
            recs = [u.to_bytes(4, "little") + self._shares[u][v] for u in self.u2 if u != v]
            out[v] = messages.frame("relayed", self.config.round_id, messages.SERVER,
                                    len(recs).to_bytes(4, "little"), *recs)
        self._shares.clear()
        return out

    # ------------------------------------------------------------------ stage 2
    def receive_masked(self, client_id: int, msg: bytes) -> None:
        """Record a client's masked input (``len(rows) x width`` uint32)."""
        self._at(2, "receive_masked")
        body = self._sender(client_id, msg, "masked", self.u2, self._masked)
        cid = int(client_id)
        k = self.rows_of(cid).size
        if len(body) != 4 * k * self.config.width:
            raise InvalidMessage(f"masked input of client {cid} is {len(body)} bytes, expected "
                                 f"{4 * k * self.config.width}")
        self._masked[cid] = np.frombuffer(body, dtype="<u4").astype(np.uint32).reshape(k, self.config.width)

    def survivors_messages(self) -> dict[int, bytes]:
        """Close MaskedInputCollection (U3 = clients whose masked input arrived) and send U3
        to each of them."""
        self._at(2, "survivors_messages")
        self.u3 = self._close(list(self._masked), "MaskedInputCollection")
        alive = set(self.u3)
        gone = [v for v in self.u2 if v not in alive]
        breach = short_row(self.config, self.rows_of, self.u3, dropped=gone)
        if breach is not None:  # every survivor would refuse to unmask
            raise self._abort(f"MaskedInputCollection: {breach} (min_row_holders)", self._short_row_owners(gone))
        if not self.config.signed:
            self._stage = _UNMASK
        msg = messages.frame("survivors", self.config.round_id, messages.SERVER, messages.ids_bytes(self.u3))
        return {u: msg for u in self.u3}

    # ------------------------------------------------------------------ stage 3 (signed round)
    def receive_consistency(self, client_id: int, msg: bytes) -> None:
        """Record a survivor's signature of U3 (checked under its certified key)."""
        self._at(_CONSISTENCY, "receive_consistency")
        body = self._sender(client_id, msg, "consistency", self.u3, self._u3_sigs)
        cid = int(client_id)
        rd = messages.Reader(body, "consistency")
        sig = bytes(rd.take(SIGNATURE_BYTES))
        rd.end()
        verify(self._signer[cid], CONSISTENCY_DOMAIN, survivor_list(self.config, self._key_list, self.u3), sig,
               f"consistency of client {cid}")
        self._u3_sigs[cid] = sig

    def signatures_messages(self) -> dict[int, bytes]:
        """Close ConsistencyCheck (the signers: survivors whose signature of U3 arrived) and
        send every signer all the signatures."""
        self._at(_CONSISTENCY, "signatures_messages")
        self.signers = self._close(list(self._u3_sigs), "ConsistencyCheck")
        breach = short_row(self.config, self.rows_of, self.u3, signers=self.signers)
        if breach is not None:  # every signer would refuse to unmask
            raise self._abort(f"ConsistencyCheck: {breach} (min_row_holders)",
                              self._short_row_owners([], self.signers))
        recs = [v.to_bytes(4, "little") + self._u3_sigs[v] for v in self.signers]
        msg = messages.frame("signatures", self.config.round_id, messages.SERVER,
                             len(recs).to_bytes(4, "little"), *recs)
        return {u: msg for u in self.signers}

    # ------------------------------------------------------------------ stage 4
    def receive_unmask(self, client_id: int, msg: bytes) -> None:
        """Record a survivor's shares (in a signed round, a signer's): of ``s^SK`` of dropped
        clients only, of ``b`` of survivors only, its own seed's among them.  A client leaves
        out the clients whose encrypted shares to it did not open; they are recorded in
        :attr:`complaints`."""
        self._at(_UNMASK, "receive_unmask")
        allowed = self.signers if self.config.signed else self.u3
        body = self._sender(client_id, msg, "unmask", allowed, self._unmask)
        cid = int(client_id)
        rd = messages.Reader(body, "unmask")
        sk = rd.records(shamir.SHARE_BYTES, "dropped client")
        bs = rd.records(shamir.SHARE_BYTES, "survivor")
        rd.end()
        alive = set(self.u3)
        dropped = {v for v in self.u2 if v not in alive}
        keyed, seeded = {v for v, _ in sk}, {v for v, _ in bs}
        if not keyed <= dropped or not seeded <= alive or cid not in seeded:
            raise InvalidMessage(f"unmask from client {cid} must carry key shares of dropped clients only and "
                                 "seed shares of survivors only, its own among them")
        opened = ({v: int.from_bytes(s, "little") for v, s in sk}, {v: int.from_bytes(s, "little") for v, s in bs})
        if any(y >= shamir.PRIME for part in opened for y in part.values()):
            raise InvalidMessage(f"unmask from client {cid} carries a share outside the field")
        self._unmask[cid] = opened
        left_out = sorted((dropped - keyed) | (alive - seeded))
        if left_out:
            self.complaints[cid] = left_out

    def _holder_sets(self, wanted: list[tuple[int, int]], holding: list[int],
                     without: str = "") -> dict[tuple[int, ...], list[tuple[int, int]]]:
        """The secrets ``wanted`` grouped by the clients of ``holding`` that sent a share of
        them; the round aborts where one has fewer than ``threshold`` (``without``: why the
        other clients of U4 are not counted, for the reason; the reason gives the first such
        secret).

        Every client of ``holding`` that sent no share of a secret left its owner out of its
        unmask message, so complains about it (:attr:`complaints`: the owner's encrypted shares
        to it did not open).  Where ``holding`` has at least ``threshold`` clients, those
        complaints alone made a short secret short, and the abort names its owner
        (:attr:`aborting_dropouts`; session 27, finding S27-G2: a device that spoils its shares
        to more than ``|holding| - threshold`` peers aborted every round it was in, named
        nowhere).  A suspicion, as a complaint is: honest clients complain only about shares
        that did not open, spoiled by their sender or by the server relaying them; more than
        ``|holding| - threshold`` colluding clients can name an honest owner with false
        complaints (docs/secagg.md, "Shares that do not open").  Every short secret's owner so
        accounted for is named, not only the first's."""
        t = self.config.threshold
        by_holders: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        short: list[str] = []
        named: list[int] = []
        for v, which in wanted:
            holders = tuple(h for h in holding if v in self._unmask[h][which])
            if len(holders) >= t:
                by_holders.setdefault(holders, []).append((v, which))
                continue
            omitted = len(holding) - len(holders)
            why = (f" (the other {omitted} unmask messages leave it out: those clients say its encrypted shares "
                   "to them did not open)") if omitted else ""
            short.append(f"{len(holders)} shares of the {_SECRETS[which]} of client {v}{without}, threshold {t}{why}")
            if len(holding) >= t:
                named.append(v)
        if short:
            more = f"; {len(short) - 1} more secret(s) short" if len(short) > 1 else ""
            blamed = f"; clients {named} named (the complaints against them left their secrets short)" if named else ""
            raise self._abort(f"Unmasking: {short[0]}{more}{blamed}", named)
        return by_holders

    def _open_signed(self, wanted: list[tuple[int, int]], points: shamir.PointSet) -> dict[tuple[int, int], int]:
        """(Signed round.) The secrets ``wanted`` (each ``(client, which)``), opened from shares
        shown to be the dealt ones, naming every device shown to have cheated; ``points``: U4's
        (ids plus one), whose weights each holder set's check and coefficients take.

        A holder's unmask share that does not hash to the commitment its dealer sent with it
        (:func:`~secemb.secagg.client.share_commitment`) is the holder's lie: an honest holder
        kept only shares matching the commitments relayed to it, the same the server holds.  The
        holder is named and all its shares are left out.  Every share left is then the dealt
        one, so a secret of a holder set is opened from its first ``threshold`` shares (one
        Lagrange set per holder set) and checked (:meth:`_unopened`), and its shares are checked
        to lie on one polynomial (:class:`~secemb.secagg.shamir.ShareCheck`): a failure is the
        dealer's (it dealt shares off its polynomial, or of another secret than it committed
        to), and the dealer is named.  Where the opening fails and the shares disagree, each
        ``threshold``-subset of the first ``threshold + 1`` shares is tried (:meth:`_mend`): one
        whose opening passes the check is the committed secret (unique but for a SHA-256 or
        X25519 collision) and the round goes on; otherwise it aborts, the dealer named."""
        cfg = self.config
        t = cfg.threshold
        for h, (v, which) in self._lies().items():
            self._name(h, f"sent a share of the {_SECRETS[which]} of client {v} other than the one client {v} "
                          "dealt it (it does not match the dealer's commitment); all its shares are left out")
        honest = [h for h in self.u4 if h not in self.cheated]
        liars = "" if len(honest) == len(self.u4) else f" besides those of clients {self.cheaters} (found lying)"
        secret: dict[tuple[int, int], int] = {}
        for holders, group in self._holder_sets(wanted, honest, liars).items():
            xs = points.subset([h + 1 for h in holders])
            check = shamir.ShareCheck(xs, t)
            lam = points.lagrange_at_zero(xs[:t], within=xs)
            for v, which in group:
                col = [self._unmask[h][which][v] for h in holders]
                value = sum(lv * y for lv, y in zip(lam, col[:t], strict=True)) % shamir.PRIME
                why = self._unopened(v, which, value)
                consistent = check.consistent(col)
                if why is None and consistent:
                    secret[(v, which)] = value
                    continue
                mended = value if why is None else None if consistent else self._mend(xs, col, v, which)
                self._name(v, f"dealt shares of its {_SECRETS[which]} (as it committed to them) that "
                              + ("do not lie on one polynomial" if not consistent else f"open to one that {why}"))
                if mended is None:
                    raise self._abort(f"Unmasking: the {_SECRETS[which]} of client {v} opened from {len(holders)} "
                                      f"shares {why}, and no other opening passes: client {v} dealt shares (as it "
                                      "committed to them) that do not open to its secret (named)")
                secret[(v, which)] = mended
        return secret

    def _lies(self) -> dict[int, tuple[int, int]]:
        """(Signed round.) Each client of U4 whose unmask message carries a share that does not
        hash to the commitment its dealer sent with it (:func:`~secemb.secagg.client.share_commitment`),
        with the first such share ``(dealer, which)`` (key shares before seed shares, each in the
        message's order), in the order of U4.

        The commitments (about ``n^2`` a round) come from one
        :func:`~secemb.secagg.client.share_committer`, which hashes their common prefix once
        (session 25: one :func:`~secemb.secagg.client.share_commitment` call each, building every
        message anew, took 15 ms of a signed round's 48 ms at 100 clients).
        :func:`~secemb.fss.hashing.sha256_many`'s SHA-NI kernel is faster per batch but its first
        call in a process loads it (0.8 s), more than a few hundred rounds gain."""
        size = SHARE_COMMITMENT_BYTES
        commit = share_committer(self.config)
        lies: dict[int, tuple[int, int]] = {}
        for h in self.u4:
            lie = next(((v, which) for which in (0, 1) for v, y in self._unmask[h][which].items()
                        if commit(v, h, which, y) != self._dealt[v][h][which * size :][:size]), None)
            if lie is not None:  # the first: a key share's before a seed share's
                lies[h] = lie
        return lies

    def _mend(self, xs: shamir.Points, col: list[int], v: int, which: int) -> int | None:
        """(Signed round.) Client ``v``'s secret ``which`` from its dealt shares ``col`` (at the
        points ``xs``, with their weights) that disagree: the opening of the first
        ``threshold``-subset of the first ``threshold + 1`` shares (those opening the first
        ``threshold`` failed) that passes :meth:`_unopened`, or ``None`` (fewer than
        ``threshold + 1`` shares, or two wrong ones among them).

        One set of coefficients serves every subset
        (:func:`~secemb.secagg.shamir.openings_leaving_one_out`): ``O(t)`` a subset tried, not a
        set of coefficients (``O(t^2)`` products, ``t`` inversions) each (finding C1, session 24:
        with a malicious dealer per holder set those sets were most of :meth:`result`'s time)."""
        t = self.config.threshold
        if len(xs) <= t:
            return None
        head = xs.subset(xs[: t + 1])
        for (value,) in shamir.openings_leaving_one_out(head, [col[: t + 1]])[:t]:
            if self._unopened(v, which, value) is None:
                return value
        return None

    def _open_unsigned(self, wanted: list[tuple[int, int]], points: shamir.PointSet) -> dict[tuple[int, int], int]:
        """(Unsigned round.) The secrets ``wanted`` opened from all the shares of them that U4
        sent, with :func:`~secemb.secagg.shamir.combine_robust` (the weights from ``points``, U4's),
        once per set of holders, the largest sets first: with more than ``threshold`` shares they
        must lie on one polynomial, and with at least ``threshold + 2`` a single client whose
        shares do not is found, left out of that reconstruction and of every later one, and named
        in :attr:`cheaters` once every opened mask key matches its public key (its own input stays
        in the sum, as any survivor's; a seed has no check here, and a dealer that dealt the
        client a share off its polynomial looks the same).  The leave-one-out correction is the only candidate (two sets
        that each leave one holder out share at least ``threshold`` holders, so both would lie on
        one polynomial with every share), so no other is tried."""
        cfg = self.config
        secret: dict[tuple[int, int], int] = {}
        bad: list[int] = []
        # Largest holder sets first: a client found sending wrong shares (in a set of threshold + 2
        # or more) is left out of every later set, so none of its shares opens a secret (below the
        # threshold without it the round aborts), and the leave-one-out search runs at most twice.
        for holders, group in sorted(self._holder_sets(wanted, self.u4).items(), key=lambda item: -len(item[0])):
            use = [h for h in holders if h not in bad]
            if len(use) < cfg.threshold:
                v, which = group[0]
                raise self._abort(f"Unmasking: {len(use)} shares of the {_SECRETS[which]} of client {v} without "
                                  f"client {bad[0]}'s (found wrong), threshold {cfg.threshold}")
            found = None
            try:
                opened, wrong = shamir.combine_robust([h + 1 for h in use],
                                                      [[self._unmask[h][which][v] for v, which in group] for h in use],
                                                      cfg.threshold, within=points)
            except InvalidMessage:
                # one spare share: the shares disagree and the polynomial cannot say whose is wrong, but
                # the mask keys' checks can, where every secret of the set is one (checked there)
                found = self._one_spare(use, group, points) if len(use) == cfg.threshold + 1 else None
                if found is None:
                    raise
                opened, wrong = found
            for (v, which), value in zip(group, opened, strict=True):
                why = None if found is not None else self._unopened(v, which, value)
                if why is not None:
                    corrected = "" if wrong is None else f" (after leaving out client {use[wrong]}'s shares)"
                    raise self._abort(f"Unmasking: the {_SECRETS[which]} of client {v} opened from {len(use)} "
                                      f"shares{corrected} {why} (a wrong share no spare share could show, "
                                      "colluding holders, or an owner that shared another secret; nobody is named)")
            secret.update(zip(group, opened, strict=True))
            if wrong is not None:
                bad.append(use[wrong])
                if len(bad) > 1:
                    self.cheated = {}  # two clients' wrong shares: either may have been framed
                    raise InvalidMessage(f"the unmask shares of clients {sorted(bad)} do not agree with the others': "
                                         "more than one party sent wrong shares")
                self._name(bad[0], "sent unmask shares that do not lie on the others' polynomial (unsigned round: "
                                   "or was dealt one off it)")
        return secret

    def result(self) -> np.ndarray:
        """Close Unmasking (U4 = survivors that sent shares) and return the sum over U3:
        ``uint32`` of shape ``(length, width)`` (a row nobody in U3 holds is 0).

        The secrets to open are each survivor's seed ``b`` and each dropped client's mask key;
        each is opened from the shares of it that U4 sent (every client of U4 but those whose
        encrypted shares from its owner did not open: :attr:`complaints`), once per set of
        holders, and checked: a mask key against the advertised public key, in a signed round a
        seed against its owner's signed commitment.  How depends on the round:

        * signed (:meth:`_open_signed`): every unmask share is checked against its dealer's
          commitment; a holder that sent one that does not match is named in :attr:`cheaters`
          and all its shares are left out.  What is left is what the dealers dealt: a secret
          whose shares do not lie on one polynomial, or open to another secret than the one
          committed to, names its dealer; the round still commits where one share of it can be
          left out of the first ``threshold + 1`` so that the opening passes its check;
        * unsigned (:meth:`_open_unsigned`): the shares are checked to lie on one polynomial
          (:func:`~secemb.secagg.shamir.combine_robust`, the largest holder sets first); one
          client whose shares do not is left out of every set and named.

        Raises
        ------
        SecAggAborted: fewer than ``threshold`` unmask messages, fewer than ``threshold`` shares
            of one secret (too many holders left it out -- where their complaints alone did, its
            owner is named in :attr:`aborting_dropouts` -- or lied about it), an opened secret that
            fails its check and cannot be mended (signed: its dealer is named first), or
            (unsigned) shares that do not agree where a wrong share cannot be told apart.
        InvalidMessage: (unsigned round) shares that do not agree and are not one client's (more
            than one client's wrong, or too few spare shares to tell whose).
        """
        self._at(_UNMASK, "result")
        self.u4 = self._close(list(self._unmask), "Unmasking")
        cfg = self.config
        alive = set(self.u3)
        # (client, 1): a survivor's self-mask seed; (client, 0): a dropped client's mask key
        wanted = [(u, 1) for u in self.u3] + [(v, 0) for v in self.u2 if v not in alive]
        # the weights of U4's points once; a holder set's from them (finding F1, session 25)
        points = shamir.PointSet([h + 1 for h in self.u4])
        secret = self._open_signed(wanted, points) if cfg.signed else self._open_unsigned(wanted, points)
        total = np.zeros((cfg.length, cfg.width), np.uint32)
        every = np.arange(cfg.length, dtype=np.int64)
        for u in self.u3:
            rows = self.rows_of(u)
            b = secret[(u, 1)]
            at = rows if cfg.sparse else slice(None)
            total[at] += self._masked[u] - mask_rows(b.to_bytes(SEED_BYTES, "little"), rows, cfg.width)
        for v in self.u2:
            if v in alive:
                continue
            pair = keys.KeyPair.from_private(secret[(v, 0)].to_bytes(keys.KEY_BYTES, "little"))
            for u in self.u3:
                common = self._common(u, v) if cfg.sparse else every
                if common.size == 0:
                    continue
                seed = keys.agree(pair.private, self._keys[u][1], keys.MASK, cfg.round_id, (u, v))
                m = mask_rows(seed, common, cfg.width)
                at = common if cfg.sparse else slice(None)
                # survivor u added sign(u, v) * m for the pair (u, v); take it out
                if sign(u, v) > 0:
                    total[at] -= m
                else:
                    total[at] += m
        self._masked.clear()
        self._unmask.clear()
        self._dealt.clear()
        return total

    def holders(self) -> np.ndarray:
        """How many survivors hold each row (int64, shape ``(length,)``): the divisor of a
        per-row mean in a sparse round; ``len(U3)`` everywhere in a dense one."""
        if len(self.u3) == 0:
            raise ProtocolError("holders: the masked stage has not closed")
        count = np.zeros(self.config.length, np.int64)
        for u in self.u3:
            count[self.rows_of(u)] += 1
        return count
