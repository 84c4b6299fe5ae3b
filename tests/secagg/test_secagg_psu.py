"""Private set union (Algorithm 3): exact unions, false positives, hidden counts."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.randomness import CtrDrbg
from secemb.secagg import SecAggAborted
from secemb.secagg.psu import BloomParams, psu_input, psu_union, read_union, run_psu, union_message


def _sets(n, domain, k, seed):
    g = np.random.default_rng(seed)
    return {i: g.choice(domain, k, replace=False) for i in range(n)}


def _union(sets, ids):
    return np.unique(np.concatenate([sets[i] for i in ids]))


def test_paper_bloom_length_for_the_taobao_union():
    """Sec. VI: a union of 32,904 goods at FPR 0.01% needs beta = 630,774, more than the
    143,534 goods, so the paper filters with the identity map over the goods instead."""
    p = BloomParams.for_union(10**9, 32_904, 1e-4)
    assert (p.size, p.hashes) == (630_774, 13)
    assert BloomParams.for_union(143_534, 32_904, 1e-4) == BloomParams.exact(143_534)


@pytest.mark.parametrize("drops", [{}, {0: 0}, {1: 1}, {2: 2}, {3: 3}, {0: 2, 4: 3}])
def test_exact_filter_gives_the_union_of_the_survivors(drops):
    sets = _sets(7, 500, 20, 1)
    res = run_psu(BloomParams.exact(500), sets, 4, round_id=3, drop_after=drops)
    assert np.array_equal(res.union, _union(sets, res.transcript.survivors))
    assert res.receivers == res.transcript.survivors == [i for i in range(7) if drops.get(i, 4) > 2]
    for cid in range(7):  # the union message is in every receiver's download, nobody else's
        extra = res.union_bytes if cid in res.receivers else 0
        assert res.download_bytes[cid] == res.transcript.download_bytes[cid] + extra
    assert res.union_bytes == len(union_message(3, res.union))
    assert read_union(union_message(3, res.union), 3, 500).tolist() == res.union.tolist()


def test_too_many_dropouts_abort_the_psu():
    with pytest.raises(SecAggAborted):
        run_psu(BloomParams.exact(50), _sets(5, 50, 5, 2), 4, drop_after={0: 1, 1: 2})


def test_bloom_union_has_no_false_negatives_and_the_documented_false_positive_rate():
    domain, sets = 60_000, _sets(8, 60_000, 60, 3)
    truth = _union(sets, range(8))
    p = BloomParams.for_union(domain, 480, 0.02)
    assert p.partitions == 0 and not p.identity
    res = run_psu(p, sets, 5, _rng=CtrDrbg(4))
    assert np.all(np.isin(truth, res.union))
    fp = res.union.size - truth.size
    expected = (domain - truth.size) * p.false_positive_rate(truth.size)
    assert abs(fp - expected) < 5 * np.sqrt(expected) + 0.1 * expected


def test_partitions_confine_false_positives_and_fine_partitions_are_exact():
    domain, sets = 40_000, _sets(5, 40_000, 30, 5)
    truth = _union(sets, range(5))
    coarse = BloomParams(domain=domain, size=600, hashes=3, partitions=64)
    union = psu_union(coarse, sum(psu_input(coarse, s) for s in sets.values()).astype(np.uint32))
    assert np.all(np.isin(truth, union))
    assert set(coarse.partition_of(union)) == set(coarse.partition_of(truth))
    fine = BloomParams(domain=domain, size=600, hashes=3, partitions=domain)
    union = psu_union(fine, sum(psu_input(fine, s) for s in sets.values()).astype(np.uint32))
    assert np.array_equal(union, truth)


def test_sum_hides_how_many_clients_hold_an_index():
    """Every client holds index 7, one holds 9: both positions sum to uniform non-zero words,
    not to the counts 5 and 1."""
    p = BloomParams.exact(16)
    vecs = [psu_input(p, np.array([7] + ([9] if i == 0 else []))) for i in range(5)]
    total = np.sum(vecs, axis=0, dtype=np.uint32)
    assert total[7] not in (0, 5) and total[9] not in (0, 1)
    assert np.all(np.delete(total, [7, 9]) == 0)
    assert all(v[7] != 1 for v in vecs)


def test_inputs_and_messages_are_validated():
    p = BloomParams.exact(10)
    with pytest.raises(InvalidParameters):
        psu_input(p, np.array([3, 3]))
    with pytest.raises(InvalidParameters):
        psu_input(p, np.array([10]))
    with pytest.raises(InvalidParameters):
        psu_union(p, np.zeros(9, np.uint32))
    with pytest.raises(InvalidMessage):
        read_union(union_message(0, np.array([4, 2])), 0, 10)
    with pytest.raises(InvalidMessage):
        read_union(union_message(0, np.array([2, 4])), 1, 10)
    with pytest.raises(InvalidParameters):
        BloomParams(domain=10, size=5, identity=True)
