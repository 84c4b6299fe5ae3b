"""The two servers work at the same time where the protocol allows (issue 14).  With relay,
server 0 forwards a batch's keys to server 1 before it evaluates its own batch, so their
full-domain evaluations overlap; at a round's close server 0 computes its own aggregate while
server 1 computes its share.  The checks are structural: server 0's step waits, bounded, until
server 1's has begun -- sequential steps would make it time out.  Each overlapped run ends on
the same model as the sequential one."""

from __future__ import annotations

import threading

import pytest

from secemb.data import synthetic_like, train_test_split
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.protocols.secemb import SecEmbServer
from secemb.training import TrainConfig, train


def _train(data):  # noqa: ANN001, ANN202
    return train(MatrixFactorization(dim=4), get_protocol("secemb", layout="cuckoo", relay=True), *data,
                 TrainConfig(epochs=1, users_per_round=10, m_prime=8))


def test_server_1_evaluates_the_forwarded_keys_while_server_0_evaluates(monkeypatch: pytest.MonkeyPatch) -> None:
    data = train_test_split(synthetic_like(30, 40, 400, seed=3), 0.2, seed=0)
    started = threading.Event()
    overlapped: list[bool] = []
    relay, evaluate = SecEmbServer.evaluate_relay_many, SecEmbServer.evaluate_retrieval_many

    def relay_spy(self, forwards):  # noqa: ANN001, ANN202 - server 1
        started.set()
        return relay(self, forwards)

    def evaluate_spy(self, requests):  # noqa: ANN001, ANN202
        if self.party == 0:
            overlapped.append(started.wait(timeout=10))
            started.clear()
        return evaluate(self, requests)

    monkeypatch.setattr(SecEmbServer, "evaluate_relay_many", relay_spy)
    monkeypatch.setattr(SecEmbServer, "evaluate_retrieval_many", evaluate_spy)
    overlapping = _train(data)
    assert len(overlapped) == 3 and all(overlapped)  # 30 users, 10 a round

    monkeypatch.setattr(SecEmbServer, "evaluate_retrieval_many", evaluate)
    monkeypatch.setattr(SecEmbServer, "relay_forwards", lambda self, requests: None)  # forwards after the commit
    sequential = _train(data)
    assert overlapping.model_sha256 == sequential.model_sha256


def test_server_0_computes_its_aggregate_while_server_1_computes_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a round's close server 0 asks for server 1's share and computes its own aggregate
    meanwhile (``prepare_combine``), which ``combine`` then reuses: the same model."""
    data = train_test_split(synthetic_like(30, 40, 400, seed=3), 0.2, seed=0)
    started = threading.Event()
    overlapped: list[bool] = []
    share, prepare = SecEmbServer.aggregate_share, SecEmbServer.prepare_combine

    def share_spy(self, include=None):  # noqa: ANN001, ANN202 - server 1
        started.set()
        return share(self, include)

    def prepare_spy(self, include=None):  # noqa: ANN001, ANN202 - server 0
        overlapped.append(started.wait(timeout=10))
        started.clear()
        return prepare(self, include)

    monkeypatch.setattr(SecEmbServer, "aggregate_share", share_spy)
    monkeypatch.setattr(SecEmbServer, "prepare_combine", prepare_spy)
    overlapping = _train(data)
    assert len(overlapped) == 3 and all(overlapped)

    monkeypatch.setattr(SecEmbServer, "prepare_combine", lambda self, include=None: None)  # all in combine
    assert _train(data).model_sha256 == overlapping.model_sha256
