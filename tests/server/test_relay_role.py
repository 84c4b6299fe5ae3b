"""Relay is an optional role (issue 36): the relay steps are :class:`RelayRole`'s, which only
a relay-capable protocol's servers are; a server node refuses a relay deployment of a role
without them, before it writes any state."""

from __future__ import annotations

import dataclasses

import pytest

from secemb.errors import InvalidParameters
from secemb.protocols.base import RelayRole, ServerRole
from secemb.protocols.plaintext import PlaintextProtocol
from secemb.protocols.secemb import SecEmbProtocol
from secemb.server.config import ServerConfig
from secemb.server.node import make_node

RELAY_STEPS = ("relay_retrieval", "relay_retrieval_many", "evaluate_relay_many", "relay_forwards",
               "complete_retrieval", "relay_upload")


def test_relay_steps_belong_to_the_relay_role_only() -> None:
    for name in RELAY_STEPS:
        assert not hasattr(ServerRole, name), name
        assert hasattr(RelayRole, name), name
    for party in (0, 1):
        assert isinstance(SecEmbProtocol(relay=True).make_server(party), RelayRole)
        without = SecEmbProtocol(relay=False).make_server(party)  # a SecEmb server without relay has no relay steps
        assert not isinstance(without, RelayRole) and not any(hasattr(without, name) for name in RELAY_STEPS)
        assert not isinstance(PlaintextProtocol().make_server(party), RelayRole)


class _ClaimsRelay(PlaintextProtocol):
    """A plug-in that declares relay but whose servers have no relay steps."""

    capabilities = dataclasses.replace(PlaintextProtocol.capabilities, relay=True)


@pytest.mark.parametrize("party", [0, 1])
def test_a_relay_deployment_of_a_role_without_relay_steps_is_refused(tmp_path, party: int) -> None:
    cfg = ServerConfig(state_dir=tmp_path, party=party, peer_url="http://127.0.0.1:1", peer_secret="11" * 32,
                       admin_secret="22" * 32, user_secret="33" * 32, num_items=50, num_users=20,
                       protocol="secemb", layout="full", relay=True)
    with pytest.raises(InvalidParameters, match="configured with relay, but its server role PlaintextServer has no "
                                                "relay steps"):
        make_node(cfg, protocol=_ClaimsRelay(relay=True), start_threads=False)
    assert not any(tmp_path.iterdir())  # refused before any state was written
    assert make_node(cfg, protocol=SecEmbProtocol(relay=True), start_threads=False).relay_role is not None
