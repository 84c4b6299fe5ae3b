"""Session 24 (helper K): a one-server node releases a stage's answers once the next stage has
closed (or the round was aborted), and refuses a late fetch of them with a ProtocolError that
names why, changing nothing (secemb.protocols.exchange.closing_stage / stage_reply).

A device fetches a stage's answer after the stage closed and before it sends its next message;
once the next stage has closed a device that did not send it is out of the round, so nobody can
use the released answers.  Without the release SFSL's server held every stage's answers until
the round ended (the download answers alone 45.7 MB at n = 100 under CPP2, docs/results.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from secea_helpers import set_up_secea
from test_exchange_rounds import _Round  # the round the helpers read

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.errors import ProtocolError
from secemb.protocols.exchange import ExchangeServer, closing_stage, stage_reply
from secemb.protocols.secea.staged import SECEA_ROUND_PLAN, SecEAParty
from secemb.protocols.sfsl import SFSLRun, TrainingSettings, train_sfsl
from secemb.protocols.sfsl.protocol import ExchangePlayer, model_bytes
from secemb.protocols.sfsl.staged import SFSL_PLAN, SFSLNode
from secemb.randomness import CtrDrbg
from secemb.sim.player import connect_local

torch.set_num_threads(1)

STAGES = ("one", "two", "three")


def _snapshot(rnd: _Round) -> tuple[object, ...]:
    return rnd.state, rnd.reason, rnd.stage, {s: dict(a) for s, a in rnd.replies.items()}


def test_the_next_close_releases_a_stages_answers_and_a_late_fetch_is_refused_without_change() -> None:
    rnd = _Round()
    with closing_stage(rnd, "one"):
        rnd.replies["one"] = {3: b"x"}
    assert stage_reply(rnd, 7, "one", STAGES, 3) == b"x"  # until the next stage closes
    with closing_stage(rnd, "two"):
        rnd.replies["two"] = {3: b"y"}
    assert list(rnd.replies) == ["two"]
    before = _snapshot(rnd)
    with pytest.raises(ProtocolError, match="stage one's answers of round 7 were released when stage two closed"):
        stage_reply(rnd, 7, "one", STAGES, 3)
    assert _snapshot(rnd) == before
    assert stage_reply(rnd, 7, "two", STAGES, 3) == b"y"
    with pytest.raises(ProtocolError, match="stage three of round 7 has no answers"):  # not closed: as before
        stage_reply(rnd, 7, "three", STAGES, 3)
    with closing_stage(rnd, "three"):  # the last stage (no answers here): releases "two"
        pass
    assert rnd.replies == {}
    with pytest.raises(ProtocolError, match="stage two's answers of round 7 were released when stage three closed"):
        stage_reply(rnd, 7, "two", STAGES, 3)


def test_an_abort_releases_every_answer_and_a_late_fetch_names_the_abort_not_its_reason() -> None:
    """The late fetch says the round was aborted, not why: an aborted signed round's reason can name
    the device found cheating, for the operator only (session 24 red team, F4's class)."""
    rnd = _Round()
    with closing_stage(rnd, "one"):
        rnd.replies["one"] = {3: b"x"}
    with pytest.raises(ProtocolError, match="too few"):
        with closing_stage(rnd, "two"):
            raise ProtocolError("too few")
    assert rnd.replies == {} and rnd.state == "aborted"
    before = _snapshot(rnd)
    with pytest.raises(ProtocolError, match="stage one's answers of round 7 were released when the round was "
                                            "aborted$"):
        stage_reply(rnd, 7, "one", STAGES, 3)
    assert _snapshot(rnd) == before


def test_an_error_that_is_no_abort_releases_nothing() -> None:
    rnd = _Round()
    with closing_stage(rnd, "one"):
        rnd.replies["one"] = {3: b"x"}
    with pytest.raises(KeyError):
        with closing_stage(rnd, "two"):
            raise KeyError("x")
    assert stage_reply(rnd, 7, "one", STAGES, 3) == b"x"


# -- SFSL: the engine's round, probed after every close, is the reference round bit for bit --

@pytest.fixture(scope="module")
def clicks():
    return split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(40)))


class ProbingNode(SFSLNode):
    """An SFSL node that, after each close, records the stages whose answers it still holds (and
    their bytes) and fetches every earlier stage's answers as a late device would."""

    held: list[tuple[str, list[str], int]]
    refused: list[str]

    def close(self, round_id: int, stage: str) -> None:
        super().close(round_id, stage)
        rnd = self._round
        assert rnd is not None
        self.held.append((stage, sorted(rnd.replies), sum(len(b) for a in rnd.replies.values() for b in a.values())))
        stages = self.plan.stages
        for earlier in stages[:stages.index(stage)]:
            if self.plan.replies(earlier):
                with pytest.raises(ProtocolError, match=f"were released when stage {stages[stages.index(earlier) + 1]}"
                                                        " closed") as info:
                    self.reply(round_id, earlier, min(rnd.users))
                self.refused.append(str(info.value))


RUN = SFSLRun(preset="CPP2", clients_per_round=5, rounds=2, settings=TrainingSettings(batch=8), seed=4, eval_every=2)


def test_sfsl_engine_round_releases_each_stages_answers_and_late_fetches_change_nothing(clicks):
    """Each close leaves the node holding the closed stage's answers only; a late fetch of any
    earlier stage is refused; the rounds still commit with the in-process reference's model bit
    for bit (same seed, same CSPRNG)."""
    train, test = clicks
    ref = train_sfsl(train, test, RUN, _rng=CtrDrbg(11))
    nodes: list[ProbingNode] = []

    def player(server, settings):
        node = ProbingNode(server, settings)
        node.held, node.refused = [], []
        nodes.append(node)
        hosted = ExchangeServer(node, 1 << 30, lambda: model_bytes(server), 1 << 20)
        return ExchangePlayer(connect_local(hosted), server.space, node.bloom, server.table.shape)

    eng = train_sfsl(train, test, RUN, _rng=CtrDrbg(11), player=player)
    assert np.array_equal(ref.table, eng.table) and np.array_equal(ref.dense, eng.dense)
    assert np.array_equal(ref.user_embeddings, eng.user_embeddings)
    (node,) = nodes
    stages = SFSL_PLAN.stages
    assert [s for s, _, _ in node.held] == list(stages) * RUN.rounds
    for stage, held, size in node.held:
        assert held == ([stage] if SFSL_PLAN.replies(stage) else [])
        assert (size > 0) == SFSL_PLAN.replies(stage)
    download = [size for stage, _, size in node.held if stage == "download"]
    assert min(download) > 0  # the round's largest answers, held until sum-advertise closes only
    # after the i-th close, each of the i stages before it with answers was probed (ten of the eleven have them)
    per_round = sum(sum(SFSL_PLAN.replies(e) for e in stages[:i]) for i in range(len(stages)))
    assert len(node.refused) == per_round * RUN.rounds and per_round == sum(range(11))


# -- SecEA: the set-up and an aggregation round in process --

def test_secea_rounds_release_answers_and_a_late_fetch_changes_no_average():
    sets = [[1, 4, 9], [4, 7], [1, 7, 9, 12]]
    params, node, ex, clients = set_up_secea(sets, seed=6)
    rnd = node._round
    assert rnd is not None and list(rnd.replies) == ["psu-unmask"]  # the set-up's last answers, for its devices
    for stage, then in (("secea-keys", "psu-advertise"), ("psu-consistency", "psu-unmask")):
        with pytest.raises(ProtocolError, match=f"stage {stage}'s answers of round 0 were released when stage "
                                                f"{then} closed"):
            ex.link(0).fetch(0, stage)
    assert ex.link(0).fetch(0, "psu-unmask") is not None
    gen = np.random.default_rng(3)  # test data only
    rows = [gen.normal(size=(len(s), 2)) for s in sets]
    ex.admin.open_round(1, [0, 1, 2])
    parties = {i: SecEAParty(c, 1, rows[i]) for i, c in enumerate(clients)}
    share, answer = SECEA_ROUND_PLAN.stages
    for stage in (share, answer):
        for u, party in parties.items():
            node.receive(1, stage, u, party.message(stage))
        node.close(1, stage)
        if stage == answer:
            for u in parties:
                with pytest.raises(ProtocolError, match="stage secea-share's answers of round 1 were released "
                                                        "when stage secea-answer closed"):
                    node.reply(1, share, u)
        for u, party in parties.items():
            got = node.reply(1, stage, u)
            assert got is not None
            party.accept(stage, got)
    assert node.outcome(1)["state"] == "committed" and list(node._round.replies) == [answer]
    for v, s in enumerate(sets):  # the exact averages (each entity over the silos that hold it)
        for i, e in enumerate(s):
            holders = [rows[w][sets[w].index(e)] for w in range(3) if e in sets[w]]
            assert np.allclose(parties[v].average[i], np.mean(holders, axis=0))
