"""The one-server nodes (SFSL's and SecEA's) refuse a round id that is no int in [0, 2^62)
(secemb.errors.check_int), before any state changes: the next good id still opens."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.errors import InvalidParameters
from secemb.models.din import DIN
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.staged import SecEANode
from secemb.protocols.secea.union import union_bloom
from secemb.protocols.sfsl import SFSLServer, TrainingSettings
from secemb.protocols.sfsl.staged import SFSLNode
from secemb.randomness import CtrDrbg

BAD = [True, -1, 2**62, "1", 1.0, None]


def sfsl_node() -> SFSLNode:
    train, _ = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    model = DIN(num_categories=train.num_categories, dim=4)
    table, dense = model.init_public(train.num_goods, np.random.default_rng(0))
    return SFSLNode(SFSLServer(model, table, dense, train.goods_category), TrainingSettings())


def secea_node() -> SecEANode:
    return SecEANode(SecEAParams(3, 1, dim=2), union_bloom(16, 8), key_bits=1024, _rng=CtrDrbg(1))


@pytest.mark.parametrize("make", [sfsl_node, secea_node])
def test_a_round_id_out_of_range_or_of_another_type_is_refused(make: Any) -> None:
    node = make()
    for rid in BAD:
        with pytest.raises(InvalidParameters, match=r"^round_id must be an int in \[0, 2\^62 - 1\], got "):
            node.open_round(rid, [0, 1, 2])
    assert node.open_round(2**62 - 1, [0, 1, 2])["round_id"] == 2**62 - 1
