"""Table 14's ranking (:func:`secemb.bench.grec.ranking`) scored in chunks of positives gives the
cells of one pass: every pair's four predictions bit for bit, and HR@10 / NDCG@10 exactly equal
to the metric registry's :func:`~secemb.metrics.ranking.hit_rate` and
:func:`~secemb.metrics.ranking.ndcg` on the whole score matrix, whatever the chunk."""

from __future__ import annotations

import numpy as np

from secemb.bench.grec import _negatives, _predictions, _release, ranking
from secemb.data import synthetic_like, train_test_split
from secemb.inference import Denoiser, DenoiserContext, GaussianLDP
from secemb.metrics.ranking import hit_rate, ndcg
from secemb.models import NCF
from secemb.protocols import get_protocol
from secemb.randomness import CtrDrbg
from secemb.training import TrainConfig, train


def test_chunked_ranking_equals_one_pass() -> None:
    tr, te = train_test_split(synthetic_like(40, 600, 1200, seed=2), 0.3, seed=0)
    ncf = NCF(dim=4)
    rec = train(ncf, get_protocol("plaintext"), tr, te, TrainConfig(epochs=1, users_per_round=20, lr=0.05))
    den = Denoiser.for_context(DenoiserContext.from_trained(ncf, rec.table, rec.dense, rec.user_store,
                                                            GaussianLDP(1.0, 1e-4, 1.0)), hat_d=3, hidden=5)
    den_table, den_dense = den.init_public(tr.num_items, np.random.default_rng(0))
    args = (den, den_table, den_dense, ncf, rec.table, rec.dense, rec.user_store, tr, te)
    cells = {c: ranking(*args, negatives=20, chunk=c, _rng=CtrDrbg(7)) for c in (4, 7, 10**6)}
    assert cells[4] == cells[7] == cells[10**6]
    assert cells[4]["positives"] > 20

    # the one-pass reference: the same negatives and release, the registry's metrics on the whole matrix
    pos = te.ratings >= 4.0
    pu, pi = te.users[pos].astype(np.int64), te.items[pos].astype(np.int64)
    cand = np.concatenate([pi[:, None], _negatives(tr, te, pu, 20, 0)], axis=1)
    uniq = np.unique(pu)
    release = (uniq, *_release(den, uniq, CtrDrbg(7)))
    users = np.repeat(pu, 21)
    whole = _predictions(*args[:7], users, cand.reshape(-1), release)
    relevant = np.zeros(cand.shape, dtype=bool)
    relevant[:, 0] = True
    for name, p in whole.items():
        scores = p.reshape(cand.shape)
        assert cells[7][f"hr@10_{name}"] == hit_rate(scores, relevant, k=10)
        assert cells[7][f"ndcg@10_{name}"] == ndcg(scores, relevant, k=10)
    # a chunk's predictions are the whole pass's rows, bit for bit
    part = _predictions(*args[:7], users[7 * 21 : 14 * 21], cand[7:14].reshape(-1), release)
    for name, p in part.items():
        np.testing.assert_array_equal(p, whole[name][7 * 21 : 14 * 21])
    assert len({cells[7][f"hr@10_{n}"] for n in whole}) > 1  # the four predictions rank differently
