"""An adversarial review of SFSL's one-server node and devices (secemb.protocols.sfsl): what a
deviating device or server gains by changing a message.  Refusals change nothing; what SFSL's
honest-but-curious threat model leaves open is shown by a ``test_limit_*`` test and stated in
docs/security.md ("One-server protocols")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from staged_round import drive

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.framing import HEADER_BYTES
from secemb.protocols.exchange import ExchangeRun
from secemb.protocols.sfsl import wire as sfsl_wire
from secemb.protocols.sfsl.protocol import SFSLProtocol
from secemb.protocols.sfsl.staged import SFSL_PLAN, SFSLNode

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def clicks():
    return split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))


def protocol(clicks, preset: str = "CPP1", users: int = 3) -> SFSLProtocol:
    return SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=users), sfsl_preset=preset, batch=8, data=clicks)


@pytest.mark.parametrize("bad", [{"batch": 0}, {"batch": 2.5}, {"lr": "x"}, {"lr": float("nan")}, {"epochs": 0},
                                 {"bound": 0.0}, {"levels": 1}, {"max_weight": 2**40}, {"max_weight": True}])
def test_finding_round_settings_a_device_cannot_train_with_are_refused_up_front(clicks, bad):
    """The round document's training settings come from the server.  Settings a device cannot
    train with crashed it mid-round with a builtin error (``batch`` 0: ValueError, ``lr`` "x":
    TypeError -- a traceback out of ``secemb client``), or trained on silently (``lr`` NaN, a
    ``max_weight`` that lets the secure sum wrap around Z_2^32); now the device refuses the
    document (InvalidMessage) before it draws anything."""
    proto = protocol(clicks)
    node = proto.make_server().node
    doc = node.open_round(1, [0, 1, 2])
    device = proto.make_device(0)
    device.party(doc)  # the server's own settings are fine
    with pytest.raises(InvalidMessage, match="not an SFSL round document"):
        device.party({**doc, "settings": {**doc["settings"], **bad}})


def test_training_settings_check_bounds_by_hand():
    from secemb.protocols.sfsl import TrainingSettings

    # max_weight's public cap for 3 devices and 2^15 levels: floor((2^32 - 1) / (3 (2^15 - 1))) = 43692
    assert TrainingSettings(max_weight=43692).check(3).max_weight == 43692
    with pytest.raises(InvalidParameters, match="max_weight"):
        TrainingSettings(max_weight=43693).check(3)
    assert TrainingSettings(lr=0.0).check(2).lr == 0.0


def test_every_stage_refuses_malformed_messages_without_change(clicks):
    """Device 0's message of each of the nine stages with any one framing header byte changed,
    cut, extended, or (a secure-aggregation message: it names its sender) sent as device 1:
    refused (InvalidMessage, or ProtocolError / InvalidParameters for a call out of order); the
    PSU's message of a step replayed at the secure sum's, and a well-framed masked input of the
    wrong size for the round, are refused; the genuine message is then
    accepted (not a duplicate): the round commits."""
    proto = protocol(clicks)
    node = proto.make_server().node
    assert isinstance(node, SFSLNode)
    doc = node.open_round(1, [0, 1, 2])
    parties = {u: proto.make_device(u).party(doc) for u in range(3)}
    tried: list[str] = []
    psu: dict[str, bytes] = {}

    def attack(stage: str, u: int, body: bytes) -> bytes:
        """Device 0's malformed variants of ``body``, each refused; ``body`` itself is sent."""
        if u != 0:
            return body
        bad = []
        for off in range(HEADER_BYTES):
            b = bytearray(body)
            b[off] ^= 0x01
            bad.append(bytes(b))
        bad += [body[:cut] for cut in (0, HEADER_BYTES, len(body) - 1)] + [body + b"\0"]
        for msg in bad:
            with pytest.raises((InvalidMessage, ProtocolError, InvalidParameters)):
                node.receive(1, stage, 0, msg)
        if stage != "download":  # a request names no device: device 1 sending it asks for S''_0 itself
            with pytest.raises(InvalidMessage):
                node.receive(1, stage, 1, body)  # device 1 posting device 0's message
        if stage.endswith("-masked"):  # one input word fewer, the header's body length made to match
            short = body[:24] + (len(body) - HEADER_BYTES - 4).to_bytes(8, "little") + body[HEADER_BYTES:-4]
            with pytest.raises(InvalidMessage, match="masked input of client 0 is"):
                node.receive(1, stage, 0, short)
        if stage.startswith("psu-"):
            psu[stage.split("-")[1]] = body
        elif stage.startswith("sum-"):  # the PSU's message of the same step, replayed (secagg round 2r, not 2r + 1)
            with pytest.raises(InvalidMessage, match="round"):
                node.receive(1, stage, 0, psu[stage.split("-")[1]])
        tried.append(stage)
        return body

    drive(node, SFSL_PLAN, 1, parties, attack)
    assert tried == list(SFSL_PLAN.stages)
    assert node.outcome(1)["state"] == "committed"


def test_a_request_beyond_the_goods_or_not_increasing_is_refused(clicks):
    proto = protocol(clicks)
    node = proto.make_server().node
    assert isinstance(node, SFSLNode)
    goods = node.server.space.goods
    for ids in ([goods], [3, 3], [5, 2]):
        with pytest.raises(InvalidMessage, match="strictly increasing"):
            node.server.reply(sfsl_wire.request(1, np.array(ids)), 1)


def test_a_device_that_stops_mid_round_is_left_out_and_the_next_round_runs(clicks):
    """Of five devices (threshold 3), device 4 stops after signing the secure sum's survivors
    (before unmasking): the round commits with it (its input counts: SecAgg's semantics); device
    3 stops before sending its shares: it is left out (its rows count for nobody: a device that
    stops after its shares aborts the round where it held a row with one survivor,
    min_row_holders).  The next round runs."""
    proto = protocol(clicks, users=5)
    hosted = proto.make_server()
    node = hosted.node
    assert isinstance(node, SFSLNode)
    devices = {u: proto.make_device(u) for u in range(5)}
    doc = node.open_round(1, [0, 1, 2, 3, 4])
    parties = {u: devices[u].party(doc) for u in range(5)}
    silent = {4: "sum-unmask", 3: "sum-shares"}
    for stage in SFSL_PLAN.stages:
        k = SFSL_PLAN.stages.index(stage)
        live = [u for u in parties if u not in silent or k < SFSL_PLAN.stages.index(silent[u])]
        for u in live:
            node.receive(1, stage, u, parties[u].message(stage))
        node.close(1, stage)
        if SFSL_PLAN.replies(stage):
            for u in live:
                out = node.reply(1, stage, u)
                if out is not None:
                    parties[u].accept(stage, out)
    assert node.outcome(1)["state"] == "committed" and node.outcome(1)["survivors"] == [0, 1, 2, 4]
    doc = node.open_round(2, [0, 1, 2, 3, 4])
    drive(node, SFSL_PLAN, 2, {u: devices[u].party(doc) for u in range(5)})
    assert node.outcome(2)["state"] == "committed"


def test_limit_cpp1_requests_name_each_devices_real_goods(clicks):
    """SFSL's privacy of the goods a device clicked is Algorithm 2's randomized response; CPP1
    perturbs nothing (S'' = S), so the server reads every device's real set off its download
    request (the deployment example of docs/deployment.md uses CPP1 for its reproducible hash)."""
    proto = protocol(clicks, "CPP1")
    node = proto.make_server().node
    assert isinstance(node, SFSLNode)
    doc = node.open_round(1, [0, 1, 2])
    devices = {u: proto.make_device(u) for u in range(3)}
    parties = {u: devices[u].party(doc) for u in range(3)}
    requests: dict[int, bytes] = {}

    def spy(stage: str, u: int, body: bytes) -> bytes:
        if stage == "download":
            requests[u] = body
        return body

    drive(node, SFSL_PLAN, 1, parties, spy)
    for u in range(3):
        seen = sfsl_wire.open_request(requests[u], 1, node.server.space.goods)
        assert seen.tolist() == devices[u].device.real.tolist()


def test_limit_a_server_that_runs_the_other_devices_reads_one_devices_update(clicks):
    """The server's operator issues every device credential and holds the roster that certifies
    their identities (one-server deployment), so it can take part as any number of devices: out
    of the model, signed rounds or not (docs/security.md, "One-server protocols", Sybil devices).
    With two of three devices its own, it subtracts their known inputs from the secure sum and
    reads device 0's weighted update ``(v z, v)`` row by row -- the secure aggregation hides an
    input only among honest devices."""
    proto = protocol(clicks)
    node = proto.make_server().node
    assert isinstance(node, SFSLNode)
    doc = node.open_round(1, [0, 1, 2])
    parties = {u: proto.make_device(u).party(doc) for u in range(3)}
    sums: list[np.ndarray] = []
    apply = node.server.apply

    def spy(total: np.ndarray, settings: Any) -> int:
        sums.append(total.copy())
        return apply(total, settings)

    node.server.apply = spy  # type: ignore[method-assign]
    drive(node, SFSL_PLAN, 1, parties)
    total = sums[0].astype(np.int64)
    summed = node._round.sum if node._round is not None else None
    assert summed is not None
    held = np.zeros(total.shape[0], np.int64)
    for u in (0, 1, 2):
        held[summed.rows_of(u)] += 1
    for u in (1, 2):  # the server's own devices: it knows their rows and values (zero where one device holds a row)
        rows = summed.rows_of(u)
        total[rows[held[rows] >= 2]] -= parties[u]._values[held[rows] >= 2].astype(np.int64)
    rows0 = summed.rows_of(0)
    shared = held[rows0] >= 2
    assert shared.any() and not shared.all()
    assert np.array_equal(total[rows0[shared]] % (1 << 32), parties[0]._values[shared].astype(np.int64))
    # device 0 contributes zero on a row it alone holds (min_row_holders 2): the server reads nothing there
    assert not total[rows0[~shared]].any()
    assert not total[np.setdiff1d(np.arange(total.shape[0]), rows0)].any()


def test_limit_each_device_learns_which_of_its_rows_each_peer_declared(clicks):
    """SFSL's sparse secure sum (docs/secagg.md, "Sparse rounds") tells each device which of its
    own rows each peer holds too -- the intersection of their perturbed sets S'' (and
    categories).  Since session 22 (signed rounds) the peers tell it: the key list, the same for
    every device, carries each device's row set as a bitmap over the round's candidate rows (the
    PSU's union and its categories), under the device's signature (finding G5)."""
    proto = protocol(clicks, "CPP1")
    node = proto.make_server().node
    assert isinstance(node, SFSLNode)
    doc = node.open_round(1, [0, 1, 2])
    parties = {u: proto.make_device(u).party(doc) for u in range(3)}
    got: dict[str, bytes] = {}
    accept = parties[0].accept

    def keep(stage: str, body: bytes) -> None:
        got[stage] = body
        accept(stage, body)

    parties[0].accept = keep  # type: ignore[method-assign]
    drive(node, SFSL_PLAN, 1, parties)
    assert node._round is not None and node._round.sum is not None
    rows = {u: node._round.sum.rows_of(u) for u in range(3)}
    body = got["sum-advertise"][HEADER_BYTES:]
    count = int.from_bytes(body[:4], "little")
    union = node._round.union
    assert union is not None
    goods = node.server.space.goods
    candidates = np.concatenate([union, goods + np.unique(node.server.goods_category[union])])
    entry = 4 + 64 + 32 + 120 + 64 + -(-candidates.size // 8)  # id, signed keys and commitment, row set's bitmap
    assert count == 3 and len(body) == 4 + count * entry
    private = goods + node.server.space.categories  # rows from here on: the dense rows, every device's
    for u in range(3):
        bitmap = body[4 + (u + 1) * entry - (entry - 284) : 4 + (u + 1) * entry]
        bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")[: candidates.size].astype(bool)
        assert np.array_equal(candidates[bits], rows[u][rows[u] < private]), u  # device u's S'' and categories
    client = parties[0]._sum
    assert client is not None
    for v in (1, 2):
        held = client._common[v]  # what device 0 learned from v's signed row set
        assert np.array_equal(held, np.isin(rows[0], rows[v])), v
    assert 0 < np.isin(rows[0], rows[1]).sum() < rows[0].size  # a real intersection, not all or nothing


@pytest.mark.parametrize("which", ["c", "s"])
@pytest.mark.parametrize("point", [bytes(32), (1).to_bytes(32, "little")])
def test_finding_a_low_order_key_is_refused_at_advertise_instead_of_failing_every_device(clicks, which, point):
    """Device 1 advertises a low-order X25519 key (its channel key ``c`` or its mask key
    ``s``).  The server handed it on, and every honest device failed at its next step (the
    agreement refuses it: ``secemb client`` exits 1) -- one device stopped the round for all.
    Now the advertise is refused; the other two devices (the threshold) run the round."""
    proto = protocol(clicks)
    node = proto.make_server().node
    assert isinstance(node, SFSLNode)
    doc = node.open_round(1, [0, 1, 2])
    parties = {u: proto.make_device(u).party(doc) for u in range(3)}
    at = HEADER_BYTES + (0 if which == "c" else 32)
    body = parties[1].message("psu-advertise")
    with pytest.raises(InvalidMessage, match="public key refused"):
        node.receive(1, "psu-advertise", 1, body[:at] + point + body[at + 32:])
    drive(node, SFSL_PLAN, 1, {u: parties[u] for u in (0, 2)})
    assert node.outcome(1)["state"] == "committed" and node.outcome(1)["survivors"] == [0, 2]


def test_the_server_receives_no_devices_update_or_user_embedding_in_the_clear(clicks):
    """What the server learns (docs/sfsl.md): over a round, no message it receives holds a
    device's private user embedding (before or after training, float64) or any row
    of the device's secure-sum input ``(v z, v)`` (its exact bytes, which the search finds in the
    device's own plaintext; float32 copies are not searched: 4 random bytes match by chance)."""
    proto = protocol(clicks, "CPP2")
    node = proto.make_server().node
    assert isinstance(node, SFSLNode)
    doc = node.open_round(1, [0, 1, 2])
    devices = {u: proto.make_device(u) for u in range(3)}
    before = {u: devices[u].device.user_embedding.copy() for u in range(3)}
    parties = {u: devices[u].party(doc) for u in range(3)}
    seen: list[bytes] = []

    def keep(stage: str, u: int, body: bytes) -> bytes:
        seen.append(body)
        return body

    drive(node, SFSL_PLAN, 1, parties, keep)
    assert node.outcome(1)["state"] == "committed" and len(seen) == 3 * len(SFSL_PLAN.stages)
    needles = []
    for u in range(3):
        values = parties[u]._values
        assert values.size and values[:, -1].any()  # it trained: rows with weights
        plain = values.astype("<u4").tobytes()
        for row in values.astype("<u4"):
            assert row.tobytes() in plain
            needles.append(row.tobytes())
        for emb in (before[u], devices[u].device.user_embedding):
            needles += [x.tobytes() for x in emb.astype("<f8")]  # 8 bytes: no chance match in random bytes
    found = [n for n in needles for body in seen if n in body]
    assert not found, f"{len(found)} of {len(needles)} private values found in the server's view"
