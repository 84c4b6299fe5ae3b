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
from secemb.protocols.secemb import SecEmbRelayServer
from secemb.training import TrainConfig, train


def _train() -> str:
    """One epoch of 30 users, 10 a round; the model's SHA-256."""
    data = train_test_split(synthetic_like(30, 40, 400, seed=3), 0.2, seed=0)
    return train(MatrixFactorization(dim=4), get_protocol("secemb", layout="cuckoo", relay=True), *data,
                 TrainConfig(epochs=1, users_per_round=10, m_prime=8)).model_sha256


def _train_overlapped(monkeypatch: pytest.MonkeyPatch, peer_step: str, own_step: str) -> str:
    """:func:`_train` with server 1's ``peer_step`` signalling that it began and server 0's
    ``own_step`` waiting, bounded, for that signal: every round's steps overlapped."""
    started = threading.Event()
    overlapped: list[bool] = []
    peer = getattr(SecEmbRelayServer, peer_step)

    def peer_spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if self.party == 1:
            started.set()
        return peer(self, *args, **kwargs)

    def own_spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if self.party == 0:
            overlapped.append(started.wait(timeout=10))
            started.clear()
        return own(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(SecEmbRelayServer, peer_step, peer_spy)
        own = getattr(SecEmbRelayServer, own_step)  # after the peer's spy: both steps may be one method
        patch.setattr(SecEmbRelayServer, own_step, own_spy)
        sha = _train()
    assert len(overlapped) == 3 and all(overlapped)  # 30 users, 10 a round
    return sha


def test_server_1_evaluates_the_forwarded_keys_while_server_0_evaluates(monkeypatch: pytest.MonkeyPatch) -> None:
    overlapping = _train_overlapped(monkeypatch, "evaluate_relay_many", "evaluate_retrieval_many")
    monkeypatch.setattr(SecEmbRelayServer, "relay_forwards", lambda self, requests: None)  # forwards after the commit
    assert _train() == overlapping


def test_server_0_computes_its_aggregate_while_server_1_computes_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a round's close server 0 asks for server 1's share and computes its own share
    meanwhile (``aggregate_share``; both servers reconstruct, issue 33), whose aggregate
    ``combine`` then reuses: the same model as a run without the spies."""
    overlapping = _train_overlapped(monkeypatch, "aggregate_share", "aggregate_share")
    assert _train() == overlapping
