"""SecEmb's relay (``relay=True``): the user sends every byte both servers would receive
identically only once; server 0 forwards to server 1 what is server 1's, authenticated by the
device (docs/security.md, "A deviating server").  Here: the seeded arrays (server 1's answer
mask and dense share), the upload's MAC and what server 1 gets directly from the device."""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss.convert import convert
from secemb.protocols.base import RoundConfig
from secemb.protocols.secemb.sizes import DIGEST_BYTES, MAC_BYTES, MAC_KEY_BYTES, NAME, U64, roots_bytes
from secemb.protocols.wire import open_message
from secemb.randomness import SEED_BYTES

__all__ = ["RELAY_TAG", "Direct", "parse_roots", "relay_prg", "relay_prgs", "upload_mac"]

_UPLOAD_MAC_DOMAIN = b"secemb-relay-upload"

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


def upload_mac(key: bytes, round_id: int, cw: bytes) -> bytes:
    """The relay's tag of an upload's correction words: ``HMAC-SHA256(key, b"secemb-relay-upload"
    || u64 round_id || cw)`` truncated to :data:`MAC_BYTES`."""
    mac = hmac.new(key, _UPLOAD_MAC_DOMAIN + U64.pack(round_id), hashlib.sha256)
    mac.update(cw)  # not concatenated: the words are the bulk of an upload
    return mac.digest()[:MAC_BYTES]


@dataclass(frozen=True)
class Direct:
    """Server 1, relay: what a user sent it directly (over its own authenticated channel)."""

    roots: bytes  # its key batch's roots, 16 S
    mask_seed: bytes  # expands to the mask of its retrieval answer
    dense_seed: bytes  # expands to its share of the dense gradient
    mac_key: bytes  # authenticates the upload's correction words server 0 forwards
    digest: bytes  # SHA-256 of the key part server 0 forwards


def parse_roots(message: bytes, config: RoundConfig) -> Direct:
    """Server 1: a relay request's roots, seeds, MAC key and forwarded-part digest.

    Raises
    ------
    InvalidMessage: the message is malformed, of another round or party, or a root's control
        bit is not server 1's.
    """
    body = bytes(open_message(message, NAME, "retrieval_request", 1, config.round_id, roots_bytes(config)))
    ends = np.cumsum([16 * config.slots, SEED_BYTES, SEED_BYTES, MAC_KEY_BYTES, DIGEST_BYTES]).tolist()
    roots, mask_seed, dense_seed, mac_key, digest = (body[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True))
    if np.any(np.frombuffer(roots, np.uint8)[::16] & 1 != 1):
        raise InvalidMessage("retrieval_request: root control bits must equal the party")
    return Direct(roots, mask_seed, dense_seed, mac_key, digest)
