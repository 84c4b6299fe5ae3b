"""The client side of Bonawitz et al.'s semi-honest secure aggregation (CCS 2017, Fig. 4).

A :class:`SecAggClient` answers the server's four stages in order; each method takes the
server's message (bytes), checks it, and returns the client's reply (bytes)::

    advertise(rows)                       -> advertise   (c and s public keys [, rows])
    share_keys(keys)                      -> shares      (AES-GCM Shamir shares for each peer)
    masked_input(relayed, values)         -> masked      (y = x + PRG(b) + sum of +-PRG(s_uv))
    unmask(survivors)                     -> unmask      (shares of s^SK of the dropped,
                                                          of b of the survivors; never both)
"""

from __future__ import annotations

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.randomness import RandomBytes, system_rng
from secemb.secagg import keys, messages, shamir
from secemb.secagg.config import SecAggConfig, check_rows, sign
from secemb.secagg.prg import SEED_BYTES, mask_rows

__all__ = ["SecAggClient", "SHARE_PLAINTEXT_BYTES", "SHARE_CIPHERTEXT_BYTES"]

#: A relayed share: sender id, recipient id, share of s^SK, share of b.
SHARE_PLAINTEXT_BYTES = 8 + 2 * shamir.SHARE_BYTES
SHARE_CIPHERTEXT_BYTES = SHARE_PLAINTEXT_BYTES + keys.TAG_BYTES


class SecAggClient:
    """One client of one round.

    Parameters
    ----------
    client_id:
        The client's id in ``[0, 2^32 - 2]``; its Shamir point is ``client_id + 1``.
    config:
        The round's :class:`SecAggConfig`.
    _rng:
        Private test hook for the key pairs, the self-mask seed and the Shamir coefficients.

    Raises
    ------
    ProtocolError: a method called out of order or twice.
    InvalidMessage: a server message that is malformed or inconsistent.  The client has then
        left the round: it answers no later stage (a new round needs a new client).
    """

    def __init__(self, client_id: int, config: SecAggConfig, *, _rng: RandomBytes | None = None) -> None:
        self.config = config
        self.id = config.check_id(client_id)
        self._rng = system_rng if _rng is None else _rng
        self._stage = 0
        self._c = keys.KeyPair.generate(_rng=self._rng)
        self._s = keys.KeyPair.generate(_rng=self._rng)
        self._rows = np.arange(config.length, dtype=np.int64)
        self._rows.setflags(write=False)
        self._peers: dict[int, tuple[bytes, bytes]] = {}
        self._common: dict[int, np.ndarray] = {}  # peer -> bool over own rows: rows it holds too
        self._b = b""
        self._held: dict[int, tuple[int, int]] = {}  # sender -> (share of s^SK, share of b)
        self._u2: list[int] = []

    # ------------------------------------------------------------------ helpers
    def _enter(self, stage: int, name: str) -> None:
        if self._stage != stage:
            raise ProtocolError(f"client {self.id}: {name} called at stage {self._stage}, expected stage {stage}")
        self._stage = stage + 1

    @property
    def rows(self) -> np.ndarray:
        """The rows this client contributes (int64, increasing): all rows in a dense round."""
        return self._rows

    # ------------------------------------------------------------------ stage 0
    def advertise(self, rows: np.ndarray | None = None) -> bytes:
        """AdvertiseKeys: the two public keys, and in a sparse round the client's rows
        (``rows``: strictly increasing ints in ``[0, length)``; required iff sparse)."""
        if self.config.sparse != (rows is not None):
            raise InvalidParameters("rows must be given exactly when the round is sparse")
        self._enter(0, "advertise")
        parts = [self._c.public, self._s.public]
        if rows is not None:
            self._rows = check_rows(rows, self.config.length)
            self._rows.setflags(write=False)
            parts.append(messages.rows_bytes(self._rows))
        return messages.frame("advertise", self.config.round_id, self.id, *parts)

    # ------------------------------------------------------------------ stage 1
    def share_keys(self, keys_msg: bytes) -> bytes:
        """ShareKeys: Shamir shares of ``s^SK`` and of a fresh self-mask seed ``b`` for every
        client of the key list, each encrypted to its recipient under the c-agreement."""
        self._enter(1, "share_keys")
        cfg = self.config
        _, body = messages.open_frame(keys_msg, "keys", cfg.round_id, messages.SERVER)
        rd = messages.Reader(body, "keys")
        entries = rd.records(2 * keys.KEY_BYTES, "client")
        ids = [i for i, _ in entries]
        if self.id not in ids:
            raise InvalidMessage(f"keys: client {self.id} is not in the key list")
        if len(ids) < cfg.threshold:
            raise InvalidMessage(f"keys: {len(ids)} clients, fewer than the threshold {cfg.threshold}")
        for ident, rec in entries:
            c_pk, s_pk = rec[: keys.KEY_BYTES], rec[keys.KEY_BYTES :]
            if ident == self.id:
                if (c_pk, s_pk) != (self._c.public, self._s.public):
                    raise InvalidMessage("keys: the list carries other keys under this client's id")
            else:
                self._peers[ident] = (c_pk, s_pk)
        if cfg.sparse:
            k = self._rows.size
            size = -(-k // 8)
            bits = np.unpackbits(rd.array(len(ids) * size, "u1").reshape(len(ids), size), axis=1,
                                 bitorder="little")
            if bits[:, k:].any() or bits[ids.index(self.id)].any():
                raise InvalidMessage("keys: a row bitmap marks rows this client does not have, or itself")
            self._common = {ident: bits[i, :k].astype(bool) for i, ident in enumerate(ids) if ident != self.id}
        rd.end()
        self._b = self._rng(SEED_BYTES)
        s_sk = int.from_bytes(self._s.private, "little")  # c^SK is never shared
        table = shamir.split([s_sk, int.from_bytes(self._b, "little")], cfg.threshold,
                             [i + 1 for i in ids], _rng=self._rng)
        records = []
        for ident, (sh_s, sh_b) in zip(ids, table, strict=True):
            if ident == self.id:
                self._held[ident] = (sh_s, sh_b)
                continue
            pt = (ident.to_bytes(4, "little") + self.id.to_bytes(4, "little")
                  + sh_s.to_bytes(shamir.SHARE_BYTES, "little") + sh_b.to_bytes(shamir.SHARE_BYTES, "little"))
            key = keys.agree(self._c.private, self._peers[ident][0], keys.CHANNEL, cfg.round_id, (self.id, ident))
            records.append(ident.to_bytes(4, "little") + keys.seal(key, cfg.round_id, self.id, ident, pt))
        return messages.frame("shares", cfg.round_id, self.id, len(records).to_bytes(4, "little"), *records)

    # ------------------------------------------------------------------ stage 2
    def masked_input(self, relayed_msg: bytes, values: np.ndarray) -> bytes:
        """MaskedInputCollection: decrypt the peers' shares (their senders are the clients
        still in the round, U2) and send ``y = x + PRG(b) + sum_v +-PRG(s_uv)`` over this
        client's rows.

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
        entries = rd.records(SHARE_CIPHERTEXT_BYTES, "sender")
        rd.end()
        for sender, ct in entries:
            if sender not in self._peers:
                raise InvalidMessage(f"relayed: shares from client {sender}, who is not in the key list")
            key = keys.agree(self._c.private, self._peers[sender][0], keys.CHANNEL, cfg.round_id, (self.id, sender))
            pt = keys.open_sealed(key, cfg.round_id, sender, self.id, ct)
            if int.from_bytes(pt[:4], "little") != self.id or int.from_bytes(pt[4:8], "little") != sender:
                raise InvalidMessage(f"relayed: the shares from client {sender} name other parties")
            n = shamir.SHARE_BYTES
            held = (int.from_bytes(pt[8 : 8 + n], "little"), int.from_bytes(pt[8 + n :], "little"))
            if max(held) >= shamir.PRIME:
                raise InvalidMessage(f"relayed: the shares from client {sender} are outside the field")
            self._held[sender] = held
        self._u2 = sorted(self._held)
        if len(self._u2) < cfg.threshold:
            raise InvalidMessage(f"relayed: {len(self._u2)} clients left, fewer than the threshold {cfg.threshold}")
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
    def unmask(self, survivors_msg: bytes) -> bytes:
        """Unmasking: given the survivors U3 (clients whose masked input arrived), send the
        shares of ``s^SK`` of every dropped client (U2 minus U3) and of ``b`` of every survivor.
        A client never reveals both kinds of share for the same client."""
        self._enter(3, "unmask")
        cfg = self.config
        _, body = messages.open_frame(survivors_msg, "survivors", cfg.round_id, messages.SERVER)
        rd = messages.Reader(body, "survivors")
        u3 = rd.increasing(2**32, "survivors").tolist()
        rd.end()
        if len(u3) < cfg.threshold:
            raise InvalidMessage(f"survivors: {len(u3)} clients, fewer than the threshold {cfg.threshold}")
        if self.id not in u3 or not set(u3) <= set(self._u2):
            raise InvalidMessage("survivors: not a subset of the clients that shared keys, or without this client")
        alive = set(u3)
        dropped = [v for v in self._u2 if v not in alive]
        n = shamir.SHARE_BYTES

        def part(ids: list[int], which: int) -> bytes:
            recs = b"".join(v.to_bytes(4, "little") + self._held[v][which].to_bytes(n, "little") for v in ids)
            return len(ids).to_bytes(4, "little") + recs

        return messages.frame("unmask", cfg.round_id, self.id, part(dropped, 0), part(u3, 1))
