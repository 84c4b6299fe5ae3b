"""Session 21 (helper C): what ``MemoryStore`` keeps of a checkpoint, and who else can write it.

``MemoryStore._write`` keeps a checkpoint's arrays themselves where they own their memory,
made read-only, so that a node's model and optimizer state are not held twice.  Its docstring
said no other array can change such an array then; numpy cannot revoke a view taken before the
array was frozen, so that holds only for what is taken afterwards.  What the store relies on is
that the nodes hold no such view: after rounds of the in-process two-server engine, no array or
tensor reachable from either node other than the stored ones shares memory with a stored array
and is writable.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch

from secemb.client.device import Device
from secemb.data import by_user, synthetic_like
from secemb.models import MatrixFactorization
from secemb.protocols.secemb import SecEmbProtocol
from secemb.server.node import LeaderNode
from secemb.server.store import CHECKPOINT, Checkpoint, MemoryStore, StateStore
from secemb.sim.local import InProcessServers
from secemb.sim.settings import cluster_settings
from secemb.training import TrainConfig

DATA = synthetic_like(30, 40, 600, seed=3)
RATINGS = by_user(DATA)
USERS = [u for u in range(DATA.num_users) if RATINGS.of(u)[0].size][:4]


def _checkpoint(table: np.ndarray, dense: np.ndarray) -> Checkpoint:
    return Checkpoint(1, 0, [], None, None, table, dense, "0" * 64)


def test_an_owned_array_is_kept_read_only_and_a_view_is_copied() -> None:
    store = MemoryStore(0, "f")
    table, base = np.zeros((3, 2)), np.zeros(8)
    dense = base[2:6]  # a view: copied, so writes through base cannot reach the checkpoint
    store.save(_checkpoint(table, dense))
    assert not table.flags.writeable  # kept itself (not held twice), read-only
    base[:] = 7.0
    later = table[1:]  # a view taken afterwards is read-only too
    assert not later.flags.writeable
    ck = store.load()
    assert ck is not None and np.array_equal(ck.dense, np.zeros(4)) and np.array_equal(ck.table, np.zeros((3, 2)))


def test_a_view_taken_before_the_save_can_still_write_the_checkpoint() -> None:
    """What the docstring now states: numpy cannot revoke an earlier view, so the store relies
    on its callers holding none (the next test checks the nodes)."""
    store = MemoryStore(0, "f")
    table = np.zeros((3, 2))
    earlier = table[0]
    store.save(_checkpoint(table, np.zeros(4)))
    earlier[:] = 5.0
    ck = store.load()
    assert ck is not None and ck.table[0, 0] == 5.0
    # what the next test looks for, found here: a writable array sharing the stored one's memory
    found = _reachable({"held": [earlier, torch.as_tensor(np.ones(2))]}, skip=(StateStore,))
    assert [a.flags.writeable and np.shares_memory(a, table) for a in found if isinstance(a, np.ndarray)] == [True]


def _reachable(root: Any, skip: tuple[type, ...]) -> list[Any]:
    """The numpy arrays and torch tensors reachable from ``root`` through the attributes of
    secemb objects and through dicts, lists, tuples and sets (not through ``skip`` objects)."""
    found, seen, todo = [], set(), deque([root])
    while todo:
        obj = todo.popleft()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        if isinstance(obj, (np.ndarray, torch.Tensor)):
            found.append(obj)
        elif isinstance(obj, dict):
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            todo.extend(obj)
        elif type(obj).__module__.startswith("secemb"):
            todo.extend(getattr(obj, "__dict__", {}).values())
            todo.extend(getattr(obj, s) for s in getattr(type(obj), "__slots__", ()) if hasattr(obj, s))
    return found


def test_no_node_holds_a_writable_view_of_a_stored_array() -> None:
    model = MatrixFactorization(dim=4, reg=0.01)
    proto = SecEmbProtocol(layout="cuckoo", relay=True)
    settings = cluster_settings(model, proto, DATA, TrainConfig(m_prime=4, seed=5), deadline_s=30.0, min_users=3)
    srv = InProcessServers(settings, proto, model)
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    try:
        for _ in range(2):
            r = int(leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])
            for u in USERS:
                client = srv.servers().device(u)
                Device(client, *RATINGS.of(u)).participate(client.round_info())
            assert leader.close_round(r)["state"] == "committed"
        for node in srv.nodes:
            store = node.store
            assert isinstance(store, MemoryStore)
            stored = [a for _, arrays in store._cks.values() for a in arrays.values()]
            assert stored and all(not a.flags.writeable for a in stored)
            assert any(a is node.table for a in stored)  # the model is held once
            held = _reachable(node, skip=(StateStore,))
            assert len(held) > 5
            for a in held:
                writable = a.flags.writeable if isinstance(a, np.ndarray) else True  # a tensor is
                buf = a if isinstance(a, np.ndarray) else a.detach().cpu().numpy()
                if writable and buf.size:
                    clash = [s.shape for s in stored if np.shares_memory(s, buf)]
                    assert not clash, (node.party, buf.shape, clash)
        assert CHECKPOINT in srv.nodes[0].store._cks  # type: ignore[attr-defined]
    finally:
        srv.stop()
