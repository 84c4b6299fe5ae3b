"""One protocol factory (issue 36): a server's configuration and a device's round document
build their protocol through secemb.protocols.factory.make_protocol, so they read a
description the same way."""

from __future__ import annotations

import pytest

from secemb.client.device import RoundInfo
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.protocols.base import RoundConfig
from secemb.protocols.factory import make_protocol
from secemb.server.config import ServerConfig

_KEYS = dict(party=0, peer_url="http://127.0.0.1:1", peer_secret="11" * 32, admin_secret="22" * 32,
             user_secret="33" * 32, num_items=40, num_users=12)

DPFEDREC = {"name": "dp-fedrec", "layout": "full", "relay": False, "expansion": 1.25, "layout_seed": 7,
            "options": {"sigma": 0.5, "clip": 2.0}}


def _round(description: object) -> RoundInfo:
    return RoundInfo(3, "open", 0, 2, 2, 0.0, RoundConfig(3, 40, 8, 0, 4), description,  # type: ignore[arg-type]
                     {}, {}, "f" * 64, True)


def test_a_description_builds_its_protocol() -> None:
    proto = make_protocol(DPFEDREC)
    assert (proto.name, proto.layout, proto.relay, proto.layout_seed) == ("dp-fedrec", "full", False, 7)
    assert proto.spec() == {"sigma": 0.5, "clip": 2.0}
    plain = make_protocol({k: v for k, v in DPFEDREC.items() if k != "options"} | {"name": "plaintext"})
    assert (plain.name, plain.spec()) == ("plaintext", {})


def test_server_and_device_build_the_same_protocol(tmp_path) -> None:  # noqa: ANN001
    cfg = ServerConfig(state_dir=tmp_path, **_KEYS, protocol="dp-fedrec", layout="full", relay=False,
                       layout_seed=7, protocol_options={"sigma": 0.5, "clip": 2.0})
    assert cfg.protocol_description() == DPFEDREC
    server, device = cfg.make_protocol(), _round(cfg.protocol_description()).make_protocol()
    for proto in (server, device):
        assert (type(proto).__name__, proto.layout, proto.relay, proto.expansion, proto.layout_seed) == (
            "DPFedRecProtocol", "full", False, 1.25, 7)
        assert proto.spec() == {"sigma": 0.5, "clip": 2.0}


@pytest.mark.parametrize("bad", [
    {k: v for k, v in DPFEDREC.items() if k != "relay"},            # a layout option missing
    DPFEDREC | {"backend": "thread"},                                 # a field no description has
    DPFEDREC | {"options": {"sigma": 0.5, "clip": 2.0, "layout": "cuckoo"}},  # options repeat a layout option
    DPFEDREC | {"options": {"backend": "thread"}},                  # the backend is the server's own choice
    DPFEDREC | {"options": ["sigma"]},                              # options not a mapping
    DPFEDREC | {"name": ["dp-fedrec"]},                             # name not a str
    DPFEDREC | {"name": "no-such-protocol"},
    DPFEDREC | {"options": {"sigma": 0.5, "clip": 2.0, "rank": 3}},  # an option dp-fedrec does not take
    ["dp-fedrec"],
])
def test_a_bad_description_is_refused_on_both_sides(bad: object) -> None:
    with pytest.raises(InvalidParameters):
        make_protocol(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="cannot run"):  # the servers' fault, as the device sees it
        _round(bad).make_protocol()


def test_a_server_configuration_may_not_repeat_a_layout_option(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(InvalidParameters, match="repeat"):
        ServerConfig(state_dir=tmp_path, **_KEYS, protocol="secemb", layout="cuckoo",
                     protocol_options={"layout": "full"})
