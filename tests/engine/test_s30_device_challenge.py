"""The device SDK checks server 0's bound challenge against the interface's length
(:data:`~secemb.protocols.base.BOUND_CHALLENGE_BYTES`, session 30: it no longer imports SecEmb's
bounds for it): a challenge of another length, or not bytes, is refused as an
:class:`InvalidMessage` before the role proves anything, and nothing is sent; SecEmb's challenge
is that length."""

from __future__ import annotations

import pytest
from test_bounded_nodes import USERS, _nodes, _open, _servers, _upload

from secemb.errors import InvalidMessage
from secemb.protocols.base import BOUND_CHALLENGE_BYTES
from secemb.protocols.secemb import bounds
from secemb.randomness import SEED_BYTES


def test_secembs_challenge_has_the_interfaces_length() -> None:
    """The constant is the seed the projections take, and what server 0 hands out."""
    assert BOUND_CHALLENGE_BYTES == bounds.CHALLENGE_BYTES == SEED_BYTES == 16
    servers = _servers()
    r = _open(servers)
    _upload(servers, USERS[0])
    assert len(_nodes(servers)[0].challenge(r, USERS[0])) == BOUND_CHALLENGE_BYTES


@pytest.mark.parametrize("challenge", [bytes(15), bytes(17), b"", bytearray(16), "x" * 16])
def test_the_device_refuses_a_challenge_of_another_length(monkeypatch: pytest.MonkeyPatch,
                                                          challenge: object) -> None:
    servers = _servers()
    _open(servers)
    session = _upload(servers, USERS[0])
    link = session.client.links[0]
    sent: list[bytes] = []
    monkeypatch.setattr(link, "challenge", lambda round_id: challenge)
    monkeypatch.setattr(link, "proof", lambda round_id, body: sent.append(body))
    monkeypatch.setattr(session.role, "bound_proof", lambda c: pytest.fail("the role proved a bad challenge"))
    with pytest.raises(InvalidMessage, match=f"server 0's bound challenge is not {BOUND_CHALLENGE_BYTES} bytes"):
        session.prove()
    assert sent == []
