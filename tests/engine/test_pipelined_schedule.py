"""``schedule="pipelined"``: a round's devices in groups, each group's retrievals evaluated by
the servers while the next group prepares and the group before trains and uploads.  The
model must not depend on the schedule (ring sums are exact, every device's work depends only
on its own data and the round's public model), with the real cryptography and relay, and
the servers must in fact see one retrieval batch per group."""

from __future__ import annotations

import pytest

from secemb.data import synthetic_like, train_test_split
from secemb.engine import driver
from secemb.models import MatrixFactorization
from secemb.protocols.secemb import SecEmbProtocol
from secemb.server.node import LeaderNode
from secemb.training import TrainConfig, train


@pytest.fixture(scope="module")
def small():
    return train_test_split(synthetic_like(60, 50, 900, seed=3), 0.2, seed=0)


def _train(small, schedule: str, **kw):
    tr, te = small
    cfg = TrainConfig(epochs=2, users_per_round=16, m_prime=8, schedule=schedule, **kw)
    return train(MatrixFactorization(dim=8, reg=0.01), SecEmbProtocol(layout="cuckoo", relay=True), tr, te, cfg)


def test_every_schedule_gives_the_same_secure_model(small):
    shas = {s: _train(small, s).model_sha256 for s in ("staged", "pipelined", "interleaved")}
    assert len(set(shas.values())) == 1, shas


def test_pipelined_rounds_verify_and_reach_the_servers_in_groups(small, monkeypatch):
    batches: list[int] = []
    real = LeaderNode.retrieval_many

    def counted(self, r, items):
        batches.append(len(items))
        return real(self, r, items)

    monkeypatch.setattr(LeaderNode, "retrieval_many", counted)
    res = _train(small, "pipelined", verify=True)  # every retrieved row and aggregate checked
    assert res.verified_rounds == res.rounds
    # each round's users arrive as PIPELINE_GROUPS batches of near-equal size
    assert len(batches) == res.rounds * driver.PIPELINE_GROUPS
    assert sum(batches) == res.participations
    assert max(batches) - min(batches) <= 1 + 16 // driver.PIPELINE_GROUPS


def test_an_unknown_schedule_is_refused():
    with pytest.raises(Exception, match="schedule must be"):
        TrainConfig(schedule="eager")  # type: ignore[arg-type]
