"""Session 24 (helper K): over HTTP, a late fetch of a stage's answers after the next stage has
closed is a 409 whose detail says they were released (never a 5xx), the round document and the
node's outcome are unchanged by it, and the round commits as before -- SecEA (set-up and an
aggregation round, exact averages) and SFSL (a signed round, committed, the model moved)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from test_exchange_attacks import SETS, Http, http_of, secea_node, secea_world

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.protocols.exchange import ExchangeRun
from secemb.protocols.secea.staged import SECEA_ROUND_PLAN, SECEA_SETUP_PLAN, SecEAParty, SecEASetupParty
from secemb.protocols.sfsl.protocol import SFSLProtocol
from secemb.protocols.stages import RoundPlan
from secemb.randomness import CtrDrbg

torch.set_num_threads(1)


def play_probing(http: Http, plan: RoundPlan, round_id: int, parties: dict[int, Any]) -> int:
    """Every stage of ``plan``: messages, close, then each earlier stage's answers fetched late by
    every device (each a 409 naming the release, the round document and outcome unchanged), then
    the stage's answers taken.  Returns the late fetches refused."""
    refused = 0
    stages = plan.stages
    for k, stage in enumerate(stages):
        for u, party in parties.items():
            assert http.send(u, round_id, stage, party.message(stage)) == 204
        assert http.close(round_id, stage) == 200
        doc, out = http.call("admin", "GET", "/v1/exchange/round").json(), http.outcome(round_id)
        for earlier in stages[:k]:
            for u in parties:
                resp = http.call(u, "GET", f"/v1/exchange/rounds/{round_id}/{earlier}")
                assert resp.status_code == 409, resp.text
                assert resp.json() == {"error": "conflict", "detail": f"stage {earlier}'s answers of round {round_id} "
                                       f"were released when stage {stages[stages.index(earlier) + 1]} closed"}
                refused += 1
        assert http.call("admin", "GET", "/v1/exchange/round").json() == doc and http.outcome(round_id) == out
        if plan.replies(stage):
            for u, party in parties.items():
                got = http.fetch(u, round_id, stage)
                assert got is not None
                party.accept(stage, got)
    assert http.outcome(round_id)["state"] == "committed"
    return refused


def test_secea_late_fetches_are_409_and_the_rounds_commit_with_the_exact_averages():
    params, bloom, clients = secea_world(2)
    http = http_of(secea_node(params, bloom, 2))
    assert http.open(1, [0, 1, 2])["setup"]
    setup = {i: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(100 + i)) for i, c in enumerate(clients)}
    n = len(SECEA_SETUP_PLAN.stages)
    assert play_probing(http, SECEA_SETUP_PLAN, 1, setup) == 3 * n * (n - 1) // 2
    rows = [np.full((len(s), 2), float(v + 1)) for v, s in enumerate(SETS)]
    http.open(2, [0, 1, 2])
    parties = {i: SecEAParty(c, 2, rows[i]) for i, c in enumerate(clients)}
    assert play_probing(http, SECEA_ROUND_PLAN, 2, parties) == 3
    # entity 4 is held by silos 0 and 1 (rows 1.0 and 2.0), entity 12 by silo 2 alone (3.0)
    assert parties[0].average[1].tolist() == [1.5, 1.5] and parties[2].average[3].tolist() == [3.0, 3.0]


def test_sfsl_late_fetches_are_409_and_the_round_commits():
    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    proto = SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP1", batch=8, data=clicks)
    server = proto.make_server()
    before = server.model()
    http = http_of(server.node)
    doc = http.open(1, [0, 1, 2])
    parties = {u: proto.make_device(u).party(doc) for u in range(3)}
    n = len(server.node.plan.stages)
    assert play_probing(http, server.node.plan, 1, parties) == 3 * n * (n - 1) // 2
    assert server.model() != before  # the round's update was applied
