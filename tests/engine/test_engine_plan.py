"""The round engine executes what a protocol declares: the transcript of a real in-process
round -- every message the transport carried, in order, with its stage and endpoints -- is
the protocol's :class:`~secemb.protocols.stages.RoundPlan`, hop for hop, with and without relay;
and a protocol whose messages contradict its plan is refused."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.client.device import _by_plan
from secemb.data import synthetic_like, train_test_split
from secemb.errors import InvalidParameters, ProtocolError
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.protocols.stages import COUNT, USER, Hop, RoundPlan, round_plan
from secemb.training import TrainConfig, train
from secemb.transport.inprocess import InProcessTransport, parse_endpoint


class RecordingTransport(InProcessTransport):
    """Remembers every message's (round, stage, src, dst) in the order sent."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[int | None, str, str, str]] = []

    def send(self, src: str, dst: str, payload: bytes, *, stage: str) -> int:
        self.log.append((self.round_id, stage, src, dst))
        return super().send(src, dst, payload, stage=stage)


def _party(endpoint: str) -> str:
    kind, _ = parse_endpoint(endpoint)
    return USER if kind == "user" else endpoint


@pytest.fixture(scope="module")
def data():
    return train_test_split(synthetic_like(12, 30, 180, seed=5), 0.2, seed=0)


@pytest.mark.parametrize("relay", [False, True])
def test_a_rounds_transcript_is_the_protocols_declared_plan(data, relay):
    tr, te = data
    proto = get_protocol("secemb", layout="cuckoo", relay=relay)
    tp = RecordingTransport()
    # two users a round (the lowest floor a server accepts)
    cfg = TrainConfig(epochs=1, users_per_round=2, m_prime=None, alpha=1.0)
    train(MatrixFactorization(dim=4, reg=0.01), proto, tr, te, cfg, transport=tp)
    plan = proto.plan()
    assert plan == round_plan(relay=relay)
    round_hops = [(h.stage, h.src, h.dst) for h in plan.hops if h.stage != COUNT]
    # every round carries exactly the declared hops, first seen in the declared order; a device's, once per device
    rounds = sorted({r for r, *_ in tp.log if r is not None})
    assert len(rounds) == -(-len({u for u in tr.users}) // 2)
    for r in rounds:
        got = [(stage, _party(s), _party(d)) for rr, stage, s, d in tp.log if rr == r]
        assert list(dict.fromkeys(got)) == round_hops, r
        assert all(got.count(h) == 2 for h in round_hops if USER in h[1:]), r  # each device's hops
    # the count stage: every user's shares in the declared device order, then server 1's sum
    count = [(stage, _party(s), _party(d)) for rr, stage, s, d in tp.log if stage == COUNT]
    device_hops = [(h.stage, h.src, h.dst) for h in plan.stage(COUNT) if h.src == USER]
    assert count[:-1] == device_hops * (len(count) // 2)
    assert count[-1] == (COUNT, "server1", "server0")


def test_messages_that_contradict_the_plan_are_refused():
    relay_plan = round_plan(relay=True)
    # with relay the plan has no upload hop to server 1: a protocol that makes one is refused
    with pytest.raises(ProtocolError, match="made message for server 1"):
        _by_plan(relay_plan.device_sends("upload"), (b"up0", b"up1"), "upload")
    # without relay it has one: a protocol that makes none is refused
    with pytest.raises(ProtocolError, match="made no message for server 1"):
        _by_plan(round_plan(relay=False).device_sends("upload"), (b"up0", None), "upload")
    assert list(_by_plan((1, 0), (b"a", b"b"), "x")) == [1, 0]  # the plan's order, not the parties'


def test_hops_are_validated():
    with pytest.raises(InvalidParameters, match="stage"):
        Hop("shuffle", "user", "server0", "upload")
    with pytest.raises(InvalidParameters, match="between two of"):
        Hop("upload", "user", "user", "upload")
    with pytest.raises(InvalidParameters, match="message"):
        Hop("upload", "user", "server0", "gradient")
    plan = RoundPlan((Hop("upload", "user", "server1", "upload"), Hop("upload", "user", "server0", "upload")))
    assert plan.device_sends("upload") == (1, 0) and not plan.relays("upload")
    assert round_plan(relay=True).relays("retrieval") and not round_plan(relay=False).relays("retrieval")


def test_in_process_bytes_are_what_the_devices_sent_and_received(data):
    # the driver's per-user figures come from the device sessions; the transport saw the same
    tr, te = data
    tp = InProcessTransport()
    r = train(MatrixFactorization(dim=4, reg=0.01), get_protocol("secemb", layout="full", relay=False), tr, te,
              TrainConfig(epochs=1, users_per_round=5, m_prime=6), transport=tp)
    assert r.upload_bytes_per_user_round * r.participations == tp.total_bytes(direction="upload")
    assert r.download_bytes_per_user_round * r.participations == tp.total_bytes(direction="download")
    assert r.server_bytes_per_round * r.rounds == tp.total_bytes(direction="server", round_id=...) - \
        tp.total_bytes(direction="server", round_id=None)
    assert np.isfinite(r.final_rmse)


def test_a_plug_in_declares_its_own_plan_and_the_engine_follows_it(data, fulldownload_plugin):
    # the example plug-in retrieves from server 0 only: no message of the round reaches
    # server 1 before the upload
    tr, te = data
    proto = get_protocol(fulldownload_plugin)
    tp = RecordingTransport()
    r = train(MatrixFactorization(dim=4, reg=0.01), proto, tr, te,
              TrainConfig(epochs=1, users_per_round=2, m_prime=5, verify=True), transport=tp)
    assert r.verified_rounds == r.rounds
    round_hops = [(h.stage, h.src, h.dst) for h in proto.plan().hops if h.stage != COUNT]
    assert ("retrieval", "user", "server1") not in round_hops
    for rr in sorted({x for x, *_ in tp.log if x is not None}):
        got = [(stage, _party(s), _party(d)) for x, stage, s, d in tp.log if x == rr]
        assert list(dict.fromkeys(got)) == round_hops
        assert all(got.count(h) == 2 for h in round_hops if USER in h[1:])
