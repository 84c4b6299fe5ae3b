"""Server evaluation backends: process pool and Ray give bit-identical results to serial."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.protocols.backends import ProcessBackend, SerialBackend, make_backend
from secemb.protocols.secemb import SecEmbProtocol
from secemb.randomness import CtrDrbg
from secemb.errors import InvalidParameters


def _round(backend, layout: str, relay: bool):
    """Five users through one round; returns every reply and the combined aggregate."""
    proto = SecEmbProtocol(layout=layout, relay=relay, backend=backend)
    cfg = proto.round_config(4, 300, 5, 2, 12)
    rng = np.random.default_rng(7)
    table = rng.integers(0, 2**32, (300, 5), dtype=np.uint64).astype(np.uint32)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)
    users = [proto.make_user(cfg, _rng=CtrDrbg(u)) for u in range(5)]
    slots = []
    for u in range(5):
        if layout == "full":
            slots.append(rng.choice(300, 12, replace=False))
        else:
            placed, _ = cfg.cuckoo().assign(rng.choice(300, 12, replace=False), rng)
            slots.append(placed)
    reqs = [users[u].retrieval_request(slots[u]) for u in range(5)]
    a1 = s1.handle_retrieval_many([(u, reqs[u][1]) for u in range(5)])
    a0 = s0.handle_retrieval_many([(u, reqs[u][0]) for u in range(5)])
    if relay:
        masked = s1.relay_retrieval_many([(u, a0[u]) for u in range(5)])
        a0 = [s0.complete_retrieval(u, masked[u]) for u in range(5)]
    rows = [users[u].retrieval_result(a0[u], a1[u]) for u in range(5)]
    for u in range(5):
        real = slots[u] >= 0
        assert np.array_equal(rows[u][real], table[slots[u][real]])
        grads = np.zeros((cfg.slots, 5), np.uint32)
        grads[real] = rng.integers(0, 2**32, (int(real.sum()), 5), dtype=np.uint64).astype(np.uint32)
        up0, up1 = users[u].upload(grads, np.arange(2, dtype=np.uint32))
        fwd = s0.handle_upload(u, up0)
        if up1 is not None:
            s1.handle_upload(u, up1)
        if fwd is not None:
            s1.relay_upload(u, fwd)
    sparse, dense = s0.combine(s1.aggregate_share())
    return [bytes(a) for a in a0 if a is not None], sparse, dense


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
@pytest.mark.parametrize("relay", [False, True])
def test_process_backend_is_bit_identical_to_serial(layout: str, relay: bool) -> None:
    serial = _round(SerialBackend(), layout, relay)
    pool = ProcessBackend(workers=2)
    try:
        parallel = _round(pool, layout, relay)
    finally:
        pool.close()
    assert serial[0] == parallel[0]
    assert np.array_equal(serial[1], parallel[1]) and np.array_equal(serial[2], parallel[2])


def test_ray_backend_is_bit_identical_to_serial() -> None:
    pytest.importorskip("ray")
    backend = make_backend("ray", workers=2)
    serial = _round(SerialBackend(), "cuckoo", True)
    distributed = _round(backend, "cuckoo", True)
    assert serial[0] == distributed[0]
    assert np.array_equal(serial[1], distributed[1]) and np.array_equal(serial[2], distributed[2])


def test_make_backend_fails_if_name_unknown() -> None:
    with pytest.raises(InvalidParameters, match="backend must be"):
        make_backend("threads")


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
def test_batches_split_by_memory_bound_are_bit_identical(monkeypatch, layout: str) -> None:
    """A batch whose leaf state exceeds EVAL_BYTES is evaluated in several tasks (one per
    user at the smallest bound) with the same replies and aggregate."""
    from secemb.protocols import secemb as secemb_module

    class Counting(SerialBackend):
        def __init__(self) -> None:
            super().__init__()
            self.task_counts: list[int] = []

        def map(self, fn, tasks):  # noqa: ANN001, ANN201
            self.task_counts.append(len(tasks))
            return super().map(fn, tasks)

    whole = Counting()
    reference = _round(whole, layout, False)
    assert max(whole.task_counts) == 1
    monkeypatch.setattr(secemb_module, "EVAL_BYTES", 1)
    split = Counting()
    chunked = _round(split, layout, False)
    assert max(split.task_counts) == 5  # one task per user
    assert reference[0] == chunked[0]
    assert np.array_equal(reference[1], chunked[1]) and np.array_equal(reference[2], chunked[2])
