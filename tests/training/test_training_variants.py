"""Every protocol variant (layout x relay) trains exactly the plaintext model, and what each
server receives does not depend on which or how many items a user rated."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data import synthetic_like, train_test_split
from secemb.models import MatrixFactorization
from secemb.protocols.plaintext import PlaintextProtocol
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol
from secemb.training import TrainConfig, train

VARIANTS = [("full", False), ("full", True), ("cuckoo", False), ("cuckoo", True)]


@pytest.fixture(scope="module")
def small():
    return train_test_split(synthetic_like(48, 120, 900, seed=5), 0.2, seed=0)


def _run(small, protocol, **kw):
    tr, te = small
    cfg = TrainConfig(**{"epochs": 1, "users_per_round": 16, "m_prime": 10, "verify": True, **kw})
    return train(MatrixFactorization(dim=4, reg=0.01), protocol, tr, te, cfg)


@pytest.mark.parametrize("layout,relay", VARIANTS)
def test_variant_trains_the_plaintext_model(small, layout: str, relay: bool) -> None:
    secure = _run(small, SecEmbProtocol(layout=layout, relay=relay))
    plain = _run(small, PlaintextProtocol(layout=layout))
    assert secure.verified_rounds == secure.rounds > 0
    assert secure.model_sha256 == plain.model_sha256
    assert [e.test_rmse for e in secure.epochs] == [e.test_rmse for e in plain.epochs]


def test_forced_cuckoo_insertion_failures_still_train_exactly(small) -> None:
    # expansion 1 (B = m') with every user holding m' items makes insertion failures common
    proto = SecEmbProtocol(layout="cuckoo", relay=True, expansion=1.0)
    cfg = proto.round_config(0, 120, 5, 1, 10)
    rng = np.random.default_rng(0)
    dropped = sum(
        10 - place(cfg, rng.choice(120, 10, replace=False), rng).real_pos.size for _ in range(200)
    )
    assert dropped > 0  # the failure path is exercised
    secure = _run(small, proto)
    plain = _run(small, PlaintextProtocol(layout="cuckoo", expansion=1.0))
    assert secure.model_sha256 == plain.model_sha256


def _server_view(layout: str, relay: bool, items: np.ndarray, seed: int) -> list[bytes]:
    proto = SecEmbProtocol(layout=layout, relay=relay)
    cfg = proto.round_config(3, 500, 9, 2, 20)
    rng = np.random.default_rng(seed)
    table = np.zeros((500, 9), np.uint32)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)
    user = proto.make_user(cfg)
    req = place(cfg, items, rng)
    q0, q1 = user.retrieval_request(req.indices)
    seen = [q0, q1]
    a1 = s1.handle_retrieval(1, q1)
    a0 = s0.handle_retrieval(1, q0)
    if relay:
        seen.append(a0)  # forwarded to server 1
        masked = s1.relay_retrieval(1, a0)
        seen.append(masked)  # to server 0
        a0 = s0.complete_retrieval(1, masked)
    user.retrieval_result(a0, a1)
    grads = np.zeros((cfg.slots, 9), np.uint32)
    grads[req.real_pos] = 7
    up0, up1 = user.upload(grads, np.ones(2, np.uint32))
    seen += [up0] + ([up1] if up1 is not None else [])
    fwd = s0.handle_upload(1, up0)
    if fwd is not None:
        seen.append(fwd)
    return seen


@pytest.mark.parametrize("layout,relay", VARIANTS)
def test_server_view_sizes_do_not_depend_on_the_rated_items(layout: str, relay: bool) -> None:
    few = np.array([3])
    many = np.arange(480, 500)  # more than m' = 20: truncated
    low = np.arange(20)
    views = [_server_view(layout, relay, items, s) for s, items in enumerate((few, many, low))]
    sizes = [[len(m) for m in v] for v in views]
    assert sizes[0] == sizes[1] == sizes[2]
    for view, items in zip(views, (few, many, low)):
        blob = b"".join(view)
        for i in items.tolist():
            if i > 255:  # an unusual 4-byte pattern: its plaintext would stand out
                assert blob.count(np.uint32(i).tobytes() + b"\x00" * 4) <= 1


def test_cuckoo_layout_learns_as_well_as_the_full_layout() -> None:
    # the layout changes only which slots carry the rows, not what the model learns from
    tr, te = train_test_split(synthetic_like(120, 150, 4000, seed=8), 0.2, seed=0)
    cfg = TrainConfig(epochs=6, users_per_round=30, m_prime=40)
    full = train(MatrixFactorization(dim=8, reg=0.01), PlaintextProtocol(layout="full"), tr, te, cfg)
    cuckoo = train(MatrixFactorization(dim=8, reg=0.01), PlaintextProtocol(layout="cuckoo"), tr, te, cfg)
    assert abs(full.epochs[-1].test_rmse - cuckoo.epochs[-1].test_rmse) < 0.02
