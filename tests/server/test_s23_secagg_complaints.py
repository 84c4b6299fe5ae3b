"""Secure aggregation's complaints and bad shares reach the operator (session 23; finding F2's
follow-up): a device whose encrypted shares from a peer do not open leaves that peer out of its
unmask message and the server records a complaint (``SecAggServer.complaints``).  The round's
outcome carries them (SFSL: both secure aggregations; SecEA: the set-up's PSU), and so do the
operator's round document (``GET /v1/exchange/round`` signed ``admin``: ``secemb admin status``)
and the journal's record of the round's end, which a restart shows again; a device's round
document carries none.  Nothing depends on a complaint: the complained-about device takes part
in the next round, which commits (docs/deployment.md, "What the operator reads of a round").

The spoiling is device 0's own: one bit of the GCM tag of its share ciphertext to device 2
flipped in its shares message (the server takes it: it cannot open the ciphertext).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from staged_round import Edit, drive
from test_exchange_attacks import SETS, Http, http_of, secea_node, secea_world

from secemb.framing import HEADER_BYTES
from secemb.protocols.secea.staged import SECEA_ROUND_PLAN, SECEA_SETUP_PLAN, SecEAParty, SecEASetupParty
from secemb.randomness import CtrDrbg
from secemb.server.exchange_state import JOURNAL, ExchangeState
from secemb.server.persist import Journal

torch.set_num_threads(1)

FP = "c" * 64  # the configuration fingerprint of the state directory (any, the same across restarts)


def spoil_share_to(body: bytes, victim: int) -> bytes:
    """A signed secure aggregation's shares message (frame header, a u32 count, records of the
    recipient's u32 id, the 90-byte ciphertext ending with its tag and two 16-byte share
    commitments, then the sender's own two commitments: session 24) with the last tag byte of the
    record to ``victim`` flipped."""
    out = bytearray(body)
    count = int.from_bytes(out[HEADER_BYTES : HEADER_BYTES + 4], "little")
    start, size = HEADER_BYTES + 4, 4 + 90 + 32
    assert count * size + 32 == len(out) - start
    for at in range(start, start + count * size, size):
        if int.from_bytes(out[at : at + 4], "little") == victim:
            out[at + 4 + 90 - 1] ^= 1
            return bytes(out)
    raise AssertionError(f"no record for {victim}")


def spoiling(spoil: str | None) -> Edit:
    """Device 0's message of stage ``spoil`` with its share to device 2 spoiled, every other message as it is."""
    return lambda stage, u, body: spoil_share_to(body, 2) if stage == spoil and u == 0 else body


@pytest.fixture(scope="module")
def sfsl() -> Any:
    from secemb.data.ctr import TaobaoShaped, split_clicks
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.sfsl.protocol import SFSLProtocol

    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    return SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP1", batch=8, data=clicks)


@pytest.mark.parametrize("spoil", ["psu-shares", "sum-shares"])
def test_sfsl_outcome_carries_a_complaint_and_the_round_commits_with_all(sfsl: Any, spoil: str) -> None:
    from secemb.protocols.sfsl.staged import SFSL_PLAN

    hosted = sfsl.make_server()
    devices = {u: sfsl.make_device(u) for u in range(3)}
    model0 = hosted.model()
    doc = hosted.node.open_round(1, [0, 1, 2])
    drive(hosted.node, SFSL_PLAN, 1, {u: devices[u].party(doc) for u in range(3)}, spoiling(spoil))
    out = hosted.node.outcome(1)
    assert out["state"] == "committed" and out["survivors"] == [0, 1, 2]
    assert out["complaints"] == {2: [0]} and out["bad_shares"] == []
    assert hosted.model() != model0
    # no strike: the device complained about takes part in the next round, an honest one, which has no complaint
    doc = hosted.node.open_round(2, [0, 1, 2])
    drive(hosted.node, SFSL_PLAN, 2, {u: devices[u].party(doc) for u in range(3)})
    out = hosted.node.outcome(2)
    assert out["state"] == "committed" and out["complaints"] == {} and out["bad_shares"] == []


def test_secea_set_up_outcome_carries_a_complaint_and_an_aggregation_round_none() -> None:
    params, bloom, clients = secea_world(5)
    node = secea_node(params, bloom, 6)
    node.open_round(1, [0, 1, 2])
    drive(node, SECEA_SETUP_PLAN, 1, {i: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(20 + i))
                                      for i, c in enumerate(clients)}, spoiling("psu-shares"))
    out = node.outcome(1)
    assert out["state"] == "committed" and out["complaints"] == {2: [0]} and out["bad_shares"] == []
    node.open_round(2, [0, 1, 2])
    rows = [np.full((len(s), params.dim), float(i + 1)) for i, s in enumerate(SETS)]
    drive(node, SECEA_ROUND_PLAN, 2, {i: SecEAParty(c, 2, rows[i]) for i, c in enumerate(clients)})
    out = node.outcome(2)
    assert out["state"] == "committed" and out["complaints"] == {} and out["bad_shares"] == []


def _http_round(http: Http, devices: dict[int, Any], round_id: int, spoil: str | None = None) -> None:
    """One SFSL round over the app as ``secemb serve`` runs it (the server closes each stage once
    every device has sent)."""
    from secemb.protocols.sfsl.staged import SFSL_PLAN

    doc = http.open(round_id, [0, 1, 2])
    parties = {u: devices[u].party(doc) for u in range(3)}
    edit = spoiling(spoil)
    for stage in SFSL_PLAN.stages:
        for u, party in parties.items():
            assert http.send(u, round_id, stage, edit(stage, u, party.message(stage))) == 204
        if SFSL_PLAN.replies(stage):
            for u, party in parties.items():
                answer = http.fetch(u, round_id, stage)
                assert answer is not None
                party.accept(stage, answer)


def _documents(http: Http) -> tuple[dict[str, Any], dict[str, Any]]:
    """The round document as the operator reads it and as device 1 reads it."""
    seen = []
    for who in ("admin", 1):
        resp = http.call(who, "GET", "/v1/exchange/round")
        assert resp.status_code == 200, resp.text
        seen.append(resp.json())
    return seen[0], seen[1]


def test_the_operator_reads_complaints_over_http_and_after_a_restart_devices_do_not(sfsl: Any,
                                                                                      tmp_path: Path) -> None:
    secrets = (b"a" * 32, b"u" * 32)
    devices = {u: sfsl.make_device(u) for u in range(3)}

    def serve() -> Http:
        hosted = sfsl.make_server()
        state = ExchangeState(tmp_path, FP, hosted)
        return http_of(hosted.node, secrets, stage_deadline_s=600.0, model=hosted.model, state=state)

    http = serve()
    _http_round(http, devices, 1)
    admin, device = _documents(http)
    assert (admin["state"], admin["reason"], admin["bad_shares"], admin["complaints"]) == ("committed", None, [], {})
    assert "complaints" not in device and "bad_shares" not in device and device["state"] == "committed"

    _http_round(http, devices, 2, spoil="psu-shares")
    admin, device = _documents(http)
    assert admin["round_id"] == 2 and admin["state"] == "committed"
    assert admin["complaints"] == {"2": [0]} and admin["bad_shares"] == []  # JSON: the complainer's id as a string
    assert "complaints" not in device and "bad_shares" not in device
    out = http.outcome(2)
    assert out["complaints"] == {"2": [0]} and out["survivors"] == [0, 1, 2]
    ends = [r["round"] for r in Journal(tmp_path / JOURNAL).records() if r.get("event") == "end"]
    assert [(r["round_id"], r["state"], r["complaints"]) for r in ends] == [(1, "committed", {}),
                                                                            (2, "committed", {"2": [0]})]

    http = serve()  # restart: the last round's document is the journal's, the findings the operator's only
    admin, device = _documents(http)
    assert (admin["round_id"], admin["complaints"], admin["bad_shares"]) == (2, {"2": [0]}, [])
    assert device["round_id"] == 2 and "complaints" not in device and "bad_shares" not in device
    _http_round(http, devices, 3)  # device 0 is not held back
    admin, _ = _documents(http)
    assert (admin["round_id"], admin["state"], admin["complaints"]) == (3, "committed", {})
