"""A plug-in protocol whose ``make_server`` predates the keyword ``peer_key`` (session 30 made the
node call ``make_server(party, peer_key=peer secret)`` for every protocol) is refused when the
node builds its role: ``secemb serve`` exits 2 with one clear line, no traceback; the node in
process raises :class:`InvalidParameters`.  A ``make_server`` that takes the keyword in another
way (``**kwargs``, positional-or-keyword) is accepted, and a ``TypeError`` raised inside a
``make_server`` of the right signature is not mistaken for an old signature."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import run_cli  # type: ignore[import-not-found]  # noqa: E402

from secemb.errors import InvalidParameters  # noqa: E402
from secemb.protocols import protocol_class, register_protocol, unregister_protocol  # noqa: E402
from secemb.protocols.base import Protocol, ServerRole  # noqa: E402
from secemb.server.config import ServerConfig  # noqa: E402
from secemb.server.node import make_node  # noqa: E402
from secemb.server.store import MemoryStore  # noqa: E402

NAME = "olddownload"
WHY = f"protocol {NAME!r}'s make_server must accept the keyword peer_key (docs/protocol.md, 'Adding a protocol')"
_BASE: dict[str, Any] = dict(peer_url="http://127.0.0.1:1", peer_secret="11" * 32, admin_secret="22" * 32,
                             user_secret="33" * 32, num_items=50, num_users=20, insecure_http=True,
                             protocol=NAME, layout="full", relay=False)


def _variant(fulldownload: str, make_server: Any) -> type[Protocol]:  # noqa: ANN401 - a function
    """The example plug-in's protocol with ``make_server`` replaced."""
    return type("Variant", (protocol_class(fulldownload),), {"make_server": make_server})


def _old(self: Any, party: int) -> ServerRole:  # noqa: ANN401 - the signature before session 30
    return protocol_class("fulldownload")().make_server(party)


def _any_kw(self: Any, party: int, **kw: Any) -> ServerRole:  # noqa: ANN401
    return protocol_class("fulldownload")().make_server(party)


def _positional_kw(self: Any, party: int, peer_key: bytes | None = None) -> ServerRole:  # noqa: ANN401
    return protocol_class("fulldownload")().make_server(party)


def _raises_inside(self: Any, party: int, *, peer_key: bytes | None = None) -> ServerRole:  # noqa: ANN401
    raise TypeError("a bug inside make_server")


@pytest.fixture
def register(fulldownload_plugin: str) -> Iterator[Any]:
    """``register(make_server)``: the example plug-in's protocol with that ``make_server``,
    registered as :data:`NAME` for the test."""
    registered: list[str] = []

    def reg(make_server: Any) -> None:  # noqa: ANN401
        register_protocol(NAME, _variant(fulldownload_plugin, make_server), wire_id=201)
        registered.append(NAME)

    yield reg
    for name in registered:
        unregister_protocol(name)


def _node(tmp_path: Path, party: int) -> Any:  # noqa: ANN401
    cfg = ServerConfig(state_dir=tmp_path / f"s{party}", party=party, **_BASE)
    return make_node(cfg, store=MemoryStore(party, "f"), start_threads=False)


@pytest.mark.parametrize("party", [0, 1])
def test_the_node_refuses_a_make_server_without_peer_key(tmp_path: Path, register: Any, party: int) -> None:
    register(_old)
    with pytest.raises(InvalidParameters) as caught:
        _node(tmp_path, party)
    assert str(caught.value) == WHY


@pytest.mark.parametrize("make_server", [_any_kw, _positional_kw])
def test_a_make_server_taking_peer_key_otherwise_is_accepted(tmp_path: Path, register: Any,
                                                             make_server: Any) -> None:  # noqa: ANN401
    register(make_server)
    node = _node(tmp_path, 0)
    try:
        assert node.role.party == 0
    finally:
        node.stop()


def test_a_type_error_inside_make_server_is_not_called_an_old_signature(tmp_path: Path, register: Any) -> None:
    register(_raises_inside)
    with pytest.raises(TypeError, match="a bug inside make_server"):
        _node(tmp_path, 0)


def test_secemb_serve_refuses_an_old_make_server_with_one_error_line(tmp_path: Path, register: Any) -> None:
    register(_old)
    path = tmp_path / "server0.toml"
    path.write_text(f'[server]\nparty = 0\nport = 0\npeer_url = "http://127.0.0.1:1"\nstate_dir = "{tmp_path / "s"}"\n'
                    '[secrets]\npeer = "' + "11" * 32 + '"\nadmin = "' + "22" * 32 + '"\nusers = "' + "33" * 32 +
                    f'"\n[model]\nnum_items = 50\nnum_users = 20\n[protocol]\nname = "{NAME}"\nlayout = "full"\n'
                    'relay = false\n')
    res = run_cli("serve", "--config", str(path), "--insecure-http")
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and res.exception is None or isinstance(res.exception, SystemExit)
    assert res.stderr.strip().splitlines()[-1] == f"error: {WHY}", res.stderr
