"""The round document announces the SHA-256 of the servers' public item features
(``model.item_features_sha256``, :meth:`FeatureSet.public_sha256`); a device that builds its
feature model (FM, DeepFM) from its own copy of the features checks it before it sends
anything: the SDK (:meth:`RoundInfo.check_model`, :meth:`Device.participate`) and
``secemb client`` (exit 2 naming where its features come from).  A malformed hash from a
server is an :class:`InvalidMessage`; a feature model with no announced hash is refused (the
servers' fault: nothing to check against)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from _client_cli import ADAM, SERVERS, run_client

from secemb.client.device import Device, DeviceClient, RoundInfo
from secemb.data import load_dataset
from secemb.data.features import load_features, synthetic_features
from secemb.sim.local import InProcessServers, LocalServerLink
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.models import get_model
from secemb.protocols import get_protocol
from secemb.protocols.base import RoundConfig

NUM_USERS, NUM_ITEMS = 30, 40
SETTINGS = {"num_items": NUM_ITEMS, "num_users": NUM_USERS, "model": "fm", "model_hparams": {"dim": 4, "reg": 0.1},
            "m_prime": 4, "protocol": "secemb", "layout": "full", "relay": False, "min_users": 2,
            "protocol_options": {"bound": False}}  # the unbounded protocol these nodes run (a configuration's default is on)


def _features(seed: int) -> Any:
    return synthetic_features("ml-100k", NUM_USERS, NUM_ITEMS, seed=seed)


def test_public_sha256_covers_the_item_matrix_and_sizes_only() -> None:
    a, b = _features(2), _features(3)
    assert a.public_sha256() == a.for_device(5).public_sha256()  # one device's row: the same public part
    assert a.public_sha256() == dataclasses.replace(a, item_names=()).public_sha256()  # names do not enter
    assert a.public_sha256() != b.public_sha256() and not np.array_equal(a.item, b.item)
    flipped = a.item.copy()
    flipped[0, 0] ^= 1
    assert dataclasses.replace(a, item=flipped).public_sha256() != a.public_sha256()  # one bit of one item


def test_servers_announce_and_the_sdk_device_checks_the_item_features() -> None:
    """In process, server 0 and server 1 announce the features' hash in the round document; a
    device with the servers' features passes the check, one with another copy (same sizes) is
    refused by :meth:`Device.participate` before it sends a byte."""
    servers = InProcessServers(SETTINGS, get_protocol("secemb", layout="full", relay=False),
                               get_model("fm", dim=4, reg=0.1, features=_features(2)))
    leader, follower = servers.nodes
    leader.open_round(participants=[1, 2])
    client = DeviceClient.over(1, (LocalServerLink(leader, 1, servers.tp), LocalServerLink(follower, 1, servers.tp)),
                               min_users=2)
    info = client.round_info()  # both servers' documents, compared
    assert info.model["item_features_sha256"] == _features(2).public_sha256()
    info.check_model(info.make_model(_features(2).for_device(1)))
    mine = info.make_model(_features(3).for_device(1))
    assert info.fits(mine)  # the sizes cannot tell
    sent = servers.tp.total_bytes()
    device = Device(client, np.array([0, 1]), np.array([4.0, 3.0]))
    with pytest.raises(InvalidParameters, match="this device's item features differ from the servers'"):
        device.participate(info, model=mine)
    assert servers.tp.total_bytes() == sent


def _info(model: dict[str, Any]) -> RoundInfo:
    fm = get_model("fm", dim=4, reg=0.1, features=_features(2))
    return RoundInfo(3, "open", 0, 2, 2, 0.0, RoundConfig(3, NUM_ITEMS, fm.sparse_width, fm.dense_size, 4), {},
                     model, {}, "f" * 64, True)


def test_a_feature_model_without_an_announced_hash_is_the_servers_fault() -> None:
    info = _info({"name": "fm", "hparams": {"dim": 4, "reg": 0.1}})
    with pytest.raises(InvalidMessage, match="announces no SHA-256 of the servers' item features"):
        info.check_model(info.make_model(_features(2)))
    announced = _info({"name": "fm", "hparams": {"dim": 4}, "item_features_sha256": _features(2).public_sha256()})
    with pytest.raises(InvalidParameters):  # a model without features where the servers use them
        announced.check_model(get_model("fm", dim=4))


# the item features' hash, and the frozen recommender table's of a denoiser's round
# (test_round_recommender_table.py)
@pytest.mark.parametrize("key", ["item_features_sha256", "recommender_table_sha256"])
@pytest.mark.parametrize("sha", ["F" * 64, "0" * 63, "0" * 65, 7, ["0" * 64], "g" * 64])
def test_a_malformed_announced_hash_is_an_invalid_message(key, sha) -> None:
    doc = {"round_id": 3, "state": "open", "model_version": 0, "n_p": 2, "min_users": 2, "deadline_unix": 0.0,
           "config": dataclasses.asdict(RoundConfig(3, NUM_ITEMS, 5, 1, 4)), "protocol": {},
           "model": {"name": "fm", "hparams": {"dim": 4}, key: sha}, "training": {}, "fingerprint": "f" * 64}
    with pytest.raises(InvalidMessage, match=key):
        RoundInfo.from_doc(doc)
    RoundInfo.from_doc({**doc, "model": {**doc["model"], key: "0" * 64}})  # well formed


def test_secemb_client_with_other_item_features_exits_2_before_any_request(monkeypatch) -> None:
    """``secemb client --dataset synthetic-mini --seed 1``: the stand-in's features of seed 1,
    of the same sizes as the servers' (seed 0), differ: exit 2 naming the dataset the
    features come from, and the device sends nothing."""
    data = load_dataset("synthetic-mini", seed=0)
    servers_feats = load_features("synthetic-mini", num_users=data.num_users, num_items=data.num_items, seed=0)
    fm = get_model("fm", dim=4, reg=0.1, features=servers_feats)
    info = RoundInfo(3, "open", 0, 2, 2, 0.0, RoundConfig(3, data.num_items, fm.sparse_width, fm.dense_size, 4),
                     {}, {"name": "fm", "hparams": {"dim": 4, "reg": 0.1},
                          "item_features_sha256": servers_feats.public_sha256()}, ADAM, "f" * 64, True)
    error = run_client(monkeypatch, info, [*SERVERS, "--seed", "1"], 2, "seed 1")["error"]
    assert "this device's item features differ from the servers'" in error and "synthetic-mini" in error, error
