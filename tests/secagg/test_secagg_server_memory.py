"""The server of a signed round holds its key list once, not once per client.

In a signed round every client is sent the same key list (each entry with its certificate, its
signature and, in a sparse round, its signed row set as a bitmap over the round's candidate
rows).  Built once per client, the server held ``n`` copies of ``n`` row sets until the round
ended: at n = 100, SFSL CPP2's secure-sum key list is 345 kB, its 100 copies 34.5 MB of the
server's round (docs/results.md, "What signing costs the server").  The checks are structural
(one bytes object for every client), not a reading of the process's memory.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.models.din import DIN
from secemb.privacy.randomized_response import get_cpp
from secemb.protocols.sfsl.parties import SFSLDevice, SFSLServer, TrainingSettings
from secemb.protocols.sfsl.protocol import ExchangePlayer
from secemb.protocols.sfsl.staged import SFSL_PLAN, SFSLNode
from secemb.randomness import CtrDrbg
from secemb.secagg import SecAggClient, SecAggConfig, SecAggServer
from secemb.secagg.identity import Roster
from secemb.sim.local import LocalStageServer
from secemb.sim.player import Rounds

ROWS = {0: [0, 1, 2, 3], 1: [1, 2, 4], 2: [2, 3, 5]}


def _key_lists(cfg: SecAggConfig) -> dict[int, bytes]:
    roster = Roster.generate()
    server = SecAggServer(cfg)
    for u, rows in ROWS.items():
        client = SecAggClient(u, cfg, identity=roster.enroll(u) if cfg.signed else None)
        server.receive_advertise(u, client.advertise(np.array(rows)) if cfg.sparse else client.advertise())
    return server.keys_messages()


@pytest.mark.parametrize("sparse", [False, True])
def test_a_signed_round_s_key_list_is_one_bytes_object_for_every_client(sparse: bool) -> None:
    cfg = SecAggConfig(length=8, threshold=2, width=2, round_id=1, sparse=sparse, signed=True)
    lists = _key_lists(cfg)
    assert sorted(lists) == [0, 1, 2]
    assert len({id(m) for m in lists.values()}) == 1


def test_an_unsigned_sparse_round_s_key_lists_differ_per_client() -> None:
    # each ends with the recipient's own bitmaps of the rows its peers share with it
    lists = _key_lists(SecAggConfig(length=8, threshold=2, width=2, round_id=1, sparse=True))
    assert len(set(lists.values())) == 3


def test_an_sfsl_node_keeps_one_key_list_per_secure_aggregation() -> None:
    """One engine round of SFSL (5 devices): the answers of psu-advertise and of sum-advertise,
    as the node keeps them once the stage closes (until the next stage closes: the node then
    releases them), are one bytes object each."""
    n = 5
    train, _ = split_clicks(TaobaoShaped("taobao-mini", seed=4).clients(np.arange(n)))
    model = DIN(num_categories=train.num_categories, dim=6)
    rng = np.random.default_rng(0)
    table, dense = model.init_public(train.num_goods, rng)
    users = model.init_private(train.num_users, rng)
    b = train.user_bounds()
    devices = {u: SFSLDevice(u, train.subset(slice(b[u], b[u + 1])), get_cpp("CPP2"), model, users[u])
               for u in range(n)}
    server = SFSLServer(model, table, dense, train.goods_category)
    settings = TrainingSettings(lr=0.5, batch=4, bound=0.5)
    node = SFSLNode(server, settings)
    seen: dict[str, list[bytes | None]] = {}
    close = node.close

    def closing(round_id: int, stage: str) -> None:  # read the key lists while the node holds them
        close(round_id, stage)
        if stage in ("psu-advertise", "sum-advertise"):
            seen[stage] = [node.reply(round_id, stage, u) for u in range(n)]

    node.close = closing  # type: ignore[method-assign]
    local = LocalStageServer(node)
    player = ExchangePlayer(Rounds(SFSL_PLAN, local.admin, local.link, lambda: b""), server.space, node.bloom,
                            server.table.shape)
    rep = player.play(devices, 1, settings, rng, psu_drop_after={}, drop_after={}, _rng=CtrDrbg(1))
    assert node.outcome(1)["state"] == "committed" and rep.union_size > 0
    assert set(seen) == {"psu-advertise", "sum-advertise"}
    for stage, answers in seen.items():
        assert all(a is not None for a in answers)
        assert len({id(a) for a in answers}) == 1, stage
