"""The device SDK without a network: stage order, local update against the loop's arithmetic,
undoing a local step."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.client.device import DeviceClient, RoundInfo, RoundSession
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.models import MatrixFactorization
from secemb.models.batch import rating_batch
from secemb.models.optim import AdamConfig
from secemb.protocols import get_protocol
from secemb.protocols.placement import place
from secemb.ring import FixedPoint
from secemb.round.local import distinct_items, local_update


def _info(**over):
    proto = get_protocol("secemb", layout="cuckoo")
    rc = proto.round_config(3, 40, 5, 1, 6)
    doc = {"round_id": 3, "state": "open", "model_version": 1, "n_p": 4, "min_users": 2, "deadline_unix": 0.0,
           "config": rc.__dict__, "protocol": {"name": "secemb", "layout": "cuckoo", "relay": True,
                                                "expansion": 1.25, "layout_seed": 0},
           "model": {"name": "mf", "hparams": {"dim": 4, "reg": 0.01, "init_std": 0.1}},
           "training": {"lr": 0.025, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "ring_bits": 32, "frac_bits": 16},
           "fingerprint": "f", "participant": True}
    return RoundInfo.from_doc(doc | over)


def test_round_info_is_validated():
    info = _info()
    assert info.config.slots == info.config.num_buckets and info.make_model().dim == 4
    with pytest.raises(InvalidMessage):
        _info(config={"round_id": 3})
    with pytest.raises(InvalidMessage):
        RoundInfo.from_doc({"round_id": 1})


def test_session_steps_must_come_in_order():
    client = DeviceClient(1, "http://127.0.0.1:9", "http://127.0.0.1:9", b"k" * 32, b"k" * 32)
    s = RoundSession(client, _info())
    for step in (s.send_requests, s.fetch_dense, s.reconstruct, lambda: s.train(None), s.upload):
        with pytest.raises(ProtocolError):
            step()
    s.prepare(np.array([1, 5, 9]), np.array([4.0, 3.0, 5.0], dtype=np.float32), rng=np.random.default_rng(0))
    with pytest.raises(ProtocolError):
        s.prepare(np.array([1]), np.array([4.0], dtype=np.float32))
    client.close()


def test_local_update_encodes_clipped_gradients_at_the_request_slots():
    info = _info()
    rc, fp = info.config, FixedPoint(32, 16)
    model = MatrixFactorization(dim=4, reg=0.01)
    store = model.new_user_store(1, np.random.default_rng(0), AdamConfig())
    items = np.array([3, 3, 8, 20, 33])
    ratings = np.array([4, 2, 5, 1, 3], dtype=np.float32)
    uniq, pos = distinct_items(items)
    req = place(rc, uniq, np.random.default_rng(1))
    table = np.random.default_rng(2).normal(size=(rc.num_items, rc.width))
    rows_ring = fp.encode(table[np.maximum(req.indices, 0)]) * (req.indices >= 0)[:, None].astype(np.uint32)
    dense_ring = fp.encode(np.array([3.0]))
    before = store.snapshot(0)
    g, d, res = local_update(fp, rc, 4, req, uniq.size, rating_batch(pos, ratings), rows_ring, dense_ring,
                             lambda rows, dd, batch: model.local_step(rows, dd, store.state(0), batch))
    assert g.shape == (rc.slots, rc.width) and g.dtype == np.uint32 and d.shape == (1,)
    empty = np.setdiff1d(np.arange(rc.slots), req.real_pos)
    assert not g[empty].any()  # padding / empty buckets: exact zeros
    assert np.allclose(fp.decode(g[req.real_pos]), np.clip(res.row_grads, -fp.clip_bound(4), fp.clip_bound(4)),
                       atol=2**-16)
    assert not np.array_equal(store.params[0], before.params) and store.steps(0) == 1
    store.restore(0, before)
    after = store.snapshot(0)
    assert all(np.array_equal(a, b) for a, b in ((after.params, before.params), (after.m, before.m), (after.v, before.v)))
    assert after.t == before.t == store.steps(0) == 0
    with pytest.raises(InvalidParameters):
        store.restore(0, (before.params, before.m, before.v, 0))
