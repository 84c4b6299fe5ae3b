"""A SecEA silo whose own process restarts cannot take part again (docs/secea.md, "A silo's
restart"): ``make_device`` -- what ``secemb client`` builds at start -- gives it fresh X25519 and
Paillier keys and neither the key directory nor the entity union, and the server opens no second
set-up once one has committed, so the deployment must start again from a fresh directory.  The
silos that kept running are not affected (tests/server/test_exchange_state.py: the server's own
restart)."""

from __future__ import annotations

import pytest

from secemb.data import load_movielens, train_test_split
from secemb.errors import ProtocolError
from secemb.protocols.exchange import ExchangeRun
from secemb.protocols.secea.protocol import SecEAProtocol
from secemb.protocols.stages import SECEA_STAGES
from secemb.sim.player import connect_local


def test_a_restarted_silo_has_new_keys_no_union_and_gets_no_new_set_up():
    split = train_test_split(load_movielens("ml-100k"), 0.2, 0)
    proto = SecEAProtocol(ExchangeRun("ml-100k", epochs=1, seed=0), dim=2, secea_items=5, secea_key_bits=1024,
                          data=split)
    hosted = proto.make_server()
    rounds = connect_local(hosted)
    silos = {u: proto.make_device(u) for u in range(3)}
    setup = rounds.play(0, {u: s.setup_party(0) for u, s in silos.items()})
    assert setup.finished == [0, 1, 2] and setup.outcome["state"] == "committed"

    restarted = proto.make_device(2)  # silo 2's process started again
    assert restarted.client.hello() != silos[2].client.hello()  # other keys than the directory holds
    doc = hosted.node.open_round(1, [0, 1, 2])
    assert doc["setup"] is False and doc["stages"] == list(SECEA_STAGES)  # no second set-up
    party = restarted.party(doc)
    with pytest.raises(ProtocolError, match="directory and the union"):
        party.message("secea-share")
    silos[0].party(doc).message("secea-share")  # a silo that kept running goes on
