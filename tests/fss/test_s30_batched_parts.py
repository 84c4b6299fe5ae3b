"""Session 30 (issue 34): the range proof's joint-randomness parts hashed in batches.

Server 0's parts of its devices (:func:`rangeproof.hints_of`), server 1's
(:func:`rangeproof.seed_parts`) and a server's own parts in :func:`rangeproof.verifier_messages`
(where the caller does not give them) are hashed as one :func:`secemb.fss.hashing.sha256_many`
batch where the contexts are of one length (a protocol's are), else one hash a device; the joint
randomness ``jr`` made of them, one hash a device, ends each verifier message.  Either
way they must be the digests the module docstring specifies, which these tests compute with
:mod:`hashlib` from the specification's bytes (``SHA-256(domain || "part" || framed(party,
context, key, inputs))`` and ``SHA-256(domain || "joint" || framed(context, part_0, part_1))``),
on the SHA-NI kernel where it runs and on hashlib's path.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import kernels
from secemb.fss import rangeproof as R

DOMAIN = b"secemb/fss/rangeproof/v1/"
PARAMS = R.RangeParams(rows=6, bits=8, ring_bits=32)


def _framed(*items: bytes) -> bytes:
    return b"".join(len(x).to_bytes(8, "little") + x for x in items)


def _spec_part(party: int, context: bytes, key: bytes, inputs: bytes) -> bytes:
    return hashlib.sha256(DOMAIN + b"part" + _framed(bytes([party]), context, key, inputs)).digest()


def _spec_joint(context: bytes, part0: bytes, part1: bytes) -> bytes:
    return hashlib.sha256(DOMAIN + b"joint" + _framed(context, part0, part1)).digest()


@pytest.fixture(params=["sha-ni", "hashlib"])
def sha_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both of sha256_many's paths: the SHA-NI kernel (where it runs) and hashlib's rows."""
    if request.param == "sha-ni" and not kernels.sha_compiled():
        pytest.skip("the SHA-NI kernel needs a CPU with SHA-NI")
    if request.param == "hashlib":
        monkeypatch.setattr(kernels, "sha_compiled", lambda: False)
    return str(request.param)


def _contexts(n: int, mixed: bool) -> list[bytes]:
    """n contexts of one length (74 bytes, as the protocol's), or of different lengths."""
    return [os.urandom(74 + (i % 3 if mixed else 0)) for i in range(n)]


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_seed_parts_are_the_specified_digests(sha_path: str, n: int, mixed: bool) -> None:
    contexts, seeds = _contexts(n, mixed), [os.urandom(16) for _ in range(n)]
    got = R.seed_parts(contexts, seeds)
    assert got == [_spec_part(1, c, s, b"") for c, s in zip(contexts, seeds, strict=True)]
    assert got == [R.seed_part(c, s) for c, s in zip(contexts, seeds, strict=True)]


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_hints_of_are_the_specified_digests(sha_path: str, n: int, mixed: bool) -> None:
    contexts = _contexts(n, mixed)
    msgs = [os.urandom(PARAMS.message_bytes(0)) for _ in range(n)]  # hint_of reads the bytes, checks only the length
    head, size = 16 + R.PART_BYTES, 8 * PARAMS.witness_length
    got = R.hints_of(PARAMS, contexts, msgs)
    assert got == [_spec_part(0, c, m[:16], m[head : head + size]) for c, m in zip(contexts, msgs, strict=True)]
    assert got == [R.hint_of(PARAMS, c, m) for c, m in zip(contexts, msgs, strict=True)]


def test_no_devices() -> None:
    assert R.seed_parts([], []) == []
    assert R.hints_of(PARAMS, [], []) == []


def test_refusals() -> None:
    msg = bytes(PARAMS.message_bytes(0))
    with pytest.raises(InvalidMessage, match="message 1 for server 0"):
        R.hints_of(PARAMS, [b"a", b"b"], [msg, msg[:-1]])
    with pytest.raises(InvalidParameters, match="one context a message"):
        R.hints_of(PARAMS, [b"a"], [msg, msg])
    with pytest.raises(InvalidParameters, match="context must be bytes"):
        R.hints_of(PARAMS, ["a"], [msg])  # type: ignore[list-item]
    with pytest.raises(InvalidParameters, match="seed_1"):
        R.seed_parts([b"a", b"b"], [bytes(16), bytes(15)])
    with pytest.raises(InvalidParameters, match="seed_1"):
        R.seed_parts([b"a"], [bytes(16), bytes(16)])
    with pytest.raises(InvalidParameters, match="context must be bytes"):
        R.seed_parts([1], [bytes(16)])  # type: ignore[list-item]


def _proved(n: int, contexts: list[bytes]) -> tuple[list[tuple[bytes, bytes]], np.ndarray, np.ndarray]:
    """n honest proofs of small values (ring shares a, b) under ``contexts``."""
    gen = np.random.default_rng(5)  # public test values
    values = gen.integers(-100, 100, (n, PARAMS.rows)) % 2**32
    a = gen.integers(0, 2**32, (n, PARAMS.rows), dtype=np.uint64)
    b = (values.astype(np.uint64) - a) % np.uint64(2**32)
    return [R.prove(PARAMS, a[i], b[i], contexts[i]) for i in range(n)], a, b


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("given", [False, True])
def test_verifier_joint_randomness_is_the_specified_digest(sha_path: str, mixed: bool, given: bool) -> None:
    """Each server's verifier messages end with the joint randomness ``jr`` it used: the
    specification's digest of the device's context and both parts, whether this server's own part
    is computed in the call or given (``parts``); and the honest proofs pass."""
    n = 5
    contexts = _contexts(n, mixed)
    proofs, a, b = _proved(n, contexts)
    s0, s1 = R.parse(PARAMS, 0, [m0 for m0, _ in proofs]), R.parse(PARAMS, 1, [m1 for _, m1 in proofs])
    part0 = [_spec_part(0, c, m0[:16], m0[16 + R.PART_BYTES : 16 + R.PART_BYTES + 8 * PARAMS.witness_length])
             for c, (m0, _) in zip(contexts, proofs, strict=True)]
    part1 = [_spec_part(1, c, m1[:16], b"") for c, (_, m1) in zip(contexts, proofs, strict=True)]
    v0 = R.verifier_messages(PARAMS, 0, s0, a, contexts, b"q" * 16, parts=part0 if given else None)
    v1 = R.verifier_messages(PARAMS, 1, s1, b, contexts, b"q" * 16, parts=part1 if given else None)
    want = np.frombuffer(b"".join(_spec_joint(c, p0, p1) for c, p0, p1 in zip(contexts, part0, part1, strict=True)),
                         "<u8").reshape(n, 4)
    np.testing.assert_array_equal(v0[:, PARAMS.opened_length :], want)
    np.testing.assert_array_equal(v1[:, PARAMS.opened_length :], want)
    assert R.decide(PARAMS, v0, v1).all()
