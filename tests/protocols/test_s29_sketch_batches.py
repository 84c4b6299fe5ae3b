"""The sketch check's batched server steps (session 29, helper B, issue 34: the servers' cost): the
round's per-device HMACs (``checks.sketch_seeds``, ``sketch_halves``, ``query_seeds``) and bindings
(``checks.bindings``) as two SHA-256 batches, on both hashing paths, against :mod:`hmac` and
``checks.binding``; server 0's intake reading a batch's proof shares as one buffer refuses exactly
the uploads :func:`~secemb.fss.sketchproof.check_message` refuses, in the batch's order (a user listed
twice whose first upload is refused still uploads with its second; a ``bytearray`` message is
checked on its own)."""

from __future__ import annotations

import hmac
import secrets
from typing import Any

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.fss import kernels
from secemb.fss.field import P
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.protocols.secemb.checks import binding, bindings, query_seeds, sketch_halves, sketch_seeds
from secemb.protocols.secemb.sizes import sketch_params


@pytest.fixture(params=["numba", "numpy"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numba" and not kernels.available():
        pytest.skip("numba kernels unavailable")
    monkeypatch.setattr(kernels, "BACKEND", request.param)
    return str(request.param)


def _u64(v: int) -> bytes:
    return v.to_bytes(8, "little")


def test_batched_hmacs_and_bindings_are_hmac_and_binding(backend: str) -> None:
    s_round = secrets.token_bytes(32)
    users = [0, 1, 943, 2**63 + 5, 2**64 - 1]
    digests = [secrets.token_bytes(32) for _ in users]
    assert sketch_seeds(s_round, 9, users, digests) == [
        hmac.digest(s_round, b"secemb-sketch" + _u64(9) + _u64(u) + d, "sha256")[:16]
        for u, d in zip(users, digests, strict=True)]
    assert sketch_halves(s_round, 9, users, digests) == [
        tuple(hmac.digest(s_round, b"secemb-sketch-half" + bytes([b]) + _u64(9) + _u64(u) + d, "sha256")[:16]
              for b in (0, 1)) for u, d in zip(users, digests, strict=True)]
    assert query_seeds(s_round, 9, users) == [
        hmac.digest(s_round, b"secemb-sketch-query" + _u64(9) + _u64(u), "sha256")[:16] for u in users]
    seeds, sigmas = [secrets.token_bytes(16) for _ in users], [secrets.token_bytes(16) for _ in users]
    assert bindings(9, seeds, sigmas) == [binding(9, c, s) for c, s in zip(seeds, sigmas, strict=True)]
    assert query_seeds(s_round, 9, []) == [] and bindings(9, [], []) == []


@pytest.mark.parametrize(("seeds", "sigmas"), [([b"c" * 16], []), ([b"c" * 15], [b"s" * 16]),
                                               ([b"c" * 16], [b"s" * 17])])
def test_bindings_refuse_other_lengths(seeds: list[bytes], sigmas: list[bytes]) -> None:
    with pytest.raises(InvalidParameters):
        bindings(1, seeds, sigmas)


@pytest.mark.parametrize("relay", [False, True])
def test_intake_refuses_exactly_the_bad_proof_shares_in_order(relay: bool) -> None:
    proto = SecEmbProtocol(layout="cuckoo", relay=relay, verify=True)
    cfg = proto.round_config(3, 64, 2, 2, 6)
    gen = np.random.default_rng(3)  # public test data
    table = gen.integers(0, 1 << 20, (64, 2)).astype(cfg.dtype)
    key = secrets.token_bytes(32)
    s0: Any = proto.make_server(0, peer_key=key)
    s1: Any = proto.make_server(1, peer_key=key)
    for s in (s0, s1):
        s.begin_round(cfg, table)
    uploads = []
    for uid in range(4):
        user = SecEmbUser(cfg, relay=relay, verify=True)
        slots = place(cfg, gen.choice(64, 3, replace=False), gen).indices
        r0, r1 = user.retrieval_request(slots)
        if relay:
            assert s1.handle_retrieval(uid, r1) is None
            replies = (s0.complete_retrieval(uid, s1.relay_retrieval(uid, s0.handle_retrieval(uid, r0))), None)
        else:
            replies = (s0.handle_retrieval(uid, r0), s1.handle_retrieval(uid, r1))
        user.retrieval_result(*replies)
        rows = np.zeros((cfg.slots, 2), cfg.dtype)
        rows[slots >= 0] = 1
        uploads.append(user.upload(rows, np.zeros(2, cfg.dtype))[0])
    proof = sketch_params(cfg).proof_bytes
    at = len(uploads[0]) - proof

    def with_element(msg: bytes, k: int, value: int) -> bytes:
        return msg[: at + 8 * k] + value.to_bytes(8, "little") + msg[at + 8 * k + 8 :]

    batch = [(0, with_element(uploads[0], 0, P)),  # refused; its second upload below is taken
             (1, bytearray(with_element(uploads[1], proof // 8 - 1, 2**64 - 1))),  # opened on its own, refused
             (0, uploads[0]),
             (2, with_element(uploads[2], 3, P - 1)),  # an element below p: no fault of the intake's (taken)
             (3, uploads[3][:-1]),  # a byte short
             (2, uploads[2])]  # already uploaded
    out = s0.handle_upload_many(batch)
    assert [type(o).__name__ for o in out] == ["InvalidMessage", "InvalidMessage", type(out[2]).__name__,
                                               type(out[3]).__name__, "InvalidMessage", "ProtocolError"]
    assert not isinstance(out[2], Exception) and not isinstance(out[3], Exception)
    assert "sketch proof: an element is not below p" in str(out[0]) and "sketch proof" in str(out[1])
    assert isinstance(out[5], ProtocolError) and isinstance(out[4], InvalidMessage)
    with pytest.raises(ProtocolError):  # user 0 uploaded (its second message)
        s0.handle_upload(0, uploads[0])
    s0.handle_upload(1, uploads[1])  # user 1's honest upload is still taken
