"""With relay, server 0 forwards a batch's keys to server 1 before it evaluates its own batch,
so the two servers' full-domain evaluations overlap (issue 14).  The check is structural:
server 0's evaluation waits, bounded, until server 1's evaluation of the forwarded keys has
begun -- forwards sent only after server 0's commit would make it time out.  The overlapped
run ends on the same model as the run that forwards after the commit."""

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
