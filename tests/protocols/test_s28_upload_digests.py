"""The servers' per-user upload digests (:meth:`SecEmbServer.upload_digests`) against the
documented ``SHA-256(b"secemb-verify-upload" || u64 round || u64 user || K || CW || C)`` (since
session 29 without the check values ``V``: the sketch check is decided apart), written out here with
hashlib over what the server kept of the user, in every kind of round (relay or not, bounded or not,
both rings), and for correction words that are not C-contiguous views.  Written for hashing the
users as one batch (:func:`~secemb.fss.hashing.sha256_many`, issue 34, session 28), which was
measured and dropped (docs/results.md, "Verified uploads"); it holds for any way of hashing."""

from __future__ import annotations

import dataclasses
import hashlib
import struct

import numpy as np
import pytest

from secemb.errors import ProtocolError
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer
from secemb.randomness import CtrDrbg

M, W, P = 150, 3, 4
UIDS = [3, 8, 21, 40, 41]


def _uploaded_round(layout: str, relay: bool, ring_bits: int, bound: bool) -> tuple[SecEmbServer, SecEmbServer, int]:
    """Both servers of a round (id 9) into which every device of :data:`UIDS` has uploaded, the
    requests and uploads taken as one batch at each server."""
    proto = SecEmbProtocol(layout=layout, relay=relay, verify=True, bound=bound,
                           users_per_round=len(UIDS) if bound else None)
    cfg = proto.round_config(9, num_items=M, width=W, dense_size=P, m_prime=5, ring_bits=ring_bits)
    gen = np.random.default_rng(ring_bits + 2 * relay + bound)  # public test data only
    table = gen.integers(0, 1 << 20, (M, W)).astype(cfg.dtype)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    assert isinstance(s0, SecEmbServer) and isinstance(s1, SecEmbServer)
    for s in (s0, s1):
        s.begin_round(cfg, table)
    users = [proto.make_user(cfg, _rng=CtrDrbg(b"digests/%d" % uid)) for uid in UIDS]
    slots = [place(cfg, gen.choice(M, 4, replace=False), gen).indices for _ in UIDS]
    reqs = [u.retrieval_request(x) for u, x in zip(users, slots, strict=True)]
    if relay:
        assert s1.handle_retrieval_many([(u, r[1]) for u, r in zip(UIDS, reqs, strict=True)]) == [None] * len(UIDS)
        fwd = s0.handle_retrieval_many([(u, r[0]) for u, r in zip(UIDS, reqs, strict=True)])
        answers = s1.relay_retrieval_many(list(zip(UIDS, fwd, strict=True)))  # type: ignore[attr-defined]
        for user, reply in zip(users, s0.complete_retrieval_many(list(zip(UIDS, answers, strict=True))),  # type: ignore[attr-defined]
                               strict=True):
            user.retrieval_result(reply, None)
    else:
        a0 = s0.handle_retrieval_many([(u, r[0]) for u, r in zip(UIDS, reqs, strict=True)])
        a1 = s1.handle_retrieval_many([(u, r[1]) for u, r in zip(UIDS, reqs, strict=True)])
        for user, x, y in zip(users, a0, a1, strict=True):
            user.retrieval_result(x, y)
    ups = []
    for uid, user, x in zip(UIDS, users, slots, strict=True):
        rows = np.zeros((cfg.slots, W), cfg.dtype)
        rows[x >= 0] = uid  # small values: within any bound
        ups.append(user.upload(rows, np.full(P, uid, cfg.dtype)))
    fwds = s0.handle_upload_many([(uid, up[0]) for uid, up in zip(UIDS, ups, strict=True)])
    if relay:
        for uid, f in zip(UIDS, fwds, strict=True):
            s1.relay_upload(uid, f)  # type: ignore[attr-defined]
    else:
        assert not any(isinstance(r, Exception) for r in s1.handle_upload_many(
            [(uid, up[1]) for uid, up in zip(UIDS, ups, strict=True)]))  # type: ignore[misc]
    return s0, s1, cfg.round_id


def _documented(server: SecEmbServer, round_id: int, user: int) -> bytes:
    """The digest of ``user`` by the documented formula, one hashlib object over the pieces."""
    got = server._absorbed[user]
    assert got.check is not None
    h = hashlib.sha256(b"secemb-verify-upload" + struct.pack("<QQ", round_id, user) + got.check.digest)
    if not server.relay:
        h.update(got.cw.astype(got.cw.dtype.newbyteorder("<")).tobytes())
    if got.commit is not None:
        h.update(got.commit)
    return h.digest()


KINDS = [(layout, relay, bits, bound) for layout, relay in [("full", False), ("cuckoo", True), ("cuckoo", False),
                                                            ("full", True)]
         for bits, bound in [(32, False), (64, False), (32, True)]]


@pytest.mark.parametrize(("layout", "relay", "ring_bits", "bound"), KINDS)
def test_each_digest_is_the_documented_hash(layout: str, relay: bool, ring_bits: int, bound: bool) -> None:
    """Both servers give every user the documented digest, the same at each, in the order asked
    (a user asked twice: the same digest); the commitment is hashed exactly where it is kept."""
    s0, s1, round_id = _uploaded_round(layout, relay, ring_bits, bound)
    ask = [UIDS[2], UIDS[0], UIDS[4], UIDS[0], UIDS[1], UIDS[3]]
    for s in (s0, s1):
        assert all((s._absorbed[u].commit is not None) == (bound and not relay) for u in UIDS)
        got = s.upload_digests(ask)
        assert got is not None and list(got) == list(dict.fromkeys(ask))
        assert got == {u: _documented(s, round_id, u) for u in ask}
    assert s0.upload_digests(UIDS) == s1.upload_digests(UIDS)
    assert s0.upload_digests([]) == {}


def test_correction_words_of_a_strided_view_are_hashed_as_their_values() -> None:
    """A user's correction words held as a reversed (not C-contiguous) view: it still gets the
    documented digest of their values (without relay the words are hashed)."""
    s0, _, round_id = _uploaded_round("cuckoo", False, 32, False)
    got = s0._absorbed
    c = UIDS[4]
    got[c] = dataclasses.replace(got[c], cw=np.ascontiguousarray(got[c].cw[::-1, ::-1])[::-1, ::-1])
    assert not got[c].cw.flags.c_contiguous
    digests = s0.upload_digests(UIDS)
    assert digests is not None and list(digests) == UIDS
    assert digests == {u: _documented(s0, round_id, u) for u in UIDS}


def test_a_user_that_did_not_upload_is_refused() -> None:
    s0, _, round_id = _uploaded_round("cuckoo", True, 32, False)
    with pytest.raises(ProtocolError, match=f"user 99 did not upload in round {round_id}"):
        s0.upload_digests([UIDS[0], 99])
