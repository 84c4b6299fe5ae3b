"""What the SecEA protocol tests share: a node, its in-process exchange and N silos after the
set-up round (key directory and union), drawn from one seeded DRBG (tests only); the silos sign
their keys with identities of a roster of the test's own (:data:`ROSTER`)."""

from __future__ import annotations

import numpy as np

from secemb.sim.local import LocalStageServer
from secemb.sim.player import play
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.staged import SECEA_SETUP_PLAN, SecEANode, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import CtrDrbg
from secemb.secagg.identity import Roster

KEY_BITS = 1024  # the smallest accepted
#: the tests' deployment roster (the operator's key; each silo i is enrolled as device i)
ROSTER = Roster.generate()


def set_up_secea(sets: list[list[int]], dim: int = 2, seed: int = 0, n: int | None = None,
                 t: int = 1) -> tuple[SecEAParams, SecEANode, LocalStageServer, list[SecEAClient]]:
    """Silos ``0..len(sets)-1`` holding ``sets`` (``n``: the deployment's N, default their
    count), threshold ``t``, embeddings of ``dim``; the set-up round played, every silo in."""
    params = SecEAParams(n or len(sets), t, dim=dim)
    rng = CtrDrbg(seed)
    bloom = union_bloom(16, sum(len(s) for s in sets))
    node = SecEANode(params, bloom, _rng=rng)
    ex = LocalStageServer(node)
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=ROSTER.enroll(i), _rng=rng)
               for i, s in enumerate(sets)]
    ex.admin.open_round(0, list(range(len(sets))))
    parties = {i: SecEASetupParty(c, bloom, _rng=rng) for i, c in enumerate(clients)}
    rec = play(SECEA_SETUP_PLAN, ex.admin, {i: ex.link(i) for i in parties}, parties, 0)
    assert rec.finished == list(range(len(sets)))
    return params, node, ex, clients
