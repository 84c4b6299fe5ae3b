"""The public cuckoo layout: buckets, positions, scatter, insertion."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss.cuckoo import NUM_HASHES, CuckooLayout


@pytest.fixture(scope="module")
def layout() -> CuckooLayout:
    return CuckooLayout.for_request_size(1682, 200)


def test_every_item_sits_in_each_of_its_distinct_candidate_buckets(layout: CuckooLayout) -> None:
    idx = layout.gather_index
    for item in range(0, 1682, 37):
        where = set(np.argwhere(idx == item)[:, 0].tolist())
        assert where == set(layout.candidates[item].tolist())


def test_buckets_are_sorted_and_padded_with_minus_one(layout: CuckooLayout) -> None:
    idx = layout.gather_index
    assert idx.shape == (layout.num_buckets, layout.bucket_size)
    for row in idx:
        real = row[row >= 0]
        assert np.all(np.diff(real) > 0) and np.all(row[real.size :] == -1)


def test_positions_point_at_the_item(layout: CuckooLayout) -> None:
    rng = np.random.default_rng(1)
    items = rng.integers(0, 1682, 500)
    buckets = layout.candidates[items, rng.integers(0, NUM_HASHES, 500)]
    pos = layout.positions(items, buckets)
    assert np.array_equal(layout.gather_index[buckets, pos], items)


def test_positions_fail_if_the_bucket_does_not_hold_the_item(layout: CuckooLayout) -> None:
    item = 5
    wrong = next(b for b in range(layout.num_buckets) if b not in layout.candidates[item])
    with pytest.raises(InvalidParameters, match="does not hold"):
        layout.positions(np.array([item]), np.array([wrong]))


def test_scatter_sums_every_occurrence_and_ignores_padding(layout: CuckooLayout) -> None:
    rng = np.random.default_rng(2)
    form = rng.integers(0, 2**32, (layout.num_buckets, layout.bucket_size, 3), dtype=np.uint64).astype(np.uint32)
    expected = np.zeros((1682, 3), np.uint32)
    idx = layout.gather_index
    for b, p in zip(*np.nonzero(idx >= 0)):
        expected[idx[b, p]] += form[b, p]
    assert np.array_equal(layout.scatter(form), expected)


def test_assign_places_each_item_at_most_once_in_one_of_its_buckets(layout: CuckooLayout) -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        items = rng.choice(1682, 200, replace=False)
        slots, dropped = layout.assign(items, rng)
        placed = slots[slots >= 0]
        assert len(set(placed.tolist())) == placed.size
        assert set(placed.tolist()) | set(dropped.tolist()) == set(items.tolist())
        for b in np.flatnonzero(slots >= 0):
            assert b in layout.candidates[slots[b]]


def test_insertion_failures_are_rare_at_expansion_1_25(layout: CuckooLayout) -> None:
    rng = np.random.default_rng(4)
    dropped = sum(layout.assign(rng.choice(1682, 200, replace=False), rng)[1].size for _ in range(300))
    assert dropped / (300 * 200) < 1e-3


def test_layout_fails_if_parameters_are_out_of_range() -> None:
    with pytest.raises(InvalidParameters):
        CuckooLayout(0, 10)
    with pytest.raises(InvalidParameters):
        CuckooLayout(10, 2)
    with pytest.raises(InvalidParameters):
        CuckooLayout.for_request_size(10, 5, expansion=0.9)
    with pytest.raises(InvalidParameters, match="cannot place"):
        CuckooLayout(100, 5).assign(np.arange(6), np.random.default_rng(0))


@pytest.mark.parametrize(("m", "buckets", "load"), [(500, 40, 10), (500, 40, 38), (60, 12, 12), (2000, 250, 200)])
def test_assign_is_the_same_on_both_kernel_backends(monkeypatch: pytest.MonkeyPatch, m: int, buckets: int,
                                                    load: int) -> None:
    """The compiled free-bucket runs with evictions in Python place, drop and draw exactly as
    the reference loop: the same slots, the same dropped items, the generator left in the
    same state (full loads force evictions and drops)."""
    from secemb.fss import kernels

    layout = CuckooLayout(m, buckets, seed=3)
    out = {}
    for backend in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        runs = []
        for trial in range(20):
            rng = np.random.default_rng(trial)
            items = rng.choice(m, load, replace=False)
            slots, dropped = layout.assign(items, rng)
            runs.append((slots.tolist(), dropped.tolist(), int(rng.integers(2**62))))
        out[backend] = runs
    assert out["numpy"] == out["numba"]
    if load > 0.9 * buckets:  # beyond cuckoo hashing's load threshold evictions give up
        assert any(dropped for _, dropped, _ in out["numpy"])
