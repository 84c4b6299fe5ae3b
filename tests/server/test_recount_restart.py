"""Issue 33, "the recount rule is lost on restart": server 1 releases count sums (Eq. 11) over
the user set of its first released sum only, so that two sums never differ by one user's
share; that set is journaled before the first sum leaves, so a restart (kill -9) does not
forget it."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.round import messages
from secemb.server.config import ServerConfig
from secemb.server.errors import Conflict
from secemb.server.node import make_node
from secemb.server.persist import StorageError
from secemb.server.store import DiskStore

SETTINGS = {"num_items": 40, "num_users": 30, "model": "mf", "model_hparams": {"dim": 4, "reg": 0.01},
            "protocol": "secemb", "layout": "cuckoo", "relay": True, "min_users": 3}
USERS = [0, 1, 2, 3, 4]


def _cfg(tmp_path) -> ServerConfig:
    return ServerConfig(party=1, peer_url="https://127.0.0.1:9", state_dir=tmp_path, peer_secret=b"p" * 32,
                        admin_secret=b"a" * 32, user_secret=b"u" * 32, **SETTINGS)


def _server1(tmp_path):
    """Server 1 on its state directory (a fresh process after a kill -9 reads the same files)."""
    cfg = _cfg(tmp_path)
    return make_node(cfg, store=DiskStore(tmp_path, 1, cfg.fingerprint()))


def _count(node, users: list[int]) -> None:
    """A count phase at server 1: each of ``users`` sends a share of its count (here, 7)."""
    node.peer_count_open(users)
    for u in users:
        node.count_submit(u, messages.encode_count(np.array([7], dtype=np.uint32), 32, party=1))
    assert node.peer_count_close() == users


def test_recount_rule_survives_restart(tmp_path):
    node = _server1(tmp_path)
    _count(node, USERS)
    node.peer_count_share(USERS)  # the first count: released over USERS
    again = _server1(tmp_path)  # server 1 restarted (its memory lost)
    _count(again, USERS)
    with pytest.raises(Conflict, match="recount must cover"):
        again.peer_count_share(USERS[:-1])  # one user fewer: its count would follow by difference
    again.peer_count_share(USERS)  # the first count's set is still answered


def test_first_count_is_not_released_when_its_set_cannot_be_journaled(tmp_path, monkeypatch):
    node = _server1(tmp_path)
    _count(node, USERS)

    def full(record):
        raise StorageError("disk full")

    monkeypatch.setattr(node.store, "append", full)
    with pytest.raises(StorageError):
        node.peer_count_share(USERS)
    monkeypatch.undo()
    first = USERS[:-1]
    node.peer_count_share(first)  # nothing was released before: this is the first count, journaled
    again = _server1(tmp_path)
    _count(again, USERS)
    with pytest.raises(Conflict, match="recount must cover"):
        again.peer_count_share(USERS)
