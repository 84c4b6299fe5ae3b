"""A device reads the round document the servers announce (``GET /round``): every field of it,
missing or replaced by a value of another type or out of range, is either accepted or refused
with a :class:`~secemb.errors.SecembError` (``InvalidMessage``: the servers' fault; exit 1 in
``secemb client``) by what the device builds before it sends anything -- never a ``KeyError``,
``TypeError`` or other traceback."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from secemb.client.device import DeviceClient, RoundSession
from secemb.sim.local import InProcessServers, LocalServerLink
from secemb.errors import SecembError
from secemb.models import get_model
from secemb.protocols import get_protocol

SETTINGS = {"num_items": 40, "num_users": 30, "model": "mf", "model_hparams": {"dim": 4}, "m_prime": 4,
            "protocol": "secemb", "layout": "cuckoo", "relay": True, "min_users": 2,
            "protocol_options": {"bound": False}}  # the unbounded protocol these nodes run (a configuration's default is on)
#: what a field is replaced by (besides being deleted)
BAD = [None, "x", -1, 0, 2**70, 1.5, float("nan"), [], {}, True, [1], {"a": 1}]


def _paths(doc: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, value in doc.items():
        yield (*prefix, key)
        if isinstance(value, dict):
            yield from _paths(value, (*prefix, key))


@pytest.fixture(scope="module")
def announced() -> tuple[InProcessServers, dict[str, Any]]:
    servers = InProcessServers(SETTINGS, get_protocol("secemb", layout="cuckoo", relay=True), get_model("mf", dim=4))
    servers.nodes[0].open_round(participants=[1, 2])
    return servers, servers.nodes[0].round_info(1)


#: stands for "the field deleted"
_DELETE = object()


def _mutated(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    if value is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


def test_every_mutated_field_is_accepted_or_refused_cleanly(announced) -> None:
    servers, base = announced
    leader, follower = servers.nodes
    paths = list(_paths(base))
    assert {("protocol", "name"), ("model", "hparams", "dim"), ("training", "frac_bits"),
            ("config", "m_prime")} <= set(paths)
    escaped = []
    for path in paths:
        for value in [*BAD, _DELETE]:
            doc = _mutated(base, path, value)

            class Announcing(LocalServerLink):
                def round_info(self) -> dict[str, Any]:
                    return copy.deepcopy(doc)

            client = DeviceClient.over(1, (Announcing(leader, 1, servers.tp), Announcing(follower, 1, servers.tp)),
                                       min_users=2)
            try:  # what Device.participate builds before its first request
                info = client.round_info()
                model = info.make_model()
                info.check_model(model)
                info.adam()
                RoundSession(client, info, protocol=info.make_protocol(), task=model.task, clip=info.clip())
            except SecembError:
                pass
            except Exception as exc:  # noqa: BLE001 -- what the test looks for
                escaped.append((".".join(path), "deleted" if value is _DELETE else repr(value), repr(exc)))
    assert not escaped, escaped[:10]
