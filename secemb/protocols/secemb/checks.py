"""SecEmb's integrity checks: the row tags a device checks its retrieved rows against
(verified retrieval), and the sketch check's secrets and the per-user digest of verified uploads
(docs/security.md, "A deviating server" and "A malicious device").

The sketch check (issue 34 (a), docs/security.md, "A sound sketch with the challenge drawn at
retrieval"): both servers hold a 32-byte ``sketch_key`` the devices never see; per round
``s_round = HMAC-SHA256(sketch_key, b"secemb-sketch-round" || u64 round)`` (:func:`round_secret`).
From it, per device: its sketch seed ``c_u`` (:func:`sketch_seeds`, with relay) or the servers'
halves of it (:func:`sketch_halves`, without), the query seed of its proof (:func:`query_seeds`),
the full layout's bound challenge (:func:`bound_challenges`, bounded payloads), and the binding
``tau`` of ``c_u`` to its proof seed ``sigma`` (:func:`binding`).  The server that
does not send ``c_u`` (or a half) vouches for it with a tag the device checks before it proves
(:func:`seed_tag` with relay, :func:`half_tags` without; docs/security.md, "A wrong ``c_u`` is
caught at the device")."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Literal

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss.hashing import bytes_rows, hmac_sha256_many, row_bytes, sha256_many
from secemb.fss.sketch import SKETCH_SEED_BYTES
from secemb.protocols.secemb.sizes import MAC_KEY_BYTES, SEED_TAG_BYTES, TAG_BYTES, U64

__all__ = ["SKETCH_KEY_BYTES", "VERIFY_DOMAIN", "binding", "binding_rows", "bindings", "bound_challenges", "half_tags",
           "key_digests", "query_seed_rows", "query_seeds", "relay_subkey", "relay_subkeys", "round_secret", "row_tags",
           "seed_tag", "seed_tags",
           "sketch_half_rows", "sketch_halves", "sketch_seeds", "suffix_tags"]

_ROW_TAG_DOMAIN = b"secemb-row-tag"
#: verified uploads (docs/security.md, "A malicious device"): the domain of the per-user digest
#: the servers compare
VERIFY_DOMAIN = b"secemb-verify-upload"
#: the servers' shared sketch key
SKETCH_KEY_BYTES = 32
#: the uses of a device's one-time relay key (:func:`relay_subkey`), each with the length of its
#: sub-key: AES-128's key (the upload's GMAC), HMAC-SHA256's whole output (the seed tag's HMAC key)
_SUBKEY_BYTES = {"upload-gmac": 16, "seed-tag": 32}


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
    ring (n, TAG_BYTES / itemsize) of ``rows.dtype`` (once per round on each server for the
    whole table; a device's check writes the hashed suffixes in its own pass over its answers,
    :func:`~secemb.fss.fused.unmask_slots`, and tags them with :func:`suffix_tags`).
    """
    dt = rows.dtype
    if dt not in (np.dtype(np.uint32), np.dtype(np.uint64)) or rows.ndim != 2 or items.shape != rows.shape[:1]:
        raise InvalidParameters(f"rows must be uint32 or uint64 (n, w) with items (n,), got {dt} {rows.shape} "
                                f"and {items.shape}")
    n = len(items)
    # every row's hashed suffix u64 j || r in one array, hashed as one batch
    suffix = np.empty((n, 8 + rows.shape[1] * dt.itemsize), np.uint8)
    suffix[:, :8] = items.astype("<u8").reshape(n, 1).view(np.uint8)
    suffix[:, 8:].view(dt.newbyteorder("<"))[...] = rows  # one copy, from rows of any stride
    return suffix_tags(round_id, suffix, dt)


def suffix_tags(round_id: int, suffix: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The row tags (:func:`row_tags`) of the rows whose hashed suffixes ``u64 j || r`` are the
    rows of ``suffix`` (uint8 (n, 8 + w itemsize)), ring (n, TAG_BYTES / itemsize) of ``dtype``
    (:func:`~secemb.fss.hashing.sha256_many`)."""
    dt = np.dtype(dtype)
    tags = sha256_many(_ROW_TAG_DOMAIN + U64.pack(round_id), suffix)[:, :TAG_BYTES]
    return np.ascontiguousarray(tags).view(dt.newbyteorder("<")).astype(dt)


def key_digests(shared_header: bytes, rest: np.ndarray) -> list[bytes]:
    """Users' key digests, ``SHA-256(shared)`` of each one's shared key part (as
    :meth:`~secemb.fss.keys.DPFKeys.shared_bytes` serializes it): what the sketch seeds derive from
    (:func:`sketch_seeds`, :func:`sketch_halves`) and, with relay, what the device commits to.  The
    users' keys are of one parameter set: each shared part is ``shared_header``
    (:meth:`~secemb.fss.keys.DPFKeys.shared_header`) followed by row ``i`` of ``rest`` (uint8
    (n, L), rows of any stride; an empty header and whole serialized parts as the rows: the parts'
    plain digests, as server 1 takes them from forwarded parts), hashed as one batch
    (:func:`~secemb.fss.hashing.sha256_many`: without the GIL, two messages at a time on the
    SHA-NI kernel)."""
    return row_bytes(sha256_many(shared_header, rest))


def round_secret(sketch_key: bytes, round_id: int) -> bytes:
    """``s_round = HMAC-SHA256(sketch_key, b"secemb-sketch-round" || u64 round_id)``: the round's
    secret of the sketch check, 32 bytes, at both servers (never sent).

    Raises
    ------
    InvalidParameters: ``sketch_key`` is not :data:`SKETCH_KEY_BYTES` bytes.
    """
    if not isinstance(sketch_key, bytes) or len(sketch_key) != SKETCH_KEY_BYTES:
        raise InvalidParameters(f"a sketch key is {SKETCH_KEY_BYTES} bytes")
    return hmac.digest(sketch_key, b"secemb-sketch-round" + U64.pack(round_id), "sha256")


def _seed_hmacs(key: bytes, head: bytes, tails: np.ndarray) -> np.ndarray:
    """``HMAC-SHA256(key, head || tails[i])[:16]`` of every row of ``tails`` (uint8 (n, L)), as the
    rows of uint8 (n, 16), C-contiguous: one :func:`~secemb.fss.hashing.hmac_sha256_many` batch under
    the one key (the same bytes as :func:`hmac.digest`; with the SHA-NI kernel one compiled call, not
    ``n`` Python HMACs)."""
    digests = hmac_sha256_many(np.frombuffer(key, np.uint8).reshape(1, -1), head, tails)
    return np.ascontiguousarray(digests[:, :SKETCH_SEED_BYTES])


def _hmac_many(key: bytes, head: bytes, tails: np.ndarray) -> list[bytes]:
    """:func:`_seed_hmacs` as ``n`` 16-byte ``bytes``."""
    return row_bytes(_seed_hmacs(key, head, tails))


def _user_tails(users: list[int], digests: list[bytes] | None = None) -> np.ndarray:
    """uint8 (n, 8 [+ 32]): each user's ``u64 user`` (little-endian), then its 32-byte digest."""
    ids = np.array(users, np.uint64).astype("<u8").view(np.uint8).reshape(len(users), 8)
    if digests is None:
        return ids
    if len(digests) != len(users) or any(len(d) != 32 for d in digests):
        raise InvalidParameters("a 32-byte digest a user is needed")
    return np.concatenate([ids, np.frombuffer(b"".join(digests), np.uint8).reshape(len(users), 32)], axis=1)


def sketch_seeds(s_round: bytes, round_id: int, users: list[int], digests: list[bytes]) -> list[bytes]:
    """With relay: each user's sketch seed ``c_u = HMAC-SHA256(s_round, b"secemb-sketch" || u64
    round || u64 user || D)[:16]``, ``D`` (32 bytes) the digest of the key part server 0 forwards
    (both servers hold the same: server 1 checks the forward against it); one batch
    (:func:`_hmac_many`)."""
    return _hmac_many(s_round, b"secemb-sketch" + U64.pack(round_id), _user_tails(users, digests))


def sketch_halves(s_round: bytes, round_id: int, users: list[int], digests: list[bytes]) -> list[tuple[bytes, bytes]]:
    """Without relay: per user both servers' halves ``c_b = HMAC-SHA256(s_round, b"secemb-sketch-half"
    || u8 b || u64 round || u64 user || K)[:16]`` (``b`` = 0, 1) of its sketch seed ``c_u = c_0 XOR
    c_1``, ``K`` (32 bytes) the digest of the server's own copy of its shared key part: server ``b``
    sends the device ``c_b`` and computes ``c_u`` for its own walk from both; :func:`sketch_half_rows`
    as ``bytes``."""
    h0, h1 = (row_bytes(h) for h in sketch_half_rows(s_round, round_id, users, digests))
    return list(zip(h0, h1, strict=True))


def sketch_half_rows(s_round: bytes, round_id: int, users: list[int], digests: list[bytes]) -> np.ndarray:
    """:func:`sketch_halves` as uint8 (2, n, 16): ``[b, i]`` the half ``c_b`` of user ``users[i]``
    (a server XORs the two for ``c_u`` as arrays); one batch a half (:func:`_seed_hmacs`)."""
    tails = _user_tails(users, digests)
    return np.stack([_seed_hmacs(s_round, b"secemb-sketch-half" + bytes([b]) + U64.pack(round_id), tails)
                     for b in (0, 1)])


def relay_subkey(key: bytes, use: Literal["upload-gmac", "seed-tag"]) -> bytes:
    """The sub-key of a device's one-time relay key ``key`` (:data:`MAC_KEY_BYTES`, drawn fresh
    per device and round and sent to server 1 alone) for one ``use``: ``HMAC-SHA256(key,
    b"secemb-relay-subkey-" || use)``, its first 16 bytes for ``"upload-gmac"`` (the AES-128 key of
    the upload's GMAC, :func:`~secemb.protocols.secemb.relay.upload_mac`) and all 32 for
    ``"seed-tag"`` (the HMAC-SHA256 key of :func:`seed_tag`).  HMAC under the uniform ``key`` is a
    PRF: the two sub-keys are independent keys, each for one primitive, and neither tells anything
    of the other or of ``key`` -- which itself keys nothing but these two derivations.  The device
    and server 1 each derive them from the same ``key``.

    Raises
    ------
    InvalidParameters: ``key`` is not :data:`MAC_KEY_BYTES` bytes, or ``use`` neither of the two.
    """
    if len(key) != MAC_KEY_BYTES:
        raise InvalidParameters(f"a one-time relay key is {MAC_KEY_BYTES} bytes, got {len(key)}")
    if use not in _SUBKEY_BYTES:
        raise InvalidParameters(f"a relay sub-key's use is one of {sorted(_SUBKEY_BYTES)}, got {use!r}")
    return hmac.digest(key, b"secemb-relay-subkey-" + use.encode(), "sha256")[: _SUBKEY_BYTES[use]]


def relay_subkeys(keys: Sequence[bytes], use: Literal["upload-gmac", "seed-tag"]) -> np.ndarray:
    """:func:`relay_subkey` of each one-time relay key of ``keys`` for one ``use``, as one batch
    (:func:`~secemb.fss.hashing.hmac_sha256_many`, a key a row: one compiled call for the batch with
    the SHA-NI kernel, not a Python HMAC a key):
    uint8 (len(keys), 16 or 32), row ``i`` the bytes of ``relay_subkey(keys[i], use)``.

    Raises
    ------
    InvalidParameters: a key is not :data:`MAC_KEY_BYTES` bytes, or ``use`` neither of the two.
    """
    if any(len(key) != MAC_KEY_BYTES for key in keys):
        raise InvalidParameters(f"a one-time relay key is {MAC_KEY_BYTES} bytes, got {[len(k) for k in keys]}")
    if use not in _SUBKEY_BYTES:
        raise InvalidParameters(f"a relay sub-key's use is one of {sorted(_SUBKEY_BYTES)}, got {use!r}")
    rows = bytes_rows(keys, MAC_KEY_BYTES)
    return hmac_sha256_many(rows, b"secemb-relay-subkey-" + use.encode(), rows[:, :0])[:, : _SUBKEY_BYTES[use]]


def seed_tag(key: bytes, round_id: int, seed: bytes) -> bytes:
    """With relay: server 1's tag of a device's sketch seed ``c_u``, ``HMAC-SHA256(k_tag,
    b"secemb-sketch-seed-tag" || u64 round || c_u)[:16]`` (:data:`SEED_TAG_BYTES`), ``k_tag =
    relay_subkey(key, "seed-tag")`` (:func:`relay_subkey`), ``key`` the device's one-time relay
    key (:data:`MAC_KEY_BYTES`), which the device sent server 1 alone and server 0 never sees.
    Server 1 appends it to its relay answer; server 0 passes it on after ``c_u`` in its reply and
    cannot make it for another seed; the device recomputes it and compares before it proves.  The
    upload's GMAC (:func:`~secemb.protocols.secemb.relay.upload_mac`) is keyed by the other
    sub-key: no key serves two primitives.

    Raises
    ------
    InvalidParameters: ``key`` is not :data:`MAC_KEY_BYTES` bytes or ``seed`` not 16.
    """
    if len(key) != MAC_KEY_BYTES or len(seed) != SKETCH_SEED_BYTES:
        raise InvalidParameters(f"a seed tag takes a {MAC_KEY_BYTES}-byte key and a {SKETCH_SEED_BYTES}-byte seed")
    return hmac.digest(relay_subkey(key, "seed-tag"), b"secemb-sketch-seed-tag" + U64.pack(round_id) + seed,
                       "sha256")[:SEED_TAG_BYTES]


def seed_tags(keys: Sequence[bytes], round_id: int, seeds: Sequence[bytes]) -> list[bytes]:
    """:func:`seed_tag` of each device's one-time relay key ``keys[i]`` and sketch seed ``seeds[i]``
    (server 1's tags of a batch's seeds), the same bytes: the sub-keys one :func:`relay_subkeys`
    batch, the tags' HMACs one :func:`~secemb.fss.hashing.hmac_sha256_many` batch under them.

    Raises
    ------
    InvalidParameters: the lists differ in length, a key is not :data:`MAC_KEY_BYTES` bytes or a
        seed not 16.
    """
    if len(keys) != len(seeds) or any(len(seed) != SKETCH_SEED_BYTES for seed in seeds):
        raise InvalidParameters(f"seed tags take a key and a {SKETCH_SEED_BYTES}-byte seed a device")
    if not seeds:
        return []
    subkeys = relay_subkeys(keys, "seed-tag")
    tails = bytes_rows(seeds, SKETCH_SEED_BYTES)
    return row_bytes(hmac_sha256_many(subkeys, b"secemb-sketch-seed-tag" + U64.pack(round_id), tails),
                     SEED_TAG_BYTES)


def half_tags(round_id: int, party: int | Sequence[int], halves: list[bytes]) -> list[bytes]:
    """Without relay: the tags of halves ``c_b`` (16 bytes each) of devices' sketch seeds,
    ``SHA-256(b"secemb-sketch-half-tag" || u8 b || u64 round || c_b)[:16]`` (:data:`SEED_TAG_BYTES`),
    ``b`` the server whose half it is: ``party`` for every half, or ``party[i]`` for ``halves[i]``
    (a device checks its two halves, one of each server, as one batch); hashed as one batch
    (:func:`~secemb.fss.hashing.sha256_many`).  The
    other server's reply carries the tag of this server's half; the device compares it with the
    half it got.  Unkeyed on purpose: the tag travels on the other server's own channel, so the
    server whose half it covers cannot replace it, and it can only send another half with a
    second preimage of a 128-bit hash; the device holds the half anyway, and the server that makes
    the tag derives the half itself (no key would hide anything from either).

    Raises
    ------
    InvalidParameters: a party is not 0 or 1 (or ``party`` not one a half), or a half is not 16 bytes.
    """
    parties = [party] if isinstance(party, int) else list(party)  # one party: broadcast to every row below
    if ((len(parties) != len(halves) and not isinstance(party, int)) or any(b not in (0, 1) for b in parties)
            or any(len(h) != SKETCH_SEED_BYTES for h in halves)):
        raise InvalidParameters(f"half tags: party 0 or 1 (one, or one a half) and {SKETCH_SEED_BYTES}-byte halves")
    # each hashed row u8 b || u64 round || c_b, written by column
    rows = np.empty((len(halves), 1 + U64.size + SKETCH_SEED_BYTES), np.uint8)
    rows[:, 0] = parties
    rows[:, 1 : 1 + U64.size] = np.frombuffer(U64.pack(round_id), np.uint8)
    rows[:, 1 + U64.size :] = np.frombuffer(b"".join(halves), np.uint8).reshape(len(halves), SKETCH_SEED_BYTES)
    return row_bytes(sha256_many(b"secemb-sketch-half-tag", rows), SEED_TAG_BYTES)


def bound_challenges(s_round: bytes, round_id: int, users: list[int], digests: list[bytes]) -> list[bytes]:
    """Bounded payloads, full layout: each user's 16-byte projection challenge ``c_u =
    HMAC-SHA256(s_round, b"secemb-bound-challenge" || u64 round || u64 user || K)[:16]``, ``K`` (32
    bytes) the digest of the server's copy of its shared key part (with relay the ``D`` both
    servers hold, as :func:`sketch_seeds` takes it; without relay each server's own, as
    :func:`sketch_halves` takes it: a device that sent the servers different key parts gets two
    challenges and fails).  Both servers derive it at retrieval and no message carries it before
    server 0 gives it to the device once its upload is absorbed (docs/security.md, "The challenge
    is derived, per device"); one batch (:func:`_hmac_many`)."""
    return _hmac_many(s_round, b"secemb-bound-challenge" + U64.pack(round_id), _user_tails(users, digests))


def query_seeds(s_round: bytes, round_id: int, users: list[int]) -> list[bytes]:
    """Each user's 16-byte query seed of its sketch proof, ``HMAC-SHA256(s_round,
    b"secemb-sketch-query" || u64 round || u64 user)[:16]``: both servers derive it, the device
    never learns it (no message carries it); :func:`query_seed_rows` as ``bytes``."""
    return row_bytes(query_seed_rows(s_round, round_id, users))


def query_seed_rows(s_round: bytes, round_id: int, users: list[int]) -> np.ndarray:
    """:func:`query_seeds` as the rows of uint8 (n, 16) (what the sketch verifier takes,
    :func:`~secemb.fss.sketchproof.verifier_messages`): one batch (:func:`_seed_hmacs`)."""
    return _seed_hmacs(s_round, b"secemb-sketch-query" + U64.pack(round_id), _user_tails(users))


def binding(round_id: int, seed: bytes, sigma: bytes) -> bytes:
    """A device's binding of its sketch seed ``c_u`` to its proof seed ``sigma``, ``tau =
    SHA-256(b"secemb-sketch-bind" || u64 round || c_u || sigma)`` (:data:`BIND_BYTES`): sent with
    its upload to server 1 (through server 0's forward with relay), which compares it with its own;
    a device given a wrong ``c_u`` fails whatever its data.  The user id is not hashed (a device's
    role does not know it): ``c_u`` is already a PRF of it, and ``sigma`` is the device's own."""
    return hashlib.sha256(b"secemb-sketch-bind" + U64.pack(round_id) + seed + sigma).digest()


def bindings(round_id: int, seeds: list[bytes], sigmas: list[bytes]) -> list[bytes]:
    """:func:`binding` of each sketch seed ``seeds[i]`` (16 bytes) and proof seed ``sigmas[i]``
    (16 bytes), hashed as one batch (:func:`~secemb.fss.hashing.sha256_many`).

    Raises
    ------
    InvalidParameters: the lists differ in length or a seed is not 16 bytes.
    """
    if len(seeds) != len(sigmas) or any(len(v) != SKETCH_SEED_BYTES for v in (*seeds, *sigmas)):
        raise InvalidParameters("bindings: a 16-byte sketch seed and sigma a device")
    return row_bytes(binding_rows(round_id, *(bytes_rows(v, SKETCH_SEED_BYTES) for v in (seeds, sigmas))))


def binding_rows(round_id: int, seeds: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    """:func:`bindings` of the rows of ``seeds`` and ``sigmas`` (uint8 (n, 16) each, any memory
    layout; a server's own, checked once as arrays, not seed by seed) as the rows of uint8 (n, 32):
    one :func:`~secemb.fss.hashing.sha256_many` batch.

    Raises
    ------
    InvalidParameters: ``seeds`` or ``sigmas`` not uint8 (n, 16) of one ``n``.
    """
    shape = (len(seeds), SKETCH_SEED_BYTES)
    if not all(isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.shape == shape for a in (seeds, sigmas)):
        raise InvalidParameters(f"binding rows: seeds and sigmas uint8 (n, {SKETCH_SEED_BYTES}) of one n, got "
                                f"{getattr(seeds, 'shape', None)} and {getattr(sigmas, 'shape', None)}")
    return sha256_many(b"secemb-sketch-bind" + U64.pack(round_id), np.concatenate([seeds, sigmas], axis=1))
