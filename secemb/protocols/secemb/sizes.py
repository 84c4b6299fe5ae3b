"""SecEmb's message sizes: every body length follows from the public round parameters
(a server never learns an index, a row count or a gradient from a size), and the constants
they are made of."""

from __future__ import annotations

import struct

from secemb import fss
from secemb.fss.sketch import SKETCH_SEED_BYTES
from secemb.fss.sketchproof import SketchParams
from secemb.protocols.base import RoundConfig
from secemb.randomness import SEED_BYTES

__all__ = [
    "BIND_BYTES", "DENSE_COMMIT_BYTES", "DIGEST_BYTES", "MAC_BYTES", "MAC_KEY_BYTES", "NAME", "SEED_TAG_BYTES",
    "SIGMA_BYTES", "TAG_BYTES", "U64", "answer_bytes", "key_expect", "key_params", "relay_answer_bytes",
    "relay_upload_bytes", "reply_bytes", "request_bytes", "roots_bytes", "rows_bytes", "share_bytes", "shared_bytes",
    "sketch_params", "tag_words", "upload_bytes",
]

#: the protocol's name in every message header
NAME = "secemb"
U64 = struct.Struct("<Q")
#: a row tag: the first TAG_BYTES of SHA-256, as ring words (see row_tags and docs/security.md,
#: "A deviating server": 128 bits, because in Z_{2^k} an offset whose words are multiples of
#: 2^(k-1) is unchanged by the device's secret odd multiplier)
TAG_BYTES = 16
#: the relay's authentication: a fresh per-round MAC key the device gives server 1 directly (its two
#: sub-keys, checks.relay_subkey, key the upload's GMAC -- AES-128-GCM, relay.upload_mac, a MAC_BYTES
#: tag -- and the sketch seed's tag, checks.seed_tag), and the SHA-256 digest of the forwarded key part
MAC_KEY_BYTES = 16
MAC_BYTES = 16
#: bounded payloads without relay: the commitment to its server-1 dense share a device appends to
#: its upload to server 0 (a SHA-256; secemb.protocols.secemb.bounds.dense_commitment)
DENSE_COMMIT_BYTES = 32
DIGEST_BYTES = 32
#: verified uploads: a device's proof seed ``sigma`` (server 1's share of its sketch proof and, with
#: bounded payloads, of its range proof), sent to server 1 with its retrieval request
SIGMA_BYTES = 16
#: verified uploads: a device's binding ``tau`` of its sketch seed to ``sigma``
#: (:func:`secemb.protocols.secemb.checks.binding`), sent to server 1 with its upload
BIND_BYTES = 32
#: verified uploads: the other server's tag of a device's sketch seed (relay: server 1's, in its
#: relay answer and passed on by server 0) or of this server's half of it (without relay: in the
#: other server's reply), :func:`secemb.protocols.secemb.checks.seed_tag` and
#: :func:`~secemb.protocols.secemb.checks.half_tags`
SEED_TAG_BYTES = 16


def tag_words(config: RoundConfig) -> int:
    """Ring words of a row tag: ``T = 8 TAG_BYTES / ring_bits`` (4 for uint32, 2 for uint64)."""
    return TAG_BYTES // config.dtype.itemsize


def key_params(config: RoundConfig) -> fss.DPFParams:
    """Parameters of a user's retrieval keys: over ``[0, m)`` or the bucket domain."""
    domain = config.num_items if config.layout == "full" else config.cuckoo().bucket_size
    return fss.DPFParams(domain, 1, config.ring_bits)


def key_expect(config: RoundConfig) -> dict[str, int]:
    p = key_params(config)
    return {"domain_size": p.domain_size, "count": config.slots, "payload_width": 1, "ring_bits": config.ring_bits}


def sketch_params(config: RoundConfig) -> SketchParams:
    """The sketch proof's parameters of a device's ``S`` keys (verified uploads)."""
    return SketchParams(config.slots)


def request_bytes(config: RoundConfig) -> int:
    """Body length of a full-key retrieval request: the keys (to server 1 with verified uploads,
    :data:`SIGMA_BYTES` more follow)."""
    return fss.keys.HEADER_BYTES + config.slots * key_params(config).key_bytes


def roots_bytes(config: RoundConfig) -> int:
    """Body of a relay request to server 1: its root words, the user's two seeds, its MAC
    key and the digest of the key part server 0 will forward (with verified uploads,
    :data:`SIGMA_BYTES` more follow)."""
    return 16 * config.slots + 2 * SEED_BYTES + MAC_KEY_BYTES + DIGEST_BYTES


def shared_bytes(config: RoundConfig) -> int:
    """Body of a relay_keys forward: the key batch without server 0's roots."""
    return request_bytes(config) - 16 * config.slots


def rows_bytes(config: RoundConfig) -> int:
    """``S`` rows of the table's width: the aggregation correction words of an upload."""
    return config.slots * config.width * config.dtype.itemsize


def answer_bytes(config: RoundConfig) -> int:
    """A retrieval answer (a ``relay_answer`` and a ``retrieval_reply`` start with one): ``S`` rows
    of the tagged table, ``width + tag_words`` columns."""
    return config.slots * (config.width + tag_words(config)) * config.dtype.itemsize


def relay_answer_bytes(config: RoundConfig, verify: bool) -> int:
    """A ``relay_answer``: the masked answer (:func:`answer_bytes`) and, with verified uploads,
    server 1's tag of the device's sketch seed (:data:`SEED_TAG_BYTES`), which server 0 passes on."""
    return answer_bytes(config) + (SEED_TAG_BYTES if verify else 0)


def reply_bytes(config: RoundConfig, verify: bool) -> int:
    """A ``retrieval_reply``: the answer (:func:`answer_bytes`) and, with verified uploads, the
    device's sketch seed (relay: from server 0) or this server's half of it (without relay),
    :data:`~secemb.fss.sketch.SKETCH_SEED_BYTES`, then the other server's tag (:data:`SEED_TAG_BYTES`)
    of that seed (relay: server 1's, passed on) or of the other server's half (without relay)."""
    return answer_bytes(config) + (SKETCH_SEED_BYTES + SEED_TAG_BYTES if verify else 0)


def upload_bytes(config: RoundConfig, relay: bool, party: int, *, verify: bool = True, commit: bool = False) -> int:
    """An upload to server ``party`` (with relay, to server 0 only): the correction words, the
    dense share and, with relay, the binding ``tau`` (verified uploads) and server 1's MAC tag of
    the words and ``tau``; without relay, to server 1 ``tau`` (verified uploads) after the dense
    share.  To server 0 with verified uploads, server 0's share of the sketch proof follows;
    ``commit``: to server 0 without relay with bounded payloads, which ends with the commitment to
    the server-1 dense share (:data:`DENSE_COMMIT_BYTES`)."""
    words = rows_bytes(config) + config.dense_size * config.dtype.itemsize
    bind = BIND_BYTES if verify and (relay or party) else 0
    proof = sketch_params(config).proof_bytes if verify and not party else 0
    return words + bind + (MAC_BYTES if relay else 0) + proof + (DENSE_COMMIT_BYTES if commit else 0)


def relay_upload_bytes(config: RoundConfig, verify: bool) -> int:
    """A ``relay_upload`` forward: the correction words, the binding ``tau`` (verified uploads)
    and their MAC tag."""
    return rows_bytes(config) + (BIND_BYTES if verify else 0) + MAC_BYTES


def share_bytes(config: RoundConfig, num_users: int) -> int:
    """Body of an aggregate share covering ``num_users`` users."""
    return 8 + 8 * num_users + (config.num_items * config.width + config.dense_size) * config.dtype.itemsize
