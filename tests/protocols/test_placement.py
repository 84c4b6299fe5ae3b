"""PadOrTruncIdx (Algorithm 1): sizes, distinctness, padding from unrated items only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secemb.errors import InvalidParameters
from secemb.training import pad_or_truncate
from secemb.protocols.placement import sample_unrated


@settings(max_examples=150, deadline=None)
@given(
    m=st.integers(1, 300),
    data=st.data(),
)
def test_pad_or_truncate_properties(m, data):
    n = data.draw(st.integers(0, m))
    m_prime = data.draw(st.integers(1, m))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    items = rng.choice(m, size=n, replace=False)
    req = pad_or_truncate(items, m_prime, m, rng)
    idx = req.indices
    assert idx.shape == (m_prime,) and idx.dtype == np.int64
    assert np.unique(idx).size == m_prime  # distinct
    assert idx.min(initial=0) >= 0 and idx.max(initial=0) < m
    assert np.array_equal(idx[req.real_pos], items[req.kept])
    rated = set(items.tolist())
    if n <= m_prime:
        assert req.kept.size == n and np.array_equal(req.kept, np.arange(n))
        padding = np.delete(idx, req.real_pos)
        assert padding.size == m_prime - n
        assert not (set(padding.tolist()) & rated)  # padding items are unrated
    else:
        assert req.kept.size == m_prime
        assert set(idx.tolist()) <= rated  # truncation keeps a subset
        assert np.unique(req.kept).size == m_prime


def test_deterministic_under_a_seed():
    items = np.array([3, 17, 8, 40])
    a = pad_or_truncate(items, 10, 50, np.random.default_rng(5))
    b = pad_or_truncate(items, 10, 50, np.random.default_rng(5))
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.real_pos, b.real_pos)


def test_padding_is_uniform_over_unrated_items():
    rated = np.array([0, 1, 5])
    counts = np.zeros(10)
    rng = np.random.default_rng(0)
    for _ in range(4000):
        counts[sample_unrated(rated, 10, 2, rng)] += 1
    assert np.all(counts[rated] == 0)
    free = np.delete(counts, rated)
    assert free.min() > 0.85 * free.mean() and free.max() < 1.15 * free.mean()


def test_truncation_is_uniform_over_rated_items():
    items = np.arange(8)
    counts = np.zeros(8)
    rng = np.random.default_rng(1)
    for _ in range(4000):
        counts[pad_or_truncate(items, 3, 20, rng).indices] += 1
    assert counts.min() > 0.85 * counts.mean() and counts.max() < 1.15 * counts.mean()


def test_rejects_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidParameters):
        pad_or_truncate(np.array([1, 1, 2]), 5, 10, rng)
    with pytest.raises(InvalidParameters):
        pad_or_truncate(np.array([1, 10]), 5, 10, rng)
    with pytest.raises(InvalidParameters):
        pad_or_truncate(np.array([1, 2]), 0, 10, rng)
    with pytest.raises(InvalidParameters):
        pad_or_truncate(np.array([1, 2]), 11, 10, rng)


def test_cuckoo_placement_aligns_rows_with_increasing_input_positions() -> None:
    from secemb.protocols.placement import place
    from secemb.protocols.secemb import SecEmbProtocol

    cfg = SecEmbProtocol(layout="cuckoo").round_config(0, 500, 3, 1, 30)
    rng = np.random.default_rng(9)
    for n in (5, 30, 45):  # fewer, exactly, more than m'
        items = rng.choice(500, n, replace=False)
        req = place(cfg, items, rng)
        assert req.indices.shape == (cfg.num_buckets,)
        assert np.array_equal(req.indices[req.real_pos], items[req.kept])
        assert np.all(np.diff(req.kept) > 0)
        assert req.kept.size == min(n, 30)  # no insertion failure at this load
        assert np.all(req.indices[np.setdiff1d(np.arange(cfg.num_buckets), req.real_pos)] == -1)


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
@pytest.mark.parametrize("items", [[3, 500], [3, 1682], [-1, 4], [7, 7], [[1, 2]]])
def test_place_refuses_items_the_round_does_not_have(layout: str, items: list) -> None:
    """A device whose data names items beyond the deployment's catalogue (e.g. ML-100K's 1,682
    against a 500-item deployment), a negative id, a repeated one or a 2-D array: a clear
    refusal in both layouts (the cuckoo kernel indexed its tables by item id and crashed the
    process with a segmentation fault)."""
    from secemb.protocols.placement import place
    from secemb.protocols.secemb import SecEmbProtocol

    cfg = SecEmbProtocol(layout=layout).round_config(0, 500, 3, 1, 30)
    with pytest.raises(InvalidParameters, match="must lie in|distinct|1-D"):
        place(cfg, np.array(items), np.random.default_rng(0))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_cuckoo_assign_refuses_out_of_range_ids_on_both_backends(monkeypatch: pytest.MonkeyPatch,
                                                                  backend: str) -> None:
    from secemb.fss import kernels
    from secemb.fss.cuckoo import CuckooLayout

    monkeypatch.setattr(kernels, "BACKEND", backend)
    layout = CuckooLayout.for_request_size(60, 10)
    for bad in ([0, 60], [-3], [59, 1 << 40]):
        with pytest.raises(InvalidParameters, match=r"must lie in \[0, 60\)"):
            layout.assign(np.array(bad), np.random.default_rng(1))
    slots, dropped = layout.assign(np.array([0, 59]), np.random.default_rng(1))
    assert sorted(slots[slots >= 0].tolist() + dropped.tolist()) == [0, 59]
