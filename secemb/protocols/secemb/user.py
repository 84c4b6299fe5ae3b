"""SecEmb's user role: one device's side of one round -- its retrieval keys (generated as a
batch for many devices), the check of the rows it gets back, and its upload."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar, cast

import numpy as np

from secemb import fss
from secemb.errors import InvalidParameters, ProtocolError, RetrievalTampered, SecembError
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG, unmask_slots
from secemb.fss.keys import HEADER_BYTES as KEY_HEADER_BYTES
from secemb.fss import sketchproof
from secemb.fss.rangeproof import prove
from secemb.fss.sketch import SKETCH_SEED_BYTES, device_inputs_many
from secemb.fss.tree import padded_leaves
from secemb.protocols.base import RoundConfig, UserRole, result_or_raise
from secemb.protocols.secemb.bounds import (
    CHALLENGE_BYTES,
    bound_params,
    context,
    contribution,
    dense_commitment,
    payload_share,
    projected,
    upload_vector,
)
from secemb.protocols.secemb.checks import bindings, half_tags, key_digests, seed_tags, suffix_tags
from secemb.protocols.secemb.relay import relay_masks_into, relay_prgs, upload_macs
from secemb.protocols.secemb.sizes import (
    DIGEST_BYTES,
    MAC_KEY_BYTES,
    NAME,
    SIGMA_BYTES,
    answer_bytes,
    key_params,
    reply_bytes,
    request_bytes,
    roots_bytes,
    sketch_params,
    tag_words,
    upload_bytes,
)
from secemb.protocols.wire import HEADER_BYTES, Framer, Opener, frame, frame_rows, little, read_view
from secemb.randomness import SEED_BYTES, RandomBytes, random_words, system_rng
from secemb.sharing import share

__all__ = ["SecEmbUser"]

T = TypeVar("T")


def _inverse_odd(x: np.ndarray) -> np.ndarray:
    """``x^{-1} mod 2^k`` of odd ring words (uint32/uint64 array): Newton's iteration
    ``y <- y (2 - x y)``, exact to 3 bits at ``y = x`` and doubling them each step."""
    y = x.copy()
    two = x.dtype.type(2)
    for _ in range(6):  # 3 -> 96 bits >= 64
        y *= two - x * y
    return y


def _sigma_column(rows: np.ndarray, sigmas: bytes | None) -> int:
    """Write each user's seed ``sigma`` (``sigmas``: n such 16-byte strings joined; verified
    uploads) into the last :data:`SIGMA_BYTES` of its row of ``rows``; where the fields
    before it end (``rows.shape[1]`` without a seed)."""
    if sigmas is None:
        return rows.shape[1]
    rows[:, -SIGMA_BYTES:] = np.frombuffer(sigmas, np.uint8).reshape(len(rows), SIGMA_BYTES)
    return rows.shape[1] - SIGMA_BYTES


def _request_rows(keys: fss.DPFKeys, cfg: RoundConfig, party: int, sigmas: bytes | None = None) -> np.ndarray:
    """The retrieval requests to server ``party`` of a batch's users, as the rows of one array
    uint8 (n, HEADER_BYTES + request_bytes [+ SIGMA_BYTES]): ``keys`` (each user's S consecutive
    ones) and, with verified uploads (to server 1), each user's seed ``sigma``
    (:func:`_sigma_column`); row ``j``'s ``tobytes()`` is user ``j``'s message."""
    n = len(keys) // cfg.slots
    size = request_bytes(cfg) + (0 if sigmas is None else SIGMA_BYTES)
    rows = frame_rows(NAME, "retrieval_request", party, cfg.round_id, size, n)
    end = HEADER_BYTES + KEY_HEADER_BYTES + cfg.slots * keys.params.key_bytes
    keys.to_rows(n, out=rows[:, HEADER_BYTES:end])
    _sigma_column(rows, sigmas)
    return rows


def _relay_rows(roots: np.ndarray, secrets_: bytes, digests: list[bytes], cfg: RoundConfig,
                sigmas: bytes | None = None) -> np.ndarray:
    """Server 1's relay retrieval requests of a batch's users as the rows of one array uint8
    (n, HEADER_BYTES + roots_bytes [+ SIGMA_BYTES]): each user's key roots (``roots`` uint64
    (n S, 2)), its mask seed, dense seed and MAC key (``secrets_``: n such byte strings joined),
    its key digest (``digests``) and, with verified uploads, its seed ``sigma``
    (:func:`_sigma_column`)."""
    n = len(digests)
    size = roots_bytes(cfg) + (0 if sigmas is None else SIGMA_BYTES)
    rows = frame_rows(NAME, "retrieval_request", 1, cfg.round_id, size, n)
    stop = _sigma_column(rows, sigmas) - HEADER_BYTES
    body = rows[:, HEADER_BYTES:]
    at = 16 * cfg.slots
    body[:, :at].view("<u8")[...] = roots.reshape(n, 2 * cfg.slots)
    body[:, at : stop - DIGEST_BYTES] = np.frombuffer(secrets_, np.uint8).reshape(n, -1)
    body[:, stop - DIGEST_BYTES : stop] = np.frombuffer(b"".join(digests), np.uint8).reshape(n, DIGEST_BYTES)
    return rows


def _one_round(users: Sequence[UserRole]) -> SecEmbUser:
    """The first of ``users``, once all are distinct SecEmb users of one round with one relay,
    verification and bound setting (a batch's precondition: a user listed twice would make two
    requests or uploads from one round's state, which its own calls refuse).

    Raises
    ------
    InvalidParameters: they are not.
    """
    first = users[0] if users else None
    if not isinstance(first, SecEmbUser) or any(
            not isinstance(u, SecEmbUser)
            or (u.config, u.relay, u.verify, u.bound_users) != (first.config, first.relay, first.verify,
                                                                first.bound_users)
            for u in users):
        raise InvalidParameters("a batch of SecEmb users needs SecEmb users of one round")
    if len({id(u) for u in users}) != len(users):
        raise InvalidParameters("a batch of SecEmb users lists a user twice")
    return first


def _by_own(users: Sequence[UserRole], args: Sequence[Any], method: str,
            batch: Callable[[list[SecEmbUser], list[Any]], list[T | Exception]]) -> list[T | Exception]:
    """Per user, ``batch`` of the users whose class runs :class:`SecEmbUser`'s ``method`` (one
    call for all of them), and the own ``method`` of every other user (a simulated malicious
    device that overrides it); in each user's place its result or its exception."""
    out: list[T | Exception | None] = [None] * len(users)
    own = [i for i, u in enumerate(users) if getattr(type(u), method) is getattr(SecEmbUser, method)]
    mine = set(own)
    if own:
        got = batch(cast("list[SecEmbUser]", [users[i] for i in own]), [args[i] for i in own])
        for i, result in zip(own, got, strict=True):
            out[i] = result
    for i, (user, arg) in enumerate(zip(users, args, strict=True)):
        if i not in mine:
            try:
                out[i] = getattr(user, method)(*arg)
            except Exception as exc:  # noqa: BLE001 - one user's refusal is its own result
                out[i] = exc
    return cast("list[T | Exception]", out)  # every entry is set above


def _request_slots(users: list[SecEmbUser], indices: Sequence[np.ndarray],
                   out: list[Any]) -> tuple[list[int], np.ndarray]:
    """The checked request slots of a batch's users (see :meth:`SecEmbUser.retrieval_request`),
    checked for all users at once where the check is on the values: the positions in ``users``
    of those whose indices pass and their slots, int64 (n, S); each refused user's error
    (:class:`InvalidParameters` for a bad shape or an item outside the domain, ``TypeError`` for
    indices that are not integers, :class:`ProtocolError` for a second request in the round) is
    put in its place of ``out``."""
    cfg = users[0].config
    shaped: list[int] = []
    arrays: list[np.ndarray] = []
    for i, (user, idx) in enumerate(zip(users, indices, strict=True)):
        got = np.asarray(idx)
        if got.shape != (cfg.slots,):
            out[i] = InvalidParameters(f"indices must have shape ({cfg.slots},), got {got.shape}")
        elif got.dtype.kind not in "iu":
            out[i] = TypeError(f"indices must be integers, got dtype {got.dtype}")
        elif user._state is not None:
            out[i] = ProtocolError("retrieval_request called twice in one round")
        else:
            shaped.append(i)
            arrays.append(got)
    if not arrays:
        return [], np.zeros((0, cfg.slots), np.int64)
    slots = np.stack(arrays, dtype=np.int64, casting="unsafe")  # as each one's astype(np.int64)
    outside = (slots < -1) | (slots >= cfg.num_items)
    refused = outside.any(axis=1)
    for j in np.flatnonzero(refused).tolist():
        out[shaped[j]] = InvalidParameters(f"item index {int(slots[j][outside[j]][0])} is outside the domain "
                                           f"[0, {cfg.num_items}) (or -1 for an empty slot)")
    if cfg.layout == "full":
        empty = (slots < 0).any(axis=1) & ~refused
        for j in np.flatnonzero(empty).tolist():
            out[shaped[j]] = InvalidParameters("the full layout has no empty slots (-1)")
        refused |= empty
    if not refused.any():
        return shaped, slots
    kept = np.flatnonzero(~refused)
    return [shaped[j] for j in kept.tolist()], slots[kept]


@lru_cache(maxsize=8)
def _sketch_sizes(cfg: RoundConfig) -> tuple[int, sketchproof.SketchParams]:
    """A round's padded domain ``mp`` of the keys' walk and its sketch proof's parameters (verified
    uploads), built once a config (a frozen, hashable value), not once a device: every device of
    a round's batch proves with them."""
    return padded_leaves(key_params(cfg)), sketch_params(cfg)


@dataclass(frozen=True)
class _Kept:
    """What a device keeps of its upload for its bound proof (bounded payloads): its party-0
    path keys, its aggregation correction words and uploaded rows (ring (S, w) each), its
    two dense shares (ring (P,) each) and its slots' items (int64 (S,): the full layout's key
    points)."""

    path0: fss.PathKeys
    cw: np.ndarray
    rows: np.ndarray
    dense0: np.ndarray
    dense1: np.ndarray
    items: np.ndarray


class SecEmbUser(UserRole):
    """One user's side of one SecEmb round.

    ``bound_users``: bounded payloads (:mod:`~secemb.protocols.secemb.bounds`) for a round of
    that many users, or ``None`` (off).

    Raises
    ------
    InvalidParameters: bounded payloads without verified uploads, off the 32-bit ring or for
        no valid number of users.
    """

    def __init__(self, config: RoundConfig, *, relay: bool = False, verify: bool = True,
                 bound_users: int | None = None, _rng: RandomBytes | None = None) -> None:
        self.config = config
        self.relay = relay
        self.verify = verify  # verified uploads: send sigma, prove the sketch, bind c_u to sigma
        if bound_users is not None and not verify:
            raise InvalidParameters("bounded payloads need verified uploads (verify=True)")
        self.bound_users = bound_users
        self._bound = None if bound_users is None else bound_params(config, bound_users)
        self._sigma: bytes | None = None  # verified uploads: server 1's proof seed, sent with the request
        self._alpha: np.ndarray | None = None  # verified uploads: int64 (S,), its keys' points, until the upload
        self._sketch_seed: bytes | None = None  # verified uploads: c_u, from the retrieval's reply(ies)
        self._digest: bytes | None = None  # bounded payloads: the key digest K (the proof's context)
        self._path0: fss.PathKeys | None = None  # bounded payloads: the party-0 path keys, until the upload
        self._kept: _Kept | None = None  # bounded payloads: from the upload until the proof
        self._rng = _rng or system_rng
        self._state: fss.GenState | None = None
        self._items: np.ndarray | None = None  # int64 (S,): the slots' items (-1: empty bucket)
        self._unmask: np.ndarray | None = None  # ring (S,): inverses of the secret odd retrieval payloads (0: empty)
        self._seeds: tuple[bytes, bytes] | None = None
        self._mac_key: bytes | None = None  # relay: server 1's one-time key for the upload's tag, until the upload
        self._tampered = False  # a retrieval answer failed its check: no upload this round

    @property
    def _real(self) -> np.ndarray | None:
        """Whether each request slot holds an item, bool (S,) (a fresh array: from the slots'
        items, -1 marking an empty bucket); ``None`` before a request."""
        return None if self._items is None else self._items >= 0

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

    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
        return result_or_raise(self.retrieval_requests([self], [indices], _rng=self._rng)[0])

    @classmethod
    def retrieval_requests(cls, users: Sequence[UserRole], indices: Sequence[np.ndarray], *,
                           _rng: RandomBytes | None = None) -> list[tuple[bytes, bytes] | Exception]:
        """The users' keys generated as one batch (one tree walk, one conversion, one
        serialization for all), from fresh OS randomness (``_rng``: a test's source); the
        users must be SecEmb users of one round with one relay setting."""
        first = _one_round(users)
        mine = cast("list[SecEmbUser]", list(users))
        cfg, relay = first.config, first.relay
        out: list[tuple[bytes, bytes] | Exception | None] = [None] * len(users)
        taken, slots = _request_slots(mine, indices, out)  # (n, S)
        alphas, placed = first._alphas(slots)
        for misplaced in np.flatnonzero(~placed).tolist():
            out[taken[misplaced]] = InvalidParameters("an item was assigned to a bucket that does not hold it")
        ok = [(i, mine[i]) for i, fits in zip(taken, placed.tolist(), strict=True) if fits]
        if ok:
            n, rng, params = len(ok), _rng or system_rng, key_params(cfg)
            if n < len(taken):
                slots, alphas = slots[placed], alphas[placed]
            p0, p1, state = fss.gen_path(alphas.reshape(-1), params.domain_size, _rng=rng)
            real = slots >= 0
            # each real slot retrieves beta T_alpha for a secret uniform odd beta (verified
            # retrieval, docs/security.md); an empty bucket's payload stays 0
            betas = np.where(real, random_words(rng, real.shape, cfg.dtype) | cfg.dtype.type(1), cfg.dtype.type(0))
            cw = fss.convert_gen(state, betas.reshape(-1, 1), ring_bits=cfg.ring_bits, tag=RETRIEVAL_TAG)
            unmask = _inverse_odd(betas)  # what each user multiplies its rows by (0 stays 0)
            # each user's messages written as rows of one array per server, field by field for all users
            rows0 = _request_rows(fss.DPFKeys(p0, cw, params), cfg, 0)
            bound = first._bound is not None
            sigmas = rng(SIGMA_BYTES * n) if first.verify else None  # verified uploads: server 1's proof seeds
            digests: list[bytes] = []
            if relay or bound:
                # the digests of the exact bytes server 0 forwards: the shared part of each user's
                # serialized keys (their header, then all after the roots)
                digests = key_digests(fss.DPFKeys.shared_header(params.domain_size, cfg.slots, params.payload_width,
                                                                params.ring_bits),
                                      rows0[:, HEADER_BYTES + KEY_HEADER_BYTES + 16 * cfg.slots :])
            if relay:
                direct = 2 * SEED_BYTES + MAC_KEY_BYTES
                secrets_ = rng(direct * n)
                rows1 = _relay_rows(p1.roots, secrets_, digests, cfg, sigmas)
            else:
                rows1 = _request_rows(fss.DPFKeys(p1, cw, params), cfg, 1, sigmas)
            for j, (i, user) in enumerate(ok):
                sl = slice(j * cfg.slots, (j + 1) * cfg.slots)
                # copies: a user keeps its own secret state, no view of the batch's (other users')
                user._state = fss.GenState(params.domain_size, state.leaf0[sl].copy(), state.leaf1[sl].copy())
                user._items, user._unmask = slots[j].copy(), unmask[j].copy()
                out[i] = (rows0[j].tobytes(), rows1[j].tobytes())
                if sigmas is not None:
                    user._sigma, user._alpha = sigmas[SIGMA_BYTES * j : SIGMA_BYTES * (j + 1)], alphas[j].copy()
                if bound:
                    user._digest = digests[j]
                    user._path0 = fss.PathKeys.concat([p0[sl]])  # a copy
                if relay:
                    own = secrets_[direct * j : direct * (j + 1)]
                    user._seeds = (own[:SEED_BYTES], own[SEED_BYTES : 2 * SEED_BYTES])
                    user._mac_key = own[2 * SEED_BYTES :]
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
        return result_or_raise(SecEmbUser._read([self], [(reply0, reply1)])[0])

    @classmethod
    def retrieval_results(cls, users: Sequence[UserRole],
                          replies: Sequence[tuple[bytes, bytes | None]]) -> list[np.ndarray | Exception]:
        """The users' rows read as one batch (one expansion of the relay masks, one computation
        of the rows' tags), each user's the same as its own :meth:`retrieval_result`; a user
        whose class overrides that method (a simulated malicious device) runs its own.  The
        users must be SecEmb users of one round with one relay setting."""
        return _by_own(users, replies, "retrieval_result", SecEmbUser._read)

    @staticmethod
    def _read(users: list[SecEmbUser], replies: list[tuple[bytes, bytes | None]]) -> list[np.ndarray | Exception]:
        """What :meth:`retrieval_result` returns or raises, for each of ``users`` (one round)."""
        first = _one_round(users)
        cfg = first.config
        shape = (cfg.slots, cfg.width + tag_words(cfg))
        size = reply_bytes(cfg, first.verify)
        # each reply's header checked against the one expected, framed once for the batch
        openers = (Opener(NAME, "retrieval_reply", 0, cfg.round_id, size),
                   Opener(NAME, "retrieval_reply", 1, cfg.round_id, size))
        at = answer_bytes(cfg)  # where the sketch seed (or half), then the other server's tag, follow the answer
        out: list[np.ndarray | Exception | None] = [None] * len(users)
        read: list[tuple[int, np.ndarray, np.ndarray | None]] = []
        tagged: list[tuple[int, memoryview]] = []  # relay, verified uploads: server 1's tag of each user's seed
        for i, (user, (reply0, reply1)) in enumerate(zip(users, replies, strict=True)):
            try:
                share0, share1, tag = user._answer_shares(reply0, reply1, shape, openers, at)
            except SecembError as exc:
                out[i] = exc
                continue
            read.append((i, share0, share1))
            if tag is not None:
                tagged.append((i, tag))
        if tagged:  # each seed's tag recomputed under the user's one-time relay key: the batch in one call
            bad = SecEmbUser._seed_tags_fail([users[i] for i, _ in tagged], [tag for _, tag in tagged])
            for (i, _), refused in zip(tagged, bad, strict=True):
                out[i] = refused
            read = [r for r in read if out[r[0]] is None]
        if read:
            ok = [users[i] for i, _, _ in read]
            # the answers (n, S, width + T) reconstructed user by user from the replies' bytes in
            # place: one pass, no copy of the shares first
            answers = np.empty((len(read), *shape), cfg.dtype)
            if first.relay:  # server 1's share is the mask of the user's seed: share 0 - mask, each mask as made
                drawn = cast("list[tuple[bytes, bytes]]", [u._seeds for u in ok])  # drawn by a relay request
                seeds = [s[0] for s in drawn]
                relay_masks_into(seeds, answers, [share0 for _, share0, _ in read], negate=True)
            else:
                for j, (_, share0, share1) in enumerate(read):
                    np.add(share0, cast("np.ndarray", share1), out=answers[j])  # both replies without relay
            for (i, _, _), got in zip(read, SecEmbUser._verified(ok, answers), strict=True):
                out[i] = got
        return cast("list[np.ndarray | Exception]", out)  # every entry is set above

    def _answer_shares(self, reply0: bytes, reply1: bytes | None, shape: tuple[int, int],
                       openers: tuple[Opener, Opener], at: int) -> tuple[np.ndarray, np.ndarray | None,
                                                                         memoryview | None]:
        """The two answer shares of the replies, ring ``shape`` each, read in place (views of the
        replies' bytes; the second ``None`` with relay: server 1's is the mask of the user's seed);
        ``openers``: the round's :class:`Opener` of server 0's and server 1's replies; ``at``: the
        answer's length (:func:`~secemb.protocols.secemb.sizes.answer_bytes`, found once a batch),
        after which the sketch seed (or half), then the other server's tag, follow.  With verified
        uploads the device's sketch seed ``c_u`` is kept -- after the answer in server 0's reply (relay),
        or the XOR of the halves after the answers in both (without relay) -- and checked against the
        other server's tag of it: without relay here (:meth:`_check_seed`), with relay by the caller,
        for a batch's users at once (:meth:`_seed_tags_fail`), from server 1's tag that this returns
        third (``None`` otherwise); a user whose check fails is marked tampered, which bars its upload
        and so its proof.

        Raises
        ------
        ProtocolError: no request this round, or a reply of server 1 where it sends none (or
            none where it does).
        InvalidMessage: a reply is malformed.
        RetrievalTampered: without relay, a half of the sketch seed fails the other server's tag (the
            user is marked so: it neither proves nor uploads this round).
        """
        cfg = self.config
        if self._state is None:
            raise ProtocolError("retrieval_result before retrieval_request")
        body0 = openers[0](reply0)
        first = read_view(body0, 0, cfg.dtype, shape)
        if self.relay:
            if reply1 is not None:
                raise ProtocolError("with relay, server 1 sends no retrieval reply")
            if not self.verify:
                return first, None, None
            self._sketch_seed = bytes(body0[at : at + SKETCH_SEED_BYTES])
            return first, None, body0[at + SKETCH_SEED_BYTES :]
        if reply1 is None:
            raise ProtocolError("missing server 1's retrieval reply")
        body1 = openers[1](reply1)
        if self.verify:
            halves = [bytes(body[at : at + SKETCH_SEED_BYTES]) for body in (body0, body1)]
            # server 1's reply vouches for server 0's half, server 0's for server 1's
            self._sketch_seed = bytes(a ^ b for a, b in zip(*halves, strict=True))
            self._check_seed(half_tags(cfg.round_id, (0, 1), halves),
                             [body1[at + SKETCH_SEED_BYTES :], body0[at + SKETCH_SEED_BYTES :]])
        return first, read_view(body1, 0, cfg.dtype, shape), None

    @staticmethod
    def _seed_tags_fail(users: list[SecEmbUser], got: list[memoryview]) -> list[RetrievalTampered | None]:
        """Relay, verified uploads: each user's check of the tag ``got[j]`` that server 1 made of its
        sketch seed (kept by :meth:`_answer_shares`), the tags recomputed under the users' one-time
        relay keys as one batch (:func:`~secemb.protocols.secemb.checks.seed_tags`) and compared by
        :meth:`_check_seed`: per user ``None``, or the :class:`RetrievalTampered` it raised (the user
        marked so)."""
        want = seed_tags([cast("bytes", u._mac_key) for u in users], users[0].config.round_id,
                         [cast("bytes", u._sketch_seed) for u in users])
        out: list[RetrievalTampered | None] = []
        for user, expected, tag in zip(users, want, got, strict=True):
            try:
                user._check_seed([expected], [tag])
                out.append(None)
            except RetrievalTampered as exc:
                out.append(exc)
        return out

    def _check_seed(self, expected: list[bytes], got: list[memoryview]) -> None:
        """Verified uploads: compare (in constant time) the tags the device computes of the sketch
        seed or halves it got with the tags the other server sent (``got``, in the same order).  A
        device never proves or uploads under a seed a server chose alone: server 0 (relay) cannot
        tag another ``c_u`` without the device's MAC key, a server (without relay) cannot replace
        the other server's tag of its half.

        Raises
        ------
        RetrievalTampered: a tag differs -- one of the servers altered the seed, a half or a tag
            (the device cannot tell which); the user is marked so and does not upload.
        """
        if all(hmac.compare_digest(e, g) for e, g in zip(expected, got, strict=True)):
            return
        self._tampered = True
        raise RetrievalTampered(
            f"round {self.config.round_id}: the sketch seed in the retrieval reply fails the other server's tag, a "
            "server altered the seed or its tag; this device neither proves nor uploads")

    @staticmethod
    def _verified(users: list[SecEmbUser], answers: np.ndarray) -> list[np.ndarray | Exception]:
        """Per user its rows of the reconstructed ``answers`` (ring (n, S, width + T), C-contiguous:
        ``beta_i T[alpha_i]`` plus any server's offset; read, not changed), unmasked by
        ``beta_i^{-1}``, ring (S, width) (its own array), once every real slot's tag checks
        against its row and every empty bucket's answer is zero; else :class:`RetrievalTampered`
        (and the user marked so).  One pass over the answers writes the rows, the suffixes the
        tags hash and the tags to compare (:func:`~secemb.fss.fused.unmask_slots`)."""
        cfg = users[0].config
        n = len(users)
        items = np.stack(cast("list[np.ndarray]", [u._items for u in users]))  # set with _state
        unmask = np.stack(cast("list[np.ndarray]", [u._unmask for u in users]))
        real_at = np.flatnonzero(items.reshape(-1) >= 0)
        suffix = np.empty((len(real_at), 8 + cfg.width * cfg.dtype.itemsize), np.uint8)  # u64 item || row
        tags = np.empty((len(real_at), tag_words(cfg)), cfg.dtype)
        rows = [np.empty((cfg.slots, cfg.width), cfg.dtype) for _ in users]
        filled_empty = unmask_slots(answers, unmask, items, rows, suffix, tags)
        wrong_tag = real_at[np.any(tags != suffix_tags(cfg.round_id, suffix, cfg.dtype), axis=1)]
        tampered = filled_empty | (np.bincount(wrong_tag // cfg.slots, minlength=n) > 0)
        results: list[np.ndarray | Exception] = []
        for user, rows_j, bad in zip(users, rows, tampered, strict=True):
            if not bad:
                results.append(rows_j)  # its own array: no view of the batch's (other users') rows
                continue
            user._tampered = True
            results.append(RetrievalTampered(
                f"round {cfg.round_id}: the retrieved rows failed their integrity check, a server altered its "
                "answer share; the rows are discarded and this device does not upload"))
        return results

    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes | None]:
        return result_or_raise(SecEmbUser._encode([self], [(rows, dense)])[0])

    @classmethod
    def uploads(cls, users: Sequence[UserRole],
                gradients: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[bytes, bytes | None] | Exception]:
        """The users' uploads encoded as one batch (one conversion of all their rows, one
        expansion of the relay's dense masks), each user's the same messages as its own
        :meth:`upload` (a user's dense shares from its own randomness, user by user); a user
        whose class overrides that method (a simulated malicious device) runs its own.  The
        users must be SecEmb users of one round with one relay setting."""
        return _by_own(users, gradients, "upload", SecEmbUser._encode)

    @staticmethod
    def _encode(users: list[SecEmbUser],
                gradients: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[bytes, bytes | None] | Exception]:
        """What :meth:`upload` returns or raises, for each of ``users`` (one round)."""
        first = _one_round(users)
        cfg = first.config
        out: list[tuple[bytes, bytes | None] | Exception | None] = [None] * len(users)
        ok: list[int] = []
        for i, (user, (rows, dense)) in enumerate(zip(users, gradients, strict=True)):
            try:
                user._check_upload(rows, dense)
                ok.append(i)
            except (SecembError, AttributeError) as exc:  # AttributeError: not an array
                out[i] = exc
        grads = np.concatenate([gradients[i][0] for i in ok]) if ok else None  # (n S, width), checked above
        if grads is not None:  # the last check, for all at once: rows of empty slots must be zero
            items = np.concatenate(cast("list[np.ndarray]", [users[i]._items for i in ok]))  # set with _state
            empty = np.flatnonzero(items < 0)
            real = np.flatnonzero(items >= 0)
            # whether an empty slot's row holds a nonzero word, from the fewer rows taken: the empty slots'
            # own, or (mostly empty slots: cuckoo) the real slots', which then hold fewer than all the words'
            if len(empty) <= len(real):
                nonzero = np.count_nonzero(np.take(grads, empty, axis=0)) > 0
            else:
                nonzero = np.count_nonzero(np.take(grads, real, axis=0)) < np.count_nonzero(grads)
            # positions in ok (the users are found only where a row is not zero: rare)
            filled = np.unique(empty[np.take(grads, empty, axis=0).any(axis=1)] // cfg.slots) if nonzero else empty[:0]
            for j in filled:
                out[ok[j]] = InvalidParameters("rows of empty slots must be zero")
            if filled.size:  # rare: keep the others' rows
                keep = np.setdiff1d(np.arange(len(ok)), filled)
                grads = grads.reshape(len(ok), cfg.slots, cfg.width)[keep].reshape(-1, cfg.width)
                ok = [ok[j] for j in keep]
        if not ok or grads is None:
            return cast("list[tuple[bytes, bytes | None] | Exception]", out)
        states = cast("list[fss.GenState]", [users[i]._state for i in ok])  # checked above
        state = fss.GenState(states[0].domain_size,
                             np.concatenate([s.leaf0 for s in states]), np.concatenate([s.leaf1 for s in states]))
        # the words written over the batch's own concatenation of the rows (no copy of them)
        cw = fss.convert_gen(state, grads, ring_bits=cfg.ring_bits, tag=AGGREGATION_TAG, overwrite_betas=True)
        if first.relay:
            drawn = cast("list[tuple[bytes, bytes]]", [users[i]._seeds for i in ok])  # drawn by a relay request
            masks = relay_prgs([s[1] for s in drawn], (cfg.dense_size,), cfg.dtype)
        cw_le = np.ascontiguousarray(cw, cfg.dtype.newbyteorder("<"))  # the wire's byte order (no copy on LE hosts)
        # every user's messages of one layout: each server's header packed once for the batch
        bound, verify = first._bound is not None, first.verify
        to0 = Framer(NAME, "upload", 0, cfg.round_id,
                     upload_bytes(cfg, first.relay, 0, verify=verify, commit=bound and not first.relay))
        to1 = Framer(NAME, "upload", 1, cfg.round_id, upload_bytes(cfg, False, 1, verify=verify))
        proofs = SecEmbUser._sketch_proofs([users[i] for i in ok], states, state) if verify else [(b"", b"")] * len(ok)
        if first.relay:  # server 1's dense share is the mask of the user's seed, server 0's the rest: for all at once
            shares0 = np.stack([gradients[i][1] for i in ok])
            np.subtract(shares0, masks, out=shares0)
            shares0_le = np.ascontiguousarray(shares0, cfg.dtype.newbyteorder("<"))  # as little() gives each row
        # each user's words, MACed and framed, not copied
        owns = [cw_le[j * cfg.slots : (j + 1) * cfg.slots].data.cast("B") for j in range(len(ok))]
        if first.relay:
            # each tag under the user's one-time MAC key (drawn with the seeds), over its words and, verified
            # uploads, tau after them, as forwarded: the batch's sub-keys in one call (upload_macs)
            tags = upload_macs([cast("bytes", users[i]._mac_key) for i in ok], cfg.round_id,
                               [(own, tau) for own, (_, tau) in zip(owns, proofs, strict=True)])
        for j, i in enumerate(ok):
            user, dense = users[i], gradients[i][1]
            pi0, tau = proofs[j]
            own = owns[j]
            user._state = None  # one upload per round
            user._mac_key = None  # the relay's one-time MAC key tagged this upload only: dropped with the state
            if first.relay:
                d0, d1 = shares0[j], masks[j]
                out[i] = to0(own, shares0_le[j].data, tau, tags[j], pi0), None
            else:
                d0, d1 = share(dense, _rng=user._rng)
                # bounded payloads: server 0 gets a commitment to d1, so that d1 is fixed before its challenge
                commit = b"" if not bound else dense_commitment(cfg.round_id, cast("bytes", user._sigma), d1)
                out[i] = to0(own, little(d0), pi0, commit), to1(own, little(d1), tau)
            if user._path0 is not None:  # bounded payloads: what the proof needs (copies: no view of the batch's)
                user._kept = _Kept(user._path0, cw[j * cfg.slots : (j + 1) * cfg.slots].copy(),
                                   gradients[i][0].copy(), d0.copy(), d1.copy(),
                                   cast("np.ndarray", user._items).copy())
                user._path0 = None
        return cast("list[tuple[bytes, bytes | None] | Exception]", out)  # every entry is set above

    def bound_proof(self, challenge: bytes) -> bytes:
        """The device's bound proof (bounded payloads, :mod:`~secemb.protocols.secemb.bounds`)
        for server 0's ``challenge`` (16 bytes, :meth:`SecEmbServer.challenge`): the range
        proof's message to server 0 (:func:`~secemb.fss.rangeproof.prove`, ``seed_1`` the
        ``sigma`` server 1 got with the request) that the :data:`~secemb.protocols.secemb.bounds.ROWS`
        projections under ``challenge`` of its contribution and dense gradient are small, framed as
        a ``bound_proof`` message to server 0: in the cuckoo layout each key's payload, in the full
        layout what its keys add to each row (:func:`~secemb.protocols.secemb.bounds.contribution`).
        Once a round (what it kept of the upload is dropped).

        Raises
        ------
        ProtocolError: bounded payloads are off, or no upload to prove (none yet, or proved).
        InvalidParameters: ``challenge`` is not 16 bytes, or the upload is not in the bound (an
            honest device that clipped it fails with probability below ``2^-52`` at the sizes of
            docs/security.md; at 10,000 users a round below ``2^-50`` while it fills at most about
            36,000 (cuckoo) or 145,000 (full) coordinates: docs/security.md, "Honest devices pass").
        """
        cfg = self.config
        if self._bound is None:
            raise ProtocolError("bounded payloads are off: no bound proof")
        if not isinstance(challenge, bytes) or len(challenge) != CHALLENGE_BYTES:
            raise InvalidParameters(f"a bound challenge is {CHALLENGE_BYTES} bytes")
        kept, self._kept = self._kept, None
        if kept is None:
            raise ProtocolError("bound_proof before the upload, or twice")
        if cfg.layout == "full":  # per row: the keys' payloads placed at their points, summed (docs/security.md)
            s0 = contribution(cfg, 0, kept.path0, kept.cw)
            whole = np.zeros_like(s0)
            np.add.at(whole, kept.items, kept.rows)
        else:  # per key: its payload
            s0, whole = payload_share(cfg, 0, kept.path0, kept.cw), kept.rows
        x = upload_vector(np.stack([s0, whole - s0]), np.stack([kept.dense0, kept.dense1]))
        a, b = projected([challenge] * 2, x)
        msg0, _ = prove(self._bound, a, b, context(cfg.round_id, challenge, cast("bytes", self._digest)),
                        seed_1=self._sigma, _rng=self._rng)
        return frame(NAME, "bound_proof", 0, cfg.round_id, msg0)

    def _sketch_proof(self, state: fss.GenState) -> tuple[bytes, bytes]:
        """Verified uploads: server 0's share ``pi0`` of the device's sketch proof and its binding
        ``tau``.  The proof (:func:`~secemb.fss.sketchproof.prove`, server 1's share the expansion
        of ``sigma``) shows that every key's sketch ``x_k = (A, B, C)`` under the seed ``c_u`` the
        reply(ies) gave, computed from both parties' leaf words at its point
        (:func:`~secemb.fss.sketch.device_inputs`; ``state``: the keys' generation state), has
        ``A^2 = B C``; ``tau`` (:func:`~secemb.protocols.secemb.checks.binding`) binds ``c_u`` to
        ``sigma``.  The points are dropped."""
        return SecEmbUser._proved([self], state.leaf0[None], state.leaf1[None])[0]

    @staticmethod
    def _sketch_proofs(users: list[SecEmbUser], states: list[fss.GenState],
                       batch: fss.GenState) -> list[tuple[bytes, bytes]]:
        """Per user (one round's, verified uploads), what its :meth:`_sketch_proof` returns for its
        keys' generation state ``states[j]`` (``batch``: theirs concatenated, user ``j``'s leaves
        its ``j``-th S rows): one batch (:meth:`_proved`) for the users whose class runs
        :class:`SecEmbUser`'s, then the own method of every other user (a simulated malicious
        device that overrides it)."""
        out: list[tuple[bytes, bytes] | None] = [None] * len(users)
        own = [j for j, u in enumerate(users) if type(u)._sketch_proof is SecEmbUser._sketch_proof]
        if own:
            shape = (len(users), users[0].config.slots, 2)
            leaf0, leaf1 = batch.leaf0.reshape(shape), batch.leaf1.reshape(shape)
            if len(own) < len(users):
                leaf0, leaf1 = leaf0[own], leaf1[own]
            for j, got in zip(own, SecEmbUser._proved([users[j] for j in own], leaf0, leaf1), strict=True):
                out[j] = got
        for j, user in enumerate(users):
            if out[j] is None:
                out[j] = user._sketch_proof(states[j])
        return cast("list[tuple[bytes, bytes]]", out)  # every entry is set above

    @staticmethod
    def _proved(users: list[SecEmbUser], leaf0: np.ndarray, leaf1: np.ndarray) -> list[tuple[bytes, bytes]]:
        """:meth:`_sketch_proof` of each of ``users`` (one round's) as one batch, user ``j``'s keys'
        leaf words ``leaf0[j]``, ``leaf1[j]`` (uint64 (n, S, 2) each): their sketch inputs
        (:func:`~secemb.fss.sketch.device_inputs_many`), proofs
        (:func:`~secemb.fss.sketchproof.prove_many`, each device's wire seeds from its own ``_rng``)
        and bindings (:func:`~secemb.protocols.secemb.checks.bindings`) each in one call; the
        points are dropped."""
        cfg = users[0].config
        seeds = cast("list[bytes]", [u._sketch_seed for u in users])
        sigmas = cast("list[bytes]", [u._sigma for u in users])
        alphas = np.stack(cast("list[np.ndarray]", [u._alpha for u in users]))  # int64 (n, S)
        for u in users:
            u._alpha = None
        mp, params = _sketch_sizes(cfg)
        xs = device_inputs_many(seeds, mp, alphas, leaf0, leaf1)
        pi0s = sketchproof.prove_many(params, xs, seeds, sigmas, [u._rng for u in users])
        return list(zip(pi0s, bindings(cfg.round_id, seeds, sigmas), strict=True))

    def _check_upload(self, rows: np.ndarray, dense: np.ndarray) -> None:
        """Refuse an upload this user cannot make: after a tampered retrieval, before a request
        or twice, or gradients of the wrong dtype or shape (rows for empty slots: refused by
        :meth:`_encode`, for a batch's users at once, once these checks pass).

        Raises
        ------
        ProtocolError, InvalidParameters: as said.
        """
        cfg = self.config
        if self._tampered:
            raise ProtocolError("the retrieval failed its integrity check: no upload this round")
        if self._state is None:
            raise ProtocolError("upload before retrieval_request")
        if self.verify and self._sketch_seed is None:
            raise ProtocolError("upload before the retrieval's reply")
        if rows.dtype != cfg.dtype or rows.shape != (cfg.slots, cfg.width):
            raise InvalidParameters(
                f"rows must be {cfg.dtype} of shape ({cfg.slots}, {cfg.width}), got {rows.dtype} {rows.shape}"
            )
        if dense.dtype != cfg.dtype or dense.shape != (cfg.dense_size,):
            raise InvalidParameters(
                f"dense must be {cfg.dtype} of shape ({cfg.dense_size},), got {dense.dtype} {dense.shape}"
            )
