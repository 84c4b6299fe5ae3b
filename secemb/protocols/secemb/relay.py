"""SecEmb's relay (``relay=True``): the user sends every byte both servers would receive
identically only once; server 0 forwards to server 1 what is server 1's, authenticated by the
device (docs/security.md, "A deviating server").  Here: the relay server
(:class:`SecEmbRelayServer`, the relay steps), the seeded arrays (server 1's answer mask and
dense share), the upload's MAC and what server 1 gets directly from the device."""

from __future__ import annotations

import hmac
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import cast

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from secemb.errors import InvalidKey, InvalidMessage, InvalidParameters, ProtocolError, RelayTampered, SecembError
from secemb.fss.convert import convert, convert_accumulate, convert_add
from secemb.protocols.base import RelayRole, RoundConfig, result_or_raise
from secemb.fss.hashing import row_bytes
from secemb.protocols.secemb.checks import key_digests, relay_subkey, relay_subkeys, seed_tags
from secemb.protocols.secemb.server import Request, SecEmbServer, sift, stacked
from secemb.protocols.secemb.sizes import (
    BIND_BYTES,
    DIGEST_BYTES,
    MAC_KEY_BYTES,
    NAME,
    SIGMA_BYTES,
    U64,
    answer_bytes,
    relay_answer_bytes,
    relay_upload_bytes,
    reply_bytes,
    roots_bytes,
    rows_bytes,
    shared_bytes,
    tag_words,
)
from secemb.framing import HEADER_BYTES
from secemb.protocols.wire import Framer, Opener, check_user, little, read_array, read_view
from secemb.randomness import SEED_BYTES

__all__ = ["RELAY_TAG", "Direct", "SecEmbRelayServer", "parse_roots", "parse_roots_many", "relay_masks_into",
           "relay_prg", "relay_prg_sum", "relay_prgs", "upload_mac", "upload_macs"]

#: the upload MAC's domain; HMAC-SHA256's tags (before session 22) had ``b"secemb-relay-upload"``,
#: so neither MAC's tag verifies as the other's
_UPLOAD_MAC_DOMAIN = b"secemb-relay-upload-gmac"
#: GCM's nonce for the upload MAC: fixed, as each key tags one message (:func:`upload_mac`)
_UPLOAD_MAC_NONCE = bytes(12)

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
    ring_bits = 8 * np.dtype(dtype).itemsize
    return convert(_seed_words(seeds), math.prod(shape), ring_bits, RELAY_TAG).reshape(len(seeds), *shape)


def relay_masks_into(seeds: Sequence[bytes], dst: Sequence[np.ndarray] | np.ndarray,
                     src: Sequence[np.ndarray] | np.ndarray | None = None, *, negate: bool = False) -> None:
    """``dst[i] = src[i] + relay_prg(seeds[i])`` (``-`` with ``negate``) at the arrays' shape, for
    every seed (``src`` ``None``: added into ``dst`` in place): each mask added as it is expanded
    (:func:`~secemb.fss.convert.convert_add`), none held whole, none written into an array of
    masks (what :func:`relay_prgs` returns).  ``dst``: writeable C-contiguous ring arrays of one
    dtype and shape, or one such array (n, ...) whose rows they are (a batch's, checked once),
    ``src`` arrays of theirs (server 1's relay answers: its shares plus the masks; a device's
    reconstruction: server 0's reply minus the mask).

    Raises
    ------
    InvalidParameters: a seed is not 16 bytes, or arrays :func:`~secemb.fss.convert.convert_add`
        refuses (before anything is written).
    """
    convert_add(_seed_words(seeds), RELAY_TAG, dst, src, negate=negate)


def relay_prg_sum(seeds: Sequence[bytes], size: int, dtype: np.dtype) -> np.ndarray:
    """The ring sum of :func:`relay_prg` of each seed at shape ``(size,)``: ring (size,), every
    expansion added in as it is made, in one pass over the seeds
    (:func:`~secemb.fss.convert.convert_accumulate`), none of them held (server 1's dense
    shares of a batch of uploads: one conversion call, not one per user)."""
    total = np.zeros((1, size), dtype)
    words = _seed_words(seeds)
    if len(words):
        convert_accumulate(words, RELAY_TAG, total, 0)
    return total[0]


def _seed_words(seeds: Sequence[bytes]) -> np.ndarray:
    """The 16-byte relay seeds as leaf words, uint64 (len(seeds), 2).

    Raises
    ------
    InvalidParameters: a seed is not 16 bytes.
    """
    if any(len(seed) != SEED_BYTES for seed in seeds):
        raise InvalidParameters(f"a relay seed is {SEED_BYTES} bytes, got {[len(seed) for seed in seeds]}")
    return np.frombuffer(b"".join(seeds), "<u8").reshape(len(seeds), 2).astype(np.uint64)


def upload_mac(key: bytes, round_id: int, cw: bytes | memoryview | tuple[bytes | memoryview, ...]) -> bytes:
    """The relay's one-time tag of an upload's correction words and, with verified uploads, the
    binding ``tau`` after them (``cw``: both, as the forward holds them, or a tuple of parts that
    concatenate to them -- the device's words and its ``tau``, copied once, into the associated
    data, not joined first): GMAC, the 16-byte tag of
    AES-128-GCM under ``k_mac = relay_subkey(key, "upload-gmac")`` (the first 16 bytes of
    ``HMAC-SHA256(key, b"secemb-relay-subkey-upload-gmac")``,
    :func:`~secemb.protocols.secemb.checks.relay_subkey`) with the all-zero 96-bit nonce, an empty
    plaintext and the associated data ``b"secemb-relay-upload-gmac" || u64 round_id || cw``
    (:data:`~secemb.protocols.secemb.sizes.MAC_BYTES`).  ``key`` is the device's one-time relay key,
    whose other sub-key keys the sketch seed's tag (:func:`~secemb.protocols.secemb.checks.seed_tag`):
    no key serves two primitives.

    A one-time MAC: the fixed nonce is safe only because a key tags one message.  Two tags under
    one key would give away GHASH's key ``H = AES_k_mac(0^128)`` and with it a forgery of any words;
    one tag hides ``H`` behind the pad ``AES_k_mac(nonce || 1)``.  The key (:data:`MAC_KEY_BYTES`) is
    drawn fresh per device and round with the relay seeds and sent only to server 1 on the device's
    own channel; the device tags once with it (``SecEmbUser`` drops the key with its upload state:
    a second upload in the round is refused before any tag), and server 1 only verifies
    (:meth:`SecEmbRelayServer.relay_upload_many`, in constant time).  Forgery, for server 0 that saw
    one tagged upload: at most ``(ceil(len(aad) / 16) + 1) / 2^128`` per attempt (about 2^-116 for
    ML-100K's 65 KB of words) plus AES-128's PRP advantage and HMAC-SHA256's PRF advantage; server 1
    refuses a failing forward (``RelayTampered``; the node raises ``relay_tampered`` and refuses the
    device's later forwards).

    Raises
    ------
    InvalidParameters: ``key`` is not :data:`MAC_KEY_BYTES` bytes (:func:`relay_subkey`).
    """
    return _gmac(relay_subkey(key, "upload-gmac"), round_id, cw)


def upload_macs(keys: Sequence[bytes], round_id: int,
                cws: Sequence[bytes | memoryview | tuple[bytes | memoryview, ...]]) -> list[bytes]:
    """:func:`upload_mac` of each device's one-time relay key ``keys[i]`` and its words ``cws[i]``
    (a round's batch of uploads: the devices' tags, or server 1's check of a range's forwards), the
    same tags: the GMAC sub-keys derived as one :func:`~secemb.protocols.secemb.checks.relay_subkeys`
    batch (one compiled HMAC call, not a Python HMAC a key), then one GMAC a key.

    Raises
    ------
    InvalidParameters: the lists differ in length, or a key is not :data:`MAC_KEY_BYTES` bytes.
    """
    if len(keys) != len(cws):
        raise InvalidParameters(f"upload MACs take a key an upload: {len(keys)} keys, {len(cws)} uploads")
    if not cws:
        return []
    subkeys = row_bytes(relay_subkeys(keys, "upload-gmac"))
    return [_gmac(subkey, round_id, cw) for subkey, cw in zip(subkeys, cws, strict=True)]


def _gmac(subkey: bytes, round_id: int, cw: bytes | memoryview | tuple[bytes | memoryview, ...]) -> bytes:
    """The upload's GMAC under its sub-key ``subkey`` (16 bytes; :func:`upload_mac`)."""
    # one copy of the words into the associated data: cheaper than GCM's incremental interface
    parts = cw if isinstance(cw, tuple) else (cw,)
    return AESGCM(subkey).encrypt(_UPLOAD_MAC_NONCE, b"", b"".join((_UPLOAD_MAC_DOMAIN, U64.pack(round_id), *parts)))


def _digests(rows: np.ndarray) -> list[bytes]:
    """SHA-256 of each row of ``rows`` (uint8): a range of a batch's forwarded key parts (their
    key digests, :func:`~secemb.protocols.secemb.checks.key_digests` with no header)."""
    return key_digests(b"", rows)


def _words(data: bytes | memoryview, offset: int, config: RoundConfig) -> np.ndarray:
    """The upload's correction words (ring (S, w)) at ``offset`` of ``data``, read in place
    (read-only; a copy only on a big-endian host): for immutable ``data``."""
    count = config.slots * config.width
    view = np.frombuffer(data, config.dtype.newbyteorder("<"), count, offset).reshape(config.slots, config.width)
    return view.astype(config.dtype, copy=False)


@dataclass(frozen=True)
class Direct:
    """Server 1, relay: what a user sent it directly (over its own authenticated channel)."""

    roots: bytes  # its key batch's roots, 16 S
    mask_seed: bytes  # expands to the mask of its retrieval answer
    dense_seed: bytes  # expands to its share of the dense gradient
    mac_key: bytes  # authenticates the upload's correction words server 0 forwards
    digest: bytes  # SHA-256 of the key part server 0 forwards
    sigma: bytes | None = None  # verified uploads: the seed of its proof shares


def parse_roots(message: bytes, config: RoundConfig, *, sigma: bool = False) -> Direct:
    """Server 1: a relay request's roots, seeds, MAC key and forwarded-part digest (and, with
    ``sigma``, verified uploads, the proof seed after them).

    Raises
    ------
    InvalidMessage: the message is malformed, of another round or party, or a root's control
        bit is not server 1's.
    """
    return result_or_raise(parse_roots_many([message], config, sigma=sigma)[0])


def parse_roots_many(messages: Sequence[bytes], config: RoundConfig, *,
                     sigma: bool = False) -> list[Direct | SecembError]:
    """:func:`parse_roots` of many requests: each header checked, the roots' control bits of
    all checked as one array; per message its :class:`Direct` or the error that refuses it."""
    out: list[Direct | SecembError | None] = [None] * len(messages)
    size = roots_bytes(config) + (SIGMA_BYTES if sigma else 0)
    bodies: list[memoryview] = []
    where: list[int] = []
    opener = Opener(NAME, "retrieval_request", 1, config.round_id, size)
    for i, message in enumerate(messages):
        try:
            bodies.append(opener(message))
            where.append(i)
        except SecembError as exc:
            out[i] = exc
    blob = b"".join(bodies)
    ok = np.all(np.frombuffer(blob, np.uint8).reshape(len(bodies), size)[:, : 16 * config.slots : 16] & 1,
                axis=1).tolist()
    # the fields' ends in a body: roots, mask seed, dense seed, MAC key, digest
    e0, e1, e2, e3, e4 = accumulate([16 * config.slots, SEED_BYTES, SEED_BYTES, MAC_KEY_BYTES, DIGEST_BYTES])
    for j, i in enumerate(where):
        if not ok[j]:
            out[i] = InvalidMessage("retrieval_request: root control bits must equal the party")
            continue
        at = j * size
        out[i] = Direct(blob[at : at + e0], blob[at + e0 : at + e1], blob[at + e1 : at + e2], blob[at + e2 : at + e3],
                        blob[at + e3 : at + e4], blob[at + e4 : at + size] if sigma else None)
    return cast("list[Direct | SecembError]", out)  # every entry is set above


class SecEmbRelayServer(SecEmbServer, RelayRole):
    """Server ``party`` of SecEmb with relay: the retrieval and upload of :class:`SecEmbServer`
    with server 0 forwarding to server 1 what is server 1's (the relay steps of
    :class:`~secemb.protocols.base.RelayRole`).  Server 1 gets a user's roots, seeds, MAC key
    and digest directly (:func:`parse_roots`) and evaluates the keys server 0 forwards only if
    they match the digest; it absorbs forwarded correction words only if their MAC verifies."""

    relay = True

    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        super().begin_round(config, table)
        self._direct_of: dict[int, Direct] = {}  # server 1: retrieved users' direct messages
        self._awaiting: dict[int, Direct] = {}  # server 1: direct messages of unevaluated users
        # server 0: own shares and (verified uploads) the user's sketch seed, for completion
        self._answers: dict[int, tuple[np.ndarray, bytes]] = {}
        # server 0: the requests relay_forwards parsed, by user, for the evaluation of the same bytes
        self._forwarded: dict[int, tuple[bytes, Request]] = {}
        # server 0: the round's forwards to server 1 (a user's key part; its upload's words and tag)
        self._keys_framer = Framer(NAME, "relay_keys", 1, config.round_id, shared_bytes(config))
        words = rows_bytes(config)
        forward = relay_upload_bytes(config, self.verify)
        self._upload_framer = Framer(NAME, "relay_upload", 1, config.round_id, forward)
        # where an upload's words end, and where what follows them in the forward (the binding, the
        # tag) starts and ends (after the dense share)
        tail = words + config.dense_size * config.dtype.itemsize
        self._upload_split = (words, tail, tail + forward - words)

    def _check_new(self, user_id: int) -> None:
        super()._check_new(user_id)
        if user_id in self._awaiting:
            raise ProtocolError(f"user {user_id} already retrieved in round {self._cfg().round_id}")

    def evaluate_retrieval_many(
        self, requests: list[tuple[int, bytes]]
    ) -> Callable[[], list[bytes | None | SecembError]]:
        """Server 0: as :meth:`SecEmbServer.evaluate_retrieval_many`, each reply the forward of
        the user's key part to server 1 (:meth:`_reply`).  Server 1: each request's roots and
        seeds, kept by ``commit()`` until server 0 forwards the keys (nothing is evaluated; each
        reply ``None``)."""
        if self.party == 0:
            return super().evaluate_retrieval_many(requests)
        cfg = self._cfg()
        out: list[bytes | None | SecembError] = [None] * len(requests)

        def take(user_id: int, got: Direct | SecembError, seen: set[int]) -> Direct:
            if user_id in seen:
                raise ProtocolError(f"user {user_id} already retrieved in round {cfg.round_id}")
            self._check_new(user_id)
            if not isinstance(got, Direct):
                raise got
            return got

        parsed = parse_roots_many([m for _, m in requests], cfg, sigma=self.verify)
        users, _, directs = sift([(u, got) for (u, _), got in zip(requests, parsed, strict=True)], out, take)
        roots = dict(zip(users, directs, strict=True))

        def commit() -> list[bytes | None | SecembError]:
            if self.config is not cfg:
                raise ProtocolError(f"round {cfg.round_id} ended while its retrievals were evaluated")
            for u in roots:
                self._check_new(u)
            self._awaiting.update(roots)
            self._sigmas.update({u: d.sigma for u, d in roots.items() if d.sigma is not None})
            return out

        return commit

    def _reply(self, user_id: int, request: Request, answers: np.ndarray, seed_part: bytes) -> bytes:
        """Server 0: keep the user's answer shares and sketch seed for :meth:`complete_retrieval`;
        the forward."""
        self._answers[user_id] = (answers, seed_part)
        return cast("bytes", request.forward)  # server 0 with relay: every request has one

    def handle_upload_many(self, uploads: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """Server 0: absorb the uploads (:meth:`SecEmbServer.handle_upload_many`); per upload the
        correction words to forward, exactly as received, with the tag only server 1 can check
        (:meth:`_upload_words`).  Users upload to server 0 only: server 1 refuses each."""
        if self.party == 0:
            return super().handle_upload_many(uploads)
        out: list[bytes | None | SecembError] = []
        for user_id, _ in uploads:
            try:
                check_user(user_id)
                out.append(ProtocolError("with relay, users upload to server 0 only"))
            except SecembError as exc:
                out.append(exc)
        return out

    def _upload_words(self, body: memoryview) -> tuple[np.ndarray, bytes | None]:
        """Server 0: frame the forward (the words and their tag as received); the words are kept
        as its view (immutable bytes of little more than them), not copied again."""
        cfg = self._cfg()
        words, tail, end = self._upload_split
        forward = self._upload_framer(body[:words], body[tail:end])
        return _words(forward, HEADER_BYTES, cfg), forward

    def relay_forwards(self, requests: list[tuple[int, bytes]]) -> list[bytes | SecembError] | None:
        """Server 0, relay: each request's shared key part framed for server 1 (the bytes
        ``commit()`` returns for it), or the error that refuses it; ``None`` at server 1."""
        if self.party != 0:
            return None
        out: list[bytes | SecembError] = []
        self._forwarded = {}
        for (user_id, message), got in zip(requests, self._parse_requests([m for _, m in requests]), strict=True):
            try:
                user_id = check_user(user_id)
                if isinstance(got, SecembError):
                    raise got
                out.append(cast("bytes", got.forward))
                self._forwarded[user_id] = (message, got)
            except SecembError as exc:
                out.append(exc)
        return out

    def _parse_batch(self, requests: list[tuple[int, bytes]]) -> list[Request | SecembError]:
        """Server 0: :meth:`_parse_requests` of the requests' messages, taking those
        :meth:`relay_forwards` parsed just before (the same user and bytes) from its result
        instead of parsing them again; that result is dropped."""
        forwarded, self._forwarded = self._forwarded, {}
        out: list[Request | SecembError | None] = [None] * len(requests)
        todo: list[int] = []
        for i, (user_id, message) in enumerate(requests):
            hit = forwarded.get(user_id) if type(user_id) is int else None
            if hit is not None and hit[0] == message:
                out[i] = hit[1]
            else:
                todo.append(i)
        if todo:  # (usually none: every request was forwarded)
            for i, got in zip(todo, self._parse_requests([requests[i][1] for i in todo]), strict=True):
                out[i] = got
        return cast("list[Request | SecembError]", out)  # every entry is set above

    def _forward_of(self, shared_header: bytes, rest: np.ndarray) -> bytes | None:
        """Server 0: the relay_keys message of a request (its shared key part: ``rest`` holds it
        after the part's header); server 1 forwards nothing."""
        if self.party != 0:
            return None
        return self._keys_framer(shared_header, rest.data)

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
        if self.party != 1:
            raise ProtocolError("relay_retrieval is server 1's step in relay mode")
        out: list[bytes | SecembError] = [b""] * len(forwards)
        shared_len = shared_bytes(cfg)
        opened: list[int | SecembError] = []  # a forward's row of ``rows``, or the error that refuses it
        bodies: list[memoryview] = []
        opener = Opener(NAME, "relay_keys", 1, cfg.round_id, shared_len)
        for _, message in forwards:
            try:
                bodies.append(opener(message))
                opened.append(len(bodies) - 1)
            except SecembError as exc:
                opened.append(exc)
        rows = np.empty((len(bodies), shared_len), np.uint8)
        # the forwarded parts copied to their rows and hashed, in ranges of rows on the backend's
        # threads (both without the GIL)
        hashed = [d for part in self._map_spans(lambda span: _digests(stacked(bodies[span[0] : span[1]],
                                                                              rows[span[0] : span[1]])),
                                                self._spans(len(bodies))) for d in part]

        def take(user_id: int, i: int, seen: set[int]) -> tuple[int, int, bytes]:
            """Forward ``i`` checked: (its index, its row, the user's roots), parsed as one batch below."""
            if user_id not in self._awaiting or user_id in seen:
                raise ProtocolError(f"no retrieval request of user {user_id} to complete")
            row = opened[i]
            if not isinstance(row, int):
                raise row
            direct = self._awaiting[user_id]
            if not hmac.compare_digest(hashed[row], direct.digest):
                raise RelayTampered(f"relay_keys of round {cfg.round_id}: the forwarded key part differs from "
                                    "the one the device committed to (server 0 altered it, or the device sent the "
                                    "servers parts that differ); not evaluated")
            return i, row, direct.roots

        users, where, parts = sift([(u, i) for i, (u, _) in enumerate(forwards)], out, take)
        batch = self._empty_batch(len(parts))
        taken = [row for _, row, _ in parts]
        kept = rows if taken == list(range(len(rows))) else rows[taken]
        roots = np.frombuffer(b"".join([r for _, _, r in parts]), np.uint8).reshape(len(parts), 16 * cfg.slots)
        digests = [hashed[row] for row in taken]

        def parse(span: tuple[int, int]) -> list[Request | InvalidKey]:
            """A range of the taken forwards' requests, their keys written to their blocks of
            ``batch`` (block ``j``: ``parts[j]``)."""
            lo, hi = span
            return self._requests(kept[lo:hi], list(range(lo, hi)), batch, roots[lo:hi], digests[lo:hi])

        parsed = [q for part in self._map_spans(parse, self._spans(len(parts))) for q in part] if parts else []
        failed = {i: got for (i, _, _), got in zip(parts, parsed, strict=True) if isinstance(got, InvalidKey)}
        for i, bad in failed.items():
            out[i] = InvalidMessage(f"relay_keys: {bad}")
        requests = [q for q in parsed if isinstance(q, Request)]
        keys = [q.keys for q in requests]
        users = [u for u, i in zip(users, where, strict=True) if i not in failed]
        where = [i for i in where if i not in failed]
        digests = [q.digest for q in requests]
        sketch = self._sketch_seeds(users, digests)
        seeds = None if sketch is None else sketch[0]
        challenges = self._bound_challenges(users, digests)
        evaluated = self._evaluate_requests(requests, seeds, challenges) if requests else None

        def commit() -> list[bytes | SecembError]:
            if self.config is not cfg:
                raise ProtocolError(f"round {cfg.round_id} ended while its relayed retrievals were evaluated")
            missing = [u for u in users if u not in self._awaiting]
            if missing:
                raise ProtocolError(f"no retrieval request of user(s) {missing[:5]} to complete")
            if evaluated is None:
                return out
            committed = self._commit_evaluated(users, keys, evaluated, digests, seeds, challenges)
            directs = [self._awaiting.pop(u) for u in users]
            self._direct_of.update(zip(users, directs, strict=True))
            shape = (cfg.slots, cfg.width + tag_words(cfg))
            framer = Framer(NAME, "relay_answer", 1, cfg.round_id, relay_answer_bytes(cfg, self.verify))
            # verified uploads: server 1 vouches for each device's sketch seed to the device, under
            # the key server 0 never sees (its tag follows the masked answer, server 0 passes it on)
            tags = [b""] * len(users) if seeds is None else seed_tags([d.mac_key for d in directs], cfg.round_id,
                                                                       seeds)

            def masked(span: list[int]) -> list[bytes]:
                """The relay answers of a range of users (consecutive positions): their shares plus
                their masks, each mask added into the shares (no longer needed; a new array where
                they are read-only or not contiguous; the batch's rows as its array, its rows'
                addresses computed once) as it is expanded (:func:`relay_masks_into`), then framed
                with the seed tag."""
                if not span:
                    return []
                lo, hi = span[0], span[-1] + 1
                shares = committed[lo:hi]
                sums: list[np.ndarray] | np.ndarray = shares if (
                    isinstance(shares, np.ndarray) and shares.flags.writeable and shares.flags.c_contiguous) else [
                    a if a.flags.writeable and a.flags.c_contiguous else np.empty(shape, cfg.dtype) for a in shares]
                relay_masks_into([d.mask_seed for d in directs[lo:hi]], sums, shares)
                return [framer(little(a), tag) for a, tag in zip(sums, tags[lo:hi], strict=True)]

            replies = self._chunked(masked, list(range(len(users))))
            for i, reply in zip(where, replies, strict=True):
                out[i] = reply
            return out

        return commit

    def complete_retrieval(self, user_id: int, message: bytes) -> bytes:
        """Server 0, relay: add server 1's masked shares to its own; the reply to the user (with
        verified uploads, its sketch seed ``c_u`` follows the answer -- the device learns it only
        now, once both servers hold its request -- and then server 1's tag of it from the relay
        answer, passed on as received)."""
        return result_or_raise(self.complete_retrieval_many([(user_id, message)])[0])

    def complete_retrieval_many(self, answers: list[tuple[int, bytes]]) -> list[bytes | SecembError]:
        """:meth:`complete_retrieval` for many users: checked one by one (a refused answer
        changes no state), the additions and replies framed in ranges of users on the backend's
        threads."""
        cfg = self._cfg()
        out: list[bytes | SecembError] = [b""] * len(answers)
        opener = Opener(NAME, "relay_answer", 1, cfg.round_id, relay_answer_bytes(cfg, self.verify))
        at = answer_bytes(cfg)  # where server 1's seed tag (verified uploads) follows the masked answer

        def take(user_id: int, message: bytes, seen: set[int]) -> memoryview:
            if self.party != 0 or user_id not in self._answers or user_id in seen:
                raise ProtocolError(f"no relayed retrieval of user {user_id} to complete")
            return opener(message)

        users, where, bodies = sift(answers, out, take)
        shape = (cfg.slots, cfg.width + tag_words(cfg))
        framer = Framer(NAME, "retrieval_reply", 0, cfg.round_id, reply_bytes(cfg, self.verify))

        def replies(batch: list[tuple[tuple[np.ndarray, bytes], memoryview]]) -> list[bytes]:
            """A range of users' replies: its masked shares read in place, added into this
            server's shares (no longer needed; a copy where they are read-only) and framed from
            them with its sketch seed and server 1's tag of it -- one copy, into the reply."""
            done: list[bytes] = []
            for (own, seed), body in batch:
                masked = read_view(body, 0, cfg.dtype, shape)
                reply = np.add(own, masked, out=own if own.flags.writeable else None, dtype=cfg.dtype)
                done.append(framer(little(reply), seed, body[at:]))
            return done

        made = self._chunked(replies, [(self._answers.pop(u), b) for u, b in zip(users, bodies, strict=True)])
        for i, reply in zip(where, made, strict=True):
            out[i] = reply
        return out

    def relay_upload(self, user_id: int, message: bytes) -> None:
        """Server 1, relay: check the forwarded correction words' (and, verified uploads, binding
        ``tau``'s) tag under the key the user sent it directly, then absorb them; its dense share is
        the expansion of the user's seed.

        Raises
        ------
        RelayTampered: the tag does not verify (server 0 altered or swapped the words); nothing
            is absorbed.
        """
        result_or_raise(self.relay_upload_many([(user_id, message)])[0])

    def relay_upload_many(self, forwards: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """:meth:`relay_upload` for many users (see :meth:`RelayRole.relay_upload_many`): the
        tags checked, the words read and the dense seeds expanded and summed in ranges of users
        on the backend's threads; a forward whose tag fails yields its
        :class:`~secemb.errors.RelayTampered` and is not absorbed."""
        cfg = self._cfg()
        out: list[SecembError | None] = [None] * len(forwards)
        if self.party != 1:
            return [ProtocolError("relay_upload is server 1's step in relay mode")] * len(forwards)
        size = rows_bytes(cfg)
        tagged = size + (BIND_BYTES if self.verify else 0)  # what the tag covers: the words, then tau
        users, where, bodies = self._open_uploads(forwards, "relay_upload", relay_upload_bytes(cfg, self.verify), out)
        # immutable bytes of little more than the words: kept as their view; a buffer the caller may
        # still change: copied
        immutable = [type(forwards[i][1]) is bytes for i in where]
        directs = [self._direct_of[u] for u in users]

        def checked(batch: list[tuple[memoryview, Direct, bool]]) -> tuple[list[np.ndarray | None], np.ndarray]:
            """A range's words (``None`` where the tag fails) and the sum of its good users'
            dense shares (the expansions of their seeds)."""
            words: list[np.ndarray | None] = []
            seeds: list[bytes] = []
            tags = upload_macs([direct.mac_key for _, direct, _ in batch], cfg.round_id,
                               [body[:tagged] for body, _, _ in batch])
            for (body, direct, fixed), tag in zip(batch, tags, strict=True):
                if not hmac.compare_digest(tag, body[tagged:]):
                    words.append(None)
                    continue
                words.append(_words(body, 0, cfg) if fixed else read_array(body, 0, cfg.dtype, (cfg.slots,
                                                                                               cfg.width))[0])
                seeds.append(direct.dense_seed)
            return words, relay_prg_sum(seeds, cfg.dense_size, cfg.dtype)

        parts = self._map_spans(checked, [list(zip(bodies[lo:hi], directs[lo:hi], immutable[lo:hi], strict=True))
                                          for lo, hi in self._spans(len(bodies))])
        words = [w for part in parts for w in part[0]]
        dense = parts[0][1] if parts else np.zeros(cfg.dense_size, cfg.dtype)
        for part in parts[1:]:
            dense += part[1]
        good = [j for j, w in enumerate(words) if w is not None]
        for j, w in enumerate(words):
            if w is None:
                out[where[j]] = RelayTampered(f"relay_upload of round {cfg.round_id}: the forwarded correction words "
                                              "fail the device's MAC (server 0 altered them); not absorbed")
        if good:
            seeds = [self._direct_of.pop(users[j]).dense_seed for j in good]
            self._absorb_many([users[j] for j in good], cast("list[np.ndarray]", [words[j] for j in good]), dense,
                              dense_seeds=seeds,
                              sketches=[bytes(bodies[j][size:tagged]) for j in good] if self.verify else None)
        return out

    def _dense_share(self, user_id: int) -> np.ndarray:
        """Server 1: the expansion of the user's dense seed (nothing of it was spilled);
        server 0: its explicit share, read back (:meth:`SecEmbServer._dense_share`)."""
        seed = self._absorbed[user_id].dense_seed
        if seed is None:
            return super()._dense_share(user_id)
        return relay_prg(seed, (self._cfg().dense_size,), self._cfg().dtype)

    def _dense_shares(self, users: list[int]) -> list[np.ndarray]:
        """Server 1: the expansions of the users' dense seeds, in order, as one batch
        (:func:`relay_prgs`: one conversion call, not one a user); server 0 (no seeds): its
        explicit shares, read back (:meth:`SecEmbServer._dense_shares`)."""
        seeds = [s for s in (self._absorbed[u].dense_seed for u in users) if s is not None]
        if not users or len(seeds) < len(users):
            return super()._dense_shares(users)
        return list(relay_prgs(seeds, (self._cfg().dense_size,), self._cfg().dtype))
