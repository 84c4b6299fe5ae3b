"""SecEmb (Algorithm 3 of the paper): private embedding retrieval and secure sparse
aggregation with row-wise encoding and path sharing; dense parameters as additive shares.

Per round and user, with ``S`` request slots (``m'`` in the full layout, ``B`` buckets in the
cuckoo layout), row width ``w`` and dense size ``P``:

* ``retrieval_request``: one path key per slot (:func:`~secemb.fss.gen_path`) and its
  retrieval output correction word for a secret uniformly random odd payload ``beta`` (0 for
  an empty cuckoo bucket); server ``b`` gets the ``DPFKeys`` of party ``b``.
* ``handle_retrieval``: the server walks every tree once
  (:mod:`secemb.fss.fused`), answers with its shares of the ``S`` rows of the round's table
  with each row's tag appended (:func:`row_tags`, ``T`` more words), folds the
  payload-independent part of the aggregation share into its running aggregate and keeps
  the control bits.  The user unmasks each row by ``beta^{-1}`` and checks its tag (and that
  empty buckets answer zero); a failure raises :class:`~secemb.errors.RetrievalTampered`.
* ``upload``: one aggregation correction word per slot (:func:`~secemb.fss.convert_gen` on the
  same path, another conversion tag) and an additive share of the dense gradient.
* ``handle_upload``: the server adds the control-bit part for those correction words.
* ``aggregate_share`` / ``combine``: server 1 sends its aggregate and the sorted ids of the
  users it includes to server 0, which checks that both sets agree and reconstructs.

With ``relay=True`` the user sends every byte both servers would receive identically only
once (see ``docs/security.md``): server 0 gets the full keys and forwards their shared part
(everything but its roots) to server 1, which gets only its roots, two secret seeds, a MAC key
and the SHA-256 digest of that shared part from the user.  Server 1 returns its retrieval
shares to server 0 masked by a stream of the first seed; server 0 adds its own and returns one
array, from which the user removes the mask.  The aggregation correction words go to server 0
only, with an HMAC tag under the MAC key, and are forwarded; server 1's dense share is the
expansion of the second seed.  Server 1 evaluates a forwarded key part only if it matches the
digest and absorbs forwarded words only if their tag verifies; otherwise
:class:`~secemb.errors.RelayTampered` (``docs/security.md``, "A deviating server").

Verified uploads (``verify=True``, the default; issue 34): each key is followed by its 32-byte
check correction word (:func:`~secemb.fss.verify.corrections`); the servers fold a check value
per key from the leaves their walk visits anyway (:class:`~secemb.fss.verify.LeafCheck`) and,
before the round closes, compare one digest per user (:meth:`SecEmbServer.upload_digests`): a
user whose keys are not point functions or differ between the servers is left out like a
dropout (``docs/security.md``, "A malicious device: verified uploads").

A server never sees an index, a row count or a gradient: every message has a size fixed by
the public round parameters.  A user that retrieved but never uploads is left out of the
aggregate (its folded part is recomputed and removed) -- dropouts of Appendix L.2.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np

from secemb import fss
from secemb.errors import (
    InvalidKey,
    InvalidMessage,
    InvalidParameters,
    ProtocolError,
    RelayTampered,
    RetrievalTampered,
    SecembError,
)
from secemb.fss.fused import (
    AGGREGATION_TAG,
    RETRIEVAL_TAG,
    PreparedAggregation,
    bits_product,
    retrieve_and_prepare,
    retrieve_and_prepare_buckets,
)
from secemb.fss.convert import convert
from secemb.fss.fused import key_checks
from secemb.fss.verify import CHECK_BYTES, CHECK_WORDS, LeafCheck, challenges, corrections
from secemb.fss.cuckoo import CuckooLayout
from secemb.fss.gpu import DeviceTable
from secemb.fss.linalg import LimbMatrix
from secemb.fss.tree import padded_leaves
from secemb.protocols.backends import Backend, Handle, SerialBackend
from secemb.protocols.base import Capabilities, Protocol, RoundConfig, ServerRole, UserRole
from secemb.protocols.wire import array_bytes, check_user, frame, open_message, read_array, users_bytes
from secemb.randomness import SEED_BYTES, RandomBytes, random_words, system_rng
from secemb.sharing import reconstruct, share

_T = TypeVar("_T")
_R = TypeVar("_R")

__all__ = ["SecEmbProtocol", "SecEmbUser", "SecEmbServer", "row_tags", "tag_words"]

_NAME = "secemb"
_U64 = struct.Struct("<Q")
#: Convert tag of the relay's seeded arrays (server 1's retrieval mask and its dense share)
RELAY_TAG = "relay"


def relay_prg(seed: bytes, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The ring array (``shape``, ``dtype`` uint32 or uint64) a 16-byte relay ``seed`` stands
    for: ``Convert_relay(seed)``, fixed-key AES in Matyas-Meyer-Oseas mode over the seed and a
    block counter -- the DPF's own PRG, under its own tag, on the AES-NI kernels where they run.
    The user and server 1 expand the same seed to the same array; to server 0, which never sees
    the seed, it is pseudorandom."""
    return relay_prgs([seed], shape, dtype)[0]


def relay_prgs(seeds: Sequence[bytes], shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """:func:`relay_prg` of each seed, expanded as one batch: ring (len(seeds), *shape)."""
    if any(len(seed) != SEED_BYTES for seed in seeds):
        raise InvalidParameters(f"a relay seed is {SEED_BYTES} bytes, got {[len(seed) for seed in seeds]}")
    words = np.frombuffer(b"".join(seeds), "<u8").reshape(len(seeds), 2).astype(np.uint64)
    ring_bits = 8 * np.dtype(dtype).itemsize
    return convert(words, math.prod(shape), ring_bits, RELAY_TAG).reshape(len(seeds), *shape)

#: a row tag: the first TAG_BYTES of SHA-256, as ring words (see row_tags and docs/security.md,
#: "A deviating server": 128 bits, because in Z_{2^k} an offset whose words are multiples of
#: 2^(k-1) is unchanged by the device's secret odd multiplier)
TAG_BYTES = 16
_ROW_TAG_DOMAIN = b"secemb-row-tag"
#: the relay's authentication: a fresh per-round MAC key the device gives server 1 directly,
#: HMAC-SHA256 truncated to MAC_BYTES, and the SHA-256 digest of the forwarded key part
MAC_KEY_BYTES = 16
MAC_BYTES = 16
DIGEST_BYTES = 32
_UPLOAD_MAC_DOMAIN = b"secemb-relay-upload"
#: verified uploads (docs/security.md, "A malicious device"): domains of the challenge seed the
#: servers derive from a user's committed key bytes and of the per-user digest they compare
_CHALLENGE_DOMAIN = b"secemb-verify-challenge"
_VERIFY_DOMAIN = b"secemb-verify-upload"


def tag_words(config: RoundConfig) -> int:
    """Ring words of a row tag: ``T = 8 TAG_BYTES / ring_bits`` (4 for uint32, 2 for uint64)."""
    return TAG_BYTES // config.dtype.itemsize


def row_tags(round_id: int, items: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The tags of table rows: for item ``j`` with row ``r`` (ring words, little-endian bytes)
    the first :data:`TAG_BYTES` of ``SHA-256(b"secemb-row-tag" || u64 round_id || u64 j || r)``
    read as little-endian ring words of ``rows.dtype``.

    Parameters
    ----------
    round_id: the round (>= 0).
    items: int (n,), the rows' item ids in ``[0, m)``.
    rows: ring (n, w), uint32 or uint64.

    Returns
    -------
    ring (n, TAG_BYTES / itemsize) of ``rows.dtype``.  A Python loop over the rows (once per
    round on each server for the whole table, once per retrieval on a device for its slots).
    """
    dt = rows.dtype
    if dt not in (np.dtype(np.uint32), np.dtype(np.uint64)) or rows.ndim != 2 or items.shape != rows.shape[:1]:
        raise InvalidParameters(f"rows must be uint32 or uint64 (n, w) with items (n,), got {dt} {rows.shape} "
                                f"and {items.shape}")
    n = len(items)
    base = hashlib.sha256(_ROW_TAG_DOMAIN + _U64.pack(round_id))
    # every row's hashed suffix u64 j || r in one array, so the loop only hashes
    size = rows.shape[1] * dt.itemsize
    suffix = np.empty((n, 8 + size), np.uint8)
    suffix[:, :8] = items.astype("<u8").reshape(n, 1).view(np.uint8)
    suffix[:, 8:] = np.ascontiguousarray(rows, dt.newbyteorder("<")).view(np.uint8).reshape(n, size)
    digests = []
    for row in suffix:
        h = base.copy()
        h.update(row)
        digests.append(h.digest())
    tags = np.frombuffer(b"".join(digests), np.uint8).reshape(n, 32)[:, :TAG_BYTES]
    return np.ascontiguousarray(tags).view(dt.newbyteorder("<")).astype(dt)


def _inverse_odd(x: np.ndarray) -> np.ndarray:
    """``x^{-1} mod 2^k`` of odd ring words (uint32/uint64 array): Newton's iteration
    ``y <- y (2 - x y)``, exact to 3 bits at ``y = x`` and doubling them each step."""
    y = x.copy()
    two = x.dtype.type(2)
    for _ in range(6):  # 3 -> 96 bits >= 64
        y *= two - x * y
    return y


def _upload_mac(key: bytes, round_id: int, cw: bytes) -> bytes:
    """The relay's tag of an upload's correction words: ``HMAC-SHA256(key, b"secemb-relay-upload"
    || u64 round_id || cw)`` truncated to :data:`MAC_BYTES`."""
    mac = hmac.new(key, _UPLOAD_MAC_DOMAIN + _U64.pack(round_id), hashlib.sha256)
    mac.update(cw)  # not concatenated: the words are the bulk of an upload
    return mac.digest()[:MAC_BYTES]


#: memory bound of one evaluation task (leaf-level bits and shares of its users' keys): a
#: batch of users is split into tasks of at most this many bytes of leaf state
EVAL_BYTES = 1 << 30
#: cache bound of one cuckoo evaluation task: the rows its walk folds conversions into (its
#: buckets' (M, w) blocks, revisited once per user) stay within about this many bytes, so
#: they are summed in cache instead of streamed through memory once per user
FOLD_BYTES = 1 << 20


def key_params(config: RoundConfig) -> fss.DPFParams:
    """Parameters of a user's retrieval keys: over ``[0, m)`` or the bucket domain."""
    domain = config.num_items if config.layout == "full" else config.cuckoo().bucket_size
    return fss.DPFParams(domain, 1, config.ring_bits)


def _key_expect(config: RoundConfig) -> dict[str, int]:
    p = key_params(config)
    return {"domain_size": p.domain_size, "count": config.slots, "payload_width": 1, "ring_bits": config.ring_bits}


def _checks_bytes(config: RoundConfig, verify: bool) -> int:
    """The check correction words of a request's keys (verified uploads), or 0."""
    return config.slots * CHECK_BYTES if verify else 0


def request_bytes(config: RoundConfig, verify: bool = True) -> int:
    """Body length of a full-key retrieval request (with ``verify``, the keys' check
    correction words follow the keys)."""
    return fss.keys.HEADER_BYTES + config.slots * key_params(config).key_bytes + _checks_bytes(config, verify)


def _challenge_seed(round_id: int, key_digest: bytes) -> np.ndarray:
    """The 128-bit seed of a user's check challenge, uint64 (2,): derived from its committed
    key bytes (``key_digest``, SHA-256 of the shared key part and check words), so that it is
    fixed only once the keys are (Fiat-Shamir; docs/security.md)."""
    seed = hashlib.sha256(_CHALLENGE_DOMAIN + _U64.pack(round_id) + key_digest).digest()[:16]
    return np.frombuffer(seed, "<u8").astype(np.uint64)


def _roots_bytes(config: RoundConfig) -> int:
    """Body of a relay request to server 1: its root words, the user's two seeds, its MAC
    key and the digest of the key part server 0 will forward."""
    return 16 * config.slots + 2 * SEED_BYTES + MAC_KEY_BYTES + DIGEST_BYTES


def _shared_bytes(config: RoundConfig, verify: bool) -> int:
    """Body of a relay_keys forward: the key batch without server 0's roots (and, with
    ``verify``, the check correction words)."""
    return request_bytes(config, verify) - 16 * config.slots


def _rows_bytes(config: RoundConfig) -> int:
    """``S`` rows of the table's width: the aggregation correction words of an upload."""
    return config.slots * config.width * config.dtype.itemsize


def _answer_bytes(config: RoundConfig) -> int:
    """A retrieval answer (``retrieval_reply``, ``relay_answer``): ``S`` rows of the tagged
    table, ``width + tag_words`` columns."""
    return config.slots * (config.width + tag_words(config)) * config.dtype.itemsize


def _upload_bytes(config: RoundConfig, relay: bool) -> int:
    """An upload to server 0 (with relay, its correction words carry server 1's MAC tag) or,
    without relay, to either server."""
    return _rows_bytes(config) + config.dense_size * config.dtype.itemsize + (MAC_BYTES if relay else 0)


def _share_bytes(config: RoundConfig, num_users: int) -> int:
    """Body of an aggregate share covering ``num_users`` users."""
    return 8 + 8 * num_users + (config.num_items * config.width + config.dense_size) * config.dtype.itemsize


class SecEmbUser(UserRole):
    """One user's side of one SecEmb round."""

    def __init__(self, config: RoundConfig, *, relay: bool = False, verify: bool = True,
                 _rng: RandomBytes | None = None) -> None:
        self.config = config
        self.relay = relay
        self.verify = verify  # send check correction words (verified uploads)
        self._rng = _rng or system_rng
        self._state: fss.GenState | None = None
        self._real: np.ndarray | None = None
        self._items: np.ndarray | None = None  # int64 (S,): the slots' items (-1: empty bucket)
        self._unmask: np.ndarray | None = None  # ring (S,): inverses of the secret odd retrieval payloads (0: empty)
        self._seeds: tuple[bytes, bytes] | None = None
        self._mac_key: bytes | None = None  # relay: server 1's key for the upload's tag
        self._tampered = False  # a retrieval answer failed its check: no upload this round

    def _alphas(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Key points of users' checked slots (int64 (U, S)): item ids (full layout) or
        positions inside each bucket (cuckoo; any point for an empty one); and per user
        whether every item is in its slot's bucket (bool (U,); cuckoo: a placement not made
        by the layout fails)."""
        cfg = self.config
        if cfg.layout == "full":
            return slots, np.ones(slots.shape[0], bool)
        real = slots >= 0
        buckets = np.broadcast_to(np.arange(cfg.slots), slots.shape)
        alphas = np.zeros(slots.shape, np.int64)  # empty buckets: any point, payload 0
        found = np.ones(slots.shape, bool)
        alphas[real], found[real] = cfg.cuckoo().find(slots[real], buckets[real])
        return alphas, np.all(found, axis=1)

    def _slots(self, indices: np.ndarray) -> np.ndarray:
        """The checked request slots, int64 (S,) (see :meth:`retrieval_request`)."""
        cfg = self.config
        slots = np.asarray(indices)
        if slots.shape != (cfg.slots,):
            raise InvalidParameters(f"indices must have shape ({cfg.slots},), got {slots.shape}")
        if not np.issubdtype(slots.dtype, np.integer):
            raise TypeError(f"indices must be integers, got dtype {slots.dtype}")
        if self._state is not None:
            raise ProtocolError("retrieval_request called twice in one round")
        slots = slots.astype(np.int64)
        bad = slots[(slots < -1) | (slots >= cfg.num_items)]
        if bad.size:
            raise InvalidParameters(
                f"item index {int(bad[0])} is outside the domain [0, {cfg.num_items}) (or -1 for an empty slot)"
            )
        if cfg.layout == "full" and np.any(slots < 0):
            raise InvalidParameters("the full layout has no empty slots (-1)")
        return slots

    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
        out = self.retrieval_requests([self], [indices], _rng=self._rng)[0]
        if isinstance(out, Exception):
            raise out
        return out

    @classmethod
    def retrieval_requests(cls, users: Sequence[UserRole], indices: Sequence[np.ndarray], *,
                           _rng: RandomBytes | None = None) -> list[tuple[bytes, bytes] | Exception]:
        """The users' keys generated as one batch (one tree walk, one conversion, one
        serialization for all), from fresh OS randomness (``_rng``: a test's source); the
        users must be SecEmb users of one round with one relay setting."""
        mine = [u for u in users if isinstance(u, SecEmbUser)]
        first = mine[0] if mine else None
        if first is None or len(mine) != len(users) or any(
                (u.config, u.relay, u.verify) != (first.config, first.relay, first.verify) for u in mine):
            raise InvalidParameters("a batch of retrieval requests needs SecEmb users of one round")
        cfg, relay = first.config, first.relay
        out: list[tuple[bytes, bytes] | Exception | None] = [None] * len(users)
        ok: list[tuple[int, SecEmbUser, np.ndarray]] = []
        for i, (user, idx) in enumerate(zip(mine, indices, strict=True)):
            try:
                ok.append((i, user, user._slots(idx)))
            except (SecembError, TypeError) as exc:
                out[i] = exc
        alphas, placed = first._alphas(np.stack([s for _, _, s in ok]) if ok else np.zeros((0, cfg.slots), np.int64))
        for i, _, _ in (c for c, fits in zip(ok, placed, strict=True) if not fits):
            out[i] = InvalidParameters("an item was assigned to a bucket that does not hold it")
        ok = [c for c, fits in zip(ok, placed, strict=True) if fits]
        if ok:
            n, rng, params = len(ok), _rng or system_rng, key_params(cfg)
            slots = np.stack([s for _, _, s in ok])  # (n, S)
            alphas = alphas[placed]
            p0, p1, state = fss.gen_path(alphas.reshape(-1), params.domain_size, _rng=rng)
            real = slots >= 0
            # each real slot retrieves beta T_alpha for a secret uniform odd beta (verified
            # retrieval, docs/security.md); an empty bucket's payload stays 0
            betas = np.where(real, random_words(rng, real.shape, cfg.dtype) | cfg.dtype.type(1), cfg.dtype.type(0))
            cw = fss.convert_gen(state, betas.reshape(-1, 1), ring_bits=cfg.ring_bits, tag=RETRIEVAL_TAG)
            unmask = _inverse_odd(betas)  # what each user multiplies its rows by (0 stays 0)
            keys0 = fss.DPFKeys(p0, cw, params)
            msgs0 = keys0.to_bytes_split(n)
            # the keys' check correction words (verified uploads): the same for both servers
            size = _checks_bytes(cfg, first.verify)
            checks = array_bytes(corrections(alphas.reshape(-1), state.leaf0, state.leaf1)) if size else b""
            if relay:
                direct = 2 * SEED_BYTES + MAC_KEY_BYTES
                secrets_ = rng(direct * n)
                roots1 = array_bytes(p1.roots)
                per_user = 16 * cfg.slots
            else:
                keys1 = fss.DPFKeys(p1, cw, params).to_bytes_split(n)
            for j, (i, user, _) in enumerate(ok):
                sl = slice(j * cfg.slots, (j + 1) * cfg.slots)
                # copies: a user keeps its own secret state, no view of the batch's (other users')
                user._state = fss.GenState(params.domain_size, state.leaf0[sl].copy(), state.leaf1[sl].copy())
                user._real, user._items, user._unmask = real[j].copy(), slots[j].copy(), unmask[j].copy()
                own_checks = checks[size * j : size * (j + 1)]
                msg0 = frame(_NAME, "retrieval_request", 0, cfg.round_id, msgs0[j], own_checks)
                if not relay:
                    out[i] = (msg0, frame(_NAME, "retrieval_request", 1, cfg.round_id, keys1[j], own_checks))
                    continue
                own = secrets_[direct * j : direct * (j + 1)]
                user._seeds = (own[:SEED_BYTES], own[SEED_BYTES : 2 * SEED_BYTES])
                user._mac_key = own[2 * SEED_BYTES :]
                # the digest of the exact bytes server 0 forwards (its parse re-serializes them
                # canonically: DPFKeys.shared_bytes of the same keys)
                h = hashlib.sha256(keys0[sl].shared_bytes())
                h.update(own_checks)
                digest = h.digest()
                out[i] = (msg0, frame(_NAME, "retrieval_request", 1, cfg.round_id,
                                      roots1[per_user * j : per_user * (j + 1)], *user._seeds, user._mac_key, digest))
        done = cast("list[tuple[bytes, bytes] | Exception]", out)  # every entry is set above
        return [got if isinstance(got, Exception) else user._sending(got) for user, got in zip(mine, done, strict=True)]

    def _sending(self, messages: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
        """The request messages this device sends for the ones it made: the same for an honest
        device (a simulated malicious one rewrites them, :mod:`secemb.protocols.adversary`)."""
        return messages

    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
        """The requested rows, ring (S, width) (zero rows for empty buckets), once they pass
        their integrity check.

        Raises
        ------
        InvalidMessage: a reply is malformed.
        RetrievalTampered: a server altered its answer share (the rows' tags do not verify,
            or an empty bucket's answer is not zero); no rows are returned and the user does
            not upload this round.
        """
        cfg = self.config
        if self._state is None:
            raise ProtocolError("retrieval_result before retrieval_request")
        shape = (cfg.slots, cfg.width + tag_words(cfg))
        size = _answer_bytes(cfg)
        body0 = open_message(reply0, _NAME, "retrieval_reply", 0, cfg.round_id, size)
        first = read_array(body0, 0, cfg.dtype, shape)[0]
        if self.relay:
            if reply1 is not None:
                raise ProtocolError("with relay, server 1 sends no retrieval reply")
            assert self._seeds is not None  # drawn by a relay retrieval_request
            return self._verified(first - relay_prg(self._seeds[0], shape, cfg.dtype))
        if reply1 is None:
            raise ProtocolError("missing server 1's retrieval reply")
        body1 = open_message(reply1, _NAME, "retrieval_reply", 1, cfg.round_id, size)
        return self._verified(reconstruct(first, read_array(body1, 0, cfg.dtype, shape)[0]))

    def _verified(self, answers: np.ndarray) -> np.ndarray:
        """The rows of the reconstructed ``answers`` (ring (S, width + T): ``beta_i T[alpha_i]``
        plus any server's offset), after checking every real slot's tag against its row
        (unmasked by ``beta_i^{-1}``) and every empty bucket's answer is zero."""
        cfg = self.config
        real, items, unmask = self._real, self._items, self._unmask
        assert real is not None and items is not None and unmask is not None  # set with _state
        unmasked = answers[real] * unmask[real][:, None]
        rows = unmasked[:, : cfg.width]
        if np.any(answers[~real]) or not np.array_equal(unmasked[:, cfg.width :],
                                                        row_tags(cfg.round_id, items[real], rows)):
            self._tampered = True
            raise RetrievalTampered(
                f"round {cfg.round_id}: the retrieved rows failed their integrity check, a server altered its "
                "answer share; the rows are discarded and this device does not upload"
            )
        out = np.zeros((cfg.slots, cfg.width), cfg.dtype)
        out[real] = rows
        return out

    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes | None]:
        cfg = self.config
        if self._tampered:
            raise ProtocolError("the retrieval failed its integrity check: no upload this round")
        if self._state is None:
            raise ProtocolError("upload before retrieval_request")
        if rows.dtype != cfg.dtype or rows.shape != (cfg.slots, cfg.width):
            raise InvalidParameters(
                f"rows must be {cfg.dtype} of shape ({cfg.slots}, {cfg.width}), got {rows.dtype} {rows.shape}"
            )
        if dense.dtype != cfg.dtype or dense.shape != (cfg.dense_size,):
            raise InvalidParameters(
                f"dense must be {cfg.dtype} of shape ({cfg.dense_size},), got {dense.dtype} {dense.shape}"
            )
        assert self._real is not None  # set with _state
        if np.any(rows[~self._real]):
            raise InvalidParameters("rows of empty slots must be zero")
        cw = fss.convert_gen(self._state, rows, ring_bits=cfg.ring_bits, tag=AGGREGATION_TAG)
        self._state = None  # one upload per round
        cw_bytes = array_bytes(cw)
        if self.relay:
            assert self._seeds is not None and self._mac_key is not None  # drawn by a relay retrieval_request
            d1 = relay_prg(self._seeds[1], dense.shape, cfg.dtype)
            tag = _upload_mac(self._mac_key, cfg.round_id, cw_bytes)
            return frame(_NAME, "upload", 0, cfg.round_id, cw_bytes, array_bytes(dense - d1), tag), None
        d0, d1 = share(dense, _rng=self._rng)
        return (
            frame(_NAME, "upload", 0, cfg.round_id, cw_bytes, array_bytes(d0)),
            frame(_NAME, "upload", 1, cfg.round_id, cw_bytes, array_bytes(d1)),
        )


@dataclass
class _Pending:
    """What a server keeps of a user between retrieval and upload."""

    keys: fss.DPFKeys
    bits: np.ndarray  # full layout: packed control bits (S, ceil(m/8)); cuckoo: t (B, M)
    proof: bytes  # verified uploads: SHA-256 of the key part and check words, and the check values


@dataclass(frozen=True)
class _Direct:
    """Server 1, relay: what a user sent it directly (over its own authenticated channel)."""

    roots: bytes  # its key batch's roots, 16 S
    mask_seed: bytes  # expands to the mask of its retrieval answer
    dense_seed: bytes  # expands to its share of the dense gradient
    mac_key: bytes  # authenticates the upload's correction words server 0 forwards
    digest: bytes  # SHA-256 of the key part server 0 forwards


@dataclass
class _Absorbed:
    """What a server keeps of an uploaded user until the round closes (to aggregate it, or
    to leave it out)."""

    keys: fss.DPFKeys
    bits: np.ndarray
    proof: bytes  # as _Pending.proof
    cw: np.ndarray  # ring (S, w): the aggregation correction words
    dense: np.ndarray  # ring (P,): this server's dense share


@dataclass(frozen=True)
class _Request:
    """A parsed retrieval request: its keys and, with verified uploads, its check correction
    words (uint64 (S, 4)) and the SHA-256 of its shared key part and check words."""

    keys: fss.DPFKeys
    checks: np.ndarray | None
    digest: bytes
    shared: bytes | None = None  # server 0, relay: the shared key part it forwards (serialized once)


@dataclass
class _Buckets:
    """The cuckoo layout's table as published: its rows and where each bucket position reads
    (``index`` int64 (B, M), -1 for padding); a task forms the bucket tables it evaluates."""

    rows: LimbMatrix
    index: np.ndarray
    #: bucket tables formed in this process (the last two ranges; never pickled)
    formed: dict[tuple[int, int], LimbMatrix] = field(default_factory=dict, repr=False, compare=False)

    def tables(self, lo: int, hi: int) -> LimbMatrix:
        """The bucket form (hi - lo, M, w) of buckets ``lo..hi-1``, formed once per range in
        each process that reads this value (a round's batches reuse it)."""
        got = self.formed.get((lo, hi))
        if got is None:
            if len(self.formed) >= 2:
                self.formed.clear()
            got = self.formed[lo, hi] = self.rows.gather(self.index[lo:hi])
        return got

    def __getstate__(self) -> dict[str, object]:
        return {"rows": self.rows, "index": self.index, "formed": {}}


def _evaluation_form(table: np.ndarray, layout: str | CuckooLayout, ring_bits: int) -> LimbMatrix | _Buckets:
    """The ring table (m, w) as the CPU evaluation reads it: its :class:`LimbMatrix` (full
    layout), or that and the layout's gather index (cuckoo: tasks form their own buckets, so
    the bucket form, three times the table, is neither built once in the server's process nor
    published)."""
    limbs = LimbMatrix(table, ring_bits)
    return limbs if isinstance(layout, str) else _Buckets(limbs, layout.gather_index)


#: an evaluation's per-user answers and control bits, summed folded part and (verified uploads)
#: per-user check values (S, 4)
_Evaluated = tuple[list[np.ndarray], list[np.ndarray], np.ndarray, list[np.ndarray] | None]


def _evaluate_task(task: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Evaluate a batch of users' keys (module-level: it runs in worker processes too).

    ``task = (layout, party, keys, table, width, buckets, check)`` with ``layout`` ``"full"`` or
    ``"cuckoo"``, ``keys`` the users' key batches concatenated and ``table`` the
    :class:`~secemb.protocols.backends.Handle` of the round's table as the evaluation reads
    it (:func:`_evaluation_form`), or the gpu backend's :class:`DeviceTable`.  ``buckets =
    (lo, hi)`` (cuckoo, CPU): the keys are every user's keys of buckets ``lo..hi-1``,
    user-major, and read those buckets' rows (``None``: all buckets).  Returns the answers (K, w), the control bits
    (packed rows for the full layout, (K, M) for the cuckoo layout) and the signed
    payload-independent part of the aggregation share summed over the batch ((m, w), or
    (hi - lo, M, w) for those buckets, zero at positions that pad a bucket).  ``check = (cs,
    r, per_user)`` (verified uploads: the keys' check correction words, their users'
    challenges and keys per user, :class:`~secemb.fss.verify.LeafCheck`) or ``None``; the
    fourth result is the keys' check values (K, 4), from the same walk, or ``None``.
    """
    layout, party, keys, handle, width, buckets, check_args = task
    check = None if check_args is None else LeafCheck(*check_args)
    table = handle.get()
    if isinstance(table, DeviceTable):  # the gpu backend: the table is on its device, the check walks here
        answers, t, conv = table.evaluate(party, keys, width)
        return answers, t, conv, None if check is None else key_checks(keys.path, check)
    values = None if check is None else check.values
    if layout == "full":
        answers, prepared = retrieve_and_prepare(keys.path, party, keys.cw_out, table, width, check=check)
        return answers, prepared.t_bits, prepared.signed_conv(), values
    lo, hi = buckets or (0, len(table.index))
    answers, t, conv = retrieve_and_prepare_buckets(keys.path, party, keys.cw_out, table.tables(lo, hi), width,
                                                    sizes=(table.index[lo:hi] >= 0).sum(axis=1), check=check)
    if party:
        np.negative(conv, out=conv)
    return answers, t, conv, values


def _place(result: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None], answers: np.ndarray,
           bits: np.ndarray, folded: np.ndarray, values: np.ndarray) -> None:
    """Write a bucket range's :func:`_evaluate_task` result into the views ``answers`` (U, G, w + T),
    ``bits`` (U, G, M), ``folded`` (G, M, w) and ``values`` (U, G, 4) of the batch's arrays."""
    a, t, conv, v = result
    answers[...] = a.reshape(answers.shape)
    bits[...] = t.reshape(bits.shape)
    folded[...] = conv
    if v is not None:
        values[...] = v.reshape(values.shape)


def _evaluate_into_task(task: tuple[tuple, np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
    """:func:`_evaluate_task` of a range of buckets, its result written by the task itself
    (:func:`_place`; a task of an in-process backend: ``task = (inner, answers, bits, folded, values)``)."""
    inner, *views = task
    _place(_evaluate_task(inner), *views)


def _ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """``[0, n)`` cut into ``parts`` consecutive ranges of near-equal size."""
    bounds = np.linspace(0, n, parts + 1).astype(int).tolist()
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _bits_task(task: tuple[list[np.ndarray], list[np.ndarray], slice, np.ndarray, bool, np.ndarray,
                          np.ndarray]) -> None:
    """``out[:] = folded + bits_product(t, (-1)^negate cw, sizes)`` for a range of buckets, ``t``
    and ``cw`` stacked here from each user's bits (B, M) and words (B, w) of that range, so
    they are contiguous (the kernel's fast specialization) and the stacking is split too (a
    task of an in-process backend: ``task = (bits, cws, buckets, sizes, negate, folded,
    out)``, ``out`` C-contiguous)."""
    bits, cws, buckets, sizes, negate, folded, out = task
    np.copyto(out, folded)
    cw = np.stack([c[buckets] for c in cws])
    if negate:
        np.negative(cw, out=cw)
    bits_product(np.stack([b[buckets] for b in bits]), cw, sizes, out=out)


def _scatter_task(task: tuple[CuckooLayout, np.ndarray, slice]) -> np.ndarray:
    """:meth:`~secemb.fss.cuckoo.CuckooLayout.scatter` of a range of items (a backend task)."""
    layout, bucket_form, items = task
    return layout.scatter(bucket_form, items)


class SecEmbServer(ServerRole):
    """Server ``party`` of SecEmb; party 0 leads (reconstructs the aggregate)."""

    def __init__(self, party: int, *, relay: bool = False, verify: bool = True,
                 backend: Backend | None = None) -> None:
        super().__init__(party)
        self.relay = relay
        self.verify = verify  # verified uploads: take check words, compute check values (upload_digests)
        self.backend = backend or SerialBackend()
        self._table: Handle | None = None  # the round's published table
        self._device: DeviceTable | None = None  # the gpu backend's copy of it

    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        if table.dtype != config.dtype or table.shape != (config.num_items, config.width):
            raise InvalidParameters(
                f"table must be {config.dtype} of shape ({config.num_items}, {config.width}), "
                f"got {table.dtype} {table.shape}"
            )
        self._start_round(config)
        layout = "full" if config.layout == "full" else config.cuckoo()
        # the evaluated table carries each row's tag (verified retrieval, docs/security.md)
        table = np.concatenate([table, row_tags(config.round_id, np.arange(config.num_items), table)], axis=1)
        # the table in the form the evaluation reads, computed once a round: on the backend's
        # device, or as limbs (full layout: the table; cuckoo: its bucket form), published to
        # the backend's workers (shared memory, object store) so tasks carry only a handle
        self._device = self.backend.device_table(np.ascontiguousarray(table), layout)
        evaluated = self._device if self._device is not None else _evaluation_form(table, layout, config.ring_bits)
        if self._table is not None:
            self.backend.release(self._table)
        self._table = self.backend.publish(evaluated)
        if isinstance(layout, str):
            self._sparse = np.zeros((config.num_items, config.width), config.dtype)
        else:
            self._sparse = np.zeros((config.num_buckets, layout.bucket_size, config.width), config.dtype)
        self._dense = np.zeros(config.dense_size, config.dtype)
        self._pending: dict[int, _Pending] = {}
        self._direct_of: dict[int, _Direct] = {}  # server 1, relay: retrieved users' direct messages
        self._uploaded: set[int] = set()
        self._absorbed: dict[int, _Absorbed] = {}
        self._folded = False  # whether _sparse holds a batch yet (until then it is zero)
        self._closed_cache: tuple[tuple[int, ...], tuple[list[int], np.ndarray, np.ndarray]] | None = None
        self._awaiting: dict[int, _Direct] = {}  # server 1, relay: direct messages of unevaluated users
        self._answers: dict[int, np.ndarray] = {}  # server 0, relay: own shares, for completion
        # server 0, relay: the requests relay_forwards parsed, by user, for the evaluation of the same bytes
        self._forwarded: dict[int, tuple[bytes, _Request]] = {}

    def _check_new(self, user_id: int) -> None:
        if user_id in self._pending or user_id in self._uploaded or user_id in self._awaiting:
            raise ProtocolError(f"user {user_id} already retrieved in round {self._cfg().round_id}")

    # -- retrieval ---------------------------------------------------------------------
    def _evaluate(self, keys: list[fss.DPFKeys], checks: list[tuple[np.ndarray, bytes]] | None = None) -> _Evaluated:
        """Per-user answers and control bits, and the summed folded part, for a batch of
        users' keys, chunked over the backend's workers: by users, or (cuckoo layout, CPU) by
        ranges of buckets, so that each task folds into its own buckets' rows and nothing
        table-sized is summed across tasks.  With ``checks`` (per user: its check correction
        words (S, 4) and key digest; verified uploads), also each user's check values (S, 4)
        from the same walk, else ``None``."""
        cfg = self._cfg()
        n = len(keys)
        check: tuple[np.ndarray, np.ndarray] | None = None
        if checks is not None:
            seeds = np.stack([_challenge_seed(cfg.round_id, d) for _, d in checks])
            check = (np.stack([c for c, _ in checks]), challenges(seeds, padded_leaves(key_params(cfg))))
        # a task walks its keys' trees over the whole (bucket) domain, holding leaf-level
        # control bits and retrieval shares: bound that memory by splitting the batch
        leaves = cfg.slots * padded_leaves(key_params(cfg))  # per user, over all its keys
        per_user = leaves * (cfg.dtype.itemsize + 1)
        if cfg.layout == "cuckoo" and self._device is None:
            fold = leaves * cfg.width * cfg.dtype.itemsize  # the bucket rows the walk folds into
            return self._evaluate_buckets(keys, max(-(-n * per_user // EVAL_BYTES), -(-fold // FOLD_BYTES)), check)
        tasks_n = max(min(n, self.backend.workers), -(-n // max(1, EVAL_BYTES // per_user)))
        tasks = [(cfg.layout, self.party, fss.DPFKeys.concat(keys[lo:hi]), self._table, cfg.width, None,
                  None if check is None else (check[0][lo:hi].reshape(-1, CHECK_WORDS), check[1][lo:hi], cfg.slots))
                 for lo, hi in _ranges(n, tasks_n)]
        results = self.backend.map(_evaluate_task, tasks)
        folded = results[0][2] if results[0][2].flags.writeable else results[0][2].copy()  # Ray's are not
        for r in results[1:]:
            folded += r[2]  # in place: one pass per task over a table-sized array
        slots = cfg.slots
        answers = [r[0][i * slots : (i + 1) * slots] for r in results for i in range(len(r[0]) // slots)]
        bits = [r[1][i * slots : (i + 1) * slots] for r in results for i in range(len(r[1]) // slots)]
        values = None if check is None else [v for r in results for v in np.asarray(r[3]).reshape(-1, slots,
                                                                                                   CHECK_WORDS)]
        return answers, bits, folded, values

    def _evaluate_buckets(self, keys: list[fss.DPFKeys], parts: int,
                          check: tuple[np.ndarray, np.ndarray] | None) -> _Evaluated:
        """:meth:`_evaluate` of the cuckoo layout in tasks of every user's keys of a range of
        buckets (at least ``parts`` ranges, one per worker if more)."""
        cfg = self._cfg()
        n, slots = len(keys), cfg.slots
        spans = _ranges(slots, min(slots, max(parts, self.backend.workers)))
        stacked = fss.DPFKeys.concat(keys)  # user-major: user u's keys are rows u B .. u B + B - 1
        tasks = [("cuckoo", self.party, stacked.blocks(n, lo, hi), self._table, cfg.width, (lo, hi),
                  None if check is None else (np.ascontiguousarray(check[0][:, lo:hi]).reshape(-1, CHECK_WORDS),
                                              check[1], hi - lo))
                 for lo, hi in spans]
        big_m = cfg.cuckoo().bucket_size
        answers = np.empty((n, slots, cfg.width + tag_words(cfg)), cfg.dtype)
        bits = np.empty((n, slots, big_m), np.uint8)
        folded = np.empty((slots, big_m, cfg.width), cfg.dtype)
        values = np.zeros((n, slots, CHECK_WORDS), np.uint64)
        views = [(answers[:, lo:hi], bits[:, lo:hi], folded[lo:hi], values[:, lo:hi]) for lo, hi in spans]
        if self.backend.in_process:  # threads (or this process) place their own range's results
            self.backend.map(_evaluate_into_task, [(task, *v) for task, v in zip(tasks, views, strict=True)])
        else:
            for result, v in zip(self.backend.map(_evaluate_task, tasks), views, strict=True):
                _place(result, *v)
        return list(answers), list(bits), folded, None if check is None else list(values)

    def _commit_evaluated(self, users: list[int], keys: list[fss.DPFKeys], evaluated: _Evaluated,
                          digests: list[bytes] | None = None) -> list[np.ndarray]:
        """Apply an :meth:`_evaluate` result: fold the batch into the running aggregate and
        keep each user's keys, control bits and (verified uploads, with each user's key
        ``digests``) its check proof until its upload; the answers."""
        answers, bits, folded, values = evaluated
        if self._folded or not folded.flags.writeable:
            self._sparse += folded
        else:  # the round's first batch (usually its only one): adopt it, sparing a pass
            self._sparse = folded
        self._folded = True
        self._closed_cache = None
        proofs = [b""] * len(users) if values is None or digests is None else [
            d + array_bytes(v) for d, v in zip(digests, values, strict=True)]
        for u, k, b, proof in zip(users, keys, bits, proofs, strict=True):
            self._pending[u] = _Pending(k, b, proof)
        return answers

    def _parse_requests(self, messages: list[bytes]) -> list[_Request | SecembError]:
        """The keys (and check words) of each retrieval request (server 0, or either server
        without relay), or the error that refuses it; the keys of all requests are parsed as
        one batch."""
        if self.relay and self.party == 1:
            return []
        cfg = self._cfg()
        out: list[_Request | SecembError | None] = [None] * len(messages)
        bodies: list[memoryview] = []
        where: list[int] = []
        size = request_bytes(cfg, self.verify)
        split = size - _checks_bytes(cfg, self.verify)
        for i, message in enumerate(messages):
            try:
                bodies.append(open_message(message, _NAME, "retrieval_request", self.party, cfg.round_id, size))
                where.append(i)
            except SecembError as exc:
                out[i] = exc
        keys = fss.DPFKeys.from_bytes_many([b[:split] for b in bodies], party=self.party, **_key_expect(cfg))
        for i, body, got in zip(where, bodies, keys, strict=True):
            out[i] = InvalidMessage(f"retrieval_request: {got}") if isinstance(got, InvalidKey) else \
                self._request(got, body[split:])
        return cast("list[_Request | SecembError]", out)  # every entry is set above

    def _request(self, keys: fss.DPFKeys, checks: memoryview | bytes, digest: bytes | None = None) -> _Request:
        """A parsed request with its check words (verified uploads) and key digest: SHA-256
        of the shared key part and the check words, computed here unless given (``digest``:
        server 1 with relay, which compared it with the device's own)."""
        if not self.verify:
            return _Request(keys, None, b"")
        shared = None
        if digest is None:
            shared = keys.shared_bytes()
            h = hashlib.sha256(shared)
            h.update(checks)
            digest = h.digest()
        words = read_array(memoryview(checks), 0, np.dtype(np.uint64), (len(keys), CHECK_WORDS))[0]
        return _Request(keys, words, digest, shared if self.relay else None)

    def _evaluate_requests(self, requests: list[_Request]) -> _Evaluated:
        """:meth:`_evaluate` of parsed requests, with their checks when verifying."""
        keys = [q.keys for q in requests]
        if not self.verify:
            return self._evaluate(keys)
        return self._evaluate(keys, [(cast("np.ndarray", q.checks), q.digest) for q in requests])

    def relay_forwards(self, requests: list[tuple[int, bytes]]) -> list[bytes | SecembError] | None:
        """Server 0, relay: each request's shared key part framed for server 1 (the bytes
        ``commit()`` returns for it), or the error that refuses it; ``None`` otherwise."""
        if not (self.relay and self.party == 0):
            return None
        out: list[bytes | SecembError] = []
        self._forwarded = {}
        for (user_id, message), got in zip(requests, self._parse_requests([m for _, m in requests]), strict=True):
            try:
                user_id = check_user(user_id)
                if isinstance(got, SecembError):
                    raise got
                out.append(self._forward(got))
                self._forwarded[user_id] = (message, got)
            except SecembError as exc:
                out.append(exc)
        return out

    def _parse_once(self, requests: list[tuple[int, bytes]]) -> list[_Request | SecembError]:
        """:meth:`_parse_requests` of the requests' messages, taking those :meth:`relay_forwards`
        parsed just before (the same user and bytes) from its result instead of parsing them
        again; that result is dropped."""
        forwarded, self._forwarded = self._forwarded, {}
        if self.relay and self.party == 1:  # server 1 gets roots, parsed one by one (_parse_roots)
            return []
        out: list[_Request | SecembError | None] = [None] * len(requests)
        todo: list[int] = []
        for i, (user_id, message) in enumerate(requests):
            hit = forwarded.get(user_id) if type(user_id) is int else None
            if hit is not None and hit[0] == message:
                out[i] = hit[1]
            else:
                todo.append(i)
        for i, got in zip(todo, self._parse_requests([requests[i][1] for i in todo]), strict=True):
            out[i] = got
        return cast("list[_Request | SecembError]", out)  # every entry is set above

    def handle_retrieval(self, user_id: int, message: bytes) -> bytes | None:
        """Non-relay: the reply to the user.  Relay: server 0 returns the shared key part to
        forward to server 1; server 1 stores the user's roots and seeds and returns None."""
        out = self.handle_retrieval_many([(user_id, message)])[0]
        if isinstance(out, Exception):
            raise out
        return out

    def handle_retrieval_many(self, requests: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """:meth:`handle_retrieval` for many users at once, evaluated as one batch (over the
        backend's workers).  A rejected request yields its exception in its place (raised
        by :meth:`handle_retrieval`) and changes no state; the others proceed."""
        return self.evaluate_retrieval_many(requests)()

    def evaluate_retrieval_many(
        self, requests: list[tuple[int, bytes]]
    ) -> Callable[[], list[bytes | None | SecembError]]:
        """Parse and evaluate the batch (no state change); ``commit()`` folds it in and
        returns the replies (see :meth:`ServerRole.evaluate_retrieval_many`)."""
        cfg = self._cfg()
        out: list[bytes | None | SecembError] = [None] * len(requests)
        users: list[int] = []
        keys: list[_Request] = []
        where: list[int] = []
        roots: dict[int, _Direct] = {}
        seen: set[int] = set()
        parsed = self._parse_once(requests)  # all at once; used in order below
        for i, (user_id, message) in enumerate(requests):
            try:
                user_id = check_user(user_id)
                if user_id in seen:
                    raise ProtocolError(f"user {user_id} already retrieved in round {cfg.round_id}")
                self._check_new(user_id)
                if self.relay and self.party == 1:
                    roots[user_id] = self._parse_roots(message)
                else:
                    got = parsed[i]
                    if isinstance(got, SecembError):
                        raise got
                    keys.append(got)
                    users.append(user_id)
                    where.append(i)
                seen.add(user_id)
            except SecembError as exc:
                out[i] = exc
        evaluated = self._evaluate_requests(keys) if keys else None

        def commit() -> list[bytes | None | SecembError]:
            if self.config is not cfg:
                raise ProtocolError(f"round {cfg.round_id} ended while its retrievals were evaluated")
            for u in seen:
                self._check_new(u)
            self._awaiting.update(roots)
            if evaluated is None:
                return out
            committed = self._commit_evaluated(users, [q.keys for q in keys], evaluated, [q.digest for q in keys])
            for i, u, q, answers in zip(where, users, keys, committed, strict=True):
                if not self.relay:
                    out[i] = frame(_NAME, "retrieval_reply", self.party, cfg.round_id, array_bytes(answers))
                else:
                    self._answers[u] = answers
                    out[i] = self._forward(q)
            return out

        return commit

    def _forward(self, request: _Request) -> bytes:
        """Server 0, relay: the relay_keys message of a request (its shared key part, then
        its check words when verifying)."""
        checks = b"" if request.checks is None else array_bytes(request.checks)
        shared = request.keys.shared_bytes() if request.shared is None else request.shared
        return frame(_NAME, "relay_keys", 1, self._cfg().round_id, shared, checks)

    def _parse_roots(self, message: bytes) -> _Direct:
        """Server 1, relay: a request's roots, seeds, MAC key and forwarded-part digest."""
        cfg = self._cfg()
        body = bytes(open_message(message, _NAME, "retrieval_request", 1, cfg.round_id, _roots_bytes(cfg)))
        ends = np.cumsum([16 * cfg.slots, SEED_BYTES, SEED_BYTES, MAC_KEY_BYTES, DIGEST_BYTES]).tolist()
        roots, mask_seed, dense_seed, mac_key, digest = (body[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True))
        if np.any(np.frombuffer(roots, np.uint8)[::16] & 1 != 1):
            raise InvalidMessage("retrieval_request: root control bits must equal the party")
        return _Direct(roots, mask_seed, dense_seed, mac_key, digest)

    def relay_retrieval(self, user_id: int, message: bytes) -> bytes:
        """Server 1, relay: evaluate the forwarded keys; return masked shares for server 0."""
        out = self.relay_retrieval_many([(user_id, message)])[0]
        if isinstance(out, Exception):
            raise out
        return out

    def relay_retrieval_many(self, forwards: list[tuple[int, bytes]]) -> list[bytes | SecembError]:
        """:meth:`relay_retrieval` for many users, evaluated as one batch."""
        return self.evaluate_relay_many(forwards)()

    def evaluate_relay_many(self, forwards: list[tuple[int, bytes]]) -> Callable[[], list[bytes | SecembError]]:
        """Parse and evaluate the forwarded keys (no state change); ``commit()`` folds them in
        and returns the masked answers (see :meth:`ServerRole.evaluate_retrieval_many`)."""
        cfg = self._cfg()
        if not (self.relay and self.party == 1):
            raise ProtocolError("relay_retrieval is server 1's step in relay mode")
        out: list[bytes | SecembError] = [b""] * len(forwards)
        users: list[int] = []
        where: list[int] = []
        shared_len = _shared_bytes(cfg, self.verify)
        split = shared_len - _checks_bytes(cfg, self.verify)
        parts: list[tuple[int, memoryview, bytes]] = []  # (index, forwarded body, roots): parsed as one batch
        for i, (user_id, message) in enumerate(forwards):
            try:
                user_id = check_user(user_id)
                if user_id not in self._awaiting or user_id in users:
                    raise ProtocolError(f"no retrieval request of user {user_id} to complete")
                body = open_message(message, _NAME, "relay_keys", 1, cfg.round_id, shared_len)
                direct = self._awaiting[user_id]
                if not hmac.compare_digest(hashlib.sha256(body).digest(), direct.digest):
                    raise RelayTampered(f"relay_keys of round {cfg.round_id}: the forwarded key part differs from "
                                        "the one the device committed to (server 0 altered it); not evaluated")
                parts.append((i, body, direct.roots))
                users.append(user_id)
                where.append(i)
            except SecembError as exc:
                out[i] = exc
        parsed = fss.DPFKeys.from_shared_many([(b[:split], r) for _, b, r in parts], 1, **_key_expect(cfg))
        failed = {i: got for (i, _, _), got in zip(parts, parsed, strict=True) if isinstance(got, InvalidKey)}
        for i, bad in failed.items():
            out[i] = InvalidMessage(f"relay_keys: {bad}")
        requests = [self._request(got, b[split:], self._awaiting[u].digest)
                    for (_, b, _), u, got in zip(parts, users, parsed, strict=True) if not isinstance(got, InvalidKey)]
        keys = [q.keys for q in requests]
        users = [u for u, i in zip(users, where, strict=True) if i not in failed]
        where = [i for i in where if i not in failed]
        evaluated = self._evaluate_requests(requests) if requests else None

        def commit() -> list[bytes | SecembError]:
            if self.config is not cfg:
                raise ProtocolError(f"round {cfg.round_id} ended while its relayed retrievals were evaluated")
            missing = [u for u in users if u not in self._awaiting]
            if missing:
                raise ProtocolError(f"no retrieval request of user(s) {missing[:5]} to complete")
            if evaluated is None:
                return out
            committed = self._commit_evaluated(users, keys, evaluated, [q.digest for q in requests])
            directs = [self._awaiting.pop(u) for u in users]
            self._direct_of.update(zip(users, directs, strict=True))
            masks = relay_prgs([d.mask_seed for d in directs], (cfg.slots, cfg.width + tag_words(cfg)), cfg.dtype)
            for i, answers, mask in zip(where, committed, masks, strict=True):
                out[i] = frame(_NAME, "relay_answer", 1, cfg.round_id, array_bytes(answers + mask))
            return out

        return commit

    def complete_retrieval(self, user_id: int, message: bytes) -> bytes:
        """Server 0, relay: add server 1's masked shares to its own; the reply to the user."""
        cfg = self._cfg()
        user_id = check_user(user_id)
        if not (self.relay and self.party == 0) or user_id not in self._answers:
            raise ProtocolError(f"no relayed retrieval of user {user_id} to complete")
        body = open_message(message, _NAME, "relay_answer", 1, cfg.round_id, _answer_bytes(cfg))
        masked = read_array(body, 0, cfg.dtype, (cfg.slots, cfg.width + tag_words(cfg)))[0]
        reply = self._answers.pop(user_id) + masked
        return frame(_NAME, "retrieval_reply", 0, cfg.round_id, array_bytes(reply))

    # -- upload --------------------------------------------------------------------------
    def _absorb(self, user_id: int, cw: np.ndarray, dense: np.ndarray) -> None:
        # all checks passed: change state.  The control-bit part of the share is computed
        # for the included users at once when the aggregate is asked for (_summed); each
        # user's keys and dense share stay until then, so that a user can be left out.
        pending = self._pending.pop(user_id)
        self._absorbed[user_id] = _Absorbed(pending.keys, pending.bits, pending.proof, cw, dense)
        self._closed_cache = None
        self._dense += dense
        self._uploaded.add(user_id)

    def _summed(self, users: list[int]) -> np.ndarray:
        """The folded part of the round's batches plus ``(-1)^b sum_u sum_i t_u[i, j] CW_u[i]``
        over absorbed ``users`` (the control-bit part as one batched product), in the layout's
        form: their aggregate share before silent users are taken out (a new array)."""
        cfg = self._cfg()
        got = [self._absorbed[u] for u in users]
        if not got:
            return self._sparse.copy()
        if cfg.layout == "full":
            bits = np.concatenate([a.bits for a in got])
            cws = np.concatenate([a.cw for a in got])
            summary = PreparedAggregation(self.party, cfg.ring_bits, cfg.num_items, cfg.width, bits, None)
            return self._sparse + summary.apply_bits(cws)
        if self._device is not None:
            t = np.stack([a.bits for a in got], axis=2)  # (B, M, U)
            part = self._device.bits_product(t, np.stack([a.cw for a in got], axis=1))
            return self._sparse - part if self.party else self._sparse + part
        # party 1 adds the bits' product with the negated words: (-1)^b t CW
        return self._add_bits_product([a.bits for a in got], [a.cw for a in got])

    def _spans(self, n: int) -> list[tuple[int, int]]:
        """``[0, n)`` in one range per worker of a backend whose workers share this process's
        memory (threads), else one range (the others' workers would copy the operands)."""
        return _ranges(n, max(1, min(n, self.backend.workers) if self.backend.in_process else 1))

    def _add_bits_product(self, bits: list[np.ndarray], cws: list[np.ndarray]) -> np.ndarray:
        """A copy of the folded part (B, M, w) plus ``(-1)^b`` :func:`~secemb.fss.fused.bits_product`
        of the users' bits (each (B, M)) and correction words (each (B, w)), in ranges of
        buckets (:meth:`_spans`)."""
        sizes = np.diff(self._cfg().cuckoo().indptr)  # positions past a bucket's size pad it: left as they are
        out = np.empty(self._sparse.shape, self._sparse.dtype)
        self._map_spans(_bits_task, [(bits, cws, slice(lo, hi), sizes[lo:hi], bool(self.party), self._sparse[lo:hi],
                                      out[lo:hi]) for lo, hi in self._spans(len(sizes))])
        return out

    def _scatter(self, bucket_form: np.ndarray) -> np.ndarray:
        """The layout's scatter of ``bucket_form`` onto items, in ranges of items (:meth:`_spans`)."""
        layout = self._cfg().cuckoo()
        parts = self._map_spans(_scatter_task, [(layout, bucket_form, slice(lo, hi))
                                                for lo, hi in self._spans(layout.num_items)])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _map_spans(self, fn: Callable[[_T], _R], tasks: list[_T]) -> list[_R]:
        """``fn`` over the tasks of :meth:`_spans`: one runs here, several on the backend's
        threads (they read and write this process's arrays)."""
        return [fn(tasks[0])] if len(tasks) == 1 else self.backend.map(fn, tasks)

    def _check_upload(self, user_id: int) -> None:
        cfg = self._cfg()
        if user_id in self._uploaded:
            raise ProtocolError(f"user {user_id} already uploaded in round {cfg.round_id}")
        if user_id not in self._pending:
            raise ProtocolError(f"user {user_id} uploaded without retrieving in round {cfg.round_id}")

    def handle_upload(self, user_id: int, message: bytes) -> bytes | None:
        """Absorb an upload.  Relay: server 0 returns the correction words to forward."""
        cfg = self._cfg()
        user_id = check_user(user_id)
        if self.relay and self.party == 1:
            raise ProtocolError("with relay, users upload to server 0 only")
        self._check_upload(user_id)
        body = open_message(message, _NAME, "upload", self.party, cfg.round_id, _upload_bytes(cfg, self.relay))
        cw, off = read_array(body, 0, cfg.dtype, (cfg.slots, cfg.width))
        dense, off = read_array(body, off, cfg.dtype, (cfg.dense_size,))
        self._absorb(user_id, cw, dense)
        if self.relay:  # the correction words exactly as received, with the tag only server 1 can check
            return frame(_NAME, "relay_upload", 1, cfg.round_id, bytes(body[: _rows_bytes(cfg)]), bytes(body[off:]))
        return None

    def relay_upload(self, user_id: int, message: bytes) -> None:
        """Server 1, relay: check the forwarded correction words' tag under the key the user
        sent it directly, then absorb them; its dense share is the expansion of the user's seed.

        Raises
        ------
        RelayTampered: the tag does not verify (server 0 altered or swapped the words); nothing
            is absorbed.
        """
        cfg = self._cfg()
        user_id = check_user(user_id)
        if not (self.relay and self.party == 1):
            raise ProtocolError("relay_upload is server 1's step in relay mode")
        self._check_upload(user_id)
        size = _rows_bytes(cfg)
        body = open_message(message, _NAME, "relay_upload", 1, cfg.round_id, size + MAC_BYTES)
        direct = self._direct_of[user_id]
        if not hmac.compare_digest(_upload_mac(direct.mac_key, cfg.round_id, bytes(body[:size])), body[size:]):
            raise RelayTampered(f"relay_upload of round {cfg.round_id}: the forwarded correction words fail the "
                                "device's MAC (server 0 altered them); not absorbed")
        cw = read_array(body, 0, cfg.dtype, (cfg.slots, cfg.width))[0]
        dense = relay_prg(self._direct_of.pop(user_id).dense_seed, (cfg.dense_size,), cfg.dtype)
        self._absorb(user_id, cw, dense)

    # -- verification (verified uploads) -------------------------------------------------
    def upload_digests(self, users: list[int]) -> dict[int, bytes] | None:
        """Per uploaded user of ``users``, the 32-byte digest the two servers compare before
        the user enters the aggregate (``None`` without verified uploads).

        ``SHA-256(b"secemb-verify-upload" || u64 round || u64 user || K || V || CW)``: ``K`` is
        the SHA-256 of the user's shared key part and check words, ``V`` its keys' check values
        (:mod:`secemb.fss.verify`) and ``CW`` its aggregation correction words (without relay;
        with relay both servers hold the words the device authenticated, so ``CW`` is empty).  For an honest
        user both servers compute the same digest, so the message tells the receiver nothing it
        could not compute itself; a user whose keys are not point functions, or who sent the
        servers different key parts, check words or correction words, gets different digests
        (docs/security.md, "A malicious device: verified uploads").

        Raises
        ------
        ProtocolError: a user of ``users`` did not upload in this round.
        """
        cfg = self._cfg()
        if not self.verify:
            return None
        out: dict[int, bytes] = {}
        for u in users:
            got = self._absorbed.get(u)
            if got is None or u not in self._uploaded:
                raise ProtocolError(f"user {u} did not upload in round {cfg.round_id}")
            cw = b"" if self.relay else array_bytes(got.cw)
            out[u] = hashlib.sha256(_VERIFY_DOMAIN + _U64.pack(cfg.round_id) + _U64.pack(u) + got.proof + cw).digest()
        return out

    # -- aggregation ---------------------------------------------------------------------
    def _closed(self, include: list[int] | None) -> tuple[list[int], np.ndarray, np.ndarray]:
        """The included users (sorted) and the sparse and dense aggregates over them; every
        other user that retrieved counts as silent (its folded part is recomputed and removed,
        its upload left out).  State is not changed; the result is kept for the same users
        until the next change (callers must not write to it)."""
        cfg = self._cfg()
        users = self._include(include, self._uploaded, cfg.round_id)
        if self._closed_cache is not None and self._closed_cache[0] == tuple(users):
            return self._closed_cache[1]
        inside = set(users)
        left_out = [u for u in self._absorbed if u not in inside]
        sparse = self._summed(users)
        silent = [p.keys for p in self._pending.values()] + [self._absorbed[u].keys for u in left_out]
        if silent:  # their folded part only: no check
            sparse -= self._evaluate(silent)[2]
        dense = self._dense.copy()
        for u in left_out:
            dense -= self._absorbed[u].dense
        closed = (users, sparse if cfg.layout == "full" else self._scatter(sparse), dense)
        self._closed_cache = (tuple(users), closed)
        return closed

    def included_users(self) -> list[int]:
        """Sorted ids of the users whose uploads the aggregate holds (``include=None``)."""
        return sorted(self._uploaded)

    def aggregate_share(self, include: list[int] | None = None) -> bytes:
        cfg = self._cfg()
        users, sparse, dense = self._closed(include)
        return frame(_NAME, "aggregate_share", self.party, cfg.round_id, users_bytes(users), array_bytes(sparse),
                     array_bytes(dense))

    def combine(self, peer_share: bytes, include: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        cfg = self._cfg()
        users, sparse, dense = self._closed(include)
        body = open_message(peer_share, _NAME, "aggregate_share", 1 - self.party, cfg.round_id,
                            _share_bytes(cfg, len(users)))
        count = _U64.unpack_from(body, 0)[0]
        peer_users = [_U64.unpack_from(body, 8 + 8 * i)[0] for i in range(len(users))]
        if count != len(users) or peer_users != users:
            raise ProtocolError("the two servers aggregated different sets of users")
        off = 8 + 8 * len(users)
        sparse1, off = read_array(body, off, cfg.dtype, (cfg.num_items, cfg.width))
        dense1, _ = read_array(body, off, cfg.dtype, (cfg.dense_size,))
        return reconstruct(sparse, sparse1), reconstruct(dense, dense1)


class SecEmbProtocol(Protocol):
    """Factory of SecEmb roles.

    Parameters
    ----------
    layout: ``"full"`` (the paper: ``m'`` keys over all ``m`` items) or ``"cuckoo"``
        (``B = ceil(expansion m')`` keys over small buckets; server work ~``3 m`` leaves per
        user instead of ``m' m``).
    relay: send identical bytes once (server 0 forwards them) and download one share.
    expansion: ``B / m'`` for the cuckoo layout (1.25 keeps insertion failures rare; larger
        values cost more keys).
    layout_seed: public seed of the cuckoo hash functions.
    backend: where servers evaluate batches of users (:mod:`secemb.protocols.backends`);
        serial by default.
    verify: verified uploads (on by default): devices send a check correction word per key
        and the servers compare per-user digests (:meth:`SecEmbServer.upload_digests`) before
        a user enters the aggregate; ``False`` is the unchecked protocol (benchmarks).
    """

    name = _NAME
    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=True, networked=True,
                                options=("backend", "verify"), local_options=("backend",),
                                central_dp=True)

    def __init__(
        self,
        layout: str = "full",
        relay: bool = False,
        expansion: float = 1.25,
        layout_seed: int = 0,
        backend: Backend | None = None,
        verify: bool = True,
    ) -> None:
        super().__init__(layout, relay, expansion, layout_seed)
        self.backend = backend
        self.verify = verify

    def spec(self) -> dict[str, Any]:
        """The shared options: ``verify`` only when off (a deployment that verifies, the
        default, announces the same protocol block as before verified uploads existed; one that
        does not tells its devices to send no check words)."""
        out = super().spec()
        if out.get("verify") is True:
            del out["verify"]
        return out

    def message_body_bytes(self, kind: str, rc: RoundConfig, *, party: int, num_users: int) -> int | None:
        """Exact body lengths (the aggregate share's with ``num_users`` users).  With relay,
        server 1 gets roots and seeds instead of keys, no upload, and the relay forwards."""
        roots_only = self.relay and party == 1
        if kind == "retrieval_request":
            return _roots_bytes(rc) if roots_only else request_bytes(rc, self.verify)
        if kind == "upload":
            return None if roots_only else _upload_bytes(rc, self.relay)
        if kind == "aggregate_share":
            return _share_bytes(rc, num_users)
        if not roots_only:
            return None  # the relay forwards all go to (or come from) server 1 in relay mode
        return {"relay_keys": _shared_bytes(rc, self.verify), "relay_answer": _answer_bytes(rc),
                "relay_upload": _rows_bytes(rc) + MAC_BYTES}[kind]

    def make_server(self, party: int) -> SecEmbServer:
        return SecEmbServer(party, relay=self.relay, verify=self.verify, backend=self.backend)

    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> SecEmbUser:
        return SecEmbUser(config, relay=self.relay, verify=self.verify, _rng=_rng)
