"""FedMF w/ Top-K (``fedmf-topk``, GREC Table 9's baseline): the selection, K from the ratio,
an exact aggregate of the kept entries, the upload size, and refusals."""

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.protocols import get_protocol
from secemb.protocols.topk import top_k, top_k_count
from secemb.protocols.wire import HEADER_BYTES
from secemb.randomness import CtrDrbg
from secemb.ring import FixedPoint

FP = FixedPoint(32, 16)
M, W, P = 12, 4, 2


def test_top_k_selection_by_hand():
    signed = np.array([0, 5, -7, 0, 3, -5, 1, 0], np.int64)
    idx, vals = top_k(signed.astype(np.uint32), 3)
    assert idx.tolist() == [1, 2, 5] and idx.dtype == np.dtype("<u4")  # |-7|, then the two |5|s
    assert vals.view(np.int32).tolist() == [5, -7, -5]
    idx, vals = top_k(signed.astype(np.uint32), 2)
    assert idx.tolist() == [1, 2]  # |5| at 1 and |-5| at 5 tie: the lower index stays
    # fewer non-zero entries than K: all of them, then index 0 with value 0
    idx, vals = top_k(np.array([0, 0, 9, 0], np.uint32), 3)
    assert idx.tolist() == [2, 0, 0] and vals.tolist() == [9, 0, 0]


def test_top_k_ranks_64_bit_words_exactly():
    # 2^60 and 2^60 + 1 are the same float64: the larger magnitude must still win, wherever it sits
    big = 1 << 60
    words = np.array([big, -(big + 1), big - 1, 0], np.int64).view(np.uint64)
    idx, vals = top_k(words, 1)
    assert idx.tolist() == [1] and vals.view(np.int64).tolist() == [-(big + 1)]
    # the most negative word has the largest magnitude of all
    words = np.array([(1 << 63) - 1, -(1 << 63), 5], np.int64).view(np.uint64)
    assert top_k(words, 1)[0].tolist() == [1]
    assert top_k(words, 2)[0].tolist() == [0, 1]


def test_k_is_the_ratio_of_the_users_update_by_default():
    proto = get_protocol("fedmf-topk")
    rc = proto.round_config(0, 1682, 65, 1, 200)
    # m' = 200 rows of 65 words; 4-byte index + 4-byte share per kept entry
    assert proto.k(rc) == top_k_count(rc, 16.0) == 200 * 65 * 4 // (16 * 8) == 406
    assert proto.upload_body_bytes(rc, 0) == 8 * 406 + 4
    plain = get_protocol("plaintext").message_body_bytes("upload", rc, party=0, num_users=1)
    assert 16.0 <= (plain - 4) / (proto.upload_body_bytes(rc, 0) - 4) < 16.1  # K rounded down


def test_k_is_the_ratio_of_secfedrecs_item_share_with_the_table_basis():
    proto = get_protocol("fedmf-topk", basis="table")
    rc = proto.round_config(0, 1682, 65, 1, 200)
    assert proto.k(rc) == top_k_count(rc, 16.0, "table") == 1682 * 65 * 4 // (16 * 8)
    assert proto.upload_body_bytes(rc, 0) == 8 * (1682 * 65 * 4 // 128) + 4
    secfedrec = get_protocol("secfedrec").upload_body_bytes(rc, 0)
    assert 16.0 <= (secfedrec - 4) / (proto.upload_body_bytes(rc, 0) - 4) < 16.01  # K rounded down


def _round(users, ratio):
    """One round through the roles (``basis="table"``); the decoded (sparse, dense) aggregate and
    the uploads' lengths."""
    proto = get_protocol("fedmf-topk", ratio=ratio, basis="table")
    rc = proto.round_config(0, M, W, P, 3)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    table = np.zeros((M, W), np.uint32)
    s0.begin_round(rc, table)
    s1.begin_round(rc, table)
    sizes = []
    for u, (idx, rows, dense) in enumerate(users):
        user = proto.make_user(rc, _rng=CtrDrbg(bytes([u + 1]) * 16))
        q0, q1 = user.retrieval_request(idx)
        user.retrieval_result(s0.handle_retrieval(u, q0), s1.handle_retrieval(u, q1))
        u0, u1 = user.upload(FP.encode(rows), FP.encode(dense))
        sizes.append((len(u0), len(u1)))
        s0.handle_upload(u, u0)
        s1.handle_upload(u, u1)
    sp, de = s0.combine(s1.aggregate_share())
    return FP.decode(sp), FP.decode(de), sizes, proto, rc


def test_the_aggregate_is_the_sum_of_each_users_kept_entries():
    g = np.random.default_rng(3)
    users = [(np.array(i), g.normal(0, 1, (3, W)).round(3), g.normal(0, 1, P).round(3))
             for i in ([0, 4, 7], [4, 5, 11], [1, 2, 3])]
    # ratio 4 on m w = 48 words of 4 bytes: K = floor(48 * 4 / (4 * 8)) = 6 of each user's 12 entries
    sp, de, sizes, proto, rc = _round(users, 4.0)
    expected = np.zeros((M, W))
    for idx, rows, _ in users:
        full = np.zeros((M, W))
        full[idx] = rows
        flat = full.reshape(-1)
        keep = np.argsort(-np.abs(flat), kind="stable")[:6]  # the test's own selection
        kept = np.zeros_like(flat)
        kept[keep] = flat[keep]
        expected += kept.reshape(M, W)
    assert np.allclose(sp, expected, atol=3 * 2**-16)
    assert np.count_nonzero(sp) <= 18
    assert np.allclose(de, sum(d for _, _, d in users), atol=3 * 2**-16)
    body = 4 * 6 + 4 * 6 + 4 * P  # K indices, K value shares, the dense share
    assert proto.upload_body_bytes(rc, 0) == proto.upload_body_bytes(rc, 1) == body
    assert all(a == b == HEADER_BYTES + body for a, b in sizes)


def test_a_large_ratio_keeps_one_entry_and_a_small_ratio_keeps_everything():
    rows = np.array([[0.5, -2.0, 0.25, 1.0]] * 3)
    users = [(np.array([0, 1, 2]), rows, np.zeros(P))]
    sp, _, _, _, _ = _round(users, 1000.0)  # K = 1: only the largest |value| of the first row
    expected = np.zeros((M, W))
    expected[0, 1] = -2.0
    assert np.allclose(sp, expected)
    sp, _, _, _, _ = _round(users, 1.5)  # K = 32 >= 12 entries: lossless
    expected = np.zeros((M, W))
    expected[:3] = rows
    assert np.allclose(sp, expected)


@pytest.mark.parametrize("ratio", [1.0, 0.5, float("inf"), float("nan"), True, "16"])
def test_bad_ratios_are_refused(ratio):
    with pytest.raises(InvalidParameters, match="ratio"):
        get_protocol("fedmf-topk", ratio=ratio)


def test_a_bad_basis_is_refused():
    with pytest.raises(InvalidParameters, match="basis"):
        get_protocol("fedmf-topk", basis="rows")


def test_an_index_beyond_the_table_is_refused_and_changes_nothing():
    proto = get_protocol("fedmf-topk", ratio=4.0, basis="table")
    rc = proto.round_config(0, M, W, P, 3)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    s0.begin_round(rc, np.zeros((M, W), np.uint32))
    s1.begin_round(rc, np.zeros((M, W), np.uint32))
    user = proto.make_user(rc, _rng=CtrDrbg(b"\x09" * 16))
    q0, q1 = user.retrieval_request(np.array([0, 1, 2]))
    user.retrieval_result(s0.handle_retrieval(0, q0), s1.handle_retrieval(0, q1))
    up0, _ = user.upload(FP.encode(np.ones((3, W))), FP.encode(np.zeros(P)))
    bad = bytearray(up0)
    bad[HEADER_BYTES:HEADER_BYTES + 4] = (M * W).to_bytes(4, "little")  # one past the item table
    before = s0._acc.copy()
    with pytest.raises(InvalidMessage, match="index"):
        s0.handle_upload(0, bytes(bad))
    assert np.array_equal(s0._acc, before)
    s0.handle_upload(0, up0)  # the user's real upload is still taken
