"""The set-up of the two-server SecEmb round tests of tests/protocols, tests/review and tests/fss:
:func:`begin` a round at both servers.  A module of its own (not conftest.py: tests/server has
a conftest of its own, so ``import conftest`` is ambiguous); the fixture ``secemb_round`` of
tests/conftest.py hands out the same function."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from secemb.protocols.backends import Backend
    from secemb.protocols.base import RoundConfig
    from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer


class SecEmbRound(NamedTuple):
    """A begun round: ``proto``, its ``cfg``, the generator ``rng`` the table was drawn from
    (the caller draws the users' items from it next), the ``table`` and servers ``s0``, ``s1``."""

    proto: SecEmbProtocol
    cfg: RoundConfig
    rng: np.random.Generator
    table: np.ndarray
    s0: SecEmbServer
    s1: SecEmbServer


#: the servers' sketch key of :func:`begin`'s rounds (verified uploads: the replies carry sketch
#: seeds derived from it), fixed and public: a test's
SKETCH_KEY = bytes(range(32))


def begin(*, layout: str, relay: bool, round_id: int, num_items: int, width: int, dense_size: int, m_prime: int,
          seed: int, backend: Backend | None = None, verify: bool = True,
          sketch_key: bytes | None = SKETCH_KEY) -> SecEmbRound:
    """Round ``round_id`` of a ``SecEmbProtocol(layout, relay, backend, verify)`` over a
    ``num_items`` x ``width`` table of uint32 drawn from ``default_rng(seed)`` (``dense_size``
    dense values, ``m_prime`` slots a user), begun at two new servers holding ``sketch_key``
    (:data:`SKETCH_KEY` by default, so that two rounds set up alike give the same replies;
    ``None``: the protocol object's own, drawn fresh).  The servers are made in process
    (``make_server`` without a peer key), so they take the protocol object's key, here set to
    ``sketch_key`` itself: the byte pins of tests/protocols/test_secemb_device_bytes.py were
    taken with this key."""
    from secemb.protocols.secemb import SecEmbProtocol

    proto = SecEmbProtocol(layout=layout, relay=relay, backend=backend, verify=verify)
    cfg = proto.round_config(round_id, num_items, width, dense_size, m_prime)
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 2**32, (num_items, width), dtype=np.uint64).astype(np.uint32)
    if sketch_key is not None:
        proto._sketch_key = sketch_key
    s0, s1 = proto.make_server(0), proto.make_server(1)
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)
    return SecEmbRound(proto, cfg, rng, table, s0, s1)


def deliver_upload(s0: SecEmbServer, s1: SecEmbServer, relay: bool, uid: int, u0: bytes, u1: bytes | None) -> None:
    """Device ``uid``'s upload messages ``u0`` (to server 0) and ``u1`` (to server 1; ``None`` with
    relay) delivered as the round plan routes them: with ``relay`` server 0 forwards to server 1."""
    fwd = s0.handle_upload(uid, u0)
    if relay:
        assert fwd is not None
        s1.relay_upload(uid, fwd)
    else:
        assert u1 is not None
        s1.handle_upload(uid, u1)
