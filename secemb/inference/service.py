"""The inference exchange (grec.txt §3.2, A.8.1): one request, one reply.

* The **device** privatizes its representation once (:func:`~secemb.inference.privatize`:
  clip, Gaussian noise, re-clip), keeps ``Z_u``, and sends ``H~_u`` -- the only thing that
  leaves it.  Repeated queries reuse the same release (post-processing: no further privacy
  cost); a new release would spend another ``(epsilon, delta)``.
* The **server** scores its **public candidate set** ``I_f`` (the whole catalogue by
  default, or a list fixed for all devices) on ``H~_u`` and returns every score in the set's
  order.  It never learns which items the device wants: the request names none.
* The device picks its items' scores, adds its private offset (``b_u``, ``x_u . w_x``) and,
  with a denoiser, applies F_p (Eq. 16) locally with its clean ``H_u`` and ``Z_u``.

Wire format (little-endian)::

    request  b"GRQ1" | uint32 R | uint32 d | float64 H~ (R*d, row-major)
    reply    b"GRS1" | uint32 n | float64 scores (n, the candidate set's order)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.inference.denoiser import Denoiser
from secemb.inference.mechanism import GaussianLDP, privatize
from secemb.inference.representation import Representation
from secemb.randomness import RandomBytes
from secemb.transport.inprocess import InProcessTransport, user_endpoint

__all__ = ["STAGE", "InferenceDevice", "InferenceServer", "decode_reply", "decode_request", "encode_reply",
           "encode_request", "infer", "reply_bytes", "request_bytes"]

#: the transport stage of both messages
STAGE = "inference"
_REQ, _REP = b"GRQ1", b"GRS1"
_REQ_HEAD, _REP_HEAD = struct.Struct("<4sII"), struct.Struct("<4sI")


def request_bytes(rows: int, dim: int) -> int:
    """The exact length of a request carrying an ``(rows, dim)`` ``H~``."""
    return _REQ_HEAD.size + 8 * rows * dim


def reply_bytes(n: int) -> int:
    """The exact length of a reply carrying ``n`` scores."""
    return _REP_HEAD.size + 8 * n


def encode_request(h_tilde: np.ndarray) -> bytes:
    """The request carrying ``H~_u`` (float64 ``(R, d)``)."""
    h = np.asarray(h_tilde, dtype="<f8")
    if h.ndim != 2:
        raise InvalidParameters(f"H~ must be (R, d), got {h.shape}")
    return _REQ_HEAD.pack(_REQ, *h.shape) + h.tobytes()


def decode_request(data: bytes, rows: int, dim: int) -> np.ndarray:
    """``H~_u`` from a request the server expects to be ``(rows, dim)``.

    Raises
    ------
    InvalidMessage
        Wrong magic, shape or length, or a non-finite value.
    """
    view = memoryview(data).cast("B")
    if len(view) != request_bytes(rows, dim):
        raise InvalidMessage(f"inference request: expected {request_bytes(rows, dim)} bytes, got {len(view)}")
    magic, r, d = _REQ_HEAD.unpack_from(view)
    if magic != _REQ or (r, d) != (rows, dim):
        raise InvalidMessage(f"inference request: expected GRQ1 ({rows}, {dim}), got {bytes(magic)!r} ({r}, {d})")
    h = np.frombuffer(view, dtype="<f8", offset=_REQ_HEAD.size).reshape(rows, dim).astype(np.float64)
    if not np.isfinite(h).all():
        raise InvalidMessage("inference request: non-finite values")
    return h


def encode_reply(scores: np.ndarray) -> bytes:
    """The reply carrying the candidates' scores."""
    s = np.asarray(scores, dtype="<f8").reshape(-1)
    return _REP_HEAD.pack(_REP, s.size) + s.tobytes()


def decode_reply(data: bytes, n: int) -> np.ndarray:
    """The ``n`` scores of a reply.

    Raises
    ------
    InvalidMessage
        Wrong magic or length, or a score that is not finite.
    """
    view = memoryview(data).cast("B")
    if len(view) != reply_bytes(n):
        raise InvalidMessage(f"inference reply: expected {reply_bytes(n)} bytes, got {len(view)}")
    magic, got = _REP_HEAD.unpack_from(view)
    if magic != _REP or got != n:
        raise InvalidMessage(f"inference reply: expected GRS1 with {n} scores, got {bytes(magic)!r} with {got}")
    scores = np.frombuffer(view, dtype="<f8", offset=_REP_HEAD.size).astype(np.float64)
    if not np.isfinite(scores).all():
        raise InvalidMessage("inference reply: non-finite scores")
    return scores


def _candidates(candidates: np.ndarray | None, num_items: int) -> np.ndarray:
    if candidates is None:
        return np.arange(num_items, dtype=np.int64)
    c = np.asarray(candidates)
    if c.ndim != 1 or c.size == 0 or not np.issubdtype(c.dtype, np.integer):
        raise InvalidParameters("candidates must be a non-empty 1-D array of item ids")
    c = np.unique(c.astype(np.int64))
    if c[0] < 0 or c[-1] >= num_items:
        raise InvalidParameters(f"candidates must be item ids in [0, {num_items})")
    return c


@dataclass
class InferenceServer:
    """The server's side: the public recommender (its :class:`Representation` with the public
    dense, and the public ``table``) and the public candidate set (``None``: every item)."""

    rep: Representation
    table: np.ndarray
    candidates: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.candidates = _candidates(self.candidates, int(self.table.shape[0]))

    def answer(self, request: bytes) -> bytes:
        """The reply to one request: the score of every candidate on the request's ``H~``.

        Raises
        ------
        InvalidMessage
            A malformed request; or one whose scores are not finite (values far beyond any
            clipping bound overflow FM's squares: an honest ``H~`` has norm at most ``B``; the
            reply would break its own format, finding S43-G4).
        """
        h = decode_request(request, self.rep.rows, self.rep.dim)
        assert self.candidates is not None
        with np.errstate(over="ignore", invalid="ignore"):
            summary = self.rep.summary(h[None])
            scores = self.rep.score(np.repeat(summary, self.candidates.size, axis=0), self.table[self.candidates])
        if not np.isfinite(scores).all():
            raise InvalidMessage("inference request: its scores are not finite (values far beyond any clipping "
                                 "bound)")
        return encode_reply(scores)


@dataclass
class InferenceDevice:
    """One device's side.

    Attributes
    ----------
    h: float64 ``(R, d)``, its clean representation; ``offset``: its private scalar terms.
    mechanism: the release's ``(epsilon, delta, B)``.
    candidates: the server's public candidate set (``None``: every item of ``num_items``).
    num_items: the catalogue size.
    denoiser: ``(Denoiser, table, dense)`` of the trained F_p, or ``None`` (the release's
        scores as they are).
    user: the device's index in the denoiser's context (its ``H_u``).
    release: ``(H~_u, Z_u)`` of an earlier release of this ``h`` to send again (a
        :class:`~secemb.inference.releases.ReleaseLedger`'s); ``None``: drawn on the first
        request.
    _rng: random bytes for the noise (tests only; the OS CSPRNG by default).
    """

    h: np.ndarray
    offset: float
    mechanism: GaussianLDP
    num_items: int
    candidates: np.ndarray | None = None
    denoiser: tuple[Denoiser, np.ndarray, np.ndarray] | None = None
    user: int = 0
    release: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    _rng: RandomBytes | None = None

    def __post_init__(self) -> None:
        self.candidates = _candidates(self.candidates, self.num_items)

    def request(self) -> bytes:
        """The request: ``H~_u`` of this device's one release (drawn on the first call)."""
        if self.release is None:
            h_tilde, z = privatize(np.asarray(self.h, dtype=np.float64)[None], self.mechanism, _rng=self._rng)
            self.release = (h_tilde[0], z[0])
        return encode_request(self.release[0])

    def scores(self, reply: bytes, items: np.ndarray) -> np.ndarray:
        """float64 ``(len(items),)``: the predictions of ``items`` from the server's reply --
        ``r~`` of the (re-clipped) release plus the offset without a denoiser, F_p's ``r^`` with
        one.

        Raises
        ------
        InvalidParameters
            No request was made, or an item is not in the public candidate set.
        InvalidMessage
            A malformed reply.
        """
        if self.release is None:
            raise InvalidParameters("call request() first")
        assert self.candidates is not None
        items = np.asarray(items, dtype=np.int64).reshape(-1)
        pos = np.searchsorted(self.candidates, items)
        if (pos >= self.candidates.size).any() or (self.candidates[np.minimum(pos, self.candidates.size - 1)]
                                                   != items).any():
            raise InvalidParameters("every item must be in the server's public candidate set")
        r_tilde = decode_reply(reply, self.candidates.size)[pos] + self.offset
        if self.denoiser is None:
            return r_tilde
        den, table, dense = self.denoiser
        h_tilde, z = self.release
        return den.denoise(table, dense, np.array([self.user]), h_tilde[None], z[None],
                           np.zeros(items.size, dtype=np.int64), items, r_tilde)


def infer(device: InferenceDevice, server: InferenceServer, items: np.ndarray, *, user: int = 0,
          transport: InProcessTransport | None = None) -> np.ndarray:
    """One inference over ``transport`` (a fresh :class:`InProcessTransport` by default): the
    device's request to ``server0``, the reply back, the device's predictions of ``items``."""
    tp = InProcessTransport() if transport is None else transport
    me = user_endpoint(user)
    tp.send(me, "server0", device.request(), stage=STAGE)
    tp.send("server0", me, server.answer(tp.recv("server0", me)), stage=STAGE)
    return device.scores(tp.recv(me, "server0"), items)
