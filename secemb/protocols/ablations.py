"""SecEmb's ablations (paper §4.2 and §5.5, Tables 5, 16, 17): the protocol without one or both
of its optimizations.

``secemb-init`` -- the initial construction (§4.2)
    Retrieval: ``m'`` full DPF keys with payload 1 per server (as SecEmb).  Aggregation:
    **element-wise encoding** -- one full key with a *scalar* payload per non-zero element, so
    ``m' w`` keys (path + one ring element each) per server, no path sharing.

``secemb-rowenc`` -- row-wise encoding without path sharing
    Retrieval as above.  Aggregation: ``m'`` **full** keys with a ``w``-vector payload per
    server (a fresh tree path per row), instead of SecEmb's ``m'`` output correction words that
    reuse the retrieval paths.

Both upload the dense gradient as additive shares and are exact (the servers' aggregate is the
plaintext ring sum).  Each server sees only DPF keys and shares of fixed, public sizes, so the
privacy is SecEmb's; only the cost differs.  Full layout only (the paper's).

``server_eval=False`` makes the servers parse and validate every key but skip the full-domain
evaluation of the aggregation keys (used by ``secemb bench comm`` for SecEmb-Init on large
catalogues, where it takes minutes per user and changes no byte on the wire); their aggregate
is then zero.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from secemb import fss
from secemb.errors import InvalidKey, InvalidMessage, InvalidParameters, ProtocolError, SecembError
from secemb.fss.fused import retrieve_and_prepare
from secemb.options import DEFAULTS
from secemb.protocols.base import Capabilities, Protocol, RoundConfig, ServerRole, UserRole
from secemb.protocols.wire import check_user, users_bytes
from secemb.protocols.wire import array_bytes, frame, open_message, read_array
from secemb.randomness import RandomBytes, system_rng
from secemb.sharing import reconstruct, share

__all__ = [
    "SecEmbInitProtocol",
    "SecEmbRowEncProtocol",
    "aggregate_keys",
    "element_keys",
    "element_keys_bytes",
    "row_keys",
    "row_keys_bytes",
]



# ----------------------------------------------------------------------------- key helpers


def row_keys(
    indices: np.ndarray, rows: np.ndarray, m: int, ring_bits: int, rng: RandomBytes
) -> tuple[fss.DPFKeys, fss.DPFKeys]:
    """One full key pair per row: ``f_i(indices[i]) = rows[i]`` (ring (K, w))."""
    return fss.gen(indices, rows, m, ring_bits=ring_bits, _rng=rng)


def element_keys(
    indices: np.ndarray, rows: np.ndarray, m: int, ring_bits: int, rng: RandomBytes
) -> tuple[fss.DPFKeys, fss.DPFKeys]:
    """One full key pair per element, column-major: key ``c K + i`` has point
    ``indices[i]`` and scalar payload ``rows[i, c]``."""
    k, w = rows.shape
    return fss.gen(np.tile(indices, w), np.ascontiguousarray(rows.T).reshape(-1, 1), m, ring_bits=ring_bits, _rng=rng)


def row_keys_bytes(m: int, k: int, w: int, ring_bits: int) -> int:
    return fss.keys.HEADER_BYTES + k * fss.DPFParams(m, w, ring_bits).key_bytes


def element_keys_bytes(m: int, k: int, w: int, ring_bits: int) -> int:
    return fss.keys.HEADER_BYTES + k * w * fss.DPFParams(m, 1, ring_bits).key_bytes


def aggregate_keys(keys: fss.DPFKeys, party: int, columns: int = 1) -> np.ndarray:
    """This server's share (ring (m, w)) of the sum of every key's point function.

    ``columns = 1``: row keys with payload width ``w``.  ``columns = w``: element keys laid out
    column-major (:func:`element_keys`), column ``c`` summing keys ``[c K, (c + 1) K)``.
    One tree walk per key (:func:`secemb.fss.fused.retrieve_and_prepare` with a zero
    retrieval and the default conversion tag), then the sum over keys.
    """
    p = keys.params
    m, dt = p.domain_size, p.dtype
    if columns == 1:
        return _sum_batch(keys, party, p.payload_width)
    k = len(keys) // columns
    out = np.zeros((m, columns), dt)
    for c in range(columns):
        out[:, c] = _sum_batch(keys[c * k : (c + 1) * k], party, 1)[:, 0]
    return out


def _sum_batch(keys: fss.DPFKeys, party: int, width: int) -> np.ndarray:
    p = keys.params
    zero_cw = np.zeros((len(keys), 1), p.dtype)
    dummy = np.zeros((p.domain_size, 1), p.dtype)
    _, prep = retrieve_and_prepare(
        keys.path, party, zero_cw, dummy, width, retrieval_tag=fss.DEFAULT_TAG, aggregation_tag=fss.DEFAULT_TAG
    )
    return prep.apply(keys.cw_out)


def _request_bytes(cfg: RoundConfig) -> int:
    """A retrieval request: ``m'`` full keys with payload 1."""
    return row_keys_bytes(cfg.num_items, cfg.m_prime, 1, cfg.ring_bits)


def _agg_bytes(cfg: RoundConfig, elementwise: bool) -> int:
    """The aggregation keys of an upload: ``m' w`` element keys or ``m'`` row keys."""
    f = element_keys_bytes if elementwise else row_keys_bytes
    return f(cfg.num_items, cfg.m_prime, cfg.width, cfg.ring_bits)


def _share_bytes(cfg: RoundConfig, num_users: int) -> int:
    """An aggregate share covering ``num_users`` users."""
    return 8 + 8 * num_users + (cfg.num_items * cfg.width + cfg.dense_size) * cfg.dtype.itemsize


def parse_keys(
    body: memoryview, party: int, *, domain: int, count: int, width: int, ring_bits: int, what: str
) -> fss.DPFKeys:
    try:
        return fss.DPFKeys.from_bytes(
            body, party=party, domain_size=domain, count=count, payload_width=width, ring_bits=ring_bits
        )
    except InvalidKey as exc:
        raise InvalidMessage(f"{what}: {exc}") from None


# ----------------------------------------------------------------------------- roles


class _AblationUser(UserRole):
    protocol = ""
    elementwise = False

    def __init__(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> None:
        if config.layout != "full":
            raise InvalidParameters(f"{self.protocol} supports the full layout only")
        self.config = config
        self._rng = _rng or system_rng
        self._indices: np.ndarray | None = None
        self._stage = 0

    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        if self._stage:
            raise ProtocolError("retrieval_request called twice in one round")
        idx = np.asarray(indices)
        if idx.shape != (cfg.m_prime,) or not np.issubdtype(idx.dtype, np.integer):
            raise InvalidParameters(f"indices must be integers of shape ({cfg.m_prime},)")
        idx = idx.astype(np.int64)
        ones = np.ones((cfg.m_prime, 1), cfg.dtype)
        k0, k1 = fss.gen(idx, ones, cfg.num_items, ring_bits=cfg.ring_bits, _rng=self._rng)
        self._indices, self._stage = idx, 1
        return (frame(self.protocol, "retrieval_request", 0, cfg.round_id, k0.to_bytes()),
                frame(self.protocol, "retrieval_request", 1, cfg.round_id, k1.to_bytes()))

    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
        cfg = self.config
        if self._stage != 1 or reply1 is None:
            raise ProtocolError("retrieval_result out of order, or missing server 1's reply")
        shape = (cfg.m_prime, cfg.width)
        n = shape[0] * shape[1] * cfg.dtype.itemsize
        body0 = open_message(reply0, self.protocol, "retrieval_reply", 0, cfg.round_id, n)
        body1 = open_message(reply1, self.protocol, "retrieval_reply", 1, cfg.round_id, n)
        a = read_array(body0, 0, cfg.dtype, shape)[0]
        b = read_array(body1, 0, cfg.dtype, shape)[0]
        self._stage = 2
        return reconstruct(a, b)

    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        if self._stage != 2:
            raise ProtocolError("upload before the retrieval finished, or twice")
        if rows.dtype != cfg.dtype or rows.shape != (cfg.m_prime, cfg.width):
            raise InvalidParameters(f"rows must be {cfg.dtype} of shape ({cfg.m_prime}, {cfg.width})")
        if dense.dtype != cfg.dtype or dense.shape != (cfg.dense_size,):
            raise InvalidParameters(f"dense must be {cfg.dtype} of shape ({cfg.dense_size},)")
        gen = element_keys if self.elementwise else row_keys
        assert self._indices is not None  # set with stage 1
        k0, k1 = gen(self._indices, rows, cfg.num_items, cfg.ring_bits, self._rng)
        d0, d1 = share(dense, _rng=self._rng)
        self._stage = 3
        return (frame(self.protocol, "upload", 0, cfg.round_id, k0.to_bytes(), array_bytes(d0)),
                frame(self.protocol, "upload", 1, cfg.round_id, k1.to_bytes(), array_bytes(d1)))


class _AblationServer(ServerRole):
    protocol = ""
    elementwise = False

    def __init__(self, party: int, *, server_eval: bool = True) -> None:
        super().__init__(party)
        self.server_eval = server_eval

    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        if config.layout != "full":
            raise InvalidParameters(f"{self.protocol} supports the full layout only")
        if table.dtype != config.dtype or table.shape != (config.num_items, config.width):
            raise InvalidParameters(f"table must be {config.dtype} of shape ({config.num_items}, {config.width})")
        self._start_round(config)
        self._table = table
        self._sparse = np.zeros((config.num_items, config.width), config.dtype)
        self._dense = np.zeros(config.dense_size, config.dtype)
        self._requested: set[int] = set()
        self._uploaded: dict[int, memoryview] = {}  # user -> upload body, until the round closes

    def _answer(self, cfg: RoundConfig, user_id: int, message: bytes) -> bytes:
        """One user's PIR answer over the whole table; changes no state."""
        user_id = check_user(user_id)
        if user_id in self._requested:
            raise ProtocolError(f"user {user_id} already retrieved in round {cfg.round_id}")
        body = open_message(message, self.protocol, "retrieval_request", self.party, cfg.round_id, _request_bytes(cfg))
        keys = parse_keys(body, self.party, domain=cfg.num_items, count=cfg.m_prime, width=1,
                          ring_bits=cfg.ring_bits, what="retrieval_request")
        answers = fss.eval_full_dot(keys, self.party, self._table)
        return frame(self.protocol, "retrieval_reply", self.party, cfg.round_id, array_bytes(answers))

    def evaluate_retrieval_many(
        self, requests: list[tuple[int, bytes]]
    ) -> Callable[[], list[bytes | None | SecembError]]:
        """The full-domain PIR answers are computed here (a server runs this outside its lock);
        ``commit()`` only records who retrieved."""
        cfg = self._cfg()
        outs: list[bytes | SecembError] = []
        for user, message in requests:
            try:
                outs.append(self._answer(cfg, user, message))
            except SecembError as exc:  # a rejected request yields its error in its place
                outs.append(exc)

        def commit() -> list[bytes | None | SecembError]:
            if self.config is not cfg:
                raise ProtocolError(f"round {cfg.round_id} changed while its retrievals were evaluated")
            results: list[bytes | None | SecembError] = []
            for (user, _), out in zip(requests, outs, strict=True):
                if isinstance(out, bytes) and user in self._requested:  # twice in one batch
                    out = ProtocolError(f"user {user} already retrieved in round {cfg.round_id}")
                if isinstance(out, bytes):
                    self._requested.add(user)
                results.append(out)
            return results

        return commit

    def handle_retrieval(self, user_id: int, message: bytes) -> bytes:
        out = self.evaluate_retrieval_many([(user_id, message)])()[0]
        if not isinstance(out, bytes):
            raise out if isinstance(out, SecembError) else ProtocolError("no retrieval reply")
        return out

    def handle_upload(self, user_id: int, message: bytes) -> None:
        cfg = self._cfg()
        user_id = check_user(user_id)
        if user_id not in self._requested or user_id in self._uploaded:
            raise ProtocolError(f"user {user_id}: upload without retrieval, or twice, in round {cfg.round_id}")
        agg = _agg_bytes(cfg, self.elementwise)
        body = open_message(message, self.protocol, "upload", self.party, cfg.round_id,
                            agg + cfg.dense_size * cfg.dtype.itemsize)
        self._absorb(body)
        self._uploaded[user_id] = body

    def _absorb(self, body: memoryview, *, retract: bool = False) -> None:
        """Add an upload body's keys and dense share to the aggregate (``retract``: take an
        absorbed one out again, re-evaluating its keys)."""
        cfg = self._cfg()
        agg = _agg_bytes(cfg, self.elementwise)
        count, width = (cfg.m_prime * cfg.width, 1) if self.elementwise else (cfg.m_prime, cfg.width)
        keys = parse_keys(body[:agg], self.party, domain=cfg.num_items, count=count, width=width,
                          ring_bits=cfg.ring_bits, what="upload")
        dense = read_array(body, agg, cfg.dtype, (cfg.dense_size,))[0]
        add = np.subtract if retract else np.add  # in place, wrapping in the ring
        if self.server_eval:
            add(self._sparse, aggregate_keys(keys, self.party, cfg.width if self.elementwise else 1), out=self._sparse)
        add(self._dense, dense, out=self._dense)

    def _keep_only(self, include: list[int] | None) -> list[int]:
        """Retract every user outside ``include`` (for good); the sorted included users."""
        users = self._include(include, self._uploaded, self._cfg().round_id)
        for u in sorted(set(self._uploaded) - set(users)):
            self._absorb(self._uploaded.pop(u), retract=True)
        return users

    def aggregate_share(self, include: list[int] | None = None) -> bytes:
        cfg = self._cfg()
        users = self._keep_only(include)
        return frame(self.protocol, "aggregate_share", self.party, cfg.round_id,
                     users_bytes(users), array_bytes(self._sparse), array_bytes(self._dense))

    def combine(self, peer_share: bytes, include: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        cfg = self._cfg()
        users = self._keep_only(include)
        head = users_bytes(users)
        body = open_message(peer_share, self.protocol, "aggregate_share", 1 - self.party, cfg.round_id,
                            _share_bytes(cfg, len(users)))
        if bytes(body[: len(head)]) != head:
            raise ProtocolError("the two servers aggregated different sets of users")
        sp, off = read_array(body, len(head), cfg.dtype, (cfg.num_items, cfg.width))
        de, _ = read_array(body, off, cfg.dtype, (cfg.dense_size,))
        return reconstruct(self._sparse, sp), reconstruct(self._dense, de)


class _AblationProtocol(Protocol):
    # the paper's layout only: a cuckoo request would not be an ablation of the paper's protocol
    capabilities = Capabilities(layouts=("full",), relay=False, networked=True, options=("server_eval",),
                                local_options=("server_eval",))
    user_cls: type[_AblationUser]
    server_cls: type[_AblationServer]

    def __init__(self, layout: str = "full", relay: bool = False, expansion: float = DEFAULTS.expansion,
                 layout_seed: int = 0,
                 *, server_eval: bool = True) -> None:
        super().__init__(layout, relay, expansion, layout_seed)
        self.server_eval = bool(server_eval)

    def message_body_bytes(self, kind: str, rc: RoundConfig, *, party: int, num_users: int) -> int | None:
        """Exact body lengths (the aggregate share's with ``num_users`` users)."""
        if kind == "retrieval_request":
            return _request_bytes(rc)
        if kind == "upload":
            return _agg_bytes(rc, self.server_cls.elementwise) + rc.dense_size * rc.dtype.itemsize
        if kind == "aggregate_share":
            return _share_bytes(rc, num_users)
        return None  # no relay

    def make_server(self, party: int, *, peer_key: bytes | None = None) -> _AblationServer:
        """Server ``party``; its servers share no key (``peer_key`` is ignored)."""
        return self.server_cls(party, server_eval=self.server_eval)

    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> _AblationUser:
        return self.user_cls(config, _rng=_rng)


class _RowEncUser(_AblationUser):
    protocol = "secemb-rowenc"


class _RowEncServer(_AblationServer):
    protocol = "secemb-rowenc"


class _InitUser(_AblationUser):
    protocol = "secemb-init"
    elementwise = True


class _InitServer(_AblationServer):
    protocol = "secemb-init"
    elementwise = True


class SecEmbRowEncProtocol(_AblationProtocol):
    """SecEmb with row-wise encoding but without path sharing (full aggregation keys)."""

    name = "secemb-rowenc"
    user_cls, server_cls = _RowEncUser, _RowEncServer


class SecEmbInitProtocol(_AblationProtocol):
    """SecEmb's initial construction: element-wise aggregation keys, no path sharing."""

    name = "secemb-init"
    user_cls, server_cls = _InitUser, _InitServer
