"""``InProcessServers`` runs the protocol its settings announce: a device builds its protocol from
the round document, so nodes running another one (e.g. unbounded nodes under settings that,
silent on ``bound``, announce bounded payloads -- a configuration's default since session 20)
would pass tests only because their devices ignore the announcement."""

from __future__ import annotations

import pytest

from secemb.errors import InvalidParameters
from secemb.models import get_model
from secemb.protocols import get_protocol
from secemb.sim.local import InProcessServers, server_configs

SETTINGS = {"num_items": 40, "num_users": 30, "model": "mf", "model_hparams": {"dim": 4}, "m_prime": 4,
            "protocol": "secemb", "layout": "cuckoo", "relay": True, "min_users": 2}


@pytest.mark.parametrize(("options", "protocol"), [
    ({}, get_protocol("secemb", layout="cuckoo", relay=True)),  # announced: bound on (the default)
    ({"bound": False}, get_protocol("secemb", layout="cuckoo", relay=True, bound=True, users_per_round=30)),
    ({"bound": False}, get_protocol("secemb", layout="full", relay=False)),
    ({"bound": False}, get_protocol("secemb", layout="cuckoo", relay=True, verify=False)),
])
def test_nodes_refuse_a_protocol_other_than_the_announced_one(options: dict, protocol: object) -> None:
    with pytest.raises(InvalidParameters, match="settings announce"):
        InProcessServers(SETTINGS | {"protocol_options": options}, protocol, get_model("mf", dim=4))  # type: ignore[arg-type]


@pytest.mark.parametrize("options", [{}, {"bound": False}])
def test_nodes_run_the_announced_protocol(options: dict) -> None:
    settings = SETTINGS | {"protocol_options": options}
    servers = InProcessServers(settings, server_configs(settings)[0].make_protocol(), get_model("mf", dim=4))
    try:
        assert servers.nodes[0].protocol.spec() == server_configs(settings)[0].make_protocol().spec()
    finally:
        servers.stop()
