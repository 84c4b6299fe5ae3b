"""A SecEmb server role keeps its table-sized work arrays between rounds (session 27, helper B):
the close's bucket form (``_close_buffer``) and the last round's running aggregate, which the
next round's first batch folds into (``_fold_target``).  What a reused array held must never
reach the next round: a role kept over rounds gives, in its second round, the same aggregate
shares, bit for bit, as two new servers given the same messages, and the reconstruction is the
plain sum of that round's uploads -- with silent users, a subset included, a thread backend, a
change of shape between rounds, and two evaluations in flight at once."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.protocols.backends import Backend, ThreadBackend
from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer
from secemb.randomness import CtrDrbg

W, P, MP = 5, 2, 12


def _users(proto: SecEmbProtocol, cfg, seed: int, n: int, uploaders: int):
    """``n`` users of round ``cfg``, per user ``(user, slots, requests, grads, dense)``: its
    retrieval requests to both servers and, for the first ``uploaders`` (``None`` for the others,
    silent), the gradients (ring, zero at empty slots) and dense values it will upload."""
    rng = np.random.default_rng(seed)
    out = []
    for u in range(n):
        user = proto.make_user(cfg, _rng=CtrDrbg(bytes([seed, u]) * 8))
        slots, _ = cfg.cuckoo().assign(rng.choice(cfg.num_items, MP, replace=False), rng)
        grads = np.zeros((cfg.slots, W), np.uint32)
        real = slots >= 0
        grads[real] = rng.integers(0, 2**32, (int(real.sum()), W), dtype=np.uint64).astype(np.uint32)
        dense = rng.integers(0, 2**32, P, dtype=np.uint64).astype(np.uint32)
        out.append((user, slots, user.retrieval_request(slots), grads if u < uploaders else None, dense))
    return out


def _retrieve(proto: SecEmbProtocol, s0: SecEmbServer, s1: SecEmbServer, u: int, requests: tuple) -> tuple:
    """User ``u``'s retrieval at ``s0``, ``s1``: the replies to finish it with."""
    r0, r1 = requests
    if proto.relay:
        assert s1.handle_retrieval(u, r1) is None
        return s0.complete_retrieval(u, s1.relay_retrieval(u, s0.handle_retrieval(u, r0))), None
    return s0.handle_retrieval(u, r0), s1.handle_retrieval(u, r1)


def _upload(proto: SecEmbProtocol, s0: SecEmbServer, s1: SecEmbServer, u: int, uploads: tuple) -> None:
    up0, up1 = uploads
    forward = s0.handle_upload(u, up0)
    if proto.relay:
        s1.relay_upload(u, forward)
    else:
        s1.handle_upload(u, up1)


def _round(proto: SecEmbProtocol, pairs: list[tuple[SecEmbServer, SecEmbServer]], cfg, seed: int, n: int,
           uploaders: int, include: list[int] | None) -> tuple[list[tuple[bytes, bytes]], np.ndarray, np.ndarray]:
    """Round ``cfg`` at every pair of ``pairs`` with the same messages: ``n`` users retrieve, the
    first ``uploaders`` upload, the close over ``include``.  Per pair its two aggregate shares,
    and the plain sums over the included uploads (computed here, not by the servers)."""
    table = np.random.default_rng(seed + 100).integers(0, 2**32, (cfg.num_items, W), dtype=np.uint64)
    for s0, s1 in pairs:
        s0.begin_round(cfg, table.astype(np.uint32))
        s1.begin_round(cfg, table.astype(np.uint32))
    users = _users(proto, cfg, seed, n, uploaders)
    expected, expected_dense = np.zeros((cfg.num_items, W), np.uint32), np.zeros(P, np.uint32)
    chosen = set(range(uploaders)) if include is None else set(include)
    for u, (user, slots, requests, grads, dense) in enumerate(users):
        replies = [_retrieve(proto, s0, s1, u, requests) for s0, s1 in pairs]
        if grads is None:
            continue  # silent: retrieved, never uploads
        rows = user.retrieval_result(*replies[0])
        assert np.array_equal(rows[slots >= 0], table.astype(np.uint32)[slots[slots >= 0]])
        uploads = user.upload(grads, dense)
        for s0, s1 in pairs:
            _upload(proto, s0, s1, u, uploads)
        if u in chosen:
            np.add.at(expected, slots[slots >= 0], grads[slots >= 0])
            expected_dense += dense
    shares = []
    for s0, s1 in pairs:
        share1 = s1.aggregate_share(include)
        share0 = s0.aggregate_share(include)
        sparse, dense_sum = s0.combine(share1, include)
        assert np.array_equal(sparse, expected) and np.array_equal(dense_sum, expected_dense)
        sparse1, dense1 = s1.combine(share0, include)  # server 1 reconstructs the same
        assert np.array_equal(sparse1, expected) and np.array_equal(dense1, expected_dense)
        shares.append((share0, share1))
    return shares, expected, expected_dense


def _pair(proto: SecEmbProtocol) -> tuple[SecEmbServer, SecEmbServer]:
    return proto.make_server(0), proto.make_server(1)


@pytest.mark.parametrize("relay", [True, False], ids=["relay", "no-relay"])
@pytest.mark.parametrize("workers", [None, 3], ids=["serial", "threads"])
def test_a_role_kept_over_rounds_gives_a_new_roles_shares(relay: bool, workers: int | None) -> None:
    backend: Backend | None = None if workers is None else ThreadBackend(workers)
    try:
        proto = SecEmbProtocol(layout="cuckoo", relay=relay, backend=backend)
        kept = _pair(proto)
        # round 1: every user uploads, every one included; its arrays are left with its values
        _round(proto, [kept], proto.round_config(1, 300, W, P, MP), seed=1, n=4, uploaders=4, include=None)
        close_work = [s._close_work for s in kept]
        first_sums = [s._sparse for s in kept]
        assert all(w is not None for w in close_work)
        # round 2, other users and values: one silent user, one uploader left out
        shares, expected, _ = _round(proto, [kept, _pair(proto)], proto.round_config(2, 300, W, P, MP), seed=2,
                                     n=5, uploaders=4, include=[0, 2, 3])
        assert shares[0] == shares[1]  # the kept pair's shares are the new pair's, byte for byte
        assert expected.any()
        # the arrays were reused, not made again: the round-2 close wrote over round 1's
        assert [s._close_work for s in kept] == close_work
        assert all(s._sparse is first for s, first in zip(kept, first_sums, strict=True))
    finally:
        if backend is not None:
            backend.close()


def test_a_change_of_shape_between_rounds_makes_the_arrays_again() -> None:
    proto = SecEmbProtocol(layout="cuckoo", relay=True)
    kept = _pair(proto)
    _round(proto, [kept], proto.round_config(1, 300, W, P, MP), seed=3, n=3, uploaders=3, include=None)
    before = [s._close_work for s in kept]
    shares, _, _ = _round(proto, [kept, _pair(proto)], proto.round_config(2, 200, W, P, MP), seed=4, n=3,
                          uploaders=2, include=None)
    assert shares[0] == shares[1]
    assert all(s._close_work is not b and s._close_work.shape == s._sparse.shape for s, b in zip(kept, before,
                                                                                                  strict=True))


def test_the_kept_fold_target_goes_to_one_of_two_evaluations_in_flight() -> None:
    """Two batches evaluated before either commits (a deployment evaluates outside its lock):
    had both folded into the kept array, the first commit would adopt the second's sums."""
    proto = SecEmbProtocol(layout="cuckoo", relay=False)
    kept, new = _pair(proto), _pair(proto)
    _round(proto, [kept], proto.round_config(1, 300, W, P, MP), seed=5, n=3, uploaders=3, include=None)
    cfg = proto.round_config(2, 300, W, P, MP)
    table = np.random.default_rng(6).integers(0, 2**32, (300, W), dtype=np.uint64).astype(np.uint32)
    for s in (*kept, *new):
        s.begin_round(cfg, table)
    users = _users(proto, cfg, 7, 4, 4)
    replies: dict[int, list] = {}  # the kept pair's, per party: what each device reads (its sketch seed)
    for s0, s1 in (kept, new):
        for s, part in ((s0, 0), (s1, 1)):
            first = s.evaluate_retrieval_many([(u, users[u][2][part]) for u in (0, 1)])
            second = s.evaluate_retrieval_many([(u, users[u][2][part]) for u in (2, 3)])
            got = first() + second()
            assert not any(isinstance(r, Exception) for r in got)
            replies.setdefault(part, got)
    expected = np.zeros((300, W), np.uint32)
    for u, (user, slots, _, grads, dense) in enumerate(users):
        user.retrieval_result(replies[0][u], replies[1][u])
        uploads = user.upload(grads, dense)
        for s0, s1 in (kept, new):
            _upload(proto, s0, s1, u, uploads)
        np.add.at(expected, slots[slots >= 0], grads[slots >= 0])
    got = []
    for s0, s1 in (kept, new):
        share1 = s1.aggregate_share()
        got.append((s0.aggregate_share(), share1))
        assert np.array_equal(s0.combine(share1)[0], expected)
    assert got[0] == got[1]
