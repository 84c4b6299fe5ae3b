"""Public parameters of one secure-aggregation round, the abort exception and the threshold rule."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from secemb.errors import InvalidParameters, ProtocolError, check_int

__all__ = ["SecAggConfig", "SecAggAborted", "default_threshold", "check_min_row_holders", "check_rows", "sign"]

_MAX_ID = 0xFFFFFFFE  # 0xFFFFFFFF is the server's sender id


class SecAggAborted(ProtocolError):
    """Fewer clients than the threshold are left at some stage, or (``min_row_holders``) the
    dropouts left a row too few holders, or a secret has too few shares to open: the round is
    over and nothing about the inputs was opened (no partial sum exists).

    Attributes
    ----------
    aborting_dropouts:
        The sorted devices named for the abort (the name is session 26's; the one-server server
        counts them at its door).  Under :attr:`SecAggConfig.min_row_holders`
        (:meth:`~secemb.secagg.server.SecAggServer.survivors_messages`,
        :meth:`~secemb.secagg.server.SecAggServer.signatures_messages`): each client that dropped
        out (or did not sign the survivor list) holding a row the rule then breached.  At
        Unmasking (:meth:`~secemb.secagg.server.SecAggServer.result`, session 27): each owner of a
        secret with fewer than ``threshold`` shares where at least ``threshold`` clients unmasked
        (holders found lying not counted), so the complaints against it (its encrypted shares
        did not open for them) alone left it short.  A suspicion, not a proof: an honest
        device's dropout does the same, and a server that alters ciphertexts, or more than
        ``|U4| - threshold`` colluding clients complaining falsely, name an honest owner
        (docs/secagg.md, "Rows of few holders", "Shares that do not open").  Empty for any other
        abort.
    """

    def __init__(self, reason: str, aborting_dropouts: tuple[int, ...] = ()) -> None:
        super().__init__(reason)
        self.aborting_dropouts = tuple(sorted(aborting_dropouts))


def default_threshold(n: int) -> int:
    """``n // 2 + 1``: the smallest majority of the ``n`` clients that start a round.

    It tolerates ``ceil(n / 2) - 1`` dropouts and keeps the inputs secret against the server
    together with up to ``threshold - 1`` clients (Bonawitz et al., CCS 2017, honest-but-curious
    analysis: ``t`` must exceed the number of colluding clients).  Against an *active* server
    (a :attr:`SecAggConfig.signed` round) with no colluding client it also suffices: an honest
    client signs one survivor list, so two lists each signed by ``t > n/2`` clients share an
    honest signer and are equal.  With ``c`` clients colluding with an active server, Bonawitz
    et al. need ``t > (2n + c) / 3`` (``t > 2n/3`` for any ``c < t``); ``docs/secagg.md``.
    """
    if n < 2:
        raise InvalidParameters(f"secure aggregation needs at least 2 clients, got {n}")
    return n // 2 + 1


def check_min_row_holders(value: object, threshold: int, clients: int | None = None) -> int:
    """``value`` as an ``int`` if it is a round's :attr:`SecAggConfig.min_row_holders` under
    ``threshold``: an int in ``[1, threshold]`` (the rule of every party that sets or checks
    one: the round's config, SFSL's settings, runs and server).  ``clients``: the round's
    clients (threshold :func:`default_threshold` of them), named in the message.

    Raises
    ------
    InvalidParameters
        Otherwise: "min_row_holders (at most the threshold of a round of ``clients`` devices)
        must be an int in [1, ``threshold``], got ``value``" ("at most the round's threshold"
        without ``clients``).
    """
    of = "the round's threshold" if clients is None else f"the threshold of a round of {clients} devices"
    return check_int(f"min_row_holders (at most {of})", value, low=1, high=threshold)


@dataclass(frozen=True)
class SecAggConfig:
    """What every party of a round agrees on before it starts.

    Attributes
    ----------
    length:
        Rows of the summed matrix.
    threshold:
        ``t`` of the t-of-n Shamir sharing; every stage needs at least ``t`` live clients.
        At least 2 (with ``t = 1`` every client would hold every peer's secrets).
    width:
        ``uint32`` words per row; the sum is a ``(length, width)`` matrix in Z_2^32.
    round_id:
        Bound into every header, key derivation and AES-GCM nonce; never reuse one with the
        same key pairs.
    sparse:
        If true, each client declares the rows it contributes (its advertise message) and the
        sum of row ``j`` is over the surviving clients holding ``j``; pairwise masks are applied
        only on rows both clients hold (the per-row participant sets of SFSL).  If false,
        every client contributes every row.
    signed:
        If true, the round resists an active server (``docs/secagg.md``, "Active server"): each
        client signs its advertised keys with its certified identity and checks every peer's
        signature, a consistency round (every survivor signs the survivor list) precedes
        unmasking, and in a sparse round each client signs its row set (a bitmap over the
        :attr:`candidates`) with its keys: the rows two clients share are learned from the
        peer's signed row set, never from the server's say.
    public_from:
        In a sparse round, rows ``public_from .. length - 1`` are held by every client (a public
        rule, e.g. SFSL's dense rows): every client's rows must include them (default
        ``length``: no such rows).
    candidates:
        In a sparse round, the rows below :attr:`public_from` a client may hold (strictly
        increasing; default every one of them): a client's rows are within the candidates and
        the public rows, and a signed round's row sets are bitmaps over the candidates.  Public
        (e.g. SFSL's PSU union and its categories); :meth:`header` commits to them.
    min_row_holders:
        In a signed sparse round, the fewest devices whose values a revealed row sum may be over
        (``docs/secagg.md``, "Rows of few holders"; default 1: no rule).  Each client contributes
        zero on every row fewer than ``min_row_holders`` clients of its U2 hold (from their signed
        row sets), and unmasks only where no revealed row sum can be over fewer (a row a dropped
        client of its U2 holds left with ``1 .. min_row_holders - 1`` surviving holders, or a
        row of a survivor that did not sign U3 with fewer signers among its surviving holders:
        :func:`~secemb.secagg.client.short_row`).  At most
        :attr:`threshold`; above 1 only in a signed sparse round (an unsigned round's clients know
        only the rows they share with each peer, from the server).  SFSL sets 2.
    """

    length: int
    threshold: int
    width: int = 1
    round_id: int = 0
    sparse: bool = False
    signed: bool = False
    public_from: int | None = None
    candidates: tuple[int, ...] | None = None
    min_row_holders: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.length < 2**32:
            raise InvalidParameters(f"length must be in [1, 2^32), got {self.length}")
        if not 1 <= self.width <= 2**20:
            raise InvalidParameters(f"width must be in [1, 2^20], got {self.width}")
        if self.length * self.width > 2**30:
            raise InvalidParameters(f"length x width must be at most 2^30 words (a message body is below 4 GiB), "
                                    f"got {self.length} x {self.width}")
        if self.threshold < 2:
            raise InvalidParameters(f"threshold must be >= 2, got {self.threshold}")
        if not 0 <= self.round_id < 2**64:
            raise InvalidParameters(f"round_id must be in [0, 2^64), got {self.round_id}")
        if self.public_from is not None and (not self.sparse or not 0 <= self.public_from <= self.length):
            raise InvalidParameters(f"public_from must be in [0, length] and only in a sparse round, "
                                    f"got {self.public_from}")
        if self.candidates is not None:
            if not self.sparse:
                raise InvalidParameters("candidates are rows of a sparse round only")
            c = np.asarray(self.candidates, dtype=np.int64)
            if c.ndim != 1 or (c.size and (int(c[0]) < 0 or int(c[-1]) >= self.private_rows
                                           or np.any(np.diff(c) <= 0))):
                raise InvalidParameters(f"candidates must be strictly increasing rows in [0, {self.private_rows})")
        check_min_row_holders(self.min_row_holders, self.threshold)
        if self.min_row_holders > 1 and not (self.sparse and self.signed):
            raise InvalidParameters("min_row_holders above 1 needs a signed sparse round (every peer's signed row set "
                                    "and the consistency round)")

    @property
    def private_rows(self) -> int:
        """Rows below :attr:`public_from` (every row without one): those a client may or may not hold."""
        return self.length if self.public_from is None else self.public_from

    @cached_property
    def candidate_rows(self) -> np.ndarray:
        """:attr:`candidates` as a read-only int64 array (every row below :attr:`private_rows` without them)."""
        c = (np.arange(self.private_rows, dtype=np.int64) if self.candidates is None
             else np.asarray(self.candidates, dtype=np.int64))
        c.setflags(write=False)
        return c

    @property
    def bitmap_bytes(self) -> int:
        """Bytes of a row set's bitmap over the candidates: ``ceil(len(candidates) / 8)``."""
        return -(-self.candidate_rows.size // 8)

    @cached_property
    def _header(self) -> bytes:
        head = struct.pack("<QIIIIBB", self.round_id, self.length, self.width, self.threshold, self.private_rows,
                           self.sparse, self.signed)
        if not self.sparse:
            return head
        return (head + hashlib.sha256(self.candidate_rows.astype("<u4").tobytes()).digest()
                + struct.pack("<I", self.min_row_holders))

    def header(self) -> bytes:
        """The round's public parameters as bytes (what every signature of the round covers):
        ``round_id`` u64, ``length``, ``width``, ``threshold``, :attr:`private_rows` u32,
        ``sparse``, ``signed`` u8; in a sparse round then SHA-256 of the candidate rows (uint32)
        and ``min_row_holders`` u32 (so every client of a round enforces the same rule, or the
        signatures do not verify)."""
        return self._header

    def row_bitmap(self, rows: np.ndarray) -> bytes | None:
        """The row set ``rows`` (increasing, within ``[0, length)``) as a bitmap over the
        candidates (:attr:`bitmap_bytes`; bit ``i`` = bit ``i mod 8`` of byte ``i div 8``, set
        where the row set holds candidate ``i``); ``None`` if a row below :attr:`public_from`
        is not a candidate."""
        c = self.candidate_rows
        private = rows[: int(np.searchsorted(rows, self.private_rows))]
        at = np.searchsorted(c, private)
        if private.size and (c.size == 0 or np.any(at >= c.size) or np.any(c[np.minimum(at, c.size - 1)] != private)):
            return None
        bits = np.zeros(c.size, bool)
        bits[at] = True
        return np.packbits(bits, bitorder="little").tobytes()

    def check_id(self, client_id: int) -> int:
        """``client_id`` if it is a valid id (an int in ``[0, 2^32 - 2]``)."""
        return check_int("client id", client_id, low=0, high=_MAX_ID)


def check_rows(rows: object, length: int, public_from: int | None = None) -> np.ndarray:
    """Rows as int64: 1-D, strictly increasing, in ``[0, length)`` (and, given ``public_from``,
    including every row from ``public_from`` on)."""
    a = np.asarray(rows)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise InvalidParameters("rows must be a 1-D integer array")
    a = a.astype(np.int64)
    if a.size and (int(a[0]) < 0 or int(a[-1]) >= length or np.any(np.diff(a) <= 0)):
        raise InvalidParameters(f"rows must be strictly increasing and in [0, {length})")
    if public_from is not None and int(np.count_nonzero(a >= public_from)) != length - public_from:
        raise InvalidParameters(f"rows must include every row from {public_from} on (held by every client)")
    return a


def sign(u: int, v: int) -> int:
    """+1 if ``u < v`` else -1: client ``u`` adds the pair's mask, ``v`` subtracts it."""
    return 1 if u < v else -1
