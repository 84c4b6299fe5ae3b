"""The client side of Bonawitz et al.'s secure aggregation (CCS 2017, Fig. 4; with
:attr:`~secemb.secagg.config.SecAggConfig.signed`, the active-adversary variant).

A :class:`SecAggClient` answers the server's stages in order; each method takes the server's
message (bytes), checks it, and returns the client's reply (bytes)::

    advertise(rows)                       -> advertise   (c and s public keys [, rows];
                                                          signed: commitment to b,
                                                          certificate, signature)
    share_keys(keys)                      -> shares      (AES-GCM Shamir shares for each peer;
                                                          signed: a commitment to each share)
    masked_input(relayed, values)         -> masked      (y = x + PRG(b) + sum of +-PRG(s_uv))
    consistency(survivors)                -> consistency (signed only: signature of U3)
    unmask(survivors | signatures)        -> unmask      (shares of s^SK of the dropped,
                                                          of b of the survivors, those it
                                                          holds; never both)

In a signed round the client takes a peer's keys only with the peer's signature under a
certificate of the pinned roster, sends unmasking shares only after ``threshold`` survivors
signed the same survivor list, and in a sparse round masks with a peer exactly on the rows the
peer's signed row set (a bitmap over the round's candidate rows, in the key list) and its own
have in common, and on every public row; with ``min_row_holders`` above 1 it contributes zero on
rows fewer clients hold and unmasks only where no revealed row sum can be over fewer
(:func:`short_row`).  A signed round's client also commits to its
self-mask seed ``b`` in its signed advertise (:func:`seed_commitment`), so the server can check
the seed it opens at Unmasking, and commits to every share it deals (:func:`share_commitment`,
in the clear next to the ciphertext): a holder takes only shares that match the commitments the
server relays with them, and the server checks every unmask share against its commitment, so a
wrong share is shown to be its holder's or its dealer's (docs/secagg.md, "Share commitments").
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.randomness import RandomBytes, system_rng
from secemb.secagg import keys, messages, shamir
from secemb.secagg.config import SecAggConfig, check_rows, sign
from secemb.secagg.identity import CERTIFICATE_BYTES, SIGNATURE_BYTES, Identity, signed_bytes, verify
from secemb.secagg.prg import SEED_BYTES, mask_rows

__all__ = [
    "ADVERTISE_DOMAIN",
    "COMMITMENT_BYTES",
    "CONSISTENCY_DOMAIN",
    "SEED_COMMITMENT_DOMAIN",
    "SHARE_COMMITMENT_BYTES",
    "SHARE_COMMITMENT_DOMAIN",
    "SIGNED_ENTRY_BYTES",
    "SecAggClient",
    "SHARE_PLAINTEXT_BYTES",
    "SHARE_CIPHERTEXT_BYTES",
    "advertised",
    "key_list_digest",
    "seed_commitment",
    "share_commitment",
    "share_committer",
    "share_record_bytes",
    "short_row",
    "survivor_list",
]

#: A relayed share: sender id, recipient id, share of s^SK, share of b.
SHARE_PLAINTEXT_BYTES = 8 + 2 * shamir.SHARE_BYTES
SHARE_CIPHERTEXT_BYTES = SHARE_PLAINTEXT_BYTES + keys.TAG_BYTES
#: Bytes of a signed round's commitment to a client's self-mask seed (SHA-256).
COMMITMENT_BYTES = 32
#: What a signed round adds to an advertise message and to each key-list entry: the seed
#: commitment, the certificate, the signature.
SIGNED_ENTRY_BYTES = COMMITMENT_BYTES + CERTIFICATE_BYTES + SIGNATURE_BYTES
#: Signature domains of a signed round: the advertised keys, the survivor list.
ADVERTISE_DOMAIN = b"secemb/secagg/v1/advertise"
CONSISTENCY_DOMAIN = b"secemb/secagg/v1/consistency"
#: Hash domain of a signed round's commitment to a self-mask seed.
SEED_COMMITMENT_DOMAIN = b"secemb/secagg/v1/seed-commitment"
#: Bytes of a signed round's commitment to one dealt share (SHA-256, truncated).
SHARE_COMMITMENT_BYTES = 16
#: Hash domain of a signed round's commitment to a dealt share.
SHARE_COMMITMENT_DOMAIN = b"secemb/secagg/v1/share-commitment"


def share_commitment(config: SecAggConfig, dealer: int, holder: int, which: int, share: int) -> bytes:
    """A signed round's commitment to the share ``share`` (a field element) of dealer ``dealer``'s
    mask key (``which`` 0) or self-mask seed (1) dealt to ``holder``: the first
    :data:`SHARE_COMMITMENT_BYTES` bytes of SHA-256 of ``len(domain) || domain``
    (:data:`SHARE_COMMITMENT_DOMAIN`) ``||`` the round's public parameters ``||`` dealer, holder
    (uint32) ``||`` which (uint8) ``||`` the share (33 bytes).  Binding against a holder: an
    unmask share other than the dealt one matches it only by a second preimage (about 2^128
    tries); a dealer gains nothing from a collision (the holder sends the share it was sent).
    Hiding: every share is a uniform field element, so in the random-oracle model the digests
    tell nothing of the secret beyond what guessing it (2^128 seeds) would (docs/secagg.md,
    "Share commitments")."""
    return share_committer(config)(dealer, holder, which, share)


def share_committer(config: SecAggConfig) -> Callable[[int, int, int, int], bytes]:
    """:func:`share_commitment` of one round as a function of ``(dealer, holder, which, share)``,
    the common prefix (``len(domain) || domain ||`` the round's parameters) hashed once: each
    commitment is then a copy of that SHA-256 state fed the rest (for the server's check of the
    ~``n^2`` unmask shares of a round)."""
    prefix = hashlib.sha256(signed_bytes(SHARE_COMMITMENT_DOMAIN, config.header()))
    head = struct.Struct("<IIB").pack  # dealer, holder (uint32), which (uint8)

    def commit(dealer: int, holder: int, which: int, share: int) -> bytes:
        digest = prefix.copy()
        digest.update(head(dealer, holder, which) + share.to_bytes(shamir.SHARE_BYTES, "little"))
        return digest.digest()[:SHARE_COMMITMENT_BYTES]

    return commit


def share_record_bytes(config: SecAggConfig) -> int:
    """Bytes of a record of a ``shares`` or ``relayed`` message after its id: the ciphertext and,
    in a signed round, the commitments to its two shares (:func:`share_commitment`)."""
    return SHARE_CIPHERTEXT_BYTES + (2 * SHARE_COMMITMENT_BYTES if config.signed else 0)


def seed_commitment(config: SecAggConfig, client_id: int, seed: bytes) -> bytes:
    """A signed round's commitment to client ``client_id``'s self-mask seed ``seed``
    (:data:`~secemb.secagg.prg.SEED_BYTES` bytes): SHA-256 of ``len(domain) || domain``
    (:data:`SEED_COMMITMENT_DOMAIN`, :func:`~secemb.secagg.identity.signed_bytes`) ``||`` the
    round's public parameters (:meth:`~secemb.secagg.config.SecAggConfig.header`) ``||`` the id
    (uint32) ``|| seed``.  Binding: an opened seed that hashes to it is the committed one
    (SHA-256's collision resistance).  Hiding: ``seed`` is 128 uniform bits used in this round
    only, so in the random-oracle model the digest tells nothing of it to anyone who cannot try
    about 2^128 seeds (docs/secagg.md, "Seed commitments")."""
    return hashlib.sha256(signed_bytes(SEED_COMMITMENT_DOMAIN,
                                       config.header() + client_id.to_bytes(4, "little") + seed)).digest()


def advertised(config: SecAggConfig, client_id: int, c_pk: bytes, s_pk: bytes, commitment: bytes,
               bitmap: bytes = b"") -> bytes:
    """What client ``client_id`` signs in its advertise message: the round's public parameters,
    its id, its two public keys, its seed commitment (:func:`seed_commitment`) and, in a sparse
    round, its row set as a bitmap over the candidate rows
    (:meth:`~secemb.secagg.config.SecAggConfig.row_bitmap`)."""
    return config.header() + client_id.to_bytes(4, "little") + c_pk + s_pk + commitment + bitmap


def survivor_list(config: SecAggConfig, key_list: bytes, u3: list[int]) -> bytes:
    """What a client signs in the consistency round: the round's public parameters, the SHA-256
    of the key list it was sent (:func:`key_list_digest`: binds the run, whose keys are fresh)
    and U3."""
    return config.header() + key_list + messages.ids_bytes(u3)


def key_list_digest(body: bytes | memoryview) -> bytes:
    """SHA-256 of a signed round's key-list body (the same bytes for every client of the run:
    every listed client's fresh keys, certificate and signature)."""
    return hashlib.sha256(body).digest()


def short_row(config: SecAggConfig, rows_of: Callable[[int], np.ndarray], survivors: Iterable[int], *,
              dropped: Iterable[int] = (), signers: Iterable[int] | None = None) -> str | None:
    """The rule :attr:`~secemb.secagg.config.SecAggConfig.min_row_holders` (``m``) over the
    survivors U3: its first breach as text, or ``None``.  A breach is a private row

    * that a client of ``dropped`` holds and at least one but fewer than ``m`` survivors hold:
      revealing the dropped clients' mask keys would open its sum over fewer than ``m`` clients;
    * given ``signers`` (the survivors that signed U3), that a survivor outside ``signers`` holds
      and at least ``m`` survivors but fewer than ``m`` signers hold: a survivor that did not sign
      may have counted other holders in its U2 than U3 shows, and contributed zero there, leaving
      the row's sum to fewer than ``m`` clients (a signer checked U3 against its U2, so it counted
      every surviving holder and contributed).

    The public rows are held by every survivor, at least ``threshold`` (``>= m``) of them signers.
    ``rows_of(u)``: client ``u``'s rows (int64, increasing)."""
    m = config.min_row_holders
    if m < 2:
        return None
    alive = list(survivors)
    signed = set(alive if signers is None else signers)
    for what, owners in (("dropped", list(dropped)), ("did not sign the survivor list",
                                                      [u for u in alive if u not in signed])):
        if not owners:
            continue
        rows = {}
        for v in owners:
            r = rows_of(v)
            rows[v] = r[: int(np.searchsorted(r, config.private_rows))]
        risk = np.unique(np.concatenate(list(rows.values())))
        held = np.zeros(risk.size, np.int64)
        held_signed = np.zeros(risk.size, np.int64)
        for u in alive:
            at = np.isin(risk, rows_of(u), assume_unique=True)
            held += at
            if u in signed:
                held_signed += at
        bad = (held > 0) & (held < m) if what == "dropped" else (held >= m) & (held_signed < m)
        if bad.any():
            k = int(np.argmax(bad))
            row = int(risk[k])
            client = next(v for v, r in rows.items() if np.isin(row, r))
            counted = f"{held[k]} surviving holder(s)"
            if what != "dropped":
                counted += f", {held_signed[k]} of them signers"
            return (f"row {row} has {counted}, fewer than min_row_holders {m}, and client {client}, which holds it, "
                    f"{what}: that row's sum could be over fewer than {m} clients")
    return None


class SecAggClient:
    """One client of one round.

    Parameters
    ----------
    client_id:
        The client's id in ``[0, 2^32 - 2]``; its Shamir point is ``client_id + 1``.
    config:
        The round's :class:`SecAggConfig`.
    identity:
        The client's certified identity (:mod:`secemb.secagg.identity`; its user id is
        ``client_id``): required exactly when ``config.signed``.
    _rng:
        Private test hook for the key pairs, the self-mask seed and the Shamir coefficients.

    Raises
    ------
    ProtocolError: a method called out of order or twice.
    InvalidMessage: a server message that is malformed or inconsistent, or (signed round) that
        carries a key, a row set or a survivor list no peer signed.  The client has then left
        the round: it answers no later stage (a new round needs a new client).
    """

    def __init__(self, client_id: int, config: SecAggConfig, *, identity: Identity | None = None,
                 _rng: RandomBytes | None = None) -> None:
        self.config = config
        self.id = config.check_id(client_id)
        if config.signed != (identity is not None):
            raise InvalidParameters("an identity must be given exactly when the round is signed")
        if identity is not None and identity.user != self.id:
            raise InvalidParameters(f"client {self.id} was given the identity of device {identity.user}")
        self.identity = identity
        self._rng = system_rng if _rng is None else _rng
        self._stage = 0
        self._c = keys.KeyPair.generate(_rng=self._rng)
        self._s = keys.KeyPair.generate(_rng=self._rng)
        self._rows = np.arange(config.length, dtype=np.int64)
        self._rows.setflags(write=False)
        self._entry = b""  # this client's key-list entry, as it advertised it (after the id)
        self._peers: dict[int, tuple[bytes, bytes]] = {}
        self._signers: dict[int, bytes] = {}  # peer -> its certified signing key (signed round)
        self._common: dict[int, np.ndarray] = {}  # peer -> bool over own rows: rows it holds too
        self._bitmaps: dict[int, bytes] = {}  # client -> its signed row set (min_row_holders above 1)
        self._b = b""
        self._held: dict[int, tuple[int, int]] = {}  # sender -> (share of s^SK, share of b)
        self._u2: list[int] = []
        self._u3: list[int] = []
        self._key_list = b""  # signed round: SHA-256 of the key list, signed with U3

    # ------------------------------------------------------------------ helpers
    def _enter(self, stage: int, name: str) -> None:
        if self._stage != stage:
            raise ProtocolError(f"client {self.id}: {name} called at stage {self._stage}, expected stage {stage}")
        self._stage = stage + 1

    @property
    def _signed_rows(self) -> bool:
        """Whether each key-list entry carries its client's signed row set (a signed sparse round)."""
        return self.config.signed and self.config.sparse

    def _channel(self, peer: int, purpose: bytes) -> bytes:
        return keys.agree(self._c.private, self._peers[peer][0], purpose, self.config.round_id, (self.id, peer))

    def _check_entry(self, identity: Identity, ident: int, rec: bytes) -> None:
        """A signed key-list entry's certificate (under ``identity``'s pin) and signature (the
        keys are ``rec``'s first 64 bytes, the seed commitment the next 32, the row set's bitmap
        what follows the signature)."""
        k = 2 * keys.KEY_BYTES
        cert = k + COMMITMENT_BYTES
        sig = cert + CERTIFICATE_BYTES
        what = (f"the server's key list carries keys for device {ident} that device {ident} did not sign "
                f"(the server deviated)")  # its signature covers its keys, its commitment and, sparse, its row set
        try:
            signer = identity.pin.certificate(rec[cert:sig], ident)
            verify(signer.public, ADVERTISE_DOMAIN,
                   advertised(self.config, ident, rec[: keys.KEY_BYTES], rec[keys.KEY_BYTES : k], rec[k:cert],
                              rec[sig + SIGNATURE_BYTES :]),
                   rec[sig : sig + SIGNATURE_BYTES], what)
        except InvalidMessage as exc:
            raise InvalidMessage(f"keys: {what}: {exc}") from None
        self._signers[ident] = signer.public

    def _shared_rows(self, bitmap: bytes) -> np.ndarray:
        """Which of this client's rows a peer whose signed bitmap is ``bitmap`` holds too (bool
        over own rows): the own candidate rows whose bit is set, and every public row."""
        cfg = self.config
        bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")
        private = int(np.searchsorted(self._rows, cfg.private_rows))
        common = np.ones(self._rows.size, bool)
        common[:private] = bits[np.searchsorted(cfg.candidate_rows, self._rows[:private])].astype(bool)
        return common

    def _rows_of(self, client: int) -> np.ndarray:
        """The candidate rows a client of the key list signed it holds (int64, increasing)."""
        cfg = self.config
        bits = np.unpackbits(np.frombuffer(self._bitmaps[client], np.uint8), count=cfg.candidate_rows.size,
                             bitorder="little")
        return cfg.candidate_rows[bits.astype(bool)]

    @property
    def rows(self) -> np.ndarray:
        """The rows this client contributes (int64, increasing): all rows in a dense round."""
        return self._rows

    # ------------------------------------------------------------------ stage 0
    def advertise(self, rows: np.ndarray | None = None) -> bytes:
        """AdvertiseKeys: the two public keys, and in a sparse round the client's rows
        (``rows``: strictly increasing ints in ``[0, length)``; required iff sparse).  The
        client draws its self-mask seed ``b`` here; a signed round's advertise carries its
        commitment (:func:`seed_commitment`) under the client's signature."""
        cfg = self.config
        if cfg.sparse != (rows is not None):
            raise InvalidParameters("rows must be given exactly when the round is sparse")
        checked = None if rows is None else check_rows(rows, cfg.length, cfg.public_from)
        bitmap = None if checked is None else cfg.row_bitmap(checked)
        if checked is not None and bitmap is None:
            raise InvalidParameters("rows below public_from must be candidate rows of the round")
        self._enter(0, "advertise")
        self._b = self._rng(SEED_BYTES)
        parts = [self._c.public, self._s.public]
        if self.identity is not None:
            own = bitmap if self._signed_rows and bitmap is not None else b""
            commitment = seed_commitment(cfg, self.id, self._b)
            statement = advertised(cfg, self.id, self._c.public, self._s.public, commitment, own)
            parts += [commitment, self.identity.certificate.to_bytes(),
                      self.identity.sign(ADVERTISE_DOMAIN, statement)]
            self._entry = b"".join(parts) + own
            if cfg.min_row_holders > 1:
                self._bitmaps[self.id] = own
        else:
            self._entry = b"".join(parts)
        if checked is not None:
            self._rows = checked
            self._rows.setflags(write=False)
            parts.append(messages.rows_bytes(self._rows))
        return messages.frame("advertise", cfg.round_id, self.id, *parts)

    # ------------------------------------------------------------------ stage 1
    def share_keys(self, keys_msg: bytes) -> bytes:
        """ShareKeys: Shamir shares of ``s^SK`` and of the self-mask seed ``b`` (drawn at
        :meth:`advertise`) for every client of the key list, each encrypted to its recipient
        under the c-agreement.  In a signed round every entry's certificate and signature (over
        the keys, the seed commitment and, sparse, the row set) are checked first, and this
        client's own entry must be the one it advertised; each record then carries the
        commitments to the two shares it seals (:func:`share_commitment`), and the message ends
        with the commitments to this client's own shares (the ones it keeps)."""
        self._enter(1, "share_keys")
        cfg = self.config
        _, body = messages.open_frame(keys_msg, "keys", cfg.round_id, messages.SERVER)
        rd = messages.Reader(body, "keys")
        self._key_list = key_list_digest(body)
        pair = 2 * keys.KEY_BYTES
        entries = rd.records(len(self._entry), "client")
        ids = [i for i, _ in entries]
        if self.id not in ids:
            raise InvalidMessage(f"keys: client {self.id} is not in the key list")
        if len(ids) < cfg.threshold:
            raise InvalidMessage(f"keys: {len(ids)} clients, fewer than the threshold {cfg.threshold}")
        if cfg.signed and 2 * cfg.threshold <= len(ids):
            raise InvalidMessage(f"keys: a signed round of {len(ids)} clients needs a threshold above half of them, "
                                 f"not {cfg.threshold} (two disjoint groups of the threshold could each open one "
                                 "of a client's secrets)")
        for ident, rec in entries:
            c_pk, s_pk = rec[: keys.KEY_BYTES], rec[keys.KEY_BYTES : pair]
            if ident == self.id:
                if rec != self._entry:
                    raise InvalidMessage("keys: the list carries other keys or another row set under this client's id")
                if self.identity is not None:
                    self._signers[ident] = self.identity.certificate.public
            else:
                if self.identity is not None:
                    self._check_entry(self.identity, ident, rec)
                if self._signed_rows:
                    self._common[ident] = self._shared_rows(rec[pair + SIGNED_ENTRY_BYTES :])
                    if cfg.min_row_holders > 1:
                        self._bitmaps[ident] = rec[pair + SIGNED_ENTRY_BYTES :]
                self._peers[ident] = (c_pk, s_pk)
        if cfg.sparse and not cfg.signed:
            k = self._rows.size
            size = -(-k // 8)
            bits = np.unpackbits(rd.array(len(ids) * size, "u1").reshape(len(ids), size), axis=1,
                                 bitorder="little")
            if bits[:, k:].any() or bits[ids.index(self.id)].any():
                raise InvalidMessage("keys: a row bitmap marks rows this client does not have, or itself")
            self._common = {ident: bits[i, :k].astype(bool) for i, ident in enumerate(ids) if ident != self.id}
        rd.end()
        s_sk = int.from_bytes(self._s.private, "little")  # c^SK is never shared
        table = shamir.split([s_sk, int.from_bytes(self._b, "little")], cfg.threshold,
                             [i + 1 for i in ids], _rng=self._rng)
        records = []
        own = b""
        for ident, (sh_s, sh_b) in zip(ids, table, strict=True):
            committed = (share_commitment(cfg, self.id, ident, 0, sh_s) + share_commitment(cfg, self.id, ident, 1, sh_b)
                         if cfg.signed else b"")
            if ident == self.id:
                self._held[ident] = (sh_s, sh_b)
                own = committed
                continue
            pt = (ident.to_bytes(4, "little") + self.id.to_bytes(4, "little")
                  + sh_s.to_bytes(shamir.SHARE_BYTES, "little") + sh_b.to_bytes(shamir.SHARE_BYTES, "little"))
            records.append(ident.to_bytes(4, "little")
                           + keys.seal(self._channel(ident, keys.CHANNEL), cfg.round_id, self.id, ident, pt)
                           + committed)
        return messages.frame("shares", cfg.round_id, self.id, len(records).to_bytes(4, "little"), *records, own)

    # ------------------------------------------------------------------ stage 2
    def _open_shares(self, sender: int, record: bytes) -> tuple[int, int] | None:
        """The shares (of ``s^SK``, of ``b``) that ``sender`` sealed in ``record`` (a relayed
        record after its id) to this client, or ``None`` where they do not open: the ciphertext
        does not authenticate under the pair's channel key, or it names other parties, or a share
        is outside the field, or (signed round) a share does not match the commitment relayed
        with it (:func:`share_commitment`).  Either the sender or the server spoiled them, and
        this client cannot tell which; it stays in the round (:meth:`masked_input`) and holds no
        share of the sender's secrets.  Every share it keeps is thus the one the server holds a
        commitment to, so the server can tell its unmask shares from another's."""
        cfg = self.config
        key = self._channel(sender, keys.CHANNEL)  # a low-order key raises: the server checks keys at the door
        try:
            pt = keys.open_sealed(key, cfg.round_id, sender, self.id, record[:SHARE_CIPHERTEXT_BYTES])
        except InvalidMessage:
            return None
        n = shamir.SHARE_BYTES
        held = (int.from_bytes(pt[8 : 8 + n], "little"), int.from_bytes(pt[8 + n : 8 + 2 * n], "little"))
        named = (int.from_bytes(pt[:4], "little"), int.from_bytes(pt[4:8], "little"))
        if named != (self.id, sender) or max(held) >= shamir.PRIME:
            return None
        if cfg.signed and record[SHARE_CIPHERTEXT_BYTES:] != (share_commitment(cfg, sender, self.id, 0, held[0])
                                                              + share_commitment(cfg, sender, self.id, 1, held[1])):
            return None
        return held

    def masked_input(self, relayed_msg: bytes, values: np.ndarray) -> bytes:
        """MaskedInputCollection: decrypt the peers' shares (their senders are the clients
        still in the round, U2) and send ``y = x + PRG(b) + sum_v +-PRG(s_uv)`` over this
        client's rows (in a sparse round, the pair's mask on the rows both hold: from the
        server's bitmaps, or in a signed round from the peer's signed row set).

        A sender whose shares do not open or (signed round) do not match their commitments
        (:meth:`_open_shares`) stays in U2: this client masks
        with it as with any peer (the sender masks with this client, and the server removes a
        pair's mask only for a dropped client), holds none of its shares, and leaves it out of
        its unmask message (:meth:`unmask`); the server rebuilds that sender's secret from the
        other clients' shares (finding F2, session 22: the client used to leave the round, so one
        device chose which honest peers a round kept).

        With :attr:`~secemb.secagg.config.SecAggConfig.min_row_holders` ``m`` above 1 the client
        contributes zero (the masks unchanged) on each of its rows that fewer than ``m`` clients
        of U2 hold, itself included, by their signed row sets.

        ``values``: ``uint32`` of shape ``(len(rows), width)`` (``(len(rows),)`` if width is
        1), the input in Z_2^32.
        """
        cfg = self.config
        x = np.asarray(values)
        if x.dtype != np.uint32:
            raise TypeError(f"values must be uint32 (Z_2^32), got {x.dtype}")
        if cfg.width == 1 and x.ndim == 1:
            x = x[:, None]
        if x.shape != (self._rows.size, cfg.width):
            raise InvalidParameters(f"values must have shape {(self._rows.size, cfg.width)}, got {x.shape}")
        self._enter(2, "masked_input")
        _, body = messages.open_frame(relayed_msg, "relayed", cfg.round_id, messages.SERVER)
        rd = messages.Reader(body, "relayed")
        entries = rd.records(share_record_bytes(cfg), "sender")
        rd.end()
        for sender, record in entries:
            if sender not in self._peers:
                raise InvalidMessage(f"relayed: shares from client {sender}, who is not in the key list")
            held = self._open_shares(sender, record)
            if held is not None:
                self._held[sender] = held
        self._u2 = sorted([self.id, *(sender for sender, _ in entries)])
        if len(self._u2) < cfg.threshold:
            raise InvalidMessage(f"relayed: {len(self._u2)} clients left, fewer than the threshold {cfg.threshold}")
        if cfg.min_row_holders > 1:  # zero where fewer than min_row_holders clients of U2 hold the row
            holders = sum((self._common[v] for v in self._u2 if v != self.id), np.ones(self._rows.size, np.int64))
            x = np.where((holders >= cfg.min_row_holders)[:, None], x, np.uint32(0))
        y = x + mask_rows(self._b, self._rows, cfg.width)
        for v in self._u2:
            if v == self.id:
                continue
            shared = self._common[v] if cfg.sparse else None
            pos = slice(None) if shared is None or shared.all() else shared  # a slice where the peer holds every row
            common = self._rows[pos]
            if common.size == 0:
                continue
            seed = keys.agree(self._s.private, self._peers[v][1], keys.MASK, cfg.round_id, (self.id, v))
            m = mask_rows(seed, common, cfg.width)
            if sign(self.id, v) > 0:
                y[pos] += m
            else:
                y[pos] -= m
        return messages.frame("masked", cfg.round_id, self.id, y.astype("<u4").tobytes())

    # ------------------------------------------------------------------ stage 3
    def _survivors(self, survivors_msg: bytes) -> list[int]:
        cfg = self.config
        _, body = messages.open_frame(survivors_msg, "survivors", cfg.round_id, messages.SERVER)
        rd = messages.Reader(body, "survivors")
        u3: list[int] = rd.increasing(2**32, "survivors").tolist()
        rd.end()
        if len(u3) < cfg.threshold:
            raise InvalidMessage(f"survivors: {len(u3)} clients, fewer than the threshold {cfg.threshold}")
        if self.id not in u3 or not set(u3) <= set(self._u2):
            raise InvalidMessage("survivors: not a subset of the clients that shared keys, or without this client")
        return u3

    def consistency(self, survivors_msg: bytes) -> bytes:
        """ConsistencyCheck (signed round only): check the survivors U3 as :meth:`unmask` would
        and sign ``(round parameters, SHA-256 of the key list, U3)`` (:func:`survivor_list`); the
        client signs one list in a round."""
        if not self.config.signed or self.identity is None:
            raise ProtocolError(f"client {self.id}: consistency is a stage of signed rounds only")
        self._enter(3, "consistency")
        self._u3 = self._survivors(survivors_msg)
        sig = self.identity.sign(CONSISTENCY_DOMAIN, survivor_list(self.config, self._key_list, self._u3))
        return messages.frame("consistency", self.config.round_id, self.id, sig)

    def _signed_survivors(self, signatures_msg: bytes) -> list[int]:
        """The signers of U3, once ``threshold`` distinct survivors' signatures over it verify."""
        cfg = self.config
        _, body = messages.open_frame(signatures_msg, "signatures", cfg.round_id, messages.SERVER)
        rd = messages.Reader(body, "signatures")
        sigs = rd.records(SIGNATURE_BYTES, "signer")
        rd.end()
        signed = survivor_list(cfg, self._key_list, self._u3)
        for signer, sig in sigs:
            if signer not in self._u3 or signer not in self._signers:
                raise InvalidMessage(f"signatures: a signature of device {signer}, not a survivor of this "
                                     f"client's list (the server deviated)")
            verify(self._signers[signer], CONSISTENCY_DOMAIN, signed, sig,
                   f"signatures: device {signer} did not sign the survivor list this client was sent, in the run "
                   f"of its key list (the server sent different lists: it deviated)")
        if len(sigs) < cfg.threshold:
            raise InvalidMessage(f"signatures: {len(sigs)} survivors signed the survivor list, fewer than the "
                                 f"threshold {cfg.threshold}")
        return [signer for signer, _ in sigs]

    def unmask(self, msg: bytes) -> bytes:
        """Unmasking: given the survivors U3 (clients whose masked input arrived; in a signed
        round, ``msg`` is the server's ``signatures`` message and U3 the list this client signed,
        used only once ``threshold`` survivors' signatures over it verify), send the shares of
        ``s^SK`` of every dropped client (U2 minus U3) and of ``b`` of every survivor, each that
        this client holds: none of a sender whose shares did not open (:meth:`masked_input`).
        A client never reveals both kinds of share for the same client.

        With :attr:`~secemb.secagg.config.SecAggConfig.min_row_holders` ``m`` above 1 the client
        also refuses (``InvalidMessage``, no shares sent) where a row's revealed sum could be
        over fewer than ``m`` clients (:func:`short_row`, from the signed row sets): a dropped
        client of its U2 holds a row that at least one but fewer than ``m`` survivors hold (its
        mask key would open that row), or a survivor that did not sign U3 holds a row that
        fewer than ``m`` signers hold (docs/secagg.md, "Rows of few holders")."""
        cfg = self.config
        self._enter(4 if cfg.signed else 3, "unmask")
        if cfg.signed:
            signers = self._signed_survivors(msg)
            u3 = self._u3
        else:
            u3 = signers = self._survivors(msg)
        alive = set(u3)
        dropped = [v for v in self._u2 if v not in alive]
        breach = short_row(cfg, self._rows_of, u3, dropped=dropped, signers=signers)
        if breach is not None:
            raise InvalidMessage(f"unmask: {breach}; no shares sent (min_row_holders)")
        n = shamir.SHARE_BYTES

        def part(ids: list[int], which: int) -> bytes:
            held = [v for v in ids if v in self._held]
            recs = b"".join(v.to_bytes(4, "little") + self._held[v][which].to_bytes(n, "little") for v in held)
            return len(held).to_bytes(4, "little") + recs

        return messages.frame("unmask", cfg.round_id, self.id, part(dropped, 0), part(u3, 1))
