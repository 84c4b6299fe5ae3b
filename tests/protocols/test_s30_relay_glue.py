"""Issue 37 (session 30, helper H): the relay's per-device glue cut without changing a verdict or
a byte.  ``relay.upload_mac`` over a tuple of parts (the device's words and its ``tau``, copied
once into the associated data) is the tag of the parts joined, checked against cryptography's
AESGCM called directly on the documented associated data; ``wire.check_user``'s fast path for a
plain ``int`` gives what :func:`~secemb.errors.check_int` gives, and every other value still goes
through it (the same refusals, word for word); the batched uploads' empty-slot check, which takes
the real slots' rows where they are the fewer, refuses exactly the users with a nonzero word in an
empty slot's row, whichever rows it takes (a nonzero word anywhere in such a row, one or many)."""

from __future__ import annotations

import enum
import hashlib
import hmac

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from secemb.errors import InvalidParameters, check_int
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser, relay
from secemb.protocols.wire import check_user
from secemb.randomness import CtrDrbg

DOMAIN = b"secemb-relay-upload-gmac"  # docs/wire-format.md


def _reference(key: bytes, round_id: int, data: bytes) -> bytes:
    """GMAC under the upload's sub-key of ``key``, ``HMAC-SHA256(key, b"secemb-relay-subkey-upload-gmac")[:16]``
    (since session 31)."""
    sub = hmac.new(key, b"secemb-relay-subkey-upload-gmac", hashlib.sha256).digest()[:16]
    return AESGCM(sub).encrypt(bytes(12), b"", DOMAIN + round_id.to_bytes(8, "little") + data)


@pytest.mark.parametrize("tau_len", [0, 32])
def test_upload_mac_of_parts_is_the_tag_of_them_joined(tau_len: int) -> None:
    key = bytes(range(16))
    words = bytes(range(256)) * 250 + b"\x07\x08\x09"  # 64 KB and not a whole number of blocks
    tau = bytes(range(100, 100 + tau_len))
    want = _reference(key, 11, words + tau)
    assert relay.upload_mac(key, 11, (words, tau)) == want
    assert relay.upload_mac(key, 11, (memoryview(words), tau)) == want  # the words read in place
    assert relay.upload_mac(key, 11, words + tau) == want  # the joined bytes, as server 1 holds them
    assert relay.upload_mac(key, 11, (words[:1000], words[1000:] + tau)) == want  # any split
    assert relay.upload_mac(key, 12, (words, tau)) != want


def test_upload_mac_of_parts_still_refuses_a_bad_key() -> None:
    with pytest.raises(InvalidParameters):
        relay.upload_mac(b"k" * 15, 1, (b"words", b"tau"))


class _Small(enum.IntEnum):
    SEVEN = 7


@pytest.mark.parametrize("value", [0, 1, 12345, 2**63, 2**64 - 1, np.uint64(2**64 - 1), np.int32(5), _Small.SEVEN])
def test_check_user_accepts_what_check_int_accepts(value: object) -> None:
    got = check_user(value)
    assert got == check_int("user id", value, low=0, high=2**64 - 1)
    assert type(got) is int


@pytest.mark.parametrize("value", [-1, 2**64, 2**70, True, False, 1.0, "3", None, np.int64(-2), b"\x01"])
def test_check_user_refuses_what_check_int_refuses_with_its_message(value: object) -> None:
    with pytest.raises(InvalidParameters) as want:
        check_int("user id", value, low=0, high=2**64 - 1)
    with pytest.raises(InvalidParameters) as got:
        check_user(value)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("items", [2, 5, 12])  # of 15 buckets: mostly empty slots (the real rows taken), or not
@pytest.mark.parametrize("relay_on", [False, True])
def test_the_batch_refuses_exactly_the_users_with_a_word_in_an_empty_slot(items: int, relay_on: bool) -> None:
    proto = SecEmbProtocol(layout="cuckoo", relay=relay_on)
    cfg = proto.round_config(2, 300, 5, 7, 12, 32)
    gen = np.random.default_rng(items)  # public test data only
    n = 6
    indices = [cfg.cuckoo().assign(gen.choice(cfg.num_items, items, replace=False), gen)[0] for _ in range(n)]
    copies = []
    for _ in range(2):  # one batch, and each user on its own, with the same keys
        users = [proto.make_user(cfg, _rng=CtrDrbg(b"h30/%d" % u)) for u in range(n)]
        assert all(not isinstance(r, Exception) for r in SecEmbUser.retrieval_requests(users, indices,
                                                                                       _rng=CtrDrbg(b"keys")))
        for u in users:  # the sketch seed a retrieval reply would carry
            u._sketch_seed = bytes(16)
        copies.append(users)
    batch, single = copies
    filled = {1: [(0, 0)], 3: [(-1, 4)], 4: [(0, 1), (-1, 2), (1, 3)]}  # user -> (empty slot, column) set to nonzero
    gradients = []
    for u in range(n):
        rows = gen.integers(0, 2**32, (cfg.slots, cfg.width), dtype=np.uint32)
        empty = np.nonzero(indices[u] < 0)[0]
        assert empty.size and (2 * empty.size > cfg.slots) == (items < 7)
        rows[empty] = 0
        for slot, col in filled.get(u, []):
            rows[empty[slot], col] = 2**31 if u == 4 else 1
        gradients.append((rows, gen.integers(0, 2**32, cfg.dense_size, dtype=np.uint32)))
    got = SecEmbUser.uploads(batch, gradients)
    for u in range(n):
        if u in filled:
            assert isinstance(got[u], InvalidParameters) and str(got[u]) == "rows of empty slots must be zero"
            assert batch[u]._state is not None  # refused: its round state unchanged
        else:
            assert got[u] == single[u].upload(*gradients[u])
