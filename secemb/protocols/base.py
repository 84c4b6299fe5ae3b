"""Role interfaces shared by every training protocol.

A round of federated training runs in four stages, named by the driver:

1. ``retrieval``: each participating user sends one request to each server and gets one
   reply from each; it reconstructs the ``m'`` rows it asked for.
2. local training (no protocol traffic).
3. ``upload``: each user sends one message to each server with its encoded sparse row
   gradients and its dense gradient.
4. ``aggregate``: server 1 sends its aggregate share to server 0, which reconstructs the
   round's sums.

Protocol objects speak only in ``bytes`` and never read each other's state; the driver
(:mod:`secemb.training`) or the network server moves the bytes through a transport.  With
``Protocol.relay`` the retrieval runs user -> server 1 (roots), user -> server 0 (keys),
server 0 -> server 1 (:meth:`RelayRole.relay_retrieval`), server 1 -> server 0
(:meth:`RelayRole.complete_retrieval`), server 0 -> user; the upload user -> server 0,
server 0 -> server 1 (:meth:`RelayRole.relay_upload`): the relay steps of a
:class:`RelayRole`, which only a relay-capable protocol's servers are.

Array conventions (all arrays in the ring of ``config.ring_bits``, dtype uint32 or uint64):

* the public sparse table ``T`` has shape ``(m, width)`` -- item embedding and item bias,
  fixed-point encoded;
* a user's retrieved rows and row gradients have shape ``(m_prime, width)``;
* the dense gradient has shape ``(dense_size,)``.
"""

from __future__ import annotations

import hmac
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Protocol as TypingProtocol, TypeVar, runtime_checkable

import numpy as np

from secemb.errors import InvalidParameters, ProtocolError, SecembError, check_int
from secemb.fss.cuckoo import MAX_EXPANSION, NUM_HASHES, CuckooLayout, buckets_for
from secemb.options import DEFAULTS
from secemb.protocols.stages import RoundPlan, round_plan
from secemb.protocols.wire import HEADER_BYTES
from secemb.randomness import RandomBytes
from secemb.ring import FixedPoint

if TYPE_CHECKING:  # annotations only: secemb.privacy loads its numba kernels (~40 ms) on import
    from secemb.privacy.noise import ClipSpec

__all__ = ["BOUNDED_KINDS", "BOUND_CHALLENGE_BYTES", "LAYOUT_OPTIONS", "PEER_KEY_MIN_BYTES", "BoundProver",
           "Capabilities", "ExchangeNode", "Protocol", "RelayRole", "RoundConfig", "ServerRole", "UserRole",
           "purpose_key", "result_or_raise"]

T = TypeVar("T")

#: the least bytes of a deployment's peer key (:meth:`Protocol.make_server`): the servers' peer
#: secret, which the configuration requires to be at least this long
PEER_KEY_MIN_BYTES = 32
#: the length of server 0's challenge to a device's bound proof (:class:`BoundProver`): fixed by
#: the deployment's API, so the device checks it without knowing the protocol
BOUND_CHALLENGE_BYTES = 16


def purpose_key(peer_key: bytes, purpose: bytes) -> bytes:
    """``HMAC-SHA256(peer_key, purpose)``: the 32-byte key of one ``purpose`` (a protocol's
    constant tag, e.g. SecEmb's ``b"secemb-sketch-key"``) derived from the deployment's peer key
    (:meth:`Protocol.make_server`).  A protocol uses the peer key only through this, one tag per
    purpose, so its keys are independent of each other and of the peer requests' signatures
    under the same secret.

    Raises
    ------
    InvalidParameters: ``peer_key`` is not bytes of at least :data:`PEER_KEY_MIN_BYTES`.
    """
    if not isinstance(peer_key, bytes) or len(peer_key) < PEER_KEY_MIN_BYTES:
        raise InvalidParameters(f"a peer key is bytes of at least {PEER_KEY_MIN_BYTES}")
    return hmac.digest(peer_key, purpose, "sha256")


@dataclass(frozen=True)
class RoundConfig:
    """Public parameters of one round, known to both servers and every participant.

    Attributes
    ----------
    round_id: round number, >= 0.
    num_items: ``m``, rows of the sparse table.
    width: columns of the sparse table (``d + 1`` for an embedding plus an item bias).
    dense_size: length of the flattened dense parameter vector.
    m_prime: ``m'``, the public bound on the rated items a user uses per round.
    ring_bits: 32 or 64.
    layout: ``"full"`` -- every user requests exactly ``m'`` rows, each key over all ``m``
        items (the paper); ``"cuckoo"`` -- every user requests one row per bucket of the
        public cuckoo layout, ``num_buckets`` keys over the bucket domain
        (:mod:`secemb.fss.cuckoo`).
    num_buckets: ``B`` for the cuckoo layout (``>= m'``); 0 for the full layout.
    layout_seed: public seed of the cuckoo hash functions.
    """

    round_id: int
    num_items: int
    width: int
    dense_size: int
    m_prime: int
    ring_bits: int = 32
    layout: str = "full"
    num_buckets: int = 0
    layout_seed: int = 0

    def __post_init__(self) -> None:
        if self.round_id < 0:
            raise InvalidParameters(f"round_id must be >= 0, got {self.round_id}")
        if self.num_items < 1:
            raise InvalidParameters(f"num_items must be >= 1, got {self.num_items}")
        if self.width < 1:
            raise InvalidParameters(f"width must be >= 1, got {self.width}")
        if self.dense_size < 0:
            raise InvalidParameters(f"dense_size must be >= 0, got {self.dense_size}")
        if not 1 <= self.m_prime <= self.num_items:
            raise InvalidParameters(
                f"m_prime must be in [1, num_items={self.num_items}], got {self.m_prime}"
            )
        if self.ring_bits not in (32, 64):
            raise InvalidParameters(f"ring_bits must be 32 or 64, got {self.ring_bits}")
        if self.layout == "full":
            if self.num_buckets != 0:
                raise InvalidParameters(f"num_buckets must be 0 for the full layout, got {self.num_buckets}")
        elif self.layout == "cuckoo":
            if self.num_buckets < max(self.m_prime, NUM_HASHES):
                raise InvalidParameters(
                    f"num_buckets must be >= max(m_prime, {NUM_HASHES}) = {max(self.m_prime, NUM_HASHES)}, "
                    f"got {self.num_buckets}"
                )
        else:
            raise InvalidParameters(f"layout must be 'full' or 'cuckoo', got {self.layout!r}")

    @property
    def slots(self) -> int:
        """Rows a user requests (and keys it sends each server): ``m'`` or ``B``."""
        return self.m_prime if self.layout == "full" else self.num_buckets

    def cuckoo(self) -> CuckooLayout:
        """The public cuckoo layout of this round (cached)."""
        if self.layout != "cuckoo":
            raise InvalidParameters("this round does not use the cuckoo layout")
        return _layout(self.num_items, self.num_buckets, self.layout_seed)

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype of ring elements."""
        return np.dtype(np.uint32 if self.ring_bits == 32 else np.uint64)


def _or_error(fn, *args):  # noqa: ANN001, ANN202 - internal helper
    try:
        return fn(*args)
    except SecembError as exc:
        return exc


@lru_cache(maxsize=8)
def _layout(num_items: int, num_buckets: int, seed: int) -> CuckooLayout:
    return CuckooLayout(num_items, num_buckets, seed)


class UserRole(ABC):
    """The device side of one user in one round; created fresh every round."""

    @abstractmethod
    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes | None]:
        """Messages to server 0 and server 1 asking for rows ``indices`` (int64,
        (config.slots,); -1 marks an empty cuckoo bucket); ``None``: no message for server 1,
        whose round plan has no retrieval hop to it (e.g. a protocol that downloads the whole
        table from server 0)."""

    @classmethod
    def retrieval_requests(cls, users: Sequence[UserRole],
                           indices: Sequence[np.ndarray]) -> Sequence[tuple[bytes, bytes | None] | Exception]:
        """:meth:`retrieval_request` of many users of one round at once (``users[i]`` asks for
        ``indices[i]``; a simulation's devices): per user its messages, or the exception that
        refused its request (that user's state unchanged).  Default: one by one; roles whose
        key generation batches across users override it."""
        return _each(lambda user, idx: user.retrieval_request(idx), users, indices)

    @abstractmethod
    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
        """Reconstruct the requested rows from the servers' replies (``reply1`` is ``None``
        with relay): ring array (slots, width), zero rows for empty slots."""

    @classmethod
    def retrieval_results(cls, users: Sequence[UserRole],
                          replies: Sequence[tuple[bytes, bytes | None]]) -> list[np.ndarray | Exception]:
        """:meth:`retrieval_result` of many users of one round at once (``users[i]`` reads
        ``replies[i]``, its ``(reply0, reply1)``; a simulation's devices): per user its rows, or
        the exception its own call would have raised.  Default: one by one; roles whose reading
        batches across users override it, with the same result for every user."""
        return _each(lambda user, got: user.retrieval_result(*got), users, replies)

    @abstractmethod
    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes | None]:
        """Messages to server 0 and 1 (``None``: nothing for server 1, with relay) carrying
        row gradients ``rows`` (ring, (slots, width); zero rows for empty slots), row ``i``
        belonging to ``indices[i]`` of the retrieval request, and the dense gradient
        ``dense`` (ring, (dense_size,))."""

    @classmethod
    def uploads(cls, users: Sequence[UserRole],
                gradients: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[bytes, bytes | None] | Exception]:
        """:meth:`upload` of many users of one round at once (``users[i]`` uploads
        ``gradients[i]``, its ``(rows, dense)``; a simulation's devices): per user its messages,
        or the exception its own call would have raised.  Each user draws its randomness from
        its own source in the order its own call would.  Default: one by one; roles whose
        encoding batches across users override it, with the same messages for every user."""
        return _each(lambda user, got: user.upload(*got), users, gradients)


@runtime_checkable
class BoundProver(TypingProtocol):
    """A user role with the bounded-payload proof: what a device runs when its protocol's plan
    has the :data:`~secemb.protocols.stages.PROVE` hops (SecEmb's option ``bound``).  Server 0's
    challenge is :data:`BOUND_CHALLENGE_BYTES` bytes (what the node serves at ``GET
    /v1/rounds/{r}/challenge``; the device refuses any other length before it proves)."""

    def bound_proof(self, challenge: bytes) -> bytes:
        """The proof, for server 0's ``challenge`` (:data:`BOUND_CHALLENGE_BYTES` bytes), that
        this round's upload is within the bound.

        Raises
        ------
        InvalidParameters: the upload is beyond the bound (no proof can be made).
        """


def result_or_raise(result: T | Exception) -> T:
    """One entry of a batch's results (a value, or the exception in its place): the value, or
    the exception raised."""
    if isinstance(result, Exception):
        raise result
    return result


def _each(fn: Callable[[UserRole, Any], Any], users: Sequence[UserRole], args: Sequence[Any]) -> list[Any]:
    """``fn(user, arg)`` of each user in order, an exception in the place of a user whose call
    raised one (the others go on)."""
    out: list[Any] = []
    for user, arg in zip(users, args, strict=True):
        try:
            out.append(fn(user, arg))
        except Exception as exc:  # noqa: BLE001 - one user's refusal is its own result
            out.append(exc)
    return out


class ServerRole(ABC):
    """One server (party 0 or 1); lives across rounds.

    The base holds what every role shares: its party (checked once, here), the current round's
    configuration (:meth:`_start_round` refuses a round that does not follow the last one, so
    round ids increase for every protocol) and the user-set agreement (:meth:`_include`).
    """

    party: int
    config: RoundConfig | None

    def __init__(self, party: int) -> None:
        if isinstance(party, bool) or party not in (0, 1):
            raise InvalidParameters(f"party must be 0 or 1, got {party!r}")
        self.party = party
        self.config = None

    def _start_round(self, config: RoundConfig) -> None:
        """Make ``config`` the current round (what :meth:`begin_round` does first).

        Raises
        ------
        InvalidParameters: ``config`` is not a :class:`RoundConfig`.
        ProtocolError: its round id does not follow the current round's.
        """
        if not isinstance(config, RoundConfig):
            raise InvalidParameters(f"config must be a RoundConfig, got {type(config).__name__}")
        if self.config is not None and config.round_id <= self.config.round_id:
            raise ProtocolError(
                f"server {self.party}: round {config.round_id} does not follow round {self.config.round_id}"
            )
        self.config = config

    def _cfg(self) -> RoundConfig:
        """The current round's configuration.

        Raises
        ------
        ProtocolError: no round has begun.
        """
        if self.config is None:
            raise ProtocolError(f"server {self.party}: no round in progress")
        return self.config

    @abstractmethod
    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        """Start a round; ``table`` is the encoded public sparse table (ring, (m, width))."""

    @staticmethod
    def _include(include: list[int] | None, uploaded: Collection[int], round_id: int) -> list[int]:
        """Sorted ``include`` (``None``: all of ``uploaded``), checked to be a subset of it.

        Raises
        ------
        ProtocolError: a user of ``include`` did not upload.
        """
        if include is None:
            return sorted(uploaded)
        users = sorted(set(include))
        missing = [u for u in users if u not in uploaded]
        if missing:
            raise ProtocolError(f"include: user(s) {missing[:5]} did not upload in round {round_id}")
        return users

    @abstractmethod
    def handle_retrieval(self, user_id: int, message: bytes) -> bytes | None:
        """Answer one user's retrieval request.  With relay, server 0 returns the message to
        forward to server 1 and server 1 returns ``None``."""

    @abstractmethod
    def handle_upload(self, user_id: int, message: bytes) -> bytes | None:
        """Absorb one user's upload into this server's running aggregate.  With relay,
        server 0 returns the message to forward to server 1; otherwise ``None``."""

    def handle_retrieval_many(self, requests: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """:meth:`handle_retrieval` for many ``(user_id, message)`` pairs; a rejected request
        yields its exception in its place.  Servers that can evaluate a batch faster than
        user by user override this."""
        return [_or_error(self.handle_retrieval, u, m) for u, m in requests]

    def handle_upload_many(self, uploads: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """:meth:`handle_upload` for many ``(user_id, message)`` pairs of the round (what a
        server received together): per pair what :meth:`handle_upload` returns, or the
        exception that refused it in its place -- a refused upload changes no state, the others
        are absorbed (a user listed twice: the second is refused as an upload already taken).
        Default: one by one; servers that absorb a batch faster override this with the same
        result for every pair.

        Raises
        ------
        OSError: the server could not keep what it must (a share it spills to disk): no upload
            of the batch counts (SecEmb's override absorbs none; the default may have absorbed
            the ones before, which a node never counts and leaves out at the close).
        """
        return [_or_error(self.handle_upload, u, m) for u, m in uploads]

    def evaluate_retrieval_many(
        self, requests: list[tuple[int, bytes]]
    ) -> Callable[[], list[bytes | None | SecembError]]:
        """:meth:`handle_retrieval_many` in two phases: this call does the expensive part
        without changing state (a server runs it outside its lock, while other calls go on);
        the returned ``commit()`` applies the results and returns the replies (a server runs
        it under its lock, at most once).  ``commit()`` raises ``ProtocolError`` -- and
        changes nothing -- if the round or the users' state changed in between.  Default: all
        the work in ``commit()``; servers with a costly evaluation override this."""
        return lambda: self.handle_retrieval_many(requests)

    @abstractmethod
    def aggregate_share(self, include: list[int] | None = None) -> bytes:
        """This server's share of the round's aggregate (server 1 sends it to server 0).

        ``include``: the users whose uploads it covers (``None``: every user absorbed).  A user
        outside ``include`` counts as one that retrieved and never uploaded; the result equals,
        bit for bit, the share of a round in which only ``include`` uploaded.  A role may drop
        the users outside ``include`` from the round for good (they cannot be included later).

        Raises
        ------
        ProtocolError: a user of ``include`` did not upload to this server.
        """

    def upload_digests(self, users: list[int]) -> dict[int, bytes] | None:
        """Verified uploads (issue 34): per user of ``users`` (each uploaded), the digest the
        two servers compare before it enters the aggregate -- equal at both servers for an
        honest device, different for one whose contribution fails the check; a user whose
        digests differ is left out like a dropout.  Default: ``None`` (no verification)."""
        return None

    def verify_answer(self, users: list[int]) -> bytes:
        """Server 1, verified uploads (issue 34): its answer to server 0's check of ``users``
        (each uploaded), sent with its upload digests -- SecEmb's sketch verifier messages.
        Default: ``b""`` (nothing to answer)."""
        return b""

    def verify_rejected(self, users: list[int], answer: bytes) -> set[int]:
        """Server 0, verified uploads (issue 34): the users of ``users`` (each uploaded, as
        server 1 answered for them with :meth:`verify_answer`) whose check fails on server 1's
        ``answer``; they are left out like a digest mismatch.  Default: the empty set.

        Raises
        ------
        InvalidMessage: ``answer`` is malformed.
        """
        return set()

    @abstractmethod
    def combine(self, peer_share: bytes, include: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Either server: reconstruct ``(sparse_sum (m, width), dense_sum (dense_size,))``
        in the ring from its own aggregate over ``include`` (as :meth:`aggregate_share`) and
        the other server's share over the same users (both servers reconstruct and agree on
        the model, issue 33).  The sum does not depend on which server computes it."""


class RelayRole(ABC):
    """The relay steps of a server role (optional: a protocol whose ``capabilities.relay`` is
    set makes servers that are also a :class:`RelayRole`; the server node refuses a relay
    deployment of a role that is not one).  With relay, the retrieval runs user -> server 1
    (roots), user -> server 0 (keys), server 0 -> server 1 (:meth:`relay_retrieval`), server 1
    -> server 0 (:meth:`complete_retrieval`), server 0 -> user; the upload user -> server 0,
    server 0 -> server 1 (:meth:`relay_upload`)."""

    @abstractmethod
    def relay_retrieval(self, user_id: int, message: bytes) -> bytes:
        """Relay, server 1: answer server 0's forwarded request (to server 0)."""

    def relay_retrieval_many(self, forwards: list[tuple[int, bytes]]) -> list[bytes | SecembError]:
        """:meth:`relay_retrieval` for many users, like :meth:`ServerRole.handle_retrieval_many`."""
        return [_or_error(self.relay_retrieval, u, m) for u, m in forwards]

    def evaluate_relay_many(self, forwards: list[tuple[int, bytes]]) -> Callable[[], list[bytes | SecembError]]:
        """:meth:`relay_retrieval_many` in two phases, like :meth:`ServerRole.evaluate_retrieval_many`."""
        return lambda: self.relay_retrieval_many(forwards)

    def relay_forwards(self, requests: list[tuple[int, bytes]]) -> list[bytes | SecembError] | None:
        """Relay, server 0: what ``commit()`` of :meth:`ServerRole.evaluate_retrieval_many` will
        return to forward to server 1 for each of ``requests`` (or the error that refuses it),
        computed from the requests alone -- no evaluation, no state change -- so that a server
        can forward while it evaluates.  ``None`` (the default): known after the commit only."""
        return None

    @abstractmethod
    def complete_retrieval(self, user_id: int, message: bytes) -> bytes:
        """Relay, server 0: combine server 1's answer into the reply to the user."""

    def complete_retrieval_many(self, answers: list[tuple[int, bytes]]) -> list[bytes | SecembError]:
        """:meth:`complete_retrieval` for many ``(user_id, message)`` pairs: per pair the reply
        or the exception that refused it (changing no state).  Default: one by one."""
        return [_or_error(self.complete_retrieval, u, m) for u, m in answers]

    @abstractmethod
    def relay_upload(self, user_id: int, message: bytes) -> None:
        """Relay, server 1: absorb server 0's forwarded upload."""

    def relay_upload_many(self, forwards: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """:meth:`relay_upload` for many ``(user_id, message)`` pairs: per pair ``None``
        (absorbed) or the exception that refused it (:class:`~secemb.errors.RelayTampered`
        where the forward fails the device's authentication), which changed no state.
        Default: one by one.

        Raises
        ------
        OSError: as :meth:`ServerRole.handle_upload_many`.
        """
        return [_or_error(self.relay_upload, u, m) for u, m in forwards]


#: options every protocol's factory takes (their values are checked against its capabilities)
LAYOUT_OPTIONS = ("layout", "relay", "expansion", "layout_seed")
#: message kinds :meth:`Protocol.max_message_bytes` bounds: those a server receives over a
#: network (from a device, or from the other server)
BOUNDED_KINDS = ("retrieval_request", "upload", "relay_keys", "relay_answer", "relay_upload", "aggregate_share",
                 "bound_proof", "bound_request")


class ExchangeNode(TypingProtocol):
    """The server side of a one-server protocol (e.g. :class:`~secemb.protocols.sfsl.staged.SFSLNode`),
    a state machine over bytes: what the engine drives in process
    (:class:`~secemb.sim.local.LocalStageServer`) and the server hosts over HTTP
    (:func:`~secemb.server.exchange_app.create_exchange_app`), so neither imports the other."""

    plan: RoundPlan

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        """Start a round for ``users``; its public document."""

    def receive(self, round_id: int, stage: str, user: int, body: bytes) -> None:
        """A device's message of ``stage``."""

    def close(self, round_id: int, stage: str) -> None:
        """Close ``stage`` (build the answers)."""

    def reply(self, round_id: int, stage: str, user: int) -> bytes | None:
        """The answer to ``user`` of a closed stage (``None``: none, the device is out)."""

    def outcome(self, round_id: int) -> dict[str, Any]:
        """The round's state (``"open"``, ``"committed"``, ``"aborted"``) and figures."""


@dataclass(frozen=True)
class Capabilities:
    """What a protocol supports; declared on its class, checked by ``get_protocol``.

    Attributes
    ----------
    layouts: the request layouts it runs (``"full"``, ``"cuckoo"``).
    relay: whether it can run with ``relay=True``.
    networked: whether it runs in the server deployment (:mod:`secemb.server`): its roles
        keep no state across rounds that a server's journal would not restore, and its
        messages are a deterministic function of the round and the device's seed.
    options: the factory's keyword options beyond :data:`LAYOUT_OPTIONS`.
    local_options: those of ``options`` that say how one server computes, not what the protocol
        is (e.g. ``backend``): each server chooses them itself, so they are left out of
        :meth:`Protocol.spec` and of what the two servers must agree on.
    central_dp: whether its servers can add DP noise to their aggregate shares: its aggregate
        share message ends with the ring share of the aggregate, the sparse ``(m, width)`` part
        then the dense ``(dense_size,)`` part, little-endian (:func:`secemb.privacy.noise.add_to_share`).
    """

    layouts: tuple[str, ...] = ("full",)
    relay: bool = False
    networked: bool = True
    options: tuple[str, ...] = ()
    local_options: tuple[str, ...] = ()
    central_dp: bool = False
    #: whether its devices add the DP noise to their own uploads (local DP: DP-FedRec)
    local_dp: bool = False

    def __post_init__(self) -> None:
        bad = [x for x in self.layouts if x not in ("full", "cuckoo")]
        if not self.layouts or bad:
            raise InvalidParameters(f"layouts must be a non-empty subset of ('full', 'cuckoo'), got {self.layouts!r}")
        clash = set(self.options) & set(LAYOUT_OPTIONS)
        if clash:
            raise InvalidParameters(f"options {sorted(clash)} are layout options every protocol takes")
        stray = set(self.local_options) - set(self.options)
        if stray:
            raise InvalidParameters(f"local_options {sorted(stray)} are not among the options {self.options}")

    def allowed_options(self) -> tuple[str, ...]:
        """Every keyword the factory takes: the layout options, then the declared ones."""
        return LAYOUT_OPTIONS + self.options

    def check_options(self, protocol: str, opts: Mapping[str, object]) -> None:
        """Refuse option names the factory does not take.

        Raises
        ------
        InvalidParameters
            Naming the first unknown option and the allowed ones.
        """
        allowed = self.allowed_options()
        for key in opts:
            if key not in allowed:
                raise InvalidParameters(f"protocol {protocol!r} has no option {key!r}; allowed: {list(allowed)}")

    def check_layout(self, protocol: str, layout: str, relay: bool) -> None:
        """Refuse a layout or relay setting the protocol does not support.

        Raises
        ------
        InvalidParameters
            Naming the option, the value and what is allowed.
        """
        if layout not in self.layouts:
            raise InvalidParameters(
                f"protocol {protocol!r} does not support layout={layout!r}; allowed: {list(self.layouts)}"
            )
        if not isinstance(relay, bool):
            raise InvalidParameters(f"relay must be a bool, got {relay!r}")
        if relay and not self.relay:
            raise InvalidParameters(f"protocol {protocol!r} does not support relay=True; allowed: relay=False")


class Protocol(ABC):
    """A training protocol: a factory for its roles.

    Subclasses declare ``name`` and :attr:`capabilities`, take the :data:`LAYOUT_OPTIONS` (and
    their declared options) as keywords and call ``super().__init__`` with the layout ones;
    they implement :meth:`make_server`, :meth:`make_user` and :meth:`message_body_bytes`.

    Attributes
    ----------
    name: registry name.
    capabilities: what the protocol supports (class attribute).
    layout, expansion, layout_seed: the request layout of its rounds (:class:`RoundConfig`);
        ``B = max(m', ceil(expansion m'))`` buckets for the cuckoo layout.
    relay: whether server 0 relays between the user and server 1 (then server 1 sends the
        user nothing, and the driver calls the relay steps of its :class:`RelayRole` servers).
    """

    name: str
    capabilities: ClassVar[Capabilities] = Capabilities()
    layout: str = "full"
    expansion: float = DEFAULTS.expansion
    layout_seed: int = 0
    relay: bool = False

    def __init__(
        self, layout: str = "full", relay: bool = False, expansion: float = DEFAULTS.expansion, layout_seed: int = 0
    ) -> None:
        """Check the layout options against :attr:`capabilities` and keep them.

        Raises
        ------
        InvalidParameters
            A layout or relay the protocol does not support, ``expansion`` outside ``[1, 8]``, or a
            ``layout_seed`` that is not an int >= 0.
        """
        self.capabilities.check_layout(self.name, layout, relay)
        if not 1.0 <= expansion <= MAX_EXPANSION:
            raise InvalidParameters(f"expansion must be in [1, {MAX_EXPANSION:g}], got {expansion}")
        layout_seed = check_int("layout_seed", layout_seed, low=0)
        self.layout, self.relay = layout, relay
        self.expansion, self.layout_seed = float(expansion), layout_seed

    def round_config(
        self, round_id: int, num_items: int, width: int, dense_size: int, m_prime: int, ring_bits: int = 32
    ) -> RoundConfig:
        """The public configuration of a round of this protocol."""
        buckets = 0
        if self.layout == "cuckoo":
            buckets = buckets_for(m_prime, self.expansion)
        return RoundConfig(
            round_id, num_items, width, dense_size, m_prime, ring_bits, self.layout, buckets, self.layout_seed
        )

    def max_message_bytes(self, kind: str, rc: RoundConfig, *, party: int, num_users: int) -> int:
        """Upper bound on ``len()`` of one message of ``kind`` in a round of ``rc``.

        ``party`` is the header's party: the server a request, upload or relay forward is
        addressed to, the server an aggregate share or relay answer comes from.  ``num_users``
        bounds the users an aggregate share covers.  The bound depends on public parameters
        only; for fixed-size messages it is their exact length.  0 means the protocol sends
        no such message (to or from that party, in this configuration).

        Raises
        ------
        InvalidParameters
            ``kind`` not in :data:`BOUNDED_KINDS`, ``party`` not 0 or 1, ``num_users < 0``.
        """
        if kind not in BOUNDED_KINDS:
            raise InvalidParameters(f"kind must be one of {list(BOUNDED_KINDS)}, got {kind!r}")
        if party not in (0, 1) or isinstance(party, bool):
            raise InvalidParameters(f"party must be 0 or 1, got {party!r}")
        num_users = check_int("num_users", num_users, low=0)
        body = self.message_body_bytes(kind, rc, party=party, num_users=num_users)
        return 0 if body is None else HEADER_BYTES + body

    @abstractmethod
    def message_body_bytes(self, kind: str, rc: RoundConfig, *, party: int, num_users: int) -> int | None:
        """Body length bound behind :meth:`max_message_bytes` (arguments already checked);
        ``None`` for a message the protocol does not send.  Implementations use the same
        size functions as their parsers."""

    def spec(self) -> dict[str, Any]:
        """The values of this protocol's declared options, except the local ones: with the
        layout options, what two servers (and the devices) must share to run the same
        protocol -- ``get_protocol(name, layout=..., relay=..., **spec())`` builds its twin.

        The default reads each option from the attribute of the same name (the convention of
        every built-in protocol); a protocol that stores them differently overrides this.

        Raises
        ------
        InvalidParameters
            A declared option has no attribute of the same name.
        """
        caps = self.capabilities
        out: dict[str, Any] = {}
        for name in caps.options:
            if name in caps.local_options:
                continue
            if not hasattr(self, name):
                raise InvalidParameters(f"{type(self).__name__}.spec(): option {name!r} is not stored as an "
                                        "attribute of the same name; override spec()")
            out[name] = getattr(self, name)
        return out

    def plan(self) -> RoundPlan:
        """This protocol's round as the engine executes it (:mod:`secemb.protocols.stages`):
        the two-server round, with server 0 relaying when :attr:`relay` is set.  A protocol
        with other stages overrides this."""
        return round_plan(relay=self.relay)

    @abstractmethod
    def make_server(self, party: int, *, peer_key: bytes | None = None) -> ServerRole:
        """A new server for ``party`` (0 or 1).

        ``peer_key``: the secret the deployment's two servers share (the node passes its peer
        secret, the key of the servers' signed peer requests, which no device ever sees); a
        protocol whose servers need a common key derives each one from it with
        :func:`purpose_key` and its own tag, and one that needs none ignores it.  ``None``: the
        two servers run in one process (a simulation, a benchmark, a test), and the protocol
        object provides any common key itself -- drawn with :mod:`secrets`, the same for every
        server it makes.

        Raises
        ------
        InvalidParameters: ``party`` is not 0 or 1, or a ``peer_key`` the protocol needs is not
            bytes of at least :data:`PEER_KEY_MIN_BYTES`.
        """

    @abstractmethod
    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> UserRole:
        """A new user for one round; ``_rng`` injects seeded randomness in tests only."""

    def device_clip(self) -> ClipSpec | None:
        """What the protocol's own devices clip to before they add their local DP noise, when
        the round announces no central DP clipping (``capabilities.local_dp``): ``None`` by
        default (no device noise); DP-FedRec overrides it."""
        return None

    def with_noise(self, sigma: float, clip: float) -> Protocol:
        """The same protocol with its devices' own noise of scale ``sigma`` (ring units) after
        clipping to L2 norm ``clip`` (local DP: a protocol with ``capabilities.local_dp``
        overrides this).

        Raises
        ------
        InvalidParameters: the protocol's devices add no noise (no ``capabilities.local_dp``).
        """
        raise InvalidParameters(f"protocol {self.name!r} declares no local DP (capabilities.local_dp): its devices "
                                "add no noise")

    def upload_clip(self, fp: FixedPoint, clip: ClipSpec | None) -> ClipSpec | None:
        """What a device clips its round contribution to, given the round's DP clipping
        ``clip`` (``None``: none) and its fixed point ``fp``: ``clip`` itself by default; a
        protocol whose devices must prove a bound on their uploads (SecEmb's ``bound``)
        narrows it to what the proof needs."""
        return clip

    @classmethod
    def payload_bound_blocker(cls, options: Mapping[str, Any], ring_bits: int) -> str | None:
        """For a protocol that declares the option ``bound`` (bounded payloads: each device proves
        its upload small, so that no device can wrap a round's sum; docs/security.md): why the
        bound cannot run with the factory ``options`` (as given, not yet validated) on the
        ``ring_bits``-bit ring, as one clause of a deployment's message that names the
        configuration's keys (``[protocol.options] NAME``, ``[training] ring_bits``); ``None``:
        it can, and a deployment turns it on by default (:mod:`secemb.server.config`).  ``None``
        by default; a protocol overrides this with what its proof builds on (SecEmb: verified
        uploads and the 32-bit ring)."""
        return None

    def check_ring_bits(self, ring_bits: int) -> None:
        """Refuse a ring of ``ring_bits`` bits that this protocol object, with its options, cannot
        run its rounds on; every ring by default (SecEmb's ``bound``: the 32-bit ring, with room
        for ``users_per_round`` users' bounded sums).

        Raises
        ------
        InvalidParameters: the protocol cannot run on that ring (the message says why).
        """
        return None
