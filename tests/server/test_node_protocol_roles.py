"""The node makes its server role through one call for every protocol (session 30): the
protocol's ``make_server(party, peer_key=...)`` with the deployment's peer secret, whatever the
protocol; the protocol derives the keys its servers need in common (SecEmb's sketch key, the same
bytes as before the call was generic, so a running deployment's state stays valid)."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

import pytest

from secemb.errors import InvalidParameters
from secemb.protocols import available_protocols, protocol_class
from secemb.protocols.base import ServerRole
from secemb.protocols.secemb import SecEmbProtocol
from secemb.server.config import ServerConfig
from secemb.server.node import make_node
from secemb.server.store import MemoryStore

#: the deployment's peer secret of these tests (hex, as a configuration gives it)
PEER_HEX = "5a" * 40
_BASE: dict[str, Any] = dict(peer_url="http://127.0.0.1:1", peer_secret=PEER_HEX, admin_secret="22" * 32,
                             user_secret="33" * 32, num_items=50, num_users=20)
#: every registered two-server protocol a server node runs
NETWORKED = [name for name in available_protocols(2) if protocol_class(name).capabilities.networked]


def _cfg(tmp_path: Path, party: int, **kw: Any) -> ServerConfig:
    return ServerConfig(state_dir=tmp_path / f"s{party}", party=party, **(_BASE | kw))


def test_every_built_in_two_server_protocol_is_covered() -> None:
    assert {"secemb", "plaintext", "secfedrec", "secemb-init", "secemb-rowenc", "grec", "svd", "colr"} <= set(
        NETWORKED)


@pytest.mark.parametrize("party", [0, 1])
@pytest.mark.parametrize("name", NETWORKED)
def test_the_node_makes_every_protocols_role_with_the_peer_secret(tmp_path: Path, name: str, party: int) -> None:
    """The node's role is what one ``make_server(party, peer_key=peer secret)`` returned -- the
    same call for every protocol, no other."""
    cfg = _cfg(tmp_path, party, protocol=name, layout="full", relay=False)
    proto = cfg.make_protocol()
    calls: list[tuple[tuple[Any, ...], dict[str, Any], ServerRole]] = []
    made = proto.make_server

    def spy(*args: Any, **kwargs: Any) -> ServerRole:
        role = made(*args, **kwargs)
        calls.append((args, kwargs, role))
        return role

    proto.make_server = spy  # type: ignore[method-assign]
    node = make_node(cfg, store=MemoryStore(party, "f"), protocol=proto, start_threads=False)
    try:
        assert [(args, kwargs) for args, kwargs, _ in calls] == [((party,), {"peer_key": bytes.fromhex(PEER_HEX)})]
        assert node.role is calls[0][2] and node.role.party == party
    finally:
        node.stop()


@pytest.mark.parametrize("relay", [False, True])
def test_a_deployments_sketch_key_is_the_hmac_of_its_peer_secret(tmp_path: Path, relay: bool) -> None:
    """Both nodes' SecEmb roles hold ``HMAC-SHA256(peer secret, b"secemb-sketch-key")`` (computed
    here with :mod:`hmac`, and pinned as bytes: the key a deployment has had since session 29)."""
    want = hmac.new(bytes.fromhex(PEER_HEX), b"secemb-sketch-key", hashlib.sha256).digest()
    assert want.hex() == "b9f39eeb4cf37db5b02905a1c202e93d8f0f1c72777028ef7a0454434a300fa1"
    for party in (0, 1):
        node = make_node(_cfg(tmp_path, party, protocol="secemb", layout="cuckoo", relay=relay),
                         store=MemoryStore(party, "f"), start_threads=False)
        try:
            assert node.role._sketch_key == want  # type: ignore[attr-defined]
        finally:
            node.stop()


def test_in_process_servers_share_their_protocols_own_key() -> None:
    """``peer_key=None``: the two servers one protocol object makes hold one key, drawn for that
    object (another object draws another); a peer key gives the same key to any object's servers."""
    a, b = SecEmbProtocol(), SecEmbProtocol()
    assert a.make_server(0)._sketch_key == a.make_server(1)._sketch_key != b.make_server(0)._sketch_key
    key = bytes(range(32))
    assert a.make_server(0, peer_key=key)._sketch_key == b.make_server(1, peer_key=key)._sketch_key
    assert a.make_server(0, peer_key=key)._sketch_key not in (a.make_server(0)._sketch_key, None)
    assert SecEmbProtocol(verify=False).make_server(0, peer_key=key)._sketch_key is None  # no sketch: no key


@pytest.mark.parametrize("key", [b"", bytes(31), "11" * 32])
def test_a_short_or_non_bytes_peer_key_is_refused(key: object) -> None:
    with pytest.raises(InvalidParameters, match="a peer key is bytes of at least 32"):
        SecEmbProtocol().make_server(0, peer_key=key)  # type: ignore[arg-type]
