"""SecEA's parties over bytes: exact averages through Paillier and the padded relay, dropouts,
refused messages, and what the server sees."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.protocols.secea.coding import SecEAParams
from secemb.sim.secea import Deployment
from secemb.randomness import CtrDrbg

KEY_BITS = 1024  # the smallest accepted; the default is 2048


def expected_average(params, entity, sets, rows):
    holders = [v for v, s in enumerate(sets) if entity in s]
    fixed = [np.rint(rows[v][list(sets[v]).index(entity)] * 2**params.frac_bits).astype(np.int64) for v in holders]
    scale = len(holders) * 2**params.frac_bits
    return [float(Fraction(sum(int(x[j]) for x in fixed), scale)) for j in range(params.dim)]


def make(n, t, d, sets, seed=0, k=None):
    params = SecEAParams(n, t, dim=d, parts=k)
    return params, Deployment(params, [np.array(s) for s in sets], key_bits=KEY_BITS, _rng=CtrDrbg(seed))


def test_paper_example_sets_through_paillier_give_the_averages():
    sets = [[10], [20], [10]]  # E1 = {e1}, E2 = {e2}, E3 = {e1}
    params, dep = make(3, 1, 2, sets)
    rows = [np.array([[1.5, -2.0]]), np.array([[3.0, 0.25]]), np.array([[0.5, 1.0]])]
    out = dep.round(1, rows)
    assert out[0].tolist() == [[1.0, -0.5]] and out[2].tolist() == [[1.0, -0.5]]
    assert out[1].tolist() == [[3.0, 0.25]]
    assert dep.union.tolist() == [10, 20]


def test_two_rounds_and_every_message_counted():
    sets = [[1, 2, 3], [2, 3, 4], [3, 4, 5]]
    params, dep = make(3, 1, 3, sets, seed=1)
    gen = np.random.default_rng(1)
    for round_id in (1, 2):
        rows = [gen.normal(size=(3, 3)) for _ in sets]
        out = dep.round(round_id, rows)
        for v, s in enumerate(sets):
            for i, e in enumerate(s):
                assert out[v][i].tolist() == expected_average(params, e, sets, rows)
    up, down = dep.traffic.up, dep.traffic.down
    assert all(up[v] > 0 and down[v] > 0 for v in range(3))
    assert sum(len(m) for m in dep.traffic.log) == sum(up.values()) + sum(down.values())


def test_upload_size_depends_on_the_number_of_entities_not_on_which():
    params, dep = make(3, 1, 2, [[1, 2], [7, 8], [2, 9]], seed=2)
    rows = [np.zeros((2, 2))] * 3
    uploads = dep.uploads(1, rows)
    assert len({len(b) for b in uploads.values()}) == 1


def test_dropout_after_sharing_tolerated_when_n_minus_1_answers_suffice():
    # N = 4, T = 1: K = 1, D = 2(K+T-1)+1 = 3 answers suffice; client 3 drops after uploading
    sets = [[1, 2], [2, 3], [1, 3], [1, 2, 3]]
    params, dep = make(4, 1, 2, sets, seed=3)
    assert params.needed_answers == 3
    gen = np.random.default_rng(3)
    rows = [gen.normal(size=(len(s), 2)) for s in sets]
    out = dep.round(1, rows, drop_after_upload={3})
    assert sorted(out) == [0, 1, 2]
    for v in range(3):
        for i, e in enumerate(sets[v]):
            assert out[v][i].tolist() == expected_average(params, e, sets, rows)  # client 3's rows included


def test_dropout_after_sharing_aborts_the_round_when_all_answers_are_needed():
    params, dep = make(3, 1, 2, [[1], [1, 2], [2]], seed=4)
    assert params.needed_answers == 3
    rows = [np.ones((1, 2)), np.ones((2, 2)), np.ones((1, 2))]
    with pytest.raises(ProtocolError, match="aborted: 2 of 3 clients answered, 3"):
        dep.round(1, rows, drop_after_upload={1})


def test_smaller_k_buys_dropout_tolerance():
    # N = 5, T = 1: the paper's K = 2 needs all 5 answers; K = 1 needs 3
    sets = [[1], [1, 2], [2], [1, 2], [2]]
    params, dep = make(5, 1, 2, sets, seed=5, k=1)
    assert params.needed_answers == 3
    rows = [np.full((len(s), 2), float(v)) for v, s in enumerate(sets)]
    out = dep.round(1, rows, drop_after_upload={3, 4})
    assert out[0].tolist() == [expected_average(params, 1, sets, rows)]


def test_tampered_relay_and_wrong_round_are_refused():
    params, dep = make(3, 1, 2, [[1], [1], [2]], seed=6)
    rows = [np.ones((1, 2))] * 3
    uploads = dep.uploads(1, rows)
    relays = dep.server.relay(1, uploads)
    bad = bytearray(relays[0])
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidMessage):
        dep.clients[0].answer(bytes(bad))
    with pytest.raises(InvalidMessage, match="round"):
        dep.clients[1].answer(relays[1][:16] + (9).to_bytes(8, "little") + relays[1][24:])  # header bytes 16-23: round
    with pytest.raises(InvalidMessage):
        dep.clients[2].answer(relays[2][:-3])


def test_server_refuses_replayed_round_and_truncated_upload():
    params, dep = make(3, 1, 2, [[1], [1], [2]], seed=7)
    rows = [np.ones((1, 2))] * 3
    uploads = dep.uploads(1, rows)  # an honest client uploads once a round: replay its bytes
    dep.server.relay(1, uploads)
    with pytest.raises(ProtocolError, match="not after"):
        dep.server.relay(1, uploads)
    uploads = dep.uploads(2, rows)
    uploads[0] = uploads[0][:-1]
    with pytest.raises(InvalidMessage):
        dep.server.relay(2, uploads)


@settings(max_examples=4, deadline=None)
@given(st.integers(2, 5), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_random_deployments_decode_exact_averages(n, d, seed):
    gen = np.random.default_rng(seed)  # test data only
    t = int(gen.integers(0, (n - 1) // 2 + 1))
    sets = [sorted(set(gen.choice(8, size=int(gen.integers(1, 5)), replace=False).tolist())) for _ in range(n)]
    params, dep = make(n, t, d, sets, seed=seed)
    rows = [gen.uniform(-params.max_abs, params.max_abs, size=(len(s), d)) for s in sets]
    out = dep.round(1, rows)
    for v, s in enumerate(sets):
        for i, e in enumerate(s):
            assert out[v][i].tolist() == expected_average(params, e, sets, rows)


def test_setup_runs_the_bloom_psu_and_counts_its_bytes():
    sets = [[3, 1], [4], [1, 5]]
    params, dep = make(3, 1, 2, sets, seed=8)
    assert dep.union.tolist() == [1, 3, 4, 5]
    hello = len(dep.clients[0].hello())
    assert all(dep.setup_traffic.up[i] > hello for i in range(3))  # the PSU's secure-aggregation messages too


def test_query_bound_hides_the_entity_count_and_keeps_the_averages():
    sets = [[1], [1, 2, 3], [2, 4]]
    params = SecEAParams(3, 1, dim=2)
    dep = Deployment(params, [np.array(s) for s in sets], key_bits=KEY_BITS, query_bound=4, _rng=CtrDrbg(9))
    gen = np.random.default_rng(9)
    rows = [gen.normal(size=(len(s), 2)) for s in sets]
    uploads = dep.uploads(1, rows)
    assert len({len(b) for b in uploads.values()}) == 1  # 1, 3 and 2 entities: the same upload size
    dep2 = Deployment(params, [np.array(s) for s in sets], key_bits=KEY_BITS, query_bound=4, _rng=CtrDrbg(10))
    out = dep2.round(1, rows)
    for v, s in enumerate(sets):
        for i, e in enumerate(s):
            assert out[v][i].tolist() == expected_average(params, e, sets, rows)
    with pytest.raises(InvalidParameters, match="query_bound"):
        Deployment(params, [np.array(s) for s in sets], key_bits=KEY_BITS, query_bound=2)


def test_client_missing_before_upload_is_left_out_of_the_averages():
    sets = [[1, 2], [2, 3], [1, 3], [1, 2, 3]]
    params, dep = make(4, 1, 2, sets, seed=11)
    gen = np.random.default_rng(11)
    rows = [gen.normal(size=(len(s), 2)) for s in sets]
    uploads = {i: dep.clients[i].upload(1, rows[i]) for i in range(3)}  # client 3 never uploads
    relays = dep.server.relay(1, uploads)
    answers = {v: dep.clients[v].answer(relays[v]) for v in range(3)}
    results = dep.server.mask(1, answers)
    present = sets[:3]
    for v in range(3):
        out = dep.clients[v].finish(results[v])
        for i, e in enumerate(sets[v]):
            assert out[i].tolist() == expected_average(params, e, present, rows[:3])


def test_offline_randomizers_are_used_and_give_the_same_averages():
    sets = [[1, 2], [2], [1, 3]]
    params, dep = make(3, 1, 2, sets, seed=12)
    gen = np.random.default_rng(12)
    rows = [gen.normal(size=(len(s), 2)) for s in sets]
    dep.precompute([len(s) for s in sets])
    assert all(len(dep.clients[0]._pools[n]) == len(sets[n]) for n in range(3))  # one ciphertext per answer
    out = dep.round(1, rows)
    assert all(not pool for c in dep.clients for pool in c._pools.values())  # consumed
    assert all(not pool for pool in dep.server._pools.values())
    for v, s in enumerate(sets):
        for i, e in enumerate(s):
            assert out[v][i].tolist() == expected_average(params, e, sets, rows)
