"""Session 21 (issue 37, goal 1): the SecEmb device's per-round glue done once for a batch of
devices -- the request slots of a round's devices checked as one array -- and a device's kept state
(its real slots derived from its items; the key points of its slots)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters, ProtocolError
from secemb.protocols.base import RoundConfig
from secemb.protocols.secemb import SecEmbProtocol
from secemb.randomness import CtrDrbg


def _setup(layout: str) -> tuple[SecEmbProtocol, RoundConfig, list[np.ndarray]]:
    """A round of 300 items with 12 slots a device, and five devices' valid request slots."""
    proto = SecEmbProtocol(layout=layout, relay=layout == "cuckoo")
    cfg = proto.round_config(4, 300, 4, 5, 12, 32)
    gen = np.random.default_rng(21)
    good = []
    for _ in range(5):
        items = gen.choice(300, 12, replace=False)
        good.append(cfg.cuckoo().assign(items, gen)[0] if layout == "cuckoo" else items.astype(np.int64))
    return proto, cfg, good


def _single_error(proto: SecEmbProtocol, cfg: RoundConfig, idx: object) -> Exception:
    """What a fresh device's own request of ``idx`` raises."""
    with pytest.raises((InvalidParameters, TypeError, ProtocolError)) as err:
        proto.make_user(cfg).retrieval_request(idx)  # type: ignore[arg-type]
    return err.value


@pytest.mark.parametrize("layout", ["cuckoo", "full"])
def test_a_batch_refuses_each_bad_request_as_its_own_call_would(layout: str) -> None:
    """Each refused device of a batch gets the error (type and message) its own request raises
    -- wrong shape, not integers, an item outside the domain (the first one named), -1 in the full
    layout -- and the others' messages are those of a batch without the refused ones (a refused
    device draws no randomness)."""
    proto, cfg, good = _setup(layout)
    outside, below = good[1].copy(), good[2].copy()
    outside[5:7] = [300, 301]
    below[3] = -2
    bad: list[object] = [np.arange(cfg.slots - 1), np.arange(cfg.slots).reshape(1, -1), good[0].astype(np.float64),
                         outside, below]
    if layout == "full":
        bad.append(np.r_[good[3][:-1], -1])
    indices = [bad[0], good[0], bad[1], bad[2], good[1], bad[3], bad[4], good[2], *bad[5:], good[3]]
    users = [proto.make_user(cfg) for _ in indices]
    got = type(users[0]).retrieval_requests(users, indices, _rng=CtrDrbg(b"s21/batch"))  # type: ignore[arg-type]
    clean = [proto.make_user(cfg) for _ in range(4)]
    want = type(clean[0]).retrieval_requests(clean, good[:4], _rng=CtrDrbg(b"s21/batch"))
    messages = iter(want)
    for idx, out in zip(indices, got, strict=True):
        if any(idx is b for b in bad):
            single = _single_error(proto, cfg, idx)
            assert isinstance(out, type(single)) and str(out) == str(single), (out, single)
        else:
            assert out == next(messages)
    assert next(messages, None) is None and all(isinstance(m, tuple) for m in want)
    assert "item index 300 is outside the domain [0, 300)" in str(got[5])  # the first bad value of the row
    assert "item index -2 is outside" in str(got[6])
    assert isinstance(got[3], TypeError)
    if layout == "full":
        assert "no empty slots" in str(got[8])


def test_a_batch_refuses_a_device_that_requested_already_and_keeps_its_state() -> None:
    proto, cfg, good = _setup("cuckoo")
    first, second = proto.make_user(cfg), proto.make_user(cfg)
    first.retrieval_request(good[0])
    state = first._state
    assert state is not None
    leaves = (state.leaf0.copy(), state.leaf1.copy())
    out = type(first).retrieval_requests([first, second], [good[1], good[2]], _rng=CtrDrbg(b"s21/twice"))
    assert isinstance(out[0], ProtocolError) and "retrieval_request called twice in one round" in str(out[0])
    assert isinstance(out[1], tuple) and second._state is not None
    assert first._state is state and np.array_equal(state.leaf0, leaves[0]) and np.array_equal(state.leaf1, leaves[1])


@pytest.mark.parametrize("layout", ["cuckoo", "full"])
def test_integer_indices_of_any_dtype_give_the_int64_requests(layout: str) -> None:
    """Devices of one batch whose slots come as int32, int16, uint16 (full layout: no -1) or
    int64 arrays, or lists, get the messages of the same slots as int64 arrays."""
    proto, cfg, good = _setup(layout)
    mixed: list[object] = [good[0].astype(np.int32), good[1].astype(np.int16), good[2].tolist(), good[3],
                           good[4].astype(np.uint16) if layout == "full" else good[4]]
    a = [proto.make_user(cfg) for _ in good]
    b = [proto.make_user(cfg) for _ in good]
    got = type(a[0]).retrieval_requests(a, mixed, _rng=CtrDrbg(b"s21/dtype"))  # type: ignore[arg-type]
    want = type(b[0]).retrieval_requests(b, good, _rng=CtrDrbg(b"s21/dtype"))
    assert all(isinstance(m, tuple) for m in want) and got == want


def test_cuckoo_key_points_are_each_item_s_place_in_its_bucket_and_0_for_an_empty_one() -> None:
    """The key points of a batch's slots: each real slot's item's position
    in the slot's bucket (the layout's gather index), 0 for an empty bucket; a device with an item
    in a bucket that is none of its candidates is not placed, whatever the other slots hold (-1 at
    any bucket is no item to look for)."""
    proto, cfg, good = _setup("cuckoo")
    layout = cfg.cuckoo()
    moved = good[1].copy()
    at = int(np.flatnonzero(moved >= 0)[0])
    moved[at] = next(i for i in range(300) if at not in layout.candidates[i])
    emptied = good[2].copy()
    emptied[np.flatnonzero(emptied >= 0)[:3]] = -1
    batch = np.stack([good[0], moved, emptied, np.full(cfg.slots, -1), good[3]])
    alphas, placed = proto.make_user(cfg)._alphas(batch)
    assert placed.tolist() == [True, False, True, True, True]
    for row, got, fits in zip(batch, alphas, placed, strict=True):
        for bucket, (item, point) in enumerate(zip(row.tolist(), got.tolist(), strict=True)):
            if item < 0:
                assert point == 0
            elif fits:
                assert layout.gather_index[bucket, point] == item, (bucket, item, point)


def test_a_device_s_real_slots_are_its_items_that_are_not_minus_1() -> None:
    proto, cfg, good = _setup("cuckoo")
    user = proto.make_user(cfg)
    assert user._real is None
    user.retrieval_request(good[0])
    real = user._real
    assert real is not None and real.dtype == bool and real.tolist() == (good[0] >= 0).tolist()
    assert real.flags.owndata and real is not user._real  # a fresh array each time: nothing of the device's to write
