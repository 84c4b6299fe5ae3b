"""Review (session 18b) of server 0's parse of a range of retrieval requests as the rows of one
array (``_parse_requests`` / ``_requests``: ``DPFKeys.from_rows``, the check words written to the
batch at once, ``checks.key_digests`` from the fixed shared header and the rows' slices,
``checks.challenge_seeds`` as one batch, the relay forward framed from the row; since session 29
the check words and challenge seeds are gone, the rest holds).

A batch in which some devices' requests have bad keys -- the header the parameters fix with a
root control bit that is not server 0's (the first key's, the last key's), or a key header
that is not the fixed one (parsed alone) -- between honest ones:

* the bad ones are refused (``InvalidMessage``) and leave nothing behind: no pending state,
  so each such device's genuine request is taken in the next batch;
* the honest devices' replies (with relay: the forwards to server 1) are byte for byte those
  of a batch without the bad requests, and with relay each forward's body hashes to the digest
  the device committed to in its request to server 1, which takes the forwards;
* the round ends the same: after everyone's uploads both servers' aggregate shares equal
  those of servers that never saw the bad requests.

Regression coverage (passes on the code reviewed)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from secemb.errors import InvalidMessage
from secemb.protocols.backends import ThreadBackend
from secemb.protocols.wire import HEADER_BYTES
from secemb.randomness import CtrDrbg

from round_setup import begin

M, W, P, MP, USERS = 29, 3, 7, 4, 6
BAD = {1: "first root bit", 3: "last root bit", 4: "key header"}  # user -> what is wrong with its request


def _round(relay: bool):  # noqa: ANN202 - test helper
    """Both servers of a round, the users and their requests (the same every call)."""
    proto, rc, _, _, s0, s1 = begin(layout="cuckoo", relay=relay, round_id=0, num_items=M, width=W, dense_size=P,
                                    m_prime=MP, seed=5, backend=ThreadBackend(2))
    users, reqs = [], []
    for u in range(USERS):
        user = proto.make_user(rc, _rng=CtrDrbg(bytes([u + 7]) * 16))
        rng = np.random.default_rng(u)
        idx = rc.cuckoo().assign(rng.choice(M, size=MP, replace=False), rng)[0]
        users.append(user)
        reqs.append(user.retrieval_request(idx))
    return rc, s0, s1, users, reqs


def _broken(message: bytes, what: str, slots: int) -> bytes:
    out = bytearray(message)
    roots = HEADER_BYTES + 49  # the key header (49 bytes) after the message's
    at = {"first root bit": roots, "last root bit": roots + 16 * (slots - 1), "key header": HEADER_BYTES + 45}[what]
    out[at] ^= 1
    return bytes(out)


def _retrieve(s0, s1, reqs, users: list[int], relay: bool, to_server0: dict[int, bytes] | None = None):  # noqa: ANN001, ANN202
    """One batch of ``users``' retrievals at both servers (server 1 gets the requests of the users
    server 0 took): server 0's outputs (replies or, with relay, forwards) and each taken user's
    (reply0, reply1)."""
    sent = [(u, (to_server0 or {}).get(u, reqs[u][0])) for u in users]
    out0 = s0.handle_retrieval_many(sent)
    taken = [u for u, a in zip(users, out0, strict=True) if isinstance(a, bytes)]  # server 1 gets these users'
    out1 = s1.handle_retrieval_many([(u, reqs[u][1]) for u in taken])
    if not relay:
        return out0, {u: (out0[users.index(u)], b) for u, b in zip(taken, out1, strict=True)}
    fwd = [(u, f) for u, f in zip(users, out0, strict=True) if isinstance(f, bytes)]
    answers = s1.relay_retrieval_many(fwd)
    assert all(isinstance(a, bytes) for a in answers)
    replies = s0.complete_retrieval_many([(u, a) for (u, _), a in zip(fwd, answers, strict=True)])
    return out0, {u: (r, None) for (u, _), r in zip(fwd, replies, strict=True)}


def _finish(rc, s0, s1, users, replies: dict[int, tuple[bytes, bytes | None]]) -> tuple[bytes, bytes]:  # noqa: ANN001
    """Everyone uploads (a fixed gradient per user; without relay); both aggregate shares."""
    for u, (r0, r1) in sorted(replies.items()):
        rows = users[u].retrieval_result(r0, r1)
        grad = np.where(np.asarray(users[u]._real)[:, None], rows % rc.dtype.type(5), rc.dtype.type(0))
        m0, m1 = users[u].upload(grad.astype(rc.dtype), np.full(P, u, rc.dtype))
        assert s0.handle_upload(u, m0) is None and s1.handle_upload(u, m1) is None
    return s0.aggregate_share(), s1.aggregate_share()


@pytest.mark.parametrize("relay", [False, True])
def test_bad_keys_in_a_batch_refuse_only_themselves_and_leave_nothing_behind(relay: bool) -> None:
    rc, s0, s1, users, reqs = _round(relay)
    _, ref0, ref1, ref_users, ref_reqs = _round(relay)
    assert ref_reqs == reqs  # the same requests: the comparison is fair
    good = [u for u in range(USERS) if u not in BAD]
    broken = {u: _broken(reqs[u][0], what, rc.slots) for u, what in BAD.items()}
    out0, replies = _retrieve(s0, s1, reqs, list(range(USERS)), relay, broken)
    want0, ref_replies = _retrieve(ref0, ref1, reqs, good, relay)
    for u in BAD:
        assert isinstance(out0[u], InvalidMessage), (u, out0[u])
        assert ("root control bit" in str(out0[u])) == (BAD[u] != "key header"), out0[u]  # each path taken
        assert u not in s0._pending
    assert [out0[u] for u in good] == want0  # replies or forwards, byte for byte
    assert replies == ref_replies
    if relay:  # each forward is what the device committed to in its request to server 1
        for u in good:
            # (the digest, then the device's 16-byte sigma: verified uploads, session 29)
            assert hashlib.sha256(out0[u][HEADER_BYTES:]).digest() == reqs[u][1][-48:-16]
    # the refused devices' genuine requests are taken next, in both rounds
    later = sorted(BAD)
    _, more = _retrieve(s0, s1, reqs, later, relay)
    _, ref_more = _retrieve(ref0, ref1, reqs, later, relay)
    assert more == ref_more and sorted(more) == later
    if not relay:
        assert _finish(rc, s0, s1, users, replies | more) == _finish(rc, ref0, ref1, ref_users, ref_replies | ref_more)
