"""SecEA as the one-server engine's exchanges: the plan, a set-up and rounds played through
:func:`secemb.sim.player.play` with the pads and Paillier, the averages against a plaintext
average typed here, the in-process :class:`Deployment` against the bare engine, and the node's
refusals (nothing changes on a refused call)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from secemb.sim.player import play
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.staged import (
    SECEA_PLAN,
    SECEA_ROUND_PLAN,
    SECEA_SETUP_PLAN,
    SecEANode,
    SecEAParty,
)
from secemb.protocols.secea.union import union_bloom
from secemb.protocols.stages import SERVER0, USER
from secemb.randomness import CtrDrbg
from secemb.sim.secea import Deployment

from secea_helpers import KEY_BITS, set_up_secea



def plain_average(entity, sets, rows, frac_bits=16):
    """Eq. 2 on the fixed-point values, by hand: sum of round(h * 2^f) over the holders, / (count * 2^f)."""
    held = [(v, list(s).index(entity)) for v, s in enumerate(sets) if entity in s]
    dim = rows[0].shape[1]
    return [float(Fraction(sum(round(float(rows[v][i, j]) * 2**frac_bits) for v, i in held),
                           len(held) * 2**frac_bits)) for j in range(dim)]


def test_plans_are_exchanges_of_one_server():
    assert SECEA_PLAN.stages == SECEA_SETUP_PLAN.stages + SECEA_ROUND_PLAN.stages
    for plan in (SECEA_SETUP_PLAN, SECEA_ROUND_PLAN):
        assert plan.servers == 1
        for stage in plan.stages:
            hops = plan.stage(stage)
            assert [(h.src, h.dst) for h in hops] == [(USER, SERVER0), (SERVER0, USER)]
    assert SECEA_SETUP_PLAN.stages == ("secea-keys", "psu-advertise", "psu-shares", "psu-masked", "psu-consistency",
                                       "psu-unmask")
    assert SECEA_ROUND_PLAN.stages == ("secea-share", "secea-answer")
    assert SECEA_PLAN.only(list(SECEA_PLAN.stages)) is SECEA_PLAN
    for bad in ([], ["secea-answer", "secea-share"], ["secea-share", "nope"], ["psu-unmask", "psu-unmask"]):
        with pytest.raises(InvalidParameters, match="subsequence"):
            SECEA_PLAN.only(bad)


def test_rounds_through_play_give_the_plain_averages_and_count_every_byte():
    sets = [[1, 4, 9], [4, 7], [1, 7, 9, 12]]
    params, node, ex, clients = set_up_secea(sets, dim=3, seed=1)
    assert node.union.tolist() == [1, 4, 7, 9, 12]
    gen = np.random.default_rng(1)  # test data only
    for r in (1, 2):
        rows = [gen.normal(size=(len(s), 3)) for s in sets]
        ex.admin.open_round(r, [0, 1, 2])
        parties = {i: SecEAParty(c, r, rows[i]) for i, c in enumerate(clients)}
        rec = play(SECEA_ROUND_PLAN, ex.admin, {i: ex.link(i) for i in parties}, parties, r)
        assert rec.finished == [0, 1, 2] and ex.admin.round_status(r)["state"] == "committed"
        for v, s in enumerate(sets):
            for i, e in enumerate(s):
                assert parties[v].average[i].tolist() == plain_average(e, sets, rows)
        up = sum(rec.up[u]["secea-share"] + rec.up[u]["secea-answer"] for u in range(3))
        down = sum(rec.down[u]["secea-share"] + rec.down[u]["secea-answer"] for u in range(3))
        assert ex.tp.total_bytes(round_id=r) == up + down  # what play counted is what crossed the transport


def test_deployment_gives_the_engines_averages():
    sets = [[2, 3], [3, 5], [2, 5, 6]]
    gen = np.random.default_rng(2)
    rows = [gen.normal(size=(len(s), 2)) for s in sets]
    params, node, ex, clients = set_up_secea(sets, seed=2)
    ex.admin.open_round(1, [0, 1, 2])
    parties = {i: SecEAParty(c, 1, rows[i]) for i, c in enumerate(clients)}
    play(SECEA_ROUND_PLAN, ex.admin, {i: ex.link(i) for i in parties}, parties, 1)
    dep = Deployment(params, [np.array(s) for s in sets], key_bits=KEY_BITS, _rng=CtrDrbg(3))
    out = dep.round(1, rows)
    for v in range(3):
        assert out[v].tolist() == parties[v].average.tolist()
    assert sum(len(m) for m in dep.traffic.log) == sum(dep.traffic.up.values()) + sum(dep.traffic.down.values())


def test_node_refuses_out_of_order_duplicates_strangers_and_bad_bytes_without_change():
    sets = [[1], [1, 2], [2]]
    params, node, ex, clients = set_up_secea(sets, seed=4)
    with pytest.raises(ProtocolError, match="does not follow"):
        ex.admin.open_round(0, [0, 1, 2])
    with pytest.raises(InvalidParameters, match="distinct silo ids"):
        node.open_round(1, [0, 1, 5])
    with pytest.raises(InvalidParameters, match="at least 3"):
        node.open_round(1, [0, 1])
    node.open_round(1, [0, 1, 2])
    rows = [np.ones((len(s), 2)) for s in sets]
    up = {i: c.upload(1, rows[i]) for i, c in enumerate(clients)}
    with pytest.raises(ProtocolError, match="at stage secea-share"):
        node.receive(1, "secea-answer", 0, up[0])
    with pytest.raises(InvalidMessage):
        node.receive(1, "secea-share", 0, up[0][:-1])  # truncated
    with pytest.raises(InvalidMessage):
        node.receive(1, "secea-share", 1, up[0])  # another silo's upload
    node.receive(1, "secea-share", 0, up[0])
    with pytest.raises(InvalidMessage, match="duplicate"):
        node.receive(1, "secea-share", 0, up[0])
    with pytest.raises(ProtocolError, match="no answers"):
        node.reply(1, "secea-share", 0)
    node.receive(1, "secea-share", 1, up[1])
    node.receive(1, "secea-share", 2, up[2])
    node.close(1, "secea-share")
    relays = {i: node.reply(1, "secea-share", i) for i in range(3)}
    answers = {i: clients[i].answer(relays[i]) for i in range(3)}
    with pytest.raises(InvalidMessage):
        node.receive(1, "secea-answer", 0, answers[1])
    for i in range(3):
        node.receive(1, "secea-answer", i, answers[i])
    node.close(1, "secea-answer")
    for i in range(3):
        got = clients[i].finish(node.reply(1, "secea-answer", i))
        assert got.tolist() == [[1.0, 1.0]] * len(sets[i])


def test_a_silo_silent_in_the_answers_aborts_the_round_when_all_are_needed():
    sets = [[1], [1, 2], [2]]
    params, node, ex, clients = set_up_secea(sets, seed=5)
    ex.admin.open_round(1, [0, 1, 2])
    parties = {i: SecEAParty(c, 1, np.ones((len(sets[i]), 2))) for i, c in enumerate(clients)}
    with pytest.raises(ProtocolError, match="aborted: 2 of 3"):
        play(SECEA_ROUND_PLAN, ex.admin, {i: ex.link(i) for i in parties}, parties, 1, silent_from={1: "secea-answer"})
    assert ex.admin.round_status(1)["state"] == "aborted"
    assert all(p.average is None for p in parties.values())
    ex.admin.open_round(2, [0, 1, 2])  # the next round runs
    parties = {i: SecEAParty(c, 2, np.ones((len(sets[i]), 2))) for i, c in enumerate(clients)}
    assert play(SECEA_ROUND_PLAN, ex.admin, {i: ex.link(i) for i in parties}, parties, 2).finished == [0, 1, 2]


def test_rounds_wait_for_the_set_up_of_every_silo():
    params = SecEAParams(3, 1, dim=2)
    node = SecEANode(params, union_bloom(8, 3))
    with pytest.raises(ProtocolError, match="set-up"):
        node.open_round(1, [0, 1])
    doc = node.open_round(4, [0, 1, 2])  # the first round opened is the set-up, whatever its id
    assert doc["setup"] and doc["stages"] == list(SECEA_SETUP_PLAN.stages)


def test_deployment_round_of_some_silos_averages_over_them():
    # N = 4, T = 1: K = 1, D = 3; silo 3 is not in round 1 (it never shares): averages over silos 0-2
    sets = [[1, 2], [2, 3], [1, 3], [1, 2, 3]]
    params = SecEAParams(4, 1, dim=2)
    dep = Deployment(params, [np.array(s) for s in sets], key_bits=KEY_BITS, _rng=CtrDrbg(6))
    gen = np.random.default_rng(6)
    rows = [gen.normal(size=(len(s), 2)) for s in sets]
    out = dep.round(1, rows, users=[0, 1, 2])
    assert sorted(out) == [0, 1, 2]
    for v in range(3):
        for i, e in enumerate(sets[v]):
            assert out[v][i].tolist() == plain_average(e, sets[:3], rows[:3])
    assert dep.traffic.up[3] == 0 and dep.traffic.down[3] == 0


def test_an_unsigned_set_up_is_explicit_and_runs_without_the_consistency_stage():
    """``signed=False`` on the node and every silo (the paper's set-up): HELLOs without
    certificates (32 + 32 + 128 bytes at 1,024 bits), the PSU unsigned, its documents without
    ``psu-consistency``; the union is every silo's entities."""
    from secemb.protocols.secea.parties import SecEAClient
    from secemb.protocols.secea.staged import SecEASetupParty
    from secemb.sim.local import LocalStageServer

    params, rng, sets = SecEAParams(3, 1, dim=2), CtrDrbg(3), [[1, 4], [4, 7], [9]]
    bloom = union_bloom(16, 5)
    node = SecEANode(params, bloom, signed=False, _rng=rng)
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, signed=False, _rng=rng)
               for i, s in enumerate(sets)]
    assert len(clients[0].hello()) == 32 + 32 + KEY_BITS // 8
    ex = LocalStageServer(node)
    doc = ex.admin.open_round(0, [0, 1, 2])
    assert doc["stages"] == ["secea-keys", "psu-advertise", "psu-shares", "psu-masked", "psu-unmask"]
    parties = {i: SecEASetupParty(c, bloom, _rng=rng) for i, c in enumerate(clients)}
    rec = play(SECEA_PLAN.only(doc["stages"]), ex.admin, {i: ex.link(i) for i in parties}, parties, 0)
    assert rec.finished == [0, 1, 2] and node.union is not None and node.union.tolist() == [1, 4, 7, 9]
    assert all(c.set_up for c in clients)
