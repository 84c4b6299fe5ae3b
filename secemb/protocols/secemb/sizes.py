"""SecEmb's message sizes: every body length follows from the public round parameters
(a server never learns an index, a row count or a gradient from a size), and the constants
they are made of."""

from __future__ import annotations

import struct

from secemb import fss
from secemb.fss.verify import CHECK_BYTES
from secemb.protocols.base import RoundConfig
from secemb.randomness import SEED_BYTES

__all__ = [
    "DENSE_COMMIT_BYTES", "DIGEST_BYTES", "MAC_BYTES", "MAC_KEY_BYTES", "NAME", "TAG_BYTES", "U64", "answer_bytes",
    "checks_bytes", "key_expect", "key_params", "request_bytes", "roots_bytes", "rows_bytes", "share_bytes",
    "shared_bytes", "tag_words", "upload_bytes",
]

#: the protocol's name in every message header
NAME = "secemb"
U64 = struct.Struct("<Q")
#: a row tag: the first TAG_BYTES of SHA-256, as ring words (see row_tags and docs/security.md,
#: "A deviating server": 128 bits, because in Z_{2^k} an offset whose words are multiples of
#: 2^(k-1) is unchanged by the device's secret odd multiplier)
TAG_BYTES = 16
#: the relay's authentication: a fresh per-round MAC key the device gives server 1 directly,
#: GMAC (AES-128-GCM, relay.upload_mac) with a MAC_BYTES tag, and the SHA-256 digest of the forwarded key part
MAC_KEY_BYTES = 16
MAC_BYTES = 16
#: bounded payloads without relay: the commitment to its server-1 dense share a device appends to
#: its upload to server 0 (a SHA-256; secemb.protocols.secemb.bounds.dense_commitment)
DENSE_COMMIT_BYTES = 32
DIGEST_BYTES = 32


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


def checks_bytes(config: RoundConfig, verify: bool) -> int:
    """The check correction words of a request's keys (verified uploads), or 0."""
    return config.slots * CHECK_BYTES if verify else 0


def request_bytes(config: RoundConfig, verify: bool = True) -> int:
    """Body length of a full-key retrieval request (with ``verify``, the keys' check
    correction words follow the keys)."""
    return fss.keys.HEADER_BYTES + config.slots * key_params(config).key_bytes + checks_bytes(config, verify)


def roots_bytes(config: RoundConfig) -> int:
    """Body of a relay request to server 1: its root words, the user's two seeds, its MAC
    key and the digest of the key part server 0 will forward."""
    return 16 * config.slots + 2 * SEED_BYTES + MAC_KEY_BYTES + DIGEST_BYTES


def shared_bytes(config: RoundConfig, verify: bool) -> int:
    """Body of a relay_keys forward: the key batch without server 0's roots (and, with
    ``verify``, the check correction words)."""
    return request_bytes(config, verify) - 16 * config.slots


def rows_bytes(config: RoundConfig) -> int:
    """``S`` rows of the table's width: the aggregation correction words of an upload."""
    return config.slots * config.width * config.dtype.itemsize


def answer_bytes(config: RoundConfig) -> int:
    """A retrieval answer (``retrieval_reply``, ``relay_answer``): ``S`` rows of the tagged
    table, ``width + tag_words`` columns."""
    return config.slots * (config.width + tag_words(config)) * config.dtype.itemsize


def upload_bytes(config: RoundConfig, relay: bool, *, commit: bool = False) -> int:
    """An upload to server 0 (with relay, its correction words carry server 1's MAC tag) or,
    without relay, to either server; ``commit``: to server 0 without relay with bounded
    payloads, which ends with the commitment to the server-1 dense share
    (:data:`DENSE_COMMIT_BYTES`)."""
    return (rows_bytes(config) + config.dense_size * config.dtype.itemsize + (MAC_BYTES if relay else 0)
            + (DENSE_COMMIT_BYTES if commit else 0))


def share_bytes(config: RoundConfig, num_users: int) -> int:
    """Body of an aggregate share covering ``num_users`` users."""
    return 8 + 8 * num_users + (config.num_items * config.width + config.dense_size) * config.dtype.itemsize
