"""SFSL rounds on taobao-mini devices and their plaintext twins, for the SFSL tests of
tests/protocols (imported by name, as :mod:`secea_helpers` is).  The devices' data and the
models' initial weights are test data (numpy's generator, fixed seeds), not secrets; the twin's
sums are numpy's, never the code under test.
"""

from __future__ import annotations

import numpy as np

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.models.din import DIN
from secemb.privacy.randomized_response import get_cpp
from secemb.protocols.sfsl import SFSLDevice, SFSLServer, TrainingSettings


def world(preset: str, n: int = 5, seed: int = 0) -> tuple[SFSLServer, dict[int, SFSLDevice]]:
    """``n`` taobao-mini devices of randomized-response preset ``preset`` (CPP1 draws no
    perturbation coins, so a twin trains on the same sets) and their server, DIN at d = 6."""
    train, _ = split_clicks(TaobaoShaped("taobao-mini", seed=4).clients(np.arange(n)))
    model = DIN(num_categories=train.num_categories, dim=6)
    rng = np.random.default_rng(seed)
    table, dense = model.init_public(train.num_goods, rng)
    users = model.init_private(train.num_users, rng)
    b = train.user_bounds()
    devices = {u: SFSLDevice(u, train.subset(slice(b[u], b[u + 1])), get_cpp(preset), model, users[u])
               for u in range(n)}
    return SFSLServer(model, table, dense, train.goods_category), devices


def plaintext_twin(server: SFSLServer, devices: dict[int, SFSLDevice], round_id: int, survivors: list[int],
                   settings: TrainingSettings) -> int:
    """Round ``round_id`` in plaintext on ``server``: a plain union, every device trains (id
    order, the secure round's rng, seed 11), and the sum over ``survivors`` of the rows at least
    ``settings.min_row_holders`` of them hold (a device contributes zero on a row fewer hold;
    with 1 every row a survivor holds: the paper's sum), applied.  Returns the number of rows
    exactly one survivor holds."""
    rng = np.random.default_rng(11)
    union = np.unique(np.concatenate([devices[u].real for u in sorted(devices)]))
    trained = {}
    for u in sorted(devices):
        reply = server.reply(devices[u].request(union, round_id), round_id)
        trained[u] = devices[u].train(reply, round_id, server.space, settings, rng)
    held = np.zeros(server.space.length, np.int64)
    for u in survivors:
        held[trained[u][0]] += 1
    total = np.zeros((server.space.length, server.space.width), np.uint32)
    for u in survivors:
        rows, values = trained[u]
        keep = held[rows] >= settings.min_row_holders
        total[rows[keep]] += values[keep]  # uint32: wraps like Z_2^32
    server.apply(total, settings)
    return int(np.count_nonzero(held == 1))
