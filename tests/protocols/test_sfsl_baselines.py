"""The plaintext baselines of SFSL's Figure 4: FedAvg of the full model weights every parameter
by the clients' training-set sizes (untouched rows enter with a zero update); centralized
training moves only the rows its samples touch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.errors import InvalidParameters
from secemb.protocols.sfsl import SFSLRun, TrainingSettings
from secemb.protocols.sfsl import baselines
from secemb.protocols.sfsl.parties import SFSLDevice

torch.set_num_threads(1)


def _data(n: int = 4):
    return split_clicks(TaobaoShaped("taobao-mini", seed=2).clients(np.arange(n)))


def test_fedavg_weights_every_row_by_training_set_size(monkeypatch) -> None:
    # every client's "update" is 1.0 on each of its rows and it trained on 10 * (id + 1) samples:
    # a row's FedAvg update is (sum of the sizes of the clients holding it) / (sum of all sizes)
    train, test = _data()
    held: dict[int, np.ndarray] = {}

    def fake_update(self, reply, round_id, space, settings, rng):  # noqa: ANN001, ANN202
        rows = space.rows_of(self._perturbed, np.unique(self.goods_category[self._perturbed]))
        self.trained = 10 * (self.user + 1)
        held[self.user] = rows
        return rows, np.ones((rows.size, space.dim)), np.ones(rows.size, np.uint32)

    monkeypatch.setattr(SFSLDevice, "local_update", fake_update)
    captured = {}
    monkeypatch.setattr(baselines.SFSLServer, "add", lambda self, update: captured.setdefault("u", update.copy()))
    baselines.train_baseline(train, test, SFSLRun(clients_per_round=4, rounds=1, eval_every=1), "fl")
    sizes = {0: 10, 1: 20, 2: 30, 3: 40}
    expect = np.zeros(captured["u"].shape[0])
    for u, rows in held.items():
        expect[rows] += sizes[u] / 100
    assert sorted(held) == [0, 1, 2, 3]
    assert np.allclose(captured["u"], expect[:, None])
    # a row of one client with 10 of the 100 samples moves by a tenth of its update (the paper's example)
    only0 = np.setdiff1d(held[0], np.concatenate([held[1], held[2], held[3]]))
    assert only0.size and np.allclose(captured["u"][only0], 0.1)


@pytest.mark.parametrize("scheme", baselines.BASELINES)
def test_baselines_train_and_leave_untouched_rows(scheme: str) -> None:
    train, test = _data()
    run = SFSLRun(clients_per_round=4, rounds=2, eval_every=1, settings=TrainingSettings(lr=0.5, batch=4))
    res = baselines.train_baseline(train, test, run, scheme)
    assert sorted(res.auc) == [1, 2] and all(0.0 <= v <= 1.0 for v in res.auc.values())
    rng = np.random.default_rng(run.seed)  # the initial model, as train_baseline draws it
    from secemb.models.din import DIN

    table0, _ = DIN(num_categories=train.num_categories, dim=run.dim).init_public(train.num_goods, rng)
    h = train.history
    touched = np.unique(np.concatenate([train.target, h[h >= 0]]))
    untouched = np.setdiff1d(np.arange(train.num_goods), touched)
    assert np.array_equal(res.table[untouched], table0[untouched])
    assert not np.allclose(res.table[touched], table0[touched])


def test_unknown_baseline_is_refused() -> None:
    train, test = _data()
    with pytest.raises(InvalidParameters):
        baselines.train_baseline(train, test, SFSLRun(clients_per_round=2, rounds=1), "sfl")
