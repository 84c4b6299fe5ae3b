"""Review of session 18's relay batches (server 1's ``relay_retrieval_many`` and
``relay_upload_many``, fed by server 0's forwards as one batch): what a deviating server 0
gains by forging or replaying one forward of a batch -- another user's forward under a
user's id (a swap), a forward of another round, one for a user that sent server 1 no roots,
one forward twice, one absorbed in an earlier batch.  Each refuses only itself (a swap fails
the device's authentication: ``RelayTampered``), the other users' masked answers and the
aggregate are byte for byte those of a batch without it, and the refused users keep their
state: their genuine forwards are taken afterwards.  Regression coverage (passes on the code
reviewed); test_upload_many_role covers an altered word and a user listed twice."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from secemb.errors import InvalidMessage, ProtocolError, RelayTampered

sys.path[:0] = [str(Path(__file__).parents[1] / "protocols")]  # the helpers below
from test_batched_parse import _servers  # noqa: E402
from test_upload_many_role import USERS, _retrieved  # noqa: E402


def _other_round(message: bytes, round_id: int) -> bytes:
    """``message`` with the round id of its header (u64 at offset 16) replaced."""
    return message[:16] + round_id.to_bytes(8, "little") + message[24:]


def _relayed():  # noqa: ANN202 - test helper
    """Both relay servers after users 0-3 sent server 1 their roots (user 4 did not) and every
    user's request reached server 0, and server 0's forwards of all five."""
    s0, s1, reqs = _servers(True, "cuckoo")
    assert s1.handle_retrieval_many([(u, q[1]) for u, q in enumerate(reqs[:4])]) == [None] * 4
    fwd = s0.handle_retrieval_many([(u, q[0]) for u, q in enumerate(reqs)])
    assert all(isinstance(f, bytes) for f in fwd)
    return s1, fwd


def test_forged_and_replayed_key_forwards_refuse_only_themselves() -> None:
    ref1, ref_fwd = _relayed()
    want = ref1.relay_retrieval_many([(0, ref_fwd[0]), (2, ref_fwd[2]), (1, ref_fwd[1]), (3, ref_fwd[3])])
    s1, fwd = _relayed()
    assert fwd == ref_fwd  # the same requests: the comparison is fair
    out = s1.relay_retrieval_many([(1, fwd[3]), (0, fwd[0]), (4, fwd[4]), (3, _other_round(fwd[3], 5)),
                                   (2, fwd[2]), (0, fwd[0])])
    assert isinstance(out[0], RelayTampered)  # user 3's keys under user 1's id: not what user 1 committed to
    assert isinstance(out[2], ProtocolError) and "no retrieval request of user 4" in str(out[2])  # no roots
    assert isinstance(out[3], InvalidMessage)  # another round's header
    assert isinstance(out[5], ProtocolError)  # user 0 again
    assert [out[1], out[4]] == want[:2]
    # users 1 and 3 were refused without a trace: their genuine forwards are answered now
    assert s1.relay_retrieval_many([(1, fwd[1]), (3, fwd[3])]) == want[2:]
    assert isinstance(s1.relay_retrieval_many([(2, fwd[2])])[0], ProtocolError)  # answered once only


def test_forged_and_replayed_upload_forwards_refuse_only_themselves() -> None:
    include = list(range(USERS))
    r0, r1, ups_r, _ = _retrieved(True, "cuckoo", batched=True)
    fr = r0.handle_upload_many([(u, up[0]) for u, up in enumerate(ups_r)])
    assert r1.relay_upload_many(list(enumerate(fr))) == [None] * USERS
    want = r1.aggregate_share(include)
    s0, s1, ups, _ = _retrieved(True, "cuckoo", batched=True)
    f = s0.handle_upload_many([(u, up[0]) for u, up in enumerate(ups)])
    assert f == fr
    assert s1.relay_upload_many([(0, f[0])]) == [None]
    out = s1.relay_upload_many([(1, f[2]), (3, f[3]), (0, f[0]), (4, _other_round(f[4], 7)), (2, f[1])])
    assert isinstance(out[0], RelayTampered)  # user 2's words under user 1's id: user 1's MAC key fails them
    assert out[1] is None
    assert isinstance(out[2], ProtocolError) and "already uploaded" in str(out[2])  # absorbed in a batch before
    assert isinstance(out[3], InvalidMessage)  # another round's header
    assert isinstance(out[4], RelayTampered)  # and user 1's under user 2's
    assert s1.included_users() == [0, 3]
    assert s1.relay_upload_many([(2, f[2]), (1, f[1]), (4, f[4])]) == [None] * 3  # nothing of them was kept
    assert s1.aggregate_share(include) == want
    assert all(np.array_equal(a, b) for a, b in zip(s0.combine(want, include), r0.combine(want, include),
                                                    strict=True))
