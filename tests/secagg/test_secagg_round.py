"""Bonawitz secure aggregation: exact sums under dropouts, clean aborts, the transcript."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from secagg_rounds import Round

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.randomness import CtrDrbg
from secemb.secagg import (
    SecAggAborted,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    default_threshold,
    run_round,
)
from secemb.secagg import messages, shamir


def _inputs(ids, shape, seed):
    g = np.random.default_rng(seed)
    return {i: g.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32) for i in ids}


def _expected(inputs, survivors, rows=None, length=None, width=1):
    """The plaintext sum, computed directly by numpy (mod 2^32 by uint32 wrap-around)."""
    if rows is None:
        return np.sum([inputs[i].reshape(-1, width) for i in survivors], axis=0, dtype=np.uint32)
    out = np.zeros((length, width), np.uint32)
    for i in survivors:
        out[rows[i]] += inputs[i].reshape(-1, width)
    return out


def _survivors(ids, drops):
    return [i for i in ids if drops.get(i, 4) > 2]


def _live_counts(ids, drops):
    """Clients still sending at each of the four stages."""
    return [sum(1 for i in ids if drops.get(i, 4) > k) for k in range(4)]


@st.composite
def _round(draw, sparse):
    n = draw(st.integers(3, 9))
    t = draw(st.integers(2, n))
    ids = sorted(draw(st.sets(st.integers(0, 2**32 - 2), min_size=n, max_size=n)))
    drops = {i: draw(st.integers(0, 4)) for i in ids}
    drops = {i: k for i, k in drops.items() if k < 4}
    width = draw(st.integers(1, 5))
    length = draw(st.integers(1, 24))
    return ids, t, drops, width, length, draw(st.integers(0, 2**64 - 1)), sparse


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_round(False) | _round(True), st.integers(0, 2**31))
def test_any_dropouts_open_the_exact_sum_or_abort(case, seed):
    ids, t, drops, width, length, round_id, sparse = case
    cfg = SecAggConfig(length=length, threshold=t, width=width, round_id=round_id, sparse=sparse)
    g = np.random.default_rng(seed)
    rows = {i: np.flatnonzero(g.random(length) < 0.6) for i in ids} if sparse else None
    inputs = {i: g.integers(0, 2**32, (length if rows is None else rows[i].size, width),
                            dtype=np.uint64).astype(np.uint32) for i in ids}
    if min(_live_counts(ids, drops)) < t:
        with pytest.raises(SecAggAborted):
            run_round(cfg, inputs, rows=rows, drop_after=drops, _rng=CtrDrbg(seed))
        return
    tr = run_round(cfg, inputs, rows=rows, drop_after=drops, _rng=CtrDrbg(seed))
    surv = _survivors(ids, drops)
    assert tr.survivors == surv
    assert tr.total.shape == (length, width) and tr.total.dtype == np.uint32
    assert np.array_equal(tr.total, _expected(inputs, surv, rows, length, width))


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_dropouts_after_each_stage_up_to_n_minus_t(stage):
    ids = list(range(10))
    t = default_threshold(10)  # 6
    inputs = _inputs(ids, (33, 2), stage)
    cfg = SecAggConfig(length=33, threshold=t, width=2, round_id=7)
    drops = {i: stage for i in ids[: 10 - t]}  # 4 drop after `stage` stages
    tr = run_round(cfg, inputs, drop_after=drops)
    surv = _survivors(ids, drops)
    assert np.array_equal(tr.total, _expected(inputs, surv, width=2))


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_one_more_dropout_aborts_without_a_result(stage):
    ids = list(range(10))
    cfg = SecAggConfig(length=8, threshold=6)
    with pytest.raises(SecAggAborted, match="threshold 6"):
        run_round(cfg, _inputs(ids, (8,), 1), drop_after={i: stage for i in ids[:5]})


def test_aborted_server_refuses_every_later_call():
    cfg = SecAggConfig(length=4, threshold=3)
    server = SecAggServer(cfg)
    clients = [SecAggClient(i, cfg) for i in range(2)]
    for c in clients:
        server.receive_advertise(c.id, c.advertise())
    with pytest.raises(SecAggAborted):
        server.keys_messages()
    with pytest.raises(SecAggAborted):
        server.receive_shares(0, b"")
    with pytest.raises(SecAggAborted):
        server.result()


def test_sparse_sum_is_per_row_over_holders():
    ids = list(range(6))
    length = 20
    g = np.random.default_rng(3)
    rows = {i: np.sort(g.choice(length, 7, replace=False)) for i in ids}
    inputs = {i: g.integers(0, 2**32, (7, 3), dtype=np.uint64).astype(np.uint32) for i in ids}
    cfg = SecAggConfig(length=length, threshold=4, width=3, sparse=True)
    drops = {0: 2, 5: 3}  # 0 drops after sharing keys (its masks are recovered), 5 before unmasking
    tr = run_round(cfg, inputs, rows=rows, drop_after=drops, record=True)
    assert np.array_equal(tr.total, _expected(inputs, [1, 2, 3, 4, 5], rows, length, 3))
    # the key list carries, per listed client, a bitmap over the recipient's 7 rows (1 byte)
    keys = {r: m for s, snd, r, m in tr.messages if s == "AdvertiseKeys" and snd == -1}
    assert all(len(m) == messages.HEADER_BYTES + 4 + 6 * (4 + 64) + 6 * 1 for m in keys.values())
    body = keys[1][messages.HEADER_BYTES + 4 + 6 * 68 :]
    shared = np.unpackbits(np.frombuffer(body, np.uint8), bitorder="little").reshape(6, 8)[:, :7]
    for v in ids:
        expect = np.isin(rows[1], rows[v]) if v != 1 else np.zeros(7, bool)
        assert np.array_equal(shared[v].astype(bool), expect)


def test_server_never_receives_an_input_unmasked_nor_both_secrets_of_a_client():
    ids = list(range(8))
    cfg = SecAggConfig(length=64, threshold=5, round_id=11)
    inputs = {i: np.full(64, i + 1, np.uint32) for i in ids}  # structured, easy to spot
    drops = {0: 2, 1: 2, 2: 3}
    tr = run_round(cfg, inputs, drop_after=drops, record=True)
    assert np.array_equal(tr.total, _expected(inputs, _survivors(ids, drops)))
    key_shares, seed_shares = set(), set()
    for stage, sender, recipient, msg in tr.messages:
        if recipient != -1:
            continue
        _, body = messages.open_frame(msg, ["advertise", "shares", "masked", "unmask"][
            ["AdvertiseKeys", "ShareKeys", "MaskedInputCollection", "Unmasking"].index(stage)], 11, sender)
        raw = bytes(body)
        # no run of the input (8 words = 32 bytes) appears anywhere in what the server receives
        assert inputs[sender].astype("<u4").tobytes()[:32] not in raw
        if stage == "MaskedInputCollection":
            y = np.frombuffer(raw, "<u4")
            assert np.count_nonzero(y == inputs[sender]) <= 1
            assert len(np.unique(y)) > 60  # looks uniform, not the constant input
        if stage == "Unmasking":
            rd = messages.Reader(body, "unmask")
            key_shares |= {v for v, _ in rd.records(shamir.SHARE_BYTES, "d")}
            seed_shares |= {v for v, _ in rd.records(shamir.SHARE_BYTES, "s")}
    assert key_shares == {0, 1} and seed_shares == {2, 3, 4, 5, 6, 7}
    assert not key_shares & seed_shares


def test_masked_input_is_independent_of_the_input():
    """Two runs with the same randomness and different inputs: the masked vectors differ by
    exactly the input difference, and each is uniform-looking (mask ~ U(Z_2^32))."""
    cfg = SecAggConfig(length=4096, threshold=2)
    a = {0: np.zeros(4096, np.uint32), 1: np.zeros(4096, np.uint32)}
    tr = run_round(cfg, a, record=True, _rng=CtrDrbg(5))
    y = [np.frombuffer(m[messages.HEADER_BYTES :], "<u4") for s, _, r, m in tr.messages
         if s == "MaskedInputCollection" and r == -1]
    for v in y:
        # mean of 4096 uniform words is 2^31 +- ~0.9%; top byte spread over all values
        assert abs(float(v.mean()) / 2**31 - 1) < 0.05
        assert len(np.unique(v >> 24)) > 240


def test_client_checks_stage_order_and_inputs():
    cfg = SecAggConfig(length=3, threshold=2)
    c = SecAggClient(0, cfg)
    with pytest.raises(ProtocolError):
        c.unmask(b"")
    with pytest.raises(InvalidParameters):
        c.advertise(np.array([0, 1]))  # rows in a dense round
    c.advertise()
    with pytest.raises(ProtocolError):
        c.advertise()


def _two_party_server(cfg):
    server = SecAggServer(cfg)
    clients = {i: SecAggClient(i, cfg) for i in (3, 9, 12)}
    for i, c in clients.items():
        server.receive_advertise(i, c.advertise())
    return server, clients


def test_server_rejects_bad_messages():
    cfg = SecAggConfig(length=5, threshold=2, round_id=1)
    server, clients = _two_party_server(cfg)
    other = SecAggClient(4, cfg)
    with pytest.raises(InvalidMessage, match="duplicate"):
        server.receive_advertise(3, SecAggClient(3, cfg).advertise())
    with pytest.raises(InvalidMessage, match="claims sender"):
        server.receive_advertise(5, other.advertise())
    keys = server.keys_messages()
    with pytest.raises(ProtocolError):
        server.receive_advertise(4, other.advertise())
    shares = {i: c.share_keys(keys[i]) for i, c in clients.items()}
    with pytest.raises(InvalidMessage, match="not in this stage"):
        server.receive_shares(4, shares[3])
    with pytest.raises(InvalidMessage):
        server.receive_shares(3, shares[3][:-1])  # truncated
    bad_round = bytearray(shares[3])
    bad_round[16] ^= 1  # header bytes 16-23: the round id
    with pytest.raises(InvalidMessage, match="round"):
        server.receive_shares(3, bytes(bad_round))
    body = shares[3][messages.HEADER_BYTES + 4 :]
    rec = body[: len(body) // 2]  # client 3's shares for clients 9 and 12: one record each
    duplicated = messages.frame("shares", 1, 3, (2).to_bytes(4, "little"), rec, rec)
    with pytest.raises(InvalidMessage, match="no duplicates"):
        server.receive_shares(3, duplicated)
    only_one = messages.frame("shares", 1, 3, (1).to_bytes(4, "little"), rec)
    with pytest.raises(InvalidMessage, match="exactly the other 2"):
        server.receive_shares(3, only_one)
    for i, msg in shares.items():
        server.receive_shares(i, msg)
    with pytest.raises(InvalidMessage, match="duplicate"):
        server.receive_shares(9, shares[9])
    relayed = server.relayed_messages()
    masked = {i: c.masked_input(relayed[i], np.arange(5, dtype=np.uint32)) for i, c in clients.items()}
    with pytest.raises(InvalidMessage, match="bytes, expected"):
        server.receive_masked(3, messages.frame("masked", 1, 3, b"\0" * 16))
    for i, msg in masked.items():
        server.receive_masked(i, msg)
    with pytest.raises(ProtocolError):
        server.result()  # before the survivors are announced


def test_client_rejects_foreign_keys_and_stays_past_tampered_relayed_shares():
    """A key list without the client, or with other keys under its id, is refused; relayed shares
    altered on the way (the last record, client 12's to client 3) are not: client 3 masks with
    12 as usual, leaves 12 out of its unmask message, and the sum over all three is exact
    (finding F2, session 22)."""
    cfg = SecAggConfig(length=5, threshold=2)
    server, clients = _two_party_server(cfg)
    keys = server.keys_messages()
    outsider = SecAggClient(7, cfg)
    outsider.advertise()
    with pytest.raises(InvalidMessage, match="not in the key list"):
        outsider.share_keys(keys[3])
    stranger = SecAggClient(3, cfg)
    stranger.advertise()
    with pytest.raises(InvalidMessage, match="other keys"):
        stranger.share_keys(keys[3])
    for i, c in clients.items():
        server.receive_shares(i, c.share_keys(keys[i]))
    relayed = server.relayed_messages()
    forged = bytearray(relayed[3])
    forged[-1] ^= 1
    relayed[3] = bytes(forged)
    inputs = _inputs(clients, 5, 11)
    for i, c in clients.items():
        server.receive_masked(i, c.masked_input(relayed[i], inputs[i]))
    surv = server.survivors_messages()
    unmask = {i: c.unmask(surv[i]) for i, c in clients.items()}
    share = 4 + shamir.SHARE_BYTES
    assert len(unmask[3]) == messages.HEADER_BYTES + 8 + 2 * share  # seeds of 3 and 9, none of 12
    assert len(unmask[9]) == messages.HEADER_BYTES + 8 + 3 * share
    for i, msg in unmask.items():
        server.receive_unmask(i, msg)
    assert np.array_equal(server.result(), _expected(inputs, clients, width=1))
    assert server.complaints == {3: [12]} and server.cheaters == []


def test_unmask_refuses_survivors_outside_the_round():
    cfg = SecAggConfig(length=2, threshold=2)
    server, clients = _two_party_server(cfg)
    keys = server.keys_messages()
    for i, c in clients.items():
        server.receive_shares(i, c.share_keys(keys[i]))
    relayed = server.relayed_messages()
    for i, c in clients.items():
        server.receive_masked(i, c.masked_input(relayed[i], np.zeros(2, np.uint32)))
    bad = messages.frame("survivors", 0, messages.SERVER, messages.ids_bytes([3, 9, 77]))
    with pytest.raises(InvalidMessage, match="subset"):
        clients[3].unmask(bad)
    dup = messages.frame("survivors", 0, messages.SERVER, messages.ids_bytes([3, 3, 9]))
    with pytest.raises(InvalidMessage, match="increasing"):
        clients[9].unmask(dup)


def test_config_validation():
    with pytest.raises(InvalidParameters):
        SecAggConfig(length=0, threshold=2)
    with pytest.raises(InvalidParameters):
        SecAggConfig(length=3, threshold=1)
    with pytest.raises(InvalidParameters, match="2\\^30"):
        SecAggConfig(length=2**28, threshold=2, width=5)
    with pytest.raises(InvalidParameters):
        SecAggClient(2**32 - 1, SecAggConfig(length=3, threshold=2))
    assert default_threshold(10) == 6 and default_threshold(3) == 2


def _corruptions(msg):
    yield msg[:-1]  # truncated
    yield msg + b"\0"  # extended
    yield msg[: messages.HEADER_BYTES - 1]  # shorter than a header
    yield b"XXXX" + msg[4:]  # wrong magic
    bad_kind = bytearray(msg)
    bad_kind[5] = (bad_kind[5] % 8) + 1
    yield bytes(bad_kind)
    # consistent headers around a body one byte short / long: the body parsers must refuse
    head, body = bytearray(msg[: messages.HEADER_BYTES]), msg[messages.HEADER_BYTES :]
    for new_body in (body[:-1], body + b"\0"):
        head[-4:] = len(new_body).to_bytes(4, "little")
        yield bytes(head) + new_body


@pytest.mark.parametrize("sparse", [False, True])
def test_every_truncated_or_altered_message_is_refused_without_changing_state(sparse):
    import copy

    cfg = SecAggConfig(length=6, threshold=2, width=2, round_id=9, sparse=sparse)
    ids = (1, 4, 6)
    rows = {1: np.array([0, 2, 5]), 4: np.array([2, 3]), 6: np.array([0, 1, 2, 5])}
    server = SecAggServer(cfg)
    clients = {i: SecAggClient(i, cfg) for i in ids}

    def to_server(receive, cid, msg):
        for bad in _corruptions(msg):
            with pytest.raises(InvalidMessage):
                receive(cid, bad)
        receive(cid, msg)

    def to_client(method, msg, *args):
        for bad in _corruptions(msg):
            with pytest.raises(InvalidMessage):
                getattr(copy.deepcopy(method.__self__), method.__name__)(bad, *args)
        return method(msg, *args)

    for i, c in clients.items():
        to_server(server.receive_advertise, i, c.advertise(rows[i] if sparse else None))
    keys = server.keys_messages()
    for i, c in clients.items():
        to_server(server.receive_shares, i, to_client(c.share_keys, keys[i]))
    relayed = server.relayed_messages()
    inputs = {i: np.full(((rows[i].size if sparse else 6), 2), i, np.uint32) for i in ids}
    for i, c in clients.items():
        to_server(server.receive_masked, i, to_client(c.masked_input, relayed[i], inputs[i]))
    surv = server.survivors_messages()
    for i, c in clients.items():
        to_server(server.receive_unmask, i, to_client(c.unmask, surv[i]))
    expected = _expected(inputs, ids, rows if sparse else None, 6, 2)
    assert np.array_equal(server.result(), expected)


def test_a_wrong_key_share_aborts_the_round_and_an_out_of_field_share_is_refused():
    cfg = SecAggConfig(length=4, threshold=3)
    rnd = Round(cfg, {i: np.zeros(cfg.length, np.uint32) for i in range(4)})
    rnd.play(dropped=(0,), until="unmask")
    server, unmask = rnd.server, rnd.unmask
    msg = bytearray(unmask[1])
    # first record of the key-share list: header, count (4), id (4), then the share of client 0
    at = messages.HEADER_BYTES + 8
    outside = bytearray(msg)
    outside[at : at + shamir.SHARE_BYTES] = b"\xff" * shamir.SHARE_BYTES
    with pytest.raises(InvalidMessage, match="outside the field"):
        server.receive_unmask(1, bytes(outside))
    msg[at + 10] ^= 1  # still a field element, but the wrong share (not only in bits X25519 clamps)
    server.receive_unmask(1, bytes(msg))
    server.receive_unmask(2, unmask[2])
    server.receive_unmask(3, unmask[3])
    # three shares, the threshold: nothing to compare, the opened key is checked against the advertised one
    with pytest.raises(SecAggAborted, match=r"the mask key of client 0 opened from 3 shares does not match its "
                                            r"public key \(.*nobody is named\)"):
        server.result()
    assert server.cheaters == []


@functools.cache
def _deliveries():
    """Every message of a sparse round with a dropout, each with a snapshot of its receiver
    taken just before delivery: ``(receiver, method name, message, extra args)``."""
    import copy

    cfg = SecAggConfig(length=9, threshold=2, width=2, round_id=4, sparse=True)
    rows = {2: np.array([0, 3, 4, 8]), 5: np.array([3, 4]), 7: np.array([1, 3, 8])}
    server = SecAggServer(cfg)
    clients = {i: SecAggClient(i, cfg) for i in rows}  # os.urandom: snapshots must deep-copy
    out = []

    def to_server(name, cid, msg):
        out.append((copy.deepcopy(server), name, msg, (cid,)))
        getattr(server, name)(cid, msg)

    def to_client(cid, name, msg, *args):
        out.append((copy.deepcopy(clients[cid]), name, msg, args))
        return getattr(clients[cid], name)(msg, *args)

    for i, c in clients.items():
        to_server("receive_advertise", i, c.advertise(rows[i]))
    keys = server.keys_messages()
    for i in clients:
        to_server("receive_shares", i, to_client(i, "share_keys", keys[i]))
    relayed = server.relayed_messages()
    for i in (2, 7):  # 5 drops after ShareKeys
        x = np.ones((rows[i].size, 2), np.uint32)
        to_server("receive_masked", i, to_client(i, "masked_input", relayed[i], x))
    surv = server.survivors_messages()
    for i in (2, 7):
        to_server("receive_unmask", i, to_client(i, "unmask", surv[i]))
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 255))
def test_a_flipped_byte_is_accepted_or_refused_with_invalid_message(which, pos, flip):
    """Semi-honest messages carry no MAC where the server cannot check them (masked values,
    relayed ciphertexts): a flip there may pass.  Anything else a flip breaks is refused with
    InvalidMessage -- never another exception."""
    import copy

    deliveries = _deliveries()
    party, name, msg, args = deliveries[which % len(deliveries)]
    bad = bytearray(msg)
    bad[pos % len(bad)] ^= flip
    party = copy.deepcopy(party)
    method = getattr(party, name)
    try:
        if isinstance(party, SecAggServer):
            method(args[0], bytes(bad))
        else:
            method(bytes(bad), *args)
    except InvalidMessage:
        pass
