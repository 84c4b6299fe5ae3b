"""Exact baselines (SecFedRec, SecEmb-Init, SecEmb-RowEnc, GREC): the secure aggregate equals
the plaintext one bit for bit, through the training loop's --verify and by model hash."""

import numpy as np
import pytest

from secemb import fss
from secemb.data import synthetic_like
from secemb.errors import InvalidMessage, ProtocolError
from secemb.models import get_model
from secemb.protocols import get_protocol
from secemb.protocols.ablations import aggregate_keys, element_keys, row_keys
from secemb.randomness import CtrDrbg
from secemb.round.results import TrainConfig
from secemb.training.loop import train

EXACT = ["secfedrec", "secemb-init", "secemb-rowenc", "grec"]


@pytest.fixture(scope="module")
def data():
    return synthetic_like(10, 37, 150, seed=4)


@pytest.mark.parametrize("name", EXACT)
def test_secure_run_equals_plaintext_bit_for_bit(data, name):
    cfg = TrainConfig(epochs=2, users_per_round=4, m_prime=9, verify=True, seed=3)
    secure = train(get_model("mf", dim=3), get_protocol(name), data, None, cfg)
    plain = train(get_model("mf", dim=3), get_protocol("plaintext"), data, None,
                  TrainConfig(epochs=2, users_per_round=4, m_prime=9, seed=3))
    assert secure.verified_rounds == secure.rounds > 0
    assert secure.model_sha256 == plain.model_sha256


@pytest.mark.parametrize("name", ["secemb-init", "grec"])
def test_server_eval_off_keeps_bytes(data, name):
    cfg = TrainConfig(epochs=1, users_per_round=4, m_prime=9)
    on = train(get_model("mf", dim=3), get_protocol(name), data, None, cfg)
    off = train(get_model("mf", dim=3), get_protocol(name, server_eval=False), data, None, cfg)
    assert on.upload_bytes_per_user_round == off.upload_bytes_per_user_round


def test_key_aggregation_helpers():
    rng = CtrDrbg(b"k" * 16)
    idx = np.array([3, 0, 9])
    rows = np.arange(12, dtype=np.uint32).reshape(3, 4) + 1
    for gen, cols in ((row_keys, 1), (element_keys, 4)):
        k0, k1 = gen(idx, rows, 11, 32, rng)
        total = aggregate_keys(k0, 0, cols) + aggregate_keys(k1, 1, cols)
        want = np.zeros((11, 4), np.uint32)
        want[idx] = rows
        assert np.array_equal(total, want)


def test_byte_sizes_follow_the_key_format():
    m, mp, w = 1682, 200, 65
    p1, pw = fss.DPFParams(m, 1), fss.DPFParams(m, w)
    proto = get_protocol("secemb-rowenc")
    rc = proto.round_config(0, m, w, 1, mp)
    user = proto.make_user(rc)
    q0, _ = user.retrieval_request(np.arange(mp))
    assert len(q0) == 32 + 49 + mp * p1.key_bytes  # framing header + key batch prefix
    user._stage = 2
    u0, _ = user.upload(np.zeros((mp, w), np.uint32), np.zeros(1, np.uint32))
    assert len(u0) == 32 + 49 + mp * pw.key_bytes + 4
    init = get_protocol("secemb-init").make_user(rc)
    init.retrieval_request(np.arange(mp))
    init._stage = 2
    u0, _ = init.upload(np.zeros((mp, w), np.uint32), np.zeros(1, np.uint32))
    assert len(u0) == 32 + 49 + mp * w * p1.key_bytes + 4


def test_secfedrec_rejects_bad_messages():
    proto = get_protocol("secfedrec")
    rc = proto.round_config(0, 10, 3, 2, 4)
    s0 = proto.make_server(0)
    s0.begin_round(rc, np.zeros((10, 3), np.uint32))
    user = proto.make_user(rc)
    q0, _ = user.retrieval_request(np.arange(4))
    with pytest.raises(ProtocolError):
        s0.handle_upload(5, b"x")
    reply = s0.handle_retrieval(5, q0)
    assert len(reply) == 32 + 10 * 3 * 4
    with pytest.raises(InvalidMessage):
        s0.handle_upload(5, q0)  # a request is not an upload
    with pytest.raises(ProtocolError):
        s0.handle_retrieval(5, q0)  # twice
