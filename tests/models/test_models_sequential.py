"""Sequential task, SASRec and Caser: the samples a device trains on (hand-built sequences),
truncation, the leave-one-out split and the ranking metrics (expected values by hand)."""

import math

import numpy as np
import pytest

from secemb.data import RatingData, leave_one_out
from secemb.errors import InvalidParameters
from secemb.metrics import get_metric, hit_rate, ndcg
from secemb.metrics.ranking import popularity_scorer, rank_next_items
from secemb.models import RATING, SequenceTask, get_model
from secemb.models.optim import AdamConfig


def _sample(task: SequenceTask, seq, m=50, seed=0):
    seq = np.asarray(seq, dtype=np.int64)
    return task.sample(seq, np.ones(seq.size, np.float32), m, np.random.default_rng(seed))


def _ids(sample, field):
    pos = sample.batch[field]
    return np.where(pos >= 0, sample.items[np.maximum(pos, 0)], -1)


def test_last_window_aligns_history_and_next_item():
    task = SequenceTask(max_len=4, targets=4, negatives=2, windows="last")
    s = _sample(task, [7, 3, 9, 1, 20, 5])
    assert _ids(s, "history").tolist() == [[3, 9, 1, 20]]
    assert _ids(s, "target").tolist() == [[9, 1, 20, 5]]
    neg = _ids(s, "negative")
    assert neg.shape == (1, 4, 2) and not np.isin(neg, [7, 3, 9, 1, 20, 5]).any() and (neg >= 0).all()
    # the request is exactly what the sample uses: positives and negatives, distinct, ascending
    assert s.items.tolist() == sorted({3, 9, 1, 20, 5, *neg.ravel().tolist()})
    short = _sample(task, [4, 8])
    assert _ids(short, "history").tolist() == [[-1, -1, -1, 4]]
    assert _ids(short, "target").tolist() == [[-1, -1, -1, 8]]
    assert (_ids(short, "negative")[0, :3] == -1).all() and (_ids(short, "negative")[0, 3] >= 0).all()


def test_sliding_windows_and_their_cap():
    task = SequenceTask(max_len=3, targets=2, negatives=1, windows="sliding", max_windows=10)
    s = _sample(task, [10, 11, 12, 13, 14])
    assert _ids(s, "history").tolist() == [[-1, -1, 10], [-1, 10, 11], [10, 11, 12]]
    assert _ids(s, "target").tolist() == [[11, 12], [12, 13], [13, 14]]
    capped = _sample(SequenceTask(3, 2, 1, "sliding", max_windows=2), [10, 11, 12, 13, 14])
    assert capped.batch.num_samples == 2
    assert set(map(tuple, _ids(capped, "target").tolist())) <= {(11, 12), (12, 13), (13, 14)}


def test_request_counts_bound_every_request():
    for task in (SequenceTask(4, 4, 1, "last"), SequenceTask(3, 2, 3, "sliding", max_windows=2)):
        shortest = 2 if task.windows == "last" else task.targets + 1
        counts = task.request_counts(np.arange(0, 12))
        assert (counts[:shortest] == 0).all() and (counts[shortest:] > 0).all() and counts.max() <= task.max_request()
        for n in range(3, 12):
            assert _sample(task, np.arange(n) * 2, m=200).items.size <= counts[n]
    assert SequenceTask(4, 4, 1, "last").max_request() == 5 + 4
    with pytest.raises(InvalidParameters, match="too short"):
        _sample(SequenceTask(4, 4, 1, "last"), [3])
    with pytest.raises(InvalidParameters, match="targets must be max_len"):
        SequenceTask(4, 2, 1, "last")


def test_restrict_drops_what_was_not_retrieved():
    task = SequenceTask(max_len=3, targets=3, negatives=1, windows="last")
    s = _sample(task, [1, 2, 3, 4])
    keep = s.items != 3                      # item 3 truncated away
    row_of = np.where(keep, np.cumsum(keep) - 1, -1)
    b = task.restrict(s.batch, row_of)
    kept_items = s.items[keep]

    def ids(field):
        return np.where(b[field] >= 0, kept_items[np.maximum(b[field], 0)], -1)

    assert ids("history").tolist() == [[1, 2, -1]] and ids("target").tolist() == [[2, -1, 4]]
    assert (ids("negative")[0, 1] == -1).all() and (ids("negative")[0, [0, 2]] >= 0).all()
    nothing = task.restrict(s.batch, np.full(s.items.size, -1))
    assert nothing.num_samples == 0


def test_rating_task_keeps_the_rating_batch():
    s = RATING.sample(np.array([5, 2, 5]), np.array([1.0, 2.0, 3.0], np.float32), 10, np.random.default_rng(0))
    assert s.items.tolist() == [2, 5] and s.batch["item_pos"].tolist() == [1, 0, 1]


def test_leave_one_out_holds_out_the_last_two_by_time():
    data = RatingData("t", 3, 9, np.array([0, 0, 0, 0, 1, 1, 2, 2, 2]), np.array([5, 1, 2, 3, 4, 6, 7, 8, 0]),
                      np.ones(9, np.float32), np.array([40, 10, 30, 20, 1, 2, 5, 5, 6]))
    train, val, test = leave_one_out(data)
    assert sorted(zip(test.users.tolist(), test.items.tolist(), strict=True)) == [(0, 5), (2, 0)]
    assert sorted(zip(val.users.tolist(), val.items.tolist(), strict=True)) == [(0, 2), (2, 8)]  # ties by item id
    pairs = sorted(zip(train.users.tolist(), train.items.tolist(), strict=True))
    assert pairs == [(0, 1), (0, 3), (1, 4), (1, 6), (2, 7)]


def test_hit_rate_and_ndcg_by_hand():
    scores = np.array([[0.9, 0.5, 0.7, 0.1], [0.2, 0.8, 0.3, 0.4]])
    relevant = np.array([[False, False, True, False], [True, False, False, False]])
    # ranks (0-based) of the relevant items: 1 and 3
    assert hit_rate(scores, relevant, k=2) == 0.5 and hit_rate(scores, relevant, k=4) == 1.0
    assert ndcg(scores, relevant, k=2) == pytest.approx((1 / math.log2(3)) / 2)
    assert ndcg(scores, relevant, k=4) == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / 2)
    tie = np.array([[0.5, 0.5]])
    assert hit_rate(tie, np.array([[True, False]]), k=1) == 0.0  # ties go against the held-out item
    assert get_metric("ndcg_sampled@10").candidates == 100 and get_metric("hr@10").candidates is None


def test_ranking_excludes_the_history_and_samples_unseen_negatives():
    # items 0..5; user 0 saw 0, 1, 2 (popular), holds out 5; popularity: 0 > 1 > 2 > 3 > 4 > 5
    ctx = RatingData("t", 4, 6, np.array([0, 0, 0, 1, 1, 1, 2, 2, 3]), np.array([0, 1, 2, 0, 1, 3, 0, 4, 0]),
                     np.ones(9, np.float32), np.arange(9))
    held = RatingData("t", 4, 6, np.array([0]), np.array([3]), np.ones(1, np.float32), np.array([99]))
    ms = [get_metric(n) for n in ("hr@1", "hr@2", "hr_sampled@1")]
    out = rank_next_items(popularity_scorer(ctx), 6, 3, ctx, held, ms, seed=0)
    # full catalogue without 0, 1, 2: item 3 (count 1) ties item 4 (count 1) and loses the tie
    assert out == {"hr@1": 0.0, "hr@2": 1.0, "hr_sampled@1": 0.0}


@pytest.mark.parametrize("name", ["sasrec", "caser"])
def test_a_step_touches_only_the_sample_rows_and_is_deterministic(name):
    model = get_model(name, dim=8, reg=0.0)  # no L2: a row outside the batch gets exactly 0
    rng = np.random.default_rng(1)
    table, dense = model.init_public(40, rng)
    store, twin = (model.new_user_store(2, np.random.default_rng(2), AdamConfig()) for _ in range(2))
    s = model.task.sample(np.array([3, 9, 4, 17, 22, 8, 30, 1]), np.ones(8, np.float32), 40, rng)
    extra = np.vstack([table[s.items], table[:2]])  # two rows the batch never points at
    a = model.local_step(extra, dense, store.state(0), s.batch)
    b = model.local_step(extra, dense, twin.state(0), s.batch)
    assert np.array_equal(a.row_grads, b.row_grads) and np.array_equal(a.dense_grad, b.dense_grad)
    assert (a.row_grads[-2:] == 0).all() and np.abs(a.row_grads[:-2]).sum() > 0 and np.abs(a.dense_grad).sum() > 0
    reseeded = s.batch.replace(seed=s.batch["seed"] + 1)
    c = model.local_step(extra, dense, twin.state(1), reseeded)
    assert not np.array_equal(a.dense_grad, c.dense_grad)  # dropout follows the batch's seed
    hist = np.full((1, model.max_len), -1)
    hist[0, -4:] = [3, 9, 4, 17]
    full = model.score_next(table, dense, store, np.array([0]), hist)
    some = model.score_next(table, dense, store, np.array([0]), hist, np.array([[5, 7]]))
    assert full.shape == (1, 40) and np.allclose(full[0, [5, 7]], some[0])
    with pytest.raises(InvalidParameters, match="score_next"):
        model.predict(table, dense, store, np.array([0]), np.array([1]))
